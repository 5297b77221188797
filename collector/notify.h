/* Alert notifications (docs/internals/alerts.md, "Notifications"): webhook
 * delivery and the ember.alerts Kafka record of each alert transition.
 *
 * Webhooks. ember__notify_send copies what it needs (the receiver's URL and
 * the body, built at once in the receiver's format) into a bounded queue and
 * returns; one delivery thread POSTs the bodies with libcurl (one easy
 * handle, reused; a total timeout per attempt; no signals). Each receiver
 * (URL) has its own FIFO and its own next-attempt time, and the thread
 * serves the receivers that are due round-robin, so a receiver that is down
 * only delays its own notifications. Outcome of an attempt:
 *   2xx                           delivered
 *   408, 429, 5xx, no answer,     failed; retried after an exponential
 *   connect error, timeout        backoff with jitter (retry_initial_ms,
 *                                 doubling up to retry_max_ms)
 *   any other status (3xx, 4xx)   refused: not retried
 * A notification still undelivered give_up_ms after it was queued is given
 * up. done_cb is called exactly once per accepted send, always from the
 * delivery thread (also for what ember__notify_free drops), without the
 * notifier's lock, with delivered = true or false (refused, given up, or
 * dropped at shutdown).
 *
 * Kafka. ember__notify_publish produces {"status", "alert"} to the alerts
 * topic on a producer the caller owns, without blocking; delivery reports
 * go to that producer's callback (not ours).
 *
 * Metrics: ember_collector_notify_sent_total (delivered),
 * ember_collector_notify_failed_total (failed or refused attempts),
 * ember_collector_notify_dropped_total (never delivered: queue full, refused,
 * given up, dropped at shutdown), ember_collector_notify_queue (gauge: queued
 * or in flight), ember_collector_notify_publish_errors_total (Kafka produce
 * calls that failed).
 *
 * Thread-safety: every function may be called from any thread, except
 * _new and _free (one thread, once). A notifier's mutex is never held while
 * a request is in flight or a callback runs.
 *
 * Errors: 0, -EINVAL (bad argument), -ENOMEM, -ENOBUFS (queue full),
 * EMBER_EKAFKA (the producer refused the record), or for _new EMBER_ECONFIG
 * / -errno with a sentence in errbuf. */
#ifndef EMBER_COLLECTOR_NOTIFY_H
#define EMBER_COLLECTOR_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "ember/metrics.h"

typedef struct ember__notify ember__notify_t;

typedef enum ember__notify_format {
  EMBER__NOTIFY_ALERTMANAGER = 0, /* Alertmanager POST /api/v2/alerts (postableAlerts) */
  EMBER__NOTIFY_JSON = 1          /* {"version": 1, "status", "alert"} */
} ember__notify_format_t;

/* "alertmanager" or "json" (exact). Returns 0 or -EINVAL (*out untouched). */
int ember__notify_format_parse(const char *s, ember__notify_format_t *out);
/* "alertmanager" or "json" (static). */
const char *ember__notify_format_name(ember__notify_format_t f);

typedef struct ember__notify_opts {
  ember_metrics_t *metrics;  /* borrowed, outlives the notifier; NULL = no metrics */
  size_t queue_max;          /* alerts.webhook_queue: 0 = 1000 */
  uint32_t timeout_ms;       /* alerts.webhook_timeout, per attempt: 0 = 5000 */
  uint32_t retry_initial_ms; /* first backoff: 0 = 1000 */
  uint32_t retry_max_ms;     /* alerts.webhook_retry_max, longest backoff: 0 = 60000 */
  uint32_t give_up_ms;       /* alerts.webhook_give_up: 0 = 3600000 */
  const char *dashboard_url; /* copied; base of generatorURL ("http://host:port");
                                NULL or "" = Alertmanager bodies carry no generatorURL */
  rd_kafka_t *producer;      /* borrowed, outlives the notifier; NULL = no Kafka */
  const char *topic;         /* copied; NULL = "ember.alerts" */
} ember__notify_opts_t;

/* Start a notifier and its delivery thread (created with every signal
 * blocked). Returns 0, -EINVAL, -ENOMEM, or -errno / EMBER_ECONFIG (libcurl
 * or the thread could not start; sentence in errbuf). *out untouched on
 * failure. */
int ember__notify_new(const ember__notify_opts_t *opts, ember__notify_t **out, char *errbuf,
                      size_t errbuf_size);

/* Try for up to flush_ms to deliver what is queued (receivers in backoff
 * are tried at their next time if it comes before the deadline; a request
 * in flight is cut at the deadline), then drop the rest (counted, one log
 * line, done_cb(ctx, false) for each), join the thread and free everything.
 * NULL is a no-op. No send may race with or follow it. */
void ember__notify_free(ember__notify_t *n, uint32_t flush_ms);

typedef struct ember__notify_target {
  const char *url;               /* http:// or https://; borrowed for the call */
  ember__notify_format_t format; /* body shape */
} ember__notify_target_t;

/* Called once per accepted send: delivered true (a 2xx answer) or false. */
typedef void (*ember__notify_done_cb)(void *ctx, bool delivered);

/* Queue one notification of `alert_doc` (an alert document,
 * docs/internals/alerts.md; borrowed for the call) in transition `status`
 * ("firing" or "resolved") for `target`. Never blocks on the network: the
 * body is built here and the network is the delivery thread's. done_cb may
 * be NULL; ctx is passed through untouched and must stay valid until
 * done_cb ran. Returns 0; -EINVAL (bad status, URL or document: it needs a
 * string "id" and "rule" and an integer "started"); -ENOBUFS (queue_max
 * notifications are queued: counted as dropped, logged once per burst);
 * -ENOMEM. On error done_cb is not called. */
int ember__notify_send(ember__notify_t *n, const ember__notify_target_t *target, const char *status,
                       const json_t *alert_doc, ember__notify_done_cb done_cb, void *ctx);

/* Produce {"status": status, "alert": alert_doc} to the alerts topic keyed
 * by `key` (the worker; NULL = no key), without blocking. Returns 0 (also
 * when the notifier has no producer: nothing to do), -EINVAL, -ENOMEM,
 * EMBER_EKAFKA (librdkafka refused it, e.g. its queue is full: counted and
 * logged, rate-limited). */
int ember__notify_publish(ember__notify_t *n, const char *key, const char *status,
                          const json_t *alert_doc);

/* Counters since _new (the same numbers as the metrics), for tests. */
typedef struct ember__notify_stats {
  uint64_t sent, failed, dropped, publish_errors;
  size_t queued; /* queued or in flight */
} ember__notify_stats_t;
void ember__notify_stats(ember__notify_t *n, ember__notify_stats_t *out);

/* ---- bodies (pure; exposed for tests). Each returns a new reference, or
 * NULL when `status` or `doc` is not valid (see _send) or out of memory. */

/* Alertmanager's postableAlerts: a one-element array
 *   [{"labels": {"alertname": RULE, <doc labels>, "severity": "warning"},
 *     "annotations": {"summary", "description" (names the top functions),
 *                     "ember_alert_id": ID},
 *     "startsAt": RFC 3339 (ms, UTC) of doc.started,
 *     "endsAt": of doc.resolved (or doc.updated) when resolved; absent when firing,
 *     "generatorURL": DASHBOARD/#/alerts/ID (absent when dashboard_url is NULL or "")}]
 * Label names that Alertmanager would refuse are rewritten ([^A-Za-z0-9_]
 * -> '_'); labels that are not non-empty strings are left out. */
json_t *ember__notify_body_alertmanager(const char *status, const json_t *doc,
                                        const char *dashboard_url);
/* {"version": 1, "status": status, "alert": doc (a copy)}. */
json_t *ember__notify_body_json(const char *status, const json_t *doc);
/* The Kafka value: {"status": status, "alert": doc (a copy)}. */
json_t *ember__notify_record(const char *status, const json_t *doc);

/* "2026-11-29T21:09:37.123Z" for ms since the epoch (>= 0) into out (at
 * least 25 bytes). Returns 0 or -EINVAL. */
int ember__notify_rfc3339(int64_t ms, char *out, size_t size);

#endif
