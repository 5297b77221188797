/* Opening files a target process controls. The contract is in safefile.h;
 * the threat model is in docs/internals/safefile.md. */
#include "safefile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ember/metrics.h"

static atomic_uint_fast64_t n_symlinks, n_not_regular, n_bad_owner, n_too_big;
/* Cleared once openat2 answers ENOSYS (kernel < 5.6, or a seccomp filter
 * that refuses it): the walk below does the same job with more calls. */
static atomic_bool have_openat2 = true;

void ember__safe_use_openat2(bool use) {
  atomic_store_explicit(&have_openat2, use, memory_order_relaxed);
}

static int open_flags(const ember__safe_opts_t *o) {
  int acc = (o->flags & O_ACCMODE) == O_RDWR ? O_RDWR : O_RDONLY;
  return acc | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
}

static int retry_openat(int dirfd, const char *path, int flags) {
  int fd;
  do {
    fd = openat(dirfd, path, flags);
  } while (fd < 0 && errno == EINTR);
  return fd < 0 ? -errno : fd;
}

/* openat2 refusing every symbolic link, magic ones (/proc/PID/fd/N) too.
 * Returns an fd, -errno, or -ENOSYS when the kernel has no openat2. */
static int open_nolinks_openat2(int dirfd, const char *path, int flags) {
  struct open_how how = {
      .flags = (unsigned)(flags | O_NOFOLLOW),
      .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
  };
  long fd;
  do {
    fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -errno;
  return (int)fd;
}

/* The same without openat2: each directory of the path is opened with
 * O_PATH | O_NOFOLLOW, then the last part with `flags` | O_NOFOLLOW (the
 * caller passes O_PATH: nothing is opened for real here). */
static int open_nolinks_walk(int dirfd, const char *path, int flags) {
  char part[NAME_MAX + 1];
  int cur = dirfd, rc = 0;
  const char *p = path;
  if (*p == '/') {
    cur = retry_openat(AT_FDCWD, "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0) return cur;
    while (*p == '/') p++;
  }
  for (;;) {
    const char *slash = strchr(p, '/');
    if (slash == NULL) break;
    size_t len = (size_t)(slash - p);
    if (len > NAME_MAX) {
      rc = -ENAMETOOLONG;
      goto cleanup;
    }
    memcpy(part, p, len);
    part[len] = '\0';
    while (*slash == '/') slash++;
    p = slash;
    if (len == 0) continue;
    int next = retry_openat(cur, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next == -ENOTDIR) {
      /* O_DIRECTORY | O_NOFOLLOW on a symbolic link says ENOTDIR. */
      struct stat st;
      if (fstatat(cur, part, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) next = -ELOOP;
    }
    if (cur != dirfd) close(cur);
    cur = next;
    if (cur < 0) return cur;
  }
  rc = *p == '\0' ? -EISDIR : retry_openat(cur, p, flags | O_NOFOLLOW);
cleanup:
  if (cur != dirfd) close(cur);
  return rc;
}

static int open_nolinks(int dirfd, const char *path, int flags) {
  if (atomic_load_explicit(&have_openat2, memory_order_relaxed)) {
    int fd = open_nolinks_openat2(dirfd, path, flags);
    if (fd != -ENOSYS && fd != -EPERM) return fd;
    /* Some container runtimes' seccomp filters answer EPERM for syscalls
     * they do not know; the walk below needs none of them. */
    if (fd == -ENOSYS) atomic_store_explicit(&have_openat2, false, memory_order_relaxed);
  }
  return open_nolinks_walk(dirfd, path, flags);
}

/* The checks on the resolved (O_PATH) file, before anything opens it. */
static int check_file(const struct stat *sb, const ember__safe_opts_t *o) {
  /* O_PATH | O_NOFOLLOW (openat2's too) names a final symbolic link
   * itself rather than failing. */
  if (S_ISLNK(sb->st_mode)) {
    atomic_fetch_add(&n_symlinks, 1);
    return -ELOOP;
  }
  if (!S_ISREG(sb->st_mode)) {
    atomic_fetch_add(&n_not_regular, 1);
    return -ENODEV;
  }
  /* Exactly the owner asked for: root's file is a non-root target's only
   * if someone bind-mounted it there, and its lines would leak. */
  if ((o->owner != EMBER__SAFE_ANY_OWNER && (int64_t)sb->st_uid != o->owner) ||
      (o->one_link && sb->st_nlink != 1)) {
    atomic_fetch_add(&n_bad_owner, 1);
    return -EPERM;
  }
  if (o->max_size != 0 && (uint64_t)sb->st_size > o->max_size) {
    atomic_fetch_add(&n_too_big, 1);
    return -EFBIG;
  }
  if (o->ino != 0 && (uint64_t)sb->st_ino != o->ino) return -ESTALE;
  return 0;
}

int ember__safe_openat(int dirfd, const char *path, const ember__safe_opts_t *o, struct stat *st) {
  static const ember__safe_opts_t dflt = {.owner = EMBER__SAFE_ANY_OWNER};
  if (path == NULL || *path == '\0') return -EINVAL;
  if (o == NULL) o = &dflt;
  /* Resolve without opening: an O_PATH fd of a device or a FIFO runs none
   * of its driver's open code (/dev/watchdog would start the watchdog). */
  int pflags = O_PATH | O_CLOEXEC;
  int pfd = o->follow ? retry_openat(dirfd, path, pflags) : open_nolinks(dirfd, path, pflags);
  if (pfd < 0) {
    if (pfd == -ELOOP) atomic_fetch_add(&n_symlinks, 1);
    return pfd;
  }
  struct stat sb, sb2;
  int fd = -1;
  int rc = fstat(pfd, &sb) != 0 ? -errno : check_file(&sb, o);
  if (rc != 0) goto cleanup;
  /* Only now open it for real, through the resolved fd, and make sure it
   * is still the inode that was checked. */
  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", pfd);
  fd = retry_openat(AT_FDCWD, self, open_flags(o));
  if (fd < 0) {
    rc = fd;
    goto cleanup;
  }
  if (fstat(fd, &sb2) != 0) {
    rc = -errno;
  } else if (sb2.st_dev != sb.st_dev || sb2.st_ino != sb.st_ino) {
    atomic_fetch_add(&n_not_regular, 1);
    rc = -ENODEV;
  } else {
    rc = check_file(&sb2, o);
  }
cleanup:
  close(pfd);
  if (rc != 0) {
    if (fd >= 0) close(fd);
    return rc;
  }
  if (st != NULL) *st = sb2;
  return fd;
}

ssize_t ember__safe_pread(int fd, void *buf, size_t len, uint64_t off) {
  size_t got = 0;
  while (got < len) {
    ssize_t r = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) break;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

int ember__safe_read(int dirfd, const char *path, const ember__safe_opts_t *o, char *buf,
                     size_t cap, size_t *len) {
  if (buf == NULL || len == NULL) return -EINVAL;
  int fd = ember__safe_openat(dirfd, path, o, NULL);
  if (fd < 0) return fd;
  size_t got = 0;
  int rc = 0;
  /* read, not pread: /proc files are generated per read call position
   * anyway, and some (seq files) do not support pread offsets past 0 well. */
  while (got < cap) {
    ssize_t r = read(fd, buf + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = -errno;
      break;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (rc == 0) *len = got;
  return rc;
}

void ember__safe_stats(ember__safe_stats_t *out) {
  if (out == NULL) return;
  out->symlinks = atomic_load(&n_symlinks);
  out->not_regular = atomic_load(&n_not_regular);
  out->bad_owner = atomic_load(&n_bad_owner);
  out->too_big = atomic_load(&n_too_big);
}

void ember__safe_register_metrics(ember_metrics_t *m, ember__safe_metrics_t *out) {
  out->symlinks = ember_metrics_counter(m, "ember_agent_file_symlinks_refused_total",
                                        "Files of profiled processes refused: a symbolic link");
  out->not_regular = ember_metrics_counter(
      m, "ember_agent_file_not_regular_total",
      "Files of profiled processes refused: a FIFO, device, directory or socket");
  out->bad_owner = ember_metrics_counter(
      m, "ember_agent_file_bad_owner_total",
      "Files of profiled processes refused: another user's, or a second hard link");
  out->too_big = ember_metrics_counter(m, "ember_agent_file_too_big_total",
                                       "Files of profiled processes refused: over the size bound");
  out->shm_faults =
      ember_metrics_counter(m, "ember_agent_alloc_shm_faults_total",
                            "Allocation sessions ended because the process cut its control file");
}

void ember__safe_update_metrics(const ember__safe_metrics_t *sm, uint64_t shm_faults) {
  ember__safe_stats_t st;
  ember__safe_stats(&st);
  ember_metric_set(sm->symlinks, (double)st.symlinks);
  ember_metric_set(sm->not_regular, (double)st.not_regular);
  ember_metric_set(sm->bad_owner, (double)st.bad_owner);
  ember_metric_set(sm->too_big, (double)st.too_big);
  ember_metric_set(sm->shm_faults, (double)shm_faults);
}

int ember__safe_open_trusted(const char *path, uint64_t max_size, struct stat *st) {
  ember__safe_opts_t o = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER, .max_size = max_size};
  return ember__safe_openat(AT_FDCWD, path, &o, st);
}
