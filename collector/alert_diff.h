/* What changed in a spike: the functions whose share of a selection's CPU
 * rose most between a baseline profile and the spike's profile.
 *
 * A function is keyed by display name and module, as in ember_profile_top()
 * and the Compare view's diff tree. Its share in a profile is its self value
 * over the profile's total, so the ranking does not depend on how long
 * either range is or how much CPU the selection used overall: a function
 * that went from 5% to 90% of the worker's CPU rose by 0.85. Only functions
 * whose share rose are listed, largest rise first, ties by name.
 *
 * Stateless and thread-safe; profiles are borrowed for the call. */
#ifndef EMBER_COLLECTOR_ALERT_DIFF_H
#define EMBER_COLLECTOR_ALERT_DIFF_H

#include <stddef.h>

#include <jansson.h>

#include "ember/profile.h"

typedef struct ember__rise {
  char *name;   /* display name; owned */
  char *module; /* owned; NULL when the frames carry none */
  double base;  /* share of the baseline's total, 0..1 */
  double spike; /* share of the spike's total, 0..1 */
} ember__rise_t;

/* The `limit` functions (0 = all) whose self share of value type 0 rose the
 * most from `base` to `spike`. Either profile may be empty (a share of 0).
 * *out is an array of *count entries freed with ember__rise_free(). Returns
 * 0, -EINVAL, -ENOMEM. */
int ember__rise(const ember_profile_t *base, const ember_profile_t *spike, size_t limit,
                ember__rise_t **out, size_t *count);
void ember__rise_free(ember__rise_t *r, size_t count);

/* [{"function", "module" (when known), "baseline", "spike", "delta"}], the
 * shares rounded to 4 decimals; NULL on -ENOMEM. */
json_t *ember__rise_json(const ember__rise_t *r, size_t count);

#endif
