/* Wire v2 content hashes (include/ember/wire.h, docs/internals/codec.md
 * "Hashes"): XXH64 as its specification defines it, and the location and
 * stack hashes built on it, and the checks of the hashes a message sent.
 * Older writers send these values, so they never change: the unit test
 * pins them to vectors of the reference implementation. (What the store's
 * caches are keyed by is wire_key.c's.) Thread-safe: pure functions. */
#include <errno.h>
#include <string.h>

#include "ember/wire.h"
#include "utf8.h"
#include "codec_internal.h"

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

/* The spec reads lanes little-endian on every host (ember__le64). */
static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t xround(uint64_t acc, uint64_t lane) {
  acc += lane * P2;
  acc = rotl(acc, 31);
  return acc * P1;
}

static inline uint64_t xmerge(uint64_t acc, uint64_t v) {
  acc ^= xround(0, v);
  return acc * P1 + P4;
}

/* The pieces both readers of input share: the four accumulators' merge
 * once the 32-byte stripes are done, one 8-byte lane of the tail, and the
 * final avalanche. */
static inline uint64_t converge(uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4) {
  uint64_t h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
  h = xmerge(h, v1);
  h = xmerge(h, v2);
  h = xmerge(h, v3);
  return xmerge(h, v4);
}

static inline uint64_t tail_lane(uint64_t h, uint64_t lane) {
  h ^= xround(0, lane);
  return rotl(h, 27) * P1 + P4;
}

static inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  return h ^ (h >> 32);
}

uint64_t ember__xxh64(const void *data, size_t len, uint64_t seed) {
  const unsigned char *p = data;
  size_t n = len;
  uint64_t h;
  if (n >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    do {
      v1 = xround(v1, ember__le64(p));
      v2 = xround(v2, ember__le64(p + 8));
      v3 = xround(v3, ember__le64(p + 16));
      v4 = xround(v4, ember__le64(p + 24));
      p += 32;
      n -= 32;
    } while (n >= 32);
    h = converge(v1, v2, v3, v4);
  } else {
    h = seed + P5;
  }
  h += (uint64_t)len;
  for (; n >= 8; p += 8, n -= 8) h = tail_lane(h, ember__le64(p));
  if (n >= 4) {
    h ^= (uint64_t)ember__le32(p) * P1;
    h = rotl(h, 23) * P2 + P3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; p++, n--) {
    h ^= (uint64_t)*p * P5;
    h = rotl(h, 11) * P1;
  }
  return avalanche(h);
}

uint64_t ember_wire_string_hash(const void *s, size_t n) { return ember__xxh64(s, n, 0); }

/* XXH64, seed 0, of the little-endian bytes of v[0..n): ember__xxh64 of
 * 8n bytes, taken as words (no buffer to fill, no 4- or 1-byte tail). The
 * location and stack hashes are of such lists. */
static uint64_t xxh64_words(const uint64_t *v, size_t n) {
  size_t i = 0;
  uint64_t h;
  if (n >= 4) {
    uint64_t v1 = P1 + P2, v2 = P2, v3 = 0, v4 = 0 - P1;
    do {
      v1 = xround(v1, v[i]);
      v2 = xround(v2, v[i + 1]);
      v3 = xround(v3, v[i + 2]);
      v4 = xround(v4, v[i + 3]);
      i += 4;
    } while (n - i >= 4);
    h = converge(v1, v2, v3, v4);
  } else {
    h = P5;
  }
  h += (uint64_t)n * 8;
  for (; i < n; i++) h = tail_lane(h, v[i]);
  return avalanche(h);
}

uint64_t ember_wire_location_hash(uint64_t address, uint32_t line, uint32_t kind,
                                  const uint64_t string_hashes[EMBER_WIRE_LOC_STRINGS],
                                  bool generated) {
  /* The 48 or 56 bytes as little-endian words: line and kind share one. */
  uint64_t w[2 + EMBER_WIRE_LOC_STRINGS] = {address, (uint64_t)line | (uint64_t)kind << 32};
  int n = generated ? EMBER_WIRE_LOC_STRINGS : EMBER_WIRE_LOC_GENERATED;
  for (int i = 0; i < n; i++) w[2 + i] = string_hashes[i];
  return xxh64_words(w, 2 + (size_t)n);
}

uint64_t ember_wire_stack_hash(const uint64_t *location_hashes, size_t depth) {
  /* Stacks are at most EMBER_MAX_STACK_DEPTH deep (decoding and profiles
   * enforce it). */
  if (depth > EMBER_MAX_STACK_DEPTH) depth = EMBER_MAX_STACK_DEPTH;
  return xxh64_words(location_hashes, depth);
}

void ember_wire_location_strings(const ember_wire_t *w, size_t i,
                                 const char *p[EMBER_WIRE_LOC_STRINGS],
                                 size_t n[EMBER_WIRE_LOC_STRINGS]) {
  uint32_t idx[EMBER_WIRE_LOC_STRINGS] = {0};
  uint32_t f = w->loc_function[i], m = w->loc_module[i];
  if (f != 0) {
    idx[EMBER_WIRE_LOC_FUNCTION] = w->fn_name[f - 1];
    idx[EMBER_WIRE_LOC_FILE] = w->fn_file[f - 1];
    if (w->fn_generated != NULL) idx[EMBER_WIRE_LOC_GENERATED] = w->fn_generated[f - 1];
  }
  if (m != 0) {
    idx[EMBER_WIRE_LOC_MODULE] = w->mod_name[m - 1];
    idx[EMBER_WIRE_LOC_BUILD_ID] = w->mod_build_id[m - 1];
  }
  for (int k = 0; k < EMBER_WIRE_LOC_STRINGS; k++) {
    /* Index 0, and an empty string anywhere, is "none". */
    if (idx[k] == 0 || w->str_len[idx[k]] == 0) {
      p[k] = NULL;
      n[k] = 0;
    } else {
      p[k] = w->blob + w->str_off[idx[k]];
      n[k] = w->str_len[idx[k]];
    }
  }
}

static const char *const string_names[EMBER_WIRE_LOC_STRINGS] = {"function name", "file", "module",
                                                                 "build id", "generated name"};

uint64_t ember_wire_location_hash_at(const ember_wire_t *w, size_t i) {
  const char *p[EMBER_WIRE_LOC_STRINGS];
  size_t n[EMBER_WIRE_LOC_STRINGS];
  uint64_t h[EMBER_WIRE_LOC_STRINGS];
  ember_wire_location_strings(w, i, p, n);
  for (int k = 0; k < EMBER_WIRE_LOC_STRINGS; k++)
    h[k] = ember_wire_string_hash(p[k] ? p[k] : "", n[k]);
  return ember_wire_location_hash(w->loc_address[i], w->loc_line[i], w->loc_kind[i], h,
                                  p[EMBER_WIRE_LOC_GENERATED] != NULL);
}

int ember_wire_check_location(const ember_wire_t *w, size_t i, char *errbuf, size_t errbuf_size) {
  const char *p[EMBER_WIRE_LOC_STRINGS];
  size_t n[EMBER_WIRE_LOC_STRINGS];
  ember_wire_location_strings(w, i, p, n);
  for (int k = 0; k < EMBER_WIRE_LOC_STRINGS; k++) {
    if (n[k] > EMBER_MAX_STRING)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "location %zu: %s of %zu bytes (at most %u)", i, string_names[k],
                               n[k], EMBER_MAX_STRING);
    if (n[k] > 0 && memchr(p[k], '\0', n[k]) != NULL)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "location %zu: %s holds a NUL byte", i, string_names[k]);
    if (!ember__utf8_valid(p[k], n[k]))
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "location %zu: %s is not valid UTF-8", i, string_names[k]);
  }
  /* A hash sent and already verified with the whole window's is not
   * hashed again here. */
  if (w->loc_hash == NULL || w->hashes_checked) return 0;
  uint64_t want = ember_wire_location_hash_at(w, i);
  if (want != w->loc_hash[i])
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "location %zu: hash %016llx does not match its content (%016llx)", i,
                             (unsigned long long)w->loc_hash[i], (unsigned long long)want);
  return 0;
}

int ember__wire_hash_locations(const ember_wire_t *w, uint64_t *out) {
  /* Every string's hash, once, in one pass over the blob (a writer sends
   * only strings its locations name). */
  uint64_t *sh = ember_malloc((w->nstrings ? w->nstrings : 1) * sizeof *sh);
  if (sh == NULL) return -ENOMEM;
  sh[0] = ember_wire_string_hash("", 0);
  for (size_t i = 1; i < w->nstrings; i++)
    sh[i] = ember_wire_string_hash(w->blob + w->str_off[i], w->str_len[i]);
  for (size_t i = 0; i < w->nlocations; i++) {
    uint32_t f = w->loc_function[i], m = w->loc_module[i];
    uint32_t idx[EMBER_WIRE_LOC_STRINGS] = {
        f ? w->fn_name[f - 1] : 0, f ? w->fn_file[f - 1] : 0, m ? w->mod_name[m - 1] : 0,
        m ? w->mod_build_id[m - 1] : 0, f && w->fn_generated ? w->fn_generated[f - 1] : 0};
    uint64_t h[EMBER_WIRE_LOC_STRINGS];
    /* An empty string hashes as "" (sh[s] is that hash) and is "none". */
    for (int k = 0; k < EMBER_WIRE_LOC_STRINGS; k++) h[k] = sh[idx[k]];
    bool generated =
        idx[EMBER_WIRE_LOC_GENERATED] != 0 && w->str_len[idx[EMBER_WIRE_LOC_GENERATED]];
    out[i] =
        ember_wire_location_hash(w->loc_address[i], w->loc_line[i], w->loc_kind[i], h, generated);
  }
  ember_free(sh);
  return 0;
}

uint64_t ember__wire_stack_hash_of(const ember_wire_t *w, const uint64_t *loc_hash, size_t i) {
  uint64_t lh[EMBER_MAX_STACK_DEPTH];
  size_t depth = ember__wire_gather(w, loc_hash, i, lh);
  return ember_wire_stack_hash(lh, depth);
}

int ember_wire_check_hashes(const ember_wire_t *w, char *errbuf, size_t errbuf_size) {
  if (w == NULL) return -EINVAL;
  if (w->loc_hash == NULL && w->stack_hash == NULL) return 0;
  /* The locations' hashes from their content: what a stack hash sent is
   * of, whether or not the locations' were sent too. */
  uint64_t *want = ember_malloc((w->nlocations ? w->nlocations : 1) * sizeof *want);
  if (want == NULL || ember__wire_hash_locations(w, want) != 0) {
    ember_free(want);
    return ember__codec_fail(-ENOMEM, errbuf, errbuf_size, "out of memory");
  }
  int rc = 0;
  /* The full check says best what is wrong (bad text, or the hash). */
  for (size_t i = 0; w->loc_hash != NULL && i < w->nlocations && rc == 0; i++)
    if (want[i] != w->loc_hash[i]) rc = ember_wire_check_location(w, i, errbuf, errbuf_size);
  for (size_t i = 0; w->stack_hash != NULL && i < w->nsamples && rc == 0; i++) {
    uint64_t sh = ember__wire_stack_hash_of(w, want, i);
    if (sh == w->stack_hash[i]) continue;
    /* Content the writer did not hash: bad text says best what is wrong. */
    const uint32_t *locs = w->locs + w->stack_off[i];
    for (size_t d = 0; d < w->depth[i] && rc == 0; d++)
      rc = ember_wire_check_location(w, locs[d], errbuf, errbuf_size);
    if (rc == 0)
      rc =
          ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                            "sample %zu: stack hash %016llx does not match its locations (%016llx)",
                            i, (unsigned long long)w->stack_hash[i], (unsigned long long)sh);
  }
  ember_free(want);
  return rc;
}

int ember_wire_verify_hashes(ember_wire_t *w, char *errbuf, size_t errbuf_size) {
  if (w == NULL) return -EINVAL;
  if (w->hashes_checked) return 0;
  int rc = ember_wire_check_hashes(w, errbuf, errbuf_size);
  if (rc == 0) w->hashes_checked = true;
  return rc;
}
