/* ember-collector through a broker outage: the real broker is halted for
 * 15 s in the middle of ingest (fetches and offset commits fail), then
 * resumed on the same address. The collector must neither exit nor lose
 * or double a window: the store ends with exactly what was produced. */
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

#include "common/testutil.h"
#include "ember/store.h"

#define BASE_NS (1764410400LL * 1000000000)

static const char *broker_sh, *broker_dir;
static bool halted;

static void broker(const char *verb) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' %s '%s' >/dev/null", broker_sh, verb, broker_dir);
  if (system(cmd) != 0) fail_msg("broker.sh %s failed", verb);
  halted = strcmp(verb, "halt") == 0;
}

static int teardown(void **state) {
  (void)state;
  if (halted) broker("resume"); /* leave a running broker for the next tests */
  return 0;
}

static int64_t stored_samples(const char *dir, const char *worker) {
  char path[700], err[256];
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  ember_store_t *s = NULL;
  ember_store_opts_t so = {.read_only = true};
  if (ember_store_open(path, &so, &s, err, sizeof err) != 0) return -1;
  ember_store_selector_t sel = {.worker = worker};
  ember_profile_t *m = NULL;
  int64_t total = -1;
  if (ember_store_merge(s, &sel, BASE_NS, BASE_NS + 1000000 * 10000000000LL, EMBER_VT_CPU_SAMPLES,
                        &m) == 0) {
    total = ember_profile_total(m, 0);
    ember_profile_free(m);
  }
  ember_store_close(s);
  return total;
}

static void test_collector_outage_loses_nothing(void **state) {
  (void)state;
  broker_sh = getenv("EMBER_TEST_BROKER_SH");
  broker_dir = getenv("EMBER_TEST_BROKER_DIR");
  if (broker_sh == NULL || broker_dir == NULL) fail_msg("run through ctest (broker env unset)");
  const char *brokers = tu_bootstrap();
  char tag[96], dir[512], log_path[600], worker[128];
  snprintf(tag, sizeof tag, "cout-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  snprintf(worker, sizeof worker, "w-%s", tag);
  const size_t n = 40000;
  int64_t want = tu_produce_profiles(brokers, tag, 1, n, worker, "host-o", BASE_NS);

  unsigned port = tu_free_port();
  char a_brokers[512], a_dir[600], a_group[160], a_listen[64];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_dir, sizeof a_dir, "data_dir=%s", dir);
  snprintf(a_group, sizeof a_group, "group_id=g-%s", tag);
  snprintf(a_listen, sizeof a_listen, "api.listen=127.0.0.1:%u", port);
  /* Small batches and fetches, so ingest is still going when the broker
   * stops. */
  const char *argv[] = {EMBER_BINARY_DIR "/collector/ember-collector",
                        a_brokers,
                        a_dir,
                        a_group,
                        a_listen,
                        "retention=0",
                        "batch.max_messages=50",
                        "kafka.queued.max.messages.kbytes=256",
                        "kafka.max.partition.fetch.bytes=16384",
                        NULL};
  pid_t c = tu_spawn(argv, NULL, log_path);
  double stored = 0;
  for (int t = 0; t < 1200 && stored < 2000; t++) {
    usleep(25000);
    stored = tu_metric(port, "ember_collector_profiles_stored_total");
  }
  assert_true(stored >= 2000);
  broker("halt");
  print_message("broker halted after %.0f of %zu windows stored\n", stored, n);
  sleep(15);
  double during = tu_metric(port, "ember_collector_profiles_stored_total");
  assert_true(during >= stored); /* still up, serving */
  broker("resume");
  print_message("broker resumed; %.0f stored while it was away\n", during - stored);
  if (during >= (double)n) fail_msg("ingest finished before the outage: make n larger");

  int64_t got = -1;
  for (int t = 0; t < 1800 && got != want; t++) {
    usleep(100000);
    got = stored_samples(dir, worker);
  }
  print_message("stored %lld of %lld samples; commit errors %.0f, consumer errors %.0f\n",
                (long long)got, (long long)want,
                tu_metric(port, "ember_collector_commit_errors_total"),
                tu_metric(port, "ember_collector_consumer_errors_total"));
  kill(c, SIGTERM);
  int status = tu_wait(c, 30000);
  if (status == -1) {
    tu_kill(c);
    fail_msg("the collector did not stop on SIGTERM (log %s)", log_path);
  }
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_true(stored_samples(dir, worker) == want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_collector_outage_loses_nothing, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
