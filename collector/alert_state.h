/* The state of one alert: one (rule, group key) pair, stepped once per
 * evaluated window (docs/internals/alerts.md, "States").
 *
 *   inactive --breach--> pending (since = the window's start)
 *   pending  --breach, end - since >= for--> firing   (FIRING; for = 0
 *                                                      fires from inactive)
 *   pending  --no breach--> inactive                  (silently)
 *   firing   --value < threshold * (1 - hysteresis), from the start of the
 *              first such window to a window's end >= resolve_for--> resolved
 *   firing   --value > threshold--> firing, the resolve clock cleared; a value
 *              between threshold * (1 - h) and threshold leaves the clock as
 *              it is (neither starts nor clears it)
 *   resolved --breach--> pending (or firing when for = 0) with a new id
 *
 * A breach is value > threshold, strictly: a value at the threshold is not
 * one. A threshold that is NaN or +inf (a baseline with no data yet) never
 * breaches and counts as below the band. No data for a group is value 0.
 *
 * Pure: no I/O, no clock (the window is passed in), no allocation but the
 * JSON form. Not thread-safe: one state is stepped by one thread at a time.
 * Errors: 0, -EINVAL (bad argument or JSON, with a sentence in errbuf),
 * -ENOMEM; out-parameters untouched on failure. */
#ifndef EMBER_COLLECTOR_ALERT_STATE_H
#define EMBER_COLLECTOR_ALERT_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef enum ember__alert_phase {
  EMBER__PHASE_INACTIVE = 0,
  EMBER__PHASE_PENDING,
  EMBER__PHASE_FIRING,
  EMBER__PHASE_RESOLVED
} ember__alert_phase_t;

/* What one step did; NONE when the phase stayed (or pending was dropped). */
typedef enum ember__alert_transition {
  EMBER__TRANSITION_NONE = 0,
  EMBER__TRANSITION_PENDING,
  EMBER__TRANSITION_FIRING,
  EMBER__TRANSITION_RESOLVED
} ember__alert_transition_t;

#define EMBER__ALERT_ID_LEN 16        /* hex digits */
#define EMBER__ALERT_NONE   INT64_MIN /* a time that is not set */

typedef struct ember__alert_state {
  ember__alert_phase_t phase;
  /* The id of the current alert (pending or firing), or of the last one
   * (resolved, or inactive after one); "" before any. A new id is drawn
   * each time the state leaves inactive or resolved. */
  char id[EMBER__ALERT_ID_LEN + 1];
  int64_t since_ns;        /* pending/firing: start of the first breaching window */
  int64_t fired_ns;        /* firing/resolved: end of the window that fired */
  int64_t resolved_ns;     /* resolved: end of the window that resolved it; else NONE */
  int64_t below_since_ns;  /* firing: start of the resolve clock; else NONE */
  int64_t updated_ns;      /* end of the last window stepped; NONE before any */
  double value, threshold; /* of the last window stepped */
} ember__alert_state_t;

/* The rule's timing (from ember__alert_rule_t). */
typedef struct ember__alert_timing {
  int64_t for_ns, resolve_for_ns;
  double hysteresis;
} ember__alert_timing_t;

/* One evaluated window of the alert's group. */
typedef struct ember__alert_input {
  int64_t start_ns, end_ns; /* the window; start < end */
  double value, threshold;
} ember__alert_input_t;

/* A source of random 64-bit words for alert ids (e.g. from getrandom);
 * NULL = ids from the hash alone. */
typedef uint64_t (*ember__alert_random_fn)(void *ctx);

/* A fresh, inactive state. */
void ember__alert_state_init(ember__alert_state_t *st);

/* Advance `st` by one window and say what changed. A window that ends at
 * or before the last one stepped (a replay after a restart) changes
 * nothing and returns NONE. `rule` and `group` (the group key, "" for
 * none) feed the id: 16 hex digits of a 64-bit hash of rule, group and
 * the alert's start (since_ns), mixed with one word of `rnd` when given, so
 * that without `rnd` the same alert always gets the same id (tests; and a
 * restart that replays a window draws the id it had). */
ember__alert_transition_t ember__alert_state_step(ember__alert_state_t *st,
                                                  const ember__alert_timing_t *timing,
                                                  const ember__alert_input_t *in, const char *rule,
                                                  const char *group, ember__alert_random_fn rnd,
                                                  void *rnd_ctx);

/* The id a hash alone gives (as in _step without `rnd`); `out` gets 16 hex
 * digits and a NUL. */
void ember__alert_id(const char *rule, const char *group, int64_t start_ns, uint64_t salt,
                     char out[EMBER__ALERT_ID_LEN + 1]);

const char *ember__alert_phase_name(ember__alert_phase_t p); /* "inactive", "pending", ... */
const char *ember__alert_transition_name(ember__alert_transition_t t); /* "none", "pending", ... */

/* The state as a JSON object (new reference; NULL when out of memory):
 *   {"phase": "firing", "id": "a1b2...", "since_ns": N, "fired_ns": N|null,
 *    "resolved_ns": N|null, "below_since_ns": N|null, "updated_ns": N|null,
 *    "value": X|null, "threshold": X|null}
 * times in nanoseconds (the alert document shows them in ms), null for NONE
 * or a value that is not finite. */
json_t *ember__alert_state_to_json(const ember__alert_state_t *st);
/* Read a state written by _to_json (borrowed `obj`). Returns 0 or -EINVAL
 * with a sentence naming the member. */
int ember__alert_state_from_json(const json_t *obj, ember__alert_state_t *out, char *errbuf,
                                 size_t errbuf_size);

#endif
