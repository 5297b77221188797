/* `ember up`, the README's main command: on this machine, with the
 * embedded Kafka, it profiles a running program and prints its functions,
 * and stops cleanly on Ctrl-C (SIGINT). */
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

static void test_up_profiles_this_machine(void **state) {
  (void)state;
  char data[512], log_path[600], data_arg[600];
  snprintf(data, sizeof data, "%s/up-data-%d", EMBER_TEST_TMP, (int)getpid());
  snprintf(log_path, sizeof log_path, "%s.log", data);
  snprintf(data_arg, sizeof data_arg, "%s", data);
  unlink(log_path);
  const char *up_argv[] = {EMBER_BINARY_DIR "/cli/ember", "up", "--data", data_arg, "window=2s",
                           "metrics_listen=127.0.0.1:0",  NULL};
  pid_t up = tu_spawn(up_argv, NULL, log_path);
  const char *burn_argv[] = {EMBER_TEST_PROGRAMS "/burn", "6", NULL};
  const char *burn_env[] = {"EMBER_WORKER=ember-up-burn", NULL};
  pid_t burn = tu_spawn(burn_argv, burn_env, NULL);
  assert_true(tu_wait(burn, 30000) != -1);
  sleep(3);
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
  char spool[700];
  snprintf(spool, sizeof spool, "%s/spool", data);
  assert_int_equal(access(spool, F_OK), 0); /* the data folder holds the spool */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_up_profiles_this_machine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
