/* Alerting end to end against the real broker, every part a real process:
 * ember-agent profiles tests/programs/spike (a worker that idles, burns a
 * known function, idles again), ember-collector stores its windows and
 * evaluates rules after each one, and real HTTP receivers in this process
 * take the webhooks.
 *
 *  - an `above 0.5 cores for 10s` rule goes pending, then firing within
 *    `for` + one window of the burn, then resolved after it; its diff names
 *    spike_burn first; its auto-capture session reaches done with
 *    spike_burn in its flamegraph; the Alertmanager receiver gets one
 *    firing and one resolved notification in the shape Alertmanager's
 *    POST /api/v2/alerts takes; ember.alerts holds both transitions;
 *  - the collector is SIGKILLed while the alert fires and restarted: the
 *    alert is still firing with the same id, and no second firing
 *    notification is sent;
 *  - a second receiver (plain JSON) is down for the first 30 s of the
 *    firing and gets the notification once it is up, while ingest goes on
 *    at its usual rate;
 *  - a `baseline` rule fires on a 4x rise and not on a steady load, a
 *    `function` rule fires when a function's share passes its percent,
 *    and a load flapping across a threshold fires once.
 *
 * Windows are 2 s and rules are evaluated every 2 s, so the test takes
 * about two and a half minutes instead of half an hour; the logic is the
 * same at 10 s. */
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

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#include "common/testutil.h"
#include "ember/ember.h"
#include "ember/parse.h"

static char tag[96], log_path[600], server[64], dir[700], group[160];
static const char *brokers;

/* ---- a webhook receiver: every POST body, by path ---------------------- */

#define MAX_BODIES 64
typedef struct receiver {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  char *bodies[MAX_BODIES];
  size_t n;
  unsigned port;
} receiver_t;

typedef struct upload {
  char *data;
  size_t len;
} upload_t;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls) {
  (void)url;
  (void)version;
  receiver_t *r = cls;
  upload_t *u = *con_cls;
  if (u == NULL) {
    u = calloc(1, sizeof *u);
    *con_cls = u;
    return u ? MHD_YES : MHD_NO;
  }
  if (*size > 0) {
    char *p = realloc(u->data, u->len + *size + 1);
    if (p == NULL) return MHD_NO;
    memcpy(p + u->len, data, *size);
    u->data = p;
    u->len += *size;
    u->data[u->len] = '\0';
    *size = 0;
    return MHD_YES;
  }
  if (strcmp(method, "POST") == 0 && u->data != NULL) {
    pthread_mutex_lock(&r->mu);
    if (r->n < MAX_BODIES) {
      r->bodies[r->n++] = u->data;
      u->data = NULL;
    }
    pthread_mutex_unlock(&r->mu);
  }
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(2, (void *)(uintptr_t) "{}", MHD_RESPMEM_PERSISTENT);
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return ret;
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode code) {
  (void)cls;
  (void)c;
  (void)code;
  upload_t *u = *con_cls;
  if (u != NULL) {
    free(u->data);
    free(u);
  }
  *con_cls = NULL;
}

static void receiver_start(receiver_t *r, unsigned port) {
  if (r->port == 0) pthread_mutex_init(&r->mu, NULL);
  r->port = port;
  r->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
                          NULL, on_request, r, MHD_OPTION_NOTIFY_COMPLETED, on_done, r,
                          MHD_OPTION_END);
  if (r->d == NULL) fail_msg("cannot start a webhook receiver on port %u", port);
}

static void receiver_stop(receiver_t *r) {
  if (r->d != NULL) MHD_stop_daemon(r->d);
  r->d = NULL;
  for (size_t i = 0; i < r->n; i++) free(r->bodies[i]);
  r->n = 0;
}

/* How many bodies hold `needle`. */
static size_t received(receiver_t *r, const char *needle) {
  size_t k = 0;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->n; i++)
    if (strstr(r->bodies[i], needle) != NULL) k++;
  pthread_mutex_unlock(&r->mu);
  return k;
}

/* The first body that holds `needle`, parsed (new reference), or NULL. */
static json_t *received_json(receiver_t *r, const char *needle) {
  json_t *j = NULL;
  pthread_mutex_lock(&r->mu);
  for (size_t i = 0; i < r->n && j == NULL; i++)
    if (strstr(r->bodies[i], needle) != NULL) j = json_loads(r->bodies[i], 0, NULL);
  pthread_mutex_unlock(&r->mu);
  return j;
}

/* ---- the collector's API ------------------------------------------------- */

/* curl ARGS against the API; the body parsed into *out (may be NULL), the
 * HTTP status returned. */
static int api(const char *args, json_t **out) {
  char cmd[4096], text[1 << 17];
  snprintf(cmd, sizeof cmd, "curl -s -w '\\n%%{http_code}' %s", args);
  if (tu_sh(cmd, text, sizeof text) != 0) return -1;
  char *nl = strrchr(text, '\n');
  if (nl == NULL) return -1;
  *nl = '\0';
  int64_t status = -1;
  if (ember_parse_i64(nl + 1, 100, 599, &status) != 0) return -1;
  if (out != NULL) *out = json_loads(text, 0, NULL);
  return (int)status;
}

static void add_rule(const char *json) {
  char args[4096];
  json_t *doc = NULL;
  snprintf(args, sizeof args, "-X POST -H 'Content-Type: application/json' -d '%s' %s/api/v1/rules",
           json, server);
  int st = api(args, &doc);
  if (st != 200 && st != 201) {
    char *s = doc ? json_dumps(doc, 0) : NULL;
    fail_msg("POST /api/v1/rules %s -> %d %s", json, st, s ? s : "");
  }
  json_decref(doc);
}

/* The alerts of rule `rule` (new reference to the array), oldest first. */
static json_t *alerts_of(const char *rule) {
  char args[512];
  json_t *doc = NULL;
  snprintf(args, sizeof args, "'%s/api/v1/alerts?rule=%s'", server, rule);
  if (api(args, &doc) != 200 || doc == NULL) {
    json_decref(doc);
    return json_array();
  }
  json_t *a = json_incref(json_object_get(doc, "alerts"));
  json_decref(doc);
  return a ? a : json_array();
}

static const char *str_at(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* Wait up to `secs` for an alert of `rule` in `state`; its document (new
 * reference) or NULL. Counts the distinct states seen on the way. */
static json_t *wait_alert(const char *rule, const char *state, int secs, bool *saw_pending) {
  for (int t = 0; t < secs * 4; t++) {
    json_t *a = alerts_of(rule), *e;
    size_t i;
    json_array_foreach(a, i, e) {
      if (saw_pending && strcmp(str_at(e, "state"), "pending") == 0) *saw_pending = true;
      if (strcmp(str_at(e, "state"), state) == 0) {
        json_incref(e);
        json_decref(a);
        return e;
      }
    }
    json_decref(a);
    usleep(250000);
  }
  return NULL;
}

static size_t count_alerts(const char *rule, const char *state) {
  json_t *a = alerts_of(rule), *e;
  size_t i, k = 0;
  json_array_foreach(a, i, e) if (state == NULL || strcmp(str_at(e, "state"), state) == 0) k++;
  json_decref(a);
  return k;
}

static pid_t start_agent(void) {
  static char a_brokers[512], a_host[160], a_spool[800], a_sel[200];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", tag);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool", dir);
  snprintf(a_sel, sizeof a_sel, "selector=worker=%s-*", tag);
  /* 2 s windows at 199 Hz: enough samples per window for a share. */
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        a_sel,
                        "continuous_hz=199",
                        "window=2s",
                        "scan_interval=1s",
                        "targets_refresh=1s",
                        "metrics_listen=",
                        tu_command_key_arg(),
                        NULL};
  return tu_spawn(argv, NULL, log_path);
}

/* rules_file: alerts.rules=FILE, or NULL. */
static pid_t start_collector(unsigned port, const char *rules_file) {
  static char rules_arg[900];
  static const char *extra[] = {"alerts.interval=2s",
                                "alerts.eval_delay=2s",
                                "alerts.webhook_retry_max=3s",
                                "alerts.webhook_timeout=2s",
                                NULL,
                                NULL,
                                NULL};
  extra[4] = tu_command_key_arg();
  extra[5] = NULL;
  if (rules_file != NULL) {
    snprintf(rules_arg, sizeof rules_arg, "alerts.rules=%s", rules_file);
    extra[5] = rules_arg;
  }
  return tu_start_collector(brokers, dir, group, port, extra, log_path);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f == NULL) fail_msg("cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

/* Does GET /api/v1/rules list `name`? */
static bool has_rule(const char *name) {
  char args[256], needle[128];
  json_t *doc = NULL;
  snprintf(args, sizeof args, "%s/api/v1/rules", server);
  snprintf(needle, sizeof needle, "\"name\":\"%s\"", name);
  if (api(args, &doc) != 200 || doc == NULL) return false;
  char *s = json_dumps(doc, JSON_COMPACT);
  bool found = s != NULL && strstr(s, needle) != NULL;
  free(s);
  json_decref(doc);
  return found;
}

static pid_t spike(const char *worker, const char *const *phases) {
  static char env[4][200];
  static int k;
  char *e = env[k++ % 4];
  snprintf(e, 200, "EMBER_WORKER=%s-%s", tag, worker);
  const char *argv[16] = {EMBER_TEST_PROGRAMS "/spike"};
  size_t n = 1;
  for (size_t i = 0; phases[i] != NULL && n < 15; i++) argv[n++] = phases[i];
  argv[n] = NULL;
  const char *envp[] = {e, NULL};
  return tu_spawn(argv, envp, NULL);
}

static void setup_names(const char *what) {
  snprintf(tag, sizeof tag, "al%s-%d-%lld", what, (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000 % 100000000));
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(group, sizeof group, "g-%s", tag);
  brokers = tu_bootstrap();
}

/* The messages of ember.alerts whose key is `worker`, as "status id" lines. */
static void topic_transitions(const char *worker, char *out, size_t size) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "kcat -b %s -C -t ember.alerts -o beginning -e -q -f '%%k\\t%%s\\n' 2>/dev/null | "
           "awk -F'\\t' '$1 == \"%s\" {print $2}'",
           brokers, worker);
  tu_sh(cmd, out, size);
}

static void test_spike_fires_captures_notifies_survives_restart(void **state) {
  (void)state;
  setup_names("spike");
  unsigned port = tu_free_port();
  snprintf(server, sizeof server, "http://127.0.0.1:%u", port);
  receiver_t am = {0}, plain = {0};
  receiver_start(&am, tu_free_port());
  unsigned plain_port = tu_free_port(); /* down at first */
  pid_t col = start_collector(port, NULL);
  pid_t agent = start_agent();

  char worker[160], rule[2048];
  snprintf(worker, sizeof worker, "%s-w", tag);
  snprintf(
      rule, sizeof rule,
      "{\"name\":\"hot\",\"worker\":\"%s\",\"above\":0.5,\"for\":\"10s\","
      "\"capture\":{\"type\":\"cpu\",\"duration_ms\":3000,\"hz\":997},"
      "\"webhook\":{\"url\":\"http://127.0.0.1:%u/api/v2/alerts\",\"format\":\"alertmanager\"}}",
      worker, am.port);
  add_rule(rule);
  snprintf(rule, sizeof rule,
           "{\"name\":\"hot-plain\",\"worker\":\"%s\",\"above\":0.5,\"for\":\"10s\","
           "\"webhook\":{\"url\":\"http://127.0.0.1:%u/hook\",\"format\":\"json\"}}",
           worker, plain_port);
  add_rule(rule);

  /* Idle ~5% for 8 s, burn six threads for 25 s, idle for 120 s: six
   * threads keep the burn above 0.5 cores on a 2-core machine beside two
   * CPU hogs and more; the idle tail outlives the ingest count below
   * however long the steps before it take (it is killed when done). */
  const char *phases[] = {"idle:8", "burn:25x6", "idle:120", NULL};
  pid_t prog = spike("w", phases);
  int64_t t_start = ember_time_now_ns();

  bool saw_pending = false;
  json_t *firing = wait_alert("hot", "firing", 60, &saw_pending);
  if (firing == NULL) fail_msg("no firing alert of rule hot within 60 s (log %s)", log_path);
  assert_true(saw_pending);
  char id[64];
  snprintf(id, sizeof id, "%s", str_at(firing, "id"));
  /* Firing within `for` + one window of the spike's start (data time: the
   * alert's own times, not how fast this machine got there). */
  int64_t started = json_integer_value(json_object_get(firing, "started"));
  int64_t fired = json_integer_value(json_object_get(firing, "fired"));
  print_message("alert %s: started %lld ms after the program, fired %lld ms later\n", id,
                (long long)(started - t_start / 1000000), (long long)(fired - started));
  assert_true(fired - started >= 10000);
  assert_true(fired - started <= 10000 + 2 * 2000);
  assert_true(json_real_value(json_object_get(firing, "value")) > 0.5);
  /* What changed: spike_burn first. */
  json_t *top = json_object_get(firing, "top");
  assert_true(json_array_size(top) >= 1);
  assert_string_equal(str_at(json_array_get(top, 0), "function"), "spike_burn");
  json_decref(firing);

  /* One firing notification to the Alertmanager receiver, in its shape. */
  for (int t = 0; t < 40 && received(&am, "\"firing\"") + received(&am, "startsAt") == 0; t++)
    usleep(250000);
  json_t *body = received_json(&am, "startsAt");
  if (body == NULL) fail_msg("the Alertmanager receiver got nothing (log %s)", log_path);
  assert_true(json_is_array(body));
  json_t *a0 = json_array_get(body, 0);
  assert_string_equal(str_at(json_object_get(a0, "labels"), "alertname"), "hot");
  assert_string_equal(str_at(json_object_get(a0, "labels"), "worker"), worker);
  assert_non_null(str_at(a0, "startsAt"));
  assert_non_null(str_at(a0, "generatorURL"));
  assert_non_null(strstr(str_at(json_object_get(a0, "annotations"), "description"), "spike_burn"));
  json_decref(body);

  /* The capture session is done and holds spike_burn. */
  char sid[128] = "", args[512];
  const char *cstate = NULL;
  for (int t = 0; t < 120; t++) {
    json_t *a = alerts_of("hot"), *e;
    size_t i;
    json_array_foreach(a, i, e) {
      json_t *cap = json_object_get(e, "capture");
      if (strcmp(str_at(e, "id"), id) != 0 || str_at(cap, "session") == NULL) continue;
      snprintf(sid, sizeof sid, "%s", str_at(cap, "session"));
      cstate = str_at(cap, "state") && strcmp(str_at(cap, "state"), "done") == 0 ? "done" : NULL;
    }
    json_decref(a);
    if (cstate != NULL) break;
    usleep(500000);
  }
  if (sid[0] == '\0') fail_msg("the alert has no capture session (log %s)", log_path);
  if (cstate == NULL) fail_msg("capture %s did not reach done (log %s)", sid, log_path);
  snprintf(args, sizeof args, "'%s/api/v1/sessions/%s/profile?format=top'", server, sid);
  json_t *stop = NULL;
  assert_int_equal(api(args, &stop), 200);
  char *s = json_dumps(stop, 0);
  assert_non_null(strstr(s, "spike_burn"));
  free(s);
  json_decref(stop);

  /* SIGKILL while firing, restart: still firing, same id, no second firing
   * notification. */
  kill(col, SIGKILL);
  assert_true(tu_wait(col, 10000) != -1);
  col = start_collector(port, NULL);
  json_t *again = wait_alert("hot", "firing", 20, NULL);
  if (again == NULL) fail_msg("the firing alert is gone after a restart (log %s)", log_path);
  assert_string_equal(str_at(again, "id"), id);
  json_decref(again);

  /* The plain receiver comes up 30 s after the firing; ingest meanwhile.
   * The 30 s count from the restarted collector's first stored profile:
   * before it, the group is still handing it the partitions (a SIGKILLed
   * member is waited for), 9 s once under ASan in CI. */
  double stored0 = tu_metric(port, "ember_collector_profiles_stored_total");
  for (int t = 0; t < 1200 && tu_metric(port, "ember_collector_profiles_stored_total") <= stored0;
       t++)
    usleep(100000);
  stored0 = tu_metric(port, "ember_collector_profiles_stored_total");
  int64_t down_from = ember_time_now_ns();
  while (ember_time_now_ns() - down_from < 30LL * 1000000000) sleep(1);
  double stored1 = tu_metric(port, "ember_collector_profiles_stored_total");
  print_message("profiles stored while the plain receiver was down: %.0f in 30 s\n",
                stored1 - stored0);
  /* Ingest goes on (it is not blocked behind the receiver). Not "a
   * window every 2 s": CI's runs stored 6 to 10 in these 30 s, fewer than
   * the 15 windows the idle program's 2 s windows suggest (open, in the
   * notes); 3 shows ingest moving without depending on that rate. */
  assert_true(stored1 - stored0 >= 3);
  receiver_start(&plain, plain_port);

  /* Resolved after the load drops. */
  json_t *res = wait_alert("hot", "resolved", 60, NULL);
  if (res == NULL) fail_msg("the alert did not resolve (log %s)", log_path);
  assert_string_equal(str_at(res, "id"), id);
  json_decref(res);
  for (int t = 0; t < 40 && received(&am, "endsAt") == 0; t++) usleep(250000);
  assert_int_equal(received(&am, "startsAt"), 2); /* firing and resolved, nothing twice */
  assert_int_equal(received(&am, "endsAt"), 1);
  /* Wait for the resolved body itself: every body has a "resolved" key
   * (null while firing), so waiting for that string ended at the firing
   * body, and the check below then raced the resolved one, sent ~25 ms
   * later on the same connection (failed twice in hog series). */
  for (int t = 0; t < 80 && received(&plain, "\"status\":\"resolved\"") == 0; t++) usleep(250000);
  if (received(&plain, "\"status\":\"firing\"") != 1 ||
      received(&plain, "\"status\":\"resolved\"") != 1) {
    /* Say what each side saw. */
    pthread_mutex_lock(&plain.mu);
    for (size_t i = 0; i < plain.n; i++)
      print_message("plain receiver body %zu: %.300s\n", i, plain.bodies[i]);
    pthread_mutex_unlock(&plain.mu);
    print_message("collector: %.0f notifications sent, %.0f failed (log %s)\n",
                  tu_metric(port, "ember_collector_notify_sent_total"),
                  tu_metric(port, "ember_collector_notify_failed_total"), log_path);
  }
  assert_int_equal(received(&plain, "\"status\":\"firing\""), 1);
  assert_int_equal(received(&plain, "\"status\":\"resolved\""), 1);

  /* ember.alerts: both transitions, each once, keyed by the worker. */
  char lines[1 << 16];
  topic_transitions(worker, lines, sizeof lines);
  size_t nf = 0, nr = 0;
  char *save = NULL;
  for (char *l = strtok_r(lines, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
    if (strstr(l, id) == NULL) continue;
    nf += strstr(l, "\"status\":\"firing\"") != NULL;
    nr += strstr(l, "\"status\":\"resolved\"") != NULL;
  }
  print_message("ember.alerts for %s: %zu firing, %zu resolved\n", id, nf, nr);
  assert_int_equal(nf, 1);
  assert_int_equal(nr, 1);

  tu_kill(prog); /* the rest of its idle phase is not needed */
  tu_stop_daemon(agent, "ember-agent", log_path);
  tu_stop_daemon(col, "ember-collector", log_path);
  receiver_stop(&am);
  receiver_stop(&plain);
}

static void test_baseline_function_and_flapping(void **state) {
  (void)state;
  setup_names("kinds");
  unsigned port = tu_free_port();
  snprintf(server, sizeof server, "http://127.0.0.1:%u", port);
  /* A rules file, changed and read again on SIGHUP; a bad change keeps
   * the rules in force. */
  char rules_file[800];
  snprintf(rules_file, sizeof rules_file, "%s.rules", dir);
  write_text(rules_file, "[rule from-file]\nworker = nobody\nabove = 4\nfor = 1m\n");
  pid_t col = start_collector(port, rules_file);
  assert_true(has_rule("from-file"));
  write_text(rules_file, "[rule from-file]\nworker = nobody\nabove = 4\nfor = 1m\n"
                         "[rule second]\nworker = nobody\nabove = 2\nfor = 1m\n");
  kill(col, SIGHUP);
  bool reread = false;
  for (int t = 0; t < 50 && !(reread = has_rule("second")); t++) usleep(100000);
  assert_true(reread);
  write_text(rules_file, "[rule second]\nworker = nobody\nabove = -2\nfor = 1m\n");
  kill(col, SIGHUP);
  sleep(1);
  assert_true(has_rule("from-file") && has_rule("second"));
  char text[4096];
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "grep -c 'SIGHUP: the rules stay as they were: .*rules:3:' %s",
           log_path);
  assert_int_equal(tu_sh(cmd, text, sizeof text), 0);
  pid_t agent = start_agent();
  char rule[1024];
  /* Worker "rise": ~0.05 cores for 30 s (a baseline of a minute needs a
   * quarter of it), then six threads burning (10x and more, at least 4x
   * on a loaded machine). Worker "flat": 0.3 cores throughout. Worker
   * "share": the same total, but hot_work takes two thirds of it after
   * 30 s. Worker "flap": six threads for 4 s, then idle for 4 s, three
   * times: across a 0.3-core threshold each time. */
  const char *kinds[][2] = {{"rise", "baseline"}, {"flat", "baseline"}};
  for (size_t i = 0; i < 2; i++) {
    snprintf(rule, sizeof rule,
             "{\"name\":\"base-%s\",\"worker\":\"%s-%s\",\"baseline\":{\"factor\":2.5,"
             "\"period\":\"1m\",\"floor\":0.1},\"for\":\"5s\"}",
             kinds[i][0], tag, kinds[i][0]);
    add_rule(rule);
  }
  snprintf(rule, sizeof rule,
           "{\"name\":\"fn-share\",\"worker\":\"%s-share\",\"function\":{\"name\":\"hot_work\","
           "\"percent\":40},\"for\":\"5s\"}",
           tag);
  add_rule(rule);
  snprintf(rule, sizeof rule,
           "{\"name\":\"flap\",\"worker\":\"%s-flap\",\"above\":0.3,\"for\":\"2s\","
           "\"resolve_for\":\"20s\"}",
           tag);
  add_rule(rule);
  const char *rise[] = {"idle:30", "burn:15x6", NULL};
  const char *flat[] = {"steady:45", NULL};
  const char *share[] = {"steady:30", "hot:15", NULL};
  const char *flap[] = {"idle:10", "burn:4x6", "idle:4",  "burn:4x6",
                        "idle:4",  "burn:4x6", "idle:15", NULL};
  pid_t p[4] = {spike("rise", rise), spike("flat", flat), spike("share", share),
                spike("flap", flap)};

  json_t *a = wait_alert("base-rise", "firing", 90, NULL);
  if (a == NULL) fail_msg("the baseline rule did not fire on a 4x rise (log %s)", log_path);
  print_message("baseline alert: value %.2f, threshold %.2f\n",
                json_real_value(json_object_get(a, "value")),
                json_real_value(json_object_get(a, "threshold")));
  json_decref(a);
  a = wait_alert("fn-share", "firing", 30, NULL);
  if (a == NULL) fail_msg("the function rule did not fire (log %s)", log_path);
  json_decref(a);
  for (int i = 0; i < 4; i++) tu_wait(p[i], 60000);
  sleep(3);
  assert_int_equal(count_alerts("base-flat", NULL), 0);
  size_t flaps = count_alerts("flap", "firing") + count_alerts("flap", "resolved");
  print_message("flapping load: %zu alerts\n", flaps);
  assert_int_equal(flaps, 1);
  tu_stop_daemon(agent, "ember-agent", log_path);
  tu_stop_daemon(col, "ember-collector", log_path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_spike_fires_captures_notifies_survives_restart),
      cmocka_unit_test(test_baseline_function_and_flapping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
