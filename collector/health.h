/* Ingest health for /healthz: is the collector doing its job?
 *
 * Not ready while store writes have failed, in a row, for longer than
 * `stall_ns` (ingest is wedged: a full disk, a map full at store.max_size,
 * a damaged store), or while the consumer lag is over `max_lag` and was
 * higher at the end of the last window of `stall_ns` than at its start (the
 * group falls behind its agents); a lag that is high but steady is not
 * falling behind. Ready again as soon as a write succeeds, and once a
 * window ends with the lag no higher than it began (or under max_lag, at
 * once). Also not ready while the ingest loop has not come round for
 * `stall_ns` (it beats once an iteration): a store write that never returns
 * (a hung fsync, a lock) feeds neither of the inputs above. Times are
 * CLOCK_MONOTONIC nanoseconds passed in by the caller, so tests can drive
 * it.
 *
 * Thread-safety: the ingest thread calls _lag (one writer of the lag's
 * window), the ingest and the writer threads _store and _beat (atomic
 * stores); any thread may call _ready at the same time. */
#ifndef EMBER_COLLECTOR_HEALTH_H
#define EMBER_COLLECTOR_HEALTH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ember__health {
  int64_t stall_ns, max_lag;
  atomic_llong failing_since; /* first failed write of the current run; 0 = none */
  atomic_int last_rc;         /* the last failure's code */
  atomic_llong growing_since; /* lag over max_lag and above its base since; 0 = not */
  atomic_llong lag;           /* the last lag seen */
  atomic_llong beat;          /* the ingest loop's last iteration; 0 = not started */
  int64_t base, base_ns;      /* writer only: the lag at the start of the window */
} ember__health_t;

void ember__health_init(ember__health_t *h, int64_t stall_ns, int64_t max_lag);
/* A store write ended with `rc` (0 = stored). */
void ember__health_store(ember__health_t *h, int rc, int64_t now_ns);
/* The consumer lag, in messages, measured at now_ns. */
void ember__health_lag(ember__health_t *h, int64_t lag, int64_t now_ns);
/* The ingest loop came round at now_ns (it is not stuck in a call). */
void ember__health_beat(ember__health_t *h, int64_t now_ns);
/* True if ready; else false with a sentence in why (why_size bytes). */
bool ember__health_ready(ember__health_t *h, int64_t now_ns, char *why, size_t why_size);

#endif
