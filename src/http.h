/* The HTTP server layer every Ember daemon serves through (the collector's
 * API and dashboard, the agent's /metrics): libmicrohttpd's daemon, the
 * listen address, connection limits, request bodies, JSON error replies,
 * shutdown and the layer's own metrics. Internal to Ember's parts, like
 * json.h; docs/internals/http.md says what it guarantees.
 *
 * Threads: libmicrohttpd's internal polling threads, `threads` of them in
 * a pool, and one of the layer's that closes connections past their
 * deadline. The handler runs on the thread that read the request, once per
 * request, after the whole request (headers and body) has arrived and
 * passed the layer's checks; it may run on several threads at once. */
#ifndef EMBER_SRC_HTTP_H
#define EMBER_SRC_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/buf.h"
#include "ember/metrics.h"

typedef struct ember__http ember__http_t;
/* One request, borrowed by the handler for the length of its call. */
typedef struct ember__http_req ember__http_req_t;

#define EMBER__HTTP_MAX_HEADERS 8
/* The most polling threads, and max_response when it is 0. */
#define EMBER__HTTP_MAX_THREADS      64u
#define EMBER__HTTP_DEFAULT_RESPONSE ((size_t)64 << 20)

/* What a handler answers. The layer initialises it (status 0, `body`
 * empty and bounded by max_response) before the call and sends it after. */
typedef struct ember__http_answer {
  unsigned status;   /* 0 is sent as a 500 */
  const char *ctype; /* static; NULL = text/plain (2xx); errors are JSON */
  ember_buf_t body;  /* the body of a 2xx; the layer frees it */
  const void *fixed; /* static data sent instead of `body` when not NULL */
  size_t fixed_len;
  const char *allow; /* static: the Allow header of a 405 (default "GET, HEAD") */
  /* status >= 300 but 304: the sentence sent as {"error": "..."}. */
  char err[512];
  /* Extra headers: names static, values copied (ember__http_answer_header). */
  const char *hname[EMBER__HTTP_MAX_HEADERS];
  size_t hval[EMBER__HTTP_MAX_HEADERS]; /* offsets into hbuf */
  size_t nheaders, hbuf_len;
  char hbuf[768];
} ember__http_answer_t;

typedef void (*ember__http_handler_fn)(void *ctx, ember__http_req_t *q, ember__http_answer_t *a);

typedef struct ember__http_opts {
  const char *listen;     /* "127.0.0.1:7272", ":7272", "localhost:7272", "[::1]:7272",
                             "[::]:7272"; port 0 picks one. Required; borrowed for the call. */
  const char *listen_key; /* the config key it came from, for error sentences ("api.listen") */
  const char *log;        /* log component ("api"); a literal: kept, not copied */
  /* Prefix of the layer's metrics ("ember_api" gives ember_api_requests_total,
   * ...); NULL = none. */
  const char *metric_prefix;
  ember_metrics_t *metrics; /* where they are registered at start; NULL = none. Borrowed. */
  unsigned threads;         /* polling threads; 0 = 1, at most 64 */
  /* Open connections at most; past it, a new connection closes the oldest
   * one still sending its request (or idle between requests), or is
   * refused when all are being answered. 0 = 256. */
  unsigned max_connections;
  unsigned max_per_ip;         /* connections per client address; 0 = 32 */
  unsigned request_timeout_ms; /* from accept (or the previous answer) to the whole request
                                  in, however the bytes trickle; 0 = 10 s */
  unsigned answer_timeout_ms;  /* from the request in to all of the answer taken (the
                                  handler's work and the sending); 0 = 60 s */
  /* Host names this server answers to besides localhost and any IP
   * address, comma-separated ("ember.example.com,ember"); "*" = any Host.
   * Other Hosts get a 421 (DNS rebinding). A POST, PUT, DELETE... must
   * come from the same origin as its Host, or from a listed name, or it
   * is a 403 (cross-site request forgery). NULL = none. Copied. */
  const char *allowed_hosts;
  const char *hosts_key; /* the config key it came from, for sentences */
  size_t max_body;       /* largest request body kept for the handler; 0 = 64 KiB */
  /* A larger bound for some requests (an upload): big_body(ctx, method,
   * path) gives it, 0 = max_body. Such a request must say its
   * Content-Length (411 otherwise), and one at a time may carry more than
   * max_body (another is answered 503 while it is read and answered), so
   * the memory bodies hold stays bounded. NULL = none. */
  size_t (*big_body)(void *ctx, const char *method, const char *url);
  size_t max_response; /* the bound of answer->body; 0 = 64 MiB */
  ember__http_handler_fn handler;
  void *ctx; /* passed to the handler; borrowed, must outlive the server */
} ember__http_opts_t;

/* Start serving. Returns 0, -EINVAL (no handler/listen/out, threads > 64),
 * EMBER_ECONFIG (bad listen address; errbuf names listen_key), -EADDRINUSE
 * (cannot bind: errbuf names the address), -ENOMEM. errbuf may be NULL. */
int ember__http_start(const ember__http_opts_t *opts, ember__http_t **out, char *errbuf,
                      size_t errbuf_size);
/* The port actually bound; 0 for NULL. */
uint16_t ember__http_port(const ember__http_t *h);
/* Stop: refuse new connections, answer requests that arrive meanwhile on
 * open connections with 503, wait (up to 10 s) for the answers being made
 * or sent, then close everything and free. NULL ok. Not concurrently with
 * itself. */
void ember__http_stop(ember__http_t *h);

/* The request. Strings are borrowed for the handler's call. */
const char *ember__http_method(const ember__http_req_t *q);
const char *ember__http_url(const ember__http_req_t *q);
/* A request header (case-insensitive name); NULL when absent. */
const char *ember__http_header(const ember__http_req_t *q, const char *name);
/* Call fn for each query argument in order (value NULL for "?key"); stops
 * early when fn returns false. */
void ember__http_args(const ember__http_req_t *q,
                      bool (*fn)(void *cls, const char *key, const char *value), void *cls);
/* The request body (NUL-terminated) and its length; NULL when there is
 * none. *too_big (may be NULL) is set when it passed max_body and was cut. */
const char *ember__http_body(const ember__http_req_t *q, size_t *len, bool *too_big);
/* When the request started being answered, wall clock (ns). */
int64_t ember__http_now_ns(const ember__http_req_t *q);

/* Add a header to the answer (value copied). Returns 0, or -ENOSPC when
 * the answer has no room left (the header is dropped). */
int ember__http_answer_header(ember__http_answer_t *a, const char *name, const char *value);
/* Record an error answer (the sentence is sent as JSON); returns status. */
unsigned ember__http_fail(ember__http_answer_t *a, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
