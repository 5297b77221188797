/* Ingest's batches: the messages of ember.profiles the collector's ingest
 * thread polls, decoded on the decode threads, then stored, DLQ'd and
 * committed by a writer thread of their own.
 *
 * The ingest thread fills a batch of consumed messages (each handed to the
 * decode pool as it arrives: a window becomes a wire view with its hashes
 * verified, a session result a profile) and, once every message in it is
 * decoded, hands it to the writer thread; then it fills the other batch
 * while that one is written. At most one batch is being written and one
 * filled, so memory stays at twice batch.max_bytes at worst. A message is
 * kept (rd_kafka_message_t) until its batch is flushed, so that anything
 * the store refuses can still be copied to the DLQ byte for byte. The
 * writer takes batches in the order they were handed over, and flushing
 * one is, in order:
 *   1. one store write of every decoded window (a store error that is not
 *      about the input is retried with backoff, never skipped: the offsets
 *      are not committed until it succeeds; one window the store refuses
 *      for its content goes to the DLQ and the rest are written again; a
 *      full map at store.max_size writes the batch in parts);
 *   2. the malformed messages produced to ember.profiles.dlq and flushed
 *      until the broker acknowledged each one;
 *   3. a synchronous commit of the batch's offsets, recorded in the store
 *      with the run the batch's messages carried (shards.h).
 * A crash between any two steps replays the batch (and the one being
 * filled, never committed); step 1 then finds every (agent_id, seq)
 * already stored and step 2 at worst copies a bad message to the DLQ
 * twice (the DLQ is at-least-once, the store exactly-once). Before
 * partitions are revoked, and at the end, the ingest thread hands over
 * what it has and waits until the writer has flushed it
 * (ember__ingest_drain).
 *
 * Thread-safety: _take, _tick and _drain are called by the ingest thread
 * (the rebalance callback runs inside its poll; after it has stopped,
 * _drain may be called by the thread that closes the consumer). _new and
 * _free by the collector's start and stop. */
#ifndef EMBER_COLLECTOR_INGEST_H
#define EMBER_COLLECTOR_INGEST_H

#include <librdkafka/rdkafka.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "decode_pool.h"
#include "health.h"
#include "sessions.h"
#include "shards.h"
#include "ember/codec.h"
#include "ember/metrics.h"
#include "ember/store.h"

/* The collector's metrics ingest updates (registered by the collector). */
typedef struct ember__ingest_metrics {
  ember_metric_t *messages, *profiles, *samples, *duplicates, *expired, *malformed, *dlq_errors,
      *batches, *batch_seconds, *store_errors, *commit_errors, *consumer_errors, *splits, *wire_v1,
      *wire_v2;
} ember__ingest_metrics_t;

typedef struct ember__ingest_opts {
  ember_store_t *store;
  rd_kafka_t *consumer;         /* of ember.profiles: offsets are committed through it */
  rd_kafka_t *dlq;              /* a producer: malformed messages to ember.profiles.dlq */
  ember__csessions_t *sessions; /* told of each session result stored */
  ember__shards_t *shards;      /* sources of messages, commits recorded */
  ember__health_t *health;      /* /healthz: store results and beats */
  ember__dpool_t *pool;         /* decode threads (NULL: decode inline) */
  ember_codec_limits_t lim;     /* what one message may hold */
  const atomic_bool *stop;      /* the collector's: retry loops end once set */
  size_t batch_max, batch_max_bytes;
  int64_t linger_ns;
  uint64_t max_size; /* store.max_size, for the log */
  /* The test-only fault hook (docs/internals/fleet.md): kill the process
   * after the Nth stored batch (0 = never), or after a stored batch with a
   * window of this worker (NULL or "" = none). */
  int fault_kill_after;
  const char *fault_worker;
  ember__ingest_metrics_t m;
} ember__ingest_opts_t;

typedef struct ember__ingest ember__ingest_t;

/* The process's malloc policy for ingest, set once at start by the
 * collector (and bench_store, which measures its ingest): a fixed mmap
 * threshold of 32 MiB and a trim threshold of 512 MiB. A decoded window
 * is a few arena blocks of ~100 KiB, a batch ~1,000 of them, all freed when
 * the batch is written, then the same again for the next batch. With
 * glibc's defaults those blocks could be mappings of their own or the
 * heap's top given back to the kernel, and every batch then faulted its
 * ~100 MiB in again: measured by bench/wire_decode, 120-147 us a window
 * with glibc's defaults against 71-73 with this (bench/RESULTS.md,
 * 2026-12-03). The price: the process keeps the memory
 * its largest batches used (at most about twice batch.max_bytes in views). */
void ember__ingest_malloc_policy(void);

/* Start the writer thread (the caller blocks signals for it). 0, -EINVAL,
 * -ENOMEM, -EAGAIN. */
int ember__ingest_new(const ember__ingest_opts_t *o, ember__ingest_t **out);
/* A message polled from the consumer: into the batch being filled and to
 * the decode pool (an error message is counted and dropped). */
void ember__ingest_take(ember__ingest_t *g, rd_kafka_message_t *m);
/* After each poll: hand the batch over when it is full, old enough, or
 * the poll found nothing (`idle`). */
void ember__ingest_tick(ember__ingest_t *g, bool idle, int64_t now_mono_ns);
/* Hand over the batch being filled and wait until every batch handed over
 * is flushed. NULL is a no-op. */
void ember__ingest_drain(ember__ingest_t *g);
/* Stop the writer (after a drain) and free. NULL is a no-op. */
void ember__ingest_free(ember__ingest_t *g);

#endif
