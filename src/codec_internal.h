/* What the codec's files (codec.c, codec_collector.c) share: the
 * allocator protobuf-c unpacks through (Ember's, so allocation failures
 * are testable) and the sentence-writing error helper. Internal to src/.
 * Thread-safe: no state. */
#ifndef EMBER_SRC_CODEC_INTERNAL_H
#define EMBER_SRC_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <protobuf-c/protobuf-c.h>

#include "ember/codec.h"
#include "ember/wire.h"

/* ember_malloc / ember_free behind protobuf-c's allocator interface. */
extern ProtobufCAllocator ember__codec_pb_allocator;

/* Write the sentence into errbuf (may be NULL or 0 bytes) and return rc. */
int ember__codec_fail(int rc, char *errbuf, size_t errbuf_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Decoding allocates one block per sub-message, repeated field and string
 * (thousands per window), and frees them all together: a bump arena per
 * decode call turns those into pointer increments and one free per chunk.
 * It lives with its caller, so decoding stays thread-safe (arena.c). Use
 * ember__arena_alloc / _free as a ProtobufCAllocator's functions, with the
 * arena as allocator_data; _free does nothing, _release frees it all. */
typedef struct ember__arena_chunk ember__arena_chunk_t;
typedef struct ember__arena {
  ember__arena_chunk_t *head;
  size_t next_size; /* the next chunk's size; it doubles up to 16 MiB */
} ember__arena_t;

void *ember__arena_alloc(void *arena, size_t size);
void ember__arena_free(void *arena, void *p);
void ember__arena_release(ember__arena_t *a);

/* The last field of every profile message, v1 and v2: "EMBR". */
#define EMBER__WIRE_END_MARK 0x454d4252u

/* What an ember_wire_t's priv points to: how to free it (and the view,
 * which lives in the same memory). */
typedef struct ember__wire_mem {
  void (*release)(struct ember__wire_mem *m);
} ember__wire_mem_t;

/* ember_codec_decode of a version 1 message (codec.c). */
int ember__codec_decode_v1(const void *data, size_t len, const ember_codec_limits_t *lim,
                           ember_profile_t **out, char *errbuf, size_t errbuf_size);

/* ember_wire_decode of a version 1 message (codec.c): a view whose columns
 * are copied from the unpacked message, keys computed. Same returns. */
int ember__codec_decode_v1_view(const void *data, size_t len, const ember_codec_limits_t *lim,
                                ember_wire_t **out, char *errbuf, size_t errbuf_size);

/* Little-endian loads: one load on a little-endian host, bytes assembled
 * elsewhere (wire_hash.c, wire_key.c). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline uint64_t ember__le64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static inline uint32_t ember__le32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
#else
static inline uint64_t ember__le64(const unsigned char *p) {
  return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
         (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

static inline uint32_t ember__le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
#endif

/* out[d] = per_loc[l] for each location l of sample i's stack, leaf
 * first; returns the depth (at most EMBER_MAX_STACK_DEPTH, which decoding
 * and profiles enforce). For the stack hashes and keys. */
static inline size_t ember__wire_gather(const ember_wire_t *w, const uint64_t *per_loc, size_t i,
                                        uint64_t out[EMBER_MAX_STACK_DEPTH]) {
  const uint32_t *locs = w->locs + w->stack_off[i];
  size_t depth = w->depth[i] < EMBER_MAX_STACK_DEPTH ? w->depth[i] : EMBER_MAX_STACK_DEPTH;
  for (size_t d = 0; d < depth; d++) out[d] = per_loc[locs[d]];
  return depth;
}

/* XXH64 of data[0..len) with `seed`, as its specification defines it
 * (wire_hash.c; wire v2's hashes are built on it). */
uint64_t ember__xxh64(const void *data, size_t len, uint64_t seed);

/* out[i] = the hash of location i of `w` from its content, for every
 * location, hashing each string the locations name once (wire_hash.c).
 * 0 or -ENOMEM. */
int ember__wire_hash_locations(const ember_wire_t *w, uint64_t *out);

/* The hash of sample i's stack of `w` from its locations' hashes
 * `loc_hash` (one per location), as ember_wire_stack_hash defines it
 * (wire_hash.c). */
uint64_t ember__wire_stack_hash_of(const ember_wire_t *w, const uint64_t *loc_hash, size_t i);

/* out[i] = the content key of location i of `w`, for every location,
 * keying each string once (wire_key.c). 0 or -ENOMEM. */
int ember__wire_key_locations(const ember_wire_t *w, uint64_t *out);

/* The content key of sample i's stack of `w` from its locations' keys
 * `loc_key` (wire_key.c). */
uint64_t ember__wire_stack_key_of(const ember_wire_t *w, const uint64_t *loc_key, size_t i);

/* The checks every wire text (ids, labels, strings) passes: at most
 * EMBER_MAX_STRING bytes and valid UTF-8. `what` and `idx` name it in the
 * sentence. 0, EMBER_ETOOBIG or EMBER_ECORRUPT. */
int ember__codec_check_text(const char *s, const char *what, size_t idx, char *errbuf,
                            size_t errbuf_size);

#endif
