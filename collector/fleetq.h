/* Fleet queries: any collector answers for the whole fleet
 * (docs/internals/fleet.md, "Fan-out").
 *
 * A query goes to the members of one replica group (a consumer group of
 * ember.profiles, which holds every window once): this collector's own
 * group when every member of it that holds data for the range is live,
 * else another group of which that is true (a replica), else the own
 * group with the answer marked partial, naming the collectors that did
 * not answer and the partitions they hold for the range. Each live member
 * of the chosen group but this one is asked for its partial answer in a
 * mergeable form (`local=1`: its own store only; profiles in the wire
 * encoding); this collector adds its own store's when it belongs to the
 * group, merges, and the handler renders once. Merging is exact: a group
 * holds each window in one store (the shards' rule, shards.h), and the
 * profile model's merge is a sum.
 *
 * Thread-safety: any API thread; the member list is a snapshot taken per
 * query. Errors: 0, -ENOMEM, or the store's codes; a peer that fails is
 * not an error but the answer's `partial`. */
#ifndef EMBER_COLLECTOR_FLEETQ_H
#define EMBER_COLLECTOR_FLEETQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/codec.h"
#include "ember/profile.h"
#include "ember/store.h"
#include <jansson.h>

#include "fanout.h"
#include "peers.h"

typedef struct ember__fleetq_opts {
  ember__peers_t *peers; /* the peer table (peers.h), self included; borrowed */
  /* fleet.replicas: the groups that hold copies of this one's windows
   * (their own consumer groups of ember.profiles), read when this group
   * is not complete. Other groups on ember.collectors are never read in
   * place of it. Borrowed. */
  const char *const *replicas;
  size_t nreplicas;
  const char *token; /* api.token, sent to peers (borrowed for the life) */
  int timeout_ms;    /* fleet.peer_timeout: one query's wait for its peers */
  size_t max_body;   /* the largest peer answer */
} ember__fleetq_opts_t;

typedef struct ember__fleetq {
  ember__fleetq_opts_t o;
} ember__fleetq_t;

/* The peers one query asks, and what is missing. */
typedef struct ember__fleet_ask {
  ember__fetch_t *fetch; /* one per peer asked, answers in them */
  char **urls;           /* their URLs (owned) */
  char **ids;            /* their ids (owned) */
  size_t n;
  bool self;         /* this collector's store is part of the answer */
  char partial[512]; /* "" when complete, else what is missing */
} ember__fleet_ask_t;

/* Plan and send one query: `path_query` ("/api/v1/profile?worker=..."
 * with local=1 and whatever the peers need) to every live member of the
 * chosen group but this one, for data in [from_ns, to_ns). *out is the
 * caller's (ember__fleet_ask_free) on 0. */
int ember__fleetq_ask(const ember__fleetq_t *f, int64_t from_ns, int64_t to_ns,
                      const char *path_query, ember__fleet_ask_t *out);
void ember__fleet_ask_free(ember__fleet_ask_t *a);
/* Note a peer that answered badly in a->partial (its id and why). */
void ember__fleet_ask_failed(ember__fleet_ask_t *a, size_t i, const char *why);

/* What a peer is asked. The raw= names of the store's value types, both
 * ways (cpu_ns, cpu_samples, alloc_objects, alloc_bytes, inuse_objects,
 * inuse_bytes): NULL, or -EINVAL, for anything else. */
const char *ember__fleetq_raw_name(ember_value_type_t vt);
int ember__fleetq_raw_type(const char *name, ember_value_type_t *out);
/* "&key=value" appended to q, the value URL-encoded; nothing for a NULL
 * value. 0 or -ENOMEM. */
int ember__fleetq_param(ember_buf_t *q, const char *key, const char *value);
/* "PATH?local=1&from=S.NNNNNNNNN&to=S.NNNNNNNNN" (Unix seconds, exact to
 * the nanosecond) and the selector's fields appended to q. 0, -EINVAL (a
 * negative time), -ENOMEM. */
int ember__fleetq_query(ember_buf_t *q, const char *path, const ember_store_selector_t *sel,
                        int64_t from_ns, int64_t to_ns);

/* A JSON answer of every asked peer: `path_query` (with local=1) sent as
 * ember__fleetq_ask does (data at any time), each 200 answer parsed and
 * handed to `each` (borrowed for the call; `peer` its id); a peer whose
 * answer is not JSON, or that `each` refuses (non-zero), is named in
 * `partial`. Returns 0 or -ENOMEM. */
int ember__fleetq_json(const ember__fleetq_t *f, const char *path_query,
                       int (*each)(void *ctx, const char *peer, json_t *answer), void *ctx,
                       char *partial, size_t partial_size);

/* The fleet's merge of `sel` over [from_ns, to_ns) in value type `vt`, as
 * ember_store_merge of one store holding every window: this collector's
 * store (when in the chosen group) plus every peer's. `partial` (size
 * bytes) gets "" or what is missing. */
int ember__fleetq_merge(const ember__fleetq_t *f, ember_store_t *store,
                        const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                        ember_value_type_t vt, ember_profile_t **out, char *partial,
                        size_t partial_size);

/* Gauges (fleetq_gauge.c). A gauge merge is not a sum of the stores'
 * merges: a series whose partition moved between collectors has windows
 * in two stores, and only its latest counts. So a peer answers raw=GAUGE
 * with its ember_store_gauge_latest parts, one profile per series, each
 * as be32 length | ember_codec_encode bytes (an empty body: none), and
 * the asking collector keeps per label set the parts of the latest window
 * start (equal starts in two stores are two windows, so both count) and
 * sums those. */
int ember__fleetq_gauge_encode(ember_profile_t *const *parts, size_t n, ember_buf_t *out);
/* Decode such an answer: *out gets *count profiles (free with
 * ember_store_gauge_latest_free). 0, EMBER_ECORRUPT (why says what),
 * -ENOMEM. */
int ember__fleetq_gauge_decode(const void *data, size_t len, const ember_codec_limits_t *lim,
                               ember_value_type_t vt, ember_profile_t ***out, size_t *count,
                               char *why, size_t why_size);
/* Sum `parts` (borrowed) as the fleet merge does: per label set the parts
 * of the latest window start, then across label sets; labels from `sel`,
 * the window covering the parts kept (or [from_ns, to_ns) when none), the
 * period when all kept agree. *out is the caller's. */
int ember__fleetq_gauge_sum(ember_profile_t *const *parts, size_t n,
                            const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                            ember_value_type_t vt, ember_profile_t **out);
/* ember__fleetq_merge of a gauge type (which it calls for those). */
int ember__fleetq_gauge_merge(const ember__fleetq_t *f, ember_store_t *store,
                              const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                              ember_value_type_t vt, ember_profile_t **out, char *partial,
                              size_t partial_size);
/* The fleet's ember_store_gauge_timelines: peers are asked
 * /api/v1/heap/timeline?local=1&raw=1 (every series, with each value's
 * window start), rows matched by labels keep per bucket the latest start
 * (equal starts summed), totals recomputed from the rows. */
int ember__fleetq_gauge_timelines(const ember__fleetq_t *f, ember_store_t *store,
                                  const ember_store_selector_t *sel, ember_value_type_t vt,
                                  int64_t from_ns, int64_t to_ns, int64_t step_ns,
                                  size_t max_values, ember_store_gauge_timelines_t **out,
                                  char *partial, size_t partial_size);

/* The fleet's ember_store_session_merge of session `id` in value type vt:
 * this store's results (when in the chosen group) plus every peer's
 * (asked /api/v1/sessions/ID/profile?local=1&format=ember&raw=VT), labels
 * as there. `info` (may be NULL) counts this store's results, and 1 when
 * only peers had some. `partial` as in _merge. */
int ember__fleetq_session_merge(const ember__fleetq_t *f, ember_store_t *store, const char *id,
                                ember_value_type_t vt, ember_profile_t **out,
                                ember_store_session_info_t *info, char *partial,
                                size_t partial_size);

/* The fleet's ember_store_series: series matched by labels (first and
 * last the earliest and latest of any store; times of peers' series in
 * whole milliseconds), sorted by labels; ids are this store's, 0 for series
 * only peers hold. Free with ember_store_series_free. */
int ember__fleetq_series(const ember__fleetq_t *f, ember_store_t *store,
                         const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                         ember_store_series_t **out, size_t *count, char *partial,
                         size_t partial_size);
/* The fleet's ember_store_cpu_timelines: rows matched by labels and
 * summed, totals summed; max_values as there. Free with
 * ember_store_timelines_free. */
int ember__fleetq_timelines(const ember__fleetq_t *f, ember_store_t *store,
                            const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                            int64_t step_ns, size_t max_values, ember_store_timelines_t **out,
                            char *partial, size_t partial_size);

/* Order of two label sets (worker, version, host, actor; NULL first):
 * the order both series and gauge parts are merged in. */
int ember__fleetq_labels_cmp(const ember_labels_t *x, const ember_labels_t *y);

#endif
