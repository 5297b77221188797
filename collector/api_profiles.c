/* The API's profile handlers: /api/v1/profile (the merged profile of a
 * selection in any format: tree, pprof, folded, speedscope, top) and
 * /api/v1/diff (two selections as one diff tree), and the profile answers
 * the session handlers share (api_profiles.h). docs/api.md describes
 * them; the queries themselves are query.h's. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "api_profiles.h"
#include "ember/codec.h"
#include "fleetq.h"
#include "ember/export.h"
#include "json.h"
#include "query.h"

static const char *const type_names[] = {"cpu",         "samples",       "alloc_objects",
                                         "alloc_bytes", "inuse_objects", "inuse_bytes"};

unsigned ember__api_parse_type(ember__req_t *r, ember__qtype_t *out) {
  const char *v = ember__req_param(r, "type");
  if (v == NULL) {
    *out = EMBER__Q_CPU;
    return 0;
  }
  for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++) {
    if (strcmp(v, type_names[i]) == 0) {
      *out = (ember__qtype_t)i;
      return 0;
    }
  }
  return ember__req_fail(r, 400,
                         "parameter \"type\": \"%.64s\" is not a profile type; use cpu, samples, "
                         "alloc_objects, alloc_bytes, inuse_objects or inuse_bytes",
                         v);
}

/* A fleet merge (fleetq.h) for ember__query_profile_by: what it misses
 * goes to the request's `partial`. */
static int fleet_merge(void *ctx, const ember_store_selector_t *sel, int64_t from_ns, int64_t to_ns,
                       ember_value_type_t vt, ember_profile_t **out) {
  ember__req_t *r = ctx;
  char partial[sizeof r->partial];
  int rc = ember__fleetq_merge(r->env->fleetq, r->env->store, sel, from_ns, to_ns, vt, out, partial,
                               sizeof partial);
  if (rc == 0) ember__req_partial(r, partial);
  return rc;
}

static unsigned load_profile(ember__req_t *r, const ember_store_selector_t *sel, int64_t from,
                             int64_t to, ember__qtype_t type, ember_profile_t **out) {
  int rc = ember__req_fleet(r) ? ember__query_profile_by(fleet_merge, r, sel, from, to, type, out)
                               : ember__query_profile(r->env->store, sel, from, to, type, out);
  return rc == 0 ? 0 : ember__req_fail_internal(r, "merging profiles from the store", rc);
}

unsigned ember__api_parse_raw(ember__req_t *r, const char *raw, ember_value_type_t *vt) {
  if (!r->local)
    return ember__req_fail(r, 400, "parameter \"raw\" is for peer collectors: it needs local=1");
  if (ember__req_param(r, "format") != NULL && strcmp(ember__req_param(r, "format"), "ember") != 0)
    return ember__req_fail(r, 400, "parameter \"raw\" answers in format=ember only");
  if (ember__fleetq_raw_type(raw, vt) != 0)
    return ember__req_fail(r, 400,
                           "parameter \"raw\": \"%.64s\" is not a value type; use cpu_ns, "
                           "cpu_samples, alloc_objects, alloc_bytes, inuse_objects or inuse_bytes",
                           raw);
  return 0;
}

/* raw=VT with local=1: this store's own merge in one store value type, in
 * the wire encoding, as fleet queries ask their peers (fleetq.h). */
static unsigned answer_raw(ember__req_t *r, const char *raw, const ember_store_selector_t *sel,
                           int64_t from, int64_t to) {
  ember_value_type_t vt;
  unsigned st = ember__api_parse_raw(r, raw, &vt);
  if (st != 0) return st;
  size_t nv = 0;
  for (size_t i = 0; i < r->nparams; i++) nv += strcmp(r->params[i].key, "version") == 0;
  if (nv > 1) return ember__req_fail(r, 400, "parameter \"raw\" takes one version at most");
  if (ember_value_type_is_gauge(vt)) {
    /* A gauge's parts, one per series, so that the asking collector keeps
     * each series' latest across stores (fleetq.h). */
    ember_profile_t **parts = NULL;
    size_t n = 0;
    int rc = ember_store_gauge_latest(r->env->store, sel, from, to, vt, &parts, &n);
    if (rc == 0) rc = ember__fleetq_gauge_encode(parts, n, &r->body);
    ember_store_gauge_latest_free(parts, n);
    if (rc != 0) return ember__req_fail_internal(r, "encoding this store's gauge parts", rc);
    r->ctype = "application/x-ember-gauge-parts";
    return r->status = 200;
  }
  ember_profile_t *p = NULL;
  int rc = ember_store_merge(r->env->store, sel, from, to, vt, &p);
  if (rc == 0) rc = ember_codec_encode(p, &r->body);
  ember_profile_free(p);
  if (rc != 0) return ember__req_fail_internal(r, "encoding this store's merge", rc);
  r->ctype = "application/x-ember-profile";
  return r->status = 200;
}

/* load_profile over every `version` parameter (one, or none = any), merged:
 * the series of several versions are disjoint, so the sum is exact. */
static unsigned load_versions(ember__req_t *r, const ember_store_selector_t *sel, int64_t from,
                              int64_t to, ember__qtype_t type, ember_profile_t **out) {
  ember_profile_t *acc = NULL;
  size_t nv = 0;
  for (size_t i = 0; i < r->nparams; i++) {
    if (strcmp(r->params[i].key, "version") != 0) continue;
    if (nv++ == 0) continue; /* the first is sel->version */
    bool again = false;      /* a version given twice counts once */
    for (size_t j = 0; j < i && !again; j++)
      again = strcmp(r->params[j].key, "version") == 0 &&
              strcmp(r->params[j].value, r->params[i].value) == 0;
    if (again) continue;
    ember_store_selector_t one = *sel;
    one.version = r->params[i].value;
    ember_profile_t *p = NULL;
    unsigned st = load_profile(r, &one, from, to, type, &p);
    if (st == 0 && acc == NULL) {
      st = load_profile(r, sel, from, to, type, &acc);
      if (st != 0) ember_profile_free(p);
    }
    if (st != 0) {
      ember_profile_free(acc);
      return st;
    }
    int rc = ember_profile_merge(acc, p);
    bool same = ember_profile_type(acc, 0) == ember_profile_type(p, 0);
    ember_profile_free(p);
    if (rc != 0 || !same) {
      ember_profile_free(acc);
      if (!same || rc == -EINVAL)
        return ember__req_fail(
            r, 400,
            "the versions' CPU data differ in kind (CPU time in some, only samples of "
            "unknown period in others): ask for one version, or type=samples");
      return ember__req_fail_internal(r, "merging the versions", rc);
    }
  }
  if (acc != NULL) {
    *out = acc;
    return 0;
  }
  return load_profile(r, sel, from, to, type, out);
}

static const char *vt_api_name(ember_value_type_t vt) {
  switch (vt) {
  case EMBER_VT_CPU_NS: return "cpu";
  case EMBER_VT_CPU_SAMPLES: return "samples";
  case EMBER_VT_ALLOC_OBJECTS: return "alloc_objects";
  case EMBER_VT_ALLOC_BYTES: return "alloc_bytes";
  case EMBER_VT_INUSE_OBJECTS: return "inuse_objects";
  case EMBER_VT_INUSE_BYTES: return "inuse_bytes";
  }
  return "unknown";
}

static unsigned answer_top(ember__req_t *r, const ember_profile_t *p, size_t limit) {
  ember_top_entry_t *e = NULL;
  size_t n = 0;
  int rc = ember_profile_top(p, 0, r->top_by, limit, &e, &n);
  if (rc != 0) return ember__req_fail_internal(r, "ranking functions", rc);
  ember_value_type_t vt = ember_profile_type(p, 0);
  json_t *doc = json_object(), *fns = NULL;
  rc = doc ? 0 : -ENOMEM;
  /* The same type names as the tree and pprof ("alloc_space" for bytes). */
  if (rc == 0) rc = ember__json_set(doc, "type", json_string(ember_value_type_name(vt)));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0) rc = ember__json_set(doc, "total", json_integer(ember_profile_total(p, 0)));
  if (rc == 0 && (fns = ember__req_jarray_in(doc, "functions")) == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(fns, o);
    if (rc == 0) rc = ember__json_set(o, "name", ember__json_str(e[i].name));
    if (rc == 0 && e[i].module != NULL)
      rc = ember__json_set(o, "module", ember__json_str(e[i].module));
    if (rc == 0) rc = ember__json_set(o, "self", json_integer(e[i].self));
    if (rc == 0) rc = ember__json_set(o, "total", json_integer(e[i].total));
  }
  unsigned st = rc == 0 ? ember__req_answer_json(r, doc)
                        : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_top_free(e, n);
  return st;
}

static const struct {
  const char *name, *ext;
} formats[] = {{"tree", "json"},
               {"pprof", "pb.gz"},
               {"folded", "folded"},
               {"speedscope", "speedscope.json"},
               {"top", "json"}};
enum { FMT_TREE, FMT_PPROF, FMT_FOLDED, FMT_SPEEDSCOPE, FMT_TOP };

/* sort=self|total, for format=top. */
unsigned ember__api_parse_sort(ember__req_t *r) {
  const char *v = ember__req_param(r, "sort");
  r->top_by = EMBER_TOP_BY_SELF;
  if (v == NULL || strcmp(v, "self") == 0) return 0;
  if (strcmp(v, "total") == 0) {
    r->top_by = EMBER_TOP_BY_TOTAL;
    return 0;
  }
  return ember__req_fail(r, 400, "parameter \"sort\": \"%.64s\" is not an order; use self or total",
                         v);
}

unsigned ember__api_parse_format(ember__req_t *r, size_t *out) {
  const char *fv = ember__req_param(r, "format");
  *out = FMT_TREE;
  if (fv == NULL) return 0;
  for (size_t fmt = 0; fmt < sizeof formats / sizeof formats[0]; fmt++) {
    if (strcmp(fv, formats[fmt].name) == 0) {
      *out = fmt;
      return 0;
    }
  }
  return ember__req_fail(
      r, 400,
      "parameter \"format\": \"%.64s\" is not a format; use tree, pprof, folded, "
      "speedscope or top",
      fv);
}

/* Answer with profile `p` (one value type) in format `fmt`. */
unsigned ember__api_answer_profile(ember__req_t *r, const ember_profile_t *p, size_t fmt,
                                   uint64_t max_nodes, uint64_t limit, const char *name) {
  const char *tname = vt_api_name(ember_profile_type(p, 0));
  snprintf(r->disposition, sizeof r->disposition, "%s; filename=\"%s-%s.%s\"",
           fmt == FMT_PPROF ? "attachment" : "inline", name, tname, formats[fmt].ext);
  int rc = 0;
  switch (fmt) {
  case FMT_TREE: {
    ember_tree_opts_t o = {.vi = 0, .max_nodes = (size_t)max_nodes};
    rc = ember_export_tree(p, &o, &r->body);
    r->ctype = "application/json";
    break;
  }
  case FMT_PPROF:
    rc = ember_export_pprof(p, &r->body);
    r->ctype = ember_format_content_type(EMBER_FORMAT_PPROF);
    break;
  case FMT_FOLDED:
    rc = ember_export_folded(p, 0, &r->body);
    r->ctype = ember_format_content_type(EMBER_FORMAT_FOLDED);
    break;
  case FMT_SPEEDSCOPE:
    rc = ember_export_speedscope(p, &r->body);
    r->ctype = ember_format_content_type(EMBER_FORMAT_SPEEDSCOPE);
    break;
  default: return answer_top(r, p, (size_t)limit);
  }
  return rc == 0 ? (r->status = 200) : ember__req_fail_internal(r, "exporting the profile", rc);
}

static unsigned h_profile(ember__req_t *r) {
  static const char *const allowed[] = {"worker", "version", "host",   "actor",     "from",
                                        "to",     "type",    "format", "max_nodes", "limit",
                                        "sort",   "raw",     NULL};
  int64_t from, to;
  uint64_t max_nodes, limit;
  ember__qtype_t type;
  size_t fmt;
  ember_store_selector_t sel;
  /* version may be given several times: the union of those versions. */
  unsigned st = ember__req_check_params_rep(r, allowed, "version");
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0 && ember__req_param(r, "raw") != NULL) {
    ember__req_selector(r, "", NULL, &sel);
    return answer_raw(r, ember__req_param(r, "raw"), &sel, from, to);
  }
  if (st == 0) st = ember__api_parse_type(r, &type);
  if (st == 0) st = ember__req_u64(r, "max_nodes", 2000, 0, 1000000, &max_nodes);
  if (st == 0) st = ember__req_u64(r, "limit", 50, 1, 100000, &limit);
  if (st == 0) st = ember__api_parse_format(r, &fmt);
  if (st == 0) st = ember__api_parse_sort(r);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  ember_profile_t *p = NULL;
  st = load_versions(r, &sel, from, to, type, &p);
  if (st != 0) return st;
  st = ember__api_answer_profile(r, p, fmt, max_nodes, limit, "ember");
  ember_profile_free(p);
  return st;
}

static unsigned h_diff(ember__req_t *r) {
  static const char *const allowed[] = {
      "worker",    "version",    "host",    "actor",    "from",    "to",    "type", "max_nodes",
      "vs.worker", "vs.version", "vs.host", "vs.actor", "vs.from", "vs.to", NULL};
  int64_t from, to, vfrom, vto;
  uint64_t max_nodes;
  ember__qtype_t type;
  ember_store_selector_t sel, vsel;
  unsigned st = ember__req_check_params(r, allowed);
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) {
    /* vs.from/vs.to default to the base's own text, so "-1h" means the
     * same instant in both. */
    const char *bf = ember__req_param(r, "from"), *bt = ember__req_param(r, "to");
    st = ember__req_range(r, "vs.from", "vs.to", bf ? bf : "-1h", bt ? bt : "now", &vfrom, &vto);
  }
  if (st == 0) st = ember__api_parse_type(r, &type);
  if (st == 0) st = ember__req_u64(r, "max_nodes", 2000, 0, 1000000, &max_nodes);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  ember__req_selector(r, "vs.", &sel, &vsel);
  ember_profile_t *a = NULL, *b = NULL;
  st = load_profile(r, &sel, from, to, type, &a);
  if (st == 0) st = load_profile(r, &vsel, vfrom, vto, type, &b);
  if (st == 0) {
    if (ember_profile_type(a, 0) != ember_profile_type(b, 0)) {
      st = ember__req_fail(
          r, 400,
          "parameter \"type\": one selection has CPU time and the other only samples "
          "without a known period; compare them with type=samples");
    } else {
      ember_tree_diff_opts_t o = {.base_vi = 0, .vs_vi = 0, .max_nodes = (size_t)max_nodes};
      int rc = ember_export_tree_diff(a, b, &o, &r->body);
      r->ctype = "application/json";
      st = rc == 0 ? (r->status = 200) : ember__req_fail_internal(r, "exporting the diff", rc);
    }
  }
  ember_profile_free(a);
  ember_profile_free(b);
  return st;
}

const ember__api_route_t ember__api_profile_routes[] = {
    {"/api/v1/profile", 0, h_profile, NULL},
    {"/api/v1/diff", 0, h_diff, NULL},
    {NULL, 0, NULL, NULL},
};
