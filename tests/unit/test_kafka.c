/* Kafka helpers: the configuration Ember builds for librdkafka, config
 * errors, and produce/consume round trips through the embedded (mock)
 * cluster, including a produce path with injected broker errors.
 *
 * No real broker is needed; tests/integration/test_kafka_broker.c covers
 * that. The mock cluster's first group join waits a fixed 3 s, so only the
 * two round-trip tests consume. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "common/testutil.h"
#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/parse.h"
#include "ember/log.h"
#include "ember/profile.h"

/* librdkafka does not install its protocol header (rdkafka_protocol.h,
 * where RD_KAFKAP_Produce lives); 0 is the Produce ApiKey on the wire. */
#define TEST_APIKEY_PRODUCE 0

#define TEST_AGENT          "agent-unit"
#define TEST_NWORKERS       5u
#define TEST_WINDOW_BASE_NS INT64_C(1700000000000000000)

/* ------------------------------------------------------------ helpers -- */

/* A config setting: key, value. Lists of them end with {NULL, NULL}. */
typedef const char *const kv_t[2];

static ember_config_t *config_from(const kv_t *kv) {
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  for (size_t i = 0; kv[i][0] != NULL; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  return cfg;
}

/* ember_kafka_new on `kv`, which must succeed. */
static ember_kafka_t *kafka_from(const kv_t *kv) {
  ember_config_t *cfg = config_from(kv);
  ember_kafka_t *k = NULL;
  char err[512] = "";
  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  if (rc != 0) fail_msg("ember_kafka_new: %s (%s)", ember_strerror(rc), err);
  ember_config_free(cfg);
  return k;
}

/* ember_kafka_new on `kv`, which must fail with `want`; returns errbuf's
 * text in `err` and checks the out-parameter was left alone. */
static void kafka_new_fails(const kv_t *kv, int want, char *err, size_t err_size) {
  ember_config_t *cfg = config_from(kv);
  ember_kafka_t *sentinel = (ember_kafka_t *)&sentinel;
  ember_kafka_t *k = sentinel;
  err[0] = '\0';
  int rc = ember_kafka_new(cfg, &k, err, err_size);
  ember_config_free(cfg);
  if (rc == 0) ember_kafka_free(k);
  assert_int_equal(rc, want);
  assert_ptr_equal(k, sentinel);
  assert_true(err[0] != '\0');
}

/* The value of librdkafka property `name` in `conf`. */
static const char *conf_value(const rd_kafka_conf_t *conf, const char *name, char *buf,
                              size_t size) {
  size_t n = size;
  rd_kafka_conf_res_t res = rd_kafka_conf_get(conf, name, buf, &n);
  if (res != RD_KAFKA_CONF_OK) fail_msg("rd_kafka_conf_get(%s) = %d", name, (int)res);
  return buf;
}

#define assert_conf(conf, name, want)                                                              \
  do {                                                                                             \
    char v_[512];                                                                                  \
    assert_string_equal(conf_value((conf), (name), v_, sizeof v_), (want));                        \
  } while (0)

/* Profile `seq` of the test agent: worker w<seq % 5>, two stacks whose
 * totals are a function of seq, so a consumer can check them. */
static ember_profile_t *make_profile(const char *agent, uint64_t seq, char *worker,
                                     size_t worker_size) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  snprintf(worker, worker_size, "w%u", (unsigned)(seq % TEST_NWORKERS));
  ember_labels_t labels = {.worker = worker,
                           .version = "1.2.3",
                           .host = "host-a",
                           .actor = NULL,
                           .pid = 1000u + (uint32_t)seq};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  int64_t start = TEST_WINDOW_BASE_NS + (int64_t)seq * 1000000000;
  assert_int_equal(ember_profile_set_window(p, start, start + 1000000000), 0);
  ember_profile_set_period(p, 10000000);
  const ember_frame_t frames[2] = {
      {.function = "leaf", .module = "/usr/bin/app", .address = 0x1234, .kind = EMBER_FRAME_NATIVE},
      {.function = "main", .module = "/usr/bin/app", .address = 0x100, .kind = EMBER_FRAME_NATIVE},
  };
  const int64_t v1[2] = {(int64_t)seq + 1, ((int64_t)seq + 1) * 1000};
  const int64_t v2[2] = {1, 500};
  assert_int_equal(ember_profile_add(p, frames, 2, v1), 0);
  assert_int_equal(ember_profile_add(p, frames + 1, 1, v2), 0);
  return p;
}

static int64_t expected_samples(uint64_t seq) { return (int64_t)seq + 2; }
static int64_t expected_ns(uint64_t seq) { return ((int64_t)seq + 1) * 1000 + 500; }

/* Produce responses that carried a partition error, as librdkafka's "msg"
 * debug log reports them. Written from librdkafka's broker threads. */
static atomic_int msgset_errors;

static void count_msgset_errors(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
  (void)rk;
  (void)level;
  if (strcmp(fac, "MSGSET") == 0 && strstr(buf, "encountered error") != NULL)
    atomic_fetch_add(&msgset_errors, 1);
}

/* Produce profiles 0..n-1 of `agent` to ember.profiles through a producer
 * made by ember_kafka_producer_new, flush, and return the delivery tally.
 * With `watch_errors`, the producer's log counts failed message sets in
 * msgset_errors instead of going to ember_log. */
static tu_dr_tally_t produce_profiles(const ember_kafka_t *k, const char *agent, size_t n,
                                      bool watch_errors) {
  tu_dr_tally_t dr = {0, 0, RD_KAFKA_RESP_ERR_NO_ERROR};
  char err[512] = "";
  rd_kafka_conf_t *conf = NULL;
  assert_int_equal(ember_kafka_producer_conf(k, &conf, err, sizeof err), 0);
  rd_kafka_conf_set_dr_msg_cb(conf, tu_on_delivery);
  rd_kafka_conf_set_opaque(conf, &dr);
  if (watch_errors) {
    atomic_store(&msgset_errors, 0);
    assert_int_equal(rd_kafka_conf_set(conf, "debug", "msg", err, sizeof err), RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_log_cb(conf, count_msgset_errors);
  }
  rd_kafka_t *p = NULL;
  int rc = ember_kafka_producer_new(k, conf, &p, err, sizeof err);
  conf = NULL; /* taken by ember_kafka_producer_new */
  if (rc != 0) fail_msg("ember_kafka_producer_new: %s", err);

  ember_buf_t buf;
  ember_buf_init(&buf, 1u << 20);
  for (uint64_t seq = 0; seq < n; seq++) {
    char worker[16];
    ember_profile_t *prof = make_profile(agent, seq, worker, sizeof worker);
    ember_buf_reset(&buf);
    assert_int_equal(ember_codec_encode(prof, &buf), 0);
    ember_profile_free(prof);
    rd_kafka_resp_err_t e = rd_kafka_producev(
        p, RD_KAFKA_V_TOPIC(EMBER_TOPIC_PROFILES), RD_KAFKA_V_KEY(worker, strlen(worker)),
        RD_KAFKA_V_VALUE(buf.data, buf.len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_END);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
      fail_msg("produce seq %u: %s", (unsigned)seq, rd_kafka_err2str(e));
    rd_kafka_poll(p, 0);
  }
  ember_buf_free(&buf);
  assert_int_equal(rd_kafka_flush(p, 15000), RD_KAFKA_RESP_ERR_NO_ERROR);
  assert_int_equal(rd_kafka_outq_len(p), 0);
  rd_kafka_destroy(p);
  return dr;
}

/* What a consumer saw of one agent's profiles 0..n-1. */
typedef struct tally {
  const char *agent;
  size_t n;
  unsigned *seen; /* per seq */
  size_t unique;  /* seqs seen at least once */
  size_t dupes;   /* deliveries past the first */
  size_t bad;     /* undecodable or wrong content */
  size_t foreign; /* other agents' profiles */
  int64_t samples, ns;
} tally_t;

static void tally_init(tally_t *t, const char *agent, size_t n) {
  *t = (tally_t){.agent = agent, .n = n};
  t->seen = calloc(n, sizeof *t->seen);
  assert_non_null(t->seen);
}

static void tally_message(tally_t *t, const rd_kafka_message_t *m) {
  ember_profile_t *p = NULL;
  char err[256];
  int rc = ember_codec_decode(m->payload, m->len, NULL, &p, err, sizeof err);
  if (rc != 0) {
    print_error("offset %lld: cannot decode: %s\n", (long long)m->offset, err);
    t->bad++;
    return;
  }
  const char *agent = ember_profile_agent_id(p);
  if (agent == NULL || strcmp(agent, t->agent) != 0) {
    t->foreign++;
    ember_profile_free(p);
    return;
  }
  uint64_t seq = ember_profile_seq(p);
  const ember_labels_t *l = ember_profile_labels(p);
  char worker[16];
  snprintf(worker, sizeof worker, "w%u", (unsigned)(seq % TEST_NWORKERS));
  bool ok = seq < t->n && l->worker != NULL && strcmp(l->worker, worker) == 0 &&
            m->key_len == strlen(worker) && memcmp(m->key, worker, m->key_len) == 0 &&
            l->version != NULL && strcmp(l->version, "1.2.3") == 0 && l->host != NULL &&
            strcmp(l->host, "host-a") == 0 && l->actor == NULL && l->pid == 1000u + seq &&
            ember_profile_ntypes(p) == 2 && ember_profile_type(p, 0) == EMBER_VT_CPU_SAMPLES &&
            ember_profile_nstacks(p) == 2 && ember_profile_total(p, 0) == expected_samples(seq) &&
            ember_profile_total(p, 1) == expected_ns(seq);
  if (!ok) {
    print_error("offset %lld: seq %llu: unexpected content\n", (long long)m->offset,
                (unsigned long long)seq);
    t->bad++;
  } else {
    if (t->seen[seq]++ == 0) {
      t->unique++;
    } else {
      t->dupes++;
    }
    t->samples += ember_profile_total(p, 0);
    t->ns += ember_profile_total(p, 1);
  }
  ember_profile_free(p);
}

/* Poll `c` until every profile of t->agent has arrived (then keep polling
 * `linger_ms` more, to catch duplicates) or `timeout_ms` passes. */
static void consume_profiles(rd_kafka_t *c, tally_t *t, int64_t timeout_ms, int64_t linger_ms) {
  int64_t now = ember_time_mono_ns();
  int64_t deadline = now + timeout_ms * 1000000;
  int64_t done_at = -1;
  while (now < deadline) {
    if (t->unique == t->n) {
      if (done_at < 0) done_at = now;
      if (now - done_at >= linger_ms * 1000000) break;
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m != NULL) {
      if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        print_message("consumer event: %s\n", rd_kafka_message_errstr(m));
      } else {
        tally_message(t, m);
      }
      rd_kafka_message_destroy(m);
    }
    now = ember_time_mono_ns();
  }
}

static int64_t expected_total_samples(size_t n) {
  int64_t s = 0;
  for (uint64_t i = 0; i < n; i++) s += expected_samples(i);
  return s;
}

static int64_t expected_total_ns(size_t n) {
  int64_t s = 0;
  for (uint64_t i = 0; i < n; i++) s += expected_ns(i);
  return s;
}

/* Every profile exactly once, with the right content. */
static void assert_exactly_once(const tally_t *t) {
  for (size_t i = 0; i < t->n; i++) {
    if (t->seen[i] != 1) print_error("seq %zu arrived %u times\n", i, t->seen[i]);
  }
  assert_int_equal(t->bad, 0);
  assert_int_equal(t->foreign, 0);
  assert_int_equal(t->dupes, 0);
  assert_int_equal(t->unique, t->n);
  assert_int_equal(t->samples, expected_total_samples(t->n));
  assert_int_equal(t->ns, expected_total_ns(t->n));
}

/* Commit synchronously and return the sum of the group's committed offsets
 * over the consumer's assignment (each partition starts at offset 0). */
static int64_t commit_and_sum(rd_kafka_t *c) {
  assert_int_equal(rd_kafka_commit(c, NULL, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_t *parts = NULL;
  assert_int_equal(rd_kafka_assignment(c, &parts), RD_KAFKA_RESP_ERR_NO_ERROR);
  assert_int_equal(parts->cnt, 4);
  assert_int_equal(rd_kafka_committed(c, parts, 5000), RD_KAFKA_RESP_ERR_NO_ERROR);
  int64_t sum = 0;
  for (int i = 0; i < parts->cnt; i++) {
    assert_int_equal(parts->elems[i].err, RD_KAFKA_RESP_ERR_NO_ERROR);
    if (parts->elems[i].offset > 0) sum += parts->elems[i].offset;
  }
  rd_kafka_topic_partition_list_destroy(parts);
  return sum;
}

/* Consume ember.profiles in group `group` until all n profiles of `agent`
 * are in, check them, commit, and check the committed offsets cover them. */
static void consume_and_check(const ember_kafka_t *k, const char *group, const char *agent,
                              size_t n) {
  static const char *const topics[] = {EMBER_TOPIC_PROFILES};
  char err[512] = "";
  rd_kafka_t *c = NULL;
  int rc = ember_kafka_consumer_new(k, group, NULL, topics, 1, &c, err, sizeof err);
  if (rc != 0) fail_msg("ember_kafka_consumer_new: %s", err);
  tally_t t;
  tally_init(&t, agent, n);
  consume_profiles(c, &t, 20000, 500);
  assert_exactly_once(&t);
  assert_int_equal(commit_and_sum(c), (int64_t)n);
  free(t.seen);
  assert_int_equal(rd_kafka_consumer_close(c), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(c);
}

/* -------------------------------------------------------------- tests -- */

/* One embedded instance for the tests that only read configuration or
 * metadata: librdkafka 2.0.2's mock cluster sometimes takes a second to
 * start or stop (its thread misses a wake-up), so each one costs. */
static ember_kafka_t *shared;

static void test_kafka_producer_conf_defaults(void **state) {
  (void)state;
  rd_kafka_conf_t *conf = NULL;
  char err[256] = "";
  assert_int_equal(ember_kafka_producer_conf(shared, &conf, err, sizeof err), 0);
  assert_conf(conf, "compression.codec", "zstd");
  assert_conf(conf, "enable.idempotence", "true");
  assert_conf(conf, "linger.ms", "100");
  assert_conf(conf, "client.id", "ember-test");
  /* Embedded mode: clients go to the mock cluster, never to "embedded". */
  assert_string_not_equal(ember_kafka_brokers(shared), "embedded");
  assert_conf(conf, "bootstrap.servers", ember_kafka_brokers(shared));
  char acks[32];
  conf_value(conf, "acks", acks, sizeof acks);
  /* librdkafka stores acks=all as -1. */
  if (strcmp(acks, "all") != 0 && strcmp(acks, "-1") != 0) fail_msg("acks = %s", acks);
  rd_kafka_conf_destroy(conf);
}

static void test_kafka_consumer_conf_defaults(void **state) {
  (void)state;
  rd_kafka_conf_t *conf = NULL;
  char err[256] = "";
  assert_int_equal(ember_kafka_consumer_conf(shared, "group-a", &conf, err, sizeof err), 0);
  assert_conf(conf, "enable.auto.commit", "false");
  assert_conf(conf, "group.id", "group-a");
  assert_conf(conf, "client.id", "ember-test");
  assert_conf(conf, "session.timeout.ms", "10000");
  assert_conf(conf, "bootstrap.servers", ember_kafka_brokers(shared));
  char reset[32];
  conf_value(conf, "auto.offset.reset", reset, sizeof reset);
  /* librdkafka reads back the first name of the enum value: "smallest",
   * "earliest" and "beginning" are the same setting. */
  if (strcmp(reset, "earliest") != 0 && strcmp(reset, "smallest") != 0 &&
      strcmp(reset, "beginning") != 0)
    fail_msg("auto.offset.reset = %s", reset);
  rd_kafka_conf_destroy(conf);
}

static void test_kafka_remote_brokers_kept(void **state) {
  (void)state;
  static kv_t kv[] = {{"brokers", "k1.example:9092,k2.example:9093"}, {NULL, NULL}};
  ember_kafka_t *k = kafka_from(kv);
  assert_false(ember_kafka_is_embedded(k));
  assert_null(ember_kafka_mock(k));
  assert_string_equal(ember_kafka_brokers(k), "k1.example:9092,k2.example:9093");
  rd_kafka_conf_t *conf = NULL;
  char err[256] = "";
  assert_int_equal(ember_kafka_producer_conf(k, &conf, err, sizeof err), 0);
  assert_conf(conf, "bootstrap.servers", "k1.example:9092,k2.example:9093");
  rd_kafka_conf_destroy(conf);
  ember_kafka_free(k);
}

static void test_kafka_passthrough_reaches_both(void **state) {
  (void)state;
  /* Reading a conf needs no cluster; the code path is the embedded one's. */
  static kv_t kv[] = {{"brokers", "127.0.0.1:9092"},
                      {"kafka.socket.timeout.ms", "12345"},
                      {"kafka.security.protocol", "plaintext"},
                      {NULL, NULL}};
  ember_kafka_t *k = kafka_from(kv);
  rd_kafka_conf_t *pc = NULL, *cc = NULL;
  char err[256] = "";
  assert_int_equal(ember_kafka_producer_conf(k, &pc, err, sizeof err), 0);
  assert_int_equal(ember_kafka_consumer_conf(k, "g", &cc, err, sizeof err), 0);
  assert_conf(pc, "socket.timeout.ms", "12345");
  assert_conf(cc, "socket.timeout.ms", "12345");
  assert_conf(pc, "security.protocol", "plaintext");
  assert_conf(cc, "security.protocol", "plaintext");
  /* The defaults are still there beside them. */
  assert_conf(pc, "compression.codec", "zstd");
  assert_conf(cc, "enable.auto.commit", "false");
  rd_kafka_conf_destroy(pc);
  rd_kafka_conf_destroy(cc);
  ember_kafka_free(k);
}

static void test_kafka_passthrough_overrides_defaults(void **state) {
  (void)state;
  static kv_t kv[] = {{"brokers", "127.0.0.1:9092"},
                      {"kafka.linger.ms", "7"},
                      {"kafka.session.timeout.ms", "6000"},
                      {"kafka.compression.codec", "lz4"},
                      {NULL, NULL}};
  ember_kafka_t *k = kafka_from(kv);
  rd_kafka_conf_t *pc = NULL, *cc = NULL;
  char err[256] = "";
  assert_int_equal(ember_kafka_producer_conf(k, &pc, err, sizeof err), 0);
  assert_int_equal(ember_kafka_consumer_conf(k, "g", &cc, err, sizeof err), 0);
  assert_conf(pc, "linger.ms", "7");
  assert_conf(pc, "compression.codec", "lz4");
  assert_conf(cc, "session.timeout.ms", "6000");
  assert_conf(pc, "enable.idempotence", "true");
  rd_kafka_conf_destroy(pc);
  rd_kafka_conf_destroy(cc);
  ember_kafka_free(k);
}

static void test_kafka_bad_passthrough_key(void **state) {
  (void)state;
  static kv_t kv[] = {{"kafka.no.such.property", "1"}, {NULL, NULL}};
  char err[512];
  kafka_new_fails(kv, EMBER_ECONFIG, err, sizeof err);
  if (strstr(err, "kafka.no.such.property") == NULL) fail_msg("errbuf: %s", err);
  /* A misspelt secret is named by its key, never echoed into logs. */
  static kv_t secret[] = {{"kafka.sasl.pasword", "hunter2"}, {NULL, NULL}};
  kafka_new_fails(secret, EMBER_ECONFIG, err, sizeof err);
  if (strstr(err, "kafka.sasl.pasword") == NULL || strstr(err, "hunter2") != NULL)
    fail_msg("errbuf: %s", err);
}

static void test_kafka_bad_passthrough_value(void **state) {
  (void)state;
  static kv_t kv1[] = {{"kafka.socket.timeout.ms", "abc"}, {NULL, NULL}};
  char err[512];
  kafka_new_fails(kv1, EMBER_ECONFIG, err, sizeof err);
  if (strstr(err, "kafka.socket.timeout.ms") == NULL) fail_msg("errbuf: %s", err);
  static kv_t kv2[] = {{"kafka.compression.codec", "snappy-ish"}, {NULL, NULL}};
  kafka_new_fails(kv2, EMBER_ECONFIG, err, sizeof err);
  if (strstr(err, "kafka.compression.codec") == NULL) fail_msg("errbuf: %s", err);
}

static void test_kafka_bad_topic_partitions(void **state) {
  (void)state;
  static const char *const bad[] = {"0", "abc", "-1", "1025", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kv_t kv[] = {{"topic_partitions", bad[i]}, {NULL, NULL}};
    char err[512];
    kafka_new_fails(kv, EMBER_ECONFIG, err, sizeof err);
    if (strstr(err, "topic_partitions") == NULL) fail_msg("'%s': errbuf: %s", bad[i], err);
  }
}

static void test_kafka_empty_brokers(void **state) {
  (void)state;
  static kv_t kv[] = {{"brokers", ""}, {NULL, NULL}};
  char err[512];
  kafka_new_fails(kv, EMBER_ECONFIG, err, sizeof err);
  if (strstr(err, "brokers") == NULL) fail_msg("errbuf: %s", err);
}

static void test_kafka_rejects_bad_arguments(void **state) {
  (void)state;
  char err[256] = "";
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(NULL, &k, err, sizeof err), -EINVAL);
  static kv_t kv[] = {{"brokers", "127.0.0.1:1"}, {NULL, NULL}};
  k = kafka_from(kv);
  rd_kafka_conf_t *conf = NULL;
  assert_int_equal(ember_kafka_producer_conf(NULL, &conf, err, sizeof err), -EINVAL);
  assert_int_equal(ember_kafka_consumer_conf(k, NULL, &conf, err, sizeof err), -EINVAL);
  assert_null(conf);
  /* Ownership of conf passes even on failure; ASan would see a leak. */
  static const char *const topics[] = {EMBER_TOPIC_PROFILES};
  rd_kafka_t *rk = NULL;
  assert_int_equal(ember_kafka_consumer_conf(k, "g", &conf, err, sizeof err), 0);
  assert_int_equal(ember_kafka_consumer_new(k, "g", conf, topics, 0, &rk, err, sizeof err),
                   -EINVAL);
  conf = NULL;
  assert_int_equal(ember_kafka_producer_conf(k, &conf, err, sizeof err), 0);
  assert_int_equal(ember_kafka_producer_new(k, conf, NULL, err, sizeof err), -EINVAL);
  conf = NULL;
  assert_null(rk);
  assert_int_equal(ember_kafka_ensure_topics(k, 0, err, sizeof err), -EINVAL);
  ember_kafka_free(k);
  ember_kafka_free(NULL);
}

/* Failing each allocation of ember_kafka_new in turn yields -ENOMEM, the
 * out-parameter untouched, and (under ASan) no leak or crash. */
static void alloc_failures(const kv_t *kv) {
  ember_config_t *cfg = config_from(kv);
  ember_alloc_fail_reset();
  ember_kafka_t *k = NULL;
  char err[256];
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  long need = ember_alloc_fail_reset();
  ember_kafka_free(k);
  assert_true(need > 0);
  for (long i = 0; i < need; i++) {
    ember_kafka_t *sentinel = (ember_kafka_t *)&sentinel;
    k = sentinel;
    ember_alloc_fail_after(i);
    int rc = ember_kafka_new(cfg, &k, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc != -ENOMEM) fail_msg("allocation %ld failed: got %d (%s)", i, rc, err);
    assert_ptr_equal(k, sentinel);
  }
  ember_config_free(cfg);
}

static void test_kafka_new_alloc_failures(void **state) {
  (void)state;
  static kv_t remote[] = {{"brokers", "127.0.0.1:1"},
                          {"client_id", "ember-alloc"},
                          {"kafka.linger.ms", "5"},
                          {"kafka.socket.timeout.ms", "20000"},
                          {NULL, NULL}};
  alloc_failures(remote);
  /* Embedded: the last allocation comes after the mock cluster started,
   * so its failure path has to stop it again. */
  static kv_t embedded[] = {{"kafka.linger.ms", "5"}, {NULL, NULL}};
  alloc_failures(embedded);
}

static void test_kafka_embedded_round_trip(void **state) {
  (void)state;
  enum { N = 50 };
  static kv_t kv[] = {{"brokers", "embedded"}, {"kafka.linger.ms", "5"}, {NULL, NULL}};
  ember_kafka_t *k = kafka_from(kv);
  assert_true(ember_kafka_is_embedded(k));
  assert_non_null(ember_kafka_mock(k));
  const char *brokers = ember_kafka_brokers(k);
  assert_non_null(brokers);
  assert_int_equal(strncmp(brokers, "127.0.0.1:", 10), 0);
  uint64_t port = 0;
  assert_int_equal(ember_parse_u64(brokers + 10, 1, 65535, &port), 0);

  tu_dr_tally_t dr = produce_profiles(k, TEST_AGENT, N, false);
  if (dr.failed != 0)
    fail_msg("%zu failed deliveries, first: %s", dr.failed, rd_kafka_err2str(dr.first_err));
  assert_int_equal(dr.ok, N);

  consume_and_check(k, "ember-unit-round-trip", TEST_AGENT, N);
  ember_kafka_free(k);
}

static void test_kafka_injected_produce_errors(void **state) {
  (void)state;
  enum { N = 50 };
  static kv_t kv[] = {{"kafka.linger.ms", "5"}, {NULL, NULL}};
  ember_kafka_t *k = kafka_from(kv);
  rd_kafka_mock_cluster_t *mock = ember_kafka_mock(k);
  assert_non_null(mock);
  /* The first three Produce requests fail with retriable errors; the
   * producer must retry them without losing or duplicating a message. The
   * mock writes nothing for an injected error, so this shows retries are
   * clean, not what idempotence adds: the 2.0.2 mock stores a retried batch
   * twice whatever the producer's sequence numbers say. */
  rd_kafka_mock_push_request_errors(
      mock, TEST_APIKEY_PRODUCE, 3, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
  tu_dr_tally_t dr = produce_profiles(k, TEST_AGENT, N, true);
  if (dr.failed != 0)
    fail_msg("%zu failed deliveries, first: %s", dr.failed, rd_kafka_err2str(dr.first_err));
  assert_int_equal(dr.ok, N);
  /* Each failed request fails at least one message set: the errors were
   * really injected and retried, not skipped. */
  assert_true(atomic_load(&msgset_errors) >= 3);

  consume_and_check(k, "ember-unit-injected", TEST_AGENT, N);
  ember_kafka_free(k);
}

/* The partition count of each of Ember's topics, from `k`'s cluster. */
static void assert_topic_partitions(const ember_kafka_t *k, int want) {
  static const char *const names[] = {
      EMBER_TOPIC_PROFILES, EMBER_TOPIC_PROFILES_DLQ, EMBER_TOPIC_TARGETS,    EMBER_TOPIC_COMMANDS,
      EMBER_TOPIC_EVENTS,   EMBER_TOPIC_ALERTS,       EMBER_TOPIC_COLLECTORS, EMBER_TOPIC_RULES};
  char err[256] = "";
  rd_kafka_t *p = NULL;
  assert_int_equal(ember_kafka_producer_new(k, NULL, &p, err, sizeof err), 0);
  const struct rd_kafka_metadata *md = NULL;
  assert_int_equal(rd_kafka_metadata(p, 1, NULL, &md, 5000), RD_KAFKA_RESP_ERR_NO_ERROR);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int found = -1;
    for (int t = 0; t < md->topic_cnt; t++) {
      if (strcmp(md->topics[t].topic, names[i]) == 0) found = t;
    }
    if (found < 0) fail_msg("topic %s missing", names[i]);
    assert_int_equal(md->topics[found].err, RD_KAFKA_RESP_ERR_NO_ERROR);
    assert_int_equal(md->topics[found].partition_cnt, want);
  }
  rd_kafka_metadata_destroy(md);
  rd_kafka_destroy(p);
}

static void test_kafka_ensure_topics_embedded(void **state) {
  (void)state;
  char err[256] = "";
  assert_int_equal(ember_kafka_ensure_topics(shared, 1000, err, sizeof err), 0);
  /* The mock has every topic already, with the default 4 partitions. */
  assert_topic_partitions(shared, 4);
}

static void test_kafka_embedded_topic_partitions(void **state) {
  (void)state;
  static kv_t kv[] = {{"topic_partitions", "2"}, {NULL, NULL}};
  ember_kafka_t *k = kafka_from(kv);
  assert_topic_partitions(k, 2);
  ember_kafka_free(k);
}

static int group_setup(void **state) {
  (void)state;
  /* librdkafka's INFO lines would bury cmocka's report. */
  ember_log_set_level(EMBER_LOG_WARN);
  ember_config_t *cfg = NULL;
  char err[512] = "";
  int rc = ember_config_new(&cfg);
  if (rc == 0) rc = ember_config_set(cfg, "client_id", "ember-test");
  if (rc == 0) rc = ember_kafka_new(cfg, &shared, err, sizeof err);
  ember_config_free(cfg);
  if (rc != 0) print_error("embedded Kafka: %s (%s)\n", ember_strerror(rc), err);
  return rc == 0 ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  ember_kafka_free(shared);
  shared = NULL;
  return 0;
}

/* The delivery callback for messages that carry a status as their opaque:
 * 0 when delivered, -(error) when not, and no write without one. */
static void test_kafka_dr_status(void **state) {
  (void)state;
  atomic_int st;
  atomic_init(&st, 1);
  rd_kafka_message_t m = {.err = RD_KAFKA_RESP_ERR_NO_ERROR, ._private = &st};
  ember_kafka_dr_status(NULL, &m, NULL);
  assert_int_equal(atomic_load(&st), 0);
  atomic_store(&st, 1);
  m.err = RD_KAFKA_RESP_ERR__MSG_TIMED_OUT;
  ember_kafka_dr_status(NULL, &m, NULL);
  assert_int_equal(atomic_load(&st), -(int)RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  m._private = NULL;
  ember_kafka_dr_status(NULL, &m, NULL); /* nothing to write to */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kafka_producer_conf_defaults),
      cmocka_unit_test(test_kafka_dr_status),
      cmocka_unit_test(test_kafka_consumer_conf_defaults),
      cmocka_unit_test(test_kafka_remote_brokers_kept),
      cmocka_unit_test(test_kafka_passthrough_reaches_both),
      cmocka_unit_test(test_kafka_passthrough_overrides_defaults),
      cmocka_unit_test(test_kafka_bad_passthrough_key),
      cmocka_unit_test(test_kafka_bad_passthrough_value),
      cmocka_unit_test(test_kafka_bad_topic_partitions),
      cmocka_unit_test(test_kafka_empty_brokers),
      cmocka_unit_test(test_kafka_rejects_bad_arguments),
      cmocka_unit_test(test_kafka_new_alloc_failures),
      cmocka_unit_test(test_kafka_embedded_round_trip),
      cmocka_unit_test(test_kafka_injected_produce_errors),
      cmocka_unit_test(test_kafka_ensure_topics_embedded),
      cmocka_unit_test(test_kafka_embedded_topic_partitions),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
