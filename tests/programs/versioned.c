/* Two versions of one program, for comparing versions (the dashboard's
 * compare view): both run shared_work, v1 also old_path, v2 instead
 * new_path, in slices of thread CPU time:
 *
 *   versioned v1 SECONDS   shared_work:old_path = 3:1
 *   versioned v2 SECONDS   shared_work:new_path = 1:3
 *
 * so v2 against v1 adds new_path (absent from v1), drops old_path and
 * shrinks shared_work. Each round of work is followed by as long a sleep:
 * the program uses half a CPU, which is plenty of samples at the test's
 * rates and leaves room for the rest of the test on a small machine.
 *
 * Built with frame pointers and no inlining (tests/CMakeLists.txt), so a
 * sampled stack reads main -> run -> shared_work|old_path|new_path. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void rest(int64_t ns) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = ns};
  /* An interrupted sleep only shortens the rest: nothing to retry. */
  nanosleep(&ts, NULL);
}

/* The loop is written out in each function (not a shared helper) so that
 * each one's self time is its own: a diff by self share shows new_path.
 * The CPU clock (a real system call, whose samples lose their caller
 * inside the C library) is read once per ~20 us of work. */
#define SPIN(ns, k)                                                                                \
  do {                                                                                             \
    int64_t end_ = cpu_ns() + (ns);                                                                \
    while (cpu_ns() < end_) {                                                                      \
      for (int i_ = 0; i_ < 20000; i_++) sink += (uint64_t)i_ * (k);                               \
    }                                                                                              \
  } while (0)

__attribute__((noinline)) void shared_work(int64_t ns) { SPIN(ns, 5); }
__attribute__((noinline)) void old_path(int64_t ns) { SPIN(ns, 11); }
__attribute__((noinline)) void new_path(int64_t ns) { SPIN(ns, 13); }

/* One call path for both versions, as in two builds of one program. */
__attribute__((noinline)) void run(int v2, int64_t end) {
  while (wall_ns() < end) {
    if (v2) {
      shared_work(1000000);
      new_path(3000000);
    } else {
      shared_work(3000000);
      old_path(1000000);
    }
    rest(4000000);
  }
}

int main(int argc, char **argv) {
  char *endp = NULL;
  long seconds = argc > 2 ? strtol(argv[2], &endp, 10) : 0;
  if (argc != 3 || (strcmp(argv[1], "v1") != 0 && strcmp(argv[1], "v2") != 0) || endp == argv[2] ||
      *endp != '\0' || seconds <= 0) {
    fprintf(stderr, "usage: versioned v1|v2 SECONDS\n");
    return 2;
  }
  printf("ready\n");
  fflush(stdout);
  int64_t end = wall_ns() + (int64_t)seconds * 1000000000;
  run(argv[1][1] == '2', end);
  return 0;
}
