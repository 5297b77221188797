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

#ifdef __cplusplus
}
#endif
#endif
