/* The collector's content keys of a view's locations and stacks
 * (include/ember/wire.h, docs/internals/codec.md "Keys"): 64-bit hashes of
 * exactly what makes two locations, or two stacks, the same content, for
 * in-memory caches only.
 *
 * They are not the wire's hashes (wire_hash.c): those are XXH64, fixed
 * forever because older writers send them. Nothing stores a key or sends
 * one, so this function may change between releases; what it must be is
 * cheap (every location and stack of every window is keyed on decode) and
 * well spread: the producers' memo takes a stack key for the stack without
 * comparing content, so two stacks of one agent must not share one but by
 * a 2^-64 chance. Each step is one 64x64->128-bit multiply whose halves
 * are folded together (the "mum" step of wyhash and its kin); a location's
 * and a stack's words are taken in pairs, each pair with constants of its
 * own position, and the products summed, so the multiplies of one key do
 * not wait on each other. Thread-safe: pure functions. */
#include <errno.h>
#include <string.h>

#include "codec_internal.h"
#include "ember/wire.h"

__extension__ typedef unsigned __int128 u128_t;

/* Odd 64-bit constants with about half their bits set. */
#define C0 0x9e3779b97f4a7c15ULL
#define C1 0xd6e8feb86659fd93ULL
#define C2 0xa0761d6478bd642fULL
#define C3 0xe7037ed1a0b428dbULL
#define C4 0x8ebc6af09c88c6e3ULL
#define C5 0x589965cc75374cc3ULL

static inline uint64_t fold(uint64_t a, uint64_t b) {
  u128_t r = (u128_t)a * b;
  return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* The key of s[0..n). The last 1 to 16 bytes are read as two words that
 * may overlap (every byte is in one of them; the length, mixed in, tells
 * where they meet). */
static uint64_t key_string(const unsigned char *p, size_t n) {
  uint64_t h = C0 ^ (uint64_t)n;
  size_t m = n;
  for (; m > 16; p += 16, m -= 16) h = fold(ember__le64(p) ^ C1, ember__le64(p + 8) ^ h);
  uint64_t a = 0, b = 0;
  if (m >= 8) {
    a = ember__le64(p);
    b = ember__le64(p + m - 8);
  } else if (m >= 4) {
    a = ember__le32(p);
    b = ember__le32(p + m - 4);
  } else if (m > 0) {
    a = (uint64_t)p[0] << 16 | (uint64_t)p[m >> 1] << 8 | p[m - 1];
  }
  return fold(fold(a ^ C2, b ^ C3 ^ h) ^ C4, C5 ^ (uint64_t)n);
}

/* The key of words v[0..n): pairs of words, each pair under constants of
 * its place, summed; then the count. */
static inline uint64_t key_words(const uint64_t *v, size_t n) {
  uint64_t h = 0, c = C1;
  size_t i = 0;
  for (; i + 1 < n; i += 2, c += C0) h += fold(v[i] ^ c, v[i + 1] ^ (c + C2));
  if (i < n) h += fold(v[i] ^ c, C3);
  return fold(h ^ C4, C5 ^ (uint64_t)n);
}

int ember__wire_key_locations(const ember_wire_t *w, uint64_t *out) {
  /* Every string's key once. An empty string is "none", as is index 0,
   * whose string is empty: both key as "". */
  uint64_t *sk = ember_malloc((w->nstrings ? w->nstrings : 1) * sizeof *sk);
  if (sk == NULL) return -ENOMEM;
  const unsigned char *blob = (const unsigned char *)w->blob;
  for (size_t i = 0; i < w->nstrings; i++) sk[i] = key_string(blob + w->str_off[i], w->str_len[i]);
  uint64_t none = key_string(blob, 0);
  for (size_t i = 0; i < w->nlocations; i++) {
    uint32_t f = w->loc_function[i], m = w->loc_module[i];
    uint64_t line_kind = (uint64_t)w->loc_line[i] | (uint64_t)w->loc_kind[i] << 32;
    uint64_t v[7] = {w->loc_address[i], line_kind, none, none, none, none, none};
    if (f != 0) {
      v[2] = sk[w->fn_name[f - 1]];
      v[3] = sk[w->fn_file[f - 1]];
      if (w->fn_generated != NULL) v[6] = sk[w->fn_generated[f - 1]];
    }
    if (m != 0) {
      v[4] = sk[w->mod_name[m - 1]];
      v[5] = sk[w->mod_build_id[m - 1]];
    }
    out[i] = key_words(v, 7);
  }
  ember_free(sk);
  return 0;
}

uint64_t ember__wire_stack_key_of(const ember_wire_t *w, const uint64_t *loc_key, size_t i) {
  uint64_t lk[EMBER_MAX_STACK_DEPTH];
  size_t depth = ember__wire_gather(w, loc_key, i, lk);
  return key_words(lk, depth);
}
