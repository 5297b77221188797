/* bench/bench_heap.sh's target: a malloc-heavy workload, small allocations
 * and frees in a tight loop in several threads.
 *
 *   heap_workload THREADS SECONDS [WARMUP_MS]
 *
 * Each thread keeps 8 blocks live and, in a loop, frees one picked at
 * random and allocates a new one of 16..512 bytes in its place, writing
 * its first word (as a caller would). After WARMUP_MS (default 500, so a
 * reader or a session attached meanwhile covers the whole measurement)
 * it counts SECONDS of pairs and prints
 *
 *   pairs N cpu_ns N ns_per_pair X
 *
 * where cpu_ns is the process's CPU time over the measurement
 * (CLOCK_PROCESS_CPUTIME_ID: user and kernel time of every thread, so a
 * probe's trap is charged to the workload and time spent waiting for a
 * CPU is not; the figure holds on a loaded machine). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ember/parse.h"

#define MAX_THREADS 64
#define LIVE        8 /* blocks live per thread */

typedef struct worker {
  _Alignas(64) uint64_t pairs; /* written by its thread only */
  uint64_t seed;
} worker_t;

static volatile int stop;

static int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(uint64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* Out of line, with frame pointers: the allocating function a profiler
 * should name. */
__attribute__((noinline)) static void *churn_alloc(size_t n) {
  void *p = malloc(n);
  if (p == NULL) abort();
  *(volatile uint64_t *)p = n;
  return p;
}

static void *run(void *arg) {
  worker_t *w = arg;
  void *live[LIVE];
  uint64_t x = w->seed | 1;
  for (int i = 0; i < LIVE; i++) live[i] = churn_alloc(16);
  while (!stop) {
    for (int k = 0; k < 1024; k++) {
      /* xorshift64: the slot and the size, cheap next to malloc. */
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      unsigned slot = (unsigned)(x & (LIVE - 1));
      size_t size = 16 + (size_t)((x >> 8) % 497);
      free(live[slot]);
      live[slot] = churn_alloc(size);
    }
    /* One writer per counter; relaxed so main can read it. */
    __atomic_store_n(&w->pairs, w->pairs + 1024, __ATOMIC_RELAXED);
  }
  for (int i = 0; i < LIVE; i++) free(live[i]);
  return NULL;
}

static uint64_t total_pairs(const worker_t *w, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; i++) s += __atomic_load_n(&w[i].pairs, __ATOMIC_RELAXED);
  return s;
}

int main(int argc, char **argv) {
  uint64_t threads = 2, seconds = 3, warmup_ms = 500;
  if (argc < 3 || argc > 4 || ember_parse_u64(argv[1], 1, MAX_THREADS, &threads) != 0 ||
      ember_parse_u64(argv[2], 1, 86400, &seconds) != 0 ||
      (argc == 4 && ember_parse_u64(argv[3], 0, 60000, &warmup_ms) != 0)) {
    fprintf(stderr, "usage: heap_workload THREADS SECONDS [WARMUP_MS]\n");
    return 2;
  }
  static worker_t w[MAX_THREADS];
  pthread_t t[MAX_THREADS];
  for (uint64_t i = 0; i < threads; i++) {
    w[i].seed = 0x9e3779b97f4a7c15ULL * (i + 1);
    if (pthread_create(&t[i], NULL, run, &w[i]) != 0) {
      fprintf(stderr, "heap_workload: cannot start thread %llu\n", (unsigned long long)i);
      return 1;
    }
  }
  sleep_ms(warmup_ms);
  uint64_t p0 = total_pairs(w, threads);
  int64_t c0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  sleep_ms(seconds * 1000);
  uint64_t p1 = total_pairs(w, threads);
  int64_t c1 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  stop = 1;
  for (uint64_t i = 0; i < threads; i++) pthread_join(t[i], NULL);
  uint64_t pairs = p1 - p0;
  int64_t cpu = c1 - c0;
  printf("pairs %llu cpu_ns %lld ns_per_pair %.3f\n", (unsigned long long)pairs, (long long)cpu,
         pairs != 0 ? (double)cpu / (double)pairs : 0.0);
  return 0;
}
