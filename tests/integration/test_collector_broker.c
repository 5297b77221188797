/* ember-collector against the real broker, as separate processes:
 *  - SIGKILL in the middle of ingest, restart: the store then holds exactly
 *    what was published (nothing lost, nothing twice);
 *  - malformed messages produced with kcat land in the DLQ, with the reason
 *    in a header, while valid profiles around them are stored;
 *  - so do malformed wire v2 messages, those the decoder refuses and those
 *    only the store can tell (a hash that does not match its content). */
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
#include "ember/codec.h"
#include "ember/kafka.h"
#include "ember/store.h"
#include "ember/wire.h"
#include "ember_v2.pb-c.h"

#define BASE_NS (1764410400LL * 1000000000)
#define WINDOW  10000000000LL

static char tag[96];
static char dir[512];
static char log_path[600];

static pid_t start_collector(unsigned port) {
  char group[160];
  snprintf(group, sizeof group, "g-%s", tag);
  static const char *const args[] = {"batch.max_messages=100", NULL};
  return tu_start_collector(tu_bootstrap(), dir, group, port, args, log_path);
}

static void stop_collector(pid_t pid) { tu_stop_daemon(pid, "the collector", log_path); }

/* CPU samples of `worker` in the store (read-only; the collector may run). */
static int64_t stored_samples(const char *worker, int64_t *work_b) {
  return tu_stored_samples(dir, worker, BASE_NS, BASE_NS + 100000 * WINDOW, work_b);
}

static void setup_names(const char *what) {
  snprintf(tag, sizeof tag, "%s-%d-%lld", what, (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
}

static void test_collector_sigkill_loses_nothing(void **state) {
  (void)state;
  setup_names("kill");
  const char *brokers = tu_bootstrap();
  const size_t n = 30000;
  char worker[128];
  snprintf(worker, sizeof worker, "w-%s", tag);
  int64_t want = tu_produce_profiles(brokers, tag, 1, n, worker, "host-k", BASE_NS);

  unsigned port = tu_free_port();
  pid_t c = start_collector(port);
  /* Kill it once some, but not all, of the windows are stored. */
  double stored = 0;
  for (int t = 0; t < 1200; t++) {
    stored = tu_metric(port, "ember_collector_profiles_stored_total");
    if (stored >= 2000) break;
    usleep(25000);
  }
  kill(c, SIGKILL);
  assert_true(tu_wait(c, 10000) != -1);
  int64_t before = stored_samples(worker, NULL);
  print_message("SIGKILL after %.0f of %zu windows stored (%lld of %lld samples)\n", stored, n,
                (long long)before, (long long)want);
  assert_true(stored >= 2000);
  if (before >= want) fail_msg("ingest finished before the kill: make n larger");

  port = tu_free_port();
  c = start_collector(port);
  int64_t got = -1, work_b = 0;
  double lag_max = 0;
  for (int t = 0; t < 1200 && got != want; t++) {
    usleep(100000);
    double lag = tu_metric(port, "ember_collector_consumer_lag");
    if (lag > lag_max) lag_max = lag;
    got = stored_samples(worker, &work_b);
    if (got > want) break;
  }
  /* The backlog showed as consumer lag, and drains to zero. */
  double lag = -1;
  for (int t = 0; t < 100 && lag != 0; t++) {
    lag = tu_metric(port, "ember_collector_consumer_lag");
    if (lag != 0) usleep(100000);
  }
  print_message("consumer lag: at most %.0f while catching up, %.0f at the end\n", lag_max, lag);
  assert_true(lag_max > 0);
  assert_true(lag == 0);
  double dups = tu_metric(port, "ember_collector_duplicates_total");
  stop_collector(c);
  got = stored_samples(worker, &work_b);
  print_message("after restart: %lld of %lld samples, %.0f duplicates dropped\n", (long long)got,
                (long long)want, dups);
  assert_true(got == want);
  assert_true(work_b == (int64_t)n); /* one work_b sample per window: each window once */
}

/* How many of needles[0..n) the DLQ holds, read with kcat, in lines of
 * messages keyed `key` (their headers, and their payloads if `payload`),
 * trying for up to 20 s. Each such line must name its error and source. */
static int dlq_find(const char *kcat, const char *brokers, const char *key, bool payload,
                    const char *const *needles, int n) {
  char cmd[2048], out_path[700];
  snprintf(out_path, sizeof out_path, "%s/%s.dlq", EMBER_TEST_TMP, tag);
  snprintf(cmd, sizeof cmd, "%s -C -b %s -t %s -o beginning -e -q -f '%%k|%%h%s\\n' > %s", kcat,
           brokers, EMBER_TOPIC_PROFILES_DLQ, payload ? "|%s" : "", out_path);
  int found = 0;
  for (int t = 0; t < 20 && found < n; t++) {
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(out_path, "r");
    assert_non_null(f);
    char line[4096];
    bool seen[8] = {false};
    assert_true(n <= 8);
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, key, strlen(key)) != 0 || line[strlen(key)] != '|') continue;
      assert_non_null(strstr(line, "ember.error="));
      assert_non_null(strstr(line, "ember.source=" EMBER_TOPIC_PROFILES "/"));
      for (int i = 0; i < n; i++)
        if (strstr(line, needles[i]) != NULL) seen[i] = true;
    }
    fclose(f);
    found = 0;
    for (int i = 0; i < n; i++) found += seen[i];
    if (found < n) sleep(1);
  }
  return found;
}

static void test_collector_dlq_with_kcat(void **state) {
  (void)state;
  setup_names("dlq");
  char kcat[512];
  if (!tu_which("kcat", kcat, sizeof kcat)) fail_msg("kcat is not installed (scripts/deps.sh)");
  const char *brokers = tu_bootstrap();
  char worker[128];
  snprintf(worker, sizeof worker, "w-%s", tag);
  unsigned port = tu_free_port();
  pid_t c = start_collector(port);

  int64_t want = tu_produce_profiles(brokers, tag, 1, 20, worker, "host-d", BASE_NS);
  /* Three malformed values, each line one message, keyed by the tag. */
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "printf '%s:garbage-one\\n%s:{\"json\": true}\\n%s:\\x12\\x03abc\\n' | "
           "%s -P -b %s -t %s -K: -q",
           tag, tag, tag, kcat, brokers, EMBER_TOPIC_PROFILES);
  assert_int_equal(system(cmd), 0);
  want += tu_produce_profiles(brokers, tag, 21, 20, worker, "host-d", BASE_NS + 100 * WINDOW);

  /* The bad messages are keyed by the tag and the good ones by the worker,
   * so they may sit on different partitions, read in either order: wait
   * for both, not for the good ones alone. */
  int64_t got = -1;
  double malformed = 0;
  for (int t = 0; t < 600 && (got != want || malformed < 3); t++) {
    usleep(100000);
    got = stored_samples(worker, NULL);
    malformed = tu_metric(port, "ember_collector_malformed_total");
  }
  assert_true(got == want); /* ingest went on around the bad messages */
  assert_true(malformed >= 3);

  /* The DLQ, read with kcat: our three messages, with the reason. Other
   * tests' collectors (their own groups) read the same topic and may have
   * copied these messages too: each must be there at least once. */
  static const char *const payloads[] = {"garbage-one", "json", "abc"};
  assert_int_equal(dlq_find(kcat, brokers, tag, true, payloads, 3), 3);
  /* Still serving. */
  char body[64];
  assert_int_equal(tu_http_get(port, "/healthz", body, sizeof body), 200);
  stop_collector(c);
}

/* A v2 message of tu_profile(agent, seq, ...), broken by `how`:
 * 0 cut before its end mark, 1 a string length past the limit, 2 a blob shorter than its
 * lengths, 3 a location whose hash is not its content's, 4 a stack whose hash is not its
 * locations'. */
static void *bad_v2(const char *agent, uint64_t seq, const char *worker, int how, size_t *len) {
  ember_profile_t *p = tu_profile(agent, seq, worker, "host-v2", BASE_NS + (int64_t)seq * WINDOW);
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  assert_int_equal(ember_codec_encode_v2(p, &b), 0);
  ember_profile_free(p);
  if (how == 0) {
    /* Without its end mark (the last 6 bytes: field 30's two-byte tag and
     * the fixed32): every field left parses, the mark is missing. */
    *len = b.len - 6;
    void *out = malloc(*len);
    memcpy(out, b.data, *len);
    ember_buf_free(&b);
    return out;
  }
  Ember__Wire__V2__Profile *m =
      ember__wire__v2__profile__unpack(NULL, b.len, (const uint8_t *)b.data);
  assert_non_null(m);
  assert_true(m->n_string_lengths > 1 && m->n_location_function > 0);
  if (how == 1) m->string_lengths[1] = EMBER_MAX_STRING + 1;
  if (how == 2) m->strings.len -= 2;
  if (how == 3) {
    /* Location hashes as writers before 2026-12-03 sent them. */
    tu_v2_add_hashes(m, TU_LOCATION_HASHES, NULL);
    m->location_hash[0] ^= 1;
  }
  if (how == 4) {
    /* Stack hashes, likewise. */
    tu_v2_add_hashes(m, TU_STACK_HASHES, NULL);
    m->stack_hash[0] ^= 1;
  }
  *len = ember__wire__v2__profile__get_packed_size(m);
  void *out = malloc(*len);
  ember__wire__v2__profile__pack(m, out);
  /* free_unpacked frees what unpack made: `strings.len` shrank, not its
   * buffer. */
  ember__wire__v2__profile__free_unpacked(m, NULL);
  ember_buf_free(&b);
  return out;
}

static void test_collector_dlq_wire_v2(void **state) {
  (void)state;
  setup_names("dlq2");
  char kcat[512];
  if (!tu_which("kcat", kcat, sizeof kcat)) fail_msg("kcat is not installed (scripts/deps.sh)");
  const char *brokers = tu_bootstrap();
  char worker[128];
  snprintf(worker, sizeof worker, "w-%s", tag);
  unsigned port = tu_free_port();
  pid_t c = start_collector(port);

  /* Good v1 windows, five bad v2 ones, good v1 windows: one key (the
   * worker), so one partition, in this order. */
  int64_t want = tu_produce_profiles(brokers, tag, 1, 10, worker, "host-d", BASE_NS);
  static const char *const reasons[] = {"truncated", "string 1: 4097 bytes",
                                        "string lengths add up to more than", "location 0: hash",
                                        "sample 0: stack hash"};
  enum { NBAD = sizeof reasons / sizeof reasons[0] };
  const void *values[NBAD];
  size_t lens[NBAD];
  for (int i = 0; i < NBAD; i++) values[i] = bad_v2(tag, 100 + (uint64_t)i, worker, i, &lens[i]);
  tu_dr_tally_t t = tu_produce(brokers, EMBER_TOPIC_PROFILES, worker, values, lens, NBAD);
  assert_int_equal(t.ok, NBAD);
  for (int i = 0; i < NBAD; i++) free((void *)(uintptr_t)values[i]);
  want += tu_produce_profiles(brokers, tag, 11, 10, worker, "host-d", BASE_NS + 200 * WINDOW);

  int64_t got = -1;
  double malformed = 0;
  for (int i = 0; i < 600 && (got != want || malformed < NBAD); i++) {
    usleep(100000);
    got = stored_samples(worker, NULL);
    malformed = tu_metric(port, "ember_collector_malformed_total");
  }
  assert_true(got == want);
  /* At least: other tests put malformed messages on the shared topic too,
   * and this collector's group reads it from the start. */
  assert_true(malformed >= NBAD);

  /* The DLQ: the five, keyed by the worker, each with its reason
   * (payloads are binary: only keys and headers are read). */
  int found = dlq_find(kcat, brokers, worker, false, reasons, NBAD);
  if (found < NBAD) fail_msg("only %d of the %d reasons in the DLQ", found, (int)NBAD);
  stop_collector(c);
}

/* Two instances in one group share the partitions and one store file:
 * each stores part of the stream, together exactly all of it. */
static void test_collector_two_instances_share_the_work(void **state) {
  (void)state;
  setup_names("pair");
  const char *brokers = tu_bootstrap();
  unsigned p1 = tu_free_port(), p2 = tu_free_port();
  pid_t c1 = start_collector(p1);
  char log1[600];
  snprintf(log1, sizeof log1, "%s", log_path);
  snprintf(log_path, sizeof log_path, "%s/%s-b.log", EMBER_TEST_TMP, tag);
  pid_t c2 = start_collector(p2);
  /* Both in the group: each announces its share of the partitions. */
  for (int t = 0; t < 300; t++) {
    char cmd[1400], out[64];
    snprintf(cmd, sizeof cmd, "grep -c 'assigned [1-9]' %s %s | grep -c ':[1-9]'", log1, log_path);
    if (tu_sh(cmd, out, sizeof out) == 0 && out[0] == '2') break;
    usleep(100000);
  }
  int64_t want = 0;
  const size_t per_worker = 400;
  char workers[8][128];
  for (int w = 0; w < 8; w++) {
    snprintf(workers[w], sizeof workers[w], "w%d-%s", w, tag);
    want += tu_produce_profiles(brokers, workers[w], 1, per_worker, workers[w], "host-p", BASE_NS);
  }
  int64_t got = 0;
  for (int t = 0; t < 600 && got != want; t++) {
    usleep(100000);
    got = 0;
    for (int w = 0; w < 8; w++) {
      int64_t one = stored_samples(workers[w], NULL);
      if (one > 0) got += one;
    }
  }
  double m1 = tu_metric(p1, "ember_collector_messages_total");
  double m2 = tu_metric(p2, "ember_collector_messages_total");
  print_message("instance 1 read %.0f messages, instance 2 %.0f; stored %lld of %lld samples\n", m1,
                m2, (long long)got, (long long)want);
  stop_collector(c2);
  snprintf(log_path, sizeof log_path, "%s", log1);
  stop_collector(c1);
  assert_true(got == want);
  assert_true(m1 > 0 && m2 > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_collector_sigkill_loses_nothing),
      cmocka_unit_test(test_collector_dlq_with_kcat),
      cmocka_unit_test(test_collector_dlq_wire_v2),
      cmocka_unit_test(test_collector_two_instances_share_the_work),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
