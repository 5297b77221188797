/* ember alerts: the collector's alerts (docs/api.md, "Alerts") as a table,
 * filtered by state, rule and worker; `ember alerts show ID` one alert in
 * full: its times, what changed (the top functions by rise in self share,
 * baseline -> spike) and the capture session started when it fired.
 * --json prints the server's document as it came.
 *
 * Everything shown comes from the server and may hold any text: it goes
 * through ember__table_add, which replaces control characters. Not
 * thread-safe (one command runs); errors are exit statuses (cli.h) after a
 * sentence on stderr. */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "ember/buf.h"
#include "cli.h"
#include "client.h"
#include "common.h"

const char ember__usage_alerts[] =
    "       ember alerts [--state pending|firing|resolved] [--rule R] [--worker W] [--json]\n"
    "       ember alerts show ID [--json]\n";

const char ember__usage_alerts_notes[] =
    "  alerts: firing first, then newest; STARTED is when the alert went pending,\n"
    "  TOP FUNCTION the function whose self share rose most (baseline -> spike).\n"
    "  show ID: one alert with its times, top functions and capture session.\n"
    "  No alert is exit 3; an unknown ID is exit 2.\n";

enum { CMD_LIST = 1u, CMD_SHOW = 2u, CMD_ALL = 3u };

#define MAX_ID 128

typedef struct aopts {
  const char *server, *token;
  const char *state, *rule, *worker;
  const char *json;
} aopts_t;

#define F(name, alias, cmds, field, b)                                                             \
  { name, alias, cmds, offsetof(aopts_t, field), b }
static const ember__flag_t flags[] = {
    F("--server", NULL, CMD_ALL, server, false),  F("--token", NULL, CMD_ALL, token, false),
    F("--state", NULL, CMD_LIST, state, false),   F("--rule", NULL, CMD_LIST, rule, false),
    F("--worker", "-w", CMD_LIST, worker, false), F("--json", NULL, CMD_ALL, json, true),
};
#undef F

static void print_usage(void) {
  printf("usage:\n%s\n%s", ember__usage_alerts, ember__usage_alerts_notes);
}

/* 0.5 -> "0.50", 4 -> "4". */
static void fmt_num(const json_t *v, char *buf, size_t size) {
  if (!json_is_number(v)) {
    snprintf(buf, size, "?");
    return;
  }
  double d = json_number_value(v);
  if (d > -1e15 && d < 1e15 && d == (double)(long long)d)
    snprintf(buf, size, "%.0f", d);
  else
    snprintf(buf, size, "%.2f", d);
}

/* A share (0..1) as a percentage: 0.913 -> "91.3%". */
static void fmt_share(const json_t *v, char *buf, size_t size) {
  if (json_is_number(v))
    snprintf(buf, size, "%.1f%%", 100.0 * json_number_value(v));
  else
    snprintf(buf, size, "?");
}

/* "2026-12-01 14:37:35 (5m ago)", or "-" for null / absent. */
static void fmt_when(const json_t *v, int64_t now_ms, char *buf, size_t size) {
  if (!json_is_number(v)) {
    snprintf(buf, size, "-");
    return;
  }
  int64_t ms = ember__json_i64(v);
  char abs[32], ago[32];
  ember__fmt_local_ms(ms, abs, sizeof abs);
  ember__fmt_ago(now_ms, ms, ago, sizeof ago);
  snprintf(buf, size, "%s (%s)", abs, ago);
}

/* "worker=api,host=h1" (sep ","), in the document's order. */
static int fmt_labels(const json_t *labels, const char *sep, ember_buf_t *b) {
  const char *k;
  const json_t *v;
  int rc = 0;
  bool first = true;
  json_object_foreach((json_t *)(uintptr_t)labels, k, v) {
    const char *s = json_string_value(v);
    rc = ember_buf_printf(b, "%s%s=%s", first ? "" : sep, k, s ? s : "?");
    if (rc != 0) return rc;
    first = false;
  }
  return first ? ember_buf_puts(b, "-") : 0;
}

/* "s-123 running", or "-" without a capture. */
static void fmt_capture(const json_t *cap, char *buf, size_t size) {
  const char *id = json_string_value(json_object_get(cap, "session"));
  const char *state = json_string_value(json_object_get(cap, "state"));
  if (id == NULL)
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%s %s", id, state ? state : "?");
}

/* ---- ember alerts ---- */

static int list_table(const json_t *list, const void *ctx, ember_buf_t *out) {
  int64_t now_ms = *(const int64_t *)ctx;
  static const bool right[7] = {false, false, false, true, false, false, false};
  ember__table_t t = {.ncols = 7, .right = right};
  ember_buf_t labels;
  ember_buf_init(&labels, 65536);
  const char *hdr[] = {"STATE",   "RULE",         "LABELS", "VALUE/THRESHOLD",
                       "STARTED", "TOP FUNCTION", "CAPTURE"};
  int rc = 0;
  for (size_t i = 0; i < 7 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(list) && rc == 0; i++) {
    const json_t *a = json_array_get(list, i);
    const char *state = json_string_value(json_object_get(a, "state"));
    const char *rule = json_string_value(json_object_get(a, "rule"));
    char value[32], threshold[32], vt[72], started[80], top[512], cap[256];
    fmt_num(json_object_get(a, "value"), value, sizeof value);
    fmt_num(json_object_get(a, "threshold"), threshold, sizeof threshold);
    snprintf(vt, sizeof vt, "%s/%s", value, threshold);
    fmt_when(json_object_get(a, "started"), now_ms, started, sizeof started);
    const json_t *t0 = json_array_get(json_object_get(a, "top"), 0);
    const char *fn = json_string_value(json_object_get(t0, "function"));
    if (fn != NULL) {
      char b[16], s[16];
      fmt_share(json_object_get(t0, "baseline"), b, sizeof b);
      fmt_share(json_object_get(t0, "spike"), s, sizeof s);
      snprintf(top, sizeof top, "%s %s->%s", fn, b, s);
    } else {
      snprintf(top, sizeof top, "-");
    }
    fmt_capture(json_object_get(a, "capture"), cap, sizeof cap);
    ember_buf_reset(&labels);
    rc = fmt_labels(json_object_get(a, "labels"), ",", &labels);
    if (rc == 0) rc = ember__table_add(&t, state ? state : "?");
    if (rc == 0) rc = ember__table_add(&t, rule ? rule : "?");
    if (rc == 0) rc = ember__table_add(&t, labels.data);
    if (rc == 0) rc = ember__table_add(&t, vt);
    if (rc == 0) rc = ember__table_add(&t, started);
    if (rc == 0) rc = ember__table_add(&t, top);
    if (rc == 0) rc = ember__table_add(&t, cap);
  }
  if (rc == 0) rc = ember__table_render(&t, out);
  ember__table_free(&t);
  ember_buf_free(&labels);
  return rc;
}

static int cmd_list(const char *cmd, const aopts_t *o) {
  if (o->state != NULL && strcmp(o->state, "pending") != 0 && strcmp(o->state, "firing") != 0 &&
      strcmp(o->state, "resolved") != 0) {
    fprintf(stderr, "ember %s: --state '%s': expected pending, firing or resolved\n", cmd,
            o->state);
    return EXIT_USAGE;
  }
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  int st = 0, rc = 0;
  if (o->rule) rc = ember__query_add(&q, "rule", o->rule);
  if (rc == 0 && o->state) rc = ember__query_add(&q, "state", o->state);
  if (rc == 0 && o->worker) rc = ember__query_add(&q, "worker", o->worker);
  if (rc != 0) {
    fprintf(stderr, "ember %s: cannot build the request: %s (are --rule/--worker too long?)\n", cmd,
            ember_strerror(rc));
    st = EXIT_USAGE;
  }
  bool filtered = o->state || o->rule || o->worker;
  char empty[160];
  snprintf(empty, sizeof empty, "no alerts%s; `ember rules` lists the rules that would raise them",
           filtered ? " match" : " on the server");
  int64_t now_ms = ember_time_now_ns() / 1000000;
  if (st == 0)
    st = ember__list_command(cmd, o->server, o->token, "/api/v1/alerts", q.data, "alerts",
                             o->json != NULL, list_table, &now_ms, empty);
  ember_buf_free(&q);
  return st;
}

/* ---- ember alerts show ID ---- */

static int add_row(ember__table_t *t, const char *k, const char *v) {
  int rc = ember__table_add(t, k);
  return rc == 0 ? ember__table_add(t, v) : rc;
}

static int show_text(const json_t *a, int64_t now_ms, ember_buf_t *out) {
  static const bool right2[2] = {false, false};
  static const bool right5[5] = {false, false, true, true, true};
  ember__table_t t = {.ncols = 2, .right = right2};
  ember__table_t top = {.ncols = 5, .right = right5};
  ember_buf_t cell;
  ember_buf_init(&cell, 65536);
  const char *id = json_string_value(json_object_get(a, "id"));
  const char *state = json_string_value(json_object_get(a, "state"));
  const char *rule = json_string_value(json_object_get(a, "rule"));
  const char *kind = json_string_value(json_object_get(a, "kind"));
  char buf[256], v[32], th[32];
  int rc = add_row(&t, "alert", id ? id : "?");
  if (rc == 0) rc = add_row(&t, "state", state ? state : "?");
  if (rc == 0) {
    snprintf(buf, sizeof buf, "%s%s%s%s", rule ? rule : "?", kind ? " (" : "", kind ? kind : "",
             kind ? ")" : "");
    rc = add_row(&t, "rule", buf);
  }
  if (rc == 0) rc = fmt_labels(json_object_get(a, "labels"), " ", &cell);
  if (rc == 0) rc = add_row(&t, "labels", cell.data);
  if (rc == 0) {
    fmt_num(json_object_get(a, "value"), v, sizeof v);
    fmt_num(json_object_get(a, "threshold"), th, sizeof th);
    snprintf(buf, sizeof buf, "%s (threshold %s)", v, th);
    rc = add_row(&t, "value", buf);
  }
  const char *times[] = {"started", "fired", "resolved", "updated"};
  for (size_t i = 0; i < 4 && rc == 0; i++) {
    fmt_when(json_object_get(a, times[i]), now_ms, buf, sizeof buf);
    rc = add_row(&t, times[i], buf);
  }
  const json_t *cap = json_object_get(a, "capture");
  const char *sid = json_string_value(json_object_get(cap, "session"));
  const char *sstate = json_string_value(json_object_get(cap, "state"));
  if (sid != NULL)
    snprintf(buf, sizeof buf, "session %s, %s", sid, sstate ? sstate : "?");
  else
    snprintf(buf, sizeof buf, "-");
  if (rc == 0) rc = add_row(&t, "capture", buf);
  if (rc == 0) rc = ember__table_render(&t, out);
  const json_t *fns = json_object_get(a, "top");
  if (rc == 0 && json_array_size(fns) > 0) {
    rc = ember_buf_puts(out, "\nwhat changed (self share, baseline -> spike):\n");
    const char *hdr[] = {"FUNCTION", "FILE", "BASELINE", "SPIKE", "DELTA"};
    for (size_t i = 0; i < 5 && rc == 0; i++) rc = ember__table_add(&top, hdr[i]);
    for (size_t i = 0; i < json_array_size(fns) && rc == 0; i++) {
      const json_t *f = json_array_get(fns, i);
      const char *fn = json_string_value(json_object_get(f, "function"));
      const char *file = json_string_value(json_object_get(f, "file"));
      char b[16], s[16], d[24] = "?";
      fmt_share(json_object_get(f, "baseline"), b, sizeof b);
      fmt_share(json_object_get(f, "spike"), s, sizeof s);
      const json_t *dj = json_object_get(f, "delta");
      if (json_is_number(dj)) snprintf(d, sizeof d, "%+.1fpp", 100.0 * json_number_value(dj));
      rc = ember__table_add(&top, fn ? fn : "?");
      if (rc == 0) rc = ember__table_add(&top, file && file[0] ? file : "-");
      if (rc == 0) rc = ember__table_add(&top, b);
      if (rc == 0) rc = ember__table_add(&top, s);
      if (rc == 0) rc = ember__table_add(&top, d);
    }
    if (rc == 0) rc = ember__table_render(&top, out);
  }
  ember__table_free(&t);
  ember__table_free(&top);
  ember_buf_free(&cell);
  return rc;
}

static int cmd_show(const char *cmd, const aopts_t *o, const char *id) {
  if (!ember__name_ok(id, MAX_ID)) {
    fprintf(stderr,
            "ember %s: '%s' is not an alert id (`ember alerts` lists them, e.g. "
            "a1b2c3d4e5f60708)\n",
            cmd, id);
    return EXIT_USAGE;
  }
  char path[192];
  snprintf(path, sizeof path, "/api/v1/alerts/%s", id);
  ember_buf_t body, out;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  ember__client_t *c = NULL;
  json_t *doc = NULL;
  long status = 0;
  int st = ember__open_client(cmd, o->server, o->token, &c);
  if (st == 0) st = ember__request(cmd, c, "GET", path, NULL, NULL, &body, &status);
  if (st != 0) goto cleanup;
  if (status == 404 && !ember__no_such_path(&body)) {
    char msg[1024];
    ember__client_message(&body, msg, sizeof msg);
    fprintf(stderr, "ember %s: no alert %s%s%s; `ember alerts` lists them\n", cmd, id,
            msg[0] ? ": " : "", msg);
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = ember__status_exit(cmd, c, path, status, &body);
  if (st != 0) goto cleanup;
  doc = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
  if (!json_is_object(doc) || !json_is_string(json_object_get(doc, "state"))) {
    st = ember__malformed(cmd, path, "not an alert document");
    goto cleanup;
  }
  if (o->json != NULL) {
    st = ember__print_out(&body);
    goto cleanup;
  }
  int rc = show_text(doc, ember_time_now_ns() / 1000000, &out);
  st = rc == 0 ? ember__print_out(&out) : EXIT_FAILED;
  if (rc != 0) fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
cleanup:
  json_decref(doc);
  ember__client_free(c);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}

int ember__cmd_alerts(int argc, char **argv) {
  aopts_t o = {0};
  size_t nflags = sizeof flags / sizeof flags[0];
  int st;
  if (argc > 0 && strcmp(argv[0], "show") == 0) {
    static const char cmd[] = "alerts show";
    const char *id = NULL;
    st = ember__parse_flags_pos(cmd, CMD_SHOW, flags, nflags, argc - 1, argv + 1, &o, "alert id",
                                &id);
    if (st < 0) {
      print_usage();
      return 0;
    }
    return st != 0 ? st : cmd_show(cmd, &o, id);
  }
  static const char cmd[] = "alerts";
  if (argc > 0 && strcmp(argv[0], "list") == 0) {
    argc--;
    argv++;
  }
  st = ember__parse_flags(cmd, CMD_LIST, flags, nflags, argc, argv, &o);
  if (st < 0) {
    print_usage();
    return 0;
  }
  return st != 0 ? st : cmd_list(cmd, &o);
}
