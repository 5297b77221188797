#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "htab.h"
#include "window.h"

typedef struct entry {
  uint32_t pid, nips;
  size_t off; /* into ips pool; pool order is arrival order (by_pid) */
  uint64_t hash;
  int64_t samples, cpu_ns; /* whole units */
  uint32_t frac[2];        /* and 2^-32 units of each, from weighted adds */
} entry_t;

struct ember__window {
  entry_t *entries;
  size_t n, cap;
  uint64_t *pool;
  size_t npool, cappool;
  ember__htab_t index;
  ember__window_stack_t *sorted;
  size_t capsorted;
  size_t max_stacks;
  uint64_t dropped;
  int64_t start_ns, end_ns;
};

int ember__window_new(ember__window_t **out) {
  ember__window_t *w = ember_calloc(1, sizeof *w);
  if (w == NULL) return -ENOMEM;
  ember__htab_init(&w->index);
  w->max_stacks = 1u << 20;
  *out = w;
  return 0;
}

void ember__window_free(ember__window_t *w) {
  if (w == NULL) return;
  ember_free(w->entries);
  ember_free(w->pool);
  ember_free(w->sorted);
  ember__htab_free(&w->index);
  ember_free(w);
}

void ember__window_reset(ember__window_t *w) {
  w->n = 0;
  w->npool = 0;
  w->dropped = 0;
  if (w->index.slots != NULL)
    memset(w->index.slots, 0, (w->index.mask + 1) * sizeof *w->index.slots);
  w->index.count = 0;
}

void ember__window_set_max_stacks(ember__window_t *w, size_t max_stacks) {
  w->max_stacks = max_stacks ? max_stacks : 1;
}

typedef struct stack_key {
  const ember__window_t *w;
  uint32_t pid, nips;
  const uint64_t *ips;
} stack_key_t;

static bool entry_eq(const void *ctx, uint32_t idx) {
  const stack_key_t *k = ctx;
  const entry_t *e = &k->w->entries[idx];
  return e->pid == k->pid && e->nips == k->nips &&
         memcmp(k->w->pool + e->off, k->ips, k->nips * sizeof *k->ips) == 0;
}

static uint64_t entry_hash(const void *ctx, uint32_t idx) {
  const stack_key_t *k = ctx;
  return k->w->entries[idx].hash;
}

int ember__window_add(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                      uint64_t period_ns, bool *is_new) {
  int64_t ns = period_ns > INT64_MAX ? INT64_MAX : (int64_t)period_ns;
  return ember__window_add_values(w, pid, ips, nips, 1, ns, is_new);
}

static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }

/* The entry of (pid, ips), made (zero) if new. Returns 0 with *out set,
 * -ENOMEM, or EMBER_ETOOBIG (counted in dropped) when the window is full.
 * The one place a window grows: every add goes through here. */
static int slot(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips, entry_t **out,
                bool *is_new) {
  uint64_t h = ember__hash_mix(0x3a11, pid);
  for (uint32_t i = 0; i < nips; i++) h = ember__hash_mix(h, ips[i]);
  stack_key_t key = {w, pid, nips, ips};
  int64_t found = ember__htab_find(&w->index, h, entry_eq, &key);
  if (found >= 0) {
    *out = &w->entries[found];
    if (is_new) *is_new = false;
    return 0;
  }
  if (w->n >= w->max_stacks) {
    w->dropped++;
    return EMBER_ETOOBIG;
  }
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 256;
    entry_t *ne = ember_realloc(w->entries, cap * sizeof *ne);
    if (ne == NULL) return -ENOMEM;
    w->entries = ne;
    w->cap = cap;
  }
  if (w->npool + nips > w->cappool) {
    size_t cap = w->cappool ? w->cappool : 4096;
    while (cap < w->npool + nips) cap *= 2;
    uint64_t *np = ember_realloc(w->pool, cap * sizeof *np);
    if (np == NULL) return -ENOMEM;
    w->pool = np;
    w->cappool = cap;
  }
  memcpy(w->pool + w->npool, ips, nips * sizeof *ips);
  w->entries[w->n] = (entry_t){pid, nips, w->npool, h, 0, 0, {0, 0}};
  if (ember__htab_insert(&w->index, h, (uint32_t)w->n, entry_hash, &key) != 0) return -ENOMEM;
  w->npool += nips;
  *out = &w->entries[w->n++];
  if (is_new) *is_new = true;
  return 0;
}

int ember__window_add_values(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                             int64_t v0, int64_t v1, bool *is_new) {
  if (nips == 0 || ips == NULL || v0 < 0 || v1 < 0) return -EINVAL;
  entry_t *e = NULL;
  int rc = slot(w, pid, ips, nips, &e, is_new);
  if (rc != 0) return rc;
  e->samples = sat_add(e->samples, v0);
  e->cpu_ns = sat_add(e->cpu_ns, v1);
  return 0;
}

/* A weight in Q32 fixed point: whole units and 2^-32 units, rounded to
 * nearest (so each add is off by at most 2^-33). 2^63 and above saturate. */
static void to_fixed(double v, int64_t *whole, uint32_t *frac) {
  if (v >= 0x1p63) {
    *whole = INT64_MAX;
    *frac = 0;
    return;
  }
  int64_t i = (int64_t)v;
  /* Exact: v and its integer part are doubles within a factor of two of
   * each other (or i == 0), and scaling by 2^32 is exact too. */
  uint64_t f = (uint64_t)((v - (double)i) * 0x1p32 + 0.5);
  if (f >> 32) {
    i++;
    f = 0;
  }
  *whole = i;
  *frac = (uint32_t)f;
}

static void add_fixed(int64_t *whole, uint32_t *frac, double v) {
  int64_t i;
  uint32_t f;
  to_fixed(v, &i, &f);
  uint64_t sum = (uint64_t)*frac + f;
  *frac = (uint32_t)sum;
  *whole = sat_add(sat_add(*whole, i), (int64_t)(sum >> 32));
}

int ember__window_add_weighted(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                               double v0, double v1, bool *is_new) {
  /* Written so that NaN fails too. */
  if (nips == 0 || ips == NULL || !(v0 >= 0) || !(v1 >= 0)) return -EINVAL;
  entry_t *e = NULL;
  int rc = slot(w, pid, ips, nips, &e, is_new);
  if (rc != 0) return rc;
  add_fixed(&e->samples, &e->frac[0], v0);
  add_fixed(&e->cpu_ns, &e->frac[1], v1);
  return 0;
}

void ember__window_set_bounds(ember__window_t *w, int64_t start_ns, int64_t end_ns) {
  w->start_ns = start_ns;
  w->end_ns = end_ns;
}

void ember__window_bounds(const ember__window_t *w, int64_t *start_ns, int64_t *end_ns) {
  *start_ns = w->start_ns;
  *end_ns = w->end_ns;
}

size_t ember__window_nstacks(const ember__window_t *w) { return w->n; }
uint64_t ember__window_dropped(const ember__window_t *w) { return w->dropped; }

/* To the nearest whole unit, halves up; a saturated value stays there. */
static int64_t round_fixed(int64_t whole, uint32_t frac) {
  return frac >= 0x80000000u && whole < INT64_MAX ? whole + 1 : whole;
}

static int by_pid(const void *a, const void *b) {
  const ember__window_stack_t *x = a, *y = b;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  return x->ips < y->ips ? -1 : x->ips > y->ips; /* pool order = arrival order */
}

const ember__window_stack_t *ember__window_sorted(ember__window_t *w, size_t *n) {
  *n = 0;
  if (w->n == 0) return w->sorted; /* qsort may not be given NULL, even for 0 */
  if (w->n > w->capsorted) {
    ember__window_stack_t *s = ember_realloc(w->sorted, w->n * sizeof *s);
    if (s == NULL) {
      *n = 0;
      return NULL;
    }
    w->sorted = s;
    w->capsorted = w->n;
  }
  for (size_t i = 0; i < w->n; i++) {
    const entry_t *e = &w->entries[i];
    w->sorted[i] = (ember__window_stack_t){e->pid, e->nips, w->pool + e->off,
                                           round_fixed(e->samples, e->frac[0]),
                                           round_fixed(e->cpu_ns, e->frac[1])};
  }
  qsort(w->sorted, w->n, sizeof *w->sorted, by_pid);
  *n = w->n;
  return w->sorted;
}

/* --- the window clock --- */

static int64_t next_multiple(int64_t t, int64_t period) {
  int64_t q = t / period;
  if (t < 0 && q * period != t) q--; /* floor, for a clock before 1970 */
  return (q + 1) * period;
}

/* Plan the first deadline strictly after `after_real`, an instant on the
 * Unix clock, seen from (mono_ns, real_ns). */
static void plan(ember__window_clock_t *c, int64_t after_real, int64_t mono_ns, int64_t real_ns) {
  c->deadline_real = next_multiple(after_real, c->period_ns);
  c->deadline_mono = mono_ns + (c->deadline_real - real_ns);
}

void ember__window_clock_init(ember__window_clock_t *c, int64_t period_ns, int64_t mono_ns,
                              int64_t real_ns) {
  assert(period_ns > 0); /* the agent's config bounds `window` to >= 1 s */
  c->period_ns = period_ns;
  c->start_real = real_ns;
  c->start_mono = mono_ns;
  plan(c, real_ns, mono_ns, real_ns);
}

void ember__window_clock_cut(ember__window_clock_t *c, int64_t mono_ns, int64_t real_ns,
                             int64_t *start_ns, int64_t *end_ns) {
  int64_t end = real_ns;
  /* The Unix clock went back (or did not move): the window still covers
   * the monotonic time it was open, so it keeps that length. */
  if (end <= c->start_real) {
    int64_t len = mono_ns - c->start_mono;
    end = c->start_real + (len > 0 ? len : 1);
  }
  *start_ns = c->start_real;
  *end_ns = end;
  c->start_real = end;
  c->start_mono = mono_ns;
}

bool ember__window_clock_tick(ember__window_clock_t *c, int64_t mono_ns, int64_t real_ns,
                              int64_t *start_ns, int64_t *end_ns, int64_t *wait_ns) {
  if (mono_ns < c->deadline_mono) {
    *wait_ns = c->deadline_mono - mono_ns;
    return false;
  }
  ember__window_clock_cut(c, mono_ns, real_ns, start_ns, end_ns);
  /* The next Unix multiple after both the deadline just met and now: one
   * period on when on time, further when the timer (or the whole host)
   * was late by more than a period. */
  int64_t after = real_ns > c->deadline_real ? real_ns : c->deadline_real;
  plan(c, after, mono_ns, real_ns);
  /* A Unix clock stepped back would plan the next cut more than a period
   * away: cut one period on, and align again from there. */
  if (c->deadline_mono - mono_ns > c->period_ns) {
    c->deadline_mono = mono_ns + c->period_ns;
    c->deadline_real = real_ns + c->period_ns;
  }
  *wait_ns = c->deadline_mono - mono_ns;
  return true;
}
