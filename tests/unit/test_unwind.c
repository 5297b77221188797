/* The x86-64 unwinder (agent/unwind.c) on real stacks of this process: a
 * chain built -O2 -fomit-frame-pointer (unwind_chain.c), a chain through
 * libc's qsort, a signal handler through __restore_rt; each captured as a
 * perf sample would be (registers and a copy of the stack) and unwound with
 * tables built from the modules' files. Then the stops: a cut copy, the
 * depth cap, the frame-pointer fallback over a synthetic stack (JIT frames,
 * a native frame, JIT again), loops, rows it cannot follow. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <cmocka.h>

#include "cfi.h"
#include "ember/ember.h"
#include "safefile.h"
#include "unit/unwind_chain.h"
#include "unwind.h"

/* The offsets unwind.h uses, against the C library's own definitions. */
_Static_assert(offsetof(ucontext_t, uc_mcontext.gregs) == EMBER__UNWIND_UC_GREGS, "gregs");
_Static_assert(REG_RBP == 10 && REG_RSP == 15 && REG_RIP == 16, "greg indexes");

/* ---- the modules of this process ---------------------------------------- */

typedef struct mod {
  uint64_t lo, hi, bias; /* executable range */
  ember__cfi_table_t *t;
  char path[PATH_MAX];
} mod_t;

static mod_t mods[64];
static size_t nmods;
static uint64_t exe_bias;

static void stack_and_vdso(uint64_t *top, uint64_t *vdso_size) {
  FILE *fp = fopen("/proc/self/maps", "r");
  assert_non_null(fp);
  char line[512];
  uint64_t here = (uint64_t)(uintptr_t)&line;
  while (fgets(line, sizeof line, fp) != NULL) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    if (lo <= here && here < hi) *top = hi;
    if (strstr(line, "[vdso]") != NULL) *vdso_size = hi - lo;
  }
  fclose(fp);
}

static ember__cfi_table_t *table_of(const char *path, uint64_t vdso_size) {
  ember__cfi_table_t *t = NULL;
  Elf *e = NULL;
  int fd = -1;
  char *image = NULL;
  if (strstr(path, "vdso") != NULL) {
    uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == 0 || vdso_size == 0) return NULL;
    image = malloc(vdso_size);
    assert_non_null(image);
    memcpy(image, (const void *)base, vdso_size);
    e = elf_memory(image, vdso_size);
  } else {
    ember__safe_opts_t o = {.follow = true};
    fd = ember__safe_openat(AT_FDCWD, path, &o, NULL);
    if (fd >= 0) e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  }
  if (e != NULL) {
    ember__cfi_stats_t st;
    if (ember__cfi_build(e, NULL, &st, &t) != 0) t = NULL;
    elf_end(e);
  }
  if (fd >= 0) close(fd);
  free(image);
  return t;
}

static int add_mod(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  uint64_t vdso_size = *(uint64_t *)data;
  if (nmods == sizeof mods / sizeof mods[0]) return 1;
  mod_t *m = &mods[nmods];
  m->lo = UINT64_MAX;
  m->hi = 0;
  m->bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uint64_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (lo < m->lo) m->lo = lo;
    if (hi > m->hi) m->hi = hi;
  }
  if (m->hi == 0) return 0;
  bool exe = info->dlpi_name == NULL || info->dlpi_name[0] == '\0';
  snprintf(m->path, sizeof m->path, "%s", exe ? "/proc/self/exe" : info->dlpi_name);
  if (exe) exe_bias = info->dlpi_addr;
  m->t = table_of(m->path, vdso_size);
  nmods++;
  return 0;
}

static int group_setup(void **state) {
  (void)state;
  if (elf_version(EV_CURRENT) == EV_NONE) return -1;
  uint64_t vdso_size = 0;
  stack_and_vdso(&chain_stack_top, &vdso_size);
  dl_iterate_phdr(add_mod, &vdso_size);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  for (size_t i = 0; i < nmods; i++) ember__cfi_free(mods[i].t);
  return 0;
}

static const mod_t *mod_of(uint64_t pc) {
  for (size_t i = 0; i < nmods; i++)
    if (mods[i].lo <= pc && pc < mods[i].hi) return &mods[i];
  return NULL;
}

static int lookup(void *ctx, uint64_t pc, const ember__cfi_table_t **t, uint64_t *bias) {
  (void)ctx;
  const mod_t *m = mod_of(pc);
  if (m == NULL || m->t == NULL) return 1; /* no table: a frame-pointer step */
  *t = m->t;
  *bias = m->bias;
  return 0;
}

/* [lo, hi) of function `name` in this executable's symbol table. */
static void func_range(const char *name, uint64_t *lo, uint64_t *hi) {
  ember__safe_opts_t o = {.follow = true};
  int fd = ember__safe_openat(AT_FDCWD, "/proc/self/exe", &o, NULL);
  assert_true(fd >= 0);
  Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  assert_non_null(e);
  bool found = false;
  Elf_Scn *scn = NULL;
  while (!found && (scn = elf_nextscn(e, scn)) != NULL) {
    GElf_Shdr sh;
    assert_non_null(gelf_getshdr(scn, &sh));
    if (sh.sh_type != SHT_SYMTAB) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    size_t n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
    for (size_t i = 0; i < n && !found; i++) {
      GElf_Sym sym;
      if (gelf_getsym(d, (int)i, &sym) == NULL || GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
      const char *s = elf_strptr(e, sh.sh_link, sym.st_name);
      if (s == NULL || strcmp(s, name) != 0) continue;
      *lo = exe_bias + sym.st_value;
      *hi = *lo + sym.st_size;
      found = true;
    }
  }
  elf_end(e);
  close(fd);
  if (!found) fail_msg("no symbol %s", name);
}

static bool in_func(uint64_t ip, const char *name) {
  uint64_t lo, hi;
  func_range(name, &lo, &hi);
  return lo <= ip && ip < hi;
}

static void print_stack(const uint64_t *ips, size_t n, ember__unwind_result_t res) {
  printf("%zu frames, %s:\n", n, ember__unwind_result_name(res));
  for (size_t i = 0; i < n; i++) {
    Dl_info di;
    const char *sym = "?";
    const mod_t *m = mod_of(ips[i]);
    if (dladdr((void *)(uintptr_t)ips[i], &di) != 0 && di.dli_sname != NULL) sym = di.dli_sname;
    printf("  #%zu 0x%" PRIx64 " %s (%s)\n", i, ips[i], sym, m ? m->path : "no module");
  }
}

static ember__unwind_result_t unwind_capture(size_t len, uint64_t *ips, size_t max,
                                             ember__unwind_out_t *out) {
  ember__unwind_regs_t regs = {.ip = chain_cap.ip, .sp = chain_cap.sp, .bp = chain_cap.bp};
  return ember__unwind(&regs, chain_cap.stack, len, lookup, NULL, ips, max, out);
}

/* ---- real stacks -------------------------------------------------------- */

static void test_unwind_chain_without_frame_pointers(void **state) {
  (void)state;
  assert_true(chain_main(1) != 0);
  assert_true(chain_cap.len > 0);
  uint64_t ips[128];
  ember__unwind_out_t out;
  ember__unwind_result_t res = unwind_capture(chain_cap.len, ips, 128, &out);
  print_stack(ips, out.n, res);
  assert_int_equal(res, EMBER__UNWIND_COMPLETE);
  assert_true(out.n >= 6);
  assert_true(in_func(ips[0], "chain_leaf"));
  assert_true(in_func(ips[1], "chain_b"));
  assert_true(in_func(ips[2], "chain_a"));
  assert_true(in_func(ips[3], "chain_main"));
  assert_true(in_func(ips[4], "test_unwind_chain_without_frame_pointers"));
  assert_int_equal(out.fp_steps, 0);
  assert_int_equal(out.sig_steps, 0);
  /* The process's real main is on the way to the outermost frame. */
  bool main_seen = false;
  for (size_t i = 5; i < out.n; i++) main_seen |= in_func(ips[i], "main");
  assert_true(main_seen);
}

static void test_unwind_through_qsort(void **state) {
  (void)state;
  assert_int_equal(chain_qsort(), 0);
  uint64_t ips[128];
  ember__unwind_out_t out;
  ember__unwind_result_t res = unwind_capture(chain_cap.len, ips, 128, &out);
  print_stack(ips, out.n, res);
  assert_int_equal(res, EMBER__UNWIND_COMPLETE);
  assert_true(in_func(ips[0], "chain_cmp"));
  /* Then libc's frames (qsort and its helpers), then the caller. Under
   * ASan the sorting is done by libasan's interceptor instead. */
  size_t i = 1, libc = 0;
  for (; i < out.n && !in_func(ips[i], "chain_qsort"); i++) {
    const mod_t *m = mod_of(ips[i]);
    assert_non_null(m);
    if (strstr(m->path, "libc.so") != NULL || strstr(m->path, "libasan.so") != NULL) libc++;
  }
  assert_true(libc >= 1);
  assert_true(i + 1 < out.n);
  assert_true(in_func(ips[i + 1], "test_unwind_through_qsort"));
}

static void test_unwind_through_signal_frame(void **state) {
  (void)state;
  struct sigaction sa = {0}, old;
  sa.sa_handler = chain_on_signal;
  sigemptyset(&sa.sa_mask);
  assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
  memset(&chain_cap, 0, sizeof chain_cap.ip);
  assert_int_equal(chain_signal(), 0);
  assert_int_equal(sigaction(SIGALRM, &old, NULL), 0);
  uint64_t ips[128];
  ember__unwind_out_t out;
  ember__unwind_result_t res = unwind_capture(chain_cap.len, ips, 128, &out);
  print_stack(ips, out.n, res);
  assert_int_equal(res, EMBER__UNWIND_COMPLETE);
  assert_true(in_func(ips[0], "chain_on_signal"));
  assert_int_equal(out.sig_steps, 1);
  size_t i = 1;
  while (i < out.n && !in_func(ips[i], "chain_signal")) i++;
  assert_true(i + 1 < out.n);
  assert_true(in_func(ips[i + 1], "test_unwind_through_signal_frame"));
}

/* Any cut of the copy gives a prefix of the whole stack, and a cut that
 * loses a frame says truncated. */
static void test_unwind_cut_copy_is_truncated_prefix(void **state) {
  (void)state;
  assert_true(chain_main(2) != 0);
  uint64_t full[128], ips[128];
  ember__unwind_out_t fo, out;
  assert_int_equal(unwind_capture(chain_cap.len, full, 128, &fo), EMBER__UNWIND_COMPLETE);
  for (size_t len = 0; len <= chain_cap.len; len += 8) {
    ember__unwind_result_t res = unwind_capture(len, ips, 128, &out);
    assert_true(out.n >= 1 && out.n <= fo.n);
    assert_memory_equal(ips, full, out.n * sizeof ips[0]);
    if (res != EMBER__UNWIND_COMPLETE) assert_int_equal(res, EMBER__UNWIND_TRUNCATED);
    if (out.n < fo.n) assert_int_equal(res, EMBER__UNWIND_TRUNCATED);
  }
  assert_int_equal(unwind_capture(16, ips, 128, &out), EMBER__UNWIND_TRUNCATED);
  assert_true(out.n < fo.n);
  /* The depth cap. */
  assert_int_equal(unwind_capture(chain_cap.len, ips, 3, &out), EMBER__UNWIND_DEPTH);
  assert_int_equal(out.n, 3);
  assert_int_equal(unwind_capture(chain_cap.len, ips, 0, &out), EMBER__UNWIND_DEPTH);
  assert_int_equal(out.n, 0);
  assert_int_equal(ember__unwind(NULL, NULL, 0, lookup, NULL, ips, 4, &out),
                   EMBER__UNWIND_NO_TABLE);
  assert_int_equal(out.n, 0);
}

/* ---- synthetic stacks --------------------------------------------------- */

#define NATIVE 0x500000u /* a function with a hand-made FDE */
#define S      0x7ff000000000u

/* .eh_frame (at vaddr 0x1000) with one FDE for [NATIVE, NATIVE+0x1000)
 * whose program is `insn` after the usual CIE (CFA = rsp+8, RA at -8). */
static ember__cfi_table_t *native_table(const uint8_t *insn, size_t n) {
  uint8_t b[256] = {
      /* CIE: length 18, id 0, version 1, "zR", code 1, data -8, RA 16,
       * aug length 1, pcrel|sdata4, def_cfa rsp 8, offset RA 1, nop. */
      18, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1,
  };
  size_t at = 22;
  uint32_t len = (uint32_t)(4 + 4 + 4 + 1 + n);
  memcpy(b + at, &len, 4);
  uint32_t cie_ptr = (uint32_t)(at + 4);
  memcpy(b + at + 4, &cie_ptr, 4);
  int32_t rel = (int32_t)((int64_t)NATIVE - (int64_t)(0x1000 + at + 8));
  memcpy(b + at + 8, &rel, 4);
  uint32_t range = 0x1000;
  memcpy(b + at + 12, &range, 4);
  b[at + 16] = 0; /* aug data length */
  memcpy(b + at + 17, insn, n);
  ember__cfi_table_t *t = NULL;
  assert_int_equal(ember__cfi_build_sections(b, at + 17 + n, 0x1000, NULL, 0, NULL, NULL, &t), 0);
  return t;
}

static int synth_lookup(void *ctx, uint64_t pc, const ember__cfi_table_t **t, uint64_t *bias) {
  if (pc < NATIVE || pc >= NATIVE + 0x1000) return 1;
  *t = ctx;
  *bias = 0;
  return 0;
}

static void put64(uint8_t *stack, uint64_t addr, uint64_t v) { memcpy(stack + (addr - S), &v, 8); }

/* JIT (no table) -> JIT -> native (CFI) -> JIT -> outermost (rbp 0). */
static void test_unwind_frame_pointer_fallback(void **state) {
  (void)state;
  const uint8_t insn[] = {0x0e, 24}; /* CFA = rsp + 24 throughout */
  ember__cfi_table_t *t = native_table(insn, sizeof insn);
  uint8_t stack[256] = {0};
  put64(stack, S + 0x20, S + 0x60);   /* JIT frame 0: saved rbp */
  put64(stack, S + 0x28, 0x2000);     /* ... return into JIT */
  put64(stack, S + 0x60, S + 0x90);   /* JIT frame 1 */
  put64(stack, S + 0x68, NATIVE + 5); /* ... return into native code */
  put64(stack, S + 0x80, 0x3000);     /* native: sp = S+0x70, CFA S+0x88, RA at S+0x80 */
  put64(stack, S + 0x90, 0);          /* JIT frame 3: rbp 0 = outermost */
  put64(stack, S + 0x98, 0x4000);
  ember__unwind_regs_t regs = {.ip = 0x1000, .sp = S, .bp = S + 0x20};
  uint64_t ips[16];
  ember__unwind_out_t out;
  ember__unwind_result_t res =
      ember__unwind(&regs, stack, sizeof stack, synth_lookup, t, ips, 16, &out);
  assert_int_equal(res, EMBER__UNWIND_COMPLETE);
  const uint64_t want[] = {0x1000, 0x2000, NATIVE + 5, 0x3000, 0x4000};
  assert_int_equal(out.n, 5);
  assert_memory_equal(ips, want, sizeof want);
  assert_int_equal(out.fp_steps, 3);
  /* rbp below sp is no frame pointer. */
  regs.bp = S - 0x100;
  assert_int_equal(ember__unwind(&regs, stack, sizeof stack, synth_lookup, t, ips, 16, &out),
                   EMBER__UNWIND_NO_TABLE);
  assert_int_equal(out.n, 1);
  /* A frame pointer just past the copy: truncated. */
  regs.bp = S + sizeof stack;
  assert_int_equal(ember__unwind(&regs, stack, sizeof stack, synth_lookup, t, ips, 16, &out),
                   EMBER__UNWIND_TRUNCATED);
  ember__cfi_free(t);
}

static ember__unwind_result_t synth(const uint8_t *insn, size_t n, const uint8_t *stack, size_t len,
                                    uint64_t bp, ember__unwind_out_t *out) {
  ember__cfi_table_t *t = native_table(insn, n);
  ember__unwind_regs_t regs = {.ip = NATIVE + 1, .sp = S, .bp = bp};
  uint64_t ips[16];
  ember__unwind_result_t res = ember__unwind(&regs, stack, len, synth_lookup, t, ips, 16, out);
  ember__cfi_free(t);
  return res;
}

static void test_unwind_loops_and_bad_rows_stop(void **state) {
  (void)state;
  uint8_t stack[64] = {0};
  ember__unwind_out_t out;
  put64(stack, S, NATIVE + 2);
  /* CFA = rsp + 0 with the RA at CFA + 0: sp would not move. */
  const uint8_t zero[] = {0x0e, 0, 0x90, 0};
  assert_int_equal(synth(zero, sizeof zero, stack, sizeof stack, 0, &out), EMBER__UNWIND_LOOP);
  assert_int_equal(out.n, 1);
  /* A CFA on rbx: not followable. */
  const uint8_t rbx[] = {0x0c, 3, 16};
  assert_int_equal(synth(rbx, sizeof rbx, stack, sizeof stack, 0, &out), EMBER__UNWIND_BAD_CFA);
  assert_int_equal(out.n, 1);
  /* Frame 0 loses rbp (an expression), frame 1 needs CFA = rbp + 16. */
  const uint8_t lost[] = {0x10, 6, 1, 0x30, 0x50, 0x0c, 6, 16};
  put64(stack, S, NATIVE + 0x20);
  assert_int_equal(synth(lost, sizeof lost, stack, sizeof stack, S + 0x20, &out),
                   EMBER__UNWIND_BAD_CFA);
  assert_int_equal(out.n, 2);
  /* The same with rbp kept: frame 1's CFA is rbp + 16 = S + 0x30, whose RA
   * at S + 0x28 is 0, the end. */
  const uint8_t kept[] = {0x50, 0x0c, 6, 16};
  assert_int_equal(synth(kept, sizeof kept, stack, sizeof stack, S + 0x20, &out),
                   EMBER__UNWIND_COMPLETE);
  assert_int_equal(out.n, 2);
  /* A return address of 0 ends the stack. */
  put64(stack, S, 0);
  const uint8_t none[] = {0x00};
  assert_int_equal(synth(none, sizeof none, stack, sizeof stack, 0, &out), EMBER__UNWIND_COMPLETE);
  assert_int_equal(out.n, 1);
  /* The RA outside the copy. */
  assert_int_equal(synth(none, sizeof none, stack, 4, 0, &out), EMBER__UNWIND_TRUNCATED);
  assert_string_equal(ember__unwind_result_name(EMBER__UNWIND_LOOP), "loop");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unwind_chain_without_frame_pointers),
      cmocka_unit_test(test_unwind_through_qsort),
      cmocka_unit_test(test_unwind_through_signal_frame),
      cmocka_unit_test(test_unwind_cut_copy_is_truncated_prefix),
      cmocka_unit_test(test_unwind_frame_pointer_fallback),
      cmocka_unit_test(test_unwind_loops_and_bad_rows_stop),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
