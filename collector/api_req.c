/* The API's request helpers (api_req.h): parameters, bodies, errors and
 * JSON answers, shared by every handler file. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "api_req.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "json.h"

#define LOG "api"

/* ------------------------------------------------------------ errors -- */

unsigned ember__req_fail(ember__req_t *r, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->err, sizeof r->err, fmt, ap);
  va_end(ap);
  r->status = status;
  return status;
}

unsigned ember__req_fail_internal(ember__req_t *r, const char *what, int rc) {
  if (rc == EMBER_ETOOBIG)
    return ember__req_fail(
        r, 413,
        "the response would be larger than %zu bytes: narrow the time range or the "
        "selector, or lower max_nodes or limit",
        r->env->max_response);
  EMBER_ERROR_LIMITED(LOG, "GET %s: %s failed: %s", r->url, what, ember_strerror(rc));
  return ember__req_fail(r, 500, "internal error: %s failed (%s); the server log has details", what,
                         ember_store_strerror(rc));
}

/* -------------------------------------------------------- parameters -- */

static bool collect_param(void *cls, const char *key, const char *value) {
  ember__req_t *r = cls;
  if (r->nparams == EMBER__REQ_MAX_PARAMS) {
    r->too_many = true;
    return false;
  }
  r->params[r->nparams++] = (ember__req_param_t){key, value};
  return true;
}

void ember__req_read_args(ember__req_t *r) {
  ember__http_args(r->q, collect_param, r);
  /* local=1 is the router's: every endpoint takes it. */
  for (size_t i = 0; i < r->nparams; i++) {
    if (strcmp(r->params[i].key, "local") != 0) continue;
    r->local = r->params[i].value != NULL && strcmp(r->params[i].value, "1") == 0;
    memmove(&r->params[i], &r->params[i + 1], (r->nparams - i - 1) * sizeof r->params[0]);
    r->nparams--;
    i--;
  }
}

void ember__req_partial(ember__req_t *r, const char *what) {
  if (what == NULL || what[0] == '\0') return;
  size_t len = strlen(r->partial);
  if (strstr(r->partial, what) != NULL) return; /* said once */
  snprintf(r->partial + len, sizeof r->partial - len, "%s%s", len ? "; " : "", what);
}

unsigned ember__req_check_params_rep(ember__req_t *r, const char *const *allowed,
                                     const char *repeatable) {
  if (r->too_many)
    return ember__req_fail(r, 400, "too many parameters: at most %u", EMBER__REQ_MAX_PARAMS);
  for (size_t i = 0; i < r->nparams; i++) {
    const char *k = r->params[i].key;
    bool known = false;
    for (const char *const *a = allowed; *a != NULL && !known; a++) known = strcmp(*a, k) == 0;
    if (!known) {
      char list[400] = "none";
      size_t off = 0;
      for (const char *const *a = allowed; *a != NULL && off < sizeof list; a++) {
        int n = snprintf(list + off, sizeof list - off, "%s%s", off ? ", " : "", *a);
        if (n < 0) break;
        off += (size_t)n;
      }
      return ember__req_fail(r, 400, "unknown parameter \"%.64s\": this endpoint takes %s", k,
                             list);
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(r->params[j].key, k) == 0 && (repeatable == NULL || strcmp(k, repeatable) != 0))
        return ember__req_fail(r, 400, "parameter \"%.64s\" is given more than once", k);
    }
    if (r->params[i].value == NULL || r->params[i].value[0] == '\0')
      return ember__req_fail(r, 400, "parameter \"%.64s\" needs a value (%.64s=...)", k, k);
  }
  return 0;
}

unsigned ember__req_check_params(ember__req_t *r, const char *const *allowed) {
  return ember__req_check_params_rep(r, allowed, NULL);
}

const char *ember__req_param(const ember__req_t *r, const char *key) {
  for (size_t i = 0; i < r->nparams; i++) {
    if (strcmp(r->params[i].key, key) == 0) return r->params[i].value;
  }
  return NULL;
}

#define TIME_FORMS                                                                                 \
  "use now, a time before now (-15m, now-2h), Unix seconds (1764410400) or RFC 3339 "              \
  "(2026-11-29T10:00:00Z)"

unsigned ember__req_time(ember__req_t *r, const char *key, const char *dflt, int64_t *out) {
  const char *v = ember__req_param(r, key);
  int rc = ember_parse_time(v ? v : dflt, r->now_ns, out);
  if (rc == -ERANGE)
    return ember__req_fail(r, 400, "parameter \"%s\": \"%.64s\" is out of range", key, v);
  if (rc != 0)
    return ember__req_fail(r, 400, "parameter \"%s\": \"%.64s\" is not a time; " TIME_FORMS, key,
                           v);
  return 0;
}

unsigned ember__req_step(ember__req_t *r, int64_t from, int64_t to, int64_t *step, uint64_t *nb) {
  /* to > from, so the difference fits in uint64 even when it does not fit
   * in int64. */
  uint64_t span = (uint64_t)to - (uint64_t)from;
  const char *sv = ember__req_param(r, "step");
  if (sv != NULL) {
    if (ember_parse_duration_ns(sv, EMBER__SEC_NS, step) != 0 ||
        *step < EMBER__TIMELINE_MIN_STEP_NS)
      return ember__req_fail(
          r, 400,
          "parameter \"step\": \"%.64s\" is not a duration of at least 10s; use a number "
          "with a unit (10s, 5m, 1h) or bare seconds",
          sv);
  } else {
    /* The shortest whole multiple of 10 s that gives at most 500 buckets. */
    uint64_t per =
        span / EMBER__TIMELINE_DEFAULT_BUCKETS + (span % EMBER__TIMELINE_DEFAULT_BUCKETS != 0);
    uint64_t tens = per / (uint64_t)EMBER__TIMELINE_MIN_STEP_NS +
                    (per % (uint64_t)EMBER__TIMELINE_MIN_STEP_NS != 0);
    if (tens == 0) tens = 1;
    *step = tens > (uint64_t)(INT64_MAX / EMBER__TIMELINE_MIN_STEP_NS)
                ? INT64_MAX
                : (int64_t)tens * EMBER__TIMELINE_MIN_STEP_NS;
  }
  *nb = span / (uint64_t)*step + (span % (uint64_t)*step != 0);
  if (*nb > EMBER__TIMELINE_MAX_BUCKETS)
    return ember__req_fail(
        r, 400,
        "parameter \"step\": %llu buckets of %lld s over [from, to) is more than %u; "
        "raise step or narrow from/to",
        (unsigned long long)*nb, (long long)(*step / EMBER__SEC_NS), EMBER__TIMELINE_MAX_BUCKETS);
  return 0;
}

unsigned ember__req_range(ember__req_t *r, const char *kfrom, const char *kto, const char *dfrom,
                          const char *dto, int64_t *from, int64_t *to) {
  unsigned st = ember__req_time(r, kfrom, dfrom, from);
  if (st == 0) st = ember__req_time(r, kto, dto, to);
  if (st == 0 && *from >= *to)
    return ember__req_fail(r, 400, "parameter \"%s\" must be before \"%s\" (the range is [%s, %s))",
                           kfrom, kto, kfrom, kto);
  return st;
}

unsigned ember__req_u64(ember__req_t *r, const char *key, uint64_t dflt, uint64_t min, uint64_t max,
                        uint64_t *out) {
  const char *v = ember__req_param(r, key);
  if (v == NULL) {
    *out = dflt;
    return 0;
  }
  if (ember_parse_u64(v, min, max, out) != 0)
    return ember__req_fail(r, 400,
                           "parameter \"%s\": \"%.64s\" is not a whole number from %llu to %llu",
                           key, v, (unsigned long long)min, (unsigned long long)max);
  return 0;
}

void ember__req_selector(const ember__req_t *r, const char *prefix,
                         const ember_store_selector_t *base, ember_store_selector_t *sel) {
  static const char *const keys[] = {"worker", "version", "host", "actor"};
  const char *vals[4];
  for (size_t i = 0; i < 4; i++) {
    char k[32];
    snprintf(k, sizeof k, "%s%s", prefix, keys[i]);
    vals[i] = ember__req_param(r, k);
  }
  *sel = (ember_store_selector_t){vals[0], vals[1], vals[2], vals[3]};
  if (base != NULL) {
    /* Absent: the base's value; "*": any, even where the base has one. */
    const char *bvals[4] = {base->worker, base->version, base->host, base->actor};
    for (size_t i = 0; i < 4; i++) {
      if (vals[i] == NULL) {
        vals[i] = bvals[i];
      } else if (strcmp(vals[i], "*") == 0) {
        vals[i] = NULL;
      }
    }
    *sel = (ember_store_selector_t){vals[0], vals[1], vals[2], vals[3]};
  }
}

/* ------------------------------------------------------------- bodies -- */

unsigned ember__req_body_object(ember__req_t *r, const char *example, json_t **out) {
  if (r->in_too_big)
    return ember__req_fail(r, 413, "the request body is larger than %zu bytes",
                           EMBER__REQ_MAX_BODY);
  if (r->in == NULL || r->in_len == 0)
    return ember__req_fail(r, 400, "the request needs a JSON body, e.g. %s", example);
  json_error_t je;
  json_t *doc = json_loadb(r->in, r->in_len, JSON_REJECT_DUPLICATES, &je);
  if (doc == NULL)
    return ember__req_fail(r, 400, "the body is not valid JSON: %.200s (line %d, column %d)",
                           je.text, je.line, je.column);
  if (!json_is_object(doc)) {
    json_decref(doc);
    return ember__req_fail(r, 400, "the body must be a JSON object, e.g. %s", example);
  }
  *out = doc;
  return 0;
}

unsigned ember__req_body_fields(ember__req_t *r, const json_t *doc, const char *const *fields,
                                const char *takes) {
  const char *key;
  json_t *val;
  /* json_object_foreach takes a non-const object but only reads it. */
  json_object_foreach((json_t *)(uintptr_t)doc, key, val) {
    bool known = false;
    for (size_t i = 0; fields[i] != NULL && !known; i++) known = strcmp(fields[i], key) == 0;
    if (!known) return ember__req_fail(r, 400, "unknown field \"%.64s\": %s", key, takes);
  }
  return 0;
}

unsigned ember__req_body_str(ember__req_t *r, const json_t *doc, const char *key,
                             const char **out) {
  const json_t *v = json_object_get(doc, key);
  *out = NULL;
  if (v == NULL || json_is_null(v)) return 0;
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 256 ||
      strlen(json_string_value(v)) != json_string_length(v))
    return ember__req_fail(r, 400, "field \"%s\" must be a non-empty string of at most 256 bytes",
                           key);
  *out = json_string_value(v);
  return 0;
}

unsigned ember__req_body_u32(ember__req_t *r, const json_t *doc, const char *key, uint32_t dflt,
                             uint32_t min, uint32_t *out) {
  const json_t *v = json_object_get(doc, key);
  *out = dflt;
  if (v == NULL || json_is_null(v)) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min)
    return ember__req_fail(r, 400, "field \"%s\" must be a whole number of at least %" PRIu32, key,
                           min);
  json_int_t n = json_integer_value(v);
  *out = n > (json_int_t)UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  return 0;
}

/* ------------------------------------------------------------ answers -- */

unsigned ember__req_answer_json(ember__req_t *r, const json_t *j) {
  int rc = ember__json_dump(j, &r->body);
  if (rc != 0) return ember__req_fail_internal(r, "writing JSON", rc);
  r->status = 200;
  r->ctype = "application/json";
  return 200;
}

json_t *ember__req_jarray_in(json_t *obj, const char *key) {
  json_t *a = json_array();
  return ember__json_set(obj, key, a) == 0 ? a : NULL;
}

json_t *ember__req_range_doc(int64_t from, int64_t to) {
  json_t *doc = json_object();
  if (doc == NULL) return NULL;
  if (ember__json_set(doc, "from_ms", json_integer(ember__req_ms(from))) != 0 ||
      ember__json_set(doc, "to_ms", json_integer(ember__req_ms(to))) != 0) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

int ember__req_set_labels(json_t *o, const ember_labels_t *l) {
  int rc = ember__json_set(o, "worker", ember__json_str(l->worker));
  if (rc == 0) rc = ember__json_set(o, "version", ember__json_str(l->version));
  if (rc == 0) rc = ember__json_set(o, "host", ember__json_str(l->host));
  if (rc == 0) rc = ember__json_set(o, "actor", ember__json_str(l->actor));
  return rc;
}

json_t *ember__req_int_array(const int64_t *v, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; i < n && a != NULL; i++) {
    if (ember__json_push(a, json_integer(v[i])) != 0) {
      json_decref(a);
      a = NULL;
    }
  }
  return a;
}
