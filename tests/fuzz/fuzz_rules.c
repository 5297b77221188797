/* libFuzzer target for alert rules (collector/alert_rule.c): the API's
 * JSON bodies come from any client of the collector, rules files from its
 * operator.
 *
 * The first byte picks the path: even, the bytes are a rules file; odd,
 * they are a JSON body parsed with jansson (as the API does) and checked as
 * a rule. Whatever the bytes: no crash, leak or undefined behaviour; an
 * error comes with a sentence; a rule that is accepted writes back to JSON
 * that is accepted again as an equal rule (the round trip the API and the
 * store rely on). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "alert_rule.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const ember__alert_rule_t *r) {
  json_t *j = ember__alert_rule_to_json(r);
  if (j == NULL) return; /* out of memory */
  ember__alert_rule_t *back = NULL;
  char err[512] = "";
  if (ember__alert_rule_from_json(j, &back, err, sizeof err) != 0 ||
      !ember__alert_rule_equal(r, back))
    abort();
  ember__alert_rule_free(back);
  json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  char err[512] = "";
  if (data[0] % 2 == 0) {
    ember__alert_rules_t *set = NULL;
    int rc = ember__alert_rules_parse(text, len, "fuzz.rules", &set, err, sizeof err);
    if (rc == 0) {
      for (size_t i = 0; i < ember__alert_rules_count(set); i++)
        round_trip(ember__alert_rules_at(set, i));
      ember__alert_rules_free(set);
    } else if (rc == -EINVAL && err[0] == '\0') {
      abort(); /* a refusal must say why */
    }
    return 0;
  }
  json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
  if (j == NULL) return 0;
  ember__alert_rule_t *r = NULL;
  int rc = ember__alert_rule_from_json(j, &r, err, sizeof err);
  if (rc == 0) {
    round_trip(r);
    ember__alert_rule_free(r);
  } else if (rc == -EINVAL && err[0] == '\0') {
    abort();
  }
  json_decref(j);
  return 0;
}
