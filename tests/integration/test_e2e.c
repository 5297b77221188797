/* End to end against the real broker, every part a separate process as in
 * production: ember-agent profiles a C program with known functions and a
 * Node.js script run with --perf-basic-prof, ember-collector stores what it
 * publishes, and `ember query --format pprof` fetches the merged profile
 * through the HTTP API; `go tool pprof -top` must read it and show the
 * functions in the right proportions. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/ember.h"

static char tag[96];
static char log_path[600];

/* `ember query` for `worker` into `out` until it has samples (exit 0). */
static void query_pprof(const char *server, const char *worker, const char *out) {
  char cmd[2048], text[4096];
  snprintf(cmd, sizeof cmd,
           "%s/cli/ember query --server %s --worker %s --from -10m --format pprof -o %s 2>&1",
           EMBER_BINARY_DIR, server, worker, out);
  int rc = -1;
  for (int t = 0; t < 30 && rc != 0; t++) {
    rc = tu_sh(cmd, text, sizeof text);
    if (rc == 3)
      sleep(1); /* nothing stored yet */
    else if (rc != 0)
      fail_msg("%s: exit %d: %s", cmd, rc, text);
  }
  if (rc != 0) fail_msg("no samples for %s after 30 s: %s (log %s)", worker, text, log_path);
  print_message("%s", text);
}

static void test_e2e_agent_collector_query(void **state) {
  (void)state;
  snprintf(tag, sizeof tag, "e2e-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  const char *brokers = tu_bootstrap();
  unsigned port = tu_free_port();
  char a_brokers[512], a_host[160], a_spool[700], a_sel[160];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", tag);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/%s/spool", EMBER_TEST_TMP, tag);
  snprintf(a_sel, sizeof a_sel, "selector=worker=%s-*", tag);
  char dir[600], group[160];
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(group, sizeof group, "g-%s", tag);
  pid_t col = tu_start_collector(brokers, dir, group, port, NULL, log_path);
  const char *agent_argv[] = {
      EMBER_BINARY_DIR "/agent/ember-agent", a_brokers, a_host, a_spool, a_sel,
      /* ~4,000 samples of burn for its 3:1 (+-20% is
       * five sigma); 997, not 1000: see test_agent.c */
      "continuous_hz=997", "window=2s", "scan_interval=1s", "metrics_listen=127.0.0.1:0", NULL};
  pid_t agent = tu_spawn(agent_argv, NULL, log_path);
  sleep(2);

  char w_burn[160], w_node[160], e_burn[200], e_node[200];
  snprintf(w_burn, sizeof w_burn, "%s-burn", tag);
  snprintf(w_node, sizeof w_node, "%s-node", tag);
  snprintf(e_burn, sizeof e_burn, "EMBER_WORKER=%s", w_burn);
  snprintf(e_node, sizeof e_node, "EMBER_WORKER=%s", w_node);
  /* 4 s of CPU, however busy the machine. */
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "--cpu", "4", NULL};
  const char *burn_env[] = {e_burn, "EMBER_VERSION=2.0.0", NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);
  char node[512];
  if (!tu_which("node", node, sizeof node)) fail_msg("node is not installed (scripts/deps.sh)");
  const char *node_argv[] = {node,
                             "--perf-basic-prof",
                             "--interpreted-frames-native-stack",
                             EMBER_SOURCE_DIR "/tests/programs/fib.js",
                             "6",
                             NULL};
  const char *node_env[] = {e_node, NULL};
  pid_t nodep = tu_spawn(node_argv, node_env, NULL);
  assert_true(tu_wait(burn, 80000) != -1);
  assert_true(tu_wait(nodep, 30000) != -1);
  sleep(3); /* the last windows close and are published */

  char server[64];
  snprintf(server, sizeof server, "http://127.0.0.1:%u", port);

  /* The C program: both functions, 3:1 within 20 %, whole stacks. */
  char out[800];
  snprintf(out, sizeof out, "%s/%s-burn.pb.gz", EMBER_TEST_TMP, tag);
  query_pprof(server, w_burn, out);
  char *top = tu_go_pprof_top(out, "cpu");
  char hot[32], cold[32];
  if (!tu_pprof_flat(top, "burn_hot", hot, sizeof hot) ||
      !tu_pprof_flat(top, "burn_cold", cold, sizeof cold))
    fail_msg("go tool pprof -top does not show burn_hot and burn_cold");
  double ratio = (double)tu_pprof_ns(hot) / (double)tu_pprof_ns(cold);
  print_message("burn_hot %s, burn_cold %s: %.2f\n", hot, cold, ratio);
  assert_true(ratio > 3.0 * 0.8 && ratio < 3.0 * 1.2);
  assert_non_null(strstr(top, "burn_loop"));
  ember_free(top);

  /* The Node.js script: its JIT-compiled JavaScript functions by name. */
  snprintf(out, sizeof out, "%s/%s-node.pb.gz", EMBER_TEST_TMP, tag);
  query_pprof(server, w_node, out);
  top = tu_go_pprof_top(out, "cpu");
  assert_non_null(strstr(top, "fibonacciRecursive"));
  assert_non_null(strstr(top, "emberBurnJs"));
  ember_free(top);

  /* `ember workers` lists both, with the version the burn program set. */
  char cmd[1024], text[1 << 16];
  snprintf(cmd, sizeof cmd, "%s/cli/ember workers --server %s --from -10m", EMBER_BINARY_DIR,
           server);
  assert_int_equal(tu_sh(cmd, text, sizeof text), 0);
  print_message("%s", text);
  assert_non_null(strstr(text, w_burn));
  assert_non_null(strstr(text, w_node));
  assert_non_null(strstr(text, "2.0.0"));

  tu_stop_daemon(agent, "ember-agent", log_path);
  tu_stop_daemon(col, "ember-collector", log_path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_e2e_agent_collector_query),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
