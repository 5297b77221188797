/* Separate debug information (debuginfo.c) and demangling (demangle.c):
 * build-id trees, .gnu_debuglink with its CRC, MiniDebugInfo, and the
 * hostile variants of each (wrong CRC, names that climb out, links, FIFOs,
 * truncated or oversized xz). The subjects are the stripped copies of
 * tests/programs/symfix that tests/programs/debugfix.sh makes at build time
 * with objcopy, strip, nm and xz; hostile variants are made here with the
 * same tools. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "debuginfo.h"
#include "demangle.h"
#include "ember/ember.h"
#include "safefile.h"

#define FIX EMBER_DEBUG_FIXTURES

typedef struct subject {
  int fd;
  Elf *elf;
} subject_t;

static void subject_open(const char *path, subject_t *s) {
  elf_version(EV_CURRENT);
  s->fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(s->fd >= 0);
  s->elf = elf_begin(s->fd, ELF_C_READ, NULL);
  assert_non_null(s->elf);
}

static void subject_close(subject_t *s) {
  if (s->elf != NULL) elf_end(s->elf);
  if (s->fd >= 0) close(s->fd);
  s->elf = NULL;
  s->fd = -1;
}

static void read_build_id(const char *name, char *hex, size_t size) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s.build-id", FIX, name);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(hex, (int)size, f));
  fclose(f);
  hex[strcspn(hex, "\n")] = '\0';
  assert_true(strlen(hex) >= 16);
}

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void run(const char *fmt, ...) {
  char cmd[4 * PATH_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  assert_true(n > 0 && (size_t)n < sizeof cmd);
  int rc = system(cmd);
  if (rc != 0) print_message("command failed (%d): %s\n", rc, cmd);
  assert_int_equal(rc, 0);
}

/* A fresh directory under the test tree; removed by rm_tree. */
static void temp_dir(char *dir, size_t size) {
  snprintf(dir, size, "%s/dbgXXXXXX", EMBER_TEST_TMP);
  assert_non_null(mkdtemp(dir));
}

static void rm_tree(const char *dir) { run("rm -rf '%s'", dir); }

static ember__debuginfo_t *new_di(const char *dirs) {
  ember__debuginfo_opts_t o = {.debug_dirs = dirs};
  ember__debuginfo_t *d = NULL;
  assert_int_equal(ember__debuginfo_new(&o, &d), 0);
  return d;
}

static bool has_func(Elf *elf, const char *want) {
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn != NULL; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_SYMTAB) continue;
    Elf_Data *data = elf_getdata(scn, NULL);
    if (data == NULL || sh.sh_entsize == 0) continue;
    for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
      GElf_Sym sym;
      if (gelf_getsym(data, (int)i, &sym) == NULL) continue;
      const char *n = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (n != NULL && strcmp(n, want) == 0 && GELF_ST_TYPE(sym.st_info) == STT_FUNC) return true;
    }
  }
  return false;
}

static ember__debug_target_t target(const subject_t *s, const char *build_id, const char *dir) {
  return (ember__debug_target_t){
      .elf = s->elf, .build_id = build_id, .root_fd = AT_FDCWD, .dir = dir, .root_safe = true};
}

/* ------------------------------------------------------------------ */

static void test_debuginfo_options(void **state) {
  (void)state;
  ember__debuginfo_t *d = NULL;
  static const char *const bad[] = {"usr/lib/debug", "/a:b", "/x/../y", "/x/./y"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ember__debuginfo_opts_t o = {.debug_dirs = bad[i]};
    assert_int_equal(ember__debuginfo_new(&o, &d), -EINVAL);
  }
  ember__debuginfo_opts_t o = {.debug_dirs = "/a//:/b/::"};
  assert_int_equal(ember__debuginfo_new(&o, &d), 0);
  ember__debuginfo_free(d);
  assert_int_equal(ember__debuginfo_new(NULL, &d), 0);
  ember__debuginfo_free(d);
  ember__debuginfo_free(NULL);
}

static void test_debuginfo_build_id(void **state) {
  (void)state;
  char id[160];
  read_build_id("symfix", id, sizeof id);
  subject_t s;
  subject_open(FIX "/stripped/symfix", &s);
  assert_false(has_func(s.elf, "alpha_leaf"));
  /* The debug root listed second: the first has nothing. */
  ember__debuginfo_t *d = new_di("/nonexistent-debug-root:" FIX "/root");
  ember__debug_target_t t = target(&s, id, NULL);
  ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  assert_int_equal(f.source, EMBER__DEBUG_BUILD_ID);
  assert_true(has_func(f.elf, "alpha_leaf"));
  /* Mapped only when root's and no one else's to write. */
  struct stat sb;
  assert_int_equal(fstat(f.fd, &sb), 0);
  assert_int_equal(f.mapped, sb.st_uid == 0 && (sb.st_mode & (S_IWGRP | S_IWOTH)) == 0);
  ember__debug_file_close(&f);
  ember__debug_file_close(&f); /* twice is fine */
  ember__debuginfo_stats_t st;
  ember__debuginfo_stats(d, &st);
  assert_int_equal(st.by_build_id, 1);
  ember__debuginfo_free(d);

  /* No debug root: nothing found. */
  d = new_di("");
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  assert_int_equal(f.fd, -1);
  ember__debuginfo_free(d);

  /* A file of another build under this build-id's path. */
  char dir[512];
  temp_dir(dir, sizeof dir);
  char kid[160];
  read_build_id("klass", kid, sizeof kid);
  run("mkdir -p '%s/.build-id/%.2s' && cp '%s/root/.build-id/%.2s/%s.debug' "
      "'%s/.build-id/%.2s/%s.debug'",
      dir, id, FIX, kid, kid + 2, dir, id, id + 2);
  d = new_di(dir);
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  ember__debuginfo_stats(d, &st);
  assert_int_equal(st.build_id_mismatch, 1);
  ember__debuginfo_free(d);

  /* A build-id that is not hex is never made into a path. */
  d = new_di(FIX "/root");
  t.build_id = "../../../etc/passwd";
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  ember__debuginfo_free(d);
  rm_tree(dir);
  subject_close(&s);
}

/* Found beside the file, in .debug/ beside it, and under a debug root,
 * through the agent's root and through an fd of a process root. */
static void test_debuginfo_link_found(void **state) {
  (void)state;
  char id[160];
  read_build_id("symfix", id, sizeof id);
  subject_t s;
  subject_open(FIX "/linked/symfix", &s);
  const char *name = NULL;
  uint32_t crc = 0;
  ember__debuginfo_t *d = new_di("");
  assert_int_equal(ember__debuginfo_link(d, s.elf, &name, &crc), 0);
  assert_string_equal(name, "symfix.debug");
  assert_true(crc != 0);

  /* .debug/ beside the file (the fixture's layout). */
  ember__debug_target_t t = target(&s, id, FIX "/linked");
  ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  assert_int_equal(f.source, EMBER__DEBUG_LINK);
  assert_true(has_func(f.elf, "beta_middle"));
  ember__debug_file_close(&f);
  /* A root process may cut even root's files: its candidates are read,
   * never mapped. */
  t.root_safe = false;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  assert_false(f.mapped);
  ember__debug_file_close(&f);
  t.root_safe = true;

  /* The same through a root directory fd, as /proc/PID/root would be. */
  int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  assert_true(root >= 0);
  t.root_fd = root;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  ember__debug_file_close(&f);
  t.root_fd = AT_FDCWD;
  close(root);

  /* Beside the file. */
  char dir[512];
  temp_dir(dir, sizeof dir);
  run("cp '%s/linked/.debug/symfix.debug' '%s/symfix.debug'", FIX, dir);
  t.dir = dir;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  ember__debug_file_close(&f);
  ember__debuginfo_free(d);

  /* Under a debug root, at the file's directory: <root>/<dir>/<name>. */
  char droot[512];
  temp_dir(droot, sizeof droot);
  run("mkdir -p '%s/opt/app/bin' && cp '%s/linked/.debug/symfix.debug' '%s/opt/app/bin/'", droot,
      FIX, droot);
  d = new_di(droot);
  t.dir = "/opt/app/bin";
  /* No build-id tree in that root: found by the link. */
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  assert_int_equal(f.source, EMBER__DEBUG_LINK);
  ember__debug_file_close(&f);
  /* A directory that climbs out is refused before any path is made. */
  t.dir = "/opt/../opt/app/bin";
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  /* No directory (a deleted file): no debuglink search. */
  t.dir = NULL;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  ember__debuginfo_stats_t st;
  ember__debuginfo_stats(d, &st);
  assert_int_equal(st.by_link, 1);
  assert_int_equal(st.bad_link, 1);
  ember__debuginfo_free(d);
  rm_tree(droot);
  rm_tree(dir);
  subject_close(&s);
}

static void test_debuginfo_link_crc_mismatch(void **state) {
  (void)state;
  char dir[512];
  temp_dir(dir, sizeof dir);
  /* The right name, one byte changed at the end of the file. */
  run("cp '%s/linked/symfix' '%s/symfix' && mkdir '%s/.debug' && "
      "cp '%s/linked/.debug/symfix.debug' '%s/.debug/symfix.debug' && "
      "printf 'X' | dd of='%s/.debug/symfix.debug' bs=1 seek=$(($(stat -c %%s "
      "'%s/.debug/symfix.debug') - 1)) conv=notrunc status=none",
      FIX, dir, dir, FIX, dir, dir, dir);
  char exe[PATH_MAX];
  snprintf(exe, sizeof exe, "%s/symfix", dir);
  subject_t s;
  subject_open(exe, &s);
  ember__debuginfo_t *d = new_di("");
  ember__debug_target_t t = target(&s, NULL, dir);
  ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  ember__debuginfo_stats_t st;
  ember__debuginfo_stats(d, &st);
  assert_int_equal(st.crc_mismatch, 1);
  assert_int_equal(st.by_link, 0);
  ember__debuginfo_free(d);
  subject_close(&s);
  rm_tree(dir);
}

/* Write a .gnu_debuglink section of `name` (len bytes, NUL included or
 * not), padding and `crc` bytes, into a copy of the stripped symfix. */
static void make_link(const char *dir, const char *out, const char *name, size_t len,
                      size_t crc_bytes) {
  char sec[PATH_MAX];
  snprintf(sec, sizeof sec, "%s/link.bin", dir);
  FILE *f = fopen(sec, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(name, 1, len, f), len);
  size_t pad = (4 - len % 4) % 4;
  for (size_t i = 0; i < pad; i++) fputc(0, f);
  for (size_t i = 0; i < crc_bytes; i++) fputc(0x11, f);
  fclose(f);
  run("'%s' --add-section .gnu_debuglink='%s' '%s/stripped/symfix' '%s'", EMBER_OBJCOPY, sec, FIX,
      out);
}

static void test_debuginfo_link_bad_names(void **state) {
  (void)state;
  char dir[512], exe[PATH_MAX];
  temp_dir(dir, sizeof dir);
  snprintf(exe, sizeof exe, "%s/bad", dir);
  /* A file the names would reach, so only the checks can stop them. */
  run("cp '%s/linked/.debug/symfix.debug' '%s/symfix.debug'", FIX, EMBER_TEST_TMP);
  static const struct {
    const char *name;
    size_t len, crc;
  } cases[] = {
      {"../symfix.debug", 16, 4},  /* climbs out */
      {"..", 3, 4},                /* the parent itself */
      {"a/b", 4, 4},               /* a path */
      {"", 1, 4},                  /* empty */
      {"symfix.debug", 13, 0},     /* no CRC */
      {"symfix.debug", 13, 2},     /* a cut CRC */
      {"symfix.debugXYZW", 16, 0}, /* no NUL in the section */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    make_link(dir, exe, cases[i].name, cases[i].len, cases[i].crc);
    subject_t s;
    subject_open(exe, &s);
    ember__debuginfo_t *d = new_di("");
    const char *name = NULL;
    uint32_t crc = 0;
    assert_int_equal(ember__debuginfo_link(d, s.elf, &name, &crc), EMBER_ECORRUPT);
    assert_null(name);
    ember__debug_target_t t = target(&s, NULL, dir);
    ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
    assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
    ember__debuginfo_stats_t st;
    ember__debuginfo_stats(d, &st);
    assert_int_equal(st.bad_link, 2);
    assert_int_equal(st.by_link + st.crc_mismatch + st.unsafe, 0);
    ember__debuginfo_free(d);
    subject_close(&s);
  }
  /* And a file with no link at all. */
  subject_t s;
  subject_open(FIX "/stripped/symfix", &s);
  ember__debuginfo_t *d = new_di("");
  const char *name = NULL;
  uint32_t crc = 0;
  assert_int_equal(ember__debuginfo_link(d, s.elf, &name, &crc), -ENOENT);
  ember__debuginfo_free(d);
  subject_close(&s);
  unlink(EMBER_TEST_TMP "/symfix.debug");
  rm_tree(dir);
}

/* The candidates in the process's directories are the process's: a link
 * or a FIFO there is refused, counted, and the search goes on. */
static void test_debuginfo_link_symlink_fifo(void **state) {
  (void)state;
  char dir[512], path[PATH_MAX];
  temp_dir(dir, sizeof dir);
  run("cp '%s/linked/symfix' '%s/symfix' && mkdir '%s/.debug' && "
      "ln -s '%s/linked/.debug/symfix.debug' '%s/.debug/symfix.debug'",
      FIX, dir, dir, FIX, dir);
  snprintf(path, sizeof path, "%s/symfix.debug", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  snprintf(path, sizeof path, "%s/symfix", dir);
  subject_t s;
  subject_open(path, &s);
  ember__debuginfo_t *d = new_di("");
  ember__debug_target_t t = target(&s, NULL, dir);
  ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
  ember__safe_stats_t before, after;
  ember__safe_stats(&before);
  /* Would block forever on the FIFO if it were opened. */
  assert_int_equal(ember__debuginfo_find(d, &t, &f), -ENOENT);
  ember__safe_stats(&after);
  ember__debuginfo_stats_t st;
  ember__debuginfo_stats(d, &st);
  assert_int_equal(st.unsafe, 2);
  assert_int_equal(after.symlinks - before.symlinks, 1);
  assert_int_equal(after.not_regular - before.not_regular, 1);
  ember__debuginfo_free(d);

  /* A symbolic link inside a (host's, trusted) debug root is followed, as
   * Fedora's .build-id links need. */
  char droot[512];
  temp_dir(droot, sizeof droot);
  run("mkdir -p '%s/x/y' && ln -s '%s/linked/.debug/symfix.debug' '%s/x/y/symfix.debug'", droot,
      FIX, droot);
  d = new_di(droot);
  t.dir = "/x/y";
  assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
  ember__debug_file_close(&f);
  ember__debuginfo_free(d);
  subject_close(&s);
  rm_tree(droot);
  rm_tree(dir);
}

static void test_debuginfo_minidebug(void **state) {
  (void)state;
  subject_t s;
  subject_open(FIX "/mini/symfix", &s);
  ember__debuginfo_t *d = new_di("");
  ember__minidebug_t m = {0};
  assert_int_equal(ember__debuginfo_minidebug(d, s.elf, &m), 0);
  assert_non_null(m.elf);
  assert_true(m.size > 0);
  static const char *const funcs[] = {"alpha_leaf", "beta_middle", "gamma_root", "main"};
  for (size_t i = 0; i < sizeof funcs / sizeof funcs[0]; i++)
    assert_true(has_func(m.elf, funcs[i]));
  ember__minidebug_free(&m);
  ember__minidebug_free(&m);
  ember__minidebug_free(NULL);
  ember__debuginfo_stats_t st;
  ember__debuginfo_stats(d, &st);
  assert_int_equal(st.minidebug, 1);
  subject_close(&s);

  /* A stripped file without the section. */
  subject_open(FIX "/stripped/symfix", &s);
  assert_int_equal(ember__debuginfo_minidebug(d, s.elf, &m), -ENOENT);
  assert_null(m.elf);
  subject_close(&s);
  ember__debuginfo_free(d);
}

/* Put `content` (a file) into a copy of the stripped symfix as its
 * .gnu_debugdata and try to read it under a bound of `max` bytes. */
static int mini_of(const char *dir, const char *content, size_t max, ember__debuginfo_stats_t *st) {
  char exe[PATH_MAX];
  snprintf(exe, sizeof exe, "%s/mini", dir);
  run("'%s' --add-section .gnu_debugdata='%s' '%s/stripped/symfix' '%s'", EMBER_OBJCOPY, content,
      FIX, exe);
  subject_t s;
  subject_open(exe, &s);
  ember__debuginfo_opts_t o = {.debug_dirs = "", .minidebug_max = max};
  ember__debuginfo_t *d = NULL;
  assert_int_equal(ember__debuginfo_new(&o, &d), 0);
  ember__minidebug_t m = {0};
  int rc = ember__debuginfo_minidebug(d, s.elf, &m);
  if (rc == 0) ember__minidebug_free(&m);
  assert_null(m.elf);
  ember__debuginfo_stats(d, st);
  ember__debuginfo_free(d);
  subject_close(&s);
  unlink(exe);
  return rc;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_debuginfo_minidebug_hostile(void **state) {
  (void)state;
  char dir[512], p[PATH_MAX];
  temp_dir(dir, sizeof dir);
  ember__debuginfo_stats_t st;

  /* Truncated: the first half of a real image. */
  snprintf(p, sizeof p, "%s/half.xz", dir);
  run("f='%s/symfix.mini.xz'; head -c $(($(stat -c %%s \"$f\") / 2)) \"$f\" > '%s'", FIX, p);
  assert_int_equal(mini_of(dir, p, 0, &st), EMBER_ECORRUPT);
  assert_int_equal(st.minidebug_bad, 1);

  /* Not xz at all. */
  snprintf(p, sizeof p, "%s/garbage", dir);
  run("printf 'this is not xz data at all' > '%s'", p);
  assert_int_equal(mini_of(dir, p, 0, &st), EMBER_ECORRUPT);

  /* xz, but not ELF inside. */
  snprintf(p, sizeof p, "%s/text.xz", dir);
  run("printf 'hello, not an ELF file' | '%s' -c > '%s'", EMBER_XZ, p);
  assert_int_equal(mini_of(dir, p, 0, &st), EMBER_ECORRUPT);

  /* An ELF without .symtab inside (the stripped binary itself). */
  snprintf(p, sizeof p, "%s/nosym.xz", dir);
  run("'%s' -c '%s/stripped/symfix' > '%s'", EMBER_XZ, FIX, p);
  assert_int_equal(mini_of(dir, p, 0, &st), EMBER_ECORRUPT);

  /* A section larger than the bound: refused before it is read. */
  assert_int_equal(mini_of(dir, FIX "/symfix.mini.xz", 64, &st), -EFBIG);
  assert_int_equal(st.minidebug_too_big, 1);

  /* Small, but expanding past the bound: 2 MiB of zeros under 1 MiB. */
  snprintf(p, sizeof p, "%s/zeros2m.xz", dir);
  run("head -c 2097152 /dev/zero | '%s' -c > '%s'", EMBER_XZ, p);
  assert_int_equal(mini_of(dir, p, 1u << 20, &st), -EFBIG);

  /* A bomb under the default bound: 80 MiB of zeros in a few KiB. */
  snprintf(p, sizeof p, "%s/bomb.xz", dir);
  run("head -c 83886080 /dev/zero | '%s' -0 -c > '%s'", EMBER_XZ, p);
  double t0 = now_s();
  assert_int_equal(mini_of(dir, p, 0, &st), -EFBIG);
  print_message("80 MiB xz bomb refused at the 64 MiB bound in %.0f ms\n", (now_s() - t0) * 1e3);
  rm_tree(dir);
}

/* Every allocation of a lookup and a decompression may fail: no leak, no
 * crash, -ENOMEM or success. */
static void test_debuginfo_alloc_failures(void **state) {
  (void)state;
  char id[160];
  read_build_id("symfix", id, sizeof id);
  subject_t s, link, mini;
  subject_open(FIX "/stripped/symfix", &s);
  subject_open(FIX "/linked/symfix", &link);
  subject_open(FIX "/mini/symfix", &mini);
  bool done = false;
  long n;
  for (n = 0; n < 10000 && !done; n++) {
    ember__debuginfo_t *d = NULL;
    ember__debug_file_t f1 = EMBER__DEBUG_FILE_INIT, f2 = EMBER__DEBUG_FILE_INIT;
    ember__minidebug_t m = {0};
    ember__debuginfo_opts_t o = {.debug_dirs = FIX "/root"};
    ember_alloc_fail_after(n);
    int rc = ember__debuginfo_new(&o, &d);
    ember__debug_target_t t1 = target(&s, id, NULL), t2 = target(&link, NULL, FIX "/linked");
    if (rc == 0) rc = ember__debuginfo_find(d, &t1, &f1);
    if (rc == 0) rc = ember__debuginfo_find(d, &t2, &f2);
    if (rc == 0) rc = ember__debuginfo_minidebug(d, mini.elf, &m);
    ember_alloc_fail_reset();
    if (rc == 0) {
      assert_true(has_func(f1.elf, "alpha_leaf"));
      assert_true(has_func(f2.elf, "alpha_leaf"));
      assert_true(has_func(m.elf, "alpha_leaf"));
      done = true;
    } else {
      assert_int_equal(rc, -ENOMEM);
    }
    ember__debug_file_close(&f1);
    ember__debug_file_close(&f2);
    ember__minidebug_free(&m);
    ember__debuginfo_free(d);
  }
  assert_true(done);
  print_message("alloc failures: success after %ld allocations\n", n - 1);
  subject_close(&s);
  subject_close(&link);
  subject_close(&mini);
}

/* Costs for docs/internals/debuginfo.md. */
static void test_debuginfo_costs(void **state) {
  (void)state;
  subject_t s;
  subject_open(FIX "/mini/symfix", &s);
  ember__debuginfo_t *d = new_di("");
  const int rounds = 200;
  double t0 = now_s();
  for (int r = 0; r < rounds; r++) {
    ember__minidebug_t m = {0};
    assert_int_equal(ember__debuginfo_minidebug(d, s.elf, &m), 0);
    ember__minidebug_free(&m);
  }
  double t1 = now_s();
  subject_close(&s);
  subject_open(FIX "/linked/symfix", &s);
  ember__debug_target_t t = target(&s, NULL, FIX "/linked");
  for (int r = 0; r < rounds; r++) {
    ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
    assert_int_equal(ember__debuginfo_find(d, &t, &f), 0);
    ember__debug_file_close(&f);
  }
  double t2 = now_s();
  struct stat sb;
  assert_int_equal(stat(FIX "/linked/.debug/symfix.debug", &sb), 0);
  print_message("minidebug of symfix: %.0f us; debuglink find + CRC of %lld bytes: %.0f us\n",
                (t1 - t0) / rounds * 1e6, (long long)sb.st_size, (t2 - t1) / rounds * 1e6);
  ember__debuginfo_free(d);
  subject_close(&s);
}

/* ------------------------------------------------------------------ */

static void expect_demangled(const char *in, const char *want) {
  char out[1024];
  size_t n = ember__demangle(in, out, sizeof out);
  if (want == NULL) {
    assert_int_equal(n, 0);
    assert_string_equal(out, "");
  } else {
    assert_string_equal(out, want);
    assert_int_equal(n, strlen(want));
  }
}

static void test_demangle_names(void **state) {
  (void)state;
  expect_demangled("_ZN2ns5Klass6methodEi", "ns::Klass::method(int)");
  expect_demangled("_ZNK2ns5Klass3getEv", "ns::Klass::get() const");
  expect_demangled("_ZNSt6vectorIiSaIiEE9push_backERKi",
                   "std::vector<int, std::allocator<int> >::push_back(int const&)");
  /* Rust, legacy: the hash is dropped. */
  expect_demangled("_ZN4core3fmt5write17h0123456789abcdefE", "core::fmt::write");
  expect_demangled("_ZN3std2rt10lang_start17h5d7a8e0f1b2c3d4eE", "std::rt::lang_start");
  /* Rust, v0. */
  expect_demangled("_RNvCs1234_7mycrate3foo", "mycrate::foo");
  expect_demangled("_RNvNtCs9ltgdHTiPiY_4core3ptr13drop_in_place", "core::ptr::drop_in_place");
  /* Left as they are. */
  expect_demangled("main", NULL);
  expect_demangled("alpha_leaf", NULL);
  expect_demangled("_Z", NULL);
  expect_demangled("_ZN2ns", NULL);
  expect_demangled("_Z!!!not a name", NULL);
  expect_demangled("_R", NULL);
  expect_demangled("_RNvC", NULL);
  assert_true(ember__demangle_candidate("_ZN1a1bEv"));
  assert_false(ember__demangle_candidate("memcpy"));
  assert_false(ember__demangle_candidate(NULL));
  /* A result that does not fit is dropped, not cut. */
  char small[8];
  assert_int_equal(ember__demangle("_ZN2ns5Klass6methodEi", small, sizeof small), 0);
  assert_string_equal(small, "");
  assert_int_equal(ember__demangle("_ZN2ns5Klass6methodEi", small, 0), 0);
  assert_int_equal(ember__demangle("_ZN2ns5Klass6methodEi", NULL, 10), 0);
}

/* Hostile names: too long for the bound, deeply nested, repetitive. */
static void test_demangle_hostile(void **state) {
  (void)state;
  size_t len = EMBER__DEMANGLE_MAX_IN + 100;
  char *name = malloc(len + 1);
  char *out = malloc(65536);
  assert_non_null(name);
  assert_non_null(out);
  /* _ZN + "1a" many times + "E": valid, but longer than the bound. */
  memcpy(name, "_ZN", 3);
  size_t k = 3;
  while (k + 3 < len) {
    name[k++] = '1';
    name[k++] = 'a';
  }
  name[k++] = 'E';
  name[k] = '\0';
  assert_int_equal(ember__demangle(name, out, 65536), 0);
  /* Within the bound it demangles. */
  name[3 + 2 * 100] = 'E';
  name[3 + 2 * 100 + 1] = '\0';
  assert_true(ember__demangle(name, out, 65536) > 0);
  /* Deep template nesting within the bound: refused or demangled, never a
   * crash (libiberty has its own recursion limit). */
  k = 0;
  memcpy(name, "_Z1fI", 5);
  k = 5;
  while (k + 8 < EMBER__DEMANGLE_MAX_IN) memcpy(name + k, "N1aI", 4), k += 4;
  name[k] = '\0';
  (void)ember__demangle(name, out, 65536);
  /* Random bytes after the prefix. */
  unsigned seed = 12345;
  for (int r = 0; r < 2000; r++) {
    size_t n = 2 + (size_t)(rand_r(&seed) % 200);
    name[0] = '_';
    name[1] = r % 2 ? 'Z' : 'R';
    for (size_t i = 2; i < n; i++) name[i] = (char)(32 + rand_r(&seed) % 95);
    name[n] = '\0';
    size_t got = ember__demangle(name, out, 256);
    assert_true(got < 256);
    assert_int_equal(strlen(out), got);
  }
  free(name);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_debuginfo_options),
      cmocka_unit_test(test_debuginfo_build_id),
      cmocka_unit_test(test_debuginfo_link_found),
      cmocka_unit_test(test_debuginfo_link_crc_mismatch),
      cmocka_unit_test(test_debuginfo_link_bad_names),
      cmocka_unit_test(test_debuginfo_link_symlink_fifo),
      cmocka_unit_test(test_debuginfo_minidebug),
      cmocka_unit_test(test_debuginfo_minidebug_hostile),
      cmocka_unit_test(test_debuginfo_alloc_failures),
      cmocka_unit_test(test_debuginfo_costs),
      cmocka_unit_test(test_demangle_names),
      cmocka_unit_test(test_demangle_hostile),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
