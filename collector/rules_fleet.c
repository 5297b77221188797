/* Alert rules shared through ember.rules (rules_fleet.h). */
#include <errno.h>
#include <stdatomic.h>
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
  if (f == NULL || f->producer == NULL) {
    snprintf(err, err_size, "cannot share the rule with the other collectors: not connected");
    return EMBER_EKAFKA;
  }
  char key[EMBER__RULE_NAME_MAX + 512];
  int klen = snprintf(key, sizeof key, "%s/%s", f->group, name);
  if (klen < 0 || (size_t)klen >= sizeof key) return -EINVAL;
  char *text = NULL;
  if (rule != NULL && (text = json_dumps(rule, JSON_COMPACT | JSON_REAL_PRECISION(15))) == NULL)
    return -ENOMEM;
  atomic_int status;
  atomic_init(&status, 1);
  rd_kafka_resp_err_t e = rd_kafka_producev(
      f->producer, RD_KAFKA_V_TOPIC(EMBER_TOPIC_RULES), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_KEY(key, (size_t)klen), RD_KAFKA_V_VALUE(text, text ? strlen(text) : 0),
      RD_KAFKA_V_OPAQUE(&status), RD_KAFKA_V_END);
  free(text);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(err, err_size, "cannot share the rule with the other collectors (%s): %s",
             EMBER_TOPIC_RULES, rd_kafka_err2str(e));
    return EMBER_EKAFKA;
  }
  /* Our own producer's messages time out at timeout_ms, so its report
   * comes by then; until it did, `status` is written to: wait for it. */
  while (atomic_load(&status) == 1) rd_kafka_poll(f->producer, 50);
  int st = atomic_load(&status);
  if (st != 0) {
    snprintf(err, err_size, "cannot share the rule with the other collectors (%s): %s",
             EMBER_TOPIC_RULES, rd_kafka_err2str((rd_kafka_resp_err_t)-st));
    return EMBER_EKAFKA;
  }
  return 0;
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
  rd_kafka_conf_t *conf = NULL;
  int rc = ember_kafka_producer_conf(kafka, &conf, err, err_size);
  if (rc != 0) return rc;
  char num[24];
  snprintf(num, sizeof num, "%d", f->timeout_ms > 0 ? f->timeout_ms : 10000);
  if (rd_kafka_conf_set(conf, "message.timeout.ms", num, err, err_size) != RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    return EMBER_EKAFKA;
  }
  rd_kafka_conf_set_dr_msg_cb(conf, ember_kafka_dr_status);
  rc = ember_kafka_producer_new(kafka, conf, &f->producer, err, err_size);
  if (rc != 0) return rc;
  ember__follow_opts_t fo = {.kafka = kafka,
                             .topic = EMBER_TOPIC_RULES,
                             .group_prefix = "ember-rules",
                             .what = "rule",
                             .apply = apply,
                             .ctx = f,
                             .messages = f->messages,
                             .errors = f->errors};
  return ember__follow_start(&fo, &f->follow, err, err_size);
}

void ember__rules_fleet_stop(ember__rules_fleet_t *f) {
  if (f == NULL) return;
  ember__follow_stop(f->follow);
  f->follow = NULL;
  if (f->producer != NULL) {
    rd_kafka_flush(f->producer, 2000);
    rd_kafka_destroy(f->producer);
    f->producer = NULL;
  }
}
