/* Errors, the allocation wrappers with their failure-injection hook, and
 * clocks. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/ember.h"

const char *ember_strerror(int err) {
  switch (err) {
  case 0: return "success";
  case EMBER_ECORRUPT: return "malformed input";
  case EMBER_ENOTFOUND: return "not found";
  case EMBER_ETOOBIG: return "size limit exceeded";
  case EMBER_EMISMATCH: return "incompatible operands";
  case EMBER_EVERSION: return "unsupported version";
  case EMBER_EKAFKA: return "Kafka client error";
  case EMBER_ECONFIG: return "invalid configuration";
  case EMBER_ETIMEDOUT: return "timed out";
  case EMBER_EMAPFULL:
    return "the store's map is full (its largest size, store.max_size, is reached; the disk may "
           "have room)";
  default: break;
  }
  if (err < 0 && err > EMBER_ERRNO_BASE) {
    /* strerror() is not thread-safe in general, but glibc's returns static
     * strings for known errno values, which is all we pass it. */
    return strerror(-err);
  }
  return "unknown error";
}

/* Failure injection. `fail_budget` < 0 means off. Atomic, because tests of
 * servers arm it in the test thread while the server's threads allocate:
 * a reset must not be undone by a decrement that read the budget before
 * it (that re-armed the hook behind the test's back). */
static _Atomic long fail_budget = -1;
static _Atomic long alloc_count;

static int alloc_should_fail(void) {
  atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
  long b = atomic_load_explicit(&fail_budget, memory_order_relaxed);
  while (b > 0) {
    if (atomic_compare_exchange_weak_explicit(&fail_budget, &b, b - 1, memory_order_relaxed,
                                              memory_order_relaxed))
      return 0;
  }
  return b == 0;
}

void ember_alloc_fail_after(long n) {
  atomic_store(&alloc_count, 0);
  atomic_store(&fail_budget, n);
}

long ember_alloc_fail_reset(void) {
  atomic_store(&fail_budget, -1);
  return atomic_exchange(&alloc_count, 0);
}

void *ember_malloc(size_t size) {
  if (alloc_should_fail()) return NULL;
  return malloc(size ? size : 1);
}

void *ember_calloc(size_t n, size_t size) {
  if (alloc_should_fail()) return NULL;
  return calloc(n ? n : 1, size ? size : 1);
}

void *ember_realloc(void *p, size_t size) {
  if (alloc_should_fail()) return NULL;
  return realloc(p, size ? size : 1);
}

char *ember_strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *d = ember_malloc(len + 1);
  if (d == NULL) return NULL;
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}

char *ember_strdup(const char *s) { return ember_strndup(s, strlen(s)); }

void ember_free(void *p) { free(p); }

static int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + (int64_t)ts.tv_nsec;
}

int64_t ember_time_now_ns(void) { return clock_ns(CLOCK_REALTIME); }
int64_t ember_time_mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
