/* Fleet queries: choosing a group, asking its members, merging (fleetq.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "fleetq.h"
#include "ember/buf.h"
#include "ember/log.h"

/* May member `m` hold windows that start in [from, to)? Its announced runs
 * say so; and a member that died (not stopping) while assigned partitions
 * may have stored more than it last announced, so it is taken to hold
 * data: its absence makes an answer partial rather than silently smaller.
 * A clean stop announces its runs as they are at the end. */
static bool holds(const ember__peer_t *m, int64_t from, int64_t to) {
  if (!m->info.stopping && m->info.nassigned > 0) return true;
  for (size_t i = 0; i < m->info.nruns; i++) {
    const ember_collector_run_t *r = &m->info.runs[i];
    if (r->windows > 0 && r->tmin_ns < to && r->tmax_ns >= from) return true;
  }
  return false;
}

/* Is every member of `group` that holds data for the range live? */
static bool group_complete(const ember__peer_t *m, size_t n, const char *group, int64_t from,
                           int64_t to) {
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(m[i].info.group_id, group) != 0) continue;
    if (m[i].live || m[i].self) any = true;
    if (!m[i].live && !m[i].self && holds(&m[i], from, to)) return false;
  }
  return any;
}

/* Does `other` hold every window `group` holds for the range? Windows
 * are named by (partition, offset): each run of `group` with windows in
 * the range must lie inside the union of `other`'s runs of its partition
 * (a replica that has not read as far is not a copy yet). */
static bool covers(const ember__peer_t *m, size_t n, const char *group, const char *other,
                   int64_t from, int64_t to) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(m[i].info.group_id, group) != 0) continue;
    for (size_t k = 0; k < m[i].info.nruns; k++) {
      const ember_collector_run_t *r = &m[i].info.runs[k];
      if (r->windows == 0 || r->tmin_ns >= to || r->tmax_ns < from) continue;
      /* Sweep: extend `cur` through other's runs that start at or before it. */
      int64_t cur = r->start;
      for (bool moved = true; cur < r->stored_end && moved;) {
        moved = false;
        for (size_t j = 0; j < n; j++) {
          if (strcmp(m[j].info.group_id, other) != 0) continue;
          for (size_t q = 0; q < m[j].info.nruns; q++) {
            const ember_collector_run_t *o = &m[j].info.runs[q];
            if (o->partition == r->partition && o->start <= cur && o->stored_end > cur) {
              cur = o->stored_end;
              moved = true;
            }
          }
        }
      }
      if (cur < r->stored_end) return false;
    }
  }
  return true;
}

/* Is `g` one of the replica groups this collector may read instead of its
 * own (fleet.replicas)? */
static bool is_replica(const ember__fleetq_t *f, const char *g) {
  for (size_t i = 0; i < f->o.nreplicas; i++)
    if (strcmp(f->o.replicas[i], g) == 0) return true;
  return false;
}

/* Append the missing members of `group` (not live, holding data for the
 * range) and their partitions to `out`. */
static void describe_missing(const ember__peer_t *m, size_t n, const char *group, int64_t from,
                             int64_t to, char *out, size_t size) {
  ember_buf_t b;
  ember_buf_init(&b, size > 0 ? size - 1 : 0);
  for (size_t i = 0; i < n; i++) {
    if (strcmp(m[i].info.group_id, group) != 0 || m[i].live || m[i].self || !holds(&m[i], from, to))
      continue;
    if (b.len > 0) ember_buf_puts(&b, "; ");
    ember_buf_printf(&b, "collector %s is down: partitions", m[i].info.id);
    /* Those it held data of for the range, and those it was assigned. */
    size_t shown = 0;
    int32_t seen[64];
    for (size_t k = 0; k < m[i].info.nruns + m[i].info.nassigned; k++) {
      int32_t p;
      if (k < m[i].info.nruns) {
        const ember_collector_run_t *r = &m[i].info.runs[k];
        if (r->windows == 0 || r->tmin_ns >= to || r->tmax_ns < from) continue;
        p = r->partition;
      } else {
        p = m[i].info.assigned[k - m[i].info.nruns];
      }
      bool dup = false;
      for (size_t j = 0; j < shown && !dup; j++) dup = seen[j] == p;
      if (dup) continue;
      if (shown < sizeof seen / sizeof seen[0]) seen[shown++] = p;
      ember_buf_printf(&b, " %" PRId32, p);
    }
  }
  snprintf(out, size, "%s", b.data ? b.data : "");
  ember_buf_free(&b);
}

void ember__fleet_ask_free(ember__fleet_ask_t *a) {
  if (a == NULL) return;
  ember__fanout_free(a->fetch, a->n);
  for (size_t i = 0; i < a->n; i++) {
    if (a->urls) ember_free(a->urls[i]);
    if (a->ids) ember_free(a->ids[i]);
  }
  ember_free(a->fetch);
  ember_free(a->urls);
  ember_free(a->ids);
  memset(a, 0, sizeof *a);
}

void ember__fleet_ask_failed(ember__fleet_ask_t *a, size_t i, const char *why) {
  size_t len = strlen(a->partial);
  if (len + 8 >= sizeof a->partial) return;
  snprintf(a->partial + len, sizeof a->partial - len, "%scollector %s did not answer: %s",
           len ? "; " : "", a->ids[i], why);
}

static char *dup_str(const char *s) {
  size_t n = strlen(s);
  char *d = ember_malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

int ember__fleetq_ask(const ember__fleetq_t *f, int64_t from_ns, int64_t to_ns,
                      const char *path_query, ember__fleet_ask_t *out) {
  memset(out, 0, sizeof *out);
  ember__peer_t *m = NULL;
  size_t n = 0;
  int rc = ember__peers_list(f->o.peers, ember_time_now_ns(), &m, &n);
  if (rc != 0) return rc;
  const char *own = NULL;
  for (size_t i = 0; i < n && own == NULL; i++)
    if (m[i].self) own = m[i].info.group_id;
  if (own == NULL) {
    /* Not announced yet: this store alone. */
    ember__peers_list_free(m, n);
    out->self = true;
    return 0;
  }
  const char *group = own;
  if (!group_complete(m, n, own, from_ns, to_ns)) {
    /* A replica group that is complete and holds what the own group does. */
    for (size_t i = 0; i < n && group == own; i++) {
      const char *g = m[i].info.group_id;
      if (strcmp(g, own) != 0 && is_replica(f, g) && group_complete(m, n, g, from_ns, to_ns) &&
          covers(m, n, own, g, from_ns, to_ns))
        group = m[i].info.group_id;
    }
    if (group == own)
      describe_missing(m, n, own, from_ns, to_ns, out->partial, sizeof out->partial);
  }
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(m[i].info.group_id, group) == 0 && m[i].live && !m[i].self) k++;
  out->fetch = ember_calloc(k ? k : 1, sizeof *out->fetch);
  out->urls = ember_calloc(k ? k : 1, sizeof *out->urls);
  out->ids = ember_calloc(k ? k : 1, sizeof *out->ids);
  if (out->fetch == NULL || out->urls == NULL || out->ids == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (m[i].self && strcmp(m[i].info.group_id, group) == 0) out->self = true;
    if (strcmp(m[i].info.group_id, group) != 0 || !m[i].live || m[i].self) continue;
    ember_buf_t u;
    ember_buf_init(&u, 16384);
    const char *base = m[i].info.api_url;
    size_t bl = strlen(base);
    while (bl > 0 && base[bl - 1] == '/') bl--;
    if (ember_buf_append(&u, base, bl) != 0 || ember_buf_puts(&u, path_query) != 0) {
      ember_buf_free(&u);
      rc = -ENOMEM;
      break;
    }
    out->urls[out->n] = ember_buf_take(&u, NULL);
    out->ids[out->n] = dup_str(m[i].info.id);
    if (out->urls[out->n] == NULL || out->ids[out->n] == NULL) rc = -ENOMEM;
    out->fetch[out->n].url = out->urls[out->n];
    out->n++;
  }
  ember__peers_list_free(m, n);
  if (rc == 0)
    rc = ember__fanout_get(out->fetch, out->n, f->o.token, f->o.timeout_ms, f->o.max_body);
  if (rc != 0) {
    ember__fleet_ask_free(out);
    return rc;
  }
  /* A 404 is an answer (a peer without the alert or session asked for). */
  for (size_t i = 0; i < out->n; i++)
    if (out->fetch[i].status != 200 && out->fetch[i].status != 404)
      ember__fleet_ask_failed(out, i, out->fetch[i].err);
  return 0;
}

int ember__fleetq_json(const ember__fleetq_t *f, const char *path_query,
                       int (*each)(void *ctx, const char *peer, json_t *answer), void *ctx,
                       char *partial, size_t partial_size) {
  if (partial_size > 0) partial[0] = '\0';
  ember__fleet_ask_t a;
  int rc = ember__fleetq_ask(f, 0, INT64_MAX, path_query, &a);
  if (rc != 0) return rc;
  for (size_t i = 0; i < a.n && rc == 0; i++) {
    if (a.fetch[i].status != 200) continue;
    json_error_t je;
    json_t *doc = json_loadb(a.fetch[i].body.data ? a.fetch[i].body.data : "", a.fetch[i].body.len,
                             JSON_REJECT_DUPLICATES, &je);
    int erc = doc != NULL ? each(ctx, a.ids[i], doc) : EMBER_ECORRUPT;
    json_decref(doc);
    if (erc == -ENOMEM) {
      rc = erc;
    } else if (erc != 0) {
      ember__fleet_ask_failed(&a, i, "its answer is not the JSON asked for");
      EMBER_WARN_LIMITED("fleet", "collector %s answered %s with something else than its JSON",
                         a.ids[i], path_query);
    }
  }
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  return rc;
}

static const struct {
  const char *name;
  ember_value_type_t vt;
} raw_types[] = {{"cpu_ns", EMBER_VT_CPU_NS},
                 {"cpu_samples", EMBER_VT_CPU_SAMPLES},
                 {"alloc_objects", EMBER_VT_ALLOC_OBJECTS},
                 {"alloc_bytes", EMBER_VT_ALLOC_BYTES},
                 {"inuse_objects", EMBER_VT_INUSE_OBJECTS},
                 {"inuse_bytes", EMBER_VT_INUSE_BYTES}};

const char *ember__fleetq_raw_name(ember_value_type_t vt) {
  for (size_t i = 0; i < sizeof raw_types / sizeof raw_types[0]; i++)
    if (raw_types[i].vt == vt) return raw_types[i].name;
  return NULL;
}

int ember__fleetq_raw_type(const char *name, ember_value_type_t *out) {
  for (size_t i = 0; name != NULL && i < sizeof raw_types / sizeof raw_types[0]; i++)
    if (strcmp(name, raw_types[i].name) == 0) {
      *out = raw_types[i].vt;
      return 0;
    }
  return -EINVAL;
}

int ember__fleetq_param(ember_buf_t *q, const char *key, const char *value) {
  if (value == NULL) return 0;
  char *e = curl_easy_escape(NULL, value, 0);
  if (e == NULL) return -ENOMEM;
  int rc = ember_buf_printf(q, "&%s=%s", key, e);
  curl_free(e);
  return rc;
}

int ember__fleetq_query(ember_buf_t *q, const char *path, const ember_store_selector_t *sel,
                        int64_t from_ns, int64_t to_ns) {
  if (from_ns < 0 || to_ns < 0) return -EINVAL;
  /* Times as Unix seconds with nine decimals: exact to the nanosecond. */
  int rc = ember_buf_printf(
      q, "%s?local=1&from=%" PRId64 ".%09" PRId64 "&to=%" PRId64 ".%09" PRId64, path,
      from_ns / 1000000000, from_ns % 1000000000, to_ns / 1000000000, to_ns % 1000000000);
  if (rc == 0 && sel != NULL) {
    rc = ember__fleetq_param(q, "worker", sel->worker);
    if (rc == 0) rc = ember__fleetq_param(q, "version", sel->version);
    if (rc == 0) rc = ember__fleetq_param(q, "host", sel->host);
    if (rc == 0) rc = ember__fleetq_param(q, "actor", sel->actor);
  }
  return rc;
}

/* Add `src` into `acc` as one store's merge adds rows: stacks summed, the
 * window the union of the non-empty ones, the period kept while all agree. */
static int merge_into(ember_profile_t *acc, bool *acc_empty, const ember_profile_t *src) {
  if (ember_profile_nstacks(src) == 0) return 0;
  int rc = ember_profile_merge(acc, src);
  if (rc != 0) return rc;
  int64_t as, ae, ss, se;
  ember_profile_window(acc, &as, &ae);
  ember_profile_window(src, &ss, &se);
  if (*acc_empty) {
    rc = ember_profile_set_window(acc, ss, se);
    ember_profile_set_period(acc, ember_profile_period(src));
  } else {
    rc = ember_profile_set_window(acc, ss < as ? ss : as, se > ae ? se : ae);
    if (ember_profile_period(acc) != ember_profile_period(src)) ember_profile_set_period(acc, 0);
  }
  *acc_empty = false;
  return rc;
}

static bool same_str(const char *a, const char *b) {
  return (a == NULL || a[0] == '\0') ? (b == NULL || b[0] == '\0') : b != NULL && strcmp(a, b) == 0;
}

/* A session's labels over several results (ember_store_session_merge's
 * rule): the first result's, the host (and pid) cleared once two differ. */
static int session_labels(ember_profile_t *acc, bool acc_empty, const ember_profile_t *src) {
  if (ember_profile_nstacks(src) == 0) return 0;
  const ember_labels_t *sl = ember_profile_labels(src), *al = ember_profile_labels(acc);
  if (acc_empty) return ember_profile_set_labels(acc, sl);
  if (same_str(al->host, sl->host) && al->pid == sl->pid) return 0;
  ember_labels_t l = *al;
  l.host = NULL;
  l.pid = 0;
  return ember_profile_set_labels(acc, &l);
}

/* Decode the peers' answers of `a` (profiles of value type vt in the wire
 * encoding) and add them into acc; a peer whose answer cannot be read is
 * noted in a->partial. `labels` keeps a session's labels right. */
static int merge_answers(const ember__fleetq_t *f, ember__fleet_ask_t *a, ember_value_type_t vt,
                         ember_profile_t *acc, bool *empty, bool labels) {
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  lim.max_message = f->o.max_body;
  int rc = 0;
  for (size_t i = 0; i < a->n && rc == 0; i++) {
    if (a->fetch[i].status != 200) continue;
    ember_profile_t *p = NULL;
    char err[256] = "";
    int drc =
        ember_codec_decode(a->fetch[i].body.data, a->fetch[i].body.len, &lim, &p, err, sizeof err);
    if (drc == 0 && (ember_profile_ntypes(p) != 1 || ember_profile_type(p, 0) != vt)) {
      snprintf(err, sizeof err, "its profile has another value type");
      drc = EMBER_ECORRUPT;
    }
    if (drc == -ENOMEM) {
      rc = drc;
    } else if (drc != 0) {
      ember__fleet_ask_failed(a, i, err);
      EMBER_WARN_LIMITED("fleet", "collector %s sent a profile this one cannot read: %s", a->ids[i],
                         err);
    } else {
      if (labels) rc = session_labels(acc, *empty, p);
      if (rc == 0) rc = merge_into(acc, empty, p);
    }
    ember_profile_free(p);
  }
  return rc;
}

int ember__fleetq_merge(const ember__fleetq_t *f, ember_store_t *store,
                        const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                        ember_value_type_t vt, ember_profile_t **out, char *partial,
                        size_t partial_size) {
  if (ember_value_type_is_gauge(vt))
    return ember__fleetq_gauge_merge(f, store, sel, from_ns, to_ns, vt, out, partial, partial_size);
  if (partial_size > 0) partial[0] = '\0';
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  const char *raw = ember__fleetq_raw_name(vt);
  int rc = raw != NULL ? ember__fleetq_query(&q, "/api/v1/profile", sel, from_ns, to_ns) : -EINVAL;
  if (rc == 0) rc = ember_buf_printf(&q, "&format=ember&raw=%s", raw);
  ember__fleet_ask_t a;
  if (rc == 0) rc = ember__fleetq_ask(f, from_ns, to_ns, q.data, &a);
  ember_buf_free(&q);
  if (rc != 0) return rc;
  ember_profile_t *acc = NULL;
  bool empty = true;
  if (a.self) {
    rc = ember_store_merge(store, sel, from_ns, to_ns, vt, &acc);
    if (rc == 0) empty = ember_profile_nstacks(acc) == 0;
  } else {
    rc = ember_profile_new(&vt, 1, &acc);
    if (rc == 0 && sel != NULL) {
      ember_labels_t l = {
          .worker = sel->worker, .version = sel->version, .host = sel->host, .actor = sel->actor};
      rc = ember_profile_set_labels(acc, &l);
    }
    if (rc == 0) rc = ember_profile_set_window(acc, from_ns, to_ns);
  }
  if (rc == 0) rc = merge_answers(f, &a, vt, acc, &empty, false);
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  if (rc != 0) {
    ember_profile_free(acc);
    return rc;
  }
  *out = acc;
  return 0;
}

int ember__fleetq_session_merge(const ember__fleetq_t *f, ember_store_t *store, const char *id,
                                ember_value_type_t vt, ember_profile_t **out,
                                ember_store_session_info_t *info, char *partial,
                                size_t partial_size) {
  if (partial_size > 0) partial[0] = '\0';
  if (info != NULL) *info = (ember_store_session_info_t){0};
  ember_buf_t q;
  ember_buf_init(&q, 8192);
  const char *raw = ember__fleetq_raw_name(vt);
  char *e = curl_easy_escape(NULL, id, 0);
  int rc =
      e == NULL ? -ENOMEM
      : raw == NULL
          ? -EINVAL
          : ember_buf_printf(&q, "/api/v1/sessions/%s/profile?local=1&format=ember&raw=%s", e, raw);
  curl_free(e);
  /* A session's results may be anywhere in time (and results are not in
   * the runs' ranges): every member that holds anything is asked. */
  ember__fleet_ask_t a;
  if (rc == 0) rc = ember__fleetq_ask(f, 0, INT64_MAX, q.data, &a);
  ember_buf_free(&q);
  if (rc != 0) return rc;
  ember_profile_t *acc = NULL;
  bool empty = true;
  if (a.self) {
    rc = ember_store_session_merge(store, id, vt, &acc, info);
    if (rc == 0) empty = ember_profile_nstacks(acc) == 0;
  } else {
    rc = ember_profile_new(&vt, 1, &acc);
  }
  if (rc == 0) rc = merge_answers(f, &a, vt, acc, &empty, true);
  if (rc == 0 && info != NULL && !empty && info->results == 0) info->results = 1;
  if (rc == 0 && partial_size > 0) snprintf(partial, partial_size, "%s", a.partial);
  ember__fleet_ask_free(&a);
  if (rc != 0) {
    ember_profile_free(acc);
    return rc;
  }
  *out = acc;
  return 0;
}
