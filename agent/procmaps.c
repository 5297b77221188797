/* Maps of a process (procmaps.h). */
#include "procmaps.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "ember/ember.h"
#include "procfs.h"
#include "safefile.h"
#include "strarena.h"

/* The most mappings kept from one maps file (STYLE.md rule 12). */
#define MAX_MAPPINGS (1u << 20)

static void close_fd(int fd) {
  if (fd >= 0) close(fd);
}

struct ember__procmaps {
  pid_t pid;
  int64_t uid; /* the process's owner at read time; -1 unknown */
  char *proc_root;
  ember__mapping_t *v;
  size_t n, cap;
  ember__strarena_t strings;
};

typedef struct maps_ctx {
  ember__procmaps_t *m;
} maps_ctx_t;

static int maps_line(void *vctx, char *line, size_t len) {
  maps_ctx_t *ctx = vctx;
  ember__procmaps_t *m = ctx->m;
  const char *p = line;
  uint64_t start, end, offset, major, minor, ino;
  if (!ember__scan_hex(&p, &start) || *p++ != '-' || !ember__scan_hex(&p, &end) || *p++ != ' ')
    return 0;
  if (strlen(p) < 5 || p[4] != ' ') return 0;
  bool exec = p[2] == 'x';
  p += 5;
  if (!exec || end <= start) return 0;
  if (!ember__scan_hex(&p, &offset) || *p++ != ' ') return 0;
  if (!ember__scan_hex(&p, &major) || *p++ != ':' || !ember__scan_hex(&p, &minor) || *p++ != ' ')
    return 0;
  if (!ember__scan_dec(&p, &ino)) return 0;
  p = ember__skip_blanks(p);
  if (m->n >= MAX_MAPPINGS) return 0;

  ember__mapping_t mp = {.start = start,
                         .end = end,
                         .offset = offset,
                         .dev = major << 32 | (minor & 0xffffffffu),
                         .ino = ino,
                         .kind = EMBER__MAP_FILE};
  size_t plen = len - (size_t)(p - line);
  if (plen == 0 || strncmp(p, "[anon:", 6) == 0) {
    mp.kind = EMBER__MAP_ANON;
  } else if (p[0] == '[') {
    mp.kind = strcmp(p, "[vdso]") == 0 ? EMBER__MAP_VDSO : EMBER__MAP_SPECIAL;
  } else {
    static const char del[] = " (deleted)";
    if (plen > sizeof del - 1 && strcmp(p + plen - (sizeof del - 1), del) == 0) {
      mp.deleted = true;
      plen -= sizeof del - 1;
    }
  }
  if (mp.kind != EMBER__MAP_ANON) {
    /* Consecutive mappings of one file share its path string. */
    const ember__mapping_t *prev = m->n ? &m->v[m->n - 1] : NULL;
    if (prev != NULL && prev->path != NULL && strlen(prev->path) == plen &&
        memcmp(prev->path, p, plen) == 0) {
      mp.path = prev->path;
    } else {
      mp.path = ember__strarena_dup(&m->strings, p, plen);
      if (mp.path == NULL) return -ENOMEM;
    }
  }
  ember__mapping_t *nv = ember__grow_array(m->v, &m->cap, m->n + 1, sizeof *m->v);
  if (nv == NULL) return -ENOMEM;
  m->v = nv;
  m->v[m->n++] = mp;
  return 0;
}

static int mapping_cmp(const void *a, const void *b) {
  const ember__mapping_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

int ember__procmaps_read(const char *proc_root, pid_t pid, ember__procmaps_t **out) {
  if (out == NULL || pid <= 0) return -EINVAL;
  if (proc_root == NULL) proc_root = "/proc";
  int rc = 0;
  int fd = -1;
  ember__procmaps_t *m = ember_calloc(1, sizeof *m);
  if (m == NULL) return -ENOMEM;
  m->pid = pid;
  m->uid = -1;
  m->proc_root = ember_strdup(proc_root);
  if (m->proc_root == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  char path[PATH_MAX];
  int pn = snprintf(path, sizeof path, "%s/%d", proc_root, (int)pid);
  struct stat pst;
  if (pn > 0 && (size_t)pn < sizeof path && stat(path, &pst) == 0) m->uid = (int64_t)pst.st_uid;
  pn = snprintf(path, sizeof path, "%s/%d/maps", proc_root, (int)pid);
  if (pn < 0 || (size_t)pn >= sizeof path) {
    rc = -ENAMETOOLONG;
    goto cleanup;
  }
  /* procfs holds no links of the process's making, but a fake root (tests)
   * or a bind mount might: follow none. */
  fd = ember__safe_openat(AT_FDCWD, path, NULL, NULL);
  if (fd < 0) {
    rc = fd == -ENODEV ? -EACCES : fd;
    goto cleanup;
  }
  maps_ctx_t ctx = {m};
  rc = ember__read_lines(fd, true, maps_line, &ctx, NULL);
  if (rc != 0) goto cleanup;
  /* The kernel lists mappings in address order; sorting costs nothing then
   * and keeps the binary search right for any other source. */
  ember__sort_array(m->v, m->n, sizeof *m->v, mapping_cmp);
  *out = m;
  m = NULL;
cleanup:
  close_fd(fd);
  ember__procmaps_free(m);
  return rc;
}

int ember__procmaps_parse(const char *buf, size_t len, ember__procmaps_t **out) {
  if (out == NULL || (buf == NULL && len > 0)) return -EINVAL;
  int rc = 0;
  char *line = NULL;
  ember__procmaps_t *m = ember_calloc(1, sizeof *m);
  if (m == NULL) return -ENOMEM;
  m->pid = 0;
  m->uid = -1;
  m->proc_root = ember_strdup("/proc");
  line = ember_malloc(EMBER__LINE_MAX + 1);
  if (m->proc_root == NULL || line == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  maps_ctx_t ctx = {m};
  /* Lines as read_lines passes them: at most EMBER__LINE_MAX bytes (longer ones
   * are skipped), NUL-terminated, the last one without its newline too. */
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(buf + at, '\n', len - at);
    size_t l = nl ? (size_t)(nl - (buf + at)) : len - at;
    if (l < EMBER__LINE_MAX) {
      memcpy(line, buf + at, l);
      line[l] = '\0';
      rc = maps_line(&ctx, line, l);
      if (rc != 0) goto cleanup;
    }
    at += l + (nl ? 1 : 0);
  }
  ember__sort_array(m->v, m->n, sizeof *m->v, mapping_cmp);
  *out = m;
  m = NULL;
cleanup:
  ember_free(line);
  ember__procmaps_free(m);
  return rc;
}

void ember__procmaps_free(ember__procmaps_t *m) {
  if (m == NULL) return;
  ember__strarena_free(&m->strings);
  ember_free(m->v);
  ember_free(m->proc_root);
  ember_free(m);
}

const ember__mapping_t *ember__procmaps_find(const ember__procmaps_t *m, uint64_t addr) {
  if (m == NULL) return NULL;
  size_t lo = 0, hi = m->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (m->v[mid].start <= addr) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const ember__mapping_t *mp = &m->v[lo - 1];
  return addr < mp->end ? mp : NULL;
}

bool ember__procmaps_covers(const ember__procmaps_t *m, uint64_t addr) {
  return ember__procmaps_find(m, addr) != NULL;
}

size_t ember__procmaps_count(const ember__procmaps_t *m) { return m ? m->n : 0; }

const ember__mapping_t *ember__procmaps_get(const ember__procmaps_t *m, size_t i) {
  return m != NULL && i < m->n ? &m->v[i] : NULL;
}

const ember__mapping_t *
ember__procmaps_find_if(const ember__procmaps_t *m,
                        bool (*match)(const ember__mapping_t *mp, void *ctx), void *ctx) {
  for (size_t i = 0; m != NULL && i < m->n; i++) {
    if (match(&m->v[i], ctx)) return &m->v[i];
  }
  return NULL;
}

const char *ember__mapping_basename(const ember__mapping_t *mp) {
  if (mp->kind != EMBER__MAP_FILE || mp->path == NULL) return "";
  const char *slash = strrchr(mp->path, '/');
  return slash ? slash + 1 : mp->path;
}

int64_t ember__procmaps_uid(const ember__procmaps_t *m) { return m ? m->uid : -1; }

/* Open a mapped file: a regular file and, when `ino` is not 0, that very
 * inode, both checked before the file is opened for real (a device such as
 * /dev/watchdog someone mapped is never opened). Returns an fd or -errno
 * (-ESTALE for another file). */
static int open_mapped(int dirfd, const char *path, bool follow, uint64_t ino, uint64_t max_size,
                       struct stat *st) {
  ember__safe_opts_t o = {
      .follow = follow, .owner = EMBER__SAFE_ANY_OWNER, .max_size = max_size, .ino = ino};
  int fd = ember__safe_openat(dirfd, path, &o, st);
  if (fd < 0) return ember__procmaps_transient(fd) ? fd : -ESTALE;
  return fd;
}

int ember__procmaps_open_root(const ember__procmaps_t *m) {
  if (m == NULL) return -EINVAL;
  if (m->pid <= 0) return AT_FDCWD;
  char path[PATH_MAX];
  int pn = snprintf(path, sizeof path, "%s/%d/root", m->proc_root, (int)m->pid);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  /* The kernel's link to the process's root: followed, as it must be. */
  int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  return fd >= 0 ? fd : -errno;
}

/* See procmaps.h for the order of attempts. */
int ember__procmaps_open(const ember__procmaps_t *pm, const ember__mapping_t *mp, uint64_t max_size,
                         struct stat *st) {
  char path[PATH_MAX];
  int fd = -ENOENT;
  int pn;
  /* The kernel's own link to the mapped file. */
  pn = snprintf(path, sizeof path, "%s/%d/map_files/%llx-%llx", pm->proc_root, (int)pm->pid,
                (unsigned long long)mp->start, (unsigned long long)mp->end);
  if (pn > 0 && (size_t)pn < sizeof path) {
    /* No inode check: it is the mapped file (overlayfs may number it
     * otherwise than maps does). */
    fd = open_mapped(AT_FDCWD, path, true, 0, max_size, st);
    if (fd >= 0 || ember__procmaps_transient(fd)) return fd;
  }
  if (!mp->deleted) {
    /* Links followed: the inode check makes it the very file mapped. */
    fd = open_mapped(AT_FDCWD, mp->path, true, mp->ino, max_size, st);
    if (fd >= 0 || ember__procmaps_transient(fd)) return fd;
  }
  if (mp->deleted || mp->path[0] != '/') return fd;
  /* Overlay filesystems may show another inode through the path than
   * /proc/PID/maps does, so this one is not checked; the process owns
   * everything below its root, so no link there is followed. */
  pn = snprintf(path, sizeof path, "%s/%d/root", pm->proc_root, (int)pm->pid);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  int rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return ember__procmaps_transient(-errno) ? -errno : -ESTALE;
  fd = open_mapped(rootfd, mp->path + 1, false, 0, max_size, st);
  close(rootfd);
  return fd;
}
