/* A CPU-bound workload with a throughput figure, to measure how much a
 * profiler slows its target:
 *
 *   workload THREADS SECONDS [SKIP]   prints "ops_per_sec N"
 *
 * With SKIP, the rate counts only the seconds after the first SKIP (so a
 * profiler attached meanwhile is measured over a window it covers whole).
 *
 * Each thread runs a fixed unit of work (a hash chain through a few call
 * levels, so stacks have depth) as many times as it can. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ember/parse.h"

static volatile int stop;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static uint64_t mix_leaf(uint64_t h) {
  for (int i = 0; i < 64; i++) h = (h ^ (h >> 31)) * 0x9e3779b97f4a7c15ULL;
  return h;
}

__attribute__((noinline)) static uint64_t mix_middle(uint64_t h) { return mix_leaf(h + 1) ^ 7; }
__attribute__((noinline)) static uint64_t mix_outer(uint64_t h) { return mix_middle(h * 3); }

static void *worker(void *arg) {
  uint64_t *ops = arg, h = (uint64_t)(uintptr_t)arg;
  while (!stop) {
    for (int i = 0; i < 1000; i++) h = mix_outer(h);
    /* One writer per counter; relaxed store so main can read it. */
    __atomic_store_n(ops, *ops + 1, __ATOMIC_RELAXED);
  }
  return (void *)(uintptr_t)h;
}

int main(int argc, char **argv) {
  uint64_t threads = 1, seconds = 10, skip = 0;
  if ((argc > 1 && ember_parse_u64(argv[1], 1, 256, &threads) != 0) ||
      (argc > 2 && ember_parse_u64(argv[2], 1, 86400, &seconds) != 0) ||
      (argc > 3 && ember_parse_u64(argv[3], 0, seconds - 1, &skip) != 0)) {
    fprintf(stderr, "usage: workload THREADS SECONDS [SKIP]\n");
    return 2;
  }
  pthread_t t[256];
  uint64_t ops[256] = {0};
  for (uint64_t i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, &ops[i]);
  double start = now_s();
  uint64_t before = 0;
  if (skip > 0) {
    struct timespec sk = {(time_t)skip, 0};
    nanosleep(&sk, NULL);
    start = now_s();
    for (uint64_t i = 0; i < threads; i++) before += __atomic_load_n(&ops[i], __ATOMIC_RELAXED);
  }
  struct timespec ts = {(time_t)(seconds - skip), 0};
  nanosleep(&ts, NULL);
  stop = 1;
  double end = now_s();
  uint64_t total = 0;
  for (uint64_t i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    total += ops[i];
  }
  printf("ops_per_sec %.1f\n", (double)(total - before) / (end - start));
  return 0;
}
