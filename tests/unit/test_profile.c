/* The profile model: interning, aggregation, exact merge, top functions. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/profile.h"

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

static ember_frame_t fn(const char *name) {
  return (ember_frame_t){
      .function = name, .file = "prog.c", .module = "/usr/bin/prog", .build_id = "abcd", .line = 1};
}

/* Add a stack given root-first names (easier to read), with `n` samples. */
static void add_path(ember_profile_t *p, const char *path, int64_t n) {
  ember_frame_t frames[32];
  size_t depth = 0;
  char copy[256];
  snprintf(copy, sizeof copy, "%s", path);
  char *names[32];
  for (char *save = NULL, *t = strtok_r(copy, ";", &save); t; t = strtok_r(NULL, ";", &save))
    names[depth++] = t;
  for (size_t i = 0; i < depth; i++) frames[i] = fn(names[depth - 1 - i]);
  int64_t values[2] = {n, n * 1000000};
  assert_int_equal(ember_profile_add(p, frames, depth, values), 0);
}

static ember_profile_t *new_cpu(void) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  return p;
}

static void test_profile_new_rejects_bad_types(void **state) {
  (void)state;
  ember_profile_t *p = NULL;
  ember_value_type_t dup[] = {EMBER_VT_CPU_NS, EMBER_VT_CPU_NS};
  ember_value_type_t bad[] = {(ember_value_type_t)99};
  assert_int_equal(ember_profile_new(dup, 2, &p), -EINVAL);
  assert_int_equal(ember_profile_new(bad, 1, &p), -EINVAL);
  assert_int_equal(ember_profile_new(cpu_types, 0, &p), -EINVAL);
  assert_int_equal(ember_profile_new(cpu_types, EMBER_MAX_VALUE_TYPES + 1, &p), -EINVAL);
  assert_null(p);
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  assert_int_equal(ember_profile_ntypes(p), 2);
  assert_int_equal(ember_profile_type(p, 1), EMBER_VT_CPU_NS);
  assert_int_equal(ember_profile_type_index(p, EMBER_VT_CPU_NS), 1);
  assert_int_equal(ember_profile_type_index(p, EMBER_VT_ALLOC_BYTES), -1);
  ember_profile_free(p);
  ember_profile_free(NULL);
}

static void test_profile_interns_frames_and_stacks(void **state) {
  (void)state;
  ember_profile_t *p = new_cpu();
  ember_frame_t a = fn("alpha");
  char name[] = "alpha"; /* same text, different pointer */
  ember_frame_t a2 = fn(name);
  ember_frame_t b = fn("beta");
  uint32_t ia, ia2, ib;
  assert_int_equal(ember_profile_intern_frame(p, &a, &ia), 0);
  assert_int_equal(ember_profile_intern_frame(p, &a2, &ia2), 0);
  assert_int_equal(ember_profile_intern_frame(p, &b, &ib), 0);
  assert_int_equal(ia, ia2);
  assert_int_not_equal(ia, ib);
  assert_int_equal(ember_profile_nframes(p), 2);
  /* Stored copies, not the caller's pointers. */
  assert_ptr_not_equal(ember_profile_frame(p, ia)->function, name);
  assert_string_equal(ember_profile_frame(p, ia)->function, "alpha");
  assert_null(ember_profile_frame(p, 7));

  /* A frame differing only in line is a different frame. */
  ember_frame_t a_l2 = a;
  a_l2.line = 2;
  uint32_t il2;
  assert_int_equal(ember_profile_intern_frame(p, &a_l2, &il2), 0);
  assert_int_not_equal(il2, ia);

  uint32_t s1[] = {ib, ia}, s2[] = {ia, ib}, sid1, sid2, sid3;
  int64_t v[] = {3, 30};
  assert_int_equal(ember_profile_add_ids(p, s1, 2, v, &sid1), 0);
  assert_int_equal(ember_profile_add_ids(p, s2, 2, v, &sid2), 0);
  assert_int_equal(ember_profile_add_ids(p, s1, 2, v, &sid3), 0);
  assert_int_equal(sid1, sid3);
  assert_int_not_equal(sid1, sid2);
  assert_int_equal(ember_profile_nstacks(p), 2);
  const uint32_t *ids;
  size_t depth;
  const int64_t *vals;
  assert_int_equal(ember_profile_stack(p, sid1, &ids, &depth, &vals), 0);
  assert_int_equal(depth, 2);
  assert_int_equal(ids[0], ib);
  assert_int_equal(vals[0], 6);
  assert_int_equal(vals[1], 60);
  assert_int_equal(ember_profile_total(p, 0), 9);
  assert_int_equal(ember_profile_total(p, 1), 90);
  assert_int_equal(ember_profile_stack(p, 99, &ids, &depth, &vals), -EINVAL);
  ember_profile_free(p);
}

static void test_profile_add_rejects_bad_input(void **state) {
  (void)state;
  ember_profile_t *p = new_cpu();
  ember_frame_t a = fn("a");
  uint32_t ia;
  assert_int_equal(ember_profile_intern_frame(p, &a, &ia), 0);
  int64_t v[] = {1, 1}, neg[] = {1, -1}, big[] = {INT64_MAX, 1};
  uint32_t bad_id[] = {ia + 1};
  uint32_t ok[] = {ia};
  assert_int_equal(ember_profile_add_ids(p, bad_id, 1, v, NULL), -EINVAL);
  assert_int_equal(ember_profile_add_ids(p, ok, 0, v, NULL), -EINVAL);
  assert_int_equal(ember_profile_add_ids(p, ok, EMBER_MAX_STACK_DEPTH + 1, v, NULL), -EINVAL);
  assert_int_equal(ember_profile_add_ids(p, ok, 1, neg, NULL), -EINVAL);
  assert_int_equal(ember_profile_add_ids(p, ok, 1, big, NULL), 0);
  /* Overflow: nothing of the second add lands, not even the second value. */
  assert_int_equal(ember_profile_add_ids(p, ok, 1, v, NULL), -ERANGE);
  assert_int_equal(ember_profile_total(p, 0), INT64_MAX);
  assert_int_equal(ember_profile_total(p, 1), 1);
  ember_frame_t bad_kind = a;
  bad_kind.kind = (ember_frame_kind_t)7;
  assert_int_equal(ember_profile_intern_frame(p, &bad_kind, &ia), -EINVAL);
  ember_profile_free(p);
}

static void test_profile_long_strings_are_capped(void **state) {
  (void)state;
  ember_profile_t *p = new_cpu();
  char *longname = malloc(EMBER_MAX_STRING * 3);
  memset(longname, 'x', EMBER_MAX_STRING * 3 - 1);
  longname[EMBER_MAX_STRING * 3 - 1] = '\0';
  ember_frame_t f = fn(longname);
  uint32_t id;
  assert_int_equal(ember_profile_intern_frame(p, &f, &id), 0);
  assert_int_equal(strlen(ember_profile_frame(p, id)->function), EMBER_MAX_STRING);
  free(longname);
  ember_profile_free(p);
}

static void test_profile_metadata(void **state) {
  (void)state;
  ember_profile_t *p = new_cpu();
  ember_labels_t l = {"api", "1.2", "host-a", NULL, 42};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  const ember_labels_t *got = ember_profile_labels(p);
  assert_string_equal(got->worker, "api");
  assert_string_equal(got->version, "1.2");
  assert_string_equal(got->host, "host-a");
  assert_null(got->actor);
  assert_int_equal(got->pid, 42);
  assert_int_equal(ember_profile_set_window(p, 20, 10), -EINVAL);
  assert_int_equal(ember_profile_set_window(p, 10, 20), 0);
  int64_t s, e;
  ember_profile_window(p, &s, &e);
  assert_int_equal(s, 10);
  assert_int_equal(e, 20);
  ember_profile_set_period(p, 52631578);
  assert_int_equal(ember_profile_period(p), 52631578);
  assert_int_equal(ember_profile_set_origin(p, "agent-1", 7, "sess-9"), 0);
  assert_string_equal(ember_profile_agent_id(p), "agent-1");
  assert_int_equal(ember_profile_seq(p), 7);
  assert_string_equal(ember_profile_session_id(p), "sess-9");
  assert_int_equal(ember_profile_set_origin(p, NULL, 0, NULL), 0);
  assert_null(ember_profile_agent_id(p));
  ember_profile_free(p);
}

static void test_profile_frame_name(void **state) {
  (void)state;
  char buf[64];
  ember_frame_t f = {.function = "main"};
  assert_int_equal(ember_frame_name(&f, buf, sizeof buf), 4);
  assert_string_equal(buf, "main");
  f = (ember_frame_t){.module = "/usr/lib/libc.so.6", .address = 0x1f2e};
  ember_frame_name(&f, buf, sizeof buf);
  assert_string_equal(buf, "libc.so.6+0x1f2e");
  f = (ember_frame_t){0};
  ember_frame_name(&f, buf, sizeof buf);
  assert_string_equal(buf, "[unknown]");
  f = (ember_frame_t){.function = "a_rather_long_function_name"};
  assert_int_equal(ember_frame_name(&f, buf, 8), strlen("a_rather_long_function_name"));
  assert_string_equal(buf, "a_rathe");
}

/* Summed values per root-first path, for comparing profiles by content. */
static int64_t value_of(const ember_profile_t *p, const char *path, size_t vi) {
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *vals;
    ember_profile_stack(p, s, &ids, &depth, &vals);
    char buf[256] = "";
    size_t n = 0;
    for (size_t i = depth; i-- > 0;) {
      int k = snprintf(buf + n, sizeof buf - n, "%s%s", n ? ";" : "",
                       ember_profile_frame(p, ids[i])->function);
      n += (size_t)k;
    }
    if (strcmp(buf, path) == 0) return vals[vi];
  }
  return 0;
}

static void test_profile_merge_is_exact_and_associative(void **state) {
  (void)state;
  ember_profile_t *a = new_cpu(), *b = new_cpu(), *c = new_cpu();
  add_path(a, "main;work;hot", 30);
  add_path(a, "main;idle", 5);
  add_path(b, "main;work;hot", 12);
  add_path(b, "main;work;cold", 10);
  add_path(c, "main;idle", 1);
  add_path(c, "main;other", 7);
  ember_profile_set_window(a, 100, 200);
  ember_profile_set_window(b, 200, 300);
  ember_profile_set_window(c, 50, 60);

  /* (a + b) + c */
  ember_profile_t *left = new_cpu();
  assert_int_equal(ember_profile_merge(left, a), 0);
  assert_int_equal(ember_profile_merge(left, b), 0);
  assert_int_equal(ember_profile_merge(left, c), 0);
  /* a + (b + c) */
  ember_profile_t *bc = new_cpu(), *right = new_cpu();
  assert_int_equal(ember_profile_merge(bc, b), 0);
  assert_int_equal(ember_profile_merge(bc, c), 0);
  assert_int_equal(ember_profile_merge(right, a), 0);
  assert_int_equal(ember_profile_merge(right, bc), 0);

  const char *paths[] = {"main;work;hot", "main;idle", "main;work;cold", "main;other"};
  const int64_t want[] = {42, 6, 10, 7};
  for (size_t i = 0; i < 4; i++) {
    assert_int_equal(value_of(left, paths[i], 0), want[i]);
    assert_int_equal(value_of(right, paths[i], 0), want[i]);
    assert_int_equal(value_of(left, paths[i], 1), want[i] * 1000000);
    assert_int_equal(value_of(right, paths[i], 1), want[i] * 1000000);
  }
  assert_int_equal(ember_profile_nstacks(left), 4);
  assert_int_equal(ember_profile_nstacks(right), 4);
  assert_int_equal(ember_profile_total(left, 0), 65);
  int64_t s, e;
  ember_profile_window(left, &s, &e);
  assert_int_equal(s, 50);
  assert_int_equal(e, 300);

  /* Merging a profile into itself doubles it. */
  assert_int_equal(ember_profile_merge(c, c), 0);
  assert_int_equal(value_of(c, "main;other", 0), 14);
  assert_int_equal(ember_profile_nstacks(c), 2);

  ember_value_type_t other[] = {EMBER_VT_ALLOC_BYTES};
  ember_profile_t *mem = NULL;
  assert_int_equal(ember_profile_new(other, 1, &mem), 0);
  assert_int_equal(ember_profile_merge(mem, a), EMBER_EMISMATCH);
  ember_profile_free(mem);
  ember_profile_free(a);
  ember_profile_free(b);
  ember_profile_free(c);
  ember_profile_free(bc);
  ember_profile_free(left);
  ember_profile_free(right);
}

static void test_profile_merge_keeps_period_only_when_equal(void **state) {
  (void)state;
  ember_profile_t *a = new_cpu(), *b = new_cpu(), *m = new_cpu();
  add_path(a, "main", 1);
  add_path(b, "main", 1);
  ember_profile_set_period(a, 1000000);
  ember_profile_set_period(b, 1000000);
  assert_int_equal(ember_profile_merge(m, a), 0);
  assert_int_equal(ember_profile_period(m), 1000000);
  assert_int_equal(ember_profile_merge(m, b), 0);
  assert_int_equal(ember_profile_period(m), 1000000);
  ember_profile_set_period(b, 52631578);
  assert_int_equal(ember_profile_merge(m, b), 0);
  assert_int_equal(ember_profile_period(m), 0);
  ember_profile_free(a);
  ember_profile_free(b);
  ember_profile_free(m);
}

static void test_profile_top_self_and_total(void **state) {
  (void)state;
  ember_profile_t *p = new_cpu();
  add_path(p, "main;work;hot", 30);
  add_path(p, "main;work;cold", 10);
  add_path(p, "main;idle", 5);
  add_path(p, "main;rec;rec;rec", 4); /* recursion counts once in total */
  ember_top_entry_t *top = NULL;
  size_t n = 0;
  assert_int_equal(ember_profile_top(p, 0, EMBER_TOP_BY_SELF, 0, &top, &n), 0);
  assert_int_equal(n, 6);
  assert_string_equal(top[0].name, "hot");
  assert_int_equal(top[0].self, 30);
  assert_int_equal(top[0].total, 30);
  assert_string_equal(top[1].name, "cold");
  assert_string_equal(top[2].name, "idle");
  assert_string_equal(top[3].name, "rec");
  assert_int_equal(top[3].self, 4);
  assert_int_equal(top[3].total, 4);
  assert_string_equal(top[3].module, "/usr/bin/prog");
  ember_top_free(top, n);

  assert_int_equal(ember_profile_top(p, 1, EMBER_TOP_BY_TOTAL, 2, &top, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(top[0].name, "main");
  assert_int_equal(top[0].total, 49 * 1000000);
  assert_int_equal(top[0].self, 0);
  assert_string_equal(top[1].name, "work");
  assert_int_equal(top[1].total, 40 * 1000000);
  ember_top_free(top, n);
  assert_int_equal(ember_profile_top(p, 2, EMBER_TOP_BY_SELF, 0, &top, &n), -EINVAL);
  ember_profile_free(p);
}

static void test_profile_many_stacks(void **state) {
  (void)state;
  /* Enough stacks and frames to grow every table several times. */
  ember_profile_t *p = new_cpu();
  char a[32], b[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(a, sizeof a, "f%d", i % 700);
    snprintf(b, sizeof b, "g%d", i);
    ember_frame_t fr[3] = {fn(b), fn(a), fn("main")};
    int64_t v[2] = {1, 2};
    assert_int_equal(ember_profile_add(p, fr, 3, v), 0);
    assert_int_equal(ember_profile_add(p, fr, 3, v), 0);
  }
  assert_int_equal(ember_profile_nstacks(p), 5000);
  assert_int_equal(ember_profile_nframes(p), 5000 + 700 + 1);
  assert_int_equal(ember_profile_total(p, 0), 10000);
  assert_int_equal(ember_profile_total(p, 1), 20000);
  ember_profile_free(p);
}

/* Interned strings and frames built from them, as the decoder uses them;
 * the content hash is equal across profiles and differs with any field. */
static void test_profile_interned_strings_and_frame_hash(void **state) {
  (void)state;
  ember_profile_t *a = new_cpu(), *b = new_cpu();
  assert_int_equal(ember_profile_reserve(a, 10, 10, 10, 100), 0);
  const char *s1 = NULL, *s2 = NULL, *s3 = NULL;
  assert_int_equal(ember_profile_intern_string(a, "main.c and more", 6, &s1), 0);
  assert_string_equal(s1, "main.c");
  assert_int_equal(ember_profile_string_len(s1), 6);
  assert_int_equal(ember_profile_intern_string(a, "main.c", 100, &s2), 0);
  assert_ptr_equal(s1, s2);
  assert_int_equal(ember_profile_intern_string(a, "", 0, &s3), 0);
  assert_string_equal(s3, "");
  assert_int_equal(ember_profile_string_len(s3), 0);
  assert_int_equal(ember_profile_string_len(NULL), 0);

  ember_frame_t f = fn("work");
  uint32_t ia, ib, ic;
  assert_int_equal(ember_profile_intern_frame(a, &f, &ia), 0);
  assert_int_equal(ember_profile_intern_frame(b, &f, &ib), 0);
  assert_int_equal(ember_profile_frame_hash(a, ia), ember_profile_frame_hash(b, ib));
  assert_int_equal(ember_profile_string_len(ember_profile_frame(a, ia)->build_id), 4);
  /* The same frame from interned pointers is the same id. */
  ember_frame_t g = *ember_profile_frame(a, ia);
  assert_int_equal(ember_profile_intern_frame_interned(a, &g, &ic), 0);
  assert_int_equal(ic, ia);
  g.line = 2;
  assert_int_equal(ember_profile_intern_frame_interned(a, &g, &ic), 0);
  assert_int_not_equal(ic, ia);
  assert_int_not_equal(ember_profile_frame_hash(a, ic), ember_profile_frame_hash(a, ia));
  g.line = 1;
  g.file = NULL;
  assert_int_equal(ember_profile_intern_frame_interned(a, &g, &ic), 0);
  assert_int_not_equal(ember_profile_frame_hash(a, ic), ember_profile_frame_hash(a, ia));
  g.file = s3; /* "" is not NULL */
  uint32_t id2;
  assert_int_equal(ember_profile_intern_frame_interned(a, &g, &id2), 0);
  assert_int_not_equal(id2, ic);
  assert_int_equal(ember_profile_frame_hash(a, 999), 0);
  assert_int_equal(ember_profile_intern_string(NULL, "x", 1, &s1), -EINVAL);
  assert_int_equal(ember_profile_reserve(NULL, 1, 1, 1, 1), -EINVAL);
  ember_profile_free(a);
  ember_profile_free(b);
}

/* Fail the Nth allocation for every N: each call fails cleanly or succeeds,
 * and ASan (in the sanitizer build) proves nothing leaks on any path. */
static void test_profile_survives_allocation_failures(void **state) {
  (void)state;
  ember_profile_t *src = new_cpu();
  add_path(src, "main;work;hot", 3);
  add_path(src, "main;idle", 2);
  for (long n = 0;; n++) {
    ember_alloc_fail_after(n);
    ember_profile_t *p = NULL;
    int rc = ember_profile_new(cpu_types, 2, &p);
    ember_top_entry_t *top = NULL;
    size_t count = 0;
    ember_labels_t l = {"w", "v", "h", "a", 1};
    if (rc == 0) rc = ember_profile_set_labels(p, &l);
    if (rc == 0) rc = ember_profile_set_origin(p, "agent", 1, "s");
    if (rc == 0) rc = ember_profile_merge(p, src);
    if (rc == 0) rc = ember_profile_top(p, 0, EMBER_TOP_BY_SELF, 0, &top, &count);
    ember_alloc_fail_reset();
    if (rc == 0) {
      assert_int_equal(ember_profile_total(p, 0), 5);
      assert_int_equal(count, 4);
      ember_top_free(top, count);
      ember_profile_free(p);
      assert_true(n > 5);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
    ember_profile_free(p);
  }
  ember_profile_free(src);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_profile_new_rejects_bad_types),
      cmocka_unit_test(test_profile_interns_frames_and_stacks),
      cmocka_unit_test(test_profile_add_rejects_bad_input),
      cmocka_unit_test(test_profile_long_strings_are_capped),
      cmocka_unit_test(test_profile_metadata),
      cmocka_unit_test(test_profile_frame_name),
      cmocka_unit_test(test_profile_merge_is_exact_and_associative),
      cmocka_unit_test(test_profile_merge_keeps_period_only_when_equal),
      cmocka_unit_test(test_profile_top_self_and_total),
      cmocka_unit_test(test_profile_many_stacks),
      cmocka_unit_test(test_profile_interned_strings_and_frame_hash),
      cmocka_unit_test(test_profile_survives_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
