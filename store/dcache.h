/* An in-memory cache of the store's dictionaries (series, frames, stacks):
 * encoded content -> id, so that a steady stream of windows, which repeats
 * the same frames and stacks, does not look each one up in LMDB.
 *
 * The cache is only read and written inside a write transaction, so LMDB's
 * writer lock serialises it. Entries added during a transaction that then
 * aborts would name ids that do not exist: ember__dcache_clear() drops
 * everything on abort. Ids are never reused, so entries stay valid across
 * transactions and writers in other processes. Hits are checked byte for
 * byte; the hash only finds candidates. Bounded: it empties itself when
 * full. */
#ifndef EMBER_STORE_DCACHE_H
#define EMBER_STORE_DCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "htab.h"

#define EMBER__DCACHE_MAX_ENTRIES ((size_t)1 << 20)
#define EMBER__DCACHE_MAX_BYTES   ((size_t)64 << 20)

typedef struct ember__dcache {
  uint8_t *bytes; /* contents, back to back */
  size_t blen, bcap;
  struct ember__dent {
    uint64_t hash;
    size_t off;
    size_t len;
    uint32_t id;
  } * ents;
  size_t n, cap;
  ember__htab_t index;
  const uint8_t *key; /* the content being looked up */
  size_t key_len;
} ember__dcache_t;

void ember__dcache_clear(ember__dcache_t *c);
/* 1 and *id if `p` is cached, else 0. */
int ember__dcache_find(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t *id);
/* Remember p -> id. Never fails: on no memory the cache is emptied. */
void ember__dcache_add(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t id);

#endif
