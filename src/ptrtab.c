/* Pointer-triple tables (ptrtab.h). */
#include "ptrtab.h"

#include <errno.h>
#include <stdbool.h>

#include "ember/ember.h"

typedef struct ptr_key {
  const ember__ptrtab_t *t;
  const void *k[3];
} ptr_key_t;

static uint64_t ptr_hash(const void *const k[3]) {
  uint64_t h = 0x7ab1e;
  for (int i = 0; i < 3; i++) h = ember__hash_mix(h, (uint64_t)(uintptr_t)k[i]);
  return h;
}

static bool ptr_eq(const void *ctx, uint32_t idx) {
  const ptr_key_t *k = ctx;
  const void *const *e = &k->t->keys[3 * (size_t)idx];
  return e[0] == k->k[0] && e[1] == k->k[1] && e[2] == k->k[2];
}

static uint64_t ptr_rehash(const void *ctx, uint32_t idx) {
  const ptr_key_t *k = ctx;
  return ptr_hash(&k->t->keys[3 * (size_t)idx]);
}

void ember__ptrtab_free(ember__ptrtab_t *t) {
  ember_free(t->keys);
  ember__htab_free(&t->index);
}

int ember__ptrtab_get(ember__ptrtab_t *t, const void *a, const void *b, const void *c,
                      uint32_t *idx) {
  ptr_key_t key = {t, {a, b, c}};
  uint64_t h = ptr_hash(key.k);
  int64_t found = ember__htab_find(&t->index, h, ptr_eq, &key);
  if (found >= 0) {
    *idx = (uint32_t)found;
    return 0;
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    const void **k = ember_realloc(t->keys, cap * 3 * sizeof *k);
    if (k == NULL) return -ENOMEM;
    t->keys = k;
    t->cap = cap;
  }
  for (int i = 0; i < 3; i++) t->keys[3 * t->n + (size_t)i] = key.k[i];
  if (ember__htab_insert(&t->index, h, (uint32_t)t->n, ptr_rehash, &key) != 0) return -ENOMEM;
  *idx = (uint32_t)t->n++;
  return 0;
}
