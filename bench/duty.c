/* A light process: burns `ms_per_100ms` ms of CPU in every 100 ms through
 * a few call levels, forever. 50 of these stand in for a host's services. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "ember/parse.h"

static volatile uint64_t sink;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) static void serve_request(int64_t ns) {
  int64_t end = now_ns() + ns;
  while (now_ns() < end) sink++;
}

__attribute__((noinline)) static void handle_batch(int64_t ns) { serve_request(ns); }

int main(int argc, char **argv) {
  uint64_t ms = 2;
  if (argc > 1 && ember_parse_u64(argv[1], 0, 100, &ms) != 0) return 2;
  for (;;) {
    int64_t start = now_ns();
    handle_batch((int64_t)ms * 1000000);
    int64_t left = 100000000 - (now_ns() - start);
    if (left > 0) {
      struct timespec ts = {0, (long)left};
      nanosleep(&ts, NULL);
    }
  }
}
