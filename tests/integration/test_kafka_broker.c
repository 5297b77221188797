/* Ember's Kafka helpers against a real Apache Kafka broker.
 *
 * CTest starts a single-node broker (tests/kafka/broker.sh, fixture
 * kafka_broker) and passes the file holding its address in
 * EMBER_TEST_BOOTSTRAP_FILE. The tests create Ember's topics, check their
 * layout and settings through the admin API, send encoded profiles through
 * the producer Ember configures and read them back through its consumer.
 *
 * Each run uses its own agent id and consumer groups, so running the binary
 * again against the same broker works: profiles of earlier runs are read
 * but not counted. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "common/testutil.h"
#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/profile.h"

#define TEST_NWORKERS       5u
#define TEST_WINDOW_BASE_NS INT64_C(1700000000000000000)
#define TEST_NPROFILES      200u

static char bootstrap[256]; /* the broker's "host:port" */
static char run_id[64];     /* unique per run: agent id and group prefix */

/* ------------------------------------------------------------ helpers -- */

static ember_kafka_t *kafka_for(const char *brokers) {
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", brokers), 0);
  assert_int_equal(ember_config_set(cfg, "client_id", "ember-integration"), 0);
  assert_int_equal(ember_config_set(cfg, "kafka.linger.ms", "5"), 0);
  ember_kafka_t *k = NULL;
  char err[512] = "";
  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  ember_config_free(cfg);
  if (rc != 0) fail_msg("ember_kafka_new(%s): %s (%s)", brokers, ember_strerror(rc), err);
  assert_false(ember_kafka_is_embedded(k));
  return k;
}

/* Profile `seq` of `agent`: worker w<seq % 5>, two stacks whose totals are
 * a function of seq, so a consumer can check them. */
static ember_profile_t *make_profile(const char *agent, uint64_t seq, char *worker,
                                     size_t worker_size) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  snprintf(worker, worker_size, "w%u", (unsigned)(seq % TEST_NWORKERS));
  ember_labels_t labels = {
      .worker = worker, .version = "1.2.3", .host = "host-b", .pid = 2000u + (uint32_t)seq};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  int64_t start = TEST_WINDOW_BASE_NS + (int64_t)seq * 1000000000;
  assert_int_equal(ember_profile_set_window(p, start, start + 1000000000), 0);
  const ember_frame_t frames[3] = {
      {.function = "memcpy", .module = "/lib/libc.so.6", .kind = EMBER_FRAME_NATIVE},
      {.function = "handle", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
      {.function = "main", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
  };
  const int64_t v1[2] = {(int64_t)seq + 1, ((int64_t)seq + 1) * 1000};
  const int64_t v2[2] = {3, 700};
  assert_int_equal(ember_profile_add(p, frames, 3, v1), 0);
  assert_int_equal(ember_profile_add(p, frames + 1, 2, v2), 0);
  return p;
}

static int64_t expected_samples(uint64_t seq) { return (int64_t)seq + 4; }
static int64_t expected_ns(uint64_t seq) { return ((int64_t)seq + 1) * 1000 + 700; }

/* What a consumer saw of one agent's profiles 0..n-1. */
typedef struct tally {
  const char *agent;
  size_t n;
  unsigned *seen; /* per seq */
  size_t unique;  /* seqs seen at least once */
  size_t dupes;   /* deliveries past the first */
  size_t bad;     /* undecodable or wrong content */
  size_t foreign; /* other agents' (earlier runs') profiles */
  int64_t samples, ns;
} tally_t;

static void tally_message(tally_t *t, const rd_kafka_message_t *m) {
  ember_profile_t *p = NULL;
  char err[256];
  int rc = ember_codec_decode(m->payload, m->len, NULL, &p, err, sizeof err);
  if (rc != 0) {
    /* Not ours: the collector's DLQ tests put malformed messages on the
     * shared topic on purpose. Ours are checked by seq below. */
    print_message("[%d] offset %lld: not a profile (%s), skipped\n", (int)m->partition,
                  (long long)m->offset, err);
    t->foreign++;
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
            l->host != NULL && strcmp(l->host, "host-b") == 0 && l->pid == 2000u + seq &&
            ember_profile_nstacks(p) == 2 && ember_profile_total(p, 0) == expected_samples(seq) &&
            ember_profile_total(p, 1) == expected_ns(seq);
  if (!ok) {
    print_error("[%d] offset %lld: seq %llu: unexpected content\n", (int)m->partition,
                (long long)m->offset, (unsigned long long)seq);
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

static int64_t ms_since(int64_t t0) { return (ember_time_mono_ns() - t0) / 1000000; }

/* Poll `c` until every profile of t->agent has arrived (then `linger_ms`
 * more, to catch duplicates) or `timeout_ms` passes. */
/* Consume until every one of ours has arrived and each of the 4
 * partitions has been read up to ends[partition] (where it ended after we
 * produced: a partition with none of ours may still hold many messages of
 * other tests on this shared broker, and the commit checked afterwards
 * must cover them), then linger. */
static void consume_profiles(rd_kafka_t *c, tally_t *t, const int64_t ends[4], int64_t timeout_ms,
                             int64_t linger_ms) {
  int64_t t0 = ember_time_mono_ns();
  int64_t done_at = -1;
  int64_t next[4] = {0};
  while (ms_since(t0) < timeout_ms) {
    bool caught_up = true;
    for (int i = 0; i < 4; i++) caught_up = caught_up && next[i] >= ends[i];
    if (t->unique == t->n && caught_up) {
      if (done_at < 0) done_at = ms_since(t0);
      if (ms_since(t0) - done_at >= linger_ms) break;
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      print_message("consumer event: %s\n", rd_kafka_message_errstr(m));
    } else {
      tally_message(t, m);
      if (m->partition >= 0 && m->partition < 4 && m->offset + 1 > next[m->partition])
        next[m->partition] = m->offset + 1;
    }
    rd_kafka_message_destroy(m);
  }
}

static rd_kafka_t *consumer_for(const ember_kafka_t *k, const char *group) {
  static const char *const topics[] = {EMBER_TOPIC_PROFILES};
  char err[512] = "";
  rd_kafka_t *c = NULL;
  int rc = ember_kafka_consumer_new(k, group, NULL, topics, 1, &c, err, sizeof err);
  if (rc != 0) fail_msg("ember_kafka_consumer_new: %s", err);
  return c;
}

/* The value of topic config `name` of `topic`, via DescribeConfigs. */
static void topic_config(rd_kafka_t *rk, const char *topic, const char *name, char *out,
                         size_t out_size) {
  rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
  rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
  rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
  assert_non_null(res);
  assert_non_null(opts);
  assert_non_null(q);
  char err[256];
  assert_int_equal(rd_kafka_AdminOptions_set_request_timeout(opts, 10000, err, sizeof err),
                   RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_DescribeConfigs(rk, &res, 1, opts, q);
  rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 15000);
  if (ev == NULL) fail_msg("DescribeConfigs %s: no answer", topic);
  if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR)
    fail_msg("DescribeConfigs %s: %s", topic, rd_kafka_event_error_string(ev));
  const rd_kafka_DescribeConfigs_result_t *result = rd_kafka_event_DescribeConfigs_result(ev);
  assert_non_null(result);
  size_t nres = 0;
  const rd_kafka_ConfigResource_t **rs = rd_kafka_DescribeConfigs_result_resources(result, &nres);
  assert_int_equal(nres, 1);
  if (rd_kafka_ConfigResource_error(rs[0]) != RD_KAFKA_RESP_ERR_NO_ERROR)
    fail_msg("DescribeConfigs %s: %s", topic, rd_kafka_ConfigResource_error_string(rs[0]));
  size_t nconf = 0;
  const rd_kafka_ConfigEntry_t **entries = rd_kafka_ConfigResource_configs(rs[0], &nconf);
  out[0] = '\0';
  bool found = false;
  for (size_t i = 0; i < nconf; i++) {
    if (strcmp(rd_kafka_ConfigEntry_name(entries[i]), name) != 0) continue;
    const char *v = rd_kafka_ConfigEntry_value(entries[i]);
    snprintf(out, out_size, "%s", v ? v : "");
    found = true;
  }
  rd_kafka_event_destroy(ev);
  rd_kafka_queue_destroy(q);
  rd_kafka_AdminOptions_destroy(opts);
  rd_kafka_ConfigResource_destroy(res);
  if (!found) fail_msg("topic %s has no config %s", topic, name);
}

/* -------------------------------------------------------------- tests -- */

static void test_kafka_broker_ensure_topics(void **state) {
  (void)state;
  ember_kafka_t *k = kafka_for(bootstrap);
  char err[512] = "";
  int rc = ember_kafka_ensure_topics(k, 20000, err, sizeof err);
  if (rc != 0) fail_msg("ensure_topics: %s (%s)", ember_strerror(rc), err);
  /* Again: the topics exist now, which is not an error. */
  rc = ember_kafka_ensure_topics(k, 20000, err, sizeof err);
  if (rc != 0) fail_msg("ensure_topics, second call: %s (%s)", ember_strerror(rc), err);

  rd_kafka_t *rk = NULL;
  assert_int_equal(ember_kafka_producer_new(k, NULL, &rk, err, sizeof err), 0);
  static const char *const names[] = {
      EMBER_TOPIC_PROFILES, EMBER_TOPIC_PROFILES_DLQ, EMBER_TOPIC_TARGETS,    EMBER_TOPIC_COMMANDS,
      EMBER_TOPIC_EVENTS,   EMBER_TOPIC_ALERTS,       EMBER_TOPIC_COLLECTORS, EMBER_TOPIC_RULES};
  const struct rd_kafka_metadata *md = NULL;
  assert_int_equal(rd_kafka_metadata(rk, 1, NULL, &md, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int found = -1;
    for (int t = 0; t < md->topic_cnt; t++) {
      if (strcmp(md->topics[t].topic, names[i]) == 0) found = t;
    }
    if (found < 0) fail_msg("topic %s missing after ensure_topics", names[i]);
    assert_int_equal(md->topics[found].err, RD_KAFKA_RESP_ERR_NO_ERROR);
    if (md->topics[found].partition_cnt != 4)
      fail_msg("topic %s has %d partitions, want 4", names[i], md->topics[found].partition_cnt);
  }
  rd_kafka_metadata_destroy(md);

  char value[64];
  topic_config(rk, EMBER_TOPIC_TARGETS, "cleanup.policy", value, sizeof value);
  assert_string_equal(value, "compact");
  topic_config(rk, EMBER_TOPIC_COLLECTORS, "cleanup.policy", value, sizeof value);
  assert_string_equal(value, "compact");
  topic_config(rk, EMBER_TOPIC_RULES, "cleanup.policy", value, sizeof value);
  assert_string_equal(value, "compact");
  /* Rule deletions are kept 30 days: a collector down that long still
   * sees them. */
  topic_config(rk, EMBER_TOPIC_RULES, "delete.retention.ms", value, sizeof value);
  assert_string_equal(value, "2592000000");
  topic_config(rk, EMBER_TOPIC_PROFILES, "cleanup.policy", value, sizeof value);
  assert_string_equal(value, "delete");

  rd_kafka_destroy(rk);
  ember_kafka_free(k);
}

static void test_kafka_broker_round_trip(void **state) {
  (void)state;
  ember_kafka_t *k = kafka_for(bootstrap);
  char err[512] = "";
  int rc = ember_kafka_ensure_topics(k, 20000, err, sizeof err);
  if (rc != 0) fail_msg("ensure_topics: %s (%s)", ember_strerror(rc), err);

  /* Produce. */
  int64_t t0 = ember_time_mono_ns();
  tu_dr_tally_t dr = {0, 0, RD_KAFKA_RESP_ERR_NO_ERROR};
  rd_kafka_conf_t *conf = NULL;
  assert_int_equal(ember_kafka_producer_conf(k, &conf, err, sizeof err), 0);
  rd_kafka_conf_set_dr_msg_cb(conf, tu_on_delivery);
  rd_kafka_conf_set_opaque(conf, &dr);
  rd_kafka_t *p = NULL;
  rc = ember_kafka_producer_new(k, conf, &p, err, sizeof err);
  conf = NULL; /* taken by ember_kafka_producer_new */
  if (rc != 0) fail_msg("ember_kafka_producer_new: %s", err);
  ember_buf_t buf;
  ember_buf_init(&buf, 1u << 20);
  for (uint64_t seq = 0; seq < TEST_NPROFILES; seq++) {
    char worker[16];
    ember_profile_t *prof = make_profile(run_id, seq, worker, sizeof worker);
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
  assert_int_equal(rd_kafka_flush(p, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
  /* Where each partition ended once ours were in; other tests may add
   * more while we consume. */
  int64_t end_after_produce[4] = {0};
  for (int32_t i = 0; i < 4; i++) {
    int64_t lo = 0;
    /* A broker busy with other tests' groups may answer "not leader" for a
     * moment (seen beside CPU hogs): retriable, so retried. */
    rd_kafka_resp_err_t e = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (int t = 0; t < 50; t++) {
      e = rd_kafka_query_watermark_offsets(p, EMBER_TOPIC_PROFILES, i, &lo, &end_after_produce[i],
                                           10000);
      if (e == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      print_message("watermarks of partition %d: %s; again\n", (int)i, rd_kafka_err2str(e));
      usleep(200000);
    }
    assert_int_equal(e, RD_KAFKA_RESP_ERR_NO_ERROR);
  }

  rd_kafka_destroy(p);
  if (dr.failed != 0)
    fail_msg("%zu failed deliveries, first: %s", dr.failed, rd_kafka_err2str(dr.first_err));
  assert_int_equal(dr.ok, TEST_NPROFILES);
  print_message("produced %u profiles in %lld ms\n", TEST_NPROFILES, (long long)ms_since(t0));

  /* Consume in a group of our own, from the earliest offsets. */
  char group[128];
  snprintf(group, sizeof group, "%s-group", run_id);
  t0 = ember_time_mono_ns();
  rd_kafka_t *c = consumer_for(k, group);
  tally_t t = {.agent = run_id, .n = TEST_NPROFILES};
  t.seen = calloc(TEST_NPROFILES, sizeof *t.seen);
  assert_non_null(t.seen);
  consume_profiles(c, &t, end_after_produce, 60000, 1000);
  for (size_t i = 0; i < t.n; i++) {
    if (t.seen[i] != 1) print_error("seq %zu arrived %u times\n", i, t.seen[i]);
  }
  print_message("consumed %zu profiles (+%zu of earlier runs) in %lld ms\n", t.unique, t.foreign,
                (long long)ms_since(t0));
  assert_int_equal(t.bad, 0);
  assert_int_equal(t.dupes, 0);
  assert_int_equal(t.unique, TEST_NPROFILES);
  int64_t want_samples = 0, want_ns = 0;
  for (uint64_t i = 0; i < TEST_NPROFILES; i++) {
    want_samples += expected_samples(i);
    want_ns += expected_ns(i);
  }
  assert_int_equal(t.samples, want_samples);
  assert_int_equal(t.ns, want_ns);
  free(t.seen);

  /* Commit synchronously; the group's offsets then reach at least where
   * every partition ended after we produced. */
  assert_int_equal(rd_kafka_commit(c, NULL, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_t *parts = NULL;
  assert_int_equal(rd_kafka_assignment(c, &parts), RD_KAFKA_RESP_ERR_NO_ERROR);
  assert_int_equal(parts->cnt, 4);
  assert_int_equal(rd_kafka_committed(c, parts, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  for (int i = 0; i < parts->cnt; i++) {
    int64_t hi = end_after_produce[parts->elems[i].partition];
    if (hi > 0 && parts->elems[i].offset < hi)
      fail_msg("partition %d: committed %lld, ended at %lld after producing",
               (int)parts->elems[i].partition, (long long)parts->elems[i].offset, (long long)hi);
  }
  rd_kafka_topic_partition_list_destroy(parts);
  assert_int_equal(rd_kafka_consumer_close(c), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(c);

  /* A new member of the same group starts from the committed offsets: once
   * it holds the partitions, nothing more arrives. */
  t0 = ember_time_mono_ns();
  c = consumer_for(k, group);
  int64_t assigned_at = -1;
  size_t extra = 0;
  while (ms_since(t0) < 30000) {
    if (assigned_at < 0) {
      parts = NULL;
      assert_int_equal(rd_kafka_assignment(c, &parts), RD_KAFKA_RESP_ERR_NO_ERROR);
      if (parts->cnt == 4) assigned_at = ms_since(t0);
      rd_kafka_topic_partition_list_destroy(parts);
    } else if (ms_since(t0) - assigned_at >= 3000) {
      break;
    }
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    /* Other tests (the agent's) may publish to the same topic meanwhile:
     * only this run's messages must not come back. */
    ember_profile_t *mine = NULL;
    char perr[256];
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR &&
        ember_codec_decode(m->payload, m->len, NULL, &mine, perr, sizeof perr) == 0 &&
        ember_profile_agent_id(mine) != NULL && strcmp(ember_profile_agent_id(mine), run_id) == 0) {
      print_error("second consumer got [%d] offset %lld again\n", (int)m->partition,
                  (long long)m->offset);
      extra++;
    }
    ember_profile_free(mine);
    rd_kafka_message_destroy(m);
  }
  if (assigned_at < 0) fail_msg("second consumer got no assignment in 30 s");
  assert_int_equal(extra, 0);
  assert_int_equal(rd_kafka_consumer_close(c), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_destroy(c);
  ember_kafka_free(k);
}

/* Nothing listens on 127.0.0.1:1: clients report errors, return no
 * messages, and neither hang nor crash. */
static void test_kafka_broker_closed_port(void **state) {
  (void)state;
  ember_kafka_t *k = kafka_for("127.0.0.1:1");
  char err[512] = "";

  int64_t t0 = ember_time_mono_ns();
  int rc = ember_kafka_ensure_topics(k, 2000, err, sizeof err);
  print_message("ensure_topics on a closed port: %s (%s) after %lld ms\n", ember_strerror(rc), err,
                (long long)ms_since(t0));
  assert_true(rc == EMBER_ETIMEDOUT || rc == EMBER_EKAFKA);
  assert_true(err[0] != '\0');
  assert_true(ms_since(t0) < 10000);

  t0 = ember_time_mono_ns();
  char group[128];
  snprintf(group, sizeof group, "%s-closed", run_id);
  rd_kafka_t *c = consumer_for(k, group);
  size_t messages = 0, errors = 0;
  while (ms_since(t0) < 3000) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      messages++;
    } else {
      errors++;
    }
    rd_kafka_message_destroy(m);
  }
  assert_int_equal(messages, 0);
  print_message("closed port: %zu error events in 3 s\n", errors);
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  int64_t took = ms_since(t0);
  print_message("closed port: consumer done after %lld ms\n", (long long)took);
  assert_true(took < 15000);
  ember_kafka_free(k);
}

/* ------------------------------------------------------------- set-up -- */

static int group_setup(void **state) {
  (void)state;
  ember_log_set_level(EMBER_LOG_WARN);
  const char *path = getenv("EMBER_TEST_BOOTSTRAP_FILE");
  if (path == NULL || path[0] == '\0') {
    print_error("EMBER_TEST_BOOTSTRAP_FILE is not set: run this test through ctest, which "
                "starts the broker (fixture kafka_broker)\n");
    return -1;
  }
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    print_error("cannot open %s (%s): did broker_start (tests/kafka/broker.sh) succeed?\n", path,
                strerror(errno));
    return -1;
  }
  char *line = fgets(bootstrap, sizeof bootstrap, f);
  fclose(f);
  if (line == NULL) {
    print_error("%s is empty\n", path);
    return -1;
  }
  bootstrap[strcspn(bootstrap, " \t\r\n")] = '\0';
  if (bootstrap[0] == '\0') {
    print_error("%s holds no broker address\n", path);
    return -1;
  }
  snprintf(run_id, sizeof run_id, "ember-it-%ld-%lld", (long)getpid(),
           (long long)ember_time_now_ns());
  print_message("broker %s, run %s\n", bootstrap, run_id);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kafka_broker_ensure_topics),
      cmocka_unit_test(test_kafka_broker_round_trip),
      cmocka_unit_test(test_kafka_broker_closed_port),
  };
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
