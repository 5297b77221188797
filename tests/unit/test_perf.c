/* The perf sample parser and ring walker (agent/perf.h), on hand-built
 * records: every sample_type field in the kernel's order, user registers
 * and stack copies, truncated and inconsistent records (counted, never
 * read past: each is parsed from a buffer of exactly its size, so ASan
 * sees any over-read), and a ring whose records wrap around its end. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "perf.h"

/* A record under construction, in u64 words. */
typedef struct rec {
  uint64_t w[256];
  size_t n; /* words */
} rec_t;

static void rec_start(rec_t *r, uint32_t type) {
  memset(r, 0, sizeof *r);
  struct perf_event_header h = {.type = type, .misc = 0, .size = 0};
  memcpy(&r->w[0], &h, sizeof h);
  r->n = 1;
}

static void put(rec_t *r, uint64_t v) { r->w[r->n++] = v; }

static void put2(rec_t *r, uint32_t lo, uint32_t hi) {
  memcpy((unsigned char *)&r->w[r->n], &lo, 4);
  memcpy((unsigned char *)&r->w[r->n] + 4, &hi, 4);
  r->n++;
}

static size_t rec_end(rec_t *r) {
  size_t size = r->n * 8;
  struct perf_event_header h;
  memcpy(&h, &r->w[0], sizeof h);
  h.size = (uint16_t)size;
  memcpy(&r->w[0], &h, sizeof h);
  return size;
}

/* Parse the first `size` bytes of r from a heap copy of exactly that size. */
static int parse_exact(const ember__perf_format_t *f, const rec_t *r, size_t size, uint64_t *ips,
                       uint32_t cap, ember__raw_sample_t *out, void **keep) {
  void *copy = malloc(size ? size : 1);
  assert_non_null(copy);
  memcpy(copy, r->w, size);
  int rc = ember__perf_parse_sample(f, copy, size, ips, cap, out);
  *keep = copy; /* the sample points into it */
  return rc;
}

#define ALL_TYPES                                                                                  \
  (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_ID |       \
   PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_CALLCHAIN |          \
   PERF_SAMPLE_RAW | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER)
/* Three registers, as bits 3, 6 and 7 of the mask (x86: DX, BP, SP). */
#define REGS ((1ULL << 3) | (1ULL << 6) | (1ULL << 7))

/* A sample with every supported field; the stack copy is 32 bytes, 24 valid. */
static size_t build_full(rec_t *r) {
  rec_start(r, PERF_RECORD_SAMPLE);
  put(r, 0x401000);   /* ip */
  put2(r, 100, 101);  /* pid, tid */
  put(r, 123456789);  /* time */
  put(r, 0xdead0000); /* addr */
  put(r, 77);         /* id */
  put(r, 78);         /* stream_id */
  put2(r, 3, 0);      /* cpu, res */
  put(r, 10000000);   /* period */
  put(r, 5);          /* callchain nr */
  put(r, (uint64_t)PERF_CONTEXT_USER);
  put(r, 0x401000);
  put(r, 0x402000);
  put(r, (uint64_t)PERF_CONTEXT_KERNEL);
  put(r, 0x403000);
  put2(r, 12, 0x64636261); /* raw: size 12, "abcd" ... */
  put(r, 0x6867666500000000ull);
  put(r, PERF_SAMPLE_REGS_ABI_64);
  put(r, 0x1111);
  put(r, 0x2222);
  put(r, 0x3333);
  put(r, 32); /* stack size */
  put(r, 0xaaaa);
  put(r, 0xbbbb);
  put(r, 0xcccc);
  put(r, 0xdddd);
  put(r, 24); /* dyn_size */
  return rec_end(r);
}

static void test_perf_parse_all_fields(void **state) {
  (void)state;
  rec_t r;
  size_t size = build_full(&r);
  ember__perf_format_t f = {ALL_TYPES, REGS};
  uint64_t ips[8];
  ember__raw_sample_t s;
  void *keep = NULL;
  assert_int_equal(parse_exact(&f, &r, size, ips, 8, &s, &keep), 0);
  assert_int_equal(s.ip, 0x401000);
  assert_int_equal(s.pid, 100);
  assert_int_equal(s.tid, 101);
  assert_int_equal(s.time_ns, 123456789);
  assert_int_equal(s.addr, 0xdead0000);
  assert_int_equal(s.id, 77);
  assert_int_equal(s.stream_id, 78);
  assert_int_equal(s.cpu, 3);
  assert_int_equal(s.period_ns, 10000000);
  assert_int_equal(s.nips, 3); /* markers removed */
  assert_int_equal(s.ips[0], 0x401000);
  assert_int_equal(s.ips[1], 0x402000);
  assert_int_equal(s.ips[2], 0x403000);
  assert_int_equal(s.raw_size, 12);
  assert_memory_equal(s.raw, "abcd", 4);
  assert_int_equal(s.regs_abi, PERF_SAMPLE_REGS_ABI_64);
  assert_int_equal(s.regs_mask, REGS);
  assert_int_equal(s.nregs, 3);
  assert_int_equal(s.regs[0], 0x1111);
  assert_int_equal(s.regs[2], 0x3333);
  assert_non_null(s.stack);
  assert_int_equal(s.stack_size, 24);
  uint64_t top;
  memcpy(&top, s.stack, 8);
  assert_int_equal(top, 0xaaaa);
  free(keep);

  /* A chain deeper than the caller's buffer is cut, not overrun. */
  assert_int_equal(parse_exact(&f, &r, size, ips, 2, &s, &keep), 0);
  assert_int_equal(s.nips, 2);
  free(keep);
}

static void test_perf_parse_identifier_and_layout(void **state) {
  (void)state;
  /* The uprobe method's layout: IDENTIFIER first, then IP, CALLCHAIN,
   * REGS_USER, STACK_USER. */
  rec_t r;
  rec_start(&r, PERF_RECORD_SAMPLE);
  put(&r, 4242);
  put(&r, 0x7000);
  put(&r, 1);
  put(&r, 0x7000);
  put(&r, PERF_SAMPLE_REGS_ABI_64);
  put(&r, 1);
  put(&r, 2);
  put(&r, 3);
  put(&r, 16);
  put(&r, 0x7777);
  put(&r, 0);
  put(&r, 16);
  size_t size = rec_end(&r);
  ember__perf_format_t f = {PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN |
                                PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER,
                            REGS};
  uint64_t ips[4];
  ember__raw_sample_t s;
  void *keep = NULL;
  assert_int_equal(parse_exact(&f, &r, size, ips, 4, &s, &keep), 0);
  assert_int_equal(s.id, 4242);
  assert_int_equal(s.ip, 0x7000);
  assert_int_equal(s.nips, 1);
  assert_int_equal(s.nregs, 3);
  assert_int_equal(s.regs[1], 2);
  assert_int_equal(s.stack_size, 16);
  assert_int_equal(s.pid, 0); /* not sampled: zero */
  free(keep);
}

static void test_perf_parse_regs_abi_none_and_empty_stack(void **state) {
  (void)state;
  /* A kernel thread: no user registers (abi NONE, no values follow) and
   * no stack copy (size 0, no dyn_size follows). */
  rec_t r;
  rec_start(&r, PERF_RECORD_SAMPLE);
  put(&r, PERF_SAMPLE_REGS_ABI_NONE);
  put(&r, 0);
  size_t size = rec_end(&r);
  ember__perf_format_t f = {PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER, REGS};
  uint64_t ips[4];
  ember__raw_sample_t s;
  void *keep = NULL;
  assert_int_equal(parse_exact(&f, &r, size, ips, 4, &s, &keep), 0);
  assert_int_equal(s.regs_abi, PERF_SAMPLE_REGS_ABI_NONE);
  assert_null(s.regs);
  assert_int_equal(s.nregs, 0);
  assert_null(s.stack);
  assert_int_equal(s.stack_size, 0);
  free(keep);
}

static void test_perf_parse_truncated(void **state) {
  (void)state;
  rec_t r;
  size_t size = build_full(&r);
  ember__perf_format_t f = {ALL_TYPES, REGS};
  uint64_t ips[8];
  /* Every shorter record (the header's size is whatever the caller says:
   * the ring walker passes the header's) is refused, not read past. */
  for (size_t cut = 0; cut < size; cut += 8) {
    ember__raw_sample_t s;
    void *keep = NULL;
    assert_int_equal(parse_exact(&f, &r, cut, ips, 8, &s, &keep), -EINVAL);
    free(keep);
  }
}

static void test_perf_parse_inconsistent_lengths(void **state) {
  (void)state;
  ember__perf_format_t f = {ALL_TYPES, REGS};
  uint64_t ips[8];
  ember__raw_sample_t s;
  void *keep = NULL;
  rec_t r;
  size_t size = build_full(&r);
  /* dyn_size larger than the copy. */
  r.w[size / 8 - 1] = 33;
  assert_int_equal(parse_exact(&f, &r, size, ips, 8, &s, &keep), -EINVAL);
  free(keep);
  /* A callchain longer than the record. */
  size = build_full(&r);
  r.w[9] = 1u << 20;
  assert_int_equal(parse_exact(&f, &r, size, ips, 8, &s, &keep), -EINVAL);
  free(keep);
  /* A stack size past the record's end. */
  size = build_full(&r);
  r.w[size / 8 - 6] = 1u << 16;
  assert_int_equal(parse_exact(&f, &r, size, ips, 8, &s, &keep), -EINVAL);
  free(keep);
  /* A raw size that misaligns what follows. */
  size = build_full(&r);
  uint32_t odd = 13;
  memcpy(&r.w[15], &odd, 4);
  assert_int_equal(parse_exact(&f, &r, size, ips, 8, &s, &keep), -EINVAL);
  free(keep);
  /* Fields the parser cannot step over. */
  size = build_full(&r);
  ember__perf_format_t bad = {ALL_TYPES | PERF_SAMPLE_READ, REGS};
  assert_int_equal(parse_exact(&bad, &r, size, ips, 8, &s, &keep), -EINVAL);
  free(keep);
}

/* --- the ring walker --- */

typedef struct seen {
  uint32_t n;
  uint64_t pids[64];
  uint64_t stack_sizes[64];
} seen_t;

static void on_sample(void *ctx, const ember__raw_sample_t *s) {
  seen_t *v = ctx;
  if (v->n < 64) {
    v->pids[v->n] = s->pid;
    v->stack_sizes[v->n] = s->stack_size;
  }
  v->n++;
}

#define RING_PAGE 4096
#define RING_DATA (2 * RING_PAGE)

typedef struct fake_ring {
  unsigned char *mem;
  ember__perf_ring_t ring;
  uint64_t head;
} fake_ring_t;

static void ring_init(fake_ring_t *f) {
  f->mem = aligned_alloc(RING_PAGE, RING_PAGE + RING_DATA);
  assert_non_null(f->mem);
  memset(f->mem, 0, RING_PAGE + RING_DATA);
  f->ring = (ember__perf_ring_t){f->mem, RING_PAGE, RING_DATA};
  f->head = 0;
}

/* Append a record at head, wrapping like the kernel. */
static void ring_put(fake_ring_t *f, const void *rec, size_t size) {
  unsigned char *data = f->mem + RING_PAGE;
  for (size_t i = 0; i < size; i++)
    data[(f->head + i) % RING_DATA] = ((const unsigned char *)rec)[i];
  f->head += size;
  struct perf_event_mmap_page *meta = (void *)f->mem;
  meta->data_head = f->head;
}

static size_t build_sample(rec_t *r, uint32_t pid, uint64_t stack) {
  rec_start(r, PERF_RECORD_SAMPLE);
  put2(r, pid, pid);
  put(r, 1);
  put(r, 0x1000 + pid);
  put(r, PERF_SAMPLE_REGS_ABI_64);
  put(r, 1);
  put(r, 2);
  put(r, 3);
  put(r, stack);
  for (uint64_t i = 0; i < stack / 8; i++) put(r, i);
  if (stack) put(r, stack);
  return rec_end(r);
}

/* Stack copies for CFI unwinding: what the attr asks for, the registers
 * read back by mask, and rings sized for the copies. */
static void test_perf_user_stacks(void **state) {
  (void)state;
  struct perf_event_attr a = {.sample_type = PERF_SAMPLE_CALLCHAIN};
  ember__perf_want_stack(&a, 0);
  assert_int_equal(a.sample_type, PERF_SAMPLE_CALLCHAIN);
  ember__perf_want_stack(&a, 100000);
  assert_true(a.sample_type & PERF_SAMPLE_REGS_USER);
  assert_true(a.sample_type & PERF_SAMPLE_STACK_USER);
  assert_int_equal(a.sample_stack_user, EMBER__PERF_STACK_MAX);
  assert_int_equal(a.exclude_callchain_user, 1);
  ember__perf_want_stack(&a, 16387);
  assert_int_equal(a.sample_stack_user, 16384);

  uint64_t regs[3] = {0xb0, 0x5000, 0x401000}; /* bp, sp, ip: mask order */
  ember__raw_sample_t s = {.regs_abi = PERF_SAMPLE_REGS_ABI_64,
                           .regs = regs,
                           .nregs = 3,
                           .regs_mask = a.sample_regs_user};
  uint64_t ip, sp, bp;
  assert_true(ember__perf_user_regs(&s, &ip, &sp, &bp));
  assert_int_equal(ip, 0x401000);
  assert_int_equal(sp, 0x5000);
  assert_int_equal(bp, 0xb0);
  /* A kernel thread has no user registers; another mask is not ours. */
  s.regs_abi = PERF_SAMPLE_REGS_ABI_NONE;
  assert_false(ember__perf_user_regs(&s, &ip, &sp, &bp));
  s.regs_abi = PERF_SAMPLE_REGS_ABI_64;
  s.regs_mask = 1;
  assert_false(ember__perf_user_regs(&s, &ip, &sp, &bp));

  assert_int_equal(ember__perf_ring_pages_for(19, 16384, 4096, 8), 128);
  assert_int_equal(ember__perf_ring_pages_for(1000, 16384, 4096, 8), 1024);
  assert_int_equal(ember__perf_ring_pages_for(1, 512, 4096, 16), 16);
}

static void test_perf_ring_drain_wraps(void **state) {
  (void)state;
  fake_ring_t f;
  ring_init(&f);
  ember__perf_format_t fmt = {PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER |
                                  PERF_SAMPLE_STACK_USER,
                              REGS};
  uint64_t *scratch = malloc(EMBER__PERF_SCRATCH);
  uint64_t ips[EMBER__PERF_MAX_CHAIN];
  seen_t seen = {0};
  ember__perf_counts_t counts = {0};
  ember__perf_reader_t rd = {fmt, on_sample, &seen, &counts, scratch, ips};
  struct perf_event_mmap_page *meta = (void *)f.mem;

  /* Fill past the end several times over, draining as the agent does:
   * samples of growing stack copies straddle the end at every offset. */
  uint32_t sent = 0;
  for (uint32_t round = 0; round < 40; round++) {
    for (int k = 0; k < 3; k++) {
      rec_t r;
      size_t size = build_sample(&r, ++sent, (uint64_t)((round * 3 + (uint32_t)k) % 60) * 8);
      ring_put(&f, r.w, size);
    }
    ember__perf_ring_drain(&rd, &f.ring);
    assert_int_equal(meta->data_tail, f.head);
  }
  assert_int_equal(seen.n, sent);
  assert_int_equal(counts.samples, sent);
  for (uint32_t i = 0; i < 64; i++) {
    assert_int_equal(seen.pids[i], i + 1);
    assert_int_equal(seen.stack_sizes[i], (uint64_t)(i % 60) * 8);
  }
  assert_int_equal(counts.bad_records, 0);

  /* A lost record, a throttle, a sample that does not parse (its stack
   * size runs past the record), then more samples: counted, walked on. */
  rec_t r;
  rec_start(&r, PERF_RECORD_LOST);
  put(&r, 0);
  put(&r, 17);
  size_t size = rec_end(&r);
  ring_put(&f, r.w, size);
  rec_start(&r, PERF_RECORD_THROTTLE);
  put(&r, 0);
  put(&r, 0);
  put(&r, 0);
  size = rec_end(&r);
  ring_put(&f, r.w, size);
  size = build_sample(&r, 999, 16);
  r.w[8] = 4096; /* stack size */
  ring_put(&f, r.w, size);
  size = build_sample(&r, 1000, 8);
  ring_put(&f, r.w, size);
  ember__perf_ring_drain(&rd, &f.ring);
  assert_int_equal(counts.lost, 17);
  assert_int_equal(counts.throttles, 1);
  assert_int_equal(counts.bad_records, 1);
  assert_int_equal(seen.n, sent + 1);

  /* A corrupt record size drops the rest of the ring, once. */
  rec_start(&r, PERF_RECORD_SAMPLE);
  size = rec_end(&r);
  struct perf_event_header h = {.type = PERF_RECORD_SAMPLE, .size = 4};
  memcpy(r.w, &h, sizeof h);
  ring_put(&f, r.w, 8);
  size = build_sample(&r, 1001, 0);
  ring_put(&f, r.w, size);
  ember__perf_ring_drain(&rd, &f.ring);
  assert_int_equal(counts.bad_records, 2);
  assert_int_equal(seen.n, sent + 1);
  assert_int_equal(meta->data_tail, f.head);

  /* An unmapped ring is a no-op. */
  ember__perf_ring_t none = {0};
  ember__perf_ring_drain(&rd, &none);
  ember__perf_ring_unmap(&none);
  free(scratch);
  free(f.mem);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_perf_parse_all_fields),
      cmocka_unit_test(test_perf_parse_identifier_and_layout),
      cmocka_unit_test(test_perf_parse_regs_abi_none_and_empty_stack),
      cmocka_unit_test(test_perf_parse_truncated),
      cmocka_unit_test(test_perf_parse_inconsistent_lengths),
      cmocka_unit_test(test_perf_ring_drain_wraps),
      cmocka_unit_test(test_perf_user_stacks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
