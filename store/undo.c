/* ember_store_undo: subtracting pending windows exactly.
 *
 * A pending entry holds what its window added (runs.h): its own row under
 * its profiles key, the same entries in the rollup rows of its minute and
 * its hour, its CPU nanoseconds, its idempotency key. Values are integer
 * sums, so taking a window out is a subtraction, done for every row the
 * undone windows touched: the windows of the range are summed per row in
 * memory first (two undone windows may share a row), and each row is read,
 * reduced and rewritten (or deleted) once. Window rows come first, then
 * minute rows, then hour rows, because a rollup row's header (latest end,
 * agreed period) and its existence are recomputed from the rows one level
 * down, which must be final by then. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "row.h"
#include "runs.h"
#include "store_int.h"

enum { LVL_WINDOW, LVL_MINUTE, LVL_HOUR, LVL_CPU };

static const ember__db_t level_db[] = {EMBER__DB_PROFILES, EMBER__DB_ROLLUP_1M, EMBER__DB_ROLLUP_1H,
                                       EMBER__DB_CPU};
static const int64_t level_unit[] = {0, EMBER__ROLLUP_1M_NS, EMBER__ROLLUP_NS, 0};

/* One undone window: its pending entry, copied out of the map (a write
 * transaction may move pages under a pointer it returned). */
typedef struct uwin {
  uint8_t key[EMBER__PENDING_KEY_LEN];
  uint8_t *val;
  ember__pending_t p; /* its row points into val */
} uwin_t;

/* A row (or CPU point) that an undone window added to. */
typedef struct target {
  uint8_t level;
  uint8_t key[EMBER__PROFILE_KEY_LEN]; /* a CPU point's key is 12 bytes; the last is 0 */
  uint32_t win;
} target_t;

/* A decoded row's entries. */
typedef struct entries {
  uint32_t *ids;
  int64_t *vals; /* n * ntypes */
  size_t n, ids_cap, vals_cap;
} entries_t;

typedef struct uctx {
  ember_store_t *s;
  MDB_txn *txn;
  uwin_t *wins;
  size_t nwins, wins_cap;
  target_t *tgs;
  size_t ntgs;
  entries_t sum, one, stored, out;
  ember__out_t enc;
} uctx_t;

static int reserve(entries_t *e, size_t n, unsigned nt) {
  int rc = ember__grow(&e->ids, &e->ids_cap, n ? n : 1, sizeof *e->ids);
  if (rc == 0)
    rc = ember__grow(&e->vals, &e->vals_cap, (n ? n : 1) * (nt ? nt : 1), sizeof *e->vals);
  return rc;
}

static void entries_free(entries_t *e) {
  ember_free(e->ids);
  ember_free(e->vals);
}

/* Decode row p[0..len) into `e`; its header into *h. */
static int load(entries_t *e, const void *p, size_t len, ember__row_hdr_t *h) {
  ember__row_iter_t it;
  if (!ember__row_open(&it, p, len) || it.hdr.nstacks > len) return EMBER_ECORRUPT;
  *h = it.hdr;
  size_t n = (size_t)it.hdr.nstacks;
  int rc = reserve(e, n, it.hdr.ntypes);
  if (rc < 0) return rc;
  for (size_t i = 0; i < n; i++) {
    int r = ember__row_next(&it, &e->ids[i], &e->vals[i * it.hdr.ntypes]);
    if (r <= 0) return r < 0 ? r : EMBER_ECORRUPT;
  }
  int64_t scratch[EMBER_MAX_VALUE_TYPES];
  uint32_t id;
  if (ember__row_next(&it, &id, scratch) != 0) return EMBER_ECORRUPT;
  e->n = n;
  return 0;
}

/* out = a + b (sorted entry lists, nt values each). */
static int add(entries_t *out, const entries_t *a, const entries_t *b, unsigned nt) {
  int rc = reserve(out, a->n + b->n, nt);
  if (rc < 0) return rc;
  size_t i = 0, j = 0, n = 0;
  while (i < a->n || j < b->n) {
    int64_t *dst = &out->vals[n * nt];
    if (j >= b->n || (i < a->n && a->ids[i] < b->ids[j])) {
      out->ids[n] = a->ids[i];
      memcpy(dst, &a->vals[i * nt], nt * sizeof *dst);
      i++;
    } else if (i >= a->n || b->ids[j] < a->ids[i]) {
      out->ids[n] = b->ids[j];
      memcpy(dst, &b->vals[j * nt], nt * sizeof *dst);
      j++;
    } else {
      out->ids[n] = a->ids[i];
      for (unsigned t = 0; t < nt; t++) {
        if (b->vals[j * nt + t] > INT64_MAX - a->vals[i * nt + t]) return -ERANGE;
        dst[t] = a->vals[i * nt + t] + b->vals[j * nt + t];
      }
      i++;
      j++;
    }
    n++;
  }
  out->n = n;
  return 0;
}

/* out = stored - sum. Every entry of `sum` must be in `stored` with values
 * no larger (the row is the sum of what was added to it, the undone windows
 * among them); anything else is a store that does not match its pending
 * windows. An entry the subtraction brings to zero in every value goes, as
 * if it had never been added; entries it does not touch stay as they are. */
static int subtract(entries_t *out, const entries_t *stored, const entries_t *sum, unsigned nt) {
  int rc = reserve(out, stored->n, nt);
  if (rc < 0) return rc;
  size_t j = 0, n = 0;
  for (size_t i = 0; i < stored->n; i++) {
    const int64_t *sv = &stored->vals[i * nt];
    int64_t *dst = &out->vals[n * nt];
    if (j < sum->n && sum->ids[j] < stored->ids[i]) return EMBER_ECORRUPT;
    if (j >= sum->n || sum->ids[j] != stored->ids[i]) {
      out->ids[n] = stored->ids[i];
      memcpy(dst, sv, nt * sizeof *dst);
      n++;
      continue;
    }
    bool zero = true;
    for (unsigned t = 0; t < nt; t++) {
      int64_t d = sv[t] - sum->vals[j * nt + t];
      if (d < 0) return EMBER_ECORRUPT;
      dst[t] = d;
      zero = zero && d == 0;
    }
    j++;
    if (zero) continue;
    out->ids[n++] = stored->ids[i];
  }
  if (j != sum->n) return EMBER_ECORRUPT;
  out->n = n;
  return 0;
}

static int tg_cmp(const void *a, const void *b) {
  const target_t *x = a, *y = b;
  if (x->level != y->level) return x->level < y->level ? -1 : 1;
  int c = memcmp(x->key, y->key, sizeof x->key);
  if (c) return c;
  return (x->win > y->win) - (x->win < y->win);
}

/* The header a rollup row of `level` keyed (sid, bucket, mask) must have
 * now: latest end and agreed period of the rows one level down in its
 * bucket. *any is false when none is left. */
static int rollup_header(uctx_t *u, int level, const uint8_t *key, ember__row_hdr_t *h, bool *any) {
  uint32_t sid = ember__get_be32(key);
  int64_t bucket = ember__get_time(key + 4);
  /* bucket < INT64_MAX: it is the floor of a window start, which is. */
  int64_t next = ember__bucket_ceil(bucket + 1, level_unit[level]);
  uint8_t mask = key[12];
  uint8_t from[EMBER__PROFILE_KEY_LEN];
  memcpy(from, key, 12);
  from[12] = 0;
  MDB_cursor *cur = NULL;
  int rc = ember__store_err(mdb_cursor_open(u->txn, u->s->dbi[level_db[level - 1]], &cur));
  if (rc < 0) return rc;
  MDB_val k = {.mv_size = sizeof from, .mv_data = from}, v;
  uint64_t latest = 0, period = 0;
  *any = false;
  int mrc;
  for (mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); mrc == MDB_SUCCESS;
       mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (k.mv_size != EMBER__PROFILE_KEY_LEN) {
      rc = EMBER_ECORRUPT;
      break;
    }
    const uint8_t *kp = k.mv_data;
    int64_t t = ember__get_time(kp + 4);
    if (ember__get_be32(kp) != sid || t >= next) break;
    if (kp[12] != mask) continue;
    ember__row_iter_t it;
    if (!ember__unseal(&k, &v) || !ember__row_open(&it, v.mv_data, v.mv_size) ||
        it.hdr.mask != mask) {
      rc = EMBER_ECORRUPT;
      break;
    }
    /* As the write path: the end of the row's latest window, from the
     * bucket's start (no overflow: writes check that it fits). */
    uint64_t end = (uint64_t)t - (uint64_t)bucket + it.hdr.duration_ns;
    if (!*any) {
      latest = end;
      period = it.hdr.period_ns;
    } else {
      if (end > latest) latest = end;
      if (it.hdr.period_ns != period) period = 0;
    }
    *any = true;
  }
  mdb_cursor_close(cur);
  if (rc < 0) return rc;
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
  if (latest > INT64_MAX) return EMBER_ECORRUPT;
  h->duration_ns = latest;
  h->period_ns = period;
  return 0;
}

/* Take the windows tgs[from..to) (one row) out of that row. */
static int undo_row(uctx_t *u, size_t from, size_t to) {
  const target_t *t = &u->tgs[from];
  int level = t->level;
  ember__db_t db = level_db[level];
  uint8_t key[EMBER__PROFILE_KEY_LEN];
  memcpy(key, t->key, sizeof key);
  MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
  ember__row_hdr_t h;
  unsigned nt = 0;
  u->sum.n = 0;
  for (size_t i = from; i < to; i++) {
    const uwin_t *w = &u->wins[u->tgs[i].win];
    int rc = load(&u->one, w->p.row, w->p.row_len, &h);
    if (rc < 0) return rc;
    nt = h.ntypes;
    rc = add(&u->out, &u->sum, &u->one, nt);
    if (rc < 0) return rc;
    entries_t swap = u->sum;
    u->sum = u->out;
    u->out = swap;
  }
  int mrc = ember__get(u->s, u->txn, db, &k, &v);
  /* Every undone window added to this row in the same transaction that
   * recorded it as pending. */
  if (mrc == MDB_NOTFOUND) return EMBER_ECORRUPT;
  if (mrc != MDB_SUCCESS) return ember__store_err(mrc);
  int rc = load(&u->stored, v.mv_data, v.mv_size, &h);
  if (rc == 0 && h.mask != key[12]) rc = EMBER_ECORRUPT;
  if (rc == 0) rc = subtract(&u->out, &u->stored, &u->sum, nt);
  if (rc < 0) return rc;
  bool keep;
  if (level == LVL_WINDOW) {
    /* A row left empty goes if what was undone had entries. An undone idle
     * window leaves its empty row: another idle window (a process with the
     * same labels) may have written it too, and nothing tells them apart.
     * The header (longest duration, agreed period) stays as it is, for
     * the same reason. */
    keep = u->out.n > 0 || u->sum.n == 0;
  } else {
    bool any = false;
    rc = rollup_header(u, level, key, &h, &any);
    if (rc < 0) return rc;
    /* A rollup row is the sum of the rows below it: with none left it must
     * be empty, and goes. */
    if (!any && u->out.n > 0) return EMBER_ECORRUPT;
    keep = any;
  }
  if (!keep) return ember__store_err(mdb_del(u->txn, u->s->dbi[db], &k, NULL));
  u->enc.len = 0;
  rc = ember__row_encode(&u->enc, &h, u->out.ids, u->out.vals, u->out.n);
  if (rc < 0) return rc;
  v = (MDB_val){.mv_size = u->enc.len, .mv_data = u->enc.data};
  return ember__store_err(ember__put(u->s, u->txn, db, &k, &v, 0));
}

/* Take the CPU nanoseconds of tgs[from..to) (one point) out of it. */
static int undo_cpu(uctx_t *u, size_t from, size_t to) {
  uint8_t key[EMBER__CPU_KEY_LEN];
  memcpy(key, u->tgs[from].key, sizeof key);
  int64_t sum = 0;
  for (size_t i = from; i < to; i++) {
    int64_t c = u->wins[u->tgs[i].win].p.cpu_ns;
    if (c > INT64_MAX - sum) return EMBER_ECORRUPT;
    sum += c;
  }
  MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
  int mrc = ember__get(u->s, u->txn, EMBER__DB_CPU, &k, &v);
  if (mrc == MDB_NOTFOUND) return EMBER_ECORRUPT;
  if (mrc != MDB_SUCCESS) return ember__store_err(mrc);
  if (v.mv_size != 8) return EMBER_ECORRUPT;
  uint64_t cur = ember__get_be64(v.mv_data);
  if (cur > INT64_MAX || (int64_t)cur < sum) return EMBER_ECORRUPT;
  uint64_t left = cur - (uint64_t)sum;
  /* Like the rows: a point the undone windows brought to zero goes, one
   * that only idle windows (zero CPU) were undone from stays. */
  if (left == 0 && sum > 0)
    return ember__store_err(mdb_del(u->txn, u->s->dbi[EMBER__DB_CPU], &k, NULL));
  uint8_t b[8];
  ember__put_be64(b, left);
  v = (MDB_val){.mv_size = sizeof b, .mv_data = b};
  return ember__store_err(ember__put(u->s, u->txn, EMBER__DB_CPU, &k, &v, 0));
}

/* Read the pending windows of [from, to) of `partition` into u->wins. */
static int collect(uctx_t *u, int32_t partition, int64_t from, int64_t to) {
  MDB_cursor *cur = NULL;
  int rc = ember__store_err(mdb_cursor_open(u->txn, u->s->dbi[EMBER__DB_PENDING], &cur));
  if (rc < 0) return rc;
  uint8_t start[EMBER__PENDING_KEY_LEN];
  ember__run_key(start, partition, from);
  MDB_val k = {.mv_size = sizeof start, .mv_data = start}, v;
  int mrc;
  for (mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); mrc == MDB_SUCCESS;
       mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    ember__pending_t p;
    if (k.mv_size != EMBER__PENDING_KEY_LEN) {
      rc = EMBER_ECORRUPT;
      break;
    }
    if (ember__get_be32(k.mv_data) != (uint32_t)partition ||
        ember__get_be64((const uint8_t *)k.mv_data + 4) >= (uint64_t)to)
      break;
    if (!ember__unseal(&k, &v) || !ember__pending_decode(&k, &v, &p)) {
      rc = EMBER_ECORRUPT;
      break;
    }
    if (u->nwins >= UINT32_MAX) {
      rc = -ENOMEM;
      break;
    }
    rc = ember__grow(&u->wins, &u->wins_cap, u->nwins + 1, sizeof *u->wins);
    if (rc < 0) break;
    uwin_t *w = &u->wins[u->nwins];
    w->val = ember_malloc(v.mv_size);
    if (!w->val) {
      rc = -ENOMEM;
      break;
    }
    u->nwins++;
    memcpy(w->val, v.mv_data, v.mv_size);
    memcpy(w->key, k.mv_data, sizeof w->key);
    MDB_val ck = {.mv_size = sizeof w->key, .mv_data = w->key},
            cv = {.mv_size = v.mv_size, .mv_data = w->val};
    /* Decoded again from the copy, so that its row points there. */
    if (!ember__pending_decode(&ck, &cv, &w->p)) {
      rc = EMBER_ECORRUPT;
      break;
    }
  }
  mdb_cursor_close(cur);
  if (rc < 0) return rc;
  return mrc == MDB_SUCCESS || mrc == MDB_NOTFOUND ? 0 : ember__store_err(mrc);
}

/* Take `n` undone windows off the window count of run (partition, start). */
static int run_forget(uctx_t *u, int32_t partition, int64_t start, uint64_t n) {
  uint8_t key[EMBER__RUN_KEY_LEN], val[EMBER__RUN_VAL_LEN];
  ember__run_key(key, partition, start);
  MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
  int mrc = ember__get(u->s, u->txn, EMBER__DB_RUNS, &k, &v);
  if (mrc == MDB_NOTFOUND) return 0;
  if (mrc != MDB_SUCCESS) return ember__store_err(mrc);
  ember__run_t r;
  int32_t p;
  int64_t s;
  if (!ember__run_decode(&k, &v, &p, &s, &r)) return EMBER_ECORRUPT;
  r.windows = r.windows > n ? r.windows - n : 0;
  ember__run_encode(val, &r);
  v = (MDB_val){.mv_size = sizeof val, .mv_data = val};
  return ember__store_err(ember__put(u->s, u->txn, EMBER__DB_RUNS, &k, &v, 0));
}

static int undo_locked(ember_store_t *s, int32_t partition, int64_t from, int64_t to,
                       uint64_t *undone) {
  uctx_t u = {.s = s};
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &u.txn));
  if (rc == 0) rc = collect(&u, partition, from, to);
  if (rc < 0 || u.nwins == 0) goto cleanup;

  /* Every row and point each window added to, grouped by row. */
  u.tgs = ember_malloc(u.nwins * 4 * sizeof *u.tgs);
  if (!u.tgs) {
    rc = -ENOMEM;
    goto cleanup;
  }
  for (size_t i = 0; i < u.nwins; i++) {
    const ember__pending_t *p = &u.wins[i].p;
    int64_t start = ember__get_time(p->pkey + 4);
    for (uint8_t l = LVL_WINDOW; l <= LVL_CPU; l++) {
      if (l == LVL_CPU && !(p->flags & EMBER__PENDING_CPU)) continue;
      /* A gauge window was never added to a rollup (write.c). */
      if ((l == LVL_MINUTE || l == LVL_HOUR) && ember__mask_is_gauge(p->pkey[12])) continue;
      target_t *t = &u.tgs[u.ntgs++];
      *t = (target_t){.level = l, .win = (uint32_t)i};
      memcpy(t->key, p->pkey, sizeof t->key);
      if (l == LVL_MINUTE || l == LVL_HOUR)
        ember__put_time(t->key + 4, ember__bucket_floor(start, level_unit[l]));
      if (l == LVL_CPU) t->key[12] = 0;
    }
  }
  qsort(u.tgs, u.ntgs, sizeof *u.tgs, tg_cmp);
  for (size_t i = 0; i < u.ntgs;) {
    size_t j = i + 1;
    while (j < u.ntgs && u.tgs[j].level == u.tgs[i].level &&
           memcmp(u.tgs[j].key, u.tgs[i].key, sizeof u.tgs[i].key) == 0)
      j++;
    rc = u.tgs[i].level == LVL_CPU ? undo_cpu(&u, i, j) : undo_row(&u, i, j);
    if (rc < 0) goto cleanup;
    i = j;
  }

  /* The windows may be written again (a replay counts once more), they
   * are no longer pending, and their runs no longer hold them. */
  uint64_t in_run = 0;
  for (size_t i = 0; i < u.nwins; i++) {
    const uwin_t *w = &u.wins[i];
    if (w->p.flags & EMBER__PENDING_IDEM) {
      MDB_val k = {.mv_size = sizeof w->p.idem, .mv_data = (void *)(uintptr_t)w->p.idem};
      int mrc = mdb_del(u.txn, s->dbi[EMBER__DB_IDEM], &k, NULL);
      if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) {
        rc = ember__store_err(mrc);
        goto cleanup;
      }
    }
    MDB_val k = {.mv_size = sizeof w->key, .mv_data = (void *)(uintptr_t)w->key};
    rc = ember__store_err(mdb_del(u.txn, s->dbi[EMBER__DB_PENDING], &k, NULL));
    if (rc < 0) goto cleanup;
    in_run++;
    /* A run's windows are contiguous in offset order. */
    if (i + 1 == u.nwins || u.wins[i + 1].p.run_start != w->p.run_start) {
      rc = run_forget(&u, partition, w->p.run_start, in_run);
      if (rc < 0) goto cleanup;
      in_run = 0;
    }
  }
  rc = ember__store_commit(s, u.txn);
  u.txn = NULL;
cleanup:
  if (u.txn) mdb_txn_abort(u.txn);
  if (rc == 0) *undone = u.nwins;
  for (size_t i = 0; i < u.nwins; i++) ember_free(u.wins[i].val);
  ember_free(u.wins);
  ember_free(u.tgs);
  entries_free(&u.sum);
  entries_free(&u.one);
  entries_free(&u.stored);
  entries_free(&u.out);
  ember__out_free(&u.enc);
  /* Nothing here touches the dictionary caches or the series_part set
   * (undo creates no ids and keeps the pairs it saw), so a failed
   * transaction leaves them true. */
  return rc;
}

int ember_store_undo(ember_store_t *s, int32_t partition, int64_t from, int64_t to,
                     uint64_t *undone) {
  if (!s || partition < 0 || from < 0 || to < from) return -EINVAL;
  if (s->read_only) return -EACCES;
  uint64_t n = 0;
  int rc;
  do {
    ember__store_enter(s);
    rc = undo_locked(s, partition, from, to, &n);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  if (rc == 0 && undone) *undone = n;
  return rc;
}
