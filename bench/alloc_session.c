/* bench/bench_alloc.sh's session driver: run one allocation session
 * (agent/alloc.h) on a process until it exits or SECONDS pass.
 *
 *   alloc_session PID uprobe|preload SECONDS [SAMPLE_BYTES]
 *
 * Polls every 50 ms like the agent; prints samples, lost, stacks and the
 * largest stack's objects and bytes. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "ember/parse.h"

typedef struct top {
  int64_t objects, bytes, total_bytes;
} top_t;

int main(int argc, char **argv) {
  uint64_t pid, secs, sample_bytes = 0;
  if (argc < 4 || argc > 5 || ember_parse_u64(argv[1], 1, INT32_MAX, &pid) != 0 ||
      ember_parse_u64(argv[3], 0, 86400, &secs) != 0 ||
      (argc == 5 && ember_parse_u64(argv[4], 1, 1ULL << 40, &sample_bytes) != 0)) {
    fprintf(stderr, "usage: alloc_session PID uprobe|preload SECONDS [SAMPLE_BYTES]\n");
    return 2;
  }
  ember__alloc_method_t m =
      strcmp(argv[2], "uprobe") == 0 ? EMBER__ALLOC_UPROBE : EMBER__ALLOC_PRELOAD;
  ember__window_t *w = NULL;
  ember__alloc_session_t *s = NULL;
  char err[512];
  if (ember__window_new(&w) != 0) {
    fprintf(stderr, "alloc_session: out of memory\n");
    return 1;
  }
  ember__alloc_sink_t sink = {w, NULL, NULL};
  int rc = ember__alloc_start((pid_t)pid, m, sample_bytes, &sink, &s, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "alloc_session: %s\n", err);
    ember__window_free(w);
    return 1;
  }
  for (uint64_t i = 0; i < secs * 20; i++) {
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    if (ember__alloc_poll(s) == -ESRCH) break;
  }
  ember__alloc_stats_t st;
  ember__alloc_stats(s, &st);
  top_t t = {0, 0, 0};
  ember__alloc_stop(s);
  size_t n = 0;
  const ember__window_stack_t *ws = ember__window_sorted(w, &n);
  for (size_t i = 0; i < n; i++) {
    t.total_bytes += ws[i].cpu_ns;
    if (ws[i].cpu_ns > t.bytes) {
      t.bytes = ws[i].cpu_ns;
      t.objects = ws[i].samples;
    }
  }
  ember__window_free(w);
  printf("samples %llu lost %llu stacks %llu total_bytes %lld top_objects %lld\n",
         (unsigned long long)st.samples, (unsigned long long)st.lost, (unsigned long long)st.stacks,
         (long long)t.total_bytes, (long long)t.objects);
  return 0;
}
