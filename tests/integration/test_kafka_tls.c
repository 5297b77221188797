/* Kafka over TLS with SASL against the real broker's SASL_SSL listener
 * (tests/kafka/broker.sh: a throw-away CA, user "ember"), every part a
 * separate process as in production:
 *  - ember-agent and ember-collector log in with the password in a file
 *    (kafka.sasl.password_file, from a --config file): a window the agent
 *    publishes is stored and answered by the API, and the password appears
 *    in no log line;
 *  - with a wrong password both exit 1 at start within a bounded time with
 *    one sentence naming the user and the mechanism;
 *  - kafka.sasl.password_file's own errors.
 *
 * The mechanism is SCRAM-SHA-512 when the librdkafka in use can log in to
 * a Kafka 4 broker with it (2.6.1 and later) and PLAIN otherwise; with an
 * older librdkafka a SCRAM login with the right password is refused, and
 * the sentence then says why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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
#include "ember/config.h"
#include "ember/ember.h"
#include "ember/kafka.h"

/* librdkafka's first version whose SCRAM client Kafka 4 accepts. */
#define SCRAM_OK_VERSION 0x020601ff

static char tag[96];
static char dir[600];
static char log_path[700];
static char broker_dir[512];
static char sasl_addr[256];
static char password[256];

static void read_line(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "r");
  if (f == NULL) fail_msg("cannot read %s: did broker_start run?", path);
  if (fgets(buf, (int)size, f) == NULL) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\r\n")] = '\0';
  if (buf[0] == '\0') fail_msg("%s is empty", path);
}

static void setup_names(const char *what) {
  snprintf(tag, sizeof tag, "tls-%s-%d-%lld", what, (int)getpid(),
           (long long)(ember_time_now_ns() / 1000000));
  snprintf(dir, sizeof dir, "%s/%s", EMBER_TEST_TMP, tag);
  snprintf(log_path, sizeof log_path, "%s/%s.log", EMBER_TEST_TMP, tag);
  mkdir(EMBER_TEST_TMP, 0755);
  mkdir(dir, 0755);
  const char *bd = getenv("EMBER_TEST_BROKER_DIR");
  if (bd == NULL) fail_msg("EMBER_TEST_BROKER_DIR is not set: run through ctest");
  snprintf(broker_dir, sizeof broker_dir, "%s", bd);
  char path[700];
  snprintf(path, sizeof path, "%s/bootstrap_sasl_ssl", broker_dir);
  read_line(path, sasl_addr, sizeof sasl_addr);
  snprintf(path, sizeof path, "%s/sasl_password", broker_dir);
  read_line(path, password, sizeof password);
}

static const char *mechanism(void) {
  return rd_kafka_version() >= SCRAM_OK_VERSION ? "SCRAM-SHA-512" : "PLAIN";
}

/* A config file with the listener's security settings, the password as
 * `password_line` ("kafka.sasl.password_file = ..." or "kafka.sasl.password
 * = ..."). brokers stay on the command line. */
static void write_conf(const char *path, const char *mech, const char *password_line) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f,
          "# test_kafka_tls\n"
          "kafka.security.protocol = SASL_SSL\n"
          "kafka.sasl.mechanisms = %s\n"
          "kafka.sasl.username = ember\n"
          "%s\n"
          "kafka.ssl.ca.location = %s/ca.pem\n",
          mech, password_line, broker_dir);
  assert_int_equal(fclose(f), 0);
}

/* The whole log file (static storage). */
static const char *read_log(void) {
  static char text[1 << 20];
  text[0] = '\0';
  FILE *f = fopen(log_path, "r");
  if (f == NULL) return text;
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  return text;
}

static bool api_has(unsigned port, const char *path, const char *needle) {
  static char body[1 << 18];
  return tu_http_get(port, path, body, sizeof body) == 200 && strstr(body, needle) != NULL;
}

static void test_kafka_tls_agent_collector(void **state) {
  (void)state;
  setup_names("ok");
  const char *mech = mechanism();
  print_message("librdkafka %s: SASL/%s over TLS at %s\n", rd_kafka_version_str(), mech, sasl_addr);
  char conf[800], pw_line[800], a_conf[820];
  snprintf(conf, sizeof conf, "%s/kafka.conf", dir);
  snprintf(pw_line, sizeof pw_line, "kafka.sasl.password_file = %s/sasl_password", broker_dir);
  write_conf(conf, mech, pw_line);
  snprintf(a_conf, sizeof a_conf, "--config=%s", conf);

  char group[160];
  snprintf(group, sizeof group, "g-%s", tag);
  unsigned port = tu_free_port();
  const char *c_extra[] = {a_conf, NULL};
  pid_t col = tu_start_collector(sasl_addr, dir, group, port, c_extra, log_path);

  char a_brokers[300], a_host[160], a_spool[700], a_sel[160];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", sasl_addr);
  snprintf(a_host, sizeof a_host, "host_id=%s", tag);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool", dir);
  snprintf(a_sel, sizeof a_sel, "selector=worker=%s-*", tag);
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_conf,
                              a_host,
                              a_spool,
                              a_sel,
                              "continuous_hz=99",
                              "window=2s",
                              "scan_interval=1s",
                              "metrics_listen=127.0.0.1:0",
                              NULL};
  pid_t agent = tu_spawn(agent_argv, NULL, log_path);

  char worker[160], e_worker[200];
  snprintf(worker, sizeof worker, "%s-burn", tag);
  snprintf(e_worker, sizeof e_worker, "EMBER_WORKER=%s", worker);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "8", NULL};
  const char *burn_env[] = {e_worker, NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);

  /* The agent's windows reach the collector only through the SASL_SSL
   * listener (both were given no other address), so a stored burn_hot is
   * the whole path: agent login, produce, collector login, consume, store,
   * API. 90 s: the first windows wait for the agent's scan and the
   * collector's group join, which is slow on a loaded machine. */
  char path[400];
  snprintf(path, sizeof path, "/api/v1/profile?worker=%s&from=-10m&format=top&limit=100", worker);
  bool stored = false;
  for (int t = 0; t < 900 && !stored; t++) {
    stored = api_has(port, path, "\"burn_hot\"");
    if (!stored) usleep(100000);
  }
  tu_wait(burn, 30000);
  if (!stored) {
    tu_kill(agent);
    tu_kill(col);
    fail_msg("no profile of %s in the API after 90 s (log %s)", worker, log_path);
  }
  tu_stop_daemon(agent, "ember-agent", log_path);
  tu_stop_daemon(col, "ember-collector", log_path);

  const char *text = read_log();
  assert_null(strstr(text, password));
  assert_null(strstr(text, "authentication failed"));
}

/* Start `argv` (logging to log_path) and require exit 1 within 30 s with
 * the sentence; returns the seconds it took. */
static double expect_refused(const char *const *argv, const char *what, const char *mech) {
  int64_t t0 = ember_time_mono_ns();
  pid_t pid = tu_spawn(argv, NULL, log_path);
  int status = tu_wait(pid, 30000);
  double secs = (double)(ember_time_mono_ns() - t0) / 1e9;
  if (status == -1) {
    tu_kill(pid);
    fail_msg("%s still ran 30 s after start with a wrong password (log %s)", what, log_path);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
    fail_msg("%s: status %d, expected exit 1 (log %s)", what, status, log_path);
  char sentence[512];
  snprintf(sentence, sizeof sentence,
           "error kafka: authentication failed for user 'ember' (SASL/%s) at %s: ", mech,
           sasl_addr);
  const char *text = read_log();
  if (strstr(text, sentence) == NULL)
    fail_msg("%s: no \"%s\" in its log:\n%s", what, sentence, text);
  print_message("%s refused in %.2f s\n", what, secs);
  return secs;
}

static void test_kafka_tls_wrong_password_exits(void **state) {
  (void)state;
  setup_names("bad");
  const char *mech = mechanism();
  const char *wrong = "not-the-password-7f3a";
  char conf[800], pw_line[800], a_conf[820];
  snprintf(conf, sizeof conf, "%s/kafka.conf", dir);
  snprintf(pw_line, sizeof pw_line, "kafka.sasl.password = %s", wrong);
  write_conf(conf, mech, pw_line);
  snprintf(a_conf, sizeof a_conf, "--config=%s", conf);

  char a_brokers[300], a_host[160], a_spool[700], a_data[700], a_group[200], a_listen[64];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", sasl_addr);
  snprintf(a_host, sizeof a_host, "host_id=%s", tag);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool", dir);
  snprintf(a_data, sizeof a_data, "data_dir=%s/data", dir);
  snprintf(a_group, sizeof a_group, "group_id=g-%s", tag);
  snprintf(a_listen, sizeof a_listen, "api.listen=127.0.0.1:%u", tu_free_port());
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_conf,
                              a_host,
                              a_spool,
                              "selector=worker=nothing-*",
                              "metrics_listen=127.0.0.1:0",
                              NULL};
  const char *col_argv[] = {EMBER_BINARY_DIR "/collector/ember-collector",
                            a_brokers,
                            a_conf,
                            a_data,
                            a_group,
                            a_listen,
                            NULL};
  /* Before the check, librdkafka retried the login in the background for
   * ever and both daemons ran on (the collector gave up after 15 s of topic
   * creation with "timed out", the agent never). 20 s is generous: the
   * refusal takes about half a second. */
  assert_true(expect_refused(agent_argv, "ember-agent", mech) < 20.0);
  assert_true(expect_refused(col_argv, "ember-collector", mech) < 20.0);
  const char *text = read_log();
  assert_null(strstr(text, wrong));
  /* The agent stopped before it made its spool: nothing started. */
  char spool[700];
  snprintf(spool, sizeof spool, "%s/spool", dir);
  struct stat st;
  assert_int_not_equal(stat(spool, &st), 0);
}

/* An old librdkafka cannot do SCRAM with Kafka 4 at all (see the top):
 * the right password is refused too, and the sentence says why instead of
 * leaving the user to doubt the password. Skipped with a newer librdkafka,
 * where the first test uses SCRAM. */
static void test_kafka_tls_old_scram_explained(void **state) {
  (void)state;
  if (rd_kafka_version() >= SCRAM_OK_VERSION) skip();
  setup_names("scram");
  char conf[800], pw_line[800], a_conf[820], a_brokers[300], a_spool[700];
  snprintf(conf, sizeof conf, "%s/kafka.conf", dir);
  snprintf(pw_line, sizeof pw_line, "kafka.sasl.password_file = %s/sasl_password", broker_dir);
  write_conf(conf, "SCRAM-SHA-512", pw_line);
  snprintf(a_conf, sizeof a_conf, "--config=%s", conf);
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", sasl_addr);
  snprintf(a_spool, sizeof a_spool, "spool_dir=%s/spool", dir);
  const char *agent_argv[] = {EMBER_BINARY_DIR "/agent/ember-agent",
                              a_brokers,
                              a_conf,
                              a_spool,
                              "selector=worker=nothing-*",
                              "metrics_listen=127.0.0.1:0",
                              NULL};
  expect_refused(agent_argv, "ember-agent", "SCRAM-SHA-512");
  assert_non_null(strstr(read_log(), "older than 2.6.1, cannot log in with SCRAM to Kafka 4"));
}

/* kafka.sasl.password_file becomes sasl.password; its errors are config
 * errors naming the key. No broker needed. */
static void test_kafka_tls_password_file(void **state) {
  (void)state;
  char path[600], err[512];
  snprintf(path, sizeof path, "%s/tls-pw-%d", EMBER_TEST_TMP, (int)getpid());
  mkdir(EMBER_TEST_TMP, 0755);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("s3cret-line\nsecond line ignored\n", f);
  assert_int_equal(fclose(f), 0);

  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", "127.0.0.1:1"), 0);
  assert_int_equal(ember_config_set(cfg, "kafka.sasl.password_file", path), 0);
  ember_kafka_t *k = NULL;
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  rd_kafka_conf_t *conf = NULL;
  assert_int_equal(ember_kafka_producer_conf(k, &conf, err, sizeof err), 0);
  char value[64];
  size_t n = sizeof value;
  assert_int_equal(rd_kafka_conf_get(conf, "sasl.password", value, &n), RD_KAFKA_CONF_OK);
  assert_string_equal(value, "s3cret-line");
  rd_kafka_conf_destroy(conf);
  ember_kafka_free(k);
  k = NULL;

  /* Both set: which one wins would be a guess. */
  assert_int_equal(ember_config_set(cfg, "kafka.sasl.password", "x"), 0);
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "both set"));
  ember_config_free(cfg);

  /* A missing file names the key and the path. */
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", "127.0.0.1:1"), 0);
  assert_int_equal(ember_config_set(cfg, "kafka.sasl.password_file", "/nonexistent/pw"), 0);
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "kafka.sasl.password_file"));
  assert_non_null(strstr(err, "/nonexistent/pw"));
  ember_config_free(cfg);
  unlink(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kafka_tls_password_file),
      cmocka_unit_test(test_kafka_tls_wrong_password_exits),
      cmocka_unit_test(test_kafka_tls_old_scram_explained),
      cmocka_unit_test(test_kafka_tls_agent_collector),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
