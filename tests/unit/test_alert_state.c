/* The alert state machine: for, silent drops, hysteresis against a flapping
 * load, resolve_for, new ids on refire, replays, the JSON round trip. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "alert_state.h"

#define SEC 1000000000LL
#define WIN (10 * SEC)
#define T0  (1764460800LL * SEC)

typedef struct run {
  ember__alert_state_t st;
  ember__alert_timing_t tm;
  int64_t next; /* start of the next window */
  double threshold;
} run_t;

static void run_init(run_t *r, int64_t for_ns, int64_t resolve_for_ns, double h) {
  ember__alert_state_init(&r->st);
  r->tm =
      (ember__alert_timing_t){.for_ns = for_ns, .resolve_for_ns = resolve_for_ns, .hysteresis = h};
  r->next = T0;
  r->threshold = 0.5;
}

/* Step one 10 s window of `value`. */
static ember__alert_transition_t step(run_t *r, double value) {
  ember__alert_input_t in = {
      .start_ns = r->next, .end_ns = r->next + WIN, .value = value, .threshold = r->threshold};
  r->next += WIN;
  return ember__alert_state_step(&r->st, &r->tm, &in, "cpu-hot", "host=h1", NULL, NULL);
}

static void same_state(const ember__alert_state_t *a, const ember__alert_state_t *b) {
  assert_int_equal(a->phase, b->phase);
  assert_string_equal(a->id, b->id);
  assert_int_equal(a->since_ns, b->since_ns);
  assert_int_equal(a->fired_ns, b->fired_ns);
  assert_int_equal(a->resolved_ns, b->resolved_ns);
  assert_int_equal(a->below_since_ns, b->below_since_ns);
  assert_int_equal(a->updated_ns, b->updated_ns);
  assert_true(a->value == b->value || (isnan(a->value) && isnan(b->value)));
  assert_true(a->threshold == b->threshold || (isnan(a->threshold) && isnan(b->threshold)));
}

static void test_alert_state_pending_then_firing_after_for(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 20 * SEC, 20 * SEC, 0.1);
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_NONE);
  assert_int_equal(r.st.phase, EMBER__PHASE_INACTIVE);
  assert_string_equal(r.st.id, "");
  int64_t breach_start = r.next;
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_PENDING); /* 10 s of breach */
  assert_int_equal(r.st.phase, EMBER__PHASE_PENDING);
  assert_int_equal(r.st.since_ns, breach_start);
  assert_int_equal(strlen(r.st.id), 16);
  char id[17];
  memcpy(id, r.st.id, sizeof id);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_FIRING); /* exactly 20 s */
  assert_int_equal(r.st.phase, EMBER__PHASE_FIRING);
  assert_int_equal(r.st.since_ns, breach_start);
  assert_int_equal(r.st.fired_ns, breach_start + 20 * SEC);
  assert_string_equal(r.st.id, id); /* the pending alert's id carries on */
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_NONE);
  assert_true(r.st.value == 0.9 && r.st.threshold == 0.5);

  /* for = 25 s takes a third window: the breach must last at least `for`. */
  run_init(&r, 25 * SEC, 0, 0.1);
  assert_int_equal(step(&r, 1), EMBER__TRANSITION_PENDING);
  assert_int_equal(step(&r, 1), EMBER__TRANSITION_NONE);
  assert_int_equal(step(&r, 1), EMBER__TRANSITION_FIRING);

  /* for = 0 fires on the first breaching window, with no pending step. */
  run_init(&r, 0, 0, 0.1);
  assert_int_equal(step(&r, 0.6), EMBER__TRANSITION_FIRING);
  assert_int_equal(r.st.phase, EMBER__PHASE_FIRING);
}

static void test_alert_state_at_threshold_is_no_breach(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 0, 0, 0.1);
  for (int i = 0; i < 5; i++) assert_int_equal(step(&r, 0.5), EMBER__TRANSITION_NONE);
  assert_int_equal(r.st.phase, EMBER__PHASE_INACTIVE);
  assert_int_equal(step(&r, nextafter(0.5, 1.0)), EMBER__TRANSITION_FIRING);
  /* A NaN or infinite threshold (no baseline yet) never breaches. */
  run_init(&r, 0, 0, 0.1);
  r.threshold = NAN;
  assert_int_equal(step(&r, 100), EMBER__TRANSITION_NONE);
  r.threshold = INFINITY;
  assert_int_equal(step(&r, 100), EMBER__TRANSITION_NONE);
  assert_int_equal(r.st.phase, EMBER__PHASE_INACTIVE);
}

static void test_alert_state_pending_dropped_silently(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 30 * SEC, 30 * SEC, 0.1);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_PENDING);
  char first[17];
  memcpy(first, r.st.id, sizeof first);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_NONE);
  assert_int_equal(step(&r, 0.2), EMBER__TRANSITION_NONE); /* dropped: no notification */
  assert_int_equal(r.st.phase, EMBER__PHASE_INACTIVE);
  assert_int_equal(r.st.since_ns, EMBER__ALERT_NONE);
  /* A value inside the band is no breach either: pending needs > threshold. */
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_PENDING);
  assert_string_not_equal(r.st.id, first); /* a new start, a new id */
  assert_int_equal(step(&r, 0.48), EMBER__TRANSITION_NONE);
  assert_int_equal(r.st.phase, EMBER__PHASE_INACTIVE);
}

/* Values alternating just above and just below the threshold (inside the
 * band): one firing, no resolve, however long it flaps. */
static void test_alert_state_flapping_fires_once(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 10 * SEC, 20 * SEC, 0.1);
  int firings = 0, resolves = 0, pendings = 0;
  for (int i = 0; i < 360; i++) {
    ember__alert_transition_t t = step(&r, i % 2 == 0 ? 0.51 : 0.49);
    firings += t == EMBER__TRANSITION_FIRING;
    resolves += t == EMBER__TRANSITION_RESOLVED;
    pendings += t == EMBER__TRANSITION_PENDING;
  }
  assert_int_equal(firings, 1);
  assert_int_equal(resolves, 0);
  assert_int_equal(pendings, 0); /* for = one window: fired on the first */
  assert_int_equal(r.st.phase, EMBER__PHASE_FIRING);

  /* With for = 2 windows, flapping never even gets past pending. */
  run_init(&r, 20 * SEC, 20 * SEC, 0.1);
  firings = 0;
  for (int i = 0; i < 100; i++)
    firings += step(&r, i % 2 == 0 ? 0.51 : 0.49) == EMBER__TRANSITION_FIRING;
  assert_int_equal(firings, 0);

  /* Dips just under the band's bottom, shorter than resolve_for, between
   * breaches: still one firing and no resolve. */
  run_init(&r, 0, 30 * SEC, 0.1);
  firings = resolves = 0;
  for (int i = 0; i < 300; i++) {
    ember__alert_transition_t t = step(&r, i % 3 == 0 ? 0.6 : 0.44);
    firings += t == EMBER__TRANSITION_FIRING;
    resolves += t == EMBER__TRANSITION_RESOLVED;
  }
  assert_int_equal(firings, 1);
  assert_int_equal(resolves, 0);
}

static void test_alert_state_resolve_after_resolve_for(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 0, 30 * SEC, 0.1);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_FIRING);
  int64_t low = r.next;
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_NONE); /* 10 s below */
  assert_int_equal(r.st.below_since_ns, low);
  assert_int_equal(step(&r, 0.47), EMBER__TRANSITION_NONE); /* in the band: clock runs on */
  assert_int_equal(r.st.below_since_ns, low);
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_RESOLVED); /* 30 s since `low` */
  assert_int_equal(r.st.phase, EMBER__PHASE_RESOLVED);
  assert_int_equal(r.st.resolved_ns, low + 30 * SEC);
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_NONE);

  /* A breach clears the resolve clock. */
  run_init(&r, 0, 20 * SEC, 0.1);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_FIRING);
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_NONE);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_NONE);
  assert_int_equal(r.st.below_since_ns, EMBER__ALERT_NONE);
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_NONE);
  assert_int_equal(step(&r, 0.0), EMBER__TRANSITION_RESOLVED); /* no data counts as 0 */

  /* resolve_for = 0 resolves on the first window below the band; exactly
   * at the band's bottom is inside it. */
  run_init(&r, 0, 0, 0.5);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_FIRING);
  assert_int_equal(step(&r, 0.25), EMBER__TRANSITION_NONE);
  assert_int_equal(step(&r, 0.2499), EMBER__TRANSITION_RESOLVED);
}

static void test_alert_state_refire_new_id_and_replay(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 0, 0, 0.1);
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_FIRING);
  char first[17];
  memcpy(first, r.st.id, sizeof first);
  assert_int_equal(step(&r, 0.1), EMBER__TRANSITION_RESOLVED);
  assert_string_equal(r.st.id, first); /* the resolved alert keeps its id */
  assert_int_equal(step(&r, 0.9), EMBER__TRANSITION_FIRING);
  assert_string_not_equal(r.st.id, first);
  assert_int_equal(r.st.resolved_ns, EMBER__ALERT_NONE);

  /* The id is the hash of rule, group and start: the same inputs, the same id. */
  char id[17];
  ember__alert_id("cpu-hot", "host=h1", r.st.since_ns, 0, id);
  assert_string_equal(id, r.st.id);
  char other[17];
  ember__alert_id("cpu-hot", "host=h2", r.st.since_ns, 0, other);
  assert_string_not_equal(id, other);
  ember__alert_id("cpu-ho", "thost=h1", r.st.since_ns, 0, other);
  assert_string_not_equal(id, other);

  /* A window at or before the last one (a replay) changes nothing. */
  ember__alert_state_t before = r.st;
  ember__alert_input_t old = {
      .start_ns = r.next - WIN, .end_ns = r.next, .value = 0, .threshold = 0.5};
  assert_int_equal(ember__alert_state_step(&r.st, &r.tm, &old, "cpu-hot", "", NULL, NULL),
                   EMBER__TRANSITION_NONE);
  same_state(&before, &r.st);
  ember__alert_input_t badwin = {.start_ns = r.next + WIN, .end_ns = r.next + WIN};
  assert_int_equal(ember__alert_state_step(&r.st, &r.tm, &badwin, "cpu-hot", "", NULL, NULL),
                   EMBER__TRANSITION_NONE);
  same_state(&before, &r.st);
}

static uint64_t counter(void *ctx) { return ++*(uint64_t *)ctx; }

static void test_alert_state_random_ids(void **state) {
  (void)state;
  ember__alert_state_t a, b;
  ember__alert_state_init(&a);
  ember__alert_state_init(&b);
  ember__alert_timing_t tm = {.for_ns = 0, .resolve_for_ns = 0, .hysteresis = 0.1};
  ember__alert_input_t in = {.start_ns = T0, .end_ns = T0 + WIN, .value = 1, .threshold = 0.5};
  uint64_t ctx = 0;
  assert_int_equal(ember__alert_state_step(&a, &tm, &in, "r", "", counter, &ctx),
                   EMBER__TRANSITION_FIRING);
  assert_int_equal(ember__alert_state_step(&b, &tm, &in, "r", "", counter, &ctx),
                   EMBER__TRANSITION_FIRING);
  assert_int_equal(ctx, 2);
  assert_string_not_equal(a.id, b.id); /* same rule, group and start; other draws */
  char plain[17];
  ember__alert_id("r", "", T0, 0, plain);
  assert_string_not_equal(plain, a.id);
}

static void test_alert_state_json_round_trip(void **state) {
  (void)state;
  run_t r;
  run_init(&r, 20 * SEC, 30 * SEC, 0.1);
  const struct {
    double value;
    ember__alert_transition_t want;
  } seq[] = {{0.2, EMBER__TRANSITION_NONE},   {0.7, EMBER__TRANSITION_PENDING},
             {0.8, EMBER__TRANSITION_FIRING}, {0.1, EMBER__TRANSITION_NONE},
             {0.1, EMBER__TRANSITION_NONE},   {0.1, EMBER__TRANSITION_RESOLVED},
             {0.1, EMBER__TRANSITION_NONE},   {0.9, EMBER__TRANSITION_PENDING}};
  /* After every window the state goes through JSON text and back, and the
   * machine runs on from the restored copy (a restart after each window). */
  for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
    assert_int_equal(step(&r, seq[i].value), seq[i].want);
    json_t *j = ember__alert_state_to_json(&r.st);
    assert_non_null(j);
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    json_t *back_j = json_loads(text, 0, NULL);
    assert_non_null(back_j);
    ember__alert_state_t back;
    char err[256];
    assert_int_equal(ember__alert_state_from_json(back_j, &back, err, sizeof err), 0);
    json_decref(back_j);
    free(text);
    same_state(&back, &r.st);
    r.st = back;
  }
  /* A fresh state: every time null, values null. */
  ember__alert_state_t fresh, back;
  ember__alert_state_init(&fresh);
  json_t *j = ember__alert_state_to_json(&fresh);
  assert_true(json_is_null(json_object_get(j, "since_ns")));
  assert_true(json_is_null(json_object_get(j, "value")));
  char err[256];
  assert_int_equal(ember__alert_state_from_json(j, &back, err, sizeof err), 0);
  assert_int_equal(back.phase, EMBER__PHASE_INACTIVE);
  assert_true(isnan(back.value));
  json_decref(j);

  /* Bad documents name the member. */
  const char *bads[][2] = {
      {"{\"phase\":\"burning\",\"id\":\"\"}", "\"phase\""},
      {"{\"phase\":\"firing\",\"id\":\"xyz\",\"since_ns\":1}", "\"id\""},
      {"{\"phase\":\"firing\",\"id\":\"0123456789abcdef\",\"since_ns\":null}", "\"since_ns\""},
      {"{\"phase\":\"inactive\",\"id\":\"\",\"updated_ns\":\"now\"}", "\"updated_ns\""},
      {"{\"phase\":\"inactive\",\"id\":\"\",\"value\":\"hot\"}", "\"value\""},
      {"[]", "JSON object"},
  };
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    json_t *b = json_loads(bads[i][0], 0, NULL);
    assert_non_null(b);
    ember__alert_state_t out;
    memset(&out, 0x5a, sizeof out);
    ember__alert_state_t untouched = out;
    assert_int_equal(ember__alert_state_from_json(b, &out, err, sizeof err), -EINVAL);
    if (!strstr(err, bads[i][1])) fail_msg("%s: %s", bads[i][0], err);
    assert_memory_equal(&out, &untouched, sizeof out);
    json_decref(b);
  }
  assert_string_equal(ember__alert_phase_name(EMBER__PHASE_FIRING), "firing");
  assert_string_equal(ember__alert_transition_name(EMBER__TRANSITION_RESOLVED), "resolved");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alert_state_pending_then_firing_after_for),
      cmocka_unit_test(test_alert_state_at_threshold_is_no_breach),
      cmocka_unit_test(test_alert_state_pending_dropped_silently),
      cmocka_unit_test(test_alert_state_flapping_fires_once),
      cmocka_unit_test(test_alert_state_resolve_after_resolve_for),
      cmocka_unit_test(test_alert_state_refire_new_id_and_replay),
      cmocka_unit_test(test_alert_state_random_ids),
      cmocka_unit_test(test_alert_state_json_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
