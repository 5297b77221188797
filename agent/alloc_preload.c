/* The preload method of allocation sessions: the agent's side of the
 * control file that libember_alloc.so creates (preload/ember_alloc_shm.h).
 * Everything in the file is written by the profiled process, so it is
 * treated as untrusted: sizes are checked before mapping, every slot is
 * copied out and validated, and a stuck or lying ring only loses samples.
 * See docs/internals/alloc.md. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../preload/ember_alloc_shm.h"
#include "alloc.h"
#include "ember/parse.h"

/* Polls a reserved-but-unpublished slot may block the ring before it is
 * skipped (its writer died or was stopped mid-record). */
#define STUCK_POLLS 20

struct ember__alloc_preload {
  pid_t pid;
  int fd;
  ember_alloc_shm_t *c;
  uint64_t token;
  uint64_t sample_bytes;
  uint64_t tail;
  uint64_t dropped_base;
  unsigned stuck;
  bool owner;
};

/* The pid of `pid` in its own namespace (last NSpid field), so the file
 * name matches what the library saw in getpid(). */
static pid_t ns_pid(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "re");
  pid_t r = pid;
  if (f == NULL) return r;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "NSpid:", 6) != 0) continue;
    char *last = NULL;
    for (char *p = line + 6; *p != '\0'; p++)
      if ((*p >= '0' && *p <= '9') && (p[-1] == ' ' || p[-1] == '\t')) last = p;
    if (last != NULL) {
      last[strcspn(last, " \t\n")] = '\0';
      uint64_t v;
      if (ember_parse_u64(last, 1, INT32_MAX, &v) == 0) r = (pid_t)v;
    }
    break;
  }
  fclose(f);
  return r;
}

static bool maps_library(pid_t pid) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "re");
  bool found = false;
  if (f == NULL) return false;
  while (!found && fgets(line, sizeof line, f) != NULL)
    found = strstr(line, "/libember_alloc") != NULL;
  fclose(f);
  return found;
}

static void ctl_path(pid_t pid, char *buf, size_t size) {
  snprintf(buf, size, "/proc/%d/root" EMBER_ALLOC_SHM_PREFIX "%d", (int)pid, (int)ns_pid(pid));
}

/* Open the control file of `pid` after checking it is a regular file of
 * the right size owned by the process's user. Returns an fd or -errno. */
static int ctl_open(pid_t pid, char *err, size_t n) {
  char path[128], proc[32];
  struct stat st, pst;
  ctl_path(pid, path, sizeof path);
  snprintf(proc, sizeof proc, "/proc/%d", (int)pid);
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
  int fd;
  do {
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    int e = errno;
    snprintf(err, n, "process %d maps libember_alloc.so but its control file %s: %s", (int)pid,
             path, strerror(e));
    return -e;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != pst.st_uid ||
      st.st_size != (off_t)EMBER_ALLOC_SHM_SIZE) {
    snprintf(err, n,
             "%s is not a control file of libember_alloc.so version %u (type, owner or size); "
             "agent and library versions must match",
             path, EMBER_ALLOC_SHM_VERSION);
    close(fd);
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
  void *m = mmap(NULL, EMBER_ALLOC_SHM_HDR, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return false;
  bool ok = header_ok(m, ns_pid(pid));
  munmap(m, EMBER_ALLOC_SHM_HDR);
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
  void *m = MAP_FAILED;
  int rc, fd = ctl_open(pid, err, n);
  if (fd < 0) return fd;
  m = mmap(NULL, EMBER_ALLOC_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    rc = -errno;
    snprintf(err, n, "mmap of process %d's control file: %s", (int)pid, strerror(-rc));
    goto cleanup;
  }
  ember_alloc_shm_t *c = m;
  if (!header_ok(c, ns_pid(pid))) {
    rc = -EPROTO;
    snprintf(err, n, "process %d's control file has a bad header (library version %u expected)",
             (int)pid, EMBER_ALLOC_SHM_VERSION);
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
  /* Take ownership; a previous owner that went silent left `on` cleared
   * (the library turns itself off), so its claim may be taken over. */
  uint64_t prev = 0;
  if (!__atomic_compare_exchange_n(&c->owner, &prev, p->token, false, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    if (__atomic_load_n(&c->on, __ATOMIC_ACQUIRE) != 0 ||
        !__atomic_compare_exchange_n(&c->owner, &prev, p->token, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
      rc = -EBUSY;
      snprintf(err, n, "process %d already has an allocation session (another agent?)", (int)pid);
      goto cleanup;
    }
  }
  p->owner = true;
  p->pid = pid;
  p->fd = fd;
  p->c = c;
  p->sample_bytes = sample_bytes;
  p->tail = __atomic_load_n(&c->head, __ATOMIC_ACQUIRE);
  p->dropped_base = __atomic_load_n(&c->dropped, __ATOMIC_RELAXED);
  __atomic_store_n(&c->tail, p->tail, __ATOMIC_RELEASE);
  __atomic_store_n(&c->sample_bytes, sample_bytes, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c->heartbeat, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&c->generation, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&c->on, 1, __ATOMIC_RELEASE);
  *out = p;
  return 0;

cleanup:
  free(p);
  if (m != MAP_FAILED) munmap(m, EMBER_ALLOC_SHM_SIZE);
  close(fd);
  return rc;
}

int ember__alloc_preload_drain(ember__alloc_preload_t *p,
                               void (*add)(void *ctx, const uint64_t *ips, size_t n, double objects,
                                           double bytes),
                               void *ctx, uint64_t *lost) {
  ember_alloc_shm_t *c = p->c;
  const ember_alloc_slot_t *slots =
      (const ember_alloc_slot_t *)(const void *)((const unsigned char *)c + EMBER_ALLOC_SHM_HDR);
  ember_alloc_slot_t copy;
  __atomic_fetch_add(&c->heartbeat, 1, __ATOMIC_RELAXED);
  uint64_t head = __atomic_load_n(&c->head, __ATOMIC_ACQUIRE);
  if (head - p->tail > EMBER_ALLOC_SHM_SLOTS) {
    /* Only a corrupt or hostile writer gets here. */
    *lost += head - p->tail - EMBER_ALLOC_SHM_SLOTS;
    p->tail = head - EMBER_ALLOC_SHM_SLOTS;
  }
  while (p->tail != head) {
    const ember_alloc_slot_t *s = &slots[p->tail % EMBER_ALLOC_SHM_SLOTS];
    if (__atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != p->tail + 1) {
      if (++p->stuck < STUCK_POLLS) break;
      (*lost)++;
      p->tail++;
      p->stuck = 0;
      continue;
    }
    p->stuck = 0;
    memcpy(&copy, s, sizeof copy);
    p->tail++;
    if (copy.nips == 0 || copy.nips > EMBER_ALLOC_SHM_FRAMES || copy.size == 0 ||
        __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE) != copy.seq) {
      (*lost)++;
      continue;
    }
    /* An allocation of `size` bytes holds at least one sample point of a
     * Poisson process of rate 1/R with probability 1 - exp(-size/R);
     * dividing by it makes the estimates unbiased. */
    double prob = one_minus_exp_neg((double)copy.size / (double)p->sample_bytes);
    double w = prob > 0 ? 1.0 / prob : 1.0;
    add(ctx, copy.ips, copy.nips, w, w * (double)copy.size);
  }
  __atomic_store_n(&c->tail, p->tail, __ATOMIC_RELEASE);
  uint64_t dropped = __atomic_load_n(&c->dropped, __ATOMIC_RELAXED);
  *lost += dropped - p->dropped_base;
  p->dropped_base = dropped;
  if (kill(p->pid, 0) != 0 && errno == ESRCH) return -ESRCH;
  return 0;
}

void ember__alloc_preload_disable(ember__alloc_preload_t *p) {
  if (p != NULL) __atomic_store_n(&p->c->on, 0, __ATOMIC_RELEASE);
}

void ember__alloc_preload_close(ember__alloc_preload_t *p) {
  if (p == NULL) return;
  __atomic_store_n(&p->c->on, 0, __ATOMIC_RELEASE);
  if (p->owner) {
    uint64_t tok = p->token;
    __atomic_compare_exchange_n(&p->c->owner, &tok, 0, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
  }
  munmap(p->c, EMBER_ALLOC_SHM_SIZE);
  close(p->fd);
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
