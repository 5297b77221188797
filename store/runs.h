/* Where windows came from: the "runs", "pending" and "series_part" tables
 * (docs/internals/store.md, "Runs and pending windows").
 *
 *   runs         key: be32 partition | be64 run start offset
 *                value: be64 stored_end | be64 committed | be64 started_ns (flip) |
 *                       be64 tmin (flip) | be64 tmax (flip) | be64 windows
 *   pending      key: be32 partition | be64 offset
 *                value: u8 format (1) | u8 flags | be64 run start |
 *                       the window's profiles key (13 bytes) | be64 CPU ns |
 *                       be64 agent id hash | be64 seq | the window's own row
 *                flags: bit 0 the window added a CPU point, bit 1 it has an
 *                idempotency key (agent hash, seq)
 *   series_part  key: be32 series id | be32 partition      value: (the seal only)
 *
 * Every value is sealed like the other data tables (ember__put). Offsets
 * and partitions are never negative, so plain big-endian keys sort by
 * number. This file has the encodings and the write path's share (a batch
 * accumulates its runs in memory and writes each once); the calls on them
 * are ember_store_committed / ember_store_runs (runs.c) and
 * ember_store_undo (undo.c). Not thread-safe by itself: used inside the
 * store's transactions. Errors: as the store (0, -ENOMEM, EMBER_ECORRUPT,
 * LMDB codes mapped by ember__store_err). */
#ifndef EMBER_STORE_RUNS_H
#define EMBER_STORE_RUNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "htab.h"
#include "row.h"
#include "store_int.h"

#define EMBER__RUN_VAL_LEN     48
#define EMBER__PENDING_HDR_LEN 47
#define EMBER__PENDING_FORMAT  1
#define EMBER__PENDING_CPU     0x01u
#define EMBER__PENDING_IDEM    0x02u

/* A run's value. tmin and tmax are 0 when windows is 0. */
typedef struct ember__run {
  int64_t stored_end, committed, started_ns, tmin, tmax;
  uint64_t windows;
} ember__run_t;

void ember__run_key(uint8_t key[EMBER__RUN_KEY_LEN], int32_t partition, int64_t offset);
void ember__run_encode(uint8_t v[EMBER__RUN_VAL_LEN], const ember__run_t *r);
/* Decode an unsealed run entry, checking it is one; false if not. */
bool ember__run_decode(const MDB_val *k, const MDB_val *v, int32_t *partition, int64_t *start,
                       ember__run_t *r);

/* A pending window, decoded; `row` points into the value it came from. */
typedef struct ember__pending {
  int32_t partition;
  int64_t offset, run_start;
  uint8_t pkey[EMBER__PROFILE_KEY_LEN]; /* series id | window start | type mask */
  uint8_t flags;
  int64_t cpu_ns;
  uint8_t idem[EMBER__IDEM_KEY_LEN];
  const uint8_t *row;
  size_t row_len;
} ember__pending_t;

/* Decode an unsealed pending entry, checking every field and that its row
 * decodes to the end with the key's type mask; false if not. */
bool ember__pending_decode(const MDB_val *k, const MDB_val *v, ember__pending_t *p);

/* What one window of a batch that has sources contributes, gathered by
 * write.c and handed to ember__srcs_stored(). */
typedef struct ember__contrib {
  const uint8_t *pkey; /* its profiles key */
  bool has_cpu;
  int64_t cpu_ns;
  const uint8_t *idem; /* its idempotency key, or NULL */
  const ember__row_hdr_t *hdr;
  const uint32_t *ids; /* its entries, sorted by stack id */
  const int64_t *vals; /* hdr->ntypes per entry */
  size_t n;
} ember__contrib_t;

/* A write batch's runs, summed in memory and written once per batch. */
typedef struct ember__srcs {
  struct ember__run_acc {
    int32_t partition;
    int64_t start, started_ns, stored_end, tmin, tmax;
    uint64_t windows;
  } * runs;
  size_t nruns, cap;
  ember__htab_t index;
  const struct ember__run_acc *key; /* the one being looked up */
  size_t last;                      /* the run the previous window was in */
  ember__out_t val;                 /* a pending value being encoded */
} ember__srcs_t;

/* The window from `src` starting at `start` was stored or was a duplicate:
 * extend its run in memory. */
int ember__srcs_window(ember__srcs_t *b, const ember_store_source_t *src, int64_t start);
/* The window from `src` was stored: put its pending entry, and note its
 * (series, partition) pair unless the store's set knows it already. */
int ember__srcs_stored(ember__srcs_t *b, ember_store_t *s, MDB_txn *txn,
                       const ember_store_source_t *src, const ember__contrib_t *c);
/* Write every run of the batch (one read and one put each). */
int ember__srcs_flush(ember__srcs_t *b, ember_store_t *s, MDB_txn *txn);
void ember__srcs_free(ember__srcs_t *b);

/* Retention (retain.c): is this unsealed entry older than `cutoff`? A
 * pending window by its start, a run by its tmax (by its start time when it
 * has no window). false and *bad on an entry that does not decode. */
bool ember__pending_older(const MDB_val *k, const MDB_val *v, int64_t cutoff, bool *bad);
bool ember__run_older(const MDB_val *k, const MDB_val *v, int64_t cutoff, bool *bad);

#endif
