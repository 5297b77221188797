/* The maps parser's walking API (agent/procmaps.h): mappings in address
 * order, the first one matching a predicate, and the basename of a
 * mapped file. Parsing itself is covered in test_symbolize.c and by the
 * fuzzer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "procmaps.h"

static const char maps[] =
    "7f0000040000-7f0000050000 r-xp 00001000 fd:01 99   /usr/lib/libc.so.6 (deleted)\n"
    "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/app\n"
    "00651000-00652000 r--p 00051000 08:02 173521      /usr/bin/app\n"
    "7f0000020000-7f0000030000 r-xp 00000000 00:00 0            [anon:v8]\n"
    "7f0000060000-7f0000070000 r-xp 00001000 fd:01 98   /lib/x86_64-linux-gnu/libc.so.6\n"
    "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0            [vdso]\n";

static bool is_libc(const ember__mapping_t *mp, void *ctx) {
  int *calls = ctx;
  (*calls)++;
  return !mp->deleted && strncmp(ember__mapping_basename(mp), "libc.so", 7) == 0;
}

static void test_procmaps_walk_and_find(void **state) {
  (void)state;
  ember__procmaps_t *m = NULL;
  assert_int_equal(ember__procmaps_parse(maps, sizeof maps - 1, &m), 0);
  assert_int_equal(ember__procmaps_count(m), 5); /* executable ones only */
  uint64_t prev = 0;
  for (size_t i = 0; i < ember__procmaps_count(m); i++) {
    const ember__mapping_t *mp = ember__procmaps_get(m, i);
    assert_non_null(mp);
    assert_true(mp->start >= prev);
    prev = mp->start;
  }
  assert_null(ember__procmaps_get(m, 5));
  assert_string_equal(ember__mapping_basename(ember__procmaps_get(m, 0)), "app");
  assert_string_equal(ember__mapping_basename(ember__procmaps_get(m, 1)), ""); /* anon */

  int calls = 0;
  const ember__mapping_t *libc = ember__procmaps_find_if(m, is_libc, &calls);
  assert_non_null(libc);
  assert_int_equal(libc->start, 0x7f0000060000);
  assert_string_equal(libc->path, "/lib/x86_64-linux-gnu/libc.so.6");
  assert_int_equal(calls, 4); /* app, anon, the deleted libc, libc */
  assert_ptr_equal(ember__procmaps_find(m, 0x7f0000060010), libc);
  assert_int_equal(ember__procmaps_uid(m), -1);
  ember__procmaps_free(m);

  assert_null(ember__procmaps_find_if(NULL, is_libc, &calls));
  assert_null(ember__procmaps_get(NULL, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_procmaps_walk_and_find),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
