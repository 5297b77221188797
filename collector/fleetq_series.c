/* Fleet queries over series: the series list and the CPU timelines of the
 * whole fleet, merged from this store and the peers' local answers
 * (fleetq.h). Series are matched by their labels: a series id is one
 * store's, so a fleet answer keeps this store's id and gives 0 to series
 * only peers hold. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fleetq.h"
#include "ember/log.h"

#define NS_PER_MS 1000000LL

static int label_cmp(const char *a, const char *b) {
  if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

int ember__fleetq_labels_cmp(const ember_labels_t *x, const ember_labels_t *y) {
  int c = label_cmp(x->worker, y->worker);
  if (c == 0) c = label_cmp(x->version, y->version);
  if (c == 0) c = label_cmp(x->host, y->host);
  if (c == 0) c = label_cmp(x->actor, y->actor);
  return c;
}

/* A label of a peer's JSON series: a string or null; -EINVAL otherwise. */
static int json_label(const json_t *o, const char *key, const char **out) {
  const json_t *v = json_object_get(o, key);
  *out = NULL;
  if (v == NULL || json_is_null(v)) return 0;
  if (!json_is_string(v)) return -EINVAL;
  char *d = ember_strdup(json_string_value(v));
  if (d == NULL) return -ENOMEM;
  *out = d;
  return 0;
}

static int json_labels(const json_t *o, ember_labels_t *l) {
  memset(l, 0, sizeof *l);
  int rc = json_label(o, "worker", &l->worker);
  if (rc == 0) rc = json_label(o, "version", &l->version);
  if (rc == 0) rc = json_label(o, "host", &l->host);
  if (rc == 0) rc = json_label(o, "actor", &l->actor);
  return rc;
}

static void labels_free(ember_labels_t *l) {
  ember_free((char *)(uintptr_t)l->worker);
  ember_free((char *)(uintptr_t)l->version);
  ember_free((char *)(uintptr_t)l->host);
  ember_free((char *)(uintptr_t)l->actor);
  memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------ series -- */

typedef struct series_vec {
  ember_store_series_t *v;
  size_t n, cap;
} series_vec_t;

static int vec_push(series_vec_t *s, const ember_store_series_t *x) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    ember_store_series_t *v = ember_realloc(s->v, cap * sizeof *v);
    if (v == NULL) return -ENOMEM;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = *x;
  return 0;
}

static int series_cmp(const void *a, const void *b) {
  const ember_store_series_t *x = a, *y = b;
  int c = ember__fleetq_labels_cmp(&x->labels, &y->labels);
  if (c != 0) return c;
  return (x->id == 0) - (y->id == 0); /* this store's own first */
}

/* One peer's /api/v1/series answer into `out`; a sentence in `why` when it
 * is not one. */
static int peer_series(const ember__fetch_t *f, series_vec_t *out, char *why, size_t n) {
  json_error_t je;
  json_t *doc =
      json_loadb(f->body.data ? f->body.data : "", f->body.len, JSON_REJECT_DUPLICATES, &je);
  const json_t *arr = doc ? json_object_get(doc, "series") : NULL;
  if (!json_is_array(arr)) {
    snprintf(why, n, "its series list is not JSON with a \"series\" array");
    json_decref(doc);
    return EMBER_ECORRUPT;
  }
  int rc = 0;
  size_t i;
  const json_t *o;
  json_array_foreach(arr, i, o) {
    const json_t *fm = json_object_get(o, "first_ms"), *lm = json_object_get(o, "last_ms");
    if (!json_is_object(o) || !json_is_integer(fm) || !json_is_integer(lm)) {
      snprintf(why, n, "series %zu of its list lacks first_ms/last_ms", i);
      rc = EMBER_ECORRUPT;
      break;
    }
    ember_store_series_t s = {.id = 0};
    rc = json_labels(o, &s.labels);
    if (rc == 0) {
      json_int_t a = json_integer_value(fm), b = json_integer_value(lm);
      if (a < INT64_MIN / NS_PER_MS || a > INT64_MAX / NS_PER_MS || b < INT64_MIN / NS_PER_MS ||
          b > INT64_MAX / NS_PER_MS)
        rc = EMBER_ECORRUPT;
      s.first_ns = (int64_t)a * NS_PER_MS;
      s.last_ns = (int64_t)b * NS_PER_MS;
    }
    if (rc == 0) rc = vec_push(out, &s);
    if (rc != 0) {
      labels_free(&s.labels);
      if (rc != -ENOMEM) snprintf(why, n, "series %zu of its list has a bad label or time", i);
      break;
    }
  }
  json_decref(doc);
  return rc;
}

int ember__fleetq_series(const ember__fleetq_t *f, ember_store_t *store,
                         const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                         ember_store_series_t **out, size_t *count, char *partial,
                         size_t partial_size) {
  if (partial_size > 0) partial[0] = '\0';
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  int rc = ember__fleetq_query(&q, "/api/v1/series", sel, from_ns, to_ns);
  ember__fleet_ask_t a;
  if (rc == 0) rc = ember__fleetq_ask(f, from_ns, to_ns, q.data, &a);
  ember_buf_free(&q);
  if (rc != 0) return rc;
  series_vec_t all = {0};
  if (a.self) {
    ember_store_series_t *own = NULL;
    size_t n = 0;
    rc = ember_store_series(store, sel, from_ns, to_ns, &own, &n);
    for (size_t i = 0; i < n && rc == 0; i++) rc = vec_push(&all, &own[i]);
    if (rc == 0) {
      ember_free(own); /* the labels moved into `all` */
    } else {
      ember_store_series_free(own, n);
      all.n = 0; /* nothing pushed is owned twice: pushes stopped at the failure */
    }
  }
  for (size_t i = 0; i < a.n && rc == 0; i++) {
    if (a.fetch[i].status != 200) continue;
    char why[160] = "";
    int prc = peer_series(&a.fetch[i], &all, why, sizeof why);
    if (prc == -ENOMEM) {
      rc = prc;
    } else if (prc != 0) {
      ember__fleet_ask_failed(&a, i, why);
      EMBER_WARN_LIMITED("fleet", "collector %s sent a series list this one cannot read: %s",
                         a.ids[i], why);
    }
  }
  if (rc == 0 && all.n > 1) {
    qsort(all.v, all.n, sizeof *all.v, series_cmp);
    size_t k = 0;
    for (size_t i = 0; i < all.n; i++) {
      if (k > 0 && ember__fleetq_labels_cmp(&all.v[k - 1].labels, &all.v[i].labels) == 0) {
        ember_store_series_t *d = &all.v[k - 1];
        if (all.v[i].first_ns < d->first_ns) d->first_ns = all.v[i].first_ns;
        if (all.v[i].last_ns > d->last_ns) d->last_ns = all.v[i].last_ns;
        labels_free(&all.v[i].labels);
      } else {
        all.v[k++] = all.v[i];
      }
    }
    all.n = k;
  }
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  if (rc != 0) {
    ember_store_series_free(all.v, all.n);
    return rc;
  }
  *out = all.v;
  *count = all.n;
  return 0;
}

/* --------------------------------------------------------- timelines -- */

typedef struct tl_row {
  ember_labels_t labels;
  uint32_t id;
  int64_t *cpu; /* nb values */
} tl_row_t;

static int row_cmp(const void *a, const void *b) {
  const tl_row_t *x = a, *y = b;
  int c = ember__fleetq_labels_cmp(&x->labels, &y->labels);
  if (c != 0) return c;
  return (x->id == 0) - (y->id == 0);
}

static int add_sat(int64_t *dst, int64_t v) {
  return __builtin_add_overflow(*dst, v, dst) ? -ERANGE : 0;
}

/* An array of exactly nb integers into dst (added). */
static int add_array(int64_t *dst, const json_t *a, size_t nb) {
  if (!json_is_array(a) || json_array_size(a) != nb) return EMBER_ECORRUPT;
  for (size_t b = 0; b < nb; b++) {
    const json_t *v = json_array_get(a, b);
    if (!json_is_integer(v)) return EMBER_ECORRUPT;
    int rc = add_sat(&dst[b], (int64_t)json_integer_value(v));
    if (rc != 0) return rc;
  }
  return 0;
}

typedef struct rows {
  tl_row_t *v;
  size_t n, cap, nb;
} rows_t;

static int rows_push(rows_t *r, tl_row_t *x) {
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 64;
    tl_row_t *v = ember_realloc(r->v, cap * sizeof *v);
    if (v == NULL) return -ENOMEM;
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n++] = *x;
  return 0;
}

static void rows_free(rows_t *r) {
  for (size_t i = 0; i < r->n; i++) {
    labels_free(&r->v[i].labels);
    ember_free(r->v[i].cpu);
  }
  ember_free(r->v);
}

static int peer_timeline(const ember__fetch_t *f, rows_t *rows, int64_t *total, char *why,
                         size_t n) {
  json_error_t je;
  json_t *doc =
      json_loadb(f->body.data ? f->body.data : "", f->body.len, JSON_REJECT_DUPLICATES, &je);
  const json_t *arr = doc ? json_object_get(doc, "series") : NULL;
  int rc = 0;
  if (!json_is_array(arr) || json_is_true(json_object_get(doc, "truncated"))) {
    snprintf(why, n, "its timeline is not JSON with a whole \"series\" array");
    rc = EMBER_ECORRUPT;
  }
  if (rc == 0 && add_array(total, json_object_get(doc, "total_cpu_ns"), rows->nb) != 0) {
    snprintf(why, n, "its total_cpu_ns does not have %zu integers", rows->nb);
    rc = EMBER_ECORRUPT;
  }
  size_t i;
  const json_t *o;
  if (rc == 0) json_array_foreach(arr, i, o) {
      tl_row_t row = {.id = 0};
      row.cpu = ember_calloc(rows->nb ? rows->nb : 1, sizeof *row.cpu);
      rc = row.cpu != NULL ? json_labels(o, &row.labels) : -ENOMEM;
      if (rc == 0 && add_array(row.cpu, json_object_get(o, "cpu_ns"), rows->nb) != 0)
        rc = EMBER_ECORRUPT;
      if (rc == 0) rc = rows_push(rows, &row);
      if (rc != 0) {
        labels_free(&row.labels);
        ember_free(row.cpu);
        if (rc != -ENOMEM) snprintf(why, n, "series %zu of its timeline is malformed", i);
        break;
      }
    }
  json_decref(doc);
  return rc;
}

int ember__fleetq_timelines(const ember__fleetq_t *f, ember_store_t *store,
                            const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                            int64_t step_ns, size_t max_values, ember_store_timelines_t **out,
                            char *partial, size_t partial_size) {
  if (partial_size > 0) partial[0] = '\0';
  if (step_ns <= 0 || from_ns >= to_ns) return -EINVAL;
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  int rc = ember__fleetq_query(&q, "/api/v1/timeline", sel, from_ns, to_ns);
  if (rc == 0) rc = ember_buf_printf(&q, "&raw=1&step=%" PRId64 "ns", step_ns);
  ember__fleet_ask_t a;
  if (rc == 0) rc = ember__fleetq_ask(f, from_ns, to_ns, q.data, &a);
  ember_buf_free(&q);
  if (rc != 0) return rc;
  uint64_t span = (uint64_t)to_ns - (uint64_t)from_ns;
  rows_t rows = {.nb = (size_t)(span / (uint64_t)step_ns + (span % (uint64_t)step_ns != 0))};
  int64_t *total = ember_calloc(rows.nb ? rows.nb : 1, sizeof *total);
  if (total == NULL) rc = -ENOMEM;
  if (rc == 0 && a.self) {
    ember_store_timelines_t *own = NULL;
    rc = ember_store_cpu_timelines(store, sel, from_ns, to_ns, step_ns, max_values, &own);
    for (size_t b = 0; rc == 0 && b < rows.nb; b++) total[b] = own->total[b];
    for (size_t i = 0; rc == 0 && i < own->nseries; i++) {
      tl_row_t row = {.labels = own->series[i].labels, .id = own->series[i].id};
      row.cpu = ember_malloc((rows.nb ? rows.nb : 1) * sizeof *row.cpu);
      if (row.cpu == NULL) {
        rc = -ENOMEM;
        break;
      }
      memcpy(row.cpu, own->cpu + i * rows.nb, rows.nb * sizeof *row.cpu);
      rc = rows_push(&rows, &row);
      if (rc != 0) {
        ember_free(row.cpu);
        break;
      }
      memset(&own->series[i].labels, 0, sizeof own->series[i].labels); /* moved */
    }
    ember_store_timelines_free(own);
  }
  for (size_t i = 0; i < a.n && rc == 0; i++) {
    if (a.fetch[i].status != 200) continue;
    char why[160] = "";
    size_t before = rows.n;
    int64_t *t = ember_calloc(rows.nb ? rows.nb : 1, sizeof *t);
    int prc = t ? peer_timeline(&a.fetch[i], &rows, t, why, sizeof why) : -ENOMEM;
    for (size_t b = 0; prc == 0 && b < rows.nb; b++) prc = add_sat(&total[b], t[b]);
    ember_free(t);
    if (prc == -ENOMEM || prc == -ERANGE) {
      rc = prc;
    } else if (prc != 0) {
      /* Drop what this peer added: its answer counts whole or not at all. */
      for (size_t k = before; k < rows.n; k++) {
        labels_free(&rows.v[k].labels);
        ember_free(rows.v[k].cpu);
      }
      rows.n = before;
      ember__fleet_ask_failed(&a, i, why);
      EMBER_WARN_LIMITED("fleet", "collector %s sent a timeline this one cannot read: %s", a.ids[i],
                         why);
    }
  }
  /* Same labels: one row, values summed. */
  if (rc == 0 && rows.n > 1) {
    qsort(rows.v, rows.n, sizeof *rows.v, row_cmp);
    size_t k = 0;
    for (size_t i = 0; i < rows.n && rc == 0; i++) {
      if (k > 0 && ember__fleetq_labels_cmp(&rows.v[k - 1].labels, &rows.v[i].labels) == 0) {
        for (size_t b = 0; b < rows.nb && rc == 0; b++)
          rc = add_sat(&rows.v[k - 1].cpu[b], rows.v[i].cpu[b]);
        labels_free(&rows.v[i].labels);
        ember_free(rows.v[i].cpu);
      } else {
        rows.v[k++] = rows.v[i];
      }
    }
    if (rc != 0) k = rows.n; /* not reached past a failure: free what is left */
    rows.n = k;
  }
  if (rc == 0 && max_values > 0 && rows.n > 0 && rows.nb > max_values / rows.n) rc = EMBER_ETOOBIG;
  ember_store_timelines_t *t = NULL;
  if (rc == 0) {
    t = ember_calloc(1, sizeof *t);
    if (t != NULL) {
      t->nbuckets = rows.nb;
      t->total = total;
      total = NULL;
      t->nseries = rows.n;
      t->series = ember_calloc(rows.n ? rows.n : 1, sizeof *t->series);
      size_t cells = rows.n * rows.nb;
      t->cpu = ember_malloc((cells > 0 ? cells : 1) * sizeof *t->cpu);
    }
    if (t == NULL || t->series == NULL || t->cpu == NULL) rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < rows.n; i++) {
      t->series[i].id = rows.v[i].id;
      t->series[i].labels = rows.v[i].labels;
      memset(&rows.v[i].labels, 0, sizeof rows.v[i].labels);
      memcpy(t->cpu + i * rows.nb, rows.v[i].cpu, rows.nb * sizeof *t->cpu);
    }
    if (t != NULL && rc != 0) t->nseries = 0;
  }
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  rows_free(&rows);
  ember_free(total);
  if (rc != 0) {
    ember_store_timelines_free(t);
    return rc;
  }
  *out = t;
  return 0;
}
