/* `ember profile` and `ember sessions`: the built binary run as a real
 * process against a fake on-demand sessions API (libmicrohttpd, in this
 * process) that moves a session through its states over a few polls,
 * serves a canned result and records what it was sent. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
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

/* ---- the fake sessions API ---- */

#define MAX_POLLS 8

typedef struct fake {
  struct MHD_Daemon *d;
  pthread_mutex_t mu;
  /* canned answers */
  unsigned post_status;
  const char *post_body;
  const char *polls[MAX_POLLS]; /* GET /sessions/s-1 answers in turn; the last repeats */
  size_t npolls;
  const char *profile;
  size_t profile_len;
  const char *list;
  /* what was asked */
  int requests, posts, gets, profile_gets, cancels;
  char body[4096]; /* of the last POST /api/v1/sessions */
  size_t body_len;
  char format[32]; /* of the last profile GET */
  char content_type[128];
} fake_t;

static fake_t fake = {.mu = PTHREAD_MUTEX_INITIALIZER};
static char server_url[64];

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *body,
                             size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)cls;
  (void)version;
  static int first;
  pthread_mutex_lock(&fake.mu);
  if (*con_cls == NULL) {
    /* Headers only so far. The CLI makes one request at a time, so one
     * body buffer serves. */
    *con_cls = &first;
    if (strcmp(method, "POST") == 0 && strcmp(url, "/api/v1/sessions") == 0) fake.body_len = 0;
    pthread_mutex_unlock(&fake.mu);
    return MHD_YES;
  }
  if (*upload_size > 0) {
    if (strcmp(url, "/api/v1/sessions") == 0) {
      size_t n = *upload_size;
      if (n > sizeof fake.body - 1 - fake.body_len) n = sizeof fake.body - 1 - fake.body_len;
      memcpy(fake.body + fake.body_len, upload, n);
      fake.body_len += n;
      fake.body[fake.body_len] = '\0';
    }
    *upload_size = 0;
    pthread_mutex_unlock(&fake.mu);
    return MHD_YES;
  }
  fake.requests++;
  unsigned status = 404;
  const char *body = "{\"error\": \"no such path\"}";
  size_t len = 0;
  if (strcmp(method, "POST") == 0 && strcmp(url, "/api/v1/sessions") == 0) {
    fake.posts++;
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    snprintf(fake.content_type, sizeof fake.content_type, "%s", ct ? ct : "");
    status = fake.post_status;
    body = fake.post_body;
  } else if (strcmp(method, "POST") == 0 && strcmp(url, "/api/v1/sessions/s-1/cancel") == 0) {
    fake.cancels++;
    status = 200;
    body = "{\"id\": \"s-1\", \"state\": \"cancelled\"}";
  } else if (strcmp(method, "GET") == 0 && strcmp(url, "/api/v1/sessions/s-1") == 0) {
    size_t i = (size_t)fake.gets < fake.npolls ? (size_t)fake.gets : fake.npolls - 1;
    fake.gets++;
    status = 200;
    body = fake.polls[i];
  } else if (strcmp(method, "GET") == 0 && strcmp(url, "/api/v1/sessions/s-1/profile") == 0) {
    fake.profile_gets++;
    const char *f = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "format");
    snprintf(fake.format, sizeof fake.format, "%s", f ? f : "");
    status = 200;
    body = fake.profile;
    len = fake.profile_len;
  } else if (strcmp(method, "GET") == 0 && strcmp(url, "/api/v1/sessions") == 0) {
    status = 200;
    body = fake.list;
  }
  if (len == 0) len = strlen(body);
  pthread_mutex_unlock(&fake.mu);
  return reply(conn, status, body, len);
}

/* A session that is pending, then running, then ends as `last`. */
static void scenario(unsigned post_status, const char *post_body, const char *last) {
  pthread_mutex_lock(&fake.mu);
  fake.post_status = post_status;
  fake.post_body = post_body;
  fake.polls[0] = "{\"id\":\"s-1\",\"state\":\"pending\",\"targets\":0,\"samples\":0}";
  fake.polls[1] = "{\"id\":\"s-1\",\"state\":\"running\",\"targets\":2,\"samples\":40,"
                  "\"progress\":0.5}";
  fake.polls[2] = last;
  fake.npolls = 3;
  fake.profile = "main;work 7\nmain;idle 3\n";
  fake.profile_len = strlen(fake.profile);
  fake.requests = fake.posts = fake.gets = fake.profile_gets = fake.cancels = 0;
  fake.body[0] = fake.format[0] = fake.content_type[0] = '\0';
  fake.body_len = 0;
  pthread_mutex_unlock(&fake.mu);
}

static const char created[] = "{\"id\":\"s-1\",\"state\":\"pending\"}";
static const char done[] =
    "{\"id\":\"s-1\",\"state\":\"done\",\"targets\":2,\"samples\":100,\"progress\":1,"
    "\"hosts\":[{\"host\":\"h1\",\"state\":\"done\",\"targets\":2,\"samples\":100,"
    "\"hz\":500,\"message\":\"\"}]}";

static int setup(void **state) {
  (void)state;
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

static char out_path[512], err_path[512];
/* When set, the next spawn's stderr is this pseudo-terminal (its name). */
static char err_pty[128];

/* Start `ember ARGS...` with EMBER_SERVER at the fake server, stdout and
 * stderr to files (or stderr to err_pty). */
static pid_t spawn(const char *const *args) {
  const char *argv[32] = {EMBER_CLI};
  size_t argc = 1;
  for (size_t i = 0; args[i] != NULL && argc < 31; i++) argv[argc++] = args[i];
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
  snprintf(out_path, sizeof out_path, "%s/cli-profile.out", EMBER_TEST_TMP);
  snprintf(err_path, sizeof err_path, "%s/cli-profile.err", EMBER_TEST_TMP);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = err_pty[0] ? open(err_pty, O_WRONLY | O_NOCTTY)
                       : open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) _exit(127);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    execve(argv[0], (char *const *)(uintptr_t)argv, envp);
    _exit(127);
  }
  return pid;
}

static void finish(pid_t pid, run_t *r) {
  r->status = -1;
  for (int waited = 0; waited < 30000; waited += 10) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  if (r->status == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
  }
  slurp(out_path, r->out, sizeof r->out);
  slurp(err_path, r->err, sizeof r->err);
}

static void run_args(run_t *r, const char *const *args) { finish(spawn(args), r); }

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

/* The JSON body the last POST carried. */
static json_t *sent(void) {
  json_error_t e;
  json_t *doc = json_loads(fake.body, 0, &e);
  if (doc == NULL) fail_msg("POST body is not JSON (%s): %s", e.text, fake.body);
  return doc;
}

/* ---- tests ---- */

static void test_cli_profile_done_writes_file(void **state) {
  (void)state;
  scenario(201, created, done);
  char path[512];
  snprintf(path, sizeof path, "%s/cli-session.folded", EMBER_TEST_TMP);
  unlink(path);
  run_t r;
  RUN(&r, "profile", "--worker", "api", "--actor", "room-7", "--duration", "2s", "--hz", "500",
      "-o", path);
  expect(&r, 0, "wrote 24 bytes to ");
  /* stderr is not a terminal: one plain line per state. */
  assert_non_null(strstr(r.err, "session s-1: profiling worker api for 2.0s\n"));
  assert_non_null(strstr(r.err, "session s-1: pending, 0 targets, 0 samples"));
  assert_non_null(strstr(r.err, "session s-1: running, 2 targets, 40 samples"));
  assert_non_null(strstr(r.err, "session s-1: done, 2 targets, 100 samples"));
  assert_null(strchr(r.err, '\r'));
  assert_int_equal(fake.posts, 1);
  assert_int_equal(fake.gets, 3);
  assert_int_equal(fake.profile_gets, 1);
  assert_int_equal(fake.cancels, 0);
  assert_string_equal(fake.format, "folded"); /* from -o's name */
  assert_string_equal(fake.content_type, "application/json");
  json_t *b = sent();
  assert_string_equal(json_string_value(json_object_get(b, "worker")), "api");
  assert_string_equal(json_string_value(json_object_get(b, "actor")), "room-7");
  assert_string_equal(json_string_value(json_object_get(b, "type")), "cpu");
  assert_int_equal(json_integer_value(json_object_get(b, "duration_ms")), 2000);
  assert_int_equal(json_integer_value(json_object_get(b, "hz")), 500);
  assert_null(json_object_get(b, "version"));
  assert_null(json_object_get(b, "host"));
  assert_null(json_object_get(b, "instances"));
  json_decref(b);
  char got[256];
  slurp(path, got, sizeof got);
  assert_string_equal(got, "main;work 7\nmain;idle 3\n");

  /* Every selector and the defaults: 5000 ms, 1000 Hz; bare numbers are ms. */
  scenario(201, created, done);
  RUN(&r, "profile", "--worker", "api", "--version", "v2", "--host", "h1", "--instances", "3",
      "--type", "memory", "--format", "folded");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, "main;work 7\nmain;idle 3\n");
  b = sent();
  assert_string_equal(json_string_value(json_object_get(b, "version")), "v2");
  assert_string_equal(json_string_value(json_object_get(b, "host")), "h1");
  assert_int_equal(json_integer_value(json_object_get(b, "instances")), 3);
  assert_string_equal(json_string_value(json_object_get(b, "type")), "memory");
  assert_int_equal(json_integer_value(json_object_get(b, "duration_ms")), 5000);
  assert_int_equal(json_integer_value(json_object_get(b, "hz")), 1000);
  json_decref(b);
  scenario(201, created, done);
  RUN(&r, "profile", "--actor", "room-7", "--duration", "750", "--format", "folded");
  expect(&r, 0, NULL);
  b = sent();
  assert_null(json_object_get(b, "worker"));
  assert_int_equal(json_integer_value(json_object_get(b, "duration_ms")), 750);
  json_decref(b);
}

/* On a terminal, one line rewritten with \r, ended by a newline. */
static void test_cli_profile_progress_on_terminal(void **state) {
  (void)state;
  scenario(201, created, done);
  int pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  assert_true(pty >= 0);
  assert_int_equal(grantpt(pty), 0);
  assert_int_equal(unlockpt(pty), 0);
  assert_int_equal(ptsname_r(pty, err_pty, sizeof err_pty), 0);
  const char *const args[] = {"profile", "--worker", "api",    "--duration",
                              "2s",      "--format", "folded", NULL};
  run_t r;
  finish(spawn(args), &r);
  err_pty[0] = '\0';
  char got[8192];
  size_t n = 0;
  int fl = fcntl(pty, F_GETFL);
  assert_int_equal(fcntl(pty, F_SETFL, fl | O_NONBLOCK), 0);
  for (;;) {
    ssize_t k = read(pty, got + n, sizeof got - 1 - n);
    if (k <= 0) break;
    n += (size_t)k;
  }
  got[n] = '\0';
  close(pty);
  assert_int_equal(r.status, 0);
  /* The pty turns \n into \r\n. */
  const char *want[] = {"\rsession s-1: 0 targets, ",
                        "/2.0s, 0 samples, pending",
                        "\rsession s-1: 2 targets, ",
                        "/2.0s, 40 samples, running",
                        "\rsession s-1: 2 targets, ",
                        "/2.0s, 100 samples, done",
                        "\r\n"};
  const char *at = got;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const char *f = strstr(at, want[i]);
    if (f == NULL) fail_msg("'%s' not found in order in: %s", want[i], got);
    at = f + strlen(want[i]);
  }
}

static void test_cli_profile_top_table(void **state) {
  (void)state;
  scenario(201, created, done);
  fake.profile = "{\"type\":\"cpu\",\"unit\":\"nanoseconds\",\"total\":2000000000,\"functions\":["
                 "{\"name\":\"work\",\"self\":1500000000,\"total\":2000000000}]}";
  fake.profile_len = strlen(fake.profile);
  run_t r;
  RUN(&r, "profile", "--worker", "api");
  expect(&r, 0, NULL);
  assert_string_equal(fake.format, "top");
  assert_string_equal(r.out, "cpu (nanoseconds), total 2.00s, session s-1, worker api\n\n"
                             " self  self%  total  total%  function\n"
                             "1.50s  75.0%  2.00s  100.0%  work\n");
}

static void test_cli_profile_refused(void **state) {
  (void)state;
  run_t r;
  scenario(404, "{\"error\": \"no running process matches worker \\\"nope\\\"\"}", done);
  RUN(&r, "profile", "--worker", "nope");
  expect(&r, 2, "the server refused the session: no running process matches worker \"nope\"");
  assert_non_null(strstr(r.err, "`ember workers` and `ember actors` list what it knows"));
  assert_int_equal(fake.posts, 1);
  assert_int_equal(fake.gets, 0);
  scenario(400, "{\"error\": \"duration_ms: 900000 is over the cap of 60000\"}", done);
  RUN(&r, "profile", "--worker", "api", "--duration", "15m");
  expect(&r, 2, "the server refused the session: duration_ms: 900000 is over the cap of 60000");
  /* A server from before sessions. */
  scenario(404, "{\"error\": \"no such path: /api/v1/sessions (the API is under /api/v1/)\"}",
           done);
  RUN(&r, "profile", "--worker", "api");
  expect(&r, 1, "has no /api/v1/sessions (HTTP 404); it predates on-demand sessions");
  scenario(405, "{\"error\": \"method POST not allowed: use GET\"}", done);
  RUN(&r, "profile", "--worker", "api");
  expect(&r, 1, "does not take this request (HTTP 405: method POST not allowed: use GET)");
  scenario(201, "{\"id\": \"../../x\"}", done);
  RUN(&r, "profile", "--worker", "api");
  expect(&r, 1, "no usable session \"id\"");
  assert_int_equal(fake.gets, 0);
}

static void test_cli_profile_failed(void **state) {
  (void)state;
  run_t r;
  scenario(201, created,
           "{\"id\":\"s-1\",\"state\":\"failed\",\"targets\":2,\"samples\":0,\"hosts\":["
           "{\"host\":\"h1\",\"state\":\"failed\",\"targets\":1,\"samples\":0,"
           "\"message\":\"perf_event_open: permission denied\"},"
           "{\"host\":\"h2\",\"state\":\"failed\",\"targets\":1,\"samples\":0,"
           "\"message\":\"agent did not answer\\u001b[2J\"}]}");
  RUN(&r, "profile", "--worker", "api");
  expect(&r, 1, "session s-1 failed\n");
  assert_non_null(strstr(r.err, "HOST  STATE   TARGETS  SAMPLES  MESSAGE\n"));
  assert_non_null(
      strstr(r.err, "h1    failed        1        0  perf_event_open: permission denied"));
  assert_non_null(strstr(r.err, "agent did not answer?[2J"));
  assert_int_equal(fake.profile_gets, 0);
  scenario(201, created, "{\"id\":\"s-1\",\"state\":\"expired\",\"targets\":1,\"samples\":0}");
  RUN(&r, "profile", "--worker", "api");
  expect(&r, 1, "session s-1 expired (no result in time)");
}

static void test_cli_profile_sigint_cancels(void **state) {
  (void)state;
  scenario(201, created, "{\"id\":\"s-1\",\"state\":\"running\",\"targets\":2,\"samples\":9}");
  const char *const args[] = {"profile", "--worker", "api", "--duration", "60s", NULL};
  pid_t pid = spawn(args);
  /* Interrupt once it polls a running session. */
  for (int i = 0; i < 3000; i++) {
    pthread_mutex_lock(&fake.mu);
    int gets = fake.gets;
    pthread_mutex_unlock(&fake.mu);
    if (gets >= 3) break;
    struct timespec ts = {0, 10 * 1000000};
    nanosleep(&ts, NULL);
  }
  assert_true(fake.gets >= 3);
  assert_int_equal(kill(pid, SIGINT), 0);
  run_t r;
  finish(pid, &r);
  expect(&r, 130, "interrupted; cancelled session s-1");
  assert_int_equal(fake.cancels, 1);
  assert_int_equal(fake.profile_gets, 0);
}

static void test_cli_profile_usage_errors(void **state) {
  (void)state;
  scenario(201, created, done);
  run_t r;
  RUN(&r, "profile");
  expect(&r, 2, "--worker W or --actor A is required");
  RUN(&r, "profile", "--worker", "api", "--duration", "soon");
  expect(&r, 2, "--duration 'soon': expected whole milliseconds");
  RUN(&r, "profile", "--worker", "api", "--duration", "0");
  expect(&r, 2, "--duration '0'");
  RUN(&r, "profile", "--worker", "api", "--duration", "1500us");
  expect(&r, 2, "--duration '1500us'");
  RUN(&r, "profile", "--worker", "api", "--duration", "2d");
  expect(&r, 2, "from 1ms to 24h");
  RUN(&r, "profile", "--worker", "api", "--type", "wall");
  expect(&r, 2, "--type 'wall': expected cpu or memory");
  RUN(&r, "profile", "--worker", "api", "--hz", "0");
  expect(&r, 2, "--hz '0'");
  RUN(&r, "profile", "--worker", "api", "--hz", "12abc");
  expect(&r, 2, "--hz '12abc'");
  RUN(&r, "profile", "--worker", "api", "--instances", "-1");
  expect(&r, 2, "--instances '-1'");
  RUN(&r, "profile", "--worker", "api", "--format", "svg");
  expect(&r, 2, "--format 'svg'");
  RUN(&r, "profile", "--worker", "api", "-o", "x.bin");
  expect(&r, 2, "cannot tell the format from the name 'x.bin'");
  RUN(&r, "profile", "--worker", "api", "--from", "-1h");
  expect(&r, 2, "unknown option '--from'");
  RUN(&r, "profile", "--worker", "api", "--json");
  expect(&r, 2, "--json is not an option of this command");
  RUN(&r, "sessions", "--worker", "api");
  expect(&r, 2, "--worker is not an option of this command");
  RUN(&r, "profile", "--worker", "api", "--server", "ftp://x");
  expect(&r, 2, "expected an http:// or https:// URL");
  assert_int_equal(fake.requests, 0);
  RUN(&r, "profile", "--help");
  expect(&r, 0, NULL);
  assert_non_null(strstr(r.out, "ember profile --worker W | --actor A"));
  assert_non_null(strstr(r.out, "--token T (default $EMBER_TOKEN)"));
}

static void test_cli_profile_no_samples(void **state) {
  (void)state;
  scenario(201, created, "{\"id\":\"s-1\",\"state\":\"done\",\"targets\":2,\"samples\":0}");
  fake.profile = "";
  fake.profile_len = 0;
  char path[512];
  snprintf(path, sizeof path, "%s/cli-session-empty.folded", EMBER_TEST_TMP);
  unlink(path);
  run_t r;
  RUN(&r, "profile", "--worker", "api", "-o", path);
  expect(&r, 3, "session s-1 finished with no samples from its 2 targets");
  struct stat st;
  assert_int_equal(stat(path, &st), 0); /* still written */
  assert_int_equal(st.st_size, 0);
}

static void test_cli_sessions_list(void **state) {
  (void)state;
  scenario(201, created, done);
  fake.list = "{\"sessions\":[{\"id\":\"s-1\",\"state\":\"running\",\"worker\":\"api\","
              "\"targets\":2,\"samples\":40,\"progress\":0.5},{\"id\":\"s-0\",\"state\":"
              "\"done\",\"actor\":\"room-7\",\"targets\":1,\"samples\":1234,\"progress\":1}]}";
  run_t r;
  RUN(&r, "sessions");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, "ID   STATE    TARGET  TARGETS  SAMPLES  PROGRESS\n"
                             "s-1  running  api           2       40       50%\n"
                             "s-0  done     room-7        1     1234      100%\n");
  RUN(&r, "sessions", "--json");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, fake.list);
  fake.list = "{\"sessions\":[]}";
  RUN(&r, "sessions");
  expect(&r, 3, "the server has no sessions");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cli_profile_done_writes_file),
      cmocka_unit_test(test_cli_profile_progress_on_terminal),
      cmocka_unit_test(test_cli_profile_top_table),
      cmocka_unit_test(test_cli_profile_refused),
      cmocka_unit_test(test_cli_profile_failed),
      cmocka_unit_test(test_cli_profile_sigint_cancels),
      cmocka_unit_test(test_cli_profile_usage_errors),
      cmocka_unit_test(test_cli_profile_no_samples),
      cmocka_unit_test(test_cli_sessions_list),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
