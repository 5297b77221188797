/* Alert rules: one field-setting path for JSON members and rules-file lines,
 * the checks of each field, the JSON form, the rule set and its file. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alert_rule.h"
#include "ember/buf.h"
#include "ember/parse.h"
#include "json.h"
#include "utf8.h"

#define NS_PER_S   1000000000LL
#define NS_PER_MIN (60LL * NS_PER_S)
#define NS_PER_DAY (86400LL * NS_PER_S)

/* ---- fields ------------------------------------------------------------ */

typedef enum field_id {
  F_NAME,
  F_WORKER,
  F_VERSION,
  F_HOST,
  F_ACTOR,
  F_GROUP_BY,
  F_ABOVE,
  F_BASELINE_FACTOR,
  F_BASELINE_PERIOD,
  F_BASELINE_FLOOR,
  F_FUNCTION_NAME,
  F_FUNCTION_PERCENT,
  F_FOR,
  F_HYSTERESIS,
  F_RESOLVE_FOR,
  F_CAPTURE_TYPE,
  F_CAPTURE_DURATION,
  F_CAPTURE_HZ,
  F_CAPTURE_INSTANCES,
  F_CAPTURE_COOLDOWN,
  F_CAPTURE_MAX_PER_HOUR,
  F_WEBHOOK_URL,
  F_WEBHOOK_FORMAT,
  F_COUNT
} field_id_t;

_Static_assert(F_COUNT <= 32, "the fields seen fit a uint32_t");

static const char *const field_names[F_COUNT] = {
    [F_NAME] = "name",
    [F_WORKER] = "worker",
    [F_VERSION] = "version",
    [F_HOST] = "host",
    [F_ACTOR] = "actor",
    [F_GROUP_BY] = "group_by",
    [F_ABOVE] = "above",
    [F_BASELINE_FACTOR] = "baseline.factor",
    [F_BASELINE_PERIOD] = "baseline.period",
    [F_BASELINE_FLOOR] = "baseline.floor",
    [F_FUNCTION_NAME] = "function.name",
    [F_FUNCTION_PERCENT] = "function.percent",
    [F_FOR] = "for",
    [F_HYSTERESIS] = "hysteresis",
    [F_RESOLVE_FOR] = "resolve_for",
    [F_CAPTURE_TYPE] = "capture.type",
    [F_CAPTURE_DURATION] = "capture.duration_ms",
    [F_CAPTURE_HZ] = "capture.hz",
    [F_CAPTURE_INSTANCES] = "capture.instances",
    [F_CAPTURE_COOLDOWN] = "capture.cooldown",
    [F_CAPTURE_MAX_PER_HOUR] = "capture.max_per_hour",
    [F_WEBHOOK_URL] = "webhook.url",
    [F_WEBHOOK_FORMAT] = "webhook.format",
};

/* The nested objects, with the sentence that names their fields. */
static const struct {
  const char *name;
  const char *fields;
} groups[] = {
    {"baseline", "factor, period, floor"},
    {"function", "name, percent"},
    {"capture", "type, duration_ms, hz, instances, cooldown, max_per_hour"},
    {"webhook", "url, format"},
};

#define TOP_FIELDS                                                                                 \
  "name, worker, version, host, actor, group_by, above, baseline, function, for, hysteresis, "     \
  "resolve_for, capture, webhook"

#define BIT(f)        (UINT32_C(1) << (f))
#define BASELINE_BITS (BIT(F_BASELINE_FACTOR) | BIT(F_BASELINE_PERIOD) | BIT(F_BASELINE_FLOOR))
#define FUNCTION_BITS (BIT(F_FUNCTION_NAME) | BIT(F_FUNCTION_PERCENT))
#define CAPTURE_BITS                                                                               \
  (BIT(F_CAPTURE_TYPE) | BIT(F_CAPTURE_DURATION) | BIT(F_CAPTURE_HZ) | BIT(F_CAPTURE_INSTANCES) |  \
   BIT(F_CAPTURE_COOLDOWN) | BIT(F_CAPTURE_MAX_PER_HOUR))

/* A field's value as it came: a JSON value (API) or the bare text of a file
 * line. Exactly one is set. */
typedef struct val {
  const json_t *j;
  const char *text;
} val_t;

typedef struct pctx {
  ember__alert_rule_t *r;
  uint32_t seen;     /* fields set (BIT) */
  uint32_t groups;   /* nested objects given, even empty (bit per groups[] index) */
  const char *where; /* "FILE:LINE: " or "" */
  char *errbuf;
  size_t errbuf_size;
} pctx_t;

__attribute__((format(printf, 2, 3))) static int fail(pctx_t *c, const char *fmt, ...) {
  if (c->errbuf && c->errbuf_size) {
    int n = snprintf(c->errbuf, c->errbuf_size, "%s", c->where);
    size_t off = n < 0 ? 0 : (size_t)n;
    if (off < c->errbuf_size) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(c->errbuf + off, c->errbuf_size - off, fmt, ap);
      va_end(ap);
    }
  }
  return -EINVAL;
}

/* The value as a user wrote it, bounded and without control characters, for
 * an error sentence. */
static void show(const val_t *v, char *out, size_t size) {
  char *dumped = NULL;
  const char *s;
  if (v->text) {
    s = v->text;
  } else if (json_is_string(v->j)) {
    s = json_string_value(v->j);
  } else {
    dumped = json_dumps(v->j, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
    s = dumped ? dumped : "?";
  }
  size_t n = strlen(s), max = size - 1;
  bool cut = n > max;
  if (cut) n = max > 3 ? max - 3 : 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    out[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
  }
  if (cut && max >= 3) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
  free(dumped); /* json_dumps allocates with jansson's allocator: malloc */
}

static int bad(pctx_t *c, field_id_t f, const val_t *v, const char *what) {
  char shown[72];
  show(v, shown, sizeof shown);
  return fail(c, "field \"%s\": \"%s\" %s", field_names[f], shown, what);
}

/* ---- typed getters: the only place where JSON and text differ ---------- */

static bool get_str(const val_t *v, const char **out) {
  if (v->text) {
    *out = v->text;
    return true;
  }
  if (!json_is_string(v->j)) return false;
  const char *s = json_string_value(v->j);
  if (strlen(s) != json_string_length(v->j)) return false; /* an embedded NUL */
  *out = s;
  return true;
}

static bool get_num(const val_t *v, double *out) {
  if (v->j) {
    if (!json_is_number(v->j)) return false;
    *out = json_number_value(v->j);
    return isfinite(*out);
  }
  /* A bare number in a file has JSON's number syntax: parse it as JSON so
   * that the file and the API accept the same texts. */
  json_t *j = json_loads(v->text, JSON_DECODE_ANY, NULL);
  bool ok = j != NULL && json_is_number(j);
  if (ok) *out = json_number_value(j);
  json_decref(j);
  return ok && isfinite(*out);
}

static bool get_uint(const val_t *v, uint64_t min, uint64_t max, uint64_t *out) {
  if (v->j) {
    if (!json_is_integer(v->j)) return false;
    json_int_t i = json_integer_value(v->j);
    if (i < 0 || (uint64_t)i < min || (uint64_t)i > max) return false;
    *out = (uint64_t)i;
    return true;
  }
  /* Decimal digits only, as JSON has them (ember_parse_u64 also takes 0x). */
  for (const char *p = v->text; *p; p++)
    if (!isdigit((unsigned char)*p)) return false;
  return ember_parse_u64(v->text, min, max, out) == 0;
}

/* A duration string with a unit ("30s"); "0" alone needs none. Returns 0,
 * -EINVAL (not a duration) or -ERANGE (outside [min, max]). */
static int get_dur(const val_t *v, int64_t min, int64_t max, int64_t *out) {
  const char *s;
  if (!get_str(v, &s)) return -EINVAL;
  size_t n = strlen(s);
  if (n == 0 || (isdigit((unsigned char)s[n - 1]) && strcmp(s, "0") != 0)) return -EINVAL;
  int64_t ns;
  int rc = ember_parse_duration_ns(s, NS_PER_S, &ns);
  if (rc == -ERANGE) return -ERANGE;
  if (rc != 0) return -EINVAL;
  if (ns < min || ns > max) return -ERANGE;
  *out = ns;
  return 0;
}

static int set_dur(pctx_t *c, field_id_t f, const val_t *v, int64_t min, int64_t max,
                   const char *range, int64_t *out) {
  int rc = get_dur(v, min, max, out);
  if (rc == -EINVAL) return bad(c, f, v, "is not a duration (use 30s, 5m, 1h)");
  if (rc != 0) return bad(c, f, v, range);
  return 0;
}

/* A label value: 1..EMBER__RULE_LABEL_MAX bytes of UTF-8, no control
 * characters. */
static bool label_ok(const char *s, size_t max) {
  size_t n = strlen(s);
  if (n == 0 || n > max || !ember__utf8_valid(s, n)) return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) return false;
  return true;
}

static int set_label(pctx_t *c, field_id_t f, const val_t *v, char **dst) {
  const char *s;
  if (!get_str(v, &s) || !label_ok(s, EMBER__RULE_LABEL_MAX))
    return bad(c, f, v,
               "must be a string of 1 to 256 characters without control characters (matched "
               "exactly)");
  char *copy = ember_strdup(s);
  if (!copy) return -ENOMEM;
  ember_free(*dst);
  *dst = copy;
  return 0;
}

static bool name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > EMBER__RULE_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' && s[i] != '-') return false;
  return true;
}

/* ---- one field ----------------------------------------------------------- */

static int set_field(pctx_t *c, const char *key, const val_t *v);

static int set_group(pctx_t *c, size_t g, const char *key, const val_t *v) {
  if (g == 3 && (v->text || json_is_string(v->j))) return set_field(c, "webhook.url", v);
  if (!v->j || !json_is_object(v->j)) {
    char shown[72];
    show(v, shown, sizeof shown);
    if (g == 3)
      return fail(c, "field \"webhook\": \"%s\" must be a URL or an object with url, format",
                  shown);
    return fail(c, "field \"%s\": \"%s\" must be an object with %s (in a file: %s.%s = ...)", key,
                shown, groups[g].fields, key, "FIELD");
  }
  c->groups |= 1u << g;
  const char *mk;
  json_t *mv;
  json_object_foreach((json_t *)(uintptr_t)v->j, mk, mv) {
    char full[96];
    int n = snprintf(full, sizeof full, "%s.%s", key, mk);
    if (n < 0 || (size_t)n >= sizeof full || strchr(mk, '.') != NULL) {
      char shown[40];
      val_t kv = {.text = mk};
      show(&kv, shown, sizeof shown);
      return fail(c, "unknown field \"%s.%s\" (%s takes %s)", key, shown, key, groups[g].fields);
    }
    int rc = set_field(c, full, &(val_t){.j = mv});
    if (rc != 0) return rc;
  }
  return 0;
}

static int set_field(pctx_t *c, const char *key, const val_t *v) {
  ember__alert_rule_t *r = c->r;
  int f = -1;
  for (int i = 0; i < F_COUNT; i++)
    if (strcmp(key, field_names[i]) == 0) f = i;
  if (f < 0) {
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
      size_t gl = strlen(groups[g].name);
      if (strcmp(key, groups[g].name) == 0) return set_group(c, g, key, v);
      if (strncmp(key, groups[g].name, gl) == 0 && key[gl] == '.') {
        char shown[72];
        val_t kv = {.text = key};
        show(&kv, shown, sizeof shown);
        return fail(c, "unknown field \"%s\" (%s takes %s)", shown, groups[g].name,
                    groups[g].fields);
      }
    }
    char shown[72];
    val_t kv = {.text = key};
    show(&kv, shown, sizeof shown);
    return fail(c, "unknown field \"%s\" (a rule takes %s)", shown, TOP_FIELDS);
  }
  if (c->seen & BIT(f)) return fail(c, "field \"%s\" is set twice", field_names[f]);
  c->seen |= BIT(f);

  const char *s;
  double d;
  uint64_t u;
  switch ((field_id_t)f) {
  case F_NAME:
    if (!get_str(v, &s) || !name_ok(s))
      return bad(c, F_NAME, v, "must be 1 to 64 of the characters A-Z a-z 0-9 _ . -");
    memcpy(r->name, s, strlen(s) + 1);
    return 0;
  case F_WORKER: {
    if (!get_str(v, &s) || !label_ok(s, EMBER__RULE_LABEL_MAX))
      return bad(c, F_WORKER, v,
                 "must be a worker name or a pattern with '*' (1 to 256 characters, no control "
                 "characters)");
    const char *meta = strpbrk(s, "[]{}?\\^$|()");
    if (meta != NULL) {
      char what[160];
      snprintf(what, sizeof what,
               "has pattern syntax '%c' that worker patterns do not support: use a literal "
               "worker name, or '*' for any run of characters (e.g. api-*)",
               *meta);
      return bad(c, F_WORKER, v, what);
    }
    val_t sv = {.text = s};
    return set_label(c, F_WORKER, &sv, &r->worker);
  }
  case F_VERSION: return set_label(c, F_VERSION, v, &r->version);
  case F_HOST: return set_label(c, F_HOST, v, &r->host);
  case F_ACTOR: return set_label(c, F_ACTOR, v, &r->actor);
  case F_GROUP_BY:
    if (get_str(v, &s) && strcmp(s, "version") == 0)
      r->group_by = EMBER__GROUP_VERSION;
    else if (get_str(v, &s) && strcmp(s, "host") == 0)
      r->group_by = EMBER__GROUP_HOST;
    else if (get_str(v, &s) && strcmp(s, "actor") == 0)
      r->group_by = EMBER__GROUP_ACTOR;
    else
      return bad(c, F_GROUP_BY, v, "must be one of version, host, actor");
    return 0;
  case F_ABOVE:
    if (!get_num(v, &d) || !(d > 0)) return bad(c, F_ABOVE, v, "must be a number of cores above 0");
    r->above = d;
    return 0;
  case F_BASELINE_FACTOR:
    if (!get_num(v, &d) || !(d > 1))
      return bad(c, F_BASELINE_FACTOR, v, "must be a number above 1 (times the baseline)");
    r->baseline.factor = d;
    return 0;
  case F_BASELINE_PERIOD:
    return set_dur(c, F_BASELINE_PERIOD, v, NS_PER_MIN, 30 * NS_PER_DAY,
                   "must be a duration from 1m to 30d", &r->baseline.period_ns);
  case F_BASELINE_FLOOR:
    if (!get_num(v, &d) || !(d >= 0))
      return bad(c, F_BASELINE_FLOOR, v, "must be a number of cores of 0 or more");
    r->baseline.floor = d;
    return 0;
  case F_FUNCTION_NAME: {
    if (!get_str(v, &s) || !label_ok(s, EMBER__RULE_FUNC_MAX))
      return bad(c, F_FUNCTION_NAME, v,
                 "must be a function name of 1 to 1024 characters without control characters");
    char *copy = ember_strdup(s);
    if (!copy) return -ENOMEM;
    r->function.name = copy;
    return 0;
  }
  case F_FUNCTION_PERCENT:
    if (!get_num(v, &d) || !(d > 0) || d > 100)
      return bad(c, F_FUNCTION_PERCENT, v, "must be a percentage above 0 and at most 100");
    r->function.percent = d;
    return 0;
  case F_FOR:
    return set_dur(c, F_FOR, v, 0, NS_PER_DAY,
                   "must be a duration from 0s (fire on the first breaching window) to 1d",
                   &r->for_ns);
  case F_HYSTERESIS:
    if (!get_num(v, &d) || !(d >= 0) || !(d < 1))
      return bad(c, F_HYSTERESIS, v, "must be a number from 0 up to, not including, 1");
    r->hysteresis = d;
    return 0;
  case F_RESOLVE_FOR:
    return set_dur(c, F_RESOLVE_FOR, v, 0, NS_PER_DAY, "must be a duration from 0s to 1d",
                   &r->resolve_for_ns);
  case F_CAPTURE_TYPE:
    if (get_str(v, &s) && strcmp(s, "cpu") == 0)
      r->capture.type = EMBER_SESSION_CPU;
    else if (get_str(v, &s) && strcmp(s, "alloc") == 0)
      r->capture.type = EMBER_SESSION_MEMORY;
    else
      return bad(c, F_CAPTURE_TYPE, v, "must be cpu or alloc");
    return 0;
  case F_CAPTURE_DURATION:
    if (!get_uint(v, 1, 600000, &u))
      return bad(c, F_CAPTURE_DURATION, v,
                 "must be a whole number of milliseconds from 1 to 600000");
    r->capture.duration_ms = (uint32_t)u;
    return 0;
  case F_CAPTURE_HZ:
    if (!get_uint(v, 1, 10000, &u))
      return bad(c, F_CAPTURE_HZ, v, "must be a whole number of samples a second from 1 to 10000");
    r->capture.hz = (uint32_t)u;
    return 0;
  case F_CAPTURE_INSTANCES:
    if (!get_uint(v, 0, 1000, &u))
      return bad(c, F_CAPTURE_INSTANCES, v,
                 "must be a whole number from 0 (every matching instance) to 1000");
    r->capture.instances = (uint32_t)u;
    return 0;
  case F_CAPTURE_COOLDOWN:
    return set_dur(c, F_CAPTURE_COOLDOWN, v, 0, NS_PER_DAY, "must be a duration from 0s to 1d",
                   &r->capture.cooldown_ns);
  case F_CAPTURE_MAX_PER_HOUR:
    if (!get_uint(v, 1, 3600, &u))
      return bad(c, F_CAPTURE_MAX_PER_HOUR, v, "must be a whole number from 1 to 3600");
    r->capture.max_per_hour = (uint32_t)u;
    return 0;
  case F_WEBHOOK_URL: {
    if (!get_str(v, &s) || strlen(s) > EMBER__RULE_URL_MAX ||
        (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0) ||
        strlen(s) <= (s[4] == 's' ? 8u : 7u) || !label_ok(s, EMBER__RULE_URL_MAX) ||
        strchr(s, ' ') != NULL)
      return bad(c, F_WEBHOOK_URL, v,
                 "must be an http:// or https:// URL of at most 2048 characters, without spaces");
    char *copy = ember_strdup(s);
    if (!copy) return -ENOMEM;
    r->webhook_url = copy;
    return 0;
  }
  case F_WEBHOOK_FORMAT:
    if (get_str(v, &s) && strcmp(s, "alertmanager") == 0)
      r->webhook_format = EMBER__WEBHOOK_ALERTMANAGER;
    else if (get_str(v, &s) && strcmp(s, "json") == 0)
      r->webhook_format = EMBER__WEBHOOK_JSON;
    else
      return bad(c, F_WEBHOOK_FORMAT, v, "must be alertmanager or json");
    return 0;
  case F_COUNT: break;
  }
  return -EINVAL; /* not reached: f < F_COUNT */
}

/* The checks across fields, and the defaults, once every field is in. */
static int finish(pctx_t *c) {
  ember__alert_rule_t *r = c->r;
  uint32_t s = c->seen;
  if (!(s & BIT(F_NAME)))
    return fail(c, "field \"name\" is missing (1 to 64 of the characters A-Z a-z 0-9 _ . -)");
  if (!(s & BIT(F_WORKER)))
    return fail(c, "field \"worker\" is missing: a worker name, or a pattern with '*' (\"*\" for "
                   "every worker)");
  bool has_above = s & BIT(F_ABOVE);
  bool has_base = (s & BASELINE_BITS) || (c->groups & 1u);
  bool has_func = (s & FUNCTION_BITS) || (c->groups & 2u);
  int kinds = has_above + has_base + has_func;
  if (kinds == 0)
    return fail(c, "a rule needs one of the fields \"above\" (cores), \"baseline\" or "
                   "\"function\"");
  if (kinds > 1)
    return fail(c,
                "fields \"%s\" and \"%s\" cannot both be set: a rule has one of above, "
                "baseline, function",
                has_above ? "above" : "baseline", has_func ? "function" : "baseline");
  if (has_above) r->kind = EMBER__ALERT_ABOVE;
  if (has_base) {
    r->kind = EMBER__ALERT_BASELINE;
    if (!(s & BIT(F_BASELINE_FACTOR)))
      return fail(c, "field \"baseline.factor\" is missing: a number above 1 (times the "
                     "baseline)");
    if (!(s & BIT(F_BASELINE_PERIOD))) r->baseline.period_ns = EMBER__RULE_DEFAULT_BASELINE_PERIOD;
    if (!(s & BIT(F_BASELINE_FLOOR))) r->baseline.floor = EMBER__RULE_DEFAULT_BASELINE_FLOOR;
  }
  if (has_func) {
    r->kind = EMBER__ALERT_FUNCTION;
    if (!(s & BIT(F_FUNCTION_NAME)))
      return fail(c, "field \"function.name\" is missing: the function's name");
    if (!(s & BIT(F_FUNCTION_PERCENT)))
      return fail(c, "field \"function.percent\" is missing: a percentage above 0 and at most "
                     "100");
  }
  if (!(s & BIT(F_FOR)))
    return fail(c, "field \"for\" is missing: a duration such as 30s (0s fires on the first "
                   "breaching window)");
  if (!(s & BIT(F_HYSTERESIS))) r->hysteresis = EMBER__RULE_DEFAULT_HYSTERESIS;
  if (!(s & BIT(F_RESOLVE_FOR))) r->resolve_for_ns = r->for_ns;
  r->has_capture = (s & CAPTURE_BITS) || (c->groups & 4u);
  if (r->has_capture) {
    if (!(s & BIT(F_CAPTURE_TYPE))) r->capture.type = EMBER_SESSION_CPU;
    if (!(s & BIT(F_CAPTURE_DURATION))) r->capture.duration_ms = EMBER__RULE_DEFAULT_CAPTURE_MS;
    if (!(s & BIT(F_CAPTURE_HZ))) r->capture.hz = EMBER__RULE_DEFAULT_CAPTURE_HZ;
    if (!(s & BIT(F_CAPTURE_INSTANCES))) r->capture.instances = EMBER__RULE_DEFAULT_CAPTURE_INST;
    if (!(s & BIT(F_CAPTURE_COOLDOWN))) r->capture.cooldown_ns = EMBER__RULE_DEFAULT_COOLDOWN;
    if (!(s & BIT(F_CAPTURE_MAX_PER_HOUR)))
      r->capture.max_per_hour = EMBER__RULE_DEFAULT_MAX_PER_HOUR;
  }
  if ((s & BIT(F_WEBHOOK_FORMAT)) && !(s & BIT(F_WEBHOOK_URL)))
    return fail(c, "field \"webhook.url\" is missing: the receiver's http:// or https:// URL");
  if (!(s & BIT(F_WEBHOOK_FORMAT))) r->webhook_format = EMBER__WEBHOOK_ALERTMANAGER;
  return 0;
}

/* ---- rules -------------------------------------------------------------- */

void ember__alert_rule_free(ember__alert_rule_t *r) {
  if (!r) return;
  ember_free(r->worker);
  ember_free(r->version);
  ember_free(r->host);
  ember_free(r->actor);
  ember_free(r->function.name);
  ember_free(r->webhook_url);
  ember_free(r);
}

int ember__alert_rule_from_json(const json_t *obj, ember__alert_rule_t **out, char *errbuf,
                                size_t errbuf_size) {
  if (!out) return -EINVAL;
  pctx_t c = {.where = "", .errbuf = errbuf, .errbuf_size = errbuf_size};
  if (!json_is_object(obj)) return fail(&c, "a rule must be a JSON object");
  c.r = ember_calloc(1, sizeof *c.r);
  if (!c.r) return -ENOMEM;
  int rc = 0;
  const char *k;
  json_t *v;
  json_object_foreach((json_t *)(uintptr_t)obj, k, v) {
    rc = set_field(&c, k, &(val_t){.j = v});
    if (rc != 0) break;
  }
  if (rc == 0) rc = finish(&c);
  if (rc == -ENOMEM) fail(&c, "out of memory");
  if (rc != 0) {
    ember__alert_rule_free(c.r);
    return rc;
  }
  *out = c.r;
  return 0;
}

/* A duration in its largest exact unit. */
static json_t *dur_json(int64_t ns) {
  static const struct {
    const char *unit;
    int64_t ns;
  } units[] = {{"d", NS_PER_DAY}, {"h", 3600 * NS_PER_S}, {"m", NS_PER_MIN}, {"s", NS_PER_S},
               {"ms", 1000000},   {"us", 1000},           {"ns", 1}};
  char buf[32];
  if (ns == 0) return json_string("0s");
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (ns % units[i].ns == 0) {
      snprintf(buf, sizeof buf, "%" PRId64 "%s", ns / units[i].ns, units[i].unit);
      return json_string(buf);
    }
  }
  return NULL; /* not reached: every ns divides by 1 */
}

static const char *group_name(ember__alert_group_t g) {
  switch (g) {
  case EMBER__GROUP_VERSION: return "version";
  case EMBER__GROUP_HOST: return "host";
  case EMBER__GROUP_ACTOR: return "actor";
  case EMBER__GROUP_NONE: break;
  }
  return NULL;
}

json_t *ember__alert_rule_to_json(const ember__alert_rule_t *r) {
  if (!r) return NULL;
  json_t *o = json_object();
  int rc = o ? 0 : -ENOMEM;
  if (rc == 0) rc = ember__json_set(o, "name", json_string(r->name));
  if (rc == 0) rc = ember__json_set(o, "worker", ember__json_str(r->worker));
  if (rc == 0 && r->version) rc = ember__json_set(o, "version", ember__json_str(r->version));
  if (rc == 0 && r->host) rc = ember__json_set(o, "host", ember__json_str(r->host));
  if (rc == 0 && r->actor) rc = ember__json_set(o, "actor", ember__json_str(r->actor));
  if (rc == 0 && r->group_by != EMBER__GROUP_NONE)
    rc = ember__json_set(o, "group_by", json_string(group_name(r->group_by)));
  if (rc == 0 && r->kind == EMBER__ALERT_ABOVE)
    rc = ember__json_set(o, "above", json_real(r->above));
  if (rc == 0 && r->kind == EMBER__ALERT_BASELINE) {
    json_t *b = json_object();
    rc = ember__json_set(o, "baseline", b);
    if (rc == 0) rc = ember__json_set(b, "factor", json_real(r->baseline.factor));
    if (rc == 0) rc = ember__json_set(b, "period", dur_json(r->baseline.period_ns));
    if (rc == 0) rc = ember__json_set(b, "floor", json_real(r->baseline.floor));
  }
  if (rc == 0 && r->kind == EMBER__ALERT_FUNCTION) {
    json_t *f = json_object();
    rc = ember__json_set(o, "function", f);
    if (rc == 0) rc = ember__json_set(f, "name", ember__json_str(r->function.name));
    if (rc == 0) rc = ember__json_set(f, "percent", json_real(r->function.percent));
  }
  if (rc == 0) rc = ember__json_set(o, "for", dur_json(r->for_ns));
  if (rc == 0) rc = ember__json_set(o, "hysteresis", json_real(r->hysteresis));
  if (rc == 0) rc = ember__json_set(o, "resolve_for", dur_json(r->resolve_for_ns));
  if (rc == 0 && r->has_capture) {
    json_t *cp = json_object();
    rc = ember__json_set(o, "capture", cp);
    if (rc == 0)
      rc = ember__json_set(cp, "type",
                           json_string(r->capture.type == EMBER_SESSION_MEMORY ? "alloc" : "cpu"));
    if (rc == 0) rc = ember__json_set(cp, "duration_ms", json_integer(r->capture.duration_ms));
    if (rc == 0) rc = ember__json_set(cp, "hz", json_integer(r->capture.hz));
    if (rc == 0) rc = ember__json_set(cp, "instances", json_integer(r->capture.instances));
    if (rc == 0) rc = ember__json_set(cp, "cooldown", dur_json(r->capture.cooldown_ns));
    if (rc == 0) rc = ember__json_set(cp, "max_per_hour", json_integer(r->capture.max_per_hour));
  }
  if (rc == 0 && r->webhook_url) {
    json_t *w = json_object();
    rc = ember__json_set(o, "webhook", w);
    if (rc == 0) rc = ember__json_set(w, "url", ember__json_str(r->webhook_url));
    if (rc == 0)
      rc = ember__json_set(
          w, "format",
          json_string(r->webhook_format == EMBER__WEBHOOK_JSON ? "json" : "alertmanager"));
  }
  if (rc != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static bool dup_str(char **dst, const char *src) {
  if (!src) return true;
  *dst = ember_strdup(src);
  return *dst != NULL;
}

ember__alert_rule_t *ember__alert_rule_dup(const ember__alert_rule_t *r) {
  if (!r) return NULL;
  ember__alert_rule_t *d = ember_calloc(1, sizeof *d);
  if (!d) return NULL;
  *d = *r;
  d->worker = d->version = d->host = d->actor = d->function.name = d->webhook_url = NULL;
  if (!dup_str(&d->worker, r->worker) || !dup_str(&d->version, r->version) ||
      !dup_str(&d->host, r->host) || !dup_str(&d->actor, r->actor) ||
      !dup_str(&d->function.name, r->function.name) || !dup_str(&d->webhook_url, r->webhook_url)) {
    ember__alert_rule_free(d);
    return NULL;
  }
  return d;
}

static bool str_eq(const char *a, const char *b) {
  return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

bool ember__alert_rule_equal(const ember__alert_rule_t *a, const ember__alert_rule_t *b) {
  if (!a || !b) return a == b;
  if (strcmp(a->name, b->name) != 0 || !str_eq(a->worker, b->worker) ||
      !str_eq(a->version, b->version) || !str_eq(a->host, b->host) || !str_eq(a->actor, b->actor) ||
      a->group_by != b->group_by || a->kind != b->kind || a->for_ns != b->for_ns ||
      a->hysteresis != b->hysteresis || a->resolve_for_ns != b->resolve_for_ns ||
      a->has_capture != b->has_capture || !str_eq(a->webhook_url, b->webhook_url))
    return false;
  if (a->webhook_url && a->webhook_format != b->webhook_format) return false;
  switch (a->kind) {
  case EMBER__ALERT_ABOVE:
    if (a->above != b->above) return false;
    break;
  case EMBER__ALERT_BASELINE:
    if (a->baseline.factor != b->baseline.factor ||
        a->baseline.period_ns != b->baseline.period_ns || a->baseline.floor != b->baseline.floor)
      return false;
    break;
  case EMBER__ALERT_FUNCTION:
    if (!str_eq(a->function.name, b->function.name) || a->function.percent != b->function.percent)
      return false;
    break;
  }
  if (a->has_capture &&
      (a->capture.type != b->capture.type || a->capture.duration_ms != b->capture.duration_ms ||
       a->capture.hz != b->capture.hz || a->capture.instances != b->capture.instances ||
       a->capture.cooldown_ns != b->capture.cooldown_ns ||
       a->capture.max_per_hour != b->capture.max_per_hour))
    return false;
  return true;
}

bool ember__alert_glob_match(const char *p, const char *s) {
  if (!p || !s) return false;
  /* Greedy with one backtrack point: on a mismatch after a '*', let that
   * '*' take one more character. Linear in practice, O(n*m) at worst. */
  const char *star = NULL, *resume = NULL;
  while (*s) {
    if (*p == '*') {
      star = p++;
      resume = s;
    } else if (*p == *s) {
      p++;
      s++;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') p++;
  return *p == '\0';
}

bool ember__alert_rule_selects(const ember__alert_rule_t *r, const char *worker,
                               const char *version, const char *host, const char *actor) {
  if (!r || !worker || !ember__alert_glob_match(r->worker, worker)) return false;
  if (r->version && !str_eq(r->version, version)) return false;
  if (r->host && !str_eq(r->host, host)) return false;
  if (r->actor && !str_eq(r->actor, actor)) return false;
  return true;
}

/* ---- rule sets ------------------------------------------------------------ */

struct ember__alert_rules {
  ember__alert_rule_t **v;
  size_t n, cap;
};

int ember__alert_rules_new(ember__alert_rules_t **out) {
  if (!out) return -EINVAL;
  ember__alert_rules_t *set = ember_calloc(1, sizeof *set);
  if (!set) return -ENOMEM;
  *out = set;
  return 0;
}

void ember__alert_rules_free(ember__alert_rules_t *set) {
  if (!set) return;
  for (size_t i = 0; i < set->n; i++) ember__alert_rule_free(set->v[i]);
  ember_free(set->v);
  ember_free(set);
}

size_t ember__alert_rules_count(const ember__alert_rules_t *set) { return set ? set->n : 0; }

const ember__alert_rule_t *ember__alert_rules_at(const ember__alert_rules_t *set, size_t i) {
  return set && i < set->n ? set->v[i] : NULL;
}

static ssize_t find_index(const ember__alert_rules_t *set, const char *name) {
  /* Linear: lookups by name come from the API and reloads, not per window. */
  for (size_t i = 0; i < set->n; i++)
    if (strcmp(set->v[i]->name, name) == 0) return (ssize_t)i;
  return -1;
}

const ember__alert_rule_t *ember__alert_rules_find(const ember__alert_rules_t *set,
                                                   const char *name) {
  if (!set || !name) return NULL;
  ssize_t i = find_index(set, name);
  return i < 0 ? NULL : set->v[i];
}

int ember__alert_rules_add(ember__alert_rules_t *set, ember__alert_rule_t *rule) {
  int rc = 0;
  if (!set || !rule)
    rc = -EINVAL;
  else if (find_index(set, rule->name) >= 0)
    rc = -EEXIST;
  else if (set->n >= EMBER__RULES_MAX)
    rc = EMBER_ETOOBIG;
  else if (set->n == set->cap) {
    size_t cap = set->cap ? set->cap * 2 : 16;
    ember__alert_rule_t **v = ember_realloc(set->v, cap * sizeof *v);
    if (!v)
      rc = -ENOMEM;
    else {
      set->v = v;
      set->cap = cap;
    }
  }
  if (rc != 0) {
    ember__alert_rule_free(rule);
    return rc;
  }
  set->v[set->n++] = rule;
  return 0;
}

int ember__alert_rules_remove(ember__alert_rules_t *set, const char *name) {
  if (!set || !name) return -EINVAL;
  ssize_t i = find_index(set, name);
  if (i < 0) return EMBER_ENOTFOUND;
  ember__alert_rule_free(set->v[i]);
  memmove(&set->v[i], &set->v[i + 1], (set->n - (size_t)i - 1) * sizeof set->v[0]);
  set->n--;
  return 0;
}

/* ---- the rules file ---------------------------------------------------------- */

static const char *trim(const char *s, const char *end, size_t *len) {
  while (s < end && isspace((unsigned char)*s)) s++;
  while (end > s && isspace((unsigned char)end[-1])) end--;
  *len = (size_t)(end - s);
  return s;
}

typedef struct fparse {
  const char *file;
  char where[320];
  char *errbuf;
  size_t errbuf_size;
  ember__alert_rules_t *set;
  unsigned *lines; /* header line of each rule in set, for "defined twice" */
  pctx_t cur;      /* the open block; cur.r NULL when none */
  unsigned cur_line;
} fparse_t;

static void at_line(fparse_t *p, unsigned line) {
  snprintf(p->where, sizeof p->where, "%s:%u: ", p->file, line);
  p->cur.where = p->where;
}

static int ffail(fparse_t *p, unsigned line, const char *what) {
  if (p->errbuf && p->errbuf_size)
    snprintf(p->errbuf, p->errbuf_size, "%s:%u: %s", p->file, line, what);
  return -EINVAL;
}

/* Close the open block: the checks across fields, then into the set. */
static int close_block(fparse_t *p) {
  if (!p->cur.r) return 0;
  char where[400];
  snprintf(where, sizeof where, "%s:%u: rule \"%s\": ", p->file, p->cur_line, p->cur.r->name);
  p->cur.where = where;
  int rc = finish(&p->cur);
  ember__alert_rule_t *r = p->cur.r;
  p->cur.r = NULL;
  if (rc != 0) {
    ember__alert_rule_free(r);
    return rc;
  }
  ssize_t prev = find_index(p->set, r->name);
  if (prev >= 0) {
    char what[160];
    snprintf(what, sizeof what, "rule \"%s\" is defined twice (first on line %u)", r->name,
             p->lines[prev]);
    ember__alert_rule_free(r);
    return ffail(p, p->cur_line, what);
  }
  size_t n = ember__alert_rules_count(p->set);
  unsigned *lines = ember_realloc(p->lines, (n + 1) * sizeof *lines);
  if (!lines) {
    ember__alert_rule_free(r);
    return -ENOMEM;
  }
  p->lines = lines;
  rc = ember__alert_rules_add(p->set, r);
  if (rc == EMBER_ETOOBIG) {
    char what[96];
    snprintf(what, sizeof what, "more than %u rules in one file", EMBER__RULES_MAX);
    return ffail(p, p->cur_line, what);
  }
  if (rc != 0) return rc;
  lines[n] = p->cur_line;
  return 0;
}

static int parse_line(fparse_t *p, unsigned lineno, const char *line, size_t len) {
  char buf[EMBER__RULES_LINE_MAX + 1];
  if (line[0] == '[') {
    int rc = close_block(p);
    if (rc != 0) return rc;
    size_t nlen;
    const char *name = NULL;
    if (len > 6 && line[len - 1] == ']' && memcmp(line + 1, "rule", 4) == 0 &&
        isspace((unsigned char)line[5]))
      name = trim(line + 5, line + len - 1, &nlen);
    if (!name) return ffail(p, lineno, "expected a block header [rule NAME]");
    memcpy(buf, name, nlen);
    buf[nlen] = '\0';
    p->cur.r = ember_calloc(1, sizeof *p->cur.r);
    if (!p->cur.r) return -ENOMEM;
    p->cur.seen = p->cur.groups = 0;
    p->cur_line = lineno;
    at_line(p, lineno);
    return set_field(&p->cur, "name", &(val_t){.text = buf});
  }
  const char *eq = memchr(line, '=', len);
  if (!eq) return ffail(p, lineno, "expected key = value, a [rule NAME] header or a # comment");
  if (!p->cur.r) return ffail(p, lineno, "key = value before the first [rule NAME] header");
  size_t klen, vlen;
  const char *key = trim(line, eq, &klen);
  const char *val = trim(eq + 1, line + len, &vlen);
  if (klen == 0) return ffail(p, lineno, "expected key = value (the key is empty)");
  if (strncmp(key, "name", klen) == 0 && klen == 4)
    return ffail(p, lineno, "field \"name\": a file rule is named by its [rule NAME] header");
  /* The key and value as two strings in one buffer (len bounds both). */
  memcpy(buf, key, klen);
  buf[klen] = '\0';
  char *v = buf + klen + 1;
  memcpy(v, val, vlen);
  v[vlen] = '\0';
  at_line(p, lineno);
  return set_field(&p->cur, buf, &(val_t){.text = v});
}

int ember__alert_rules_parse(const char *text, size_t len, const char *file,
                             ember__alert_rules_t **out, char *errbuf, size_t errbuf_size) {
  if ((!text && len) || !out) return -EINVAL;
  if (!file) file = "rules";
  fparse_t p = {.file = file, .errbuf = errbuf, .errbuf_size = errbuf_size};
  p.cur.errbuf = errbuf;
  p.cur.errbuf_size = errbuf_size;
  p.cur.where = "";
  int rc = ember__alert_rules_new(&p.set);
  if (rc != 0) return rc;
  const char *s = text, *end = text + len;
  for (unsigned lineno = 1; rc == 0 && s < end; lineno++) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *eol = nl ? nl : end;
    size_t n;
    const char *line = trim(s, eol, &n);
    s = nl ? nl + 1 : end;
    if (n == 0 || line[0] == '#') continue;
    if (n > EMBER__RULES_LINE_MAX - 2) {
      char what[64];
      snprintf(what, sizeof what, "line longer than %u bytes", EMBER__RULES_LINE_MAX - 2);
      rc = ffail(&p, lineno, what);
    } else if (memchr(line, '\0', n) != NULL) {
      rc = ffail(&p, lineno, "NUL byte in the line");
    } else if (!ember__utf8_valid(line, n)) {
      rc = ffail(&p, lineno, "the line is not valid UTF-8");
    } else {
      rc = parse_line(&p, lineno, line, n);
    }
  }
  if (rc == 0) rc = close_block(&p);
  if (rc == -ENOMEM && errbuf && errbuf_size)
    snprintf(errbuf, errbuf_size, "%s: out of memory", file);
  ember__alert_rule_free(p.cur.r);
  ember_free(p.lines);
  if (rc != 0) {
    ember__alert_rules_free(p.set);
    return rc;
  }
  *out = p.set;
  return 0;
}

int ember__alert_rules_load(const char *path, ember__alert_rules_t **out, char *errbuf,
                            size_t errbuf_size) {
  if (!path || !out) return -EINVAL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (errbuf && errbuf_size)
      snprintf(errbuf, errbuf_size, "cannot open the rules file %s: %s", path, strerror(e));
    return -e;
  }
  ember_buf_t b;
  ember_buf_init(&b, EMBER__RULES_FILE_MAX);
  int rc = 0;
  char chunk[4096];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      if (errbuf && errbuf_size)
        snprintf(errbuf, errbuf_size, "cannot read the rules file %s: %s", path, strerror(-rc));
      break;
    }
    if (n == 0) break;
    rc = ember_buf_append(&b, chunk, (size_t)n);
    if (rc != 0) {
      if (errbuf && errbuf_size)
        snprintf(errbuf, errbuf_size, "rules file %s: %s (at most %u bytes)", path,
                 ember_strerror(rc), EMBER__RULES_FILE_MAX);
      break;
    }
  }
  close(fd);
  if (rc == 0) rc = ember__alert_rules_parse(b.data, b.len, path, out, errbuf, errbuf_size);
  ember_buf_free(&b);
  return rc;
}
