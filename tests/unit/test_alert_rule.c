/* Alert rules: every field good and bad from JSON and from a rules file
 * (one checking path, the same sentences), the JSON round trip, the rule
 * set, the worker glob. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "alert_rule.h"

static ember__alert_rule_t *json_rule(const char *text, char *err, size_t size) {
  json_error_t je;
  json_t *j = json_loads(text, 0, &je);
  if (!j) fail_msg("test JSON does not parse: %s: %s", text, je.text);
  ember__alert_rule_t *r = NULL;
  err[0] = '\0';
  int rc = ember__alert_rule_from_json(j, &r, err, size);
  json_decref(j);
  if (rc != 0) {
    assert_int_equal(rc, -EINVAL);
    assert_null(r);
  }
  return r;
}

static ember__alert_rule_t *good(const char *text) {
  char err[512];
  ember__alert_rule_t *r = json_rule(text, err, sizeof err);
  if (!r) fail_msg("refused %s: %s", text, err);
  return r;
}

/* Refused, with a sentence holding `want`. */
static void bad_json(const char *text, const char *want) {
  char err[512];
  ember__alert_rule_t *r = json_rule(text, err, sizeof err);
  if (r) fail_msg("accepted %s", text);
  if (!strstr(err, want)) fail_msg("%s: error \"%s\" lacks \"%s\"", text, err, want);
}

#define BASE "\"name\":\"r\",\"worker\":\"api\",\"for\":\"30s\""

/* The same field refused from a file, with the same sentence after FILE:LINE. */
static void bad_file(const char *text, const char *want) {
  char err[512] = "";
  ember__alert_rules_t *set = NULL;
  int rc = ember__alert_rules_parse(text, strlen(text), "t.rules", &set, err, sizeof err);
  if (rc == 0) fail_msg("accepted file:\n%s", text);
  assert_int_equal(rc, -EINVAL);
  assert_null(set);
  if (!strstr(err, want)) fail_msg("file error \"%s\" lacks \"%s\"", err, want);
}

static ember__alert_rules_t *good_file(const char *text) {
  char err[512] = "";
  ember__alert_rules_t *set = NULL;
  int rc = ember__alert_rules_parse(text, strlen(text), "t.rules", &set, err, sizeof err);
  if (rc != 0) fail_msg("refused file: %s", err);
  return set;
}

static void test_alert_rule_minimal_and_defaults(void **state) {
  (void)state;
  ember__alert_rule_t *r = good("{" BASE ",\"above\":0.5}");
  assert_string_equal(r->name, "r");
  assert_string_equal(r->worker, "api");
  assert_null(r->version);
  assert_int_equal(r->kind, EMBER__ALERT_ABOVE);
  assert_true(r->above == 0.5);
  assert_int_equal(r->for_ns, 30000000000LL);
  assert_int_equal(r->resolve_for_ns, r->for_ns); /* default = for */
  assert_true(r->hysteresis == 0.1);
  assert_false(r->has_capture);
  assert_null(r->webhook_url);
  ember__alert_rule_free(r);

  r = good("{" BASE ",\"baseline\":{\"factor\":4}}");
  assert_int_equal(r->kind, EMBER__ALERT_BASELINE);
  assert_true(r->baseline.factor == 4);
  assert_int_equal(r->baseline.period_ns, 3600000000000LL);
  assert_true(r->baseline.floor == 0.1);
  ember__alert_rule_free(r);

  r = good("{" BASE ",\"function\":{\"name\":\"burn_hot\",\"percent\":30},\"capture\":{}}");
  assert_int_equal(r->kind, EMBER__ALERT_FUNCTION);
  assert_string_equal(r->function.name, "burn_hot");
  assert_true(r->function.percent == 30);
  assert_true(r->has_capture);
  assert_int_equal(r->capture.type, EMBER_SESSION_CPU);
  assert_int_equal(r->capture.duration_ms, 5000);
  assert_int_equal(r->capture.hz, 1000);
  assert_int_equal(r->capture.instances, 1);
  assert_int_equal(r->capture.cooldown_ns, 600000000000LL);
  assert_int_equal(r->capture.max_per_hour, 4);
  ember__alert_rule_free(r);

  /* "for" 0 fires on the first breaching window. */
  r = good("{\"name\":\"z\",\"worker\":\"*\",\"for\":\"0\",\"above\":1}");
  assert_int_equal(r->for_ns, 0);
  ember__alert_rule_free(r);
}

static void test_alert_rule_every_field_good(void **state) {
  (void)state;
  ember__alert_rule_t *r =
      good("{\"name\":\"cpu-hot_1.x\",\"worker\":\"api-*\",\"version\":\"1.2\",\"host\":\"h1\","
           "\"actor\":\"room-7\",\"group_by\":\"host\",\"above\":2,\"for\":\"1m\",\"hysteresis\":0,"
           "\"resolve_for\":\"90s\",\"capture\":{\"type\":\"alloc\",\"duration_ms\":250,\"hz\":99,"
           "\"instances\":0,\"cooldown\":\"0s\",\"max_per_hour\":3600},"
           "\"webhook\":{\"url\":\"https://h/x\",\"format\":\"json\"}}");
  assert_string_equal(r->name, "cpu-hot_1.x");
  assert_string_equal(r->worker, "api-*");
  assert_string_equal(r->version, "1.2");
  assert_string_equal(r->host, "h1");
  assert_string_equal(r->actor, "room-7");
  assert_int_equal(r->group_by, EMBER__GROUP_HOST);
  assert_true(r->above == 2);
  assert_int_equal(r->for_ns, 60000000000LL);
  assert_true(r->hysteresis == 0);
  assert_int_equal(r->resolve_for_ns, 90000000000LL);
  assert_int_equal(r->capture.type, EMBER_SESSION_MEMORY);
  assert_int_equal(r->capture.duration_ms, 250);
  assert_int_equal(r->capture.hz, 99);
  assert_int_equal(r->capture.instances, 0);
  assert_int_equal(r->capture.cooldown_ns, 0);
  assert_int_equal(r->capture.max_per_hour, 3600);
  assert_string_equal(r->webhook_url, "https://h/x");
  assert_int_equal(r->webhook_format, EMBER__WEBHOOK_JSON);
  ember__alert_rule_free(r);

  r = good("{" BASE ",\"group_by\":\"version\",\"baseline\":{\"factor\":1.5,\"period\":\"1m\","
           "\"floor\":0},\"webhook\":\"http://127.0.0.1:9/hook\"}");
  assert_int_equal(r->group_by, EMBER__GROUP_VERSION);
  assert_int_equal(r->baseline.period_ns, 60000000000LL);
  assert_true(r->baseline.floor == 0);
  assert_string_equal(r->webhook_url, "http://127.0.0.1:9/hook");
  assert_int_equal(r->webhook_format, EMBER__WEBHOOK_ALERTMANAGER);
  ember__alert_rule_free(r);
  r = good("{" BASE ",\"group_by\":\"actor\",\"function\":{\"name\":\"f\",\"percent\":100}}");
  assert_int_equal(r->group_by, EMBER__GROUP_ACTOR);
  ember__alert_rule_free(r);
}

static void test_alert_rule_every_field_bad(void **state) {
  (void)state;
  /* name */
  bad_json("{\"name\":\"a b\",\"worker\":\"api\",\"for\":\"1s\",\"above\":1}",
           "field \"name\": \"a b\" must be 1 to 64 of the characters");
  bad_json("{\"name\":\"\",\"worker\":\"api\",\"for\":\"1s\",\"above\":1}", "field \"name\"");
  bad_json("{\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\","
           "\"worker\":\"api\",\"for\":\"1s\",\"above\":1}",
           "field \"name\"");
  bad_json("{\"name\":7,\"worker\":\"api\",\"for\":\"1s\",\"above\":1}",
           "field \"name\": \"7\" must be");
  /* worker and the exact matches */
  bad_json("{\"name\":\"r\",\"worker\":\"\",\"for\":\"1s\",\"above\":1}", "field \"worker\"");
  bad_json("{\"name\":\"r\",\"worker\":\"a\\u0001\",\"for\":\"1s\",\"above\":1}",
           "field \"worker\": \"a?\" must be a worker name");
  bad_json("{" BASE ",\"above\":1,\"version\":\"\"}", "field \"version\": \"\" must be a string");
  bad_json("{" BASE ",\"above\":1,\"host\":[1]}", "field \"host\": \"[1]\" must be a string");
  bad_json("{" BASE ",\"above\":1,\"actor\":null}", "field \"actor\": \"null\"");
  bad_json("{" BASE ",\"above\":1,\"group_by\":\"pid\"}",
           "field \"group_by\": \"pid\" must be one of version, host, actor");
  /* thresholds: negative, zero, wrong types */
  bad_json("{" BASE ",\"above\":-1}", "field \"above\": \"-1\" must be a number of cores above 0");
  bad_json("{" BASE ",\"above\":0}", "field \"above\": \"0\" must be a number of cores above 0");
  bad_json("{" BASE ",\"above\":\"0.5\"}", "field \"above\": \"0.5\" must be a number");
  bad_json("{" BASE ",\"above\":true}", "field \"above\": \"true\"");
  bad_json("{" BASE ",\"baseline\":{\"factor\":1}}",
           "field \"baseline.factor\": \"1\" must be a number above 1");
  bad_json("{" BASE ",\"baseline\":{\"factor\":-3}}", "field \"baseline.factor\"");
  bad_json("{" BASE ",\"baseline\":{\"factor\":2,\"floor\":-0.1}}",
           "field \"baseline.floor\": \"-0.1\" must be a number of cores of 0 or more");
  bad_json("{" BASE ",\"baseline\":{\"factor\":2,\"period\":\"59s\"}}",
           "field \"baseline.period\": \"59s\" must be a duration from 1m to 30d");
  bad_json("{" BASE ",\"baseline\":{\"period\":\"1h\"}}", "field \"baseline.factor\" is missing");
  bad_json("{" BASE ",\"baseline\":4}", "field \"baseline\": \"4\" must be an object with factor");
  bad_json("{" BASE ",\"function\":{\"name\":\"f\",\"percent\":0}}",
           "field \"function.percent\": \"0\" must be a percentage above 0 and at most 100");
  bad_json("{" BASE ",\"function\":{\"name\":\"f\",\"percent\":100.5}}", "function.percent");
  bad_json("{" BASE ",\"function\":{\"name\":\"\",\"percent\":5}}", "field \"function.name\"");
  bad_json("{" BASE ",\"function\":{\"percent\":5}}", "field \"function.name\" is missing");
  bad_json("{" BASE ",\"function\":{\"name\":\"f\"}}", "field \"function.percent\" is missing");
  /* durations */
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"for\":\"3x\",\"above\":1}",
           "field \"for\": \"3x\" is not a duration (use 30s, 5m, 1h)");
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"for\":\"30\",\"above\":1}",
           "field \"for\": \"30\" is not a duration");
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"for\":\"-5s\",\"above\":1}",
           "field \"for\": \"-5s\" is not a duration");
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"for\":30,\"above\":1}",
           "field \"for\": \"30\" is not a duration");
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"for\":\"2d\",\"above\":1}",
           "field \"for\": \"2d\" must be a duration from 0s");
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"for\":\"99999999999999999999s\",\"above\":1}",
           "field \"for\"");
  bad_json("{" BASE ",\"above\":1,\"resolve_for\":\"1y\"}", "field \"resolve_for\": \"1y\"");
  bad_json("{" BASE ",\"above\":1,\"hysteresis\":1}",
           "field \"hysteresis\": \"1\" must be a number from 0 up to, not including, 1");
  bad_json("{" BASE ",\"above\":1,\"hysteresis\":-0.1}", "field \"hysteresis\"");
  /* capture */
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"type\":\"gpu\"}}",
           "field \"capture.type\": \"gpu\" must be cpu or alloc");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"duration_ms\":0}}",
           "field \"capture.duration_ms\": \"0\" must be a whole number of milliseconds");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"duration_ms\":1.5}}", "capture.duration_ms");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"duration_ms\":\"5s\"}}", "capture.duration_ms");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"hz\":10001}}", "field \"capture.hz\"");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"instances\":-1}}", "field \"capture.instances\"");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"cooldown\":\"soon\"}}",
           "field \"capture.cooldown\": \"soon\" is not a duration");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"max_per_hour\":0}}",
           "field \"capture.max_per_hour\"");
  bad_json("{" BASE ",\"above\":1,\"capture\":\"cpu\"}", "field \"capture\": \"cpu\" must be an "
                                                         "object");
  /* webhook */
  bad_json("{" BASE ",\"above\":1,\"webhook\":\"ftp://x\"}",
           "field \"webhook.url\": \"ftp://x\" must be an http:// or https:// URL");
  bad_json("{" BASE ",\"above\":1,\"webhook\":\"http://\"}", "field \"webhook.url\"");
  bad_json("{" BASE ",\"above\":1,\"webhook\":{\"url\":\"http://a b\"}}", "webhook.url");
  bad_json("{" BASE ",\"above\":1,\"webhook\":{\"url\":\"http://a\",\"format\":\"slack\"}}",
           "field \"webhook.format\": \"slack\" must be alertmanager or json");
  bad_json("{" BASE ",\"above\":1,\"webhook\":{\"format\":\"json\"}}",
           "field \"webhook.url\" is missing");
  bad_json("{" BASE ",\"above\":1,\"webhook\":3}", "field \"webhook\": \"3\" must be a URL");
}

static void test_alert_rule_unknown_missing_and_exclusive(void **state) {
  (void)state;
  bad_json("{" BASE ",\"above\":1,\"colour\":\"red\"}", "unknown field \"colour\" (a rule takes "
                                                        "name, worker");
  bad_json("{" BASE ",\"above\":1,\"capture\":{\"colour\":1}}",
           "unknown field \"capture.colour\" (capture takes type, duration_ms");
  bad_json("{" BASE ",\"baseline\":{\"factor\":2,\"x.y\":1}}", "unknown field \"baseline.x.y\"");
  bad_json("{\"worker\":\"api\",\"for\":\"1s\",\"above\":1}", "field \"name\" is missing");
  bad_json("{\"name\":\"r\",\"for\":\"1s\",\"above\":1}", "field \"worker\" is missing");
  bad_json("{\"name\":\"r\",\"worker\":\"api\",\"above\":1}", "field \"for\" is missing");
  bad_json("{" BASE "}", "needs one of the fields \"above\" (cores), \"baseline\" or "
                         "\"function\"");
  bad_json("{" BASE ",\"above\":1,\"baseline\":{\"factor\":2}}",
           "fields \"above\" and \"baseline\" cannot both be set");
  bad_json("{" BASE ",\"baseline\":{\"factor\":2},\"function\":{\"name\":\"f\",\"percent\":1}}",
           "fields \"baseline\" and \"function\" cannot both be set");
  bad_json("[1]", "must be a JSON object");
}

static void test_alert_rule_pattern_syntax(void **state) {
  (void)state;
  const char *metas[] = {"api[12]", "api{a,b}", "ap?",   "a\\\\b", "^api",
                         "api$",    "a|b",      "(api)", "a]"};
  for (size_t i = 0; i < sizeof metas / sizeof metas[0]; i++) {
    char text[256];
    snprintf(text, sizeof text, "{\"name\":\"r\",\"worker\":\"%s\",\"for\":\"1s\",\"above\":1}",
             metas[i]);
    bad_json(text, "has pattern syntax");
    bad_json(text, "use a literal worker name, or '*' for any run of characters");
  }
  bad_json("{\"name\":\"r\",\"worker\":\"api[0-9]\",\"for\":\"1s\",\"above\":1}",
           "field \"worker\": \"api[0-9]\" has pattern syntax '['");
  bad_file("[rule r]\nworker = api?\nabove = 1\nfor = 1s\n",
           "t.rules:2: field \"worker\": \"api?\" has pattern syntax '?'");
}

static void test_alert_rule_glob(void **state) {
  (void)state;
  assert_true(ember__alert_glob_match("api", "api"));
  assert_false(ember__alert_glob_match("api", "api2"));
  assert_false(ember__alert_glob_match("api", "ap"));
  assert_true(ember__alert_glob_match("*", ""));
  assert_true(ember__alert_glob_match("*", "anything"));
  assert_true(ember__alert_glob_match("api-*", "api-"));
  assert_true(ember__alert_glob_match("api-*", "api-eu"));
  assert_false(ember__alert_glob_match("api-*", "api"));
  assert_false(ember__alert_glob_match("api-*", "xapi-eu"));
  assert_true(ember__alert_glob_match("*-eu", "api-eu"));
  assert_false(ember__alert_glob_match("*-eu", "api-eu2"));
  assert_true(ember__alert_glob_match("a*b*c", "abc"));
  assert_true(ember__alert_glob_match("a*b*c", "axxbyyc"));
  assert_true(ember__alert_glob_match("a*b*c", "abcbc"));
  assert_false(ember__alert_glob_match("a*b*c", "acb"));
  assert_true(ember__alert_glob_match("**", "x"));
  assert_true(ember__alert_glob_match("*a*", "banana"));
  assert_false(ember__alert_glob_match("*aa*", "banana"));
  assert_false(ember__alert_glob_match(NULL, "x"));
  /* Backtracking: the first '*' must give characters back. */
  assert_true(ember__alert_glob_match("*ab", "aab"));
  assert_true(ember__alert_glob_match("*aab", "aaab"));

  ember__alert_rule_t *r = good("{" BASE ",\"above\":1,\"worker\":\"api-*\",\"host\":\"h1\"}");
  assert_true(ember__alert_rule_selects(r, "api-eu", "1", "h1", NULL));
  assert_false(ember__alert_rule_selects(r, "api-eu", "1", "h2", NULL));
  assert_false(ember__alert_rule_selects(r, "api-eu", "1", NULL, NULL));
  assert_false(ember__alert_rule_selects(r, "web", "1", "h1", NULL));
  ember__alert_rule_free(r);
}

/* Two rules that differ in every optional field; each goes to JSON, back,
 * and to JSON again: same rule, same text. */
static void test_alert_rule_round_trip(void **state) {
  (void)state;
  const char *texts[] = {
      "{" BASE ",\"above\":0.1}",
      "{\"name\":\"b\",\"worker\":\"*\",\"version\":\"v\",\"host\":\"h\",\"actor\":\"a\","
      "\"group_by\":\"actor\",\"baseline\":{\"factor\":4.25,\"period\":\"90m\",\"floor\":0.2},"
      "\"for\":\"1500ms\",\"hysteresis\":0.3333333333333333,\"resolve_for\":\"0\","
      "\"capture\":{\"type\":\"alloc\",\"duration_ms\":7,\"hz\":3,\"instances\":9,"
      "\"cooldown\":\"5h\",\"max_per_hour\":2},\"webhook\":{\"url\":\"http://x/y?z=1#f\","
      "\"format\":\"json\"}}",
      "{\"name\":\"c\",\"worker\":\"w\\u00e9\",\"function\":{\"name\":\"ns::f<int>(long)\","
      "\"percent\":12.5},\"for\":\"1d\",\"webhook\":\"https://x\"}",
  };
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    ember__alert_rule_t *r = good(texts[i]);
    json_t *j = ember__alert_rule_to_json(r);
    assert_non_null(j);
    char *t1 = json_dumps(j, JSON_COMPACT);
    ember__alert_rule_t *back = NULL;
    char err[256];
    assert_int_equal(ember__alert_rule_from_json(j, &back, err, sizeof err), 0);
    assert_true(ember__alert_rule_equal(r, back));
    json_t *j2 = ember__alert_rule_to_json(back);
    char *t2 = json_dumps(j2, JSON_COMPACT);
    assert_string_equal(t1, t2);
    ember__alert_rule_t *copy = ember__alert_rule_dup(back);
    assert_true(ember__alert_rule_equal(copy, r));
    free(t1);
    free(t2);
    json_decref(j);
    json_decref(j2);
    ember__alert_rule_free(r);
    ember__alert_rule_free(back);
    ember__alert_rule_free(copy);
  }
  /* Durations in their largest exact unit. */
  ember__alert_rule_t *r = good("{" BASE ",\"above\":1,\"resolve_for\":\"120s\"}");
  json_t *j = ember__alert_rule_to_json(r);
  assert_string_equal(json_string_value(json_object_get(j, "for")), "30s");
  assert_string_equal(json_string_value(json_object_get(j, "resolve_for")), "2m");
  json_decref(j);
  /* A change is seen. */
  ember__alert_rule_t *other = good("{" BASE ",\"above\":1,\"resolve_for\":\"121s\"}");
  assert_false(ember__alert_rule_equal(r, other));
  ember__alert_rule_free(other);
  ember__alert_rule_free(r);
}

static void test_alert_rule_file(void **state) {
  (void)state;
  const char *text = "# alerts for the api\n"
                     "\n"
                     "[rule cpu-hot]\n"
                     "worker = api\n"
                     "above = 0.5\n"
                     "for = 20s\n"
                     "  capture.type = cpu  \r\n"
                     "capture.duration_ms = 5000\n"
                     "webhook.url = http://127.0.0.1:9093/api/v2/alerts#x\n"
                     "[rule  base ]\n"
                     "worker = *\n"
                     "baseline.factor = 4\n"
                     "baseline.period = 2h\n"
                     "for = 0\n"
                     "group_by = host\n"
                     "[rule fn]\n"
                     "worker = api-*\n"
                     "function.name = burn_hot\n"
                     "function.percent = 30\n"
                     "for = 1m\n"
                     "hysteresis = 0.2\n"
                     "webhook = https://h/hook\n";
  ember__alert_rules_t *set = good_file(text);
  assert_int_equal(ember__alert_rules_count(set), 3);
  const ember__alert_rule_t *r = ember__alert_rules_at(set, 0);
  assert_string_equal(r->name, "cpu-hot");
  assert_true(r->above == 0.5);
  assert_int_equal(r->for_ns, 20000000000LL);
  assert_true(r->has_capture);
  assert_int_equal(r->capture.duration_ms, 5000);
  assert_string_equal(r->webhook_url, "http://127.0.0.1:9093/api/v2/alerts#x");
  r = ember__alert_rules_find(set, "base");
  assert_non_null(r);
  assert_int_equal(r->kind, EMBER__ALERT_BASELINE);
  assert_int_equal(r->baseline.period_ns, 7200000000000LL);
  assert_int_equal(r->group_by, EMBER__GROUP_HOST);
  r = ember__alert_rules_find(set, "fn");
  assert_string_equal(r->function.name, "burn_hot");
  assert_true(r->hysteresis == 0.2);
  assert_string_equal(r->webhook_url, "https://h/hook");
  assert_null(ember__alert_rules_find(set, "nope"));

  /* The same rule from JSON is equal to the file's. */
  ember__alert_rule_t *fromj =
      good("{\"name\":\"fn\",\"worker\":\"api-*\",\"function\":{\"name\":\"burn_hot\","
           "\"percent\":30},\"for\":\"60s\",\"hysteresis\":0.2,\"webhook\":\"https://h/hook\"}");
  assert_true(ember__alert_rule_equal(fromj, r));

  /* Add (API rules), refuse a clash, remove. */
  assert_int_equal(ember__alert_rules_add(set, ember__alert_rule_dup(fromj)), -EEXIST);
  snprintf(fromj->name, sizeof fromj->name, "fn2");
  assert_int_equal(ember__alert_rules_add(set, fromj), 0);
  assert_int_equal(ember__alert_rules_count(set), 4);
  assert_int_equal(ember__alert_rules_remove(set, "base"), 0);
  assert_int_equal(ember__alert_rules_remove(set, "base"), EMBER_ENOTFOUND);
  assert_string_equal(ember__alert_rules_at(set, 1)->name, "fn");
  assert_string_equal(ember__alert_rules_at(set, 2)->name, "fn2");
  assert_null(ember__alert_rules_at(set, 3));
  ember__alert_rules_free(set);

  /* An empty file (or only comments) is an empty set. */
  set = good_file("# nothing yet\n");
  assert_int_equal(ember__alert_rules_count(set), 0);
  ember__alert_rules_free(set);
  ember__alert_rules_free(NULL);
}

/* The file gives the same sentences as JSON, after FILE:LINE, and one bad
 * line refuses the whole file. */
static void test_alert_rule_file_errors(void **state) {
  (void)state;
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\n"
           "[rule b]\nworker = api\nabove = -1\nfor = 1s\n",
           "t.rules:7: field \"above\": \"-1\" must be a number of cores above 0");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 3x\n",
           "t.rules:4: field \"for\": \"3x\" is not a duration (use 30s, 5m, 1h)");
  bad_file("[rule a]\nworker = api\nabove = 0.5x\nfor = 1s\n",
           "t.rules:3: field \"above\": \"0.5x\" must be a number of cores above 0");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\ncolour = red\n",
           "t.rules:5: unknown field \"colour\"");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\ncapture.hz = 1.5\n",
           "t.rules:5: field \"capture.hz\": \"1.5\" must be a whole number");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\ncapture.hz = -1\n", "t.rules:5:");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\ncapture.hz = 0x10\n",
           "t.rules:5: field \"capture.hz\": \"0x10\" must be a whole number");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\ncapture = cpu\n",
           "t.rules:5: field \"capture\": \"cpu\" must be an object with type, duration_ms");
  bad_file("[rule a]\nworker = api\nabove = 1\nabove = 2\nfor = 1s\n",
           "t.rules:4: field \"above\" is set twice");
  bad_file("[rule a]\nworker = api\nwebhook = http://a\nwebhook.url = http://b\nabove = 1\n"
           "for = 1s\n",
           "t.rules:4: field \"webhook.url\" is set twice");
  bad_file("[rule a]\nworker = api\nabove = 1\n", "t.rules:1: rule \"a\": field \"for\" is "
                                                  "missing");
  bad_file("[rule a]\nworker = api\nfor = 1s\n[rule b]\n",
           "t.rules:1: rule \"a\": a rule needs one of");
  bad_file("worker = api\n", "t.rules:1: key = value before the first [rule NAME] header");
  bad_file("[rule a]\nworker api\n", "t.rules:2: expected key = value");
  bad_file("[rules a]\n", "t.rules:1: expected a block header [rule NAME]");
  bad_file("[rule]\n", "t.rules:1: expected a block header");
  bad_file("[rule a b]\n", "t.rules:1: field \"name\": \"a b\" must be 1 to 64");
  bad_file("[rule a]\nname = b\n", "t.rules:2: field \"name\": a file rule is named by its");
  bad_file("[rule a]\nworker = api\nabove = 1\nfor = 1s\n[rule a]\nworker = x\nabove = 2\n"
           "for = 1s\n",
           "t.rules:5: rule \"a\" is defined twice (first on line 1)");
  bad_file("[rule a]\nworker =\nabove = 1\nfor = 1s\n", "t.rules:2: field \"worker\": \"\"");
  bad_file("[rule a]\nworker = \xff\n", "t.rules:2: the line is not valid UTF-8");
  {
    char text[64] = "[rule a]\nworker = a\0b\n";
    char err[256] = "";
    ember__alert_rules_t *set = NULL;
    assert_int_equal(ember__alert_rules_parse(text, 23, "t.rules", &set, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "t.rules:2: NUL byte"));
  }
  {
    size_t n = 5000;
    char *text = malloc(n + 32);
    assert_non_null(text);
    memcpy(text, "[rule a]\nworker = ", 18);
    memset(text + 18, 'x', n);
    memcpy(text + 18 + n, "\n", 2);
    bad_file(text, "t.rules:2: line longer than");
    free(text);
  }
}

static void test_alert_rule_file_load(void **state) {
  (void)state;
  char path[256], err[512];
  snprintf(path, sizeof path, "%s/alert_rules_%d.rules", EMBER_TEST_TMP, (int)getpid());
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("[rule ok]\nworker = api\nabove = 1\nfor = 1s\n\n[rule bad]\nworker = api\n"
        "above = 0\nfor = 1s\n",
        f);
  fclose(f);
  ember__alert_rules_t *set = NULL;
  assert_int_equal(ember__alert_rules_load(path, &set, err, sizeof err), -EINVAL);
  assert_null(set);
  char want[320];
  snprintf(want, sizeof want, "%s:8: field \"above\": \"0\"", path);
  assert_non_null(strstr(err, want));
  f = fopen(path, "w");
  assert_non_null(f);
  fputs("[rule ok]\nworker = api\nabove = 1\nfor = 1s\n", f);
  fclose(f);
  assert_int_equal(ember__alert_rules_load(path, &set, err, sizeof err), 0);
  assert_int_equal(ember__alert_rules_count(set), 1);
  ember__alert_rules_free(set);
  unlink(path);
  set = NULL;
  assert_int_equal(ember__alert_rules_load(path, &set, err, sizeof err), -ENOENT);
  assert_non_null(strstr(err, "cannot open the rules file"));
  assert_null(set);
}

/* Fail the Nth allocation for every N: each parse fails with -ENOMEM and
 * leaks nothing (the ASan tree checks), until it succeeds. */
static void test_alert_rule_alloc_failures(void **state) {
  (void)state;
  const char *text = "[rule a]\nworker = api-*\nhost = h\nabove = 1\nfor = 1s\n"
                     "webhook = http://x\n[rule b]\nworker = *\nfunction.name = f\n"
                     "function.percent = 5\nfor = 0\ncapture.type = cpu\n";
  for (long n = 0;; n++) {
    char err[256];
    ember__alert_rules_t *set = NULL;
    ember_alloc_fail_after(n);
    int rc = ember__alert_rules_parse(text, strlen(text), "t.rules", &set, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) {
      assert_int_equal(ember__alert_rules_count(set), 2);
      ember__alert_rule_t *copy = NULL;
      for (long m = 0; copy == NULL; m++) {
        ember_alloc_fail_after(m);
        copy = ember__alert_rule_dup(ember__alert_rules_at(set, 0));
        ember_alloc_fail_reset();
      }
      assert_true(ember__alert_rule_equal(copy, ember__alert_rules_at(set, 0)));
      ember__alert_rule_free(copy);
      ember__alert_rules_free(set);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
    assert_null(set);
  }
  json_t *j = json_loads("{\"name\":\"r\",\"worker\":\"api\",\"version\":\"1\",\"for\":\"1s\","
                         "\"function\":{\"name\":\"f\",\"percent\":5}}",
                         0, NULL);
  assert_non_null(j);
  for (long n = 0;; n++) {
    char err[256];
    ember__alert_rule_t *r = NULL;
    ember_alloc_fail_after(n);
    int rc = ember__alert_rule_from_json(j, &r, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) {
      ember__alert_rule_free(r);
      break;
    }
    assert_int_equal(rc, -ENOMEM);
  }
  json_decref(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_alert_rule_minimal_and_defaults),
      cmocka_unit_test(test_alert_rule_every_field_good),
      cmocka_unit_test(test_alert_rule_every_field_bad),
      cmocka_unit_test(test_alert_rule_unknown_missing_and_exclusive),
      cmocka_unit_test(test_alert_rule_pattern_syntax),
      cmocka_unit_test(test_alert_rule_glob),
      cmocka_unit_test(test_alert_rule_round_trip),
      cmocka_unit_test(test_alert_rule_file),
      cmocka_unit_test(test_alert_rule_file_errors),
      cmocka_unit_test(test_alert_rule_file_load),
      cmocka_unit_test(test_alert_rule_alloc_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
