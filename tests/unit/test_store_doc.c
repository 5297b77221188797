/* The store's document tables ("rules", "alerts"): put, get, delete, walk,
 * retention by the caller's judgement, persistence across a reopen, a
 * damaged document refused, a store made before the tables opened
 * read-only, map growth, failed allocations. */
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

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/store.h"

static ember_store_t *open_opts(const char *path, const ember_store_opts_t *o) {
  ember_store_t *s = NULL;
  char err[256];
  int rc = ember_store_open(path, o, &s, err, sizeof err);
  if (rc != 0) fail_msg("open %s: %s", path, err);
  return s;
}

static ember_store_t *open_store(const char *path) {
  ember_store_opts_t o = {.map_size = (size_t)64 << 20, .no_sync = true};
  return open_opts(path, &o);
}

static void put_str(ember_store_t *s, ember_store_doc_table_t t, const char *key, const char *doc) {
  assert_int_equal(ember_store_doc_put(s, t, key, doc, strlen(doc)), 0);
}

static void expect_doc(ember_store_t *s, ember_store_doc_table_t t, const char *key,
                       const char *want) {
  void *doc = NULL;
  size_t len = 0;
  assert_int_equal(ember_store_doc_get(s, t, key, &doc, &len), 0);
  assert_int_equal(len, strlen(want));
  assert_string_equal((const char *)doc, want); /* NUL-terminated */
  ember_free(doc);
}

typedef struct seen {
  size_t n;
  char keys[256][32];
  ember_store_t *store; /* when set, delete each document from inside the walk */
  size_t stop_at;       /* 1-based; 0 = never */
} seen_t;

static int collect(const char *key, const void *doc, size_t len, void *ctx) {
  seen_t *s = ctx;
  assert_int_equal(strlen((const char *)doc), len);
  assert_true(s->n < 256);
  snprintf(s->keys[s->n], sizeof s->keys[0], "%s", key);
  s->n++;
  if (s->store) assert_int_equal(ember_store_doc_del(s->store, EMBER_STORE_DOC_ALERTS, key), 0);
  return s->stop_at && s->n == s->stop_at ? 42 : 0;
}

static void test_store_doc_put_get_del_each(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "doc", "basic");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  put_str(s, EMBER_STORE_DOC_RULES, "cpu-hot", "{\"name\":\"cpu-hot\"}");
  put_str(s, EMBER_STORE_DOC_ALERTS, "cpu-hot", "{\"id\":\"x\"}"); /* tables apart */
  expect_doc(s, EMBER_STORE_DOC_RULES, "cpu-hot", "{\"name\":\"cpu-hot\"}");
  expect_doc(s, EMBER_STORE_DOC_ALERTS, "cpu-hot", "{\"id\":\"x\"}");
  put_str(s, EMBER_STORE_DOC_RULES, "cpu-hot", "{\"v\":2}"); /* replaced */
  expect_doc(s, EMBER_STORE_DOC_RULES, "cpu-hot", "{\"v\":2}");
  /* An empty document is a document. */
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "empty", NULL, 0), 0);
  expect_doc(s, EMBER_STORE_DOC_RULES, "empty", "");

  void *doc = (void *)(uintptr_t)1;
  size_t len = 77;
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_RULES, "nope", &doc, &len),
                   EMBER_ENOTFOUND);
  assert_true(doc == (void *)(uintptr_t)1 && len == 77); /* untouched */
  assert_int_equal(ember_store_doc_del(s, EMBER_STORE_DOC_RULES, "nope"), EMBER_ENOTFOUND);
  assert_int_equal(ember_store_doc_del(s, EMBER_STORE_DOC_RULES, "empty"), 0);
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_RULES, "empty", &doc, &len),
                   EMBER_ENOTFOUND);

  /* Walk in key order, over more than one batch, deleting from inside. */
  for (int i = 0; i < 150; i++) {
    char key[16], body[32];
    snprintf(key, sizeof key, "a%03d", 149 - i);
    snprintf(body, sizeof body, "{\"i\":%d}", i);
    put_str(s, EMBER_STORE_DOC_ALERTS, key, body);
  }
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.alert_docs, 151);
  assert_int_equal(st.rule_docs, 1);
  seen_t seen = {.stop_at = 10};
  assert_int_equal(ember_store_doc_each(s, EMBER_STORE_DOC_ALERTS, collect, &seen), 42);
  assert_int_equal(seen.n, 10);
  assert_string_equal(seen.keys[0], "a000");
  assert_string_equal(seen.keys[9], "a009");
  size_t total = 0;
  for (;;) {
    seen_t part = {.store = s, .stop_at = 64};
    int rc = ember_store_doc_each(s, EMBER_STORE_DOC_ALERTS, collect, &part);
    total += part.n;
    if (rc == 0) break;
    assert_int_equal(rc, 42);
  }
  assert_int_equal(total, 151);
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.alert_docs, 0);
  seen_t none = {0};
  assert_int_equal(ember_store_doc_each(s, EMBER_STORE_DOC_ALERTS, collect, &none), 0);
  assert_int_equal(none.n, 0);

  /* Bad arguments. */
  char longkey[EMBER_STORE_DOC_KEY_MAX + 2];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = '\0';
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, longkey, "x", 1), -EINVAL);
  longkey[EMBER_STORE_DOC_KEY_MAX] = '\0';
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, longkey, "x", 1), 0);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "", "x", 1), -EINVAL);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, NULL, "x", 1), -EINVAL);
  assert_int_equal(ember_store_doc_put(s, (ember_store_doc_table_t)4, "k", "x", 1), -EINVAL);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "k", NULL, 1), -EINVAL);
  assert_int_equal(ember_store_doc_put(NULL, EMBER_STORE_DOC_RULES, "k", "x", 1), -EINVAL);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "k", "x", EMBER_STORE_DOC_MAX + 1),
                   EMBER_ETOOBIG);
  /* Source maps may be larger, up to their own bound. */
  size_t big = (size_t)EMBER_STORE_DOC_MAX + 1;
  char *bigdoc = calloc(1, EMBER_STORE_DOC_SOURCEMAP_MAX + 1);
  assert_non_null(bigdoc);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_SOURCEMAPS, "m", bigdoc, big), 0);
  void *back = NULL;
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_SOURCEMAPS, "m", &back, &len), 0);
  assert_int_equal(len, big);
  ember_free(back);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_SOURCEMAPS, "m", bigdoc,
                                       EMBER_STORE_DOC_SOURCEMAP_MAX + 1),
                   EMBER_ETOOBIG);
  free(bigdoc);
  assert_int_equal(ember_store_doc_each(s, EMBER_STORE_DOC_RULES, NULL, NULL), -EINVAL);
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_RULES, "k", NULL, &len), -EINVAL);
  ember_store_close(s);
  tu_store_remove(path);
}

/* Alerts resolved before a cutoff go; the caller judges, the store deletes. */
static bool resolved_before(const char *key, const void *bigdoc, size_t len, void *ctx) {
  (void)key;
  (void)len;
  long cutoff = *(const long *)ctx;
  long t = 0;
  const char *p = strstr((const char *)bigdoc, "\"resolved\":");
  if (!p || strncmp(p + 11, "null", 4) == 0) return false;
  for (p += 11; *p >= '0' && *p <= '9'; p++) t = t * 10 + (*p - '0');
  return t < cutoff;
}

static void test_store_doc_retain(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "doc", "retain");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  for (int i = 0; i < 25; i++) {
    char key[24], body[64];
    snprintf(key, sizeof key, "%016x", i);
    if (i % 5 == 0)
      snprintf(body, sizeof body, "{\"state\":\"firing\",\"resolved\":null}");
    else
      snprintf(body, sizeof body, "{\"state\":\"resolved\",\"resolved\":%d}", i * 100);
    put_str(s, EMBER_STORE_DOC_ALERTS, key, body);
  }
  long cutoff = 1250; /* resolved at 100..1200 go, except the multiples of 5 (firing) */
  uint64_t deleted = 0;
  assert_int_equal(
      ember_store_doc_retain(s, EMBER_STORE_DOC_ALERTS, resolved_before, &cutoff, 3, &deleted), 0);
  assert_int_equal(deleted, 10); /* 1..12 minus 5 and 10 */
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.alert_docs, 15);
  void *doc;
  size_t len;
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_ALERTS, "0000000000000005", &doc, &len),
                   0);
  ember_free(doc);
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_ALERTS, "0000000000000004", &doc, &len),
                   EMBER_ENOTFOUND);
  /* Again: nothing more to do. */
  assert_int_equal(
      ember_store_doc_retain(s, EMBER_STORE_DOC_ALERTS, resolved_before, &cutoff, 0, &deleted), 0);
  assert_int_equal(deleted, 0);
  assert_int_equal(ember_store_doc_retain(s, EMBER_STORE_DOC_ALERTS, NULL, NULL, 0, NULL), -EINVAL);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_doc_reopen_persists(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "doc", "reopen");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  put_str(s, EMBER_STORE_DOC_RULES, "r1", "{\"name\":\"r1\"}");
  put_str(s, EMBER_STORE_DOC_ALERTS, "0123456789abcdef", "{\"state\":\"firing\"}");
  ember_store_close(s);
  s = open_store(path);
  expect_doc(s, EMBER_STORE_DOC_RULES, "r1", "{\"name\":\"r1\"}");
  expect_doc(s, EMBER_STORE_DOC_ALERTS, "0123456789abcdef", "{\"state\":\"firing\"}");
  ember_store_close(s);
  ember_store_opts_t ro = {.read_only = true};
  s = open_opts(path, &ro);
  expect_doc(s, EMBER_STORE_DOC_ALERTS, "0123456789abcdef", "{\"state\":\"firing\"}");
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "r2", "{}", 2), -EACCES);
  assert_int_equal(ember_store_doc_del(s, EMBER_STORE_DOC_RULES, "r1"), -EACCES);
  ember_store_close(s);
  char err[512];
  uint64_t entries = 0;
  assert_int_equal(ember_store_verify(path, &entries, err, sizeof err), 0);
  tu_store_remove(path);
}

/* Rewrite the value of `key` in `table` with one byte flipped, behind the
 * store's back. */
static void flip_doc(const char *path, const char *table, const char *key) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
  assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, table, 0, &dbi), 0);
  MDB_val k = {.mv_size = strlen(key), .mv_data = (void *)(uintptr_t)key}, v;
  assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
  uint8_t buf[256];
  assert_true(v.mv_size <= sizeof buf && v.mv_size > 3);
  memcpy(buf, v.mv_data, v.mv_size);
  buf[2] ^= 0x20;
  MDB_val nv = {.mv_size = v.mv_size, .mv_data = buf};
  assert_int_equal(mdb_put(txn, dbi, &k, &nv, 0), 0);
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

static bool always(const char *key, const void *doc, size_t len, void *ctx) {
  (void)key, (void)doc, (void)len, (void)ctx;
  return true;
}

static void test_store_doc_damage_refused(void **state) {
  (void)state;
  char path[512], err[512];
  tu_store_path(path, sizeof path, "doc", "damage");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  put_str(s, EMBER_STORE_DOC_ALERTS, "a", "{\"state\":\"firing\"}");
  put_str(s, EMBER_STORE_DOC_ALERTS, "b", "{\"state\":\"resolved\"}");
  put_str(s, EMBER_STORE_DOC_ALERTS, "c", "{\"state\":\"firing\"}");
  ember_store_close(s);
  flip_doc(path, "alerts", "b");
  s = open_store(path);
  void *doc = NULL;
  size_t len = 0;
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_ALERTS, "b", &doc, &len), EMBER_ECORRUPT);
  assert_null(doc);
  expect_doc(s, EMBER_STORE_DOC_ALERTS, "a", "{\"state\":\"firing\"}");
  seen_t seen = {0};
  assert_int_equal(ember_store_doc_each(s, EMBER_STORE_DOC_ALERTS, collect, &seen), EMBER_ECORRUPT);
  assert_int_equal(seen.n, 1); /* the document before the damaged one */
  uint64_t deleted = 0;
  assert_int_equal(ember_store_doc_retain(s, EMBER_STORE_DOC_ALERTS, always, NULL, 0, &deleted),
                   EMBER_ECORRUPT);
  assert_non_null(strstr(ember_store_strerror(EMBER_ECORRUPT), "rebuild it from Kafka"));
  ember_store_close(s);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"alerts\" fails its checksum"));
  tu_store_remove(path);
}

/* A store made before the document tables: read-only it opens and reads
 * them as empty; read-write adds them. */
static void test_store_doc_old_store(void **state) {
  (void)state;
  char path[512], err[512];
  tu_store_path(path, sizeof path, "doc", "old");
  tu_store_remove(path);
  ember_store_close(open_store(path));
  {
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
    assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "rules", 0, &dbi), 0);
    assert_int_equal(mdb_drop(txn, dbi, 1), 0);
    assert_int_equal(mdb_dbi_open(txn, "alerts", 0, &dbi), 0);
    assert_int_equal(mdb_drop(txn, dbi, 1), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
  }
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), 0);
  ember_store_opts_t ro = {.read_only = true};
  ember_store_t *s = open_opts(path, &ro);
  void *doc = NULL;
  size_t len = 0;
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_RULES, "r", &doc, &len), EMBER_ENOTFOUND);
  seen_t seen = {0};
  assert_int_equal(ember_store_doc_each(s, EMBER_STORE_DOC_ALERTS, collect, &seen), 0);
  assert_int_equal(seen.n, 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.rule_docs + st.alert_docs, 0);
  assert_int_equal(ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "r", "{}", 2), -EACCES);
  ember_store_close(s);
  s = open_store(path);
  put_str(s, EMBER_STORE_DOC_RULES, "r", "{}");
  expect_doc(s, EMBER_STORE_DOC_RULES, "r", "{}");
  ember_store_close(s);
  tu_store_remove(path);
}

/* Documents that outgrow the map grow it, up to max_size, then say so. */
static void test_store_doc_map_growth(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "doc", "grow");
  tu_store_remove(path);
  ember_store_opts_t o = {
      .map_size = (size_t)1 << 20, .max_size = (size_t)8 << 20, .no_sync = true};
  ember_store_t *s = open_opts(path, &o);
  size_t len = (size_t)512 << 10;
  char *big = malloc(len);
  assert_non_null(big);
  memset(big, 'x', len);
  int rc = 0;
  int i;
  for (i = 0; i < 64 && rc == 0; i++) {
    char key[16];
    snprintf(key, sizeof key, "big%02d", i);
    rc = ember_store_doc_put(s, EMBER_STORE_DOC_ALERTS, key, big, len);
  }
  assert_int_equal(rc, EMBER_EMAPFULL);
  assert_true(i > 4); /* more than the first 1 MiB held */
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_true(st.map_grows > 0);
  assert_int_equal(st.alert_docs, (uint64_t)(i - 1));
  void *doc = NULL;
  size_t got = 0;
  assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_ALERTS, "big00", &doc, &got), 0);
  assert_int_equal(got, len);
  assert_memory_equal(doc, big, len);
  ember_free(doc);
  free(big);
  ember_store_close(s);
  tu_store_remove(path);
}

static void test_store_doc_alloc_failures(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "doc", "alloc");
  tu_store_remove(path);
  ember_store_t *s = open_store(path);
  for (int i = 0; i < 70; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%02d", i);
    put_str(s, EMBER_STORE_DOC_ALERTS, key, "{\"state\":\"resolved\",\"resolved\":1}");
  }
  /* Fail the Nth allocation for every N: each call fails cleanly (ASan
   * sees no leak) until it succeeds, and nothing half-done remains. */
  for (long n = 0;; n++) {
    ember_alloc_fail_after(n);
    seen_t seen = {0};
    int rc = ember_store_doc_each(s, EMBER_STORE_DOC_ALERTS, collect, &seen);
    ember_alloc_fail_reset();
    if (rc == 0) {
      assert_int_equal(seen.n, 70);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
  }
  for (long n = 0;; n++) {
    ember_alloc_fail_after(n);
    void *doc = NULL;
    size_t len;
    int rc = ember_store_doc_get(s, EMBER_STORE_DOC_ALERTS, "k01", &doc, &len);
    ember_alloc_fail_reset();
    if (rc == 0) {
      ember_free(doc);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
  }
  for (long n = 0;; n++) {
    ember_alloc_fail_after(n);
    int rc = ember_store_doc_put(s, EMBER_STORE_DOC_RULES, "r", "{}", 2);
    ember_alloc_fail_reset();
    if (rc == 0) break;
    assert_int_equal(rc, -ENOMEM);
    void *doc = NULL;
    size_t len;
    assert_int_equal(ember_store_doc_get(s, EMBER_STORE_DOC_RULES, "r", &doc, &len),
                     EMBER_ENOTFOUND);
  }
  for (long n = 0;; n++) {
    ember_alloc_fail_after(n);
    uint64_t deleted = 0;
    int rc = ember_store_doc_retain(s, EMBER_STORE_DOC_ALERTS, always, NULL, 0, &deleted);
    ember_alloc_fail_reset();
    if (rc == 0) break;
    assert_int_equal(rc, -ENOMEM);
    assert_int_equal(deleted, 0); /* all in one transaction: none or all */
  }
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.alert_docs, 0);
  ember_store_close(s);
  tu_store_remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_doc_put_get_del_each),
      cmocka_unit_test(test_store_doc_retain),
      cmocka_unit_test(test_store_doc_reopen_persists),
      cmocka_unit_test(test_store_doc_damage_refused),
      cmocka_unit_test(test_store_doc_old_store),
      cmocka_unit_test(test_store_doc_map_growth),
      cmocka_unit_test(test_store_doc_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
