/* ember workers | versions | hosts | actors | query | diff: thin clients of the
 * HTTP API (docs/api.md). Arguments are checked here, before any request,
 * so a typo fails fast with a sentence naming it; the server has the last
 * word on everything else and its {"error"} sentence is shown as is. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ember/buf.h"
#include "ember/export.h"
#include "ember/parse.h"
#include "cli.h"
#include "client.h"
#include "common.h"

const char ember__usage_query[] =
    "       ember workers [--from T] [--to T] [--json]\n"
    "       ember versions|hosts|actors [--worker W] [--version V] [--host H] [--actor A]\n"
    "                                   [--from T] [--to T] [--json]\n"
    "       ember query --worker W [--version V] [--host H] [--actor A] [--from T] [--to T]\n"
    "                   [--type cpu|samples|alloc_objects|alloc_bytes|inuse_objects|inuse_bytes]\n"
    "                   [--format top|pprof|folded|speedscope|tree] [--limit N]\n"
    "                   [--max-nodes N] [-o FILE]\n"
    "       ember diff --worker W [--version V] [--host H] [--actor A] [--from T] [--to T]\n"
    "                  [--vs-worker W] [--vs-version V] [--vs-host H] [--vs-actor A]\n"
    "                  [--vs-from T] [--vs-to T] [--type TYPE] [--limit N] [--json]\n";

const char ember__usage_query_notes[] =
    "  Every query command also takes --server URL (default $EMBER_SERVER, else\n"
    "  " EMBER_DEFAULT_SERVER ") and --token T (default $EMBER_TOKEN).\n"
    "  T is now, a relative time (-15m, now-2h, -90s), Unix seconds (1764410400.5)\n"
    "  or RFC 3339 (2026-11-29T10:00:00Z); --from defaults to -1h, --to to now.\n"
    "  query: --format defaults to top, or to what -o's name says (.pb.gz, .folded,\n"
    "  .speedscope.json, .json); -o writes FILE atomically.\n"
    "  diff: the largest changes in self share from A (the selection) to B (each\n"
    "  --vs-X defaults to A's value; '*' is any: --version 1.0 --vs-version '*');\n"
    "  --limit per side (default 10); --json prints the server's diff tree.\n";

static const char time_forms[] =
    "expected now, a relative time (-15m, now-2h), Unix seconds (1764410400) or RFC 3339 "
    "(2026-11-29T10:00:00Z)";

enum { CMD_WORKERS = 1u, CMD_LABELS = 2u, CMD_QUERY = 4u, CMD_DIFF = 8u, CMD_ALL = 15u };

typedef struct opts {
  const char *server, *token, *from, *to;
  const char *worker, *version, *host, *actor;
  const char *type, *format, *out, *limit, *max_nodes;
  const char *json; /* non-NULL when --json was given */
  const char *vs_worker, *vs_version, *vs_host, *vs_actor, *vs_from, *vs_to;
} opts_t;

#define F(name, alias, cmds, field, b)                                                             \
  { name, alias, cmds, offsetof(opts_t, field), b }
static const ember__flag_t flags[] = {
    F("--server", NULL, CMD_ALL, server, false),
    F("--token", NULL, CMD_ALL, token, false),
    F("--from", NULL, CMD_ALL, from, false),
    F("--to", NULL, CMD_ALL, to, false),
    F("--worker", "-w", CMD_LABELS | CMD_QUERY | CMD_DIFF, worker, false),
    F("--version", NULL, CMD_LABELS | CMD_QUERY | CMD_DIFF, version, false),
    F("--host", NULL, CMD_LABELS | CMD_QUERY | CMD_DIFF, host, false),
    F("--actor", NULL, CMD_LABELS | CMD_QUERY | CMD_DIFF, actor, false),
    F("--type", "-t", CMD_QUERY | CMD_DIFF, type, false),
    F("--format", "-f", CMD_QUERY, format, false),
    F("--output", "-o", CMD_QUERY, out, false),
    F("--limit", "-n", CMD_QUERY | CMD_DIFF, limit, false),
    F("--max-nodes", NULL, CMD_QUERY, max_nodes, false),
    F("--json", NULL, CMD_WORKERS | CMD_LABELS | CMD_DIFF, json, true),
    F("--vs-worker", NULL, CMD_DIFF, vs_worker, false),
    F("--vs-version", NULL, CMD_DIFF, vs_version, false),
    F("--vs-host", NULL, CMD_DIFF, vs_host, false),
    F("--vs-actor", NULL, CMD_DIFF, vs_actor, false),
    F("--vs-from", NULL, CMD_DIFF, vs_from, false),
    F("--vs-to", NULL, CMD_DIFF, vs_to, false),
};
#undef F

/* Returns 0, EXIT_USAGE after a message, or -1 for --help. */
static int parse_args(const char *cmd, unsigned bit, int argc, char **argv, opts_t *o) {
  return ember__parse_flags(cmd, bit, flags, sizeof flags / sizeof flags[0], argc, argv, o);
}

typedef struct range {
  int64_t from_ns, to_ns, now_ns;
} range_t;

static int parse_one_time(const char *cmd, const char *name, const char *s, int64_t now,
                          int64_t *out) {
  int rc = ember_parse_time(s, now, out);
  if (rc == -ERANGE) {
    fprintf(stderr, "ember %s: %s '%s' is out of range\n", cmd, name, s);
    return EXIT_USAGE;
  }
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s '%s': %s\n", cmd, name, s, time_forms);
    return EXIT_USAGE;
  }
  if (*out < 0) {
    fprintf(stderr, "ember %s: %s '%s' is before 1970\n", cmd, name, s);
    return EXIT_USAGE;
  }
  return 0;
}

/* Both ends against one "now", sent as absolute Unix seconds: the server's
 * clock and the time the request spends in flight then do not move the
 * range the user asked for. */
static int parse_range_at(const char *cmd, const opts_t *o, int64_t now_ns, range_t *r) {
  r->now_ns = now_ns;
  const char *from = o->from ? o->from : "-1h", *to = o->to ? o->to : "now";
  int rc = parse_one_time(cmd, "--from", from, r->now_ns, &r->from_ns);
  if (rc == 0) rc = parse_one_time(cmd, "--to", to, r->now_ns, &r->to_ns);
  if (rc == 0 && r->from_ns >= r->to_ns) {
    fprintf(stderr, "ember %s: --from (%s) must be before --to (%s)\n", cmd, from, to);
    rc = EXIT_USAGE;
  }
  return rc;
}

static int parse_range(const char *cmd, const opts_t *o, range_t *r) {
  return parse_range_at(cmd, o, ember_time_now_ns(), r);
}

static int add_time(ember_buf_t *q, const char *key, int64_t ns) {
  char v[48];
  snprintf(v, sizeof v, "%" PRId64 ".%09" PRId64, ns / 1000000000, ns % 1000000000);
  return ember__query_add(q, key, v);
}

static int add_selector(ember_buf_t *q, const opts_t *o) {
  int rc = 0;
  if (rc == 0 && o->worker) rc = ember__query_add(q, "worker", o->worker);
  if (rc == 0 && o->version) rc = ember__query_add(q, "version", o->version);
  if (rc == 0 && o->host) rc = ember__query_add(q, "host", o->host);
  if (rc == 0 && o->actor) rc = ember__query_add(q, "actor", o->actor);
  return rc;
}

static void fmt_local(int64_t ns, char *buf, size_t size) {
  time_t t = (time_t)(ns / 1000000000);
  struct tm tm;
  if (localtime_r(&t, &tm) == NULL || strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) == 0)
    snprintf(buf, size, "%" PRId64, ns / 1000000000);
}

static void fmt_range(const range_t *r, char *buf, size_t size) {
  char a[32], b[32];
  fmt_local(r->from_ns, a, sizeof a);
  fmt_local(r->to_ns, b, sizeof b);
  snprintf(buf, size, "%s and %s", a, b);
}

/* One GET; prints what went wrong and returns the exit status. */
static int fetch(const char *cmd, const opts_t *o, const char *path, const ember_buf_t *q,
                 size_t max_body, ember_buf_t *body) {
  char err[1024] = "";
  ember__client_t *c = NULL;
  int st = ember__open_client(cmd, o->server, o->token, &c);
  if (st != 0) return st;
  long status = 0;
  int status_exit = EXIT_FAILED;
  int rc = ember__client_get(c, path, q->data, max_body, &status, body, err, sizeof err);
  if (rc == 0) status_exit = ember__client_status_exit(c, path, status, body, err, sizeof err);
  if (rc != 0 || status_exit != 0) fprintf(stderr, "ember %s: %s\n", cmd, err);
  ember__client_free(c);
  return rc != 0 ? EXIT_FAILED : status_exit;
}

/* The query's parameters could not be written (values too long for the
 * 8 KiB query, or no memory): says so; returns the exit status. */
static int query_error(const char *cmd, int rc) {
  fprintf(stderr, "ember %s: cannot build the request: %s%s\n", cmd, ember_strerror(rc),
          rc == -ENOMEM ? "" : " (are the --worker/... values too long?)");
  return rc == -ENOMEM ? EXIT_FAILED : EXIT_USAGE;
}

/* GET a list endpoint (`workers`, `versions`...) for the range, with the
 * selector when `selector`: *doc is the answer and *list its `key` array.
 * Prints what went wrong; returns the exit status. */
static int fetch_list(const char *cmd, const opts_t *o, const char *path, const range_t *r,
                      bool selector, const char *key, ember_buf_t *body, json_t **doc,
                      const json_t **list) {
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  int rc = selector ? add_selector(&q, o) : 0;
  if (rc == 0) rc = add_time(&q, "from", r->from_ns);
  if (rc == 0) rc = add_time(&q, "to", r->to_ns);
  int st = rc != 0 ? query_error(cmd, rc) : fetch(cmd, o, path, &q, EMBER__MAX_JSON_BODY, body);
  ember_buf_free(&q);
  if (st != 0) return st;
  *doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  *list = json_object_get(*doc, key);
  if (!json_is_array(*list)) {
    char what[48];
    snprintf(what, sizeof what, "no \"%s\" list", key);
    return ember__malformed(cmd, path, what);
  }
  return 0;
}

static void fmt_ago(int64_t now_ns, int64_t last_ms, char *buf, size_t size) {
  int64_t s = (now_ns / 1000000 - last_ms) / 1000;
  if (s < 0) s = 0;
  if (s < 120)
    snprintf(buf, size, "%" PRId64 "s ago", s);
  else if (s < 7200)
    snprintf(buf, size, "%" PRId64 "m ago", s / 60);
  else if (s < 172800)
    snprintf(buf, size, "%" PRId64 "h ago", s / 3600);
  else
    snprintf(buf, size, "%" PRId64 "d ago", s / 86400);
}

/* "a,b,c", or "a,b +3" past three values. */
static int join_list(const json_t *arr, ember_buf_t *b) {
  size_t n = json_array_size(arr);
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (n > 3 && i == 2) return ember_buf_printf(b, " +%zu", n - 2);
    const char *v = json_string_value(json_array_get(arr, i));
    rc = ember_buf_printf(b, "%s%s", i ? "," : "", v ? v : "?");
  }
  if (rc == 0 && n == 0) rc = ember_buf_puts(b, "-");
  return rc;
}

/* ---- ember workers ---- */

int ember__cmd_workers(int argc, char **argv) {
  static const char cmd[] = "workers", path[] = "/api/v1/workers";
  opts_t o = {0};
  int st = parse_args(cmd, CMD_WORKERS, argc, argv, &o);
  if (st < 0) {
    printf("usage:\n%s\n%s", ember__usage_query, ember__usage_query_notes);
    return 0;
  }
  range_t r;
  if (st == 0) st = parse_range(cmd, &o, &r);
  if (st != 0) return st;
  ember_buf_t body, out, cell;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  ember_buf_init(&cell, 65536);
  static const bool right[5] = {false, false, false, false, true};
  ember__table_t t = {.ncols = 5, .right = right};
  json_t *doc = NULL;
  const json_t *workers = NULL;
  int rc = 0;
  st = fetch_list(cmd, &o, path, &r, false, "workers", &body, &doc, &workers);
  if (st != 0) goto cleanup;
  if (o.json != NULL) {
    st = ember__print_out(&body);
  } else if (json_array_size(workers) > 0) {
    const char *hdr[] = {"WORKER", "VERSIONS", "HOSTS", "ACTORS", "LAST SEEN"};
    for (size_t i = 0; i < 5 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
    for (size_t i = 0; i < json_array_size(workers) && rc == 0; i++) {
      const json_t *w = json_array_get(workers, i);
      const char *name = json_string_value(json_object_get(w, "worker"));
      const char *lists[] = {"versions", "hosts", "actors"};
      rc = ember__table_add(&t, name ? name : "?");
      for (size_t k = 0; k < 3 && rc == 0; k++) {
        ember_buf_reset(&cell);
        rc = join_list(json_object_get(w, lists[k]), &cell);
        if (rc == 0) rc = ember__table_add(&t, cell.data);
      }
      char ago[32] = "?";
      const json_t *last = json_object_get(w, "last_ms");
      if (json_is_number(last))
        fmt_ago(r.now_ns, (int64_t)json_number_value(last), ago, sizeof ago);
      if (rc == 0) rc = ember__table_add(&t, ago);
    }
    if (rc == 0) rc = ember__table_render(&t, &out);
    st = rc == 0 ? ember__print_out(&out) : EXIT_FAILED;
    if (rc != 0) fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
  }
  if (st == 0 && json_array_size(workers) == 0) {
    char range[80];
    fmt_range(&r, range, sizeof range);
    fprintf(stderr, "ember %s: no worker has sent profiles between %s; is an agent running?\n", cmd,
            range);
    st = EXIT_EMPTY;
  }
cleanup:
  json_decref(doc);
  ember__table_free(&t);
  ember_buf_free(&body);
  ember_buf_free(&out);
  ember_buf_free(&cell);
  return st;
}

/* ---- ember versions | hosts | actors ---- */

int ember__cmd_labels(const char *which, int argc, char **argv) {
  const char *cmd = which;
  opts_t o = {0};
  int st = parse_args(cmd, CMD_LABELS, argc, argv, &o);
  if (st < 0) {
    printf("usage:\n%s\n%s", ember__usage_query, ember__usage_query_notes);
    return 0;
  }
  range_t r;
  if (st == 0) st = parse_range(cmd, &o, &r);
  if (st != 0) return st;
  char path[64];
  snprintf(path, sizeof path, "/api/v1/%s", which);
  ember_buf_t body, out;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  static const bool right[3] = {false, true, true};
  ember__table_t t = {.ncols = 3, .right = right};
  json_t *doc = NULL;
  const json_t *values = NULL;
  int rc = 0;
  st = fetch_list(cmd, &o, path, &r, true, "values", &body, &doc, &values);
  if (st != 0) goto cleanup;
  if (o.json != NULL) {
    st = ember__print_out(&body);
  } else if (json_array_size(values) > 0) {
    /* The column is named for the label: "versions" -> "VERSION". */
    char head[32];
    size_t n = strlen(which) - 1;
    for (size_t i = 0; i < n && i + 1 < sizeof head; i++)
      head[i] = (char)(which[i] >= 'a' && which[i] <= 'z' ? which[i] - 32 : which[i]);
    head[n < sizeof head ? n : sizeof head - 1] = '\0';
    rc = ember__table_add(&t, head);
    if (rc == 0) rc = ember__table_add(&t, "SERIES");
    if (rc == 0) rc = ember__table_add(&t, "LAST SEEN");
    for (size_t i = 0; i < json_array_size(values) && rc == 0; i++) {
      const json_t *v = json_array_get(values, i);
      const char *name = json_string_value(json_object_get(v, "name"));
      char series[32] = "?", ago[32] = "?";
      const json_t *sn = json_object_get(v, "series"), *last = json_object_get(v, "last_ms");
      if (json_is_integer(sn))
        snprintf(series, sizeof series, "%lld", (long long)json_integer_value(sn));
      if (json_is_number(last))
        fmt_ago(r.now_ns, (int64_t)json_number_value(last), ago, sizeof ago);
      rc = ember__table_add(&t, name ? name : "?");
      if (rc == 0) rc = ember__table_add(&t, series);
      if (rc == 0) rc = ember__table_add(&t, ago);
    }
    if (rc == 0) rc = ember__table_render(&t, &out);
    st = rc == 0 ? ember__print_out(&out) : EXIT_FAILED;
    if (rc != 0) fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
  }
  if (st == 0 && json_array_size(values) == 0) {
    char range[80];
    fmt_range(&r, range, sizeof range);
    fprintf(stderr, "ember %s: no series matched between %s%s\n", cmd, range,
            o.worker || o.version || o.host || o.actor ? " (check the --worker/... values)"
                                                       : "; is an agent running?");
    st = EXIT_EMPTY;
  }
cleanup:
  json_decref(doc);
  ember__table_free(&t);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}

/* ---- ember query ---- */

static const char *const types[] = {"cpu",         "samples",       "alloc_objects",
                                    "alloc_bytes", "inuse_objects", "inuse_bytes"};

static bool one_of(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(s, list[i]) == 0) return true;
  }
  return false;
}

int ember__cmd_query(int argc, char **argv) {
  static const char cmd[] = "query", path[] = "/api/v1/profile";
  opts_t o = {0};
  int st = parse_args(cmd, CMD_QUERY, argc, argv, &o);
  if (st < 0) {
    printf("usage:\n%s\n%s", ember__usage_query, ember__usage_query_notes);
    return 0;
  }
  if (st != 0) return st;
  if (o.worker == NULL || o.worker[0] == '\0') {
    fprintf(stderr, "ember query: --worker W is required (`ember workers` lists them)\n");
    return EXIT_USAGE;
  }
  const char *format = NULL;
  bool to_stdout = true;
  st = ember__pick_format(cmd, o.format, o.out, &format, &to_stdout);
  if (st != 0) return st;
  if (o.type != NULL && !one_of(o.type, types, sizeof types / sizeof types[0])) {
    fprintf(stderr,
            "ember query: --type '%s': expected cpu, samples, alloc_objects, alloc_bytes, "
            "inuse_objects or inuse_bytes\n",
            o.type);
    return EXIT_USAGE;
  }
  uint64_t n;
  if (o.limit != NULL &&
      (strcmp(format, "top") != 0 || ember_parse_u64(o.limit, 1, 100000, &n) != 0)) {
    fprintf(stderr, "ember query: --limit '%s': %s\n", o.limit,
            strcmp(format, "top") != 0 ? "only --format top takes a limit"
                                       : "expected a number of functions from 1 to 100000");
    return EXIT_USAGE;
  }
  if (o.max_nodes != NULL &&
      (strcmp(format, "tree") != 0 || ember_parse_u64(o.max_nodes, 0, 1000000, &n) != 0)) {
    fprintf(stderr, "ember query: --max-nodes '%s': %s\n", o.max_nodes,
            strcmp(format, "tree") != 0 ? "only --format tree takes it"
                                        : "expected a number from 0 to 1000000");
    return EXIT_USAGE;
  }
  range_t r;
  st = parse_range(cmd, &o, &r);
  if (st != 0) return st;

  ember_buf_t q, body, out;
  ember_buf_init(&q, 8192);
  ember_buf_init(&body, EMBER__MAX_PROFILE_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  int rc = add_selector(&q, &o);
  if (rc == 0) rc = add_time(&q, "from", r.from_ns);
  if (rc == 0) rc = add_time(&q, "to", r.to_ns);
  if (rc == 0 && o.type) rc = ember__query_add(&q, "type", o.type);
  if (rc == 0) rc = ember__query_add(&q, "format", format);
  if (rc == 0 && o.limit) rc = ember__query_add(&q, "limit", o.limit);
  if (rc == 0 && o.max_nodes) rc = ember__query_add(&q, "max_nodes", o.max_nodes);
  if (rc != 0) {
    st = query_error(cmd, rc);
    goto cleanup;
  }
  st = fetch(cmd, &o, path, &q, EMBER__MAX_PROFILE_BODY, &body);
  if (st != 0) goto cleanup;
  bool empty = false;
  const ember_buf_t *result = &body;
  if (strcmp(format, "top") == 0) {
    char range[80], context[1024];
    fmt_range(&r, range, sizeof range);
    snprintf(context, sizeof context, "worker %s, between %s", o.worker, range);
    st = ember__render_top(cmd, path, &body, context, &out, &empty);
    if (st != 0) goto cleanup;
    result = &out;
  } else {
    empty = ember__profile_empty(format, &body);
  }
  /* Even an empty result is written: -o then always leaves a valid file
   * for whatever reads it next, and exit status 3 says it is empty. */
  st = ember__write_result(cmd, result, o.out, to_stdout);
  if (st != 0) goto cleanup;
  if (empty) {
    char range[80];
    fmt_range(&r, range, sizeof range);
    fprintf(stderr,
            "ember query: no %s samples for worker '%s'%s between %s (`ember workers` lists "
            "what there is)\n",
            o.type ? o.type : "cpu", o.worker,
            o.version || o.host || o.actor ? " and the given --version/--host/--actor" : "", range);
    st = EXIT_EMPTY;
  }
cleanup:
  ember_buf_free(&q);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}

/* ---- ember diff ---- */

typedef struct change {
  const char *name, *module; /* borrowed from the answer */
  int64_t base, vs;          /* self values */
  double a, b, d;            /* self shares of A and B, and b - a */
} change_t;

static int change_cmp(const void *a, const void *b) {
  const change_t *x = a, *y = b;
  if (x->d != y->d) return x->d > y->d ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Self values per function (name and module) over the whole diff tree,
 * without recursion. Returns 0 or -ENOMEM; *out to free with ember_free. */
static int collect_changes(const json_t *root, change_t **out, size_t *nout) {
  json_t *index = json_object(); /* "name\tmodule" -> position in *out */
  size_t n = 0, cap = 0, sp = 0, scap = 64;
  change_t *v = NULL;
  const json_t **stack = ember_malloc(scap * sizeof *stack);
  ember_buf_t key;
  ember_buf_init(&key, 1 << 20);
  int rc = index != NULL && stack != NULL ? 0 : -ENOMEM;
  if (rc == 0) stack[sp++] = root;
  while (rc == 0 && sp > 0) {
    const json_t *node = stack[--sp];
    const json_t *kids = json_object_get(node, "children");
    if (node != root) {
      const char *name = json_string_value(json_object_get(node, "name"));
      const char *module = json_string_value(json_object_get(node, "module"));
      if (name == NULL) name = "?";
      ember_buf_reset(&key);
      rc = ember_buf_printf(&key, "%s\t%s", name, module ? module : "");
      json_t *at = rc == 0 ? json_object_get(index, key.data) : NULL;
      size_t i = at ? (size_t)json_integer_value(at) : n;
      if (rc == 0 && at == NULL) {
        if (n == cap) {
          cap = cap ? cap * 2 : 256;
          change_t *nv = ember_realloc(v, cap * sizeof *nv);
          if (nv == NULL) rc = -ENOMEM;
          if (nv != NULL) v = nv;
        }
        if (rc == 0 && json_object_set_new(index, key.data, json_integer((json_int_t)n)) != 0)
          rc = -ENOMEM;
        if (rc == 0) v[n++] = (change_t){name, module, 0, 0, 0, 0, 0};
      }
      if (rc == 0) {
        v[i].base += ember__json_i64(json_object_get(node, "base_self"));
        v[i].vs += ember__json_i64(json_object_get(node, "vs_self"));
      }
    }
    for (size_t k = 0; rc == 0 && k < json_array_size(kids); k++) {
      if (sp == scap) {
        scap *= 2;
        const json_t **ns = ember_realloc(stack, scap * sizeof *ns);
        if (ns == NULL) {
          rc = -ENOMEM;
          break;
        }
        stack = ns;
      }
      stack[sp++] = json_array_get(kids, k);
    }
  }
  ember_free(stack);
  ember_buf_free(&key);
  json_decref(index);
  if (rc != 0) {
    ember_free(v);
    return rc;
  }
  *out = v;
  *nout = n;
  return 0;
}

static int add_change_rows(ember__table_t *t, const change_t *c, size_t n) {
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    char d[32], a[32], b[32];
    snprintf(d, sizeof d, "%+.2f", 100 * c[i].d);
    snprintf(a, sizeof a, "%.2f%%", 100 * c[i].a);
    snprintf(b, sizeof b, "%.2f%%", 100 * c[i].b);
    rc = ember__table_add(t, d);
    if (rc == 0) rc = ember__table_add(t, a);
    if (rc == 0) rc = ember__table_add(t, b);
    if (rc == 0) rc = ember__table_add(t, c[i].name);
  }
  return rc;
}

int ember__cmd_diff(int argc, char **argv) {
  static const char cmd[] = "diff", path[] = "/api/v1/diff";
  opts_t o = {0};
  int st = parse_args(cmd, CMD_DIFF, argc, argv, &o);
  if (st < 0) {
    printf("usage:\n%s\n%s", ember__usage_query, ember__usage_query_notes);
    return 0;
  }
  if (st != 0) return st;
  if (o.worker == NULL || o.worker[0] == '\0') {
    fprintf(stderr, "ember diff: --worker W is required (`ember workers` lists them)\n");
    return EXIT_USAGE;
  }
  if (o.type != NULL && !one_of(o.type, types, sizeof types / sizeof types[0])) {
    fprintf(stderr,
            "ember diff: --type '%s': expected cpu, samples, alloc_objects, alloc_bytes, "
            "inuse_objects or inuse_bytes\n",
            o.type);
    return EXIT_USAGE;
  }
  uint64_t limit = 10;
  if (o.limit != NULL && ember_parse_u64(o.limit, 1, 10000, &limit) != 0) {
    fprintf(stderr, "ember diff: --limit '%s': expected a number of functions from 1 to 10000\n",
            o.limit);
    return EXIT_USAGE;
  }
  range_t r, vr;
  st = parse_range(cmd, &o, &r);
  if (st != 0) return st;
  vr = r;
  if (o.vs_from != NULL || o.vs_to != NULL) {
    /* Against the same "now", so -2h and -1h are an hour apart exactly. */
    opts_t vo = {.from = o.vs_from ? o.vs_from : o.from, .to = o.vs_to ? o.vs_to : o.to};
    st = parse_range_at(cmd, &vo, r.now_ns, &vr);
    if (st != 0) return st;
  }

  ember_buf_t q, body, out;
  ember_buf_init(&q, 8192);
  ember_buf_init(&body, EMBER__MAX_PROFILE_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  ember__table_t t = {.ncols = 4, .right = (const bool[4]){true, true, true, false}};
  json_t *doc = NULL;
  change_t *c = NULL;
  size_t n = 0;
  const char *vs[][2] = {{"vs.worker", o.vs_worker},
                         {"vs.version", o.vs_version},
                         {"vs.host", o.vs_host},
                         {"vs.actor", o.vs_actor}};
  int rc = add_selector(&q, &o);
  if (rc == 0) rc = add_time(&q, "from", r.from_ns);
  if (rc == 0) rc = add_time(&q, "to", r.to_ns);
  if (rc == 0) rc = add_time(&q, "vs.from", vr.from_ns);
  if (rc == 0) rc = add_time(&q, "vs.to", vr.to_ns);
  for (size_t i = 0; i < 4 && rc == 0; i++)
    if (vs[i][1] != NULL) rc = ember__query_add(&q, vs[i][0], vs[i][1]);
  if (rc == 0 && o.type) rc = ember__query_add(&q, "type", o.type);
  /* Every node, so the per-function sums are exact. */
  if (rc == 0) rc = ember__query_add(&q, "max_nodes", "0");
  if (rc != 0) {
    st = query_error(cmd, rc);
    goto cleanup;
  }
  st = fetch(cmd, &o, path, &q, EMBER__MAX_PROFILE_BODY, &body);
  if (st != 0) goto cleanup;
  doc = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
  const json_t *root = json_object_get(doc, "root");
  int64_t bt = ember__json_i64(json_object_get(json_object_get(doc, "base"), "total"));
  int64_t vt = ember__json_i64(json_object_get(json_object_get(doc, "vs"), "total"));
  if (!json_is_object(root)) {
    st = ember__malformed(cmd, path, "no \"root\" tree");
    goto cleanup;
  }
  if (o.json != NULL) {
    st = ember__print_out(&body);
    if (st == 0 && bt == 0 && vt == 0) st = EXIT_EMPTY;
    goto cleanup;
  }
  if (bt == 0 && vt == 0) {
    fprintf(stderr, "ember diff: neither selection of worker '%s' has samples\n", o.worker);
    st = EXIT_EMPTY;
    goto cleanup;
  }
  rc = collect_changes(root, &c, &n);
  /* Shares of each side's own total; the table shows them, the sort is by
   * their difference (B - A, in percentage points). */
  for (size_t i = 0; i < n && rc == 0; i++) {
    c[i].a = bt ? (double)c[i].base / (double)bt : 0;
    c[i].b = vt ? (double)c[i].vs / (double)vt : 0;
    c[i].d = c[i].b - c[i].a;
  }
  if (rc == 0) qsort(c, n, sizeof *c, change_cmp);
  size_t worse = 0, better = 0;
  while (worse < n && worse < limit && c[worse].d > 0.00005) worse++;
  while (better < n - worse && better < limit && c[n - 1 - better].d < -0.00005) better++;
  char head[512];
  const char *unit = json_string_value(json_object_get(doc, "unit"));
  char btxt[32], vtxt[32];
  ember__fmt_value(bt, unit ? unit : "count", btxt, sizeof btxt);
  ember__fmt_value(vt, unit ? unit : "count", vtxt, sizeof vtxt);
  snprintf(head, sizeof head, "%s, A %s, B %s; change in self share (B - A, points)\n\n",
           o.type ? o.type : "cpu", btxt, vtxt);
  if (rc == 0) rc = ember_buf_puts(&out, head);
  static const char *const hdr[] = {"CHANGE", "A SELF", "B SELF", "FUNCTION"};
  for (size_t i = 0; i < 4 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  if (rc == 0) rc = add_change_rows(&t, c, worse);
  /* The improvements, largest first. */
  for (size_t i = 0; i < better / 2; i++) {
    change_t tmp = c[n - 1 - i];
    c[n - 1 - i] = c[n - better + i];
    c[n - better + i] = tmp;
  }
  if (rc == 0) rc = add_change_rows(&t, c + n - better, better);
  if (rc == 0 && worse + better > 0) rc = ember__table_render(&t, &out);
  if (rc == 0 && worse + better == 0)
    rc = ember_buf_puts(&out, "no function changed its self share by 0.01 points or more\n");
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
    st = EXIT_FAILED;
    goto cleanup;
  }
  st = ember__print_out(&out);
cleanup:
  ember_free(c);
  json_decref(doc);
  ember__table_free(&t);
  ember_buf_free(&q);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}
