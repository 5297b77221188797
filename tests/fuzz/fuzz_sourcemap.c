/* libFuzzer target for source maps (src/sourcemap.c): a map is written by
 * whoever deploys a script (a local user on the agent's host, a pipeline
 * uploading to the collector).
 *
 * The first byte picks the input: even, the bytes are the whole JSON
 * text; odd, they are the `mappings` of a map with three sources and
 * three names (escaped into JSON), which reaches the VLQ decoder without
 * having to write JSON first. Whatever the bytes: no crash, leak or
 * undefined behaviour; a refusal has a reason and a sentence; a decoded
 * map answers lookups anywhere with positions that start at 1 and
 * strings that are its own. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/buf.h"
#include "ember/sourcemap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void probe(const ember_sourcemap_t *sm, uint32_t line, uint32_t col, size_t name_len) {
  ember_sourcemap_pos_t p;
  if (ember_sourcemap_find(sm, line, col, &p)) {
    if (p.line == 0 || p.column == 0) abort();
    if (p.source != NULL && strlen(p.source) > EMBER_SOURCEMAP_MAX_STRING) abort();
    if (p.name != NULL && strlen(p.name) > EMBER_SOURCEMAP_MAX_STRING) abort();
  }
  if (ember_sourcemap_function(sm, line + 1, col + 1, name_len, &p) &&
      (p.line == 0 || p.column == 0))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  ember_buf_t json;
  ember_buf_init(&json, (size_t)64 << 20);
  if (data[0] % 2 == 1) {
    int rc = ember_buf_puts(&json,
                            "{\"version\":3,\"sources\":[\"a.ts\",null,\"c.ts\"],"
                            "\"sourceRoot\":\"src\",\"names\":[\"f\",\"g\",\"h\"],\"mappings\":\"");
    for (size_t i = 0; rc == 0 && i < len; i++) {
      unsigned char c = (unsigned char)text[i];
      if (c >= 0x80) c = '!';
      rc = c == '"' || c == '\\' || c < 0x20 ? ember_buf_printf(&json, "\\u%04x", c)
                                             : ember_buf_append(&json, &c, 1);
    }
    if (rc == 0) rc = ember_buf_puts(&json, "\"}");
    if (rc != 0) {
      ember_buf_free(&json);
      return 0;
    }
    text = json.data;
    len = json.len;
  }
  ember_sourcemap_t *sm = NULL;
  ember_sourcemap_error_t err;
  /* Odd inputs are decoded as a map whose place is known (sources resolved
   * against its directory). */
  int rc =
      ember_sourcemap_parse_at(text, len, NULL, data[0] % 2 ? "/srv/app/dist" : NULL, &sm, &err);
  if (rc == 0) {
    if (sm == NULL || ember_sourcemap_memory(sm) < ember_sourcemap_segments(sm) * 24) abort();
    for (uint32_t line = 0; line < 4; line++)
      for (uint32_t col = 0; col < 64; col += 7) probe(sm, line, col, col % 5);
    probe(sm, UINT32_MAX - 1, UINT32_MAX - 1, SIZE_MAX / 2);
    ember_sourcemap_free(sm);
  } else if (rc == -EINVAL) {
    if (sm != NULL || err.reason == EMBER_SOURCEMAP_OK || err.text[0] == '\0') abort();
  } else if (rc != -ENOMEM) {
    abort();
  }
  ember_buf_free(&json);
  return 0;
}
