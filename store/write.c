/* The write path: a batch of profile windows in one write transaction. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "row.h"
#include "store_int.h"

/* Scratch space reused across the profiles of one batch. */
typedef struct wctx {
  ember_store_t *s;
  MDB_txn *txn;
  ember__out_t buf; /* encoded frame, stack, label set */
  ember__out_t row; /* encoded profile row */
  uint32_t *fmap;   /* profile frame id -> store frame id (UINT32_MAX = not yet) */
  size_t fmap_cap;
  struct ent {
    uint32_t id;    /* store stack id */
    uint32_t local; /* profile stack id */
  } * ents;
  size_t ents_cap;
  uint32_t *ids; /* merged row: stack ids */
  int64_t *vals; /* merged row: values */
  size_t ids_cap, vals_cap;
} wctx_t;

static int grow(void *arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  if (c > SIZE_MAX / elem) return -ENOMEM;
  void *p = ember_realloc(*(void **)arr, c * elem);
  if (!p) return -ENOMEM;
  *(void **)arr = p;
  *cap = c;
  return 0;
}

/* Take the next id from the meta counter `name`. Ids start at 1. */
static int next_id(wctx_t *w, const char *name, uint32_t *id) {
  MDB_val k = {.mv_size = strlen(name), .mv_data = (void *)(uintptr_t)name}, v;
  uint32_t next = 1;
  int mrc = mdb_get(w->txn, w->s->dbi[EMBER__DB_META], &k, &v);
  if (mrc == MDB_SUCCESS) {
    if (v.mv_size != 4) return EMBER_ECORRUPT;
    next = ember__get_be32(v.mv_data);
  } else if (mrc != MDB_NOTFOUND) {
    return ember__store_err(mrc);
  }
  if (next == UINT32_MAX) return EMBER_ETOOBIG;
  uint8_t b[4];
  ember__put_be32(b, next + 1);
  v = (MDB_val){.mv_size = 4, .mv_data = b};
  int rc = ember__store_err(mdb_put(w->txn, w->s->dbi[EMBER__DB_META], &k, &v, 0));
  if (rc == 0) *id = next;
  return rc;
}

/* Find the id of the content w->buf in the dictionary (index `idx` of
 * content hash -> ids, data `data` of id -> content), creating it from
 * counter `counter` if absent. */
static int intern(wctx_t *w, ember__db_t idx, ember__db_t data, const char *counter, uint32_t *id,
                  bool *created) {
  uint8_t hkey[8], ikey[4];
  uint64_t hash =
      ember__store_hash_final(ember__store_hash(EMBER_STORE_HASH_SEED, w->buf.data, w->buf.len));
  ember__dcache_t *cache = &w->s->cache[data == EMBER__DB_SERIES   ? 0
                                        : data == EMBER__DB_FRAMES ? 1
                                                                   : 2];
  if (ember__dcache_find(cache, hash, w->buf.data, w->buf.len, id)) {
    *created = false;
    return 0;
  }
  ember__put_be64(hkey, hash);
  MDB_cursor *cur = NULL;
  MDB_val k = {.mv_size = sizeof hkey, .mv_data = hkey}, v;
  int rc = ember__store_err(mdb_cursor_open(w->txn, w->s->dbi[idx], &cur));
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
    rc = ember__store_err(mdb_get(w->txn, w->s->dbi[data], &dk, &dv));
    if (rc < 0) goto cleanup;
    if (dv.mv_size == w->buf.len && memcmp(dv.mv_data, w->buf.data, w->buf.len) == 0) {
      *id = cand;
      *created = false;
      ember__dcache_add(cache, hash, w->buf.data, w->buf.len, cand);
      goto cleanup;
    }
    mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT_DUP);
  }
  if (mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  uint32_t nid = 0;
  rc = next_id(w, counter, &nid);
  if (rc < 0) goto cleanup;
  ember__put_be32(ikey, nid);
  k = (MDB_val){.mv_size = sizeof hkey, .mv_data = hkey};
  v = (MDB_val){.mv_size = sizeof ikey, .mv_data = ikey};
  rc = ember__store_err(mdb_put(w->txn, w->s->dbi[idx], &k, &v, 0));
  if (rc < 0) goto cleanup;
  k = (MDB_val){.mv_size = sizeof ikey, .mv_data = ikey};
  v = (MDB_val){.mv_size = w->buf.len, .mv_data = w->buf.data};
  /* Ids only grow, so appending keeps the id-keyed table's pages full. */
  rc = ember__store_err(mdb_put(w->txn, w->s->dbi[data], &k, &v, MDB_APPEND));
  if (rc < 0) goto cleanup;
  *id = nid;
  *created = true;
  ember__dcache_add(cache, hash, w->buf.data, w->buf.len, nid);
cleanup:
  mdb_cursor_close(cur);
  return rc;
}

static int series_id(wctx_t *w, const ember_labels_t *l, uint32_t *sid) {
  const char *labels[EMBER__NLABELS] = {l->worker, l->version, l->host, l->actor};
  bool created = false;
  w->buf.len = 0;
  int rc = ember__labels_encode(&w->buf, labels);
  if (rc == 0) rc = intern(w, EMBER__DB_SERIES_IDX, EMBER__DB_SERIES, "next_series", sid, &created);
  for (int i = 0; rc == 0 && created && i < EMBER__NLABELS; i++) {
    uint8_t key[EMBER__POSTING_KEY_LEN], val[4];
    key[0] = (uint8_t)i;
    ember__put_be64(key + 1, ember__label_hash(labels[i]));
    ember__put_be32(val, *sid);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    MDB_val v = {.mv_size = sizeof val, .mv_data = val};
    rc = ember__store_err(mdb_put(w->txn, w->s->dbi[EMBER__DB_POSTINGS], &k, &v, 0));
  }
  return rc;
}

static int frame_id(wctx_t *w, const ember_frame_t *f, uint32_t *fid) {
  uint8_t fixed[1 + 4 + 8];
  fixed[0] = (uint8_t)f->kind;
  ember__put_be32(fixed + 1, f->line);
  ember__put_be64(fixed + 5, f->address);
  bool created;
  w->buf.len = 0;
  int rc = ember__out_bytes(&w->buf, fixed, sizeof fixed);
  if (rc == 0) rc = ember__out_str(&w->buf, f->function);
  if (rc == 0) rc = ember__out_str(&w->buf, f->file);
  if (rc == 0) rc = ember__out_str(&w->buf, f->module);
  if (rc == 0) rc = ember__out_str(&w->buf, f->build_id);
  if (rc == 0) rc = intern(w, EMBER__DB_FRAMES_IDX, EMBER__DB_FRAMES, "next_frame", fid, &created);
  return rc;
}

static int stack_id(wctx_t *w, const ember_profile_t *p, const uint32_t *frames, size_t depth,
                    uint32_t *id) {
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  int rc;
  /* The profile guarantees depth <= EMBER_MAX_STACK_DEPTH and valid ids. */
  for (size_t i = 0; i < depth; i++) {
    uint32_t *m = &w->fmap[frames[i]];
    if (*m == UINT32_MAX) {
      rc = frame_id(w, ember_profile_frame(p, frames[i]), m);
      if (rc < 0) return rc;
    }
    ids[i] = *m;
  }
  bool created;
  w->buf.len = 0;
  rc = ember__out_varint(&w->buf, depth);
  for (size_t i = 0; rc == 0 && i < depth; i++) rc = ember__out_varint(&w->buf, ids[i]);
  if (rc == 0) rc = intern(w, EMBER__DB_STACKS_IDX, EMBER__DB_STACKS, "next_stack", id, &created);
  return rc;
}

static int ent_cmp(const void *a, const void *b) {
  const struct ent *x = a, *y = b;
  return (x->id > y->id) - (x->id < y->id);
}

static int add_checked(int64_t *dst, int64_t v) {
  if (v > INT64_MAX - *dst) return -ERANGE;
  *dst += v;
  return 0;
}

/* Build the merged row in w->ids/w->vals from the profile's sorted entries
 * `ents` and, if `old` is not NULL, the row already stored under its key. */
static int merge_row(wctx_t *w, const ember_profile_t *p, const int *cols, size_t nent,
                     const MDB_val *old, ember__row_hdr_t *h, uint64_t *nout) {
  unsigned nt = h->ntypes;
  ember__row_iter_t it = {0};
  uint64_t oldn = 0;
  if (old) {
    if (!ember__row_open(&it, old->mv_data, old->mv_size) || it.hdr.mask != h->mask)
      return EMBER_ECORRUPT;
    oldn = it.hdr.nstacks;
    if (it.hdr.duration_ns > h->duration_ns) h->duration_ns = it.hdr.duration_ns;
    if (it.hdr.period_ns != h->period_ns) h->period_ns = 0;
  }
  if (oldn > SIZE_MAX - nent) return EMBER_ECORRUPT;
  size_t need = nent + (size_t)oldn;
  if (need > SIZE_MAX / EMBER_MAX_VALUE_TYPES) return -ENOMEM;
  int rc = grow(&w->ids, &w->ids_cap, need, sizeof *w->ids);
  if (rc == 0) rc = grow(&w->vals, &w->vals_cap, need * nt, sizeof *w->vals);
  if (rc < 0) return rc;

  size_t i = 0, n = 0;
  uint32_t oid = 0;
  int64_t ov[EMBER_MAX_VALUE_TYPES];
  int have_old = old ? ember__row_next(&it, &oid, ov) : 0;
  if (have_old < 0) return have_old;
  while (i < nent || have_old) {
    const int64_t *pv = NULL;
    if (i < nent) {
      const uint32_t *fr;
      size_t depth;
      ember_profile_stack(p, w->ents[i].local, &fr, &depth, &pv);
    }
    int64_t *dst = &w->vals[n * nt];
    if (have_old && (i >= nent || oid <= w->ents[i].id)) {
      w->ids[n] = oid;
      memcpy(dst, ov, nt * sizeof *ov);
      if (i < nent && oid == w->ents[i].id) {
        for (unsigned t = 0; t < nt; t++) {
          rc = add_checked(&dst[t], pv[cols[t]]);
          if (rc < 0) return rc;
        }
        i++;
      }
      have_old = ember__row_next(&it, &oid, ov);
      if (have_old < 0) return have_old;
    } else {
      w->ids[n] = w->ents[i].id;
      for (unsigned t = 0; t < nt; t++) dst[t] = pv[cols[t]];
      i++;
    }
    if (n > 0 && w->ids[n] <= w->ids[n - 1]) return EMBER_ECORRUPT;
    n++;
  }
  *nout = n;
  return 0;
}

/* Add `v` to the big-endian u64 stored under `k` in `db`. */
static int add_u64(wctx_t *w, ember__db_t db, MDB_val *k, uint64_t add) {
  MDB_val v;
  uint64_t cur = 0;
  int mrc = mdb_get(w->txn, w->s->dbi[db], k, &v);
  if (mrc == MDB_SUCCESS) {
    if (v.mv_size != 8) return EMBER_ECORRUPT;
    cur = ember__get_be64(v.mv_data);
  } else if (mrc != MDB_NOTFOUND) {
    return ember__store_err(mrc);
  }
  if (add > INT64_MAX - cur) return -ERANGE;
  uint8_t b[8];
  ember__put_be64(b, cur + add);
  v = (MDB_val){.mv_size = 8, .mv_data = b};
  return ember__store_err(mdb_put(w->txn, w->s->dbi[db], k, &v, 0));
}

static int check_profile(const ember_profile_t *p) {
  int64_t start, end;
  ember_profile_window(p, &start, &end);
  /* The row stores end - start as a non-negative int64. */
  if (start >= end || (uint64_t)end - (uint64_t)start > INT64_MAX) return -EINVAL;
  /* So does the hourly rollup row, from the start of the hour. */
  if ((uint64_t)end - (uint64_t)ember__rollup_floor(start) > INT64_MAX) return -EINVAL;
  return 0;
}

static int write_one(wctx_t *w, const ember_profile_t *p, int64_t retained, bool *dup,
                     bool *expired) {
  int64_t start, end;
  ember_profile_window(p, &start, &end);
  const char *agent = ember_profile_agent_id(p);
  int rc;
  *dup = false;
  *expired = start < retained;
  if (*expired) return 0;
  if (agent) {
    uint8_t key[EMBER__IDEM_KEY_LEN], val[8];
    ember__put_be64(key, ember__label_hash(agent));
    ember__put_be64(key + 8, ember_profile_seq(p));
    ember__put_time(val, start);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    MDB_val v = {.mv_size = sizeof val, .mv_data = val};
    int mrc = mdb_put(w->txn, w->s->dbi[EMBER__DB_IDEM], &k, &v, MDB_NOOVERWRITE);
    if (mrc == MDB_KEYEXIST) {
      *dup = true;
      return 0;
    }
    rc = ember__store_err(mrc);
    if (rc < 0) return rc;
  }

  uint32_t sid;
  rc = series_id(w, ember_profile_labels(p), &sid);
  if (rc < 0) return rc;

  /* Columns in ascending value type order, whatever the profile's order. */
  ember__row_hdr_t h = {0};
  int cols[EMBER_MAX_VALUE_TYPES];
  for (int vt = 1; vt <= EMBER_MAX_VALUE_TYPES; vt++) {
    int idx = ember_profile_type_index(p, (ember_value_type_t)vt);
    if (idx < 0) continue;
    h.mask |= ember__vt_bit((ember_value_type_t)vt);
    cols[h.ntypes++] = idx;
  }
  h.duration_ns = (uint64_t)end - (uint64_t)start;
  int64_t period = ember_profile_period(p);
  h.period_ns = period > 0 ? (uint64_t)period : 0;

  size_t nframes = ember_profile_nframes(p), nstacks = ember_profile_nstacks(p);
  rc = grow(&w->fmap, &w->fmap_cap, nframes, sizeof *w->fmap);
  if (rc == 0) rc = grow(&w->ents, &w->ents_cap, nstacks, sizeof *w->ents);
  if (rc < 0) return rc;
  if (nframes) memset(w->fmap, 0xff, nframes * sizeof *w->fmap);
  for (size_t i = 0; i < nstacks; i++) {
    const uint32_t *fr;
    const int64_t *vals;
    size_t depth;
    ember_profile_stack(p, (uint32_t)i, &fr, &depth, &vals);
    w->ents[i].local = (uint32_t)i;
    rc = stack_id(w, p, fr, depth, &w->ents[i].id);
    if (rc < 0) return rc;
  }
  /* Distinct profile stacks have distinct contents, and equal contents get
   * one store id, so the sorted ids are strictly increasing. */
  if (nstacks) qsort(w->ents, nstacks, sizeof *w->ents, ent_cmp);

  uint8_t key[EMBER__PROFILE_KEY_LEN];
  ember__put_be32(key, sid);
  ember__put_time(key + 4, start);
  key[12] = h.mask;
  MDB_val k = {.mv_size = sizeof key, .mv_data = key}, old;
  int mrc = mdb_get(w->txn, w->s->dbi[EMBER__DB_PROFILES], &k, &old);
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
  uint64_t n;
  rc = merge_row(w, p, cols, nstacks, mrc == MDB_SUCCESS ? &old : NULL, &h, &n);
  if (rc < 0) return rc;
  w->row.len = 0;
  rc = ember__row_encode(&w->row, &h, w->ids, w->vals, n);
  if (rc < 0) return rc;
  MDB_val v = {.mv_size = w->row.len, .mv_data = w->row.data};
  rc = ember__store_err(mdb_put(w->txn, w->s->dbi[EMBER__DB_PROFILES], &k, &v, 0));
  if (rc < 0) return rc;

  /* The same entries, added into the row of the window's hour. */
  int64_t hour = ember__rollup_floor(start);
  ember__row_hdr_t rh = h;
  rh.duration_ns = (uint64_t)end - (uint64_t)hour;
  rh.period_ns = period > 0 ? (uint64_t)period : 0;
  uint8_t rkey[EMBER__PROFILE_KEY_LEN];
  memcpy(rkey, key, sizeof rkey);
  ember__put_time(rkey + 4, hour);
  MDB_val rk = {.mv_size = sizeof rkey, .mv_data = rkey};
  mrc = mdb_get(w->txn, w->s->dbi[EMBER__DB_ROLLUP_1H], &rk, &old);
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
  rc = merge_row(w, p, cols, nstacks, mrc == MDB_SUCCESS ? &old : NULL, &rh, &n);
  if (rc < 0) return rc;
  w->row.len = 0;
  rc = ember__row_encode(&w->row, &rh, w->ids, w->vals, n);
  if (rc < 0) return rc;
  v = (MDB_val){.mv_size = w->row.len, .mv_data = w->row.data};
  rc = ember__store_err(mdb_put(w->txn, w->s->dbi[EMBER__DB_ROLLUP_1H], &rk, &v, 0));
  if (rc < 0) return rc;

  int ins = ember_profile_type_index(p, EMBER_VT_CPU_NS);
  int iss = ember_profile_type_index(p, EMBER_VT_CPU_SAMPLES);
  int64_t cpu = -1;
  if (ins >= 0) {
    cpu = ember_profile_total(p, (size_t)ins);
  } else if (iss >= 0 && period > 0) {
    int64_t samples = ember_profile_total(p, (size_t)iss);
    if (samples > INT64_MAX / period) return -ERANGE;
    cpu = samples * period;
  }
  if (cpu >= 0) {
    uint8_t ckey[EMBER__CPU_KEY_LEN];
    memcpy(ckey, key, sizeof ckey);
    MDB_val ck = {.mv_size = sizeof ckey, .mv_data = ckey};
    rc = add_u64(w, EMBER__DB_CPU, &ck, (uint64_t)cpu);
  }
  return rc;
}

int ember_store_write(ember_store_t *s, ember_profile_t *const *profiles, size_t n,
                      ember_store_write_result_t *result) {
  if (!s || (!profiles && n)) return -EINVAL;
  if (s->read_only) return -EACCES;
  for (size_t i = 0; i < n; i++)
    if (!profiles[i] || check_profile(profiles[i]) < 0) return -EINVAL;

  wctx_t w = {.s = s};
  ember_store_write_result_t res = {0};
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &w.txn));
  if (rc < 0) goto cleanup;
  /* Windows older than the retention cutoff would be deleted anyway, and
   * their idempotency keys may already be gone. */
  int64_t retained = INT64_MIN;
  MDB_val rk = {.mv_size = strlen(EMBER__META_RETAINED),
                .mv_data = (void *)(uintptr_t)EMBER__META_RETAINED},
          rv;
  int mrc = mdb_get(w.txn, s->dbi[EMBER__DB_META], &rk, &rv);
  if (mrc == MDB_SUCCESS && rv.mv_size == 8) {
    retained = ember__get_time(rv.mv_data);
  } else if (mrc != MDB_NOTFOUND) {
    rc = mrc == MDB_SUCCESS ? EMBER_ECORRUPT : ember__store_err(mrc);
    goto cleanup;
  }
  for (size_t i = 0; i < n; i++) {
    bool dup, expired;
    rc = write_one(&w, profiles[i], retained, &dup, &expired);
    if (rc < 0) goto cleanup;
    if (expired)
      res.expired++;
    else if (dup)
      res.duplicates++;
    else
      res.written++;
  }
  rc = ember__store_err(mdb_txn_commit(w.txn));
  w.txn = NULL;
  if (rc < 0) goto cleanup;
  if (result) *result = res;
cleanup:
  if (w.txn) {
    mdb_txn_abort(w.txn);
    /* The caches may name ids of the aborted transaction. */
    for (size_t i = 0; i < sizeof s->cache / sizeof s->cache[0]; i++)
      ember__dcache_clear(&s->cache[i]);
  }
  ember__out_free(&w.buf);
  ember__out_free(&w.row);
  ember_free(w.fmap);
  ember_free(w.ents);
  ember_free(w.ids);
  ember_free(w.vals);
  return rc;
}
