/* The wire format: one window of one target, as sent on ember.profiles.
 *
 * The schema is src/proto/ember.proto (protobuf, compiled by protoc-c). A
 * message carries its schema version; a decoder refuses versions it does
 * not know. Decoding validates everything before building a profile: every
 * table index is in range, every count and size within the limits below,
 * every value type known, the window ordered. Bad input yields an error
 * code and a sentence in errbuf, never a crash and never a partial profile.
 *
 * Thread-safe: no shared state. */
#ifndef EMBER_CODEC_H
#define EMBER_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/buf.h"
#include "ember/ember.h"
#include "ember/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema version of the messages this build writes (targets,
 * commands, events; profiles unless asked for version 2, EMBER_WIRE_V2 in
 * ember/wire.h, which it also reads). */
#define EMBER_WIRE_VERSION 1u

typedef struct ember_codec_limits {
  size_t max_message;   /* bytes of one encoded message */
  size_t max_strings;   /* entries of the string table */
  size_t max_locations; /* entries of the location table */
  size_t max_samples;   /* samples (distinct stacks) */
  size_t max_depth;     /* frames in one stack */
} ember_codec_limits_t;

/* 16 MiB messages, 1M strings/locations/samples, depth 1024. */
EMBER_API void ember_codec_limits_default(ember_codec_limits_t *lim);

/* Append the encoding of `p` to `out`. Returns 0, -ENOMEM, or EMBER_ETOOBIG
 * when the result would pass out->max. */
EMBER_API int ember_codec_encode(const ember_profile_t *p, ember_buf_t *out);

/* Decode `len` bytes at `data` into a new profile (*out, owned by the
 * caller). `lim` may be NULL for the defaults. Returns 0; EMBER_ECORRUPT for
 * malformed or out-of-range input; EMBER_ETOOBIG past a limit;
 * EMBER_EVERSION for an unknown schema version; -ENOMEM. On failure *out is
 * untouched and errbuf holds a sentence naming the fault. */
EMBER_API int ember_codec_decode(const void *data, size_t len, const ember_codec_limits_t *lim,
                                 ember_profile_t **out, char *errbuf, size_t errbuf_size);

/* A target as announced on ember.targets. Strings may be NULL (sent as
 * empty). Decoded records own their strings: release with
 * ember_target_record_clear. */
typedef struct ember_target_record {
  char *agent_id, *host, *worker, *version, *actor, *comm, *exe, *build_id;
  uint32_t pid;
  uint64_t start_ticks;
  int64_t seen_ns;
  bool heap; /* its in-use heap is followed (libember_alloc.so) */
} ember_target_record_t;

EMBER_API int ember_codec_encode_target(const ember_target_record_t *t, ember_buf_t *out);
/* Returns 0, EMBER_ECORRUPT or EMBER_EVERSION (sentence in errbuf), -ENOMEM.
 * *out is filled only on success. */
EMBER_API int ember_codec_decode_target(const void *data, size_t len, ember_target_record_t *out,
                                        char *errbuf, size_t errbuf_size);
EMBER_API void ember_target_record_clear(ember_target_record_t *t);

/* On-demand sessions: a command for one host on ember.commands and the
 * agent's events on ember.events (src/proto/ember.proto). */
typedef enum ember_command_kind { EMBER_CMD_START = 1, EMBER_CMD_STOP = 2 } ember_command_kind_t;
typedef enum ember_session_type {
  EMBER_SESSION_CPU = 1,
  EMBER_SESSION_MEMORY = 2
} ember_session_type_t;

#define EMBER_SESSION_MAX_PIDS  4096u
#define EMBER_SESSION_MAX_HOSTS 4096u

typedef struct ember_command {
  ember_command_kind_t kind;
  char *session_id, *host, *worker, *version, *actor; /* NULL = not set */
  uint32_t *pids;                                     /* npids entries; may be NULL */
  size_t npids;
  ember_session_type_t type;
  uint32_t duration_ms, hz, ttl_ms;
  int64_t issued_ns;
} ember_command_t;

typedef enum ember_event_state {
  EMBER_EV_ACCEPTED = 1,
  EMBER_EV_RUNNING = 2,
  EMBER_EV_DONE = 3,
  EMBER_EV_FAILED = 4,
  EMBER_EV_REJECTED = 5,
  /* From collectors (fleet-wide sessions): */
  EMBER_EV_CREATED = 6,          /* what the session is: the fields below */
  EMBER_EV_CANCEL_REQUESTED = 7, /* a collector sent the STOPs */
  EMBER_EV_STORED = 8            /* a collector stored a result (agent_id, result_seq, samples) */
} ember_event_state_t;

typedef struct ember_event {
  ember_event_state_t state;
  char *session_id, *host, *agent_id, *message; /* NULL = not set */
  uint32_t targets, hz;
  uint64_t samples;
  int64_t at_ns;
  /* CREATED only (host is NULL then): */
  char *worker, *version, *actor, *select_host; /* NULL = not set */
  ember_session_type_t type;
  uint32_t duration_ms, instances;
  char **hosts; /* nhosts routed hosts, at least one */
  size_t nhosts;
  int64_t created_ns;
  /* STORED only: */
  uint64_t result_seq;
} ember_event_t;

/* Encode appends to out. Decode validates (a session id is required, and
 * a host for every event state but CREATED and CANCEL_REQUESTED; CREATED
 * needs 1..EMBER_SESSION_MAX_HOSTS non-empty hosts and a known type; text
 * must be UTF-8 without NUL, kind/type/state known, at most
 * EMBER_SESSION_MAX_PIDS pids) and fills *out only on success: 0,
 * EMBER_ECORRUPT / EMBER_EVERSION / EMBER_ETOOBIG with a sentence in errbuf,
 * -ENOMEM. Decoded values own their strings: release with _clear. */
EMBER_API int ember_codec_encode_command(const ember_command_t *c, ember_buf_t *out);
EMBER_API int ember_codec_decode_command(const void *data, size_t len, ember_command_t *out,
                                         char *errbuf, size_t errbuf_size);
EMBER_API void ember_command_clear(ember_command_t *c);
EMBER_API int ember_codec_encode_event(const ember_event_t *e, ember_buf_t *out);
EMBER_API int ember_codec_decode_event(const void *data, size_t len, ember_event_t *out,
                                       char *errbuf, size_t errbuf_size);
EMBER_API void ember_event_clear(ember_event_t *e);
EMBER_API const char *ember_event_state_name(ember_event_state_t s);

/* A collector's announcement on ember.collectors (CollectorInfo in
 * src/proto/ember.proto; src/codec_collector.c). */
#define EMBER_COLLECTOR_MAX_ID          255u              /* bytes of id and group_id */
#define EMBER_COLLECTOR_MAX_URL         1024u             /* bytes of api_url */
#define EMBER_COLLECTOR_MAX_RUNS        16384u            /* runs in one record */
#define EMBER_COLLECTOR_MAX_ASSIGNED    16384u            /* assigned partitions */
#define EMBER_COLLECTOR_MAX_RECORD      ((size_t)1 << 20) /* bytes of one encoded record */
#define EMBER_COLLECTOR_MIN_INTERVAL_MS 100u
#define EMBER_COLLECTOR_MAX_INTERVAL_MS 3600000u

/* One run: what one collector consumed of one partition in one go. */
typedef struct ember_collector_run {
  int32_t partition;                    /* >= 0 */
  int64_t start, stored_end, committed; /* 0 <= start <= stored_end; start <= committed */
  int64_t started_ns;                   /* >= 0 */
  int64_t tmin_ns, tmax_ns;             /* tmin <= tmax; 0/0 when no window */
  uint64_t windows, pending;            /* pending <= windows <= stored_end - start */
} ember_collector_run_t;

typedef struct ember_collector_info {
  char *id;             /* required, 1..EMBER_COLLECTOR_MAX_ID bytes */
  char *group_id;       /* required, 1..EMBER_COLLECTOR_MAX_ID bytes */
  char *api_url;        /* required: "http://..." or "https://...", no space or control */
  int64_t started_ns;   /* > 0 */
  int64_t announced_ns; /* > 0 */
  uint64_t seq;         /* >= 1 */
  uint32_t interval_ms; /* EMBER_COLLECTOR_MIN..MAX_INTERVAL_MS */
  bool stopping;
  ember_collector_run_t *runs; /* nruns, ascending by (partition, start), no repeat */
  size_t nruns;
  int32_t *assigned; /* nassigned partitions, ascending, no repeat, each >= 0 */
  size_t nassigned;
} ember_collector_info_t;

/* Check `c` as the decoder does (the list above). Returns 0, or
 * EMBER_ECORRUPT / EMBER_ETOOBIG with a sentence in errbuf (may be NULL). */
EMBER_API int ember_codec_check_collector(const ember_collector_info_t *c, char *errbuf,
                                          size_t errbuf_size);
/* Append the encoding of `c` to out. Returns 0; -EINVAL when `c` fails
 * ember_codec_check_collector (call it for the sentence); -ENOMEM, or
 * EMBER_ETOOBIG past out->max or EMBER_COLLECTOR_MAX_RECORD. */
EMBER_API int ember_codec_encode_collector(const ember_collector_info_t *c, ember_buf_t *out);
/* Decode and validate (text UTF-8 and bounded, counts bounded before any
 * copy, then ember_codec_check_collector). Fills *out only on success: 0,
 * EMBER_ECORRUPT / EMBER_EVERSION / EMBER_ETOOBIG with a sentence in
 * errbuf, -ENOMEM. The decoded record owns its strings and arrays: release
 * with ember_collector_info_clear. */
EMBER_API int ember_codec_decode_collector(const void *data, size_t len,
                                           ember_collector_info_t *out, char *errbuf,
                                           size_t errbuf_size);
/* Free what a decoded (or ember_collector_info_copy'd) record owns; zeroes
 * it. NULL is a no-op. */
EMBER_API void ember_collector_info_clear(ember_collector_info_t *c);
/* A deep copy of `src` into *dst (owned by the caller: _clear). 0 or
 * -ENOMEM (*dst untouched). */
EMBER_API int ember_collector_info_copy(const ember_collector_info_t *src,
                                        ember_collector_info_t *dst);

#ifdef __cplusplus
}
#endif
#endif
