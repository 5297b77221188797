/* Shards: what this collector holds of each partition of ember.profiles,
 * and the rule that keeps every window in one store of the fleet.
 *
 * A window is a Kafka message, so (partition, offset) names it fleet-wide.
 * A *run* is what this collector read of one partition in one go: it
 * starts at the offset of the first message read after an assignment and
 * ends one past the highest offset stored (the store keeps runs, and the
 * window's own contribution while its offset is not committed yet:
 * ember_store_write_from, ember_store_runs, docs/internals/fleet.md).
 *
 * Duplicates between stores arise only when a collector stored a batch and
 * died before committing its offsets: the next owner of the partition reads
 * the batch again from the committed offset. Two committed copies never
 * meet (a run starts at or above every commit of its group), so of two
 * copies of one (partition, offset) at least one is pending. Rule: a
 * pending copy goes when the other is committed (below its run's
 * `committed`); of two pending copies, the one in the run that started
 * later (the higher start offset) is kept (ties: the run that committed
 * past its start, then the later wall-clock start, then the larger
 * collector id). The first clause is not implied by the second: where the
 * group has no commit for a partition, a run starts where
 * auto.offset.reset says (earliest: below an earlier run that died before
 * its first commit), so start offsets alone would keep the pending copy and
 * the committed one both. Each collector undoes its own losing copies
 * (ember__shards_reconcile against the runs its peers announce; runs a
 * collector sharing this store file announces are recognised as this
 * store's own and skipped).
 *
 * On assignment the collector starts at max(the group's committed offset,
 * the end of its own last run of the partition): it never reads again what
 * it holds (a crash between the store's commit and Kafka's stores nothing
 * twice), and never starts below the committed offset (whose windows may
 * be committed in another store, where they cannot be undone).
 *
 * Thread-safety: _assign, _revoke and _source run on the ingest thread
 * (the rebalance callback runs inside its poll), _committed on the
 * collector's writer thread;
 * _reconcile may run on any one other thread (it reads the store's runs,
 * and undo is a store write transaction). Errors: the store's codes. */
#ifndef EMBER_COLLECTOR_SHARDS_H
#define EMBER_COLLECTOR_SHARDS_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/metrics.h"
#include "ember/store.h"

typedef struct ember__shards ember__shards_t;

/* `store` and `metrics` are borrowed for the life of the shards; `self_id`
 * (this collector's id, for the tie-break) is copied. */
int ember__shards_new(ember_store_t *store, ember_metrics_t *metrics, const char *self_id,
                      ember__shards_t **out);
void ember__shards_free(ember__shards_t *s);

/* Partitions were assigned (in the rebalance callback, before the assign
 * call): where this collector's own last run of a partition ends above the
 * group's committed offset, that partition's start offset in `parts` is set
 * to it. Asks the broker for the committed offsets (at most timeout_ms);
 * when it cannot, leaves the offsets as they are (the committed offset is
 * used: never below it). */
void ember__shards_assign(ember__shards_t *s, rd_kafka_t *consumer,
                          rd_kafka_topic_partition_list_t *parts, int timeout_ms);
/* Partitions were revoked: their runs end. */
void ember__shards_revoke(ember__shards_t *s, const rd_kafka_topic_partition_list_t *parts);

/* The source of a consumed message of ember.profiles: its partition and
 * offset, and its run (the first message read of the partition since its
 * assignment starts one). */
void ember__shards_source(ember__shards_t *s, const rd_kafka_message_t *m,
                          ember_store_source_t *out);

/* Partition `partition`'s offsets were committed to Kafka up to `next`
 * (the next offset to read), in the run that started at `run_start` (what
 * _source gave the batch's messages): recorded in the store so their
 * windows stop being pending. A failure is logged and counted; harmless
 * (they stay pending; nobody reads them again, so the rule never undoes
 * them). Reads nothing _source writes, so the collector's writer thread
 * may call it while the ingest thread takes the next batch. */
void ember__shards_committed(ember__shards_t *s, int32_t partition, int64_t run_start,
                             int64_t next);

/* A run another collector holds, as it announced it. */
typedef struct ember__foreign_run {
  const char *collector; /* its id */
  int32_t partition;
  int64_t start, stored_end, committed, started_ns;
} ember__foreign_run_t;

/* Apply the rule to this store's pending windows against `n` runs of other
 * collectors (of this collector's replica group: copies in another group
 * are replicas, not duplicates): undo every pending window a winning
 * foreign run holds. *undone (may be NULL) gets the windows undone.
 * Returns 0 or the store's error (what was undone before stays undone). */
int ember__shards_reconcile(ember__shards_t *s, const ember__foreign_run_t *runs, size_t n,
                            uint64_t *undone);

/* Does the run `a` win the rule against `b` (both holding one offset)?
 * Exposed for tests. */
bool ember__shards_wins(const ember__foreign_run_t *a, const ember__foreign_run_t *b);

#endif
