/* The agent's side of libember_alloc.so's control file: agent/heapshm.h.
 * See docs/internals/heap.md. */
#include "heapshm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ember/log.h"
#include "ember/parse.h"
#include "procfs.h"
#include "procmaps.h"
#include "safefile.h"

/* Polls a reserved-but-unpublished slot may block the ring before it is
 * skipped (its writer died or was stopped mid-record). */
#define STUCK_POLLS 20

/* Live entries read per pread. */
#define LIVE_BATCH 256u

/* The largest record a library writes: its head, the ips, the stack. */
#define REC_MAX                                                                                    \
  (sizeof(ember_alloc_rec_t) + EMBER_ALLOC_SHM_FRAMES * sizeof(uint64_t) +                         \
   EMBER_ALLOC_SHM_STACK_MAX)

static atomic_uint_fast64_t n_faults;

struct ember__heapshm {
  pid_t pid;
  int fd;
  size_t size;     /* the file's */
  uint64_t ncells; /* the ring's */
  uint32_t stack_max;
  uint64_t token;
  uint64_t heap_rate;
  uint64_t generation;
  uint64_t tail;
  uint64_t dropped_base;
  uint64_t heartbeat;
  unsigned stuck;
  bool broken; /* the file was cut or lies: no more reads */
  ember__heapshm_counts_t counts;
  _Alignas(8) unsigned char rec[REC_MAX]; /* the record being read */
};

uint64_t ember__heapshm_faults(void) { return atomic_load(&n_faults); }

double ember__heapshm_one_minus_exp_neg(double x) {
  /* Halve x until the Taylor series of expm1 is exact to double precision,
   * then double back with expm1(2y) = expm1(y) (expm1(y) + 2). */
  if (!(x > 0)) return 0;
  if (x > 64) return 1;
  int halvings = 0;
  while (x > 1.0 / 1024) {
    x /= 2;
    halvings++;
  }
  double y = -x, m = y * (1 + y / 2 * (1 + y / 3 * (1 + y / 4 * (1 + y / 5 * (1 + y / 6)))));
  while (halvings-- > 0) m = m * (m + 2);
  return -m;
}

/* The agent's words in the header, one aligned 8-byte pwrite each (the
 * library reads them with atomic loads from its mapping). A write past
 * the end of a cut file only grows it again: no fault. */
static void put_word(const ember__heapshm_t *r, size_t off, uint64_t v) {
  ssize_t rc;
  do {
    rc = pwrite(r->fd, &v, sizeof v, (off_t)off);
  } while (rc < 0 && errno == EINTR);
}

static bool get_header(int fd, ember_alloc_shm_t *h) {
  return ember__safe_pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h;
}

/* The pid of `pid` in its own namespace (last NSpid field), so the file
 * name matches what the library saw in getpid(); `pid` when unknown. */
static pid_t ns_pid(pid_t pid) {
  uint64_t v = 0;
  return ember__proc_ns_pid("/proc", pid, &v) == 0 && v > 0 ? (pid_t)v : pid;
}

static bool is_library(const ember__mapping_t *mp, void *ctx) {
  (void)ctx;
  return mp->kind == EMBER__MAP_FILE && mp->path != NULL &&
         strstr(mp->path, "/libember_alloc") != NULL;
}

static bool maps_library(pid_t pid) {
  ember__procmaps_t *m = NULL;
  if (ember__procmaps_read(NULL, pid, &m) != 0) return false;
  bool found = ember__procmaps_find_if(m, is_library, NULL) != NULL;
  ember__procmaps_free(m);
  return found;
}

/* The file's name below the process's root (no leading slash). */
static void ctl_path(pid_t pid, char *buf, size_t size) {
  snprintf(buf, size, "%s%d", &EMBER_ALLOC_SHM_PREFIX[1], (int)ns_pid(pid));
}

static bool header_ok(const ember_alloc_shm_t *c, pid_t nspid, off_t size) {
  uint32_t rb = c->ring_bytes;
  return c->magic == EMBER_ALLOC_SHM_MAGIC && c->version == EMBER_ALLOC_SHM_VERSION &&
         c->hdr_size == EMBER_ALLOC_SHM_HDR && c->nlive == EMBER_ALLOC_SHM_LIVE &&
         rb >= EMBER_ALLOC_SHM_RING_MIN && rb <= EMBER_ALLOC_SHM_RING_MAX && (rb & (rb - 1)) == 0 &&
         c->stack_max <= EMBER_ALLOC_SHM_STACK_MAX && size == (off_t)EMBER_ALLOC_SHM_SIZE(rb) &&
         c->pid == (int32_t)nspid;
}

/* Open the control file of `pid` after checking it is a regular file of
 * the right size owned by the process's user. Returns an fd or -errno. */
static int ctl_open(pid_t pid, off_t *size, char *err, size_t n) {
  char path[128], proc[32], proc_root[48];
  struct stat st, pst;
  ctl_path(pid, path, sizeof path);
  snprintf(proc, sizeof proc, "/proc/%d", (int)pid);
  snprintf(proc_root, sizeof proc_root, "/proc/%d/root", (int)pid);
  if (stat(proc, &pst) != 0) {
    int e = errno;
    snprintf(err, n, "process %d: %s", (int)pid, strerror(e));
    return e == ENOENT ? -ESRCH : -e;
  }
  if (!maps_library(pid)) {
    snprintf(err, n,
             "process %d does not run with libember_alloc.so (start it with "
             "LD_PRELOAD=/path/to/libember_alloc.so, or use the uprobe method)",
             (int)pid);
    return -ENOENT;
  }
  /* No link anywhere below the process's root; only the process's own
   * user (or root) may own the file, with one link. */
  ember__safe_opts_t o = {.flags = O_RDWR, .owner = (int64_t)pst.st_uid, .one_link = true};
  int rootfd = open(proc_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) {
    int e = errno;
    snprintf(err, n, "process %d: %s: %s", (int)pid, proc_root, strerror(e));
    return e == ENOENT ? -ESRCH : -e;
  }
  int fd = ember__safe_openat(rootfd, path, &o, &st);
  close(rootfd);
  if (fd < 0 && fd != -EPERM && fd != -ENODEV) {
    snprintf(err, n, "process %d maps libember_alloc.so but its control file %s: %s", (int)pid,
             path, strerror(-fd));
    return fd;
  }
  if (fd < 0 || st.st_size < (off_t)EMBER_ALLOC_SHM_SIZE(EMBER_ALLOC_SHM_RING_MIN)) {
    snprintf(err, n,
             "%s is not a control file of libember_alloc.so version %u (type, owner or size); "
             "agent and library versions must match",
             path, EMBER_ALLOC_SHM_VERSION);
    if (fd >= 0) close(fd);
    return -EPROTO;
  }
  *size = st.st_size;
  return fd;
}

bool ember__heapshm_present(pid_t pid) {
  char path[128], full[192];
  struct stat st;
  if (pid <= 0) return false;
  ctl_path(pid, path, sizeof path);
  snprintf(full, sizeof full, "/proc/%d/root/%s", (int)pid, path);
  if (lstat(full, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  char err[256];
  off_t size = 0;
  int fd = ctl_open(pid, &size, err, sizeof err);
  if (fd < 0) return false;
  ember_alloc_shm_t h;
  bool ok = get_header(fd, &h) && header_ok(&h, ns_pid(pid), size);
  close(fd);
  return ok;
}

static uint64_t new_token(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t t = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
  return t != 0 ? t : 1;
}

int ember__heapshm_open(pid_t pid, ember__heapshm_t **out, char *err, size_t n) {
  off_t size = 0;
  int fd = ctl_open(pid, &size, err, n);
  if (fd < 0) return fd;
  return ember__heapshm_open_fd(fd, pid, ns_pid(pid), size, out, err, n);
}

int ember__heapshm_open_fd(int fd, pid_t pid, pid_t nspid, off_t size, ember__heapshm_t **out,
                           char *err, size_t n) {
  ember__heapshm_t *r = NULL;
  ember_alloc_shm_t h;
  int rc;
  if (!get_header(fd, &h) || !header_ok(&h, nspid, size)) {
    rc = -EPROTO;
    snprintf(err, n, "process %d's control file has a bad header (library version %u expected)",
             (int)pid, EMBER_ALLOC_SHM_VERSION);
    goto cleanup;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
    snprintf(err, n, "process %d's allocation sampler is read by another agent", (int)pid);
    goto cleanup;
  }
  /* A dormant library reserved only its header: the pages it will write
   * once sampling is on must exist first, or a write to a hole of a full
   * tmpfs kills the process with SIGBUS. (A heap-mode library reserved
   * them itself; doing it again costs nothing.) */
  rc = posix_fallocate(fd, 0, size);
  if (rc != 0) {
    snprintf(err, n, "cannot reserve %zu bytes for process %d's sample ring in /dev/shm: %s",
             (size_t)size, (int)pid, strerror(rc));
    rc = -rc;
    goto cleanup;
  }
  r = calloc(1, sizeof *r);
  if (r == NULL) {
    rc = -ENOMEM;
    snprintf(err, n, "out of memory");
    goto cleanup;
  }
  r->token = new_token();
  r->pid = pid;
  r->fd = fd;
  r->size = (size_t)size;
  r->ncells = h.ring_bytes / EMBER_ALLOC_SHM_CELL;
  r->stack_max = h.stack_max;
  r->heap_rate = h.heap_sample_bytes;
  r->generation = h.generation;
  r->tail = h.tail;
  /* A tail beyond head, or further back than the ring holds, is a lie of
   * the file's: start from what the ring can hold. */
  if ((int64_t)(h.head - h.tail) < 0 || h.head - h.tail > r->ncells) r->tail = h.head;
  r->dropped_base = h.dropped;
  r->heartbeat = h.heartbeat + 1;
  put_word(r, offsetof(ember_alloc_shm_t, owner), r->token);
  put_word(r, offsetof(ember_alloc_shm_t, tail), r->tail);
  put_word(r, offsetof(ember_alloc_shm_t, heartbeat), r->heartbeat);
  *out = r;
  return 0;

cleanup:
  free(r);
  close(fd);
  return rc;
}

uint64_t ember__heapshm_heap_rate(const ember__heapshm_t *r) { return r->heap_rate; }

void ember__heapshm_set_rate(ember__heapshm_t *r, uint64_t sample_bytes) {
  uint64_t rate = sample_bytes != 0 ? sample_bytes : r->heap_rate;
  /* pwrite orders these stores as a release would: each is in the page
   * cache before the next starts, `on` last. */
  if (rate != 0) put_word(r, offsetof(ember_alloc_shm_t, sample_bytes), rate);
  ember_alloc_shm_t h;
  if (get_header(r->fd, &h) && h.generation >= r->generation) r->generation = h.generation;
  put_word(r, offsetof(ember_alloc_shm_t, generation), ++r->generation);
  put_word(r, offsetof(ember_alloc_shm_t, on), rate != 0 ? 1 : 0);
}

/* The file was cut or lies (`why` says how): count it and read no more;
 * what was read stays. */
static int fault(ember__heapshm_t *r, const char *why) {
  if (!r->broken) {
    atomic_fetch_add(&n_faults, 1);
    EMBER_WARN_LIMITED("heap",
                       "process %d cut, resized or corrupted its allocation control file (%s): "
                       "no more heap data from it",
                       (int)r->pid, why);
  }
  r->broken = true;
  return -EPROTO;
}

static bool file_intact(ember__heapshm_t *r) {
  struct stat st;
  return fstat(r->fd, &st) == 0 && st.st_size == (off_t)r->size;
}

/* Is the copied head one of a record a library could have written, in
 * `room` cells before the ring's end? */
static bool rec_ok(const ember__heapshm_t *r, const ember_alloc_rec_t *h, uint64_t room) {
  if (h->ncells == 0 || h->ncells > room) return false;
  if (h->kind == EMBER_ALLOC_REC_PAD) return true;
  if (h->kind != EMBER_ALLOC_REC_SAMPLE) return false;
  size_t need = sizeof *h + (size_t)h->nips * sizeof(uint64_t) + h->stack_len;
  return h->nips >= 2 && h->nips <= EMBER_ALLOC_SHM_FRAMES && h->size != 0 && h->mean != 0 &&
         h->stack_len <= r->stack_max && need <= (size_t)h->ncells * EMBER_ALLOC_SHM_CELL &&
         need + EMBER_ALLOC_SHM_CELL > (size_t)h->ncells * EMBER_ALLOC_SHM_CELL;
}

int ember__heapshm_drain(ember__heapshm_t *r,
                         void (*fn)(void *ctx, const ember__heapshm_rec_t *rec), void *ctx) {
  ember_alloc_shm_t h;
  if (r->broken) return -EPROTO;
  if (!file_intact(r) || !get_header(r->fd, &h)) return fault(r, "its size changed");
  put_word(r, offsetof(ember_alloc_shm_t, heartbeat), ++r->heartbeat);
  uint64_t head = h.head;
  /* Counters only grow: one going backwards is a corrupt or hostile file. */
  if ((int64_t)(head - r->tail) < 0 || h.dropped < r->dropped_base)
    return fault(r, "a counter went backwards");
  if (head - r->tail > r->ncells) return fault(r, "the ring's head is past what it holds");
  ember_alloc_rec_t *rec = (ember_alloc_rec_t *)(void *)r->rec;
  while (r->tail != head) {
    uint64_t cell = r->tail % r->ncells;
    uint64_t off = EMBER_ALLOC_SHM_RING_OFF + cell * EMBER_ALLOC_SHM_CELL;
    /* The ring's last cell has 64 bytes before the file's end: a pad
     * record there is one cell, shorter than a record's head. */
    size_t hl = sizeof *rec;
    if ((r->ncells - cell) * EMBER_ALLOC_SHM_CELL < hl) {
      hl = (size_t)(r->ncells - cell) * EMBER_ALLOC_SHM_CELL;
      memset(rec, 0, sizeof *rec);
    }
    if (ember__safe_pread(r->fd, rec, hl, off) != (ssize_t)hl)
      return fault(r, "a record cannot be read");
    if (rec->seq != r->tail + 1) {
      /* Not published yet: wait for it, up to STUCK_POLLS polls; then its
       * writer is taken for dead and the rest of the ring with it (how
       * long the record was cannot be trusted). */
      if (++r->stuck < STUCK_POLLS) break;
      r->counts.lost++;
      r->tail = head;
      r->stuck = 0;
      break;
    }
    r->stuck = 0;
    uint64_t room = r->ncells - cell;
    uint64_t avail = head - r->tail;
    if (!rec_ok(r, rec, room < avail ? room : avail)) {
      /* A length that cannot be trusted: nothing after it can be either. */
      r->counts.bad++;
      r->tail = head;
      break;
    }
    uint32_t k = rec->ncells;
    uint64_t id = rec->seq;
    bool sample = rec->kind == EMBER_ALLOC_REC_SAMPLE;
    size_t len = (size_t)rec->nips * sizeof(uint64_t) + rec->stack_len;
    if (sample && len > 0 &&
        ember__safe_pread(r->fd, r->rec + sizeof *rec, len, off + sizeof *rec) != (ssize_t)len)
      return fault(r, "a record cannot be read");
    /* One pread copied seq and body in no defined order: read seq again
     * and take the copy only if the record was not rewritten meanwhile. */
    uint64_t seq2 = 0;
    if (ember__safe_pread(r->fd, &seq2, sizeof seq2, off) != (ssize_t)sizeof seq2)
      return fault(r, "a record cannot be read");
    r->tail += k;
    if (!sample) continue;
    if (seq2 != id) {
      r->counts.bad++;
      continue;
    }
    r->counts.records++;
    ember__heapshm_rec_t out = {id, rec, (const uint64_t *)(const void *)(r->rec + sizeof *rec),
                                r->rec + sizeof *rec + (size_t)rec->nips * sizeof(uint64_t)};
    fn(ctx, &out);
  }
  put_word(r, offsetof(ember_alloc_shm_t, tail), r->tail);
  r->counts.lost += h.dropped - r->dropped_base;
  r->dropped_base = h.dropped;
  r->counts.live_dropped = h.live_dropped;
  if (kill(r->pid, 0) != 0 && errno == ESRCH) return -ESRCH;
  return 0;
}

int ember__heapshm_live(ember__heapshm_t *r, void (*fn)(void *ctx, const ember_alloc_live_t *e),
                        void *ctx) {
  ember_alloc_live_t batch[LIVE_BATCH];
  if (r->broken) return -EPROTO;
  if (!file_intact(r)) return fault(r, "its size changed");
  for (uint32_t at = 0; at < EMBER_ALLOC_SHM_LIVE; at += LIVE_BATCH) {
    size_t bytes = sizeof batch;
    if (ember__safe_pread(r->fd, batch, bytes, EMBER_ALLOC_SHM_LIVE_OFF + at * sizeof *batch) !=
        (ssize_t)bytes)
      return fault(r, "its live table cannot be read");
    for (uint32_t i = 0; i < LIVE_BATCH; i++) {
      const ember_alloc_live_t *e = &batch[i];
      if (e->ptr <= EMBER_ALLOC_LIVE_BUSY) continue;
      if (e->size == 0 || e->mean == 0) {
        r->counts.bad++;
        continue;
      }
      fn(ctx, e);
    }
  }
  return 0;
}

void ember__heapshm_counts(const ember__heapshm_t *r, ember__heapshm_counts_t *out) {
  *out = r->counts;
}

uint64_t ember__heapshm_tail(const ember__heapshm_t *r) { return r->tail; }

void ember__heapshm_close(ember__heapshm_t *r) {
  if (r == NULL) return;
  if (!r->broken) {
    ember_alloc_shm_t h;
    /* Back to the library's own rate; the owner word is informative. */
    if (get_header(r->fd, &h) && h.sample_bytes != r->heap_rate && r->heap_rate != 0)
      put_word(r, offsetof(ember_alloc_shm_t, sample_bytes), r->heap_rate);
    if (r->heap_rate == 0) put_word(r, offsetof(ember_alloc_shm_t, on), 0);
    if (get_header(r->fd, &h) && h.owner == r->token)
      put_word(r, offsetof(ember_alloc_shm_t, owner), 0);
  }
  close(r->fd); /* releases the lock */
  free(r);
}

int ember__heapshm_sweep(void) {
  DIR *d = opendir("/dev/shm");
  int removed = 0;
  if (d == NULL) return -errno;
  static const char prefix[] = "ember-alloc.";
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    uint64_t v;
    if (strncmp(e->d_name, prefix, sizeof prefix - 1) != 0) continue;
    if (ember_parse_u64(e->d_name + sizeof prefix - 1, 1, INT32_MAX, &v) != 0) continue;
    if (kill((pid_t)v, 0) == 0 || errno != ESRCH) continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
  }
  closedir(d);
  return removed;
}
