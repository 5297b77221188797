/* Kafka configuration and the embedded mock cluster. See ember/kafka.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "ember/kafka.h"
#include "ember/log.h"

struct ember_kafka {
  char *brokers;
  char *client_id;
  unsigned partitions;
  char **passthrough; /* key, value pairs */
  size_t npassthrough;
  rd_kafka_t *mock_rk; /* owns the mock cluster */
  rd_kafka_mock_cluster_t *mock;
};

static const struct {
  const char *name;
  bool compact;
} ember_topics[] = {
    {EMBER_TOPIC_PROFILES, false}, {EMBER_TOPIC_PROFILES_DLQ, false}, {EMBER_TOPIC_TARGETS, true},
    {EMBER_TOPIC_COMMANDS, false}, {EMBER_TOPIC_EVENTS, false},       {EMBER_TOPIC_ALERTS, false},
};
#define EMBER_NTOPICS (sizeof ember_topics / sizeof ember_topics[0])

static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  /* librdkafka uses syslog levels; it reports broker outages at LOG_ERR and
   * LOG_WARNING, which we keep, and chatters at LOG_DEBUG and LOG_INFO. */
  ember_log_level_t l = level <= LOG_ERR       ? EMBER_LOG_ERROR
                        : level <= LOG_WARNING ? EMBER_LOG_WARN
                        : level <= LOG_INFO    ? EMBER_LOG_INFO
                                               : EMBER_LOG_DEBUG;
  ember_log(l, "kafka", "%s: %s", fac, buf);
}

static int collect_passthrough(void *ctx, const char *key, const char *value) {
  ember_kafka_t *k = ctx;
  char **pt = ember_realloc(k->passthrough, (k->npassthrough + 1) * 2 * sizeof *pt);
  if (pt == NULL) return -ENOMEM;
  k->passthrough = pt;
  pt[2 * k->npassthrough] = ember_strdup(key);
  pt[2 * k->npassthrough + 1] = ember_strdup(value);
  k->npassthrough++;
  if (pt[2 * k->npassthrough - 2] == NULL || pt[2 * k->npassthrough - 1] == NULL) return -ENOMEM;
  return 0;
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *errbuf,
                    size_t errbuf_size, bool user) {
  char err[256];
  if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) {
    /* The value is not repeated: it may be a password (kafka.sasl.password). */
    snprintf(errbuf, errbuf_size, "%s '%s%s': %s", user ? "config key" : "Kafka property",
             user ? "kafka." : "", key, err);
    return EMBER_ECONFIG;
  }
  return 0;
}

/* The settings every client shares, then the user's pass-through. */
static int base_conf(const ember_kafka_t *k, rd_kafka_conf_t **out, const char *const *defaults,
                     char *errbuf, size_t errbuf_size) {
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  if (conf == NULL) return -ENOMEM;
  int rc = conf_set(conf, "bootstrap.servers", k->brokers, errbuf, errbuf_size, false);
  if (rc == 0) rc = conf_set(conf, "client.id", k->client_id, errbuf, errbuf_size, false);
  for (size_t i = 0; rc == 0 && defaults[i] != NULL; i += 2)
    rc = conf_set(conf, defaults[i], defaults[i + 1], errbuf, errbuf_size, false);
  for (size_t i = 0; rc == 0 && i < k->npassthrough; i++)
    rc =
        conf_set(conf, k->passthrough[2 * i], k->passthrough[2 * i + 1], errbuf, errbuf_size, true);
  if (rc != 0) {
    rd_kafka_conf_destroy(conf);
    return rc;
  }
  rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
  *out = conf;
  return 0;
}

/* Every client reconnects within 2 s of a broker's return (librdkafka's
 * default back-off grows to 10 s during a long outage, which delays the
 * agent's spool replay by as much). */
#define EMBER_KAFKA_COMMON_DEFAULTS "reconnect.backoff.max.ms", "2000"

int ember_kafka_producer_conf(const ember_kafka_t *k, rd_kafka_conf_t **out, char *errbuf,
                              size_t errbuf_size) {
  static const char *const defaults[] = {EMBER_KAFKA_COMMON_DEFAULTS,
                                         "compression.codec",
                                         "zstd",
                                         "enable.idempotence",
                                         "true",
                                         "acks",
                                         "all",
                                         "linger.ms",
                                         "100",
                                         NULL};
  if (k == NULL || out == NULL) return -EINVAL;
  return base_conf(k, out, defaults, errbuf, errbuf_size);
}

int ember_kafka_consumer_conf(const ember_kafka_t *k, const char *group_id, rd_kafka_conf_t **out,
                              char *errbuf, size_t errbuf_size) {
  /* session.timeout.ms stays above the mock cluster's fixed 3 s first join,
   * or a group never forms there (GROUNDWORK.md). */
  static const char *const defaults[] = {EMBER_KAFKA_COMMON_DEFAULTS,
                                         "enable.auto.commit",
                                         "false",
                                         "auto.offset.reset",
                                         "earliest",
                                         "session.timeout.ms",
                                         "10000",
                                         "enable.partition.eof",
                                         "false",
                                         NULL};
  if (k == NULL || group_id == NULL || out == NULL) return -EINVAL;
  rd_kafka_conf_t *conf = NULL;
  int rc = base_conf(k, &conf, defaults, errbuf, errbuf_size);
  if (rc != 0) return rc;
  rc = conf_set(conf, "group.id", group_id, errbuf, errbuf_size, false);
  if (rc != 0) {
    rd_kafka_conf_destroy(conf);
    return rc;
  }
  *out = conf;
  return 0;
}

static int client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, rd_kafka_t **out, char *errbuf,
                      size_t errbuf_size) {
  char err[512];
  rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
  if (rk == NULL) {
    rd_kafka_conf_destroy(conf);
    snprintf(errbuf, errbuf_size, "cannot create Kafka %s: %s",
             type == RD_KAFKA_PRODUCER ? "producer" : "consumer", err);
    return EMBER_EKAFKA;
  }
  *out = rk;
  return 0;
}

int ember_kafka_producer_new(const ember_kafka_t *k, rd_kafka_conf_t *conf, rd_kafka_t **out,
                             char *errbuf, size_t errbuf_size) {
  if (k == NULL || out == NULL) {
    if (conf) rd_kafka_conf_destroy(conf);
    return -EINVAL;
  }
  if (conf == NULL) {
    int rc = ember_kafka_producer_conf(k, &conf, errbuf, errbuf_size);
    if (rc != 0) return rc;
  }
  return client_new(RD_KAFKA_PRODUCER, conf, out, errbuf, errbuf_size);
}

int ember_kafka_consumer_new(const ember_kafka_t *k, const char *group_id, rd_kafka_conf_t *conf,
                             const char *const *topics, size_t ntopics, rd_kafka_t **out,
                             char *errbuf, size_t errbuf_size) {
  if (k == NULL || group_id == NULL || topics == NULL || ntopics == 0 || out == NULL ||
      ntopics > INT32_MAX) {
    if (conf) rd_kafka_conf_destroy(conf);
    return -EINVAL;
  }
  if (conf == NULL) {
    int rc = ember_kafka_consumer_conf(k, group_id, &conf, errbuf, errbuf_size);
    if (rc != 0) return rc;
  }
  rd_kafka_t *rk = NULL;
  int rc = client_new(RD_KAFKA_CONSUMER, conf, &rk, errbuf, errbuf_size);
  if (rc != 0) return rc;
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)ntopics);
  for (size_t i = 0; i < ntopics; i++)
    rd_kafka_topic_partition_list_add(list, topics[i], RD_KAFKA_PARTITION_UA);
  rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, list);
  rd_kafka_topic_partition_list_destroy(list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(errbuf, errbuf_size, "cannot subscribe: %s", rd_kafka_err2str(err));
    rd_kafka_destroy(rk);
    return EMBER_EKAFKA;
  }
  *out = rk;
  return 0;
}

static int start_embedded(ember_kafka_t *k, char *errbuf, size_t errbuf_size) {
  /* The mock cluster lives inside a client handle: with
   * test.mock.num.brokers that handle makes the cluster itself (and talks
   * to it, so librdkafka does not warn of a handle with no brokers). A
   * producer that never produces is the lightest owner. */
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  if (conf == NULL) return -ENOMEM;
  rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
  int rc = conf_set(conf, "test.mock.num.brokers", "1", errbuf, errbuf_size, false);
  if (rc != 0) {
    rd_kafka_conf_destroy(conf);
    return rc;
  }
  rc = client_new(RD_KAFKA_PRODUCER, conf, &k->mock_rk, errbuf, errbuf_size);
  if (rc != 0) return rc;
  k->mock = rd_kafka_handle_mock_cluster(k->mock_rk);
  if (k->mock == NULL) {
    snprintf(errbuf, errbuf_size, "cannot start the embedded Kafka (mock cluster)");
    return EMBER_EKAFKA;
  }
  ember_free(k->brokers);
  k->brokers = ember_strdup(rd_kafka_mock_cluster_bootstraps(k->mock));
  if (k->brokers == NULL) return -ENOMEM;
  for (size_t i = 0; i < EMBER_NTOPICS; i++) {
    rd_kafka_resp_err_t err =
        rd_kafka_mock_topic_create(k->mock, ember_topics[i].name, (int)k->partitions, 1);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      snprintf(errbuf, errbuf_size, "embedded Kafka: cannot create topic %s: %s",
               ember_topics[i].name, rd_kafka_err2str(err));
      return EMBER_EKAFKA;
    }
  }
  EMBER_INFO("kafka", "embedded Kafka (mock cluster) listening on %s", k->brokers);
  return 0;
}

int ember_kafka_new(const ember_config_t *cfg, ember_kafka_t **out, char *errbuf,
                    size_t errbuf_size) {
  if (cfg == NULL || out == NULL) return -EINVAL;
  ember_kafka_t *k = ember_calloc(1, sizeof *k);
  if (k == NULL) return -ENOMEM;
  uint64_t parts;
  int rc = ember_config_get_u64(cfg, "topic_partitions", 4, 1, 1024, &parts, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  k->partitions = (unsigned)parts;
  const char *brokers = ember_config_get_str(cfg, "brokers", "embedded");
  if (brokers[0] == '\0') {
    snprintf(errbuf, errbuf_size, "config key 'brokers' is empty (use host:port or embedded)");
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  k->brokers = ember_strdup(brokers);
  k->client_id = ember_strdup(ember_config_get_str(cfg, "client_id", "ember"));
  rc = -ENOMEM;
  if (k->brokers == NULL || k->client_id == NULL) goto cleanup;
  rc = ember_config_each(cfg, "kafka.", collect_passthrough, k);
  if (rc != 0) goto cleanup;
  /* Check the pass-through keys now, so a typo fails at start-up with the
   * key's name rather than when the first client is made. */
  rd_kafka_conf_t *probe = NULL;
  rc = ember_kafka_consumer_conf(k, "probe", &probe, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  rd_kafka_conf_destroy(probe);
  rc = ember_kafka_producer_conf(k, &probe, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  rd_kafka_conf_destroy(probe);
  if (strcmp(brokers, "embedded") == 0) {
    rc = start_embedded(k, errbuf, errbuf_size);
    if (rc != 0) goto cleanup;
  }
  *out = k;
  k = NULL;
cleanup:
  if (rc == -ENOMEM) snprintf(errbuf, errbuf_size, "out of memory");
  ember_kafka_free(k);
  return rc;
}

void ember_kafka_free(ember_kafka_t *k) {
  if (k == NULL) return;
  /* The mock cluster belongs to its handle and goes with it. */
  if (k->mock_rk != NULL) rd_kafka_destroy(k->mock_rk);
  for (size_t i = 0; i < 2 * k->npassthrough; i++) ember_free(k->passthrough[i]);
  ember_free(k->passthrough);
  ember_free(k->brokers);
  ember_free(k->client_id);
  ember_free(k);
}

bool ember_kafka_is_embedded(const ember_kafka_t *k) { return k != NULL && k->mock != NULL; }
const char *ember_kafka_brokers(const ember_kafka_t *k) { return k ? k->brokers : NULL; }
rd_kafka_mock_cluster_t *ember_kafka_mock(const ember_kafka_t *k) { return k ? k->mock : NULL; }

int ember_kafka_ensure_topics(const ember_kafka_t *k, int timeout_ms, char *errbuf,
                              size_t errbuf_size) {
  if (k == NULL || timeout_ms <= 0) return -EINVAL;
  if (k->mock != NULL) return 0; /* created at start; the mock has no CreateTopics */
  rd_kafka_t *rk = NULL;
  rd_kafka_queue_t *q = NULL;
  rd_kafka_AdminOptions_t *opts = NULL;
  rd_kafka_event_t *ev = NULL;
  rd_kafka_NewTopic_t *nt[EMBER_NTOPICS] = {NULL};
  rd_kafka_conf_t *conf = NULL;
  static const char *const none[] = {NULL};
  int rc = base_conf(k, &conf, none, errbuf, errbuf_size);
  if (rc != 0) return rc;
  rc = client_new(RD_KAFKA_PRODUCER, conf, &rk, errbuf, errbuf_size);
  if (rc != 0) return rc;
  char err[256];
  for (size_t i = 0; i < EMBER_NTOPICS; i++) {
    /* Replication -1: the broker's default.replication.factor. */
    nt[i] = rd_kafka_NewTopic_new(ember_topics[i].name, (int)k->partitions, -1, err, sizeof err);
    if (nt[i] == NULL) {
      snprintf(errbuf, errbuf_size, "topic %s: %s", ember_topics[i].name, err);
      rc = EMBER_EKAFKA;
      goto cleanup;
    }
    if (ember_topics[i].compact) rd_kafka_NewTopic_set_config(nt[i], "cleanup.policy", "compact");
  }
  q = rd_kafka_queue_new(rk);
  opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
  rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, err, sizeof err);
  rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, err, sizeof err);
  rd_kafka_CreateTopics(rk, nt, EMBER_NTOPICS, opts, q);
  ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
  if (ev == NULL) {
    snprintf(errbuf, errbuf_size, "creating topics: no answer from %s in %d ms", k->brokers,
             timeout_ms);
    rc = EMBER_ETIMEDOUT;
    goto cleanup;
  }
  if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(errbuf, errbuf_size, "creating topics: %s", rd_kafka_event_error_string(ev));
    rc = rd_kafka_event_error(ev) == RD_KAFKA_RESP_ERR__TIMED_OUT ? EMBER_ETIMEDOUT : EMBER_EKAFKA;
    goto cleanup;
  }
  const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
  size_t n = 0;
  const rd_kafka_topic_result_t **tr = rd_kafka_CreateTopics_result_topics(res, &n);
  for (size_t i = 0; i < n; i++) {
    rd_kafka_resp_err_t e = rd_kafka_topic_result_error(tr[i]);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
      EMBER_INFO("kafka", "created topic %s", rd_kafka_topic_result_name(tr[i]));
    } else if (e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      snprintf(errbuf, errbuf_size, "creating topic %s: %s", rd_kafka_topic_result_name(tr[i]),
               rd_kafka_topic_result_error_string(tr[i]));
      rc = EMBER_EKAFKA;
      goto cleanup;
    }
  }
cleanup:
  if (ev) rd_kafka_event_destroy(ev);
  if (opts) rd_kafka_AdminOptions_destroy(opts);
  if (q) rd_kafka_queue_destroy(q);
  for (size_t i = 0; i < EMBER_NTOPICS; i++) {
    if (nt[i]) rd_kafka_NewTopic_destroy(nt[i]);
  }
  rd_kafka_destroy(rk);
  return rc;
}
