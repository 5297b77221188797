/* The agent's source map cost (bench/bench_sourcemap.sh): a live Node.js
 * process PID that runs a minified bundle, and the names V8 gave its
 * functions in its perf map. Through agent/jsmap.c exactly as the agent
 * maps frames:
 *
 *  - the first frame: find, read and decode the map (wall and thread CPU),
 *    the memory the decoded map holds (ember_sourcemap_memory) and what
 *    the process's RSS grew by;
 *  - every distinct frame in a batch of all of them (thread CPU per frame,
 *    the batch's one check of the script included);
 *  - a window of W distinct frames after a new batch (the check of the
 *    script plus W lookups).
 *
 *   sourcemap_bench PID NAMES [W] [POSITIONS_OUT]
 * NAMES: one V8 name per line ("JS:~a /srv/dist/app.js:1:123"). Writes
 * "LINE COLUMN" per name to POSITIONS_OUT for the peer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/jsname.h"
#include "ember/metrics.h"
#include "jsmap.h"

static double cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double wall_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: sourcemap_bench PID NAMES [W] [POSITIONS_OUT]\n");
    return 2;
  }
  int pid = 0, w = 500;
  if (sscanf(argv[1], "%d", &pid) != 1 || (argc > 3 && sscanf(argv[3], "%d", &w) != 1)) return 2;
  FILE *in = fopen(argv[2], "r");
  if (in == NULL) return 2;
  char **names = NULL;
  size_t n = 0, cap = 0;
  char line[8192];
  while (fgets(line, sizeof line, in)) {
    line[strcspn(line, "\n")] = '\0';
    if (n == cap) {
      cap = cap ? cap * 2 : 1024;
      names = realloc(names, cap * sizeof *names);
      if (names == NULL) return 1;
    }
    names[n++] = strdup(line);
  }
  fclose(in);
  if (n == 0) return 2;
  if (argc > 4) {
    FILE *out = fopen(argv[4], "w");
    if (out == NULL) return 2;
    for (size_t i = 0; i < n; i++) {
      ember_jsname_t j;
      if (ember_jsname_parse(names[i], &j)) fprintf(out, "%u %u\n", j.line, j.column);
    }
    fclose(out);
  }
  ember__jsmaps_t *m = NULL;
  if (ember__jsmaps_new(NULL, &m) != 0) return 1;
  double rss0 = ember_self_rss_bytes();
  double c0 = cpu_ns(), w0 = wall_ns();
  ember__jsframe_t f;
  int rc = ember__jsmaps_frame(m, pid, names[0], &f);
  double c1 = cpu_ns(), w1 = wall_ns();
  double rss1 = ember_self_rss_bytes();
  ember__jsmaps_stats_t st;
  ember__jsmaps_stats(m, &st);
  if (rc < 0 || st.held != 1) {
    fprintf(stderr, "no map was decoded (rc %d): is PID alive and its map there?\n", rc);
    return 1;
  }
  printf("first frame (find, read, decode the map): %.1f ms wall, %.1f ms CPU; the decoded map "
         "holds %.1f MiB; RSS +%.1f MiB\n",
         (w1 - w0) / 1e6, (c1 - c0) / 1e6, (double)st.bytes / 1048576.0, (rss1 - rss0) / 1048576.0);
  /* Every distinct frame, in batches of all of them. */
  size_t mapped = 0;
  const int rounds = 20;
  double c2 = cpu_ns();
  for (int r = 0; r < rounds; r++) {
    ember__jsmaps_forget(m, 0);
    for (size_t i = 0; i < n; i++) mapped += ember__jsmaps_frame(m, pid, names[i], &f) == 1;
  }
  double c3 = cpu_ns();
  printf("%zu distinct frames per batch, %zu mapped: %.0f ns CPU per frame\n", n,
         mapped / (size_t)rounds, (c3 - c2) / ((double)rounds * (double)n));
  /* A window of W frames: a new batch (the script's check) and W lookups. */
  if ((size_t)w > n) w = (int)n;
  double c4 = cpu_ns();
  for (int r = 0; r < rounds * 10; r++) {
    ember__jsmaps_forget(m, 0);
    for (int i = 0; i < w; i++)
      ember__jsmaps_frame(m, pid, names[((size_t)r * 7919u + (size_t)i) % n], &f);
  }
  double c5 = cpu_ns();
  printf("a window of %d distinct frames: %.1f us CPU\n", w, (c5 - c4) / (rounds * 10) / 1e3);
  ember__jsmaps_free(m);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return 0;
}
