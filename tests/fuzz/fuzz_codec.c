/* libFuzzer target for the wire decoder.
 *
 * Whatever the bytes, decoding must return an error or a profile, never
 * crash, leak or read out of bounds (ASan/UBSan are on). A profile that
 * decodes must survive the rest of the pipeline: re-encoding gives a
 * message that decodes to the same totals, and every exporter accepts it.
 * The same bytes also go through the other decoders of messages a daemon
 * reads from Kafka (targets, session commands and events, collector
 * announcements): each must
 * refuse or accept them cleanly, and what it accepts must re-encode to
 * something it accepts again. Wire v2 goes through both of its readers:
 * the view (ember_wire_decode, what ingest uses) and the profile; a view
 * that decodes must take every content check without crashing, and the
 * profile reader must accept exactly the views whose checks pass. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/codec.h"
#include "ember/export.h"
#include "ember/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant names itself (the CI log keeps lines starting with
 * "==") before the abort that makes libFuzzer save the input. */
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "==fuzz_codec== invariant broken at line %d: %s\n", __LINE__, #cond);        \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static void other_decoders(const uint8_t *data, size_t size) {
  char err[256];
  ember_buf_t b;
  ember_buf_init(&b, 16u << 20);
  ember_target_record_t t;
  if (ember_codec_decode_target(data, size, &t, err, sizeof err) == 0) {
    CHECK(ember_codec_encode_target(&t, &b) == 0);
    ember_target_record_t t2;
    CHECK(ember_codec_decode_target(b.data, b.len, &t2, err, sizeof err) == 0);
    ember_target_record_clear(&t2);
    ember_target_record_clear(&t);
  }
  ember_buf_reset(&b);
  ember_command_t c;
  if (ember_codec_decode_command(data, size, &c, err, sizeof err) == 0) {
    CHECK(ember_codec_encode_command(&c, &b) == 0);
    ember_command_t c2;
    CHECK(ember_codec_decode_command(b.data, b.len, &c2, err, sizeof err) == 0);
    CHECK(c2.npids == c.npids && c2.duration_ms == c.duration_ms);
    ember_command_clear(&c2);
    ember_command_clear(&c);
  }
  ember_buf_reset(&b);
  ember_event_t e;
  if (ember_codec_decode_event(data, size, &e, err, sizeof err) == 0) {
    CHECK(ember_codec_encode_event(&e, &b) == 0);
    ember_event_t e2;
    CHECK(ember_codec_decode_event(b.data, b.len, &e2, err, sizeof err) == 0);
    CHECK(e2.samples == e.samples && e2.state == e.state);
    ember_event_clear(&e2);
    ember_event_clear(&e);
  }
  ember_buf_reset(&b);
  ember_collector_info_t ci;
  if (ember_codec_decode_collector(data, size, &ci, err, sizeof err) == 0) {
    /* What a peer's record decodes to passes the encoder's check. */
    CHECK(ember_codec_check_collector(&ci, NULL, 0) == 0);
    CHECK(ember_codec_encode_collector(&ci, &b) == 0);
    ember_collector_info_t ci2;
    CHECK(ember_codec_decode_collector(b.data, b.len, &ci2, err, sizeof err) == 0);
    CHECK(ci2.nruns == ci.nruns && ci2.nassigned == ci.nassigned && ci2.seq == ci.seq);
    CHECK(strcmp(ci2.id, ci.id) == 0);
    ember_collector_info_clear(&ci2);
    ember_collector_info_clear(&ci);
  }
  ember_buf_free(&b);
}

/* The view of any message, and what a reader of it does: every content
 * check, the profile. Returns whether the profile reader took it. */
static bool view_readers(const uint8_t *data, size_t size) {
  char err[256];
  ember_wire_t *w = NULL;
  if (ember_wire_decode(data, size, NULL, &w, err, sizeof err) != 0) return false;
  bool ok = true;
  for (size_t i = 0; i < w->nlocations; i++)
    if (ember_wire_check_location(w, i, err, sizeof err) != 0) ok = false;
  for (size_t i = 0; i < w->nsamples; i++) {
    CHECK(w->depth[i] >= 1 && w->depth[i] <= EMBER_MAX_STACK_DEPTH);
    uint64_t lh[EMBER_MAX_STACK_DEPTH];
    for (size_t d = 0; d < w->depth[i]; d++) {
      uint32_t l = w->locs[w->stack_off[i] + d];
      CHECK(l < w->nlocations);
      lh[d] = ember_wire_location_hash_at(w, l);
    }
    if (w->stack_hash != NULL && ember_wire_stack_hash(lh, w->depth[i]) != w->stack_hash[i])
      ok = false;
  }
  /* The collector's whole-window check agrees: it passes whenever every
   * content check does (it checks hashes, and text only to explain). */
  int hv = ember_wire_check_hashes(w, err, sizeof err);
  CHECK(hv == 0 || hv == EMBER_ECORRUPT || hv == -ENOMEM);
  if (ok) CHECK(hv == 0);
  ember_profile_t *p = NULL;
  int rc = ember_wire_to_profile(w, &p, err, sizeof err);
  /* A v1 view sends no hashes: only its text can be wrong. */
  if (rc == 0) CHECK(ok);
  if (rc == EMBER_ECORRUPT && w->version == EMBER_WIRE_V2) CHECK(!ok || strstr(err, "overflow"));
  if (rc != 0) CHECK(rc == EMBER_ECORRUPT || rc == -ENOMEM);
  if (rc == 0) {
    /* Both versions of the profile read back to the same totals. */
    ember_buf_t b;
    ember_buf_init(&b, 64u << 20);
    CHECK(ember_codec_encode_v2(p, &b) == 0);
    ember_profile_t *q = NULL;
    CHECK(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err) == 0);
    for (size_t vi = 0; vi < ember_profile_ntypes(p); vi++)
      CHECK(ember_profile_total(q, vi) == ember_profile_total(p, vi));
    ember_profile_free(q);
    ember_buf_free(&b);
  }
  ember_profile_free(p);
  ember_wire_free(w);
  return rc == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ember_profile_t *p = NULL, *q = NULL;
  char err[256];
  other_decoders(data, size);
  bool by_view = view_readers(data, size);
  int rc = ember_codec_decode(data, size, NULL, &p, err, sizeof err);
  /* The two readers agree on every message. */
  CHECK((rc == 0) == by_view);
  if (rc != 0) return 0;

  ember_buf_t b;
  ember_buf_init(&b, 64u << 20);
  CHECK(ember_codec_encode(p, &b) == 0);
  CHECK(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err) == 0);
  CHECK(ember_profile_nstacks(q) == ember_profile_nstacks(p));
  for (size_t vi = 0; vi < ember_profile_ntypes(p); vi++) {
    CHECK(ember_profile_total(q, vi) == ember_profile_total(p, vi));
  }
  for (int fmt = EMBER_FORMAT_PPROF; fmt <= EMBER_FORMAT_TREE; fmt++) {
    ember_buf_reset(&b);
    CHECK(ember_export(p, (ember_format_t)fmt, 0, &b) == 0);
  }
  ember_buf_free(&b);
  ember_profile_free(p);
  ember_profile_free(q);
  return 0;
}
