/* Ingest's batches (ingest.h). */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/wire.h"
#include "ingest.h"

/* One consumed message and what became of it. */
typedef struct item {
  rd_kafka_message_t *msg;
  /* What the message decoded to: a window (wire), or a session result
   * (profile, for the sessions' table and ember__csessions_result). Both
   * NULL: malformed, goes to the DLQ. */
  ember_wire_t *wire;
  ember_profile_t *profile;
  char *reason;                /* why it is malformed (owned) */
  bool bad_decode;             /* set by the decode job; counted and logged after it */
  struct ember__ingest *owner; /* for the decode job */
  bool stored;                 /* written on its own while isolating a bad profile */
  ember_store_source_t src;    /* its partition, offset and run (shards.h) */
  atomic_int dlq_status;       /* 1 pending, 0 delivered, else -rd_kafka_resp_err */
} item_t;

typedef struct batch {
  item_t *items;
  size_t n, cap;
  size_t bytes;
  int64_t first_mono_ns;
} batch_t;

struct ember__ingest {
  ember__ingest_opts_t o;
  char fault_worker[128]; /* o.fault_worker's copy; "" = none */
  int fault_batches;
  batch_t batches[2];
  batch_t *fill; /* the ingest thread's; the other is the writer's */
  /* The writer thread and the batch handed to it (NULL: none; set by the
   * ingest thread, cleared by the writer once flushed), under wmu. */
  pthread_t writer;
  bool writer_started, writer_stop;
  pthread_mutex_t wmu;
  pthread_cond_t wcv;
  batch_t *pending;
};

/* ---- batch ---------------------------------------------------------- */

static bool item_ok(const item_t *it) { return it->wire != NULL || it->profile != NULL; }

static int batch_push(ember__ingest_t *g, rd_kafka_message_t *msg) {
  batch_t *b = g->fill;
  if (b->n == b->cap) {
    /* Decode jobs point into the items: none may run while they move. */
    ember__dpool_wait(g->o.pool);
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
static void log_malformed(ember__ingest_t *g, item_t *it) {
  const char *why = it->reason ? it->reason : "malformed";
  ember_metric_add(g->o.m.malformed, 1);
  EMBER_WARN_LIMITED("collector", "malformed message %s[%" PRId32 "]@%" PRId64 " goes to %s: %s",
                     rd_kafka_topic_name(it->msg->rkt), it->msg->partition, it->msg->offset,
                     EMBER_TOPIC_PROFILES_DLQ, why);
}

static void set_malformed(ember__ingest_t *g, item_t *it, const char *why) {
  ember_wire_free(it->wire);
  it->wire = NULL;
  ember_profile_free(it->profile);
  it->profile = NULL;
  ember_free(it->reason);
  it->reason = ember_strdup(why);
  log_malformed(g, it);
}

/* ---- flushing: store, DLQ, commit ------------------------------------ */

static bool is_input_error(int rc) { return rc == -EINVAL || rc == -ERANGE; }

/* Sleep up to ms, waking early on stop. The writer thread naps in its
 * retry loops: it beats, since a thread that retries is not stuck, and
 * the failures it retries reach /healthz through store_failed. (A write
 * that never returns stops the beats too: the ingest thread soon waits
 * for the writer to take its next batch.) */
static void nap(ember__ingest_t *g, int ms) {
  for (int i = 0; i < ms / 50 && !atomic_load(g->o.stop); i++) {
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    ember__health_beat(g->o.health, ember_time_mono_ns());
  }
}

static void count_written(ember__ingest_t *g, const ember_store_write_result_t *r) {
  ember_metric_add(g->o.m.profiles, (double)r->written);
  ember_metric_add(g->o.m.duplicates, (double)r->duplicates);
  ember_metric_add(g->o.m.expired, (double)r->expired);
}

static void count_result(ember__ingest_t *g, ember_profile_t *const *ps, size_t n,
                         const ember_store_write_result_t *r) {
  count_written(g, r);
  double samples = 0;
  for (size_t i = 0; i < n; i++) {
    int vi = ember_profile_type_index(ps[i], EMBER_VT_CPU_SAMPLES);
    if (vi >= 0) samples += (double)ember_profile_total(ps[i], (size_t)vi);
  }
  ember_metric_add(g->o.m.samples, samples);
}

static void count_wires(ember__ingest_t *g, ember_wire_t *const *ws, size_t n,
                        const ember_store_write_result_t *r) {
  count_written(g, r);
  double samples = 0;
  for (size_t i = 0; i < n; i++) {
    const ember_wire_t *w = ws[i];
    for (size_t t = 0; t < w->ntypes; t++) {
      if (w->types[t] != EMBER_VT_CPU_SAMPLES) continue;
      for (size_t k = 0; k < w->nsamples; k++) samples += (double)w->values[k * w->ntypes + t];
    }
  }
  ember_metric_add(g->o.m.samples, samples);
}

/* Session results of a batch: stored (or found duplicate) together, or,
 * when the store refuses one as input, one at a time so the bad one goes
 * to the DLQ. Each one stored is reported to the sessions. */
static int store_session_results(ember__ingest_t *g, batch_t *b, ember_profile_t **ps, size_t n) {
  ember_store_write_result_t res = {0};
  int rc = ember_store_session_add(g->o.store, ps, n, &res);
  if (rc == 0) {
    count_result(g, ps, n, &res);
    for (size_t i = 0; i < n; i++) ember__csessions_result(g->o.sessions, ps[i]);
    return 0;
  }
  if (!is_input_error(rc) && rc != EMBER_ETOOBIG) return rc;
  for (size_t i = 0; i < b->n; i++) {
    item_t *it = &b->items[i];
    if (it->profile == NULL || it->stored) continue;
    rc = ember_store_session_add(g->o.store, &it->profile, 1, &res);
    if (rc == 0) {
      count_result(g, &it->profile, 1, &res);
      ember__csessions_result(g->o.sessions, it->profile);
      it->stored = true;
    } else if (is_input_error(rc) || rc == EMBER_ETOOBIG) {
      set_malformed(g, it,
                    "the store refused it: a session result with a bad session id or window");
    } else {
      return rc;
    }
  }
  return 0;
}

/* Ingest health: a store write that failed, or one that succeeded. */
static void store_failed(ember__ingest_t *g, int rc) {
  ember__health_store(g->o.health, rc, ember_time_mono_ns());
}

static void store_ok(ember__ingest_t *g) {
  ember__health_store(g->o.health, 0, ember_time_mono_ns());
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
static bool refused_one(ember__ingest_t *g, batch_t *b, int rc,
                        const ember_store_write_result_t *res, const size_t *idx, size_t n) {
  if ((rc != EMBER_ECORRUPT && rc != -ERANGE) || res->bad >= n) return false;
  char why[256];
  snprintf(why, sizeof why, "the store refused it: %s", res->why);
  set_malformed(g, &b->items[idx[res->bad]], why);
  return true;
}

/* The map is full at store.max_size and the batch does not fit: write its
 * unstored windows in parts, halving the part while even that does not
 * fit, so a batch larger than what is left never wedges ingest. Returns 0
 * when all are stored, else the error of the smallest part (EMBER_EMAPFULL
 * when not even one window fits). */
static int store_split(ember__ingest_t *g, batch_t *b, ember_wire_t **ws,
                       ember_store_source_t *srcs, size_t *idx, size_t left) {
  size_t part = (left + 1) / 2;
  ember_metric_add(g->o.m.splits, 1);
  EMBER_WARN_LIMITED("collector",
                     "the store's map is full at store.max_size (%" PRIu64 " MiB): writing %zu "
                     "profiles in parts of at most %zu",
                     g->o.max_size >> 20, left, part);
  for (;;) {
    size_t k = unstored(b, part, ws, srcs, idx);
    if (k == 0) return 0;
    ember_store_write_result_t res = {0};
    int rc = ember_store_write_wire(g->o.store, ws, srcs, k, &res);
    if (rc == EMBER_EMAPFULL && part > 1) {
      part = (part + 1) / 2;
      continue;
    }
    if (refused_one(g, b, rc, &res, idx, k)) continue;
    if (rc != 0) return rc;
    count_wires(g, ws, k, &res);
    for (size_t m = 0; m < k; m++) b->items[idx[m]].stored = true;
  }
}

/* Step 1. Returns 0 when every window is stored (or found malformed), or
 * an error when stopping before the store accepted the batch. */
static int store_batch(ember__ingest_t *g, batch_t *b) {
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
    rc = n > 0 ? store_session_results(g, b, ps, n) : 0;
    if (rc != 0) {
      ember_metric_add(g->o.m.store_errors, 1);
      store_failed(g, rc);
      EMBER_ERROR("collector",
                  "cannot write %zu session results to the store: %s; retrying in %d ms", n,
                  ember_store_strerror(rc), backoff_ms);
      if (atomic_load(g->o.stop)) break;
      nap(g, backoff_ms);
      if (atomic_load(g->o.stop)) break;
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
    rc = ember_store_write_wire(g->o.store, ws, srcs, n, &res);
    if (rc == 0) {
      count_wires(g, ws, n, &res);
      break;
    }
    /* One window's content refused: it goes to the DLQ, the rest again. */
    if (refused_one(g, b, rc, &res, idx, n)) continue;
    if (rc == EMBER_EMAPFULL && n > 1) {
      rc = store_split(g, b, ws, srcs, idx, n);
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
        rc = ember_store_write_wire(g->o.store, &it->wire, &it->src, 1, &res);
        if (rc == 0) {
          count_wires(g, &it->wire, 1, &res);
          it->stored = true;
        } else if (rc == -EINVAL) {
          set_malformed(g, it, "the store refused it: invalid window");
          rc = 0;
        } else if (!refused_one(g, b, rc, &res, &i, 1)) {
          break;
        } else {
          rc = 0;
        }
      }
      if (rc == 0) continue; /* nothing left, or only good ones: loop writes/ends */
    }
    ember_metric_add(g->o.m.store_errors, 1);
    store_failed(g, rc);
    EMBER_ERROR("collector", "cannot write %zu profiles to the store: %s; retrying in %d ms", n,
                ember_store_strerror(rc), backoff_ms);
    if (atomic_load(g->o.stop)) break;
    nap(g, backoff_ms);
    if (atomic_load(g->o.stop)) break;
    if (backoff_ms < 5000) backoff_ms *= 2;
  }
  if (rc == 0) store_ok(g);
done:
  ember_free(ps);
  ember_free(ws);
  ember_free(srcs);
  ember_free(idx);
  return rc;
}

/* Step 2: every malformed message of the batch delivered to the DLQ, with
 * headers saying why and where it came from. */
static int dlq_batch(ember__ingest_t *g, batch_t *b) {
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
          g->o.dlq, RD_KAFKA_V_TOPIC(EMBER_TOPIC_PROFILES_DLQ),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(it->msg->key, it->msg->key_len),
          RD_KAFKA_V_VALUE(it->msg->payload, it->msg->len),
          RD_KAFKA_V_HEADER("ember.error", why, -1), RD_KAFKA_V_HEADER("ember.source", source, -1),
          RD_KAFKA_V_OPAQUE(&it->dlq_status), RD_KAFKA_V_END);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) atomic_store(&it->dlq_status, -(int)err);
      pending++;
    }
    if (pending == 0) return 0;
    rd_kafka_flush(g->o.dlq, 10000);
    size_t failed = 0;
    for (size_t i = 0; i < b->n; i++)
      if (!item_ok(&b->items[i]) && atomic_load(&b->items[i].dlq_status) != 0) failed++;
    if (failed == 0) return 0;
    ember_metric_add(g->o.m.dlq_errors, (double)failed);
    EMBER_ERROR("collector",
                "%zu malformed messages not yet accepted by %s; offsets stay uncommitted, "
                "retrying in %d ms",
                failed, EMBER_TOPIC_PROFILES_DLQ, backoff_ms);
    if (atomic_load(g->o.stop)) return EMBER_EKAFKA;
    nap(g, backoff_ms);
    if (atomic_load(g->o.stop)) return EMBER_EKAFKA;
    if (backoff_ms < 5000) backoff_ms *= 2;
  }
}

/* Step 3: commit the next offset of every partition in the batch, and
 * record it in the store with the run the batch's messages were in. */
static void commit_batch(ember__ingest_t *g, batch_t *b) {
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
  if (l == NULL) return;
  for (size_t i = 0; i < b->n; i++) {
    const rd_kafka_message_t *m = b->items[i].msg;
    const char *topic = rd_kafka_topic_name(m->rkt);
    rd_kafka_topic_partition_t *tp = rd_kafka_topic_partition_list_find(l, topic, m->partition);
    if (tp == NULL) tp = rd_kafka_topic_partition_list_add(l, topic, m->partition);
    if (tp->offset < m->offset + 1) tp->offset = m->offset + 1;
  }
  rd_kafka_resp_err_t err = rd_kafka_commit(g->o.consumer, l, 0);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    /* Each partition's run: its last message's (a batch holds one run of
     * a partition but after a seek back). */
    for (int k = 0; k < l->cnt; k++) {
      const rd_kafka_topic_partition_t *tp = &l->elems[k];
      int64_t run_start = -1;
      for (size_t i = b->n; i-- > 0 && run_start < 0;)
        if (b->items[i].msg->partition == tp->partition) run_start = b->items[i].src.run_start;
      if (run_start >= 0)
        ember__shards_committed(g->o.shards, tp->partition, run_start, tp->offset);
    }
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    /* Stored and safe: the messages will be read again and found duplicate. */
    ember_metric_add(g->o.m.commit_errors, 1);
    EMBER_WARN("collector", "offset commit failed (%s); %zu messages will be read again",
               rd_kafka_err2str(err), b->n);
  }
  rd_kafka_topic_partition_list_destroy(l);
}

/* The test-only fault hook (docs/internals/fleet.md): with
 * EMBER_TEST_FAULT=kill_after_store:N the process kills itself right after
 * its Nth stored batch, between the store's commit and Kafka's, to show a
 * crash there stores nothing twice in the fleet. */
static void fault_after_store(ember__ingest_t *g, const batch_t *b) {
  if (g->o.fault_kill_after > 0 && ++g->fault_batches >= g->o.fault_kill_after) {
    EMBER_WARN("collector", "EMBER_TEST_FAULT: killing this process after stored batch %d",
               g->fault_batches);
    raise(SIGKILL);
  }
  if (g->fault_worker[0] == '\0') return;
  for (size_t i = 0; i < b->n; i++) {
    const item_t *it = &b->items[i];
    const char *w = it->wire      ? it->wire->labels.worker
                    : it->profile ? ember_profile_labels(it->profile)->worker
                                  : NULL;
    if (w != NULL && strcmp(w, g->fault_worker) == 0) {
      EMBER_WARN("collector",
                 "EMBER_TEST_FAULT: killing this process after a stored batch "
                 "holding a window of %s",
                 w);
      raise(SIGKILL);
    }
  }
}

/* Steps 1-3 for batch `b`, on the writer thread; `b` is empty after. */
static void write_batch(ember__ingest_t *g, batch_t *b) {
  int64_t t0 = ember_time_mono_ns();
  if (store_batch(g, b) == 0) {
    fault_after_store(g, b);
    if (dlq_batch(g, b) == 0) commit_batch(g, b);
  }
  ember_metric_add(g->o.m.batches, 1);
  ember_metric_add(g->o.m.batch_seconds, (double)(ember_time_mono_ns() - t0) / 1e9);
  batch_clear(b);
}

static void *writer_main(void *arg) {
  ember__ingest_t *g = arg;
  pthread_mutex_lock(&g->wmu);
  for (;;) {
    while (g->pending == NULL && !g->writer_stop) pthread_cond_wait(&g->wcv, &g->wmu);
    if (g->pending == NULL) break;
    batch_t *b = g->pending;
    pthread_mutex_unlock(&g->wmu);
    write_batch(g, b);
    pthread_mutex_lock(&g->wmu);
    g->pending = NULL;
    pthread_cond_broadcast(&g->wcv);
  }
  pthread_mutex_unlock(&g->wmu);
  return NULL;
}

/* The ingest thread's batch, once every message in it is decoded, to the
 * writer (waiting while the writer still has the previous one); the
 * ingest thread then fills the other. */
static void flush_batch(ember__ingest_t *g) {
  batch_t *b = g->fill;
  if (b->n == 0) return;
  /* Every message decoded before anything is stored. */
  ember__dpool_wait(g->o.pool);
  for (size_t i = 0; i < b->n; i++) {
    item_t *it = &b->items[i];
    if (it->bad_decode) {
      it->bad_decode = false;
      log_malformed(g, it);
    } else if (item_ok(it)) {
      uint32_t v = ember_wire_peek_version(it->msg->payload, it->msg->len);
      ember_metric_add(v == EMBER_WIRE_V2 ? g->o.m.wire_v2 : g->o.m.wire_v1, 1);
    }
  }
  pthread_mutex_lock(&g->wmu);
  while (g->pending != NULL) pthread_cond_wait(&g->wcv, &g->wmu);
  g->pending = b;
  g->fill = b == &g->batches[0] ? &g->batches[1] : &g->batches[0];
  pthread_cond_broadcast(&g->wcv);
  pthread_mutex_unlock(&g->wmu);
}

/* Flush the ingest thread's batch and wait until the writer has stored,
 * DLQ'd and committed it: before partitions go, and at the end. */
void ember__ingest_drain(ember__ingest_t *g) {
  if (g == NULL) return;
  flush_batch(g);
  pthread_mutex_lock(&g->wmu);
  while (g->pending != NULL) pthread_cond_wait(&g->wcv, &g->wmu);
  pthread_mutex_unlock(&g->wmu);
}

/* ---- decoding -------------------------------------------------------- */

/* A decode job (decode_pool.h): the item's message into a view, or, for a
 * session result, a profile. Touches only its item and the limits. */
static void decode_item(ember__ingest_t *g, item_t *it) {
  const rd_kafka_message_t *m = it->msg;
  char err[256] = "";
  ember_wire_t *w = NULL;
  int rc = ember_wire_decode(m->payload, m->len, &g->o.lim, &w, err, sizeof err);
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

void ember__ingest_take(ember__ingest_t *g, rd_kafka_message_t *m) {
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    ember_metric_add(g->o.m.consumer_errors, 1);
    EMBER_WARN_LIMITED("collector", "consumer: %s", rd_kafka_message_errstr(m));
    rd_kafka_message_destroy(m);
    return;
  }
  ember_metric_add(g->o.m.messages, 1);
  if (batch_push(g, m) != 0) {
    /* Not stored, not committed: Kafka redelivers it after a restart. */
    EMBER_ERROR("collector", "out of memory holding a message; it will be read again");
    rd_kafka_message_destroy(m);
    return;
  }
  item_t *it = &g->fill->items[g->fill->n - 1];
  ember__shards_source(g->o.shards, m, &it->src);
  if (m->payload == NULL || m->len == 0) {
    set_malformed(g, it, "empty message");
    return;
  }
  it->owner = g;
  ember__dpool_submit(g->o.pool, decode_job, it);
}

void ember__ingest_tick(ember__ingest_t *g, bool idle, int64_t now_mono_ns) {
  if (g == NULL) return;
  const batch_t *b = g->fill;
  if (b->n > 0 && (b->n >= g->o.batch_max || b->bytes >= g->o.batch_max_bytes ||
                   now_mono_ns - b->first_mono_ns >= g->o.linger_ns || idle))
    flush_batch(g);
}

void ember__ingest_malloc_policy(void) {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
}

int ember__ingest_new(const ember__ingest_opts_t *o, ember__ingest_t **out) {
  if (o == NULL || out == NULL || o->store == NULL || o->consumer == NULL || o->dlq == NULL ||
      o->health == NULL || o->stop == NULL)
    return -EINVAL;
  ember__ingest_t *g = ember_calloc(1, sizeof *g);
  if (g == NULL) return -ENOMEM;
  g->o = *o;
  g->o.fault_worker = NULL; /* copied below */
  if (o->fault_worker != NULL)
    snprintf(g->fault_worker, sizeof g->fault_worker, "%s", o->fault_worker);
  g->fill = &g->batches[0];
  pthread_mutex_init(&g->wmu, NULL);
  pthread_cond_init(&g->wcv, NULL);
  g->writer_started = pthread_create(&g->writer, NULL, writer_main, g) == 0;
  if (!g->writer_started) {
    ember__ingest_free(g);
    return -EAGAIN;
  }
  *out = g;
  return 0;
}

void ember__ingest_free(ember__ingest_t *g) {
  if (g == NULL) return;
  if (g->writer_started) {
    pthread_mutex_lock(&g->wmu);
    g->writer_stop = true;
    pthread_cond_broadcast(&g->wcv);
    pthread_mutex_unlock(&g->wmu);
    pthread_join(g->writer, NULL);
  }
  for (int i = 0; i < 2; i++) {
    batch_clear(&g->batches[i]);
    ember_free(g->batches[i].items);
  }
  pthread_mutex_destroy(&g->wmu);
  pthread_cond_destroy(&g->wcv);
  ember_free(g);
}
