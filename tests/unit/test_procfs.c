/* The /proc helpers (agent/procfs.h): bounded reads of kernel files,
 * sysctls, task lists, and the line reader and field scanners the /proc
 * parsers share. Fake files under the test's tmp dir stand in for the
 * kernel's where a case needs exact content. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "procfs.h"

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_procfs_read_str_and_sysctl(void **state) {
  (void)state;
  const char *p = EMBER_TEST_TMP "/procfs-sysctl";
  write_file(p, "42\n");
  assert_int_equal(ember__read_sysctl(p), 42);
  write_file(p, "-7");
  assert_int_equal(ember__read_sysctl(p), -7);
  write_file(p, "12 junk\n");
  assert_int_equal(ember__read_sysctl(p), -1);
  write_file(p, "99999999999\n");
  assert_int_equal(ember__read_sysctl(p), -1);
  assert_int_equal(ember__read_sysctl(EMBER_TEST_TMP "/procfs-no-such"), -1);
  /* A real one: the kernel always has it. */
  assert_true(ember__read_sysctl("/proc/sys/kernel/pid_max") > 0);

  /* Read as a string: cut at size - 1, NUL-terminated. */
  char buf[4];
  write_file(p, "abcdef");
  assert_int_equal(ember__proc_read_str(p, buf, sizeof buf), 0);
  assert_string_equal(buf, "abc");
  assert_int_equal(ember__proc_read_str(p, buf, 0), -EINVAL);
  unlink(p);

  /* Never a FIFO: opening one for reading would block. */
  const char *fifo = EMBER_TEST_TMP "/procfs-fifo";
  unlink(fifo);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  size_t len = 0;
  assert_int_equal(ember__proc_read_at(AT_FDCWD, fifo, buf, sizeof buf, &len), -ENODEV);
  unlink(fifo);
}

static void test_procfs_tids(void **state) {
  (void)state;
  pid_t *tids = NULL;
  size_t n = 0;
  assert_int_equal(ember__proc_tids(NULL, getpid(), &tids, &n), 0);
  bool self = false;
  for (size_t i = 0; i < n; i++) self |= tids[i] == getpid();
  assert_true(self);
  ember_free(tids);

  assert_int_equal(ember__proc_tids(NULL, 0x7ffffff0, &tids, &n), -ESRCH);

  /* A fake root: names that are not tids are skipped. */
  const char *root = EMBER_TEST_TMP "/procfs-root";
  mkdir(root, 0755);
  mkdir(EMBER_TEST_TMP "/procfs-root/77", 0755);
  mkdir(EMBER_TEST_TMP "/procfs-root/77/task", 0755);
  mkdir(EMBER_TEST_TMP "/procfs-root/77/task/77", 0755);
  mkdir(EMBER_TEST_TMP "/procfs-root/77/task/78", 0755);
  mkdir(EMBER_TEST_TMP "/procfs-root/77/task/x9", 0755);
  mkdir(EMBER_TEST_TMP "/procfs-root/77/task/0", 0755);
  assert_int_equal(ember__proc_tids(root, 77, &tids, &n), 0);
  assert_int_equal(n, 2);
  assert_true((tids[0] == 77 && tids[1] == 78) || (tids[0] == 78 && tids[1] == 77));
  ember_free(tids);
}

typedef struct lines {
  size_t n;
  char last[64];
  size_t longest;
} lines_t;

static int on_line(void *ctx, char *line, size_t len) {
  lines_t *l = ctx;
  l->n++;
  if (len > l->longest) l->longest = len;
  snprintf(l->last, sizeof l->last, "%s", line);
  return 0;
}

static void test_procfs_read_lines(void **state) {
  (void)state;
  const char *p = EMBER_TEST_TMP "/procfs-lines";
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs("one\ntwo\n", f);
  /* A line longer than the bound is skipped whole. */
  for (size_t i = 0; i < EMBER__LINE_MAX + 10; i++) fputc('x', f);
  fputs("\nthree\npartial", f);
  fclose(f);

  lines_t l = {0};
  uint64_t consumed = 0;
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(ember__read_lines(fd, false, on_line, &l, &consumed), 0);
  close(fd);
  assert_int_equal(l.n, 3);
  assert_string_equal(l.last, "three");
  assert_true(l.longest < 10);
  assert_int_equal(consumed, 8 + EMBER__LINE_MAX + 10 + 1 + 6); /* up to the last newline */

  l = (lines_t){0};
  fd = open(p, O_RDONLY | O_CLOEXEC);
  assert_int_equal(ember__read_lines(fd, true, on_line, &l, NULL), 0);
  close(fd);
  assert_int_equal(l.n, 4);
  assert_string_equal(l.last, "partial");
  unlink(p);
}

static void test_procfs_scanners(void **state) {
  (void)state;
  const char *s = "7f00beef-rest";
  uint64_t v = 0;
  assert_true(ember__scan_hex(&s, &v));
  assert_int_equal(v, 0x7f00beef);
  assert_string_equal(s, "-rest");
  s = "ffffffffffffffff0"; /* 17 digits: overflow */
  assert_false(ember__scan_hex(&s, &v));
  assert_int_equal(v, 0x7f00beef); /* untouched */
  s = "zz";
  assert_false(ember__scan_hex(&s, &v));
  s = "18446744073709551615 x";
  assert_true(ember__scan_dec(&s, &v));
  assert_int_equal(v, UINT64_MAX);
  s = "18446744073709551616";
  assert_false(ember__scan_dec(&s, &v));
  assert_string_equal(ember__skip_blanks(" \t a"), "a");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_procfs_read_str_and_sysctl),
      cmocka_unit_test(test_procfs_tids),
      cmocka_unit_test(test_procfs_read_lines),
      cmocka_unit_test(test_procfs_scanners),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
