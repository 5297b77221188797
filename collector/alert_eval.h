/* What alert rules measure, per group, from the store
 * (docs/internals/alerts.md, "Evaluation").
 *
 * The history (ember__ahist_t) keeps every series' CPU time per evaluation
 * step for as long as the longest baseline needs, in memory: a round reads
 * only the newest few steps of every series in one store read
 * (ember_store_cpu_timelines), however many rules there are, and each rule
 * aggregates the series it selects from memory. The last two steps are
 * read again each round, so a window that reached the store late (a broker
 * hiccup, an agent's spool) still counts in baselines.
 *
 * A rule's group is its worker (a glob rule gives one alert per worker it
 * matches) and, with group_by, the value of that label. Per group:
 *   above     cores in the newest step (CPU ns / step);
 *   baseline  the same, against factor x the median of the group's earlier
 *             steps in the trailing period (from when the group first had
 *             data; the steps of a spike in progress excluded), at least
 *             the floor; fewer than a quarter of the period's steps (and
 *             fewer than 3) of history is no baseline yet: the threshold is
 *             NaN and never breached;
 *   function  the function's self share of the group's CPU in the newest
 *             step, in percent (one merged profile per group and round).
 *
 * Not thread-safe: one thread (the engine's) uses a history. Errors are the
 * store's (include/ember/store.h) and -ENOMEM; out-parameters are untouched
 * on failure. */
#ifndef EMBER_COLLECTOR_ALERT_EVAL_H
#define EMBER_COLLECTOR_ALERT_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "alert_rule.h"
#include "ember/store.h"

typedef struct ember__ahist ember__ahist_t;

/* A history in steps of `step_ns` keeping `keep` steps (at least 1). */
int ember__ahist_new(int64_t step_ns, size_t keep, ember__ahist_t **out);
void ember__ahist_free(ember__ahist_t *h);
/* Keep at least `keep` steps from now on; a longer history is filled from
 * the store at the next update. */
void ember__ahist_keep(ember__ahist_t *h, size_t keep);

/* Bring the history up to the step that ends at `end_ns` (a multiple of
 * the step). The first update, or one after a gap, or after _keep grew the
 * history, reads all kept steps; later ones the new steps and the two
 * before. Returns 0 or the store's error (the history is then as before). */
int ember__ahist_update(ember__ahist_t *h, ember_store_t *store, int64_t end_ns);

/* The end of the newest step held, or INT64_MIN before any update. */
int64_t ember__ahist_end(const ember__ahist_t *h);

/* One group of a rule in the newest step. */
typedef struct ember__agroup {
  char *key;            /* worker, or worker + "\x1f" + the group_by value ("" for none) */
  char *worker;         /* the group's worker */
  char *value;          /* the group_by label's value, NULL for none or unset */
  double cores;         /* CPU in the newest step, in cores */
  double baseline;      /* baseline rules: the median in cores, NaN when none yet */
  uint32_t hottest_sid; /* the series with the most CPU in the newest step */
  char *hottest_host;   /* its host (NULL when unset) */
} ember__agroup_t;

/* The groups of `rule` that have data in the kept history (so a group
 * whose load stopped is still listed, with 0 cores), with their newest
 * values. For baseline rules, each group's baseline excludes the steps that
 * start at or after exclude_from_ns(ctx, group key) (the start of the
 * group's spike in progress; INT64_MAX = none). *out is an array of *count
 * freed with ember__agroups_free(). Returns 0 or -ENOMEM. */
typedef int64_t (*ember__exclude_fn)(void *ctx, const char *group_key);
int ember__ahist_groups(const ember__ahist_t *h, const ember__alert_rule_t *rule,
                        ember__exclude_fn exclude_from, void *ctx, ember__agroup_t **out,
                        size_t *count);
void ember__agroups_free(ember__agroup_t *g, size_t count);

/* The store selector of one group of `rule` (strings borrowed from both). */
ember_store_selector_t ember__agroup_selector(const ember__alert_rule_t *rule,
                                              const ember__agroup_t *g);

/* A function rule's value for one group over [from_ns, to_ns): the self
 * share of rule->function.name in the group's CPU profile, in percent (0
 * when the group has no CPU there). */
int ember__agroup_function_share(ember_store_t *store, const ember__alert_rule_t *rule,
                                 const ember__agroup_t *g, int64_t from_ns, int64_t to_ns,
                                 double *percent);

/* The median of `n` values (reordered in place, not sorted: a selection,
 * linear on average); NaN when n is 0. Values must not be NaN. */
double ember__median(double *v, size_t n);

#endif
