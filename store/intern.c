/* Dictionary lookups of the write path (intern.h). */
#include "intern.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "htab.h"

void ember__dict_init(ember__dict_t *d, ember_store_t *s, MDB_txn *txn) {
  *d = (ember__dict_t){.s = s,
                       .txn = txn,
                       .ctr = {[EMBER__CTR_SERIES] = {.name = "next_series"},
                               [EMBER__CTR_FRAME] = {.name = "next_frame"},
                               [EMBER__CTR_STACK] = {.name = "next_stack"}}};
}

void ember__dict_free(ember__dict_t *d) {
  ember__out_free(&d->buf);
  ember_free(d->fmap);
}

/* Take the next id from the meta counter `c`. Ids start at 1. */
static int next_id(ember__dict_t *d, ember__counter_t *c, uint32_t *id) {
  if (!c->loaded) {
    MDB_val k = {.mv_size = strlen(c->name), .mv_data = (void *)(uintptr_t)c->name}, v;
    c->next = 1;
    int mrc = ember__get(d->s, d->txn, EMBER__DB_META, &k, &v);
    if (mrc == MDB_SUCCESS) {
      if (v.mv_size != 4) return EMBER_ECORRUPT;
      c->next = ember__get_be32(v.mv_data);
    } else if (mrc != MDB_NOTFOUND) {
      return ember__store_err(mrc);
    }
    c->loaded = true;
  }
  if (c->next == UINT32_MAX) return EMBER_ETOOBIG;
  *id = c->next++;
  c->dirty = true;
  return 0;
}

int ember__dict_save(ember__dict_t *d) {
  for (size_t i = 0; i < EMBER__CTR_COUNT; i++) {
    ember__counter_t *c = &d->ctr[i];
    if (!c->dirty) continue;
    uint8_t b[4];
    ember__put_be32(b, c->next);
    MDB_val k = {.mv_size = strlen(c->name), .mv_data = (void *)(uintptr_t)c->name};
    MDB_val v = {.mv_size = 4, .mv_data = b};
    int rc = ember__store_err(ember__put(d->s, d->txn, EMBER__DB_META, &k, &v, 0));
    if (rc < 0) return rc;
  }
  return 0;
}

/* Find the id of the content d->buf in the dictionary (index `idx` of
 * on-disk content hash -> ids, data `data` of id -> content), creating it
 * from counter `ctr` if absent, and cache it under `key` with the cache's
 * form of the content, c[0..cn). */
static int intern_uncached(ember__dict_t *d, ember__db_t idx, ember__db_t data, int ctr,
                           uint64_t key, const void *c, size_t cn, uint32_t *id, bool *created) {
  uint8_t hkey[8], ikey[4];
  ember__dcache_t *cache = &d->s->cache[ctr];
  uint64_t hash =
      ember__store_hash_final(ember__store_hash(EMBER_STORE_HASH_SEED, d->buf.data, d->buf.len));
  ember__put_be64(hkey, hash);
  MDB_cursor *cur = NULL;
  MDB_val k = {.mv_size = sizeof hkey, .mv_data = hkey}, v;
  int rc = ember__store_err(mdb_cursor_open(d->txn, d->s->dbi[idx], &cur));
  if (rc < 0) return rc;
  int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
  while (mrc == MDB_SUCCESS) {
    /* Almost always one candidate; more only on a 64-bit hash collision. */
    if (v.mv_size != 4) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    uint32_t cand = ember__get_be32(v.mv_data);
    MDB_val dk = {.mv_size = 4, .mv_data = v.mv_data}, dv;
    rc = ember__store_err(ember__get(d->s, d->txn, data, &dk, &dv));
    if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT; /* the index names it */
    if (rc < 0) goto cleanup;
    if (dv.mv_size == d->buf.len && memcmp(dv.mv_data, d->buf.data, d->buf.len) == 0) {
      *id = cand;
      *created = false;
      ember__dcache_add(cache, key, c, cn, cand);
      goto cleanup;
    }
    mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT_DUP);
  }
  if (mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  uint32_t nid = 0;
  rc = next_id(d, &d->ctr[ctr], &nid);
  if (rc < 0) goto cleanup;
  ember__put_be32(ikey, nid);
  k = (MDB_val){.mv_size = sizeof hkey, .mv_data = hkey};
  v = (MDB_val){.mv_size = sizeof ikey, .mv_data = ikey};
  rc = ember__store_err(mdb_put(d->txn, d->s->dbi[idx], &k, &v, 0));
  if (rc < 0) goto cleanup;
  k = (MDB_val){.mv_size = sizeof ikey, .mv_data = ikey};
  v = (MDB_val){.mv_size = d->buf.len, .mv_data = d->buf.data};
  /* Ids only grow, so appending keeps the id-keyed table's pages full. */
  rc = ember__store_err(ember__put(d->s, d->txn, data, &k, &v, MDB_APPEND));
  if (rc < 0) goto cleanup;
  *id = nid;
  *created = true;
  ember__dcache_add(cache, key, c, cn, nid);
cleanup:
  mdb_cursor_close(cur);
  return rc;
}

int ember__dict_series(ember__dict_t *d, const ember_labels_t *l, uint32_t *sid) {
  const char *labels[EMBER__NLABELS] = {l->worker, l->version, l->host, l->actor};
  bool created = false;
  d->buf.len = 0;
  int rc = ember__labels_encode(&d->buf, labels);
  if (rc < 0) return rc;
  uint64_t fast = ember__hash_bytes(d->buf.data, d->buf.len, 0);
  ember__dcache_t *cache = &d->s->cache[EMBER__CTR_SERIES];
  if (ember__dcache_find(cache, fast, d->buf.data, d->buf.len, sid)) return 0;
  rc = intern_uncached(d, EMBER__DB_SERIES_IDX, EMBER__DB_SERIES, EMBER__CTR_SERIES, fast,
                       d->buf.data, d->buf.len, sid, &created);
  for (int i = 0; rc == 0 && created && i < EMBER__NLABELS; i++) {
    uint8_t key[EMBER__POSTING_KEY_LEN], val[4];
    key[0] = (uint8_t)i;
    ember__put_be64(key + 1, ember__label_hash(labels[i]));
    ember__put_be32(val, *sid);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    MDB_val v = {.mv_size = sizeof val, .mv_data = val};
    rc = ember__store_err(mdb_put(d->txn, d->s->dbi[EMBER__DB_POSTINGS], &k, &v, 0));
  }
  return rc;
}

/* Encode location i of w as its frame is stored into d->buf: kind, be32
 * line, be64 address, then per string 0x00 (none) or 0x01, the bytes and
 * a NUL (ember__out_str): function, file, module, build id, and the
 * generated name only when there is one (so every frame stored before
 * generated names existed keeps its bytes). One copy of ~100 bytes, then
 * one memcmp per candidate: cheaper than comparing the strings in place. */
static int loc_encode(ember__dict_t *d, const ember_wire_t *w, size_t i) {
  const char *str[EMBER_WIRE_LOC_STRINGS];
  size_t len[EMBER_WIRE_LOC_STRINGS];
  ember_wire_location_strings(w, i, str, len);
  int nstr = str[EMBER_WIRE_LOC_GENERATED] ? EMBER_WIRE_LOC_STRINGS : EMBER_WIRE_LOC_GENERATED;
  size_t n = 13;
  for (int j = 0; j < nstr; j++) n += str[j] ? len[j] + 2 : 1;
  int rc = ember__grow(&d->buf.data, &d->buf.cap, n, 1);
  if (rc < 0) return rc;
  uint8_t *o = d->buf.data;
  o[0] = (uint8_t)w->loc_kind[i];
  ember__put_be32(o + 1, w->loc_line[i]);
  ember__put_be64(o + 5, w->loc_address[i]);
  o += 13;
  for (int j = 0; j < nstr; j++) {
    *o++ = str[j] != NULL;
    if (str[j] == NULL) continue;
    memcpy(o, str[j], len[j]);
    o += len[j];
    *o++ = 0;
  }
  d->buf.len = n;
  return 0;
}

static int frame_id(ember__dict_t *d, const ember_wire_t *w, size_t i, uint32_t *fid, char *why,
                    size_t why_size) {
  int rc = loc_encode(d, w, i);
  if (rc < 0) return rc;
  uint64_t hash = w->loc_key[i];
  ember__dcache_t *cache = &d->s->cache[EMBER__CTR_FRAME];
  if (ember__dcache_find(cache, hash, d->buf.data, d->buf.len, fid)) return 0;
  /* Not seen (or a different content under the same key): check its text
   * before it enters the dictionary. */
  rc = ember_wire_check_location(w, i, why, why_size);
  if (rc != 0) return rc;
  bool created;
  return intern_uncached(d, EMBER__DB_FRAMES_IDX, EMBER__DB_FRAMES, EMBER__CTR_FRAME, hash,
                         d->buf.data, d->buf.len, fid, &created);
}

/* Make sure location `l` of `w` has its frame id in d->fmap (0 = not
 * looked up yet), looking up the next few of `locs` ahead. */
static int frame_of(ember__dict_t *d, const ember_wire_t *w, const uint32_t *locs, size_t k,
                    size_t depth, char *why, size_t why_size) {
  const ember__dcache_t *c = &d->s->cache[EMBER__CTR_FRAME];
  enum { AHEAD = 4 };
  if (k + AHEAD < depth && d->fmap[locs[k + AHEAD]] == 0)
    ember__dcache_prefetch_entry(c, w->loc_key[locs[k + AHEAD]]);
  if (k + 2 * AHEAD < depth && d->fmap[locs[k + 2 * AHEAD]] == 0)
    ember__dcache_prefetch(c, w->loc_key[locs[k + 2 * AHEAD]]);
  uint32_t l = locs[k];
  if (d->fmap[l] != 0) return 0;
  return frame_id(d, w, l, &d->fmap[l], why, why_size);
}

static int stack_id(ember__dict_t *d, const ember_wire_t *w, size_t i, uint32_t *id, char *why,
                    size_t why_size) {
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  size_t depth = w->depth[i];
  if (depth == 0 || depth > EMBER_MAX_STACK_DEPTH) return -EINVAL; /* a view never has these */
  const uint32_t *locs = w->locs + w->stack_off[i];
  for (size_t k = 0; k < depth; k++) {
    int rc = frame_of(d, w, locs, k, depth, why, why_size);
    if (rc != 0) return rc;
    ids[k] = d->fmap[locs[k]];
  }
  ember__dcache_t *cache = &d->s->cache[EMBER__CTR_STACK];
  uint64_t hash = w->stack_key[i];
  if (ember__dcache_find(cache, hash, ids, depth * sizeof *ids, id)) return 0;
  /* On disk: varints of the depth and the ids (at most 5 bytes each). */
  int rc = ember__grow(&d->buf.data, &d->buf.cap, 5 * (depth + 1), 1);
  if (rc < 0) return rc;
  size_t len = ember__put_varint(d->buf.data, depth);
  for (size_t k = 0; k < depth; k++) len += ember__put_varint(d->buf.data + len, ids[k]);
  d->buf.len = len;
  bool created;
  return intern_uncached(d, EMBER__DB_STACKS_IDX, EMBER__DB_STACKS, EMBER__CTR_STACK, hash, ids,
                         depth * sizeof *ids, id, &created);
}

/* The memo's key of (producer, stack key): both, compared whole. */
static void memo_key(uint64_t agent, uint64_t stack, uint8_t key[16], uint64_t *hash) {
  memcpy(key, &agent, 8);
  memcpy(key + 8, &stack, 8);
  *hash = ember__hash_mix(agent, stack);
}

int ember__dict_stacks(ember__dict_t *d, const ember_wire_t *w, uint32_t *ids, char *why,
                       size_t why_size) {
  size_t n = w->nsamples;
  int rc = ember__grow(&d->fmap, &d->fmap_cap, w->nlocations, sizeof *d->fmap);
  if (rc < 0) return rc;
  /* Frame ids start at 1: 0 is "not looked up yet". */
  if (w->nlocations) memset(d->fmap, 0, w->nlocations * sizeof *d->fmap);
  ember__dcache_t *memo = &d->s->cache[EMBER__CACHE_MEMO];
  bool producer = w->agent_id != NULL;
  /* The keys are the view maker's, from the content; the hashes an older
   * writer sent must be their content's too, or the window is refused. */
  if (!w->hashes_checked && (rc = ember_wire_check_hashes(w, why, why_size)) != 0) return rc;
  uint64_t agent = producer ? ember__label_hash(w->agent_id) : 0;
  const ember__dcache_t *sc = &d->s->cache[EMBER__CTR_STACK];
  enum { AHEAD = 4 };
  for (size_t i = 0; i < n; i++) {
    uint8_t key[16];
    uint64_t mh;
    if (producer) {
      if (i + AHEAD < n) {
        memo_key(agent, w->stack_key[i + AHEAD], key, &mh);
        ember__dcache_prefetch(memo, mh);
      }
      memo_key(agent, w->stack_key[i], key, &mh);
      if (ember__dcache_find(memo, mh, key, sizeof key, &ids[i])) continue;
    }
    if (i + AHEAD < n) ember__dcache_prefetch(sc, w->stack_key[i + AHEAD]);
    rc = stack_id(d, w, i, &ids[i], why, why_size);
    if (rc != 0) return rc;
    if (producer) ember__dcache_add(memo, mh, key, sizeof key, ids[i]);
  }
  return 0;
}
