/* The API's handlers for what is stored and running: /api/v1/workers,
 * /versions, /hosts, /actors, /series, /timeline (series and their CPU over
 * time, from the store) and /targets (the registry from ember.targets).
 * docs/api.md describes each; api_req.h the conventions they follow. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api_req.h"
#include "fleetq.h"
#include "ember/parse.h"
#include "json.h"

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

/* The series of `sel` with a window in [from, to): this store's, or the
 * fleet's (fleetq.h). */
static unsigned get_series_list(ember__req_t *r, const ember_store_selector_t *sel, int64_t from,
                                int64_t to, ember_store_series_t **s, size_t *n) {
  int rc;
  if (ember__req_fleet(r)) {
    char partial[sizeof r->partial];
    rc = ember__fleetq_series(r->env->fleetq, r->env->store, sel, from, to, s, n, partial,
                              sizeof partial);
    if (rc == 0) ember__req_partial(r, partial);
  } else {
    rc = ember_store_series(r->env->store, sel, from, to, s, n);
  }
  return rc == 0 ? 0 : ember__req_fail_internal(r, "reading series from the store", rc);
}

static unsigned h_workers(ember__req_t *r) {
  int64_t from, to;
  unsigned st = ember__req_check_params(r, range_params);
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st != 0) return st;
  ember_store_series_t *s = NULL;
  size_t n = 0, nw = 0;
  size_t *idx = NULL;
  json_t *doc = NULL;
  st = get_series_list(r, NULL, from, to, &s, &n);
  if (st != 0) return st;
  int rc = -ENOMEM;
  idx = series_sorted_by(s, n, L_WORKER, &nw);
  doc = ember__req_range_doc(from, to);
  json_t *workers = doc ? ember__req_jarray_in(doc, "workers") : NULL;
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
    if (rc == 0) rc = ember__json_set(w, "last_ms", json_integer(ember__req_ms(last)));
    i = j;
  }
cleanup:
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_free(idx);
  ember_store_series_free(s, n);
  return st;
}

/* /versions, /hosts, /actors: the distinct values of one label. */
static unsigned h_values(ember__req_t *r, int field) {
  int64_t from, to;
  ember_store_selector_t sel;
  unsigned st = ember__req_check_params(r, sel_params);
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  ember_store_series_t *s = NULL;
  size_t n = 0, nv = 0;
  st = get_series_list(r, &sel, from, to, &s, &n);
  if (st != 0) return st;
  int rc = -ENOMEM;
  size_t *idx = series_sorted_by(s, n, field, &nv);
  json_t *doc = ember__req_range_doc(from, to);
  json_t *values = doc ? ember__req_jarray_in(doc, "values") : NULL;
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
    if (rc == 0) rc = ember__json_set(v, "last_ms", json_integer(ember__req_ms(last)));
    i = j;
  }
cleanup:
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_free(idx);
  ember_store_series_free(s, n);
  return st;
}

static unsigned h_versions(ember__req_t *r) { return h_values(r, L_VERSION); }
static unsigned h_hosts(ember__req_t *r) { return h_values(r, L_HOST); }
static unsigned h_actors(ember__req_t *r) { return h_values(r, L_ACTOR); }

static unsigned h_series(ember__req_t *r) {
  int64_t from, to;
  ember_store_selector_t sel;
  unsigned st = ember__req_check_params(r, sel_params);
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  ember_store_series_t *s = NULL;
  size_t n = 0;
  st = get_series_list(r, &sel, from, to, &s, &n);
  if (st != 0) return st;
  int rc = -ENOMEM;
  json_t *doc = ember__req_range_doc(from, to);
  json_t *arr = doc ? ember__req_jarray_in(doc, "series") : NULL;
  if (arr != NULL) rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    if (rc == 0) rc = ember__json_set(o, "id", json_integer(s[i].id));
    if (rc == 0) rc = ember__req_set_labels(o, &s[i].labels);
    if (rc == 0) rc = ember__json_set(o, "first_ms", json_integer(ember__req_ms(s[i].first_ns)));
    if (rc == 0) rc = ember__json_set(o, "last_ms", json_integer(ember__req_ms(s[i].last_ns)));
  }
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_store_series_free(s, n);
  return st;
}

/* --- targets: the registry from ember.targets --- */

static const char *const target_params[] = {"worker", "version", "host", "actor", "from", NULL};

static unsigned h_targets(ember__req_t *r) {
  int64_t from;
  ember_store_selector_t sel;
  unsigned st = ember__req_check_params(r, target_params);
  if (st == 0) st = ember__req_time(r, "from", "-1h", &from);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  ember_target_record_t *t = NULL;
  size_t n = 0;
  int rc = r->env->registry ? ember__registry_list(r->env->registry, &sel, from, &t, &n) : 0;
  if (rc != 0) return ember__req_fail_internal(r, "listing targets", rc);
  json_t *doc = json_object();
  json_t *arr = doc ? ember__req_jarray_in(doc, "targets") : NULL;
  rc = arr != NULL ? 0 : -ENOMEM;
  if (rc == 0) rc = ember__json_set(doc, "from_ms", json_integer(ember__req_ms(from)));
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
    if (rc == 0) rc = ember__json_set(o, "seen_ms", json_integer(ember__req_ms(t[i].seen_ns)));
    if (rc == 0) rc = ember__json_set(o, "heap", json_boolean(t[i].heap));
  }
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember__registry_list_free(t, n);
  return st;
}

/* --- timeline --- */

typedef struct tl_series {
  size_t idx;  /* into the timelines' series */
  int64_t sum; /* for ranking */
} tl_series_t;

static int by_cpu_desc(const void *a, const void *b, void *ctx) {
  const ember_store_series_t *s = ctx;
  const tl_series_t *x = a, *y = b;
  if (x->sum != y->sum) return x->sum > y->sum ? -1 : 1;
  return s[x->idx].id < s[y->idx].id ? -1 : s[x->idx].id > s[y->idx].id;
}

static unsigned h_timeline(ember__req_t *r) {
  static const char *const allowed[] = {"worker", "version", "host",  "actor", "from",
                                        "to",     "step",    "limit", "raw",   NULL};
  int64_t from, to, step;
  uint64_t limit;
  ember_store_selector_t sel;
  unsigned st = ember__req_check_params(r, allowed);
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) st = ember__req_u64(r, "limit", 50, 1, 1000, &limit);
  /* raw=1 (a peer's local=1 question, fleetq.h): every series, unranked. */
  bool raw = false;
  if (st == 0 && ember__req_param(r, "raw") != NULL) {
    raw = strcmp(ember__req_param(r, "raw"), "1") == 0 && r->local;
    if (!raw)
      st = ember__req_fail(r, 400, "parameter \"raw\" is for peer collectors: raw=1 with local=1");
  }
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  uint64_t nb;
  st = ember__req_step(r, from, to, &step, &nb);
  if (st != 0) return st;

  /* One store read gives every series' own CPU and the total. */
  ember_store_timelines_t *tl = NULL;
  tl_series_t *ts = NULL;
  json_t *doc = NULL;
  int rc;
  if (ember__req_fleet(r)) {
    char partial[sizeof r->partial];
    rc = ember__fleetq_timelines(r->env->fleetq, r->env->store, &sel, from, to, step,
                                 EMBER__TIMELINE_MAX_CELLS, &tl, partial, sizeof partial);
    if (rc == 0) ember__req_partial(r, partial);
  } else {
    rc = ember_store_cpu_timelines(r->env->store, &sel, from, to, step, EMBER__TIMELINE_MAX_CELLS,
                                   &tl);
  }
  if (rc == EMBER_ETOOBIG)
    return ember__req_fail(r, 400,
                           "the selection holds more than %zu series, too many for one timeline "
                           "of %llu buckets: narrow the selector (worker, version, host, actor) "
                           "or raise step",
                           EMBER__TIMELINE_MAX_CELLS / (size_t)nb, (unsigned long long)nb);
  if (rc != 0) return ember__req_fail_internal(r, "reading the CPU timeline from the store", rc);
  size_t n = tl->nseries, nbk = tl->nbuckets;
  rc = -ENOMEM;
  ts = ember_calloc(n ? n : 1, sizeof *ts);
  if (ts == NULL) goto cleanup;
  for (size_t i = 0; i < n; i++) {
    const int64_t *cpu = tl->cpu + i * nbk;
    ts[i].idx = i;
    for (size_t b = 0; b < nbk; b++)
      ts[i].sum = ts[i].sum > INT64_MAX - cpu[b] ? INT64_MAX : ts[i].sum + cpu[b];
  }
  if (raw) limit = n;
  qsort_r(ts, n, sizeof *ts, by_cpu_desc, tl->series);

  doc = ember__req_range_doc(from, to);
  if (doc == NULL) goto cleanup;
  rc = ember__json_set(doc, "step_ms", json_integer(ember__req_ms(step)));
  if (rc == 0) rc = ember__json_set(doc, "total_cpu_ns", ember__req_int_array(tl->total, nbk));
  json_t *arr = NULL;
  if (rc == 0) {
    arr = ember__req_jarray_in(doc, "series");
    if (arr == NULL) rc = -ENOMEM;
  }
  for (size_t i = 0; i < n && i < limit && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    if (rc == 0) rc = ember__req_set_labels(o, &tl->series[ts[i].idx].labels);
    if (rc == 0)
      rc = ember__json_set(o, "cpu_ns", ember__req_int_array(tl->cpu + ts[i].idx * nbk, nbk));
  }
  if (rc == 0) rc = ember__json_set(doc, "truncated", json_boolean(n > limit));

cleanup:
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_free(ts);
  ember_store_timelines_free(tl);
  return st;
}

const ember__api_route_t ember__api_series_routes[] = {
    {"/api/v1/workers", 0, h_workers, NULL}, {"/api/v1/versions", 0, h_versions, NULL},
    {"/api/v1/hosts", 0, h_hosts, NULL},     {"/api/v1/actors", 0, h_actors, NULL},
    {"/api/v1/series", 0, h_series, NULL},   {"/api/v1/timeline", 0, h_timeline, NULL},
    {"/api/v1/targets", 0, h_targets, NULL}, {NULL, 0, NULL, NULL},
};
