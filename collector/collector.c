/* The collector (collector.h): ingest, registry and API wired together.
 *
 * The ingest thread fills a batch of consumed messages (decoded on the
 * decode threads as they arrive) and hands it, once decoded, to the writer
 * thread, then fills the other batch while that one is written: at most
 * one batch is being written and one filled. A message is kept
 * (rd_kafka_message_t) until its batch is flushed, so that anything the
 * store refuses can still be copied to the DLQ byte for byte. The writer
 * takes batches in the order they were handed over, and flushing one is,
 * in order:
 *   1. one ember_store_write() of every decoded profile (a store error that
 *      is not about the input is retried with backoff, never skipped: the
 *      offsets are not committed until it succeeds);
 *   2. the malformed messages produced to ember.profiles.dlq and flushed
 *      until the broker acknowledged each one;
 *   3. a synchronous commit of the batch's offsets.
 * A crash between any two steps replays the batch (and the one being
 * filled, never committed); step 1 then finds every (agent_id, seq)
 * already stored and step 2 at worst copies a bad message to the DLQ twice
 * (the DLQ is at-least-once, the store exactly-once). Before partitions
 * are revoked, and at the end, the ingest thread hands over what it has
 * and waits until the writer has flushed it (drain). */
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

/* One consumed message and what became of it. */
typedef struct item {
  rd_kafka_message_t *msg;
  /* What the message decoded to: a window (wire), or a session result
   * (profile, for the sessions' table and ember__csessions_result). Both
   * NULL: malformed, goes to the DLQ. */
  ember_wire_t *wire;
  ember_profile_t *profile;
  char *reason;                   /* why it is malformed (owned) */
  bool bad_decode;                /* set by the decode job; counted and logged after it */
  struct ember__collector *owner; /* for the decode job */
  bool stored;                    /* written on its own while isolating a bad profile */
  ember_store_source_t src;       /* its partition, offset and run (shards.h) */
  atomic_int dlq_status;          /* 1 pending, 0 delivered, else -rd_kafka_resp_err */
} item_t;

typedef struct batch {
  item_t *items;
  size_t n, cap;
  size_t bytes;
  int64_t first_mono_ns;
} batch_t;

typedef struct metrics_set {
  ember_metric_t *messages, *profiles, *samples, *duplicates, *expired, *malformed, *dlq_errors,
      *batches, *batch_seconds, *store_errors, *commit_errors, *consumer_errors, *targets,
      *target_messages, *target_errors, *store_bytes, *store_series, *store_stacks, *retained,
      *cpu_seconds, *rss_bytes, *lag, *splits, *map_bytes, *map_grows, *rule_messages, *rule_errors,
      *wire_v1, *wire_v2;
} metrics_set_t;

struct ember__collector {
  ember_kafka_t *kafka;
  bool own_kafka;
  ember_store_t *store;
  ember_metrics_t *metrics;
  metrics_set_t m;
  ember__api_t *api;
  ember__registry_t *registry;
  ember__follow_t *registry_follow;    /* ember.targets -> registry */
  ember__follow_t *events_follow;      /* ember.events -> sessions */
  ember__member_t member;              /* this collector in the fleet (member.h) */
  int fault_kill_after, fault_batches; /* EMBER_TEST_FAULT=kill_after_store:N */
  char fault_worker[128];              /* EMBER_TEST_FAULT=kill_after_store_of:WORKER */
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
  batch_t batches[2];
  batch_t *fill;        /* the ingest thread's; the other is the writer's */
  ember__dpool_t *pool; /* decode threads (ingest.decode_threads) */
  /* The writer thread and the batch handed to it (NULL: none; set by the
   * ingest thread, cleared by the writer once flushed), under wmu. */
  pthread_t writer;
  bool writer_started, writer_stop;
  pthread_mutex_t wmu;
  pthread_cond_t wcv;
  batch_t *pending;
  uint64_t decode_threads;

  /* /healthz: fed by the ingest thread, read by the API's. */
  ember__health_t health;
  int64_t stall_ns, max_lag; /* health.stall_after, health.max_lag */
  uint64_t max_size, map_grows_seen;
};

/* ---- batch ---------------------------------------------------------- */

static bool item_ok(const item_t *it) { return it->wire != NULL || it->profile != NULL; }

static int batch_push(ember__collector_t *c, rd_kafka_message_t *msg) {
  batch_t *b = c->fill;
  if (b->n == b->cap) {
    /* Decode jobs point into the items: none may run while they move. */
    ember__dpool_wait(c->pool);
    size_t cap = b->cap ? b->cap * 2 : 256;
    item_t *v = ember_realloc(b->items, cap * sizeof *v);
    if (v == NULL) return -ENOMEM;
    b->items = v;
    b->cap = cap;
  }
  item_t *it = &b->items[b->n++];
  it->msg = msg;
  it->wire = NULL;
  it->profile = NULL;
  it->reason = NULL;
  it->bad_decode = false;
  it->stored = false;
  atomic_init(&it->dlq_status, 1);
  if (b->n == 1) b->first_mono_ns = ember_time_mono_ns();
  b->bytes += msg->len;
  return 0;
}

static void batch_clear(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) {
    ember_wire_free(b->items[i].wire);
    ember_profile_free(b->items[i].profile);
    ember_free(b->items[i].reason);
    rd_kafka_message_destroy(b->items[i].msg);
  }
  b->n = 0;
  b->bytes = 0;
}

/* Count and log a malformed message (its reason already set). */
static void log_malformed(ember__collector_t *c, item_t *it) {
  const char *why = it->reason ? it->reason : "malformed";
  ember_metric_add(c->m.malformed, 1);
  EMBER_WARN_LIMITED("collector", "malformed message %s[%" PRId32 "]@%" PRId64 " goes to %s: %s",
                     rd_kafka_topic_name(it->msg->rkt), it->msg->partition, it->msg->offset,
                     EMBER_TOPIC_PROFILES_DLQ, why);
}

static void set_malformed(ember__collector_t *c, item_t *it, const char *why) {
  ember_wire_free(it->wire);
  it->wire = NULL;
  ember_profile_free(it->profile);
  it->profile = NULL;
  ember_free(it->reason);
  it->reason = ember_strdup(why);
  log_malformed(c, it);
}

/* ---- flushing: store, DLQ, commit ------------------------------------ */

static bool is_input_error(int rc) { return rc == -EINVAL || rc == -ERANGE; }

/* Sleep up to ms, waking early on stop. The writer thread naps in its
 * retry loops: it beats, since a thread that retries is not stuck, and
 * the failures it retries reach /healthz through store_failed. (A write
 * that never returns stops the beats too: the ingest thread soon waits
 * for the writer to take its next batch.) */
static void nap(ember__collector_t *c, int ms) {
  for (int i = 0; i < ms / 50 && !atomic_load(&c->stop); i++) {
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    ember__health_beat(&c->health, ember_time_mono_ns());
  }
}

static void count_written(ember__collector_t *c, const ember_store_write_result_t *r) {
  ember_metric_add(c->m.profiles, (double)r->written);
  ember_metric_add(c->m.duplicates, (double)r->duplicates);
  ember_metric_add(c->m.expired, (double)r->expired);
}

static void count_result(ember__collector_t *c, ember_profile_t *const *ps, size_t n,
                         const ember_store_write_result_t *r) {
  count_written(c, r);
  double samples = 0;
  for (size_t i = 0; i < n; i++) {
    int vi = ember_profile_type_index(ps[i], EMBER_VT_CPU_SAMPLES);
    if (vi >= 0) samples += (double)ember_profile_total(ps[i], (size_t)vi);
  }
  ember_metric_add(c->m.samples, samples);
}

static void count_wires(ember__collector_t *c, ember_wire_t *const *ws, size_t n,
                        const ember_store_write_result_t *r) {
  count_written(c, r);
  double samples = 0;
  for (size_t i = 0; i < n; i++) {
    const ember_wire_t *w = ws[i];
    for (size_t t = 0; t < w->ntypes; t++) {
      if (w->types[t] != EMBER_VT_CPU_SAMPLES) continue;
      for (size_t k = 0; k < w->nsamples; k++) samples += (double)w->values[k * w->ntypes + t];
    }
  }
  ember_metric_add(c->m.samples, samples);
}

/* Session results of a batch: stored (or found duplicate) together, or,
 * when the store refuses one as input, one at a time so the bad one goes
 * to the DLQ. Each one stored is reported to the sessions. */
static int store_session_results(ember__collector_t *c, batch_t *b, ember_profile_t **ps,
                                 size_t n) {
  ember_store_write_result_t res = {0};
  int rc = ember_store_session_add(c->store, ps, n, &res);
  if (rc == 0) {
    count_result(c, ps, n, &res);
    for (size_t i = 0; i < n; i++) ember__csessions_result(c->sessions, ps[i]);
    return 0;
  }
  if (!is_input_error(rc) && rc != EMBER_ETOOBIG) return rc;
  for (size_t i = 0; i < b->n; i++) {
    item_t *it = &b->items[i];
    if (it->profile == NULL || it->stored) continue;
    rc = ember_store_session_add(c->store, &it->profile, 1, &res);
    if (rc == 0) {
      count_result(c, &it->profile, 1, &res);
      ember__csessions_result(c->sessions, it->profile);
      it->stored = true;
    } else if (is_input_error(rc) || rc == EMBER_ETOOBIG) {
      set_malformed(c, it,
                    "the store refused it: a session result with a bad session id or window");
    } else {
      return rc;
    }
  }
  return 0;
}

/* Ingest health: a store write that failed, or one that succeeded. */
static void store_failed(ember__collector_t *c, int rc) {
  ember__health_store(&c->health, rc, ember_time_mono_ns());
}

static void store_ok(ember__collector_t *c) {
  ember__health_store(&c->health, 0, ember_time_mono_ns());
}

/* The windows of the batch not stored yet, at most `max`: their views,
 * sources and item indices. */
static size_t unstored(batch_t *b, size_t max, ember_wire_t **ws, ember_store_source_t *srcs,
                       size_t *idx) {
  size_t k = 0;
  for (size_t i = 0; i < b->n && k < max; i++)
    if (b->items[i].wire != NULL && !b->items[i].stored) {
      srcs[k] = b->items[i].src;
      idx[k] = i;
      ws[k++] = b->items[i].wire;
    }
  return k;
}

/* One write of windows refused for one window's content (result->bad):
 * that window goes to the DLQ with the store's sentence. */
static bool refused_one(ember__collector_t *c, batch_t *b, int rc,
                        const ember_store_write_result_t *res, const size_t *idx, size_t n) {
  if ((rc != EMBER_ECORRUPT && rc != -ERANGE) || res->bad >= n) return false;
  char why[256];
  snprintf(why, sizeof why, "the store refused it: %s", res->why);
  set_malformed(c, &b->items[idx[res->bad]], why);
  return true;
}

/* The map is full at store.max_size and the batch does not fit: write its
 * unstored windows in parts, halving the part while even that does not
 * fit, so a batch larger than what is left never wedges ingest. Returns 0
 * when all are stored, else the error of the smallest part (EMBER_EMAPFULL
 * when not even one window fits). */
static int store_split(ember__collector_t *c, batch_t *b, ember_wire_t **ws,
                       ember_store_source_t *srcs, size_t *idx, size_t left) {
  size_t part = (left + 1) / 2;
  ember_metric_add(c->m.splits, 1);
  EMBER_WARN_LIMITED("collector",
                     "the store's map is full at store.max_size (%" PRIu64 " MiB): writing %zu "
                     "profiles in parts of at most %zu",
                     c->max_size >> 20, left, part);
  for (;;) {
    size_t k = unstored(b, part, ws, srcs, idx);
    if (k == 0) return 0;
    ember_store_write_result_t res = {0};
    int rc = ember_store_write_wire(c->store, ws, srcs, k, &res);
    if (rc == EMBER_EMAPFULL && part > 1) {
      part = (part + 1) / 2;
      continue;
    }
    if (refused_one(c, b, rc, &res, idx, k)) continue;
    if (rc != 0) return rc;
    count_wires(c, ws, k, &res);
    for (size_t m = 0; m < k; m++) b->items[idx[m]].stored = true;
  }
}

/* Step 1. Returns 0 when every window is stored (or found malformed), or
 * an error when stopping before the store accepted the batch. */
static int store_batch(ember__collector_t *c, batch_t *b) {
  size_t cap = b->n ? b->n : 1;
  ember_profile_t **ps = ember_malloc(cap * sizeof *ps);
  ember_wire_t **ws = ember_malloc(cap * sizeof *ws);
  ember_store_source_t *srcs = ember_malloc(cap * sizeof *srcs);
  size_t *idx = ember_malloc(cap * sizeof *idx);
  int rc = -ENOMEM;
  if (ps == NULL || ws == NULL || srcs == NULL || idx == NULL) goto done;
  int backoff_ms = 100;
  for (;;) {
    /* Session results first, to their own table: in the series they would
     * count twice (the agents' continuous windows cover the same time). */
    size_t n = 0;
    for (size_t i = 0; i < b->n; i++)
      if (b->items[i].profile != NULL && !b->items[i].stored) ps[n++] = b->items[i].profile;
    rc = n > 0 ? store_session_results(c, b, ps, n) : 0;
    if (rc != 0) {
      ember_metric_add(c->m.store_errors, 1);
      store_failed(c, rc);
      EMBER_ERROR("collector",
                  "cannot write %zu session results to the store: %s; retrying in %d ms", n,
                  ember_store_strerror(rc), backoff_ms);
      if (atomic_load(&c->stop)) break;
      nap(c, backoff_ms);
      if (atomic_load(&c->stop)) break;
      if (backoff_ms < 5000) backoff_ms *= 2;
      continue;
    }
    for (size_t i = 0; i < b->n; i++)
      if (b->items[i].profile != NULL) b->items[i].stored = true;
    n = unstored(b, b->n, ws, srcs, idx);
    if (n == 0) {
      rc = 0;
      break;
    }
    ember_store_write_result_t res = {0};
    rc = ember_store_write_wire(c->store, ws, srcs, n, &res);
    if (rc == 0) {
      count_wires(c, ws, n, &res);
      break;
    }
    /* One window's content refused: it goes to the DLQ, the rest again. */
    if (refused_one(c, b, rc, &res, idx, n)) continue;
    if (rc == EMBER_EMAPFULL && n > 1) {
      rc = store_split(c, b, ws, srcs, idx, n);
      if (rc == 0) continue; /* all stored: the loop finds nothing left */
    }
    if (rc == -EINVAL) {
      /* A window the store refuses as a whole (its time range): find it
       * by writing one at a time (each its own transaction). A store
       * failure on the way ends the search; the retry then writes only
       * what is still unwritten. */
      for (size_t i = 0; i < b->n; i++) {
        item_t *it = &b->items[i];
        if (it->wire == NULL || it->stored) continue;
        rc = ember_store_write_wire(c->store, &it->wire, &it->src, 1, &res);
        if (rc == 0) {
          count_wires(c, &it->wire, 1, &res);
          it->stored = true;
        } else if (rc == -EINVAL) {
          set_malformed(c, it, "the store refused it: invalid window");
          rc = 0;
        } else if (!refused_one(c, b, rc, &res, &i, 1)) {
          break;
        } else {
          rc = 0;
        }
      }
      if (rc == 0) continue; /* nothing left, or only good ones: loop writes/ends */
    }
    ember_metric_add(c->m.store_errors, 1);
    store_failed(c, rc);
    EMBER_ERROR("collector", "cannot write %zu profiles to the store: %s; retrying in %d ms", n,
                ember_store_strerror(rc), backoff_ms);
    if (atomic_load(&c->stop)) break;
    nap(c, backoff_ms);
    if (atomic_load(&c->stop)) break;
    if (backoff_ms < 5000) backoff_ms *= 2;
  }
  if (rc == 0) store_ok(c);
done:
  ember_free(ps);
  ember_free(ws);
  ember_free(srcs);
  ember_free(idx);
  return rc;
}

/* Step 2: every malformed message of the batch delivered to the DLQ, with
 * headers saying why and where it came from. */
static int dlq_batch(ember__collector_t *c, batch_t *b) {
  int backoff_ms = 200;
  for (;;) {
    size_t pending = 0;
    for (size_t i = 0; i < b->n; i++) {
      item_t *it = &b->items[i];
      if (item_ok(it) || atomic_load(&it->dlq_status) == 0) continue;
      atomic_store(&it->dlq_status, 1);
      char source[320];
      snprintf(source, sizeof source, "%s/%" PRId32 "@%" PRId64, rd_kafka_topic_name(it->msg->rkt),
               it->msg->partition, it->msg->offset);
      const char *why = it->reason ? it->reason : "malformed";
      rd_kafka_resp_err_t err = rd_kafka_producev(
          c->dlq, RD_KAFKA_V_TOPIC(EMBER_TOPIC_PROFILES_DLQ),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(it->msg->key, it->msg->key_len),
          RD_KAFKA_V_VALUE(it->msg->payload, it->msg->len),
          RD_KAFKA_V_HEADER("ember.error", why, -1), RD_KAFKA_V_HEADER("ember.source", source, -1),
          RD_KAFKA_V_OPAQUE(&it->dlq_status), RD_KAFKA_V_END);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) atomic_store(&it->dlq_status, -(int)err);
      pending++;
    }
    if (pending == 0) return 0;
    rd_kafka_flush(c->dlq, 10000);
    size_t failed = 0;
    for (size_t i = 0; i < b->n; i++)
      if (!item_ok(&b->items[i]) && atomic_load(&b->items[i].dlq_status) != 0) failed++;
    if (failed == 0) return 0;
    ember_metric_add(c->m.dlq_errors, (double)failed);
    EMBER_ERROR("collector",
                "%zu malformed messages not yet accepted by %s; offsets stay uncommitted, "
                "retrying in %d ms",
                failed, EMBER_TOPIC_PROFILES_DLQ, backoff_ms);
    if (atomic_load(&c->stop)) return EMBER_EKAFKA;
    nap(c, backoff_ms);
    if (atomic_load(&c->stop)) return EMBER_EKAFKA;
    if (backoff_ms < 5000) backoff_ms *= 2;
  }
}

/* Step 3: commit the next offset of every partition in the batch, and
 * record it in the store with the run the batch's messages were in. */
static void commit_batch(ember__collector_t *c, batch_t *b) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
  if (l == NULL) return;
  for (size_t i = 0; i < b->n; i++) {
    const rd_kafka_message_t *m = b->items[i].msg;
    const char *topic = rd_kafka_topic_name(m->rkt);
    rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_find(l, topic, m->partition);
    if (tp == NULL) tp = rd_kafka_topic_partition_list_add(l, topic, m->partition);
    if (tp->offset < m->offset + 1) tp->offset = m->offset + 1;
  }
  rd_kafka_resp_err_t err = rd_kafka_commit(c->consumer, l, 0);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    /* Each partition's run: its last message's (a batch holds one run of
     * a partition but after a seek back). */
    for (int k = 0; k < l->cnt; k++) {
      const rd_kafka_topic_partition_t *tp = &l->elems[k];
      int64_t run_start = -1;
      for (size_t i = b->n; i-- > 0 && run_start < 0;)
        if (b->items[i].msg->partition == tp->partition) run_start = b->items[i].src.run_start;
      if (run_start >= 0)
        ember__shards_committed(c->member.shards, tp->partition, run_start, tp->offset);
    }
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    /* Stored and safe: the messages will be read again and found duplicate. */
    ember_metric_add(c->m.commit_errors, 1);
    EMBER_WARN("collector", "offset commit failed (%s); %zu messages will be read again",
               rd_kafka_err2str(err), b->n);
  }
  rd_kafka_topic_partition_list_destroy(l);
}

/* The test-only fault hook (docs/internals/fleet.md): with
 * EMBER_TEST_FAULT=kill_after_store:N the process kills itself right after
 * its Nth stored batch, between the store's commit and Kafka's, to show a
 * crash there stores nothing twice in the fleet. */
static void fault_after_store(ember__collector_t *c, const batch_t *b) {
  if (c->fault_kill_after > 0 && ++c->fault_batches >= c->fault_kill_after) {
    EMBER_WARN("collector", "EMBER_TEST_FAULT: killing this process after stored batch %d",
               c->fault_batches);
    raise(SIGKILL);
  }
  if (c->fault_worker[0] == '\0') return;
  for (size_t i = 0; i < b->n; i++) {
    const item_t *it = &b->items[i];
    const char *w = it->wire      ? it->wire->labels.worker
                    : it->profile ? ember_profile_labels(it->profile)->worker
                                  : NULL;
    if (w != NULL && strcmp(w, c->fault_worker) == 0) {
      EMBER_WARN("collector",
                 "EMBER_TEST_FAULT: killing this process after a stored batch "
                 "holding a window of %s",
                 w);
      raise(SIGKILL);
    }
  }
}

/* Steps 1-3 for batch `b`, on the writer thread; `b` is empty after. */
static void write_batch(ember__collector_t *c, batch_t *b) {
  int64_t t0 = ember_time_mono_ns();
  if (store_batch(c, b) == 0) {
    fault_after_store(c, b);
    if (dlq_batch(c, b) == 0) commit_batch(c, b);
  }
  ember_metric_add(c->m.batches, 1);
  ember_metric_add(c->m.batch_seconds, (double)(ember_time_mono_ns() - t0) / 1e9);
  batch_clear(b);
}

static void *writer_main(void *arg) {
  ember__collector_t *c = arg;
  pthread_mutex_lock(&c->wmu);
  for (;;) {
    while (c->pending == NULL && !c->writer_stop) pthread_cond_wait(&c->wcv, &c->wmu);
    if (c->pending == NULL) break;
    batch_t *b = c->pending;
    pthread_mutex_unlock(&c->wmu);
    write_batch(c, b);
    pthread_mutex_lock(&c->wmu);
    c->pending = NULL;
    pthread_cond_broadcast(&c->wcv);
  }
  pthread_mutex_unlock(&c->wmu);
  return NULL;
}

/* The ingest thread's batch, once every message in it is decoded, to the
 * writer (waiting while the writer still has the previous one); the
 * ingest thread then fills the other. Without a writer thread (it could
 * not start), written here. */
static void flush_batch(ember__collector_t *c) {
  batch_t *b = c->fill;
  if (b->n == 0) return;
  /* Every message decoded before anything is stored. */
  ember__dpool_wait(c->pool);
  for (size_t i = 0; i < b->n; i++) {
    item_t *it = &b->items[i];
    if (it->bad_decode) {
      it->bad_decode = false;
      log_malformed(c, it);
    } else if (item_ok(it)) {
      uint32_t v = ember_wire_peek_version(it->msg->payload, it->msg->len);
      ember_metric_add(v == EMBER_WIRE_V2 ? c->m.wire_v2 : c->m.wire_v1, 1);
    }
  }
  if (!c->writer_started) {
    write_batch(c, b);
    return;
  }
  pthread_mutex_lock(&c->wmu);
  while (c->pending != NULL) pthread_cond_wait(&c->wcv, &c->wmu);
  c->pending = b;
  c->fill = b == &c->batches[0] ? &c->batches[1] : &c->batches[0];
  pthread_cond_broadcast(&c->wcv);
  pthread_mutex_unlock(&c->wmu);
}

/* Flush the ingest thread's batch and wait until the writer has stored,
 * DLQ'd and committed it: before partitions go, and at the end. */
static void drain(ember__collector_t *c) {
  flush_batch(c);
  if (!c->writer_started) return;
  pthread_mutex_lock(&c->wmu);
  while (c->pending != NULL) pthread_cond_wait(&c->wcv, &c->wmu);
  pthread_mutex_unlock(&c->wmu);
}

/* ---- ingest thread --------------------------------------------------- */

/* A decode job (decode_pool.h): the item's message into a view, or, for a
 * session result, a profile. Touches only its item and the limits. */
static void decode_item(ember__collector_t *c, item_t *it) {
  const rd_kafka_message_t *m = it->msg;
  char err[256] = "";
  ember_wire_t *w = NULL;
  int rc = ember_wire_decode(m->payload, m->len, &c->lim, &w, err, sizeof err);
  /* A window's hashes are verified here, on the decode threads, rather
   * than by the store's one writer (which would otherwise check them for
   * its producers' memo): a mismatch is malformed input, to the DLQ. */
  if (rc == 0 && w->session_id == NULL && w->agent_id != NULL &&
      (rc = ember_wire_verify_hashes(w, err, sizeof err)) != 0) {
    ember_wire_free(w);
    w = NULL;
  }
  if (rc == 0 && w->session_id != NULL) {
    /* Session results go to their own table as profiles; converting
     * checks what the store would check for a window. */
    rc = ember_wire_to_profile(w, &it->profile, err, sizeof err);
    ember_wire_free(w);
    w = NULL;
  }
  if (rc == -ENOMEM) {
    /* Not the message's fault, but the decoder's limits bound what one
     * message may take, so this means the host is out of memory. The
     * message still goes to the DLQ (kept, replayable) rather than
     * stalling every partition behind it. */
    snprintf(err, sizeof err, "out of memory while decoding (replay it from the DLQ)");
  }
  if (rc != 0) {
    it->reason = ember_strdup(err);
    it->bad_decode = true;
    return;
  }
  it->wire = w;
}

static void decode_job(void *arg) {
  item_t *it = arg;
  decode_item(it->owner, it);
}

static void take(ember__collector_t *c, rd_kafka_message_t *m) {
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    ember_metric_add(c->m.consumer_errors, 1);
    EMBER_WARN_LIMITED("collector", "consumer: %s", rd_kafka_message_errstr(m));
    rd_kafka_message_destroy(m);
    return;
  }
  ember_metric_add(c->m.messages, 1);
  if (batch_push(c, m) != 0) {
    /* Not stored, not committed: Kafka redelivers it after a restart. */
    EMBER_ERROR("collector", "out of memory holding a message; it will be read again");
    rd_kafka_message_destroy(m);
    return;
  }
  item_t *it = &c->fill->items[c->fill->n - 1];
  ember__shards_source(c->member.shards, m, &it->src);
  if (m->payload == NULL || m->len == 0) {
    set_malformed(c, it, "empty message");
    return;
  }
  it->owner = c;
  ember__dpool_submit(c->pool, decode_job, it);
}

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
    drain(c);
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
    if (m != NULL) take(c, m);
    int64_t now = ember_time_mono_ns();
    batch_t *b = c->fill;
    if (b->n > 0 && (b->n >= c->batch_max || b->bytes >= c->batch_max_bytes ||
                     now - b->first_mono_ns >= c->linger_ns || m == NULL))
      flush_batch(c);
    if (now >= next_retain) {
      run_retention(c);
      next_retain = now + c->retention_every_ns;
    }
    if (now >= next_gauges) {
      update_gauges(c);
      next_gauges = now + NS_PER_S;
    }
  }
  drain(c);
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
  m->messages = ember_metrics_counter(r, "ember_collector_messages_total",
                                      "Messages consumed from ember.profiles.");
  m->profiles = ember_metrics_counter(r, "ember_collector_profiles_stored_total",
                                      "Profile windows written to the store.");
  m->samples = ember_metrics_counter(r, "ember_collector_samples_total",
                                     "CPU samples in the profiles consumed (stored or duplicate).");
  m->duplicates = ember_metrics_counter(r, "ember_collector_duplicates_total",
                                        "Profiles skipped: their (agent_id, seq) was stored.");
  m->expired = ember_metrics_counter(r, "ember_collector_expired_total",
                                     "Profiles skipped: older than the retention cutoff.");
  m->malformed = ember_metrics_counter(r, "ember_collector_malformed_total",
                                       "Messages that failed validation (copied to the DLQ).");
  m->dlq_errors = ember_metrics_counter(r, "ember_collector_dlq_errors_total",
                                        "DLQ deliveries that failed and were retried.");
  m->batches = ember_metrics_counter(r, "ember_collector_batches_total",
                                     "Batches flushed (one store transaction each).");
  m->batch_seconds = ember_metrics_counter(r, "ember_collector_batch_seconds_total",
                                           "Time spent storing, DLQ-ing and committing batches.");
  m->store_errors = ember_metrics_counter(r, "ember_collector_store_errors_total",
                                          "Store writes that failed and were retried.");
  m->commit_errors = ember_metrics_counter(r, "ember_collector_commit_errors_total",
                                           "Offset commits that failed (messages re-read).");
  m->consumer_errors = ember_metrics_counter(r, "ember_collector_consumer_errors_total",
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
  m->splits = ember_metrics_counter(r, "ember_collector_batch_splits_total",
                                    "Batches written in parts: the store's map was full at "
                                    "store.max_size.");
  m->map_bytes = ember_metrics_gauge(
      r, "ember_store_map_bytes", "Current size of the store's map (grows up to store.max_size).");
  m->map_grows = ember_metrics_counter(r, "ember_store_map_grows_total",
                                       "Times the store's map was full and was grown.");
  m->wire_v1 = ember_metrics_counter_of(r, "ember_collector_wire_messages_total", "version", "1",
                                        "Messages of ember.profiles decoded, by wire version.");
  m->wire_v2 = ember_metrics_counter_of(r, "ember_collector_wire_messages_total", "version", "2",
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
  c->fill = &c->batches[0];
  pthread_mutex_init(&c->wmu, NULL);
  pthread_cond_init(&c->wcv, NULL);
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
    c->writer_started = pthread_create(&c->writer, NULL, writer_main, c) == 0;
    c->ingest_started =
        c->writer_started && pthread_create(&c->ingest_thread, NULL, ingest_main, c) == 0;
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
  if (c->writer_started) {
    pthread_mutex_lock(&c->wmu);
    c->writer_stop = true;
    pthread_cond_broadcast(&c->wcv);
    pthread_mutex_unlock(&c->wmu);
    pthread_join(c->writer, NULL);
  }
  if (c->consumer != NULL) {
    rd_kafka_destroy(c->consumer);
  }
  if (c->dlq != NULL) {
    rd_kafka_flush(c->dlq, 5000);
    rd_kafka_destroy(c->dlq);
  }
  ember__dpool_free(c->pool);
  for (int i = 0; i < 2; i++) {
    batch_clear(&c->batches[i]);
    ember_free(c->batches[i].items);
  }
  pthread_mutex_destroy(&c->wmu);
  pthread_cond_destroy(&c->wcv);
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
