/* The fleet: this collector announcing itself on ember.collectors and
 * knowing its peers (docs/internals/collector.md, "Announcements";
 * issue 13).
 *
 *   announcer:  every fleet.announce_interval (5 s), and as soon as the
 *               ingest consumer's assignment changes, one CollectorInfo
 *               record keyed by collector_id: id, group, API URL, the
 *               partitions of ember.profiles assigned now, and the runs
 *               the `runs` callback gives; at a clean stop a last record
 *               with stopping set, flushed.
 *   peer table: ember.collectors followed whole (follow.h: from the
 *               beginning, own group, never committed) into peers.h's
 *               table, this collector's own records included.
 *
 * Both run on one thread (the follower's): announcing is a non-blocking
 * produce, and the thread also serves the shared producer's delivery
 * reports (rd_kafka_poll). Records go through the collector's producer
 * (the DLQ's, idempotent, acks=all); its delivery callback must store the
 * result in the message's opaque as an atomic_int (0 delivered, else
 * -rd_kafka_resp_err_t), as collector.c's does.
 *
 * Metrics: ember_fleet_peers, ember_fleet_peers_live (gauges; self
 * included), ember_fleet_announcements_total, ember_fleet_announce_errors_total
 * (refused by the producer, failed delivery, or a record that could not
 * be made whole), ember_fleet_malformed_total (ember.collectors records
 * refused; logged rate-limited).
 *
 * Thread-safety: new/start/stop/free from one thread; list from any. */
#ifndef EMBER_COLLECTOR_FLEET_H
#define EMBER_COLLECTOR_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/metrics.h"
#include "peers.h"

typedef struct ember__fleet ember__fleet_t;

/* The config keys the fleet reads, for ember_config_check lists. */
#define EMBER__FLEET_CONFIG_KEYS "collector_id", "fleet.advertise_url", "fleet.announce_interval"

typedef struct ember__fleet_config {
  char id[EMBER_COLLECTOR_MAX_ID + 1];       /* collector_id: "<hostname>:<api port>" */
  char api_url[EMBER_COLLECTOR_MAX_URL + 1]; /* fleet.advertise_url: "http://<hostname>:<port>" */
  int64_t interval_ns;                       /* fleet.announce_interval: 5 s, 100 ms .. 1 h */
} ember__fleet_config_t;

/* Read the fleet's keys, with defaults from this host's name and the API's
 * bound port. Returns 0 or EMBER_ECONFIG with a sentence naming the key. */
int ember__fleet_read_config(const ember_config_t *cfg, uint16_t api_port,
                             ember__fleet_config_t *out, char *errbuf, size_t errbuf_size);

/* This collector's runs for its next record: *out (ember_malloc'd; the
 * fleet frees it with ember_free) holds *count runs, ascending by
 * (partition, start), or NULL / 0. Returns 0 or an error (the record then
 * goes out without runs, logged and counted). Called on the fleet's
 * thread. */
typedef int (*ember__fleet_runs_fn)(void *ctx, ember_collector_run_t **out, size_t *count);

typedef struct ember__fleet_opts {
  ember_kafka_t *kafka; /* borrowed; must outlive the fleet's thread */
  rd_kafka_t *producer; /* borrowed; see above; must outlive ember__fleet_free */
  rd_kafka_t *consumer; /* the ingest consumer (borrowed): its assignment of ember.profiles is
                           announced; must outlive ember__fleet_stop. NULL = none. */
  const char *group_id; /* the ingest group (copied) */
  ember__fleet_config_t config;
  ember__fleet_runs_fn runs; /* NULL = no runs */
  void *runs_ctx;            /* borrowed; must outlive ember__fleet_stop */
} ember__fleet_opts_t;

/* The fleet with its (empty) table and its metrics registered in `metrics`
 * (may be NULL), so the API can be given it before it starts. 0, -EINVAL,
 * -ENOMEM. */
int ember__fleet_new(ember_metrics_t *metrics, ember__fleet_t **out);

/* Start following ember.collectors and announcing (the first record goes
 * out at once). Returns 0, EMBER_ECONFIG (a group_id the record refuses),
 * EMBER_EKAFKA, -EAGAIN, -ENOMEM, with a sentence in errbuf. Once only. */
int ember__fleet_start(ember__fleet_t *f, const ember__fleet_opts_t *o, char *errbuf,
                       size_t errbuf_size);

/* A clean stop: end the thread, announce the last record (stopping, no
 * partitions, the runs as they are now), flush the producer for at most
 * flush_ms, stop following. Call before the ingest consumer is destroyed
 * and after its last batch was stored. Not started or NULL: no-op. */
void ember__fleet_stop(ember__fleet_t *f, int flush_ms);

/* Free the fleet; one that was started and not stopped stops following
 * without a last record. After the producer's last use. NULL is a no-op. */
void ember__fleet_free(ember__fleet_t *f);

/* A copy of the peer table judged now (peers.h: sorted by id, self marked).
 * Free with ember__peers_list_free. 0, -EINVAL, -ENOMEM. */
int ember__fleet_list(ember__fleet_t *f, int64_t now_ns, ember__peer_t **out, size_t *count);

/* The table itself, for fan-out (borrowed; lives as long as the fleet). */
ember__peers_t *ember__fleet_peers(ember__fleet_t *f);

/* This collector's id ("" before start). Borrowed. */
const char *ember__fleet_id(const ember__fleet_t *f);

#endif
