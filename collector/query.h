/* Profile queries the API's handlers (and, later, the alert engine) make
 * of the store, below HTTP: the merged profile of a selection or of a
 * session in one of the API's profile types, where "cpu" means CPU
 * nanoseconds, or CPU samples times their period when a selection holds
 * samples only.
 *
 * Thread-safety: as the store, any thread. Errors: the store's codes
 * (include/ember/store.h); *out is untouched on failure. */
#ifndef EMBER_COLLECTOR_QUERY_H
#define EMBER_COLLECTOR_QUERY_H

#include <stdint.h>

#include "ember/profile.h"
#include "ember/store.h"

/* The profile types of the API (docs/api.md, parameter "type"). */
typedef enum ember__qtype {
  EMBER__Q_CPU,
  EMBER__Q_SAMPLES,
  EMBER__Q_ALLOC_OBJECTS,
  EMBER__Q_ALLOC_BYTES,
  EMBER__Q_INUSE_OBJECTS, /* gauges: the state at the range's end (store.h) */
  EMBER__Q_INUSE_BYTES,
} ember__qtype_t;

/* The merged profile of `sel` (NULL = all) over [from_ns, to_ns) in one
 * value type. For EMBER__Q_CPU: CPU nanoseconds where the agents sent
 * them; when the selection holds only samples, samples times the period,
 * or plain samples when the period is mixed (the profile's value type
 * then says EMBER_VT_CPU_SAMPLES). *out is the caller's
 * (ember_profile_free). */
int ember__query_profile(ember_store_t *store, const ember_store_selector_t *sel, int64_t from_ns,
                         int64_t to_ns, ember__qtype_t type, ember_profile_t **out);

/* A raw merge of one value type, as ember_store_merge: the store's, or
 * the fleet's (fleetq.h). */
typedef int (*ember__merge_fn)(void *ctx, const ember_store_selector_t *sel, int64_t from_ns,
                               int64_t to_ns, ember_value_type_t vt, ember_profile_t **out);
/* ember__query_profile over `merge` instead of one store. */
int ember__query_profile_by(ember__merge_fn merge, void *ctx, const ember_store_selector_t *sel,
                            int64_t from_ns, int64_t to_ns, ember__qtype_t type,
                            ember_profile_t **out);

/* The same over the results of session `id`; `info` (may be NULL) gets
 * what the store read (ember_store_session_merge). */
int ember__query_session(ember_store_t *store, const char *id, ember__qtype_t type,
                         ember_profile_t **out, ember_store_session_info_t *info);

/* A raw merge of one session's results in one value type, as
 * ember_store_session_merge: the store's, or the fleet's (fleetq.h). */
typedef int (*ember__session_merge_fn)(void *ctx, const char *id, ember_value_type_t vt,
                                       ember_profile_t **out, ember_store_session_info_t *info);
/* ember__query_session over `merge` instead of one store. */
int ember__query_session_by(ember__session_merge_fn merge, void *ctx, const char *id,
                            ember__qtype_t type, ember_profile_t **out,
                            ember_store_session_info_t *info);

#endif
