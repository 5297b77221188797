/* `ember up`, the README's main command: on this machine, with the
 * embedded Kafka, it profiles a running program, prints its functions and
 * its API's URL, answers `ember workers` and `ember query` (whose pprof
 * `go tool pprof` reads), and stops cleanly on Ctrl-C (SIGINT). */
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
#include "ember/ember.h"

static void test_up_profiles_this_machine(void **state) {
  (void)state;
  char data[512], log_path[600], data_arg[600];
  snprintf(data, sizeof data, "%s/up-data-%d", EMBER_TEST_TMP, (int)getpid());
  snprintf(log_path, sizeof log_path, "%s.log", data);
  snprintf(data_arg, sizeof data_arg, "%s", data);
  unlink(log_path);
  unsigned port = tu_free_port();
  char listen[64], server[64];
  snprintf(listen, sizeof listen, "api.listen=127.0.0.1:%u", port);
  snprintf(server, sizeof server, "http://127.0.0.1:%u", port);
  const char *up_argv[] = {EMBER_BINARY_DIR "/cli/ember", "up",   "--data", data_arg, "window=2s",
                           "metrics_listen=127.0.0.1:0",  listen, NULL};
  pid_t up = tu_spawn(up_argv, NULL, log_path);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "6", NULL};
  const char *burn_env[] = {"EMBER_WORKER=ember-up-burn", NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);
  assert_true(tu_wait(burn, 30000) != -1);
  sleep(3);

  /* What a user does next: ask the API through the CLI. */
  char cmd[2048], out[1 << 16];
  snprintf(cmd, sizeof cmd, "%s/cli/ember workers --server %s", EMBER_BINARY_DIR, server);
  int rc = tu_sh(cmd, out, sizeof out);
  print_message("$ %s\n%s", cmd, out);
  assert_int_equal(rc, 0);
  assert_non_null(strstr(out, "ember-up-burn"));
  char pprof[700];
  snprintf(pprof, sizeof pprof, "%s/burn.pb.gz", data);
  snprintf(cmd, sizeof cmd,
           "%s/cli/ember query --server %s --worker ember-up-burn --from -5m --format pprof "
           "-o %s 2>&1",
           EMBER_BINARY_DIR, server, pprof);
  rc = tu_sh(cmd, out, sizeof out);
  if (rc != 0) fail_msg("%s: exit %d: %s", cmd, rc, out);
  char *top = tu_go_pprof_top(pprof, "cpu");
  char flat[32];
  assert_non_null(tu_pprof_flat(top, "burn_hot", flat, sizeof flat));
  assert_non_null(tu_pprof_flat(top, "burn_cold", flat, sizeof flat));
  ember_free(top);

  /* An on-demand session works with no setup: ember up made a key and
   * gave it to its collector (which signs) and its agent (which checks). */
  const char *burn2_argv[] = {EMBER_TEST_PROGRAMS "/burn", "60", NULL};
  const char *burn2_env[] = {"EMBER_WORKER=ember-up-sess", NULL};
  pid_t burn2 = tu_spawn(burn2_argv, burn2_env, NULL);
  char sess[700];
  snprintf(sess, sizeof sess, "%s/session.pb.gz", data);
  snprintf(cmd, sizeof cmd,
           "%s/cli/ember profile --server %s --worker ember-up-sess --duration 1000 --hz 200 -o %s "
           "2>&1",
           EMBER_BINARY_DIR, server, sess);
  for (int t = 0; t < 40; t++) {
    rc = tu_sh(cmd, out, sizeof out);
    if (rc != 2 || strstr(out, "was seen in the last minute") == NULL) break;
    sleep(1);
  }
  tu_kill(burn2);
  print_message("$ %s -> %d\n%s", cmd, rc, out);
  if (rc != 0) fail_msg("ember profile under ember up: exit %d (log %s)", rc, log_path);
  char keyfile[700];
  struct stat st;
  snprintf(keyfile, sizeof keyfile, "%s/command.key", data);
  assert_int_equal(stat(keyfile, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);

  kill(up, SIGINT);
  int status = tu_wait(up, 30000);
  if (status == -1) {
    tu_kill(up);
    fail_msg("ember up did not stop on SIGINT (log %s)", log_path);
  }
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);

  FILE *f = fopen(log_path, "r");
  assert_non_null(f);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  if (strstr(text, "ember-up-burn") == NULL || strstr(text, "burn_hot") == NULL ||
      strstr(text, "burn_cold") == NULL)
    fail_msg("ember up did not show the burn program's worker and functions (log %s)", log_path);
  char url[128];
  snprintf(url, sizeof url, "%s/api/v1", server);
  if (strstr(text, url) == NULL)
    fail_msg("ember up did not print its URL %s (log %s)", url, log_path);
  snprintf(url, sizeof url, "dashboard  %s/\n", server);
  if (strstr(text, url) == NULL)
    fail_msg("ember up did not print the dashboard's URL %s (log %s)", url, log_path);
  char spool[700];
  snprintf(spool, sizeof spool, "%s/spool", data);
  assert_int_equal(access(spool, F_OK), 0); /* the data folder holds the spool */
  char store[700];
  snprintf(store, sizeof store, "%s/store.lmdb", data);
  assert_int_equal(access(store, F_OK), 0); /* ...and the store */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_up_profiles_this_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
