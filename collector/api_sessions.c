/* The API's on-demand session handlers (collector/sessions.h):
 * POST/GET /api/v1/sessions, GET /api/v1/sessions/ID,
 * GET /api/v1/sessions/ID/profile and POST /api/v1/sessions/ID/cancel.
 * docs/api.md (Sessions) describes them; api_req.h the conventions. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <jansson.h>

#include "api_profiles.h"
#include "api_req.h"
#include "ember/codec.h"
#include "fleetq.h"
#include "query.h"
#include "sessions.h"

static unsigned sessions_error(ember__req_t *r, int rc, const char *err, const char *what) {
  switch (rc) {
  case -EINVAL: return ember__req_fail(r, 400, "%s", err);
  case EMBER_ENOTFOUND: return ember__req_fail(r, 404, "%s", err);
  case -EAGAIN: return ember__req_fail(r, 429, "%s", err);
  case -EALREADY: return ember__req_fail(r, 409, "%s", err);
  case EMBER_EKAFKA: return ember__req_fail(r, 503, "%s", err);
  case -ENOKEY: return ember__req_fail(r, 503, "%s", err);
  default: return ember__req_fail_internal(r, what, rc);
  }
}

static unsigned h_session_create(ember__req_t *r) {
  static const char *const fields[] = {"worker", "version",     "actor", "host", "instances",
                                       "type",   "duration_ms", "hz",    NULL};
  json_t *doc = NULL;
  ember__csession_req_t q = {0};
  unsigned st = ember__req_body_object(r, "{\"worker\": \"api\"}", &doc);
  if (st != 0) return st;
  st = ember__req_body_fields(r, doc, fields,
                              "a session takes worker, version, actor, host, instances, type, "
                              "duration_ms and hz");
  if (st != 0) goto cleanup;
  const char *type = NULL;
  st = ember__req_body_str(r, doc, "worker", &q.worker);
  if (st == 0) st = ember__req_body_str(r, doc, "version", &q.version);
  if (st == 0) st = ember__req_body_str(r, doc, "actor", &q.actor);
  if (st == 0) st = ember__req_body_str(r, doc, "host", &q.host);
  if (st == 0) st = ember__req_body_str(r, doc, "type", &type);
  if (st == 0) st = ember__req_body_u32(r, doc, "instances", 0, 1, &q.instances);
  /* 0: the defaults, which the sessions keep within their caps. */
  if (st == 0) st = ember__req_body_u32(r, doc, "duration_ms", 0, 1, &q.duration_ms);
  if (st == 0) st = ember__req_body_u32(r, doc, "hz", 0, 1, &q.hz);
  if (st != 0) goto cleanup;
  if (q.worker == NULL && q.actor == NULL) {
    st = ember__req_fail(r, 400,
                         "field \"worker\" or \"actor\" is required: which isolates to profile");
    goto cleanup;
  }
  q.type = EMBER_SESSION_CPU;
  if (type != NULL && strcmp(type, "memory") == 0) {
    q.type = EMBER_SESSION_MEMORY;
  } else if (type != NULL && strcmp(type, "cpu") != 0) {
    st = ember__req_fail(
        r, 400, "field \"type\": \"%.64s\" is not a session type; use cpu or memory", type);
    goto cleanup;
  }
  char err[400] = "";
  json_t *out = NULL;
  int rc = ember__csessions_create(r->env->sessions, &q, r->now_ns, &out, err, sizeof err);
  if (rc != 0) {
    st = sessions_error(r, rc, err, "starting the session");
    goto cleanup;
  }
  st = ember__req_answer_json(r, out);
  json_decref(out);
  if (st == 200) st = r->status = 201;
cleanup:
  json_decref(doc);
  return st;
}

static unsigned h_session_list(ember__req_t *r) {
  static const char *const none[] = {NULL};
  unsigned st = ember__req_check_params(r, none);
  if (st != 0) return st;
  json_t *doc = NULL;
  int rc = ember__csessions_list(r->env->sessions, r->now_ns, &doc);
  if (rc != 0) return ember__req_fail_internal(r, "listing sessions", rc);
  st = ember__req_answer_json(r, doc);
  json_decref(doc);
  return st;
}

static unsigned h_session_get(ember__req_t *r, const char *id) {
  static const char *const none[] = {NULL};
  unsigned st = ember__req_check_params(r, none);
  if (st != 0) return st;
  json_t *doc = NULL;
  int rc = ember__csessions_get(r->env->sessions, id, r->now_ns, &doc);
  if (rc == EMBER_ENOTFOUND)
    return ember__req_fail(
        r, 404,
        "no session %s: unknown, or finished longer ago than session.keep (or older than "
        "what ember.events still holds)",
        id);
  if (rc != 0) return ember__req_fail_internal(r, "reading the session", rc);
  st = ember__req_answer_json(r, doc);
  json_decref(doc);
  return st;
}

static unsigned h_session_cancel(ember__req_t *r, const char *id) {
  char err[300] = "";
  json_t *doc = NULL;
  int rc = ember__csessions_cancel(r->env->sessions, id, r->now_ns, &doc, err, sizeof err);
  if (rc == EMBER_ENOTFOUND) return ember__req_fail(r, 404, "no session %s", id);
  if (rc != 0) return sessions_error(r, rc, err, "cancelling the session");
  unsigned st = ember__req_answer_json(r, doc);
  json_decref(doc);
  return st;
}

/* A fleet session merge (fleetq.h) for ember__query_session_by: what it
 * misses goes to the request's `partial`. */
static int fleet_session_merge(void *ctx, const char *id, ember_value_type_t vt,
                               ember_profile_t **out, ember_store_session_info_t *info) {
  ember__req_t *r = ctx;
  char partial[sizeof r->partial];
  int rc = ember__fleetq_session_merge(r->env->fleetq, r->env->store, id, vt, out, info, partial,
                                       sizeof partial);
  if (rc == 0) ember__req_partial(r, partial);
  return rc;
}

/* raw=VT with local=1: this store's results of the session in one store
 * value type, in the wire encoding, as fleet queries ask their peers
 * (fleetq.h). Whatever this instance knows of the session. */
static unsigned answer_session_raw(ember__req_t *r, const char *id, const char *raw) {
  ember_value_type_t vt;
  unsigned st = ember__api_parse_raw(r, raw, &vt);
  if (st != 0) return st;
  ember_profile_t *p = NULL;
  int rc = ember_store_session_merge(r->env->store, id, vt, &p, NULL);
  if (rc == 0) rc = ember_codec_encode(p, &r->body);
  ember_profile_free(p);
  if (rc != 0) return ember__req_fail_internal(r, "encoding this store's session results", rc);
  r->ctype = "application/x-ember-profile";
  return r->status = 200;
}

/* The merged result of a session in one value type (query.h), from every
 * collector's store (fleetq.h) unless asked with local=1. */
static unsigned h_session_profile(ember__req_t *r, const char *id) {
  static const char *const allowed[] = {"type", "format", "max_nodes", "limit",
                                        "sort", "raw",    NULL};
  uint64_t max_nodes, limit;
  ember__qtype_t type;
  size_t fmt;
  unsigned st = ember__req_check_params(r, allowed);
  if (st == 0 && ember__req_param(r, "raw") != NULL)
    return answer_session_raw(r, id, ember__req_param(r, "raw"));
  if (st == 0) st = ember__api_parse_type(r, &type);
  if (st == 0) st = ember__req_u64(r, "max_nodes", 2000, 0, 1000000, &max_nodes);
  if (st == 0) st = ember__req_u64(r, "limit", 50, 1, 100000, &limit);
  if (st == 0) st = ember__api_parse_format(r, &fmt);
  if (st == 0) st = ember__api_parse_sort(r);
  if (st != 0) return st;
  char err[300] = "";
  ember_session_type_t stype = EMBER_SESSION_CPU;
  int rc = ember__csessions_result_ready(r->env->sessions, id, &stype, err, sizeof err);
  if (rc == -EAGAIN) return ember__req_fail(r, 409, "%s", err);
  bool known = rc == 0;
  if (rc != 0 && rc != EMBER_ENOTFOUND)
    return ember__req_fail_internal(r, "reading the session", rc);
  if (ember__req_param(r, "type") == NULL && stype == EMBER_SESSION_MEMORY)
    type = EMBER__Q_ALLOC_BYTES;
  ember_profile_t *p = NULL;
  ember_store_session_info_t info = {0};
  rc = ember__req_fleet(r) ? ember__query_session_by(fleet_session_merge, r, id, type, &p, &info)
                           : ember__query_session(r->env->store, id, type, &p, &info);
  if (rc != 0) {
    return ember__req_fail_internal(r, "merging the session's results", rc);
  }
  /* A session this instance does not know (another instance's, or from
   * before a restart) is served when the store holds its results. */
  if (!known && info.results == 0) {
    ember_profile_free(p);
    return ember__req_fail(r, 404, "no session %s and no stored results for it", id);
  }
  st = ember__api_answer_profile(r, p, fmt, max_nodes, limit, "ember-session");
  ember_profile_free(p);
  return st;
}

static bool id_ok(const char *id, size_t len) {
  if (len == 0 || len > 128) return false;
  for (size_t i = 0; i < len; i++) {
    char ch = id[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          ch == '-' || ch == '_'))
      return false;
  }
  return true;
}

/* /api/v1/sessions[/ID[/profile|/cancel]]: r->rest is what follows
 * /api/v1/sessions ("" or "/..."). */
static unsigned h_sessions(ember__req_t *r) {
  const char *rest = r->rest;
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  bool post = strcmp(r->method, "POST") == 0;
  if (r->env->sessions == NULL)
    return ember__req_fail(r, 503, "sessions are not available on this server (no Kafka producer)");
  if (*rest == '\0' || strcmp(rest, "/") == 0) {
    r->allow = "GET, HEAD, POST";
    if (post) return h_session_create(r);
    if (get) return h_session_list(r);
    return ember__req_fail(r, 405, "method %.16s not allowed: use GET or POST", r->method);
  }
  rest++;
  const char *slash = strchr(rest, '/');
  size_t idlen = slash ? (size_t)(slash - rest) : strlen(rest);
  char id[129];
  if (!id_ok(rest, idlen))
    return ember__req_fail(r, 404,
                           "no session %.*s: session ids are 1 to 128 letters, digits, - and _",
                           (int)(idlen > 64 ? 64 : idlen), rest);
  memcpy(id, rest, idlen);
  id[idlen] = '\0';
  const char *sub = slash ? slash : "";
  if (sub[0] == '\0') {
    if (get) return h_session_get(r, id);
    return ember__req_fail(r, 405, "method %.16s not allowed: use GET", r->method);
  }
  if (strcmp(sub, "/profile") == 0) {
    if (get) return h_session_profile(r, id);
    return ember__req_fail(r, 405, "method %.16s not allowed: use GET", r->method);
  }
  if (strcmp(sub, "/cancel") == 0) {
    r->allow = "POST";
    if (post) return h_session_cancel(r, id);
    return ember__req_fail(r, 405, "method %.16s not allowed: use POST", r->method);
  }
  return ember__req_fail(r, 404, "no such path: %.128s (see docs/api.md, Sessions)", r->url);
}

/* The methods a session path takes, for the Allow header of a 405 that is
 * answered before the path is routed. */
static const char *sessions_allow(const char *rest) {
  size_t n = strlen(rest);
  if (n == 0 || strcmp(rest, "/") == 0) return "GET, HEAD, POST";
  if (n > 7 && rest[0] == '/' && strcmp(rest + n - 7, "/cancel") == 0) return "POST";
  return "GET, HEAD";
}

const ember__api_route_t ember__api_session_routes[] = {
    {"/api/v1/sessions", EMBER__ROUTE_SUBTREE | EMBER__ROUTE_METHODS, h_sessions, sessions_allow},
    {NULL, 0, NULL, NULL},
};
