/* libember_alloc.so: an LD_PRELOAD library that samples the allocations of
 * this process by bytes, for the agent's in-use heap profiles (always on,
 * from the first allocation) and its allocation sessions.
 *
 * Each thread samples about one allocation per `sample_bytes` bytes
 * (exponential intervals, so the sampled allocations form a Poisson
 * process over the byte stream, default 512 KiB: EMBER_HEAP_SAMPLE_BYTES)
 * and writes the caller's registers, the top of its stack and a
 * frame-pointer walk into the control file's ring
 * (preload/ember_alloc_shm.h); the agent unwinds the copy with the
 * binaries' CFI, so code without frame pointers gets whole stacks. A
 * sampled allocation that is still live has an entry in the file's live
 * table until it is freed; in front of that lookup, free tests one byte
 * of a counting filter, so the free of an unsampled pointer costs one
 * load and one predictable branch. Each allocation costs one subtraction
 * from a thread-local byte countdown and its borrow test: the countdown
 * runs to the next sample point or the next check of the control file,
 * whichever is nearer (at most CHECK_BYTES away), so rate changes and
 * sessions are seen within CHECK_BYTES of a thread's allocations and no
 * shared word is read per call. With EMBER_HEAP_SAMPLE_BYTES=0 the
 * library is dormant (the countdown only runs to checks) until an agent
 * session turns it on. Nothing here allocates on the sampling path
 * or blocks: a full ring drops the record (the allocation is still
 * tracked, its stack unknown) and counts it. See docs/internals/heap.md. */
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

/* How far apart, in a thread's allocated bytes, its countdown stops to
 * look at the control file (on, generation) when no sample point comes
 * first: a session's rate or `on` takes effect within this much. At the
 * slow path's ~10 ns that is under 0.1 ns per KiB allocated. */
#define CHECK_BYTES (256u * 1024u)

TLS int t_resolving; /* this thread is inside dlsym */
TLS int t_busy;      /* this thread is recording a sample */
/* The hot word: bytes this thread may allocate before its slow path runs
 * (at most CHECK_BYTES). Zero in a new thread, so its first allocation
 * starts its countdown. */
TLS uint64_t t_left;
TLS uint64_t t_gap;  /* bytes from that stop to the sample point */
TLS uint64_t t_mean; /* mean the sample point was drawn at; 0 = none drawn */
TLS uint64_t t_gen;  /* session generation t_mean is of */
TLS uint64_t t_rng;
TLS uint32_t t_tid;
TLS uintptr_t t_stack_lo, t_stack_hi;

/* The free filter: one byte counter per 16-byte granule of a 4 MiB window
 * of addresses (ptr >> 4, modulo its size), counting the live table's
 * entries that fall on it (saturating at 255, then never decremented).
 * Zero means "certainly not sampled". Neighbouring allocations share
 * cache lines of it, so a loop of malloc and free keeps hitting the same
 * line. Private memory: only this process's writes decide its frees. The
 * granules of bootstrap allocations are set to 255 too, so free needs no
 * test of its own for them. */
#define FILTER_BITS 18
static uint8_t g_filter[1u << FILTER_BITS];

static inline uint32_t filter_index(const void *p) {
  return (uint32_t)((uintptr_t)p >> 4) & ((1u << FILTER_BITS) - 1);
}

static uint64_t g_seen_heartbeat;
static int64_t g_seen_at_ns;

/* --- bootstrap allocations --- */

/* dlsym may allocate (calloc for its error state) before the real functions
 * are known. Those few allocations come from this arena and are never
 * freed; each has a 16-byte header holding its size for realloc. */
static _Alignas(16) unsigned char g_boot[64 * 1024];
static size_t g_boot_used;

/* Saturate the filter over [from, to) of the arena: see g_filter. */
static void boot_mark(size_t from, size_t to) {
  for (size_t at = from; at < to; at += 16)
    __atomic_store_n(&g_filter[filter_index(g_boot + at)], 255, __ATOMIC_RELAXED);
}

static void *boot_alloc(size_t n) {
  if (n > sizeof g_boot) return NULL;
  size_t need = 16 + ((n + 15) & ~(size_t)15);
  size_t at = __atomic_fetch_add(&g_boot_used, need, __ATOMIC_RELAXED);
  if (at + need > sizeof g_boot) {
    errno = ENOMEM;
    return NULL;
  }
  memcpy(g_boot + at, &n, sizeof n);
  boot_mark(at, at + need);
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
 * two sides never need to agree on a clock (time namespaces). An agent
 * that stops polling (crashed, killed) must not leave the process at a
 * session's rate forever: dormant, the library turns itself off; in heap
 * mode it goes back to its own rate. Returns whether to record. */
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
  uint64_t heap = c->heap_sample_bytes; /* the library's own word */
  if (heap != 0) {
    uint64_t cur = __atomic_load_n(&c->sample_bytes, __ATOMIC_RELAXED);
    if (cur != heap && __atomic_compare_exchange_n(&c->sample_bytes, &cur, heap, false,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      __atomic_fetch_add(&c->generation, 1, __ATOMIC_RELAXED);
      __atomic_fetch_add(&c->self_off, 1, __ATOMIC_RELAXED);
    }
    return 1;
  }
  uint64_t on = 1;
  if (__atomic_compare_exchange_n(&c->on, &on, 0, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    __atomic_fetch_add(&c->self_off, 1, __ATOMIC_RELAXED);
  return 0;
}

static ember_alloc_live_t *live_table(ember_alloc_shm_t *c) {
  return (ember_alloc_live_t *)(void *)((unsigned char *)c + EMBER_ALLOC_SHM_LIVE_OFF);
}

/* Track a sampled allocation: take an empty or removed entry within the
 * probe limit (else count it in live_dropped), fill it, then publish its
 * key. Only heap mode tracks (a dormant library's session counts
 * allocations, not what stays live). */
static void live_insert(ember_alloc_shm_t *c, const void *p, size_t size, uint64_t mean,
                        uint64_t id) {
  ember_alloc_live_t *t = live_table(c);
  uint32_t h = ember_alloc_live_home((uint64_t)(uintptr_t)p);
  for (uint32_t i = 0; i < EMBER_ALLOC_SHM_PROBES; i++) {
    ember_alloc_live_t *e = &t[(h + i) & (EMBER_ALLOC_SHM_LIVE - 1)];
    uint64_t k = __atomic_load_n(&e->ptr, __ATOMIC_RELAXED);
    if (k != EMBER_ALLOC_LIVE_EMPTY && k != EMBER_ALLOC_LIVE_REMOVED) continue;
    if (!__atomic_compare_exchange_n(&e->ptr, &k, EMBER_ALLOC_LIVE_BUSY, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
      continue;
    e->size = size;
    e->mean = mean;
    e->id = id;
    uint8_t *f = &g_filter[filter_index(p)];
    uint8_t v = __atomic_load_n(f, __ATOMIC_RELAXED);
    while (v != 255 && !__atomic_compare_exchange_n(f, &v, (uint8_t)(v + 1), true, __ATOMIC_RELAXED,
                                                    __ATOMIC_RELAXED)) {
    }
    __atomic_store_n(&e->ptr, (uint64_t)(uintptr_t)p, __ATOMIC_RELEASE);
    return;
  }
  __atomic_fetch_add(&c->live_dropped, 1, __ATOMIC_RELAXED);
}

/* `p` is being freed (or moved by realloc) and the filter says it may be
 * sampled: remove its entry if it has one. An address is live once, so
 * no other thread inserts or removes the same key meanwhile. */
__attribute__((noinline)) static void live_remove(const void *p) {
  ember_alloc_shm_t *c = __atomic_load_n(&g_ctl, __ATOMIC_ACQUIRE);
  if (c == &g_dummy) return;
  ember_alloc_live_t *t = live_table(c);
  uint64_t key = (uint64_t)(uintptr_t)p;
  uint32_t h = ember_alloc_live_home(key);
  for (uint32_t i = 0; i < EMBER_ALLOC_SHM_PROBES; i++) {
    ember_alloc_live_t *e = &t[(h + i) & (EMBER_ALLOC_SHM_LIVE - 1)];
    uint64_t k = __atomic_load_n(&e->ptr, __ATOMIC_ACQUIRE);
    if (k == EMBER_ALLOC_LIVE_EMPTY) return;
    if (k != key) continue;
    __atomic_store_n(&e->ptr, EMBER_ALLOC_LIVE_REMOVED, __ATOMIC_RELEASE);
    uint8_t *f = &g_filter[filter_index(p)];
    uint8_t v = __atomic_load_n(f, __ATOMIC_RELAXED);
    while (v != 0 && v != 255 &&
           !__atomic_compare_exchange_n(f, &v, (uint8_t)(v - 1), true, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    return;
  }
}

static inline void maybe_untrack(const void *p) {
  if (UNLIKELY(g_filter[filter_index(p)] != 0)) live_remove(p);
}

/* The ring's geometry, fixed at the file's creation (from the
 * environment). */
static uint32_t g_ring_bytes = EMBER_ALLOC_SHM_RING_DEFAULT;
static uint32_t g_stack_max = EMBER_ALLOC_SHM_STACK_DEFAULT;

static unsigned char *ring_cell(ember_alloc_shm_t *c, uint64_t ticket) {
  uint64_t ncells = g_ring_bytes / EMBER_ALLOC_SHM_CELL;
  return (unsigned char *)c + EMBER_ALLOC_SHM_RING_OFF + (ticket % ncells) * EMBER_ALLOC_SHM_CELL;
}

/* Reserve `k` cells that do not cross the ring's end (padding the end
 * first when they would): the record's first ticket + 1, or 0 (no room,
 * counted). */
static uint64_t reserve_cells(ember_alloc_shm_t *c, uint32_t k) {
  uint64_t ncells = g_ring_bytes / EMBER_ALLOC_SHM_CELL;
  uint64_t head = __atomic_load_n(&c->head, __ATOMIC_RELAXED), pad, need;
  do {
    uint64_t tail = __atomic_load_n(&c->tail, __ATOMIC_ACQUIRE);
    uint64_t to_end = ncells - head % ncells;
    pad = k > to_end ? to_end : 0;
    need = pad + k;
    if (head - tail > ncells || need > ncells - (head - tail)) {
      __atomic_fetch_add(&c->dropped, 1, __ATOMIC_RELAXED);
      return 0;
    }
  } while (!__atomic_compare_exchange_n(&c->head, &head, head + need, true, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
  if (pad != 0) {
    ember_alloc_rec_t *r = (ember_alloc_rec_t *)(void *)ring_cell(c, head);
    r->ncells = (uint32_t)pad;
    r->kind = EMBER_ALLOC_REC_PAD;
    __atomic_store_n(&r->seq, head + 1, __ATOMIC_RELEASE);
  }
  return head + pad + 1;
}

/* Record a sample: a frame-pointer walk from the hook's frame `fp` (fp[0]
 * the caller's rbp, fp[1] the return address, the caller's sp just
 * above), the caller's registers and the top of its stack. Returns the
 * record's seq, or 0 when the ring had no room. */
static uint64_t write_record(ember_alloc_shm_t *c, const void *p, size_t size, uint64_t mean,
                             void *const *fp, uint64_t leaf) {
  uint64_t ips[EMBER_ALLOC_SHM_FRAMES];
  uint32_t n = 0;
  ips[n++] = leaf;
  ips[n++] = (uint64_t)(uintptr_t)fp[1];
  /* Walk further only while frames stay inside this thread's stack, going
   * up, 8-byte aligned. */
  uintptr_t f = (uintptr_t)fp;
  if (f >= t_stack_lo && f < t_stack_hi) {
    while (n < EMBER_ALLOC_SHM_FRAMES) {
      uintptr_t next = (uintptr_t)((void *const *)f)[0];
      if (next <= f || (next & 7) != 0 || next + 16 > t_stack_hi) break;
      f = next;
      uintptr_t ip = (uintptr_t)((void *const *)f)[1];
      if (ip < 4096) break;
      ips[n++] = ip;
    }
  }
  uintptr_t sp = (uintptr_t)(fp + 2);
  size_t len = 0;
  if (sp >= t_stack_lo && sp < t_stack_hi) {
    len = t_stack_hi - sp;
    if (len > g_stack_max) len = g_stack_max;
  }
  size_t bytes = sizeof(ember_alloc_rec_t) + n * sizeof ips[0] + len;
  uint32_t k = (uint32_t)((bytes + EMBER_ALLOC_SHM_CELL - 1) / EMBER_ALLOC_SHM_CELL);
  uint64_t id = reserve_cells(c, k);
  if (id == 0) return 0;
  unsigned char *at = ring_cell(c, id - 1);
  ember_alloc_rec_t *r = (ember_alloc_rec_t *)(void *)at;
  r->ncells = k;
  r->kind = EMBER_ALLOC_REC_SAMPLE;
  r->size = size;
  r->mean = mean;
  r->ptr = (uint64_t)(uintptr_t)p;
  r->tid = t_tid;
  r->nips = n;
  r->stack_len = (uint32_t)len;
  r->ip = ips[1];
  r->sp = sp;
  r->bp = (uint64_t)(uintptr_t)fp[0];
  memcpy(at + sizeof *r, ips, n * sizeof ips[0]);
  if (len > 0) memcpy(at + sizeof *r + n * sizeof ips[0], (const void *)sp, len);
  return id;
}

/* Publish a written record. */
static void publish_record(ember_alloc_shm_t *c, uint64_t id) {
  ember_alloc_rec_t *r = (ember_alloc_rec_t *)(void *)ring_cell(c, id - 1);
  __atomic_store_n(&r->seq, id, __ATOMIC_RELEASE);
}

/* The slow path of the countdown: `size` bytes at `p` took this thread
 * past its stop (t_left had fewer). Reads the control file, and either
 * moves the stop on, or records the sample when the allocation covered
 * the sample point. Out of line and cold so the hooks stay a subtraction
 * and a branch. */
__attribute__((noinline, cold)) static void sample_slow(const void *p, size_t size, void *const *fp,
                                                        uint64_t leaf) {
  /* The countdown wrapped (borrowed): what the allocation took past the
   * stop, modulo 2^64. */
  uint64_t over = 0 - t_left;
  if (t_busy) {
    /* An allocation of the recording itself (pthread_getattr_np): the
     * outer call sets the countdown when it is done. */
    t_left = 0;
    return;
  }
  if (p == NULL) {
    /* A failed allocation does not count (and a huge request must not
     * push the sample point away). */
    t_left = size - over;
    return;
  }
  t_busy = 1;
  ember_alloc_shm_t *c = __atomic_load_n(&g_ctl, __ATOMIC_ACQUIRE);
  uint64_t chunk = CHECK_BYTES;
  if (__atomic_load_n(&c->on, __ATOMIC_RELAXED) == 0) {
    /* Off: look again after CHECK_BYTES, with no sample point drawn. */
    t_mean = 0;
    t_gap = 0;
    goto done;
  }
  uint64_t gen = __atomic_load_n(&c->generation, __ATOMIC_RELAXED);
  /* Bytes to the sample point after this allocation, negative once it
   * covered the point. Allocations are below PTRDIFF_MAX, so int64_t holds
   * these. */
  int64_t left;
  if (t_mean == 0 || t_gen != gen) {
    /* A first draw (new thread, turned on, fork) or a new rate, in force
     * from now: this allocation is the first of the new interval (the
     * exponential's lack of memory lets the old interval end here). */
    uint64_t mean = __atomic_load_n(&c->sample_bytes, __ATOMIC_RELAXED);
    t_mean = mean != 0 ? mean : 1;
    t_gen = gen;
    left = draw_interval(t_mean) - (int64_t)size;
  } else {
    left = (int64_t)t_gap - (int64_t)over;
  }
  if (left < 0) {
    /* One record however many sample points fell inside this allocation:
     * the agent weighs it by the probability that at least one did, at
     * the mean its point was drawn at. The next point is drawn at the
     * rate in force now (an agent that closes its file restores the rate
     * without a new generation). */
    uint64_t mean = t_mean;
    uint64_t now = __atomic_load_n(&c->sample_bytes, __ATOMIC_RELAXED);
    t_mean = now != 0 ? now : 1;
    while (left < 0) left += draw_interval(t_mean);
    if (t_tid == 0) t_tid = (uint32_t)syscall(SYS_gettid);
    if (t_stack_hi == 0) stack_bounds();
    if (agent_alive(c)) {
      uint64_t id = write_record(c, p, size, mean, fp, leaf);
      /* The entry first, then the record's seq: see the header's live
       * table. */
      if (c->heap_sample_bytes != 0) live_insert(c, p, size, mean, id);
      if (id != 0) publish_record(c, id);
    }
  }
  chunk = (uint64_t)left < CHECK_BYTES ? (uint64_t)left : CHECK_BYTES;
  t_gap = (uint64_t)left - chunk;
done:
  t_left = chunk;
  t_busy = 0;
}

/* The hooks' sampling test: count `n` bytes down; true when they took the
 * thread past its stop (then call sample_slow). The borrow of an unsigned
 * subtraction catches any size, however large, in one sub and one jump. */
static inline bool countdown(size_t n) {
  uint64_t left;
  bool past = __builtin_sub_overflow(t_left, (uint64_t)n, &left);
  t_left = left;
  return UNLIKELY(past);
}

/* The real functions are resolved before any hook calls through them (the
 * first_* stand-ins resolve), and a stale first_* is still correct, so a
 * plain load suffices. */
#define REAL(fn) __atomic_load_n(&real_##fn, __ATOMIC_RELAXED)

/* --- the interposed functions --- */

/* malloc, calloc, realloc and free count down first and end in a call of
 * the real function or of their slow path that the compiler makes a jump
 * (sibling call): the hook adds no call, return or stack frame of its own
 * to the allocation. The slow paths get the hook's frame address `fp`: if
 * the hook jumped, the slow path's frame is at that same address with the
 * same saved rbp and return address (the caller's), and if it called, the
 * hook's frame is still there; either way fp[0] and fp[1] are the
 * caller's. */
__attribute__((noinline, cold)) static void *malloc_slow(size_t n, void *const *fp) {
  void *p = REAL(malloc)(n);
  sample_slow(p, n, fp, (uint64_t)(uintptr_t)&malloc);
  return p;
}

API void *malloc(size_t n) {
  if (countdown(n)) return malloc_slow(n, __builtin_frame_address(0));
  return REAL(malloc)(n);
}

__attribute__((noinline, cold)) static void *calloc_slow(size_t a, size_t b, void *const *fp) {
  void *p = REAL(calloc)(a, b);
  sample_slow(p, a * b, fp, (uint64_t)(uintptr_t)&calloc);
  return p;
}

API void *calloc(size_t a, size_t b) {
  /* An overflowing a * b fails (p == NULL), which sample_slow undoes. */
  if (countdown(a * b)) return calloc_slow(a, b, __builtin_frame_address(0));
  return REAL(calloc)(a, b);
}

__attribute__((noinline, cold)) static void *realloc_slow(void *old, size_t n, void *const *fp) {
  void *p = REAL(realloc)(old, n);
  sample_slow(p, n, fp, (uint64_t)(uintptr_t)&realloc);
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
  /* Before the call: once it returns, another thread may be given the old
   * address (and sample it). A failed realloc leaves the old block live
   * and untracked, a small undercount on a rare path. */
  if (old != NULL) maybe_untrack(old);
  if (countdown(n)) return realloc_slow(old, n, __builtin_frame_address(0));
  return REAL(realloc)(old, n);
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
  if (countdown(n)) sample_slow(p, n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&memalign);
  return p;
}

API void *aligned_alloc(size_t align, size_t n) {
  ensure_resolved();
  memalign_fn fn = __atomic_load_n(&real_aligned_alloc, __ATOMIC_ACQUIRE);
  void *p = fn != NULL ? fn(align, n) : NULL;
  if (fn == NULL) errno = ENOMEM;
  if (countdown(n))
    sample_slow(p, n, __builtin_frame_address(0), (uint64_t)(uintptr_t)&aligned_alloc);
  return p;
}

API int posix_memalign(void **out, size_t align, size_t n) {
  ensure_resolved();
  posix_memalign_fn fn = __atomic_load_n(&real_posix_memalign, __ATOMIC_ACQUIRE);
  int rc = fn != NULL ? fn(out, align, n) : ENOMEM;
  if (countdown(n))
    sample_slow(rc == 0 ? *out : NULL, n, __builtin_frame_address(0),
                (uint64_t)(uintptr_t)&posix_memalign);
  return rc;
}

/* free of a pointer the filter marks: a bootstrap allocation (never
 * freed) or maybe a sampled one. */
__attribute__((noinline, cold)) static void free_slow(void *p) {
  if (is_boot(p)) return;
  live_remove(p);
  REAL(free)(p);
}

API void free(void *p) {
  if (UNLIKELY(g_filter[filter_index(p)] != 0)) {
    free_slow(p);
    return;
  }
  REAL(free)(p);
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

/* A decimal number from the environment, at most `max`; unset, empty or
 * malformed = `def` (getenv only: no allocation, no locale). */
static uint64_t env_u64(const char *name, uint64_t def, uint64_t max) {
  const char *s = getenv(name);
  if (s == NULL || *s == '\0') return def;
  uint64_t v = 0;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9' || v > max) return def;
    v = v * 10 + (uint64_t)(*s - '0');
  }
  return v > max ? max : v;
}

#define DEFAULT_HEAP_SAMPLE_BYTES (512u * 1024u)

/* EMBER_HEAP_RING_BYTES rounded down to a power of two within bounds. */
static uint32_t ring_bytes_from_env(void) {
  uint64_t v =
      env_u64("EMBER_HEAP_RING_BYTES", EMBER_ALLOC_SHM_RING_DEFAULT, EMBER_ALLOC_SHM_RING_MAX);
  uint32_t r = EMBER_ALLOC_SHM_RING_MIN;
  while ((uint64_t)r * 2 <= v && r < EMBER_ALLOC_SHM_RING_MAX) r *= 2;
  return r;
}

/* Create and map this process's control file. Failure of any step leaves
 * the library dormant for good, which is harmless. In heap mode the whole
 * file is reserved now (posix_fallocate), so no write to it can fault
 * with SIGBUS on a full /dev/shm; dormant, only the header page is, and
 * the agent reserves the rest before it turns sampling on. */
static void ctl_create(void) {
  pid_t pid = getpid();
  uint64_t rate = env_u64("EMBER_HEAP_SAMPLE_BYTES", DEFAULT_HEAP_SAMPLE_BYTES, 1ULL << 40);
  g_ring_bytes = ring_bytes_from_env();
  g_stack_max = (uint32_t)env_u64("EMBER_HEAP_STACK_BYTES", EMBER_ALLOC_SHM_STACK_DEFAULT,
                                  EMBER_ALLOC_SHM_STACK_MAX) &
                ~7u;
  size_t size = EMBER_ALLOC_SHM_SIZE(g_ring_bytes);
  make_path(pid);
  /* A stale file of a dead process with our pid, or of our image before
   * exec: replace it. An agent that still reads the old one keeps its inode. */
  unlink(g_path);
  int fd = open(g_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  void *m = MAP_FAILED;
  off_t reserve = rate != 0 ? (off_t)size : (off_t)EMBER_ALLOC_SHM_HDR;
  if (ftruncate(fd, (off_t)size) == 0 && posix_fallocate(fd, 0, reserve) == 0)
    m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    unlink(g_path);
    g_path[0] = '\0';
    return;
  }
  ember_alloc_shm_t *c = m;
  c->version = EMBER_ALLOC_SHM_VERSION;
  c->hdr_size = EMBER_ALLOC_SHM_HDR;
  c->nlive = EMBER_ALLOC_SHM_LIVE;
  c->ring_bytes = g_ring_bytes;
  c->stack_max = g_stack_max;
  c->pid = (int32_t)pid;
  c->heap_sample_bytes = rate;
  c->sample_bytes = rate;
  c->generation = 1;
  c->on = rate != 0;
  __atomic_store_n(&c->magic, EMBER_ALLOC_SHM_MAGIC, __ATOMIC_RELEASE);
  __atomic_store_n(&g_ctl, c, __ATOMIC_RELEASE);
  /* This thread's countdown ran against the placeholder header (off):
   * start it again, so sampling starts with its next allocation. */
  t_left = 0;
  t_mean = 0;
}

/* The child of fork must not write into its parent's ring: it gets a file
 * of its own (only the forking thread exists in it). What the parent had
 * live is not tracked in the child (its table starts empty, and so does
 * the filter). */
static void on_fork_child(void) {
  ember_alloc_shm_t *old = __atomic_load_n(&g_ctl, __ATOMIC_RELAXED);
  __atomic_store_n(&g_ctl, &g_dummy, __ATOMIC_RELEASE);
  if (old != &g_dummy) munmap(old, EMBER_ALLOC_SHM_SIZE(g_ring_bytes));
  memset(g_filter, 0, sizeof g_filter);
  boot_mark(0, g_boot_used < sizeof g_boot ? g_boot_used : sizeof g_boot);
  t_tid = 0;
  t_left = 0;
  t_gap = 0;
  t_mean = 0;
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
