/* ember workers | versions | hosts | actors | query: thin clients of the
 * HTTP API (docs/api.md). Arguments are checked here, before any request,
 * so a typo fails fast with a sentence naming it; the server has the last
 * word on everything else and its {"error"} sentence is shown as is. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "ember/buf.h"
#include "ember/export.h"
#include "ember/parse.h"
#include "cli.h"
#include "client.h"

/* Largest answers accepted: listings are small, profiles may be large. */
#define MAX_JSON_BODY    ((size_t)64 << 20)
#define MAX_PROFILE_BODY ((size_t)1 << 30)

const char ember__usage_query[] =
    "       ember workers [--from T] [--to T] [--json]\n"
    "       ember versions|hosts|actors [--worker W] [--version V] [--host H] [--actor A]\n"
    "                                   [--from T] [--to T] [--json]\n"
    "       ember query --worker W [--version V] [--host H] [--actor A] [--from T] [--to T]\n"
    "                   [--type cpu|samples|alloc_objects|alloc_bytes]\n"
    "                   [--format top|pprof|folded|speedscope|tree] [--limit N]\n"
    "                   [--max-nodes N] [-o FILE]\n";

const char ember__usage_query_notes[] =
    "  Every query command also takes --server URL (default $EMBER_SERVER, else\n"
    "  " EMBER_DEFAULT_SERVER ") and --token T (default $EMBER_TOKEN).\n"
    "  T is now, a relative time (-15m, now-2h, -90s), Unix seconds (1764410400.5)\n"
    "  or RFC 3339 (2026-11-29T10:00:00Z); --from defaults to -1h, --to to now.\n"
    "  query: --format defaults to top, or to what -o's name says (.pb.gz, .folded,\n"
    "  .speedscope.json, .json); -o writes FILE atomically.\n";

static const char time_forms[] =
    "expected now, a relative time (-15m, now-2h), Unix seconds (1764410400) or RFC 3339 "
    "(2026-11-29T10:00:00Z)";

enum { CMD_WORKERS = 1u, CMD_LABELS = 2u, CMD_QUERY = 4u, CMD_ALL = 7u };

typedef struct opts {
  const char *server, *token, *from, *to;
  const char *worker, *version, *host, *actor;
  const char *type, *format, *out, *limit, *max_nodes;
  const char *json; /* non-NULL when --json was given */
} opts_t;

typedef struct flag {
  const char *name;
  const char *alias;
  unsigned cmds;
  size_t off; /* of the const char * in opts_t */
  bool is_bool;
} flag_t;

#define F(name, alias, cmds, field, b)                                                             \
  { name, alias, cmds, offsetof(opts_t, field), b }
static const flag_t flags[] = {
    F("--server", NULL, CMD_ALL, server, false),
    F("--token", NULL, CMD_ALL, token, false),
    F("--from", NULL, CMD_ALL, from, false),
    F("--to", NULL, CMD_ALL, to, false),
    F("--worker", "-w", CMD_LABELS | CMD_QUERY, worker, false),
    F("--version", NULL, CMD_LABELS | CMD_QUERY, version, false),
    F("--host", NULL, CMD_LABELS | CMD_QUERY, host, false),
    F("--actor", NULL, CMD_LABELS | CMD_QUERY, actor, false),
    F("--type", "-t", CMD_QUERY, type, false),
    F("--format", "-f", CMD_QUERY, format, false),
    F("--output", "-o", CMD_QUERY, out, false),
    F("--limit", "-n", CMD_QUERY, limit, false),
    F("--max-nodes", NULL, CMD_QUERY, max_nodes, false),
    F("--json", NULL, CMD_WORKERS | CMD_LABELS, json, true),
};
#undef F

static const char **field(opts_t *o, const flag_t *f) {
  return (const char **)(void *)((char *)o + f->off);
}

/* Returns 0, EXIT_USAGE after a message, or -1 for --help. */
static int parse_args(const char *cmd, unsigned bit, int argc, char **argv, opts_t *o) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1;
    const flag_t *f = NULL;
    const char *inline_value = NULL;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0] && f == NULL; k++) {
      size_t n = strlen(flags[k].name);
      if (strcmp(a, flags[k].name) == 0 || (flags[k].alias && strcmp(a, flags[k].alias) == 0)) {
        f = &flags[k];
      } else if (strncmp(a, flags[k].name, n) == 0 && a[n] == '=') {
        f = &flags[k];
        inline_value = a + n + 1;
      }
    }
    if (f == NULL) {
      if (a[0] == '-')
        fprintf(stderr, "ember %s: unknown option '%s' (see `ember help`)\n", cmd, a);
      else
        fprintf(stderr, "ember %s: unexpected argument '%s' (options take the form --name VALUE)\n",
                cmd, a);
      return EXIT_USAGE;
    }
    if ((f->cmds & bit) == 0) {
      fprintf(stderr, "ember %s: %s is not an option of this command (see `ember help`)\n", cmd,
              f->name);
      return EXIT_USAGE;
    }
    const char **slot = field(o, f);
    if (*slot != NULL) {
      fprintf(stderr, "ember %s: %s given twice\n", cmd, f->name);
      return EXIT_USAGE;
    }
    if (f->is_bool) {
      if (inline_value != NULL) {
        fprintf(stderr, "ember %s: %s takes no value\n", cmd, f->name);
        return EXIT_USAGE;
      }
      *slot = "1";
    } else if (inline_value != NULL) {
      *slot = inline_value;
    } else if (i + 1 < argc) {
      *slot = argv[++i];
    } else {
      fprintf(stderr, "ember %s: %s needs a value\n", cmd, f->name);
      return EXIT_USAGE;
    }
  }
  return 0;
}

static const char *env_or(const char *flag, const char *env, const char *def) {
  if (flag != NULL) return flag;
  const char *v = getenv(env);
  return v != NULL && v[0] != '\0' ? v : def;
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
static int parse_range(const char *cmd, const opts_t *o, range_t *r) {
  r->now_ns = ember_time_now_ns();
  const char *from = o->from ? o->from : "-1h", *to = o->to ? o->to : "now";
  int rc = parse_one_time(cmd, "--from", from, r->now_ns, &r->from_ns);
  if (rc == 0) rc = parse_one_time(cmd, "--to", to, r->now_ns, &r->to_ns);
  if (rc == 0 && r->from_ns >= r->to_ns) {
    fprintf(stderr, "ember %s: --from (%s) must be before --to (%s)\n", cmd, from, to);
    rc = EXIT_USAGE;
  }
  return rc;
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
  const char *server = env_or(o->server, "EMBER_SERVER", EMBER_DEFAULT_SERVER);
  const char *token = env_or(o->token, "EMBER_TOKEN", NULL);
  int rc = ember__client_new(server, token, &c, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, err);
    return rc == EMBER_ECONFIG ? EXIT_USAGE : EXIT_FAILED;
  }
  long status = 0;
  int status_exit = EXIT_FAILED;
  rc = ember__client_get(c, path, q->data, max_body, &status, body, err, sizeof err);
  if (rc == 0) status_exit = ember__client_status_exit(c, path, status, body, err, sizeof err);
  if (rc != 0 || status_exit != 0) fprintf(stderr, "ember %s: %s\n", cmd, err);
  ember__client_free(c);
  return rc != 0 ? EXIT_FAILED : status_exit;
}

static int malformed(const char *cmd, const char *path, const char *why) {
  fprintf(stderr,
          "ember %s: the server's answer to %s is not what this ember expects (%s); is "
          "--server an Ember server of the same version?\n",
          cmd, path, why);
  return EXIT_FAILED;
}

/* ---- text tables ---- */

typedef struct table {
  size_t ncols;
  const bool *right; /* per column: right-aligned */
  size_t n, cap;     /* cells */
  char **cells;
} table_t;

/* Untrusted text (labels, function names) goes to the terminal without
 * control characters, so nothing in a profile can drive the terminal. */
static int table_add(table_t *t, const char *s) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **nc = ember_realloc(t->cells, cap * sizeof *nc);
    if (nc == NULL) return -ENOMEM;
    t->cells = nc;
    t->cap = cap;
  }
  char *c = ember_strdup(s);
  if (c == NULL) return -ENOMEM;
  for (char *p = c; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch < 0x20 || ch == 0x7f) *p = '?';
  }
  t->cells[t->n++] = c;
  return 0;
}

static void table_free(table_t *t) {
  for (size_t i = 0; i < t->n; i++) ember_free(t->cells[i]);
  ember_free(t->cells);
}

/* Display width in code points: close enough for names in UTF-8. */
static size_t width(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

static int table_render(const table_t *t, ember_buf_t *out) {
  size_t w[8] = {0};
  if (t->ncols == 0 || t->ncols > sizeof w / sizeof w[0]) return -EINVAL;
  for (size_t i = 0; i < t->n; i++) {
    size_t cw = width(t->cells[i]);
    if (cw > w[i % t->ncols]) w[i % t->ncols] = cw;
  }
  int rc = 0;
  for (size_t i = 0; i < t->n && rc == 0; i++) {
    size_t col = i % t->ncols;
    bool last = col + 1 == t->ncols;
    size_t pad = w[col] - width(t->cells[i]);
    if (t->right[col]) rc = ember_buf_printf(out, "%*s", (int)pad, "");
    if (rc == 0) rc = ember_buf_puts(out, t->cells[i]);
    if (rc == 0 && !t->right[col] && !last) rc = ember_buf_printf(out, "%*s", (int)pad, "");
    if (rc == 0) rc = ember_buf_puts(out, last ? "\n" : "  ");
  }
  return rc;
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

static int print_out(const ember_buf_t *b) {
  if (b->len > 0 && fwrite(b->data, 1, b->len, stdout) != b->len) return EXIT_FAILED;
  return fflush(stdout) == 0 ? 0 : EXIT_FAILED;
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
  ember_buf_t q, body, out, cell;
  ember_buf_init(&q, 8192);
  ember_buf_init(&body, MAX_JSON_BODY);
  ember_buf_init(&out, MAX_JSON_BODY);
  ember_buf_init(&cell, 65536);
  static const bool right[5] = {false, false, false, false, true};
  table_t t = {.ncols = 5, .right = right};
  json_t *doc = NULL;
  int rc = add_time(&q, "from", r.from_ns);
  if (rc == 0) rc = add_time(&q, "to", r.to_ns);
  if (rc != 0) {
    st = EXIT_FAILED;
    goto cleanup;
  }
  st = fetch(cmd, &o, path, &q, MAX_JSON_BODY, &body);
  if (st != 0) goto cleanup;
  doc = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
  const json_t *workers = json_object_get(doc, "workers");
  if (!json_is_array(workers)) {
    st = malformed(cmd, path, "no \"workers\" list");
    goto cleanup;
  }
  if (o.json != NULL) {
    st = print_out(&body);
  } else if (json_array_size(workers) > 0) {
    const char *hdr[] = {"WORKER", "VERSIONS", "HOSTS", "ACTORS", "LAST SEEN"};
    for (size_t i = 0; i < 5 && rc == 0; i++) rc = table_add(&t, hdr[i]);
    for (size_t i = 0; i < json_array_size(workers) && rc == 0; i++) {
      const json_t *w = json_array_get(workers, i);
      const char *name = json_string_value(json_object_get(w, "worker"));
      const char *lists[] = {"versions", "hosts", "actors"};
      rc = table_add(&t, name ? name : "?");
      for (size_t k = 0; k < 3 && rc == 0; k++) {
        ember_buf_reset(&cell);
        rc = join_list(json_object_get(w, lists[k]), &cell);
        if (rc == 0) rc = table_add(&t, cell.data);
      }
      char ago[32] = "?";
      const json_t *last = json_object_get(w, "last_ms");
      if (json_is_number(last))
        fmt_ago(r.now_ns, (int64_t)json_number_value(last), ago, sizeof ago);
      if (rc == 0) rc = table_add(&t, ago);
    }
    if (rc == 0) rc = table_render(&t, &out);
    st = rc == 0 ? print_out(&out) : EXIT_FAILED;
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
  table_free(&t);
  ember_buf_free(&q);
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
  ember_buf_t q, body, out;
  ember_buf_init(&q, 8192);
  ember_buf_init(&body, MAX_JSON_BODY);
  ember_buf_init(&out, MAX_JSON_BODY);
  static const bool right[3] = {false, true, true};
  table_t t = {.ncols = 3, .right = right};
  json_t *doc = NULL;
  int rc = add_selector(&q, &o);
  if (rc == 0) rc = add_time(&q, "from", r.from_ns);
  if (rc == 0) rc = add_time(&q, "to", r.to_ns);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = fetch(cmd, &o, path, &q, MAX_JSON_BODY, &body);
  if (st != 0) goto cleanup;
  doc = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
  const json_t *values = json_object_get(doc, "values");
  if (!json_is_array(values)) {
    st = malformed(cmd, path, "no \"values\" list");
    goto cleanup;
  }
  if (o.json != NULL) {
    st = print_out(&body);
  } else if (json_array_size(values) > 0) {
    /* The column is named for the label: "versions" -> "VERSION". */
    char head[32];
    size_t n = strlen(which) - 1;
    for (size_t i = 0; i < n && i + 1 < sizeof head; i++)
      head[i] = (char)(which[i] >= 'a' && which[i] <= 'z' ? which[i] - 32 : which[i]);
    head[n < sizeof head ? n : sizeof head - 1] = '\0';
    rc = table_add(&t, head);
    if (rc == 0) rc = table_add(&t, "SERIES");
    if (rc == 0) rc = table_add(&t, "LAST SEEN");
    for (size_t i = 0; i < json_array_size(values) && rc == 0; i++) {
      const json_t *v = json_array_get(values, i);
      const char *name = json_string_value(json_object_get(v, "name"));
      char series[32] = "?", ago[32] = "?";
      const json_t *sn = json_object_get(v, "series"), *last = json_object_get(v, "last_ms");
      if (json_is_integer(sn))
        snprintf(series, sizeof series, "%lld", (long long)json_integer_value(sn));
      if (json_is_number(last))
        fmt_ago(r.now_ns, (int64_t)json_number_value(last), ago, sizeof ago);
      rc = table_add(&t, name ? name : "?");
      if (rc == 0) rc = table_add(&t, series);
      if (rc == 0) rc = table_add(&t, ago);
    }
    if (rc == 0) rc = table_render(&t, &out);
    st = rc == 0 ? print_out(&out) : EXIT_FAILED;
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
  table_free(&t);
  ember_buf_free(&q);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}

/* ---- ember query ---- */

static const char *const formats[] = {"top", "pprof", "folded", "speedscope", "tree"};
static const char *const types[] = {"cpu", "samples", "alloc_objects", "alloc_bytes"};

static bool one_of(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(s, list[i]) == 0) return true;
  }
  return false;
}

static void fmt_value(int64_t v, const char *unit, char *buf, size_t size) {
  double d = (double)v;
  if (unit != NULL && strcmp(unit, "nanoseconds") == 0) {
    if (v >= 1000000000)
      snprintf(buf, size, "%.2fs", d / 1e9);
    else if (v >= 1000000)
      snprintf(buf, size, "%.2fms", d / 1e6);
    else if (v >= 1000)
      snprintf(buf, size, "%.2fus", d / 1e3);
    else
      snprintf(buf, size, "%" PRId64 "ns", v);
  } else if (unit != NULL && strcmp(unit, "bytes") == 0) {
    if (v >= (int64_t)1 << 30)
      snprintf(buf, size, "%.2fGiB", d / (double)(1 << 30));
    else if (v >= 1 << 20)
      snprintf(buf, size, "%.2fMiB", d / (double)(1 << 20));
    else if (v >= 1 << 10)
      snprintf(buf, size, "%.2fKiB", d / (double)(1 << 10));
    else
      snprintf(buf, size, "%" PRId64 "B", v);
  } else {
    snprintf(buf, size, "%" PRId64, v);
  }
}

static int64_t json_i64(const json_t *v) {
  if (json_is_integer(v)) return (int64_t)json_integer_value(v);
  return json_is_real(v) ? (int64_t)json_real_value(v) : 0;
}

/* The API's format=top JSON as a table; *empty when nothing was sampled. */
static int render_top(const char *cmd, const ember_buf_t *body, const opts_t *o, const range_t *r,
                      ember_buf_t *out, bool *empty) {
  static const char path[] = "/api/v1/profile";
  json_t *doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  const json_t *fns = json_object_get(doc, "functions");
  const json_t *total_j = json_object_get(doc, "total");
  int st = 0;
  static const bool right[5] = {true, true, true, true, false};
  table_t t = {.ncols = 5, .right = right};
  if (!json_is_array(fns) || !json_is_number(total_j)) {
    st = malformed(cmd, path, "format=top without \"functions\" and \"total\"");
    goto cleanup;
  }
  int64_t total = json_i64(total_j);
  *empty = total == 0 || json_array_size(fns) == 0;
  if (*empty) goto cleanup;
  const char *unit = json_string_value(json_object_get(doc, "unit"));
  const char *type = json_string_value(json_object_get(doc, "type"));
  char tot[32], range[80];
  fmt_value(total, unit, tot, sizeof tot);
  fmt_range(r, range, sizeof range);
  int rc = ember_buf_printf(out, "%s (%s), total %s, worker %s, between %s\n\n", type ? type : "?",
                            unit ? unit : "", tot, o->worker, range);
  const char *hdr[] = {"self", "self%", "total", "total%", "function"};
  for (size_t i = 0; i < 5 && rc == 0; i++) rc = table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(fns) && rc == 0; i++) {
    const json_t *f = json_array_get(fns, i);
    const char *name = json_string_value(json_object_get(f, "name"));
    int64_t self = json_i64(json_object_get(f, "self"));
    int64_t tv = json_i64(json_object_get(f, "total"));
    char a[32], b[16], c[32], d[16];
    fmt_value(self, unit, a, sizeof a);
    snprintf(b, sizeof b, "%.1f%%", 100.0 * (double)self / (double)total);
    fmt_value(tv, unit, c, sizeof c);
    snprintf(d, sizeof d, "%.1f%%", 100.0 * (double)tv / (double)total);
    rc = table_add(&t, a);
    if (rc == 0) rc = table_add(&t, b);
    if (rc == 0) rc = table_add(&t, c);
    if (rc == 0) rc = table_add(&t, d);
    if (rc == 0) rc = table_add(&t, name ? name : "?");
  }
  if (rc == 0) rc = table_render(&t, out);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
    st = EXIT_FAILED;
  }
cleanup:
  table_free(&t);
  json_decref(doc);
  return st;
}

/* Does a gzip'd pprof Profile hold a sample (field 2 of the message)?
 * 1 yes, 0 no, -1 cannot tell (then the caller assumes yes). */
static int pprof_has_samples(const ember_buf_t *body) {
  if (body->len == 0) return 0;
  ember_buf_t raw;
  ember_buf_init(&raw, (size_t)256 << 20);
  z_stream zs = {0};
  int result = -1;
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return -1;
  zs.next_in = (Bytef *)(uintptr_t)body->data;
  zs.avail_in = (uInt)body->len;
  for (;;) {
    char *at = NULL;
    int rc = ember_buf_extend(&raw, 65536, &at);
    if (rc == EMBER_ETOOBIG) result = 1; /* that much can only be samples */
    if (rc != 0) goto cleanup;
    zs.next_out = (Bytef *)at;
    zs.avail_out = 65536;
    int z = inflate(&zs, Z_NO_FLUSH);
    raw.len -= zs.avail_out;
    if (z == Z_STREAM_END) break;
    if (z != Z_OK) goto cleanup;
  }
  const unsigned char *p = (const unsigned char *)raw.data, *end = p + raw.len;
  result = 0;
  while (p < end) {
    uint64_t v[2] = {0, 0};
    size_t nv = 0;
    /* Key, then (for wire types 0 and 2) a second varint. */
    for (size_t k = 0; k < 2; k++) {
      unsigned shift = 0;
      while (p < end && shift < 64) {
        unsigned char byte = *p++;
        v[k] |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if ((byte & 0x80) == 0) break;
      }
      nv++;
      if (k == 0 && (v[0] >> 3) == 2) {
        result = 1;
        goto cleanup;
      }
      unsigned wt = (unsigned)(v[0] & 7);
      if (k == 0 && wt != 0 && wt != 2) {
        size_t skip = wt == 1 ? 8 : wt == 5 ? 4 : SIZE_MAX;
        if (skip > (size_t)(end - p)) {
          result = -1;
          goto cleanup;
        }
        p += skip;
        break;
      }
    }
    if (nv == 2 && (v[0] & 7) == 2) {
      if (v[1] > (uint64_t)(end - p)) {
        result = -1;
        goto cleanup;
      }
      p += v[1];
    }
  }
cleanup:
  inflateEnd(&zs);
  ember_buf_free(&raw);
  return result;
}

static bool profile_empty(const char *format, const ember_buf_t *body) {
  if (strcmp(format, "pprof") == 0) return pprof_has_samples(body) == 0;
  if (strcmp(format, "folded") == 0) {
    for (size_t i = 0; i < body->len; i++) {
      if (body->data[i] != '\n' && body->data[i] != ' ' && body->data[i] != '\r') return false;
    }
    return true;
  }
  json_t *doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  bool empty = false;
  if (strcmp(format, "tree") == 0) {
    const json_t *total = json_object_get(doc, "total");
    empty = json_is_number(total) && json_number_value(total) == 0.0;
  } else if (strcmp(format, "speedscope") == 0) {
    const json_t *profs = json_object_get(doc, "profiles");
    empty = json_is_array(profs);
    for (size_t i = 0; empty && i < json_array_size(profs); i++)
      empty = json_array_size(json_object_get(json_array_get(profs, i), "samples")) == 0;
  }
  json_decref(doc);
  return empty;
}

/* Write to `path` through a temporary file in the same directory and a
 * rename, so a reader (or an interrupted run) never sees half a profile. */
static int write_atomic(const char *path, const char *data, size_t len) {
  ember_buf_t tmp;
  ember_buf_init(&tmp, 8192);
  int fd = -1, rc = ember_buf_printf(&tmp, "%s.tmp.XXXXXX", path);
  if (rc != 0) goto cleanup;
  fd = mkostemp(tmp.data, O_CLOEXEC);
  if (fd < 0) {
    rc = -errno;
    goto cleanup;
  }
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      goto cleanup;
    }
    data += n;
    len -= (size_t)n;
  }
  /* mkostemp makes the file 0600; give it the mode a plain create would. */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0 || fsync(fd) != 0) {
    rc = -errno;
    goto cleanup;
  }
  rc = close(fd) == 0 ? 0 : -errno;
  fd = -1;
  if (rc == 0 && rename(tmp.data, path) != 0) rc = -errno;
cleanup:
  if (fd >= 0) close(fd);
  if (rc != 0 && tmp.data != NULL) unlink(tmp.data);
  ember_buf_free(&tmp);
  return rc;
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
  const char *format = o.format;
  bool to_stdout = o.out == NULL || strcmp(o.out, "-") == 0;
  if (format == NULL && !to_stdout) {
    ember_format_t f;
    if (ember_format_parse(o.out, &f) != 0) {
      fprintf(stderr,
              "ember query: cannot tell the format from the name '%s'; add --format "
              "pprof|folded|speedscope|tree|top\n",
              o.out);
      return EXIT_USAGE;
    }
    format = ember_format_name(f);
  }
  if (format == NULL) format = "top";
  if (!one_of(format, formats, sizeof formats / sizeof formats[0])) {
    fprintf(stderr, "ember query: --format '%s': expected top, pprof, folded, speedscope or tree\n",
            format);
    return EXIT_USAGE;
  }
  if (o.type != NULL && !one_of(o.type, types, sizeof types / sizeof types[0])) {
    fprintf(stderr,
            "ember query: --type '%s': expected cpu, samples, alloc_objects or alloc_bytes\n",
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
  if (strcmp(format, "pprof") == 0 && to_stdout && isatty(STDOUT_FILENO)) {
    fprintf(stderr, "ember query: pprof is binary (gzip); write it with -o FILE.pb.gz, or pipe "
                    "stdout into a file or `go tool pprof`\n");
    return EXIT_USAGE;
  }
  range_t r;
  st = parse_range(cmd, &o, &r);
  if (st != 0) return st;

  ember_buf_t q, body, out;
  ember_buf_init(&q, 8192);
  ember_buf_init(&body, MAX_PROFILE_BODY);
  ember_buf_init(&out, MAX_JSON_BODY);
  int rc = add_selector(&q, &o);
  if (rc == 0) rc = add_time(&q, "from", r.from_ns);
  if (rc == 0) rc = add_time(&q, "to", r.to_ns);
  if (rc == 0 && o.type) rc = ember__query_add(&q, "type", o.type);
  if (rc == 0) rc = ember__query_add(&q, "format", format);
  if (rc == 0 && o.limit) rc = ember__query_add(&q, "limit", o.limit);
  if (rc == 0 && o.max_nodes) rc = ember__query_add(&q, "max_nodes", o.max_nodes);
  if (rc != 0) {
    fprintf(stderr, "ember query: %s\n", ember_strerror(rc));
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = fetch(cmd, &o, path, &q, MAX_PROFILE_BODY, &body);
  if (st != 0) goto cleanup;
  bool empty = false;
  const ember_buf_t *result = &body;
  if (strcmp(format, "top") == 0) {
    st = render_top(cmd, &body, &o, &r, &out, &empty);
    if (st != 0) goto cleanup;
    result = &out;
  } else {
    empty = profile_empty(format, &body);
  }
  /* Even an empty result is written: -o then always leaves a valid file
   * for whatever reads it next, and exit status 3 says it is empty. */
  if (to_stdout) {
    if (print_out(result) != 0) {
      fprintf(stderr, "ember query: cannot write to stdout: %s\n", strerror(errno));
      st = EXIT_FAILED;
      goto cleanup;
    }
  } else {
    rc = write_atomic(o.out, result->data ? result->data : "", result->len);
    if (rc != 0) {
      fprintf(stderr, "ember query: cannot write %s: %s\n", o.out, ember_strerror(rc));
      st = EXIT_FAILED;
      goto cleanup;
    }
    fprintf(stderr, "wrote %zu bytes to %s\n", result->len, o.out);
  }
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
