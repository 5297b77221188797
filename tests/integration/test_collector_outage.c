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

static void test_collector_outage_loses_nothing(void **state) {
  (void)state;
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
  char group[160];
  snprintf(group, sizeof group, "g-%s", tag);
  /* Small batches and fetches, so ingest is still going when the broker
   * stops. */
  static const char *const args[] = {"batch.max_messages=50",
                                     "kafka.queued.max.messages.kbytes=256",
                                     "kafka.max.partition.fetch.bytes=16384", NULL};
  pid_t c = tu_start_collector(brokers, dir, group, port, args, log_path);
  double stored = 0;
  for (int t = 0; t < 1200 && stored < 2000; t++) {
    usleep(25000);
    stored = tu_metric(port, "ember_collector_profiles_stored_total");
  }
  assert_true(stored >= 2000);
  tu_broker("halt");
  print_message("broker halted after %.0f of %zu windows stored\n", stored, n);
  sleep(15);
  double during = tu_metric(port, "ember_collector_profiles_stored_total");
  assert_true(during >= stored); /* still up, serving */
  tu_broker("resume");
  print_message("broker resumed; %.0f stored while it was away\n", during - stored);
  if (during >= (double)n) fail_msg("ingest finished before the outage: make n larger");

  int64_t got = -1;
  for (int t = 0; t < 1800 && got != want; t++) {
    usleep(100000);
    got = tu_stored_samples(dir, worker, BASE_NS, BASE_NS + 1000000 * 10000000000LL, NULL);
  }
  print_message("stored %lld of %lld samples; commit errors %.0f, consumer errors %.0f\n",
                (long long)got, (long long)want,
                tu_metric(port, "ember_collector_commit_errors_total"),
                tu_metric(port, "ember_collector_consumer_errors_total"));
  tu_stop_daemon(c, "the collector", log_path);
  assert_true(tu_stored_samples(dir, worker, BASE_NS, BASE_NS + 1000000 * 10000000000LL, NULL) ==
              want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_collector_outage_loses_nothing, tu_broker_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
