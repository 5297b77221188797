/* The read path: merges over time ranges, series listings, CPU timelines
 * (of a selection, and of each of its series in one pass). */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "htab.h"
#include "row.h"
#include "store_int.h"

/* A long scan gives back its snapshot this often, so that a merge over a
 * week of windows does not pin old pages while writers go on (pinned pages
 * cannot be reused and the file grows). */
#define RENEW_EVERY 4096u

typedef int (*scan_fn)(void *ctx, const MDB_val *k, const MDB_val *v);

/* Call fn for each key of series `sid` with a start time in [from, to), in
 * time order, in the table `cur` reads (keys: series id | start | ...). */
static int scan(MDB_txn *txn, MDB_cursor *cur, size_t keylen, uint32_t sid, int64_t from,
                int64_t to, scan_fn fn, void *ctx, unsigned *since_renew) {
  uint8_t key[EMBER__PROFILE_KEY_LEN] = {0};
  ember__put_be32(key, sid);
  ember__put_time(key + 4, from);
  MDB_val k = {.mv_size = keylen, .mv_data = key}, v;
  /* An earlier scan with another cursor may have renewed the transaction,
   * which leaves this cursor stale until it is renewed too. */
  int mrc = mdb_cursor_renew(txn, cur);
  if (mrc == MDB_SUCCESS) mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  while (mrc == MDB_SUCCESS) {
    if (k.mv_size != keylen) return EMBER_ECORRUPT;
    if (ember__get_be32(k.mv_data) != sid || ember__get_time((uint8_t *)k.mv_data + 4) >= to) break;
    /* Every table scanned is sealed: a value that fails its checksum is
     * refused, not decoded. */
    if (!ember__unseal(&k, &v)) return EMBER_ECORRUPT;
    int rc = fn(ctx, &k, &v);
    if (rc < 0) return rc;
    if (++*since_renew < RENEW_EVERY) {
      mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      continue;
    }
    /* Keys are only valid in their transaction: copy the last one, renew,
     * and seek past it. */
    *since_renew = 0;
    memcpy(key, k.mv_data, keylen);
    mdb_txn_reset(txn);
    rc = ember__store_err(mdb_txn_renew(txn));
    if (rc == 0) rc = ember__store_err(mdb_cursor_renew(txn, cur));
    if (rc < 0) return rc;
    k = (MDB_val){.mv_size = keylen, .mv_data = key};
    mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (mrc == MDB_SUCCESS && k.mv_size == keylen && memcmp(k.mv_data, key, keylen) == 0)
      mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  return mrc == MDB_NOTFOUND || mrc == MDB_SUCCESS ? 0 : ember__store_err(mrc);
}

/* Per-stack sums of one value type, keyed by store stack id. */
typedef struct acc {
  uint32_t *ids;
  int64_t *vals;
  size_t n, cap;
  ember__htab_t index;
  uint32_t key; /* the id being looked up */
} acc_t;

static bool acc_eq(const void *ctx, uint32_t idx) {
  const acc_t *a = ctx;
  return a->ids[idx] == a->key;
}
static uint64_t acc_hash(const void *ctx, uint32_t idx) {
  const acc_t *a = ctx;
  return ember__hash_mix(0, a->ids[idx]);
}

static int acc_add(acc_t *a, uint32_t id, int64_t v) {
  uint64_t h = ember__hash_mix(0, id);
  a->key = id;
  int64_t i = ember__htab_find(&a->index, h, acc_eq, a);
  if (i >= 0) {
    if (v > INT64_MAX - a->vals[i]) return -ERANGE;
    a->vals[i] += v;
    return 0;
  }
  if (a->n == a->cap) {
    size_t c = a->cap ? a->cap * 2 : 256;
    if (c > UINT32_MAX) return EMBER_ETOOBIG;
    uint32_t *ids = ember_realloc(a->ids, c * sizeof *ids);
    if (!ids) return -ENOMEM;
    a->ids = ids;
    int64_t *vals = ember_realloc(a->vals, c * sizeof *vals);
    if (!vals) return -ENOMEM;
    a->vals = vals;
    a->cap = c;
  }
  a->ids[a->n] = id;
  a->vals[a->n] = v;
  int rc = ember__htab_insert(&a->index, h, (uint32_t)a->n, acc_hash, a);
  if (rc < 0) return rc;
  a->n++;
  return 0;
}

static void acc_free(acc_t *a) {
  ember_free(a->ids);
  ember_free(a->vals);
  ember__htab_free(&a->index);
}

typedef struct merge_ctx {
  acc_t stacks;
  uint8_t bit;
  size_t rows;
  int64_t start, end, period;
} merge_ctx_t;

static int merge_row(void *ctx, const MDB_val *k, const MDB_val *v) {
  merge_ctx_t *m = ctx;
  uint8_t mask = ((const uint8_t *)k->mv_data)[12];
  if (!(mask & m->bit)) return 0;
  ember__row_iter_t it;
  if (!ember__row_open(&it, v->mv_data, v->mv_size) || it.hdr.mask != mask) return EMBER_ECORRUPT;
  unsigned col = 0;
  for (uint8_t b = 1; b < m->bit; b = (uint8_t)(b << 1)) col += (mask & b) ? 1u : 0u;
  int64_t start = ember__get_time((const uint8_t *)k->mv_data + 4);
  int64_t dur = (int64_t)it.hdr.duration_ns; /* <= INT64_MAX, checked by row_open */
  int64_t end = start > INT64_MAX - dur ? INT64_MAX : start + dur;
  int64_t period = (int64_t)it.hdr.period_ns;
  if (m->rows == 0) {
    m->start = start;
    m->end = end;
    m->period = period;
  } else {
    if (start < m->start) m->start = start;
    if (end > m->end) m->end = end;
    if (period != m->period) m->period = 0;
  }
  m->rows++;
  uint32_t id;
  int64_t vals[EMBER_MAX_VALUE_TYPES];
  int r;
  while ((r = ember__row_next(&it, &id, vals)) > 0) {
    int rc = acc_add(&m->stacks, id, vals[col]);
    if (rc < 0) return rc;
  }
  return r;
}

static bool decode_frame(const MDB_val *v, ember_frame_t *f) {
  ember__in_t in = ember__in(v->mv_data, v->mv_size);
  uint8_t kind = 0;
  uint32_t line = 0;
  uint64_t addr = 0;
  ember__in_u8(&in, &kind);
  ember__in_be32(&in, &line);
  ember__in_be64(&in, &addr);
  *f = (ember_frame_t){.line = line, .address = addr, .kind = (ember_frame_kind_t)kind};
  ember__in_str(&in, &f->function);
  ember__in_str(&in, &f->file);
  ember__in_str(&in, &f->module);
  ember__in_str(&in, &f->build_id);
  /* The generated name is there only when the frame has one (intern.c). */
  if (in.ok && in.p != in.end) {
    ember__in_str(&in, &f->generated);
    in.ok = in.ok && f->generated != NULL;
  }
  return in.ok && in.p == in.end && kind <= EMBER_FRAME_KIND_MAX;
}

int ember__fm_intern(ember_store_t *s, const ember__fm_key_t *k, const ember_frame_t *f,
                     ember_profile_t *p, char *buf, uint32_t *id) {
  if (k != NULL && s->fmap.frame != NULL) {
    ember_frame_t out;
    int rc =
        s->fmap.frame(s->fmap.ctx, k->worker, k->version, f, &out, buf, EMBER_STORE_FRAME_MAP_BUF);
    if (rc < 0) return rc;
    if (rc == 1) return ember_profile_intern_frame(p, &out, id);
  }
  return ember_profile_intern_frame(p, f, id);
}

void ember_store_set_frame_map(ember_store_t *s, const ember_store_frame_map_t *map) {
  if (s == NULL) return;
  s->fmap =
      map != NULL && map->wants != NULL && map->frame != NULL ? *map : (ember_store_frame_map_t){0};
}

/* Add the accumulated stacks to `p`, reading the dictionary in `txn`;
 * frames of series with key `fk` (NULL = none) go through the frame map,
 * with `buf` (EMBER_STORE_FRAME_MAP_BUF bytes) for its strings. */
static int resolve(ember_store_t *s, MDB_txn *txn, const acc_t *a, ember_profile_t *p,
                   const ember__fm_key_t *fk, char *buf) {
  acc_t fmap = {0}; /* store frame id -> profile frame id (in vals) */
  uint32_t local[EMBER_MAX_STACK_DEPTH];
  int rc = 0;
  for (size_t i = 0; i < a->n; i++) {
    uint8_t key[4];
    ember__put_be32(key, a->ids[i]);
    MDB_val k = {.mv_size = 4, .mv_data = key}, v;
    rc = ember__store_err(ember__get(s, txn, EMBER__DB_STACKS, &k, &v));
    if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT;
    if (rc < 0) goto cleanup;
    ember__in_t in = ember__in(v.mv_data, v.mv_size);
    uint64_t depth = 0;
    if (!ember__in_varint(&in, &depth) || depth == 0 || depth > EMBER_MAX_STACK_DEPTH) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    for (size_t d = 0; d < depth; d++) {
      uint64_t fid = 0;
      if (!ember__in_varint(&in, &fid) || fid > UINT32_MAX) {
        rc = EMBER_ECORRUPT;
        goto cleanup;
      }
      fmap.key = (uint32_t)fid;
      int64_t at = ember__htab_find(&fmap.index, ember__hash_mix(0, fid), acc_eq, &fmap);
      if (at >= 0) {
        local[d] = (uint32_t)fmap.vals[at];
        continue;
      }
      uint8_t fkey[4];
      ember__put_be32(fkey, (uint32_t)fid);
      MDB_val fkv = {.mv_size = 4, .mv_data = fkey}, fv;
      ember_frame_t f;
      rc = ember__store_err(ember__get(s, txn, EMBER__DB_FRAMES, &fkv, &fv));
      if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT;
      if (rc < 0) goto cleanup;
      if (!decode_frame(&fv, &f)) {
        rc = EMBER_ECORRUPT;
        goto cleanup;
      }
      /* The profile copies the strings, which point into the map. */
      rc = ember__fm_intern(s, fk, &f, p, buf, &local[d]);
      if (rc == 0) rc = acc_add(&fmap, (uint32_t)fid, local[d]);
      if (rc < 0) goto cleanup;
    }
    if (in.p != in.end) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    rc = ember_profile_add_ids(p, local, (size_t)depth, &a->vals[i], NULL);
    if (rc < 0) goto cleanup;
  }
cleanup:
  acc_free(&fmap);
  return rc;
}

/* The labels of series `sid` as a profile's (borrowed from the map: the
 * profile copies them). */
static int series_labels(ember_store_t *s, MDB_txn *txn, uint32_t sid, ember_labels_t *l) {
  uint8_t key[4];
  ember__put_be32(key, sid);
  MDB_val k = {.mv_size = 4, .mv_data = key}, v;
  const char *f[EMBER__NLABELS];
  int rc = ember__store_err(ember__get(s, txn, EMBER__DB_SERIES, &k, &v));
  if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT;
  if (rc < 0) return rc;
  if (!ember__labels_decode(&v, f)) return EMBER_ECORRUPT;
  *l = (ember_labels_t){.worker = f[0], .version = f[1], .host = f[2], .actor = f[3]};
  return 0;
}

/* The (worker, version) groups of a merge whose frames s->fmap rewrites:
 * of[i] is 0 for selected series i merged as stored, g + 1 for keys[g].
 * Keys are copied: a scan may renew the transaction, and with it the map. */
typedef struct fm_groups {
  ember__fm_key_t *keys;
  size_t n;
  uint32_t *of;
  char *buf; /* for the frame map's strings */
} fm_groups_t;

static void fm_groups_free(fm_groups_t *g) {
  for (size_t i = 0; i < g->n; i++) {
    ember_free((void *)(uintptr_t)g->keys[i].worker);
    ember_free((void *)(uintptr_t)g->keys[i].version);
  }
  ember_free(g->keys);
  ember_free(g->of);
  ember_free(g->buf);
  *g = (fm_groups_t){0};
}

static bool same_label(const char *a, const char *b) {
  return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

static int dup_or_null(const char *src, const char **dst) {
  *dst = src ? ember_strdup(src) : NULL;
  return src && !*dst ? -ENOMEM : 0;
}

/* Group `sids` for s->fmap; nothing (g->n 0) when no map is set or no
 * series is wanted. */
static int fm_group(ember_store_t *s, MDB_txn *txn, const uint32_t *sids, size_t nsids,
                    fm_groups_t *g) {
  *g = (fm_groups_t){0};
  if (s->fmap.frame == NULL || nsids == 0 || (s->fmap.any && !s->fmap.any(s->fmap.ctx))) return 0;
  g->of = ember_calloc(nsids, sizeof *g->of);
  if (g->of == NULL) return -ENOMEM;
  size_t cap = 0;
  for (size_t i = 0; i < nsids; i++) {
    ember_labels_t l;
    int rc = series_labels(s, txn, sids[i], &l);
    if (rc < 0) return rc;
    if (!s->fmap.wants(s->fmap.ctx, l.worker, l.version)) continue;
    size_t k = 0;
    while (k < g->n &&
           !(same_label(g->keys[k].worker, l.worker) && same_label(g->keys[k].version, l.version)))
      k++;
    if (k == g->n) {
      rc = ember__grow(&g->keys, &cap, g->n + 1, sizeof *g->keys);
      if (rc < 0) return rc;
      g->keys[k] = (ember__fm_key_t){0};
      g->n++;
      if (dup_or_null(l.worker, &g->keys[k].worker) < 0 ||
          dup_or_null(l.version, &g->keys[k].version) < 0)
        return -ENOMEM;
    }
    g->of[i] = (uint32_t)k + 1;
  }
  if (g->n > 0 && (g->buf = ember_malloc(EMBER_STORE_FRAME_MAP_BUF)) == NULL) return -ENOMEM;
  return 0;
}

/* One series' merge over a range, read from the coarsest rows that fit. */
typedef struct range {
  MDB_txn *txn;
  MDB_cursor *cur[3]; /* windows, minute rollups, hour rollups */
  uint32_t sid;
  merge_ctx_t *m;
} range_t;

static const int64_t level_ns[3] = {0, EMBER__ROLLUP_1M_NS, EMBER__ROLLUP_NS};

/* Merge [from, to) at `level` (2 hours, 1 minutes, 0 windows): the whole
 * buckets inside the range from that level's rollups, the ragged ends one
 * level down. A bucket holds exactly the windows that start in it, so
 * nothing is counted twice or missed. */
static int merge_range(range_t *r, int level, int64_t from, int64_t to, unsigned *since_renew) {
  if (from >= to) return 0;
  if (level > 0) {
    int64_t lo = ember__bucket_ceil(from, level_ns[level]);
    int64_t hi = ember__bucket_floor(to, level_ns[level]);
    if (lo < hi) {
      int rc = merge_range(r, level - 1, from, lo, since_renew);
      if (rc == 0)
        rc = scan(r->txn, r->cur[level], EMBER__PROFILE_KEY_LEN, r->sid, lo, hi, merge_row, r->m,
                  since_renew);
      if (rc == 0) rc = merge_range(r, level - 1, hi, to, since_renew);
      return rc;
    }
    return merge_range(r, level - 1, from, to, since_renew);
  }
  return scan(r->txn, r->cur[0], EMBER__PROFILE_KEY_LEN, r->sid, from, to, merge_row, r->m,
              since_renew);
}

/* The earliest window start a gauge read of [from, to) looks at: the
 * lookback before `to`, or `from` when that is later. */
static int64_t gauge_lo(int64_t from, int64_t to) {
  int64_t lo = to < INT64_MIN + EMBER_STORE_GAUGE_LOOKBACK_NS ? INT64_MIN
                                                              : to - EMBER_STORE_GAUGE_LOOKBACK_NS;
  return lo > from ? lo : from;
}

/* Add into `m` the rows of series `sid`'s latest window that carries m->bit
 * among the windows starting in [lo, to): every row with that start (two
 * processes with the same labels and start are two sources at one
 * instant). The walk goes backwards from `to` and stops at the first older
 * start, so it reads a few rows, not the range. *start (may be NULL) gets
 * that window's start, INT64_MIN when the series has none. */
static int gauge_rows(MDB_cursor *cur, uint32_t sid, int64_t lo, int64_t to, merge_ctx_t *m,
                      int64_t *start) {
  uint8_t key[EMBER__PROFILE_KEY_LEN] = {0};
  ember__put_be32(key, sid);
  ember__put_time(key + 4, to);
  MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
  bool found = false;
  int64_t latest = INT64_MIN;
  if (start) *start = INT64_MIN;
  if (lo >= to) return 0;
  int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  mrc = mrc == MDB_NOTFOUND ? mdb_cursor_get(cur, &k, &v, MDB_LAST)
                            : (mrc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mrc);
  while (mrc == MDB_SUCCESS) {
    if (k.mv_size != sizeof key) return EMBER_ECORRUPT;
    if (ember__get_be32(k.mv_data) != sid) break;
    int64_t t = ember__get_time((const uint8_t *)k.mv_data + 4);
    if (t < lo || (found && t < latest)) break;
    uint8_t mask = ((const uint8_t *)k.mv_data)[12];
    if (mask & m->bit) {
      if (!ember__unseal(&k, &v)) return EMBER_ECORRUPT;
      int rc = merge_row(m, &k, &v);
      if (rc < 0) return rc;
      found = true;
      latest = t;
    }
    mrc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
  }
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) return ember__store_err(mrc);
  if (start) *start = latest;
  return 0;
}

static bool vt_valid(ember_value_type_t vt) {
  return (int)vt >= 1 && (int)vt <= EMBER_MAX_VALUE_TYPES;
}

static int merge_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                        int64_t to_ns, ember_value_type_t vt, ember_profile_t **out);

int ember_store_merge(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                      int64_t to_ns, ember_value_type_t vt, ember_profile_t **out) {
  if (!s || !out || from_ns >= to_ns || !vt_valid(vt)) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = merge_locked(s, sel, from_ns, to_ns, vt, out);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int merge_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                        int64_t to_ns, ember_value_type_t vt, ember_profile_t **out) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL, *rcur = NULL, *mcur = NULL;
  uint32_t *sids = NULL;
  size_t nsids = 0;
  ember_profile_t *p = NULL;
  merge_ctx_t m = {.bit = ember__vt_bit(vt)};
  unsigned since_renew = 0;
  fm_groups_t fm = {0};

  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__select(s, txn, sel, &sids, &nsids);
  if (rc < 0) goto cleanup;
  rc = fm_group(s, txn, sids, nsids, &fm);
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PROFILES], &cur));
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_ROLLUP_1H], &rcur));
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_ROLLUP_1M], &mcur));
  if (rc < 0) goto cleanup;
  rc = ember_profile_new(&vt, 1, &p);
  if (rc < 0) goto cleanup;
  /* Group 0 (every series when no frame map wants any), then each group
   * the frame map rewrites, each resolved on its own. */
  for (size_t g = 0; g <= fm.n; g++) {
    acc_free(&m.stacks);
    m.stacks = (acc_t){0};
    for (size_t i = 0; i < nsids; i++) {
      if ((fm.of ? fm.of[i] : 0) != g) continue;
      if (ember_value_type_is_gauge(vt)) {
        /* A snapshot: each series' latest window only, never a sum over
         * its windows (and gauge windows are in no rollup). */
        rc = gauge_rows(cur, sids[i], gauge_lo(from_ns, to_ns), to_ns, &m, NULL);
      } else {
        range_t r = {.txn = txn, .cur = {cur, mcur, rcur}, .sid = sids[i], .m = &m};
        rc = merge_range(&r, 2, from_ns, to_ns, &since_renew);
      }
      if (rc < 0) goto cleanup;
    }
    rc = resolve(s, txn, &m.stacks, p, g ? &fm.keys[g - 1] : NULL, fm.buf);
    if (rc < 0) goto cleanup;
  }
  if (sel) {
    ember_labels_t l = {
        .worker = sel->worker, .version = sel->version, .host = sel->host, .actor = sel->actor};
    rc = ember_profile_set_labels(p, &l);
    if (rc < 0) goto cleanup;
  }
  rc = m.rows ? ember_profile_set_window(p, m.start, m.end)
              : ember_profile_set_window(p, from_ns, to_ns);
  if (rc < 0) goto cleanup;
  ember_profile_set_period(p, m.rows ? m.period : 0);
  *out = p;
  p = NULL;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (rcur) mdb_cursor_close(rcur);
  if (mcur) mdb_cursor_close(mcur);
  if (txn) mdb_txn_abort(txn);
  ember_free(sids);
  acc_free(&m.stacks);
  fm_groups_free(&fm);
  ember_profile_free(p);
  return rc;
}

void ember_store_series_free(ember_store_series_t *series, size_t count) {
  if (!series) return;
  for (size_t i = 0; i < count; i++) {
    ember_free((char *)(uintptr_t)series[i].labels.worker);
    ember_free((char *)(uintptr_t)series[i].labels.version);
    ember_free((char *)(uintptr_t)series[i].labels.host);
    ember_free((char *)(uintptr_t)series[i].labels.actor);
  }
  ember_free(series);
}

static int dup_label(const char *src, const char **dst) {
  *dst = NULL;
  if (!src) return 0;
  char *c = ember_strdup(src);
  if (!c) return -ENOMEM;
  *dst = c;
  return 0;
}

/* The first and last window start of series `sid` in [from, to), or
 * EMBER_ENOTFOUND. */
static int series_span(MDB_cursor *cur, uint32_t sid, int64_t from, int64_t to, int64_t *first,
                       int64_t *last) {
  uint8_t key[EMBER__PROFILE_KEY_LEN] = {0};
  ember__put_be32(key, sid);
  ember__put_time(key + 4, from);
  MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
  int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  if (mrc == MDB_NOTFOUND) return EMBER_ENOTFOUND;
  if (mrc != MDB_SUCCESS) return ember__store_err(mrc);
  if (k.mv_size != sizeof key) return EMBER_ECORRUPT;
  if (ember__get_be32(k.mv_data) != sid || ember__get_time((uint8_t *)k.mv_data + 4) >= to)
    return EMBER_ENOTFOUND;
  *first = ember__get_time((uint8_t *)k.mv_data + 4);
  /* The last key before (sid, to): seek to it and step back. */
  ember__put_be32(key, sid);
  ember__put_time(key + 4, to);
  key[12] = 0;
  k = (MDB_val){.mv_size = sizeof key, .mv_data = key};
  mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  mrc = mrc == MDB_NOTFOUND ? mdb_cursor_get(cur, &k, &v, MDB_LAST)
                            : (mrc == MDB_SUCCESS ? mdb_cursor_get(cur, &k, &v, MDB_PREV) : mrc);
  if (mrc != MDB_SUCCESS) return ember__store_err(mrc);
  if (k.mv_size != sizeof key) return EMBER_ECORRUPT;
  *last = ember__get_time((uint8_t *)k.mv_data + 4);
  return 0;
}

/* Fill `e` (zeroed by the caller) with series `sid` when it has a window
 * in [from, to): its span and its labels, copied (ember_store_series_free).
 * EMBER_ENOTFOUND when it has none; `e` is zero again on any failure. */
static int series_entry(ember_store_t *s, MDB_txn *txn, MDB_cursor *cur, uint32_t sid, int64_t from,
                        int64_t to, ember_store_series_t *e) {
  int64_t first = 0, last = 0;
  int rc = series_span(cur, sid, from, to, &first, &last);
  if (rc < 0) return rc;
  uint8_t key[4];
  ember__put_be32(key, sid);
  MDB_val k = {.mv_size = 4, .mv_data = key}, v;
  const char *l[EMBER__NLABELS];
  rc = ember__store_err(ember__get(s, txn, EMBER__DB_SERIES, &k, &v));
  if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT;
  if (rc < 0) return rc;
  if (!ember__labels_decode(&v, l)) return EMBER_ECORRUPT;
  e->id = sid;
  e->first_ns = first;
  e->last_ns = last;
  rc = dup_label(l[0], &e->labels.worker);
  if (rc == 0) rc = dup_label(l[1], &e->labels.version);
  if (rc == 0) rc = dup_label(l[2], &e->labels.host);
  if (rc == 0) rc = dup_label(l[3], &e->labels.actor);
  if (rc < 0) {
    ember_free((char *)(uintptr_t)e->labels.worker);
    ember_free((char *)(uintptr_t)e->labels.version);
    ember_free((char *)(uintptr_t)e->labels.host);
    *e = (ember_store_series_t){0};
  }
  return rc;
}

static int series_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                         int64_t to_ns, ember_store_series_t **out, size_t *count);

int ember_store_series(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                       int64_t to_ns, ember_store_series_t **out, size_t *count) {
  if (!s || !out || !count || from_ns >= to_ns) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = series_locked(s, sel, from_ns, to_ns, out, count);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int series_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                         int64_t to_ns, ember_store_series_t **out, size_t *count) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  uint32_t *sids = NULL;
  size_t nsids = 0, n = 0;
  ember_store_series_t *res = NULL;

  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__select(s, txn, sel, &sids, &nsids);
  if (rc < 0 || nsids == 0) goto cleanup;
  res = ember_calloc(nsids, sizeof *res);
  if (!res) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PROFILES], &cur));
  if (rc < 0) goto cleanup;
  for (size_t i = 0; i < nsids; i++) {
    rc = series_entry(s, txn, cur, sids[i], from_ns, to_ns, &res[n]);
    if (rc == EMBER_ENOTFOUND) continue;
    if (rc < 0) goto cleanup;
    n++;
  }
  rc = 0;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  ember_free(sids);
  if (rc == 0) {
    if (n == 0) {
      ember_free(res);
      res = NULL;
    }
    *out = res;
    *count = n;
  } else {
    ember_store_series_free(res, n);
  }
  return rc;
}

typedef struct cpu_ctx {
  int64_t *buckets;
  int64_t from, step;
} cpu_ctx_t;

static int cpu_row(void *ctx, const MDB_val *k, const MDB_val *v) {
  cpu_ctx_t *c = ctx;
  if (v->mv_size != 8) return EMBER_ECORRUPT;
  uint64_t ns = ember__get_be64(v->mv_data);
  if (ns > INT64_MAX) return EMBER_ECORRUPT;
  int64_t start = ember__get_time((const uint8_t *)k->mv_data + 4);
  /* scan() keeps start in [from, to), so the bucket is in range. */
  uint64_t b = ((uint64_t)start - (uint64_t)c->from) / (uint64_t)c->step;
  if ((int64_t)ns > INT64_MAX - c->buckets[b]) return -ERANGE;
  c->buckets[b] += (int64_t)ns;
  return 0;
}

static int timeline_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                           int64_t to_ns, int64_t step_ns, uint64_t nb, int64_t **out,
                           size_t *count);

int ember_store_cpu_timeline(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                             int64_t to_ns, int64_t step_ns, int64_t **out, size_t *count) {
  if (!s || !out || !count || from_ns >= to_ns || step_ns <= 0) return -EINVAL;
  uint64_t span = (uint64_t)to_ns - (uint64_t)from_ns;
  uint64_t nb = span / (uint64_t)step_ns + (span % (uint64_t)step_ns ? 1 : 0);
  if (nb > EMBER_STORE_MAX_BUCKETS) return EMBER_ETOOBIG;
  int rc;
  do {
    ember__store_enter(s);
    rc = timeline_locked(s, sel, from_ns, to_ns, step_ns, nb, out, count);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int timeline_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                           int64_t to_ns, int64_t step_ns, uint64_t nb, int64_t **out,
                           size_t *count) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  uint32_t *sids = NULL;
  size_t nsids = 0;
  cpu_ctx_t c = {.from = from_ns, .step = step_ns};
  unsigned since_renew = 0;

  c.buckets = ember_calloc((size_t)nb, sizeof *c.buckets);
  int rc = c.buckets ? 0 : -ENOMEM;
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__select(s, txn, sel, &sids, &nsids);
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_CPU], &cur));
  if (rc < 0) goto cleanup;
  for (size_t i = 0; i < nsids; i++) {
    rc = scan(txn, cur, EMBER__CPU_KEY_LEN, sids[i], from_ns, to_ns, cpu_row, &c, &since_renew);
    if (rc < 0) goto cleanup;
  }
  *out = c.buckets;
  *count = (size_t)nb;
  c.buckets = NULL;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  ember_free(sids);
  ember_free(c.buckets);
  return rc;
}

void ember_store_timelines_free(ember_store_timelines_t *t) {
  if (!t) return;
  ember_store_series_free(t->series, t->nseries);
  ember_free(t->cpu);
  ember_free(t->total);
  ember_free(t);
}

static int timelines_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                            int64_t to_ns, int64_t step_ns, uint64_t nb, size_t max_values,
                            ember_store_timelines_t **out);

int ember_store_cpu_timelines(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                              int64_t to_ns, int64_t step_ns, size_t max_values,
                              ember_store_timelines_t **out) {
  if (!s || !out || from_ns >= to_ns || step_ns <= 0) return -EINVAL;
  uint64_t span = (uint64_t)to_ns - (uint64_t)from_ns;
  uint64_t nb = span / (uint64_t)step_ns + (span % (uint64_t)step_ns ? 1 : 0);
  if (nb > EMBER_STORE_MAX_BUCKETS) return EMBER_ETOOBIG;
  if (max_values == 0) max_values = EMBER_STORE_MAX_BUCKETS;
  int rc;
  do {
    ember__store_enter(s);
    rc = timelines_locked(s, sel, from_ns, to_ns, step_ns, nb, max_values, out);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int timelines_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                            int64_t to_ns, int64_t step_ns, uint64_t nb, size_t max_values,
                            ember_store_timelines_t **out) {
  MDB_txn *txn = NULL;
  MDB_cursor *pcur = NULL, *ccur = NULL;
  uint32_t *sids = NULL;
  size_t nsids = 0;
  size_t *row = NULL; /* per selected series: its row in t->series, or SIZE_MAX */
  unsigned since_renew = 0;
  ember_store_timelines_t *t = ember_calloc(1, sizeof *t);
  int rc = t ? 0 : -ENOMEM;
  if (rc < 0) goto cleanup;
  t->nbuckets = (size_t)nb;
  t->total = ember_calloc((size_t)nb, sizeof *t->total);
  if (!t->total) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__select(s, txn, sel, &sids, &nsids);
  if (rc < 0 || nsids == 0) goto cleanup;
  t->series = ember_calloc(nsids, sizeof *t->series);
  row = ember_malloc(nsids * sizeof *row);
  if (!t->series || !row) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PROFILES], &pcur));
  if (rc == 0) rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_CPU], &ccur));
  if (rc < 0) goto cleanup;
  /* First the series with a window in the range (as ember_store_series),
   * so that the values are allocated once, after the cap is checked. */
  for (size_t i = 0; i < nsids; i++) {
    rc = series_entry(s, txn, pcur, sids[i], from_ns, to_ns, &t->series[t->nseries]);
    row[i] = SIZE_MAX;
    if (rc == EMBER_ENOTFOUND) continue;
    if (rc < 0) goto cleanup;
    row[i] = t->nseries++;
  }
  rc = 0;
  if (t->nseries > max_values / (size_t)nb) {
    rc = EMBER_ETOOBIG;
    goto cleanup;
  }
  if (t->nseries > 0) {
    t->cpu = ember_calloc(t->nseries * (size_t)nb, sizeof *t->cpu);
    if (!t->cpu) {
      rc = -ENOMEM;
      goto cleanup;
    }
  }
  /* Each series' CPU points are read once, into its own row, and added to
   * the total, so the total is the sum of the rows plus what selected
   * series without a window in the range have (normally nothing). */
  for (size_t i = 0; i < nsids; i++) {
    int64_t *own = row[i] == SIZE_MAX ? NULL : t->cpu + row[i] * (size_t)nb;
    cpu_ctx_t c = {.buckets = own ? own : t->total, .from = from_ns, .step = step_ns};
    rc = scan(txn, ccur, EMBER__CPU_KEY_LEN, sids[i], from_ns, to_ns, cpu_row, &c, &since_renew);
    if (rc < 0) goto cleanup;
    for (size_t b = 0; own && b < (size_t)nb; b++) {
      if (own[b] > INT64_MAX - t->total[b]) {
        rc = -ERANGE;
        goto cleanup;
      }
      t->total[b] += own[b];
    }
  }
cleanup:
  if (pcur) mdb_cursor_close(pcur);
  if (ccur) mdb_cursor_close(ccur);
  if (txn) mdb_txn_abort(txn);
  ember_free(sids);
  ember_free(row);
  if (rc == 0 && t->nseries == 0) {
    ember_free(t->series);
    t->series = NULL;
  }
  if (rc == 0) {
    *out = t;
    t = NULL;
  }
  ember_store_timelines_free(t);
  return rc;
}

/* ------------------------------------------------------------- gauges -- */

void ember_store_gauge_latest_free(ember_profile_t **parts, size_t count) {
  if (!parts) return;
  for (size_t i = 0; i < count; i++) ember_profile_free(parts[i]);
  ember_free(parts);
}

static int gauge_latest_locked(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                               int64_t to_ns, ember_value_type_t vt, ember_profile_t ***out,
                               size_t *count) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  uint32_t *sids = NULL;
  size_t nsids = 0, n = 0;
  ember_profile_t **parts = NULL, *p = NULL;
  merge_ctx_t m = {.bit = ember__vt_bit(vt)};
  char *buf = NULL; /* for the frame map's strings */

  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__select(s, txn, sel, &sids, &nsids);
  if (rc < 0 || nsids == 0) goto cleanup;
  parts = ember_calloc(nsids, sizeof *parts);
  if (!parts) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PROFILES], &cur));
  if (rc < 0) goto cleanup;
  for (size_t i = 0; i < nsids; i++) {
    acc_free(&m.stacks);
    m = (merge_ctx_t){.bit = ember__vt_bit(vt)};
    rc = gauge_rows(cur, sids[i], gauge_lo(from_ns, to_ns), to_ns, &m, NULL);
    if (rc < 0) goto cleanup;
    if (m.rows == 0) continue;
    ember_labels_t l;
    rc = ember_profile_new(&vt, 1, &p);
    if (rc == 0) rc = series_labels(s, txn, sids[i], &l);
    if (rc == 0) rc = ember_profile_set_labels(p, &l);
    /* A part is one series: its labels say whether the frame map takes it. */
    ember__fm_key_t key = {l.worker, l.version};
    bool mapped =
        rc == 0 && s->fmap.frame != NULL && s->fmap.wants(s->fmap.ctx, l.worker, l.version);
    if (mapped && buf == NULL && (buf = ember_malloc(EMBER_STORE_FRAME_MAP_BUF)) == NULL)
      rc = -ENOMEM;
    if (rc == 0) rc = resolve(s, txn, &m.stacks, p, mapped ? &key : NULL, buf);
    if (rc == 0) rc = ember_profile_set_window(p, m.start, m.end);
    if (rc < 0) goto cleanup;
    ember_profile_set_period(p, m.period);
    parts[n++] = p;
    p = NULL;
  }
  rc = 0;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  ember_free(sids);
  ember_free(buf);
  acc_free(&m.stacks);
  ember_profile_free(p);
  if (rc == 0) {
    if (n == 0) {
      ember_free(parts);
      parts = NULL;
    }
    *out = parts;
    *count = n;
  } else {
    ember_store_gauge_latest_free(parts, n);
  }
  return rc;
}

int ember_store_gauge_latest(ember_store_t *s, const ember_store_selector_t *sel, int64_t from_ns,
                             int64_t to_ns, ember_value_type_t vt, ember_profile_t ***out,
                             size_t *count) {
  if (!s || !out || !count || from_ns >= to_ns || !ember_value_type_is_gauge(vt)) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = gauge_latest_locked(s, sel, from_ns, to_ns, vt, out, count);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

/* One series' gauge timeline: per bucket, the value of its latest window
 * in the bucket (the rows of that start summed) and that start. */
typedef struct gauge_tl {
  int64_t *vals, *at;
  int64_t from, step;
  uint8_t bit;
  bool any;
  int64_t first, last;
} gauge_tl_t;

static int gauge_tl_row(void *ctx, const MDB_val *k, const MDB_val *v) {
  gauge_tl_t *g = ctx;
  uint8_t mask = ((const uint8_t *)k->mv_data)[12];
  if (!(mask & g->bit)) return 0;
  ember__row_iter_t it;
  if (!ember__row_open(&it, v->mv_data, v->mv_size) || it.hdr.mask != mask) return EMBER_ECORRUPT;
  unsigned col = 0;
  for (uint8_t b = 1; b < g->bit; b = (uint8_t)(b << 1)) col += (mask & b) ? 1u : 0u;
  int64_t sum = 0, vals[EMBER_MAX_VALUE_TYPES];
  uint32_t id;
  int r;
  while ((r = ember__row_next(&it, &id, vals)) > 0) {
    if (vals[col] > INT64_MAX - sum) return -ERANGE;
    sum += vals[col];
  }
  if (r < 0) return r;
  int64_t start = ember__get_time((const uint8_t *)k->mv_data + 4);
  /* scan() keeps start in [from, to), so the bucket is in range. */
  uint64_t b = ((uint64_t)start - (uint64_t)g->from) / (uint64_t)g->step;
  if (start > g->at[b]) {
    g->at[b] = start;
    g->vals[b] = sum;
  } else if (start == g->at[b]) {
    if (sum > INT64_MAX - g->vals[b]) return -ERANGE;
    g->vals[b] += sum;
  }
  if (!g->any) g->first = start;
  g->any = true;
  g->last = start;
  return 0;
}

void ember_store_gauge_timelines_free(ember_store_gauge_timelines_t *t) {
  if (!t) return;
  ember_store_series_free(t->series, t->nseries);
  ember_free(t->values);
  ember_free(t->at_ns);
  ember_free(t->total);
  ember_free(t);
}

static int gauge_timelines_locked(ember_store_t *s, const ember_store_selector_t *sel,
                                  ember_value_type_t vt, int64_t from_ns, int64_t to_ns,
                                  int64_t step_ns, uint64_t nb, size_t max_values,
                                  ember_store_gauge_timelines_t **out) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  uint32_t *sids = NULL;
  size_t nsids = 0, cap = 0, vcap = 0, acap = 0;
  unsigned since_renew = 0;
  gauge_tl_t g = {.from = from_ns, .step = step_ns, .bit = ember__vt_bit(vt)};
  ember_store_gauge_timelines_t *t = ember_calloc(1, sizeof *t);
  int rc = t ? 0 : -ENOMEM;
  if (rc < 0) goto cleanup;
  t->nbuckets = (size_t)nb;
  t->total = ember_calloc((size_t)nb, sizeof *t->total);
  g.vals = ember_malloc((size_t)nb * sizeof *g.vals);
  g.at = ember_malloc((size_t)nb * sizeof *g.at);
  if (!t->total || !g.vals || !g.at) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  rc = ember__select(s, txn, sel, &sids, &nsids);
  if (rc < 0 || nsids == 0) goto cleanup;
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_PROFILES], &cur));
  if (rc < 0) goto cleanup;
  for (size_t i = 0; i < nsids; i++) {
    for (size_t b = 0; b < (size_t)nb; b++) {
      g.vals[b] = 0;
      g.at[b] = INT64_MIN;
    }
    g.any = false;
    /* Gauge windows are in no rollup: the windows themselves, all of them
     * in the range (each bucket keeps its latest). */
    rc = scan(txn, cur, EMBER__PROFILE_KEY_LEN, sids[i], from_ns, to_ns, gauge_tl_row, &g,
              &since_renew);
    if (rc < 0) goto cleanup;
    if (!g.any) continue;
    size_t row = t->nseries;
    if (row + 1 > max_values / (size_t)nb) {
      rc = EMBER_ETOOBIG;
      goto cleanup;
    }
    rc = ember__grow(&t->series, &cap, row + 1, sizeof *t->series);
    if (rc == 0) rc = ember__grow(&t->values, &vcap, (row + 1) * (size_t)nb, sizeof *t->values);
    if (rc == 0) rc = ember__grow(&t->at_ns, &acap, (row + 1) * (size_t)nb, sizeof *t->at_ns);
    if (rc < 0) goto cleanup;
    t->series[row] = (ember_store_series_t){0};
    ember_labels_t l;
    rc = series_labels(s, txn, sids[i], &l);
    if (rc == 0) rc = dup_label(l.worker, &t->series[row].labels.worker);
    if (rc == 0) rc = dup_label(l.version, &t->series[row].labels.version);
    if (rc == 0) rc = dup_label(l.host, &t->series[row].labels.host);
    if (rc == 0) rc = dup_label(l.actor, &t->series[row].labels.actor);
    /* Counted from here on so that a failure frees what was copied. */
    t->nseries++;
    if (rc < 0) goto cleanup;
    t->series[row].id = sids[i];
    t->series[row].first_ns = g.first;
    t->series[row].last_ns = g.last;
    memcpy(t->values + row * (size_t)nb, g.vals, (size_t)nb * sizeof *g.vals);
    memcpy(t->at_ns + row * (size_t)nb, g.at, (size_t)nb * sizeof *g.at);
    /* Summed across series: each series' latest in the bucket. */
    for (size_t b = 0; b < (size_t)nb; b++) {
      if (g.vals[b] > INT64_MAX - t->total[b]) {
        rc = -ERANGE;
        goto cleanup;
      }
      t->total[b] += g.vals[b];
    }
  }
  rc = 0;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  ember_free(sids);
  ember_free(g.vals);
  ember_free(g.at);
  if (rc == 0) {
    *out = t;
    t = NULL;
  }
  ember_store_gauge_timelines_free(t);
  return rc;
}

int ember_store_gauge_timelines(ember_store_t *s, const ember_store_selector_t *sel,
                                ember_value_type_t vt, int64_t from_ns, int64_t to_ns,
                                int64_t step_ns, size_t max_values,
                                ember_store_gauge_timelines_t **out) {
  if (!s || !out || from_ns >= to_ns || step_ns <= 0 || !ember_value_type_is_gauge(vt))
    return -EINVAL;
  uint64_t span = (uint64_t)to_ns - (uint64_t)from_ns;
  uint64_t nb = span / (uint64_t)step_ns + (span % (uint64_t)step_ns ? 1 : 0);
  if (nb > EMBER_STORE_MAX_BUCKETS) return EMBER_ETOOBIG;
  if (max_values == 0) max_values = EMBER_STORE_MAX_BUCKETS;
  int rc;
  do {
    ember__store_enter(s);
    rc = gauge_timelines_locked(s, sel, vt, from_ns, to_ns, step_ns, nb, max_values, out);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

int ember_store_gauge_timeline(ember_store_t *s, const ember_store_selector_t *sel,
                               ember_value_type_t vt, int64_t from_ns, int64_t to_ns,
                               int64_t step_ns, int64_t **out, size_t *count) {
  if (!out || !count) return -EINVAL;
  ember_store_gauge_timelines_t *t = NULL;
  int rc = ember_store_gauge_timelines(s, sel, vt, from_ns, to_ns, step_ns, SIZE_MAX, &t);
  if (rc < 0) return rc;
  *out = t->total;
  *count = t->nbuckets;
  t->total = NULL;
  ember_store_gauge_timelines_free(t);
  return 0;
}
