/* The window clock (agent/window.h): windows are labelled by when they
 * were really filled, whatever the timer's jitter, and never drift. The
 * timer, the clocks and the samples are simulated, so every case is
 * exact and the test costs no wall time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_window_clock_early_and_late_timers),
      cmocka_unit_test(test_window_clock_survives_stalls),
      cmocka_unit_test(test_window_clock_early_firing_waits),
      cmocka_unit_test(test_window_clock_stop_cut_is_never_empty),
      cmocka_unit_test(test_window_clock_clock_steps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
