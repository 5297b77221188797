/* Symbolization on the agent. The contract is in symbolize.h; the data
 * structures, string lifetimes and measured costs are described in
 * docs/internals/symbolize.md. */
#include "symbolize.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/ember.h"
#include "perfmap.h"
#include "safefile.h"
#include "strarena.h"

/* Untrusted input limits (STYLE.md rule 12): the longest line read from a
 * /proc file or a perf map, and the most entries kept from one file. */
#define LINE_BUF     (64u * 1024u)
#define MAX_MAPPINGS (1u << 20)
#define MAX_KSYMS    (1u << 22)

#define DEFAULT_MAX_MODULES 512u
#define PID_BUCKETS         256u
/* perf callchains carry PERF_CONTEXT_* markers at the top of the address
 * space (-4095 and up); they are not code. */
#define PERF_CONTEXT_MIN ((uint64_t)-4095)
/* kallsyms has no sizes: a symbol ends at the next one, but never reaches
 * more than this far into the gap before another module's text. */
#define KSYM_GAP_MAX (64u * 1024u)
#define DEBUG_DIR    "/usr/lib/debug/.build-id"

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */

/* Returns the grown array (v untouched and NULL returned on failure). */
static void *grow_array(void *v, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return v;
  size_t nc = *cap ? *cap : 16;
  while (nc < need) nc *= 2;
  if (nc > SIZE_MAX / elem) return NULL;
  void *p = ember_realloc(v, nc * elem);
  if (p == NULL) return NULL;
  *cap = nc;
  return p;
}

/* qsort, but fine with an empty (NULL) array, which qsort is not. */
static void sort_array(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, n, size, cmp);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Fields inside /proc and perf-map lines are hex without "0x" (and decimal
 * inodes) followed by more text: ember_parse_u64 wants a whole token, so
 * these scan in place with the same overflow checks. */
static bool scan_hex(const char **p, uint64_t *out) {
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

static bool scan_dec(const char **p, uint64_t *out) {
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

static const char *skip_blanks(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/* ELF and debug files larger than this are not read. */
#define MAX_ELF_SIZE (2ull << 30)
/* A file the profiled process may rewrite is read with pread instead of a
 * mapping (a mapping of a file truncated meanwhile raises SIGBUS); DWARF,
 * which needs the whole file in memory then, is kept only up to this. */
#define MAX_READ_DWARF_SIZE (256ull << 20)
/* ... and all such whole-file copies together, process-wide, up to this
 * (512 modules of 256 MB each would be 128 GB): past it, later modules get
 * function names but no DWARF lines until earlier ones are evicted. */
#define MAX_READ_DWARF_TOTAL (256ull << 20)
/* A symbol table larger than this is not loaded (the module is kept as a
 * broken one): libc's is ~100 KB, the largest C++ binaries' tens of MB. */
#define MAX_SYMTAB_SIZE (64ull << 20)

static atomic_uint_fast64_t dwarf_read_bytes;

/* Files of the kernel or of the host's root (kallsyms, /usr/lib/debug):
 * links followed, but never a FIFO or a device. */
static int open_trusted(const char *path, uint64_t max_size, struct stat *st) {
  ember__safe_opts_t o = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER, .max_size = max_size};
  return ember__safe_openat(AT_FDCWD, path, &o, st);
}

static void close_fd(int fd) {
  if (fd >= 0) close(fd);
}

typedef int (*line_fn)(void *ctx, char *line, size_t len);

/* Call fn for every line read from fd's current position (newline replaced
 * by NUL). A last line without newline is passed only if `tail` (perf maps
 * are being written: a partial line is left for the next read). Lines
 * longer than LINE_BUF are skipped. *consumed (may be NULL) gets the bytes
 * up to and including the last newline handled. Returns 0, -errno, or the
 * first nonzero value fn returns. */
static int read_lines(int fd, bool tail, line_fn fn, void *ctx, uint64_t *consumed) {
  int rc = 0;
  size_t have = 0;
  uint64_t done = 0, skipped = 0;
  bool skipping = false;
  char *buf = ember_malloc(LINE_BUF + 1);
  if (buf == NULL) return -ENOMEM;
  for (;;) {
    ssize_t r = read(fd, buf + have, LINE_BUF - have);
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
    if (start == 0 && have == LINE_BUF) {
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

/* Leading underscores, for choosing among aliases of one address. */
static unsigned underscores(const char *s) {
  unsigned n = 0;
  while (s[n] == '_') n++;
  return n;
}

/* ------------------------------------------------------------------ */
/* procmaps                                                            */

typedef enum map_kind {
  MAP_FILE = 0,
  MAP_ANON = 1,   /* anonymous executable memory: JIT code */
  MAP_VDSO = 2,   /* [vdso] */
  MAP_SPECIAL = 3 /* [vsyscall] and other bracketed names */
} map_kind_t;

typedef struct mapping {
  uint64_t start, end, offset;
  uint64_t dev; /* major << 32 | minor, as /proc shows it */
  uint64_t ino;
  const char *path; /* file path or special name; NULL when anonymous */
  map_kind_t kind;
  bool deleted; /* the file was unlinked: only map_files can open it */
} mapping_t;

struct ember__procmaps {
  pid_t pid;
  int64_t uid; /* the process's owner at read time; -1 unknown */
  char *proc_root;
  mapping_t *v;
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
  if (!scan_hex(&p, &start) || *p++ != '-' || !scan_hex(&p, &end) || *p++ != ' ') return 0;
  if (strlen(p) < 5 || p[4] != ' ') return 0;
  bool exec = p[2] == 'x';
  p += 5;
  if (!exec || end <= start) return 0;
  if (!scan_hex(&p, &offset) || *p++ != ' ') return 0;
  if (!scan_hex(&p, &major) || *p++ != ':' || !scan_hex(&p, &minor) || *p++ != ' ') return 0;
  if (!scan_dec(&p, &ino)) return 0;
  p = skip_blanks(p);
  if (m->n >= MAX_MAPPINGS) return 0;

  mapping_t mp = {.start = start,
                  .end = end,
                  .offset = offset,
                  .dev = major << 32 | (minor & 0xffffffffu),
                  .ino = ino,
                  .kind = MAP_FILE};
  size_t plen = len - (size_t)(p - line);
  if (plen == 0 || strncmp(p, "[anon:", 6) == 0) {
    mp.kind = MAP_ANON;
  } else if (p[0] == '[') {
    mp.kind = strcmp(p, "[vdso]") == 0 ? MAP_VDSO : MAP_SPECIAL;
  } else {
    static const char del[] = " (deleted)";
    if (plen > sizeof del - 1 && strcmp(p + plen - (sizeof del - 1), del) == 0) {
      mp.deleted = true;
      plen -= sizeof del - 1;
    }
  }
  if (mp.kind != MAP_ANON) {
    /* Consecutive mappings of one file share its path string. */
    const mapping_t *prev = m->n ? &m->v[m->n - 1] : NULL;
    if (prev != NULL && prev->path != NULL && strlen(prev->path) == plen &&
        memcmp(prev->path, p, plen) == 0) {
      mp.path = prev->path;
    } else {
      mp.path = ember__strarena_dup(&m->strings, p, plen);
      if (mp.path == NULL) return -ENOMEM;
    }
  }
  mapping_t *nv = grow_array(m->v, &m->cap, m->n + 1, sizeof *m->v);
  if (nv == NULL) return -ENOMEM;
  m->v = nv;
  m->v[m->n++] = mp;
  return 0;
}

static int mapping_cmp(const void *a, const void *b) {
  const mapping_t *x = a, *y = b;
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
  rc = read_lines(fd, true, maps_line, &ctx, NULL);
  if (rc != 0) goto cleanup;
  /* The kernel lists mappings in address order; sorting costs nothing then
   * and keeps the binary search right for any other source. */
  sort_array(m->v, m->n, sizeof *m->v, mapping_cmp);
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
  m->proc_root = ember_strdup("/proc");
  line = ember_malloc(LINE_BUF + 1);
  if (m->proc_root == NULL || line == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  maps_ctx_t ctx = {m};
  /* Lines as read_lines passes them: at most LINE_BUF bytes (longer ones
   * are skipped), NUL-terminated, the last one without its newline too. */
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(buf + at, '\n', len - at);
    size_t l = nl ? (size_t)(nl - (buf + at)) : len - at;
    if (l < LINE_BUF) {
      memcpy(line, buf + at, l);
      line[l] = '\0';
      rc = maps_line(&ctx, line, l);
      if (rc != 0) goto cleanup;
    }
    at += l + (nl ? 1 : 0);
  }
  sort_array(m->v, m->n, sizeof *m->v, mapping_cmp);
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

static const mapping_t *maps_find(const ember__procmaps_t *m, uint64_t addr) {
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
  const mapping_t *mp = &m->v[lo - 1];
  return addr < mp->end ? mp : NULL;
}

bool ember__procmaps_covers(const ember__procmaps_t *m, uint64_t addr) {
  return maps_find(m, addr) != NULL;
}

size_t ember__procmaps_count(const ember__procmaps_t *m) { return m ? m->n : 0; }

static bool transient(int err) { return err == -EMFILE || err == -ENFILE || err == -ENOMEM; }

/* Open a mapped file: a regular file and, when `ino` is not 0, that very
 * inode, both checked before the file is opened for real (a device such as
 * /dev/watchdog someone mapped is never opened). Returns an fd or -errno
 * (-ESTALE for another file). */
static int open_mapped(int dirfd, const char *path, bool follow, uint64_t ino, struct stat *st) {
  ember__safe_opts_t o = {
      .follow = follow, .owner = EMBER__SAFE_ANY_OWNER, .max_size = MAX_ELF_SIZE, .ino = ino};
  int fd = ember__safe_openat(dirfd, path, &o, st);
  if (fd < 0) return transient(fd) ? fd : -ESTALE;
  return fd;
}

/* Open the file behind a mapping, best effort: the kernel's handle on the
 * mapped file itself (exactly the mapped inode; works for deleted files and
 * other mount namespaces while the process lives), else the plain path if
 * it is still the same file (inode check: a container's /usr/bin/x is not
 * the host's), else the path inside the process's root. Returns an fd or
 * -errno. */
static int open_mapping(const ember__procmaps_t *pm, const mapping_t *mp, struct stat *st) {
  char path[PATH_MAX];
  int fd = -ENOENT;
  int pn;
  /* The kernel's own link to the mapped file. */
  pn = snprintf(path, sizeof path, "%s/%d/map_files/%llx-%llx", pm->proc_root, (int)pm->pid,
                (unsigned long long)mp->start, (unsigned long long)mp->end);
  if (pn > 0 && (size_t)pn < sizeof path) {
    /* No inode check: it is the mapped file (overlayfs may number it
     * otherwise than maps does). */
    fd = open_mapped(AT_FDCWD, path, true, 0, st);
    if (fd >= 0 || transient(fd)) return fd;
  }
  if (!mp->deleted) {
    /* Links followed: the inode check makes it the very file mapped. */
    fd = open_mapped(AT_FDCWD, mp->path, true, mp->ino, st);
    if (fd >= 0 || transient(fd)) return fd;
  }
  if (mp->deleted || mp->path[0] != '/') return fd;
  /* Overlay filesystems may show another inode through the path than
   * /proc/PID/maps does, so this one is not checked; the process owns
   * everything below its root, so no link there is followed. */
  pn = snprintf(path, sizeof path, "%s/%d/root", pm->proc_root, (int)pm->pid);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  int rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return transient(-errno) ? -errno : -ESTALE;
  fd = open_mapped(rootfd, mp->path + 1, false, 0, st);
  close(rootfd);
  return fd;
}

/* ------------------------------------------------------------------ */
/* ELF modules                                                         */

typedef struct fsym {
  uint64_t start, end;
  const char *name;
} fsym_t;

typedef struct load {
  uint64_t offset, vaddr, filesz;
} load_t;

/* A function or inlined call with code at [lo, hi): one per address range
 * of its DIE. */
typedef struct dnode {
  uint64_t lo, hi;
  const char *name;      /* borrowed from the Dwarf handle */
  const char *call_file; /* inlined: where the call is in the caller */
  uint32_t call_line;
  uint32_t parent; /* index + 1 of the node that holds this one; 0 = none */
  uint32_t depth;
  uint32_t id; /* position before sorting, while building */
  bool inlined;
} dnode_t;

/* One compilation unit; its nodes are indexed on the first lookup in it.
 * dwarf_getscopes would walk the CU's whole DIE tree on every lookup (28 us
 * for a 2 KB CU, measured), the index walks it once. */
typedef struct cu_info {
  Dwarf_Die die;
  dnode_t *nodes; /* sorted by lo; a node before the nodes it holds */
  size_t n;
  bool indexed;
} cu_info_t;

typedef struct cu_range {
  uint64_t lo, hi;
  size_t cu; /* index in module.cu_list */
} cu_range_t;

typedef struct module {
  struct module *lru_prev, *lru_next; /* most recently used at the head */
  struct module *grave_next;
  const char *build_id; /* hex, in arena; NULL when the file has none */
  fsym_t *syms;
  size_t nsyms;
  load_t *loads;
  size_t nloads;
  bool broken; /* unreadable or not ELF: its frames stay unresolved */
  /* DWARF: dw_elf is kept (mapped, no fd) when opts.dwarf and the file or
   * its /usr/lib/debug file has .debug_info; the Dwarf handle and the CU
   * table are made on the first lookup that needs them. */
  Elf *dw_elf;
  uint64_t dw_bytes; /* of dwarf_read_bytes: dw_elf is a whole-file copy */
  Dwarf *dw;
  bool dw_tried;
  cu_range_t *cus; /* sorted by lo */
  size_t ncus, cus_cap;
  cu_info_t *cu_list;
  size_t ncu_list, cu_list_cap;
  ember__strarena_t arena; /* symbol names, build-id, alias paths */
} module_t;

/* A file as one process maps it: (dev, inode, path) -> module. Several
 * aliases share a module when their files have the same build-id. */
typedef struct alias {
  uint64_t dev, ino;
  const char *path; /* in the module's arena */
  module_t *mod;
} alias_t;

/* An open ELF file with the parts the module needs. */
typedef struct elf_file {
  int fd;
  Elf *elf;
  bool mapped;   /* ELF_C_READ_MMAP: only for files nobody but root can write */
  uint64_t size; /* st_size at open */
} elf_file_t;

static void elf_file_close(elf_file_t *f) {
  if (f->elf != NULL) elf_end(f->elf);
  close_fd(f->fd);
  f->elf = NULL;
  f->fd = -1;
}

/* Takes ownership of fd (closed on failure); st is its fstat. A mapping
 * is cheaper than reads, but a file that someone truncates while the
 * agent has it mapped raises SIGBUS in the agent: only files that root
 * owns and no one else may write are mapped, and only when `root_safe`
 * (the process that maps it is not root itself: a root process, say in a
 * rootful container, may cut root's files); every other one is read with
 * pread (libelf's ELF_C_READ). */
static int elf_file_open_fd(int fd, const struct stat *st, bool root_safe, elf_file_t *out) {
  bool map = root_safe && st->st_uid == 0 && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
  Elf *elf = elf_begin(fd, map ? ELF_C_READ_MMAP : ELF_C_READ, NULL);
  if (elf == NULL || elf_kind(elf) != ELF_K_ELF) {
    if (elf != NULL) elf_end(elf);
    close(fd);
    return EMBER_ECORRUPT;
  }
  out->fd = fd;
  out->elf = elf;
  out->mapped = map;
  out->size = (uint64_t)st->st_size;
  return 0;
}

static Elf_Scn *find_section(Elf *elf, Elf64_Word type, const char *name) {
  size_t shstrndx;
  if (name != NULL && elf_getshdrstrndx(elf, &shstrndx) != 0) return NULL;
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn != NULL; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != type) continue;
    if (name == NULL) return scn;
    const char *n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (n != NULL && strcmp(n, name) == 0) return scn;
  }
  return NULL;
}

static bool has_debug_info(Elf *elf) {
  return find_section(elf, SHT_PROGBITS, ".debug_info") != NULL ||
         find_section(elf, SHT_PROGBITS, ".zdebug_info") != NULL;
}

/* Hex build-id into `hex` (2 * 20 + 1 bytes are enough for SHA-1 ids; longer
 * ids are cut). Returns false when the file has none. */
static bool read_build_id(Elf *elf, char *hex, size_t size) {
  const void *id = NULL;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
  if (n <= 0 || id == NULL) return false;
  static const char digits[] = "0123456789abcdef";
  const unsigned char *b = id;
  size_t k = 0;
  for (ssize_t i = 0; i < n && k + 2 < size; i++) {
    hex[k++] = digits[b[i] >> 4];
    hex[k++] = digits[b[i] & 15];
  }
  hex[k] = '\0';
  return k > 0;
}

/* The detached debug file Debian and Fedora install for a build-id
 * (libc6-dbg, *-dbgsym), if present and really the same build. */
static int open_debug_file(const char *build_id, elf_file_t *out) {
  char path[PATH_MAX];
  if (build_id == NULL || strlen(build_id) < 3) return -ENOENT;
  int pn = snprintf(path, sizeof path, "%s/%.2s/%s.debug", DEBUG_DIR, build_id, build_id + 2);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  struct stat st;
  int fd = open_trusted(path, MAX_ELF_SIZE, &st);
  if (fd < 0) return fd;
  /* The host's own debug directory, no process's: root's files there. */
  int rc = elf_file_open_fd(fd, &st, true, out);
  if (rc != 0) return rc;
  char hex[2 * 64 + 1];
  if (!read_build_id(out->elf, hex, sizeof hex) || strcmp(hex, build_id) != 0) {
    elf_file_close(out);
    return -ENOENT;
  }
  return 0;
}

typedef struct raw_sym {
  uint64_t start, size, secend;
  const char *name; /* borrowed from the ELF while loading */
  unsigned rank;    /* lower is better among aliases of one address */
} raw_sym_t;

static int raw_sym_cmp(const void *a, const void *b) {
  const raw_sym_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Rank aliases of one address the way perf does: a global or weak name over
 * a local one, then fewer leading underscores ("getpid" over "__getpid"),
 * then global over weak. */
static unsigned sym_rank(const GElf_Sym *sym, const char *name) {
  unsigned bind = GELF_ST_BIND(sym->st_info);
  unsigned local = bind == STB_LOCAL ? 1u : 0u;
  unsigned u = underscores(name);
  if (u > 15) u = 15;
  return local << 8 | u << 1 | (bind == STB_WEAK ? 1u : 0u);
}

/* Build mod->syms from the STT_FUNC symbols of `elf`'s section of `type`. */
static int load_symbols(module_t *mod, Elf *elf, Elf_Scn *symscn) {
  int rc = 0;
  raw_sym_t *raw = NULL;
  size_t nraw = 0;
  GElf_Shdr sh;
  Elf_Data *data = NULL;
  if (gelf_getshdr(symscn, &sh) == NULL) return 0;
  /* elf_getdata copies a read (not mapped) file's section into memory. */
  if (sh.sh_size > MAX_SYMTAB_SIZE) return -EFBIG;
  data = elf_getdata(symscn, NULL);
  if (data == NULL) return 0;
  /* The count from what libelf really holds, not from sh_entsize, which
   * the file may set to 1 (a raw array 40 times the section). */
  size_t symsz = gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT);
  if (symsz == 0) return 0;
  size_t count = data->d_size / symsz;
  if (count == 0) return 0;
  raw = ember_malloc(count * sizeof *raw);
  if (raw == NULL) return -ENOMEM;
  size_t nsec = 0;
  if (elf_getshdrnum(elf, &nsec) != 0) nsec = 0;
  for (size_t i = 0; i < count; i++) {
    GElf_Sym sym;
    if (gelf_getsym(data, (int)i, &sym) == NULL) continue;
    unsigned type = GELF_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE || sym.st_value == 0) continue;
    const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
    if (name == NULL || name[0] == '\0') continue;
    uint64_t secend = 0;
    GElf_Shdr ssh;
    Elf_Scn *sec = sym.st_shndx < nsec ? elf_getscn(elf, sym.st_shndx) : NULL;
    if (sec != NULL && gelf_getshdr(sec, &ssh) != NULL) secend = ssh.sh_addr + ssh.sh_size;
    raw[nraw++] = (raw_sym_t){sym.st_value, sym.st_size, secend, name, sym_rank(&sym, name)};
  }
  sort_array(raw, nraw, sizeof *raw, raw_sym_cmp);
  /* Keep the best name per address; the size is the largest of its
   * aliases (a size-0 alias must not hide a sized one). */
  size_t k = 0;
  for (size_t i = 0; i < nraw; i++) {
    if (k > 0 && raw[k - 1].start == raw[i].start) {
      if (raw[i].size > raw[k - 1].size) raw[k - 1].size = raw[i].size;
      continue;
    }
    raw[k++] = raw[i];
  }
  nraw = k;
  if (nraw == 0) goto cleanup;
  mod->syms = ember_malloc(nraw * sizeof *mod->syms);
  if (mod->syms == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  for (size_t i = 0; i < nraw; i++) {
    uint64_t end;
    if (raw[i].size > 0) {
      end = raw[i].start + raw[i].size;
    } else {
      /* Size-0 symbols (hand-written assembly, the end of .text) reach the
       * next symbol, but not past their section. */
      end = i + 1 < nraw ? raw[i + 1].start : raw[i].secend;
      if (raw[i].secend > raw[i].start && end > raw[i].secend) end = raw[i].secend;
      if (end <= raw[i].start) end = raw[i].start + 1;
    }
    const char *name = ember__strarena_dup(&mod->arena, raw[i].name, strlen(raw[i].name));
    if (name == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    mod->syms[mod->nsyms++] = (fsym_t){raw[i].start, end, name};
  }
cleanup:
  ember_free(raw);
  return rc;
}

static int load_segments(module_t *mod, Elf *elf) {
  size_t n = 0;
  if (elf_getphdrnum(elf, &n) != 0 || n == 0) return 0;
  mod->loads = ember_malloc(n * sizeof *mod->loads);
  if (mod->loads == NULL) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, (int)i, &ph) == NULL || ph.p_type != PT_LOAD) continue;
    mod->loads[mod->nloads++] = (load_t){ph.p_offset, ph.p_vaddr, ph.p_filesz};
  }
  return 0;
}

/* Drop what only lookups need; keep what frames point into (the arena
 * and the DWARF handle) until the next forget. */
static void module_strip(module_t *mod) {
  ember_free(mod->syms);
  ember_free(mod->loads);
  ember_free(mod->cus);
  for (size_t i = 0; i < mod->ncu_list; i++) ember_free(mod->cu_list[i].nodes);
  ember_free(mod->cu_list);
  mod->syms = NULL;
  mod->loads = NULL;
  mod->cus = NULL;
  mod->cu_list = NULL;
  mod->nsyms = mod->nloads = mod->ncus = mod->cus_cap = mod->ncu_list = mod->cu_list_cap = 0;
}

static void module_free(module_t *mod) {
  if (mod == NULL) return;
  module_strip(mod);
  if (mod->dw != NULL) dwarf_end(mod->dw);
  if (mod->dw_elf != NULL) elf_end(mod->dw_elf);
  if (mod->dw_bytes != 0) atomic_fetch_sub(&dwarf_read_bytes, mod->dw_bytes);
  ember__strarena_free(&mod->arena);
  ember_free(mod);
}

/* Parse an ELF file into a new module. `f` stays the caller's. */
static int module_build(elf_file_t *f, const char *build_id, bool dwarf, bool dwarf_detached,
                        module_t **out) {
  int rc = 0;
  elf_file_t dbg = {-1, NULL, false, 0};
  module_t *mod = ember_calloc(1, sizeof *mod);
  if (mod == NULL) return -ENOMEM;
  if (build_id != NULL) {
    mod->build_id = ember__strarena_dup(&mod->arena, build_id, strlen(build_id));
    if (mod->build_id == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
  }
  rc = load_segments(mod, f->elf);
  if (rc != 0) goto cleanup;
  Elf_Scn *symtab = find_section(f->elf, SHT_SYMTAB, NULL);
  bool main_debug = dwarf && has_debug_info(f->elf);
  if (symtab == NULL || (dwarf && !main_debug)) {
    if (open_debug_file(build_id, &dbg) != 0) dbg = (elf_file_t){-1, NULL, false, 0};
  }
  if (symtab != NULL) {
    rc = load_symbols(mod, f->elf, symtab);
  } else if (dbg.elf != NULL && (symtab = find_section(dbg.elf, SHT_SYMTAB, NULL)) != NULL) {
    rc = load_symbols(mod, dbg.elf, symtab);
  } else if ((symtab = find_section(f->elf, SHT_DYNSYM, NULL)) != NULL) {
    rc = load_symbols(mod, f->elf, symtab);
  }
  if (rc != 0) goto cleanup;
  elf_file_t *keep = NULL;
  if (main_debug) {
    keep = f;
  } else if (dwarf && dwarf_detached && dbg.elf != NULL && has_debug_info(dbg.elf)) {
    keep = &dbg;
  }
  if (keep != NULL && !keep->mapped && keep->size > MAX_READ_DWARF_SIZE) keep = NULL;
  if (keep != NULL && !keep->mapped) {
    /* A file read, not mapped: FDREAD reads it whole into memory, but
     * libelf (0.188) then loses the section data it had already read into
     * the handle, so a fresh handle is read whole instead. Reserved from
     * the process-wide budget first. */
    uint64_t want = keep->size, cur = atomic_load(&dwarf_read_bytes);
    bool reserved = false;
    while (cur <= MAX_READ_DWARF_TOTAL && want <= MAX_READ_DWARF_TOTAL - cur) {
      if (atomic_compare_exchange_weak(&dwarf_read_bytes, &cur, cur + want)) {
        reserved = true;
        break;
      }
    }
    Elf *whole = reserved ? elf_begin(keep->fd, ELF_C_READ, NULL) : NULL;
    if (whole != NULL && elf_cntl(whole, ELF_C_FDREAD) == 0) {
      mod->dw_elf = whole;
      mod->dw_bytes = want;
    } else {
      if (whole != NULL) elf_end(whole);
      if (reserved) atomic_fetch_sub(&dwarf_read_bytes, want);
    }
  } else if (keep != NULL) {
    /* The file is mapped (FDREAD reads it only if it is not) and libelf
     * then lets go of the descriptor, as FDDONE would: holding one per
     * module could exhaust the agent's fd limit. */
    if (elf_cntl(keep->elf, ELF_C_FDREAD) == 0) {
      mod->dw_elf = keep->elf;
      keep->elf = NULL;
    }
  }
  *out = mod;
  mod = NULL;
cleanup:
  elf_file_close(&dbg);
  module_free(mod);
  return rc;
}

static bool module_translate(const module_t *mod, uint64_t file_off, uint64_t *vaddr) {
  for (size_t i = 0; i < mod->nloads; i++) {
    const load_t *l = &mod->loads[i];
    if (file_off >= l->offset && file_off - l->offset < l->filesz) {
      *vaddr = file_off - l->offset + l->vaddr;
      return true;
    }
  }
  return false;
}

static const fsym_t *module_sym(const module_t *mod, uint64_t a) {
  size_t lo = 0, hi = mod->nsyms;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (mod->syms[mid].start <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const fsym_t *s = &mod->syms[lo - 1];
  return a < s->end ? s : NULL;
}

static int cu_cmp(const void *a, const void *b) {
  const cu_range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Open DWARF on first use and index the CUs' address ranges. Our own table
 * rather than dwarf_addrdie: it does not depend on .debug_aranges, which
 * some toolchains leave out. Returns 0 (even when there is no usable
 * DWARF) or -ENOMEM. */
static int module_dwarf(module_t *mod) {
  if (mod->dw_tried || mod->dw_elf == NULL) return 0;
  mod->dw = dwarf_begin_elf(mod->dw_elf, DWARF_C_READ, NULL);
  if (mod->dw == NULL) {
    mod->dw_tried = true;
    return 0;
  }
  Dwarf_Off off = 0, next = 0;
  size_t hsize = 0;
  while (dwarf_nextcu(mod->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
    Dwarf_Die cu;
    if (dwarf_offdie(mod->dw, off + hsize, &cu) != NULL) {
      bool listed = false;
      Dwarf_Addr base, lo, hi;
      for (ptrdiff_t it = 0; (it = dwarf_ranges(&cu, it, &base, &lo, &hi)) > 0;) {
        if (hi <= lo) continue;
        if (!listed) {
          cu_info_t *nl =
              grow_array(mod->cu_list, &mod->cu_list_cap, mod->ncu_list + 1, sizeof *nl);
          if (nl == NULL) goto nomem;
          mod->cu_list = nl;
          mod->cu_list[mod->ncu_list++] = (cu_info_t){.die = cu};
          listed = true;
        }
        cu_range_t *nv = grow_array(mod->cus, &mod->cus_cap, mod->ncus + 1, sizeof *mod->cus);
        if (nv == NULL) goto nomem;
        mod->cus = nv;
        mod->cus[mod->ncus++] = (cu_range_t){lo, hi, mod->ncu_list - 1};
      }
    }
    off = next;
  }
  sort_array(mod->cus, mod->ncus, sizeof *mod->cus, cu_cmp);
  mod->dw_tried = true;
  return 0;
nomem:
  /* Leave no half-built table: the next lookup starts over. */
  ember_free(mod->cus);
  ember_free(mod->cu_list);
  mod->cus = NULL;
  mod->cu_list = NULL;
  mod->ncus = mod->cus_cap = mod->ncu_list = mod->cu_list_cap = 0;
  dwarf_end(mod->dw);
  mod->dw = NULL;
  return -ENOMEM;
}

static const cu_range_t *module_cu(const module_t *mod, uint64_t a) {
  size_t lo = 0, hi = mod->ncus;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (mod->cus[mid].lo <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const cu_range_t *c = &mod->cus[lo - 1];
  return a < c->hi ? c : NULL;
}

#define DWARF_MAX_DEPTH 64

typedef struct ibuild {
  dnode_t *v;
  size_t n, cap;
  Dwarf_Die *cudie;
  Dwarf_Files *files;
  size_t nfiles;
  int have_files; /* 0 not tried, 1 yes, -1 none */
} ibuild_t;

static const char *call_file(ibuild_t *b, Dwarf_Die *die) {
  Dwarf_Attribute at;
  Dwarf_Word w;
  if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &at), &w) != 0) return NULL;
  if (b->have_files == 0)
    b->have_files = dwarf_getsrcfiles(b->cudie, &b->files, &b->nfiles) == 0 ? 1 : -1;
  return b->have_files > 0 && w < b->nfiles ? dwarf_filesrc(b->files, w, NULL, NULL) : NULL;
}

/* Add nodes for the functions and inlined calls under `parent`; their
 * enclosing node is one of b->v[pfirst .. pfirst + pcount). Lexical blocks
 * and namespaces are looked through. */
static int index_children(ibuild_t *b, Dwarf_Die *parent, size_t pfirst, size_t pcount,
                          uint32_t depth) {
  Dwarf_Die child, next;
  if (depth > DWARF_MAX_DEPTH || dwarf_child(parent, &child) != 0) return 0;
  for (;;) {
    int rc = 0;
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_entry_point) {
      size_t first = b->n;
      bool inl = tag == DW_TAG_inlined_subroutine;
      const char *name = dwarf_diename(&child);
      const char *cfile = NULL;
      uint32_t cline = 0;
      if (inl) {
        Dwarf_Attribute at;
        Dwarf_Word w;
        cfile = call_file(b, &child);
        if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_line, &at), &w) == 0 && w <= UINT32_MAX)
          cline = (uint32_t)w;
      }
      Dwarf_Addr base, lo, hi;
      for (ptrdiff_t it = 0; (it = dwarf_ranges(&child, it, &base, &lo, &hi)) > 0;) {
        if (hi <= lo || b->n >= UINT32_MAX - 1) continue;
        uint32_t up = pcount ? (uint32_t)pfirst + 1 : 0;
        for (size_t p = pfirst; p < pfirst + pcount; p++) {
          if (b->v[p].lo <= lo && lo < b->v[p].hi) {
            up = (uint32_t)p + 1;
            break;
          }
        }
        dnode_t *nv = grow_array(b->v, &b->cap, b->n + 1, sizeof *b->v);
        if (nv == NULL) return -ENOMEM;
        b->v = nv;
        b->v[b->n] = (dnode_t){lo, hi, name, cfile, cline, up, depth, (uint32_t)b->n, inl};
        b->n++;
      }
      /* A DIE without code (an abstract inline definition) holds none. */
      if (b->n > first) rc = index_children(b, &child, first, b->n - first, depth + 1);
    } else if (tag == DW_TAG_lexical_block || tag == DW_TAG_namespace) {
      rc = index_children(b, &child, pfirst, pcount, depth + 1);
    }
    if (rc != 0) return rc;
    if (dwarf_siblingof(&child, &next) != 0) break;
    child = next;
  }
  return 0;
}

static int dnode_cmp(const void *a, const void *b) {
  const dnode_t *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->depth < y->depth ? -1 : x->depth > y->depth;
}

static int cu_index(cu_info_t *cu) {
  ibuild_t b = {.cudie = &cu->die};
  uint32_t *remap = NULL;
  int rc = index_children(&b, &cu->die, 0, 0, 0);
  if (rc != 0) goto cleanup;
  if (b.n > 0) {
    sort_array(b.v, b.n, sizeof *b.v, dnode_cmp);
    remap = ember_malloc(b.n * sizeof *remap);
    if (remap == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    for (size_t i = 0; i < b.n; i++) remap[b.v[i].id] = (uint32_t)i;
    for (size_t i = 0; i < b.n; i++) {
      if (b.v[i].parent) b.v[i].parent = remap[b.v[i].parent - 1] + 1;
    }
  }
  cu->nodes = b.v;
  cu->n = b.n;
  cu->indexed = true;
  b.v = NULL;
cleanup:
  ember_free(remap);
  ember_free(b.v);
  return rc;
}

/* The innermost node holding `a`. Nodes nest, so the last node starting at
 * or before `a` is either it or inside it: walk out from there. */
static const dnode_t *cu_innermost(const cu_info_t *cu, uint64_t a) {
  size_t lo = 0, hi = cu->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cu->nodes[mid].lo <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const dnode_t *d = &cu->nodes[lo - 1];
  for (unsigned guard = 0; d != NULL && guard <= DWARF_MAX_DEPTH; guard++) {
    if (d->lo <= a && a < d->hi) return d;
    d = d->parent ? &cu->nodes[d->parent - 1] : NULL;
  }
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Kernel symbols                                                      */

typedef struct ksym {
  uint64_t start, end;
  const char *name, *module;
  unsigned rank;
} ksym_t;

typedef struct kctx {
  ksym_t *v;
  size_t n, cap;
  ember__strarena_t *arena;
  const char *last_module;
} kctx_t;

static int ksym_line(void *vctx, char *line, size_t len) {
  kctx_t *k = vctx;
  (void)len;
  const char *p = line;
  uint64_t addr;
  if (!scan_hex(&p, &addr) || *p++ != ' ') return 0;
  char type = *p++;
  if (*p++ != ' ') return 0;
  if (type != 't' && type != 'T' && type != 'w' && type != 'W') return 0;
  if (addr == 0 || k->n >= MAX_KSYMS) return 0; /* kptr_restrict hides them */
  const char *name = p;
  while (*p && *p != ' ' && *p != '\t') p++;
  size_t nlen = (size_t)(p - name);
  if (nlen == 0) return 0;
  const char *mod = "[kernel]";
  size_t mlen = 8;
  p = skip_blanks(p);
  if (*p == '[') {
    const char *e = strchr(p, ']');
    if (e != NULL) {
      mod = p;
      mlen = (size_t)(e - p) + 1;
    }
  }
  const char *modstr = k->last_module;
  if (modstr == NULL || strlen(modstr) != mlen || memcmp(modstr, mod, mlen) != 0) {
    modstr = ember__strarena_dup(k->arena, mod, mlen);
    if (modstr == NULL) return -ENOMEM;
    k->last_module = modstr;
  }
  const char *nm = ember__strarena_dup(k->arena, name, nlen);
  if (nm == NULL) return -ENOMEM;
  ksym_t *nv = grow_array(k->v, &k->cap, k->n + 1, sizeof *k->v);
  if (nv == NULL) return -ENOMEM;
  k->v = nv;
  unsigned u = underscores(nm);
  unsigned rank = (u > 15 ? 15u : u) << 1 | (type == 'w' || type == 'W');
  k->v[k->n++] = (ksym_t){addr, 0, nm, modstr, rank};
  return 0;
}

static int ksym_cmp(const void *a, const void *b) {
  const ksym_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* ------------------------------------------------------------------ */
/* Perf maps (agent/perfmap.c reads them; here, one per pid)           */

typedef struct pidmap {
  struct pidmap *next; /* hash chain */
  pid_t pid;
  ember__perfmap_t *pm;
  uint64_t reads; /* pm's stats.reads already counted in perf_map_loads */
  uint64_t epoch; /* the symbolizer's epoch of the last refresh */
} pidmap_t;

/* ------------------------------------------------------------------ */
/* The symbolizer                                                      */

struct ember__symbolizer {
  char *proc_root, *perf_map_dir, *kallsyms;
  bool perf_map_dir_set;
  uint64_t epoch; /* bumped by each forget: perf maps refresh once per epoch */
  size_t max_modules;
  bool dwarf;
  bool dwarf_detached;

  module_t *lru_head, *lru_tail;
  size_t nmodules;
  module_t *grave;  /* evicted, freed at the next forget */
  alias_t *aliases; /* sorted by (dev, ino) */
  size_t naliases, aliases_cap;
  uint64_t evictions;

  module_t *vdso;
  bool vdso_tried;

  ksym_t *ksyms;
  size_t nksyms;
  bool k_tried;
  ember__strarena_t karena;

  pidmap_t *pids[PID_BUCKETS];
  ember__perfmap_limits_t perf_limits;

  ember__strarena_t names; /* special mapping names ("[vsyscall]"), interned */
  const char **name_list;
  size_t nnames, names_cap;

  ember__symbolizer_stats_t stats;
};

static char *dup_opt(const char *s, const char *dflt) { return ember_strdup(s ? s : dflt); }

int ember__symbolizer_new(const ember__symbolizer_opts_t *opts, ember__symbolizer_t **out) {
  if (out == NULL) return -EINVAL;
  ember__symbolizer_opts_t o = {0};
  if (opts != NULL) o = *opts;
  ember__symbolizer_t *s = ember_calloc(1, sizeof *s);
  if (s == NULL) return -ENOMEM;
  s->proc_root = dup_opt(o.proc_root, "/proc");
  s->perf_map_dir = dup_opt(o.perf_map_dir, "/tmp");
  s->kallsyms = dup_opt(o.kallsyms, "/proc/kallsyms");
  if (s->proc_root == NULL || s->perf_map_dir == NULL || s->kallsyms == NULL) {
    ember__symbolizer_free(s);
    return -ENOMEM;
  }
  s->perf_map_dir_set = o.perf_map_dir != NULL;
  s->max_modules = o.max_modules ? o.max_modules : DEFAULT_MAX_MODULES;
  s->dwarf = o.dwarf;
  s->dwarf_detached = !o.no_detached_dwarf;
  s->perf_limits = o.perf_map;
  /* libelf's version handshake; idempotent and needed before elf_begin. */
  elf_version(EV_CURRENT);
  *out = s;
  return 0;
}

static void pidmap_free(pidmap_t *pm) {
  if (pm == NULL) return;
  ember__perfmap_free(pm->pm);
  ember_free(pm);
}

static void grave_flush(ember__symbolizer_t *s) {
  while (s->grave != NULL) {
    module_t *m = s->grave;
    s->grave = m->grave_next;
    module_free(m);
  }
}

void ember__symbolizer_free(ember__symbolizer_t *s) {
  if (s == NULL) return;
  while (s->lru_head != NULL) {
    module_t *m = s->lru_head;
    s->lru_head = m->lru_next;
    module_free(m);
  }
  grave_flush(s);
  module_free(s->vdso);
  ember_free(s->aliases);
  ember_free(s->ksyms);
  ember__strarena_free(&s->karena);
  for (size_t b = 0; b < PID_BUCKETS; b++) {
    while (s->pids[b] != NULL) {
      pidmap_t *pm = s->pids[b];
      s->pids[b] = pm->next;
      pidmap_free(pm);
    }
  }
  ember__strarena_free(&s->names);
  ember_free(s->name_list);
  ember_free(s->proc_root);
  ember_free(s->perf_map_dir);
  ember_free(s->kallsyms);
  ember_free(s);
}

void ember__symbolizer_forget(ember__symbolizer_t *s, pid_t pid) {
  if (s == NULL) return;
  s->epoch++;
  pidmap_t **pp = &s->pids[(uint32_t)pid % PID_BUCKETS];
  while (*pp != NULL) {
    if ((*pp)->pid == pid) {
      pidmap_t *pm = *pp;
      *pp = pm->next;
      pidmap_free(pm);
      break;
    }
    pp = &(*pp)->next;
  }
  grave_flush(s);
}

void ember__symbolizer_stats(const ember__symbolizer_t *s, ember__symbolizer_stats_t *out) {
  if (s == NULL || out == NULL) return;
  *out = s->stats;
}

static const char *intern_name(ember__symbolizer_t *s, const char *name) {
  for (size_t i = 0; i < s->nnames; i++) {
    if (strcmp(s->name_list[i], name) == 0) return s->name_list[i];
  }
  const char **nv = grow_array(s->name_list, &s->names_cap, s->nnames + 1, sizeof *nv);
  if (nv == NULL) return NULL;
  s->name_list = nv;
  const char *copy = ember__strarena_dup(&s->names, name, strlen(name));
  if (copy == NULL) return NULL;
  s->name_list[s->nnames++] = copy;
  return copy;
}

/* --- module cache --- */

static void lru_unlink(ember__symbolizer_t *s, module_t *m) {
  if (m->lru_prev) {
    m->lru_prev->lru_next = m->lru_next;
  } else {
    s->lru_head = m->lru_next;
  }
  if (m->lru_next) {
    m->lru_next->lru_prev = m->lru_prev;
  } else {
    s->lru_tail = m->lru_prev;
  }
  m->lru_prev = m->lru_next = NULL;
}

static void lru_push(ember__symbolizer_t *s, module_t *m) {
  m->lru_prev = NULL;
  m->lru_next = s->lru_head;
  if (s->lru_head) s->lru_head->lru_prev = m;
  s->lru_head = m;
  if (s->lru_tail == NULL) s->lru_tail = m;
}

static void lru_touch(ember__symbolizer_t *s, module_t *m) {
  if (s->lru_head == m) return;
  lru_unlink(s, m);
  lru_push(s, m);
}

static void evict_one(ember__symbolizer_t *s) {
  module_t *m = s->lru_tail;
  if (m == NULL) return;
  lru_unlink(s, m);
  s->nmodules--;
  size_t k = 0;
  for (size_t i = 0; i < s->naliases; i++) {
    if (s->aliases[i].mod != m) s->aliases[k++] = s->aliases[i];
  }
  s->naliases = k;
  module_strip(m);
  m->grave_next = s->grave;
  s->grave = m;
  s->evictions++;
}

/* The first alias index with key >= (dev, ino). */
static size_t alias_lower(const ember__symbolizer_t *s, uint64_t dev, uint64_t ino) {
  size_t lo = 0, hi = s->naliases;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const alias_t *a = &s->aliases[mid];
    if (a->dev < dev || (a->dev == dev && a->ino < ino)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static alias_t *alias_find(ember__symbolizer_t *s, const mapping_t *mp) {
  for (size_t i = alias_lower(s, mp->dev, mp->ino); i < s->naliases; i++) {
    alias_t *a = &s->aliases[i];
    if (a->dev != mp->dev || a->ino != mp->ino) break;
    if (strcmp(a->path, mp->path) == 0) return a;
  }
  return NULL;
}

/* Add an alias for `mp` to `mod`; mod must already be in the LRU list. */
static int alias_add(ember__symbolizer_t *s, const mapping_t *mp, module_t *mod, alias_t **out) {
  alias_t *nv = grow_array(s->aliases, &s->aliases_cap, s->naliases + 1, sizeof *nv);
  if (nv == NULL) return -ENOMEM;
  s->aliases = nv;
  const char *path = ember__strarena_dup(&mod->arena, mp->path, strlen(mp->path));
  if (path == NULL) return -ENOMEM;
  size_t at = alias_lower(s, mp->dev, mp->ino);
  memmove(&s->aliases[at + 1], &s->aliases[at], (s->naliases - at) * sizeof *s->aliases);
  s->aliases[at] = (alias_t){mp->dev, mp->ino, path, mod};
  s->naliases++;
  *out = &s->aliases[at];
  return 0;
}

static module_t *module_by_build_id(ember__symbolizer_t *s, const char *build_id) {
  for (module_t *m = s->lru_head; m != NULL; m = m->lru_next) {
    if (m->build_id != NULL && strcmp(m->build_id, build_id) == 0) return m;
  }
  return NULL;
}

/* Find or load the module of a file mapping. Returns 0 with *out set, or
 * -ENOMEM. A file that cannot be read becomes a "broken" module so it is
 * not retried on every address; a transient failure (out of fds) leaves
 * *out NULL and caches nothing. */
static int module_for(ember__symbolizer_t *s, const ember__procmaps_t *pm, const mapping_t *mp,
                      alias_t **out) {
  int rc = 0;
  elf_file_t f = {-1, NULL, false, 0};
  module_t *mod = NULL;
  char hex[2 * 64 + 1];
  bool have_id = false;
  *out = NULL;
  alias_t *a = alias_find(s, mp);
  if (a != NULL) {
    lru_touch(s, a->mod);
    s->stats.module_hits++;
    *out = a;
    return 0;
  }
  struct stat st;
  int fd = open_mapping(pm, mp, &st);
  if (transient(fd)) return 0;
  if (fd >= 0 && elf_file_open_fd(fd, &st, pm->uid > 0, &f) == 0) {
    if (f.mapped) s->stats.files_mapped++;
    have_id = read_build_id(f.elf, hex, sizeof hex);
    module_t *same = have_id ? module_by_build_id(s, hex) : NULL;
    if (same != NULL) {
      /* The same build under another path or in another container. */
      rc = alias_add(s, mp, same, out);
      if (rc == 0) {
        lru_touch(s, same);
        s->stats.module_hits++;
      }
      goto cleanup;
    }
    rc = module_build(&f, have_id ? hex : NULL, s->dwarf, s->dwarf_detached, &mod);
    if (rc == 0) s->stats.module_loads++;
  }
  if (mod == NULL) {
    /* Unreadable, not ELF, over a bound or out of memory while parsing it:
     * cached as broken, so it is not read again on every window. */
    rc = 0;
    mod = ember_calloc(1, sizeof *mod);
    if (mod == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    mod->broken = true;
  }
  if (s->nmodules >= s->max_modules) evict_one(s);
  lru_push(s, mod);
  s->nmodules++;
  rc = alias_add(s, mp, mod, out);
  if (rc != 0) {
    lru_unlink(s, mod);
    s->nmodules--;
    goto cleanup;
  }
  mod = NULL;
cleanup:
  module_free(mod);
  elf_file_close(&f);
  return rc;
}

/* The vdso is the same image in every process on this kernel (for one ABI):
 * read the agent's own copy from memory. */
static int vdso_module(ember__symbolizer_t *s, module_t **out) {
  *out = NULL;
  if (s->vdso_tried) {
    *out = s->vdso;
    return 0;
  }
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) {
    s->vdso_tried = true;
    return 0;
  }
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) {
    s->vdso_tried = true;
    return 0;
  }
  size_t size = (size_t)(eh->e_shoff + (uint64_t)eh->e_shnum * eh->e_shentsize);
  size_t ph_end = (size_t)(eh->e_phoff + (uint64_t)eh->e_phnum * eh->e_phentsize);
  if (ph_end > size) size = ph_end;
  /* elf_memory wants a mutable pointer but only reads the image. */
  Elf *elf = elf_memory((char *)base, size);
  if (elf == NULL) {
    s->vdso_tried = true;
    return 0;
  }
  elf_file_t f = {-1, elf, true, 0};
  char hex[2 * 64 + 1];
  bool have_id = read_build_id(elf, hex, sizeof hex);
  module_t *mod = NULL;
  int rc = module_build(&f, have_id ? hex : NULL, false, false, &mod);
  elf_end(elf);
  if (rc != 0) return rc;
  s->vdso = mod;
  s->vdso_tried = true;
  s->stats.module_loads++;
  *out = mod;
  return 0;
}

/* --- kernel --- */

/* Read kallsyms once. Returns 0 (also when it is unreadable or hidden by
 * kptr_restrict: kernel frames then stay unresolved) or -ENOMEM, after
 * which the next kernel frame tries again. */
static int kernel_load(ember__symbolizer_t *s) {
  kctx_t k = {.arena = &s->karena};
  int fd = open_trusted(s->kallsyms, 0, NULL);
  if (fd < 0) {
    s->k_tried = fd != -ENOMEM;
    return fd == -ENOMEM ? fd : 0;
  }
  int rc = read_lines(fd, true, ksym_line, &k, NULL);
  close(fd);
  if (rc != 0) {
    ember_free(k.v);
    ember__strarena_free(&s->karena);
    s->k_tried = rc != -ENOMEM;
    return rc == -ENOMEM ? rc : 0;
  }
  s->k_tried = true;
  sort_array(k.v, k.n, sizeof *k.v, ksym_cmp);
  size_t n = 0;
  for (size_t i = 0; i < k.n; i++) {
    if (n > 0 && k.v[n - 1].start == k.v[i].start) continue;
    k.v[n++] = k.v[i];
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t limit = k.v[i].start + KSYM_GAP_MAX;
    if (i + 1 < n) {
      uint64_t next = k.v[i + 1].start;
      k.v[i].end = k.v[i + 1].module == k.v[i].module || next < limit ? next : limit;
    } else {
      k.v[i].end = limit;
    }
  }
  s->ksyms = k.v;
  s->nksyms = n;
  return 0;
}

static const ksym_t *kernel_find(const ember__symbolizer_t *s, uint64_t a) {
  size_t lo = 0, hi = s->nksyms;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->ksyms[mid].start <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const ksym_t *k = &s->ksyms[lo - 1];
  return a < k->end ? k : NULL;
}

/* --- perf maps --- */

static pidmap_t *perfmap_get(ember__symbolizer_t *s, pid_t pid) {
  for (pidmap_t *pm = s->pids[(uint32_t)pid % PID_BUCKETS]; pm != NULL; pm = pm->next) {
    if (pm->pid == pid) return pm;
  }
  return NULL;
}

/* Read what was appended to pid's perf map, creating its state when the
 * file is first found. Returns 0 (also when there is no map) or -ENOMEM. */
static int perfmap_refresh(ember__symbolizer_t *s, pid_t pid, pidmap_t **io) {
  int rc = 0;
  pidmap_t *pm = *io, *created = NULL;
  if (pm == NULL) {
    pm = created = ember_calloc(1, sizeof *pm);
    if (pm == NULL) return -ENOMEM;
    pm->pid = pid;
    rc = ember__perfmap_new(pid, &s->perf_limits, &pm->pm);
    if (rc != 0) goto cleanup;
  }
  ember__perfmap_src_t src = {
      .proc_root = s->proc_root, .dir = s->perf_map_dir, .dir_set = s->perf_map_dir_set};
  pm->epoch = s->epoch;
  rc = ember__perfmap_refresh(pm->pm, &src);
  ember__perfmap_stats_t ps;
  ember__perfmap_stats(pm->pm, &ps);
  s->stats.perf_map_loads += ps.reads - pm->reads;
  pm->reads = ps.reads;
  ember__perfmap_stats_t after;
  ember__perfmap_stats(pm->pm, &after);
  /* A refused map keeps its state too, so it is logged once per pid, not
   * once per stack. */
  if (created != NULL && (ember__perfmap_found(pm->pm) || after.refused > 0)) {
    uint32_t b = (uint32_t)pid % PID_BUCKETS;
    created->next = s->pids[b];
    s->pids[b] = created;
    created = NULL;
  }
  if (created == NULL) *io = pm;
cleanup:
  pidmap_free(created);
  return rc;
}

/* --- one call --- */

typedef struct call {
  ember__symbolizer_t *s;
  pid_t pid;
  const ember__procmaps_t *maps;
  ember_frame_t *out;
  size_t cap, k;
  pidmap_t *pm;
  bool pm_read; /* the perf map was (re)read in this call */
} call_t;

static bool emit(call_t *c, const ember_frame_t *f) {
  if (c->k >= c->cap) return false;
  c->out[c->k++] = *f;
  if (f->function == NULL) c->s->stats.unresolved++;
  return true;
}

/* Look `a` up in the pid's perf map. A miss may be code compiled since the
 * last read: the map is append-only, so read what was added, at most once
 * per call. Returns 0 (*out NULL on a miss) or -ENOMEM. */
static int jit_lookup(call_t *c, uint64_t a, const char **out) {
  if (c->pm == NULL) c->pm = perfmap_get(c->s, c->pid);
  *out = c->pm ? ember__perfmap_lookup(c->pm->pm, a) : NULL;
  if (*out != NULL || c->pm_read) return 0;
  c->pm_read = true;
  /* Once per pid between two forgets (the agent forgets after each close
   * job): a refresh with new bytes re-merges the whole table, and a map
   * growing by a line between samples would otherwise cost a copy of it
   * per distinct stack. The stacks of one job were all sampled before it
   * ran, so one read at its first miss already holds their code. */
  if (c->pm != NULL && c->pm->epoch == c->s->epoch) return 0;
  int rc = perfmap_refresh(c->s, c->pid, &c->pm);
  if (rc == 0 && c->pm != NULL) *out = ember__perfmap_lookup(c->pm->pm, a);
  return rc;
}

/* Frames for `a` from DWARF: inlined calls innermost first, then the
 * function itself. Sets *done when it produced at least one frame. */
static int resolve_dwarf(call_t *c, module_t *mod, const ember_frame_t *base, uint64_t a,
                         const fsym_t *sym, bool *done) {
  *done = false;
  int rc = module_dwarf(mod);
  if (rc != 0 || mod->dw == NULL) return rc;
  const cu_range_t *r = module_cu(mod, a);
  if (r == NULL) return 0;
  cu_info_t *cu = &mod->cu_list[r->cu];
  if (!cu->indexed) {
    rc = cu_index(cu);
    if (rc != 0) return rc;
  }
  const char *file = NULL;
  uint32_t line = 0;
  Dwarf_Line *ln = dwarf_getsrc_die(&cu->die, a);
  if (ln != NULL) {
    int l = 0;
    file = dwarf_linesrc(ln, NULL, NULL);
    if (dwarf_lineno(ln, &l) == 0 && l > 0) line = (uint32_t)l;
  }
  bool outer = false;
  for (const dnode_t *d = cu_innermost(cu, a); d != NULL && !outer;
       d = d->parent ? &cu->nodes[d->parent - 1] : NULL) {
    ember_frame_t f = *base;
    f.file = file;
    f.line = line;
    if (d->inlined) {
      f.function = d->name;
      file = d->call_file;
      line = d->call_line;
    } else {
      /* The ELF name, so frames agree with DWARF-less agents. */
      f.function = sym ? sym->name : d->name;
      outer = true;
    }
    if (!emit(c, &f)) return 0;
    *done = true;
  }
  if (!outer && (sym != NULL || (!*done && file != NULL))) {
    /* No DIE for the function itself (assembly, say). */
    ember_frame_t f = *base;
    f.function = sym ? sym->name : NULL;
    f.file = file;
    f.line = line;
    emit(c, &f);
    *done = true;
  }
  return 0;
}

static int resolve_module(call_t *c, module_t *mod, const char *module_name, const mapping_t *mp,
                          uint64_t ip, uint64_t a) {
  ember_frame_t f = {.module = module_name, .kind = EMBER_FRAME_NATIVE};
  f.address = ip - mp->start + mp->offset;
  if (mod == NULL || mod->broken) {
    emit(c, &f);
    return 0;
  }
  f.build_id = mod->build_id;
  uint64_t vaddr;
  if (!module_translate(mod, a - mp->start + mp->offset, &vaddr)) {
    emit(c, &f);
    return 0;
  }
  const fsym_t *sym = module_sym(mod, vaddr);
  if (c->s->dwarf && mod->dw_elf != NULL) {
    ember_frame_t base = f;
    base.address = 0;
    bool done = false;
    int rc = resolve_dwarf(c, mod, &base, vaddr, sym, &done);
    if (rc != 0 || done) return rc;
  }
  if (sym != NULL) {
    f.function = sym->name;
    f.address = 0;
  }
  emit(c, &f);
  return 0;
}

static int resolve_kernel(call_t *c, uint64_t ip, uint64_t a) {
  ember__symbolizer_t *s = c->s;
  if (!s->k_tried) {
    int rc = kernel_load(s);
    if (rc != 0) return rc;
  }
  const ksym_t *k = kernel_find(s, a);
  ember_frame_t f = {.kind = EMBER_FRAME_KERNEL, .module = "[kernel]"};
  if (k != NULL) {
    f.function = k->name;
    f.module = k->module;
  } else {
    f.address = ip;
  }
  emit(c, &f);
  return 0;
}

/* One address: `ip` as sampled, `a` the address to look up (ip - 1 for
 * return addresses). */
static int resolve(call_t *c, uint64_t ip, uint64_t a) {
  ember__symbolizer_t *s = c->s;
  const char *j = NULL;
  int rc = 0;
  const mapping_t *mp = maps_find(c->maps, a);
  if (mp == NULL && a >= EMBER__KERNEL_MIN) return resolve_kernel(c, ip, a);
  if (mp == NULL || mp->kind == MAP_ANON) {
    /* Anonymous executable memory is JIT code; so may be an address outside
     * every mapping of the snapshot (mapped since), and without a snapshot
     * the perf map is the only user-space source. */
    rc = jit_lookup(c, a, &j);
    if (rc != 0) return rc;
    ember_frame_t f = {.kind = mp || j ? EMBER_FRAME_JIT : EMBER_FRAME_NATIVE, .address = ip};
    if (j != NULL) {
      f.function = j;
      f.module = ember__perfmap_path(c->pm->pm);
      f.address = 0;
    }
    emit(c, &f);
    return 0;
  }
  if (mp->kind == MAP_VDSO) {
    module_t *mod = NULL;
    rc = vdso_module(s, &mod);
    if (rc != 0) return rc;
    return resolve_module(c, mod, "[vdso]", mp, ip, a);
  }
  if (mp->kind == MAP_SPECIAL) {
    const char *name = intern_name(s, mp->path);
    if (name == NULL) return -ENOMEM;
    ember_frame_t f = {.kind = EMBER_FRAME_NATIVE, .module = name, .address = ip - mp->start};
    emit(c, &f);
    return 0;
  }
  alias_t *al = NULL;
  rc = module_for(s, c->maps, mp, &al);
  if (rc != 0) return rc;
  if (al == NULL) {
    /* Could not even open it right now (out of fds): there is no module
     * string of ours to point at, so the frame names no module. */
    ember_frame_t f = {.kind = EMBER_FRAME_NATIVE, .address = ip};
    emit(c, &f);
    return 0;
  }
  return resolve_module(c, al->mod, al->path, mp, ip, a);
}

int ember__symbolize(ember__symbolizer_t *s, pid_t pid, const ember__procmaps_t *maps,
                     const uint64_t *ips, size_t nips, ember_frame_t *out, size_t cap, size_t *n) {
  if (s == NULL || n == NULL || (ips == NULL && nips > 0) || (out == NULL && cap > 0))
    return -EINVAL;
  call_t c = {.s = s, .pid = pid, .maps = maps, .out = out, .cap = cap};
  bool leaf = true;
  for (size_t i = 0; i < nips && c.k < cap; i++) {
    uint64_t ip = ips[i];
    if (ip >= PERF_CONTEXT_MIN) continue; /* PERF_CONTEXT_* marker */
    uint64_t a = leaf || ip == 0 ? ip : ip - 1;
    leaf = false;
    int rc = resolve(&c, ip, a);
    if (rc != 0) return rc;
  }
  *n = c.k;
  return 0;
}
