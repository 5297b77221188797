#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "ember/log.h"

static ember_log_level_t log_level = EMBER_LOG_INFO;

static int64_t clock_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void ember_log_set_level(ember_log_level_t level) { log_level = level; }

int ember_log_parse_level(const char *s, ember_log_level_t *out) {
  for (int i = EMBER_LOG_DEBUG; i <= EMBER_LOG_OFF; i++) {
    if (s != NULL && strcasecmp(s, level_names[i]) == 0) {
      *out = (ember_log_level_t)i;
      return 0;
    }
  }
  return -EINVAL;
}

void ember_log(ember_log_level_t level, const char *component, const char *fmt, ...) {
  if (level < log_level || level >= EMBER_LOG_OFF) return;
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  size_t n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
  int k = snprintf(line + n, sizeof line - n, ".%03ldZ %-5s %s: ", ts.tv_nsec / 1000000,
                   level_names[level], component);
  if (k > 0) n += (size_t)k;
  if (n < sizeof line) {
    va_list ap;
    va_start(ap, fmt);
    k = vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    if (k > 0) n += (size_t)k;
  }
  /* A truncated line still ends in a newline, and control characters from
   * untrusted input (a process name, a Kafka key) cannot forge a new line. */
  if (n > sizeof line - 2) n = sizeof line - 2;
  for (size_t i = 0; i < n; i++) {
    if (line[i] == '\n' || line[i] == '\r') line[i] = ' ';
  }
  line[n++] = '\n';
  ssize_t w;
  do {
    w = write(STDERR_FILENO, line, n);
  } while (w < 0 && errno == EINTR);
}

bool ember_log_limit_take(ember_log_limit_t *l, int64_t now_ns, uint64_t *suppressed) {
  uint32_t max = l->lines ? l->lines : 1;
  int64_t period = l->period_ns > 0 ? l->period_ns : 1000000000;
  bool take;
  pthread_mutex_lock(&l->mu);
  if (l->start_ns == INT64_MIN || now_ns - l->start_ns >= period || now_ns < l->start_ns) {
    l->start_ns = now_ns;
    l->used = 0;
  }
  take = l->used < max;
  if (take) {
    l->used++;
    *suppressed = l->suppressed;
    l->suppressed = 0;
  } else {
    l->suppressed++;
  }
  pthread_mutex_unlock(&l->mu);
  return take;
}

void ember_log_limited(ember_log_limit_t *l, ember_log_level_t level, const char *component,
                       const char *fmt, ...) {
  if (level < log_level || level >= EMBER_LOG_OFF) return;
  uint64_t suppressed = 0;
  if (!ember_log_limit_take(l, clock_mono_ns(), &suppressed)) return;
  char msg[1900];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (k < 0) msg[0] = '\0';
  if (suppressed > 0)
    ember_log(level, component, "%s (%" PRIu64 " similar line%s not logged before this one)", msg,
              suppressed, suppressed == 1 ? "" : "s");
  else
    ember_log(level, component, "%s", msg);
}
