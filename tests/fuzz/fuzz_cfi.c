/* libFuzzer target for the unwind table builder (agent/cfi.c) and the
 * unwinder (agent/unwind.c).
 *
 * An input starting with the ELF magic is a whole image read with
 * elf_memory (as the vdso is). Any other input is a mode byte and a section
 * image: bit 0 picks .debug_frame rather than .eh_frame, bit 1 gives the
 * same bytes as both sections (so the overlap rules run); the section is
 * loaded at a fixed vaddr. Small limits make the bounds fire on short
 * inputs. Then: the rows are checked (sorted, non-empty, within the
 * table), pcs taken from the input and from the rows are looked up, and
 * the stack is unwound from several pcs over a fixed fake stack whose words
 * point into the stack and into the table. Whatever the bytes: no crash,
 * leak, hang or undefined behaviour. */
#include <libelf.h>
#include <stdlib.h>
#include <string.h>

#include "cfi.h"
#include "unwind.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define BASE  0x10000u
#define STACK 0x7ffd00000000u
#define WORDS 128

static void check_rows(const ember__cfi_table_t *t, const ember__cfi_limits_t *lim) {
  size_t n = ember__cfi_count(t);
  if (n == 0 || n > lim->max_rows + lim->max_fdes + 1) abort();
  uint64_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    ember__cfi_rule_t r;
    if (ember__cfi_row(t, i, &r) != 0 || r.start >= r.end) abort();
    if (i > 0 && r.start != prev) abort();
    prev = r.end;
    ember__cfi_rule_t f;
    if (ember__cfi_find(t, r.start, &f) == 0 && (f.start != r.start || f.end != r.end)) abort();
  }
}

typedef struct ctx {
  const ember__cfi_table_t *t;
} ctx_t;

static int lookup(void *c, uint64_t pc, const ember__cfi_table_t **t, uint64_t *bias) {
  const ctx_t *x = c;
  /* Half of the address space has no table: the frame-pointer path. */
  if (pc & (1ull << 40)) return 1;
  /* And a slice where the caller allows no frame-pointer step. */
  if (pc & (1ull << 39)) return -1;
  *t = x->t;
  *bias = 0;
  return 0;
}

static void unwind_from(const ember__cfi_table_t *t, uint64_t ip) {
  static uint64_t stack[WORDS];
  static int ready;
  if (!ready) {
    /* Words that point into the stack (frame pointers), at it, into the
     * table's range (return addresses), to no table, and zeros. */
    uint64_t x = 0x2545f4914f6cdd1du;
    for (size_t i = 0; i < WORDS; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      switch (x % 5) {
      case 0: stack[i] = STACK + 8 * ((x >> 8) % (WORDS + 4)); break;
      case 1: stack[i] = BASE + (x >> 8) % 0x4000; break;
      case 2: stack[i] = (1ull << 40) | ((x >> 8) & 0xffff); break;
      case 3: stack[i] = 0; break;
      default: stack[i] = x; break;
      }
    }
    ready = 1;
  }
  ctx_t c = {.t = t};
  ember__unwind_regs_t regs = {.ip = ip, .sp = STACK, .bp = STACK + 64};
  uint64_t ips[64];
  ember__unwind_out_t out;
  ember__unwind_result_t res =
      ember__unwind(&regs, (const uint8_t *)stack, sizeof stack, lookup, &c, ips, 64, &out);
  if (res >= EMBER__UNWIND_NRESULTS || out.n == 0 || out.n > 64 || ips[0] != ip) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ember__cfi_limits_t lim = {
      .max_fdes = 256, .max_rows = 2048, .max_insn_bytes = 1u << 16, .max_section_bytes = 1u << 20};
  ember__cfi_table_t *t = NULL;
  ember__cfi_stats_t st;
  int rc;
  if (size >= 4 && memcmp(data, "\177ELF", 4) == 0) {
    if (elf_version(EV_CURRENT) == EV_NONE) return 0;
    /* elf_memory wants a mutable image; a compressed .debug_frame is
     * decompressed into memory libelf allocates, not into the image. */
    char *image = malloc(size);
    if (image == NULL) return 0;
    memcpy(image, data, size);
    Elf *e = elf_memory(image, size);
    rc = e ? ember__cfi_build(e, &lim, &st, &t) : -1;
    if (e) elf_end(e);
    free(image);
  } else {
    if (size == 0) return 0;
    uint8_t mode = data[0];
    const uint8_t *sec = data + 1;
    size_t len = size - 1;
    if (mode & 2)
      rc = ember__cfi_build_sections(sec, len, BASE, sec, len, &lim, &st, &t);
    else if (mode & 1)
      rc = ember__cfi_build_sections(NULL, 0, 0, sec, len, &lim, &st, &t);
    else
      rc = ember__cfi_build_sections(sec, len, BASE, NULL, 0, &lim, &st, &t);
  }
  if (rc != 0) {
    if (t != NULL) abort();
    return 0;
  }
  if (st.fdes > lim.max_fdes || st.bytes != ember__cfi_bytes(t)) abort();
  check_rows(t, &lim);
  ember__cfi_rule_t r;
  for (size_t at = 0; at + 8 <= size && at < 256; at += 8) {
    uint64_t a;
    memcpy(&a, data + at, sizeof a);
    (void)ember__cfi_find(t, a, &r);
    (void)ember__cfi_find(t, BASE + (a & 0xffff), &r);
  }
  (void)ember__cfi_find(t, 0, &r);
  (void)ember__cfi_find(t, UINT64_MAX, &r);
  size_t n = ember__cfi_count(t);
  for (size_t i = 0; i < n && i < 16; i++) {
    if (ember__cfi_row(t, i * (n / 16 + 1) % n, &r) == 0) {
      unwind_from(t, r.start);
      unwind_from(t, r.end - 1);
    }
  }
  ember__cfi_free(t);
  return 0;
}
