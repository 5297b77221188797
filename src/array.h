/* Growable arrays for libember's and the agent's tables (profiles, source
 * maps, mappings, symbols, DWARF nodes, kernel symbols, heap stacks):
 * doubling growth with an overflow check, and a qsort that accepts an
 * empty array. One helper for all of them: each file had grown its own.
 *
 * Header-only; the functions touch only their arguments, so any thread may
 * use them on arrays it owns. Allocation goes through ember_realloc (the
 * wrapper tests can make fail). */
#ifndef EMBER_ARRAY_H
#define EMBER_ARRAY_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* ember__grow_array in place: `arr` is the address of the array's pointer
 * (any element type; read and written with memcpy, so no pointer is
 * accessed through another pointer type). 0, or -ENOMEM with the array and
 * *cap untouched. */
static inline int ember__grow(void *arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0; /* also need 0 of a NULL array */
  void *v;
  memcpy(&v, arr, sizeof v);
  void *p = ember__grow_array(v, cap, need, elem);
  if (p == NULL) return -ENOMEM;
  memcpy(arr, &p, sizeof p);
  return 0;
}

/* qsort, but fine with an empty (NULL) array, which qsort is not. */
static inline void ember__sort_array(void *base, size_t n, size_t size,
                                     int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, n, size, cmp);
}

#endif
