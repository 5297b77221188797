/* Profile row encoding (see row.h). */
#include "row.h"

#include "ember/ember.h"
#include "ember/profile.h"

static unsigned popcount8(uint8_t m) {
  unsigned n = 0;
  for (; m; m &= (uint8_t)(m - 1)) n++;
  return n;
}

int ember__row_encode(ember__out_t *o, const ember__row_hdr_t *h, const uint32_t *ids,
                      const int64_t *vals, uint64_t n) {
  unsigned nt = popcount8(h->mask);
  /* A row is hundreds of varints: each is written in place into room
   * reserved for the header, then for one whole entry at a time, rather
   * than through a call and a copy per varint. */
  int rc = ember__out_reserve(o, 2 + 3 * EMBER__VARINT_MAX);
  if (rc < 0) return rc;
  uint8_t *p = o->data + o->len;
  *p++ = 1;
  *p++ = h->mask;
  p += ember__put_varint(p, h->duration_ns);
  p += ember__put_varint(p, h->period_ns);
  p += ember__put_varint(p, n);
  o->len = (size_t)(p - o->data);
  size_t entry_max = (1 + (size_t)nt) * EMBER__VARINT_MAX;
  uint32_t prev = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (o->cap - o->len < entry_max && (rc = ember__out_reserve(o, entry_max)) < 0) return rc;
    p = o->data + o->len;
    /* Callers sort and deduplicate: ids strictly increase. */
    p += ember__put_varint(p, ids[i] - prev);
    prev = ids[i];
    for (unsigned t = 0; t < nt; t++) p += ember__put_varint(p, (uint64_t)vals[i * nt + t]);
    o->len = (size_t)(p - o->data);
  }
  return 0;
}

bool ember__row_open(ember__row_iter_t *it, const void *p, size_t n) {
  *it = (ember__row_iter_t){.in = ember__in(p, n)};
  uint8_t fmt = 0;
  ember__in_u8(&it->in, &fmt);
  ember__in_u8(&it->in, &it->hdr.mask);
  ember__in_varint(&it->in, &it->hdr.duration_ns);
  ember__in_varint(&it->in, &it->hdr.period_ns);
  ember__in_varint(&it->in, &it->hdr.nstacks);
  it->hdr.ntypes = popcount8(it->hdr.mask);
  it->left = it->hdr.nstacks;
  return it->in.ok && fmt == 1 && it->hdr.mask && it->hdr.mask < (1u << EMBER_MAX_VALUE_TYPES) &&
         it->hdr.duration_ns <= INT64_MAX && it->hdr.period_ns <= INT64_MAX;
}

int ember__row_next(ember__row_iter_t *it, uint32_t *id, int64_t *vals) {
  if (!it->left) return it->in.p == it->in.end ? 0 : EMBER_ECORRUPT;
  uint64_t delta;
  if (!ember__in_varint(&it->in, &delta)) return EMBER_ECORRUPT;
  /* After the first entry every delta is positive. */
  if (delta > UINT32_MAX - it->id || (delta == 0 && it->left != it->hdr.nstacks))
    return EMBER_ECORRUPT;
  it->id += (uint32_t)delta;
  for (unsigned t = 0; t < it->hdr.ntypes; t++) {
    uint64_t v;
    if (!ember__in_varint(&it->in, &v) || v > INT64_MAX) return EMBER_ECORRUPT;
    vals[t] = (int64_t)v;
  }
  it->left--;
  *id = it->id;
  return 1;
}
