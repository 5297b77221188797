/* What the commands that are clients of the HTTP API share: their flag
 * parser, opening the client from --server/--token or the environment,
 * choosing an output format, and writing a result (the top table, -o
 * files written atomically, the "is it empty" test behind exit status 3).
 * Internal to the ember command; not thread-safe (one command runs). */
#ifndef EMBER_CLI_COMMON_H
#define EMBER_CLI_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ember/buf.h"
#include "client.h"

/* Largest answers accepted: listings are small, profiles may be large. */
#define EMBER__MAX_JSON_BODY    ((size_t)64 << 20)
#define EMBER__MAX_PROFILE_BODY ((size_t)1 << 30)

/* One option: `--name VALUE`, `--name=VALUE` or `alias VALUE`, stored as a
 * const char * at byte offset `off` of the caller's options struct (or
 * "1" for a bool flag). `cmds` is a bit set of the commands that take it. */
typedef struct ember__flag {
  const char *name;
  const char *alias;
  unsigned cmds;
  size_t off;
  bool is_bool;
} ember__flag_t;

/* Parse argv into `opts` (strings borrowed from argv) for the command whose
 * bit is `bit`. Returns 0, EXIT_USAGE after a message naming the problem,
 * or -1 for --help / -h. */
int ember__parse_flags(const char *cmd, unsigned bit, const ember__flag_t *flags, size_t nflags,
                       int argc, char **argv, void *opts);

/* As ember__parse_flags, for a command that also takes exactly one
 * positional argument (a name, an id) anywhere among its flags: *pos is
 * that argument (borrowed from argv). Missing or extra ones are usage
 * errors naming `what` ("rule name"). */
int ember__parse_flags_pos(const char *cmd, unsigned bit, const ember__flag_t *flags, size_t nflags,
                           int argc, char **argv, void *opts, const char *what, const char **pos);

/* Whether s is 1..max characters of [A-Za-z0-9_.-], not "." or "..": safe
 * in a URL path unencoded (rule names, alert and session ids). */
bool ember__name_ok(const char *s, size_t max);

/* Epoch milliseconds as local "YYYY-MM-DD HH:MM:SS", and as "5m ago"
 * relative to now_ms. */
void ember__fmt_local_ms(int64_t ms, char *buf, size_t size);
void ember__fmt_ago(int64_t now_ms, int64_t ms, char *buf, size_t size);

/* `flag` if given, else $env when set and not empty, else `def`. */
const char *ember__env_or(const char *flag, const char *env, const char *def);

/* A client of --server (else $EMBER_SERVER, else the default) with --token
 * (else $EMBER_TOKEN). Returns 0 with *out (free with ember__client_free),
 * or an exit status after a message. */
int ember__open_client(const char *cmd, const char *server, const char *token,
                       ember__client_t **out);

/* One request: method "GET" (with `query`, may be NULL), "POST" (with
 * `json`) or "DELETE" (with `query`) to `path`, the answer (at most EMBER__MAX_JSON_BODY)
 * appended to body and its status in *status. Returns 0 on any HTTP
 * answer, else EXIT_FAILED after a message. */
int ember__request(const char *cmd, ember__client_t *c, const char *method, const char *path,
                   const char *query, const char *json, ember_buf_t *body, long *status);

/* ember__client_status_exit with its sentence printed: 0 for 200/201/204,
 * else the exit status. */
int ember__status_exit(const char *cmd, ember__client_t *c, const char *path, long status,
                       const ember_buf_t *body);

/* GET `path` (with `query`, may be NULL) and find the array `key` in the
 * JSON object answered: 0 with *doc (the caller's to json_decref) and
 * *list borrowed from it, the raw answer in body; else an exit status
 * after a message (*doc may then still be set). */
int ember__get_list(const char *cmd, ember__client_t *c, const char *path, const char *query,
                    const char *key, ember_buf_t *body, json_t **doc, const json_t **list);

/* A list command (`ember rules`, `ember alerts`, `ember sourcemaps`): GET
 * `path` (with `query`, may be NULL), the array `key` of the answer
 * printed as the table `table` makes of it (ctx passed through), or the
 * answer itself when `json`; an empty list prints "ember CMD: `empty`" and
 * is EXIT_EMPTY. Returns the exit status. */
typedef int (*ember__list_table_fn)(const json_t *list, const void *ctx, ember_buf_t *out);
int ember__list_command(const char *cmd, const char *server, const char *token, const char *path,
                        const char *query, const char *key, bool json, ember__list_table_fn table,
                        const void *ctx, const char *empty);

/* Whether a 404's body is the API's answer for a path it does not serve
 * (an older server), rather than for a thing the path names. */
bool ember__no_such_path(const ember_buf_t *body);

/* Say the server's answer to `path` is not what was expected; EXIT_FAILED. */
int ember__malformed(const char *cmd, const char *path, const char *why);

/* The output format from --format or -o's name (default "top"), checked
 * against top|pprof|folded|speedscope|tree; pprof to a terminal is
 * refused. *format is a static string or `format_flag`; *to_stdout when
 * there is no -o (or it is "-"). Returns 0 or EXIT_USAGE after a message. */
int ember__pick_format(const char *cmd, const char *format_flag, const char *out_flag,
                       const char **format, bool *to_stdout);

/* The API's format=top JSON (`path` names where it came from) as a table:
 * a line "TYPE (UNIT), total T, CONTEXT", a blank line, then the functions.
 * *empty when nothing was sampled (then nothing is appended). Returns 0 or
 * an exit status after a message. */
int ember__render_top(const char *cmd, const char *path, const ember_buf_t *body,
                      const char *context, ember_buf_t *out, bool *empty);

/* Whether a profile in `format` (not top) holds no samples. */
bool ember__profile_empty(const char *format, const ember_buf_t *body);

/* Write `result` to stdout, or atomically to `out` (a temporary file in the
 * same directory, then a rename) saying "wrote N bytes to FILE". Returns 0
 * or EXIT_FAILED after a message. */
int ember__write_result(const char *cmd, const ember_buf_t *result, const char *out,
                        bool to_stdout);

/* Read the whole file `path` ("-" or NULL: stdin) into b, bounded by
 * b->max. Returns 0, or -errno / EMBER_ETOOBIG (b->max passed) without a
 * message: the callers' sentences differ. *opened (may be NULL) says
 * whether the file could be opened. */
int ember__read_input(const char *path, ember_buf_t *b, bool *opened);

/* Write b to stdout and flush: 0 or EXIT_FAILED. */
int ember__print_out(const ember_buf_t *b);

/* "1.50s", "2.00MiB" or a plain number, by the profile's unit. */
void ember__fmt_value(int64_t v, const char *unit, char *buf, size_t size);
/* A JSON number as int64 (0 for anything else). */
int64_t ember__json_i64(const json_t *v);

/* A text table of `ncols` columns (at most 8), filled row by row. Cells are
 * copied with control characters replaced by '?', so nothing a server sends
 * can drive the terminal. */
typedef struct ember__table {
  size_t ncols;
  const bool *right; /* per column: right-aligned */
  size_t n, cap;     /* cells */
  char **cells;
} ember__table_t;

int ember__table_add(ember__table_t *t, const char *s);
int ember__table_render(const ember__table_t *t, ember_buf_t *out);
void ember__table_free(ember__table_t *t);

#endif
