/* The write path: a batch of windows in one write transaction.
 *
 * Every window is written from its wire view (ember/wire.h): decoded v2
 * messages as they are, profiles converted first (ember_wire_from_profile).
 * The dictionaries are intern.c's; this file owns the transaction, the
 * window rows, the CPU points, the rollups summed per batch and the
 * sources. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "intern.h"
#include "row.h"
#include "runs.h"
#include "sort_u64.h"
#include "store_int.h"

/* One rollup row being summed in memory for the length of a batch, so
 * that each rollup row is read, merged and rewritten once per batch rather
 * than once per window. Entries are kept sorted by stack id. */
typedef struct agg {
  ember__db_t db;
  uint32_t sid;
  int64_t bucket;
  ember__row_hdr_t hdr; /* mask, ntypes, duration and period so far */
  uint32_t *ids;
  int64_t *vals; /* n * hdr.ntypes */
  size_t n, ids_cap, vals_cap;
} agg_t;

/* Scratch space reused across the profiles of one batch. */
typedef struct wctx {
  ember_store_t *s;
  MDB_txn *txn;
  ember__dict_t dict;
  ember__out_t row; /* encoded profile row */
  uint64_t *ents;   /* store stack id << 32 | sample index in the view */
  size_t ents_cap;
  uint32_t *sids; /* the view's samples' stack ids */
  size_t sids_cap;
  uint32_t *wids; /* this window's entries, sorted: stack ids */
  int64_t *wvals; /* and values, ntypes per entry */
  size_t wids_cap, wvals_cap;
  uint32_t *oids; /* a stored row, decoded */
  int64_t *ovals;
  size_t oids_cap, ovals_cap;
  uint32_t *ids; /* merged row: stack ids */
  int64_t *vals; /* merged row: values */
  size_t ids_cap, vals_cap;
  agg_t *aggs;
  size_t naggs, aggs_cap;
  ember__htab_t agg_index;
  const agg_t *agg_key; /* the key being looked up */
  ember__srcs_t srcs;   /* runs of a batch with sources (runs.h) */
  char why[192];        /* why a view was refused */
} wctx_t;

static int add_checked(int64_t *dst, int64_t v) {
  if (v > INT64_MAX - *dst) return -ERANGE;
  *dst += v;
  return 0;
}

/* Merge two sorted entry lists (a, b; nt values each) into w->ids/w->vals,
 * adding the values of equal ids. Either list may be the output of an
 * earlier merge, never w->ids/w->vals themselves. */
static int merge_sorted(wctx_t *w, unsigned nt, const uint32_t *aid, const int64_t *av, size_t an,
                        const uint32_t *bid, const int64_t *bv, size_t bn, size_t *nout) {
  if (an > SIZE_MAX / EMBER_MAX_VALUE_TYPES - bn) return -ENOMEM;
  size_t need = an + bn;
  int rc = ember__grow(&w->ids, &w->ids_cap, need, sizeof *w->ids);
  if (rc == 0) rc = ember__grow(&w->vals, &w->vals_cap, need * nt, sizeof *w->vals);
  if (rc < 0) return rc;
  size_t i = 0, j = 0, n = 0;
  while (i < an || j < bn) {
    int64_t *dst = &w->vals[n * nt];
    if (j >= bn || (i < an && aid[i] < bid[j])) {
      w->ids[n] = aid[i];
      memcpy(dst, &av[i * nt], nt * sizeof *dst);
      i++;
    } else if (i >= an || bid[j] < aid[i]) {
      w->ids[n] = bid[j];
      memcpy(dst, &bv[j * nt], nt * sizeof *dst);
      j++;
    } else {
      w->ids[n] = aid[i];
      memcpy(dst, &av[i * nt], nt * sizeof *dst);
      for (unsigned t = 0; t < nt; t++) {
        rc = add_checked(&dst[t], bv[j * nt + t]);
        if (rc < 0) return rc;
      }
      i++;
      j++;
    }
    n++;
  }
  *nout = n;
  return 0;
}

/* Decode a stored row into w->oids/w->ovals, folding its header into `h`
 * (longest duration, period kept only if both agree). */
static int load_row(wctx_t *w, const MDB_val *old, ember__row_hdr_t *h, size_t *nout) {
  ember__row_iter_t it;
  if (!ember__row_open(&it, old->mv_data, old->mv_size) || it.hdr.mask != h->mask)
    return EMBER_ECORRUPT;
  if (it.hdr.duration_ns > h->duration_ns) h->duration_ns = it.hdr.duration_ns;
  if (it.hdr.period_ns != h->period_ns) h->period_ns = 0;
  /* Every entry takes at least one byte per value and one for the id. */
  if (it.hdr.nstacks > old->mv_size) return EMBER_ECORRUPT;
  size_t n = (size_t)it.hdr.nstacks, nt = h->ntypes;
  int rc = ember__grow(&w->oids, &w->oids_cap, n, sizeof *w->oids);
  if (rc == 0) rc = ember__grow(&w->ovals, &w->ovals_cap, n * nt, sizeof *w->ovals);
  if (rc < 0) return rc;
  for (size_t i = 0; i < n; i++) {
    int r = ember__row_next(&it, &w->oids[i], &w->ovals[i * nt]);
    if (r < 0) return r;
    if (r == 0) return EMBER_ECORRUPT;
  }
  if (ember__row_next(&it, &w->oids[0], w->ovals) != 0) return EMBER_ECORRUPT;
  *nout = n;
  return 0;
}

/* Add the sorted entries (ids, vals) with header `h` into the row stored
 * under `k` in `db`, creating it if absent. */
static int put_row(wctx_t *w, ember__db_t db, MDB_val *k, ember__row_hdr_t h, const uint32_t *ids,
                   const int64_t *vals, size_t n) {
  MDB_val old;
  int mrc = ember__get(w->s, w->txn, db, k, &old);
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
  int rc;
  if (mrc == MDB_SUCCESS) {
    size_t on = 0;
    rc = load_row(w, &old, &h, &on);
    if (rc == 0) rc = merge_sorted(w, h.ntypes, w->oids, w->ovals, on, ids, vals, n, &n);
    if (rc < 0) return rc;
    ids = w->ids;
    vals = w->vals;
  }
  w->row.len = 0;
  rc = ember__row_encode(&w->row, &h, ids, vals, n);
  if (rc < 0) return rc;
  MDB_val v = {.mv_size = w->row.len, .mv_data = w->row.data};
  return ember__store_err(ember__put(w->s, w->txn, db, k, &v, 0));
}

static bool agg_eq(const void *ctx, uint32_t idx) {
  const wctx_t *w = ctx;
  const agg_t *a = &w->aggs[idx], *b = w->agg_key;
  return a->db == b->db && a->sid == b->sid && a->bucket == b->bucket && a->hdr.mask == b->hdr.mask;
}

static uint64_t agg_hash_key(const agg_t *a) {
  uint64_t h = ember__hash_mix((uint64_t)a->db << 40 | (uint64_t)a->hdr.mask << 32, a->sid);
  return ember__hash_mix(h, (uint64_t)a->bucket);
}

static uint64_t agg_hash(const void *ctx, uint32_t idx) {
  const wctx_t *w = ctx;
  return agg_hash_key(&w->aggs[idx]);
}

/* Add this window's sorted entries (w->wids/w->wvals) into the in-memory
 * rollup row of (db, series, bucket of `unit`, mask). */
static int agg_add(wctx_t *w, ember__db_t db, int64_t unit, uint32_t sid, int64_t start,
                   int64_t end, const ember__row_hdr_t *h, size_t n) {
  agg_t key = {.db = db, .sid = sid, .bucket = ember__bucket_floor(start, unit), .hdr = *h};
  key.hdr.duration_ns = (uint64_t)end - (uint64_t)key.bucket;
  uint64_t hash = agg_hash_key(&key);
  w->agg_key = &key;
  int64_t at = ember__htab_find(&w->agg_index, hash, agg_eq, w);
  agg_t *a;
  if (at < 0) {
    if (w->naggs >= UINT32_MAX) return -ENOMEM;
    int rc = ember__grow(&w->aggs, &w->aggs_cap, w->naggs + 1, sizeof *w->aggs);
    if (rc < 0) return rc;
    rc = ember__htab_insert(&w->agg_index, hash, (uint32_t)w->naggs, agg_hash, w);
    if (rc < 0) return rc;
    a = &w->aggs[w->naggs++];
    *a = key;
  } else {
    a = &w->aggs[at];
    if (key.hdr.duration_ns > a->hdr.duration_ns) a->hdr.duration_ns = key.hdr.duration_ns;
    if (key.hdr.period_ns != a->hdr.period_ns) a->hdr.period_ns = 0;
  }
  unsigned nt = h->ntypes;
  size_t m = 0;
  int rc = merge_sorted(w, nt, a->ids, a->vals, a->n, w->wids, w->wvals, n, &m);
  if (rc == 0) rc = ember__grow(&a->ids, &a->ids_cap, m, sizeof *a->ids);
  if (rc == 0) rc = ember__grow(&a->vals, &a->vals_cap, m * nt, sizeof *a->vals);
  if (rc < 0) return rc;
  /* An idle window first in its bucket leaves both lists empty and never
   * allocated: memcpy must not see their NULL pointers, even for 0 bytes. */
  if (m) {
    memcpy(a->ids, w->ids, m * sizeof *a->ids);
    memcpy(a->vals, w->vals, m * nt * sizeof *a->vals);
  }
  a->n = m;
  return 0;
}

/* Write every rollup row summed in this batch into its stored row. */
static int flush_aggs(wctx_t *w) {
  for (size_t i = 0; i < w->naggs; i++) {
    agg_t *a = &w->aggs[i];
    uint8_t key[EMBER__PROFILE_KEY_LEN];
    ember__put_be32(key, a->sid);
    ember__put_time(key + 4, a->bucket);
    key[12] = a->hdr.mask;
    MDB_val k = {.mv_size = sizeof key, .mv_data = key};
    int rc = put_row(w, a->db, &k, a->hdr, a->ids, a->vals, a->n);
    if (rc < 0) return rc;
  }
  return 0;
}

/* Add `v` to the big-endian u64 stored under `k` in `db`. */
static int add_u64(wctx_t *w, ember__db_t db, MDB_val *k, uint64_t add) {
  MDB_val v;
  uint64_t cur = 0;
  int mrc = ember__get(w->s, w->txn, db, k, &v);
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
  return ember__store_err(ember__put(w->s, w->txn, db, k, &v, 0));
}

static int check_window(int64_t start, int64_t end) {
  /* The row stores end - start as a non-negative int64. */
  if (start >= end || (uint64_t)end - (uint64_t)start > INT64_MAX) return -EINVAL;
  /* So do the rollup rows, from the start of the hour (the minute is later). */
  if ((uint64_t)end - (uint64_t)ember__rollup_floor(start) > INT64_MAX) return -EINVAL;
  return 0;
}

/* The window's CPU time: its CPU ns, else samples x period; -1 when it has
 * neither. -ERANGE when the sum overflows. */
static int window_cpu(const ember_wire_t *v, int64_t *cpu) {
  int ins = -1, iss = -1;
  for (size_t t = 0; t < v->ntypes; t++) {
    if (v->types[t] == EMBER_VT_CPU_NS) ins = (int)t;
    if (v->types[t] == EMBER_VT_CPU_SAMPLES) iss = (int)t;
  }
  *cpu = -1;
  int col = ins >= 0 ? ins : (iss >= 0 && v->period_ns > 0 ? iss : -1);
  if (col < 0) return 0;
  int64_t sum = 0;
  for (size_t i = 0; i < v->nsamples; i++)
    if (add_checked(&sum, v->values[i * v->ntypes + (size_t)col]) < 0) return -ERANGE;
  if (ins < 0) {
    if (sum > INT64_MAX / v->period_ns) return -ERANGE;
    sum *= v->period_ns;
  }
  *cpu = sum;
  return 0;
}

/* Store window `v`, read from `src` (NULL: no source). */
static int write_one(wctx_t *w, const ember_wire_t *v, const ember_store_source_t *src,
                     int64_t retained, bool *dup, bool *expired) {
  int64_t start = v->start_ns, end = v->end_ns;
  const char *agent = v->agent_id;
  uint8_t idem[EMBER__IDEM_KEY_LEN];
  int rc;
  *dup = false;
  *expired = start < retained;
  if (*expired) return 0;
  if (agent) {
    uint8_t val[8];
    ember__put_be64(idem, ember__label_hash(agent));
    ember__put_be64(idem + 8, v->seq);
    ember__put_time(val, start);
    MDB_val k = {.mv_size = sizeof idem, .mv_data = idem};
    MDB_val iv = {.mv_size = sizeof val, .mv_data = val};
    int mrc = ember__put(w->s, w->txn, EMBER__DB_IDEM, &k, &iv, MDB_NOOVERWRITE);
    if (mrc == MDB_KEYEXIST) {
      *dup = true;
      /* Stored before, so not pending; but read in this run all the same. */
      return src ? ember__srcs_window(&w->srcs, src, start) : 0;
    }
    rc = ember__store_err(mrc);
    if (rc < 0) return rc;
  }

  uint32_t sid;
  rc = ember__dict_series(&w->dict, &v->labels, &sid);
  if (rc < 0) return rc;

  /* Columns in ascending value type order, whatever the window's order. */
  ember__row_hdr_t h = {0};
  size_t cols[EMBER_MAX_VALUE_TYPES];
  for (int vt = 1; vt <= EMBER_MAX_VALUE_TYPES; vt++) {
    for (size_t t = 0; t < v->ntypes; t++) {
      if (v->types[t] != (ember_value_type_t)vt) continue;
      h.mask |= ember__vt_bit((ember_value_type_t)vt);
      cols[h.ntypes++] = t;
    }
  }
  /* A snapshot (in-use) and a count over the window cannot share a row:
   * the counts go into the rollups and the snapshot must not, and a merge
   * reads the two differently. The agent sends them as two windows. */
  if (ember__mask_is_gauge(h.mask) && (h.mask & (uint8_t)~EMBER__GAUGE_MASK)) {
    snprintf(w->why, sizeof w->why,
             "the window mixes in-use values (gauges) with counted ones (CPU, allocations); "
             "send in-use values in a window of their own");
    return EMBER_ECORRUPT;
  }
  h.duration_ns = (uint64_t)end - (uint64_t)start;
  h.period_ns = v->period_ns > 0 ? (uint64_t)v->period_ns : 0;

  int64_t cpu;
  if ((rc = window_cpu(v, &cpu)) < 0) return rc;

  size_t nsamples = v->nsamples, nt = h.ntypes;
  rc = ember__grow(&w->ents, &w->ents_cap, nsamples, sizeof *w->ents);
  if (rc == 0) rc = ember__grow(&w->wids, &w->wids_cap, nsamples, sizeof *w->wids);
  if (rc == 0) rc = ember__grow(&w->wvals, &w->wvals_cap, nsamples * nt, sizeof *w->wvals);
  if (rc < 0) return rc;
  if (rc == 0) rc = ember__grow(&w->sids, &w->sids_cap, nsamples, sizeof *w->sids);
  if (rc == 0) rc = ember__dict_stacks(&w->dict, v, w->sids, w->why, sizeof w->why);
  if (rc < 0) return rc;
  /* Each sample as one integer key, so that the sort compares integers
   * inline rather than call a comparator per compare as qsort would. */
  for (size_t i = 0; i < nsamples; i++) w->ents[i] = (uint64_t)w->sids[i] << 32 | (uint32_t)i;
  ember__sort_u64(w->ents, nsamples);
  /* Sorted by stack id; samples of one stack (a v2 message may send a
   * stack twice) are added into one entry. */
  size_t n = 0;
  for (size_t i = 0; i < nsamples; i++) {
    uint32_t id = (uint32_t)(w->ents[i] >> 32);
    const int64_t *sv = v->values + (size_t)(uint32_t)w->ents[i] * v->ntypes;
    if (n > 0 && w->wids[n - 1] == id) {
      for (unsigned t = 0; t < nt; t++)
        if (add_checked(&w->wvals[(n - 1) * nt + t], sv[cols[t]]) < 0) return -ERANGE;
      continue;
    }
    w->wids[n] = id;
    for (unsigned t = 0; t < nt; t++) w->wvals[n * nt + t] = sv[cols[t]];
    n++;
  }

  uint8_t key[EMBER__PROFILE_KEY_LEN];
  ember__put_be32(key, sid);
  ember__put_time(key + 4, start);
  key[12] = h.mask;
  MDB_val k = {.mv_size = sizeof key, .mv_data = key};
  rc = put_row(w, EMBER__DB_PROFILES, &k, h, w->wids, w->wvals, n);
  if (rc < 0) return rc;

  /* The same entries, summed in memory into the window's minute and hour
   * rows; flush_aggs() writes them once at the end of the batch. A gauge
   * window has no rollup: a sum of snapshots over time means nothing. */
  if (!ember__mask_is_gauge(h.mask)) {
    rc = agg_add(w, EMBER__DB_ROLLUP_1M, EMBER__ROLLUP_1M_NS, sid, start, end, &h, n);
    if (rc == 0) rc = agg_add(w, EMBER__DB_ROLLUP_1H, EMBER__ROLLUP_NS, sid, start, end, &h, n);
    if (rc < 0) return rc;
  }

  if (cpu >= 0) {
    uint8_t ckey[EMBER__CPU_KEY_LEN];
    memcpy(ckey, key, sizeof ckey);
    MDB_val ck = {.mv_size = sizeof ckey, .mv_data = ckey};
    rc = add_u64(w, EMBER__DB_CPU, &ck, (uint64_t)cpu);
    if (rc < 0) return rc;
  }
  if (!src) return 0;
  /* Exactly what this window added above, for ember_store_undo. */
  ember__contrib_t c = {.pkey = key,
                        .has_cpu = cpu >= 0,
                        .cpu_ns = cpu >= 0 ? cpu : 0,
                        .idem = agent ? idem : NULL,
                        .hdr = &h,
                        .ids = w->wids,
                        .vals = w->wvals,
                        .n = n};
  rc = ember__srcs_window(&w->srcs, src, start);
  if (rc == 0) rc = ember__srcs_stored(&w->srcs, w->s, w->txn, src, &c);
  return rc;
}

static int check_source(const ember_store_source_t *src) {
  if (src->partition < 0 || src->run_start < 0 || src->offset < src->run_start ||
      src->offset == INT64_MAX)
    return -EINVAL;
  return 0;
}

static int write_locked(ember_store_t *s, ember_wire_t *const *views,
                        const ember_store_source_t *sources, size_t n,
                        ember_store_write_result_t *result);

int ember_store_write_wire(ember_store_t *s, ember_wire_t *const *views,
                           const ember_store_source_t *sources, size_t n,
                           ember_store_write_result_t *result) {
  /* A failure that is not one window's leaves bad at SIZE_MAX. */
  if (result) *result = (ember_store_write_result_t){.bad = SIZE_MAX};
  if (!s || (!views && n)) return -EINVAL;
  if (s->read_only) return -EACCES;
  for (size_t i = 0; i < n; i++) {
    if (!views[i] || check_window(views[i]->start_ns, views[i]->end_ns) < 0) return -EINVAL;
    if (sources && check_source(&sources[i]) < 0) return -EINVAL;
  }
  /* A full map aborts the whole batch; grown, the batch is written again
   * from the start (all or nothing, so nothing of the first try remains). */
  int rc;
  do {
    ember__store_enter(s);
    rc = write_locked(s, views, sources, n, result);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

int ember_store_write_from(ember_store_t *s, ember_profile_t *const *profiles,
                           const ember_store_source_t *sources, size_t n,
                           ember_store_write_result_t *result) {
  if (!s || (!profiles && n)) return -EINVAL;
  if (s->read_only) return -EACCES;
  for (size_t i = 0; i < n; i++) {
    if (!profiles[i]) return -EINVAL;
    int64_t start, end;
    ember_profile_window(profiles[i], &start, &end);
    if (check_window(start, end) < 0) return -EINVAL;
  }
  ember_wire_t **views = ember_calloc(n ? n : 1, sizeof *views);
  if (!views) return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) rc = ember_wire_from_profile(profiles[i], &views[i]);
  ember_store_write_result_t res = {.bad = SIZE_MAX};
  if (rc == 0) rc = ember_store_write_wire(s, views, sources, n, &res);
  /* A profile's hashes are computed from it, so the store refuses one only
   * for its content: text that is not UTF-8. That is bad input, as a
   * bad window is. */
  if (rc == EMBER_ECORRUPT && res.bad < n) rc = -EINVAL;
  if (result && (rc == 0 || rc == -EINVAL || rc == -ERANGE)) *result = res;
  for (size_t i = 0; i < n; i++) ember_wire_free(views[i]);
  ember_free(views);
  return rc;
}

int ember_store_write(ember_store_t *s, ember_profile_t *const *profiles, size_t n,
                      ember_store_write_result_t *result) {
  return ember_store_write_from(s, profiles, NULL, n, result);
}

static int write_locked(ember_store_t *s, ember_wire_t *const *views,
                        const ember_store_source_t *sources, size_t n,
                        ember_store_write_result_t *result) {
  wctx_t w = {.s = s};
  ember_store_write_result_t res = {0};
  res.bad = SIZE_MAX;
  bool began = false;
  ember__dcache_mark_t marks[EMBER__NCACHES];
  for (size_t i = 0; i < EMBER__NCACHES; i++) marks[i] = ember__dcache_mark(&s->cache[i]);
  size_t failed = SIZE_MAX;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &w.txn));
  if (rc < 0) goto cleanup;
  began = true;
  ember__dict_init(&w.dict, s, w.txn);
  /* Windows older than the retention cutoff would be deleted anyway, and
   * their idempotency keys may already be gone. */
  int64_t retained = INT64_MIN;
  MDB_val rk = {.mv_size = strlen(EMBER__META_RETAINED),
                .mv_data = (void *)(uintptr_t)EMBER__META_RETAINED},
          rv;
  int mrc = ember__get(s, w.txn, EMBER__DB_META, &rk, &rv);
  if (mrc == MDB_SUCCESS && rv.mv_size == 8) {
    retained = ember__get_time(rv.mv_data);
  } else if (mrc != MDB_NOTFOUND) {
    rc = mrc == MDB_SUCCESS ? EMBER_ECORRUPT : ember__store_err(mrc);
    goto cleanup;
  }
  for (size_t i = 0; i < n; i++) {
    bool dup, expired;
    w.why[0] = '\0';
    rc = write_one(&w, views[i], sources ? &sources[i] : NULL, retained, &dup, &expired);
    if (rc < 0) {
      /* A sentence means the view's content was refused, not the store;
       * so does a sum that would overflow. */
      if (rc == -ERANGE && w.why[0] == '\0')
        snprintf(w.why, sizeof w.why, "a value sum would overflow");
      if (w.why[0] != '\0') failed = i;
      goto cleanup;
    }
    if (expired)
      res.expired++;
    else if (dup)
      res.duplicates++;
    else
      res.written++;
  }
  rc = flush_aggs(&w);
  if (rc == 0) rc = ember__srcs_flush(&w.srcs, s, w.txn);
  if (rc == 0) rc = ember__dict_save(&w.dict);
  if (rc < 0) goto cleanup;
  rc = ember__store_commit(s, w.txn);
  w.txn = NULL;
  if (rc < 0) goto cleanup;
  if (result) *result = res;
cleanup:
  if (w.txn) mdb_txn_abort(w.txn);
  if (rc < 0 && failed != SIZE_MAX) {
    /* Bad input: what the caches held before this batch is still true;
     * only what the batch added names ids that were never committed. The
     * series-partition pairs are few: they are simply forgotten. */
    for (size_t i = 0; i < EMBER__NCACHES; i++) ember__dcache_rollback(&s->cache[i], marks[i]);
    ember__kset_clear(&s->parts);
    if (result) {
      *result = (ember_store_write_result_t){.bad = failed};
      snprintf(result->why, sizeof result->why, "%s", w.why);
    }
  } else if (rc < 0 && began) {
    /* Whatever failed once the transaction began (a put, a full map, or
     * the commit itself on a full disk), the caches may name ids it handed
     * out that were never committed: a retry must not find them. */
    ember__store_caches_clear(s);
  }
  if (began) ember__dict_free(&w.dict);
  for (size_t i = 0; i < w.naggs; i++) {
    ember_free(w.aggs[i].ids);
    ember_free(w.aggs[i].vals);
  }
  ember_free(w.aggs);
  ember__htab_free(&w.agg_index);
  ember__srcs_free(&w.srcs);
  ember__out_free(&w.row);
  ember_free(w.ents);
  ember_free(w.sids);
  ember_free(w.wids);
  ember_free(w.wvals);
  ember_free(w.oids);
  ember_free(w.ovals);
  ember_free(w.ids);
  ember_free(w.vals);
  return rc;
}
