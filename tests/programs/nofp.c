/* A program built the way distributions build theirs: -O2 and no frame
 * pointers (tests/CMakeLists.txt gives it those flags, unlike the other
 * test programs). It burns CPU in two known call chains until it has used
 * the CPU seconds it is given:
 *
 *   main -> chain_a -> chain_b -> chain_leaf            (plain C calls)
 *   main -> sort_chain -> qsort (libc) -> by_weight     (a libc callback)
 *
 * so a profiler that unwinds from CFI shows every frame up to main, and one
 * that follows frame pointers loses them. The functions are noinline and
 * use what their callee returns, so no call is a tail call: every frame is
 * really on the stack.
 *
 * Usage: nofp SECONDS */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile uint64_t sink;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

NOINLINE uint64_t chain_leaf(uint64_t x);
NOINLINE uint64_t chain_b(uint64_t x);
NOINLINE uint64_t chain_a(uint64_t x);
NOINLINE int by_weight(const void *a, const void *b);
NOINLINE uint64_t sort_chain(uint64_t seed);

NOINLINE uint64_t chain_leaf(uint64_t x) {
  for (int i = 0; i < 4000000; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

NOINLINE uint64_t chain_b(uint64_t x) { return chain_leaf(x ^ 0x9e37) + 3; }

NOINLINE uint64_t chain_a(uint64_t x) { return chain_b(x + 1) * 5; }

/* A comparator with some work of its own, so samples land in it. */
NOINLINE int by_weight(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  for (int i = 0; i < 40; i++) {
    x = x * 2862933555777941757ULL + 3037000493ULL;
    y = y * 2862933555777941757ULL + 3037000493ULL;
  }
  return (x > y) - (x < y);
}

NOINLINE uint64_t sort_chain(uint64_t seed) {
  static uint64_t v[4096];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    seed = seed * 6364136223846793005ULL + 1;
    v[i] = seed;
  }
  qsort(v, sizeof v / sizeof v[0], sizeof v[0], by_weight);
  return v[0] + v[4095];
}

int main(int argc, char **argv) {
  char *end = NULL;
  double seconds = argc > 1 ? strtod(argv[1], &end) : 5.0;
  if (argc > 1 && (end == argv[1] || *end != '\0' || seconds <= 0)) {
    fprintf(stderr, "usage: nofp SECONDS\n");
    return 2;
  }
  uint64_t x = (uint64_t)time(NULL);
  while (cpu_seconds() < seconds) {
    x = chain_a(x);
    x += sort_chain(x);
  }
  sink = x;
  return 0;
}
