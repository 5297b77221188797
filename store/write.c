/* The write path: a batch of profile windows in one write transaction. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "row.h"
#include "runs.h"
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

/* An id counter of `meta`, read on first use and written back once at the
 * end of the batch instead of once per new id. */
typedef struct counter {
  const char *name;
  uint32_t next;
  bool loaded, dirty;
} counter_t;

enum { CTR_SERIES, CTR_FRAME, CTR_STACK, CTR_COUNT };

/* Scratch space reused across the profiles of one batch. */
typedef struct wctx {
  ember_store_t *s;
  MDB_txn *txn;
  ember__out_t buf; /* encoded frame, stack, label set */
  ember__out_t row; /* encoded profile row */
  uint32_t *fmap;   /* profile frame id -> store frame id (UINT32_MAX = unused) */
  size_t fmap_cap;
  uint32_t *used; /* profile frame ids used by a stack, in order of first use */
  size_t used_cap;
  uint64_t *fhash; /* their content hashes */
  size_t fhash_cap;
  struct ent {
    uint32_t id;    /* store stack id */
    uint32_t local; /* profile stack id */
  } * ents;
  size_t ents_cap;
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
  counter_t ctr[CTR_COUNT];
  ember__srcs_t srcs; /* runs of a batch with sources (runs.h) */
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

/* Take the next id from the meta counter `c`. Ids start at 1. */
static int next_id(wctx_t *w, counter_t *c, uint32_t *id) {
  if (!c->loaded) {
    MDB_val k = {.mv_size = strlen(c->name), .mv_data = (void *)(uintptr_t)c->name}, v;
    c->next = 1;
    int mrc = ember__get(w->s, w->txn, EMBER__DB_META, &k, &v);
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

static int save_counters(wctx_t *w) {
  for (size_t i = 0; i < CTR_COUNT; i++) {
    counter_t *c = &w->ctr[i];
    if (!c->dirty) continue;
    uint8_t b[4];
    ember__put_be32(b, c->next);
    MDB_val k = {.mv_size = strlen(c->name), .mv_data = (void *)(uintptr_t)c->name};
    MDB_val v = {.mv_size = 4, .mv_data = b};
    int rc = ember__store_err(ember__put(w->s, w->txn, EMBER__DB_META, &k, &v, 0));
    if (rc < 0) return rc;
  }
  return 0;
}

/* Find the id of the content w->buf, which the cache `ctr` does not hold
 * under its in-memory hash `fast`, in the dictionary (index `idx` of content
 * hash -> ids, data `data` of id -> content), creating it from counter
 * `ctr` if absent, and cache it. */
static int intern_uncached(wctx_t *w, ember__db_t idx, ember__db_t data, int ctr, uint64_t fast,
                           uint32_t *id, bool *created) {
  uint8_t hkey[8], ikey[4];
  ember__dcache_t *cache = &w->s->cache[ctr];
  uint64_t hash =
      ember__store_hash_final(ember__store_hash(EMBER_STORE_HASH_SEED, w->buf.data, w->buf.len));
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
    rc = ember__store_err(ember__get(w->s, w->txn, data, &dk, &dv));
    if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT; /* the index names it */
    if (rc < 0) goto cleanup;
    if (dv.mv_size == w->buf.len && memcmp(dv.mv_data, w->buf.data, w->buf.len) == 0) {
      *id = cand;
      *created = false;
      ember__dcache_add(cache, fast, w->buf.data, w->buf.len, cand);
      goto cleanup;
    }
    mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT_DUP);
  }
  if (mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  uint32_t nid = 0;
  rc = next_id(w, &w->ctr[ctr], &nid);
  if (rc < 0) goto cleanup;
  ember__put_be32(ikey, nid);
  k = (MDB_val){.mv_size = sizeof hkey, .mv_data = hkey};
  v = (MDB_val){.mv_size = sizeof ikey, .mv_data = ikey};
  rc = ember__store_err(mdb_put(w->txn, w->s->dbi[idx], &k, &v, 0));
  if (rc < 0) goto cleanup;
  k = (MDB_val){.mv_size = sizeof ikey, .mv_data = ikey};
  v = (MDB_val){.mv_size = w->buf.len, .mv_data = w->buf.data};
  /* Ids only grow, so appending keeps the id-keyed table's pages full. */
  rc = ember__store_err(ember__put(w->s, w->txn, data, &k, &v, MDB_APPEND));
  if (rc < 0) goto cleanup;
  *id = nid;
  *created = true;
  ember__dcache_add(cache, fast, w->buf.data, w->buf.len, nid);
cleanup:
  mdb_cursor_close(cur);
  return rc;
}

/* As intern_uncached, looking in the cache first. The cache is keyed by a
 * fast in-memory hash; the slower on-disk hash is computed only on a miss. */
static int intern(wctx_t *w, ember__db_t idx, ember__db_t data, int ctr, uint32_t *id,
                  bool *created) {
  uint64_t fast = ember__hash_bytes(w->buf.data, w->buf.len, 0);
  if (ember__dcache_find(&w->s->cache[ctr], fast, w->buf.data, w->buf.len, id)) {
    *created = false;
    return 0;
  }
  return intern_uncached(w, idx, data, ctr, fast, id, created);
}

static int series_id(wctx_t *w, const ember_labels_t *l, uint32_t *sid) {
  const char *labels[EMBER__NLABELS] = {l->worker, l->version, l->host, l->actor};
  bool created = false;
  w->buf.len = 0;
  int rc = ember__labels_encode(&w->buf, labels);
  if (rc == 0) rc = intern(w, EMBER__DB_SERIES_IDX, EMBER__DB_SERIES, CTR_SERIES, sid, &created);
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

/* A profile frame as the frame cache compares it: its fields and string
 * lengths, without encoding it. */
typedef struct frame_key {
  const ember_frame_t *f;
  const char *str[4];
  size_t len[4];
  uint8_t fixed[1 + 4 + 8]; /* kind, be32 line, be64 address */
} frame_key_t;

/* Fill `k` for `f` and return the length of f's encoding. */
static size_t frame_key(frame_key_t *k, const ember_frame_t *f) {
  k->f = f;
  k->str[0] = f->function;
  k->str[1] = f->file;
  k->str[2] = f->module;
  k->str[3] = f->build_id;
  k->fixed[0] = (uint8_t)f->kind;
  ember__put_be32(k->fixed + 1, f->line);
  ember__put_be64(k->fixed + 5, f->address);
  size_t n = sizeof k->fixed;
  for (int i = 0; i < 4; i++) {
    /* Profile strings know their length; no strlen. */
    k->len[i] = ember_profile_string_len(k->str[i]);
    n += k->str[i] ? k->len[i] + 2 : 1;
  }
  return n;
}

/* Is the cached encoded frame p[0..n) the frame of `ctx`? Byte for byte,
 * as a memcmp of the encodings would be; the caller checked n. */
static bool frame_match(const void *ctx, const uint8_t *p, size_t n) {
  const frame_key_t *k = ctx;
  (void)n;
  if (memcmp(p, k->fixed, sizeof k->fixed) != 0) return false;
  p += sizeof k->fixed;
  for (int i = 0; i < 4; i++) {
    if (k->str[i] == NULL) {
      if (*p++ != 0) return false;
      continue;
    }
    /* The string's NUL is compared too, so a longer cached string fails. */
    if (*p++ != 1 || memcmp(p, k->str[i], k->len[i] + 1) != 0) return false;
    p += k->len[i] + 1;
  }
  return true;
}

/* The store id of frame `local` of `p`. The frame cache is keyed by the
 * profile's content hash of the frame (ember_profile_frame_hash), so a hit
 * costs no encoding and no hashing, only the byte-for-byte comparison. */
static int frame_id(wctx_t *w, const ember_profile_t *p, uint32_t local, uint64_t hash,
                    uint32_t *fid) {
  frame_key_t key;
  size_t n = frame_key(&key, ember_profile_frame(p, local));
  if (ember__dcache_find_match(&w->s->cache[CTR_FRAME], hash, n, frame_match, &key, fid)) return 0;
  int rc = grow(&w->buf.data, &w->buf.cap, n, 1);
  if (rc < 0) return rc;
  uint8_t *o = w->buf.data;
  memcpy(o, key.fixed, sizeof key.fixed);
  o += sizeof key.fixed;
  for (int i = 0; i < 4; i++) {
    *o++ = key.str[i] != NULL;
    if (key.str[i] == NULL) continue;
    memcpy(o, key.str[i], key.len[i] + 1);
    o += key.len[i] + 1;
  }
  w->buf.len = n;
  bool created;
  return intern_uncached(w, EMBER__DB_FRAMES_IDX, EMBER__DB_FRAMES, CTR_FRAME, hash, fid, &created);
}

/* Map every frame that a stack of `p` uses to its store id in w->fmap,
 * in order of first use (so new ids are given in the order they were
 * before). The lookups of one window overlap their cache misses: the
 * dictionary cache is tens of MiB, so each lookup would otherwise wait for
 * its index slot, then its entry, then its bytes. */
static int map_frames(wctx_t *w, const ember_profile_t *p) {
  size_t nframes = ember_profile_nframes(p), nstacks = ember_profile_nstacks(p), nused = 0;
  int rc = grow(&w->fmap, &w->fmap_cap, nframes, sizeof *w->fmap);
  if (rc == 0) rc = grow(&w->used, &w->used_cap, nframes, sizeof *w->used);
  if (rc == 0) rc = grow(&w->fhash, &w->fhash_cap, nframes, sizeof *w->fhash);
  if (rc < 0) return rc;
  if (nframes) memset(w->fmap, 0xff, nframes * sizeof *w->fmap);
  for (size_t i = 0; i < nstacks; i++) {
    const uint32_t *fr;
    size_t depth;
    ember_profile_stack(p, (uint32_t)i, &fr, &depth, NULL);
    for (size_t d = 0; d < depth; d++) {
      if (w->fmap[fr[d]] != UINT32_MAX) continue;
      w->fmap[fr[d]] = 0; /* seen; every seen frame is mapped below */
      w->used[nused++] = fr[d];
    }
  }
  for (size_t i = 0; i < nused; i++) w->fhash[i] = ember_profile_frame_hash(p, w->used[i]);
  const ember__dcache_t *c = &w->s->cache[CTR_FRAME];
  enum { AHEAD = 4 };
  for (size_t i = 0; i < nused; i++) {
    if (i + 3 * AHEAD < nused) ember__dcache_prefetch(c, w->fhash[i + 3 * AHEAD]);
    if (i + 2 * AHEAD < nused) ember__dcache_prefetch_entry(c, w->fhash[i + 2 * AHEAD]);
    if (i + AHEAD < nused) ember__dcache_prefetch_bytes(c, w->fhash[i + AHEAD]);
    rc = frame_id(w, p, w->used[i], w->fhash[i], &w->fmap[w->used[i]]);
    if (rc < 0) return rc;
  }
  return 0;
}

static size_t put_varint(uint8_t *o, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7) o[n++] = (uint8_t)(v | 0x80);
  o[n++] = (uint8_t)v;
  return n;
}

static int stack_id(wctx_t *w, const uint32_t *frames, size_t depth, uint32_t *id) {
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  int rc;
  /* The profile guarantees depth <= EMBER_MAX_STACK_DEPTH and valid ids;
   * map_frames() mapped every frame a stack uses. */
  for (size_t i = 0; i < depth; i++) ids[i] = w->fmap[frames[i]];
  /* Written straight into the buffer: a varint of a 32-bit id (and of the
   * depth) takes at most 5 bytes. */
  rc = grow(&w->buf.data, &w->buf.cap, 5 * (depth + 1), 1);
  if (rc < 0) return rc;
  size_t len = put_varint(w->buf.data, depth);
  for (size_t i = 0; i < depth; i++) len += put_varint(w->buf.data + len, ids[i]);
  w->buf.len = len;
  bool created;
  return intern(w, EMBER__DB_STACKS_IDX, EMBER__DB_STACKS, CTR_STACK, id, &created);
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

/* Merge two sorted entry lists (a, b; nt values each) into w->ids/w->vals,
 * adding the values of equal ids. Either list may be the output of an
 * earlier merge, never w->ids/w->vals themselves. */
static int merge_sorted(wctx_t *w, unsigned nt, const uint32_t *aid, const int64_t *av, size_t an,
                        const uint32_t *bid, const int64_t *bv, size_t bn, size_t *nout) {
  if (an > SIZE_MAX / EMBER_MAX_VALUE_TYPES - bn) return -ENOMEM;
  size_t need = an + bn;
  int rc = grow(&w->ids, &w->ids_cap, need, sizeof *w->ids);
  if (rc == 0) rc = grow(&w->vals, &w->vals_cap, need * nt, sizeof *w->vals);
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
  int rc = grow(&w->oids, &w->oids_cap, n, sizeof *w->oids);
  if (rc == 0) rc = grow(&w->ovals, &w->ovals_cap, n * nt, sizeof *w->ovals);
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
    int rc = grow(&w->aggs, &w->aggs_cap, w->naggs + 1, sizeof *w->aggs);
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
  if (rc == 0) rc = grow(&a->ids, &a->ids_cap, m, sizeof *a->ids);
  if (rc == 0) rc = grow(&a->vals, &a->vals_cap, m * nt, sizeof *a->vals);
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

static int check_profile(const ember_profile_t *p) {
  int64_t start, end;
  ember_profile_window(p, &start, &end);
  /* The row stores end - start as a non-negative int64. */
  if (start >= end || (uint64_t)end - (uint64_t)start > INT64_MAX) return -EINVAL;
  /* So do the rollup rows, from the start of the hour (the minute is later). */
  if ((uint64_t)end - (uint64_t)ember__rollup_floor(start) > INT64_MAX) return -EINVAL;
  return 0;
}

/* Store window `p`, read from `src` (NULL: no source). */
static int write_one(wctx_t *w, const ember_profile_t *p, const ember_store_source_t *src,
                     int64_t retained, bool *dup, bool *expired) {
  int64_t start, end;
  ember_profile_window(p, &start, &end);
  const char *agent = ember_profile_agent_id(p);
  uint8_t idem[EMBER__IDEM_KEY_LEN];
  int rc;
  *dup = false;
  *expired = start < retained;
  if (*expired) return 0;
  if (agent) {
    uint8_t val[8];
    ember__put_be64(idem, ember__label_hash(agent));
    ember__put_be64(idem + 8, ember_profile_seq(p));
    ember__put_time(val, start);
    MDB_val k = {.mv_size = sizeof idem, .mv_data = idem};
    MDB_val v = {.mv_size = sizeof val, .mv_data = val};
    int mrc = ember__put(w->s, w->txn, EMBER__DB_IDEM, &k, &v, MDB_NOOVERWRITE);
    if (mrc == MDB_KEYEXIST) {
      *dup = true;
      /* Stored before, so not pending; but read in this run all the same. */
      return src ? ember__srcs_window(&w->srcs, src, start) : 0;
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

  size_t nstacks = ember_profile_nstacks(p);
  unsigned nt = h.ntypes;
  rc = map_frames(w, p);
  if (rc == 0) rc = grow(&w->ents, &w->ents_cap, nstacks, sizeof *w->ents);
  if (rc == 0) rc = grow(&w->wids, &w->wids_cap, nstacks, sizeof *w->wids);
  if (rc == 0) rc = grow(&w->wvals, &w->wvals_cap, nstacks * nt, sizeof *w->wvals);
  if (rc < 0) return rc;
  for (size_t i = 0; i < nstacks; i++) {
    const uint32_t *fr;
    const int64_t *vals;
    size_t depth;
    ember_profile_stack(p, (uint32_t)i, &fr, &depth, &vals);
    w->ents[i].local = (uint32_t)i;
    rc = stack_id(w, fr, depth, &w->ents[i].id);
    if (rc < 0) return rc;
  }
  /* Distinct profile stacks have distinct contents, and equal contents get
   * one store id, so the sorted ids are strictly increasing. */
  if (nstacks) qsort(w->ents, nstacks, sizeof *w->ents, ent_cmp);
  for (size_t i = 0; i < nstacks; i++) {
    const uint32_t *fr;
    const int64_t *pv;
    size_t depth;
    ember_profile_stack(p, w->ents[i].local, &fr, &depth, &pv);
    w->wids[i] = w->ents[i].id;
    for (unsigned t = 0; t < nt; t++) w->wvals[i * nt + t] = pv[cols[t]];
  }

  uint8_t key[EMBER__PROFILE_KEY_LEN];
  ember__put_be32(key, sid);
  ember__put_time(key + 4, start);
  key[12] = h.mask;
  MDB_val k = {.mv_size = sizeof key, .mv_data = key};
  rc = put_row(w, EMBER__DB_PROFILES, &k, h, w->wids, w->wvals, nstacks);
  if (rc < 0) return rc;

  /* The same entries, summed in memory into the window's minute and hour
   * rows; flush_aggs() writes them once at the end of the batch. */
  rc = agg_add(w, EMBER__DB_ROLLUP_1M, EMBER__ROLLUP_1M_NS, sid, start, end, &h, nstacks);
  if (rc == 0) rc = agg_add(w, EMBER__DB_ROLLUP_1H, EMBER__ROLLUP_NS, sid, start, end, &h, nstacks);
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
                        .n = nstacks};
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

static int write_locked(ember_store_t *s, ember_profile_t *const *profiles,
                        const ember_store_source_t *sources, size_t n,
                        ember_store_write_result_t *result);

int ember_store_write_from(ember_store_t *s, ember_profile_t *const *profiles,
                           const ember_store_source_t *sources, size_t n,
                           ember_store_write_result_t *result) {
  if (!s || (!profiles && n)) return -EINVAL;
  if (s->read_only) return -EACCES;
  for (size_t i = 0; i < n; i++) {
    if (!profiles[i] || check_profile(profiles[i]) < 0) return -EINVAL;
    if (sources && check_source(&sources[i]) < 0) return -EINVAL;
  }
  /* A full map aborts the whole batch; grown, the batch is written again
   * from the start (all or nothing, so nothing of the first try remains). */
  int rc;
  do {
    ember__store_enter(s);
    rc = write_locked(s, profiles, sources, n, result);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

int ember_store_write(ember_store_t *s, ember_profile_t *const *profiles, size_t n,
                      ember_store_write_result_t *result) {
  return ember_store_write_from(s, profiles, NULL, n, result);
}

static int write_locked(ember_store_t *s, ember_profile_t *const *profiles,
                        const ember_store_source_t *sources, size_t n,
                        ember_store_write_result_t *result) {

  wctx_t w = {.s = s,
              .ctr = {[CTR_SERIES] = {.name = "next_series"},
                      [CTR_FRAME] = {.name = "next_frame"},
                      [CTR_STACK] = {.name = "next_stack"}}};
  ember_store_write_result_t res = {0};
  bool began = false;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &w.txn));
  if (rc < 0) goto cleanup;
  began = true;
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
    rc = write_one(&w, profiles[i], sources ? &sources[i] : NULL, retained, &dup, &expired);
    if (rc < 0) goto cleanup;
    if (expired)
      res.expired++;
    else if (dup)
      res.duplicates++;
    else
      res.written++;
  }
  rc = flush_aggs(&w);
  if (rc == 0) rc = ember__srcs_flush(&w.srcs, s, w.txn);
  if (rc == 0) rc = save_counters(&w);
  if (rc < 0) goto cleanup;
  rc = ember__store_commit(s, w.txn);
  w.txn = NULL;
  if (rc < 0) goto cleanup;
  if (result) *result = res;
cleanup:
  if (w.txn) mdb_txn_abort(w.txn);
  /* Whatever failed once the transaction began (a put, a full map, or the
   * commit itself on a full disk), the caches may name ids it handed out
   * that were never committed: a retry must not find them. */
  if (rc < 0 && began) ember__store_caches_clear(s);
  for (size_t i = 0; i < w.naggs; i++) {
    ember_free(w.aggs[i].ids);
    ember_free(w.aggs[i].vals);
  }
  ember_free(w.aggs);
  ember__htab_free(&w.agg_index);
  ember__srcs_free(&w.srcs);
  ember__out_free(&w.buf);
  ember__out_free(&w.row);
  ember_free(w.fmap);
  ember_free(w.used);
  ember_free(w.fhash);
  ember_free(w.ents);
  ember_free(w.wids);
  ember_free(w.wvals);
  ember_free(w.oids);
  ember_free(w.ovals);
  ember_free(w.ids);
  ember_free(w.vals);
  return rc;
}
