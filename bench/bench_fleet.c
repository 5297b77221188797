/* Fleet query benchmark (issue 13): a 24 h merge answered by fan-out over 3
 * shard stores against one store holding every window; the goal is that
 * fan-out adds under 20 ms to the 24 h merge.
 *
 *   bench_fleet [--workers N] [--minutes M] [--reps R] [--dir DIR]
 *
 * One process. bench_store's stream (bench/stream.h; default 200 workers,
 * 24 h 15 min of 10 s windows) is written, in batches of 1,000 with
 * ember_store_write_from (each worker's windows on one of 4 partitions by
 * a hash of its name, the same (partition, offset) in every store, each
 * batch followed by ember_store_committed as after a Kafka commit), into a
 * full store and into one of 3 shard stores: partitions 0-1 in A, 2 in B,
 * 3 in C. Three in-process API servers (ember__api_start on 127.0.0.1,
 * port 0) serve the shards from their own stores (fleetq NULL); a
 * coordinator's fleet query (ember__fleetq_merge) runs on store A with a
 * peer table holding A (self), B and C, group "g", live, their runs as
 * ember_store_runs gives them, so B and C are asked over HTTP exactly as a
 * collector asks its peers.
 *
 * Measured, best of R (default 5), ragged 24 h range (not on hour
 * boundaries, as bench_store): one worker and all workers (sel NULL),
 * ember_store_merge on the full store against ember__fleetq_merge; their
 * totals and stack counts must be equal (else exit 1). Then where the
 * fan-out's time goes, each part best of R: A's own merge, the peers'
 * work as their API does it (ember_store_merge + ember_codec_encode, run
 * here directly on B's and C's stores), the HTTP round trip of both peers
 * in parallel (ember__fanout_get, which includes the peers' work), the
 * same round trip for a range holding nothing (the fixed cost of HTTP),
 * decoding each peer's wire profile, and merging both into A's. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "api.h"
#include "ember/codec.h"
#include "ember/ember.h"
#include "ember/parse.h"
#include "ember/store.h"
#include "fanout.h"
#include "fleetq.h"
#include "member.h"
#include "peers.h"
#include "stream.h"

#define SEC    STREAM_SEC
#define BATCH  1000
#define NPARTS 4
#define NSHARD 3

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_fleet: %s: %s\n", what, ember_strerror(rc));
  exit(1);
}

static double mono_s(void) { return (double)ember_time_mono_ns() / 1e9; }

/* The partition of a worker, as a keyed Kafka producer picks one: a hash
 * of the key (the worker) modulo the partitions (FNV-1a here). */
static int32_t partition_of(const char *worker) {
  uint32_t h = 2166136261u;
  for (const char *c = worker; *c; c++) h = (h ^ (uint8_t)*c) * 16777619u;
  return (int32_t)(h % NPARTS);
}
static size_t shard_of(int32_t part) { return part <= 1 ? 0 : (size_t)part - 1; }

static ember_store_t *open_fresh(const char *path) {
  char lock[2100], err[256];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
  /* no_sync: the merges read what is written; fsync would only make the
   * generation slower. */
  ember_store_opts_t o = {
      .map_size = (size_t)4 << 30, .max_size = (size_t)64 << 30, .no_sync = true};
  ember_store_t *s = NULL;
  if (ember_store_open(path, &o, &s, err, sizeof err) != 0) {
    fprintf(stderr, "bench_fleet: %s\n", err);
    exit(1);
  }
  return s;
}

static void remove_store(const char *path) {
  char lock[2100];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
}

/* Write n profiles with their sources, then commit every partition up to
 * its next offset. */
static void write_batch(ember_store_t *s, ember_profile_t **p, const ember_store_source_t *src,
                        size_t n, const int64_t *next_off) {
  if (n == 0) return;
  ember_store_write_result_t r;
  int rc = ember_store_write_from(s, p, src, n, &r);
  if (rc) die("write", rc);
  if (r.written != n) die("write: not all written", EMBER_ECORRUPT);
  for (int32_t k = 0; k < NPARTS; k++) {
    rc = ember_store_committed(s, k, 0, next_off[k]);
    if (rc) die("committed", rc);
  }
}

/* A peer table record for a shard: its runs as its store holds them, its
 * partitions assigned, announced now with the longest interval (so it
 * stays live for the whole run). */
static void put_peer(ember__peers_t *peers, ember_store_t *s, const char *id, const char *url,
                     const int32_t *assigned, size_t nassigned, int64_t now) {
  ember_collector_run_t *cr = NULL;
  size_t nruns = 0;
  int rc = ember__member_store_runs(s, &cr, &nruns);
  if (rc) die("runs", rc);
  ember_collector_info_t rec = {.id = (char *)(uintptr_t)id,
                                .group_id = (char *)(uintptr_t) "g",
                                .api_url = (char *)(uintptr_t)url,
                                .started_ns = now,
                                .announced_ns = now,
                                .seq = 1,
                                .interval_ms = EMBER_COLLECTOR_MAX_INTERVAL_MS,
                                .runs = cr,
                                .nruns = nruns,
                                .assigned = (int32_t *)(uintptr_t)assigned,
                                .nassigned = nassigned};
  rc = ember__peers_put(peers, &rec, now);
  if (rc) die("peers_put", rc);
  ember_free(cr);
}

typedef struct answer {
  double best;
  int64_t total;
  size_t nstacks, nframes;
} answer_t;

static void note(answer_t *a, double t, ember_profile_t *p) {
  if (t < a->best) a->best = t;
  a->total = ember_profile_total(p, 0);
  a->nstacks = ember_profile_nstacks(p);
  a->nframes = ember_profile_nframes(p);
  ember_profile_free(p);
}

static answer_t merge_best(ember_store_t *s, const ember_store_selector_t *sel, int64_t from,
                           int64_t to, int reps) {
  answer_t a = {.best = 1e9};
  for (int i = 0; i < reps; i++) {
    ember_profile_t *p = NULL;
    double t0 = mono_s();
    int rc = ember_store_merge(s, sel, from, to, EMBER_VT_CPU_SAMPLES, &p);
    double t = mono_s() - t0;
    if (rc) die("merge", rc);
    note(&a, t, p);
  }
  return a;
}

static answer_t fleet_best(const ember__fleetq_t *f, ember_store_t *own,
                           const ember_store_selector_t *sel, int64_t from, int64_t to, int reps) {
  answer_t a = {.best = 1e9};
  for (int i = 0; i < reps; i++) {
    ember_profile_t *p = NULL;
    char partial[512];
    double t0 = mono_s();
    int rc = ember__fleetq_merge(f, own, sel, from, to, EMBER_VT_CPU_SAMPLES, &p, partial,
                                 sizeof partial);
    double t = mono_s() - t0;
    if (rc) die("fleet merge", rc);
    if (partial[0]) {
      fprintf(stderr, "bench_fleet: fleet answer is partial: %s\n", partial);
      exit(1);
    }
    note(&a, t, p);
  }
  return a;
}

/* The URL a coordinator sends a peer for this merge (as fleetq.c builds
 * it; the stream's worker names need no escaping). */
static void peer_url(char *out, size_t size, uint16_t port, const char *worker, int64_t from,
                     int64_t to) {
  int n = snprintf(out, size,
                   "http://127.0.0.1:%u/api/v1/profile?local=1&format=ember&raw=cpu_samples"
                   "&from=%" PRId64 ".%09" PRId64 "&to=%" PRId64 ".%09" PRId64,
                   (unsigned)port, (int64_t)(from / SEC), (int64_t)(from % SEC),
                   (int64_t)(to / SEC), (int64_t)(to % SEC));
  if (worker && n > 0 && (size_t)n < size)
    snprintf(out + n, size - (size_t)n, "&worker=%s", worker);
}

/* Where the fan-out's time goes, for one selection. */
static void split(const char *what, ember_store_t *const *shard, const uint16_t *port,
                  const ember_store_selector_t *sel, int64_t from, int64_t to, int reps,
                  double fleet_best_s, double full_best_s) {
  const char *worker = sel ? sel->worker : NULL;
  double own = 1e9, srv[2] = {1e9, 1e9}, fetch = 1e9, empty = 1e9, dec[2] = {1e9, 1e9}, mrg = 1e9;
  size_t bytes[2] = {0, 0};
  char urls[2][512], eurls[2][512];
  ember__fetch_t f[2];
  for (size_t k = 0; k < 2; k++) {
    peer_url(urls[k], sizeof urls[k], port[k + 1], worker, from, to);
    /* A day in 2026-01: nothing stored, so only the HTTP round trip and
     * an empty profile. */
    peer_url(eurls[k], sizeof eurls[k], port[k + 1], worker, STREAM_T0 - 300 * 86400 * SEC,
             STREAM_T0 - 299 * 86400 * SEC);
  }
  for (int i = 0; i < reps; i++) {
    /* A's own merge (kept for the merge step below). */
    ember_profile_t *acc = NULL;
    double t0 = mono_s();
    int rc = ember_store_merge(shard[0], sel, from, to, EMBER_VT_CPU_SAMPLES, &acc);
    double t = mono_s() - t0;
    if (rc) die("merge A", rc);
    if (t < own) own = t;
    /* The peers' work, as api_profiles.c answers raw=: merge + encode. */
    for (size_t k = 0; k < 2; k++) {
      ember_profile_t *p = NULL;
      ember_buf_t b;
      ember_buf_init(&b, (size_t)1 << 30);
      t0 = mono_s();
      rc = ember_store_merge(shard[k + 1], sel, from, to, EMBER_VT_CPU_SAMPLES, &p);
      if (rc == 0) rc = ember_codec_encode(p, &b);
      t = mono_s() - t0;
      if (rc) die("peer merge + encode", rc);
      if (t < srv[k]) srv[k] = t;
      ember_profile_free(p);
      ember_buf_free(&b);
    }
    /* HTTP for nothing, then for the answers. */
    for (size_t k = 0; k < 2; k++) f[k] = (ember__fetch_t){.url = eurls[k]};
    t0 = mono_s();
    rc = ember__fanout_get(f, 2, NULL, 30000, (size_t)1 << 30);
    t = mono_s() - t0;
    if (rc) die("fanout (empty)", rc);
    if (f[0].status != 200 || f[1].status != 200) die("fanout (empty): not 200", EMBER_ECORRUPT);
    if (t < empty) empty = t;
    ember__fanout_free(f, 2);
    for (size_t k = 0; k < 2; k++) f[k] = (ember__fetch_t){.url = urls[k]};
    t0 = mono_s();
    rc = ember__fanout_get(f, 2, NULL, 30000, (size_t)1 << 30);
    t = mono_s() - t0;
    if (rc) die("fanout", rc);
    if (f[0].status != 200 || f[1].status != 200) {
      fprintf(stderr, "bench_fleet: fanout: %s / %s\n", f[0].err, f[1].err);
      exit(1);
    }
    if (t < fetch) fetch = t;
    /* Decode each peer's wire profile, then merge both into A's. */
    ember_profile_t *p[2] = {NULL, NULL};
    for (size_t k = 0; k < 2; k++) {
      ember_codec_limits_t lim;
      ember_codec_limits_default(&lim);
      lim.max_message = (size_t)1 << 30;
      char err[256];
      bytes[k] = f[k].body.len;
      t0 = mono_s();
      rc = ember_codec_decode(f[k].body.data, f[k].body.len, &lim, &p[k], err, sizeof err);
      t = mono_s() - t0;
      if (rc) {
        fprintf(stderr, "bench_fleet: decode: %s\n", err);
        exit(1);
      }
      if (t < dec[k]) dec[k] = t;
    }
    ember__fanout_free(f, 2);
    t0 = mono_s();
    for (size_t k = 0; k < 2 && rc == 0; k++) rc = ember_profile_merge(acc, p[k]);
    t = mono_s() - t0;
    if (rc) die("profile merge", rc);
    if (t < mrg) mrg = t;
    for (size_t k = 0; k < 2; k++) ember_profile_free(p[k]);
    ember_profile_free(acc);
  }
  double sum = fetch + own + dec[0] + dec[1] + mrg;
  printf("  split, %s (each part best of %d):\n", what, reps);
  printf("    A's own merge                          %8.2f ms\n", own * 1e3);
  printf("    peers' work (merge + encode), B / C    %8.2f / %.2f ms (done by the peers, in "
         "parallel)\n",
         srv[0] * 1e3, srv[1] * 1e3);
  printf("    HTTP, both peers in parallel, answers  %8.2f ms (incl. the peers' work); "
         "answer bytes B %zu, C %zu\n",
         fetch * 1e3, bytes[0], bytes[1]);
  printf("    HTTP, both peers, empty range          %8.2f ms (fixed cost of a round trip)\n",
         empty * 1e3);
  printf("    decode B / C                           %8.2f / %.2f ms\n", dec[0] * 1e3,
         dec[1] * 1e3);
  printf("    merge B + C into A's                   %8.2f ms\n", mrg * 1e3);
  printf("    sum (HTTP + own + decode + merge)      %8.2f ms; fleet merge measured %.2f ms; "
         "one store %.2f ms\n",
         sum * 1e3, fleet_best_s * 1e3, full_best_s * 1e3);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_fleet [--workers N] [--minutes M] [--reps R] [--dir DIR]\n");
  exit(2);
}

int main(int argc, char **argv) {
  uint64_t nworkers = 200, minutes = 24 * 60 + 15, reps = 5;
  const char *dir = "/tmp";
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--workers") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100000, &nworkers)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--minutes") == 0) {
      if (ember_parse_u64(argv[++i], 24 * 60 + 8, 100000, &minutes)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) {
      if (ember_parse_u64(argv[++i], 1, 1000, &reps)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--dir") == 0) {
      dir = argv[++i];
    } else {
      usage();
    }
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) die("curl_global_init", -ENOMEM);
  stream_init();
  stream_worker_t *ws = calloc(nworkers, sizeof *ws);
  int32_t *wpart = calloc(nworkers, sizeof *wpart);
  if (!ws || !wpart) die("calloc", -ENOMEM);
  for (size_t i = 0; i < nworkers; i++) {
    stream_make_worker(&ws[i], i);
    wpart[i] = partition_of(ws[i].name);
  }

  /* --- the stores: full, and shards A, B, C --- */
  static const char *const names[NSHARD + 1] = {"full", "a", "b", "c"};
  char paths[NSHARD + 1][512];
  ember_store_t *st[NSHARD + 1];
  for (size_t k = 0; k <= NSHARD; k++) {
    snprintf(paths[k], sizeof paths[k], "%s/bench_fleet_%ld_%s.lmdb", dir, (long)getpid(),
             names[k]);
    st[k] = open_fresh(paths[k]);
  }
  ember_store_t *full = st[0], *const *shard = &st[1];
  ember_profile_t **batch = calloc(BATCH, sizeof *batch);
  ember_profile_t **sb[NSHARD];
  ember_store_source_t *src = calloc(BATCH, sizeof *src), *ssrc[NSHARD];
  size_t sn[NSHARD];
  for (size_t k = 0; k < NSHARD; k++) {
    sb[k] = calloc(BATCH, sizeof *sb[k]);
    ssrc[k] = calloc(BATCH, sizeof *ssrc[k]);
    if (!sb[k] || !ssrc[k]) die("calloc", -ENOMEM);
  }
  if (!batch || !src) die("calloc", -ENOMEM);
  int64_t next_off[NPARTS] = {0};
  uint64_t shard_windows[NSHARD] = {0}, samples = 0;
  size_t steps = (size_t)(minutes * 6), total = steps * nworkers;
  double g0 = mono_s();
  for (size_t done = 0; done < total;) {
    size_t n = total - done < BATCH ? total - done : BATCH;
    memset(sn, 0, sizeof sn);
    for (size_t i = 0; i < n; i++) {
      size_t k = done + i, widx = k % nworkers;
      uint64_t ns = 0;
      batch[i] =
          stream_window(&ws[widx], widx, STREAM_T0 + (int64_t)(k / nworkers) * STREAM_WIN, &ns);
      samples += ns;
      int32_t part = wpart[widx];
      src[i] = (ember_store_source_t){part, next_off[part]++, 0, STREAM_T0};
      size_t h = shard_of(part);
      sb[h][sn[h]] = batch[i];
      ssrc[h][sn[h]++] = src[i];
      shard_windows[h]++;
    }
    write_batch(full, batch, src, n, next_off);
    for (size_t h = 0; h < NSHARD; h++) write_batch(shard[h], sb[h], ssrc[h], sn[h], next_off);
    for (size_t i = 0; i < n; i++) ember_profile_free(batch[i]);
    done += n;
  }
  double gen = mono_s() - g0;
  printf("bench_fleet: %llu workers x %llu min of 10 s windows = %zu windows, %llu samples, "
         "on %d partitions; written to the full store and to shards A (partitions 0-1: %llu "
         "windows), B (2: %llu), C (3: %llu) in %.0f s\n",
         (unsigned long long)nworkers, (unsigned long long)minutes, total,
         (unsigned long long)samples, NPARTS, (unsigned long long)shard_windows[0],
         (unsigned long long)shard_windows[1], (unsigned long long)shard_windows[2], gen);
  for (size_t k = 0; k <= NSHARD; k++) {
    ember_store_stats_t ss;
    int rc = ember_store_stats(st[k], &ss);
    if (rc) die("stats", rc);
    printf("  store %s: %.1f MiB, %llu series, %llu stacks\n", names[k],
           (double)ss.file_bytes / 1048576.0, (unsigned long long)ss.series,
           (unsigned long long)ss.stacks);
  }

  /* --- API servers on the shards, and the coordinator on A --- */
  ember__api_t *api[NSHARD];
  uint16_t port[NSHARD];
  char url[NSHARD][64];
  for (size_t k = 0; k < NSHARD; k++) {
    ember__api_opts_t o = {
        .listen = "127.0.0.1:0", .store = shard[k], .threads = 2, .max_response = (size_t)1 << 30};
    char err[256] = "";
    int rc = ember__api_start(&o, &api[k], err, sizeof err);
    if (rc) {
      fprintf(stderr, "bench_fleet: api start: %s\n", err);
      return 1;
    }
    port[k] = ember__api_port(api[k]);
    snprintf(url[k], sizeof url[k], "http://127.0.0.1:%u", (unsigned)port[k]);
  }
  ember__peers_t *peers = NULL;
  int rc = ember__peers_new(&peers);
  if (rc == 0) rc = ember__peers_set_self(peers, "shard-a");
  if (rc) die("peers", rc);
  static const int32_t assigned_a[] = {0, 1}, assigned_b[] = {2}, assigned_c[] = {3};
  int64_t now = ember_time_now_ns();
  put_peer(peers, shard[0], "shard-a", url[0], assigned_a, 2, now);
  put_peer(peers, shard[1], "shard-b", url[1], assigned_b, 1, now);
  put_peer(peers, shard[2], "shard-c", url[2], assigned_c, 1, now);
  /* Timeout and body limit as the collector's defaults (fleet.peer_timeout
   * 5 s; 1 GiB). */
  ember__fleetq_t fq = {.o = {.peers = peers, .timeout_ms = 5000, .max_body = (size_t)1 << 30}};

  /* --- merges: ragged 24 h, as "the last 24 h" asked at 13:07:23 --- */
  int64_t end = STREAM_T0 + (int64_t)steps * STREAM_WIN;
  int64_t rag = 7 * 60 * SEC + 23 * SEC;
  int64_t to = end - rag, from = to - 86400 * SEC;
  int r = (int)reps;
  ember_store_selector_t one = {.worker = ws[0].name};
  time_t wall = time(NULL);
  struct tm tm;
  char when[32] = "?";
  if (gmtime_r(&wall, &tm)) strftime(when, sizeof when, "%H:%M:%S UTC", &tm);
  printf("merges over 24 h, ragged ends, value cpu_samples, best of %d (started %s):\n", r, when);
  int bad = 0;
  for (int which = 0; which < 2; which++) {
    const ember_store_selector_t *sel = which == 0 ? &one : NULL;
    char what[64];
    if (which == 0)
      snprintf(what, sizeof what, "one worker (%s, shard %c)", ws[0].name,
               "ABC"[shard_of(wpart[0])]);
    else
      snprintf(what, sizeof what, "all %llu workers", (unsigned long long)nworkers);
    answer_t a = merge_best(full, sel, from, to, r);
    answer_t b = fleet_best(&fq, shard[0], sel, from, to, r);
    bool equal = a.total == b.total && a.nstacks == b.nstacks && a.nframes == b.nframes;
    bad |= !equal;
    printf("%s:\n", what);
    printf("  one store: %8.2f ms  total %" PRId64 " samples, %zu stacks, %zu frames\n",
           a.best * 1e3, a.total, a.nstacks, a.nframes);
    printf("  fan-out:   %8.2f ms  total %" PRId64 " samples, %zu stacks, %zu frames  %s\n",
           b.best * 1e3, b.total, b.nstacks, b.nframes, equal ? "EQUAL" : "DIFFERENT");
    printf("  added by fan-out: %.2f ms (goal < 20 ms: %s)\n", (b.best - a.best) * 1e3,
           b.best - a.best < 0.020 ? "met" : "NOT met");
    split(what, shard, port, sel, from, to, r, b.best, a.best);
  }

  for (size_t k = 0; k < NSHARD; k++) ember__api_stop(api[k]);
  ember__peers_free(peers);
  for (size_t k = 0; k <= NSHARD; k++) {
    ember_store_close(st[k]);
    remove_store(paths[k]);
  }
  for (size_t k = 0; k < NSHARD; k++) {
    free(sb[k]);
    free(ssrc[k]);
  }
  free(batch);
  free(src);
  free(wpart);
  free(ws);
  curl_global_cleanup();
  return bad ? 1 : 0;
}
