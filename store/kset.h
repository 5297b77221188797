/* A bounded in-memory set of non-zero 64-bit keys: the store's cache of
 * the (series, partition) pairs already in "series_part", so that the
 * write path notes a pair with one probe instead of an LMDB access per
 * window.
 *
 * Not thread-safe: like the dictionary caches (dcache.h) it is used only
 * inside write transactions, which LMDB's writer lock serialises, and it
 * must be cleared when a write transaction fails (its keys may name
 * entries that were never committed). Bounded: it empties itself when it
 * reaches EMBER__KSET_MAX keys. Never fails: on no memory a key is simply
 * not remembered (the caller then looks in LMDB again). */
#ifndef EMBER_STORE_KSET_H
#define EMBER_STORE_KSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EMBER__KSET_MAX ((size_t)1 << 20)

typedef struct ember__kset {
  uint64_t *slots; /* 0 = empty; size is a power of two, load <= 1/2 */
  size_t mask, count;
} ember__kset_t;

/* Is `key` (non-zero) in the set? */
bool ember__kset_has(const ember__kset_t *s, uint64_t key);
/* Add `key` (non-zero). */
void ember__kset_add(ember__kset_t *s, uint64_t key);
/* Empty the set and free its memory. */
void ember__kset_clear(ember__kset_t *s);

#endif
