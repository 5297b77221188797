/* Publishing: get every closed window to Kafka exactly once as far as a
 * consumer can tell, through broker outages.
 *
 * A window is handed over as an encoded message (the profile carries
 * (agent_id, seq), so consumers drop duplicates). The publisher produces it
 * to ember.profiles with key = worker through an idempotent producer. What
 * Kafka has not acknowledged waits, in order:
 *   1. in librdkafka's queue, bounded by mem_max_bytes (the memory queue);
 *   2. past that, or when a delivery fails (message.timeout.ms is set to
 *      delivery_timeout_ms so an outage surfaces as failed deliveries), in
 *      an on-disk spool under spool_dir, bounded by spool_max_bytes; one
 *      file per message, written to a temporary name, fsync'd and renamed,
 *      so a crash never leaves half a message;
 *   3. spooled messages are produced again, oldest first, once deliveries
 *      succeed again (and at start-up, for a spool left by an earlier run),
 *      and deleted when acknowledged.
 * Past both bounds the oldest spooled message is dropped, counted and
 * logged. A window is never silently lost.
 *
 * The publisher also sends ember.targets records (compacted topic; key
 * "host/pid"; a NULL value is the tombstone for an exited process) straight
 * through the same producer: they are refreshed periodically, so they are
 * not spooled.
 *
 * Thread-safety: publish and target calls may come from any one thread at
 * a time; the publisher runs its own thread for delivery reports and the
 * spool. */
#ifndef EMBER_AGENT_PUBLISH_H
#define EMBER_AGENT_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include "ember/kafka.h"

typedef struct ember__publisher_opts {
  const ember_kafka_t *kafka; /* borrowed; must outlive the publisher */
  const char *topic;          /* NULL = EMBER_TOPIC_PROFILES */
  const char *spool_dir;      /* created if missing; NULL = no spool */
  size_t mem_max_bytes;       /* 0 = 64 MiB */
  size_t spool_max_bytes;     /* 0 = 1 GiB */
  int delivery_timeout_ms;    /* 0 = 10000 */
} ember__publisher_opts_t;

typedef struct ember__publisher_stats {
  uint64_t published;   /* acknowledged by Kafka */
  uint64_t failed;      /* deliveries that failed and went to the spool */
  uint64_t spooled;     /* messages written to the spool */
  uint64_t respooled;   /* spooled messages produced again */
  uint64_t dropped;     /* lost past both bounds */
  uint64_t queue_bytes; /* in librdkafka's queue now */
  uint64_t spool_bytes; /* on disk now */
  uint64_t spool_files;
  uint64_t targets_sent;
  uint64_t targets_failed; /* target records Kafka refused or never acknowledged */
  uint64_t spool_corrupt;  /* spool files that failed verification (deleted) */
  uint64_t events_sent;    /* session events Kafka acknowledged */
  uint64_t events_failed;  /* session events Kafka refused or never acknowledged */
} ember__publisher_stats_t;

typedef struct ember__publisher ember__publisher_t;

int ember__publisher_new(const ember__publisher_opts_t *opts, ember__publisher_t **out,
                         char *errbuf, size_t errbuf_size);
/* Flush for at most timeout_ms (what is still unacknowledged then is
 * spooled, so the next start sends it), then free. */
void ember__publisher_close(ember__publisher_t *p, int timeout_ms);

/* Publish one window: the bytes are copied. Never blocks on Kafka.
 * Returns 0 (queued or spooled) or -ENOMEM / -EIO when it could be neither
 * (counted as dropped); EMBER_ETOOBIG (dropped) when key + value pass
 * Kafka's message.max.bytes, which no retry would cure. */
int ember__publisher_publish(ember__publisher_t *p, const char *key, const void *data, size_t len);

/* Announce a target (value = encoded ember.wire.v1.Target) or, with
 * value NULL, its tombstone. Not spooled. Returns 0, -EINVAL, -ENOBUFS
 * (queue full) or EMBER_EKAFKA; a failed delivery counts in
 * targets_failed. */
int ember__publisher_target(ember__publisher_t *p, const char *key, const void *value, size_t len);

/* Send one other message (the sessions' events on ember.events) through
 * the same producer, so that an agent runs one producer and not one per
 * module: each librdkafka client has threads that wake on their own
 * timers, a fixed cost per host that mattered at 19 Hz. Not spooled: an
 * event lost in an outage is counted in events_failed (the collector
 * expires a session whose hosts stop answering). Bytes are copied.
 * Returns 0, -EINVAL, -ENOBUFS (queue full) or EMBER_EKAFKA. */
int ember__publisher_event(ember__publisher_t *p, const char *topic, const void *key, size_t klen,
                           const void *value, size_t len);

void ember__publisher_stats(ember__publisher_t *p, ember__publisher_stats_t *out);

#endif
