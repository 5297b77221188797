/* The store's frame map (ember_store_set_frame_map): reads rewrite the
 * frames of the series the map wants, by worker and version, before any
 * two versions' stacks are added together; merges of windows (counted
 * types and gauges), gauge parts and session results all go through it;
 * series it does not want, and every series without a map, read as
 * stored. The rewrite here stands for the collector's uploaded source
 * maps: V8's name of one function of two builds is the same string, and
 * each build's map names it differently. */
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

#include "common/testutil.h"

#include "ember/store.h"

#define SEC 1000000000LL
#define T0  (1764460800LL * SEC) /* 2025-11-30T00:00:00Z */

/* As V8 names the function in both builds, and where its perf map is. */
#define V8_NAME  "JS:*a /srv/app/dist/app.js:1:4711"
#define PERF_MAP "/tmp/perf-1.map"

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

typedef struct fmap_ctx {
  unsigned wants, frames; /* calls */
} fmap_ctx_t;

static bool wants(void *ctx, const char *worker, const char *version) {
  fmap_ctx_t *c = ctx;
  c->wants++;
  (void)version;
  return worker != NULL && strcmp(worker, "web") == 0;
}

/* Build "1" names the function alphaWork, build "2" betaWork; the name
 * goes through `buf`, as a map's strings that do not outlive the call. */
static int frame(void *ctx, const char *worker, const char *version, const ember_frame_t *in,
                 ember_frame_t *out, char *buf, size_t size) {
  fmap_ctx_t *c = ctx;
  c->frames++;
  assert_string_equal(worker, "web");
  assert_true(size >= EMBER_STORE_FRAME_MAP_BUF);
  if (in->kind != EMBER_FRAME_JIT || in->function == NULL || strcmp(in->function, V8_NAME) != 0)
    return 0;
  snprintf(buf, size, "%s", strcmp(version, "1") == 0 ? "alphaWork" : "betaWork");
  *out = (ember_frame_t){.function = buf,
                         .file = "/srv/app/src/work.ts",
                         .line = 3,
                         .module = "/srv/app/dist/app.js",
                         .generated = "a /srv/app/dist/app.js:1:4711",
                         .kind = EMBER_FRAME_JIT};
  return 1;
}

/* One window of (worker, version): `n` samples of V8_NAME <- main, at
 * `start`. Gauges when `vt` is an in-use type, else CPU. A session's
 * result when `session` is set. */
static ember_profile_t *window(const char *worker, const char *version, int64_t start, int64_t n,
                               uint64_t seq, ember_value_type_t vt, const char *session) {
  ember_profile_t *p = NULL;
  bool gauge = ember_value_type_is_gauge(vt);
  if (gauge) {
    assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  } else {
    assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  }
  ember_labels_t l = {.worker = worker, .version = version, .host = "h1", .pid = 7};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, 10000000);
  char agent[64];
  snprintf(agent, sizeof agent, "agent-%s-%s", worker, version);
  assert_int_equal(ember_profile_set_origin(p, agent, seq, session), 0);
  ember_frame_t f[2] = {
      {.function = V8_NAME, .module = PERF_MAP, .kind = EMBER_FRAME_JIT},
      {.function = "main", .module = "/usr/bin/node"},
  };
  int64_t v[2] = {n, n * 10000000};
  assert_int_equal(ember_profile_add(p, f, 2, v), 0);
  return p;
}

/* The value of each leaf of `p` (value 0), by its name. */
static int64_t leaf_value(const ember_profile_t *p, const char *name) {
  int64_t sum = 0;
  for (uint32_t k = 0; k < ember_profile_nstacks(p); k++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *vals;
    ember_profile_stack(p, k, &ids, &depth, &vals);
    const ember_frame_t *f = ember_profile_frame(p, ids[0]);
    if (f->function != NULL && strcmp(f->function, name) == 0) sum += vals[0];
  }
  return sum;
}

static ember_profile_t *merge(ember_store_t *s, const char *worker, ember_value_type_t vt) {
  ember_store_selector_t sel = {.worker = worker};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, worker ? &sel : NULL, T0 - SEC, T0 + 120 * SEC, vt, &p), 0);
  return p;
}

static ember_store_t *open_store(const char *path) {
  tu_store_remove(path);
  return tu_store_open(path, (size_t)256 << 20);
}

static void test_store_fmap_rewrites_each_version_apart(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "fmap", "main");
  ember_store_t *s = open_store(path);
  /* web 1 and web 2 at the same time on one host (a rolling deploy), in
   * several windows; api runs the same bundle without a map. */
  ember_profile_t *ps[7];
  ps[0] = window("web", "1", T0, 30, 1, EMBER_VT_CPU_NS, NULL);
  ps[1] = window("web", "1", T0 + 10 * SEC, 30, 2, EMBER_VT_CPU_NS, NULL);
  ps[2] = window("web", "2", T0, 10, 1, EMBER_VT_CPU_NS, NULL);
  ps[3] = window("web", "2", T0 + 20 * SEC, 10, 2, EMBER_VT_CPU_NS, NULL);
  ps[4] = window("api", "1", T0, 5, 1, EMBER_VT_CPU_NS, NULL);
  ps[5] = window("web", "1", T0 + 20 * SEC, 4096, 3, EMBER_VT_INUSE_BYTES, NULL);
  ps[6] = window("web", "2", T0 + 20 * SEC, 1024, 3, EMBER_VT_INUSE_BYTES, NULL);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write(s, ps, 7, &r), 0);
  assert_int_equal(r.written, 7);

  /* Without a map, the frames are as stored: one V8 name for all. */
  ember_profile_t *p = merge(s, NULL, EMBER_VT_CPU_SAMPLES);
  assert_int_equal(leaf_value(p, V8_NAME), 85);
  ember_profile_free(p);

  fmap_ctx_t c = {0};
  ember_store_frame_map_t fm = {.wants = wants, .frame = frame, .ctx = &c};
  ember_store_set_frame_map(s, &fm);
  p = merge(s, "web", EMBER_VT_CPU_SAMPLES);
  assert_int_equal(leaf_value(p, "alphaWork"), 60);
  assert_int_equal(leaf_value(p, "betaWork"), 20);
  assert_int_equal(leaf_value(p, V8_NAME), 0);
  assert_int_equal(ember_profile_total(p, 0), 80);
  /* Each version's frames were offered once per merge (V8's name and
   * main), each series asked once. */
  assert_int_equal(c.frames, 4);
  assert_int_equal(c.wants, 2); /* the series web/1 and web/2 */
  const ember_frame_t *f = NULL;
  for (uint32_t i = 0; i < ember_profile_nframes(p); i++)
    if (strcmp(ember_profile_frame(p, i)->function, "alphaWork") == 0)
      f = ember_profile_frame(p, i);
  assert_non_null(f);
  assert_string_equal(f->file, "/srv/app/src/work.ts");
  assert_string_equal(f->generated, "a /srv/app/dist/app.js:1:4711");
  ember_profile_free(p);

  /* Every series: api's frames stay as they were. */
  p = merge(s, NULL, EMBER_VT_CPU_SAMPLES);
  assert_int_equal(leaf_value(p, "alphaWork"), 60);
  assert_int_equal(leaf_value(p, "betaWork"), 20);
  assert_int_equal(leaf_value(p, V8_NAME), 5);
  ember_profile_free(p);

  /* Gauges: the heap at the range's end, by version, and its parts. */
  p = merge(s, "web", EMBER_VT_INUSE_BYTES);
  assert_int_equal(leaf_value(p, "alphaWork"), 4096);
  assert_int_equal(leaf_value(p, "betaWork"), 1024);
  ember_profile_free(p);
  ember_store_selector_t sel = {.worker = "web"};
  ember_profile_t **parts = NULL;
  size_t nparts = 0;
  assert_int_equal(ember_store_gauge_latest(s, &sel, T0 - SEC, T0 + 120 * SEC, EMBER_VT_INUSE_BYTES,
                                            &parts, &nparts),
                   0);
  assert_int_equal(nparts, 2);
  int64_t alpha = 0, beta = 0;
  for (size_t i = 0; i < nparts; i++) {
    alpha += leaf_value(parts[i], "alphaWork");
    beta += leaf_value(parts[i], "betaWork");
  }
  assert_int_equal(alpha, 4096);
  assert_int_equal(beta, 1024);
  ember_store_gauge_latest_free(parts, nparts);

  /* Session results, one per version's host. */
  ember_profile_t *rs[3] = {window("web", "1", T0, 7, 10, EMBER_VT_CPU_NS, "sess-1"),
                            window("web", "2", T0, 3, 11, EMBER_VT_CPU_NS, "sess-1"),
                            window("api", "1", T0, 2, 12, EMBER_VT_CPU_NS, "sess-1")};
  assert_int_equal(ember_store_session_add(s, rs, 3, &r), 0);
  assert_int_equal(ember_store_session_merge(s, "sess-1", EMBER_VT_CPU_SAMPLES, &p, NULL), 0);
  assert_int_equal(leaf_value(p, "alphaWork"), 7);
  assert_int_equal(leaf_value(p, "betaWork"), 3);
  assert_int_equal(leaf_value(p, V8_NAME), 2);
  ember_profile_free(p);

  /* The map removed: as stored again. */
  ember_store_set_frame_map(s, NULL);
  p = merge(s, "web", EMBER_VT_CPU_SAMPLES);
  assert_int_equal(leaf_value(p, V8_NAME), 80);
  ember_profile_free(p);

  for (int i = 0; i < 3; i++) ember_profile_free(rs[i]);
  for (int i = 0; i < 7; i++) ember_profile_free(ps[i]);
  ember_store_close(s);
  tu_store_remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_fmap_rewrites_each_version_apart),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
