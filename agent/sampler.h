/* CPU sampling: one perf_event per online CPU, drained from a libuv loop.
 *
 * Each CPU gets a software cpu-clock event (pid = -1: every task on that
 * CPU) in frequency mode at `hz`, sampling TID, TIME, PERIOD and the
 * callchain (user, and kernel unless disabled), into an mmap ring of
 * 1 + ring_pages pages. The loop drains a ring when the kernel wakes it
 * (a quarter full) and on a timer, so at low rates records never wait more
 * than drain_ms. Lost records (PERF_RECORD_LOST) and throttling are
 * counted. CPUs that come online later get an event at the next hotplug
 * check; events of CPUs gone offline are closed.
 *
 * Every sample goes to the callback (perf.h's raw sample), on the loop
 * thread, with its callchain leaf first and perf's context markers
 * removed. The callback
 * must not block: it runs while the ring is being read.
 *
 * Thread-safety: all calls on the loop's thread. */
#ifndef EMBER_AGENT_SAMPLER_H
#define EMBER_AGENT_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "perf.h"

typedef struct ember__sampler_opts {
  uint32_t hz;              /* per CPU; default 19 */
  uint32_t ring_pages;      /* data pages per ring, a power of two; default 8 */
  bool kernel;              /* kernel callchains too (default true) */
  uint32_t drain_ms;        /* drain period; default 250 */
  uint32_t hotplug_ms;      /* CPU online check period; default 5000; 0 = never */
  const char *sysfs_online; /* NULL = /sys/devices/system/cpu/online */
  /* Bytes of user stack copied with each sample (with the user registers,
   * perf.h), for unwinding from CFI; 0 = frame-pointer callchains from the
   * kernel. With a copy and ring_pages 0, rings are sized for hz. */
  uint32_t stack_bytes;
} ember__sampler_opts_t;

typedef struct ember__sampler_stats {
  uint64_t samples, lost, throttles, unthrottles, bad_records, wakeups;
  uint32_t cpus;
} ember__sampler_stats_t;

typedef struct ember__sampler ember__sampler_t;

/* Open one event per online CPU and start draining on `loop`. Returns 0;
 * -EACCES/-EPERM when perf_event_open is refused (errbuf names
 * kernel.perf_event_paranoid and CAP_PERFMON), -EINVAL when hz is above
 * kernel.perf_event_max_sample_rate (errbuf says the cap), other -errno. */
int ember__sampler_start(uv_loop_t *loop, const ember__sampler_opts_t *opts, ember__sample_fn fn,
                         void *ctx, ember__sampler_t **out, char *errbuf, size_t errbuf_size);
/* Drain every ring now (e.g. before closing a window). */
void ember__sampler_drain(ember__sampler_t *s);
/* Stop and close everything; the handles close on the loop, so run the loop
 * once more (uv_run) before freeing the loop. */
void ember__sampler_stop(ember__sampler_t *s);
void ember__sampler_stats(const ember__sampler_t *s, ember__sampler_stats_t *out);

/* Parse a CPU list like "0-3,8,10-11" into a bitmap of `max` CPUs; returns
 * the count set or -EINVAL. Exposed for tests. */
int ember__cpulist_parse(const char *s, uint8_t *bitmap, size_t max);

#endif
