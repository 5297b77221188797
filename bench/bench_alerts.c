/* Alert evaluation benchmark (issue 12): the engine's rounds
 * (collector/alerts.h, ember__alerts_round) for 1,000 rules over 200
 * workers, one round after each 10 s window, as time per round and as a
 * share of one core; goal under 1% of a core (per-round CPU / 10 s).
 *
 *   bench_alerts [--workers N] [--rounds R] [--naive-rounds K] [--util PCT]
 *                [--no-breakdown] [--dir DIR]
 *
 * The store: a real LMDB store (DIR, default /tmp; removed at the end)
 * with N workers (default 200) on 2 hosts each (2N series), 3 versions,
 * 1-4 CPUs each, holding 1 h 1 min of 10 s windows per series before the
 * first round (the 1 h baseline's history plus a margin). Windows are made
 * by bench/stream.c (as for bench_store): each worker has 500 distinct stacks of
 * depth 5-30 (a shared libc/runtime part at the root, the worker's own
 * frames at the leaf, every frame with function, file, module, build id),
 * a window draws 19 Hz x CPUs x 10 s x utilisation samples (10-30% by
 * default: about 20-230, a few dozen distinct stacks) Zipf-like from them,
 * with values CPU samples and CPU ns. Four workers spike (90% of their
 * CPUs, 70% of it in one function) for 15 windows in the middle of the
 * run, so rules go pending, fire (with what changed computed) and resolve
 * as they would in production.
 *
 * The rules (1,000 for 200 workers, scaled with N), each worker has:
 *   3 above rules (exact worker): above 1.0 x CPUs for 30 s; above 0.7 x
 *     CPUs for 1 m grouped by host; above 0.8 x CPUs on one host for 20 s;
 *   1 baseline rule: 3x the 1 h median, floor 0.1 cores, for 30 s;
 * every second worker 1 function rule (its hottest leaf function, or the
 * spiking one, above 50% for 20 s); and N/2 glob rules ("*", "api-*", ...
 * "render-*") grouped by host, 4 in 5 above (2-6 cores), 1 in 5 baseline.
 *
 * The run: the rules are added through the API call (so they are also
 * stored), the first round reads the whole history (the fill); then R
 * rounds (default 60), before each of which the next window of every
 * series is written as ingest would (not timed). Each round is timed in
 * wall and thread CPU time (CLOCK_THREAD_CPUTIME_ID: the engine runs on
 * the caller's thread; the machine may be shared, so CPU time is the
 * figure). The breakdown repeats each round's evaluation outside the
 * engine with the same calls (alert_eval.h): the store read
 * (ember__ahist_update), the per-rule aggregation (ember__ahist_groups)
 * and the function rules' profile merges; the engine's rest (state steps,
 * alert documents, notifications) is the difference.
 *
 * The reference (no external program evaluates these rules): the naive
 * approach the engine's in-memory history avoids, run K times (default 5)
 * on the final data: each rule reads its own selection from the store
 * every round (ember_store_cpu_timelines with the rule's selector, all
 * series for a glob, filtered by it) and aggregates that; function rules
 * merge as the engine does. Two variants: each rule reads only what it
 * needs (the newest step; a baseline its period), and each rule reads the
 * trailing hour. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "alert_eval.h"
#include "alert_rule.h"
#include "alerts.h"
#include "ember/ember.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "ember/store.h"
#include "stream.h"

#define SEC      STREAM_SEC
#define T0       STREAM_T0
#define WIN      STREAM_WIN
#define NSTACKS  STREAM_NSTACKS
#define NHOSTS   STREAM_NHOSTS
#define PREFILL  366 /* 1 h 1 min of windows before the first round */
#define NSPIKE   4
#define SPIKE_AT 20 /* steady round the spike starts at */
#define SPIKE_N  15 /* windows it lasts */

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_alerts: %s: %s\n", what, ember_strerror(rc));
  exit(1);
}

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

/* --- the synthetic fleet: bench/stream.h's workers, each on 2 hosts --- */

typedef struct worker {
  stream_worker_t s;
  char host[2][16], agent[2][24];
  size_t hot_stack;   /* its most frequent stack */
  size_t spike_stack; /* the one a spike burns (an own leaf) */
  bool spikes;
} worker_t;

static void make_worker(worker_t *w, size_t idx, size_t nworkers) {
  stream_make_worker(&w->s, idx);
  for (size_t h = 0; h < 2; h++) {
    size_t host = (idx + h * 5) % NHOSTS;
    snprintf(w->host[h], sizeof w->host[h], "host-%02zu", host);
    snprintf(w->agent[h], sizeof w->agent[h], "agent-host-%02zu", host);
  }
  size_t every = nworkers / NSPIKE > 0 ? nworkers / NSPIKE : 1;
  w->spikes = idx % every == 0 && idx / every < NSPIKE;
  w->hot_stack = idx % NSTACKS; /* the stream's Zipf rank 0 maps here */
  w->spike_stack = (w->hot_stack + 250) % NSTACKS;
  while (w->s.frames[w->spike_stack][0] < STREAM_NSHARED)
    w->spike_stack = (w->spike_stack + 1) % NSTACKS;
}

static uint64_t agent_seq[NHOSTS];
static uint64_t util_lo = 10, util_span = 21; /* 10-30 % */
static uint64_t nsamples, nstacks_total, nwindows;

/* Window `k` (start T0 + k * WIN) of worker w on its host h: 10-30% of its
 * CPUs, or spiking: 90%, 70% of it in spike_stack. */
static ember_profile_t *make_window(const worker_t *w, size_t widx, size_t h, size_t k,
                                    bool spiking) {
  size_t host = (widx + h * 5) % NHOSTS;
  stream_shape_t shape = {.host = w->host[h],
                          .agent = w->agent[h],
                          .seq = &agent_seq[host],
                          .util_pct = spiking ? 90 : util_lo + stream_rand() % util_span,
                          .spike_pct = spiking ? 70 : 0,
                          .spike_stack = w->spike_stack};
  uint64_t n = 0;
  size_t distinct = 0;
  ember_profile_t *p =
      stream_window_shaped(&w->s, widx, T0 + (int64_t)k * WIN, &shape, &n, &distinct);
  nsamples += n;
  nstacks_total += distinct;
  nwindows++;
  return p;
}

/* Write window k of every series in one batch (one transaction). */
static void write_step(ember_store_t *s, const worker_t *ws, size_t nworkers, size_t k,
                       ember_profile_t **batch, bool spike) {
  size_t n = 0;
  for (size_t i = 0; i < nworkers; i++)
    for (size_t h = 0; h < 2; h++) batch[n++] = make_window(&ws[i], i, h, k, spike && ws[i].spikes);
  int rc = ember_store_write(s, batch, n, NULL);
  if (rc) die("write", rc);
  for (size_t i = 0; i < n; i++) ember_profile_free(batch[i]);
}

/* --- the rules --- */

typedef struct rules {
  json_t **json;
  ember__alert_rule_t **r;
  size_t n, cap;
  size_t kinds[4]; /* above exact, baseline exact, function, glob */
} rules_t;

static void rule_add(rules_t *rs, json_t *j, int kind) {
  if (j == NULL) die("json_pack", -ENOMEM);
  if (rs->n == rs->cap) {
    rs->cap = rs->cap ? rs->cap * 2 : 256;
    rs->json = realloc(rs->json, rs->cap * sizeof *rs->json);
    rs->r = realloc(rs->r, rs->cap * sizeof *rs->r);
  }
  char err[256];
  if (ember__alert_rule_from_json(j, &rs->r[rs->n], err, sizeof err) != 0) {
    fprintf(stderr, "bench_alerts: bad rule: %s\n", err);
    exit(1);
  }
  rs->json[rs->n++] = j;
  rs->kinds[kind]++;
}

static void make_rules(rules_t *rs, const worker_t *ws, size_t nworkers) {
  char name[64];
  for (size_t i = 0; i < nworkers; i++) {
    const worker_t *w = &ws[i];
    double c = w->s.cpus;
    snprintf(name, sizeof name, "busy-%s", w->s.name);
    rule_add(
        rs,
        json_pack("{s:s,s:s,s:f,s:s}", "name", name, "worker", w->s.name, "above", c, "for", "30s"),
        0);
    snprintf(name, sizeof name, "host-busy-%s", w->s.name);
    rule_add(rs,
             json_pack("{s:s,s:s,s:s,s:f,s:s}", "name", name, "worker", w->s.name, "group_by",
                       "host", "above", 0.7 * c, "for", "1m"),
             0);
    snprintf(name, sizeof name, "first-host-%s", w->s.name);
    rule_add(rs,
             json_pack("{s:s,s:s,s:s,s:f,s:s}", "name", name, "worker", w->s.name, "host",
                       w->host[0], "above", 0.8 * c, "for", "20s"),
             0);
    snprintf(name, sizeof name, "rise-%s", w->s.name);
    rule_add(rs,
             json_pack("{s:s,s:s,s:{s:f,s:s,s:f},s:s}", "name", name, "worker", w->s.name,
                       "baseline", "factor", 3.0, "period", "1h", "floor", 0.1, "for", "30s"),
             1);
    if (i % 2 == 0) {
      size_t s = w->spikes ? w->spike_stack : w->hot_stack;
      snprintf(name, sizeof name, "fn-%s", w->s.name);
      rule_add(rs,
               json_pack("{s:s,s:s,s:{s:s,s:f},s:s}", "name", name, "worker", w->s.name, "function",
                         "name", stream_frame(&w->s, w->s.frames[s][0])->function, "percent", 50.0,
                         "for", "20s"),
               2);
    }
  }
  static const char *const globs[] = {"*",        "api-*",  "ingest-*", "billing-*",
                                      "search-*", "auth-*", "render-*"};
  for (size_t k = 0; k < nworkers / 2; k++) {
    const char *pat = globs[k % 7];
    snprintf(name, sizeof name, "glob-%03zu", k);
    if (k % 5 == 4)
      rule_add(rs,
               json_pack("{s:s,s:s,s:s,s:{s:f,s:s,s:f},s:s}", "name", name, "worker", pat,
                         "group_by", "host", "baseline", "factor", 2.0 + (double)(k % 3), "period",
                         "1h", "floor", 0.2, "for", "1m"),
               3);
    else
      rule_add(rs,
               json_pack("{s:s,s:s,s:s,s:f,s:s}", "name", name, "worker", pat, "group_by", "host",
                         "above", 2.0 + (double)(k % 9) * 0.5, "for", "30s"),
               3);
  }
}

/* --- measuring --- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of n sorted values. */
static double pct_ms(const int64_t *sorted, size_t n, double p) {
  size_t r = (size_t)ceil(p / 100.0 * (double)n);
  if (r < 1) r = 1;
  if (r > n) r = n;
  return (double)sorted[r - 1] / 1e6;
}

typedef struct split {
  int64_t read, agg, fn;
  size_t groups, merges;
} split_t;

/* One round's evaluation outside the engine, with the engine's calls. */
static void breakdown(ember__ahist_t *h, ember_store_t *s, const rules_t *rs, int64_t end,
                      split_t *out) {
  int64_t t0 = cpu_ns();
  int rc = ember__ahist_update(h, s, end);
  if (rc) die("ahist_update", rc);
  int64_t t1 = cpu_ns();
  out->read += t1 - t0;
  for (size_t i = 0; i < rs->n; i++) {
    const ember__alert_rule_t *r = rs->r[i];
    ember__agroup_t *g = NULL;
    size_t n = 0;
    int64_t a0 = cpu_ns();
    rc = ember__ahist_groups(h, r, NULL, NULL, &g, &n);
    if (rc) die("ahist_groups", rc);
    int64_t a1 = cpu_ns();
    out->agg += a1 - a0;
    out->groups += n;
    if (r->kind == EMBER__ALERT_FUNCTION) {
      for (size_t k = 0; k < n; k++) {
        if (!(g[k].cores > 0)) continue;
        double v = 0;
        rc = ember__agroup_function_share(s, r, &g[k], end - WIN, end, &v);
        if (rc) die("function_share", rc);
        out->merges++;
      }
      out->fn += cpu_ns() - a1;
    }
    ember__agroups_free(g, n);
  }
}

/* The naive evaluation of one round at `end`: every rule reads its own
 * selection. hour: every read covers the trailing hour. Returns the
 * groups evaluated; *fn gets the CPU time in function merges. */
static size_t naive_round(ember_store_t *s, const rules_t *rs, int64_t end, bool hour, int64_t *fn,
                          double *check) {
  size_t groups = 0;
  char key[600];
  for (size_t i = 0; i < rs->n; i++) {
    const ember__alert_rule_t *r = rs->r[i];
    bool glob = strchr(r->worker, '*') != NULL;
    ember_store_selector_t sel = {.worker = glob ? NULL : r->worker,
                                  .version = r->version,
                                  .host = r->host,
                                  .actor = r->actor};
    int64_t from = end - WIN;
    if (hour)
      from = end - 3600 * SEC;
    else if (r->kind == EMBER__ALERT_BASELINE)
      from = end - r->baseline.period_ns;
    ember_store_timelines_t *tl = NULL;
    int rc = ember_store_cpu_timelines(s, &sel, from, end, WIN, 0, &tl);
    if (rc) die("cpu_timelines", rc);
    size_t nb = tl->nbuckets;
    /* Groups: worker (+ the group_by label), in order of first series. */
    char **keys = calloc(tl->nseries + 1, sizeof *keys);
    size_t *gi = calloc(tl->nseries + 1, sizeof *gi);
    int64_t *sums = calloc((tl->nseries + 1) * nb, sizeof *sums);
    size_t ng = 0;
    for (size_t k = 0; k < tl->nseries; k++) {
      const ember_labels_t *l = &tl->series[k].labels;
      const char *w = l->worker ? l->worker : "";
      if (!ember__alert_rule_selects(r, w, l->version, l->host, l->actor)) continue;
      const char *v = r->group_by == EMBER__GROUP_HOST      ? l->host
                      : r->group_by == EMBER__GROUP_VERSION ? l->version
                      : r->group_by == EMBER__GROUP_ACTOR   ? l->actor
                                                            : NULL;
      snprintf(key, sizeof key, "%s\x1f%s", w, v ? v : "");
      size_t j = 0;
      while (j < ng && strcmp(keys[j], key) != 0) j++;
      if (j == ng) keys[ng++] = strdup(key);
      gi[k] = j;
      for (size_t b = 0; b < nb; b++) sums[j * nb + b] += tl->cpu[k * nb + b];
    }
    double *vals = malloc((nb + 1) * sizeof *vals);
    for (size_t j = 0; j < ng; j++) {
      double cores = (double)sums[j * nb + nb - 1] / (double)WIN;
      *check += cores;
      if (r->kind == EMBER__ALERT_BASELINE) {
        for (size_t b = 0; b + 1 < nb; b++) vals[b] = (double)sums[j * nb + b] / (double)WIN;
        double m = ember__median(vals, nb - 1);
        if (isfinite(m)) *check += m;
      } else if (r->kind == EMBER__ALERT_FUNCTION && cores > 0) {
        char *sep = strchr(keys[j], '\x1f');
        *sep = '\0';
        ember__agroup_t g = {.worker = keys[j], .value = sep[1] ? sep + 1 : NULL};
        double v = 0;
        int64_t f0 = cpu_ns();
        rc = ember__agroup_function_share(s, r, &g, end - WIN, end, &v);
        *fn += cpu_ns() - f0;
        if (rc) die("function_share", rc);
        *check += v;
      }
    }
    groups += ng;
    for (size_t j = 0; j < ng; j++) free(keys[j]);
    free(keys);
    free(gi);
    free(sums);
    free(vals);
    ember_store_timelines_free(tl);
  }
  return groups;
}

static void usage(void) {
  fprintf(stderr, "usage: bench_alerts [--workers N] [--rounds R] [--naive-rounds K] "
                  "[--util PCT] [--no-breakdown] [--dir DIR]\n");
  exit(2);
}

int main(int argc, char **argv) {
  uint64_t nworkers = 200, rounds = 60, naive_rounds = 5, util = 0;
  bool split_on = true;
  const char *dir = "/tmp";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-breakdown") == 0) {
      split_on = false;
    } else if (i + 1 < argc && strcmp(argv[i], "--workers") == 0) {
      if (ember_parse_u64(argv[++i], NSPIKE, 10000, &nworkers)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) {
      if (ember_parse_u64(argv[++i], 1, 10000, &rounds)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--naive-rounds") == 0) {
      if (ember_parse_u64(argv[++i], 0, 1000, &naive_rounds)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--util") == 0) {
      if (ember_parse_u64(argv[++i], 1, 90, &util)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--dir") == 0) {
      dir = argv[++i];
    } else {
      usage();
    }
  }
  if (util) {
    util_lo = util;
    util_span = 1;
  }
  ember_log_set_level(EMBER_LOG_ERROR); /* firing alerts are logged as warnings */
  stream_init();
  worker_t *ws = calloc(nworkers, sizeof *ws);
  for (size_t i = 0; i < nworkers; i++) make_worker(&ws[i], i, nworkers);
  size_t nseries = nworkers * 2;
  ember_profile_t **batch = calloc(nseries, sizeof *batch);

  char path[512], lock[600], err[512];
  snprintf(path, sizeof path, "%s/bench_alerts_%ld.lmdb", dir, (long)getpid());
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
  /* no_sync: the writes are not what is measured. */
  ember_store_opts_t so = {.map_size = (size_t)16 << 30, .no_sync = true};
  ember_store_t *s = NULL;
  int rc = ember_store_open(path, &so, &s, err, sizeof err);
  if (rc) {
    fprintf(stderr, "bench_alerts: %s\n", err);
    return 1;
  }
  int64_t w0 = ember_time_mono_ns();
  for (size_t k = 0; k < PREFILL; k++) write_step(s, ws, nworkers, k, batch, false);
  double wt = (double)(ember_time_mono_ns() - w0) / 1e9;

  rules_t rs = {0};
  make_rules(&rs, ws, nworkers);
  ember__alerts_opts_t ao = {.store = s, .interval_ns = WIN, .delay_ns = 3 * SEC};
  ember__alerts_t *a = NULL;
  rc = ember__alerts_new(&ao, &a, err, sizeof err);
  if (rc) {
    fprintf(stderr, "bench_alerts: alerts_new: %s\n", err);
    return 1;
  }
  for (size_t i = 0; i < rs.n; i++) {
    rc = ember__alerts_rule_add(a, rs.json[i], NULL, err, sizeof err);
    if (rc) {
      fprintf(stderr, "bench_alerts: rule_add: %s\n", err);
      return 1;
    }
  }
  ember_store_stats_t st;
  rc = ember_store_stats(s, &st);
  if (rc) die("stats", rc);
  printf("bench_alerts: %llu workers on 2 hosts each = %zu series; %d windows each before the "
         "first round (%zu profiles written in %.1f s), %.0f samples and %.0f distinct stacks per "
         "window; store %.1f MiB\n",
         (unsigned long long)nworkers, nseries, PREFILL, (size_t)nwindows, wt,
         (double)nsamples / (double)nwindows, (double)nstacks_total / (double)nwindows,
         (double)st.file_bytes / 1048576.0);
  printf("rules: %zu = %zu above (exact worker) + %zu baseline (1 h) + %zu function + %zu glob "
         "(group_by host; above and baseline)\n",
         rs.n, rs.kinds[0], rs.kinds[1], rs.kinds[2], rs.kinds[3]);

  /* The first round: the history is filled from the store. */
  ember__ahist_t *mh = NULL;
  rc = ember__ahist_new(WIN, PREFILL, &mh);
  if (rc) die("ahist_new", rc);
  ember__ahist_keep(mh, 3600 * SEC / WIN + 2); /* as the engine: the longest baseline + 2 */
  int64_t end = T0 + PREFILL * WIN;
  int64_t c0 = cpu_ns(), m0 = ember_time_mono_ns();
  rc = ember__alerts_round(a, end);
  int64_t fill_cpu = cpu_ns() - c0, fill_wall = ember_time_mono_ns() - m0;
  if (rc) die("round", rc);
  split_t fill_split = {0};
  if (split_on) breakdown(mh, s, &rs, end, &fill_split);

  int64_t *wall = calloc(rounds, sizeof *wall), *cpu = calloc(rounds, sizeof *cpu);
  split_t sp = {0};
  for (size_t r = 0; r < rounds; r++) {
    bool spike = r >= SPIKE_AT && r < SPIKE_AT + SPIKE_N;
    write_step(s, ws, nworkers, PREFILL + r, batch, spike);
    end += WIN;
    c0 = cpu_ns();
    m0 = ember_time_mono_ns();
    rc = ember__alerts_round(a, end);
    cpu[r] = cpu_ns() - c0;
    wall[r] = ember_time_mono_ns() - m0;
    if (rc) die("round", rc);
    if (split_on) breakdown(mh, s, &rs, end, &sp);
  }
  /* What the rounds did: alerts by state. */
  json_t *list = ember__alerts_list(a, NULL, NULL, NULL);
  size_t nfiring = 0, nresolved = 0, npending = 0;
  json_t *al;
  size_t idx;
  json_array_foreach(json_object_get(list, "alerts"), idx, al) {
    const char *state = json_string_value(json_object_get(al, "state"));
    nfiring += strcmp(state, "firing") == 0;
    nresolved += strcmp(state, "resolved") == 0;
    npending += strcmp(state, "pending") == 0;
  }
  json_decref(list);

  int64_t cpu_sum = 0;
  for (size_t r = 0; r < rounds; r++) cpu_sum += cpu[r];
  qsort(wall, rounds, sizeof *wall, cmp_i64);
  int64_t *cpu_sorted = calloc(rounds, sizeof *cpu_sorted);
  memcpy(cpu_sorted, cpu, rounds * sizeof *cpu);
  qsort(cpu_sorted, rounds, sizeof *cpu_sorted, cmp_i64);
  double cpu_mean = (double)cpu_sum / (double)rounds / 1e6;
  double share = cpu_mean / 1e4 * 100; /* ms per 10 s, in % */
  printf("first round (history fill, %d steps x %zu series): %.1f ms wall, %.1f ms CPU\n",
         (int)(3600 * SEC / WIN + 2), nseries, (double)fill_wall / 1e6, (double)fill_cpu / 1e6);
  printf("steady rounds (%llu, a new window of every series before each; %zu alerts listed at "
         "the end: %zu firing, %zu pending, %zu resolved):\n",
         (unsigned long long)rounds, nfiring + npending + nresolved, nfiring, npending, nresolved);
  printf("  wall: median %.2f ms, p99 %.2f ms, max %.2f ms\n", pct_ms(wall, rounds, 50),
         pct_ms(wall, rounds, 99), (double)wall[rounds - 1] / 1e6);
  printf("  CPU (thread): median %.2f ms, p99 %.2f ms, mean %.2f ms\n",
         pct_ms(cpu_sorted, rounds, 50), pct_ms(cpu_sorted, rounds, 99), cpu_mean);
  printf("  share of one core at a 10 s interval (mean CPU / 10 s): %.3f%% (goal < 1%%: %s)\n",
         share, share < 1.0 ? "met" : "NOT met");
  if (split_on) {
    double n = (double)rounds;
    double rd = (double)sp.read / n / 1e6, ag = (double)sp.agg / n / 1e6,
           fn = (double)sp.fn / n / 1e6;
    printf("breakdown per steady round (CPU, the same calls outside the engine): store read "
           "%.2f ms, aggregation %.2f ms (%.0f groups), function merges %.2f ms (%.0f merges, "
           "%.3f ms each); engine rest (states, documents) ~%.2f ms\n",
           rd, ag, (double)sp.groups / n, fn, (double)sp.merges / n,
           sp.merges ? (double)sp.fn / (double)sp.merges / 1e6 : 0.0, cpu_mean - rd - ag - fn);
    printf("  first round: store read %.1f ms, aggregation %.1f ms, function merges %.1f ms\n",
           (double)fill_split.read / 1e6, (double)fill_split.agg / 1e6,
           (double)fill_split.fn / 1e6);
  }

  /* The reference: every rule reads its own selection each round. */
  for (int hour = 0; hour < 2 && naive_rounds > 0; hour++) {
    int64_t ncpu = 0, nfn = 0;
    size_t groups = 0;
    double check = 0;
    for (size_t r = 0; r < naive_rounds; r++) {
      c0 = cpu_ns();
      groups = naive_round(s, &rs, end, hour != 0, &nfn, &check);
      ncpu += cpu_ns() - c0;
    }
    double per = (double)ncpu / (double)naive_rounds / 1e6;
    printf("reference, one store read per rule per round (%s; %llu rounds, %zu groups): %.2f ms "
           "CPU per round (function merges %.2f ms) = %.3f%% of a core; %.1fx the engine\n",
           hour ? "each over the trailing hour"
                : "each over what it needs: the newest step, a "
                  "baseline its period",
           (unsigned long long)naive_rounds, groups, per, (double)nfn / (double)naive_rounds / 1e6,
           per / 1e4 * 100, per / cpu_mean);
  }

  ember__ahist_free(mh);
  ember__alerts_free(a);
  ember_store_close(s);
  unlink(path);
  unlink(lock);
  for (size_t i = 0; i < rs.n; i++) {
    json_decref(rs.json[i]);
    ember__alert_rule_free(rs.r[i]);
  }
  free(rs.json);
  free(rs.r);
  free(wall);
  free(cpu);
  free(cpu_sorted);
  free(batch);
  free(ws);
  return 0;
}
