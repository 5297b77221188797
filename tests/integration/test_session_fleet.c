/* Sessions fleet-wide (issue 13, docs/internals/collector.md "Sessions")
 * against the real broker, every part a real process: two collectors in
 * one group (own stores and API ports) and one ember-agent profiling a
 * burn program. A session started on collector A is listed by B, watched
 * to `done` there and downloaded from B with the samples the agent
 * reported (whichever collector stored the result); after A is stopped
 * with SIGTERM and started again, both list it, done, and serve its
 * profile. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <jansson.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "common/testutil.h"
#include "ember/ember.h"

static char tag[96];

typedef struct coll {
  char name[16], dir[600], log[700];
  unsigned port;
  pid_t pid;
} coll_t;

static void start(coll_t *c, const char *name) {
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->dir, sizeof c->dir, "%s/%s-%s", EMBER_TEST_TMP, tag, name);
  snprintf(c->log, sizeof c->log, "%s/%s-%s.log", EMBER_TEST_TMP, tag, name);
  if (c->port == 0) c->port = tu_free_port();
  char g[160], id[160], url[200];
  snprintf(g, sizeof g, "g-%s", tag);
  snprintf(id, sizeof id, "collector_id=%s-%s", name, tag);
  snprintf(url, sizeof url, "fleet.advertise_url=http://127.0.0.1:%u", c->port);
  const char *args[] = {
      "batch.linger=50ms", "fleet.announce_interval=1s", id, url, tu_command_key_arg(), NULL};
  c->pid = tu_start_collector(tu_bootstrap(), c->dir, g, c->port, args, c->log);
}

static void stop(coll_t *c) {
  if (c->pid > 0) tu_stop_daemon(c->pid, c->name, c->log);
  c->pid = 0;
}

/* GET `path` of `c` as JSON (NULL unless 200). */
static json_t *get_json(const coll_t *c, const char *path) {
  static char buf[1 << 20];
  if (tu_http_get(c->port, path, buf, sizeof buf) != 200) return NULL;
  return json_loads(buf, 0, NULL);
}

static int live_members(const coll_t *c) {
  json_t *doc = get_json(c, "/api/v1/collectors");
  size_t i;
  const json_t *o;
  int n = 0;
  json_array_foreach(json_object_get(doc, "collectors"), i, o) {
    const char *id = json_string_value(json_object_get(o, "id"));
    n += json_is_true(json_object_get(o, "live")) && id != NULL && strstr(id, tag) != NULL;
  }
  json_decref(doc);
  return n;
}

/* The session's state on `c` ("" when it is not listed). */
static void state_of(const coll_t *c, const char *id, char *out, size_t size) {
  char path[200];
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  json_t *doc = get_json(c, path);
  const char *st = json_string_value(json_object_get(doc, "state"));
  snprintf(out, size, "%s", st ? st : "");
  json_decref(doc);
}

static bool wait_state(const coll_t *c, const char *id, const char *want, int max_ms) {
  char st[32] = "";
  for (int t = 0; t < max_ms; t += 200) {
    state_of(c, id, st, sizeof st);
    if (strcmp(st, want) == 0) return true;
    usleep(200000);
  }
  print_message("session %s on %s: %s, not %s\n", id, c->name, st[0] ? st : "(unknown)", want);
  return false;
}

/* Is session `id` in the list `c` answers? */
static bool listed(const coll_t *c, const char *id) {
  json_t *doc = get_json(c, "/api/v1/sessions");
  size_t i;
  const json_t *o;
  bool found = false;
  json_array_foreach(json_object_get(doc, "sessions"), i, o) {
    const char *x = json_string_value(json_object_get(o, "id"));
    found |= x != NULL && strcmp(x, id) == 0;
  }
  json_decref(doc);
  return found;
}

/* The session's CPU samples as `c` serves them (local: its own store);
 * -1 unless 200. *partial gets whether the answer says it is partial. */
static int64_t profile_samples(const coll_t *c, const char *id, bool local, bool *partial) {
  char path[240];
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile?format=top&type=samples%s", id,
           local ? "&local=1" : "");
  json_t *doc = get_json(c, path);
  if (doc == NULL) return -1;
  if (partial != NULL) *partial = json_object_get(doc, "partial") != NULL;
  int64_t t = (int64_t)json_integer_value(json_object_get(doc, "total"));
  json_decref(doc);
  return t;
}

static void test_session_fleet(void **state) {
  (void)state;
  snprintf(tag, sizeof tag, "sf-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  const char *brokers = tu_bootstrap();
  coll_t a = {0}, b = {0};
  start(&a, "A");
  start(&b, "B");

  char host[160], sel[200], e_worker[200], e_actor[200], actor[160], alog[700];
  snprintf(host, sizeof host, "%s-host", tag);
  snprintf(actor, sizeof actor, "act-%s", tag);
  snprintf(sel, sizeof sel, "selector=worker=%s-cpu*", tag);
  snprintf(e_worker, sizeof e_worker, "EMBER_WORKER=%s-cpu", tag);
  snprintf(e_actor, sizeof e_actor, "EMBER_ACTOR=%s", actor);
  snprintf(alog, sizeof alog, "%s/%s-agent.log", EMBER_TEST_TMP, tag);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "120", NULL};
  const char *burn_env[] = {e_worker, e_actor, NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);
  char a_brokers[512], a_host[200], a_spool[800];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", host);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/%s-spool", EMBER_TEST_TMP, tag);
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_host,
                              a_spool,
                              sel,
                              "scan_interval=1s",
                              "targets_refresh=2s",
                              "metrics_listen=",
                              tu_command_key_arg(),
                              NULL};
  pid_t agent = tu_spawn(agent_argv, NULL, alog);

  /* Both collectors see each other (fan-out needs the peer table). */
  for (int t = 0; t < 300 && (live_members(&a) < 2 || live_members(&b) < 2); t++) usleep(100000);
  assert_int_equal(live_members(&a), 2);
  assert_int_equal(live_members(&b), 2);

  /* Started on A, retried while A's registry has not seen the burn yet. */
  char body[256], out[1 << 16];
  snprintf(body, sizeof body, "{\"actor\":\"%s\",\"duration_ms\":2000,\"hz\":200}", actor);
  int st = -1;
  for (int t = 0; t < 60; t++) {
    st = tu_http(a.port, "POST", "/api/v1/sessions", "Content-Type: application/json\r\n", body,
                 out, sizeof out);
    if (st != 404) break;
    sleep(1);
  }
  if (st != 201) fail_msg("POST /api/v1/sessions on A: %d %s", st, out);
  json_t *doc = json_loads(out, 0, NULL);
  assert_non_null(doc);
  char id[64];
  snprintf(id, sizeof id, "%s", json_string_value(json_object_get(doc, "id")));
  json_decref(doc);
  print_message("session %s started on A\n", id);

  /* B knows it, and watches it to done: the result may be stored by
   * either collector (its partition's), and STORED tells the other. */
  for (int t = 0; t < 100 && !listed(&b, id); t++) usleep(100000);
  assert_true(listed(&b, id));
  assert_true(wait_state(&b, id, "done", 60000));
  char path[200];
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  doc = get_json(&b, path);
  assert_non_null(doc);
  int64_t samples = (int64_t)json_integer_value(json_object_get(doc, "samples"));
  json_decref(doc);
  print_message("the agent reported %lld samples\n", (long long)samples);
  assert_true(samples > 0);
  bool partial = true;
  assert_int_equal(profile_samples(&b, id, false, &partial), samples);
  assert_false(partial);
  /* A follows the same events, maybe a moment later. */
  assert_true(wait_state(&a, id, "done", 10000));
  assert_int_equal(profile_samples(&a, id, false, &partial), samples);
  assert_false(partial);
  /* One store holds the result, the other none: B's answer came from
   * wherever it was. */
  int64_t la = profile_samples(&a, id, true, NULL), lb = profile_samples(&b, id, true, NULL);
  print_message("stored on A: %lld, on B: %lld\n", (long long)la, (long long)lb);
  assert_int_equal(la + lb, samples);

  /* A restarts: both still list it, done, and serve it. */
  stop(&a);
  start(&a, "A");
  for (int t = 0; t < 200 && !listed(&a, id); t++) usleep(100000);
  assert_true(listed(&a, id));
  assert_true(wait_state(&a, id, "done", 30000));
  assert_true(listed(&b, id));
  assert_true(wait_state(&b, id, "done", 1000));
  for (int t = 0; t < 300 && live_members(&b) < 2; t++) usleep(100000);
  int64_t got = -1;
  for (int t = 0; t < 100 && got != samples; t++) {
    got = profile_samples(&a, id, false, &partial);
    if (got != samples) usleep(200000);
  }
  assert_int_equal(got, samples);
  got = -1;
  for (int t = 0; t < 100 && got != samples; t++) {
    got = profile_samples(&b, id, false, &partial);
    if (got != samples) usleep(200000);
  }
  assert_int_equal(got, samples);
  /* The replay sent nothing: no command from the new A, none from B. */
  assert_true(tu_metric(a.port, "ember_sessions_commands_total") == 0);
  assert_true(tu_metric(b.port, "ember_sessions_commands_total") == 0);

  tu_kill(burn);
  tu_stop_daemon(agent, "ember-agent", alog);
  stop(&a);
  stop(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_session_fleet)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
