/* A topic followed whole (follow.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "ember/log.h"
#include "follow.h"

struct ember__follow {
  ember__follow_opts_t o;
  rd_kafka_t *consumer;
  pthread_t thread;
  atomic_bool stop;
  bool caught_up;
  int32_t *eof; /* partitions seen at their end, until caught up */
  size_t neof, eof_cap;
};

/* A partition reached its end: once all assigned did, say so. */
static void on_eof(ember__follow_t *f, int32_t partition) {
  if (f->caught_up) return;
  bool seen = false;
  for (size_t i = 0; i < f->neof && !seen; i++) seen = f->eof[i] == partition;
  if (!seen) {
    if (f->neof == f->eof_cap) {
      size_t cap = f->eof_cap ? f->eof_cap * 2 : 16;
      int32_t *v = ember_realloc(f->eof, cap * sizeof *v);
      if (v == NULL) return;
      f->eof = v;
      f->eof_cap = cap;
    }
    f->eof[f->neof++] = partition;
  }
  rd_kafka_topic_partition_list_t *a = NULL;
  if (rd_kafka_assignment(f->consumer, &a) != RD_KAFKA_RESP_ERR_NO_ERROR || a == NULL) return;
  bool all = a->cnt > 0;
  for (int i = 0; i < a->cnt && all; i++) {
    bool found = false;
    for (size_t k = 0; k < f->neof && !found; k++) found = f->eof[k] == a->elems[i].partition;
    all = found;
  }
  rd_kafka_topic_partition_list_destroy(a);
  if (!all) return;
  f->caught_up = true;
  f->o.caught_up(f->o.ctx);
}

static void *follow_main(void *arg) {
  ember__follow_t *f = arg;
  while (!atomic_load(&f->stop)) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(f->consumer, 200);
    if (m != NULL && m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      char err[256] = "";
      ember_metric_add(f->o.messages, 1);
      if (f->o.apply(f->o.ctx, m, err, sizeof err) != 0) {
        ember_metric_add(f->o.errors, 1);
        EMBER_WARN_LIMITED("collector", "skipped %s %s[%" PRId32 "]@%" PRId64 ": %s", f->o.what,
                           rd_kafka_topic_name(m->rkt), m->partition, m->offset, err);
      }
    } else if (m != NULL && m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      if (f->o.caught_up != NULL) on_eof(f, m->partition);
    } else if (m != NULL) {
      EMBER_WARN_LIMITED("collector", "%s consumer: %s", rd_kafka_topic_name(m->rkt),
                         rd_kafka_message_errstr(m));
    }
    if (m != NULL) rd_kafka_message_destroy(m);
    if (f->o.tick != NULL) f->o.tick(f->o.ctx);
  }
  return NULL;
}

int ember__follow_start(const ember__follow_opts_t *o, ember__follow_t **out, char *errbuf,
                        size_t errbuf_size) {
  if (o == NULL || out == NULL || o->kafka == NULL || o->topic == NULL || o->apply == NULL)
    return -EINVAL;
  ember__follow_t *f = ember_calloc(1, sizeof *f);
  if (f == NULL) return -ENOMEM;
  f->o = *o;
  atomic_init(&f->stop, false);
  /* A group of its own per process and start, so nothing committed (or a
   * rebalance with another instance) ever moves where it starts. */
  char group[200];
  char host[64] = "host";
  gethostname(host, sizeof host - 1);
  snprintf(group, sizeof group, "%s.%s.%d.%lld", o->group_prefix ? o->group_prefix : "ember", host,
           (int)getpid(), (long long)(ember_time_now_ns() / 1000000));
  const char *topics[] = {o->topic};
  rd_kafka_conf_t *conf = NULL;
  int rc = 0;
  if (o->caught_up != NULL) {
    rc = ember_kafka_consumer_conf(o->kafka, group, &conf, errbuf, errbuf_size);
    if (rc == 0 && rd_kafka_conf_set(conf, "enable.partition.eof", "true", errbuf, errbuf_size) !=
                       RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      rc = EMBER_EKAFKA;
    }
  }
  if (rc == 0)
    rc = ember_kafka_consumer_new(o->kafka, group, conf, topics, 1, &f->consumer, errbuf,
                                  errbuf_size);
  if (rc != 0) {
    ember_free(f);
    return rc;
  }
  f->o.topic = NULL; /* borrowed for the call only */
  if (pthread_create(&f->thread, NULL, follow_main, f) != 0) {
    snprintf(errbuf, errbuf_size, "cannot start the thread that reads %s", o->topic);
    rd_kafka_consumer_close(f->consumer);
    rd_kafka_destroy(f->consumer);
    ember_free(f);
    return -EAGAIN;
  }
  *out = f;
  return 0;
}

void ember__follow_stop(ember__follow_t *f) {
  if (f == NULL) return;
  atomic_store(&f->stop, true);
  pthread_join(f->thread, NULL);
  rd_kafka_consumer_close(f->consumer);
  rd_kafka_destroy(f->consumer);
  ember_free(f->eof);
  ember_free(f);
}
