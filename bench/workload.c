/* A CPU-bound workload with a throughput figure, to measure how much a
 * profiler slows its target:
 *
 *   workload THREADS SECONDS   prints "ops_per_sec N"
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
    (*ops)++;
  }
  return (void *)(uintptr_t)h;
}

int main(int argc, char **argv) {
  uint64_t threads = 1, seconds = 10;
  if ((argc > 1 && ember_parse_u64(argv[1], 1, 256, &threads) != 0) ||
      (argc > 2 && ember_parse_u64(argv[2], 1, 86400, &seconds) != 0)) {
    fprintf(stderr, "usage: workload THREADS SECONDS\n");
    return 2;
  }
  pthread_t t[256];
  uint64_t ops[256] = {0};
  double start = now_s();
  for (uint64_t i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, &ops[i]);
  struct timespec ts = {(time_t)seconds, 0};
  nanosleep(&ts, NULL);
  stop = 1;
  uint64_t total = 0;
  for (uint64_t i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    total += ops[i];
  }
  printf("ops_per_sec %.1f\n", (double)total / (now_s() - start));
  return 0;
}
