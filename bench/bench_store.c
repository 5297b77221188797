/* Store benchmark: what the collector does per Kafka message (decode the
 * wire message, write it in batches), how many bytes a sample costs on
 * disk against keeping each window as a pprof.gz file, and how long a merge
 * of one worker over 24 h and 7 days takes, against `go tool pprof -proto`
 * merging the same windows as pprof.gz files in the same run.
 *
 *   bench_store [--quick] [--workers N] [--minutes M] [--days D] [--no-peer]
 *               [--sources] [--dir DIR]
 *
 * The stream (bench/stream.h): N workers (default 200), each with 500 distinct stacks of
 * depth 5-30 made of a shared runtime/libc part (root side) and the
 * worker's own functions (leaf side), each frame with function, file,
 * module and build-id strings as symbolized native code has. Each worker
 * runs on one of 16 hosts, in one of 3 versions, with 1-4 CPUs; a 10 s
 * window at 19 Hz holds about 50-400 samples drawn with a Zipf-like skew
 * from its 500 stacks, with values CPU samples and CPU ns (the agent
 * measures CPU ns, so it is not exactly samples x period). Every message
 * carries its agent id (one per host) and that agent's next seq.
 *
 * Ingest: messages are generated and encoded outside the timing, 1,000 per
 * batch (the collector's transaction size); the timed part is
 * ember_codec_decode() of each + one ember_store_write() of the batch +
 * freeing the profiles. Wall and thread CPU time are both reported (one
 * thread does everything, so CPU time is per core). With --sources the
 * batch is written as the fleet collector writes it
 * (ember_store_write_from: each worker's windows on one of 12 partitions,
 * one run each), followed by ember_store_committed for each partition of
 * the batch, as after its Kafka commit; both are timed.
 *
 * Merge: one worker's windows for D days (default 7) in a store of their
 * own; merges over 24 h and over D days, both with ragged ends (not on
 * hour boundaries), best of 5. The peer writes the last 24 h of that
 * worker as pprof.gz files (ember_export_pprof) and times
 * `go tool pprof -proto` merging them, after one warm-up run (the first
 * run compiles the tool). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

#include "ember/codec.h"
#include "ember/export.h"
#include "ember/parse.h"
#include "ember/store.h"
#include "ember/wire.h"
#include "decode_pool.h"
#include "ingest.h"
#include "stream.h"

#define SEC   STREAM_SEC
#define T0    STREAM_T0
#define WIN   STREAM_WIN
#define BATCH 1000

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_store: %s: %s\n", what, ember_strerror(rc));
  exit(1);
}

static double mono_s(void) { return (double)ember_time_mono_ns() / 1e9; }
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- go tool pprof --- */

static const char *go_binary(void) {
  static char found[512];
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *end = strchr(path, ':');
    size_t len = end ? (size_t)(end - path) : strlen(path);
    snprintf(found, sizeof found, "%.*s/go", (int)len, path);
    if (access(found, X_OK) == 0) return found;
    path = end ? end + 1 : NULL;
  }
  return access("/usr/local/go/bin/go", X_OK) == 0 ? "/usr/local/go/bin/go" : NULL;
}

/* Run `go tool pprof -proto -output=merged.pb.gz files...` in `dir`; the
 * wall time in seconds, or a negative number on failure. */
static double run_pprof(const char *go, const char *dir, size_t nfiles) {
  char **argv = calloc(nfiles + 8, sizeof *argv);
  size_t a = 0;
  argv[a++] = (char *)(uintptr_t)go;
  argv[a++] = strdup("tool");
  argv[a++] = strdup("pprof");
  argv[a++] = strdup("-proto");
  argv[a++] = strdup("-output=merged.pb.gz");
  for (size_t i = 0; i < nfiles; i++) {
    char name[32];
    snprintf(name, sizeof name, "%zu.pb.gz", i);
    argv[a++] = strdup(name);
  }
  argv[a] = NULL;
  double t0 = mono_s();
  fflush(stdout); /* else the child would print it again */
  pid_t pid = fork();
  if (pid == 0) {
    if (chdir(dir) != 0) _exit(127);
    if (!freopen("/dev/null", "w", stdout) || !freopen("pprof.err", "w", stderr)) _exit(127);
    execv(go, argv);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  double t = mono_s() - t0;
  for (size_t i = 1; i < a; i++) free(argv[i]);
  free(argv);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? t : -1;
}

/* --- main --- */

static void usage(void) {
  fprintf(stderr, "usage: bench_store [--quick] [--workers N] [--minutes M] [--days D] "
                  "[--util PCT] [--no-peer] [--sources] [--v2-only] [--dir DIR]\n");
  exit(2);
}

static ember_store_t *open_fresh(const char *path, size_t map) {
  char lock[600], err[256];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
  ember_store_opts_t o = {.map_size = map};
  ember_store_t *s = NULL;
  int rc = ember_store_open(path, &o, &s, err, sizeof err);
  if (rc) {
    fprintf(stderr, "bench_store: %s\n", err);
    exit(1);
  }
  return s;
}

static double merge_best(ember_store_t *s, const char *worker, int64_t from, int64_t to,
                         size_t *nstacks) {
  ember_store_selector_t sel = {.worker = worker};
  double best = 1e9;
  for (int i = 0; i < 5; i++) {
    ember_profile_t *p = NULL;
    double t0 = mono_s();
    int rc = ember_store_merge(s, &sel, from, to, EMBER_VT_CPU_SAMPLES, &p);
    double t = mono_s() - t0;
    if (rc) die("merge", rc);
    *nstacks = ember_profile_nstacks(p);
    ember_profile_free(p);
    if (t < best) best = t;
  }
  return best;
}

/* One ingest of the stream (wire version 1 or 2) into its own store. */
typedef struct ingest {
  int version;
  size_t threads; /* decode threads (0: the writer's thread decodes) */
  ember__dpool_t *pool;
  ember_store_t *s;
  ember_buf_t *msgs;
  double wall, cpu, dec_cpu, commit_cpu, proc_cpu;
  uint64_t wire_bytes, zstd_bytes;
  /* With decode threads: the batch decoded last time, written while the
   * next one decodes (as the collector's writer thread does). */
  ember_wire_t **views[2];
  size_t prev_n;
  int flip;
} ingest_t;

/* What the collector does with a batch of n messages: decode each into a
 * view (ember_wire_decode reads v1 and v2) and verify its hashes, one
 * write, free. */
typedef struct job {
  const ember_buf_t *msg;
  ember_wire_t **out;
  int version;
} job_t;

static void decode_one(void *arg) {
  const job_t *j = arg;
  char err[256];
  if (ember_wire_decode(j->msg->data, j->msg->len, NULL, j->out, err, sizeof err) != 0 ||
      ember_wire_verify_hashes(*j->out, err, sizeof err) != 0) {
    fprintf(stderr, "bench_store: decode v%d: %s\n", j->version, err);
    exit(1);
  }
}

static double proc_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void write_views(ingest_t *g, ember_wire_t **views, size_t n,
                        const ember_store_source_t *srcs, const int64_t *next_off, int nparts) {
  ember_store_write_result_t r;
  int rc = ember_store_write_wire(g->s, views, srcs, n, &r);
  if (rc) {
    fprintf(stderr, "bench_store: write v%d: %s %s\n", g->version, ember_strerror(rc), r.why);
    exit(1);
  }
  if (r.written != n) die("write: not all written", EMBER_ECORRUPT);
  if (srcs) {
    double k0 = cpu_s();
    for (int32_t p = 0; p < nparts; p++) {
      rc = ember_store_committed(g->s, p, 0, next_off[p]);
      if (rc) die("committed", rc);
    }
    g->commit_cpu += cpu_s() - k0;
  }
  for (size_t i = 0; i < n; i++) ember_wire_free(views[i]);
}

static void ingest_batch(ingest_t *g, size_t n, const ember_store_source_t *srcs,
                         const int64_t *next_off, int nparts) {
  static job_t jobs[BATCH];
  double w0 = mono_s(), c0 = cpu_s(), p0 = proc_cpu_s();
  if (g->threads == 0) {
    /* One thread: decode, then write, as the collector with no decode
     * threads does; the split of the two is this thread's CPU. */
    ember_wire_t **views = g->views[0];
    for (size_t i = 0; i < n; i++) {
      jobs[i] = (job_t){&g->msgs[i], &views[i], g->version};
      decode_one(&jobs[i]);
    }
    double c1 = cpu_s();
    write_views(g, views, n, srcs, next_off, nparts);
    g->cpu += cpu_s() - c0;
    g->dec_cpu += c1 - c0;
  } else {
    /* As the collector: each message to the pool; meanwhile the batch
     * decoded last time is written on this thread (its writer). Sources
     * are only written by the one-thread ingests. */
    ember_wire_t **cur = g->views[g->flip], **prev = g->views[!g->flip];
    for (size_t i = 0; i < n; i++) {
      jobs[i] = (job_t){&g->msgs[i], &cur[i], g->version};
      ember__dpool_submit(g->pool, decode_one, &jobs[i]);
    }
    if (g->prev_n) write_views(g, prev, g->prev_n, NULL, next_off, nparts);
    ember__dpool_wait(g->pool);
    g->prev_n = n;
    g->flip = !g->flip;
  }
  g->wall += mono_s() - w0;
  g->proc_cpu += proc_cpu_s() - p0;
}

static void ingest_free(ingest_t *g) {
  ember_store_close(g->s);
  ember__dpool_free(g->pool);
  for (size_t i = 0; i < BATCH; i++) ember_buf_free(&g->msgs[i]);
  free(g->msgs);
  free(g->views[0]);
  free(g->views[1]);
}

/* The last batch a pipelined ingest holds. */
static void ingest_finish(ingest_t *g) {
  if (g->threads == 0 || g->prev_n == 0) return;
  double w0 = mono_s(), p0 = proc_cpu_s();
  write_views(g, g->views[!g->flip], g->prev_n, NULL, NULL, 0);
  g->prev_n = 0;
  g->wall += mono_s() - w0;
  g->proc_cpu += proc_cpu_s() - p0;
}

int main(int argc, char **argv) {
  ember__ingest_malloc_policy(); /* the collector's */
  uint64_t nworkers = 200, minutes = 60, days = 7;
  stream_util_pct = 0;
  bool peer = true, with_sources = false, v2_only = false;
  const char *dir = "/tmp";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      minutes = 10;
      days = 1;
    } else if (strcmp(argv[i], "--no-peer") == 0) {
      peer = false;
    } else if (strcmp(argv[i], "--sources") == 0) {
      with_sources = true;
    } else if (strcmp(argv[i], "--v2-only") == 0) {
      v2_only = true; /* one v2 ingest on the writer's thread: for profilers */
    } else if (i + 1 < argc && strcmp(argv[i], "--workers") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100000, &nworkers)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--minutes") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100000, &minutes)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--days") == 0) {
      if (ember_parse_u64(argv[++i], 0, 30, &days)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--util") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100, &stream_util_pct)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--dir") == 0) {
      dir = argv[++i];
    } else {
      usage();
    }
  }
  stream_init();
  stream_worker_t *ws = calloc(nworkers, sizeof *ws);
  for (size_t i = 0; i < nworkers; i++) stream_make_worker(&ws[i], i);

  /* --- ingest: v1 and v2 side by side --- */
  /* Each batch of windows is made once and encoded both ways; then the v1
   * messages are ingested into one store and the v2 messages into
   * another, one after the other, each timed on its own. Both stores see
   * the same stream, and the CPU caches are shared alike. */
  char path[512], path2[512];
  snprintf(path, sizeof path, "%s/bench_store_%ld.lmdb", dir, (long)getpid());
  snprintf(path2, sizeof path2, "%s/bench_store_%ld_v2.lmdb", dir, (long)getpid());
  ingest_t in[3] = {{.version = 1}, {.version = 2}, {.version = 2, .threads = 2}};
  char path3[512];
  snprintf(path3, sizeof path3, "%s/bench_store_%ld_v2t.lmdb", dir, (long)getpid());
  in[0].s = open_fresh(path, (size_t)16 << 30);
  in[1].s = open_fresh(path2, (size_t)16 << 30);
  in[2].s = open_fresh(path3, (size_t)16 << 30);
  for (int v = 0; v < 3; v++)
    if (ember__dpool_new(in[v].threads, BATCH, &in[v].pool) != 0) die("decode pool", -ENOMEM);
  size_t steps = (size_t)(minutes * 6), total = steps * nworkers, done = 0;
  for (int v = 0; v < 3; v++) {
    in[v].views[0] = calloc(BATCH, sizeof *in[v].views[0]);
    in[v].views[1] = calloc(BATCH, sizeof *in[v].views[1]);
    in[v].msgs = calloc(BATCH, sizeof *in[v].msgs);
    for (size_t i = 0; i < BATCH; i++) ember_buf_init(&in[v].msgs[i], 1u << 26);
  }
  enum { NPARTS = 12 };
  ember_store_source_t *srcs = calloc(BATCH, sizeof *srcs);
  int64_t next_off[NPARTS] = {0};
  ember_buf_t pp;
  ember_buf_init(&pp, 1u << 28);
  uint64_t samples = 0, pp_bytes = 0, pp_samples = 0, pp_windows = 0;
  size_t distinct = 0;
  ZSTD_CCtx *zc = ZSTD_createCCtx();
  size_t zcap = ZSTD_compressBound(1u << 26);
  void *zbuf = malloc(zcap);
  if (zc == NULL || zbuf == NULL) die("zstd", -ENOMEM);
  while (done < total) {
    size_t n = total - done < BATCH ? total - done : BATCH;
    for (size_t i = 0; i < n; i++) {
      size_t k = done + i, widx = k % nworkers;
      uint64_t ns = 0;
      ember_profile_t *p = stream_window(&ws[widx], widx, T0 + (int64_t)(k / nworkers) * WIN, &ns);
      samples += ns;
      distinct += ember_profile_nstacks(p);
      for (int v = 0; v < 3; v++) {
        ember_buf_reset(&in[v].msgs[i]);
        int rc = v == 0 ? ember_codec_encode(p, &in[v].msgs[i])
                        : ember_codec_encode_v2(p, &in[v].msgs[i]);
        if (rc) die("encode", rc);
        in[v].wire_bytes += in[v].msgs[i].len;
      }
      int32_t part = (int32_t)(widx % NPARTS);
      srcs[i] = (ember_store_source_t){part, next_off[part]++, 0, T0};
      /* The pprof.gz peer size and each message compressed alone as Kafka
       * would (zstd's default level), from every 20th window, a different
       * set of workers at each step (doing all of them would take longer
       * than the ingest). */
      if ((k + k / nworkers) % 20 == 0) {
        ember_buf_reset(&pp);
        int rc = ember_export_pprof(p, &pp);
        if (rc) die("export", rc);
        pp_bytes += pp.len;
        pp_samples += ns;
        pp_windows++;
        for (int v = 0; v < 2; v++) {
          size_t z = ZSTD_compressCCtx(zc, zbuf, zcap, in[v].msgs[i].data, in[v].msgs[i].len, 3);
          if (ZSTD_isError(z)) die("zstd", EMBER_ECORRUPT);
          in[v].zstd_bytes += z;
        }
      }
      ember_profile_free(p);
    }
    for (int v = 0; v < 3; v++)
      if (!v2_only || v == 1) ingest_batch(&in[v], n, with_sources ? srcs : NULL, next_off, NPARTS);
    done += n;
  }
  for (int v = 0; v < 3; v++)
    if (!v2_only || v == 1) ingest_finish(&in[v]);
  ZSTD_freeCCtx(zc);
  free(zbuf);
  printf("bench_store: %llu workers x %llu min of 10 s windows = %zu profiles, %llu samples "
         "(%.0f per window, %.0f distinct stacks per window), batches of %d\n",
         (unsigned long long)nworkers, (unsigned long long)minutes, total,
         (unsigned long long)samples, (double)samples / (double)total,
         (double)distinct / (double)total, BATCH);
  double pp_per = (double)pp_bytes / (double)pp_samples;
  printf("peer pprof.gz per window: %.2f bytes/sample (%llu windows sampled, %.0f bytes each)\n",
         pp_per, (unsigned long long)pp_windows, (double)pp_bytes / (double)pp_windows);
  for (int v = 0; v < 3; v++) {
    ingest_t *g = &in[v];
    if (v2_only && v != 1) {
      ingest_free(g);
      continue;
    }
    if (g->threads) {
      printf("wire v%d, %zu decode threads, writing one batch while the next decodes: ingest %.0f "
             "profiles/s wall (%.2f cores busy: %.0f "
             "profiles/s per core of process CPU)\n",
             g->version, g->threads, (double)total / g->wall, g->proc_cpu / g->wall,
             (double)total / g->proc_cpu);
      ingest_free(g);
      continue;
    }
    printf("wire v%d: ingest (decode + write) %.0f profiles/s per core (thread CPU), %.0f "
           "profiles/s wall; %.0f samples/s per core\n",
           g->version, (double)total / g->cpu, (double)total / g->wall, (double)samples / g->cpu);
    printf("  of which decode %.1f us/profile, write %.1f us/profile (CPU)\n",
           g->dec_cpu / (double)total * 1e6, (g->cpu - g->dec_cpu) / (double)total * 1e6);
    if (with_sources)
      printf("  with sources (%d partitions), of which committed %.1f us/profile\n", NPARTS,
             g->commit_cpu / (double)total * 1e6);
    printf("  wire %.1f bytes/sample, %.1f after zstd (per message, level 3) = %.3f of "
           "pprof.gz\n",
           (double)g->wire_bytes / (double)samples, (double)g->zstd_bytes / (double)pp_samples,
           (double)g->zstd_bytes / (double)pp_bytes);
    ember_store_stats_t st;
    int rc = ember_store_stats(g->s, &st);
    if (rc) die("stats", rc);
    printf("  store %.1f MiB = %.2f bytes/sample (%llu series, %llu frames, %llu stacks, "
           "%llu rows, %llu hour and %llu minute rollup rows); store/pprof.gz = %.3f\n",
           (double)st.file_bytes / 1048576.0, (double)st.file_bytes / (double)samples,
           (unsigned long long)st.series, (unsigned long long)st.frames,
           (unsigned long long)st.stacks, (unsigned long long)st.profile_rows,
           (unsigned long long)st.rollup_rows, (unsigned long long)st.rollup_1m_rows,
           ((double)st.file_bytes / (double)samples) / pp_per);
    ingest_free(g);
  }
  free(srcs);
  const char *paths[3] = {path, path2, path3};
  for (int v = 0; v < 3; v++) {
    char lock[600];
    snprintf(lock, sizeof lock, "%s-lock", paths[v]);
    unlink(paths[v]);
    unlink(lock);
  }

  if (days == 0) {
    ember_buf_free(&pp);
    return 0;
  }
  /* --- merge: one worker over `days` --- */
  ember_store_t *s = open_fresh(path, (size_t)16 << 30);
  ember_profile_t *batch[BATCH];
  int rc;
  const stream_worker_t *w = &ws[0];
  size_t nwin = (size_t)(days * 8640);
  double wt0 = mono_s();
  for (size_t k = 0; k < nwin;) {
    size_t n = nwin - k < BATCH ? nwin - k : BATCH;
    for (size_t i = 0; i < n; i++) {
      uint64_t ns;
      batch[i] = stream_window(w, 0, T0 + (int64_t)(k + i) * WIN, &ns);
    }
    rc = ember_store_write(s, batch, n, NULL);
    if (rc) die("write", rc);
    for (size_t i = 0; i < n; i++) ember_profile_free(batch[i]);
    k += n;
  }
  double wt = mono_s() - wt0;
  int64_t end = T0 + (int64_t)nwin * WIN;
  /* Ragged ends, as "the last 24 h" asked at 13:07:23 has. */
  int64_t rag = 7 * 60 * SEC + 23 * SEC;
  size_t ns24 = 0, nsall = 0, ns24a = 0;
  double m24 = merge_best(s, w->name, end - 86400 * SEC - rag, end - rag, &ns24);
  double m24a = merge_best(s, w->name, end - 86400 * SEC, end, &ns24a);
  double mall = merge_best(s, w->name, T0 + rag, end - rag, &nsall);
  printf("merge one worker (%zu windows written in %.1f s, incl. generating them):\n", nwin, wt);
  printf("  24 h, ragged ends: %.2f ms (%zu stacks); 24 h on hour boundaries: %.2f ms\n", m24 * 1e3,
         ns24, m24a * 1e3);
  printf("  %llu d, ragged ends: %.2f ms (%zu stacks)\n", (unsigned long long)days, mall * 1e3,
         nsall);
  ember_store_close(s);
  char lock[600];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);

  /* --- the peer: go tool pprof -proto over the last 24 h as files --- */
  const char *go = peer ? go_binary() : NULL;
  if (peer && !go) printf("peer: no go binary found (PATH, /usr/local/go/bin/go); skipped\n");
  if (go) {
    char pdir[512];
    snprintf(pdir, sizeof pdir, "%s/bench_store_pprof_%ld", dir, (long)getpid());
    if (mkdir(pdir, 0700) != 0 && errno != EEXIST) die("mkdir", -errno);
    size_t nfiles = 8640;
    uint64_t fbytes = 0;
    for (size_t i = 0; i < nfiles; i++) {
      uint64_t ns;
      ember_profile_t *p = stream_window(w, 0, end - 86400 * SEC + (int64_t)i * WIN, &ns);
      ember_buf_reset(&pp);
      rc = ember_export_pprof(p, &pp);
      if (rc) die("export", rc);
      ember_profile_free(p);
      char f[600];
      snprintf(f, sizeof f, "%s/%zu.pb.gz", pdir, i);
      FILE *fp = fopen(f, "wb");
      if (!fp || fwrite(pp.data, 1, pp.len, fp) != pp.len || fclose(fp) != 0)
        die("write pprof file", -EIO);
      fbytes += pp.len;
    }
    double warm = run_pprof(go, pdir, 1);
    double t = warm < 0 ? -1 : run_pprof(go, pdir, nfiles);
    if (t < 0)
      printf("peer: go tool pprof failed (see %s/pprof.err)\n", pdir);
    else
      printf("peer: go tool pprof -proto over the same worker's last 24 h as %zu pprof.gz files "
             "(%.1f MiB): %.2f s (warm-up run with 1 file: %.1f s); 7 d not run (60,480 "
             "files would take longer to write than this benchmark's budget)\n",
             nfiles, (double)fbytes / 1048576.0, t, warm);
    for (size_t i = 0; i < nfiles; i++) {
      char f[600];
      snprintf(f, sizeof f, "%s/%zu.pb.gz", pdir, i);
      unlink(f);
    }
    char f[600];
    snprintf(f, sizeof f, "%s/merged.pb.gz", pdir);
    unlink(f);
    snprintf(f, sizeof f, "%s/pprof.err", pdir);
    unlink(f);
    rmdir(pdir);
  }
  ember_buf_free(&pp);
  return 0;
}
