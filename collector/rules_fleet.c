/* Alert rules shared through ember.rules (rules_fleet.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/log.h"
#include "rules_fleet.h"

#define MAX_RULE_RECORD (64u << 10) /* a rule's JSON is well under 1 KiB */

int ember__rules_fleet_share(void *ctx, const char *name, const json_t *rule, char *err,
                             size_t err_size) {
  ember__rules_fleet_t *f = ctx;
  char key[EMBER__RULE_NAME_MAX + 512];
  int klen = snprintf(key, sizeof key, "%s/%s", f ? f->group : "", name);
  if (klen < 0 || (size_t)klen >= sizeof key) return -EINVAL;
  char *text = NULL;
  if (rule != NULL && (text = json_dumps(rule, JSON_COMPACT | JSON_REAL_PRECISION(15))) == NULL)
    return -ENOMEM;
  int rc = ember__shared_put(f ? f->shared : NULL, key, (size_t)klen, text, text ? strlen(text) : 0,
                             err, err_size);
  free(text);
  return rc;
}

static int apply(void *ctx, const rd_kafka_message_t *m, char *err, size_t err_size) {
  ember__rules_fleet_t *f = ctx;
  /* "GROUP/NAME": the name is after the last '/'. */
  const char *k = m->key, *slash = NULL;
  for (size_t i = 0; k != NULL && i < m->key_len; i++)
    if (k[i] == '/') slash = k + i;
  size_t glen = slash ? (size_t)(slash - k) : 0;
  size_t nlen = slash ? m->key_len - glen - 1 : 0;
  if (slash == NULL || nlen == 0 || nlen > EMBER__RULE_NAME_MAX ||
      memchr(k, '\0', m->key_len) != NULL) {
    snprintf(err, err_size, "a record whose key is not GROUP/RULE");
    return -EINVAL;
  }
  /* Another group's rule (a replica group's, another fleet's). */
  if (glen != strlen(f->group) || memcmp(k, f->group, glen) != 0) return 0;
  char name[EMBER__RULE_NAME_MAX + 1];
  memcpy(name, slash + 1, nlen);
  name[nlen] = '\0';
  if (m->payload == NULL || m->len == 0)
    return ember__alerts_rule_sync(f->alerts, name, NULL, err, err_size);
  if (m->len > MAX_RULE_RECORD) {
    snprintf(err, err_size, "rule %s: a record of %zu bytes (at most %u)", name, m->len,
             MAX_RULE_RECORD);
    return -EINVAL;
  }
  json_error_t jerr;
  json_t *rule = json_loadb(m->payload, m->len, JSON_REJECT_DUPLICATES, &jerr);
  if (rule == NULL) {
    snprintf(err, err_size, "rule %s: not JSON (%s)", name, jerr.text);
    return -EINVAL;
  }
  int rc = ember__alerts_rule_sync(f->alerts, name, rule, err, err_size);
  json_decref(rule);
  return rc;
}

int ember__rules_fleet_start(ember__rules_fleet_t *f, ember_kafka_t *kafka, char *err,
                             size_t err_size) {
  ember__shared_opts_t so = {.kafka = kafka,
                             .topic = EMBER_TOPIC_RULES,
                             .group_prefix = "ember-rules",
                             .what = "rule",
                             .timeout_ms = f->timeout_ms,
                             .apply = apply,
                             .ctx = f,
                             .messages = f->messages,
                             .errors = f->errors};
  return ember__shared_start(&so, &f->shared, err, err_size);
}

void ember__rules_fleet_stop(ember__rules_fleet_t *f) {
  if (f == NULL) return;
  ember__shared_stop(f->shared);
  f->shared = NULL;
}
