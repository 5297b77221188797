/* The ember command as a client of the HTTP API: the built binary run as a
 * real process against a fake API server (libmicrohttpd, in this process)
 * that answers with canned bodies and records what it was asked. The test
 * of the CLI against the real server lives with the end-to-end tests.
 * Also ember_config_apply_args, the argument loop the commands share. */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <dirent.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cmocka.h>
#include <microhttpd.h>
#include <zlib.h>

#include "ember/config.h"
#include "ember/ember.h"
#include "ember/parse.h"

#define EMBER_CLI EMBER_BINARY_DIR "/cli/ember"
/* argv entries are char *; the strings are never written. */
#define S(x) ((char *)(uintptr_t)(x))

/* ---- the fake API server ---- */

#define MAX_ARGS 16

typedef struct fake {
  struct MHD_Daemon *d;
  unsigned port;
  pthread_mutex_t mu;
  /* canned answer */
  unsigned status;
  const char *body;
  size_t body_len;
  const char *location; /* for redirects */
  /* what the last request asked */
  int requests;
  char path[256];
  char auth[512];
  char keys[MAX_ARGS][64];
  char values[MAX_ARGS][256];
  size_t nargs;
} fake_t;

static fake_t fake = {.mu = PTHREAD_MUTEX_INITIALIZER};
static char server_url[64];

static enum MHD_Result record_arg(void *ctx, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
  (void)ctx;
  (void)kind;
  if (fake.nargs < MAX_ARGS) {
    snprintf(fake.keys[fake.nargs], sizeof fake.keys[0], "%s", key);
    snprintf(fake.values[fake.nargs], sizeof fake.values[0], "%s", value ? value : "");
    fake.nargs++;
  }
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)cls;
  (void)method;
  (void)version;
  (void)upload;
  (void)upload_size;
  static int first;
  if (*con_cls == NULL) {
    *con_cls = &first; /* headers only so far; answer on the next call */
    return MHD_YES;
  }
  pthread_mutex_lock(&fake.mu);
  fake.requests++;
  snprintf(fake.path, sizeof fake.path, "%s", url);
  const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
  snprintf(fake.auth, sizeof fake.auth, "%s", auth ? auth : "");
  fake.nargs = 0;
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, record_arg, NULL);
  struct MHD_Response *r = MHD_create_response_from_buffer(
      fake.body_len, (void *)(uintptr_t)fake.body, MHD_RESPMEM_MUST_COPY);
  if (fake.location != NULL) MHD_add_response_header(r, "Location", fake.location);
  unsigned status = fake.status;
  pthread_mutex_unlock(&fake.mu);
  enum MHD_Result ret = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return ret;
}

static void answer_len(unsigned status, const char *body, size_t len) {
  pthread_mutex_lock(&fake.mu);
  fake.status = status;
  fake.body = body;
  fake.body_len = len;
  fake.location = NULL;
  fake.requests = 0;
  fake.nargs = 0;
  fake.path[0] = fake.auth[0] = '\0';
  pthread_mutex_unlock(&fake.mu);
}

static void answer(unsigned status, const char *body) { answer_len(status, body, strlen(body)); }

static const char *arg(const char *key) {
  for (size_t i = 0; i < fake.nargs; i++) {
    if (strcmp(fake.keys[i], key) == 0) return fake.values[i];
  }
  return NULL;
}

static int setup(void **state) {
  (void)state;
  fake.d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            on_request, NULL, MHD_OPTION_END);
  if (fake.d == NULL) return -1;
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(fake.d, MHD_DAEMON_INFO_BIND_PORT);
  fake.port = info ? info->port : 0;
  snprintf(server_url, sizeof server_url, "http://127.0.0.1:%u", fake.port);
  return fake.port ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  MHD_stop_daemon(fake.d);
  return 0;
}

/* ---- running the CLI ---- */

typedef struct run {
  int status; /* exit status, or -1 when it did not exit */
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

/* Run `ember ARGS...` (NULL-terminated) with EMBER_SERVER pointing at the
 * fake server plus `env` ("K=V" list, may be NULL). stdout goes to a file,
 * or to a pseudo-terminal when `tty`. */
static void run_env(run_t *r, const char *const *env, bool tty, ...) {
  const char *argv[32] = {EMBER_CLI};
  size_t argc = 1;
  va_list ap;
  va_start(ap, tty);
  for (const char *a = va_arg(ap, const char *); a != NULL && argc < 31;
       a = va_arg(ap, const char *))
    argv[argc++] = a;
  va_end(ap);
  argv[argc] = NULL;
  char envs[8][512];
  char *envp[12];
  size_t n = 0;
  snprintf(envs[n], sizeof envs[n], "PATH=/usr/bin:/bin");
  envp[n] = envs[n];
  n++;
  snprintf(envs[n], sizeof envs[n], "EMBER_SERVER=%s", server_url);
  envp[n] = envs[n];
  n++;
  /* Sanitizer builds: children report to stderr like the test. */
  const char *keep[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TZ"};
  for (size_t i = 0; i < 4; i++) {
    if (getenv(keep[i]) != NULL) {
      snprintf(envs[n], sizeof envs[n], "%s=%s", keep[i], getenv(keep[i]));
      envp[n] = envs[n];
      n++;
    }
  }
  for (size_t i = 0; env && env[i] && n < 11; i++) envp[n++] = (char *)(uintptr_t)env[i];
  envp[n] = NULL;
  char out_path[512], err_path[512];
  snprintf(out_path, sizeof out_path, "%s/cli.out", EMBER_TEST_TMP);
  snprintf(err_path, sizeof err_path, "%s/cli.err", EMBER_TEST_TMP);
  int pty = -1;
  char pty_name[128] = "";
  if (tty) {
    pty = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    assert_true(pty >= 0);
    assert_int_equal(grantpt(pty), 0);
    assert_int_equal(unlockpt(pty), 0);
    assert_int_equal(ptsname_r(pty, pty_name, sizeof pty_name), 0);
  }
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int o = tty ? open(pty_name, O_WRONLY | O_NOCTTY)
                : open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (o < 0 || e < 0 || in < 0) _exit(127);
    dup2(in, 0);
    dup2(o, 1);
    dup2(e, 2);
    execve(argv[0], (char *const *)(uintptr_t)argv, envp);
    _exit(127);
  }
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
  if (pty >= 0) close(pty);
  if (tty)
    r->out[0] = '\0';
  else
    slurp(out_path, r->out, sizeof r->out);
  slurp(err_path, r->err, sizeof r->err);
}

#define RUN(r, ...) run_env(r, NULL, false, __VA_ARGS__, NULL)

static void expect(const run_t *r, int status, const char *in_err) {
  if (r->status != status || (in_err && strstr(r->err, in_err) == NULL))
    fail_msg("exit %d (want %d)\nstderr: %s\nstdout: %.2000s\nwanted in stderr: %s", r->status,
             status, r->err, r->out, in_err ? in_err : "-");
}

/* ---- tests ---- */

static void test_cli_config_apply_args(void **state) {
  (void)state;
  char path[512], err[256];
  snprintf(path, sizeof path, "%s/cli.conf", EMBER_TEST_TMP);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("a = file\nb = file\n", f);
  fclose(f);
  char with_eq[600];
  snprintf(with_eq, sizeof with_eq, "--config=%s", path);
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  /* In order, flags after the file win; stops at the caller's own flag. */
  char *argv1[] = {S("a=flag"), S("--config"), path, S("c=3"), S("--data"), S("DIR"), S("x=y")};
  int n = ember_config_apply_args(cfg, 7, argv1, err, sizeof err);
  assert_int_equal(n, 4);
  assert_string_equal(err, "unknown argument '--data' (expected --config FILE or key=value)");
  assert_string_equal(ember_config_get(cfg, "a"), "file");
  assert_string_equal(ember_config_get(cfg, "b"), "file");
  assert_string_equal(ember_config_get(cfg, "c"), "3");
  /* The caller resumes after its flag. */
  assert_int_equal(ember_config_apply_args(cfg, 1, argv1 + 6, err, sizeof err), 1);
  assert_string_equal(ember_config_get(cfg, "x"), "y");
  char *argv2[] = {with_eq, S("b=flag")};
  assert_int_equal(ember_config_apply_args(cfg, 2, argv2, err, sizeof err), 2);
  assert_string_equal(ember_config_get(cfg, "b"), "flag");
  assert_int_equal(ember_config_apply_args(cfg, 0, NULL, err, sizeof err), 0);
  char *argv3[] = {S("--config")};
  assert_int_equal(ember_config_apply_args(cfg, 1, argv3, err, sizeof err), EMBER_ECONFIG);
  assert_string_equal(err, "--config needs a FILE");
  char *argv4[] = {S("--config"), S("/nonexistent/ember.conf")};
  assert_int_equal(ember_config_apply_args(cfg, 2, argv4, err, sizeof err), -ENOENT);
  assert_non_null(strstr(err, "/nonexistent/ember.conf"));
  char *argv5[] = {S("bad key=1")};
  assert_int_equal(ember_config_apply_args(cfg, 1, argv5, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "invalid key"));
  char *argv6[] = {S("positional")};
  assert_int_equal(ember_config_apply_args(cfg, 1, argv6, err, sizeof err), 0);
  assert_int_equal(ember_config_apply_args(NULL, 0, NULL, err, sizeof err), -EINVAL);
  ember_config_free(cfg);
}

static void test_cli_usage_errors(void **state) {
  (void)state;
  run_t r;
  answer(200, "{}");
  RUN(&r, "query");
  expect(&r, 2, "--worker W is required");
  RUN(&r, "query", "--worker", "api", "--from", "yesterday");
  expect(&r, 2, "--from 'yesterday': expected now, a relative time (-15m, now-2h), Unix seconds");
  assert_non_null(strstr(r.err, "RFC 3339"));
  RUN(&r, "query", "--worker", "api", "--from", "now", "--to", "-1h");
  expect(&r, 2, "--from (now) must be before --to (-1h)");
  RUN(&r, "query", "--worker", "api", "--format", "svg");
  expect(&r, 2, "--format 'svg': expected top, pprof, folded, speedscope or tree");
  RUN(&r, "query", "--worker", "api", "--type", "wall");
  expect(&r, 2, "--type 'wall'");
  RUN(&r, "query", "--worker", "api", "--format", "folded", "--limit", "5");
  expect(&r, 2, "only --format top takes a limit");
  RUN(&r, "query", "--worker", "api", "--limit", "0");
  expect(&r, 2, "--limit '0'");
  RUN(&r, "query", "--wokrer", "api");
  expect(&r, 2, "unknown option '--wokrer'");
  RUN(&r, "query", "--worker", "a", "--worker", "b");
  expect(&r, 2, "--worker given twice");
  RUN(&r, "query", "--worker");
  expect(&r, 2, "--worker needs a value");
  RUN(&r, "workers", "--worker", "api");
  expect(&r, 2, "--worker is not an option of this command");
  RUN(&r, "query", "--worker", "api", "-o", "profile.bin");
  expect(&r, 2, "cannot tell the format from the name 'profile.bin'");
  RUN(&r, "query", "--worker", "api", "--server", "ftp://example.com");
  expect(&r, 2, "expected an http:// or https:// URL");
  RUN(&r, "frobnicate");
  expect(&r, 2, "unknown command 'frobnicate'");
  /* A value too long for the request: the same usage error everywhere. */
  static char huge[9000];
  memset(huge, 'w', sizeof huge - 1);
  RUN(&r, "versions", "--worker", huge);
  expect(&r, 2, "cannot build the request");
  RUN(&r, "query", "--worker", huge);
  expect(&r, 2, "are the --worker/... values too long?");
  assert_int_equal(fake.requests, 0); /* all of it caught before a request */
  RUN(&r, "query", "--help");
  expect(&r, 0, NULL);
  assert_non_null(strstr(r.out, "ember query --worker W"));
}

static void test_cli_times_and_selector_sent(void **state) {
  (void)state;
  run_t r;
  answer(200, "main;work 5\n");
  int64_t before = ember_time_now_ns();
  RUN(&r, "query", "--worker", "api gw/1", "--host", "h1", "--format", "folded");
  int64_t after = ember_time_now_ns();
  expect(&r, 0, NULL);
  assert_string_equal(r.out, "main;work 5\n");
  assert_int_equal(fake.requests, 1);
  assert_string_equal(fake.path, "/api/v1/profile");
  assert_string_equal(arg("worker"), "api gw/1"); /* encoded, then decoded */
  assert_string_equal(arg("host"), "h1");
  assert_string_equal(arg("format"), "folded");
  assert_null(arg("version"));
  assert_null(arg("type"));
  /* Absolute Unix seconds with a fraction, an hour apart, around now. */
  const char *from = arg("from"), *to = arg("to");
  assert_non_null(from);
  assert_non_null(to);
  assert_non_null(strchr(from, '.'));
  int64_t f_ns, t_ns;
  assert_int_equal(ember_parse_time(from, 0, &f_ns), 0);
  assert_int_equal(ember_parse_time(to, 0, &t_ns), 0);
  assert_true(t_ns >= before && t_ns <= after);
  assert_int_equal(t_ns - f_ns, 3600LL * 1000000000);

  RUN(&r, "query", "--worker", "api", "--format", "folded", "--from", "1764410400", "--to",
      "2026-11-29T10:00:00.5Z", "--type", "alloc_bytes");
  expect(&r, 0, NULL);
  assert_string_equal(arg("from"), "1764410400.000000000");
  assert_string_equal(arg("to"), "1795946400.500000000");
  assert_string_equal(arg("type"), "alloc_bytes");
}

static void test_cli_token(void **state) {
  (void)state;
  run_t r;
  answer(200, "a 1\n");
  RUN(&r, "query", "--worker", "w", "--format", "folded");
  expect(&r, 0, NULL);
  assert_string_equal(fake.auth, "");
  const char *env[] = {"EMBER_TOKEN=s3cret", NULL};
  run_env(&r, env, false, "query", "--worker", "w", "--format", "folded", NULL);
  expect(&r, 0, NULL);
  assert_string_equal(fake.auth, "Bearer s3cret");
  run_env(&r, env, false, "workers", "--token", "other", NULL);
  assert_string_equal(fake.auth, "Bearer other");
}

static void test_cli_connection_refused(void **state) {
  (void)state;
  /* A port nobody listens on: bind one, then close it. */
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
  close(s);
  char url[64];
  snprintf(url, sizeof url, "http://127.0.0.1:%u", ntohs(a.sin_port));
  run_t r;
  RUN(&r, "workers", "--server", url);
  expect(&r, 1, "cannot reach the Ember server at ");
  assert_non_null(strstr(r.err, url));
  assert_non_null(strstr(r.err, "(connection refused); start one with `ember up`, or set "
                                "--server / EMBER_SERVER"));
  RUN(&r, "query", "--worker", "w", "--server", url);
  expect(&r, 1, "(connection refused)");
}

static void test_cli_server_errors(void **state) {
  (void)state;
  run_t r;
  answer(400, "{\"error\": \"max_nodes: expected 0..1000000, got \\\"x\\\"\"}");
  RUN(&r, "query", "--worker", "w");
  expect(&r, 2, "the server rejected the query: max_nodes: expected 0..1000000, got \"x\"");
  answer(401, "{\"error\": \"missing or wrong bearer token\"}");
  RUN(&r, "workers");
  expect(&r, 2, "the server needs a token: --token or EMBER_TOKEN");
  answer(500, "{\"error\": \"store: disk full\"}");
  RUN(&r, "workers");
  expect(&r, 1, "the server failed (HTTP 500): store: disk full");
  answer(502, "<html>bad gateway\x1b[2J</html>");
  RUN(&r, "workers");
  expect(&r, 1, "the server failed (HTTP 502): <html>bad gateway?[2J</html>");
  answer(404, "{\"error\": \"unknown path\"}");
  RUN(&r, "hosts");
  expect(&r, 1, "has no /api/v1/hosts (HTTP 404)");
  /* Redirects are reported, not followed (they would carry the token). */
  answer(302, "");
  fake.location = "http://elsewhere.example/";
  RUN(&r, "workers");
  expect(&r, 1, "redirects (HTTP 302 to http://elsewhere.example/)");
  assert_int_equal(fake.requests, 1);
  answer(200, "not json");
  RUN(&r, "workers");
  expect(&r, 1, "is not what this ember expects");
}

/* gzip of `len` protobuf bytes, as the API sends pprof. */
static size_t gzip(const void *in, size_t len, unsigned char *out, size_t size) {
  z_stream zs = {0};
  assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  zs.next_in = (Bytef *)(uintptr_t)in;
  zs.avail_in = (uInt)len;
  zs.next_out = out;
  zs.avail_out = (uInt)size;
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  size_t n = size - zs.avail_out;
  deflateEnd(&zs);
  return n;
}

static size_t count_tmp_leftovers(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strstr(e->d_name, ".tmp.") != NULL;
  closedir(d);
  return n;
}

static void test_cli_output_file(void **state) {
  (void)state;
  /* sample_type {type 1, unit 2}, one sample {location_id 1, value 7}. */
  static const unsigned char pb[] = {0x0a, 0x04, 0x08, 0x01, 0x10, 0x02,
                                     0x12, 0x04, 0x08, 0x01, 0x10, 0x07};
  static unsigned char gz[256];
  size_t gz_len = gzip(pb, sizeof pb, gz, sizeof gz);
  answer_len(200, (const char *)gz, gz_len);
  char path[512], want[600];
  snprintf(path, sizeof path, "%s/cli-cpu.pb.gz", EMBER_TEST_TMP);
  unlink(path);
  run_t r;
  RUN(&r, "query", "--worker", "w", "-o", path);
  snprintf(want, sizeof want, "wrote %zu bytes to %s", gz_len, path);
  expect(&r, 0, want);
  assert_string_equal(arg("format"), "pprof"); /* from the file name */
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char got[256];
  size_t n = fread(got, 1, sizeof got, f);
  fclose(f);
  assert_int_equal(n, gz_len);
  assert_memory_equal(got, gz, gz_len);
  assert_int_equal(count_tmp_leftovers(EMBER_TEST_TMP, "cli-cpu.pb.gz"), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true((st.st_mode & 0044) != 0 || (st.st_mode & 0600) == 0600);

  /* An empty profile is still written, and the exit status says so. */
  static const unsigned char pb_empty[] = {0x0a, 0x04, 0x08, 0x01, 0x10, 0x02};
  gz_len = gzip(pb_empty, sizeof pb_empty, gz, sizeof gz);
  answer_len(200, (const char *)gz, gz_len);
  RUN(&r, "query", "--worker", "w", "--format", "pprof", "-o", path);
  expect(&r, 3, "no cpu samples for worker 'w'");
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal((size_t)st.st_size, gz_len);

  /* A directory that does not exist: a message, no file, exit 1. */
  RUN(&r, "query", "--worker", "w", "--format", "pprof", "-o", "/nonexistent/dir/x.pb.gz");
  expect(&r, 1, "cannot write /nonexistent/dir/x.pb.gz");
}

static void test_cli_pprof_to_terminal_refused(void **state) {
  (void)state;
  answer(200, "x");
  run_t r;
  run_env(&r, NULL, true, "query", "--worker", "w", "--format", "pprof", NULL);
  expect(&r, 2, "pprof is binary (gzip); write it with -o FILE.pb.gz");
  assert_int_equal(fake.requests, 0);
}

static void test_cli_top_table(void **state) {
  (void)state;
  answer(200, "{\"type\":\"cpu\",\"unit\":\"nanoseconds\",\"total\":2000000000,\"functions\":["
              "{\"name\":\"work\\u001b[31m\",\"self\":1500000000,\"total\":1500000000},"
              "{\"name\":\"main\",\"self\":500000,\"total\":2000000000}]}");
  run_t r;
  RUN(&r, "query", "--worker", "api", "--limit", "5");
  expect(&r, 0, NULL);
  assert_string_equal(arg("format"), "top");
  assert_string_equal(arg("limit"), "5");
  const char *want = "    self  self%  total  total%  function\n"
                     "   1.50s  75.0%  1.50s   75.0%  work?[31m\n"
                     "500.00us   0.0%  2.00s  100.0%  main\n";
  const char *table = strstr(r.out, "\n\n");
  if (table == NULL || strcmp(table + 2, want) != 0) fail_msg("got:\n%s\nwant:\n%s", r.out, want);
  assert_true(strncmp(r.out, "cpu (nanoseconds), total 2.00s, worker api, between ", 52) == 0);

  answer(200, "{\"type\":\"cpu\",\"unit\":\"nanoseconds\",\"total\":0,\"functions\":[]}");
  RUN(&r, "query", "--worker", "api");
  expect(&r, 3, "no cpu samples for worker 'api' between ");
  assert_string_equal(r.out, "");
}

static void test_cli_workers(void **state) {
  (void)state;
  char body[1024];
  long long now_ms = (long long)(ember_time_now_ns() / 1000000);
  snprintf(body, sizeof body,
           "{\"from_ms\":1,\"to_ms\":2,\"workers\":["
           "{\"worker\":\"api\",\"versions\":[\"v1\",\"v2\"],\"hosts\":[\"h1\",\"h2\",\"h3\","
           "\"h4\"],\"actors\":[],\"series\":5,\"last_ms\":%lld},"
           "{\"worker\":\"batch-long-name\",\"versions\":[\"v9\"],\"hosts\":[\"h1\"],"
           "\"actors\":[\"a\"],\"series\":1,\"last_ms\":%lld}]}",
           now_ms - 12000, now_ms - 3 * 3600 * 1000);
  answer(200, body);
  run_t r;
  RUN(&r, "workers", "--from", "-2h");
  expect(&r, 0, NULL);
  assert_string_equal(fake.path, "/api/v1/workers");
  int64_t f_ns, t_ns;
  assert_int_equal(ember_parse_time(arg("from"), 0, &f_ns), 0);
  assert_int_equal(ember_parse_time(arg("to"), 0, &t_ns), 0);
  assert_int_equal(t_ns - f_ns, 7200LL * 1000000000);
  const char *want = "WORKER           VERSIONS  HOSTS     ACTORS  LAST SEEN\n"
                     "api              v1,v2     h1,h2 +2  -         12s ago\n"
                     "batch-long-name  v9        h1        a          3h ago\n";
  if (strcmp(r.out, want) != 0) {
    /* The clock may tick between the body and the run. */
    char alt[512];
    snprintf(alt, sizeof alt, "%s", want);
    memcpy(strstr(alt, "12s ago"), "13s ago", 7);
    if (strcmp(r.out, alt) != 0) fail_msg("got:\n%s\nwant:\n%s", r.out, want);
  }
  RUN(&r, "workers", "--json");
  expect(&r, 0, NULL);
  assert_string_equal(r.out, body);

  answer(200, "{\"from_ms\":1,\"to_ms\":2,\"workers\":[]}");
  RUN(&r, "workers");
  expect(&r, 3, "no worker has sent profiles between ");
  assert_non_null(strstr(r.err, "; is an agent running?"));
}

static void test_cli_labels(void **state) {
  (void)state;
  answer(200, "{\"from_ms\":1,\"to_ms\":2,\"values\":[{\"name\":\"host-a\",\"series\":3,"
              "\"last_ms\":1}]}");
  run_t r;
  RUN(&r, "hosts", "--worker", "api", "--version", "v1");
  expect(&r, 0, NULL);
  assert_string_equal(fake.path, "/api/v1/hosts");
  assert_string_equal(arg("worker"), "api");
  assert_string_equal(arg("version"), "v1");
  assert_non_null(strstr(r.out, "HOST    SERIES"));
  assert_non_null(strstr(r.out, "host-a       3"));
  answer(200, "{\"from_ms\":1,\"to_ms\":2,\"values\":[]}");
  RUN(&r, "versions", "--worker", "nope");
  expect(&r, 3, "no series matched between ");
  assert_string_equal(fake.path, "/api/v1/versions");
}

/* ember diff: the request (both selections, every node) and the largest
 * changes in self share, regressions first, then improvements. A: hot 60,
 * cold 40 (of 100); B: hot 50, cold 10, newfn 40 (of 100); serve appears
 * under two parents in B and its self adds up. */
static void test_cli_diff(void **state) {
  (void)state;
  static const char body[] =
      "{\"version\":1,\"type\":\"cpu\",\"unit\":\"nanoseconds\",\"base\":{\"total\":100},"
      "\"vs\":{\"total\":100},\"nodes\":6,\"truncated\":false,\"root\":{\"name\":\"all\","
      "\"base\":100,\"vs\":100,\"base_self\":0,\"vs_self\":0,\"children\":["
      "{\"name\":\"main\",\"base\":100,\"vs\":100,\"base_self\":0,\"vs_self\":0,\"children\":["
      "{\"name\":\"hot\",\"base\":60,\"vs\":50,\"base_self\":60,\"vs_self\":45,\"children\":["
      "{\"name\":\"serve\",\"base\":0,\"vs\":5,\"base_self\":0,\"vs_self\":5,\"children\":[]}]},"
      "{\"name\":\"cold\",\"base\":40,\"vs\":10,\"base_self\":40,\"vs_self\":5,\"children\":["
      "{\"name\":\"serve\",\"base\":0,\"vs\":5,\"base_self\":0,\"vs_self\":5,\"children\":[]}]},"
      "{\"name\":\"newfn\",\"base\":0,\"vs\":40,\"base_self\":0,\"vs_self\":40,"
      "\"children\":[]}]}]}}";
  run_t r;
  answer(200, body);
  RUN(&r, "diff", "--worker", "api", "--version", "1.0", "--vs-version", "*", "--vs-from", "-2h",
      "--vs-to", "-1h");
  expect(&r, 0, NULL);
  assert_string_equal(fake.path, "/api/v1/diff");
  assert_string_equal(arg("worker"), "api");
  assert_string_equal(arg("version"), "1.0");
  assert_string_equal(arg("vs.version"), "*");
  assert_string_equal(arg("max_nodes"), "0");
  assert_null(arg("vs.worker"));
  int64_t f, t, vf, vt;
  assert_int_equal(ember_parse_time(arg("from"), 0, &f), 0);
  assert_int_equal(ember_parse_time(arg("to"), 0, &t), 0);
  assert_int_equal(ember_parse_time(arg("vs.from"), 0, &vf), 0);
  assert_int_equal(ember_parse_time(arg("vs.to"), 0, &vt), 0);
  assert_int_equal(t - vt, 3600LL * 1000000000); /* B ends an hour before A */
  assert_int_equal(vt - vf, 3600LL * 1000000000);
  /* Regressions largest first (newfn +40, serve +10 from two places),
   * then improvements largest first (cold -35, hot -15). */
  const char *nf = strstr(r.out, "newfn"), *sv = strstr(r.out, "serve");
  const char *ht = strstr(r.out, "hot"), *cd = strstr(r.out, "cold");
  assert_true(nf && sv && ht && cd && nf < sv && sv < cd && cd < ht);
  assert_non_null(strstr(r.out, "+40.00   0.00%  40.00%  newfn"));
  assert_non_null(strstr(r.out, "+10.00   0.00%  10.00%  serve"));
  assert_non_null(strstr(r.out, "-35.00  40.00%   5.00%  cold"));
  RUN(&r, "diff", "--worker", "api", "--limit", "1");
  expect(&r, 0, NULL);
  assert_non_null(strstr(r.out, "newfn"));
  assert_null(strstr(r.out, "serve")); /* one per side */
  assert_null(strstr(r.out, "hot"));
  assert_non_null(strstr(r.out, "cold"));
  RUN(&r, "diff", "--worker", "api", "--json");
  expect(&r, 0, NULL);
  assert_non_null(strstr(r.out, "\"root\""));
  answer(200, "{\"base\":{\"total\":0},\"vs\":{\"total\":0},\"root\":{\"name\":\"all\"}}");
  RUN(&r, "diff", "--worker", "api");
  expect(&r, 3, "neither selection");
  answer(200, "{\"nodes\":1}");
  RUN(&r, "diff", "--worker", "api");
  expect(&r, 1, "no \"root\" tree");
  RUN(&r, "diff", "--version", "1.0");
  expect(&r, 2, "--worker W is required");
  RUN(&r, "diff", "--worker", "api", "--limit", "0");
  expect(&r, 2, "--limit '0'");
  RUN(&r, "diff", "--worker", "api", "--vs-from", "yesterday");
  expect(&r, 2, "'yesterday'");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cli_config_apply_args),
      cmocka_unit_test(test_cli_usage_errors),
      cmocka_unit_test(test_cli_times_and_selector_sent),
      cmocka_unit_test(test_cli_token),
      cmocka_unit_test(test_cli_connection_refused),
      cmocka_unit_test(test_cli_server_errors),
      cmocka_unit_test(test_cli_output_file),
      cmocka_unit_test(test_cli_pprof_to_terminal_refused),
      cmocka_unit_test(test_cli_top_table),
      cmocka_unit_test(test_cli_workers),
      cmocka_unit_test(test_cli_labels),
      cmocka_unit_test(test_cli_diff),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
