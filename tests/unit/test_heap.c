/* The always-on in-use heap (agent/heap.h, agent/heapshm.h and
 * preload/ember_alloc.c) against real processes: tests/programs/heapgrow,
 * built with frame pointers and without (heapgrow_nofp, unwound from CFI),
 * and control files made hostile by hand. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../preload/ember_alloc_shm.h"
#include "common/testutil.h"
#include "heap.h"
#include "heapshm.h"
#include "procmaps.h"
#include "symbolize.h"
#include "unwtab.h"

#define PROG_FP   EMBER_TEST_PROGRAMS "/heapgrow"
#define PROG_NOFP EMBER_TEST_PROGRAMS "/heapgrow_nofp"
#define PRELOAD   "LD_PRELOAD=" EMBER_BINARY_DIR "/preload/libember_alloc.so"
#define MIB       (1024.0 * 1024.0)

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The unwinder the agent gives the tracker: CFI over the process's maps. */
typedef struct fixture {
  pid_t pid;
  ember__unwtab_t *unw;
  ember__procmaps_t *maps;
  ember__symbolizer_t *sym;
  ember__heap_t *heap;
  char log[256];
  char steps[256]; /* heapgrow leak's count of leak_step calls (HEAPGROW_STEPS) */
} fixture_t;

/* How many leak_step calls heapgrow leak has made. */
static uint64_t leak_steps(const fixture_t *f) {
  uint64_t n = 0;
  FILE *fp = fopen(f->steps, "rb");
  if (fp != NULL) {
    if (fread(&n, sizeof n, 1, fp) != 1) n = 0;
    fclose(fp);
  }
  return n;
}

static size_t unwind_cb(void *ctx, uint32_t pid, const ember__unwind_regs_t *regs,
                        const uint8_t *stack, size_t len, uint64_t *ips, size_t cap) {
  fixture_t *f = ctx;
  assert_int_equal(pid, (uint32_t)f->pid);
  if (f->maps == NULL || !ember__procmaps_covers(f->maps, regs->ip)) {
    ember__procmaps_free(f->maps);
    f->maps = NULL;
    if (ember__procmaps_read(NULL, f->pid, &f->maps) != 0) return 0;
  }
  return ember__unwtab_unwind(f->unw, f->maps, regs, stack, len, ips, cap);
}

static bool log_says(const char *path, const char *what) {
  char buf[4096];
  FILE *fp = fopen(path, "r");
  if (fp == NULL) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, fp);
  fclose(fp);
  buf[n] = '\0';
  return strstr(buf, what) != NULL;
}

/* Start argv (its last word the mode) with the library at `rate` bytes
 * (NULL: its default; preload false: not through LD_PRELOAD), wait for its
 * "ready" and its control file, and follow it. */
static void start_argv(fixture_t *f, const char *const *argv, bool preload, const char *rate) {
  memset(f, 0, sizeof *f);
  snprintf(f->log, sizeof f->log, EMBER_TEST_TMP "/heap-%d.log", (int)getpid());
  unlink(f->log);
  snprintf(f->steps, sizeof f->steps, EMBER_TEST_TMP "/heap-%d.steps", (int)getpid());
  unlink(f->steps);
  char env_rate[64], env_steps[600];
  const char *env[4] = {NULL, NULL, NULL, NULL};
  int ne = 0;
  if (preload) env[ne++] = PRELOAD;
  if (rate != NULL) {
    snprintf(env_rate, sizeof env_rate, "EMBER_HEAP_SAMPLE_BYTES=%s", rate);
    env[ne++] = env_rate;
  }
  snprintf(env_steps, sizeof env_steps, "HEAPGROW_STEPS=%s", f->steps);
  env[ne++] = env_steps;
  f->pid = tu_spawn(argv, env, f->log);
  assert_true(f->pid > 0);
  for (int i = 0; i < 1000 && !(log_says(f->log, "ready") && ember__heapshm_present(f->pid)); i++)
    sleep_ms(10);
  assert_true(log_says(f->log, "ready"));
  assert_true(ember__heapshm_present(f->pid));
  ember__unwtab_opts_t uo = {0};
  assert_int_equal(ember__unwtab_new(&uo, &f->unw), 0);
  ember__symbolizer_opts_t so = {0};
  assert_int_equal(ember__symbolizer_new(&so, &f->sym), 0);
  ember__heap_opts_t ho = {.unwind = unwind_cb, .ctx = f};
  assert_int_equal(ember__heap_new(&ho, &f->heap), 0);
  char err[512];
  int rc = ember__heap_attach(f->heap, f->pid, err, sizeof err);
  if (rc != 0) fail_msg("attach: %d %s", rc, err);
  assert_true(ember__heap_follows(f->heap, f->pid));
}

static void start(fixture_t *f, const char *prog, const char *mode, const char *rate) {
  const char *argv[] = {prog, mode, NULL};
  start_argv(f, argv, true, rate);
}

static void finish(fixture_t *f) {
  tu_kill(f->pid);
  ember__heap_free(f->heap);
  ember__symbolizer_free(f->sym);
  ember__unwtab_free(f->unw);
  ember__procmaps_free(f->maps);
  ember__heapshm_sweep();
}

/* What a window holds for the stacks through function `fn`: objects and
 * bytes, each stack once; *deep counts the bytes of those stacks that
 * reach main (a whole stack). */
typedef struct sum {
  double objects, bytes, deep, all_objects, all_bytes;
} sum_t;

static sum_t through(fixture_t *f, ember__window_t *w, const char *fn) {
  sum_t s = {0};
  size_t n = 0;
  const ember__window_stack_t *st = ember__window_sorted(w, &n);
  if (f->maps == NULL) assert_int_equal(ember__procmaps_read(NULL, f->pid, &f->maps), 0);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(st[i].pid, (uint32_t)f->pid);
    s.all_objects += (double)st[i].samples;
    s.all_bytes += (double)st[i].cpu_ns;
    ember_frame_t frames[256];
    size_t nf = 0;
    if (st[i].nips == 1 && st[i].ips[0] == EMBER__HEAP_UNKNOWN_IP) continue;
    assert_int_equal(
        ember__symbolize(f->sym, f->pid, f->maps, st[i].ips, st[i].nips, frames, 256, &nf), 0);
    bool hit = false, has_main = false;
    for (size_t k = 0; k < nf; k++) {
      const char *name = frames[k].function;
      if (name == NULL) continue;
      if (strcmp(name, fn) == 0) hit = true;
      if (strcmp(name, "main") == 0) has_main = true;
    }
    if (!hit) continue;
    s.objects += (double)st[i].samples;
    s.bytes += (double)st[i].cpu_ns;
    if (has_main) s.deep += (double)st[i].cpu_ns;
  }
  return s;
}

/* Bytes of the stacks whose leaf frame is `fn` (the allocating function,
 * not the allocator). */
static double leaf_is(fixture_t *f, ember__window_t *w, const char *fn) {
  double bytes = 0;
  size_t n = 0;
  const ember__window_stack_t *st = ember__window_sorted(w, &n);
  for (size_t i = 0; i < n; i++) {
    ember_frame_t frames[256];
    size_t nf = 0;
    if (st[i].nips == 1 && st[i].ips[0] == EMBER__HEAP_UNKNOWN_IP) continue;
    assert_int_equal(
        ember__symbolize(f->sym, f->pid, f->maps, st[i].ips, st[i].nips, frames, 256, &nf), 0);
    if (nf > 0 && frames[0].function != NULL && strcmp(frames[0].function, fn) == 0)
      bytes += (double)st[i].cpu_ns;
  }
  return bytes;
}

static ember__window_t *new_window(void) {
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  return w;
}

/* 64 MiB allocated at startup, before anyone read the ring, and kept: the
 * in-use snapshot shows it under startup_alloc, with whole stacks; what
 * is allocated meanwhile is churn's. At 64 KiB a sample, 1024 blocks of
 * 64 KiB give ~650 samples: the estimate's sd is 2.4%, so ±10% is past
 * four sigma. */
static void startup_case(const char *prog) {
  fixture_t f;
  start(&f, prog, "startup", "65536");
  ember__window_t *alloc = new_window(), *inuse = new_window();
  ember__heap_set_window(f.heap, alloc);
  for (int i = 0; i < 15; i++) {
    ember__heap_poll(f.heap, 0);
    sleep_ms(100);
  }
  size_t npids = 0;
  uint32_t pids[4];
  assert_int_equal(ember__heap_snapshot(f.heap, inuse, pids, 4, &npids), 0);
  assert_int_equal(npids, 1);
  assert_int_equal(pids[0], (uint32_t)f.pid);
  sum_t s = through(&f, inuse, "startup_alloc");
  print_message("%s: in use %.2f MiB under startup_alloc (%.2f MiB reaching main), %.2f MiB in "
                "all\n",
                prog, s.bytes / MIB, s.deep / MIB, s.all_bytes / MIB);
  assert_true(s.bytes >= 0.9 * 64 * MIB && s.bytes <= 1.1 * 64 * MIB);
  assert_true(s.deep >= 0.99 * s.bytes);
  assert_true(leaf_is(&f, inuse, "startup_alloc") >= 0.99 * s.bytes);
  /* The allocations of the window: churn's, by far (the startup's were
   * made before the window was set, into no window). */
  sum_t c = through(&f, alloc, "churn");
  print_message("%s: allocated during the window: churn %.0f of %.0f objects\n", prog, c.objects,
                c.all_objects);
  assert_true(c.objects > 0.95 * c.all_objects && c.objects > 1000);
  assert_true(through(&f, alloc, "startup_alloc").objects < 0.01 * c.objects);
  ember__heap_stats_t st;
  ember__heap_stats(f.heap, &st);
  assert_int_equal(st.processes, 1);
  assert_int_equal(st.bad, 0);
  assert_int_equal(st.lost, 0);
  assert_true(st.unknown == 0);
  ember__window_free(alloc);
  ember__window_free(inuse);
  finish(&f);
}

static void test_heap_startup(void **state) {
  (void)state;
  startup_case(PROG_FP);
}

static void test_heap_startup_nofp(void **state) {
  (void)state;
  startup_case(PROG_NOFP);
}

/* 1 MiB/s leaked in leak_step, among steady allocations that are freed:
 * the in-use growth between two snapshots ~8 s apart is leak_step's,
 * within 20% of what the program leaked in between (at 64 KiB a sample,
 * ~330 samples: sd 4.3%). The truth is the program's own count of its
 * leak_step calls, read right after each snapshot's poll: on a loaded
 * machine the program falls behind its 1 MiB/s and catches up in a burst,
 * so the wall clock is not the truth (a CI run measured 1.28 MiB/s that
 * way; the program had leaked as much). */
static void leak_case(const char *prog) {
  fixture_t f;
  start(&f, prog, "leak", "65536");
  ember__window_t *a = new_window(), *b = new_window();
  sleep_ms(500);
  ember__heap_poll(f.heap, 0);
  uint64_t na = leak_steps(&f);
  assert_int_equal(ember__heap_snapshot(f.heap, a, NULL, 0, NULL), 0);
  double t0 = now_s();
  for (int i = 0; i < 80; i++) {
    ember__heap_poll(f.heap, 0);
    sleep_ms(100);
  }
  ember__heap_poll(f.heap, 0);
  uint64_t nb = leak_steps(&f);
  assert_int_equal(ember__heap_snapshot(f.heap, b, NULL, 0, NULL), 0);
  double secs = now_s() - t0;
  sum_t sa = through(&f, a, "leak_step"), sb = through(&f, b, "leak_step");
  sum_t qa = through(&f, a, "steady"), qb = through(&f, b, "steady");
  double truth = (double)(nb - na) * 64 * 1024;
  assert_true(nb > na + 64); /* 4 s of the program's 8 at the least */
  double rate = (sb.bytes - sa.bytes) / secs / MIB, ratio = (sb.bytes - sa.bytes) / truth;
  print_message("%s: leak_step %.2f -> %.2f MiB in %.1f s: %.3f MiB/s; the program leaked %.2f "
                "MiB (%.3f MiB/s): measured/true %.3f; steady %.3f -> %.3f MiB\n",
                prog, sa.bytes / MIB, sb.bytes / MIB, secs, rate, truth / MIB, truth / secs / MIB,
                ratio, qa.bytes / MIB, qb.bytes / MIB);
  ember__heap_stats_t st;
  ember__heap_stats(f.heap, &st);
  print_message("records %llu lost %llu bad %llu unknown %llu untracked %llu stacks %llu\n",
                (unsigned long long)st.records, (unsigned long long)st.lost,
                (unsigned long long)st.bad, (unsigned long long)st.unknown,
                (unsigned long long)st.live_dropped, (unsigned long long)st.stacks);
  assert_true(ratio >= 0.8 && ratio <= 1.2);
  assert_true(sb.deep >= 0.99 * sb.bytes);
  /* What steady allocates is freed again: it holds (almost) nothing. */
  assert_true(qb.bytes < 0.05 * sb.bytes);
  ember__window_free(a);
  ember__window_free(b);
  finish(&f);
}

static void test_heap_leak(void **state) {
  (void)state;
  leak_case(PROG_FP);
}

static void test_heap_leak_nofp(void **state) {
  (void)state;
  leak_case(PROG_NOFP);
}

/* Without EMBER_HEAP_SAMPLE_BYTES the library samples at 512 KiB from
 * the start: 1024 blocks of 64 KiB are ~120 samples, the estimate within
 * 30% (3 sd). */
static void test_heap_default_rate(void **state) {
  (void)state;
  fixture_t f;
  start(&f, PROG_FP, "startup", NULL);
  ember__window_t *inuse = new_window();
  assert_int_equal(ember__heap_snapshot(f.heap, inuse, NULL, 0, NULL), 0);
  sum_t s = through(&f, inuse, "startup_alloc");
  print_message("default rate: %.2f MiB under startup_alloc\n", s.bytes / MIB);
  assert_true(s.bytes >= 0.7 * 64 * MIB && s.bytes <= 1.3 * 64 * MIB);
  ember__window_free(inuse);
  finish(&f);
}

/* --- hostile control files --- */

static void file_of(pid_t pid, char *path, size_t n) {
  snprintf(path, n, "/dev/shm/ember-alloc.%d", (int)pid);
}

static bool is_stopped(pid_t pid) {
  char st;
  int ppid;
  return tu_proc_state(pid, &st, &ppid) && (st == 'T' || st == 't');
}

/* Stop the program (and wait until it is: SIGSTOP is not taken at once)
 * and open its control file as the program could (to write lies into
 * it); *h gets its header. Returns the descriptor. */
static int open_stopped(const fixture_t *f, ember_alloc_shm_t *h) {
  char path[64];
  kill(f->pid, SIGSTOP);
  for (int k = 0; k < 200 && !is_stopped(f->pid); k++) sleep_ms(1);
  assert_true(is_stopped(f->pid));
  file_of(f->pid, path, sizeof path);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, h, sizeof *h, 0), (ssize_t)sizeof *h);
  return fd;
}

static void pwrite_u64(int fd, off_t off, uint64_t v) {
  assert_int_equal(pwrite(fd, &v, sizeof v, off), (ssize_t)sizeof v);
}

/* A process writing lies into its ring and live table: refused records
 * and entries are counted, the rest still read, nothing trusted. */
static void test_heap_hostile_records(void **state) {
  (void)state;
  fixture_t f;
  start(&f, PROG_FP, "startup", "65536");
  ember_alloc_shm_t h;
  int fd = open_stopped(&f, &h);
  /* A live entry of size 0 and one of mean 0: refused. */
  ember_alloc_live_t bad[2] = {{0x7000001000ULL, 0, 65536, 0}, {0x7000002000ULL, 4096, 0, 0}};
  assert_int_equal(pwrite(fd, bad, sizeof bad, (off_t)(EMBER_ALLOC_SHM_LIVE_OFF + 8 * 32)),
                   (ssize_t)sizeof bad);
  /* A record at the tail claiming more cells than the ring holds. */
  uint64_t cell = h.tail % (h.ring_bytes / EMBER_ALLOC_SHM_CELL);
  off_t at = (off_t)(EMBER_ALLOC_SHM_RING_OFF + cell * EMBER_ALLOC_SHM_CELL);
  ember_alloc_rec_t r;
  assert_int_equal(pread(fd, &r, sizeof r, at), (ssize_t)sizeof r);
  bool had_record = h.head != h.tail;
  if (had_record) {
    r.ncells = h.ring_bytes; /* far past the ring */
    assert_int_equal(pwrite(fd, &r, sizeof r, at), (ssize_t)sizeof r);
  }
  ember__window_t *w = new_window();
  assert_int_equal(ember__heap_snapshot(f.heap, w, NULL, 0, NULL), 0);
  ember__heap_stats_t st;
  ember__heap_stats(f.heap, &st);
  print_message("refused %llu, read %llu, unknown %llu\n", (unsigned long long)st.bad,
                (unsigned long long)st.records, (unsigned long long)st.unknown);
  assert_true(st.bad >= 2 + (had_record ? 1 : 0));
  /* The records after an untrusted length were skipped: their entries
   * are live with an unknown stack, still counted. */
  assert_true(ember__heap_follows(f.heap, f.pid));
  sum_t s = through(&f, w, "startup_alloc");
  assert_true(s.all_bytes >= 0.9 * 64 * MIB && s.all_bytes <= 1.1 * 64 * MIB);
  /* Counters going backwards: the file is a liar from now on. */
  uint64_t faults = ember__heapshm_faults();
  pwrite_u64(fd, (off_t)offsetof(ember_alloc_shm_t, head), 0);
  ember__heap_poll(f.heap, 0);
  assert_int_equal(ember__heapshm_faults(), faults + 1);
  assert_false(ember__heap_follows(f.heap, f.pid));
  close(fd);
  ember__window_free(w);
  kill(f.pid, SIGCONT);
  finish(&f);
}

/* A one-cell pad record in the ring's last cell (64 bytes before the
 * file's end, less than a record's head) is read as what it is, not as
 * a short read of a lying file. */
static void test_heap_pad_at_ring_end(void **state) {
  (void)state;
  fixture_t f;
  start(&f, PROG_FP, "startup", "65536");
  ember__heap_detach(f.heap, f.pid);
  char err[512];
  ember_alloc_shm_t h;
  int fd = open_stopped(&f, &h);
  uint64_t ncells = h.ring_bytes / EMBER_ALLOC_SHM_CELL;
  uint64_t t = ncells * 4 - 1; /* the last cell, some laps on */
  ember_alloc_rec_t pad = {.seq = t + 1, .ncells = 1, .kind = EMBER_ALLOC_REC_PAD};
  assert_int_equal(pwrite(fd, &pad, EMBER_ALLOC_SHM_CELL,
                          (off_t)(EMBER_ALLOC_SHM_RING_OFF + (ncells - 1) * EMBER_ALLOC_SHM_CELL)),
                   (ssize_t)EMBER_ALLOC_SHM_CELL);
  pwrite_u64(fd, (off_t)offsetof(ember_alloc_shm_t, tail), t);
  pwrite_u64(fd, (off_t)offsetof(ember_alloc_shm_t, head), t + 1);
  uint64_t faults = ember__heapshm_faults();
  assert_int_equal(ember__heap_attach(f.heap, f.pid, err, sizeof err), 0);
  ember__heap_poll(f.heap, 0);
  assert_int_equal(ember__heapshm_faults(), faults);
  assert_true(ember__heap_follows(f.heap, f.pid));
  uint64_t tail = 0;
  assert_int_equal(pread(fd, &tail, sizeof tail, (off_t)offsetof(ember_alloc_shm_t, tail)),
                   (ssize_t)sizeof tail);
  assert_int_equal(tail, t + 1);
  close(fd);
  kill(f.pid, SIGCONT);
  finish(&f);
}

/* Headers that lie: a forged pid, another version, a ring size that is
 * not the file's; a cut file. None is opened, or read once cut. */
static void test_heap_hostile_headers(void **state) {
  (void)state;
  fixture_t f;
  start(&f, PROG_FP, "startup", "65536");
  ember__heap_detach(f.heap, f.pid);
  char err[512];
  ember_alloc_shm_t h;
  int fd = open_stopped(&f, &h);
  struct {
    size_t off;
    uint32_t v;
  } lies[] = {{offsetof(ember_alloc_shm_t, pid), (uint32_t)f.pid + 1},
              {offsetof(ember_alloc_shm_t, version), 1},
              {offsetof(ember_alloc_shm_t, ring_bytes), h.ring_bytes * 2},
              {offsetof(ember_alloc_shm_t, ring_bytes), h.ring_bytes + 64},
              {offsetof(ember_alloc_shm_t, stack_max), EMBER_ALLOC_SHM_STACK_MAX + 8}};
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    uint32_t old;
    assert_int_equal(pread(fd, &old, sizeof old, (off_t)lies[i].off), (ssize_t)sizeof old);
    assert_int_equal(pwrite(fd, &lies[i].v, sizeof lies[i].v, (off_t)lies[i].off),
                     (ssize_t)sizeof lies[i].v);
    assert_false(ember__heapshm_present(f.pid));
    assert_int_equal(ember__heap_attach(f.heap, f.pid, err, sizeof err), -EPROTO);
    assert_int_equal(pwrite(fd, &old, sizeof old, (off_t)lies[i].off), (ssize_t)sizeof old);
  }
  assert_int_equal(ember__heap_attach(f.heap, f.pid, err, sizeof err), 0);
  /* Cut while followed: a fault, counted once, no SIGBUS anywhere. */
  uint64_t faults = ember__heapshm_faults();
  assert_int_equal(ftruncate(fd, 4096), 0);
  ember__window_t *w = new_window();
  ember__heap_snapshot(f.heap, w, NULL, 0, NULL);
  ember__heap_poll(f.heap, 0);
  assert_int_equal(ember__heapshm_faults(), faults + 1);
  assert_false(ember__heap_follows(f.heap, f.pid));
  assert_false(ember__heapshm_present(f.pid));
  close(fd);
  ember__window_free(w);
  finish(&f);
}

/* The program stopped between two records (none half written) and all
 * its published records read: *h is its header then. Returns the file's
 * descriptor. */
static int stop_between_records(fixture_t *f, ember_alloc_shm_t *h) {
  for (int i = 0; i < 200; i++) {
    int fd = open_stopped(f, h);
    ember__heap_poll(f->heap, 0);
    assert_int_equal(pread(fd, h, sizeof *h, 0), (ssize_t)sizeof *h);
    if (h->head == h->tail) return fd;
    close(fd);
    kill(f->pid, SIGCONT);
    sleep_ms(1);
  }
  fail_msg("the program never stopped between two records");
  return -1;
}

/* The bytes of the stacks of `w` that are exactly `ips`. */
static double bytes_of_stack(ember__window_t *w, const uint64_t *ips, size_t n) {
  size_t ns = 0;
  double bytes = 0;
  const ember__window_stack_t *st = ember__window_sorted(w, &ns);
  for (size_t i = 0; i < ns; i++) {
    if (st[i].nips == n && memcmp(st[i].ips, ips, n * sizeof *ips) == 0)
      bytes += (double)st[i].cpu_ns;
  }
  return bytes;
}

/* The library takes a live entry before it publishes the entry's record,
 * so a busy process always has a few entries whose record is not in the
 * ring yet. A snapshot that comes between counts such an entry as in
 * flight, not as unknown (its bytes under [unknown]); once the record is
 * published, the entry is under the record's stack. Written here by hand
 * into a stopped program's file, as its library would. */
static void test_heap_in_flight(void **state) {
  (void)state;
  fixture_t f;
  start(&f, PROG_FP, "startup", "65536");
  ember_alloc_shm_t h;
  int fd = stop_between_records(&f, &h);
  uint64_t ncells = h.ring_bytes / EMBER_ALLOC_SHM_CELL, t = h.head;
  if (t % ncells == ncells - 1) { /* a two-cell record would cross the end: pad it */
    ember_alloc_rec_t pad = {.seq = t + 1, .ncells = 1, .kind = EMBER_ALLOC_REC_PAD};
    assert_int_equal(
        pwrite(fd, &pad, EMBER_ALLOC_SHM_CELL,
               (off_t)(EMBER_ALLOC_SHM_RING_OFF + (ncells - 1) * EMBER_ALLOC_SHM_CELL)),
        (ssize_t)EMBER_ALLOC_SHM_CELL);
    t++;
  }
  off_t cell = (off_t)(EMBER_ALLOC_SHM_RING_OFF + (t % ncells) * EMBER_ALLOC_SHM_CELL);
  /* The entry, in a free slot, naming the record at ticket t. */
  ember_alloc_live_t e = {0x7000005000ULL, 256 * 1024, 65536, t + 1}, slot;
  off_t at = (off_t)EMBER_ALLOC_SHM_LIVE_OFF;
  for (;; at += (off_t)sizeof slot) {
    assert_true(at < (off_t)EMBER_ALLOC_SHM_RING_OFF);
    assert_int_equal(pread(fd, &slot, sizeof slot, at), (ssize_t)sizeof slot);
    if (slot.ptr == 0) break;
  }
  assert_int_equal(pwrite(fd, &e, sizeof e, at), (ssize_t)sizeof e);
  /* Two cells reserved, nothing published in them yet. */
  pwrite_u64(fd, cell, 0);
  pwrite_u64(fd, (off_t)offsetof(ember_alloc_shm_t, head), t + 2);
  ember__window_t *w1 = new_window(), *w2 = new_window();
  assert_int_equal(ember__heap_snapshot(f.heap, w1, NULL, 0, NULL), 0);
  ember__heap_stats_t st;
  ember__heap_stats(f.heap, &st);
  assert_int_equal(st.in_flight, 1);
  assert_int_equal(st.unknown, 0);
  const uint64_t unknown_ip = EMBER__HEAP_UNKNOWN_IP;
  assert_true(bytes_of_stack(w1, &unknown_ip, 1) >= 256 * 1024);
  /* The record, published (its seq last): the entry has its stack. */
  struct {
    ember_alloc_rec_t head;
    uint64_t ips[2];
    unsigned char pad[2 * EMBER_ALLOC_SHM_CELL - sizeof(ember_alloc_rec_t) - 16];
  } rec = {.head = {.ncells = 2,
                    .kind = EMBER_ALLOC_REC_SAMPLE,
                    .size = e.size,
                    .mean = e.mean,
                    .ptr = e.ptr,
                    .nips = 2,
                    .ip = 0x4242},
           .ips = {0x1111, 0x4242}};
  assert_int_equal(pwrite(fd, &rec, sizeof rec, cell), (ssize_t)sizeof rec);
  pwrite_u64(fd, cell, t + 1);
  assert_int_equal(ember__heap_snapshot(f.heap, w2, NULL, 0, NULL), 0);
  ember__heap_stats(f.heap, &st);
  assert_int_equal(st.in_flight, 0);
  assert_int_equal(st.unknown, 0);
  const uint64_t leaf = 0x4241; /* the return address - 1 */
  assert_true(bytes_of_stack(w2, &leaf, 1) >= 256 * 1024);
  assert_true(bytes_of_stack(w2, &unknown_ip, 1) == 0);
  close(fd);
  ember__window_free(w1);
  ember__window_free(w2);
  kill(f.pid, SIGCONT);
  finish(&f);
}

/* A second reader of the same file (another agent) is refused. */
static void test_heap_one_reader(void **state) {
  (void)state;
  fixture_t f;
  start(&f, PROG_FP, "startup", "65536");
  ember__heap_t *other = NULL;
  assert_int_equal(ember__heap_new(NULL, &other), 0);
  char err[512];
  assert_int_equal(ember__heap_attach(other, f.pid, err, sizeof err), -EBUSY);
  assert_true(strstr(err, "another agent") != NULL);
  assert_int_equal(ember__heap_attach(f.heap, f.pid, err, sizeof err), -EEXIST);
  ember__heap_free(other);
  /* The process ends: no longer followed after the next poll. */
  tu_kill(f.pid);
  ember__heap_poll(f.heap, 0);
  assert_false(ember__heap_follows(f.heap, f.pid));
  finish(&f);
}

/* A container: the process has a /dev/shm of its own (a mount namespace
 * with its own tmpfs), which the host's /dev/shm does not show. The file
 * is found and read through /proc/PID/root. */
static void test_heap_own_dev_shm(void **state) {
  (void)state;
  const char *argv[] = {"/usr/bin/unshare",
                        "-m",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        "mount -t tmpfs -o size=64m tmpfs /dev/shm && exec env \"$1\" \"$0\" "
                        "startup",
                        PROG_FP,
                        PRELOAD,
                        NULL};
  /* Only the program is preloaded (unshare and sh would leave files of
   * their own in the host's /dev/shm: exec runs no exit handler). */
  fixture_t f;
  start_argv(&f, argv, false, "65536");
  char path[64];
  file_of(f.pid, path, sizeof path);
  assert_int_equal(access(path, F_OK), -1);
  ember__window_t *inuse = new_window();
  assert_int_equal(ember__heap_snapshot(f.heap, inuse, NULL, 0, NULL), 0);
  sum_t s = through(&f, inuse, "startup_alloc");
  assert_true(s.bytes >= 0.9 * 64 * MIB && s.bytes <= 1.1 * 64 * MIB);
  ember__window_free(inuse);
  finish(&f);
}

/* /etc/ld.so.preload (here bind-mounted in this test's own mount
 * namespace): a program started without LD_PRELOAD has the library. */
static void test_heap_ld_so_preload(void **state) {
  (void)state;
  if (tu_private_mounts() != 0) {
    print_message("skipped: no private mount namespace (not root)\n");
    return;
  }
  const char *list = EMBER_TEST_TMP "/ld.so.preload";
  FILE *fp = fopen(list, "w");
  assert_non_null(fp);
  fprintf(fp, "%s/preload/libember_alloc.so\n", EMBER_BINARY_DIR);
  fclose(fp);
  int fd = open("/etc/ld.so.preload", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
  assert_int_equal(mount(list, "/etc/ld.so.preload", NULL, MS_BIND, NULL), 0);
  fixture_t f;
  const char *argv[] = {PROG_FP, "startup", NULL};
  start_argv(&f, argv, false, "65536");
  ember__window_t *inuse = new_window();
  assert_int_equal(ember__heap_snapshot(f.heap, inuse, NULL, 0, NULL), 0);
  sum_t s = through(&f, inuse, "startup_alloc");
  assert_true(s.bytes >= 0.9 * 64 * MIB && s.bytes <= 1.1 * 64 * MIB);
  ember__window_free(inuse);
  finish(&f);
  assert_int_equal(umount2("/etc/ld.so.preload", 0), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_heap_startup),
      cmocka_unit_test(test_heap_startup_nofp),
      cmocka_unit_test(test_heap_leak),
      cmocka_unit_test(test_heap_leak_nofp),
      cmocka_unit_test(test_heap_default_rate),
      cmocka_unit_test(test_heap_hostile_records),
      cmocka_unit_test(test_heap_hostile_headers),
      cmocka_unit_test(test_heap_in_flight),
      cmocka_unit_test(test_heap_one_reader),
      cmocka_unit_test(test_heap_pad_at_ring_end),
      cmocka_unit_test(test_heap_own_dev_shm),
      cmocka_unit_test(test_heap_ld_so_preload),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
