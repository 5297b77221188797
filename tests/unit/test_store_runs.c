/* Where the store's windows came from: runs of Kafka partitions, pending
 * windows and (series, partition) pairs written with the windows
 * (ember_store_write_from), forgotten on commit (ember_store_committed),
 * subtracted exactly on undo (ember_store_undo: a store that undid windows
 * answers as one that never had them), listed (ember_store_runs), retained,
 * verified, and read from a store made before the tables. */
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
#include <zlib.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/store.h"

#define SEC 1000000000LL
#define T0  (1764460800LL * SEC) /* 2025-11-30T00:00:00Z, an hour boundary */

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

static ember_store_t *open_opts(const char *path, const ember_store_opts_t *o) {
  ember_store_t *s = NULL;
  char err[256];
  int rc = ember_store_open(path, o, &s, err, sizeof err);
  if (rc != 0) fail_msg("open %s: %s", path, err);
  return s;
}

static ember_store_t *open_store(const char *path) {
  ember_store_opts_t o = {.map_size = (size_t)128 << 20, .no_sync = true};
  return open_opts(path, &o);
}

static uint64_t rng_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* A CPU window of `nstacks` pseudo-random stacks over `nfuncs` functions;
 * the same seed gives the same stacks. nstacks 0 is an idle window. */
static ember_profile_t *make_window(const char *worker, const char *host, int64_t start,
                                    const char *agent, uint64_t seq, size_t nstacks,
                                    unsigned nfuncs, uint64_t seed) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  ember_labels_t l = {.worker = worker, .version = "v1", .host = host};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, 10000000);
  if (agent) assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  uint64_t x = seed * 2654435761u + 1;
  char names[16][32];
  for (size_t i = 0; i < nstacks; i++) {
    ember_frame_t frames[16];
    size_t depth = 1 + (size_t)(rng_next(&x) % 8);
    for (size_t d = 0; d < depth; d++) {
      snprintf(names[d], sizeof names[d], "fn%u", (unsigned)(rng_next(&x) % nfuncs));
      frames[d] = (ember_frame_t){.function = names[d],
                                  .module = "/usr/bin/app",
                                  .line = (uint32_t)d,
                                  .address = 0x1000 + d,
                                  .kind = EMBER_FRAME_NATIVE};
    }
    int64_t n = 1 + (int64_t)(rng_next(&x) % 50);
    int64_t values[2] = {n, n * 10000000 + (int64_t)(rng_next(&x) % 1000)};
    assert_int_equal(ember_profile_add(p, frames, depth, values), 0);
  }
  return p;
}

/* One line per stack, "frame|frame|...=value", sorted. */
typedef struct lines {
  char **v;
  size_t n;
} lines_t;

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static lines_t canon(const ember_profile_t *p) {
  lines_t l = {.n = ember_profile_nstacks(p)};
  l.v = calloc(l.n ? l.n : 1, sizeof *l.v);
  assert_non_null(l.v);
  for (uint32_t i = 0; i < l.n; i++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *vals;
    assert_int_equal(ember_profile_stack(p, i, &ids, &depth, &vals), 0);
    size_t cap = 64 + depth * 64, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    for (size_t d = 0; d < depth; d++) {
      const ember_frame_t *f = ember_profile_frame(p, ids[d]);
      len += (size_t)snprintf(s + len, cap - len, "%s:%u|", f->function, f->line);
    }
    snprintf(s + len, cap - len, "=%lld", (long long)vals[0]);
    l.v[i] = s;
  }
  qsort(l.v, l.n, sizeof *l.v, cmp_str);
  return l;
}

static void lines_free(lines_t *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

/* The two stores merge [from, to) to the same stacks, values, window and
 * period, for both value types. */
static void assert_same_merge(ember_store_t *a, ember_store_t *b, int64_t from, int64_t to) {
  for (size_t vi = 0; vi < 2; vi++) {
    ember_profile_t *pa = NULL, *pb = NULL;
    assert_int_equal(ember_store_merge(a, NULL, from, to, cpu_types[vi], &pa), 0);
    assert_int_equal(ember_store_merge(b, NULL, from, to, cpu_types[vi], &pb), 0);
    lines_t la = canon(pa), lb = canon(pb);
    if (la.n != lb.n)
      fail_msg("[%lld, %lld): %zu stacks, want %zu", (long long)(from - T0), (long long)(to - T0),
               la.n, lb.n);
    for (size_t i = 0; i < la.n; i++) assert_string_equal(la.v[i], lb.v[i]);
    lines_free(&la);
    lines_free(&lb);
    assert_int_equal(ember_profile_total(pa, 0), ember_profile_total(pb, 0));
    int64_t as, ae, bs, be;
    ember_profile_window(pa, &as, &ae);
    ember_profile_window(pb, &bs, &be);
    assert_int_equal(as, bs);
    assert_int_equal(ae, be);
    assert_int_equal(ember_profile_period(pa), ember_profile_period(pb));
    ember_profile_free(pa);
    ember_profile_free(pb);
  }
}

static bool same_str(const char *a, const char *b) {
  return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same_labels(const ember_labels_t *a, const ember_labels_t *b) {
  return same_str(a->worker, b->worker) && same_str(a->version, b->version) &&
         same_str(a->host, b->host) && same_str(a->actor, b->actor);
}

/* The two stores have the same CPU timelines over [from, to): the same
 * series (matched by labels: ids differ between stores), spans, values
 * and totals. */
static void assert_same_timelines(ember_store_t *a, ember_store_t *b, int64_t from, int64_t to,
                                  int64_t step) {
  ember_store_timelines_t *ta = NULL, *tb = NULL;
  assert_int_equal(ember_store_cpu_timelines(a, NULL, from, to, step, 0, &ta), 0);
  assert_int_equal(ember_store_cpu_timelines(b, NULL, from, to, step, 0, &tb), 0);
  assert_int_equal(ta->nbuckets, tb->nbuckets);
  assert_int_equal(ta->nseries, tb->nseries);
  for (size_t x = 0; x < ta->nbuckets; x++) assert_int_equal(ta->total[x], tb->total[x]);
  for (size_t i = 0; i < ta->nseries; i++) {
    size_t j = 0;
    while (j < tb->nseries && !same_labels(&ta->series[i].labels, &tb->series[j].labels)) j++;
    assert_true(j < tb->nseries);
    assert_int_equal(ta->series[i].first_ns, tb->series[j].first_ns);
    assert_int_equal(ta->series[i].last_ns, tb->series[j].last_ns);
    for (size_t x = 0; x < ta->nbuckets; x++)
      assert_int_equal(ta->cpu[i * ta->nbuckets + x], tb->cpu[j * tb->nbuckets + x]);
  }
  ember_store_timelines_free(ta);
  ember_store_timelines_free(tb);
}

/* Rows of every kind are the same in number. */
static void assert_same_rows(ember_store_t *a, ember_store_t *b) {
  ember_store_stats_t sa, sb;
  assert_int_equal(ember_store_stats(a, &sa), 0);
  assert_int_equal(ember_store_stats(b, &sb), 0);
  assert_int_equal(sa.profile_rows, sb.profile_rows);
  assert_int_equal(sa.rollup_1m_rows, sb.rollup_1m_rows);
  assert_int_equal(sa.rollup_rows, sb.rollup_rows);
  assert_int_equal(sa.cpu_rows, sb.cpu_rows);
  assert_int_equal(sa.idem_keys, sb.idem_keys);
}

static void get_runs(ember_store_t *s, ember_store_run_t **runs, size_t *n) {
  *runs = NULL;
  *n = 0;
  assert_int_equal(ember_store_runs(s, runs, n), 0);
}

static const ember_store_run_t *find_run(const ember_store_run_t *runs, size_t n, int32_t p,
                                         int64_t start) {
  for (size_t i = 0; i < n; i++)
    if (runs[i].partition == p && runs[i].start == start) return &runs[i];
  fail_msg("no run %d/%lld", (int)p, (long long)start);
  static const ember_store_run_t none; /* not reached: fail_msg does not return */
  return &none;
}

static uint64_t stat_pending(ember_store_t *s) {
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  return st.pending_rows;
}

/* Written with sources, windows show in their runs: start, stored end,
 * committed (= start at first), started_ns, first and last window, count,
 * pending; a duplicate extends its run without being pending, an expired
 * window does neither; sources NULL is ember_store_write; a bad source
 * writes nothing. */
static void test_store_runs_write_shows_runs(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "runs", "show");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  ember_profile_t *ps[6];
  for (size_t i = 0; i < 6; i++)
    ps[i] = make_window("api", i < 4 ? "h0" : "h1", T0 + (int64_t)i * 10 * SEC, "agent",
                        (uint64_t)i, 3, 10, i);
  /* Partition 3: offsets 100..103 of the run started at 100; partition 1:
   * offsets 7 and 9 of the run started at 5. */
  ember_store_source_t src[6] = {
      {3, 100, 100, 111}, {3, 101, 100, 111}, {3, 102, 100, 111},
      {3, 103, 100, 111}, {1, 7, 5, 222},     {1, 9, 5, 222},
  };
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write_from(s, ps, src, 6, &r), 0);
  assert_int_equal(r.written, 6);
  ember_store_run_t *runs;
  size_t n;
  get_runs(s, &runs, &n);
  assert_int_equal(n, 2);
  /* By partition, then start. */
  assert_int_equal(runs[0].partition, 1);
  assert_int_equal(runs[0].start, 5);
  assert_int_equal(runs[0].stored_end, 10);
  assert_int_equal(runs[0].committed, 5);
  assert_int_equal(runs[0].started_ns, 222);
  assert_int_equal(runs[0].tmin_ns, T0 + 40 * SEC);
  assert_int_equal(runs[0].tmax_ns, T0 + 50 * SEC);
  assert_int_equal(runs[0].windows, 2);
  assert_int_equal(runs[0].pending, 2);
  assert_int_equal(runs[1].partition, 3);
  assert_int_equal(runs[1].start, 100);
  assert_int_equal(runs[1].stored_end, 104);
  assert_int_equal(runs[1].started_ns, 111);
  assert_int_equal(runs[1].tmin_ns, T0);
  assert_int_equal(runs[1].tmax_ns, T0 + 30 * SEC);
  assert_int_equal(runs[1].windows, 4);
  assert_int_equal(runs[1].pending, 4);
  ember_store_runs_free(runs);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.run_rows, 2);
  assert_int_equal(st.pending_rows, 6);
  assert_int_equal(st.series_parts, 2); /* api/h0 on 3, api/h1 on 1 */

  /* Read again in a new run of partition 3 (a reset): duplicates, which
   * extend that run but are not pending. The first run keeps its
   * started_ns. */
  ember_store_source_t again[2] = {{3, 104, 104, 333}, {3, 105, 104, 333}};
  assert_int_equal(ember_store_write_from(s, ps, again, 2, &r), 0);
  assert_int_equal(r.duplicates, 2);
  get_runs(s, &runs, &n);
  assert_int_equal(n, 3);
  const ember_store_run_t *nr = find_run(runs, n, 3, 104);
  assert_int_equal(nr->stored_end, 106);
  assert_int_equal(nr->windows, 2);
  assert_int_equal(nr->pending, 0);
  assert_int_equal(nr->started_ns, 333);
  assert_int_equal(nr->tmin_ns, T0);
  assert_int_equal(nr->tmax_ns, T0 + 10 * SEC);
  assert_int_equal(find_run(runs, n, 3, 100)->pending, 4);
  ember_store_runs_free(runs);

  /* A later batch of the same run extends it: stored end, last window, count. */
  ember_profile_t *later = make_window("api", "h0", T0 + 3600 * SEC, "agent", 99, 3, 10, 99);
  ember_store_source_t ls = {3, 120, 100, 999};
  assert_int_equal(ember_store_write_from(s, &later, &ls, 1, &r), 0);
  get_runs(s, &runs, &n);
  const ember_store_run_t *r1 = find_run(runs, n, 3, 100);
  assert_int_equal(r1->stored_end, 121);
  assert_int_equal(r1->tmin_ns, T0);
  assert_int_equal(r1->tmax_ns, T0 + 3600 * SEC);
  assert_int_equal(r1->windows, 5);
  assert_int_equal(r1->pending, 5);
  assert_int_equal(r1->started_ns, 111);
  ember_store_runs_free(runs);
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.series_parts, 2);

  /* Expired windows: neither pending nor in a run. */
  uint64_t deleted = 0;
  assert_int_equal(ember_store_retain(s, T0 + 1800 * SEC, 0, &deleted), 0); /* cutoff T0 */
  ember_profile_t *old = make_window("api", "h9", T0 - 60 * SEC, "agent", 1000, 3, 10, 5);
  ember_store_source_t os = {8, 1, 0, 1};
  assert_int_equal(ember_store_write_from(s, &old, &os, 1, &r), 0);
  assert_int_equal(r.expired, 1);
  get_runs(s, &runs, &n);
  for (size_t i = 0; i < n; i++) assert_int_not_equal(runs[i].partition, 8);
  ember_store_runs_free(runs);

  /* sources NULL: ember_store_write, no run, nothing pending. */
  ember_profile_t *plain = make_window("api", "h0", T0 + 7200 * SEC, "agent", 500, 3, 10, 7);
  uint64_t pend = stat_pending(s);
  assert_int_equal(ember_store_write_from(s, &plain, NULL, 1, &r), 0);
  assert_int_equal(r.written, 1);
  assert_int_equal(stat_pending(s), pend);

  /* Bad sources: nothing written. */
  ember_profile_t *fresh = make_window("api", "h0", T0 + 7300 * SEC, "agent", 501, 3, 10, 8);
  const ember_store_source_t bad[] = {
      {-1, 5, 0, 0}, {0, -1, 0, 0}, {0, 5, -1, 0}, {0, 4, 5, 0}, {0, INT64_MAX, 0, 0}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(ember_store_write_from(s, &fresh, &bad[i], 1, NULL), -EINVAL);
  assert_int_equal(ember_store_write(s, &fresh, 1, &r), 0);
  assert_int_equal(r.written, 1);
  assert_int_equal(ember_store_write_from(NULL, &fresh, &src[0], 1, NULL), -EINVAL);
  assert_int_equal(ember_store_runs(s, NULL, &n), -EINVAL);
  assert_int_equal(ember_store_runs(NULL, &runs, &n), -EINVAL);
  ember_store_runs_free(NULL);

  ember_profile_free(later);
  ember_profile_free(old);
  ember_profile_free(plain);
  ember_profile_free(fresh);
  for (size_t i = 0; i < 6; i++) ember_profile_free(ps[i]);
  ember_store_close(s);
  tu_store_remove(path);
}

/* committed() forgets the partition's pending windows below the offset
 * (of every run, and only of that partition), records the offset in the
 * run, never moves it back, and records nothing for a run it does not
 * hold. */
static void test_store_runs_committed_clears_pending(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "runs", "commit");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  enum { N = 12 };
  ember_profile_t *ps[N];
  ember_store_source_t src[N];
  for (size_t i = 0; i < N; i++) {
    ps[i] = make_window("api", "h0", T0 + (int64_t)i * 10 * SEC, "agent", i, 2, 8, i);
    /* Partition 0: offsets 0..3 (run 0) and 10..13 (run 10); partition 1: 0..3. */
    if (i < 4)
      src[i] = (ember_store_source_t){0, (int64_t)i, 0, 1};
    else if (i < 8)
      src[i] = (ember_store_source_t){0, 10 + (int64_t)i - 4, 10, 2};
    else
      src[i] = (ember_store_source_t){1, (int64_t)i - 8, 0, 3};
  }
  assert_int_equal(ember_store_write_from(s, ps, src, N, NULL), 0);
  assert_int_equal(stat_pending(s), N);

  assert_int_equal(ember_store_committed(s, 0, 10, 12), 0);
  ember_store_run_t *runs;
  size_t n;
  get_runs(s, &runs, &n);
  assert_int_equal(n, 3);
  assert_int_equal(find_run(runs, n, 0, 0)->pending, 0);
  assert_int_equal(find_run(runs, n, 0, 0)->committed, 0); /* another run's commit */
  assert_int_equal(find_run(runs, n, 0, 10)->pending, 2);
  assert_int_equal(find_run(runs, n, 0, 10)->committed, 12);
  assert_int_equal(find_run(runs, n, 0, 10)->windows, 4);
  assert_int_equal(find_run(runs, n, 1, 0)->pending, 4);
  ember_store_runs_free(runs);
  assert_int_equal(stat_pending(s), 6);

  /* Back in time: nothing moves. A run the store does not hold: pending
   * still goes, nothing else. */
  assert_int_equal(ember_store_committed(s, 0, 10, 11), 0);
  assert_int_equal(ember_store_committed(s, 1, 77, 2), 0);
  get_runs(s, &runs, &n);
  assert_int_equal(n, 3);
  assert_int_equal(find_run(runs, n, 0, 10)->committed, 12);
  assert_int_equal(find_run(runs, n, 1, 0)->pending, 2);
  assert_int_equal(find_run(runs, n, 1, 0)->committed, 0);
  ember_store_runs_free(runs);
  assert_int_equal(ember_store_committed(s, 0, 10, INT64_MAX), 0);
  assert_int_equal(ember_store_committed(s, 1, 0, 4), 0);
  assert_int_equal(stat_pending(s), 0);

  /* Committed windows are not undone. */
  uint64_t undone = 9;
  assert_int_equal(ember_store_undo(s, 0, 0, INT64_MAX, &undone), 0);
  assert_int_equal(undone, 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, N);

  assert_int_equal(ember_store_committed(NULL, 0, 0, 0), -EINVAL);
  assert_int_equal(ember_store_committed(s, -1, 0, 0), -EINVAL);
  assert_int_equal(ember_store_committed(s, 0, -1, 0), -EINVAL);
  assert_int_equal(ember_store_committed(s, 0, 0, -1), -EINVAL);
  assert_int_equal(ember_store_undo(NULL, 0, 0, 1, NULL), -EINVAL);
  assert_int_equal(ember_store_undo(s, -1, 0, 1, NULL), -EINVAL);
  assert_int_equal(ember_store_undo(s, 0, -1, 1, NULL), -EINVAL);
  assert_int_equal(ember_store_undo(s, 0, 5, 4, NULL), -EINVAL);
  assert_int_equal(ember_store_undo(s, 0, 5, 5, NULL), 0);
  ember_store_close(s);

  /* Read-only: both refuse. */
  ember_store_opts_t ro = {.read_only = true};
  s = open_opts(path, &ro);
  assert_int_equal(ember_store_committed(s, 0, 0, 1), -EACCES);
  assert_int_equal(ember_store_undo(s, 0, 0, 1, NULL), -EACCES);
  assert_int_equal(ember_store_write_from(s, ps, src, 1, NULL), -EACCES);
  get_runs(s, &runs, &n);
  assert_int_equal(n, 3);
  ember_store_runs_free(runs);
  ember_store_close(s);

  for (size_t i = 0; i < N; i++) ember_profile_free(ps[i]);
  tu_store_remove(path);
}

/* The windows of the undo test: every 10 s from T0 - 10 min for 80 min
 * (two hour boundaries, many minutes), on three series: api/h0 and db/h2
 * from agent tw-a on partition 0, api/h1 on partition 1, and every third
 * step a second process of db/h2 (same labels, agent tw-b) on partition 1,
 * which shares db/h2's rows. */
typedef struct stream {
  ember_profile_t **ps;
  ember_store_source_t *src;
  size_t n;
} stream_t;

enum { STEPS = 480 };

static stream_t make_stream(int64_t run2_at) {
  stream_t st = {.ps = calloc(4 * STEPS, sizeof(ember_profile_t *)),
                 .src = calloc(4 * STEPS, sizeof(ember_store_source_t))};
  assert_non_null(st.ps);
  assert_non_null(st.src);
  int64_t off[2] = {0, 0};
  for (size_t t = 0; t < STEPS; t++) {
    int64_t start = T0 - 600 * SEC + (int64_t)t * 10 * SEC;
    for (int k = 0; k < 4; k++) {
      if (k == 3 && t % 3 != 0) continue;
      static const char *const worker[] = {"api", "api", "db", "db"};
      static const char *const host[] = {"h0", "h1", "h2", "h2"};
      static const char *const agent[] = {"tw-a", "ag-1", "tw-a", "tw-b"};
      static const int32_t part[] = {0, 1, 0, 1};
      int32_t p = part[k];
      st.ps[st.n] = make_window(worker[k], host[k], start, agent[k], t * 4 + (uint64_t)k,
                                2 + (t + (size_t)k) % 5, 12, st.n + 1);
      /* Partition 0 is read in two runs: from 0, then (a restart) from run2_at. */
      int64_t o = off[p]++;
      int64_t rs = p == 0 && o >= run2_at ? run2_at : 0;
      st.src[st.n] = (ember_store_source_t){p, o, rs, rs == 0 ? 1000 : 2000};
      st.n++;
    }
  }
  return st;
}

static void stream_free(stream_t *st) {
  for (size_t i = 0; i < st->n; i++) ember_profile_free(st->ps[i]);
  free(st->ps);
  free(st->src);
}

static void write_batches(ember_store_t *s, ember_profile_t **ps, const ember_store_source_t *src,
                          size_t n, size_t batch) {
  for (size_t b = 0; b < n; b += batch) {
    size_t m = n - b < batch ? n - b : batch;
    ember_store_write_result_t r;
    assert_int_equal(ember_store_write_from(s, ps + b, src ? src + b : NULL, m, &r), 0);
    assert_int_equal(r.written, m);
  }
}

static void compare_all(ember_store_t *a, ember_store_t *b) {
  /* Everything; exactly one hour; whole hours with ragged ends; whole
   * minutes only; ragged minutes; inside one minute; then pseudo-random
   * ranges. */
  assert_same_merge(a, b, INT64_MIN, INT64_MAX);
  assert_same_merge(a, b, T0, T0 + 3600 * SEC);
  assert_same_merge(a, b, T0 - 595 * SEC, T0 + 4205 * SEC);
  assert_same_merge(a, b, T0 + 60 * SEC, T0 + 1800 * SEC);
  assert_same_merge(a, b, T0 + 65 * SEC, T0 + 1795 * SEC);
  assert_same_merge(a, b, T0 + 1201 * SEC, T0 + 1259 * SEC);
  assert_same_merge(a, b, T0 - 60 * SEC, T0 + 3660 * SEC);
  uint64_t x = 7;
  for (int i = 0; i < 30; i++) {
    int64_t from = T0 - 700 * SEC + (int64_t)(rng_next(&x) % 5400) * SEC;
    int64_t len = 1 + (int64_t)(rng_next(&x) % 4000) * SEC;
    assert_same_merge(a, b, from, from + len);
  }
  assert_same_timelines(a, b, T0 - 600 * SEC, T0 + 4200 * SEC, 60 * SEC);
  assert_same_timelines(a, b, T0 - 3600 * SEC, T0 + 7200 * SEC, 3600 * SEC);
  assert_same_timelines(a, b, T0 + 95 * SEC, T0 + 1000 * SEC, 7 * SEC);
  assert_same_rows(a, b);
}

/* Undoing a range of pending windows leaves the store answering exactly as
 * a store that never had them (merges over ranges that read windows,
 * minute and hour rollups; timelines; series spans; row counts), including
 * rows shared with another process of the same labels; the windows'
 * idempotency keys are gone so they can be written again, once; undoing
 * again does nothing. */
static void test_store_runs_undo_restores_exactly(void **state) {
  (void)state;
  char pa[512], pb[512];
  tu_store_path(pa, sizeof pa, "runs", "undo_a");
  tu_store_path(pb, sizeof pb, "runs", "undo_b");
  tu_store_remove(pa);
  tu_store_remove(pb);
  stream_t st = make_stream(700);
  ember_store_t *a = open_store(pa), *b = open_store(pb);
  write_batches(a, st.ps, st.src, st.n, 250);
  /* Partition 0 committed up to 300 in its first run. */
  assert_int_equal(ember_store_committed(a, 0, 0, 300), 0);
  /* Undo [200, 900) of partition 0: only [300, 900) is pending; it spans
   * the restart at 700, whole minutes and an hour boundary (offsets 300
   * and 900 are the windows at T0 + 15 min and T0 + 65 min). */
  const int64_t u0 = 200, u1 = 900;
  uint64_t undone = 0;
  assert_int_equal(ember_store_undo(a, 0, u0, u1, &undone), 0);
  assert_int_equal(undone, (uint64_t)(u1 - 300));

  /* The reference: the same windows without the undone ones. */
  ember_profile_t **keep = calloc(st.n, sizeof *keep), **gone = calloc(st.n, sizeof *gone);
  ember_store_source_t *gone_src = calloc(st.n, sizeof *gone_src);
  assert_non_null(keep);
  assert_non_null(gone);
  assert_non_null(gone_src);
  size_t nkeep = 0, ngone = 0;
  bool shared = false;
  for (size_t i = 0; i < st.n; i++) {
    bool undo = st.src[i].partition == 0 && st.src[i].offset >= 300 && st.src[i].offset < u1;
    if (undo) {
      gone_src[ngone] = st.src[i];
      gone[ngone++] = st.ps[i];
      /* A db/h2 window of tw-a whose row tw-b shares. */
      if (i + 1 < st.n && strcmp(ember_profile_agent_id(st.ps[i + 1]), "tw-b") == 0) shared = true;
    } else {
      keep[nkeep++] = st.ps[i];
    }
  }
  assert_int_equal(ngone, undone);
  assert_true(shared);
  write_batches(b, keep, NULL, nkeep, 300);
  compare_all(a, b);

  /* Runs: the undone windows are off both runs of partition 0, and no
   * longer pending. */
  ember_store_run_t *runs;
  size_t n;
  get_runs(a, &runs, &n);
  assert_int_equal(n, 3);
  const ember_store_run_t *r0 = find_run(runs, n, 0, 0), *r1 = find_run(runs, n, 0, 700);
  assert_int_equal(r0->windows, 700 - (700 - 300));
  assert_int_equal(r0->pending, 0);
  assert_int_equal(r0->stored_end, 700);
  assert_int_equal(r1->windows, find_run(runs, n, 0, 700)->stored_end - 700 - (u1 - 700));
  assert_int_equal(r1->pending, r1->windows);
  assert_int_equal(find_run(runs, n, 1, 0)->pending, find_run(runs, n, 1, 0)->windows);
  ember_store_runs_free(runs);

  /* Again: nothing to undo, nothing changes. */
  assert_int_equal(ember_store_undo(a, 0, u0, u1, &undone), 0);
  assert_int_equal(undone, 0);
  assert_int_equal(ember_store_undo(a, 0, 0, INT64_MAX, NULL), 0); /* the rest of run 700 */
  assert_int_equal(ember_store_undo(a, 1, 0, INT64_MAX, NULL), 0); /* partition 1 */
  /* Put them back, then compare with a store of everything. */
  ember_profile_t **rest = calloc(st.n, sizeof *rest);
  ember_store_source_t *rest_src = calloc(st.n, sizeof *rest_src);
  assert_non_null(rest);
  assert_non_null(rest_src);
  size_t nrest = 0;
  for (size_t i = 0; i < st.n; i++) {
    bool committed = st.src[i].partition == 0 && st.src[i].offset < 300;
    if (committed) continue;
    rest_src[nrest] = st.src[i];
    rest[nrest++] = st.ps[i];
  }
  ember_store_stats_t sst;
  assert_int_equal(ember_store_stats(a, &sst), 0);
  assert_int_equal(sst.pending_rows, 0);
  /* Only the committed windows are left. */
  assert_int_equal(sst.idem_keys, 300);
  ember_store_close(b);
  tu_store_remove(pb);
  b = open_store(pb);
  for (size_t i = 0; i < st.n; i++)
    if (st.src[i].partition == 0 && st.src[i].offset < 300)
      assert_int_equal(ember_store_write(b, &st.ps[i], 1, NULL), 0);
  compare_all(a, b);

  /* Written again (the idempotency keys went with the undo), each counts
   * once: a replay is a duplicate. */
  write_batches(a, rest, rest_src, nrest, 200);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write_from(a, gone, gone_src, ngone, &r), 0);
  assert_int_equal(r.duplicates, ngone);
  write_batches(b, rest, NULL, nrest, 400);
  compare_all(a, b);

  free(keep);
  free(gone);
  free(gone_src);
  free(rest);
  free(rest_src);
  stream_free(&st);
  ember_store_close(a);
  ember_store_close(b);
  tu_store_remove(pa);
  tu_store_remove(pb);
}

/* An idle window (no stacks) undone leaves its empty row and its zero CPU
 * point: another idle window of the same labels may have written them too
 * (documented in ember_store_undo); its idempotency key and pending entry
 * go. A busy window sharing a row with an idle one takes its entries with
 * it, and the row goes. */
static void test_store_runs_undo_idle_window(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "runs", "idle");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  ember_profile_t *idle = make_window("api", "h0", T0, "a", 1, 0, 4, 1);
  ember_store_source_t src = {0, 0, 0, 1};
  assert_int_equal(ember_store_write_from(s, &idle, &src, 1, NULL), 0);
  uint64_t undone = 0;
  assert_int_equal(ember_store_undo(s, 0, 0, 1, &undone), 0);
  assert_int_equal(undone, 1);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 1);
  assert_int_equal(st.rollup_1m_rows, 1);
  assert_int_equal(st.rollup_rows, 1);
  assert_int_equal(st.cpu_rows, 1);
  assert_int_equal(st.idem_keys, 0);
  assert_int_equal(st.pending_rows, 0);
  int64_t *cpu = NULL;
  size_t nb = 0;
  assert_int_equal(ember_store_cpu_timeline(s, NULL, T0, T0 + 60 * SEC, 60 * SEC, &cpu, &nb), 0);
  assert_int_equal(cpu[0], 0);
  ember_free(cpu);

  /* A busy window in that row: undone, its entries, CPU and rows go (the
   * idle row was there before; rows left empty by a busy undo go). */
  ember_profile_t *busy = make_window("api", "h0", T0 + 10 * SEC, "a", 2, 4, 6, 2);
  src.offset = 1;
  assert_int_equal(ember_store_write_from(s, &busy, &src, 1, NULL), 0);
  assert_int_equal(ember_store_undo(s, 0, 1, 2, &undone), 0);
  assert_int_equal(undone, 1);
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 1);
  assert_int_equal(st.cpu_rows, 1);
  assert_int_equal(st.rollup_1m_rows, 1); /* the idle window's minute is left */
  ember_profile_t *m = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_CPU_NS, &m), 0);
  assert_int_equal(ember_profile_nstacks(m), 0);
  int64_t ws, we;
  ember_profile_window(m, &ws, &we);
  assert_int_equal(we, T0 + 10 * SEC); /* the minute row's end is the idle window's again */
  ember_profile_free(m);
  ember_profile_free(idle);
  ember_profile_free(busy);
  ember_store_close(s);
  tu_store_remove(path);
}

/* All or nothing: fail the Nth allocation of a write with sources, then of
 * an undo, for every N: each failure leaves nothing (no rows, runs,
 * pending windows, pairs; or everything still pending and the merge as it
 * was), then the call succeeds and is exact. */
static void test_store_runs_alloc_failures(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "runs", "alloc");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  enum { N = 5 };
  ember_profile_t *ps[N + 1];
  ember_store_source_t src[N + 1];
  for (size_t i = 0; i < N; i++) {
    ps[i] = make_window("api", i % 2 ? "h1" : "h0", T0 + (int64_t)i * 25 * SEC, "a", i, 8, 10, i);
    src[i] = (ember_store_source_t){(int32_t)(i % 2), (int64_t)i, 0, 5};
  }
  ps[N] = ps[1]; /* a duplicate inside the batch */
  src[N] = (ember_store_source_t){1, N, 0, 5};
  int rc = -1;
  long tries = 0;
  for (long k = 0; rc != 0; k++, tries++) {
    assert_true(k < 100000);
    ember_alloc_fail_after(k);
    rc = ember_store_write_from(s, ps, src, N + 1, NULL);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      ember_store_stats_t st;
      assert_int_equal(ember_store_stats(s, &st), 0);
      assert_int_equal(st.profile_rows + st.idem_keys + st.cpu_rows + st.rollup_rows +
                           st.rollup_1m_rows + st.series + st.run_rows + st.pending_rows +
                           st.series_parts,
                       0);
    }
  }
  assert_true(tries > 1);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.pending_rows, N);
  assert_int_equal(st.run_rows, 2);
  /* The pairs set was cleared with each failed transaction, so the pairs
   * were written by the one that succeeded. */
  assert_int_equal(st.series_parts, 2);
  ember_store_run_t *runs;
  size_t n;
  get_runs(s, &runs, &n);
  assert_int_equal(find_run(runs, n, 1, 0)->windows, 3);
  assert_int_equal(find_run(runs, n, 1, 0)->stored_end, N + 1);
  ember_store_runs_free(runs);

  ember_profile_t *before = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 3600 * SEC, EMBER_VT_CPU_NS, &before), 0);
  int64_t total = ember_profile_total(before, 0);
  ember_profile_free(before);
  uint64_t undone = 0;
  rc = -1;
  tries = 0;
  for (long k = 0; rc != 0; k++, tries++) {
    assert_true(k < 100000);
    ember_alloc_fail_after(k);
    rc = ember_store_undo(s, 0, 0, 100, &undone);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      assert_int_equal(stat_pending(s), N);
      ember_profile_t *p = NULL;
      assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 3600 * SEC, EMBER_VT_CPU_NS, &p), 0);
      assert_int_equal(ember_profile_total(p, 0), total);
      ember_profile_free(p);
    }
  }
  assert_true(tries > 1);
  assert_int_equal(undone, 3);
  assert_int_equal(stat_pending(s), 2);
  ember_profile_t *after = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 3600 * SEC, EMBER_VT_CPU_NS, &after), 0);
  assert_int_equal(ember_profile_total(after, 0),
                   ember_profile_total(ps[1], 1) + ember_profile_total(ps[3], 1));
  ember_profile_free(after);
  /* And the runs listing under failures. */
  rc = -1;
  for (long k = 0; rc != 0; k++) {
    assert_true(k < 1000);
    runs = NULL;
    ember_alloc_fail_after(k);
    rc = ember_store_runs(s, &runs, &n);
    ember_alloc_fail_reset();
    if (rc != 0) {
      assert_int_equal(rc, -ENOMEM);
      assert_null(runs);
    }
  }
  assert_int_equal(n, 2);
  ember_store_runs_free(runs);

  for (size_t i = 0; i < N; i++) ember_profile_free(ps[i]);
  ember_store_close(s);
  tu_store_remove(path);
}

/* Retention takes pending windows that started before the cutoff and runs
 * whose last window did; later ones stay, and undo of what remains still
 * works. */
static void test_store_runs_retention(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "runs", "retain");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  /* One window a minute for three hours; partition 0 read in a run from 0
   * (the first hour) and a run from 60 (the rest). */
  enum { N = 180 };
  ember_profile_t *ps[N];
  ember_store_source_t src[N];
  for (size_t i = 0; i < N; i++) {
    ps[i] = make_window("api", "h0", T0 + (int64_t)i * 60 * SEC, "a", i, 3, 6, i);
    int64_t rs = i < 60 ? 0 : 60;
    src[i] = (ember_store_source_t){0, (int64_t)i, rs, rs};
  }
  write_batches(s, ps, src, N, 100);
  uint64_t deleted = 0;
  /* Cutoff T0 + 1 h: 60 windows, CPU points, minute rows, idem keys, one
   * hour row, 60 pending windows and the first run. */
  assert_int_equal(ember_store_retain(s, T0 + 5400 * SEC, 7, &deleted), 0);
  assert_int_equal(deleted, 60 * 4 + 1 + 60 + 1);
  ember_store_run_t *runs;
  size_t n;
  get_runs(s, &runs, &n);
  assert_int_equal(n, 1);
  assert_int_equal(runs[0].start, 60);
  assert_int_equal(runs[0].pending, N - 60);
  ember_store_runs_free(runs);
  assert_int_equal(stat_pending(s), N - 60);
  uint64_t undone = 0;
  assert_int_equal(ember_store_undo(s, 0, 0, INT64_MAX, &undone), 0);
  assert_int_equal(undone, N - 60);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows + st.cpu_rows + st.rollup_rows + st.rollup_1m_rows, 0);
  assert_int_equal(ember_store_retain(s, T0 + 4 * 3600 * SEC, 0, &deleted), 0);
  get_runs(s, &runs, &n);
  assert_int_equal(n, 0);
  assert_null(runs);
  for (size_t i = 0; i < N; i++) ember_profile_free(ps[i]);
  ember_store_close(s);
  tu_store_remove(path);
}

static MDB_env *raw_open(const char *path) {
  MDB_env *env = NULL;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
  assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
  return env;
}

/* A store made before the tables: verify passes, a read-only open works
 * (no runs, nothing pending, the windows there), a read-write open adds
 * them. */
static void test_store_runs_old_store(void **state) {
  (void)state;
  char path[512], err[512];
  tu_store_path(path, sizeof path, "runs", "old");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  ember_profile_t *p = make_window("api", "h0", T0, "a", 1, 4, 6, 1);
  assert_int_equal(ember_store_write(s, &p, 1, NULL), 0);
  ember_store_close(s);
  {
    MDB_env *env = raw_open(path);
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    static const char *const names[] = {"runs", "pending", "series_part"};
    for (size_t i = 0; i < 3; i++) {
      assert_int_equal(mdb_dbi_open(txn, names[i], 0, &dbi), 0);
      assert_int_equal(mdb_drop(txn, dbi, 1), 0);
    }
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
  }
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  ember_store_opts_t ro = {.read_only = true};
  s = open_opts(path, &ro);
  ember_store_run_t *runs = (ember_store_run_t *)1;
  size_t n = 9;
  assert_int_equal(ember_store_runs(s, &runs, &n), 0);
  assert_null(runs);
  assert_int_equal(n, 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.run_rows + st.pending_rows + st.series_parts, 0);
  assert_int_equal(st.profile_rows, 1);
  ember_profile_t *m = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_CPU_NS, &m), 0);
  assert_int_equal(ember_profile_total(m, 0), ember_profile_total(p, 1));
  ember_profile_free(m);
  ember_store_close(s);

  s = open_store(path);
  ember_profile_t *q = make_window("api", "h0", T0 + 10 * SEC, "a", 2, 4, 6, 2);
  ember_store_source_t src = {4, 10, 10, 1};
  assert_int_equal(ember_store_write_from(s, &q, &src, 1, NULL), 0);
  get_runs(s, &runs, &n);
  assert_int_equal(n, 1);
  assert_int_equal(runs[0].pending, 1);
  ember_store_runs_free(runs);
  ember_store_close(s);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  ember_profile_free(p);
  ember_profile_free(q);
  tu_store_remove(path);
}

/* Replace the value of the first entry of `table` with `len` bytes of
 * `val` sealed with a correct checksum (so only its shape is wrong), or,
 * when val is NULL, flip a byte of it (its checksum fails). */
static void tamper(const char *path, const char *table, const uint8_t *val, size_t len) {
  MDB_env *env = raw_open(path);
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_cursor *cur = NULL;
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, table, 0, &dbi), 0);
  assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
  MDB_val k, v;
  assert_int_equal(mdb_cursor_get(cur, &k, &v, MDB_FIRST), 0);
  uint8_t kb[64], vb[4096];
  assert_true(k.mv_size <= sizeof kb && v.mv_size <= sizeof vb && len + 4 <= sizeof vb);
  memcpy(kb, k.mv_data, k.mv_size);
  size_t klen = k.mv_size, vlen;
  if (val) {
    memcpy(vb, val, len);
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, kb, (uInt)klen);
    c = crc32(c, vb, (uInt)len);
    vb[len] = (uint8_t)(c >> 24);
    vb[len + 1] = (uint8_t)(c >> 16);
    vb[len + 2] = (uint8_t)(c >> 8);
    vb[len + 3] = (uint8_t)c;
    vlen = len + 4;
  } else {
    memcpy(vb, v.mv_data, v.mv_size);
    vb[v.mv_size / 2] ^= 0x10;
    vlen = v.mv_size;
  }
  mdb_cursor_close(cur);
  MDB_val nk = {.mv_size = klen, .mv_data = kb}, nv = {.mv_size = vlen, .mv_data = vb};
  assert_int_equal(mdb_put(txn, dbi, &nk, &nv, 0), 0);
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

/* Read the unsealed value of the first entry of `table`. */
static size_t first_value(const char *path, const char *table, uint8_t *out, size_t cap) {
  MDB_env *env = raw_open(path);
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  MDB_cursor *cur = NULL;
  assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, table, 0, &dbi), 0);
  assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
  MDB_val k, v;
  assert_int_equal(mdb_cursor_get(cur, &k, &v, MDB_FIRST), 0);
  assert_true(v.mv_size >= 4 && v.mv_size - 4 <= cap);
  size_t n = v.mv_size - 4;
  memcpy(out, v.mv_data, n);
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return n;
}

static void build_small(const char *path) {
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  ember_profile_t *ps[3];
  ember_store_source_t src[3];
  for (size_t i = 0; i < 3; i++) {
    ps[i] = make_window("api", "h0", T0 + (int64_t)i * 10 * SEC, "a", i, 5, 8, i);
    src[i] = (ember_store_source_t){2, 40 + (int64_t)i, 40, 1};
  }
  assert_int_equal(ember_store_write_from(s, ps, src, 3, NULL), 0);
  for (size_t i = 0; i < 3; i++) ember_profile_free(ps[i]);
  ember_store_close(s);
}

/* verify walks the new tables: a good store passes; a pending value whose
 * checksum holds but which does not decode (a row cut short) is refused,
 * as are a run value of the wrong size and a value that fails its
 * checksum; the calls that read them refuse them too. */
static void test_store_runs_verify(void **state) {
  (void)state;
  char path[512], err[1024];
  tu_store_path(path, sizeof path, "runs", "verify");
  build_small(path);
  uint64_t entries = 0;
  assert_int_equal(ember_store_verify(path, &entries, err, sizeof err), 0);
  assert_true(entries > 3 + 1 + 1);

  uint8_t val[4096];
  size_t len = first_value(path, "pending", val, sizeof val);
  assert_true(len > 47 + 5);
  tamper(path, "pending", val, len - 2); /* the row loses its last bytes */
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"pending\" is malformed"));
  ember_store_t *s = open_store(path);
  ember_store_run_t *runs = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_runs(s, &runs, &n), EMBER_ECORRUPT);
  assert_null(runs);
  uint64_t undone = 0;
  assert_int_equal(ember_store_undo(s, 2, 0, 100, &undone), EMBER_ECORRUPT);
  uint64_t deleted;
  assert_int_equal(ember_store_retain(s, T0 + 7200 * SEC, 0, &deleted), EMBER_ECORRUPT);
  ember_store_close(s);

  /* A well-formed pending value naming a row it was never added to
   * (another series): verify cannot tell, the undo refuses it rather than
   * subtract from the wrong row, and changes nothing. */
  build_small(path);
  len = first_value(path, "pending", val, sizeof val);
  val[10 + 3] ^= 0x02; /* the profiles key's series id: 1 -> 3 */
  tamper(path, "pending", val, len);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  s = open_store(path);
  assert_int_equal(ember_store_undo(s, 2, 0, 100, &undone), EMBER_ECORRUPT);
  assert_int_equal(stat_pending(s), 3);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.idem_keys, 3);
  ember_store_close(s);

  build_small(path);
  len = first_value(path, "runs", val, sizeof val);
  assert_int_equal(len, 48);
  tamper(path, "runs", val, 40);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"runs\" is malformed"));

  build_small(path);
  tamper(path, "pending", NULL, 0);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"pending\" fails its checksum"));
  s = open_store(path);
  assert_int_equal(ember_store_undo(s, 2, 0, 100, &undone), EMBER_ECORRUPT);
  assert_int_equal(ember_store_committed(s, 2, 40, 41), 0); /* deletes without decoding */
  ember_store_close(s);

  build_small(path);
  tamper(path, "series_part", NULL, 0);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"series_part\" fails its checksum"));
  tu_store_remove(path);
}

/* A write with sources that outgrows the map grows it and writes the batch
 * again from the start: runs count each window once. */
static void test_store_runs_map_growth(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "runs", "grow");
  tu_store_remove(path);
  ember_store_opts_t o = {
      .map_size = (size_t)1 << 20, .max_size = (size_t)256 << 20, .no_sync = true};
  ember_store_t *s = open_opts(path, &o);
  enum { N = 1200 };
  ember_profile_t **ps = calloc(N, sizeof *ps);
  ember_store_source_t *src = calloc(N, sizeof *src);
  assert_non_null(ps);
  assert_non_null(src);
  for (size_t i = 0; i < N; i++) {
    ps[i] = make_window("api", "h0", T0 + (int64_t)i * 10 * SEC, "a", i, 40, 400, i);
    src[i] = (ember_store_source_t){0, (int64_t)i, 0, 1};
  }
  write_batches(s, ps, src, N, 400);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_true(st.map_grows > 0);
  assert_int_equal(st.pending_rows, N);
  ember_store_run_t *runs;
  size_t n;
  get_runs(s, &runs, &n);
  assert_int_equal(n, 1);
  assert_int_equal(runs[0].windows, N);
  assert_int_equal(runs[0].stored_end, N);
  ember_store_runs_free(runs);
  uint64_t undone = 0;
  assert_int_equal(ember_store_undo(s, 0, 0, N, &undone), 0);
  assert_int_equal(undone, N);
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows + st.cpu_rows + st.rollup_rows + st.rollup_1m_rows, 0);
  for (size_t i = 0; i < N; i++) ember_profile_free(ps[i]);
  free(ps);
  free(src);
  ember_store_close(s);
  tu_store_remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_runs_write_shows_runs),
      cmocka_unit_test(test_store_runs_committed_clears_pending),
      cmocka_unit_test(test_store_runs_undo_restores_exactly),
      cmocka_unit_test(test_store_runs_undo_idle_window),
      cmocka_unit_test(test_store_runs_alloc_failures),
      cmocka_unit_test(test_store_runs_retention),
      cmocka_unit_test(test_store_runs_old_store),
      cmocka_unit_test(test_store_runs_verify),
      cmocka_unit_test(test_store_runs_map_growth),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
