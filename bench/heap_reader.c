/* bench/bench_heap.sh's reader: follow one process's in-use heap as the
 * agent does (agent/heap.h) and report what it cost.
 *
 *   heap_reader PID MILLISECONDS [SNAPSHOT_MS]
 *
 * Attaches to PID's control file (retrying for up to 2 s while the
 * library creates it), drains the ring every 100 ms, unwinding each record
 * with the binaries' CFI as the agent does, takes an in-use snapshot every
 * SNAPSHOT_MS (default 10000, the agent's window) and once more at the
 * end, then prints
 *
 *   records N lost N bad N cpu_s X
 *
 * cpu_s is this process's user + system time for the whole run (attach
 * and table building included). */
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

#include "ember/parse.h"
#include "heap.h"
#include "procmaps.h"
#include "unwtab.h"

typedef struct reader {
  ember__unwtab_t *unw;
  ember__procmaps_t *maps;
} reader_t;

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The agent's heap_unwind: the process's maps, read again when a pc falls
 * outside them (a library loaded since). */
static size_t unwind(void *ctx, uint32_t pid, const ember__unwind_regs_t *regs,
                     const uint8_t *stack, size_t len, uint64_t *ips, size_t cap) {
  reader_t *r = ctx;
  if (r->maps == NULL || !ember__procmaps_covers(r->maps, regs->ip)) {
    ember__procmaps_t *m = NULL;
    if (ember__procmaps_read(NULL, (pid_t)pid, &m) == 0) {
      ember__procmaps_free(r->maps);
      r->maps = m;
    }
  }
  return ember__unwtab_unwind(r->unw, r->maps, regs, stack, len, ips, cap);
}

static int snapshot(ember__heap_t *h) {
  ember__window_t *w = NULL;
  int rc = ember__window_new(&w);
  if (rc == 0) rc = ember__heap_snapshot(h, w, NULL, 0, NULL);
  ember__window_free(w);
  return rc;
}

int main(int argc, char **argv) {
  uint64_t pid, ms, snap_ms = 10000;
  if (argc < 3 || argc > 4 || ember_parse_u64(argv[1], 1, INT32_MAX, &pid) != 0 ||
      ember_parse_u64(argv[2], 1, 86400000, &ms) != 0 ||
      (argc == 4 && ember_parse_u64(argv[3], 100, 86400000, &snap_ms) != 0)) {
    fprintf(stderr, "usage: heap_reader PID MILLISECONDS [SNAPSHOT_MS]\n");
    return 2;
  }
  reader_t r = {NULL, NULL};
  ember__heap_t *h = NULL;
  ember__window_t *alloc = NULL;
  int status = 1;
  ember__unwtab_opts_t uo = {0};
  if (ember__unwtab_new(&uo, &r.unw) != 0 || ember__window_new(&alloc) != 0) {
    fprintf(stderr, "heap_reader: out of memory\n");
    goto cleanup;
  }
  ember__heap_opts_t ho = {.unwind = unwind, .ctx = &r};
  if (ember__heap_new(&ho, &h) != 0) {
    fprintf(stderr, "heap_reader: out of memory\n");
    goto cleanup;
  }
  ember__heap_set_window(h, alloc);
  int64_t start = mono_ms();
  char err[512];
  int rc;
  while ((rc = ember__heap_attach(h, (pid_t)pid, err, sizeof err)) != 0) {
    if (mono_ms() - start > 2000) {
      fprintf(stderr, "heap_reader: %s\n", err);
      goto cleanup;
    }
    sleep_ms(10);
  }
  int64_t last_snap = mono_ms();
  while (mono_ms() - start < (int64_t)ms && ember__heap_follows(h, (pid_t)pid)) {
    sleep_ms(100);
    ember__heap_poll(h, 0);
    if (mono_ms() - last_snap >= (int64_t)snap_ms) {
      /* As the agent's cut: snapshot, then a fresh allocation window. */
      if (snapshot(h) != 0) fprintf(stderr, "heap_reader: snapshot: out of memory\n");
      ember__window_reset(alloc);
      last_snap = mono_ms();
    }
  }
  if (snapshot(h) != 0) fprintf(stderr, "heap_reader: snapshot: out of memory\n");
  ember__heap_stats_t st;
  ember__heap_stats(h, &st);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
  printf("records %llu lost %llu bad %llu cfi %llu cpu_s %.3f\n", (unsigned long long)st.records,
         (unsigned long long)st.lost, (unsigned long long)st.bad, (unsigned long long)st.cfi, cpu);
  status = 0;
cleanup:
  ember__heap_free(h);
  ember__window_free(alloc);
  ember__procmaps_free(r.maps);
  ember__unwtab_free(r.unw);
  return status;
}
