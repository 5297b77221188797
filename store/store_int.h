/* Internals shared by the store's files: the handle, its named databases and
 * the key layouts (docs/internals/store.md draws them). */
#ifndef EMBER_STORE_INT_H
#define EMBER_STORE_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>

#include "ember/store.h"
#include "dcache.h"
#include "kset.h"
#include "kv.h"

/* Named databases. The names are on disk. */
typedef enum ember__db {
  EMBER__DB_META,       /* "meta": name -> value (schema, id counters) */
  EMBER__DB_SERIES,     /* "series": series id -> label set */
  EMBER__DB_SERIES_IDX, /* "series_by_hash": label-set hash -> series ids (dup) */
  EMBER__DB_POSTINGS,   /* "postings": (label, value hash) -> series ids (dup) */
  EMBER__DB_FRAMES,     /* "frames": frame id -> frame */
  EMBER__DB_FRAMES_IDX, /* "frames_by_hash": frame hash -> frame ids (dup) */
  EMBER__DB_STACKS,     /* "stacks": stack id -> frame ids */
  EMBER__DB_STACKS_IDX, /* "stacks_by_hash": stack hash -> stack ids (dup) */
  EMBER__DB_PROFILES,   /* "profiles": (series, start, types) -> stacks and values */
  EMBER__DB_CPU,        /* "cpu": (series, start) -> CPU ns */
  EMBER__DB_IDEM,       /* "idem": (agent hash, seq) -> window start */
  EMBER__DB_ROLLUP_1H,  /* "rollup_1h": (series, hour start, types) -> summed row */
  EMBER__DB_ROLLUP_1M,  /* "rollup_1m": (series, minute start, types) -> summed row */
  EMBER__DB_SESSIONS,   /* "sessions": (session id, agent hash, seq) -> encoded result */
  EMBER__DB_RULES,      /* "rules": rule name -> JSON document (doc.c) */
  EMBER__DB_ALERTS,     /* "alerts": alert id -> JSON document (doc.c) */
  EMBER__DB_RUNS,       /* "runs": (partition, run start) -> run (runs.h) */
  EMBER__DB_PENDING,    /* "pending": (partition, offset) -> the window's contribution */
  EMBER__DB_PARTS,      /* "series_part": (series, partition) -> nothing (seen) */
  EMBER__DB_SOURCEMAPS, /* "sourcemaps": key -> an uploaded source map (doc.c) */
  EMBER__DB_COUNT
} ember__db_t;

/* The caches of struct ember_store: one per dictionary (the counters of
 * intern.h: series, frames, stacks), then the producers' stack memo. */
#define EMBER__CACHE_MEMO 3
#define EMBER__NCACHES    4

struct ember_store {
  MDB_env *env;
  MDB_dbi dbi[EMBER__DB_COUNT];
  bool read_only;
  /* A read-only open of a store made before the session table existed:
   * session reads answer "nothing" instead of failing the open. */
  bool no_sessions;
  /* The same for the document tables "rules" and "alerts", which came
   * together within schema 3: reads find nothing, iteration is empty. */
  bool no_docs;
  /* The same for "runs", "pending" and "series_part" (added together
   * within schema 3): no runs, nothing pending. */
  bool no_runs;
  /* And for "sourcemaps" (added within schema 4). */
  bool no_sourcemaps;
  /* Dictionary caches, by table: series, frames, stacks; and the
   * producers' stacks (EMBER__CACHE_MEMO, intern.h). Used only inside
   * write transactions (see dcache.h). */
  ember__dcache_t cache[EMBER__NCACHES];
  /* The (series, partition) pairs known to be in "series_part", so that a
   * window's pair costs no LMDB access once seen. Same rules as the
   * dictionary caches: write transactions only, cleared when one fails. */
  ember__kset_t parts;
  /* Every call holds this for reading while it has a transaction open;
   * growing the map (mdb_env_set_mapsize, which LMDB allows only while no
   * transaction of this process is open) holds it for writing. */
  pthread_rwlock_t lock;
  bool lock_ready;
  size_t map_size, max_size;    /* current and largest map size */
  uint64_t grows;               /* times this handle grew the map (under lock) */
  ember_store_frame_map_t fmap; /* reads' frame rewrite; fmap.frame NULL = none */
};

/* A series' (worker, version) whose frames fmap rewrites. */
typedef struct ember__fm_key {
  const char *worker, *version;
} ember__fm_key_t;

/* Rewrite frame `f` of a series with key `k` through s->fmap, interning
 * the result into `p` as *id; `buf` has EMBER_STORE_FRAME_MAP_BUF bytes.
 * k NULL: interned as it is. Returns 0 or -ENOMEM. */
int ember__fm_intern(ember_store_t *s, const ember__fm_key_t *k, const ember_frame_t *f,
                     ember_profile_t *p, char *buf, uint32_t *id);

/* Internal code for MDB_MAP_RESIZED (another process grew the map): the
 * call is retried after adopting the new size, never returned. */
#define EMBER__ERESIZED (EMBER_ERRNO_BASE - 100)

/* Take / release the lock for reading around one call's transactions. */
void ember__store_enter(ember_store_t *s);
void ember__store_leave(ember_store_t *s);
/* After a call failed with `rc` and left the lock: grow the map on
 * EMBER_EMAPFULL (up to max_size), adopt another process's size on
 * EMBER__ERESIZED. Returns true if the call should run again; else *rc is
 * the error to return (EMBER__ERESIZED becomes -EAGAIN). */
bool ember__store_retry(ember_store_t *s, int *rc);

/* Commit a write transaction (always ended, as mdb_txn_commit). A full disk
 * is -ENOSPC even when LMDB reports its short write as EIO. */
int ember__store_commit(ember_store_t *s, MDB_txn *txn);
/* Make the array *arr (ember_realloc'd, *cap elements of `elem` bytes)
 * hold at least `need`, doubling from 64. 0 or -ENOMEM (unchanged). */
int ember__grow(void *arr, size_t *cap, size_t need, size_t elem);

/* Empty the dictionary caches: after any failed write transaction. */
void ember__store_caches_clear(ember_store_t *s);

/* Checksums: every value of a sealed table ends with be32 CRC-32 of its key
 * and the rest of the value. ember__put writes `v` sealed (with MDB_RESERVE)
 * and ember__get / ember__unseal check and strip the seal; both return LMDB
 * codes (MDB_CORRUPTED for a failed checksum), so callers keep their
 * mdb_* error handling. */
#define EMBER__SEAL_LEN 4
bool ember__sealed(ember__db_t db);
bool ember__unseal(const MDB_val *k, MDB_val *v);
int ember__get(ember_store_t *s, MDB_txn *txn, ember__db_t db, MDB_val *k, MDB_val *v);
int ember__put(ember_store_t *s, MDB_txn *txn, ember__db_t db, MDB_val *k, const MDB_val *v,
               unsigned flags);

/* Key sizes; the layouts are asserted in store.c. */
#define EMBER__PROFILE_KEY_LEN 13 /* series id be32 | start time be64 | type mask u8 */
#define EMBER__CPU_KEY_LEN     12 /* series id be32 | start time be64 */
#define EMBER__IDEM_KEY_LEN    16 /* agent id hash be64 | seq be64 */
#define EMBER__POSTING_KEY_LEN 9  /* label index u8 | value hash be64 */
#define EMBER__RUN_KEY_LEN     12 /* partition be32 | run start offset be64 */
#define EMBER__PENDING_KEY_LEN 12 /* partition be32 | offset be64 */
#define EMBER__PART_KEY_LEN    8  /* series id be32 | partition be32 */

/* Session result keys: the session id's bytes, a NUL, then agent id hash
 * be64 | seq be64 (session.c). */
#define EMBER__SESSION_ID_MAX   128
#define EMBER__SESSION_KEY_TAIL 17

/* The label fields of a series, in posting-key order. */
#define EMBER__NLABELS 4

/* Rollups: the windows whose start falls in [b, b + unit) summed into one
 * row keyed by b, per minute and per hour, so a long range reads one row
 * per hour and a ragged end one row per minute. */
#define EMBER__ROLLUP_NS    (3600LL * 1000000000LL)
#define EMBER__ROLLUP_1M_NS (60LL * 1000000000LL)

/* floor(t / unit) * unit, for negative t too. The first partial bucket
 * above INT64_MIN saturates to INT64_MIN: it still holds only starts below
 * the next whole boundary. */
static inline int64_t ember__bucket_floor(int64_t t, int64_t unit) {
  int64_t q = t / unit;
  if (t % unit < 0) q--;
  if (q < INT64_MIN / unit) return INT64_MIN;
  return q * unit;
}

/* The smallest bucket boundary >= t, or INT64_MAX when there is none (the
 * next boundary would overflow). The boundary after the saturated bucket
 * at INT64_MIN is the first whole multiple of unit. */
static inline int64_t ember__bucket_ceil(int64_t t, int64_t unit) {
  int64_t f = ember__bucket_floor(t, unit);
  if (f == t) return t;
  if (f == INT64_MIN) return (INT64_MIN / unit) * unit;
  return f > INT64_MAX - unit ? INT64_MAX : f + unit;
}

static inline int64_t ember__rollup_floor(int64_t t) {
  return ember__bucket_floor(t, EMBER__ROLLUP_NS);
}

/* The one older schema a read-write open upgrades in place (to
 * EMBER_STORE_SCHEMA_VERSION): schema 3 differs only in having no gauge
 * windows, which it cannot hold, so the upgrade rewrites the version. */
#define EMBER__SCHEMA_UPGRADABLE 3u

/* The meta key holding the retention cutoff (be64, sign-flipped time). */
#define EMBER__META_RETAINED "retained_before"

/* The profile-row value format; the first byte of every row. */
#define EMBER__ROW_FORMAT 1

/* An LMDB return code as an Ember one. */
int ember__store_err(int mdb_rc);

/* The value type bit of a type mask: bit (vt - 1). Rows store values in
 * ascending value type order, so the mask alone gives the column order. */
static inline uint8_t ember__vt_bit(ember_value_type_t vt) {
  return (uint8_t)(1u << ((unsigned)vt - 1u));
}

/* The type-mask bits of the gauge value types (ember_value_type_is_gauge):
 * a row whose mask has them is a gauge window, never summed into a rollup
 * (a rollup is a sum over windows, which a gauge must never be). A window
 * has either only gauge bits or none (write.c refuses a mix). */
#define EMBER__GAUGE_MASK                                                                          \
  ((uint8_t)((1u << (EMBER_VT_INUSE_OBJECTS - 1)) | (1u << (EMBER_VT_INUSE_BYTES - 1))))

static inline bool ember__mask_is_gauge(uint8_t mask) { return (mask & EMBER__GAUGE_MASK) != 0; }

/* Label-set encoding: four optional strings (worker, version, host, actor). */
int ember__labels_encode(ember__out_t *o, const char *const labels[EMBER__NLABELS]);
bool ember__labels_decode(const MDB_val *v, const char *labels[EMBER__NLABELS]);
uint64_t ember__label_hash(const char *s);

/* The series ids matching `sel` (NULL = all), ascending, as an ember_malloc'ed
 * array (NULL when none). Runs inside `txn`. */
int ember__select(ember_store_t *s, MDB_txn *txn, const ember_store_selector_t *sel, uint32_t **ids,
                  size_t *n);

/* Retention of session results (session.c): delete those whose window
 * started below `cutoff`, committing *txn and beginning a new one every
 * max_per_txn deletions (*in_txn counts them). */
int ember__session_retain(ember_store_t *s, MDB_txn **txn, int64_t cutoff, size_t max_per_txn,
                          size_t *in_txn, uint64_t *deleted);

#endif
