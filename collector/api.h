/* The HTTP API (docs/api.md): libmicrohttpd serving /api/v1/..., /healthz
 * and /metrics from one store. Internal to ember-collector and `ember up`.
 *
 * The server runs libmicrohttpd's own threads (a small pool); each request
 * opens its own store read transactions, so queries never block ingest. */
#ifndef EMBER_COLLECTOR_API_H
#define EMBER_COLLECTOR_API_H

#include <stddef.h>
#include <stdint.h>

#include "ember/metrics.h"
#include "ember/store.h"

typedef struct ember__api ember__api_t;

typedef struct ember__api_opts {
  const char *listen;       /* "127.0.0.1:7272" (default when NULL); port 0 picks one */
  const char *token;        /* bearer token; NULL or "" = no authentication */
  ember_store_t *store;     /* borrowed; must outlive the server */
  ember_metrics_t *metrics; /* rendered at /metrics; NULL = empty. The API
                               registers its own request metrics in it at
                               start, so start before other threads render it */
  unsigned threads;         /* worker threads; 0 = 2 */
} ember__api_opts_t;

/* The config keys the API reads (api.listen, api.token, api.threads), for
 * ember_config_check lists. NULL-terminated. */
extern const char *const ember__api_config_keys[];

/* Start serving. Returns 0, EMBER_ECONFIG (bad listen address), -errno
 * (cannot bind: errbuf says which address), -ENOMEM. */
int ember__api_start(const ember__api_opts_t *opts, ember__api_t **out, char *errbuf,
                     size_t errbuf_size);
/* The port actually bound (useful with port 0). */
uint16_t ember__api_port(const ember__api_t *api);
/* Stop: refuse new connections, finish running requests, free. NULL ok. */
void ember__api_stop(ember__api_t *api);

#endif
