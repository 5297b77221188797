/* Allocation sessions (agent/alloc.h): the method-independent session,
 * which adds every sample to the caller's window (window.c: the same
 * aggregation as CPU windows), and the uprobe method.
 *
 * The uprobe method puts a uprobe perf event on malloc, calloc, realloc and
 * the aligned allocators (memalign, aligned_alloc, posix_memalign; an alias
 * of another is probed once) of the libc the process maps, sampling every
 * call with its user callchain (frame pointers), the size argument
 * registers and the top 16
 * bytes of the user stack (the return address: at a probe on a function's
 * first instruction rbp still belongs to the caller, so the frame-pointer
 * chain skips the direct caller). Per-process events cannot be mmapped
 * with inherit, so there is one event per (thread, CPU, function) with
 * inherit on, all events of a CPU writing into that CPU's ring
 * (PERF_EVENT_IOC_SET_OUTPUT); the sample's identifier says the function.
 * See docs/internals/alloc.md. */
#include <asm/perf_regs.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "alloc.h"
#include "safefile.h"
#include "ember/parse.h"
#include "perf.h"
#include "procfs.h"
#include "procmaps.h"
#include "sampler.h"

#define MAX_CPUS   1024
#define MAX_EVENTS 4096 /* threads x CPUs x functions probed */
#define RING_PAGES 256  /* data pages per CPU ring: 1 MiB */
#define MAX_CHAIN  128  /* perf_event_max_stack is 127 by default */

/* The first FN_REQUIRED must exist; the aligned ones are probed when the
 * libc has them. Where the size is: malloc rdi; calloc rdi * rsi; realloc,
 * memalign, aligned_alloc rsi; posix_memalign rdx. */
enum {
  FN_MALLOC,
  FN_CALLOC,
  FN_REALLOC,
  FN_REQUIRED,
  FN_MEMALIGN = FN_REQUIRED,
  FN_ALIGNED_ALLOC,
  FN_POSIX_MEMALIGN,
  FN_COUNT
};
static const char *const fn_names[FN_COUNT] = {"malloc",   "calloc",        "realloc",
                                               "memalign", "aligned_alloc", "posix_memalign"};

/* --- the session --- */

struct ember__alloc_session {
  ember__alloc_method_t method;
  pid_t pid;
  ember__alloc_sink_t sink;
  ember__alloc_stats_t stats;
  struct uprobe_state *up;
  ember__alloc_preload_t *pre;
};

/* Count the outcome `rc` of adding a sample of `n` frames; tell the sink
 * about a stack new to its window. */
static void added(ember__alloc_session_t *s, int rc, bool is_new, const uint64_t *ips, uint32_t n) {
  if (rc != 0) {
    s->stats.dropped++; /* window full (EMBER_ETOOBIG) or out of memory */
    return;
  }
  s->stats.samples++;
  if (!is_new) return;
  s->stats.stacks++;
  if (s->sink.new_stack) s->sink.new_stack(s->sink.ctx, (uint32_t)s->pid, ips, n);
}

static uint32_t frames(size_t n) {
  return n > EMBER__ALLOC_MAX_FRAMES ? EMBER__ALLOC_MAX_FRAMES : (uint32_t)n;
}

/* An allocation seen by the uprobe method: one object of `bytes`, exact. */
static void add_exact(ember__alloc_session_t *s, const uint64_t *ips, size_t n, int64_t bytes) {
  bool is_new = false;
  uint32_t k = frames(n);
  int rc = ember__window_add_values(s->sink.w, (uint32_t)s->pid, ips, k, 1, bytes, &is_new);
  added(s, rc, is_new, ips, k);
}

/* A sample of the preload method, weighed 1/p by alloc_preload.c. */
static void add_weighted(void *ctx, const uint64_t *ips, size_t n, double objects, double bytes) {
  ember__alloc_session_t *s = ctx;
  bool is_new = false;
  uint32_t k = frames(n);
  int rc = ember__window_add_weighted(s->sink.w, (uint32_t)s->pid, ips, k, objects, bytes, &is_new);
  added(s, rc, is_new, ips, k);
}

/* --- the uprobe method --- */

typedef struct ring {
  int fd;
  ember__perf_ring_t ring;
} ring_t;

typedef struct event_id {
  uint64_t id;
  int fn;
} event_id_t;

struct uprobe_state {
  ring_t rings[MAX_CPUS];
  uint32_t nrings;
  int *fds;
  size_t nfds;
  event_id_t *ids;
  ember__perf_counts_t counts;
  uint64_t scratch[EMBER__PERF_SCRATCH / 8];
  uint64_t chain[EMBER__PERF_MAX_CHAIN]; /* the parsed callchain */
  uint64_t ips[MAX_CHAIN + 1];
};

/* The layout of every probe's samples (uprobe_open). */
#define SAMPLE_TYPE                                                                                \
  (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER |       \
   PERF_SAMPLE_STACK_USER)
/* The size argument registers, by number: DX (3), SI (4), DI (5), so the
 * sample's regs are rdx, rsi, rdi in that order. */
#define SAMPLE_REGS                                                                                \
  ((1ULL << PERF_REG_X86_DX) | (1ULL << PERF_REG_X86_SI) | (1ULL << PERF_REG_X86_DI))

/* glibc's libc, mapped executable from a file still there: "libc.so.6", or
 * "libc-2.31.so" on older releases. */
static bool is_libc(const ember__mapping_t *mp, void *ctx) {
  (void)ctx;
  const char *base = ember__mapping_basename(mp);
  if (mp->deleted || mp->path == NULL || mp->path[0] != '/') return false;
  return strncmp(base, "libc.so", 7) == 0 || strncmp(base, "libc-", 5) == 0;
}

/* The libc `pid` maps: its path as the process sees it (`shown`, for
 * messages) and the range of its executable mapping (for map_files). */
static int find_libc(pid_t pid, char *shown, size_t size, uint64_t range[2], char *err, size_t n) {
  ember__procmaps_t *m = NULL;
  int rc = ember__procmaps_read(NULL, pid, &m);
  if (rc != 0) {
    snprintf(err, n, "process %d: %s", (int)pid, strerror(-rc));
    return rc == -ENOENT ? -ESRCH : rc;
  }
  const ember__mapping_t *mp = ember__procmaps_find_if(m, is_libc, NULL);
  rc = -ENOENT;
  if (mp != NULL && (size_t)snprintf(shown, size, "%s", mp->path) < size) {
    range[0] = mp->start;
    range[1] = mp->end;
    rc = 0;
  }
  ember__procmaps_free(m);
  if (rc != 0)
    snprintf(err, n,
             "process %d maps no libc.so (statically linked or another C library?): the uprobe "
             "method needs glibc's malloc",
             (int)pid);
  return rc;
}

/* Open the libc the process maps: through /proc/PID/map_files/START-END
 * (exactly the mapped inode), else its path below /proc/PID/root with no
 * link followed (an absolute symbolic link in a container would resolve
 * against the agent's root). Returns an fd or -errno. */
static int open_libc(pid_t pid, const char *shown, const uint64_t range[2]) {
  char path[PATH_MAX];
  ember__safe_opts_t o = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER, .max_size = 1u << 30};
  snprintf(path, sizeof path, "/proc/%d/map_files/%llx-%llx", (int)pid,
           (unsigned long long)range[0], (unsigned long long)range[1]);
  int fd = ember__safe_openat(AT_FDCWD, path, &o, NULL);
  if (fd >= 0 || fd == -ENODEV || fd == -EFBIG) return fd;
  snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
  int rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return -errno;
  o.follow = false;
  fd = ember__safe_openat(rootfd, shown + 1, &o, NULL);
  close(rootfd);
  return fd;
}

/* File offsets of the functions in the ELF file open on `fd` (named
 * `path` in messages): 0 for an optional one that is missing or an alias
 * of one before it (glibc's aligned_alloc is memalign), which must not be
 * probed twice. The fd stays the caller's. */
static int find_offsets(int fd, const char *path, uint64_t off[FN_COUNT], char *err, size_t n) {
  int rc = -ENOENT;
  Elf *e = NULL;
  uint64_t vaddr[FN_COUNT] = {0};
  elf_version(EV_CURRENT);
  e = elf_begin(fd, ELF_C_READ, NULL);
  if (e == NULL) {
    snprintf(err, n, "%s: not an ELF file (%s)", path, elf_errmsg(-1));
    rc = -ENOEXEC;
    goto cleanup;
  }
  Elf_Scn *scn = NULL;
  while ((scn = elf_nextscn(e, scn)) != NULL) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL) continue;
    if (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB) continue;
    if (sh.sh_size > (64u << 20)) continue; /* elf_getdata would copy it whole */
    Elf_Data *d = elf_getdata(scn, NULL);
    size_t symsz = gelf_fsize(e, ELF_T_SYM, 1, EV_CURRENT);
    if (d == NULL || symsz == 0) continue;
    size_t count = d->d_size / symsz; /* not sh_entsize: the file's say */
    for (size_t i = 0; i < count; i++) {
      GElf_Sym sym;
      if (gelf_getsym(d, (int)i, &sym) == NULL) continue;
      if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF || sym.st_value == 0)
        continue;
      if (GELF_ST_BIND(sym.st_info) != STB_GLOBAL && GELF_ST_BIND(sym.st_info) != STB_WEAK)
        continue;
      const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
      if (name == NULL) continue;
      for (int f = 0; f < FN_COUNT; f++)
        if (vaddr[f] == 0 && strcmp(name, fn_names[f]) == 0) vaddr[f] = sym.st_value;
    }
  }
  size_t nph;
  if (elf_getphdrnum(e, &nph) != 0) nph = 0;
  for (int f = 0; f < FN_COUNT; f++) {
    off[f] = 0;
    for (size_t i = 0; vaddr[f] != 0 && i < nph; i++) {
      GElf_Phdr ph;
      if (gelf_getphdr(e, (int)i, &ph) == NULL || ph.p_type != PT_LOAD) continue;
      if (vaddr[f] >= ph.p_vaddr && vaddr[f] < ph.p_vaddr + ph.p_filesz) {
        off[f] = vaddr[f] - ph.p_vaddr + ph.p_offset;
        break;
      }
    }
    if (off[f] == 0 && f < FN_REQUIRED) {
      snprintf(err, n, "%s: no symbol %s in a loaded segment", path, fn_names[f]);
      goto cleanup;
    }
    for (int g = 0; g < f && off[f] != 0; g++)
      if (off[g] == off[f]) off[f] = 0;
  }
  rc = 0;
cleanup:
  if (e != NULL) elf_end(e);
  return rc;
}

static void uprobe_close(struct uprobe_state *u) {
  if (u == NULL) return;
  for (size_t i = 0; i < u->nfds; i++) close(u->fds[i]);
  for (uint32_t c = 0; c < u->nrings; c++) ember__perf_ring_unmap(&u->rings[c].ring);
  free(u->fds);
  free(u->ids);
  free(u);
}

static int uprobe_open(pid_t pid, struct uprobe_state **out, char *err, size_t n) {
  char libc[PATH_MAX], buf[4096] = "";
  uint64_t off[FN_COUNT];
  uint8_t online[MAX_CPUS / 8];
  pid_t *tids = NULL;
  size_t ntids = 0;
  struct uprobe_state *u = NULL;
  uint64_t type;
  char shown[PATH_MAX];
  uint64_t range[2] = {0, 0};
  int rc = find_libc(pid, shown, sizeof shown, range, err, n);
  if (rc != 0) return rc;
  /* The process owns its files: a FIFO or a device there must not block
   * the agent, so only a regular file is read. */
  int libfd = open_libc(pid, shown, range);
  if (libfd < 0) {
    snprintf(err, n, "open %s of process %d: %s", shown, (int)pid,
             libfd == -ENODEV ? "not a regular file" : strerror(-libfd));
    return libfd;
  }
  rc = find_offsets(libfd, shown, off, err, n);
  if (rc != 0) {
    close(libfd);
    return rc;
  }
  /* The kernel resolves the uprobe's path itself: the fd's own link names
   * the very file read above, whatever links the container holds. */
  snprintf(libc, sizeof libc, "/proc/self/fd/%d", libfd);
  size_t nfn = 0;
  for (int f = 0; f < FN_COUNT; f++) nfn += off[f] != 0;
  rc = ember__proc_read_str("/sys/bus/event_source/devices/uprobe/type", buf, sizeof buf);
  buf[strcspn(buf, "\n")] = '\0';
  if (rc != 0 || ember_parse_u64(buf, 0, UINT32_MAX, &type) != 0) {
    snprintf(err, n, "this kernel has no uprobe PMU (/sys/bus/event_source/devices/uprobe/type)");
    rc = rc != 0 ? rc : -ENOTSUP;
    goto cleanup;
  }
  rc = ember__proc_read_str("/sys/devices/system/cpu/online", buf, sizeof buf);
  int ncpus = rc == 0 ? ember__cpulist_parse(buf, online, MAX_CPUS) : rc;
  if (ncpus <= 0) {
    snprintf(err, n, "cannot read the online CPUs");
    rc = ncpus < 0 ? ncpus : -EINVAL;
    goto cleanup;
  }
  rc = ember__proc_tids(NULL, pid, &tids, &ntids);
  if (rc != 0) {
    snprintf(err, n, "process %d: %s", (int)pid, strerror(-rc));
    goto cleanup;
  }
  if (ntids * (size_t)ncpus * nfn > MAX_EVENTS) {
    snprintf(err, n,
             "process %d has %zu threads: the uprobe method would need %zu perf events (at most "
             "%d); use the preload method",
             (int)pid, ntids, ntids * (size_t)ncpus * nfn, MAX_EVENTS);
    rc = -E2BIG;
    goto cleanup;
  }
  u = calloc(1, sizeof *u);
  size_t maxfds = ntids * (size_t)ncpus * nfn;
  if (u == NULL || (u->fds = calloc(maxfds, sizeof *u->fds)) == NULL ||
      (u->ids = calloc(maxfds, sizeof *u->ids)) == NULL) {
    snprintf(err, n, "out of memory");
    rc = -ENOMEM;
    goto cleanup;
  }
  for (uint32_t c = 0; c < MAX_CPUS; c++) {
    if (!(online[c / 8] & (1u << (c % 8)))) continue;
    ring_t *r = &u->rings[u->nrings++];
    r->fd = -1;
    for (size_t t = 0; t < ntids; t++) {
      for (int f = 0; f < FN_COUNT; f++) {
        if (off[f] == 0) continue;
        struct perf_event_attr a = {
            .type = (uint32_t)type,
            .config = 0, /* entry probe (bit 0 would make it a return probe) */
            .config1 = (uint64_t)(uintptr_t)libc,
            .config2 = off[f],
            .sample_period = 1,
            .sample_type = SAMPLE_TYPE,
            .sample_regs_user = SAMPLE_REGS,
            .sample_stack_user = 16,
            .exclude_callchain_kernel = 1,
            .inherit = 1,
        };
        int fd = ember__perf_open(&a, tids[t], (int)c, -1, 0);
        if (fd < 0) {
          rc = fd;
          if (rc == -ESRCH) break; /* the thread ended meanwhile */
          snprintf(err, n, "perf_event_open(uprobe %s in %s, tid %d, cpu %u): %s%s", fn_names[f],
                   libc, (int)tids[t], c, strerror(-rc),
                   rc == -EACCES || rc == -EPERM ? " (needs root or CAP_PERFMON)" : "");
          goto cleanup;
        }
        u->fds[u->nfds] = fd;
        uint64_t id = 0;
        if (ioctl(fd, PERF_EVENT_IOC_ID, &id) != 0) {
          rc = -errno;
          snprintf(err, n, "PERF_EVENT_IOC_ID: %s", strerror(-rc));
          u->nfds++;
          goto cleanup;
        }
        u->ids[u->nfds++] = (event_id_t){id, f};
        if (r->fd < 0) {
          rc = ember__perf_ring_map(&r->ring, fd, RING_PAGES);
          if (rc != 0) {
            snprintf(err, n, "mmap of a %zu KiB perf ring (cpu %u): %s",
                     (size_t)RING_PAGES * (size_t)sysconf(_SC_PAGESIZE) / 1024, c, strerror(-rc));
            goto cleanup;
          }
          r->fd = fd;
        } else if (ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, r->fd) != 0) {
          rc = -errno;
          snprintf(err, n, "PERF_EVENT_IOC_SET_OUTPUT (cpu %u): %s", c, strerror(-rc));
          goto cleanup;
        }
      }
    }
  }
  rc = 0;
  *out = u;
  u = NULL;
cleanup:
  uprobe_close(u);
  ember_free(tids);
  close(libfd); /* the probes hold the file themselves once made */
  return rc;
}

/* One probe hit, parsed by perf.c (every length checked there). */
static void uprobe_sample(void *ctx, const ember__raw_sample_t *rs) {
  ember__alloc_session_t *s = ctx;
  struct uprobe_state *u = s->up;
  uint64_t ret = 0;
  /* The top of the stack at the probe, the function's first instruction:
   * the return address into the caller. */
  if (rs->stack_size >= 8) memcpy(&ret, rs->stack, 8);
  int fn = -1;
  for (size_t i = 0; i < u->nfds; i++)
    if (u->ids[i].id == rs->id) {
      fn = u->ids[i].fn;
      break;
    }
  if (fn < 0 || rs->regs_abi == PERF_SAMPLE_REGS_ABI_NONE || rs->nregs < 3) goto bad;
  uint64_t rdx = rs->regs[0], rsi = rs->regs[1], rdi = rs->regs[2], bytes;
  switch (fn) {
  case FN_MALLOC: bytes = rdi; break;
  case FN_CALLOC:
    if (__builtin_mul_overflow(rdi, rsi, &bytes)) return; /* calloc fails */
    break;
  case FN_REALLOC:
    /* glibc's realloc(NULL, n) calls malloc, whose probe counts it. */
    if (rdi == 0) return;
    bytes = rsi;
    break;
  case FN_POSIX_MEMALIGN: bytes = rdx; break;
  default: bytes = rsi; break; /* memalign, aligned_alloc */
  }
  if (bytes == 0) return; /* malloc(0) and realloc(p, 0) allocate nothing */
  size_t n = 0;
  for (uint32_t i = 0; i < rs->nips && n < MAX_CHAIN; i++) {
    u->ips[n++] = rs->ips[i];
    if (n == 1 && ret != 0) u->ips[n++] = ret;
  }
  if (n == 0) {
    u->ips[n++] = rs->ip;
    if (ret != 0) u->ips[n++] = ret;
  }
  if (bytes > (uint64_t)INT64_MAX) bytes = (uint64_t)INT64_MAX;
  add_exact(s, u->ips, n, (int64_t)bytes);
  return;
bad:
  s->stats.lost++;
}

static void uprobe_drain(ember__alloc_session_t *s) {
  struct uprobe_state *u = s->up;
  ember__perf_reader_t rd = {
      {SAMPLE_TYPE, SAMPLE_REGS}, uprobe_sample, s, &u->counts, u->scratch, u->chain};
  for (uint32_t c = 0; c < u->nrings; c++) {
    /* Records the kernel dropped and records that did not parse are both
     * samples this session lost. */
    u->counts = (ember__perf_counts_t){0};
    ember__perf_ring_drain(&rd, &u->rings[c].ring);
    s->stats.lost += u->counts.lost + u->counts.bad_records;
  }
}

/* --- the session's life --- */

int ember__alloc_start(pid_t pid, ember__alloc_method_t m, uint64_t sample_bytes,
                       const ember__alloc_sink_t *sink, ember__alloc_session_t **out, char *err,
                       size_t n) {
  char dummy[1];
  if (err == NULL || n == 0) {
    err = dummy;
    n = sizeof dummy;
  }
  err[0] = '\0';
  if (pid <= 0 || out == NULL || sink == NULL || sink->w == NULL ||
      (m != EMBER__ALLOC_UPROBE && m != EMBER__ALLOC_PRELOAD) || sample_bytes > (1ULL << 40)) {
    snprintf(err, n, "invalid allocation session arguments (pid %d, method %d)", (int)pid, (int)m);
    return -EINVAL;
  }
  if (kill(pid, 0) != 0 && errno == ESRCH) {
    snprintf(err, n, "process %d does not exist", (int)pid);
    return -ESRCH;
  }
  if (sample_bytes == 0) sample_bytes = EMBER__ALLOC_DEFAULT_SAMPLE_BYTES;
  ember__alloc_session_t *s = calloc(1, sizeof *s);
  if (s == NULL) {
    snprintf(err, n, "out of memory");
    return -ENOMEM;
  }
  s->method = m;
  s->pid = pid;
  s->sink = *sink;
  int rc = m == EMBER__ALLOC_UPROBE ? uprobe_open(pid, &s->up, err, n)
                                    : ember__alloc_preload_open(pid, sample_bytes, &s->pre, err, n);
  if (rc != 0) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

int ember__alloc_poll(ember__alloc_session_t *s) {
  if (s == NULL) return -EINVAL;
  if (s->pre != NULL) return ember__alloc_preload_drain(s->pre, add_weighted, s, &s->stats.lost);
  uprobe_drain(s);
  if (kill(s->pid, 0) != 0 && errno == ESRCH) return -ESRCH;
  return 0;
}

void ember__alloc_stats(const ember__alloc_session_t *s, ember__alloc_stats_t *out) {
  if (s == NULL || out == NULL) return;
  *out = s->stats;
}

int ember__alloc_stop(ember__alloc_session_t *s) {
  if (s == NULL) return 0;
  if (s->pre != NULL) {
    ember__alloc_preload_disable(s->pre);
    ember__alloc_preload_drain(s->pre, add_weighted, s, &s->stats.lost);
    ember__alloc_preload_close(s->pre);
  } else if (s->up != NULL) {
    for (size_t i = 0; i < s->up->nfds; i++) ioctl(s->up->fds[i], PERF_EVENT_IOC_DISABLE, 0);
    uprobe_drain(s);
    uprobe_close(s->up);
  }
  free(s);
  return 0;
}
