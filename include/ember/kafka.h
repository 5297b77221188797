/* Kafka: the one place that builds producer and consumer configuration, and
 * the embedded mode that runs without a broker.
 *
 * Every Ember binary talks to Kafka through an ember_kafka_t made from its
 * config. With `brokers = embedded` it starts librdkafka's mock cluster in
 * this process (one broker on a random 127.0.0.1 port, data in memory), so
 * `ember up` and fast tests need no broker; other processes may connect to
 * it while its owner lives. Everything else is the same code against a real
 * cluster: only `brokers` changes.
 *
 * Config keys (all optional):
 *   brokers            "host:port,..." or "embedded" (default "embedded")
 *   client_id          default "ember"
 *   topic_partitions   partitions of topics Ember creates (default 4)
 *   kafka.<property>   any librdkafka property, passed through after Ember's
 *                      defaults, so security settings (kafka.security.protocol,
 *                      kafka.sasl.mechanisms, kafka.ssl.ca.location, ...) and
 *                      tuning reach both producers and consumers.
 *   kafka.sasl.password_file
 *                      Ember's own key: the first line of this file is used
 *                      as kafka.sasl.password (set one of the two), so the
 *                      password need be in no config file or command line.
 *
 * Producer defaults: compression.codec=zstd, enable.idempotence=true,
 * acks=all, linger.ms=100. Consumer defaults: enable.auto.commit=false (the
 * caller commits after its own durable write), auto.offset.reset=earliest,
 * session.timeout.ms=10000. librdkafka's log lines go to ember_log.
 *
 * Thread-safety: an ember_kafka_t is read-only after ember_kafka_new and may
 * be shared; the rd_kafka_t handles it makes are librdkafka's (thread-safe).
 */
#ifndef EMBER_KAFKA_H
#define EMBER_KAFKA_H

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdbool.h>

#include "ember/config.h"
#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_TOPIC_PROFILES     "ember.profiles"
#define EMBER_TOPIC_PROFILES_DLQ "ember.profiles.dlq"
#define EMBER_TOPIC_TARGETS      "ember.targets"
#define EMBER_TOPIC_COMMANDS     "ember.commands"
#define EMBER_TOPIC_EVENTS       "ember.events"
#define EMBER_TOPIC_ALERTS       "ember.alerts"
#define EMBER_TOPIC_COLLECTORS   "ember.collectors"
/* Alert rules added through any collector's API, for every collector
 * (compacted; key = the rule's name; an empty value deletes it). */
#define EMBER_TOPIC_RULES "ember.rules"
/* Source maps uploaded to any collector, for every collector (compacted;
 * key = worker, version and script; collector/srcmaps.h). Its records are
 * up to 16 MiB: the topic is made with max.message.bytes to match. */
#define EMBER_TOPIC_SOURCEMAPS "ember.sourcemaps"

/* The config keys this module reads, for ember_config_check() lists. */
#define EMBER_KAFKA_CONFIG_KEYS "brokers", "client_id", "topic_partitions", "kafka."

typedef struct ember_kafka ember_kafka_t;

/* Read the config (borrowed; not kept) and, for `embedded`, start the mock
 * cluster and create Ember's topics in it. Returns 0, EMBER_ECONFIG (a bad
 * key or value, named in errbuf), EMBER_EKAFKA, -ENOMEM. */
EMBER_API int ember_kafka_new(const ember_config_t *cfg, ember_kafka_t **out, char *errbuf,
                              size_t errbuf_size);
/* Stops the embedded cluster, if any: free it after the handles it made. */
EMBER_API void ember_kafka_free(ember_kafka_t *k);

EMBER_API bool ember_kafka_is_embedded(const ember_kafka_t *k);
/* The bootstrap list in use (for embedded, the mock cluster's address).
 * Borrowed until ember_kafka_free. */
EMBER_API const char *ember_kafka_brokers(const ember_kafka_t *k);
/* The mock cluster (for tests that inject errors), or NULL. */
EMBER_API rd_kafka_mock_cluster_t *ember_kafka_mock(const ember_kafka_t *k);

/* A new librdkafka configuration with Ember's defaults for a producer, or
 * for a consumer in `group_id`, and the pass-through properties. The caller
 * owns *out (add callbacks, then hand it to rd_kafka_new, which takes it). */
EMBER_API int ember_kafka_producer_conf(const ember_kafka_t *k, rd_kafka_conf_t **out, char *errbuf,
                                        size_t errbuf_size);
EMBER_API int ember_kafka_consumer_conf(const ember_kafka_t *k, const char *group_id,
                                        rd_kafka_conf_t **out, char *errbuf, size_t errbuf_size);

/* A delivery report callback (rd_kafka_conf_set_dr_msg_cb) for producers
 * whose messages carry an atomic_int as their opaque (RD_KAFKA_V_OPAQUE):
 * set to 0 when the message was delivered, else to -(its error). Messages
 * without an opaque are ignored. Runs in whichever thread polls. */
EMBER_API void ember_kafka_dr_status(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);

/* Make a producer from `conf` (NULL: the defaults). Takes ownership of conf
 * whatever the result. */
EMBER_API int ember_kafka_producer_new(const ember_kafka_t *k, rd_kafka_conf_t *conf,
                                       rd_kafka_t **out, char *errbuf, size_t errbuf_size);
/* Make a consumer in `group_id` from `conf` (NULL: the defaults), subscribed
 * to `ntopics` topics. Takes ownership of conf. */
EMBER_API int ember_kafka_consumer_new(const ember_kafka_t *k, const char *group_id,
                                       rd_kafka_conf_t *conf, const char *const *topics,
                                       size_t ntopics, rd_kafka_t **out, char *errbuf,
                                       size_t errbuf_size);

/* How long a daemon waits at start for the cluster to accept or refuse it
 * (ember_kafka_check_startup). */
#define EMBER_KAFKA_STARTUP_CHECK_MS 10000

/* Connect to the cluster once (a metadata request from a short-lived
 * client with the pass-through security settings) and wait at most
 * timeout_ms for a broker to answer or to refuse the credentials.
 * Returns 0 when a broker answered, and also when none could be reached or
 * none answered in time (an outage is not a misconfiguration: that is
 * logged as a warning and the callers ride it out as before); returns
 * EMBER_EKAFKA when a broker refused the login (RD_KAFKA_RESP_ERR__
 * AUTHENTICATION), with one sentence in errbuf naming the user, the
 * mechanism, the brokers and librdkafka's reason, never the password.
 * Embedded: returns 0 at once. */
EMBER_API int ember_kafka_check_auth(const ember_kafka_t *k, int timeout_ms, char *errbuf,
                                     size_t errbuf_size);
/* ember_kafka_check_auth for a daemon's main(), from its config (borrowed):
 * makes a short-lived ember_kafka_t, checks, frees it. With `brokers =
 * embedded` returns 0 at once (no mock cluster is started). Also returns
 * ember_kafka_new's errors. */
EMBER_API int ember_kafka_check_startup(const ember_config_t *cfg, int timeout_ms, char *errbuf,
                                        size_t errbuf_size);

/* Create Ember's topics where they do not exist yet (ember.targets and
 * ember.collectors compacted, the rest deleted by time), waiting at most timeout_ms. Topics
 * that exist are left as they are. Returns 0, EMBER_ETIMEDOUT or
 * EMBER_EKAFKA with the broker's reason in errbuf. */
EMBER_API int ember_kafka_ensure_topics(const ember_kafka_t *k, int timeout_ms, char *errbuf,
                                        size_t errbuf_size);

#ifdef __cplusplus
}
#endif
#endif
