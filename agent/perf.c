/* perf events, rings and samples (perf.h). */
#include "perf.h"

#include <asm/perf_regs.h>
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

_Static_assert(EMBER__PERF_SCRATCH >= UINT16_MAX, "the scratch must hold any record");
_Static_assert(EMBER__PERF_SCRATCH % 8 == 0, "the scratch is an array of u64");

/* Bits before STACK_USER that the parser does not read: their fields would
 * come before others it reads, so it cannot step over them. */
#define UNSUPPORTED (PERF_SAMPLE_READ | PERF_SAMPLE_BRANCH_STACK)

/* A cursor over one record; every read checks what is left. */
typedef struct cursor {
  const unsigned char *p, *end;
} cursor_t;

static bool take(cursor_t *c, void *out, size_t n) {
  if ((size_t)(c->end - c->p) < n) return false;
  memcpy(out, c->p, n);
  c->p += n;
  return true;
}

static bool take_u64(cursor_t *c, uint64_t *out) { return take(c, out, 8); }

static bool take_u32_pair(cursor_t *c, uint32_t *a, uint32_t *b) {
  return take(c, a, 4) && take(c, b, 4);
}

/* Skip n bytes and return where they start, or NULL. */
static const unsigned char *skip(cursor_t *c, uint64_t n) {
  if ((uint64_t)(c->end - c->p) < n) return NULL;
  const unsigned char *at = c->p;
  c->p += n;
  return at;
}

int ember__perf_parse_sample(const ember__perf_format_t *fmt, const void *rec, size_t size,
                             uint64_t *ips, uint32_t ips_cap, ember__raw_sample_t *out) {
  const uint64_t t = fmt->sample_type;
  if (size < sizeof(struct perf_event_header) || (t & UNSUPPORTED) != 0) return -EINVAL;
  /* The u64 fields are read with memcpy; regs and stack are handed out as
   * pointers, so the record must be aligned as the kernel writes it. */
  if (((uintptr_t)rec & 7) != 0) return -EINVAL;
  cursor_t c = {(const unsigned char *)rec + sizeof(struct perf_event_header),
                (const unsigned char *)rec + size};
  ember__raw_sample_t s = {.regs_mask = fmt->sample_regs_user};
  uint32_t res;
  if ((t & PERF_SAMPLE_IDENTIFIER) && !take_u64(&c, &s.id)) return -EINVAL;
  if ((t & PERF_SAMPLE_IP) && !take_u64(&c, &s.ip)) return -EINVAL;
  if ((t & PERF_SAMPLE_TID) && !take_u32_pair(&c, &s.pid, &s.tid)) return -EINVAL;
  if ((t & PERF_SAMPLE_TIME) && !take_u64(&c, &s.time_ns)) return -EINVAL;
  if ((t & PERF_SAMPLE_ADDR) && !take_u64(&c, &s.addr)) return -EINVAL;
  if ((t & PERF_SAMPLE_ID) && !take_u64(&c, &s.id)) return -EINVAL;
  if ((t & PERF_SAMPLE_STREAM_ID) && !take_u64(&c, &s.stream_id)) return -EINVAL;
  if ((t & PERF_SAMPLE_CPU) && !take_u32_pair(&c, &s.cpu, &res)) return -EINVAL;
  if ((t & PERF_SAMPLE_PERIOD) && !take_u64(&c, &s.period_ns)) return -EINVAL;
  if (t & PERF_SAMPLE_CALLCHAIN) {
    uint64_t nr;
    if (!take_u64(&c, &nr) || nr > (uint64_t)(c.end - c.p) / 8) return -EINVAL;
    const unsigned char *chain = skip(&c, nr * 8);
    uint32_t n = 0;
    for (uint64_t i = 0; i < nr && n < ips_cap; i++) {
      uint64_t ip;
      memcpy(&ip, chain + i * 8, 8);
      if (ip >= (uint64_t)PERF_CONTEXT_MAX) continue; /* a context marker */
      ips[n++] = ip;
    }
    s.ips = ips;
    s.nips = n;
  }
  if (t & PERF_SAMPLE_RAW) {
    /* u32 size, then the data; the kernel pads the pair to 8 bytes. */
    uint32_t rsize;
    if (!take(&c, &rsize, 4)) return -EINVAL;
    s.raw = skip(&c, rsize);
    if (s.raw == NULL) return -EINVAL;
    s.raw_size = rsize;
  }
  if (t & PERF_SAMPLE_REGS_USER) {
    if (!take_u64(&c, &s.regs_abi)) return -EINVAL;
    if (s.regs_abi != PERF_SAMPLE_REGS_ABI_NONE) {
      uint32_t n = (uint32_t)__builtin_popcountll(fmt->sample_regs_user);
      const unsigned char *regs = skip(&c, (uint64_t)n * 8);
      if (regs == NULL || ((uintptr_t)regs & 7) != 0) return -EINVAL;
      s.regs = (const uint64_t *)(const void *)regs;
      s.nregs = n;
    }
  }
  if (t & PERF_SAMPLE_STACK_USER) {
    uint64_t ssize;
    if (!take_u64(&c, &ssize)) return -EINVAL;
    if (ssize != 0) {
      const unsigned char *stack = skip(&c, ssize);
      uint64_t dyn;
      if (stack == NULL || !take_u64(&c, &dyn) || dyn > ssize) return -EINVAL;
      s.stack = stack;
      s.stack_size = dyn;
    }
  }
  *out = s;
  return 0;
}

int ember__perf_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
                     unsigned long flags) {
  attr->size = sizeof *attr;
  int fd = (int)syscall(SYS_perf_event_open, attr, pid, cpu, group_fd,
                        flags | (unsigned long)PERF_FLAG_FD_CLOEXEC);
  return fd < 0 ? -errno : fd;
}

int ember__perf_ring_map(ember__perf_ring_t *r, int fd, size_t data_pages) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t data = data_pages * page;
  void *base = mmap(NULL, page + data, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return -errno;
  *r = (ember__perf_ring_t){.base = base, .page_size = page, .data_size = data};
  return 0;
}

void ember__perf_ring_unmap(ember__perf_ring_t *r) {
  if (r == NULL || r->base == NULL) return;
  munmap(r->base, r->page_size + r->data_size);
  r->base = NULL;
}

void ember__perf_ring_drain(const ember__perf_reader_t *r, ember__perf_ring_t *ring) {
  if (ring->base == NULL) return;
  struct perf_event_mmap_page *meta = ring->base;
  unsigned char *data = (unsigned char *)ring->base + ring->page_size;
  size_t data_size = ring->data_size;
  uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
  uint64_t tail = meta->data_tail;
  while (tail < head) {
    size_t off = (size_t)(tail % data_size);
    /* Records are 8-byte aligned and the ring a multiple of 8, so a header
     * never straddles the end; a body may. */
    const struct perf_event_header *h = (const void *)(data + off);
    size_t size = h->size;
    if (size < sizeof *h || size > head - tail || size > EMBER__PERF_SCRATCH) {
      /* A corrupt size would make us walk garbage: drop the rest. */
      r->counts->bad_records++;
      tail = head;
      break;
    }
    const unsigned char *rec = data + off;
    if (off + size > data_size) {
      size_t first = data_size - off;
      unsigned char *scratch = (unsigned char *)r->scratch;
      memcpy(scratch, data + off, first);
      memcpy(scratch + first, data, size - first);
      rec = scratch;
    }
    switch (h->type) {
    case PERF_RECORD_SAMPLE: {
      ember__raw_sample_t s;
      if (ember__perf_parse_sample(&r->fmt, rec, size, r->ips, EMBER__PERF_MAX_CHAIN, &s) != 0) {
        r->counts->bad_records++;
      } else {
        r->counts->samples++;
        r->fn(r->ctx, &s);
      }
      break;
    }
    case PERF_RECORD_LOST: {
      uint64_t lost = 0;
      if (size >= sizeof *h + 16) memcpy(&lost, rec + sizeof *h + 8, 8);
      r->counts->lost += lost;
      break;
    }
    case PERF_RECORD_THROTTLE: r->counts->throttles++; break;
    case PERF_RECORD_UNTHROTTLE: r->counts->unthrottles++; break;
    default: break;
    }
    tail += size;
  }
  __atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
}

/* --- user stacks --- */

#define USER_REGS                                                                                  \
  ((1ull << PERF_REG_X86_BP) | (1ull << PERF_REG_X86_SP) | (1ull << PERF_REG_X86_IP))

void ember__perf_want_stack(struct perf_event_attr *attr, uint32_t stack_bytes) {
  if (stack_bytes == 0) return;
  if (stack_bytes > EMBER__PERF_STACK_MAX) stack_bytes = EMBER__PERF_STACK_MAX;
  attr->sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
  attr->sample_regs_user = USER_REGS;
  attr->sample_stack_user = stack_bytes & ~7u;
  attr->exclude_callchain_user = 1;
}

bool ember__perf_user_regs(const ember__raw_sample_t *s, uint64_t *ip, uint64_t *sp, uint64_t *bp) {
  if (s->regs_abi == PERF_SAMPLE_REGS_ABI_NONE || s->regs_mask != USER_REGS || s->nregs != 3)
    return false;
  /* One value per mask bit, lowest first: bp (6), sp (7), ip (8). */
  *bp = s->regs[0];
  *sp = s->regs[1];
  *ip = s->regs[2];
  return true;
}

uint32_t ember__perf_ring_pages_for(uint32_t hz, uint32_t stack_bytes, size_t page_size,
                                    uint32_t min_pages) {
  uint64_t record = (uint64_t)stack_bytes + 1024; /* the copy, callchain, fields */
  uint64_t need = (uint64_t)hz * record;          /* 4 x a quarter second = one second */
  uint64_t pages = page_size ? (need + page_size - 1) / page_size : 1;
  uint32_t p = min_pages ? min_pages : 1;
  while (p < pages && p < 1024) p *= 2;
  return p;
}
