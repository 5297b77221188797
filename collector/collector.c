/* The collector (collector.h): ingest, registry and API wired together.
 *
 * The ingest thread polls ember.profiles and hands each message to ingest
 * (ingest.h: batches decoded on the decode threads, then stored, DLQ'd and
 * committed, in that order, by a writer thread); between polls it runs
 * retention and updates the gauges. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "alerts.h"
#include "api.h"
#include "collector.h"
#include "follow.h"
#include "ingest.h"
#include "health.h"
#include "notify.h"
#include "sessions.h"
#include "member.h"
#include "rules_fleet.h"
#include "srcmaps.h"
#include "decode_pool.h"
#include "ember/codec.h"
#include "ember/wire.h"
#include "ember/log.h"
#include "ember/metrics.h"
#include "ember/parse.h"

#define NS_PER_S 1000000000LL

const char *const ember__collector_config_keys[] = {EMBER_KAFKA_CONFIG_KEYS,
                                                    "data_dir",
                                                    "group_id",
                                                    EMBER__MEMBER_CONFIG_KEYS,
                                                    "store.map_size",
                                                    "store.max_size",
                                                    "store.sync",
                                                    "store.verify",
                                                    "health.stall_after",
                                                    "health.max_lag",
                                                    "batch.max_messages",
                                                    "batch.max_bytes",
                                                    "batch.linger",
                                                    "ingest.decode_threads",
                                                    "retention",
                                                    "retention_interval",
                                                    "log_level",
                                                    EMBER__API_CONFIG_KEYS,
                                                    EMBER__CSESSION_CONFIG_KEYS,
                                                    EMBER__ALERTS_CONFIG_KEYS,
                                                    "alerts.dashboard_url",
                                                    EMBER__FLEET_CONFIG_KEYS,
                                                    EMBER__SRCMAPS_CONFIG_KEYS,
                                                    NULL};
typedef struct metrics_set {
  ember__ingest_metrics_t in; /* ingest's (ingest.h) */
  ember_metric_t *targets, *target_messages, *target_errors, *store_bytes, *store_series,
      *store_stacks, *retained, *cpu_seconds, *rss_bytes, *lag, *map_bytes, *map_grows,
      *rule_messages, *rule_errors;
} metrics_set_t;

struct ember__collector {
  ember_kafka_t *kafka;
  bool own_kafka;
  ember_store_t *store;
  ember_metrics_t *metrics;
  metrics_set_t m;
  ember__api_t *api;
  ember__registry_t *registry;
  ember__follow_t *registry_follow; /* ember.targets -> registry */
  ember__follow_t *events_follow;   /* ember.events -> sessions */
  ember__member_t member;           /* this collector in the fleet (member.h) */
  int fault_kill_after;             /* EMBER_TEST_FAULT=kill_after_store:N */
  char fault_worker[128];           /* EMBER_TEST_FAULT=kill_after_store_of:WORKER */
  ember__csessions_t *sessions;
  ember__csessions_opts_t session_opts;
  ember__alerts_t *alerts;
  ember__alerts_opts_t alert_opts;
  ember__rules_fleet_t rules; /* API rules shared through ember.rules */
  ember__srcmaps_t *srcmaps;  /* uploaded source maps, shared through ember.sourcemaps */
  char *group;                /* group_id: the ingest group */
  ember__notify_t *notify;
  ember__notify_opts_t notify_opts;
  /* dlq also carries the session commands (ember.commands). */
  rd_kafka_t *consumer, *dlq;
  pthread_t ingest_thread;
  bool ingest_started;
  atomic_bool stop;

  size_t batch_max, batch_max_bytes;
  int64_t linger_ns, retention_ns, retention_every_ns;
  ember_codec_limits_t lim;
  ember__ingest_t *ingest;
  ember__dpool_t *pool; /* decode threads (ingest.decode_threads) */
  uint64_t decode_threads;

  /* /healthz: fed by the ingest thread, read by the API's. */
  ember__health_t health;
  int64_t stall_ns, max_lag; /* health.stall_after, health.max_lag */
  uint64_t max_size, map_grows_seen;
};

static void rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *parts, void *opaque) {
  ember__collector_t *c = opaque;
  bool cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
  if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
    EMBER_INFO("collector", "assigned %d partition(s) of %s", parts->cnt, EMBER_TOPIC_PROFILES);
    ember__shards_assign(c->member.shards, rk, parts, 5000);
    if (cooperative)
      rd_kafka_error_destroy(rd_kafka_incremental_assign(rk, parts));
    else
      rd_kafka_assign(rk, parts);
  } else {
    /* Store and commit what we hold before another member takes over. */
    ember__ingest_drain(c->ingest);
    ember__shards_revoke(c->member.shards, parts);
    EMBER_INFO("collector", "released %d partition(s) of %s", parts->cnt, EMBER_TOPIC_PROFILES);
    if (cooperative)
      rd_kafka_error_destroy(rd_kafka_incremental_unassign(rk, parts));
    else
      rd_kafka_assign(rk, NULL);
  }
}

static void run_retention(ember__collector_t *c) {
  if (c->retention_ns <= 0) return;
  uint64_t deleted = 0;
  int64_t before = ember_time_now_ns() - c->retention_ns;
  int rc = ember_store_retain(c->store, before, 1000, &deleted);
  if (rc != 0) {
    EMBER_ERROR("collector", "retention failed: %s (it runs again later)",
                ember_store_strerror(rc));
    return;
  }
  ember_metric_add(c->m.retained, (double)deleted);
  if (deleted > 0)
    EMBER_INFO("collector", "retention deleted %" PRIu64 " entries older than %lld s", deleted,
               (long long)(c->retention_ns / NS_PER_S));
}

/* Messages of ember.profiles in this instance's partitions not consumed
 * yet: the high watermark librdkafka last saw (no broker round trip) minus
 * the position, summed; partitions without a position yet are left out.
 * The way to tell a collector group that falls behind its agents. */
static void update_lag(ember__collector_t *c) {
  rd_kafka_topic_partition_list_t *a = NULL;
  if (rd_kafka_assignment(c->consumer, &a) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  int64_t lag = 0;
  if (rd_kafka_position(c->consumer, a) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    for (int i = 0; i < a->cnt; i++) {
      const rd_kafka_topic_partition_t *tp = &a->elems[i];
      int64_t lo, hi;
      if (tp->offset < 0 || rd_kafka_get_watermark_offsets(c->consumer, tp->topic, tp->partition,
                                                           &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR)
        continue;
      if (hi > tp->offset) lag += hi - tp->offset;
    }
  }
  rd_kafka_topic_partition_list_destroy(a);
  ember_metric_set(c->m.lag, (double)lag);
  ember__health_lag(&c->health, lag, ember_time_mono_ns());
}

static bool collector_ready(void *ctx, char *why, size_t n) {
  ember__collector_t *c = ctx;
  return ember__health_ready(&c->health, ember_time_mono_ns(), why, n);
}

static void update_gauges(ember__collector_t *c) {
  ember_store_stats_t st;
  if (ember_store_stats(c->store, &st) == 0) {
    if (st.map_grows > c->map_grows_seen) {
      ember_metric_add(c->m.map_grows, (double)(st.map_grows - c->map_grows_seen));
      EMBER_WARN("collector",
                 "the store's map was full: grown to %" PRIu64 " MiB (store.max_size %" PRIu64
                 " MiB)",
                 st.map_bytes >> 20, c->max_size >> 20);
      c->map_grows_seen = st.map_grows;
    }
    ember_metric_set(c->m.map_bytes, (double)st.map_bytes);
    ember_metric_set(c->m.store_bytes, (double)st.file_bytes);
    ember_metric_set(c->m.store_series, (double)st.series);
    ember_metric_set(c->m.store_stacks, (double)st.stacks);
  }
  ember_metric_set(c->m.targets, (double)ember__registry_count(c->registry));
  ember_metric_set(c->m.cpu_seconds, ember_self_cpu_seconds());
  ember_metric_set(c->m.rss_bytes, ember_self_rss_bytes());
  update_lag(c);
}

static void *ingest_main(void *arg) {
  ember__collector_t *c = arg;
  int64_t next_retain = ember_time_mono_ns();
  int64_t next_gauges = 0;
  while (!atomic_load(&c->stop)) {
    /* /healthz sees a write that never returns only by this beat ageing. */
    ember__health_beat(&c->health, ember_time_mono_ns());
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c->consumer, 100);
    if (m != NULL) ember__ingest_take(c->ingest, m);
    int64_t now = ember_time_mono_ns();
    ember__ingest_tick(c->ingest, m == NULL, now);
    if (now >= next_retain) {
      run_retention(c);
      next_retain = now + c->retention_every_ns;
    }
    if (now >= next_gauges) {
      update_gauges(c);
      next_gauges = now + NS_PER_S;
    }
  }
  ember__ingest_drain(c->ingest);
  return NULL;
}

/* ---- registry: ember.targets followed whole (follow.h) ----------------- */

static int registry_apply(void *ctx, const rd_kafka_message_t *m, char *err, size_t n) {
  ember__collector_t *c = ctx;
  return ember__registry_apply(c->registry, m->key, m->key_len, m->payload, m->len, err, n);
}

static int start_registry(ember__collector_t *c, char *err, size_t n) {
  ember__follow_opts_t fo = {.kafka = c->kafka,
                             .topic = EMBER_TOPIC_TARGETS,
                             .group_prefix = "ember-registry",
                             .what = "target",
                             .apply = registry_apply,
                             .ctx = c,
                             .messages = c->m.target_messages,
                             .errors = c->m.target_errors};
  return ember__follow_start(&fo, &c->registry_follow, err, n);
}

/* ---- the test-only fault hook ----------------------------------------- */

/* EMBER_TEST_FAULT=kill_after_store:N: SIGKILL this process after its Nth
 * stored batch, between the LMDB commit and the Kafka commit (the crash
 * the shards' rule is for; test_collector_shards). kill_after_store_of:W:
 * after the first stored batch that holds a window of worker W (a test
 * sharing the topic with others cannot count batches; test_fleet_query). */
static int read_fault(ember__collector_t *c, char *err, size_t n) {
  const char *fault = getenv("EMBER_TEST_FAULT");
  const char *of = "kill_after_store_of:";
  if (fault != NULL && strncmp(fault, of, strlen(of)) == 0) {
    const char *w = fault + strlen(of);
    if (*w == '\0' || strlen(w) >= sizeof c->fault_worker) {
      snprintf(err, n, "EMBER_TEST_FAULT: expected kill_after_store_of:WORKER");
      return EMBER_ECONFIG;
    }
    snprintf(c->fault_worker, sizeof c->fault_worker, "%s", w);
    EMBER_WARN("collector",
               "EMBER_TEST_FAULT is set: this process kills itself after storing a window of "
               "%s (a test-only hook)",
               w);
    return 0;
  }
  const char *pfx = "kill_after_store:";
  if (fault == NULL || strncmp(fault, pfx, strlen(pfx)) != 0) return 0;
  int64_t k = 0;
  if (ember_parse_i64(fault + strlen(pfx), 1, 1000000, &k) != 0) {
    snprintf(err, n, "EMBER_TEST_FAULT: expected kill_after_store:N with N a positive number");
    return EMBER_ECONFIG;
  }
  c->fault_kill_after = (int)k;
  EMBER_WARN("collector",
             "EMBER_TEST_FAULT is set: this process kills itself after stored "
             "batch %d (a test-only hook)",
             c->fault_kill_after);
  return 0;
}

/* ---- sessions thread ------------------------------------------------- */

/* ember.events followed whole from its beginning, never committed
 * (follow.h): every collector rebuilds every session from it at each
 * start (sessions.h). */
static int events_apply(void *ctx, const rd_kafka_message_t *m, char *err, size_t n) {
  ember__collector_t *c = ctx;
  return ember__csessions_event(c->sessions, m->payload, m->len, err, n);
}

static void events_tick(void *ctx) {
  ember__collector_t *c = ctx;
  ember__csessions_tick(c->sessions, ember_time_now_ns());
}

static void events_caught_up(void *ctx) {
  ember__collector_t *c = ctx;
  ember__csessions_caught_up(c->sessions);
}

static int start_events(ember__collector_t *c, char *err, size_t n) {
  ember__follow_opts_t fo = {.kafka = c->kafka,
                             .topic = EMBER_TOPIC_EVENTS,
                             .group_prefix = "ember-events",
                             .what = "event",
                             .apply = events_apply,
                             .tick = events_tick,
                             .caught_up = events_caught_up,
                             .ctx = c};
  return ember__follow_start(&fo, &c->events_follow, err, n);
}

/* ---- start / stop ---------------------------------------------------- */

static void register_metrics(ember__collector_t *c) {
  ember_metrics_t *r = c->metrics;
  metrics_set_t *m = &c->m;
  m->in.messages = ember_metrics_counter(r, "ember_collector_messages_total",
                                         "Messages consumed from ember.profiles.");
  m->in.profiles = ember_metrics_counter(r, "ember_collector_profiles_stored_total",
                                         "Profile windows written to the store.");
  m->in.samples =
      ember_metrics_counter(r, "ember_collector_samples_total",
                            "CPU samples in the profiles consumed (stored or duplicate).");
  m->in.duplicates = ember_metrics_counter(r, "ember_collector_duplicates_total",
                                           "Profiles skipped: their (agent_id, seq) was stored.");
  m->in.expired = ember_metrics_counter(r, "ember_collector_expired_total",
                                        "Profiles skipped: older than the retention cutoff.");
  m->in.malformed = ember_metrics_counter(r, "ember_collector_malformed_total",
                                          "Messages that failed validation (copied to the DLQ).");
  m->in.dlq_errors = ember_metrics_counter(r, "ember_collector_dlq_errors_total",
                                           "DLQ deliveries that failed and were retried.");
  m->in.batches = ember_metrics_counter(r, "ember_collector_batches_total",
                                        "Batches flushed (one store transaction each).");
  m->in.batch_seconds =
      ember_metrics_counter(r, "ember_collector_batch_seconds_total",
                            "Time spent storing, DLQ-ing and committing batches.");
  m->in.store_errors = ember_metrics_counter(r, "ember_collector_store_errors_total",
                                             "Store writes that failed and were retried.");
  m->in.commit_errors = ember_metrics_counter(r, "ember_collector_commit_errors_total",
                                              "Offset commits that failed (messages re-read).");
  m->in.consumer_errors = ember_metrics_counter(r, "ember_collector_consumer_errors_total",
                                                "Errors reported by the Kafka consumer.");
  m->targets = ember_metrics_gauge(r, "ember_collector_targets", "Targets in the registry.");
  m->lag = ember_metrics_gauge(r, "ember_collector_consumer_lag",
                               "Messages of ember.profiles in this instance's partitions not "
                               "consumed yet (high watermark minus position).");
  m->target_messages = ember_metrics_counter(r, "ember_collector_target_messages_total",
                                             "Messages consumed from ember.targets.");
  m->target_errors = ember_metrics_counter(r, "ember_collector_target_errors_total",
                                           "ember.targets messages that failed to decode.");
  m->rule_messages = ember_metrics_counter(r, "ember_collector_rule_records_total",
                                           "Records read from ember.rules.");
  m->rule_errors = ember_metrics_counter(r, "ember_collector_rule_record_errors_total",
                                         "ember.rules records not applied (not a valid rule, or "
                                         "a file rule here has the name).");
  m->store_bytes = ember_metrics_gauge(r, "ember_store_file_bytes", "Bytes in use in the store.");
  m->store_series = ember_metrics_gauge(r, "ember_store_series", "Distinct label sets stored.");
  m->store_stacks = ember_metrics_gauge(r, "ember_store_stacks", "Distinct stacks stored.");
  m->retained = ember_metrics_counter(r, "ember_store_retention_deleted_total",
                                      "Entries deleted by retention.");
  m->cpu_seconds = ember_metrics_gauge(r, "ember_collector_cpu_seconds",
                                       "CPU time used by the collector process.");
  m->rss_bytes = ember_metrics_gauge(r, "ember_collector_resident_bytes",
                                     "Resident memory of the collector process.");
  m->in.splits = ember_metrics_counter(r, "ember_collector_batch_splits_total",
                                       "Batches written in parts: the store's map was full at "
                                       "store.max_size.");
  m->map_bytes = ember_metrics_gauge(
      r, "ember_store_map_bytes", "Current size of the store's map (grows up to store.max_size).");
  m->map_grows = ember_metrics_counter(r, "ember_store_map_grows_total",
                                       "Times the store's map was full and was grown.");
  m->in.wire_v1 = ember_metrics_counter_of(r, "ember_collector_wire_messages_total", "version", "1",
                                           "Messages of ember.profiles decoded, by wire version.");
  m->in.wire_v2 = ember_metrics_counter_of(r, "ember_collector_wire_messages_total", "version", "2",
                                           "Messages of ember.profiles decoded, by wire version.");
}

static int read_config(ember__collector_t *c, const ember_config_t *cfg, char *err, size_t n) {
  c->group = ember_strdup(ember_config_get_str(cfg, "group_id", "ember-collector"));
  if (c->group == NULL) return -ENOMEM;
  uint64_t v;
  int rc = ember_config_get_u64(cfg, "batch.max_messages", 1000, 1, 100000, &v, err, n);
  if (rc != 0) return rc;
  c->batch_max = (size_t)v;
  rc = ember_config_get_u64(cfg, "batch.max_bytes", 64u << 20, 1024, 1u << 30, &v, err, n);
  if (rc != 0) return rc;
  c->batch_max_bytes = (size_t)v;
  rc = ember_config_get_duration_ns(cfg, "batch.linger", 200 * 1000000LL, 0, 60 * NS_PER_S,
                                    &c->linger_ns, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "retention", 7 * 86400 * NS_PER_S, 0,
                                      3650 * 86400 * NS_PER_S, &c->retention_ns, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "retention_interval", 600 * NS_PER_S, NS_PER_S,
                                      86400 * NS_PER_S, &c->retention_every_ns, err, n);
  /* Decode threads: the cores the writer does not use, a few at most. */
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  uint64_t dflt = ncpu > 1 ? (uint64_t)(ncpu - 1) : 0;
  if (dflt > 4) dflt = 4;
  if (rc == 0)
    rc =
        ember_config_get_u64(cfg, "ingest.decode_threads", dflt, 0, 64, &c->decode_threads, err, n);
  ember_codec_limits_default(&c->lim);
  int64_t max_dur = 0, keep = 0, answer = 0;
  uint64_t max_hz = 0, max_active = 0;
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "session.max_duration", 60 * NS_PER_S, NS_PER_S / 1000,
                                      3600 * NS_PER_S, &max_dur, err, n);
  if (rc == 0) rc = ember_config_get_u64(cfg, "session.max_hz", 1000, 1, 100000, &max_hz, err, n);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "session.max_active", 100, 1, 100000, &max_active, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "session.keep", 86400 * NS_PER_S, NS_PER_S,
                                      30 * 86400 * NS_PER_S, &keep, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "session.answer_timeout", 30 * NS_PER_S, NS_PER_S,
                                      3600 * NS_PER_S, &answer, err, n);
  uint64_t max_lag = 0;
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "health.stall_after", 30 * NS_PER_S, NS_PER_S / 10,
                                      3600 * NS_PER_S, &c->stall_ns, err, n);
  if (rc == 0)
    rc =
        ember_config_get_u64(cfg, "health.max_lag", 100000, 0, (uint64_t)1 << 40, &max_lag, err, n);
  c->max_lag = (int64_t)max_lag;
  ember__health_init(&c->health, c->stall_ns, c->max_lag);
  c->session_opts = (ember__csessions_opts_t){.max_duration_ms = (uint32_t)(max_dur / 1000000),
                                              .max_hz = (uint32_t)max_hz,
                                              .max_active = (size_t)max_active,
                                              .keep_ns = keep,
                                              .answer_timeout_ns = answer};
  c->session_opts.command_key_file = ember_config_get(cfg, "command_key_file");
  if (rc == 0) rc = ember__alerts_read_config(cfg, &c->alert_opts, &c->notify_opts, err, n);
  return rc;
}

/* Alerting: the engine (before the API, which serves it) and, once the
 * API's port is known (the alerts' links point at the dashboard), the
 * notifier and the engine's thread. */
static int start_alerts(ember__collector_t *c, char *err, size_t n) {
  c->alert_opts.store = c->store;
  c->alert_opts.sessions = c->sessions;
  c->alert_opts.metrics = c->metrics;
  c->alert_opts.share = ember__rules_fleet_share;
  c->alert_opts.share_ctx = &c->rules;
  int rc = ember__alerts_new(&c->alert_opts, &c->alerts, err, n);
  if (rc != 0) return rc;
  c->rules.alerts = c->alerts;
  c->rules.group = c->group;
  c->rules.messages = c->m.rule_messages;
  c->rules.errors = c->m.rule_errors;
  return ember__rules_fleet_start(&c->rules, c->kafka, err, n);
}

/* Uploaded source maps: the index of the store's maps, and the store's
 * frame map, before anything reads the store; shared once Kafka is up. */
static int open_srcmaps(ember__collector_t *c, const ember_config_t *cfg, char *err, size_t n) {
  ember__srcmaps_opts_t so = {.store = c->store, .metrics = c->metrics};
  int rc = ember__srcmaps_read_config(cfg, &so, err, n);
  if (rc == 0) rc = ember__srcmaps_new(&so, &c->srcmaps, err, n);
  if (rc != 0) return rc;
  ember_store_frame_map_t fm;
  ember__srcmaps_frame_map(c->srcmaps, &fm);
  ember_store_set_frame_map(c->store, &fm);
  return ember__srcmaps_start(c->srcmaps, c->kafka, err, n);
}

static int start_notify(ember__collector_t *c, const ember_config_t *cfg, char *err, size_t n) {
  char url[320];
  const char *base = ember_config_get(cfg, "alerts.dashboard_url");
  if (base == NULL) {
    /* The API's own address: fine on one host; set alerts.dashboard_url
     * when receivers open links from elsewhere. */
    snprintf(url, sizeof url, "http://127.0.0.1:%u", (unsigned)ember__api_port(c->api));
    base = url;
  }
  c->notify_opts.metrics = c->metrics;
  c->notify_opts.dashboard_url = base;
  c->notify_opts.producer = c->dlq;
  c->notify_opts.topic = EMBER_TOPIC_ALERTS;
  int rc = ember__notify_new(&c->notify_opts, &c->notify, err, n);
  if (rc == 0) rc = ember__alerts_start(c->alerts, c->notify);
  if (rc != 0 && err[0] == '\0') snprintf(err, n, "cannot start alerting: %s", ember_strerror(rc));
  return rc;
}

static int open_store(ember__collector_t *c, const ember_config_t *cfg, char *err, size_t n) {
  const char *dir = ember_config_get_str(cfg, "data_dir", "./ember-data");
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    int rc = -errno;
    snprintf(err, n, "cannot create data_dir %s: %s", dir, strerror(errno));
    return rc;
  }
  uint64_t map_size, max_size;
  bool sync, verify;
  int rc = ember_config_get_u64(cfg, "store.map_size", (uint64_t)16 << 30, (uint64_t)1 << 20,
                                (uint64_t)1 << 44, &map_size, err, n);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "store.max_size",
                              map_size > ((uint64_t)1 << 42) ? map_size : map_size * 4, map_size,
                              (uint64_t)1 << 44, &max_size, err, n);
  if (rc == 0) rc = ember_config_get_bool(cfg, "store.sync", true, &sync, err, n);
  if (rc == 0) rc = ember_config_get_bool(cfg, "store.verify", true, &verify, err, n);
  if (rc != 0) return rc;
  c->max_size = max_size;
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/store.lmdb", dir) >= sizeof path) {
    snprintf(err, n, "data_dir is too long");
    return EMBER_ECONFIG;
  }
  if (verify) {
    /* Before anything touches the file (retention runs first thing): a
     * damaged page faults the child that walks it, not the collector. */
    uint64_t entries = 0;
    int64_t t0 = ember_time_mono_ns();
    rc = ember_store_verify(path, &entries, err, n);
    if (rc == -ENOENT) {
      rc = 0; /* a new store */
    } else if (rc != 0) {
      return rc; /* err says what and how to recover */
    } else {
      EMBER_INFO("collector", "store %s verified: %" PRIu64 " entries in %.1f s", path, entries,
                 (double)(ember_time_mono_ns() - t0) / 1e9);
    }
  }
  ember_store_opts_t so = {
      .map_size = (size_t)map_size, .max_size = (size_t)max_size, .no_sync = !sync};
  rc = ember_store_open(path, &so, &c->store, err, n);
  if (rc == 0) EMBER_INFO("collector", "store %s", path);
  return rc;
}

static int make_consumers(ember__collector_t *c, const ember_config_t *cfg, char *err, size_t n) {
  const char *group = ember_config_get_str(cfg, "group_id", "ember-collector");
  rd_kafka_conf_t *conf = NULL;
  int rc = ember_kafka_consumer_conf(c->kafka, group, &conf, err, n);
  if (rc != 0) return rc;
  rd_kafka_conf_set_rebalance_cb(conf, rebalance);
  rd_kafka_conf_set_opaque(conf, c);
  const char *profiles[] = {EMBER_TOPIC_PROFILES};
  rc = ember_kafka_consumer_new(c->kafka, group, conf, profiles, 1, &c->consumer, err, n);
  if (rc != 0) return rc;

  rd_kafka_conf_t *pconf = NULL;
  rc = ember_kafka_producer_conf(c->kafka, &pconf, err, n);
  if (rc != 0) return rc;
  rd_kafka_conf_set_dr_msg_cb(pconf, ember_kafka_dr_status);
  rc = ember_kafka_producer_new(c->kafka, pconf, &c->dlq, err, n);
  if (rc != 0) return rc;
  EMBER_INFO("collector", "consuming %s in group %s", EMBER_TOPIC_PROFILES, group);
  return 0;
}

int ember__collector_start(const ember_config_t *cfg, ember_kafka_t *kafka,
                           ember__collector_t **out, char *errbuf, size_t errbuf_size) {
  ember__collector_t *c = ember_calloc(1, sizeof *c);
  if (c == NULL) return -ENOMEM;
  atomic_init(&c->stop, false);
  /* Every thread made from here on (ours, librdkafka's, libmicrohttpd's)
   * starts with all signals blocked; the caller's mask comes back after. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = read_config(c, cfg, errbuf, errbuf_size);
  if (rc == 0) {
    rc = ember__dpool_new(c->decode_threads, c->batch_max, &c->pool);
    if (rc != 0)
      snprintf(errbuf, errbuf_size, "cannot start the decode threads: %s", ember_strerror(rc));
  }
  if (rc == 0) rc = ember__registry_new(&c->registry);
  if (rc == 0) rc = ember_metrics_new(&c->metrics);
  if (rc == 0) {
    register_metrics(c);
    rc = ember__member_init(&c->member, cfg, c->metrics, errbuf, errbuf_size);
  }
  if (rc == 0) rc = read_fault(c, errbuf, errbuf_size);
  if (rc == 0) {
    if (kafka == NULL) {
      rc = ember_kafka_new(cfg, &c->kafka, errbuf, errbuf_size);
      c->own_kafka = rc == 0;
    } else {
      c->kafka = kafka;
    }
  }
  if (rc == 0) rc = ember_kafka_ensure_topics(c->kafka, 15000, errbuf, errbuf_size);
  if (rc == 0) rc = open_store(c, cfg, errbuf, errbuf_size);
  if (rc == 0) rc = open_srcmaps(c, cfg, errbuf, errbuf_size);
  if (rc == 0) rc = make_consumers(c, cfg, errbuf, errbuf_size);
  if (rc == 0) {
    c->session_opts.registry = c->registry;
    c->session_opts.producer = c->dlq;
    c->session_opts.metrics = c->metrics;
    c->session_opts.replay = true;
    rc = ember__csessions_new(&c->session_opts, &c->sessions, errbuf, errbuf_size);
  }
  if (rc == 0) rc = start_alerts(c, errbuf, errbuf_size);
  if (rc == 0) {
    ember__api_opts_t ao = {.listen = ember_config_get_str(cfg, "api.listen", "127.0.0.1:7272"),
                            .token = ember_config_get(cfg, "api.token"),
                            .store = c->store,
                            .metrics = c->metrics,
                            .registry = c->registry,
                            .sessions = c->sessions,
                            .alerts = c->alerts,
                            .fleet = c->member.fleet,
                            .fleetq = &c->member.fleetq,
                            .srcmaps = c->srcmaps,
                            .ready = collector_ready,
                            .ready_ctx = c};
    rc = ember__api_read_config(cfg, &ao, errbuf, errbuf_size);
    if (rc == 0) rc = ember__api_start(&ao, &c->api, errbuf, errbuf_size);
    if (rc == 0)
      EMBER_INFO("collector", "API on http://%s/api/v1 (port %u)%s", ao.listen,
                 ember__api_port(c->api), ao.token && *ao.token ? ", token required" : "");
  }
  if (rc == 0) rc = start_notify(c, cfg, errbuf, errbuf_size);
  if (rc == 0) rc = start_registry(c, errbuf, errbuf_size);
  if (rc == 0) rc = start_events(c, errbuf, errbuf_size);
  /* Once the API's port is known: collector_id and fleet.advertise_url
   * default from it. */
  if (rc == 0)
    rc = ember__member_start(&c->member, cfg, c->store, c->kafka, c->dlq, c->consumer,
                             ember_config_get_str(cfg, "group_id", "ember-collector"),
                             ember__api_port(c->api), errbuf, errbuf_size);
  if (rc == 0) {
    ember__ingest_opts_t io = {.store = c->store,
                               .consumer = c->consumer,
                               .dlq = c->dlq,
                               .sessions = c->sessions,
                               .shards = c->member.shards,
                               .health = &c->health,
                               .pool = c->pool,
                               .lim = c->lim,
                               .stop = &c->stop,
                               .batch_max = c->batch_max,
                               .batch_max_bytes = c->batch_max_bytes,
                               .linger_ns = c->linger_ns,
                               .max_size = c->max_size,
                               .fault_kill_after = c->fault_kill_after,
                               .fault_worker = c->fault_worker,
                               .m = c->m.in};
    c->ingest_started = ember__ingest_new(&io, &c->ingest) == 0 &&
                        pthread_create(&c->ingest_thread, NULL, ingest_main, c) == 0;
    if (!c->ingest_started) {
      snprintf(errbuf, errbuf_size, "cannot start the collector's threads");
      rc = -EAGAIN;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ember__collector_stop(c);
    return rc;
  }
  *out = c;
  return 0;
}

uint16_t ember__collector_api_port(const ember__collector_t *c) {
  return c && c->api ? ember__api_port(c->api) : 0;
}

void ember__collector_stop(ember__collector_t *c) {
  if (c == NULL) return;
  /* Queries first, so nothing reads the store while it closes. */
  ember__api_stop(c->api);
  /* Before the engine: records of ember.rules are applied to it. */
  ember__rules_fleet_stop(&c->rules);
  ember__srcmaps_stop(c->srcmaps);
  /* The engine's round in hand ends; what the notifier holds gets two
   * seconds (undelivered notifications are sent again at the next start). */
  ember__alerts_stop(c->alerts);
  ember__notify_free(c->notify, 2000);
  ember__alerts_free(c->alerts);
  atomic_store(&c->stop, true);
  if (c->ingest_started) pthread_join(c->ingest_thread, NULL);
  /* The last batch is stored: the last record says so, while the ingest
   * consumer (whose assignment the fleet reads) still exists. */
  ember__member_stop(&c->member, 5000);
  ember__follow_stop(c->registry_follow);
  ember__follow_stop(c->events_follow);
  if (c->consumer != NULL) {
    /* Leaves the group; the revoke callback finds the batch already empty. */
    rd_kafka_consumer_close(c->consumer);
  }
  /* Every batch was drained (at the ingest thread's end, and by the revoke
   * in the close above): the writer has nothing left, and commits with
   * the consumer, so it goes first. */
  ember__ingest_free(c->ingest);
  c->ingest = NULL;
  if (c->consumer != NULL) {
    rd_kafka_destroy(c->consumer);
  }
  if (c->dlq != NULL) {
    rd_kafka_flush(c->dlq, 5000);
    rd_kafka_destroy(c->dlq);
  }
  ember__dpool_free(c->pool);
  ember_store_close(c->store);
  /* After the store: its frame map points here. */
  ember__srcmaps_free(c->srcmaps);
  if (c->own_kafka) ember_kafka_free(c->kafka);
  ember__csessions_free(c->sessions);
  ember__member_free(&c->member);
  ember__registry_free(c->registry);
  ember_metrics_free(c->metrics);
  EMBER_INFO("collector", "stopped");
  ember_free(c->group);
  ember_free(c);
}

int ember__collector_reload(ember__collector_t *c) {
  if (c == NULL || c->alerts == NULL) return 0;
  char err[512] = "";
  int rc = ember__alerts_reload(c->alerts, err, sizeof err);
  if (rc != 0) EMBER_ERROR("collector", "SIGHUP: the rules stay as they were: %s", err);
  return rc;
}

int ember__collector_run(const ember_config_t *cfg) {
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &old);
  char err[512] = "";
  ember__collector_t *c = NULL;
  int rc = ember__collector_start(cfg, NULL, &c, err, sizeof err);
  if (rc != 0) {
    EMBER_ERROR("collector", "cannot start: %s", err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
  }
  int sig = 0;
  while (sigwait(&set, &sig) == 0 && sig == SIGHUP) {
    EMBER_INFO("collector", "SIGHUP: reading alerts.rules again");
    ember__collector_reload(c);
  }
  EMBER_INFO("collector", "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  ember__collector_stop(c);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return 0;
}
