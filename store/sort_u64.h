/* Sorting arrays of plain 64-bit keys in ascending order, for hot paths
 * that pack what they sort into one integer (a primary key in the high
 * bits, a tie-breaker in the low bits) so that every compare is inline,
 * where qsort calls a comparator through a pointer for each one. */
#ifndef EMBER_STORE_SORT_U64_H
#define EMBER_STORE_SORT_U64_H

#include <stddef.h>
#include <stdint.h>

/* Sort k[0..n) ascending, in place, in O(n log n) at worst. Not stable;
 * distinct keys (the usual packing makes them so) have one sorted order
 * all the same. */
void ember__sort_u64(uint64_t *k, size_t n);

#endif
