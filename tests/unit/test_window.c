/* agent/window.h: the window clock (windows are labelled by when they
 * were really filled, whatever the timer's jitter, and never drift: the
 * timer, the clocks and the samples are simulated, so every case is exact
 * and costs no wall time) and the weighted adds of allocation sessions. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "window.h"

#define MS  1000000LL
#define SEC 1000000000LL

/* A small deterministic generator, so a failure replays. */
static uint64_t rng_state = 88172645463325252ull;
static int64_t rnd(int64_t lo, int64_t hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (int64_t)(rng_state % (uint64_t)(hi - lo + 1));
}

/* The agent's loop, simulated: the timer is armed for the wait rounded up
 * to whole milliseconds (as libuv counts) and fires anywhere from `early`
 * before to `late` after that; a sample every 10 ms of monotonic time is
 * put in the window open when it was taken. Every window must hold only
 * samples whose Unix time is inside its label, tile time exactly, and its
 * cut must stay near the Unix multiple of the period it was planned for. */
static void simulate(int64_t period, int nwindows, int64_t early, int64_t late,
                     int64_t stall_every) {
  const int64_t offset = 1700000000 * SEC + 123456789; /* realtime - monotonic */
  int64_t mono = 5 * SEC + 777 * MS, wait = 0, start = 0, end = 0;
  ember__window_clock_t c;
  ember__window_clock_init(&c, period, mono, mono + offset);
  int64_t prev_end = mono + offset, next_sample = mono + 10 * MS;
  int64_t first_deadline = c.deadline_real;
  int cuts = 0, early_fires = 0, firings = 0;
  int64_t in_window = 0, samples = 0, longest = 0, worst_skew = 0;
  wait = c.deadline_mono - mono;
  while (cuts < nwindows) {
    firings++;
    assert_true(firings < nwindows * 20); /* always progresses */
    int64_t armed = (wait + MS - 1) / MS * MS;
    int64_t jitter = rnd(-early, late);
    if (stall_every > 0 && rnd(0, stall_every - 1) == 0) jitter += rnd(period, 3 * period);
    int64_t fire = mono + armed + jitter;
    if (fire <= mono) fire = mono + 1;
    /* Samples taken up to the firing belong to the open window. */
    for (; next_sample <= fire; next_sample += 10 * MS) {
      int64_t real = next_sample + offset;
      assert_true(real >= prev_end);
      in_window++;
      samples++;
    }
    mono = fire;
    if (!ember__window_clock_tick(&c, mono, mono + offset, &start, &end, &wait)) {
      early_fires++;
      assert_true(wait > 0 && wait <= early + MS);
      continue;
    }
    cuts++;
    /* Labelled by the real fill time: from the last cut to this one. */
    assert_int_equal(start, prev_end);
    assert_int_equal(end, mono + offset);
    assert_true(end > start);
    /* The cut happens at or after its planned multiple, never before, and
     * the multiples advance one period at a time unless a stall skipped
     * some: jitter never accumulates into drift. */
    int64_t since = end - first_deadline;
    int64_t skew = since % period;
    if (stall_every == 0) {
      assert_true(since >= (int64_t)(cuts - 1) * period);
      assert_true(since < (int64_t)(cuts - 1) * period + late + 2 * MS);
    }
    if (skew > worst_skew) worst_skew = skew;
    if (end - start > longest) longest = end - start;
    assert_true(wait > 0 && wait <= period);
    prev_end = end;
    in_window = 0;
  }
  print_message("%d windows of %lld ms, jitter -%lld..+%lld ms: %d early firings, "
                "%lld samples, longest window %lld ms, worst lateness %lld ms\n",
                cuts, (long long)(period / MS), (long long)(early / MS), (long long)(late / MS),
                early_fires, (long long)samples, (long long)(longest / MS),
                (long long)(worst_skew / MS));
  if (stall_every == 0) {
    assert_true(worst_skew < late + 2 * MS);
    assert_true(longest <= period + late + 2 * MS);
  }
  (void)in_window;
}

static void test_window_clock_early_and_late_timers(void **state) {
  (void)state;
  /* 600 windows of 1 s with a timer up to 5 ms early and 30 ms late. */
  simulate(SEC, 600, 5 * MS, 30 * MS, 0);
  /* Always early (a coarse loop clock lagging by a tick). */
  simulate(SEC, 600, 4 * MS, 0, 0);
  /* 10 s windows, late by up to 2 s. */
  simulate(10 * SEC, 200, 1 * MS, 2 * SEC, 0);
}

static void test_window_clock_survives_stalls(void **state) {
  (void)state;
  /* Now and then the loop is stalled for one to three periods: that
   * window is long (and labelled so), the next cut is a multiple again. */
  simulate(SEC, 600, 5 * MS, 30 * MS, 20);
}

/* The timer of the old agent fired 1 ms early and labelled the next window
 * a period ahead: here an early firing changes nothing, and the cut at the
 * deadline is labelled with its own time. */
static void test_window_clock_early_firing_waits(void **state) {
  (void)state;
  ember__window_clock_t c;
  int64_t s = 0, e = 0, wait = 0;
  ember__window_clock_init(&c, SEC, 100 * SEC + 250 * MS, 1000 * SEC + 250 * MS);
  assert_int_equal(c.deadline_real, 1001 * SEC);
  assert_int_equal(c.deadline_mono, 101 * SEC);
  assert_false(ember__window_clock_tick(&c, 101 * SEC - MS, 1001 * SEC - MS, &s, &e, &wait));
  assert_int_equal(wait, MS);
  assert_true(ember__window_clock_tick(&c, 101 * SEC + 3, 1001 * SEC + 3, &s, &e, &wait));
  assert_int_equal(s, 1000 * SEC + 250 * MS);
  assert_int_equal(e, 1001 * SEC + 3);
  assert_int_equal(wait, SEC - 3);
  /* Late by 2.5 periods: one long window, the next cut back on a multiple. */
  assert_true(
      ember__window_clock_tick(&c, 104 * SEC + 500 * MS, 1004 * SEC + 500 * MS, &s, &e, &wait));
  assert_int_equal(s, 1001 * SEC + 3);
  assert_int_equal(e, 1004 * SEC + 500 * MS);
  assert_int_equal(c.deadline_real, 1005 * SEC);
  assert_int_equal(wait, 500 * MS);
}

/* SIGTERM's cut: a window however short is labelled with a positive
 * length (the store refuses start >= end), also right after a cut and
 * when the Unix clock stepped back. */
static void test_window_clock_stop_cut_is_never_empty(void **state) {
  (void)state;
  ember__window_clock_t c;
  int64_t s = 0, e = 0, wait = 0;
  ember__window_clock_init(&c, SEC, 50 * SEC, 2000 * SEC + 10 * MS);
  assert_true(ember__window_clock_tick(&c, 50 * SEC + 990 * MS, 2001 * SEC, &s, &e, &wait));
  /* The same instant: 1 ns, not zero. */
  ember__window_clock_cut(&c, 50 * SEC + 990 * MS, 2001 * SEC, &s, &e);
  assert_int_equal(s, 2001 * SEC);
  assert_int_equal(e, 2001 * SEC + 1);
  /* 300 ms later on the monotonic clock, but the Unix clock went back 5 s:
   * the window keeps its monotonic length and stays after the last one. */
  ember__window_clock_cut(&c, 51 * SEC + 290 * MS, 1996 * SEC, &s, &e);
  assert_int_equal(s, 2001 * SEC + 1);
  assert_int_equal(e, 2001 * SEC + 1 + 300 * MS);
  /* A normal stop: the real time of the cut. */
  ember__window_clock_cut(&c, 51 * SEC + 500 * MS, 2002 * SEC, &s, &e);
  assert_int_equal(e, 2002 * SEC);
}

/* A Unix clock stepped back by an hour must not hold the next cut back for
 * an hour, nor one stepped forward make it fire in a loop. */
static void test_window_clock_clock_steps(void **state) {
  (void)state;
  ember__window_clock_t c;
  int64_t s = 0, e = 0, wait = 0;
  ember__window_clock_init(&c, SEC, 10 * SEC, 5000 * SEC + 500 * MS);
  assert_true(ember__window_clock_tick(&c, 10 * SEC + 500 * MS, 1400 * SEC, &s, &e, &wait));
  assert_true(e > s);
  assert_int_equal(wait, SEC);
  assert_true(
      ember__window_clock_tick(&c, 11 * SEC + 500 * MS, 9000 * SEC + 200 * MS, &s, &e, &wait));
  assert_int_equal(e, 9000 * SEC + 200 * MS);
  assert_int_equal(wait, 800 * MS);
}

/* --- weighted adds (allocation sessions' 1/p weights) --- */

/* The exact value of a double >= 2^-12 in units of 2^-64. */
static __int128 q64(double v) { return (__int128)(v * 0x1p64); }

static const ember__window_stack_t *only_stack(ember__window_t *w) {
  size_t n = 0;
  const ember__window_stack_t *s = ember__window_sorted(w, &n);
  assert_int_equal(n, 1);
  return &s[0];
}

/* A million samples of a Poisson sampler, weighted 1/p, into one stack
 * (every rounding error in the same slot): the window's sum is the exact
 * sum rounded, off by at most 0.5 plus 2^-33 per add, also past 2^53
 * bytes, where a double slot no longer counts single bytes (bench_window
 * measures double slots off by tens of bytes at 10^7 adds). */
static void test_window_weighted_sum_within_rounding(void **state) {
  (void)state;
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  const uint64_t ip = 0x401234;
  const int adds = 1000000;
  __int128 exact_o = 0, exact_b = 0;
  for (int i = 0; i < adds; i++) {
    /* p from 1/4099 to 1, sizes 1 B to 4 GiB: weights 1 to 4099, bytes up
     * to ~1.8e13 an add and ~2e16 in all, past 2^53. */
    double p = (double)(rnd(1, 4099)) / 4099.0;
    double size = (double)rnd(1, (int64_t)1 << 32);
    double wt = 1.0 / p, bytes = wt * size;
    exact_o += q64(wt);
    exact_b += q64(bytes);
    assert_int_equal(ember__window_add_weighted(w, 9, &ip, 1, wt, bytes, NULL), 0);
  }
  const ember__window_stack_t *s = only_stack(w);
  const __int128 one = (__int128)1 << 64;
  const __int128 bound = one / 2 + (__int128)adds * (one >> 33);
  __int128 off_o = (__int128)s->samples * one - exact_o;
  __int128 off_b = (__int128)s->cpu_ns * one - exact_b;
  print_message("objects %lld off %.6f, bytes %lld off %.6f\n", (long long)s->samples,
                (double)off_o * 0x1p-64, (long long)s->cpu_ns, (double)off_b * 0x1p-64);
  assert_true(off_o <= bound && off_o >= -bound);
  assert_true(off_b <= bound && off_b >= -bound);
  assert_true(s->cpu_ns > (int64_t)1 << 53); /* past where a double counts every byte */
  ember__window_free(w);
}

/* Fractions carry into the whole units exactly, integer adds beside them
 * stay exact, halves round up. */
static void test_window_weighted_fractions_carry(void **state) {
  (void)state;
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  const uint64_t ip = 7;
  bool is_new = false;
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0.25, 0.5, &is_new), 0);
  assert_true(is_new);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0.25, 0.25, &is_new), 0);
  assert_false(is_new);
  /* 0.5 and 0.75: rounded, 1 and 1. */
  assert_int_equal(only_stack(w)->samples, 1);
  assert_int_equal(only_stack(w)->cpu_ns, 1);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0.5, 0.25, NULL), 0);
  assert_int_equal(ember__window_add_values(w, 1, &ip, 1, 3, (int64_t)1 << 53, NULL), 0);
  assert_int_equal(only_stack(w)->samples, 4);                     /* 1.0 + 3 */
  assert_int_equal(only_stack(w)->cpu_ns, ((int64_t)1 << 53) + 1); /* 1.0 + 2^53 */
  /* 2^-33 and less round away in one add (nearest 2^-32), never up. */
  ember__window_reset(w);
  for (int i = 0; i < 1000; i++)
    assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0x1p-34, 0x1p-32, NULL), 0);
  assert_int_equal(only_stack(w)->samples, 0);
  assert_int_equal(only_stack(w)->cpu_ns, 0); /* 1000 * 2^-32 */
  ember__window_free(w);
}

/* Huge byte counts saturate at INT64_MAX, never wrap, also with a
 * fraction pending; negative and NaN weights are refused. */
static void test_window_weighted_large_saturates(void **state) {
  (void)state;
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  const uint64_t ip = 7;
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 1.5, 0x1p62, NULL), 0);
  assert_int_equal(only_stack(w)->cpu_ns, (int64_t)1 << 62);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 1.5, 0x1p62 + 0x1p40, NULL), 0);
  assert_int_equal(only_stack(w)->cpu_ns, INT64_MAX);
  assert_int_equal(only_stack(w)->samples, 3);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0.75, 1e300, NULL), 0);
  assert_int_equal(ember__window_add_values(w, 1, &ip, 1, INT64_MAX, INT64_MAX, NULL), 0);
  assert_int_equal(only_stack(w)->samples, INT64_MAX);
  assert_int_equal(only_stack(w)->cpu_ns, INT64_MAX);
  /* A pending fraction at INT64_MAX - 1 rounds up to INT64_MAX, no further. */
  ember__window_reset(w);
  assert_int_equal(ember__window_add_values(w, 1, &ip, 1, INT64_MAX - 1, 0, NULL), 0);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0.75, 0, NULL), 0);
  assert_int_equal(only_stack(w)->samples, INT64_MAX);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0.75, 0, NULL), 0);
  assert_int_equal(only_stack(w)->samples, INT64_MAX);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, -1, 0, NULL), -EINVAL);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 1, 0, __builtin_nan(""), NULL), -EINVAL);
  assert_int_equal(ember__window_add_weighted(w, 1, &ip, 0, 1, 1, NULL), -EINVAL);
  ember__window_free(w);
}

/* Weighted adds are bounded as every add: past max_stacks a new stack is
 * dropped and counted, a known one still adds. */
static void test_window_weighted_bounded(void **state) {
  (void)state;
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  ember__window_set_max_stacks(w, 2);
  uint64_t a = 1, b = 2, c = 3;
  assert_int_equal(ember__window_add_weighted(w, 1, &a, 1, 1.5, 10, NULL), 0);
  assert_int_equal(ember__window_add_weighted(w, 1, &b, 1, 1.5, 10, NULL), 0);
  assert_int_equal(ember__window_add_weighted(w, 1, &c, 1, 1.5, 10, NULL), EMBER_ETOOBIG);
  assert_int_equal(ember__window_add_weighted(w, 1, &a, 1, 1.5, 10, NULL), 0);
  assert_int_equal(ember__window_nstacks(w), 2);
  assert_int_equal(ember__window_dropped(w), 1);
  ember__window_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_clock_early_and_late_timers),
      cmocka_unit_test(test_window_clock_survives_stalls),
      cmocka_unit_test(test_window_clock_early_firing_waits),
      cmocka_unit_test(test_window_clock_stop_cut_is_never_empty),
      cmocka_unit_test(test_window_clock_clock_steps),
      cmocka_unit_test(test_window_weighted_sum_within_rounding),
      cmocka_unit_test(test_window_weighted_fractions_carry),
      cmocka_unit_test(test_window_weighted_large_saturates),
      cmocka_unit_test(test_window_weighted_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
