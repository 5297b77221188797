/* Pointer-pair tables (ptrtab.h). */
#include "ptrtab.h"

#include <errno.h>
#include <stdbool.h>

#include "ember/ember.h"

typedef struct ptr_key {
  const ember__ptrtab_t *t;
  const void *a, *b;
} ptr_key_t;

static uint64_t ptr_hash(const void *a, const void *b) {
  return ember__hash_mix(ember__hash_mix(0x7ab1e, (uint64_t)(uintptr_t)a), (uint64_t)(uintptr_t)b);
}

static bool ptr_eq(const void *ctx, uint32_t idx) {
  const ptr_key_t *k = ctx;
  return k->t->keys[2 * idx] == k->a && k->t->keys[2 * idx + 1] == k->b;
}

static uint64_t ptr_rehash(const void *ctx, uint32_t idx) {
  const ptr_key_t *k = ctx;
  return ptr_hash(k->t->keys[2 * idx], k->t->keys[2 * idx + 1]);
}

void ember__ptrtab_free(ember__ptrtab_t *t) {
  ember_free(t->keys);
  ember__htab_free(&t->index);
}

int ember__ptrtab_get(ember__ptrtab_t *t, const void *a, const void *b, uint32_t *idx) {
  ptr_key_t key = {t, a, b};
  uint64_t h = ptr_hash(a, b);
  int64_t found = ember__htab_find(&t->index, h, ptr_eq, &key);
  if (found >= 0) {
    *idx = (uint32_t)found;
    return 0;
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    const void **k = ember_realloc(t->keys, cap * 2 * sizeof *k);
    if (k == NULL) return -ENOMEM;
    t->keys = k;
    t->cap = cap;
  }
  t->keys[2 * t->n] = a;
  t->keys[2 * t->n + 1] = b;
  if (ember__htab_insert(&t->index, h, (uint32_t)t->n, ptr_rehash, &key) != 0) return -ENOMEM;
  *idx = (uint32_t)t->n++;
  return 0;
}
