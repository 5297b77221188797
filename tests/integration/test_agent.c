/* ember-agent end to end against a real Kafka broker: the agent profiles
 * real programs (a C program with known functions burning CPU 3:1, a
 * Node.js script run with --perf-basic-prof, a process that exits in the
 * middle of a window) and a consumer checks what it published. */
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
#include "ember/codec.h"
#include "ember/parse.h"
#include "ember/profile.h"

/* Sampling fast enough that the 3:1 check has its samples: at +-15% a
 * ratio needs ~2,000 samples to hold at three sigma (1/hot + 1/cold is the
 * ratio's relative variance). 997, not 1000: a period in step with the
 * scheduler's tick samples by phase, not by share, on a busy CPU. */
#define AGENT_HZ   997
#define HZ_ARG     "continuous_hz=997"
#define BURN_CPU_S 4 /* ~4,000 samples of burn_hot + burn_cold */

static char host_id[128];
static char log_path[512];

static pid_t start_agent(const char *brokers, const char *extra) {
  static char a_brokers[512], a_host[256], a_spool[600];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", host_id);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool-%s", EMBER_TEST_TMP, host_id);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        HZ_ARG,
                        "window=2s",
                        "scan_interval=1s",
                        "selector=worker=ember-it-*",
                        "metrics_listen=127.0.0.1:0",
                        extra,
                        NULL};
  if (extra == NULL) argv[9] = NULL;
  pid_t pid = tu_spawn(argv, NULL, log_path);
  sleep(2); /* sampler and discovery up */
  return pid;
}

static void stop_agent(pid_t agent) {
  kill(agent, SIGTERM);
  int status = tu_wait(agent, 30000);
  if (status == -1) {
    tu_kill(agent);
    fail_msg("the agent did not stop within 30 s of SIGTERM (log: %s)", log_path);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the agent exited with status %d (log: %s)", status, log_path);
}

/* The agent's metrics port, from its log line "metrics on ... (port N)". */
static unsigned agent_metrics_port(void) { return tu_logged_port(log_path, 5000); }

static double metric_value(const char *text, const char *name) {
  char pat[128];
  snprintf(pat, sizeof pat, "\n%s ", name);
  const char *p = strstr(text, pat);
  if (p == NULL) fail_msg("metric %s missing", name);
  double v = 0;
  if (sscanf(p + strlen(pat), "%lf", &v) != 1) fail_msg("metric %s unreadable", name);
  return v;
}

typedef struct targets_seen {
  uint32_t burn_pid, short_pid, idle_pid;
  bool burn_record, short_record, short_tombstone, idle_record, idle_tombstone;
} targets_seen_t;

static void on_target(void *ctx, const char *key, const void *value, size_t len) {
  targets_seen_t *t = ctx;
  const char *slash = strrchr(key, '/');
  uint64_t pid64 = 0;
  if (slash == NULL || ember_parse_u64(slash + 1, 1, UINT32_MAX, &pid64) != 0)
    fail_msg("ember.targets key '%s' is not host/pid", key);
  uint32_t pid = (uint32_t)pid64;
  if (value == NULL) {
    if (pid == t->short_pid) t->short_tombstone = true;
    if (pid == t->idle_pid) t->idle_tombstone = true;
    return;
  }
  ember_target_record_t r;
  char err[256];
  if (ember_codec_decode_target(value, len, &r, err, sizeof err) != 0)
    fail_msg("ember.targets record %s: %s", key, err);
  if (pid == t->burn_pid && r.worker && strcmp(r.worker, "ember-it-burn") == 0 && r.version &&
      strcmp(r.version, "1.2.3") == 0 && r.actor && strcmp(r.actor, "actor-a") == 0 &&
      r.pid == pid && r.host && strcmp(r.host, host_id) == 0)
    t->burn_record = true;
  if (pid == t->short_pid && r.worker && strcmp(r.worker, "ember-it-short") == 0)
    t->short_record = true;
  if (pid == t->idle_pid && r.actor && strcmp(r.actor, "actor-idle") == 0) t->idle_record = true;
  ember_target_record_clear(&r);
}

static void test_agent_profiles_real_programs(void **state) {
  (void)state;
  snprintf(host_id, sizeof host_id, "it-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(log_path, sizeof log_path, "%s/agent-%s.log", EMBER_TEST_TMP, host_id);
  const char *brokers = tu_bootstrap();
  /* The allocation sampler's control file of a process that died without
   * its exit handlers: the agent sweeps it at start. */
  const char *true_argv[] = {"/bin/true", NULL};
  pid_t dead = tu_spawn(true_argv, NULL, NULL);
  assert_true(tu_wait(dead, 5000) != -1);
  char stale[64];
  snprintf(stale, sizeof stale, "/dev/shm/ember-alloc.%d", (int)dead);
  FILE *sf = fopen(stale, "w");
  assert_non_null(sf);
  fclose(sf);
  pid_t agent = start_agent(brokers, NULL);
  if (access(stale, F_OK) == 0) fail_msg("the agent left %s (log: %s)", stale, log_path);

  /* By CPU time, not wall time: the same samples however busy the host. */
  char burn_s[16];
  snprintf(burn_s, sizeof burn_s, "%d", BURN_CPU_S);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "--cpu", burn_s, NULL};
  const char *burn_env[] = {"EMBER_WORKER=ember-it-burn", "EMBER_VERSION=1.2.3",
                            "EMBER_ACTOR=actor-a", "UNRELATED_SECRET=do-not-ship", NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);
  const char *short_argv[] = {EMBER_TEST_PROGRAMS "/shortlived", "1500", NULL};
  const char *short_env[] = {"EMBER_WORKER=ember-it-short", NULL};
  pid_t shortp = tu_spawn(short_argv, short_env, NULL);
  /* An actor that never runs: announced all the same (sessions must reach
   * an idle actor), then tombstoned when it exits. */
  const char *idle_argv[] = {"/bin/sleep", "4", NULL};
  const char *idle_env[] = {"EMBER_WORKER=ember-it-idle", "EMBER_ACTOR=actor-idle", NULL};
  pid_t idle = tu_spawn(idle_argv, idle_env, NULL);
  /* A process that busies itself for a while as a shell (not selected),
   * then execs into a selected program: sampled before its exec, it must
   * still be profiled after it. */
  const char *late_argv[] = {"/bin/sh", "-c",
                             "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; "
                             "exec env EMBER_WORKER=ember-it-late " EMBER_TEST_PROGRAMS "/burn 3",
                             NULL};
  pid_t late = tu_spawn(late_argv, NULL, NULL);
  char node[512];
  bool have_node = tu_which("node", node, sizeof node);
  pid_t nodep = -1;
  if (have_node) {
    const char *node_argv[] = {node,
                               "--perf-basic-prof",
                               "--interpreted-frames-native-stack",
                               EMBER_SOURCE_DIR "/tests/programs/fib.js",
                               "6",
                               NULL};
    const char *node_env[] = {"EMBER_WORKER=ember-it-node", NULL};
    nodep = tu_spawn(node_argv, node_env, NULL);
  }
  double short_cpu = 0, burn_cpu = 0, node_cpu = 0;
  assert_true(tu_wait_cpu(shortp, 20000, &short_cpu) != -1);
  assert_true(tu_wait_cpu(burn, 20 * BURN_CPU_S * 1000, &burn_cpu) != -1);
  assert_true(tu_wait(idle, 20000) != -1);
  assert_true(tu_wait(late, 30000) != -1);
  if (nodep > 0) assert_true(tu_wait_cpu(nodep, 30000, &node_cpu) != -1);
  sleep(3); /* the last windows close */
  char text[1 << 16];
  assert_int_equal(tu_http_get(agent_metrics_port(), "/metrics", text, sizeof text), 200);
  /* The rings hold every process's samples; the three programs' alone
   * are AGENT_HZ of the CPU they got. */
  double all = metric_value(text, "ember_agent_samples_total");
  double cpu = short_cpu + burn_cpu + node_cpu;
  print_message("samples read: %.0f; the programs used %.2f s of CPU\n", all, cpu);
  assert_true(all > AGENT_HZ * cpu * 0.8);
  assert_true(metric_value(text, "ember_agent_profiles_published_total") >= 3);
  assert_true(metric_value(text, "ember_agent_rss_bytes") > 1e6);
  assert_true(metric_value(text, "ember_agent_cpu_seconds") > 0);
  assert_true(metric_value(text, "ember_agent_symbol_modules_loaded_total") >= 1);
  stop_agent(agent);

  ember_profile_t **ps = NULL;
  size_t n = tu_consume_profiles(brokers, host_id, 5000, 60000, &ps);
  if (n == 0) fail_msg("no profile from host %s arrived (agent log: %s)", host_id, log_path);

  /* The C program: both functions, 3:1 within 15% (over ~4,000 samples:
   * four sigma), labels from its env. */
  const ember_labels_t *bl = NULL;
  ember_profile_t *b = tu_merged_worker(ps, n, "ember-it-burn", &bl);
  int64_t hot = tu_self(b, 0, "burn_hot"), cold = tu_self(b, 0, "burn_cold");
  print_message("burn: %lld samples, burn_hot %lld, burn_cold %lld\n",
                (long long)ember_profile_total(b, 0), (long long)hot, (long long)cold);
  assert_true(hot > 0 && cold > 0);
  /* Nearly every sample is in one of the two (the burner makes no call
   * in them; its clock reads are once per 4 ms). */
  if (hot + cold < ember_profile_total(b, 0) * 9 / 10)
    fail_msg("only %lld of %lld burn samples are in burn_hot or burn_cold", (long long)(hot + cold),
             (long long)ember_profile_total(b, 0));
  double ratio = (double)hot / (double)cold;
  if (ratio < 3.0 * 0.85 || ratio > 3.0 * 1.15)
    fail_msg("burn_hot:burn_cold = %.2f, want 3 +- 15%%", ratio);
  /* Stacks are whole: main -> burn_loop -> burn_hot. */
  assert_true(tu_total_matching(b, 0, "burn_loop") >= hot + cold);
  assert_true(tu_total_matching(b, 0, "main") >= hot + cold);
  assert_non_null(bl);
  assert_string_equal(bl->version, "1.2.3");
  assert_string_equal(bl->actor, "actor-a");
  assert_string_equal(bl->host, host_id);
  assert_int_equal(bl->pid, (uint32_t)burn);
  /* AGENT_HZ of the CPU time it got (whatever else shares the CPUs):
   * within 20% (+-4% is three sigma at this count). */
  double want = AGENT_HZ * burn_cpu;
  print_message("burn: %.2f s of CPU, %.0f samples expected\n", burn_cpu, want);
  assert_true(burn_cpu > BURN_CPU_S * 0.9);
  assert_true((double)ember_profile_total(b, 0) > want * 0.8);
  assert_true((double)ember_profile_total(b, 0) < want * 1.2 + 10);
  ember_profile_free(b);

  /* The process that exited mid-window is attributed and symbolized. */
  ember_profile_t *s = tu_merged_worker(ps, n, "ember-it-short", NULL);
  int64_t sw = tu_self(s, 0, "short_lived_work");
  print_message("shortlived: %lld samples, short_lived_work %lld\n",
                (long long)ember_profile_total(s, 0), (long long)sw);
  /* It burned 1.5 s of CPU: at least half of that in samples. */
  assert_true(sw > AGENT_HZ * short_cpu / 2);
  ember_profile_free(s);

  ember_profile_t *lp = tu_merged_worker(ps, n, "ember-it-late", NULL);
  print_message("late exec: %lld samples, burn_hot %lld\n", (long long)ember_profile_total(lp, 0),
                (long long)tu_self(lp, 0, "burn_hot"));
  assert_true(tu_self(lp, 0, "burn_hot") > 0);
  ember_profile_free(lp);

  if (have_node) {
    ember_profile_t *j = tu_merged_worker(ps, n, "ember-it-node", NULL);
    int kind = tu_find_frame(j, "fibonacciRecursive");
    print_message("node: %lld samples, fibonacciRecursive kind %d, in %lld samples\n",
                  (long long)ember_profile_total(j, 0), kind,
                  (long long)tu_total_matching(j, 0, "fibonacciRecursive"));
    assert_int_equal(kind, EMBER_FRAME_JIT);
    assert_true(tu_total_matching(j, 0, "emberBurnJs") > ember_profile_total(j, 0) / 2);
    ember_profile_free(j);
  } else {
    fail_msg("node is not installed: scripts/deps.sh installs it");
  }
  for (size_t i = 0; i < n; i++) ember_profile_free(ps[i]);
  free(ps);

  /* ember.targets: each target announced with its labels under
   * "host/pid"; the process that exited got its tombstone. */
  char prefix[160];
  snprintf(prefix, sizeof prefix, "%s/", host_id);
  targets_seen_t seen = {
      .burn_pid = (uint32_t)burn, .short_pid = (uint32_t)shortp, .idle_pid = (uint32_t)idle};
  tu_consume_targets(brokers, prefix, 4000, 30000, on_target, &seen);
  assert_true(seen.burn_record);
  assert_true(seen.short_record);
  assert_true(seen.short_tombstone);
  assert_true(seen.idle_record);
  assert_true(seen.idle_tombstone);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_agent_profiles_real_programs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
