/* The in-use heap endpoints over a real server and store holding synthetic
 * heap windows: /api/v1/heap/growth puts the leaking function first with
 * its exact rate, /api/v1/heap/timeline gives each instant's heap (never a
 * sum over windows), grouped by version; type=inuse_bytes in the profile
 * endpoint reads the latest state; bad parameters answer 400 with a
 * sentence. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api.h"
#include "fleetq.h"
#include "common/testutil.h"
#include "ember/codec.h"
#include "ember/store.h"

#define SEC  1000000000LL
#define MIB  (1LL << 20)
#define T0_S 1764460800LL /* 2025-11-30T00:00:00Z */
#define T0   (T0_S * SEC)

static struct {
  char path[512];
  ember_store_t *store;
  ember__api_t *api;
  unsigned port;
} fx;

static const ember_value_type_t heap_types[] = {EMBER_VT_INUSE_OBJECTS, EMBER_VT_INUSE_BYTES};

/* Add a stack (leaf first, ';'-separated) holding `bytes` (objects:
 * bytes / 1024). */
static void add(ember_profile_t *p, const char *stack, int64_t bytes) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", stack);
  ember_frame_t frames[16];
  size_t n = 0;
  for (char *t = buf; t != NULL && n < 16;) {
    char *next = strchr(t, ';');
    if (next != NULL) *next++ = '\0';
    frames[n++] = (ember_frame_t){
        .function = t, .module = strcmp(t, "malloc") == 0 ? "libember_alloc.so" : "/usr/bin/leaky"};
    t = next;
  }
  int64_t v[] = {bytes / 1024, bytes};
  assert_int_equal(ember_profile_add(p, frames, n, v), 0);
}

#define ROOT "main;__libc_start_call_main;_start"

/* Worker "leaky" v1 on h1, a window every 10 s from T0 for 10 minutes: the
 * window starting at t seconds holds t MiB in leak_step (1 MiB/s), 4 MiB
 * in steady_work, 64 MiB from startup (init_tables), and 5 MiB in
 * short_lived until t = 200. Version v2 on h2 holds 1 MiB steadily. */
static ember_profile_t *leaky_window(int t, const char *version, const char *host) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(heap_types, 2, &p), 0);
  ember_labels_t l = {.worker = "leaky", .version = version, .host = host};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, T0 + t * SEC, T0 + (t + 10) * SEC), 0);
  ember_profile_set_period(p, 524288);
  if (strcmp(version, "v2") == 0) {
    add(p, "malloc;steady_work;worker_loop;" ROOT, MIB);
    return p;
  }
  if (t > 0) add(p, "malloc;leak_step;worker_loop;" ROOT, (int64_t)t * MIB);
  add(p, "malloc;steady_work;worker_loop;" ROOT, 4 * MIB);
  add(p, "malloc;init_tables;" ROOT, 64 * MIB);
  if (t < 200) add(p, "malloc;short_lived;worker_loop;" ROOT, 5 * MIB);
  return p;
}

static int setup(void **state) {
  (void)state;
  mkdir(EMBER_TEST_TMP, 0755);
  snprintf(fx.path, sizeof fx.path, "%s/api_heap_%ld.lmdb", EMBER_TEST_TMP, (long)getpid());
  unlink(fx.path);
  ember_store_opts_t so = {.map_size = (size_t)64 << 20, .no_sync = true};
  char err[256];
  if (ember_store_open(fx.path, &so, &fx.store, err, sizeof err) != 0) return -1;
  ember_profile_t *p[120];
  size_t n = 0;
  for (int t = 0; t < 600; t += 10) {
    p[n++] = leaky_window(t, "v1", "h1");
    p[n++] = leaky_window(t, "v2", "h2");
  }
  ember_store_write_result_t res;
  if (ember_store_write(fx.store, p, n, &res) != 0 || res.written != n) return -1;
  for (size_t i = 0; i < n; i++) ember_profile_free(p[i]);
  ember__api_opts_t o = {.listen = "127.0.0.1:0", .store = fx.store, .threads = 2};
  if (ember__api_start(&o, &fx.api, err, sizeof err) != 0) return -1;
  fx.port = ember__api_port(fx.api);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  ember__api_stop(fx.api);
  ember_store_close(fx.store);
  char lock[600];
  snprintf(lock, sizeof lock, "%s-lock", fx.path);
  unlink(fx.path);
  unlink(lock);
  return 0;
}

static char body[1 << 20];

static json_t *get_json(const char *path) {
  int st = tu_http_get(fx.port, path, body, sizeof body);
  if (st != 200) fail_msg("GET %s: %d %s", path, st, body);
  json_error_t err;
  json_t *j = json_loads(body, 0, &err);
  if (j == NULL) fail_msg("GET %s: bad JSON (%s): %s", path, err.text, body);
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

static const json_t *find_fn(const json_t *fns, const char *name) {
  size_t i;
  const json_t *f;
  json_array_foreach(fns, i, f) if (strcmp(sval(f, "function"), name) == 0) return f;
  return NULL;
}

#define Q(from, to) "from=" #from "&to=" #to

static void test_api_heap_growth_ranks_the_leak_first(void **state) {
  (void)state;
  /* T1 = T0 + 100 s (the window at 90 s: 90 MiB leaked), T2 = T0 + 400 s
   * (the window at 390 s): 300 MiB in 300 s. */
  json_t *doc = get_json("/api/v1/heap/growth?worker=leaky&version=v1&from=1764460900&to="
                         "1764461200");
  assert_int_equal(ival(doc, "from"), T0 + 100 * SEC);
  assert_int_equal(ival(doc, "to"), T0 + 400 * SEC);
  assert_true(fabs(json_real_value(json_object_get(doc, "seconds")) - 300.0) < 1e-9);
  const json_t *fns = json_object_get(doc, "functions");
  assert_true(json_array_size(fns) >= 5);
  const json_t *first = json_array_get(fns, 0);
  assert_string_equal(sval(first, "function"), "leak_step");
  assert_string_equal(sval(first, "module"), "/usr/bin/leaky");
  assert_int_equal(ival(first, "bytes_from"), 90 * MIB);
  assert_int_equal(ival(first, "bytes_to"), 390 * MIB);
  assert_int_equal(ival(first, "growth_bytes"), 300 * MIB);
  assert_true(fabs(json_real_value(json_object_get(first, "per_second")) - (double)MIB) < 1e-6);
  /* main and the other roots grow by as much (every stack holds them) and
   * come after the allocation sites; malloc, on every stack, names none. */
  const json_t *m = find_fn(fns, "main");
  assert_non_null(m);
  assert_int_equal(ival(m, "growth_bytes"), 300 * MIB - 5 * MIB);
  assert_int_equal(ival(m, "bytes_to"), (390 + 4 + 64) * MIB);
  assert_int_equal(ival(m, "site_growth_bytes"), 0);
  assert_int_equal(ival(find_fn(fns, "malloc"), "site_growth_bytes"), 0);
  /* Allocation sites that did not grow follow the one that did. */
  const json_t *second = json_array_get(fns, 1);
  assert_int_equal(ival(second, "site_growth_bytes"), 0);
  assert_non_null(find_fn(fns, "init_tables"));
  assert_int_equal(ival(find_fn(fns, "init_tables"), "growth_bytes"), 0);
  /* Freed before T2: holds nothing, not listed. */
  assert_null(find_fn(fns, "short_lived"));
  /* The top stack is the leak's, leaf first. */
  const json_t *top = json_array_get(json_object_get(doc, "stacks"), 0);
  assert_int_equal(ival(top, "growth_bytes"), 300 * MIB);
  const json_t *frames = json_object_get(top, "frames");
  assert_string_equal(sval(json_array_get(frames, 0), "function"), "malloc");
  assert_string_equal(sval(json_array_get(frames, 1), "function"), "leak_step");
  assert_int_equal(ival(doc, "bytes_to"), (390 + 4 + 64) * MIB);
  json_decref(doc);

  /* Both versions: v2 adds 1 MiB at each instant, no growth. */
  doc = get_json("/api/v1/heap/growth?worker=leaky&" Q(1764460900, 1764461200) "&limit=2");
  fns = json_object_get(doc, "functions");
  assert_int_equal(json_array_size(fns), 2);
  assert_string_equal(sval(json_array_get(fns, 0), "function"), "leak_step");
  assert_int_equal(ival(json_array_get(fns, 0), "growth_bytes"), 300 * MIB);
  assert_int_equal(ival(doc, "bytes_to"), (390 + 4 + 64 + 1) * MIB);
  assert_int_equal(json_array_size(json_object_get(doc, "stacks")), 2);
  json_decref(doc);

  /* Nothing stored for that worker: empty lists. */
  doc = get_json("/api/v1/heap/growth?worker=nobody&" Q(1764460900, 1764461200));
  assert_int_equal(json_array_size(json_object_get(doc, "functions")), 0);
  json_decref(doc);
}

static void test_api_heap_timeline(void **state) {
  (void)state;
  json_t *doc = get_json(
      "/api/v1/heap/timeline?worker=leaky&version=v1&" Q(1764460800, 1764461400) "&step=60s");
  assert_int_equal(ival(doc, "step_ms"), 60000);
  assert_string_equal(sval(doc, "type"), "inuse_bytes");
  assert_string_equal(sval(doc, "unit"), "bytes");
  const json_t *total = json_object_get(doc, "total");
  assert_int_equal(json_array_size(total), 10);
  /* Bucket b: the window at 60 b + 50 s; short_lived until 200 s. */
  assert_int_equal(json_integer_value(json_array_get(total, 0)), (50 + 4 + 64 + 5) * MIB);
  assert_int_equal(json_integer_value(json_array_get(total, 3)), (230 + 4 + 64) * MIB);
  assert_int_equal(json_integer_value(json_array_get(total, 9)), (590 + 4 + 64) * MIB);
  const json_t *groups = json_object_get(doc, "groups");
  assert_int_equal(json_array_size(groups), 1);
  assert_string_equal(sval(json_array_get(groups, 0), "worker"), "leaky");
  json_decref(doc);

  doc = get_json(
      "/api/v1/heap/timeline?worker=leaky&group_by=version&" Q(1764460800, 1764461400) "&step=5m");
  groups = json_object_get(doc, "groups");
  assert_int_equal(json_array_size(groups), 2);
  assert_string_equal(sval(json_array_get(groups, 0), "version"), "v1");
  assert_string_equal(sval(json_array_get(groups, 1), "version"), "v2");
  const json_t *v2 = json_object_get(json_array_get(groups, 1), "values");
  assert_int_equal(json_integer_value(json_array_get(v2, 0)), MIB);
  assert_int_equal(json_integer_value(json_array_get(v2, 1)), MIB);
  const json_t *v1 = json_object_get(json_array_get(groups, 0), "values");
  assert_int_equal(json_integer_value(json_array_get(v1, 1)), (590 + 4 + 64) * MIB);
  total = json_object_get(doc, "total");
  assert_int_equal(json_integer_value(json_array_get(total, 1)), (590 + 4 + 64 + 1) * MIB);
  json_decref(doc);

  doc = get_json("/api/v1/heap/timeline?worker=leaky&group_by=host&type=inuse_objects&" Q(
      1764460800, 1764461400) "&step=10m");
  groups = json_object_get(doc, "groups");
  assert_string_equal(sval(json_array_get(groups, 0), "host"), "h1");
  assert_int_equal(json_integer_value(json_array_get(json_object_get(doc, "total"), 0)),
                   (590 + 4 + 64 + 1) * 1024);
  json_decref(doc);

  /* A peer's question: every series with the start of each value. */
  doc = get_json("/api/v1/heap/timeline?local=1&raw=inuse_bytes&worker=leaky&" Q(
      1764460800, 1764461400) "&step=10m");
  const json_t *series = json_object_get(doc, "series");
  assert_int_equal(json_array_size(series), 2);
  const json_t *at = json_object_get(json_array_get(series, 0), "at_ns");
  assert_int_equal(json_integer_value(json_array_get(at, 0)), T0 + 590 * SEC);
  json_decref(doc);
}

static void test_api_heap_profile_type(void **state) {
  (void)state;
  /* type=inuse_bytes over ten minutes: the state at the end, not a sum. */
  json_t *doc = get_json("/api/v1/profile?worker=leaky&version=v1&type=inuse_bytes&format=top&" Q(
      1764460800, 1764461400));
  assert_string_equal(sval(doc, "type"), "inuse_space");
  assert_int_equal(ival(doc, "total"), (590 + 4 + 64) * MIB);
  json_decref(doc);
  doc = get_json(
      "/api/v1/profile?worker=leaky&type=inuse_objects&format=top&" Q(1764460800, 1764461400));
  assert_int_equal(ival(doc, "total"), (590 + 4 + 64 + 1) * 1024);
  json_decref(doc);
  /* A peer's raw question answers the per-series parts. */
  char path[256];
  snprintf(path, sizeof path,
           "/api/v1/profile?local=1&format=ember&raw=inuse_bytes&worker=leaky&" Q(1764460800,
                                                                                  1764461400));
  assert_int_equal(tu_http_get(fx.port, path, body, sizeof body), 200);
}

static void expect_400(const char *path, const char *words) {
  int st = tu_http_get(fx.port, path, body, sizeof body);
  if (st != 400 || strstr(body, words) == NULL)
    fail_msg("GET %s: %d %s (wanted 400 saying \"%s\")", path, st, body, words);
}

static void test_api_heap_bad_requests(void **state) {
  (void)state;
  expect_400("/api/v1/heap/growth?" Q(1764460900, 1764461200), "is required: the heap");
  expect_400("/api/v1/heap/growth?worker=leaky&from=1764461200&to=1764460900", "from");
  expect_400("/api/v1/heap/growth?worker=leaky&from=yesterday", "from");
  expect_400("/api/v1/heap/growth?worker=leaky&limit=0", "limit");
  expect_400("/api/v1/heap/growth?worker=leaky&step=10s", "step");
  expect_400("/api/v1/heap/timeline?" Q(1764460800, 1764461400), "is required: the heap");
  expect_400("/api/v1/heap/timeline?worker=leaky&group_by=actor", "use version or host");
  expect_400("/api/v1/heap/timeline?worker=leaky&type=alloc_bytes", "inuse_bytes or inuse_objects");
  expect_400("/api/v1/heap/timeline?worker=leaky&step=1s", "at least 10s");
  expect_400("/api/v1/heap/timeline?worker=leaky&from=1764460800&to=1764461400&step=10s&from=1",
             "from");
  expect_400("/api/v1/heap/timeline?worker=leaky&raw=inuse_bytes", "peer collectors");
  expect_400("/api/v1/heap/timeline?local=1&raw=cpu_ns", "peer collectors");
  expect_400("/api/v1/profile?worker=leaky&type=inuse", "inuse_bytes");
}

/* The fleet's gauge merge: a series whose windows are in two stores (its
 * partition moved) counts once, with its latest window; parts survive the
 * peer encoding; a damaged answer is refused. */
static void test_api_heap_fleet_parts_keep_the_latest(void **state) {
  (void)state;
  ember_profile_t *a[] = {leaky_window(100, "v1", "h1"), leaky_window(100, "v2", "h2")};
  ember_profile_t *b[] = {leaky_window(300, "v1", "h1")}; /* the same series, later */
  ember_buf_t wire;
  ember_buf_init(&wire, 1 << 24);
  assert_int_equal(ember__fleetq_gauge_encode(b, 1, &wire), 0);
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  ember_profile_t **got = NULL;
  size_t n = 0;
  char why[256] = "";
  assert_int_equal(ember__fleetq_gauge_decode(wire.data, wire.len, &lim, EMBER_VT_INUSE_BYTES, &got,
                                              &n, why, sizeof why),
                   EMBER_ECORRUPT); /* two value types: not a part */
  ember_buf_free(&wire);
  ember_profile_t *parts[3];
  for (size_t i = 0; i < 3; i++) {
    ember_profile_t *src = i < 2 ? a[i] : b[0];
    ember_value_type_t vt = EMBER_VT_INUSE_BYTES;
    assert_int_equal(ember_profile_new(&vt, 1, &parts[i]), 0);
    assert_int_equal(ember_profile_set_labels(parts[i], ember_profile_labels(src)), 0);
    int64_t ws, we;
    ember_profile_window(src, &ws, &we);
    assert_int_equal(ember_profile_set_window(parts[i], ws, we), 0);
    for (size_t k = 0; k < ember_profile_nstacks(src); k++) {
      const uint32_t *ids;
      const int64_t *v;
      size_t depth;
      assert_int_equal(ember_profile_stack(src, (uint32_t)k, &ids, &depth, &v), 0);
      ember_frame_t fr[16];
      for (size_t d = 0; d < depth; d++) fr[d] = *ember_profile_frame(src, ids[d]);
      assert_int_equal(ember_profile_add(parts[i], fr, depth, &v[1]), 0);
    }
  }
  ember_buf_init(&wire, 1 << 24);
  assert_int_equal(ember__fleetq_gauge_encode(parts + 2, 1, &wire), 0);
  assert_int_equal(ember__fleetq_gauge_decode(wire.data, wire.len, &lim, EMBER_VT_INUSE_BYTES, &got,
                                              &n, why, sizeof why),
                   0);
  assert_int_equal(n, 1);
  assert_int_equal(ember_profile_total(got[0], 0), (300 + 4 + 64) * MIB);
  /* Cut short: refused with a reason. */
  ember_profile_t **bad = NULL;
  size_t nbad = 0;
  assert_int_equal(ember__fleetq_gauge_decode(wire.data, wire.len - 1, &lim, EMBER_VT_INUSE_BYTES,
                                              &bad, &nbad, why, sizeof why),
                   EMBER_ECORRUPT);
  assert_non_null(strstr(why, "gauge part"));
  ember_buf_free(&wire);
  ember_profile_t *all[] = {parts[0], parts[1], got[0]};
  ember_profile_t *sum = NULL;
  assert_int_equal(
      ember__fleetq_gauge_sum(all, 3, NULL, T0, T0 + 600 * SEC, EMBER_VT_INUSE_BYTES, &sum), 0);
  /* h1: its window at 300 s only (not 100 s as well); h2: 1 MiB. */
  assert_int_equal(ember_profile_total(sum, 0), (300 + 4 + 64) * MIB + MIB);
  int64_t ws, we;
  ember_profile_window(sum, &ws, &we);
  assert_int_equal(ws, T0 + 100 * SEC); /* h2's window */
  assert_int_equal(we, T0 + 310 * SEC);
  ember_profile_free(sum);
  /* Equal starts in two stores are two windows: both count. */
  ember_profile_t *twice[] = {parts[2], got[0]};
  assert_int_equal(
      ember__fleetq_gauge_sum(twice, 2, NULL, T0, T0 + 600 * SEC, EMBER_VT_INUSE_BYTES, &sum), 0);
  assert_int_equal(ember_profile_total(sum, 0), 2 * (300 + 4 + 64) * MIB);
  ember_profile_free(sum);
  ember_store_gauge_latest_free(got, n);
  for (size_t i = 0; i < 3; i++) ember_profile_free(parts[i]);
  ember_profile_free(a[0]);
  ember_profile_free(a[1]);
  ember_profile_free(b[0]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_api_heap_growth_ranks_the_leak_first),
      cmocka_unit_test(test_api_heap_timeline),
      cmocka_unit_test(test_api_heap_profile_type),
      cmocka_unit_test(test_api_heap_bad_requests),
      cmocka_unit_test(test_api_heap_fleet_parts_keep_the_latest),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
