/* Source maps (issue 16): a decoded source map v3 (ECMA-426), to name the
 * JavaScript frames of bundled or minified code as their authors wrote
 * them. The agent reads maps of the scripts it samples; the collector
 * keeps maps uploaded by deploy pipelines. Both decode them here.
 *
 * What is read: `version` (3), `sources`, `sourceRoot`, `names` and
 * `mappings` (base64 VLQ segments of 1, 4 or 5 fields), and index maps
 * (`sections` with `offset` {line, column} and an embedded `map`; the
 * removed `url` form and nested index maps are refused). `sourcesContent`
 * and every other field are ignored, and so kept out of memory.
 *
 * A map is input from whoever wrote the file (a local user, a pipeline):
 * its size, segment, name and source counts and string lengths are bounded
 * before anything is kept; a segment whose source or name index is out of
 * range, a negative or over-large line or column, a VLQ that is not base64
 * or does not fit 32 bits, or a segment of 2, 3 or more than 5 fields
 * refuses the whole map with a reason (for a counter) and a sentence.
 * A refused map maps nothing: the caller keeps the generated names.
 *
 * Held in memory: 24 bytes per segment (nothing per generated line, so a
 * map of empty lines costs nothing) and the source and name strings, once
 * each. ember_sourcemap_memory says it, for
 * the caller's cache bound.
 *
 * Thread-safety: a decoded map is immutable; lookups may run on any number
 * of threads at once. */
#ifndef EMBER_SOURCEMAP_H
#define EMBER_SOURCEMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_sourcemap ember_sourcemap_t;

/* Why a map was refused (0 = it was not). */
typedef enum ember_sourcemap_reason {
  EMBER_SOURCEMAP_OK = 0,
  EMBER_SOURCEMAP_TOO_BIG,      /* over max_bytes */
  EMBER_SOURCEMAP_NOT_JSON,     /* not a JSON object */
  EMBER_SOURCEMAP_NOT_V3,       /* version is not 3 */
  EMBER_SOURCEMAP_BAD_FIELD,    /* a field missing or of the wrong type */
  EMBER_SOURCEMAP_BAD_MAPPINGS, /* mappings that are not base64 VLQ segments */
  EMBER_SOURCEMAP_OUT_OF_RANGE, /* an index, line or column out of range */
  EMBER_SOURCEMAP_TOO_MANY,     /* over a count or length bound */
  EMBER_SOURCEMAP_REASONS       /* how many there are */
} ember_sourcemap_reason_t;

/* "too_big", "not_json", ...: a label value for metrics. */
EMBER_API const char *ember_sourcemap_reason_name(ember_sourcemap_reason_t reason);

/* Defaults of the bounds (0 in ember_sourcemap_limits_t picks these). */
#define EMBER_SOURCEMAP_MAX_BYTES    (64ull << 20)
#define EMBER_SOURCEMAP_MAX_SEGMENTS (4u << 20)
#define EMBER_SOURCEMAP_MAX_STRINGS  (1u << 20) /* names, and sources */
#define EMBER_SOURCEMAP_MAX_STRING   4096u      /* bytes of one name or source */
#define EMBER_SOURCEMAP_MAX_SECTIONS 4096u

typedef struct ember_sourcemap_limits {
  uint64_t max_bytes;  /* of the JSON text */
  size_t max_segments; /* over all sections */
  size_t max_strings;  /* names, and sources, each */
  size_t max_string;   /* bytes of one name or source (with its root) */
  size_t max_sections;
} ember_sourcemap_limits_t;

/* A refusal: the reason and a sentence naming what was wrong. */
typedef struct ember_sourcemap_error {
  ember_sourcemap_reason_t reason;
  char text[200];
} ember_sourcemap_error_t;

/* Decode `len` bytes of JSON (not NUL-terminated; limits NULL = defaults).
 * Returns 0 and *out, -EINVAL when the map is refused (*err says why; err
 * may be NULL) or -ENOMEM. */
EMBER_API int ember_sourcemap_parse(const char *data, size_t len,
                                    const ember_sourcemap_limits_t *limits, ember_sourcemap_t **out,
                                    ember_sourcemap_error_t *err);
/* The same for a map whose place is known: `base` is its directory (an
 * absolute path), and relative sources (after sourceRoot) are resolved
 * against it and made lexical, as readers of maps resolve them:
 * "../src/a.ts" of /srv/dist/app.js.map is /srv/src/a.ts. URLs and
 * absolute sources stay as written. -EINVAL for a base not absolute. */
EMBER_API int ember_sourcemap_parse_at(const char *data, size_t len,
                                       const ember_sourcemap_limits_t *limits, const char *base,
                                       ember_sourcemap_t **out, ember_sourcemap_error_t *err);
/* NULL is a no-op. */
EMBER_API void ember_sourcemap_free(ember_sourcemap_t *sm);

/* An original position. Strings are borrowed from the map. */
typedef struct ember_sourcemap_pos {
  const char *source; /* sourceRoot joined with the source; NULL = none */
  const char *name;   /* from `names`; NULL = the segment names none */
  uint32_t line;      /* 1-based */
  uint32_t column;    /* 1-based */
} ember_sourcemap_pos_t;

/* The segment covering generated `line`:`column` (both 0-based, as in the
 * format): the last one at or before it on that line. False when there is
 * none, or it maps to no source. */
EMBER_API bool ember_sourcemap_find(const ember_sourcemap_t *sm, uint32_t line, uint32_t column,
                                    ember_sourcemap_pos_t *out);

/* The original of a function that V8 names at 1-based `line`:`column` (the
 * start of its parameters: `function a(`, `a=(`, `a(){`, `n=>`), its
 * generated name being `name_len` bytes long. The position is that of the
 * covering segment; the name is that of the segment right before the
 * parameters (the function's own name token: a minifier that renamed it
 * names the original there), if it has one and is no further back than
 * the name and a few characters. out->name is NULL for an anonymous
 * function (name_len 0) and when that segment names nothing: the name
 * was kept (`meth(`), or the map has no `names`. False when the position
 * maps to no source. */
EMBER_API bool ember_sourcemap_function(const ember_sourcemap_t *sm, uint32_t line, uint32_t column,
                                        size_t name_len, ember_sourcemap_pos_t *out);

/* Is a source relative to the map's own location, as "../src/a.ts" is,
 * and neither absolute nor a URL ("webpack://app/a.ts")? */
EMBER_API bool ember_sourcemap_source_is_relative(const char *source);

/* Segments held, and bytes of memory held, by the map. */
EMBER_API size_t ember_sourcemap_segments(const ember_sourcemap_t *sm);
EMBER_API size_t ember_sourcemap_memory(const ember_sourcemap_t *sm);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_SOURCEMAP_H */
