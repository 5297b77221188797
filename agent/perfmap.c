/* The perf map reader. The contract is in perfmap.h; bounds and costs are
 * in docs/internals/perfmap.md. */
#include "perfmap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/ember.h"
#include "ember/log.h"
#include "procfs.h"
#include "safefile.h"
#include "strarena.h"

#define READ_BLOCK (64u * 1024u)

typedef struct jsym {
  uint64_t start, end, seq;
  const char *name;
} jsym_t;

struct ember__perfmap {
  pid_t pid;
  ember__perfmap_limits_t lim;
  jsym_t *v; /* sorted, non-overlapping */
  size_t n;
  jsym_t *add; /* parsed since the last commit */
  size_t nadd, add_cap;
  uint64_t seq;            /* lines parsed: later lines win overlaps */
  ember__strarena_t names; /* names and paths: frames point into it */
  /* The line being assembled across feeds: at most max_line bytes; a
   * longer one sets `skipping` and is dropped up to its newline. */
  char *line;
  size_t line_len;
  bool skipping;
  /* The file as last read. */
  bool found;
  uint64_t offset, dev, ino;
  uint64_t budget; /* bytes still allowed (max_bytes - bytes fed) */
  const char *path;
  const char *paths[2];               /* <dir>/perf-PID.map, <proc>/PID/root/tmp/perf-NS.map */
  bool warned_refused, warned_capped; /* one log line each per pid */
  uint64_t nspid;                     /* the pid in its own namespace, read once (0: not yet) */
  ember__perfmap_stats_t stats;
};

static const char *name_dup(ember__perfmap_t *pm, const char *s, size_t len) {
  return ember__strarena_dup(&pm->names, s, len);
}

int ember__perfmap_new(pid_t pid, const ember__perfmap_limits_t *limits, ember__perfmap_t **out) {
  if (out == NULL) return -EINVAL;
  ember__perfmap_t *pm = ember_calloc(1, sizeof *pm);
  if (pm == NULL) return -ENOMEM;
  pm->pid = pid;
  if (limits != NULL) pm->lim = *limits;
  if (pm->lim.max_line == 0) pm->lim.max_line = EMBER__PERFMAP_MAX_LINE;
  if (pm->lim.max_entries == 0) pm->lim.max_entries = EMBER__PERFMAP_MAX_ENTRIES;
  if (pm->lim.max_bytes == 0) pm->lim.max_bytes = EMBER__PERFMAP_MAX_BYTES;
  pm->budget = pm->lim.max_bytes;
  pm->path = "";
  pm->line = ember_malloc(pm->lim.max_line + 1);
  if (pm->line == NULL) {
    ember_free(pm);
    return -ENOMEM;
  }
  *out = pm;
  return 0;
}

void ember__perfmap_free(ember__perfmap_t *pm) {
  if (pm == NULL) return;
  ember__strarena_free(&pm->names);
  ember_free(pm->v);
  ember_free(pm->add);
  ember_free(pm->line);
  ember_free(pm);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool scan_hex(const char **p, const char *end, uint64_t *out) {
  const char *s = *p;
  uint64_t v = 0;
  size_t nd = 0;
  for (int d; s < end && (d = hexval(*s)) >= 0; s++, nd++) {
    if (v >> 60) return false;
    v = (v << 4) | (uint64_t)d;
  }
  if (nd == 0) return false;
  *p = s;
  *out = v;
  return true;
}

/* One complete line (no newline). Lines that do not parse are counted and
 * skipped; so are lines past the entry bound. */
static int parse_line(ember__perfmap_t *pm, const char *line, size_t len) {
  const char *p = line, *end = line + len;
  uint64_t start, size;
  if (!scan_hex(&p, end, &start) || p >= end || *p++ != ' ' || !scan_hex(&p, end, &size) ||
      p >= end || *p++ != ' ') {
    if (len > 0) pm->stats.bad_lines++;
    return 0;
  }
  size_t nlen = (size_t)(end - p);
  while (nlen > 0 && (p[nlen - 1] == ' ' || p[nlen - 1] == '\t' || p[nlen - 1] == '\r')) nlen--;
  if (nlen == 0 || memchr(p, '\0', nlen) != NULL) {
    pm->stats.bad_lines++;
    return 0;
  }
  if (pm->n + pm->nadd >= pm->lim.max_entries) return 0;
  if (size == 0) size = 1;
  if (start > UINT64_MAX - size) {
    pm->stats.bad_lines++;
    return 0;
  }
  if (pm->nadd == pm->add_cap) {
    size_t nc = pm->add_cap ? pm->add_cap * 2 : 64;
    jsym_t *nv = ember_realloc(pm->add, nc * sizeof *nv);
    if (nv == NULL) return -ENOMEM;
    pm->add = nv;
    pm->add_cap = nc;
  }
  const char *name = name_dup(pm, p, nlen);
  if (name == NULL) return -ENOMEM;
  pm->add[pm->nadd++] = (jsym_t){start, start + size, ++pm->seq, name};
  return 0;
}

int ember__perfmap_feed(ember__perfmap_t *pm, const char *data, size_t len) {
  if (pm == NULL || (data == NULL && len > 0)) return -EINVAL;
  if (len > pm->budget) len = (size_t)pm->budget;
  pm->budget -= len;
  pm->stats.bytes += len;
  const char *p = data, *end = data + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t take = (size_t)((nl ? nl : end) - p);
    if (!pm->skipping) {
      if (pm->line_len + take > pm->lim.max_line) {
        pm->skipping = true;
        pm->line_len = 0;
        pm->stats.long_lines++;
      } else {
        memcpy(pm->line + pm->line_len, p, take);
        pm->line_len += take;
      }
    }
    p += take;
    if (nl == NULL) break;
    p++; /* the newline */
    if (!pm->skipping) {
      int rc = parse_line(pm, pm->line, pm->line_len);
      if (rc != 0) return rc;
    }
    pm->skipping = false;
    pm->line_len = 0;
  }
  return 0;
}

/* Newest first among equal starts, so the merge below keeps it. */
static int jsym_cmp(const void *a, const void *b) {
  const jsym_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  return x->seq > y->seq ? -1 : x->seq < y->seq;
}

/* Merge the sorted new entries into v, leaving it sorted and free of
 * overlaps: the map is append-only, so where two entries overlap the later
 * line describes the code that is there now (V8 reuses addresses after
 * GC). O(new log new + n). */
int ember__perfmap_commit(ember__perfmap_t *pm) {
  if (pm == NULL) return -EINVAL;
  if (pm->nadd == 0) return 0;
  if (pm->nadd > 1) qsort(pm->add, pm->nadd, sizeof *pm->add, jsym_cmp);
  size_t total = pm->n + pm->nadd;
  jsym_t *out = ember_malloc(total * sizeof *out);
  if (out == NULL) return -ENOMEM;
  size_t i = 0, j = 0, k = 0;
  while (i < pm->n || j < pm->nadd) {
    const jsym_t *e;
    if (j >= pm->nadd || (i < pm->n && jsym_cmp(&pm->v[i], &pm->add[j]) <= 0)) {
      e = &pm->v[i++];
    } else {
      e = &pm->add[j++];
    }
    bool drop = false;
    while (k > 0 && out[k - 1].end > e->start) {
      if (out[k - 1].seq > e->seq) {
        drop = true;
        break;
      }
      k--;
    }
    if (!drop) out[k++] = *e;
  }
  ember_free(pm->v);
  pm->v = out;
  pm->n = k;
  pm->nadd = 0;
  /* The first read of a big map leaves a big `add`; later refreshes
   * append a few lines. Do not hold the first one's size for good. */
  if (pm->add_cap > 64) {
    ember_free(pm->add);
    pm->add = NULL;
    pm->add_cap = 0;
  }
  return 0;
}

const char *ember__perfmap_lookup(const ember__perfmap_t *pm, uint64_t a) {
  if (pm == NULL) return NULL;
  size_t lo = 0, hi = pm->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (pm->v[mid].start <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const jsym_t *s = &pm->v[lo - 1];
  return a < s->end ? s->name : NULL;
}

const char *ember__perfmap_path(const ember__perfmap_t *pm) { return pm ? pm->path : ""; }
bool ember__perfmap_found(const ember__perfmap_t *pm) { return pm != NULL && pm->found; }
size_t ember__perfmap_count(const ember__perfmap_t *pm) { return pm ? pm->n : 0; }

void ember__perfmap_stats(const ember__perfmap_t *pm, ember__perfmap_stats_t *out) {
  if (pm == NULL || out == NULL) return;
  *out = pm->stats;
}

static bool refused(int rc) { return rc == -ELOOP || rc == -ENODEV || rc == -EPERM; }

/* Open the map: <dir>/perf-PID.map, else (dir not chosen by the caller)
 * the one the process wrote into its own /tmp, resolved inside its root
 * with no symbolic link followed. Sets *which to the paths[] index. */
static int open_map(ember__perfmap_t *pm, const ember__perfmap_src_t *src, char *path, size_t size,
                    int *which, struct stat *st) {
  char tmp[PATH_MAX];
  ember__safe_opts_t o = {.owner = EMBER__SAFE_ANY_OWNER, .one_link = true};
  struct stat pst;
  /* The map must belong to the process's user (root's only for a root
   * process: a bind-mounted root file would leak its lines). A
   * process already gone leaves no owner to compare with; the other checks
   * still hold. */
  int pn = snprintf(tmp, sizeof tmp, "%s/%d", src->proc_root, (int)pm->pid);
  if (pn < 0 || (size_t)pn >= sizeof tmp) return -ENAMETOOLONG;
  if (stat(tmp, &pst) == 0) o.owner = (int64_t)pst.st_uid;
  pn = snprintf(path, size, "%s/perf-%d.map", src->dir, (int)pm->pid);
  if (pn < 0 || (size_t)pn >= size) return -ENAMETOOLONG;
  *which = 0;
  int fd = ember__safe_openat(AT_FDCWD, path, &o, st);
  if (fd != -ENOENT || src->dir_set) return fd;
  /* Only a process in a pid namespace of its own has another pid there:
   * one stat of its ns link tells (most processes have no perf map, and
   * reading their status on every refresh was a tenth of the agent's CPU
   * at 1000 Hz); a process keeps its namespace for life, so it is asked
   * once per state. */
  if (pm->nspid == 0) {
    struct stat mine, its;
    pn = snprintf(tmp, sizeof tmp, "%s/%d/ns/pid", src->proc_root, (int)pm->pid);
    if (pn > 0 && (size_t)pn < sizeof tmp && stat("/proc/self/ns/pid", &mine) == 0 &&
        stat(tmp, &its) == 0 && its.st_ino == mine.st_ino && its.st_dev == mine.st_dev) {
      pm->nspid = (uint64_t)pm->pid;
    } else if (ember__proc_ns_pid(src->proc_root, pm->pid, &pm->nspid) != 0) {
      return fd;
    }
  }
  uint64_t nspid = pm->nspid;
  if (nspid == (uint64_t)pm->pid) return fd;
  pn = snprintf(tmp, sizeof tmp, "%s/%d/root", src->proc_root, (int)pm->pid);
  if (pn < 0 || (size_t)pn >= sizeof tmp) return -ENAMETOOLONG;
  /* The root link is the kernel's; below it, everything is the process's. */
  int rootfd = open(tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return -errno;
  char rel[64];
  snprintf(rel, sizeof rel, "tmp/perf-%llu.map", (unsigned long long)nspid);
  fd = ember__safe_openat(rootfd, rel, &o, st);
  close(rootfd);
  pn = snprintf(path, size, "%s/%s", tmp, rel);
  if (pn < 0 || (size_t)pn >= size) {
    if (fd >= 0) close(fd);
    return -ENAMETOOLONG;
  }
  *which = 1;
  return fd;
}

/* Forget the file's contents read so far (it was replaced or shrank). The
 * names stay allocated: frames may still point at them. */
static void restart(ember__perfmap_t *pm) {
  pm->n = 0;
  pm->nadd = 0;
  pm->offset = 0;
  pm->line_len = 0;
  pm->skipping = false;
  pm->stats.reloads++;
}

int ember__perfmap_refresh(ember__perfmap_t *pm, const ember__perfmap_src_t *src) {
  if (pm == NULL || src == NULL || src->proc_root == NULL || src->dir == NULL) return -EINVAL;
  char path[PATH_MAX];
  struct stat st;
  int which = 0, rc = 0;
  char *buf = NULL;
  int fd = open_map(pm, src, path, sizeof path, &which, &st);
  if (fd < 0) {
    if (refused(fd) || fd == -EFBIG) {
      pm->stats.refused++;
      if (!pm->warned_refused) {
        pm->warned_refused = true;
        EMBER_WARN_LIMITED("symbolize",
                           "perf map %s of pid %d refused: %s; its JIT frames stay unnamed", path,
                           (int)pm->pid,
                           fd == -ELOOP    ? "a symbolic link"
                           : fd == -ENODEV ? "not a regular file"
                           : fd == -EPERM  ? "not the process's user's, or a second hard link"
                                           : "too big");
      }
    }
    return fd == -ENOMEM ? fd : 0;
  }
  pm->stats.reads++;
  if (pm->paths[which] == NULL) {
    pm->paths[which] = name_dup(pm, path, strlen(path));
    if (pm->paths[which] == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
  }
  pm->path = pm->paths[which];
  uint64_t size = (uint64_t)st.st_size;
  if (pm->found &&
      ((uint64_t)st.st_ino != pm->ino || (uint64_t)st.st_dev != pm->dev || size < pm->offset)) {
    restart(pm);
  }
  pm->found = true;
  pm->ino = (uint64_t)st.st_ino;
  pm->dev = (uint64_t)st.st_dev;
  if (size <= pm->offset) goto cleanup; /* nothing appended */
  if (pm->budget == 0 || pm->n >= pm->lim.max_entries) {
    pm->stats.capped++;
    if (!pm->warned_capped) {
      pm->warned_capped = true;
      EMBER_WARN_LIMITED(
          "symbolize",
          "perf map %s of pid %d is past its bound (%llu bytes read, %zu entries): code "
          "compiled since stays unnamed",
          pm->path, (int)pm->pid, (unsigned long long)pm->lim.max_bytes, pm->n);
    }
    goto cleanup;
  }
  buf = ember_malloc(READ_BLOCK);
  if (buf == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  /* Read up to the size fstat gave, not to EOF: a file that keeps growing
   * while it is read waits for the next refresh instead of holding us. */
  while (pm->offset < size && pm->budget > 0) {
    uint64_t want = size - pm->offset;
    if (want > READ_BLOCK) want = READ_BLOCK;
    if (want > pm->budget) want = pm->budget;
    ssize_t r = ember__safe_pread(fd, buf, (size_t)want, pm->offset);
    if (r <= 0) break; /* an I/O error or a file cut meanwhile: keep what was read */
    rc = ember__perfmap_feed(pm, buf, (size_t)r);
    pm->offset += (uint64_t)r;
    if (rc != 0) goto cleanup;
  }
  if (pm->budget == 0 && pm->offset < size) pm->stats.capped++;
  rc = ember__perfmap_commit(pm);
cleanup:
  ember_free(buf);
  close(fd);
  return rc;
}
