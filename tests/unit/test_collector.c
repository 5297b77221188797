/* The collector on the embedded Kafka (librdkafka's mock cluster): valid
 * profiles are stored once each whatever is replayed, malformed messages
 * land in the DLQ with the reason while ingest goes on, targets reach the
 * registry, and /metrics counts all of it. The same code against a real
 * broker, with a SIGKILL in the middle, is tests/integration/test_collector_broker.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "collector.h"
#include "common/testutil.h"
#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/store.h"

#define BASE_NS (1764410400LL * 1000000000) /* 2025-11-29T10:00:00Z */

static bool wait_metric(unsigned port, const char *name, double want, int timeout_ms) {
  for (int t = 0; t < timeout_ms; t += 100) {
    if (tu_metric(port, name) >= want) return true;
    usleep(100000);
  }
  return false;
}

typedef struct dlq_seen {
  size_t n;
  char errors[8][256];
  char sources[8][256];
} dlq_seen_t;

/* Every message of the DLQ, from the start, with its headers. */
static void consume_dlq(const char *brokers, dlq_seen_t *seen, size_t want) {
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  char group[64];
  snprintf(group, sizeof group, "dlq-reader-%d", (int)getpid());
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", group, err, sizeof err);
  rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err);
  rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  assert_non_null(c);
  rd_kafka_poll_set_consumer(c);
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(l, EMBER_TOPIC_PROFILES_DLQ, RD_KAFKA_PARTITION_UA);
  assert_int_equal(rd_kafka_subscribe(c, l), 0);
  rd_kafka_topic_partition_list_destroy(l);
  for (int t = 0; t < 300 && seen->n < want; t++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == 0 && seen->n < 8) {
      rd_kafka_headers_t *h = NULL;
      const void *v;
      size_t vlen;
      if (rd_kafka_message_headers(m, &h) == 0) {
        if (rd_kafka_header_get_last(h, "ember.error", &v, &vlen) == 0)
          snprintf(seen->errors[seen->n], 256, "%.*s", (int)vlen, (const char *)v);
        if (rd_kafka_header_get_last(h, "ember.source", &v, &vlen) == 0)
          snprintf(seen->sources[seen->n], 256, "%.*s", (int)vlen, (const char *)v);
      }
      seen->n++;
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
}

static void test_collector_ingest_dlq_and_duplicates(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/collector-%d", EMBER_TEST_TMP, (int)getpid());
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", "embedded"), 0);
  assert_int_equal(ember_config_set(cfg, "data_dir", dir), 0);
  assert_int_equal(ember_config_set(cfg, "api.listen", "127.0.0.1:0"), 0);
  assert_int_equal(ember_config_set(cfg, "store.sync", "false"), 0);
  assert_int_equal(ember_config_set(cfg, "batch.linger", "50ms"), 0);
  assert_int_equal(ember_config_set(cfg, "batch.max_messages", "16"), 0);
  assert_int_equal(ember_config_set(cfg, "retention", "0"), 0); /* windows from 2025 */
  assert_int_equal(ember_config_check(cfg, ember__collector_config_keys, err, sizeof err), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  const char *brokers = ember_kafka_brokers(k);

  ember__collector_t *c = NULL;
  int rc = ember__collector_start(cfg, k, &c, err, sizeof err);
  if (rc != 0) fail_msg("collector start: %s", err);
  unsigned port = ember__collector_api_port(c);
  assert_true(port > 0);

  /* 50 windows, then 10 replays of the first ones, then garbage, then 20 more. */
  int64_t want = tu_produce_profiles(brokers, "agent-u", 0, 50, "w-unit", "host-u", BASE_NS);
  tu_produce_profiles(brokers, "agent-u", 0, 10, "w-unit", "host-u", BASE_NS);
  ember_profile_t *p = tu_profile("agent-u", 99, "w-unit", "host-u", BASE_NS);
  ember_buf_t enc;
  ember_buf_init(&enc, 1 << 20);
  assert_int_equal(ember_codec_encode(p, &enc), 0);
  ember_profile_free(p);
  static const char junk[] = "this is not a profile";
  const void *bad[] = {junk, enc.data, ""};
  const size_t bad_len[] = {sizeof junk - 1, enc.len / 2, 0};
  tu_dr_tally_t t = tu_produce(brokers, EMBER_TOPIC_PROFILES, "bad", bad, bad_len, 3);
  assert_int_equal(t.ok, 3);
  ember_buf_free(&enc);
  want += tu_produce_profiles(brokers, "agent-u", 50, 20, "w-unit", "host-u",
                              BASE_NS + 500 * 10000000000LL);

  /* A target announcement and a garbage one. */
  char hu[] = "host-u", wu[] = "w-unit", v1[] = "1.0";
  ember_target_record_t tr = {
      .host = hu, .worker = wu, .version = v1, .pid = 4242, .seen_ns = BASE_NS};
  ember_buf_t tb;
  ember_buf_init(&tb, 1 << 16);
  assert_int_equal(ember_codec_encode_target(&tr, &tb), 0);
  const void *tv[] = {tb.data, junk};
  const size_t tl[] = {tb.len, sizeof junk - 1};
  t = tu_produce(brokers, EMBER_TOPIC_TARGETS, "host-u/4242", tv, tl, 2);
  assert_int_equal(t.ok, 2);
  ember_buf_free(&tb);

  if (!wait_metric(port, "ember_collector_messages_total", 83, 30000))
    fail_msg("the collector consumed %.0f of 83 messages in 30 s",
             tu_metric(port, "ember_collector_messages_total"));
  assert_true(wait_metric(port, "ember_collector_target_messages_total", 2, 15000));
  assert_true(wait_metric(port, "ember_collector_targets", 1, 5000));
  if (!wait_metric(port, "ember_collector_profiles_stored_total", 70, 10000))
    fail_msg("stored %.0f of 70 (duplicates %.0f, malformed %.0f, store errors %.0f)",
             tu_metric(port, "ember_collector_profiles_stored_total"),
             tu_metric(port, "ember_collector_duplicates_total"),
             tu_metric(port, "ember_collector_malformed_total"),
             tu_metric(port, "ember_collector_store_errors_total"));
  assert_true(tu_metric(port, "ember_collector_malformed_total") == 3);
  assert_true(tu_metric(port, "ember_collector_target_errors_total") == 1);
  assert_true(tu_metric(port, "ember_collector_duplicates_total") == 10);
  assert_true(tu_metric(port, "ember_collector_profiles_stored_total") == 70);

  /* The registry behind /api/v1/targets. */
  static char body[1 << 16];
  assert_int_equal(tu_http_get(port, "/api/v1/targets?worker=w-unit&from=0", body, sizeof body),
                   200);
  assert_non_null(strstr(body, "\"host\":\"host-u\""));
  assert_non_null(strstr(body, "\"pid\":4242"));
  assert_int_equal(tu_http_get(port, "/api/v1/targets?worker=nobody&from=0", body, sizeof body),
                   200);
  assert_null(strstr(body, "host-u"));
  assert_int_equal(tu_http_get(port, "/api/v1/targets?wroker=x", body, sizeof body), 400);

  dlq_seen_t seen = {0};
  consume_dlq(brokers, &seen, 3);
  assert_int_equal(seen.n, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_true(strlen(seen.errors[i]) > 0);
    assert_non_null(strstr(seen.sources[i], EMBER_TOPIC_PROFILES "/"));
  }
  assert_non_null(strstr(seen.errors[2], "empty"));

  ember__collector_stop(c);

  /* Every sample once, nothing from the replays. */
  ember_store_t *s = NULL;
  char path[600];
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  ember_store_opts_t so = {.read_only = true};
  assert_int_equal(ember_store_open(path, &so, &s, err, sizeof err), 0);
  ember_store_selector_t sel = {.worker = "w-unit"};
  ember_profile_t *m = NULL;
  assert_int_equal(
      ember_store_merge(s, &sel, BASE_NS, BASE_NS + 1000 * 10000000000LL, EMBER_VT_CPU_SAMPLES, &m),
      0);
  assert_int_equal(ember_profile_total(m, 0), want);
  assert_true(tu_self(m, 0, "work_b") == 70);
  ember_profile_free(m);
  ember_store_close(s);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* A window the store refuses (its sum with another of the same series and
 * start would overflow) is isolated from its batch: the rest is stored,
 * it goes to the DLQ with the reason. */
static void test_collector_isolates_what_the_store_refuses(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/collector-iso-%d", EMBER_TEST_TMP, (int)getpid());
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {{"brokers", "embedded"},       {"data_dir", dir},
                         {"api.listen", "127.0.0.1:0"}, {"store.sync", "false"},
                         {"batch.linger", "2s"},        {"retention", "0"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  const char *brokers = ember_kafka_brokers(k);
  /* Three windows of one series and start, from three agents: the first
   * two sum past INT64_MAX. All three are produced before the collector
   * starts, so they arrive in one batch. */
  ember_buf_t enc[3];
  const void *vals[3];
  size_t lens[3];
  const int64_t big = INT64_MAX / 2 + 1;
  for (int i = 0; i < 3; i++) {
    static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES};
    ember_profile_t *p = NULL;
    assert_int_equal(ember_profile_new(types, 1, &p), 0);
    char agent[16];
    snprintf(agent, sizeof agent, "iso-%d", i);
    ember_labels_t l = {.worker = "w-iso", .host = "h"};
    assert_int_equal(ember_profile_set_labels(p, &l), 0);
    assert_int_equal(ember_profile_set_origin(p, agent, 1, NULL), 0);
    assert_int_equal(ember_profile_set_window(p, BASE_NS, BASE_NS + 10000000000LL), 0);
    ember_frame_t f = {.function = "f", .kind = EMBER_FRAME_NATIVE};
    int64_t v = i < 2 ? big : 5;
    assert_int_equal(ember_profile_add(p, &f, 1, &v), 0);
    ember_buf_init(&enc[i], 1 << 16);
    assert_int_equal(ember_codec_encode(p, &enc[i]), 0);
    ember_profile_free(p);
    vals[i] = enc[i].data;
    lens[i] = enc[i].len;
  }
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_PROFILES, "w-iso", vals, lens, 3).ok, 3);
  for (int i = 0; i < 3; i++) ember_buf_free(&enc[i]);

  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  unsigned port = ember__collector_api_port(c);
  assert_true(wait_metric(port, "ember_collector_malformed_total", 1, 30000));
  assert_true(wait_metric(port, "ember_collector_profiles_stored_total", 2, 10000));
  assert_true(tu_metric(port, "ember_collector_store_errors_total") == 0);
  assert_true(tu_metric(port, "ember_collector_duplicates_total") == 0);
  dlq_seen_t seen = {0};
  consume_dlq(brokers, &seen, 1);
  assert_int_equal(seen.n, 1);
  assert_non_null(strstr(seen.errors[0], "overflow"));
  ember__collector_stop(c);

  ember_store_t *s = NULL;
  char path[600];
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  ember_store_opts_t so = {.read_only = true};
  assert_int_equal(ember_store_open(path, &so, &s, err, sizeof err), 0);
  ember_store_selector_t sel = {.worker = "w-iso"};
  ember_profile_t *m = NULL;
  assert_int_equal(
      ember_store_merge(s, &sel, BASE_NS, BASE_NS + 60000000000LL, EMBER_VT_CPU_SAMPLES, &m), 0);
  assert_true(ember_profile_total(m, 0) == big + 5);
  ember_profile_free(m);
  ember_store_close(s);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

static void test_collector_bad_config(void **state) {
  (void)state;
  ember_config_t *cfg = NULL;
  char err[512] = "";
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", "embedded"), 0);
  assert_int_equal(ember_config_set(cfg, "batch.max_messages", "0"), 0);
  ember__collector_t *c = NULL;
  assert_int_not_equal(ember__collector_start(cfg, NULL, &c, err, sizeof err), 0);
  assert_non_null(strstr(err, "batch.max_messages"));
  assert_null(c);
  ember_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collector_ingest_dlq_and_duplicates),
      cmocka_unit_test(test_collector_isolates_what_the_store_refuses),
      cmocka_unit_test(test_collector_bad_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
