/* The alert engine (alerts.h). */
#include "alerts.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "alert_diff.h"
#include "alert_eval.h"
#include "alert_state.h"
#include "ember/ember.h"
#include "ember/log.h"
#include "htab.h"
#include "json.h"
#include "query.h"

#define LOG "alerts"
#define SEC 1000000000LL
#define MS  1000000LL

/* What changed: the spike against this long before it (not baseline
 * rules, which use their period). */
#define DIFF_BASE_NS (600 * SEC)
#define DIFF_TOP     10
#define RETAIN_EVERY (3600 * SEC)
/* A capture the sessions module does not know and whose results never
 * came: expired this long after its end. */
#define CAPTURE_GRACE_NS (60 * SEC)

enum { SRC_FILE, SRC_API, SRC_DEFAULT };
static const char *const src_names[] = {"file", "api", "default"};

typedef struct arule {
  ember__alert_rule_t *r;
  int source;
  size_t *slots; /* indexes into a->slots */
  size_t nslots, cslots;
  int64_t last_capture_ns; /* INT64_MIN: none */
  int64_t captures[64];    /* ring of capture times (max_per_hour <= 3600: the cap counts
                              the last 64, enough for the cap's purpose) */
  size_t ncaptures;
} arule_t;

/* One alert: its document's fields. */
typedef struct alert {
  char id[EMBER__ALERT_ID_LEN + 1];
  char *rule, *group;
  ember__alert_kind_t kind;
  json_t *labels; /* object */
  ember__alert_state_t st;
  json_t *top; /* array, or NULL before firing */
  char *capture_session;
  char capture_state[32]; /* last known; "" = none asked */
  char *capture_error;    /* why no capture started */
  bool settled_firing;    /* its firing notification was delivered (or given up) */
  bool settled_resolved;
  int64_t sent_ns; /* last firing notification or re-send (memory only) */
  bool dirty;      /* to store again */
  bool gone;       /* dropped (a pending alert that did not fire) */
} alert_t;

/* One (rule, group): the state machine and its current alert. */
typedef struct slot {
  char *rule, *group;
  uint64_t hash;
  ember__alert_state_t st;
  alert_t *cur;
  uint64_t seen; /* the round that saw the group */
  bool dead;     /* its rule is gone */
} slot_t;

struct ember__alerts {
  ember__alerts_opts_t o;
  ember__notify_t *notify; /* NULL until started, or none */
  char *rules_file, *webhook;
  pthread_mutex_t mu;
  /* Held across an API rule change and its sharing with the fleet (which
   * waits on Kafka), and by ember__alerts_rule_sync: one change at a time,
   * without holding `mu` (rounds) while Kafka answers. Taken before mu. */
  pthread_mutex_t api_mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool started, stop;

  arule_t *rules;
  size_t nrules, crules;
  slot_t *slots;
  size_t nslots, cslots;
  ember__htab_t index;
  alert_t **alerts; /* oldest first */
  size_t nalerts, calerts;

  ember__ahist_t *hist;
  uint64_t round;
  int64_t last_end, last_retain;

  struct {
    ember_metric_t *rounds, *round_s, *errors, *pending, *firing, *resolved, *captures,
        *captures_skipped, *rules, *active;
  } m;
};

/* ---- small helpers -------------------------------------------------- */

static uint64_t rnd64(void *ctx) {
  (void)ctx;
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v)
    v = (uint64_t)ember_time_now_ns();
  return v;
}

static json_t *ms_or_null(int64_t ns) {
  return ns == EMBER__ALERT_NONE ? json_null() : json_integer(ns / MS);
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static const char *kind_name(ember__alert_kind_t k) {
  switch (k) {
  case EMBER__ALERT_ABOVE: return "above";
  case EMBER__ALERT_BASELINE: return "baseline";
  case EMBER__ALERT_FUNCTION: return "function";
  }
  return "above";
}

static int kind_parse(const char *s, ember__alert_kind_t *out) {
  for (int k = EMBER__ALERT_ABOVE; k <= EMBER__ALERT_FUNCTION; k++) {
    if (s != NULL && strcmp(s, kind_name((ember__alert_kind_t)k)) == 0) {
      *out = (ember__alert_kind_t)k;
      return 0;
    }
  }
  return -EINVAL;
}

static uint64_t slot_hash(const char *rule, const char *group) {
  return ember__hash_bytes(group, strlen(group), ember__hash_bytes(rule, strlen(rule), 7));
}

typedef struct slot_key {
  const ember__alerts_t *a;
  const char *rule, *group;
} slot_key_t;

static bool slot_eq(const void *ctx, uint32_t idx) {
  const slot_key_t *k = ctx;
  const slot_t *s = &k->a->slots[idx];
  return !s->dead && strcmp(s->rule, k->rule) == 0 && strcmp(s->group, k->group) == 0;
}

static uint64_t slot_rehash(const void *ctx, uint32_t idx) {
  const slot_key_t *k = ctx;
  return k->a->slots[idx].hash;
}

static arule_t *rule_find(ember__alerts_t *a, const char *name) {
  for (size_t i = 0; i < a->nrules; i++)
    if (strcmp(a->rules[i].r->name, name) == 0) return &a->rules[i];
  return NULL;
}

static slot_t *slot_find(ember__alerts_t *a, const char *rule, const char *group) {
  slot_key_t k = {a, rule, group};
  int64_t i = ember__htab_find(&a->index, slot_hash(rule, group), slot_eq, &k);
  return i < 0 ? NULL : &a->slots[i];
}

/* The slot of (rule, group), made when new; NULL on ENOMEM. */
static slot_t *slot_get(ember__alerts_t *a, arule_t *ar, const char *group) {
  slot_t *s = slot_find(a, ar->r->name, group);
  if (s != NULL) return s;
  if (a->nslots == a->cslots) {
    size_t cap = a->cslots ? a->cslots * 2 : 64;
    slot_t *v = ember_realloc(a->slots, cap * sizeof *v);
    if (v == NULL) return NULL;
    a->slots = v;
    a->cslots = cap;
  }
  if (ar->nslots == ar->cslots) {
    size_t cap = ar->cslots ? ar->cslots * 2 : 4;
    size_t *v = ember_realloc(ar->slots, cap * sizeof *v);
    if (v == NULL) return NULL;
    ar->slots = v;
    ar->cslots = cap;
  }
  s = &a->slots[a->nslots];
  *s = (slot_t){.rule = ember_strdup(ar->r->name), .group = ember_strdup(group)};
  if (s->rule == NULL || s->group == NULL) {
    ember_free(s->rule);
    ember_free(s->group);
    return NULL;
  }
  s->hash = slot_hash(s->rule, s->group);
  ember__alert_state_init(&s->st);
  slot_key_t k = {a, s->rule, s->group};
  if (ember__htab_insert(&a->index, s->hash, (uint32_t)a->nslots, slot_rehash, &k) != 0) {
    ember_free(s->rule);
    ember_free(s->group);
    return NULL;
  }
  ar->slots[ar->nslots++] = a->nslots;
  a->nslots++;
  return s;
}

/* ---- alert documents ------------------------------------------------ */

static void alert_free(alert_t *al) {
  if (al == NULL) return;
  ember_free(al->rule);
  ember_free(al->group);
  json_decref(al->labels);
  json_decref(al->top);
  ember_free(al->capture_session);
  ember_free(al->capture_error);
  ember_free(al);
}

static alert_t *alert_by_id(ember__alerts_t *a, const char *id) {
  for (size_t i = a->nalerts; i-- > 0;)
    if (strcmp(a->alerts[i]->id, id) == 0) return a->alerts[i];
  return NULL;
}

static int alert_push(ember__alerts_t *a, alert_t *al) {
  if (a->nalerts == a->calerts) {
    size_t cap = a->calerts ? a->calerts * 2 : 64;
    alert_t **v = ember_realloc(a->alerts, cap * sizeof *v);
    if (v == NULL) return -ENOMEM;
    a->alerts = v;
    a->calerts = cap;
  }
  a->alerts[a->nalerts++] = al;
  return 0;
}

static bool sessions_final(const char *st) {
  return strcmp(st, "done") == 0 || strcmp(st, "failed") == 0 || strcmp(st, "expired") == 0 ||
         strcmp(st, "cancelled") == 0;
}

/* The capture's state now: from the sessions module while it knows the
 * session; a restarted collector has forgotten it, and then stored
 * results say it is done (else the last state seen stays). */
static void capture_refresh(ember__alerts_t *a, alert_t *al) {
  if (al->capture_session == NULL || sessions_final(al->capture_state)) return;
  json_t *doc = NULL;
  const char *st = NULL;
  int rc = a->o.sessions
               ? ember__csessions_get(a->o.sessions, al->capture_session, ember_time_now_ns(), &doc)
               : EMBER_ENOTFOUND;
  if (rc == 0) {
    st = json_string_value(json_object_get(doc, "state"));
  } else if (rc == EMBER_ENOTFOUND) {
    ember_profile_t *p = NULL;
    ember_store_session_info_t info = {0};
    if (ember__query_session(a->o.store, al->capture_session, EMBER__Q_SAMPLES, &p, &info) == 0 &&
        info.results > 0) {
      st = "done";
    } else if (al->st.fired_ns != EMBER__ALERT_NONE) {
      /* Its command may have died with the collector that sent it: past
       * its length and the sessions' answer timeout, it is expired. */
      const arule_t *ar = rule_find(a, al->rule);
      int64_t len = ar ? (int64_t)ar->r->capture.duration_ms * MS : 600 * SEC;
      if (ember_time_now_ns() > al->st.fired_ns + len + CAPTURE_GRACE_NS) st = "expired";
    }
    ember_profile_free(p);
  }
  if (st != NULL && strcmp(st, al->capture_state) != 0) {
    snprintf(al->capture_state, sizeof al->capture_state, "%s", st);
    al->dirty = true;
  }
  json_decref(doc);
}

/* The public document. */
static json_t *alert_doc(const alert_t *al) {
  json_t *d = json_object();
  int rc = d ? 0 : -ENOMEM;
  const ember__alert_state_t *st = &al->st;
  const char *state =
      st->phase == EMBER__PHASE_INACTIVE ? "pending" : ember__alert_phase_name(st->phase);
  if (rc == 0) rc = ember__json_set(d, "id", json_string(al->id));
  if (rc == 0) rc = ember__json_set(d, "rule", ember__json_str(al->rule));
  if (rc == 0) rc = ember__json_set(d, "kind", json_string(kind_name(al->kind)));
  if (rc == 0) rc = ember__json_set(d, "state", json_string(state));
  if (rc == 0) rc = ember__json_set(d, "labels", json_deep_copy(al->labels));
  if (rc == 0) rc = ember__json_set(d, "value", real_or_null(st->value));
  if (rc == 0) rc = ember__json_set(d, "threshold", real_or_null(st->threshold));
  if (rc == 0)
    rc = ember__json_set(d, "unit",
                         json_string(al->kind == EMBER__ALERT_FUNCTION ? "percent" : "cores"));
  if (rc == 0) rc = ember__json_set(d, "started", ms_or_null(st->since_ns));
  if (rc == 0)
    rc = ember__json_set(d, "fired",
                         st->phase >= EMBER__PHASE_FIRING ? ms_or_null(st->fired_ns) : json_null());
  if (rc == 0)
    rc = ember__json_set(d, "resolved",
                         st->phase == EMBER__PHASE_RESOLVED ? ms_or_null(st->resolved_ns)
                                                            : json_null());
  if (rc == 0) rc = ember__json_set(d, "updated", ms_or_null(st->updated_ns));
  if (rc == 0) rc = ember__json_set(d, "top", al->top ? json_deep_copy(al->top) : json_array());
  if (rc == 0) {
    json_t *cap = json_null();
    if (al->capture_session != NULL || al->capture_error != NULL) {
      cap = json_object();
      if (cap != NULL) {
        json_object_set_new(cap, "session",
                            al->capture_session ? json_string(al->capture_session) : json_null());
        json_object_set_new(cap, "state",
                            json_string(al->capture_state[0] ? al->capture_state : "not started"));
        if (al->capture_error) json_object_set_new(cap, "error", json_string(al->capture_error));
      }
    }
    rc = ember__json_set(d, "capture", cap);
  }
  if (rc != 0) {
    json_decref(d);
    return NULL;
  }
  return d;
}

/* What the store keeps: the document, the group, the state machine and
 * what was delivered. */
static int alert_store(ember__alerts_t *a, alert_t *al) {
  json_t *doc = alert_doc(al), *rec = json_object();
  int rc = doc && rec ? 0 : -ENOMEM;
  if (rc == 0) rc = ember__json_set(rec, "v", json_integer(1));
  if (rc == 0) rc = ember__json_set(rec, "group", ember__json_str(al->group));
  if (rc == 0) rc = ember__json_set(rec, "alert", json_incref(doc));
  if (rc == 0) rc = ember__json_set(rec, "st", ember__alert_state_to_json(&al->st));
  if (rc == 0) rc = ember__json_set(rec, "settled_firing", json_boolean(al->settled_firing));
  if (rc == 0) rc = ember__json_set(rec, "settled_resolved", json_boolean(al->settled_resolved));
  char *text = rc == 0 ? json_dumps(rec, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
  if (rc == 0 && text == NULL) rc = -ENOMEM;
  if (rc == 0)
    rc = ember_store_doc_put(a->o.store, EMBER_STORE_DOC_ALERTS, al->id, text, strlen(text));
  free(text);
  json_decref(doc);
  json_decref(rec);
  if (rc == 0) {
    al->dirty = false;
  } else {
    al->dirty = true;
    ember_metric_add(a->m.errors, 1);
    EMBER_WARN(LOG, "alert %s: cannot store it (%s); trying again each round", al->id,
               ember_strerror(rc));
  }
  return rc;
}

/* ---- notifications -------------------------------------------------- */

typedef struct sent {
  ember__alerts_t *a;
  char id[EMBER__ALERT_ID_LEN + 1];
  bool resolved;
} sent_t;

static void on_sent(void *ctx, bool delivered) {
  sent_t *s = ctx;
  ember__alerts_t *a = s->a;
  pthread_mutex_lock(&a->mu);
  alert_t *al = alert_by_id(a, s->id);
  if (al != NULL) {
    if (s->resolved) {
      al->settled_resolved = true;
    } else {
      al->settled_firing = true;
    }
    /* Stored now, not at the next round: a restart right after must not
     * notify again. Under the lock, so no older document overwrites a newer
     * one. */
    alert_store(a, al);
  }
  pthread_mutex_unlock(&a->mu);
  if (!delivered)
    EMBER_WARN(LOG, "alert %s: the %s notification was not delivered (see notify's log)", s->id,
               s->resolved ? "resolved" : "firing");
  ember_free(s);
}

/* The rule's webhook, else alerts.webhook, into *t; false when neither is
 * set. `ar` may be NULL (the rule is gone). */
static bool receiver_of(const ember__alerts_t *a, const arule_t *ar, ember__notify_target_t *t) {
  bool own = ar != NULL && ar->r->webhook_url != NULL;
  const char *url = own ? ar->r->webhook_url : a->webhook;
  ember__webhook_format_t f = own ? ar->r->webhook_format : a->o.webhook_format;
  t->url = url;
  t->format = f == EMBER__WEBHOOK_JSON ? EMBER__NOTIFY_JSON : EMBER__NOTIFY_ALERTMANAGER;
  return url != NULL && *url != '\0';
}

static void notify(ember__alerts_t *a, arule_t *ar, alert_t *al, bool resolved, bool kafka) {
  const char *status = resolved ? "resolved" : "firing";
  if (!resolved) al->sent_ns = ember_time_now_ns();
  json_t *doc = alert_doc(al);
  if (doc == NULL) return;
  const char *worker = json_string_value(json_object_get(al->labels, "worker"));
  if (a->notify != NULL && kafka)
    ember__notify_publish(a->notify, worker ? worker : "", status, doc);
  ember__notify_target_t t;
  bool queued = false;
  if (a->notify != NULL && receiver_of(a, ar, &t)) {
    sent_t *s = ember_calloc(1, sizeof *s);
    if (s != NULL) {
      *s = (sent_t){.a = a, .resolved = resolved};
      memcpy(s->id, al->id, sizeof s->id);
      int rc = ember__notify_send(a->notify, &t, status, doc, on_sent, s);
      if (rc == 0) {
        queued = true;
      } else {
        ember_free(s);
        EMBER_WARN(LOG, "alert %s: %s notification not queued: %s", al->id, status,
                   ember_strerror(rc));
      }
    }
  }
  if (!queued) {
    /* Nothing to wait for: no receiver (or it could not be queued). */
    if (resolved) {
      al->settled_resolved = true;
    } else {
      al->settled_firing = true;
    }
  }
  json_decref(doc);
}

/* ---- rules ---------------------------------------------------------- */

static void arule_clear(arule_t *ar) {
  ember__alert_rule_free(ar->r);
  ember_free(ar->slots);
}

static size_t history_steps(const ember__alerts_t *a) {
  size_t keep = 3;
  for (size_t i = 0; i < a->nrules; i++) {
    const ember__alert_rule_t *r = a->rules[i].r;
    if (r->kind != EMBER__ALERT_BASELINE) continue;
    size_t k = (size_t)(r->baseline.period_ns / a->o.interval_ns) + 2;
    if (k > keep) keep = k;
  }
  return keep;
}

static int rule_insert(ember__alerts_t *a, ember__alert_rule_t *r, int source) {
  if (rule_find(a, r->name) != NULL) {
    ember__alert_rule_free(r);
    return -EEXIST;
  }
  if (a->nrules == a->crules) {
    size_t cap = a->crules ? a->crules * 2 : 16;
    arule_t *v = ember_realloc(a->rules, cap * sizeof *v);
    if (v == NULL) {
      ember__alert_rule_free(r);
      return -ENOMEM;
    }
    a->rules = v;
    a->crules = cap;
  }
  a->rules[a->nrules++] = (arule_t){.r = r, .source = source, .last_capture_ns = INT64_MIN};
  ember__ahist_keep(a->hist, history_steps(a));
  ember_metric_set(a->m.rules, (double)a->nrules);
  return 0;
}

/* End what the rule `i` has in progress (resolved now), then drop it. */
static void rule_remove_at(ember__alerts_t *a, size_t i, const char *why) {
  arule_t *ar = &a->rules[i];
  int64_t now = ember_time_now_ns();
  for (size_t k = 0; k < ar->nslots; k++) {
    slot_t *s = &a->slots[ar->slots[k]];
    alert_t *al = s->cur;
    if (al != NULL && !al->gone && s->st.phase == EMBER__PHASE_FIRING) {
      s->st.phase = EMBER__PHASE_RESOLVED;
      s->st.resolved_ns = now;
      al->st = s->st;
      alert_store(a, al);
      notify(a, ar, al, true, true);
      EMBER_INFO(LOG, "alert %s (%s %s) resolved: %s", al->id, ar->r->name, s->group, why);
    } else if (al != NULL && !al->gone && s->st.phase == EMBER__PHASE_PENDING) {
      al->gone = true;
      ember_store_doc_del(a->o.store, EMBER_STORE_DOC_ALERTS, al->id);
    }
    s->dead = true;
    s->cur = NULL;
  }
  arule_clear(ar);
  memmove(&a->rules[i], &a->rules[i + 1], (a->nrules - i - 1) * sizeof *a->rules);
  a->nrules--;
  ember_metric_set(a->m.rules, (double)a->nrules);
}

static int add_default_rule(ember__alerts_t *a, char *err, size_t n) {
  json_t *j = json_pack("{s:s, s:s, s:f, s:s}", "name", "default-cpu", "worker", "*", "above", 0.9,
                        "for", "30s");
  if (j == NULL) return -ENOMEM;
  ember__alert_rule_t *r = NULL;
  int rc = ember__alert_rule_from_json(j, &r, err, n);
  json_decref(j);
  if (rc == 0) rc = rule_insert(a, r, SRC_DEFAULT);
  return rc == -EEXIST ? 0 : rc;
}

typedef struct load_ctx {
  ember__alerts_t *a;
  size_t bad;
} load_ctx_t;

static int load_rule_doc(const char *key, const void *doc, size_t len, void *ctx) {
  load_ctx_t *l = ctx;
  json_error_t jerr;
  json_t *j = json_loadb(doc, len, 0, &jerr);
  char err[256] = "not JSON";
  ember__alert_rule_t *r = NULL;
  int rc = j ? ember__alert_rule_from_json(j, &r, err, sizeof err) : -EINVAL;
  json_decref(j);
  if (rc == 0) rc = rule_insert(l->a, r, SRC_API);
  if (rc == -ENOMEM) return rc;
  if (rc != 0) {
    l->bad++;
    EMBER_WARN(LOG, "stored rule %s skipped: %s", key,
               rc == -EEXIST ? "a file rule has its name" : err);
  }
  return 0;
}

/* ---- loading stored alerts ------------------------------------------ */

static int load_alert_doc(const char *key, const void *doc, size_t len, void *ctx) {
  load_ctx_t *l = ctx;
  ember__alerts_t *a = l->a;
  json_t *rec = json_loadb(doc, len, 0, NULL);
  json_t *d = json_object_get(rec, "alert");
  const char *rule = json_string_value(json_object_get(d, "rule"));
  const char *group = json_string_value(json_object_get(rec, "group"));
  ember__alert_kind_t kind;
  alert_t *al = NULL;
  char err[256] = "";
  int rc =
      rec && rule && group && kind_parse(json_string_value(json_object_get(d, "kind")), &kind) == 0
          ? 0
          : -EINVAL;
  if (rc == 0 && (al = ember_calloc(1, sizeof *al)) == NULL) rc = -ENOMEM;
  if (rc == 0)
    rc = ember__alert_state_from_json(json_object_get(rec, "st"), &al->st, err, sizeof err);
  if (rc == 0) {
    snprintf(al->id, sizeof al->id, "%s", key);
    al->rule = ember_strdup(rule);
    al->group = ember_strdup(group);
    al->kind = kind;
    json_t *labels = json_object_get(d, "labels");
    al->labels = json_is_object(labels) ? json_deep_copy(labels) : json_object();
    json_t *top = json_object_get(d, "top");
    al->top = json_is_array(top) ? json_deep_copy(top) : NULL;
    json_t *cap = json_object_get(d, "capture");
    const char *sid = json_string_value(json_object_get(cap, "session"));
    const char *cst = json_string_value(json_object_get(cap, "state"));
    const char *cerr = json_string_value(json_object_get(cap, "error"));
    if (sid) al->capture_session = ember_strdup(sid);
    if (cst) snprintf(al->capture_state, sizeof al->capture_state, "%s", cst);
    if (cerr) al->capture_error = ember_strdup(cerr);
    al->settled_firing = json_is_true(json_object_get(rec, "settled_firing"));
    al->settled_resolved = json_is_true(json_object_get(rec, "settled_resolved"));
    /* Re-sends to Alertmanager resume a full interval after a restart. */
    al->sent_ns = ember_time_now_ns();
    if (al->rule == NULL || al->group == NULL || al->labels == NULL) rc = -ENOMEM;
  }
  json_decref(rec);
  if (rc == 0) rc = alert_push(a, al);
  if (rc != 0) {
    alert_free(al);
    if (rc == -ENOMEM) return rc;
    l->bad++;
    EMBER_WARN(LOG, "stored alert %s skipped: %s", key, err[0] ? err : "not an alert document");
    return 0;
  }
  /* An alert in progress takes up its (rule, group) again. */
  arule_t *ar = rule_find(a, al->rule);
  if (ar != NULL && (al->st.phase == EMBER__PHASE_PENDING || al->st.phase == EMBER__PHASE_FIRING)) {
    slot_t *s = slot_get(a, ar, al->group);
    if (s == NULL) return -ENOMEM;
    if (s->cur == NULL || s->cur->st.since_ns < al->st.since_ns) {
      s->cur = al;
      s->st = al->st;
    }
  }
  return 0;
}

static int by_start(const void *x, const void *y) {
  const alert_t *p = *(alert_t *const *)x, *q = *(alert_t *const *)y;
  return (p->st.since_ns > q->st.since_ns) - (p->st.since_ns < q->st.since_ns);
}

/* ---- one round ------------------------------------------------------ */

typedef struct round_ctx {
  ember__alerts_t *a;
  arule_t *ar;
} round_ctx_t;

static int64_t spike_start(void *ctx, const char *group) {
  round_ctx_t *rc = ctx;
  slot_t *s = slot_find(rc->a, rc->ar->r->name, group);
  if (s != NULL && (s->st.phase == EMBER__PHASE_PENDING || s->st.phase == EMBER__PHASE_FIRING))
    return s->st.since_ns;
  return INT64_MAX;
}

static json_t *group_labels(const ember__alert_rule_t *r, const ember__agroup_t *g) {
  json_t *l = json_object();
  if (l == NULL) return NULL;
  ember_store_selector_t sel = ember__agroup_selector(r, g);
  if (sel.worker) json_object_set_new(l, "worker", json_string(sel.worker));
  if (sel.version) json_object_set_new(l, "version", json_string(sel.version));
  if (sel.host) json_object_set_new(l, "host", json_string(sel.host));
  if (sel.actor) json_object_set_new(l, "actor", json_string(sel.actor));
  return l;
}

/* What changed, computed once when the alert fires. */
static void compute_top(ember__alerts_t *a, arule_t *ar, alert_t *al, const ember__agroup_t *g,
                        int64_t end) {
  ember_store_selector_t sel = ember__agroup_selector(ar->r, g);
  int64_t since = al->st.since_ns;
  int64_t base_ns = ar->r->kind == EMBER__ALERT_BASELINE ? ar->r->baseline.period_ns : DIFF_BASE_NS;
  ember_profile_t *base = NULL, *spike = NULL;
  int rc = ember__query_profile(a->o.store, &sel, since - base_ns, since, EMBER__Q_CPU, &base);
  if (rc == 0) rc = ember__query_profile(a->o.store, &sel, since, end, EMBER__Q_CPU, &spike);
  ember__rise_t *r = NULL;
  size_t n = 0;
  if (rc == 0) rc = ember__rise(base, spike, DIFF_TOP, &r, &n);
  if (rc == 0) {
    json_decref(al->top);
    al->top = ember__rise_json(r, n);
  } else {
    ember_metric_add(a->m.errors, 1);
    EMBER_WARN(LOG, "alert %s: cannot compute what changed: %s", al->id, ember_strerror(rc));
  }
  ember__rise_free(r, n);
  ember_profile_free(base);
  ember_profile_free(spike);
}

static void start_capture(ember__alerts_t *a, arule_t *ar, alert_t *al, const ember__agroup_t *g,
                          int64_t now) {
  const ember__alert_rule_t *r = ar->r;
  if (!r->has_capture) return;
  const char *skip = NULL;
  size_t in_hour = 0;
  for (size_t i = 0; i < ar->ncaptures && i < 64; i++)
    if (ar->captures[i] > now - 3600 * SEC) in_hour++;
  if (a->o.sessions == NULL) {
    skip = "this collector has no sessions";
  } else if (ar->last_capture_ns != INT64_MIN &&
             now - ar->last_capture_ns < r->capture.cooldown_ns) {
    skip = "the rule's capture cooldown has not passed";
  } else if (in_hour >= r->capture.max_per_hour) {
    skip = "the rule's captures per hour are used up";
  }
  char err[256] = "";
  if (skip == NULL) {
    ember_store_selector_t sel = ember__agroup_selector(r, g);
    ember__csession_req_t req = {.worker = sel.worker,
                                 .version = sel.version,
                                 .actor = sel.actor,
                                 .host = sel.host,
                                 .instances = r->capture.instances,
                                 .type = r->capture.type,
                                 .duration_ms = r->capture.duration_ms,
                                 .hz = r->capture.hz};
    /* One hot isolate: the host that used the most CPU in the spike. */
    if (req.host == NULL && r->capture.instances == 1) req.host = g->hottest_host;
    json_t *doc = NULL;
    int rc = ember__csessions_create(a->o.sessions, &req, now, &doc, err, sizeof err);
    const char *sid = json_string_value(json_object_get(doc, "id"));
    if (rc == 0 && sid != NULL) {
      al->capture_session = ember_strdup(sid);
      const char *st = json_string_value(json_object_get(doc, "state"));
      snprintf(al->capture_state, sizeof al->capture_state, "%s", st ? st : "pending");
      ar->last_capture_ns = now;
      ar->captures[ar->ncaptures++ % 64] = now;
      ember_metric_add(a->m.captures, 1);
      EMBER_INFO(LOG, "alert %s: capture session %s started (%s, %u ms at %u Hz)", al->id, sid,
                 r->capture.type == EMBER_SESSION_MEMORY ? "alloc" : "cpu", req.duration_ms,
                 req.hz);
    } else {
      skip = err[0] ? err : "the session could not start";
    }
    json_decref(doc);
  }
  if (skip != NULL) {
    ember_free(al->capture_error);
    al->capture_error = ember_strdup(skip);
    ember_metric_add(a->m.captures_skipped, 1);
    EMBER_INFO(LOG, "alert %s: no capture: %s", al->id, skip);
  }
}

static alert_t *alert_new(ember__alerts_t *a, arule_t *ar, slot_t *s, const ember__agroup_t *g) {
  alert_t *al = ember_calloc(1, sizeof *al);
  if (al == NULL) return NULL;
  memcpy(al->id, s->st.id, sizeof al->id);
  al->rule = ember_strdup(ar->r->name);
  al->group = ember_strdup(s->group);
  al->kind = ar->r->kind;
  al->labels = g ? group_labels(ar->r, g) : json_object();
  al->st = s->st;
  if (al->rule == NULL || al->group == NULL || al->labels == NULL || alert_push(a, al) != 0) {
    alert_free(al);
    return NULL;
  }
  return al;
}

/* A group key for people: "w" or "w / h1" (the key's separator is 0x1f). */
static const char *group_text(const char *key, char *buf, size_t n) {
  const char *sep = strchr(key, '\x1f');
  if (sep == NULL) return key;
  snprintf(buf, n, "%.*s / %s", (int)(sep - key), key, sep + 1);
  return buf;
}

static void on_transition(ember__alerts_t *a, arule_t *ar, slot_t *s, ember__alert_phase_t before,
                          ember__alert_transition_t t, const ember__agroup_t *g, int64_t end) {
  alert_t *al = s->cur;
  if (t == EMBER__TRANSITION_NONE) {
    if (before == EMBER__PHASE_PENDING && s->st.phase == EMBER__PHASE_INACTIVE && al != NULL) {
      /* A pending alert that did not last: gone without a word. */
      al->gone = true;
      ember_store_doc_del(a->o.store, EMBER_STORE_DOC_ALERTS, al->id);
      s->cur = NULL;
    } else if (al != NULL && !al->gone) {
      al->st = s->st;
    }
    return;
  }
  int64_t now = ember_time_now_ns();
  if (t == EMBER__TRANSITION_PENDING || al == NULL || strcmp(al->id, s->st.id) != 0) {
    al = alert_new(a, ar, s, g);
    s->cur = al;
    if (al == NULL) {
      ember_metric_add(a->m.errors, 1);
      return;
    }
  }
  al->st = s->st;
  char gbuf[600];
  const char *gt = group_text(s->group, gbuf, sizeof gbuf);
  char value[64];
  snprintf(value, sizeof value, "%.3g%s (threshold %.3g)", s->st.value,
           ar->r->kind == EMBER__ALERT_FUNCTION ? "%" : " cores", s->st.threshold);
  switch (t) {
  case EMBER__TRANSITION_PENDING:
    ember_metric_add(a->m.pending, 1);
    EMBER_INFO(LOG, "alert %s pending: rule %s, %s at %s", al->id, ar->r->name, gt, value);
    alert_store(a, al);
    break;
  case EMBER__TRANSITION_FIRING:
    ember_metric_add(a->m.firing, 1);
    if (g != NULL) {
      compute_top(a, ar, al, g, end);
      start_capture(a, ar, al, g, now);
    }
    EMBER_WARN(LOG, "alert %s FIRING: rule %s, %s at %s%s%s", al->id, ar->r->name, gt, value,
               al->top && json_array_size(al->top) ? "; rose most: " : "",
               al->top && json_array_size(al->top)
                   ? json_string_value(json_object_get(json_array_get(al->top, 0), "function"))
                   : "");
    /* Stored before it is told: a restart never notifies it twice. */
    alert_store(a, al);
    notify(a, ar, al, false, true);
    break;
  case EMBER__TRANSITION_RESOLVED:
    ember_metric_add(a->m.resolved, 1);
    EMBER_INFO(LOG, "alert %s resolved: rule %s, %s at %s", al->id, ar->r->name, gt, value);
    alert_store(a, al);
    notify(a, ar, al, true, true);
    break;
  case EMBER__TRANSITION_NONE: break;
  }
}

static void step(ember__alerts_t *a, arule_t *ar, slot_t *s, const ember__agroup_t *g, int64_t end,
                 double value, double threshold) {
  ember__alert_timing_t tm = {.for_ns = ar->r->for_ns,
                              .resolve_for_ns = ar->r->resolve_for_ns,
                              .hysteresis = ar->r->hysteresis};
  ember__alert_input_t in = {
      .start_ns = end - a->o.interval_ns, .end_ns = end, .value = value, .threshold = threshold};
  ember__alert_phase_t before = s->st.phase;
  ember__alert_transition_t t =
      ember__alert_state_step(&s->st, &tm, &in, s->rule, s->group, rnd64, NULL);
  on_transition(a, ar, s, before, t, g, end);
}

static int eval_rule(ember__alerts_t *a, arule_t *ar, int64_t end) {
  round_ctx_t rc = {a, ar};
  ember__agroup_t *g = NULL;
  size_t n = 0;
  int err = ember__ahist_groups(a->hist, ar->r, spike_start, &rc, &g, &n);
  if (err != 0) return err;
  for (size_t i = 0; i < n; i++) {
    double value = g[i].cores, thr = (double)NAN;
    switch (ar->r->kind) {
    case EMBER__ALERT_ABOVE: thr = ar->r->above; break;
    case EMBER__ALERT_BASELINE: {
      double b = g[i].baseline * ar->r->baseline.factor;
      thr = isnan(b) ? (double)NAN : (b > ar->r->baseline.floor ? b : ar->r->baseline.floor);
      break;
    }
    case EMBER__ALERT_FUNCTION:
      thr = ar->r->function.percent;
      value = 0;
      if (g[i].cores > 0) {
        int e = ember__agroup_function_share(a->o.store, ar->r, &g[i], end - a->o.interval_ns, end,
                                             &value);
        if (e != 0) {
          ember_metric_add(a->m.errors, 1);
          continue;
        }
      }
      break;
    }
    slot_t *s = slot_get(a, ar, g[i].key);
    if (s == NULL) {
      ember__agroups_free(g, n);
      return -ENOMEM;
    }
    s->seen = a->round;
    step(a, ar, s, &g[i], end, value, thr);
  }
  ember__agroups_free(g, n);
  /* Groups in progress that had no data this round: value 0. */
  for (size_t k = 0; k < ar->nslots; k++) {
    slot_t *s = &a->slots[ar->slots[k]];
    if (s->dead || s->seen == a->round) continue;
    if (s->st.phase != EMBER__PHASE_PENDING && s->st.phase != EMBER__PHASE_FIRING) continue;
    step(a, ar, s, NULL, end, 0, s->st.threshold);
  }
  return 0;
}

/* Alertmanager resolves an alert it has not heard of for its
 * resolve_timeout (5 min by default) and expects firing alerts to be sent
 * again meanwhile, as Prometheus does: every alerts.webhook_resend to Alertmanager
 * receivers, once the first notification was delivered. Not to plain JSON
 * receivers or Kafka, which get transitions only. */
static void resend(ember__alerts_t *a, alert_t *al, int64_t now) {
  if (a->notify == NULL || al->st.phase != EMBER__PHASE_FIRING || !al->settled_firing ||
      now - al->sent_ns < a->o.resend_ns)
    return;
  arule_t *ar = rule_find(a, al->rule);
  ember__notify_target_t t;
  al->sent_ns = now;
  if (!receiver_of(a, ar, &t) || t.format != EMBER__NOTIFY_ALERTMANAGER) return;
  json_t *doc = alert_doc(al);
  if (doc != NULL) ember__notify_send(a->notify, &t, "firing", doc, NULL, NULL);
  json_decref(doc);
}

static void store_dirty(ember__alerts_t *a) {
  int64_t now = ember_time_now_ns();
  for (size_t i = 0; i < a->nalerts; i++) {
    alert_t *al = a->alerts[i];
    if (al->gone) continue;
    capture_refresh(a, al);
    if (al->dirty) alert_store(a, al);
    resend(a, al, now);
  }
}

typedef struct retain_ctx {
  int64_t cutoff_ms;
} retain_ctx_t;

static bool expired(const char *key, const void *doc, size_t len, void *ctx) {
  (void)key;
  const retain_ctx_t *r = ctx;
  json_t *rec = json_loadb(doc, len, 0, NULL);
  json_t *d = json_object_get(rec, "alert");
  const char *st = json_string_value(json_object_get(d, "state"));
  json_t *res = json_object_get(d, "resolved");
  bool old = st != NULL && strcmp(st, "resolved") == 0 && json_is_integer(res) &&
             json_integer_value(res) < r->cutoff_ms;
  json_decref(rec);
  return old;
}

/* Forget resolved alerts past alerts.keep, in the store and in memory, and
 * what goes past history_max in memory. */
static void retain(ember__alerts_t *a, int64_t now) {
  retain_ctx_t rc = {(now - a->o.keep_ns) / MS};
  uint64_t deleted = 0;
  int err = ember_store_doc_retain(a->o.store, EMBER_STORE_DOC_ALERTS, expired, &rc, 0, &deleted);
  if (err != 0) EMBER_WARN(LOG, "alert retention: %s", ember_strerror(err));
  size_t over = a->nalerts > a->o.history_max ? a->nalerts - a->o.history_max : 0;
  size_t k = 0;
  for (size_t i = 0; i < a->nalerts; i++) {
    alert_t *al = a->alerts[i];
    bool in_use = false;
    for (size_t j = 0; j < a->nslots && !in_use; j++) in_use = a->slots[j].cur == al;
    bool old = al->st.phase == EMBER__PHASE_RESOLVED && al->st.resolved_ns < now - a->o.keep_ns;
    if (!in_use && (al->gone || old || (over > 0 && al->st.phase == EMBER__PHASE_RESOLVED))) {
      if (!al->gone && !old) over--;
      alert_free(al);
      continue;
    }
    a->alerts[k++] = al;
  }
  a->nalerts = k;
  if (deleted > 0)
    EMBER_INFO(LOG, "%" PRIu64 " resolved alerts older than alerts.keep deleted", deleted);
}

static void update_gauges(ember__alerts_t *a) {
  size_t active = 0;
  for (size_t i = 0; i < a->nslots; i++)
    if (!a->slots[i].dead && a->slots[i].st.phase == EMBER__PHASE_FIRING) active++;
  ember_metric_set(a->m.active, (double)active);
}

int ember__alerts_round(ember__alerts_t *a, int64_t end_ns) {
  if (a == NULL || end_ns % a->o.interval_ns != 0) return -EINVAL;
  int64_t t0 = ember_time_mono_ns();
  pthread_mutex_lock(&a->mu);
  int rc = ember__ahist_update(a->hist, a->o.store, end_ns);
  if (rc == 0) {
    a->round++;
    for (size_t i = 0; i < a->nrules && rc != -ENOMEM; i++) {
      int e = eval_rule(a, &a->rules[i], end_ns);
      if (e != 0) {
        ember_metric_add(a->m.errors, 1);
        EMBER_WARN(LOG, "rule %s: %s", a->rules[i].r->name, ember_strerror(e));
        if (e == -ENOMEM) rc = e;
      }
    }
    a->last_end = end_ns;
  } else {
    ember_metric_add(a->m.errors, 1);
    EMBER_WARN(LOG, "round for %lld: cannot read the store: %s", (long long)(end_ns / MS),
               ember_strerror(rc));
  }
  store_dirty(a);
  update_gauges(a);
  pthread_mutex_unlock(&a->mu);
  ember_metric_add(a->m.rounds, 1);
  ember_metric_add(a->m.round_s, (double)(ember_time_mono_ns() - t0) / 1e9);
  return rc;
}

/* ---- the thread ----------------------------------------------------- */

static void *engine_main(void *arg) {
  ember__alerts_t *a = arg;
  pthread_mutex_lock(&a->mu);
  while (!a->stop) {
    int64_t now = ember_time_now_ns();
    int64_t end = (now - a->o.delay_ns) / a->o.interval_ns * a->o.interval_ns;
    if (end > a->last_end) {
      pthread_mutex_unlock(&a->mu); /* the round takes it */
      ember__alerts_round(a, end);
      pthread_mutex_lock(&a->mu);
      continue;
    }
    if (now - a->last_retain >= RETAIN_EVERY) {
      retain(a, now);
      a->last_retain = now;
      continue;
    }
    /* Until the next step is due, or a second (settled notifications and
     * capture states are stored within it). */
    int64_t next = end + a->o.interval_ns + a->o.delay_ns;
    if (next > now + SEC) next = now + SEC;
    struct timespec ts = {.tv_sec = (time_t)(next / SEC), .tv_nsec = (long)(next % SEC)};
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    if (!a->stop) store_dirty(a);
  }
  pthread_mutex_unlock(&a->mu);
  return NULL;
}

int ember__alerts_start(ember__alerts_t *a, ember__notify_t *n) {
  if (a == NULL || a->started) return -EINVAL;
  pthread_mutex_lock(&a->mu);
  a->notify = n;
  /* Notifications a restart interrupted go out again; the rest never. */
  size_t again = 0;
  for (size_t i = 0; i < a->nalerts; i++) {
    alert_t *al = a->alerts[i];
    arule_t *ar = rule_find(a, al->rule);
    if (al->st.phase == EMBER__PHASE_FIRING && !al->settled_firing) {
      notify(a, ar, al, false, false);
      again++;
    } else if (al->st.phase == EMBER__PHASE_RESOLVED && !al->settled_resolved) {
      notify(a, ar, al, true, false);
      again++;
    }
  }
  pthread_mutex_unlock(&a->mu);
  if (again > 0) EMBER_INFO(LOG, "%zu notifications a restart interrupted sent again", again);
  int rc = pthread_create(&a->thread, NULL, engine_main, a);
  if (rc != 0) return -rc;
  a->started = true;
  return 0;
}

void ember__alerts_stop(ember__alerts_t *a) {
  if (a == NULL || !a->started) return;
  pthread_mutex_lock(&a->mu);
  a->stop = true;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  pthread_join(a->thread, NULL);
  a->started = false;
}

/* ---- metrics -------------------------------------------------------- */

static int render_firing(void *ctx, ember_buf_t *out) {
  ember__alerts_t *a = ctx;
  int rc = 0;
  pthread_mutex_lock(&a->mu);
  for (size_t i = 0; i < a->nrules && rc == 0; i++) {
    size_t n = 0;
    const arule_t *ar = &a->rules[i];
    for (size_t k = 0; k < ar->nslots; k++)
      if (a->slots[ar->slots[k]].st.phase == EMBER__PHASE_FIRING) n++;
    /* Rule names are [A-Za-z0-9_.-]: nothing to escape. */
    rc = ember_buf_printf(out, "ember_alerts_firing{rule=\"%s\"} %zu\n", ar->r->name, n);
  }
  pthread_mutex_unlock(&a->mu);
  return rc;
}

static void register_metrics(ember__alerts_t *a) {
  ember_metrics_t *m = a->o.metrics;
  if (m == NULL) return;
  ember_metrics_family(m, "ember_alerts_firing", "Alerts firing now, by rule", false, render_firing,
                       a);
  a->m.active = ember_metrics_gauge(m, "ember_alerts_active", "Alerts firing now, all rules");
  a->m.rules = ember_metrics_gauge(m, "ember_alerts_rules", "Alert rules in force");
  a->m.rounds = ember_metrics_counter(m, "ember_alerts_rounds_total", "Evaluation rounds run");
  a->m.round_s = ember_metrics_counter(m, "ember_alerts_round_seconds_total",
                                       "Time spent in evaluation rounds");
  a->m.errors = ember_metrics_counter(m, "ember_alerts_errors_total",
                                      "Evaluation, diff and store errors (each one logged)");
  a->m.pending = ember_metrics_counter(m, "ember_alerts_transitions_total{to=\"pending\"}",
                                       "Alert state transitions");
  a->m.firing = ember_metrics_counter(m, "ember_alerts_transitions_total{to=\"firing\"}",
                                      "Alert state transitions");
  a->m.resolved = ember_metrics_counter(m, "ember_alerts_transitions_total{to=\"resolved\"}",
                                        "Alert state transitions");
  a->m.captures = ember_metrics_counter(m, "ember_alerts_captures_total",
                                        "Capture sessions started by firing alerts");
  a->m.captures_skipped =
      ember_metrics_counter(m, "ember_alerts_captures_skipped_total",
                            "Captures not started (cooldown, cap per hour, no isolate)");
}

/* ---- lifecycle ------------------------------------------------------ */

int ember__alerts_read_config(const ember_config_t *cfg, ember__alerts_opts_t *o,
                              ember__notify_opts_t *no, char *err, size_t n) {
  int64_t timeout, retry_max, give_up;
  uint64_t queue;
  int rc = ember_config_get_duration_ns(cfg, "alerts.interval", 10 * SEC, SEC / 10, 3600 * SEC,
                                        &o->interval_ns, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "alerts.eval_delay", 3 * SEC, 0, 600 * SEC, &o->delay_ns,
                                      err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "alerts.keep", 7 * 86400 * SEC, 3600 * SEC,
                                      366 * 86400 * SEC, &o->keep_ns, err, n);
  if (rc == 0)
    rc = ember_config_get_bool(cfg, "alerts.default_rule", false, &o->default_rule, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "alerts.webhook_timeout", 5 * SEC, 100 * MS, 600 * SEC,
                                      &timeout, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "alerts.webhook_retry_max", 60 * SEC, 100 * MS,
                                      3600 * SEC, &retry_max, err, n);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "alerts.webhook_give_up", 3600 * SEC, SEC,
                                      7 * 86400 * SEC, &give_up, err, n);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "alerts.webhook_queue", 1000, 1, 1000000, &queue, err, n);
  if (rc != 0) return rc;
  o->rules_file = ember_config_get(cfg, "alerts.rules");
  o->webhook = ember_config_get(cfg, "alerts.webhook");
  const char *fmt = ember_config_get_str(cfg, "alerts.webhook_format", "alertmanager");
  if (strcmp(fmt, "alertmanager") == 0) {
    o->webhook_format = EMBER__WEBHOOK_ALERTMANAGER;
  } else if (strcmp(fmt, "json") == 0) {
    o->webhook_format = EMBER__WEBHOOK_JSON;
  } else {
    snprintf(err, n, "alerts.webhook_format: \"%.64s\" is not alertmanager or json", fmt);
    return EMBER_ECONFIG;
  }
  if (o->webhook != NULL && *o->webhook != '\0' && strncmp(o->webhook, "http://", 7) != 0 &&
      strncmp(o->webhook, "https://", 8) != 0) {
    snprintf(err, n, "alerts.webhook: \"%.64s\" is not an http:// or https:// URL", o->webhook);
    return EMBER_ECONFIG;
  }
  if (no != NULL) {
    no->timeout_ms = (uint32_t)(timeout / MS);
    no->retry_max_ms = (uint32_t)(retry_max / MS);
    no->give_up_ms = (uint32_t)(give_up / MS);
    no->queue_max = (size_t)queue;
  }
  return 0;
}

static int load_file(const char *path, ember__alert_rules_t **out, char *err, size_t n) {
  int rc = ember__alert_rules_load(path, out, err, n);
  if (rc < 0 && rc != -EINVAL && rc != -ENOMEM && err[0] == '\0')
    snprintf(err, n, "alerts.rules %s: %s", path, ember_strerror(rc));
  return rc;
}

int ember__alerts_new(const ember__alerts_opts_t *opts, ember__alerts_t **out, char *errbuf,
                      size_t errbuf_size) {
  if (opts == NULL || opts->store == NULL || out == NULL) return -EINVAL;
  ember__alerts_t *a = ember_calloc(1, sizeof *a);
  if (a == NULL) return -ENOMEM;
  a->o = *opts;
  if (a->o.interval_ns <= 0) a->o.interval_ns = 10 * SEC;
  if (a->o.delay_ns <= 0) a->o.delay_ns = 3 * SEC;
  if (a->o.keep_ns <= 0) a->o.keep_ns = 7 * 86400 * SEC;
  if (a->o.history_max == 0) a->o.history_max = 10000;
  if (a->o.resend_ns <= 0) a->o.resend_ns = 120 * SEC;
  a->last_end = INT64_MIN;
  a->last_retain = INT64_MIN / 2;
  pthread_mutex_init(&a->mu, NULL);
  pthread_mutex_init(&a->api_mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_cond_init(&a->cv, &ca);
  pthread_condattr_destroy(&ca);
  ember__htab_init(&a->index);
  int rc = ember__ahist_new(a->o.interval_ns, 3, &a->hist);
  if (rc == 0 && opts->rules_file != NULL && *opts->rules_file != '\0' &&
      (a->rules_file = ember_strdup(opts->rules_file)) == NULL)
    rc = -ENOMEM;
  if (rc == 0 && opts->webhook != NULL && *opts->webhook != '\0' &&
      (a->webhook = ember_strdup(opts->webhook)) == NULL)
    rc = -ENOMEM;
  a->o.rules_file = a->rules_file;
  a->o.webhook = a->webhook;
  if (rc == 0) register_metrics(a);
  /* File rules first: they win a name clash with a stored API rule. */
  if (rc == 0 && a->rules_file != NULL) {
    ember__alert_rules_t *set = NULL;
    rc = load_file(a->rules_file, &set, errbuf, errbuf_size);
    for (size_t i = 0; rc == 0 && i < ember__alert_rules_count(set); i++) {
      ember__alert_rule_t *r = ember__alert_rule_dup(ember__alert_rules_at(set, i));
      rc = r ? rule_insert(a, r, SRC_FILE) : -ENOMEM;
    }
    ember__alert_rules_free(set);
    if (rc == 0) EMBER_INFO(LOG, "%zu rules from %s", a->nrules, a->rules_file);
  }
  load_ctx_t l = {a, 0};
  if (rc == 0) rc = ember_store_doc_each(a->o.store, EMBER_STORE_DOC_RULES, load_rule_doc, &l);
  if (rc == 0 && a->o.default_rule) rc = add_default_rule(a, errbuf, errbuf_size);
  if (rc == 0) rc = ember_store_doc_each(a->o.store, EMBER_STORE_DOC_ALERTS, load_alert_doc, &l);
  if (rc == 0 && a->nalerts > 1) qsort(a->alerts, a->nalerts, sizeof *a->alerts, by_start);
  if (rc != 0) {
    if (errbuf_size > 0 && errbuf[0] == '\0')
      snprintf(errbuf, errbuf_size, "cannot load the alert rules and alerts: %s",
               ember_strerror(rc));
    ember__alerts_free(a);
    return rc;
  }
  update_gauges(a);
  EMBER_INFO(LOG, "%zu rules, %zu stored alerts%s", a->nrules, a->nalerts,
             l.bad ? "; some stored documents skipped (logged)" : "");
  *out = a;
  return 0;
}

void ember__alerts_free(ember__alerts_t *a) {
  if (a == NULL) return;
  ember__alerts_stop(a);
  for (size_t i = 0; i < a->nrules; i++) arule_clear(&a->rules[i]);
  ember_free(a->rules);
  for (size_t i = 0; i < a->nslots; i++) {
    ember_free(a->slots[i].rule);
    ember_free(a->slots[i].group);
  }
  ember_free(a->slots);
  ember__htab_free(&a->index);
  for (size_t i = 0; i < a->nalerts; i++) alert_free(a->alerts[i]);
  ember_free(a->alerts);
  ember__ahist_free(a->hist);
  ember_free(a->rules_file);
  ember_free(a->webhook);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->mu);
  pthread_mutex_destroy(&a->api_mu);
  ember_free(a);
}

int ember__alerts_reload(ember__alerts_t *a, char *errbuf, size_t errbuf_size) {
  if (a == NULL) return -EINVAL;
  if (a->rules_file == NULL) {
    snprintf(errbuf, errbuf_size, "no alerts.rules file to read again");
    return 0;
  }
  ember__alert_rules_t *set = NULL;
  int rc = load_file(a->rules_file, &set, errbuf, errbuf_size);
  if (rc != 0) return rc;
  pthread_mutex_lock(&a->mu);
  for (size_t i = 0; i < ember__alert_rules_count(set) && rc == 0; i++) {
    const ember__alert_rule_t *r = ember__alert_rules_at(set, i);
    arule_t *ar = rule_find(a, r->name);
    if (ar != NULL && ar->source != SRC_FILE) {
      snprintf(errbuf, errbuf_size,
               "%s: rule \"%s\" has the name of a rule made through the API; rename one",
               a->rules_file, r->name);
      rc = -EINVAL;
    }
  }
  size_t added = 0, changed = 0, removed = 0;
  if (rc == 0) {
    for (size_t i = a->nrules; i-- > 0;) {
      if (a->rules[i].source == SRC_FILE &&
          ember__alert_rules_find(set, a->rules[i].r->name) == NULL) {
        rule_remove_at(a, i, "its rule left the rules file");
        removed++;
      }
    }
    for (size_t i = 0; i < ember__alert_rules_count(set) && rc == 0; i++) {
      const ember__alert_rule_t *r = ember__alert_rules_at(set, i);
      arule_t *ar = rule_find(a, r->name);
      ember__alert_rule_t *copy = ember__alert_rule_dup(r);
      if (copy == NULL) {
        rc = -ENOMEM;
      } else if (ar != NULL) {
        if (!ember__alert_rule_equal(ar->r, copy)) changed++;
        ember__alert_rule_free(ar->r);
        ar->r = copy; /* its alerts carry on under the new terms */
      } else {
        rc = rule_insert(a, copy, SRC_FILE);
        added++;
      }
    }
    ember__ahist_keep(a->hist, history_steps(a));
  }
  pthread_mutex_unlock(&a->mu);
  ember__alert_rules_free(set);
  if (rc == 0)
    EMBER_INFO(LOG, "%s read again: %zu rules added, %zu changed, %zu removed", a->rules_file,
               added, changed, removed);
  return rc;
}

/* ---- the API -------------------------------------------------------- */

static json_t *rule_json(const arule_t *ar) {
  json_t *j = ember__alert_rule_to_json(ar->r);
  if (j != NULL && json_object_set_new(j, "source", json_string(src_names[ar->source])) != 0) {
    json_decref(j);
    return NULL;
  }
  return j;
}

/* Store `r` as an API rule and put it in force (under mu); takes r. */
static int api_rule_put(ember__alerts_t *a, ember__alert_rule_t *r, const char *text, char *errbuf,
                        size_t errbuf_size) {
  int rc = ember_store_doc_put(a->o.store, EMBER_STORE_DOC_RULES, r->name, text, strlen(text));
  if (rc != 0) {
    snprintf(errbuf, errbuf_size, "cannot store the rule: %s", ember_strerror(rc));
    ember__alert_rule_free(r);
    return rc;
  }
  return rule_insert(a, r, SRC_API);
}

/* Drop API rule `i` and its stored document (under mu). */
static int api_rule_drop(ember__alerts_t *a, size_t i, const char *why, char *errbuf,
                         size_t errbuf_size) {
  int rc = ember_store_doc_del(a->o.store, EMBER_STORE_DOC_RULES, a->rules[i].r->name);
  if (rc == EMBER_ENOTFOUND) rc = 0;
  if (rc == 0) {
    rule_remove_at(a, i, why);
  } else {
    snprintf(errbuf, errbuf_size, "cannot delete the stored rule: %s", ember_strerror(rc));
  }
  return rc;
}

static size_t rule_index(const ember__alerts_t *a, const char *name) {
  size_t i = 0;
  while (i < a->nrules && strcmp(a->rules[i].r->name, name) != 0) i++;
  return i;
}

/* The rule as stored and shared: its JSON without "source". */
static char *rule_text(const ember__alert_rule_t *r, json_t **json) {
  json_t *j = ember__alert_rule_to_json(r);
  char *text = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
  if (json != NULL && text != NULL) {
    *json = j;
  } else {
    json_decref(j);
  }
  return text;
}

int ember__alerts_rule_add(ember__alerts_t *a, const json_t *body, json_t **out, char *errbuf,
                           size_t errbuf_size) {
  if (a == NULL || body == NULL) return -EINVAL;
  ember__alert_rule_t *r = NULL;
  int rc = ember__alert_rule_from_json(body, &r, errbuf, errbuf_size);
  if (rc != 0) return rc;
  char name[EMBER__RULE_NAME_MAX + 1];
  snprintf(name, sizeof name, "%s", r->name);
  json_t *shared = NULL;
  char *text = rule_text(r, &shared);
  pthread_mutex_lock(&a->api_mu);
  pthread_mutex_lock(&a->mu);
  arule_t *have = rule_find(a, name);
  if (have != NULL) {
    snprintf(errbuf, errbuf_size,
             "a rule named \"%s\" exists (%s); delete it first or pick another name", name,
             have->source == SRC_FILE ? "from the rules file" : src_names[have->source]);
    rc = -EEXIST;
  }
  pthread_mutex_unlock(&a->mu);
  if (rc == 0 && text == NULL) rc = -ENOMEM;
  /* The fleet first: a rule that only this collector took would be
   * evaluated over this store's workers only. */
  if (rc == 0 && a->o.share != NULL)
    rc = a->o.share(a->o.share_ctx, name, shared, errbuf, errbuf_size);
  pthread_mutex_lock(&a->mu);
  if (rc == 0) {
    rc = api_rule_put(a, r, text, errbuf, errbuf_size);
    r = NULL;
  }
  if (rc == 0 && out != NULL) {
    *out = rule_json(rule_find(a, name));
    if (*out == NULL) rc = -ENOMEM;
  }
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_unlock(&a->api_mu);
  ember__alert_rule_free(r);
  json_decref(shared);
  free(text);
  if (rc == 0) EMBER_INFO(LOG, "rule %s added through the API", name);
  return rc;
}

int ember__alerts_rule_delete(ember__alerts_t *a, const char *name, char *errbuf,
                              size_t errbuf_size) {
  if (a == NULL || name == NULL) return -EINVAL;
  pthread_mutex_lock(&a->api_mu);
  pthread_mutex_lock(&a->mu);
  int rc = 0;
  size_t i = rule_index(a, name);
  if (i == a->nrules) {
    snprintf(errbuf, errbuf_size, "no rule named \"%.64s\"", name);
    rc = EMBER_ENOTFOUND;
  } else if (a->rules[i].source != SRC_API) {
    snprintf(errbuf, errbuf_size, "rule \"%s\" comes from %s: change it there", name,
             a->rules[i].source == SRC_FILE ? "the rules file (alerts.rules)"
                                            : "the collector's config (alerts.default_rule)");
    rc = -EPERM;
  }
  pthread_mutex_unlock(&a->mu);
  if (rc == 0 && a->o.share != NULL)
    rc = a->o.share(a->o.share_ctx, name, NULL, errbuf, errbuf_size);
  pthread_mutex_lock(&a->mu);
  /* Found again: api_mu kept every other change out, but not rounds. */
  i = rule_index(a, name);
  if (rc == 0 && i < a->nrules)
    rc = api_rule_drop(a, i, "its rule was deleted", errbuf, errbuf_size);
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_unlock(&a->api_mu);
  if (rc == 0) EMBER_INFO(LOG, "rule %s deleted through the API", name);
  return rc;
}

int ember__alerts_rule_sync(ember__alerts_t *a, const char *name, const json_t *rule, char *errbuf,
                            size_t errbuf_size) {
  if (a == NULL || name == NULL) return -EINVAL;
  ember__alert_rule_t *r = NULL;
  char *text = NULL;
  int rc = 0;
  if (rule != NULL) {
    rc = ember__alert_rule_from_json(rule, &r, errbuf, errbuf_size);
    if (rc == 0 && strcmp(r->name, name) != 0) {
      snprintf(errbuf, errbuf_size, "the rule is named \"%.64s\", its key \"%.64s\"", r->name,
               name);
      rc = -EINVAL;
    }
    if (rc == 0 && (text = rule_text(r, NULL)) == NULL) rc = -ENOMEM;
    if (rc != 0) {
      ember__alert_rule_free(r);
      return rc;
    }
  }
  pthread_mutex_lock(&a->api_mu);
  pthread_mutex_lock(&a->mu);
  size_t i = rule_index(a, name);
  const char *done = NULL;
  if (i < a->nrules && a->rules[i].source != SRC_API) {
    /* This collector's own file or default rule keeps the name. */
    if (r != NULL) {
      snprintf(errbuf, errbuf_size,
               "the fleet's rule \"%s\" is not applied here: a rule of that name comes from %s",
               name, src_names[a->rules[i].source]);
      rc = -EEXIST;
    }
  } else if (r == NULL) {
    /* Said before the drop: rule i may be the last, and the drop moves
     * nrules below it. */
    if (i < a->nrules) done = "deleted";
    if (i < a->nrules) rc = api_rule_drop(a, i, "its rule was deleted", errbuf, errbuf_size);
    if (rc != 0) done = NULL;
  } else {
    char *have = i < a->nrules ? rule_text(a->rules[i].r, NULL) : NULL;
    if (i < a->nrules && have == NULL) {
      rc = -ENOMEM;
    } else if (have != NULL && strcmp(have, text) == 0) {
      /* What this collector has (its own change, or a replay). */
    } else {
      if (i < a->nrules) rc = api_rule_drop(a, i, "its rule was changed", errbuf, errbuf_size);
      if (rc == 0) {
        rc = api_rule_put(a, r, text, errbuf, errbuf_size);
        r = NULL;
        if (rc == 0) done = have != NULL ? "changed" : "added";
      }
    }
    free(have);
  }
  pthread_mutex_unlock(&a->mu);
  pthread_mutex_unlock(&a->api_mu);
  ember__alert_rule_free(r);
  free(text);
  if (done != NULL) EMBER_INFO(LOG, "rule %s %s through another collector", name, done);
  return rc;
}

json_t *ember__alerts_rules_json(ember__alerts_t *a) {
  json_t *doc = json_object(), *arr = json_array();
  int rc = doc && arr ? 0 : -ENOMEM;
  pthread_mutex_lock(&a->mu);
  for (size_t i = 0; i < a->nrules && rc == 0; i++)
    rc = ember__json_push(arr, rule_json(&a->rules[i]));
  pthread_mutex_unlock(&a->mu);
  if (rc == 0) {
    rc = ember__json_set(doc, "rules", arr);
    arr = NULL;
  }
  json_decref(arr);
  if (rc != 0) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

static int phase_rank(ember__alert_phase_t p) {
  return p == EMBER__PHASE_FIRING ? 0 : p == EMBER__PHASE_RESOLVED ? 2 : 1;
}

static int by_listing(const void *x, const void *y) {
  const alert_t *p = *(alert_t *const *)x, *q = *(alert_t *const *)y;
  int rp = phase_rank(p->st.phase), rq = phase_rank(q->st.phase);
  if (rp != rq) return rp - rq;
  return (p->st.since_ns < q->st.since_ns) - (p->st.since_ns > q->st.since_ns);
}

json_t *ember__alerts_list(ember__alerts_t *a, const char *rule, const char *state,
                           const char *worker) {
  json_t *doc = json_object(), *arr = json_array();
  int rc = doc && arr ? 0 : -ENOMEM;
  pthread_mutex_lock(&a->mu);
  alert_t **v = a->nalerts ? ember_malloc(a->nalerts * sizeof *v) : NULL;
  size_t n = 0;
  if (a->nalerts && v == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < a->nalerts && rc == 0; i++) {
    alert_t *al = a->alerts[i];
    if (al->gone) continue;
    if (rule && strcmp(al->rule, rule) != 0) continue;
    const char *st =
        al->st.phase == EMBER__PHASE_INACTIVE ? "pending" : ember__alert_phase_name(al->st.phase);
    if (state && strcmp(st, state) != 0) continue;
    const char *w = json_string_value(json_object_get(al->labels, "worker"));
    if (worker && (w == NULL || strcmp(w, worker) != 0)) continue;
    capture_refresh(a, al);
    v[n++] = al;
  }
  if (n > 1) qsort(v, n, sizeof *v, by_listing);
  for (size_t i = 0; i < n && rc == 0; i++) rc = ember__json_push(arr, alert_doc(v[i]));
  pthread_mutex_unlock(&a->mu);
  ember_free(v);
  if (rc == 0) {
    rc = ember__json_set(doc, "alerts", arr);
    arr = NULL;
  }
  json_decref(arr);
  if (rc != 0) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

int ember__alerts_get(ember__alerts_t *a, const char *id, json_t **out) {
  if (a == NULL || id == NULL || out == NULL) return -EINVAL;
  pthread_mutex_lock(&a->mu);
  alert_t *al = alert_by_id(a, id);
  int rc = al == NULL || al->gone ? EMBER_ENOTFOUND : 0;
  if (rc == 0) {
    capture_refresh(a, al);
    *out = alert_doc(al);
    if (*out == NULL) rc = -ENOMEM;
  }
  pthread_mutex_unlock(&a->mu);
  return rc;
}
