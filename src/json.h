/* jansson helpers shared by the JSON exporters and the HTTP API (internal
 * to Ember's own parts, like htab.h). */
#ifndef EMBER_SRC_JSON_H
#define EMBER_SRC_JSON_H

#include <jansson.h>

#include "ember/buf.h"

/* A JSON string for bytes that may not be UTF-8 (symbol names and paths are
 * whatever a binary holds; labels and parameters whatever a client sent):
 * each byte outside a well-formed sequence becomes U+FFFD. NULL gives JSON
 * null. Returns NULL only when out of memory. */
json_t *ember__json_str(const char *s);

/* obj[key] = val and arr += val, taking val's reference even on failure
 * (val may be NULL from a failed constructor). Keys must be ASCII literals.
 * Return 0 or -ENOMEM. */
int ember__json_set(json_t *obj, const char *key, json_t *val);
int ember__json_push(json_t *arr, json_t *val);

/* Append `j`, compact, to `out`. Returns 0, or the buffer's error
 * (EMBER_ETOOBIG past its limit, -ENOMEM); on error `out` may hold part of
 * the text: callers truncate back. */
int ember__json_dump(const json_t *j, ember_buf_t *out);

#endif
