/* Exporters: exact folded text, speedscope and tree JSON read back with
 * jansson, pprof read back with zlib and protobuf-c and with `go tool
 * pprof` itself, the tree cap, size limits, and a failure-injection loop
 * over every exporter.
 *
 * The fixture (values as samples / CPU ns at a 10 ms period):
 *
 *   main -> work -> hot                      30 / 300ms
 *   main -> work -> cold                     10 / 100ms
 *   main -> idle                              5 /  50ms
 *   main -> libc.so.6+0x1234 -> do_syscall_64 2 /  20ms   (unresolved, kernel)
 *   main -> cold                              0 /   0     (must not show)
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <jansson.h>
#include <zlib.h>

#include "common/testutil.h"
#include "ember/buf.h"
#include "ember/ember.h"
#include "ember/export.h"
#include "ember/profile.h"
#include "pprof.pb-c.h"

#define MS           INT64_C(1000000)
#define WINDOW_START INT64_C(1700000000000000000)
#define WINDOW_LEN   (INT64_C(10) * 1000 * MS)

/* ------------------------------------------------------------ fixture -- */

static const ember_frame_t F_MAIN = {.function = "main",
                                     .file = "/src/app/main.c",
                                     .module = "/usr/bin/app",
                                     .build_id = "abc123",
                                     .address = 0x1000,
                                     .line = 10,
                                     .kind = EMBER_FRAME_NATIVE};
static const ember_frame_t F_WORK = {.function = "work",
                                     .file = "/src/app/main.c",
                                     .module = "/usr/bin/app",
                                     .build_id = "abc123",
                                     .address = 0x1100,
                                     .line = 20,
                                     .kind = EMBER_FRAME_NATIVE};
static const ember_frame_t F_HOT = {.function = "hot",
                                    .file = "/src/app/hot.c",
                                    .module = "/usr/bin/app",
                                    .build_id = "abc123",
                                    .address = 0x1200,
                                    .line = 30,
                                    .kind = EMBER_FRAME_NATIVE};
static const ember_frame_t F_COLD = {.function = "cold",
                                     .file = "/src/app/hot.c",
                                     .module = "/usr/bin/app",
                                     .build_id = "abc123",
                                     .address = 0x1300,
                                     .line = 40,
                                     .kind = EMBER_FRAME_NATIVE};
static const ember_frame_t F_IDLE = {.function = "idle",
                                     .file = "/src/app/main.c",
                                     .module = "/usr/bin/app",
                                     .build_id = "abc123",
                                     .address = 0x1400,
                                     .line = 50,
                                     .kind = EMBER_FRAME_NATIVE};
static const ember_frame_t F_LIBC = {.module = "/lib/x86_64-linux-gnu/libc.so.6",
                                     .build_id = "ffee",
                                     .address = 0x1234,
                                     .kind = EMBER_FRAME_NATIVE};
static const ember_frame_t F_SYS = {.function = "do_syscall_64",
                                    .module = "[kernel]",
                                    .address = 0xffff0000,
                                    .kind = EMBER_FRAME_KERNEL};

static void add(ember_profile_t *p, int64_t samples, size_t depth, ...) {
  ember_frame_t frames[8];
  va_list ap;
  va_start(ap, depth);
  for (size_t i = 0; i < depth; i++) frames[i] = *va_arg(ap, const ember_frame_t *);
  va_end(ap);
  int64_t values[2] = {samples, samples * 10 * MS};
  assert_int_equal(ember_profile_add(p, frames, depth, values), 0);
}

static ember_profile_t *fixture(void) {
  ember_value_type_t types[2] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  add(p, 30, 3, &F_HOT, &F_WORK, &F_MAIN);
  add(p, 10, 3, &F_COLD, &F_WORK, &F_MAIN);
  add(p, 5, 2, &F_IDLE, &F_MAIN);
  add(p, 2, 3, &F_SYS, &F_LIBC, &F_MAIN);
  add(p, 0, 2, &F_COLD, &F_MAIN);
  ember_labels_t labels = {"api", "1.2.3", "h1", NULL, 42};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  assert_int_equal(ember_profile_set_window(p, WINDOW_START, WINDOW_START + WINDOW_LEN), 0);
  ember_profile_set_period(p, 10 * MS);
  return p;
}

/* A one-value profile from (leaf-first function names, value) rows. */
static ember_profile_t *profile_of(const char *const *const *stacks, const int64_t *values,
                                   size_t n) {
  ember_value_type_t vt = EMBER_VT_CPU_SAMPLES;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  for (size_t s = 0; s < n; s++) {
    ember_frame_t frames[8];
    size_t depth = 0;
    for (; stacks[s][depth] != NULL; depth++)
      frames[depth] = (ember_frame_t){.function = stacks[s][depth], .module = "/bin/x"};
    assert_int_equal(ember_profile_add(p, frames, depth, &values[s]), 0);
  }
  return p;
}

/* Run an export that must succeed; returns the NUL-terminated text. */
static const char *export_ok(int rc, const ember_buf_t *b) {
  if (rc != 0) fail_msg("export: %s", ember_strerror(rc));
  return b->data != NULL ? b->data : "";
}

static json_t *parse_json(const ember_buf_t *b) {
  json_error_t err;
  json_t *j = json_loadb(b->data, b->len, 0, &err);
  if (j == NULL) fail_msg("bad JSON: %s at %d", err.text, err.position);
  return j;
}

static json_int_t jint(const json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_integer(v)) fail_msg("%s is not an integer", key);
  return json_integer_value(v);
}

static const char *jstr(const json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  if (!json_is_string(v)) fail_msg("%s is not a string", key);
  return json_string_value(v);
}

/* ------------------------------------------------------------- format -- */

static void test_export_format_parse(void **state) {
  (void)state;
  static const struct {
    const char *in;
    ember_format_t want;
  } ok[] = {
      {"pprof", EMBER_FORMAT_PPROF},
      {"folded", EMBER_FORMAT_FOLDED},
      {"speedscope", EMBER_FORMAT_SPEEDSCOPE},
      {"tree", EMBER_FORMAT_TREE},
      {"PPROF", EMBER_FORMAT_PPROF},
      {".pb.gz", EMBER_FORMAT_PPROF},
      {".folded", EMBER_FORMAT_FOLDED},
      {".txt", EMBER_FORMAT_FOLDED},
      {".speedscope.json", EMBER_FORMAT_SPEEDSCOPE},
      {".json", EMBER_FORMAT_TREE},
      {"cpu.pb.gz", EMBER_FORMAT_PPROF},
      {"/tmp/out.speedscope.json", EMBER_FORMAT_SPEEDSCOPE},
      {"flame.json", EMBER_FORMAT_TREE},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    ember_format_t f = (ember_format_t)99;
    assert_int_equal(ember_format_parse(ok[i].in, &f), 0);
    assert_int_equal(f, ok[i].want);
  }
  static const char *const bad[] = {"", "pprofx", "json.gz", ".pb", "speedscope.jsonx", "gz"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ember_format_t f = EMBER_FORMAT_TREE;
    assert_int_equal(ember_format_parse(bad[i], &f), -EINVAL);
    assert_int_equal(f, EMBER_FORMAT_TREE); /* untouched on failure */
  }
  ember_format_t f;
  assert_int_equal(ember_format_parse(NULL, &f), -EINVAL);
  assert_int_equal(ember_format_parse("pprof", NULL), -EINVAL);
}

static void test_export_format_name(void **state) {
  (void)state;
  for (int i = EMBER_FORMAT_PPROF; i <= EMBER_FORMAT_TREE; i++) {
    ember_format_t f = (ember_format_t)i, back;
    const char *name = ember_format_name(f);
    assert_non_null(name);
    assert_int_equal(ember_format_parse(name, &back), 0);
    assert_int_equal(back, f);
  }
  assert_string_equal(ember_format_name(EMBER_FORMAT_SPEEDSCOPE), "speedscope");
  assert_null(ember_format_name((ember_format_t)42));
  assert_string_equal(ember_format_content_type(EMBER_FORMAT_PPROF), "application/octet-stream");
  assert_string_equal(ember_format_content_type(EMBER_FORMAT_FOLDED), "text/plain; charset=utf-8");
  assert_string_equal(ember_format_content_type(EMBER_FORMAT_SPEEDSCOPE), "application/json");
  assert_string_equal(ember_format_content_type(EMBER_FORMAT_TREE), "application/json");
  assert_null(ember_format_content_type((ember_format_t)42));
}

static void test_export_bad_args(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  ember_tree_opts_t opts = {0, 0}, bad_vi = {2, 0};
  assert_int_equal(ember_export_pprof(NULL, &b), -EINVAL);
  assert_int_equal(ember_export_pprof(p, NULL), -EINVAL);
  assert_int_equal(ember_export_folded(NULL, 0, &b), -EINVAL);
  assert_int_equal(ember_export_folded(p, 0, NULL), -EINVAL);
  assert_int_equal(ember_export_folded(p, 2, &b), -EINVAL);
  assert_int_equal(ember_export_speedscope(NULL, &b), -EINVAL);
  assert_int_equal(ember_export_speedscope(p, NULL), -EINVAL);
  assert_int_equal(ember_export_tree(NULL, &opts, &b), -EINVAL);
  assert_int_equal(ember_export_tree(p, NULL, &b), -EINVAL);
  assert_int_equal(ember_export_tree(p, &opts, NULL), -EINVAL);
  assert_int_equal(ember_export_tree(p, &bad_vi, &b), -EINVAL);
  assert_int_equal(ember_export(p, (ember_format_t)42, 0, &b), -EINVAL);
  assert_int_equal(ember_export(p, EMBER_FORMAT_FOLDED, 5, &b), -EINVAL);
  assert_int_equal(b.len, 0);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* ------------------------------------------------------------- folded -- */

static void test_export_folded_exact(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  assert_string_equal(export_ok(ember_export_folded(p, 0, &b), &b),
                      "main;idle 5\n"
                      "main;libc.so.6+0x1234;do_syscall_64 2\n"
                      "main;work;cold 10\n"
                      "main;work;hot 30\n");
  ember_buf_reset(&b);
  assert_string_equal(export_ok(ember_export_folded(p, 1, &b), &b),
                      "main;idle 50000000\n"
                      "main;libc.so.6+0x1234;do_syscall_64 20000000\n"
                      "main;work;cold 100000000\n"
                      "main;work;hot 300000000\n");
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_folded_escapes_names(void **state) {
  (void)state;
  /* ';' and line breaks in names must not split frames or lines; two
   * frames that print the same (differ only by address) fold into one
   * line; the output is sorted whatever the insertion order. */
  ember_value_type_t vt = EMBER_VT_CPU_SAMPLES;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  ember_frame_t root = {.function = "zeta"};
  ember_frame_t weird = {.function = "ns;fn\nwith\rbreaks"};
  ember_frame_t dup1 = {.function = "dup", .address = 1};
  ember_frame_t dup2 = {.function = "dup", .address = 2};
  ember_frame_t alpha = {.function = "alpha"};
  ember_frame_t s1[] = {weird, root}, s2[] = {dup1, root}, s3[] = {dup2, root}, s4[] = {alpha};
  int64_t v1 = 3, v2 = 4, v3 = 6, v4 = 1;
  assert_int_equal(ember_profile_add(p, s1, 2, &v1), 0);
  assert_int_equal(ember_profile_add(p, s2, 2, &v2), 0);
  assert_int_equal(ember_profile_add(p, s3, 2, &v3), 0);
  assert_int_equal(ember_profile_add(p, s4, 1, &v4), 0);
  assert_int_equal(ember_profile_nstacks(p), 4);

  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  assert_int_equal(ember_buf_puts(&b, "# kept\n"), 0);
  assert_string_equal(export_ok(ember_export_folded(p, 0, &b), &b), "# kept\n"
                                                                    "alpha 1\n"
                                                                    "zeta;dup 10\n"
                                                                    "zeta;ns:fn with breaks 3\n");
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_folded_empty(void **state) {
  (void)state;
  ember_value_type_t vt = EMBER_VT_CPU_NS;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  ember_buf_t b;
  ember_buf_init(&b, 16);
  assert_int_equal(ember_export_folded(p, 0, &b), 0);
  assert_int_equal(b.len, 0);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* --------------------------------------------------------- speedscope -- */

/* The names of speedscope sample `sample` (frame indices) joined by ';'. */
static void speedscope_stack(const json_t *frames, const json_t *sample, char *out, size_t size) {
  size_t off = 0;
  out[0] = '\0';
  for (size_t i = 0; i < json_array_size(sample); i++) {
    json_int_t fi = json_integer_value(json_array_get(sample, i));
    assert_true(fi >= 0 && (size_t)fi < json_array_size(frames));
    const char *name = jstr(json_array_get(frames, (size_t)fi), "name");
    int n = snprintf(out + off, size - off, "%s%s", i ? ";" : "", name);
    assert_true(n > 0 && (size_t)n < size - off);
    off += (size_t)n;
  }
}

static void test_export_speedscope_content(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  export_ok(ember_export_speedscope(p, &b), &b);
  json_t *doc = parse_json(&b);

  assert_string_equal(jstr(doc, "$schema"), "https://www.speedscope.app/file-format-schema.json");
  assert_string_equal(jstr(doc, "exporter"), "ember " EMBER_VERSION_STRING);
  assert_string_equal(jstr(doc, "name"), "api");
  assert_int_equal(jint(doc, "activeProfileIndex"), 0);

  json_t *frames = json_object_get(json_object_get(doc, "shared"), "frames");
  assert_true(json_is_array(frames));
  assert_int_equal(json_array_size(frames), 7);
  bool seen_hot = false, seen_libc = false;
  for (size_t i = 0; i < json_array_size(frames); i++) {
    json_t *fr = json_array_get(frames, i);
    const char *name = jstr(fr, "name");
    if (strcmp(name, "hot") == 0) {
      seen_hot = true;
      assert_string_equal(jstr(fr, "file"), "/src/app/hot.c");
      assert_int_equal(jint(fr, "line"), 30);
    } else if (strcmp(name, "libc.so.6+0x1234") == 0) {
      seen_libc = true;
      assert_null(json_object_get(fr, "file"));
      assert_null(json_object_get(fr, "line"));
    }
  }
  assert_true(seen_hot && seen_libc);

  json_t *profiles = json_object_get(doc, "profiles");
  assert_int_equal(json_array_size(profiles), 2);
  static const char *const want_name[] = {"samples", "cpu"};
  static const char *const want_unit[] = {"none", "nanoseconds"};
  static const int64_t scale[] = {1, 10 * MS};
  for (size_t t = 0; t < 2; t++) {
    json_t *prof = json_array_get(profiles, t);
    assert_string_equal(jstr(prof, "type"), "sampled");
    assert_string_equal(jstr(prof, "name"), want_name[t]);
    assert_string_equal(jstr(prof, "unit"), want_unit[t]);
    assert_int_equal(jint(prof, "startValue"), 0);
    assert_int_equal(jint(prof, "endValue"), 47 * scale[t]);
    json_t *samples = json_object_get(prof, "samples");
    json_t *weights = json_object_get(prof, "weights");
    /* The zero-valued main;cold stack is left out. */
    assert_int_equal(json_array_size(samples), 4);
    assert_int_equal(json_array_size(weights), 4);
    int64_t sum = 0;
    for (size_t i = 0; i < 4; i++) {
      char stack[256];
      speedscope_stack(frames, json_array_get(samples, i), stack, sizeof stack);
      json_int_t w = json_integer_value(json_array_get(weights, i));
      sum += w;
      if (strcmp(stack, "main;work;hot") == 0) {
        assert_int_equal(w, 30 * scale[t]);
      } else if (strcmp(stack, "main;work;cold") == 0) {
        assert_int_equal(w, 10 * scale[t]);
      } else if (strcmp(stack, "main;idle") == 0) {
        assert_int_equal(w, 5 * scale[t]);
      } else if (strcmp(stack, "main;libc.so.6+0x1234;do_syscall_64") == 0) {
        assert_int_equal(w, 2 * scale[t]);
      } else {
        fail_msg("unexpected stack %s", stack);
      }
    }
    assert_int_equal(sum, 47 * scale[t]);
  }
  json_decref(doc);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* --------------------------------------------------------------- tree -- */

static json_t *child(const json_t *node, size_t i) {
  return json_array_get(json_object_get(node, "children"), i);
}

static size_t nchildren(const json_t *node) {
  return json_array_size(json_object_get(node, "children"));
}

static void check_node(const json_t *n, const char *name, json_int_t self, json_int_t total,
                       size_t kids) {
  assert_string_equal(jstr(n, "name"), name);
  assert_int_equal(jint(n, "self"), self);
  assert_int_equal(jint(n, "total"), total);
  assert_int_equal(nchildren(n), kids);
}

/* Walk a tree iteratively: every node's total is its self plus its
 * children's totals, children are sorted, and the selfs add up to the
 * root's total. Returns the number of nodes. */
static size_t check_tree_sums(const json_t *root) {
  size_t cap = 1024, n = 0, count = 0;
  const json_t **stack = malloc(cap * sizeof *stack);
  assert_non_null(stack);
  json_int_t self_sum = 0;
  stack[n++] = root;
  while (n > 0) {
    const json_t *node = stack[--n];
    count++;
    json_int_t sum = jint(node, "self");
    self_sum += sum;
    for (size_t i = 0; i < nchildren(node); i++) {
      const json_t *c = child(node, i);
      sum += jint(c, "total");
      if (i > 0) {
        const json_t *prev = child(node, i - 1);
        json_int_t pt = jint(prev, "total"), ct = jint(c, "total");
        assert_true(pt > ct || (pt == ct && strcmp(jstr(prev, "name"), jstr(c, "name")) <= 0));
      }
      if (n == cap) {
        cap *= 2;
        const json_t **ns = realloc(stack, cap * sizeof *stack);
        assert_non_null(ns);
        stack = ns;
      }
      stack[n++] = c;
    }
    assert_int_equal(sum, jint(node, "total"));
  }
  assert_int_equal(self_sum, jint(root, "total"));
  free(stack);
  return count;
}

static json_t *tree_of(const ember_profile_t *p, size_t vi, size_t max_nodes, ember_buf_t *b) {
  ember_tree_opts_t opts = {vi, max_nodes};
  ember_buf_reset(b);
  export_ok(ember_export_tree(p, &opts, b), b);
  return parse_json(b);
}

static void test_export_tree_content(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  json_t *doc = tree_of(p, 1, 0, &b);
  assert_int_equal(jint(doc, "version"), 1);
  assert_string_equal(jstr(doc, "type"), "cpu");
  assert_string_equal(jstr(doc, "unit"), "nanoseconds");
  assert_int_equal(jint(doc, "total"), 470 * MS);
  assert_int_equal(jint(doc, "nodes"), 8);
  assert_true(json_is_false(json_object_get(doc, "truncated")));

  json_t *root = json_object_get(doc, "root");
  check_node(root, "all", 0, 470 * MS, 1);
  json_t *m = child(root, 0);
  check_node(m, "main", 0, 470 * MS, 3);
  assert_string_equal(jstr(m, "module"), "/usr/bin/app");
  assert_string_equal(jstr(m, "kind"), "native");
  /* Children by total, largest first. */
  json_t *work = child(m, 0), *idle = child(m, 1), *libc = child(m, 2);
  check_node(work, "work", 0, 400 * MS, 2);
  check_node(idle, "idle", 50 * MS, 50 * MS, 0);
  check_node(libc, "libc.so.6+0x1234", 0, 20 * MS, 1);
  assert_string_equal(jstr(libc, "module"), "/lib/x86_64-linux-gnu/libc.so.6");
  check_node(child(work, 0), "hot", 300 * MS, 300 * MS, 0);
  check_node(child(work, 1), "cold", 100 * MS, 100 * MS, 0);
  json_t *sys = child(libc, 0);
  check_node(sys, "do_syscall_64", 20 * MS, 20 * MS, 0);
  assert_string_equal(jstr(sys, "kind"), "kernel");
  assert_string_equal(jstr(sys, "module"), "[kernel]");
  assert_int_equal(check_tree_sums(root), 8);
  json_decref(doc);

  /* The samples type reads the same tree in counts. */
  doc = tree_of(p, 0, 0, &b);
  assert_string_equal(jstr(doc, "type"), "samples");
  assert_string_equal(jstr(doc, "unit"), "count");
  assert_int_equal(jint(doc, "total"), 47);
  check_node(child(child(json_object_get(doc, "root"), 0), 0), "work", 0, 40, 2);
  json_decref(doc);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_tree_ties_sort_by_name(void **state) {
  (void)state;
  static const char *const a[] = {"b", "root", NULL}, *const b2[] = {"a", "root", NULL},
                           *const c[] = {"c", "root", NULL};
  static const char *const *const stacks[] = {a, b2, c};
  static const int64_t values[] = {5, 5, 7};
  ember_profile_t *p = profile_of(stacks, values, 3);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  json_t *doc = tree_of(p, 0, 0, &b);
  json_t *r = child(json_object_get(doc, "root"), 0);
  check_node(child(r, 0), "c", 7, 7, 0);
  check_node(child(r, 1), "a", 5, 5, 0);
  check_node(child(r, 2), "b", 5, 5, 0);
  json_decref(doc);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_tree_cap_preserves_total(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);

  /* 3 nodes: all, main, work; idle and libc fold into main, hot and cold
   * into work. */
  json_t *doc = tree_of(p, 0, 3, &b);
  assert_true(json_is_true(json_object_get(doc, "truncated")));
  assert_int_equal(jint(doc, "nodes"), 3);
  assert_int_equal(jint(doc, "total"), 47);
  json_t *root = json_object_get(doc, "root");
  check_node(root, "all", 0, 47, 1);
  check_node(child(root, 0), "main", 7, 47, 1);
  check_node(child(child(root, 0), 0), "work", 40, 40, 0);
  assert_int_equal(check_tree_sums(root), 3);
  json_decref(doc);

  /* 7 nodes: do_syscall_64 (2, deeper) loses the tie to libc (2). */
  doc = tree_of(p, 0, 7, &b);
  assert_int_equal(jint(doc, "nodes"), 7);
  json_t *libc = child(child(json_object_get(doc, "root"), 0), 2);
  check_node(libc, "libc.so.6+0x1234", 2, 2, 0);
  assert_int_equal(check_tree_sums(json_object_get(doc, "root")), 7);
  json_decref(doc);

  /* 1 node: everything is the root's self. */
  doc = tree_of(p, 0, 1, &b);
  assert_int_equal(jint(doc, "nodes"), 1);
  check_node(json_object_get(doc, "root"), "all", 47, 47, 0);
  json_decref(doc);

  /* A cap the tree fits in changes nothing. */
  doc = tree_of(p, 0, 8, &b);
  assert_true(json_is_false(json_object_get(doc, "truncated")));
  assert_int_equal(jint(doc, "nodes"), 8);
  json_decref(doc);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_tree_large(void **state) {
  (void)state;
  /* main -> top<i/100> -> mid<i/10> -> leaf<i>: 111,112 nodes. */
  enum { N = 100000 };
  ember_value_type_t vt = EMBER_VT_CPU_SAMPLES;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  int64_t want_total = 0;
  for (int i = 0; i < N; i++) {
    char leaf[32], mid[32], top[32];
    snprintf(leaf, sizeof leaf, "leaf%d", i);
    snprintf(mid, sizeof mid, "mid%d", i / 10);
    snprintf(top, sizeof top, "top%d", i / 100);
    ember_frame_t f[4] = {
        {.function = leaf}, {.function = mid}, {.function = top}, {.function = "main"}};
    int64_t v = 1 + i % 97;
    want_total += v;
    assert_int_equal(ember_profile_add(p, f, 4, &v), 0);
  }
  ember_buf_t b;
  ember_buf_init(&b, (size_t)1 << 30);
  /* Timed apart from parsing the result back, which costs more. */
  ember_tree_opts_t opts = {0, 0};
  int64_t t0 = ember_time_mono_ns();
  export_ok(ember_export_tree(p, &opts, &b), &b);
  int64_t t1 = ember_time_mono_ns();
  json_t *doc = parse_json(&b);
  assert_int_equal(jint(doc, "nodes"), 1 + 1 + N / 100 + N / 10 + N);
  assert_int_equal(jint(doc, "total"), want_total);
  assert_int_equal(check_tree_sums(json_object_get(doc, "root")), 1 + 1 + N / 100 + N / 10 + N);
  json_decref(doc);

  opts.max_nodes = 1000;
  ember_buf_reset(&b);
  int64_t t2 = ember_time_mono_ns();
  export_ok(ember_export_tree(p, &opts, &b), &b);
  int64_t t3 = ember_time_mono_ns();
  doc = parse_json(&b);
  assert_true(json_is_true(json_object_get(doc, "truncated")));
  assert_int_equal(jint(doc, "nodes"), 1000);
  assert_int_equal(jint(doc, "total"), want_total);
  assert_int_equal(check_tree_sums(json_object_get(doc, "root")), 1000);
  json_decref(doc);
  print_message("tree of %d nodes: %.0f ms uncapped, %.0f ms capped to 1000\n",
                1 + 1 + N / 100 + N / 10 + N, (double)(t1 - t0) / 1e6, (double)(t3 - t2) / 1e6);
  /* Generous enough for a sanitizer build on a slow machine; a quadratic
   * cap would take minutes. */
  assert_true(t1 - t0 < INT64_C(20000) * MS);
  assert_true(t3 - t2 < INT64_C(20000) * MS);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_tree_deep_stack(void **state) {
  (void)state;
  /* The deepest stack a profile holds: the exporter must not recurse
   * itself into trouble. (jansson's parser stops at 2048 levels, below
   * what this tree nests to, so only the shape of the text is checked.) */
  ember_value_type_t vt = EMBER_VT_CPU_SAMPLES;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  ember_frame_t *frames = calloc(EMBER_MAX_STACK_DEPTH, sizeof *frames);
  assert_non_null(frames);
  for (size_t i = 0; i < EMBER_MAX_STACK_DEPTH; i++)
    frames[i] = (ember_frame_t){.function = "recurse"};
  int64_t v = 9;
  assert_int_equal(ember_profile_add(p, frames, EMBER_MAX_STACK_DEPTH, &v), 0);
  free(frames);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 24);
  ember_tree_opts_t opts = {0, 0};
  const char *text = export_ok(ember_export_tree(p, &opts, &b), &b);
  assert_non_null(strstr(text, "\"nodes\":1025"));
  size_t n = 0;
  for (const char *s = text; (s = strstr(s, "\"recurse\"")) != NULL; s++) n++;
  assert_int_equal(n, EMBER_MAX_STACK_DEPTH);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_json_invalid_utf8(void **state) {
  (void)state;
  static const char *const s[] = {"bad\xff\xc3(name\xe2\x82", "caf\xc3\xa9", NULL};
  static const char *const *const stacks[] = {s};
  static const int64_t values[] = {1};
  ember_profile_t *p = profile_of(stacks, values, 1);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  json_t *doc = tree_of(p, 0, 0, &b);
  json_t *cafe = child(json_object_get(doc, "root"), 0);
  assert_string_equal(jstr(cafe, "name"), "caf\xc3\xa9");
  assert_string_equal(jstr(child(cafe, 0), "name"),
                      "bad\xef\xbf\xbd\xef\xbf\xbd(name\xef\xbf\xbd\xef\xbf\xbd");
  json_decref(doc);
  ember_buf_reset(&b);
  export_ok(ember_export_speedscope(p, &b), &b);
  json_decref(parse_json(&b));
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* -------------------------------------------------------------- pprof -- */

/* gunzip `in` into a malloc'd buffer. */
static uint8_t *gunzip(const char *in, size_t len, size_t *out_len) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
  size_t cap = 4096, n = 0;
  uint8_t *out = malloc(cap);
  assert_non_null(out);
  zs.next_in = (Bytef *)(uintptr_t)in;
  zs.avail_in = (uInt)len;
  int zrc;
  do {
    if (n == cap) {
      cap *= 2;
      uint8_t *no = realloc(out, cap);
      assert_non_null(no);
      out = no;
    }
    zs.next_out = out + n;
    zs.avail_out = (uInt)(cap - n);
    zrc = inflate(&zs, Z_NO_FLUSH);
    assert_true(zrc == Z_OK || zrc == Z_STREAM_END);
    n = cap - zs.avail_out;
  } while (zrc != Z_STREAM_END);
  assert_int_equal(zs.avail_in, 0); /* nothing after the gzip member */
  inflateEnd(&zs);
  *out_len = n;
  return out;
}

static Perftools__Profiles__Profile *unpack_pprof(const ember_buf_t *b) {
  size_t len;
  uint8_t *raw = gunzip(b->data, b->len, &len);
  Perftools__Profiles__Profile *prof = perftools__profiles__profile__unpack(NULL, len, raw);
  free(raw);
  assert_non_null(prof);
  return prof;
}

static const char *pstr(const Perftools__Profiles__Profile *prof, int64_t i) {
  assert_true(i >= 0 && (size_t)i < prof->n_string_table);
  return prof->string_table[i];
}

static const Perftools__Profiles__Function *pfunc(const Perftools__Profiles__Profile *prof,
                                                  uint64_t id) {
  assert_true(id >= 1 && id <= prof->n_function);
  assert_int_equal(prof->function[id - 1]->id, id);
  return prof->function[id - 1];
}

static const Perftools__Profiles__Location *ploc(const Perftools__Profiles__Profile *prof,
                                                 uint64_t id) {
  assert_true(id >= 1 && id <= prof->n_location);
  assert_int_equal(prof->location[id - 1]->id, id);
  return prof->location[id - 1];
}

static const char *loc_name(const Perftools__Profiles__Profile *prof, uint64_t id) {
  const Perftools__Profiles__Location *l = ploc(prof, id);
  assert_int_equal(l->n_line, 1);
  return pstr(prof, pfunc(prof, l->line[0]->function_id)->name);
}

static void test_export_pprof_content(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  export_ok(ember_export_pprof(p, &b), &b);
  assert_true(b.len > 18 && (uint8_t)b.data[0] == 0x1f && (uint8_t)b.data[1] == 0x8b);
  Perftools__Profiles__Profile *prof = unpack_pprof(&b);

  assert_true(prof->n_string_table > 0);
  assert_string_equal(prof->string_table[0], "");
  for (size_t i = 1; i < prof->n_string_table; i++) /* interned: no repeats */
    for (size_t j = 0; j < i; j++)
      assert_string_not_equal(prof->string_table[i], prof->string_table[j]);

  assert_int_equal(prof->n_sample_type, 2);
  assert_string_equal(pstr(prof, prof->sample_type[0]->type), "samples");
  assert_string_equal(pstr(prof, prof->sample_type[0]->unit), "count");
  assert_string_equal(pstr(prof, prof->sample_type[1]->type), "cpu");
  assert_string_equal(pstr(prof, prof->sample_type[1]->unit), "nanoseconds");
  assert_string_equal(pstr(prof, prof->default_sample_type), "cpu");
  assert_non_null(prof->period_type);
  assert_string_equal(pstr(prof, prof->period_type->type), "cpu");
  assert_string_equal(pstr(prof, prof->period_type->unit), "nanoseconds");
  assert_int_equal(prof->period, 10 * MS);
  assert_int_equal(prof->time_nanos, WINDOW_START);
  assert_int_equal(prof->duration_nanos, WINDOW_LEN);

  assert_int_equal(prof->n_comment, 4);
  assert_string_equal(pstr(prof, prof->comment[0]), "worker=api");
  assert_string_equal(pstr(prof, prof->comment[1]), "version=1.2.3");
  assert_string_equal(pstr(prof, prof->comment[2]), "host=h1");
  assert_string_equal(pstr(prof, prof->comment[3]), "pid=42");

  /* Mappings: app, libc, [kernel], each once. */
  assert_int_equal(prof->n_mapping, 3);
  for (size_t i = 0; i < prof->n_mapping; i++) {
    const Perftools__Profiles__Mapping *m = prof->mapping[i];
    assert_int_equal(m->id, i + 1);
    const char *file = pstr(prof, m->filename);
    if (strcmp(file, "/usr/bin/app") == 0) {
      assert_string_equal(pstr(prof, m->build_id), "abc123");
      assert_true(m->has_functions && m->has_filenames && m->has_line_numbers);
    } else if (strcmp(file, "/lib/x86_64-linux-gnu/libc.so.6") == 0) {
      assert_string_equal(pstr(prof, m->build_id), "ffee");
      assert_false(m->has_functions || m->has_filenames || m->has_line_numbers);
    } else {
      assert_string_equal(file, "[kernel]");
      assert_int_equal(m->build_id, 0);
      assert_true(m->has_functions);
    }
  }

  /* One location per frame, one function per (name, file). */
  assert_int_equal(prof->n_location, ember_profile_nframes(p));
  assert_int_equal(prof->n_function, 7);
  for (uint64_t id = 1; id <= prof->n_location; id++) {
    const ember_frame_t *f = ember_profile_frame(p, (uint32_t)(id - 1));
    const Perftools__Profiles__Location *l = ploc(prof, id);
    assert_int_equal(l->address, f->address);
    assert_int_equal(l->line[0]->line, f->line);
    assert_true(l->mapping_id >= 1 && l->mapping_id <= prof->n_mapping);
    assert_string_equal(pstr(prof, prof->mapping[l->mapping_id - 1]->filename), f->module);
    const Perftools__Profiles__Function *fn = pfunc(prof, l->line[0]->function_id);
    assert_int_equal(fn->name, fn->system_name);
    if (f->file != NULL) {
      assert_string_equal(pstr(prof, fn->filename), f->file);
    } else {
      assert_int_equal(fn->filename, 0);
    }
  }

  /* Samples: the four nonzero stacks, leaf first, both values. */
  assert_int_equal(prof->n_sample, 4);
  int64_t sums[2] = {0, 0};
  for (size_t i = 0; i < prof->n_sample; i++) {
    const Perftools__Profiles__Sample *s = prof->sample[i];
    assert_int_equal(s->n_value, 2);
    assert_int_equal(s->value[1], s->value[0] * 10 * MS);
    sums[0] += s->value[0];
    sums[1] += s->value[1];
    const char *leaf = loc_name(prof, s->location_id[0]);
    assert_string_equal(loc_name(prof, s->location_id[s->n_location_id - 1]), "main");
    if (strcmp(leaf, "hot") == 0) {
      assert_int_equal(s->n_location_id, 3);
      assert_string_equal(loc_name(prof, s->location_id[1]), "work");
      assert_int_equal(s->value[0], 30);
    } else if (strcmp(leaf, "cold") == 0) {
      assert_int_equal(s->n_location_id, 3);
      assert_int_equal(s->value[0], 10);
    } else if (strcmp(leaf, "idle") == 0) {
      assert_int_equal(s->n_location_id, 2);
      assert_int_equal(s->value[0], 5);
    } else {
      assert_string_equal(leaf, "do_syscall_64");
      assert_string_equal(loc_name(prof, s->location_id[1]), "libc.so.6+0x1234");
      assert_int_equal(s->value[0], 2);
    }
  }
  assert_int_equal(sums[0], 47);
  assert_int_equal(sums[1], 470 * MS);

  perftools__profiles__profile__free_unpacked(prof, NULL);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_pprof_minimal(void **state) {
  (void)state;
  /* No window, period, labels, modules or CPU type: the optional fields
   * stay unset, frames without a module get mapping 0, and an empty
   * profile is still a valid file. */
  ember_value_type_t vt = EMBER_VT_ALLOC_BYTES;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  export_ok(ember_export_pprof(p, &b), &b);
  Perftools__Profiles__Profile *prof = unpack_pprof(&b);
  assert_int_equal(prof->n_sample, 0);
  assert_int_equal(prof->n_location, 0);
  assert_string_equal(pstr(prof, prof->sample_type[0]->type), "alloc_space");
  assert_string_equal(pstr(prof, prof->sample_type[0]->unit), "bytes");
  assert_null(prof->period_type);
  assert_int_equal(prof->default_sample_type, 0);
  assert_int_equal(prof->n_comment, 0);
  perftools__profiles__profile__free_unpacked(prof, NULL);

  ember_frame_t f = {.function = "malloc"};
  int64_t v = 4096;
  assert_int_equal(ember_profile_add(p, &f, 1, &v), 0);
  ember_buf_reset(&b);
  export_ok(ember_export_pprof(p, &b), &b);
  prof = unpack_pprof(&b);
  assert_int_equal(prof->n_mapping, 0);
  assert_int_equal(prof->n_sample, 1);
  assert_int_equal(prof->sample[0]->value[0], 4096);
  assert_int_equal(ploc(prof, prof->sample[0]->location_id[0])->mapping_id, 0);
  assert_string_equal(loc_name(prof, prof->sample[0]->location_id[0]), "malloc");
  perftools__profiles__profile__free_unpacked(prof, NULL);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_pprof_go_tool_reads_it(void **state) {
  (void)state;
  char path[1024];
  snprintf(path, sizeof path, "%s/export_fixture.pb.gz", EMBER_TEST_TMP);
  mkdir(EMBER_TEST_TMP, 0755);

  ember_profile_t *p = fixture();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  export_ok(ember_export_pprof(p, &b), &b);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
  assert_int_equal(fclose(f), 0);

  char flat[64];
  char *out = tu_go_pprof_top(path, "cpu");
  assert_non_null(strstr(out, "Type: cpu"));
  assert_non_null(strstr(out, "of 470ms total"));
  assert_string_equal(tu_pprof_flat(out, "hot", flat, sizeof flat), "300ms");
  assert_string_equal(tu_pprof_flat(out, "cold", flat, sizeof flat), "100ms");
  assert_string_equal(tu_pprof_flat(out, "idle", flat, sizeof flat), "50ms");
  assert_string_equal(tu_pprof_flat(out, "do_syscall_64", flat, sizeof flat), "20ms");
  assert_string_equal(tu_pprof_flat(out, "main", flat, sizeof flat), "0");
  assert_non_null(strstr(out, "libc.so.6+0x1234"));
  ember_free(out);

  out = tu_go_pprof_top(path, "samples");
  assert_non_null(strstr(out, "of 47 total"));
  assert_string_equal(tu_pprof_flat(out, "hot", flat, sizeof flat), "30");
  assert_string_equal(tu_pprof_flat(out, "cold", flat, sizeof flat), "10");
  ember_free(out);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* An in-use heap profile (what the agent sends in every window): pprof
 * names its types as Go's heap profiles do, shows inuse_space by default,
 * and `go tool pprof -sample_index=inuse_space -top` puts the function
 * that holds the most first. */
static void test_export_pprof_inuse_go_tool_reads_it(void **state) {
  (void)state;
  const ember_value_type_t types[] = {EMBER_VT_INUSE_OBJECTS, EMBER_VT_INUSE_BYTES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  assert_int_equal(ember_profile_set_window(p, 1764460800000000000LL, 1764460810000000000LL), 0);
  ember_profile_set_period(p, 524288);
  /* Stacks as Go's heap profiles have them: the allocating function is
   * the leaf (a stack that still ends in the malloc hook would show the
   * hook first, as its flat). */
  ember_frame_t startup[] = {{.function = "startup_alloc", .module = "/usr/bin/app"},
                             {.function = "main", .module = "/usr/bin/app"}};
  ember_frame_t churn[] = {{.function = "churn", .module = "/usr/bin/app"},
                           {.function = "main", .module = "/usr/bin/app"}};
  int64_t sv[] = {128, 64LL << 20}, cv[] = {1000, 1LL << 20};
  assert_int_equal(ember_profile_add(p, startup, 2, sv), 0);
  assert_int_equal(ember_profile_add(p, churn, 2, cv), 0);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  export_ok(ember_export_pprof(p, &b), &b);

  Perftools__Profiles__Profile *prof = unpack_pprof(&b);
  assert_int_equal(prof->n_sample_type, 2);
  assert_string_equal(prof->string_table[prof->sample_type[0]->type], "inuse_objects");
  assert_string_equal(prof->string_table[prof->sample_type[0]->unit], "count");
  assert_string_equal(prof->string_table[prof->sample_type[1]->type], "inuse_space");
  assert_string_equal(prof->string_table[prof->sample_type[1]->unit], "bytes");
  assert_string_equal(prof->string_table[prof->default_sample_type], "inuse_space");
  assert_non_null(prof->period_type);
  assert_string_equal(prof->string_table[prof->period_type->type], "space");
  assert_string_equal(prof->string_table[prof->period_type->unit], "bytes");
  assert_int_equal(prof->period, 524288);
  perftools__profiles__profile__free_unpacked(prof, NULL);

  char path[1024];
  snprintf(path, sizeof path, "%s/export_inuse.pb.gz", EMBER_TEST_TMP);
  mkdir(EMBER_TEST_TMP, 0755);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
  assert_int_equal(fclose(f), 0);
  char flat[64];
  char *out = tu_go_pprof_top(path, "inuse_space");
  assert_non_null(strstr(out, "Type: inuse_space"));
  assert_non_null(strstr(out, "of 65MB total"));
  /* The first row of the table (after its "flat  flat%" header) is the
   * startup function's. */
  const char *hdr = strstr(out, "flat%");
  assert_non_null(hdr);
  const char *row = strchr(hdr, '\n');
  assert_non_null(row);
  const char *eol = strchr(row + 1, '\n');
  assert_non_null(eol);
  char first[256];
  snprintf(first, sizeof first, "%.*s", (int)(eol - row - 1), row + 1);
  assert_non_null(strstr(first, "startup_alloc"));
  assert_non_null(strstr(first, "64MB"));
  assert_string_equal(tu_pprof_flat(out, "churn", flat, sizeof flat), "1MB");
  ember_free(out);
  out = tu_go_pprof_top(path, "inuse_objects");
  assert_string_equal(tu_pprof_flat(out, "churn", flat, sizeof flat), "1000");
  ember_free(out);
  unlink(path);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* ------------------------------------------------------------- limits -- */

typedef int (*export_fn)(const ember_profile_t *p, ember_buf_t *out);

static int exp_pprof(const ember_profile_t *p, ember_buf_t *out) {
  return ember_export_pprof(p, out);
}
static int exp_folded(const ember_profile_t *p, ember_buf_t *out) {
  return ember_export_folded(p, 1, out);
}
static int exp_speedscope(const ember_profile_t *p, ember_buf_t *out) {
  return ember_export_speedscope(p, out);
}
static int exp_tree(const ember_profile_t *p, ember_buf_t *out) {
  ember_tree_opts_t opts = {0, 0};
  return ember_export_tree(p, &opts, out);
}
static int exp_tree_capped(const ember_profile_t *p, ember_buf_t *out) {
  ember_tree_opts_t opts = {1, 4};
  return ember_export_tree(p, &opts, out);
}

static const struct {
  const char *name;
  export_fn fn;
} exporters[] = {
    {"pprof", exp_pprof}, {"folded", exp_folded},           {"speedscope", exp_speedscope},
    {"tree", exp_tree},   {"tree capped", exp_tree_capped},
};

#define NEXPORTERS (sizeof exporters / sizeof exporters[0])

/* Frames named through a source map (issue 16): the tree gives each
 * function its original name, file and starting line, and keeps the
 * generated name beside them; pprof names the function as its author did
 * and keeps the generated name as its system name; a native function
 * sampled at two lines gets no line. */
static void test_export_generated_names(void **state) {
  (void)state;
  const ember_value_type_t vt[] = {EMBER_VT_CPU_SAMPLES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(vt, 1, &p), 0);
  ember_frame_t alpha = {.function = "alphaWork",
                         .file = "/srv/app/src/alpha.ts",
                         .line = 12,
                         .module = "/srv/app/dist/app.js",
                         .generated = "a /srv/app/dist/app.js:1:4711",
                         .kind = EMBER_FRAME_JIT};
  ember_frame_t beta = {.function = "betaWork",
                        .file = "/srv/app/src/beta.ts",
                        .line = 3,
                        .module = "/srv/app/dist/app.js",
                        .generated = "b /srv/app/dist/app.js:1:4980",
                        .kind = EMBER_FRAME_JIT};
  ember_frame_t main1 = {.function = "main", .file = "node.cc", .line = 10, .module = "node"};
  ember_frame_t main2 = main1;
  main2.line = 11;
  ember_frame_t s1[] = {alpha, main1}, s2[] = {beta, main2};
  int64_t v1[] = {3}, v2[] = {1};
  assert_int_equal(ember_profile_add(p, s1, 2, v1), 0);
  assert_int_equal(ember_profile_add(p, s2, 2, v2), 0);

  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  json_t *doc = tree_of(p, 0, 0, &b);
  json_t *m = child(json_object_get(doc, "root"), 0);
  check_node(m, "main", 0, 4, 2);
  assert_string_equal(jstr(m, "file"), "node.cc");
  assert_null(json_object_get(m, "line"));
  assert_null(json_object_get(m, "generated"));
  json_t *a = child(m, 0), *bt = child(m, 1);
  check_node(a, "alphaWork", 3, 3, 0);
  assert_string_equal(jstr(a, "file"), "/srv/app/src/alpha.ts");
  assert_int_equal(jint(a, "line"), 12);
  assert_string_equal(jstr(a, "generated"), "a /srv/app/dist/app.js:1:4711");
  assert_string_equal(jstr(a, "module"), "/srv/app/dist/app.js");
  assert_string_equal(jstr(a, "kind"), "jit");
  check_node(bt, "betaWork", 1, 1, 0);
  assert_string_equal(jstr(bt, "generated"), "b /srv/app/dist/app.js:1:4980");
  json_decref(doc);

  b.len = 0;
  export_ok(ember_export_pprof(p, &b), &b);
  Perftools__Profiles__Profile *prof = unpack_pprof(&b);
  size_t seen = 0;
  for (size_t i = 0; i < prof->n_function; i++) {
    const Perftools__Profiles__Function *fn = prof->function[i];
    const char *name = pstr(prof, fn->name), *sys = pstr(prof, fn->system_name);
    if (strcmp(name, "alphaWork") == 0) {
      assert_string_equal(sys, "a /srv/app/dist/app.js:1:4711");
      assert_string_equal(pstr(prof, fn->filename), "/srv/app/src/alpha.ts");
      seen++;
    } else if (strcmp(name, "betaWork") == 0) {
      assert_string_equal(sys, "b /srv/app/dist/app.js:1:4980");
      seen++;
    } else {
      assert_int_equal(fn->name, fn->system_name);
    }
  }
  assert_int_equal(seen, 2);
  perftools__profiles__profile__free_unpacked(prof, NULL);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_export_too_big(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  for (size_t e = 0; e < NEXPORTERS; e++) {
    /* Find the size, then give one byte less: the output is refused
     * whole and what the buffer held stays. */
    ember_buf_t b;
    ember_buf_init(&b, 1 << 20);
    assert_int_equal(exporters[e].fn(p, &b), 0);
    size_t need = b.len;
    ember_buf_free(&b);

    ember_buf_init(&b, 5 + need - 1);
    assert_int_equal(ember_buf_puts(&b, "keep:"), 0);
    assert_int_equal(exporters[e].fn(p, &b), EMBER_ETOOBIG);
    assert_int_equal(b.len, 5);
    assert_string_equal(b.data, "keep:");
    ember_buf_free(&b);

    ember_buf_init(&b, 8);
    assert_int_equal(exporters[e].fn(p, &b), EMBER_ETOOBIG);
    assert_int_equal(b.len, 0);
    ember_buf_free(&b);

    ember_buf_init(&b, 5 + need);
    assert_int_equal(ember_buf_puts(&b, "keep:"), 0);
    assert_int_equal(exporters[e].fn(p, &b), 0);
    assert_int_equal(b.len, 5 + need);
    ember_buf_free(&b);
  }
  ember_profile_free(p);
}

static void test_export_alloc_failures(void **state) {
  (void)state;
  /* Fail the Nth allocation (Ember's, zlib's and, through the hook main()
   * installs, jansson's) for every N until the export needs no more:
   * each failure is an error with the buffer as it was, the eventual
   * success is byte for byte the normal output, and the sanitizer build
   * sees no leak. */
  ember_profile_t *p = fixture();
  for (size_t e = 0; e < NEXPORTERS; e++) {
    ember_buf_t ref;
    ember_buf_init(&ref, 1 << 20);
    assert_int_equal(exporters[e].fn(p, &ref), 0);
    long n;
    for (n = 0;; n++) {
      ember_buf_t b;
      ember_buf_init(&b, 1 << 20);
      assert_int_equal(ember_buf_puts(&b, "keep"), 0);
      ember_alloc_fail_after(n);
      int rc = exporters[e].fn(p, &b);
      ember_alloc_fail_reset();
      if (rc == 0) {
        assert_int_equal(b.len, 4 + ref.len);
        assert_memory_equal(b.data + 4, ref.data, ref.len);
        ember_buf_free(&b);
        break;
      }
      if (rc >= 0) fail_msg("%s: rc %d with allocation %ld failing", exporters[e].name, rc, n);
      assert_int_equal(b.len, 4);
      assert_string_equal(b.data, "keep");
      ember_buf_free(&b);
      assert_true(n < 100000);
    }
    print_message("%s: %ld allocations, each failure handled\n", exporters[e].name, n);
    assert_true(n > 0);
    ember_buf_free(&ref);
  }
  ember_profile_free(p);
}

static void test_export_dispatch(void **state) {
  (void)state;
  ember_profile_t *p = fixture();
  static const ember_format_t fmts[] = {EMBER_FORMAT_PPROF, EMBER_FORMAT_FOLDED,
                                        EMBER_FORMAT_SPEEDSCOPE, EMBER_FORMAT_TREE};
  for (size_t i = 0; i < 4; i++) {
    ember_buf_t a, b;
    ember_buf_init(&a, 1 << 20);
    ember_buf_init(&b, 1 << 20);
    assert_int_equal(ember_export(p, fmts[i], 1, &a), 0);
    int rc = 0;
    switch (fmts[i]) {
    case EMBER_FORMAT_PPROF: rc = ember_export_pprof(p, &b); break;
    case EMBER_FORMAT_FOLDED: rc = ember_export_folded(p, 1, &b); break;
    case EMBER_FORMAT_SPEEDSCOPE: rc = ember_export_speedscope(p, &b); break;
    case EMBER_FORMAT_TREE: {
      ember_tree_opts_t opts = {1, 0};
      rc = ember_export_tree(p, &opts, &b);
      break;
    }
    }
    assert_int_equal(rc, 0);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    ember_buf_free(&a);
    ember_buf_free(&b);
  }
  ember_profile_free(p);
}

int main(void) {
  /* jansson allocates through Ember's wrappers here so the failure loop
   * reaches its allocations too. ember_free is free(), so memory jansson
   * took before this call is still released correctly. */
  json_set_alloc_funcs(ember_malloc, ember_free);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_export_format_parse),
      cmocka_unit_test(test_export_format_name),
      cmocka_unit_test(test_export_bad_args),
      cmocka_unit_test(test_export_folded_exact),
      cmocka_unit_test(test_export_folded_escapes_names),
      cmocka_unit_test(test_export_folded_empty),
      cmocka_unit_test(test_export_speedscope_content),
      cmocka_unit_test(test_export_tree_content),
      cmocka_unit_test(test_export_tree_ties_sort_by_name),
      cmocka_unit_test(test_export_tree_cap_preserves_total),
      cmocka_unit_test(test_export_tree_large),
      cmocka_unit_test(test_export_tree_deep_stack),
      cmocka_unit_test(test_export_json_invalid_utf8),
      cmocka_unit_test(test_export_pprof_content),
      cmocka_unit_test(test_export_pprof_minimal),
      cmocka_unit_test(test_export_pprof_go_tool_reads_it),
      cmocka_unit_test(test_export_pprof_inuse_go_tool_reads_it),
      cmocka_unit_test(test_export_generated_names),
      cmocka_unit_test(test_export_too_big),
      cmocka_unit_test(test_export_alloc_failures),
      cmocka_unit_test(test_export_dispatch),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
