/* On-demand sessions on the embedded Kafka: the collector routes a session
 * from the registry to the right host's agent, follows the agent's events
 * and its result, serves the merged result without counting it in the
 * continuous series, and refuses what it should. The test plays the agents
 * by producing to ember.targets, ember.events and ember.profiles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "collector.h"
#include "common/testutil.h"
#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/sign.h"

#define TOKEN "Authorization: Bearer s3ss\r\n"

static unsigned port;
static const char *brokers;

/* One request to this test's collector (tu_http). */
static int http(const char *method, const char *path, const char *headers, const char *body,
                char *out, size_t size) {
  return tu_http(port, method, path, headers, body, out, size);
}

static json_t *get_json(const char *path, int want) {
  static char body[1 << 18];
  int st = http("GET", path, TOKEN, NULL, body, sizeof body);
  if (st != want) fail_msg("GET %s: want %d, got %d %s", path, want, st, body);
  json_t *j = json_loads(body, 0, NULL);
  assert_non_null(j);
  return j;
}

static void produce_target(const char *host, const char *actor, uint32_t pid) {
  char key[64], h[32], w[] = "w-sess", a[32], v[] = "1.0";
  snprintf(key, sizeof key, "%s/%u", host, pid);
  snprintf(h, sizeof h, "%s", host);
  snprintf(a, sizeof a, "%s", actor);
  ember_target_record_t t = {
      .host = h, .worker = w, .version = v, .actor = a, .pid = pid, .seen_ns = ember_time_now_ns()};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_target(&t, &b), 0);
  const void *vals[] = {b.data};
  const size_t lens[] = {b.len};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_TARGETS, key, vals, lens, 1).ok, 1);
  ember_buf_free(&b);
}

static void produce_event_msg(const char *id, const char *host, ember_event_state_t st,
                              uint64_t samples, const char *message) {
  char sid[64], h[32], agent[] = "agent-x", msg[256];
  snprintf(sid, sizeof sid, "%s", id);
  snprintf(h, sizeof h, "%s", host);
  snprintf(msg, sizeof msg, "%s", message ? message : "");
  ember_event_t e = {.state = st,
                     .session_id = sid,
                     .host = h,
                     .agent_id = agent,
                     .message = message ? msg : NULL,
                     .targets = 1,
                     .hz = 99,
                     .samples = samples,
                     .at_ns = ember_time_now_ns()};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&e, &b), 0);
  const void *vals[] = {b.data};
  const size_t lens[] = {b.len};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_EVENTS, id, vals, lens, 1).ok, 1);
  ember_buf_free(&b);
}

static void produce_event(const char *id, const char *host, ember_event_state_t st,
                          uint64_t samples) {
  produce_event_msg(id, host, st, samples, NULL);
}

/* A consumer of ember.commands from the start, in a fresh group. */
static rd_kafka_t *commands_consumer(void) {
  char err[512], group[64];
  static int k;
  snprintf(group, sizeof group, "cmd-reader-%d-%d", (int)getpid(), k++);
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", group, err, sizeof err);
  rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err);
  rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  assert_non_null(c);
  rd_kafka_poll_set_consumer(c);
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(l, EMBER_TOPIC_COMMANDS, RD_KAFKA_PARTITION_UA);
  assert_int_equal(rd_kafka_subscribe(c, l), 0);
  rd_kafka_topic_partition_list_destroy(l);
  return c;
}

/* Every command the collector sends is signed with the configured key:
 * an agent holding it accepts the message as it came from Kafka. */
static void check_signed(const rd_kafka_message_t *m) {
  static ember_sign_key_t key;
  char err[512];
  assert_int_equal(ember_sign_key_load(tu_command_key_file(), &key, err, sizeof err), 0);
  ember_sign_envelope_t env = {.value = m->payload, .len = m->len};
  rd_kafka_headers_t *h = NULL;
  assert_int_equal(rd_kafka_message_headers(m, &h), 0);
  const void *v = NULL;
  assert_int_equal(rd_kafka_header_get_last(h, EMBER_SIGN_HEADER_KEY, &v, &env.key_id_len), 0);
  env.key_id = v;
  assert_int_equal(rd_kafka_header_get_last(h, EMBER_SIGN_HEADER_MAC, &v, &env.mac_len), 0);
  env.mac = v;
  ember_sign_policy_t p = {
      .keys = &key, .nkeys = 1, .max_ttl_ns = 600000000000LL, .skew_ns = 30000000000LL};
  ember_command_t c = {0};
  ember_sign_verdict_t verdict =
      ember_sign_check_command(&p, NULL, &env, NULL, ember_time_now_ns(), &c, err, sizeof err);
  if (verdict != EMBER_SIGN_OK) fail_msg("command not accepted: %s", err);
  ember_command_clear(&c);
}

/* The commands of session `id` seen within max_ms (stopping idle_ms after
 * `want` were seen). */
static size_t consume_commands(rd_kafka_t *c, const char *id, size_t want, int max_ms,
                               ember_command_t *out, size_t cap) {
  size_t n = 0;
  int idle = 0;
  for (int t = 0; t < max_ms; t += 100) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) {
      if (n >= want && (idle += 100) >= 1500) break;
      continue;
    }
    ember_command_t cmd;
    char err[256];
    if (m->err == 0 && ember_codec_decode_command(m->payload, m->len, &cmd, err, sizeof err) == 0) {
      if (strcmp(cmd.session_id, id) == 0 && n < cap) {
        check_signed(m);
        assert_int_equal(m->key_len, strlen(cmd.host));
        assert_memory_equal(m->key, cmd.host, m->key_len);
        out[n++] = cmd;
      } else {
        ember_command_clear(&cmd);
      }
    }
    rd_kafka_message_destroy(m);
  }
  return n;
}

static bool wait_state(const char *id, const char *want, int max_ms) {
  char path[128];
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  for (int t = 0; t < max_ms; t += 200) {
    json_t *j = get_json(path, 200);
    bool ok = strcmp(json_string_value(json_object_get(j, "state")), want) == 0;
    json_decref(j);
    if (ok) return true;
    usleep(200000);
  }
  return false;
}

static void expect_error(const char *method, const char *path, const char *body, int status,
                         const char *needle) {
  static char out[1 << 16];
  int st = http(method, path, TOKEN, body, out, sizeof out);
  if (st != status || strstr(out, needle) == NULL)
    fail_msg("%s %s %s: want %d with \"%s\", got %d %s", method, path, body ? body : "", status,
             needle, st, out);
}

static void test_sessions_end_to_end(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/sessions-%d", EMBER_TEST_TMP, (int)getpid());
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {
      {"brokers", "embedded"},       {"data_dir", dir},
      {"api.listen", "127.0.0.1:0"}, {"store.sync", "false"},
      {"batch.linger", "50ms"},      {"retention", "0"},
      {"api.token", "s3ss"},         {"session.max_duration", "10s"},
      {"session.max_hz", "500"},     {"command_key_file", tu_command_key_file()}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  assert_int_equal(ember_config_check(cfg, ember__collector_config_keys, err, sizeof err), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  brokers = ember_kafka_brokers(k);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  port = ember__collector_api_port(c);

  /* Actor A on h1, actor B on h2 (two isolates). */
  produce_target("h1", "A", 100);
  produce_target("h2", "B", 200);
  produce_target("h2", "B", 201);
  json_t *j = NULL;
  for (int t = 0; t < 150; t++) {
    j = get_json("/api/v1/targets?worker=w-sess", 200);
    size_t n = json_array_size(json_object_get(j, "targets"));
    json_decref(j);
    if (n == 3) break;
    usleep(100000);
  }

  /* The token applies. */
  assert_int_equal(http("GET", "/api/v1/sessions", NULL, NULL, NULL, 0), 401);
  assert_int_equal(http("POST", "/api/v1/sessions", NULL, "{\"actor\":\"B\"}", NULL, 0), 401);

  /* Bad requests. */
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"Z\"}", 404,
               "no isolate of actor Z was seen in the last minute");
  expect_error("POST", "/api/v1/sessions", "{\"worker\":\"nope\"}", 404,
               "no isolate of worker nope was seen in the last minute");
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"B\",\"duration_ms\":60000}", 400,
               "duration_ms");
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"B\",\"hz\":501}", 400, "\\\"hz\\\"");
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"B\",\"type\":\"gpu\"}", 400,
               "is not a session type");
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"B\",\"duration_ms\":\"5s\"}", 400,
               "duration_ms");
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"B\",\"colour\":1}", 400,
               "unknown field \\\"colour\\\"");
  expect_error("POST", "/api/v1/sessions", "{\"actor\":", 400, "not valid JSON");
  expect_error("POST", "/api/v1/sessions", "[1]", 400, "JSON object");
  expect_error("POST", "/api/v1/sessions", "{}", 400, "\\\"worker\\\" or \\\"actor\\\"");
  expect_error("GET", "/api/v1/sessions/0123abcd", NULL, 404, "no session 0123abcd");
  expect_error("GET", "/api/v1/sessions/0123abcd/profile", NULL, 404, "no session");
  expect_error("POST", "/api/v1/sessions/0123abcd/cancel", NULL, 404, "no session");
  expect_error("DELETE", "/api/v1/sessions", NULL, 405, "not allowed");

  /* A session for actor B goes to h2 only, with its two pids. */
  rd_kafka_t *cc = commands_consumer();
  static char body[1 << 16];
  int st = http("POST", "/api/v1/sessions", TOKEN,
                "{\"actor\":\"B\",\"duration_ms\":2000,\"hz\":99}", body, sizeof body);
  if (st != 201) fail_msg("POST: %d %s", st, body);
  j = json_loads(body, 0, NULL);
  assert_non_null(j);
  char id[64];
  snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
  assert_int_equal(strlen(id), 32);
  assert_string_equal(json_string_value(json_object_get(j, "state")), "pending");
  assert_int_equal(json_array_size(json_object_get(j, "hosts")), 1);
  json_decref(j);
  ember_command_t cmds[4];
  size_t n = consume_commands(cc, id, 1, 20000, cmds, 4);
  assert_int_equal(n, 1);
  assert_int_equal(cmds[0].kind, EMBER_CMD_START);
  assert_string_equal(cmds[0].host, "h2");
  assert_string_equal(cmds[0].actor, "B");
  assert_int_equal(cmds[0].npids, 2);
  assert_true(cmds[0].pids[0] == 200 && cmds[0].pids[1] == 201);
  assert_int_equal(cmds[0].duration_ms, 2000);
  assert_int_equal(cmds[0].hz, 99);
  assert_int_equal(cmds[0].ttl_ms, 30000);
  assert_int_equal(cmds[0].type, EMBER_SESSION_CPU);
  ember_command_clear(&cmds[0]);

  char path[160];
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=top", id);
  expect_error("GET", path, NULL, 409, "is pending");

  /* The agent accepts; the events consumer starts from the latest offset
   * once it has joined, so repeat until it is seen. */
  bool running = false;
  for (int t = 0; t < 30 && !running; t++) {
    produce_event(id, "h2", EMBER_EV_ACCEPTED, 0);
    running = wait_state(id, "running", 1000);
  }
  assert_true(running);
  produce_event(id, "h2", EMBER_EV_RUNNING, 1);

  /* The result, then DONE. */
  int64_t now = ember_time_now_ns();
  ember_profile_t *p = tu_profile("agent-x", 7, "w-sess", "h2", now - 10000000000LL);
  assert_int_equal(ember_profile_set_origin(p, "agent-x", 7, id), 0);
  int64_t samples = ember_profile_total(p, 0);
  assert_int_equal(samples, tu_profile_samples(7) + 1);
  ember_buf_t enc;
  ember_buf_init(&enc, 1 << 20);
  assert_int_equal(ember_codec_encode(p, &enc), 0);
  ember_profile_free(p);
  const void *vals[] = {enc.data, enc.data};
  const size_t lens[] = {enc.len, enc.len}; /* and a replay of it */
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_PROFILES, "w-sess", vals, lens, 2).ok, 2);
  ember_buf_free(&enc);
  produce_event(id, "h2", EMBER_EV_DONE, (uint64_t)samples);
  assert_true(wait_state(id, "done", 15000));

  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  j = get_json(path, 200);
  json_t *h0 = json_array_get(json_object_get(j, "hosts"), 0);
  assert_string_equal(json_string_value(json_object_get(h0, "state")), "done");
  assert_int_equal(json_integer_value(json_object_get(h0, "samples")), samples);
  assert_true(json_real_value(json_object_get(j, "progress")) == 1.0);
  assert_non_null(strstr(json_string_value(json_object_get(json_object_get(j, "result"), "pprof")),
                         "format=pprof"));
  json_decref(j);
  j = get_json("/api/v1/sessions", 200);
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(json_object_get(j, "sessions"), 0), "id")),
      id);
  json_decref(j);

  /* The merged result, counted once despite the replay. */
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=top&type=samples", id);
  j = get_json(path, 200);
  assert_int_equal(json_integer_value(json_object_get(j, "total")), samples);
  json_decref(j);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=top", id);
  j = get_json(path, 200);
  assert_int_equal(json_integer_value(json_object_get(j, "total")), samples * 10000000);
  json_decref(j);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=tree", id);
  j = get_json(path, 200);
  json_decref(j);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=pprof", id);
  assert_int_equal(http("GET", path, TOKEN, NULL, body, sizeof body), 200);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=jpeg", id);
  expect_error("GET", path, NULL, 400, "not a format");

  /* The continuous series hold the agent's windows, not the result. */
  int64_t cont =
      tu_produce_profiles(brokers, "agent-x", 100, 1, "w-sess", "h2", now - 20000000000LL);
  int64_t total = -1;
  for (int t = 0; t < 100 && total != cont; t++) {
    j = get_json("/api/v1/profile?worker=w-sess&from=-1d&to=now&format=top&type=samples", 200);
    total = json_integer_value(json_object_get(j, "total"));
    json_decref(j);
    if (total != cont) usleep(100000);
  }
  assert_int_equal(total, cont);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/cancel", id);
  expect_error("POST", path, NULL, 409, "already done");

  /* Cancel: a session for actor A goes to h1; cancelling sends STOP
   * there, and as no host started it is cancelled at once. */
  st = http("POST", "/api/v1/sessions", TOKEN, "{\"actor\":\"A\",\"duration_ms\":3000}", body,
            sizeof body);
  assert_int_equal(st, 201);
  j = json_loads(body, 0, NULL);
  snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
  json_decref(j);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/cancel", id);
  st = http("POST", path, TOKEN, NULL, body, sizeof body);
  if (st != 200) fail_msg("cancel: %d %s", st, body);
  assert_non_null(strstr(body, "\"state\":\"cancelled\""));
  n = consume_commands(cc, id, 2, 20000, cmds, 4);
  assert_int_equal(n, 2);
  assert_int_equal(cmds[0].kind, EMBER_CMD_START);
  assert_int_equal(cmds[1].kind, EMBER_CMD_STOP);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(cmds[i].host, "h1");
    ember_command_clear(&cmds[i]);
  }
  rd_kafka_consumer_close(cc);
  rd_kafka_destroy(cc);

  /* Metrics. */
  assert_true(http("GET", "/metrics", TOKEN, NULL, body, sizeof body) == 200);
  assert_non_null(strstr(body, "ember_sessions_created_total 2"));
  assert_non_null(strstr(body, "ember_sessions_done_total 1"));
  assert_non_null(strstr(body, "ember_sessions_cancelled_total 1"));
  assert_non_null(strstr(body, "ember_sessions_commands_total 3"));

  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* POST a session; returns its id in `id` (201 expected) and the number of
 * hosts it was routed to. */
static size_t post_session(const char *body, char *id, size_t size) {
  static char out[1 << 16];
  int st = http("POST", "/api/v1/sessions", TOKEN, body, out, sizeof out);
  if (st != 201) fail_msg("POST %s: %d %s", body, st, out);
  json_t *j = json_loads(out, 0, NULL);
  assert_non_null(j);
  snprintf(id, size, "%s", json_string_value(json_object_get(j, "id")));
  size_t n = json_array_size(json_object_get(j, "hosts"));
  json_decref(j);
  return n;
}

/* Routing to `instances` hosts, a host's rejection failing the session
 * with its message, and session.max_active (429). */
static void test_sessions_instances_failure_limit(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/sessions2-%d", EMBER_TEST_TMP, (int)getpid());
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {{"brokers", "embedded"},
                         {"data_dir", dir},
                         {"api.listen", "127.0.0.1:0"},
                         {"store.sync", "false"},
                         {"retention", "0"},
                         {"api.token", "s3ss"},
                         {"session.max_active", "3"},
                         {"session.answer_timeout", "1s"},
                         {"command_key_file", tu_command_key_file()}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  brokers = ember_kafka_brokers(k);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  port = ember__collector_api_port(c);
  produce_target("h2", "B", 200);
  produce_target("h1", "A", 100);
  produce_target("h3", "C", 300);
  for (int t = 0; t < 150; t++) {
    json_t *j = get_json("/api/v1/targets?worker=w-sess", 200);
    size_t n = json_array_size(json_object_get(j, "targets"));
    json_decref(j);
    if (n == 3) break;
    usleep(100000);
  }

  /* instances: 2 of the worker's three hosts, the first by name. */
  rd_kafka_t *cc = commands_consumer();
  char id[64];
  /* Long enough that it cannot expire (1 s past its end) while the
   * rejections below take their time to arrive. */
  assert_int_equal(
      post_session("{\"worker\":\"w-sess\",\"instances\":2,\"duration_ms\":30000}", id, sizeof id),
      2);
  ember_command_t cmds[4];
  size_t n = consume_commands(cc, id, 2, 20000, cmds, 4);
  assert_int_equal(n, 2);
  bool h1 = false, h2 = false;
  for (size_t i = 0; i < n; i++) {
    h1 |= strcmp(cmds[i].host, "h1") == 0;
    h2 |= strcmp(cmds[i].host, "h2") == 0;
    ember_command_clear(&cmds[i]);
  }
  assert_true(h1 && h2);
  rd_kafka_consumer_close(cc);
  rd_kafka_destroy(cc);
  expect_error("POST", "/api/v1/sessions", "{\"worker\":\"w-sess\",\"instances\":0}", 400,
               "instances");

  /* Both hosts reject: the session fails, with their reasons. */
  bool failed = false;
  for (int t = 0; t < 30 && !failed; t++) {
    produce_event_msg(id, "h1", EMBER_EV_REJECTED, 0, "pid 100 is already being sampled");
    produce_event_msg(id, "h2", EMBER_EV_REJECTED, 0, "no such actor here");
    failed = wait_state(id, "failed", 1000);
  }
  assert_true(failed);
  char path[128];
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  json_t *j = get_json(path, 200);
  json_t *hosts = json_object_get(j, "hosts");
  assert_int_equal(json_array_size(hosts), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *h = json_array_get(hosts, i);
    assert_string_equal(json_string_value(json_object_get(h, "state")), "rejected");
    assert_non_null(json_string_value(json_object_get(h, "message")));
  }
  assert_true(json_is_null(json_object_get(j, "result")));
  json_decref(j);
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile", id);
  expect_error("GET", path, NULL, 409, "failed");

  /* A host that never answers: expired once the session's end is 1 s
   * (session.answer_timeout) past, with the host still "sent". */
  assert_int_equal(post_session("{\"actor\":\"B\",\"duration_ms\":500}", id, sizeof id), 1);
  assert_true(wait_state(id, "expired", 15000));
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  j = get_json(path, 200);
  assert_string_equal(
      json_string_value(json_object_get(json_array_get(json_object_get(j, "hosts"), 0), "state")),
      "sent");
  json_decref(j);

  /* session.max_active = 3: a fourth active session is a 429. */
  char ids[3][64];
  for (size_t i = 0; i < 3; i++) post_session("{\"actor\":\"C\"}", ids[i], sizeof ids[i]);
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"A\"}", 429, "session.max_active");
  snprintf(path, sizeof path, "/api/v1/sessions/%s/cancel", ids[0]);
  assert_int_equal(http("POST", path, TOKEN, NULL, NULL, 0), 200);
  post_session("{\"actor\":\"A\"}", id, sizeof id); /* room again */

  static char body[1 << 16];
  assert_true(http("GET", "/metrics", TOKEN, NULL, body, sizeof body) == 200);
  assert_non_null(strstr(body, "ember_sessions_created_total 6"));
  assert_non_null(strstr(body, "ember_sessions_expired_total 1"));
  assert_non_null(strstr(body, "ember_sessions_failed_total 1"));
  assert_non_null(strstr(body, "ember_sessions_cancelled_total 1"));
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* ---- fleet-wide sessions: collectors' events ------------------------- */

static void produce_raw_event(const ember_event_t *e) {
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(e, &b), 0);
  const void *vals[] = {b.data};
  const size_t lens[] = {b.len};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_EVENTS, e->session_id, vals, lens, 1).ok, 1);
  ember_buf_free(&b);
}

/* Another collector's CREATED for hosts h1 and h2. */
static void produce_created(const char *id, int64_t created_ns) {
  char sid[64], w[] = "w-sess", h1[] = "h1", h2[] = "h2";
  snprintf(sid, sizeof sid, "%s", id);
  char *hosts[] = {h1, h2};
  ember_event_t e = {.state = EMBER_EV_CREATED,
                     .session_id = sid,
                     .worker = w,
                     .type = EMBER_SESSION_CPU,
                     .duration_ms = 2000,
                     .hz = 99,
                     .hosts = hosts,
                     .nhosts = 2,
                     .created_ns = created_ns,
                     .at_ns = created_ns};
  produce_raw_event(&e);
}

static void produce_stored(const char *id, const char *host, uint64_t seq, uint64_t samples) {
  char sid[64], h[32], agent[] = "agent-x";
  snprintf(sid, sizeof sid, "%s", id);
  snprintf(h, sizeof h, "%s", host);
  ember_event_t e = {.state = EMBER_EV_STORED,
                     .session_id = sid,
                     .host = h,
                     .agent_id = agent,
                     .samples = samples,
                     .result_seq = seq,
                     .at_ns = ember_time_now_ns()};
  produce_raw_event(&e);
}

static json_t *wait_session(const char *id, int max_ms) {
  char path[128];
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  static char body[1 << 16];
  for (int t = 0; t < max_ms; t += 100) {
    int st = http("GET", path, TOKEN, NULL, body, sizeof body);
    if (st == 200) return json_loads(body, 0, NULL);
    assert_int_equal(st, 404);
    usleep(100000);
  }
  fail_msg("session %s never appeared", id);
  return NULL;
}

static ember__collector_t *start_collector(ember_config_t *cfg, ember_kafka_t *k) {
  char err[512] = "";
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  port = ember__collector_api_port(c);
  return c;
}

/* Sessions another collector started: built from its CREATED, followed
 * through the agents' events and the STORED events of whichever collector
 * stores the results (done at once, not after session.answer_timeout),
 * cancelled by its CANCEL_REQUESTED; this collector sends no command for
 * them. */
static void test_sessions_from_collector_events(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/sessions4-%d", EMBER_TEST_TMP, (int)getpid());
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {{"brokers", "embedded"},
                         {"data_dir", dir},
                         {"api.listen", "127.0.0.1:0"},
                         {"store.sync", "false"},
                         {"api.token", "s3ss"},
                         {"session.answer_timeout", "120s"},
                         {"command_key_file", tu_command_key_file()}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  brokers = ember_kafka_brokers(k);
  ember__collector_t *c = start_collector(cfg, k);
  rd_kafka_t *cc = commands_consumer();

  const char *id = "00112233445566778899aabbccddeeff";
  int64_t created = ember_time_now_ns();
  produce_created(id, created);
  json_t *j = wait_session(id, 20000);
  assert_string_equal(json_string_value(json_object_get(j, "state")), "pending");
  assert_string_equal(json_string_value(json_object_get(j, "worker")), "w-sess");
  assert_int_equal(json_integer_value(json_object_get(j, "duration_ms")), 2000);
  assert_int_equal(json_integer_value(json_object_get(j, "hz")), 99);
  assert_int_equal(json_integer_value(json_object_get(j, "created_ms")), created / 1000000);
  json_t *hosts = json_object_get(j, "hosts");
  assert_int_equal(json_array_size(hosts), 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(hosts, 0), "state")),
                      "sent");
  json_decref(j);

  produce_event(id, "h1", EMBER_EV_ACCEPTED, 0);
  assert_true(wait_state(id, "running", 10000));
  produce_event(id, "h1", EMBER_EV_DONE, 40);
  produce_event_msg(id, "h2", EMBER_EV_REJECTED, 0, "no such worker here");
  /* The result is stored elsewhere: STORED, twice (a re-delivery), each
   * counted once, in two parts (two results of the host). */
  produce_stored(id, "h1", 7, 30);
  produce_stored(id, "h1", 7, 30);
  char path[128];
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  usleep(1500000);
  j = get_json(path, 200);
  assert_string_equal(json_string_value(json_object_get(j, "state")), "running");
  json_decref(j);
  produce_stored(id, "h1", 8, 10);
  assert_true(wait_state(id, "done", 10000));

  /* Cancelled by the collector that was asked: none of its hosts had
   * started, so at once. */
  const char *id2 = "ffeeddccbbaa99887766554433221100";
  produce_created(id2, ember_time_now_ns());
  j = wait_session(id2, 20000);
  json_decref(j);
  char sid[64];
  snprintf(sid, sizeof sid, "%s", id2);
  ember_event_t cancel = {
      .state = EMBER_EV_CANCEL_REQUESTED, .session_id = sid, .at_ns = ember_time_now_ns()};
  produce_raw_event(&cancel);
  assert_true(wait_state(id2, "cancelled", 10000));
  j = get_json("/api/v1/sessions", 200);
  assert_int_equal(json_array_size(json_object_get(j, "sessions")), 2);
  json_decref(j);

  /* Not ours: no command went out for either. */
  ember_command_t cmds[2];
  assert_int_equal(consume_commands(cc, id, 0, 3000, cmds, 2), 0);
  assert_int_equal(consume_commands(cc, id2, 0, 1000, cmds, 2), 0);
  rd_kafka_consumer_close(cc);
  rd_kafka_destroy(cc);
  static char body[1 << 16];
  assert_true(http("GET", "/metrics", TOKEN, NULL, body, sizeof body) == 200);
  assert_non_null(strstr(body, "ember_sessions_commands_total 0"));
  assert_non_null(strstr(body, "ember_sessions_created_total 0"));
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* A restarted collector rebuilds its sessions from ember.events: states
 * and times as they were, results served, and no command sent again. */
static void test_sessions_survive_restart(void **state) {
  (void)state;
  char dir[512], err[512] = "";
  snprintf(dir, sizeof dir, "%s/sessions5-%d", EMBER_TEST_TMP, (int)getpid());
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {{"brokers", "embedded"},
                         {"data_dir", dir},
                         {"api.listen", "127.0.0.1:0"},
                         {"store.sync", "false"},
                         {"batch.linger", "50ms"},
                         {"retention", "0"},
                         {"api.token", "s3ss"},
                         {"session.answer_timeout", "120s"},
                         {"command_key_file", tu_command_key_file()}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  brokers = ember_kafka_brokers(k);
  ember__collector_t *c = start_collector(cfg, k);
  produce_target("h2", "B", 200);
  for (int t = 0; t < 150; t++) {
    json_t *j = get_json("/api/v1/targets?worker=w-sess", 200);
    size_t n = json_array_size(json_object_get(j, "targets"));
    json_decref(j);
    if (n == 1) break;
    usleep(100000);
  }
  rd_kafka_t *cc = commands_consumer();
  char id[64], id2[64];
  assert_int_equal(post_session("{\"actor\":\"B\",\"duration_ms\":1000}", id, sizeof id), 1);
  ember_command_t cmds[4];
  assert_int_equal(consume_commands(cc, id, 1, 20000, cmds, 4), 1);
  ember_command_clear(&cmds[0]);
  produce_event(id, "h2", EMBER_EV_ACCEPTED, 0);
  assert_true(wait_state(id, "running", 10000));
  int64_t now = ember_time_now_ns();
  ember_profile_t *p = tu_profile("agent-x", 7, "w-sess", "h2", now - 10000000000LL);
  assert_int_equal(ember_profile_set_origin(p, "agent-x", 7, id), 0);
  int64_t samples = ember_profile_total(p, 0);
  ember_buf_t enc;
  ember_buf_init(&enc, 1 << 20);
  assert_int_equal(ember_codec_encode(p, &enc), 0);
  ember_profile_free(p);
  const void *vals[] = {enc.data};
  const size_t lens[] = {enc.len};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_PROFILES, "w-sess", vals, lens, 1).ok, 1);
  ember_buf_free(&enc);
  produce_event(id, "h2", EMBER_EV_DONE, (uint64_t)samples);
  assert_true(wait_state(id, "done", 15000));
  /* And one cancelled while pending. */
  assert_int_equal(post_session("{\"actor\":\"B\",\"duration_ms\":1000}", id2, sizeof id2), 1);
  char path[160];
  snprintf(path, sizeof path, "/api/v1/sessions/%s/cancel", id2);
  assert_int_equal(http("POST", path, TOKEN, NULL, NULL, 0), 200);
  assert_int_equal(consume_commands(cc, id2, 2, 20000, cmds, 4), 2);
  ember_command_clear(&cmds[0]);
  ember_command_clear(&cmds[1]);
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  json_t *before = get_json(path, 200);
  ember__collector_stop(c);

  c = start_collector(cfg, k);
  json_t *after = wait_session(id, 20000);
  assert_true(wait_state(id, "done", 10000));
  json_decref(after);
  after = get_json(path, 200);
  const char *keys[] = {"created_ms", "started_ms", "finished_ms", "samples", "duration_ms"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    assert_int_equal(json_integer_value(json_object_get(before, keys[i])),
                     json_integer_value(json_object_get(after, keys[i])));
  json_decref(before);
  json_decref(after);
  /* Its events may be on another partition, replayed later. */
  json_decref(wait_session(id2, 20000));
  assert_true(wait_state(id2, "cancelled", 10000));
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=top&type=samples", id);
  json_t *j = get_json(path, 200);
  assert_int_equal(json_integer_value(json_object_get(j, "total")), samples);
  json_decref(j);
  /* The replay sent nothing. */
  assert_int_equal(consume_commands(cc, id, 0, 3000, cmds, 4), 0);
  assert_int_equal(consume_commands(cc, id2, 0, 1000, cmds, 4), 0);
  rd_kafka_consumer_close(cc);
  rd_kafka_destroy(cc);
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* No key: the collector starts but refuses sessions with a 503 that says
 * why (agents would refuse unsigned commands). A key file others may read
 * stops it from starting. */
static void test_sessions_need_a_key(void **state) {
  (void)state;
  char dir[512], err[512] = "", keyfile[600];
  snprintf(dir, sizeof dir, "%s/sessions3-%d", EMBER_TEST_TMP, (int)getpid());
  snprintf(keyfile, sizeof keyfile, "%s/open-%d.key", EMBER_TEST_TMP, (int)getpid());
  unlink(keyfile);
  assert_int_equal(ember_sign_key_create(keyfile, err, sizeof err), 0);
  assert_int_equal(chmod(keyfile, 0644), 0);
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *kv[][2] = {{"brokers", "embedded"},       {"data_dir", dir},
                         {"api.listen", "127.0.0.1:0"}, {"store.sync", "false"},
                         {"api.token", "s3ss"},         {"command_key_file", keyfile}};
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
    assert_int_equal(ember_config_set(cfg, kv[i][0], kv[i][1]), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  brokers = ember_kafka_brokers(k);
  ember__collector_t *c = NULL;
  assert_int_not_equal(ember__collector_start(cfg, k, &c, err, sizeof err), 0);
  assert_null(c);
  if (strstr(err, "chmod 600") == NULL || strstr(err, keyfile) == NULL) fail_msg("start: %s", err);
  unlink(keyfile);

  assert_int_equal(ember_config_set(cfg, "command_key_file", ""), 0);
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  port = ember__collector_api_port(c);
  expect_error("POST", "/api/v1/sessions", "{\"actor\":\"B\"}", 503, "command_key_file");
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sessions_end_to_end),
      cmocka_unit_test(test_sessions_instances_failure_limit),
      cmocka_unit_test(test_sessions_need_a_key),
      cmocka_unit_test(test_sessions_from_collector_events),
      cmocka_unit_test(test_sessions_survive_restart),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
