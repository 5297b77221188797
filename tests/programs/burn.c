/* A CPU burner with two known functions that share the CPU 3:1:
 * burn_hot runs 3 ms of thread CPU time for every 1 ms in burn_cold.
 *
 *   burn SECONDS     run for SECONDS of wall time, then exit 0
 *
 * Built with frame pointers and no inlining (tests/CMakeLists.txt), so a
 * sampled stack reads main -> burn_loop -> burn_hot|burn_cold. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) void burn_hot(int64_t ns) {
  int64_t end = cpu_ns() + ns;
  while (cpu_ns() < end) {
    for (int i = 0; i < 1000; i++) sink += (uint64_t)i * 7;
  }
}

__attribute__((noinline)) void burn_cold(int64_t ns) {
  int64_t end = cpu_ns() + ns;
  while (cpu_ns() < end) {
    for (int i = 0; i < 1000; i++) sink += (uint64_t)i * 3;
  }
}

__attribute__((noinline)) void burn_loop(int64_t seconds) {
  int64_t end = wall_ns() + seconds * 1000000000;
  while (wall_ns() < end) {
    burn_hot(3000000);
    burn_cold(1000000);
  }
}

int main(int argc, char **argv) {
  char *endp = NULL;
  long seconds = argc > 1 ? strtol(argv[1], &endp, 10) : 5;
  if (argc > 1 && (endp == argv[1] || *endp != '\0' || seconds <= 0)) {
    fprintf(stderr, "usage: burn SECONDS\n");
    return 2;
  }
  printf("ready\n");
  fflush(stdout);
  burn_loop(seconds);
  return 0;
}
