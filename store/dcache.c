/* The dictionary cache (see dcache.h). */
#include "dcache.h"

#include <string.h>

#include "ember/ember.h"

void ember__dcache_clear(ember__dcache_t *c) {
  ember_free(c->bytes);
  ember_free(c->ents);
  ember__htab_free(&c->index);
  uint64_t clears = c->clears + 1;
  *c = (ember__dcache_t){0};
  c->clears = clears;
}

/* The full hash is compared first, so a probe past another entry does not
 * touch that entry's bytes (another cache miss). */
static bool dent_eq(const void *ctx, uint32_t idx) {
  const ember__dcache_t *c = ctx;
  const struct ember__dent *e = &c->ents[idx];
  if (e->hash != c->key_hash || e->len != c->key_len) return false;
  if (c->match) return c->match(c->match_ctx, c->bytes + e->off, e->len);
  return memcmp(c->bytes + e->off, c->key, e->len) == 0;
}

static uint64_t dent_hash(const void *ctx, uint32_t idx) {
  const ember__dcache_t *c = ctx;
  return c->ents[idx].hash;
}

int ember__dcache_find(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t *id) {
  if (!c->n) return 0;
  c->key = p;
  c->key_len = n;
  c->key_hash = hash;
  c->match = NULL;
  int64_t i = ember__htab_find(&c->index, hash, dent_eq, c);
  if (i < 0) return 0;
  *id = c->ents[i].id;
  return 1;
}

int ember__dcache_find_match(ember__dcache_t *c, uint64_t hash, size_t n,
                             ember__dcache_match_fn match, const void *ctx, uint32_t *id) {
  if (!c->n) return 0;
  c->key = NULL;
  c->key_len = n;
  c->key_hash = hash;
  c->match = match;
  c->match_ctx = ctx;
  int64_t i = ember__htab_find(&c->index, hash, dent_eq, c);
  c->match = NULL;
  if (i < 0) return 0;
  *id = c->ents[i].id;
  return 1;
}

void ember__dcache_prefetch(const ember__dcache_t *c, uint64_t hash) {
  if (c->index.slots) __builtin_prefetch(&c->index.slots[hash & c->index.mask]);
}

void ember__dcache_prefetch_entry(const ember__dcache_t *c, uint64_t hash) {
  if (!c->index.slots) return;
  uint32_t s = c->index.slots[hash & c->index.mask];
  if (s == 0) return;
  const struct ember__dent *e = &c->ents[s - 1];
  __builtin_prefetch(e);
}

void ember__dcache_prefetch_bytes(const ember__dcache_t *c, uint64_t hash) {
  if (!c->index.slots) return;
  uint32_t s = c->index.slots[hash & c->index.mask];
  if (s == 0) return;
  const struct ember__dent *e = &c->ents[s - 1];
  if (e->hash != hash) return;
  __builtin_prefetch(c->bytes + e->off);
  __builtin_prefetch(c->bytes + e->off + 64);
}

static int grow(void *arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 256;
  while (nc < need) nc *= 2;
  void *q = ember_realloc(*(void **)arr, nc * elem);
  if (!q) return -1;
  *(void **)arr = q;
  *cap = nc;
  return 0;
}

void ember__dcache_add(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t id) {
  if (c->n >= EMBER__DCACHE_MAX_ENTRIES || n > EMBER__DCACHE_MAX_BYTES - c->blen)
    ember__dcache_clear(c);
  if (n > EMBER__DCACHE_MAX_BYTES) return;
  if (grow(&c->bytes, &c->bcap, c->blen + n, 1) < 0 ||
      grow(&c->ents, &c->cap, c->n + 1, sizeof *c->ents) < 0) {
    ember__dcache_clear(c);
    return;
  }
  memcpy(c->bytes + c->blen, p, n);
  c->ents[c->n] = (struct ember__dent){.hash = hash, .off = c->blen, .len = n, .id = id};
  if (ember__htab_insert(&c->index, hash, (uint32_t)c->n, dent_hash, c) < 0) {
    ember__dcache_clear(c);
    return;
  }
  c->blen += n;
  c->n++;
}

ember__dcache_mark_t ember__dcache_mark(const ember__dcache_t *c) {
  return (ember__dcache_mark_t){.n = c->n, .blen = c->blen, .clears = c->clears};
}

void ember__dcache_rollback(ember__dcache_t *c, ember__dcache_mark_t m) {
  /* Emptied since the mark (full, or out of memory): nothing of before is
   * left to keep. */
  if (c->clears != m.clears) {
    ember__dcache_clear(c);
    return;
  }
  if (c->n == m.n) return;
  c->n = m.n;
  c->blen = m.blen;
  ember__htab_free(&c->index);
  if (ember__htab_reserve(&c->index, c->n, dent_hash, c) < 0) {
    ember__dcache_clear(c);
    return;
  }
  for (size_t i = 0; i < c->n; i++)
    if (ember__htab_insert(&c->index, c->ents[i].hash, (uint32_t)i, dent_hash, c) < 0) {
      ember__dcache_clear(c);
      return;
    }
}
