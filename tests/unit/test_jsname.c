/* V8's perf map names (include/ember/jsname.h): what Node.js 20 writes
 * (seen with --perf-basic-prof), older tags, names with spaces, and what is
 * not a script function; the file a script names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember/jsname.h"

static void parsed(const char *name, const char *function, const char *script, uint32_t line,
                   uint32_t column) {
  ember_jsname_t j;
  if (!ember_jsname_parse(name, &j)) fail_msg("not parsed: %s", name);
  assert_int_equal(j.function_len, strlen(function));
  assert_memory_equal(j.function, function, j.function_len);
  assert_int_equal(j.script_len, strlen(script));
  assert_memory_equal(j.script, script, j.script_len);
  assert_int_equal(j.line, line);
  assert_int_equal(j.column, column);
}

static void test_names(void **state) {
  (void)state;
  parsed("JS:*hotLoop /tmp/smx/a.js:1:17", "hotLoop", "/tmp/smx/a.js", 1, 17);
  parsed("JS:~hotLoop /tmp/smx/a.js:1:17", "hotLoop", "/tmp/smx/a.js", 1, 17);
  parsed("JS:^a /app/dist/app.min.js:1:4711", "a", "/app/dist/app.min.js", 1, 4711);
  parsed("JS:+b file:///app/x.mjs:3:9", "b", "file:///app/x.mjs", 3, 9);
  parsed("LazyCompile:*fib /tmp/fib.js:5:1", "fib", "/tmp/fib.js", 5, 1);
  parsed("JS:*get size /app/m.js:10:12", "get size", "/app/m.js", 10, 12);
  parsed("JS:~ /app/m.js:1:1", "", "/app/m.js", 1, 1); /* anonymous */
  parsed("Function:x node:internal/main:2:3", "x", "node:internal/main", 2, 3);
  const char *no[] = {"JS:baz",
                      "JS:partial",
                      "Builtin:ArrayPrototypePush",
                      "JS:*f /a.js:0:1",
                      "JS:*f /a.js:1:0",
                      "JS:*f /a.js:1:x",
                      "JS:*f /a.js:99999999999:1",
                      "JS:*f /a.js:1",
                      "JS:*f :1:2",
                      "JS:*f/a.js:1:2",
                      "*f /a.js:1:2",
                      "RegExp:[a-z]+",
                      ""};
  ember_jsname_t j;
  for (size_t i = 0; i < sizeof no / sizeof *no; i++)
    if (ember_jsname_parse(no[i], &j)) fail_msg("parsed: %s", no[i]);
  assert_false(ember_jsname_parse(NULL, &j));
}

static void path(const char *script, const char *want) {
  char buf[64];
  bool ok = ember_jsname_script_path(script, strlen(script), buf, sizeof buf);
  if (want == NULL) {
    if (ok) fail_msg("%s gave a path: %s", script, buf);
    return;
  }
  if (!ok) fail_msg("%s gave no path", script);
  assert_string_equal(buf, want);
}

static void test_script_paths(void **state) {
  (void)state;
  path("/app/dist/app.min.js", "/app/dist/app.min.js");
  path("file:///app/dist/app.mjs", "/app/dist/app.mjs");
  path("file://localhost/app/a%20b.mjs", "/app/a b.mjs");
  path("file:///app/x.mjs?v=2#h", "/app/x.mjs");
  path("/app/..x/y.js", "/app/..x/y.js");
  path("node:internal/main", NULL);
  path("evalmachine.<anonymous>", NULL);
  path("https://example.invalid/app.js", NULL);
  path("dist/app.js", NULL);
  path("/app/../etc/passwd", NULL);
  path("/app/..", NULL);
  path("file:///a%00b.js", NULL);
  path("file:///a%4", NULL);
  path("file:///a%zz.js", NULL);
  path("/a/very/long/path/that/does/not/fit/into/the/sixty-four/bytes/given", NULL);
  char tiny[1];
  assert_false(ember_jsname_script_path("/a", 2, tiny, sizeof tiny));
}

static void lexical(const char *in, const char *want) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", in);
  ember_jsname_path_lexical(buf);
  assert_string_equal(buf, want);
}

static void test_lexical_paths(void **state) {
  (void)state;
  lexical("/a/b/../c", "/a/c");
  lexical("/a/./b//c/", "/a/b/c");
  lexical("/../../x", "/x");
  lexical("/a/..", "/");
  lexical("/", "/");
  lexical("//", "/");
  lexical("/a/...b/.c", "/a/...b/.c");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_names),
                                     cmocka_unit_test(test_script_paths),
                                     cmocka_unit_test(test_lexical_paths)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
