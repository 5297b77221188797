/* The target registry: records from ember.targets, replaced by key,
 * deleted by tombstones, listed by selector; bad records are refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "registry.h"

/* Records carry char *; the test's literals are never written through. */
#define S(lit) ((char *)(uintptr_t)(lit))

static void apply(ember__registry_t *r, const char *key, const char *host, const char *worker,
                  const char *version, const char *actor, uint32_t pid, int64_t seen) {
  ember_target_record_t t = {.agent_id = S("agent-1"),
                             .host = (char *)(uintptr_t)host,
                             .worker = (char *)(uintptr_t)worker,
                             .version = (char *)(uintptr_t)version,
                             .actor = (char *)(uintptr_t)actor,
                             .comm = S("node"),
                             .pid = pid,
                             .seen_ns = seen};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_target(&t, &b), 0);
  char err[256];
  assert_int_equal(ember__registry_apply(r, key, strlen(key), b.data, b.len, err, sizeof err), 0);
  ember_buf_free(&b);
}

static void test_registry_apply_list_delete(void **state) {
  (void)state;
  ember__registry_t *r = NULL;
  assert_int_equal(ember__registry_new(&r), 0);
  apply(r, "h1/10", "h1", "api", "1.0", NULL, 10, 100);
  apply(r, "h2/20", "h2", "api", "1.1", "room-7", 20, 200);
  apply(r, "h1/30", "h1", "billing", "3", NULL, 30, 300);
  assert_int_equal(ember__registry_count(r), 3);

  ember_target_record_t *l = NULL;
  size_t n = 0;
  ember_store_selector_t sel = {.worker = "api"};
  assert_int_equal(ember__registry_list(r, &sel, 0, &l, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(l[0].host, "h1"); /* sorted by key: h1/10 < h2/20 */
  assert_string_equal(l[1].actor, "room-7");
  assert_int_equal(l[1].pid, 20);
  ember__registry_list_free(l, n);

  ember_store_selector_t by_actor = {.actor = "room-7"};
  assert_int_equal(ember__registry_list(r, &by_actor, 0, &l, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(l[0].version, "1.1");
  ember__registry_list_free(l, n);

  /* Seen-after filter, and a re-announcement replaces in place. */
  assert_int_equal(ember__registry_list(r, NULL, 250, &l, &n), 0);
  assert_int_equal(n, 1);
  ember__registry_list_free(l, n);
  apply(r, "h1/10", "h1", "api", "1.2", NULL, 10, 400);
  assert_int_equal(ember__registry_count(r), 3);
  ember_store_selector_t v12 = {.version = "1.2"};
  assert_int_equal(ember__registry_list(r, &v12, 0, &l, &n), 0);
  assert_int_equal(n, 1);
  assert_int_equal(l[0].seen_ns, 400);
  ember__registry_list_free(l, n);

  /* Tombstones delete; one for an unknown key is harmless. */
  char err[256];
  assert_int_equal(ember__registry_apply(r, "h2/20", 5, NULL, 0, err, sizeof err), 0);
  assert_int_equal(ember__registry_apply(r, "h9/99", 5, NULL, 0, err, sizeof err), 0);
  assert_int_equal(ember__registry_count(r), 2);
  ember_store_selector_t none = {.worker = "nobody"};
  assert_int_equal(ember__registry_list(r, &none, 0, &l, &n), 0);
  assert_int_equal(n, 0);
  assert_null(l);
  ember__registry_free(r);
}

static void test_registry_refuses_bad_input(void **state) {
  (void)state;
  ember__registry_t *r = NULL;
  assert_int_equal(ember__registry_new(&r), 0);
  apply(r, "h1/10", "h1", "api", "1.0", NULL, 10, 100);
  char err[256] = "";
  static const char junk[] = "\xff\xff\xff not a target";
  assert_int_not_equal(ember__registry_apply(r, "h1/10", 5, junk, sizeof junk, err, sizeof err), 0);
  assert_true(strlen(err) > 0);
  assert_int_equal(ember__registry_apply(r, "", 0, junk, sizeof junk, err, sizeof err), -EINVAL);
  /* The old record survives a bad update. */
  assert_int_equal(ember__registry_count(r), 1);
  ember_target_record_t *l = NULL;
  size_t n = 0;
  assert_int_equal(ember__registry_list(r, NULL, 0, &l, &n), 0);
  assert_string_equal(l[0].version, "1.0");
  ember__registry_list_free(l, n);
  ember__registry_free(r);
}

static void test_registry_alloc_failures(void **state) {
  (void)state;
  for (unsigned fail = 0; fail < 200; fail++) {
    ember__registry_t *r = NULL;
    ember_alloc_fail_after(fail);
    if (ember__registry_new(&r) != 0) {
      ember_alloc_fail_reset();
      continue;
    }
    ember_alloc_fail_reset();
    apply(r, "h1/10", "h1", "api", "1.0", NULL, 10, 100);
    ember_target_record_t t = {.host = S("h2"), .worker = S("api"), .pid = 20};
    ember_buf_t b;
    ember_buf_init(&b, 1 << 16);
    assert_int_equal(ember_codec_encode_target(&t, &b), 0);
    char err[128];
    ember_alloc_fail_after(fail);
    int arc = ember__registry_apply(r, "h2/20", 5, b.data, b.len, err, sizeof err);
    ember_alloc_fail_reset();
    ember_buf_free(&b);
    assert_true(arc == 0 || arc == -ENOMEM || arc == EMBER_ECORRUPT);
    assert_int_equal(ember__registry_count(r), arc == 0 ? 2 : 1);
    ember_alloc_fail_after(fail);
    ember_target_record_t *l = NULL;
    size_t n = 0;
    int rc = ember__registry_list(r, NULL, 0, &l, &n);
    ember_alloc_fail_reset();
    assert_true(rc == 0 || rc == -ENOMEM);
    if (rc == 0) ember__registry_list_free(l, n);
    ember__registry_free(r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_registry_apply_list_delete),
      cmocka_unit_test(test_registry_refuses_bad_input),
      cmocka_unit_test(test_registry_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
