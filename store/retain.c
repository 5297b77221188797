/* Retention: deleting old windows in small write transactions. */
#include <errno.h>
#include <string.h>

#include "runs.h"
#include "store_int.h"

typedef struct rctx {
  ember_store_t *s;
  MDB_txn *txn;
  size_t in_txn, max_per_txn;
  uint64_t deleted;
} rctx_t;

/* Commit the current transaction and start the next one once it has done
 * its share, so that the writer lock is never held for long. */
static int maybe_commit(rctx_t *r, bool force) {
  if (!force && r->in_txn < r->max_per_txn) return 0;
  int rc = ember__store_commit(r->s, r->txn);
  r->txn = NULL;
  if (rc < 0) return rc;
  r->in_txn = 0;
  return ember__store_err(mdb_txn_begin(r->s->env, NULL, 0, &r->txn));
}

/* What a scan does with one entry. */
typedef enum verdict { V_DELETE, V_SKIP, V_STOP, V_CORRUPT } verdict_t;

/* Delete from `db`, scanning from `from` (len <= 64 bytes) in key order,
 * the entries `judge` says to, at most max_per_txn per transaction. After
 * each delete the cursor seeks again from the deleted key rather than rely
 * on where a delete leaves it; after a commit the scan resumes there. */
static int delete_where(rctx_t *r, ember__db_t db, const uint8_t *from, size_t len,
                        verdict_t (*judge)(const MDB_val *k, const MDB_val *v, const void *ctx),
                        const void *ctx) {
  uint8_t resume[64];
  if (len > sizeof resume) return -EINVAL;
  memcpy(resume, from, len);
  for (;;) {
    MDB_cursor *cur = NULL;
    MDB_val k = {.mv_size = len, .mv_data = resume}, v;
    int rc = ember__store_err(mdb_cursor_open(r->txn, r->s->dbi[db], &cur));
    if (rc < 0) return rc;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    bool full = false;
    while (mrc == MDB_SUCCESS && !full) {
      /* Every table retention scans is sealed. */
      verdict_t verdict = ember__unseal(&k, &v) ? judge(&k, &v, ctx) : V_CORRUPT;
      if (verdict == V_CORRUPT) {
        rc = EMBER_ECORRUPT;
        break;
      }
      if (verdict == V_STOP) break;
      if (verdict == V_SKIP) {
        mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        continue;
      }
      if (k.mv_size > sizeof resume) {
        rc = EMBER_ECORRUPT;
        break;
      }
      len = k.mv_size;
      memcpy(resume, k.mv_data, len);
      rc = ember__store_err(mdb_cursor_del(cur, 0));
      if (rc < 0) break;
      r->deleted++;
      full = ++r->in_txn >= r->max_per_txn;
      k = (MDB_val){.mv_size = len, .mv_data = resume};
      mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    }
    mdb_cursor_close(cur);
    if (rc < 0) return rc;
    if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
    if (!full) return 0;
    rc = maybe_commit(r, true);
    if (rc < 0) return rc;
  }
}

typedef struct series_cut {
  uint32_t sid;
  int64_t cutoff;
} series_cut_t;

/* Keys (series, time) in time order: delete up to the cutoff, then stop. */
static verdict_t judge_series(const MDB_val *k, const MDB_val *v, const void *ctx) {
  (void)v;
  const series_cut_t *c = ctx;
  if (k->mv_size < 12) return V_CORRUPT;
  if (ember__get_be32(k->mv_data) != c->sid ||
      ember__get_time((const uint8_t *)k->mv_data + 4) >= c->cutoff)
    return V_STOP;
  return V_DELETE;
}

/* Delete the keys of series `sid` in `db` whose time is below `cutoff`. */
static int delete_series(rctx_t *r, ember__db_t db, uint32_t sid, int64_t cutoff) {
  uint8_t key[8 + 4];
  ember__put_be32(key, sid);
  ember__put_time(key + 4, INT64_MIN);
  series_cut_t c = {sid, cutoff};
  return delete_where(r, db, key, sizeof key, judge_series, &c);
}

/* Idempotency keys carry their window's time in the value. */
static verdict_t judge_idem(const MDB_val *k, const MDB_val *v, const void *ctx) {
  if (k->mv_size != EMBER__IDEM_KEY_LEN || v->mv_size != 8) return V_CORRUPT;
  return ember__get_time(v->mv_data) < *(const int64_t *)ctx ? V_DELETE : V_SKIP;
}

/* Delete idempotency keys whose window started below `cutoff`. They are
 * keyed by agent, not time, so this is one pass over the table. */
static int delete_idem(rctx_t *r, int64_t cutoff) {
  static const uint8_t first[EMBER__IDEM_KEY_LEN] = {0};
  return delete_where(r, EMBER__DB_IDEM, first, sizeof first, judge_idem, &cutoff);
}

static verdict_t judge_pending(const MDB_val *k, const MDB_val *v, const void *ctx) {
  bool bad;
  bool older = ember__pending_older(k, v, *(const int64_t *)ctx, &bad);
  return bad ? V_CORRUPT : older ? V_DELETE : V_SKIP;
}

static verdict_t judge_run(const MDB_val *k, const MDB_val *v, const void *ctx) {
  bool bad;
  bool older = ember__run_older(k, v, *(const int64_t *)ctx, &bad);
  return bad ? V_CORRUPT : older ? V_DELETE : V_SKIP;
}

/* Pending windows that started below the cutoff, and runs whose last
 * window did: a pass over each table (both small: the uncommitted tail,
 * and one run per partition and assignment). */
static int delete_runs(rctx_t *r, int64_t cutoff) {
  static const uint8_t first[EMBER__PENDING_KEY_LEN] = {0};
  int rc = delete_where(r, EMBER__DB_PENDING, first, sizeof first, judge_pending, &cutoff);
  if (rc == 0) rc = delete_where(r, EMBER__DB_RUNS, first, sizeof first, judge_run, &cutoff);
  return rc;
}

static int retain_locked(ember_store_t *s, int64_t before_ns, size_t max_per_txn,
                         uint64_t *deleted);

int ember_store_retain(ember_store_t *s, int64_t before_ns, size_t max_per_txn, uint64_t *deleted) {
  if (!s) return -EINVAL;
  if (s->read_only) return -EACCES;
  /* Deleting needs fresh pages too (copy on write); a run cut short by a
   * full map resumes once the map is grown. */
  uint64_t total = 0;
  int rc;
  do {
    uint64_t d = 0;
    ember__store_enter(s);
    rc = retain_locked(s, before_ns, max_per_txn, &d);
    ember__store_leave(s);
    total += d;
  } while (rc < 0 && ember__store_retry(s, &rc));
  if (rc == 0 && deleted) *deleted = total;
  return rc;
}

static int retain_locked(ember_store_t *s, int64_t before_ns, size_t max_per_txn,
                         uint64_t *deleted) {
  rctx_t r = {.s = s, .max_per_txn = max_per_txn ? max_per_txn : 1000};
  uint32_t *sids = NULL;
  size_t nsids = 0;
  int64_t cutoff = ember__rollup_floor(before_ns);

  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &r.txn));
  if (rc < 0) goto cleanup;
  /* Record the cutoff first, so that from this commit on no write brings
   * back what is about to go. Never move it backwards. */
  MDB_val k = {.mv_size = strlen(EMBER__META_RETAINED),
               .mv_data = (void *)(uintptr_t)EMBER__META_RETAINED},
          v;
  int mrc = ember__get(s, r.txn, EMBER__DB_META, &k, &v);
  if (mrc == MDB_SUCCESS && v.mv_size != 8) mrc = MDB_CORRUPTED;
  if (mrc == MDB_SUCCESS && ember__get_time(v.mv_data) > cutoff)
    cutoff = ember__get_time(v.mv_data);
  else if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  uint8_t cb[8];
  ember__put_time(cb, cutoff);
  v = (MDB_val){.mv_size = sizeof cb, .mv_data = cb};
  rc = ember__store_err(ember__put(s, r.txn, EMBER__DB_META, &k, &v, 0));
  if (rc == 0) rc = maybe_commit(&r, true);
  if (rc < 0) goto cleanup;

  /* Pending windows go before the rows they were added to, so that an undo
   * running between two of these transactions never meets a pending
   * window whose rows are gone. */
  rc = delete_runs(&r, cutoff);
  if (rc == 0) rc = ember__select(s, r.txn, NULL, &sids, &nsids);
  if (rc < 0) goto cleanup;
  static const ember__db_t dbs[] = {EMBER__DB_PROFILES, EMBER__DB_ROLLUP_1M, EMBER__DB_ROLLUP_1H,
                                    EMBER__DB_CPU};
  for (size_t i = 0; i < nsids; i++) {
    for (size_t d = 0; d < sizeof dbs / sizeof dbs[0]; d++) {
      rc = delete_series(&r, dbs[d], sids[i], cutoff);
      if (rc < 0) goto cleanup;
    }
  }
  rc = delete_idem(&r, cutoff);
  if (rc == 0) rc = ember__session_retain(s, &r.txn, cutoff, r.max_per_txn, &r.in_txn, &r.deleted);
  if (rc == 0) rc = ember__store_commit(s, r.txn);
  r.txn = NULL;
cleanup:
  *deleted = r.deleted;
  if (r.txn) mdb_txn_abort(r.txn);
  /* Retention creates no ids, but keep the rule of write.c: a failed
   * write transaction (its commit included) empties the dictionary caches. */
  if (rc < 0) ember__store_caches_clear(s);
  ember_free(sids);
  return rc;
}
