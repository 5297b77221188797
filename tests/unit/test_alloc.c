/* Allocation sessions (agent/alloc.h), both methods, against a real
 * process: tests/programs/alloc, whose alloc_big and alloc_small allocate
 * bytes 3:1. The preload method runs it with libember_alloc.so. */
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
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "../preload/ember_alloc_shm.h"
#include "common/testutil.h"
#include "symbolize.h"

#define ALLOC_PROG EMBER_TEST_PROGRAMS "/alloc"
#define PRELOAD    "LD_PRELOAD=" EMBER_BINARY_DIR "/preload/libember_alloc.so"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static bool maps_libc(pid_t pid) {
  char path[64], line[4096];
  snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
  FILE *f = fopen(path, "r");
  bool found = false;
  if (f == NULL) return false;
  while (!found && fgets(line, sizeof line, f) != NULL) found = strstr(line, "/libc.so") != NULL;
  fclose(f);
  return found;
}

/* Wait until `pid` runs the alloc program with libc loaded (tu_spawn
 * returns before exec, and ld.so maps libc after that), and with the
 * preload library, until its control file is there. */
static void wait_ready(pid_t pid, bool preload) {
  char path[64], exe[4096];
  snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
  for (int i = 0; i < 400; i++) {
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n > 0) {
      exe[n] = '\0';
      if (strstr(exe, "/alloc") != NULL && maps_libc(pid) &&
          (!preload || ember__alloc_preload_present(pid)))
        return;
    }
    sleep_ms(5);
  }
  fail_msg("process %d never became ready", (int)pid);
}

typedef struct tally {
  ember__symbolizer_t *sym;
  ember__procmaps_t *maps;
  pid_t pid;
  int64_t big_bytes, small_bytes, big_objects, small_objects, other_bytes;
} tally_t;

static void on_stack(void *ctx, const uint64_t *ips, size_t n, int64_t objects, int64_t bytes) {
  tally_t *t = ctx;
  ember_frame_t frames[256];
  size_t nf = 0;
  assert_true(n >= 1 && n <= EMBER__ALLOC_MAX_FRAMES);
  assert_int_equal(ember__symbolize(t->sym, t->pid, t->maps, ips, n, frames, 256, &nf), 0);
  for (size_t i = 0; i < nf; i++) {
    const char *fn = frames[i].function;
    if (fn == NULL) continue;
    if (strcmp(fn, "alloc_big") == 0) {
      t->big_bytes += bytes;
      t->big_objects += objects;
      return;
    }
    if (strcmp(fn, "alloc_small") == 0) {
      t->small_bytes += bytes;
      t->small_objects += objects;
      return;
    }
  }
  t->other_bytes += bytes;
}

/* A session adds into a window (alloc.h): hand each of its stacks of
 * `pid` to `fn` with the objects and bytes it holds. Returns how many. */
static size_t each_stack(ember__window_t *w, pid_t pid,
                         void (*fn)(void *ctx, const uint64_t *ips, size_t n, int64_t objects,
                                    int64_t bytes),
                         void *ctx) {
  size_t n = 0, found = 0;
  const ember__window_stack_t *st = ember__window_sorted(w, &n);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(st[i].pid, (uint32_t)pid);
    found++;
    if (fn != NULL) fn(ctx, st[i].ips, st[i].nips, st[i].samples, st[i].cpu_ns);
  }
  return found;
}

/* A stack the session tells is new to the window: counted. */
typedef struct news {
  pid_t pid;
  size_t n;
} news_t;

static void on_new(void *ctx, uint32_t pid, const uint64_t *ips, uint32_t n) {
  news_t *nw = ctx;
  assert_int_equal(pid, (uint32_t)nw->pid);
  assert_true(n >= 1 && n <= EMBER__ALLOC_MAX_FRAMES && ips != NULL);
  nw->n++;
}

static ember__window_t *new_window(void) {
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  return w;
}

/* Run the program at a steady pace, profile it for ~1.5 s, check 3:1.
 * via: NULL, or the function alloc_big allocates with (tests/programs/alloc.c,
 * ALLOC_VIA). */
static void profile_and_check(ember__alloc_method_t m, uint64_t sample_bytes, const char *via) {
  const char *argv[] = {ALLOC_PROG, "6", "20", NULL};
  const char *env[3] = {NULL, NULL, NULL};
  char via_env[64];
  size_t ne = 0;
  if (m == EMBER__ALLOC_PRELOAD) env[ne++] = PRELOAD;
  if (via != NULL) {
    snprintf(via_env, sizeof via_env, "ALLOC_VIA=%s", via);
    env[ne++] = via_env;
  }
  print_message("method %d, alloc_big through %s\n", (int)m, via ? via : "malloc");
  pid_t pid = tu_spawn(argv, ne ? env : NULL, NULL);
  assert_true(pid > 0);
  wait_ready(pid, m == EMBER__ALLOC_PRELOAD);
  tally_t t = {.pid = pid};
  ember__symbolizer_opts_t so = {0};
  assert_int_equal(ember__symbolizer_new(&so, &t.sym), 0);
  assert_int_equal(ember__procmaps_read(NULL, pid, &t.maps), 0);

  ember__window_t *w = new_window();
  news_t nw = {pid, 0};
  ember__alloc_sink_t sink = {w, on_new, &nw};
  ember__alloc_session_t *s = NULL;
  char err[512];
  int rc = ember__alloc_start(pid, m, sample_bytes, &sink, &s, err, sizeof err);
  if (rc != 0) fail_msg("start: %d %s", rc, err);
  if (m == EMBER__ALLOC_PRELOAD) {
    /* One session per process. */
    ember__alloc_session_t *s2 = NULL;
    assert_int_equal(ember__alloc_start(pid, m, sample_bytes, &sink, &s2, err, sizeof err), -EBUSY);
    assert_null(s2);
  }
  for (int i = 0; i < 50; i++) {
    sleep_ms(50);
    assert_int_equal(ember__alloc_poll(s), 0);
  }
  ember__alloc_stats_t st;
  ember__alloc_stats(s, &st);
  assert_int_equal(ember__alloc_stop(s), 0);
  /* Every stack the window holds was told as new, once. */
  assert_int_equal(each_stack(w, pid, on_stack, &t), nw.n);
  assert_true(st.stacks <= nw.n && st.dropped == 0);
  ember__window_free(w);
  tu_kill(pid);
  /* SIGKILL leaves the library's control file behind; do not litter. */
  ember__alloc_preload_sweep();

  double ratio = t.small_bytes > 0 ? (double)t.big_bytes / (double)t.small_bytes : 0;
  print_message("method %d: samples %llu lost %llu stacks %llu; big %lld B / %lld objs, small "
                "%lld B / %lld objs, other %lld B; ratio %.3f\n",
                (int)m, (unsigned long long)st.samples, (unsigned long long)st.lost,
                (unsigned long long)st.stacks, (long long)t.big_bytes, (long long)t.big_objects,
                (long long)t.small_bytes, (long long)t.small_objects, (long long)t.other_bytes,
                ratio);
  assert_true(t.big_bytes > 0);
  assert_true(t.small_bytes > 0);
  assert_true(ratio > 3.0 * 0.85 && ratio < 3.0 * 1.15);
  /* Up to 20k iterations/s for 2.5 s (the program keeps that pace only
   * when it gets the CPU: uprobes cost a trap per call, and beside a CPU
   * hog it may do half), one object of each per iteration: as many of
   * each, and no more than the pace allows. */
  assert_true(t.big_objects > 5000 && t.big_objects < 100000);
  assert_true(t.small_objects > 5000 && t.small_objects < 100000);
  double objs = (double)t.big_objects / (double)t.small_objects;
  assert_true(objs > 0.85 && objs < 1.15);
  ember__procmaps_free(t.maps);
  ember__symbolizer_free(t.sym);
}

static void test_alloc_uprobe_ratio(void **state) {
  (void)state;
  profile_and_check(EMBER__ALLOC_UPROBE, 0, NULL);
}

/* The other ways to allocate: realloc(NULL, n) (glibc calls malloc inside:
 * the bytes must count once) and the aligned allocators (aligned_alloc is
 * memalign in glibc: probed once). */
static const char *const vias[] = {"realloc", "memalign", "aligned_alloc", "posix_memalign"};

static void test_alloc_uprobe_other_allocators(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof vias / sizeof vias[0]; i++)
    profile_and_check(EMBER__ALLOC_UPROBE, 0, vias[i]);
}

static void test_alloc_preload_ratio(void **state) {
  (void)state;
  /* 20k iterations/s x 4 KiB = 80 MB/s: ~2400 samples/s at 32 KiB, ~6,000
   * in 2.5 s, so the ratio's sampling error (~3%) is a fifth of the 15%
   * allowed. */
  profile_and_check(EMBER__ALLOC_PRELOAD, 32 * 1024, NULL);
}

static void test_alloc_preload_other_allocators(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof vias / sizeof vias[0]; i++)
    profile_and_check(EMBER__ALLOC_PRELOAD, 32 * 1024, vias[i]);
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static void read_all(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, size - 1, f);
  buf[n] = '\0';
  fclose(f);
}

/* The library changes nothing the program can see: same output, same exit
 * status; its control file is there while it runs (dormant: with nothing
 * in its ring) and gone after a normal exit. */
static void test_alloc_preload_dormant(void **state) {
  (void)state;
  const char *out_plain = EMBER_TEST_TMP "/alloc-plain.out";
  const char *out_pre = EMBER_TEST_TMP "/alloc-preload.out";
  unlink(out_plain);
  unlink(out_pre);
  const char *argv[] = {ALLOC_PROG, "-n", "200000", NULL};
  const char *env[] = {PRELOAD, NULL};
  pid_t a = tu_spawn(argv, NULL, out_plain);
  pid_t b = tu_spawn(argv, env, out_pre);
  assert_int_equal(tu_wait(a, 30000), 0);
  assert_int_equal(tu_wait(b, 30000), 0);
  char x[256], y[256];
  read_all(out_plain, x, sizeof x);
  read_all(out_pre, y, sizeof y);
  assert_true(strncmp(x, "checksum ", 9) == 0);
  assert_string_equal(x, y);
  char path[64];
  snprintf(path, sizeof path, "/dev/shm/ember-alloc.%d", (int)b);
  assert_false(file_exists(path));

  /* Dormant (no heap sampling): only the header page is reserved. */
  const char *argv2[] = {ALLOC_PROG, "5", "1", NULL};
  const char *env_dormant[] = {PRELOAD, "EMBER_HEAP_SAMPLE_BYTES=0", NULL};
  pid_t c = tu_spawn(argv2, env_dormant, NULL);
  wait_ready(c, true);
  snprintf(path, sizeof path, "/dev/shm/ember-alloc.%d", (int)c);
  assert_true(file_exists(path));
  /* Dormant: the ring was never written, only its header page exists. */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  struct stat st;
  assert_int_equal(fstat(fd, &st), 0);
  assert_true(st.st_blocks * 512 <= 8192);
  close(fd);
  tu_kill(c);
  /* A killed process leaves its file; the sweep removes it. */
  assert_true(file_exists(path));
  assert_true(ember__alloc_preload_sweep() >= 1);
  assert_false(file_exists(path));
}

static void test_alloc_preload_absent(void **state) {
  (void)state;
  const char *argv[] = {ALLOC_PROG, "5", "1", NULL};
  pid_t pid = tu_spawn(argv, NULL, NULL);
  wait_ready(pid, false);
  assert_false(ember__alloc_preload_present(pid));
  ember__window_t *w = new_window();
  ember__alloc_sink_t sink = {w, NULL, NULL};
  ember__alloc_session_t *s = NULL;
  char err[512];
  assert_int_equal(ember__alloc_start(pid, EMBER__ALLOC_PRELOAD, 0, &sink, &s, err, sizeof err),
                   -ENOENT);
  assert_null(s);
  ember__window_free(w);
  print_message("%s\n", err);
  assert_non_null(strstr(err, "LD_PRELOAD"));
  tu_kill(pid);
}

static void test_alloc_bad_args(void **state) {
  (void)state;
  ember__window_t *w = new_window();
  ember__alloc_sink_t sink = {w, NULL, NULL}, nowin = {NULL, NULL, NULL};
  ember__alloc_session_t *s = NULL;
  char err[256];
  assert_int_equal(ember__alloc_start(0, EMBER__ALLOC_UPROBE, 0, &sink, &s, err, sizeof err),
                   -EINVAL);
  assert_int_equal(
      ember__alloc_start(getpid(), (ember__alloc_method_t)7, 0, &sink, &s, err, sizeof err),
      -EINVAL);
  assert_int_equal(
      ember__alloc_start(getpid(), EMBER__ALLOC_UPROBE, 0, &sink, NULL, err, sizeof err), -EINVAL);
  /* No window to add to. */
  assert_int_equal(ember__alloc_start(getpid(), EMBER__ALLOC_UPROBE, 0, NULL, &s, err, sizeof err),
                   -EINVAL);
  assert_int_equal(
      ember__alloc_start(getpid(), EMBER__ALLOC_UPROBE, 0, &nowin, &s, err, sizeof err), -EINVAL);
  /* A pid that cannot exist (above pid_max's ceiling). */
  assert_int_equal(ember__alloc_start(4194305, EMBER__ALLOC_UPROBE, 0, &sink, &s, err, sizeof err),
                   -ESRCH);
  assert_non_null(strstr(err, "does not exist"));
  assert_null(s);
  assert_int_equal(ember__alloc_stop(NULL), 0);
  ember__window_free(w);
}

/* A process that exits mid-session: poll says so, stop still hands out
 * what was aggregated. */
static void test_alloc_uprobe_process_exits(void **state) {
  (void)state;
  /* Long enough to be running still when the session starts under load. */
  const char *argv[] = {ALLOC_PROG, "2", "5", NULL};
  pid_t pid = tu_spawn(argv, NULL, NULL);
  wait_ready(pid, false);
  ember__window_t *w = new_window();
  ember__alloc_sink_t sink = {w, NULL, NULL};
  ember__alloc_session_t *s = NULL;
  char err[512];
  int rc = ember__alloc_start(pid, EMBER__ALLOC_UPROBE, 0, &sink, &s, err, sizeof err);
  if (rc != 0) fail_msg("start: %d %s", rc, err);
  assert_int_equal(tu_wait(pid, 10000), 0);
  assert_int_equal(ember__alloc_poll(s), -ESRCH);
  ember__alloc_stats_t st;
  ember__alloc_stats(s, &st);
  assert_true(st.samples > 100);
  assert_int_equal(ember__alloc_stop(s), 0);
  /* What was sampled stays in the window: uprobe counts are exact, one
   * object per sample. */
  size_t n = 0;
  int64_t objects = 0;
  const ember__window_stack_t *ws = ember__window_sorted(w, &n);
  assert_true(n > 0);
  for (size_t i = 0; i < n; i++) objects += ws[i].samples;
  assert_true(objects >= (int64_t)st.samples);
  ember__window_free(w);
}

/* The profiled process owns its control file and may cut it: the agent
 * used to map it and died of SIGBUS at the next poll. Now the poll reports
 * it, the fault is counted, and stop still hands out what was sampled. */
static void test_alloc_preload_truncated(void **state) {
  (void)state;
  const char *argv[] = {ALLOC_PROG, "6", "20", NULL};
  const char *env[] = {PRELOAD, NULL};
  pid_t pid = tu_spawn(argv, env, NULL);
  assert_true(pid > 0);
  wait_ready(pid, true);
  ember__window_t *w = new_window();
  ember__alloc_sink_t sink = {w, NULL, NULL};
  ember__alloc_session_t *s = NULL;
  char err[512];
  int rc = ember__alloc_start(pid, EMBER__ALLOC_PRELOAD, 32 * 1024, &sink, &s, err, sizeof err);
  if (rc != 0) fail_msg("start: %d %s", rc, err);
  for (int i = 0; i < 6; i++) {
    sleep_ms(50);
    assert_int_equal(ember__alloc_poll(s), 0);
  }
  uint64_t faults = ember__alloc_preload_faults();
  /* The process is its own namespace's pid here, so the name is its pid. */
  char path[64];
  snprintf(path, sizeof path, "/dev/shm/ember-alloc.%d", (int)pid);
  /* Stop the writer first: it would die of SIGBUS itself, and its death
   * would hide whether the agent side faulted. */
  kill(pid, SIGSTOP);
  assert_int_equal(truncate(path, 0), 0);
  assert_int_equal(ember__alloc_poll(s), -EPROTO);
  assert_int_equal(ember__alloc_poll(s), -EPROTO);
  assert_int_equal(ember__alloc_preload_faults(), faults + 1);
  ember__alloc_stats_t st;
  ember__alloc_stats(s, &st);
  assert_true(st.samples > 0);
  assert_int_equal(ember__alloc_stop(s), 0);
  assert_true(each_stack(w, pid, NULL, NULL) > 0);
  ember__window_free(w);
  tu_kill(pid);
  ember__alloc_preload_sweep();
}

/* A head counter going backwards (a corrupt or hostile file) is a fault,
 * not 2^64 lost samples. */
static void test_alloc_preload_head_backwards(void **state) {
  (void)state;
  const char *argv[] = {ALLOC_PROG, "6", "20", NULL};
  const char *env[] = {PRELOAD, NULL};
  pid_t pid = tu_spawn(argv, env, NULL);
  assert_true(pid > 0);
  wait_ready(pid, true);
  ember__window_t *w = new_window();
  ember__alloc_sink_t sink = {w, NULL, NULL};
  ember__alloc_session_t *s = NULL;
  char err[512];
  int rc = ember__alloc_start(pid, EMBER__ALLOC_PRELOAD, 32 * 1024, &sink, &s, err, sizeof err);
  if (rc != 0) fail_msg("start: %d %s", rc, err);
  ember__alloc_stats_t st;
  for (int i = 0; i < 200; i++) {
    sleep_ms(20);
    assert_int_equal(ember__alloc_poll(s), 0);
    ember__alloc_stats(s, &st);
    if (st.samples > 0 && i >= 5) break;
  }
  assert_true(st.samples > 0);
  kill(pid, SIGSTOP);
  assert_int_equal(ember__alloc_poll(s), 0); /* drain what is there */
  uint64_t faults = ember__alloc_preload_faults();
  char path[64];
  snprintf(path, sizeof path, "/dev/shm/ember-alloc.%d", (int)pid);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  assert_true(fd >= 0);
  uint64_t zero = 0;
  assert_int_equal(pwrite(fd, &zero, sizeof zero, (off_t)offsetof(ember_alloc_shm_t, head)),
                   (ssize_t)sizeof zero);
  close(fd);
  ember__alloc_stats(s, &st);
  uint64_t lost = st.lost;
  assert_int_equal(ember__alloc_poll(s), -EPROTO);
  assert_int_equal(ember__alloc_preload_faults(), faults + 1);
  ember__alloc_stats(s, &st);
  assert_int_equal(st.lost, lost);
  assert_int_equal(ember__alloc_stop(s), 0);
  ember__window_free(w);
  tu_kill(pid);
  ember__alloc_preload_sweep();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alloc_bad_args),
      cmocka_unit_test(test_alloc_preload_absent),
      cmocka_unit_test(test_alloc_preload_dormant),
      cmocka_unit_test(test_alloc_uprobe_ratio),
      cmocka_unit_test(test_alloc_uprobe_other_allocators),
      cmocka_unit_test(test_alloc_preload_ratio),
      cmocka_unit_test(test_alloc_preload_other_allocators),
      cmocka_unit_test(test_alloc_uprobe_process_exits),
      cmocka_unit_test(test_alloc_preload_truncated),
      cmocka_unit_test(test_alloc_preload_head_backwards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
