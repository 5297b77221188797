/* Collectors on several hosts answering as one (docs/internals/fleet.md),
 * against the real broker, every collector a real process with its own
 * store and API port:
 *  - three collectors in one group and a fourth in a group of its own (a
 *    replica holding everything): each of the three answers the workers,
 *    the profile totals and the timeline of the whole stream, equal to the
 *    replica's own store; with one of the three killed the answer comes
 *    from the replica, still exact; with the replica gone too, it is
 *    marked partial and names the dead collector;
 *  - two real ember-agent processes with different host ids, profiling
 *    burners and Debian's sha256sum (no frame pointers) under several
 *    workers: each of the three answers the workers, hosts and per-worker
 *    totals of the replica, which stored everything in the same run;
 *  - a source map uploaded through one member names the JavaScript frames
 *    of every member's answer and of the replica's, wherever the windows
 *    are stored;
 *  - a collector killed between its store's commit and its offset commit
 *    (the test-only fault hook) while another takes its partitions: each
 *    window counts once in the fleet, also after it comes back with its
 *    store (it undoes its copies). */
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
#include <zlib.h>

#include "common/testutil.h"
#include "ember/kafka.h"
#include "ember/store.h"

#define BASE_NS (1764410400LL * 1000000000)
#define WINDOW  10000000000LL
#define WORKERS 16

static char tag[96];
static char names[WORKERS][128]; /* this run's workers: other tests share the topic */

typedef struct coll {
  char name[16], dir[600], log[700];
  unsigned port;
  pid_t pid;
} coll_t;

static void setup_names(const char *what) {
  snprintf(tag, sizeof tag, "%s-%d-%lld", what, (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
}

/* A collector of `group` (suffixed by the run's tag); `env` as
 * tu_start_collector_env; `more` one more key=value argument, or NULL. */
static void start2(coll_t *c, const char *name, const char *group, const char *const *env,
                   const char *more) {
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->dir, sizeof c->dir, "%s/%s-%s", EMBER_TEST_TMP, tag, name);
  snprintf(c->log, sizeof c->log, "%s/%s-%s.log", EMBER_TEST_TMP, tag, name);
  if (c->port == 0) c->port = tu_free_port();
  /* Ids and groups of this run only: other tests' collectors announce on
   * the same topic. The group of the other's name is the replica. */
  char g[160], id[160], url[200], reps[200];
  snprintf(g, sizeof g, "%s-%s", group, tag);
  snprintf(id, sizeof id, "collector_id=%s-%s", name, tag);
  snprintf(url, sizeof url, "fleet.advertise_url=http://127.0.0.1:%u", c->port);
  snprintf(reps, sizeof reps, "fleet.replicas=%s-%s", strcmp(group, "g") == 0 ? "r" : "g", tag);
  const char *args[] = {
      "batch.max_messages=50", "fleet.announce_interval=1s", id, url, reps, more, NULL};
  c->pid = tu_start_collector_env(tu_bootstrap(), c->dir, g, c->port, args, env, c->log);
}

static void start(coll_t *c, const char *name, const char *group, const char *const *env) {
  start2(c, name, group, env, NULL);
}

static void stop(coll_t *c) {
  if (c->pid > 0) tu_stop_daemon(c->pid, c->name, c->log);
  c->pid = 0;
}

static void kill9(coll_t *c) {
  kill(c->pid, SIGKILL);
  assert_true(tu_wait(c->pid, 10000) != -1);
  c->pid = 0;
}

static void worker_names(void) {
  for (int w = 0; w < WORKERS; w++) snprintf(names[w], sizeof names[w], "w%d-%s", w, tag);
}

/* GET a path of a collector into a buffer; the status. */
static int get(const coll_t *c, const char *path, char *buf, size_t size) {
  return tu_http_get(c->port, path, buf, size);
}

/* Does GET /api/v1/rules of `c` list an API rule `name`? */
static bool has_api_rule(const coll_t *c, const char *name) {
  static char buf[1 << 16];
  char needle[160];
  snprintf(needle, sizeof needle, "\"name\":\"%s\"", name);
  if (get(c, "/api/v1/rules", buf, sizeof buf) != 200) return false;
  json_t *doc = json_loads(buf, 0, NULL), *e;
  size_t i;
  bool found = false;
  json_array_foreach(json_object_get(doc, "rules"), i, e) {
    const char *n = json_string_value(json_object_get(e, "name"));
    const char *src = json_string_value(json_object_get(e, "source"));
    found = found || (n && src && strcmp(n, name) == 0 && strcmp(src, "api") == 0);
  }
  json_decref(doc);
  return found;
}

/* Wait up to 30 s for has_api_rule(c, name) to be `want`. */
static void wait_rule(const coll_t *c, const char *name, bool want) {
  for (int t = 0; t < 300 && has_api_rule(c, name) != want; t++) usleep(100000);
  if (has_api_rule(c, name) != want)
    fail_msg("%s %s rule %s within 30 s (log %s)", c->name, want ? "lacks" : "still has", name,
             c->log);
}

static void add_rule(const coll_t *c, const char *name, const char *worker) {
  char body[512], out[1024];
  snprintf(body, sizeof body, "{\"name\":\"%s\",\"worker\":\"%s\",\"above\":100,\"for\":\"10s\"}",
           name, worker);
  int st = tu_http(c->port, "POST", "/api/v1/rules", "Content-Type: application/json\r\n", body,
                   out, sizeof out);
  if (st != 201) fail_msg("POST /api/v1/rules on %s: %d %s", c->name, st, out);
}

/* The number of live members /api/v1/collectors of `c` lists; *assigned
 * (may be NULL) gets how many of them are assigned partitions. */
static int live_members_assigned(const coll_t *c, int *assigned) {
  static char buf[1 << 20];
  if (get(c, "/api/v1/collectors", buf, sizeof buf) != 200) return -1;
  json_error_t je;
  json_t *doc = json_loads(buf, 0, &je);
  const json_t *arr = doc ? json_object_get(doc, "collectors") : NULL;
  int n = 0;
  size_t i;
  const json_t *o;
  if (assigned) *assigned = 0;
  json_array_foreach(arr, i, o) {
    const char *oid = json_string_value(json_object_get(o, "id"));
    if (oid == NULL || strstr(oid, tag) == NULL) continue; /* another test's */
    n += json_is_true(json_object_get(o, "live"));
    if (assigned && json_array_size(json_object_get(o, "assigned")) > 0) (*assigned)++;
  }
  json_decref(doc);
  return n;
}

/* The stream's range, in Unix seconds. */
#define STREAM_FROM_S (BASE_NS / 1000000000)
#define STREAM_TO_S   (BASE_NS / 1000000000 + 100000 * 10)

/* GET `path` (with from/to of [from_s, to_s) appended) as JSON; NULL
 * unless 200. */
static json_t *get_range(const coll_t *c, const char *path, int64_t from_s, int64_t to_s) {
  static char buf[1 << 20];
  char url[700];
  snprintf(url, sizeof url, "%s%cfrom=%lld&to=%lld", path, strchr(path, '?') ? '&' : '?',
           (long long)from_s, (long long)to_s);
  if (get(c, url, buf, sizeof buf) != 200) return NULL;
  return json_loads(buf, 0, NULL);
}

/* This run's workers or hosts (by tag) as "name,series;..." (`what`:
 * "workers" or "hosts"). */
static void names_in(const coll_t *c, const char *what, bool local, int64_t from_s, int64_t to_s,
                     char *out, size_t size) {
  char path[200];
  snprintf(path, sizeof path, "/api/v1/%s%s", what, local ? "?local=1" : "");
  json_t *doc = get_range(c, path, from_s, to_s), *o;
  size_t i, off = 0;
  out[0] = '\0';
  bool workers = strcmp(what, "workers") == 0;
  json_array_foreach(json_object_get(doc, workers ? "workers" : "values"), i, o) {
    const char *key = workers ? "worker" : "name";
    const char *v = json_string_value(json_object_get(o, key));
    if (v == NULL || strstr(v, tag) == NULL) continue;
    int n = snprintf(out + off, size - off, "%s,%lld;", v,
                     (long long)json_integer_value(json_object_get(o, "series")));
    if (n < 0 || (size_t)n >= size - off) break;
    off += (size_t)n;
  }
  json_decref(doc);
}

/* CPU samples of `worker` in [from_s, to_s) as collector `c` answers
 * (fleet-wide, or its own store with local=1); -1 on a failed request.
 * *partial (may be NULL) gets whether the answer said it was partial. */
static int64_t samples_of(const coll_t *c, const char *worker, bool local, int64_t from_s,
                          int64_t to_s, bool *partial) {
  char path[400];
  snprintf(path, sizeof path, "/api/v1/profile?type=samples&format=top&limit=1&worker=%s%s", worker,
           local ? "&local=1" : "");
  json_t *doc = get_range(c, path, from_s, to_s);
  if (doc == NULL) return -1;
  if (partial) *partial = json_object_get(doc, "partial") != NULL;
  int64_t t = (int64_t)json_integer_value(json_object_get(doc, "total"));
  json_decref(doc);
  return t;
}

/* The sum of the total_cpu_ns timeline collector `c` answers. */
static int64_t timeline_sum(const coll_t *c, bool local) {
  int64_t sum = 0;
  for (int w = 0; w < WORKERS; w++) {
    char path[1200];
    snprintf(path, sizeof path, "/api/v1/timeline?step=1h&from=%lld&to=%lld&worker=%.600s%s",
             (long long)(BASE_NS / 1000000000), (long long)(BASE_NS / 1000000000 + 200 * 3600),
             names[w], local ? "&local=1" : "");
    static char buf[1 << 22];
    if (get(c, path, buf, sizeof buf) != 200) return -1;
    json_error_t je;
    json_t *doc = json_loads(buf, 0, &je);
    size_t i;
    const json_t *v;
    json_array_foreach(json_object_get(doc, "total_cpu_ns"), i, v) sum += json_integer_value(v);
    json_decref(doc);
  }
  return sum;
}

/* Windows first .. first + n - 1 (seq and time) of workers [w0, w1), from
 * two agents on two hosts each; the samples produced. */
static int64_t produce_part(int w0, int w1, size_t first, size_t n) {
  int64_t want = 0;
  char agent[160];
  int64_t base = BASE_NS + (int64_t)(first - 1) * WINDOW;
  for (int w = w0; w < w1; w++) {
    snprintf(agent, sizeof agent, "a-%s-%d", tag, w);
    want += tu_produce_profiles(tu_bootstrap(), agent, first, n, names[w], "host-a", base);
    snprintf(agent, sizeof agent, "b-%s-%d", tag, w);
    want += tu_produce_profiles(tu_bootstrap(), agent, first, n, names[w], "host-b", base);
  }
  return want;
}

static int64_t produce(size_t per_worker) { return produce_part(0, WORKERS, 1, per_worker); }

/* samples_of the stream summed over this run's workers. */
static int64_t run_total(const coll_t *c, bool local, bool *partial) {
  int64_t sum = 0;
  if (partial) *partial = false;
  for (int w = 0; w < WORKERS; w++) {
    bool p = false;
    int64_t one = samples_of(c, names[w], local, STREAM_FROM_S, STREAM_TO_S, &p);
    if (one < 0) return -1;
    sum += one;
    if (partial && p) *partial = true;
  }
  return sum;
}

static void wait_total(const coll_t *c, int64_t want, bool local) {
  int64_t got = -1;
  for (int t = 0; t < 600 && got != want; t++) {
    got = run_total(c, local, NULL);
    if (got != want) usleep(100000);
  }
  if (got != want)
    fail_msg("%s answers %lld samples, not %lld (log %s)", c->name, (long long)got, (long long)want,
             c->log);
}

/* Three collectors in group g and a replica in group r, all four live and
 * each assigned partitions (the replica holds all of its group's) before
 * anything is produced. */
static void start_group(coll_t c[3], coll_t *rep) {
  start(&c[0], "c0", "g", NULL);
  start(&c[1], "c1", "g", NULL);
  start(&c[2], "c2", "g", NULL);
  start(rep, "replica", "r", NULL);
  int assigned = 0;
  for (int t = 0; t < 600; t++) {
    if (live_members_assigned(&c[0], &assigned) == 4 && assigned == 4) break;
    usleep(100000);
  }
  assert_int_equal(live_members_assigned(&c[0], &assigned), 4);
  assert_int_equal(assigned, 4);
}

#define V8_A TU_V8_A

/* Wait up to 30 s for `c`'s folded answer for `worker` to hold `want`. */
static void wait_folded(const coll_t *c, const char *worker, const char *want) {
  char path[512];
  static char body[1 << 16];
  snprintf(path, sizeof path,
           "/api/v1/profile?worker=%s&from=%lld&to=%lld&type=samples&format=folded", worker,
           (long long)STREAM_FROM_S, (long long)STREAM_TO_S);
  for (int t = 0; t < 300; t++) {
    if (get(c, path, body, sizeof body) == 200 && strstr(body, want) != NULL) return;
    usleep(100000);
  }
  fail_msg("%s: no '%s' in the folded answer for %s: %.500s (log %s)", c->name, want, worker, body,
           c->log);
}

static void test_fleet_any_collector_answers_for_all(void **state) {
  (void)state;
  setup_names("fleet");
  coll_t c[3] = {{.port = 0}}, rep = {.port = 0};
  start_group(c, &rep);

  worker_names();
  const int64_t want = produce(150);
  wait_total(&rep, want, true); /* the replica stored everything */
  /* Every collector of the group answers the whole stream. */
  for (int i = 0; i < 3; i++) wait_total(&c[i], want, false);

  char ref_workers[4096], got_workers[4096];
  names_in(&rep, "workers", true, STREAM_FROM_S, STREAM_TO_S, ref_workers, sizeof ref_workers);
  int64_t ref_tl = timeline_sum(&rep, true);
  int64_t own[3], own_sum = 0;
  for (int i = 0; i < 3; i++) {
    own[i] = run_total(&c[i], true, NULL);
    own_sum += own[i];
    names_in(&c[i], "workers", false, STREAM_FROM_S, STREAM_TO_S, got_workers, sizeof got_workers);
    assert_string_equal(got_workers, ref_workers);
    assert_true(timeline_sum(&c[i], false) == ref_tl);
    for (int w = 0; w < WORKERS; w++) {
      bool partial = true;
      int64_t a = samples_of(&c[i], names[w], false, STREAM_FROM_S, STREAM_TO_S, &partial);
      int64_t b = samples_of(&rep, names[w], true, STREAM_FROM_S, STREAM_TO_S, NULL);
      assert_true(a == b && b > 0);
      assert_false(partial);
    }
  }
  print_message("stream of %lld samples: stores of the group hold %lld + %lld + %lld; every "
                "member answers %lld; workers %s\n",
                (long long)want, (long long)own[0], (long long)own[1], (long long)own[2],
                (long long)want, ref_workers);
  assert_true(own_sum == want);
  assert_true(own[0] < want && own[1] < want && own[2] < want); /* the work was shared */

  /* Alerts: the union of the members' engines; an id no member knows is
   * a 404, not a partial answer. */
  static char abuf[1 << 16];
  assert_int_equal(get(&c[0], "/api/v1/alerts", abuf, sizeof abuf), 200);
  assert_null(strstr(abuf, "partial"));
  assert_int_equal(get(&c[0], "/api/v1/alerts/0123456789abcdef", abuf, sizeof abuf), 404);

  /* One member down: the replica answers for the group, exactly. */
  kill9(&c[1]);
  bool partial = true;
  int64_t got = -1;
  for (int t = 0; t < 100; t++) {
    got = run_total(&c[0], false, &partial);
    if (got == want && !partial) break;
    usleep(100000);
  }
  print_message("c1 killed: c0 answers %lld samples, partial %d\n", (long long)got, partial);
  if (got != want || partial) {
    static char dbg[1 << 16];
    get(&c[0], "/api/v1/collectors", dbg, sizeof dbg);
    print_message("%s\n", dbg);
  }
  assert_true(got == want && !partial);

  /* The replica down too: what c1 held is missing, and the answer says so. */
  stop(&rep);
  char hdr[2048] = "";
  for (int t = 0; t < 100; t++) {
    got = run_total(&c[0], false, &partial);
    if (partial) break;
    usleep(200000);
  }
  char cmd[800];
  snprintf(cmd, sizeof cmd,
           "curl -s -D - -o /dev/null 'http://127.0.0.1:%u/api/v1/profile?type=samples&from=%lld"
           "&to=%lld' | grep -i '^Ember-Partial'",
           c[0].port, (long long)STREAM_FROM_S, (long long)STREAM_TO_S);
  tu_sh(cmd, hdr, sizeof hdr);
  print_message("replica stopped too: c0 answers %lld samples; %s", (long long)got, hdr);
  assert_true(partial);
  assert_true(got == want - own[1]);
  assert_non_null(strstr(hdr, "c1"));

  /* A rule added through one member's API is in force on every member of
   * its group (each evaluates the workers it stores), not on the replica
   * group's collectors (they would notify each alert again); a deletion
   * through another member too; and a member that was down when a rule
   * came finds it when it starts. */
  start(&rep, "replica", "r", NULL);
  add_rule(&c[0], "shared-hot", names[0]);
  wait_rule(&c[2], "shared-hot", true);
  wait_rule(&c[0], "shared-hot", true);
  assert_int_equal(tu_http(c[2].port, "DELETE", "/api/v1/rules/shared-hot", NULL, NULL, NULL, 0),
                   200);
  wait_rule(&c[0], "shared-hot", false);
  stop(&c[2]);
  add_rule(&c[0], "while-down", names[1]);
  start(&c[2], "c2", "g", NULL);
  wait_rule(&c[2], "while-down", true);
  /* The restarted member reads the topic from its start, its partitions in
   * any order: shared-hot's record, then its deletion, may still be on
   * their way when while-down is in. Once it has read as many records as
   * c0 had (c0 read the same topic from its start, while-down included),
   * the deletion is in too. (Asked at once, this raced and failed.) */
  double seen0 = tu_metric(c[0].port, "ember_collector_rule_records_total");
  for (int t = 0; t < 300 && tu_metric(c[2].port, "ember_collector_rule_records_total") < seen0;
       t++)
    usleep(100000);
  assert_true(tu_metric(c[2].port, "ember_collector_rule_records_total") >= seen0);
  assert_false(has_api_rule(&c[2], "shared-hot"));
  assert_false(has_api_rule(&rep, "while-down"));
  assert_false(has_api_rule(&rep, "shared-hot"));
  /* A record of this group that is not a rule is counted, not applied. */
  char key[200];
  snprintf(key, sizeof key, "g-%s/broken", tag);
  const void *vals[] = {"{not json"};
  const size_t lens[] = {9};
  double errs0 = tu_metric(c[0].port, "ember_collector_rule_record_errors_total");
  assert_int_equal(tu_produce(tu_bootstrap(), EMBER_TOPIC_RULES, key, vals, lens, 1).ok, 1);
  for (int t = 0; t < 300; t++) {
    if (tu_metric(c[0].port, "ember_collector_rule_record_errors_total") > errs0) break;
    usleep(100000);
  }
  assert_true(tu_metric(c[0].port, "ember_collector_rule_record_errors_total") == errs0 + 1);
  assert_false(has_api_rule(&c[0], "broken"));
  assert_true(has_api_rule(&c[0], "while-down"));
  print_message("API rules: added on c0, deleted on c2, added while c2 was down: every member of "
                "the group agrees, the replica group has none\n");

  /* A source map uploaded through c0 names the frames of a window stored
   * on whichever member holds its partition, in every member's answer and
   * the replica's (each follows ember.sourcemaps and maps its own part). */
  char js[160];
  snprintf(js, sizeof js, "js-%s", tag);
  tu_produce_js(tu_bootstrap(), js, "1", "js-host", js, 1, BASE_NS, 30, 10);
  wait_folded(&c[2], js, "main;" V8_A " 30");
  static const char map[] =
      "{\"version\":3,\"file\":\"app.js\",\"sources\":[\"../src/alpha.ts\",\"../src/"
      "beta.ts\"],\"names\":[\"alphaWork\",\"betaWork\"],\"mappings\":\"AACA,SAASA,CAAS,"
      "YCDlB,SAASC,CAAQ\"}";
  char upath[300], uout[1024];
  snprintf(upath, sizeof upath, "/api/v1/sourcemaps?worker=%s&version=1&script=app.js", js);
  assert_int_equal(tu_http(c[0].port, "POST", upath, "Content-Type: application/json\r\n", map,
                           uout, sizeof uout),
                   201);
  const coll_t *readers[] = {&c[0], &c[2], &rep};
  for (int i = 0; i < 3; i++) {
    wait_folded(readers[i], js, "main;alphaWork 30");
    wait_folded(readers[i], js, "main;betaWork 10");
  }
  print_message("a source map uploaded through c0: c0, c2 and the replica name the frames\n");
  stop(&rep);
  stop(&c[0]);
  stop(&c[2]);
}

static pid_t start_agent(const char *host, const char *workers, const char *log) {
  /* Copied by the spawn: one set of buffers serves every call. */
  static char a[4][900];
  char *a_brokers = a[0], *a_host = a[1], *a_spool = a[2], *a_sel = a[3];
  snprintf(a_brokers, 900, "brokers=%s", tu_bootstrap());
  snprintf(a_host, 900, "host_id=%s", host);
  snprintf(a_spool, 900, "spool_dir=%s/%s-spool", EMBER_TEST_TMP, host);
  snprintf(a_sel, 900, "selector=worker=%s", workers);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        a_sel,
                        "continuous_hz=199",
                        "window=1s",
                        "scan_interval=1s",
                        "targets_refresh=1s",
                        "unwind=auto",
                        "metrics_listen=",
                        tu_command_key_arg(),
                        NULL};
  return tu_spawn(argv, NULL, log);
}

static pid_t target(const char *worker, const char *const *argv) {
  static char env[8][300];
  static int k;
  char *e = env[k++ % 8];
  snprintf(e, 300, "EMBER_WORKER=%s", worker);
  const char *envp[] = {e, NULL};
  return tu_spawn(argv, envp, NULL);
}

static void test_fleet_real_agents_equal_one_store(void **state) {
  (void)state;
  setup_names("agents");
  coll_t c[3] = {{.port = 0}}, rep = {.port = 0};
  start_group(c, &rep);

  /* Agent A profiles the workers TAG-a-*, agent B TAG-b-*: three each, a
   * light burner, a second one and Debian's sha256sum hashing zeros. */
  char sha[64] = "";
  if (!tu_which("sha256sum", sha, sizeof sha)) skip();
  static char w[6][160];
  const char *kinds[3] = {"burn", "burn2", "sha"};
  pid_t t[6];
  for (int i = 0; i < 6; i++) {
    /* Workers 0-3 each on their own partition of the 4 (the agent keys a
     * window by its worker; librdkafka's default partitioner takes the
     * key's CRC-32), so every member of the group stores some. */
    for (unsigned n = 0; n < 1000; n++) {
      snprintf(w[i], sizeof w[i], "%s-%c-%s%u", tag, i < 3 ? 'a' : 'b', kinds[i % 3], n);
      uLong crc = crc32(0L, (const Bytef *)w[i], (uInt)strlen(w[i]));
      if (i >= 4 || crc % 4 == (uLong)i) break;
    }
    const char *burn[] = {EMBER_TEST_PROGRAMS "/burn", "--light", "30", NULL};
    const char *hash[] = {sha, "/dev/zero", NULL};
    t[i] = target(w[i], i % 3 == 2 ? hash : burn);
  }
  char ha[160], hb[160], sa[160], sb[160], la[700], lb[700];
  snprintf(ha, sizeof ha, "%s-hA", tag);
  snprintf(hb, sizeof hb, "%s-hB", tag);
  snprintf(sa, sizeof sa, "%s-a-*", tag);
  snprintf(sb, sizeof sb, "%s-b-*", tag);
  snprintf(la, sizeof la, "%s/%s-agentA.log", EMBER_TEST_TMP, tag);
  snprintf(lb, sizeof lb, "%s/%s-agentB.log", EMBER_TEST_TMP, tag);
  int64_t from_s = ember_time_now_ns() / 1000000000 - 60;
  pid_t agents[2] = {start_agent(ha, sa, la), start_agent(hb, sb, lb)};
  /* Until the replica holds windows of all six (however busy the machine
   * is), and a little more. */
  for (int k = 0, have = 0; k < 900 && have < 6; k++) {
    have = 0;
    for (int i = 0; i < 6; i++)
      have += samples_of(&rep, w[i], true, from_s, from_s + 3600, NULL) > 0;
    if (have < 6) usleep(100000);
  }
  sleep(2);
  /* SIGTERM: each agent publishes the window in hand before it exits. */
  for (int i = 0; i < 2; i++) tu_stop_daemon(agents[i], i ? "agent B" : "agent A", i ? lb : la);
  for (int i = 0; i < 6; i++) tu_kill(t[i]);
  int64_t to_s = ember_time_now_ns() / 1000000000 + 60;

  /* The replica has stored everything once its totals stop moving. */
  int64_t ref[6] = {0}, prev = -1;
  for (int k = 0, still = 0; k < 300 && still < 20; k++) {
    int64_t sum = 0;
    for (int i = 0; i < 6; i++) sum += ref[i] = samples_of(&rep, w[i], true, from_s, to_s, NULL);
    double lag = tu_metric(rep.port, "ember_collector_consumer_lag");
    still = sum == prev && sum > 0 && lag == 0 ? still + 1 : 0;
    prev = sum;
    usleep(100000);
  }
  for (int i = 0; i < 6; i++)
    if (ref[i] <= 0) fail_msg("the replica stored no samples of %s (logs %s %s)", w[i], la, lb);
  char rw[2048], rh[1024], gw[2048], gh[1024];
  names_in(&rep, "workers", true, from_s, to_s, rw, sizeof rw);
  names_in(&rep, "hosts", true, from_s, to_s, rh, sizeof rh);
  assert_non_null(strstr(rh, ha));
  assert_non_null(strstr(rh, hb));
  int64_t own[3] = {0};
  for (int k = 0; k < 3; k++) {
    /* Each member answers exactly what the replica holds (waiting for its
     * own group to have read as far). */
    bool same = false;
    for (int n = 0; n < 200 && !same; n++) {
      same = true;
      for (int i = 0; i < 6 && same; i++) {
        bool partial = true;
        same = samples_of(&c[k], w[i], false, from_s, to_s, &partial) == ref[i] && !partial;
      }
      if (!same) usleep(100000);
    }
    if (!same) fail_msg("%s does not answer the replica's totals (log %s)", c[k].name, c[k].log);
    names_in(&c[k], "workers", false, from_s, to_s, gw, sizeof gw);
    names_in(&c[k], "hosts", false, from_s, to_s, gh, sizeof gh);
    assert_string_equal(gw, rw);
    assert_string_equal(gh, rh);
    for (int i = 0; i < 6; i++) own[k] += samples_of(&c[k], w[i], true, from_s, to_s, NULL);
  }
  int64_t all = 0;
  for (int i = 0; i < 6; i++) all += ref[i];
  print_message("two agents, six workers: the replica holds %lld samples (workers %s); the "
                "group's stores %lld + %lld + %lld; every member answers the same\n",
                (long long)all, rw, (long long)own[0], (long long)own[1], (long long)own[2]);
  assert_true(own[0] + own[1] + own[2] == all);
  /* The workers' partitions are spread over the group: every store holds some. */
  assert_true(own[0] > 0 && own[1] > 0 && own[2] > 0);
  stop(&rep);
  for (int k = 0; k < 3; k++) stop(&c[k]);
}

static void test_fleet_a_crash_before_the_commit_counts_once(void **state) {
  (void)state;
  setup_names("crash");
  worker_names();
  coll_t a = {.port = 0}, b = {.port = 0};
  /* A dies right after storing the first batch that holds a window of
   * worker 0, before committing it. Other tests write ember.profiles
   * meanwhile, so A's batches cannot be counted; worker 0's windows come
   * only after A stored (and so committed) everything before. */
  char fault[300];
  snprintf(fault, sizeof fault, "EMBER_TEST_FAULT=kill_after_store_of:%s", names[0]);
  const char *const env[] = {fault, NULL};
  start2(&a, "a", "g", env, "kafka.auto.offset.reset=latest");
  char cmd[900], out[64] = "";
  snprintf(cmd, sizeof cmd, "grep -c 'assigned [1-9]' %s", a.log);
  for (int t = 0; t < 300 && (tu_sh(cmd, out, sizeof out) != 0 || out[0] == '0'); t++)
    usleep(100000);
  sleep(2); /* its positions at the end, fetched */
  const int64_t before = produce_part(1, WORKERS, 1, 100);
  int64_t got = -1;
  for (int t = 0; t < 600 && got != before; t++) {
    got = run_total(&a, true, NULL);
    if (got != before) usleep(100000);
  }
  if (got != before)
    fail_msg("a stored %lld of %lld samples within 60 s (log %s)", (long long)got,
             (long long)before, a.log);
  /* Worker 0 first, then more of the others. */
  const int64_t after = produce_part(0, WORKERS, 101, 50);
  const int64_t want = before + after;
  int status = tu_wait(a.pid, 60000);
  assert_true(status != -1 && WIFSIGNALED(status));
  a.pid = 0;
  /* B takes every partition from the group's committed offsets: after
   * everything A committed, before the batch A stored last. */
  start(&b, "b", "g", NULL);
  /* B has read the whole stream once its total stops moving with no lag. */
  int64_t last = -2, lb0 = -1;
  for (int t = 0, still = 0; t < 600 && still < 20; t++) {
    lb0 = run_total(&b, true, NULL);
    double lag = tu_metric(b.port, "ember_collector_consumer_lag");
    still = lb0 == last && lb0 > 0 && lag == 0 ? still + 1 : 0;
    last = lb0;
    usleep(100000);
  }
  print_message("a died after storing worker 0's first windows; b then stored %lld of %lld "
                "samples (%lld produced after a's last commit)\n",
                (long long)lb0, (long long)want, (long long)after);
  assert_true(lb0 == after);
  /* A comes back with its store: its uncommitted copies are undone. */
  start(&a, "a", "g", NULL);
  /* A undoes at its first announcement after it has read B's: it must
   * start, join the group, read ember.collectors from its beginning (every
   * earlier test's collectors are there) and be assigned first, which under
   * ASan beside a loaded machine has taken more than 30 s. */
  double undone = 0;
  for (int t = 0; t < 1200 && undone <= 0; t++) {
    undone = tu_metric(a.port, "ember_collector_undone_windows_total");
    if (undone <= 0) usleep(100000);
  }
  if (undone <= 0) {
    char lines[4096] = "";
    snprintf(cmd, sizeof cmd, "grep -E 'undid|assigned|peer|announc|cannot' %s | tail -n 20",
             a.log);
    tu_sh(cmd, lines, sizeof lines);
    print_message("a undid nothing within 120 s; its log says:\n%s\n", lines);
  }
  int64_t fa = -1, fb = -1, la = 0, lb = 0;
  for (int t = 0; t < 200; t++) {
    fa = run_total(&a, false, NULL);
    fb = run_total(&b, false, NULL);
    la = run_total(&a, true, NULL);
    lb = run_total(&b, true, NULL);
    if (fa == want && fb == want && la + lb == want) break;
    usleep(100000);
  }
  print_message("a undid %.0f windows; a's store %lld + b's %lld = %lld of %lld; fleet answers "
                "%lld (a) and %lld (b)\n",
                undone, (long long)la, (long long)lb, (long long)(la + lb), (long long)want,
                (long long)fa, (long long)fb);
  assert_true(undone > 0);
  assert_true(la + lb == want);
  assert_true(fa == want && fb == want);
  stop(&a);
  stop(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fleet_any_collector_answers_for_all),
      cmocka_unit_test(test_fleet_real_agents_equal_one_store),
      cmocka_unit_test(test_fleet_a_crash_before_the_commit_counts_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
