/* Signed session commands (issue 10): an HMAC-SHA256 under a shared key on
 * every message of ember.commands, made by collectors and checked by
 * agents. See docs/internals/agent.md, "Signed commands".
 *
 * A command travels as before (value = the serialized ember.wire.v1.Command,
 * unchanged, so old decoders read it as they did) with two Kafka headers:
 *
 *   ember.key  the key id: 16 hex digits, the first 8 bytes of
 *              SHA-256("ember command key id" || key)
 *   ember.mac  64 hex digits: HMAC-SHA256(key, "ember.commands.v1" 0x00 ||
 *              value), over the whole value as produced
 *
 * A key is 32 bytes, kept in a file as 64 hex digits (whitespace around
 * them is ignored) that only its owner may write and nobody but its owner
 * and group may read; a root process takes only a file owned by root.
 * The key id follows from the key, so two files can never disagree on it.
 *
 * An agent holds up to two keys (current and previous: rotation), checks
 * the MAC in constant time, refuses commands whose ttl is 0 or over a
 * maximum, issued too far in the future or expired (both with a clock
 * skew allowance), and remembers every command it accepted until its
 * expiry (plus skew) in a bounded replay cache, so the same message
 * delivered twice is refused the second time. The cache dies with the
 * process, so the policy also refuses commands issued (more than the skew)
 * before the agent started: a restarted agent reads ember.commands only
 * from its latest offsets, so such a command can only be a replay.
 *
 * Thread-safety: keys and policies are plain values; a replay cache is
 * used by one thread at a time. Uses OpenSSL's libcrypto. */
#ifndef EMBER_SIGN_H
#define EMBER_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "ember/codec.h"
#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_SIGN_KEY_BYTES  32
#define EMBER_SIGN_MAC_HEX    64 /* hex digits of a MAC */
#define EMBER_SIGN_KEY_ID_HEX 16 /* hex digits of a key id */
#define EMBER_SIGN_HEADER_KEY "ember.key"
#define EMBER_SIGN_HEADER_MAC "ember.mac"
/* No collector can ask for a session longer than an hour (its
 * session.max_duration is at most 1h): a longer one is refused. */
#define EMBER_SIGN_MAX_DURATION_MS 3600000u

typedef struct ember_sign_key {
  char id[EMBER_SIGN_KEY_ID_HEX + 1]; /* NUL-terminated hex */
  uint8_t key[EMBER_SIGN_KEY_BYTES];
} ember_sign_key_t;

/* Read a key file. Refuses (EMBER_ECONFIG, a sentence in errbuf) a file
 * that others may read or write (mode & 0007), that its group or others may
 * write (mode & 0022), one not owned by root when the caller runs as root
 * (its owner could swap the key of a root agent), one that is not a regular
 * file, and content that is not 64 hex digits. Symlinks are followed (key
 * files are often mounted through them); the file opened is checked.
 * Returns 0, EMBER_ECONFIG or -errno (errbuf says which file and why). *out
 * is written only on success. */
EMBER_API int ember_sign_key_load(const char *path, ember_sign_key_t *out, char *errbuf,
                                  size_t errbuf_size);

/* Make a new random key file at `path` (mode 0600, O_EXCL, fsync'd) unless
 * one exists already, which is then left as it is (load checks it).
 * Returns 0 or -errno with a sentence. */
EMBER_API int ember_sign_key_create(const char *path, char *errbuf, size_t errbuf_size);

/* `nbytes` (at most EMBER_SIGN_RANDOM_MAX) bytes from the kernel's random
 * source (getrandom), written as 2 * nbytes lower-case hex digits and a NUL
 * into out (2 * nbytes + 1 bytes). For keys and unguessable ids (session
 * ids). Returns 0, -EINVAL or -errno. Thread-safe. */
#define EMBER_SIGN_RANDOM_MAX 64
EMBER_API int ember_sign_random_hex(char *out, size_t nbytes);

/* A key from its 32 raw bytes (tests, tools). */
EMBER_API void ember_sign_key_from_bytes(const uint8_t raw[EMBER_SIGN_KEY_BYTES],
                                         ember_sign_key_t *out);

/* The ember.mac header of `value` under `k`: 64 hex digits and a NUL into
 * out. Returns 0, -EINVAL or -ENOMEM (libcrypto failed). */
EMBER_API int ember_sign_mac_hex(const ember_sign_key_t *k, const void *value, size_t len,
                                 char out[EMBER_SIGN_MAC_HEX + 1]);

/* What became of one message of ember.commands. Every verdict but OK and
 * OTHER_HOST is a refusal with a reason (ember_sign_verdict_name: the
 * `reason` label of ember_agent_commands_refused_total). */
typedef enum ember_sign_verdict {
  EMBER_SIGN_OK = 0,
  EMBER_SIGN_MALFORMED,  /* the value is not a Command */
  EMBER_SIGN_OTHER_HOST, /* for another host: ignored, not checked further */
  EMBER_SIGN_NO_KEY,     /* this agent has no key: it refuses every command */
  EMBER_SIGN_UNSIGNED,   /* no ember.key or ember.mac header */
  EMBER_SIGN_UNKNOWN_KEY,
  EMBER_SIGN_BAD_MAC,
  EMBER_SIGN_NO_TTL,       /* ttl_ms = 0 would never expire */
  EMBER_SIGN_TTL_TOO_LONG, /* over policy max_ttl_ns */
  EMBER_SIGN_DURATION_TOO_LONG,
  EMBER_SIGN_FUTURE,  /* issued_ns beyond now + skew */
  EMBER_SIGN_EXPIRED, /* now beyond issued_ns + ttl + skew */
  EMBER_SIGN_REPLAYED,
  EMBER_SIGN_NVERDICTS
} ember_sign_verdict_t;

/* "ok", "malformed", "other_host", "no_key", "unsigned", "unknown_key",
 * "bad_mac", "no_ttl", "ttl_too_long", "duration_too_long", "future",
 * "expired", "replayed". */
EMBER_API const char *ember_sign_verdict_name(ember_sign_verdict_t v);

typedef struct ember_sign_policy {
  const ember_sign_key_t *keys; /* borrowed; nkeys of them (0 to 2) */
  size_t nkeys;
  int64_t max_ttl_ns;       /* longest ttl accepted */
  int64_t skew_ns;          /* clock difference allowed each way */
  uint32_t max_duration_ms; /* longest START accepted; 0 = EMBER_SIGN_MAX_DURATION_MS */
  int64_t started_ns;       /* Unix ns the process started reading commands; 0 = unchecked:
                             * issued_ns + skew_ns before it is REPLAYED */
} ember_sign_policy_t;

/* Remembers the MACs of accepted commands until their expiry + skew. At
 * most `capacity` entries; when full, the entry expiring first is dropped
 * and its expiry becomes a floor: any command expiring at or before it is
 * refused as a possible replay (so the bound never lets a replay in). */
typedef struct ember_sign_replay ember_sign_replay_t;
EMBER_API int ember_sign_replay_new(size_t capacity, ember_sign_replay_t **out);
EMBER_API void ember_sign_replay_free(ember_sign_replay_t *r);

/* One message as it came from Kafka; header values are not NUL-terminated
 * (NULL = header absent). */
typedef struct ember_sign_envelope {
  const void *value;
  size_t len;
  const char *key_id;
  size_t key_id_len;
  const char *mac;
  size_t mac_len;
} ember_sign_envelope_t;

/* Check one message for `host` (NULL = any) at `now_ns` (Unix ns), in
 * this order: decodes (MALFORMED), host (OTHER_HOST), a key is configured
 * (NO_KEY), headers present (UNSIGNED), key id known (UNKNOWN_KEY), MAC
 * (BAD_MAC), ttl (NO_TTL, TTL_TOO_LONG), duration of a START
 * (DURATION_TOO_LONG), issued_ns (FUTURE, EXPIRED, and REPLAYED before
 * started_ns), replay cache (REPLAYED). Only an OK command enters the cache. *out is filled with
 * the decoded command for every verdict but MALFORMED (release it with ember_command_clear); errbuf
 * gets a sentence for a log line. `replay` may be NULL (no replay check). */
EMBER_API ember_sign_verdict_t ember_sign_check_command(
    const ember_sign_policy_t *p, ember_sign_replay_t *replay, const ember_sign_envelope_t *env,
    const char *host, int64_t now_ns, ember_command_t *out, char *errbuf, size_t errbuf_size);

#ifdef __cplusplus
}
#endif
#endif
