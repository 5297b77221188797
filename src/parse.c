/* The one place that calls strtoull/strtoll: every caller goes through these
 * checked wrappers (scripts/check-banned.sh enforces it). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ember/parse.h"

int ember_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (s == NULL || out == NULL) return -EINVAL;
  /* strtoull accepts leading blanks and a minus sign (wrapping the value);
   * a user who typed either made a mistake we should name. */
  if (!isdigit((unsigned char)s[0])) return -EINVAL;
  int base = (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, base);
  if (end == s || *end != '\0' || (base == 16 && end == s + 2)) return -EINVAL;
  if (errno == ERANGE || v < min || v > max) return -ERANGE;
  *out = (uint64_t)v;
  return 0;
}

int ember_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
  if (s == NULL || out == NULL) return -EINVAL;
  const char *d = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
  if (!isdigit((unsigned char)d[0])) return -EINVAL;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (end == s || *end != '\0') return -EINVAL;
  if (errno == ERANGE || v < min || v > max) return -ERANGE;
  *out = (int64_t)v;
  return 0;
}

int ember_parse_bool(const char *s, bool *out) {
  static const char *const yes[] = {"true", "yes", "on", "1"};
  static const char *const no[] = {"false", "no", "off", "0"};
  if (s == NULL || out == NULL) return -EINVAL;
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return -EINVAL;
}

int ember_parse_duration_ns(const char *s, int64_t bare_unit_ns, int64_t *out) {
  static const struct {
    const char *suffix;
    int64_t ns;
  } units[] = {{"ns", 1},
               {"us", 1000},
               {"ms", 1000000},
               {"s", 1000000000},
               {"m", 60LL * 1000000000},
               {"h", 3600LL * 1000000000},
               {"d", 86400LL * 1000000000}};
  if (s == NULL || out == NULL || bare_unit_ns <= 0) return -EINVAL;
  size_t n = 0;
  while (isdigit((unsigned char)s[n])) n++;
  if (n == 0 || n > 19) return n == 0 ? -EINVAL : -ERANGE;
  char digits[20];
  memcpy(digits, s, n);
  digits[n] = '\0';
  int64_t unit = bare_unit_ns;
  if (s[n] != '\0') {
    unit = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
      if (strcmp(s + n, units[i].suffix) == 0) unit = units[i].ns;
    }
    if (unit == 0) return -EINVAL;
  }
  int64_t v;
  int rc = ember_parse_i64(digits, 0, INT64_MAX, &v);
  if (rc != 0) return rc;
  if (v > INT64_MAX / unit) return -ERANGE;
  *out = v * unit;
  return 0;
}
