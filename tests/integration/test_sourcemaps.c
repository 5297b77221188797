/* Source maps end to end (issue 16), against a real broker: a TypeScript
 * service (tests/jsbundle/src: alphaWork in alpha.ts doing three units of
 * work per request, betaWork in beta.ts one) bundled and minified by a
 * real bundler (esbuild, from tests/jsbundle's pinned npm packages), run
 * by real Node.js processes with --perf-basic-prof, profiled by the real
 * agent; a consumer checks what it published.
 *
 *  - The map three ways: named by the bundle's comment ("linked"), beside
 *    the bundle with no comment ("external"), and inline as a data: URL:
 *    both original functions, their .ts files, 3:1 within 15% (about
 *    2,800 samples each), and no frame of the bundle left minified.
 *  - The map only uploaded to a collector (`ember sourcemaps upload`), not
 *    beside the bundle: the agent sends V8's names, and the collector's
 *    answer (the store's merge that peers and every export read) has the
 *    same as the three above.
 *  - Hostile maps: truncated, with a mapping out of range, and 100 MB:
 *    each refused and counted in /metrics by its reason, the agent keeps
 *    running, and the frames keep their minified names.
 *
 * --no-turbo-inlining keeps alphaWork and betaWork frames of their own
 * (TurboFan would otherwise inline them into their caller, which is V8's
 * business, not the map's). Their callers are often still interpreted,
 * and an interpreted frame is V8's interpreter's (Builtins_Interpreter-
 * EntryTrampoline), named by the node binary's symbols, not by the map. */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/codec.h"
#include "ember/profile.h"

#define AGENT_HZ 997 /* see test_agent.c */
#define GOOD_CPU "3" /* seconds of CPU each good variant burns: ~3,000 samples */
/* The bad ones too: the agent reads a script's map when it closes a
 * window holding the script's frames, through the live process's root; a
 * process gone before its first window closed (1 s of CPU, an ASan agent
 * beside two hogs) left nothing to count. */
#define BAD_CPU  "3"
#define JSBUNDLE EMBER_SOURCE_DIR "/tests/jsbundle"

static char tag[64], dir[PATH_MAX], log_path[PATH_MAX + 32];

typedef struct variant {
  const char *name;
  const char *esbuild; /* --sourcemap=... */
  bool good;
  bool uploaded;      /* the map goes to the collector, not beside the bundle */
  const char *reason; /* of the refusal, for a bad one */
  char script[PATH_MAX + 64], worker[128];
  pid_t pid;
  double cpu;
} variant_t;

static void sh(const char *cmd) {
  char out[4096] = "";
  if (tu_sh(cmd, out, sizeof out) != 0) fail_msg("%s failed: %s", cmd, out);
}

/* Bundle the service into <dir>/<name>/app.js. */
static void bundle(variant_t *v) {
  char cmd[3 * PATH_MAX];
  snprintf(v->script, sizeof v->script, "%s/%s/app.js", dir, v->name);
  snprintf(cmd, sizeof cmd,
           "cd " JSBUNDLE " && node_modules/.bin/esbuild src/main.ts --bundle --minify "
           "--platform=node --log-level=warning --sourcemap=%s --outfile=%s 2>&1",
           v->esbuild, v->script);
  sh(cmd);
}

/* Spoil the map of a linked bundle as `v->reason` says. */
static void spoil(const variant_t *v) {
  char map[PATH_MAX + 80];
  snprintf(map, sizeof map, "%s.map", v->script);
  struct stat st;
  assert_int_equal(stat(map, &st), 0);
  if (strcmp(v->reason, "not_json") == 0) {
    assert_int_equal(truncate(map, st.st_size / 2), 0);
  } else if (strcmp(v->reason, "out_of_range") == 0) {
    /* One segment naming source 99 of 3. */
    char cmd[2 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "sed -i 's/\"mappings\": *\"[^\"]*\"/\"mappings\":\"AmGAA\"/' %s",
             map);
    sh(cmd);
  } else { /* too_big: 100 MB, sparse */
    assert_int_equal(truncate(map, 100 << 20), 0);
  }
}

/* The uploaded variant's map, away from its bundle: only the collector
 * has it. */
static void move_map(const variant_t *v, char *to, size_t size) {
  snprintf(to, size, "%s/maps/app.js.map", dir);
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "mkdir -p %s/maps && mv %s.map %s", dir, v->script, to);
  sh(cmd);
}

static void upload_map(unsigned port, const variant_t *v, const char *map) {
  char cmd[3 * PATH_MAX], out[4096] = "";
  snprintf(cmd, sizeof cmd,
           EMBER_BINARY_DIR "/cli/ember sourcemaps upload --server http://127.0.0.1:%u "
                            "--worker %s %s 2>&1",
           port, v->worker, map);
  if (tu_sh(cmd, out, sizeof out) != 0) fail_msg("%s: %s", cmd, out);
  print_message("%s: %s", v->name, out);
}

/* The collector's merge of `worker` over the last 10 minutes, as its peers
 * read it (format=ember, so the test reads frames, not a rendering). */
static ember_profile_t *collector_profile(unsigned port, const char *worker) {
  char path[512];
  snprintf(path, sizeof path,
           "/api/v1/profile?worker=%s&from=-10m&to=now&local=1&format=ember&raw=cpu_samples",
           worker);
  static char body[16 << 20];
  size_t len = 0;
  int st = tu_http_n(port, "GET", path, NULL, NULL, body, sizeof body, &len);
  if (st != 200) fail_msg("GET %s: %d %s", path, st, body);
  ember_profile_t *p = NULL;
  char err[256] = "";
  if (ember_codec_decode(body, len, NULL, &p, err, sizeof err) != 0)
    fail_msg("the collector's profile of %s: %s", worker, err);
  return p;
}

static pid_t start_agent(void) {
  static char a_brokers[512], a_host[256], a_spool[PATH_MAX + 16], a_sel[128];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", tu_bootstrap());
  snprintf(a_host, sizeof a_host, "host_id=%s", tag);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool", dir);
  snprintf(a_sel, sizeof a_sel, "selector=worker=ember-it-sm-%s-*", tag);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        "continuous_hz=997",
                        "window=2s",
                        "scan_interval=1s",
                        a_sel,
                        "metrics_listen=127.0.0.1:0",
                        NULL};
  pid_t pid = tu_spawn(argv, NULL, log_path);
  sleep(2); /* sampler and discovery up */
  return pid;
}

static bool ends_with(const char *s, const char *tail) {
  size_t n = s ? strlen(s) : 0, t = strlen(tail);
  return n >= t && strcmp(s + n - t, tail) == 0;
}

/* The frame named `fn` of a good variant: its file is its .ts source. */
static void check_file(const ember_profile_t *p, const char *fn, const char *tail) {
  bool found = false;
  for (uint32_t i = 0; i < ember_profile_nframes(p); i++) {
    const ember_frame_t *f = ember_profile_frame(p, i);
    if (f->function == NULL || strcmp(f->function, fn) != 0) continue;
    found = true;
    if (!ends_with(f->file, tail) || f->line == 0)
      fail_msg("%s is in %s:%u, not in %s", fn, f->file ? f->file : "(no file)", f->line, tail);
  }
  if (!found) fail_msg("no frame is named %s", fn);
}

static void check_good(const variant_t *v, ember_profile_t *p) {
  int64_t total = ember_profile_total(p, 0);
  int64_t alpha = tu_self(p, 0, "alphaWork"), beta = tu_self(p, 0, "betaWork");
  print_message("%s: %lld samples for %.2f s of CPU; alphaWork %lld, betaWork %lld\n", v->name,
                (long long)total, v->cpu, (long long)alpha, (long long)beta);
  assert_true(alpha > 0 && beta > 0);
  double ratio = (double)alpha / (double)beta;
  if (ratio < 3.0 * 0.85 || ratio > 3.0 * 1.15)
    fail_msg("%s: alphaWork:betaWork = %.2f, want 3 +- 15%%", v->name, ratio);
  /* The samples are there: the two are most of what the service did. */
  if ((double)(alpha + beta) < AGENT_HZ * v->cpu * 0.6)
    fail_msg("%s: %lld samples in the two of %.0f expected", v->name, (long long)(alpha + beta),
             AGENT_HZ * v->cpu);
  check_file(p, "alphaWork", "/tests/jsbundle/src/alpha.ts");
  check_file(p, "betaWork", "/tests/jsbundle/src/beta.ts");
  /* What else of the bundle the samples saw (its callers are there when
   * V8 compiled them: an interpreted frame is V8's interpreter's). */
  char seen[1024] = "";
  for (uint32_t i = 0; i < ember_profile_nframes(p); i++) {
    const ember_frame_t *f = ember_profile_frame(p, i);
    if (f->module && strcmp(f->module, v->script) == 0 && strlen(seen) < sizeof seen - 200)
      snprintf(seen + strlen(seen), sizeof seen - strlen(seen), " %s (%s:%u)", f->function,
               f->file ? strrchr(f->file, '/') + 1 : "?", f->line);
  }
  print_message("%s: frames of the bundle:%s\n", v->name, seen);
  /* The heaviest stack, leaf first. */
  int64_t best = -1;
  uint32_t best_id = 0;
  for (uint32_t id = 0; id < ember_profile_nstacks(p); id++) {
    const uint32_t *fr;
    size_t depth;
    const int64_t *vals;
    if (ember_profile_stack(p, id, &fr, &depth, &vals) == 0 && vals[0] > best)
      best = vals[0], best_id = id;
  }
  const uint32_t *fr;
  size_t depth = 0;
  const int64_t *vals;
  if (best >= 0 && ember_profile_stack(p, best_id, &fr, &depth, &vals) == 0) {
    char st[2048] = "";
    for (size_t k = 0; k < depth && k < 6 && strlen(st) < sizeof st - 300; k++) {
      char name[256];
      ember_frame_name(ember_profile_frame(p, fr[k]), name, sizeof name);
      snprintf(st + strlen(st), sizeof st - strlen(st), " <- %s", name);
    }
    print_message("%s: heaviest stack (%lld samples), leaf first:%s ...\n", v->name,
                  (long long)best, st);
  }
  /* Whole stacks: below the two, down to node's own main. */
  if (tu_total_matching(p, 0, "node::Start") < (alpha + beta) * 9 / 10)
    fail_msg("%s: only %lld of %lld samples of the two reach node::Start", v->name,
             (long long)tu_total_matching(p, 0, "node::Start"), (long long)(alpha + beta));
  /* No frame of the bundle keeps a minified name: every frame whose
   * module is the bundle is a .ts frame, and no V8 name points into it. */
  for (uint32_t i = 0; i < ember_profile_nframes(p); i++) {
    const ember_frame_t *f = ember_profile_frame(p, i);
    bool in_bundle = f->module && strcmp(f->module, v->script) == 0;
    if (in_bundle && !ends_with(f->file, ".ts"))
      fail_msg("%s: frame %s of the bundle has no .ts file", v->name,
               f->function ? f->function : "(none)");
    if (f->function && strstr(f->function, v->script) != NULL)
      fail_msg("%s: frame %s kept its minified name", v->name, f->function);
  }
}

/* A bad map's frames keep V8's names of the bundle. */
static void check_bad(const variant_t *v, ember_profile_t *p) {
  int64_t minified = tu_total_matching(p, 0, v->script);
  print_message("%s: %lld samples, %lld in frames named by V8 into the bundle\n", v->name,
                (long long)ember_profile_total(p, 0), (long long)minified);
  assert_true(minified > ember_profile_total(p, 0) / 2);
  assert_true(tu_self(p, 0, "alphaWork") == 0);
}

static void test_sourcemaps_real_bundle(void **state) {
  (void)state;
  snprintf(tag, sizeof tag, "%d-%lld", (int)getpid(), (long long)(ember_time_now_ns() / 1000000));
  snprintf(dir, sizeof dir, "%s/sourcemaps-%s", EMBER_TEST_TMP, tag);
  snprintf(log_path, sizeof log_path, "%s/agent.log", dir);
  if (access(JSBUNDLE "/node_modules/.bin/esbuild", X_OK) != 0)
    fail_msg("%s/node_modules has no esbuild: run scripts/npm-deps.sh", JSBUNDLE);
  char node[512];
  if (!tu_which("node", node, sizeof node)) fail_msg("node is not installed: scripts/deps.sh");
  variant_t vs[] = {
      {.name = "linked", .esbuild = "linked", .good = true},
      {.name = "external", .esbuild = "external", .good = true},
      {.name = "inline", .esbuild = "inline", .good = true},
      {.name = "uploaded", .esbuild = "external", .good = true, .uploaded = true},
      {.name = "truncated", .esbuild = "linked", .reason = "not_json"},
      {.name = "range", .esbuild = "linked", .reason = "out_of_range"},
      {.name = "huge", .esbuild = "linked", .reason = "too_big"},
  };
  const size_t nv = sizeof vs / sizeof *vs;
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
  sh(cmd);
  /* A collector of its own, which keeps the uploaded map. */
  char cdir[PATH_MAX + 16], clog[PATH_MAX + 32], group[96];
  snprintf(cdir, sizeof cdir, "%s/collector", dir);
  snprintf(clog, sizeof clog, "%s/collector.log", dir);
  snprintf(group, sizeof group, "sm-%s", tag);
  unsigned cport = tu_free_port();
  pid_t collector = tu_start_collector(tu_bootstrap(), cdir, group, cport, NULL, clog);
  char map[PATH_MAX + 32] = "";
  for (size_t i = 0; i < nv; i++) {
    bundle(&vs[i]);
    if (!vs[i].good) spoil(&vs[i]);
    snprintf(vs[i].worker, sizeof vs[i].worker, "ember-it-sm-%s-%s", tag, vs[i].name);
    if (vs[i].uploaded) {
      move_map(&vs[i], map, sizeof map);
      upload_map(cport, &vs[i], map);
    }
  }
  pid_t agent = start_agent();
  for (size_t i = 0; i < nv; i++) {
    char env[160];
    snprintf(env, sizeof env, "EMBER_WORKER=%s", vs[i].worker);
    const char *argv[] = {node,
                          "--perf-basic-prof",
                          "--no-turbo-inlining",
                          vs[i].script,
                          vs[i].good ? GOOD_CPU : BAD_CPU,
                          NULL};
    const char *envp[] = {env, NULL};
    vs[i].pid = tu_spawn(argv, envp, NULL);
  }
  for (size_t i = 0; i < nv; i++)
    if (tu_wait_cpu(vs[i].pid, 120000, &vs[i].cpu) == -1)
      fail_msg("%s did not end within 120 s", vs[i].name);
  sleep(3); /* the last windows close */
  unsigned port = tu_logged_port(log_path, 5000);
  double frames = tu_metric(port, "ember_agent_sourcemap_frames_total");
  double decoded = tu_metric(port, "ember_agent_sourcemap_decoded_total");
  print_message("agent: %.0f frames mapped, %.0f maps decoded\n", frames, decoded);
  assert_true(frames > 0);
  assert_true(decoded >= 3);
  for (size_t i = 0; i < nv; i++) {
    if (vs[i].good) continue;
    char name[128];
    snprintf(name, sizeof name, "ember_agent_sourcemap_refused_total{reason=\"%s\"}", vs[i].reason);
    double refused = tu_metric(port, name);
    if (refused < 1) fail_msg("%s: %s is %.0f (log %s)", vs[i].name, name, refused, log_path);
  }
  /* Still running, and it stops cleanly. */
  assert_int_equal(kill(agent, 0), 0);
  tu_stop_daemon(agent, "agent", log_path);

  ember_profile_t **ps = NULL;
  size_t n = tu_consume_profiles(tu_bootstrap(), tag, 5000, 60000, &ps);
  if (n == 0) fail_msg("no profile from host %s arrived (agent log: %s)", tag, log_path);
  for (size_t i = 0; i < nv; i++) {
    ember_profile_t *p = tu_merged_worker(ps, n, vs[i].worker, NULL);
    if (vs[i].uploaded) {
      /* The agent had no map: V8's names went out. The collector names
       * them once it holds every window the agent sent. */
      check_bad(&vs[i], p);
      int64_t sent = ember_profile_total(p, 0);
      ember_profile_free(p);
      p = NULL;
      for (int t = 0; t < 600; t++) {
        ember_profile_free(p);
        p = collector_profile(cport, vs[i].worker);
        if (ember_profile_total(p, 0) >= sent) break;
        usleep(100000);
      }
      if (ember_profile_total(p, 0) < sent)
        fail_msg("the collector holds %lld of the %lld samples sent (log %s)",
                 (long long)ember_profile_total(p, 0), (long long)sent, clog);
      double mapped = tu_metric(cport, "ember_collector_sourcemap_frames_total");
      print_message("collector: %.0f frames named through the uploaded map\n", mapped);
      assert_true(mapped > 0);
    }
    if (vs[i].good)
      check_good(&vs[i], p);
    else
      check_bad(&vs[i], p);
    ember_profile_free(p);
  }
  tu_stop_daemon(collector, "collector", clog);
  for (size_t i = 0; i < n; i++) ember_profile_free(ps[i]);
  free(ps);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  sh(cmd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sourcemaps_real_bundle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
