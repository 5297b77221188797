/* Gauge windows in the store (in-use objects and bytes): a merge takes each
 * series' latest window within the lookback before the range's end and sums
 * across series, never over one series' windows; gauge windows stay out of
 * the rollups; a window mixing gauges and counts is refused; timelines keep
 * each series' latest per bucket; undo and retention work on gauge windows;
 * a schema 3 store is upgraded in place. */
#include <errno.h>
#include <lmdb.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/store.h"

#define SEC 1000000000LL
#define T0  (1764460800LL * SEC) /* 2025-11-30T00:00:00Z, an hour boundary */

static const ember_value_type_t heap_types[] = {EMBER_VT_INUSE_OBJECTS, EMBER_VT_INUSE_BYTES};

static ember_store_t *open_store(const char *path) { return tu_store_open(path, (size_t)64 << 20); }

/* An in-use window of `host`'s worker "api" starting at `start`: `bytes`
 * held by leak_step and 1000 by steady_work (objects: bytes / 100). */
static ember_profile_t *heap_window(const char *host, int64_t start, int64_t bytes) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(heap_types, 2, &p), 0);
  ember_labels_t l = {.worker = "api", .version = "v1", .host = host};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, 524288);
  ember_frame_t leak[] = {{.function = "malloc", .module = "libember_alloc.so"},
                          {.function = "leak_step", .module = "/usr/bin/app"},
                          {.function = "main", .module = "/usr/bin/app"}};
  ember_frame_t steady[] = {{.function = "malloc", .module = "libember_alloc.so"},
                            {.function = "steady_work", .module = "/usr/bin/app"},
                            {.function = "main", .module = "/usr/bin/app"}};
  int64_t lv[] = {bytes / 100, bytes}, sv[] = {10, 1000};
  if (bytes > 0) assert_int_equal(ember_profile_add(p, leak, 3, lv), 0);
  assert_int_equal(ember_profile_add(p, steady, 3, sv), 0);
  return p;
}

static void write_one(ember_store_t *s, ember_profile_t *p) {
  ember_store_write_result_t res;
  assert_int_equal(ember_store_write(s, &p, 1, &res), 0);
  assert_int_equal(res.written, 1);
  ember_profile_free(p);
}

static int64_t merged(ember_store_t *s, const ember_store_selector_t *sel, int64_t from, int64_t to,
                      ember_value_type_t vt) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, sel, from, to, vt, &p), 0);
  int64_t t = ember_profile_total(p, 0);
  ember_profile_free(p);
  return t;
}

static void test_store_gauge_latest_not_summed(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "gauge", "latest");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  /* One series, three windows: the heap grows 100 -> 200 -> 300 (+1000). */
  for (int i = 0; i < 3; i++) write_one(s, heap_window("h1", T0 + i * 10 * SEC, 100 * (i + 1)));
  assert_int_equal(merged(s, NULL, T0, T0 + 30 * SEC, EMBER_VT_INUSE_BYTES), 1300);
  assert_int_equal(merged(s, NULL, T0, T0 + 30 * SEC, EMBER_VT_INUSE_OBJECTS), 13);
  /* The state at an earlier instant: the window before it. */
  assert_int_equal(merged(s, NULL, T0 - 5 * 60 * SEC, T0 + 15 * SEC, EMBER_VT_INUSE_BYTES), 1200);
  /* A range that starts after a window does not see it. */
  assert_int_equal(merged(s, NULL, T0 + 25 * SEC, T0 + 30 * SEC, EMBER_VT_INUSE_BYTES), 0);
  /* The per-stack values are those of the latest window. */
  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 30 * SEC, EMBER_VT_INUSE_BYTES, &p), 0);
  assert_int_equal(ember_profile_nstacks(p), 2);
  int64_t ws, we;
  ember_profile_window(p, &ws, &we);
  assert_int_equal(ws, T0 + 20 * SEC);
  assert_int_equal(we, T0 + 30 * SEC);
  assert_int_equal(ember_profile_period(p), 524288);
  ember_profile_free(p);
  /* Counted types merge as before and see no gauge. */
  assert_int_equal(merged(s, NULL, T0, T0 + 30 * SEC, EMBER_VT_ALLOC_BYTES), 0);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_gauge_series_summed_within_lookback(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "gauge", "series");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  write_one(s, heap_window("h1", T0, 100));
  write_one(s, heap_window("h1", T0 + 20 * SEC, 300));
  write_one(s, heap_window("h2", T0 + 10 * SEC, 50));
  /* h3's last window is 10 minutes before the end: gone. */
  write_one(s, heap_window("h3", T0 - 10 * 60 * SEC, 7000));
  int64_t to = T0 + 30 * SEC;
  /* h1's latest (1300) plus h2's (1050); h3 is past the lookback even
   * though the range covers it. */
  assert_int_equal(merged(s, NULL, T0 - 3600 * SEC, to, EMBER_VT_INUSE_BYTES), 1300 + 1050);
  ember_store_selector_t h2 = {.host = "h2"};
  assert_int_equal(merged(s, &h2, T0 - 3600 * SEC, to, EMBER_VT_INUSE_BYTES), 1050);
  /* Within the lookback of its own instant h3 counts. */
  assert_int_equal(merged(s, NULL, T0 - 3600 * SEC, T0 - 9 * 60 * SEC, EMBER_VT_INUSE_BYTES), 8000);
  /* Two processes with the same labels and window start: both count. */
  write_one(s, heap_window("h2", T0 + 10 * SEC, 50));
  assert_int_equal(merged(s, &h2, T0, to, EMBER_VT_INUSE_BYTES), 2100);

  /* The parts: one per series, with its labels and window. */
  ember_profile_t **parts = NULL;
  size_t n = 0;
  assert_int_equal(
      ember_store_gauge_latest(s, NULL, T0 - 3600 * SEC, to, EMBER_VT_INUSE_BYTES, &parts, &n), 0);
  assert_int_equal(n, 2);
  int64_t sum = 0;
  for (size_t i = 0; i < n; i++) {
    const ember_labels_t *l = ember_profile_labels(parts[i]);
    int64_t ws, we;
    ember_profile_window(parts[i], &ws, &we);
    assert_string_equal(l->worker, "api");
    if (strcmp(l->host, "h1") == 0) {
      assert_int_equal(ws, T0 + 20 * SEC);
      assert_int_equal(ember_profile_total(parts[i], 0), 1300);
    } else {
      assert_string_equal(l->host, "h2");
      assert_int_equal(ws, T0 + 10 * SEC);
      assert_int_equal(ember_profile_total(parts[i], 0), 2100);
    }
    sum += ember_profile_total(parts[i], 0);
  }
  assert_int_equal(sum, merged(s, NULL, T0, to, EMBER_VT_INUSE_BYTES));
  ember_store_gauge_latest_free(parts, n);
  assert_int_equal(ember_store_gauge_latest(s, NULL, T0, to, EMBER_VT_ALLOC_BYTES, &parts, &n),
                   -EINVAL);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_gauge_rollups_untouched(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "gauge", "rollups");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  /* Two hours of gauge windows, every 10 s: in-use grows by 10 a window. */
  for (int i = 0; i < 720; i++) write_one(s, heap_window("h1", T0 + i * 10 * SEC, 10 * (i + 1)));
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 720);
  assert_int_equal(st.rollup_rows, 0);
  assert_int_equal(st.rollup_1m_rows, 0);
  /* A range of whole hours reads the latest window, not an hourly sum. */
  assert_int_equal(merged(s, NULL, T0, T0 + 7200 * SEC, EMBER_VT_INUSE_BYTES), 7200 + 1000);
  assert_int_equal(merged(s, NULL, T0, T0 + 3600 * SEC, EMBER_VT_INUSE_BYTES), 3600 + 1000);

  /* Allocation windows of the same series go into the rollups as before. */
  const ember_value_type_t at[] = {EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES};
  for (int i = 0; i < 360; i++) {
    ember_profile_t *p = NULL;
    assert_int_equal(ember_profile_new(at, 2, &p), 0);
    ember_labels_t l = {.worker = "api", .version = "v1", .host = "h1"};
    assert_int_equal(ember_profile_set_labels(p, &l), 0);
    assert_int_equal(ember_profile_set_window(p, T0 + i * 10 * SEC, T0 + (i + 1) * 10 * SEC), 0);
    ember_frame_t f = {.function = "churn", .module = "/usr/bin/app"};
    int64_t v[] = {1, 64};
    assert_int_equal(ember_profile_add(p, &f, 1, v), 0);
    write_one(s, p);
  }
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.rollup_rows, 1);
  assert_int_equal(st.rollup_1m_rows, 60);
  assert_int_equal(merged(s, NULL, T0, T0 + 7200 * SEC, EMBER_VT_ALLOC_BYTES), 360 * 64);
  assert_int_equal(merged(s, NULL, T0, T0 + 7200 * SEC, EMBER_VT_INUSE_BYTES), 7200 + 1000);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_gauge_mixed_window_refused(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "gauge", "mixed");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  const ember_value_type_t mixed[] = {EMBER_VT_ALLOC_BYTES, EMBER_VT_INUSE_BYTES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(mixed, 2, &p), 0);
  assert_int_equal(ember_profile_set_window(p, T0, T0 + 10 * SEC), 0);
  ember_frame_t f = {.function = "leak_step"};
  int64_t v[] = {64, 64};
  assert_int_equal(ember_profile_add(p, &f, 1, v), 0);
  ember_profile_t *good = heap_window("h1", T0, 100);
  ember_profile_t *batch[] = {good, p};
  ember_store_write_result_t res;
  assert_int_equal(ember_store_write(s, batch, 2, &res), -EINVAL);
  assert_int_equal(res.bad, 1);
  assert_non_null(strstr(res.why, "in-use"));
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 0);
  /* The good window alone is written. */
  assert_int_equal(ember_store_write(s, &good, 1, &res), 0);
  ember_profile_free(good);
  ember_profile_free(p);
  assert_int_equal(ember_value_type_is_gauge(EMBER_VT_INUSE_BYTES), true);
  assert_int_equal(ember_value_type_is_gauge(EMBER_VT_INUSE_OBJECTS), true);
  assert_int_equal(ember_value_type_is_gauge(EMBER_VT_ALLOC_BYTES), false);
  assert_int_equal(ember_value_type_is_gauge((ember_value_type_t)7), false);
  assert_string_equal(ember_value_type_name(EMBER_VT_INUSE_BYTES), "inuse_space");
  assert_string_equal(ember_value_type_unit(EMBER_VT_INUSE_BYTES), "bytes");
  assert_string_equal(ember_value_type_name(EMBER_VT_INUSE_OBJECTS), "inuse_objects");
  assert_string_equal(ember_value_type_unit(EMBER_VT_INUSE_OBJECTS), "count");
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_gauge_timeline(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "gauge", "timeline");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  /* h1 every 10 s for a minute (100, 200, ... 600), h2 at 5 s and 35 s. */
  for (int i = 0; i < 6; i++) write_one(s, heap_window("h1", T0 + i * 10 * SEC, 100 * (i + 1)));
  write_one(s, heap_window("h2", T0 + 5 * SEC, 5000));
  write_one(s, heap_window("h2", T0 + 35 * SEC, 7000));
  int64_t *tl = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_gauge_timeline(s, NULL, EMBER_VT_INUSE_BYTES, T0, T0 + 60 * SEC,
                                              30 * SEC, &tl, &n),
                   0);
  assert_int_equal(n, 2);
  /* Bucket 0: h1's window at 20 s (1300) + h2's at 5 s (6000); bucket 1:
   * h1 at 50 s (1600) + h2 at 35 s (8000). Never a sum over windows. */
  assert_int_equal(tl[0], 1300 + 6000);
  assert_int_equal(tl[1], 1600 + 8000);
  ember_free(tl);

  ember_store_gauge_timelines_t *t = NULL;
  ember_store_selector_t sel = {.worker = "api"};
  assert_int_equal(ember_store_gauge_timelines(s, &sel, EMBER_VT_INUSE_BYTES, T0, T0 + 60 * SEC,
                                               30 * SEC, 0, &t),
                   0);
  assert_int_equal(t->nbuckets, 2);
  assert_int_equal(t->nseries, 2);
  assert_string_equal(t->series[0].labels.host, "h1");
  assert_int_equal(t->values[0], 1300);
  assert_int_equal(t->values[1], 1600);
  assert_int_equal(t->at_ns[0], T0 + 20 * SEC);
  assert_int_equal(t->at_ns[1], T0 + 50 * SEC);
  assert_int_equal(t->series[0].first_ns, T0);
  assert_int_equal(t->series[0].last_ns, T0 + 50 * SEC);
  assert_int_equal(t->values[2], 6000);
  assert_int_equal(t->at_ns[3], T0 + 35 * SEC);
  ember_store_gauge_timelines_free(t);
  /* A bucket without windows is zero, its start INT64_MIN. */
  assert_int_equal(ember_store_gauge_timelines(s, NULL, EMBER_VT_INUSE_OBJECTS, T0 - 60 * SEC,
                                               T0 + 60 * SEC, 60 * SEC, 0, &t),
                   0);
  assert_int_equal(t->nseries, 2);
  assert_int_equal(t->values[0], 0);
  assert_int_equal(t->at_ns[0], INT64_MIN);
  assert_int_equal(t->total[1], 16 + 80);
  ember_store_gauge_timelines_free(t);
  /* Too many values, and bad arguments. */
  assert_int_equal(ember_store_gauge_timelines(s, NULL, EMBER_VT_INUSE_BYTES, T0, T0 + 60 * SEC,
                                               30 * SEC, 3, &t),
                   EMBER_ETOOBIG);
  assert_int_equal(
      ember_store_gauge_timelines(s, NULL, EMBER_VT_CPU_NS, T0, T0 + 60 * SEC, 30 * SEC, 0, &t),
      -EINVAL);
  assert_int_equal(
      ember_store_gauge_timelines(s, NULL, EMBER_VT_INUSE_BYTES, T0, T0 + 60 * SEC, 0, 0, &t),
      -EINVAL);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_gauge_undo_and_retention(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "gauge", "undo");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  ember_profile_t *w[3];
  ember_store_source_t src[3];
  for (int i = 0; i < 3; i++) {
    w[i] = heap_window("h1", T0 + i * 10 * SEC, 100 * (i + 1));
    assert_int_equal(ember_profile_set_origin(w[i], "agent-1", (uint64_t)i + 1, NULL), 0);
    src[i] = (ember_store_source_t){
        .partition = 2, .offset = 10 + i, .run_start = 10, .run_started_ns = T0};
  }
  ember_store_write_result_t res;
  assert_int_equal(ember_store_write_from(s, w, src, 3, &res), 0);
  assert_int_equal(res.written, 3);
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_INUSE_BYTES), 1300);
  /* Undo the last: the one before is the latest again. */
  uint64_t undone = 0;
  assert_int_equal(ember_store_undo(s, 2, 12, 13, &undone), 0);
  assert_int_equal(undone, 1);
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_INUSE_BYTES), 1200);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, 2);
  assert_int_equal(st.rollup_rows + st.rollup_1m_rows, 0);
  /* A replay of the undone window is stored again. */
  assert_int_equal(ember_store_write_from(s, &w[2], &src[2], 1, &res), 0);
  assert_int_equal(res.written, 1);
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_INUSE_BYTES), 1300);
  /* An hour later, retention takes the old hour. */
  write_one(s, heap_window("h1", T0 + 3600 * SEC, 900));
  uint64_t deleted = 0;
  assert_int_equal(ember_store_retain(s, T0 + 3600 * SEC, 0, &deleted), 0);
  assert_true(deleted >= 3);
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_INUSE_BYTES), 0);
  assert_int_equal(merged(s, NULL, T0, T0 + 3700 * SEC, EMBER_VT_INUSE_BYTES), 1900);
  for (int i = 0; i < 3; i++) ember_profile_free(w[i]);
  ember_store_close(s);
  char err[256];
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  tu_store_remove(path);
}

/* Put `version` under meta "schema", sealed as schema 3 and later seal it. */
static void set_schema_sealed(const char *path, uint32_t version) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
  assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
  uint8_t v[8] = {(uint8_t)(version >> 24), (uint8_t)(version >> 16), (uint8_t)(version >> 8),
                  (uint8_t)version};
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, (const Bytef *)"schema", 6);
  c = crc32(c, v, 4);
  v[4] = (uint8_t)(c >> 24);
  v[5] = (uint8_t)(c >> 16);
  v[6] = (uint8_t)(c >> 8);
  v[7] = (uint8_t)c;
  MDB_val k = {.mv_size = 6, .mv_data = (void *)(uintptr_t) "schema"};
  MDB_val d = {.mv_size = 8, .mv_data = v};
  assert_int_equal(mdb_put(txn, dbi, &k, &d, 0), 0);
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

static uint32_t get_schema(const char *path) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
  assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY, 0640), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
  MDB_val k = {.mv_size = 6, .mv_data = (void *)(uintptr_t) "schema"}, v;
  assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
  assert_int_equal(v.mv_size, 8);
  const uint8_t *b = v.mv_data;
  uint32_t ver = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return ver;
}

static void test_store_gauge_schema_upgrade(void **state) {
  (void)state;
  char path[512], err[256];
  tu_store_path(path, sizeof path, "gauge", "schema");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  /* A schema 3 store with counted windows. */
  const ember_value_type_t at[] = {EMBER_VT_ALLOC_BYTES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(at, 1, &p), 0);
  assert_int_equal(ember_profile_set_window(p, T0, T0 + 10 * SEC), 0);
  ember_frame_t f = {.function = "churn"};
  int64_t v = 64;
  assert_int_equal(ember_profile_add(p, &f, 1, &v), 0);
  write_one(s, p);
  ember_store_close(s);
  assert_int_equal(get_schema(path), EMBER_STORE_SCHEMA_VERSION);
  set_schema_sealed(path, 3);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  /* Read-only: read as it is, not written. */
  ember_store_opts_t ro = {.read_only = true};
  assert_int_equal(ember_store_open(path, &ro, &s, err, sizeof err), 0);
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_ALLOC_BYTES), 64);
  ember_store_close(s);
  assert_int_equal(get_schema(path), 3);
  /* Read-write: upgraded in place, its data kept, gauges writable. */
  s = open_store(path);
  assert_int_equal(get_schema(path), EMBER_STORE_SCHEMA_VERSION);
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_ALLOC_BYTES), 64);
  write_one(s, heap_window("h1", T0, 100));
  assert_int_equal(merged(s, NULL, T0, T0 + 60 * SEC, EMBER_VT_INUSE_BYTES), 1100);
  ember_store_close(s);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  /* Schema 2 is still refused. */
  set_schema_sealed(path, 2);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_EVERSION);
  tu_store_remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_gauge_latest_not_summed),
      cmocka_unit_test(test_store_gauge_series_summed_within_lookback),
      cmocka_unit_test(test_store_gauge_rollups_untouched),
      cmocka_unit_test(test_store_gauge_mixed_window_refused),
      cmocka_unit_test(test_store_gauge_timeline),
      cmocka_unit_test(test_store_gauge_undo_and_retention),
      cmocka_unit_test(test_store_gauge_schema_upgrade),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
