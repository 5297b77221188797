/* A CPU burner with two known functions that share the CPU 3:1:
 * burn_hot runs three times the work of burn_cold, again and again.
 *
 *   burn SECONDS          run for SECONDS of wall time, then exit 0
 *   burn --cpu SECONDS    run until the process has had SECONDS of CPU
 *                         time (at most 20 times as long in wall time),
 *                         so a test gets the samples it needs however
 *                         busy the machine is
 *   burn --light SECONDS  one hot+cold round (4 ms) every 40 ms, for
 *                         SECONDS of wall time: a target that is in every
 *                         window at a tenth of a CPU
 *
 * Built with frame pointers and no inlining (tests/CMakeLists.txt), so a
 * sampled stack reads main -> burn_loop -> burn_hot|burn_cold.
 *
 * The two functions do fixed amounts of the same work, measured once at
 * start (how many iterations make 1 ms of CPU time), and read no clock:
 * reading a thread's CPU clock is a real system call, and a sample
 * taken inside the C library (built without frame pointers) loses the
 * caller, so a loop that checked the clock as it went left half of its
 * samples in neither function. Clocks are read once per hot+cold round
 * (4 ms), in burn_loop. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile uint64_t sink;

static int64_t clock_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Called once at the end of each burn function, so that neither is a leaf:
 * GCC builds leaves without a frame pointer even with
 * -fno-omit-frame-pointer, and a frame-pointer walk from a sample in such
 * a leaf skips its caller (burn_loop). */
__attribute__((noinline)) static void burn_done(void) { __asm__ volatile(""); }

/* The same loop in both, each function aligned alike: the speed of a loop
 * this tight depends on where it sits (a branch across a 32-byte line can
 * halve it), and a 3:1 split of iterations must be a 3:1 split of time. */
__attribute__((noinline, aligned(64))) void burn_hot(int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) sink += (uint64_t)i ^ 0x5a;
  burn_done();
}

__attribute__((noinline, aligned(64))) void burn_cold(int64_t iterations) {
  for (int64_t i = 0; i < iterations; i++) sink += (uint64_t)i ^ 0x3c;
  burn_done();
}

/* Iterations of either function in 1 ms of this thread's CPU time, over
 * 20 ms of both in turn. One count for both: a count per function would
 * carry whatever slowed one trial (the other hyperthread of the core
 * busy, say) into the split for good. The trials are a few samples of
 * each function (~10 of the thousands a test takes), alike for both. */
static int64_t calibrate(void) {
  int64_t n = 0, t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t1 = t0;
  while (t1 - t0 < 20000000) {
    burn_hot(20000);
    burn_cold(20000);
    n += 20000;
    t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  }
  int64_t per_ms = 2 * n * 1000000 / (t1 - t0);
  return per_ms > 0 ? per_ms : 1;
}

/* Calibrates here, not in main, so that even the calibration's samples
 * read main -> burn_loop -> burn_hot|burn_cold, as a test asserts of
 * every sample in the two. */
__attribute__((noinline)) void burn_loop(int64_t wall_ns, int64_t cpu_ns, int light) {
  int64_t per_ms = calibrate();
  printf("ready\n");
  fflush(stdout);
  int64_t end = clock_ns(CLOCK_MONOTONIC) + wall_ns;
  int64_t cpu_end = clock_ns(CLOCK_PROCESS_CPUTIME_ID) + cpu_ns;
  for (;;) {
    burn_hot(3 * per_ms);
    burn_cold(per_ms);
    if (clock_ns(CLOCK_MONOTONIC) >= end) break;
    if (cpu_ns > 0 && clock_ns(CLOCK_PROCESS_CPUTIME_ID) >= cpu_end) break;
    if (light) {
      struct timespec rest = {.tv_sec = 0, .tv_nsec = 36000000};
      nanosleep(&rest, NULL); /* interrupted: a shorter rest, nothing more */
    }
  }
}

int main(int argc, char **argv) {
  int cpu = argc > 1 && strcmp(argv[1], "--cpu") == 0;
  int light = argc > 1 && strcmp(argv[1], "--light") == 0;
  int opt = cpu || light;
  const char *arg = argc > 1 + opt ? argv[1 + opt] : "5";
  char *endp = NULL;
  long seconds = strtol(arg, &endp, 10);
  if (endp == arg || *endp != '\0' || seconds <= 0 || seconds > 86400 || argc > 2 + opt) {
    fprintf(stderr, "usage: burn [--cpu | --light] SECONDS\n");
    return 2;
  }
  int64_t s = (int64_t)seconds * 1000000000;
  burn_loop(cpu ? 20 * s : s, cpu ? s : 0, light);
  return 0;
}
