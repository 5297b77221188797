/* Stacks of programs built without frame pointers, end to end: the real
 * agent (unwind = auto) profiles, against the real broker,
 *   - tests/programs/nofp (-O2 -fomit-frame-pointer): known chains
 *     main -> chain_a -> chain_b -> chain_leaf and main -> sort_chain ->
 *     qsort (libc) -> by_weight;
 *   - Debian's own /usr/bin/python3 and /usr/bin/xz (built without frame
 *     pointers), each run under `perf record --call-graph dwarf` in the
 *     same minute: Ember's share of samples that reach the program's entry
 *     must be within 5 points of perf's, and the functions perf names
 *     hottest must be among Ember's;
 *   - Node.js with --perf-basic-prof: JIT frames (frame pointers, no CFI)
 *     between native ones, still unwound to the entry.
 * "Reaching the entry" is a frame named main, __libc_start_call_main or
 * __libc_start_main: a stripped program's own main has no name for either
 * profiler, the libc frames below it do. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/profile.h"

#define AGENT_HZ "continuous_hz=997"
#define PERF_HZ  "499"

static char host_id[128];
static char log_path[512];

static pid_t start_agent(const char *brokers) {
  static char a_brokers[512], a_host[256], a_spool[600];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", host_id);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool-%s", EMBER_TEST_TMP, host_id);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        AGENT_HZ,
                        "unwind=auto",
                        "window=2s",
                        "scan_interval=1s",
                        "selector=worker=ember-it-*",
                        "metrics_listen=127.0.0.1:0",
                        NULL,
                        NULL};
  /* EMBER_TEST_UNWIND_STACK_BYTES: measure another stack copy size (the
   * default was chosen that way, docs/internals/unwind.md). */
  static char a_stack[64];
  const char *sb = getenv("EMBER_TEST_UNWIND_STACK_BYTES");
  if (sb != NULL && sb[0] != '\0') {
    snprintf(a_stack, sizeof a_stack, "unwind_stack_bytes=%s", sb);
    argv[10] = a_stack;
  }
  pid_t pid = tu_spawn(argv, NULL, log_path);
  sleep(2); /* sampler and discovery up */
  return pid;
}

static void stop_agent(pid_t agent) {
  kill(agent, SIGTERM);
  int status = tu_wait(agent, 30000);
  if (status == -1) {
    tu_kill(agent);
    fail_msg("the agent did not stop within 30 s of SIGTERM (log: %s)", log_path);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the agent exited with status %d (log: %s)", status, log_path);
}

static bool is_entry(const char *fn) {
  return fn != NULL && (strcmp(fn, "main") == 0 || strcmp(fn, "__libc_start_call_main") == 0 ||
                        strncmp(fn, "__libc_start_main", 17) == 0);
}

static const char *fn_at(const ember_profile_t *p, const uint32_t *ids, size_t depth, size_t i) {
  return i < depth ? ember_profile_frame(p, ids[i])->function : NULL;
}

/* Samples of p whose stack reaches the entry, and all samples. */
static double entry_share(const ember_profile_t *p, int64_t *total) {
  int64_t all = 0, reach = 0;
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *v;
    ember_profile_stack(p, s, &ids, &depth, &v);
    all += v[0];
    for (size_t i = 0; i < depth; i++) {
      if (is_entry(fn_at(p, ids, depth, i))) {
        reach += v[0];
        break;
      }
    }
  }
  *total = all;
  return all ? (double)reach / (double)all : 0;
}

/* On a failure: the heaviest stacks of p that do not reach the entry. */
static void print_short_stacks(const ember_profile_t *p) {
  for (int shown = 0, pass = 0; pass < 1; pass++) {
    for (uint32_t s = 0; s < ember_profile_nstacks(p) && shown < 8; s++) {
      const uint32_t *ids;
      size_t depth;
      const int64_t *v;
      ember_profile_stack(p, s, &ids, &depth, &v);
      bool reach = false;
      for (size_t i = 0; i < depth && !reach; i++) reach = is_entry(fn_at(p, ids, depth, i));
      if (reach || v[0] < 3) continue;
      shown++;
      print_message("  %lld samples, %zu frames:", (long long)v[0], depth);
      for (size_t i = 0; i < depth && i < 12; i++) {
        char name[160];
        ember_frame_name(ember_profile_frame(p, ids[i]), name, sizeof name);
        print_message(" %s", name);
      }
      print_message("\n");
    }
  }
}

static bool named(const char *fn, const char *want) { return fn != NULL && strcmp(fn, want) == 0; }

/* nofp: every sample reaches main; those in chain_leaf carry chain_b,
 * chain_a, main right above it; those in by_weight reach sort_chain and
 * main through libc's qsort. */
static void check_nofp(const ember_profile_t *p) {
  int64_t total = 0, leaf = 0, leaf_ok = 0, cb = 0, cb_ok = 0;
  double share = entry_share(p, &total);
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *v;
    ember_profile_stack(p, s, &ids, &depth, &v);
    for (size_t i = 0; i < depth; i++) {
      const char *fn = fn_at(p, ids, depth, i);
      if (named(fn, "chain_leaf")) {
        leaf += v[0];
        if (named(fn_at(p, ids, depth, i + 1), "chain_b") &&
            named(fn_at(p, ids, depth, i + 2), "chain_a") &&
            named(fn_at(p, ids, depth, i + 3), "main"))
          leaf_ok += v[0];
        break;
      }
      if (named(fn, "by_weight")) {
        cb += v[0];
        bool through_libc = false, sorted = false;
        for (size_t j = i + 1; j < depth; j++) {
          const ember_frame_t *f = ember_profile_frame(p, ids[j]);
          if (f->module && strstr(f->module, "libc.so")) through_libc = true;
          if (named(f->function, "sort_chain") && through_libc &&
              named(fn_at(p, ids, depth, j + 1), "main"))
            sorted = true;
        }
        if (sorted) cb_ok += v[0];
        break;
      }
    }
  }
  print_message("nofp: %lld samples, %.2f%% reach main; chain_leaf %lld (%lld whole), "
                "by_weight %lld (%lld whole)\n",
                (long long)total, 100 * share, (long long)leaf, (long long)leaf_ok, (long long)cb,
                (long long)cb_ok);
  if (total < 1500) fail_msg("only %lld samples of nofp (log: %s)", (long long)total, log_path);
  assert_true(leaf > total / 5 && cb > total / 5);
  if (share < 0.99) fail_msg("%.2f%% of nofp's samples reach main, want 99%%", 100 * share);
  if ((double)leaf_ok < 0.99 * (double)leaf)
    fail_msg("%lld of %lld chain_leaf samples carry main->chain_a->chain_b", (long long)leaf_ok,
             (long long)leaf);
  if ((double)cb_ok < 0.99 * (double)cb)
    fail_msg("%lld of %lld by_weight samples carry main->sort_chain->qsort", (long long)cb_ok,
             (long long)cb);
}

/* perf's figures for one recorded program: samples, those reaching the
 * entry, and its hottest named functions (self), one per line. */
typedef struct perf_view {
  long samples, reach;
  char top[2048];
  char dso[256]; /* the module with the most samples */
} perf_view_t;

static void perf_view(const char *perf, const char *data, const char *comm, perf_view_t *out) {
  char cmd[2048], text[256];
  snprintf(cmd, sizeof cmd,
           "'%s' script -i '%s' --comm '%s' -F comm,ip,sym 2>/dev/null | awk 'BEGIN { RS = \"\" } "
           "{ n++; if ($0 ~ /[ \\t](main|__libc_start_call_main|__libc_start_main[^ \\t\\n]*)"
           "([ \\t\\n]|$)/) m++ } END { print n + 0, m + 0 }'",
           perf, data, comm);
  assert_int_equal(tu_sh(cmd, text, sizeof text), 0);
  assert_int_equal(sscanf(text, "%ld %ld", &out->samples, &out->reach), 2);
  /* Top five by self time that have a name (not an address). */
  snprintf(cmd, sizeof cmd,
           "'%s' report -i '%s' --comm '%s' --no-children --sort sym --stdio -g none 2>/dev/null | "
           "awk '$1 ~ /%%$/ && $2 ~ /^\\[/ && $3 ~ /^[A-Za-z_]/ && ($1 + 0) >= 3 { print $3 }' | "
           "head -5",
           perf, data, comm);
  assert_int_equal(tu_sh(cmd, out->top, sizeof out->top), 0);
  /* The module holding most samples (names or not: a stripped library's
   * functions are addresses to both profilers). */
  snprintf(cmd, sizeof cmd,
           "'%s' report -i '%s' --comm '%s' --no-children --sort dso --stdio -g none 2>/dev/null | "
           "awk '$1 ~ /%%$/ { print $2; exit }'",
           perf, data, comm);
  assert_int_equal(tu_sh(cmd, out->dso, sizeof out->dso), 0);
  out->dso[strcspn(out->dso, "\n")] = '\0';
}

/* The module (file name) holding the most leaf samples of p. */
static void ember_top_module(const ember_profile_t *p, char *out, size_t size) {
  enum { MAX = 512 };
  static const char *mods[MAX];
  static int64_t n_of[MAX];
  size_t n = 0, best = 0;
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *v;
    ember_profile_stack(p, s, &ids, &depth, &v);
    const char *m = ember_profile_frame(p, ids[0])->module;
    if (m == NULL) continue;
    const char *slash = strrchr(m, '/');
    m = slash ? slash + 1 : m;
    size_t i = 0;
    while (i < n && strcmp(mods[i], m) != 0) i++;
    if (i == n && n < MAX) {
      mods[n] = m;
      n_of[n++] = 0;
    }
    if (i < n) n_of[i] += v[0];
    if (i < n && n_of[i] > n_of[best]) best = i;
  }
  snprintf(out, size, "%s", n > 0 ? mods[best] : "");
}

/* The ten functions with the most self samples in p, newline-separated. */
static void ember_top(const ember_profile_t *p, char *out, size_t size) {
  enum { MAX = 4096 };
  static const char *names[MAX];
  static int64_t self[MAX];
  size_t n = 0;
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *v;
    ember_profile_stack(p, s, &ids, &depth, &v);
    /* The function that holds the leaf address: the last of the frames
     * DWARF gives that address (inlined calls come first), as perf's
     * "self" symbol is. */
    size_t at = 0;
    const ember_frame_t *f0 = ember_profile_frame(p, ids[0]);
    while (at + 1 < depth && f0->address != 0 &&
           ember_profile_frame(p, ids[at + 1])->address == f0->address)
      at++;
    const char *fn = fn_at(p, ids, depth, at);
    if (fn == NULL) continue;
    size_t i = 0;
    while (i < n && strcmp(names[i], fn) != 0) i++;
    if (i == n && n < MAX) {
      names[n] = fn;
      self[n++] = 0;
    }
    if (i < n) self[i] += v[0];
  }
  out[0] = '\0';
  size_t len = 0;
  for (int k = 0; k < 10 && n > 0; k++) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
      if (self[i] > self[best]) best = i;
    if (self[best] < 0) break;
    len += (size_t)snprintf(out + len, size - len, "%s\n", names[best]);
    if (len >= size) break;
    self[best] = -1;
  }
}

/* Is `name` (a line of perf's top) among Ember's top lines? */
static bool in_top(const char *top, const char *name) {
  size_t n = strlen(name);
  for (const char *p = top; *p;) {
    const char *e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && memcmp(p, name, n) == 0) return true;
    if (e == NULL) break;
    p = e + 1;
  }
  return false;
}

static void compare_with_perf(const ember_profile_t *p, const char *perf, const char *data,
                              const char *comm) {
  int64_t total = 0;
  double share = entry_share(p, &total);
  perf_view_t pv;
  perf_view(perf, data, comm, &pv);
  double pshare = pv.samples ? (double)pv.reach / (double)pv.samples : 0;
  char top[4096];
  ember_top(p, top, sizeof top);
  print_message("%s: ember %lld samples, %.1f%% reach the entry; perf --call-graph dwarf %ld "
                "samples, %.1f%%\nperf's hottest:\n%sember's hottest:\n%s",
                comm, (long long)total, 100 * share, pv.samples, 100 * pshare, pv.top, top);
  if (total < 500 || pv.samples < 300)
    fail_msg("%s: too few samples (ember %lld, perf %ld; log: %s)", comm, (long long)total,
             pv.samples, log_path);
  if (share < pshare - 0.05) print_short_stacks(p);
  if (share < pshare - 0.05)
    fail_msg("%s: %.1f%% of Ember's samples reach the entry, perf's %.1f%%", comm, 100 * share,
             100 * pshare);
  char mod[256];
  ember_top_module(p, mod, sizeof mod);
  print_message("%s: hottest module: perf %s, ember %s\n", comm, pv.dso, mod);
  /* perf says [kernel.kallsyms] where Ember says [kernel]. */
  if (strcmp(pv.dso, mod) != 0 && !(strstr(pv.dso, "kernel") && strstr(mod, "kernel")))
    fail_msg("%s: perf's hottest module is %s, Ember's %s", comm, pv.dso, mod);
  char *save = NULL;
  for (char *line = strtok_r(pv.top, "\n", &save); line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    char *at = strstr(line, "@@"); /* perf shows versioned names */
    if (at) *at = '\0';
    if (!in_top(top, line))
      fail_msg("%s: perf's hot function %s is not in Ember's top ten", comm, line);
  }
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_unwind_programs_without_frame_pointers(void **state) {
  (void)state;
  snprintf(host_id, sizeof host_id, "uw-%d-%lld", (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(log_path, sizeof log_path, "%s/agent-%s.log", EMBER_TEST_TMP, host_id);
  char perf[512], node[512];
  if (!tu_which("perf", perf, sizeof perf))
    fail_msg("perf is missing (scripts/deps.sh installs it)");
  bool have_node = tu_which("node", node, sizeof node);
  const char *brokers = tu_bootstrap();

  /* Inputs: a CPU-bound Python script with nested calls, and 4 MB of text
   * that xz works on for a few CPU seconds. */
  char py[600], xzin[600], py_data[600], xz_data[600];
  snprintf(py, sizeof py, "%s/unwind-%s.py", EMBER_TEST_TMP, host_id);
  snprintf(xzin, sizeof xzin, "%s/unwind-%s.txt", EMBER_TEST_TMP, host_id);
  snprintf(py_data, sizeof py_data, "%s/unwind-%s-py.perf", EMBER_TEST_TMP, host_id);
  snprintf(xz_data, sizeof xz_data, "%s/unwind-%s-xz.perf", EMBER_TEST_TMP, host_id);
  write_file(py, "import time\n"
                 "def leaf(n):\n"
                 "    s = 0\n"
                 "    for i in range(n):\n"
                 "        s += i * i\n"
                 "    return s\n"
                 "def middle(n):\n"
                 "    return leaf(n) + len(str(n))\n"
                 "start = time.process_time()\n"
                 "while time.process_time() - start < 3:\n"
                 "    middle(20000)\n");
  FILE *f = fopen(xzin, "w");
  assert_non_null(f);
  uint64_t x = 88172645463325252ULL;
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
  for (int i = 0; i < (4 << 20); i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    fputc(i % 77 == 76 ? '\n' : alphabet[x % 64], f);
  }
  fclose(f);

  /* nofp with its .eh_frame overwritten by noise, owned by a user (nobody):
   * the agent must count it, keep partial stacks and carry on, and the
   * copy's build-id (nofp's own) must not give nofp its broken table. */
  char bad[600], cmd[8192], out[256];
  snprintf(bad, sizeof bad, "%s/nofp-badcfi-%s", EMBER_TEST_TMP, host_id);
  snprintf(cmd, sizeof cmd,
           "set -e; objcopy --dump-section .eh_frame='%s.eh' '%s'; "
           "head -c \"$(stat -c %%s '%s.eh')\" /dev/urandom > '%s.noise'; "
           "objcopy --update-section .eh_frame='%s.noise' '%s' '%s'; rm -f '%s.eh' '%s.noise'; "
           "chown 65534 '%s'",
           bad, EMBER_TEST_PROGRAMS "/nofp", bad, bad, bad, EMBER_TEST_PROGRAMS "/nofp", bad, bad,
           bad, bad);
  assert_int_equal(tu_sh(cmd, out, sizeof out), 0);

  pid_t agent = start_agent(brokers);
  const char *bad_argv[] = {bad, "2", NULL};
  const char *bad_env[] = {"EMBER_WORKER=ember-it-badcfi", NULL};
  pid_t badp = tu_spawn(bad_argv, bad_env, NULL);
  const char *nofp_argv[] = {EMBER_TEST_PROGRAMS "/nofp", "4", NULL};
  const char *nofp_env[] = {"EMBER_WORKER=ember-it-nofp", NULL};
  pid_t nofp = tu_spawn(nofp_argv, nofp_env, NULL);
  /* perf records the very program Ember samples: `env` execs it with the
   * label, so perf itself is not selected. */
  const char *py_argv[] = {perf,
                           "record",
                           "-q",
                           "-e",
                           "cpu-clock",
                           "-F",
                           PERF_HZ,
                           "--call-graph",
                           "dwarf",
                           "-o",
                           py_data,
                           "--",
                           "env",
                           "EMBER_WORKER=ember-it-py",
                           "/usr/bin/python3",
                           py,
                           NULL};
  pid_t pyp = tu_spawn(py_argv, NULL, NULL);
  const char *xz_argv[] = {
      perf,           "record", "-q", "-e",    "cpu-clock", "-F",  PERF_HZ,
      "--call-graph", "dwarf",  "-o", xz_data, "--",        "env", "EMBER_WORKER=ember-it-xz",
      "/usr/bin/xz",  "-T1",    "-6", "-k",    "-c",        xzin,  NULL};
  pid_t xzp = tu_spawn(xz_argv, NULL, "/dev/null");
  pid_t nodep = -1;
  if (have_node) {
    const char *node_argv[] = {node, "--perf-basic-prof", EMBER_SOURCE_DIR "/tests/programs/fib.js",
                               "4", NULL};
    const char *node_env[] = {"EMBER_WORKER=ember-it-node", NULL};
    nodep = tu_spawn(node_argv, node_env, NULL);
  }
  assert_true(tu_wait(nofp, 120000) == 0);
  assert_true(tu_wait(badp, 120000) == 0);
  assert_true(tu_wait(pyp, 120000) == 0);
  assert_true(tu_wait(xzp, 120000) == 0);
  if (nodep > 0) assert_true(tu_wait(nodep, 120000) == 0);
  sleep(3); /* the last windows close */
  char text[1 << 16];
  assert_int_equal(tu_http_get(tu_logged_port(log_path, 5000), "/metrics", text, sizeof text), 200);
  double dwarf_stacks = tu_metric(tu_logged_port(log_path, 5000), "ember_agent_unwind_cfi_total");
  print_message("stacks unwound from CFI: %.0f (complete %.0f, truncated %.0f, no table %.0f, "
                "bad cfa %.0f)\n",
                dwarf_stacks,
                tu_metric(tu_logged_port(log_path, 5000),
                          "ember_agent_unwind_stacks_total{result=\"complete\"}"),
                tu_metric(tu_logged_port(log_path, 5000),
                          "ember_agent_unwind_stacks_total{result=\"truncated\"}"),
                tu_metric(tu_logged_port(log_path, 5000),
                          "ember_agent_unwind_stacks_total{result=\"no_table\"}"),
                tu_metric(tu_logged_port(log_path, 5000),
                          "ember_agent_unwind_stacks_total{result=\"bad_cfa\"}"));
  double no_cfi =
      tu_metric(tu_logged_port(log_path, 5000), "ember_agent_unwind_files_without_cfi_total");
  stop_agent(agent); /* and it exits cleanly */

  ember_profile_t **ps = NULL;
  size_t n = tu_consume_profiles(brokers, host_id, 5000, 60000, &ps);
  if (n == 0) fail_msg("no profile from host %s arrived (agent log: %s)", host_id, log_path);
  ember_profile_t *p = tu_merged_worker(ps, n, "ember-it-nofp", NULL);
  check_nofp(p);
  ember_profile_free(p);
  /* The corrupt one: sampled and named at the leaf, stacks partial. */
  p = tu_merged_worker(ps, n, "ember-it-badcfi", NULL);
  int64_t bad_total = ember_profile_total(p, 0);
  int64_t bad_leaf = tu_self(p, 0, "chain_leaf") + tu_self(p, 0, "by_weight");
  int64_t bad_share_x1000 = 0;
  {
    int64_t t = 0;
    bad_share_x1000 = (int64_t)(1000 * entry_share(p, &t));
  }
  print_message("corrupt .eh_frame: %lld samples, %lld at the known leaves, %.1f%% reach main\n",
                (long long)bad_total, (long long)bad_leaf, (double)bad_share_x1000 / 10);
  assert_true(bad_total > 500);
  assert_true(bad_leaf > bad_total / 2);
  assert_true(no_cfi >= 1);
  ember_profile_free(p);
  p = tu_merged_worker(ps, n, "ember-it-py", NULL);
  compare_with_perf(p, perf, py_data, "python3");
  ember_profile_free(p);
  p = tu_merged_worker(ps, n, "ember-it-xz", NULL);
  compare_with_perf(p, perf, xz_data, "xz");
  ember_profile_free(p);
  if (have_node) {
    p = tu_merged_worker(ps, n, "ember-it-node", NULL);
    int64_t total = 0;
    double share = entry_share(p, &total);
    int64_t js = tu_total_matching(p, 0, "fibonacciRecursive");
    print_message("node: %lld samples, %lld in fibonacciRecursive, %.1f%% reach the entry\n",
                  (long long)total, (long long)js, 100 * share);
    assert_true(js > total / 2);
    if (share < 0.9) fail_msg("only %.1f%% of node's samples reach the entry", 100 * share);
    ember_profile_free(p);
  }
  for (size_t i = 0; i < n; i++) ember_profile_free(ps[i]);
  free(ps);
  assert_true(dwarf_stacks > 1000);
  unlink(py);
  unlink(xzin);
  unlink(py_data);
  unlink(xz_data);
  unlink(bad);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unwind_programs_without_frame_pointers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
