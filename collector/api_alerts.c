/* Alert rules and alerts over HTTP (docs/api.md, "Alerts"):
 *
 *   GET    /api/v1/rules              {"rules": [...]}
 *   POST   /api/v1/rules              a rule (JSON) -> 201 and the rule
 *   DELETE /api/v1/rules/NAME         200 {"deleted": NAME}
 *   GET    /api/v1/alerts?rule=&state=&worker=   {"alerts": [...]}
 *   GET    /api/v1/alerts/ID          the alert
 *
 * The engine (alerts.h) does the work; this file maps its answers to
 * statuses: a bad rule is a 400 naming the field, a taken name a 409, a
 * file rule deleted through the API a 409, an unknown name or id a 404. */
#include <errno.h>
#include <string.h>

#include "alerts.h"
#include "api_req.h"
#include "ember/ember.h"
#include "fleetq.h"

static bool name_ok(const char *s, size_t n) {
  if (n == 0 || n > EMBER__RULE_NAME_MAX) return false;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  }
  return true;
}

static unsigned no_alerts(ember__req_t *r) {
  return ember__req_fail(r, 503, "alerting is not available on this server");
}

static unsigned h_rule_add(ember__req_t *r) {
  json_t *body = NULL, *out = NULL;
  unsigned st = ember__req_body_object(
      r, "{\"name\": \"cpu-hot\", \"worker\": \"api\", \"above\": 0.5, \"for\": \"30s\"}", &body);
  if (st != 0) return st;
  char err[400] = "";
  int rc = ember__alerts_rule_add(r->env->alerts, body, &out, err, sizeof err);
  json_decref(body);
  if (rc == -EINVAL) return ember__req_fail(r, 400, "%s", err);
  if (rc == -EEXIST) return ember__req_fail(r, 409, "%s", err);
  if (rc != 0)
    return err[0] ? ember__req_fail(r, 500, "%s", err)
                  : ember__req_fail_internal(r, "adding the rule", rc);
  st = ember__req_answer_json(r, out);
  json_decref(out);
  if (st == 200) r->status = 201;
  return r->status;
}

static unsigned h_rules(ember__req_t *r) {
  static const char *const none[] = {NULL};
  bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
  const char *rest = r->rest;
  bool top = *rest == '\0' || strcmp(rest, "/") == 0;
  /* A wrong method is a 405 even where alerting is off. */
  if (!top && strcmp(r->method, "DELETE") != 0) {
    r->allow = "DELETE";
    return ember__req_fail(
        r, 405, "method %.16s not allowed: use DELETE (GET /api/v1/rules lists them)", r->method);
  }
  if (r->env->alerts == NULL) return no_alerts(r);
  if (top) {
    r->allow = "GET, HEAD, POST";
    if (strcmp(r->method, "POST") == 0) return h_rule_add(r);
    if (!get)
      return ember__req_fail(r, 405, "method %.16s not allowed: use GET or POST", r->method);
    unsigned st = ember__req_check_params(r, none);
    if (st != 0) return st;
    json_t *doc = ember__alerts_rules_json(r->env->alerts);
    if (doc == NULL) return ember__req_fail_internal(r, "listing the rules", -ENOMEM);
    st = ember__req_answer_json(r, doc);
    json_decref(doc);
    return st;
  }
  const char *name = rest + 1;
  if (!name_ok(name, strlen(name)))
    return ember__req_fail(r, 404, "no rule %.64s: rule names are 1 to 64 letters, digits, _ . -",
                           name);
  r->allow = "DELETE";
  if (strcmp(r->method, "DELETE") != 0)
    return ember__req_fail(
        r, 405, "method %.16s not allowed: use DELETE (GET /api/v1/rules lists them)", r->method);
  char err[400] = "";
  int rc = ember__alerts_rule_delete(r->env->alerts, name, err, sizeof err);
  if (rc == EMBER_ENOTFOUND) return ember__req_fail(r, 404, "%s", err);
  if (rc == -EPERM) return ember__req_fail(r, 409, "%s", err);
  if (rc != 0) return ember__req_fail(r, 500, "%s", err);
  json_t *doc = json_pack("{s:s}", "deleted", name);
  unsigned st =
      doc ? ember__req_answer_json(r, doc) : ember__req_fail_internal(r, "answering", -ENOMEM);
  json_decref(doc);
  return st;
}

/* ---- the fleet's alerts: each collector's engine evaluates the workers
 * whose windows its store holds, so a fleet answer is the union. ---- */

static bool has_alert(const json_t *list, const char *id) {
  size_t i;
  const json_t *a;
  json_array_foreach(list, i, a) {
    const char *x = json_string_value(json_object_get(a, "id"));
    if (x != NULL && strcmp(x, id) == 0) return true;
  }
  return false;
}

/* A peer's {"alerts": [...]}: the alerts this list does not hold yet. */
static int add_peer_alerts(void *ctx, const char *peer, json_t *answer) {
  (void)peer;
  json_t *list = ctx;
  const json_t *arr = json_object_get(answer, "alerts");
  if (!json_is_array(arr)) return EMBER_ECORRUPT;
  size_t i;
  json_t *a;
  json_array_foreach(arr, i, a) {
    const char *id = json_string_value(json_object_get(a, "id"));
    if (id == NULL) return EMBER_ECORRUPT;
    if (has_alert(list, id)) continue;
    if (json_array_append(list, a) != 0) return -ENOMEM;
  }
  return 0;
}

static int fleet_alerts(ember__req_t *r, json_t *doc) {
  json_t *list = json_object_get(doc, "alerts");
  if (!json_is_array(list)) return 0;
  ember_buf_t q;
  ember_buf_init(&q, 4096);
  int rc = ember_buf_puts(&q, "/api/v1/alerts?local=1");
  if (rc == 0) rc = ember__fleetq_param(&q, "rule", ember__req_param(r, "rule"));
  if (rc == 0) rc = ember__fleetq_param(&q, "state", ember__req_param(r, "state"));
  if (rc == 0) rc = ember__fleetq_param(&q, "worker", ember__req_param(r, "worker"));
  char partial[sizeof r->partial];
  if (rc == 0)
    rc = ember__fleetq_json(r->env->fleetq, q.data, add_peer_alerts, list, partial, sizeof partial);
  if (rc == 0) ember__req_partial(r, partial);
  ember_buf_free(&q);
  return rc;
}

/* A peer's answer for one alert id: the first one found. */
static int take_peer_alert(void *ctx, const char *peer, json_t *answer) {
  (void)peer;
  json_t **out = ctx;
  if (!json_is_object(answer)) return EMBER_ECORRUPT;
  if (*out == NULL) *out = json_incref(answer);
  return 0;
}

static unsigned h_alerts(ember__req_t *r) {
  static const char *const allowed[] = {"rule", "state", "worker", NULL};
  if (r->env->alerts == NULL) return no_alerts(r);
  const char *rest = r->rest;
  if (*rest == '\0' || strcmp(rest, "/") == 0) {
    unsigned st = ember__req_check_params(r, allowed);
    if (st != 0) return st;
    const char *state = ember__req_param(r, "state");
    if (state != NULL && strcmp(state, "pending") != 0 && strcmp(state, "firing") != 0 &&
        strcmp(state, "resolved") != 0)
      return ember__req_fail(
          r, 400, "parameter \"state\": \"%.32s\" is not pending, firing or resolved", state);
    json_t *doc = ember__alerts_list(r->env->alerts, ember__req_param(r, "rule"), state,
                                     ember__req_param(r, "worker"));
    if (doc == NULL) return ember__req_fail_internal(r, "listing the alerts", -ENOMEM);
    int frc = ember__req_fleet(r) ? fleet_alerts(r, doc) : 0;
    if (frc != 0) {
      json_decref(doc);
      return ember__req_fail_internal(r, "listing the fleet's alerts", frc);
    }
    st = ember__req_answer_json(r, doc);
    json_decref(doc);
    return st;
  }
  const char *id = rest + 1;
  size_t n = strlen(id);
  bool ok = n == 16;
  for (size_t i = 0; i < n && ok; i++)
    ok = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
  if (!ok) return ember__req_fail(r, 404, "no alert %.32s: alert ids are 16 hex digits", id);
  json_t *doc = NULL;
  int rc = ember__alerts_get(r->env->alerts, id, &doc);
  if (rc == EMBER_ENOTFOUND && ember__req_fleet(r)) {
    /* Another collector's engine may hold it. */
    char q[96], partial[sizeof r->partial];
    snprintf(q, sizeof q, "/api/v1/alerts/%s?local=1", id);
    rc = ember__fleetq_json(r->env->fleetq, q, take_peer_alert, &doc, partial, sizeof partial);
    if (rc == 0) ember__req_partial(r, partial);
    rc = rc != 0 ? rc : doc != NULL ? 0 : EMBER_ENOTFOUND;
  }
  if (rc == EMBER_ENOTFOUND)
    return ember__req_fail(r, 404, "no alert %s (resolved alerts are kept for alerts.keep)", id);
  if (rc != 0) return ember__req_fail_internal(r, "reading the alert", rc);
  unsigned st = ember__req_answer_json(r, doc);
  json_decref(doc);
  return st;
}

static const char *rules_allow(const char *rest) {
  return *rest == '\0' || strcmp(rest, "/") == 0 ? "GET, HEAD, POST" : "DELETE";
}

const ember__api_route_t ember__api_alert_routes[] = {
    {"/api/v1/rules", EMBER__ROUTE_SUBTREE | EMBER__ROUTE_METHODS, h_rules, rules_allow},
    {"/api/v1/alerts", EMBER__ROUTE_SUBTREE, h_alerts, NULL},
    {NULL, 0, NULL, NULL},
};
