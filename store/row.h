/* Profile rows: the value stored under (series id, window start, type mask)
 * in the "profiles" database.
 *
 *   u8 format (EMBER__ROW_FORMAT) | u8 type mask | varint duration_ns |
 *   varint period_ns | varint nstacks |
 *   nstacks x ( varint stack-id delta | ntypes x varint value )
 *
 * Entries are sorted by stack id and each id is stored as the difference
 * from the previous one (the first from 0), so ids repeat in few bytes.
 * Values are in ascending value-type order, one column per bit of the
 * mask, and are never negative. */
#ifndef EMBER_STORE_ROW_H
#define EMBER_STORE_ROW_H

#include <stdbool.h>
#include <stdint.h>

#include "kv.h"

typedef struct ember__row_hdr {
  uint8_t mask;
  unsigned ntypes; /* bits set in mask */
  uint64_t duration_ns, period_ns, nstacks;
} ember__row_hdr_t;

/* Encode `n` entries sorted by strictly increasing id; vals holds n * ntypes. */
int ember__row_encode(ember__out_t *o, const ember__row_hdr_t *h, const uint32_t *ids,
                      const int64_t *vals, uint64_t n);

typedef struct ember__row_iter {
  ember__in_t in;
  ember__row_hdr_t hdr;
  uint64_t left;
  uint32_t id;
} ember__row_iter_t;

/* Start reading a row; false if the header is malformed. */
bool ember__row_open(ember__row_iter_t *it, const void *p, size_t n);
/* The next entry (vals gets hdr.ntypes values). Returns 1, 0 at a clean end,
 * or EMBER_ECORRUPT. */
int ember__row_next(ember__row_iter_t *it, uint32_t *id, int64_t *vals);

#endif
