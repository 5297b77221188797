/* One line per notable event, to stderr:
 *   2026-11-29T21:09:37.123Z info  agent: published window seq=42 (3 targets)
 * The level threshold is process-wide and set once at start-up. Thread-safe:
 * each line is written with a single write(2). */
#ifndef EMBER_LOG_H
#define EMBER_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_log_level {
  EMBER_LOG_DEBUG = 0,
  EMBER_LOG_INFO = 1,
  EMBER_LOG_WARN = 2,
  EMBER_LOG_ERROR = 3,
  EMBER_LOG_OFF = 4
} ember_log_level_t;

/* Set the lowest level that is written (default INFO). Call before threads
 * start. */
EMBER_API void ember_log_set_level(ember_log_level_t level);
/* Parse "debug", "info", "warn", "error" or "off". Returns 0 or -EINVAL. */
EMBER_API int ember_log_parse_level(const char *s, ember_log_level_t *out);
EMBER_API void ember_log(ember_log_level_t level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define EMBER_DEBUG(c, ...) ember_log(EMBER_LOG_DEBUG, c, __VA_ARGS__)
#define EMBER_INFO(c, ...)  ember_log(EMBER_LOG_INFO, c, __VA_ARGS__)
#define EMBER_WARN(c, ...)  ember_log(EMBER_LOG_WARN, c, __VA_ARGS__)
#define EMBER_ERROR(c, ...) ember_log(EMBER_LOG_ERROR, c, __VA_ARGS__)

/* Rate-limited lines, for every stream of bad input (malformed Kafka
 * messages, refused commands, bad requests): whoever can send it must not
 * be able to flood the log. A stream writes at most `lines` lines in each
 * period (one second unless set; the monotonic clock); the lines past that
 * are counted,
 * and the stream's next line written says how many were not:
 *   ... warn  session: ember.commands [0] offset 7: not a command (...):
 *   ignored (1234 similar lines not logged before this one)
 * What each line is about is also counted in a metric, so the log may
 * drop lines but the numbers do not. Thread-safe (a mutex per stream). */
typedef struct ember_log_limit {
  pthread_mutex_t mu;
  uint32_t lines;      /* per period; 0 counts as 1 */
  int64_t period_ns;   /* 0 = one second */
  uint32_t used;       /* lines written in the current period */
  int64_t start_ns;    /* when the current period began (monotonic) */
  uint64_t suppressed; /* lines not written since the last one that was */
} ember_log_limit_t;

/* The rate of the EMBER_*_LIMITED macros. */
#define EMBER_LOG_LIMIT_PER_SECOND 5
#define EMBER_LOG_LIMIT_INIT(n)    EMBER_LOG_LIMIT_INIT_EVERY(n, 0)
/* n lines every period_ns: a stream that may repeat for as long as an
 * attacker likes (the HTTP layer's refusals) may want a longer period. */
#define EMBER_LOG_LIMIT_INIT_EVERY(n, period_ns)                                                   \
  { PTHREAD_MUTEX_INITIALIZER, (n), (period_ns), 0, INT64_MIN, 0 }

/* Whether a line of the stream at `now_ns` (monotonic) is written. When it
 * is, *suppressed is how many were not since the last one written (and the
 * count restarts). For tests; ember_log_limited calls it. */
EMBER_API bool ember_log_limit_take(ember_log_limit_t *l, int64_t now_ns, uint64_t *suppressed);
/* ember_log, at most l->lines lines a period (see above). Lines below
 * the log level are neither written nor counted. */
EMBER_API void ember_log_limited(ember_log_limit_t *l, ember_log_level_t level,
                                 const char *component, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* One stream per call site: the macro keeps its own limiter, so replacing
 * EMBER_WARN with EMBER_WARN_LIMITED is all a call site needs. */
#define EMBER__LOG_LIMITED(level, c, ...)                                                          \
  do {                                                                                             \
    static ember_log_limit_t ember__limit_ = EMBER_LOG_LIMIT_INIT(EMBER_LOG_LIMIT_PER_SECOND);     \
    ember_log_limited(&ember__limit_, level, c, __VA_ARGS__);                                      \
  } while (0)
#define EMBER_INFO_LIMITED(c, ...)  EMBER__LOG_LIMITED(EMBER_LOG_INFO, c, __VA_ARGS__)
#define EMBER_WARN_LIMITED(c, ...)  EMBER__LOG_LIMITED(EMBER_LOG_WARN, c, __VA_ARGS__)
#define EMBER_ERROR_LIMITED(c, ...) EMBER__LOG_LIMITED(EMBER_LOG_ERROR, c, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
