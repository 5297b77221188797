/* On-demand session results: whole encoded profiles keyed by session.
 *
 * A session's results are few (one per agent that took part, sometimes a
 * handful) and read whole, so they are kept in the wire encoding rather
 * than split into the dictionary and rows of the continuous series: a
 * write is one put, a read one prefix scan and a decode per result.
 *
 *   key:   session id bytes | 0x00 | agent id hash be64 | seq be64
 *   value: format u8 (1) | window start (sign-flipped be64) | encoded profile
 *
 * The window start is in front so retention can judge a row without
 * decoding it. */
#include <assert.h>
#include <errno.h>
#include <string.h>

#include "ember/codec.h"
#include "store_int.h"

#define SESSION_ROW_FORMAT 1
#define SESSION_VAL_HDR    9

_Static_assert(EMBER__SESSION_KEY_TAIL == 1 + 2 * sizeof(uint64_t),
               "session key tail: NUL, agent hash, seq");

/* The key of `p`'s result; `enc` is its encoding (the identity of a profile
 * without an agent id). Returns the key length, or 0 for a bad session id. */
static size_t session_key(const ember_profile_t *p, const ember_buf_t *enc,
                          uint8_t key[EMBER__SESSION_ID_MAX + EMBER__SESSION_KEY_TAIL]) {
  const char *sid = ember_profile_session_id(p);
  size_t n = sid ? strlen(sid) : 0;
  if (n == 0 || n > EMBER__SESSION_ID_MAX) return 0;
  memcpy(key, sid, n);
  key[n] = 0;
  const char *agent = ember_profile_agent_id(p);
  uint64_t h;
  if (agent != NULL && agent[0] != '\0') {
    h = ember__store_hash_final(ember__store_hash(EMBER_STORE_HASH_SEED, agent, strlen(agent)));
    ember__put_be64(key + n + 1, h);
    ember__put_be64(key + n + 9, ember_profile_seq(p));
  } else {
    h = ember__store_hash_final(ember__store_hash(EMBER_STORE_HASH_SEED, enc->data, enc->len));
    ember__put_be64(key + n + 1, 0);
    ember__put_be64(key + n + 9, h);
  }
  return n + EMBER__SESSION_KEY_TAIL;
}

static int retained_cutoff(ember_store_t *s, MDB_txn *txn, int64_t *cutoff) {
  MDB_val k = {.mv_size = strlen(EMBER__META_RETAINED),
               .mv_data = (void *)(uintptr_t)EMBER__META_RETAINED},
          v;
  int mrc = ember__get(s, txn, EMBER__DB_META, &k, &v);
  *cutoff = INT64_MIN;
  if (mrc == MDB_NOTFOUND) return 0;
  if (mrc != MDB_SUCCESS) return ember__store_err(mrc);
  if (v.mv_size != 8) return EMBER_ECORRUPT;
  *cutoff = ember__get_time(v.mv_data);
  return 0;
}

static int add_locked(ember_store_t *s, ember_profile_t *const *profiles, size_t n,
                      ember_store_write_result_t *result);

int ember_store_session_add(ember_store_t *s, ember_profile_t *const *profiles, size_t n,
                            ember_store_write_result_t *result) {
  if (!s) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = add_locked(s, profiles, n, result);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int add_locked(ember_store_t *s, ember_profile_t *const *profiles, size_t n,
                      ember_store_write_result_t *result) {
  if (!s || (n > 0 && !profiles)) return -EINVAL;
  if (s->read_only) return -EACCES;
  for (size_t i = 0; i < n; i++) {
    const char *sid = profiles[i] ? ember_profile_session_id(profiles[i]) : NULL;
    int64_t ws, we;
    if (sid == NULL || sid[0] == '\0' || strlen(sid) > EMBER__SESSION_ID_MAX) return -EINVAL;
    ember_profile_window(profiles[i], &ws, &we);
    if (ws >= we) return -EINVAL;
  }
  ember_store_write_result_t res = {0};
  ember_buf_t enc;
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  ember_buf_init(&enc, lim.max_message + SESSION_VAL_HDR);
  MDB_txn *txn = NULL;
  int64_t cutoff;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &txn));
  if (rc == 0) rc = retained_cutoff(s, txn, &cutoff);
  for (size_t i = 0; i < n && rc == 0; i++) {
    int64_t ws, we;
    ember_profile_window(profiles[i], &ws, &we);
    if (ws < cutoff) {
      res.expired++;
      continue;
    }
    ember_buf_reset(&enc);
    uint8_t hdr[SESSION_VAL_HDR] = {SESSION_ROW_FORMAT};
    ember__put_time(hdr + 1, ws);
    rc = ember_buf_append(&enc, hdr, sizeof hdr);
    if (rc == 0) rc = ember_codec_encode(profiles[i], &enc);
    if (rc != 0) break;
    /* The identity of a profile without an agent id is its encoding. */
    ember_buf_t body = {.data = enc.data + SESSION_VAL_HDR, .len = enc.len - SESSION_VAL_HDR};
    uint8_t key[EMBER__SESSION_ID_MAX + EMBER__SESSION_KEY_TAIL];
    size_t klen = session_key(profiles[i], &body, key);
    assert(klen > 0); /* session ids were checked above */
    MDB_val k = {.mv_size = klen, .mv_data = key}, v = {.mv_size = enc.len, .mv_data = enc.data};
    int mrc = ember__put(s, txn, EMBER__DB_SESSIONS, &k, &v, MDB_NOOVERWRITE);
    if (mrc == MDB_KEYEXIST) {
      res.duplicates++;
    } else {
      rc = ember__store_err(mrc);
      if (rc == 0) res.written++;
    }
  }
  if (rc == 0) {
    rc = ember__store_commit(s, txn);
    txn = NULL;
  }
  if (txn) mdb_txn_abort(txn);
  ember_buf_free(&enc);
  if (rc == 0 && result) *result = res;
  return rc;
}

/* Add value `vi` of every stack of `src` to `dst` (one value type), its
 * frames through the store's frame map when it wants src's worker and
 * version (`buf` is then made, for the map's strings). */
static int add_projected(ember_store_t *s, ember_profile_t *dst, const ember_profile_t *src,
                         size_t vi, char **buf) {
  const ember_labels_t *l = ember_profile_labels(src);
  ember__fm_key_t key = {l->worker, l->version};
  bool mapped = s->fmap.frame != NULL && s->fmap.wants(s->fmap.ctx, l->worker, l->version);
  if (mapped && *buf == NULL && (*buf = ember_malloc(EMBER_STORE_FRAME_MAP_BUF)) == NULL)
    return -ENOMEM;
  size_t nf = ember_profile_nframes(src);
  uint32_t *map = ember_malloc((nf ? nf : 1) * sizeof *map);
  if (map == NULL) return -ENOMEM;
  int rc = 0;
  for (size_t f = 0; f < nf && rc == 0; f++)
    rc = ember__fm_intern(s, mapped ? &key : NULL, ember_profile_frame(src, (uint32_t)f), dst, *buf,
                          &map[f]);
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  for (size_t i = 0; i < ember_profile_nstacks(src) && rc == 0; i++) {
    const uint32_t *fr;
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(src, (uint32_t)i, &fr, &depth, &v);
    if (rc != 0) break;
    assert(depth <= EMBER_MAX_STACK_DEPTH); /* the profile holds no deeper stack */
    for (size_t d = 0; d < depth; d++) ids[d] = map[fr[d]];
    rc = ember_profile_add_ids(dst, ids, depth, &v[vi], NULL);
  }
  ember_free(map);
  return rc;
}

static int merge_locked(ember_store_t *s, const char *session_id, ember_value_type_t value_type,
                        ember_profile_t **out, ember_store_session_info_t *info);

int ember_store_session_merge(ember_store_t *s, const char *session_id,
                              ember_value_type_t value_type, ember_profile_t **out,
                              ember_store_session_info_t *info) {
  if (!s) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = merge_locked(s, session_id, value_type, out, info);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int merge_locked(ember_store_t *s, const char *session_id, ember_value_type_t value_type,
                        ember_profile_t **out, ember_store_session_info_t *info) {
  if (!s || !session_id || !out || ember_value_type_name(value_type) == NULL) return -EINVAL;
  size_t idlen = strlen(session_id);
  if (idlen == 0 || idlen > EMBER__SESSION_ID_MAX) return -EINVAL;
  ember_store_session_info_t inf = {0};
  ember_profile_t *p = NULL;
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  int rc = ember_profile_new(&value_type, 1, &p);
  if (rc != 0) return rc;
  bool first = true, mixed_hosts = false, periods_agree = true;
  int64_t wmin = INT64_MAX, wmax = INT64_MIN, period = 0;
  ember_labels_t labels = {0};
  char *host0 = NULL;
  char *buf = NULL; /* for the frame map's strings */
  if (s->no_sessions) goto done;
  rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc == 0) rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_SESSIONS], &cur));
  if (rc < 0) goto cleanup;
  uint8_t prefix[EMBER__SESSION_ID_MAX + 1];
  memcpy(prefix, session_id, idlen);
  prefix[idlen] = 0;
  MDB_val k = {.mv_size = idlen + 1, .mv_data = prefix}, v;
  int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (k.mv_size != idlen + EMBER__SESSION_KEY_TAIL || memcmp(k.mv_data, prefix, idlen + 1) != 0)
      break;
    const uint8_t *val = v.mv_data;
    if (!ember__unseal(&k, &v) || v.mv_size < SESSION_VAL_HDR || val[0] != SESSION_ROW_FORMAT) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    ember_profile_t *r = NULL;
    char why[16];
    rc = ember_codec_decode(val + SESSION_VAL_HDR, v.mv_size - SESSION_VAL_HDR, NULL, &r, why,
                            sizeof why);
    if (rc != 0) {
      if (rc != -ENOMEM) rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    inf.results++;
    int vi = ember_profile_type_index(r, value_type);
    if (vi >= 0) {
      inf.matched++;
      rc = add_projected(s, p, r, (size_t)vi, &buf);
      const ember_labels_t *l = ember_profile_labels(r);
      if (rc == 0 && first) {
        labels = *l;
        rc = ember_profile_set_labels(p, &labels);
        host0 = l->host ? ember_strdup(l->host) : NULL;
        if (rc == 0 && l->host != NULL && host0 == NULL) rc = -ENOMEM;
        period = ember_profile_period(r);
        first = false;
      } else if (rc == 0) {
        if ((host0 == NULL) != (l->host == NULL) || (host0 != NULL && strcmp(host0, l->host) != 0))
          mixed_hosts = true;
        if (ember_profile_period(r) != period) periods_agree = false;
      }
      int64_t ws, we;
      ember_profile_window(r, &ws, &we);
      if (ws < wmin) wmin = ws;
      if (we > wmax) wmax = we;
    }
    ember_profile_free(r);
    if (rc != 0) goto cleanup;
  }
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  if (mixed_hosts) {
    labels = *ember_profile_labels(p);
    labels.host = NULL;
    labels.pid = 0;
    rc = ember_profile_set_labels(p, &labels);
    if (rc != 0) goto cleanup;
  }
  if (wmin < wmax) rc = ember_profile_set_window(p, wmin, wmax);
  if (rc != 0) goto cleanup;
  ember_profile_set_period(p, periods_agree ? period : 0);
done:
  *out = p;
  p = NULL;
  if (info) *info = inf;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  ember_free(host0);
  ember_free(buf);
  ember_profile_free(p);
  return rc;
}

int ember__session_retain(ember_store_t *s, MDB_txn **txn, int64_t cutoff, size_t max_per_txn,
                          size_t *in_txn, uint64_t *deleted) {
  /* Keyed by session, not time: one pass, resumed after each commit from
   * the last key deleted. */
  uint8_t resume[EMBER__SESSION_ID_MAX + EMBER__SESSION_KEY_TAIL];
  size_t rlen = 0;
  for (;;) {
    MDB_cursor *cur = NULL;
    MDB_val k = {.mv_size = rlen, .mv_data = resume}, v;
    int rc = ember__store_err(mdb_cursor_open(*txn, s->dbi[EMBER__DB_SESSIONS], &cur));
    if (rc < 0) return rc;
    int mrc = mdb_cursor_get(cur, &k, &v, rlen ? MDB_SET_RANGE : MDB_FIRST);
    bool full = false;
    while (mrc == MDB_SUCCESS && !full) {
      if (!ember__unseal(&k, &v) || v.mv_size < SESSION_VAL_HDR || k.mv_size > sizeof resume) {
        rc = EMBER_ECORRUPT;
        break;
      }
      if (ember__get_time((const uint8_t *)v.mv_data + 1) >= cutoff) {
        mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        continue;
      }
      memcpy(resume, k.mv_data, k.mv_size);
      rlen = k.mv_size;
      rc = ember__store_err(mdb_cursor_del(cur, 0));
      if (rc < 0) break;
      (*deleted)++;
      full = ++*in_txn >= max_per_txn;
      k = (MDB_val){.mv_size = rlen, .mv_data = resume};
      mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    }
    mdb_cursor_close(cur);
    if (rc < 0) return rc;
    if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
    if (!full) return 0;
    rc = ember__store_commit(s, *txn);
    *txn = NULL;
    if (rc < 0) return rc;
    *in_txn = 0;
    rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, txn));
    if (rc < 0) return rc;
  }
}
