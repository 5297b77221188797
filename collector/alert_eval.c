/* Per-series CPU history and the values rules measure (alert_eval.h). */
#include "alert_eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "query.h"

/* Steps read again each round: windows that reached the store late. */
#define REREAD_STEPS 2

typedef struct hseries {
  uint32_t id;
  char *worker, *version, *host, *actor;
  int64_t first_ns; /* start of its first window seen */
  int64_t last_ns;  /* start of its last window seen */
  int64_t *ring;    /* cap values: CPU ns of the step at slot (start / step) % cap */
} hseries_t;

struct ember__ahist {
  int64_t step;
  size_t keep, cap; /* wanted and allocated steps */
  int64_t end;      /* end of the newest step held; INT64_MIN before any */
  bool refill;      /* the next update reads every kept step */
  hseries_t *s;     /* by id */
  size_t n, scap;
  /* The n series by worker (then id): a rule naming one worker reads only
   * its series, and a worker's groups are made together. Rebuilt by every
   * update (pointers into s). */
  const hseries_t **byworker;
  size_t bwcap;
};

static void series_clear(hseries_t *s) {
  ember_free(s->worker);
  ember_free(s->version);
  ember_free(s->host);
  ember_free(s->actor);
  ember_free(s->ring);
}

int ember__ahist_new(int64_t step_ns, size_t keep, ember__ahist_t **out) {
  if (step_ns <= 0 || out == NULL) return -EINVAL;
  ember__ahist_t *h = ember_calloc(1, sizeof *h);
  if (h == NULL) return -ENOMEM;
  h->step = step_ns;
  h->keep = keep ? keep : 1;
  h->end = INT64_MIN;
  h->refill = true;
  *out = h;
  return 0;
}

void ember__ahist_free(ember__ahist_t *h) {
  if (h == NULL) return;
  for (size_t i = 0; i < h->n; i++) series_clear(&h->s[i]);
  ember_free(h->s);
  ember_free(h->byworker);
  ember_free(h);
}

void ember__ahist_keep(ember__ahist_t *h, size_t keep) {
  if (h == NULL) return;
  if (keep == 0) keep = 1;
  if (keep > h->cap) h->refill = true;
  h->keep = keep;
}

int64_t ember__ahist_end(const ember__ahist_t *h) { return h ? h->end : INT64_MIN; }

static size_t slot(const ember__ahist_t *h, int64_t start) {
  int64_t bi = start / h->step - (start % h->step < 0);
  int64_t m = bi % (int64_t)h->cap;
  return (size_t)(m < 0 ? m + (int64_t)h->cap : m);
}

static char *dup_opt(const char *s, bool *oom) {
  if (s == NULL) return NULL;
  char *d = ember_strdup(s);
  if (d == NULL) *oom = true;
  return d;
}

/* The series `id`, added (with labels from `src`) when new; NULL on ENOMEM. */
static hseries_t *find_or_add(ember__ahist_t *h, const ember_store_series_t *src) {
  size_t lo = 0, hi = h->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (h->s[mid].id < src->id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < h->n && h->s[lo].id == src->id) return &h->s[lo];
  if (h->n == h->scap) {
    size_t cap = h->scap ? h->scap * 2 : 64;
    hseries_t *s = ember_realloc(h->s, cap * sizeof *s);
    if (s == NULL) return NULL;
    h->s = s;
    h->scap = cap;
  }
  hseries_t ns = {.id = src->id, .first_ns = src->first_ns, .last_ns = src->last_ns};
  bool oom = false;
  ns.worker = dup_opt(src->labels.worker ? src->labels.worker : "", &oom);
  ns.version = dup_opt(src->labels.version, &oom);
  ns.host = dup_opt(src->labels.host, &oom);
  ns.actor = dup_opt(src->labels.actor, &oom);
  ns.ring = ember_calloc(h->cap, sizeof *ns.ring);
  if (oom || ns.ring == NULL) {
    series_clear(&ns);
    return NULL;
  }
  memmove(&h->s[lo + 1], &h->s[lo], (h->n - lo) * sizeof *h->s);
  h->s[lo] = ns;
  h->n++;
  return &h->s[lo];
}

static int by_worker(const void *x, const void *y) {
  const hseries_t *a = *(const hseries_t *const *)x, *b = *(const hseries_t *const *)y;
  int c = strcmp(a->worker, b->worker);
  return c != 0 ? c : (a->id > b->id) - (a->id < b->id);
}

int ember__ahist_update(ember__ahist_t *h, ember_store_t *store, int64_t end_ns) {
  if (h == NULL || store == NULL || end_ns % h->step != 0) return -EINVAL;
  if (end_ns <= h->end && !h->refill) return 0;
  int64_t span = (int64_t)h->keep * h->step;
  bool full = h->refill || h->end == INT64_MIN || end_ns - h->end >= span;
  int64_t from = full ? end_ns - span : h->end - REREAD_STEPS * h->step;
  ember_store_timelines_t *tl = NULL;
  int rc = ember_store_cpu_timelines(store, NULL, from, end_ns, h->step, 0, &tl);
  if (rc != 0) return rc;
  if (full && h->cap != h->keep) {
    /* New rings of the kept size; every value is read again below. */
    for (size_t i = 0; i < h->n; i++) {
      int64_t *r = ember_realloc(h->s[i].ring, h->keep * sizeof *r);
      if (r == NULL) {
        ember_store_timelines_free(tl);
        return -ENOMEM;
      }
      h->s[i].ring = r;
    }
    h->cap = h->keep;
  }
  if (h->cap == 0) h->cap = h->keep;
  /* Steps that enter the history start at 0 for every series. */
  int64_t fresh = full ? from : h->end;
  for (size_t i = 0; i < h->n; i++) {
    if (full) {
      memset(h->s[i].ring, 0, h->cap * sizeof *h->s[i].ring);
      continue;
    }
    for (int64_t t = fresh; t < end_ns; t += h->step) h->s[i].ring[slot(h, t)] = 0;
  }
  for (size_t i = 0; i < tl->nseries; i++) {
    hseries_t *s = find_or_add(h, &tl->series[i]);
    if (s == NULL) {
      ember_store_timelines_free(tl);
      h->refill = true; /* a partial fill: read everything next time */
      return -ENOMEM;
    }
    if (tl->series[i].first_ns < s->first_ns) s->first_ns = tl->series[i].first_ns;
    if (tl->series[i].last_ns > s->last_ns) s->last_ns = tl->series[i].last_ns;
    for (size_t b = 0; b < tl->nbuckets; b++)
      s->ring[slot(h, from + (int64_t)b * h->step)] = tl->cpu[i * tl->nbuckets + b];
  }
  ember_store_timelines_free(tl);
  if (h->n > h->bwcap) {
    const hseries_t **bw = ember_realloc(h->byworker, h->n * sizeof *bw);
    if (bw == NULL) {
      h->refill = true;
      return -ENOMEM;
    }
    h->byworker = bw;
    h->bwcap = h->n;
  }
  /* Series without a window in the kept steps are forgotten. */
  size_t k = 0;
  for (size_t i = 0; i < h->n; i++) {
    if (h->s[i].last_ns < end_ns - span) {
      series_clear(&h->s[i]);
    } else {
      h->s[k++] = h->s[i];
    }
  }
  h->n = k;
  for (size_t i = 0; i < h->n; i++) h->byworker[i] = &h->s[i];
  if (h->n > 1) qsort(h->byworker, h->n, sizeof *h->byworker, by_worker);
  h->end = end_ns;
  h->refill = false;
  return 0;
}

static const char *group_label(const ember__alert_rule_t *r, const hseries_t *s) {
  switch (r->group_by) {
  case EMBER__GROUP_VERSION: return s->version;
  case EMBER__GROUP_HOST: return s->host;
  case EMBER__GROUP_ACTOR: return s->actor;
  case EMBER__GROUP_NONE: break;
  }
  return NULL;
}

void ember__agroups_free(ember__agroup_t *g, size_t count) {
  if (g == NULL) return;
  for (size_t i = 0; i < count; i++) {
    ember_free(g[i].key);
    ember_free(g[i].worker);
    ember_free(g[i].value);
    ember_free(g[i].hottest_host);
  }
  ember_free(g);
}

/* The k-th smallest of v[0..n) (k < n), v reordered so that v[0..k) are at
 * most it and v(k..n) at least it: Hoare's selection, O(n) on average, with
 * the median of three as the pivot (a baseline's values are CPU times,
 * often long runs of near-equal values, which this handles in linear time). */
static double select_kth(double *v, size_t n, size_t k) {
  size_t lo = 0, hi = n - 1;
  while (lo < hi) {
    double a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi];
    double pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
    size_t i = lo, j = hi;
    for (;;) {
      while (v[i] < pivot) i++;
      while (pivot < v[j]) j--;
      if (i >= j) break;
      double t = v[i];
      v[i] = v[j];
      v[j] = t;
      i++;
      j--;
    }
    /* v[lo..j] <= pivot <= v[j+1..hi]. */
    if (k <= j) {
      hi = j;
    } else {
      lo = j + 1;
    }
  }
  return v[k];
}

double ember__median(double *v, size_t n) {
  if (n == 0) return (double)NAN;
  double hi = select_kth(v, n, n / 2);
  if (n % 2) return hi;
  /* The lower middle: the largest of the n/2 values below. */
  double lo = v[0];
  for (size_t i = 1; i < n / 2; i++)
    if (v[i] > lo) lo = v[i];
  return (lo + hi) / 2;
}

/* Per group while grouping: the sums per kept step (baseline rules). */
typedef struct gacc {
  int64_t first_ns;
  int64_t hottest_ns;
  int64_t *sums;
} gacc_t;

static char *group_key(const char *worker, const char *value, bool grouped) {
  size_t wl = strlen(worker), vl = value ? strlen(value) : 0;
  char *k = ember_malloc(wl + vl + 2);
  if (k == NULL) return NULL;
  memcpy(k, worker, wl);
  k[wl] = '\0';
  if (grouped) {
    k[wl] = '\x1f';
    if (vl) memcpy(k + wl + 1, value, vl);
    k[wl + 1 + vl] = '\0';
  }
  return k;
}

int ember__ahist_groups(const ember__ahist_t *h, const ember__alert_rule_t *rule,
                        ember__exclude_fn exclude_from, void *ctx, ember__agroup_t **out,
                        size_t *count) {
  if (h == NULL || rule == NULL || out == NULL || count == NULL) return -EINVAL;
  *out = NULL;
  *count = 0;
  if (h->end == INT64_MIN || h->cap == 0) return 0;
  bool baseline = rule->kind == EMBER__ALERT_BASELINE;
  bool grouped = rule->group_by != EMBER__GROUP_NONE;
  ember__agroup_t *g = NULL;
  gacc_t *acc = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  size_t newest = slot(h, h->end - h->step);
  /* A literal worker: only its series (a binary search in byworker). */
  size_t from = 0, to = h->n;
  if (rule->worker != NULL && strchr(rule->worker, '*') == NULL) {
    size_t lo = 0, hi = h->n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (strcmp(h->byworker[mid]->worker, rule->worker) < 0) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    from = lo;
    while (lo < h->n && strcmp(h->byworker[lo]->worker, rule->worker) == 0) lo++;
    to = lo;
  }
  const char *cur_worker = NULL;
  size_t wfirst = 0; /* the first group of cur_worker: its groups are made together */
  for (size_t i = from; i < to && rc == 0; i++) {
    const hseries_t *s = h->byworker[i];
    if (!ember__alert_rule_selects(rule, s->worker, s->version, s->host, s->actor)) continue;
    if (cur_worker == NULL || strcmp(cur_worker, s->worker) != 0) {
      cur_worker = s->worker;
      wfirst = n;
    }
    const char *value = grouped ? group_label(rule, s) : NULL;
    size_t j = wfirst;
    for (; j < n; j++) {
      if (!grouped) break;
      if ((g[j].value == NULL) == (value == NULL) &&
          (value == NULL || strcmp(g[j].value, value) == 0))
        break;
    }
    if (j == n) {
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 8;
        ember__agroup_t *ng = ember_realloc(g, nc * sizeof *ng);
        if (ng != NULL) g = ng;
        gacc_t *na = ng ? ember_realloc(acc, nc * sizeof *na) : NULL;
        if (na != NULL) acc = na;
        if (ng == NULL || na == NULL) {
          rc = -ENOMEM;
          break;
        }
        cap = nc;
      }
      bool oom = false;
      g[n] = (ember__agroup_t){.baseline = (double)NAN};
      acc[n] = (gacc_t){.first_ns = s->first_ns, .hottest_ns = -1};
      n++;
      g[j].key = group_key(s->worker, value, grouped);
      g[j].worker = dup_opt(s->worker, &oom);
      g[j].value = dup_opt(value, &oom);
      if (baseline) acc[j].sums = ember_calloc(h->cap, sizeof *acc[j].sums);
      if (oom || g[j].key == NULL || (baseline && acc[j].sums == NULL)) {
        rc = -ENOMEM;
        break;
      }
    }
    int64_t v = s->ring[newest];
    g[j].cores += (double)v / (double)h->step;
    if (s->first_ns < acc[j].first_ns) acc[j].first_ns = s->first_ns;
    if (v > acc[j].hottest_ns) {
      acc[j].hottest_ns = v;
      g[j].hottest_sid = s->id;
      ember_free(g[j].hottest_host);
      bool oom = false;
      g[j].hottest_host = dup_opt(s->host, &oom);
      if (oom) rc = -ENOMEM;
    }
    if (baseline)
      for (size_t b = 0; b < h->cap; b++) acc[j].sums[b] += s->ring[b];
  }
  double *vals = NULL;
  if (rc == 0 && baseline && n > 0 && (vals = ember_malloc(h->cap * sizeof *vals)) == NULL)
    rc = -ENOMEM;
  for (size_t j = 0; j < n && rc == 0 && baseline; j++) {
    int64_t period = rule->baseline.period_ns;
    int64_t lo = h->end - period, hi = h->end - h->step;
    int64_t kept_from = h->end - (int64_t)h->cap * h->step;
    if (lo < kept_from) lo = kept_from;
    /* From the step holding the group's first window. */
    int64_t first = acc[j].first_ns - (acc[j].first_ns % h->step + h->step) % h->step;
    if (first > lo) lo = first;
    int64_t excl = exclude_from ? exclude_from(ctx, g[j].key) : INT64_MAX;
    if (excl < hi) hi = excl;
    size_t m = 0;
    for (int64_t t = lo; t < hi; t += h->step)
      vals[m++] = (double)acc[j].sums[slot(h, t)] / (double)h->step;
    size_t steps = (size_t)(period / h->step);
    size_t need = steps / 4 > 3 ? steps / 4 : 3;
    g[j].baseline = m >= need ? ember__median(vals, m) : (double)NAN;
  }
  ember_free(vals);
  for (size_t j = 0; j < n && acc != NULL; j++) ember_free(acc[j].sums);
  ember_free(acc);
  if (rc != 0) {
    ember__agroups_free(g, n);
    return rc;
  }
  *out = g;
  *count = n;
  return 0;
}

ember_store_selector_t ember__agroup_selector(const ember__alert_rule_t *rule,
                                              const ember__agroup_t *g) {
  ember_store_selector_t sel = {
      .worker = g->worker, .version = rule->version, .host = rule->host, .actor = rule->actor};
  switch (rule->group_by) {
  case EMBER__GROUP_VERSION: sel.version = g->value; break;
  case EMBER__GROUP_HOST: sel.host = g->value; break;
  case EMBER__GROUP_ACTOR: sel.actor = g->value; break;
  case EMBER__GROUP_NONE: break;
  }
  return sel;
}

int ember__agroup_function_share(ember_store_t *store, const ember__alert_rule_t *rule,
                                 const ember__agroup_t *g, int64_t from_ns, int64_t to_ns,
                                 double *percent) {
  if (store == NULL || rule == NULL || g == NULL || percent == NULL || rule->function.name == NULL)
    return -EINVAL;
  ember_store_selector_t sel = ember__agroup_selector(rule, g);
  ember_profile_t *p = NULL;
  int rc = ember__query_profile(store, &sel, from_ns, to_ns, EMBER__Q_CPU, &p);
  if (rc != 0) return rc;
  /* The self value of the stacks whose leaf has that display name (as
   * ember_profile_top keys functions, without building its whole table):
   * each leaf frame's name is looked at once. */
  size_t nframes = ember_profile_nframes(p);
  uint8_t *match = nframes ? ember_calloc(nframes, 1) : NULL; /* 0 unseen, 1 yes, 2 no */
  if (nframes && match == NULL) {
    ember_profile_free(p);
    return -ENOMEM;
  }
  char name[EMBER__RULE_FUNC_MAX + 2];
  int64_t self = 0, total = ember_profile_total(p, 0);
  for (size_t i = 0; i < ember_profile_nstacks(p) && rc == 0; i++) {
    const uint32_t *ids = NULL;
    const int64_t *vals = NULL;
    size_t depth = 0;
    rc = ember_profile_stack(p, (uint32_t)i, &ids, &depth, &vals);
    if (rc != 0 || depth == 0 || ids[0] >= nframes) continue;
    if (match[ids[0]] == 0) {
      const ember_frame_t *f = ember_profile_frame(p, ids[0]);
      bool yes;
      if (f->function != NULL && f->function[0] != '\0') {
        yes = strcmp(f->function, rule->function.name) == 0;
      } else {
        size_t len = ember_frame_name(f, name, sizeof name);
        yes = len < sizeof name && strcmp(name, rule->function.name) == 0;
      }
      match[ids[0]] = yes ? 1 : 2;
    }
    if (match[ids[0]] == 1) self += vals[0];
  }
  if (rc == 0) *percent = total > 0 ? 100.0 * (double)self / (double)total : 0;
  ember_free(match);
  ember_profile_free(p);
  return rc;
}
