/* ember-collector: Kafka ingest into the store, the target registry and the
 * HTTP API, in one process (docs/internals/collector.md).
 *
 *   ingest thread:   ember.profiles (consumer group) -> decode + validate ->
 *                    one LMDB write transaction per batch -> DLQ copies of
 *                    malformed messages delivered -> offsets committed.
 *                    It is the store's only writer in this process; it also
 *                    runs retention between batches.
 *   registry thread: ember.targets (every partition, from the beginning, no
 *                    group) -> which host runs which worker, version, actor.
 *   API threads:     libmicrohttpd (collector/api.h).
 *
 * Delivery: at-least-once from Kafka, exactly-once into the store. Offsets
 * are committed only after the batch's LMDB commit (and after its DLQ
 * copies were acknowledged by the broker), so a crash at any moment replays
 * at most the uncommitted messages; the store drops what it already holds
 * by (agent_id, seq). */
#ifndef EMBER_COLLECTOR_COLLECTOR_H
#define EMBER_COLLECTOR_COLLECTOR_H

#include <stddef.h>
#include <stdint.h>

#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/store.h"
#include "registry.h"

typedef struct ember__collector ember__collector_t;

/* Every key the collector reads (its own, Kafka's and the API's), for
 * ember_config_check. NULL-terminated. */
extern const char *const ember__collector_config_keys[];

/* Start ingest, registry and API. `kafka` (borrowed, may be NULL: made from
 * cfg) must outlive the collector. The store is opened at
 * `<data_dir>/store.lmdb` (config `data_dir`). Threads are started with
 * every signal blocked, so signals reach whoever waits for them. Returns 0,
 * EMBER_ECONFIG, EMBER_EKAFKA or -errno with a sentence in errbuf. */
int ember__collector_start(const ember_config_t *cfg, ember_kafka_t *kafka,
                           ember__collector_t **out, char *errbuf, size_t errbuf_size);

/* The API's bound port (for tests using api.listen=127.0.0.1:0). */
uint16_t ember__collector_api_port(const ember__collector_t *c);

/* Stop cleanly: the API stops taking requests, the ingest thread finishes
 * the batch in hand (store write, DLQ, offset commit) and leaves the group,
 * the registry stops. Frees everything. NULL is a no-op. */
void ember__collector_stop(ember__collector_t *c);

/* Read alerts.rules again (SIGHUP); on an error the rules in force stay
 * (logged). Returns 0 or the error. */
int ember__collector_reload(ember__collector_t *c);

/* ember-collector's main: start, wait for SIGTERM/SIGINT, stop. Returns 0
 * after a clean shutdown or an error with a sentence already logged. */
int ember__collector_run(const ember_config_t *cfg);

#endif
