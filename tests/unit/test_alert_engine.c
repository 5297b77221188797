/* The alert engine (collector/alerts.h) over a real store, one round per
 * 10 s window written by the test: above, baseline and function rules,
 * what changed, grouping, a restart in the middle of a firing alert, the
 * rules' sources (file, API) and their errors, SIGHUP's reload, and the
 * per-rule metrics; and the baselines' median (a selection, checked against
 * sorting). */
#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>

#include "alert_eval.h"
#include "alerts.h"
#include "notify.h"
#include "ember/ember.h"
#include "common/testutil.h"

#define SEC  1000000000LL
#define STEP (10 * SEC)
#define T0   (1764460800LL * SEC) /* 2025-11-30T00:00:00Z, a multiple of 10 s */

static char path[512], rules_path[512];
static ember_store_t *store;

static int setup(void **state) {
  (void)state;
  tu_store_path(path, sizeof path, "alert_engine", "engine");
  snprintf(rules_path, sizeof rules_path, "%s/alert_rules_%ld.conf", EMBER_TEST_TMP,
           (long)getpid());
  tu_store_remove(path);
  ember_store_opts_t o = {.map_size = (size_t)256 << 20, .no_sync = true};
  return ember_store_open(path, &o, &store, NULL, 0);
}

static int teardown(void **state) {
  (void)state;
  ember_store_close(store);
  store = NULL;
  tu_store_remove(path);
  unlink(rules_path);
  return 0;
}

/* Window i (T0 + i*10 s) of (worker, host): `cores` of CPU, a share
 * `hot` of it in function burn and the rest in idle_loop. */
static void window(const char *worker, const char *host, int i, double cores, double hot) {
  ember_value_type_t vt = EMBER_VT_CPU_NS;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  ember_labels_t l = {.worker = worker, .host = host};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  int64_t start = T0 + i * STEP;
  assert_int_equal(ember_profile_set_window(p, start, start + STEP), 0);
  int64_t total = (int64_t)(cores * (double)STEP);
  int64_t vb = (int64_t)((double)total * hot), vi = total - vb;
  ember_frame_t burn[2] = {{.function = "burn", .module = "/app"},
                           {.function = "main", .module = "/app"}};
  ember_frame_t idle[2] = {{.function = "idle_loop", .module = "/app"},
                           {.function = "main", .module = "/app"}};
  if (vb > 0) assert_int_equal(ember_profile_add(p, burn, 2, &vb), 0);
  if (vi > 0) assert_int_equal(ember_profile_add(p, idle, 2, &vi), 0);
  assert_int_equal(ember_store_write(store, &p, 1, NULL), 0);
  ember_profile_free(p);
}

static ember__alerts_t *engine(const char *rules_file, ember_metrics_t *m) {
  ember__alerts_opts_t o = {
      .store = store, .metrics = m, .rules_file = rules_file, .interval_ns = STEP, .delay_ns = SEC};
  ember__alerts_t *a = NULL;
  char err[512] = "";
  int rc = ember__alerts_new(&o, &a, err, sizeof err);
  if (rc != 0) fail_msg("ember__alerts_new: %d %s", rc, err);
  return a;
}

static void add_rule(ember__alerts_t *a, const char *json) {
  json_t *j = json_loads(json, 0, NULL);
  assert_non_null(j);
  char err[400] = "";
  json_t *out = NULL;
  int rc = ember__alerts_rule_add(a, j, &out, err, sizeof err);
  if (rc != 0) fail_msg("%s: %d %s", json, rc, err);
  assert_string_equal(json_string_value(json_object_get(out, "source")), "api");
  json_decref(out);
  json_decref(j);
}

static int rule_error(ember__alerts_t *a, const char *json, char *err, size_t n) {
  json_t *j = json_loads(json, 0, NULL);
  assert_non_null(j);
  err[0] = '\0';
  int rc = ember__alerts_rule_add(a, j, NULL, err, n);
  json_decref(j);
  return rc;
}

/* The alerts of `rule` (new reference). */
static json_t *alerts(ember__alerts_t *a, const char *rule) {
  json_t *d = ember__alerts_list(a, rule, NULL, NULL);
  assert_non_null(d);
  json_t *arr = json_incref(json_object_get(d, "alerts"));
  json_decref(d);
  return arr;
}

static const char *state_of(json_t *alert) {
  return json_string_value(json_object_get(alert, "state"));
}

/* Round for the window ending at T0 + (i+1)*10 s. */
static void round_at(ember__alerts_t *a, int i) {
  assert_int_equal(ember__alerts_round(a, T0 + (i + 1) * STEP), 0);
}

static void test_above_pending_firing_resolved_and_restart(void **state) {
  (void)state;
  ember__alerts_t *a = engine(NULL, NULL);
  add_rule(a, "{\"name\":\"hot\",\"worker\":\"w\",\"above\":0.5,\"for\":\"20s\"}");
  int i = 0;
  /* 6 windows at 5%, then a spike in burn. */
  for (; i < 6; i++) {
    window("w", "h1", i, 0.05, 0.1);
    round_at(a, i);
  }
  json_t *l = alerts(a, "hot");
  assert_int_equal(json_array_size(l), 0);
  json_decref(l);
  window("w", "h1", i, 1.0, 0.9);
  round_at(a, i++);
  l = alerts(a, "hot");
  assert_int_equal(json_array_size(l), 1);
  assert_string_equal(state_of(json_array_get(l, 0)), "pending");
  json_decref(l);
  window("w", "h1", i, 1.0, 0.9);
  round_at(a, i++);
  /* 20 s of breach: firing, at the end of the second window. */
  l = alerts(a, "hot");
  json_t *al = json_array_get(l, 0);
  assert_string_equal(state_of(al), "firing");
  int64_t started = json_integer_value(json_object_get(al, "started"));
  int64_t fired = json_integer_value(json_object_get(al, "fired"));
  assert_int_equal(started, (T0 + 6 * STEP) / 1000000);
  assert_int_equal(fired - started, 20000);
  assert_true(fabs(json_real_value(json_object_get(al, "value")) - 1.0) < 1e-6);
  assert_true(json_real_value(json_object_get(al, "threshold")) == 0.5);
  assert_string_equal(json_string_value(json_object_get(al, "unit")), "cores");
  assert_string_equal(json_string_value(json_object_get(json_object_get(al, "labels"), "worker")),
                      "w");
  json_t *top = json_object_get(al, "top");
  assert_true(json_array_size(top) >= 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(top, 0), "function")),
                      "burn");
  char id[32];
  snprintf(id, sizeof id, "%s", json_string_value(json_object_get(al, "id")));
  json_decref(l);

  /* A restart while it fires: still firing, same id. */
  ember__alerts_free(a);
  a = engine(NULL, NULL);
  json_t *doc = NULL;
  assert_int_equal(ember__alerts_get(a, id, &doc), 0);
  assert_string_equal(state_of(doc), "firing");
  json_decref(doc);
  window("w", "h1", i, 1.0, 0.9);
  round_at(a, i++);
  l = alerts(a, "hot");
  assert_int_equal(json_array_size(l), 1);
  assert_string_equal(state_of(json_array_get(l, 0)), "firing");
  json_decref(l);

  /* Load drops: resolved after resolve_for (= for, 20 s). */
  window("w", "h1", i, 0.05, 0.1);
  round_at(a, i++);
  l = alerts(a, "hot");
  assert_string_equal(state_of(json_array_get(l, 0)), "firing");
  json_decref(l);
  window("w", "h1", i, 0.05, 0.1);
  round_at(a, i++);
  l = alerts(a, "hot");
  assert_string_equal(state_of(json_array_get(l, 0)), "resolved");
  assert_string_equal(json_string_value(json_object_get(json_array_get(l, 0), "id")), id);
  json_decref(l);
  /* A window that never came (the agent died): no data is 0, no error. */
  round_at(a, i + 3);
  ember__alerts_free(a);
}

static void test_hysteresis_flapping_fires_once(void **state) {
  (void)state;
  ember__alerts_t *a = engine(NULL, NULL);
  add_rule(a, "{\"name\":\"flap\",\"worker\":\"f\",\"above\":0.5,\"for\":\"10s\","
              "\"resolve_for\":\"30s\"}");
  /* Alternating just above and just below the threshold. */
  for (int i = 0; i < 30; i++) {
    window("f", "h1", i, i % 2 ? 0.48 : 0.55, 0.5);
    round_at(a, i);
  }
  json_t *l = alerts(a, "flap");
  size_t firing = 0;
  for (size_t k = 0; k < json_array_size(l); k++)
    firing += strcmp(state_of(json_array_get(l, k)), "pending") != 0;
  assert_int_equal(firing, 1);
  json_decref(l);
  ember__alerts_free(a);
}

static void test_baseline_and_function_rules(void **state) {
  (void)state;
  ember__alerts_t *a = engine(NULL, NULL);
  add_rule(a, "{\"name\":\"base\",\"worker\":\"b*\",\"baseline\":{\"factor\":3,\"period\":\"5m\","
              "\"floor\":0.1},\"for\":\"10s\"}");
  add_rule(a, "{\"name\":\"fn\",\"worker\":\"s\",\"function\":{\"name\":\"burn\",\"percent\":50},"
              "\"for\":\"10s\"}");
  int i = 0;
  for (; i < 30; i++) {
    window("b-rise", "h1", i, 0.3, 0.1);
    window("b-flat", "h1", i, 0.3, 0.1);
    window("s", "h1", i, 0.3, 0.2);
    round_at(a, i);
  }
  json_t *l = alerts(a, "base");
  assert_int_equal(json_array_size(l), 0);
  json_decref(l);
  l = alerts(a, "fn");
  assert_int_equal(json_array_size(l), 0);
  json_decref(l);
  /* b-rise: 4x; s: burn passes 50% of the same total. */
  for (int k = 0; k < 3; k++, i++) {
    window("b-rise", "h1", i, 1.2, 0.8);
    window("b-flat", "h1", i, 0.3, 0.1);
    window("s", "h1", i, 0.3, 0.8);
    round_at(a, i);
  }
  l = ember__alerts_list(a, "base", "firing", NULL);
  json_t *arr = json_object_get(l, "alerts");
  assert_int_equal(json_array_size(arr), 1); /* b-rise, not b-flat: one alert per worker */
  json_t *al = json_array_get(arr, 0);
  assert_string_equal(json_string_value(json_object_get(json_object_get(al, "labels"), "worker")),
                      "b-rise");
  assert_true(fabs(json_real_value(json_object_get(al, "threshold")) - 0.9) < 1e-6);
  json_decref(l);
  l = ember__alerts_list(a, "fn", "firing", NULL);
  al = json_array_get(json_object_get(l, "alerts"), 0);
  assert_non_null(al);
  assert_string_equal(json_string_value(json_object_get(al, "unit")), "percent");
  assert_true(fabs(json_real_value(json_object_get(al, "value")) - 80) < 0.1);
  json_decref(l);
  ember__alerts_free(a);
}

static void test_group_by_host(void **state) {
  (void)state;
  ember__alerts_t *a = engine(NULL, NULL);
  add_rule(a,
           "{\"name\":\"g\",\"worker\":\"w\",\"group_by\":\"host\",\"above\":0.5,\"for\":\"0s\"}");
  window("w", "h1", 0, 0.9, 0.5);
  window("w", "h2", 0, 0.9, 0.5);
  window("w", "h3", 0, 0.1, 0.5);
  /* Workers around "w" in name order are not its series. */
  window("v", "h1", 0, 0.9, 0.5);
  window("w2", "h4", 0, 0.9, 0.5);
  window("w-x", "h5", 0, 0.9, 0.5);
  round_at(a, 0);
  json_t *l = ember__alerts_list(a, "g", "firing", NULL);
  json_t *arr = json_object_get(l, "alerts");
  assert_int_equal(json_array_size(arr), 2);
  const char *h0 =
      json_string_value(json_object_get(json_object_get(json_array_get(arr, 0), "labels"), "host"));
  const char *h1 =
      json_string_value(json_object_get(json_object_get(json_array_get(arr, 1), "labels"), "host"));
  assert_true((strcmp(h0, "h1") == 0 && strcmp(h1, "h2") == 0) ||
              (strcmp(h0, "h2") == 0 && strcmp(h1, "h1") == 0));
  json_decref(l);
  ember__alerts_free(a);
}

static void write_file(const char *text) {
  FILE *f = fopen(rules_path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_rules_sources_errors_reload_metrics(void **state) {
  (void)state;
  write_file("# team rules\n[rule from-file]\nworker = w\nabove = 2\nfor = 30s\n");
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  ember__alerts_t *a = engine(rules_path, m);
  char err[400];
  /* Bad rules: the field is named. */
  assert_int_equal(rule_error(a, "{\"name\":\"x\",\"worker\":\"w\",\"above\":-1,\"for\":\"1s\"}",
                              err, sizeof err),
                   -EINVAL);
  assert_non_null(strstr(err, "above"));
  assert_int_equal(rule_error(a, "{\"name\":\"x\",\"worker\":\"w\",\"above\":1,\"for\":\"3x\"}",
                              err, sizeof err),
                   -EINVAL);
  assert_non_null(strstr(err, "for"));
  assert_int_equal(
      rule_error(a, "{\"name\":\"x\",\"worker\":\"w\",\"above\":1,\"for\":\"1s\",\"colour\":1}",
                 err, sizeof err),
      -EINVAL);
  assert_non_null(strstr(err, "colour"));
  assert_int_equal(rule_error(a,
                              "{\"name\":\"x\",\"worker\":\"w[0-9]\",\"above\":1,\"for\":\"1s\"}",
                              err, sizeof err),
                   -EINVAL);
  assert_non_null(strstr(err, "worker"));
  /* A name clash with the file's rule. */
  assert_int_equal(
      rule_error(a, "{\"name\":\"from-file\",\"worker\":\"w\",\"above\":1,\"for\":\"1s\"}", err,
                 sizeof err),
      -EEXIST);
  add_rule(a, "{\"name\":\"api-rule\",\"worker\":\"w\",\"above\":1,\"for\":\"1s\"}");
  /* File rules cannot be deleted through the API; API rules can. */
  assert_int_equal(ember__alerts_rule_delete(a, "from-file", err, sizeof err), -EPERM);
  assert_non_null(strstr(err, "rules file"));
  assert_int_equal(ember__alerts_rule_delete(a, "nope", err, sizeof err), EMBER_ENOTFOUND);
  json_t *rules = ember__alerts_rules_json(a);
  assert_int_equal(json_array_size(json_object_get(rules, "rules")), 2);
  json_decref(rules);
  /* The API rule survives a restart; the file is read again. */
  ember__alerts_free(a);
  ember_metrics_free(m);
  assert_int_equal(ember_metrics_new(&m), 0);
  a = engine(rules_path, m);
  rules = ember__alerts_rules_json(a);
  assert_int_equal(json_array_size(json_object_get(rules, "rules")), 2);
  json_decref(rules);
  assert_int_equal(ember__alerts_rule_delete(a, "api-rule", err, sizeof err), 0);
  /* A bad file on reload: the rules in force stay, the line is named. */
  write_file("[rule from-file]\nworker = w\nabove = -2\nfor = 30s\n");
  assert_int_equal(ember__alerts_reload(a, err, sizeof err), -EINVAL);
  assert_non_null(strstr(err, ":3:"));
  rules = ember__alerts_rules_json(a);
  assert_int_equal(json_array_size(json_object_get(rules, "rules")), 1);
  json_decref(rules);
  /* A good one: a rule added, the old one changed. */
  write_file("[rule from-file]\nworker = w\nabove = 0.5\nfor = 0s\n[rule second]\nworker = *\n"
             "above = 5\nfor = 1m\n");
  assert_int_equal(ember__alerts_reload(a, err, sizeof err), 0);
  rules = ember__alerts_rules_json(a);
  assert_int_equal(json_array_size(json_object_get(rules, "rules")), 2);
  json_decref(rules);
  /* ember_alerts_firing{rule=...} follows the alerts. */
  window("w", "h1", 0, 0.9, 0.5);
  round_at(a, 0);
  ember_buf_t out;
  ember_buf_init(&out, 1 << 20);
  assert_int_equal(ember_metrics_render(m, &out), 0);
  assert_non_null(strstr(out.data, "ember_alerts_firing{rule=\"from-file\"} 1\n"));
  assert_non_null(strstr(out.data, "ember_alerts_firing{rule=\"second\"} 0\n"));
  ember_buf_free(&out);
  ember__alerts_free(a);
  ember_metrics_free(m);
}

/* The fleet's side of API rules (rules_fleet.h): what the share hook is
 * given, a refused share refusing the change, and records from other
 * collectors added, changed, replayed and deleted by ember__alerts_rule_sync. */
typedef struct shared {
  int calls;
  char name[80];
  char text[1024]; /* "" for a deletion */
  int refuse;      /* returned when non-zero */
} shared_t;

static int share_hook(void *ctx, const char *name, const json_t *rule, char *err, size_t n) {
  shared_t *sh = ctx;
  sh->calls++;
  snprintf(sh->name, sizeof sh->name, "%s", name);
  char *t = rule ? json_dumps(rule, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  snprintf(sh->text, sizeof sh->text, "%s", t ? t : "");
  free(t);
  if (sh->refuse) snprintf(err, n, "the broker is away");
  return sh->refuse;
}

static json_t *rule_named(ember__alerts_t *a, const char *name) {
  json_t *rules = ember__alerts_rules_json(a), *e, *found = NULL;
  size_t i;
  json_array_foreach(json_object_get(rules, "rules"), i, e) {
    if (strcmp(json_string_value(json_object_get(e, "name")), name) == 0) found = json_incref(e);
  }
  json_decref(rules);
  return found;
}

static int sync_text(ember__alerts_t *a, const char *name, const char *json, char *err, size_t n) {
  json_t *j = json ? json_loads(json, 0, NULL) : NULL;
  if (json != NULL) assert_non_null(j);
  err[0] = '\0';
  int rc = ember__alerts_rule_sync(a, name, j, err, n);
  json_decref(j);
  return rc;
}

static void test_rules_shared_with_the_fleet(void **state) {
  (void)state;
  write_file("[rule from-file]\nworker = w\nabove = 2\nfor = 30s\n");
  shared_t sh = {0};
  ember__alerts_opts_t o = {.store = store,
                            .rules_file = rules_path,
                            .interval_ns = STEP,
                            .delay_ns = SEC,
                            .share = share_hook,
                            .share_ctx = &sh};
  ember__alerts_t *a = NULL;
  char err[400] = "";
  assert_int_equal(ember__alerts_new(&o, &a, err, sizeof err), 0);

  /* An API rule is shared as stored (no "source"), then put in force. */
  add_rule(a, "{\"name\":\"hot\",\"worker\":\"w\",\"above\":1,\"for\":\"10s\"}");
  assert_int_equal(sh.calls, 1);
  assert_string_equal(sh.name, "hot");
  assert_non_null(strstr(sh.text, "\"above\":1"));
  assert_null(strstr(sh.text, "source"));
  /* A refused share refuses the change: nothing here either. */
  sh.refuse = EMBER_EKAFKA;
  assert_int_equal(rule_error(a, "{\"name\":\"cold\",\"worker\":\"w\",\"above\":1,\"for\":\"1s\"}",
                              err, sizeof err),
                   EMBER_EKAFKA);
  assert_non_null(strstr(err, "broker is away"));
  assert_null(rule_named(a, "cold"));
  assert_int_equal(ember__alerts_rule_delete(a, "hot", err, sizeof err), EMBER_EKAFKA);
  json_t *r = rule_named(a, "hot");
  assert_non_null(r);
  json_decref(r);
  sh.refuse = 0;
  /* Clashes and unknown names are refused before anything is shared. */
  int before = sh.calls;
  assert_int_equal(rule_error(a, "{\"name\":\"hot\",\"worker\":\"w\",\"above\":3,\"for\":\"1s\"}",
                              err, sizeof err),
                   -EEXIST);
  assert_int_equal(ember__alerts_rule_delete(a, "from-file", err, sizeof err), -EPERM);
  assert_int_equal(sh.calls, before);

  /* Its own record coming back is a no-op; another collector's change
   * replaces it; a new name is added; a tombstone deletes. */
  json_t *mine = json_loads(sh.text, 0, NULL);
  assert_int_equal(ember__alerts_rule_sync(a, "hot", mine, err, sizeof err), 0);
  json_decref(mine);
  assert_int_equal(sync_text(a, "hot",
                             "{\"name\":\"hot\",\"worker\":\"w\",\"above\":4,\"for\":\"10s\"}", err,
                             sizeof err),
                   0);
  r = rule_named(a, "hot");
  assert_true(json_real_value(json_object_get(r, "above")) == 4.0);
  assert_string_equal(json_string_value(json_object_get(r, "source")), "api");
  json_decref(r);
  assert_int_equal(sync_text(a, "elsewhere",
                             "{\"name\":\"elsewhere\",\"worker\":\"*\",\"above\":2,\"for\":\"1m\"}",
                             err, sizeof err),
                   0);
  /* Bad records are refused with a sentence and change nothing. */
  assert_int_equal(sync_text(a, "x", "{\"name\":\"y\",\"worker\":\"w\",\"above\":1,\"for\":\"1s\"}",
                             err, sizeof err),
                   -EINVAL);
  assert_non_null(strstr(err, "its key"));
  assert_int_equal(sync_text(a, "x", "{\"name\":\"x\",\"above\":-1}", err, sizeof err), -EINVAL);
  assert_null(rule_named(a, "x"));
  /* The file's rule keeps its name: the fleet's is not applied, and a
   * tombstone of that name leaves it. */
  assert_int_equal(sync_text(a, "from-file",
                             "{\"name\":\"from-file\",\"worker\":\"w\",\"above\":9,\"for\":\"1s\"}",
                             err, sizeof err),
                   -EEXIST);
  assert_non_null(strstr(err, "file"));
  assert_int_equal(sync_text(a, "from-file", NULL, err, sizeof err), 0);
  r = rule_named(a, "from-file");
  assert_true(json_real_value(json_object_get(r, "above")) == 2.0);
  json_decref(r);
  assert_int_equal(sync_text(a, "hot", NULL, err, sizeof err), 0);
  assert_null(rule_named(a, "hot"));
  assert_int_equal(sync_text(a, "never-was", NULL, err, sizeof err), 0);
  /* What came from the fleet is stored: a restart (before the topic is
   * read again) has it. */
  ember__alerts_free(a);
  a = NULL;
  assert_int_equal(ember__alerts_new(&o, &a, err, sizeof err), 0);
  r = rule_named(a, "elsewhere");
  assert_non_null(r);
  json_decref(r);
  assert_null(rule_named(a, "hot"));
  ember__alerts_free(a);
}

/* A webhook receiver: counts POSTs whose body holds "startsAt". */
static atomic_int posts, hook_posts;

static enum MHD_Result on_post(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *data,
                               size_t *size, void **con_cls) {
  (void)cls;
  (void)version;
  (void)data;
  if (*con_cls == NULL) {
    *con_cls = (void *)1;
    return MHD_YES;
  }
  if (*size > 0) {
    *size = 0;
    return MHD_YES;
  }
  if (strcmp(method, "POST") == 0)
    atomic_fetch_add(strcmp(url, "/hook") == 0 ? &hook_posts : &posts, 1);
  struct MHD_Response *r =
      MHD_create_response_from_buffer(2, (void *)(uintptr_t) "{}", MHD_RESPMEM_PERSISTENT);
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}

/* Alertmanager forgets an alert it has not heard of for 5 minutes: firing
 * alerts go to it again every alerts.webhook_resend; plain JSON receivers
 * get the transition only. */
static void test_alertmanager_resend(void **state) {
  (void)state;
  atomic_store(&posts, 0);
  atomic_store(&hook_posts, 0);
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, on_post,
                                          NULL, MHD_OPTION_END);
  assert_non_null(d);
  unsigned port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
  ember__notify_opts_t no = {.retry_initial_ms = 100};
  ember__notify_t *n = NULL;
  char err[400];
  assert_int_equal(ember__notify_new(&no, &n, err, sizeof err), 0);
  ember__alerts_opts_t o = {.store = store, .interval_ns = STEP, .delay_ns = SEC, .resend_ns = SEC};
  ember__alerts_t *a = NULL;
  assert_int_equal(ember__alerts_new(&o, &a, err, sizeof err), 0);
  char rule[512];
  snprintf(rule, sizeof rule,
           "{\"name\":\"am\",\"worker\":\"w\",\"above\":0.5,\"for\":\"0s\",\"resolve_for\":\"1h\","
           "\"webhook\":\"http://127.0.0.1:%u/api/v2/alerts\"}",
           port);
  add_rule(a, rule);
  snprintf(rule, sizeof rule,
           "{\"name\":\"plain\",\"worker\":\"w\",\"above\":0.5,\"for\":\"0s\","
           "\"resolve_for\":\"1h\",\"webhook\":{\"url\":\"http://127.0.0.1:%u/hook\","
           "\"format\":\"json\"}}",
           port);
  add_rule(a, rule);
  /* Fired before the engine's thread starts (its own rounds are for
   * today's windows, not the test's): then re-sent for "am" only, about
   * once a second. */
  window("w", "h1", 0, 0.9, 0.5);
  round_at(a, 0);
  assert_int_equal(ember__alerts_start(a, n), 0);
  for (int t = 0; t < 100 && atomic_load(&posts) < 3; t++) usleep(50000);
  int got = atomic_load(&posts);
  print_message("%d re-sends to Alertmanager in up to 5 s, %d to the JSON receiver\n", got,
                atomic_load(&hook_posts));
  assert_true(got >= 3);
  assert_int_equal(atomic_load(&hook_posts), 0);
  ember__alerts_stop(a);
  ember__notify_free(n, 1000);
  ember__alerts_free(a);
  MHD_stop_daemon(d);
}

static int cmp_d(const void *x, const void *y) {
  double p = *(const double *)x, q = *(const double *)y;
  return (p > q) - (p < q);
}

static void test_median_matches_sorting(void **state) {
  (void)state;
  assert_true(isnan(ember__median(NULL, 0)));
  double one[1] = {3.5};
  assert_true(ember__median(one, 1) == 3.5);
  double two[2] = {4, 1};
  assert_true(ember__median(two, 2) == 2.5);
  /* Random, sorted, reversed, constant and few-valued inputs of many sizes. */
  double v[400], w[400];
  uint64_t x = 88172645463325252ULL;
  for (size_t n = 1; n <= 400; n += (n < 20 ? 1 : 37)) {
    for (int shape = 0; shape < 5; shape++) {
      for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        switch (shape) {
        case 0: v[i] = (double)(x % 100000) / 7.0; break;
        case 1: v[i] = (double)i; break;
        case 2: v[i] = (double)(n - i); break;
        case 3: v[i] = 0.25; break;
        default: v[i] = (double)(x % 3); break;
        }
      }
      memcpy(w, v, n * sizeof *v);
      qsort(w, n, sizeof *w, cmp_d);
      double want = n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
      assert_true(ember__median(v, n) == want);
    }
  }
}

/* A function rule's share: stacks by their leaf's display name, as the
 * dashboard's top table names functions (a frame without a function is
 * "module-base+0xaddr"). */
static void test_function_share_by_leaf_name(void **state) {
  (void)state;
  ember_value_type_t vt = EMBER_VT_CPU_NS;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(&vt, 1, &p), 0);
  ember_labels_t l = {.worker = "fs", .host = "h1"};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, T0, T0 + STEP), 0);
  ember_frame_t anon[2] = {{.module = "/srv/bin/app", .address = 0x10},
                           {.function = "main", .module = "/srv/bin/app"}};
  ember_frame_t hot[3] = {{.function = "hot", .module = "/srv/bin/app"},
                          {.function = "burn", .module = "/srv/bin/app"},
                          {.function = "main", .module = "/srv/bin/app"}};
  ember_frame_t hot2[2] = {{.function = "hot", .module = "/lib/libc.so"},
                           {.function = "main", .module = "/srv/bin/app"}};
  ember_frame_t burn[2] = {{.function = "burn", .module = "/srv/bin/app"},
                           {.function = "main", .module = "/srv/bin/app"}};
  int64_t v1 = 100, v2 = 300, v3 = 200, v4 = 400;
  assert_int_equal(ember_profile_add(p, anon, 2, &v1), 0);
  assert_int_equal(ember_profile_add(p, hot, 3, &v2), 0);
  assert_int_equal(ember_profile_add(p, hot2, 2, &v3), 0);
  assert_int_equal(ember_profile_add(p, burn, 2, &v4), 0);
  assert_int_equal(ember_store_write(store, &p, 1, NULL), 0);
  ember_profile_free(p);
  const char *names[] = {"hot", "app+0x10", "burn", "main", "nope"};
  const double want[] = {50, 10, 40, 0, 0}; /* of 1000: self only, both modules */
  for (size_t i = 0; i < 5; i++) {
    char json[256], err[200];
    snprintf(json, sizeof json,
             "{\"name\":\"f\",\"worker\":\"fs\",\"function\":{\"name\":\"%s\","
             "\"percent\":10},\"for\":\"0s\"}",
             names[i]);
    json_t *j = json_loads(json, 0, NULL);
    ember__alert_rule_t *r = NULL;
    assert_int_equal(ember__alert_rule_from_json(j, &r, err, sizeof err), 0);
    json_decref(j);
    char wname[] = "fs";
    ember__agroup_t g = {.worker = wname};
    double pct = -1;
    assert_int_equal(ember__agroup_function_share(store, r, &g, T0, T0 + STEP, &pct), 0);
    assert_true(fabs(pct - want[i]) < 1e-9);
    ember__alert_rule_free(r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_function_share_by_leaf_name, setup, teardown),
      cmocka_unit_test(test_median_matches_sorting),
      cmocka_unit_test_setup_teardown(test_above_pending_firing_resolved_and_restart, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_hysteresis_flapping_fires_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_baseline_and_function_rules, setup, teardown),
      cmocka_unit_test_setup_teardown(test_group_by_host, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rules_sources_errors_reload_metrics, setup, teardown),
      cmocka_unit_test_setup_teardown(test_alertmanager_resend, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rules_shared_with_the_fleet, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
