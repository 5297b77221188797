/* Ingest health (health.h). */
#include "health.h"

#include <stdio.h>

#include "ember/store.h"

#define NS_PER_S 1000000000LL

void ember__health_init(ember__health_t *h, int64_t stall_ns, int64_t max_lag) {
  h->stall_ns = stall_ns;
  h->max_lag = max_lag;
  atomic_init(&h->failing_since, 0);
  atomic_init(&h->last_rc, 0);
  atomic_init(&h->growing_since, 0);
  atomic_init(&h->lag, 0);
  atomic_init(&h->beat, 0);
  h->base = 0;
  h->base_ns = 0;
}

void ember__health_store(ember__health_t *h, int rc, int64_t now_ns) {
  if (rc == 0) {
    atomic_store(&h->failing_since, 0);
    return;
  }
  atomic_store(&h->last_rc, rc);
  /* 0 would read as "no failure": a clock at exactly 0 counts from 1. */
  long long zero = 0;
  atomic_compare_exchange_strong(&h->failing_since, &zero, now_ns ? now_ns : 1);
}

void ember__health_lag(ember__health_t *h, int64_t lag, int64_t now_ns) {
  atomic_store(&h->lag, lag);
  if (lag <= h->max_lag) {
    h->base_ns = 0;
    atomic_store(&h->growing_since, 0);
    return;
  }
  if (h->base_ns == 0) {
    h->base = lag;
    h->base_ns = now_ns ? now_ns : 1;
    return;
  }
  /* Judged once per window, against the lag a window ago: samples a
   * second apart jitter (a poll takes a whole batch at once), the trend
   * does not. */
  if (now_ns - h->base_ns < h->stall_ns) return;
  if (lag > h->base) {
    long long zero = 0;
    atomic_compare_exchange_strong(&h->growing_since, &zero, h->base_ns);
  } else {
    atomic_store(&h->growing_since, 0);
  }
  h->base = lag;
  h->base_ns = now_ns;
}

void ember__health_beat(ember__health_t *h, int64_t now_ns) {
  atomic_store(&h->beat, now_ns ? now_ns : 1);
}

bool ember__health_ready(ember__health_t *h, int64_t now_ns, char *why, size_t why_size) {
  /* First: a stuck thread also leaves the other inputs as they were. */
  int64_t beat = atomic_load(&h->beat);
  if (beat != 0 && now_ns - beat >= h->stall_ns) {
    snprintf(why, why_size,
             "ingest has made no progress for %lld s: a store write (or retention) has not "
             "returned; check the store's disk (a hung fsync?) and the collector's log",
             (long long)((now_ns - beat) / NS_PER_S));
    return false;
  }
  int64_t since = atomic_load(&h->failing_since);
  if (since != 0 && now_ns - since >= h->stall_ns) {
    snprintf(why, why_size, "ingest is wedged: store writes have failed for %lld s: %s",
             (long long)((now_ns - since) / NS_PER_S),
             ember_store_strerror(atomic_load(&h->last_rc)));
    return false;
  }
  int64_t grow = atomic_load(&h->growing_since);
  if (grow != 0 && now_ns - grow >= h->stall_ns) {
    snprintf(why, why_size,
             "consumer lag is %lld messages, over health.max_lag (%lld), and has grown for "
             "%lld s: add a collector to the group",
             (long long)atomic_load(&h->lag), (long long)h->max_lag,
             (long long)((now_ns - grow) / NS_PER_S));
    return false;
  }
  return true;
}
