/* Discovery: labels of real child processes, the netlink process connector,
 * /proc scans, selectors, and a fake proc root for garbage, pid reuse and
 * allocation failures. Every child is killed and reaped by the teardown. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "discovery.h"
#include "ember/ember.h"
#include "procfs.h"

#define LABELLED EMBER_TEST_PROGRAMS "/labelled"

/* A target holds the documented fields and nothing else: no field could
 * carry another environment variable off the host. */
struct expected_target {
  pid_t pid;
  char *worker, *version, *actor;
  char comm[16];
  char *exe;
  char build_id[41];
  uint64_t start_ticks;
  bool selected, exited;
};
_Static_assert(sizeof(ember__target_t) == sizeof(struct expected_target),
               "ember__target_t must hold only worker, version, actor and process facts");

/* ---- children ------------------------------------------------------------ */

static pid_t kids[32];
static size_t nkids;

static void reap_child(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  for (size_t i = 0; i < nkids; i++) {
    if (kids[i] == pid) kids[i] = kids[--nkids];
  }
}

static int kill_children(void **state) {
  (void)state;
  while (nkids > 0) reap_child(kids[0]);
  return 0;
}

/* Read from fd until a line equal to `want`, for at most 10 s. */
static bool wait_line(int fd, const char *want) {
  char line[256];
  size_t n = 0;
  int64_t deadline = ember_time_mono_ns() + 10 * 1000000000LL;
  while (ember_time_mono_ns() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0) continue;
    char c;
    ssize_t r = read(fd, &c, 1);
    if (r <= 0) return false;
    if (c != '\n') {
      if (n < sizeof line - 1) line[n++] = c;
      continue;
    }
    line[n] = '\0';
    if (strcmp(line, want) == 0) return true;
    n = 0;
  }
  return false;
}

/* Start argv with exactly envp; wait until it prints `ready_line` (so it
 * has exec'd). If stdin_fd is not NULL, the child's stdin is a pipe whose
 * write end is returned there; *stdout_fd likewise keeps the read end. */
/* execve wants writable strings; copies keep -Wwrite-strings honest. */
static char **dup_vec(const char *const *v) {
  size_t n = 0;
  while (v[n] != NULL) n++;
  char **c = calloc(n + 1, sizeof *c);
  assert_non_null(c);
  for (size_t i = 0; i < n; i++) {
    c[i] = strdup(v[i]);
    assert_non_null(c[i]);
  }
  return c;
}

static void free_vec(char **v) {
  for (size_t i = 0; v[i] != NULL; i++) free(v[i]);
  free(v);
}

static pid_t spawn(const char *const argv_in[], const char *const envp_in[], const char *ready_line,
                   int *stdin_fd, int *stdout_fd) {
  char **argv = dup_vec(argv_in), **envp = dup_vec(envp_in);
  int out[2], in[2] = {-1, -1};
  assert_int_equal(pipe2(out, O_CLOEXEC), 0);
  if (stdin_fd != NULL) assert_int_equal(pipe2(in, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    if (in[0] >= 0) dup2(in[0], STDIN_FILENO);
    execve(argv[0], argv, envp);
    _exit(127);
  }
  kids[nkids++] = pid;
  free_vec(argv);
  free_vec(envp);
  close(out[1]);
  if (in[0] >= 0) close(in[0]);
  assert_true(wait_line(out[0], ready_line));
  if (stdout_fd != NULL)
    *stdout_fd = out[0];
  else
    close(out[0]);
  if (stdin_fd != NULL) *stdin_fd = in[1];
  return pid;
}

static pid_t spawn_labelled(const char *const envp[]) {
  const char *const argv[] = {LABELLED, NULL};
  return spawn(argv, envp, "ready", NULL, NULL);
}

/* ---- looking at the targets -------------------------------------------- */

typedef struct find_ctx {
  pid_t pid;
  const ember__target_t *live, *exited;
  size_t n;
} find_ctx_t;

static void find_cb(void *ctx, const ember__target_t *t) {
  find_ctx_t *f = ctx;
  if (t->pid != f->pid) return;
  f->n++;
  if (t->exited)
    f->exited = t;
  else
    f->live = t;
}

static find_ctx_t find(ember__discovery_t *d, pid_t pid) {
  find_ctx_t f = {.pid = pid};
  ember__discovery_each(d, find_cb, &f);
  return f;
}

static ember__discovery_t *open_disc(const char *root, const char *selector, bool netlink) {
  ember__discovery_opts_t o = {
      .proc_root = root, .selector = selector, .netlink = netlink, .self = root ? 1 : 0};
  ember__discovery_t *d = NULL;
  char err[256] = "";
  int rc = ember__discovery_new(&o, &d, err, sizeof err);
  if (rc != 0) fail_msg("ember__discovery_new: %d %s", rc, err);
  return d;
}

/* The GNU build-id as readelf prints it: an independent reading. */
static void readelf_build_id(const char *path, char out[41]) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "readelf -n '%s'", path);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  char line[512];
  out[0] = '\0';
  while (fgets(line, sizeof line, f) != NULL) {
    const char *p = strstr(line, "Build ID: ");
    if (p == NULL) continue;
    p += strlen("Build ID: ");
    size_t n = strspn(p, "0123456789abcdef");
    assert_true(n > 0 && n <= 40);
    memcpy(out, p, n);
    out[n] = '\0';
  }
  pclose(f);
  assert_true(strlen(out) >= 12);
}

static bool contains(const char *s, const char *needle) {
  return s != NULL && strstr(s, needle) != NULL;
}

/* ---- labels from real processes ------------------------------------------ */

static void test_discovery_ember_labels(void **state) {
  (void)state;
  const char *const envp[] = {"EMBER_WORKER=w1", "EMBER_VERSION=v7", "EMBER_ACTOR=room-1",
                              "SECRET=s3cr3t-value", NULL};
  pid_t pid = spawn_labelled(envp);
  ember__discovery_t *d = open_disc(NULL, NULL, false);
  const ember__target_t *t = ember__discovery_get(d, pid);
  assert_non_null(t);
  assert_int_equal(t->pid, pid);
  assert_string_equal(t->worker, "w1");
  assert_string_equal(t->version, "v7");
  assert_string_equal(t->actor, "room-1");
  assert_string_equal(t->comm, "labelled");
  assert_string_equal(t->exe, LABELLED);
  assert_true(t->start_ticks > 0);
  assert_true(t->selected);
  assert_false(t->exited);
  /* The unrelated variable is nowhere. */
  const char *fields[] = {t->worker, t->version, t->actor, t->comm, t->exe, t->build_id};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    assert_false(contains(fields[i], "s3cr3t"));
    assert_false(contains(fields[i], "SECRET"));
  }
  /* A second lookup is the same target, not a new read. */
  assert_ptr_equal(ember__discovery_get(d, pid), t);
  ember__discovery_free(d);
}

static void test_discovery_otel_service_name(void **state) {
  (void)state;
  const char *const envp[] = {
      "OTEL_SERVICE_NAME=otelsvc",
      "OTEL_RESOURCE_ATTRIBUTES=service.version=2.0,deployment.environment=prod", NULL};
  pid_t pid = spawn_labelled(envp);
  ember__discovery_t *d = open_disc(NULL, NULL, false);
  const ember__target_t *t = ember__discovery_get(d, pid);
  assert_non_null(t);
  assert_string_equal(t->worker, "otelsvc");
  assert_string_equal(t->version, "2.0");
  assert_null(t->actor);
  ember__discovery_free(d);
}

static void test_discovery_otel_resource_attributes(void **state) {
  (void)state;
  const char *const envp[] = {"OTEL_RESOURCE_ATTRIBUTES=service.name=a%2Cb,service.version=3",
                              NULL};
  pid_t pid = spawn_labelled(envp);
  ember__discovery_t *d = open_disc(NULL, NULL, false);
  const ember__target_t *t = ember__discovery_get(d, pid);
  assert_non_null(t);
  assert_string_equal(t->worker, "a,b");
  assert_string_equal(t->version, "3");
  ember__discovery_free(d);
}

static void test_discovery_falls_back_to_comm_and_build_id(void **state) {
  (void)state;
  const char *const envp[] = {NULL};
  pid_t pid = spawn_labelled(envp);
  char bid[41];
  readelf_build_id(LABELLED, bid);
  ember__discovery_t *d = open_disc(NULL, NULL, false);
  const ember__target_t *t = ember__discovery_get(d, pid);
  assert_non_null(t);
  assert_string_equal(t->worker, "labelled");
  assert_string_equal(t->build_id, bid);
  assert_int_equal(strlen(t->version), 12);
  assert_memory_equal(t->version, bid, 12);
  assert_null(t->actor);
  ember__discovery_free(d);
}

/* ---- events and scans ---------------------------------------------------- */

/* Poll the connector until `done` holds, for at most 10 s. */
static bool pump_until(ember__discovery_t *d, bool (*done)(ember__discovery_t *, pid_t),
                       pid_t pid) {
  int64_t deadline = ember_time_mono_ns() + 10 * 1000000000LL;
  while (ember_time_mono_ns() < deadline) {
    struct pollfd p = {.fd = ember__discovery_fd(d), .events = POLLIN};
    poll(&p, 1, 100);
    assert_int_equal(ember__discovery_read_events(d), 0);
    if (done(d, pid)) return true;
  }
  return false;
}

static bool is_live(ember__discovery_t *d, pid_t pid) { return find(d, pid).live != NULL; }
static bool is_exited(ember__discovery_t *d, pid_t pid) {
  find_ctx_t f = find(d, pid);
  return f.exited != NULL && f.live == NULL;
}

static ember__discovery_t *open_netlink(void) {
  ember__discovery_t *d = open_disc(NULL, NULL, true);
  if (ember__discovery_fd(d) < 0) {
    ember__discovery_free(d);
    if (geteuid() != 0) skip();
    fail_msg("root, yet the process connector could not be opened");
  }
  return d;
}

static void test_discovery_netlink_exec_and_exit(void **state) {
  (void)state;
  ember__discovery_t *d = open_netlink();
  const char *const envp[] = {"EMBER_WORKER=nl-w", NULL};
  pid_t pid = spawn_labelled(envp);
  /* Known from the exec event alone: no _get, no scan. */
  assert_true(pump_until(d, is_live, pid));
  const ember__target_t *t = find(d, pid).live;
  assert_string_equal(t->worker, "nl-w");
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_true(st.exec_events >= 1);
  assert_int_equal(st.scans, 0);

  reap_child(pid);
  assert_true(pump_until(d, is_exited, pid));
  ember__discovery_stats(d, &st);
  assert_true(st.exit_events >= 1);
  /* An exited target stays reachable until reaped. */
  const ember__target_t *g = ember__discovery_get(d, pid);
  assert_non_null(g);
  assert_true(g->exited);
  ember__discovery_free(d);
}

/* A thread's exit is not its process's: only the leader's exit counts. */
static void test_discovery_netlink_ignores_thread_exit(void **state) {
  (void)state;
  ember__discovery_t *d = open_netlink();
  const char *const argv[] = {LABELLED, "thread", NULL};
  const char *const envp[] = {"EMBER_WORKER=threaded", NULL};
  /* By "ready" the thread has exited, so its event is already queued. */
  pid_t pid = spawn(argv, envp, "ready", NULL, NULL);
  assert_true(pump_until(d, is_live, pid));
  assert_int_equal(ember__discovery_read_events(d), 0);
  find_ctx_t f = find(d, pid);
  assert_int_equal(f.n, 1);
  assert_non_null(f.live);
  assert_string_equal(f.live->worker, "threaded");
  reap_child(pid);
  assert_true(pump_until(d, is_exited, pid));
  ember__discovery_free(d);
}

static void test_discovery_exec_changes_identity(void **state) {
  (void)state;
  ember__discovery_t *d = open_netlink();
  const char *const argv[] = {"/bin/sh", "-c", "echo sh; read line; EMBER_WORKER=after exec \"$0\"",
                              LABELLED, NULL};
  const char *const envp[] = {"EMBER_WORKER=before", NULL};
  int in = -1, out = -1;
  pid_t pid = spawn(argv, envp, "sh", &in, &out);
  const ember__target_t *t = ember__discovery_get(d, pid);
  assert_non_null(t);
  assert_string_equal(t->worker, "before");
  assert_string_equal(t->comm, "sh");
  assert_int_equal(write(in, "go\n", 3), 3);
  assert_true(wait_line(out, "ready"));
  close(in);
  close(out);

  int64_t deadline = ember_time_mono_ns() + 10 * 1000000000LL;
  const ember__target_t *now = NULL;
  while (ember_time_mono_ns() < deadline) {
    struct pollfd p = {.fd = ember__discovery_fd(d), .events = POLLIN};
    poll(&p, 1, 100);
    assert_int_equal(ember__discovery_read_events(d), 0);
    now = ember__discovery_get(d, pid);
    if (now != NULL && strcmp(now->worker, "after") == 0) break;
  }
  assert_non_null(now);
  assert_string_equal(now->worker, "after");
  assert_string_equal(now->comm, "labelled");
  assert_false(now->exited);
  /* The pre-exec identity is kept, exited, for windows that still need it;
   * its strings were never changed under a borrower. */
  find_ctx_t f = find(d, pid);
  assert_int_equal(f.n, 2);
  assert_ptr_equal(f.exited, t);
  assert_string_equal(t->worker, "before");
  ember__discovery_free(d);
}

/* A burst of process events larger than the socket buffer: the kernel drops
 * events (ENOBUFS) and read_events must fall back to a full scan. */
static void test_discovery_netlink_overrun_scans(void **state) {
  (void)state;
  ember__discovery_t *d = open_netlink();
  /* Discovery asks for a 4 MiB buffer; shrink it so a burst fits in a test. */
  int small = 4096;
  assert_int_equal(setsockopt(ember__discovery_fd(d), SOL_SOCKET, SO_RCVBUF, &small, sizeof small),
                   0);
  const char *const envp[] = {"EMBER_WORKER=overrun", NULL};
  pid_t pid = spawn_labelled(envp);
  ember__discovery_stats_t st = {0};
  for (int round = 0; round < 10 && st.overruns == 0; round++) {
    /* vfork + _exit is the cheapest way to make fork and exit events. */
    for (int i = 0; i < 500; i++) {
      pid_t c = vfork();
      if (c == 0) _exit(0);
      assert_true(c > 0);
      while (waitpid(c, NULL, 0) < 0 && errno == EINTR) {
      }
    }
    assert_int_equal(ember__discovery_read_events(d), 0);
    ember__discovery_stats(d, &st);
  }
  if (st.overruns == 0) skip(); /* a socket buffer too large to overflow */
  assert_true(st.scans >= 1);
  /* The scan found the child although its exec event may have been lost. */
  find_ctx_t f = find(d, pid);
  assert_non_null(f.live);
  assert_string_equal(f.live->worker, "overrun");
  ember__discovery_free(d);
}

typedef struct reaped {
  pid_t pids[16];
  char workers[16][32];
  size_t n;
} reaped_t;

static void on_reap(void *ctx, const ember__target_t *t) {
  reaped_t *r = ctx;
  assert_true(t->exited);
  if (r->n < 16) {
    r->pids[r->n] = t->pid;
    snprintf(r->workers[r->n], sizeof r->workers[0], "%s", t->worker);
    r->n++;
  }
}

static void test_discovery_scan_finds_and_reaps(void **state) {
  (void)state;
  const char *const e1[] = {"EMBER_WORKER=scan-a", NULL};
  const char *const e2[] = {"EMBER_WORKER=scan-b", NULL};
  pid_t a = spawn_labelled(e1), b = spawn_labelled(e2);
  ember__discovery_t *d = open_disc(NULL, NULL, false);
  assert_int_equal(ember__discovery_fd(d), -1);
  assert_int_equal(ember__discovery_read_events(d), -EBADF);
  assert_int_equal(ember__discovery_scan(d), 0);
  find_ctx_t fa = find(d, a), fb = find(d, b);
  assert_non_null(fa.live);
  assert_non_null(fb.live);
  assert_string_equal(fa.live->worker, "scan-a");
  assert_string_equal(fb.live->worker, "scan-b");
  /* Self and kernel threads are never targets. */
  assert_int_equal(find(d, getpid()).n, 0);
  assert_int_equal(find(d, 2).n, 0);
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.scans, 1);
  assert_true(st.targets >= 2);

  reap_child(a);
  assert_int_equal(ember__discovery_scan(d), 0);
  assert_true(find(d, a).live == NULL);
  assert_non_null(find(d, a).exited);
  assert_non_null(find(d, b).live);
  reaped_t r = {0};
  ember__discovery_reap(d, on_reap, &r);
  bool saw = false;
  for (size_t i = 0; i < r.n; i++) {
    if (r.pids[i] == a) {
      saw = true;
      assert_string_equal(r.workers[i], "scan-a");
    }
    assert_true(r.pids[i] != b);
  }
  assert_true(saw);
  assert_int_equal(find(d, a).n, 0);
  assert_ptr_equal(ember__discovery_get(d, b), fb.live);
  ember__discovery_free(d);
}

static void test_discovery_get_rejects_self_missing_and_kernel_threads(void **state) {
  (void)state;
  ember__discovery_t *d = open_disc(NULL, NULL, false);
  assert_null(ember__discovery_get(d, getpid()));
  assert_null(ember__discovery_get(d, 0x3fffffff)); /* above PID_MAX_LIMIT */
  assert_null(ember__discovery_get(d, 0));
  assert_null(ember__discovery_get(d, -5));
  assert_null(ember__discovery_get(d, 2)); /* kthreadd */
  assert_null(ember__discovery_get(d, 2)); /* remembered: no second read */
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 0);
  assert_int_equal(st.unreadable, 1); /* the missing pid */
  ember__discovery_free(d);
}

/* ---- selectors ----------------------------------------------------------- */

static void test_discovery_selector_match(void **state) {
  (void)state;
  char worker[] = "api-gateway", version[] = "2.4.1", exe[] = "/usr/bin/node", actor[] = "room-7";
  ember__target_t t = {
      .pid = 42, .worker = worker, .version = version, .actor = NULL, .comm = "node", .exe = exe};
  assert_true(ember__selector_match(NULL, &t));
  assert_true(ember__selector_match("", &t));
  assert_true(ember__selector_match("  ", &t));
  assert_true(ember__selector_match("worker=api*", &t));
  assert_true(ember__selector_match("worker=api*,version=2.*", &t));
  assert_true(ember__selector_match(" worker = api-gateway , comm=n?de ", &t));
  assert_true(ember__selector_match("exe=*/node", &t));
  assert_true(ember__selector_match("version=[0-9].*", &t));
  assert_false(ember__selector_match("worker=api*,version=3.*", &t));
  assert_false(ember__selector_match("worker=gateway", &t));
  /* An unset actor is the empty string. */
  assert_true(ember__selector_match("actor=", &t));
  assert_true(ember__selector_match("actor=*", &t));
  assert_false(ember__selector_match("actor=?*", &t));
  t.actor = actor;
  assert_true(ember__selector_match("actor=room-*", &t));
  /* Invalid selectors match nothing. */
  assert_false(ember__selector_match("worker", &t));
  assert_false(ember__selector_match("colour=red", &t));
}

static void test_discovery_bad_selector_names_the_term(void **state) {
  (void)state;
  const char *bad[][2] = {{"worker=a,oops", "'oops'"},
                          {"worker=a,colour=red", "'colour=red'"},
                          {"worker=a,,version=1", "''"},
                          {"=x", "'=x'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ember__discovery_opts_t o = {.selector = bad[i][0]};
    ember__discovery_t *d = NULL;
    char err[256] = "";
    assert_int_equal(ember__discovery_new(&o, &d, err, sizeof err), EMBER_ECONFIG);
    assert_null(d);
    if (strstr(err, bad[i][1]) == NULL || strstr(err, "selector") == NULL)
      fail_msg("selector '%s': message '%s' does not name %s", bad[i][0], err, bad[i][1]);
  }
  ember__discovery_t *d = NULL;
  assert_int_equal(ember__discovery_new(NULL, &d, NULL, 0), -EINVAL);
}

static void test_discovery_selector_marks_children(void **state) {
  (void)state;
  const char *const yes[] = {"EMBER_WORKER=sel-api", "EMBER_VERSION=2.1", NULL};
  const char *const wrong_version[] = {"EMBER_WORKER=sel-api", "EMBER_VERSION=1.0", NULL};
  const char *const no[] = {"EMBER_WORKER=other", NULL};
  pid_t a = spawn_labelled(yes), b = spawn_labelled(wrong_version), c = spawn_labelled(no);
  ember__discovery_t *d = open_disc(NULL, "worker=sel-*,version=2.*", false);
  assert_true(ember__discovery_get(d, a)->selected);
  assert_false(ember__discovery_get(d, b)->selected);
  assert_false(ember__discovery_get(d, c)->selected);
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 3);
  assert_int_equal(st.selected, 1);
  ember__discovery_free(d);
}

/* ---- a fake proc root ---------------------------------------------------- */

static char fake_root[512];

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void fake_init(const char *name) {
  snprintf(fake_root, sizeof fake_root, "%s/fakeproc-%s", EMBER_TEST_TMP, name);
  nftw(fake_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  assert_int_equal(mkdir(fake_root, 0755), 0);
}

static void fake_write(int pid, const char *file, const char *data, size_t len) {
  char path[700];
  snprintf(path, sizeof path, "%s/%d/%s", fake_root, pid, file);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
}

/* A process directory as the kernel lays it out: stat with the fields
 * discovery reads (3 state, 9 flags, 22 starttime), comm, environ (NULL
 * for none) and an exe symlink (NULL for none). */
static void fake_proc(int pid, const char *comm, char state, unsigned flags,
                      unsigned long long start, const char *env, size_t envlen, const char *exe) {
  char path[700];
  snprintf(path, sizeof path, "%s/%d", fake_root, pid);
  mkdir(path, 0755);
  char stat[512];
  int n = snprintf(stat, sizeof stat,
                   "%d (%s) %c 1 %d %d 0 -1 %u 0 0 0 0 0 0 0 0 20 0 1 0 %llu 1000 10 0 0\n", pid,
                   comm, state, pid, pid, flags, start);
  fake_write(pid, "stat", stat, (size_t)n);
  snprintf(stat, sizeof stat, "%s\n", comm);
  fake_write(pid, "comm", stat, strlen(stat));
  snprintf(path, sizeof path, "%s/%d/environ", fake_root, pid);
  unlink(path);
  if (env != NULL) fake_write(pid, "environ", env, envlen);
  snprintf(path, sizeof path, "%s/%d/exe", fake_root, pid);
  unlink(path);
  if (exe != NULL) assert_int_equal(symlink(exe, path), 0);
}

/* "A=1\0B=2\0" from {"A=1", "B=2", NULL}. */
static size_t env_of(char *buf, size_t cap, const char *const *vars) {
  size_t n = 0;
  for (; *vars != NULL; vars++) {
    size_t l = strlen(*vars) + 1;
    assert_true(n + l <= cap);
    memcpy(buf + n, *vars, l);
    n += l;
  }
  return n;
}

static void fake_env_proc(int pid, const char *comm, unsigned long long start,
                          const char *const *vars) {
  char env[4096];
  size_t n = env_of(env, sizeof env, vars);
  fake_proc(pid, comm, 'S', 0, start, env, n, LABELLED);
}

static void test_discovery_fake_root_garbage(void **state) {
  (void)state;
  fake_init("garbage");
  const char *const plain[] = {"EMBER_WORKER=w", "PATH=/bin", NULL};
  fake_env_proc(100, "worker", 5000, plain);
  /* comm may hold ") (": the fields count from the last ')'. */
  const char *const none[] = {"HOME=/root", NULL};
  fake_env_proc(101, "a) (b", 5001, none);
  /* No environ: unreadable, skipped, counted. */
  fake_proc(102, "noenv", 'S', 0, 5002, NULL, 0, LABELLED);
  /* 300 KiB of environment: only the first 256 KiB are looked at. */
  size_t big = 300 * 1024;
  char *env = malloc(big);
  assert_non_null(env);
  size_t off = 0;
  off += (size_t)snprintf(env + off, big - off, "EMBER_VERSION=early") + 1;
  while (off + 200 < big - 64) {
    memset(env + off, 'x', 99);
    memcpy(env + off, "FILLER=", 7);
    env[off + 99] = '\0';
    off += 100;
  }
  off += (size_t)snprintf(env + off, big - off, "EMBER_WORKER=late") + 1;
  fake_proc(103, "huge", 'S', 0, 5003, env, off, LABELLED);
  free(env);
  /* Invalid UTF-8, over-long values, percent-escapes that decode to UTF-8
   * or are not escapes at all. */
  char actor[512] = "EMBER_ACTOR=";
  for (size_t i = 0; i < 200; i++) memcpy(actor + 12 + 2 * i, "\xc3\xa9", 2); /* U+00E9 */
  actor[12 + 400] = '\0';
  const char *const bad[] = {
      "EMBER_WORKER=ok\xff\xc3(end", actor,
      "OTEL_RESOURCE_ATTRIBUTES= service.version = %E2%9C%93ok%zz%4 ,service.name=ignored", NULL};
  fake_env_proc(104, "badutf", 5004, bad);
  /* A kernel thread (PF_KTHREAD, no exe), a zombie, and names that are not
   * pids. */
  fake_proc(105, "kworker/0:1", 'I', 0x00200000u, 5005, "", 0, NULL);
  fake_proc(106, "zombie", 'Z', 0, 5006, "", 0, NULL);
  fake_proc(107, "garbled", 'S', 0, 5007, "", 0, LABELLED);
  fake_write(107, "stat", "107 garbled no parens\n", 22);
  char path[700];
  snprintf(path, sizeof path, "%s/self", fake_root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/12abc", fake_root);
  mkdir(path, 0755);

  ember__discovery_t *d = open_disc(fake_root, NULL, false);
  assert_int_equal(ember__discovery_scan(d), 0);
  const ember__target_t *t = find(d, 100).live;
  assert_non_null(t);
  assert_string_equal(t->worker, "w");
  assert_int_equal(t->start_ticks, 5000);
  assert_string_equal(t->comm, "worker");

  t = find(d, 101).live;
  assert_non_null(t);
  assert_string_equal(t->comm, "a) (b");
  assert_string_equal(t->worker, "a) (b");
  assert_int_equal(t->start_ticks, 5001);
  assert_int_equal(strlen(t->version), 12); /* from labelled's build-id */

  assert_int_equal(find(d, 102).n, 0);

  t = find(d, 103).live;
  assert_non_null(t);
  assert_string_equal(t->version, "early");
  assert_string_equal(t->worker, "huge"); /* EMBER_WORKER=late is past the limit */

  t = find(d, 104).live;
  assert_non_null(t);
  assert_string_equal(t->worker, "ok?"
                                 "?(end");
  assert_int_equal(strlen(t->actor), 254); /* 255-byte cap, never half a character */
  for (size_t i = 0; i < 254; i += 2) assert_memory_equal(t->actor + i, "\xc3\xa9", 2);
  assert_string_equal(t->version, "\xe2\x9c\x93ok%zz%4");

  assert_int_equal(find(d, 105).n, 0);
  assert_null(ember__discovery_get(d, 105));
  assert_int_equal(find(d, 106).n, 0);
  assert_null(ember__discovery_get(d, 106));
  assert_int_equal(find(d, 107).n, 0);

  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 4);
  assert_true(st.unreadable >= 2); /* 102 and 107 */
  ember__discovery_free(d);
}

static void test_discovery_pid_reuse_rereads_labels(void **state) {
  (void)state;
  fake_init("reuse");
  const char *const v1[] = {"EMBER_WORKER=first", NULL};
  const char *const v2[] = {"EMBER_WORKER=second", NULL};
  fake_env_proc(200, "proc", 7000, v1);
  fake_env_proc(201, "other", 7001, v1);
  ember__discovery_t *d = open_disc(fake_root, NULL, false);
  assert_int_equal(ember__discovery_scan(d), 0);
  const ember__target_t *old = find(d, 200).live;
  assert_non_null(old);
  assert_string_equal(old->worker, "first");

  /* Same start time: nothing is read again. */
  fake_env_proc(200, "proc", 7000, v2);
  assert_int_equal(ember__discovery_scan(d), 0);
  assert_ptr_equal(find(d, 200).live, old);
  assert_string_equal(old->worker, "first");

  /* Another start time: another process behind the same pid. */
  fake_env_proc(200, "proc", 7100, v2);
  assert_int_equal(ember__discovery_scan(d), 0);
  find_ctx_t f = find(d, 200);
  assert_int_equal(f.n, 2);
  assert_ptr_equal(f.exited, old);
  assert_string_equal(old->worker, "first");
  assert_string_equal(f.live->worker, "second");
  assert_int_equal(f.live->start_ticks, 7100);
  assert_ptr_equal(ember__discovery_get(d, 200), f.live);

  /* 201 vanishes. */
  char path[700];
  snprintf(path, sizeof path, "%s/201", fake_root);
  nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  assert_int_equal(ember__discovery_scan(d), 0);
  assert_non_null(find(d, 201).exited);

  reaped_t r = {0};
  ember__discovery_reap(d, on_reap, &r);
  assert_int_equal(r.n, 2);
  for (size_t i = 0; i < r.n; i++) {
    assert_true((r.pids[i] == 200 && strcmp(r.workers[i], "first") == 0) ||
                (r.pids[i] == 201 && strcmp(r.workers[i], "first") == 0));
  }
  assert_int_equal(find(d, 200).n, 1);
  assert_int_equal(find(d, 201).n, 0);
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 1);
  ember__discovery_free(d);
}

static void test_discovery_build_id_read_once_per_binary(void **state) {
  (void)state;
  fake_init("bidcache");
  const char *const none[] = {NULL};
  for (int pid = 300; pid < 350; pid++) fake_env_proc(pid, "same", 9000, none);
  ember__discovery_t *d = open_disc(fake_root, NULL, false);
  assert_int_equal(ember__discovery_scan(d), 0);
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 50);
  assert_int_equal(st.elf_reads, 1);
  char bid[41];
  readelf_build_id(LABELLED, bid);
  assert_string_equal(find(d, 349).live->build_id, bid);
  ember__discovery_free(d);
}

/* Many pids force the map to grow and reap to shift clusters. */
static void test_discovery_many_pids(void **state) {
  (void)state;
  fake_init("many");
  const char *const none[] = {NULL};
  for (int pid = 1000; pid < 1600; pid++) fake_env_proc(pid, "many", 100, none);
  ember__discovery_t *d = open_disc(fake_root, NULL, false);
  assert_int_equal(ember__discovery_scan(d), 0);
  ember__discovery_stats_t st;
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 600);
  /* Remove every third and check the rest are all still found. */
  char path[700];
  for (int pid = 1000; pid < 1600; pid += 3) {
    snprintf(path, sizeof path, "%s/%d", fake_root, pid);
    nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
  }
  assert_int_equal(ember__discovery_scan(d), 0);
  ember__discovery_reap(d, NULL, NULL);
  ember__discovery_stats(d, &st);
  assert_int_equal(st.targets, 400);
  for (int pid = 1000; pid < 1600; pid++) {
    find_ctx_t f = find(d, pid);
    if ((pid - 1000) % 3 == 0) {
      assert_int_equal(f.n, 0);
    } else {
      assert_non_null(f.live);
      assert_ptr_equal(ember__discovery_get(d, pid), f.live);
    }
  }
  ember__discovery_free(d);
}

static void test_discovery_allocation_failures(void **state) {
  (void)state;
  fake_init("alloc");
  const char *const v1[] = {"EMBER_WORKER=a", "EMBER_ACTOR=x", NULL};
  const char *const v2[] = {"OTEL_SERVICE_NAME=b", NULL};
  fake_env_proc(400, "one", 1, v1);
  fake_env_proc(401, "two", 2, v2);
  fake_proc(402, "kthread", 'S', 0x00200000u, 3, "", 0, NULL);
  /* Enough pids to make the map grow (it starts at 64 slots). */
  for (int pid = 410; pid < 450; pid++) fake_env_proc(pid, "grow", 4, v2);
  bool done = false;
  for (long n = 0; n < 100000 && !done; n++) {
    ember__discovery_opts_t o = {.proc_root = fake_root, .self = 1};
    ember__discovery_t *d = NULL;
    ember_alloc_fail_after(n);
    int rc = ember__discovery_new(&o, &d, NULL, 0);
    if (rc == 0) rc = ember__discovery_scan(d);
    if (rc == 0) rc = ember__discovery_get(d, 400) != NULL ? 0 : -ENOMEM;
    ember_alloc_fail_reset();
    if (rc == 0) {
      ember__discovery_stats_t st;
      ember__discovery_stats(d, &st);
      assert_int_equal(st.targets, 42);
      assert_string_equal(find(d, 400).live->actor, "x");
      done = true;
    } else {
      assert_int_equal(rc, -ENOMEM);
      if (d != NULL) {
        /* What was read is consistent: a later scan completes it. */
        assert_int_equal(ember__discovery_scan(d), 0);
        ember__discovery_stats_t st;
        ember__discovery_stats(d, &st);
        assert_int_equal(st.targets, 42);
      }
    }
    ember__discovery_free(d);
  }
  assert_true(done);
}

/* The NSpid line (procfs.c), shared by discovery's namespace check, the
 * perf map reader and the allocation sampler: levels and the last pid, and
 * nothing from a line that is missing, empty or past INT32_MAX. */
static void test_discovery_nspid_parse(void **state) {
  (void)state;
  uint64_t last = 7;
  unsigned levels = 9;
  assert_int_equal(
      ember__proc_nspid_parse("Name:\tx\nNSpid:\t4242\t17\t1\nNSgid:\t1\n", &last, &levels), 0);
  assert_int_equal(last, 1);
  assert_int_equal(levels, 3);
  assert_int_equal(ember__proc_nspid_parse("Name:\tx\nNSpid:\t99\n", &last, &levels), 0);
  assert_int_equal(last, 99);
  assert_int_equal(levels, 1);
  last = 7;
  levels = 9;
  assert_int_equal(ember__proc_nspid_parse("Name:\tx\nPid:\t3\n", &last, &levels), -ENOENT);
  assert_int_equal(ember__proc_nspid_parse("Name:\tx\nNSpid:\t\n", &last, &levels), -ENOENT);
  assert_int_equal(ember__proc_nspid_parse("x\nNSpid:\t99999999999999999999\n", &last, &levels),
                   -ENOENT);
  assert_int_equal(ember__proc_nspid_parse("x\nNSpid:\t2147483648\n", &last, &levels), -ENOENT);
  assert_int_equal(last, 7);
  assert_int_equal(levels, 9);
  /* This process, in the namespace of the /proc it reads. */
  uint64_t self = 0;
  assert_int_equal(ember__proc_ns_pid("/proc", getpid(), &self), 0);
  assert_true(self > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_discovery_ember_labels, kill_children),
      cmocka_unit_test_teardown(test_discovery_otel_service_name, kill_children),
      cmocka_unit_test_teardown(test_discovery_otel_resource_attributes, kill_children),
      cmocka_unit_test_teardown(test_discovery_falls_back_to_comm_and_build_id, kill_children),
      cmocka_unit_test_teardown(test_discovery_netlink_exec_and_exit, kill_children),
      cmocka_unit_test_teardown(test_discovery_netlink_ignores_thread_exit, kill_children),
      cmocka_unit_test_teardown(test_discovery_exec_changes_identity, kill_children),
      cmocka_unit_test_teardown(test_discovery_netlink_overrun_scans, kill_children),
      cmocka_unit_test_teardown(test_discovery_scan_finds_and_reaps, kill_children),
      cmocka_unit_test(test_discovery_get_rejects_self_missing_and_kernel_threads),
      cmocka_unit_test(test_discovery_selector_match),
      cmocka_unit_test(test_discovery_nspid_parse),
      cmocka_unit_test(test_discovery_bad_selector_names_the_term),
      cmocka_unit_test_teardown(test_discovery_selector_marks_children, kill_children),
      cmocka_unit_test(test_discovery_fake_root_garbage),
      cmocka_unit_test(test_discovery_pid_reuse_rereads_labels),
      cmocka_unit_test(test_discovery_build_id_read_once_per_binary),
      cmocka_unit_test(test_discovery_many_pids),
      cmocka_unit_test(test_discovery_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
