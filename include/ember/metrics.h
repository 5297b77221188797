/* Prometheus metrics: a registry of counters and gauges, its text
 * exposition, and a small HTTP server (libmicrohttpd) for /metrics and
 * /healthz that every daemon runs.
 *
 * Metrics are registered once at start-up (not thread-safe), then updated
 * from any thread through the returned handle (atomic) and rendered from
 * the server's thread. */
#ifndef EMBER_METRICS_H
#define EMBER_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "ember/buf.h"
#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_metrics ember_metrics_t;
typedef struct ember_metric ember_metric_t;

EMBER_API int ember_metrics_new(ember_metrics_t **out);
EMBER_API void ember_metrics_free(ember_metrics_t *m);

/* Register a counter or gauge. `name` must be a valid Prometheus name,
 * optionally with one label: `family{label="value"}` (value of letters,
 * digits, `_`, `-`, `.`); register the members of a family one after the
 * other, so HELP and TYPE are written once for them. `help` one line. Returns NULL on a bad name or
 * no memory. The handle is owned by the registry. */
EMBER_API ember_metric_t *ember_metrics_counter(ember_metrics_t *m, const char *name,
                                                const char *help);
EMBER_API ember_metric_t *ember_metrics_gauge(ember_metrics_t *m, const char *name,
                                              const char *help);
/* The counter `family{label="value"}`: one member of a family with one
 * label, for the loops that register a member per reason or version. */
EMBER_API ember_metric_t *ember_metrics_counter_of(ember_metrics_t *m, const char *family,
                                                   const char *label, const char *value,
                                                   const char *help);

/* A family whose members are known only when it is rendered, such as one
 * gauge per alert rule: at each render, after HELP and TYPE, fn(ctx, out)
 * appends the family's sample lines itself (`family{label="v"} value`, one
 * per line, label values escaped by the caller) and returns 0 or an
 * ember_buf error. `family` is a bare name (no labels). fn runs on the
 * rendering thread while the registry lives; it must be thread-safe.
 * Returns 0, -EINVAL, -ENOMEM. */
typedef int (*ember_metrics_render_fn)(void *ctx, ember_buf_t *out);
EMBER_API int ember_metrics_family(ember_metrics_t *m, const char *family, const char *help,
                                   bool counter, ember_metrics_render_fn fn, void *ctx);

/* Update a metric; NULL handles are ignored so a failed registration never
 * crashes a daemon. Thread-safe. */
EMBER_API void ember_metric_add(ember_metric_t *mt, double v);
EMBER_API void ember_metric_set(ember_metric_t *mt, double v);
EMBER_API double ember_metric_get(const ember_metric_t *mt);

/* Append the text exposition format (version 0.0.4). */
EMBER_API int ember_metrics_render(const ember_metrics_t *m, ember_buf_t *out);

typedef struct ember_http_metrics ember_http_metrics_t;
/* Serve GET /metrics and /healthz on `listen` ("127.0.0.1:7273", or
 * ":7273" for every address) from libmicrohttpd's own thread. Returns 0,
 * EMBER_ECONFIG for a bad address, or -errno when the port cannot be bound
 * (sentence in errbuf). Port 0 picks a free port: see _port. */
EMBER_API int ember_http_metrics_start(ember_metrics_t *m, const char *listen,
                                       ember_http_metrics_t **out, char *errbuf,
                                       size_t errbuf_size);
EMBER_API uint16_t ember_http_metrics_port(const ember_http_metrics_t *h);
EMBER_API void ember_http_metrics_stop(ember_http_metrics_t *h);

/* This process's CPU seconds (user+system) and resident set in bytes. */
EMBER_API double ember_self_cpu_seconds(void);
EMBER_API double ember_self_rss_bytes(void);

#ifdef __cplusplus
}
#endif
#endif
