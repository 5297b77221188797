/* Wire version 2 (src/proto/ember_v2.proto): one window in columns, and
 * the view of it that ingest reads in place.
 *
 * A version 1 message unpacks into thousands of objects and is only ever
 * read by building a profile (ember_codec_decode). A version 2 message
 * unpacks into about twenty arrays; ember_wire_decode() checks its
 * structure and hands out an ember_wire_t that points into them, so the
 * store (ember_store_write_wire) can map its locations and stacks to
 * dictionary ids without a profile in between. Every location and every
 * stack of a view has a 64-bit content key that the view's maker computed
 * (ember_wire_decode, for a message), so the store looks its caches up by
 * key and compares bytes only to confirm. Keys are in-memory only and may
 * change between releases (docs/internals/codec.md, "Keys"). The wire's
 * own hashes (XXH64, defined below, "Hashes" there) are fixed forever:
 * writers since 2026-12-03 send none, older writers' are kept as they came
 * (loc_hash, stack_hash) and checked against their content.
 *
 * What decoding checks, and what it leaves to the reader: ember_wire_decode
 * checks every count, length and index (so a reader may index anything
 * without checks), the window, the value types, the labels' and ids' text,
 * and that every location is used by a sample. It rebuilds front-coded
 * strings and keys the strings locations name, but does not check their
 * text nor the hashes sent: a reader that takes a location's content
 * checks that its strings are UTF-8 without NUL
 * (ember_wire_check_location), and one that takes the window checks the
 * hashes sent, if any (ember_wire_check_hashes); a reader that finds the
 * content byte-for-byte equal to content it checked before needs no text
 * check. ember_wire_to_profile checks everything. So a message is
 * accepted or refused alike by every reader.
 *
 * Thread-safety: no shared state; an ember_wire_t may be read by any number
 * of threads. */
#ifndef EMBER_WIRE_H
#define EMBER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/ember.h"
#include "ember/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_WIRE_V2 2u

/* A decoded window. Every array has the length its count says; indices
 * are checked: loc_function[i] <= nfunctions, loc_module[i] <= nmodules
 * (0 = none, else index + 1), every string index < nstrings, every entry
 * of locs < nlocations. Read-only. */
typedef struct ember_wire {
  uint32_t version;                  /* of the message; 1 when made from a profile */
  const char *agent_id, *session_id; /* NULL = none */
  uint64_t seq;
  ember_labels_t labels; /* NULL strings = none */
  int64_t start_ns, end_ns, period_ns;
  size_t ntypes;
  ember_value_type_t types[EMBER_MAX_VALUE_TYPES];

  const char *blob; /* string i is blob[str_off[i] .. + str_len[i]); string 0 is "" */
  const uint32_t *str_off, *str_len;
  size_t nstrings;

  const uint32_t *mod_name, *mod_build_id; /* string indices */
  size_t nmodules;
  const uint32_t *fn_name, *fn_file; /* string indices */
  /* String indices of the functions' generated names (ember_frame_t's
   * `generated`; 0 = none), or NULL when no function has one. */
  const uint32_t *fn_generated;
  size_t nfunctions;

  const uint32_t *loc_function, *loc_module, *loc_line, *loc_kind;
  const uint64_t *loc_address, *loc_key;
  size_t nlocations;

  /* Sample i: locs[stack_off[i] .. + depth[i]) (leaf first), values
   * values[i * ntypes .. + ntypes) (each >= 0), key stack_key[i]. */
  const uint32_t *depth, *stack_off, *locs;
  const int64_t *values;
  const uint64_t *stack_key;
  size_t nsamples, nlocs;

  /* The wire hashes a version 2 message sent, one per location and one
   * per sample, as they came (unchecked); NULL when it sent none, as
   * writers since 2026-12-03 do not. */
  const uint64_t *loc_hash, *stack_hash;

  /* True once the hashes sent are known to be their content's (set by
   * ember_wire_verify_hashes), or when none were: the check may be
   * skipped. */
  bool hashes_checked;

  void *priv; /* the memory behind it all */
} ember_wire_t;

/* Decode a version 1 or version 2 message (the version field comes first
 * in both). Version 2 is checked as the header comment says and read in
 * place; version 1 is checked as ember_codec_decode checks it (its strings
 * too) and copied into columns, its keys computed here, so v1 windows
 * share the store's caches with v2 ones (its locations may include some no
 * sample uses). Returns as ember_codec_decode; *out (free with
 * ember_wire_free) only on success. */
EMBER_API int ember_wire_decode(const void *data, size_t len, const ember_codec_limits_t *lim,
                                ember_wire_t **out, char *errbuf, size_t errbuf_size);

/* The version a message says it is (its first field), or 0 when it does
 * not start with one. */
EMBER_API uint32_t ember_wire_peek_version(const void *data, size_t len);

/* Columns and keys of `p` (every frame used by a stack becomes a
 * location, every stack a sample; no wire hashes). 0, -EINVAL or -ENOMEM. */
EMBER_API int ember_wire_from_profile(const ember_profile_t *p, ember_wire_t **out);

/* Build a profile from `w`, checking everything ember_wire_decode left
 * (strings of every location UTF-8 without NUL and at most
 * EMBER_MAX_STRING bytes, every location and stack hash sent). Samples with the
 * same stack are added together. 0; EMBER_ECORRUPT with a sentence (also
 * for a sum that would overflow, as version 1's decoder says); -ENOMEM. */
EMBER_API int ember_wire_to_profile(const ember_wire_t *w, ember_profile_t **out, char *errbuf,
                                    size_t errbuf_size);

EMBER_API void ember_wire_free(ember_wire_t *w);

/* Append the version 2 encoding of `p` to `out`. Returns 0, -ENOMEM, or
 * EMBER_ETOOBIG past out->max. */
EMBER_API int ember_codec_encode_v2(const ember_profile_t *p, ember_buf_t *out);

/* ---- hashes (stable: on the wire) ------------------------------------ */

/* XXH64 (seed 0) of s[0..n): the hash of one string. */
EMBER_API uint64_t ember_wire_string_hash(const void *s, size_t n);

/* The strings of a location, in the order of its hash. */
enum {
  EMBER_WIRE_LOC_FUNCTION,  /* function name */
  EMBER_WIRE_LOC_FILE,      /* function file */
  EMBER_WIRE_LOC_MODULE,    /* module name */
  EMBER_WIRE_LOC_BUILD_ID,  /* module build id */
  EMBER_WIRE_LOC_GENERATED, /* the function's generated name */
  EMBER_WIRE_LOC_STRINGS
};

/* A location's hash: XXH64 (seed 0) of the 48 bytes
 *   u64 address | u32 line | u32 kind | u64 h(function name) |
 *   u64 h(function file) | u64 h(module name) | u64 h(module build id)
 * and, only when the function has a generated name, 8 bytes more:
 *   u64 h(generated name)
 * all little-endian, where h is ember_wire_string_hash and a missing
 * string hashes as "". A location without a generated name hashes as it
 * did before generated names existed. `string_hashes` in the order
 * above; the last is read only when `generated`. */
EMBER_API uint64_t ember_wire_location_hash(uint64_t address, uint32_t line, uint32_t kind,
                                            const uint64_t string_hashes[EMBER_WIRE_LOC_STRINGS],
                                            bool generated);

/* A stack's hash: XXH64 (seed 0) of its location hashes, leaf first, as
 * little-endian u64s. */
EMBER_API uint64_t ember_wire_stack_hash(const uint64_t *location_hashes, size_t depth);

/* The wire hash of location `i` of `w`, from its content (what a writer
 * that sends hashes sends for it). */
EMBER_API uint64_t ember_wire_location_hash_at(const ember_wire_t *w, size_t i);

/* The strings of location `i` of `w`, in the order above (p[k] NULL with
 * n[k] 0 when missing). */
EMBER_API void ember_wire_location_strings(const ember_wire_t *w, size_t i,
                                           const char *p[EMBER_WIRE_LOC_STRINGS],
                                           size_t n[EMBER_WIRE_LOC_STRINGS]);

/* Check that every location hash sent is its content's and every stack
 * hash sent its locations' (not the strings' text: see
 * ember_wire_check_location), hashing each string of the window once, so
 * that a window whose hashes disagree with its content is refused whoever
 * reads it. A view with no hashes sent (version 1, from a profile, or a
 * version 2 writer since 2026-12-03): 0 at once. Returns 0, EMBER_ECORRUPT
 * with a sentence, or -ENOMEM. */
EMBER_API int ember_wire_check_hashes(const ember_wire_t *w, char *errbuf, size_t errbuf_size);

/* ember_wire_check_hashes, and on success set w->hashes_checked. For a
 * caller that decodes windows on other threads than its writer's (the
 * collector's decode pool): the check then costs the writer nothing. */
EMBER_API int ember_wire_verify_hashes(ember_wire_t *w, char *errbuf, size_t errbuf_size);

/* Check what ember_wire_decode left about location `i`: its strings are
 * UTF-8 without NUL, at most EMBER_MAX_STRING bytes, and its hash, when
 * one was sent and the view's hashes were not verified already
 * (hashes_checked), is its content's. Returns 0 or EMBER_ECORRUPT with a
 * sentence. */
EMBER_API int ember_wire_check_location(const ember_wire_t *w, size_t i, char *errbuf,
                                        size_t errbuf_size);

#ifdef __cplusplus
}
#endif
#endif
