/* ember__sort_u64 (store/sort_u64.c), which sorts the write path's packed
 * (stack id, sample index) keys: checked against qsort on the inputs
 * that break quicksorts (sorted, reversed, equal keys, organ pipes) and
 * on random ones, at every small length and at lengths that partition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

void ember__sort_u64(uint64_t *k, size_t n);

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

enum { RANDOM, SORTED, REVERSED, EQUAL, FEW, PIPE, PACKED, NPATTERNS };

static void fill(uint64_t *k, size_t n, int pattern) {
  for (size_t i = 0; i < n; i++) {
    switch (pattern) {
    case RANDOM: k[i] = next(); break;
    case SORTED: k[i] = i; break;
    case REVERSED: k[i] = n - i; break;
    case EQUAL: k[i] = 7; break;
    case FEW: k[i] = next() % 3; break;
    case PIPE: k[i] = i < n / 2 ? i : n - i; break;
    /* What the write path sorts: a few stack ids, each sent more than once. */
    default: k[i] = (next() % (n / 2 + 1)) << 32 | i; break;
    }
  }
}

static void check(size_t n, int pattern) {
  uint64_t *k = malloc((n ? n : 1) * sizeof *k), *ref = malloc((n ? n : 1) * sizeof *ref);
  assert_non_null(k);
  assert_non_null(ref);
  fill(k, n, pattern);
  memcpy(ref, k, n * sizeof *k);
  if (n) qsort(ref, n, sizeof *ref, cmp_u64);
  ember__sort_u64(k, n);
  assert_memory_equal(k, ref, n * sizeof *k);
  free(k);
  free(ref);
}

static void test_sort_small_lengths(void **state) {
  (void)state;
  ember__sort_u64(NULL, 0);
  for (size_t n = 0; n <= 70; n++)
    for (int p = 0; p < NPATTERNS; p++) check(n, p);
}

static void test_sort_large_lengths(void **state) {
  (void)state;
  static const size_t lens[] = {89, 100, 255, 1000, 4097, 100000};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    for (int p = 0; p < NPATTERNS; p++) check(lens[i], p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sort_small_lengths),
      cmocka_unit_test(test_sort_large_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
