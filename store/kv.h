/* Byte-level encodings of the store's keys and values: big-endian integers,
 * LEB128 varints, NUL-terminated optional strings and the stable content
 * hash. Everything here is on disk: changing any of it needs a new schema
 * version (docs/internals/store.md). */
#ifndef EMBER_STORE_KV_H
#define EMBER_STORE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline void ember__put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}
static inline uint32_t ember__get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static inline void ember__put_be64(uint8_t *p, uint64_t v) {
  ember__put_be32(p, (uint32_t)(v >> 32));
  ember__put_be32(p + 4, (uint32_t)v);
}
static inline uint64_t ember__get_be64(const uint8_t *p) {
  return (uint64_t)ember__get_be32(p) << 32 | ember__get_be32(p + 4);
}
/* A signed time as an unsigned big-endian number whose byte order is the
 * numeric order: flip the sign bit. */
static inline void ember__put_time(uint8_t *p, int64_t t) {
  ember__put_be64(p, (uint64_t)t ^ 0x8000000000000000ULL);
}
static inline int64_t ember__get_time(const uint8_t *p) {
  return (int64_t)(ember__get_be64(p) ^ 0x8000000000000000ULL);
}

/* A growable output buffer for one value. */
typedef struct ember__out {
  uint8_t *data;
  size_t len, cap;
} ember__out_t;

void ember__out_free(ember__out_t *o);
/* Make room for `n` more bytes at data + len, for callers that write many
 * small fields in place (ember__put_varint) rather than call out per field. */
int ember__out_reserve(ember__out_t *o, size_t n);
int ember__out_bytes(ember__out_t *o, const void *p, size_t n);
int ember__out_varint(ember__out_t *o, uint64_t v);

/* The longest varint: 64 bits in groups of 7. */
#define EMBER__VARINT_MAX 10
/* Write `v` as a LEB128 varint at `p`, which has room for it (at most
 * EMBER__VARINT_MAX bytes; 5 for a value below 2^32); returns the bytes
 * written. */
static inline size_t ember__put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  for (; v >= 0x80; v >>= 7) p[n++] = (uint8_t)(v | 0x80);
  p[n++] = (uint8_t)v;
  return n;
}
/* An optional string: 0x00 for NULL, else 0x01 then the bytes and a NUL. */
int ember__out_str(ember__out_t *o, const char *s);

/* A bounds-checked reader; every get returns false once input runs out or
 * is malformed, and stays false. */
typedef struct ember__in {
  const uint8_t *p, *end;
  bool ok;
} ember__in_t;

static inline ember__in_t ember__in(const void *p, size_t n) {
  return (ember__in_t){.p = p, .end = (const uint8_t *)p + n, .ok = true};
}
bool ember__in_varint(ember__in_t *in, uint64_t *v);
bool ember__in_u8(ember__in_t *in, uint8_t *v);
bool ember__in_be32(ember__in_t *in, uint32_t *v);
bool ember__in_be64(ember__in_t *in, uint64_t *v);
/* *s points into the input (NULL for an absent string). */
bool ember__in_str(ember__in_t *in, const char **s);

/* The store's stable content hash (64-bit FNV-1a, then a final avalanche).
 * Stored in keys, so it must never change within a schema version; it is
 * only an index: every hit is checked against the stored content. */
uint64_t ember__store_hash(uint64_t h, const void *p, size_t n);
#define EMBER_STORE_HASH_SEED 0xcbf29ce484222325ULL
uint64_t ember__store_hash_final(uint64_t h);

#endif
