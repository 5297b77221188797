/* The unwind table builder (agent/cfi.c): tables of real binaries (this
 * test, python3, libc, the vdso from memory), the CFA programs of
 * hand-made .eh_frame/.debug_frame sections row by row, the bounds, and
 * corrupt input (mutated, cut and random sections, failed allocations). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cmocka.h>

#include "cfi.h"
#include "ember/ember.h"
#include "safefile.h"

/* ---- real binaries ------------------------------------------------------ */

static Elf *open_elf(const char *path, int *fd) {
  ember__safe_opts_t o = {.follow = true};
  *fd = ember__safe_openat(AT_FDCWD, path, &o, NULL);
  if (*fd < 0) return NULL;
  assert_int_not_equal(elf_version(EV_CURRENT), EV_NONE);
  Elf *e = elf_begin(*fd, ELF_C_READ_MMAP, NULL);
  assert_non_null(e);
  return e;
}

/* Rows strictly sorted, each covering a non-empty range. */
static void check_sorted(const ember__cfi_table_t *t) {
  size_t n = ember__cfi_count(t);
  assert_true(n > 0);
  uint64_t prev_end = 0;
  for (size_t i = 0; i < n; i++) {
    ember__cfi_rule_t r;
    assert_int_equal(ember__cfi_row(t, i, &r), 0);
    assert_true(r.start < r.end);
    if (i > 0) assert_true(r.start == prev_end);
    prev_end = r.end;
  }
  ember__cfi_rule_t r;
  assert_int_equal(ember__cfi_row(t, n, &r), EMBER_ENOTFOUND);
}

/* Look up every function symbol's entry: CFA = rsp + 8 and the return
 * address at CFA - 8 (or undefined: _start). Returns how many matched of
 * how many had an FDE. */
static void check_entries(Elf *e, const ember__cfi_table_t *t, const char *what) {
  size_t funcs = 0, covered = 0, good = 0;
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(e, scn)) != NULL) {
    GElf_Shdr sh;
    assert_non_null(gelf_getshdr(scn, &sh));
    if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    assert_non_null(d);
    size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
    for (size_t i = 0; i < n; i++) {
      GElf_Sym sym;
      if (gelf_getsym(d, (int)i, &sym) == NULL) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_value == 0 || sym.st_size == 0) continue;
      /* GCC's split-off cold parts start inside their function's frame. */
      const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
      if (name != NULL && strstr(name, ".cold") != NULL) continue;
      funcs++;
      ember__cfi_rule_t r;
      if (ember__cfi_find(t, sym.st_value, &r) != 0) continue;
      covered++;
      assert_true(r.start <= sym.st_value && sym.st_value < r.end);
      if (r.cfa == EMBER__CFA_RSP && r.cfa_off == 8 && (r.ra_undefined || r.ra_off == -8) &&
          !r.rbp_saved)
        good++;
    }
  }
  printf("%s: %zu function symbols, %zu with an FDE, %zu with CFA=rsp+8 RA=CFA-8 at entry\n", what,
         funcs, covered, good);
  assert_true(funcs > 0);
  /* Functions without CFI (a few hand-written ones) are allowed, but an
   * FDE that disagrees with the psABI at a function's entry is a bug. */
  assert_true(covered * 100 >= funcs * 90);
  assert_true(good * 1000 >= covered * 995);
}

static void table_of_file(const char *path, const char *what) {
  int fd;
  Elf *e = open_elf(path, &fd);
  if (e == NULL) {
    printf("%s (%s) not readable here: skipped\n", what, path);
    skip();
  }
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = NULL;
  /* Twice: the first builds warm the page cache, the second is timed. */
  assert_int_equal(ember__cfi_build(e, NULL, &st, &t), 0);
  ember__cfi_free(t);
  t = NULL;
  assert_int_equal(ember__cfi_build(e, NULL, &st, &t), 0);
  printf("%s (%s): %zu FDEs (%zu from .debug_frame), %zu rows, %zu bytes (%.1f KiB), "
         "built in %.2f ms; dropped: entry %zu cie %zu enc %zu insn %zu overlap %zu limit %zu; "
         "unknown rows %zu\n",
         what, path, st.fdes, st.debug_fdes, st.rows, st.bytes, (double)st.bytes / 1024.0,
         (double)st.build_ns / 1e6, st.bad_entry, st.bad_cie, st.bad_encoding, st.bad_insn,
         st.overlaps, st.limited, st.unknown_rows);
  assert_int_equal(ember__cfi_bytes(t), st.bytes);
  assert_int_equal(ember__cfi_count(t), st.rows);
  assert_true(st.bytes <= 64 + 12 * st.rows);
  check_sorted(t);
  check_entries(e, t, what);
  ember__cfi_free(t);
  elf_end(e);
  close(fd);
}

static void test_cfi_table_of_this_test(void **state) {
  (void)state;
  table_of_file("/proc/self/exe", "this test");
}

static void test_cfi_table_of_python3(void **state) {
  (void)state;
  char real[PATH_MAX];
  if (realpath("/usr/bin/python3", real) == NULL) {
    printf("no /usr/bin/python3: skipped\n");
    skip();
  }
  table_of_file(real, "python3");
}

static int find_libc(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  if (strstr(info->dlpi_name, "/libc.so.6") == NULL) return 0;
  snprintf(data, PATH_MAX, "%s", info->dlpi_name);
  return 1;
}

static void test_cfi_table_of_libc(void **state) {
  (void)state;
  char path[PATH_MAX] = "";
  assert_int_equal(dl_iterate_phdr(find_libc, path), 1);
  table_of_file(path, "libc");
}

/* The vdso, from memory as the agent would read it from a process. */
static void test_cfi_table_of_vdso_in_memory(void **state) {
  (void)state;
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) skip();
  FILE *fp = fopen("/proc/self/maps", "r");
  assert_non_null(fp);
  char line[512];
  size_t size = 0;
  while (fgets(line, sizeof line, fp) != NULL) {
    unsigned long lo, hi;
    if (strstr(line, "[vdso]") != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo == base)
      size = hi - lo;
  }
  fclose(fp);
  assert_true(size > 0);
  assert_int_not_equal(elf_version(EV_CURRENT), EV_NONE);
  char *copy = malloc(size);
  assert_non_null(copy);
  memcpy(copy, (const void *)base, size);
  Elf *e = elf_memory(copy, size);
  assert_non_null(e);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = NULL;
  assert_int_equal(ember__cfi_build(e, NULL, &st, &t), 0);
  printf("vdso: %zu FDEs, %zu rows, %zu bytes, %.3f ms\n", st.fdes, st.rows, st.bytes,
         (double)st.build_ns / 1e6);
  check_sorted(t);
  check_entries(e, t, "vdso");
  ember__cfi_free(t);
  elf_end(e);
  free(copy);
}

/* ---- hand-made sections ------------------------------------------------- */

typedef struct sec {
  uint8_t b[8192];
  size_t n;
  uint64_t vaddr; /* where the section is loaded (pcrel base) */
} sec_t;

static void put(sec_t *s, const void *p, size_t n) {
  if (n == 0) return;
  assert_true(s->n + n <= sizeof s->b);
  memcpy(s->b + s->n, p, n);
  s->n += n;
}
static void u8(sec_t *s, uint8_t v) { put(s, &v, 1); }
static void u32at(sec_t *s, size_t at, uint32_t v) { memcpy(s->b + at, &v, 4); }
static void u32(sec_t *s, uint32_t v) { put(s, &v, 4); }
static void u64(sec_t *s, uint64_t v) { put(s, &v, 8); }
static void uleb(sec_t *s, uint64_t v) {
  do {
    uint8_t byte = v & 0x7f;
    v >>= 7;
    if (v) byte |= 0x80;
    u8(s, byte);
  } while (v);
}
static void sleb(sec_t *s, int64_t v) {
  for (;;) {
    uint8_t byte = (uint8_t)(v & 0x7f);
    v >>= 7;
    bool done = (v == 0 && !(byte & 0x40)) || (v == -1 && (byte & 0x40));
    if (!done) byte |= 0x80;
    u8(s, byte);
    if (done) return;
  }
}

/* The usual x86-64 CIE program: CFA = rsp + 8, RA at CFA - 8. */
static const uint8_t cie_init[] = {0x0c, 7, 8, 0x90, 1};

/* An .eh_frame CIE with augmentation `aug` ("zR", "zRS", ""...), FDE
 * pointers pcrel|sdata4 when 'R'. Returns its offset. */
static size_t eh_cie(sec_t *s, const char *aug, uint8_t version, const uint8_t *insn, size_t n) {
  size_t at = s->n;
  u32(s, 0); /* length, patched */
  u32(s, 0); /* CIE id */
  u8(s, version);
  put(s, aug, strlen(aug) + 1);
  uleb(s, 1);
  sleb(s, -8);
  if (version == 1)
    u8(s, 16);
  else
    uleb(s, 16);
  if (aug[0] == 'z') {
    size_t len = 0;
    for (const char *a = aug + 1; *a; a++) len += *a == 'R';
    uleb(s, len);
    for (const char *a = aug + 1; *a; a++)
      if (*a == 'R') u8(s, 0x1b);
  }
  put(s, insn, n);
  u32at(s, at, (uint32_t)(s->n - at - 4));
  return at;
}

static void eh_fde(sec_t *s, size_t cie, uint64_t begin, uint32_t range, const uint8_t *insn,
                   size_t n) {
  size_t at = s->n;
  u32(s, 0);
  u32(s, (uint32_t)(s->n - cie));
  int64_t rel = (int64_t)(begin - (s->vaddr + s->n));
  u32(s, (uint32_t)(int32_t)rel);
  u32(s, range);
  uleb(s, 0); /* 'z' augmentation data */
  put(s, insn, n);
  u32at(s, at, (uint32_t)(s->n - at - 4));
}

static ember__cfi_table_t *build_eh(const sec_t *s, ember__cfi_stats_t *st) {
  ember__cfi_table_t *t = NULL;
  int rc = ember__cfi_build_sections(s->b, s->n, s->vaddr, NULL, 0, NULL, st, &t);
  assert_int_equal(rc, 0);
  check_sorted(t);
  return t;
}

static ember__cfi_rule_t at(const ember__cfi_table_t *t, uint64_t pc) {
  ember__cfi_rule_t r;
  assert_int_equal(ember__cfi_find(t, pc, &r), 0);
  return r;
}

static void expect_rsp(const ember__cfi_table_t *t, uint64_t pc, int32_t off) {
  ember__cfi_rule_t r = at(t, pc);
  assert_int_equal(r.cfa, EMBER__CFA_RSP);
  assert_int_equal(r.cfa_off, off);
  assert_int_equal(r.ra_off, -8);
}

static void test_cfi_refuses_non_elf_and_no_cfi(void **state) {
  (void)state;
  assert_int_not_equal(elf_version(EV_CURRENT), EV_NONE);
  char junk[256] = "not an ELF file at all";
  Elf *e = elf_memory(junk, sizeof junk);
  ember__cfi_table_t *t = (ember__cfi_table_t *)0x1;
  ember__cfi_stats_t st;
  if (e != NULL) {
    assert_int_equal(ember__cfi_build(e, NULL, &st, &t), EMBER_ECORRUPT);
    elf_end(e);
  }
  assert_ptr_equal(t, (ember__cfi_table_t *)0x1); /* untouched on failure */
  assert_int_equal(ember__cfi_build(NULL, NULL, NULL, &t), -EINVAL);
  assert_int_equal(ember__cfi_build_sections(NULL, 0, 0, NULL, 0, NULL, &st, &t), EMBER_ENOTFOUND);
  assert_int_equal(ember__cfi_find(NULL, 0, NULL), EMBER_ENOTFOUND);
  /* A stub library's .eh_frame: just the terminator, or CIEs only. */
  static const uint8_t terminator[4] = {0};
  assert_int_equal(ember__cfi_build_sections(terminator, 4, 0x1000, NULL, 0, NULL, &st, &t),
                   EMBER_ENOTFOUND);
  sec_t s = {.vaddr = 0x1000};
  (void)eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  assert_int_equal(ember__cfi_build_sections(s.b, s.n, s.vaddr, NULL, 0, NULL, &st, &t),
                   EMBER_ENOTFOUND);
  assert_ptr_equal(t, (ember__cfi_table_t *)0x1);
  ember__cfi_free(NULL);
}

/* push rbp; mov rbp,rsp; ...; leave/ret, as GCC writes its CFI, with
 * remember/restore_state around an early return. */
static void test_cfi_frame_pointer_function(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x2000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  const uint8_t fde[] = {
      0x41,          /* advance 1 (push rbp)        -> 0x401001 */
      0x0e, 16,      /* def_cfa_offset 16 */
      0x86, 2,       /* rbp at CFA - 16 */
      0x43,          /* advance 3 (mov rbp, rsp)    -> 0x401004 */
      0x0d, 6,       /* def_cfa_register rbp */
      0x4a,          /* advance 10                  -> 0x40100e */
      0x0a,          /* remember_state */
      0x0c, 7,    8, /* def_cfa rsp+8 (leave) */
      0xc6,          /* restore rbp */
      0x41,          /* advance 1 (ret)             -> 0x40100f */
      0x0b,          /* restore_state */
      0x02, 0x11,    /* advance_loc1 17             -> 0x401020 */
      0x2e, 16,      /* GNU_args_size: ignored */
      0x00,          /* nop */
  };
  eh_fde(&s, cie, 0x401000, 0x40, fde, sizeof fde);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = build_eh(&s, &st);
  assert_int_equal(st.fdes, 1);
  assert_int_equal(st.cies, 1);
  expect_rsp(t, 0x401000, 8);
  ember__cfi_rule_t r = at(t, 0x401001);
  assert_int_equal(r.cfa, EMBER__CFA_RSP);
  assert_int_equal(r.cfa_off, 16);
  assert_true(r.rbp_saved);
  assert_int_equal(r.rbp_off, -16);
  r = at(t, 0x401004);
  assert_int_equal(r.cfa, EMBER__CFA_RBP);
  assert_int_equal(r.cfa_off, 16);
  assert_int_equal(r.start, 0x401004);
  assert_int_equal(r.end, 0x40100e);
  r = at(t, 0x40100e);
  assert_int_equal(r.cfa, EMBER__CFA_RSP);
  assert_int_equal(r.cfa_off, 8);
  assert_false(r.rbp_saved);
  /* restore_state brings back the CFA rule too, and the rows after it
   * equal the rows before the epilogue: merged into one. */
  r = at(t, 0x40100f);
  assert_int_equal(r.cfa, EMBER__CFA_RBP);
  assert_true(r.rbp_saved);
  assert_int_equal(r.end, 0x401040);
  assert_int_equal(ember__cfi_find(t, 0x401040, &r), EMBER_ENOTFOUND);
  assert_int_equal(ember__cfi_find(t, 0x400fff, &r), EMBER_ENOTFOUND);
  assert_int_equal(ember__cfi_count(t), 5);
  ember__cfi_free(t);
}

/* Two FDEs with a gap, a PLT, an unknown expression, a signal trampoline
 * ('S'), _start (RA undefined), a version 3 CIE. */
static void test_cfi_row_kinds_and_gaps(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x3000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  size_t sig = eh_cie(&s, "zRS", 3, cie_init, sizeof cie_init);
  /* .plt: push/jmp pairs; binutils' expression with lit11. */
  const uint8_t plt[] = {0x0e, 16, 0x46, 0x0e, 24,   0x4a, 0x0f, 11,   0x77, 8,
                         0x80, 0,  0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22};
  eh_fde(&s, cie, 0x400000, 0x100, plt, sizeof plt);
  const uint8_t expr[] = {0x41, 0x0f, 2, 0x76, 0x10, 0x41, 0x10, 6, 2, 0x76, 0, 0x0c, 7, 8};
  eh_fde(&s, cie, 0x401000, 0x10, expr, sizeof expr);
  const uint8_t start[] = {0x07, 16};
  eh_fde(&s, cie, 0x401010, 0x10, start, sizeof start);
  eh_fde(&s, sig, 0x402000, 0x20, NULL, 0);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = build_eh(&s, &st);
  assert_int_equal(st.fdes, 4);
  ember__cfi_rule_t r = at(t, 0x400000);
  assert_int_equal(r.cfa_off, 16);
  r = at(t, 0x400006);
  assert_int_equal(r.cfa_off, 24);
  r = at(t, 0x400010);
  assert_int_equal(r.cfa, EMBER__CFA_PLT);
  assert_int_equal(r.cfa_off, 11);
  assert_int_equal(r.ra_off, -8);
  r = at(t, 0x4000ff);
  assert_int_equal(r.cfa, EMBER__CFA_PLT);
  /* The gap between the PLT and the next FDE has no info. */
  assert_int_equal(ember__cfi_find(t, 0x400100, &r), EMBER_ENOTFOUND);
  assert_int_equal(ember__cfi_find(t, 0x400fff, &r), EMBER_ENOTFOUND);
  expect_rsp(t, 0x401000, 8);
  r = at(t, 0x401001);
  assert_int_equal(r.cfa, EMBER__CFA_UNKNOWN);
  assert_int_equal(st.unknown_rows, 1);
  /* CFA back to rsp+8 with an rbp expression: rbp lost, CFA followable. */
  r = at(t, 0x401002);
  assert_int_equal(r.cfa, EMBER__CFA_RSP);
  assert_true(r.rbp_lost);
  r = at(t, 0x401010);
  assert_true(r.ra_undefined);
  r = at(t, 0x402000);
  assert_true(r.signal);
  assert_int_equal(r.cfa_off, 8);
  ember__cfi_free(t);
}

static void test_cfi_rbp_expression_is_lost(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x1000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  const uint8_t insn[] = {0x10, 6, 2, 0x76, 0, 0x41, 0x08, 6, 0x41, 0x09, 6, 3};
  eh_fde(&s, cie, 0x5000, 0x10, insn, sizeof insn);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = build_eh(&s, &st);
  assert_true(at(t, 0x5000).rbp_lost);
  assert_false(at(t, 0x5001).rbp_lost); /* same_value */
  assert_true(at(t, 0x5002).rbp_lost);  /* register */
  ember__cfi_free(t);
}

/* Factored offsets too big for a row (found by fuzz_cfi as a signed
 * overflow): the row is unknown, nothing overflows. */
static void test_cfi_huge_offsets_make_unknown_rows(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x1000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  /* RA at factor 2^62, then CFA offset_sf of factor 2^62. */
  const uint8_t ra[] = {0x90, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40};
  eh_fde(&s, cie, 0x5000, 0x10, ra, sizeof ra);
  const uint8_t cfa[] = {0x13, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x40};
  eh_fde(&s, cie, 0x5010, 0x10, cfa, sizeof cfa);
  const uint8_t rbp[] = {0x86, 0xff, 0xff, 0xff, 0xff, 0x0f};
  eh_fde(&s, cie, 0x5020, 0x10, rbp, sizeof rbp);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = build_eh(&s, &st);
  assert_int_equal(at(t, 0x5000).cfa, EMBER__CFA_UNKNOWN);
  assert_int_equal(at(t, 0x5010).cfa, EMBER__CFA_UNKNOWN);
  assert_true(at(t, 0x5020).rbp_lost);
  assert_int_equal(at(t, 0x5020).cfa, EMBER__CFA_RSP);
  assert_int_equal(st.unknown_rows, 2);
  ember__cfi_free(t);
}

/* A .debug_frame (CIE version 4, absolute addresses) covering an FDE of
 * .eh_frame and one more: .eh_frame wins where both cover a pc. */
static void test_cfi_debug_frame_fills_gaps(void **state) {
  (void)state;
  sec_t eh = {.vaddr = 0x1000};
  size_t cie = eh_cie(&eh, "zR", 1, cie_init, sizeof cie_init);
  const uint8_t insn[] = {0x41, 0x0e, 16};
  eh_fde(&eh, cie, 0x401000, 0x10, insn, sizeof insn);
  sec_t dbg = {0};
  static const uint8_t versions[] = {1, 3, 4};
  for (size_t vi = 0; vi < sizeof versions; vi++) {
    uint8_t version = versions[vi];
    dbg.n = 0;
    size_t c = dbg.n;
    u32(&dbg, 0);
    u32(&dbg, 0xffffffffu);
    u8(&dbg, version);
    u8(&dbg, 0); /* augmentation "" */
    if (version == 4) {
      u8(&dbg, 8);
      u8(&dbg, 0);
    }
    uleb(&dbg, 1);
    sleb(&dbg, -8);
    if (version == 1)
      u8(&dbg, 16);
    else
      uleb(&dbg, 16);
    put(&dbg, cie_init, sizeof cie_init);
    u32at(&dbg, c, (uint32_t)(dbg.n - c - 4));
    const uint8_t dinsn[] = {0x41, 0x0e, 32};
    for (int k = 0; k < 3; k++) {
      size_t f = dbg.n;
      u32(&dbg, 0);
      u32(&dbg, (uint32_t)c);
      u64(&dbg, k == 0 ? 0x401000u : k == 1 ? 0x402000u : 0); /* 0: discarded */
      u64(&dbg, 0x10);
      put(&dbg, dinsn, sizeof dinsn);
      u32at(&dbg, f, (uint32_t)(dbg.n - f - 4));
    }
    ember__cfi_stats_t st;
    ember__cfi_table_t *t = NULL;
    assert_int_equal(ember__cfi_build_sections(eh.b, eh.n, eh.vaddr, dbg.b, dbg.n, NULL, &st, &t),
                     0);
    assert_int_equal(st.fdes, 2);
    assert_int_equal(st.debug_fdes, 1);
    assert_int_equal(st.overlaps, 1);
    assert_int_equal(at(t, 0x401001).cfa_off, 16); /* from .eh_frame */
    assert_int_equal(at(t, 0x402001).cfa_off, 32); /* from .debug_frame */
    ember__cfi_rule_t r;
    assert_int_equal(ember__cfi_find(t, 0x401800, &r), EMBER_ENOTFOUND);
    ember__cfi_free(t);
    /* .debug_frame alone. */
    assert_int_equal(ember__cfi_build_sections(NULL, 0, 0, dbg.b, dbg.n, NULL, &st, &t), 0);
    assert_int_equal(st.fdes, 2);
    ember__cfi_free(t);
  }
}

static void test_cfi_bad_programs_are_dropped_and_counted(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x1000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  const uint8_t underflow[] = {0x41, 0x0b};
  eh_fde(&s, cie, 0x10000, 0x10, underflow, sizeof underflow);
  uint8_t overflow[17];
  memset(overflow, 0x0a, sizeof overflow);
  eh_fde(&s, cie, 0x10010, 0x10, overflow, sizeof overflow);
  const uint8_t unknown_op[] = {0x41, 0x3f};
  eh_fde(&s, cie, 0x10020, 0x10, unknown_op, sizeof unknown_op);
  const uint8_t cut_leb[] = {0x0e, 0x80};
  eh_fde(&s, cie, 0x10030, 0x10, cut_leb, sizeof cut_leb);
  const uint8_t good[] = {0x41, 0x0e, 16};
  eh_fde(&s, cie, 0x10040, 0x10, good, sizeof good);
  size_t bad_cie = eh_cie(&s, "zR", 2, cie_init, sizeof cie_init); /* version 2 */
  eh_fde(&s, bad_cie, 0x10050, 0x10, good, sizeof good);
  size_t aug = eh_cie(&s, "eh", 1, cie_init, sizeof cie_init); /* no 'z' */
  eh_fde(&s, aug, 0x10060, 0x10, good, sizeof good);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = build_eh(&s, &st);
  assert_int_equal(st.fdes, 1);
  assert_int_equal(st.bad_insn, 4);
  assert_int_equal(st.bad_cie, 2);
  ember__cfi_rule_t r;
  assert_int_equal(ember__cfi_find(t, 0x10000, &r), EMBER_ENOTFOUND);
  assert_int_equal(at(t, 0x10041).cfa_off, 16);
  ember__cfi_free(t);
}

static void test_cfi_limits(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x1000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  const uint8_t insn[] = {0x41, 0x0e, 16, 0x41, 0x0e, 24, 0x41, 0x0e, 32};
  for (uint64_t i = 0; i < 8; i++) eh_fde(&s, cie, 0x10000 + 0x10 * i, 0x10, insn, sizeof insn);
  ember__cfi_stats_t st;
  ember__cfi_table_t *t = NULL;
  ember__cfi_limits_t lim = {.max_fdes = 3};
  assert_int_equal(ember__cfi_build_sections(s.b, s.n, s.vaddr, NULL, 0, &lim, &st, &t), 0);
  assert_int_equal(st.fdes, 3);
  assert_int_equal(st.limited, 1);
  ember__cfi_free(t);
  lim = (ember__cfi_limits_t){.max_rows = 10};
  assert_int_equal(ember__cfi_build_sections(s.b, s.n, s.vaddr, NULL, 0, &lim, &st, &t), 0);
  assert_int_equal(st.fdes, 2);
  assert_int_equal(st.limited, 1);
  ember__cfi_free(t);
  lim = (ember__cfi_limits_t){.max_insn_bytes = 3 * (sizeof cie_init + sizeof insn)};
  assert_int_equal(ember__cfi_build_sections(s.b, s.n, s.vaddr, NULL, 0, &lim, &st, &t), 0);
  assert_int_equal(st.fdes, 3);
  ember__cfi_free(t);
  lim = (ember__cfi_limits_t){.max_section_bytes = s.n - 1};
  assert_int_equal(ember__cfi_build_sections(s.b, s.n, s.vaddr, NULL, 0, &lim, &st, &t),
                   EMBER_ECORRUPT);
  assert_int_equal(st.limited, 1);
}

/* Fail the Nth allocation for every N: an error or a whole table, no leak. */
static void test_cfi_allocation_failures(void **state) {
  (void)state;
  sec_t s = {.vaddr = 0x1000};
  size_t cie = eh_cie(&s, "zR", 1, cie_init, sizeof cie_init);
  const uint8_t insn[] = {0x41, 0x0e, 16};
  for (uint64_t i = 0; i < 300; i++) eh_fde(&s, cie, 0x10000 + 0x10 * i, 0x10, insn, sizeof insn);
  for (long n = 0;; n++) {
    ember__cfi_table_t *t = NULL;
    ember_alloc_fail_after(n);
    int rc = ember__cfi_build_sections(s.b, s.n, s.vaddr, NULL, 0, NULL, NULL, &t);
    ember_alloc_fail_reset();
    if (rc == 0) {
      assert_int_equal(ember__cfi_count(t), 600);
      ember__cfi_free(t);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
    assert_null(t);
    assert_true(n < 100);
  }
}

/* ---- hostile bytes ------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void build_any(const uint8_t *p, size_t n, bool debug) {
  ember__cfi_table_t *t = NULL;
  ember__cfi_stats_t st;
  ember__cfi_limits_t lim = {.max_rows = 1u << 16, .max_fdes = 1u << 14};
  int rc = debug ? ember__cfi_build_sections(NULL, 0, 0, p, n, &lim, &st, &t)
                 : ember__cfi_build_sections(p, n, 0x1000, NULL, 0, &lim, &st, &t);
  if (rc == 0) {
    check_sorted(t);
    for (int i = 0; i < 64; i++) {
      ember__cfi_rule_t r;
      (void)ember__cfi_find(t, next_rand() % (1u << 24), &r);
    }
    ember__cfi_free(t);
  } else {
    assert_true(rc == EMBER_ECORRUPT || rc == EMBER_ENOTFOUND);
    assert_null(t);
  }
}

static void test_cfi_corrupt_sections_never_crash(void **state) {
  (void)state;
  char path[PATH_MAX] = "";
  assert_int_equal(dl_iterate_phdr(find_libc, path), 1);
  int fd;
  Elf *e = open_elf(path, &fd);
  assert_non_null(e);
  size_t shstrndx;
  assert_int_equal(elf_getshdrstrndx(e, &shstrndx), 0);
  Elf_Scn *scn = NULL;
  uint8_t *eh = NULL;
  size_t n = 0;
  while ((scn = elf_nextscn(e, scn)) != NULL) {
    GElf_Shdr sh;
    assert_non_null(gelf_getshdr(scn, &sh));
    if (strcmp(elf_strptr(e, shstrndx, sh.sh_name), ".eh_frame") != 0) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    assert_non_null(d);
    /* The first 64 KiB keep the test quick under sanitizers. */
    n = d->d_size < 65536 ? d->d_size : 65536;
    eh = malloc(n);
    assert_non_null(eh);
    memcpy(eh, d->d_buf, n);
  }
  elf_end(e);
  close(fd);
  assert_non_null(eh);
  uint8_t *m = malloc(n);
  assert_non_null(m);
  /* Cut at every 97th byte. */
  for (size_t cut = 0; cut < n && cut < 8192; cut += 97) build_any(eh, cut, false);
  /* Flip a few bytes, as .eh_frame and as .debug_frame. */
  for (int round = 0; round < 200; round++) {
    memcpy(m, eh, n);
    int flips = 1 + (int)(next_rand() % 8);
    for (int i = 0; i < flips; i++) m[next_rand() % n] = (uint8_t)next_rand();
    build_any(m, n, round % 4 == 3);
  }
  /* Random bytes. */
  for (int round = 0; round < 200; round++) {
    size_t len = (size_t)(next_rand() % 512);
    for (size_t i = 0; i < len; i++) m[i] = (uint8_t)next_rand();
    build_any(m, len, round % 2 == 1);
  }
  free(m);
  free(eh);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cfi_table_of_this_test),
      cmocka_unit_test(test_cfi_table_of_python3),
      cmocka_unit_test(test_cfi_table_of_libc),
      cmocka_unit_test(test_cfi_table_of_vdso_in_memory),
      cmocka_unit_test(test_cfi_refuses_non_elf_and_no_cfi),
      cmocka_unit_test(test_cfi_frame_pointer_function),
      cmocka_unit_test(test_cfi_row_kinds_and_gaps),
      cmocka_unit_test(test_cfi_rbp_expression_is_lost),
      cmocka_unit_test(test_cfi_huge_offsets_make_unknown_rows),
      cmocka_unit_test(test_cfi_debug_frame_fills_gaps),
      cmocka_unit_test(test_cfi_bad_programs_are_dropped_and_counted),
      cmocka_unit_test(test_cfi_limits),
      cmocka_unit_test(test_cfi_allocation_failures),
      cmocka_unit_test(test_cfi_corrupt_sections_never_crash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
