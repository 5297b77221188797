/* The agent's symbolizer: /proc maps snapshots, ELF symbols and build-ids,
 * DWARF lines and inline frames, perf maps, kallsyms, the module cache, and
 * every failure path. The subject is tests/programs/symfix, run as a child;
 * it prints its functions' addresses, real return addresses and the source
 * lines of its calls. */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "ember/parse.h"
#include "safefile.h"
#include "symbolize.h"

#define SYMFIX     EMBER_TEST_PROGRAMS "/symfix"
#define SYMFIX_CPY EMBER_TEST_TMP "/symfix-copy"

/* What symfix prints, in this order of keys. */
enum {
  K_PID,
  K_ALPHA,
  K_BETA,
  K_GAMMA,
  K_INL_OUTER,
  K_RET_ALPHA,
  K_RET_BETA,
  K_RET_GAMMA,
  K_RET_INLINE,
  K_LINE_ALPHA,
  K_LINE_BETA_CALL,
  K_LINE_GAMMA_CALL,
  K_LINE_MAIN_CALL,
  K_LINE_PROBE_CALL,
  K_LINE_INL_A_CALL,
  K_LINE_INL_B_CALL,
  K_GETPID,
  K_JIT,
  K_COUNT
};
static const char *const keys[K_COUNT] = {"pid",
                                          "alpha",
                                          "beta",
                                          "gamma",
                                          "inl_outer",
                                          "ret_alpha",
                                          "ret_beta",
                                          "ret_gamma",
                                          "ret_inline",
                                          "line_alpha",
                                          "line_beta_call",
                                          "line_gamma_call",
                                          "line_main_call",
                                          "line_probe_call",
                                          "line_inl_a_call",
                                          "line_inl_b_call",
                                          "getpid",
                                          "jit"};

typedef struct fixture {
  pid_t pid;
  uint64_t v[K_COUNT];
} fixture_t;

typedef struct state {
  fixture_t fx[3];
  ember__procmaps_t *maps[3];
  ember__symbolizer_t *sym;
  char perf_map[PATH_MAX];
} state_t;

static int setup(void **state) {
  state_t *st = calloc(1, sizeof *st);
  if (st == NULL) return -1;
  for (int i = 0; i < 3; i++) st->fx[i].pid = -1;
  *state = st;
  return 0;
}

static void fixture_stop(fixture_t *f) {
  if (f->pid <= 0) return;
  kill(f->pid, SIGKILL);
  while (waitpid(f->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  f->pid = -1;
}

static int teardown(void **state) {
  state_t *st = *state;
  for (int i = 0; i < 3; i++) {
    fixture_stop(&st->fx[i]);
    ember__procmaps_free(st->maps[i]);
  }
  ember__symbolizer_free(st->sym);
  if (st->perf_map[0]) unlink(st->perf_map);
  unlink(SYMFIX_CPY);
  ember_alloc_fail_reset();
  free(st);
  return 0;
}

/* Start `exe` (a copy of symfix) and read what it prints up to "ready". */
static void fixture_start(const char *exe, fixture_t *f) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* Die with the test, even if it aborts before its teardown. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(p[1], STDOUT_FILENO);
    execl(exe, "symfix", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  f->pid = pid;
  FILE *in = fdopen(p[0], "r");
  assert_non_null(in);
  char line[256];
  bool seen[K_COUNT] = {false};
  bool ready = false;
  while (!ready && fgets(line, sizeof line, in) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(line, "ready") == 0) {
      ready = true;
      break;
    }
    char *sp = strchr(line, ' ');
    if (sp == NULL) continue;
    *sp = '\0';
    for (int k = 0; k < K_COUNT; k++) {
      if (strcmp(line, keys[k]) != 0) continue;
      /* %p prints "(nil)" for NULL; nothing we ask for may be NULL. */
      assert_int_equal(ember_parse_u64(sp + 1, 0, UINT64_MAX, &f->v[k]), 0);
      seen[k] = true;
    }
  }
  fclose(in);
  assert_true(ready);
  for (int k = 0; k < K_COUNT; k++) assert_true(seen[k]);
  assert_int_equal(f->v[K_PID], (uint64_t)pid);
}

static ember__symbolizer_t *new_sym(bool dwarf) {
  ember__symbolizer_opts_t o = {.dwarf = dwarf, .perf_map_dir = EMBER_TEST_TMP};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  return s;
}

static bool ends_with(const char *s, const char *suffix) {
  if (s == NULL) return false;
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The GNU build-id of a file, read from its notes with libelf (not through
 * the symbolizer's own path, dwelf_elf_gnu_build_id). */
static void file_build_id(const char *path, char *hex, size_t size) {
  hex[0] = '\0';
  elf_version(EV_CURRENT);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  Elf *e = elf_begin(fd, ELF_C_READ, NULL);
  assert_non_null(e);
  for (Elf_Scn *scn = elf_nextscn(e, NULL); scn != NULL; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_NOTE) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    GElf_Nhdr nh;
    size_t off = 0, name_off, desc_off, next;
    while (d != NULL && (next = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
      const unsigned char *b = d->d_buf;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(b + name_off, "GNU", 4) == 0) {
        size_t k = 0;
        for (size_t i = 0; i < nh.n_descsz && k + 2 < size; i++) {
          k += (size_t)snprintf(hex + k, size - k, "%02x", b[desc_off + i]);
        }
      }
      off = next;
    }
  }
  elf_end(e);
  close(fd);
  assert_true(strlen(hex) >= 16);
}

static size_t symbolize(ember__symbolizer_t *s, pid_t pid, const ember__procmaps_t *m,
                        const uint64_t *ips, size_t nips, ember_frame_t *out, size_t cap) {
  size_t n = 12345;
  assert_int_equal(ember__symbolize(s, pid, m, ips, nips, out, cap, &n), 0);
  assert_true(n <= cap);
  return n;
}

static void start_one(state_t *st) {
  fixture_start(SYMFIX, &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
}

/* ------------------------------------------------------------------ */

static void test_symbolize_procmaps_parses_fake_root(void **state) {
  (void)state;
  const char *root = EMBER_TEST_TMP "/fakeproc";
  mkdir(root, 0755);
  mkdir(EMBER_TEST_TMP "/fakeproc/4242", 0755);
  FILE *f = fopen(EMBER_TEST_TMP "/fakeproc/4242/maps", "w");
  assert_non_null(f);
  fputs("00400000-00452000 r-xp 00000000 08:02 173521      /nonexistent/ember-fake-bin\n"
        "00651000-00652000 r--p 00051000 08:02 173521      /nonexistent/ember-fake-bin\n"
        "7f0000000000-7f0000010000 rwxp 00000000 00:00 0 \n"
        "7f0000020000-7f0000030000 r-xp 00000000 00:00 0            [anon:v8]\n"
        "7f0000040000-7f0000050000 r-xp 00001000 fd:01 99   /nonexistent/gone.so (deleted)\n"
        "7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0            [vdso]\n"
        "not a mapping line\n"
        "7ffe00000000-7ffe00001000 r-xp zz 00:00 0 [broken]\n"
        "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0    [vsyscall]",
        f);
  fclose(f);
  ember__procmaps_t *m = NULL;
  assert_int_equal(ember__procmaps_read(root, 4242, &m), 0);
  assert_int_equal(ember__procmaps_count(m), 6);
  assert_true(ember__procmaps_covers(m, 0x400000));
  assert_true(ember__procmaps_covers(m, 0x451fff));
  assert_false(ember__procmaps_covers(m, 0x452000));
  assert_false(ember__procmaps_covers(m, 0x651000)); /* not executable */
  assert_false(ember__procmaps_covers(m, 0x3fffff));
  assert_true(ember__procmaps_covers(m, 0xffffffffff600010ULL));
  assert_false(ember__procmaps_covers(NULL, 0x400000));

  ember__symbolizer_t *s = new_sym(true);
  uint64_t ips[] = {0x400010, 0x7f0000040011, 0xffffffffff600011ULL, 0x7f0000000011,
                    0x7f0000020011};
  ember_frame_t fr[8];
  size_t n = symbolize(s, 4242, m, ips, 5, fr, 8);
  assert_int_equal(n, 5);
  /* A file that cannot be opened: module and file offset, no function. */
  assert_null(fr[0].function);
  assert_string_equal(fr[0].module, "/nonexistent/ember-fake-bin");
  assert_int_equal(fr[0].address, 0x10);
  assert_int_equal(fr[0].kind, EMBER_FRAME_NATIVE);
  /* Deleted: " (deleted)" is not part of the path; the offset counts. */
  assert_string_equal(fr[1].module, "/nonexistent/gone.so");
  assert_int_equal(fr[1].address, 0x1011);
  /* [vsyscall] lives in the kernel half but is a user mapping. */
  assert_string_equal(fr[2].module, "[vsyscall]");
  assert_int_equal(fr[2].kind, EMBER_FRAME_NATIVE);
  assert_int_equal(fr[2].address, 0x11);
  /* Anonymous executable memory without a perf map: JIT, unnamed. */
  assert_int_equal(fr[3].kind, EMBER_FRAME_JIT);
  assert_null(fr[3].function);
  assert_null(fr[3].module);
  assert_int_equal(fr[3].address, 0x7f0000000011);
  assert_int_equal(fr[4].kind, EMBER_FRAME_JIT);
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(s, &stats);
  assert_int_equal(stats.unresolved, 5);
  assert_int_equal(stats.module_loads, 0);
  ember__symbolizer_free(s);
  ember__procmaps_free(m);
}

/* A process that maps a file it named /dev/watchdog in its own mount
 * namespace: /proc/PID/maps shows the path, and the host's device at that
 * path must not be opened (opening a watchdog arms it). Here the "device"
 * is a node of ours with the null device's numbers, named in a fake maps
 * with its own inode (so the inode check passes); inotify's IN_OPEN on it
 * proves the symbolizer never opened it. */
static void test_symbolize_mapped_device_never_opened(void **state) {
  (void)state;
  const char *root = EMBER_TEST_TMP "/fakeproc-dev";
  const char *dev = EMBER_TEST_TMP "/fakeproc-dev/watchdog";
  mkdir(root, 0755);
  mkdir(EMBER_TEST_TMP "/fakeproc-dev/4243", 0755);
  unlink(dev);
  if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) != 0) skip();
  struct stat sb;
  assert_int_equal(stat(dev, &sb), 0);
  FILE *f = fopen(EMBER_TEST_TMP "/fakeproc-dev/4243/maps", "w");
  assert_non_null(f);
  fprintf(f, "00400000-00452000 r-xp 00000000 00:05 %llu      %s\n", (unsigned long long)sb.st_ino,
          dev);
  fclose(f);
  int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  assert_true(ifd >= 0);
  assert_true(inotify_add_watch(ifd, dev, IN_OPEN) >= 0);
  ember__procmaps_t *m = NULL;
  assert_int_equal(ember__procmaps_read(root, 4243, &m), 0);
  ember__symbolizer_t *s = new_sym(true);
  uint64_t ips[] = {0x400010};
  ember_frame_t fr[4];
  size_t n = symbolize(s, 4243, m, ips, 1, fr, 4);
  assert_int_equal(n, 1);
  assert_null(fr[0].function);
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  assert_true(read(ifd, buf, sizeof buf) < 0); /* no event: never opened */
  close(ifd);
  ember__symbolizer_free(s);
  ember__procmaps_free(m);
  unlink(dev);
  unlink(EMBER_TEST_TMP "/fakeproc-dev/4243/maps");
  rmdir(EMBER_TEST_TMP "/fakeproc-dev/4243");
  rmdir(root);
}

static void test_symbolize_procmaps_missing_pid(void **state) {
  (void)state;
  ember__procmaps_t *m = NULL;
  int rc = ember__procmaps_read(NULL, 0x7ffffff0, &m);
  assert_true(rc == -ENOENT || rc == -ESRCH);
  assert_null(m);
  assert_int_equal(ember__procmaps_read(EMBER_TEST_TMP "/no-such-root", 1, &m), -ENOENT);
  assert_int_equal(ember__procmaps_read(NULL, 0, &m), -EINVAL);
  assert_int_equal(ember__procmaps_read(NULL, 1, NULL), -EINVAL);
  assert_int_equal(ember__procmaps_count(NULL), 0);
  ember__procmaps_free(NULL);
}

static void test_symbolize_native_names_and_build_id(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  assert_true(ember__procmaps_count(st->maps[0]) >= 2);
  assert_true(ember__procmaps_covers(st->maps[0], fx->v[K_ALPHA]));
  char bid[129];
  file_build_id(SYMFIX, bid, sizeof bid);

  st->sym = new_sym(false);
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA], fx->v[K_RET_BETA], fx->v[K_RET_GAMMA]};
  static const char *const want[] = {"alpha_leaf", "beta_middle", "gamma_root", "main"};
  ember_frame_t fr[8];
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 4, fr, 8);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(fr[i].function, want[i]);
    assert_true(ends_with(fr[i].module, "/symfix"));
    assert_string_equal(fr[i].build_id, bid);
    assert_null(fr[i].file);
    assert_int_equal(fr[i].line, 0);
    assert_int_equal(fr[i].kind, EMBER_FRAME_NATIVE);
    assert_int_equal(fr[i].address, 0); /* resolved frames aggregate by name */
  }
  /* A return address is looked up as ip - 1: the function's own start
   * address as a non-leaf belongs to whatever precedes it. */
  uint64_t exact[] = {fx->v[K_BETA], fx->v[K_BETA] + 1};
  n = symbolize(st->sym, fx->pid, st->maps[0], exact, 2, fr, 8);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "beta_middle");
  assert_string_equal(fr[1].function, "beta_middle");
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.module_loads, 1);
  assert_int_equal(stats.module_hits, 5);
  assert_int_equal(stats.unresolved, 0);
}

static void test_symbolize_dwarf_lines(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  st->sym = new_sym(true);
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA], fx->v[K_RET_BETA], fx->v[K_RET_GAMMA]};
  static const char *const want[] = {"alpha_leaf", "beta_middle", "gamma_root", "main"};
  ember_frame_t fr[8];
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 4, fr, 8);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(fr[i].function, want[i]);
    assert_true(ends_with(fr[i].file, "/symfix.c"));
    assert_true(ends_with(fr[i].module, "/symfix"));
    assert_non_null(fr[i].build_id);
  }
  /* The leaf is in alpha_leaf's prologue: its first lines. */
  assert_in_range(fr[0].line, fx->v[K_LINE_ALPHA], fx->v[K_LINE_ALPHA] + 3);
  /* Return addresses give exactly the line of the call. */
  assert_int_equal(fr[1].line, fx->v[K_LINE_BETA_CALL]);
  assert_int_equal(fr[2].line, fx->v[K_LINE_GAMMA_CALL]);
  assert_int_equal(fr[3].line, fx->v[K_LINE_MAIN_CALL]);
}

static void test_symbolize_inline_frames(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_INLINE]};
  ember_frame_t fr[8];

  st->sym = new_sym(true);
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 2, fr, 8);
  assert_int_equal(n, 4);
  assert_string_equal(fr[0].function, "alpha_leaf");
  /* One address, three frames: innermost first, each with the line where
   * its caller's code is. */
  assert_string_equal(fr[1].function, "inl_a");
  assert_int_equal(fr[1].line, fx->v[K_LINE_PROBE_CALL]);
  assert_string_equal(fr[2].function, "inl_b");
  assert_int_equal(fr[2].line, fx->v[K_LINE_INL_A_CALL]);
  assert_string_equal(fr[3].function, "inl_outer");
  assert_int_equal(fr[3].line, fx->v[K_LINE_INL_B_CALL]);
  for (size_t i = 1; i < 4; i++) {
    assert_true(ends_with(fr[i].file, "/symfix.c"));
    assert_true(ends_with(fr[i].module, "/symfix"));
  }

  /* Without DWARF the ELF symbol is all there is. */
  ember__symbolizer_t *plain = new_sym(false);
  n = symbolize(plain, fx->pid, st->maps[0], ips, 2, fr, 8);
  assert_int_equal(n, 2);
  assert_string_equal(fr[1].function, "inl_outer");
  assert_null(fr[1].file);
  ember__symbolizer_free(plain);
}

static void test_symbolize_libc_function(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  for (int dwarf = 0; dwarf < 2; dwarf++) {
    ember__symbolizer_t *s = new_sym(dwarf != 0);
    uint64_t ips[] = {fx->v[K_GETPID] + 1, fx->v[K_RET_GAMMA]};
    ember_frame_t fr[8];
    size_t n = symbolize(s, fx->pid, st->maps[0], ips, 2, fr, 8);
    assert_true(n >= 2);
    assert_non_null(fr[0].function);
    assert_non_null(strstr(fr[0].function, "getpid"));
    assert_non_null(strstr(fr[0].module, "libc"));
    assert_non_null(fr[0].build_id);
    assert_string_equal(fr[n - 1].function, "main");
    print_message("libc getpid (dwarf=%d): %s %s:%u\n", dwarf, fr[0].function,
                  fr[0].file ? fr[0].file : "-", fr[0].line);
    ember__symbolizer_free(s);
  }
}

static void write_file(const char *path, const char *mode, const char *text) {
  FILE *f = fopen(path, mode);
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

/* A JIT frame of a script with a source map beside it is named, filed
 * and lined as its author wrote it, its module the script; with source
 * maps off it keeps V8's name. (agent/jsmap.c's own tests have the
 * finding, caching and refusals.) */
static void test_symbolize_js_source_map(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  const uint64_t jit = fx->v[K_JIT];
  char script[PATH_MAX], map[PATH_MAX + 8], text[PATH_MAX + 64];
  snprintf(script, sizeof script, "%s/sym-%d.min.js", EMBER_TEST_TMP, (int)getpid());
  snprintf(map, sizeof map, "%s.map", script);
  write_file(script, "w", "function a(b){return b}\n");
  write_file(map, "w",
             "{\"version\":3,\"sources\":[\"../src/hot.ts\"],\"names\":[\"hotLoop\"],"
             "\"mappings\":\"SAIgBA\"}");
  snprintf(st->perf_map, sizeof st->perf_map, "%s/perf-%d.map", EMBER_TEST_TMP, (int)fx->pid);
  snprintf(text, sizeof text, "%llx 40 JS:*a %s:1:11\n", (unsigned long long)jit, script);
  write_file(st->perf_map, "w", text);
  for (int on = 0; on < 2; on++) {
    ember__symbolizer_opts_t o = {.perf_map_dir = EMBER_TEST_TMP, .sourcemaps = on};
    assert_int_equal(ember__symbolizer_new(&o, &st->sym), 0);
    ember_frame_t fr[8];
    uint64_t ips[2] = {jit + 0x10, fx->v[K_RET_GAMMA]};
    size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 2, fr, 8);
    assert_int_equal(n, 2);
    assert_int_equal(fr[0].kind, EMBER_FRAME_JIT);
    assert_string_equal(fr[1].function, "main");
    ember__jsmaps_stats_t js;
    ember__symbolizer_jsmaps_stats(st->sym, &js);
    if (on) {
      assert_string_equal(fr[0].function, "hotLoop");
      assert_true(ends_with(fr[0].file, "/src/hot.ts") && fr[0].file[0] == '/');
      assert_int_equal(fr[0].line, 5);
      assert_string_equal(fr[0].module, script);
      assert_int_equal(js.mapped, 1);
      assert_int_equal(js.maps, 1);
    } else {
      char v8[PATH_MAX + 32];
      snprintf(v8, sizeof v8, "JS:*a %s:1:11", script);
      assert_string_equal(fr[0].function, v8);
      assert_null(fr[0].file);
      assert_string_equal(fr[0].module, st->perf_map);
      assert_int_equal(js.mapped, 0);
    }
    ember__symbolizer_forget(st->sym, fx->pid);
    ember__symbolizer_free(st->sym);
    st->sym = NULL;
  }
  unlink(map);
  unlink(script);
}

static void test_symbolize_perf_map(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  const uint64_t jit = fx->v[K_JIT];
  snprintf(st->perf_map, sizeof st->perf_map, "%s/perf-%d.map", EMBER_TEST_TMP, (int)fx->pid);
  char text[512];
  snprintf(text, sizeof text, "%llx 40 JS:*fib /tmp/fib.js:1:13\n", (unsigned long long)jit);
  write_file(st->perf_map, "w", text);

  st->sym = new_sym(false);
  ember__symbolizer_stats_t stats;
  ember_frame_t fr[8];
  uint64_t ips[4] = {jit + 0x10, fx->v[K_RET_GAMMA]};
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 2, fr, 8);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "JS:*fib /tmp/fib.js:1:13");
  assert_int_equal(fr[0].kind, EMBER_FRAME_JIT);
  assert_string_equal(fr[0].module, st->perf_map);
  assert_string_equal(fr[1].function, "main");
  const char *first = fr[0].function;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.perf_map_loads, 1);

  /* A hit does not re-read. */
  n = symbolize(st->sym, fx->pid, st->maps[0], ips, 1, fr, 8);
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.perf_map_loads, 1);

  /* A miss in the same window does not re-read: at most one refresh per
   * pid between two forgets (a map growing by a line between samples
   * would cost a merge of the whole table per distinct stack). */
  write_file(st->perf_map, "a", "");
  ips[0] = jit + 0x1000;
  n = symbolize(st->sym, fx->pid, st->maps[0], ips, 1, fr, 8);
  assert_int_equal(n, 1);
  assert_null(fr[0].function);
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.perf_map_loads, 1);

  /* In the next window a miss re-reads, finds nothing, and leaves a JIT
   * frame with the address. */
  ember__symbolizer_forget(st->sym, 0);
  n = symbolize(st->sym, fx->pid, st->maps[0], ips, 1, fr, 8);
  assert_int_equal(n, 1);
  assert_null(fr[0].function);
  assert_int_equal(fr[0].kind, EMBER_FRAME_JIT);
  assert_int_equal(fr[0].address, jit + 0x1000);
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.perf_map_loads, 2);

  /* Node appends: the new code resolves after one re-read, trailing
   * whitespace trimmed; a partial last line waits for its newline. */
  snprintf(text, sizeof text,
           "%llx 80 LazyCompile:*bar /tmp/fib.js:5:1   \n%llx 10 JS:baz\n%llx 10 JS:partial",
           (unsigned long long)(jit + 0x1000), (unsigned long long)(jit + 0x2000),
           (unsigned long long)(jit + 0x2800));
  write_file(st->perf_map, "a", text);
  ember__symbolizer_forget(st->sym, 0);
  uint64_t three[] = {jit + 0x1010, jit + 0x2001, jit + 0x3000, jit + 0x2801};
  n = symbolize(st->sym, fx->pid, st->maps[0], three, 4, fr, 8);
  assert_int_equal(n, 4);
  assert_string_equal(fr[0].function, "LazyCompile:*bar /tmp/fib.js:5:1");
  assert_string_equal(fr[1].function, "JS:baz"); /* ip - 1 = jit + 0x2000 */
  assert_null(fr[2].function);
  assert_null(fr[3].function);
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.perf_map_loads, 3);              /* three misses, one re-read */
  assert_string_equal(first, "JS:*fib /tmp/fib.js:1:13"); /* still valid */

  /* The partial line completes; a later entry over old code wins. */
  snprintf(text, sizeof text, "\n%llx 20 JS:fib2\n", (unsigned long long)(jit + 0x8));
  write_file(st->perf_map, "a", text);
  ember__symbolizer_forget(st->sym, 0);
  uint64_t again[] = {jit + 0x3000, jit + 0x2801, jit + 0x11};
  n = symbolize(st->sym, fx->pid, st->maps[0], again, 3, fr, 8);
  assert_int_equal(n, 3);
  assert_null(fr[0].function);
  assert_string_equal(fr[1].function, "JS:partial");
  assert_string_equal(fr[2].function, "JS:fib2");

  /* Without a maps snapshot only the perf map (and kernel) resolve. */
  uint64_t nomaps[] = {jit + 0x2004, fx->v[K_RET_GAMMA]};
  n = symbolize(st->sym, fx->pid, NULL, nomaps, 2, fr, 8);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "JS:baz");
  assert_null(fr[1].function);
  assert_null(fr[1].module);

  /* forget drops the pid's map: the next lookup reads it anew. */
  ember__symbolizer_stats(st->sym, &stats);
  uint64_t loads = stats.perf_map_loads;
  ember__symbolizer_forget(st->sym, fx->pid);
  ips[0] = jit + 0x10;
  n = symbolize(st->sym, fx->pid, st->maps[0], ips, 1, fr, 8);
  assert_string_equal(fr[0].function, "JS:fib2");
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.perf_map_loads, loads + 1);
}

static void test_symbolize_kernel_fake_kallsyms(void **state) {
  (void)state;
  const char *path = EMBER_TEST_TMP "/kallsyms-fake";
  write_file(path, "w",
             "ffffffff81000000 T _stext\n"
             "ffffffff81000000 T startup_64\n"
             "ffffffff81001000 t do_thing\n"
             "ffffffff81002000 W weak_thing\n"
             "ffffffff81002800 D some_data\n"
             "ffffffffc0000000 t mod_func\t[mymod]\n"
             "ffffffffc0000100 t mod_func2\t[mymod]\n"
             "bogus line\n");
  ember__symbolizer_opts_t o = {.kallsyms = path};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  uint64_t ips[] = {0xffffffff81001010ULL,
                    0xffffffffc0000011ULL,
                    0xffffffff81000001ULL,
                    0xffffffff80000000ULL,
                    0xffffffffffffff80ULL /* PERF_CONTEXT_KERNEL: skipped */,
                    0xffffffffc0000101ULL};
  ember_frame_t fr[8];
  size_t n = symbolize(s, 1, NULL, ips, 6, fr, 8);
  assert_int_equal(n, 5);
  assert_string_equal(fr[0].function, "do_thing");
  assert_string_equal(fr[0].module, "[kernel]");
  assert_int_equal(fr[0].kind, EMBER_FRAME_KERNEL);
  assert_string_equal(fr[1].function, "mod_func"); /* ip - 1 */
  assert_string_equal(fr[1].module, "[mymod]");
  assert_string_equal(fr[2].function, "startup_64"); /* best alias of the address */
  assert_null(fr[3].function);                       /* before the first symbol */
  assert_string_equal(fr[3].module, "[kernel]");
  assert_int_equal(fr[3].address, 0xffffffff80000000ULL);
  assert_int_equal(fr[3].kind, EMBER_FRAME_KERNEL);
  assert_string_equal(fr[4].function, "mod_func2");
  ember__symbolizer_free(s);

  /* kptr_restrict shows zeros: no table, unresolved kernel frames. */
  write_file(path, "w", "0000000000000000 T _stext\n0000000000000000 t do_thing\n");
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  n = symbolize(s, 1, NULL, ips, 1, fr, 8);
  assert_int_equal(n, 1);
  assert_null(fr[0].function);
  assert_string_equal(fr[0].module, "[kernel]");
  assert_int_equal(fr[0].address, ips[0]);
  ember__symbolizer_free(s);

  /* No file at all: the same. */
  unlink(path);
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  n = symbolize(s, 1, NULL, ips, 1, fr, 8);
  assert_int_equal(n, 1);
  assert_null(fr[0].function);
  ember__symbolizer_free(s);
}

static void test_symbolize_kernel_real_kallsyms(void **state) {
  (void)state;
  FILE *f = fopen("/proc/kallsyms", "r");
  if (f == NULL) skip();
  char line[512];
  uint64_t addr = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, " T schedule\n") == NULL) continue;
    line[16] = '\0';
    char hex[24];
    snprintf(hex, sizeof hex, "0x%.16s", line);
    if (ember_parse_u64(hex, 0, UINT64_MAX, &addr) != 0) addr = 0;
    break;
  }
  fclose(f);
  if (addr == 0) skip(); /* hidden by kptr_restrict */
  ember__symbolizer_t *s = new_sym(false);
  uint64_t ips[] = {addr + 4, addr + 1};
  ember_frame_t fr[4];
  size_t n = symbolize(s, 1, NULL, ips, 2, fr, 4);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "schedule");
  assert_string_equal(fr[0].module, "[kernel]");
  assert_string_equal(fr[1].function, "schedule");
  ember__symbolizer_free(s);
}

static void test_symbolize_unmapped_address(void **state) {
  state_t *st = *state;
  start_one(st);
  st->sym = new_sym(true);
  uint64_t ips[] = {0x1000, 0x7ff0dead0000};
  ember_frame_t fr[4];
  size_t n = symbolize(st->sym, st->fx[0].pid, st->maps[0], ips, 2, fr, 4);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < 2; i++) {
    assert_null(fr[i].function);
    assert_null(fr[i].module);
    assert_int_equal(fr[i].address, ips[i]);
    assert_int_equal(fr[i].kind, EMBER_FRAME_NATIVE);
  }
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.unresolved, 2);
  /* Nothing at all is fine too. */
  assert_int_equal(symbolize(st->sym, st->fx[0].pid, st->maps[0], NULL, 0, fr, 4), 0);
  size_t dummy;
  assert_int_equal(ember__symbolize(NULL, 1, NULL, ips, 1, fr, 4, &dummy), -EINVAL);
  assert_int_equal(ember__symbolize(st->sym, 1, NULL, NULL, 1, fr, 4, &dummy), -EINVAL);
  assert_int_equal(ember__symbolize(st->sym, 1, NULL, ips, 1, NULL, 4, &dummy), -EINVAL);
  assert_int_equal(ember__symbolize(st->sym, 1, NULL, ips, 1, fr, 4, NULL), -EINVAL);
}

static void test_symbolize_after_exit(void **state) {
  state_t *st = *state;
  start_one(st);
  fixture_t fx = st->fx[0];
  fixture_stop(&st->fx[0]);
  /* The process is gone; its snapshot and the file on disk remain. */
  ember__procmaps_t *m = NULL;
  int rc = ember__procmaps_read(NULL, fx.pid, &m);
  assert_true(rc == -ENOENT || rc == -ESRCH);
  st->sym = new_sym(true);
  uint64_t ips[] = {fx.v[K_ALPHA] + 1, fx.v[K_RET_ALPHA], fx.v[K_GETPID] + 1};
  ember_frame_t fr[8];
  size_t n = symbolize(st->sym, fx.pid, st->maps[0], ips, 3, fr, 8);
  assert_int_equal(n, 3);
  assert_string_equal(fr[0].function, "alpha_leaf");
  assert_string_equal(fr[1].function, "beta_middle");
  assert_int_equal(fr[1].line, fx.v[K_LINE_BETA_CALL]);
  assert_non_null(strstr(fr[2].function, "getpid"));
}

static void copy_file(const char *from, const char *to) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  assert_true(in >= 0);
  unlink(to);
  int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  assert_true(out >= 0);
  char buf[65536];
  ssize_t r;
  while ((r = read(in, buf, sizeof buf)) > 0) assert_int_equal(write(out, buf, (size_t)r), r);
  assert_int_equal(r, 0);
  close(in);
  assert_int_equal(close(out), 0);
}

static void test_symbolize_module_cache_shared(void **state) {
  state_t *st = *state;
  copy_file(SYMFIX, SYMFIX_CPY);
  fixture_start(SYMFIX, &st->fx[0]);
  fixture_start(SYMFIX, &st->fx[1]);
  fixture_start(SYMFIX_CPY, &st->fx[2]);
  st->sym = new_sym(true);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(ember__procmaps_read(NULL, st->fx[i].pid, &st->maps[i]), 0);
    uint64_t ips[] = {st->fx[i].v[K_ALPHA] + 1, st->fx[i].v[K_RET_ALPHA]};
    ember_frame_t fr[4];
    size_t n = symbolize(st->sym, st->fx[i].pid, st->maps[i], ips, 2, fr, 4);
    assert_int_equal(n, 2);
    assert_string_equal(fr[0].function, "alpha_leaf");
    assert_string_equal(fr[1].function, "beta_middle");
    assert_int_equal(fr[1].line, st->fx[i].v[K_LINE_BETA_CALL]);
    /* The copy shares the module (same build-id) but keeps its own path. */
    assert_true(ends_with(fr[0].module, i == 2 ? "/symfix-copy" : "/symfix"));
  }
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.module_loads, 1);
  assert_int_equal(stats.module_hits, 5);
}

static void test_symbolize_cap_cuts_stack(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  st->sym = new_sym(true);
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA], fx->v[K_RET_BETA], fx->v[K_RET_GAMMA]};
  ember_frame_t fr[4];
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 4, fr, 2);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "alpha_leaf");
  assert_string_equal(fr[1].function, "beta_middle");
  /* Inline frames are cut on the root side too. */
  uint64_t inl[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_INLINE]};
  n = symbolize(st->sym, fx->pid, st->maps[0], inl, 2, fr, 3);
  assert_int_equal(n, 3);
  assert_string_equal(fr[1].function, "inl_a");
  assert_string_equal(fr[2].function, "inl_b");
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], ips, 4, NULL, 0), 0);
}

static void test_symbolize_lru_eviction(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  ember__symbolizer_opts_t o = {.dwarf = true, .max_modules = 1};
  assert_int_equal(ember__symbolizer_new(&o, &st->sym), 0);
  uint64_t a[] = {fx->v[K_RET_ALPHA]};
  uint64_t b[] = {fx->v[K_GETPID] + 1};
  ember_frame_t fr[4];
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], a, 1, fr, 4), 1);
  const char *name = fr[0].function, *file = fr[0].file, *module = fr[0].module;
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], b, 1, fr, 4), 1);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], a, 1, fr, 4), 1);
  assert_string_equal(fr[0].function, "beta_middle");
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.module_loads, 3); /* symfix, libc, symfix again */
  /* Strings of an evicted module live until the next forget (ASan checks). */
  assert_string_equal(name, "beta_middle");
  assert_true(ends_with(file, "/symfix.c"));
  assert_true(ends_with(module, "/symfix"));
  /* pid 0 has no state of its own: forgetting it only releases evicted
   * modules, and the cache keeps working. */
  ember__symbolizer_forget(st->sym, 0);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], b, 1, fr, 4), 1);
  assert_non_null(strstr(fr[0].function, "getpid"));
  ember__symbolizer_forget(st->sym, fx->pid);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], a, 1, fr, 4), 1);
  assert_string_equal(fr[0].function, "beta_middle");
}

/* symbol_cache_memory: modules are charged for what they hold (DWARF
 * too, growing with lookups) and the least recently used go past the
 * budget; a module's DWARF over a quarter of it is not kept. */
static void test_symbolize_byte_budget(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  uint64_t a[] = {fx->v[K_RET_ALPHA]};
  uint64_t b[] = {fx->v[K_GETPID] + 1};
  ember_frame_t fr[4];
  ember__symbolizer_stats_t stats;
  /* The default budget holds both. */
  ember__symbolizer_opts_t o = {.dwarf = true};
  assert_int_equal(ember__symbolizer_new(&o, &st->sym), 0);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], a, 1, fr, 4), 1);
  assert_true(ends_with(fr[0].file, "/symfix.c"));
  ember__symbolizer_stats(st->sym, &stats);
  uint64_t one = stats.bytes;
  assert_true(stats.debug_bytes > 0);
  assert_true(stats.debug_bytes < stats.bytes);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], b, 1, fr, 4), 1);
  ember__symbolizer_forget(st->sym, 0);
  ember__symbolizer_stats(st->sym, &stats);
  assert_true(stats.bytes > one);
  assert_int_equal(stats.evictions, 0);
  ember__symbolizer_free(st->sym);
  /* A budget of one byte: no DWARF is kept, and each new module evicts
   * the last; strings stay valid until the next forget. */
  o.max_bytes = 1;
  assert_int_equal(ember__symbolizer_new(&o, &st->sym), 0);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], a, 1, fr, 4), 1);
  assert_string_equal(fr[0].function, "beta_middle");
  assert_null(fr[0].file);
  const char *name = fr[0].function, *module = fr[0].module;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.debug_bytes, 0);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], b, 1, fr, 4), 1);
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.evictions, 1);
  assert_string_equal(name, "beta_middle");
  assert_true(ends_with(module, "/symfix"));
  ember__symbolizer_forget(st->sym, 0);
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.evictions, 2);
  assert_int_equal(stats.bytes, 0);
  assert_int_equal(symbolize(st->sym, fx->pid, st->maps[0], a, 1, fr, 4), 1);
  assert_string_equal(fr[0].function, "beta_middle");
}

/* Find `name` in an in-memory ELF image (the vdso) and return its offset
 * from the image's start. */
static uint64_t vdso_symbol(uintptr_t base, const char *name) {
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  size_t size = (size_t)(eh->e_shoff + (uint64_t)eh->e_shnum * eh->e_shentsize);
  elf_version(EV_CURRENT);
  Elf *e = elf_memory((char *)base, size);
  assert_non_null(e);
  uint64_t found = 0, base_vaddr = 0;
  size_t nph = 0;
  assert_int_equal(elf_getphdrnum(e, &nph), 0);
  for (size_t i = 0; i < nph; i++) {
    GElf_Phdr ph;
    if (gelf_getphdr(e, (int)i, &ph) != NULL && ph.p_type == PT_LOAD) {
      base_vaddr = ph.p_vaddr - ph.p_offset;
      break;
    }
  }
  for (Elf_Scn *scn = elf_nextscn(e, NULL); scn != NULL && found == 0; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_DYNSYM) continue;
    Elf_Data *d = elf_getdata(scn, NULL);
    for (size_t i = 0; d != NULL && i < sh.sh_size / sh.sh_entsize; i++) {
      GElf_Sym sym;
      if (gelf_getsym(d, (int)i, &sym) == NULL) continue;
      const char *n = elf_strptr(e, sh.sh_link, sym.st_name);
      if (n != NULL && strcmp(n, name) == 0) found = sym.st_value;
    }
  }
  elf_end(e);
  return found ? found - base_vaddr : 0;
}

static void test_symbolize_vdso(void **state) {
  state_t *st = *state;
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) skip();
  uint64_t off = vdso_symbol(base, "__vdso_clock_gettime");
  if (off == 0) skip();
  assert_int_equal(ember__procmaps_read(NULL, getpid(), &st->maps[0]), 0);
  st->sym = new_sym(false);
  uint64_t ips[] = {base + off + 1};
  ember_frame_t fr[2];
  assert_int_equal(symbolize(st->sym, getpid(), st->maps[0], ips, 1, fr, 2), 1);
  assert_non_null(fr[0].function);
  assert_non_null(strstr(fr[0].function, "clock_gettime"));
  assert_string_equal(fr[0].module, "[vdso]");
}

/* Every allocation the symbolizer makes may fail: each N must give
 * -ENOMEM or success, never a crash or a leak (ASan). */
static void test_symbolize_alloc_failures(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  const char *kpath = EMBER_TEST_TMP "/kallsyms-alloc";
  write_file(kpath, "w", "ffffffff81000000 T _stext\nffffffff81001000 t do_thing\n");
  snprintf(st->perf_map, sizeof st->perf_map, "%s/perf-%d.map", EMBER_TEST_TMP, (int)fx->pid);
  char text[128];
  snprintf(text, sizeof text, "%llx 40 JS:*fib\n", (unsigned long long)fx->v[K_JIT]);
  write_file(st->perf_map, "w", text);
  uint64_t ips[] = {
      fx->v[K_ALPHA] + 1,  fx->v[K_RET_INLINE],   fx->v[K_RET_ALPHA],    fx->v[K_GETPID] + 1,
      fx->v[K_JIT] + 0x10, 0xffffffff81001010ULL, fx->v[K_JIT] + 0x1000, 0x1000};
  bool done = false;
  long n_fail;
  for (n_fail = 0; n_fail < 100000 && !done; n_fail++) {
    ember__symbolizer_t *s = NULL;
    ember__procmaps_t *m = NULL;
    ember_frame_t fr[16];
    size_t n = 0;
    ember__symbolizer_opts_t o = {
        .dwarf = true, .perf_map_dir = EMBER_TEST_TMP, .kallsyms = kpath, .max_modules = 1};
    ember_alloc_fail_after(n_fail);
    int rc = ember__symbolizer_new(&o, &s);
    if (rc == 0) rc = ember__procmaps_read(NULL, fx->pid, &m);
    if (rc == 0) rc = ember__symbolize(s, fx->pid, m, ips, 8, fr, 16, &n);
    if (rc == 0) rc = ember__symbolize(s, fx->pid, m, ips, 8, fr, 16, &n);
    ember_alloc_fail_reset();
    if (rc == 0) {
      /* libc's getpid may bring inline frames of its own: look by name. */
      static const char *const want[] = {"alpha_leaf",  "inl_a",   "inl_outer",
                                         "beta_middle", "JS:*fib", "do_thing"};
      assert_true(n >= 10);
      assert_string_equal(fr[0].function, "alpha_leaf");
      for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        bool found = false;
        for (size_t i = 0; i < n; i++) {
          if (fr[i].function != NULL && strcmp(fr[i].function, want[w]) == 0) found = true;
        }
        assert_true(found);
      }
      assert_null(fr[n - 1].function);
      assert_int_equal(fr[n - 1].address, 0x1000);
      done = true;
    } else {
      assert_int_equal(rc, -ENOMEM);
    }
    ember__symbolizer_forget(s, fx->pid);
    ember__symbolizer_free(s);
    ember__procmaps_free(m);
  }
  assert_true(done);
  print_message("alloc failures: success after %ld allocations\n", n_fail - 1);
  unlink(kpath);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Costs for docs/internals/symbolize.md; bounds are loose (sanitizer
 * builds run this too). */
static void test_symbolize_costs(void **state) {
  state_t *st = *state;
  start_one(st);
  const fixture_t *fx = &st->fx[0];
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA], fx->v[K_RET_BETA], fx->v[K_RET_GAMMA],
                    fx->v[K_GETPID] + 1};
  ember_frame_t fr[16];
  for (int dwarf = 0; dwarf < 2; dwarf++) {
    ember__symbolizer_t *s = new_sym(dwarf != 0);
    double t0 = now_s();
    uint64_t libc[] = {fx->v[K_GETPID] + 1};
    symbolize(s, fx->pid, st->maps[0], libc, 1, fr, 16);
    double t1 = now_s();
    symbolize(s, fx->pid, st->maps[0], ips, 1, fr, 16);
    double t2 = now_s();
    const int rounds = 20000;
    for (int r = 0; r < rounds; r++) symbolize(s, fx->pid, st->maps[0], ips, 5, fr, 16);
    double t3 = now_s();
    double per = (t3 - t2) / (rounds * 5.0) * 1e9;
    print_message("dwarf=%d: libc module load %.2f ms, symfix load %.2f ms, %.0f ns/address\n",
                  dwarf, (t1 - t0) * 1e3, (t2 - t1) * 1e3, per);
    assert_true(per < (dwarf ? 200000.0 : 20000.0));
    ember__symbolizer_free(s);
  }
  FILE *f = fopen("/proc/kallsyms", "r");
  if (f != NULL) {
    fclose(f);
    ember__symbolizer_t *s = new_sym(false);
    uint64_t k[] = {0xffffffff81001010ULL};
    double t0 = now_s();
    symbolize(s, 1, NULL, k, 1, fr, 16);
    double t1 = now_s();
    for (int r = 0; r < 100000; r++) symbolize(s, 1, NULL, k, 1, fr, 16);
    double t2 = now_s();
    print_message("kallsyms load %.2f ms, %.0f ns/kernel address\n", (t1 - t0) * 1e3,
                  (t2 - t1) / 100000 * 1e9);
    ember__symbolizer_free(s);
  }
}

/* ------------------------------------------------------------------ */
/* Hostile perf maps: the process that owns a perf map controls it.    */

#define SECRET_NAME "EMBER_ROOT_ONLY_SECRET"
#define NOBODY      65534

/* A directory anyone may create files in, as /tmp. */
static void hostile_dir(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/ember-hostile-XXXXXX");
  assert_non_null(mkdtemp(dir));
  assert_int_equal(chmod(dir, 01777), 0);
}

/* A file only root may read whose lines would name SECRET_NAME. */
static void secret_file(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  static const char text[] = "10000 1000 " SECRET_NAME "\n";
  assert_int_equal(write(fd, text, sizeof text - 1), (ssize_t)(sizeof text - 1));
  close(fd);
}

static void wait_byte(int fd) {
  char c;
  ssize_t r;
  do {
    r = read(fd, &c, 1);
  } while (r < 0 && errno == EINTR);
  assert_int_equal(r, 1);
}

static void reap(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
}

/* Also re-arms the parent-death signal, which a change of uid clears. */
static void become_nobody(void) {
  if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0) _exit(126);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
}

/* Symbolize a JIT address of `pid` with no maps snapshot, so only its perf
 * map can name it; returns the function (NULL when unnamed). */
static const char *jit_name(ember__symbolizer_t *s, pid_t pid) {
  uint64_t ips[] = {0x10010};
  ember_frame_t fr[4];
  size_t n = symbolize(s, pid, NULL, ips, 1, fr, 4);
  assert_int_equal(n, 1);
  return fr[0].function;
}

/* As user nobody, make /tmp/perf-PID.map a symbolic link to a file only
 * root can read: the root agent must not read it (it did: a plain open). */
static void test_symbolize_perf_map_symlink_refused(void **state) {
  (void)state;
  char dir[64], secret[PATH_MAX];
  hostile_dir(dir, sizeof dir);
  snprintf(secret, sizeof secret, "%s/secret", dir);
  secret_file(secret);
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    become_nobody();
    char link[PATH_MAX];
    snprintf(link, sizeof link, "%s/perf-%d.map", dir, (int)getpid());
    if (symlink(secret, link) != 0) _exit(125);
    if (write(p[1], "r", 1) != 1) _exit(124);
    pause();
    _exit(0);
  }
  close(p[1]);
  wait_byte(p[0]);
  close(p[0]);
  ember__symbolizer_opts_t o = {.perf_map_dir = dir};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  ember__safe_stats_t before, after;
  ember__safe_stats(&before);
  const char *name = jit_name(s, pid);
  ember__safe_stats(&after);
  assert_null(name);
  assert_true(after.symlinks > before.symlinks);
  /* A hard link is as bad; protected_hardlinks stops nobody making one to
   * a root file, and the agent refuses any second link anyway. */
  char map[PATH_MAX], hard[PATH_MAX];
  snprintf(map, sizeof map, "%s/perf-%d.map", dir, (int)pid);
  snprintf(hard, sizeof hard, "%s/hard", dir);
  assert_int_equal(unlink(map), 0);
  assert_int_equal(link(secret, hard), 0);
  assert_int_equal(link(secret, map), 0);
  ember__symbolizer_forget(s, pid);
  assert_null(jit_name(s, pid));
  ember__symbolizer_free(s);
  reap(pid);
  unlink(map);
  unlink(hard);
  unlink(secret);
  rmdir(dir);
}

/* The same through a user's own /tmp: a process in its own mount and pid
 * namespaces (its perf map is read as /proc/PID/root/tmp/perf-NSPID.map)
 * whose /tmp is a tmpfs it owns, where fs.protected_symlinks never
 * applies. */
static void test_symbolize_perf_map_symlink_in_own_tmp(void **state) {
  (void)state;
  char secret[] = EMBER_TEST_TMP "/secret-XXXXXX";
  int sfd = mkstemp(secret);
  assert_true(sfd >= 0);
  close(sfd);
  secret_file(secret);
  int p[2], q[2]; /* p: the inner pid, from the middle process; q: ready */
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  assert_int_equal(pipe2(q, O_CLOEXEC), 0);
  pid_t mid = fork();
  assert_true(mid >= 0);
  if (mid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) _exit(120);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(121);
    pid_t inner = fork();
    if (inner < 0) _exit(122);
    if (inner == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") != 0) _exit(123);
      become_nobody();
      if (symlink(secret, "/tmp/perf-1.map") != 0) _exit(125);
      if (write(q[1], "r", 1) != 1) _exit(124);
      pause();
      _exit(0);
    }
    int32_t v = (int32_t)inner;
    if (write(p[1], &v, sizeof v) != (ssize_t)sizeof v) _exit(124);
    while (waitpid(inner, NULL, 0) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(p[1]);
  close(q[1]);
  int32_t inner = 0;
  ssize_t r;
  do {
    r = read(p[0], &inner, sizeof inner);
  } while (r < 0 && errno == EINTR);
  assert_int_equal(r, (ssize_t)sizeof inner);
  close(p[0]);
  wait_byte(q[0]);
  close(q[0]);
  /* It is that process: its namespace numbers it 1. */
  char status[64], buf[4096];
  snprintf(status, sizeof status, "/proc/%d/status", (int)inner);
  FILE *f = fopen(status, "re");
  assert_non_null(f);
  size_t blen = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[blen] = '\0';
  char want[64];
  snprintf(want, sizeof want, "NSpid:\t%d\t1\n", (int)inner);
  assert_non_null(strstr(buf, want));
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(NULL, &s), 0); /* perf maps in /tmp */
  assert_null(jit_name(s, (pid_t)inner));
  ember__symbolizer_free(s);
  reap((pid_t)inner);
  reap(mid);
  unlink(secret);
}

/* A FIFO as perf map blocked the agent's close thread in open() for good. */
static void test_symbolize_perf_map_fifo(void **state) {
  (void)state;
  char dir[64], fifo[PATH_MAX];
  hostile_dir(dir, sizeof dir);
  snprintf(fifo, sizeof fifo, "%s/perf-%d.map", dir, (int)getpid());
  assert_int_equal(mkfifo(fifo, 0666), 0);
  ember__symbolizer_opts_t o = {.perf_map_dir = dir};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  alarm(60); /* the old code never returns: fail rather than hang */
  for (int i = 0; i < 10; i++) assert_null(jit_name(s, getpid()));
  alarm(0);
  ember__symbolizer_free(s);
  unlink(fifo);
  rmdir(dir);
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "re");
  assert_non_null(f);
  unsigned long size = 0, resident = 0;
  assert_int_equal(fscanf(f, "%lu %lu", &size, &resident), 2);
  fclose(f);
  return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* A 2 GB sparse perf map (zeros, no newline) was read from the start for
 * every stack: a core for good. Now it costs one bounded read, then an
 * fstat per stack; CPU and memory are measured as this process got them. */
static void test_symbolize_perf_map_sparse(void **state) {
  (void)state;
  char dir[64], map[PATH_MAX];
  hostile_dir(dir, sizeof dir);
  snprintf(map, sizeof map, "%s/perf-%d.map", dir, (int)getpid());
  int fd = open(map, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)2 << 30), 0);
  close(fd);
  ember__symbolizer_opts_t o = {.perf_map_dir = dir};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  const int stacks = 2000;
  uint64_t rss0 = rss_bytes();
  double t0 = cpu_s();
  int done = 0;
  for (; done < stacks && cpu_s() - t0 < 20; done++) {
    uint64_t ips[] = {0x10000 + (uint64_t)done * 64, 0x20000, 0x30000};
    ember_frame_t fr[4];
    ember__symbolizer_forget(s, 0); /* each stack its own window: a refresh each */
    size_t n = symbolize(s, getpid(), NULL, ips, 3, fr, 4);
    assert_int_equal(n, 3);
    assert_null(fr[0].function);
  }
  double cpu = cpu_s() - t0;
  uint64_t grown = rss_bytes() - rss0;
  print_message("2 GB sparse perf map: %d stacks in %.3f s of CPU, RSS +%.1f MiB\n", done, cpu,
                (double)grown / (1 << 20));
  assert_int_equal(done, stacks);
  assert_true(cpu < 5.0);           /* measured ~0.05 s; ASan ~0.2 s */
  assert_true(grown < (48u << 20)); /* the read is bounded to 32 MiB and nothing of it is kept */
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(s, &stats);
  assert_int_equal(stats.perf_map_loads, (uint64_t)stacks);
  ember__symbolizer_free(s);
  unlink(map);
  rmdir(dir);
}

/* A binary its owner may rewrite is read with pread, not mapped (a file
 * truncated while mapped would raise SIGBUS in the agent; a running
 * executable cannot be cut, ETXTBSY, but a library it loaded can): names
 * and DWARF lines still resolve through reads. */
static void test_symbolize_user_owned_binary_not_mapped(void **state) {
  state_t *st = *state;
  copy_file(SYMFIX, SYMFIX_CPY);
  assert_int_equal(chown(SYMFIX_CPY, NOBODY, NOBODY), 0);
  fixture_start(SYMFIX_CPY, &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  const fixture_t *fx = &st->fx[0];
  st->sym = new_sym(true);
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA], fx->v[K_RET_BETA], fx->v[K_RET_GAMMA]};
  static const char *const want[] = {"alpha_leaf", "beta_middle", "gamma_root", "main"};
  ember_frame_t fr[8];
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 4, fr, 8);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(fr[i].function, want[i]);
    assert_true(ends_with(fr[i].file, "/symfix.c"));
  }
  assert_int_equal(fr[1].line, fx->v[K_LINE_BETA_CALL]);
}

/* A root process (a rootful container) may truncate root's own files: a
 * root-owned, not group/world-writable binary is still read, not mapped,
 * when the process mapping it runs as root. */
static void test_symbolize_root_target_not_mapped(void **state) {
  state_t *st = *state;
  copy_file(SYMFIX, SYMFIX_CPY);
  assert_int_equal(chown(SYMFIX_CPY, 0, 0), 0);
  assert_int_equal(chmod(SYMFIX_CPY, 0755), 0);
  fixture_start(SYMFIX_CPY, &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  const fixture_t *fx = &st->fx[0];
  st->sym = new_sym(true);
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA]};
  ember_frame_t fr[8];
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 2, fr, 8);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "alpha_leaf");
  assert_string_equal(fr[1].function, "beta_middle");
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_true(stats.module_loads >= 1);
  assert_int_equal(stats.files_mapped, 0);
}

/* ------------------------------------------------------------------ */
/* Separate debug info, MiniDebugInfo and demangling, on the stripped    */
/* copies of symfix and klass that tests/programs/debugfix.sh makes.     */

#define DEBUGFIX EMBER_DEBUG_FIXTURES
#define KLASS    EMBER_TEST_PROGRAMS "/klass"

static ember__symbolizer_t *new_sym_debug(bool dwarf, const char *debug_dirs, bool no_demangle) {
  ember__symbolizer_opts_t o = {.dwarf = dwarf,
                                .perf_map_dir = EMBER_TEST_TMP,
                                .debug_dirs = debug_dirs,
                                .no_demangle = no_demangle};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  return s;
}

/* Start klass (or a copy) and read its "pid", "method", "ret_method" and
 * "ret_inline" (ret_inline may be NULL). */
static void klass_start(const char *exe, fixture_t *f, uint64_t *method, uint64_t *ret,
                        uint64_t *ret_inline) {
  int p[2];
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  pid_t parent = getpid();
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(p[1], STDOUT_FILENO);
    execl(exe, "klass", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  f->pid = pid;
  FILE *in = fdopen(p[0], "r");
  assert_non_null(in);
  char line[256];
  bool ready = false;
  int seen = 0;
  uint64_t vpid = 0, inl = 0;
  while (fgets(line, sizeof line, in) != NULL) {
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(line, "ready") == 0) {
      ready = true;
      break;
    }
    char *sp = strchr(line, ' ');
    if (sp == NULL) continue;
    *sp = '\0';
    uint64_t *dst = strcmp(line, "pid") == 0          ? &vpid
                    : strcmp(line, "method") == 0     ? method
                    : strcmp(line, "ret_method") == 0 ? ret
                    : strcmp(line, "ret_inline") == 0 ? &inl
                                                      : NULL;
    if (dst == NULL) continue;
    assert_int_equal(ember_parse_u64(sp + 1, 0, UINT64_MAX, dst), 0);
    seen++;
  }
  fclose(in);
  assert_true(ready);
  assert_int_equal(seen, 4);
  assert_int_equal(vpid, (uint64_t)pid);
  if (ret_inline != NULL) *ret_inline = inl;
}

/* The hot frames of a running C++ program read as its source does. */
static void test_symbolize_cpp_demangled(void **state) {
  state_t *st = *state;
  uint64_t method = 0, ret = 0, inline_ret = 0;
  klass_start(KLASS, &st->fx[0], &method, &ret, &inline_ret);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  uint64_t ips[] = {method + 4, ret};
  ember_frame_t fr[8];
  for (int dwarf = 0; dwarf < 2; dwarf++) {
    ember__symbolizer_t *s = new_sym_debug(dwarf != 0, "", false);
    size_t n = symbolize(s, st->fx[0].pid, st->maps[0], ips, 2, fr, 8);
    assert_int_equal(n, 2);
    assert_string_equal(fr[0].function, "ns::Klass::method(int)");
    assert_string_equal(fr[1].function, "main");
    assert_true(ends_with(fr[0].module, "/klass"));
    if (dwarf) assert_true(ends_with(fr[0].file, "/klass.cpp"));
    ember__symbolizer_free(s);
  }
  /* An inline frame is named by its demangled linkage name, not DWARF's
   * short "step". */
  uint64_t inl[] = {method + 4, inline_ret};
  ember__symbolizer_t *s = new_sym_debug(true, "", false);
  size_t n = symbolize(s, st->fx[0].pid, st->maps[0], inl, 2, fr, 8);
  assert_int_equal(n, 3);
  assert_string_equal(fr[1].function, "ns::Klass::step()");
  assert_true(ends_with(fr[1].file, "/klass.cpp"));
  assert_string_equal(fr[2].function, "ns::Klass::method(int)");
  ember__symbolizer_free(s);
  /* Asked not to, the symbolizer keeps the mangled name, and DWARF's. */
  s = new_sym_debug(true, "", true);
  n = symbolize(s, st->fx[0].pid, st->maps[0], ips, 1, fr, 8);
  assert_int_equal(n, 1);
  assert_string_equal(fr[0].function, "_ZN2ns5Klass6methodEi");
  n = symbolize(s, st->fx[0].pid, st->maps[0], inl, 2, fr, 8);
  assert_int_equal(n, 3);
  assert_string_equal(fr[1].function, "step");
  ember__symbolizer_free(s);
}

static void expect_symfix_names(ember__symbolizer_t *s, const fixture_t *fx,
                                const ember__procmaps_t *m, bool lines) {
  uint64_t ips[] = {fx->v[K_ALPHA] + 1, fx->v[K_RET_ALPHA], fx->v[K_RET_BETA], fx->v[K_RET_GAMMA]};
  static const char *const want[] = {"alpha_leaf", "beta_middle", "gamma_root", "main"};
  ember_frame_t fr[8];
  size_t n = symbolize(s, fx->pid, m, ips, 4, fr, 8);
  assert_int_equal(n, 4);
  for (size_t i = 0; i < n; i++) {
    assert_string_equal(fr[i].function, want[i]);
    assert_true(ends_with(fr[i].module, "/symfix"));
    assert_non_null(fr[i].build_id);
    assert_int_equal(fr[i].address, 0);
    if (lines) {
      assert_true(ends_with(fr[i].file, "/symfix.c"));
    } else {
      assert_null(fr[i].file);
    }
  }
  if (lines) {
    assert_int_equal(fr[1].line, fx->v[K_LINE_BETA_CALL]);
    assert_int_equal(fr[3].line, fx->v[K_LINE_MAIN_CALL]);
  }
}

/* A stripped binary whose debug file sits in the debug root under its
 * build-id: names, and file and line from the debug file's DWARF. */
static void test_symbolize_stripped_build_id(void **state) {
  state_t *st = *state;
  fixture_start(DEBUGFIX "/stripped/symfix", &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  const fixture_t *fx = &st->fx[0];
  st->sym = new_sym_debug(true, "/nonexistent-debug:" DEBUGFIX "/root", false);
  expect_symfix_names(st->sym, fx, st->maps[0], true);
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.debug_files, 1);
  assert_int_equal(stats.debug_refused, 0);
  assert_int_equal(stats.unresolved, 0);
  /* Symbols only, when the debug file's DWARF is not wanted. */
  ember__symbolizer_opts_t o = {.dwarf = true,
                                .no_detached_dwarf = true,
                                .perf_map_dir = EMBER_TEST_TMP,
                                .debug_dirs = DEBUGFIX "/root"};
  ember__symbolizer_t *s = NULL;
  assert_int_equal(ember__symbolizer_new(&o, &s), 0);
  expect_symfix_names(s, fx, st->maps[0], false);
  ember__symbolizer_free(s);
}

/* Without its debug file, a frame in a stripped binary keeps its module
 * and file offset. */
static void test_symbolize_stripped_unnamed(void **state) {
  state_t *st = *state;
  fixture_start(DEBUGFIX "/stripped/symfix", &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  const fixture_t *fx = &st->fx[0];
  st->sym = new_sym_debug(true, "", false);
  uint64_t ips[] = {fx->v[K_ALPHA] + 1};
  ember_frame_t fr[4];
  size_t n = symbolize(st->sym, fx->pid, st->maps[0], ips, 1, fr, 4);
  assert_int_equal(n, 1);
  assert_null(fr[0].function);
  assert_true(ends_with(fr[0].module, "/stripped/symfix"));
  assert_non_null(fr[0].build_id);
  /* module+offset: the file offset of the address. */
  const ember__mapping_t *mp = ember__procmaps_find(st->maps[0], fx->v[K_ALPHA]);
  assert_non_null(mp);
  assert_int_equal(fr[0].address, fx->v[K_ALPHA] + 1 - mp->start + mp->offset);
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.unresolved, 1);
  assert_int_equal(stats.debug_files + stats.minidebug, 0);
}

/* .gnu_debuglink: the debug file in .debug/ beside the binary, found
 * through the process's root. */
static void test_symbolize_debuglink(void **state) {
  state_t *st = *state;
  fixture_start(DEBUGFIX "/linked/symfix", &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  st->sym = new_sym_debug(true, "", false);
  expect_symfix_names(st->sym, &st->fx[0], st->maps[0], true);
  ember__debuginfo_stats_t d;
  ember__symbolizer_debuginfo_stats(st->sym, &d);
  assert_int_equal(d.by_link, 1);
  assert_int_equal(d.by_build_id, 0);
}

/* A binary with only MiniDebugInfo: its local functions are named from
 * .gnu_debugdata (no lines: it has no DWARF). */
static void test_symbolize_minidebug(void **state) {
  state_t *st = *state;
  fixture_start(DEBUGFIX "/mini/symfix", &st->fx[0]);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  st->sym = new_sym_debug(true, "", false);
  expect_symfix_names(st->sym, &st->fx[0], st->maps[0], false);
  ember__symbolizer_stats_t stats;
  ember__symbolizer_stats(st->sym, &stats);
  assert_int_equal(stats.minidebug, 1);
  assert_int_equal(stats.debug_files, 0);

  /* And C++ names from MiniDebugInfo are demangled too. */
  uint64_t method = 0, ret = 0;
  klass_start(DEBUGFIX "/mini/klass", &st->fx[1], &method, &ret, NULL);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[1].pid, &st->maps[1]), 0);
  uint64_t ips[] = {method + 4, ret};
  ember_frame_t fr[4];
  size_t n = symbolize(st->sym, st->fx[1].pid, st->maps[1], ips, 2, fr, 4);
  assert_int_equal(n, 2);
  assert_string_equal(fr[0].function, "ns::Klass::method(int)");
  assert_string_equal(fr[1].function, "main");
}

/* The cost of demangling, once per module: libstdc++'s table built with
 * and without it (for docs/internals/debuginfo.md). */
static void test_symbolize_demangle_cost(void **state) {
  state_t *st = *state;
  uint64_t method = 0, ret = 0;
  klass_start(KLASS, &st->fx[0], &method, &ret, NULL);
  assert_int_equal(ember__procmaps_read(NULL, st->fx[0].pid, &st->maps[0]), 0);
  /* An address in libstdc++'s text. */
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)st->fx[0].pid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  uint64_t lib = 0;
  while (lib == 0 && fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, "libstdc++") == NULL || strstr(line, " r-xp ") == NULL) continue;
    char *dash = strchr(line, '-');
    assert_non_null(dash);
    *dash = '\0';
    char hex[32];
    snprintf(hex, sizeof hex, "0x%.24s", line);
    assert_int_equal(ember_parse_u64(hex, 1, UINT64_MAX, &lib), 0);
  }
  fclose(f);
  assert_true(lib != 0);
  double ms[2] = {0, 0};
  const int rounds = 5;
  for (int r = 0; r < rounds; r++) {
    for (int no = 0; no < 2; no++) {
      ember__symbolizer_t *s = new_sym_debug(false, "", no != 0);
      uint64_t ips[] = {lib + 0x1000};
      ember_frame_t fr[4];
      double t0 = now_s();
      symbolize(s, st->fx[0].pid, st->maps[0], ips, 1, fr, 4);
      ms[no] += (now_s() - t0) * 1e3 / rounds;
      ember__symbolizer_free(s);
    }
  }
  print_message("libstdc++ module load: %.2f ms demangled, %.2f ms mangled (+%.2f ms)\n", ms[0],
                ms[1], ms[0] - ms[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_symbolize_procmaps_parses_fake_root, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_procmaps_missing_pid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_mapped_device_never_opened, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_native_names_and_build_id, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_dwarf_lines, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_inline_frames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_libc_function, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_perf_map, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_js_source_map, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_kernel_fake_kallsyms, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_kernel_real_kallsyms, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_unmapped_address, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_after_exit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_module_cache_shared, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_cap_cuts_stack, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_byte_budget, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_lru_eviction, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_vdso, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_alloc_failures, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_costs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_user_owned_binary_not_mapped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_root_target_not_mapped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_cpp_demangled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_stripped_build_id, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_stripped_unnamed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_debuglink, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_minidebug, setup, teardown),
      cmocka_unit_test_setup_teardown(test_symbolize_demangle_cost, setup, teardown),
      cmocka_unit_test(test_symbolize_perf_map_symlink_refused),
      cmocka_unit_test(test_symbolize_perf_map_symlink_in_own_tmp),
      cmocka_unit_test(test_symbolize_perf_map_sparse),
      cmocka_unit_test(test_symbolize_perf_map_fifo),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
