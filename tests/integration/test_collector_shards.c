/* Shards against the real broker, collectors as separate processes
 * (collector/shards.h, docs/internals/fleet.md):
 *  - a collector killed between its store's commit and its Kafka offset
 *    commit (the test-only fault hook) comes back and starts each partition
 *    at the end of what its store holds: nothing is read twice, nothing is
 *    lost, every window is stored once. */
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
#include "ember/kafka.h"
#include "ember/store.h"

#define BASE_NS    (1764410400LL * 1000000000)
#define WINDOW     10000000000LL
#define WORKERS    8
#define PER_WORKER 300

static char tag[96];

static void setup_names(const char *what) {
  snprintf(tag, sizeof tag, "%s-%d-%lld", what, (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
}

/* The workers' names, whose keys spread over the partitions. */
static void worker_names(char names[WORKERS][128]) {
  for (int w = 0; w < WORKERS; w++) snprintf(names[w], sizeof names[w], "w%d-%s", w, tag);
}

/* Samples of every worker in one store, and their work_b samples (one per
 * window: each window once). */
static int64_t store_samples(const char *dir, char names[WORKERS][128], int64_t *windows) {
  int64_t total = 0;
  *windows = 0;
  for (int w = 0; w < WORKERS; w++) {
    int64_t b = 0;
    int64_t one = tu_stored_samples(dir, names[w], BASE_NS, BASE_NS + 100000 * WINDOW, &b);
    if (one < 0) return -1;
    total += one;
    *windows += b;
  }
  return total;
}

/* Runs of a store, summed: windows stored and still pending. */
static void store_runs(const char *dir, uint64_t *windows, uint64_t *pending, size_t *nruns) {
  char path[800], err[256];
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  ember_store_t *s = NULL;
  ember_store_opts_t so = {.read_only = true};
  *windows = *pending = 0;
  *nruns = 0;
  if (ember_store_open(path, &so, &s, err, sizeof err) != 0) fail_msg("%s", err);
  ember_store_run_t *runs = NULL;
  assert_int_equal(ember_store_runs(s, &runs, nruns), 0);
  for (size_t i = 0; i < *nruns; i++) {
    *windows += runs[i].windows;
    *pending += runs[i].pending;
  }
  ember_store_runs_free(runs);
  ember_store_close(s);
}

/* The runs of a store: partition, start, stored_end, pending. */
static size_t store_run_list(const char *dir, ember_store_run_t **runs) {
  char path[800], err[256];
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  ember_store_t *s = NULL;
  ember_store_opts_t so = {.read_only = true};
  if (ember_store_open(path, &so, &s, err, sizeof err) != 0) fail_msg("%s", err);
  size_t n = 0;
  assert_int_equal(ember_store_runs(s, runs, &n), 0);
  ember_store_close(s);
  return n;
}

static void test_collector_killed_before_its_commit_reads_nothing_twice(void **state) {
  (void)state;
  setup_names("seek");
  const char *brokers = tu_bootstrap();
  char dir[512], log_path[600], group[160];
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  snprintf(group, sizeof group, "g-%s", tag);
  char names[WORKERS][128];
  worker_names(names);

  /* Batches of 50: the fourth is stored, then the process dies before
   * committing it. It starts at the end of the topic (other tests' windows
   * are before it), so its batches are this test's windows. */
  static const char *const first[] = {"batch.max_messages=50", "kafka.auto.offset.reset=latest",
                                      NULL};
  static const char *const args[] = {"batch.max_messages=50", NULL};
  static const char *const fault[] = {"EMBER_TEST_FAULT=kill_after_store:4", NULL};
  unsigned port = tu_free_port();
  pid_t c = tu_start_collector_env(brokers, dir, group, port, first, fault, log_path);
  char cmd[900], out[64] = "";
  snprintf(cmd, sizeof cmd, "grep -c 'assigned [1-9]' %s", log_path);
  for (int t = 0; t < 300 && (tu_sh(cmd, out, sizeof out) != 0 || out[0] == '0'); t++)
    usleep(100000);
  sleep(2); /* its positions at the end, fetched */
  int64_t want = 0;
  for (int w = 0; w < WORKERS; w++)
    want += tu_produce_profiles(brokers, names[w], 1, PER_WORKER, names[w], "host-s", BASE_NS);
  int status = tu_wait(c, 60000);
  assert_true(status != -1);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  uint64_t windows = 0, pending = 0;
  size_t nruns = 0;
  store_runs(dir, &windows, &pending, &nruns);
  print_message("killed after its 4th batch: %zu runs, %llu windows stored, %llu not committed\n",
                nruns, (unsigned long long)windows, (unsigned long long)pending);
  /* Four batches, not necessarily of 50: a batch also closes when the
   * collector has read all there is, which it may while the producer is
   * still sending (a loaded machine, a fast decode). */
  assert_true(windows >= 4 && pending > 0);
  ember_store_run_t *before = NULL;
  size_t nbefore = store_run_list(dir, &before);

  port = tu_free_port();
  c = tu_start_collector(brokers, dir, group, port, args, log_path);
  int64_t got = -1, nwin = 0;
  for (int t = 0; t < 1200 && got != want; t++) {
    usleep(100000);
    got = store_samples(dir, names, &nwin);
    if (got > want) break;
  }
  double seeks = tu_metric(port, "ember_collector_run_seeks_total");
  tu_stop_daemon(c, "the collector", log_path);
  got = store_samples(dir, names, &nwin);
  ember_store_run_t *after = NULL;
  size_t nafter = store_run_list(dir, &after);
  /* Every partition that had pending windows went on from where its run
   * ended: the new run starts at the old stored_end, nothing read twice. */
  size_t continued = 0;
  for (size_t i = 0; i < nbefore; i++) {
    if (before[i].pending == 0) continue;
    bool found = false;
    for (size_t j = 0; j < nafter && !found; j++)
      found = after[j].partition == before[i].partition && after[j].start == before[i].stored_end;
    if (!found)
      fail_msg("partition %d: no run starts at %lld, where its pending run ended",
               (int)before[i].partition, (long long)before[i].stored_end);
    continued++;
  }
  print_message("after restart: %lld of %lld samples, %lld windows; %.0f partitions started at "
                "the store's end, %zu runs continued exactly where they ended\n",
                (long long)got, (long long)want, (long long)nwin, seeks, continued);
  ember_store_runs_free(before);
  ember_store_runs_free(after);
  assert_true(got == want);
  assert_true(nwin == WORKERS * PER_WORKER); /* one work_b sample per window: each once */
  assert_true(seeks >= 1 && continued >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collector_killed_before_its_commit_reads_nothing_twice),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
