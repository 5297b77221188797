/* The log's rate limiter (include/ember/log.h): a stream of bad input
 * writes at most N lines a second, and its next line says how many were
 * not written. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/log.h"

#define SEC 1000000000LL

static void test_log_limit_counts_what_it_drops(void **state) {
  (void)state;
  ember_log_limit_t l = EMBER_LOG_LIMIT_INIT(3);
  uint64_t sup = 99;
  int64_t t0 = 5 * SEC;
  for (int i = 0; i < 3; i++) {
    assert_true(ember_log_limit_take(&l, t0 + i, &sup));
    assert_int_equal(sup, 0);
  }
  for (int i = 0; i < 1000; i++) assert_false(ember_log_limit_take(&l, t0 + 1000 + i, &sup));
  /* Still within the second. */
  assert_false(ember_log_limit_take(&l, t0 + SEC - 1, &sup));
  /* The next second: the first line carries the count, the rest do not. */
  assert_true(ember_log_limit_take(&l, t0 + SEC, &sup));
  assert_int_equal(sup, 1001);
  assert_true(ember_log_limit_take(&l, t0 + SEC + 1, &sup));
  assert_int_equal(sup, 0);
  /* A quiet stream starts a fresh second at its next line. */
  assert_true(ember_log_limit_take(&l, t0 + 100 * SEC, &sup));
  assert_int_equal(sup, 0);
  /* A clock that went back (it is monotonic; a test may pass anything)
   * starts a second too, rather than silencing the stream. */
  assert_true(ember_log_limit_take(&l, 0, &sup));
  ember_log_limit_t zero = EMBER_LOG_LIMIT_INIT(0); /* counts as 1 */
  assert_true(ember_log_limit_take(&zero, 0, &sup));
  assert_false(ember_log_limit_take(&zero, 1, &sup));
}

/* A longer period (the HTTP layer's: one line per reason per 10 s). */
static void test_log_limit_every_period(void **state) {
  (void)state;
  ember_log_limit_t l = EMBER_LOG_LIMIT_INIT_EVERY(1, 10 * SEC);
  uint64_t sup = 99;
  assert_true(ember_log_limit_take(&l, SEC, &sup));
  assert_int_equal(sup, 0);
  for (int i = 2; i <= 10; i++) assert_false(ember_log_limit_take(&l, i * SEC, &sup));
  assert_false(ember_log_limit_take(&l, 11 * SEC - 1, &sup));
  assert_true(ember_log_limit_take(&l, 11 * SEC, &sup));
  assert_int_equal(sup, 10);
}

/* Lines of stderr written while fn runs. */
static size_t count_lines(void (*fn)(void), char *text, size_t size) {
  char path[] = "/tmp/ember-test-log-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  int saved = dup(STDERR_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fd, STDERR_FILENO) >= 0);
  fn();
  assert_true(dup2(saved, STDERR_FILENO) >= 0);
  close(saved);
  ssize_t n = pread(fd, text, size - 1, 0);
  close(fd);
  assert_true(n >= 0);
  text[n] = '\0';
  size_t lines = 0;
  for (ssize_t i = 0; i < n; i++) lines += text[i] == '\n';
  return lines;
}

/* 10,000 bad messages in a burst: a few lines, not 10,000. */
static void flood(void) {
  for (int i = 0; i < 10000; i++) EMBER_WARN_LIMITED("test", "bad message %d", i);
}

static void test_log_limited_macro_bounds_a_flood(void **state) {
  (void)state;
  static char text[1 << 16];
  size_t lines = count_lines(flood, text, sizeof text);
  print_message("10000 bad messages: %zu lines\n", lines);
  /* One burst fits in a second or two: 5 lines a second. */
  assert_true(lines >= 1 && lines <= 3 * EMBER_LOG_LIMIT_PER_SECOND);
  assert_non_null(strstr(text, "warn  test: bad message 0\n"));
}

/* The line after a quiet second says how many were dropped. */
static void flood_then_one(void) {
  for (int i = 0; i < 100; i++) EMBER_WARN_LIMITED("test", "again %d", i);
}

static void test_log_limited_reports_the_dropped(void **state) {
  (void)state;
  static char text[1 << 16];
  /* The same call site twice: its stream carries over. */
  size_t first = count_lines(flood_then_one, text, sizeof text);
  assert_int_equal(first, EMBER_LOG_LIMIT_PER_SECOND);
  usleep(1100000);
  size_t second = count_lines(flood_then_one, text, sizeof text);
  assert_int_equal(second, EMBER_LOG_LIMIT_PER_SECOND);
  assert_non_null(strstr(text, "again 0 (95 similar lines not logged before this one)\n"));
  /* Below the level: neither written nor counted. */
  ember_log_set_level(EMBER_LOG_ERROR);
  size_t quiet = count_lines(flood_then_one, text, sizeof text);
  ember_log_set_level(EMBER_LOG_INFO);
  assert_int_equal(quiet, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_log_limit_counts_what_it_drops),
      cmocka_unit_test(test_log_limit_every_period),
      cmocka_unit_test(test_log_limited_macro_bounds_a_flood),
      cmocka_unit_test(test_log_limited_reports_the_dropped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
