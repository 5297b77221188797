/* A table of pointer triples -> dense indices 0, 1, 2, ... in order of
 * first insertion. Within one profile equal strings are the same interned
 * pointer, so pointer identity is string identity: the wire encoders build
 * their string (s, NULL, NULL), module (name, build id, NULL) and function
 * (name, file, generated) tables with it. Not thread-safe. */
#ifndef EMBER_SRC_PTRTAB_H
#define EMBER_SRC_PTRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "htab.h"

typedef struct ember__ptrtab {
  const void **keys; /* key triples: keys[3i], keys[3i+1], keys[3i+2] */
  size_t n, cap;
  ember__htab_t index;
} ember__ptrtab_t;

/* Zero-initialise to start. The index of (a, b, c), adding it if new: 0 or
 * -ENOMEM. */
int ember__ptrtab_get(ember__ptrtab_t *t, const void *a, const void *b, const void *c,
                      uint32_t *idx);
/* Part k (0, 1 or 2) of entry i. */
static inline const void *ember__ptrtab_key(const ember__ptrtab_t *t, size_t i, unsigned k) {
  return t->keys[3 * i + k];
}
void ember__ptrtab_free(ember__ptrtab_t *t);

#endif
