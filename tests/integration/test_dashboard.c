/* The dashboard (issues 6 and 12) in a real browser, every part a real
 * process: ember-collector serves web/ and the API; one ember-agent (2 s
 * windows at 199 Hz, selecting only this test's workers) profiles `burn`
 * (worker <tag>-burn, actor <tag>-room-1), two versions of `versioned`
 * (worker <tag>-app, versions 1.0 and 2.0) and `spike` (worker
 * <tag>-spike: idle, then three threads burning in spike_burn) and
 * `heapgrow leak` under libember_alloc.so (worker <tag>-heap: leak_step
 * leaking 1 MiB/s) through the real broker. The collector's rules file
 * holds <tag>-spike-hot, which fires on the spike and captures a session.
 * One window of a Node.js service (worker <tag>-web:
 * main;serveRequest;alphaWork|betaWork, the JavaScript functions named
 * through a source map, with their files, lines and V8's minified names,
 * issue 16) goes straight to ember.profiles, as no agent here runs node.
 * Once the store holds each worker, tests/browser/dashboard.test.mjs
 * drives Debian's headless chromium through the explore, compare,
 * sessions and alerts views (a session started from the page, the rule
 * editor, the spike's alert with its diff and capture) and saves a
 * screenshot of each in EMBER_TEST_TMP/screenshots-<tag>/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/codec.h"
#include "ember/ember.h"
#include "ember/kafka.h"

#define CHROMIUM    "/usr/bin/chromium"
#define BROWSER_DIR EMBER_SOURCE_DIR "/tests/browser"

static char tag[96], log_path[600];
/* Every process the test starts, so a failure half-way still ends them
 * (teardown); -1 once stopped or never started. */
static pid_t col = -1, agent = -1, burn = -1, v1 = -1, v2 = -1, spike = -1, leak = -1;

/* Does `port` answer `path` with 200 and a body holding every string in
 * `needles` (NULL-terminated)? */
static bool api_has(unsigned port, const char *path, const char *const *needles) {
  static char body[1 << 20];
  if (tu_http_get(port, path, body, sizeof body) != 200) return false;
  for (size_t i = 0; needles[i] != NULL; i++)
    if (strstr(body, needles[i]) == NULL) return false;
  return true;
}

/* The browser test needs things no CMake step builds: say which script
 * provides them rather than skip. */
static void require_browser(char *node, size_t size) {
  if (access(CHROMIUM, X_OK) != 0)
    fail_msg("%s is missing: run scripts/deps.sh (Debian's chromium package)", CHROMIUM);
  struct stat st;
  if (stat(BROWSER_DIR "/node_modules/playwright-core/package.json", &st) != 0)
    fail_msg("%s/node_modules has no playwright-core: run scripts/npm-deps.sh", BROWSER_DIR);
  if (!tu_which("node", node, size)) fail_msg("node is not on PATH: run scripts/deps.sh");
}

/* Produce one 10 s window, ending now, of a Node.js service on `host`:
 * main (native) ; serveRequest ; alphaWork (30 samples) or betaWork (10),
 * the JavaScript frames as the agent writes a frame named through a source
 * map (issue 16): the author's name, file and line, the bundle as module
 * and V8's name in `generated`. The browser hovers alphaWork. A worker of
 * its own, so no other step's totals change. */
static void publish_js(const char *brokers, const char *worker, const char *host) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  ember_labels_t labels = {.worker = worker, .version = "1.0", .host = host, .pid = 4343};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  char agent_id[200];
  snprintf(agent_id, sizeof agent_id, "%s-agent", worker);
  assert_int_equal(ember_profile_set_origin(p, agent_id, 1, NULL), 0);
  int64_t now = ember_time_now_ns();
  assert_int_equal(ember_profile_set_window(p, now - 10000000000LL, now), 0);
  ember_profile_set_period(p, 10000000);
  const ember_frame_t main_fr = {
      .function = "main", .module = "/usr/bin/node", .address = 0x1000, .kind = EMBER_FRAME_NATIVE};
  const ember_frame_t serve = {.function = "serveRequest",
                               .file = "/srv/app/src/server.ts",
                               .line = 40,
                               .module = "/srv/app/dist/app.js",
                               .generated = "s /srv/app/dist/app.js:1:1200",
                               .kind = EMBER_FRAME_JIT};
  const ember_frame_t alpha = {.function = "alphaWork",
                               .file = "/srv/app/src/alpha.ts",
                               .line = 12,
                               .module = "/srv/app/dist/app.js",
                               .generated = "a /srv/app/dist/app.js:1:4711",
                               .kind = EMBER_FRAME_JIT};
  const ember_frame_t beta = {.function = "betaWork",
                              .file = "/srv/app/src/beta.ts",
                              .line = 3,
                              .module = "/srv/app/dist/app.js",
                              .generated = "b /srv/app/dist/app.js:1:4980",
                              .kind = EMBER_FRAME_JIT};
  const ember_frame_t sa[] = {alpha, serve, main_fr}, sb[] = {beta, serve, main_fr};
  const int64_t va[] = {30, 30 * 10000000LL}, vb[] = {10, 10 * 10000000LL};
  assert_int_equal(ember_profile_add(p, sa, 3, va), 0);
  assert_int_equal(ember_profile_add(p, sb, 3, vb), 0);
  ember_buf_t buf;
  ember_buf_init(&buf, 1 << 20);
  assert_int_equal(ember_codec_encode(p, &buf), 0);
  ember_profile_free(p);
  const void *values[] = {buf.data};
  const size_t lens[] = {buf.len};
  tu_dr_tally_t t = tu_produce(brokers, EMBER_TOPIC_PROFILES, worker, values, lens, 1);
  ember_buf_free(&buf);
  if (t.ok != 1)
    fail_msg("the %s profile was not delivered (%s)", worker, rd_kafka_err2str(t.first_err));
}

static void test_dashboard_views(void **state) {
  (void)state;
  int64_t t0 = ember_time_now_ns();
  snprintf(tag, sizeof tag, "dash-%d-%lld", (int)getpid(), (long long)(t0 / 1000000 % 100000000));
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  char node[512];
  require_browser(node, sizeof node);
  const char *brokers = tu_bootstrap();

  char dir[600], group[160], shots[700];
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(group, sizeof group, "g-%s", tag);
  snprintf(shots, sizeof shots, "%s/screenshots-%s", EMBER_TEST_TMP, tag);
  print_message("logs: %s\nscreenshots: %s/\n", log_path, shots);
  unsigned port = tu_free_port();

  /* The alert the browser looks at. Idling is a twentieth of a core. On
   * the loaded 2-core test machine (a full suite and CPU hogs beside it,
   * the browser running) two burning threads got only 0.11 to 0.15 cores
   * between them, so the spike burns three and the threshold is 0.1,
   * twice the idle load. The capture starts once it fires. */
  char spike_w[160], rule[160], rules_path[700], a_rules[720];
  snprintf(spike_w, sizeof spike_w, "%s-spike", tag);
  snprintf(rule, sizeof rule, "%s-spike-hot", tag);
  snprintf(rules_path, sizeof rules_path, "%s/%s.rules", EMBER_TEST_TMP, tag);
  snprintf(a_rules, sizeof a_rules, "alerts.rules=%s", rules_path);
  FILE *rf = fopen(rules_path, "w");
  if (rf == NULL) fail_msg("cannot write %s", rules_path);
  fprintf(rf,
          "# written by test_dashboard\n"
          "[rule %s]\n"
          "worker = %s\n"
          "above = 0.1\n"
          "for = 10s\n"
          "capture.type = cpu\n"
          "capture.duration_ms = 3000\n",
          rule, spike_w);
  if (fclose(rf) != 0) fail_msg("cannot write %s", rules_path);
  const char *col_extra[] = {tu_command_key_arg(), /* signs the page's session and the capture */
                             a_rules, NULL};
  col = tu_start_collector(brokers, dir, group, port, col_extra, log_path);

  char web_w[160], host[160];
  snprintf(web_w, sizeof web_w, "%s-web", tag);
  snprintf(host, sizeof host, "%s-host", tag);
  publish_js(brokers, web_w, host);

  char a_brokers[512], a_host[200], a_spool[700], a_sel[200];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", host);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool", dir);
  snprintf(a_sel, sizeof a_sel, "selector=worker=%s-*", tag);
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_host,
                              a_spool,
                              a_sel,
                              "window=2s",
                              "continuous_hz=199",
                              "scan_interval=1s",
                              "targets_refresh=2s",
                              "metrics_listen=",
                              tu_command_key_arg(),
                              NULL};
  agent = tu_spawn(agent_argv, NULL, log_path);

  /* The programs outlive any run of the test; teardown kills them. */
  char burn_w[160], app_w[160], actor[160], e_burn[200], e_app[200], e_actor[200];
  snprintf(burn_w, sizeof burn_w, "%s-burn", tag);
  snprintf(app_w, sizeof app_w, "%s-app", tag);
  snprintf(actor, sizeof actor, "%s-room-1", tag);
  snprintf(e_burn, sizeof e_burn, "EMBER_WORKER=%s", burn_w);
  snprintf(e_app, sizeof e_app, "EMBER_WORKER=%s", app_w);
  snprintf(e_actor, sizeof e_actor, "EMBER_ACTOR=%s", actor);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "300", NULL};
  const char *burn_env[] = {e_burn, "EMBER_VERSION=1.0", e_actor, NULL};
  burn = tu_spawn(burn_argv, burn_env, NULL);
  const char *v1_argv[] = {EMBER_TEST_PROGRAMS "/versioned", "v1", "300", NULL};
  const char *v1_env[] = {e_app, "EMBER_VERSION=1.0", NULL};
  v1 = tu_spawn(v1_argv, v1_env, NULL);
  const char *v2_argv[] = {EMBER_TEST_PROGRAMS "/versioned", "v2", "300", NULL};
  const char *v2_env[] = {e_app, "EMBER_VERSION=2.0", NULL};
  v2 = tu_spawn(v2_argv, v2_env, NULL);
  /* Idle for the baseline, then burn (three threads) through the rest of
   * the run: the alert must still be firing when the browser reaches it. */
  char e_spike[200];
  snprintf(e_spike, sizeof e_spike, "EMBER_WORKER=%s", spike_w);
  const char *spike_argv[] = {EMBER_TEST_PROGRAMS "/spike", "idle:20", "burn:280x3", NULL};
  const char *spike_env[] = {e_spike, NULL};
  spike = tu_spawn(spike_argv, spike_env, NULL);
  /* A slow leak under the in-use heap library (issue 15): the heap view's
   * timeline and growth table. */
  char heap_w[160], e_heap[200];
  snprintf(heap_w, sizeof heap_w, "%s-heap", tag);
  snprintf(e_heap, sizeof e_heap, "EMBER_WORKER=%s", heap_w);
  const char *leak_argv[] = {EMBER_TEST_PROGRAMS "/heapgrow", "leak", NULL};
  const char *leak_env[] = {e_heap, "EMBER_VERSION=3.0",
                            "LD_PRELOAD=" EMBER_BINARY_DIR "/preload/libember_alloc.so", NULL};
  leak = tu_spawn(leak_argv, leak_env, NULL);

  /* Wait until the store has every function the browser will look for,
   * so the page never races the first windows. */
  char p_burn[400], p_v1[400], p_v2[400], p_spike[400];
  snprintf(p_burn, sizeof p_burn, "/api/v1/profile?worker=%s&from=-5m&format=top&limit=100",
           burn_w);
  snprintf(p_v1, sizeof p_v1, "/api/v1/profile?worker=%s&version=1.0&from=-5m&format=top&limit=100",
           app_w);
  snprintf(p_v2, sizeof p_v2, "/api/v1/profile?worker=%s&version=2.0&from=-5m&format=top&limit=100",
           app_w);
  snprintf(p_spike, sizeof p_spike, "/api/v1/profile?worker=%s&from=-5m&format=top&limit=100",
           spike_w);
  const char *n_burn[] = {"\"burn_hot\"", "\"burn_cold\"", NULL};
  const char *n_v1[] = {"\"shared_work\"", "\"old_path\"", NULL};
  const char *n_v2[] = {"\"shared_work\"", "\"new_path\"", NULL};
  const char *n_spike[] = {"\"idle_work\"", NULL};
  char p_heap[400];
  snprintf(p_heap, sizeof p_heap,
           "/api/v1/profile?worker=%s&from=-5m&type=inuse_bytes&format=top&limit=100", heap_w);
  const char *n_heap[] = {"\"leak_step\"", NULL};
  /* The tree, as the page asks for it, must carry the generated name: a
   * failure here is the pipeline's, not the page's. */
  char p_web[400];
  snprintf(p_web, sizeof p_web, "/api/v1/profile?worker=%s&from=-5m&format=tree", web_w);
  const char *n_web[] = {"\"alphaWork\"", "a /srv/app/dist/app.js:1:4711", "alpha.ts", NULL};
  bool ready = false;
  for (int t = 0; t < 600 && !ready; t++) {
    ready = api_has(port, p_burn, n_burn) && api_has(port, p_v1, n_v1) &&
            api_has(port, p_v2, n_v2) && api_has(port, p_spike, n_spike) &&
            api_has(port, p_heap, n_heap) && api_has(port, p_web, n_web);
    if (!ready) usleep(100000);
  }
  if (!ready) fail_msg("the store had no profiles of %s-* after 60 s (log %s)", tag, log_path);
  print_message("data in the store after %.1f s\n", (double)(ember_time_now_ns() - t0) / 1e9);

  /* timeout(1) bounds a hung browser; the script bounds each step itself. */
  static char out[1 << 18];
  char cmd[4096];
  snprintf(cmd, sizeof cmd,
           "cd %s && timeout -k 5 240 %s dashboard.test.mjs --url=http://127.0.0.1:%u/ "
           "--worker=%s --app=%s --actor=%s --host=%s --spike=%s --rule=%s --heap=%s --web=%s "
           "--shots=%s 2>&1",
           BROWSER_DIR, node, port, burn_w, app_w, actor, host, spike_w, rule, heap_w, web_w,
           shots);
  int64_t b0 = ember_time_now_ns();
  int rc = tu_sh(cmd, out, sizeof out);
  /* print_message truncates long text: the script's output goes whole. */
  print_message("$ %s\n", cmd);
  fputs(out, stdout);
  print_message("-> exit %d after %.1f s\n", rc, (double)(ember_time_now_ns() - b0) / 1e9);
  fflush(stdout);

  pid_t *progs[] = {&burn, &v1, &v2, &spike, &leak};
  for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    tu_kill(*progs[i]);
    *progs[i] = -1;
  }
  /* A clean stop is part of the test: the ASan tree's collector reports
   * leaks by its exit status. */
  pid_t a = agent, c = col;
  agent = col = -1;
  tu_stop_daemon(a, "ember-agent", log_path);
  tu_stop_daemon(c, "ember-collector", log_path);
  if (rc != 0) fail_msg("the browser test failed (exit %d): see its output above", rc);
  print_message("screenshots: %s/\n", shots);
}

static int teardown(void **state) {
  (void)state;
  pid_t *all[] = {&burn, &v1, &v2, &spike, &leak, &agent, &col};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    tu_kill(*all[i]);
    *all[i] = -1;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(test_dashboard_views, teardown)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
