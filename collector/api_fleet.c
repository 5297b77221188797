/* The API's fleet handler: GET /api/v1/collectors, the peer table of
 * ember.collectors as this collector sees it (fleet.h, peers.h), this
 * collector included. docs/api.md (Fleet) describes it; api_req.h the
 * conventions. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "api_req.h"
#include "fleet.h"
#include "json.h"

static int run_json(json_t *arr, const ember_collector_run_t *r) {
  json_t *o = json_object();
  int rc = ember__json_push(arr, o);
  if (rc == 0) rc = ember__json_set(o, "partition", json_integer(r->partition));
  if (rc == 0) rc = ember__json_set(o, "start", json_integer(r->start));
  if (rc == 0) rc = ember__json_set(o, "stored_end", json_integer(r->stored_end));
  if (rc == 0) rc = ember__json_set(o, "committed", json_integer(r->committed));
  if (rc == 0) rc = ember__json_set(o, "started_ms", json_integer(ember__req_ms(r->started_ns)));
  if (rc == 0) rc = ember__json_set(o, "tmin_ms", json_integer(ember__req_ms(r->tmin_ns)));
  if (rc == 0) rc = ember__json_set(o, "tmax_ms", json_integer(ember__req_ms(r->tmax_ns)));
  /* Counts past 2^63 cannot happen (one window per offset). */
  if (rc == 0) rc = ember__json_set(o, "windows", json_integer((json_int_t)r->windows));
  if (rc == 0) rc = ember__json_set(o, "pending", json_integer((json_int_t)r->pending));
  return rc;
}

static int peer_json(json_t *arr, const ember__peer_t *p) {
  const ember_collector_info_t *c = &p->info;
  json_t *o = json_object();
  int rc = ember__json_push(arr, o);
  if (rc == 0) rc = ember__json_set(o, "id", ember__json_str(c->id));
  if (rc == 0) rc = ember__json_set(o, "group", ember__json_str(c->group_id));
  if (rc == 0) rc = ember__json_set(o, "api_url", ember__json_str(c->api_url));
  if (rc == 0) rc = ember__json_set(o, "self", json_boolean(p->self));
  if (rc == 0) rc = ember__json_set(o, "live", json_boolean(p->live));
  if (rc == 0) rc = ember__json_set(o, "stopping", json_boolean(c->stopping));
  if (rc == 0) rc = ember__json_set(o, "started_ms", json_integer(ember__req_ms(c->started_ns)));
  if (rc == 0)
    rc = ember__json_set(o, "announced_ms", json_integer(ember__req_ms(c->announced_ns)));
  if (rc == 0) rc = ember__json_set(o, "received_ms", json_integer(ember__req_ms(p->received_ns)));
  if (rc == 0) rc = ember__json_set(o, "interval_ms", json_integer(c->interval_ms));
  if (rc == 0) rc = ember__json_set(o, "seq", json_integer((json_int_t)(c->seq & INT64_MAX)));
  json_t *a = rc == 0 ? ember__req_jarray_in(o, "assigned") : NULL;
  if (rc == 0 && a == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < c->nassigned && rc == 0; i++)
    rc = ember__json_push(a, json_integer(c->assigned[i]));
  json_t *runs = rc == 0 ? ember__req_jarray_in(o, "runs") : NULL;
  if (rc == 0 && runs == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < c->nruns && rc == 0; i++) rc = run_json(runs, &c->runs[i]);
  return rc;
}

static unsigned h_collectors(ember__req_t *r) {
  static const char *const none[] = {NULL};
  unsigned st = ember__req_check_params(r, none);
  if (st != 0) return st;
  ember__peer_t *peers = NULL;
  size_t n = 0;
  int rc = r->env->fleet ? ember__fleet_list(r->env->fleet, ember_time_now_ns(), &peers, &n) : 0;
  if (rc != 0) return ember__req_fail_internal(r, "listing collectors", rc);
  json_t *doc = json_object();
  json_t *arr = doc ? ember__req_jarray_in(doc, "collectors") : NULL;
  rc = arr != NULL ? 0 : -ENOMEM;
  const char *self = r->env->fleet ? ember__fleet_id(r->env->fleet) : "";
  if (rc == 0) rc = ember__json_set(doc, "self", self[0] ? ember__json_str(self) : json_null());
  for (size_t i = 0; i < n && rc == 0; i++) rc = peer_json(arr, &peers[i]);
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember__peers_list_free(peers, n);
  return st;
}

const ember__api_route_t ember__api_fleet_routes[] = {
    {"/api/v1/collectors", 0, h_collectors, NULL},
    {NULL, 0, NULL, NULL},
};
