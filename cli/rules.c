/* ember rules: the collector's alert rules (docs/api.md, "Rules").
 *
 *   ember rules [list] [--json]     GET /api/v1/rules as a table
 *   ember rules add --name N ...    one rule from flags: POST /api/v1/rules
 *   ember rules add --file FILE     each [rule NAME] block of a rules file
 *                                   (the alerts.rules format), one POST each
 *   ember rules delete NAME         DELETE /api/v1/rules/NAME
 *
 * Flags are checked here, before any request, so a typo fails fast with a
 * sentence naming it (exit 2). A rules file is parsed only as far as
 * turning each block into the API's rule JSON (dotted names nest, the
 * numeric fields become numbers); the server judges the rest, and its
 * sentence is shown with the block's FILE:LINE. Not thread-safe (one
 * command runs); errors are exit statuses (cli.h) after a sentence. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ember/buf.h"
#include "ember/parse.h"
#include "cli.h"
#include "client.h"
#include "common.h"

const char ember__usage_rules[] =
    "       ember rules [list] [--json]\n"
    "       ember rules add --name N --worker W\n"
    "                       (--above CORES | --baseline FACTOR [--period D] [--floor CORES]\n"
    "                        | --function NAME --percent P)\n"
    "                       [--for D] [--resolve-for D] [--hysteresis H]\n"
    "                       [--group-by version|host|actor] [--version V] [--host H] [--actor A]\n"
    "                       [--capture cpu|alloc [--capture-duration MS] [--capture-hz HZ]\n"
    "                        [--capture-instances N] [--capture-cooldown D]\n"
    "                        [--capture-max-per-hour N]]\n"
    "                       [--webhook URL [--webhook-format alertmanager|json]]\n"
    "       ember rules add --file FILE\n"
    "       ember rules delete NAME\n";

const char ember__usage_rules_notes[] =
    "  rules add: fires when the worker's CPU (W: a name or a glob with '*') is\n"
    "  --above CORES, or --baseline FACTOR times its median over --period (default\n"
    "  1h, floor 0.1 cores), or when function NAME's self share passes --percent P,\n"
    "  for --for D (30s, 5m, 1h: a duration always takes a unit). --capture starts\n"
    "  a session on firing. --file FILE (or - for stdin) sends each [rule NAME]\n"
    "  block of a rules file (the alerts.rules format) and reports each; any\n"
    "  refused rule makes the exit status non-zero.\n"
    "  rules delete: an unknown rule, or one from the collector's rules file, is\n"
    "  exit 2. No rules at all is exit 3. alerts and rules also take --server URL\n"
    "  and --token T, as query does.\n";

enum { CMD_LIST = 1u, CMD_ADD = 2u, CMD_DELETE = 4u, CMD_ALL = 7u };

#define MAX_NAME        64
#define MAX_FILE_BYTES  ((size_t)4 << 20)
#define MAX_FILE_RULES  10000
#define MAX_DURATION_MS (24LL * 3600 * 1000)
#define MAX_HZ          100000
#define MAX_INSTANCES   100000

typedef struct ropts {
  const char *server, *token, *json, *file;
  /* the rule's fields, from `name` to `webhook_format` in this order */
  const char *name, *worker, *version, *host, *actor, *group_by;
  const char *above, *baseline, *period, *floor, *function, *percent;
  const char *for_, *resolve_for, *hysteresis;
  const char *capture, *capture_duration, *capture_hz, *capture_instances, *capture_cooldown,
      *capture_max_per_hour;
  const char *webhook, *webhook_format;
} ropts_t;

#define F(name, alias, cmds, field, b)                                                             \
  { name, alias, cmds, offsetof(ropts_t, field), b }
static const ember__flag_t flags[] = {
    F("--server", NULL, CMD_ALL, server, false),
    F("--token", NULL, CMD_ALL, token, false),
    F("--json", NULL, CMD_LIST, json, true),
    F("--file", "-f", CMD_ADD, file, false),
    F("--name", "-n", CMD_ADD, name, false),
    F("--worker", "-w", CMD_ADD, worker, false),
    F("--version", NULL, CMD_ADD, version, false),
    F("--host", NULL, CMD_ADD, host, false),
    F("--actor", NULL, CMD_ADD, actor, false),
    F("--group-by", NULL, CMD_ADD, group_by, false),
    F("--above", NULL, CMD_ADD, above, false),
    F("--baseline", NULL, CMD_ADD, baseline, false),
    F("--period", NULL, CMD_ADD, period, false),
    F("--floor", NULL, CMD_ADD, floor, false),
    F("--function", NULL, CMD_ADD, function, false),
    F("--percent", NULL, CMD_ADD, percent, false),
    F("--for", NULL, CMD_ADD, for_, false),
    F("--resolve-for", NULL, CMD_ADD, resolve_for, false),
    F("--hysteresis", NULL, CMD_ADD, hysteresis, false),
    F("--capture", NULL, CMD_ADD, capture, false),
    F("--capture-duration", NULL, CMD_ADD, capture_duration, false),
    F("--capture-hz", NULL, CMD_ADD, capture_hz, false),
    F("--capture-instances", NULL, CMD_ADD, capture_instances, false),
    F("--capture-cooldown", NULL, CMD_ADD, capture_cooldown, false),
    F("--capture-max-per-hour", NULL, CMD_ADD, capture_max_per_hour, false),
    F("--webhook", NULL, CMD_ADD, webhook, false),
    F("--webhook-format", NULL, CMD_ADD, webhook_format, false),
};
#undef F
#define NFLAGS (sizeof flags / sizeof flags[0])

static void print_usage(void) {
  printf("usage:\n%s\n%s", ember__usage_rules, ember__usage_rules_notes);
}

/* A number as JSON writes it ("0.5", "4", "1e3"), as a JSON value that
 * keeps its type (4 stays an integer); NULL when s is no number. */
static json_t *number(const char *s) {
  json_error_t e;
  json_t *v = json_loads(s, JSON_DECODE_ANY, &e);
  if (json_is_number(v)) return v;
  json_decref(v);
  return NULL;
}

/* ---- a rule from flags ---- */

/* Builds the rule object; every check prints its own sentence. */
typedef struct builder {
  const char *cmd;
  json_t *rule;
  int st; /* the first error's exit status */
} builder_t;

static void bad(builder_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void bad(builder_t *b, const char *fmt, ...) {
  if (b->st != 0) return; /* the first problem is the one to fix */
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "ember %s: ", b->cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  b->st = EXIT_USAGE;
}

/* obj[key] = v (owned); nothing once a check failed. */
static void set(builder_t *b, json_t *obj, const char *key, json_t *v) {
  if (b->st != 0) {
    json_decref(v);
  } else if (v == NULL) {
    /* json_string() refuses text that is not UTF-8. */
    bad(b, "cannot encode the %s field (is it valid UTF-8?)", key);
  } else if (json_object_set_new(obj, key, v) != 0) {
    bad(b, "cannot encode the %s field (out of memory)", key);
  }
}

static void set_str(builder_t *b, json_t *obj, const char *key, const char *s) {
  if (s != NULL) set(b, obj, key, json_string(s));
}

/* `flag s`: a number N with lo < N (lo_open) or lo <= N, and N < hi
 * (hi_open) or N <= hi; `want` says so in words. */
static void set_num(builder_t *b, json_t *obj, const char *key, const char *flag, const char *s,
                    double lo, bool lo_open, double hi, bool hi_open, const char *want) {
  if (s == NULL || b->st != 0) return;
  json_t *v = number(s);
  double d = v ? json_number_value(v) : 0.0;
  if (v == NULL || (lo_open ? d <= lo : d < lo) || (hi_open ? d >= hi : d > hi)) {
    json_decref(v);
    bad(b, "%s '%s': expected %s", flag, s, want);
    return;
  }
  set(b, obj, key, v);
}

/* A duration with a unit, sent as the user wrote it: the server parses
 * the same forms. At least min_s seconds. */
static void set_duration(builder_t *b, json_t *obj, const char *key, const char *flag,
                         const char *s, int64_t min_s) {
  if (s == NULL || b->st != 0) return;
  size_t n = strlen(s);
  int64_t ns = 0;
  bool unit = n > 0 && !(s[n - 1] >= '0' && s[n - 1] <= '9');
  if (!unit || ember_parse_duration_ns(s, 1000000000, &ns) != 0 || ns < min_s * 1000000000) {
    if (min_s > 0)
      bad(b, "%s '%s': expected a duration of at least %" PRId64 "s with a unit (30s, 5m, 1h)",
          flag, s, min_s);
    else
      bad(b, "%s '%s': expected a duration with a unit (30s, 5m, 1h)", flag, s);
    return;
  }
  set_str(b, obj, key, s);
}

static bool one_of(const char *s, const char *const *list) {
  for (; *list != NULL; list++)
    if (strcmp(s, *list) == 0) return true;
  return false;
}

static void check_worker(builder_t *b, const char *w) {
  if (w == NULL || w[0] == '\0') {
    bad(b, "--worker W is required (a name, or a glob with '*': api, api-*, *)");
    return;
  }
  if (strpbrk(w, "[]{}?\\^$|()") != NULL)
    bad(b, "--worker '%s': a worker pattern takes '*' only (api, api-*, *)", w);
}

/* The rule JSON for `ember rules add` without --file, in the order of the
 * design's rule document. Returns 0 with *out, or EXIT_USAGE. */
static int rule_from_flags(const char *cmd, const ropts_t *o, json_t **out) {
  builder_t b = {cmd, json_object(), 0};
  if (b.rule == NULL) return EXIT_FAILED;
  if (o->name == NULL)
    bad(&b, "--name N is required (letters, digits, '_', '.', '-'; up to 64)");
  else if (!ember__name_ok(o->name, MAX_NAME))
    bad(&b, "--name '%s': expected 1 to 64 of letters, digits, '_', '.', '-'", o->name);
  check_worker(&b, o->worker);
  int kinds = (o->above != NULL) + (o->baseline != NULL) + (o->function != NULL);
  if (kinds == 0)
    bad(&b, "the condition is missing: give --above CORES, --baseline FACTOR or --function NAME "
            "--percent P");
  else if (kinds > 1)
    bad(&b, "--above, --baseline and --function are exclusive: give one");
  if (o->baseline == NULL && (o->period != NULL || o->floor != NULL))
    bad(&b, "%s goes with --baseline FACTOR", o->period ? "--period" : "--floor");
  if ((o->function != NULL) != (o->percent != NULL))
    bad(&b, "%s",
        o->function ? "--function NAME needs --percent P" : "--percent goes with --function NAME");
  if (o->group_by != NULL &&
      !one_of(o->group_by, (const char *const[]){"version", "host", "actor", NULL}))
    bad(&b, "--group-by '%s': expected version, host or actor", o->group_by);
  const char *capture_flag = o->capture_duration       ? "--capture-duration"
                             : o->capture_hz           ? "--capture-hz"
                             : o->capture_instances    ? "--capture-instances"
                             : o->capture_cooldown     ? "--capture-cooldown"
                             : o->capture_max_per_hour ? "--capture-max-per-hour"
                                                       : NULL;
  if (o->capture == NULL && capture_flag != NULL)
    bad(&b, "%s goes with --capture cpu|alloc", capture_flag);
  if (o->capture != NULL && !one_of(o->capture, (const char *const[]){"cpu", "alloc", NULL}))
    bad(&b, "--capture '%s': expected cpu or alloc", o->capture);
  if (o->webhook == NULL && o->webhook_format != NULL)
    bad(&b, "--webhook-format goes with --webhook URL");
  if (o->webhook != NULL && strncmp(o->webhook, "http://", 7) != 0 &&
      strncmp(o->webhook, "https://", 8) != 0)
    bad(&b, "--webhook '%s': expected an http:// or https:// URL", o->webhook);
  if (o->webhook_format != NULL &&
      !one_of(o->webhook_format, (const char *const[]){"alertmanager", "json", NULL}))
    bad(&b, "--webhook-format '%s': expected alertmanager or json", o->webhook_format);

  json_t *r = b.rule;
  set_str(&b, r, "name", o->name);
  set_str(&b, r, "worker", o->worker);
  set_str(&b, r, "version", o->version);
  set_str(&b, r, "host", o->host);
  set_str(&b, r, "actor", o->actor);
  set_str(&b, r, "group_by", o->group_by);
  set_num(&b, r, "above", "--above", o->above, 0, true, 1e9, false, "a number of cores above 0");
  if (o->baseline != NULL && b.st == 0) {
    json_t *bl = json_object();
    set(&b, r, "baseline", bl);
    set_num(&b, bl, "factor", "--baseline", o->baseline, 1, true, 1e9, false,
            "a factor above 1 (4: four times the baseline)");
    set_duration(&b, bl, "period", "--period", o->period, 60);
    set_num(&b, bl, "floor", "--floor", o->floor, 0, false, 1e9, false,
            "a number of cores, 0 or more");
  }
  if (o->function != NULL && b.st == 0) {
    json_t *fn = json_object();
    set(&b, r, "function", fn);
    if (o->function[0] == '\0') bad(&b, "--function: the function's name is empty");
    set_str(&b, fn, "name", o->function);
    set_num(&b, fn, "percent", "--percent", o->percent, 0, true, 100, false,
            "a share above 0 and at most 100 (percent)");
  }
  set_duration(&b, r, "for", "--for", o->for_, 0);
  set_num(&b, r, "hysteresis", "--hysteresis", o->hysteresis, 0, false, 1, true,
          "a fraction from 0 to below 1 (0.1)");
  set_duration(&b, r, "resolve_for", "--resolve-for", o->resolve_for, 0);
  if (o->capture != NULL && b.st == 0) {
    json_t *cap = json_object();
    set(&b, r, "capture", cap);
    set_str(&b, cap, "type", o->capture);
    if (o->capture_duration != NULL) {
      int64_t ns = 0;
      if (ember_parse_duration_ns(o->capture_duration, 1000000, &ns) != 0 || ns % 1000000 != 0 ||
          ns < 1000000 || ns / 1000000 > MAX_DURATION_MS)
        bad(&b,
            "--capture-duration '%s': expected whole milliseconds (5000) or a number with a unit "
            "(500ms, 5s, 1m), from 1ms to 24h",
            o->capture_duration);
      else
        set(&b, cap, "duration_ms", json_integer(ns / 1000000));
    }
    uint64_t v = 0;
    if (o->capture_hz != NULL) {
      if (ember_parse_u64(o->capture_hz, 1, MAX_HZ, &v) != 0)
        bad(&b, "--capture-hz '%s': expected a rate from 1 to 100000 samples per second",
            o->capture_hz);
      else
        set(&b, cap, "hz", json_integer((json_int_t)v));
    }
    if (o->capture_instances != NULL) {
      if (ember_parse_u64(o->capture_instances, 1, MAX_INSTANCES, &v) != 0)
        bad(&b, "--capture-instances '%s': expected a number of processes from 1 to 100000",
            o->capture_instances);
      else
        set(&b, cap, "instances", json_integer((json_int_t)v));
    }
    set_duration(&b, cap, "cooldown", "--capture-cooldown", o->capture_cooldown, 0);
    if (o->capture_max_per_hour != NULL) {
      if (ember_parse_u64(o->capture_max_per_hour, 1, 1000000, &v) != 0)
        bad(&b, "--capture-max-per-hour '%s': expected a number of captures, 1 or more",
            o->capture_max_per_hour);
      else
        set(&b, cap, "max_per_hour", json_integer((json_int_t)v));
    }
  }
  if (o->webhook != NULL && o->webhook_format == NULL) {
    set_str(&b, r, "webhook", o->webhook);
  } else if (o->webhook != NULL && b.st == 0) {
    json_t *wh = json_object();
    set(&b, r, "webhook", wh);
    set_str(&b, wh, "url", o->webhook);
    set_str(&b, wh, "format", o->webhook_format);
  }
  if (b.st != 0) {
    json_decref(b.rule);
    return b.st;
  }
  *out = b.rule;
  return 0;
}

/* ---- a rules file ---- */

typedef struct file_rule {
  size_t line; /* of its [rule NAME] header */
  json_t *rule;
} file_rule_t;

/* Fields the API takes as numbers; every other value is sent as a string
 * and the server judges it. */
static const char *const numeric_fields[] = {"above",
                                             "hysteresis",
                                             "baseline.factor",
                                             "baseline.floor",
                                             "function.percent",
                                             "capture.duration_ms",
                                             "capture.hz",
                                             "capture.instances",
                                             "capture.max_per_hour",
                                             NULL};

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = '\0';
  return s;
}

/* Set the dotted `key` ("capture.type") of rule to `value`. Returns NULL
 * or a sentence saying why not. */
static const char *set_dotted(json_t *rule, char *key, json_t *v) {
  json_t *obj = rule;
  char *save = NULL;
  char *part = strtok_r(key, ".", &save);
  while (part != NULL) {
    char *next = strtok_r(NULL, ".", &save);
    json_t *cur = json_object_get(obj, part);
    if (next == NULL) {
      if (cur != NULL) {
        json_decref(v);
        return json_is_object(cur) ? "has fields of its own already" : "is given twice";
      }
      if (json_object_set_new(obj, part, v) != 0) return "cannot be encoded (is it valid UTF-8?)";
      return NULL;
    }
    if (cur == NULL) {
      cur = json_object();
      if (cur == NULL || json_object_set_new(obj, part, cur) != 0) {
        json_decref(v);
        return "cannot be stored (out of memory)";
      }
    } else if (!json_is_object(cur)) {
      json_decref(v);
      return "is under a field given as a value already";
    }
    obj = cur;
    part = next;
  }
  json_decref(v);
  return "is not a field name";
}

/* Parse `text` (NUL-terminated, modified) into rules. Prints
 * "FILE:LINE: ..." and returns EXIT_USAGE at the first bad line. */
static int parse_file(const char *cmd, const char *path, char *text, file_rule_t **out,
                      size_t *nout) {
  file_rule_t *rules = NULL;
  size_t n = 0, cap = 0, lineno = 0;
  int st = 0;
  /* Split by hand: strtok_r would skip empty lines and miscount. */
  char *p = text;
  while (p != NULL && *p != '\0' && st == 0) {
    char *nl = strchr(p, '\n');
    if (nl != NULL) *nl = '\0';
    lineno++;
    char *line = trim(p);
    p = nl ? nl + 1 : NULL;
    if (line[0] == '\0' || line[0] == '#') continue;
    size_t len = strlen(line);
    if (line[0] == '[') {
      char *name = NULL;
      if (line[len - 1] == ']') {
        line[len - 1] = '\0';
        char *in = trim(line + 1);
        if (strncmp(in, "rule", 4) == 0 && (in[4] == ' ' || in[4] == '\t')) name = trim(in + 4);
      }
      if (name == NULL || name[0] == '\0') {
        fprintf(stderr, "ember %s: %s:%zu: expected a block header [rule NAME]\n", cmd, path,
                lineno);
        st = EXIT_USAGE;
        break;
      }
      for (size_t i = 0; i < n; i++) {
        const char *other = json_string_value(json_object_get(rules[i].rule, "name"));
        if (other != NULL && strcmp(other, name) == 0) {
          fprintf(stderr, "ember %s: %s:%zu: rule %s is defined twice (first at line %zu)\n", cmd,
                  path, lineno, name, rules[i].line);
          st = EXIT_USAGE;
        }
      }
      if (st != 0) break;
      if (n == MAX_FILE_RULES) {
        fprintf(stderr, "ember %s: %s:%zu: more than %d rules in one file\n", cmd, path, lineno,
                MAX_FILE_RULES);
        st = EXIT_USAGE;
        break;
      }
      if (n == cap) {
        size_t ncap = cap ? cap * 2 : 8;
        file_rule_t *nr = ember_realloc(rules, ncap * sizeof *nr);
        if (nr == NULL) {
          st = EXIT_FAILED;
          break;
        }
        rules = nr;
        cap = ncap;
      }
      rules[n].line = lineno;
      rules[n].rule = json_object();
      json_t *nm = json_string(name);
      if (rules[n].rule == NULL || nm == NULL ||
          json_object_set_new(rules[n].rule, "name", nm) != 0) {
        json_decref(rules[n].rule);
        fprintf(stderr, "ember %s: %s:%zu: cannot encode the rule's name (is it valid UTF-8?)\n",
                cmd, path, lineno);
        st = EXIT_USAGE;
        break;
      }
      n++;
      continue;
    }
    char *eq = strchr(line, '=');
    if (eq == NULL) {
      fprintf(stderr, "ember %s: %s:%zu: expected field = value, [rule NAME] or a # comment\n", cmd,
              path, lineno);
      st = EXIT_USAGE;
      break;
    }
    *eq = '\0';
    char *key = trim(line), *value = trim(eq + 1);
    if (n == 0) {
      fprintf(stderr, "ember %s: %s:%zu: field \"%s\" comes before any [rule NAME] header\n", cmd,
              path, lineno, key);
      st = EXIT_USAGE;
      break;
    }
    bool key_ok =
        key[0] != '\0' && key[0] != '.' && key[strlen(key) - 1] != '.' && strstr(key, "..") == NULL;
    if (!key_ok) {
      fprintf(stderr, "ember %s: %s:%zu: \"%s\" is not a field name\n", cmd, path, lineno, key);
      st = EXIT_USAGE;
      break;
    }
    if (strcmp(key, "name") == 0) {
      fprintf(stderr, "ember %s: %s:%zu: field \"name\": the name is the [rule NAME] header's\n",
              cmd, path, lineno);
      st = EXIT_USAGE;
      break;
    }
    if (value[0] == '\0') {
      fprintf(stderr, "ember %s: %s:%zu: field \"%s\" has no value\n", cmd, path, lineno, key);
      st = EXIT_USAGE;
      break;
    }
    json_t *v = one_of(key, numeric_fields) ? number(value) : NULL;
    if (v == NULL) v = json_string(value);
    char field[256];
    snprintf(field, sizeof field, "%s", key);
    const char *why = v == NULL ? "cannot be encoded (is it valid UTF-8?)"
                                : set_dotted(rules[n - 1].rule, key, v);
    if (why != NULL) {
      fprintf(stderr, "ember %s: %s:%zu: field \"%s\" %s\n", cmd, path, lineno, field, why);
      st = EXIT_USAGE;
      break;
    }
  }
  if (st == 0 && n == 0) {
    fprintf(stderr, "ember %s: %s: no [rule NAME] block\n", cmd, path);
    st = EXIT_USAGE;
  }
  if (st != 0) {
    for (size_t i = 0; i < n; i++) json_decref(rules[i].rule);
    ember_free(rules);
    return st;
  }
  *out = rules;
  *nout = n;
  return 0;
}

/* The whole file (or stdin for "-"), at most MAX_FILE_BYTES, as text. */
static int read_file(const char *cmd, const char *path, ember_buf_t *b) {
  bool opened;
  int rc = ember__read_input(path, b, &opened);
  if (!opened) {
    fprintf(stderr, "ember %s: cannot open %s: %s\n", cmd, path, ember_strerror(rc));
    return EXIT_FAILED;
  }
  if (rc == EMBER_ETOOBIG) {
    fprintf(stderr, "ember %s: %s is larger than %zu MiB; is it a rules file?\n", cmd, path,
            MAX_FILE_BYTES >> 20);
    return EXIT_USAGE;
  }
  if (rc == 0 && b->len == 0) rc = ember_buf_puts(b, "");
  if (rc != 0) {
    fprintf(stderr, "ember %s: cannot read %s: %s\n", cmd, path, ember_strerror(rc));
    return EXIT_FAILED;
  }
  if (memchr(b->data, '\0', b->len) != NULL) {
    fprintf(stderr, "ember %s: %s holds NUL bytes; is it a rules file?\n", cmd, path);
    return EXIT_USAGE;
  }
  return 0;
}

/* ---- sending rules ---- */

/* POST one rule. `where` ("FILE:LINE: " or "") goes before a refusal.
 * Returns 0 (added), EXIT_USAGE (this rule was refused: go on with the
 * next) or, with *stop, a failure that will not get better by trying
 * the next rule. */
static int post_rule(const char *cmd, ember__client_t *c, const json_t *rule, const char *where,
                     bool *stop) {
  static const char path[] = "/api/v1/rules";
  const char *name = json_string_value(json_object_get(rule, "name"));
  /* 15 digits: 0.2 goes as 0.2, not 0.20000000000000001. */
  char *json = json_dumps(rule, JSON_COMPACT | JSON_REAL_PRECISION(15));
  ember_buf_t body;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  long status = 0;
  int st = EXIT_FAILED;
  *stop = true;
  if (json == NULL) {
    fprintf(stderr, "ember %s: %scannot encode rule %s\n", cmd, where, name ? name : "?");
    goto cleanup;
  }
  st = ember__request(cmd, c, "POST", path, NULL, json, &body, &status);
  if (st != 0) goto cleanup;
  if (status == 404 && ember__no_such_path(&body)) {
    fprintf(stderr, "ember %s: the server at %s has no %s (HTTP 404); it predates alerting\n", cmd,
            ember__client_server(c), path);
    st = EXIT_FAILED;
    goto cleanup;
  }
  if (status == 400 || status == 409 || status == 422) {
    char msg[1024];
    ember__client_message(&body, msg, sizeof msg);
    fprintf(stderr, "ember %s: %srule %s refused: %s\n", cmd, where, name ? name : "?",
            msg[0] ? msg : "(no reason given)");
    *stop = false;
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = ember__status_exit(cmd, c, path, status, &body);
  if (st != 0) goto cleanup;
  *stop = false;
  printf("added rule %s\n", name ? name : "?");
  fflush(stdout);
cleanup:
  free(json);
  ember_buf_free(&body);
  return st;
}

/* Any flag of a rule's own (everything between `name` and
 * `webhook_format` in ropts_t) that was given. */
static const char *rule_flag_given(const ropts_t *o) {
  for (size_t i = 0; i < NFLAGS; i++) {
    if (flags[i].off < offsetof(ropts_t, name)) continue;
    const char *const *slot = (const char *const *)(const void *)((const char *)o + flags[i].off);
    if (*slot != NULL) return flags[i].name;
  }
  return NULL;
}

static int cmd_add(const char *cmd, const ropts_t *o) {
  ember__client_t *c = NULL;
  json_t *rule = NULL;
  file_rule_t *rules = NULL;
  size_t n = 0;
  ember_buf_t text;
  ember_buf_init(&text, MAX_FILE_BYTES);
  /* How messages name the file. */
  const char *label = o->file == NULL ? "" : strcmp(o->file, "-") == 0 ? "stdin" : o->file;
  int st;
  if (o->file != NULL) {
    const char *other = rule_flag_given(o);
    if (other != NULL) {
      fprintf(stderr, "ember %s: --file takes the rules from the file; %s is not for it\n", cmd,
              other);
      st = EXIT_USAGE;
      goto cleanup;
    }
    st = read_file(cmd, o->file, &text);
    if (st == 0) st = parse_file(cmd, label, text.data, &rules, &n);
  } else {
    st = rule_from_flags(cmd, o, &rule);
  }
  if (st == 0) st = ember__open_client(cmd, o->server, o->token, &c);
  if (st != 0) goto cleanup;
  bool stop = false;
  if (rule != NULL) {
    st = post_rule(cmd, c, rule, "", &stop);
    goto cleanup;
  }
  size_t added = 0, sent = 0;
  int worst = 0;
  for (size_t i = 0; i < n && !stop; i++, sent++) {
    char where[600];
    snprintf(where, sizeof where, "%s:%zu: ", label, rules[i].line);
    int one = post_rule(cmd, c, rules[i].rule, where, &stop);
    if (one == 0) added++;
    /* A failure of the server outranks a refused rule. */
    if (one == EXIT_FAILED || (one != 0 && worst == 0)) worst = one;
  }
  if (added < n)
    fprintf(stderr, "ember %s: added %zu of %zu rules from %s%s\n", cmd, added, n, label,
            sent < n ? " (stopped: the rest were not sent)" : "");
  st = worst;
cleanup:
  json_decref(rule);
  for (size_t i = 0; i < n; i++) json_decref(rules[i].rule);
  ember_free(rules);
  ember_buf_free(&text);
  ember__client_free(c);
  return st;
}

/* ---- ember rules delete NAME ---- */

static int cmd_delete(const char *cmd, const ropts_t *o, const char *name) {
  if (!ember__name_ok(name, MAX_NAME)) {
    fprintf(stderr, "ember %s: '%s' is not a rule name (`ember rules` lists them)\n", cmd, name);
    return EXIT_USAGE;
  }
  char path[128];
  snprintf(path, sizeof path, "/api/v1/rules/%s", name);
  ember_buf_t body;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember__client_t *c = NULL;
  long status = 0;
  char msg[1024];
  int st = ember__open_client(cmd, o->server, o->token, &c);
  if (st == 0) st = ember__request(cmd, c, "DELETE", path, NULL, NULL, &body, &status);
  if (st != 0) goto cleanup;
  ember__client_message(&body, msg, sizeof msg);
  if (status == 404 && !ember__no_such_path(&body)) {
    fprintf(stderr, "ember %s: no rule %s on the server%s%s; `ember rules` lists them\n", cmd, name,
            msg[0] ? ": " : "", msg);
    st = EXIT_USAGE;
    goto cleanup;
  }
  if (status == 409) {
    fprintf(stderr,
            "ember %s: rule %s cannot be deleted through the API%s%s; rules from the collector's "
            "alerts.rules file change in the file (then SIGHUP the collector)\n",
            cmd, name, msg[0] ? ": " : "", msg);
    st = EXIT_USAGE;
    goto cleanup;
  }
  st = ember__status_exit(cmd, c, path, status, &body);
  if (st == 0) printf("deleted rule %s\n", name);
cleanup:
  ember__client_free(c);
  ember_buf_free(&body);
  return st;
}

/* ---- ember rules [list] ---- */

static void fmt_num(const json_t *v, char *buf, size_t size) {
  double d = json_number_value(v);
  if (!json_is_number(v))
    snprintf(buf, size, "?");
  else if (d > -1e15 && d < 1e15 && d == (double)(long long)d)
    snprintf(buf, size, "%.0f", d);
  else
    snprintf(buf, size, "%g", d);
}

/* "above 0.5 cores", "4x baseline (1h, floor 0.2)", "burn > 30%". */
static int fmt_condition(const json_t *r, ember_buf_t *b) {
  char n1[32], n2[32];
  const json_t *v;
  if ((v = json_object_get(r, "above")) != NULL) {
    fmt_num(v, n1, sizeof n1);
    return ember_buf_printf(b, "above %s cores", n1);
  }
  if ((v = json_object_get(r, "baseline")) != NULL) {
    fmt_num(json_object_get(v, "factor"), n1, sizeof n1);
    int rc = ember_buf_printf(b, "%sx baseline", n1);
    const char *period = json_string_value(json_object_get(v, "period"));
    const json_t *floor = json_object_get(v, "floor");
    if (rc == 0 && (period || floor)) {
      n2[0] = '\0';
      if (floor) fmt_num(floor, n2, sizeof n2);
      rc = ember_buf_printf(b, " (%s%s%s%s)", period ? period : "", period && floor ? ", " : "",
                            floor ? "floor " : "", n2);
    }
    return rc;
  }
  if ((v = json_object_get(r, "function")) != NULL) {
    const char *fn = json_string_value(json_object_get(v, "name"));
    fmt_num(json_object_get(v, "percent"), n1, sizeof n1);
    return ember_buf_printf(b, "%s > %s%%", fn ? fn : "?", n1);
  }
  return ember_buf_puts(b, "?");
}

/* "worker=api version=v1". */
static int fmt_selection(const json_t *r, ember_buf_t *b) {
  const char *keys[] = {"worker", "version", "host", "actor"};
  int rc = 0;
  for (size_t i = 0; i < 4 && rc == 0; i++) {
    const char *v = json_string_value(json_object_get(r, keys[i]));
    if (v != NULL) rc = ember_buf_printf(b, "%s%s=%s", b->len ? " " : "", keys[i], v);
  }
  return rc == 0 && b->len == 0 ? ember_buf_puts(b, "-") : rc;
}

/* "cpu 5000ms 1000Hz x2". */
static int fmt_capture(const json_t *cap, ember_buf_t *b) {
  if (!json_is_object(cap)) return ember_buf_puts(b, "-");
  const char *type = json_string_value(json_object_get(cap, "type"));
  int rc = ember_buf_puts(b, type ? type : "?");
  const char *keys[] = {"duration_ms", "hz", "instances"};
  const char *pre[] = {" ", " ", " x"}, *post[] = {"ms", "Hz", ""};
  for (size_t i = 0; i < 3 && rc == 0; i++) {
    const json_t *v = json_object_get(cap, keys[i]);
    char n[32];
    if (!json_is_number(v)) continue;
    fmt_num(v, n, sizeof n);
    rc = ember_buf_printf(b, "%s%s%s", pre[i], n, post[i]);
  }
  return rc;
}

static int fmt_webhook(const json_t *wh, ember_buf_t *b) {
  if (json_is_string(wh)) return ember_buf_puts(b, json_string_value(wh));
  const char *url = json_string_value(json_object_get(wh, "url"));
  const char *format = json_string_value(json_object_get(wh, "format"));
  if (url == NULL) return ember_buf_puts(b, "-");
  return ember_buf_printf(b, "%s%s%s%s", url, format ? " (" : "", format ? format : "",
                          format ? ")" : "");
}

static int list_table(const json_t *list, const void *ctx, ember_buf_t *out) {
  (void)ctx;
  static const bool right[8] = {false};
  ember__table_t t = {.ncols = 8, .right = right};
  ember_buf_t cell;
  ember_buf_init(&cell, 65536);
  const char *hdr[] = {"NAME", "SOURCE",   "SELECTION", "CONDITION",
                       "FOR",  "GROUP BY", "CAPTURE",   "WEBHOOK"};
  int rc = 0;
  for (size_t i = 0; i < 8 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(list) && rc == 0; i++) {
    const json_t *r = json_array_get(list, i);
    const char *name = json_string_value(json_object_get(r, "name"));
    const char *source = json_string_value(json_object_get(r, "source"));
    const char *for_ = json_string_value(json_object_get(r, "for"));
    const char *group = json_string_value(json_object_get(r, "group_by"));
    rc = ember__table_add(&t, name ? name : "?");
    if (rc == 0) rc = ember__table_add(&t, source ? source : "?");
    int (*fmts[])(const json_t *, ember_buf_t *) = {fmt_selection, fmt_condition};
    for (size_t k = 0; k < 2 && rc == 0; k++) {
      ember_buf_reset(&cell);
      rc = fmts[k](r, &cell);
      if (rc == 0) rc = ember__table_add(&t, cell.data);
    }
    if (rc == 0) rc = ember__table_add(&t, for_ ? for_ : "-");
    if (rc == 0) rc = ember__table_add(&t, group ? group : "-");
    ember_buf_reset(&cell);
    if (rc == 0) rc = fmt_capture(json_object_get(r, "capture"), &cell);
    if (rc == 0) rc = ember__table_add(&t, cell.data);
    ember_buf_reset(&cell);
    const json_t *wh = json_object_get(r, "webhook");
    rc = rc != 0 ? rc : wh ? fmt_webhook(wh, &cell) : ember_buf_puts(&cell, "-");
    if (rc == 0) rc = ember__table_add(&t, cell.data);
  }
  if (rc == 0) rc = ember__table_render(&t, out);
  ember__table_free(&t);
  ember_buf_free(&cell);
  return rc;
}

static int cmd_list(const char *cmd, const ropts_t *o) {
  return ember__list_command(cmd, o->server, o->token, "/api/v1/rules", NULL, "rules",
                             o->json != NULL, list_table, NULL,
                             "the server has no rules; add one with `ember rules add`");
}

int ember__cmd_rules(int argc, char **argv) {
  ropts_t o = {0};
  const char *sub = argc > 0 && argv[0][0] != '-' ? argv[0] : "list";
  if (argc > 0 && argv[0][0] != '-') {
    argc--;
    argv++;
  }
  int st;
  if (strcmp(sub, "delete") == 0) {
    static const char cmd[] = "rules delete";
    const char *name = NULL;
    st = ember__parse_flags_pos(cmd, CMD_DELETE, flags, NFLAGS, argc, argv, &o, "rule name", &name);
    if (st < 0) print_usage();
    return st < 0 ? 0 : st != 0 ? st : cmd_delete(cmd, &o, name);
  }
  if (strcmp(sub, "add") == 0) {
    static const char cmd[] = "rules add";
    st = ember__parse_flags(cmd, CMD_ADD, flags, NFLAGS, argc, argv, &o);
    if (st < 0) print_usage();
    return st < 0 ? 0 : st != 0 ? st : cmd_add(cmd, &o);
  }
  if (strcmp(sub, "list") == 0) {
    static const char cmd[] = "rules";
    st = ember__parse_flags(cmd, CMD_LIST, flags, NFLAGS, argc, argv, &o);
    if (st < 0) print_usage();
    return st < 0 ? 0 : st != 0 ? st : cmd_list(cmd, &o);
  }
  fprintf(stderr, "ember rules: unknown subcommand '%s' (list, add, delete; see `ember help`)\n",
          sub);
  return EXIT_USAGE;
}
