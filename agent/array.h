/* Growable arrays for the agent's tables (mappings, symbols, DWARF nodes,
 * kernel symbols, aliases): doubling growth with an overflow check, and a
 * qsort that accepts an empty array.
 *
 * Header-only; the functions touch only their arguments, so any thread may
 * use them on arrays it owns. Allocation goes through ember_realloc (the
 * wrapper tests can make fail). */
#ifndef EMBER_AGENT_ARRAY_H
#define EMBER_AGENT_ARRAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ember/ember.h"

/* Make room for `need` elements of `elem` bytes in `v` (capacity *cap).
 * Returns the grown array and updates *cap, or NULL when out of memory or
 * on overflow (then `v` and *cap are untouched and still valid). */
static inline void *ember__grow_array(void *v, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return v;
  size_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  if (nc > SIZE_MAX / elem) return NULL;
  void *p = ember_realloc(v, nc * elem);
  if (p == NULL) return NULL;
  *cap = nc;
  return p;
}

/* qsort, but fine with an empty (NULL) array, which qsort is not. */
static inline void ember__sort_array(void *base, size_t n, size_t size,
                                     int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, n, size, cmp);
}

#endif
