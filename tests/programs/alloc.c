/* An allocator user with two known functions whose bytes are 3:1:
 * alloc_big mallocs 3072 bytes and alloc_small callocs 4 x 256 = 1024
 * bytes, once each per iteration, each freeing what it allocated.
 *
 *   alloc SECONDS [PER_MS]  run for SECONDS (may be fractional: "1.5") of
 *                           wall time, at most PER_MS iterations per
 *                           millisecond (0 or absent: as fast as it can);
 *                           prints "iterations N allocs_per_sec R
 *                           allocs_per_cpu_sec C"
 *   alloc -n N              run exactly N iterations; prints a checksum of
 *                           what it wrote and read (same with or without
 *                           an allocation sampler)
 *
 * ALLOC_VIA=realloc|memalign|aligned_alloc|posix_memalign in the
 * environment makes alloc_big allocate its 3072 bytes with that function
 * instead of malloc (realloc as realloc(NULL, n), which in glibc calls
 * malloc inside: a profiler must not count it twice).
 *
 * Built with frame pointers and no inlining (tests/CMakeLists.txt), so a
 * stack reads main -> run -> alloc_big|alloc_small -> malloc|calloc. */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile uint64_t sink;
enum { VIA_MALLOC, VIA_REALLOC, VIA_MEMALIGN, VIA_ALIGNED_ALLOC, VIA_POSIX_MEMALIGN };
static int via;

__attribute__((noinline)) static void *big_block(void) {
  /* Through a volatile: GCC folds realloc(NULL, n) into malloc(n). */
  static void *volatile none;
  void *p = NULL;
  switch (via) {
  case VIA_REALLOC: return realloc(none, 3072);
  case VIA_MEMALIGN: return memalign(64, 3072);
  case VIA_ALIGNED_ALLOC: return aligned_alloc(64, 3072);
  case VIA_POSIX_MEMALIGN: return posix_memalign(&p, 64, 3072) == 0 ? p : NULL;
  default: return malloc(3072);
  }
}

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) void alloc_big(uint64_t i) {
  unsigned char *p = via == VIA_MALLOC ? malloc(3072) : big_block();
  if (p == NULL) abort();
  p[0] = (unsigned char)i;
  p[3071] = (unsigned char)(i >> 8);
  sink += p[0] + p[3071];
  free(p);
}

__attribute__((noinline)) void alloc_small(uint64_t i) {
  unsigned char *p = calloc(4, 256);
  if (p == NULL) abort();
  p[1023] = (unsigned char)(i * 3);
  sink += p[0] + p[1023];
  free(p);
}

__attribute__((noinline)) uint64_t run(int64_t ns, int64_t per_ms, int64_t count) {
  int64_t start = wall_ns(), end = start + ns;
  uint64_t i = 0;
  for (;;) {
    if (count >= 0 && (int64_t)i >= count) break;
    if (count < 0 && (i & 63) == 0 && wall_ns() >= end) break;
    if (per_ms > 0 && i % (uint64_t)per_ms == 0) {
      /* Pace to PER_MS iterations per millisecond since the start. */
      int64_t due = start + (int64_t)(i / (uint64_t)per_ms) * 1000000;
      struct timespec ts = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
      if (due > wall_ns()) clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
    }
    alloc_big(i);
    alloc_small(i);
    i++;
  }
  return i;
}

int main(int argc, char **argv) {
  static const char *const vias[] = {"malloc", "realloc", "memalign", "aligned_alloc",
                                     "posix_memalign"};
  const char *v = getenv("ALLOC_VIA");
  for (int i = 0; v != NULL && i < (int)(sizeof vias / sizeof vias[0]); i++)
    if (strcmp(v, vias[i]) == 0) via = i;
  if (argc == 3 && strcmp(argv[1], "-n") == 0) {
    char *endp = NULL;
    long n = strtol(argv[2], &endp, 10);
    if (endp == argv[2] || *endp != '\0' || n < 0) return 2;
    run(0, 0, n);
    printf("checksum %llu\n", (unsigned long long)sink);
    return 0;
  }
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: alloc SECONDS [PER_MS] | alloc -n N\n");
    return 2;
  }
  char *endp = NULL;
  double secs = strtod(argv[1], &endp);
  if (endp == argv[1] || *endp != '\0' || secs < 0 || secs > 86400) return 2;
  long per_ms = 0;
  if (argc == 3) {
    per_ms = strtol(argv[2], &endp, 10);
    if (endp == argv[2] || *endp != '\0' || per_ms < 0) return 2;
  }
  int64_t t0 = wall_ns(), c0 = cpu_ns();
  uint64_t it = run((int64_t)(secs * 1e9), per_ms, -1);
  double el = (double)(wall_ns() - t0) / 1e9, cpu = (double)(cpu_ns() - c0) / 1e9;
  /* Per CPU second too: on a busy machine the wall rate mostly measures
   * the scheduler; kernel time of probes is charged to this process. */
  printf("iterations %llu allocs_per_sec %.0f allocs_per_cpu_sec %.0f\n", (unsigned long long)it,
         el > 0 ? 2.0 * (double)it / el : 0.0, cpu > 0 ? 2.0 * (double)it / cpu : 0.0);
  return 0;
}
