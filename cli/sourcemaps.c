/* ember sourcemaps: source maps kept by the collector (docs/api.md,
 * "Source maps"), for bundles whose maps are not on the servers.
 *
 *   ember sourcemaps upload --worker W [--version V] [--script S] FILE
 *                                        POST /api/v1/sourcemaps
 *   ember sourcemaps [list] [--worker W] [--json]
 *                                        GET /api/v1/sourcemaps as a table
 *   ember sourcemaps delete --worker W [--version V] --script S
 *                                        DELETE /api/v1/sourcemaps
 *
 * --script defaults to the map's own "file" field, else FILE without its
 * ".map": the bundle's name, which the collector matches against the tail
 * of each frame's script path. Not thread-safe (one command runs); errors
 * are exit statuses (cli.h) after a sentence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ember/buf.h"
#include "ember/sourcemap.h"
#include "cli.h"
#include "client.h"
#include "common.h"

const char ember__usage_sourcemaps[] =
    "       ember sourcemaps upload --worker W [--version V] [--script S] FILE.map\n"
    "       ember sourcemaps [list] [--worker W] [--json]\n"
    "       ember sourcemaps delete --worker W [--version V] --script S\n";

const char ember__usage_sourcemaps_notes[] =
    "  sourcemaps upload: keeps FILE.map on the collector for worker W at version\n"
    "  V (none: every version without a map of its own), so JavaScript frames of script\n"
    "  S (a path, or its tail: app.js; default the map's \"file\", else FILE without\n"
    "  .map) get their authors' names when profiles are read. The server refuses a\n"
    "  map it cannot decode (exit 2, with the reason). sourcemaps also take\n"
    "  --server URL and --token T, as query does.\n";

enum { CMD_LIST = 1u, CMD_UPLOAD = 2u, CMD_DELETE = 4u, CMD_ALL = 7u };

typedef struct sopts {
  const char *server, *token, *json, *worker, *version, *script;
} sopts_t;

#define F(name, alias, cmds, field, b)                                                             \
  { name, alias, cmds, offsetof(sopts_t, field), b }
static const ember__flag_t flags[] = {
    F("--server", NULL, CMD_ALL, server, false),
    F("--token", NULL, CMD_ALL, token, false),
    F("--json", NULL, CMD_LIST, json, true),
    F("--worker", "-w", CMD_ALL, worker, false),
    F("--version", NULL, CMD_UPLOAD | CMD_DELETE, version, false),
    F("--script", NULL, CMD_UPLOAD | CMD_DELETE, script, false),
};
#undef F
#define NFLAGS (sizeof flags / sizeof flags[0])

static void print_usage(void) {
  printf("usage:\n%s\n%s", ember__usage_sourcemaps, ember__usage_sourcemaps_notes);
}

/* worker, version (when given) and script as a query string. */
static int map_query(const sopts_t *o, const char *script, ember_buf_t *q) {
  int rc = ember__query_add(q, "worker", o->worker);
  if (rc == 0 && o->version != NULL) rc = ember__query_add(q, "version", o->version);
  if (rc == 0) rc = ember__query_add(q, "script", script);
  return rc;
}

/* The script a map is for when --script is not given: its "file", else
 * the map's file name without ".map". Written into buf. */
static void default_script(const ember_buf_t *map, const char *path, char *buf, size_t size) {
  json_t *doc = json_loadb(map->data, map->len, 0, NULL);
  const char *file = json_string_value(json_object_get(doc, "file"));
  if (file != NULL && file[0] != '\0') {
    snprintf(buf, size, "%s", file);
  } else {
    const char *base = strrchr(path, '/');
    snprintf(buf, size, "%s", base ? base + 1 : path);
    size_t n = strlen(buf);
    if (n > 4 && strcmp(buf + n - 4, ".map") == 0) buf[n - 4] = '\0';
  }
  json_decref(doc);
}

static int cmd_upload(const char *cmd, const sopts_t *o, const char *file) {
  static const char path[] = "/api/v1/sourcemaps";
  if (o->worker == NULL) {
    fprintf(stderr, "ember %s: --worker is needed: whose frames the map names\n", cmd);
    return EXIT_USAGE;
  }
  ember_buf_t map, body, q;
  ember_buf_init(&map, EMBER_SOURCEMAP_MAX_BYTES);
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&q, 16384);
  ember__client_t *c = NULL;
  json_t *doc = NULL;
  char err[1024] = "", script[1024];
  long status = 0;
  int st = 0;
  int rc = ember__read_input(file, &map, NULL);
  if (rc == EMBER_ETOOBIG) {
    fprintf(stderr, "ember %s: %s is larger than %llu MiB, more than any map is read\n", cmd, file,
            (unsigned long long)(EMBER_SOURCEMAP_MAX_BYTES >> 20));
    st = EXIT_USAGE;
    goto cleanup;
  }
  if (rc != 0 || map.len == 0) {
    fprintf(stderr, "ember %s: cannot read %s: %s\n", cmd, file,
            rc ? ember_strerror(rc) : "it is empty");
    st = EXIT_FAILED;
    goto cleanup;
  }
  if (o->script != NULL) {
    snprintf(script, sizeof script, "%s", o->script);
  } else {
    default_script(&map, file, script, sizeof script);
  }
  if (map_query(o, script, &q) != 0) {
    fprintf(stderr, "ember %s: the worker, version or script is too long\n", cmd);
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = ember__open_client(cmd, o->server, o->token, &c);
  if (st != 0) goto cleanup;
  rc = ember__client_post_data(c, path, q.data, map.data, map.len, EMBER__MAX_JSON_BODY, &status,
                               &body, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, err[0] ? err : ember_strerror(rc));
    st = EXIT_FAILED;
    goto cleanup;
  }
  st = ember__status_exit(cmd, c, path, status, &body);
  if (st != 0) goto cleanup;
  doc = json_loadb(body.data, body.len, 0, NULL);
  const json_t *seg = json_object_get(doc, "segments");
  printf("uploaded the source map of %s for %s %s: %zu bytes, %lld segments\n", script, o->worker,
         o->version ? o->version : "(any version)", map.len,
         json_is_integer(seg) ? (long long)json_integer_value(seg) : -1LL);
cleanup:
  json_decref(doc);
  ember__client_free(c);
  ember_buf_free(&map);
  ember_buf_free(&body);
  ember_buf_free(&q);
  return st;
}

static int cmd_delete(const char *cmd, const sopts_t *o) {
  static const char path[] = "/api/v1/sourcemaps";
  if (o->worker == NULL || o->script == NULL) {
    fprintf(stderr,
            "ember %s: --worker and --script name the map (`ember sourcemaps` lists them)\n", cmd);
    return EXIT_USAGE;
  }
  ember_buf_t body, q;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&q, 16384);
  ember__client_t *c = NULL;
  long status = 0;
  int st = map_query(o, o->script, &q) != 0 ? EXIT_USAGE : 0;
  if (st != 0) fprintf(stderr, "ember %s: the worker, version or script is too long\n", cmd);
  if (st == 0) st = ember__open_client(cmd, o->server, o->token, &c);
  if (st == 0) st = ember__request(cmd, c, "DELETE", path, q.data, NULL, &body, &status);
  if (st == 0 && status == 404 && !ember__no_such_path(&body)) {
    char msg[1024];
    ember__client_message(&body, msg, sizeof msg);
    fprintf(stderr, "ember %s: %s; `ember sourcemaps` lists them\n", cmd, msg);
    st = EXIT_USAGE;
  }
  if (st == 0) st = ember__status_exit(cmd, c, path, status, &body);
  if (st == 0)
    printf("deleted the source map of %s for %s %s\n", o->script, o->worker,
           o->version ? o->version : "(any version)");
  ember__client_free(c);
  ember_buf_free(&body);
  ember_buf_free(&q);
  return st;
}

static int list_table(const json_t *list, const void *ctx, ember_buf_t *out) {
  (void)ctx;
  static const bool right[5] = {false, false, false, true, true};
  ember__table_t t = {.ncols = 5, .right = right};
  const char *hdr[] = {"WORKER", "VERSION", "SCRIPT", "BYTES", "UPLOADED"};
  int rc = 0;
  for (size_t i = 0; i < 5 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(list) && rc == 0; i++) {
    const json_t *m = json_array_get(list, i);
    const char *s[3] = {json_string_value(json_object_get(m, "worker")),
                        json_string_value(json_object_get(m, "version")),
                        json_string_value(json_object_get(m, "script"))};
    for (size_t k = 0; k < 3 && rc == 0; k++)
      rc = ember__table_add(&t, s[k] == NULL ? "?" : s[k][0] || k != 1 ? s[k] : "-");
    char bytes[32], when[64];
    snprintf(bytes, sizeof bytes, "%lld", (long long)ember__json_i64(json_object_get(m, "bytes")));
    ember__fmt_local_ms(ember__json_i64(json_object_get(m, "uploaded_ms")), when, sizeof when);
    if (rc == 0) rc = ember__table_add(&t, bytes);
    if (rc == 0) rc = ember__table_add(&t, when);
  }
  if (rc == 0) rc = ember__table_render(&t, out);
  ember__table_free(&t);
  return rc;
}

static int cmd_list(const char *cmd, const sopts_t *o) {
  ember_buf_t q;
  ember_buf_init(&q, 16384);
  int st = 0;
  if (o->worker != NULL && ember__query_add(&q, "worker", o->worker) != 0) {
    fprintf(stderr, "ember %s: --worker is too long\n", cmd);
    st = EXIT_USAGE;
  }
  char empty[600];
  snprintf(empty, sizeof empty,
           "the server keeps no source maps%s%.256s; upload one with `ember sourcemaps upload`",
           o->worker ? " of " : "", o->worker ? o->worker : "");
  if (st == 0)
    st = ember__list_command(cmd, o->server, o->token, "/api/v1/sourcemaps", q.data, "sourcemaps",
                             o->json != NULL, list_table, NULL, empty);
  ember_buf_free(&q);
  return st;
}

int ember__cmd_sourcemaps(int argc, char **argv) {
  sopts_t o = {0};
  const char *sub = argc > 0 && argv[0][0] != '-' ? argv[0] : "list";
  if (argc > 0 && argv[0][0] != '-') {
    argc--;
    argv++;
  }
  int st;
  if (strcmp(sub, "upload") == 0) {
    static const char cmd[] = "sourcemaps upload";
    const char *file = NULL;
    st = ember__parse_flags_pos(cmd, CMD_UPLOAD, flags, NFLAGS, argc, argv, &o, "map file", &file);
    if (st < 0) print_usage();
    return st < 0 ? 0 : st != 0 ? st : cmd_upload(cmd, &o, file);
  }
  if (strcmp(sub, "delete") == 0) {
    static const char cmd[] = "sourcemaps delete";
    st = ember__parse_flags(cmd, CMD_DELETE, flags, NFLAGS, argc, argv, &o);
    if (st < 0) print_usage();
    return st < 0 ? 0 : st != 0 ? st : cmd_delete(cmd, &o);
  }
  if (strcmp(sub, "list") == 0) {
    static const char cmd[] = "sourcemaps";
    st = ember__parse_flags(cmd, CMD_LIST, flags, NFLAGS, argc, argv, &o);
    if (st < 0) print_usage();
    return st < 0 ? 0 : st != 0 ? st : cmd_list(cmd, &o);
  }
  fprintf(stderr,
          "ember sourcemaps: unknown subcommand '%s' (list, upload, delete; see `ember help`)\n",
          sub);
  return EXIT_USAGE;
}
