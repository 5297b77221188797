/* The LMDB profile store: write/merge round trips, selectors, time ranges,
 * idempotency, dictionary dedup, persistence, schema check, failures. */
#include <errno.h>
#include <lmdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/store.h"

#define SEC 1000000000LL
#define T0  (1764460800LL * SEC) /* 2025-11-30T00:00:00Z */

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

/* A store file of its own per test (tu_store_path), removed at the start
 * and the end. */

static uint64_t rng_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* A CPU window of `nstacks` pseudo-random stacks over a pool of `nfuncs`
 * functions; the same seed gives the same profile. */
static ember_profile_t *make_window(const char *worker, const char *version, const char *host,
                                    const char *actor, int64_t start, const char *agent,
                                    uint64_t seq, size_t nstacks, unsigned nfuncs, uint64_t seed) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  ember_labels_t l = {.worker = worker, .version = version, .host = host, .actor = actor};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, 10000000);
  if (agent) assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  uint64_t x = seed * 2654435761u + 1;
  char names[16][32];
  for (size_t i = 0; i < nstacks; i++) {
    ember_frame_t frames[16];
    size_t depth = 1 + (size_t)(rng_next(&x) % 12);
    for (size_t d = 0; d < depth; d++) {
      snprintf(names[d], sizeof names[d], "fn%u", (unsigned)(rng_next(&x) % nfuncs));
      frames[d] = (ember_frame_t){.function = names[d],
                                  .file = d % 3 ? "a.c" : NULL,
                                  .module = "/usr/bin/app",
                                  .build_id = "beef",
                                  .line = (uint32_t)(d * 7),
                                  .address = 0x1000 + d,
                                  .kind = d == 0 ? EMBER_FRAME_KERNEL : EMBER_FRAME_NATIVE};
    }
    int64_t n = 1 + (int64_t)(rng_next(&x) % 50);
    int64_t values[2] = {n, n * 10000000};
    assert_int_equal(ember_profile_add(p, frames, depth, values), 0);
  }
  return p;
}

/* One line per stack, "frame|frame|...=value", sorted: two profiles hold the
 * same stacks and values iff their lines are equal. */
typedef struct lines {
  char **v;
  size_t n;
} lines_t;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static lines_t canon(const ember_profile_t *p, size_t vi) {
  lines_t l = {.n = ember_profile_nstacks(p)};
  l.v = calloc(l.n ? l.n : 1, sizeof *l.v);
  assert_non_null(l.v);
  for (uint32_t i = 0; i < l.n; i++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *vals;
    assert_int_equal(ember_profile_stack(p, i, &ids, &depth, &vals), 0);
    size_t cap = 64 + depth * 128, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    for (size_t d = 0; d < depth; d++) {
      const ember_frame_t *f = ember_profile_frame(p, ids[d]);
      len += (size_t)snprintf(s + len, cap - len, "%s,%s,%s,%s,%u,%d,%llx|",
                              f->function ? f->function : "-", f->file ? f->file : "-",
                              f->module ? f->module : "-", f->build_id ? f->build_id : "-", f->line,
                              (int)f->kind, (unsigned long long)f->address);
    }
    snprintf(s + len, cap - len, "=%lld", (long long)vals[vi]);
    l.v[i] = s;
  }
  qsort(l.v, l.n, sizeof *l.v, cmp_str);
  return l;
}

static void lines_free(lines_t *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

/* `got` (one value type) holds exactly the stacks and values of column
 * `vi` of `want`. */
static void assert_same_stacks(const ember_profile_t *got, const ember_profile_t *want, size_t vi) {
  lines_t g = canon(got, 0), w = canon(want, vi);
  assert_int_equal(g.n, w.n);
  for (size_t i = 0; i < g.n; i++) assert_string_equal(g.v[i], w.v[i]);
  lines_free(&g);
  lines_free(&w);
}

static ember_profile_t *merged(ember_profile_t *const *ps, size_t n) {
  ember_profile_t *m = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &m), 0);
  for (size_t i = 0; i < n; i++) assert_int_equal(ember_profile_merge(m, ps[i]), 0);
  return m;
}

static void free_all(ember_profile_t **ps, size_t n) {
  for (size_t i = 0; i < n; i++) ember_profile_free(ps[i]);
}

static int64_t merge_total(ember_store_t *s, const ember_store_selector_t *sel, int64_t from,
                           int64_t to) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, sel, from, to, EMBER_VT_CPU_SAMPLES, &p), 0);
  int64_t t = ember_profile_total(p, 0);
  ember_profile_free(p);
  return t;
}

static void test_store_roundtrip_equals_profile_merge(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "roundtrip");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *ps[24];
  for (size_t i = 0; i < 24; i++)
    ps[i] = make_window("api", "v1", i % 2 ? "h1" : "h2", NULL, T0 + (int64_t)(i / 2) * 10 * SEC,
                        i % 2 ? "agent-1" : "agent-2", i, 200, 60, i);
  ember_store_write_result_t r;
  /* Two batches, so rows, stacks and frames meet an existing dictionary. */
  assert_int_equal(ember_store_write(s, ps, 10, &r), 0);
  assert_int_equal(r.written, 10);
  assert_int_equal(ember_store_write(s, ps + 10, 14, &r), 0);
  assert_int_equal(r.written, 14);
  assert_int_equal(r.duplicates, 0);

  ember_profile_t *want = merged(ps, 24);
  for (size_t vi = 0; vi < 2; vi++) {
    ember_profile_t *got = NULL;
    assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 3600 * SEC, cpu_types[vi], &got), 0);
    assert_int_equal(ember_profile_ntypes(got), 1);
    assert_int_equal(ember_profile_type(got, 0), cpu_types[vi]);
    assert_same_stacks(got, want, vi);
    int64_t a, b;
    ember_profile_window(got, &a, &b);
    assert_int_equal(a, T0);
    assert_int_equal(b, T0 + 120 * SEC);
    assert_int_equal(ember_profile_period(got), 10000000);
    ember_profile_free(got);
  }
  /* A value type nobody wrote merges to an empty profile over the range. */
  ember_profile_t *got = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + SEC, EMBER_VT_ALLOC_BYTES, &got), 0);
  assert_int_equal(ember_profile_nstacks(got), 0);
  ember_profile_free(got);

  ember_profile_free(want);
  free_all(ps, 24);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_selects_by_each_label(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "select");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  const char *workers[] = {"api", "db"}, *versions[] = {"v1", "v2"}, *hosts[] = {"h1", "h2"},
             *actors[] = {NULL, "room-7"};
  ember_profile_t *ps[16];
  int64_t tot[16];
  for (size_t i = 0; i < 16; i++) {
    ps[i] = make_window(workers[i & 1], versions[(i >> 1) & 1], hosts[(i >> 2) & 1],
                        actors[(i >> 3) & 1], T0, NULL, 0, 20, 10, 100 + i);
    tot[i] = ember_profile_total(ps[i], 0);
  }
  assert_int_equal(ember_store_write(s, ps, 16, NULL), 0);

  for (int label = 0; label < 4; label++) {
    for (size_t val = 0; val < 2; val++) {
      ember_store_selector_t sel = {0};
      const char *v = NULL;
      switch (label) {
      case 0: v = sel.worker = workers[val]; break;
      case 1: v = sel.version = versions[val]; break;
      case 2: v = sel.host = hosts[val]; break;
      default: v = sel.actor = actors[val]; break;
      }
      if (!v) continue; /* NULL selects everything, tested below */
      int64_t want = 0;
      size_t nwant = 0;
      for (size_t i = 0; i < 16; i++)
        if (((i >> label) & 1) == val) {
          want += tot[i];
          nwant++;
        }
      assert_int_equal(merge_total(s, &sel, T0, T0 + SEC), want);
      ember_store_series_t *ser = NULL;
      size_t n = 0;
      assert_int_equal(ember_store_series(s, &sel, T0, T0 + SEC, &ser, &n), 0);
      assert_int_equal(n, nwant);
      for (size_t j = 0; j < n; j++) {
        const char *have[] = {ser[j].labels.worker, ser[j].labels.version, ser[j].labels.host,
                              ser[j].labels.actor};
        assert_string_equal(have[label], v);
        assert_int_equal(ser[j].first_ns, T0);
        assert_int_equal(ser[j].last_ns, T0);
      }
      ember_store_series_free(ser, n);
    }
  }
  /* Two labels intersect; an unknown value matches nothing. */
  ember_store_selector_t both = {.worker = "db", .host = "h2"};
  int64_t want = 0;
  for (size_t i = 0; i < 16; i++)
    if ((i & 1) && ((i >> 2) & 1)) want += tot[i];
  assert_int_equal(merge_total(s, &both, T0, T0 + SEC), want);
  ember_store_selector_t none = {.worker = "nope"};
  assert_int_equal(merge_total(s, &none, T0, T0 + SEC), 0);
  ember_store_series_t *ser = (ember_store_series_t *)1;
  size_t n = 99;
  assert_int_equal(ember_store_series(s, &none, T0, T0 + SEC, &ser, &n), 0);
  assert_null(ser);
  assert_int_equal(n, 0);
  assert_int_equal(ember_store_series(s, NULL, T0, T0 + SEC, &ser, &n), 0);
  assert_int_equal(n, 16);
  ember_store_series_free(ser, n);
  int64_t all = 0;
  for (size_t i = 0; i < 16; i++) all += tot[i];
  assert_int_equal(merge_total(s, NULL, T0, T0 + SEC), all);

  free_all(ps, 16);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_time_range_is_half_open(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "range");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *ps[3];
  int64_t tot[3];
  for (size_t i = 0; i < 3; i++) {
    ps[i] = make_window("api", "v1", "h", NULL, T0 + (int64_t)i * 10 * SEC, "a", i, 5, 5, i);
    tot[i] = ember_profile_total(ps[i], 0);
  }
  /* A window before the epoch sorts before all others (sign-flipped keys). */
  ember_profile_t *old = make_window("api", "v1", "h", NULL, -10 * SEC, "a", 99, 5, 5, 9);
  assert_int_equal(ember_store_write(s, ps, 3, NULL), 0);
  assert_int_equal(ember_store_write(s, &old, 1, NULL), 0);

  assert_int_equal(merge_total(s, NULL, T0, T0 + 10 * SEC), tot[0]);
  assert_int_equal(merge_total(s, NULL, T0 + 10 * SEC, T0 + 20 * SEC), tot[1]);
  assert_int_equal(merge_total(s, NULL, T0 + 1, T0 + 20 * SEC), tot[1]);
  assert_int_equal(merge_total(s, NULL, T0, T0 + 20 * SEC + 1), tot[0] + tot[1] + tot[2]);
  assert_int_equal(merge_total(s, NULL, T0 - 1, T0), 0);
  assert_int_equal(merge_total(s, NULL, -20 * SEC, 0), ember_profile_total(old, 0));
  assert_int_equal(merge_total(s, NULL, INT64_MIN, INT64_MAX),
                   tot[0] + tot[1] + tot[2] + ember_profile_total(old, 0));

  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0, EMBER_VT_CPU_NS, &p), -EINVAL);
  assert_int_equal(ember_store_merge(s, NULL, T0 + 1, T0, EMBER_VT_CPU_NS, &p), -EINVAL);
  assert_null(p);

  ember_store_series_t *ser = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_series(s, NULL, T0 + 5 * SEC, T0 + 25 * SEC, &ser, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(ser[0].first_ns, T0 + 10 * SEC);
  assert_int_equal(ser[0].last_ns, T0 + 20 * SEC);
  ember_store_series_free(ser, n);
  assert_int_equal(ember_store_series(s, NULL, T0 + 30 * SEC, T0 + 40 * SEC, &ser, &n), 0);
  assert_int_equal(n, 0);

  free_all(ps, 3);
  ember_profile_free(old);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_duplicate_seq_writes_nothing(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "dup");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *ps[4];
  for (size_t i = 0; i < 4; i++)
    ps[i] =
        make_window("api", "v1", "h", NULL, T0 + (int64_t)i * 10 * SEC, "agent-1", i, 30, 20, i);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write(s, ps, 4, &r), 0);
  assert_int_equal(r.written, 4);
  ember_store_stats_t before, after;
  assert_int_equal(ember_store_stats(s, &before), 0);
  int64_t total = merge_total(s, NULL, T0, T0 + 60 * SEC);

  /* A replay of the whole batch stores nothing. */
  assert_int_equal(ember_store_write(s, ps, 4, &r), 0);
  assert_int_equal(r.written, 0);
  assert_int_equal(r.duplicates, 4);
  assert_int_equal(ember_store_stats(s, &after), 0);
  assert_memory_equal(&before, &after, offsetof(ember_store_stats_t, file_bytes));
  assert_int_equal(merge_total(s, NULL, T0, T0 + 60 * SEC), total);

  /* Within one batch too; the same seq from another agent is not a dup. */
  ember_profile_t *twice[3] = {
      make_window("api", "v1", "h", NULL, T0 + 40 * SEC, "agent-1", 7, 3, 3, 7),
      make_window("api", "v1", "h", NULL, T0 + 40 * SEC, "agent-1", 7, 3, 3, 7),
      make_window("api", "v1", "h", NULL, T0 + 40 * SEC, "agent-2", 7, 3, 3, 7)};
  assert_int_equal(ember_store_write(s, twice, 3, &r), 0);
  assert_int_equal(r.written, 2);
  assert_int_equal(r.duplicates, 1);
  assert_int_equal(ember_store_stats(s, &after), 0);
  assert_int_equal(after.idem_keys, before.idem_keys + 2);
  /* agent-1 and agent-2 share labels and window: their rows add up. */
  assert_int_equal(after.profile_rows, before.profile_rows + 1);
  assert_int_equal(merge_total(s, NULL, T0 + 40 * SEC, T0 + 50 * SEC),
                   2 * ember_profile_total(twice[0], 0));

  free_all(twice, 3);
  free_all(ps, 4);
  ember_store_close(s);
  tu_store_remove(path);
}

/* A one-frame window of api on h at `start` with these values. */
static ember_profile_t *one_frame(int64_t start, uint64_t seq, const char *fn, int64_t samples) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  ember_labels_t l = {.worker = "api", .version = "v1", .host = "h"};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  assert_int_equal(ember_profile_set_origin(p, "agent-1", seq, NULL), 0);
  ember_frame_t f = {.function = fn, .module = "/usr/bin/app"};
  int64_t v[2] = {samples, 1};
  assert_int_equal(ember_profile_add(p, &f, 1, v), 0);
  return p;
}

/* Windows whose values would sum past INT64_MAX in one stack's entry of
 * their minute's and hour's rows: the window that would make the sum
 * overflow is refused, as the window it is, and nothing of its batch is
 * stored; without it, the batch is. The same values in different stacks
 * overflow no sum: stored. */
static void test_store_sum_overflow_refuses_the_window(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "overflow");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)64 << 20);
  const int64_t half = INT64_MAX / 2;
  ember_profile_t *ps[3] = {one_frame(T0, 1, "a", half), one_frame(T0 + 10 * SEC, 2, "a", half),
                            one_frame(T0 + 20 * SEC, 3, "a", 2)};
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write(s, ps, 3, &r), -ERANGE);
  assert_int_equal(r.bad, 2);
  assert_non_null(strstr(r.why, "overflow"));
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 0);
  assert_int_equal(ember_store_write(s, ps, 2, &r), 0);
  assert_int_equal(r.written, 2);
  assert_int_equal(merge_total(s, NULL, T0, T0 + 60 * SEC), 2 * half);
  free_all(ps, 3);
  ember_store_close(s);
  tu_store_remove(path);

  s = tu_store_open(path, (size_t)64 << 20);
  ember_profile_t *qs[3] = {one_frame(T0, 1, "a", half), one_frame(T0 + 10 * SEC, 2, "a", half),
                            one_frame(T0 + 20 * SEC, 3, "b", 2)};
  assert_int_equal(ember_store_write(s, qs, 3, &r), 0);
  assert_int_equal(r.written, 3);
  free_all(qs, 3);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_stack_dictionary_dedup(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "dedup");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  /* 1000 windows with the same stacks (seed 42), written 100 at a time. */
  ember_profile_t *ps[100];
  ember_profile_t *first = make_window("api", "v1", "h", NULL, T0, NULL, 0, 50, 30, 42);
  for (int b = 0; b < 10; b++) {
    for (int i = 0; i < 100; i++)
      ps[i] = make_window("api", "v1", "h", NULL, T0 + (int64_t)(b * 100 + i) * 10 * SEC, "a",
                          (uint64_t)(b * 100 + i), 50, 30, 42);
    assert_int_equal(ember_store_write(s, ps, 100, NULL), 0);
    free_all(ps, 100);
  }
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.series, 1);
  assert_int_equal(st.stacks, ember_profile_nstacks(first));
  assert_int_equal(st.frames, ember_profile_nframes(first));
  assert_int_equal(st.profile_rows, 1000);
  assert_int_equal(st.cpu_rows, 1000);
  assert_int_equal(st.idem_keys, 1000);
  assert_int_equal(merge_total(s, NULL, T0, T0 + 10000 * SEC),
                   1000 * ember_profile_total(first, 0));

  /* The CPU timeline: 100 s buckets hold 10 windows each. */
  int64_t *cpu = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_cpu_timeline(s, NULL, T0, T0 + 10000 * SEC, 100 * SEC, &cpu, &n), 0);
  assert_int_equal(n, 100);
  for (size_t i = 0; i < n; i++) assert_int_equal(cpu[i], 10 * ember_profile_total(first, 1));
  ember_free(cpu);
  /* A partial last bucket counts; windows outside the range do not. */
  assert_int_equal(
      ember_store_cpu_timeline(s, NULL, T0 + 5 * SEC, T0 + 31 * SEC, 20 * SEC, &cpu, &n), 0);
  assert_int_equal(n, 2);
  assert_int_equal(cpu[0], 2 * ember_profile_total(first, 1)); /* T0+10 s, T0+20 s */
  assert_int_equal(cpu[1], ember_profile_total(first, 1));     /* T0+30 s */
  ember_free(cpu);
  assert_int_equal(ember_store_cpu_timeline(s, NULL, 0, INT64_MAX, 1, &cpu, &n), EMBER_ETOOBIG);
  assert_int_equal(ember_store_cpu_timeline(s, NULL, 0, 1, 0, &cpu, &n), -EINVAL);

  ember_profile_free(first);
  ember_store_close(s);
  tu_store_remove(path);
}

/* Every series' own CPU timeline in one call: a series whose labels are a
 * subset of another's (no actor) gets only its own points, rows are keyed
 * by id and labels as ember_store_series lists them, and the total is the
 * selector's timeline. */
static void test_store_cpu_timelines_per_series(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "timelines");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  /* Series: api (no actor), api/room-7, db; windows in buckets 0, 1 and 2
   * of 20 s (db only in bucket 2). */
  ember_profile_t *ps[7] = {
      make_window("api", "v1", "h1", NULL, T0, "a", 1, 20, 10, 1),
      make_window("api", "v1", "h1", NULL, T0 + 10 * SEC, "a", 2, 20, 10, 2),
      make_window("api", "v1", "h1", NULL, T0 + 20 * SEC, "a", 3, 20, 10, 3),
      make_window("api", "v1", "h1", "room-7", T0, "b", 1, 20, 10, 4),
      make_window("api", "v1", "h1", "room-7", T0 + 30 * SEC, "b", 2, 20, 10, 5),
      make_window("db", "v9", "h2", NULL, T0 + 40 * SEC, "c", 1, 20, 10, 6),
      make_window("db", "v9", "h2", NULL, T0 + 90 * SEC, "c", 2, 20, 10, 7), /* out of range */
  };
  assert_int_equal(ember_store_write(s, ps, 7, NULL), 0);
  int64_t c[7];
  for (size_t i = 0; i < 7; i++) c[i] = ember_profile_total(ps[i], 1);
  const int64_t from = T0, to = T0 + 50 * SEC, step = 20 * SEC;

  ember_store_timelines_t *t = NULL;
  assert_int_equal(ember_store_cpu_timelines(s, NULL, from, to, step, 0, &t), 0);
  assert_int_equal(t->nbuckets, 3);
  assert_int_equal(t->nseries, 3);
  /* The same series, in the same order, as the listing. */
  ember_store_series_t *ser = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_series(s, NULL, from, to, &ser, &n), 0);
  assert_int_equal(n, t->nseries);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(t->series[i].id, ser[i].id);
    assert_string_equal(t->series[i].labels.worker, ser[i].labels.worker);
    assert_int_equal(t->series[i].first_ns, ser[i].first_ns);
    assert_int_equal(t->series[i].last_ns, ser[i].last_ns);
  }
  ember_store_series_free(ser, n);
  /* Creation order: api, api/room-7, db. */
  assert_null(t->series[0].labels.actor);
  assert_string_equal(t->series[1].labels.actor, "room-7");
  assert_string_equal(t->series[2].labels.worker, "db");
  const int64_t want[3][3] = {
      {c[0] + c[1], c[2], 0}, /* api alone, not api/room-7 */
      {c[3], c[4], 0},
      {0, 0, c[5]},
  };
  for (size_t i = 0; i < 3; i++)
    for (size_t b = 0; b < 3; b++) assert_int_equal(t->cpu[i * 3 + b], want[i][b]);
  int64_t *tot = NULL;
  size_t nb = 0;
  assert_int_equal(ember_store_cpu_timeline(s, NULL, from, to, step, &tot, &nb), 0);
  assert_int_equal(nb, 3);
  for (size_t b = 0; b < 3; b++) {
    assert_int_equal(t->total[b], tot[b]);
    assert_int_equal(t->total[b], want[0][b] + want[1][b] + want[2][b]);
  }
  ember_free(tot);
  ember_store_timelines_free(t);

  /* A selector narrows the rows; the total follows it. */
  ember_store_selector_t api = {.worker = "api"};
  t = NULL;
  assert_int_equal(ember_store_cpu_timelines(s, &api, from, to, step, 0, &t), 0);
  assert_int_equal(t->nseries, 2);
  assert_int_equal(t->total[0], c[0] + c[1] + c[3]);
  assert_int_equal(t->total[2], 0);
  ember_store_timelines_free(t);

  /* Nothing selected: no rows, zero totals. */
  ember_store_selector_t none = {.worker = "nope"};
  t = NULL;
  assert_int_equal(ember_store_cpu_timelines(s, &none, from, to, step, 0, &t), 0);
  assert_int_equal(t->nseries, 0);
  assert_null(t->series);
  assert_null(t->cpu);
  assert_int_equal(t->nbuckets, 3);
  for (size_t b = 0; b < 3; b++) assert_int_equal(t->total[b], 0);
  ember_store_timelines_free(t);

  /* The cap on series x buckets, and bad arguments; *out untouched. */
  t = (ember_store_timelines_t *)1;
  assert_int_equal(ember_store_cpu_timelines(s, NULL, from, to, step, 8, &t), EMBER_ETOOBIG);
  assert_ptr_equal(t, (ember_store_timelines_t *)1);
  t = NULL;
  assert_int_equal(ember_store_cpu_timelines(s, NULL, from, to, step, 9, &t), 0);
  ember_store_timelines_free(t);
  t = (ember_store_timelines_t *)1;
  assert_int_equal(ember_store_cpu_timelines(s, NULL, 0, INT64_MAX, 1, 0, &t), EMBER_ETOOBIG);
  assert_int_equal(ember_store_cpu_timelines(s, NULL, to, from, step, 0, &t), -EINVAL);
  assert_int_equal(ember_store_cpu_timelines(s, NULL, from, to, 0, 0, &t), -EINVAL);
  assert_int_equal(ember_store_cpu_timelines(NULL, NULL, from, to, step, 0, &t), -EINVAL);
  assert_int_equal(ember_store_cpu_timelines(s, NULL, from, to, step, 0, NULL), -EINVAL);
  assert_ptr_equal(t, (ember_store_timelines_t *)1);
  ember_store_timelines_free(NULL);

  /* Fail the Nth allocation for every N: -ENOMEM and nothing leaked, then
   * the same answer. */
  int rc = -1;
  t = NULL;
  for (long k = 0; rc != 0; k++) {
    assert_true(k < 1000);
    ember_alloc_fail_after(k);
    rc = ember_store_cpu_timelines(s, NULL, from, to, step, 0, &t);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      assert_null(t);
    }
  }
  assert_int_equal(t->nseries, 3);
  assert_int_equal(t->cpu[2 * 3 + 2], c[5]);
  ember_store_timelines_free(t);

  free_all(ps, 7);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_reopen_persists(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "reopen");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *ps[5];
  for (size_t i = 0; i < 5; i++)
    ps[i] = make_window("api", "v1", "h", "x", T0 + (int64_t)i * 10 * SEC, "a", i, 40, 25, i);
  assert_int_equal(ember_store_write(s, ps, 5, NULL), 0);
  ember_store_close(s);

  /* Read-only reopen sees everything and refuses writes. */
  ember_store_opts_t ro = {.read_only = true};
  s = NULL;
  assert_int_equal(ember_store_open(path, &ro, &s, NULL, 0), 0);
  ember_profile_t *want = merged(ps, 5), *got = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 50 * SEC, EMBER_VT_CPU_NS, &got), 0);
  assert_same_stacks(got, want, 1);
  ember_profile_free(got);
  assert_int_equal(ember_store_write(s, ps, 1, NULL), -EACCES);
  ember_store_close(s);

  /* Writable reopen keeps the dictionary and idempotency keys. */
  s = tu_store_open(path, (size_t)256 << 20);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write(s, ps, 5, &r), 0);
  assert_int_equal(r.duplicates, 5);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 5);
  assert_true(st.file_bytes > 0);
  ember_store_close(s);

  ember_profile_free(want);
  free_all(ps, 5);
  tu_store_remove(path);
}

static void set_schema(const char *path, uint32_t version) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
  assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
  uint8_t v[4] = {(uint8_t)(version >> 24), (uint8_t)(version >> 16), (uint8_t)(version >> 8),
                  (uint8_t)version};
  MDB_val k = {.mv_size = 6, .mv_data = (void *)(uintptr_t) "schema"};
  MDB_val d = {.mv_size = 4, .mv_data = v};
  assert_int_equal(mdb_put(txn, dbi, &k, &d, 0), 0);
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

static void test_store_schema_newer_refused(void **state) {
  (void)state;
  char path[512], err[256];
  tu_store_path(path, sizeof path, "store", "schema");
  tu_store_remove(path);
  ember_store_close(tu_store_open(path, (size_t)256 << 20));
  set_schema(path, EMBER_STORE_SCHEMA_VERSION + 1);
  ember_store_t *s = NULL;
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_EVERSION);
  assert_null(s);
  char newer[64];
  snprintf(newer, sizeof newer, "schema version %u", EMBER_STORE_SCHEMA_VERSION + 1);
  assert_non_null(strstr(err, newer));
  assert_non_null(strstr(err, "upgrade"));
  /* Version 1 (no minute rollups) is refused too: nothing migrates it. */
  set_schema(path, 1);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_EVERSION);
  assert_null(s);
  assert_non_null(strstr(err, "schema version 1, older"));
  /* Version 2 values carry no checksums: refused, with the way out. */
  set_schema(path, 2);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_EVERSION);
  assert_null(s);
  assert_non_null(strstr(err, "no checksums"));
  assert_non_null(strstr(err, "rebuilt from Kafka"));
  set_schema(path, 0);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_ECORRUPT);
  /* From schema 3 the version is sealed like every meta value: an
   * unsealed one is damage, not an older store. */
  set_schema(path, EMBER_STORE_SCHEMA_VERSION);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "without its checksum"));
  assert_null(s);
  tu_store_remove(path);

  /* Not a store at all, and a missing file opened read-only. */
  ember_store_opts_t ro = {.read_only = true};
  assert_int_not_equal(ember_store_open(path, &ro, &s, err, sizeof err), 0);
  assert_non_null(strstr(err, path));
  assert_null(s);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int i = 0; i < 4096; i++) fputc('x', f);
  fclose(f);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "cannot open"));
  assert_null(s);
  tu_store_remove(path);
}

static void test_store_rejects_bad_arguments(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "args");
  tu_store_remove(path);
  ember_store_t *s = NULL;
  assert_int_equal(ember_store_open(NULL, NULL, &s, NULL, 0), -EINVAL);
  assert_int_equal(ember_store_open("", NULL, &s, NULL, 0), -EINVAL);
  assert_int_equal(ember_store_open(path, NULL, NULL, NULL, 0), -EINVAL);
  s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *p = make_window("api", "v1", "h", NULL, T0, "a", 1, 3, 3, 1);
  ember_profile_t *bad = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &bad), 0); /* no window */
  ember_profile_t *batch[2] = {p, bad};
  ember_store_write_result_t r = {.written = 77};
  assert_int_equal(ember_store_write(s, batch, 2, &r), -EINVAL);
  assert_int_equal(r.written, 77);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 0); /* all or nothing */
  batch[1] = NULL;
  assert_int_equal(ember_store_write(s, batch, 2, NULL), -EINVAL);
  assert_int_equal(ember_store_write(s, NULL, 1, NULL), -EINVAL);
  assert_int_equal(ember_store_write(s, NULL, 0, NULL), 0);
  ember_profile_t *out = NULL;
  assert_int_equal(ember_store_merge(s, NULL, 0, 1, (ember_value_type_t)0, &out), -EINVAL);
  assert_int_equal(ember_store_merge(s, NULL, 0, 1, (ember_value_type_t)9, &out), -EINVAL);
  assert_int_equal(ember_store_merge(NULL, NULL, 0, 1, EMBER_VT_CPU_NS, &out), -EINVAL);
  assert_int_equal(ember_store_stats(s, NULL), -EINVAL);
  ember_store_close(NULL);
  ember_profile_free(p);
  ember_profile_free(bad);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_alloc_failures(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "alloc");
  tu_store_remove(path);
  ember_profile_t *ps[3];
  for (size_t i = 0; i < 3; i++)
    ps[i] = make_window("api", "v1", "h", NULL, T0 + (int64_t)i * 35 * SEC, "a", i, 60, 30, i);
  ember_profile_t *want = merged(ps, 3);
  /* Windows in two minutes, and a duplicate inside the batch. */
  ember_profile_t *batch[4] = {ps[0], ps[1], ps[2], ps[1]};

  /* Open: fail the Nth allocation for every N until it succeeds. */
  ember_store_t *s = NULL;
  int rc = -1;
  for (long n = 0; rc != 0; n++) {
    assert_true(n < 1000);
    ember_alloc_fail_after(n);
    rc = ember_store_open(path, NULL, &s, NULL, 0);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      assert_null(s);
    }
  }
  /* Write: a failed batch leaves nothing behind, so the retry is whole. */
  ember_store_write_result_t r = {0};
  rc = -1;
  long writes = 0;
  for (long n = 0; rc != 0; n++, writes++) {
    assert_true(n < 100000);
    ember_alloc_fail_after(n);
    rc = ember_store_write(s, batch, 4, &r);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      ember_store_stats_t st;
      assert_int_equal(ember_store_stats(s, &st), 0);
      assert_int_equal(st.profile_rows + st.stacks + st.frames + st.series + st.idem_keys +
                           st.rollup_rows + st.rollup_1m_rows + st.cpu_rows,
                       0);
    }
  }
  assert_true(writes > 1);
  assert_int_equal(r.written, 3);
  assert_int_equal(r.duplicates, 1);
  /* Merge and listing: fail everywhere, then match. */
  ember_profile_t *got = NULL;
  rc = -1;
  for (long n = 0; rc != 0; n++) {
    assert_true(n < 100000);
    ember_alloc_fail_after(n);
    rc = ember_store_merge(s, NULL, T0, T0 + 80 * SEC, EMBER_VT_CPU_SAMPLES, &got);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      assert_null(got);
    }
  }
  assert_same_stacks(got, want, 0);
  ember_profile_free(got);
  ember_store_series_t *ser = NULL;
  size_t count = 0;
  rc = -1;
  for (long n = 0; rc != 0; n++) {
    assert_true(n < 1000);
    ember_alloc_fail_after(n);
    rc = ember_store_series(s, NULL, T0, T0 + 30 * SEC, &ser, &count);
    ember_alloc_fail_reset();
    if (rc != 0) assert_int_equal(rc, -ENOMEM);
  }
  assert_int_equal(count, 1);
  assert_string_equal(ser[0].labels.worker, "api");
  assert_null(ser[0].labels.actor);
  ember_store_series_free(ser, count);
  int64_t *cpu = NULL;
  size_t nb = 0;
  rc = -1;
  for (long n = 0; rc != 0; n++) {
    assert_true(n < 1000);
    ember_alloc_fail_after(n);
    rc = ember_store_cpu_timeline(s, NULL, T0, T0 + 30 * SEC, 10 * SEC, &cpu, &nb);
    ember_alloc_fail_reset();
    if (rc != 0) assert_int_equal(rc, -ENOMEM);
  }
  assert_int_equal(nb, 3);
  assert_int_equal(cpu[0], ember_profile_total(ps[0], 1));
  ember_free(cpu);
  uint64_t deleted = 1;
  rc = -1;
  for (long n = 0; rc != 0; n++) {
    assert_true(n < 1000);
    ember_alloc_fail_after(n);
    rc = ember_store_retain(s, T0, 0, &deleted);
    ember_alloc_fail_reset();
    if (rc != 0) assert_int_equal(rc, -ENOMEM);
  }
  assert_int_equal(deleted, 0);

  ember_profile_free(want);
  free_all(ps, 3);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_profile_with_10000_stacks(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "big");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *ps[2] = {
      make_window("api", "v1", "h", NULL, T0, "a", 1, 12000, 2000, 5),
      make_window("api", "v1", "h", NULL, T0 + 10 * SEC, "a", 2, 12000, 2000, 6)};
  assert_true(ember_profile_nstacks(ps[0]) >= 10000);
  assert_int_equal(ember_store_write(s, ps, 2, NULL), 0);
  ember_profile_t *want = merged(ps, 2), *got = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 20 * SEC, EMBER_VT_CPU_NS, &got), 0);
  assert_same_stacks(got, want, 1);
  ember_profile_free(got);
  ember_profile_free(want);
  free_all(ps, 2);
  ember_store_close(s);
  tu_store_remove(path);
}

/* Merge the windows of `ps` whose start lies in [from, to). */
static ember_profile_t *merged_range(ember_profile_t *const *ps, size_t n, int64_t from,
                                     int64_t to) {
  ember_profile_t *m = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &m), 0);
  for (size_t i = 0; i < n; i++) {
    int64_t a, b;
    ember_profile_window(ps[i], &a, &b);
    if (a >= from && a < to) assert_int_equal(ember_profile_merge(m, ps[i]), 0);
  }
  return m;
}

static void assert_range(ember_store_t *s, ember_profile_t *const *ps, size_t n, int64_t from,
                         int64_t to) {
  ember_profile_t *want = merged_range(ps, n, from, to), *got = NULL;
  assert_int_equal(ember_store_merge(s, NULL, from, to, EMBER_VT_CPU_SAMPLES, &got), 0);
  assert_same_stacks(got, want, 0);
  ember_profile_free(got);
  ember_profile_free(want);
}

static void test_store_hourly_rollups_merge_exactly(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "rollup");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  /* 12 hosts x 1000 windows from T0 - 20 min to T0 + 2 h 26 min: more rows
   * than a read transaction covers before it is renewed. */
  enum { HOSTS = 12, PER_HOST = 1000 };
  size_t n = HOSTS * PER_HOST;
  ember_profile_t **ps = calloc(n, sizeof *ps);
  assert_non_null(ps);
  for (size_t i = 0; i < n; i++) {
    char host[16];
    snprintf(host, sizeof host, "h%zu", i % HOSTS);
    ps[i] = make_window("api", "v1", host, NULL, T0 - 1200 * SEC + (int64_t)(i / HOSTS) * 10 * SEC,
                        host, i, 3, 40, i);
  }
  for (size_t b = 0; b < n; b += 500) assert_int_equal(ember_store_write(s, ps + b, 500, NULL), 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.rollup_rows, HOSTS * 4); /* hours T0-1h, T0, T0+1h, T0+2h */

  /* Ragged ends around two whole hours; exactly one hour; inside one hour
   * (4,320 raw rows); no whole hour; everything. */
  assert_range(s, ps, n, T0 - 1195 * SEC, T0 + 7200 * SEC + 125 * SEC);
  assert_range(s, ps, n, T0, T0 + 3600 * SEC);
  assert_range(s, ps, n, T0, T0 + 3599 * SEC);
  assert_range(s, ps, n, T0 - 600 * SEC, T0 + 600 * SEC);
  assert_range(s, ps, n, INT64_MIN, INT64_MAX);
  ember_profile_t *got = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 7200 * SEC, EMBER_VT_CPU_NS, &got), 0);
  int64_t a, b;
  ember_profile_window(got, &a, &b);
  assert_int_equal(a, T0);
  assert_int_equal(b, T0 + 7200 * SEC);
  assert_int_equal(ember_profile_period(got), 10000000);
  ember_profile_free(got);

  /* The CPU timeline reads every window (past a transaction renewal). */
  int64_t *cpu = NULL;
  size_t nb = 0;
  assert_int_equal(
      ember_store_cpu_timeline(s, NULL, T0 - 1200 * SEC, T0 + 9000 * SEC, 3600 * SEC, &cpu, &nb),
      0);
  int64_t sum = 0, want = 0;
  for (size_t i = 0; i < nb; i++) sum += cpu[i];
  for (size_t i = 0; i < n; i++) want += ember_profile_total(ps[i], 1);
  assert_int_equal(sum, want);
  ember_free(cpu);

  free_all(ps, n);
  free(ps);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_minute_rollups_merge_exactly(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "minute");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  /* 3 hosts x 1,000 windows from T0 - 25 min (2 h 41 min), plus a second
   * agent on host h0 with the same labels every 7th window (same key:
   * summed), written in batches of 450 that span several minutes and
   * hours, each batch repeating some of its own windows (duplicates inside
   * the batch) and one of the previous batch. */
  enum { HOSTS = 3, STEPS = 1000 };
  size_t cap = HOSTS * STEPS + STEPS / 7 + 1, n = 0;
  ember_profile_t **ps = calloc(cap, sizeof *ps);
  assert_non_null(ps);
  for (size_t t = 0; t < STEPS; t++) {
    int64_t start = T0 - 1500 * SEC + (int64_t)t * 10 * SEC;
    for (size_t h = 0; h < HOSTS; h++) {
      char host[16];
      snprintf(host, sizeof host, "h%zu", h);
      ps[n] = make_window("api", "v1", host, NULL, start, host, t, 6, 30, n);
      n++;
    }
    if (t % 7 == 0) {
      ps[n] = make_window("api", "v1", "h0", NULL, start, "other-agent", t, 6, 30, n);
      n++;
    }
  }
  size_t written = 0, dups = 0;
  enum { B = 450 };
  ember_profile_t *batch[B + 20];
  for (size_t b = 0; b < n; b += B) {
    size_t m = n - b < B ? n - b : B, k = 0;
    for (size_t i = 0; i < m; i++) {
      batch[k++] = ps[b + i];
      if (i % 40 == 39) batch[k++] = ps[b + i - 13]; /* a duplicate in this batch */
    }
    if (b) batch[k++] = ps[b - 1]; /* one from the previous batch */
    ember_store_write_result_t r;
    assert_int_equal(ember_store_write(s, batch, k, &r), 0);
    assert_int_equal(r.written + r.duplicates, k);
    written += r.written;
    dups += r.duplicates;
  }
  assert_int_equal(written, n);
  assert_true(dups > 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  /* 1,000 windows of 10 s = 167 minutes (the first starts on a minute). */
  assert_int_equal(st.rollup_1m_rows, HOSTS * 167);
  assert_int_equal(st.rollup_rows, HOSTS * 4);

  /* Whole hours with whole minutes and ragged ends on both sides; whole
   * minutes only; inside one minute; exactly one minute; exactly one hour
   * plus one minute; everything; then pseudo-random ranges. */
  assert_range(s, ps, n, T0 - 1195 * SEC, T0 + 7200 * SEC + 125 * SEC);
  assert_range(s, ps, n, T0 + 60 * SEC, T0 + 1800 * SEC);
  assert_range(s, ps, n, T0 + 65 * SEC, T0 + 1795 * SEC);
  assert_range(s, ps, n, T0 + 61 * SEC, T0 + 119 * SEC);
  assert_range(s, ps, n, T0 + 60 * SEC, T0 + 120 * SEC);
  assert_range(s, ps, n, T0 - 60 * SEC, T0 + 3600 * SEC);
  assert_range(s, ps, n, INT64_MIN, INT64_MAX);
  uint64_t x = 42;
  for (int i = 0; i < 40; i++) {
    int64_t a = T0 - 1600 * SEC + (int64_t)(rng_next(&x) % 10000) * SEC;
    int64_t len = 1 + (int64_t)(rng_next(&x) % 9000) * SEC;
    assert_range(s, ps, n, a, a + len);
  }
  /* A range that starts on a minute inside the data starts the result
   * there. */
  ember_profile_t *got = NULL;
  assert_int_equal(
      ember_store_merge(s, NULL, T0 + 60 * SEC, T0 + 1800 * SEC, EMBER_VT_CPU_NS, &got), 0);
  int64_t a, b;
  ember_profile_window(got, &a, &b);
  assert_int_equal(a, T0 + 60 * SEC);
  assert_int_equal(b, T0 + 1800 * SEC);
  ember_profile_free(got);

  free_all(ps, n);
  free(ps);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_retention_deletes_whole_hours(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "retain");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  /* Two hosts, one window a minute for three hours from T0. */
  enum { N = 2 * 180 };
  ember_profile_t *ps[N];
  for (size_t i = 0; i < N; i++)
    ps[i] = make_window("api", "v1", i % 2 ? "h1" : "h2", NULL, T0 + (int64_t)(i / 2) * 60 * SEC,
                        i % 2 ? "a1" : "a2", i, 4, 10, i);
  assert_int_equal(ember_store_write(s, ps, N, NULL), 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, N);
  assert_int_equal(st.rollup_rows, 6);
  assert_int_equal(st.rollup_1m_rows, N);

  /* The cutoff rounds down to T0 + 1 h; 7 deletions per transaction. */
  uint64_t deleted = 0;
  assert_int_equal(ember_store_retain(s, T0 + 5400 * SEC, 7, &deleted), 0);
  /* 120 windows, 120 CPU points, 2 hour and 120 minute rollups, 120
   * idempotency keys. */
  assert_int_equal(deleted, 120 + 120 + 2 + 120 + 120);
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, N - 120);
  assert_int_equal(st.cpu_rows, N - 120);
  assert_int_equal(st.rollup_rows, 4);
  assert_int_equal(st.rollup_1m_rows, N - 120);
  assert_int_equal(st.idem_keys, N - 120);
  /* Minute rollups of the remaining hours still merge exactly. */
  assert_range(s, ps, N, T0 + 3660 * SEC, T0 + 3 * 3600 * SEC - 60 * SEC);
  assert_int_equal(merge_total(s, NULL, T0, T0 + 3600 * SEC), 0);
  assert_range(s, ps, N, T0 + 3600 * SEC, T0 + 3 * 3600 * SEC);
  assert_range(s, ps + 120, N - 120, T0, T0 + 3 * 3600 * SEC + 1);

  /* A replay of a deleted window stays deleted; a newer one is a dup. */
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write(s, ps, 4, &r), 0);
  assert_int_equal(r.expired, 4);
  assert_int_equal(r.written + r.duplicates, 0);
  assert_int_equal(ember_store_write(s, ps + N - 2, 2, &r), 0);
  assert_int_equal(r.duplicates, 2);
  /* An earlier cutoff does not move it back; retaining again is a no-op. */
  assert_int_equal(ember_store_retain(s, T0, 0, &deleted), 0);
  assert_int_equal(deleted, 0);
  assert_int_equal(ember_store_write(s, ps, 1, &r), 0);
  assert_int_equal(r.expired, 1);

  free_all(ps, N);
  ember_store_close(s);
  tu_store_remove(path);
}

/* Session results are kept apart from the series: they never show in
 * ember_store_merge, are stored once per (session, agent, seq), merge by
 * session into one value type, and go with retention. */
static void test_store_session_results(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "store", "session");
  tu_store_remove(path);
  ember_store_t *s = tu_store_open(path, (size_t)256 << 20);
  ember_profile_t *ps[4];
  ps[0] = make_window("api", "v1", "h1", "A", T0, "a1", 1, 6, 8, 1);
  ps[1] = make_window("api", "v1", "h2", "B", T0 + 60 * SEC, "a2", 1, 5, 8, 2);
  ps[2] = make_window("api", "v1", "h1", "A", T0 + 2 * 3600 * SEC, "a1", 2, 4, 8, 3);
  ps[3] = make_window("api", "v1", "h1", "A", T0, NULL, 0, 3, 8, 4);
  assert_int_equal(ember_profile_set_origin(ps[0], "a1", 1, "s-one"), 0);
  assert_int_equal(ember_profile_set_origin(ps[1], "a2", 1, "s-one"), 0);
  assert_int_equal(ember_profile_set_origin(ps[2], "a1", 2, "s-two"), 0);
  assert_int_equal(ember_profile_set_origin(ps[3], NULL, 0, "s-one"), 0);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_session_add(s, ps, 4, &r), 0);
  assert_int_equal(r.written, 4);
  /* A replay is a duplicate, also without an agent id. */
  assert_int_equal(ember_store_session_add(s, ps, 4, &r), 0);
  assert_int_equal(r.duplicates, 4);
  assert_int_equal(r.written, 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.session_rows, 4);
  assert_int_equal(st.profile_rows, 0);
  assert_int_equal(merge_total(s, NULL, T0 - 3600 * SEC, T0 + 5 * 3600 * SEC), 0);

  ember_profile_t *m = NULL;
  ember_store_session_info_t info;
  assert_int_equal(ember_store_session_merge(s, "s-one", EMBER_VT_CPU_SAMPLES, &m, &info), 0);
  assert_int_equal(info.results, 3);
  assert_int_equal(info.matched, 3);
  ember_profile_t *want[] = {ps[0], ps[1], ps[3]};
  ember_profile_t *w = merged(want, 3);
  assert_int_equal(ember_profile_total(m, 0), ember_profile_total(w, 0));
  assert_same_stacks(m, w, 0);
  assert_null(ember_profile_labels(m)->host); /* two hosts */
  assert_string_equal(ember_profile_labels(m)->worker, "api");
  int64_t ws, we;
  ember_profile_window(m, &ws, &we);
  assert_true(ws == T0 && we == T0 + 70 * SEC);
  ember_profile_free(m);
  ember_profile_free(w);
  /* Another value type, another session, an unknown one. */
  assert_int_equal(ember_store_session_merge(s, "s-two", EMBER_VT_CPU_NS, &m, &info), 0);
  assert_int_equal(ember_profile_total(m, 0), ember_profile_total(ps[2], 1));
  assert_string_equal(ember_profile_labels(m)->host, "h1");
  ember_profile_free(m);
  assert_int_equal(ember_store_session_merge(s, "s-one", EMBER_VT_ALLOC_BYTES, &m, &info), 0);
  assert_int_equal(info.results, 3);
  assert_int_equal(info.matched, 0);
  assert_int_equal(ember_profile_nstacks(m), 0);
  ember_profile_free(m);
  assert_int_equal(ember_store_session_merge(s, "s-on", EMBER_VT_CPU_NS, &m, &info), 0);
  assert_int_equal(info.results, 0);
  ember_profile_free(m);
  /* Bad arguments: no session id. */
  ember_profile_t *plain = make_window("api", "v1", "h1", NULL, T0, "a9", 1, 1, 2, 5);
  assert_int_equal(ember_store_session_add(s, &plain, 1, NULL), -EINVAL);
  assert_int_equal(ember_store_session_merge(s, "", EMBER_VT_CPU_NS, &m, NULL), -EINVAL);

  /* Retention takes what started before the cutoff hour; replays of it stay out. */
  uint64_t deleted = 0;
  assert_int_equal(ember_store_retain(s, T0 + 3600 * SEC, 1, &deleted), 0);
  assert_int_equal(deleted, 3);
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.session_rows, 1);
  assert_int_equal(ember_store_session_add(s, ps, 4, &r), 0);
  assert_int_equal(r.expired, 3);
  assert_int_equal(r.duplicates, 1);
  assert_int_equal(ember_store_session_merge(s, "s-one", EMBER_VT_CPU_NS, &m, &info), 0);
  assert_int_equal(info.results, 0);
  ember_profile_free(m);

  ember_profile_free(plain);
  free_all(ps, 4);
  ember_store_close(s);
  tu_store_remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_roundtrip_equals_profile_merge),
      cmocka_unit_test(test_store_selects_by_each_label),
      cmocka_unit_test(test_store_time_range_is_half_open),
      cmocka_unit_test(test_store_sum_overflow_refuses_the_window),
      cmocka_unit_test(test_store_duplicate_seq_writes_nothing),
      cmocka_unit_test(test_store_stack_dictionary_dedup),
      cmocka_unit_test(test_store_cpu_timelines_per_series),
      cmocka_unit_test(test_store_reopen_persists),
      cmocka_unit_test(test_store_schema_newer_refused),
      cmocka_unit_test(test_store_rejects_bad_arguments),
      cmocka_unit_test(test_store_alloc_failures),
      cmocka_unit_test(test_store_profile_with_10000_stacks),
      cmocka_unit_test(test_store_hourly_rollups_merge_exactly),
      cmocka_unit_test(test_store_minute_rollups_merge_exactly),
      cmocka_unit_test(test_store_retention_deletes_whole_hours),
      cmocka_unit_test(test_store_session_results),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
