/* Alert rules taken through any collector's API, in force on every
 * collector of its group (docs/internals/alerts.md, "Fleet"): the
 * compacted topic ember.rules, key = "GROUP/NAME" (the ingest group, the
 * rule's name, which has no '/'), value = the rule's JSON as the engine
 * stores it (alerts.h), an empty value = deleted.
 *
 * A collector's engine evaluates its rules over its own store, which
 * holds the windows of the workers on its group's partitions that it
 * owns; with every API rule on every member of the group, each worker is
 * evaluated once, where its windows are. Other groups (replicas, which
 * hold copies of the same windows) skip the record: they would notify
 * every alert a second time.
 *
 *  - ember__rules_fleet_share is the engine's share hook: it produces the
 *    record and waits for the broker to take it, so an API change that
 *    did not reach the fleet is refused (and not made here either).
 *  - ember__rules_fleet_start follows the topic whole, from its beginning
 *    at every start (shared.h), and hands each record to
 *    ember__alerts_rule_sync: a rule added, changed or deleted on another
 *    collector (or on this one before a restart) is so here too. A record
 *    that is not a valid rule is counted and logged, never applied.
 *
 * Thread-safety: share from any thread (the engine serialises API
 * changes); records are applied on the follower's thread. */
#ifndef EMBER_COLLECTOR_RULES_FLEET_H
#define EMBER_COLLECTOR_RULES_FLEET_H

#include <stddef.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "alerts.h"
#include "ember/kafka.h"
#include "ember/metrics.h"
#include "shared.h"

typedef struct ember__rules_fleet {
  const char *group;        /* the ingest group (borrowed; outlives the follower) */
  int timeout_ms;           /* how long share waits for the broker; 0 = 10 s */
  ember__alerts_t *alerts;  /* borrowed */
  ember_metric_t *messages; /* records read; may be NULL */
  ember_metric_t *errors;   /* records refused; may be NULL */
  ember__shared_t *shared;  /* ember.rules; NULL until started */
} ember__rules_fleet_t;

/* The engine's share hook (ctx: an ember__rules_fleet_t). 0, EMBER_EKAFKA
 * or EMBER_ETIMEDOUT with a sentence in err, -ENOMEM. */
int ember__rules_fleet_share(void *ctx, const char *name, const json_t *rule, char *err,
                             size_t err_size);
/* Make the producer and follow ember.rules into f->alerts (set
 * timeout_ms, alerts and the metrics first). 0, EMBER_EKAFKA, -EAGAIN,
 * -ENOMEM, with a sentence in err. */
int ember__rules_fleet_start(ember__rules_fleet_t *f, ember_kafka_t *kafka, char *err,
                             size_t err_size);
/* Stop following, destroy the producer (NULL or not started: no-op). */
void ember__rules_fleet_stop(ember__rules_fleet_t *f);

#endif
