/* Uploaded source maps over HTTP (docs/api.md, "Source maps"):
 *
 *   POST   /api/v1/sourcemaps?worker=W&version=V&script=S   the map (JSON) -> 201
 *   GET    /api/v1/sourcemaps[?worker=W]                   {"sourcemaps": [...]}
 *   DELETE /api/v1/sourcemaps?worker=W&version=V&script=S  {"deleted": {...}}
 *
 * version may be left out: the map is then for every version of the
 * worker that has no map of its own for that script. The body of a POST is the map itself, up to
 * sourcemaps.max_bytes (the HTTP layer lets this one path take it, one
 * upload at a time). srcmaps.h does the work; a map the decoder refuses is
 * a 400 with its reason, a map too large a 413, one the broker did not
 * take a 503. */
#include <errno.h>
#include <string.h>

#include "api_req.h"
#include "srcmaps.h"

static unsigned no_maps(ember__req_t *r) {
  return ember__req_fail(r, 503, "uploaded source maps are not available on this server");
}

static unsigned answer_status(ember__req_t *r, ember__srcmaps_status_t st, const char *err) {
  switch (st) {
  case EMBER__SRCMAPS_OK: return 0;
  case EMBER__SRCMAPS_BAD: return ember__req_fail(r, 400, "%s", err);
  case EMBER__SRCMAPS_TOO_BIG: return ember__req_fail(r, 413, "%s", err);
  case EMBER__SRCMAPS_NOT_FOUND: return ember__req_fail(r, 404, "%s", err);
  case EMBER__SRCMAPS_UNSHARED: return ember__req_fail(r, 503, "%s", err);
  case EMBER__SRCMAPS_FAILED: break;
  }
  return ember__req_fail_internal(r, "keeping the source map", -ENOMEM);
}

static unsigned h_upload(ember__req_t *r) {
  static const char *const allowed[] = {"worker", "version", "script", NULL};
  unsigned st = ember__req_check_params(r, allowed);
  if (st != 0) return st;
  const char *worker = ember__req_param(r, "worker"), *script = ember__req_param(r, "script");
  if (worker == NULL || script == NULL)
    return ember__req_fail(r, 400,
                           "an upload names the map's worker and script: "
                           "POST /api/v1/sourcemaps?worker=W&version=V&script=app.js with the "
                           "map as the body");
  if (r->in_too_big)
    return ember__req_fail(r, 413, "the source map is larger than sourcemaps.max_bytes (%llu)",
                           (unsigned long long)ember__srcmaps_max_bytes(r->env->srcmaps));
  if (r->in == NULL || r->in_len == 0)
    return ember__req_fail(r, 400, "the body is the source map itself (JSON), and it is empty");
  char err[400] = "";
  json_t *info = NULL;
  ember__srcmaps_status_t s =
      ember__srcmaps_upload(r->env->srcmaps, worker, ember__req_param(r, "version"), script, r->in,
                            r->in_len, &info, err, sizeof err);
  if (s != EMBER__SRCMAPS_OK) return answer_status(r, s, err);
  st = ember__req_answer_json(r, info);
  json_decref(info);
  if (st == 200) r->status = 201;
  return r->status;
}

static unsigned h_delete(ember__req_t *r) {
  static const char *const allowed[] = {"worker", "version", "script", NULL};
  unsigned st = ember__req_check_params(r, allowed);
  if (st != 0) return st;
  const char *worker = ember__req_param(r, "worker"), *version = ember__req_param(r, "version"),
             *script = ember__req_param(r, "script");
  if (worker == NULL || script == NULL)
    return ember__req_fail(r, 400, "a deletion names the map's worker, version and script");
  char err[400] = "";
  ember__srcmaps_status_t s =
      ember__srcmaps_delete(r->env->srcmaps, worker, version, script, err, sizeof err);
  if (s != EMBER__SRCMAPS_OK) return answer_status(r, s, err);
  json_t *doc = json_pack("{s:{s:s, s:s, s:s}}", "deleted", "worker", worker, "version",
                          version ? version : "", "script", script);
  st = doc ? ember__req_answer_json(r, doc) : ember__req_fail_internal(r, "answering", -ENOMEM);
  json_decref(doc);
  return st;
}

static unsigned h_sourcemaps(ember__req_t *r) {
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  r->allow = "GET, HEAD, POST, DELETE";
  if (r->env->srcmaps == NULL) return no_maps(r);
  if (strcmp(r->method, "POST") == 0) return h_upload(r);
  if (strcmp(r->method, "DELETE") == 0) return h_delete(r);
  if (!get)
    return ember__req_fail(r, 405, "method %.16s not allowed: use GET, POST or DELETE", r->method);
  static const char *const allowed[] = {"worker", NULL};
  unsigned st = ember__req_check_params(r, allowed);
  if (st != 0) return st;
  json_t *list = ember__srcmaps_list(r->env->srcmaps, ember__req_param(r, "worker"));
  json_t *doc = list ? json_pack("{s:o}", "sourcemaps", list) : NULL;
  if (doc == NULL) return ember__req_fail_internal(r, "listing the source maps", -ENOMEM);
  st = ember__req_answer_json(r, doc);
  json_decref(doc);
  return st;
}

static const char *sourcemaps_allow(const char *rest) {
  (void)rest;
  return "GET, HEAD, POST, DELETE";
}

const ember__api_route_t ember__api_sourcemap_routes[] = {
    {"/api/v1/sourcemaps", EMBER__ROUTE_METHODS, h_sourcemaps, sourcemaps_allow},
    {NULL, 0, NULL, NULL},
};
