/* ember-agent through a broker outage: the real broker is halted for 30 s
 * while the agent profiles a busy program, then resumed on the same
 * address. Every window the agent made must reach a consumer exactly once
 * after deduplication by (agent_id, seq): no gap in the sequence. */
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
#include "ember/profile.h"

static int by_seq(const void *a, const void *b) {
  uint64_t x = ember_profile_seq(*(ember_profile_t *const *)a);
  uint64_t y = ember_profile_seq(*(ember_profile_t *const *)b);
  return x < y ? -1 : x > y;
}

static void test_agent_outage_loses_no_window(void **state) {
  (void)state;
  const char *brokers = tu_bootstrap();
  char host[128], log_path[512], a_brokers[512], a_host[256], a_spool[700];
  snprintf(host, sizeof host, "outage-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(log_path, sizeof log_path, "%s/agent-%s.log", EMBER_TEST_TMP, host);
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", host);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool-%s", EMBER_TEST_TMP, host);
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_host,
                              a_spool,
                              "continuous_hz=99",
                              "window=2s",
                              "selector=worker=ember-outage-*",
                              "metrics_listen=",
                              "kafka.message.timeout.ms=5000",
                              NULL};
  pid_t agent = tu_spawn(agent_argv, NULL, log_path);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "52", NULL};
  const char *burn_env[] = {"EMBER_WORKER=ember-outage-burn", NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);

  sleep(6);
  tu_broker("halt");
  print_message("broker halted for 30 s\n");
  sleep(30);
  tu_broker("resume");
  print_message("broker resumed\n");
  if (tu_wait(burn, 60000) == -1) fail_msg("burn did not finish");
  sleep(3);
  kill(agent, SIGTERM);
  int status = tu_wait(agent, 60000);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    tu_kill(agent);
    fail_msg("agent did not stop cleanly (status %d, log %s)", status, log_path);
  }

  ember_profile_t **ps = NULL;
  size_t n = tu_consume_profiles(tu_bootstrap(), host, 8000, 90000, &ps);
  if (n == 0) fail_msg("nothing arrived (agent log %s)", log_path);
  qsort(ps, n, sizeof *ps, by_seq);
  size_t distinct = 0, dups = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && ember_profile_seq(ps[i]) == ember_profile_seq(ps[i - 1])) {
      dups++;
      continue;
    }
    if (ember_profile_seq(ps[i]) != distinct)
      fail_msg("window seq %llu missing (next seen %llu; log %s)", (unsigned long long)distinct,
               (unsigned long long)ember_profile_seq(ps[i]), log_path);
    distinct++;
  }
  /* 52 s of burn in 2 s windows: about 26 windows, 15 of them in the outage. */
  print_message("%zu windows arrived (%zu duplicates dropped), seq 0..%zu without a gap\n",
                distinct, dups, distinct - 1);
  assert_true(distinct >= 22);
  for (size_t i = 0; i < n; i++)
    assert_string_equal(ember_profile_agent_id(ps[i]), ember_profile_agent_id(ps[0]));
  for (size_t i = 0; i < n; i++) ember_profile_free(ps[i]);
  free(ps);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_agent_outage_loses_no_window, tu_broker_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
