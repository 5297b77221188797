/* The contract between the API's HTTP layer (api.c) and its handler files
 * (api_series.c, api_profiles.c, api_sessions.c, api_fleet.c, ...): the request a
 * handler gets, the helpers every handler uses to check parameters and
 * bodies and to answer (JSON or an error sentence), and the route tables
 * each handler file provides.
 *
 * A handler checks its parameters (any error is a 400 naming the
 * parameter), asks the store or a collector module, builds its body in
 * r->body (bounded by max_response) and returns the status it set; the
 * layer sends it. Every helper that fails a request records the status and
 * the sentence in `r` and returns the status, so handlers `return
 * ember__req_fail(...)`; 0 means "go on".
 *
 * Thread-safety: a request belongs to the one API thread answering it; the
 * environment it points to is fixed at start and shared read-only (its
 * store, registry and sessions are safe to use from any thread). */
#ifndef EMBER_COLLECTOR_API_REQ_H
#define EMBER_COLLECTOR_API_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ember/buf.h"
#include "ember/metrics.h"
#include "ember/profile.h"
#include "ember/store.h"
#include "http.h"
#include "registry.h"
#include "sessions.h"
#include "ui.h"

#define EMBER__REQ_MAX_PARAMS 32u
/* The largest request body (session requests are a few hundred bytes). */
#define EMBER__REQ_MAX_BODY ((size_t)64 << 10)

#define EMBER__SEC_NS 1000000000LL
#define EMBER__MS_NS  1000000LL

/* What handlers may use: set once at start, borrowed, read-only after. */
typedef struct ember__api_env {
  ember_store_t *store;
  ember_metrics_t *metrics;       /* NULL: /metrics answers an empty page */
  ember__registry_t *registry;    /* NULL: /api/v1/targets answers an empty list */
  ember__csessions_t *sessions;   /* NULL: session routes answer 503 */
  struct ember__alerts *alerts;   /* NULL: rule and alert routes answer 503 */
  struct ember__fleet *fleet;     /* NULL: /api/v1/collectors answers an empty list */
  struct ember__srcmaps *srcmaps; /* NULL: /api/v1/sourcemaps answers 503 */
  /* NULL: this store alone; else queries without local=1 answer for the
   * whole fleet (fleetq.h). */
  const struct ember__fleetq *fleetq;
  size_t max_response;
} ember__api_env_t;

typedef struct ember__req_param {
  const char *key, *value; /* borrowed from the HTTP layer for the request */
} ember__req_param_t;

typedef struct ember__req {
  const ember__api_env_t *env;
  ember__http_req_t *q;
  const char *url;
  const char *rest; /* what follows the route's path ("" or "/ID/..."), set by the router */
  const char *method;
  ember__req_param_t params[EMBER__REQ_MAX_PARAMS];
  size_t nparams;
  bool too_many;
  int64_t now_ns;
  const char *in; /* the request body (POST), NUL-terminated; NULL = none */
  size_t in_len;
  bool in_too_big; /* the body passed EMBER__REQ_MAX_BODY and was cut */
  /* The answer: a status with either a body or an error sentence. */
  unsigned status;
  ember_buf_t body;
  const char *ctype;
  const char *fixed_body;         /* a static body instead of `body` */
  const char *allow;              /* the Allow header of a 405 */
  const ember__ui_asset_t *asset; /* a dashboard file to send (status 200 or 304) */
  ember_top_order_t top_by;       /* format=top: sort=self (default) or total */
  /* local=1 (taken by the router from every request): this store only, as
   * a peer collector asks (fleetq.h). */
  bool local;
  /* "" or what a fleet answer misses: sent as the Ember-Partial header and
   * as "partial" in a JSON object answer (ember__req_partial). */
  char partial[480];
  char disposition[96];
  char err[512];
} ember__req_t;

/* ------------------------------------------------------------ routes -- */

/* The route matches its path exactly and, with this flag, every path under
 * it ("/api/v1/sessions/ID/cancel"); r->rest gets what follows the path. */
#define EMBER__ROUTE_SUBTREE 1u
/* The handler takes GET, HEAD and POST and checks the method itself;
 * without the flag the router answers anything but GET and HEAD with 405. */
#define EMBER__ROUTE_METHODS 2u

typedef struct ember__api_route {
  const char *path; /* "/api/v1/series"; NULL ends a table */
  unsigned flags;   /* EMBER__ROUTE_* */
  unsigned (*fn)(ember__req_t *r);
  /* The Allow header of a 405 answered before routing (a PUT, a DELETE),
   * from r->rest; NULL = "GET, HEAD". Returns a static string. */
  const char *(*allow)(const char *rest);
} ember__api_route_t;

/* Each handler file's table; the router (api.c) tries them in order. A
 * new area adds its file, its table here and one line in api.c. */
extern const ember__api_route_t ember__api_series_routes[];
extern const ember__api_route_t ember__api_profile_routes[];
extern const ember__api_route_t ember__api_heap_routes[];
extern const ember__api_route_t ember__api_session_routes[];
extern const ember__api_route_t ember__api_alert_routes[];
extern const ember__api_route_t ember__api_fleet_routes[];
extern const ember__api_route_t ember__api_sourcemap_routes[];

/* ------------------------------------------------------------ errors -- */

/* Record an error answer; returns the status. */
unsigned ember__req_fail(ember__req_t *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An internal failure: a 413 when the response outgrew max_response, else a
 * 500 with a logged line that says what failed. */
unsigned ember__req_fail_internal(ember__req_t *r, const char *what, int rc);

/* -------------------------------------------------------- parameters -- */

/* Gather the query parameters into r->params (the router does it before
 * calling a handler). */
void ember__req_read_args(ember__req_t *r);
/* Check the parameters against the endpoint's list (NULL-terminated):
 * unknown, repeated (but for the key `repeatable`, when not NULL),
 * valueless and empty parameters are errors. */
unsigned ember__req_check_params_rep(ember__req_t *r, const char *const *allowed,
                                     const char *repeatable);
unsigned ember__req_check_params(ember__req_t *r, const char *const *allowed);
/* The value of parameter `key`, or NULL. Borrowed for the request. */
const char *ember__req_param(const ember__req_t *r, const char *key);
/* A time parameter (ember_parse_time forms), `dflt` when absent. */
unsigned ember__req_time(ember__req_t *r, const char *key, const char *dflt, int64_t *out);
/* from/to (or vs.from/vs.to, defaulting to the base range); from < to. */
unsigned ember__req_range(ember__req_t *r, const char *kfrom, const char *kto, const char *dfrom,
                          const char *dto, int64_t *from, int64_t *to);
/* Timelines: the default step keeps at most this many buckets, no step is
 * shorter than the store's 10-second windows, a request may ask for at
 * most EMBER__TIMELINE_MAX_BUCKETS buckets and make us hold at most
 * EMBER__TIMELINE_MAX_CELLS (series x buckets) values. */
#define EMBER__TIMELINE_DEFAULT_BUCKETS 500
#define EMBER__TIMELINE_MIN_STEP_NS     (10 * EMBER__SEC_NS)
#define EMBER__TIMELINE_MAX_BUCKETS     10000u
#define EMBER__TIMELINE_MAX_CELLS       ((size_t)4 << 20)
/* The "step" parameter of a timeline over [from, to): a duration of at
 * least 10 s, by default the shortest multiple of 10 s giving at most 500
 * buckets; *nb gets the bucket count (400 past the maximum). */
unsigned ember__req_step(ember__req_t *r, int64_t from, int64_t to, int64_t *step, uint64_t *nb);
/* A whole number in [min, max], `dflt` when absent. */
unsigned ember__req_u64(ember__req_t *r, const char *key, uint64_t dflt, uint64_t min, uint64_t max,
                        uint64_t *out);
/* worker/version/host/actor, or with a prefix ("vs.") defaulting to `base`
 * ("*" there means any, even where the base has a value). The strings are
 * borrowed for the request. */
void ember__req_selector(const ember__req_t *r, const char *prefix,
                         const ember_store_selector_t *base, ember_store_selector_t *sel);

/* ------------------------------------------------------------- bodies -- */

/* The request body as a JSON object (*out, the caller's to json_decref):
 * 413 past EMBER__REQ_MAX_BODY, 400 when absent, not JSON (duplicate keys
 * too) or not an object. `example` is shown in those sentences
 * ("{\"worker\": \"api\"}"). */
unsigned ember__req_body_object(ember__req_t *r, const char *example, json_t **out);
/* 400 for a field not in `fields` (NULL-terminated); `takes` ends the
 * sentence ("a session takes worker, version and hz"). */
unsigned ember__req_body_fields(ember__req_t *r, const json_t *doc, const char *const *fields,
                                const char *takes);
/* A string field: absent and null are "not set" (*out = NULL); anything
 * else must be a non-empty string of at most 256 bytes without NUL.
 * Borrowed from doc. */
unsigned ember__req_body_str(ember__req_t *r, const json_t *doc, const char *key, const char **out);
/* A whole-number field from min up, `dflt` when absent or null; larger
 * than UINT32_MAX reads as UINT32_MAX so a cap check can name it. */
unsigned ember__req_body_u32(ember__req_t *r, const json_t *doc, const char *key, uint32_t dflt,
                             uint32_t min, uint32_t *out);

/* ------------------------------------------------------------ answers -- */

/* Dump `j` (borrowed) into the response body as a 200 JSON answer. */
unsigned ember__req_answer_json(ember__req_t *r, const json_t *j);
/* A new array set as obj[key]; NULL when out of memory. Borrowed. */
json_t *ember__req_jarray_in(json_t *obj, const char *key);
/* A document with from_ms and to_ms, the start of most answers; NULL when
 * out of memory. */
json_t *ember__req_range_doc(int64_t from, int64_t to);
/* Series labels as JSON fields (null for an absent label). 0 or -ENOMEM. */
int ember__req_set_labels(json_t *o, const ember_labels_t *l);
/* A JSON array of the values; NULL when out of memory. */
json_t *ember__req_int_array(const int64_t *v, size_t n);

/* Note that the answer misses `what` (appended to r->partial). */
void ember__req_partial(ember__req_t *r, const char *what);
/* Should this request be answered for the fleet (a fleet is configured and
 * the request is not a peer's local=1)? */
static inline bool ember__req_fleet(const ember__req_t *r) {
  return r->env->fleetq != NULL && !r->local;
}

/* Nanoseconds to milliseconds, rounding down (also below zero). */
static inline int64_t ember__req_ms(int64_t ns) {
  return ns / EMBER__MS_NS - (ns % EMBER__MS_NS < 0);
}

#endif
