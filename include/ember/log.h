/* One line per notable event, to stderr:
 *   2026-11-29T21:09:37.123Z info  agent: published window seq=42 (3 targets)
 * The level threshold is process-wide and set once at start-up. Thread-safe:
 * each line is written with a single write(2). */
#ifndef EMBER_LOG_H
#define EMBER_LOG_H

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

#ifdef __cplusplus
}
#endif
#endif
