/* Errors, the allocation wrappers with their failure-injection hook, and
 * clocks. */
#include <errno.h>
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
  default: break;
  }
  if (err < 0 && err > EMBER_ERRNO_BASE) {
    /* strerror() is not thread-safe in general, but glibc's returns static
     * strings for known errno values, which is all we pass it. */
    return strerror(-err);
  }
  return "unknown error";
}

/* Failure injection. `fail_budget` < 0 means off. These are plain globals
 * because the hook is only for single-threaded tests (see ember.h). */
static long fail_budget = -1;
static long alloc_count;

static int alloc_should_fail(void) {
  alloc_count++;
  if (fail_budget < 0) return 0;
  if (fail_budget == 0) return 1;
  fail_budget--;
  return 0;
}

void ember_alloc_fail_after(long n) {
  fail_budget = n;
  alloc_count = 0;
}

long ember_alloc_fail_reset(void) {
  long n = alloc_count;
  fail_budget = -1;
  alloc_count = 0;
  return n;
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
