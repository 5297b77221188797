/* This collector as one member of the fleet (docs/internals/fleet.md):
 * its announcements and the peer table (fleet.h), its store's shards
 * (shards.h) with the rule applied against what the peers of its group
 * announce, and the options fleet queries run with (fleetq.h).
 * collector.c embeds one: the API gets `fleet` and `fleetq`, the ingest
 * thread `shards`.
 *
 * Life: ember__member_init (the config; before the API, which answers
 * through fleetq), ember__member_start (once the store, the Kafka handles
 * and the API's port exist: the shards, then the announcing thread, whose
 * callback runs the rule and reads the store's runs), ember__member_stop
 * (after the last batch was stored, before the ingest consumer is
 * destroyed), ember__member_free (safe after a failed init or start).
 *
 * Thread-safety: init, start, stop and free on the collector's thread;
 * the fleet's thread calls back into the shards and the store. Errors: 0,
 * EMBER_ECONFIG, EMBER_EKAFKA, -EAGAIN, -ENOMEM, with a sentence in err. */
#ifndef EMBER_COLLECTOR_MEMBER_H
#define EMBER_COLLECTOR_MEMBER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/metrics.h"
#include "ember/store.h"
#include "fleet.h"
#include "fleetq.h"
#include "shards.h"

/* fleet.peer_timeout and fleet.replicas; fleet.h reads the rest. */
#define EMBER__MEMBER_CONFIG_KEYS "fleet.peer_timeout", "fleet.replicas"

typedef struct ember__member {
  ember__fleet_t *fleet;   /* announcements and the peer table */
  ember__shards_t *shards; /* NULL until started */
  ember__fleetq_t fleetq;  /* its options point into the fields below */
  ember_store_t *store;    /* borrowed, from start */
  ember_metrics_t *metrics;
  char *token;     /* api.token, sent to peers */
  char **replicas; /* fleet.replicas, split at commas */
  size_t nreplicas;
  bool curl_inited;
} ember__member_t;

/* Read the config and make the (not yet started) fleet, its metrics in
 * `metrics` (borrowed; outlives the member). */
int ember__member_init(ember__member_t *m, const ember_config_t *cfg, ember_metrics_t *metrics,
                       char *err, size_t n);
/* The shards under this collector's id (collector_id, defaulting from
 * api_port), then the announcements. `group_id` is the ingest group;
 * `producer` and `consumer` are borrowed (fleet.h says how long). */
int ember__member_start(ember__member_t *m, const ember_config_t *cfg, ember_store_t *store,
                        ember_kafka_t *kafka, rd_kafka_t *producer, rd_kafka_t *consumer,
                        const char *group_id, uint16_t api_port, char *err, size_t n);
/* The runs of `store` as announcements carry them (*out the caller's,
 * ember_free). 0, a store error, -ENOMEM. */
int ember__member_store_runs(ember_store_t *store, ember_collector_run_t **out, size_t *count);
/* The last announcement (flushed for at most flush_ms). */
void ember__member_stop(ember__member_t *m, int flush_ms);
void ember__member_free(ember__member_t *m);

#endif
