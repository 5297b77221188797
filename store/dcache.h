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

#include <stdbool.h>
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
  uint64_t key_hash;
  bool (*match)(const void *ctx, const uint8_t *p, size_t n); /* or NULL: memcmp key */
  const void *match_ctx;
  uint64_t clears; /* times emptied (kept across ember__dcache_clear) */
} ember__dcache_t;

/* Does the cached content p[0..n) equal the key the caller has in mind? */
typedef bool (*ember__dcache_match_fn)(const void *ctx, const uint8_t *p, size_t n);

void ember__dcache_clear(ember__dcache_t *c);
/* 1 and *id if `p` is cached, else 0. */
int ember__dcache_find(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t *id);
/* As ember__dcache_find, for a caller that has not encoded its key: the
 * content it looks for is `n` bytes long and `match` compares a cached
 * content with it, byte for byte (the hash only finds candidates). `hash`
 * must be the one the entry was added with. */
int ember__dcache_find_match(ember__dcache_t *c, uint64_t hash, size_t n,
                             ember__dcache_match_fn match, const void *ctx, uint32_t *id);
/* Start loading what a later find of `hash` will read: the index slot,
 * then (once that is in cache) the entry, then its first bytes. Lookups of
 * a whole window's frames overlap their cache misses this way. */
void ember__dcache_prefetch(const ember__dcache_t *c, uint64_t hash);
void ember__dcache_prefetch_entry(const ember__dcache_t *c, uint64_t hash);
void ember__dcache_prefetch_bytes(const ember__dcache_t *c, uint64_t hash);
/* Where the cache stands, to take it back there (ember__dcache_rollback)
 * when a transaction that added entries after the mark aborts for a reason
 * that leaves everything before it valid (bad input, not a store error). */
typedef struct ember__dcache_mark {
  size_t n, blen;
  uint64_t clears;
} ember__dcache_mark_t;

ember__dcache_mark_t ember__dcache_mark(const ember__dcache_t *c);
/* Drop every entry added since `m` (O(entries kept): the index is built
 * again). If the cache was emptied since, it stays empty. */
void ember__dcache_rollback(ember__dcache_t *c, ember__dcache_mark_t m);

/* Remember p -> id. Never fails: on no memory the cache is emptied. */
void ember__dcache_add(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t id);

#endif
