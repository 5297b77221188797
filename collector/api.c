/* The HTTP API's handlers: routing, authentication, parameter checking
 * and the endpoints of docs/api.md, served through the HTTP layer
 * (src/http.h), which owns the daemon, the connections and the responses.
 *
 * Every handler works the same way: check the parameters (any error is a
 * 400 naming the parameter), ask the store, build the body in an ember_buf_t
 * bounded by max_response, and hand it to the layer, which sends errors as
 * JSON. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "api.h"
#include "ui.h"
#include "ember/export.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "http.h"
#include "json.h"
#include "sessions.h"
#include "utf8.h"

#define LOG "api"

#define DEFAULT_LISTEN "127.0.0.1:7272"
#define MAX_PARAMS     32u
#define SEC_NS         1000000000LL
#define MS_NS          1000000LL
/* The largest request body (session requests are a few hundred bytes). */
#define MAX_BODY ((size_t)64 << 10)

/* Timelines: the default step keeps at most this many buckets... */
#define TIMELINE_DEFAULT_BUCKETS 500
/* ...and no step is shorter than the store's 10-second windows. */
#define TIMELINE_MIN_STEP_NS (10 * SEC_NS)
/* The most buckets a request may ask for, and the most (series x buckets)
 * values it may make us hold, so one request cannot take gigabytes. */
#define TIMELINE_MAX_BUCKETS 10000u
#define TIMELINE_MAX_CELLS   ((size_t)4 << 20)

const char *const ember__api_config_keys[] = {EMBER__API_CONFIG_KEYS, NULL};

int ember__api_read_config(const ember_config_t *cfg, ember__api_opts_t *o, char *errbuf,
                           size_t errbuf_size) {
  uint64_t threads, conns, per_ip;
  int64_t timeout;
  int rc = ember_config_get_u64(cfg, "api.threads", 2, 1, EMBER__HTTP_MAX_THREADS, &threads, errbuf,
                                errbuf_size);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "api.max_connections", 256, 1, 65536, &conns, errbuf,
                              errbuf_size);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "api.max_connections_per_ip", 32, 1, 65536, &per_ip, errbuf,
                              errbuf_size);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "api.request_timeout", 10 * SEC_NS, 100 * MS_NS,
                                      3600 * SEC_NS, &timeout, errbuf, errbuf_size);
  if (rc != 0) return rc;
  o->threads = (unsigned)threads;
  o->max_connections = (unsigned)conns;
  o->max_per_ip = (unsigned)per_ip;
  o->request_timeout_ms = (unsigned)(timeout / MS_NS);
  o->allowed_hosts = ember_config_get(cfg, "api.allowed_hosts");
  return 0;
}

struct ember__api {
  ember__http_t *http;
  ember_store_t *store;
  ember_metrics_t *metrics;
  ember__registry_t *registry;  /* NULL: /api/v1/targets answers an empty list */
  ember__csessions_t *sessions; /* NULL: session routes answer 503 */
  char *token;                  /* NULL = no authentication */
  size_t token_len;
  size_t max_response;

  bool (*ready)(void *ctx, char *why, size_t n); /* NULL: /healthz always ok */
  void *ready_ctx;
};

/* ------------------------------------------------------------ request -- */

typedef struct param {
  const char *key, *value; /* borrowed from libmicrohttpd for the request */
} param_t;

typedef struct req {
  ember__api_t *api;
  ember__http_req_t *q;
  const char *url;
  param_t params[MAX_PARAMS];
  size_t nparams;
  bool too_many;
  int64_t now_ns;
  /* The answer: a status with either a body or an error sentence. */
  unsigned status;
  ember_buf_t body;
  const char *ctype;
  const char *fixed_body; /* a static body instead of `body` */
  const char *method;
  const char *in; /* the request body (POST), NUL-terminated; NULL = none */
  size_t in_len;
  bool in_too_big;                /* the body passed MAX_BODY and was cut */
  const char *allow;              /* the Allow header of a 405 */
  const ember__ui_asset_t *asset; /* a dashboard file to send (status 200 or 304) */
  ember_top_order_t top_by;       /* format=top: sort=self (default) or total */
  char disposition[96];
  char err[512];
} req_t;

/* Record an error answer; returns the status so handlers can `return
 * fail(...)`. */
static unsigned fail(req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static unsigned fail(req_t *r, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
  r->status = status;
  return status;
}

/* An internal failure: a 413 when the response outgrew max_response, else a
 * 500 with a logged line that says what failed. */
static unsigned fail_internal(req_t *r, const char *what, int rc) {
  if (rc == EMBER_ETOOBIG)
    return fail(r, 413,
                "the response would be larger than %zu bytes: narrow the time range or the "
                "selector, or lower max_nodes or limit",
                r->api->max_response);
  EMBER_ERROR_LIMITED(LOG, "GET %s: %s failed: %s", r->url, what, ember_strerror(rc));
  return fail(r, 500, "internal error: %s failed (%s); the server log has details", what,
              ember_store_strerror(rc));
}

static bool collect_param(void *cls, const char *key, const char *value) {
  req_t *r = cls;
  if (r->nparams == MAX_PARAMS) {
    r->too_many = true;
    return false;
  }
  r->params[r->nparams++] = (param_t){key, value};
  return true;
}

/* Check the parameters against the endpoint's list (NULL-terminated):
 * unknown, repeated (but for the key `repeatable`, when not NULL),
 * valueless and empty parameters are errors. */
static unsigned check_params_rep(req_t *r, const char *const *allowed, const char *repeatable) {
  if (r->too_many) return fail(r, 400, "too many parameters: at most %u", MAX_PARAMS);
  for (size_t i = 0; i < r->nparams; i++) {
    const char *k = r->params[i].key;
    bool known = false;
    for (const char *const *a = allowed; *a != NULL && !known; a++) known = strcmp(*a, k) == 0;
    if (!known) {
      char list[400] = "none";
      size_t off = 0;
      for (const char *const *a = allowed; *a != NULL && off < sizeof list; a++) {
        int n = snprintf(list + off, sizeof list - off, "%s%s", off ? ", " : "", *a);
        if (n < 0) break;
        off += (size_t)n;
      }
      return fail(r, 400, "unknown parameter \"%.64s\": this endpoint takes %s", k, list);
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(r->params[j].key, k) == 0 && (repeatable == NULL || strcmp(k, repeatable) != 0))
        return fail(r, 400, "parameter \"%.64s\" is given more than once", k);
    }
    if (r->params[i].value == NULL || r->params[i].value[0] == '\0')
      return fail(r, 400, "parameter \"%.64s\" needs a value (%.64s=...)", k, k);
  }
  return 0;
}

static unsigned check_params(req_t *r, const char *const *allowed) {
  return check_params_rep(r, allowed, NULL);
}

static const char *param(const req_t *r, const char *key) {
  for (size_t i = 0; i < r->nparams; i++) {
    if (strcmp(r->params[i].key, key) == 0) return r->params[i].value;
  }
  return NULL;
}

#define TIME_FORMS                                                                                 \
  "use now, a time before now (-15m, now-2h), Unix seconds (1764410400) or RFC 3339 "              \
  "(2026-11-29T10:00:00Z)"

static unsigned parse_time_param(req_t *r, const char *key, const char *dflt, int64_t *out) {
  const char *v = param(r, key);
  int rc = ember_parse_time(v ? v : dflt, r->now_ns, out);
  if (rc == -ERANGE) return fail(r, 400, "parameter \"%s\": \"%.64s\" is out of range", key, v);
  if (rc != 0)
    return fail(r, 400, "parameter \"%s\": \"%.64s\" is not a time; " TIME_FORMS, key, v);
  return 0;
}

/* from/to (or vs.from/vs.to, defaulting to the base range). */
static unsigned parse_range(req_t *r, const char *kfrom, const char *kto, const char *dfrom,
                            const char *dto, int64_t *from, int64_t *to) {
  unsigned st = parse_time_param(r, kfrom, dfrom, from);
  if (st == 0) st = parse_time_param(r, kto, dto, to);
  if (st == 0 && *from >= *to)
    return fail(r, 400, "parameter \"%s\" must be before \"%s\" (the range is [%s, %s))", kfrom,
                kto, kfrom, kto);
  return st;
}

static unsigned parse_u64_param(req_t *r, const char *key, uint64_t dflt, uint64_t min,
                                uint64_t max, uint64_t *out) {
  const char *v = param(r, key);
  if (v == NULL) {
    *out = dflt;
    return 0;
  }
  if (ember_parse_u64(v, min, max, out) != 0)
    return fail(r, 400, "parameter \"%s\": \"%.64s\" is not a whole number from %llu to %llu", key,
                v, (unsigned long long)min, (unsigned long long)max);
  return 0;
}

/* The profile types of the API, and the store value type each reads. */
typedef enum api_type { T_CPU, T_SAMPLES, T_ALLOC_OBJECTS, T_ALLOC_BYTES } api_type_t;
static const char *const type_names[] = {"cpu", "samples", "alloc_objects", "alloc_bytes"};

static unsigned parse_type(req_t *r, api_type_t *out) {
  const char *v = param(r, "type");
  if (v == NULL) {
    *out = T_CPU;
    return 0;
  }
  for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++) {
    if (strcmp(v, type_names[i]) == 0) {
      *out = (api_type_t)i;
      return 0;
    }
  }
  return fail(r, 400,
              "parameter \"type\": \"%.64s\" is not a profile type; use cpu, samples, "
              "alloc_objects or alloc_bytes",
              v);
}

/* worker/version/host/actor, or with a prefix ("vs.") defaulting to `base`. */
static void parse_selector(const req_t *r, const char *prefix, const ember_store_selector_t *base,
                           ember_store_selector_t *sel) {
  static const char *const keys[] = {"worker", "version", "host", "actor"};
  const char *vals[4];
  for (size_t i = 0; i < 4; i++) {
    char k[32];
    snprintf(k, sizeof k, "%s%s", prefix, keys[i]);
    vals[i] = param(r, k);
  }
  *sel = (ember_store_selector_t){vals[0], vals[1], vals[2], vals[3]};
  if (base != NULL) {
    /* Absent: the base's value; "*": any, even where the base has one. */
    const char *bvals[4] = {base->worker, base->version, base->host, base->actor};
    for (size_t i = 0; i < 4; i++) {
      if (vals[i] == NULL) {
        vals[i] = bvals[i];
      } else if (strcmp(vals[i], "*") == 0) {
        vals[i] = NULL;
      }
    }
    *sel = (ember_store_selector_t){vals[0], vals[1], vals[2], vals[3]};
  }
}

static int64_t to_ms(int64_t ns) { return ns / MS_NS - (ns % MS_NS < 0); }

/* --------------------------------------------------------------- JSON -- */

/* A new array set as obj[key]; NULL when out of memory. Borrowed. */
static json_t *jarray_in(json_t *obj, const char *key) {
  json_t *a = json_array();
  return ember__json_set(obj, key, a) == 0 ? a : NULL;
}

/* Dump `j` into the response body as the answer. */
static unsigned answer_json(req_t *r, const json_t *j) {
  int rc = ember__json_dump(j, &r->body);
  if (rc != 0) return fail_internal(r, "writing JSON", rc);
  r->status = 200;
  r->ctype = "application/json";
  return 200;
}

/* A document with from_ms and to_ms, the start of most answers. */
static json_t *range_doc(int64_t from, int64_t to) {
  json_t *doc = json_object();
  if (doc == NULL) return NULL;
  if (ember__json_set(doc, "from_ms", json_integer(to_ms(from))) != 0 ||
      ember__json_set(doc, "to_ms", json_integer(to_ms(to))) != 0) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* ------------------------------------------------------------- labels -- */

enum { L_WORKER, L_VERSION, L_HOST, L_ACTOR };

static const char *label_of(const ember_labels_t *l, int field) {
  switch (field) {
  case L_WORKER: return l->worker;
  case L_VERSION: return l->version;
  case L_HOST: return l->host;
  case L_ACTOR: return l->actor;
  default: return NULL;
  }
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Series indices sorted by one label (for grouping). */
typedef struct by_label {
  const ember_store_series_t *series;
  int field;
} by_label_t;

static int series_label_cmp(const void *a, const void *b, void *ctx) {
  const by_label_t *k = ctx;
  const char *x = label_of(&k->series[*(const size_t *)a].labels, k->field);
  const char *y = label_of(&k->series[*(const size_t *)b].labels, k->field);
  int c = strcmp(x, y);
  if (c != 0) return c;
  return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* The indices of the series that carry label `field`, sorted by it. *n
 * gets how many. NULL when out of memory. */
static size_t *series_sorted_by(const ember_store_series_t *s, size_t count, int field, size_t *n) {
  size_t *idx = ember_malloc((count ? count : 1) * sizeof *idx);
  if (idx == NULL) return NULL;
  *n = 0;
  for (size_t i = 0; i < count; i++) {
    if (label_of(&s[i].labels, field) != NULL) idx[(*n)++] = i;
  }
  by_label_t ctx = {s, field};
  qsort_r(idx, *n, sizeof *idx, series_label_cmp, &ctx);
  return idx;
}

/* The distinct values of `field` among series idx[0..n), sorted, as a JSON
 * array. NULL when out of memory. */
static json_t *distinct_values(const ember_store_series_t *s, const size_t *idx, size_t n,
                               int field) {
  const char **v = ember_malloc((n ? n : 1) * sizeof *v);
  if (v == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *x = label_of(&s[idx[i]].labels, field);
    if (x != NULL) v[k++] = x;
  }
  qsort(v, k, sizeof *v, str_cmp);
  json_t *a = json_array();
  for (size_t i = 0; i < k && a != NULL; i++) {
    if (i > 0 && strcmp(v[i], v[i - 1]) == 0) continue;
    if (ember__json_push(a, ember__json_str(v[i])) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  ember_free(v);
  return a;
}

/* ---------------------------------------------------------- endpoints -- */

static const char *const range_params[] = {"from", "to", NULL};
static const char *const sel_params[] = {"worker", "version", "host", "actor", "from", "to", NULL};

static unsigned get_series_list(req_t *r, const ember_store_selector_t *sel, int64_t from,
                                int64_t to, ember_store_series_t **s, size_t *n) {
  int rc = ember_store_series(r->api->store, sel, from, to, s, n);
  return rc == 0 ? 0 : fail_internal(r, "reading series from the store", rc);
}

static unsigned h_workers(req_t *r) {
  int64_t from, to;
  unsigned st = check_params(r, range_params);
  if (st == 0) st = parse_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st != 0) return st;
  ember_store_series_t *s = NULL;
  size_t n = 0, nw = 0;
  size_t *idx = NULL;
  json_t *doc = NULL;
  st = get_series_list(r, NULL, from, to, &s, &n);
  if (st != 0) return st;
  int rc = -ENOMEM;
  idx = series_sorted_by(s, n, L_WORKER, &nw);
  doc = range_doc(from, to);
  json_t *workers = doc ? jarray_in(doc, "workers") : NULL;
  if (idx == NULL || workers == NULL) goto cleanup;
  rc = 0;
  for (size_t i = 0; i < nw && rc == 0;) {
    const char *name = s[idx[i]].labels.worker;
    size_t j = i;
    int64_t last = INT64_MIN;
    while (j < nw && strcmp(s[idx[j]].labels.worker, name) == 0) {
      if (s[idx[j]].last_ns > last) last = s[idx[j]].last_ns;
      j++;
    }
    json_t *w = json_object();
    rc = ember__json_push(workers, w);
    if (rc == 0) rc = ember__json_set(w, "worker", ember__json_str(name));
    if (rc == 0) rc = ember__json_set(w, "versions", distinct_values(s, idx + i, j - i, L_VERSION));
    if (rc == 0) rc = ember__json_set(w, "hosts", distinct_values(s, idx + i, j - i, L_HOST));
    if (rc == 0) rc = ember__json_set(w, "actors", distinct_values(s, idx + i, j - i, L_ACTOR));
    if (rc == 0) rc = ember__json_set(w, "series", json_integer((json_int_t)(j - i)));
    if (rc == 0) rc = ember__json_set(w, "last_ms", json_integer(to_ms(last)));
    i = j;
  }
cleanup:
  st = rc == 0 ? answer_json(r, doc) : fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_free(idx);
  ember_store_series_free(s, n);
  return st;
}

/* /versions, /hosts, /actors: the distinct values of one label. */
static unsigned h_values(req_t *r, int field) {
  int64_t from, to;
  ember_store_selector_t sel;
  unsigned st = check_params(r, sel_params);
  if (st == 0) st = parse_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st != 0) return st;
  parse_selector(r, "", NULL, &sel);
  ember_store_series_t *s = NULL;
  size_t n = 0, nv = 0;
  st = get_series_list(r, &sel, from, to, &s, &n);
  if (st != 0) return st;
  int rc = -ENOMEM;
  size_t *idx = series_sorted_by(s, n, field, &nv);
  json_t *doc = range_doc(from, to);
  json_t *values = doc ? jarray_in(doc, "values") : NULL;
  if (idx == NULL || values == NULL) goto cleanup;
  rc = 0;
  for (size_t i = 0; i < nv && rc == 0;) {
    const char *name = label_of(&s[idx[i]].labels, field);
    size_t j = i;
    int64_t last = INT64_MIN;
    while (j < nv && strcmp(label_of(&s[idx[j]].labels, field), name) == 0) {
      if (s[idx[j]].last_ns > last) last = s[idx[j]].last_ns;
      j++;
    }
    json_t *v = json_object();
    rc = ember__json_push(values, v);
    if (rc == 0) rc = ember__json_set(v, "name", ember__json_str(name));
    if (rc == 0) rc = ember__json_set(v, "series", json_integer((json_int_t)(j - i)));
    if (rc == 0) rc = ember__json_set(v, "last_ms", json_integer(to_ms(last)));
    i = j;
  }
cleanup:
  st = rc == 0 ? answer_json(r, doc) : fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_free(idx);
  ember_store_series_free(s, n);
  return st;
}

static unsigned h_versions(req_t *r) { return h_values(r, L_VERSION); }
static unsigned h_hosts(req_t *r) { return h_values(r, L_HOST); }
static unsigned h_actors(req_t *r) { return h_values(r, L_ACTOR); }

/* Series labels as JSON fields (null for an absent label). */
static int set_labels(json_t *o, const ember_labels_t *l) {
  int rc = ember__json_set(o, "worker", ember__json_str(l->worker));
  if (rc == 0) rc = ember__json_set(o, "version", ember__json_str(l->version));
  if (rc == 0) rc = ember__json_set(o, "host", ember__json_str(l->host));
  if (rc == 0) rc = ember__json_set(o, "actor", ember__json_str(l->actor));
  return rc;
}

static unsigned h_series(req_t *r) {
  int64_t from, to;
  ember_store_selector_t sel;
  unsigned st = check_params(r, sel_params);
  if (st == 0) st = parse_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st != 0) return st;
  parse_selector(r, "", NULL, &sel);
  ember_store_series_t *s = NULL;
  size_t n = 0;
  st = get_series_list(r, &sel, from, to, &s, &n);
  if (st != 0) return st;
  int rc = -ENOMEM;
  json_t *doc = range_doc(from, to);
  json_t *arr = doc ? jarray_in(doc, "series") : NULL;
  if (arr != NULL) rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    if (rc == 0) rc = ember__json_set(o, "id", json_integer(s[i].id));
    if (rc == 0) rc = set_labels(o, &s[i].labels);
    if (rc == 0) rc = ember__json_set(o, "first_ms", json_integer(to_ms(s[i].first_ns)));
    if (rc == 0) rc = ember__json_set(o, "last_ms", json_integer(to_ms(s[i].last_ns)));
  }
  st = rc == 0 ? answer_json(r, doc) : fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_store_series_free(s, n);
  return st;
}

/* --- targets: the registry from ember.targets --- */

static const char *const target_params[] = {"worker", "version", "host", "actor", "from", NULL};

static unsigned h_targets(req_t *r) {
  int64_t from;
  ember_store_selector_t sel;
  unsigned st = check_params(r, target_params);
  if (st == 0) st = parse_time_param(r, "from", "-1h", &from);
  if (st != 0) return st;
  parse_selector(r, "", NULL, &sel);
  ember_target_record_t *t = NULL;
  size_t n = 0;
  int rc = r->api->registry ? ember__registry_list(r->api->registry, &sel, from, &t, &n) : 0;
  if (rc != 0) return fail_internal(r, "listing targets", rc);
  json_t *doc = json_object();
  json_t *arr = doc ? jarray_in(doc, "targets") : NULL;
  rc = arr != NULL ? 0 : -ENOMEM;
  if (rc == 0) rc = ember__json_set(doc, "from_ms", json_integer(to_ms(from)));
  for (size_t i = 0; i < n && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    const char *keys[] = {"host", "worker", "version",  "actor",
                          "comm", "exe",    "build_id", "agent_id"};
    const char *vals[] = {t[i].host, t[i].worker, t[i].version,  t[i].actor,
                          t[i].comm, t[i].exe,    t[i].build_id, t[i].agent_id};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0] && rc == 0; k++)
      if (vals[k] != NULL && vals[k][0] != '\0')
        rc = ember__json_set(o, keys[k], ember__json_str(vals[k]));
    if (rc == 0) rc = ember__json_set(o, "pid", json_integer(t[i].pid));
    if (rc == 0) rc = ember__json_set(o, "seen_ms", json_integer(to_ms(t[i].seen_ns)));
  }
  st = rc == 0 ? answer_json(r, doc) : fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember__registry_list_free(t, n);
  return st;
}

/* --- timeline --- */

static int nlabels(const ember_labels_t *l) {
  return (l->worker != NULL) + (l->version != NULL) + (l->host != NULL) + (l->actor != NULL);
}

static bool opt_eq(const char *want, const char *have) {
  return want == NULL || (have != NULL && strcmp(want, have) == 0);
}

/* Does series `t` match the selector made of series `s`'s labels? */
static bool matches_labels(const ember_labels_t *s, const ember_labels_t *t) {
  return opt_eq(s->worker, t->worker) && opt_eq(s->version, t->version) &&
         opt_eq(s->host, t->host) && opt_eq(s->actor, t->actor);
}

typedef struct tl_series {
  size_t idx;   /* into the series array */
  int64_t *cpu; /* nbuckets values, exact for this series */
  int64_t sum;  /* for ranking */
} tl_series_t;

static int by_labels_desc(const void *a, const void *b, void *ctx) {
  const ember_store_series_t *s = ctx;
  const tl_series_t *x = a, *y = b;
  int nx = nlabels(&s[x->idx].labels), ny = nlabels(&s[y->idx].labels);
  if (nx != ny) return nx > ny ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int by_cpu_desc(const void *a, const void *b, void *ctx) {
  const ember_store_series_t *s = ctx;
  const tl_series_t *x = a, *y = b;
  if (x->sum != y->sum) return x->sum > y->sum ? -1 : 1;
  return s[x->idx].id < s[y->idx].id ? -1 : s[x->idx].id > s[y->idx].id;
}

static json_t *int_array(const int64_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n && a != NULL; i++) {
    if (ember__json_push(a, json_integer(v[i])) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}

static unsigned h_timeline(req_t *r) {
  static const char *const allowed[] = {"worker", "version", "host",  "actor", "from",
                                        "to",     "step",    "limit", NULL};
  int64_t from, to, step;
  uint64_t limit;
  ember_store_selector_t sel;
  unsigned st = check_params(r, allowed);
  if (st == 0) st = parse_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) st = parse_u64_param(r, "limit", 50, 1, 1000, &limit);
  if (st != 0) return st;
  parse_selector(r, "", NULL, &sel);
  /* to > from, so the difference fits in uint64 even when it does not fit
   * in int64. */
  uint64_t span = (uint64_t)to - (uint64_t)from;
  const char *sv = param(r, "step");
  if (sv != NULL) {
    if (ember_parse_duration_ns(sv, SEC_NS, &step) != 0 || step < TIMELINE_MIN_STEP_NS)
      return fail(r, 400,
                  "parameter \"step\": \"%.64s\" is not a duration of at least 10s; use a number "
                  "with a unit (10s, 5m, 1h) or bare seconds",
                  sv);
  } else {
    /* The shortest whole multiple of 10 s that gives at most 500 buckets. */
    uint64_t per = span / TIMELINE_DEFAULT_BUCKETS + (span % TIMELINE_DEFAULT_BUCKETS != 0);
    uint64_t tens =
        per / (uint64_t)TIMELINE_MIN_STEP_NS + (per % (uint64_t)TIMELINE_MIN_STEP_NS != 0);
    if (tens == 0) tens = 1;
    step = tens > (uint64_t)(INT64_MAX / TIMELINE_MIN_STEP_NS)
               ? INT64_MAX
               : (int64_t)tens * TIMELINE_MIN_STEP_NS;
  }
  uint64_t nb = span / (uint64_t)step + (span % (uint64_t)step != 0);
  if (nb > TIMELINE_MAX_BUCKETS)
    return fail(r, 400,
                "parameter \"step\": %llu buckets of %lld s over [from, to) is more than %u; "
                "raise step or narrow from/to",
                (unsigned long long)nb, (long long)(step / SEC_NS), TIMELINE_MAX_BUCKETS);

  ember_store_series_t *s = NULL;
  size_t n = 0, nbk = 0;
  int64_t *total = NULL;
  tl_series_t *ts = NULL;
  json_t *doc = NULL;
  const char *what = "reading the CPU timeline from the store";
  int rc = 0;
  st = get_series_list(r, &sel, from, to, &s, &n);
  if (st != 0) return st;
  if (n > 0 && n > TIMELINE_MAX_CELLS / nb) {
    st = fail(r, 400,
              "%zu series x %llu buckets is too many for one timeline: narrow the selector "
              "(worker, version, host, actor) or raise step",
              n, (unsigned long long)nb);
    goto cleanup;
  }
  rc = ember_store_cpu_timeline(r->api->store, &sel, from, to, step, &total, &nbk);
  if (rc != 0) goto cleanup;
  ts = ember_calloc(n ? n : 1, sizeof *ts);
  if (ts == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  for (size_t i = 0; i < n; i++) ts[i].idx = i;
  /* A series with an absent label cannot be selected alone (NULL in a
   * selector means "any"), so its timeline also holds every series that
   * adds labels to it. Those have more labels, so going from the most
   * labels to the fewest, each one's own CPU is its selector's timeline
   * minus the exact timelines of the series already done that it covers. */
  qsort_r(ts, n, sizeof *ts, by_labels_desc, s);
  for (size_t i = 0; i < n; i++) {
    const ember_labels_t *l = &s[ts[i].idx].labels;
    ember_store_selector_t one = {l->worker, l->version, l->host, l->actor};
    size_t cnt = 0;
    rc = ember_store_cpu_timeline(r->api->store, &one, from, to, step, &ts[i].cpu, &cnt);
    if (rc != 0) goto cleanup;
    if (cnt != nbk) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    if (nlabels(l) < 4) {
      for (size_t j = 0; j < i; j++) {
        if (!matches_labels(l, &s[ts[j].idx].labels)) continue;
        for (size_t b = 0; b < nbk; b++) ts[i].cpu[b] -= ts[j].cpu[b];
      }
    }
    ts[i].sum = 0;
    for (size_t b = 0; b < nbk; b++) {
      /* Ingest between our reads can make a difference negative. */
      if (ts[i].cpu[b] < 0) ts[i].cpu[b] = 0;
      ts[i].sum = ts[i].sum > INT64_MAX - ts[i].cpu[b] ? INT64_MAX : ts[i].sum + ts[i].cpu[b];
    }
  }
  qsort_r(ts, n, sizeof *ts, by_cpu_desc, s);

  what = "building the answer";
  rc = -ENOMEM;
  doc = range_doc(from, to);
  if (doc == NULL) goto cleanup;
  rc = ember__json_set(doc, "step_ms", json_integer(to_ms(step)));
  if (rc == 0) rc = ember__json_set(doc, "total_cpu_ns", int_array(total, nbk));
  json_t *arr = NULL;
  if (rc == 0) {
    arr = jarray_in(doc, "series");
    if (arr == NULL) rc = -ENOMEM;
  }
  for (size_t i = 0; i < n && i < limit && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    if (rc == 0) rc = set_labels(o, &s[ts[i].idx].labels);
    if (rc == 0) rc = ember__json_set(o, "cpu_ns", int_array(ts[i].cpu, nbk));
  }
  if (rc == 0) rc = ember__json_set(doc, "truncated", json_boolean(n > limit));

cleanup:
  if (st == 0) st = rc == 0 ? answer_json(r, doc) : fail_internal(r, what, rc);
  json_decref(doc);
  if (ts != NULL) {
    for (size_t i = 0; i < n; i++) ember_free(ts[i].cpu);
  }
  ember_free(ts);
  ember_free(total);
  ember_store_series_free(s, n);
  return st;
}

/* --- profiles --- */

/* A copy of `src` (one value type) whose values are multiplied by `period`
 * under the value type CPU_NS. */
static int samples_to_ns(const ember_profile_t *src, int64_t period, ember_profile_t **out) {
  ember_value_type_t vt = EMBER_VT_CPU_NS;
  ember_profile_t *p = NULL;
  int rc = ember_profile_new(&vt, 1, &p);
  if (rc != 0) return rc;
  rc = ember_profile_set_labels(p, ember_profile_labels(src));
  int64_t ws, we;
  ember_profile_window(src, &ws, &we);
  if (rc == 0 && ws < we) rc = ember_profile_set_window(p, ws, we);
  ember_profile_set_period(p, period);
  /* Frames are interned in order, so the copy's frame ids equal src's. */
  for (size_t f = 0; f < ember_profile_nframes(src) && rc == 0; f++) {
    uint32_t id;
    rc = ember_profile_intern_frame(p, ember_profile_frame(src, (uint32_t)f), &id);
  }
  for (size_t i = 0; i < ember_profile_nstacks(src) && rc == 0; i++) {
    const uint32_t *ids;
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(src, (uint32_t)i, &ids, &depth, &v);
    int64_t ns;
    if (rc == 0 && __builtin_mul_overflow(v[0], period, &ns)) rc = -ERANGE;
    if (rc == 0) rc = ember_profile_add_ids(p, ids, depth, &ns, NULL);
  }
  if (rc != 0) {
    ember_profile_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

/* The merged profile of a selection in one value type. For cpu: CPU
 * nanoseconds where the agents sent them; when the selection holds only
 * samples, samples times the period (or plain samples when the period is
 * unknown, which the answer's "type" then says). */
/* type=cpu over data that has CPU samples but no CPU time (`*p`, empty):
 * replace *p with `samples` x their period, or the samples themselves when
 * the period is mixed. Takes `samples`. */
static int cpu_from_samples(ember_profile_t **p, ember_profile_t *samples) {
  int rc = 0;
  if (ember_profile_nstacks(samples) > 0) {
    ember_profile_free(*p);
    *p = NULL;
    int64_t period = ember_profile_period(samples);
    if (period > 0) {
      rc = samples_to_ns(samples, period, p);
    } else {
      *p = samples;
      samples = NULL;
    }
  }
  ember_profile_free(samples);
  return rc;
}

static unsigned load_profile(req_t *r, const ember_store_selector_t *sel, int64_t from, int64_t to,
                             api_type_t type, ember_profile_t **out) {
  static const ember_value_type_t vts[] = {EMBER_VT_CPU_NS, EMBER_VT_CPU_SAMPLES,
                                           EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES};
  ember_profile_t *p = NULL, *samples = NULL;
  int rc = ember_store_merge(r->api->store, sel, from, to, vts[type], &p);
  if (rc == 0 && type == T_CPU && ember_profile_nstacks(p) == 0) {
    rc = ember_store_merge(r->api->store, sel, from, to, EMBER_VT_CPU_SAMPLES, &samples);
    if (rc == 0) rc = cpu_from_samples(&p, samples);
  }
  if (rc != 0) {
    ember_profile_free(p);
    return fail_internal(r, "merging profiles from the store", rc);
  }
  *out = p;
  return 0;
}

/* load_profile over every `version` parameter (one, or none = any), merged:
 * the series of several versions are disjoint, so the sum is exact. */
static unsigned load_versions(req_t *r, const ember_store_selector_t *sel, int64_t from, int64_t to,
                              api_type_t type, ember_profile_t **out) {
  ember_profile_t *acc = NULL;
  size_t nv = 0;
  for (size_t i = 0; i < r->nparams; i++) {
    if (strcmp(r->params[i].key, "version") != 0) continue;
    if (nv++ == 0) continue; /* the first is sel->version */
    bool again = false;      /* a version given twice counts once */
    for (size_t j = 0; j < i && !again; j++)
      again = strcmp(r->params[j].key, "version") == 0 &&
              strcmp(r->params[j].value, r->params[i].value) == 0;
    if (again) continue;
    ember_store_selector_t one = *sel;
    one.version = r->params[i].value;
    ember_profile_t *p = NULL;
    unsigned st = load_profile(r, &one, from, to, type, &p);
    if (st == 0 && acc == NULL) {
      st = load_profile(r, sel, from, to, type, &acc);
      if (st != 0) ember_profile_free(p);
    }
    if (st != 0) {
      ember_profile_free(acc);
      return st;
    }
    int rc = ember_profile_merge(acc, p);
    bool same = ember_profile_type(acc, 0) == ember_profile_type(p, 0);
    ember_profile_free(p);
    if (rc != 0 || !same) {
      ember_profile_free(acc);
      if (!same || rc == -EINVAL)
        return fail(r, 400,
                    "the versions' CPU data differ in kind (CPU time in some, only samples of "
                    "unknown period in others): ask for one version, or type=samples");
      return fail_internal(r, "merging the versions", rc);
    }
  }
  if (acc != NULL) {
    *out = acc;
    return 0;
  }
  return load_profile(r, sel, from, to, type, out);
}

static const char *vt_api_name(ember_value_type_t vt) {
  switch (vt) {
  case EMBER_VT_CPU_NS: return "cpu";
  case EMBER_VT_CPU_SAMPLES: return "samples";
  case EMBER_VT_ALLOC_OBJECTS: return "alloc_objects";
  case EMBER_VT_ALLOC_BYTES: return "alloc_bytes";
  }
  return "unknown";
}

static unsigned answer_top(req_t *r, const ember_profile_t *p, size_t limit) {
  ember_top_entry_t *e = NULL;
  size_t n = 0;
  int rc = ember_profile_top(p, 0, r->top_by, limit, &e, &n);
  if (rc != 0) return fail_internal(r, "ranking functions", rc);
  ember_value_type_t vt = ember_profile_type(p, 0);
  json_t *doc = json_object(), *fns = NULL;
  rc = doc ? 0 : -ENOMEM;
  /* The same type names as the tree and pprof ("alloc_space" for bytes). */
  if (rc == 0) rc = ember__json_set(doc, "type", json_string(ember_value_type_name(vt)));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0) rc = ember__json_set(doc, "total", json_integer(ember_profile_total(p, 0)));
  if (rc == 0 && (fns = jarray_in(doc, "functions")) == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(fns, o);
    if (rc == 0) rc = ember__json_set(o, "name", ember__json_str(e[i].name));
    if (rc == 0 && e[i].module != NULL)
      rc = ember__json_set(o, "module", ember__json_str(e[i].module));
    if (rc == 0) rc = ember__json_set(o, "self", json_integer(e[i].self));
    if (rc == 0) rc = ember__json_set(o, "total", json_integer(e[i].total));
  }
  unsigned st = rc == 0 ? answer_json(r, doc) : fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_top_free(e, n);
  return st;
}

static const struct {
  const char *name, *ext;
} formats[] = {{"tree", "json"},
               {"pprof", "pb.gz"},
               {"folded", "folded"},
               {"speedscope", "speedscope.json"},
               {"top", "json"}};
enum { FMT_TREE, FMT_PPROF, FMT_FOLDED, FMT_SPEEDSCOPE, FMT_TOP };

/* sort=self|total, for format=top. */
static unsigned parse_sort(req_t *r) {
  const char *v = param(r, "sort");
  r->top_by = EMBER_TOP_BY_SELF;
  if (v == NULL || strcmp(v, "self") == 0) return 0;
  if (strcmp(v, "total") == 0) {
    r->top_by = EMBER_TOP_BY_TOTAL;
    return 0;
  }
  return fail(r, 400, "parameter \"sort\": \"%.64s\" is not an order; use self or total", v);
}

static unsigned parse_format(req_t *r, size_t *out) {
  const char *fv = param(r, "format");
  *out = FMT_TREE;
  if (fv == NULL) return 0;
  for (size_t fmt = 0; fmt < sizeof formats / sizeof formats[0]; fmt++) {
    if (strcmp(fv, formats[fmt].name) == 0) {
      *out = fmt;
      return 0;
    }
  }
  return fail(r, 400,
              "parameter \"format\": \"%.64s\" is not a format; use tree, pprof, folded, "
              "speedscope or top",
              fv);
}

/* Answer with profile `p` (one value type) in format `fmt`. */
static unsigned answer_profile(req_t *r, const ember_profile_t *p, size_t fmt, uint64_t max_nodes,
                               uint64_t limit, const char *name) {
  const char *tname = vt_api_name(ember_profile_type(p, 0));
  snprintf(r->disposition, sizeof r->disposition, "%s; filename=\"%s-%s.%s\"",
           fmt == FMT_PPROF ? "attachment" : "inline", name, tname, formats[fmt].ext);
  int rc = 0;
  switch (fmt) {
  case FMT_TREE: {
    ember_tree_opts_t o = {.vi = 0, .max_nodes = (size_t)max_nodes};
    rc = ember_export_tree(p, &o, &r->body);
    r->ctype = "application/json";
    break;
  }
  case FMT_PPROF:
    rc = ember_export_pprof(p, &r->body);
    r->ctype = ember_format_content_type(EMBER_FORMAT_PPROF);
    break;
  case FMT_FOLDED:
    rc = ember_export_folded(p, 0, &r->body);
    r->ctype = ember_format_content_type(EMBER_FORMAT_FOLDED);
    break;
  case FMT_SPEEDSCOPE:
    rc = ember_export_speedscope(p, &r->body);
    r->ctype = ember_format_content_type(EMBER_FORMAT_SPEEDSCOPE);
    break;
  default: return answer_top(r, p, (size_t)limit);
  }
  return rc == 0 ? (r->status = 200) : fail_internal(r, "exporting the profile", rc);
}

static unsigned h_profile(req_t *r) {
  static const char *const allowed[] = {"worker", "version", "host",      "actor", "from", "to",
                                        "type",   "format",  "max_nodes", "limit", "sort", NULL};
  int64_t from, to;
  uint64_t max_nodes, limit;
  api_type_t type;
  size_t fmt;
  ember_store_selector_t sel;
  /* version may be given several times: the union of those versions. */
  unsigned st = check_params_rep(r, allowed, "version");
  if (st == 0) st = parse_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) st = parse_type(r, &type);
  if (st == 0) st = parse_u64_param(r, "max_nodes", 2000, 0, 1000000, &max_nodes);
  if (st == 0) st = parse_u64_param(r, "limit", 50, 1, 100000, &limit);
  if (st == 0) st = parse_format(r, &fmt);
  if (st == 0) st = parse_sort(r);
  if (st != 0) return st;
  parse_selector(r, "", NULL, &sel);
  ember_profile_t *p = NULL;
  st = load_versions(r, &sel, from, to, type, &p);
  if (st != 0) return st;
  st = answer_profile(r, p, fmt, max_nodes, limit, "ember");
  ember_profile_free(p);
  return st;
}

static unsigned h_diff(req_t *r) {
  static const char *const allowed[] = {
      "worker",    "version",    "host",    "actor",    "from",    "to",    "type", "max_nodes",
      "vs.worker", "vs.version", "vs.host", "vs.actor", "vs.from", "vs.to", NULL};
  int64_t from, to, vfrom, vto;
  uint64_t max_nodes;
  api_type_t type;
  ember_store_selector_t sel, vsel;
  unsigned st = check_params(r, allowed);
  if (st == 0) st = parse_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) {
    /* vs.from/vs.to default to the base's own text, so "-1h" means the
     * same instant in both. */
    const char *bf = param(r, "from"), *bt = param(r, "to");
    st = parse_range(r, "vs.from", "vs.to", bf ? bf : "-1h", bt ? bt : "now", &vfrom, &vto);
  }
  if (st == 0) st = parse_type(r, &type);
  if (st == 0) st = parse_u64_param(r, "max_nodes", 2000, 0, 1000000, &max_nodes);
  if (st != 0) return st;
  parse_selector(r, "", NULL, &sel);
  parse_selector(r, "vs.", &sel, &vsel);
  ember_profile_t *a = NULL, *b = NULL;
  st = load_profile(r, &sel, from, to, type, &a);
  if (st == 0) st = load_profile(r, &vsel, vfrom, vto, type, &b);
  if (st == 0) {
    if (ember_profile_type(a, 0) != ember_profile_type(b, 0)) {
      st = fail(r, 400,
                "parameter \"type\": one selection has CPU time and the other only samples "
                "without a known period; compare them with type=samples");
    } else {
      ember_tree_diff_opts_t o = {.base_vi = 0, .vs_vi = 0, .max_nodes = (size_t)max_nodes};
      int rc = ember_export_tree_diff(a, b, &o, &r->body);
      r->ctype = "application/json";
      st = rc == 0 ? (r->status = 200) : fail_internal(r, "exporting the diff", rc);
    }
  }
  ember_profile_free(a);
  ember_profile_free(b);
  return st;
}

static unsigned h_metrics(req_t *r) {
  static const char *const none[] = {NULL};
  unsigned st = check_params(r, none);
  if (st != 0) return st;
  r->ctype = "text/plain; version=0.0.4";
  r->status = 200;
  if (r->api->metrics == NULL) return 200;
  int rc = ember_metrics_render(r->api->metrics, &r->body);
  return rc == 0 ? 200 : fail_internal(r, "rendering metrics", rc);
}

/* --- on-demand sessions (collector/sessions.h) --- */

static unsigned sessions_error(req_t *r, int rc, const char *err, const char *what) {
  switch (rc) {
  case -EINVAL: return fail(r, 400, "%s", err);
  case EMBER_ENOTFOUND: return fail(r, 404, "%s", err);
  case -EAGAIN: return fail(r, 429, "%s", err);
  case -EALREADY: return fail(r, 409, "%s", err);
  case EMBER_EKAFKA: return fail(r, 503, "%s", err);
  case -ENOKEY: return fail(r, 503, "%s", err);
  default: return fail_internal(r, what, rc);
  }
}

/* A string field: absent and null are "not set"; anything else must be a
 * non-empty string. */
static unsigned body_str(req_t *r, const json_t *doc, const char *key, const char **out) {
  const json_t *v = json_object_get(doc, key);
  *out = NULL;
  if (v == NULL || json_is_null(v)) return 0;
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 256 ||
      strlen(json_string_value(v)) != json_string_length(v))
    return fail(r, 400, "field \"%s\" must be a non-empty string of at most 256 bytes", key);
  *out = json_string_value(v);
  return 0;
}

/* A whole-number field from min up; larger than UINT32_MAX reads as
 * UINT32_MAX so the cap check names it. */
static unsigned body_u32(req_t *r, const json_t *doc, const char *key, uint32_t dflt, uint32_t min,
                         uint32_t *out) {
  const json_t *v = json_object_get(doc, key);
  *out = dflt;
  if (v == NULL || json_is_null(v)) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min)
    return fail(r, 400, "field \"%s\" must be a whole number of at least %" PRIu32, key, min);
  json_int_t n = json_integer_value(v);
  *out = n > (json_int_t)UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  return 0;
}

static unsigned h_session_create(req_t *r) {
  static const char *const fields[] = {"worker", "version",     "actor", "host", "instances",
                                       "type",   "duration_ms", "hz",    NULL};
  if (r->in_too_big) return fail(r, 413, "the request body is larger than %zu bytes", MAX_BODY);
  if (r->in == NULL || r->in_len == 0)
    return fail(r, 400, "the request needs a JSON body, e.g. {\"worker\": \"api\"}");
  json_error_t je;
  json_t *doc = json_loadb(r->in, r->in_len, JSON_REJECT_DUPLICATES, &je);
  if (doc == NULL)
    return fail(r, 400, "the body is not valid JSON: %.200s (line %d, column %d)", je.text, je.line,
                je.column);
  unsigned st = 0;
  ember__csession_req_t q = {0};
  if (!json_is_object(doc)) {
    st = fail(r, 400, "the body must be a JSON object, e.g. {\"worker\": \"api\"}");
    goto cleanup;
  }
  const char *key;
  json_t *val;
  json_object_foreach(doc, key, val) {
    bool known = false;
    for (size_t i = 0; fields[i] != NULL && !known; i++) known = strcmp(fields[i], key) == 0;
    if (!known) {
      st = fail(r, 400,
                "unknown field \"%.64s\": a session takes worker, version, actor, host, "
                "instances, type, duration_ms and hz",
                key);
      goto cleanup;
    }
  }
  const char *type = NULL;
  st = body_str(r, doc, "worker", &q.worker);
  if (st == 0) st = body_str(r, doc, "version", &q.version);
  if (st == 0) st = body_str(r, doc, "actor", &q.actor);
  if (st == 0) st = body_str(r, doc, "host", &q.host);
  if (st == 0) st = body_str(r, doc, "type", &type);
  if (st == 0) st = body_u32(r, doc, "instances", 0, 1, &q.instances);
  /* 0: the defaults, which the sessions keep within their caps. */
  if (st == 0) st = body_u32(r, doc, "duration_ms", 0, 1, &q.duration_ms);
  if (st == 0) st = body_u32(r, doc, "hz", 0, 1, &q.hz);
  if (st != 0) goto cleanup;
  if (q.worker == NULL && q.actor == NULL) {
    st = fail(r, 400, "field \"worker\" or \"actor\" is required: which isolates to profile");
    goto cleanup;
  }
  q.type = EMBER_SESSION_CPU;
  if (type != NULL && strcmp(type, "memory") == 0) {
    q.type = EMBER_SESSION_MEMORY;
  } else if (type != NULL && strcmp(type, "cpu") != 0) {
    st = fail(r, 400, "field \"type\": \"%.64s\" is not a session type; use cpu or memory", type);
    goto cleanup;
  }
  char err[400] = "";
  json_t *out = NULL;
  int rc = ember__csessions_create(r->api->sessions, &q, r->now_ns, &out, err, sizeof err);
  if (rc != 0) {
    st = sessions_error(r, rc, err, "starting the session");
    goto cleanup;
  }
  st = answer_json(r, out);
  json_decref(out);
  if (st == 200) st = r->status = 201;
cleanup:
  json_decref(doc);
  return st;
}

static unsigned h_session_list(req_t *r) {
  static const char *const none[] = {NULL};
  unsigned st = check_params(r, none);
  if (st != 0) return st;
  json_t *doc = NULL;
  int rc = ember__csessions_list(r->api->sessions, r->now_ns, &doc);
  if (rc != 0) return fail_internal(r, "listing sessions", rc);
  st = answer_json(r, doc);
  json_decref(doc);
  return st;
}

static unsigned h_session_get(req_t *r, const char *id) {
  static const char *const none[] = {NULL};
  unsigned st = check_params(r, none);
  if (st != 0) return st;
  json_t *doc = NULL;
  int rc = ember__csessions_get(r->api->sessions, id, r->now_ns, &doc);
  if (rc == EMBER_ENOTFOUND)
    return fail(r, 404,
                "no session %s: unknown, or finished longer ago than session.keep, or started "
                "before the collector restarted",
                id);
  if (rc != 0) return fail_internal(r, "reading the session", rc);
  st = answer_json(r, doc);
  json_decref(doc);
  return st;
}

static unsigned h_session_cancel(req_t *r, const char *id) {
  char err[300] = "";
  json_t *doc = NULL;
  int rc = ember__csessions_cancel(r->api->sessions, id, r->now_ns, &doc, err, sizeof err);
  if (rc == EMBER_ENOTFOUND) return fail(r, 404, "no session %s", id);
  if (rc != 0) return sessions_error(r, rc, err, "cancelling the session");
  unsigned st = answer_json(r, doc);
  json_decref(doc);
  return st;
}

/* The merged result of a session in one value type, as load_profile. */
static unsigned h_session_profile(req_t *r, const char *id) {
  static const char *const allowed[] = {"type", "format", "max_nodes", "limit", "sort", NULL};
  static const ember_value_type_t vts[] = {EMBER_VT_CPU_NS, EMBER_VT_CPU_SAMPLES,
                                           EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES};
  uint64_t max_nodes, limit;
  api_type_t type;
  size_t fmt;
  unsigned st = check_params(r, allowed);
  if (st == 0) st = parse_type(r, &type);
  if (st == 0) st = parse_u64_param(r, "max_nodes", 2000, 0, 1000000, &max_nodes);
  if (st == 0) st = parse_u64_param(r, "limit", 50, 1, 100000, &limit);
  if (st == 0) st = parse_format(r, &fmt);
  if (st == 0) st = parse_sort(r);
  if (st != 0) return st;
  char err[300] = "";
  ember_session_type_t stype = EMBER_SESSION_CPU;
  int rc = ember__csessions_result_ready(r->api->sessions, id, &stype, err, sizeof err);
  if (rc == -EAGAIN) return fail(r, 409, "%s", err);
  bool known = rc == 0;
  if (rc != 0 && rc != EMBER_ENOTFOUND) return fail_internal(r, "reading the session", rc);
  if (param(r, "type") == NULL && stype == EMBER_SESSION_MEMORY) type = T_ALLOC_BYTES;
  ember_profile_t *p = NULL, *samples = NULL;
  ember_store_session_info_t info = {0};
  rc = ember_store_session_merge(r->api->store, id, vts[type], &p, &info);
  if (rc == 0 && type == T_CPU && ember_profile_nstacks(p) == 0) {
    rc = ember_store_session_merge(r->api->store, id, EMBER_VT_CPU_SAMPLES, &samples, NULL);
    if (rc == 0) rc = cpu_from_samples(&p, samples);
  }
  if (rc != 0) {
    ember_profile_free(p);
    return fail_internal(r, "merging the session's results", rc);
  }
  /* A session this instance does not know (another instance's, or from
   * before a restart) is served when the store holds its results. */
  if (!known && info.results == 0) {
    ember_profile_free(p);
    return fail(r, 404, "no session %s and no stored results for it", id);
  }
  st = answer_profile(r, p, fmt, max_nodes, limit, "ember-session");
  ember_profile_free(p);
  return st;
}

static bool id_ok(const char *id, size_t len) {
  if (len == 0 || len > 128) return false;
  for (size_t i = 0; i < len; i++) {
    char ch = id[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          ch == '-' || ch == '_'))
      return false;
  }
  return true;
}

/* /api/v1/sessions[/ID[/profile|/cancel]]; false when the path is not one. */
static bool route_sessions(req_t *r) {
  static const char prefix[] = "/api/v1/sessions";
  const char *rest = r->url + sizeof prefix - 1;
  if (strncmp(r->url, prefix, sizeof prefix - 1) != 0 || (*rest != '\0' && *rest != '/'))
    return false;
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  bool post = strcmp(r->method, "POST") == 0;
  if (r->api->sessions == NULL) {
    fail(r, 503, "sessions are not available on this server (no Kafka producer)");
    return true;
  }
  ember__http_args(r->q, collect_param, r);
  if (*rest == '\0' || strcmp(rest, "/") == 0) {
    r->allow = "GET, HEAD, POST";
    if (post)
      h_session_create(r);
    else if (get)
      h_session_list(r);
    else
      fail(r, 405, "method %.16s not allowed: use GET or POST", r->method);
    return true;
  }
  rest++;
  const char *slash = strchr(rest, '/');
  size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
  char id[129];
  if (!id_ok(rest, idlen)) {
    fail(r, 404, "no session %.*s: session ids are 1 to 128 letters, digits, - and _",
         (int)(idlen > 64 ? 64 : idlen), rest);
    return true;
  }
  memcpy(id, rest, idlen);
  id[idlen] = '\0';
  const char *sub = slash ? slash : "";
  if (sub[0] == '\0') {
    if (get)
      h_session_get(r, id);
    else
      fail(r, 405, "method %.16s not allowed: use GET", r->method);
  } else if (strcmp(sub, "/profile") == 0) {
    if (get)
      h_session_profile(r, id);
    else
      fail(r, 405, "method %.16s not allowed: use GET", r->method);
  } else if (strcmp(sub, "/cancel") == 0) {
    r->allow = "POST";
    if (post)
      h_session_cancel(r, id);
    else
      fail(r, 405, "method %.16s not allowed: use POST", r->method);
  } else {
    fail(r, 404, "no such path: %.128s (see docs/api.md, Sessions)", r->url);
  }
  return true;
}

typedef struct route {
  const char *path;
  unsigned (*fn)(req_t *r);
} route_t;

static const route_t routes[] = {
    {"/metrics", h_metrics},          {"/api/v1/workers", h_workers},
    {"/api/v1/versions", h_versions}, {"/api/v1/hosts", h_hosts},
    {"/api/v1/actors", h_actors},     {"/api/v1/series", h_series},
    {"/api/v1/timeline", h_timeline}, {"/api/v1/profile", h_profile},
    {"/api/v1/diff", h_diff},         {"/api/v1/targets", h_targets},
};

/* ------------------------------------------------------------- server -- */

/* Compare in time that depends only on the token's length, so a client
 * cannot find the token byte by byte from response times. */
static bool token_ok(const ember__api_t *api, const char *hdr) {
  if (hdr == NULL || strncasecmp(hdr, "Bearer ", 7) != 0) return false;
  const char *got = hdr + 7;
  size_t glen = strlen(got);
  volatile unsigned char diff = glen != api->token_len;
  for (size_t i = 0; i < api->token_len; i++)
    diff |= (unsigned char)(api->token[i] ^ (i < glen ? got[i] : 0));
  return diff == 0;
}

/* The dashboard: / is its page, /ui/NAME its other files. They are code,
 * not data, so they are served without the token: the page asks for the
 * token itself and sends it with its API calls. */
static bool route_ui(req_t *r) {
  const char *name = NULL;
  if (strcmp(r->url, "/") == 0 || strcmp(r->url, "/index.html") == 0) {
    name = "index.html";
  } else if (strncmp(r->url, "/ui/", 4) == 0) {
    name = r->url + 4;
  } else {
    return false;
  }
  for (const ember__ui_asset_t *a = ember__ui_assets; a->name != NULL; a++) {
    if (strcmp(a->name, name) != 0) continue;
    const char *inm = ember__http_header(r->q, "If-None-Match");
    r->asset = a;
    r->status = inm != NULL && strstr(inm, a->etag) != NULL ? 304 : 200;
    r->ctype = a->ctype;
    return true;
  }
  fail(r, 404, "no such dashboard file: %.128s", r->url);
  return true;
}

/* Sent with the dashboard's files: they may load only from this server,
 * in no frame, and the browser must not guess types. */
static void ui_headers(ember__http_answer_t *a, const ember__ui_asset_t *asset) {
  ember__http_answer_header(a, "ETag", asset->etag);
  ember__http_answer_header(a, "Cache-Control", "no-cache");
  ember__http_answer_header(a, "X-Content-Type-Options", "nosniff");
  ember__http_answer_header(a, "Referrer-Policy", "no-referrer");
  ember__http_answer_header(a, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                            "base-uri 'none'; frame-ancestors 'none'");
}

/* Hand the handler's answer to the layer. */
static void put_answer(req_t *r, ember__http_answer_t *a) {
  a->status = r->status;
  a->ctype = r->ctype;
  a->allow = r->allow;
  if (r->asset != NULL && r->status < 400) {
    a->fixed = r->asset->data;
    a->fixed_len = r->asset->len;
    ui_headers(a, r->asset);
  } else if (r->status < 300) {
    if (r->fixed_body != NULL) {
      a->fixed = r->fixed_body;
      a->fixed_len = strlen(r->fixed_body);
    } else {
      a->body = r->body;
      ember_buf_init(&r->body, 0);
    }
    if (r->disposition[0] != '\0')
      ember__http_answer_header(a, "Content-Disposition", r->disposition);
  } else {
    snprintf(a->err, sizeof a->err, "%s", r->err);
    if (r->status == 401) ember__http_answer_header(a, "WWW-Authenticate", "Bearer");
  }
}

/* The methods a path takes, for the Allow header of a 405 that is
 * answered before the path is routed. */
static const char *allow_for(const char *url) {
  static const char prefix[] = "/api/v1/sessions";
  if (strncmp(url, prefix, sizeof prefix - 1) == 0) {
    const char *rest = url + sizeof prefix - 1;
    size_t n = strlen(rest);
    if (n == 0 || strcmp(rest, "/") == 0) return "GET, HEAD, POST";
    if (n > 7 && rest[0] == '/' && strcmp(rest + n - 7, "/cancel") == 0) return "POST";
  }
  return "GET, HEAD";
}

static void route(req_t *r) {
  ember__api_t *api = r->api;
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  if (strcmp(r->url, "/healthz") == 0 && get) {
    char why[400];
    if (api->ready && !api->ready(api->ready_ctx, why, sizeof why)) {
      fail(r, 503, "not ready: %s", why);
      return;
    }
    r->status = 200;
    r->ctype = "text/plain";
    r->fixed_body = "ok\n";
    return;
  }
  if (get && route_ui(r)) return;
  if (!get && strcmp(r->method, "POST") != 0) {
    r->allow = allow_for(r->url);
    fail(r, 405, "method %.16s not allowed: use %s", r->method, r->allow);
    return;
  }
  if (api->token != NULL && !token_ok(api, ember__http_header(r->q, "Authorization"))) {
    fail(r, 401, "missing or wrong bearer token: send Authorization: Bearer <api.token>");
    return;
  }
  if (route_sessions(r)) return;
  if (!get) {
    fail(r, 405, "method %.16s not allowed: use GET", r->method);
    return;
  }
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (strcmp(r->url, routes[i].path) == 0) {
      ember__http_args(r->q, collect_param, r);
      routes[i].fn(r);
      return;
    }
  }
  fail(r, 404, "no such path: %.128s (the API is under /api/v1/, see docs/api.md)", r->url);
}

/* The layer's handler: one request, answered into `a`. */
static void serve(void *ctx, ember__http_req_t *q, ember__http_answer_t *a) {
  ember__api_t *api = ctx;
  /* On the stack (about 1.5 KiB), so that even a failing allocator gets
   * an answer. */
  req_t r = {.api = api,
             .q = q,
             .url = ember__http_url(q),
             .method = ember__http_method(q),
             .now_ns = ember__http_now_ns(q)};
  r.body = a->body;
  ember_buf_init(&a->body, 0);
  r.in = ember__http_body(q, &r.in_len, &r.in_too_big);
  route(&r);
  put_answer(&r, a);
  ember_buf_free(&r.body);
}

int ember__api_start(const ember__api_opts_t *opts, ember__api_t **out, char *errbuf,
                     size_t errbuf_size) {
  char dummy[8];
  if (errbuf == NULL || errbuf_size == 0) {
    errbuf = dummy;
    errbuf_size = sizeof dummy;
  }
  errbuf[0] = '\0';
  if (opts == NULL || out == NULL || opts->store == NULL || opts->threads > EMBER__HTTP_MAX_THREADS)
    return -EINVAL;
  const char *listen = opts->listen ? opts->listen : DEFAULT_LISTEN;
  ember__api_t *api = ember_calloc(1, sizeof *api);
  if (api == NULL) return -ENOMEM;
  api->store = opts->store;
  api->metrics = opts->metrics;
  api->registry = opts->registry;
  api->sessions = opts->sessions;
  api->ready = opts->ready;
  api->ready_ctx = opts->ready_ctx;
  api->max_response = opts->max_response ? opts->max_response : EMBER__HTTP_DEFAULT_RESPONSE;
  if (opts->token != NULL && opts->token[0] != '\0') {
    api->token = ember_strdup(opts->token);
    if (api->token == NULL) {
      ember_free(api);
      return -ENOMEM;
    }
    api->token_len = strlen(api->token);
  }
  unsigned threads = opts->threads ? opts->threads : 2;
  ember__http_opts_t ho = {.listen = listen,
                           .listen_key = "api.listen",
                           .log = LOG,
                           .metric_prefix = "ember_api",
                           .metrics = opts->metrics,
                           .threads = threads,
                           .max_connections = opts->max_connections,
                           .max_per_ip = opts->max_per_ip,
                           .request_timeout_ms = opts->request_timeout_ms,
                           .allowed_hosts = opts->allowed_hosts,
                           .hosts_key = "api.allowed_hosts",
                           .max_body = MAX_BODY,
                           .max_response = api->max_response,
                           .handler = serve,
                           .ctx = api};
  int rc = ember__http_start(&ho, &api->http, errbuf, errbuf_size);
  if (rc != 0) {
    ember_free(api->token);
    ember_free(api);
    return rc;
  }
  EMBER_INFO(LOG, "serving the HTTP API on %s (port %u, %u threads%s)", listen,
             ember__http_port(api->http), threads, api->token ? ", bearer token required" : "");
  *out = api;
  return 0;
}

uint16_t ember__api_port(const ember__api_t *api) { return api ? ember__http_port(api->http) : 0; }

void ember__api_stop(ember__api_t *api) {
  if (api == NULL) return;
  ember__http_stop(api->http);
  ember_free(api->token);
  ember_free(api);
}
