/* Functions by rise in self share (alert_diff.h). */
#include "alert_diff.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "json.h"

static int opt_cmp(const char *a, const char *b) {
  if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

static int key_cmp(const ember_top_entry_t *a, const ember_top_entry_t *b) {
  int c = strcmp(a->name, b->name);
  return c != 0 ? c : opt_cmp(a->module, b->module);
}

static int entry_cmp(const void *a, const void *b) { return key_cmp(a, b); }

static int rise_cmp(const void *a, const void *b) {
  const ember__rise_t *x = a, *y = b;
  double dx = x->spike - x->base, dy = y->spike - y->base;
  if (dx != dy) return dx < dy ? 1 : -1;
  int c = strcmp(x->name, y->name);
  return c != 0 ? c : opt_cmp(x->module, y->module);
}

static char *dup_opt(const char *s) {
  if (s == NULL) return NULL;
  size_t n = strlen(s);
  char *d = ember_malloc(n + 1);
  if (d != NULL) memcpy(d, s, n + 1);
  return d;
}

void ember__rise_free(ember__rise_t *r, size_t count) {
  if (r == NULL) return;
  for (size_t i = 0; i < count; i++) {
    ember_free(r[i].name);
    ember_free(r[i].module);
  }
  ember_free(r);
}

int ember__rise(const ember_profile_t *base, const ember_profile_t *spike, size_t limit,
                ember__rise_t **out, size_t *count) {
  if (base == NULL || spike == NULL || out == NULL || count == NULL) return -EINVAL;
  ember_top_entry_t *b = NULL, *s = NULL;
  size_t nb = 0, ns = 0, n = 0;
  ember__rise_t *res = NULL;
  int rc = ember_profile_top(base, 0, EMBER_TOP_BY_SELF, 0, &b, &nb);
  if (rc == 0) rc = ember_profile_top(spike, 0, EMBER_TOP_BY_SELF, 0, &s, &ns);
  if (rc != 0) goto done;
  double btotal = (double)ember_profile_total(base, 0);
  double stotal = (double)ember_profile_total(spike, 0);
  qsort(b, nb, sizeof *b, entry_cmp);
  if (ns > 0 && (res = ember_calloc(ns, sizeof *res)) == NULL) {
    rc = -ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < ns; i++) {
    double sh = stotal > 0 ? (double)s[i].self / stotal : 0;
    const ember_top_entry_t *hit = bsearch(&s[i], b, nb, sizeof *b, entry_cmp);
    double bh = hit != NULL && btotal > 0 ? (double)hit->self / btotal : 0;
    if (!(sh > bh)) continue;
    res[n] = (ember__rise_t){.base = bh, .spike = sh};
    res[n].name = dup_opt(s[i].name);
    res[n].module = dup_opt(s[i].module);
    n++;
    if (res[n - 1].name == NULL || (s[i].module != NULL && res[n - 1].module == NULL)) {
      rc = -ENOMEM;
      goto done;
    }
  }
  if (n > 1) qsort(res, n, sizeof *res, rise_cmp);
  if (limit != 0 && n > limit) {
    for (size_t i = limit; i < n; i++) {
      ember_free(res[i].name);
      ember_free(res[i].module);
    }
    n = limit;
  }
  *out = res;
  *count = n;
  res = NULL;
  n = 0;
done:
  ember__rise_free(res, n);
  ember_top_free(b, nb);
  ember_top_free(s, ns);
  return rc;
}

static json_t *share(double v) { return json_real(round(v * 10000) / 10000); }

json_t *ember__rise_json(const ember__rise_t *r, size_t count) {
  json_t *a = json_array();
  int rc = a != NULL ? 0 : -ENOMEM;
  for (size_t i = 0; i < count && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(a, o);
    if (rc == 0) rc = ember__json_set(o, "function", ember__json_str(r[i].name));
    if (rc == 0 && r[i].module != NULL)
      rc = ember__json_set(o, "module", ember__json_str(r[i].module));
    if (rc == 0) rc = ember__json_set(o, "baseline", share(r[i].base));
    if (rc == 0) rc = ember__json_set(o, "spike", share(r[i].spike));
    if (rc == 0) rc = ember__json_set(o, "delta", share(r[i].spike - r[i].base));
  }
  if (rc != 0) {
    json_decref(a);
    return NULL;
  }
  return a;
}
