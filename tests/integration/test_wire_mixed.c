/* Agents upgrade one host at a time (issue 14): one ember-agent publishing
 * wire v1 and one publishing v2, on two hosts, feed one collector, and the
 * store holds exactly what each published. "Published" is read back from
 * ember.profiles itself (every message of each host, decoded), so the
 * comparison is exact: no rates, no tolerance. Real processes, the real
 * broker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/ember.h"

typedef struct side {
  char host[128], worker[160], log[700];
  const char *wire;
  pid_t agent, burn;
} side_t;

static void start_side(side_t *s, const char *brokers, const char *tag, const char *name,
                       const char *wire) {
  snprintf(s->host, sizeof s->host, "%s-%s", tag, name);
  snprintf(s->worker, sizeof s->worker, "%s-burn", s->host);
  snprintf(s->log, sizeof s->log, "%s/%s.log", EMBER_TEST_TMP, s->host);
  s->wire = wire;
  char a_brokers[512], a_host[200], a_spool[800], a_sel[200], a_wire[32];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", s->host);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/%s/spool", EMBER_TEST_TMP, s->host);
  snprintf(a_sel, sizeof a_sel, "selector=worker=%s", s->worker);
  snprintf(a_wire, sizeof a_wire, "wire_version=%s", wire);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        a_sel,
                        a_wire,
                        "continuous_hz=199",
                        "window=2s",
                        "scan_interval=1s",
                        "metrics_listen=127.0.0.1:0",
                        NULL};
  s->agent = tu_spawn(argv, NULL, s->log);
}

static void start_burn(side_t *s) {
  char env[200];
  snprintf(env, sizeof env, "EMBER_WORKER=%s", s->worker);
  const char *argv[] = {EMBER_TEST_PROGRAMS "/burn", "--cpu", "2", NULL};
  const char *envp[] = {env, NULL};
  s->burn = tu_spawn(argv, envp, NULL);
}

/* What the agent of `s` published: its windows and their CPU samples. */
static void published(const char *brokers, const side_t *s, uint32_t want_version, size_t *windows,
                      int64_t *samples) {
  ember_profile_t **ps = NULL;
  uint32_t *ver = NULL;
  size_t n = tu_consume_profiles_v(brokers, s->host, 3000, 60000, &ps, &ver);
  *windows = 0;
  *samples = 0;
  for (size_t i = 0; i < n; i++) {
    if (ver[i] != want_version)
      fail_msg("%s: a message of wire version %u, want %u (log %s)", s->host, ver[i], want_version,
               s->log);
    const char *w = ember_profile_labels(ps[i])->worker;
    if (w != NULL && strcmp(w, s->worker) == 0) {
      int vi = ember_profile_type_index(ps[i], EMBER_VT_CPU_SAMPLES);
      assert_true(vi >= 0);
      (*windows)++;
      *samples += ember_profile_total(ps[i], (size_t)vi);
    }
    ember_profile_free(ps[i]);
  }
  free(ps);
  free(ver);
}

static void test_wire_v1_and_v2_agents_feed_one_collector(void **state) {
  (void)state;
  char tag[96];
  snprintf(tag, sizeof tag, "mix-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  const char *brokers = tu_bootstrap();
  char dir[600], group[160], log[700];
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(group, sizeof group, "g-%s", tag);
  snprintf(log, sizeof log, "%s/%s-collector.log", EMBER_TEST_TMP, tag);
  unsigned port = tu_free_port();
  /* Two decode threads, whatever the machine, so the pool is what runs. */
  const char *extra[] = {"ingest.decode_threads=2", NULL};
  pid_t col = tu_start_collector(brokers, dir, group, port, extra, log);

  side_t a, b;
  start_side(&a, brokers, tag, "a", "1");
  start_side(&b, brokers, tag, "b", "2");
  sleep(2);
  start_burn(&a);
  start_burn(&b);
  assert_true(tu_wait(a.burn, 80000) != -1);
  assert_true(tu_wait(b.burn, 80000) != -1);
  sleep(3); /* the burners' last windows close */
  /* A clean stop publishes the window in hand too. */
  tu_stop_daemon(a.agent, "ember-agent v1", a.log);
  tu_stop_daemon(b.agent, "ember-agent v2", b.log);

  size_t wa, wb;
  int64_t sa, sb;
  published(brokers, &a, 1, &wa, &sa);
  published(brokers, &b, 2, &wb, &sb);
  print_message("published: v1 agent %zu windows, %lld samples; v2 agent %zu windows, %lld "
                "samples\n",
                wa, (long long)sa, wb, (long long)sb);
  /* Each burned 2 s of CPU at 199 Hz. */
  assert_true(wa >= 1 && sa >= 200);
  assert_true(wb >= 1 && sb >= 200);

  int64_t ga = -1, gb = -1;
  for (int t = 0; t < 300 && (ga != sa || gb != sb); t++) {
    usleep(100000);
    ga = tu_stored_samples(dir, a.worker, INT64_MIN, INT64_MAX, NULL);
    gb = tu_stored_samples(dir, b.worker, INT64_MIN, INT64_MAX, NULL);
  }
  print_message("stored: %lld and %lld samples\n", (long long)ga, (long long)gb);
  assert_true(ga == sa);
  assert_true(gb == sb);
  /* Both versions were read, none refused. */
  assert_true(tu_metric(port, "ember_collector_wire_messages_total{version=\"1\"}") >= (double)wa);
  assert_true(tu_metric(port, "ember_collector_wire_messages_total{version=\"2\"}") >= (double)wb);
  tu_stop_daemon(col, "ember-collector", log);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wire_v1_and_v2_agents_feed_one_collector),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
