/* Config files and flags, checked parsing, bounded buffers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "ember/buf.h"
#include "ember/config.h"
#include "ember/log.h"
#include "ember/parse.h"

static const char *write_file(const char *name, const char *text) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", EMBER_TEST_TMP, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  return path;
}

static void test_config_file_and_flags(void **state) {
  (void)state;
  const char *path = write_file("good.conf", "# Ember agent\n"
                                             "\n"
                                             "continuous_hz = 19\n"
                                             "  brokers=127.0.0.1:9092  \n"
                                             "kafka.security.protocol = SASL_SSL\n"
                                             "window = 10s\n"
                                             "spool = on\n"
                                             "empty =\n");
  ember_config_t *cfg = NULL;
  char err[256] = "";
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_load(cfg, path, err, sizeof err), 0);
  assert_string_equal(ember_config_get(cfg, "brokers"), "127.0.0.1:9092");
  assert_string_equal(ember_config_get(cfg, "empty"), "");
  assert_null(ember_config_get(cfg, "nope"));
  assert_string_equal(ember_config_get_str(cfg, "nope", "dflt"), "dflt");
  /* A flag after the file wins. */
  assert_int_equal(ember_config_set_arg(cfg, "continuous_hz=99", err, sizeof err), 0);
  uint64_t hz;
  assert_int_equal(ember_config_get_u64(cfg, "continuous_hz", 19, 1, 1000, &hz, err, sizeof err),
                   0);
  assert_int_equal(hz, 99);
  assert_int_equal(ember_config_get_u64(cfg, "missing", 7, 1, 1000, &hz, err, sizeof err), 0);
  assert_int_equal(hz, 7);
  int64_t ns;
  assert_int_equal(
      ember_config_get_duration_ns(cfg, "window", 0, 1000000000, 60000000000, &ns, err, sizeof err),
      0);
  assert_int_equal(ns, 10000000000);
  bool on;
  assert_int_equal(ember_config_get_bool(cfg, "spool", false, &on, err, sizeof err), 0);
  assert_true(on);

  const char *const known[] = {"continuous_hz", "brokers", "window", "spool",
                               "empty",         "kafka.",  NULL};
  assert_int_equal(ember_config_check(cfg, known, err, sizeof err), 0);
  const char *const fewer[] = {"brokers", "kafka.", NULL};
  assert_int_equal(ember_config_check(cfg, fewer, err, sizeof err), EMBER_ECONFIG);
  assert_string_equal(err, "config flag: unknown key 'continuous_hz'");
  ember_config_free(cfg);
  ember_config_free(NULL);
}

static int count_kafka(void *ctx, const char *key, const char *value) {
  int *n = ctx;
  assert_string_equal(key, "security.protocol");
  assert_string_equal(value, "SASL_SSL");
  (*n)++;
  return 0;
}

static void test_config_errors_name_the_line(void **state) {
  (void)state;
  ember_config_t *cfg = NULL;
  char err[256] = "";
  assert_int_equal(ember_config_new(&cfg), 0);
  const char *path = write_file("bad.conf", "a = 1\n# fine\nthis line has no equals\n");
  assert_int_equal(ember_config_load(cfg, path, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "line 3: expected 'key = value'"));
  path = write_file("bad2.conf", "bad key = 1\n");
  assert_int_equal(ember_config_load(cfg, path, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "line 1"));
  path = write_file("unknown.conf", "brokers = x\nhz = 5\n");
  assert_int_equal(ember_config_load(cfg, path, err, sizeof err), 0);
  const char *const known[] = {"brokers", "a", NULL};
  assert_int_equal(ember_config_check(cfg, known, err, sizeof err), EMBER_ECONFIG);
  assert_string_equal(err, "config line 2: unknown key 'hz'");
  uint64_t v;
  assert_int_equal(ember_config_get_u64(cfg, "brokers", 0, 0, 10, &v, err, sizeof err),
                   EMBER_ECONFIG);
  assert_string_equal(
      err, "config line 1: key 'brokers': expected a whole number from 0 to 10, got 'x'");
  assert_int_equal(ember_config_load(cfg, "/nonexistent/ember.conf", err, sizeof err), -ENOENT);
  assert_non_null(strstr(err, "/nonexistent/ember.conf"));
  assert_int_equal(ember_config_set_arg(cfg, "novalue", err, sizeof err), EMBER_ECONFIG);
  assert_int_equal(ember_config_set_arg(cfg, "=x", err, sizeof err), EMBER_ECONFIG);
  assert_int_equal(ember_config_set(cfg, "", "x"), -EINVAL);

  assert_int_equal(ember_config_set(cfg, "kafka.security.protocol", "SASL_SSL"), 0);
  int n = 0;
  assert_int_equal(ember_config_each(cfg, "kafka.", count_kafka, &n), 0);
  assert_int_equal(n, 1);
  ember_config_free(cfg);
}

static void test_config_survives_allocation_failures(void **state) {
  (void)state;
  const char *path = write_file("alloc.conf", "a = 1\nb = 2\nc = 3\na = 4\n");
  for (long n = 0;; n++) {
    ember_config_t *cfg = NULL;
    char err[256];
    ember_alloc_fail_after(n);
    int rc = ember_config_new(&cfg);
    if (rc == 0) rc = ember_config_load(cfg, path, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) {
      assert_string_equal(ember_config_get(cfg, "a"), "4");
      ember_config_free(cfg);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
    ember_config_free(cfg);
  }
}

/* argv strings are never written through; ARG drops the literal's const. */
#define ARG(lit) ((char *)(uintptr_t)(lit))

static void test_config_daemon_args(void **state) {
  (void)state;
  static const char *const known[] = {ARG("brokers"), ARG("log_level"), ARG(NULL)};
  char *ok[] = {ARG("brokers=b:9092"), ARG("log_level=warn")};
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_daemon_args("d", "usage\n", 2, ok, known, &cfg), -1);
  assert_non_null(cfg);
  assert_string_equal(ember_config_get(cfg, "brokers"), "b:9092");
  ember_config_free(cfg);
  ember_log_set_level(EMBER_LOG_INFO);
  char *help[] = {ARG("brokers=x"), ARG("--help")};
  assert_int_equal(ember_config_daemon_args("d", "usage\n", 2, help, known, &cfg), 0);
  assert_null(cfg);
  char *unknown[] = {ARG("bokers=x")};
  assert_int_equal(ember_config_daemon_args("d", "usage\n", 1, unknown, known, &cfg), 2);
  assert_null(cfg);
  char *flag[] = {ARG("--verbose")};
  assert_int_equal(ember_config_daemon_args("d", "usage\n", 1, flag, known, &cfg), 2);
  char *level[] = {ARG("log_level=loud")};
  assert_int_equal(ember_config_daemon_args("d", "usage\n", 1, level, known, &cfg), 2);
  assert_null(cfg);
}

static void test_parse_time(void **state) {
  (void)state;
  const int64_t now = 1764410400LL * 1000000000; /* 2025-11-29T10:00:00Z */
  int64_t t = 7;
  assert_int_equal(ember_parse_time("now", now, &t), 0);
  assert_true(t == now);
  assert_int_equal(ember_parse_time("-15m", now, &t), 0);
  assert_true(t == now - 15LL * 60 * 1000000000);
  assert_int_equal(ember_parse_time("now-2h", now, &t), 0);
  assert_true(t == now - 2LL * 3600 * 1000000000);
  assert_int_equal(ember_parse_time("-90", now, &t), 0); /* bare = seconds */
  assert_true(t == now - 90LL * 1000000000);
  assert_int_equal(ember_parse_time("1764410400", now, &t), 0);
  assert_true(t == now);
  assert_int_equal(ember_parse_time("1764410400.25", now, &t), 0);
  assert_true(t == now + 250000000);
  assert_int_equal(ember_parse_time("2025-11-29T10:00:00Z", now, &t), 0);
  assert_true(t == now);
  assert_int_equal(ember_parse_time("2025-11-29T11:00:00.5+01:00", now, &t), 0);
  assert_true(t == now + 500000000);
  assert_int_equal(ember_parse_time("2025-11-29T09:30:00-00:30", now, &t), 0);
  assert_true(t == now);
  assert_int_equal(ember_parse_time("1970-01-01T00:00:00Z", now, &t), 0);
  assert_true(t == 0);
  assert_int_equal(ember_parse_time("2024-02-29T00:00:00Z", now, &t), 0);
  assert_true(t == 1709164800LL * 1000000000);
  t = 7;
  const char *bad[] = {"",
                       "yesterday",
                       "-",
                       "-15x",
                       "15m",
                       "1.",
                       "1.1234567890",
                       "2025-13-01T00:00:00Z",
                       "2025-02-29T00:00:00Z",
                       "2025-11-29T10:00:00",
                       "2025-11-29T10:00:00+1",
                       "2025-11-29 10:00:00Z",
                       "12e3",
                       "now+5m"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_not_equal(ember_parse_time(bad[i], now, &t), 0);
    assert_true(t == 7);
  }
  assert_int_equal(ember_parse_time("99999999999999", now, &t), -ERANGE);
}

static void test_parse_numbers(void **state) {
  (void)state;
  uint64_t u = 5;
  assert_int_equal(ember_parse_u64("42", 0, 100, &u), 0);
  assert_int_equal(u, 42);
  assert_int_equal(ember_parse_u64("0x1f", 0, 100, &u), 0);
  assert_int_equal(u, 31);
  assert_int_equal(ember_parse_u64("18446744073709551615", 0, UINT64_MAX, &u), 0);
  assert_int_equal(u, UINT64_MAX);
  u = 5;
  assert_int_equal(ember_parse_u64("18446744073709551616", 0, UINT64_MAX, &u), -ERANGE);
  assert_int_equal(ember_parse_u64("101", 0, 100, &u), -ERANGE);
  assert_int_equal(ember_parse_u64("-1", 0, 100, &u), -EINVAL);
  assert_int_equal(ember_parse_u64(" 1", 0, 100, &u), -EINVAL);
  assert_int_equal(ember_parse_u64("1x", 0, 100, &u), -EINVAL);
  assert_int_equal(ember_parse_u64("", 0, 100, &u), -EINVAL);
  assert_int_equal(ember_parse_u64("0x", 0, 100, &u), -EINVAL);
  assert_int_equal(u, 5); /* untouched on failure */
  int64_t i;
  assert_int_equal(ember_parse_i64("-15", -100, 100, &i), 0);
  assert_int_equal(i, -15);
  assert_int_equal(ember_parse_i64("+7", -100, 100, &i), 0);
  assert_int_equal(i, 7);
  assert_int_equal(ember_parse_i64("-", -100, 100, &i), -EINVAL);
  assert_int_equal(ember_parse_i64("-101", -100, 100, &i), -ERANGE);
  bool b;
  assert_int_equal(ember_parse_bool("YES", &b), 0);
  assert_true(b);
  assert_int_equal(ember_parse_bool("off", &b), 0);
  assert_false(b);
  assert_int_equal(ember_parse_bool("maybe", &b), -EINVAL);
}

static void test_parse_durations(void **state) {
  (void)state;
  int64_t ns;
  assert_int_equal(ember_parse_duration_ns("250ms", 1, &ns), 0);
  assert_int_equal(ns, 250000000);
  assert_int_equal(ember_parse_duration_ns("15m", 1, &ns), 0);
  assert_int_equal(ns, 900000000000);
  assert_int_equal(ember_parse_duration_ns("7d", 1, &ns), 0);
  assert_int_equal(ns, 7 * 86400000000000LL);
  assert_int_equal(ember_parse_duration_ns("5000", 1000000, &ns), 0);
  assert_int_equal(ns, 5000000000);
  assert_int_equal(ember_parse_duration_ns("5 s", 1, &ns), -EINVAL);
  assert_int_equal(ember_parse_duration_ns("5y", 1, &ns), -EINVAL);
  assert_int_equal(ember_parse_duration_ns("ms", 1, &ns), -EINVAL);
  assert_int_equal(ember_parse_duration_ns("9999999999999d", 1, &ns), -ERANGE);
}

static void test_buf_bounds(void **state) {
  (void)state;
  ember_buf_t b;
  ember_buf_init(&b, 10);
  assert_int_equal(ember_buf_puts(&b, "hello"), 0);
  assert_int_equal(ember_buf_printf(&b, "%d", 1234), 0);
  assert_string_equal(b.data, "hello1234");
  assert_int_equal(ember_buf_puts(&b, "xx"), EMBER_ETOOBIG);
  assert_string_equal(b.data, "hello1234"); /* unchanged */
  assert_int_equal(ember_buf_puts(&b, "!"), 0);
  assert_int_equal(b.len, 10);
  size_t len;
  char *s = ember_buf_take(&b, &len);
  assert_int_equal(len, 10);
  assert_string_equal(s, "hello1234!");
  ember_free(s);
  assert_null(b.data);
  /* A long printf goes past the small stack buffer. */
  ember_buf_init(&b, 4096);
  assert_int_equal(ember_buf_printf(&b, "%0600d", 7), 0);
  assert_int_equal(b.len, 600);
  assert_int_equal(b.data[599], '7');
  ember_buf_free(&b);
}

static void test_log_levels_and_errors(void **state) {
  (void)state;
  ember_log_level_t l;
  assert_int_equal(ember_log_parse_level("WARN", &l), 0);
  assert_int_equal(l, EMBER_LOG_WARN);
  assert_int_equal(ember_log_parse_level("loud", &l), -EINVAL);
  assert_string_equal(ember_strerror(EMBER_ECORRUPT), "malformed input");
  assert_string_equal(ember_strerror(-ENOENT), "No such file or directory");
  assert_string_equal(ember_strerror(12345), "unknown error");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_config_file_and_flags),
      cmocka_unit_test(test_config_errors_name_the_line),
      cmocka_unit_test(test_config_survives_allocation_failures),
      cmocka_unit_test(test_parse_numbers),
      cmocka_unit_test(test_parse_time),
      cmocka_unit_test(test_config_daemon_args),
      cmocka_unit_test(test_parse_durations),
      cmocka_unit_test(test_buf_bounds),
      cmocka_unit_test(test_log_levels_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
