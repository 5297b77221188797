/* Source maps uploaded to the collector (collector/srcmaps.h, issue 16
 * item 2), on the embedded Kafka with a real collector in this process:
 *
 *  - two versions of one bundle (V8 names their functions alike) with a
 *    map each: every export names each version's functions as its own map
 *    does, with the file resolved beside the script and V8's name kept as
 *    the generated one; a worker without maps keeps V8's names;
 *  - hostile uploads (not JSON, mappings out of range, too large, no
 *    script) are refused with their reason and counted in /metrics, and
 *    nothing of them is kept;
 *  - list and delete; a deleted map maps nothing; a map of no version
 *    stands in for the versions without their own;
 *  - the maps survive a restart of the collector on a new broker (they are
 *    in its store, not only on the topic);
 *  - `ember sourcemaps upload`, `list` and `delete` against it;
 *  - maps that do not fit sourcemaps.memory together are evicted and
 *    decoded again as they are read, and still name every frame. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "collector.h"
#include "common/testutil.h"
#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/wire.h"

#define BASE_NS (1764410400LL * 1000000000) /* 2025-11-29T10:00:00Z */
#define WINDOW  (10LL * 1000000000)

/* The bundle's one line: "function a(){for(;;);}function b(){}"; V8 names
 * a at the '(' of column 11, b at column 33. Each map puts a in
 * ../src/alpha.ts and b in ../src/beta.ts, under its own names. */
#define V8_A     TU_V8_A
#define MAPPINGS "\"mappings\":\"AACA,SAASA,CAAS,YCDlB,SAASC,CAAQ\"}"
static const char map_v1[] = "{\"version\":3,\"file\":\"app.js\",\"sources\":[\"../src/alpha.ts\","
                             "\"../src/beta.ts\"],\"names\":[\"alphaWork\",\"betaWork\"]," MAPPINGS;
static const char map_v2[] =
    "{\"version\":3,\"file\":\"app.js\",\"sources\":[\"../src/alpha.ts\","
    "\"../src/beta.ts\"],\"names\":[\"gammaWork\",\"deltaWork\"]," MAPPINGS;

static char dir[512];

static ember_config_t *config(const char *max_bytes) {
  ember_config_t *cfg = NULL;
  char err[512] = "";
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", "embedded"), 0);
  assert_int_equal(ember_config_set(cfg, "data_dir", dir), 0);
  assert_int_equal(ember_config_set(cfg, "api.listen", "127.0.0.1:0"), 0);
  assert_int_equal(ember_config_set(cfg, "store.sync", "false"), 0);
  assert_int_equal(ember_config_set(cfg, "batch.linger", "50ms"), 0);
  assert_int_equal(ember_config_set(cfg, "retention", "0"), 0);
  assert_int_equal(ember_config_set(cfg, "sourcemaps.max_bytes", max_bytes), 0);
  assert_int_equal(ember_config_check(cfg, ember__collector_config_keys, err, sizeof err), 0);
  return cfg;
}

/* A window of (worker, version): `na` samples of a and `nb` of b, each
 * under main, as an agent without the maps sends them. */
static void produce(const char *brokers, const char *worker, const char *version, uint64_t seq,
                    int64_t na, int64_t nb) {
  char agent[64];
  snprintf(agent, sizeof agent, "agent-%s-%s", worker, version);
  tu_produce_js(brokers, worker, version, "h1", agent, seq, BASE_NS, na, nb);
}

static bool wait_metric(unsigned port, const char *name, double want) {
  for (int t = 0; t < 300; t++) {
    if (tu_metric(port, name) >= want) return true;
    usleep(100000);
  }
  return false;
}

static int upload(unsigned port, const char *query, const char *map, char *out, size_t size) {
  char path[512];
  snprintf(path, sizeof path, "/api/v1/sourcemaps?%s", query);
  return tu_http(port, "POST", path, "Content-Type: application/json\r\n", map, out, size);
}

/* The tree of `worker` (over the test's window). */
static json_t *tree(unsigned port, const char *worker) {
  char path[256];
  static char body[1 << 20];
  snprintf(path, sizeof path,
           "/api/v1/profile?worker=%s&from=%lld&to=%lld&type=samples&format=tree", worker,
           (long long)(BASE_NS / 1000000000), (long long)((BASE_NS + WINDOW) / 1000000000));
  assert_int_equal(tu_http_get(port, path, body, sizeof body), 200);
  json_error_t e;
  json_t *doc = json_loads(body, 0, &e);
  if (doc == NULL) fail_msg("tree of %s: %s", worker, e.text);
  return doc;
}

/* The node named `name` under the root's "main", or NULL. */
static json_t *leaf(json_t *doc, const char *name) {
  json_t *m = json_array_get(json_object_get(json_object_get(doc, "root"), "children"), 0);
  size_t i;
  json_t *c;
  json_array_foreach(json_object_get(m, "children"), i, c) {
    if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0) return c;
  }
  return NULL;
}

static void check_leaf(json_t *doc, const char *name, int64_t total, const char *file,
                       const char *generated) {
  json_t *n = leaf(doc, name);
  if (n == NULL) fail_msg("no node %s", name);
  assert_int_equal(json_integer_value(json_object_get(n, "total")), total);
  if (file != NULL) {
    assert_string_equal(json_string_value(json_object_get(n, "file")), file);
    assert_string_equal(json_string_value(json_object_get(n, "generated")), generated);
    assert_string_equal(json_string_value(json_object_get(n, "module")), "/srv/app/dist/app.js");
  } else {
    assert_null(json_object_get(n, "generated"));
  }
}

static void test_srcmaps_upload_map_list_delete_restart(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s/srcmaps-%d", EMBER_TEST_TMP, (int)getpid());
  char err[512] = "", out[8192];
  ember_config_t *cfg = config("4096");
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  unsigned port = ember__collector_api_port(c);

  produce(ember_kafka_brokers(k), "web", "1", 1, 30, 10);
  produce(ember_kafka_brokers(k), "web", "2", 1, 6, 2);
  produce(ember_kafka_brokers(k), "api", "1", 1, 5, 5);
  assert_true(wait_metric(port, "ember_collector_profiles_stored_total", 3));

  /* Hostile and wrong uploads first: each refused with its reason. */
  assert_int_equal(
      upload(port, "worker=web&version=1&script=app.js", "{\"version\":3,\"sou", out, sizeof out),
      400);
  assert_non_null(strstr(out, "not_json"));
  char range[512];
  snprintf(range, sizeof range,
           "{\"version\":3,\"sources\":[\"a.ts\"],\"names\":[],\"mappings\":\"ACAA\"}");
  assert_int_equal(upload(port, "worker=web&version=1&script=app.js", range, out, sizeof out), 400);
  assert_non_null(strstr(out, "out_of_range"));
  char *big = malloc(8192);
  memset(big, ' ', 8191);
  big[8191] = '\0';
  memcpy(big, map_v1, strlen(map_v1));
  assert_int_equal(upload(port, "worker=web&version=1&script=app.js", big, out, sizeof out), 413);
  free(big);
  assert_int_equal(upload(port, "worker=web&version=1", map_v1, out, sizeof out), 400);
  assert_non_null(strstr(out, "script"));
  assert_true(tu_metric(port, "ember_collector_sourcemap_refused_total{reason=\"not_json\"}") == 1);
  assert_true(tu_metric(port, "ember_collector_sourcemap_refused_total{reason=\"out_of_range\"}") ==
              1);
  assert_int_equal(tu_http_get(port, "/api/v1/sourcemaps", out, sizeof out), 200);
  assert_non_null(strstr(out, "\"sourcemaps\":[]"));

  /* Nothing mapped yet: V8's names. */
  json_t *doc = tree(port, "web");
  check_leaf(doc, V8_A, 36, NULL, NULL);
  json_decref(doc);

  assert_int_equal(upload(port, "worker=web&version=1&script=app.js", map_v1, out, sizeof out),
                   201);
  assert_non_null(strstr(out, "\"segments\":6"));
  /* A tail with its directory: the longer match. */
  assert_int_equal(upload(port, "worker=web&version=2&script=dist/app.js", map_v2, out, sizeof out),
                   201);
  assert_true(tu_metric(port, "ember_collector_sourcemap_uploads_total") == 2);

  doc = tree(port, "web");
  check_leaf(doc, "alphaWork", 30, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
  check_leaf(doc, "betaWork", 10, "/srv/app/src/beta.ts", "b /srv/app/dist/app.js:1:33");
  check_leaf(doc, "gammaWork", 6, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
  check_leaf(doc, "deltaWork", 2, "/srv/app/src/beta.ts", "b /srv/app/dist/app.js:1:33");
  assert_null(leaf(doc, V8_A));
  json_int_t line = json_integer_value(json_object_get(leaf(doc, "alphaWork"), "line"));
  assert_int_equal(line, 2);
  json_decref(doc);
  /* A worker without maps keeps V8's names, in the same store. */
  doc = tree(port, "api");
  check_leaf(doc, V8_A, 5, NULL, NULL);
  json_decref(doc);
  /* folded names the authors' functions too. */
  char path[256];
  static char folded[1 << 16];
  snprintf(path, sizeof path,
           "/api/v1/profile?worker=web&from=%lld&to=%lld&type=samples&format=folded",
           (long long)(BASE_NS / 1000000000), (long long)((BASE_NS + WINDOW) / 1000000000));
  assert_int_equal(tu_http_get(port, path, folded, sizeof folded), 200);
  assert_non_null(strstr(folded, "main;alphaWork 30"));
  assert_null(strstr(folded, "JS:*"));

  assert_int_equal(tu_http_get(port, "/api/v1/sourcemaps?worker=web", out, sizeof out), 200);
  json_t *ldoc = json_loads(out, 0, NULL);
  assert_int_equal(json_array_size(json_object_get(ldoc, "sourcemaps")), 2);
  json_decref(ldoc);

  /* Delete version 2's: its frames are V8's again. */
  assert_int_equal(tu_http(port, "DELETE",
                           "/api/v1/sourcemaps?worker=web&version=2&script=dist/app.js", NULL, NULL,
                           out, sizeof out),
                   200);
  assert_int_equal(tu_http(port, "DELETE",
                           "/api/v1/sourcemaps?worker=web&version=2&script=dist/app.js", NULL, NULL,
                           out, sizeof out),
                   404);
  doc = tree(port, "web");
  check_leaf(doc, "alphaWork", 30, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
  check_leaf(doc, V8_A, 6, NULL, NULL);
  json_decref(doc);

  /* A map of no version stands in for every version without its own:
   * version 2 takes it, version 1 keeps its own. */
  assert_int_equal(upload(port, "worker=web&script=app.js", map_v2, out, sizeof out), 201);
  doc = tree(port, "web");
  check_leaf(doc, "alphaWork", 30, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
  check_leaf(doc, "gammaWork", 6, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
  json_decref(doc);
  assert_int_equal(tu_http(port, "DELETE", "/api/v1/sourcemaps?worker=web&script=app.js", NULL,
                           NULL, out, sizeof out),
                   200);

  /* The CLI: upload a file (the script from the map's "file"), list,
   * delete; an empty list is exit 3. */
  char mapfile[600], cmd[2048];
  snprintf(mapfile, sizeof mapfile, "%s/cli.js.map", dir);
  FILE *mf = fopen(mapfile, "w");
  assert_non_null(mf);
  fputs(map_v2, mf);
  fclose(mf);
  snprintf(cmd, sizeof cmd,
           EMBER_BINARY_DIR "/cli/ember sourcemaps upload --server http://127.0.0.1:%u --worker "
                            "cli --version 9 %s 2>&1",
           port, mapfile);
  assert_int_equal(tu_sh(cmd, out, sizeof out), 0);
  assert_non_null(strstr(out, "uploaded the source map of app.js for cli 9"));
  snprintf(cmd, sizeof cmd,
           EMBER_BINARY_DIR "/cli/ember sourcemaps --server http://127.0.0.1:%u --worker cli 2>&1",
           port);
  assert_int_equal(tu_sh(cmd, out, sizeof out), 0);
  assert_non_null(strstr(out, "WORKER"));
  assert_non_null(strstr(out, "app.js"));
  snprintf(cmd, sizeof cmd,
           EMBER_BINARY_DIR "/cli/ember sourcemaps delete --server http://127.0.0.1:%u --worker "
                            "cli --version 9 --script app.js 2>&1",
           port);
  assert_int_equal(tu_sh(cmd, out, sizeof out), 0);
  snprintf(cmd, sizeof cmd,
           EMBER_BINARY_DIR "/cli/ember sourcemaps --server http://127.0.0.1:%u --worker cli "
                            ">/dev/null 2>&1",
           port);
  assert_int_equal(tu_sh(cmd, out, sizeof out), 3);

  /* A restart on a new (empty) broker: the store still has version 1's. */
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
  cfg = config("4096");
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("restart: %s", err);
  port = ember__collector_api_port(c);
  assert_int_equal(tu_http_get(port, "/api/v1/sourcemaps", out, sizeof out), 200);
  assert_non_null(strstr(out, "\"script\":\"app.js\""));
  assert_null(strstr(out, "dist/app.js"));
  doc = tree(port, "web");
  check_leaf(doc, "alphaWork", 30, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
  json_decref(doc);
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

/* A map of `names` (two) whose mappings go on, on a second generated
 * line, with `filler` segments that change nothing on the first: ~24
 * bytes each once decoded. */
static char *big_map(const char *names, size_t filler) {
  static const char head[] = "{\"version\":3,\"file\":\"app.js\",\"sources\":[\"../src/"
                             "alpha.ts\",\"../src/beta.ts\"],\"names\":[";
  static const char mid[] = "],\"mappings\":\"AACA,SAASA,CAAS,YCDlB,SAASC,CAAQ;AAAA";
  size_t cap = sizeof head + strlen(names) + sizeof mid + 5 * filler + 8;
  char *m = malloc(cap);
  assert_non_null(m);
  char *at = m + snprintf(m, cap, "%s%s%s", head, names, mid);
  for (size_t i = 0; i < filler; i++, at += 5) memcpy(at, ",CAAA", 5);
  memcpy(at, "\"}", 3);
  return m;
}

/* Two decoded maps that do not fit sourcemaps.memory together: each read
 * evicts the other and decodes its own again (outside the maps' lock),
 * and every read still names both versions' functions. */
static void test_srcmaps_evicted_maps_decode_again(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s/srcmaps-evict-%d", EMBER_TEST_TMP, (int)getpid());
  char err[512] = "", out[8192];
  ember_config_t *cfg = config("4194304");
  assert_int_equal(ember_config_set(cfg, "sourcemaps.memory", "1048576"), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  ember__collector_t *c = NULL;
  if (ember__collector_start(cfg, k, &c, err, sizeof err) != 0) fail_msg("start: %s", err);
  unsigned port = ember__collector_api_port(c);
  produce(ember_kafka_brokers(k), "web", "1", 1, 30, 10);
  produce(ember_kafka_brokers(k), "web", "2", 1, 6, 2);
  assert_true(wait_metric(port, "ember_collector_profiles_stored_total", 2));

  enum { FILLER = 50000 }; /* ~1.2 MB decoded, more than the bound alone */
  char *m1 = big_map("\"alphaWork\",\"betaWork\"", FILLER);
  char *m2 = big_map("\"gammaWork\",\"deltaWork\"", FILLER);
  assert_int_equal(upload(port, "worker=web&version=1&script=app.js", m1, out, sizeof out), 201);
  assert_int_equal(upload(port, "worker=web&version=2&script=app.js", m2, out, sizeof out), 201);
  free(m1);
  free(m2);
  for (int round = 0; round < 3; round++) {
    json_t *doc = tree(port, "web");
    check_leaf(doc, "alphaWork", 30, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
    check_leaf(doc, "gammaWork", 6, "/srv/app/src/alpha.ts", "a /srv/app/dist/app.js:1:11");
    check_leaf(doc, "deltaWork", 2, "/srv/app/src/beta.ts", "b /srv/app/dist/app.js:1:33");
    json_decref(doc);
  }
  double evicted = tu_metric(port, "ember_collector_sourcemap_evictions_total");
  double decoded = tu_metric(port, "ember_collector_sourcemap_decoded_total");
  print_message("3 reads of two maps over 1 MiB each: %.0f decoded, %.0f evicted\n", decoded,
                evicted);
  assert_true(decoded >= 6 && evicted >= 5);
  assert_true(tu_metric(port, "ember_collector_sourcemap_bytes") <= 2.0 * 1048576);
  ember__collector_stop(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_srcmaps_upload_map_list_delete_restart),
      cmocka_unit_test(test_srcmaps_evicted_maps_decode_again),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
