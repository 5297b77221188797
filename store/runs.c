/* Runs, pending windows and series partitions: their encodings, the write
 * path's share of them, ember_store_committed and ember_store_runs (see
 * runs.h; the undo is in undo.c). */
#include "runs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(EMBER__RUN_VAL_LEN == 6 * sizeof(uint64_t),
               "run value: stored_end, committed, started_ns, tmin, tmax, windows");
_Static_assert(EMBER__PENDING_HDR_LEN == 2 + sizeof(int64_t) + EMBER__PROFILE_KEY_LEN +
                                             sizeof(int64_t) + EMBER__IDEM_KEY_LEN,
               "pending value: format, flags, run start, profiles key, CPU ns, idem key, row");

/* ---- encodings ------------------------------------------------------- */

void ember__run_key(uint8_t key[EMBER__RUN_KEY_LEN], int32_t partition, int64_t offset) {
  ember__put_be32(key, (uint32_t)partition);
  ember__put_be64(key + 4, (uint64_t)offset);
}

void ember__run_encode(uint8_t v[EMBER__RUN_VAL_LEN], const ember__run_t *r) {
  ember__put_be64(v, (uint64_t)r->stored_end);
  ember__put_be64(v + 8, (uint64_t)r->committed);
  ember__put_time(v + 16, r->started_ns);
  ember__put_time(v + 24, r->tmin);
  ember__put_time(v + 32, r->tmax);
  ember__put_be64(v + 40, r->windows);
}

/* A key of partition and offset, both non-negative. */
static bool part_key(const MDB_val *k, int32_t *partition, int64_t *offset) {
  if (k->mv_size != EMBER__RUN_KEY_LEN) return false;
  uint32_t p = ember__get_be32(k->mv_data);
  uint64_t o = ember__get_be64((const uint8_t *)k->mv_data + 4);
  if (p > INT32_MAX || o > INT64_MAX) return false;
  *partition = (int32_t)p;
  *offset = (int64_t)o;
  return true;
}

bool ember__run_decode(const MDB_val *k, const MDB_val *v, int32_t *partition, int64_t *start,
                       ember__run_t *r) {
  if (!part_key(k, partition, start) || v->mv_size != EMBER__RUN_VAL_LEN) return false;
  const uint8_t *p = v->mv_data;
  uint64_t end = ember__get_be64(p), committed = ember__get_be64(p + 8);
  if (end > INT64_MAX || committed > INT64_MAX) return false;
  *r = (ember__run_t){.stored_end = (int64_t)end,
                      .committed = (int64_t)committed,
                      .started_ns = ember__get_time(p + 16),
                      .tmin = ember__get_time(p + 24),
                      .tmax = ember__get_time(p + 32),
                      .windows = ember__get_be64(p + 40)};
  /* A run starts where it reads from; what it stores and commits is past
   * that. */
  if (r->stored_end < *start || r->committed < *start) return false;
  if (r->windows && r->tmin > r->tmax) return false;
  return true;
}

bool ember__pending_decode(const MDB_val *k, const MDB_val *v, ember__pending_t *p) {
  *p = (ember__pending_t){0};
  if (!part_key(k, &p->partition, &p->offset) || v->mv_size < EMBER__PENDING_HDR_LEN) return false;
  const uint8_t *b = v->mv_data;
  if (b[0] != EMBER__PENDING_FORMAT || (b[1] & ~(EMBER__PENDING_CPU | EMBER__PENDING_IDEM)) != 0)
    return false;
  p->flags = b[1];
  uint64_t run_start = ember__get_be64(b + 2);
  if (run_start > (uint64_t)p->offset) return false;
  p->run_start = (int64_t)run_start;
  memcpy(p->pkey, b + 10, sizeof p->pkey);
  uint64_t cpu = ember__get_be64(b + 23);
  if (cpu > INT64_MAX || (!(p->flags & EMBER__PENDING_CPU) && cpu != 0)) return false;
  p->cpu_ns = (int64_t)cpu;
  memcpy(p->idem, b + 31, sizeof p->idem);
  p->row = b + EMBER__PENDING_HDR_LEN;
  p->row_len = v->mv_size - EMBER__PENDING_HDR_LEN;
  /* The row must decode to its end, with the key's type mask: undo
   * subtracts it entry by entry. */
  ember__row_iter_t it;
  if (!ember__row_open(&it, p->row, p->row_len) || it.hdr.mask != p->pkey[12]) return false;
  if (it.hdr.nstacks > p->row_len) return false;
  uint32_t id;
  int64_t vals[EMBER_MAX_VALUE_TYPES];
  int r;
  while ((r = ember__row_next(&it, &id, vals)) > 0) {
  }
  return r == 0;
}

bool ember__pending_older(const MDB_val *k, const MDB_val *v, int64_t cutoff, bool *bad) {
  ember__pending_t p;
  *bad = !ember__pending_decode(k, v, &p);
  return !*bad && ember__get_time(p.pkey + 4) < cutoff;
}

bool ember__run_older(const MDB_val *k, const MDB_val *v, int64_t cutoff, bool *bad) {
  int32_t partition;
  int64_t start;
  ember__run_t r;
  *bad = !ember__run_decode(k, v, &partition, &start, &r);
  if (*bad) return false;
  return (r.windows ? r.tmax : r.started_ns) < cutoff;
}

/* ---- the write path's share ------------------------------------------ */

static bool acc_eq(const void *ctx, uint32_t idx) {
  const ember__srcs_t *b = ctx;
  return b->runs[idx].partition == b->key->partition && b->runs[idx].start == b->key->start;
}

static uint64_t acc_hash_of(int32_t partition, int64_t start) {
  return ember__hash_mix((uint64_t)(uint32_t)partition, (uint64_t)start);
}

static uint64_t acc_hash(const void *ctx, uint32_t idx) {
  const ember__srcs_t *b = ctx;
  return acc_hash_of(b->runs[idx].partition, b->runs[idx].start);
}

int ember__srcs_window(ember__srcs_t *b, const ember_store_source_t *src, int64_t start) {
  struct ember__run_acc *a = NULL;
  /* A batch is mostly runs of windows from one partition in a row. */
  if (b->last < b->nruns && b->runs[b->last].partition == src->partition &&
      b->runs[b->last].start == src->run_start) {
    a = &b->runs[b->last];
  } else {
    struct ember__run_acc key = {.partition = src->partition, .start = src->run_start};
    uint64_t h = acc_hash_of(key.partition, key.start);
    b->key = &key;
    int64_t at = ember__htab_find(&b->index, h, acc_eq, b);
    b->key = NULL;
    if (at < 0) {
      if (b->nruns >= UINT32_MAX) return -ENOMEM;
      if (b->nruns == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8;
        void *p = ember_realloc(b->runs, cap * sizeof *b->runs);
        if (!p) return -ENOMEM;
        b->runs = p;
        b->cap = cap;
      }
      int rc = ember__htab_insert(&b->index, h, (uint32_t)b->nruns, acc_hash, b);
      if (rc < 0) return rc;
      b->runs[b->nruns] = (struct ember__run_acc){.partition = src->partition,
                                                  .start = src->run_start,
                                                  .started_ns = src->run_started_ns,
                                                  .stored_end = src->run_start,
                                                  .tmin = start,
                                                  .tmax = start};
      at = (int64_t)b->nruns++;
    }
    b->last = (size_t)at;
    a = &b->runs[at];
  }
  if (src->offset + 1 > a->stored_end) a->stored_end = src->offset + 1;
  if (start < a->tmin) a->tmin = start;
  if (start > a->tmax) a->tmax = start;
  a->windows++;
  return 0;
}

int ember__srcs_stored(ember__srcs_t *b, ember_store_t *s, MDB_txn *txn,
                       const ember_store_source_t *src, const ember__contrib_t *c) {
  uint8_t hdr[EMBER__PENDING_HDR_LEN] = {EMBER__PENDING_FORMAT};
  hdr[1] = (uint8_t)((c->has_cpu ? EMBER__PENDING_CPU : 0) | (c->idem ? EMBER__PENDING_IDEM : 0));
  ember__put_be64(hdr + 2, (uint64_t)src->run_start);
  memcpy(hdr + 10, c->pkey, EMBER__PROFILE_KEY_LEN);
  ember__put_be64(hdr + 23, c->has_cpu ? (uint64_t)c->cpu_ns : 0);
  if (c->idem) memcpy(hdr + 31, c->idem, EMBER__IDEM_KEY_LEN);
  b->val.len = 0;
  int rc = ember__out_bytes(&b->val, hdr, sizeof hdr);
  if (rc == 0) rc = ember__row_encode(&b->val, c->hdr, c->ids, c->vals, c->n);
  if (rc < 0) return rc;
  uint8_t key[EMBER__PENDING_KEY_LEN];
  ember__run_key(key, src->partition, src->offset);
  MDB_val k = {.mv_size = sizeof key, .mv_data = key};
  MDB_val v = {.mv_size = b->val.len, .mv_data = b->val.data};
  rc = ember__store_err(ember__put(s, txn, EMBER__DB_PENDING, &k, &v, 0));
  if (rc < 0) return rc;

  /* The pair once per store: the set answers for pairs seen before (in
   * this process), LMDB for the rest, without a read (NOOVERWRITE). */
  uint32_t sid = ember__get_be32(c->pkey);
  uint64_t pair = (uint64_t)sid << 32 | (uint32_t)src->partition;
  if (ember__kset_has(&s->parts, pair)) return 0;
  uint8_t pk[EMBER__PART_KEY_LEN];
  ember__put_be32(pk, sid);
  ember__put_be32(pk + 4, (uint32_t)src->partition);
  k = (MDB_val){.mv_size = sizeof pk, .mv_data = pk};
  v = (MDB_val){.mv_size = 0, .mv_data = pk};
  int mrc = ember__put(s, txn, EMBER__DB_PARTS, &k, &v, MDB_NOOVERWRITE);
  if (mrc != MDB_SUCCESS && mrc != MDB_KEYEXIST) return ember__store_err(mrc);
  /* sid >= 1, so the pair is never the set's empty key. */
  ember__kset_add(&s->parts, pair);
  return 0;
}

int ember__srcs_flush(ember__srcs_t *b, ember_store_t *s, MDB_txn *txn) {
  for (size_t i = 0; i < b->nruns; i++) {
    const struct ember__run_acc *a = &b->runs[i];
    uint8_t key[EMBER__RUN_KEY_LEN], val[EMBER__RUN_VAL_LEN];
    ember__run_key(key, a->partition, a->start);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
    ember__run_t r = {.stored_end = a->stored_end,
                      .committed = a->start,
                      .started_ns = a->started_ns,
                      .tmin = a->tmin,
                      .tmax = a->tmax,
                      .windows = a->windows};
    int mrc = ember__get(s, txn, EMBER__DB_RUNS, &k, &v);
    if (mrc == MDB_SUCCESS) {
      ember__run_t old;
      int32_t partition;
      int64_t start;
      if (!ember__run_decode(&k, &v, &partition, &start, &old)) return EMBER_ECORRUPT;
      r.committed = old.committed;
      r.started_ns = old.started_ns;
      if (old.stored_end > r.stored_end) r.stored_end = old.stored_end;
      if (old.windows) {
        if (old.tmin < r.tmin) r.tmin = old.tmin;
        if (old.tmax > r.tmax) r.tmax = old.tmax;
      }
      if (old.windows > INT64_MAX - r.windows) return -ERANGE;
      r.windows += old.windows;
    } else if (mrc != MDB_NOTFOUND) {
      return ember__store_err(mrc);
    }
    ember__run_encode(val, &r);
    v = (MDB_val){.mv_size = sizeof val, .mv_data = val};
    int rc = ember__store_err(ember__put(s, txn, EMBER__DB_RUNS, &k, &v, 0));
    if (rc < 0) return rc;
  }
  return 0;
}

void ember__srcs_free(ember__srcs_t *b) {
  ember_free(b->runs);
  ember__htab_free(&b->index);
  ember__out_free(&b->val);
  *b = (ember__srcs_t){0};
}

/* ---- ember_store_committed ------------------------------------------- */

static int committed_locked(ember_store_t *s, int32_t partition, int64_t run_start,
                            int64_t offset) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &txn));
  if (rc < 0) return rc;
  uint8_t key[EMBER__PENDING_KEY_LEN];
  /* Pending windows of the partition below the offset: the front of its
   * keys. Each delete re-seeks from the start of the partition rather than
   * trust where a delete leaves the cursor. */
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PENDING], &cur));
  while (rc == 0) {
    ember__run_key(key, partition, 0);
    MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (mrc == MDB_NOTFOUND) break;
    rc = ember__store_err(mrc);
    if (rc < 0) break;
    int32_t p;
    int64_t off;
    if (!part_key(&k, &p, &off)) {
      rc = EMBER_ECORRUPT;
      break;
    }
    if (p != partition || off >= offset) break;
    rc = ember__store_err(mdb_cursor_del(cur, 0));
  }
  if (cur) mdb_cursor_close(cur);
  if (rc == 0) {
    uint8_t rkey[EMBER__RUN_KEY_LEN], val[EMBER__RUN_VAL_LEN];
    ember__run_key(rkey, partition, run_start);
    MDB_val k = {.mv_size = sizeof rkey, .mv_data = rkey}, v;
    int mrc = ember__get(s, txn, EMBER__DB_RUNS, &k, &v);
    if (mrc == MDB_SUCCESS) {
      ember__run_t r;
      int32_t p;
      int64_t start;
      if (!ember__run_decode(&k, &v, &p, &start, &r)) {
        rc = EMBER_ECORRUPT;
      } else if (offset > r.committed) {
        r.committed = offset;
        ember__run_encode(val, &r);
        v = (MDB_val){.mv_size = sizeof val, .mv_data = val};
        rc = ember__store_err(ember__put(s, txn, EMBER__DB_RUNS, &k, &v, 0));
      }
    } else if (mrc != MDB_NOTFOUND) {
      rc = ember__store_err(mrc);
    }
  }
  if (rc == 0) {
    rc = ember__store_commit(s, txn);
    txn = NULL;
  }
  /* Nothing here touches the dictionary caches or the series_part set, so
   * a failed transaction leaves them true. */
  if (txn) mdb_txn_abort(txn);
  return rc;
}

int ember_store_committed(ember_store_t *s, int32_t partition, int64_t run_start, int64_t offset) {
  if (!s || partition < 0 || run_start < 0 || offset < 0) return -EINVAL;
  if (s->read_only) return -EACCES;
  int rc;
  do {
    ember__store_enter(s);
    rc = committed_locked(s, partition, run_start, offset);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

/* ---- ember_store_runs ------------------------------------------------ */

static int run_cmp(const void *a, const void *b) {
  const ember_store_run_t *x = a, *y = b;
  if (x->partition != y->partition) return x->partition < y->partition ? -1 : 1;
  return (x->start > y->start) - (x->start < y->start);
}

static int runs_locked(ember_store_t *s, ember_store_run_t **out, size_t *count) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  ember_store_run_t *runs = NULL;
  size_t n = 0, cap = 0;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_RUNS], &cur));
  if (rc < 0) goto cleanup;
  MDB_val k, v;
  int mrc;
  for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
       mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    ember__run_t r;
    int32_t partition;
    int64_t start;
    if (!ember__unseal(&k, &v) || !ember__run_decode(&k, &v, &partition, &start, &r)) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    if (n == cap) {
      size_t c = cap ? cap * 2 : 16;
      void *p = ember_realloc(runs, c * sizeof *runs);
      if (!p) {
        rc = -ENOMEM;
        goto cleanup;
      }
      runs = p;
      cap = c;
    }
    runs[n++] = (ember_store_run_t){.partition = partition,
                                    .start = start,
                                    .stored_end = r.stored_end,
                                    .committed = r.committed,
                                    .started_ns = r.started_ns,
                                    .tmin_ns = r.windows ? r.tmin : 0,
                                    .tmax_ns = r.windows ? r.tmax : 0,
                                    .windows = r.windows};
  }
  if (mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  mdb_cursor_close(cur);
  cur = NULL;
  /* Each pending window names its run: one pass over the table (only the
   * uncommitted tail, normally one batch), each counted in its run. */
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PENDING], &cur));
  if (rc < 0) goto cleanup;
  for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
       mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    ember__pending_t p;
    if (!ember__unseal(&k, &v) || !ember__pending_decode(&k, &v, &p)) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    ember_store_run_t want = {.partition = p.partition, .start = p.run_start};
    ember_store_run_t *r = n ? bsearch(&want, runs, n, sizeof *runs, run_cmp) : NULL;
    if (r) r->pending++;
  }
  if (mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  rc = 0;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  if (rc == 0) {
    if (n == 0) {
      ember_free(runs);
      runs = NULL;
    }
    *out = runs;
    *count = n;
  } else {
    ember_free(runs);
  }
  return rc;
}

int ember_store_runs(ember_store_t *s, ember_store_run_t **out, size_t *count) {
  if (!s || !out || !count) return -EINVAL;
  if (s->no_runs) {
    *out = NULL;
    *count = 0;
    return 0;
  }
  int rc;
  do {
    ember__store_enter(s);
    rc = runs_locked(s, out, count);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

void ember_store_runs_free(ember_store_run_t *runs) { ember_free(runs); }
