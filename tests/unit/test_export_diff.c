/* The diff tree exporter: two profiles in one tree with both totals,
 * functions matched across profiles (and what their frames agree on), the
 * node cap, argument checks and allocation failures. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "ember/export.h"

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

/* Add a stack given root first as a ';'-separated string. */
static void add(ember_profile_t *p, const char *stack, int64_t samples) {
  ember_frame_t frames[16];
  char names[16][32];
  size_t n = 0;
  const char *s = stack;
  while (*s && n < 16) {
    const char *e = strchr(s, ';');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    assert_true(len < sizeof names[0]);
    memcpy(names[n], s, len);
    names[n][len] = '\0';
    n++;
    s += len + (e ? 1 : 0);
  }
  for (size_t i = 0; i < n; i++) /* leaf first */
    frames[i] = (ember_frame_t){.function = names[n - 1 - i], .module = "/bin/app"};
  int64_t v[2] = {samples, samples * 1000};
  assert_int_equal(ember_profile_add(p, frames, n, v), 0);
}

static ember_profile_t *profile(void) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  return p;
}

static json_t *diff_json(const ember_profile_t *a, const ember_profile_t *b, size_t max_nodes) {
  ember_buf_t out;
  ember_buf_init(&out, 1 << 20);
  ember_tree_diff_opts_t o = {.base_vi = 1, .vs_vi = 1, .max_nodes = max_nodes};
  assert_int_equal(ember_export_tree_diff(a, b, &o, &out), 0);
  json_error_t err;
  json_t *j = json_loadb(out.data, out.len, 0, &err);
  if (j == NULL) fail_msg("bad JSON: %s\n%s", err.text, out.data);
  ember_buf_free(&out);
  return j;
}

static json_t *child(json_t *node, const char *name) {
  json_t *c;
  size_t i;
  json_array_foreach(json_object_get(node, "children"), i, c) {
    if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0) return c;
  }
  return NULL;
}

static json_int_t ival(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  assert_non_null(v);
  return json_integer_value(v);
}

static void test_export_diff_totals_per_node(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  add(a, "main;work;hot", 30);
  add(a, "main;work;cold", 10);
  add(a, "main;idle", 5);
  add(b, "main;work;hot", 10);
  add(b, "main;work;newfn", 20);
  add(b, "main;idle", 5);
  json_t *j = diff_json(a, b, 0);
  assert_string_equal(json_string_value(json_object_get(j, "type")), "cpu");
  assert_string_equal(json_string_value(json_object_get(j, "unit")), "nanoseconds");
  assert_int_equal(ival(json_object_get(j, "base"), "total"), 45000);
  assert_int_equal(ival(json_object_get(j, "vs"), "total"), 35000);
  assert_true(json_is_false(json_object_get(j, "truncated")));
  assert_int_equal(ival(j, "nodes"), 7); /* all main work hot cold newfn idle */
  json_t *root = json_object_get(j, "root");
  assert_string_equal(json_string_value(json_object_get(root, "name")), "all");
  assert_int_equal(ival(root, "base"), 45000);
  assert_int_equal(ival(root, "vs"), 35000);
  json_t *work = child(child(root, "main"), "work");
  assert_non_null(work);
  assert_int_equal(ival(work, "base"), 40000);
  assert_int_equal(ival(work, "vs"), 30000);
  json_t *hot = child(work, "hot"), *cold = child(work, "cold"), *nf = child(work, "newfn");
  assert_int_equal(ival(hot, "base"), 30000);
  assert_int_equal(ival(hot, "vs"), 10000);
  assert_int_equal(ival(hot, "base_self"), 30000);
  assert_int_equal(ival(cold, "vs"), 0);
  assert_int_equal(ival(nf, "base"), 0);
  assert_int_equal(ival(nf, "vs"), 20000);
  assert_string_equal(json_string_value(json_object_get(nf, "module")), "/bin/app");
  /* Siblings by the larger total: hot (30000) before newfn (20000). */
  json_t *first = json_array_get(json_object_get(work, "children"), 0);
  assert_string_equal(json_string_value(json_object_get(first, "name")), "hot");
  json_decref(j);
  ember_profile_free(a);
  ember_profile_free(b);
}

static void test_export_diff_cap_keeps_totals(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  add(a, "main;work;hot", 30);
  add(a, "main;work;cold", 10);
  add(a, "main;idle", 5);
  add(b, "main;work;newfn", 20);
  json_t *j = diff_json(a, b, 4); /* all main work hot */
  assert_true(json_is_true(json_object_get(j, "truncated")));
  assert_int_equal(ival(j, "nodes"), 4);
  json_t *root = json_object_get(j, "root");
  assert_int_equal(ival(root, "base"), 45000);
  assert_int_equal(ival(root, "vs"), 20000);
  json_t *main_ = child(root, "main");
  assert_null(child(main_, "idle"));
  assert_int_equal(ival(main_, "base_self"), 5000); /* idle folded in */
  json_t *work = child(main_, "work");
  assert_int_equal(ival(work, "base_self"), 10000); /* cold */
  assert_int_equal(ival(work, "vs_self"), 20000);   /* newfn */
  assert_int_equal(json_array_size(json_object_get(work, "children")), 1);
  json_decref(j);
  ember_profile_free(a);
  ember_profile_free(b);
}

static void test_export_diff_empty_and_bad_args(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  json_t *j = diff_json(a, b, 10);
  assert_int_equal(ival(j, "nodes"), 1);
  assert_int_equal(ival(json_object_get(j, "root"), "base"), 0);
  json_decref(j);

  ember_buf_t out;
  ember_buf_init(&out, 1 << 20);
  ember_tree_diff_opts_t o = {.base_vi = 0, .vs_vi = 1};
  assert_int_equal(ember_export_tree_diff(a, b, &o, &out), EMBER_EMISMATCH);
  o.vs_vi = 2;
  assert_int_equal(ember_export_tree_diff(a, b, &o, &out), -EINVAL);
  assert_int_equal(ember_export_tree_diff(NULL, b, &o, &out), -EINVAL);
  assert_int_equal(out.len, 0);
  ember_buf_free(&out);
  ember_profile_free(a);
  ember_profile_free(b);
}

static void test_export_diff_too_big_leaves_buffer(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  add(a, "main;work;hot", 30);
  add(b, "main;work;hot", 10);
  ember_buf_t out;
  ember_buf_init(&out, 40);
  assert_int_equal(ember_buf_puts(&out, "keep"), 0);
  ember_tree_diff_opts_t o = {.base_vi = 1, .vs_vi = 1};
  assert_int_equal(ember_export_tree_diff(a, b, &o, &out), EMBER_ETOOBIG);
  assert_string_equal(out.data, "keep");
  ember_buf_free(&out);
  ember_profile_free(a);
  ember_profile_free(b);
}

static void test_export_diff_invalid_utf8_name(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  add(a, "main;bad\xff;ok\xc3\xa9", 3);
  json_t *j = diff_json(a, b, 0);
  json_t *bad = json_array_get(
      json_object_get(json_array_get(json_object_get(json_object_get(j, "root"), "children"), 0),
                      "children"),
      0);
  assert_string_equal(json_string_value(json_object_get(bad, "name")), "bad\xef\xbf\xbd");
  json_t *ok = json_array_get(json_object_get(bad, "children"), 0);
  assert_string_equal(json_string_value(json_object_get(ok, "name")), "ok\xc3\xa9");
  json_decref(j);
  ember_profile_free(a);
  ember_profile_free(b);
}

/* Fail the Nth allocation for every N: an error or success, never a crash
 * or leak (ASan checks the leaks). */
static void test_export_diff_alloc_failures(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  add(a, "main;work;hot", 30);
  add(a, "main;work;cold", 10);
  add(b, "main;work;newfn", 20);
  ember_tree_diff_opts_t o = {.base_vi = 1, .vs_vi = 1, .max_nodes = 3};
  for (long n = 0; n < 10000; n++) {
    ember_buf_t out;
    ember_buf_init(&out, 1 << 20);
    ember_alloc_fail_after(n);
    int rc = ember_export_tree_diff(a, b, &o, &out);
    long used = ember_alloc_fail_reset();
    ember_buf_free(&out);
    if (rc == 0 && used <= n) break;
    assert_true(rc == 0 || rc == -ENOMEM);
  }
  ember_profile_free(a);
  ember_profile_free(b);
}

/* A function's file, line and generated name travel into the diff where
 * both profiles' frames agree on them, and are left out where they do not
 * (two builds of one bundle: the same function from different places). */
static void test_export_diff_keeps_what_frames_agree_on(void **state) {
  (void)state;
  ember_profile_t *a = profile(), *b = profile();
  int64_t v[2] = {3, 3000};
  ember_frame_t fa = {.function = "alphaWork",
                      .module = "/srv/app/dist/app.js",
                      .file = "/srv/app/src/alpha.ts",
                      .line = 2,
                      .generated = "a /srv/app/dist/app.js:1:11",
                      .kind = EMBER_FRAME_JIT};
  ember_frame_t fa2 = fa;
  fa2.generated = "q /srv/app/dist/app.js:1:90"; /* the other build */
  ember_frame_t fb = {.function = "betaWork",
                      .module = "/srv/app/dist/app.js",
                      .file = "/srv/app/src/beta.ts",
                      .line = 7,
                      .generated = "b /srv/app/dist/app.js:1:33",
                      .kind = EMBER_FRAME_JIT};
  ember_frame_t root = {.function = "main", .module = "/usr/bin/node"};
  ember_frame_t s1[] = {fa, root}, s2[] = {fa2, root}, s3[] = {fb, root};
  assert_int_equal(ember_profile_add(a, s1, 2, v), 0);
  assert_int_equal(ember_profile_add(a, s3, 2, v), 0);
  assert_int_equal(ember_profile_add(b, s2, 2, v), 0);
  assert_int_equal(ember_profile_add(b, s3, 2, v), 0);
  json_t *j = diff_json(a, b, 0);
  json_t *m = child(json_object_get(j, "root"), "main");
  assert_non_null(m);
  json_t *na = child(m, "alphaWork"), *nb = child(m, "betaWork");
  assert_non_null(na);
  assert_non_null(nb);
  assert_string_equal(json_string_value(json_object_get(na, "file")), "/srv/app/src/alpha.ts");
  assert_int_equal(json_integer_value(json_object_get(na, "line")), 2);
  assert_null(json_object_get(na, "generated"));
  assert_string_equal(json_string_value(json_object_get(nb, "generated")),
                      "b /srv/app/dist/app.js:1:33");
  assert_string_equal(json_string_value(json_object_get(nb, "file")), "/srv/app/src/beta.ts");
  assert_int_equal(json_integer_value(json_object_get(nb, "base")), 3000);
  assert_int_equal(json_integer_value(json_object_get(nb, "vs")), 3000);
  assert_null(json_object_get(m, "file"));
  json_decref(j);
  ember_profile_free(a);
  ember_profile_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_export_diff_totals_per_node),
      cmocka_unit_test(test_export_diff_cap_keeps_totals),
      cmocka_unit_test(test_export_diff_empty_and_bad_args),
      cmocka_unit_test(test_export_diff_too_big_leaves_buffer),
      cmocka_unit_test(test_export_diff_invalid_utf8_name),
      cmocka_unit_test(test_export_diff_alloc_failures),
      cmocka_unit_test(test_export_diff_keeps_what_frames_agree_on),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
