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
};

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
  int rc =
      ember_kafka_consumer_new(o->kafka, group, NULL, topics, 1, &f->consumer, errbuf, errbuf_size);
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
  ember_free(f);
}
