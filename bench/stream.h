/* The benchmarks' synthetic fleet stream (bench_store, bench_fleet,
 * bench_alerts, ingest_produce): N
 * workers, each with 500 distinct stacks of depth 5-30 made of a shared
 * runtime/libc part (root side) and the worker's own functions (leaf
 * side), each frame with function, file, module and build-id strings as
 * symbolized native code has. Each worker runs on one of 16 hosts, in one
 * of 3 versions, with 1-4 CPUs; a 10 s window at 19 Hz holds about 50-400
 * samples drawn with a Zipf-like skew from its 500 stacks, with values CPU
 * samples and CPU ns. Every window carries its agent id (one per host) and
 * that agent's next seq.
 *
 * Deterministic: one xorshift generator with a fixed seed, so the same
 * calls in the same order give the same stream in every run and every
 * benchmark (bench/RESULTS.md figures depend on it).
 *
 * Thread-safety: none (process-wide generator state); call from one thread.
 * Errors: an allocation or profile failure prints a sentence and exits the
 * benchmark (these are programs, not library code). */
#ifndef EMBER_BENCH_STREAM_H
#define EMBER_BENCH_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "ember/profile.h"

#define STREAM_SEC      1000000000LL
#define STREAM_T0       (1795996800LL * STREAM_SEC) /* 2026-11-29T00:00:00Z, an hour boundary */
#define STREAM_WIN      (10 * STREAM_SEC)
#define STREAM_PERIOD   (STREAM_SEC / 19)
#define STREAM_NSTACKS  500
#define STREAM_NHOSTS   16
#define STREAM_MAXDEPTH 30
#define STREAM_NOWN     600
#define STREAM_NSHARED  400 /* frame indices below it are the shared runtime's */

typedef struct stream_worker {
  char name[32], version[16], host[16], agent[24];
  unsigned cpus;
  ember_frame_t own[STREAM_NOWN];
  char *own_names[STREAM_NOWN];
  uint8_t depth[STREAM_NSTACKS];
  uint32_t frames[STREAM_NSTACKS][STREAM_MAXDEPTH]; /* leaf first; stream_frame */
} stream_worker_t;

/* Each worker's CPU use in percent of its CPUs; 0 (default) = 25-55 %,
 * drawn per window. Set before making windows. */
extern uint64_t stream_util_pct;

/* The shared frames and the Zipf table; call once, before anything else. */
void stream_init(void);
/* Worker number `idx` (its names, frames and stacks), drawn from the
 * generator: make workers in index order. Its strings live until exit. */
void stream_make_worker(stream_worker_t *w, size_t idx);
/* One 10 s window of worker w (number widx) starting at `start`, owned by
 * the caller (ember_profile_free); *samples gets its sample count. */
ember_profile_t *stream_window(const stream_worker_t *w, size_t widx, int64_t start,
                               uint64_t *samples);

/* A window that differs from the worker's usual one (bench_alerts: a
 * worker on two hosts, spikes). Zero fields keep stream_window's choice. */
typedef struct stream_shape {
  const char *host, *agent; /* labels and origin; NULL: the worker's */
  uint64_t *seq;            /* the agent's seq counter; NULL: the worker's host's */
  uint64_t util_pct;        /* 0: stream_util_pct, else drawn */
  unsigned spike_pct;       /* share of the samples put on spike_stack */
  size_t spike_stack;
} stream_shape_t;
/* stream_window shaped by `shape` (may be NULL); *distinct (may be NULL)
 * gets its number of distinct stacks. */
ember_profile_t *stream_window_shaped(const stream_worker_t *w, size_t widx, int64_t start,
                                      const stream_shape_t *shape, uint64_t *samples,
                                      size_t *distinct);
/* Frame f of w's stacks (shared below STREAM_NSHARED, else its own). */
const ember_frame_t *stream_frame(const stream_worker_t *w, uint32_t f);
/* The next number of the stream's generator, for a benchmark's own draws
 * (they then belong to the stream's deterministic sequence). */
uint64_t stream_rand(void);

#endif
