/* What changed in a spike (collector/alert_diff.h): functions ranked by the
 * rise of their self share, matched by name and module, shares that do not
 * depend on the two profiles' sizes, empty profiles, the limit. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "alert_diff.h"

static ember_profile_t *profile(void) {
  ember_value_type_t vt = EMBER_VT_CPU_NS;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  return p;
}

/* One stack main -> leaf in `module`, worth v. */
static void add(ember_profile_t *p, const char *leaf, const char *module, int64_t v) {
  ember_frame_t f[2] = {{.function = leaf, .module = module},
                        {.function = "main", .module = "/app"}};
  assert_int_equal(ember_profile_add(p, f, 2, &v), 0);
}

static const ember__rise_t *find(const ember__rise_t *r, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(r[i].name, name) == 0) return &r[i];
  return NULL;
}

static void test_ranks_by_rise_in_share(void **state) {
  (void)state;
  ember_profile_t *base = profile(), *spike = profile();
  /* Baseline: 5% burn, 95% idle. Spike, ten times as much CPU: 90% burn. */
  add(base, "burn", "/app", 5);
  add(base, "idle", "/app", 90);
  add(base, "poll", "/lib/libc.so.6", 5);
  add(spike, "burn", "/app", 900);
  add(spike, "idle", "/app", 50);
  add(spike, "poll", "/lib/libc.so.6", 50);
  ember__rise_t *r = NULL;
  size_t n = 0;
  assert_int_equal(ember__rise(base, spike, 0, &r, &n), 0);
  assert_int_equal(n, 1); /* idle fell, poll stayed at 5% */
  assert_string_equal(r[0].name, "burn");
  assert_string_equal(r[0].module, "/app");
  assert_true(fabs(r[0].base - 0.05) < 1e-9);
  assert_true(fabs(r[0].spike - 0.90) < 1e-9);
  json_t *j = ember__rise_json(r, n);
  assert_non_null(j);
  assert_int_equal(json_array_size(j), 1);
  json_t *o = json_array_get(j, 0);
  assert_string_equal(json_string_value(json_object_get(o, "function")), "burn");
  assert_true(fabs(json_real_value(json_object_get(o, "delta")) - 0.85) < 1e-9);
  json_decref(j);
  ember__rise_free(r, n);
  ember_profile_free(base);
  ember_profile_free(spike);
}

static void test_same_name_other_module_is_another_function(void **state) {
  (void)state;
  ember_profile_t *base = profile(), *spike = profile();
  add(base, "work", "/a", 50);
  add(base, "work", "/b", 50);
  add(spike, "work", "/a", 20);
  add(spike, "work", "/b", 80);
  ember__rise_t *r = NULL;
  size_t n = 0;
  assert_int_equal(ember__rise(base, spike, 0, &r, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(r[0].module, "/b");
  ember__rise_free(r, n);
  ember_profile_free(base);
  ember_profile_free(spike);
}

static void test_empty_baseline_and_limit(void **state) {
  (void)state;
  ember_profile_t *base = profile(), *spike = profile();
  add(spike, "a", "/app", 10);
  add(spike, "b", "/app", 30);
  add(spike, "c", "/app", 60);
  ember__rise_t *r = NULL;
  size_t n = 0;
  assert_int_equal(ember__rise(base, spike, 2, &r, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(r[0].name, "c");
  assert_string_equal(r[1].name, "b");
  assert_true(r[0].base == 0);
  ember__rise_free(r, n);
  /* An empty spike: nothing rose. */
  assert_int_equal(ember__rise(spike, base, 0, &r, &n), 0);
  assert_int_equal(n, 0);
  ember__rise_free(r, n);
  assert_null(find(r, 0, "a"));
  assert_int_equal(ember__rise(NULL, spike, 0, &r, &n), -EINVAL);
  ember_profile_free(base);
  ember_profile_free(spike);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ranks_by_rise_in_share),
      cmocka_unit_test(test_same_name_other_module_is_another_function),
      cmocka_unit_test(test_empty_baseline_and_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
