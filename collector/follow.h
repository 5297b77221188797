/* Following a topic whole: a consumer of every partition of one topic,
 * from the beginning, in a group of its own that never commits, and the
 * thread that hands each record to a callback. Every collector needs all
 * of ember.targets (the registry) and of ember.collectors (the peer
 * table), rebuilt at each start from the compacted topic; both are kept
 * this way.
 *
 * Records the callback refuses are counted and logged through the log's
 * rate limiter (log.md), as are consumer errors: bad input is never fatal.
 *
 * Thread-safety: start and stop from one thread; the callbacks run on the
 * follower's thread only. Errors: 0 / -errno / EMBER_EKAFKA with a
 * sentence in errbuf. */
#ifndef EMBER_COLLECTOR_FOLLOW_H
#define EMBER_COLLECTOR_FOLLOW_H

#include <stddef.h>

#include "ember/kafka.h"
#include "ember/metrics.h"

typedef struct ember__follow ember__follow_t;

typedef struct ember__follow_opts {
  ember_kafka_t *kafka;     /* borrowed; must outlive the follower */
  const char *topic;        /* borrowed for the call */
  const char *group_prefix; /* the group is PREFIX.HOST.PID.MS: "ember-registry" (for the call) */
  const char *what;         /* names a record in log lines: "target"; must outlive the follower */
  /* One record (m->payload NULL or empty is a tombstone). Returns 0, or
   * an error with a sentence in err: counted in `errors`, logged
   * rate-limited, and the record skipped. */
  int (*apply)(void *ctx, const rd_kafka_message_t *m, char *err, size_t err_size);
  /* After every poll, records or not (at least every 200 ms): periodic
   * work on the follower's thread. NULL = none. */
  void (*tick)(void *ctx);
  /* Once, when every assigned partition reached its end (the history in
   * the topic at start is read). NULL = not wanted (and no EOF events
   * asked of the consumer). */
  void (*caught_up)(void *ctx);
  void *ctx;                         /* borrowed; must outlive the follower */
  ember_metric_t *messages, *errors; /* records read / refused; may be NULL */
} ember__follow_opts_t;

/* Make the consumer and start the thread (with the caller's signal mask).
 * Returns 0, EMBER_EKAFKA, -EAGAIN (no thread), -ENOMEM. */
int ember__follow_start(const ember__follow_opts_t *o, ember__follow_t **out, char *errbuf,
                        size_t errbuf_size);

/* Stop the thread (the poll in hand ends within 200 ms), close the
 * consumer, free. NULL is a no-op. */
void ember__follow_stop(ember__follow_t *f);

#endif
