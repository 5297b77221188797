/* Tables kept on a compacted topic (shared.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "shared.h"

struct ember__shared {
  const char *topic, *what;
  rd_kafka_t *producer;
  ember__follow_t *follow;
};

int ember__shared_start(const ember__shared_opts_t *o, ember__shared_t **out, char *err,
                        size_t err_size) {
  if (o == NULL || o->kafka == NULL || o->topic == NULL || o->apply == NULL || out == NULL)
    return -EINVAL;
  ember__shared_t *s = ember_calloc(1, sizeof *s);
  if (s == NULL) return -ENOMEM;
  s->topic = o->topic;
  s->what = o->what ? o->what : "record";
  rd_kafka_conf_t *conf = NULL;
  int rc = ember_kafka_producer_conf(o->kafka, &conf, err, err_size);
  if (rc != 0) goto fail;
  char num[24];
  snprintf(num, sizeof num, "%d", o->timeout_ms > 0 ? o->timeout_ms : 10000);
  rd_kafka_conf_res_t cr = rd_kafka_conf_set(conf, "message.timeout.ms", num, err, err_size);
  if (cr == RD_KAFKA_CONF_OK && o->max_record > 0) {
    /* A record and its batch's overhead. */
    snprintf(num, sizeof num, "%zu", o->max_record + 4096);
    cr = rd_kafka_conf_set(conf, "message.max.bytes", num, err, err_size);
  }
  if (cr != RD_KAFKA_CONF_OK) {
    rd_kafka_conf_destroy(conf);
    rc = EMBER_EKAFKA;
    goto fail;
  }
  rd_kafka_conf_set_dr_msg_cb(conf, ember_kafka_dr_status);
  rc = ember_kafka_producer_new(o->kafka, conf, &s->producer, err, err_size);
  if (rc != 0) goto fail;
  ember__follow_opts_t fo = {.kafka = o->kafka,
                             .topic = o->topic,
                             .group_prefix = o->group_prefix,
                             .what = s->what,
                             .apply = o->apply,
                             .ctx = o->ctx,
                             .messages = o->messages,
                             .errors = o->errors};
  rc = ember__follow_start(&fo, &s->follow, err, err_size);
  if (rc != 0) goto fail;
  *out = s;
  return 0;
fail:
  ember__shared_stop(s);
  return rc;
}

int ember__shared_put(ember__shared_t *s, const void *key, size_t key_len, const void *value,
                      size_t value_len, char *err, size_t err_size) {
  if (s == NULL || s->producer == NULL) {
    snprintf(err, err_size, "cannot share the %s with the other collectors: not connected",
             s ? s->what : "record");
    return EMBER_EKAFKA;
  }
  atomic_int status;
  atomic_init(&status, 1);
  rd_kafka_resp_err_t e = rd_kafka_producev(
      s->producer, RD_KAFKA_V_TOPIC(s->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_KEY(key, key_len), RD_KAFKA_V_VALUE((void *)(uintptr_t)value, value_len),
      RD_KAFKA_V_OPAQUE(&status), RD_KAFKA_V_END);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(err, err_size, "cannot share the %s with the other collectors (%s): %s", s->what,
             s->topic, rd_kafka_err2str(e));
    return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? EMBER_ETOOBIG : EMBER_EKAFKA;
  }
  /* Our own producer's messages time out at timeout_ms, so its report
   * comes by then; until it did, `status` is written to: wait for it. */
  while (atomic_load(&status) == 1) rd_kafka_poll(s->producer, 50);
  int st = atomic_load(&status);
  if (st != 0) {
    rd_kafka_resp_err_t why = (rd_kafka_resp_err_t)-st;
    snprintf(err, err_size, "cannot share the %s with the other collectors (%s): %s", s->what,
             s->topic, rd_kafka_err2str(why));
    return EMBER_EKAFKA;
  }
  return 0;
}

void ember__shared_stop(ember__shared_t *s) {
  if (s == NULL) return;
  ember__follow_stop(s->follow);
  if (s->producer != NULL) {
    rd_kafka_flush(s->producer, 2000);
    rd_kafka_destroy(s->producer);
  }
  ember_free(s);
}
