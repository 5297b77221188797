/* This collector as one member of the fleet (member.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "ember/ember.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "member.h"

#define LOG      "collector"
#define NS_PER_S 1000000000LL

/* fleet.replicas: group names split at commas, spaces trimmed. */
static int read_replicas(ember__member_t *m, const char *reps, char *err, size_t n) {
  for (const char *p = reps; p != NULL && *p != '\0';) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    while (len > 0 && (*p == ' ')) p++, len--;
    while (len > 0 && p[len - 1] == ' ') len--;
    if (len > EMBER_COLLECTOR_MAX_ID) {
      snprintf(err, n, "fleet.replicas: a group name is longer than %u bytes",
               EMBER_COLLECTOR_MAX_ID);
      return EMBER_ECONFIG;
    }
    if (len > 0) {
      char **grown = ember_realloc(m->replicas, (m->nreplicas + 1) * sizeof *grown);
      if (grown == NULL) return -ENOMEM;
      m->replicas = grown;
      if ((grown[m->nreplicas] = ember_malloc(len + 1)) == NULL) return -ENOMEM;
      memcpy(grown[m->nreplicas], p, len);
      grown[m->nreplicas++][len] = '\0';
    }
    if (comma == NULL) break;
    p = comma + 1;
  }
  return 0;
}

int ember__member_init(ember__member_t *m, const ember_config_t *cfg, ember_metrics_t *metrics,
                       char *err, size_t n) {
  *m = (ember__member_t){.metrics = metrics};
  int64_t timeout = 5 * NS_PER_S;
  const char *v = ember_config_get(cfg, "fleet.peer_timeout");
  if (v != NULL && (ember_parse_duration_ns(v, NS_PER_S, &timeout) != 0 ||
                    timeout < 100 * 1000000LL || timeout > 600 * NS_PER_S)) {
    snprintf(err, n, "fleet.peer_timeout: \"%.64s\" is not a duration from 100ms to 10m", v);
    return EMBER_ECONFIG;
  }
  int rc = ember__fleet_new(metrics, &m->fleet);
  if (rc != 0) {
    snprintf(err, n, "out of memory");
    return rc;
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(err, n, "cannot initialise libcurl");
    return -ENOMEM;
  }
  m->curl_inited = true;
  const char *token = ember_config_get(cfg, "api.token");
  if (token != NULL && *token != '\0' && (m->token = ember_strdup(token)) == NULL) return -ENOMEM;
  rc = read_replicas(m, ember_config_get(cfg, "fleet.replicas"), err, n);
  if (rc != 0) return rc;
  m->fleetq.o = (ember__fleetq_opts_t){.peers = ember__fleet_peers(m->fleet),
                                       .token = m->token,
                                       .timeout_ms = (int)(timeout / 1000000),
                                       .max_body = (size_t)256 << 20,
                                       .replicas = (const char *const *)m->replicas,
                                       .nreplicas = m->nreplicas};
  return 0;
}

/* Apply the shards' rule (shards.h) to this store's pending windows
 * against the runs the other members of this collector's group announce
 * (another group's copies are replicas, not duplicates). */
static void reconcile(ember__member_t *m) {
  ember__peer_t *peers = NULL;
  size_t np = 0, nr = 0;
  if (ember__fleet_list(m->fleet, ember_time_now_ns(), &peers, &np) != 0) return;
  const char *group = NULL;
  for (size_t i = 0; i < np && group == NULL; i++)
    if (peers[i].self) group = peers[i].info.group_id;
  for (size_t i = 0; i < np; i++)
    if (!peers[i].self && group != NULL && strcmp(peers[i].info.group_id, group) == 0)
      nr += peers[i].info.nruns;
  ember__foreign_run_t *fr = nr ? ember_malloc(nr * sizeof *fr) : NULL;
  size_t k = 0;
  for (size_t i = 0; fr != NULL && i < np; i++) {
    if (peers[i].self || strcmp(peers[i].info.group_id, group) != 0) continue;
    for (size_t j = 0; j < peers[i].info.nruns; j++) {
      const ember_collector_run_t *r = &peers[i].info.runs[j];
      fr[k++] = (ember__foreign_run_t){.collector = peers[i].info.id,
                                       .partition = r->partition,
                                       .start = r->start,
                                       .stored_end = r->stored_end,
                                       .committed = r->committed,
                                       .started_ns = r->started_ns};
    }
  }
  uint64_t undone = 0;
  int rc = k > 0 ? ember__shards_reconcile(m->shards, fr, k, &undone) : 0;
  if (rc != 0)
    EMBER_WARN_LIMITED(LOG,
                       "cannot undo this store's copies of other collectors' "
                       "windows: %s (tried again at the next announcement)",
                       ember_store_strerror(rc));
  ember_free(fr);
  ember__peers_list_free(peers, np);
}

int ember__member_store_runs(ember_store_t *store, ember_collector_run_t **out, size_t *count) {
  *out = NULL;
  *count = 0;
  ember_store_run_t *runs = NULL;
  size_t n = 0;
  int rc = ember_store_runs(store, &runs, &n);
  if (rc != 0) return rc;
  ember_collector_run_t *v = n ? ember_malloc(n * sizeof *v) : NULL;
  if (n > 0 && v == NULL) rc = -ENOMEM;
  for (size_t i = 0; rc == 0 && i < n; i++)
    v[i] = (ember_collector_run_t){.partition = runs[i].partition,
                                   .start = runs[i].start,
                                   .stored_end = runs[i].stored_end,
                                   .committed = runs[i].committed,
                                   .started_ns = runs[i].started_ns,
                                   .tmin_ns = runs[i].tmin_ns,
                                   .tmax_ns = runs[i].tmax_ns,
                                   .windows = runs[i].windows,
                                   .pending = runs[i].pending};
  ember_store_runs_free(runs);
  if (rc != 0) return rc;
  *out = v;
  *count = n;
  return 0;
}

/* The fleet's runs callback, on its thread once per announcement: first
 * the rule against what the peers announced, then this store's runs. */
static int member_runs(void *ctx, ember_collector_run_t **out, size_t *count) {
  ember__member_t *m = ctx;
  reconcile(m);
  return ember__member_store_runs(m->store, out, count);
}

int ember__member_start(ember__member_t *m, const ember_config_t *cfg, ember_store_t *store,
                        ember_kafka_t *kafka, rd_kafka_t *producer, rd_kafka_t *consumer,
                        const char *group_id, uint16_t api_port, char *err, size_t n) {
  m->store = store;
  ember__fleet_opts_t fo = {.kafka = kafka,
                            .producer = producer,
                            .consumer = consumer,
                            .group_id = group_id,
                            .runs = member_runs,
                            .runs_ctx = m};
  int rc = ember__fleet_read_config(cfg, api_port, &fo.config, err, n);
  /* The shards before the fleet's thread, which calls member_runs. */
  if (rc == 0) {
    rc = ember__shards_new(store, m->metrics, fo.config.id, &m->shards);
    if (rc != 0) snprintf(err, n, "out of memory");
  }
  if (rc == 0) rc = ember__fleet_start(m->fleet, &fo, err, n);
  return rc;
}

void ember__member_stop(ember__member_t *m, int flush_ms) { ember__fleet_stop(m->fleet, flush_ms); }

void ember__member_free(ember__member_t *m) {
  ember__fleet_free(m->fleet);
  ember_free(m->token);
  for (size_t i = 0; i < m->nreplicas; i++) ember_free(m->replicas[i]);
  ember_free(m->replicas);
  if (m->curl_inited) curl_global_cleanup();
  ember__shards_free(m->shards);
  *m = (ember__member_t){0};
}
