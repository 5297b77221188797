/* The in-use heap end to end, every part a real process: ember-agent
 * follows two programs built without frame pointers that run with
 * libember_alloc.so (tests/programs/heapgrow.c), ember-collector stores
 * their heap windows from the real broker, and the API, `ember query` and
 * `go tool pprof` read them back:
 *
 *  - 64 MiB allocated at startup in startup_alloc, before the agent ever
 *    looked, is in the in-use profile (±10%), pprof's -top puts
 *    startup_alloc first, and it is still there EMBER_TEST_HEAP_LATER_SECONDS
 *    (default 30; the 5 minutes is 300) later;
 *  - what is allocated meanwhile is churn's;
 *  - 1 MiB/s leaked in leak_step is first in /api/v1/heap/growth, at a
 *    rate within 20%;
 *  - /api/v1/heap/timeline and /api/v1/targets say the same. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/testutil.h"
#include "ember/ember.h"
#include "ember/parse.h"

#define PROG    EMBER_TEST_PROGRAMS "/heapgrow_nofp"
#define PRELOAD "LD_PRELOAD=" EMBER_BINARY_DIR "/preload/libember_alloc.so"
#define MIB     (1024.0 * 1024.0)

static char tag[96];
static char log_path[600];
static unsigned port;

static json_t *get_json(const char *path) {
  static char body[1 << 20];
  int st = tu_http_get(port, path, body, sizeof body);
  if (st != 200) fail_msg("GET %s: %d %s", path, st, body);
  json_error_t e;
  json_t *doc = json_loads(body, 0, &e);
  if (doc == NULL) fail_msg("GET %s: not JSON: %s", path, e.text);
  return doc;
}

/* pprof's flat value of `fn` in MiB ("64.27MB" and the like), < 0 when
 * it is not listed. */
static double flat_mib(const char *top, const char *fn) {
  char flat[32];
  if (!tu_pprof_flat(top, fn, flat, sizeof flat)) return -1;
  double v = 0;
  if (sscanf(flat, "%lf", &v) != 1) return -1;
  if (strstr(flat, "GB") != NULL) return v * 1024;
  if (strstr(flat, "MB") != NULL) return v;
  if (strstr(flat, "kB") != NULL) return v / 1024;
  return v / MIB;
}

/* The first function line of `go tool pprof -top`. */
static void first_function(const char *top, char *out, size_t n) {
  const char *l = strstr(top, "flat%");
  out[0] = '\0';
  if (l == NULL || (l = strchr(l, '\n')) == NULL) return;
  l++;
  const char *end = strchr(l, '\n');
  size_t len = end ? (size_t)(end - l) : strlen(l);
  const char *name = l + len;
  while (name > l && name[-1] != ' ') name--;
  snprintf(out, n, "%.*s", (int)(l + len - name), name);
}

/* `ember query --type TYPE --format pprof` for `worker` into `out`,
 * until it has samples; then go tool pprof -top. */
static char *query_top(const char *worker, const char *type, const char *from,
                       const char *sample_index) {
  char cmd[2048], text[4096], out[800];
  snprintf(out, sizeof out, "%s/%s-%s-%s.pb.gz", EMBER_TEST_TMP, tag, worker, type);
  snprintf(cmd, sizeof cmd,
           "%s/cli/ember query --server http://127.0.0.1:%u --worker %s --type %s --from %s "
           "--format pprof -o %s 2>&1",
           EMBER_BINARY_DIR, port, worker, type, from, out);
  int rc = -1;
  for (int t = 0; t < 60 && rc != 0; t++) {
    rc = tu_sh(cmd, text, sizeof text);
    if (rc == 3)
      sleep(1);
    else if (rc != 0)
      fail_msg("%s: exit %d: %s", cmd, rc, text);
  }
  if (rc != 0) fail_msg("no %s for %s after 60 s: %s (logs %s*)", type, worker, text, log_path);
  return tu_go_pprof_top(out, sample_index);
}

static void check_startup(const char *worker, const char *when) {
  char *top = query_top(worker, "inuse_bytes", "-1m", "inuse_space");
  char first[128];
  first_function(top, first, sizeof first);
  double mib = flat_mib(top, "startup_alloc");
  print_message("%s: pprof -top first %s; startup_alloc %.2f MiB in use\n", when, first, mib);
  if (strcmp(first, "startup_alloc") != 0) fail_msg("pprof -top:\n%s", top);
  assert_true(mib >= 0.9 * 64 && mib <= 1.1 * 64);
  ember_free(top);
}

static void test_heap_e2e(void **state) {
  (void)state;
  snprintf(tag, sizeof tag, "heap-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  const char *brokers = tu_bootstrap();
  port = tu_free_port();
  char dir[600], group[160];
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(group, sizeof group, "g-%s", tag);
  pid_t col = tu_start_collector(brokers, dir, group, port, NULL, log_path);

  /* The programs start first: their startup is over before the agent. */
  char w_start[160], w_leak[160], e_start[200], e_leak[200];
  snprintf(w_start, sizeof w_start, "%s-startup", tag);
  snprintf(w_leak, sizeof w_leak, "%s-leak", tag);
  snprintf(e_start, sizeof e_start, "EMBER_WORKER=%s", w_start);
  snprintf(e_leak, sizeof e_leak, "EMBER_WORKER=%s", w_leak);
  /* 64 KiB a sample: ~650 samples of the startup (sd 2.4%). */
  const char *argv_s[] = {PROG, "startup", NULL}, *argv_l[] = {PROG, "leak", NULL};
  const char *env_s[] = {e_start, PRELOAD, "EMBER_HEAP_SAMPLE_BYTES=65536", NULL};
  const char *env_l[] = {e_leak, PRELOAD, "EMBER_HEAP_SAMPLE_BYTES=65536", NULL};
  pid_t ps = tu_spawn(argv_s, env_s, NULL);
  pid_t pl = tu_spawn(argv_l, env_l, NULL);
  sleep(2);

  char a_brokers[512], a_host[160], a_spool[700], a_sel[160];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", tag);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/%s/spool", EMBER_TEST_TMP, tag);
  snprintf(a_sel, sizeof a_sel, "selector=worker=%s-*", tag);
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_host,
                              a_spool,
                              a_sel,
                              "window=2s",
                              "scan_interval=1s",
                              "metrics_listen=127.0.0.1:0",
                              NULL};
  char agent_log[700];
  snprintf(agent_log, sizeof agent_log, "%s/%s-agent.log", EMBER_TEST_TMP, tag);
  pid_t agent = tu_spawn(agent_argv, NULL, agent_log);
  unsigned mport = tu_logged_port(agent_log, 20000);

  /* The startup's 64 MiB, first in pprof. */
  check_startup(w_start, "now");
  /* Allocated during the windows: churn's objects. */
  char *top = query_top(w_start, "alloc_objects", "-1m", "alloc_objects");
  char first[128];
  first_function(top, first, sizeof first);
  print_message("allocations: pprof -top first %s\n", first);
  if (strcmp(first, "churn") != 0) fail_msg("pprof -top:\n%s", top);
  ember_free(top);

  /* The leak: growth over 20 s, from an instant the agent had seen. */
  int64_t t1 = ember_time_now_ns();
  sleep(20);
  int64_t t2 = ember_time_now_ns();
  sleep(3); /* the window holding t2 is published and stored */
  char path[512];
  snprintf(path, sizeof path, "/api/v1/heap/growth?worker=%s&from=%lld&to=%lld&limit=5", w_leak,
           (long long)(t1 / 1000000000), (long long)(t2 / 1000000000));
  json_t *doc = get_json(path);
  json_t *fns = json_object_get(doc, "functions");
  assert_true(json_array_size(fns) >= 1);
  json_t *f0 = json_array_get(fns, 0);
  const char *fn = json_string_value(json_object_get(f0, "function"));
  double rate = json_number_value(json_object_get(f0, "per_second")) / MIB;
  print_message("growth: first %s at %.3f MiB/s\n", fn ? fn : "?", rate);
  assert_non_null(fn);
  assert_string_equal(fn, "leak_step");
  assert_true(rate >= 0.8 && rate <= 1.2);
  json_decref(doc);

  /* The timeline: in-use bytes of the startup worker, ~64 MiB a step. */
  snprintf(path, sizeof path, "/api/v1/heap/timeline?worker=%s&from=-1m&step=10s", w_start);
  doc = get_json(path);
  char *text = json_dumps(doc, JSON_COMPACT);
  assert_non_null(text);
  assert_non_null(strstr(text, "\"values\""));
  free(text);
  json_decref(doc);

  /* The targets say which have heap data. */
  snprintf(path, sizeof path, "/api/v1/targets?worker=%s", w_start);
  doc = get_json(path);
  json_t *t0 = json_array_get(json_object_get(doc, "targets"), 0);
  assert_non_null(t0);
  assert_true(json_is_true(json_object_get(t0, "heap")));
  json_decref(doc);
  assert_true(tu_metric(mport, "ember_agent_heap_processes") >= 2);
  assert_true(tu_metric(mport, "ember_agent_heap_records_refused_total") == 0);

  /* Later, the startup's heap is still there: no session could see it. */
  uint64_t later = 30;
  const char *env = getenv("EMBER_TEST_HEAP_LATER_SECONDS");
  if (env != NULL && ember_parse_u64(env, 0, 86400, &later) != 0) later = 30;
  sleep((unsigned)later);
  char when[64];
  snprintf(when, sizeof when, "%llu s later", (unsigned long long)later);
  check_startup(w_start, when);

  tu_kill(ps);
  tu_kill(pl);
  tu_stop_daemon(agent, "ember-agent", agent_log);
  tu_stop_daemon(col, "ember-collector", log_path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_heap_e2e),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
