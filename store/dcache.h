/* An in-memory cache of the store's dictionaries (series, frames, stacks):
 * content hash -> id, so that a steady stream of windows, which repeats
 * the same frames and stacks, does not look each one up in LMDB.
 *
 * The cache is only read and written inside a write transaction, so LMDB's
 * writer lock serialises it. Entries added during a transaction that then
 * aborts would name ids that do not exist: the caller empties the cache
 * (ember__dcache_clear) or takes it back to a mark made before the
 * transaction (ember__dcache_rollback). Ids are never reused, so entries
 * stay valid across transactions and writers in other processes. Hits are
 * checked byte for byte; the hash only finds candidates, and two contents
 * with one hash are two entries. Bounded: it empties itself when full.
 *
 * Layout, for few cache misses per lookup (the frame cache is tens of MiB,
 * far past the CPU caches): an open-addressing table of 8-byte slots, each
 * holding 32 bits of the hash and where the entry's record starts, and one
 * arena of records (the full hash, the id, the length, the content), so a
 * hit touches one slot and one record. Both live on huge pages where the
 * kernel allows it (madvise), which keeps the page walks of random lookups
 * out of the way. */
#ifndef EMBER_STORE_DCACHE_H
#define EMBER_STORE_DCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EMBER__DCACHE_MAX_ENTRIES ((size_t)1 << 22)
#define EMBER__DCACHE_MAX_BYTES   ((size_t)256 << 20)

typedef struct ember__dcache {
  uint8_t *bytes; /* records back to back, 8-aligned */
  size_t blen, bcap;
  uint64_t *slots; /* 0 empty, else (hash >> 32) << 32 | (record offset / 8 + 1) */
  size_t mask;     /* table size - 1 (0 before the first entry) */
  size_t n;        /* entries */
  uint64_t clears; /* times emptied (kept across ember__dcache_clear) */
} ember__dcache_t;

/* Does the cached content p[0..n) equal the key the caller has in mind? */
typedef bool (*ember__dcache_match_fn)(const void *ctx, const uint8_t *p, size_t n);

void ember__dcache_clear(ember__dcache_t *c);
/* 1 and *id if `p` is cached, else 0. */
int ember__dcache_find(const ember__dcache_t *c, uint64_t hash, const void *p, size_t n,
                       uint32_t *id);
/* As ember__dcache_find, for a caller that has not encoded its key: the
 * content it looks for is `n` bytes long and `match` compares a cached
 * content with it, byte for byte. `hash` must be the one the entry was
 * added with. */
int ember__dcache_find_match(const ember__dcache_t *c, uint64_t hash, size_t n,
                             ember__dcache_match_fn match, const void *ctx, uint32_t *id);
/* Start loading what a later find of `hash` will read: the slot, then
 * (once that is in cache) the record. Lookups of a whole window's frames
 * overlap their cache misses this way. */
void ember__dcache_prefetch(const ember__dcache_t *c, uint64_t hash);
void ember__dcache_prefetch_entry(const ember__dcache_t *c, uint64_t hash);
/* Remember p -> id. Never fails: on no memory the cache is emptied. */
void ember__dcache_add(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t id);

/* Where the cache stands, to take it back there (ember__dcache_rollback)
 * when a transaction that added entries after the mark aborts for a reason
 * that leaves everything before it valid (bad input, not a store error). */
typedef struct ember__dcache_mark {
  size_t n, blen;
  uint64_t clears;
} ember__dcache_mark_t;

ember__dcache_mark_t ember__dcache_mark(const ember__dcache_t *c);
/* Drop every entry added since `m` (O(entries kept): the table is built
 * again). If the cache was emptied since, it stays empty. */
void ember__dcache_rollback(ember__dcache_t *c, ember__dcache_mark_t m);

#endif
