/* A table of pointer pairs -> dense indices 0, 1, 2, ... in order of first
 * insertion. Within one profile equal strings are the same interned
 * pointer, so pointer identity is string identity: the wire encoders build
 * their string, module and function tables with it. Not thread-safe. */
#ifndef EMBER_SRC_PTRTAB_H
#define EMBER_SRC_PTRTAB_H

#include <stddef.h>
#include <stdint.h>

#include "htab.h"

typedef struct ember__ptrtab {
  const void **keys; /* key pairs: keys[2i], keys[2i+1] */
  size_t n, cap;
  ember__htab_t index;
} ember__ptrtab_t;

/* Zero-initialise to start. The index of (a, b), adding it if new: 0 or
 * -ENOMEM. */
int ember__ptrtab_get(ember__ptrtab_t *t, const void *a, const void *b, uint32_t *idx);
void ember__ptrtab_free(ember__ptrtab_t *t);

#endif
