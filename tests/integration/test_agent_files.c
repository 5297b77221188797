/* ember-agent beside hostile perf maps, against the real broker: two
 * selected programs run code in anonymous executable memory (so the agent
 * reads their perf maps) whose /tmp/perf-PID.map is a FIFO and a 2 GB
 * sparse file. The agent must keep publishing windows, spend bounded CPU
 * (measured from its own metric, against the wall time it had), and stop
 * on SIGTERM. The old agent blocked its close thread in open() on the FIFO
 * (no window after it, and SIGTERM never finished) and re-read the sparse
 * file from the start for every stack. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/ember.h"

static char host_id[128];
static char log_path[512];
static pid_t agent = -1, progs[2] = {-1, -1};

/* Whatever failed, leave no agent, program or perf map behind. */
static int teardown(void **state) {
  (void)state;
  for (int i = 0; i < 2; i++) {
    if (progs[i] <= 0) continue;
    tu_kill(progs[i]);
    char map[64];
    snprintf(map, sizeof map, "/tmp/perf-%d.map", (int)progs[i]);
    unlink(map);
  }
  if (agent > 0) tu_kill(agent);
  return 0;
}

static pid_t start_agent(const char *brokers) {
  static char a_brokers[512], a_host[256], a_spool[600];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", host_id);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool-%s", EMBER_TEST_TMP, host_id);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        "continuous_hz=199",
                        "window=1s",
                        "scan_interval=1s",
                        "selector=worker=ember-it-files-*",
                        "metrics_listen=127.0.0.1:0",
                        NULL};
  pid_t pid = tu_spawn(argv, NULL, log_path);
  sleep(2); /* sampler and discovery up */
  return pid;
}

static unsigned metrics_port(void) { return tu_logged_port(log_path, 5000); }

static double metric(unsigned port, const char *name) {
  static char text[1 << 16];
  if (tu_http_get(port, "/metrics", text, sizeof text) != 200)
    fail_msg("the agent's /metrics did not answer (log: %s)", log_path);
  char pat[128];
  snprintf(pat, sizeof pat, "\n%s ", name);
  const char *p = strstr(text, pat);
  if (p == NULL) fail_msg("metric %s missing", name);
  double v = 0;
  if (sscanf(p + strlen(pat), "%lf", &v) != 1) fail_msg("metric %s unreadable", name);
  return v;
}

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_agent_files_fifo_and_sparse_perf_maps(void **state) {
  (void)state;
  snprintf(host_id, sizeof host_id, "files-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(log_path, sizeof log_path, "%s/agent-%s.log", EMBER_TEST_TMP, host_id);
  agent = start_agent(tu_bootstrap());
  unsigned port = metrics_port();

  const char *fifo_argv[] = {EMBER_TEST_PROGRAMS "/jitburn", "10", "fifo", NULL};
  const char *fifo_env[] = {"EMBER_WORKER=ember-it-files-fifo", NULL};
  const char *sparse_argv[] = {EMBER_TEST_PROGRAMS "/jitburn", "10", "sparse", NULL};
  const char *sparse_env[] = {"EMBER_WORKER=ember-it-files-sparse", NULL};
  pid_t fifo = progs[0] = tu_spawn(fifo_argv, fifo_env, NULL);
  pid_t sparse = progs[1] = tu_spawn(sparse_argv, sparse_env, NULL);
  sleep(3); /* both found, sampled, and their first windows closed */
  double p0 = metric(port, "ember_agent_profiles_published_total");
  double c0 = metric(port, "ember_agent_cpu_seconds"), w0 = wall_s();
  double fifo_cpu = 0, sparse_cpu = 0;
  assert_true(tu_wait_cpu(fifo, 30000, &fifo_cpu) != -1);
  assert_true(tu_wait_cpu(sparse, 30000, &sparse_cpu) != -1);
  double p1 = metric(port, "ember_agent_profiles_published_total");
  double c1 = metric(port, "ember_agent_cpu_seconds"), w1 = wall_s();
  double refused = metric(port, "ember_agent_file_not_regular_total");
  print_message("programs: %.2f and %.2f s of CPU; agent: %.0f profiles published, %.2f s of "
                "CPU in %.1f s; %.0f non-regular files refused\n",
                fifo_cpu, sparse_cpu, p1 - p0, c1 - c0, w1 - w0, refused);
  /* The programs ran: their windows had samples to publish. */
  assert_true(fifo_cpu > 1.0 && sparse_cpu > 1.0);
  /* Windows of 1 s for ~7 s, two targets: the close thread kept going. */
  if (p1 - p0 < 4)
    fail_msg("only %.0f profiles published beside the maps (log: %s)", p1 - p0, log_path);
  assert_true(refused >= 1);
  /* The old agent spent ~0.26 s per stack on the sparse map, several
   * stacks a window: most of a core. Now: an fstat per stack. */
  if (c1 - c0 > 0.25 * (w1 - w0))
    fail_msg("the agent used %.2f s of CPU in %.1f s beside the maps", c1 - c0, w1 - w0);
  double rss = metric(port, "ember_agent_rss_bytes");
  assert_true(rss < 400e6);

  kill(agent, SIGTERM);
  int status = tu_wait(agent, 30000);
  if (status == -1) fail_msg("the agent did not stop within 30 s of SIGTERM (log: %s)", log_path);
  agent = -1;
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_agent_files_fifo_and_sparse_perf_maps, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
