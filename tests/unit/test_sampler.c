/* The per-CPU sampler against the real kernel, and the window aggregate. */
#include <errno.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "sampler.h"
#include "window.h"

static void test_sampler_cpulist_parse(void **state) {
  (void)state;
  uint8_t bm[128];
  assert_int_equal(ember__cpulist_parse("0-3,8,10-11\n", bm, 1024), 7);
  assert_true(bm[0] & 0x0f);
  assert_true(bm[1] & 0x01);
  assert_true(bm[1] & 0x0c);
  assert_false(bm[1] & 0x02);
  assert_int_equal(ember__cpulist_parse("0", bm, 1024), 1);
  assert_int_equal(ember__cpulist_parse("3-1", bm, 1024), -EINVAL);
  assert_int_equal(ember__cpulist_parse("x", bm, 1024), -EINVAL);
  assert_int_equal(ember__cpulist_parse("0-2000", bm, 1024), -EINVAL);
}

static volatile uint64_t sink;

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Burns `ms` of this thread's CPU time (not wall time), so the expected
 * sample count holds however busy the machine is. The CPU clock is a real
 * system call (no vDSO for thread clocks): read once per ~100k additions
 * (tens of microseconds), the burn function holds nearly every sample. */
__attribute__((noinline)) static void sampler_test_burn(int64_t ms) {
  int64_t end = thread_cpu_ns() + ms * 1000000;
  while (thread_cpu_ns() < end) {
    for (int i = 0; i < 100000; i++) sink += (uint64_t)i;
  }
}

typedef struct seen {
  uint64_t mine, in_burn, total, max_depth, ns;
  uint32_t self;
  atomic_uint tid; /* the burning thread; 0 = any thread of self */
} seen_t;

static void on_sample(void *ctx, const ember__raw_sample_t *s) {
  seen_t *seen = ctx;
  seen->total++;
  if (s->pid != seen->self) return;
  uint32_t tid = atomic_load(&seen->tid);
  if (tid != 0 && s->tid != tid) return;
  seen->mine++;
  seen->ns += s->period_ns;
  if (s->nips > seen->max_depth) seen->max_depth = s->nips;
  uintptr_t fn = (uintptr_t)sampler_test_burn;
  for (uint32_t i = 0; i < s->nips; i++) {
    if (s->ips[i] >= fn && s->ips[i] < fn + 512) {
      seen->in_burn++;
      break;
    }
  }
}

#define BURN_MS 2500
/* Not 1000: a 1 ms sampling period is in step with the scheduler's tick
 * (250 or 1000 Hz), where time slices of a busy CPU change hands, so the
 * samples would land on either side of a switch by phase rather than by
 * share. A rate prime to the tick walks across it. */
#define SAMPLER_HZ 997

typedef struct burner {
  seen_t *seen;
  int64_t cpu_ns; /* the thread CPU time the burn really took */
  atomic_bool done;
} burner_t;

/* The burn runs beside the loop, as a target runs beside the agent: the
 * loop keeps draining the rings (a burn inside a loop callback lets them
 * overflow: thousands of samples a CPU in a few seconds of a busy
 * machine). */
static void burner_main(void *arg) {
  burner_t *b = arg;
  atomic_store(&b->seen->tid, (uint32_t)gettid());
  int64_t t0 = thread_cpu_ns();
  sampler_test_burn(BURN_MS);
  b->cpu_ns = thread_cpu_ns() - t0;
  atomic_store(&b->done, true);
}

static void on_burn_check(uv_timer_t *t) {
  burner_t *b = t->data;
  if (atomic_load(&b->done)) uv_stop(t->loop);
}

static void test_sampler_samples_this_process(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  seen_t seen = {.self = (uint32_t)getpid()};
  ember__sampler_opts_t o = {.hz = SAMPLER_HZ, .ring_pages = 64, .kernel = true, .drain_ms = 50};
  ember__sampler_t *s = NULL;
  char err[256] = "";
  int rc = ember__sampler_start(&loop, &o, on_sample, &seen, &s, err, sizeof err);
  if (rc != 0) fail_msg("sampler: %s", err);
  burner_t b = {.seen = &seen};
  atomic_init(&b.done, false);
  uv_timer_t t;
  uv_timer_init(&loop, &t);
  t.data = &b;
  uv_timer_start(&t, on_burn_check, 20, 20);
  uv_thread_t th;
  assert_int_equal(uv_thread_create(&th, burner_main, &b), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_thread_join(&th), 0);
  ember__sampler_drain(s);
  ember__sampler_stats_t st;
  ember__sampler_stats(s, &st);
  uint64_t total_at_stats = seen.total; /* stop drains once more */
  ember__sampler_stop(s);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  double cpu_s = (double)b.cpu_ns / 1e9, want = cpu_s * SAMPLER_HZ;
  print_message("%.3f s of CPU at %d Hz: %llu samples of the burning thread (%llu in the burn "
                "function, depth up to %llu, %.3f s of CPU by their periods), %llu in all, "
                "%llu lost\n",
                cpu_s, SAMPLER_HZ, (unsigned long long)seen.mine, (unsigned long long)seen.in_burn,
                (unsigned long long)seen.max_depth, (double)seen.ns / 1e9,
                (unsigned long long)seen.total, (unsigned long long)st.lost);
  /* One sample per 1/SAMPLER_HZ s of CPU the thread got. */
  assert_true(seen.mine >= want * 0.85 && seen.mine <= want * 1.15 + 20);
  assert_true(seen.in_burn >= seen.mine * 9 / 10);
  assert_true(seen.max_depth >= 3); /* the burn function, its callers */
  assert_int_equal(st.lost, 0);
  assert_int_equal(st.samples, total_at_stats);
  /* Each sample stands for about 1 ms of CPU. */
  assert_true(seen.ns > seen.mine * 800000 && seen.ns < seen.mine * 1200000);
}

static void test_sampler_rate_above_kernel_cap(void **state) {
  (void)state;
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  seen_t seen = {0};
  ember__sampler_opts_t o = {.hz = 100000000};
  ember__sampler_t *s = NULL;
  char err[256] = "";
  assert_int_equal(ember__sampler_start(&loop, &o, on_sample, &seen, &s, err, sizeof err), -EINVAL);
  assert_non_null(strstr(err, "perf_event_max_sample_rate"));
  assert_null(s);
  o = (ember__sampler_opts_t){.hz = 19, .ring_pages = 3};
  assert_int_equal(ember__sampler_start(&loop, &o, on_sample, &seen, &s, err, sizeof err), -EINVAL);
  assert_non_null(strstr(err, "power of two"));
  assert_int_equal(uv_loop_close(&loop), 0);
}

static void noop_sample(void *ctx, const ember__raw_sample_t *s) {
  (void)ctx;
  (void)s;
}

typedef struct hotplug_step {
  const char *path;
  ember__sampler_t *s;
  int step;
  uint32_t cpus[3];
} hotplug_step_t;

static void write_online(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Every 150 ms: record how many CPUs are sampled, then change the list. */
static void on_hotplug_step(uv_timer_t *t) {
  hotplug_step_t *h = t->data;
  ember__sampler_stats_t st;
  ember__sampler_stats(h->s, &st);
  h->cpus[h->step++] = st.cpus;
  if (h->step == 1) write_online(h->path, "0-1\n"); /* cpu 1 comes online */
  if (h->step == 2) write_online(h->path, "1\n");   /* cpu 0 goes offline */
  if (h->step == 3) uv_stop(t->loop);
}

/* CPU hotplug, through a stand-in for /sys/devices/system/cpu/online: the
 * sampler opens a real event for a CPU that appears and closes the one of
 * a CPU that goes away. */
static void test_sampler_follows_cpu_hotplug(void **state) {
  (void)state;
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) skip();
  char path[512];
  snprintf(path, sizeof path, "%s/cpu-online", EMBER_TEST_TMP);
  write_online(path, "0\n");
  uv_loop_t loop;
  assert_int_equal(uv_loop_init(&loop), 0);
  ember__sampler_opts_t o = {.hz = 19, .hotplug_ms = 50, .sysfs_online = path};
  hotplug_step_t h = {.path = path};
  char err[256] = "";
  if (ember__sampler_start(&loop, &o, noop_sample, NULL, &h.s, err, sizeof err) != 0)
    fail_msg("sampler: %s", err);
  uv_timer_t t;
  uv_timer_init(&loop, &t);
  t.data = &h;
  uv_timer_start(&t, on_hotplug_step, 150, 150);
  uv_run(&loop, UV_RUN_DEFAULT);
  ember__sampler_stop(h.s);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&loop), 0);
  assert_int_equal(h.cpus[0], 1); /* only cpu 0 at start */
  assert_int_equal(h.cpus[1], 2); /* cpu 1 added */
  assert_int_equal(h.cpus[2], 1); /* cpu 0 removed */
}

/* Without privileges, system-wide sampling is refused; the message must say
 * what to change. Runs as `nobody` in a child (we are root in CI). */
static void test_sampler_refusal_names_the_fix(void **state) {
  (void)state;
  if (geteuid() != 0) skip();
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    uv_loop_t loop;
    uv_loop_init(&loop);
    ember__sampler_opts_t o = {.hz = 19};
    ember__sampler_t *s = NULL;
    char err[512] = "";
    int rc = ember__sampler_start(&loop, &o, noop_sample, NULL, &s, err, sizeof err);
    ssize_t w = write(fds[1], err, strlen(err));
    (void)w;
    _exit(rc == -EACCES || rc == -EPERM ? 0 : 1);
  }
  close(fds[1]);
  char msg[512] = "";
  ssize_t n = read(fds[0], msg, sizeof msg - 1);
  close(fds[0]);
  msg[n > 0 ? n : 0] = '\0';
  int status;
  waitpid(pid, &status, 0);
  print_message("as nobody: %s\n", msg);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  assert_non_null(strstr(msg, "perf_event_paranoid"));
  assert_non_null(strstr(msg, "CAP_PERFMON"));
}

static void test_window_aggregates_stacks(void **state) {
  (void)state;
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  uint64_t a[] = {0x10, 0x20, 0x30}, b[] = {0x11, 0x20, 0x30};
  bool is_new;
  assert_int_equal(ember__window_add(w, 7, a, 3, 1000, &is_new), 0);
  assert_true(is_new);
  assert_int_equal(ember__window_add(w, 7, a, 3, 1000, &is_new), 0);
  assert_false(is_new);
  assert_int_equal(ember__window_add(w, 5, a, 3, 500, &is_new), 0); /* other pid */
  assert_true(is_new);
  assert_int_equal(ember__window_add(w, 7, b, 3, 1000, NULL), 0);
  assert_int_equal(ember__window_add(w, 7, a, 2, 1000, NULL), 0); /* prefix is another stack */
  assert_int_equal(ember__window_add(w, 7, a, 0, 1000, NULL), -EINVAL);
  assert_int_equal(ember__window_nstacks(w), 4);
  size_t n;
  const ember__window_stack_t *s = ember__window_sorted(w, &n);
  assert_int_equal(n, 4);
  assert_int_equal(s[0].pid, 5);
  assert_int_equal(s[1].pid, 7);
  assert_int_equal(s[1].samples, 2);
  assert_int_equal(s[1].cpu_ns, 2000);
  assert_int_equal(s[1].nips, 3);
  assert_int_equal(s[1].ips[0], 0x10);
  assert_int_equal(s[2].ips[0], 0x11);
  assert_int_equal(s[3].nips, 2);

  ember__window_set_max_stacks(w, 4);
  uint64_t c[] = {0x99};
  assert_int_equal(ember__window_add(w, 7, c, 1, 1, NULL), EMBER_ETOOBIG);
  assert_int_equal(ember__window_dropped(w), 1);
  assert_int_equal(ember__window_add(w, 7, a, 3, 1000, NULL), 0); /* existing still counts */

  ember__window_reset(w);
  assert_int_equal(ember__window_nstacks(w), 0);
  assert_int_equal(ember__window_add(w, 7, a, 3, 1000, &is_new), 0);
  assert_true(is_new);
  ember__window_set_bounds(w, 10, 20);
  int64_t lo, hi;
  ember__window_bounds(w, &lo, &hi);
  assert_int_equal(lo, 10);
  assert_int_equal(hi, 20);
  ember__window_free(w);
}

static void test_window_many_stacks(void **state) {
  (void)state;
  ember__window_t *w = NULL;
  assert_int_equal(ember__window_new(&w), 0);
  for (uint64_t i = 0; i < 20000; i++) {
    uint64_t ips[40];
    for (int d = 0; d < 40; d++) ips[d] = 0x400000 + i * 64 + (uint64_t)d;
    assert_int_equal(ember__window_add(w, (uint32_t)(i % 50), ips, 40, 1, NULL), 0);
    assert_int_equal(ember__window_add(w, (uint32_t)(i % 50), ips, 40, 1, NULL), 0);
  }
  size_t n;
  const ember__window_stack_t *s = ember__window_sorted(w, &n);
  assert_int_equal(n, 20000);
  for (size_t i = 1; i < n; i++) assert_true(s[i - 1].pid <= s[i].pid);
  for (size_t i = 0; i < n; i++) assert_int_equal(s[i].samples, 2);
  ember__window_free(w);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sampler_cpulist_parse),
      cmocka_unit_test(test_sampler_samples_this_process),
      cmocka_unit_test(test_sampler_rate_above_kernel_cap),
      cmocka_unit_test(test_sampler_refusal_names_the_fix),
      cmocka_unit_test(test_sampler_follows_cpu_hotplug),
      cmocka_unit_test(test_window_aggregates_stacks),
      cmocka_unit_test(test_window_many_stacks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
