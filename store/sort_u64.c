/* An introsort over 64-bit keys (see sort_u64.h): quicksort down to short
 * runs, which insertion sort finishes, with heapsort taking over a range
 * that keeps partitioning badly, so no input takes quadratic time. */
#include "sort_u64.h"

/* Below this many keys insertion sort beats another partition. */
#define SMALL 16

static void insertion(uint64_t *k, size_t n) {
  for (size_t i = 1; i < n; i++) {
    uint64_t x = k[i];
    size_t j = i;
    for (; j > 0 && k[j - 1] > x; j--) k[j] = k[j - 1];
    k[j] = x;
  }
}

static void sift_down(uint64_t *k, size_t root, size_t n) {
  uint64_t x = k[root];
  for (size_t c; (c = 2 * root + 1) < n; root = c) {
    if (c + 1 < n && k[c + 1] > k[c]) c++;
    if (k[c] <= x) break;
    k[root] = k[c];
  }
  k[root] = x;
}

static void heap_sort(uint64_t *k, size_t n) {
  for (size_t i = n / 2; i-- > 0;) sift_down(k, i, n);
  for (size_t end = n; end-- > 1;) {
    uint64_t t = k[0];
    k[0] = k[end];
    k[end] = t;
    sift_down(k, 0, end);
  }
}

static uint64_t median3(uint64_t a, uint64_t b, uint64_t c) {
  if (a > b) {
    uint64_t t = a;
    a = b;
    b = t;
  }
  return c <= a ? a : c >= b ? b : c;
}

static void introsort(uint64_t *k, size_t n, unsigned depth) {
  while (n > SMALL) {
    if (depth-- == 0) {
      heap_sort(k, n);
      return;
    }
    /* Hoare's partition around a key of the range. Each scan stops at the
     * pivot itself or at a key the other scan swapped over, so neither
     * runs off the range; and with the pivot the median of three keys it
     * is neither the range's largest nor its smallest (for distinct keys),
     * so both parts are non-empty. Equal keys only make parts uneven,
     * which the depth limit bounds. */
    uint64_t p = median3(k[0], k[n / 2], k[n - 1]);
    size_t i = 0, j = n - 1;
    for (;;) {
      while (k[i] < p) i++;
      while (k[j] > p) j--;
      if (i >= j) break;
      uint64_t t = k[i];
      k[i] = k[j];
      k[j] = t;
      i++;
      j--;
    }
    /* k[0..j] <= p <= k[j+1..n). Recurse into the smaller part and loop
     * on the larger, so the stack stays O(log n) deep. */
    size_t left = j + 1;
    if (left < n - left) {
      introsort(k, left, depth);
      k += left;
      n -= left;
    } else {
      introsort(k + left, n - left, depth);
      n = left;
    }
  }
  insertion(k, n);
}

void ember__sort_u64(uint64_t *k, size_t n) {
  unsigned depth = 0;
  for (size_t m = n; m > 1; m >>= 1) depth += 2;
  introsort(k, n, depth);
}
