/* The safe-open helper (agent/safefile.c) every reader of a file a profiled
 * process controls goes through. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "safefile.h"

static char dir[64];

static void put(const char *name, const char *text) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

static int open_in(const char *name, const ember__safe_opts_t *o) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = ember__safe_openat(AT_FDCWD, path, o, NULL);
  if (fd >= 0) close(fd);
  return fd >= 0 ? 0 : fd;
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/ember-safefile-XXXXXX");
  if (mkdtemp(dir) == NULL) return -1;
  return 0;
}

static int teardown(void **state) {
  (void)state;
  static const char *const names[] = {"file", "link", "sub/file", "linkdir",
                                      "fifo", "hard", "big",      "dev"};
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  snprintf(path, sizeof path, "%s/sub", dir);
  rmdir(path);
  rmdir(dir);
  return 0;
}

static void test_safefile_links_never_followed(void **state) {
  (void)state;
  char path[PATH_MAX];
  put("file", "x\n");
  snprintf(path, sizeof path, "%s/file", dir);
  char link[PATH_MAX];
  snprintf(link, sizeof link, "%s/link", dir);
  assert_int_equal(symlink(path, link), 0);
  ember__safe_stats_t a, b;
  ember__safe_stats(&a);
  assert_int_equal(open_in("file", NULL), 0);
  assert_int_equal(open_in("link", NULL), -ELOOP);
  /* A link in a directory part of the path, too. */
  snprintf(path, sizeof path, "%s/sub", dir);
  assert_int_equal(mkdir(path, 0755), 0);
  put("sub/file", "y\n");
  snprintf(link, sizeof link, "%s/linkdir", dir);
  assert_int_equal(symlink(path, link), 0);
  assert_int_equal(open_in("sub/file", NULL), 0);
  assert_int_equal(open_in("linkdir/file", NULL), -ELOOP);
  ember__safe_stats(&b);
  assert_int_equal(b.symlinks, a.symlinks + 2);
  /* Unless the caller trusts the path. */
  ember__safe_opts_t follow = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER};
  assert_int_equal(open_in("link", &follow), 0);
  assert_int_equal(open_in("linkdir/file", &follow), 0);
  /* Relative to a directory fd: the same rule below it. */
  int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  assert_true(dfd >= 0);
  int fd = ember__safe_openat(dfd, "sub/file", NULL, NULL);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(ember__safe_openat(dfd, "linkdir/file", NULL, NULL), -ELOOP);
  close(dfd);
}

static void test_safefile_only_regular_files_body(void);

/* The same without openat2 (kernels before 5.6, some seccomp filters). */
static void test_safefile_links_never_followed_walk(void **state) {
  ember__safe_use_openat2(false);
  test_safefile_links_never_followed(state);
  test_safefile_only_regular_files_body();
  ember__safe_use_openat2(true);
}

static void test_safefile_only_regular_files(void **state) {
  (void)state;
  test_safefile_only_regular_files_body();
}

static void test_safefile_only_regular_files_body(void) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0666), 0);
  /* Returns at once: O_NONBLOCK, then refused by type. */
  assert_int_equal(open_in("fifo", NULL), -ENODEV);
  ember__safe_opts_t rw = {.flags = O_RDWR, .owner = EMBER__SAFE_ANY_OWNER};
  assert_int_equal(open_in("fifo", &rw), -ENODEV);
  assert_int_equal(ember__safe_openat(AT_FDCWD, "/dev/null", NULL, NULL), -ENODEV);
  assert_int_equal(ember__safe_openat(AT_FDCWD, dir, NULL, NULL), -ENODEV);
  assert_int_equal(open_in("missing", NULL), -ENOENT);
}

/* True if the inotify fd reported an IN_OPEN (nothing else is watched). */
static bool saw_open(int ifd) {
  char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  ssize_t n = read(ifd, buf, sizeof buf);
  if (n <= 0) return false;
  for (char *p = buf; p < buf + n;) {
    const struct inotify_event *ev = (const struct inotify_event *)p;
    if (ev->mask & IN_OPEN) return true;
    p += sizeof *ev + ev->len;
  }
  return false;
}

/* A device or FIFO is refused before it is opened at all: opening one can
 * act by itself (/dev/watchdog arms the watchdog). inotify's IN_OPEN on
 * our own node proves no open happened (O_PATH does not report one). */
static void test_safefile_never_opens_devices_body(void) {
  char path[PATH_MAX];
  int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  assert_true(ifd >= 0);
  snprintf(path, sizeof path, "%s/fifo", dir);
  unlink(path);
  assert_int_equal(mkfifo(path, 0666), 0);
  assert_true(inotify_add_watch(ifd, path, IN_OPEN) >= 0);
  /* The check itself works: a plain open is seen. */
  int probe = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  assert_true(probe >= 0);
  close(probe);
  assert_true(saw_open(ifd));
  ember__safe_opts_t rw = {.flags = O_RDWR, .owner = EMBER__SAFE_ANY_OWNER};
  assert_int_equal(open_in("fifo", NULL), -ENODEV);
  assert_int_equal(open_in("fifo", &rw), -ENODEV);
  ember__safe_opts_t follow = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER};
  assert_int_equal(open_in("fifo", &follow), -ENODEV);
  assert_false(saw_open(ifd));
  /* A character device (the null device's numbers) where we may make one. */
  snprintf(path, sizeof path, "%s/dev", dir);
  if (mknod(path, S_IFCHR | 0666, makedev(1, 3)) == 0) {
    assert_true(inotify_add_watch(ifd, path, IN_OPEN) >= 0);
    assert_int_equal(open_in("dev", NULL), -ENODEV);
    assert_int_equal(open_in("dev", &rw), -ENODEV);
    assert_int_equal(open_in("dev", &follow), -ENODEV);
    assert_false(saw_open(ifd));
  }
  close(ifd);
}

static void test_safefile_never_opens_devices(void **state) {
  (void)state;
  test_safefile_never_opens_devices_body();
  ember__safe_use_openat2(false);
  test_safefile_never_opens_devices_body();
  ember__safe_use_openat2(true);
}

/* A regular file on the way is checked before its real open too: a file
 * over the bound or another user's is never opened (no IN_OPEN). */
static void test_safefile_checks_before_open(void **state) {
  (void)state;
  char path[PATH_MAX];
  put("file", "0123456789");
  snprintf(path, sizeof path, "%s/file", dir);
  int ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  assert_true(ifd >= 0);
  assert_true(inotify_add_watch(ifd, path, IN_OPEN) >= 0);
  ember__safe_opts_t s = {.owner = EMBER__SAFE_ANY_OWNER, .max_size = 9};
  assert_int_equal(open_in("file", &s), -EFBIG);
  ember__safe_opts_t o = {.owner = 4242};
  assert_int_equal(open_in("file", &o), -EPERM);
  assert_false(saw_open(ifd));
  s.max_size = 10;
  assert_int_equal(open_in("file", &s), 0);
  assert_true(saw_open(ifd));
  close(ifd);
}

static void test_safefile_owner_links_size(void **state) {
  (void)state;
  char path[PATH_MAX], hard[PATH_MAX];
  put("file", "0123456789");
  snprintf(path, sizeof path, "%s/file", dir);
  ember__safe_opts_t o = {.owner = 1000};
  /* Root's file is not a non-root user's: bind-mounted over a perf map it
   * would leak its lines. */
  assert_int_equal(open_in("file", &o), -EPERM);
  o.owner = 0;
  assert_int_equal(open_in("file", &o), 0);
  o.owner = 1000;
  assert_int_equal(chown(path, 1001, 1001), 0);
  assert_int_equal(open_in("file", &o), -EPERM);
  o.owner = 1001;
  assert_int_equal(open_in("file", &o), 0);
  o.one_link = true;
  snprintf(hard, sizeof hard, "%s/hard", dir);
  assert_int_equal(link(path, hard), 0);
  assert_int_equal(open_in("file", &o), -EPERM);
  ember__safe_opts_t s = {.owner = EMBER__SAFE_ANY_OWNER, .max_size = 9};
  assert_int_equal(open_in("file", &s), -EFBIG);
  s.max_size = 10;
  assert_int_equal(open_in("file", &s), 0);
  char buf[4];
  size_t len = 0;
  assert_int_equal(ember__safe_read(AT_FDCWD, path, NULL, buf, sizeof buf, &len), 0);
  assert_int_equal(len, 4);
  assert_memory_equal(buf, "0123", 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_safefile_links_never_followed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_safefile_only_regular_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_safefile_links_never_followed_walk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_safefile_owner_links_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_safefile_never_opens_devices, setup, teardown),
      cmocka_unit_test_setup_teardown(test_safefile_checks_before_open, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
