/* On-disk encodings of the store (see kv.h). */
#include "kv.h"

#include <errno.h>
#include <string.h>

#include "ember/ember.h"

void ember__out_free(ember__out_t *o) {
  ember_free(o->data);
  *o = (ember__out_t){0};
}

int ember__out_reserve(ember__out_t *o, size_t n) {
  if (o->cap - o->len >= n) return 0;
  size_t cap = o->cap ? o->cap : 64;
  while (cap - o->len < n) {
    if (cap > SIZE_MAX / 2) return -ENOMEM;
    cap *= 2;
  }
  uint8_t *d = ember_realloc(o->data, cap);
  if (!d) return -ENOMEM;
  o->data = d;
  o->cap = cap;
  return 0;
}

int ember__out_bytes(ember__out_t *o, const void *p, size_t n) {
  int rc = ember__out_reserve(o, n);
  if (rc < 0) return rc;
  if (n) memcpy(o->data + o->len, p, n);
  o->len += n;
  return 0;
}

int ember__out_varint(ember__out_t *o, uint64_t v) {
  int rc = ember__out_reserve(o, EMBER__VARINT_MAX);
  if (rc < 0) return rc;
  o->len += ember__put_varint(o->data + o->len, v);
  return 0;
}

int ember__out_str(ember__out_t *o, const char *s) {
  uint8_t flag = s ? 1 : 0;
  int rc = ember__out_bytes(o, &flag, 1);
  if (rc < 0 || !s) return rc;
  return ember__out_bytes(o, s, strlen(s) + 1);
}

bool ember__in_varint(ember__in_t *in, uint64_t *v) {
  uint64_t x = 0;
  for (unsigned shift = 0; in->ok; shift += 7) {
    /* A tenth byte may carry only the top bit of a 64-bit value. */
    if (in->p >= in->end || shift > 63) break;
    uint8_t c = *in->p++;
    if (shift == 63 && (c & 0x7e)) break;
    x |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) {
      *v = x;
      return true;
    }
  }
  in->ok = false;
  return false;
}

bool ember__in_u8(ember__in_t *in, uint8_t *v) {
  if (!in->ok || in->p >= in->end) return in->ok = false;
  *v = *in->p++;
  return true;
}

bool ember__in_be32(ember__in_t *in, uint32_t *v) {
  if (!in->ok || in->end - in->p < 4) return in->ok = false;
  *v = ember__get_be32(in->p);
  in->p += 4;
  return true;
}

bool ember__in_be64(ember__in_t *in, uint64_t *v) {
  if (!in->ok || in->end - in->p < 8) return in->ok = false;
  *v = ember__get_be64(in->p);
  in->p += 8;
  return true;
}

bool ember__in_str(ember__in_t *in, const char **s) {
  uint8_t flag;
  if (!ember__in_u8(in, &flag)) return false;
  if (flag == 0) {
    *s = NULL;
    return true;
  }
  const uint8_t *nul = flag == 1 ? memchr(in->p, 0, (size_t)(in->end - in->p)) : NULL;
  if (!nul) return in->ok = false;
  *s = (const char *)in->p;
  in->p = nul + 1;
  return true;
}

uint64_t ember__store_hash(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

uint64_t ember__store_hash_final(uint64_t h) {
  /* FNV-1a mixes its last bytes poorly into the high bits, which lead the
   * big-endian keys; a splitmix64 finaliser spreads them. */
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}
