/* Fleet queries over gauges (in-use heap): merges that keep each series'
 * latest window across stores instead of summing the stores' answers
 * (fleetq.h, "Gauges"). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fleetq.h"
#include "ember/buf.h"
#include "ember/log.h"

/* The most parts one peer answer may hold: one per series. */
#define GAUGE_MAX_PARTS (1u << 20)

int ember__fleetq_gauge_encode(ember_profile_t *const *parts, size_t n, ember_buf_t *out) {
  ember_buf_t one;
  ember_buf_init(&one, SIZE_MAX - 1);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    one.len = 0;
    rc = ember_codec_encode(parts[i], &one);
    if (rc == 0 && one.len > UINT32_MAX) rc = EMBER_ETOOBIG;
    if (rc != 0) break;
    uint8_t len[4] = {(uint8_t)(one.len >> 24), (uint8_t)(one.len >> 16), (uint8_t)(one.len >> 8),
                      (uint8_t)one.len};
    rc = ember_buf_append(out, len, sizeof len);
    if (rc == 0) rc = ember_buf_append(out, one.data, one.len);
  }
  ember_buf_free(&one);
  return rc;
}

int ember__fleetq_gauge_decode(const void *data, size_t len, const ember_codec_limits_t *lim,
                               ember_value_type_t vt, ember_profile_t ***out, size_t *count,
                               char *why, size_t why_size) {
  const uint8_t *p = data, *end = p + len;
  ember_profile_t **parts = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  while (p < end && rc == 0) {
    if (end - p < 4) {
      snprintf(why, why_size, "its gauge parts end inside a length");
      rc = EMBER_ECORRUPT;
      break;
    }
    size_t l = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
    p += 4;
    if (l > (size_t)(end - p) || n >= GAUGE_MAX_PARTS) {
      snprintf(why, why_size, "its gauge part %zu is cut short or one too many", n);
      rc = EMBER_ECORRUPT;
      break;
    }
    if (n == cap) {
      size_t c = cap ? cap * 2 : 16;
      ember_profile_t **g = ember_realloc(parts, c * sizeof *g);
      if (g == NULL) {
        rc = -ENOMEM;
        break;
      }
      parts = g;
      cap = c;
    }
    ember_profile_t *one = NULL;
    char err[200] = "";
    rc = ember_codec_decode(p, l, lim, &one, err, sizeof err);
    if (rc == 0 && (ember_profile_ntypes(one) != 1 || ember_profile_type(one, 0) != vt)) {
      snprintf(err, sizeof err, "it has another value type");
      rc = EMBER_ECORRUPT;
    }
    if (rc != 0) {
      ember_profile_free(one);
      if (rc != -ENOMEM) {
        snprintf(why, why_size, "its gauge part %zu does not decode: %s", n, err);
        rc = EMBER_ECORRUPT;
      }
      break;
    }
    parts[n++] = one;
    p += l;
  }
  if (rc != 0) {
    ember_store_gauge_latest_free(parts, n);
    return rc;
  }
  *out = parts;
  *count = n;
  return 0;
}

typedef struct part_ref {
  const ember_profile_t *p;
  int64_t start;
} part_ref_t;

static int part_cmp(const void *a, const void *b) {
  const part_ref_t *x = a, *y = b;
  int c = ember__fleetq_labels_cmp(ember_profile_labels(x->p), ember_profile_labels(y->p));
  if (c != 0) return c;
  /* Latest first within one label set. */
  return x->start > y->start ? -1 : x->start < y->start;
}

int ember__fleetq_gauge_sum(ember_profile_t *const *parts, size_t n,
                            const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                            ember_value_type_t vt, ember_profile_t **out) {
  part_ref_t *refs = ember_malloc((n ? n : 1) * sizeof *refs);
  ember_profile_t *acc = NULL;
  int rc = refs != NULL ? ember_profile_new(&vt, 1, &acc) : -ENOMEM;
  if (rc == 0 && sel != NULL) {
    ember_labels_t l = {
        .worker = sel->worker, .version = sel->version, .host = sel->host, .actor = sel->actor};
    rc = ember_profile_set_labels(acc, &l);
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    int64_t e;
    refs[i].p = parts[i];
    ember_profile_window(parts[i], &refs[i].start, &e);
  }
  if (rc == 0 && n > 1) qsort(refs, n, sizeof *refs, part_cmp);
  bool any = false;
  int64_t ws = from_ns, we = to_ns, period = 0;
  const ember_labels_t *set = NULL; /* the label set being read, and its latest start */
  int64_t latest = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    const ember_labels_t *l = ember_profile_labels(refs[i].p);
    if (set == NULL || ember__fleetq_labels_cmp(set, l) != 0) {
      set = l;
      latest = refs[i].start;
    }
    /* Within a label set only the parts of its latest start count. */
    if (refs[i].start != latest) continue;
    rc = ember_profile_merge(acc, refs[i].p);
    int64_t s, e;
    ember_profile_window(refs[i].p, &s, &e);
    int64_t pp = ember_profile_period(refs[i].p);
    if (!any) {
      ws = s;
      we = e;
      period = pp;
    } else {
      if (s < ws) ws = s;
      if (e > we) we = e;
      if (pp != period) period = 0;
    }
    any = true;
  }
  if (rc == 0) rc = ember_profile_set_window(acc, ws, we);
  if (rc == 0) ember_profile_set_period(acc, period);
  ember_free(refs);
  if (rc != 0) {
    ember_profile_free(acc);
    return rc;
  }
  *out = acc;
  return 0;
}

int ember__fleetq_gauge_merge(const ember__fleetq_t *f, ember_store_t *store,
                              const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                              ember_value_type_t vt, ember_profile_t **out, char *partial,
                              size_t partial_size) {
  if (partial_size > 0) partial[0] = '\0';
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  const char *raw = ember__fleetq_raw_name(vt);
  int rc = raw != NULL && ember_value_type_is_gauge(vt)
               ? ember__fleetq_query(&q, "/api/v1/profile", sel, from_ns, to_ns)
               : -EINVAL;
  if (rc == 0) rc = ember_buf_printf(&q, "&format=ember&raw=%s", raw);
  ember__fleet_ask_t a;
  if (rc == 0) rc = ember__fleetq_ask(f, from_ns, to_ns, q.data, &a);
  ember_buf_free(&q);
  if (rc != 0) return rc;
  ember_profile_t **all = NULL;
  size_t n = 0, cap = 0;
  if (a.self) {
    rc = ember_store_gauge_latest(store, sel, from_ns, to_ns, vt, &all, &n);
    cap = n;
  }
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  lim.max_message = f->o.max_body;
  for (size_t i = 0; i < a.n && rc == 0; i++) {
    if (a.fetch[i].status != 200) continue;
    ember_profile_t **parts = NULL;
    size_t np = 0;
    char why[256] = "";
    int drc = ember__fleetq_gauge_decode(a.fetch[i].body.data, a.fetch[i].body.len, &lim, vt,
                                         &parts, &np, why, sizeof why);
    if (drc == -ENOMEM) {
      rc = drc;
      break;
    }
    if (drc != 0) {
      ember__fleet_ask_failed(&a, i, why);
      EMBER_WARN_LIMITED("fleet", "collector %s sent gauge parts this one cannot read: %s",
                         a.ids[i], why);
      continue;
    }
    if (n + np > cap) {
      size_t c = n + np;
      ember_profile_t **g = ember_realloc(all, (c ? c : 1) * sizeof *g);
      if (g == NULL) {
        ember_store_gauge_latest_free(parts, np);
        rc = -ENOMEM;
        break;
      }
      all = g;
      cap = c;
    }
    for (size_t k = 0; k < np; k++) all[n++] = parts[k];
    ember_free(parts); /* the profiles moved into `all` */
  }
  ember_profile_t *acc = NULL;
  if (rc == 0) rc = ember__fleetq_gauge_sum(all, n, sel, from_ns, to_ns, vt, &acc);
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  ember_store_gauge_latest_free(all, n);
  if (rc != 0) return rc;
  *out = acc;
  return 0;
}

/* ---------------------------------------------------------- timelines -- */

typedef struct grow {
  ember_labels_t labels; /* owned */
  uint32_t id;
  int64_t *vals, *at; /* nb each */
} grow_t;

typedef struct grows {
  grow_t *v;
  size_t n, cap, nb;
} grows_t;

static void grow_clear(grow_t *r) {
  ember_free((char *)(uintptr_t)r->labels.worker);
  ember_free((char *)(uintptr_t)r->labels.version);
  ember_free((char *)(uintptr_t)r->labels.host);
  ember_free((char *)(uintptr_t)r->labels.actor);
  ember_free(r->vals);
  ember_free(r->at);
  memset(r, 0, sizeof *r);
}

static void grows_free(grows_t *g) {
  for (size_t i = 0; i < g->n; i++) grow_clear(&g->v[i]);
  ember_free(g->v);
  memset(g, 0, sizeof *g);
}

/* A new row (labels copied), its arrays uninitialised. */
static int grows_add(grows_t *g, const ember_labels_t *l, uint32_t id, grow_t **out) {
  if (g->n == g->cap) {
    size_t c = g->cap ? g->cap * 2 : 64;
    grow_t *v = ember_realloc(g->v, c * sizeof *v);
    if (v == NULL) return -ENOMEM;
    g->v = v;
    g->cap = c;
  }
  grow_t *r = &g->v[g->n];
  memset(r, 0, sizeof *r);
  r->id = id;
  r->vals = ember_malloc((g->nb ? g->nb : 1) * sizeof *r->vals);
  r->at = ember_malloc((g->nb ? g->nb : 1) * sizeof *r->at);
  const char *src[4] = {l->worker, l->version, l->host, l->actor};
  const char **dst[4] = {&r->labels.worker, &r->labels.version, &r->labels.host, &r->labels.actor};
  int rc = r->vals != NULL && r->at != NULL ? 0 : -ENOMEM;
  for (int k = 0; k < 4 && rc == 0; k++) {
    if (src[k] == NULL) continue;
    *dst[k] = ember_strdup(src[k]);
    if (*dst[k] == NULL) rc = -ENOMEM;
  }
  g->n++; /* counted so that grows_free frees it either way */
  *out = r;
  return rc;
}

static const char *json_label(const json_t *o, const char *key, bool *ok) {
  const json_t *v = json_object_get(o, key);
  if (v == NULL || json_is_null(v)) return NULL;
  if (!json_is_string(v)) *ok = false;
  return json_string_value(v);
}

/* An array of exactly nb integers into dst. */
static bool int_array(int64_t *dst, const json_t *a, size_t nb) {
  if (!json_is_array(a) || json_array_size(a) != nb) return false;
  for (size_t b = 0; b < nb; b++) {
    const json_t *v = json_array_get(a, b);
    if (!json_is_integer(v)) return false;
    dst[b] = (int64_t)json_integer_value(v);
  }
  return true;
}

static int peer_rows(const ember__fetch_t *f, grows_t *rows, char *why, size_t n) {
  json_error_t je;
  json_t *doc =
      json_loadb(f->body.data ? f->body.data : "", f->body.len, JSON_REJECT_DUPLICATES, &je);
  const json_t *arr = doc ? json_object_get(doc, "series") : NULL;
  int rc = 0;
  if (!json_is_array(arr)) {
    snprintf(why, n, "its heap timeline is not JSON with a \"series\" array");
    rc = EMBER_ECORRUPT;
  }
  size_t i;
  const json_t *o;
  if (rc == 0) json_array_foreach(arr, i, o) {
      bool ok = true;
      ember_labels_t l = {.worker = json_label(o, "worker", &ok),
                          .version = json_label(o, "version", &ok),
                          .host = json_label(o, "host", &ok),
                          .actor = json_label(o, "actor", &ok)};
      grow_t *r = NULL;
      rc = ok ? grows_add(rows, &l, 0, &r) : EMBER_ECORRUPT;
      if (rc == 0 && (!int_array(r->vals, json_object_get(o, "values"), rows->nb) ||
                      !int_array(r->at, json_object_get(o, "at_ns"), rows->nb)))
        rc = EMBER_ECORRUPT;
      if (rc != 0) {
        if (rc != -ENOMEM) snprintf(why, n, "series %zu of its heap timeline is malformed", i);
        break;
      }
    }
  json_decref(doc);
  return rc;
}

static int grow_cmp(const void *a, const void *b) {
  const grow_t *x = a, *y = b;
  int c = ember__fleetq_labels_cmp(&x->labels, &y->labels);
  if (c != 0) return c;
  return (x->id == 0) - (y->id == 0);
}

int ember__fleetq_gauge_timelines(const ember__fleetq_t *f, ember_store_t *store,
                                  const ember_store_selector_t *sel, ember_value_type_t vt,
                                  int64_t from_ns, int64_t to_ns, int64_t step_ns,
                                  size_t max_values, ember_store_gauge_timelines_t **out,
                                  char *partial, size_t partial_size) {
  if (partial_size > 0) partial[0] = '\0';
  const char *raw = ember__fleetq_raw_name(vt);
  if (step_ns <= 0 || from_ns >= to_ns || raw == NULL || !ember_value_type_is_gauge(vt))
    return -EINVAL;
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  int rc = ember__fleetq_query(&q, "/api/v1/heap/timeline", sel, from_ns, to_ns);
  if (rc == 0) rc = ember_buf_printf(&q, "&raw=%s&step=%" PRId64 "ns", raw, step_ns);
  ember__fleet_ask_t a;
  if (rc == 0) rc = ember__fleetq_ask(f, from_ns, to_ns, q.data, &a);
  ember_buf_free(&q);
  if (rc != 0) return rc;
  uint64_t span = (uint64_t)to_ns - (uint64_t)from_ns;
  grows_t rows = {.nb = (size_t)(span / (uint64_t)step_ns + (span % (uint64_t)step_ns != 0))};
  size_t nb = rows.nb;
  if (a.self) {
    ember_store_gauge_timelines_t *own = NULL;
    rc = ember_store_gauge_timelines(store, sel, vt, from_ns, to_ns, step_ns, max_values, &own);
    for (size_t i = 0; rc == 0 && i < own->nseries; i++) {
      grow_t *r = NULL;
      rc = grows_add(&rows, &own->series[i].labels, own->series[i].id, &r);
      if (rc != 0) break;
      memcpy(r->vals, own->values + i * nb, nb * sizeof *r->vals);
      memcpy(r->at, own->at_ns + i * nb, nb * sizeof *r->at);
    }
    ember_store_gauge_timelines_free(own);
  }
  for (size_t i = 0; i < a.n && rc == 0; i++) {
    if (a.fetch[i].status != 200) continue;
    char why[160] = "";
    size_t before = rows.n;
    int prc = peer_rows(&a.fetch[i], &rows, why, sizeof why);
    if (prc == -ENOMEM) {
      rc = prc;
    } else if (prc != 0) {
      /* This peer's answer counts whole or not at all. */
      for (size_t k = before; k < rows.n; k++) grow_clear(&rows.v[k]);
      rows.n = before;
      ember__fleet_ask_failed(&a, i, why);
      EMBER_WARN_LIMITED("fleet", "collector %s sent a heap timeline this one cannot read: %s",
                         a.ids[i], why);
    }
  }
  /* One row per label set: per bucket the latest window's value, two
   * stores' windows of one start both counted (each store holds its own). */
  size_t k = 0;
  if (rc == 0 && rows.n > 1) qsort(rows.v, rows.n, sizeof *rows.v, grow_cmp);
  for (size_t i = 0; i < rows.n && rc == 0; i++) {
    if (k > 0 && ember__fleetq_labels_cmp(&rows.v[k - 1].labels, &rows.v[i].labels) == 0) {
      grow_t *d = &rows.v[k - 1], *s = &rows.v[i];
      for (size_t b = 0; b < nb && rc == 0; b++) {
        if (s->at[b] > d->at[b]) {
          d->at[b] = s->at[b];
          d->vals[b] = s->vals[b];
        } else if (s->at[b] == d->at[b] && s->at[b] != INT64_MIN) {
          if (__builtin_add_overflow(d->vals[b], s->vals[b], &d->vals[b])) rc = -ERANGE;
        }
      }
      grow_clear(s);
    } else {
      if (k != i) {
        rows.v[k] = rows.v[i];
        memset(&rows.v[i], 0, sizeof rows.v[i]);
      }
      k++;
    }
  }
  if (rc == 0) rows.n = k;
  if (rc == 0 && max_values > 0 && rows.n > 0 && nb > max_values / rows.n) rc = EMBER_ETOOBIG;
  ember_store_gauge_timelines_t *t = NULL;
  if (rc == 0) {
    t = ember_calloc(1, sizeof *t);
    if (t != NULL) {
      size_t cells = rows.n * nb;
      t->nbuckets = nb;
      t->total = ember_calloc(nb ? nb : 1, sizeof *t->total);
      t->series = ember_calloc(rows.n ? rows.n : 1, sizeof *t->series);
      t->values = ember_malloc((cells ? cells : 1) * sizeof *t->values);
      t->at_ns = ember_malloc((cells ? cells : 1) * sizeof *t->at_ns);
    }
    if (t == NULL || !t->total || !t->series || !t->values || !t->at_ns) rc = -ENOMEM;
    for (size_t i = 0; rc == 0 && i < rows.n; i++) {
      t->series[i].id = rows.v[i].id;
      t->series[i].labels = rows.v[i].labels;
      memset(&rows.v[i].labels, 0, sizeof rows.v[i].labels);
      t->nseries = i + 1;
      memcpy(t->values + i * nb, rows.v[i].vals, nb * sizeof *t->values);
      memcpy(t->at_ns + i * nb, rows.v[i].at, nb * sizeof *t->at_ns);
      for (size_t b = 0; b < nb && rc == 0; b++)
        if (__builtin_add_overflow(t->total[b], rows.v[i].vals[b], &t->total[b])) rc = -ERANGE;
    }
  }
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  grows_free(&rows);
  if (rc != 0) {
    ember_store_gauge_timelines_free(t);
    return rc;
  }
  *out = t;
  return 0;
}
