/* On-demand profiling sessions (docs/internals/collector.md, "Sessions").
 *
 * A session asks the agents of some hosts to profile a worker or an actor
 * for a while, on top of their continuous windows. This module routes a new
 * session from the target registry (one START command per host on
 * ember.commands), follows the agents' events (ember.events) and the
 * results that ingest stores, and decides the session's state:
 *
 *   pending  -> running   the first host accepted or reported progress
 *   running  -> done      every host answered (DONE, FAILED or REJECTED), at
 *                         least one DONE, and the results of the DONE hosts
 *                         arrived (or a grace period passed after the last
 *                         answer: the results may have been ingested by
 *                         another collector instance)
 *            -> failed    every host answered and none with DONE
 *            -> expired   ends + 30 s passed without that
 *            -> cancelled cancel was asked: at once when no host had
 *                         started, else when every host answered
 *
 * Every collector knows every session: the one that starts a session
 * produces a CREATED event on ember.events (before the START commands), a
 * cancel produces CANCEL_REQUESTED, and every result ingest stores
 * produces STORED; each collector reads ember.events whole from its start
 * and builds the sessions from those events and the agents' (_event).
 * Events change states only: commands go out from _create and _cancel
 * alone, so a replay after a restart sends nothing. While the replay runs
 * (opts.replay, until _caught_up) no deadline applies: the answers that
 * settle a session may be further on in the topic; times come from the
 * events, so a rebuilt session keeps the times it had.
 *
 * Thread-safe: one mutex guards everything; nothing blocks while holding
 * it (producing only queues). */
#ifndef EMBER_COLLECTOR_SESSIONS_H
#define EMBER_COLLECTOR_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "ember/codec.h"
#include "ember/metrics.h"
#include "registry.h"

typedef struct ember__csessions ember__csessions_t;

typedef struct ember__csessions_opts {
  ember__registry_t *registry;  /* borrowed; routing source */
  rd_kafka_t *producer;         /* borrowed; commands go out through it */
  ember_metrics_t *metrics;     /* borrowed; NULL = none */
  uint32_t max_duration_ms;     /* session.max_duration; 0 = 60000 */
  uint32_t max_hz;              /* session.max_hz; 0 = 1000 */
  size_t max_active;            /* session.max_active; 0 = 100 */
  int64_t keep_ns;              /* session.keep; 0 = 24 h */
  int64_t answer_timeout_ns;    /* session.answer_timeout: past its end, a session whose
                                   hosts have not all answered expires; 0 = 30 s */
  const char *command_key_file; /* command_key_file: the key commands are signed with
                                   (include/ember/sign.h), read by _new; NULL = no key:
                                   every new session is refused (agents would refuse it) */
  bool replay;                  /* ember.events is read from its beginning: deadlines wait
                                   for _caught_up (or a minute) */
} ember__csessions_opts_t;

/* The session config keys, with their defaults. */
#define EMBER__CSESSION_CONFIG_KEYS                                                                \
  "session.max_duration", "session.max_hz", "session.max_active", "session.keep",                  \
      "session.answer_timeout", "command_key_file"

/* Returns 0, -ENOMEM, or the key file's error (EMBER_ECONFIG, -errno) with
 * a sentence in errbuf: a collector with a bad key file does not start. */
int ember__csessions_new(const ember__csessions_opts_t *opts, ember__csessions_t **out,
                         char *errbuf, size_t errbuf_size);
void ember__csessions_free(ember__csessions_t *s);

/* What a client asks for (strings borrowed for the call; NULL = not set). */
typedef struct ember__csession_req {
  const char *worker, *version, *actor, *host;
  uint32_t instances; /* 0 = every matching host */
  ember_session_type_t type;
  uint32_t duration_ms, hz; /* 0 = 5000 ms and 1000 Hz, or the caps when lower */
} ember__csession_req_t;

/* Route and start a session: *out gets its JSON document (new reference).
 * Returns 0; -EINVAL (over a cap), EMBER_ENOTFOUND (no active isolate),
 * -EAGAIN (session.max_active sessions are active), EMBER_EKAFKA (a command
 * could not be queued), -ENOKEY (no command_key_file: nothing to sign
 * with), -ENOMEM; errbuf gets a sentence for a client. */
int ember__csessions_create(ember__csessions_t *s, const ember__csession_req_t *req, int64_t now_ns,
                            json_t **out, char *errbuf, size_t errbuf_size);

/* The session's document, or the list of all (newest first), as new
 * references. Return 0, EMBER_ENOTFOUND, -ENOMEM. */
int ember__csessions_get(ember__csessions_t *s, const char *id, int64_t now_ns, json_t **out);
int ember__csessions_list(ember__csessions_t *s, int64_t now_ns, json_t **out);

/* Can the session's result be served? 0 when done or cancelled (*type
 * gets its type), EMBER_ENOTFOUND, or -EAGAIN with the state in errbuf. */
int ember__csessions_result_ready(ember__csessions_t *s, const char *id, ember_session_type_t *type,
                                  char *errbuf, size_t errbuf_size);

/* Send STOP to the hosts still running; the document as in _get. Returns 0,
 * EMBER_ENOTFOUND, -EALREADY (already finished: errbuf says how),
 * -ENOMEM. */
int ember__csessions_cancel(ember__csessions_t *s, const char *id, int64_t now_ns, json_t **out,
                            char *errbuf, size_t errbuf_size);

/* One ember.events message: an agent's answer, or a collector's CREATED,
 * CANCEL_REQUESTED or STORED. Returns 0 (applied, or for a session this
 * instance does not know), -ENOMEM, or EMBER_ECORRUPT / EMBER_EVERSION with a
 * sentence (counted as malformed). */
int ember__csessions_event(ember__csessions_t *s, const void *data, size_t len, char *errbuf,
                           size_t errbuf_size);

/* A result profile stored by ingest (borrowed for the call): counted, and
 * a STORED event produced so every collector counts it. */
void ember__csessions_result(ember__csessions_t *s, const ember_profile_t *p);

/* ember.events was read up to its end at start: deadlines apply. */
void ember__csessions_caught_up(ember__csessions_t *s);

/* Time passes: expiry, grace periods, forgetting old sessions. */
void ember__csessions_tick(ember__csessions_t *s, int64_t now_ns);

#endif
