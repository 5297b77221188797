/* Checked parsing of numbers and values from text (config, flags, HTTP).
 * These replace atoi/strtol, which STYLE.md bans: each rejects empty input,
 * trailing garbage, signs where none belong and values out of range. */
#ifndef EMBER_PARSE_H
#define EMBER_PARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Decimal (or 0x-prefixed hex) unsigned integer in [min, max].
 * Returns 0, -EINVAL (not a number) or -ERANGE; *out untouched on failure. */
EMBER_API int ember_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
EMBER_API int ember_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
/* true/false, yes/no, on/off, 1/0 (case-insensitive). */
EMBER_API int ember_parse_bool(const char *s, bool *out);
/* A duration: a number with unit ns, us, ms, s, m, h or d ("250ms", "10s");
 * a bare number is taken in `bare_unit_ns` nanoseconds. Result in ns. */
EMBER_API int ember_parse_duration_ns(const char *s, int64_t bare_unit_ns, int64_t *out);

/* A point in time, for query ranges (CLI flags, HTTP parameters):
 *   "now"                         now_ns
 *   "-15m", "now-2h", "-90s"      now_ns minus a duration (units as above)
 *   "1732838400", "1732838400.25" Unix seconds, up to 9 decimals
 *   "2026-11-29T10:00:00Z", "2026-11-29T10:00:00.5+01:00"  RFC 3339
 * Result in Unix nanoseconds. Returns 0, -EINVAL (none of these forms) or
 * -ERANGE (outside what int64 nanoseconds hold). */
EMBER_API int ember_parse_time(const char *s, int64_t now_ns, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
