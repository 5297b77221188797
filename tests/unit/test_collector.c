/* The collector on the embedded Kafka (librdkafka's mock cluster): valid
 * profiles are stored once each whatever is replayed, malformed messages
 * land in the DLQ with the reason while ingest goes on, targets reach the
 * registry, and /metrics counts all of it. The same code against a real
 * broker, with a SIGKILL in the middle, is tests/integration/test_collector_broker.c. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

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

/* A collector config for the store tests: embedded Kafka, small batches,
 * health.stall_after 1 s. `extra` adds key/value pairs (NULL-terminated). */
static ember_config_t *store_cfg(const char *dir, const char *const *extra) {
  ember_config_t *cfg = NULL;
  char err[512] = "";
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {{"brokers", "embedded"},       {"data_dir", dir},
                         {"api.listen", "127.0.0.1:0"}, {"store.sync", "false"},
                         {"batch.linger", "50ms"},      {"retention", "0"},
                         {"health.stall_after", "1s"}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  for (size_t i = 0; extra && extra[i]; i += 2)
    assert_int_equal(ember_config_set(cfg, extra[i], extra[i + 1]), 0);
  assert_int_equal(ember_config_check(cfg, ember__collector_config_keys, err, sizeof err), 0);
  return cfg;
}

/* Poll /healthz until it answers `status`; the last body goes to `body`. */
static bool wait_health(unsigned port, int status, char *body, size_t size, int timeout_ms) {
  for (int t = 0; t < timeout_ms; t += 100) {
    if (tu_http_get(port, "/healthz", body, size) == status) return true;
    usleep(100000);
  }
  return false;
}

/* Every query of the API over the range answers 200. */
static void assert_queries_answer(unsigned port, int64_t from_ns, int64_t to_ns) {
  static char body[1 << 20];
  static const char *const paths[] = {"/api/v1/profile", "/api/v1/series", "/api/v1/timeline",
                                      "/api/v1/workers", "/api/v1/hosts"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    char url[256];
    snprintf(url, sizeof url, "%s?from=%lld&to=%lld", paths[i], (long long)(from_ns / 1000000000),
             (long long)(to_ns / 1000000000));
    int st = tu_http_get(port, url, body, sizeof body);
    if (st != 200) fail_msg("GET %s: %d %.300s", url, st, body);
    if (i >= 3) continue; /* the label listings take no selector */
    /* And a ragged range, read from windows and minute rows. */
    snprintf(url, sizeof url, "%s?worker=w-disk&from=%lld&to=%lld", paths[i],
             (long long)(from_ns / 1000000000 + 25), (long long)(to_ns / 1000000000 - 35));
    st = tu_http_get(port, url, body, sizeof body);
    if (st != 200) fail_msg("GET %s: %d %.300s", url, st, body);
  }
}

/* The data dir on a tmpfs that fills while the collector ingests, then
 * gets space back: store writes fail (-ENOSPC, retried), /healthz turns
 * not ready with the reason, and once space is freed ingest resumes by
 * itself, /healthz is ready again, every query answers 200 and the stored
 * totals are exactly what was produced. */
static void test_collector_disk_full_then_freed(void **state) {
  (void)state;
  char dir[512], filler[600], err[512] = "";
  snprintf(dir, sizeof dir, "%s/collector-disk-%d", EMBER_TEST_TMP, (int)getpid());
  mkdir(dir, 0755);
  if (mount("tmpfs", dir, "tmpfs", 0, "size=4m") != 0) {
    print_message("cannot mount a tmpfs (%s): skipped\n", strerror(errno));
    rmdir(dir);
    skip();
  }
  static const char *const extra[] = {"batch.max_messages", "50", NULL};
  ember_config_t *cfg = store_cfg(dir, extra);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  const char *brokers = ember_kafka_brokers(k);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  unsigned port = ember__collector_api_port(c);
  static char body[1 << 16];
  assert_true(wait_health(port, 200, body, sizeof body, 10000));

  /* Fill the disk to the last byte. */
  snprintf(filler, sizeof filler, "%s/filler", dir);
  int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  static char block[4096];
  while (write(fd, block, sizeof block) > 0) {
  }
  close(fd);

  int64_t want = tu_produce_profiles(brokers, "agent-d", 0, 3000, "w-disk", "host-d", BASE_NS);
  if (!wait_health(port, 503, body, sizeof body, 60000))
    fail_msg("/healthz stayed ready (store errors %.0f, stored %.0f)",
             tu_metric(port, "ember_collector_store_errors_total"),
             tu_metric(port, "ember_collector_profiles_stored_total"));
  assert_non_null(strstr(body, "\"error\""));
  assert_non_null(strstr(body, "not ready: ingest is wedged"));
  assert_non_null(strstr(body, "disk"));
  assert_true(tu_metric(port, "ember_collector_store_errors_total") >= 1);

  assert_int_equal(unlink(filler), 0);
  if (!wait_metric(port, "ember_collector_profiles_stored_total", 3000, 60000))
    fail_msg("stored %.0f of 3000 after the disk was freed",
             tu_metric(port, "ember_collector_profiles_stored_total"));
  assert_true(wait_health(port, 200, body, sizeof body, 10000));
  int64_t end = BASE_NS + 3000 * 10000000000LL;
  assert_queries_answer(port, BASE_NS, end);
  ember__collector_stop(c);
  int64_t work_b = 0;
  assert_int_equal(tu_stored_samples(dir, "w-disk", BASE_NS, end, &work_b), want);
  assert_int_equal(work_b, 3000);
  ember_kafka_free(k);
  ember_config_free(cfg);
  assert_int_equal(umount2(dir, MNT_DETACH), 0);
  rmdir(dir);
}

/* A map full at store.max_size: the batch is split (logged, counted) until
 * not even one window fits; then ingest is wedged and /healthz says so.
 * Restarted with a larger store.max_size, the map grows, the rest is
 * stored, /healthz is ready and the totals are exact. */
static void test_collector_map_full_splits_then_grows(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/collector-map-%d", EMBER_TEST_TMP, (int)getpid());
  static const char *const small[] = {
      "store.map_size", "1048576", "store.max_size", "1048576", "batch.max_messages", "1000", NULL};
  ember_config_t *cfg = store_cfg(dir, small);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  const char *brokers = ember_kafka_brokers(k);
  enum { N = 20000 };
  int64_t want = tu_produce_profiles(brokers, "agent-m", 0, N, "w-disk", "host-m", BASE_NS);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  unsigned port = ember__collector_api_port(c);
  static char body[1 << 16];
  if (!wait_health(port, 503, body, sizeof body, 120000))
    fail_msg("/healthz stayed ready (stored %.0f, splits %.0f)",
             tu_metric(port, "ember_collector_profiles_stored_total"),
             tu_metric(port, "ember_collector_batch_splits_total"));
  assert_non_null(strstr(body, "map is full"));
  assert_true(tu_metric(port, "ember_collector_batch_splits_total") >= 1);
  double stored = tu_metric(port, "ember_collector_profiles_stored_total");
  assert_true(stored > 0 && stored < N);
  ember__collector_stop(c);
  ember_config_free(cfg);

  static const char *const larger[] = {
      "store.map_size", "1048576", "store.max_size", "67108864", "batch.max_messages",
      "1000",           NULL};
  cfg = store_cfg(dir, larger);
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("restart: %s", err);
  port = ember__collector_api_port(c);
  if (!wait_metric(port, "ember_collector_profiles_stored_total", (double)N - stored, 120000))
    fail_msg("stored %.0f of %.0f after the restart",
             tu_metric(port, "ember_collector_profiles_stored_total"), (double)N - stored);
  assert_true(wait_health(port, 200, body, sizeof body, 10000));
  assert_true(wait_metric(port, "ember_store_map_grows_total", 1, 10000));
  assert_true(tu_metric(port, "ember_store_map_bytes") > 1048576);
  int64_t end = BASE_NS + (int64_t)N * 10000000000LL;
  assert_queries_answer(port, BASE_NS, end);
  ember__collector_stop(c);
  int64_t work_b = 0;
  assert_int_equal(tu_stored_samples(dir, "w-disk", BASE_NS, end, &work_b), want);
  assert_int_equal(work_b, N);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* A store whose pages are garbage: the collector refuses to start with a
 * sentence that says how to recover, and does not crash (the verification
 * ran in a child). */
static void test_collector_refuses_a_damaged_store(void **state) {
  (void)state;
  char dir[512], path[600], err[1024] = "";
  snprintf(dir, sizeof dir, "%s/collector-damaged-%d", EMBER_TEST_TMP, (int)getpid());
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  ember_store_t *s = NULL;
  ember_store_opts_t so = {.map_size = (size_t)16 << 20, .no_sync = true};
  assert_int_equal(ember_store_open(path, &so, &s, err, sizeof err), 0);
  for (uint64_t i = 0; i < 200; i++) {
    ember_profile_t *p = tu_profile("agent-x", i, "w-x", "h", BASE_NS + (int64_t)i * 10000000000LL);
    assert_int_equal(ember_store_write(s, &p, 1, NULL), 0);
    ember_profile_free(p);
  }
  ember_store_close(s);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  char page[4096];
  uint64_t x = 88172645463325252ULL;
  for (off_t off = 2 * 4096; off + 4096 <= st.st_size; off += 4096) {
    for (size_t i = 0; i < sizeof page; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      page[i] = (char)x;
    }
    assert_int_equal(pwrite(fd, page, sizeof page, off), (ssize_t)sizeof page);
  }
  close(fd);

  ember_config_t *cfg = store_cfg(dir, NULL);
  ember__collector_t *c = NULL;
  assert_int_equal(ember__collector_start(cfg, NULL, &c, err, sizeof err), EMBER_ECORRUPT);
  assert_null(c);
  assert_non_null(strstr(err, "is damaged"));
  assert_non_null(strstr(err, "rebuild it from Kafka"));
  assert_non_null(strstr(err, "mdb_copy"));
  ember_config_free(cfg);
}

/* GET /api/v1/collectors, parsed (NULL unless 200 and JSON). */
static json_t *get_collectors(unsigned port) {
  static char body[1 << 16];
  if (tu_http_get(port, "/api/v1/collectors", body, sizeof body) != 200) return NULL;
  return json_loads(body, 0, NULL);
}

/* The entry of `id` in a /api/v1/collectors answer, or NULL (borrowed). */
static json_t *collector_entry(json_t *doc, const char *id) {
  json_t *arr = json_object_get(doc, "collectors"), *o;
  size_t i;
  json_array_foreach(arr, i, o) {
    if (strcmp(json_string_value(json_object_get(o, "id")), id) == 0) return o;
  }
  return NULL;
}

/* Wait until `pred` holds of the answer (at most timeout_ms). */
static bool wait_collectors(unsigned port, bool (*pred)(json_t *doc), int timeout_ms) {
  for (int t = 0; t < timeout_ms; t += 100) {
    json_t *doc = get_collectors(port);
    bool ok = doc != NULL && pred(doc);
    json_decref(doc);
    if (ok) return true;
    usleep(100000);
  }
  return false;
}

static bool self_holds_all(json_t *doc) {
  json_t *a = collector_entry(doc, "unit-a");
  return a != NULL && json_is_true(json_object_get(a, "self")) &&
         json_is_true(json_object_get(a, "live")) &&
         json_array_size(json_object_get(a, "assigned")) == 4 &&
         strcmp(json_string_value(json_object_get(doc, "self")), "unit-a") == 0;
}

static bool peer_b_live(json_t *doc) {
  json_t *b = collector_entry(doc, "unit-b");
  return b != NULL && json_is_true(json_object_get(b, "live")) &&
         json_is_false(json_object_get(b, "self")) &&
         json_array_size(json_object_get(b, "runs")) == 1;
}

static bool peer_b_gone(json_t *doc) {
  return collector_entry(doc, "unit-a") != NULL && collector_entry(doc, "unit-b") == NULL;
}

/* The last record keyed `key` on ember.collectors, decoded; false when none. */
static bool last_collector_record(const char *brokers, const char *key,
                                  ember_collector_info_t *out) {
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  char group[64];
  snprintf(group, sizeof group, "fleet-reader-%d", (int)getpid());
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", group, err, sizeof err);
  rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err);
  rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  assert_non_null(c);
  rd_kafka_poll_set_consumer(c);
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(l, EMBER_TOPIC_COLLECTORS, RD_KAFKA_PARTITION_UA);
  assert_int_equal(rd_kafka_subscribe(c, l), 0);
  rd_kafka_topic_partition_list_destroy(l);
  bool found = false;
  int idle = 0;
  for (int t = 0; t < 300 && idle < (found ? 20 : 300); t++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) {
      idle++;
      continue;
    }
    idle = 0;
    if (m->err == 0 && m->key_len == strlen(key) && memcmp(m->key, key, m->key_len) == 0) {
      ember_collector_info_t d;
      if (ember_codec_decode_collector(m->payload, m->len, &d, err, sizeof err) == 0) {
        if (found) ember_collector_info_clear(out);
        *out = d;
        found = true;
      }
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  return found;
}

/* The fleet on the embedded Kafka: the collector lists itself in
 * /api/v1/collectors (live, every partition of ember.profiles assigned),
 * takes a peer's record in, counts a malformed one, forgets a peer on its
 * tombstone, and its last record after a clean stop says stopping; a bad
 * fleet.advertise_url stops the start with a sentence naming the key. */
static void test_collector_fleet_announces_and_lists_peers(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/fleet-%d", EMBER_TEST_TMP, (int)getpid());
  static const char *const extra[] = {"collector_id",
                                      "unit-a",
                                      "fleet.advertise_url",
                                      "http://unit-a.example:7272",
                                      "fleet.announce_interval",
                                      "200ms",
                                      NULL};
  ember_config_t *cfg = store_cfg(dir, extra);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  const char *brokers = ember_kafka_brokers(k);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  unsigned port = ember__collector_api_port(c);
  /* The mock cluster's first join takes 3 s. */
  assert_true(wait_collectors(port, self_holds_all, 30000));
  assert_true(wait_metric(port, "ember_fleet_announcements_total", 2, 10000));
  assert_true(wait_metric(port, "ember_fleet_peers_live", 1, 10000));

  /* A peer, and garbage under another key. */
  ember_collector_run_t run = {
      .partition = 1, .start = 10, .stored_end = 20, .committed = 20, .windows = 10};
  int32_t parts[] = {1};
  int64_t now = ember_time_now_ns();
  char idb[] = "unit-b", grp[] = "ember-collector", url[] = "http://unit-b.example:7272";
  ember_collector_info_t b = {.id = idb,
                              .group_id = grp,
                              .api_url = url,
                              .started_ns = now,
                              .announced_ns = now,
                              .seq = 1,
                              .interval_ms = 60000,
                              .runs = &run,
                              .nruns = 1,
                              .assigned = parts,
                              .nassigned = 1};
  ember_buf_t enc;
  ember_buf_init(&enc, 1 << 20);
  assert_int_equal(ember_codec_encode_collector(&b, &enc), 0);
  const void *v[] = {enc.data};
  const size_t vl[] = {enc.len};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_COLLECTORS, "unit-b", v, vl, 1).ok, 1);
  static const char junk[] = "not a collector";
  const void *jv[] = {junk};
  const size_t jl[] = {sizeof junk - 1};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_COLLECTORS, "junk", jv, jl, 1).ok, 1);
  ember_buf_free(&enc);
  assert_true(wait_collectors(port, peer_b_live, 20000));
  assert_true(wait_metric(port, "ember_fleet_malformed_total", 1, 10000));
  assert_true(wait_metric(port, "ember_fleet_peers_live", 2, 10000));
  /* Its tombstone. */
  const void *tv[] = {""};
  const size_t tl[] = {0};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_COLLECTORS, "unit-b", tv, tl, 1).ok, 1);
  assert_true(wait_collectors(port, peer_b_gone, 20000));
  ember__collector_stop(c);

  ember_collector_info_t last = {0};
  assert_true(last_collector_record(brokers, "unit-a", &last));
  assert_true(last.stopping);
  assert_int_equal(last.nassigned, 0);
  assert_string_equal(last.api_url, "http://unit-a.example:7272");
  assert_string_equal(last.group_id, "ember-collector");
  assert_int_equal(last.interval_ms, 200);
  ember_collector_info_clear(&last);
  ember_config_free(cfg);

  /* What peers would refuse, the start refuses. */
  static const char *const bad[] = {"fleet.advertise_url", "ftp://unit-a", NULL};
  cfg = store_cfg(dir, bad);
  c = NULL;
  assert_int_equal(ember__collector_start(cfg, k, &c, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "fleet.advertise_url"));
  assert_null(c);
  ember_config_free(cfg);
  ember_kafka_free(k);
}

int main(void) {
  /* The tests' tmpfs mounts must not outlive a failed run. */
  (void)tu_private_mounts();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collector_disk_full_then_freed),
      cmocka_unit_test(test_collector_map_full_splits_then_grows),
      cmocka_unit_test(test_collector_refuses_a_damaged_store),
      cmocka_unit_test(test_collector_ingest_dlq_and_duplicates),
      cmocka_unit_test(test_collector_isolates_what_the_store_refuses),
      cmocka_unit_test(test_collector_bad_config),
      cmocka_unit_test(test_collector_fleet_announces_and_lists_peers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
