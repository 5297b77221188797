/* The HTTP API: a real server on 127.0.0.1:0 over a real store holding
 * known windows, asked over real sockets. Contents of every endpoint, the
 * pprof output read by `go tool pprof`, parameter errors, the bearer token,
 * the response cap, allocation failures and stopping. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api.h"
#include "common/testutil.h"
#include "ember/codec.h"
#include "ember/store.h"

#define SEC    1000000000LL
#define MS     1000000LL
#define T0_S   1764460800LL /* 2025-11-30T00:00:00Z */
#define T0     (T0_S * SEC)
#define RANGE  "from=1764460800&to=1764464400" /* [T0, T0 + 1 h) */
#define NS_PER 9000000LL                       /* CPU ns per sample in the fixture */
#define PERIOD 10000000LL                      /* the sampling period: not NS_PER */

/* ------------------------------------------------------------ fixture -- */

typedef struct stack_spec {
  const char *stack; /* root first, ';'-separated */
  int64_t samples;
} stack_spec_t;

static ember_profile_t *window(const char *worker, const char *version, const char *host,
                               const char *actor, int64_t start, const stack_spec_t *stacks,
                               size_t n, bool with_ns) {
  static const ember_value_type_t both[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(both, with_ns ? 2 : 1, &p), 0);
  ember_labels_t l = {.worker = worker, .version = version, .host = host, .actor = actor};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, PERIOD);
  for (size_t i = 0; i < n; i++) {
    char buf[256], *names[16], *save = NULL;
    size_t depth = 0;
    snprintf(buf, sizeof buf, "%s", stacks[i].stack);
    for (char *t = strtok_r(buf, ";", &save); t && depth < 16; t = strtok_r(NULL, ";", &save))
      names[depth++] = t;
    ember_frame_t frames[16];
    for (size_t d = 0; d < depth; d++) /* leaf first */
      frames[d] = (ember_frame_t){.function = names[depth - 1 - d], .module = "/usr/bin/app"};
    int64_t v[2] = {stacks[i].samples, stacks[i].samples * NS_PER};
    assert_int_equal(ember_profile_add(p, frames, depth, v), 0);
  }
  return p;
}

static ember_profile_t *alloc_window(int64_t start) {
  static const ember_value_type_t types[] = {EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  ember_labels_t l = {.worker = "api", .version = "v1", .host = "h1"};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_frame_t frames[2] = {{.function = "malloc_heavy"}, {.function = "main"}};
  int64_t v[2] = {5, 4096};
  assert_int_equal(ember_profile_add(p, frames, 2, v), 0);
  return p;
}

/* The fixture, CPU ns (samples x 9 ms):
 *   api v1 h1      T0, T0+10s    main;serve;hot 30, main;serve;cold 10 (each window)
 *   api v2 h2      T0+20s        main;serve;hot 5, main;serve;newfn 20
 *   db 9.1 h1 compactor T0       main;compact 40
 *   db 9.1 h1 (no actor) T0+10s  main;query 7
 *   legacy (samples only, 10 ms period) T0  main;old 3
 *   api v1 h1 alloc profile at T0: main;malloc_heavy 5 objects, 4096 bytes */
#define V1_NS     (80 * NS_PER)
#define V2_NS     (25 * NS_PER)
#define LEGACY_NS (3 * PERIOD)

typedef struct fixture {
  char path[512];
  ember_store_t *store;
  ember_metrics_t *metrics;
  ember__api_t *api;
  unsigned port;
} fixture_t;

static fixture_t fx;

static void write_fixture(ember_store_t *s) {
  static const stack_spec_t v1[] = {{"main;serve;hot", 30}, {"main;serve;cold", 10}};
  static const stack_spec_t v2[] = {{"main;serve;hot", 5}, {"main;serve;newfn", 20}};
  static const stack_spec_t compact[] = {{"main;compact", 40}};
  static const stack_spec_t query[] = {{"main;query", 7}};
  static const stack_spec_t old[] = {{"main;old", 3}};
  ember_profile_t *p[7] = {
      window("api", "v1", "h1", NULL, T0, v1, 2, true),
      window("api", "v1", "h1", NULL, T0 + 10 * SEC, v1, 2, true),
      window("api", "v2", "h2", NULL, T0 + 20 * SEC, v2, 2, true),
      window("db", "9.1", "h1", "compactor", T0, compact, 1, true),
      window("db", "9.1", "h1", NULL, T0 + 10 * SEC, query, 1, true),
      window("legacy", NULL, NULL, NULL, T0, old, 1, false),
      alloc_window(T0),
  };
  ember_store_write_result_t res;
  assert_int_equal(ember_store_write(s, p, 7, &res), 0);
  assert_int_equal(res.written, 7);
  for (size_t i = 0; i < 7; i++) ember_profile_free(p[i]);
}

static ember__api_t *start_api(const char *token, size_t max_response, ember_metrics_t *m) {
  ember__api_opts_t o = {.listen = "127.0.0.1:0",
                         .token = token,
                         .store = fx.store,
                         .metrics = m,
                         .threads = 2,
                         .max_response = max_response};
  ember__api_t *api = NULL;
  char err[256] = "";
  int rc = ember__api_start(&o, &api, err, sizeof err);
  if (rc != 0) fail_msg("api start: %d %s", rc, err);
  assert_true(ember__api_port(api) != 0);
  return api;
}

static int setup(void **state) {
  (void)state;
  mkdir(EMBER_TEST_TMP, 0755);
  tu_store_path(fx.path, sizeof fx.path, "api", "fixture");
  tu_store_remove(fx.path);
  ember_store_opts_t so = {.map_size = (size_t)64 << 20, .no_sync = true};
  char err[256];
  if (ember_store_open(fx.path, &so, &fx.store, err, sizeof err) != 0) return -1;
  write_fixture(fx.store);
  if (ember_metrics_new(&fx.metrics) != 0) return -1;
  fx.api = start_api(NULL, 0, fx.metrics);
  fx.port = ember__api_port(fx.api);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ember__api_stop(fx.api);
  ember_metrics_free(fx.metrics);
  ember_store_close(fx.store);
  tu_store_remove(fx.path);
  return 0;
}

/* --------------------------------------------------------------- HTTP -- */

typedef struct resp {
  int status;
  char *head; /* status line and headers */
  char *body;
  size_t len;
} resp_t;

static void resp_free(resp_t *r) {
  free(r->head);
  free(r->body);
  *r = (resp_t){0};
}

/* One HTTP/1.0 request with extra header lines (each ending in \r\n).
 * Uses plain malloc, not Ember's allocator, so that the allocation
 * failures a test injects hit only the server. */
static resp_t http(unsigned port, const char *method, const char *path, const char *headers) {
  resp_t out = {.status = -1};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  char req[2048];
  /* Host: 127.0.0.1 unless the test gives its own. */
  bool host = headers != NULL && strstr(headers, "Host:") != NULL;
  int n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\n%s%s\r\n", method, path,
                   host ? "" : "Host: 127.0.0.1\r\n", headers ? headers : "");
  assert_true(n > 0 && (size_t)n < sizeof req);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || write(fd, req, (size_t)n) != n) {
    close(fd);
    return out;
  }
  size_t len = 0, cap = 65536;
  char *data = malloc(cap + 1);
  assert_non_null(data);
  ssize_t got;
  while ((got = read(fd, data + len, cap - len)) > 0) {
    len += (size_t)got;
    if (len == cap) {
      cap *= 2;
      data = realloc(data, cap + 1);
      assert_non_null(data);
    }
  }
  close(fd);
  data[len] = '\0';
  char *sep = strstr(data, "\r\n\r\n");
  if (sscanf(data, "HTTP/1.%*d %d", &out.status) != 1 || sep == NULL) {
    free(data);
    out.status = -1;
    return out;
  }
  size_t hlen = (size_t)(sep - data);
  out.head = strndup(data, hlen);
  out.len = len - hlen - 4;
  out.body = malloc(out.len + 1);
  assert_true(out.head != NULL && out.body != NULL);
  memcpy(out.body, sep + 4, out.len);
  out.body[out.len] = '\0';
  free(data);
  return out;
}

static resp_t get(const char *path) { return http(fx.port, "GET", path, NULL); }

/* GET expecting 200 and JSON; returns the parsed document. */
static json_t *get_json(const char *path) {
  resp_t r = get(path);
  if (r.status != 200) fail_msg("GET %s: %d %s", path, r.status, r.body ? r.body : "");
  assert_non_null(strstr(r.head, "Content-Type: application/json"));
  assert_non_null(strstr(r.head, "Cache-Control: no-store"));
  json_error_t err;
  json_t *j = json_loadb(r.body, r.len, 0, &err);
  if (j == NULL) fail_msg("GET %s: bad JSON (%s): %s", path, err.text, r.body);
  resp_free(&r);
  return j;
}

static json_int_t ival(const json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("no integer \"%s\"", k);
  return json_integer_value(v);
}

static const char *sval(const json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_string(v)) fail_msg("no string \"%s\"", k);
  return json_string_value(v);
}

/* The child of a tree node named `name`. */
static json_t *child(const json_t *node, const char *name) {
  json_t *c;
  size_t i;
  json_array_foreach(json_object_get(node, "children"), i, c) {
    if (strcmp(sval(c, "name"), name) == 0) return c;
  }
  fail_msg("no child %s", name);
  return NULL;
}

static void assert_strings(const json_t *arr, const char *const *want, size_t n) {
  assert_int_equal(json_array_size(arr), n);
  for (size_t i = 0; i < n; i++)
    assert_string_equal(json_string_value(json_array_get(arr, i)), want[i]);
}

/* -------------------------------------------------------------- tests -- */

static void test_api_healthz_and_metrics(void **state) {
  (void)state;
  resp_t r = get("/healthz");
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body, "ok\n");
  resp_free(&r);
  r = get("/metrics");
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "# TYPE ember_api_requests_total counter"));
  assert_non_null(strstr(r.body, "ember_api_responses_2xx_total"));
  assert_non_null(strstr(r.body, "ember_api_request_seconds_total"));
  resp_free(&r);
  r = http(fx.port, "HEAD", "/healthz", NULL);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 0);
  resp_free(&r);
}

static void test_api_workers(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/workers?" RANGE);
  assert_int_equal(ival(j, "from_ms"), T0_S * 1000);
  assert_int_equal(ival(j, "to_ms"), (T0_S + 3600) * 1000);
  json_t *w = json_object_get(j, "workers");
  assert_int_equal(json_array_size(w), 3);
  json_t *api = json_array_get(w, 0), *db = json_array_get(w, 1), *legacy = json_array_get(w, 2);
  assert_string_equal(sval(api, "worker"), "api");
  assert_string_equal(sval(db, "worker"), "db");
  assert_string_equal(sval(legacy, "worker"), "legacy");
  static const char *const v12[] = {"v1", "v2"}, *const h12[] = {"h1", "h2"};
  static const char *const v91[] = {"9.1"}, *const h1[] = {"h1"}, *const comp[] = {"compactor"};
  assert_strings(json_object_get(api, "versions"), v12, 2);
  assert_strings(json_object_get(api, "hosts"), h12, 2);
  assert_strings(json_object_get(api, "actors"), NULL, 0);
  assert_int_equal(ival(api, "series"), 2);
  assert_int_equal(ival(api, "last_ms"), (T0_S + 20) * 1000);
  assert_strings(json_object_get(db, "versions"), v91, 1);
  assert_strings(json_object_get(db, "hosts"), h1, 1);
  assert_strings(json_object_get(db, "actors"), comp, 1);
  assert_int_equal(ival(db, "series"), 2);
  assert_strings(json_object_get(legacy, "versions"), NULL, 0);
  json_decref(j);

  /* A range with nothing in it. */
  j = get_json("/api/v1/workers?from=1000&to=2000");
  assert_int_equal(json_array_size(json_object_get(j, "workers")), 0);
  json_decref(j);
}

static void test_api_label_values(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/versions?worker=api&" RANGE);
  json_t *v = json_object_get(j, "values");
  assert_int_equal(json_array_size(v), 2);
  assert_string_equal(sval(json_array_get(v, 0), "name"), "v1");
  assert_int_equal(ival(json_array_get(v, 0), "series"), 1);
  assert_int_equal(ival(json_array_get(v, 0), "last_ms"), (T0_S + 10) * 1000);
  assert_string_equal(sval(json_array_get(v, 1), "name"), "v2");
  json_decref(j);

  j = get_json("/api/v1/hosts?" RANGE);
  v = json_object_get(j, "values");
  assert_int_equal(json_array_size(v), 2);
  assert_string_equal(sval(json_array_get(v, 0), "name"), "h1");
  assert_int_equal(ival(json_array_get(v, 0), "series"), 3); /* api v1, db x2 */
  json_decref(j);

  j = get_json("/api/v1/actors?" RANGE);
  v = json_object_get(j, "values");
  assert_int_equal(json_array_size(v), 1);
  assert_string_equal(sval(json_array_get(v, 0), "name"), "compactor");
  json_decref(j);
}

/* Without a fleet (the API alone), the collectors are an empty list;
 * tests/unit/test_collector.c lists a real one. */
static void test_api_collectors_without_a_fleet(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/collectors");
  assert_true(json_is_null(json_object_get(j, "self")));
  assert_int_equal(json_array_size(json_object_get(j, "collectors")), 0);
  json_decref(j);
}

static void test_api_series(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/series?worker=db&" RANGE);
  json_t *s = json_object_get(j, "series");
  assert_int_equal(json_array_size(s), 2);
  json_t *a = json_array_get(s, 0), *b = json_array_get(s, 1);
  assert_string_equal(sval(a, "actor"), "compactor");
  assert_true(json_is_null(json_object_get(b, "actor")));
  assert_string_equal(sval(b, "host"), "h1");
  assert_int_equal(ival(b, "first_ms"), (T0_S + 10) * 1000);
  assert_true(ival(a, "id") != ival(b, "id"));
  json_decref(j);
}

static void test_api_timeline(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/timeline?from=1764460800&to=1764460860&step=10s");
  assert_int_equal(ival(j, "step_ms"), 10000);
  json_t *t = json_object_get(j, "total_cpu_ns");
  assert_int_equal(json_array_size(t), 6);
  /* CPU_NS where written, samples x period for the samples-only worker. */
  assert_int_equal(json_integer_value(json_array_get(t, 0)), 40 * NS_PER + 40 * NS_PER + LEGACY_NS);
  assert_int_equal(json_integer_value(json_array_get(t, 1)), 40 * NS_PER + 7 * NS_PER);
  assert_int_equal(json_integer_value(json_array_get(t, 2)), V2_NS);
  assert_int_equal(json_integer_value(json_array_get(t, 3)), 0);
  json_t *s = json_object_get(j, "series");
  assert_int_equal(json_array_size(s), 5);
  assert_true(json_is_false(json_object_get(j, "truncated")));
  /* Most CPU first: api v1 (720 ms), db compactor (360), api v2 (225). */
  assert_string_equal(sval(json_array_get(s, 0), "version"), "v1");
  assert_string_equal(sval(json_array_get(s, 1), "actor"), "compactor");
  /* The sum over series is the total, bucket by bucket: the actor-less db
   * series holds only its own CPU, not the compactor's. */
  for (size_t b = 0; b < 6; b++) {
    json_int_t sum = 0;
    json_t *e;
    size_t i;
    json_array_foreach(s, i, e) sum +=
        json_integer_value(json_array_get(json_object_get(e, "cpu_ns"), b));
    assert_int_equal(sum, json_integer_value(json_array_get(t, b)));
  }
  json_decref(j);

  j = get_json("/api/v1/timeline?worker=db&actor=compactor&from=1764460800&to=1764460860"
               "&step=30s&limit=1");
  assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "total_cpu_ns"), 0)),
                   40 * NS_PER);
  json_decref(j);

  j = get_json("/api/v1/timeline?" RANGE "&limit=2");
  assert_int_equal(ival(j, "step_ms"), 10000); /* 1 h / 500 rounded up to 10 s */
  assert_int_equal(json_array_size(json_object_get(j, "total_cpu_ns")), 360);
  assert_int_equal(json_array_size(json_object_get(j, "series")), 2);
  assert_true(json_is_true(json_object_get(j, "truncated")));
  json_decref(j);
}

static void test_api_profile_tree(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/profile?worker=api&version=v1&" RANGE);
  assert_string_equal(sval(j, "type"), "cpu");
  assert_string_equal(sval(j, "unit"), "nanoseconds");
  assert_int_equal(ival(j, "total"), V1_NS);
  assert_true(json_is_false(json_object_get(j, "truncated")));
  json_t *serve = child(child(json_object_get(j, "root"), "main"), "serve");
  assert_int_equal(ival(child(serve, "hot"), "total"), 60 * NS_PER);
  assert_int_equal(ival(child(serve, "cold"), "total"), 20 * NS_PER);
  json_decref(j);

  j = get_json("/api/v1/profile?worker=api&type=samples&" RANGE);
  assert_string_equal(sval(j, "type"), "samples");
  assert_int_equal(ival(j, "total"), 80 + 25);
  json_decref(j);

  /* Only samples stored: cpu is samples x period. */
  j = get_json("/api/v1/profile?worker=legacy&" RANGE);
  assert_string_equal(sval(j, "type"), "cpu");
  assert_int_equal(ival(j, "total"), LEGACY_NS);
  json_decref(j);

  j = get_json("/api/v1/profile?type=alloc_bytes&" RANGE);
  assert_string_equal(sval(j, "unit"), "bytes");
  assert_int_equal(ival(j, "total"), 4096);
  json_decref(j);

  /* The cap folds the smallest subtrees and says so. */
  j = get_json("/api/v1/profile?worker=api&max_nodes=3&" RANGE);
  assert_true(json_is_true(json_object_get(j, "truncated")));
  assert_int_equal(ival(j, "nodes"), 3);
  assert_int_equal(ival(j, "total"), V1_NS + V2_NS);
  json_decref(j);
}

static void test_api_profile_top_folded_speedscope(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/profile?worker=api&format=top&" RANGE);
  assert_string_equal(sval(j, "type"), "cpu");
  assert_int_equal(ival(j, "total"), V1_NS + V2_NS);
  json_t *f = json_object_get(j, "functions");
  /* By self: hot 65, then cold and newfn tied at 20 (by name), then 0s. */
  assert_string_equal(sval(json_array_get(f, 0), "name"), "hot");
  assert_int_equal(ival(json_array_get(f, 0), "self"), 65 * NS_PER);
  assert_string_equal(sval(json_array_get(f, 1), "name"), "cold");
  assert_string_equal(sval(json_array_get(f, 2), "name"), "newfn");
  json_decref(j);
  j = get_json("/api/v1/profile?type=alloc_bytes&format=top&" RANGE);
  assert_string_equal(sval(j, "type"), "alloc_space");
  assert_string_equal(sval(j, "unit"), "bytes");
  assert_int_equal(ival(j, "total"), 4096);
  assert_string_equal(sval(json_array_get(json_object_get(j, "functions"), 0), "name"),
                      "malloc_heavy");
  json_decref(j);
  /* Several versions: their union; one given twice counts once. */
  j = get_json("/api/v1/profile?worker=api&version=v1&version=v2&format=top&" RANGE);
  assert_int_equal(ival(j, "total"), V1_NS + V2_NS);
  json_decref(j);
  j = get_json("/api/v1/profile?worker=api&version=v2&version=v1&version=v2&format=top&" RANGE);
  assert_int_equal(ival(j, "total"), V1_NS + V2_NS);
  json_decref(j);
  j = get_json("/api/v1/profile?worker=api&version=v1&version=v1&format=top&" RANGE);
  assert_int_equal(ival(j, "total"), V1_NS);
  json_decref(j);
  j = get_json("/api/v1/profile?worker=api&version=v2&version=nope&format=top&" RANGE);
  assert_int_equal(ival(j, "total"), V2_NS);
  json_decref(j);

  /* By total: main and serve hold everything, then hot (35 of 85). */
  j = get_json("/api/v1/profile?worker=api&format=top&sort=total&" RANGE);
  f = json_object_get(j, "functions");
  assert_string_equal(sval(json_array_get(f, 0), "name"), "main");
  assert_int_equal(ival(json_array_get(f, 0), "total"), V1_NS + V2_NS);
  assert_string_equal(sval(json_array_get(f, 1), "name"), "serve");
  assert_string_equal(sval(json_array_get(f, 2), "name"), "hot");
  json_decref(j);
  j = get_json("/api/v1/profile?worker=api&format=top&limit=1&" RANGE);
  assert_int_equal(json_array_size(json_object_get(j, "functions")), 1);
  json_decref(j);

  resp_t r = get("/api/v1/profile?worker=api&version=v1&format=folded&" RANGE);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.head, "Content-Disposition: inline; filename=\"ember-cpu.folded\""));
  assert_string_equal(r.body, "main;serve;cold 180000000\nmain;serve;hot 540000000\n");
  resp_free(&r);

  j = get_json("/api/v1/profile?worker=db&format=speedscope&" RANGE);
  json_t *prof = json_array_get(json_object_get(j, "profiles"), 0);
  assert_int_equal(ival(prof, "endValue"), 47 * NS_PER);
  json_decref(j);
}

static void test_api_profile_pprof_go_tool_reads_it(void **state) {
  (void)state;
  resp_t r = get("/api/v1/profile?worker=api&format=pprof&" RANGE);
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.head, "Content-Type: application/octet-stream"));
  assert_non_null(strstr(r.head, "attachment; filename=\"ember-cpu.pb.gz\""));
  assert_true(r.len > 2 && (unsigned char)r.body[0] == 0x1f && (unsigned char)r.body[1] == 0x8b);
  char path[1024];
  snprintf(path, sizeof path, "%s/api_%ld.pb.gz", EMBER_TEST_TMP, (long)getpid());
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(r.body, 1, r.len, f), r.len);
  assert_int_equal(fclose(f), 0);
  resp_free(&r);

  char *out = tu_go_pprof_top(path, "cpu");
  char flat[64];
  assert_non_null(strstr(out, "Type: cpu"));
  assert_non_null(strstr(out, "of 945ms total")); /* (80 + 25) x 9 ms */
  assert_string_equal(tu_pprof_flat(out, "hot", flat, sizeof flat), "585ms");
  assert_string_equal(tu_pprof_flat(out, "newfn", flat, sizeof flat), "180ms");
  assert_string_equal(tu_pprof_flat(out, "cold", flat, sizeof flat), "180ms");
  ember_free(out);
  unlink(path);
}

static void test_api_diff(void **state) {
  (void)state;
  json_t *j = get_json("/api/v1/diff?worker=api&version=v1&vs.version=v2&" RANGE);
  assert_string_equal(sval(j, "type"), "cpu");
  assert_int_equal(ival(json_object_get(j, "base"), "total"), V1_NS);
  assert_int_equal(ival(json_object_get(j, "vs"), "total"), V2_NS);
  assert_true(json_is_false(json_object_get(j, "truncated")));
  json_t *root = json_object_get(j, "root");
  assert_int_equal(ival(root, "base"), V1_NS);
  assert_int_equal(ival(root, "vs"), V2_NS);
  json_t *serve = child(child(root, "main"), "serve");
  assert_int_equal(ival(child(serve, "hot"), "base"), 60 * NS_PER);
  assert_int_equal(ival(child(serve, "hot"), "vs"), 5 * NS_PER);
  assert_int_equal(ival(child(serve, "newfn"), "base"), 0);
  assert_int_equal(ival(child(serve, "newfn"), "vs"), 20 * NS_PER);
  assert_int_equal(ival(child(serve, "cold"), "vs"), 0);
  json_decref(j);

  /* Two time ranges of one selection: the first 10 s against the next. */
  j = get_json("/api/v1/diff?worker=api&from=1764460800&to=1764460810&vs.from=1764460810"
               "&vs.to=1764460820");
  assert_int_equal(ival(json_object_get(j, "base"), "total"), 40 * NS_PER);
  assert_int_equal(ival(json_object_get(j, "vs"), "total"), 40 * NS_PER);
  json_decref(j);

  /* vs.version=* is any version, though the base names one: v1 against
   * all of api (v1 + v2). */
  j = get_json("/api/v1/diff?worker=api&version=v1&vs.version=*&" RANGE);
  assert_int_equal(ival(json_object_get(j, "base"), "total"), V1_NS);
  assert_int_equal(ival(json_object_get(j, "vs"), "total"), V1_NS + V2_NS);
  json_decref(j);

  j = get_json("/api/v1/diff?worker=api&version=v1&vs.version=v2&max_nodes=2&" RANGE);
  assert_true(json_is_true(json_object_get(j, "truncated")));
  assert_int_equal(ival(j, "nodes"), 2);
  json_decref(j);
}

static const struct {
  const char *path;
  int status;
  const char *needle; /* in the error sentence */
} bad[] = {
    {"/api/v1/profile?wokrer=api", 400, "unknown parameter \"wokrer\""},
    {"/api/v1/profile?format=top&sort=name", 400, "\"sort\": \"name\" is not an order"},
    {"/api/v1/profile?worker=a&worker=b", 400, "\"worker\" is given more than once"},
    {"/api/v1/series?version=a&version=b", 400, "\"version\" is given more than once"},
    {"/api/v1/profile?version=a&version=", 400, "\"version\" needs a value"},
    {"/api/v1/profile?worker=", 400, "\"worker\" needs a value"},
    {"/api/v1/series?host", 400, "\"host\" needs a value"},
    {"/api/v1/profile?from=yesterday", 400, "parameter \"from\": \"yesterday\" is not a time"},
    {"/api/v1/profile?to=noon", 400, "RFC 3339"},
    {"/api/v1/profile?from=99999999999999999999", 400, "\"from\": \"99999999999999999999\" is out"},
    {"/api/v1/profile?from=now&to=-1h", 400, "\"from\" must be before \"to\""},
    {"/api/v1/profile?from=1764460800&to=1764460800", 400, "\"from\" must be before \"to\""},
    {"/api/v1/profile?type=wall", 400, "parameter \"type\": \"wall\" is not a profile type"},
    {"/api/v1/profile?format=svg", 400, "parameter \"format\": \"svg\""},
    {"/api/v1/profile?max_nodes=-1", 400, "parameter \"max_nodes\": \"-1\" is not a whole number"},
    {"/api/v1/profile?max_nodes=1000001", 400, "from 0 to 1000000"},
    {"/api/v1/profile?limit=0", 400, "parameter \"limit\""},
    {"/api/v1/timeline?step=1s", 400, "parameter \"step\": \"1s\""},
    {"/api/v1/timeline?step=soon", 400, "parameter \"step\""},
    {"/api/v1/timeline?from=0&to=now&step=10s", 400, "raise step or narrow from/to"},
    {"/api/v1/timeline?limit=1001", 400, "parameter \"limit\""},
    {"/api/v1/workers?worker=api", 400,
     "unknown parameter \"worker\": this endpoint takes from, to"},
    {"/api/v1/diff?vs.from=later", 400, "parameter \"vs.from\""},
    {"/api/v1/diff?vs.from=now&vs.to=-1h", 400, "\"vs.from\" must be before \"vs.to\""},
    {"/api/v1/diff?vs.wrker=x", 400, "unknown parameter \"vs.wrker\""},
    {"/api/v1/diff?format=pprof", 400, "unknown parameter \"format\""},
    {"/metrics?x=1", 400, "unknown parameter \"x\""},
    {"/api/v1/collectors?from=1", 400, "unknown parameter \"from\""},
    {"/api/v1/profile?a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9&j=10&k=11&l=12&m=13&n=14&o=15&p=16&q=17"
     "&r=18&s=19&t=20&u=21&v=22&w=23&x=24&y=25&z=26&aa=27&ab=28&ac=29&ad=30&ae=31&af=32&ag=33",
     400, "too many parameters"},
    {"/api/v1/profile?raw=cpu_ns", 400, "\"raw\" is for peer collectors: it needs local=1"},
    {"/api/v1/profile?local=1&raw=wall", 400, "\"raw\": \"wall\" is not a value type"},
    {"/api/v1/profile?local=1&raw=cpu_ns&format=tree", 400, "format=ember only"},
    {"/api/v1/profile?local=1&raw=cpu_ns&version=a&version=b", 400, "one version at most"},
    {"/api/v1/nope", 404, "no such path: /api/v1/nope"},
    {"/api/v2/workers", 404, "no such path"},
    {"/api/v1", 404, "no such path"},
};

static void test_api_bad_requests(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    resp_t r = get(bad[i].path);
    json_error_t err;
    json_t *j = r.body ? json_loadb(r.body, r.len, 0, &err) : NULL;
    const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
    if (r.status != bad[i].status || msg == NULL || strstr(msg, bad[i].needle) == NULL)
      fail_msg("GET %s: want %d with \"%s\", got %d %s", bad[i].path, bad[i].status, bad[i].needle,
               r.status, r.body ? r.body : "(no body)");
    assert_non_null(strstr(r.head, "Content-Type: application/json"));
    json_decref(j);
    resp_free(&r);
  }
  resp_t r = http(fx.port, "POST", "/api/v1/workers", "Content-Length: 0\r\n");
  assert_int_equal(r.status, 405);
  assert_non_null(strstr(r.head, "Allow: GET, HEAD"));
  assert_non_null(strstr(r.body, "\"error\""));
  resp_free(&r);
  r = http(fx.port, "DELETE", "/healthz", NULL);
  assert_int_equal(r.status, 405);
  resp_free(&r);
  /* Still alive, and the 4xx answers were counted. */
  r = get("/healthz");
  assert_int_equal(r.status, 200);
  resp_free(&r);
  r = get("/metrics");
  const char *line = strstr(r.body, "\nember_api_responses_4xx_total ");
  assert_non_null(line);
  double n4xx = 0;
  assert_int_equal(sscanf(line, "\nember_api_responses_4xx_total %lf", &n4xx), 1);
  assert_true(n4xx >= 28);
  resp_free(&r);
}

/* What a peer collector asks (fleetq.h): this store's own merge in one
 * value type, in the wire encoding, decoded back to the same totals. */
static void test_api_raw_answers_peers(void **state) {
  (void)state;
  static const struct {
    const char *query;
    int64_t total;
  } cases[] = {
      {"raw=cpu_ns&worker=api&version=v1", V1_NS},
      {"raw=cpu_ns&format=ember&worker=api&version=v2", V2_NS},
      {"raw=cpu_samples&worker=api", 80 + 25},
      {"raw=alloc_bytes", 4096},
      {"raw=alloc_objects&worker=db", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/profile?local=1&%s&" RANGE, cases[i].query);
    resp_t r = get(path);
    if (r.status != 200) fail_msg("GET %s: %d %s", path, r.status, r.body ? r.body : "");
    assert_non_null(strstr(r.head, "Content-Type: application/x-ember-profile"));
    ember_profile_t *p = NULL;
    char err[256];
    if (ember_codec_decode(r.body, r.len, NULL, &p, err, sizeof err) != 0)
      fail_msg("GET %s: the answer does not decode: %s", path, err);
    assert_int_equal(ember_profile_ntypes(p), 1);
    assert_int_equal(ember_profile_total(p, 0), cases[i].total);
    ember_profile_free(p);
    resp_free(&r);
  }
}

static void test_api_token(void **state) {
  (void)state;
  ember__api_t *api = start_api("s3cret", 0, NULL);
  unsigned port = ember__api_port(api);
  resp_t r = http(port, "GET", "/api/v1/workers", NULL);
  assert_int_equal(r.status, 401);
  assert_non_null(strstr(r.head, "WWW-Authenticate: Bearer"));
  assert_non_null(strstr(r.body, "bearer token"));
  resp_free(&r);
  static const char *const wrong[] = {
      "Authorization: Bearer s3cre\r\n", "Authorization: Bearer s3cret2\r\n",
      "Authorization: Bearer S3cret\r\n", "Authorization: Basic czNjcmV0\r\n",
      "Authorization: s3cret\r\n"};
  for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
    r = http(port, "GET", "/api/v1/workers", wrong[i]);
    assert_int_equal(r.status, 401);
    resp_free(&r);
  }
  r = http(port, "GET", "/metrics", NULL);
  assert_int_equal(r.status, 401);
  resp_free(&r);
  r = http(port, "GET", "/api/v1/workers?" RANGE, "Authorization: Bearer s3cret\r\n");
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.body, "\"worker\":\"api\""));
  resp_free(&r);
  r = http(port, "GET", "/healthz", NULL);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  /* The dashboard's files carry no data: served without the token (the
   * page asks for it and sends it with its API calls). */
  r = http(port, "GET", "/", NULL);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  r = http(port, "GET", "/ui/app.js", NULL);
  assert_int_equal(r.status, 200);
  resp_free(&r);
  ember__api_stop(api);
}

/* The dashboard's files are compiled in and served at / and /ui/NAME, with
 * an ETag the browser revalidates (304), a strict CSP, and no token. */
static void test_api_dashboard(void **state) {
  (void)state;
  resp_t r = get("/");
  assert_int_equal(r.status, 200);
  assert_non_null(strstr(r.head, "Content-Type: text/html; charset=utf-8"));
  assert_non_null(strstr(r.head, "Content-Security-Policy: default-src 'self'"));
  assert_non_null(strstr(r.head, "X-Content-Type-Options: nosniff"));
  assert_non_null(strstr(r.body, "<title>Ember</title>"));
  assert_non_null(strstr(r.body, "/ui/app.js"));
  const char *e = strstr(r.head, "ETag: \"");
  assert_non_null(e);
  char etag[64], hdr[128];
  assert_int_equal(sscanf(e, "ETag: %63s", etag), 1);
  resp_free(&r);

  /* Every file the page names is there, with its type. */
  static const struct {
    const char *path, *ctype, *needle;
  } files[] = {{"/ui/app.js", "text/javascript", "import"},
               {"/ui/flame.js", "text/javascript", "export class FlameGraph"},
               {"/ui/ui.js", "text/javascript", "export function h("},
               {"/ui/alerts.js", "text/javascript", "export"},
               {"/ui/style.css", "text/css", "{"}};
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    r = get(files[i].path);
    if (r.status != 200) fail_msg("GET %s: %d", files[i].path, r.status);
    assert_non_null(strstr(r.head, files[i].ctype));
    assert_non_null(strstr(r.body, files[i].needle));
    assert_true(r.len > 100);
    resp_free(&r);
  }
  /* Revalidation: the same ETag gets 304 without a body; another, 200. */
  snprintf(hdr, sizeof hdr, "If-None-Match: %s\r\n", etag);
  r = http(fx.port, "GET", "/", hdr);
  assert_int_equal(r.status, 304);
  assert_int_equal(r.len, 0);
  assert_non_null(strstr(r.head, etag));
  resp_free(&r);
  r = http(fx.port, "GET", "/", "If-None-Match: \"stale\"\r\n");
  assert_int_equal(r.status, 200);
  resp_free(&r);
  r = http(fx.port, "HEAD", "/ui/app.js", NULL);
  assert_int_equal(r.status, 200);
  assert_int_equal(r.len, 0);
  resp_free(&r);
  /* Unknown files and escapes are 404s; the files take no POST. */
  static const char *const missing[] = {"/ui/", "/ui/nope.js", "/ui/../api.c", "/ui/app.js/x"};
  for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
    r = get(missing[i]);
    if (r.status != 404) fail_msg("GET %s: %d, want 404", missing[i], r.status);
    assert_non_null(strstr(r.body, "no such dashboard file"));
    resp_free(&r);
  }
  r = http(fx.port, "POST", "/ui/app.js", NULL);
  assert_int_equal(r.status, 405);
  resp_free(&r);
}

static void test_api_response_cap(void **state) {
  (void)state;
  ember__api_t *api = start_api(NULL, 200, NULL);
  resp_t r = http(ember__api_port(api), "GET", "/api/v1/profile?" RANGE, NULL);
  assert_int_equal(r.status, 413);
  assert_non_null(strstr(r.body, "larger than 200 bytes"));
  resp_free(&r);
  r = http(ember__api_port(api), "GET", "/api/v1/workers?from=1000&to=2000", NULL);
  assert_int_equal(r.status, 200); /* small answers still fit */
  resp_free(&r);
  ember__api_stop(api);
}

/* Fail the Nth allocation of a request for every N: a 500 with a JSON
 * error, never a crash or a leak, and the server answers afterwards. Only
 * the server thread allocates through Ember while a request runs, so the
 * single-threaded failure hook is safe here. */
static void test_api_alloc_failures(void **state) {
  (void)state;
  static const char *const paths[] = {
      "/api/v1/profile?worker=api&max_nodes=3&" RANGE,
      "/api/v1/diff?worker=api&version=v1&vs.version=v2&" RANGE,
      "/api/v1/timeline?from=1764460800&to=1764460860",
      "/api/v1/workers?" RANGE,
      "/api/v1/profile?worker=legacy&format=top&" RANGE,
  };
  for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
    size_t n500 = 0;
    for (long n = 0; n < 100000; n++) {
      ember_alloc_fail_after(n);
      resp_t r = get(paths[p]);
      long used = ember_alloc_fail_reset();
      if (r.status == 500) {
        n500++;
        if (strstr(r.body, "{\"error\":\"internal error") == NULL) fail_msg("500: %s", r.body);
      } else if (r.status != 200) {
        fail_msg("%s with allocation %ld failing: %d %s", paths[p], n, r.status, r.body);
      }
      int status = r.status;
      resp_free(&r);
      if (status == 200 && used <= n) break; /* no allocation failed */
    }
    assert_true(n500 > 0);
  }
  resp_t r = get("/healthz");
  assert_int_equal(r.status, 200);
  resp_free(&r);
}

/* An idle open connection does not hold up stop, and a stopped server
 * refuses connections. */
static void test_api_stop_with_idle_connection(void **state) {
  (void)state;
  ember__api_t *api = start_api(NULL, 0, NULL);
  unsigned port = ember__api_port(api);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  int64_t t0 = ember_time_mono_ns();
  ember__api_stop(api);
  assert_true(ember_time_mono_ns() - t0 < 5 * SEC);
  close(fd);
  resp_t r = http(port, "GET", "/healthz", NULL);
  assert_int_equal(r.status, -1);
  resp_free(&r);
}

/* Requests racing with stop: each one gets a whole answer (200 JSON that
 * parses, or 503 while stopping) or no connection at all, never a cut-off
 * answer or a crash. */
typedef struct racer {
  unsigned port;
  size_t ok, refused, unavailable, bad;
} racer_t;

static void *race_requests(void *arg) {
  racer_t *rc = arg;
  for (int i = 0; i < 100000; i++) {
    resp_t r = http(rc->port, "GET", "/api/v1/profile?" RANGE, NULL);
    if (r.status == -1) {
      rc->refused++;
      resp_free(&r);
      if (rc->refused > 3) break;
      continue;
    }
    json_t *j = json_loadb(r.body, r.len, 0, NULL);
    if (r.status == 200 && j != NULL && json_object_get(j, "root") != NULL) {
      rc->ok++;
    } else if (r.status == 503 && j != NULL) {
      rc->unavailable++;
    } else {
      rc->bad++;
    }
    json_decref(j);
    resp_free(&r);
  }
  return NULL;
}

static void test_api_stop_while_busy(void **state) {
  (void)state;
  ember__api_t *api = start_api(NULL, 0, NULL);
  racer_t rc[3];
  pthread_t t[3];
  for (int i = 0; i < 3; i++) {
    rc[i] = (racer_t){.port = ember__api_port(api)};
    assert_int_equal(pthread_create(&t[i], NULL, race_requests, &rc[i]), 0);
  }
  struct timespec ts = {0, 100 * 1000 * 1000};
  nanosleep(&ts, NULL);
  ember__api_stop(api);
  size_t ok = 0;
  for (int i = 0; i < 3; i++) {
    assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(rc[i].bad, 0);
    ok += rc[i].ok;
  }
  assert_true(ok > 0);
}

static void test_api_start_errors(void **state) {
  (void)state;
  char err[256];
  ember__api_t *api = NULL;
  ember__api_opts_t o = {.listen = "nonsense", .store = fx.store};
  assert_int_equal(ember__api_start(&o, &api, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "HOST:PORT"));
  o.listen = "example.com:80";
  assert_int_equal(ember__api_start(&o, &api, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "[::1]:PORT"));
  static const char *const bad6[] = {"[::1:80", "[]:80", "[::g]:80", "::1:80"};
  for (size_t i = 0; i < sizeof bad6 / sizeof bad6[0]; i++) {
    o.listen = bad6[i];
    if (ember__api_start(&o, &api, err, sizeof err) != EMBER_ECONFIG)
      fail_msg("api.listen %s was taken", bad6[i]);
  }
  char busy[64];
  snprintf(busy, sizeof busy, "127.0.0.1:%u", fx.port);
  o.listen = busy;
  assert_true(ember__api_start(&o, &api, err, sizeof err) < 0);
  assert_non_null(strstr(err, busy));
  o.store = NULL;
  assert_int_equal(ember__api_start(&o, &api, err, sizeof err), -EINVAL);
  assert_null(api);
  assert_string_equal(ember__api_config_keys[0], "api.listen");
  assert_string_equal(ember__api_config_keys[5], "api.request_timeout");
  assert_string_equal(ember__api_config_keys[6], "api.allowed_hosts");
  assert_null(ember__api_config_keys[7]);
}

/* api.listen in brackets serves IPv6: [::1] on the loopback, [::] on every
 * address (IPv4 too, where the system allows dual stack). */
static int get6(unsigned port, const char *path) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
  sa.sin6_addr = in6addr_loopback;
  char req[256], resp[512] = "";
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: [::1]\r\n\r\n", path);
  int status = -1;
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && write(fd, req, (size_t)n) == n) {
    ssize_t got = read(fd, resp, sizeof resp - 1);
    if (got > 0) resp[got] = '\0';
    if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) status = -1;
  }
  close(fd);
  return status;
}

static void test_api_ipv6(void **state) {
  (void)state;
  char err[256];
  static const char *const addrs[] = {"[::1]:0", "[::]:0"};
  for (size_t i = 0; i < 2; i++) {
    ember__api_t *api = NULL;
    ember__api_opts_t o = {.listen = addrs[i], .store = fx.store};
    if (ember__api_start(&o, &api, err, sizeof err) != 0) fail_msg("%s: %s", addrs[i], err);
    unsigned port = ember__api_port(api);
    assert_true(port > 0);
    assert_int_equal(get6(port, "/healthz"), 200);
    assert_int_equal(get6(port, "/api/v1/nothing"), 404);
    ember__api_stop(api);
  }
}

/* The error sentence of a JSON error answer ("" when it is not one). */
static const char *error_of(const resp_t *r, char *out, size_t size) {
  json_error_t e;
  json_t *j = r->body ? json_loadb(r->body, r->len, 0, &e) : NULL;
  const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
  snprintf(out, size, "%s", msg ? msg : "");
  json_decref(j);
  if (strstr(r->head, "Content-Type: application/json") == NULL) out[0] = '\0';
  return out;
}

/* DNS rebinding: a page of rebind.example, whose name its owner pointed at
 * 127.0.0.1, reads the API with Host: rebind.example. Refused with 421;
 * addresses, localhost and listed names are served. The old server
 * answered any Host. */
static void test_api_refuses_foreign_host(void **state) {
  (void)state;
  char hdr[128], err[512];
  static const char *const foreign[] = {"rebind.example", "rebind.example:7272",
                                        "ember.example.com", "localhost.rebind.example"};
  for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
    snprintf(hdr, sizeof hdr, "Host: %s\r\n", foreign[i]);
    static const char *const paths[] = {"/api/v1/workers", "/", "/healthz"};
    for (size_t k = 0; k < 3; k++) {
      resp_t r = http(fx.port, "GET", paths[k], hdr);
      if (r.status != 421) fail_msg("Host %s %s: %d", foreign[i], paths[k], r.status);
      assert_non_null(strstr(error_of(&r, err, sizeof err), "api.allowed_hosts"));
      resp_free(&r);
    }
  }
  char host[64];
  const char *ok[] = {"localhost", host, "127.0.0.1", "[::1]:7272", "LocalHost:1", "app.localhost"};
  snprintf(host, sizeof host, "127.0.0.1:%u", fx.port);
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    snprintf(hdr, sizeof hdr, "Host: %s\r\n", ok[i]);
    resp_t r = http(fx.port, "GET", "/", hdr);
    if (r.status != 200) fail_msg("Host %s: %d", ok[i], r.status);
    resp_free(&r);
  }
  resp_t r = http(fx.port, "GET", "/healthz", "Host: a b\r\n");
  assert_int_equal(r.status, 400);
  resp_free(&r);
  /* A listed name is served, on any port. */
  ember__api_opts_t o = {.listen = "127.0.0.1:0",
                         .store = fx.store,
                         .allowed_hosts = "ember.example.com, other.example"};
  ember__api_t *api = NULL;
  assert_int_equal(ember__api_start(&o, &api, err, sizeof err), 0);
  r = http(ember__api_port(api), "GET", "/api/v1/workers", "Host: Ember.Example.com:80\r\n");
  assert_int_equal(r.status, 200);
  resp_free(&r);
  r = http(ember__api_port(api), "GET", "/", "Host: rebind.example\r\n");
  assert_int_equal(r.status, 421);
  resp_free(&r);
  ember__api_stop(api);
  o.allowed_hosts = "ok.example, bad host:x";
  assert_int_equal(ember__api_start(&o, &api, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "api.allowed_hosts"));
}

/* Cross-site request forgery: with no token (the default) a page of any
 * site could make the visitor's browser POST a session. Refused with 403
 * when the Origin is not the server's own, or Sec-Fetch-Site says
 * cross-site; the dashboard's own POSTs (same origin) and clients that are
 * not browsers (no Origin) still reach the handler, here 503 as the
 * fixture has no sessions. The old server served them all. */
static void test_api_refuses_cross_origin_post(void **state) {
  (void)state;
  char hdr[256], err[512];
  const char *cross[] = {"Origin: http://evil.example\r\n", "Origin: null\r\n",
                         "Origin: http://127.0.0.1:1\r\n", "Origin: https://127.0.0.1\r\n",
                         "Sec-Fetch-Site: cross-site\r\n"};
  for (size_t i = 0; i < sizeof cross / sizeof cross[0]; i++) {
    /* A form's POST: text/plain needs no CORS preflight. */
    char full[512];
    snprintf(full, sizeof full,
             "Host: 127.0.0.1:%u\r\n%sContent-Type: text/plain\r\nContent-Length: 0\r\n", fx.port,
             cross[i]);
    resp_t r = http(fx.port, "POST", "/api/v1/sessions", full);
    if (r.status != 403) fail_msg("%s: %d %s", cross[i], r.status, r.body ? r.body : "");
    assert_non_null(strstr(error_of(&r, err, sizeof err), "refused"));
    resp_free(&r);
    r = http(fx.port, "DELETE", "/api/v1/sessions/abc", full);
    assert_int_equal(r.status, 403);
    resp_free(&r);
  }
  const char *same[] = {"", "Sec-Fetch-Site: same-origin\r\n", "Sec-Fetch-Site: none\r\n"};
  for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
    snprintf(hdr, sizeof hdr, "Host: 127.0.0.1:%u\r\n%sContent-Length: 0\r\n", fx.port, same[i]);
    resp_t r = http(fx.port, "POST", "/api/v1/sessions", hdr);
    if (r.status != 503) fail_msg("%s: %d %s", same[i], r.status, r.body ? r.body : "");
    resp_free(&r);
  }
  snprintf(hdr, sizeof hdr,
           "Host: 127.0.0.1:%u\r\nOrigin: http://127.0.0.1:%u\r\nSec-Fetch-Site: "
           "same-origin\r\nContent-Length: 0\r\n",
           fx.port, fx.port);
  resp_t r = http(fx.port, "POST", "/api/v1/sessions", hdr);
  assert_int_equal(r.status, 503);
  resp_free(&r);
  /* GETs from another origin are the browser's business (no CORS): the
   * page cannot read them. */
  r = http(fx.port, "GET", "/api/v1/workers", "Origin: http://evil.example\r\n");
  assert_int_equal(r.status, 200);
  resp_free(&r);
  r = get("/metrics");
  assert_non_null(strstr(r.body, "\nember_api_refused_origin_total "));
  assert_null(strstr(r.body, "\nember_api_refused_origin_total 0\n"));
  assert_null(strstr(r.body, "\nember_api_refused_host_total 0\n"));
  resp_free(&r);
}

/* 405 says which methods the path takes. */
static void test_api_allow_headers(void **state) {
  (void)state;
  static const struct {
    const char *method, *path, *allow;
  } cases[] = {
      {"DELETE", "/api/v1/workers", "GET, HEAD"},
      {"POST", "/api/v1/profile", "GET, HEAD"},
      {"PUT", "/", "GET, HEAD"},
      {"PATCH", "/healthz", "GET, HEAD"},
      {"DELETE", "/api/v1/sessions", "GET, HEAD, POST"},
      {"PUT", "/api/v1/sessions/", "GET, HEAD, POST"},
      {"DELETE", "/api/v1/sessions/abc/cancel", "POST"},
      {"PUT", "/api/v1/sessions/abc", "GET, HEAD"},
      {"DELETE", "/api/v1/alerts", "GET, HEAD"},
      {"PUT", "/api/v1/rules", "GET, HEAD, POST"},
      {"POST", "/api/v1/rules/cpu-hot", "DELETE"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    resp_t r = http(fx.port, cases[i].method, cases[i].path, "Content-Length: 0\r\n");
    char want[64], err[512];
    snprintf(want, sizeof want, "\r\nAllow: %s\r\n", cases[i].allow);
    char head[2048];
    snprintf(head, sizeof head, "%s\r\n", r.head);
    if (r.status != 405 || strstr(head, want) == NULL || error_of(&r, err, sizeof err)[0] == '\0')
      fail_msg("%s %s: %d, want Allow: %s in\n%s", cases[i].method, cases[i].path, r.status,
               cases[i].allow, r.head);
    resp_free(&r);
  }
}

/* 300 clients from 127.0.0.2-31 (as an attacker with several addresses)
 * each start a request and send a byte now and then: a client from
 * 127.0.0.1 is still answered within a second. The old server (256
 * connections, an idle timeout every byte restarts) left it waiting for
 * as long as the slow clients liked. test_http.c has the deadline. */
static void test_api_slow_clients_do_not_lock_others_out(void **state) {
  (void)state;
  struct rlimit rl;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < 2048 && rl.rlim_max > rl.rlim_cur) {
    rl.rlim_cur = rl.rlim_max < 2048 ? rl.rlim_max : 2048;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < 800) skip();
  enum { NSLOW = 300 };
  static int fds[NSLOW];
  static const char start[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < NSLOW; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fds[i] >= 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 2 + (uint32_t)(i / 10));
    assert_int_equal(bind(fds[i], (struct sockaddr *)&src, sizeof src), 0);
    /* Blocking connects complete in the kernel's backlog even when the
     * server does not take them. */
    assert_int_equal(connect(fds[i], (struct sockaddr *)&dst, sizeof dst), 0);
    assert_int_equal(send(fds[i], start, sizeof start - 1, MSG_NOSIGNAL),
                     (ssize_t)sizeof start - 1);
  }
  /* A byte each, twice, 100 ms apart: they are alive and slow. */
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < NSLOW; i++) (void)send(fds[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  int64_t t0 = ember_time_mono_ns();
  assert_int_equal(connect(fd, (struct sockaddr *)&dst, sizeof dst), 0);
  static const char req[] = "GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  assert_int_equal(send(fd, req, sizeof req - 1, MSG_NOSIGNAL), (ssize_t)sizeof req - 1);
  char resp[512] = "";
  size_t got = 0;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  while (got < sizeof resp - 1 && poll(&p, 1, 1000) == 1) {
    ssize_t n = recv(fd, resp + got, sizeof resp - 1 - got, 0);
    if (n <= 0) break;
    got += (size_t)n;
  }
  double took = (double)(ember_time_mono_ns() - t0) / 1e9;
  close(fd);
  for (int i = 0; i < NSLOW; i++) close(fds[i]);
  print_message("answered in %.3f s: %.40s\n", took, resp);
  assert_non_null(strstr(resp, "200 OK"));
  assert_true(took < 1.0);
}

/* Last: everything above left the shared server healthy. */
static void test_api_survives(void **state) {
  (void)state;
  resp_t r = get("/healthz");
  assert_int_equal(r.status, 200);
  resp_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_api_healthz_and_metrics),
      cmocka_unit_test(test_api_workers),
      cmocka_unit_test(test_api_label_values),
      cmocka_unit_test(test_api_series),
      cmocka_unit_test(test_api_collectors_without_a_fleet),
      cmocka_unit_test(test_api_timeline),
      cmocka_unit_test(test_api_profile_tree),
      cmocka_unit_test(test_api_profile_top_folded_speedscope),
      cmocka_unit_test(test_api_profile_pprof_go_tool_reads_it),
      cmocka_unit_test(test_api_diff),
      cmocka_unit_test(test_api_bad_requests),
      cmocka_unit_test(test_api_raw_answers_peers),
      cmocka_unit_test(test_api_token),
      cmocka_unit_test(test_api_dashboard),
      cmocka_unit_test(test_api_response_cap),
      cmocka_unit_test(test_api_alloc_failures),
      cmocka_unit_test(test_api_stop_with_idle_connection),
      cmocka_unit_test(test_api_stop_while_busy),
      cmocka_unit_test(test_api_start_errors),
      cmocka_unit_test(test_api_ipv6),
      cmocka_unit_test(test_api_refuses_foreign_host),
      cmocka_unit_test(test_api_refuses_cross_origin_post),
      cmocka_unit_test(test_api_allow_headers),
      cmocka_unit_test(test_api_slow_clients_do_not_lock_others_out),
      cmocka_unit_test(test_api_survives),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
