/* The write path's dictionaries: label sets -> series ids, wire locations
 * -> frame ids, stacks -> stack ids, each looked up in the in-memory cache
 * (dcache.h) and then in LMDB's hash index, and created when absent.
 *
 * Locations and stacks are found by the content keys the view's maker
 * computed (ember/wire.h; never a writer's word), confirmed by comparing
 * content: a location's against the cached encoding of its frame, a
 * stack's as its frame ids. What the cache does not hold has its text
 * checked (UTF-8, no NUL) before it is taken. A key that hits is therefore
 * true: content equal to content that was checked. The hashes an older
 * writer sent are checked for every window (ember_wire_check_hashes,
 * unless the view says it was: the collector verifies on its decode
 * threads); a window is refused when they disagree with its content.
 *
 * The producers' memo: once a stack of producer P (its agent id) was
 * confirmed that way, the next windows of P with its key take its id
 * without looking its locations up (EMBER__CACHE_MEMO: (P, stack key) ->
 * stack id). Only a collision on the key could read another content as
 * that stack, one P made itself, and it moves P's own samples only
 * (docs/internals/store.md).
 *
 * All of it runs inside the caller's write transaction (write.c), so
 * LMDB's writer lock serialises it; not thread-safe otherwise. */
#ifndef EMBER_STORE_INTERN_H
#define EMBER_STORE_INTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/wire.h"
#include "store_int.h"

/* An id counter of `meta`, read on first use and written back once at the
 * end of the batch (ember__dict_save) instead of once per new id. */
typedef struct ember__counter {
  const char *name;
  uint32_t next;
  bool loaded, dirty;
} ember__counter_t;

enum { EMBER__CTR_SERIES, EMBER__CTR_FRAME, EMBER__CTR_STACK, EMBER__CTR_COUNT };

typedef struct ember__dict {
  ember_store_t *s;
  MDB_txn *txn;
  ember__out_t buf; /* an encoded frame, stack or label set */
  ember__counter_t ctr[EMBER__CTR_COUNT];
  uint32_t *fmap; /* location index -> store frame id (0: not looked up), current view */
  size_t fmap_cap;
} ember__dict_t;

void ember__dict_init(ember__dict_t *d, ember_store_t *s, MDB_txn *txn);
void ember__dict_free(ember__dict_t *d);
/* Write the id counters that moved. 0 or a store error. */
int ember__dict_save(ember__dict_t *d);

/* The series id of a label set. 0 or a store error. */
int ember__dict_series(ember__dict_t *d, const ember_labels_t *l, uint32_t *sid);

/* The store stack id of every sample of `w` into ids[0..nsamples): from
 * the producer's memo, else through its locations' frame ids (d->fmap,
 * looked up as stacks need them). Returns 0; EMBER_ECORRUPT with a
 * sentence when a location or a stack the store had not seen fails its
 * checks; or a store error. */
int ember__dict_stacks(ember__dict_t *d, const ember_wire_t *w, uint32_t *ids, char *why,
                       size_t why_size);

#endif
