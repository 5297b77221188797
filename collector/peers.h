/* The peer table: the latest announcement of every collector of the
 * fleet, as read from the compacted topic ember.collectors (key = the
 * collector's id, value an ember.wire.v1.CollectorInfo, an empty value
 * deletes the key), this collector's own included.
 *
 * Which record a key holds: the later of two records of one incarnation
 * (same started_ns) by seq; a record of an earlier incarnation than the
 * one held is ignored while the held one is live (so a restarted
 * collector's own fresh record is not undone when the topic replays its
 * previous run's last words at start), and replaces it otherwise (so a
 * collector whose clock went back across a restart is not shut out).
 *
 * Liveness is judged by the receiver: a record is heard of at
 * min(announced_ns, received_ns) (the sender's stamp, unless it is in the
 * future of the receiver's clock), and a peer is live while that is at
 * most 3 of its announce intervals old and it is not stopping. Clocks of
 * the fleet must agree within about 2 intervals (docs/internals/collector.md,
 * "Announcements").
 *
 * Times are passed in (Unix ns), so tests drive the clock. Thread-safe: a
 * read-write lock; one writer (the fleet thread), any readers (API
 * threads). Nothing returned points into the table. */
#ifndef EMBER_COLLECTOR_PEERS_H
#define EMBER_COLLECTOR_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/codec.h"

typedef struct ember__peers ember__peers_t;

/* A listed peer: a copy of its record and what this collector makes of it. */
typedef struct ember__peer {
  ember_collector_info_t info; /* owned by the list */
  int64_t received_ns;         /* the receiver's clock when the record arrived */
  int64_t heard_ns;            /* min(announced_ns, received_ns) */
  bool live;
  bool self; /* info.id is this collector's own id */
} ember__peer_t;

/* How many announce intervals a peer stays live without a new record. */
#define EMBER__PEERS_LIVE_INTERVALS 3

int ember__peers_new(ember__peers_t **out);
void ember__peers_free(ember__peers_t *p);

/* This collector's id (copied), which listing marks as `self`. 0, -EINVAL,
 * -ENOMEM. */
int ember__peers_set_self(ember__peers_t *p, const char *id);

/* Apply one ember.collectors message received at now_ns: `value` NULL or
 * empty deletes `key`; otherwise the decoded record (whose id must equal
 * the key) replaces the key's record, or is ignored as stale (see above;
 * *stale, may be NULL, says which). Returns 0; EMBER_ECORRUPT /
 * EMBER_ETOOBIG / EMBER_EVERSION with a sentence in errbuf (table
 * unchanged); -EINVAL (no key); -ENOMEM. */
int ember__peers_apply(ember__peers_t *p, const void *key, size_t keylen, const void *value,
                       size_t len, int64_t now_ns, bool *stale, char *errbuf, size_t errbuf_size);

/* Apply a record made here (this collector's own announcement, before the
 * topic brings it back), by the same rule. `rec` is copied. 0, EMBER_ECORRUPT
 * (fails the codec's check), -ENOMEM. */
int ember__peers_put(ember__peers_t *p, const ember_collector_info_t *rec, int64_t now_ns);

/* Is a record heard of at heard_ns, announcing every interval_ms, live at now_ns? */
bool ember__peers_live(const ember_collector_info_t *rec, int64_t heard_ns, int64_t now_ns);

/* A copy of every peer, sorted by id, judged at now_ns. *out is NULL when
 * there are none. Free with ember__peers_list_free. 0 or -ENOMEM (out
 * untouched). */
int ember__peers_list(ember__peers_t *p, int64_t now_ns, ember__peer_t **out, size_t *count);
void ember__peers_list_free(ember__peer_t *list, size_t count);

/* Peers in the table and, of them, live at now_ns. */
void ember__peers_count(ember__peers_t *p, int64_t now_ns, size_t *all, size_t *live);

#endif
