/* The API's in-use heap handlers: /api/v1/heap/growth (the leak finder:
 * which allocation sites hold more between two instants) and
 * /api/v1/heap/timeline (in-use bytes over time, per worker, version or
 * host). In-use values are gauges: "the heap at T" is each series' latest
 * window within EMBER_STORE_GAUGE_LOOKBACK_NS before T, summed across
 * series (include/ember/store.h). docs/api.md describes both. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api_req.h"
#include "fleetq.h"
#include "json.h"

/* --------------------------------------------------------- snapshots -- */

/* The in-use bytes of `sel` at instant `at`: this store's, or the fleet's. */
static unsigned snapshot(ember__req_t *r, const ember_store_selector_t *sel, int64_t at,
                         ember_profile_t **out) {
  int64_t from = at < INT64_MIN + EMBER_STORE_GAUGE_LOOKBACK_NS
                     ? INT64_MIN
                     : at - EMBER_STORE_GAUGE_LOOKBACK_NS;
  int rc;
  if (ember__req_fleet(r)) {
    char partial[sizeof r->partial];
    rc = ember__fleetq_merge(r->env->fleetq, r->env->store, sel, from, at, EMBER_VT_INUSE_BYTES,
                             out, partial, sizeof partial);
    if (rc == 0) ember__req_partial(r, partial);
  } else {
    rc = ember_store_merge(r->env->store, sel, from, at, EMBER_VT_INUSE_BYTES, out);
  }
  return rc == 0 ? 0 : ember__req_fail_internal(r, "reading the in-use heap from the store", rc);
}

/* ------------------------------------------------------------ growth -- */

/* Allocator entry points: the leaf of every heap stack the preload library
 * records is the hook it interposed (malloc, calloc, ...), so it holds
 * everything and names no culprit. A stack's allocation site is its
 * leaf-most frame that is not one of these. */
static bool is_allocator(const char *name) {
  static const char *const names[] = {
      "malloc",         "calloc",         "realloc",         "reallocarray",
      "posix_memalign", "aligned_alloc",  "memalign",        "valloc",
      "pvalloc",        "strdup",         "strndup",         "__libc_malloc",
      "__libc_calloc",  "__libc_realloc", "__libc_memalign", NULL};
  for (size_t i = 0; names[i] != NULL; i++)
    if (strcmp(name, names[i]) == 0) return true;
  /* C++ operator new, demangled or not. */
  return strncmp(name, "operator new", 12) == 0 || strncmp(name, "_Znw", 4) == 0 ||
         strncmp(name, "_Zna", 4) == 0;
}

/* One function (display name and module, as ember_profile_top keys them). */
typedef struct hfn {
  char *name;
  const ember_frame_t *frame; /* its first frame, borrowed from the union profile */
  int64_t from, to;           /* in-use bytes of the stacks that contain it, once per stack */
  int64_t site_growth;        /* growth of the stacks whose allocation site it is */
  size_t stacks;              /* stacks that contain it */
  size_t height;              /* its greatest distance from the root (0 = the root) */
  size_t seen;                /* the last stack counted + 1 */
  bool site;                  /* the allocation site of a growing stack */
} hfn_t;

/* The two snapshots over one stack dictionary. */
typedef struct growth {
  ember_profile_t *u; /* union of both snapshots' stacks (values unused) */
  int64_t *a, *b;     /* per stack of u: bytes at T1 and at T2 */
  size_t cap;
  uint32_t *fn_of; /* per frame of u: its function */
  hfn_t *fns;
  size_t nfns;
} growth_t;

static void growth_free(growth_t *g) {
  for (size_t i = 0; i < g->nfns; i++) ember_free(g->fns[i].name);
  ember_free(g->fns);
  ember_free(g->fn_of);
  ember_free(g->a);
  ember_free(g->b);
  ember_profile_free(g->u);
}

/* Add `src`'s stacks into g->u, their values into side `side` (0: a). */
static int growth_add(growth_t *g, const ember_profile_t *src, int side) {
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  const int64_t zero = 0;
  for (size_t s = 0; s < ember_profile_nstacks(src); s++) {
    const uint32_t *fids;
    const int64_t *v;
    size_t depth;
    int rc = ember_profile_stack(src, (uint32_t)s, &fids, &depth, &v);
    for (size_t d = 0; d < depth && rc == 0; d++)
      rc = ember_profile_intern_frame(g->u, ember_profile_frame(src, fids[d]), &ids[d]);
    uint32_t sid = 0;
    if (rc == 0) rc = ember_profile_add_ids(g->u, ids, depth, &zero, &sid);
    if (rc != 0) return rc;
    if (sid >= g->cap) {
      size_t c = g->cap ? g->cap * 2 : 256;
      while (c <= sid) c *= 2;
      int64_t *a = ember_realloc(g->a, c * sizeof *a);
      if (a == NULL) return -ENOMEM;
      g->a = a;
      int64_t *b = ember_realloc(g->b, c * sizeof *b);
      if (b == NULL) return -ENOMEM;
      g->b = b;
      memset(g->a + g->cap, 0, (c - g->cap) * sizeof *g->a);
      memset(g->b + g->cap, 0, (c - g->cap) * sizeof *g->b);
      g->cap = c;
    }
    int64_t *dst = side == 0 ? &g->a[sid] : &g->b[sid];
    if (__builtin_add_overflow(*dst, v[0], dst)) return -ERANGE;
  }
  return 0;
}

typedef struct fkey {
  char *name;
  const char *module;
  uint32_t frame;
} fkey_t;

static int fkey_cmp(const void *x, const void *y) {
  const fkey_t *a = x, *b = y;
  int c = strcmp(a->name, b->name);
  if (c != 0) return c;
  if (a->module == NULL || b->module == NULL) return (a->module != NULL) - (b->module != NULL);
  return strcmp(a->module, b->module);
}

/* Group u's frames into functions. */
static int growth_functions(growth_t *g) {
  size_t nf = ember_profile_nframes(g->u);
  fkey_t *k = ember_calloc(nf ? nf : 1, sizeof *k);
  g->fn_of = ember_malloc((nf ? nf : 1) * sizeof *g->fn_of);
  g->fns = ember_calloc(nf ? nf : 1, sizeof *g->fns);
  int rc = k && g->fn_of && g->fns ? 0 : -ENOMEM;
  for (size_t f = 0; f < nf && rc == 0; f++) {
    const ember_frame_t *fr = ember_profile_frame(g->u, (uint32_t)f);
    size_t len = ember_frame_name(fr, NULL, 0);
    k[f].name = ember_malloc(len + 1);
    if (k[f].name == NULL) {
      rc = -ENOMEM;
      break;
    }
    ember_frame_name(fr, k[f].name, len + 1);
    k[f].module = fr->module;
    k[f].frame = (uint32_t)f;
  }
  if (rc == 0 && nf > 1) qsort(k, nf, sizeof *k, fkey_cmp);
  for (size_t i = 0; i < nf && rc == 0; i++) {
    hfn_t *last = g->nfns ? &g->fns[g->nfns - 1] : NULL;
    fkey_t cur = {.name = last ? last->name : NULL, .module = last ? last->frame->module : NULL};
    if (last == NULL || fkey_cmp(&cur, &k[i]) != 0) {
      hfn_t *fn = &g->fns[g->nfns++];
      fn->name = k[i].name;
      k[i].name = NULL; /* moved */
      fn->frame = ember_profile_frame(g->u, k[i].frame);
    }
    g->fn_of[k[i].frame] = (uint32_t)(g->nfns - 1);
  }
  for (size_t i = 0; k != NULL && i < nf; i++) ember_free(k[i].name);
  ember_free(k);
  return rc;
}

/* Per function: its bytes at both instants, stacks, height and site growth. */
static void growth_sum(growth_t *g) {
  for (size_t s = 0; s < ember_profile_nstacks(g->u); s++) {
    const uint32_t *fids;
    const int64_t *v;
    size_t depth;
    if (ember_profile_stack(g->u, (uint32_t)s, &fids, &depth, &v) != 0) continue;
    int64_t a = g->a[s], b = g->b[s];
    if (a == 0 && b == 0) continue;
    bool site_done = false;
    for (size_t d = 0; d < depth; d++) {
      hfn_t *fn = &g->fns[g->fn_of[fids[d]]];
      size_t height = depth - 1 - d;
      if (height > fn->height) fn->height = height;
      if (!site_done && !is_allocator(fn->name)) {
        site_done = true;
        /* Sums of in-use bytes stay far below INT64_MAX (the store checks
         * each sum); saturate rather than wrap all the same. */
        if (__builtin_add_overflow(fn->site_growth, b - a, &fn->site_growth))
          fn->site_growth = INT64_MAX;
        if (b > a) fn->site = true;
      }
      if (fn->seen == s + 1) continue; /* recursion: once per stack */
      fn->seen = s + 1;
      fn->stacks++;
      if (__builtin_add_overflow(fn->from, a, &fn->from)) fn->from = INT64_MAX;
      if (__builtin_add_overflow(fn->to, b, &fn->to)) fn->to = INT64_MAX;
    }
  }
}

/* The ranking (docs/api.md, "Heap growth"): allocation sites that grew
 * first, by their own growth; then every other function by the growth of
 * the stacks through it. A function on every stack (main, _start) grows by
 * the sum of every site's growth and would otherwise outrank the one
 * culprit with the noise of the others. Ties: fewer stacks, then farther
 * from the root (the more specific first), then by name. */
static int fn_rank(const void *x, const void *y) {
  const hfn_t *a = x, *b = y;
  if (a->site != b->site) return a->site ? -1 : 1;
  int64_t ka = a->site ? a->site_growth : a->to - a->from;
  int64_t kb = b->site ? b->site_growth : b->to - b->from;
  if (ka != kb) return ka > kb ? -1 : 1;
  if (a->stacks != b->stacks) return a->stacks < b->stacks ? -1 : 1;
  if (a->height != b->height) return a->height > b->height ? -1 : 1;
  return strcmp(a->name, b->name);
}

typedef struct hstack {
  uint32_t id;
  int64_t growth;
} hstack_t;

static int stack_rank(const void *x, const void *y) {
  const hstack_t *a = x, *b = y;
  if (a->growth != b->growth) return a->growth > b->growth ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

static int set_frame(json_t *o, const char *name, const ember_frame_t *f) {
  int rc = ember__json_set(o, "function", ember__json_str(name));
  if (rc == 0 && f->file != NULL) rc = ember__json_set(o, "file", ember__json_str(f->file));
  if (rc == 0 && f->module != NULL) rc = ember__json_set(o, "module", ember__json_str(f->module));
  return rc;
}

static int growth_json(growth_t *g, json_t *doc, double seconds, size_t limit) {
  json_t *fns = ember__req_jarray_in(doc, "functions");
  json_t *sts = ember__req_jarray_in(doc, "stacks");
  if (fns == NULL || sts == NULL) return -ENOMEM;
  qsort(g->fns, g->nfns, sizeof *g->fns, fn_rank);
  /* fn_of indexes the unsorted array: the stacks below use names only. */
  int rc = 0;
  size_t shown = 0;
  for (size_t i = 0; i < g->nfns && shown < limit && rc == 0; i++) {
    const hfn_t *fn = &g->fns[i];
    if (fn->to <= 0) continue; /* holds nothing now: not a leak */
    json_t *o = json_object();
    rc = ember__json_push(fns, o);
    if (rc == 0) rc = set_frame(o, fn->name, fn->frame);
    if (rc == 0) rc = ember__json_set(o, "bytes_from", json_integer(fn->from));
    if (rc == 0) rc = ember__json_set(o, "bytes_to", json_integer(fn->to));
    if (rc == 0) rc = ember__json_set(o, "growth_bytes", json_integer(fn->to - fn->from));
    if (rc == 0)
      rc = ember__json_set(o, "site_growth_bytes", json_integer(fn->site ? fn->site_growth : 0));
    if (rc == 0)
      rc = ember__json_set(o, "per_second", json_real((double)(fn->to - fn->from) / seconds));
    shown++;
  }
  size_t ns = ember_profile_nstacks(g->u), k = 0;
  hstack_t *st = ember_malloc((ns ? ns : 1) * sizeof *st);
  if (st == NULL) return -ENOMEM;
  for (size_t s = 0; s < ns; s++)
    if (g->b[s] > 0) st[k++] = (hstack_t){(uint32_t)s, g->b[s] - g->a[s]};
  qsort(st, k, sizeof *st, stack_rank);
  char name[512];
  for (size_t i = 0; i < k && i < limit && rc == 0; i++) {
    const uint32_t *fids;
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(g->u, st[i].id, &fids, &depth, &v);
    json_t *o = json_object(), *frames = NULL;
    if (rc == 0) rc = ember__json_push(sts, o);
    if (rc == 0 && (frames = ember__req_jarray_in(o, "frames")) == NULL) rc = -ENOMEM;
    for (size_t d = 0; d < depth && rc == 0; d++) {
      const ember_frame_t *f = ember_profile_frame(g->u, fids[d]);
      ember_frame_name(f, name, sizeof name);
      json_t *fo = json_object();
      rc = ember__json_push(frames, fo);
      if (rc == 0) rc = set_frame(fo, name, f);
    }
    if (rc == 0) rc = ember__json_set(o, "bytes_from", json_integer(g->a[st[i].id]));
    if (rc == 0) rc = ember__json_set(o, "bytes_to", json_integer(g->b[st[i].id]));
    if (rc == 0) rc = ember__json_set(o, "growth_bytes", json_integer(st[i].growth));
    if (rc == 0) rc = ember__json_set(o, "per_second", json_real((double)st[i].growth / seconds));
  }
  ember_free(st);
  return rc;
}

static unsigned h_growth(ember__req_t *r) {
  static const char *const allowed[] = {"worker", "version", "host",  "actor",
                                        "from",   "to",      "limit", NULL};
  int64_t from, to;
  uint64_t limit;
  ember_store_selector_t sel;
  unsigned st = ember__req_check_params(r, allowed);
  if (st == 0 && ember__req_param(r, "worker") == NULL)
    st = ember__req_fail(r, 400,
                         "parameter \"worker\" is required: the heap growth of which worker?");
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) st = ember__req_u64(r, "limit", 50, 1, 1000, &limit);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);
  growth_t g = {0};
  ember_profile_t *a = NULL, *b = NULL;
  json_t *doc = NULL;
  st = snapshot(r, &sel, from, &a);
  if (st == 0) st = snapshot(r, &sel, to, &b);
  if (st != 0) goto cleanup;
  ember_value_type_t vt = EMBER_VT_INUSE_BYTES;
  int rc = ember_profile_new(&vt, 1, &g.u);
  if (rc == 0) rc = growth_add(&g, a, 0);
  if (rc == 0) rc = growth_add(&g, b, 1);
  if (rc == 0) rc = growth_functions(&g);
  if (rc == 0) growth_sum(&g);
  double seconds = (double)((uint64_t)to - (uint64_t)from) / 1e9;
  if (rc == 0) {
    doc = ember__req_range_doc(from, to);
    rc = doc != NULL ? 0 : -ENOMEM;
  }
  if (rc == 0) rc = ember__json_set(doc, "from", json_integer(from));
  if (rc == 0) rc = ember__json_set(doc, "to", json_integer(to));
  if (rc == 0) rc = ember__json_set(doc, "seconds", json_real(seconds));
  if (rc == 0) rc = ember__json_set(doc, "bytes_from", json_integer(ember_profile_total(a, 0)));
  if (rc == 0) rc = ember__json_set(doc, "bytes_to", json_integer(ember_profile_total(b, 0)));
  if (rc == 0) rc = growth_json(&g, doc, seconds, (size_t)limit);
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "ranking the heap growth", rc);
cleanup:
  json_decref(doc);
  growth_free(&g);
  ember_profile_free(a);
  ember_profile_free(b);
  return st;
}

/* ---------------------------------------------------------- timeline -- */

static const char *label_of(const ember_labels_t *l, const char *field) {
  if (strcmp(field, "worker") == 0) return l->worker;
  if (strcmp(field, "version") == 0) return l->version;
  return l->host;
}

typedef struct tl_group {
  const char *name; /* borrowed from the timelines' series; NULL = the label is absent */
  int64_t *vals;
} tl_group_t;

static int group_cmp(const void *x, const void *y) {
  const tl_group_t *a = x, *b = y;
  if (a->name == NULL || b->name == NULL) return (a->name != NULL) - (b->name != NULL);
  return strcmp(a->name, b->name);
}

/* raw=TYPE (a peer's local=1 question, fleetq.h): every series with its
 * values and the window start of each. */
static unsigned answer_raw(ember__req_t *r, const ember_store_gauge_timelines_t *tl) {
  json_t *doc = json_object(), *arr = doc ? ember__req_jarray_in(doc, "series") : NULL;
  int rc = arr != NULL ? 0 : -ENOMEM;
  for (size_t i = 0; i < tl->nseries && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    if (rc == 0) rc = ember__req_set_labels(o, &tl->series[i].labels);
    if (rc == 0)
      rc = ember__json_set(o, "values",
                           ember__req_int_array(tl->values + i * tl->nbuckets, tl->nbuckets));
    if (rc == 0)
      rc = ember__json_set(o, "at_ns",
                           ember__req_int_array(tl->at_ns + i * tl->nbuckets, tl->nbuckets));
  }
  unsigned st = rc == 0 ? ember__req_answer_json(r, doc)
                        : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  return st;
}

static unsigned h_timeline(ember__req_t *r) {
  static const char *const allowed[] = {"worker", "version",  "host", "actor", "from", "to",
                                        "step",   "group_by", "type", "raw",   NULL};
  int64_t from, to, step;
  uint64_t nb;
  ember_store_selector_t sel;
  unsigned st = ember__req_check_params(r, allowed);
  const char *raw = ember__req_param(r, "raw");
  ember_value_type_t vt = EMBER_VT_INUSE_BYTES;
  if (st == 0 && raw != NULL &&
      (!r->local || ember__fleetq_raw_type(raw, &vt) != 0 || !ember_value_type_is_gauge(vt)))
    st = ember__req_fail(r, 400,
                         "parameter \"raw\" is for peer collectors: raw=inuse_bytes or "
                         "raw=inuse_objects with local=1");
  if (st == 0 && raw == NULL && ember__req_param(r, "worker") == NULL)
    st = ember__req_fail(r, 400,
                         "parameter \"worker\" is required: the heap timeline of which worker?");
  const char *type = ember__req_param(r, "type");
  if (st == 0 && type != NULL) {
    if (strcmp(type, "inuse_bytes") == 0)
      vt = EMBER_VT_INUSE_BYTES;
    else if (strcmp(type, "inuse_objects") == 0)
      vt = EMBER_VT_INUSE_OBJECTS;
    else
      st = ember__req_fail(r, 400,
                           "parameter \"type\": \"%.64s\" is not an in-use type; use inuse_bytes "
                           "or inuse_objects",
                           type);
  }
  const char *group_by = ember__req_param(r, "group_by");
  if (st == 0 && group_by != NULL && strcmp(group_by, "version") != 0 &&
      strcmp(group_by, "host") != 0)
    st = ember__req_fail(r, 400,
                         "parameter \"group_by\": \"%.64s\" is not a label to group by; use "
                         "version or host",
                         group_by);
  if (group_by == NULL) group_by = "worker";
  if (st == 0) st = ember__req_range(r, "from", "to", "-1h", "now", &from, &to);
  if (st == 0) st = ember__req_step(r, from, to, &step, &nb);
  if (st != 0) return st;
  ember__req_selector(r, "", NULL, &sel);

  ember_store_gauge_timelines_t *tl = NULL;
  int rc;
  if (ember__req_fleet(r)) {
    char partial[sizeof r->partial];
    rc = ember__fleetq_gauge_timelines(r->env->fleetq, r->env->store, &sel, vt, from, to, step,
                                       EMBER__TIMELINE_MAX_CELLS, &tl, partial, sizeof partial);
    if (rc == 0) ember__req_partial(r, partial);
  } else {
    rc = ember_store_gauge_timelines(r->env->store, &sel, vt, from, to, step,
                                     EMBER__TIMELINE_MAX_CELLS, &tl);
  }
  if (rc == EMBER_ETOOBIG)
    return ember__req_fail(r, 400,
                           "the selection holds more than %zu series, too many for one timeline "
                           "of %llu buckets: narrow the selector (version, host, actor) or "
                           "raise step",
                           EMBER__TIMELINE_MAX_CELLS / (size_t)nb, (unsigned long long)nb);
  if (rc != 0) return ember__req_fail_internal(r, "reading the heap timeline from the store", rc);
  if (raw != NULL) {
    st = answer_raw(r, tl);
    ember_store_gauge_timelines_free(tl);
    return st;
  }

  /* Series of one group add up: each is its own process or label set. */
  size_t n = tl->nseries, nbk = tl->nbuckets, ng = 0;
  tl_group_t *groups = ember_calloc(n ? n : 1, sizeof *groups);
  json_t *doc = NULL;
  rc = groups != NULL ? 0 : -ENOMEM;
  for (size_t i = 0; i < n && rc == 0; i++) {
    groups[i].name = label_of(&tl->series[i].labels, group_by);
    groups[i].vals = tl->values + i * nbk;
  }
  if (rc == 0 && n > 1) qsort(groups, n, sizeof *groups, group_cmp);
  for (size_t i = 0; i < n && rc == 0; i++) {
    if (ng > 0 && group_cmp(&groups[ng - 1], &groups[i]) == 0) {
      /* Summed into the first row of the group (the timelines' own array). */
      for (size_t b = 0; b < nbk && rc == 0; b++)
        if (__builtin_add_overflow(groups[ng - 1].vals[b], groups[i].vals[b],
                                   &groups[ng - 1].vals[b]))
          rc = -ERANGE;
    } else {
      groups[ng++] = groups[i];
    }
  }
  if (rc == 0) {
    doc = ember__req_range_doc(from, to);
    rc = doc != NULL ? 0 : -ENOMEM;
  }
  if (rc == 0) rc = ember__json_set(doc, "step_ms", json_integer(ember__req_ms(step)));
  if (rc == 0)
    rc = ember__json_set(doc, "type",
                         json_string(vt == EMBER_VT_INUSE_BYTES ? "inuse_bytes" : "inuse_objects"));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0) rc = ember__json_set(doc, "group_by", json_string(group_by));
  if (rc == 0) rc = ember__json_set(doc, "total", ember__req_int_array(tl->total, nbk));
  json_t *arr = NULL;
  if (rc == 0 && (arr = ember__req_jarray_in(doc, "groups")) == NULL) rc = -ENOMEM;
  for (size_t i = 0; i < ng && rc == 0; i++) {
    json_t *o = json_object();
    rc = ember__json_push(arr, o);
    if (rc == 0)
      rc = ember__json_set(o, group_by,
                           groups[i].name ? ember__json_str(groups[i].name) : json_null());
    if (rc == 0) rc = ember__json_set(o, "values", ember__req_int_array(groups[i].vals, nbk));
  }
  st = rc == 0 ? ember__req_answer_json(r, doc)
               : ember__req_fail_internal(r, "building the answer", rc);
  json_decref(doc);
  ember_free(groups);
  ember_store_gauge_timelines_free(tl);
  return st;
}

const ember__api_route_t ember__api_heap_routes[] = {
    {"/api/v1/heap/growth", 0, h_growth, NULL},
    {"/api/v1/heap/timeline", 0, h_timeline, NULL},
    {NULL, 0, NULL, NULL},
};
