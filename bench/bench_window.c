/* bench_window: what fractional weights cost in agent/window.c, and how
 * exact their sums stay (the choice written in window.h and
 * docs/internals/alloc.md).
 *
 *   bench_window [ADDS]   (default 1000000)
 *
 * Precision: ADDS preload-style samples (sizes log-uniform from 8 B to
 * 4 MiB, weight 1 / (1 - exp(-size/R)), bytes = weight * size) into one
 * stack, so every rounding error lands in the same slot (the worst case).
 * Each sum is compared with the exact sum of the same doubles (an __int128
 * in units of 2^-64, exact for these weights), for the window's Q32 slots
 * and for a plain double accumulator (the alternative: double slots).
 * Cost: ns per add through the window for integer adds (CPU samples,
 * uprobe allocations) and weighted adds, on a 1-frame stack (the slot
 * arithmetic is most of the work) and on 1000 stacks of 24 frames (what a
 * window holds). */
#include <math.h>
#include <stdio.h>
#include <time.h>

#include "ember/parse.h"
#include "window.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static double uniform(void) { return (double)(next() >> 11) * 0x1p-53; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Exact: every value here is >= 1, so its last bit is worth >= 2^-52. */
static __int128 q64(double v) { return (__int128)(v * 0x1p64); }
static double from_q64(__int128 v) { return (double)v * 0x1p-64; }

static int precision(uint64_t adds, double r) {
  ember__window_t *w = NULL;
  if (ember__window_new(&w) != 0) return 1;
  uint64_t ip = 0x401000;
  __int128 exact_o = 0, exact_b = 0;
  double dbl_o = 0, dbl_b = 0;
  for (uint64_t i = 0; i < adds; i++) {
    double size = floor(exp(log(8.0) + uniform() * (log(4194304.0) - log(8.0))));
    double wt = 1.0 / -expm1(-size / r), bytes = wt * size;
    exact_o += q64(wt);
    exact_b += q64(bytes);
    dbl_o += wt;
    dbl_b += bytes;
    if (ember__window_add_weighted(w, 1, &ip, 1, wt, bytes, NULL) != 0) return 1;
  }
  size_t n = 0;
  const ember__window_stack_t *s = ember__window_sorted(w, &n);
  double eo = from_q64(exact_o), eb = from_q64(exact_b);
  printf("R = %6.0f KiB, %llu adds: objects exact %.6f, Q32 slot %lld (off %.6f), double %.6f "
         "(off %.6f)\n",
         r / 1024, (unsigned long long)adds, eo, (long long)s[0].samples, (double)s[0].samples - eo,
         dbl_o, dbl_o - eo);
  printf("                         bytes exact %.6f, Q32 slot %lld (off %.6f), double %.6f (off "
         "%.6f)\n",
         eb, (long long)s[0].cpu_ns, (double)s[0].cpu_ns - eb, dbl_b, dbl_b - eb);
  ember__window_free(w);
  return 0;
}

/* Integer sums past 2^53: a double slot stops counting single bytes. */
static void large(void) {
  double d = 0x1p53;
  d += 1;
  ember__window_t *w = NULL;
  uint64_t ip = 1;
  if (ember__window_new(&w) != 0) return;
  ember__window_add_values(w, 1, &ip, 1, 1, (int64_t)1 << 53, NULL);
  ember__window_add_values(w, 1, &ip, 1, 1, 1, NULL);
  size_t n = 0;
  const ember__window_stack_t *s = ember__window_sorted(w, &n);
  printf("2^53 + 1 bytes: integer slot %lld, double slot %.0f\n", (long long)s[0].cpu_ns, d);
  ember__window_free(w);
}

static double cost(uint64_t adds, uint32_t nstacks, uint32_t depth, bool weighted) {
  ember__window_t *w = NULL;
  uint64_t ips[24];
  if (ember__window_new(&w) != 0 || depth > 24) return -1;
  double t0 = now_s();
  for (uint64_t i = 0; i < adds; i++) {
    uint64_t k = i % nstacks;
    for (uint32_t d = 0; d < depth; d++) ips[d] = 0x400000 + k * 64 + d;
    int rc = weighted ? ember__window_add_weighted(w, 1, ips, depth, 1.37, 1.37 * 3072, NULL)
                      : ember__window_add_values(w, 1, ips, depth, 1, 3072, NULL);
    if (rc != 0) return -1;
  }
  double t = now_s() - t0;
  ember__window_free(w);
  return t / (double)adds * 1e9;
}

int main(int argc, char **argv) {
  uint64_t adds = 1000000;
  if (argc > 2 || (argc == 2 && ember_parse_u64(argv[1], 1, 1ull << 32, &adds) != 0)) {
    fprintf(stderr, "usage: bench_window [ADDS]\n");
    return 2;
  }
  if (precision(adds, 32 * 1024) != 0 || precision(adds, 512 * 1024) != 0) return 1;
  large();
  for (int rep = 0; rep < 2; rep++) {
    printf("ns/add, 1 stack of 1 frame: integer %.2f, weighted %.2f; 1000 stacks of 24 frames: "
           "integer %.2f, weighted %.2f\n",
           cost(adds * 10, 1, 1, false), cost(adds * 10, 1, 1, true), cost(adds, 1000, 24, false),
           cost(adds, 1000, 24, true));
  }
  return 0;
}
