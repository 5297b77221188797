/* Wire codec of collector announcements: ember_collector_info_t <->
 * ember.wire.v1.CollectorInfo (src/proto/ember.proto), as sent on
 * ember.collectors.
 *
 * One check (ember_codec_check_collector) serves both directions: the
 * encoder refuses what the decoder would refuse, so a collector never
 * announces a record its peers drop. Decoding bounds the message and every
 * count before copying anything, copies into an owned record, checks it,
 * and hands it over whole or not at all. Thread-safe: no shared state. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "codec_internal.h"
#include "ember.pb-c.h"
#include "ember/codec.h"
#include "utf8.h"

typedef Ember__Wire__V1__CollectorInfo wire_info_t;
typedef Ember__Wire__V1__CollectorInfo__Run wire_run_t;

/* Text that goes into logs, JSON and Kafka keys: present, bounded, UTF-8,
 * and without control characters (or, for a URL, spaces). */
static int check_str(const char *s, const char *what, size_t max, bool url, char *errbuf,
                     size_t errbuf_size) {
  if (s == NULL || s[0] == '\0')
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "a collector record needs its %s",
                             what);
  size_t n = strlen(s);
  if (n > max)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size,
                             "collector %s of %zu bytes (at most %zu)", what, n, max);
  if (!ember__utf8_valid(s, n))
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "collector %s is not valid UTF-8",
                             what);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch < 0x20 || ch == 0x7f || (url && ch == ' '))
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "collector %s has a control character%s at byte %zu", what,
                               url ? " or a space" : "", i);
  }
  return 0;
}

static int check_run(const ember_collector_run_t *r, size_t i, char *errbuf, size_t errbuf_size) {
  if (r->partition < 0)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "run %zu: partition %d is negative", i, (int)r->partition);
  if (r->start < 0 || r->stored_end < r->start)
    return ember__codec_fail(
        EMBER_ECORRUPT, errbuf, errbuf_size,
        "run %zu: offsets [%lld, %lld) are not a range (need 0 <= start <= stored_end)", i,
        (long long)r->start, (long long)r->stored_end);
  /* committed starts at start and only grows; it may pass stored_end
   * (malformed messages at the end are committed, not stored). */
  if (r->committed < r->start)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "run %zu: committed offset %lld is below the run's start %lld", i,
                             (long long)r->committed, (long long)r->start);
  if (r->started_ns < 0)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "run %zu: started_ns is negative",
                             i);
  if (r->tmin_ns > r->tmax_ns)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "run %zu: tmin_ns is after tmax_ns", i);
  if (r->pending > r->windows)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "run %zu: %llu pending windows of %llu stored", i,
                             (unsigned long long)r->pending, (unsigned long long)r->windows);
  /* One window is one message is one offset. */
  if (r->windows > (uint64_t)(r->stored_end - r->start))
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "run %zu: %llu windows in %lld offsets", i,
                             (unsigned long long)r->windows, (long long)(r->stored_end - r->start));
  return 0;
}

int ember_codec_check_collector(const ember_collector_info_t *c, char *errbuf, size_t errbuf_size) {
  if (c == NULL)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "no collector record");
  int rc = check_str(c->id, "id", EMBER_COLLECTOR_MAX_ID, false, errbuf, errbuf_size);
  if (rc == 0)
    rc = check_str(c->group_id, "group_id", EMBER_COLLECTOR_MAX_ID, false, errbuf, errbuf_size);
  if (rc == 0)
    rc = check_str(c->api_url, "api_url", EMBER_COLLECTOR_MAX_URL, true, errbuf, errbuf_size);
  if (rc != 0) return rc;
  const char *u = c->api_url;
  size_t scheme = strncmp(u, "http://", 7) == 0 ? 7 : strncmp(u, "https://", 8) == 0 ? 8 : 0;
  if (scheme == 0 || u[scheme] == '\0')
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "collector api_url \"%.64s\" is not an http:// or https:// URL", u);
  if (c->started_ns <= 0 || c->announced_ns <= 0)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "collector record without started_ns or announced_ns");
  if (c->seq == 0)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "collector record with seq 0 (seq starts at 1)");
  if (c->interval_ms < EMBER_COLLECTOR_MIN_INTERVAL_MS ||
      c->interval_ms > EMBER_COLLECTOR_MAX_INTERVAL_MS)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "collector interval_ms %u is outside [%u, %u]", c->interval_ms,
                             EMBER_COLLECTOR_MIN_INTERVAL_MS, EMBER_COLLECTOR_MAX_INTERVAL_MS);
  if (c->nruns > EMBER_COLLECTOR_MAX_RUNS)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size,
                             "collector record with %zu runs (at most %u)", c->nruns,
                             EMBER_COLLECTOR_MAX_RUNS);
  if (c->nassigned > EMBER_COLLECTOR_MAX_ASSIGNED)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size,
                             "collector record with %zu assigned partitions (at most %u)",
                             c->nassigned, EMBER_COLLECTOR_MAX_ASSIGNED);
  if ((c->nruns > 0 && c->runs == NULL) || (c->nassigned > 0 && c->assigned == NULL))
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "collector record with a missing array");
  for (size_t i = 0; i < c->nruns; i++) {
    const ember_collector_run_t *r = &c->runs[i];
    if ((rc = check_run(r, i, errbuf, errbuf_size)) != 0) return rc;
    if (i > 0) {
      const ember_collector_run_t *p = &c->runs[i - 1];
      if (p->partition > r->partition || (p->partition == r->partition && p->start >= r->start))
        return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                                 "run %zu: runs must ascend by (partition, start) without repeats",
                                 i);
    }
  }
  for (size_t i = 0; i < c->nassigned; i++) {
    if (c->assigned[i] < 0)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "assigned partition %d is negative", (int)c->assigned[i]);
    if (i > 0 && c->assigned[i - 1] >= c->assigned[i])
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "assigned partitions must ascend without repeats (%d after %d)",
                               (int)c->assigned[i], (int)c->assigned[i - 1]);
  }
  return 0;
}

int ember_codec_encode_collector(const ember_collector_info_t *c, ember_buf_t *out) {
  if (out == NULL || ember_codec_check_collector(c, NULL, 0) != 0) return -EINVAL;
  wire_info_t m;
  ember__wire__v1__collector_info__init(&m);
  m.version = EMBER_WIRE_VERSION;
  /* protobuf-c takes char * but only reads them. */
  m.id = (char *)(uintptr_t)c->id;
  m.group_id = (char *)(uintptr_t)c->group_id;
  m.api_url = (char *)(uintptr_t)c->api_url;
  m.started_ns = c->started_ns;
  m.announced_ns = c->announced_ns;
  m.stopping = c->stopping;
  m.seq = c->seq;
  m.interval_ms = c->interval_ms;
  m.n_assigned = c->nassigned;
  m.assigned = c->assigned;
  wire_run_t *runs = NULL;
  wire_run_t **ptrs = NULL;
  int rc = 0;
  if (c->nruns > 0) {
    runs = ember_malloc(c->nruns * sizeof *runs);
    ptrs = ember_malloc(c->nruns * sizeof *ptrs);
    if (runs == NULL || ptrs == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    for (size_t i = 0; i < c->nruns; i++) {
      const ember_collector_run_t *r = &c->runs[i];
      ember__wire__v1__collector_info__run__init(&runs[i]);
      runs[i].partition = r->partition;
      runs[i].start = r->start;
      runs[i].stored_end = r->stored_end;
      runs[i].committed = r->committed;
      runs[i].started_ns = r->started_ns;
      runs[i].tmin_ns = r->tmin_ns;
      runs[i].tmax_ns = r->tmax_ns;
      runs[i].windows = r->windows;
      runs[i].pending = r->pending;
      ptrs[i] = &runs[i];
    }
    m.n_runs = c->nruns;
    m.runs = ptrs;
  }
  size_t size = ember__wire__v1__collector_info__get_packed_size(&m);
  if (size > EMBER_COLLECTOR_MAX_RECORD) {
    rc = EMBER_ETOOBIG;
    goto cleanup;
  }
  char *at;
  rc = ember_buf_extend(out, size, &at);
  if (rc == 0) ember__wire__v1__collector_info__pack(&m, (uint8_t *)at);
cleanup:
  ember_free(ptrs);
  ember_free(runs);
  return rc;
}

void ember_collector_info_clear(ember_collector_info_t *c) {
  if (c == NULL) return;
  ember_free(c->id);
  ember_free(c->group_id);
  ember_free(c->api_url);
  ember_free(c->runs);
  ember_free(c->assigned);
  *c = (ember_collector_info_t){0};
}

/* Owned copies of the arrays and strings of `src` into `d` (whose scalars
 * the caller set); on failure `d` holds what was copied, for _clear. */
static int copy_owned(const char *id, const char *group, const char *url, const int32_t *assigned,
                      size_t nassigned, ember_collector_info_t *d) {
  d->id = ember_strdup(id ? id : "");
  d->group_id = ember_strdup(group ? group : "");
  d->api_url = ember_strdup(url ? url : "");
  if (d->id == NULL || d->group_id == NULL || d->api_url == NULL) return -ENOMEM;
  if (nassigned > 0) {
    d->assigned = ember_malloc(nassigned * sizeof *d->assigned);
    if (d->assigned == NULL) return -ENOMEM;
    memcpy(d->assigned, assigned, nassigned * sizeof *d->assigned);
    d->nassigned = nassigned;
  }
  return 0;
}

int ember_collector_info_copy(const ember_collector_info_t *src, ember_collector_info_t *dst) {
  if (src == NULL || dst == NULL) return -EINVAL;
  ember_collector_info_t d = *src;
  d.id = d.group_id = d.api_url = NULL;
  d.runs = NULL;
  d.nruns = 0;
  d.assigned = NULL;
  d.nassigned = 0;
  int rc = copy_owned(src->id, src->group_id, src->api_url, src->assigned, src->nassigned, &d);
  if (rc == 0 && src->nruns > 0) {
    d.runs = ember_malloc(src->nruns * sizeof *d.runs);
    if (d.runs == NULL) {
      rc = -ENOMEM;
    } else {
      memcpy(d.runs, src->runs, src->nruns * sizeof *d.runs);
      d.nruns = src->nruns;
    }
  }
  if (rc != 0) {
    ember_collector_info_clear(&d);
    return rc;
  }
  *dst = d;
  return 0;
}

int ember_codec_decode_collector(const void *data, size_t len, ember_collector_info_t *out,
                                 char *errbuf, size_t errbuf_size) {
  if ((data == NULL && len > 0) || out == NULL) return -EINVAL;
  if (len > EMBER_COLLECTOR_MAX_RECORD)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size,
                             "collector record of %zu bytes (at most %zu)", len,
                             EMBER_COLLECTOR_MAX_RECORD);
  wire_info_t *m = ember__wire__v1__collector_info__unpack(&ember__codec_pb_allocator, len, data);
  if (m == NULL)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "not a valid ember.wire.v1.CollectorInfo message (%zu bytes)", len);
  int rc = 0;
  ember_collector_info_t c = {0};
  if (m->version == 0 || m->version > EMBER_WIRE_VERSION) {
    rc = ember__codec_fail(EMBER_EVERSION, errbuf, errbuf_size,
                           "collector record schema version %u is not supported", m->version);
    goto cleanup;
  }
  /* Counts first: nothing is copied for a record that is refused anyway. */
  if (m->n_runs > EMBER_COLLECTOR_MAX_RUNS || m->n_assigned > EMBER_COLLECTOR_MAX_ASSIGNED) {
    rc = ember__codec_fail(
        EMBER_ETOOBIG, errbuf, errbuf_size,
        "collector record with %zu runs and %zu assigned partitions (at most %u each)", m->n_runs,
        m->n_assigned, EMBER_COLLECTOR_MAX_RUNS);
    goto cleanup;
  }
  c.started_ns = m->started_ns;
  c.announced_ns = m->announced_ns;
  c.stopping = m->stopping;
  c.seq = m->seq;
  c.interval_ms = m->interval_ms;
  rc = copy_owned(m->id, m->group_id, m->api_url, m->assigned, m->n_assigned, &c);
  if (rc == 0 && m->n_runs > 0) {
    c.runs = ember_malloc(m->n_runs * sizeof *c.runs);
    if (c.runs == NULL) rc = -ENOMEM;
    for (size_t i = 0; i < m->n_runs && rc == 0; i++) {
      const wire_run_t *w = m->runs[i];
      c.runs[i] = (ember_collector_run_t){.partition = w->partition,
                                          .start = w->start,
                                          .stored_end = w->stored_end,
                                          .committed = w->committed,
                                          .started_ns = w->started_ns,
                                          .tmin_ns = w->tmin_ns,
                                          .tmax_ns = w->tmax_ns,
                                          .windows = w->windows,
                                          .pending = w->pending};
    }
    if (rc == 0) c.nruns = m->n_runs;
  }
  if (rc == -ENOMEM) {
    ember__codec_fail(rc, errbuf, errbuf_size, "out of memory while decoding a collector record");
    goto cleanup;
  }
  rc = ember_codec_check_collector(&c, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  *out = c;
  c = (ember_collector_info_t){0};
cleanup:
  ember_collector_info_clear(&c);
  ember__wire__v1__collector_info__free_unpacked(m, &ember__codec_pb_allocator);
  return rc;
}
