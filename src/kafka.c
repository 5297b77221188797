/* Kafka configuration and the embedded mock cluster. See ember/kafka.h. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

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

/* delete_retention: how long a compacted topic keeps a deletion (its
 * tombstone); NULL = the broker's default (1 day). A collector that is
 * down for longer misses the deletions made meanwhile. max_message: the
 * topic's max.message.bytes; NULL = the broker's (1 MiB). */
static const struct {
  const char *name;
  bool compact;
  const char *delete_retention, *max_message;
} ember_topics[] = {
    {EMBER_TOPIC_PROFILES, false, NULL, NULL},
    {EMBER_TOPIC_PROFILES_DLQ, false, NULL, NULL},
    {EMBER_TOPIC_TARGETS, true, NULL, NULL},
    {EMBER_TOPIC_COMMANDS, false, NULL, NULL},
    {EMBER_TOPIC_EVENTS, false, NULL, NULL},
    {EMBER_TOPIC_ALERTS, false, NULL, NULL},
    {EMBER_TOPIC_COLLECTORS, true, NULL, NULL},
    {EMBER_TOPIC_RULES, true, "2592000000", NULL}, /* 30 days */
    /* 30 days, and a 16 MiB map with its key and batch. */
    {EMBER_TOPIC_SOURCEMAPS, true, "2592000000", "16842752"},
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

/* The pass-through value of librdkafka property `key`, or NULL. */
static const char *passthrough_get(const ember_kafka_t *k, const char *key) {
  const char *v = NULL;
  for (size_t i = 0; i < k->npassthrough; i++) {
    if (strcmp(k->passthrough[2 * i], key) == 0) v = k->passthrough[2 * i + 1];
  }
  return v;
}

/* kafka.sasl.password_file: Ember's own key, not librdkafka's. The file's
 * first line becomes sasl.password, so the password need not be in the
 * config file or on a command line (where ps shows it). */
#define EMBER_KAFKA_PASSWORD_FILE "sasl.password_file"
#define EMBER_KAFKA_PASSWORD_MAX  4096

static int read_password_file(ember_kafka_t *k, size_t i, char *errbuf, size_t errbuf_size) {
  const char *path = k->passthrough[2 * i + 1];
  if (passthrough_get(k, "sasl.password") != NULL) {
    snprintf(errbuf, errbuf_size,
             "config keys 'kafka.sasl.password' and 'kafka.%s' are both set; keep one",
             EMBER_KAFKA_PASSWORD_FILE);
    return EMBER_ECONFIG;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    int e = errno;
    snprintf(errbuf, errbuf_size, "config key 'kafka.%s': cannot open %s: %s",
             EMBER_KAFKA_PASSWORD_FILE, path, strerror(e));
    return EMBER_ECONFIG;
  }
  char buf[EMBER_KAFKA_PASSWORD_MAX + 1];
  size_t n = 0;
  ssize_t r = 0;
  do {
    r = read(fd, buf + n, sizeof buf - n);
    if (r > 0) n += (size_t)r;
  } while ((r > 0 && n < sizeof buf) || (r < 0 && errno == EINTR));
  int e = r < 0 ? errno : 0;
  close(fd);
  if (e != 0 || n > EMBER_KAFKA_PASSWORD_MAX) {
    snprintf(errbuf, errbuf_size, "config key 'kafka.%s': cannot read %s: %s",
             EMBER_KAFKA_PASSWORD_FILE, path, e != 0 ? strerror(e) : "longer than 4096 bytes");
    return EMBER_ECONFIG;
  }
  buf[n] = '\0';
  buf[strcspn(buf, "\r\n")] = '\0';
  if (buf[0] == '\0') {
    snprintf(errbuf, errbuf_size, "config key 'kafka.%s': %s starts with an empty line",
             EMBER_KAFKA_PASSWORD_FILE, path);
    return EMBER_ECONFIG;
  }
  char *key = ember_strdup("sasl.password");
  char *value = ember_strdup(buf);
  /* The password stays in this process's memory anyway (librdkafka keeps
   * its own copy); the stack copy is wiped so it is not left behind twice. */
  memset(buf, 0, sizeof buf);
  if (key == NULL || value == NULL) {
    ember_free(key);
    ember_free(value);
    return -ENOMEM;
  }
  ember_free(k->passthrough[2 * i]);
  ember_free(k->passthrough[2 * i + 1]);
  k->passthrough[2 * i] = key;
  k->passthrough[2 * i + 1] = value;
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

void ember_kafka_dr_status(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  (void)opaque;
  atomic_int *status = m->_private;
  if (status != NULL) atomic_store(status, m->err == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -(int)m->err);
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
  for (size_t i = 0; i < k->npassthrough; i++) {
    if (strcmp(k->passthrough[2 * i], EMBER_KAFKA_PASSWORD_FILE) == 0) {
      rc = read_password_file(k, i, errbuf, errbuf_size);
      if (rc != 0) goto cleanup;
    }
  }
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
    if (ember_topics[i].delete_retention != NULL)
      rd_kafka_NewTopic_set_config(nt[i], "delete.retention.ms", ember_topics[i].delete_retention);
    if (ember_topics[i].max_message != NULL)
      rd_kafka_NewTopic_set_config(nt[i], "max.message.bytes", ember_topics[i].max_message);
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

/* What the probe client's error callback saw. Written on the polling
 * thread only (rd_kafka_poll serves error_cb there), so no lock. */
typedef struct check_state {
  rd_kafka_resp_err_t auth; /* RD_KAFKA_RESP_ERR__AUTHENTICATION once seen */
  bool all_down;            /* every bootstrap broker failed to connect */
  char auth_reason[512];
  char down_reason[512]; /* the last transport error, for the warning */
} check_state_t;

static void check_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)rk;
  check_state_t *st = opaque;
  if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
    if (st->auth == RD_KAFKA_RESP_ERR_NO_ERROR)
      snprintf(st->auth_reason, sizeof st->auth_reason, "%s", reason);
    st->auth = RD_KAFKA_RESP_ERR__AUTHENTICATION;
  } else if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
    st->all_down = true;
  } else {
    snprintf(st->down_reason, sizeof st->down_reason, "%s", reason);
  }
}

/* The probe's own log lines would repeat what error_cb reports (and what
 * the caller then says in one sentence), so they go to debug. */
static void check_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  (void)level;
  EMBER_DEBUG("kafka", "start-up check: %s: %s", fac, buf);
}

/* librdkafka before 2.6.1 repeats the client nonce in the SCRAM
 * client-final message; Kafka 4 brokers compare it strictly and refuse
 * every such login as if the password were wrong (librdkafka #4895). */
#define EMBER_KAFKA_SCRAM_FIXED_VERSION 0x020601ff

int ember_kafka_check_auth(const ember_kafka_t *k, int timeout_ms, char *errbuf,
                           size_t errbuf_size) {
  if (k == NULL || timeout_ms <= 0) return -EINVAL;
  if (k->mock != NULL) return 0; /* no authentication in the mock */
  check_state_t st = {.auth = RD_KAFKA_RESP_ERR_NO_ERROR};
  rd_kafka_conf_t *conf = NULL;
  static const char *const none[] = {NULL};
  int rc = base_conf(k, &conf, none, errbuf, errbuf_size);
  if (rc != 0) return rc;
  rd_kafka_conf_set_log_cb(conf, check_log_cb);
  rd_kafka_conf_set_error_cb(conf, check_error_cb);
  rd_kafka_conf_set_opaque(conf, &st);
  rd_kafka_t *rk = NULL;
  rc = client_new(RD_KAFKA_PRODUCER, conf, &rk, errbuf, errbuf_size);
  if (rc != 0) return rc;

  /* A metadata request (brokers only) needs a connection that passed TLS
   * and SASL, so its success settles it; until then error_cb says why not.
   * Short requests, so the callbacks are served between them. */
  int64_t deadline = ember_time_mono_ns() + (int64_t)timeout_ms * 1000000;
  bool answered = false;
  while (!answered && st.auth == RD_KAFKA_RESP_ERR_NO_ERROR && !st.all_down) {
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(rk, 0, NULL, &md, 250) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_metadata_destroy(md);
      answered = true;
    }
    rd_kafka_poll(rk, 0);
    if (ember_time_mono_ns() >= deadline) break;
  }
  if (st.auth != RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char *user = passthrough_get(k, "sasl.username");
    const char *mech = passthrough_get(k, "sasl.mechanisms");
    if (mech == NULL) mech = passthrough_get(k, "sasl.mechanism");
    if (mech == NULL) mech = "GSSAPI"; /* librdkafka's default */
    bool scram = strncmp(mech, "SCRAM-", 6) == 0;
    char hint[256] = "";
    if (scram && rd_kafka_version() < EMBER_KAFKA_SCRAM_FIXED_VERSION)
      snprintf(hint, sizeof hint,
               " (note: librdkafka %s, older than 2.6.1, cannot log in with SCRAM to Kafka 4"
               " brokers whatever the password; use PLAIN over TLS or a newer librdkafka)",
               rd_kafka_version_str());
    snprintf(errbuf, errbuf_size, "authentication failed for user '%s' (SASL/%s) at %s: %s%s",
             user ? user : "", mech, k->brokers, st.auth_reason, hint);
    rc = EMBER_EKAFKA;
  } else if (!answered) {
    /* An outage is not a misconfiguration: the callers ride it out. */
    EMBER_WARN("kafka", "no broker at %s answered at start-up (%s); continuing, it is retried",
               k->brokers, st.down_reason[0] ? st.down_reason : "no answer yet");
  }
  rd_kafka_destroy(rk);
  return rc;
}

int ember_kafka_check_startup(const ember_config_t *cfg, int timeout_ms, char *errbuf,
                              size_t errbuf_size) {
  if (cfg == NULL || timeout_ms <= 0) return -EINVAL;
  /* Embedded: nothing to log in to, and no second mock cluster wanted. */
  if (strcmp(ember_config_get_str(cfg, "brokers", "embedded"), "embedded") == 0) return 0;
  ember_kafka_t *k = NULL;
  int rc = ember_kafka_new(cfg, &k, errbuf, errbuf_size);
  if (rc == 0) rc = ember_kafka_check_auth(k, timeout_ms, errbuf, errbuf_size);
  ember_kafka_free(k);
  return rc;
}
