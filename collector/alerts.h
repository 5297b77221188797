/* The alert engine (docs/internals/alerts.md, "Engine").
 *
 * After each evaluation step closes (alerts.interval, 10 s by default: the
 * agents' window) and alerts.eval_delay has passed for its windows to reach
 * the store, one round evaluates every rule over the data this collector
 * stores (alert_eval.h), steps each (rule, group)'s state (alert_state.h)
 * and acts on what changed:
 *
 *   pending   the alert is listed; nothing is sent
 *   firing    what changed is computed once (alert_diff.h: the spike
 *             against the 10 minutes before it, or the baseline's period),
 *             a capture session starts when the rule asks for one (a
 *             cooldown and a cap per hour per rule), the alert is stored,
 *             and only then notified (notify.h: webhook and ember.alerts)
 *   resolved  stored, then notified
 *
 * Rules come from alerts.rules (a file, re-read by ember__alerts_reload on
 * SIGHUP; a bad file keeps the rules in force), from the API (kept in the
 * store's "rules" table, and shared with the other collectors through
 * opts.share and ember__alerts_rule_sync) and, with alerts.default_rule
 * (ember up), one built-in rule: any worker above 0.9 cores for 30 s.
 *
 * Alerts are kept in the store's "alerts" table with their state, so a
 * restarted collector carries on with them: a firing alert stays firing
 * and is not notified again; a notification that was not delivered before
 * the restart is sent again (at least once). Resolved alerts are kept for
 * alerts.keep (7 days).
 *
 * Thread-safety: one mutex guards the rules and alerts; rounds run on the
 * engine's own thread (ember__alerts_start) or on the caller's
 * (ember__alerts_round, for tests and benchmarks); every other call may
 * come from any thread. Errors: 0 or a negative errno / EMBER_E* code, with
 * a sentence in errbuf where one is taken. */
#ifndef EMBER_COLLECTOR_ALERTS_H
#define EMBER_COLLECTOR_ALERTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "alert_rule.h"
#include "ember/config.h"
#include "ember/metrics.h"
#include "ember/store.h"
#include "notify.h"
#include "sessions.h"

typedef struct ember__alerts ember__alerts_t;

typedef struct ember__alerts_opts {
  ember_store_t *store;                   /* borrowed */
  ember__csessions_t *sessions;           /* borrowed; NULL = no captures */
  ember_metrics_t *metrics;               /* borrowed; NULL = none */
  const char *rules_file;                 /* alerts.rules; NULL = none (copied) */
  const char *webhook;                    /* alerts.webhook: for rules without one; NULL = none */
  ember__webhook_format_t webhook_format; /* alerts.webhook_format */
  int64_t interval_ns;                    /* alerts.interval; 0 = 10 s */
  int64_t delay_ns;                       /* alerts.eval_delay; 0 = 3 s */
  int64_t keep_ns;                        /* alerts.keep; 0 = 7 d */
  bool default_rule;                      /* alerts.default_rule */
  size_t history_max;                     /* alerts listed from memory; 0 = 10000 */
  int64_t resend_ns; /* alerts.webhook_resend: firing alerts sent to Alertmanager again this
                        often (its resolve_timeout is 5 min); 0 = 2 min */
  /* Rules added or deleted through the API are shared with every
   * collector (rules_fleet.h): called with the rule as stored (its JSON
   * without "source"), or NULL for a deletion, before the change is made
   * here and without the engine's lock; non-zero refuses the change, with
   * a sentence in err. NULL = not shared (one collector). */
  int (*share)(void *ctx, const char *name, const json_t *rule, char *err, size_t err_size);
  void *share_ctx; /* borrowed; must outlive the engine */
} ember__alerts_opts_t;

/* The engine's config keys (and the notifier's, which the collector reads
 * with ember__alerts_read_config). */
#define EMBER__ALERTS_CONFIG_KEYS                                                                  \
  "alerts.rules", "alerts.interval", "alerts.eval_delay", "alerts.keep", "alerts.webhook",         \
      "alerts.webhook_format", "alerts.default_rule", "alerts.webhook_timeout",                    \
      "alerts.webhook_queue", "alerts.webhook_retry_max", "alerts.webhook_give_up",                \
      "alerts.webhook_resend"

/* Fill `o` and `no` from the config (strings borrowed from cfg). Returns 0
 * or EMBER_ECONFIG with a sentence. */
int ember__alerts_read_config(const ember_config_t *cfg, ember__alerts_opts_t *o,
                              ember__notify_opts_t *no, char *errbuf, size_t errbuf_size);

/* Load the rules (a bad rules file is an error: the collector does not
 * start) and the stored alerts. Registers the metrics. Returns 0, -EINVAL/EMBER_ECONFIG (bad rules
 * file), a store error, -ENOMEM. */
int ember__alerts_new(const ember__alerts_opts_t *opts, ember__alerts_t **out, char *errbuf,
                      size_t errbuf_size);
/* Start the evaluation thread, notifying through `notify` (borrowed; NULL
 * = no notifications): first what a restart interrupted. Returns 0 or
 * -errno. */
int ember__alerts_start(ember__alerts_t *a, ember__notify_t *notify);
/* Stop the thread (if started): the round in hand finishes. */
void ember__alerts_stop(ember__alerts_t *a);
/* Free; after ember__alerts_stop and after the notifier is freed (its
 * callbacks reach the engine until then). NULL is a no-op. */
void ember__alerts_free(ember__alerts_t *a);

/* Read the rules file again. On an error the rules in force stay and errbuf
 * says why (the file and line). */
int ember__alerts_reload(ember__alerts_t *a, char *errbuf, size_t errbuf_size);

/* One round for the step that ends at end_ns (a multiple of the interval),
 * on the caller's thread. Returns 0 or the store's error. */
int ember__alerts_round(ember__alerts_t *a, int64_t end_ns);

/* The API. Rules: add one from a JSON body (*out: the rule as stored, with
 * "source"): 0, -EINVAL (errbuf names the field), -EEXIST (the name is
 * taken), a store error. Delete: 0, EMBER_ENOTFOUND, -EPERM (a file or
 * built-in rule: errbuf says so); its alerts in progress are resolved. */
int ember__alerts_rule_add(ember__alerts_t *a, const json_t *body, json_t **out, char *errbuf,
                           size_t errbuf_size);
int ember__alerts_rule_delete(ember__alerts_t *a, const char *name, char *errbuf,
                              size_t errbuf_size);
/* A rule another collector took through its API (ember.rules, key
 * `name`): `rule` as it shared it, or NULL for a deletion. Added, changed
 * or deleted here as an API rule; the same rule again is a no-op. A file
 * or default rule of that name stays (a rule is refused with -EEXIST, a
 * deletion ignored). Returns 0, -EINVAL (errbuf says why), -EEXIST, a
 * store error, -ENOMEM. */
int ember__alerts_rule_sync(ember__alerts_t *a, const char *name, const json_t *rule, char *errbuf,
                            size_t errbuf_size);
/* {"rules": [...]} (new reference; NULL when out of memory). */
json_t *ember__alerts_rules_json(ember__alerts_t *a);
/* {"alerts": [...]}: firing, then pending, then resolved, newest first in
 * each; filters NULL = any. New reference; NULL when out of memory. */
json_t *ember__alerts_list(ember__alerts_t *a, const char *rule, const char *state,
                           const char *worker);
/* One alert's document. Returns 0, EMBER_ENOTFOUND, -ENOMEM. */
int ember__alerts_get(ember__alerts_t *a, const char *id, json_t **out);

#endif
