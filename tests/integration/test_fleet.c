/* Two ember-collector processes in one group on the real broker (own data
 * dirs and API ports) know each other through ember.collectors:
 *  - each lists both in /api/v1/collectors, live, with the partitions of
 *    ember.profiles each is assigned: disjoint, together all of them;
 *  - SIGTERM one: the other soon sees it stopping (not live), and then
 *    announces every partition as its own.
 * Everything is polled against generous deadlines (a loaded 2-core
 * machine); the times it took are printed. */
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
#include <jansson.h>

#include "common/testutil.h"
#include "ember/kafka.h"

#define MAX_PARTS 64

static char tag[96], group[160];
static char dir_a[512], dir_b[512], log_a[600], log_b[600];
static char id_a[320], id_b[320];

/* Partitions of ember.profiles on the broker. */
static int profile_partitions(const char *brokers) {
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  assert_non_null(rk);
  rd_kafka_topic_t *t = rd_kafka_topic_new(rk, EMBER_TOPIC_PROFILES, NULL);
  const struct rd_kafka_metadata *md = NULL;
  assert_int_equal(rd_kafka_metadata(rk, 0, t, &md, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
  assert_int_equal(md->topic_cnt, 1);
  int n = md->topics[0].partition_cnt;
  rd_kafka_metadata_destroy(md);
  rd_kafka_topic_destroy(t);
  rd_kafka_destroy(rk);
  assert_true(n > 0 && n <= MAX_PARTS);
  return n;
}

static json_t *collectors(unsigned port) {
  static char body[1 << 20];
  if (tu_http_get(port, "/api/v1/collectors", body, sizeof body) != 200) return NULL;
  return json_loads(body, 0, NULL);
}

static json_t *entry(json_t *doc, const char *id) {
  json_t *o;
  size_t i;
  json_array_foreach(json_object_get(doc, "collectors"), i, o) {
    const char *s = json_string_value(json_object_get(o, "id"));
    if (s != NULL && strcmp(s, id) == 0) return o;
  }
  return NULL;
}

/* Marks the partitions `o` is assigned in seen[] (counting repeats);
 * returns how many it has, -1 if the entry is not a live member of our group. */
static int mark(json_t *o, int *seen, int nparts) {
  if (o == NULL || !json_is_true(json_object_get(o, "live"))) return -1;
  const char *g = json_string_value(json_object_get(o, "group"));
  if (g == NULL || strcmp(g, group) != 0) return -1;
  json_t *a = json_object_get(o, "assigned"), *v;
  size_t i;
  int n = 0;
  json_array_foreach(a, i, v) {
    json_int_t p = json_integer_value(v);
    if (p < 0 || p >= nparts) return -1;
    seen[p]++;
    n++;
  }
  return n;
}

/* Does `port`'s table show both collectors live, with disjoint partitions
 * that together are all of them? */
static bool both_share_all(unsigned port, int nparts, char *why, size_t size) {
  json_t *doc = collectors(port);
  if (doc == NULL) {
    snprintf(why, size, "no answer from port %u", port);
    return false;
  }
  int seen[MAX_PARTS] = {0};
  int na = mark(entry(doc, id_a), seen, nparts);
  int nb = mark(entry(doc, id_b), seen, nparts);
  bool ok = na > 0 && nb > 0;
  for (int p = 0; p < nparts && ok; p++) ok = seen[p] == 1;
  char *dump = json_dumps(doc, JSON_COMPACT);
  snprintf(why, size, "port %u: a has %d, b has %d: %.1500s", port, na, nb, dump ? dump : "?");
  free(dump);
  json_decref(doc);
  return ok;
}

static void setup_names(void) {
  snprintf(tag, sizeof tag, "fleet-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(group, sizeof group, "g-%s", tag);
  snprintf(dir_a, sizeof dir_a, "%s/%s-a", EMBER_TEST_TMP, tag);
  snprintf(dir_b, sizeof dir_b, "%s/%s-b", EMBER_TEST_TMP, tag);
  snprintf(log_a, sizeof log_a, "%s/%s-a.log", EMBER_TEST_TMP, tag);
  snprintf(log_b, sizeof log_b, "%s/%s-b.log", EMBER_TEST_TMP, tag);
}

static void test_fleet_two_collectors_know_each_other(void **state) {
  (void)state;
  setup_names();
  const char *brokers = tu_bootstrap();
  char host[256] = "";
  assert_int_equal(gethostname(host, sizeof host - 1), 0);
  unsigned pa = tu_free_port(), pb = tu_free_port();
  while (pb == pa) pb = tu_free_port();
  /* The defaults of collector_id (host:port) are what is checked. */
  snprintf(id_a, sizeof id_a, "%s:%u", host, pa);
  snprintf(id_b, sizeof id_b, "%s:%u", host, pb);
  static const char *const extra[] = {"fleet.announce_interval=1s", NULL};
  int64_t t0 = ember_time_mono_ns();
  pid_t a = tu_start_collector(brokers, dir_a, group, pa, extra, log_a);
  pid_t b = tu_start_collector(brokers, dir_b, group, pb, extra, log_b);
  int nparts = profile_partitions(brokers);

  /* Both tables converge on the two members sharing every partition. */
  char why[2048] = "";
  bool ok = false;
  for (int t = 0; t < 450 && !ok; t++) {
    ok = both_share_all(pa, nparts, why, sizeof why) && both_share_all(pb, nparts, why, sizeof why);
    if (!ok) usleep(100000);
  }
  if (!ok) {
    tu_kill(a);
    tu_kill(b);
    fail_msg("the two collectors did not list each other with all %d partitions within 45 s: %s "
             "(logs %s, %s)",
             nparts, why, log_a, log_b);
  }
  print_message("both tables show %s and %s sharing %d partitions %.1f s after start\n", id_a, id_b,
                nparts, (double)(ember_time_mono_ns() - t0) / 1e9);
  json_t *doc = collectors(pa);
  assert_non_null(doc);
  assert_string_equal(json_string_value(json_object_get(doc, "self")), id_a);
  assert_true(json_is_true(json_object_get(entry(doc, id_a), "self")));
  assert_true(json_is_false(json_object_get(entry(doc, id_b), "self")));
  char url[400];
  snprintf(url, sizeof url, "http://%s:%u", host, pb);
  assert_string_equal(json_string_value(json_object_get(entry(doc, id_b), "api_url")), url);
  json_decref(doc);
  assert_true(tu_metric(pa, "ember_fleet_peers_live") >= 2);
  assert_true(tu_metric(pa, "ember_fleet_announcements_total") >= 1);

  /* SIGTERM b: a sees it stopping, from its last record. */
  int64_t t1 = ember_time_mono_ns();
  kill(b, SIGTERM);
  bool stopped = false;
  for (int t = 0; t < 200 && !stopped; t++) {
    doc = collectors(pa);
    json_t *o = entry(doc, id_b);
    stopped = o != NULL && json_is_true(json_object_get(o, "stopping")) &&
              json_is_false(json_object_get(o, "live"));
    json_decref(doc);
    if (!stopped) usleep(100000);
  }
  double seen_s = (double)(ember_time_mono_ns() - t1) / 1e9;
  int status = tu_wait(b, 30000);
  if (status == -1) tu_kill(b);
  if (!stopped) {
    tu_kill(a);
    fail_msg("%s did not see %s stopping within 20 s of its SIGTERM (logs %s, %s)", id_a, id_b,
             log_a, log_b);
  }
  print_message("%s saw %s stopping %.1f s after its SIGTERM\n", id_a, id_b, seen_s);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  /* a takes over and announces every partition. */
  bool all = false;
  int64_t t2 = ember_time_mono_ns();
  for (int t = 0; t < 300 && !all; t++) {
    int seen[MAX_PARTS] = {0};
    doc = collectors(pa);
    all = mark(entry(doc, id_a), seen, nparts) == nparts;
    json_decref(doc);
    if (!all) usleep(100000);
  }
  print_message("%s announced all %d partitions %.1f s later\n", id_a, nparts,
                (double)(ember_time_mono_ns() - t2) / 1e9);
  tu_stop_daemon(a, "collector a", log_a);
  assert_true(all);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fleet_two_collectors_know_each_other),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
