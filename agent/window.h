/* One window of raw samples: (pid, callchain) -> samples and CPU ns.
 *
 * The ring reader adds to the open window on the loop thread; closing a
 * window hands the whole structure to the thread that symbolizes and
 * publishes it, and the reader continues into a fresh one, so the reader
 * never waits on that work. Stacks are raw addresses here: symbolizing
 * happens once per distinct stack at close, not per sample. CPU windows,
 * CPU sessions and allocation sessions all aggregate here; a window holds
 * at most max_stacks distinct stacks (then samples are dropped and
 * counted), and memory grows only when a new stack is stored.
 *
 * Values: two sums per (pid, stack), in the slots named `samples` and
 * `cpu_ns` (allocation sessions keep objects and bytes there). Integer
 * adds (CPU samples, the uprobe method's exact allocation counts) are
 * int64, exact up to INT64_MAX, saturating. The preload allocation method
 * weighs each sample by 1/p, a fraction: _add_weighted keeps 32 fraction
 * bits beside each int64 (Q32, in room the entry had spare: still 48
 * bytes), rounds each add to the nearest 2^-32 and the sum to whole units
 * when read. Measured with bench/bench_window (preload-like weights, every
 * add into one stack): Q32 sums came out as the exact sums rounded at
 * 10^6 and 10^7 adds (drift at most 2^-33 an add); double slots drifted
 * with the size of the sum, 0.7 bytes at 10^6 adds and 26 to 59 at 10^7,
 * and past 2^53 stop counting single bytes. A weighted add costs ~10 ns
 * more than an integer one on a 1-frame stack and nothing measurable on
 * a 24-frame one (~190 ns, the lookup); double slots would have turned the
 * CPU path's counts into doubles or grown every entry by 16 bytes.
 *
 * Thread-safety: none; one owner at a time. */
#ifndef EMBER_AGENT_WINDOW_H
#define EMBER_AGENT_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ember__window ember__window_t;

typedef struct ember__window_stack {
  uint32_t pid;
  uint32_t nips;
  const uint64_t *ips; /* leaf first; borrowed from the window */
  int64_t samples;
  int64_t cpu_ns;
} ember__window_stack_t;

int ember__window_new(ember__window_t **out);
void ember__window_free(ember__window_t *w);
/* Forget every stack but keep the memory, for reuse. */
void ember__window_reset(ember__window_t *w);

/* Add one sample. *is_new (may be NULL) tells whether the (pid, stack) was
 * new in this window. Returns 0, -EINVAL (no ips), -ENOMEM, or
 * EMBER_ETOOBIG once max_stacks distinct stacks are held (the sample is
 * counted in dropped). */
int ember__window_add(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                      uint64_t period_ns, bool *is_new);
/* Add arbitrary non-negative values to a (pid, stack): `v0` to its
 * `samples` and `v1` to its `cpu_ns` slots (saturating). Allocation
 * sessions keep objects and bytes there. Same returns as _add. */
int ember__window_add_values(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                             int64_t v0, int64_t v1, bool *is_new);
/* Add fractional non-negative weights (v0 to `samples`, v1 to `cpu_ns`):
 * the preload allocation sampler weighs each sample by 1/p. Kept in Q32
 * fixed point beside the whole units (each add within 2^-33 of exact,
 * integers exact up to INT64_MAX, saturating), and rounded to the nearest
 * whole unit by ember__window_sorted. Same returns as _add; -EINVAL also
 * for a negative or NaN weight. */
int ember__window_add_weighted(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                               double v0, double v1, bool *is_new);
void ember__window_set_max_stacks(ember__window_t *w, size_t max_stacks);

void ember__window_set_bounds(ember__window_t *w, int64_t start_ns, int64_t end_ns);
void ember__window_bounds(const ember__window_t *w, int64_t *start_ns, int64_t *end_ns);

size_t ember__window_nstacks(const ember__window_t *w);
uint64_t ember__window_dropped(const ember__window_t *w);
/* Sort stacks by pid (then arrival) and return them; the array is borrowed
 * until the next add/reset/free. */
const ember__window_stack_t *ember__window_sorted(ember__window_t *w, size_t *n);

/* --- the window clock ---
 *
 * When to cut windows and how to label them. Everything is in the clock
 * perf stamps samples with (CLOCK_MONOTONIC); a label is that time mapped
 * to Unix time by the offset (realtime - monotonic) read at the cut, so a
 * window's bounds are when it was really filled, whatever the timer does:
 *
 *   - start is the previous window's end (or the agent's start), end is the
 *     moment of the cut; windows tile time with no gap and no overlap;
 *   - cuts are planned at Unix multiples of the period (absolute deadlines,
 *     each the previous one plus the period), so timer jitter never adds
 *     up: a timer that fires early is re-armed for the rest of the wait, one
 *     that fires late cuts a longer window and the next deadline is the
 *     next multiple, not "late + period";
 *   - every window has end > start (a clock stepped back, or a cut right
 *     after another, still gives a window at least as long as the monotonic
 *     time it covered and never less than 1 ns), which is what the store
 *     accepts.
 *
 * Pure arithmetic on the times it is given: the agent passes the clocks,
 * tests pass whatever jitter they like. Thread-safety: none. */
typedef struct ember__window_clock {
  int64_t period_ns;
  int64_t deadline_mono; /* the next planned cut */
  int64_t deadline_real; /* the same, as the Unix multiple it stands for */
  int64_t start_real;    /* label of the open window's start */
  int64_t start_mono;    /* when (monotonic) the open window began */
} ember__window_clock_t;

/* Start the first window at (mono_ns, real_ns), the same instant read on
 * both clocks; its cut is planned at the next Unix multiple of period_ns
 * (> 0). */
void ember__window_clock_init(ember__window_clock_t *c, int64_t period_ns, int64_t mono_ns,
                              int64_t real_ns);
/* The window timer fired at (mono_ns, real_ns). Returns true when the open
 * window is to be cut now: its label goes to *start_ns and *end_ns and the next
 * window starts. Returns false when the timer came early (nothing to do).
 * Either way *wait_ns is how long from mono_ns until the timer should fire
 * next (> 0). */
bool ember__window_clock_tick(ember__window_clock_t *c, int64_t mono_ns, int64_t real_ns,
                              int64_t *start_ns, int64_t *end_ns, int64_t *wait_ns);
/* Cut the open window now, wherever its deadline (SIGTERM): its label goes
 * to *start_ns and *end_ns. The next window starts; its deadline is kept. */
void ember__window_clock_cut(ember__window_clock_t *c, int64_t mono_ns, int64_t real_ns,
                             int64_t *start_ns, int64_t *end_ns);

#endif
