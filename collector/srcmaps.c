/* Uploaded source maps (srcmaps.h). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <zstd.h>

#include "array.h"
#include "ember/config.h"
#include "ember/ember.h"
#include "ember/jsname.h"
#include "ember/log.h"
#include "shared.h"
#include "srcmaps.h"

#define DEFAULT_MEMORY ((uint64_t)256 << 20)
#define ZSTD_LEVEL     3

/* A record's value: a header, then the map's JSON as one zstd frame.
 *   u8 format (1) | be64 uploaded (Unix ns) | be64 JSON bytes | be32 segments */
#define REC_FORMAT 1
#define REC_HDR    (1 + 8 + 8 + 4)
/* A document: be16 key length | the record's key | the record's value, so
 * the index can be made again from the documents alone. Its store key is
 * the SHA-256 of the record's key, in hex (keys of the store are short). */
#define DOC_KEY_LEN 64

/* Refusals of uploads, by reason: the decoder's, and two of ours. */
enum { REFUSED_TOO_BIG_STORED = EMBER_SOURCEMAP_REASONS, REFUSED_NAME, NREFUSED };

typedef struct entry {
  char *worker, *version, *script; /* version "" = series without one */
  size_t script_len;
  char doc_key[DOC_KEY_LEN + 1];
  int64_t uploaded_ns;
  uint64_t json_bytes, stored_bytes;
  /* The decoded map, when cached; broken = it would not decode (a record
   * this collector did not check, from another producer). */
  ember_sourcemap_t *map;
  size_t map_bytes;
  uint64_t used; /* tick of the last use */
  bool broken;
} entry_t;

struct ember__srcmaps {
  ember_store_t *store;
  uint64_t max_bytes, memory;
  int timeout_ms;
  ember__shared_t *shared;
  pthread_mutex_t mu; /* everything below */
  entry_t *e;         /* sorted by (worker, version, script) */
  size_t n, cap;
  uint64_t tick, held; /* decoded bytes held */
  ember_metric_t *m_maps, *m_bytes, *m_uploads, *m_frames, *m_unmapped, *m_decoded, *m_evictions,
      *m_broken, *m_records, *m_record_errors, *m_refused[NREFUSED];
};

/* ------------------------------------------------------------ helpers -- */

static int cmp3(const char *w, const char *v, const char *s, const entry_t *e) {
  int c = strcmp(w, e->worker);
  if (c == 0) c = strcmp(v, e->version);
  if (c == 0 && s != NULL) c = strcmp(s, e->script);
  return c;
}

/* The first entry >= (w, v, s) (s NULL: the first of (w, v)). */
static size_t lower_bound(const ember__srcmaps_t *m, const char *w, const char *v, const char *s) {
  size_t lo = 0, hi = m->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cmp3(w, v, s, &m->e[mid]) > 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static entry_t *find(ember__srcmaps_t *m, const char *w, const char *v, const char *s) {
  size_t i = lower_bound(m, w, v, s);
  return i < m->n && cmp3(w, v, s, &m->e[i]) == 0 ? &m->e[i] : NULL;
}

static void uncache(ember__srcmaps_t *m, entry_t *e) {
  if (e->map == NULL) return;
  ember_sourcemap_free(e->map);
  e->map = NULL;
  m->held -= e->map_bytes;
  e->map_bytes = 0;
  ember_metric_set(m->m_bytes, (double)m->held);
}

static void entry_free(ember__srcmaps_t *m, entry_t *e) {
  uncache(m, e);
  ember_free(e->worker);
  ember_free(e->version);
  ember_free(e->script);
}

static void put_be(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
}

static uint64_t get_be(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v = v << 8 | p[i];
  return v;
}

/* The record key "W\0V\0S" into buf; its length, 0 when it does not fit. */
static size_t record_key(const char *w, const char *v, const char *s, char *buf, size_t size) {
  size_t a = strlen(w), b = strlen(v), c = strlen(s);
  if (a + b + c + 2 > size) return 0;
  memcpy(buf, w, a);
  buf[a] = '\0';
  memcpy(buf + a + 1, v, b);
  buf[a + b + 1] = '\0';
  memcpy(buf + a + b + 2, s, c);
  return a + b + c + 2;
}

static int doc_key(const char *key, size_t len, char out[DOC_KEY_LEN + 1]) {
  unsigned char md[32];
  unsigned mdlen = 0;
  if (EVP_Digest(key, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != sizeof md)
    return -ENOMEM;
  for (size_t i = 0; i < sizeof md; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
  return 0;
}

/* A label or script as a key part: text without NUL, control bytes or
 * invalid UTF-8 is for the API's parameters to have checked; here, the
 * length and NUL (a record from the topic). */
static bool part_ok(const char *p, size_t len, size_t max, bool empty_ok) {
  return (len > 0 || empty_ok) && len <= max && memchr(p, '\0', len) == NULL;
}

/* ---------------------------------------------------------- the index -- */

/* Make or replace the entry of (w, v, s). Under mu. */
static int index_put(ember__srcmaps_t *m, const char *w, const char *v, const char *s,
                     const char *dkey, int64_t uploaded, uint64_t json_bytes, uint64_t stored) {
  entry_t *e = find(m, w, v, s);
  if (e != NULL) {
    if (e->uploaded_ns != uploaded || e->stored_bytes != stored) {
      uncache(m, e);
      e->broken = false;
    }
  } else {
    size_t at = lower_bound(m, w, v, s);
    int rc = ember__grow(&m->e, &m->cap, m->n + 1, sizeof *m->e);
    if (rc != 0) return rc;
    entry_t ne = {.worker = ember_strdup(w), .version = ember_strdup(v), .script = ember_strdup(s)};
    if (ne.worker == NULL || ne.version == NULL || ne.script == NULL) {
      entry_free(m, &ne);
      return -ENOMEM;
    }
    ne.script_len = strlen(s);
    memmove(&m->e[at + 1], &m->e[at], (m->n - at) * sizeof *m->e);
    m->e[at] = ne;
    m->n++;
    e = &m->e[at];
  }
  memcpy(e->doc_key, dkey, DOC_KEY_LEN + 1);
  e->uploaded_ns = uploaded;
  e->json_bytes = json_bytes;
  e->stored_bytes = stored;
  ember_metric_set(m->m_maps, (double)m->n);
  return 0;
}

static void index_del(ember__srcmaps_t *m, const char *w, const char *v, const char *s) {
  entry_t *e = find(m, w, v, s);
  if (e == NULL) return;
  size_t at = (size_t)(e - m->e);
  entry_free(m, e);
  memmove(&m->e[at], &m->e[at + 1], (m->n - at - 1) * sizeof *m->e);
  m->n--;
  ember_metric_set(m->m_maps, (double)m->n);
}

/* A record (key, value) checked: its three parts and its header. */
typedef struct record {
  char w[EMBER__SRCMAPS_MAX_SCRIPT + 1], v[EMBER__SRCMAPS_MAX_SCRIPT + 1],
      s[EMBER__SRCMAPS_MAX_SCRIPT + 1];
  int64_t uploaded;
  uint64_t json_bytes;
} record_t;

static int parse_record(const char *key, size_t klen, const uint8_t *val, size_t vlen, record_t *r,
                        char *err, size_t err_size) {
  const char *p[3];
  size_t len[3];
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
    const char *nul = i < 2 ? memchr(key + at, '\0', klen - at) : NULL;
    size_t end = i < 2 ? (nul ? (size_t)(nul - key) : klen) : klen;
    if (i < 2 && nul == NULL) {
      snprintf(err, err_size, "a record whose key is not WORKER\\0VERSION\\0SCRIPT");
      return -EINVAL;
    }
    p[i] = key + at;
    len[i] = end - at;
    at = end + 1;
  }
  if (!part_ok(p[0], len[0], 256, false) || !part_ok(p[1], len[1], 256, true) ||
      !part_ok(p[2], len[2], EMBER__SRCMAPS_MAX_SCRIPT, false)) {
    snprintf(err, err_size, "a record whose key names no worker or script, or too long a one");
    return -EINVAL;
  }
  char *dst[3] = {r->w, r->v, r->s};
  for (int i = 0; i < 3; i++) {
    memcpy(dst[i], p[i], len[i]);
    dst[i][len[i]] = '\0';
  }
  if (val == NULL || vlen == 0) return 0; /* a deletion */
  if (vlen < REC_HDR || val[0] != REC_FORMAT || vlen - REC_HDR > EMBER__SRCMAPS_MAX_STORED) {
    snprintf(err, err_size,
             "source map %s of %s %s: a record of %zu bytes in no format this "
             "collector reads",
             r->s, r->w, r->v, vlen);
    return -EINVAL;
  }
  r->uploaded = (int64_t)get_be(val + 1, 8);
  r->json_bytes = get_be(val + 9, 8);
  if (r->json_bytes == 0 || r->json_bytes > EMBER_SOURCEMAP_MAX_BYTES) {
    snprintf(err, err_size, "source map %s of %s %s: %llu bytes of JSON (at most %llu)", r->s, r->w,
             r->v, (unsigned long long)r->json_bytes,
             (unsigned long long)EMBER_SOURCEMAP_MAX_BYTES);
    return -EINVAL;
  }
  return 0;
}

/* Keep a record: in the store, then in the index (a deletion: out of
 * both). The store is written only for what the index does not hold
 * already, so following the topic again at a start writes nothing. */
static int apply_record(ember__srcmaps_t *m, const char *key, size_t klen, const uint8_t *val,
                        size_t vlen, char *err, size_t err_size) {
  record_t r;
  int rc = parse_record(key, klen, val, vlen, &r, err, err_size);
  if (rc != 0) return rc;
  char dkey[DOC_KEY_LEN + 1];
  if ((rc = doc_key(key, klen, dkey)) != 0) return rc;
  if (val == NULL || vlen == 0) {
    rc = ember_store_doc_del(m->store, EMBER_STORE_DOC_SOURCEMAPS, dkey);
    if (rc != 0 && rc != EMBER_ENOTFOUND) {
      snprintf(err, err_size, "source map %s of %s %s: cannot delete it from the store: %s", r.s,
               r.w, r.v, ember_strerror(rc));
      return rc;
    }
    pthread_mutex_lock(&m->mu);
    index_del(m, r.w, r.v, r.s);
    pthread_mutex_unlock(&m->mu);
    return 0;
  }
  uint64_t stored = vlen - REC_HDR;
  pthread_mutex_lock(&m->mu);
  entry_t *e = find(m, r.w, r.v, r.s);
  bool same = e != NULL && e->uploaded_ns == r.uploaded && e->stored_bytes == stored;
  pthread_mutex_unlock(&m->mu);
  if (!same) {
    size_t dlen = 2 + klen + vlen;
    uint8_t *doc = ember_malloc(dlen);
    if (doc == NULL) return -ENOMEM;
    put_be(doc, klen, 2);
    memcpy(doc + 2, key, klen);
    memcpy(doc + 2 + klen, val, vlen);
    rc = ember_store_doc_put(m->store, EMBER_STORE_DOC_SOURCEMAPS, dkey, doc, dlen);
    ember_free(doc);
    if (rc != 0) {
      snprintf(err, err_size, "source map %s of %s %s: cannot keep it in the store: %s", r.s, r.w,
               r.v, ember_strerror(rc));
      return rc;
    }
  }
  pthread_mutex_lock(&m->mu);
  rc = index_put(m, r.w, r.v, r.s, dkey, r.uploaded, r.json_bytes, stored);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static int follow_apply(void *ctx, const rd_kafka_message_t *msg, char *err, size_t err_size) {
  ember__srcmaps_t *m = ctx;
  if (msg->key == NULL || msg->key_len == 0) {
    snprintf(err, err_size, "a record without a key");
    return -EINVAL;
  }
  return apply_record(m, msg->key, msg->key_len, msg->payload, msg->len, err, err_size);
}

/* One document of the store into the index, at start. */
static int load_doc(const char *key, const void *doc, size_t len, void *ctx) {
  (void)key;
  ember__srcmaps_t *m = ctx;
  const uint8_t *d = doc;
  char err[256] = "";
  record_t r;
  size_t klen = len >= 2 ? (size_t)get_be(d, 2) : 0;
  int rc = len >= 2 && klen > 0 && klen <= len - 2
               ? parse_record((const char *)d + 2, klen, d + 2 + klen, len - 2 - klen, &r, err,
                              sizeof err)
               : -EINVAL;
  char dkey[DOC_KEY_LEN + 1];
  if (rc == 0 && len - 2 - klen > 0) rc = doc_key((const char *)d + 2, klen, dkey);
  if (rc == 0 && len - 2 - klen > 0)
    rc = index_put(m, r.w, r.v, r.s, dkey, r.uploaded, r.json_bytes, len - 2 - klen - REC_HDR);
  if (rc == -ENOMEM) return rc;
  if (rc != 0) {
    ember_metric_add(m->m_record_errors, 1);
    EMBER_WARN("sourcemaps",
               "document %s of the store is not a source map this collector reads "
               "(skipped): %s",
               key, err[0] ? err : "bad length");
  }
  return 0;
}

/* ------------------------------------------------------------- config -- */

int ember__srcmaps_read_config(const ember_config_t *cfg, ember__srcmaps_opts_t *o, char *err,
                               size_t err_size) {
  int rc = ember_config_get_u64(cfg, "sourcemaps.max_bytes", EMBER__SRCMAPS_MAX_BYTES, 1024,
                                EMBER_SOURCEMAP_MAX_BYTES, &o->max_bytes, err, err_size);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "sourcemaps.memory", DEFAULT_MEMORY, (uint64_t)1 << 20,
                              (uint64_t)1 << 40, &o->memory, err, err_size);
  return rc;
}

static void register_metrics(ember__srcmaps_t *m, ember_metrics_t *reg) {
  m->m_maps = ember_metrics_gauge(reg, "ember_collector_sourcemaps",
                                  "Source maps uploaded and held (sourcemaps.md)");
  m->m_bytes = ember_metrics_gauge(reg, "ember_collector_sourcemap_bytes",
                                   "Memory of the decoded uploaded source maps held");
  m->m_uploads = ember_metrics_counter(reg, "ember_collector_sourcemap_uploads_total",
                                       "Source maps uploaded through this collector");
  m->m_frames = ember_metrics_counter(reg, "ember_collector_sourcemap_frames_total",
                                      "Frames named through an uploaded source map when read");
  m->m_unmapped =
      ember_metrics_counter(reg, "ember_collector_sourcemap_unmapped_total",
                            "Frames of a script with an uploaded map that maps no source there");
  m->m_decoded = ember_metrics_counter(reg, "ember_collector_sourcemap_decoded_total",
                                       "Uploaded source maps decoded (again after an eviction)");
  m->m_evictions =
      ember_metrics_counter(reg, "ember_collector_sourcemap_evictions_total",
                            "Decoded uploaded source maps dropped for the memory bound");
  m->m_broken = ember_metrics_counter(reg, "ember_collector_sourcemap_broken_total",
                                      "Stored source maps that would not decode when used");
  m->m_records = ember_metrics_counter(reg, "ember_collector_sourcemap_records_total",
                                       "Records of ember.sourcemaps read");
  m->m_record_errors = ember_metrics_counter(reg, "ember_collector_sourcemap_record_errors_total",
                                             "Records of ember.sourcemaps refused");
  static const char help[] = "Source map uploads refused, by reason";
  for (int r = 1; r < NREFUSED; r++) {
    const char *why = r == REFUSED_TOO_BIG_STORED ? "too_big_compressed"
                      : r == REFUSED_NAME         ? "bad_name"
                                                  : ember_sourcemap_reason_name(r);
    m->m_refused[r] = ember_metrics_counter_of(reg, "ember_collector_sourcemap_refused_total",
                                               "reason", why, help);
  }
}

int ember__srcmaps_new(const ember__srcmaps_opts_t *o, ember__srcmaps_t **out, char *err,
                       size_t err_size) {
  if (o == NULL || o->store == NULL || out == NULL) return -EINVAL;
  ember__srcmaps_t *m = ember_calloc(1, sizeof *m);
  if (m == NULL) return -ENOMEM;
  m->store = o->store;
  m->max_bytes = o->max_bytes ? o->max_bytes : EMBER__SRCMAPS_MAX_BYTES;
  m->memory = o->memory ? o->memory : DEFAULT_MEMORY;
  m->timeout_ms = o->timeout_ms;
  pthread_mutex_init(&m->mu, NULL);
  register_metrics(m, o->metrics);
  int rc = ember_store_doc_each(m->store, EMBER_STORE_DOC_SOURCEMAPS, load_doc, m);
  if (rc == EMBER_ECORRUPT) {
    /* The maps before the damaged one are in; the rest come back from the
     * topic, which the follower reads whole. */
    EMBER_WARN("sourcemaps",
               "a damaged source map document stopped reading the store's maps: "
               "the rest are read from %s",
               EMBER_TOPIC_SOURCEMAPS);
    rc = 0;
  }
  if (rc != 0) {
    snprintf(err, err_size, "cannot read the uploaded source maps of the store: %s",
             ember_strerror(rc));
    ember__srcmaps_free(m);
    return rc;
  }
  if (m->n > 0) EMBER_INFO("sourcemaps", "%zu uploaded source map(s)", m->n);
  *out = m;
  return 0;
}

int ember__srcmaps_start(ember__srcmaps_t *m, ember_kafka_t *kafka, char *err, size_t err_size) {
  ember__shared_opts_t so = {.kafka = kafka,
                             .topic = EMBER_TOPIC_SOURCEMAPS,
                             .group_prefix = "ember-sourcemaps",
                             .what = "source map",
                             .timeout_ms = m->timeout_ms,
                             .max_record = EMBER_STORE_DOC_SOURCEMAP_MAX,
                             .apply = follow_apply,
                             .ctx = m,
                             .messages = m->m_records,
                             .errors = m->m_record_errors};
  return ember__shared_start(&so, &m->shared, err, err_size);
}

void ember__srcmaps_stop(ember__srcmaps_t *m) {
  if (m == NULL) return;
  ember__shared_stop(m->shared);
  m->shared = NULL;
}

void ember__srcmaps_free(ember__srcmaps_t *m) {
  if (m == NULL) return;
  ember__srcmaps_stop(m);
  for (size_t i = 0; i < m->n; i++) entry_free(m, &m->e[i]);
  ember_free(m->e);
  pthread_mutex_destroy(&m->mu);
  ember_free(m);
}

uint64_t ember__srcmaps_max_bytes(const ember__srcmaps_t *m) { return m ? m->max_bytes : 0; }

/* ------------------------------------------------------------ uploads -- */

static bool name_ok(const char *s, size_t max, bool empty_ok) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0) return empty_ok;
  if (n > max) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
  return true;
}

static ember__srcmaps_status_t refuse(ember__srcmaps_t *m, int reason, ember__srcmaps_status_t st) {
  ember_metric_add(m->m_refused[reason], 1);
  return st;
}

ember__srcmaps_status_t ember__srcmaps_upload(ember__srcmaps_t *m, const char *worker,
                                              const char *version, const char *script,
                                              const char *json, size_t len, json_t **info,
                                              char *err, size_t err_size) {
  if (info) *info = NULL;
  if (version == NULL) version = "";
  if (!name_ok(worker, 256, false) || !name_ok(version, 256, true) ||
      !name_ok(script, EMBER__SRCMAPS_MAX_SCRIPT, false)) {
    snprintf(err, err_size,
             "a map needs a worker and a script (the bundle's path, or its tail: \"app.js\"), "
             "each without control characters, the worker at most 256 bytes and the script at "
             "most %u",
             EMBER__SRCMAPS_MAX_SCRIPT);
    return refuse(m, REFUSED_NAME, EMBER__SRCMAPS_BAD);
  }
  if (len > m->max_bytes) {
    snprintf(err, err_size, "a source map of %zu bytes (sourcemaps.max_bytes is %llu)", len,
             (unsigned long long)m->max_bytes);
    return refuse(m, EMBER_SOURCEMAP_TOO_BIG, EMBER__SRCMAPS_TOO_BIG);
  }
  ember_sourcemap_limits_t lim = {.max_bytes = m->max_bytes};
  ember_sourcemap_t *sm = NULL;
  ember_sourcemap_error_t e = {0};
  int rc = ember_sourcemap_parse(json, len, &lim, &sm, &e);
  if (rc == -ENOMEM) return EMBER__SRCMAPS_FAILED;
  if (rc != 0) {
    snprintf(err, err_size, "the source map is refused (%s): %s",
             ember_sourcemap_reason_name(e.reason), e.text);
    return refuse(m, (int)e.reason,
                  e.reason == EMBER_SOURCEMAP_TOO_BIG ? EMBER__SRCMAPS_TOO_BIG
                                                      : EMBER__SRCMAPS_BAD);
  }
  size_t segments = ember_sourcemap_segments(sm);
  ember_sourcemap_free(sm);

  char key[3 * EMBER__SRCMAPS_MAX_SCRIPT];
  size_t klen = record_key(worker, version, script, key, sizeof key);
  size_t bound = ZSTD_compressBound(len);
  uint8_t *val = ember_malloc(REC_HDR + bound);
  if (val == NULL || klen == 0) {
    ember_free(val);
    return EMBER__SRCMAPS_FAILED;
  }
  size_t z = ZSTD_compress(val + REC_HDR, bound, json, len, ZSTD_LEVEL);
  if (ZSTD_isError(z)) {
    ember_free(val);
    return EMBER__SRCMAPS_FAILED;
  }
  if (z > EMBER__SRCMAPS_MAX_STORED) {
    ember_free(val);
    snprintf(err, err_size, "the source map compresses to %zu bytes; at most %u travel on %s", z,
             EMBER__SRCMAPS_MAX_STORED, EMBER_TOPIC_SOURCEMAPS);
    return refuse(m, REFUSED_TOO_BIG_STORED, EMBER__SRCMAPS_TOO_BIG);
  }
  int64_t now = ember_time_now_ns();
  val[0] = REC_FORMAT;
  put_be(val + 1, (uint64_t)now, 8);
  put_be(val + 9, len, 8);
  put_be(val + 17, segments > UINT32_MAX ? UINT32_MAX : segments, 4);
  size_t vlen = REC_HDR + z;
  rc = ember__shared_put(m->shared, key, klen, val, vlen, err, err_size);
  /* Ours at once, not only when the follower reads it back. */
  if (rc == 0) rc = apply_record(m, key, klen, val, vlen, err, err_size);
  ember_free(val);
  if (rc == -ENOMEM) return EMBER__SRCMAPS_FAILED;
  if (rc != 0) return EMBER__SRCMAPS_UNSHARED;
  ember_metric_add(m->m_uploads, 1);
  EMBER_INFO("sourcemaps", "source map of %s for %s %s: %zu bytes (%zu compressed), %zu segments",
             script, worker, version[0] ? version : "(any version)", len, z, segments);
  if (info != NULL) {
    *info = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "worker", worker, "version", version,
                      "script", script, "bytes", (json_int_t)len, "stored_bytes", (json_int_t)z,
                      "segments", (json_int_t)segments);
    if (*info == NULL) return EMBER__SRCMAPS_FAILED;
  }
  return EMBER__SRCMAPS_OK;
}

ember__srcmaps_status_t ember__srcmaps_delete(ember__srcmaps_t *m, const char *worker,
                                              const char *version, const char *script, char *err,
                                              size_t err_size) {
  if (version == NULL) version = "";
  pthread_mutex_lock(&m->mu);
  bool have = worker && script && find(m, worker, version, script) != NULL;
  pthread_mutex_unlock(&m->mu);
  if (!have) {
    snprintf(err, err_size, "no source map of %s for %s %s", script ? script : "(none)",
             worker ? worker : "(none)", version[0] ? version : "(any version)");
    return EMBER__SRCMAPS_NOT_FOUND;
  }
  char key[3 * EMBER__SRCMAPS_MAX_SCRIPT];
  size_t klen = record_key(worker, version, script, key, sizeof key);
  if (klen == 0) return EMBER__SRCMAPS_BAD;
  int rc = ember__shared_put(m->shared, key, klen, NULL, 0, err, err_size);
  if (rc == 0) rc = apply_record(m, key, klen, NULL, 0, err, err_size);
  if (rc == -ENOMEM) return EMBER__SRCMAPS_FAILED;
  if (rc != 0) return EMBER__SRCMAPS_UNSHARED;
  EMBER_INFO("sourcemaps", "source map of %s for %s %s deleted", script, worker,
             version[0] ? version : "(any version)");
  return EMBER__SRCMAPS_OK;
}

json_t *ember__srcmaps_list(ember__srcmaps_t *m, const char *worker) {
  json_t *a = json_array();
  if (a == NULL) return NULL;
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->n; i++) {
    const entry_t *e = &m->e[i];
    if (worker != NULL && strcmp(worker, e->worker) != 0) continue;
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "worker", e->worker, "version",
                          e->version, "script", e->script, "bytes", (json_int_t)e->json_bytes,
                          "stored_bytes", (json_int_t)e->stored_bytes, "uploaded_ms",
                          (json_int_t)(e->uploaded_ns / 1000000));
    if (o == NULL || json_array_append_new(a, o) != 0) {
      pthread_mutex_unlock(&m->mu);
      json_decref(a);
      return NULL;
    }
  }
  pthread_mutex_unlock(&m->mu);
  return a;
}

/* ---------------------------------------------------------- the reads -- */

/* Drop least recently used maps until `need` more bytes fit. Under mu. */
static void make_room(ember__srcmaps_t *m, size_t need) {
  while (m->held + need > m->memory) {
    entry_t *lru = NULL;
    for (size_t i = 0; i < m->n; i++)
      if (m->e[i].map != NULL && (lru == NULL || m->e[i].used < lru->used)) lru = &m->e[i];
    if (lru == NULL) return;
    uncache(m, lru);
    ember_metric_add(m->m_evictions, 1);
  }
}

/* Read the stored map `doc_key` (of `json_bytes` bytes of JSON) and decode
 * it. Touches nothing of the registry, so it runs without the lock: a
 * big map takes tens of ms, and other reads go on meanwhile. 0 and *out;
 * -ENOMEM; else an error with *why (set for a map that will never decode,
 * NULL when the store could not be read). */
static int decode_doc(ember_store_t *store, const char *doc_key, uint64_t json_bytes,
                      ember_sourcemap_t **out, const char **why, char *why_buf, size_t why_size) {
  *why = NULL;
  void *doc = NULL;
  size_t dlen = 0;
  int rc = ember_store_doc_get(store, EMBER_STORE_DOC_SOURCEMAPS, doc_key, &doc, &dlen);
  if (rc != 0) {
    if (rc != -ENOMEM) {
      snprintf(why_buf, why_size, "it cannot be read from the store: %s", ember_strerror(rc));
      *why = why_buf;
    }
    return rc;
  }
  const uint8_t *d = doc;
  size_t klen = dlen >= 2 ? (size_t)get_be(d, 2) : 0;
  const uint8_t *val = d + 2 + klen, *zs = val + REC_HDR;
  size_t zlen = dlen >= 2 + klen + REC_HDR ? dlen - 2 - klen - REC_HDR : 0;
  unsigned long long want = zlen ? ZSTD_getFrameContentSize(zs, zlen) : 0;
  char *json = NULL;
  if (zlen == 0 || want != json_bytes || want > EMBER_SOURCEMAP_MAX_BYTES) {
    *why = "its compressed map does not say the size its record says";
  } else if ((json = ember_malloc((size_t)want)) == NULL) {
    ember_free(doc);
    return -ENOMEM;
  } else if (ZSTD_decompress(json, (size_t)want, zs, zlen) != want) {
    *why = "its compressed map does not decompress";
  }
  ember_free(doc);
  ember_sourcemap_error_t se = {0};
  rc = EMBER_ECORRUPT;
  if (*why == NULL) {
    rc = ember_sourcemap_parse(json, (size_t)want, NULL, out, &se);
    if (rc != 0 && rc != -ENOMEM) {
      snprintf(why_buf, why_size, "%s", se.text);
      *why = why_buf;
    }
  }
  ember_free(json);
  return rc;
}

/* The decoded map of `*ep`, reading and decoding it on a miss. Called and
 * returns under mu, but drops it while it decodes; entries may move
 * meanwhile, so *ep is found again (NULL when the map was deleted). NULL
 * when the map cannot be had (broken, gone from the store, out of
 * memory). Two readers missing at once may both decode: the first to
 * finish keeps its map. */
static const ember_sourcemap_t *map_of(ember__srcmaps_t *m, entry_t **ep) {
  entry_t *e = *ep;
  e->used = ++m->tick;
  if (e->map != NULL || e->broken) return e->map;
  char *w = ember_strdup(e->worker), *v = ember_strdup(e->version), *sc = ember_strdup(e->script);
  char doc_key[DOC_KEY_LEN + 1];
  memcpy(doc_key, e->doc_key, sizeof doc_key);
  uint64_t json_bytes = e->json_bytes;
  ember_sourcemap_t *sm = NULL;
  const char *why = NULL;
  char why_buf[256];
  int rc = -ENOMEM;
  if (w != NULL && v != NULL && sc != NULL) {
    pthread_mutex_unlock(&m->mu);
    rc = decode_doc(m->store, doc_key, json_bytes, &sm, &why, why_buf, sizeof why_buf);
    pthread_mutex_lock(&m->mu);
  }
  /* The same upload still there (not deleted, not replaced)? */
  e = w && v && sc ? find(m, w, v, sc) : NULL;
  if (e != NULL && strcmp(e->doc_key, doc_key) != 0) e = NULL;
  *ep = e;
  if (e == NULL || e->map != NULL || e->broken) {
    /* Gone, or another reader got there first. */
    ember_sourcemap_free(sm);
    sm = NULL;
  } else if (rc != 0 && why != NULL) {
    EMBER_WARN_LIMITED("sourcemaps", "source map %s of %s %s is not used: %s", e->script, e->worker,
                       e->version, why);
    e->broken = true;
    ember_metric_add(m->m_broken, 1);
  } else if (rc == 0) {
    size_t bytes = ember_sourcemap_memory(sm);
    make_room(m, bytes);
    e->map = sm;
    e->map_bytes = bytes;
    m->held += bytes;
    ember_metric_add(m->m_decoded, 1);
    ember_metric_set(m->m_bytes, (double)m->held);
  }
  ember_free(w);
  ember_free(v);
  ember_free(sc);
  return e != NULL ? e->map : NULL;
}

/* The entry of (w, v) whose script `path` matches best: equal, or a tail
 * at a '/'; the longest wins. Else the same among the worker's maps of
 * no version. Under mu. */
static entry_t *match_version(ember__srcmaps_t *m, const char *w, const char *v, const char *path) {
  size_t plen = strlen(path);
  entry_t *best = NULL;
  for (size_t i = lower_bound(m, w, v, NULL); i < m->n && cmp3(w, v, NULL, &m->e[i]) == 0; i++) {
    entry_t *e = &m->e[i];
    size_t n = e->script_len;
    if (n > plen || memcmp(path + plen - n, e->script, n) != 0) continue;
    if (n < plen && path[plen - n - 1] != '/' && e->script[0] != '/') continue;
    if (best == NULL || n > best->script_len) best = e;
  }
  return best;
}

static entry_t *match(ember__srcmaps_t *m, const char *w, const char *v, const char *path) {
  entry_t *e = match_version(m, w, v, path);
  return e != NULL || v[0] == '\0' ? e : match_version(m, w, "", path);
}

/* Whether (w, v) has maps, of its own or of no version. Under mu. */
static bool has_maps(const ember__srcmaps_t *m, const char *w, const char *v) {
  size_t i = lower_bound(m, w, v, NULL);
  if (i < m->n && cmp3(w, v, NULL, &m->e[i]) == 0) return true;
  i = lower_bound(m, w, "", NULL);
  return i < m->n && cmp3(w, "", NULL, &m->e[i]) == 0;
}

static bool any(void *ctx) {
  ember__srcmaps_t *m = ctx;
  pthread_mutex_lock(&m->mu);
  bool some = m->n > 0;
  pthread_mutex_unlock(&m->mu);
  return some;
}

static bool wants(void *ctx, const char *worker, const char *version) {
  ember__srcmaps_t *m = ctx;
  if (worker == NULL) return false;
  const char *v = version ? version : "";
  pthread_mutex_lock(&m->mu);
  bool any = has_maps(m, worker, v);
  pthread_mutex_unlock(&m->mu);
  return any;
}

/* Copy `len` bytes of `s` into the room left at *at; NULL if it does not fit. */
static const char *put_str(const char *s, size_t len, char **at, char *end) {
  if (len >= (size_t)(end - *at)) return NULL;
  char *d = *at;
  memcpy(d, s, len);
  d[len] = '\0';
  *at += len + 1;
  return d;
}

static int frame(void *ctx, const char *worker, const char *version, const ember_frame_t *in,
                 ember_frame_t *out, char *buf, size_t size) {
  ember__srcmaps_t *m = ctx;
  /* A frame V8 named and nobody mapped yet. */
  if (in->kind != EMBER_FRAME_JIT || in->generated != NULL || in->function == NULL) return 0;
  ember_jsname_t j;
  char path[PATH_MAX];
  if (!ember_jsname_parse(in->function, &j) ||
      !ember_jsname_script_path(j.script, j.script_len, path, sizeof path))
    return 0;
  ember_jsname_path_lexical(path);
  const char *v = version ? version : "";
  int rc = 0;
  pthread_mutex_lock(&m->mu);
  entry_t *e = match(m, worker, v, path);
  const ember_sourcemap_t *sm = e ? map_of(m, &e) : NULL;
  ember_sourcemap_pos_t pos;
  if (sm == NULL) goto done;
  if (!ember_sourcemap_function(sm, j.line, j.column, j.function_len, &pos) || pos.source == NULL) {
    ember_metric_add(m->m_unmapped, 1);
    goto done;
  }
  char *at = buf, *end = buf + size;
  const char *fn = pos.name         ? put_str(pos.name, strlen(pos.name), &at, end)
                   : j.function_len ? put_str(j.function, j.function_len, &at, end)
                                    : "(anonymous)";
  /* A relative source is where the map would be: beside the script. */
  const char *file = NULL;
  if (ember_sourcemap_source_is_relative(pos.source)) {
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) : 0, slen = strlen(pos.source);
    if (dlen + 1 + slen < (size_t)(end - at)) {
      char *f = at;
      memcpy(f, path, dlen);
      f[dlen] = '/';
      memcpy(f + dlen + 1, pos.source, slen + 1);
      ember_jsname_path_lexical(f);
      at += strlen(f) + 1;
      file = f;
    }
  } else {
    file = put_str(pos.source, strlen(pos.source), &at, end);
  }
  const char *module = put_str(path, strlen(path), &at, end);
  if (fn == NULL || file == NULL || module == NULL) goto done; /* too long: keep V8's */
  *out = (ember_frame_t){.function = fn,
                         .file = file,
                         .line = pos.line,
                         .module = module,
                         .generated = j.function + (j.function_len == 0),
                         .kind = EMBER_FRAME_JIT};
  ember_metric_add(m->m_frames, 1);
  rc = 1;
done:
  pthread_mutex_unlock(&m->mu);
  return rc;
}

void ember__srcmaps_frame_map(ember__srcmaps_t *m, ember_store_frame_map_t *out) {
  *out = (ember_store_frame_map_t){.any = any, .wants = wants, .frame = frame, .ctx = m};
}
