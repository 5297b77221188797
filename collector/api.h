/* The HTTP API (docs/api.md): libmicrohttpd serving /api/v1/..., /healthz
 * and /metrics from one store. Internal to ember-collector and `ember up`.
 *
 * The server runs libmicrohttpd's internal polling threads as a pool of
 * `threads` threads; each request is answered on the thread that read it,
 * and opens its own store read transactions, so queries never block ingest
 * and a slow query holds up only the connections of its own thread.
 *
 * Limits: those of the HTTP layer (src/http.h: connections in all and per
 * client address, a deadline for each request to arrive), 32 query
 * parameters per request, and a response body of at most `max_response`
 * bytes (413 past it). */
#ifndef EMBER_COLLECTOR_API_H
#define EMBER_COLLECTOR_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/config.h"
#include "ember/metrics.h"
#include "ember/store.h"
#include "registry.h"
#include "sessions.h"

typedef struct ember__api ember__api_t;

typedef struct ember__api_opts {
  const char *listen;                 /* "127.0.0.1:7272" (default when NULL), ":7272" for every
                                         IPv4 address, "localhost:7272", "[::1]:7272" (IPv6),
                                         "[::]:7272" (every address); port 0 picks one.
                                         Borrowed for the call. */
  const char *token;                  /* bearer token; NULL or "" = no authentication. Copied. */
  ember_store_t *store;               /* borrowed; must outlive the server */
  ember_metrics_t *metrics;           /* rendered at /metrics; NULL = empty. The API
                                         registers its own request metrics in it at
                                         start, so start before other threads render it.
                                         Borrowed; must outlive the server. */
  ember__registry_t *registry;        /* served at /api/v1/targets; NULL = none. Borrowed. */
  ember__csessions_t *sessions;       /* /api/v1/sessions; NULL = those routes answer 503.
                                        Borrowed; must outlive the server. */
  struct ember__alerts *alerts;       /* /api/v1/rules and /api/v1/alerts; NULL = those answer 503.
                                        Borrowed; must outlive the server. */
  const struct ember__fleetq *fleetq; /* NULL: answers from this store alone (fleetq.h) */
  struct ember__fleet *fleet;         /* /api/v1/collectors; NULL = an empty list. Borrowed; must
                                        outlive the server. */
  struct ember__srcmaps *srcmaps;     /* /api/v1/sourcemaps; NULL = that answers 503. Borrowed;
                                        must outlive the server. */
  unsigned threads;                   /* worker threads; 0 = 2, at most 64 */
  size_t max_response;                /* largest response body in bytes; 0 = 64 MiB */
  /* The HTTP layer's limits (src/http.h): 0 = its defaults (256
   * connections, 32 per client address, 10 s for a request to arrive). */
  unsigned max_connections, max_per_ip, request_timeout_ms;
  /* Host names the API answers to besides localhost and IP addresses
   * ("ember.example.com,ember"; "*" = any); NULL = none. Copied. */
  const char *allowed_hosts;

  /* /healthz: NULL = always ready. Else called per request (from any API
   * thread): false = answer 503 with `why` (a sentence, at most why_size
   * bytes) as the JSON error. ready_ctx is borrowed; must outlive the server. */
  bool (*ready)(void *ready_ctx, char *why, size_t why_size);
  void *ready_ctx;
} ember__api_opts_t;

/* The config keys the API reads, for ember_config_check lists. */
#define EMBER__API_CONFIG_KEYS                                                                     \
  "api.listen", "api.token", "api.threads", "api.max_connections", "api.max_connections_per_ip",   \
      "api.request_timeout", "api.allowed_hosts"
/* The same, NULL-terminated. */
extern const char *const ember__api_config_keys[];

/* Read the API's keys but api.listen and api.token (which the caller
 * reads as strings) into `o`: api.threads, api.max_connections,
 * api.max_connections_per_ip, api.request_timeout, api.allowed_hosts
 * (borrowed from cfg). Returns 0 or EMBER_ECONFIG with a sentence in
 * errbuf. */
int ember__api_read_config(const ember_config_t *cfg, ember__api_opts_t *o, char *errbuf,
                           size_t errbuf_size);

/* Start serving. Returns 0, -EINVAL (no store, no out, threads > 64),
 * EMBER_ECONFIG (bad listen address), -errno (cannot bind: errbuf says
 * which address), -ENOMEM. errbuf may be NULL. */
int ember__api_start(const ember__api_opts_t *opts, ember__api_t **out, char *errbuf,
                     size_t errbuf_size);
/* The port actually bound (useful with port 0); 0 for NULL. */
uint16_t ember__api_port(const ember__api_t *api);
/* Stop: refuse new connections, answer requests that arrive meanwhile on
 * open connections with 503, wait (up to 10 s) for the responses already
 * being made or sent to finish, then close everything and free. NULL ok.
 * Not to be called concurrently with itself. */
void ember__api_stop(ember__api_t *api);

#endif
