/* libember_alloc.so: an LD_PRELOAD library that lets the agent sample the
 * allocations of this process by bytes, on demand.
 *
 * Dormant, each malloc/calloc/realloc (and memalign, aligned_alloc,
 * posix_memalign) costs the real call plus one load and
 * one predictable branch (is sampling on?). The library creates its control
 * file (preload/ember_alloc_shm.h) at start; an agent session turns `on`
 * in it, and from then on each thread samples about one allocation per
 * `sample_bytes` bytes (exponential intervals, so the sampled allocations
 * form a Poisson process over the byte stream) and writes the stack into
 * the file's ring. Nothing here allocates on the sampling path or blocks:
 * a full ring drops the sample and counts it. See docs/internals/alloc.md. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ember_alloc_shm.h"

#define API         __attribute__((visibility("default")))
#define TLS         static __thread __attribute__((tls_model("initial-exec")))
#define UNLIKELY(x) (__builtin_expect(!!(x), 0) != 0)

/* An agent that stops polling (crashed, killed) must not leave the process
 * sampling forever: after this long without a heartbeat the library turns
 * itself off. */
#define SILENT_AGENT_NS (10LL * 1000000000LL)

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void (*free_fn)(void *);
typedef void *(*memalign_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);

/* Until a session maps nothing else, g_ctl points at this header, whose
 * `on` stays 0: the hot path never tests for NULL. */
static ember_alloc_shm_t g_dummy;
static ember_alloc_shm_t *g_ctl = &g_dummy;
static char g_path[64];

static void *first_malloc(size_t n);
static void *first_calloc(size_t a, size_t b);
static void *first_realloc(void *p, size_t n);
static void first_free(void *p);
/* The first call of each goes through first_* which resolves the real
 * functions, so the hooks test no "resolved yet?" flag either. */
static malloc_fn real_malloc = first_malloc;
static calloc_fn real_calloc = first_calloc;
static realloc_fn real_realloc = first_realloc;
static free_fn real_free = first_free;
/* The aligned allocators: resolved with the others, NULL if the libc has
 * none (they then fail with ENOMEM). */
static memalign_fn real_memalign, real_aligned_alloc;
static posix_memalign_fn real_posix_memalign;

TLS int t_resolving; /* this thread is inside dlsym */
TLS int t_busy;      /* this thread is recording a sample */
TLS int64_t t_left;  /* bytes until this thread's next sample */
TLS uint64_t t_gen;  /* session generation t_left was drawn for */
TLS uint64_t t_rng;
TLS uint32_t t_tid;
TLS uintptr_t t_stack_lo, t_stack_hi;

static uint64_t g_seen_heartbeat;
static int64_t g_seen_at_ns;

/* --- bootstrap allocations --- */

/* dlsym may allocate (calloc for its error state) before the real functions
 * are known. Those few allocations come from this arena and are never
 * freed; each has a 16-byte header holding its size for realloc. */
static _Alignas(16) unsigned char g_boot[64 * 1024];
static size_t g_boot_used;

static void *boot_alloc(size_t n) {
  if (n > sizeof g_boot) return NULL;
  size_t need = 16 + ((n + 15) & ~(size_t)15);
  size_t at = __atomic_fetch_add(&g_boot_used, need, __ATOMIC_RELAXED);
  if (at + need > sizeof g_boot) {
    errno = ENOMEM;
    return NULL;
  }
  memcpy(g_boot + at, &n, sizeof n);
  return g_boot + at + 16;
}

static int is_boot(const void *p) {
  return (const unsigned char *)p >= g_boot && (const unsigned char *)p < g_boot + sizeof g_boot;
}

static void die(const char *msg) {
  ssize_t rc = write(2, msg, strlen(msg));
  (void)rc;
  abort();
}

static void resolve(void) {
  t_resolving = 1;
  void *m = dlsym(RTLD_NEXT, "malloc");
  void *c = dlsym(RTLD_NEXT, "calloc");
  void *r = dlsym(RTLD_NEXT, "realloc");
  void *f = dlsym(RTLD_NEXT, "free");
  void *ma = dlsym(RTLD_NEXT, "memalign");
  void *aa = dlsym(RTLD_NEXT, "aligned_alloc");
  void *pm = dlsym(RTLD_NEXT, "posix_memalign");
  t_resolving = 0;
  if (m == NULL || c == NULL || r == NULL || f == NULL)
    die("libember_alloc: cannot find the next malloc/calloc/realloc/free\n");
  /* POSIX guarantees object/function pointer conversion for dlsym. */
  __atomic_store_n(&real_memalign, (memalign_fn)ma, __ATOMIC_RELEASE);
  __atomic_store_n(&real_aligned_alloc, (memalign_fn)aa, __ATOMIC_RELEASE);
  __atomic_store_n(&real_posix_memalign, (posix_memalign_fn)pm, __ATOMIC_RELEASE);
  __atomic_store_n(&real_free, (free_fn)f, __ATOMIC_RELEASE);
  __atomic_store_n(&real_realloc, (realloc_fn)r, __ATOMIC_RELEASE);
  __atomic_store_n(&real_calloc, (calloc_fn)c, __ATOMIC_RELEASE);
  __atomic_store_n(&real_malloc, (malloc_fn)m, __ATOMIC_RELEASE);
}

static void *first_malloc(size_t n) {
  if (t_resolving) return boot_alloc(n);
  resolve();
  return real_malloc(n);
}

static void *first_calloc(size_t a, size_t b) {
  size_t n;
  if (t_resolving) return __builtin_mul_overflow(a, b, &n) ? NULL : boot_alloc(n);
  resolve();
  return real_calloc(a, b);
}

static void *first_realloc(void *p, size_t n) {
  if (t_resolving) return NULL;
  resolve();
  return real_realloc(p, n);
}

static void first_free(void *p) {
  if (t_resolving) return;
  resolve();
  real_free(p);
}

/* --- sampling --- */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t next_random(void) {
  if (t_rng == 0) {
    /* splitmix64 of the thread id and time: threads draw independently. */
    uint64_t z = ((uint64_t)t_tid << 32) ^ (uint64_t)now_ns() ^ (uint64_t)(uintptr_t)&t_rng;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    t_rng = (z ^ (z >> 31)) | 1;
  }
  /* xorshift64* */
  t_rng ^= t_rng >> 12;
  t_rng ^= t_rng << 25;
  t_rng ^= t_rng >> 27;
  return t_rng * 0x2545f4914f6cdd1dULL;
}

/* An exponential interval with mean `mean` bytes, at least 1. */
static int64_t draw_interval(uint64_t mean) {
  if (mean == 0) mean = 1;
  if (mean > (1ULL << 40)) mean = 1ULL << 40;
  /* u in (0, 1]: never log(0). */
  double u = ((double)(next_random() >> 11) + 1.0) * 0x1.0p-53;
  double v = -log(u) * (double)mean;
  if (v > 9.0e15) v = 9.0e15;
  return (int64_t)v + 1;
}

/* Bounds of this thread's stack, so the frame walk never reads outside it
 * (code without frame pointers leaves garbage in rbp). */
static void stack_bounds(void) {
  uintptr_t lo = 0, hi = 0;
  if (t_tid == (uint32_t)getpid()) {
    /* The main thread: glibc's pthread_getattr_np would read
     * /proc/self/maps through stdio here, which can take locks the
     * interrupted caller holds. Everything from sp up to __libc_stack_end
     * is mapped. */
    extern void *__libc_stack_end;
    struct rlimit rl;
    uintptr_t span = 8u << 20;
    hi = (uintptr_t)__libc_stack_end;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (1u << 30))
      span = (uintptr_t)rl.rlim_cur;
    lo = hi > span ? hi - span : 0;
  } else {
    pthread_attr_t attr;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        lo = (uintptr_t)addr;
        hi = lo + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  t_stack_lo = lo;
  t_stack_hi = hi != 0 ? hi : 1;
}

/* Is the agent still there? Heartbeats are counted, not timestamps, so the
 * two sides never need to agree on a clock (time namespaces). */
static int agent_alive(ember_alloc_shm_t *c) {
  uint64_t hb = __atomic_load_n(&c->heartbeat, __ATOMIC_RELAXED);
  int64_t now = now_ns();
  if (hb != __atomic_load_n(&g_seen_heartbeat, __ATOMIC_RELAXED)) {
    __atomic_store_n(&g_seen_heartbeat, hb, __ATOMIC_RELAXED);
    __atomic_store_n(&g_seen_at_ns, now, __ATOMIC_RELAXED);
    return 1;
  }
  int64_t seen = __atomic_load_n(&g_seen_at_ns, __ATOMIC_RELAXED);
  if (seen == 0) {
    __atomic_store_n(&g_seen_at_ns, now, __ATOMIC_RELAXED);
    return 1;
  }
  if (now - seen < SILENT_AGENT_NS) return 1;
  uint64_t on = 1;
  if (__atomic_compare_exchange_n(&c->on, &on, 0, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    __atomic_fetch_add(&c->self_off, 1, __ATOMIC_RELAXED);
  return 0;
}

static void record(ember_alloc_shm_t *c, size_t size, void *const *fp, uint64_t leaf) {
  if (!agent_alive(c)) return;
  ember_alloc_slot_t *slots =
      (ember_alloc_slot_t *)(void *)((unsigned char *)c + EMBER_ALLOC_SHM_HDR);
  uint64_t head = __atomic_load_n(&c->head, __ATOMIC_RELAXED);
  do {
    uint64_t tail = __atomic_load_n(&c->tail, __ATOMIC_ACQUIRE);
    if (head - tail >= EMBER_ALLOC_SHM_SLOTS) {
      __atomic_fetch_add(&c->dropped, 1, __ATOMIC_RELAXED);
      return;
    }
  } while (!__atomic_compare_exchange_n(&c->head, &head, head + 1, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
  ember_alloc_slot_t *s = &slots[head % EMBER_ALLOC_SHM_SLOTS];
  uint32_t n = 0;
  s->size = size;
  s->tid = t_tid;
  s->ips[n++] = leaf;
  /* fp is the hook's frame: fp[1] is the hook's return address, always
   * readable. Walk further only while frames stay inside this thread's
   * stack, going up, 8-byte aligned. */
  s->ips[n++] = (uint64_t)(uintptr_t)fp[1];
  uintptr_t f = (uintptr_t)fp;
  if (f >= t_stack_lo && f < t_stack_hi) {
    while (n < EMBER_ALLOC_SHM_FRAMES) {
      uintptr_t next = (uintptr_t)((void *const *)f)[0];
      if (next <= f || (next & 7) != 0 || next + 16 > t_stack_hi) break;
      f = next;
      uintptr_t ip = (uintptr_t)((void *const *)f)[1];
      if (ip < 4096) break;
      s->ips[n++] = ip;
    }
  }
  s->nips = n;
  __atomic_store_n(&s->seq, head + 1, __ATOMIC_RELEASE);
}

/* Out of line so the dormant hooks stay small. */
__attribute__((noinline)) static void maybe_sample(size_t size, void *const *fp, uint64_t leaf) {
  ember_alloc_shm_t *c = __atomic_load_n(&g_ctl, __ATOMIC_ACQUIRE);
  if (t_busy) return;
  uint64_t gen = __atomic_load_n(&c->generation, __ATOMIC_RELAXED);
  if (UNLIKELY(t_gen != gen)) {
    t_gen = gen;
    t_left = draw_interval(__atomic_load_n(&c->sample_bytes, __ATOMIC_RELAXED));
  }
  t_left -= size > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)size;
  if (t_left > 0) return;
  /* One record however many sample points fell inside this allocation:
   * the agent weighs it by the probability that at least one did. */
  t_busy = 1;
  uint64_t mean = __atomic_load_n(&c->sample_bytes, __ATOMIC_RELAXED);
  while (t_left <= 0) t_left += draw_interval(mean);
  if (t_tid == 0) t_tid = (uint32_t)syscall(SYS_gettid);
  if (t_stack_hi == 0) stack_bounds();
  record(c, size, fp, leaf);
  t_busy = 0;
}

static inline int sampling_on(void) {
  return UNLIKELY(
      __atomic_load_n(&__atomic_load_n(&g_ctl, __ATOMIC_RELAXED)->on, __ATOMIC_RELAXED) != 0);
}

/* --- the interposed functions --- */

API void *malloc(size_t n) {
  void *p = __atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE)(n);
  if (sampling_on() && p != NULL)
    maybe_sample(n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&malloc);
  return p;
}

API void *calloc(size_t a, size_t b) {
  void *p = __atomic_load_n(&real_calloc, __ATOMIC_ACQUIRE)(a, b);
  if (sampling_on() && p != NULL)
    maybe_sample(a * b, __builtin_frame_address(0), (uint64_t)(uintptr_t)&calloc);
  return p;
}

API void *realloc(void *old, size_t n) {
  if (UNLIKELY(is_boot(old))) {
    /* Moving a bootstrap allocation to the real heap. */
    size_t had;
    memcpy(&had, (unsigned char *)old - 16, sizeof had);
    void *p = malloc(n);
    if (p != NULL) memcpy(p, old, had < n ? had : n);
    return p;
  }
  void *p = __atomic_load_n(&real_realloc, __ATOMIC_ACQUIRE)(old, n);
  if (sampling_on() && p != NULL && n != 0)
    maybe_sample(n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&realloc);
  return p;
}

/* The aligned allocators. glibc's call none of the hooked functions inside,
 * so each allocation is seen once. Before the real functions are known
 * (only dlsym allocates then, and not through these) they resolve first. */
static void ensure_resolved(void) {
  if (__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == first_malloc && !t_resolving) resolve();
}

API void *memalign(size_t align, size_t n) {
  ensure_resolved();
  memalign_fn fn = __atomic_load_n(&real_memalign, __ATOMIC_ACQUIRE);
  void *p = fn != NULL ? fn(align, n) : NULL;
  if (fn == NULL) errno = ENOMEM;
  if (sampling_on() && p != NULL)
    maybe_sample(n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&memalign);
  return p;
}

API void *aligned_alloc(size_t align, size_t n) {
  ensure_resolved();
  memalign_fn fn = __atomic_load_n(&real_aligned_alloc, __ATOMIC_ACQUIRE);
  void *p = fn != NULL ? fn(align, n) : NULL;
  if (fn == NULL) errno = ENOMEM;
  if (sampling_on() && p != NULL)
    maybe_sample(n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&aligned_alloc);
  return p;
}

API int posix_memalign(void **out, size_t align, size_t n) {
  ensure_resolved();
  posix_memalign_fn fn = __atomic_load_n(&real_posix_memalign, __ATOMIC_ACQUIRE);
  int rc = fn != NULL ? fn(out, align, n) : ENOMEM;
  if (sampling_on() && rc == 0)
    maybe_sample(n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&posix_memalign);
  return rc;
}

API void free(void *p) {
  if (UNLIKELY(is_boot(p))) return;
  __atomic_load_n(&real_free, __ATOMIC_ACQUIRE)(p);
}

/* --- the control file --- */

static void make_path(pid_t pid) {
  static const char prefix[] = EMBER_ALLOC_SHM_PREFIX;
  char digits[24];
  size_t nd = 0;
  uint64_t v = (uint64_t)pid;
  do {
    digits[nd++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0 && nd < sizeof digits);
  size_t at = sizeof prefix - 1;
  memcpy(g_path, prefix, at);
  while (nd > 0 && at + 1 < sizeof g_path) g_path[at++] = digits[--nd];
  g_path[at] = '\0';
}

/* Create and map this process's control file. Failure of any step leaves
 * the library dormant for good, which is harmless. Only the header page is
 * allocated here; the agent allocates the ring's pages (fallocate) before
 * it turns sampling on, so writes to the ring can never fault with SIGBUS
 * on a full /dev/shm. */
static void ctl_create(void) {
  pid_t pid = getpid();
  make_path(pid);
  /* A stale file of a dead process with our pid, or of our image before
   * exec: replace it. An agent that still maps the old one keeps its inode. */
  unlink(g_path);
  int fd = open(g_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  void *m = MAP_FAILED;
  if (ftruncate(fd, (off_t)EMBER_ALLOC_SHM_SIZE) == 0 &&
      posix_fallocate(fd, 0, EMBER_ALLOC_SHM_HDR) == 0)
    m = mmap(NULL, EMBER_ALLOC_SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    unlink(g_path);
    g_path[0] = '\0';
    return;
  }
  ember_alloc_shm_t *c = m;
  c->version = EMBER_ALLOC_SHM_VERSION;
  c->hdr_size = EMBER_ALLOC_SHM_HDR;
  c->slot_size = (uint32_t)sizeof(ember_alloc_slot_t);
  c->nslots = EMBER_ALLOC_SHM_SLOTS;
  c->pid = (int32_t)pid;
  __atomic_store_n(&c->magic, EMBER_ALLOC_SHM_MAGIC, __ATOMIC_RELEASE);
  __atomic_store_n(&g_ctl, c, __ATOMIC_RELEASE);
}

/* The child of fork must not write into its parent's ring: it gets a file
 * of its own (only the forking thread exists in it). */
static void on_fork_child(void) {
  ember_alloc_shm_t *old = __atomic_load_n(&g_ctl, __ATOMIC_RELAXED);
  __atomic_store_n(&g_ctl, &g_dummy, __ATOMIC_RELEASE);
  if (old != &g_dummy) munmap(old, EMBER_ALLOC_SHM_SIZE);
  t_tid = 0;
  t_gen = 0;
  t_rng = 0;
  t_stack_lo = t_stack_hi = 0;
  g_seen_heartbeat = 0;
  g_seen_at_ns = 0;
  ctl_create();
}

__attribute__((constructor(101))) static void ember_alloc_init(void) {
  if (__atomic_load_n(&real_malloc, __ATOMIC_ACQUIRE) == first_malloc) resolve();
  ctl_create();
  pthread_atfork(NULL, NULL, on_fork_child);
}

/* Remove the file at normal exit; the mapping stays, since later
 * destructors may still allocate. A killed process leaves its file: the
 * agent checks that the process maps this library before trusting one, and
 * the next process with that pid replaces it. */
__attribute__((destructor(101))) static void ember_alloc_fini(void) {
  ember_alloc_shm_t *c = __atomic_load_n(&g_ctl, __ATOMIC_ACQUIRE);
  if (c != &g_dummy && c->pid == (int32_t)getpid() && g_path[0] != '\0') unlink(g_path);
}
