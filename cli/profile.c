/* ember profile: an on-demand session (docs/api.md, "Sessions"). POST the
 * request, poll the session every 250 ms showing its progress, then fetch
 * the merged result and write it as `ember query` writes its own. Ctrl-C
 * cancels the session on the server: a session left running would keep
 * every matching process sampled at a high rate for nothing.
 *
 * ember sessions: the server's sessions as a table. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ember/buf.h"
#include "ember/parse.h"
#include "cli.h"
#include "client.h"
#include "common.h"

#define POLL_MS             250
#define DEFAULT_DURATION_MS 5000
#define DEFAULT_HZ          1000
#define MAX_DURATION_MS     (24LL * 3600 * 1000) /* the server has its own, lower cap */
#define MAX_HZ              100000
#define MAX_INSTANCES       100000
/* Polls that may fail in a row (a restarting server, a dropped connection)
 * before giving up on a session that still runs there. */
#define MAX_POLL_FAILURES 4
/* How long after its planned end a session may stay unfinished before the
 * CLI stops waiting; the server expires sessions long before this. */
#define FINISH_GRACE_MS 120000

const char ember__usage_profile[] =
    "       ember profile --worker W | --actor A [--version V] [--host H] [--instances N]\n"
    "                     [--type cpu|memory] [--duration 5s] [--hz 1000]\n"
    "                     [--format top|pprof|folded|speedscope|tree] [-o FILE]\n"
    "       ember sessions [--json]\n";

const char ember__usage_profile_notes[] =
    "  profile: samples the matching processes now, for --duration (ms, or with a\n"
    "  unit: 500ms, 5s, 1m; default 5000) at --hz (default 1000), shows progress on\n"
    "  stderr, then writes the merged result as query does. Ctrl-C cancels the\n"
    "  session on the server (exit 130). A worker or actor the server does not know\n"
    "  is a bad argument (exit 2); a failed or expired session is exit 1.\n"
    "  Both commands also take --server URL (default $EMBER_SERVER, else\n"
    "  http://127.0.0.1:7272) and --token T (default $EMBER_TOKEN).\n";

enum { CMD_PROFILE = 1u, CMD_SESSIONS = 2u, CMD_ALL = 3u };

typedef struct popts {
  const char *server, *token;
  const char *worker, *version, *actor, *host, *instances;
  const char *type, *duration, *hz, *format, *out;
  const char *json;
} popts_t;

#define F(name, alias, cmds, field, b)                                                             \
  { name, alias, cmds, offsetof(popts_t, field), b }
static const ember__flag_t flags[] = {
    F("--server", NULL, CMD_ALL, server, false),
    F("--token", NULL, CMD_ALL, token, false),
    F("--worker", "-w", CMD_PROFILE, worker, false),
    F("--version", NULL, CMD_PROFILE, version, false),
    F("--actor", NULL, CMD_PROFILE, actor, false),
    F("--host", NULL, CMD_PROFILE, host, false),
    F("--instances", NULL, CMD_PROFILE, instances, false),
    F("--type", "-t", CMD_PROFILE, type, false),
    F("--duration", "-d", CMD_PROFILE, duration, false),
    F("--hz", NULL, CMD_PROFILE, hz, false),
    F("--format", "-f", CMD_PROFILE, format, false),
    F("--output", "-o", CMD_PROFILE, out, false),
    F("--json", NULL, CMD_SESSIONS, json, true),
};
#undef F

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep, but wake at once for Ctrl-C (the handler has no SA_RESTART). */
static void nap_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
  while (!interrupted && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Session ids go into URL paths unencoded: accept only what needs no
 * encoding, so a server cannot steer the next request elsewhere. */
static bool id_ok(const char *id) {
  size_t n = 0;
  for (; id[n] != '\0'; n++) {
    char ch = id[n];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.';
    if (!ok) return false;
  }
  return n > 0 && n <= 128;
}

static bool terminal_state(const char *s) {
  return strcmp(s, "done") == 0 || strcmp(s, "failed") == 0 || strcmp(s, "expired") == 0 ||
         strcmp(s, "cancelled") == 0;
}

static void fmt_secs(int64_t ms, char *buf, size_t size) {
  snprintf(buf, size, "%" PRId64 ".%" PRId64 "s", ms / 1000, ms % 1000 / 100);
}

/* ---- progress on stderr ---- */

typedef struct progress {
  bool tty;
  size_t last_len; /* of the line on screen, to blank what a shorter one leaves */
  char state[16];  /* the last state shown */
} progress_t;

static void progress_show(progress_t *p, const char *id, const char *state, int64_t targets,
                          int64_t samples, int64_t elapsed_ms, int64_t duration_ms) {
  char el[32], du[32];
  fmt_secs(elapsed_ms < duration_ms ? elapsed_ms : duration_ms, el, sizeof el);
  fmt_secs(duration_ms, du, sizeof du);
  if (p->tty) {
    char line[256];
    int n = snprintf(line, sizeof line,
                     "session %s: %" PRId64 " targets, %s/%s, %" PRId64 " samples, %s", id, targets,
                     el, du, samples, state);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    fprintf(stderr, "\r%s%*s", line, p->last_len > len ? (int)(p->last_len - len) : 0, "");
    p->last_len = len;
  } else if (strcmp(p->state, state) != 0) {
    fprintf(stderr, "session %s: %s, %" PRId64 " targets, %" PRId64 " samples, %s/%s\n", id, state,
            targets, samples, el, du);
  }
  fflush(stderr);
  snprintf(p->state, sizeof p->state, "%s", state);
}

static void progress_end(progress_t *p) {
  if (p->tty && p->last_len > 0) fputc('\n', stderr);
  p->last_len = 0;
}

/* ---- the session's answers ---- */

typedef struct status {
  json_t *doc;
  const char *state;
  int64_t targets, samples;
} status_t;

/* Parse a GET /api/v1/sessions/ID answer; the strings live in s->doc. */
static int parse_status(const char *path, const ember_buf_t *body, status_t *s) {
  json_decref(s->doc);
  s->doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  s->state = json_string_value(json_object_get(s->doc, "state"));
  if (s->state == NULL) return ember__malformed("profile", path, "no \"state\"");
  s->targets = ember__json_i64(json_object_get(s->doc, "targets"));
  s->samples = ember__json_i64(json_object_get(s->doc, "samples"));
  return 0;
}

/* Why a session did not finish: each host's state and message. */
static void print_hosts(const json_t *doc) {
  const json_t *hosts = json_object_get(doc, "hosts");
  if (json_array_size(hosts) == 0) return;
  static const bool right[5] = {false, false, true, true, false};
  ember__table_t t = {.ncols = 5, .right = right};
  ember_buf_t out;
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  const char *hdr[] = {"HOST", "STATE", "TARGETS", "SAMPLES", "MESSAGE"};
  int rc = 0;
  for (size_t i = 0; i < 5 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(hosts) && rc == 0; i++) {
    const json_t *h = json_array_get(hosts, i);
    const char *name = json_string_value(json_object_get(h, "host"));
    const char *state = json_string_value(json_object_get(h, "state"));
    const char *msg = json_string_value(json_object_get(h, "message"));
    char tg[24], sm[24];
    snprintf(tg, sizeof tg, "%" PRId64, ember__json_i64(json_object_get(h, "targets")));
    snprintf(sm, sizeof sm, "%" PRId64, ember__json_i64(json_object_get(h, "samples")));
    rc = ember__table_add(&t, name ? name : "?");
    if (rc == 0) rc = ember__table_add(&t, state ? state : "?");
    if (rc == 0) rc = ember__table_add(&t, tg);
    if (rc == 0) rc = ember__table_add(&t, sm);
    if (rc == 0) rc = ember__table_add(&t, msg && msg[0] ? msg : "-");
  }
  if (rc == 0) rc = ember__table_render(&t, &out);
  if (rc == 0) fputs(out.data, stderr);
  ember__table_free(&t);
  ember_buf_free(&out);
}

/* ---- ember profile ---- */

typedef struct request {
  const char *format;
  bool to_stdout;
  int64_t duration_ms;
  char *json; /* the POST body, from json_dumps: free() it */
} request_t;

static int check_args(const char *cmd, const popts_t *o, request_t *req) {
  if ((o->worker == NULL || o->worker[0] == '\0') && (o->actor == NULL || o->actor[0] == '\0')) {
    fprintf(stderr,
            "ember %s: --worker W or --actor A is required (`ember workers` and `ember "
            "actors` list them)\n",
            cmd);
    return EXIT_USAGE;
  }
  const char *type = o->type ? o->type : "cpu";
  if (strcmp(type, "cpu") != 0 && strcmp(type, "memory") != 0) {
    fprintf(stderr, "ember %s: --type '%s': expected cpu or memory\n", cmd, type);
    return EXIT_USAGE;
  }
  int64_t ns = (int64_t)DEFAULT_DURATION_MS * 1000000;
  if (o->duration != NULL &&
      (ember_parse_duration_ns(o->duration, 1000000, &ns) != 0 || ns % 1000000 != 0 ||
       ns < 1000000 || ns / 1000000 > MAX_DURATION_MS)) {
    fprintf(stderr,
            "ember %s: --duration '%s': expected whole milliseconds (5000) or a number with a "
            "unit (500ms, 5s, 1m), from 1ms to 24h\n",
            cmd, o->duration);
    return EXIT_USAGE;
  }
  req->duration_ms = ns / 1000000;
  uint64_t hz = DEFAULT_HZ, instances = 0;
  if (o->hz != NULL && ember_parse_u64(o->hz, 1, MAX_HZ, &hz) != 0) {
    fprintf(stderr, "ember %s: --hz '%s': expected a rate from 1 to %d samples per second\n", cmd,
            o->hz, MAX_HZ);
    return EXIT_USAGE;
  }
  if (o->instances != NULL && ember_parse_u64(o->instances, 1, MAX_INSTANCES, &instances) != 0) {
    fprintf(stderr, "ember %s: --instances '%s': expected a number of processes from 1 to %d\n",
            cmd, o->instances, MAX_INSTANCES);
    return EXIT_USAGE;
  }
  int st = ember__pick_format(cmd, o->format, o->out, &req->format, &req->to_stdout);
  if (st != 0) return st;
  json_t *body = json_object();
  int bad = body == NULL;
  const char *keys[] = {"worker", "version", "actor", "host"};
  const char *vals[] = {o->worker, o->version, o->actor, o->host};
  for (size_t i = 0; i < 4 && !bad; i++) {
    if (vals[i] != NULL) bad |= json_object_set_new(body, keys[i], json_string(vals[i]));
  }
  if (!bad && o->instances != NULL)
    bad |= json_object_set_new(body, "instances", json_integer((json_int_t)instances));
  if (!bad) bad |= json_object_set_new(body, "type", json_string(type));
  if (!bad) bad |= json_object_set_new(body, "duration_ms", json_integer(req->duration_ms));
  if (!bad) bad |= json_object_set_new(body, "hz", json_integer((json_int_t)hz));
  if (!bad) req->json = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (req->json == NULL) {
    /* json_string() refuses text that is not UTF-8. */
    fprintf(stderr, "ember %s: cannot encode the request (are the names valid UTF-8?)\n", cmd);
    return EXIT_USAGE;
  }
  return 0;
}

/* POST /api/v1/sessions; *id (in *doc) on success, else an exit status. */
static int start_session(const char *cmd, ember__client_t *c, const request_t *req, json_t **doc,
                         const char **id) {
  static const char path[] = "/api/v1/sessions";
  ember_buf_t body;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  char err[1024] = "", msg[1024];
  long status = 0;
  int st = EXIT_FAILED;
  int rc =
      ember__client_post(c, path, req->json, EMBER__MAX_JSON_BODY, &status, &body, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, err);
    goto cleanup;
  }
  ember__client_message(&body, msg, sizeof msg);
  if (status == 404 && strncmp(msg, "no such path", 12) == 0) {
    /* The API's answer for a path it does not serve: an older server. */
    fprintf(stderr,
            "ember %s: the server at %s has no %s (HTTP 404); it predates on-demand sessions\n",
            cmd, ember__client_server(c), path);
    goto cleanup;
  }
  if (status == 404 || status == 400) {
    /* Nothing matched the selector, or the request broke a server rule (a
     * duration over its cap): either way the arguments must change. */
    fprintf(stderr, "ember %s: the server refused the session: %s\n", cmd,
            msg[0] ? msg : "(no reason given)");
    if (status == 404)
      fprintf(stderr, "ember %s: `ember workers` and `ember actors` list what it knows\n", cmd);
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = ember__client_status_exit(c, path, status, &body, err, sizeof err);
  if (st != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, err);
    goto cleanup;
  }
  *doc = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
  *id = json_string_value(json_object_get(*doc, "id"));
  if (*id == NULL || !id_ok(*id)) st = ember__malformed(cmd, path, "no usable session \"id\"");
cleanup:
  ember_buf_free(&body);
  return st;
}

static int cancel_session(const char *cmd, ember__client_t *c, const char *id) {
  char path[192], err[1024] = "";
  snprintf(path, sizeof path, "/api/v1/sessions/%s/cancel", id);
  ember_buf_t body;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  long status = 0;
  int rc = ember__client_post(c, path, "{}", EMBER__MAX_JSON_BODY, &status, &body, err, sizeof err);
  if (rc == 0 && ember__client_status_exit(c, path, status, &body, err, sizeof err) != 0) rc = -1;
  if (rc == 0)
    fprintf(stderr, "ember %s: interrupted; cancelled session %s\n", cmd, id);
  else
    fprintf(stderr, "ember %s: interrupted, but cancelling session %s failed: %s\n", cmd, id, err);
  ember_buf_free(&body);
  return EXIT_CANCELLED;
}

/* Poll until the session ends (or Ctrl-C). Returns 0 with s filled, or an
 * exit status after a message. */
static int wait_session(const char *cmd, ember__client_t *c, const char *id, const request_t *req,
                        status_t *s) {
  char path[160], err[1024] = "";
  snprintf(path, sizeof path, "/api/v1/sessions/%s", id);
  progress_t p = {.tty = isatty(STDERR_FILENO) == 1};
  ember_buf_t body;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  int64_t start = mono_ms();
  int failures = 0, st = 0;
  while (!interrupted) {
    nap_ms(POLL_MS);
    if (interrupted) break;
    ember_buf_reset(&body);
    long status = 0;
    int rc =
        ember__client_get(c, path, NULL, EMBER__MAX_JSON_BODY, &status, &body, err, sizeof err);
    if (rc != 0) {
      if (++failures < MAX_POLL_FAILURES) continue;
      progress_end(&p);
      fprintf(stderr, "ember %s: %s; session %s may still be running there\n", cmd, err, id);
      st = EXIT_FAILED;
      break;
    }
    failures = 0;
    st = ember__client_status_exit(c, path, status, &body, err, sizeof err);
    if (st != 0) {
      progress_end(&p);
      fprintf(stderr, "ember %s: %s\n", cmd, err);
      break;
    }
    st = parse_status(path, &body, s);
    if (st != 0) break;
    int64_t elapsed = mono_ms() - start;
    char state[16];
    /* Shown on the terminal: keep it short and free of control bytes. */
    snprintf(state, sizeof state, "%s", s->state);
    for (char *q = state; *q; q++) *q = (*q < 0x20 || *q == 0x7f) ? '?' : *q;
    progress_show(&p, id, state, s->targets, s->samples, elapsed, req->duration_ms);
    if (terminal_state(s->state)) break;
    if (elapsed > req->duration_ms + FINISH_GRACE_MS) {
      progress_end(&p);
      fprintf(stderr,
              "ember %s: session %s is still '%s' %d s after its planned end; giving up "
              "(`ember sessions` shows it)\n",
              cmd, id, state, FINISH_GRACE_MS / 1000);
      st = EXIT_FAILED;
      break;
    }
  }
  progress_end(&p);
  ember_buf_free(&body);
  return st;
}

static int fetch_result(const char *cmd, ember__client_t *c, const char *id, const popts_t *o,
                        const request_t *req, const status_t *s) {
  char path[192], err[1024] = "";
  snprintf(path, sizeof path, "/api/v1/sessions/%s/profile", id);
  ember_buf_t q, body, out;
  ember_buf_init(&q, 256);
  ember_buf_init(&body, EMBER__MAX_PROFILE_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  long status = 0;
  int st = EXIT_FAILED;
  int rc = ember__query_add(&q, "format", req->format);
  if (rc == 0)
    rc = ember__client_get(c, path, q.data, EMBER__MAX_PROFILE_BODY, &status, &body, err,
                           sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s (session %s is done; its result stays on the server)\n", cmd,
            err[0] ? err : ember_strerror(rc), id);
    goto cleanup;
  }
  st = ember__client_status_exit(c, path, status, &body, err, sizeof err);
  if (st != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, err);
    goto cleanup;
  }
  bool empty = s->samples == 0;
  const ember_buf_t *result = &body;
  if (strcmp(req->format, "top") == 0) {
    char context[512];
    snprintf(context, sizeof context, "session %s, %s %s", id, o->worker ? "worker" : "actor",
             o->worker ? o->worker : o->actor);
    bool top_empty = false;
    st = ember__render_top(cmd, path, &body, context, &out, &top_empty);
    if (st != 0) goto cleanup;
    empty |= top_empty;
    result = &out;
  } else {
    empty |= ember__profile_empty(req->format, &body);
  }
  /* As with query, an empty result is still written, so -o always leaves
   * a valid file; the exit status says it is empty. */
  st = ember__write_result(cmd, result, o->out, req->to_stdout);
  if (st == 0 && empty) {
    fprintf(stderr,
            "ember %s: session %s finished with no samples from its %" PRId64 " targets (were "
            "they idle%s?)\n",
            cmd, id, s->targets, s->targets == 0 ? ", or gone" : "");
    st = EXIT_EMPTY;
  }
cleanup:
  ember_buf_free(&q);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}

static void print_usage(void) {
  printf("usage:\n%s\n%s", ember__usage_profile, ember__usage_profile_notes);
}

int ember__cmd_profile(int argc, char **argv) {
  static const char cmd[] = "profile";
  popts_t o = {0};
  int st =
      ember__parse_flags(cmd, CMD_PROFILE, flags, sizeof flags / sizeof flags[0], argc, argv, &o);
  if (st < 0) {
    print_usage();
    return 0;
  }
  if (st != 0) return st;
  request_t req = {0};
  ember__client_t *c = NULL;
  json_t *started = NULL;
  status_t s = {0};
  /* glibc's SA_RESETHAND is 0x80000000u, for an int field. */
  struct sigaction old, sa = {.sa_handler = on_sigint, .sa_flags = (int)SA_RESETHAND};
  bool handler = false;
  const char *id = NULL;
  st = check_args(cmd, &o, &req);
  if (st != 0) goto cleanup;
  st = ember__open_client(cmd, o.server, o.token, &c);
  if (st != 0) goto cleanup;
  /* From here on Ctrl-C must reach the server as a cancel. SA_RESETHAND:
   * a second Ctrl-C kills at once, should the cancel itself hang. */
  sigemptyset(&sa.sa_mask);
  interrupted = 0;
  handler = sigaction(SIGINT, &sa, &old) == 0;
  st = start_session(cmd, c, &req, &started, &id);
  if (st != 0) goto cleanup;
  if (!interrupted) {
    char du[32];
    fmt_secs(req.duration_ms, du, sizeof du);
    fprintf(stderr, "session %s: profiling %s %s for %s\n", id, o.worker ? "worker" : "actor",
            o.worker ? o.worker : o.actor, du);
    st = wait_session(cmd, c, id, &req, &s);
  }
  if (interrupted) {
    st = cancel_session(cmd, c, id);
    goto cleanup;
  }
  if (st != 0) goto cleanup;
  /* The session is over: Ctrl-C now just stops the download. */
  if (handler) sigaction(SIGINT, &old, NULL);
  handler = false;
  if (strcmp(s.state, "done") == 0) {
    st = fetch_result(cmd, c, id, &o, &req, &s);
  } else {
    fprintf(stderr, "ember %s: session %s %s%s\n", cmd, id, s.state,
            strcmp(s.state, "expired") == 0 ? " (no result in time)" : "");
    print_hosts(s.doc);
    st = EXIT_FAILED;
  }
cleanup:
  if (handler) sigaction(SIGINT, &old, NULL);
  json_decref(s.doc);
  json_decref(started);
  ember__client_free(c);
  free(req.json);
  return st;
}

/* ---- ember sessions ---- */

int ember__cmd_sessions(int argc, char **argv) {
  static const char cmd[] = "sessions", path[] = "/api/v1/sessions";
  popts_t o = {0};
  int st =
      ember__parse_flags(cmd, CMD_SESSIONS, flags, sizeof flags / sizeof flags[0], argc, argv, &o);
  if (st < 0) {
    print_usage();
    return 0;
  }
  if (st != 0) return st;
  ember__client_t *c = NULL;
  ember_buf_t body, out;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  static const bool right[6] = {false, false, false, true, true, true};
  ember__table_t t = {.ncols = 6, .right = right};
  json_t *doc = NULL;
  const json_t *list = NULL;
  int rc = 0;
  st = ember__open_client(cmd, o.server, o.token, &c);
  if (st == 0) st = ember__get_list(cmd, c, path, NULL, "sessions", &body, &doc, &list);
  if (st != 0) goto cleanup;
  if (json_array_size(list) == 0) {
    fprintf(stderr, "ember %s: the server has no sessions; start one with `ember profile`\n", cmd);
    st = EXIT_EMPTY;
    goto cleanup;
  }
  if (o.json != NULL) {
    st = ember__print_out(&body);
    goto cleanup;
  }
  const char *hdr[] = {"ID", "STATE", "TARGET", "TARGETS", "SAMPLES", "PROGRESS"};
  for (size_t i = 0; i < 6 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(list) && rc == 0; i++) {
    const json_t *e = json_array_get(list, i);
    const char *id = json_string_value(json_object_get(e, "id"));
    const char *state = json_string_value(json_object_get(e, "state"));
    const char *worker = json_string_value(json_object_get(e, "worker"));
    const char *actor = json_string_value(json_object_get(e, "actor"));
    char target[512], tg[24], sm[24], pr[16] = "-";
    snprintf(target, sizeof target, "%s%s%s", worker ? worker : "", worker && actor ? "/" : "",
             actor ? actor : "");
    snprintf(tg, sizeof tg, "%" PRId64, ember__json_i64(json_object_get(e, "targets")));
    snprintf(sm, sizeof sm, "%" PRId64, ember__json_i64(json_object_get(e, "samples")));
    const json_t *pj = json_object_get(e, "progress");
    if (json_is_number(pj)) snprintf(pr, sizeof pr, "%.0f%%", 100.0 * json_number_value(pj));
    rc = ember__table_add(&t, id ? id : "?");
    if (rc == 0) rc = ember__table_add(&t, state ? state : "?");
    if (rc == 0) rc = ember__table_add(&t, target[0] ? target : "-");
    if (rc == 0) rc = ember__table_add(&t, tg);
    if (rc == 0) rc = ember__table_add(&t, sm);
    if (rc == 0) rc = ember__table_add(&t, pr);
  }
  if (rc == 0) rc = ember__table_render(&t, &out);
  st = rc == 0 ? ember__print_out(&out) : EXIT_FAILED;
  if (rc != 0) fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
cleanup:
  json_decref(doc);
  ember__table_free(&t);
  ember__client_free(c);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}
