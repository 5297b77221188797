/* The per (rule, group) alert state machine and its JSON form. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "alert_state.h"
#include "json.h"

static const char *const phase_names[] = {"inactive", "pending", "firing", "resolved"};
static const char *const transition_names[] = {"none", "pending", "firing", "resolved"};

const char *ember__alert_phase_name(ember__alert_phase_t p) {
  return (unsigned)p < 4 ? phase_names[p] : "?";
}

const char *ember__alert_transition_name(ember__alert_transition_t t) {
  return (unsigned)t < 4 ? transition_names[t] : "?";
}

void ember__alert_state_init(ember__alert_state_t *st) {
  if (!st) return;
  *st = (ember__alert_state_t){
      .phase = EMBER__PHASE_INACTIVE,
      .since_ns = EMBER__ALERT_NONE,
      .fired_ns = EMBER__ALERT_NONE,
      .resolved_ns = EMBER__ALERT_NONE,
      .below_since_ns = EMBER__ALERT_NONE,
      .updated_ns = EMBER__ALERT_NONE,
      .value = (double)NAN,
      .threshold = (double)NAN,
  };
}

/* 64-bit FNV-1a, then the splitmix64 finaliser so that close inputs (two
 * start times 10 s apart) give ids that share no prefix. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void ember__alert_id(const char *rule, const char *group, int64_t start_ns, uint64_t salt,
                     char out[EMBER__ALERT_ID_LEN + 1]) {
  uint64_t h = 0xcbf29ce484222325ULL;
  const char *r = rule ? rule : "", *g = group ? group : "";
  /* The NULs keep ("ab", "c") and ("a", "bc") apart. */
  h = fnv(h, r, strlen(r) + 1);
  h = fnv(h, g, strlen(g) + 1);
  unsigned char t[8];
  for (int i = 0; i < 8; i++) t[i] = (unsigned char)((uint64_t)start_ns >> (56 - 8 * i));
  h = fnv(h, t, sizeof t);
  h = mix(h ^ mix(salt));
  snprintf(out, EMBER__ALERT_ID_LEN + 1, "%016llx", (unsigned long long)h);
}

static void new_id(ember__alert_state_t *st, const char *rule, const char *group,
                   ember__alert_random_fn rnd, void *ctx) {
  ember__alert_id(rule, group, st->since_ns, rnd ? rnd(ctx) : 0, st->id);
}

ember__alert_transition_t ember__alert_state_step(ember__alert_state_t *st,
                                                  const ember__alert_timing_t *tm,
                                                  const ember__alert_input_t *in, const char *rule,
                                                  const char *group, ember__alert_random_fn rnd,
                                                  void *rnd_ctx) {
  if (!st || !tm || !in || in->start_ns >= in->end_ns) return EMBER__TRANSITION_NONE;
  if (st->updated_ns != EMBER__ALERT_NONE && in->end_ns <= st->updated_ns)
    return EMBER__TRANSITION_NONE;
  st->updated_ns = in->end_ns;
  st->value = in->value;
  st->threshold = in->threshold;
  /* NaN compares false: a NaN threshold neither breaches nor holds the
   * band, so a firing alert whose baseline vanished can still resolve. */
  bool breach = in->value > in->threshold;
  bool in_band = in->value >= in->threshold * (1.0 - tm->hysteresis);

  switch (st->phase) {
  case EMBER__PHASE_INACTIVE:
  case EMBER__PHASE_RESOLVED:
    if (!breach) return EMBER__TRANSITION_NONE;
    st->since_ns = in->start_ns;
    st->fired_ns = st->resolved_ns = st->below_since_ns = EMBER__ALERT_NONE;
    new_id(st, rule, group, rnd, rnd_ctx);
    if (in->end_ns - st->since_ns >= tm->for_ns) {
      st->phase = EMBER__PHASE_FIRING;
      st->fired_ns = in->end_ns;
      return EMBER__TRANSITION_FIRING;
    }
    st->phase = EMBER__PHASE_PENDING;
    return EMBER__TRANSITION_PENDING;
  case EMBER__PHASE_PENDING:
    if (!breach) {
      /* Dropped without a word: nothing was notified for it. The id stays
       * as the last one; the next breach draws a new one. */
      st->phase = EMBER__PHASE_INACTIVE;
      st->since_ns = EMBER__ALERT_NONE;
      return EMBER__TRANSITION_NONE;
    }
    if (in->end_ns - st->since_ns < tm->for_ns) return EMBER__TRANSITION_NONE;
    st->phase = EMBER__PHASE_FIRING;
    st->fired_ns = in->end_ns;
    return EMBER__TRANSITION_FIRING;
  case EMBER__PHASE_FIRING:
    if (breach) {
      st->below_since_ns = EMBER__ALERT_NONE;
      return EMBER__TRANSITION_NONE;
    }
    if (in_band) return EMBER__TRANSITION_NONE;
    if (st->below_since_ns == EMBER__ALERT_NONE) st->below_since_ns = in->start_ns;
    if (in->end_ns - st->below_since_ns < tm->resolve_for_ns) return EMBER__TRANSITION_NONE;
    st->phase = EMBER__PHASE_RESOLVED;
    st->resolved_ns = in->end_ns;
    st->below_since_ns = EMBER__ALERT_NONE;
    return EMBER__TRANSITION_RESOLVED;
  }
  return EMBER__TRANSITION_NONE;
}

/* ---- JSON ---------------------------------------------------------------- */

static json_t *time_json(int64_t t) {
  return t == EMBER__ALERT_NONE ? json_null() : json_integer((json_int_t)t);
}

static json_t *num_json(double d) { return isfinite(d) ? json_real(d) : json_null(); }

json_t *ember__alert_state_to_json(const ember__alert_state_t *st) {
  if (!st || (unsigned)st->phase > EMBER__PHASE_RESOLVED) return NULL;
  json_t *o = json_object();
  int rc = o ? 0 : -ENOMEM;
  if (rc == 0) rc = ember__json_set(o, "phase", json_string(phase_names[st->phase]));
  if (rc == 0) rc = ember__json_set(o, "id", json_string(st->id));
  if (rc == 0) rc = ember__json_set(o, "since_ns", time_json(st->since_ns));
  if (rc == 0) rc = ember__json_set(o, "fired_ns", time_json(st->fired_ns));
  if (rc == 0) rc = ember__json_set(o, "resolved_ns", time_json(st->resolved_ns));
  if (rc == 0) rc = ember__json_set(o, "below_since_ns", time_json(st->below_since_ns));
  if (rc == 0) rc = ember__json_set(o, "updated_ns", time_json(st->updated_ns));
  if (rc == 0) rc = ember__json_set(o, "value", num_json(st->value));
  if (rc == 0) rc = ember__json_set(o, "threshold", num_json(st->threshold));
  if (rc != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

static int bad(char *errbuf, size_t size, const char *member, const char *what) {
  if (errbuf && size) snprintf(errbuf, size, "alert state: \"%s\" %s", member, what);
  return -EINVAL;
}

static int get_time(const json_t *o, const char *k, int64_t *out, char *errbuf, size_t size) {
  const json_t *v = json_object_get(o, k);
  if (v == NULL || json_is_null(v)) {
    *out = EMBER__ALERT_NONE;
    return 0;
  }
  if (!json_is_integer(v) || json_integer_value(v) == EMBER__ALERT_NONE)
    return bad(errbuf, size, k, "must be a time in nanoseconds or null");
  *out = (int64_t)json_integer_value(v);
  return 0;
}

static int get_num(const json_t *o, const char *k, double *out, char *errbuf, size_t size) {
  const json_t *v = json_object_get(o, k);
  if (v == NULL || json_is_null(v)) {
    *out = (double)NAN;
    return 0;
  }
  if (!json_is_number(v)) return bad(errbuf, size, k, "must be a number or null");
  *out = json_number_value(v);
  return 0;
}

int ember__alert_state_from_json(const json_t *obj, ember__alert_state_t *out, char *errbuf,
                                 size_t errbuf_size) {
  if (!out) return -EINVAL;
  if (!json_is_object(obj)) return bad(errbuf, errbuf_size, "state", "must be a JSON object");
  ember__alert_state_t st;
  ember__alert_state_init(&st);
  const char *ph = json_string_value(json_object_get(obj, "phase"));
  int p = -1;
  for (int i = 0; ph && i < 4; i++)
    if (strcmp(ph, phase_names[i]) == 0) p = i;
  if (p < 0)
    return bad(errbuf, errbuf_size, "phase", "must be inactive, pending, firing or resolved");
  st.phase = (ember__alert_phase_t)p;
  const char *id = json_string_value(json_object_get(obj, "id"));
  size_t idlen = id ? strlen(id) : 0;
  bool hex = id != NULL && (idlen == 0 || idlen == EMBER__ALERT_ID_LEN);
  for (size_t i = 0; hex && i < idlen; i++)
    hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
  if (!hex) return bad(errbuf, errbuf_size, "id", "must be 16 hex digits (or \"\")");
  memcpy(st.id, id, idlen + 1);
  int rc = get_time(obj, "since_ns", &st.since_ns, errbuf, errbuf_size);
  if (rc == 0) rc = get_time(obj, "fired_ns", &st.fired_ns, errbuf, errbuf_size);
  if (rc == 0) rc = get_time(obj, "resolved_ns", &st.resolved_ns, errbuf, errbuf_size);
  if (rc == 0) rc = get_time(obj, "below_since_ns", &st.below_since_ns, errbuf, errbuf_size);
  if (rc == 0) rc = get_time(obj, "updated_ns", &st.updated_ns, errbuf, errbuf_size);
  if (rc == 0) rc = get_num(obj, "value", &st.value, errbuf, errbuf_size);
  if (rc == 0) rc = get_num(obj, "threshold", &st.threshold, errbuf, errbuf_size);
  if (rc != 0) return rc;
  /* What the machine relies on: an active alert has a start and an id. */
  if ((st.phase == EMBER__PHASE_PENDING || st.phase == EMBER__PHASE_FIRING) &&
      (st.since_ns == EMBER__ALERT_NONE || idlen == 0))
    return bad(errbuf, errbuf_size, "since_ns",
               "must be set (with an id) for a pending or "
               "firing alert");
  *out = st;
  return 0;
}
