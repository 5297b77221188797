/* libFuzzer target for the wire decoder.
 *
 * Whatever the bytes, decoding must return an error or a profile, never
 * crash, leak or read out of bounds (ASan/UBSan are on). A profile that
 * decodes must survive the rest of the pipeline: re-encoding gives a
 * message that decodes to the same totals, and every exporter accepts it. */
#include <stdint.h>
#include <stdlib.h>

#include "ember/codec.h"
#include "ember/export.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ember_profile_t *p = NULL, *q = NULL;
  char err[256];
  if (ember_codec_decode(data, size, NULL, &p, err, sizeof err) != 0) return 0;

  ember_buf_t b;
  ember_buf_init(&b, 64u << 20);
  if (ember_codec_encode(p, &b) != 0) abort();
  if (ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err) != 0) abort();
  if (ember_profile_nstacks(q) != ember_profile_nstacks(p)) abort();
  for (size_t vi = 0; vi < ember_profile_ntypes(p); vi++) {
    if (ember_profile_total(q, vi) != ember_profile_total(p, vi)) abort();
  }
  for (int fmt = EMBER_FORMAT_PPROF; fmt <= EMBER_FORMAT_TREE; fmt++) {
    ember_buf_reset(&b);
    if (ember_export(p, (ember_format_t)fmt, 0, &b) != 0) abort();
  }
  ember_buf_free(&b);
  ember_profile_free(p);
  ember_profile_free(q);
  return 0;
}
