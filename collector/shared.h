/* A table every collector of a fleet holds whole, kept on a compacted
 * topic (key = an entry, value = its content, empty = deleted):
 *
 *  - ember__shared_put produces one record and waits for the broker to take
 *    it, so that a change made through one collector's API that did not
 *    reach the fleet is refused, not made on that collector alone;
 *  - a follower (follow.h) reads the topic whole, from its beginning at
 *    every start, and hands each record to the owner's apply(): a change
 *    made on another collector, or on this one before a restart, is made
 *    here too.
 *
 * Alert rules (rules_fleet.h, ember.rules) and uploaded source maps
 * (srcmaps.h, ember.sourcemaps) are such tables.
 *
 * Thread-safety: put from any thread; records are applied on the
 * follower's thread. Errors: 0, EMBER_EKAFKA (EMBER_ETOOBIG for a record
 * past max_record) with a sentence in err, -EINVAL, -ENOMEM. */
#ifndef EMBER_COLLECTOR_SHARED_H
#define EMBER_COLLECTOR_SHARED_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "ember/kafka.h"
#include "ember/metrics.h"
#include "follow.h"

typedef struct ember__shared_opts {
  ember_kafka_t *kafka;     /* borrowed; must outlive the table */
  const char *topic;        /* a compacted topic (kafka.h); must outlive the table */
  const char *group_prefix; /* of the follower's own group (follow.h) */
  const char *what;         /* names a record in log lines and sentences: "rule" */
  int timeout_ms;           /* how long put waits for the broker; 0 = 10 s */
  size_t max_record;        /* the largest record put sends; 0 = librdkafka's 1 MB */
  /* One record, as follow.h's apply. */
  int (*apply)(void *ctx, const rd_kafka_message_t *m, char *err, size_t err_size);
  void *ctx;                         /* borrowed; must outlive the table */
  ember_metric_t *messages, *errors; /* records read / refused; may be NULL */
} ember__shared_opts_t;

typedef struct ember__shared ember__shared_t;

/* Make the producer (its messages time out at timeout_ms) and start
 * following. 0, EMBER_EKAFKA, -EAGAIN, -ENOMEM. */
int ember__shared_start(const ember__shared_opts_t *o, ember__shared_t **out, char *err,
                        size_t err_size);

/* Produce (key, value) (value NULL or empty: a deletion) and wait until the
 * broker took it or the timeout passed. */
int ember__shared_put(ember__shared_t *s, const void *key, size_t key_len, const void *value,
                      size_t value_len, char *err, size_t err_size);

/* Stop following, flush and destroy the producer. NULL is a no-op. */
void ember__shared_stop(ember__shared_t *s);

#endif
