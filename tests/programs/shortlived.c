/* Burns MILLISECONDS (default 1500) of its own CPU time in
 * short_lived_work, then exits: the agent must still attribute and
 * symbolize its samples. CPU time, not wall time, so the number of samples
 * it earns does not depend on how busy the machine is. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The CPU clock is a real system call, and a sample inside the C library
 * (no frame pointers) loses its caller: read it once per ~20 us of work,
 * not once per microsecond, or half the samples miss short_lived_work. */
__attribute__((noinline)) void short_lived_work(int64_t ms) {
  int64_t end = cpu_ns() + ms * 1000000;
  while (cpu_ns() < end) {
    for (int i = 0; i < 20000; i++) sink += (uint64_t)i;
  }
}

int main(int argc, char **argv) {
  char *endp = NULL;
  long ms = argc > 1 ? strtol(argv[1], &endp, 10) : 1500;
  if (argc > 1 && (endp == argv[1] || *endp != '\0' || ms <= 0)) return 2;
  short_lived_work(ms);
  return 0;
}
