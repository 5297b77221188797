#include <errno.h>
#include <string.h>

#include "ember/ember.h"
#include "htab.h"

void ember__htab_init(ember__htab_t *t) {
  t->slots = NULL;
  t->mask = 0;
  t->count = 0;
}

void ember__htab_free(ember__htab_t *t) {
  ember_free(t->slots);
  ember__htab_init(t);
}

int64_t ember__htab_find(const ember__htab_t *t, uint64_t h, ember__htab_eq_fn eq,
                         const void *ctx) {
  if (t->slots == NULL) return -1;
  for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
    uint32_t s = t->slots[i];
    if (s == 0) return -1;
    if (eq(ctx, s - 1)) return (int64_t)(s - 1);
  }
}

static void htab_place(uint32_t *slots, size_t mask, uint64_t h, uint32_t idx) {
  size_t i = (size_t)h & mask;
  while (slots[i] != 0) i = (i + 1) & mask;
  slots[i] = idx + 1;
}

/* Resize to `nsize` slots (a power of two larger than twice the count). */
static int htab_resize(ember__htab_t *t, size_t nsize, ember__htab_hash_fn hash, const void *ctx) {
  size_t size = t->slots ? t->mask + 1 : 0;
  uint32_t *ns = ember_calloc(nsize, sizeof *ns);
  if (ns == NULL) return -ENOMEM;
  for (size_t i = 0; i < size; i++) {
    uint32_t s = t->slots[i];
    if (s != 0) htab_place(ns, nsize - 1, hash(ctx, s - 1), s - 1);
  }
  ember_free(t->slots);
  t->slots = ns;
  t->mask = nsize - 1;
  return 0;
}

int ember__htab_reserve(ember__htab_t *t, size_t n, ember__htab_hash_fn hash, const void *ctx) {
  size_t size = t->slots ? t->mask + 1 : 0;
  if (n > SIZE_MAX / 4 || n * 2 <= size) return 0;
  size_t nsize = size ? size : 64;
  while (nsize < n * 2) nsize *= 2;
  return htab_resize(t, nsize, hash, ctx);
}

int ember__htab_insert(ember__htab_t *t, uint64_t h, uint32_t idx, ember__htab_hash_fn hash,
                       const void *ctx) {
  if (idx == UINT32_MAX) return -ENOMEM;
  size_t size = t->slots ? t->mask + 1 : 0;
  if ((t->count + 1) * 2 > size) {
    int rc = htab_resize(t, size ? size * 2 : 64, hash, ctx);
    if (rc != 0) return rc;
  }
  htab_place(t->slots, t->mask, h, idx);
  t->count++;
  return 0;
}

uint64_t ember__hash_bytes(const void *p, size_t n, uint64_t seed) {
  const unsigned char *b = p;
  uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, b, 8);
    h = ember__hash_mix(h, w);
    b += 8;
    n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, b, n);
  return ember__hash_mix(h, w);
}
