/* /proc readers shared by the agent's modules (procfs.h). */
#include "procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "ember/parse.h"

#include "safefile.h"

/* /proc/PID/status is about 1.5 KiB; NSpid is in its first half. */
#define STATUS_MAX 4096u

int ember__proc_nspid_parse(const char *status, uint64_t *last, unsigned *levels) {
  const char *p = strstr(status, "\nNSpid:");
  if (p == NULL) return -ENOENT;
  p += strlen("\nNSpid:");
  uint64_t v = 0;
  unsigned n = 0;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') break;
    uint64_t x = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (x > (uint64_t)INT32_MAX) return -ENOENT;
      x = x * 10 + (uint64_t)(*p - '0');
    }
    if (x > (uint64_t)INT32_MAX) return -ENOENT;
    v = x;
    n++;
  }
  if (n == 0) return -ENOENT;
  *last = v;
  *levels = n;
  return 0;
}

int ember__proc_ns_pid(const char *proc_root, pid_t pid, uint64_t *out) {
  char path[PATH_MAX];
  char buf[STATUS_MAX + 1];
  size_t len = 0;
  int pn = snprintf(path, sizeof path, "%s/%d/status", proc_root, (int)pid);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  int rc = ember__safe_read(AT_FDCWD, path, NULL, buf, STATUS_MAX, &len);
  if (rc != 0) return rc;
  buf[len] = '\0';
  unsigned levels = 0;
  return ember__proc_nspid_parse(buf, out, &levels);
}

int ember__read_lines(int fd, bool tail, ember__line_fn fn, void *ctx, uint64_t *consumed) {
  int rc = 0;
  size_t have = 0;
  uint64_t done = 0, skipped = 0;
  bool skipping = false;
  char *buf = ember_malloc(EMBER__LINE_MAX + 1);
  if (buf == NULL) return -ENOMEM;
  for (;;) {
    ssize_t r = read(fd, buf + have, EMBER__LINE_MAX - have);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = -errno;
      goto cleanup;
    }
    if (r == 0) break;
    have += (size_t)r;
    size_t start = 0;
    for (;;) {
      char *nl = memchr(buf + start, '\n', have - start);
      if (nl == NULL) break;
      size_t len = (size_t)(nl - (buf + start));
      *nl = '\0';
      if (!skipping) rc = fn(ctx, buf + start, len);
      skipping = false;
      done += skipped + len + 1;
      skipped = 0;
      start += len + 1;
      if (rc != 0) goto cleanup;
    }
    if (start == 0 && have == EMBER__LINE_MAX) {
      /* No newline in a full buffer: drop the line up to its end (counted
       * as consumed only once that end has been read). */
      skipped += have;
      have = 0;
      skipping = true;
      continue;
    }
    memmove(buf, buf + start, have - start);
    have -= start;
  }
  if (tail && have > 0 && !skipping) {
    buf[have] = '\0';
    rc = fn(ctx, buf, have);
    done += have;
  } else if (tail) {
    done += skipped + have;
  }
cleanup:
  if (consumed != NULL) *consumed = done;
  ember_free(buf);
  return rc;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ember__scan_hex(const char **p, uint64_t *out) {
  const char *s = *p;
  uint64_t v = 0;
  size_t nd = 0;
  for (int d; (d = hexval(*s)) >= 0; s++, nd++) {
    if (v >> 60) return false;
    v = (v << 4) | (uint64_t)d;
  }
  if (nd == 0) return false;
  *p = s;
  *out = v;
  return true;
}

bool ember__scan_dec(const char **p, uint64_t *out) {
  const char *s = *p;
  uint64_t v = 0;
  size_t nd = 0;
  for (; *s >= '0' && *s <= '9'; s++, nd++) {
    uint64_t d = (uint64_t)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (nd == 0) return false;
  *p = s;
  *out = v;
  return true;
}

const char *ember__skip_blanks(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

int ember__proc_read_at(int dirfd, const char *name, char *buf, size_t cap, size_t *len) {
  ember__safe_opts_t o = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER};
  size_t n = 0;
  int rc = ember__safe_read(dirfd, name, &o, buf, cap, &n);
  if (rc == 0) *len = n;
  return rc;
}

int ember__proc_read_str(const char *path, char *buf, size_t size) {
  if (size == 0) return -EINVAL;
  size_t len = 0;
  int rc = ember__proc_read_at(AT_FDCWD, path, buf, size - 1, &len);
  if (rc != 0) return rc;
  buf[len] = '\0';
  return 0;
}

long ember__read_sysctl(const char *path) {
  char buf[64];
  int64_t v;
  if (ember__proc_read_str(path, buf, sizeof buf) != 0) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  if (ember_parse_i64(buf, INT32_MIN, INT32_MAX, &v) != 0) return -1;
  return (long)v;
}

int ember__proc_tids(const char *proc_root, pid_t pid, pid_t **out, size_t *count) {
  char path[PATH_MAX];
  int pn = snprintf(path, sizeof path, "%s/%d/task", proc_root ? proc_root : "/proc", (int)pid);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  DIR *d = opendir(path);
  if (d == NULL) return errno == ENOENT ? -ESRCH : -errno;
  pid_t *tids = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < EMBER__PROC_MAX_TIDS) {
    uint64_t v;
    if (ember_parse_u64(e->d_name, 1, INT32_MAX, &v) != 0) continue;
    if (n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      pid_t *t = ember_realloc(tids, nc * sizeof *t);
      if (t == NULL) {
        rc = -ENOMEM;
        break;
      }
      tids = t;
      cap = nc;
    }
    tids[n++] = (pid_t)v;
  }
  closedir(d);
  if (rc != 0) {
    ember_free(tids);
    return rc;
  }
  *out = tids;
  *count = n;
  return 0;
}
