/* The in-use heap's subject (tests/unit/test_heap.c, the heap end-to-end
 * test, bench/bench_heap.sh). Built twice: with frame pointers (heapgrow)
 * and the way distributions build programs (heapgrow_nofp: -O2, no frame
 * pointers), so stacks must come from CFI.
 *
 *   heapgrow startup: startup_alloc() allocates 64 MiB (1024 blocks of
 *     64 KiB, touched) and keeps it; then churn() allocates and frees
 *     small blocks until killed.
 *   heapgrow leak: leak_step() leaks 64 KiB 16 times a second (1 MiB/s,
 *     on absolute deadlines, so a late wake-up catches up), while
 *     steady() allocates and frees around it; until killed. With
 *     HEAPGROW_STEPS=FILE, the number of leak_step calls made so far is
 *     written there (8 bytes, native order) after each one: the truth a
 *     test compares with, since on a loaded machine the steps come late
 *     and then in a burst.
 *
 * Prints "ready" (and flushes) once the startup part is done. The
 * functions are noinline and use what their callees return, so each is a
 * real frame. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define BLOCK    (64u * 1024u)

static void *volatile keep_sink;
static volatile uint64_t sum;

NOINLINE size_t startup_alloc(void **keep, size_t n);
NOINLINE uint64_t churn(uint64_t seed);
NOINLINE void *leak_step(unsigned i);
NOINLINE uint64_t steady(uint64_t seed);

NOINLINE size_t startup_alloc(void **keep, size_t n) {
  size_t got = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char *p = malloc(BLOCK);
    if (p != NULL) memset(p, (int)(i & 0xff), BLOCK);
    keep[i] = p;
    got += p != NULL;
  }
  return got;
}

/* Small allocations, freed at once: they churn, they do not stay. */
NOINLINE uint64_t churn(uint64_t seed) {
  void *p[256];
  for (int i = 0; i < 256; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = malloc(16 + (seed >> 56));
    if (p[i] != NULL) ((unsigned char *)p[i])[0] = (unsigned char)seed;
  }
  for (int i = 0; i < 256; i++) free(p[i]);
  return seed;
}

NOINLINE void *leak_step(unsigned i) {
  unsigned char *p = malloc(BLOCK);
  if (p != NULL) memset(p, (int)(i & 0xff), BLOCK);
  return p;
}

NOINLINE uint64_t steady(uint64_t seed) {
  void *p[64];
  for (int i = 0; i < 64; i++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    p[i] = malloc(256 + (seed >> 52));
  }
  for (int i = 0; i < 64; i++) free(p[i]);
  return seed;
}

static void sleep_until(const struct timespec *t) {
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) != 0) {
  }
}

static void add_ns(struct timespec *t, long ns) {
  t->tv_nsec += ns;
  while (t->tv_nsec >= 1000000000L) {
    t->tv_nsec -= 1000000000L;
    t->tv_sec++;
  }
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "startup") != 0 && strcmp(argv[1], "leak") != 0)) {
    fprintf(stderr, "usage: heapgrow startup|leak\n");
    return 2;
  }
  uint64_t seed = 42;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  if (strcmp(argv[1], "startup") == 0) {
    static void *keep[1024];
    size_t got = startup_alloc(keep, 1024);
    keep_sink = keep;
    printf("ready %zu\n", got);
    fflush(stdout);
    for (;;) {
      seed = churn(seed);
      sum += seed;
      add_ns(&next, 2000000L); /* 500 rounds a second */
      sleep_until(&next);
    }
  }
  const char *steps_path = getenv("HEAPGROW_STEPS");
  int steps_fd = steps_path ? open(steps_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
  printf("ready 0\n");
  fflush(stdout);
  for (unsigned i = 0;; i++) {
    keep_sink = leak_step(i);
    uint64_t done = (uint64_t)i + 1;
    if (steps_fd >= 0 && pwrite(steps_fd, &done, sizeof done, 0) != (ssize_t)sizeof done) {
      close(steps_fd);
      steps_fd = -1;
    }
    for (int k = 0; k < 8; k++) seed = steady(seed);
    sum += seed;
    add_ns(&next, 62500000L); /* 16 a second */
    sleep_until(&next);
  }
}
