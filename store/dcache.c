/* The dictionary cache (see dcache.h). */
#include "dcache.h"

#include <string.h>
#include <sys/mman.h>

#include "ember/ember.h"

/* A record: header, then the content, padded to 8 bytes. */
typedef struct rec {
  uint64_t hash;
  uint32_t id, len;
} rec_t;

#define HUGE_PAGE ((uintptr_t)2 << 20)

static size_t rec_size(size_t n) { return (sizeof(rec_t) + n + 7) & ~(size_t)7; }

static const rec_t *rec_at(const ember__dcache_t *c, uint64_t slot) {
  return (const rec_t *)(const void *)(c->bytes + ((slot & 0xffffffffu) - 1) * 8);
}

/* Ask for huge pages over the whole 2 MiB pages inside [p, p + n). Only a
 * hint: without transparent huge pages nothing changes. */
static void want_huge(void *p, size_t n) {
  uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
  uintptr_t b = ((uintptr_t)p + n) & ~(HUGE_PAGE - 1);
  if (b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
}

void ember__dcache_clear(ember__dcache_t *c) {
  ember_free(c->bytes);
  ember_free(c->slots);
  uint64_t clears = c->clears + 1;
  *c = (ember__dcache_t){0};
  c->clears = clears;
}

static uint64_t slot_of(uint64_t hash, size_t off) {
  return (hash >> 32) << 32 | (uint64_t)(off / 8 + 1);
}

static void place(ember__dcache_t *c, uint64_t hash, size_t off) {
  size_t i = (size_t)hash & c->mask;
  while (c->slots[i] != 0) i = (i + 1) & c->mask;
  c->slots[i] = slot_of(hash, off);
}

/* A table of `size` slots (a power of two) holding every record. */
static int rebuild(ember__dcache_t *c, size_t size) {
  uint64_t *s = ember_calloc(size, sizeof *s);
  if (s == NULL) return -1;
  want_huge(s, size * sizeof *s);
  ember_free(c->slots);
  c->slots = s;
  c->mask = size - 1;
  for (size_t off = 0; off < c->blen;) {
    const rec_t *r = (const rec_t *)(const void *)(c->bytes + off);
    place(c, r->hash, off);
    off += rec_size(r->len);
  }
  return 0;
}

typedef struct probe {
  const void *p;
  ember__dcache_match_fn match;
  const void *ctx;
} probe_t;

static int find(const ember__dcache_t *c, uint64_t hash, size_t n, const probe_t *k, uint32_t *id) {
  if (c->n == 0) return 0;
  uint64_t tag = hash >> 32;
  for (size_t i = (size_t)hash & c->mask;; i = (i + 1) & c->mask) {
    uint64_t s = c->slots[i];
    if (s == 0) return 0;
    if (s >> 32 != tag) continue;
    const rec_t *r = rec_at(c, s);
    if (r->hash != hash || r->len != n) continue;
    const uint8_t *content = (const uint8_t *)(r + 1);
    if (k->match ? k->match(k->ctx, content, n) : memcmp(content, k->p, n) == 0) {
      *id = r->id;
      return 1;
    }
  }
}

int ember__dcache_find(const ember__dcache_t *c, uint64_t hash, const void *p, size_t n,
                       uint32_t *id) {
  probe_t k = {.p = p};
  return find(c, hash, n, &k, id);
}

int ember__dcache_find_match(const ember__dcache_t *c, uint64_t hash, size_t n,
                             ember__dcache_match_fn match, const void *ctx, uint32_t *id) {
  probe_t k = {.match = match, .ctx = ctx};
  return find(c, hash, n, &k, id);
}

void ember__dcache_prefetch(const ember__dcache_t *c, uint64_t hash) {
  if (c->slots) __builtin_prefetch(&c->slots[(size_t)hash & c->mask]);
}

void ember__dcache_prefetch_entry(const ember__dcache_t *c, uint64_t hash) {
  if (!c->slots) return;
  uint64_t s = c->slots[(size_t)hash & c->mask];
  if (s == 0 || s >> 32 != hash >> 32) return;
  const uint8_t *r = (const uint8_t *)rec_at(c, s);
  __builtin_prefetch(r);
  __builtin_prefetch(r + 64);
}

void ember__dcache_add(ember__dcache_t *c, uint64_t hash, const void *p, size_t n, uint32_t id) {
  size_t need = rec_size(n);
  if (n > UINT32_MAX || need > EMBER__DCACHE_MAX_BYTES) return;
  if (c->n >= EMBER__DCACHE_MAX_ENTRIES || need > EMBER__DCACHE_MAX_BYTES - c->blen)
    ember__dcache_clear(c);
  if (c->blen + need > c->bcap) {
    size_t cap = c->bcap ? c->bcap : 64 * 1024;
    while (cap < c->blen + need) cap *= 2;
    uint8_t *b = ember_realloc(c->bytes, cap);
    if (b == NULL) {
      ember__dcache_clear(c);
      return;
    }
    want_huge(b, cap);
    c->bytes = b;
    c->bcap = cap;
  }
  if ((c->n + 1) * 2 > c->mask + 1) {
    size_t size = c->mask ? (c->mask + 1) * 2 : 1024;
    if (rebuild(c, size) < 0) {
      ember__dcache_clear(c);
      return;
    }
  }
  size_t off = c->blen;
  rec_t r = {.hash = hash, .id = id, .len = (uint32_t)n};
  memcpy(c->bytes + off, &r, sizeof r);
  if (n) memcpy(c->bytes + off + sizeof r, p, n);
  c->blen += need;
  c->n++;
  place(c, hash, off);
}

ember__dcache_mark_t ember__dcache_mark(const ember__dcache_t *c) {
  return (ember__dcache_mark_t){.n = c->n, .blen = c->blen, .clears = c->clears};
}

void ember__dcache_rollback(ember__dcache_t *c, ember__dcache_mark_t m) {
  /* Emptied since the mark (full, or out of memory): nothing of before is
   * left to keep. */
  if (c->clears != m.clears) {
    ember__dcache_clear(c);
    return;
  }
  if (c->n == m.n) return;
  c->n = m.n;
  c->blen = m.blen;
  if (rebuild(c, c->mask + 1) < 0) ember__dcache_clear(c);
}
