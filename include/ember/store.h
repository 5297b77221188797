/* The profile store: 10-second profile windows in one LMDB environment,
 * merged over any time range on demand.
 *
 * A store is one LMDB file (plus its "-lock" file). Writes take decoded
 * ember_profile_t windows in batches, one write transaction per batch; reads
 * merge the windows of every series that matches a label selector over a
 * half-open time range [from_ns, to_ns) into a fresh profile.
 *
 * What is kept (docs/internals/store.md has the byte layouts):
 *   - series: each distinct label set (worker, version, host, actor) gets a
 *     series id; postings map each label value to the series that carry it;
 *   - a stack dictionary shared by every profile: each distinct frame and
 *     each distinct stack (sequence of frames, leaf first) is stored once;
 *   - one profile row per (series, window start, set of value types): the
 *     list of (stack id, values) of that window;
 *   - rollups per minute and per hour: per (series, minute or hour, set of
 *     value types) the sum of the windows that start in it, so a long range
 *     reads one row per hour and its ragged ends one per minute;
 *   - CPU nanoseconds per (series, window start), for timelines;
 *   - an idempotency key per (agent id, seq), so a replayed message is
 *     stored once;
 *   - documents: alert rules and alerts, whole, by key (ember_store_doc_*);
 *   - where windows came from (ember_store_write_from): the runs of Kafka
 *     partitions the collector consumed, the windows not yet committed to
 *     Kafka (pending, so that a copy another collector also stored can be
 *     undone exactly), and which series each partition carried.
 * Old data goes by whole hours through ember_store_retain().
 *
 * Thread-safety: one ember_store_t may be shared by any number of threads.
 * Writers are serialised by LMDB (one write transaction at a time, across
 * processes too); readers never block and see whole batches only: a read
 * sees every batch committed before it began, and a long one (it renews
 * its snapshot every few thousand rows so the file does not grow) may also
 * see batches committed while it ran. Every call opens and ends its own
 * transactions: nothing returned by the store points into the database.
 * A call that must grow the map (below) waits until the calls running on
 * the same handle have ended, and holds new ones back while it remaps.
 *
 * Errors: 0 on success, -EINVAL for bad arguments, -ENOMEM, -ENOSPC when the
 * disk is full, EMBER_EMAPFULL when the map is full at its largest size
 * (opts.max_size), EMBER_ECORRUPT for data that does not decode or fails its
 * checksum (ember_store_strerror() says how to recover), EMBER_EVERSION for
 * a store of another schema, other -errno for the operating system.
 * Out-parameters are untouched on failure. A failed write leaves nothing
 * behind, in the file or in memory: retrying it later is always safe.
 *
 * Damage: every value of the data tables carries a CRC-32 of its key and
 * value, checked on every read; a value that fails it is refused with
 * EMBER_ECORRUPT. Damage LMDB itself trips over (a garbage page) can fault
 * the process, so ember_store_verify() walks a store in a child process
 * first. */
#ifndef EMBER_STORE_H
#define EMBER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"
#include "ember/profile.h"
#include "ember/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The on-disk schema this build writes and the newest it reads. Schema 4
 * added gauge windows (in-use value types, type-mask bits 5 and 6, never in
 * a rollup); a schema 3 store is upgraded in place by a read-write open (it
 * holds no gauge window, so only its version changes) and read as it is by
 * a read-only one. */
#define EMBER_STORE_SCHEMA_VERSION 4u

/* How far back a gauge read looks for a series' latest window: a series
 * whose latest gauge window started more than this before the instant read
 * is gone (its process ended or stopped reporting) and counts nothing. */
#define EMBER_STORE_GAUGE_LOOKBACK_NS (5LL * 60 * 1000000000LL)

typedef struct ember_store ember_store_t;

typedef struct ember_store_opts {
  /* Largest size the file may grow to, in bytes; 0 = 1 GiB. LMDB reserves
   * the address space, not the disk. Rounded up to the page size. */
  size_t map_size;
  /* The map grows (doubling) up to this size when a write finds it full;
   * 0 = map_size (never grows). Writes past it fail with EMBER_EMAPFULL. */
  size_t max_size;
  /* Open without writing anything: writes return -EACCES. The store must
   * already exist. */
  bool read_only;
  /* Do not fsync on commit (MDB_NOSYNC): a crash may lose the last batches
   * but never corrupts the file. For tests and benchmarks. */
  bool no_sync;
} ember_store_opts_t;

/* Open (creating if needed, unless read_only) the store at `path`, a regular
 * file; LMDB adds "<path>-lock" beside it. `opts` may be NULL for defaults.
 * On a new store the schema version is written; on an existing one it is
 * checked, and a store written by a newer schema is refused with
 * EMBER_EVERSION. On failure a sentence naming the cause is written to
 * `errbuf` (if not NULL; truncated to `errbuf_size`). `path` and `opts` are
 * borrowed for the call only. Returns 0 and sets *out, which the caller
 * frees with ember_store_close(). */
EMBER_API int ember_store_open(const char *path, const ember_store_opts_t *opts,
                               ember_store_t **out, char *errbuf, size_t errbuf_size);

/* Close the store. No call on it may be running or follow. NULL is a no-op. */
EMBER_API void ember_store_close(ember_store_t *store);

/* What one ember_store_write() did. */
typedef struct ember_store_write_result {
  size_t written;    /* profiles stored */
  size_t duplicates; /* profiles skipped: their (agent id, seq) was stored before */
  size_t expired;    /* profiles skipped: older than a past ember_store_retain() cutoff */
  /* When a write fails for one window's content (EMBER_ECORRUPT, -ERANGE;
   * -EINVAL from the profile calls): its index, and why. SIZE_MAX otherwise. */
  size_t bad;
  char why[192];
} ember_store_write_result_t;

/* Store `n` profile windows in one write transaction: all or nothing. Each
 * profile must have labels (any of them may be NULL), a window with
 * start < end (a profile with no stacks records an idle window); profiles without an agent id are
 * never treated as duplicates. A profile whose (agent id, seq) is already in
 * the store, or earlier in the same batch, is skipped and counted in
 * result->duplicates. Two profiles of the same series, window start and
 * value types (two processes with identical labels) are added together.
 * `profiles` are borrowed for the call. `result` may be NULL. When the map
 * is full the store grows it (up to opts.max_size) and writes again.
 * Returns 0, -EINVAL (bad argument or profile; nothing written), -ERANGE (a
 * stored sum would overflow), -ENOSPC (the disk is full), EMBER_EMAPFULL
 * (the map is at max_size: write fewer profiles at a time, delete old data
 * or raise max_size), -ENOMEM, EMBER_ECORRUPT, -EACCES (read-only).
 * Blocks while another write transaction runs. */
EMBER_API int ember_store_write(ember_store_t *store, ember_profile_t *const *profiles, size_t n,
                                ember_store_write_result_t *result);

/* Where a window came from (the collector's view of Kafka): the partition
 * of the profiles topic it was read from, its offset there, and the run it
 * was read in. A run is what one collector consumed of one partition in
 * one go: it starts at the offset the collector started reading the
 * partition from (on assignment). (partition, offset) names a window
 * fleet-wide, so two stores holding the same pair hold the same window. */
typedef struct ember_store_source {
  int32_t partition;      /* >= 0 */
  int64_t offset;         /* >= run_start, < INT64_MAX */
  int64_t run_start;      /* >= 0: the offset the run started reading at */
  int64_t run_started_ns; /* wall clock when the run started */
} ember_store_source_t;

/* ember_store_write() plus where each window came from: sources[i] is the
 * source of profiles[i] (borrowed for the call). With sources NULL this is
 * ember_store_write(). In the same write transaction as the windows, each
 * stored window is recorded as *pending* under its (partition, offset):
 * its own contribution (its row, its CPU point, its idempotency key), so
 * that ember_store_undo() can subtract it exactly, until
 * ember_store_committed() says the collector committed it to Kafka; its
 * run (partition, run_start) is created or extended (stored_end, tmin,
 * tmax, windows) and the (series, partition) pair noted. A duplicate
 * (agent id, seq) is not recorded as pending (it was stored before) but
 * still extends its run; an expired window does neither. Returns as
 * ember_store_write(), and -EINVAL for a bad source (nothing written). */
EMBER_API int ember_store_write_from(ember_store_t *store, ember_profile_t *const *profiles,
                                     const ember_store_source_t *sources, size_t n,
                                     ember_store_write_result_t *result);

/* ember_store_write_from() of decoded wire views (ember/wire.h), without
 * profiles: the same transaction, rules and returns. What ember_wire_decode
 * left unchecked is checked where the store takes it: a location it has
 * not seen must have strings that are UTF-8 without NUL and a hash that is
 * its content's, a stack it has not seen a hash that is its locations';
 * one it has seen is compared byte for byte (docs/internals/store.md,
 * "Wire views"). A window refused for its content fails the whole call
 * with EMBER_ECORRUPT (or -ERANGE for a sum that would overflow), nothing
 * written, result->bad naming it and result->why saying why, so the caller
 * can set it aside and write the others. `views` and `sources` are
 * borrowed for the call. */
EMBER_API int ember_store_write_wire(ember_store_t *store, ember_wire_t *const *views,
                                     const ember_store_source_t *sources, size_t n,
                                     ember_store_write_result_t *result);

/* The collector committed `offset` (the next offset to read) of
 * `partition` to Kafka in the run that started at `run_start`: delete
 * every pending window of the partition below `offset` (of any run), and
 * remember the offset as the run's `committed` (which never moves back;
 * a run this store does not hold records nothing). One write transaction,
 * growing the map as ember_store_write. Returns 0, -EINVAL (negative
 * partition or offsets), -EACCES (read-only), -ENOSPC, EMBER_EMAPFULL,
 * -ENOMEM, EMBER_ECORRUPT. */
EMBER_API int ember_store_committed(ember_store_t *store, int32_t partition, int64_t run_start,
                                    int64_t offset);

/* Undo the pending windows of `partition` with offset in [from, to) (a
 * later run of another collector holds them, so the fleet keeps that
 * copy): subtract each one's row from its window row and its minute and
 * hour rollup rows, and its CPU nanoseconds from its CPU point; delete its
 * idempotency key (so the window may be written again) and its pending
 * entry, and take it off its run's window count. Merges, series listings
 * and timelines then equal those of a store that never had the windows,
 * with two exceptions that cannot be told from the sums: a window row
 * shared with another window (two processes with identical labels) keeps
 * its longest duration and agreed period, and the row and CPU point of an
 * undone idle window (one without stacks) stay, empty and zero, since
 * another idle window may share them (docs/internals/store.md, "Runs and
 * pending windows"). Windows that are not pending (committed, or never
 * written from a source) are not touched: calling again undoes nothing.
 * One write transaction: all or nothing, growing the map as
 * ember_store_write. *undone (may be NULL) gets the number of windows
 * undone. Returns 0, -EINVAL (negative partition, from < 0 or to < from),
 * -EACCES (read-only), -ENOSPC, EMBER_EMAPFULL, -ENOMEM, EMBER_ECORRUPT (a
 * pending window does not match the rows it was added to). */
EMBER_API int ember_store_undo(ember_store_t *store, int32_t partition, int64_t from, int64_t to,
                               uint64_t *undone);

/* One run (see ember_store_source_t), as the store holds it. */
typedef struct ember_store_run {
  int32_t partition;
  int64_t start;      /* the offset the run started reading at */
  int64_t stored_end; /* one past the highest offset stored in the run */
  int64_t committed;  /* the last offset recorded by ember_store_committed; start at first */
  int64_t started_ns; /* wall clock when the run started */
  int64_t tmin_ns;    /* first and last window start stored in the run; */
  int64_t tmax_ns;    /* 0 and 0 when it has none */
  uint64_t windows;   /* windows stored in the run (duplicates included, undone ones not) */
  uint64_t pending;   /* of which still pending (not committed, not undone) */
} ember_store_run_t;

/* Every run the store holds, by partition then start, in one read
 * transaction: *out is an array of *count runs (NULL when none) freed with
 * ember_store_runs_free(). A store opened read-only that was made before
 * the run tables existed has none. Returns 0, -EINVAL, -ENOMEM,
 * EMBER_ECORRUPT. */
EMBER_API int ember_store_runs(ember_store_t *store, ember_store_run_t **out, size_t *count);
/* Free a result of ember_store_runs(); NULL is a no-op. */
EMBER_API void ember_store_runs_free(ember_store_run_t *runs);

/* Which series a read covers: each non-NULL field must equal the series'
 * label exactly; NULL matches any value (including none). All NULL = every
 * series. */
typedef struct ember_store_selector {
  const char *worker;
  const char *version;
  const char *host;
  const char *actor;
} ember_store_selector_t;

/* Merge every stored window of the selected series whose start lies in
 * [from_ns, to_ns) into a new profile with the single value type
 * `value_type`; rows that do not carry that type are skipped. The result
 * holds frames and stacks resolved from the dictionary, the selector as its
 * labels, the window covering the merged rows (or [from_ns, to_ns) when none
 * matched; its start is rounded down to the minute or hour when the first
 * rows come from a rollup) and the period if every row agreed. Whole hours
 * inside the range are read from the hourly rollups, whole minutes of the
 * ragged ends from the minute rollups, the rest from the windows
 * themselves; the sums are the same either way. `sel` may be NULL (all).
 * Stacks that appear in a matched row appear in the result even with a zero
 * value, as in ember_profile_merge(). On success *out is a profile the
 * caller owns (ember_profile_free). Returns 0 (an empty profile when nothing
 * matched), -EINVAL (from_ns >= to_ns, bad value type), -ENOMEM,
 * -ERANGE (a sum overflows), EMBER_ECORRUPT. */
EMBER_API int ember_store_merge(ember_store_t *store, const ember_store_selector_t *sel,
                                int64_t from_ns, int64_t to_ns, ember_value_type_t value_type,
                                ember_profile_t **out);
/* A rewrite of frames by series, applied by every read that builds a
 * profile from the dictionary (ember_store_merge, ember_store_gauge_latest,
 * ember_store_session_merge): the collector gives the JavaScript frames of
 * a worker and version their authors' names through the source maps
 * uploaded for them. A rewrite depends on a series' worker and version
 * only: the stacks of series whose (worker, version) `wants` are merged by
 * (worker, version), apart from every other series, and each of their
 * frames is offered to `frame` once per merge; so two versions' frames,
 * equal as stored (V8's names of two builds of one bundle), are never
 * added together before they are rewritten. Series it does not want merge
 * as before, at no extra cost; with no map set no series is looked at.
 *
 *  - any (may be NULL): whether any series may be wanted at all right now;
 *    false spares a read the look at each series' labels (a collector
 *    with no maps uploaded).
 *  - wants: whether frames of (worker, version) may be rewritten (either
 *    may be NULL: the label is unset).
 *  - frame: rewrite `in`: 1 with *out set (its strings may point into
 *    `in`'s, into static storage, or into `buf`, `size` >=
 *    EMBER_STORE_FRAME_MAP_BUF bytes; the read copies them at once), 0 to
 *    keep `in` as it is, or -ENOMEM.
 *
 * Both run on the reading thread, any number at once: ctx must be
 * thread-safe. Set the map once, after ember_store_open and before any
 * read; NULL removes it (also only while no read runs). */
typedef struct ember_store_frame_map {
  bool (*any)(void *ctx);
  bool (*wants)(void *ctx, const char *worker, const char *version);
  int (*frame)(void *ctx, const char *worker, const char *version, const ember_frame_t *in,
               ember_frame_t *out, char *buf, size_t size);
  void *ctx;
} ember_store_frame_map_t;
#define EMBER_STORE_FRAME_MAP_BUF (4u * (EMBER_MAX_STRING + 1))
EMBER_API void ember_store_set_frame_map(ember_store_t *store, const ember_store_frame_map_t *map);

/* Gauges (ember_value_type_is_gauge: in-use objects and bytes): a window
 * carrying one is a snapshot at its end, so ember_store_merge of a gauge
 * type does not sum windows over time. For each selected series it takes
 * the latest window carrying the type whose start is in [max(from_ns,
 * to_ns - EMBER_STORE_GAUGE_LOOKBACK_NS), to_ns) (every row of that start:
 * processes with identical labels and start are summed, as sources at one
 * instant), and sums those across series. So "the heap at T" is a merge of
 * [T - EMBER_STORE_GAUGE_LOOKBACK_NS, T), and a merge over a long range is
 * the state at its end, never a total over it. The window of the result
 * covers the windows taken; a series is one label set (worker, version,
 * host, actor), so two processes that share labels but not window starts
 * count as one series (the later window wins): give processes their own
 * actor. Gauge windows are never in the rollups; they are written only as
 * windows of gauge types alone (ember_store_write refuses a window that
 * mixes gauges with counted types). */

/* The parts of a gauge merge, one per series: for each selected series
 * that has one, a profile (value type `vt` only) of its latest window as
 * ember_store_merge of a gauge takes it, with the series' labels (pid 0),
 * that window's [start, end) and period. ember_store_merge of a gauge is
 * the sum of these; a fleet of stores merges them by label set, keeping the
 * latest per series, so a series split across two stores is never counted
 * twice. *out is an array of *count profiles (NULL when none) freed with
 * ember_store_gauge_latest_free(). Returns 0, -EINVAL (from_ns >= to_ns,
 * vt not a gauge), -ENOMEM, -ERANGE, EMBER_ECORRUPT. */
EMBER_API int ember_store_gauge_latest(ember_store_t *store, const ember_store_selector_t *sel,
                                       int64_t from_ns, int64_t to_ns, ember_value_type_t vt,
                                       ember_profile_t ***out, size_t *count);
/* Free a result of ember_store_gauge_latest(); NULL is a no-op. */
EMBER_API void ember_store_gauge_latest_free(ember_profile_t **parts, size_t count);

/* A series with activity in a range. */
typedef struct ember_store_series {
  uint32_t id;
  ember_labels_t labels; /* pid is 0; strings owned by the array */
  int64_t first_ns;      /* start of its first window in the range */
  int64_t last_ns;       /* start of its last window in the range */
} ember_store_series_t;

/* The selected series that have at least one window starting in
 * [from_ns, to_ns), ordered by series id (creation order). *out is an array
 * of *count entries (NULL when 0) freed with ember_store_series_free(). */
EMBER_API int ember_store_series(ember_store_t *store, const ember_store_selector_t *sel,
                                 int64_t from_ns, int64_t to_ns, ember_store_series_t **out,
                                 size_t *count);
EMBER_API void ember_store_series_free(ember_store_series_t *series, size_t count);

/* The most buckets one timeline may have. */
#define EMBER_STORE_MAX_BUCKETS 1000000u

/* CPU nanoseconds of the selected series, summed per bucket of `step_ns`:
 * bucket i covers [from_ns + i*step_ns, from_ns + (i+1)*step_ns) and holds
 * the CPU time of the windows that start in it. *out is an ember_malloc'ed
 * array of *count = ceil((to_ns - from_ns) / step_ns) values, freed with
 * ember_free(). CPU time is the window's EMBER_VT_CPU_NS total, else its
 * EMBER_VT_CPU_SAMPLES total times its period. Returns 0, -EINVAL,
 * EMBER_ETOOBIG (more than EMBER_STORE_MAX_BUCKETS), -ENOMEM, -ERANGE. */
EMBER_API int ember_store_cpu_timeline(ember_store_t *store, const ember_store_selector_t *sel,
                                       int64_t from_ns, int64_t to_ns, int64_t step_ns,
                                       int64_t **out, size_t *count);

/* The CPU timelines of each selected series, read in one pass (one read
 * transaction, renewed like every long read), for views and evaluations
 * that need a value per series, or per group of series, per bucket. */
typedef struct ember_store_timelines {
  size_t nbuckets; /* ceil((to_ns - from_ns) / step_ns); buckets as ember_store_cpu_timeline */
  /* nbuckets values: every selected series together, as
   * ember_store_cpu_timeline() of the same selector. */
  int64_t *total;
  /* The selected series that have a window starting in [from_ns, to_ns),
   * by series id, as ember_store_series() lists them: id and labels key
   * each row below. NULL when nseries is 0. */
  ember_store_series_t *series;
  size_t nseries;
  /* nseries x nbuckets values, row by row: series[i]'s CPU nanoseconds in
   * bucket b are cpu[i * nbuckets + b]. Each series' own CPU time alone
   * (not that of the series that add labels to it). NULL when nseries is 0. */
  int64_t *cpu;
} ember_store_timelines_t;

/* The CPU timeline of every series `sel` (NULL = all) selects over
 * [from_ns, to_ns) in buckets of step_ns, with their total. A read that
 * overlaps ingest may see batches committed while it runs, but each
 * series' points are read once: the total always equals the rows' sum plus
 * the points of selected series without a window in the range (none,
 * unless a window was written without its CPU point or the other way round).
 * `max_values` caps nseries x nbuckets, checked before the values are
 * allocated (0 = EMBER_STORE_MAX_BUCKETS). On success *out is the caller's,
 * freed with ember_store_timelines_free(); nothing in it points into the
 * database. Returns 0, -EINVAL (from_ns >= to_ns, step_ns <= 0),
 * EMBER_ETOOBIG (more than EMBER_STORE_MAX_BUCKETS buckets, or more than
 * max_values values), -ENOMEM, -ERANGE (a sum overflows), EMBER_ECORRUPT.
 * Thread-safety: as every read. */
EMBER_API int ember_store_cpu_timelines(ember_store_t *store, const ember_store_selector_t *sel,
                                        int64_t from_ns, int64_t to_ns, int64_t step_ns,
                                        size_t max_values, ember_store_timelines_t **out);
/* Free a result of ember_store_cpu_timelines(); NULL is a no-op. */
EMBER_API void ember_store_timelines_free(ember_store_timelines_t *timelines);

/* The timelines of a gauge value type (in-use bytes or objects), per
 * selected series and in total. Buckets as ember_store_cpu_timeline. */
typedef struct ember_store_gauge_timelines {
  size_t nbuckets;
  /* nbuckets values: per bucket, the sum across series of each series'
   * value in it (never a sum over one series' windows). */
  int64_t *total;
  /* The selected series with a window carrying the type that starts in
   * [from_ns, to_ns), by series id; first_ns / last_ns are their first and
   * last such window. NULL when nseries is 0. */
  ember_store_series_t *series;
  size_t nseries;
  /* nseries x nbuckets, row by row: values[i * nbuckets + b] is the total
   * of series[i]'s latest window starting in bucket b (0 when none), and
   * at_ns[i * nbuckets + b] that window's start (INT64_MIN when none), so
   * timelines of several stores can be merged keeping the latest. */
  int64_t *values;
  int64_t *at_ns;
} ember_store_gauge_timelines_t;

/* The gauge timeline of value type `vt` of every series `sel` (NULL = all)
 * selects over [from_ns, to_ns) in buckets of step_ns: each series' latest
 * window in each bucket (no lookback: a bucket without a window of a
 * series adds nothing of it), summed across series. One pass over the
 * windows, in one read transaction renewed like every long read.
 * `max_values` caps nseries x nbuckets (0 = EMBER_STORE_MAX_BUCKETS). On
 * success *out is the caller's, freed with
 * ember_store_gauge_timelines_free(). Returns 0, -EINVAL (from_ns >= to_ns,
 * step_ns <= 0, vt not a gauge), EMBER_ETOOBIG (too many buckets or
 * values), -ENOMEM, -ERANGE, EMBER_ECORRUPT. Thread-safety: as every read. */
EMBER_API int ember_store_gauge_timelines(ember_store_t *store, const ember_store_selector_t *sel,
                                          ember_value_type_t vt, int64_t from_ns, int64_t to_ns,
                                          int64_t step_ns, size_t max_values,
                                          ember_store_gauge_timelines_t **out);
/* Free a result of ember_store_gauge_timelines(); NULL is a no-op. */
EMBER_API void ember_store_gauge_timelines_free(ember_store_gauge_timelines_t *timelines);

/* The total of ember_store_gauge_timelines() alone: *out is an
 * ember_malloc'ed array of *count buckets, freed with ember_free(). Returns
 * as ember_store_gauge_timelines(). */
EMBER_API int ember_store_gauge_timeline(ember_store_t *store, const ember_store_selector_t *sel,
                                         ember_value_type_t vt, int64_t from_ns, int64_t to_ns,
                                         int64_t step_ns, int64_t **out, size_t *count);

/* Retention: delete every window, minute and hour rollup, CPU point, session
 * result, idempotency key and pending window older than `before_ns`
 * rounded down to the hour (rollups cover whole hours, so the cutoff is
 * too), and every run whose last window (tmax) is older, in write
 * transactions of at most `max_per_txn` deletions (0 = 1000) so that
 * writers are never held up long.
 * The cutoff is remembered: later writes of windows that start before it
 * are skipped and counted in `expired`, so a replay of an old message does
 * not come back once its idempotency key is gone. Frames and stacks are
 * kept (the dictionary is not garbage-collected yet). *deleted (may be
 * NULL) gets the number of entries deleted. Returns 0 or an error; on error
 * the transactions already committed stay done, and calling again resumes. */
EMBER_API int ember_store_retain(ember_store_t *store, int64_t before_ns, size_t max_per_txn,
                                 uint64_t *deleted);

/* On-demand session results. A profile that carries a session id
 * (ember_profile_session_id() != NULL) is the result of one session on one
 * agent; it is kept whole, apart from the continuous series, so it never
 * counts in ember_store_merge() or the timelines.
 *
 * Store `n` such profiles in one write transaction, all or nothing. Each is
 * kept once per (session id, agent id, seq): a replay is skipped and counted
 * in result->duplicates (a profile without an agent id is keyed by its
 * content instead). Profiles whose window starts before a past
 * ember_store_retain() cutoff are skipped and counted in result->expired;
 * retention deletes results by the same rule as windows. `profiles` are
 * borrowed for the call; `result` may be NULL. Returns 0, -EINVAL (no
 * session id, one longer than 128 bytes, or a bad window; nothing
 * written), -ENOSPC, EMBER_EMAPFULL (after growing the map to max_size),
 * -ENOMEM, -EACCES (read-only), EMBER_ETOOBIG (a profile too large to
 * encode). */
EMBER_API int ember_store_session_add(ember_store_t *store, ember_profile_t *const *profiles,
                                      size_t n, ember_store_write_result_t *result);

/* What ember_store_session_merge() read. */
typedef struct ember_store_session_info {
  size_t results; /* result profiles of the session */
  size_t matched; /* of which carried `value_type` */
} ember_store_session_info_t;

/* Merge every stored result of `session_id` that carries `value_type` into
 * a new profile with that single value type (owned by the caller), whose
 * labels are those of the first result with the host cleared when results
 * come from several hosts, window covering them all, period kept when all
 * agree. `info` (may be NULL) says how many results there were. Returns 0
 * (an empty profile when there are none), -EINVAL, -ENOMEM, -ERANGE,
 * EMBER_ECORRUPT. */
EMBER_API int ember_store_session_merge(ember_store_t *store, const char *session_id,
                                        ember_value_type_t value_type, ember_profile_t **out,
                                        ember_store_session_info_t *info);

/* Documents: small JSON (or any bytes) values kept whole by key, for the
 * collector's own state: alert rules made through the API and alerts with
 * their state and history. The store does not look inside a document; it
 * seals it with a checksum like every other value (a damaged one is
 * refused with EMBER_ECORRUPT) and keeps it apart from the profile data
 * (ember_store_retain() does not touch documents).
 *
 * A store opened read-only that was made before these tables existed reads
 * them as empty; a read-write open adds them. */
typedef enum ember_store_doc_table {
  EMBER_STORE_DOC_RULES = 1,     /* "rules": key = rule name */
  EMBER_STORE_DOC_ALERTS = 2,    /* "alerts": key = alert id */
  EMBER_STORE_DOC_SOURCEMAPS = 3 /* "sourcemaps": uploaded source maps (collector/srcmaps.h) */
} ember_store_doc_table_t;

/* Keys are 1..128 bytes (a NUL-terminated string); documents at most 1 MiB,
 * but for "sourcemaps", whose documents (a compressed map each) may be up
 * to 16 MiB. */
#define EMBER_STORE_DOC_KEY_MAX       128u
#define EMBER_STORE_DOC_MAX           (1u << 20)
#define EMBER_STORE_DOC_SOURCEMAP_MAX (16u << 20)

/* Store `len` bytes of `doc` under `key` in `table`, replacing what the key
 * held, in one write transaction (growing the map as ember_store_write).
 * `key` and `doc` are borrowed for the call. Returns 0, -EINVAL (bad table,
 * empty or too long key), EMBER_ETOOBIG (len past the table's bound),
 * -EACCES (read-only), -ENOSPC, EMBER_EMAPFULL, -ENOMEM, EMBER_ECORRUPT. */
EMBER_API int ember_store_doc_put(ember_store_t *store, ember_store_doc_table_t table,
                                  const char *key, const void *doc, size_t len);

/* The document under `key`: *doc gets an ember_malloc'ed copy of its *len
 * bytes followed by a NUL (so JSON text can be parsed in place), freed with
 * ember_free(). Returns 0, EMBER_ENOTFOUND, EMBER_ECORRUPT (it fails its
 * checksum), -EINVAL, -ENOMEM. */
EMBER_API int ember_store_doc_get(ember_store_t *store, ember_store_doc_table_t table,
                                  const char *key, void **doc, size_t *len);

/* Delete the document under `key`. Returns 0, EMBER_ENOTFOUND, -EINVAL,
 * -EACCES, -ENOSPC, EMBER_EMAPFULL. */
EMBER_API int ember_store_doc_del(ember_store_t *store, ember_store_doc_table_t table,
                                  const char *key);

/* Called with each document in key order: `key` (NUL-terminated), the
 * document (`len` bytes, NUL-terminated) and the caller's `ctx`; both
 * borrowed for the call only. A non-zero return stops the walk and is
 * returned by ember_store_doc_each. */
typedef int (*ember_store_doc_fn)(const char *key, const void *doc, size_t len, void *ctx);

/* Call `fn` for every document of `table`, in key order. Documents are read
 * in batches, each a snapshot, and no transaction or lock is held while
 * `fn` runs: it may call the store (put, delete) itself; a document put or
 * deleted during the walk may or may not be seen. Returns 0, fn's non-zero
 * return, EMBER_ECORRUPT (a document fails its checksum: the walk stops
 * there, after the documents before it), -EINVAL, -ENOMEM. */
EMBER_API int ember_store_doc_each(ember_store_t *store, ember_store_doc_table_t table,
                                   ember_store_doc_fn fn, void *ctx);

/* Decides whether a document goes (retention): true deletes it. Called
 * inside the store's write transaction: it must not call the store. */
typedef bool (*ember_store_doc_expired_fn)(const char *key, const void *doc, size_t len, void *ctx);

/* Retention of documents: delete every document of `table` for which
 * `expired` returns true, in write transactions of at most `max_per_txn`
 * deletions (0 = 1000). The store cannot read a document's fields, so the
 * caller judges (for alerts: resolved, and resolved before the cutoff of
 * alerts.keep). *deleted (may be NULL) gets the count. Returns 0 or an
 * error; transactions already committed stay done, and calling again
 * resumes. A damaged document stops the pass with EMBER_ECORRUPT. */
EMBER_API int ember_store_doc_retain(ember_store_t *store, ember_store_doc_table_t table,
                                     ember_store_doc_expired_fn expired, void *ctx,
                                     size_t max_per_txn, uint64_t *deleted);

/* Entry counts, for tests, metrics and capacity planning. */
typedef struct ember_store_stats {
  uint64_t series;         /* distinct label sets */
  uint64_t frames;         /* distinct frames in the dictionary */
  uint64_t stacks;         /* distinct stacks in the dictionary */
  uint64_t profile_rows;   /* (series, window, value types) rows */
  uint64_t cpu_rows;       /* (series, window) CPU points */
  uint64_t idem_keys;      /* (agent id, seq) keys */
  uint64_t rollup_rows;    /* (series, hour, value types) rollup rows */
  uint64_t rollup_1m_rows; /* (series, minute, value types) rollup rows */
  uint64_t file_bytes;     /* pages in use times the page size */
  uint64_t session_rows;   /* on-demand session results, one per (session, agent, seq) */
  uint64_t map_bytes;      /* the map's current size (grows up to opts.max_size) */
  uint64_t map_grows;      /* times this handle grew the map */
  uint64_t rule_docs;      /* documents in the "rules" table */
  uint64_t alert_docs;     /* documents in the "alerts" table */
  uint64_t sourcemap_docs; /* documents in the "sourcemaps" table */
  uint64_t run_rows;       /* runs (partition, run start) */
  uint64_t pending_rows;   /* pending windows (partition, offset) */
  uint64_t series_parts;   /* (series, partition) pairs seen */
} ember_store_stats_t;

/* Fill *stats from one read transaction. Returns 0 or an error. */
EMBER_API int ember_store_stats(ember_store_t *store, ember_store_stats_t *stats);

/* Walk every entry of every table of the store at `path` and check each
 * value's checksum, in a child process (fork), so that damage that faults
 * LMDB (a SIGBUS or SIGSEGV on a garbage page) or makes it loop (no
 * progress for 60 s) ends the child, not the caller. The store is opened
 * read-only and must not be open for writing in the caller (call it before
 * ember_store_open). On damage errbuf gets a sentence naming the file, the
 * table and what was wrong, and how to recover. *entries (may be NULL) gets
 * the number of entries walked. Returns 0, EMBER_ECORRUPT (damaged),
 * EMBER_EVERSION (another schema), -ENOENT (no store there yet), -EINTR
 * (the child was stopped by a signal that is not a fault, e.g. a ^C) or
 * -errno (fork, pipe). The cost is one read of the whole file. */
EMBER_API int ember_store_verify(const char *path, uint64_t *entries, char *errbuf,
                                 size_t errbuf_size);

/* ember_strerror() with the store's advice: for EMBER_ECORRUPT, how to
 * recover a damaged store; for EMBER_EMAPFULL and -ENOSPC, what to free or
 * raise. A static sentence. Thread-safe. */
EMBER_API const char *ember_store_strerror(int err);

/* How to recover a damaged store, in one sentence (also in
 * docs/internals/store.md, "Recovering a damaged store"). Only Kafka holds
 * an intact copy: `mdb_copy` either copies the damaged pages as they are
 * or faults on them, so it is named only for keeping evidence. */
#define EMBER_STORE_RECOVERY                                                                       \
  "stop the collector, move the data directory aside (keep it for diagnosis; a copy made with "    \
  "`mdb_copy -n` holds the same damage and recovers nothing), and rebuild it from Kafka: reset "   \
  "the consumer group's offsets to the earliest and start with an empty data_dir "                 \
  "(docs/internals/store.md, \"Recovering a damaged store\")"

#ifdef __cplusplus
}
#endif
#endif
