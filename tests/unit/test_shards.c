/* Shards (collector/shards.h): the rule that keeps a window in one store
 * of the fleet, applied to two real stores that both hold part of one
 * partition, as a crash between a store's commit and its Kafka commit
 * leaves them; the tie-breaks; a collector sharing our store file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/metrics.h"
#include "ember/store.h"
#include "shards.h"

#define BASE_NS (1764410400LL * 1000000000)
#define WINDOW  10000000000LL

static ember_store_t *fresh(const char *name, char *path, size_t size) {
  snprintf(path, size, "%s/shards_%s_%ld.lmdb", EMBER_TEST_TMP, name, (long)getpid());
  char lock[700];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
  ember_store_opts_t o = {.map_size = (size_t)64 << 20, .no_sync = true};
  ember_store_t *s = NULL;
  char err[256];
  if (ember_store_open(path, &o, &s, err, sizeof err) != 0) fail_msg("%s", err);
  return s;
}

static void drop(ember_store_t *s, const char *path) {
  ember_store_close(s);
  char lock[700];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
}

/* Windows [from, to) of partition 0 (offset = window number, agent "a",
 * seq = offset + 1), read in a run that started at run_start. */
static void write_windows(ember_store_t *s, int64_t from, int64_t to, int64_t run_start,
                          int64_t started_ns) {
  for (int64_t o = from; o < to; o++) {
    ember_profile_t *p = tu_profile("a", (uint64_t)o + 1, "w", "h", BASE_NS + o * WINDOW);
    ember_store_source_t src = {
        .partition = 0, .offset = o, .run_start = run_start, .run_started_ns = started_ns};
    assert_int_equal(ember_store_write_from(s, &p, &src, 1, NULL), 0);
    ember_profile_free(p);
  }
}

static int64_t samples(ember_store_t *s, int64_t *work_b) {
  ember_store_selector_t sel = {.worker = "w"};
  ember_profile_t *m = NULL;
  assert_int_equal(
      ember_store_merge(s, &sel, BASE_NS, BASE_NS + 1000 * WINDOW, EMBER_VT_CPU_SAMPLES, &m), 0);
  int64_t t = ember_profile_total(m, 0);
  *work_b = tu_self(m, 0, "work_b");
  ember_profile_free(m);
  return t;
}

/* The runs of `s` as another collector `id` would announce them. */
static size_t foreign(ember_store_t *s, const char *id, ember__foreign_run_t *out, size_t max) {
  ember_store_run_t *runs = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_runs(s, &runs, &n), 0);
  assert_true(n <= max);
  for (size_t i = 0; i < n; i++)
    out[i] = (ember__foreign_run_t){.collector = id,
                                    .partition = runs[i].partition,
                                    .start = runs[i].start,
                                    .stored_end = runs[i].stored_end,
                                    .committed = runs[i].committed,
                                    .started_ns = runs[i].started_ns};
  ember_store_runs_free(runs);
  return n;
}

static void test_shards_a_crash_leaves_each_window_in_one_store(void **state) {
  (void)state;
  char pa[600], pb[600];
  ember_store_t *a = fresh("a", pa, sizeof pa), *b = fresh("b", pb, sizeof pb);
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  /* A read 0..99 from 0 and committed 60, then died. B took over at the
   * committed offset and read 60..149, committing all. */
  write_windows(a, 0, 100, 0, 1000);
  assert_int_equal(ember_store_committed(a, 0, 0, 60), 0);
  write_windows(b, 60, 150, 60, 2000);
  assert_int_equal(ember_store_committed(b, 0, 60, 150), 0);
  int64_t wa, wb;
  int64_t both = samples(a, &wa) + samples(b, &wb);
  assert_int_equal(wa + wb, 190); /* 40 windows twice */

  ember__shards_t *sa = NULL, *sb = NULL;
  assert_int_equal(ember__shards_new(a, m, "collector-a", &sa), 0);
  assert_int_equal(ember__shards_new(b, m, "collector-b", &sb), 0);
  ember__foreign_run_t fr[8];
  uint64_t undone = 0;
  /* B's run started later: it keeps its copies; A undoes its pending ones. */
  size_t nf = foreign(a, "collector-a", fr, 8);
  assert_int_equal(ember__shards_reconcile(sb, fr, nf, &undone), 0);
  assert_int_equal(undone, 0);
  nf = foreign(b, "collector-b", fr, 8);
  assert_int_equal(ember__shards_reconcile(sa, fr, nf, &undone), 0);
  assert_int_equal(undone, 40);
  int64_t after = samples(a, &wa) + samples(b, &wb);
  assert_int_equal(wa + wb, 150);
  /* Exactly the samples of windows 60..99 went. */
  int64_t dup = 0;
  for (int64_t o = 60; o < 100; o++) dup += tu_profile_samples((uint64_t)o + 1) + 1;
  assert_int_equal(after, both - dup);
  /* Again: nothing more to undo. */
  assert_int_equal(ember__shards_reconcile(sa, fr, nf, &undone), 0);
  assert_int_equal(undone, 0);

  ember__shards_free(sa);
  ember__shards_free(sb);
  ember_metrics_free(m);
  drop(a, pa);
  drop(b, pb);
}

static void test_shards_runs_of_our_own_store_are_not_copies(void **state) {
  (void)state;
  char pa[600];
  ember_store_t *a = fresh("own", pa, sizeof pa);
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  /* Two collectors share one store file: one run each. */
  write_windows(a, 0, 50, 0, 1000);
  write_windows(a, 50, 80, 50, 2000);
  ember__shards_t *sa = NULL;
  assert_int_equal(ember__shards_new(a, m, "collector-a", &sa), 0);
  ember__foreign_run_t fr[8];
  size_t nf = foreign(a, "collector-b", fr, 8);
  uint64_t undone = 1;
  assert_int_equal(ember__shards_reconcile(sa, fr, nf, &undone), 0);
  assert_int_equal(undone, 0);
  int64_t w;
  samples(a, &w);
  assert_int_equal(w, 80);
  ember__shards_free(sa);
  ember_metrics_free(m);
  drop(a, pa);
}

/* The case CI met: the group had no commit for the partition. A's run
 * began at its first message (100: nothing of the partition before), stored
 * 100..119 and died before its first commit; B, starting at
 * auto.offset.reset=earliest, read 0..149 and committed up to b_commit.
 * B's run starts lower, yet what it committed is final: A's copies of it
 * go. Of the copies pending in both, A's run started later: B's go. */
static void committed_vs_start(int64_t b_commit, uint64_t a_undoes, uint64_t b_undoes) {
  char pa[600], pb[600];
  ember_store_t *a = fresh("ca", pa, sizeof pa), *b = fresh("cb", pb, sizeof pb);
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  write_windows(a, 100, 120, 100, 1000);
  write_windows(b, 0, 150, 0, 2000);
  assert_int_equal(ember_store_committed(b, 0, 0, b_commit), 0);
  ember__shards_t *sa = NULL, *sb = NULL;
  assert_int_equal(ember__shards_new(a, m, "collector-a", &sa), 0);
  assert_int_equal(ember__shards_new(b, m, "collector-b", &sb), 0);
  ember__foreign_run_t fa[8], fb[8];
  size_t na = foreign(a, "collector-a", fa, 8), nb = foreign(b, "collector-b", fb, 8);
  uint64_t undone = 99;
  assert_int_equal(ember__shards_reconcile(sb, fa, na, &undone), 0);
  assert_int_equal(undone, b_undoes);
  assert_int_equal(ember__shards_reconcile(sa, fb, nb, &undone), 0);
  assert_int_equal(undone, a_undoes);
  int64_t wa, wb;
  samples(a, &wa);
  samples(b, &wb);
  assert_int_equal(wa + wb, 150); /* every window once */
  ember__shards_free(sa);
  ember__shards_free(sb);
  ember_metrics_free(m);
  drop(a, pa);
  drop(b, pb);
}

static void test_shards_a_committed_copy_beats_a_later_start(void **state) {
  (void)state;
  committed_vs_start(150, 20, 0);  /* B committed it all: A's 20 go */
  committed_vs_start(110, 10, 10); /* 100..109 committed in B; 110..119 A's */
}

static void test_shards_rule_and_its_ties(void **state) {
  (void)state;
  ember__foreign_run_t x = {.collector = "a", .start = 10, .committed = 10, .started_ns = 5};
  ember__foreign_run_t y = x;
  y.collector = "b";
  y.start = 20;
  assert_true(ember__shards_wins(&y, &x)); /* the later start */
  assert_false(ember__shards_wins(&x, &y));
  y.start = 10;
  y.committed = 30; /* same start: the one that committed past it */
  assert_true(ember__shards_wins(&y, &x));
  assert_false(ember__shards_wins(&x, &y));
  y.committed = 10;
  y.started_ns = 6; /* then the later wall-clock start */
  assert_true(ember__shards_wins(&y, &x));
  assert_false(ember__shards_wins(&x, &y));
  y.started_ns = 5; /* then the larger id */
  assert_true(ember__shards_wins(&y, &x));
  assert_false(ember__shards_wins(&x, &y));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_shards_a_crash_leaves_each_window_in_one_store),
      cmocka_unit_test(test_shards_runs_of_our_own_store_are_not_copies),
      cmocka_unit_test(test_shards_a_committed_copy_beats_a_later_start),
      cmocka_unit_test(test_shards_rule_and_its_ties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
