/* `ember alerts` and `ember rules`: the built binary run as a real process
 * against a fake rules/alerts API (libmicrohttpd, in this process) that
 * answers with canned bodies and records every request: the POST bodies
 * the CLI sent, the query of a listing, the rule a DELETE named. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>

#define EMBER_CLI EMBER_BINARY_DIR "/cli/ember"

/* ---- the fake API ---- */

#define MAX_POSTS 8

typedef struct fake {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  /* canned answers */
  unsigned post_status[MAX_POSTS]; /* POST /api/v1/rules answers in turn; 0 = 201 */
  const char *post_body[MAX_POSTS];
  const char *alerts, *alert, *rules; /* GET bodies */
  /* what was asked */
  int requests, posts, deletes;
  char bodies[MAX_POSTS][4096]; /* of each POST */
  char upload[4096];            /* of the request being read */
  size_t upload_len;
  char query[256]; /* of the last GET /api/v1/alerts: "rule=..&state=..&worker=.." */
  char deleted[128];
  char content_type[128];
} fake_t;

static fake_t fake = {.mu = PTHREAD_MUTEX_INITIALIZER};
static char server_url[64];

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *body) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static const char *arg(struct MHD_Connection *conn, const char *key) {
  const char *v = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, key);
  return v ? v : "-";
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)cls;
  (void)version;
  static int first;
  pthread_mutex_lock(&fake.mu);
  if (*con_cls == NULL) {
    /* Headers only so far; the CLI makes one request at a time. */
    *con_cls = &first;
    fake.upload_len = 0;
    fake.upload[0] = '\0';
    pthread_mutex_unlock(&fake.mu);
    return MHD_YES;
  }
  if (*upload_size > 0) {
    size_t n = *upload_size;
    if (n > sizeof fake.upload - 1 - fake.upload_len) n = sizeof fake.upload - 1 - fake.upload_len;
    memcpy(fake.upload + fake.upload_len, upload, n);
    fake.upload_len += n;
    fake.upload[fake.upload_len] = '\0';
    *upload_size = 0;
    pthread_mutex_unlock(&fake.mu);
    return MHD_YES;
  }
  fake.requests++;
  unsigned status = 404;
  const char *body = "{\"error\": \"no such path: x (the API is under /api/v1/)\"}";
  static char msg[256];
  if (strcmp(method, "POST") == 0 && strcmp(url, "/api/v1/rules") == 0) {
    int i = fake.posts < MAX_POSTS ? fake.posts : MAX_POSTS - 1;
    memcpy(fake.bodies[i], fake.upload, fake.upload_len + 1);
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    snprintf(fake.content_type, sizeof fake.content_type, "%s", ct ? ct : "");
    status = fake.post_status[i] ? fake.post_status[i] : 201;
    body = fake.post_body[i] ? fake.post_body[i] : fake.upload;
    fake.posts++;
  } else if (strcmp(method, "GET") == 0 && strcmp(url, "/api/v1/rules") == 0) {
    status = 200;
    body = fake.rules;
  } else if (strcmp(method, "GET") == 0 && strcmp(url, "/api/v1/alerts") == 0) {
    snprintf(fake.query, sizeof fake.query, "rule=%s&state=%s&worker=%s", arg(conn, "rule"),
             arg(conn, "state"), arg(conn, "worker"));
    status = 200;
    body = fake.alerts;
  } else if (strcmp(method, "GET") == 0 && strcmp(url, "/api/v1/alerts/a1b2c3d4e5f60708") == 0) {
    status = 200;
    body = fake.alert;
  } else if (strcmp(method, "GET") == 0 && strncmp(url, "/api/v1/alerts/", 15) == 0) {
    snprintf(msg, sizeof msg, "{\"error\": \"no alert %.64s\"}", url + 15);
    body = msg;
  } else if (strcmp(method, "DELETE") == 0 && strncmp(url, "/api/v1/rules/", 14) == 0) {
    fake.deletes++;
    const char *name = url + 14;
    snprintf(fake.deleted, sizeof fake.deleted, "%s", name);
    if (strcmp(name, "cpu-hot") == 0) {
      status = 204;
      body = "";
    } else if (strcmp(name, "from-file") == 0) {
      status = 409;
      body =
          "{\"error\": \"rule \\\"from-file\\\" comes from the rules file (source \\\"file\\\")\"}";
    } else {
      snprintf(msg, sizeof msg, "{\"error\": \"no rule \\\"%.64s\\\"\"}", name);
      body = msg;
    }
  }
  pthread_mutex_unlock(&fake.mu);
  return reply(conn, status, body);
}

static void reset(void) {
  pthread_mutex_lock(&fake.mu);
  memset(fake.post_status, 0, sizeof fake.post_status);
  memset(fake.post_body, 0, sizeof fake.post_body);
  memset(fake.bodies, 0, sizeof fake.bodies);
  fake.requests = fake.posts = fake.deletes = 0;
  fake.query[0] = fake.deleted[0] = fake.content_type[0] = '\0';
  pthread_mutex_unlock(&fake.mu);
}

static int setup(void **state) {
  (void)state;
  /* Absolute times in the output are local: make them UTC. */
  setenv("TZ", "UTC", 1);
  fake.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            on_request, NULL, MHD_OPTION_END);
  if (fake.d == NULL) return -1;
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(fake.d, MHD_DAEMON_INFO_BIND_PORT);
  unsigned port = info ? info->port : 0;
  snprintf(server_url, sizeof server_url, "http://127.0.0.1:%u", port);
  return port ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  MHD_stop_daemon(fake.d);
  return 0;
}

/* ---- running the CLI ---- */

typedef struct run {
  int status; /* exit status, 128 + signal, or -1 when it did not end */
  char out[65536];
  char err[8192];
} run_t;

static void slurp(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* The next run's stdin when set, else /dev/null. */
static char stdin_path[512];

/* `ember ARGS...` with EMBER_SERVER at the fake server, stdout and stderr
 * to files; waits up to 30 s. */
static void run_args(run_t *r, const char *const *args) {
  const char *argv[64] = {EMBER_CLI};
  size_t argc = 1;
  for (size_t i = 0; args[i] != NULL && argc < 63; i++) argv[argc++] = args[i];
  argv[argc] = NULL;
  char envs[8][512];
  char *envp[9];
  size_t n = 0;
  snprintf(envs[n++], sizeof envs[0], "PATH=/usr/bin:/bin");
  snprintf(envs[n++], sizeof envs[0], "EMBER_SERVER=%s", server_url);
  const char *keep[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TZ"};
  for (size_t i = 0; i < 4; i++) {
    if (getenv(keep[i]) != NULL)
      snprintf(envs[n++], sizeof envs[0], "%s=%s", keep[i], getenv(keep[i]));
  }
  for (size_t i = 0; i < n; i++) envp[i] = envs[i];
  envp[n] = NULL;
  char out_path[512], err_path[512];
  snprintf(out_path, sizeof out_path, "%s/cli-alerts.out", EMBER_TEST_TMP);
  snprintf(err_path, sizeof err_path, "%s/cli-alerts.err", EMBER_TEST_TMP);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open(stdin_path[0] ? stdin_path : "/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) _exit(127);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    execve(argv[0], (char *const *)(uintptr_t)argv, envp);
    _exit(127);
  }
  r->status = -1;
  for (int waited = 0; waited < 30000; waited += 5) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    struct timespec ts = {0, 5 * 1000000};
    nanosleep(&ts, NULL);
  }
  if (r->status == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  slurp(out_path, r->out, sizeof r->out);
  slurp(err_path, r->err, sizeof r->err);
}

#define RUN(r, ...)                                                                                \
  do {                                                                                             \
    const char *const args_[] = {__VA_ARGS__, NULL};                                               \
    run_args(r, args_);                                                                            \
  } while (0)

static void expect(const run_t *r, int status, const char *in_err) {
  if (r->status != status || (in_err && strstr(r->err, in_err) == NULL))
    fail_msg("exit %d (want %d)\nstderr: %s\nstdout: %.2000s\nwanted in stderr: %s", r->status,
             status, r->err, r->out, in_err ? in_err : "-");
}

static void expect_out(const run_t *r, const char *want) {
  if (strstr(r->out, want) == NULL) fail_msg("'%s' not in stdout:\n%s", want, r->out);
}

/* The i-th POST body equals the JSON text `want` (same types, any order). */
static void expect_sent(int i, const char *want) {
  json_error_t e;
  json_t *got = json_loads(fake.bodies[i], 0, &e);
  if (got == NULL) fail_msg("POST %d body is not JSON (%s): %s", i, e.text, fake.bodies[i]);
  json_t *exp = json_loads(want, 0, &e);
  if (exp == NULL) fail_msg("bad expectation (%s): %s", e.text, want);
  bool same = json_equal(got, exp);
  json_decref(got);
  json_decref(exp);
  if (!same) fail_msg("POST %d sent\n  %s\nwanted\n  %s", i, fake.bodies[i], want);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* ---- canned documents ---- */

static const char alert_doc[] =
    "{\"id\": \"a1b2c3d4e5f60708\", \"rule\": \"cpu-hot\", \"state\": \"firing\","
    " \"labels\": {\"worker\": \"api\", \"host\": \"h1\"}, \"value\": 0.98, \"threshold\": 0.5,"
    " \"kind\": \"above\", \"started\": 1764410400000, \"fired\": 1764410420000,"
    " \"resolved\": null, \"updated\": 1764410430000,"
    " \"top\": [{\"function\": \"burn\", \"file\": \"x.c\", \"baseline\": 0.02, \"spike\": 0.91,"
    " \"delta\": 0.89}, {\"function\": \"idle\\u001b[2J\", \"file\": \"\", \"baseline\": 0.6,"
    " \"spike\": 0.05, \"delta\": -0.55}],"
    " \"capture\": {\"session\": \"s-42\", \"state\": \"running\"}}";

/* ---- ember alerts ---- */

static void test_cli_alerts_list(void **state) {
  (void)state;
  reset();
  static char list[8192];
  snprintf(list, sizeof list,
           "{\"alerts\": [%s, {\"id\": \"0000000000000002\", \"rule\": \"fn-share\", \"state\":"
           " \"resolved\", \"labels\": {\"worker\": \"db\"}, \"value\": 12, \"threshold\": 30,"
           " \"kind\": \"function\", \"started\": 1764400000000, \"fired\": 1764400010000,"
           " \"resolved\": 1764400100000, \"updated\": 1764400100000, \"top\": [],"
           " \"capture\": null}]}",
           alert_doc);
  fake.alerts = list;
  run_t r;
  RUN(&r, "alerts");
  expect(&r, 0, NULL);
  assert_string_equal(fake.query, "rule=-&state=-&worker=-");
  const char *lines[] = {
      "STATE     RULE      LABELS              VALUE/THRESHOLD  STARTED      ",
      "  TOP FUNCTION      CAPTURE\n",
      "\nfiring    cpu-hot   worker=api,host=h1        0.98/0.50  2025-11-29 10:00:00 (",
      "ago)  burn 2.0%->91.0%  s-42 running\n",
      "\nresolved  fn-share  worker=db                     12/30  2025-11-29 07:06:40 (",
      "ago)  -                 -\n"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) expect_out(&r, lines[i]);
  /* Filters go to the server as they were given. */
  RUN(&r, "alerts", "--state", "firing", "--rule", "cpu-hot", "--worker", "api-*");
  expect(&r, 0, NULL);
  assert_string_equal(fake.query, "rule=cpu-hot&state=firing&worker=api-*");
  RUN(&r, "alerts", "--json");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, list);
  fake.alerts = "{\"alerts\": []}";
  RUN(&r, "alerts", "--state", "pending");
  expect(&r, 3, "no alerts match");
  assert_string_equal(r.out, "");
  RUN(&r, "alerts", "--json");
  expect(&r, 3, "no alerts on the server");
  assert_string_equal(r.out, "{\"alerts\": []}");
  fake.alerts = "{\"nope\": 1}";
  RUN(&r, "alerts");
  expect(&r, 1, "no \"alerts\" list");
}

static void test_cli_alerts_show(void **state) {
  (void)state;
  reset();
  fake.alert = alert_doc;
  run_t r;
  RUN(&r, "alerts", "show", "a1b2c3d4e5f60708");
  expect(&r, 0, NULL);
  const char *lines[] = {
      "alert     a1b2c3d4e5f60708\n", "state     firing\n", "rule      cpu-hot (above)\n",
      "labels    worker=api host=h1\n", "value     0.98 (threshold 0.50)\n",
      "started   2025-11-29 10:00:00 (", "fired     2025-11-29 10:00:20 (", "resolved  -\n",
      "updated   2025-11-29 10:00:30 (", "capture   session s-42, running\n",
      "what changed (self share, baseline -> spike):\n",
      "FUNCTION  FILE  BASELINE  SPIKE    DELTA\n", "burn      x.c       2.0%  91.0%  +89.0pp\n",
      /* a control character from the server is not sent to the terminal */
      "idle?[2J  -        60.0%   5.0%  -55.0pp\n"};
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) expect_out(&r, lines[i]);
  /* --json and the flags after the id */
  RUN(&r, "alerts", "show", "--json", "a1b2c3d4e5f60708");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, alert_doc);
  RUN(&r, "alerts", "show", "ffff000011112222");
  expect(&r, 2, "no alert ffff000011112222: no alert ffff000011112222; `ember alerts` lists them");
  int before = fake.requests;
  RUN(&r, "alerts", "show", "../rules");
  expect(&r, 2, "'../rules' is not an alert id");
  RUN(&r, "alerts", "show");
  expect(&r, 2, "which alert id?");
  RUN(&r, "alerts", "show", "a", "b");
  expect(&r, 2, "unexpected argument 'b'");
  RUN(&r, "alerts", "show", "a1", "--state", "firing");
  expect(&r, 2, "--state is not an option of this command");
  assert_int_equal(fake.requests, before);
}

/* ---- ember rules add ---- */

static void test_cli_rules_add_flags(void **state) {
  (void)state;
  reset();
  run_t r;
  RUN(&r, "rules", "add", "--name", "cpu-hot", "--worker", "api", "--above", "0.5", "--for", "20s");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, "added rule cpu-hot\n");
  assert_int_equal(fake.posts, 1);
  assert_string_equal(fake.content_type, "application/json");
  expect_sent(0, "{\"name\": \"cpu-hot\", \"worker\": \"api\", \"above\": 0.5, \"for\": \"20s\"}");

  /* Every flag. */
  reset();
  RUN(&r, "rules", "add", "--name", "base.1", "--worker", "api-*", "--version", "v2", "--host",
      "h1", "--actor", "room-7", "--group-by", "host", "--baseline", "4", "--period", "2h",
      "--floor", "0.2", "--for", "1m", "--hysteresis", "0.2", "--resolve-for", "45s", "--capture",
      "cpu", "--capture-duration", "5s", "--capture-hz", "999", "--capture-instances", "2",
      "--capture-cooldown", "10m", "--capture-max-per-hour", "4", "--webhook",
      "http://127.0.0.1:9/hook", "--webhook-format", "json");
  expect(&r, 0, NULL);
  expect_sent(0, "{\"name\": \"base.1\", \"worker\": \"api-*\", \"version\": \"v2\", \"host\": "
                 "\"h1\", \"actor\": \"room-7\", \"group_by\": \"host\", \"baseline\": "
                 "{\"factor\": 4, \"period\": \"2h\", \"floor\": 0.2}, \"for\": \"1m\", "
                 "\"hysteresis\": 0.2, \"resolve_for\": \"45s\", \"capture\": {\"type\": "
                 "\"cpu\", \"duration_ms\": 5000, \"hz\": 999, \"instances\": 2, \"cooldown\": "
                 "\"10m\", \"max_per_hour\": 4}, \"webhook\": {\"url\": "
                 "\"http://127.0.0.1:9/hook\", \"format\": \"json\"}}");
  /* Keys in the design's order, compactly. */
  assert_string_equal(fake.bodies[0],
                      "{\"name\":\"base.1\",\"worker\":\"api-*\",\"version\":\"v2\",\"host\":"
                      "\"h1\",\"actor\":\"room-7\",\"group_by\":\"host\",\"baseline\":{"
                      "\"factor\":4,\"period\":\"2h\",\"floor\":0.2},\"for\":\"1m\","
                      "\"hysteresis\":0.2,\"resolve_for\":\"45s\",\"capture\":{\"type\":\"cpu\","
                      "\"duration_ms\":5000,\"hz\":999,\"instances\":2,\"cooldown\":\"10m\","
                      "\"max_per_hour\":4},\"webhook\":{\"url\":\"http://127.0.0.1:9/hook\","
                      "\"format\":\"json\"}}");

  /* A function rule; a webhook without a format is the short form. */
  reset();
  RUN(&r, "rules", "add", "--name", "fn", "--worker", "*", "--function", "burn_hot", "--percent",
      "30", "--webhook", "https://am:9093/api/v2/alerts", "--capture", "alloc");
  expect(&r, 0, NULL);
  expect_sent(0, "{\"name\": \"fn\", \"worker\": \"*\", \"function\": {\"name\": \"burn_hot\", "
                 "\"percent\": 30}, \"capture\": {\"type\": \"alloc\"}, \"webhook\": "
                 "\"https://am:9093/api/v2/alerts\"}");
}

static void test_cli_rules_add_refused(void **state) {
  (void)state;
  reset();
  fake.post_status[0] = 400;
  fake.post_body[0] = "{\"error\": \"field \\\"for\\\": \\\"90d\\\" is longer than 1d\"}";
  run_t r;
  /* A duration the CLI reads but the server finds too long. */
  RUN(&r, "rules", "add", "--name", "cpu-hot", "--worker", "api", "--above", "2", "--for", "90d");
  expect(&r, 2,
         "ember rules add: rule cpu-hot refused: field \"for\": \"90d\" is longer than 1d\n");
  assert_int_equal(fake.posts, 1);
  assert_string_equal(r.out, "");
  reset();
  fake.post_status[0] = 409;
  fake.post_body[0] = "{\"error\": \"rule \\\"cpu-hot\\\" exists (source \\\"file\\\")\"}";
  RUN(&r, "rules", "add", "--name", "cpu-hot", "--worker", "api", "--above", "2");
  expect(&r, 2, "rule cpu-hot refused: rule \"cpu-hot\" exists (source \"file\")");
  reset();
  fake.post_status[0] = 404;
  fake.post_body[0] = "{\"error\": \"no such path: /api/v1/rules (the API is under /api/v1/)\"}";
  RUN(&r, "rules", "add", "--name", "cpu-hot", "--worker", "api", "--above", "2");
  expect(&r, 1, "has no /api/v1/rules (HTTP 404); it predates alerting");
  reset();
  fake.post_status[0] = 500;
  fake.post_body[0] = "{\"error\": \"store: disk full\"}";
  RUN(&r, "rules", "add", "--name", "cpu-hot", "--worker", "api", "--above", "2");
  expect(&r, 1, "the server failed (HTTP 500): store: disk full");
}

static void test_cli_rules_add_usage_errors(void **state) {
  (void)state;
  reset();
  run_t r;
  struct {
    const char *args[16];
    const char *err;
  } cases[] = {
      {{"--name", "x", "--worker", "api", "--above", "-1"},
       "--above '-1': expected a number of cores above 0"},
      {{"--name", "x", "--worker", "api", "--above", "0"}, "--above '0'"},
      {{"--name", "x", "--worker", "api", "--above", "lots"}, "--above 'lots'"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--baseline", "4"},
       "--above, --baseline and --function are exclusive: give one"},
      {{"--name", "x", "--worker", "api"}, "the condition is missing"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--group-by", "pod"},
       "--group-by 'pod': expected version, host or actor"},
      {{"--worker", "api", "--above", "1"}, "--name N is required"},
      {{"--name", "a/b", "--worker", "api", "--above", "1"}, "--name 'a/b': expected 1 to 64"},
      {{"--name", "x", "--above", "1"}, "--worker W is required"},
      {{"--name", "x", "--worker", "api[12]", "--above", "1"},
       "--worker 'api[12]': a worker pattern takes '*' only"},
      {{"--name", "x", "--worker", "api", "--baseline", "1"},
       "--baseline '1': expected a factor above 1"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--period", "1h"},
       "--period goes with --baseline FACTOR"},
      {{"--name", "x", "--worker", "api", "--baseline", "3", "--period", "30s"},
       "--period '30s': expected a duration of at least 60s"},
      {{"--name", "x", "--worker", "api", "--baseline", "3", "--floor", "-0.1"}, "--floor '-0.1'"},
      {{"--name", "x", "--worker", "api", "--function", "f"}, "--function NAME needs --percent P"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--percent", "5"},
       "--percent goes with --function NAME"},
      {{"--name", "x", "--worker", "api", "--function", "f", "--percent", "101"},
       "--percent '101': expected a share above 0 and at most 100"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--for", "30"},
       "--for '30': expected a duration with a unit (30s, 5m, 1h)"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--for", "soon"}, "--for 'soon'"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--hysteresis", "1"},
       "--hysteresis '1': expected a fraction from 0 to below 1"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--capture", "wall"},
       "--capture 'wall': expected cpu or alloc"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--capture-hz", "99"},
       "--capture-hz goes with --capture cpu|alloc"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--capture", "cpu", "--capture-hz", "0"},
       "--capture-hz '0'"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--capture", "cpu", "--capture-duration",
        "2d"},
       "--capture-duration '2d'"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--webhook", "ftp://x"},
       "--webhook 'ftp://x': expected an http:// or https:// URL"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--webhook-format", "json"},
       "--webhook-format goes with --webhook URL"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--webhook", "http://h/",
        "--webhook-format", "slack"},
       "--webhook-format 'slack': expected alertmanager or json"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--json"},
       "--json is not an option of this command"},
      {{"--file", "/nonexistent", "--above", "1"},
       "--file takes the rules from the file; --above is not for it"},
      {{"--name", "x", "--worker", "api", "--above", "1", "--above", "2"}, "--above given twice"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *args[20] = {"rules", "add"};
    size_t n = 2;
    for (size_t k = 0; cases[i].args[k] != NULL; k++) args[n++] = cases[i].args[k];
    args[n] = NULL;
    run_args(&r, args);
    expect(&r, 2, cases[i].err);
  }
  RUN(&r, "rules", "frob");
  expect(&r, 2, "unknown subcommand 'frob'");
  RUN(&r, "rules", "delete");
  expect(&r, 2, "which rule name?");
  RUN(&r, "rules", "delete", "a/b");
  expect(&r, 2, "'a/b' is not a rule name");
  RUN(&r, "rules", "delete", "..");
  expect(&r, 2, "'..' is not a rule name");
  RUN(&r, "alerts", "--state", "burning");
  expect(&r, 2, "--state 'burning': expected pending, firing or resolved");
  /* None of these reached the server. */
  assert_int_equal(fake.requests, 0);
  RUN(&r, "rules", "add", "--help");
  expect(&r, 0, NULL);
  expect_out(&r, "ember rules add --name N --worker W");
  expect_out(&r, "ember rules delete NAME");
  RUN(&r, "help");
  expect(&r, 0, NULL);
  expect_out(&r, "ember alerts show ID [--json]");
  expect_out(&r, "ember rules add --file FILE");
}

static void test_cli_rules_add_file(void **state) {
  (void)state;
  reset();
  char path[512];
  snprintf(path, sizeof path, "%s/cli-alerts.rules", EMBER_TEST_TMP);
  write_file(path, "# two rules\n"
                   "[rule cpu-hot]\n"
                   "worker = api\n"
                   "above = 0.5\n"
                   "for = 20s\n"
                   "version = 1.0\n"
                   "capture.type = cpu\n"
                   "capture.duration_ms = 5000\n"
                   "webhook.url = http://127.0.0.1:9093/api/v2/alerts\n"
                   "\n"
                   "  [ rule  fn-share ]  \n"
                   "\tworker=*\r\n"
                   "function.name = burn_hot\n"
                   "function.percent = 30\n"
                   "baseline.floor = lots\n");
  run_t r;
  RUN(&r, "rules", "add", "--file", path);
  expect(&r, 0, NULL);
  assert_int_equal(fake.posts, 2);
  assert_string_equal(r.out, "added rule cpu-hot\nadded rule fn-share\n");
  expect_sent(0, "{\"name\": \"cpu-hot\", \"worker\": \"api\", \"above\": 0.5, \"for\": \"20s\", "
                 "\"version\": \"1.0\", \"capture\": {\"type\": \"cpu\", \"duration_ms\": 5000}, "
                 "\"webhook\": {\"url\": \"http://127.0.0.1:9093/api/v2/alerts\"}}");
  /* A numeric field that is no number goes as a string, for the server to
   * name. */
  expect_sent(1, "{\"name\": \"fn-share\", \"worker\": \"*\", \"function\": {\"name\": "
                 "\"burn_hot\", \"percent\": 30}, \"baseline\": {\"floor\": \"lots\"}}");

  /* The server refuses the second: the first stays added, the exit status
   * says one failed, the refusal names the block's line. */
  reset();
  fake.post_status[1] = 400;
  fake.post_body[1] = "{\"error\": \"field \\\"baseline\\\": give one of above, baseline or "
                      "function\"}";
  RUN(&r, "rules", "add", "--file", path);
  expect(&r, 2, "rules add: ");
  assert_int_equal(fake.posts, 2);
  assert_string_equal(r.out, "added rule cpu-hot\n");
  char want[1024];
  snprintf(want, sizeof want,
           "%s:11: rule fn-share refused: field \"baseline\": give one of above, baseline or "
           "function\n",
           path);
  expect(&r, 2, want);
  snprintf(want, sizeof want, "added 1 of 2 rules from %s\n", path);
  expect(&r, 2, want);
  /* The server failing stops the rest. */
  reset();
  fake.post_status[0] = 503;
  fake.post_body[0] = "{\"error\": \"shutting down\"}";
  RUN(&r, "rules", "add", "--file", path);
  expect(&r, 1, "(stopped: the rest were not sent)");
  assert_int_equal(fake.posts, 1);

  /* From stdin. */
  reset();
  snprintf(stdin_path, sizeof stdin_path, "%s", path);
  RUN(&r, "rules", "add", "--file", "-");
  stdin_path[0] = '\0';
  expect(&r, 0, NULL);
  assert_int_equal(fake.posts, 2);
}

static void test_cli_rules_file_errors(void **state) {
  (void)state;
  reset();
  char path[512];
  snprintf(path, sizeof path, "%s/cli-alerts-bad.rules", EMBER_TEST_TMP);
  struct {
    const char *text;
    const char *err; /* after "PATH:" */
  } cases[] = {
      {"worker = api\n", "1: field \"worker\" comes before any [rule NAME] header"},
      {"[rule a]\nworker = api\nabove 0.5\n", "3: expected field = value"},
      {"# c\n[rules a]\n", "2: expected a block header [rule NAME]"},
      {"[rule]\n", "1: expected a block header [rule NAME]"},
      {"[rule a\n", "1: expected a block header [rule NAME]"},
      {"[rule a]\nabove = 1\nabove = 2\n", "3: field \"above\" is given twice"},
      {"[rule a]\nwebhook = http://x/\nwebhook.format = json\n",
       "3: field \"webhook.format\" is under a field given as a value already"},
      {"[rule a]\ncapture.type = cpu\ncapture = yes\n",
       "3: field \"capture\" has fields of its own already"},
      {"[rule a]\nname = b\n", "2: field \"name\": the name is the [rule NAME] header's"},
      {"[rule a]\nfor =\n", "2: field \"for\" has no value"},
      {"[rule a]\ncapture..type = cpu\n", "2: \"capture..type\" is not a field name"},
      {"[rule a]\nabove = 1\n[rule a]\nabove = 2\n",
       "3: rule a is defined twice (first at line 1)"},
      {"# nothing\n\n", " no [rule NAME] block"},
  };
  run_t r;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_file(path, cases[i].text);
    RUN(&r, "rules", "add", "--file", path);
    char want[1024];
    snprintf(want, sizeof want, "%s:%s", path, cases[i].err);
    expect(&r, 2, want);
  }
  RUN(&r, "rules", "add", "--file", "/nonexistent/x.rules");
  expect(&r, 1, "cannot open /nonexistent/x.rules");
  assert_int_equal(fake.requests, 0);
}

/* ---- ember rules [list], delete ---- */

static void test_cli_rules_list(void **state) {
  (void)state;
  reset();
  fake.rules =
      "{\"rules\": [{\"name\": \"cpu-hot\", \"worker\": \"api\", \"above\": 0.5, \"for\": "
      "\"20s\", \"capture\": {\"type\": \"cpu\", \"duration_ms\": 5000, \"hz\": 1000, "
      "\"instances\": 2}, \"webhook\": \"http://127.0.0.1:9/hook\", \"source\": \"file\"},"
      " {\"name\": \"base\", \"worker\": \"db-*\", \"host\": \"h1\", \"group_by\": \"version\","
      " \"baseline\": {\"factor\": 4, \"period\": \"1h\", \"floor\": 0.2}, \"for\": \"1m\","
      " \"webhook\": {\"url\": \"http://x/\", \"format\": \"json\"}, \"source\": \"api\"},"
      " {\"name\": \"fn\", \"worker\": \"*\", \"function\": {\"name\": \"burn_hot\", \"percent\":"
      " 30}, \"source\": \"api\"}]}";
  run_t r;
  RUN(&r, "rules");
  expect(&r, 0, NULL);
  assert_string_equal(
      r.out, "NAME     SOURCE  SELECTION            CONDITION                    FOR  GROUP BY"
             "  CAPTURE               WEBHOOK\n"
             "cpu-hot  file    worker=api           above 0.5 cores              20s  -       "
             "  cpu 5000ms 1000Hz x2  http://127.0.0.1:9/hook\n"
             "base     api     worker=db-* host=h1  4x baseline (1h, floor 0.2)  1m   version "
             "  -                     http://x/ (json)\n"
             "fn       api     worker=*             burn_hot > 30%               -    -       "
             "  -                     -\n");
  RUN(&r, "rules", "list", "--json");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, fake.rules);
  fake.rules = "{\"rules\": []}";
  RUN(&r, "rules", "list");
  expect(&r, 3, "the server has no rules; add one with `ember rules add`");
}

static void test_cli_rules_delete(void **state) {
  (void)state;
  reset();
  run_t r;
  RUN(&r, "rules", "delete", "cpu-hot");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, "deleted rule cpu-hot\n");
  assert_string_equal(fake.deleted, "cpu-hot");
  RUN(&r, "rules", "delete", "nope");
  expect(&r, 2, "no rule nope on the server: no rule \"nope\"; `ember rules` lists them");
  assert_string_equal(fake.deleted, "nope");
  RUN(&r, "rules", "delete", "from-file");
  expect(&r, 2,
         "rule from-file cannot be deleted through the API: rule \"from-file\" comes from "
         "the rules file");
  assert_int_equal(fake.deletes, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cli_alerts_list),
      cmocka_unit_test(test_cli_alerts_show),
      cmocka_unit_test(test_cli_rules_add_flags),
      cmocka_unit_test(test_cli_rules_add_refused),
      cmocka_unit_test(test_cli_rules_add_usage_errors),
      cmocka_unit_test(test_cli_rules_add_file),
      cmocka_unit_test(test_cli_rules_file_errors),
      cmocka_unit_test(test_cli_rules_list),
      cmocka_unit_test(test_cli_rules_delete),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
