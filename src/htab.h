/* An open-addressing hash index over items the caller stores elsewhere.
 *
 * The table holds only item indices; the caller keeps items (and their
 * hashes) in its own arrays and answers "is item i equal to the key I'm
 * looking for?" through a callback. That keeps one probing implementation
 * for strings, frames, stacks and whatever later parts intern, without
 * void-pointer item copies. Linear probing, power-of-two size, load <= 1/2
 * so probes stay short. Not thread-safe. */
#ifndef EMBER_SRC_HTAB_H
#define EMBER_SRC_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ember__htab {
  uint32_t *slots; /* item index + 1; 0 = empty */
  size_t mask;     /* size - 1; size is a power of two (0 before first use) */
  size_t count;
} ember__htab_t;

/* eq: does item `idx` equal the key? */
typedef bool (*ember__htab_eq_fn)(const void *ctx, uint32_t idx);
/* hash of item `idx`, used when the table grows. */
typedef uint64_t (*ember__htab_hash_fn)(const void *ctx, uint32_t idx);

void ember__htab_init(ember__htab_t *t);
void ember__htab_free(ember__htab_t *t);
/* The index of the item equal to the key (hash `h`), or -1. */
int64_t ember__htab_find(const ember__htab_t *t, uint64_t h, ember__htab_eq_fn eq, const void *ctx);
/* Insert item `idx` (which must not be present) with hash `h`. Grows the
 * table, rehashing through `hash`. Returns 0 or -ENOMEM. */
int ember__htab_insert(ember__htab_t *t, uint64_t h, uint32_t idx, ember__htab_hash_fn hash,
                       const void *ctx);

/* Make room for `n` items without growing again (rehashing what is there
 * through `hash`). Returns 0 or -ENOMEM; the table is unchanged on failure. */
int ember__htab_reserve(ember__htab_t *t, size_t n, ember__htab_hash_fn hash, const void *ctx);

/* Fast 64-bit hashing (not cryptographic: keys come from our own
 * profiles; the store's on-disk ids never depend on these values). */
uint64_t ember__hash_bytes(const void *p, size_t n, uint64_t seed);
static inline uint64_t ember__hash_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 29;
  return h;
}

#endif
