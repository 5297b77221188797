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

/* Exactly `n` decimal digits at s, as an int. */
static int digits(const char *s, size_t n, int *out) {
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isdigit((unsigned char)s[i])) return -EINVAL;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return 0;
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil), so no timegm()/TZ dependence. */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/* "SSSS[.fffffffff]" after the integer part: the fraction in ns. */
static int fraction_ns(const char **sp, int64_t *ns) {
  const char *s = *sp;
  *ns = 0;
  if (*s != '.') return 0;
  s++;
  int64_t scale = 100000000;
  size_t n = 0;
  while (isdigit((unsigned char)s[n])) {
    if (n >= 9) return -EINVAL;
    *ns += (s[n] - '0') * scale;
    scale /= 10;
    n++;
  }
  if (n == 0) return -EINVAL;
  *sp = s + n;
  return 0;
}

static int parse_rfc3339(const char *s, int64_t *out) {
  int y, mo, d, h, mi, se;
  if (strlen(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
      s[13] != ':' || s[16] != ':')
    return -EINVAL;
  if (digits(s, 4, &y) || digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) || digits(s + 11, 2, &h) ||
      digits(s + 14, 2, &mi) || digits(s + 17, 2, &se))
    return -EINVAL;
  static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || se > 60)
    return -EINVAL;
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo == 2 && d == 29 && !leap) return -EINVAL;
  const char *p = s + 19;
  int64_t frac;
  if (fraction_ns(&p, &frac) != 0) return -EINVAL;
  int64_t offset_s = 0;
  if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
    offset_s = 0;
  } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
    int oh, om;
    if (digits(p + 1, 2, &oh) || digits(p + 4, 2, &om) || oh > 23 || om > 59) return -EINVAL;
    offset_s = (oh * 3600 + om * 60) * (*p == '-' ? -1 : 1);
  } else {
    return -EINVAL;
  }
  int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - offset_s;
  if (secs > INT64_MAX / 1000000000 - 1 || secs < INT64_MIN / 1000000000 + 1) return -ERANGE;
  *out = secs * 1000000000 + frac;
  return 0;
}

int ember_parse_time(const char *s, int64_t now_ns, int64_t *out) {
  if (s == NULL || out == NULL) return -EINVAL;
  if (strcmp(s, "now") == 0) {
    *out = now_ns;
    return 0;
  }
  const char *rel = NULL;
  if (s[0] == '-')
    rel = s + 1;
  else if (strncmp(s, "now-", 4) == 0)
    rel = s + 4;
  if (rel != NULL) {
    int64_t d;
    int rc = ember_parse_duration_ns(rel, 1000000000, &d);
    if (rc != 0) return rc;
    if (now_ns < INT64_MIN + d) return -ERANGE;
    *out = now_ns - d;
    return 0;
  }
  if (strchr(s, 'T') != NULL || strchr(s, 't') != NULL) return parse_rfc3339(s, out);
  /* Unix seconds, optionally with a fraction. */
  size_t n = 0;
  while (isdigit((unsigned char)s[n])) n++;
  if (n == 0 || n > 12) return n == 0 ? -EINVAL : -ERANGE;
  char whole[13];
  memcpy(whole, s, n);
  whole[n] = '\0';
  int64_t secs;
  int rc = ember_parse_i64(whole, 0, INT64_MAX / 1000000000 - 1, &secs);
  if (rc != 0) return rc;
  const char *p = s + n;
  int64_t frac;
  if (fraction_ns(&p, &frac) != 0 || *p != '\0') return -EINVAL;
  *out = secs * 1000000000 + frac;
  return 0;
}
