/* Profile queries below HTTP (query.h). */
#include <errno.h>
#include <stdint.h>

#include "query.h"

static const ember_value_type_t qtype_vt[] = {EMBER_VT_CPU_NS,        EMBER_VT_CPU_SAMPLES,
                                              EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES,
                                              EMBER_VT_INUSE_OBJECTS, EMBER_VT_INUSE_BYTES};

/* A copy of `src` (one value type) whose values are multiplied by `period`
 * under the value type CPU_NS. */
static int samples_to_ns(const ember_profile_t *src, int64_t period, ember_profile_t **out) {
  ember_value_type_t vt = EMBER_VT_CPU_NS;
  ember_profile_t *p = NULL;
  int rc = ember_profile_new(&vt, 1, &p);
  if (rc != 0) return rc;
  rc = ember_profile_set_labels(p, ember_profile_labels(src));
  int64_t ws, we;
  ember_profile_window(src, &ws, &we);
  if (rc == 0 && ws < we) rc = ember_profile_set_window(p, ws, we);
  ember_profile_set_period(p, period);
  /* Frames are interned in order, so the copy's frame ids equal src's. */
  for (size_t f = 0; f < ember_profile_nframes(src) && rc == 0; f++) {
    uint32_t id;
    rc = ember_profile_intern_frame(p, ember_profile_frame(src, (uint32_t)f), &id);
  }
  for (size_t i = 0; i < ember_profile_nstacks(src) && rc == 0; i++) {
    const uint32_t *ids;
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(src, (uint32_t)i, &ids, &depth, &v);
    int64_t ns;
    if (rc == 0 && __builtin_mul_overflow(v[0], period, &ns)) rc = -ERANGE;
    if (rc == 0) rc = ember_profile_add_ids(p, ids, depth, &ns, NULL);
  }
  if (rc != 0) {
    ember_profile_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

/* type=cpu over data that has CPU samples but no CPU time (`*p`, empty):
 * replace *p with `samples` x their period, or the samples themselves when
 * the period is mixed. Takes `samples`. */
static int cpu_from_samples(ember_profile_t **p, ember_profile_t *samples) {
  int rc = 0;
  if (ember_profile_nstacks(samples) > 0) {
    ember_profile_free(*p);
    *p = NULL;
    int64_t period = ember_profile_period(samples);
    if (period > 0) {
      rc = samples_to_ns(samples, period, p);
    } else {
      *p = samples;
      samples = NULL;
    }
  }
  ember_profile_free(samples);
  return rc;
}

static int store_merge(void *ctx, const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                       ember_value_type_t vt, ember_profile_t **out) {
  return ember_store_merge(ctx, sel, from_ns, to_ns, vt, out);
}

int ember__query_profile(ember_store_t *store, const ember_store_selector_t *sel, int64_t from_ns,
                         int64_t to_ns, ember__qtype_t type, ember_profile_t **out) {
  return ember__query_profile_by(store_merge, store, sel, from_ns, to_ns, type, out);
}

int ember__query_profile_by(ember__merge_fn merge, void *ctx, const ember_store_selector_t *sel,
                            int64_t from_ns, int64_t to_ns, ember__qtype_t type,
                            ember_profile_t **out) {
  ember_profile_t *p = NULL, *samples = NULL;
  int rc = merge(ctx, sel, from_ns, to_ns, qtype_vt[type], &p);
  if (rc == 0 && type == EMBER__Q_CPU && ember_profile_nstacks(p) == 0) {
    rc = merge(ctx, sel, from_ns, to_ns, EMBER_VT_CPU_SAMPLES, &samples);
    if (rc == 0) rc = cpu_from_samples(&p, samples);
  }
  if (rc != 0) {
    ember_profile_free(p);
    return rc;
  }
  *out = p;
  return 0;
}

static int store_session_merge(void *ctx, const char *id, ember_value_type_t vt,
                               ember_profile_t **out, ember_store_session_info_t *info) {
  return ember_store_session_merge(ctx, id, vt, out, info);
}

int ember__query_session(ember_store_t *store, const char *id, ember__qtype_t type,
                         ember_profile_t **out, ember_store_session_info_t *info) {
  return ember__query_session_by(store_session_merge, store, id, type, out, info);
}

int ember__query_session_by(ember__session_merge_fn merge, void *ctx, const char *id,
                            ember__qtype_t type, ember_profile_t **out,
                            ember_store_session_info_t *info) {
  ember_profile_t *p = NULL, *samples = NULL;
  int rc = merge(ctx, id, qtype_vt[type], &p, info);
  if (rc == 0 && type == EMBER__Q_CPU && ember_profile_nstacks(p) == 0) {
    rc = merge(ctx, id, EMBER_VT_CPU_SAMPLES, &samples, NULL);
    if (rc == 0) rc = cpu_from_samples(&p, samples);
  }
  if (rc != 0) {
    ember_profile_free(p);
    return rc;
  }
  *out = p;
  return 0;
}
