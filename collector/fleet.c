/* The fleet (fleet.h): the announcer and the peer table's feed, on the
 * thread of the ember.collectors follower.
 *
 * A record is made whole or not at all: runs the check refuses (or too
 * many to fit a record) are left out of it rather than keeping the
 * collector silent, since peers that stop hearing from it take it for
 * dead; the error is logged and counted. The last announced assignment is
 * kept so that a rebalance is announced within half a second, not at the
 * next interval. */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/log.h"
#include "fleet.h"
#include "follow.h"

#define MS_NS 1000000LL
/* How often the assignment is compared with the last announced one. */
#define ASSIGN_CHECK_NS (500 * MS_NS)

struct ember__fleet {
  ember__peers_t *peers;
  ember_metric_t *m_peers, *m_live, *m_announced, *m_errors, *m_malformed;
  ember__fleet_opts_t o; /* o.config by value; o.group_id points at group */
  char group[EMBER_COLLECTOR_MAX_ID + 1];
  ember__follow_t *follow;
  atomic_bool started; /* set once o is complete: API threads read o.config.id after it */
  bool stopped;
  int64_t started_ns;
  uint64_t seq;
  int64_t next_announce, next_check; /* monotonic */
  int32_t *assigned;                 /* as last announced */
  size_t nassigned;
  atomic_int delivery; /* of the latest records: 0 delivered (or none), 1 pending, < 0 failed */
  ember_buf_t buf;
};

/* ---- config ----------------------------------------------------------- */

int ember__fleet_read_config(const ember_config_t *cfg, uint16_t api_port,
                             ember__fleet_config_t *out, char *errbuf, size_t errbuf_size) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
    snprintf(host, sizeof host, "localhost");
  ember__fleet_config_t c = {0};
  const char *id = ember_config_get(cfg, "collector_id");
  const char *url = ember_config_get(cfg, "fleet.advertise_url");
  if ((size_t)(id != NULL ? snprintf(c.id, sizeof c.id, "%s", id)
                          : snprintf(c.id, sizeof c.id, "%s:%u", host, (unsigned)api_port)) >=
      sizeof c.id) {
    snprintf(errbuf, errbuf_size, "collector_id is longer than %u bytes", EMBER_COLLECTOR_MAX_ID);
    return EMBER_ECONFIG;
  }
  if ((size_t)(url != NULL ? snprintf(c.api_url, sizeof c.api_url, "%s", url)
                           : snprintf(c.api_url, sizeof c.api_url, "http://%s:%u", host,
                                      (unsigned)api_port)) >= sizeof c.api_url) {
    snprintf(errbuf, errbuf_size, "fleet.advertise_url is longer than %u bytes",
             EMBER_COLLECTOR_MAX_URL);
    return EMBER_ECONFIG;
  }
  int rc = ember_config_get_duration_ns(cfg, "fleet.announce_interval", 5000 * MS_NS,
                                        (int64_t)EMBER_COLLECTOR_MIN_INTERVAL_MS * MS_NS,
                                        (int64_t)EMBER_COLLECTOR_MAX_INTERVAL_MS * MS_NS,
                                        &c.interval_ns, errbuf, errbuf_size);
  if (rc != 0) return rc;
  /* What peers would refuse is refused here, naming the key. */
  ember_collector_info_t probe = {.id = c.id,
                                  .group_id = (char *)(uintptr_t) "g",
                                  .api_url = (char *)(uintptr_t) "http://h",
                                  .started_ns = 1,
                                  .announced_ns = 1,
                                  .seq = 1,
                                  .interval_ms = (uint32_t)(c.interval_ns / MS_NS)};
  char why[256] = "";
  if (ember_codec_check_collector(&probe, why, sizeof why) != 0) {
    snprintf(errbuf, errbuf_size, "collector_id \"%.64s\": %s", c.id, why);
    return EMBER_ECONFIG;
  }
  probe.api_url = c.api_url;
  if (ember_codec_check_collector(&probe, why, sizeof why) != 0) {
    snprintf(errbuf, errbuf_size, "fleet.advertise_url \"%.128s\": %s", c.api_url, why);
    return EMBER_ECONFIG;
  }
  *out = c;
  return 0;
}

/* ---- records ---------------------------------------------------------- */

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static int cmp_run(const void *a, const void *b) {
  const ember_collector_run_t *x = a, *y = b;
  if (x->partition != y->partition)
    return (x->partition > y->partition) - (x->partition < y->partition);
  return (x->start > y->start) - (x->start < y->start);
}

/* The partitions of ember.profiles the ingest consumer holds, ascending. */
static int read_assigned(ember__fleet_t *f, int32_t **out, size_t *count) {
  *out = NULL;
  *count = 0;
  if (f->o.consumer == NULL) return 0;
  rd_kafka_topic_partition_list_t *l = NULL;
  if (rd_kafka_assignment(f->o.consumer, &l) != RD_KAFKA_RESP_ERR_NO_ERROR) return EMBER_EKAFKA;
  int32_t *v = l->cnt > 0 ? ember_malloc((size_t)l->cnt * sizeof *v) : NULL;
  size_t n = 0;
  int rc = l->cnt > 0 && v == NULL ? -ENOMEM : 0;
  for (int i = 0; i < l->cnt && rc == 0; i++)
    if (strcmp(l->elems[i].topic, EMBER_TOPIC_PROFILES) == 0) v[n++] = l->elems[i].partition;
  rd_kafka_topic_partition_list_destroy(l);
  if (rc != 0) return rc;
  if (n > 1) qsort(v, n, sizeof *v, cmp_i32);
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (k == 0 || v[k - 1] != v[i]) v[k++] = v[i];
  if (k == 0) {
    ember_free(v);
    v = NULL;
  }
  *out = v;
  *count = k;
  return 0;
}

/* `what` went wrong announcing, because of `detail`: counted, logged. */
static void announce_error(ember__fleet_t *f, const char *what, const char *detail) {
  ember_metric_add(f->m_errors, 1);
  EMBER_WARN_LIMITED("fleet", "%s on %s: %s", what, EMBER_TOPIC_COLLECTORS, detail);
}

/* Make, send and apply one record. */
static void announce(ember__fleet_t *f, bool stopping) {
  ember_collector_info_t rec = {.id = f->o.config.id,
                                .group_id = f->group,
                                .api_url = f->o.config.api_url,
                                .started_ns = f->started_ns,
                                .announced_ns = ember_time_now_ns(),
                                .seq = f->seq + 1,
                                .interval_ms = (uint32_t)(f->o.config.interval_ns / MS_NS),
                                .stopping = stopping};
  ember_collector_run_t *runs = NULL;
  size_t nruns = 0;
  int32_t *assigned = NULL;
  size_t nassigned = 0;
  char err[256] = "";
  if (f->o.runs != NULL && f->o.runs(f->o.runs_ctx, &runs, &nruns) != 0) {
    announce_error(f, "announcing without runs", "the store's runs could not be read");
    runs = NULL;
    nruns = 0;
  }
  if (nruns > 1) qsort(runs, nruns, sizeof *runs, cmp_run);
  /* A stopping collector holds nothing by the time peers read it. */
  if (!stopping && read_assigned(f, &assigned, &nassigned) != 0)
    announce_error(f, "announcing without partitions", "the assignment is unknown");
  rec.runs = runs;
  rec.nruns = nruns;
  rec.assigned = assigned;
  rec.nassigned = nassigned;
  ember_buf_reset(&f->buf);
  int rc = ember_codec_check_collector(&rec, err, sizeof err);
  if (rc == 0) rc = ember_codec_encode_collector(&rec, &f->buf);
  if (rc != 0 && rec.nruns > 0) {
    if (err[0] == '\0') snprintf(err, sizeof err, "%s", ember_strerror(rc));
    announce_error(f, "announcing without runs", err);
    rec.runs = NULL;
    rec.nruns = 0;
    ember_buf_reset(&f->buf);
    rc = ember_codec_encode_collector(&rec, &f->buf);
  }
  if (rc != 0) {
    announce_error(f, "cannot announce", ember_strerror(rc));
    goto cleanup;
  }
  f->seq = rec.seq;
  /* Pending now, unless a failure is waiting to be counted. */
  int v = atomic_load(&f->delivery);
  while (v >= 0 && !atomic_compare_exchange_weak(&f->delivery, &v, 1)) {
  }
  rd_kafka_resp_err_t e = rd_kafka_producev(
      f->o.producer, RD_KAFKA_V_TOPIC(EMBER_TOPIC_COLLECTORS),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(rec.id, strlen(rec.id)),
      RD_KAFKA_V_VALUE(f->buf.data, f->buf.len), RD_KAFKA_V_OPAQUE(&f->delivery), RD_KAFKA_V_END);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    announce_error(f, "the producer refused an announcement", rd_kafka_err2str(e));
  } else {
    ember_metric_add(f->m_announced, 1);
  }
  /* Known here at once, whatever the broker does with it. */
  ember__peers_put(f->peers, &rec, ember_time_now_ns());
  ember_free(f->assigned);
  f->assigned = assigned;
  f->nassigned = nassigned;
  assigned = NULL;
cleanup:
  ember_free(runs);
  ember_free(assigned);
}

/* A failed delivery of a record, reported by the producer's callback. */
static void check_delivery(ember__fleet_t *f) {
  int v = atomic_load(&f->delivery);
  if (v < 0 && atomic_compare_exchange_strong(&f->delivery, &v, 0))
    announce_error(f, "an announcement was not delivered",
                   rd_kafka_err2str((rd_kafka_resp_err_t)-v));
}

static bool assignment_changed(ember__fleet_t *f) {
  int32_t *a = NULL;
  size_t n = 0;
  if (read_assigned(f, &a, &n) != 0) return false;
  bool changed = n != f->nassigned || (n > 0 && memcmp(a, f->assigned, n * sizeof *a) != 0);
  ember_free(a);
  return changed;
}

/* ---- the thread (the follower's) --------------------------------------- */

static int apply(void *ctx, const rd_kafka_message_t *m, char *err, size_t n) {
  ember__fleet_t *f = ctx;
  return ember__peers_apply(f->peers, m->key, m->key_len, m->payload, m->len, ember_time_now_ns(),
                            NULL, err, n);
}

static void tick(void *ctx) {
  ember__fleet_t *f = ctx;
  /* The shared producer's delivery reports (announcements, session
   * commands, alert records) are served here. */
  rd_kafka_poll(f->o.producer, 0);
  check_delivery(f);
  int64_t mono = ember_time_mono_ns();
  bool due = mono >= f->next_announce;
  if (!due && mono >= f->next_check) {
    f->next_check = mono + ASSIGN_CHECK_NS;
    due = assignment_changed(f);
  }
  if (due) {
    announce(f, false);
    f->next_announce = mono + f->o.config.interval_ns;
    f->next_check = mono + ASSIGN_CHECK_NS;
  }
  size_t all = 0, live = 0;
  ember__peers_count(f->peers, ember_time_now_ns(), &all, &live);
  ember_metric_set(f->m_peers, (double)all);
  ember_metric_set(f->m_live, (double)live);
}

/* ---- lifecycle ---------------------------------------------------------- */

int ember__fleet_new(ember_metrics_t *metrics, ember__fleet_t **out) {
  if (out == NULL) return -EINVAL;
  ember__fleet_t *f = ember_calloc(1, sizeof *f);
  if (f == NULL) return -ENOMEM;
  atomic_init(&f->delivery, 0);
  atomic_init(&f->started, false);
  ember_buf_init(&f->buf, EMBER_COLLECTOR_MAX_RECORD);
  int rc = ember__peers_new(&f->peers);
  if (rc != 0) {
    ember_free(f);
    return rc;
  }
  if (metrics != NULL) {
    f->m_peers = ember_metrics_gauge(metrics, "ember_fleet_peers",
                                     "Collectors in the peer table (ember.collectors), this one "
                                     "included.");
    f->m_live = ember_metrics_gauge(metrics, "ember_fleet_peers_live",
                                    "Collectors in the peer table announced within 3 of their "
                                    "intervals and not stopping.");
    f->m_announced = ember_metrics_counter(metrics, "ember_fleet_announcements_total",
                                           "Records this collector announced on ember.collectors.");
    f->m_errors = ember_metrics_counter(
        metrics, "ember_fleet_announce_errors_total",
        "Announcements refused by the producer, not delivered, or sent without their runs.");
    f->m_malformed = ember_metrics_counter(metrics, "ember_fleet_malformed_total",
                                           "ember.collectors records refused (logged).");
  }
  *out = f;
  return 0;
}

int ember__fleet_start(ember__fleet_t *f, const ember__fleet_opts_t *o, char *errbuf,
                       size_t errbuf_size) {
  if (f == NULL || o == NULL || o->kafka == NULL || o->producer == NULL || o->group_id == NULL ||
      atomic_load(&f->started))
    return -EINVAL;
  f->o = *o;
  if ((size_t)snprintf(f->group, sizeof f->group, "%s", o->group_id) >= sizeof f->group) {
    snprintf(errbuf, errbuf_size, "group_id is longer than %u bytes", EMBER_COLLECTOR_MAX_ID);
    return EMBER_ECONFIG;
  }
  f->o.group_id = f->group;
  f->started_ns = ember_time_now_ns();
  ember_collector_info_t probe = {.id = f->o.config.id,
                                  .group_id = f->group,
                                  .api_url = f->o.config.api_url,
                                  .started_ns = f->started_ns,
                                  .announced_ns = f->started_ns,
                                  .seq = 1,
                                  .interval_ms = (uint32_t)(f->o.config.interval_ns / MS_NS)};
  char why[256] = "";
  if (ember_codec_check_collector(&probe, why, sizeof why) != 0) {
    snprintf(errbuf, errbuf_size, "cannot announce this collector: %s", why);
    return EMBER_ECONFIG;
  }
  int rc = ember__peers_set_self(f->peers, f->o.config.id);
  if (rc != 0) return rc;
  f->next_announce = 0; /* the first tick */
  f->next_check = 0;
  ember__follow_opts_t fo = {.kafka = o->kafka,
                             .topic = EMBER_TOPIC_COLLECTORS,
                             .group_prefix = "ember-fleet",
                             .what = "collector record",
                             .apply = apply,
                             .tick = tick,
                             .ctx = f,
                             .errors = f->m_malformed};
  rc = ember__follow_start(&fo, &f->follow, errbuf, errbuf_size);
  if (rc != 0) return rc;
  atomic_store(&f->started, true);
  EMBER_INFO("fleet", "announcing %s (%s, group %s) on %s every %lld ms", f->o.config.id,
             f->o.config.api_url, f->group, EMBER_TOPIC_COLLECTORS,
             (long long)(f->o.config.interval_ns / MS_NS));
  return 0;
}

void ember__fleet_stop(ember__fleet_t *f, int flush_ms) {
  if (f == NULL || !atomic_load(&f->started) || f->stopped) return;
  f->stopped = true;
  ember__follow_stop(f->follow);
  f->follow = NULL;
  announce(f, true);
  rd_kafka_resp_err_t e = rd_kafka_flush(f->o.producer, flush_ms);
  int v = atomic_load(&f->delivery);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR || v != 0)
    EMBER_WARN("fleet", "the last record of %s (stopping) may not have reached %s: %s",
               f->o.config.id, EMBER_TOPIC_COLLECTORS,
               e != RD_KAFKA_RESP_ERR_NO_ERROR ? rd_kafka_err2str(e)
               : v < 0                         ? rd_kafka_err2str((rd_kafka_resp_err_t)-v)
                                               : "no delivery report yet");
  else
    EMBER_INFO("fleet", "announced %s as stopping", f->o.config.id);
}

void ember__fleet_free(ember__fleet_t *f) {
  if (f == NULL) return;
  /* Not stopped: the producer may be gone already, so no last record. */
  ember__follow_stop(f->follow);
  ember__peers_free(f->peers);
  ember_free(f->assigned);
  ember_buf_free(&f->buf);
  ember_free(f);
}

int ember__fleet_list(ember__fleet_t *f, int64_t now_ns, ember__peer_t **out, size_t *count) {
  if (f == NULL) return -EINVAL;
  return ember__peers_list(f->peers, now_ns, out, count);
}

ember__peers_t *ember__fleet_peers(ember__fleet_t *f) { return f ? f->peers : NULL; }

const char *ember__fleet_id(const ember__fleet_t *f) {
  return f != NULL && atomic_load(&f->started) ? f->o.config.id : "";
}
