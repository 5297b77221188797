/* Source maps of a process's scripts (agent/jsmap.c), with real files:
 * an external map named by the script's comment, an inline data: map, a
 * SCRIPT.map beside it, none; the cache by identity and its memory bound;
 * and hostile files (links, FIFOs, root-only files of a user's process,
 * broken and huge maps), each refused and counted with the frame keeping
 * its generated name. A fake proc root gives the "process" its owner; its
 * root is the real one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
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

#include "jsmap.h"

/* "function a(b){...}" at line 1 column 1 of app.min.js, from
 * src/hot.ts line 5 column 17, "a" being hotLoop: one segment at column 9
 * (S) of source 0 (A), line 4 (I), column 16 (gB), name 0 (A). A second
 * segment at column 30 (qB, +21) of source 1 (C), line 0 (J, -4), column
 * 0 (hB, -16), name 1 (C): "c" is coldLoop in src/cold.ts. */
#define MAP                                                                                        \
  "{\"version\":3,\"sources\":[\"../src/hot.ts\",\"../src/cold.ts\"],\"names\":[\"hotLoop\","      \
  "\"coldLoop\"],\"mappings\":\"SAIgBA,qBCJhBC\"}"
#define PID 4242

typedef struct fx {
  char dir[64], proc[PATH_MAX], script[PATH_MAX];
  ember__jsmaps_t *m;
} fx_t;

static void put(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
  assert_int_equal(fclose(fp), 0);
}

/* The fake process PID, owned by `uid`, its root the real one. */
static void make_proc(fx_t *f, uid_t uid) {
  char p[PATH_MAX + 16];
  snprintf(p, sizeof p, "%s/%d", f->proc, PID);
  assert_int_equal(mkdir(p, 0555), 0);
  assert_int_equal(chown(p, uid, uid), 0);
  snprintf(p, sizeof p, "%s/%d/root", f->proc, PID);
  assert_int_equal(symlink("/", p), 0);
}

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  snprintf(f->dir, sizeof f->dir, "/tmp/ember-jsmap-XXXXXX");
  if (mkdtemp(f->dir) == NULL) return -1;
  chmod(f->dir, 0755);
  snprintf(f->proc, sizeof f->proc, "%s/proc", f->dir);
  if (mkdir(f->proc, 0755) != 0) return -1;
  snprintf(f->script, sizeof f->script, "%s/app.min.js", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  ember__jsmaps_free(f->m);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
  if (system(cmd) != 0) return -1;
  free(f);
  return 0;
}

static void start(fx_t *f, uint64_t max_bytes) {
  ember__jsmaps_opts_t o = {.proc_root = f->proc, .max_bytes = max_bytes};
  assert_int_equal(ember__jsmaps_new(&o, &f->m), 0);
}

/* The V8 name of `fn` at 1-based column `col` of the script. */
static int frame(fx_t *f, const char *fn, unsigned col, ember__jsframe_t *out) {
  char name[PATH_MAX + 64];
  snprintf(name, sizeof name, "JS:*%s %s:1:%u", fn, f->script, col);
  return ember__jsmaps_frame(f->m, PID, name, out);
}

static ember__jsmaps_stats_t stats(const fx_t *f) {
  ember__jsmaps_stats_t st;
  ember__jsmaps_stats(f->m, &st);
  return st;
}

/* A script whose last line is `last_line`, its content new each time (a
 * new identity even within the file system's mtime granularity). */
static void script_with(fx_t *f, const char *last_line) {
  static unsigned serial;
  char text[2 * PATH_MAX];
  snprintf(text, sizeof text, "function a(b){return b}const c=d=>d;\n// %u\n%s\n\n", serial++,
           last_line);
  put(f->script, text);
}

/* `file` is absolute, without "." or "..", and ends in `tail`. */
static void resolved(const char *file, const char *tail) {
  size_t n = strlen(file), t = strlen(tail);
  if (file[0] != '/' || n < t || strcmp(file + n - t, tail) != 0 || strstr(file, "/.") != NULL)
    fail_msg("source %s is not an absolute path ending in %s", file, tail);
}

/* The two functions of the script map to their sources, resolved against
 * the map's directory. */
static void mapped_hot(fx_t *f) {
  ember__jsframe_t j;
  assert_int_equal(frame(f, "a", 11, &j), 1);
  assert_string_equal(j.function, "hotLoop");
  resolved(j.file, "/src/hot.ts");
  assert_int_equal(j.line, 5);
  assert_string_equal(j.script, f->script);
  assert_int_equal(frame(f, "c", 32, &j), 1);
  assert_string_equal(j.function, "coldLoop");
  resolved(j.file, "/src/cold.ts");
  assert_int_equal(j.line, 1);
}

static void test_external_map(void **state) {
  fx_t *f = *state;
  make_proc(f, 0);
  char map[PATH_MAX + 8];
  snprintf(map, sizeof map, "%s/maps", f->dir);
  assert_int_equal(mkdir(map, 0755), 0);
  snprintf(map, sizeof map, "%s/maps/app.js.map", f->dir);
  put(map, MAP);
  script_with(f, "//# sourceMappingURL=./maps/../maps/app.js.map");
  start(f, 0);
  mapped_hot(f);
  ember__jsframe_t j;
  assert_int_equal(frame(f, "a", 11, &j), 1);
  char want[PATH_MAX + 16];
  snprintf(want, sizeof want, "%s/src/hot.ts", f->dir); /* maps/../src/hot.ts */
  assert_string_equal(j.file, want);
  /* Once per epoch per script: the same frames again read nothing. */
  ember__jsmaps_forget(f->m, 0);
  mapped_hot(f);
  ember__jsmaps_stats_t st = stats(f);
  assert_int_equal(st.scripts, 1);
  assert_int_equal(st.maps, 1);
  assert_int_equal(st.mapped, 5);
  assert_int_equal(stats(f).scripts, 1);
  assert_int_equal(st.held, 1);
  assert_true(st.bytes > 0);
  /* The process exits; its last window closes after: the script it ran
   * is the one found before. */
  char root[PATH_MAX + 32];
  snprintf(root, sizeof root, "%s/%d/root", f->proc, PID);
  assert_int_equal(unlink(root), 0);
  ember__jsmaps_forget(f->m, 0);
  mapped_hot(f);
  assert_int_equal(symlink("/", root), 0);
  /* A position of no segment keeps its name. */
  assert_int_equal(frame(f, "a", 3, &j), 0);
  assert_int_equal(stats(f).unmapped, 1);
  /* Not a script function: untouched. */
  assert_int_equal(ember__jsmaps_frame(f->m, PID, "JS:baz", &j), 0);
  assert_int_equal(ember__jsmaps_frame(f->m, PID, "JS:*x node:internal/main:1:2", &j), 0);
  /* An absolute comment and a file:// URL. */
  ember__jsmaps_free(f->m);
  char line[PATH_MAX + 64];
  snprintf(line, sizeof line, "//# sourceMappingURL=file://%s", map);
  script_with(f, line);
  start(f, 0);
  mapped_hot(f);
}

static void test_inline_map(void **state) {
  fx_t *f = *state;
  make_proc(f, 0);
  unsigned char b64[1024];
  int n = EVP_EncodeBlock(b64, (const unsigned char *)MAP, (int)strlen(MAP));
  assert_true(n > 0);
  char line[1200];
  snprintf(line, sizeof line, "//# sourceMappingURL=data:application/json;charset=utf-8;base64,%s",
           b64);
  script_with(f, line);
  start(f, 0);
  mapped_hot(f);
  assert_int_equal(stats(f).maps, 1);
  /* Not base64 JSON: not read, counted. */
  ember__jsmaps_free(f->m);
  script_with(f, "//# sourceMappingURL=data:application/json,%7B%7D");
  start(f, 0);
  ember__jsframe_t j;
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).unsupported, 1);
}

static void test_sibling_map_and_none(void **state) {
  fx_t *f = *state;
  make_proc(f, 0);
  script_with(f, "console.log(1)");
  start(f, 0);
  ember__jsframe_t j;
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).no_map, 1);
  /* The map appears, the script is edited: its new identity is read. */
  char map[PATH_MAX + 8];
  snprintf(map, sizeof map, "%s.map", f->script);
  put(map, MAP);
  script_with(f, "console.log(22)");
  ember__jsmaps_forget(f->m, 0);
  mapped_hot(f);
  assert_int_equal(stats(f).scripts, 2);
  /* An http URL is not fetched. */
  ember__jsmaps_free(f->m);
  script_with(f, "//# sourceMappingURL=https://example.invalid/app.js.map");
  start(f, 0);
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).unsupported, 1);
}

/* Maps of two scripts, a bound that holds one: the older goes at the next
 * epoch and comes back when its script is seen again. */
static void test_memory_bound(void **state) {
  fx_t *f = *state;
  make_proc(f, 0);
  char other[PATH_MAX + 8], map[PATH_MAX + 16];
  snprintf(map, sizeof map, "%s.map", f->script);
  put(map, MAP);
  script_with(f, "");
  snprintf(other, sizeof other, "%s/other.js", f->dir);
  put(other, "function a(b){return b}const c=d=>d;\n");
  snprintf(map, sizeof map, "%s.map", other);
  put(map, MAP);
  start(f, 1);
  mapped_hot(f);
  ember__jsmaps_forget(f->m, 0);
  char name[PATH_MAX + 64];
  snprintf(name, sizeof name, "JS:*a %s:1:11", other);
  ember__jsframe_t j;
  assert_int_equal(ember__jsmaps_frame(f->m, PID, name, &j), 1);
  assert_string_equal(j.function, "hotLoop");
  ember__jsmaps_stats_t st = stats(f);
  assert_int_equal(st.evictions, 1);
  assert_int_equal(st.held, 1);
  ember__jsmaps_forget(f->m, 0);
  mapped_hot(f);
  st = stats(f);
  assert_int_equal(st.maps, 3);
  assert_int_equal(st.evictions, 2);
  /* The process exits: its names go; nothing else does. */
  ember__jsmaps_forget(f->m, PID);
  mapped_hot(f);
}

static void test_hostile_files(void **state) {
  fx_t *f = *state;
  make_proc(f, 65534);
  char map[PATH_MAX + 8], root_only[PATH_MAX + 16];
  snprintf(map, sizeof map, "%s.map", f->script);
  snprintf(root_only, sizeof root_only, "%s/secret.map", f->dir);
  put(root_only, MAP);
  assert_int_equal(chmod(root_only, 0600), 0);
  script_with(f, "");
  assert_int_equal(chown(f->script, 65534, 65534), 0);
  start(f, 0);
  ember__jsframe_t j;
  /* A link to a root-only map. */
  assert_int_equal(symlink(root_only, map), 0);
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).unsafe, 1);
  /* The root-only map itself, named by the comment. */
  script_with(f, "//# sourceMappingURL=secret.map");
  assert_int_equal(chown(f->script, 65534, 65534), 0);
  ember__jsmaps_forget(f->m, 0);
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).unsafe, 2);
  /* A root-only script of a user's process. */
  assert_int_equal(chown(f->script, 0, 0), 0);
  assert_int_equal(chmod(f->script, 0600), 0);
  ember__jsmaps_forget(f->m, 0);
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).unsafe, 3);
  /* A FIFO: refused without blocking. */
  unlink(map);
  assert_int_equal(mkfifo(map, 0644), 0);
  assert_int_equal(chown(map, 65534, 65534), 0);
  script_with(f, "");
  assert_int_equal(chown(f->script, 65534, 65534), 0);
  ember__jsmaps_forget(f->m, 0);
  assert_int_equal(frame(f, "a", 11, &j), 0);
  assert_int_equal(stats(f).unsafe, 4);
  /* The user's own map, and root's that anyone may read, are read. */
  unlink(map);
  put(map, MAP);
  assert_int_equal(chown(map, 65534, 65534), 0);
  script_with(f, "");
  assert_int_equal(chown(f->script, 65534, 65534), 0);
  ember__jsmaps_forget(f->m, 0);
  mapped_hot(f);
  assert_int_equal(chmod(root_only, 0644), 0);
  script_with(f, "//# sourceMappingURL=secret.map");
  assert_int_equal(chown(f->script, 65534, 65534), 0);
  ember__jsmaps_forget(f->m, 0);
  mapped_hot(f);
}

/* Broken, out-of-range and huge maps: refused by reason; the frames keep
 * their names. */
static void test_bad_maps(void **state) {
  fx_t *f = *state;
  make_proc(f, 0);
  char map[PATH_MAX + 8];
  snprintf(map, sizeof map, "%s.map", f->script);
  const char *bad[] = {
      "{\"version\":3,\"sources\":[\"a.ts\"],\"mappings\":\"SAIg",    /* truncated */
      "{\"version\":3,\"sources\":[\"a.ts\"],\"mappings\":\"SCAA\"}", /* source 1 of 1 */
  };
  ember_sourcemap_reason_t why[] = {EMBER_SOURCEMAP_NOT_JSON, EMBER_SOURCEMAP_OUT_OF_RANGE};
  start(f, 0);
  for (int i = 0; i < 2; i++) {
    put(map, bad[i]);
    char line[32];
    snprintf(line, sizeof line, "// %d", i); /* a new identity each time */
    script_with(f, line);
    ember__jsmaps_forget(f->m, 0);
    ember__jsframe_t j;
    assert_int_equal(frame(f, "a", 11, &j), 0);
    assert_int_equal(stats(f).refused[why[i]], 1);
  }
  /* 100 MB (sparse): refused by its size, never read. */
  int fd = open(map, O_WRONLY | O_TRUNC);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 100 << 20), 0);
  close(fd);
  script_with(f, "// big");
  ember__jsmaps_forget(f->m, 0);
  ember__jsframe_t j;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(frame(f, "a", 11, &j), 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  assert_int_equal(stats(f).refused[EMBER_SOURCEMAP_TOO_BIG], 1);
  assert_int_equal(stats(f).held, 0);
  assert_true((t1.tv_sec - t0.tv_sec) < 5);
}

/* Open descriptors of this process. */
static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  assert_non_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory's own */
}

/* A process's root is opened once per epoch, however many scripts it
 * names (a second script is found through the view held even after the
 * process's /proc entry went), and closed when the epoch ends; a second
 * process whose pid takes the same slot of the view cache replaces it. */
static void test_views_once_per_process(void **state) {
  fx_t *f = *state;
  make_proc(f, 0);
  char p[PATH_MAX + 16], q[3 * PATH_MAX + 64], name[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/%d", f->proc, PID + 16);
  assert_int_equal(mkdir(p, 0555), 0);
  snprintf(p, sizeof p, "%s/%d/root", f->proc, PID + 16);
  assert_int_equal(symlink("/", p), 0);
  script_with(f, "//# sourceMappingURL=app.min.js.map");
  snprintf(p, sizeof p, "%s.map", f->script);
  put(p, MAP);
  /* The same script and map again as two.min.js. */
  snprintf(q, sizeof q, "cp %s %s/two.min.js && cp %s %s/two.min.js.map", f->script, f->dir, p,
           f->dir);
  assert_int_equal(system(q), 0);
  start(f, 0);
  const int base = open_fds();
  ember__jsframe_t j;
  mapped_hot(f);
  for (int i = 0; i < 40; i++) {
    snprintf(name, sizeof name, "JS:*f%d %s/s%d.js:1:1", i, f->dir, i);
    assert_int_equal(ember__jsmaps_frame(f->m, i % 2 ? PID : PID + 16, name, &j), 0);
    assert_true(open_fds() <= base + 1);
  }
  mapped_hot(f); /* PID's view opened again after PID + 16 took its slot */
  snprintf(p, sizeof p, "%s/%d", f->proc, PID);
  snprintf(q, sizeof q, "%s/gone", f->proc);
  assert_int_equal(rename(p, q), 0);
  snprintf(name, sizeof name, "JS:*a %s/two.min.js:1:11", f->dir);
  assert_int_equal(ember__jsmaps_frame(f->m, PID, name, &j), 1);
  assert_string_equal(j.function, "hotLoop");
  ember__jsmaps_forget(f->m, 0);
  assert_int_equal(open_fds(), base);
  /* The next epoch opens the view again: the process is gone now. A new
   * name of it finds nothing; the scripts it was seen running stay. */
  snprintf(name, sizeof name, "JS:*a %s/three.min.js:1:11", f->dir);
  assert_int_equal(ember__jsmaps_frame(f->m, PID, name, &j), 0);
  assert_int_equal(frame(f, "a", 11, &j), 1);
  assert_int_equal(open_fds(), base);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_external_map, setup, teardown),
      cmocka_unit_test_setup_teardown(test_inline_map, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sibling_map_and_none, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memory_bound, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_maps, setup, teardown),
      cmocka_unit_test_setup_teardown(test_views_once_per_process, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
