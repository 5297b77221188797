/* The perf map reader (agent/perfmap.c): incremental reads, bounds on lines,
 * entries and bytes, reloads of a file cut or replaced. The hostile cases
 * as another user (links, FIFOs, a 2 GB sparse file) are in
 * test_symbolize.c, through the symbolizer. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "perfmap.h"

typedef struct fx {
  char dir[64], path[PATH_MAX];
  ember__perfmap_src_t src;
  ember__perfmap_t *pm;
} fx_t;

static int setup(void **state) {
  fx_t *f = calloc(1, sizeof *f);
  if (f == NULL) return -1;
  snprintf(f->dir, sizeof f->dir, "/tmp/ember-perfmap-XXXXXX");
  if (mkdtemp(f->dir) == NULL) return -1;
  snprintf(f->path, sizeof f->path, "%s/perf-%d.map", f->dir, (int)getpid());
  f->src = (ember__perfmap_src_t){.proc_root = "/proc", .dir = f->dir, .dir_set = true};
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx_t *f = *state;
  ember__perfmap_free(f->pm);
  unlink(f->path);
  rmdir(f->dir);
  free(f);
  return 0;
}

static void put(const char *path, const char *mode, const char *text) {
  FILE *fp = fopen(path, mode);
  assert_non_null(fp);
  assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
  assert_int_equal(fclose(fp), 0);
}

static ember__perfmap_stats_t stats(const ember__perfmap_t *pm) {
  ember__perfmap_stats_t st;
  ember__perfmap_stats(pm, &st);
  return st;
}

static void test_perfmap_reads_only_what_was_appended(void **state) {
  fx_t *f = *state;
  assert_int_equal(ember__perfmap_new(getpid(), NULL, &f->pm), 0);
  static const char a[] = "1000 10 first\n", b[] = "2000 10 second\n";
  put(f->path, "w", a);
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x1005), "first");
  assert_string_equal(ember__perfmap_path(f->pm), f->path);
  assert_int_equal(stats(f->pm).bytes, sizeof a - 1);
  /* Nothing new: no read at all. */
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_int_equal(stats(f->pm).bytes, sizeof a - 1);
  put(f->path, "a", b);
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_int_equal(stats(f->pm).bytes, sizeof a - 1 + sizeof b - 1);
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x2000), "second");
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x1000), "first");
  assert_null(ember__perfmap_lookup(f->pm, 0x1010));
  assert_int_equal(stats(f->pm).reads, 3);
  assert_int_equal(stats(f->pm).reloads, 0);
}

/* An over-long line is dropped as it streams by, never held whole; the
 * lines after it still count. */
static void test_perfmap_long_line_skipped(void **state) {
  fx_t *f = *state;
  ember__perfmap_limits_t lim = {.max_line = 100};
  assert_int_equal(ember__perfmap_new(getpid(), &lim, &f->pm), 0);
  char chunk[64];
  memset(chunk, 'x', sizeof chunk);
  assert_int_equal(ember__perfmap_feed(f->pm, "1000 10 ", 8), 0);
  for (int i = 0; i < 1000; i++)
    assert_int_equal(ember__perfmap_feed(f->pm, chunk, sizeof chunk), 0);
  static const char rest[] = "tail\n3000 10 ok\n";
  assert_int_equal(ember__perfmap_feed(f->pm, rest, sizeof rest - 1), 0);
  assert_int_equal(ember__perfmap_commit(f->pm), 0);
  assert_null(ember__perfmap_lookup(f->pm, 0x1000));
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x3000), "ok");
  assert_int_equal(stats(f->pm).long_lines, 1);
  /* A line of exactly max_line bytes is kept. */
  char line[128];
  int n = snprintf(line, sizeof line, "4000 10 %s\n", "y");
  memset(line + 8, 'y', 92);
  line[100] = '\n';
  assert_true(n > 0);
  assert_int_equal(ember__perfmap_feed(f->pm, line, 101), 0);
  assert_int_equal(ember__perfmap_commit(f->pm), 0);
  const char *name = ember__perfmap_lookup(f->pm, 0x4000);
  assert_non_null(name);
  assert_int_equal(strlen(name), 92);
}

static void test_perfmap_bounds(void **state) {
  fx_t *f = *state;
  ember__perfmap_limits_t lim = {.max_entries = 3, .max_bytes = 200};
  assert_int_equal(ember__perfmap_new(getpid(), &lim, &f->pm), 0);
  char text[4096] = "";
  size_t len = 0;
  for (int i = 0; i < 100; i++)
    len += (size_t)snprintf(text + len, sizeof text - len, "%x 10 fn%d\n", 0x1000 + i * 0x100, i);
  put(f->path, "w", text);
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_int_equal(ember__perfmap_count(f->pm), 3);
  assert_int_equal(stats(f->pm).bytes, 200);
  assert_true(stats(f->pm).capped >= 1);
  /* Spent: later refreshes read nothing more. */
  put(f->path, "a", "f000 10 late\n");
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_int_equal(stats(f->pm).bytes, 200);
  assert_null(ember__perfmap_lookup(f->pm, 0xf000));
}

/* A file cut shorter, or another file under the name, is read again from
 * the start; names handed out before stay valid. */
static void test_perfmap_truncated_or_replaced_reloads(void **state) {
  fx_t *f = *state;
  assert_int_equal(ember__perfmap_new(getpid(), NULL, &f->pm), 0);
  put(f->path, "w", "1000 10 old-one\n2000 10 old-two\n");
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  const char *old = ember__perfmap_lookup(f->pm, 0x1000);
  assert_string_equal(old, "old-one");
  put(f->path, "w", "3000 10 new\n"); /* truncated in place, same inode */
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_int_equal(stats(f->pm).reloads, 1);
  assert_null(ember__perfmap_lookup(f->pm, 0x1000));
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x3000), "new");
  assert_string_equal(old, "old-one");
  char other[PATH_MAX + 8];
  snprintf(other, sizeof other, "%s.new", f->path);
  put(other, "w", "4000 10 renamed-over-it-and-longer-than-before\n");
  assert_int_equal(rename(other, f->path), 0);
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_int_equal(stats(f->pm).reloads, 2);
  assert_null(ember__perfmap_lookup(f->pm, 0x3000));
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x4000),
                      "renamed-over-it-and-longer-than-before");
}

/* Not a regular file, another owner or a second link: refused, counted. */
static void test_perfmap_refuses_what_perf_refuses(void **state) {
  fx_t *f = *state;
  assert_int_equal(ember__perfmap_new(getpid(), NULL, &f->pm), 0);
  assert_int_equal(mkfifo(f->path, 0600), 0);
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_false(ember__perfmap_found(f->pm));
  assert_int_equal(stats(f->pm).refused, 1);
  unlink(f->path);
  /* This process runs as root: a map owned by another user is not its. */
  put(f->path, "w", "1000 10 theirs\n");
  assert_int_equal(chown(f->path, 65534, 65534), 0);
  assert_int_equal(ember__perfmap_refresh(f->pm, &f->src), 0);
  assert_null(ember__perfmap_lookup(f->pm, 0x1000));
  assert_int_equal(stats(f->pm).refused, 2);
}

/* A root-only file bind-mounted (here: written) as the map of a process
 * running as nobody is not that process's: root's files count as a
 * target's only when the target is root itself. The fake proc root gives
 * the process its owner. */
static void test_perfmap_root_file_not_a_users_map(void **state) {
  fx_t *f = *state;
  char proc[256], piddir[PATH_MAX];
  snprintf(proc, sizeof proc, "%s/proc", f->dir);
  snprintf(piddir, sizeof piddir, "%s/%d", proc, (int)getpid());
  assert_int_equal(mkdir(proc, 0755), 0);
  assert_int_equal(mkdir(piddir, 0555), 0);
  assert_int_equal(chown(piddir, 65534, 65534), 0);
  ember__perfmap_src_t src = {.proc_root = proc, .dir = f->dir, .dir_set = true};
  assert_int_equal(ember__perfmap_new(getpid(), NULL, &f->pm), 0);
  put(f->path, "w", "1000 10 root_secret\n");
  assert_int_equal(chmod(f->path, 0600), 0);
  assert_int_equal(ember__perfmap_refresh(f->pm, &src), 0);
  assert_null(ember__perfmap_lookup(f->pm, 0x1000));
  assert_int_equal(stats(f->pm).refused, 1);
  /* The user's own file is read. */
  assert_int_equal(chown(f->path, 65534, 65534), 0);
  assert_int_equal(ember__perfmap_refresh(f->pm, &src), 0);
  assert_string_equal(ember__perfmap_lookup(f->pm, 0x1000), "root_secret");
  rmdir(piddir);
  rmdir(proc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_perfmap_reads_only_what_was_appended, setup, teardown),
      cmocka_unit_test_setup_teardown(test_perfmap_long_line_skipped, setup, teardown),
      cmocka_unit_test_setup_teardown(test_perfmap_bounds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_perfmap_truncated_or_replaced_reloads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_perfmap_refuses_what_perf_refuses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_perfmap_root_file_not_a_users_map, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
