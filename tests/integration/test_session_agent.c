/* On-demand CPU sessions on ember-agent against the real broker: two agents
 * with different host ids, each with its own burn program; commands on
 * ember.commands for host B only. Checks the events (who answers, what),
 * the result profile (session id, samples at the asked rate, B's process
 * only), that continuous windows go on without a gap meanwhile, and the
 * rejections (unknown actor, busy pid), the kernel rate cap and expiry.
 * Commands are signed (include/ember/sign.h): B holds the key and refuses,
 * counting each reason on its /metrics, a forged, an unsigned, a replayed,
 * a ttl-0 and an over-long-ttl command; A has no key and refuses even a
 * well-signed command. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/parse.h"
#include "ember/profile.h"
#include "ember/sign.h"

#define WINDOW_NS 2000000000LL

typedef struct agent_proc {
  char host[128], worker[128], actor[128], log[600];
  pid_t pid, burn;
} agent_proc_t;

typedef struct seen_event {
  ember_event_t e;
} seen_event_t;

static char uniq[64];
static seen_event_t events[256];
static size_t nevents;

static ember_sign_key_t key; /* the agents' (tu_command_key_file) */

static void start_agent(agent_proc_t *ap, const char *brokers, const char *tag, const char *extra,
                        bool with_key) {
  snprintf(ap->host, sizeof ap->host, "sess-%s-host-%s", tag, uniq);
  snprintf(ap->worker, sizeof ap->worker, "sess-%s-%s", tag, uniq);
  snprintf(ap->actor, sizeof ap->actor, "actor-%s-%s", tag, uniq);
  snprintf(ap->log, sizeof ap->log, "%s/agent-%s.log", EMBER_TEST_TMP, ap->host);
  char e_worker[160], e_actor[160];
  snprintf(e_worker, sizeof e_worker, "EMBER_WORKER=%s", ap->worker);
  snprintf(e_actor, sizeof e_actor, "EMBER_ACTOR=%s", ap->actor);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "45", NULL};
  const char *burn_env[] = {e_worker, e_actor, NULL};
  ap->burn = tu_spawn(burn_argv, burn_env, NULL);
  /* The rate check wants the burn on a CPU the whole time, also when the
   * machine is busy with other work; as root we can ask for that. */
  if (setpriority(PRIO_PROCESS, (id_t)ap->burn, -10) != 0)
    print_message("cannot raise burn's priority: %s\n", strerror(errno));

  char a_brokers[512], a_host[200], a_spool[700], a_sel[200];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_host, sizeof a_host, "host_id=%s", ap->host);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool-%s", EMBER_TEST_TMP, ap->host);
  snprintf(a_sel, sizeof a_sel, "selector=worker=sess-%s-*", tag);
  const char *argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                        a_brokers,
                        a_host,
                        a_spool,
                        a_sel,
                        "continuous_hz=49",
                        "window=2s",
                        "scan_interval=1s",
                        "metrics_listen=127.0.0.1:0",
                        with_key ? tu_command_key_arg() : "log_level=info",
                        extra,
                        NULL};
  ap->pid = tu_spawn(argv, NULL, ap->log);
}

/* Wait for a line containing `what` in the agent's log. */
static void wait_log(const agent_proc_t *ap, const char *what, int max_ms) {
  for (int waited = 0; waited < max_ms; waited += 100) {
    FILE *f = fopen(ap->log, "r");
    char line[2048];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
    if (f) fclose(f);
    if (found) return;
    usleep(100000);
  }
  fail_msg("no '%s' in %s after %d ms", what, ap->log, max_ms);
}

static unsigned metrics_port(const agent_proc_t *ap) { return tu_logged_port(ap->log, 0); }

static void stop_agent(const agent_proc_t *ap) {
  kill(ap->pid, SIGTERM);
  int status = tu_wait(ap->pid, 30000);
  if (status == -1) {
    tu_kill(ap->pid);
    fail_msg("agent %s did not stop within 30 s (log: %s)", ap->host, ap->log);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("agent %s exited with status %d (log: %s)", ap->host, status, ap->log);
}

/* --- commands and events --- */

typedef enum signing { SIGNED, UNSIGNED, FORGED, SIGNED_TWICE } signing_t;

static void send_start_as(const char *brokers, const agent_proc_t *to, const char *id,
                          const char *actor, uint32_t duration_ms, uint32_t hz, int64_t issued_ns,
                          uint32_t ttl_ms, signing_t how) {
  ember_command_t c = {.kind = EMBER_CMD_START,
                       .session_id = (char *)(uintptr_t)id,
                       .host = (char *)(uintptr_t)to->host,
                       .actor = (char *)(uintptr_t)actor,
                       .type = EMBER_SESSION_CPU,
                       .duration_ms = duration_ms,
                       .hz = hz,
                       .ttl_ms = ttl_ms,
                       .issued_ns = issued_ns};
  ember_buf_t b;
  ember_buf_init(&b, 1u << 16);
  assert_int_equal(ember_codec_encode_command(&c, &b), 0);
  char mac[EMBER_SIGN_MAC_HEX + 1];
  ember_sign_key_t forger;
  uint8_t raw[EMBER_SIGN_KEY_BYTES];
  memset(raw, 0x5a, sizeof raw);
  ember_sign_key_from_bytes(raw, &forger);
  /* A forger knows the key id (it is in every command) but not the key. */
  assert_int_equal(ember_sign_mac_hex(how == FORGED ? &forger : &key, b.data, b.len, mac), 0);
  for (int i = 0; i < (how == SIGNED_TWICE ? 2 : 1); i++) {
    tu_dr_tally_t t =
        tu_produce_command(brokers, to->host, b.data, b.len, how == UNSIGNED ? NULL : key.id,
                           how == UNSIGNED ? NULL : mac);
    assert_int_equal(t.ok, 1);
  }
  ember_buf_free(&b);
}

static void send_start(const char *brokers, const agent_proc_t *to, const char *id,
                       const char *actor, uint32_t duration_ms, uint32_t hz, int64_t issued_ns,
                       uint32_t ttl_ms) {
  send_start_as(brokers, to, id, actor, duration_ms, hz, issued_ns, ttl_ms, SIGNED);
}

static rd_kafka_t *events_consumer(const char *brokers, ember_kafka_t **k, ember_config_t **cfg) {
  char err[512], group[128];
  assert_int_equal(ember_config_new(cfg), 0);
  assert_int_equal(ember_config_set(*cfg, "brokers", brokers), 0);
  assert_int_equal(ember_kafka_new(*cfg, k, err, sizeof err), 0);
  snprintf(group, sizeof group, "tsess-%s", uniq);
  const char *topics[] = {EMBER_TOPIC_EVENTS};
  rd_kafka_t *c = NULL;
  if (ember_kafka_consumer_new(*k, group, NULL, topics, 1, &c, err, sizeof err) != 0)
    fail_msg("consumer: %s", err);
  return c;
}

/* Read ember.events for up to max_ms, keeping this run's events, until an
 * event of `id` in `state` has arrived (NULL id: for the whole time). */
static void pump(rd_kafka_t *c, const char *id, ember_event_state_t state, int max_ms) {
  int64_t end = ember_time_mono_ns() + (int64_t)max_ms * 1000000;
  while (ember_time_mono_ns() < end) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->payload != NULL) {
      ember_event_t e;
      char err[256];
      if (ember_codec_decode_event(m->payload, m->len, &e, err, sizeof err) == 0) {
        if (strstr(e.session_id, uniq) != NULL && nevents < sizeof events / sizeof *events) {
          print_message("event %s %s from %s: targets %u hz %u samples %llu: %s\n", e.session_id,
                        ember_event_state_name(e.state), e.host, e.targets, e.hz,
                        (unsigned long long)e.samples, e.message ? e.message : "");
          events[nevents++].e = e;
          bool hit = id != NULL && strcmp(e.session_id, id) == 0 && e.state == state;
          rd_kafka_message_destroy(m);
          if (hit) return;
          continue;
        }
        ember_event_clear(&e);
      }
    }
    rd_kafka_message_destroy(m);
  }
  if (id != NULL)
    fail_msg("no %s event for %s within %d ms", ember_event_state_name(state), id, max_ms);
}

static const ember_event_t *find_event(const char *id, ember_event_state_t state) {
  for (size_t i = 0; i < nevents; i++) {
    if (strcmp(events[i].e.session_id, id) == 0 && events[i].e.state == state) return &events[i].e;
  }
  return NULL;
}

/* Like find_event, but failing the test when there is none. */
static const ember_event_t *must_find(const char *id, ember_event_state_t state) {
  static char empty[1];
  static const ember_event_t none = {.session_id = empty, .host = empty, .message = empty};
  const ember_event_t *e = find_event(id, state);
  if (e == NULL) fail_msg("no %s event for %s", ember_event_state_name(state), id);
  return e ? e : &none;
}

static size_t count_events(const char *id, const char *host) {
  size_t n = 0;
  for (size_t i = 0; i < nevents; i++) {
    if (strcmp(events[i].e.session_id, id) == 0 &&
        (host == NULL || strcmp(events[i].e.host, host) == 0))
      n++;
  }
  return n;
}

/* Time `pid` has spent on a CPU, in ns (/proc/PID/schedstat), or -1. */
static int64_t oncpu_ns(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char *got = fgets(line, sizeof line, f);
  fclose(f);
  if (got == NULL) return -1;
  line[strcspn(line, " \n")] = '\0';
  int64_t v = -1;
  if (ember_parse_i64(line, 0, INT64_MAX, &v) != 0) return -1;
  return v;
}

typedef struct win {
  int64_t start, end;
} win_t;

static int cmp_win(const void *a, const void *b) {
  int64_t x = ((const win_t *)a)->start, y = ((const win_t *)b)->start;
  return x < y ? -1 : x > y;
}

static void test_session_agent_cpu(void **state) {
  (void)state;
  snprintf(uniq, sizeof uniq, "%d-%lld", (int)getpid(), (long long)(ember_time_now_ns() / 1000000));
  const char *brokers = tu_bootstrap();
  ember_kafka_t *k = NULL;
  ember_config_t *cfg = NULL;
  rd_kafka_t *ec = events_consumer(brokers, &k, &cfg);

  agent_proc_t A, B;
  memset(&A, 0, sizeof A);
  memset(&B, 0, sizeof B);
  char err[512];
  assert_int_equal(ember_sign_key_load(tu_command_key_file(), &key, err, sizeof err), 0);
  /* A has no key: it takes no command at all. */
  start_agent(&A, brokers, "a", NULL, false);
  /* B allows any rate, so the kernel's cap is the one that applies. */
  start_agent(&B, brokers, "b", "session.max_hz=1000000", true);
  wait_log(&A, "no command_key_file: every session command will be refused", 30000);
  wait_log(&A, "reading ember.commands from its latest offsets", 30000);
  wait_log(&B, "reading ember.commands from its latest offsets", 30000);
  pump(ec, NULL, 0, 1500); /* our consumer joins; discovery scans the burns */

  char s1[128], s2[128], s3[128], s4[128], s5[128], f[5][128];
  for (int i = 0; i < 5; i++) snprintf(f[i], sizeof f[i], "f%d-%s", i, uniq);
  snprintf(s1, sizeof s1, "s1-%s", uniq);
  snprintf(s2, sizeof s2, "s2-%s", uniq);
  snprintf(s3, sizeof s3, "s3-%s", uniq);
  snprintf(s4, sizeof s4, "s4-%s", uniq);
  snprintf(s5, sizeof s5, "s5-%s", uniq);
  int64_t now = ember_time_now_ns();
  int64_t cpu0 = oncpu_ns(B.burn), wall0 = ember_time_mono_ns();
  /* S1: 2 s at 1000 Hz on B's burn; S2 the same pid meanwhile; S3 an actor
   * nobody has; S4 issued an hour ago with a 1 s ttl; then garbage. S1
   * reaches B twice (a replay); F0 forged, F1 unsigned, F2 with ttl 0, F3
   * with a ttl of 11 min, F4 well signed for A, which has no key. */
  send_start_as(brokers, &B, s1, B.actor, 2000, 1000, now, 30000, SIGNED_TWICE);
  send_start(brokers, &B, s2, B.actor, 2000, 1000, now, 30000);
  send_start(brokers, &B, s3, "actor-nobody", 1000, 100, now, 30000);
  send_start(brokers, &B, s4, B.actor, 1000, 100, now - 3600000000000LL, 1000);
  const void *junk[] = {"\xff\xfe not a command"};
  size_t junk_len[] = {17};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_COMMANDS, B.host, junk, junk_len, 1).ok, 1);
  send_start_as(brokers, &B, f[0], B.actor, 1000, 100, now, 30000, FORGED);
  send_start_as(brokers, &B, f[1], B.actor, 1000, 100, now, 30000, UNSIGNED);
  send_start(brokers, &B, f[2], B.actor, 1000, 100, now, 0);
  send_start(brokers, &B, f[3], B.actor, 1000, 100, now, 660000);
  send_start(brokers, &A, f[4], A.actor, 1000, 100, now, 30000);

  pump(ec, s1, EMBER_EV_DONE, 30000);
  /* How much of a CPU B's burn had meanwhile (this brackets the session). */
  double share = (double)(oncpu_ns(B.burn) - cpu0) / (double)(ember_time_mono_ns() - wall0);
  const ember_event_t *acc = must_find(s1, EMBER_EV_ACCEPTED);
  const ember_event_t *run = must_find(s1, EMBER_EV_RUNNING);
  const ember_event_t *done = must_find(s1, EMBER_EV_DONE);
  assert_string_equal(run->host, B.host);
  assert_string_equal(acc->host, B.host);
  assert_int_equal(acc->targets, 1);
  assert_int_equal(acc->hz, 1000);
  assert_string_equal(done->host, B.host);
  assert_true(done->samples > 0);

  /* Host A saw every command (it reads all partitions) and answered none. */
  pump(ec, NULL, 0, 1000);
  assert_int_equal(count_events(s1, A.host), 0);
  assert_int_equal(count_events(s2, A.host), 0);
  assert_int_equal(count_events(s3, A.host), 0);
  const ember_event_t *r2 = must_find(s2, EMBER_EV_REJECTED);
  const ember_event_t *r3 = must_find(s3, EMBER_EV_REJECTED);
  assert_non_null(strstr(r2->message, "already being sampled"));
  assert_non_null(strstr(r3->message, "no target"));
  assert_int_equal(count_events(s4, NULL), 0);
  /* The replay of S1 was refused, not REJECTED as "already running". */
  assert_null(find_event(s1, EMBER_EV_REJECTED));
  for (int i = 0; i < 5; i++) assert_int_equal(count_events(f[i], NULL), 0);

  /* S5: above the kernel's rate: capped and said so. */
  char out[64];
  assert_int_equal(tu_sh("cat /proc/sys/kernel/perf_event_max_sample_rate", out, sizeof out), 0);
  out[strcspn(out, "\n")] = '\0';
  uint64_t kmax = 0;
  assert_int_equal(ember_parse_u64(out, 1, UINT32_MAX - 1, &kmax), 0);
  send_start(brokers, &B, s5, B.actor, 200, (uint32_t)kmax + 1, ember_time_now_ns(), 30000);
  pump(ec, s5, EMBER_EV_DONE, 20000);
  const ember_event_t *a5 = must_find(s5, EMBER_EV_ACCEPTED);
  assert_int_equal(a5->hz, (uint32_t)kmax);
  assert_non_null(strstr(a5->message, "perf_event_max_sample_rate"));

  /* Metrics say the same. */
  unsigned pa = metrics_port(&A), pb = metrics_port(&B);
  assert_true(tu_metric(pa, "ember_agent_commands_other_host_total") >= 10);
  assert_true(tu_metric(pa, "ember_agent_commands_refused_total{reason=\"no_key\"}") == 1);
  static const char *const reasons[] = {"bad_mac", "unsigned",     "replayed",
                                        "no_ttl",  "ttl_too_long", "expired"};
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
    char name[128];
    snprintf(name, sizeof name, "ember_agent_commands_refused_total{reason=\"%s\"}", reasons[i]);
    double v = tu_metric(pb, name);
    if (v != 1) fail_msg("%s = %g on B, want 1 (log %s)", name, v, B.log);
  }
  assert_true(tu_metric(pa, "ember_agent_sessions_started_total") == 0);
  assert_true(tu_metric(pb, "ember_agent_sessions_started_total") == 2);
  assert_true(tu_metric(pb, "ember_agent_sessions_done_total") == 2);
  assert_true(tu_metric(pb, "ember_agent_sessions_rejected_total") == 2);
  assert_true(tu_metric(pb, "ember_agent_commands_expired_total") == 1);
  assert_true(tu_metric(pb, "ember_agent_commands_malformed_total") == 1);
  assert_true(tu_metric(pb, "ember_agent_session_samples_total") >= (double)done->samples);

  sleep(3); /* the window after the session closes */
  stop_agent(&A);
  stop_agent(&B);
  tu_kill(A.burn);
  tu_kill(B.burn);

  /* The result: B's burn only, at the asked rate. */
  ember_profile_t **ps = NULL;
  size_t n = tu_consume_profiles(brokers, B.host, 5000, 60000, &ps);
  int64_t samples = 0, hot = 0, cold = 0, s_start = 0, s_end = 0;
  size_t nres = 0, nwin = 0;
  win_t *wins = calloc(n ? n : 1, sizeof *wins);
  assert_non_null(wins);
  for (size_t i = 0; i < n; i++) {
    const char *sid = ember_profile_session_id(ps[i]);
    const ember_labels_t *l = ember_profile_labels(ps[i]);
    if (sid != NULL && strcmp(sid, s1) == 0) {
      nres++;
      assert_int_equal(l->pid, (uint32_t)B.burn);
      assert_string_equal(l->actor, B.actor);
      assert_string_equal(l->worker, B.worker);
      assert_string_equal(l->host, B.host);
      samples += ember_profile_total(ps[i], 0);
      hot += tu_self(ps[i], 0, "burn_hot");
      cold += tu_self(ps[i], 0, "burn_cold");
      ember_profile_window(ps[i], &s_start, &s_end);
    } else if ((sid == NULL || sid[0] == '\0') && l->pid == (uint32_t)B.burn) {
      ember_profile_window(ps[i], &wins[nwin].start, &wins[nwin].end);
      nwin++;
    }
  }
  print_message("session %s: %zu profiles, %lld samples (hot %lld, cold %lld), %zu windows\n", s1,
                nres, (long long)samples, (long long)hot, (long long)cold, nwin);
  assert_int_equal(nres, 1);
  assert_true(hot > 0 && cold > 0);
  /* One sample per ms of the thread's CPU time: a thread that had a CPU
   * to itself gives 2000 +- 10%. On a machine too busy to give it one
   * (other builds), compare with the CPU it did get, more loosely: the
   * share is measured over a slightly longer span than the session. */
  print_message("burn had %.0f%% of a CPU during the session\n", share * 100);
  if (share >= 0.9) {
    if (samples < 1800 || samples > 2200)
      fail_msg("a 2 s session at 1000 Hz gave %lld samples, want 2000 +- 10%%", (long long)samples);
  } else {
    double want = share * 2000;
    if ((double)samples < want * 0.75 || (double)samples > want * 1.25 + 100)
      fail_msg("%lld samples, want about %.0f (burn had %.0f%% of a CPU)", (long long)samples, want,
               share * 100);
  }
  assert_int_equal(samples, (int64_t)done->samples);
  assert_true(s_end - s_start >= 1900000000LL && s_end - s_start <= 2500000000LL);

  /* Continuous windows of B's burn kept coming: the windows from the one
   * holding the session's start to the one holding its end follow each
   * other without a gap, each about a whole window long (windows are
   * labelled by when they were really cut, a little after each multiple of
   * the window; but the agent's first, which starts when the agent did). */
  qsort(wins, nwin, sizeof *wins, cmp_win);
  size_t i = nwin;
  for (size_t w = 0; w < nwin && i == nwin; w++) {
    if (wins[w].start <= s_start && s_start < wins[w].end) i = w;
  }
  if (i == nwin) {
    for (size_t w = 0; w < nwin; w++)
      print_message("continuous window [%lld, %lld)\n", (long long)wins[w].start,
                    (long long)wins[w].end);
    fail_msg("no continuous window holds the session start %lld", (long long)s_start);
  }
  while (wins[i].end < s_end) {
    if (i + 1 >= nwin || wins[i + 1].start != wins[i].end)
      fail_msg("gap in continuous windows after [%lld, %lld)", (long long)wins[i].start,
               (long long)wins[i].end);
    int64_t len = wins[i + 1].start - wins[i].start;
    if (i > 0 && (len < WINDOW_NS * 3 / 4 || len > WINDOW_NS * 5 / 4))
      fail_msg("window starts %lld then %lld", (long long)wins[i].start,
               (long long)wins[i + 1].start);
    i++;
  }
  free(wins);
  for (size_t j = 0; j < n; j++) ember_profile_free(ps[j]);
  free(ps);

  /* Nothing of the session from host A. */
  n = tu_consume_profiles(brokers, A.host, 3000, 30000, &ps);
  for (size_t j = 0; j < n; j++) {
    const char *sid = ember_profile_session_id(ps[j]);
    assert_true(sid == NULL || strstr(sid, uniq) == NULL);
    ember_profile_free(ps[j]);
  }
  free(ps);

  /* A key file every user may read stops the agent with a sentence. */
  char open_key[600], open_arg[700], open_log[700], out2[256];
  snprintf(open_key, sizeof open_key, "%s/open-%s.key", EMBER_TEST_TMP, uniq);
  snprintf(open_arg, sizeof open_arg, "command_key_file=%s", open_key);
  snprintf(open_log, sizeof open_log, "%s/agent-open-%s.log", EMBER_TEST_TMP, uniq);
  assert_int_equal(ember_sign_key_create(open_key, err, sizeof err), 0);
  assert_int_equal(chmod(open_key, 0644), 0);
  char c_brokers[512];
  snprintf(c_brokers, sizeof c_brokers, "brokers=%s", brokers);
  const char *open_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                             c_brokers,
                             "metrics_listen=",
                             "spool_dir=",
                             open_arg,
                             NULL};
  pid_t op = tu_spawn(open_argv, NULL, open_log);
  int ost = tu_wait(op, 60000);
  if (ost == -1) tu_kill(op);
  assert_true(ost != -1 && WIFEXITED(ost) && WEXITSTATUS(ost) != 0);
  char grep[1600];
  snprintf(grep, sizeof grep, "grep -c 'is open to every user (mode 0644).*chmod 600' %s",
           open_log);
  if (tu_sh(grep, out2, sizeof out2) != 0) fail_msg("no refusal of the open key in %s", open_log);
  unlink(open_key);

  for (size_t j = 0; j < nevents; j++) ember_event_clear(&events[j].e);
  rd_kafka_consumer_close(ec);
  rd_kafka_destroy(ec);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_session_agent_cpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
