/* A worker with a CPU spike, for the alerting tests:
 *
 *   spike PHASE...     each PHASE is KIND:SECONDS, run in order, then exit 0
 *
 * KIND is one of
 *   idle    one thread works 1 ms in every 20 (about 5% of a core) in
 *           idle_work
 *   burn    THREADS (default 2) threads burn in spike_burn all the time;
 *           two threads keep the process above half a core even on a
 *           2-core machine shared with two CPU hogs
 *   steady  one thread works 6 ms in every 20 (about 0.3 of a core) in
 *           steady_work
 *   hot     like steady, but two thirds of the work is in hot_work and
 *           one third in steady_work: a function whose share of the
 *           worker's CPU rises while the worker's total stays the same
 *
 * e.g. `spike idle:20 burn:40 idle:60`. Prints "ready" once started and
 * "phase N KIND" as each phase begins, so a test can line the alert's times
 * up with what the program did. Built with frame pointers and no inlining
 * like burn.c, so stacks read main -> run_phase -> spike_burn.
 *
 * Work is counted in iterations measured once at start, like burn.c: the
 * work functions read no clock. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile uint64_t sink;
static int64_t per_ms = 1;

static int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) static void work_done(void) { __asm__ volatile(""); }

__attribute__((noinline, aligned(64))) void spike_burn(int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) sink += (uint64_t)i ^ 0x5a;
  work_done();
}

__attribute__((noinline, aligned(64))) void idle_work(int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) sink += (uint64_t)i ^ 0x3c;
  work_done();
}

__attribute__((noinline, aligned(64))) void steady_work(int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) sink += (uint64_t)i ^ 0x77;
  work_done();
}

__attribute__((noinline, aligned(64))) void hot_work(int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) sink += (uint64_t)i ^ 0x11;
  work_done();
}

static void calibrate(void) {
  int64_t n = 0, t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t1 = t0;
  while (t1 - t0 < 20000000) {
    spike_burn(20000);
    n += 20000;
    t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  }
  per_ms = n * 1000000 / (t1 - t0);
  if (per_ms <= 0) per_ms = 1;
}

static void rest_until(int64_t t) {
  int64_t now = clock_ns(CLOCK_MONOTONIC);
  if (t <= now) return;
  struct timespec ts = {.tv_sec = (time_t)((t - now) / 1000000000),
                        .tv_nsec = (long)((t - now) % 1000000000)};
  nanosleep(&ts, NULL); /* interrupted: a shorter rest, nothing more */
}

/* Busy for `busy_ms` of each 20 ms period until `end` (CLOCK_MONOTONIC).
 * A period missed while the process waited for a CPU is skipped, not made
 * up: catching up would burst above the duty (a "steady" load rising 2x
 * after a stall, enough to breach a baseline rule). */
static void duty(int64_t end, int busy_ms, int hot) {
  for (int64_t next = clock_ns(CLOCK_MONOTONIC); next < end;) {
    int64_t now = clock_ns(CLOCK_MONOTONIC);
    next = (next > now ? next : now) + 20000000;
    if (hot) {
      hot_work(per_ms * busy_ms * 2 / 3);
      steady_work(per_ms * busy_ms / 3);
    } else if (busy_ms == 1) {
      idle_work(per_ms);
    } else {
      steady_work(per_ms * busy_ms);
    }
    rest_until(next);
  }
}

static void *burner(void *arg) {
  int64_t end = *(const int64_t *)arg;
  while (clock_ns(CLOCK_MONOTONIC) < end) spike_burn(per_ms * 4);
  return NULL;
}

__attribute__((noinline)) static int run_phase(const char *kind, int64_t secs, int threads) {
  int64_t end = clock_ns(CLOCK_MONOTONIC) + secs * 1000000000;
  if (strcmp(kind, "idle") == 0) {
    duty(end, 1, 0);
  } else if (strcmp(kind, "steady") == 0) {
    duty(end, 6, 0);
  } else if (strcmp(kind, "hot") == 0) {
    duty(end, 6, 1);
  } else if (strcmp(kind, "burn") == 0) {
    pthread_t t[8];
    int n = 0;
    for (; n < threads - 1; n++)
      if (pthread_create(&t[n], NULL, burner, &end) != 0) break;
    burner(&end);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  } else {
    return -1;
  }
  return 0;
}

static int parse_phase(const char *s, char *kind, size_t ksize, int64_t *secs, int *threads) {
  const char *colon = strchr(s, ':');
  if (colon == NULL || (size_t)(colon - s) >= ksize) return -1;
  memcpy(kind, s, (size_t)(colon - s));
  kind[colon - s] = '\0';
  char *end = NULL;
  long v = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || v <= 0 || v > 86400) return -1;
  *threads = 2;
  if (*end == 'x') { /* burn:40x3 = three threads */
    const char *t = end + 1;
    long n = strtol(t, &end, 10);
    if (end == t || n < 1 || n > 8) return -1;
    *threads = (int)n;
  }
  if (*end != '\0') return -1;
  *secs = v;
  return 0;
}

int main(int argc, char **argv) {
  char kind[16];
  int64_t secs;
  int threads;
  for (int i = 1; i < argc; i++) {
    if (parse_phase(argv[i], kind, sizeof kind, &secs, &threads) != 0 ||
        (strcmp(kind, "idle") != 0 && strcmp(kind, "burn") != 0 && strcmp(kind, "steady") != 0 &&
         strcmp(kind, "hot") != 0)) {
      fprintf(stderr, "usage: spike KIND:SECONDS[xTHREADS]... (KIND idle|burn|steady|hot)\n");
      return 2;
    }
  }
  if (argc < 2) {
    fprintf(stderr, "usage: spike KIND:SECONDS[xTHREADS]... (KIND idle|burn|steady|hot)\n");
    return 2;
  }
  calibrate();
  printf("ready\n");
  fflush(stdout);
  for (int i = 1; i < argc; i++) {
    parse_phase(argv[i], kind, sizeof kind, &secs, &threads);
    printf("phase %d %s\n", i, kind);
    fflush(stdout);
    if (run_phase(kind, secs, threads) != 0) return 2;
  }
  return 0;
}
