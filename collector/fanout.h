/* Fan-out: the same GET sent to several peer collectors at once, every
 * answer collected under one deadline (libcurl's multi interface).
 *
 * The transport of fleet-wide queries (docs/internals/fleet.md): the
 * caller decides which peers hold data for a query, asks each for its
 * partial answer in a mergeable form, and merges; a peer that does not
 * answer 200 in time is reported, never silently left out.
 *
 * Thread-safety: ember__fanout_get may run on several threads at once (each
 * call has its own handles); curl_global_init must have run (the collector
 * does it at start). */
#ifndef EMBER_COLLECTOR_FANOUT_H
#define EMBER_COLLECTOR_FANOUT_H

#include <stddef.h>

#include "ember/buf.h"

/* One request and its answer. */
typedef struct ember__fetch {
  const char *url;  /* in: the whole URL (borrowed) */
  long status;      /* out: the HTTP status, 0 when none came */
  ember_buf_t body; /* out: the body (ember_buf_free it), at most max_body bytes */
  char err[160];    /* out: why there is no 200 answer ("" with one) */
} ember__fetch_t;

/* GET every fetch's url in parallel, with `token` (may be NULL) as the
 * bearer token, and wait at most timeout_ms for all of them. A body larger
 * than max_body ends its transfer with an error. Returns 0 when every
 * request could be made (their outcomes are in each fetch), -ENOMEM or
 * -EINVAL. */
int ember__fanout_get(ember__fetch_t *f, size_t n, const char *token, int timeout_ms,
                      size_t max_body);
/* Free the bodies of n fetches. */
void ember__fanout_free(ember__fetch_t *f, size_t n);

#endif
