/* Shards: runs of partitions and the rule that keeps a window once in the
 * fleet (shards.h). */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "shards.h"
#include "ember/kafka.h"
#include "ember/log.h"

/* What the ingest thread knows of one partition it was assigned. */
typedef struct part {
  int32_t partition;
  bool assigned;
  bool started; /* a message was read since the assignment: the run began */
  int64_t run_start, run_started_ns;
} part_t;

struct ember__shards {
  ember_store_t *store;
  char *self;
  part_t *parts; /* by partition, grown on demand; ingest thread only */
  size_t nparts;
  ember_metric_t *undone, *seeks, *record_errors;
};

int ember__shards_new(ember_store_t *store, ember_metrics_t *metrics, const char *self_id,
                      ember__shards_t **out) {
  ember__shards_t *s = ember_calloc(1, sizeof *s);
  if (s == NULL) return -ENOMEM;
  s->store = store;
  size_t n = strlen(self_id);
  s->self = ember_malloc(n + 1);
  if (s->self == NULL) {
    ember_free(s);
    return -ENOMEM;
  }
  memcpy(s->self, self_id, n + 1);
  s->undone = ember_metrics_counter(metrics, "ember_collector_undone_windows_total",
                                    "Pending windows undone because another collector's later "
                                    "run of their partition holds them.");
  s->seeks = ember_metrics_counter(metrics, "ember_collector_run_seeks_total",
                                   "Assigned partitions read from the end of this collector's "
                                   "own last run instead of the group's committed offset.");
  s->record_errors = ember_metrics_counter(
      metrics, "ember_collector_commit_record_errors_total",
      "Kafka commits the store could not record (their windows stay pending).");
  *out = s;
  return 0;
}

void ember__shards_free(ember__shards_t *s) {
  if (s == NULL) return;
  ember_free(s->parts);
  ember_free(s->self);
  ember_free(s);
}

/* The state of partition p, made on first use; NULL when out of memory or
 * p is negative. */
static part_t *part_of(ember__shards_t *s, int32_t p) {
  if (p < 0) return NULL;
  if ((size_t)p >= s->nparts) {
    size_t n = s->nparts ? s->nparts : 16;
    while (n <= (size_t)p) n *= 2;
    part_t *v = ember_realloc(s->parts, n * sizeof *v);
    if (v == NULL) return NULL;
    memset(v + s->nparts, 0, (n - s->nparts) * sizeof *v);
    for (size_t i = s->nparts; i < n; i++) v[i].partition = (int32_t)i;
    s->parts = v;
    s->nparts = n;
  }
  return &s->parts[p];
}

/* The end of this store's last run of each partition: ends[p] for p below
 * n (-1 = no run). */
static int own_ends(ember__shards_t *s, int64_t *ends, size_t n) {
  for (size_t i = 0; i < n; i++) ends[i] = -1;
  ember_store_run_t *runs = NULL;
  size_t count = 0;
  int rc = ember_store_runs(s->store, &runs, &count);
  if (rc != 0) return rc;
  for (size_t i = 0; i < count; i++) {
    const ember_store_run_t *r = &runs[i];
    if (r->partition < 0 || (size_t)r->partition >= n) continue;
    if (r->stored_end > ends[r->partition]) ends[r->partition] = r->stored_end;
  }
  ember_store_runs_free(runs);
  return 0;
}

void ember__shards_assign(ember__shards_t *s, rd_kafka_t *consumer,
                          rd_kafka_topic_partition_list_t *parts, int timeout_ms) {
  int32_t maxp = -1;
  for (int i = 0; i < parts->cnt; i++) {
    part_t *pt = part_of(s, parts->elems[i].partition);
    if (pt == NULL) continue;
    pt->assigned = true;
    pt->started = false;
    if (parts->elems[i].partition > maxp) maxp = parts->elems[i].partition;
  }
  if (maxp < 0) return;
  int64_t *ends = ember_malloc(((size_t)maxp + 1) * sizeof *ends);
  if (ends == NULL) return;
  int rc = own_ends(s, ends, (size_t)maxp + 1);
  if (rc != 0) {
    EMBER_WARN("collector",
               "cannot read this store's runs (%s): assigned partitions start at the group's "
               "committed offsets",
               ember_store_strerror(rc));
    ember_free(ends);
    return;
  }
  bool any = false;
  for (int i = 0; i < parts->cnt; i++) {
    int32_t p = parts->elems[i].partition;
    if (p >= 0 && ends[p] >= 0) any = true;
  }
  if (!any) {
    ember_free(ends);
    return;
  }
  /* The group's committed offsets, asked of the broker on a copy so that
   * `parts` keeps the offsets the assignor gave. */
  rd_kafka_topic_partition_list_t *k = rd_kafka_topic_partition_list_copy(parts);
  if (k == NULL) {
    ember_free(ends);
    return;
  }
  rd_kafka_resp_err_t err = rd_kafka_committed(consumer, k, timeout_ms);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    EMBER_WARN("collector",
               "cannot read the group's committed offsets (%s): assigned partitions start at "
               "them, not at this store's runs",
               rd_kafka_err2str(err));
  } else {
    for (int i = 0; i < parts->cnt; i++) {
      rd_kafka_topic_partition_t *tp = &parts->elems[i];
      const rd_kafka_topic_partition_t *kp =
          rd_kafka_topic_partition_list_find(k, tp->topic, tp->partition);
      if (tp->partition < 0 || ends[tp->partition] < 0 || kp == NULL || kp->err) continue;
      int64_t x = ends[tp->partition];
      /* No commit at all (a new group, or offsets expired at the broker)
       * while this store holds the partition up to x: reading it again
       * would be a later run over windows others may hold committed. */
      if (kp->offset >= 0 && kp->offset >= x) continue;
      tp->offset = x;
      ember_metric_add(s->seeks, 1);
      EMBER_INFO("collector",
                 "partition %" PRId32 " of %s starts at %" PRId64
                 ", the end of what this store holds (the group committed %" PRId64 ")",
                 tp->partition, tp->topic, x, kp->offset);
    }
  }
  rd_kafka_topic_partition_list_destroy(k);
  ember_free(ends);
}

void ember__shards_revoke(ember__shards_t *s, const rd_kafka_topic_partition_list_t *parts) {
  for (int i = 0; i < parts->cnt; i++) {
    int32_t p = parts->elems[i].partition;
    if (p < 0 || (size_t)p >= s->nparts) continue;
    s->parts[p].assigned = false;
    s->parts[p].started = false;
  }
}

void ember__shards_source(ember__shards_t *s, const rd_kafka_message_t *m,
                          ember_store_source_t *out) {
  out->partition = m->partition;
  out->offset = m->offset;
  out->run_start = m->offset;
  out->run_started_ns = ember_time_now_ns();
  part_t *pt = part_of(s, m->partition);
  if (pt == NULL) return; /* out of memory: the message starts a run of its own */
  if (!pt->started || m->offset < pt->run_start) {
    /* The first message since the assignment, or a seek back (a reset):
     * a new run. */
    pt->started = true;
    pt->run_start = m->offset;
    pt->run_started_ns = out->run_started_ns;
  }
  out->run_start = pt->run_start;
  out->run_started_ns = pt->run_started_ns;
}

void ember__shards_committed(ember__shards_t *s, int32_t partition, int64_t run_start,
                             int64_t next) {
  if (s == NULL || partition < 0 || next < 0) return;
  int rc = ember_store_committed(s->store, partition, run_start, next);
  if (rc != 0) {
    ember_metric_add(s->record_errors, 1);
    EMBER_WARN_LIMITED("collector",
                       "cannot record the commit of partition %" PRId32 " at %" PRId64
                       " in the store (%s): its windows stay pending",
                       partition, next, ember_store_strerror(rc));
  }
}

bool ember__shards_wins(const ember__foreign_run_t *a, const ember__foreign_run_t *b) {
  if (a->start != b->start) return a->start > b->start;
  bool ac = a->committed > a->start, bc = b->committed > b->start;
  if (ac != bc) return ac;
  if (a->started_ns != b->started_ns) return a->started_ns > b->started_ns;
  return strcmp(a->collector ? a->collector : "", b->collector ? b->collector : "") > 0;
}

/* Is `f` a run of this very store (a collector sharing our store file
 * announced it)? Its windows are ours, not copies. */
static bool in_store(const ember_store_run_t *own, size_t n, const ember__foreign_run_t *f) {
  for (size_t i = 0; i < n; i++)
    if (own[i].partition == f->partition && own[i].start == f->start &&
        own[i].started_ns == f->started_ns)
      return true;
  return false;
}

/* Undo this store's pending windows of `partition` at [from, to), which
 * collector `who` holds (`why`); counted into *total. */
static int undo(ember__shards_t *s, int32_t partition, int64_t from, int64_t to, const char *who,
                const char *why, uint64_t *total) {
  uint64_t k = 0;
  int rc = ember_store_undo(s->store, partition, from, to, &k);
  if (rc == 0 && k > 0) {
    *total += k;
    ember_metric_add(s->undone, (double)k);
    EMBER_INFO("collector",
               "undid %" PRIu64 " pending windows of partition %" PRId32 " at [%" PRId64
               ", %" PRId64 "): collector %s's run %s",
               k, partition, from, to, who, why);
  }
  return rc;
}

int ember__shards_reconcile(ember__shards_t *s, const ember__foreign_run_t *runs, size_t n,
                            uint64_t *undone) {
  if (undone) *undone = 0;
  if (n == 0) return 0;
  ember_store_run_t *own = NULL;
  size_t count = 0;
  int rc = ember_store_runs(s->store, &own, &count);
  if (rc != 0) return rc;
  uint64_t total = 0;
  for (size_t i = 0; i < count && rc == 0; i++) {
    const ember_store_run_t *r = &own[i];
    if (r->pending == 0) continue;
    ember__foreign_run_t me = {.collector = s->self,
                               .partition = r->partition,
                               .start = r->start,
                               .stored_end = r->stored_end,
                               .committed = r->committed,
                               .started_ns = r->started_ns};
    int64_t lo = r->committed > r->start ? r->committed : r->start, hi = r->stored_end;
    for (size_t j = 0; j < n && rc == 0; j++) {
      const ember__foreign_run_t *f = &runs[j];
      if (f->partition != r->partition || f->collector == NULL ||
          strcmp(f->collector, s->self) == 0 || in_store(own, count, f))
        continue;
      int64_t from = f->start > lo ? f->start : lo, to = f->stored_end < hi ? f->stored_end : hi;
      if (from >= to) continue;
      /* What the foreign run committed is final there: our pending copy
       * goes, whichever run started first (a run that began at
       * auto.offset.reset's earliest starts below an earlier run that
       * never committed). */
      int64_t cut = f->committed < to ? f->committed : to;
      if (cut > from) {
        rc = undo(s, r->partition, from, cut, f->collector, "committed them", &total);
        from = cut;
      }
      if (rc == 0 && from < to && ember__shards_wins(f, &me))
        rc = undo(s, r->partition, from, to, f->collector, "started later", &total);
    }
  }
  ember_store_runs_free(own);
  if (undone) *undone = total;
  return rc;
}
