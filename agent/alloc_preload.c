/* The preload method of allocation sessions: the agent's side of the
 * control file that libember_alloc.so creates (preload/ember_alloc_shm.h).
 * Everything in the file is written by the profiled process, so it is
 * treated as untrusted: every slot is copied out and validated, and a stuck
 * or lying ring only loses samples. The agent never maps the file: the
 * process may truncate it at any time, and a mapping of a truncated file
 * raises SIGBUS in the reader. It reads with pread and writes its own
 * words with pwrite instead (a short read is a counted fault that ends the
 * session). See docs/internals/alloc.md. */
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

#include "../preload/ember_alloc_shm.h"
#include "alloc.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "procfs.h"
#include "procmaps.h"
#include "safefile.h"

/* Polls a reserved-but-unpublished slot may block the ring before it is
 * skipped (its writer died or was stopped mid-record). */
#define STUCK_POLLS 20

/* Slots read per pread while draining. */
#define DRAIN_BATCH 64u

static atomic_uint_fast64_t n_faults;

struct ember__alloc_preload {
  pid_t pid;
  int fd;
  uint64_t token;
  uint64_t sample_bytes;
  uint64_t tail;
  uint64_t dropped_base;
  uint64_t heartbeat;
  unsigned stuck;
  bool owner;
  bool broken; /* the file was cut or replaced: no more reads */
  ember_alloc_slot_t batch[DRAIN_BATCH];
};

uint64_t ember__alloc_preload_faults(void) { return atomic_load(&n_faults); }

/* The agent's words in the header, written one aligned 8-byte pwrite each
 * (the library reads them with plain atomic loads from its mapping). A
 * write past the end of a cut file only grows it again: no fault. */
static void put_word(const ember__alloc_preload_t *p, size_t off, uint64_t v) {
  ssize_t r;
  do {
    r = pwrite(p->fd, &v, sizeof v, (off_t)off);
  } while (r < 0 && errno == EINTR);
}

/* Read the header; false when the file is too short for it (cut). */
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

/* Does the process map the library? Its code is an executable mapping,
 * which is what a maps snapshot holds. */
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

/* Open the control file of `pid` after checking it is a regular file of
 * the right size owned by the process's user. Returns an fd or -errno. */
static int ctl_open(pid_t pid, char *err, size_t n) {
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
  if (fd < 0 || st.st_size != (off_t)EMBER_ALLOC_SHM_SIZE) {
    snprintf(err, n,
             "%s is not a control file of libember_alloc.so version %u (type, owner or size); "
             "agent and library versions must match",
             path, EMBER_ALLOC_SHM_VERSION);
    if (fd >= 0) close(fd);
    return -EPROTO;
  }
  return fd;
}

/* 1 - exp(-x) for x >= 0, without libm (the agent library does not link
 * it): halve x until the Taylor series of expm1 is exact to double
 * precision, then double back with expm1(2y) = expm1(y) (expm1(y) + 2). */
static double one_minus_exp_neg(double x) {
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

static bool header_ok(const ember_alloc_shm_t *c, pid_t nspid) {
  return __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == EMBER_ALLOC_SHM_MAGIC &&
         c->version == EMBER_ALLOC_SHM_VERSION && c->hdr_size == EMBER_ALLOC_SHM_HDR &&
         c->slot_size == sizeof(ember_alloc_slot_t) && c->nslots == EMBER_ALLOC_SHM_SLOTS &&
         c->pid == (int32_t)nspid;
}

bool ember__alloc_preload_present(pid_t pid) {
  char err[256];
  if (pid <= 0) return false;
  int fd = ctl_open(pid, err, sizeof err);
  if (fd < 0) return false;
  ember_alloc_shm_t h;
  bool ok = get_header(fd, &h) && header_ok(&h, ns_pid(pid));
  close(fd);
  return ok;
}

static uint64_t new_token(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t t = ((uint64_t)getpid() << 40) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
  return t != 0 ? t : 1;
}

int ember__alloc_preload_open(pid_t pid, uint64_t sample_bytes, ember__alloc_preload_t **out,
                              char *err, size_t n) {
  ember__alloc_preload_t *p = NULL;
  ember_alloc_shm_t h;
  int rc, fd = ctl_open(pid, err, n);
  if (fd < 0) return fd;
  if (!get_header(fd, &h) || !header_ok(&h, ns_pid(pid))) {
    rc = -EPROTO;
    snprintf(err, n, "process %d's control file has a bad header (library version %u expected)",
             (int)pid, EMBER_ALLOC_SHM_VERSION);
    goto cleanup;
  }
  /* One session per process: an exclusive lock on the file, which the
   * kernel drops if the agent dies (the token word below is informative
   * only, for a reader of the file). */
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
    snprintf(err, n, "process %d already has an allocation session (another agent?)", (int)pid);
    goto cleanup;
  }
  /* The ring's pages must exist before the library may write them: a
   * write to a hole of a full tmpfs would kill the process with SIGBUS. */
  rc = posix_fallocate(fd, 0, (off_t)EMBER_ALLOC_SHM_SIZE);
  if (rc != 0) {
    snprintf(err, n, "cannot reserve %zu bytes for process %d's sample ring in /dev/shm: %s",
             (size_t)EMBER_ALLOC_SHM_SIZE, (int)pid, strerror(rc));
    rc = -rc;
    goto cleanup;
  }
  p = calloc(1, sizeof *p);
  if (p == NULL) {
    rc = -ENOMEM;
    snprintf(err, n, "out of memory");
    goto cleanup;
  }
  p->token = new_token();
  p->owner = true;
  p->pid = pid;
  p->fd = fd;
  p->sample_bytes = sample_bytes;
  p->tail = h.head;
  p->dropped_base = h.dropped;
  p->heartbeat = h.heartbeat + 1;
  put_word(p, offsetof(ember_alloc_shm_t, owner), p->token);
  put_word(p, offsetof(ember_alloc_shm_t, tail), p->tail);
  put_word(p, offsetof(ember_alloc_shm_t, sample_bytes), sample_bytes);
  put_word(p, offsetof(ember_alloc_shm_t, heartbeat), p->heartbeat);
  put_word(p, offsetof(ember_alloc_shm_t, generation), h.generation + 1);
  /* pwrite orders these stores as the old __ATOMIC_RELEASE did: each one
   * is complete in the page cache before the next starts, and `on` last. */
  put_word(p, offsetof(ember_alloc_shm_t, on), 1);
  *out = p;
  return 0;

cleanup:
  free(p);
  close(fd);
  return rc;
}

/* The file was cut (or is no longer the size it must be): count it and
 * read no more; what was aggregated is kept. */
static int fault(ember__alloc_preload_t *p) {
  if (!p->broken) {
    atomic_fetch_add(&n_faults, 1);
    EMBER_WARN_LIMITED(
        "alloc",
        "process %d cut, resized or corrupted its allocation control file: its session ends "
        "with the samples read so far",
        (int)p->pid);
  }
  p->broken = true;
  return -EPROTO;
}

int ember__alloc_preload_drain(ember__alloc_preload_t *p,
                               void (*add)(void *ctx, const uint64_t *ips, size_t n, double objects,
                                           double bytes),
                               void *ctx, uint64_t *lost) {
  ember_alloc_shm_t h;
  struct stat st;
  if (p->broken) return -EPROTO;
  if (fstat(p->fd, &st) != 0 || st.st_size != (off_t)EMBER_ALLOC_SHM_SIZE || !get_header(p->fd, &h))
    return fault(p);
  put_word(p, offsetof(ember_alloc_shm_t, heartbeat), ++p->heartbeat);
  uint64_t head = h.head;
  /* Counters only grow: one going backwards is a corrupt or hostile file,
   * not 2^64 lost samples. */
  if ((int64_t)(head - p->tail) < 0 || h.dropped < p->dropped_base) return fault(p);
  if (head - p->tail > EMBER_ALLOC_SHM_SLOTS) {
    /* Only a corrupt or hostile writer gets here. */
    *lost += head - p->tail - EMBER_ALLOC_SHM_SLOTS;
    p->tail = head - EMBER_ALLOC_SHM_SLOTS;
  }
  size_t have = 0, at = 0; /* batch[at..have) holds slots p->tail.. */
  while (p->tail != head) {
    if (at == have) {
      /* Read up to DRAIN_BATCH slots in one call, not past the ring's
       * end nor past head. */
      uint64_t idx = p->tail % EMBER_ALLOC_SHM_SLOTS;
      uint64_t want = head - p->tail;
      if (want > DRAIN_BATCH) want = DRAIN_BATCH;
      if (want > EMBER_ALLOC_SHM_SLOTS - idx) want = EMBER_ALLOC_SHM_SLOTS - idx;
      size_t bytes = (size_t)want * sizeof(ember_alloc_slot_t);
      ssize_t r = ember__safe_pread(p->fd, p->batch, bytes,
                                    EMBER_ALLOC_SHM_HDR + idx * sizeof(ember_alloc_slot_t));
      if (r != (ssize_t)bytes) return fault(p);
      have = (size_t)want;
      at = 0;
    }
    const ember_alloc_slot_t *copy = &p->batch[at];
    if (copy->seq != p->tail + 1) {
      /* Not published yet (or published after this read): wait for it,
       * up to STUCK_POLLS polls, reading it again at the next poll. */
      if (++p->stuck < STUCK_POLLS) break;
      (*lost)++;
      p->tail++;
      at++;
      p->stuck = 0;
      continue;
    }
    /* One pread copied seq and body in no defined order: read seq again
     * and take the copy only if the slot was not rewritten meanwhile. */
    uint64_t seq2 = 0;
    uint64_t slot_off = EMBER_ALLOC_SHM_HDR + (p->tail % EMBER_ALLOC_SHM_SLOTS) * sizeof *copy +
                        offsetof(ember_alloc_slot_t, seq);
    if (ember__safe_pread(p->fd, &seq2, sizeof seq2, slot_off) != (ssize_t)sizeof seq2)
      return fault(p);
    p->stuck = 0;
    p->tail++;
    at++;
    if (seq2 != copy->seq) {
      (*lost)++;
      continue;
    }
    if (copy->nips == 0 || copy->nips > EMBER_ALLOC_SHM_FRAMES || copy->size == 0) {
      (*lost)++;
      continue;
    }
    /* An allocation of `size` bytes holds at least one sample point of a
     * Poisson process of rate 1/R with probability 1 - exp(-size/R);
     * dividing by it makes the estimates unbiased. */
    double prob = one_minus_exp_neg((double)copy->size / (double)p->sample_bytes);
    double w = prob > 0 ? 1.0 / prob : 1.0;
    add(ctx, copy->ips, copy->nips, w, w * (double)copy->size);
  }
  put_word(p, offsetof(ember_alloc_shm_t, tail), p->tail);
  *lost += h.dropped - p->dropped_base;
  p->dropped_base = h.dropped;
  if (kill(p->pid, 0) != 0 && errno == ESRCH) return -ESRCH;
  return 0;
}

void ember__alloc_preload_disable(ember__alloc_preload_t *p) {
  if (p != NULL) put_word(p, offsetof(ember_alloc_shm_t, on), 0);
}

void ember__alloc_preload_close(ember__alloc_preload_t *p) {
  if (p == NULL) return;
  put_word(p, offsetof(ember_alloc_shm_t, on), 0);
  if (p->owner) {
    ember_alloc_shm_t h;
    if (get_header(p->fd, &h) && h.owner == p->token)
      put_word(p, offsetof(ember_alloc_shm_t, owner), 0);
  }
  close(p->fd); /* releases the lock */
  free(p);
}

int ember__alloc_preload_sweep(void) {
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
