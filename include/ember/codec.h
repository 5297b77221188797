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

#include <stddef.h>
#include <stdint.h>

#include "ember/buf.h"
#include "ember/ember.h"
#include "ember/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema version this build writes and the newest it reads. */
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

#define EMBER_SESSION_MAX_PIDS 4096u

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
  EMBER_EV_REJECTED = 5
} ember_event_state_t;

typedef struct ember_event {
  ember_event_state_t state;
  char *session_id, *host, *agent_id, *message; /* NULL = not set */
  uint32_t targets, hz;
  uint64_t samples;
  int64_t at_ns;
} ember_event_t;

/* Encode appends to out. Decode validates (a session id and host are
 * required, text must be UTF-8 without NUL, kind/type/state known, at most
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

#ifdef __cplusplus
}
#endif
#endif
