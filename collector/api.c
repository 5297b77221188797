/* The API's HTTP layer: start and stop, the routing table, the bearer
 * token, /healthz, /metrics and the dashboard's files, served through
 * Ember's HTTP layer (src/http.h), which owns the daemon, the connections
 * and the responses. The endpoints of docs/api.md are in the handler files
 * (api_series.c, api_profiles.c, api_sessions.c, api_alerts.c,
 * api_fleet.c), which share the request helpers of api_req.h. */
#include <errno.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "api.h"
#include "api_req.h"
#include "srcmaps.h"
#include "ui.h"
#include "ember/log.h"
#include "http.h"

#define LOG "api"

#define DEFAULT_LISTEN "127.0.0.1:7272"

const char *const ember__api_config_keys[] = {EMBER__API_CONFIG_KEYS, NULL};

int ember__api_read_config(const ember_config_t *cfg, ember__api_opts_t *o, char *errbuf,
                           size_t errbuf_size) {
  uint64_t threads, conns, per_ip;
  int64_t timeout;
  int rc = ember_config_get_u64(cfg, "api.threads", 2, 1, EMBER__HTTP_MAX_THREADS, &threads, errbuf,
                                errbuf_size);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "api.max_connections", 256, 1, 65536, &conns, errbuf,
                              errbuf_size);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "api.max_connections_per_ip", 32, 1, 65536, &per_ip, errbuf,
                              errbuf_size);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "api.request_timeout", 10 * EMBER__SEC_NS,
                                      100 * EMBER__MS_NS, 3600 * EMBER__SEC_NS, &timeout, errbuf,
                                      errbuf_size);
  if (rc != 0) return rc;
  o->threads = (unsigned)threads;
  o->max_connections = (unsigned)conns;
  o->max_per_ip = (unsigned)per_ip;
  o->request_timeout_ms = (unsigned)(timeout / EMBER__MS_NS);
  o->allowed_hosts = ember_config_get(cfg, "api.allowed_hosts");
  return 0;
}

struct ember__api {
  ember__http_t *http;
  ember__api_env_t env; /* what the handlers see */
  char *token;          /* NULL = no authentication */
  size_t token_len;

  bool (*ready)(void *ctx, char *why, size_t n); /* NULL: /healthz always ok */
  void *ready_ctx;
};

static unsigned h_metrics(ember__req_t *r) {
  static const char *const none[] = {NULL};
  unsigned st = ember__req_check_params(r, none);
  if (st != 0) return st;
  r->ctype = "text/plain; version=0.0.4";
  r->status = 200;
  if (r->env->metrics == NULL) return 200;
  int rc = ember_metrics_render(r->env->metrics, &r->body);
  return rc == 0 ? 200 : ember__req_fail_internal(r, "rendering metrics", rc);
}

static const ember__api_route_t server_routes[] = {
    {"/metrics", 0, h_metrics, NULL},
    {NULL, 0, NULL, NULL},
};

/* Every route, table by table; an area's handler file joins with one line. */
static const ember__api_route_t *const route_tables[] = {
    server_routes,           ember__api_series_routes,    ember__api_profile_routes,
    ember__api_heap_routes,  ember__api_session_routes,   ember__api_alert_routes,
    ember__api_fleet_routes, ember__api_sourcemap_routes,
};

/* The route of `url` and, in *rest, what follows its path; NULL if none. */
static const ember__api_route_t *find_route(const char *url, const char **rest) {
  for (size_t t = 0; t < sizeof route_tables / sizeof route_tables[0]; t++) {
    for (const ember__api_route_t *rt = route_tables[t]; rt->path != NULL; rt++) {
      size_t n = strlen(rt->path);
      if (strncmp(url, rt->path, n) != 0) continue;
      if (url[n] == '\0' || ((rt->flags & EMBER__ROUTE_SUBTREE) && url[n] == '/')) {
        *rest = url + n;
        return rt;
      }
    }
  }
  return NULL;
}

/* ------------------------------------------------------------- server -- */

/* Compare in time that depends only on the token's length, so a client
 * cannot find the token byte by byte from response times. */
static bool token_ok(const ember__api_t *api, const char *hdr) {
  if (hdr == NULL || strncasecmp(hdr, "Bearer ", 7) != 0) return false;
  const char *got = hdr + 7;
  size_t glen = strlen(got);
  volatile unsigned char diff = glen != api->token_len;
  for (size_t i = 0; i < api->token_len; i++)
    diff |= (unsigned char)(api->token[i] ^ (i < glen ? got[i] : 0));
  return diff == 0;
}

/* The dashboard: / is its page, /ui/NAME its other files. They are code,
 * not data, so they are served without the token: the page asks for the
 * token itself and sends it with its API calls. */
static bool route_ui(ember__req_t *r) {
  const char *name = NULL;
  if (strcmp(r->url, "/") == 0 || strcmp(r->url, "/index.html") == 0) {
    name = "index.html";
  } else if (strncmp(r->url, "/ui/", 4) == 0) {
    name = r->url + 4;
  } else {
    return false;
  }
  for (const ember__ui_asset_t *a = ember__ui_assets; a->name != NULL; a++) {
    if (strcmp(a->name, name) != 0) continue;
    const char *inm = ember__http_header(r->q, "If-None-Match");
    r->asset = a;
    r->status = inm != NULL && strstr(inm, a->etag) != NULL ? 304 : 200;
    r->ctype = a->ctype;
    return true;
  }
  ember__req_fail(r, 404, "no such dashboard file: %.128s", r->url);
  return true;
}

/* Sent with the dashboard's files: they may load only from this server,
 * in no frame, and the browser must not guess types. */
static void ui_headers(ember__http_answer_t *a, const ember__ui_asset_t *asset) {
  ember__http_answer_header(a, "ETag", asset->etag);
  ember__http_answer_header(a, "Cache-Control", "no-cache");
  ember__http_answer_header(a, "X-Content-Type-Options", "nosniff");
  ember__http_answer_header(a, "Referrer-Policy", "no-referrer");
  ember__http_answer_header(a, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                            "base-uri 'none'; frame-ancestors 'none'");
}

/* A fleet answer that misses part of the fleet says so: the Ember-Partial
 * header, and "partial" first in a JSON object body (tree, top, lists,
 * timelines), so no reader takes a smaller answer for the whole one. */
static void mark_partial(const ember__req_t *r, ember__http_answer_t *a) {
  char clean[sizeof r->partial];
  size_t n = 0;
  for (const char *p = r->partial; *p != '\0' && n + 1 < sizeof clean; p++)
    clean[n++] = (unsigned char)*p < 0x20 || *p == 0x7f ? ' ' : *p;
  clean[n] = '\0';
  ember__http_answer_header(a, "Ember-Partial", clean);
  if (a->body.len == 0 || a->body.data[0] != '{' || r->ctype == NULL ||
      strncmp(r->ctype, "application/json", 16) != 0)
    return;
  json_t *js = json_string(clean);
  char *enc = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
  json_decref(js);
  if (enc == NULL) return;
  size_t k = 1;
  while (k < a->body.len && (a->body.data[k] == ' ' || a->body.data[k] == '\n')) k++;
  bool empty = k < a->body.len && a->body.data[k] == '}';
  ember_buf_t nb;
  ember_buf_init(&nb, a->body.len + strlen(enc) + 16);
  if (ember_buf_puts(&nb, "{\"partial\":") == 0 && ember_buf_puts(&nb, enc) == 0 &&
      ember_buf_puts(&nb, empty ? "" : ",") == 0 &&
      ember_buf_append(&nb, a->body.data + 1, a->body.len - 1) == 0) {
    ember_buf_free(&a->body);
    a->body = nb;
  } else {
    ember_buf_free(&nb);
  }
  free(enc);
}

/* Hand the handler's answer to the layer. */
static void put_answer(ember__req_t *r, ember__http_answer_t *a) {
  a->status = r->status;
  a->ctype = r->ctype;
  a->allow = r->allow;
  if (r->asset != NULL && r->status < 400) {
    a->fixed = r->asset->data;
    a->fixed_len = r->asset->len;
    ui_headers(a, r->asset);
  } else if (r->status < 300) {
    if (r->fixed_body != NULL) {
      a->fixed = r->fixed_body;
      a->fixed_len = strlen(r->fixed_body);
    } else {
      a->body = r->body;
      ember_buf_init(&r->body, 0);
    }
    if (r->disposition[0] != '\0')
      ember__http_answer_header(a, "Content-Disposition", r->disposition);
    if (r->partial[0] != '\0') mark_partial(r, a);
  } else {
    snprintf(a->err, sizeof a->err, "%s", r->err);
    if (r->status == 401) ember__http_answer_header(a, "WWW-Authenticate", "Bearer");
  }
}

/* The methods a path takes, for the Allow header of a 405 that is
 * answered before the path is routed. */
static const char *allow_for(const char *url) {
  const char *rest = NULL;
  const ember__api_route_t *rt = find_route(url, &rest);
  return rt != NULL && rt->allow != NULL ? rt->allow(rest) : "GET, HEAD";
}

static void route(const ember__api_t *api, ember__req_t *r) {
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  if (strcmp(r->url, "/healthz") == 0 && get) {
    char why[400];
    if (api->ready && !api->ready(api->ready_ctx, why, sizeof why)) {
      ember__req_fail(r, 503, "not ready: %s", why);
      return;
    }
    r->status = 200;
    r->ctype = "text/plain";
    r->fixed_body = "ok\n";
    return;
  }
  if (get && route_ui(r)) return;
  /* DELETE reaches only the paths that say they take it (rules). */
  bool del = strcmp(r->method, "DELETE") == 0 && strstr(allow_for(r->url), "DELETE") != NULL;
  if (!get && strcmp(r->method, "POST") != 0 && !del) {
    r->allow = allow_for(r->url);
    ember__req_fail(r, 405, "method %.16s not allowed: use %s", r->method, r->allow);
    return;
  }
  if (api->token != NULL && !token_ok(api, ember__http_header(r->q, "Authorization"))) {
    ember__req_fail(r, 401,
                    "missing or wrong bearer token: send Authorization: Bearer <api.token>");
    return;
  }
  const char *sub = NULL;
  const ember__api_route_t *rt = find_route(r->url, &sub);
  if (!get && (rt == NULL || !(rt->flags & EMBER__ROUTE_METHODS))) {
    r->allow = allow_for(r->url);
    ember__req_fail(r, 405, "method %.16s not allowed: use %s", r->method, r->allow);
    return;
  }
  if (rt != NULL) {
    r->rest = sub;
    ember__req_read_args(r);
    rt->fn(r);
    return;
  }
  ember__req_fail(r, 404, "no such path: %.128s (the API is under /api/v1/, see docs/api.md)",
                  r->url);
}

/* The layer's handler: one request, answered into `a`. */
static void serve(void *ctx, ember__http_req_t *q, ember__http_answer_t *a) {
  ember__api_t *api = ctx;
  /* On the stack (about 1.5 KiB), so that even a failing allocator gets
   * an answer. */
  ember__req_t r = {.env = &api->env,
                    .q = q,
                    .url = ember__http_url(q),
                    .method = ember__http_method(q),
                    .now_ns = ember__http_now_ns(q)};
  r.body = a->body;
  ember_buf_init(&a->body, 0);
  r.in = ember__http_body(q, &r.in_len, &r.in_too_big);
  route(api, &r);
  put_answer(&r, a);
  ember_buf_free(&r.body);
}

/* Uploads of source maps may be larger than other bodies (srcmaps.h). */
static size_t big_body(void *ctx, const char *method, const char *url) {
  const ember__api_t *api = ctx;
  if (api->env.srcmaps == NULL || strcmp(method, "POST") != 0) return 0;
  return strcmp(url, "/api/v1/sourcemaps") == 0 ? (size_t)ember__srcmaps_max_bytes(api->env.srcmaps)
                                                : 0;
}

int ember__api_start(const ember__api_opts_t *opts, ember__api_t **out, char *errbuf,
                     size_t errbuf_size) {
  char dummy[8];
  if (errbuf == NULL || errbuf_size == 0) {
    errbuf = dummy;
    errbuf_size = sizeof dummy;
  }
  errbuf[0] = '\0';
  if (opts == NULL || out == NULL || opts->store == NULL || opts->threads > EMBER__HTTP_MAX_THREADS)
    return -EINVAL;
  const char *listen = opts->listen ? opts->listen : DEFAULT_LISTEN;
  ember__api_t *api = ember_calloc(1, sizeof *api);
  if (api == NULL) return -ENOMEM;
  api->env.store = opts->store;
  api->env.metrics = opts->metrics;
  api->env.registry = opts->registry;
  api->env.sessions = opts->sessions;
  api->env.alerts = opts->alerts;
  api->env.fleet = opts->fleet;
  api->env.fleetq = opts->fleetq;
  api->env.srcmaps = opts->srcmaps;
  api->ready = opts->ready;
  api->ready_ctx = opts->ready_ctx;
  api->env.max_response = opts->max_response ? opts->max_response : EMBER__HTTP_DEFAULT_RESPONSE;
  if (opts->token != NULL && opts->token[0] != '\0') {
    api->token = ember_strdup(opts->token);
    if (api->token == NULL) {
      ember_free(api);
      return -ENOMEM;
    }
    api->token_len = strlen(api->token);
  }
  unsigned threads = opts->threads ? opts->threads : 2;
  ember__http_opts_t ho = {.listen = listen,
                           .listen_key = "api.listen",
                           .log = LOG,
                           .metric_prefix = "ember_api",
                           .metrics = opts->metrics,
                           .threads = threads,
                           .max_connections = opts->max_connections,
                           .max_per_ip = opts->max_per_ip,
                           .request_timeout_ms = opts->request_timeout_ms,
                           .allowed_hosts = opts->allowed_hosts,
                           .hosts_key = "api.allowed_hosts",
                           .max_body = EMBER__REQ_MAX_BODY,
                           .big_body = big_body,
                           .max_response = api->env.max_response,
                           .handler = serve,
                           .ctx = api};
  int rc = ember__http_start(&ho, &api->http, errbuf, errbuf_size);
  if (rc != 0) {
    ember_free(api->token);
    ember_free(api);
    return rc;
  }
  EMBER_INFO(LOG, "serving the HTTP API on %s (port %u, %u threads%s)", listen,
             ember__http_port(api->http), threads, api->token ? ", bearer token required" : "");
  *out = api;
  return 0;
}

uint16_t ember__api_port(const ember__api_t *api) { return api ? ember__http_port(api->http) : 0; }

void ember__api_stop(ember__api_t *api) {
  if (api == NULL) return;
  ember__http_stop(api->http);
  ember_free(api->token);
  ember_free(api);
}
