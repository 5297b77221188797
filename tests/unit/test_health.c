/* Ingest health (collector/health.c), on a clock the test drives: store
 * failures in a row past stall_after, and a lag that keeps growing past
 * max_lag, turn it not ready with the reason; recovery turns it ready. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ember/ember.h"
#include "health.h"

#define SEC 1000000000LL

static void test_health_store_failures_past_stall(void **state) {
  (void)state;
  ember__health_t h;
  char why[400];
  ember__health_init(&h, 30 * SEC, 1000);
  assert_true(ember__health_ready(&h, 100 * SEC, why, sizeof why));
  /* Failures for less than stall_after: still ready (a retry may do). */
  ember__health_store(&h, -ENOSPC, 100 * SEC);
  ember__health_store(&h, -ENOSPC, 120 * SEC);
  assert_true(ember__health_ready(&h, 129 * SEC, why, sizeof why));
  /* Past it: not ready, saying why and what to do. */
  ember__health_store(&h, EMBER_EMAPFULL, 131 * SEC);
  assert_false(ember__health_ready(&h, 131 * SEC, why, sizeof why));
  assert_non_null(strstr(why, "ingest is wedged"));
  assert_non_null(strstr(why, "for 31 s"));
  assert_non_null(strstr(why, "store.max_size"));
  /* One success: ready; a new run of failures counts from its own start. */
  ember__health_store(&h, 0, 132 * SEC);
  assert_true(ember__health_ready(&h, 132 * SEC, why, sizeof why));
  ember__health_store(&h, EMBER_ECORRUPT, 140 * SEC);
  assert_true(ember__health_ready(&h, 169 * SEC, why, sizeof why));
  assert_false(ember__health_ready(&h, 171 * SEC, why, sizeof why));
  assert_non_null(strstr(why, "damaged"));
}

static void test_health_lag_growing_past_max(void **state) {
  (void)state;
  ember__health_t h;
  char why[400];
  ember__health_init(&h, 10 * SEC, 1000);
  /* Over max_lag but steady (a backlog being worked off at the pace it
   * comes in) is not "falling behind". */
  for (int t = 0; t <= 60; t++) ember__health_lag(&h, 5000, t * SEC);
  assert_true(ember__health_ready(&h, 60 * SEC, why, sizeof why));
  /* Growing from 61 s on: not ready once it is higher than it was a whole
   * stall_after window ago (growth counts from the last steady sample). */
  for (int t = 61; t <= 75; t++) ember__health_lag(&h, 5000 + (t - 60) * 100, t * SEC);
  assert_false(ember__health_ready(&h, 75 * SEC, why, sizeof why));
  assert_non_null(strstr(why, "consumer lag is 6500 messages"));
  assert_non_null(strstr(why, "health.max_lag (1000)"));
  /* Draining over a window: ready again, though still over max_lag. */
  for (int t = 76; t <= 81; t++) ember__health_lag(&h, 6500 - (t - 75) * 100, t * SEC);
  assert_true(ember__health_ready(&h, 81 * SEC, why, sizeof why));
  /* Jitter on the way up (a sample below the one before) still counts as
   * growth over the window. */
  for (int t = 82; t <= 92; t++)
    ember__health_lag(&h, 5900 + (t - 81) * 50 - (t % 2) * 80, t * SEC);
  assert_false(ember__health_ready(&h, 92 * SEC, why, sizeof why));
  ember__health_lag(&h, 10, 93 * SEC);
  assert_true(ember__health_ready(&h, 93 * SEC, why, sizeof why));
  /* Under max_lag, however it grows: ready. */
  for (int t = 94; t <= 200; t++) ember__health_lag(&h, t, t * SEC);
  assert_true(ember__health_ready(&h, 200 * SEC, why, sizeof why));
}

/* An ingest thread stuck in a call (a store write waiting on a hung fsync)
 * reports neither a failure nor a lag: only its beat ageing shows it. */
static void test_health_stuck_ingest_not_ready(void **state) {
  (void)state;
  ember__health_t h;
  char why[400];
  ember__health_init(&h, 30 * SEC, 1000);
  /* No beat yet (the loop has not started): not judged on it. */
  assert_true(ember__health_ready(&h, 1000 * SEC, why, sizeof why));
  ember__health_beat(&h, 100 * SEC);
  ember__health_store(&h, 0, 100 * SEC);
  assert_true(ember__health_ready(&h, 129 * SEC, why, sizeof why));
  /* The last write succeeded and the lag is nil, yet nothing moved. */
  assert_false(ember__health_ready(&h, 131 * SEC, why, sizeof why));
  assert_non_null(strstr(why, "no progress for 31 s"));
  assert_non_null(strstr(why, "store write"));
  /* The loop comes round again: ready at once. */
  ember__health_beat(&h, 140 * SEC);
  assert_true(ember__health_ready(&h, 140 * SEC, why, sizeof why));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_health_store_failures_past_stall),
      cmocka_unit_test(test_health_lag_growing_past_max),
      cmocka_unit_test(test_health_stuck_ingest_not_ready),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
