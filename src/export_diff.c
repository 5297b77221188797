/* The diff tree: two profiles merged into one call tree whose nodes carry
 * both totals, for the dashboard's comparison view and /api/v1/diff. See
 * include/ember/export.h and docs/internals/export.md. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ember/export.h"
#include "export.h"
#include "htab.h"
#include "json.h"
#include "utf8.h"

#define NO_PARENT UINT32_MAX

/* A function of either profile, keyed by (display name, module) so that the
 * same function lines up across the two, whose frame ids are unrelated. */
typedef struct dfn {
  const char *name;   /* borrowed from one profile's names block */
  const char *module; /* borrowed from that profile; may be NULL */
  ember_frame_kind_t kind;
  uint64_t hash;
} dfn_t;

typedef struct dnode {
  uint32_t parent, fn, depth;
  int64_t self[2], total[2];
  uint64_t hash;
} dnode_t;

typedef struct diff {
  dfn_t *fns;
  size_t nfns, fncap;
  ember__htab_t fn_index;
  dnode_t *nodes;
  size_t n, cap;
  ember__htab_t child_index;
} diff_t;

typedef struct fn_key {
  const diff_t *d;
  const char *name, *module;
} fn_key_t;

static bool same_str(const char *a, const char *b) {
  if (a == NULL || b == NULL) return a == b;
  return strcmp(a, b) == 0;
}

static bool fn_eq(const void *ctx, uint32_t idx) {
  const fn_key_t *k = ctx;
  return same_str(k->d->fns[idx].name, k->name) && same_str(k->d->fns[idx].module, k->module);
}

static uint64_t fn_rehash(const void *ctx, uint32_t idx) {
  const fn_key_t *k = ctx;
  return k->d->fns[idx].hash;
}

/* The global function id of (name, module), made if new. */
static int fn_intern(diff_t *d, const char *name, const ember_frame_t *f, uint32_t *out) {
  uint64_t h = ember__hash_bytes(name, strlen(name), 0x64f1);
  h = ember__hash_mix(h, f->module ? ember__hash_bytes(f->module, strlen(f->module), 7) : 0);
  fn_key_t key = {d, name, f->module};
  int64_t found = ember__htab_find(&d->fn_index, h, fn_eq, &key);
  if (found >= 0) {
    *out = (uint32_t)found;
    return 0;
  }
  if (d->nfns >= NO_PARENT - 1) return EMBER_ETOOBIG;
  if (d->nfns == d->fncap) {
    size_t ncap = d->fncap ? d->fncap * 2 : 256;
    dfn_t *nf = ember_realloc(d->fns, ncap * sizeof *nf);
    if (nf == NULL) return -ENOMEM;
    d->fns = nf;
    d->fncap = ncap;
  }
  d->fns[d->nfns] = (dfn_t){name, f->module, f->kind, h};
  int rc = ember__htab_insert(&d->fn_index, h, (uint32_t)d->nfns, fn_rehash, &key);
  if (rc != 0) return rc;
  *out = (uint32_t)d->nfns++;
  return 0;
}

typedef struct child_key {
  const dnode_t *nodes;
  uint32_t parent, fn;
} child_key_t;

static bool child_eq(const void *ctx, uint32_t idx) {
  const child_key_t *k = ctx;
  return k->nodes[idx].parent == k->parent && k->nodes[idx].fn == k->fn;
}

static uint64_t child_rehash(const void *ctx, uint32_t idx) {
  const child_key_t *k = ctx;
  return k->nodes[idx].hash;
}

static int node_child(diff_t *d, uint32_t parent, uint32_t fn, uint32_t *out) {
  uint64_t h = ember__hash_mix(ember__hash_mix(0xd1ff, parent), fn);
  child_key_t key = {d->nodes, parent, fn};
  int64_t found = ember__htab_find(&d->child_index, h, child_eq, &key);
  if (found >= 0) {
    *out = (uint32_t)found;
    return 0;
  }
  if (d->n >= NO_PARENT - 1) return EMBER_ETOOBIG;
  if (d->n == d->cap) {
    size_t ncap = d->cap * 2;
    dnode_t *nn = ember_realloc(d->nodes, ncap * sizeof *nn);
    if (nn == NULL) return -ENOMEM;
    d->nodes = nn;
    d->cap = ncap;
  }
  d->nodes[d->n] = (dnode_t){parent, fn, d->nodes[parent].depth + 1, {0, 0}, {0, 0}, h};
  key.nodes = d->nodes;
  int rc = ember__htab_insert(&d->child_index, h, (uint32_t)d->n, child_rehash, &key);
  if (rc != 0) return rc;
  *out = (uint32_t)d->n++;
  return 0;
}

/* Add every stack of `p` with a nonzero value `vi` into side `k`. */
static int diff_add(diff_t *d, const ember_profile_t *p, const ember__names_t *names, size_t vi,
                    int k) {
  size_t nframes = ember_profile_nframes(p);
  uint32_t *fn_of = ember_malloc((nframes ? nframes : 1) * sizeof *fn_of);
  if (fn_of == NULL) return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < nframes && rc == 0; i++)
    rc = fn_intern(d, names->name[i], ember_profile_frame(p, (uint32_t)i), &fn_of[i]);
  for (size_t s = 0; s < ember_profile_nstacks(p) && rc == 0; s++) {
    const uint32_t *ids;
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(p, (uint32_t)s, &ids, &depth, &v);
    if (rc != 0 || v[vi] == 0) continue;
    uint32_t cur = 0;
    d->nodes[0].total[k] = ember__sat_add(d->nodes[0].total[k], v[vi]);
    for (size_t i = depth; i-- > 0 && rc == 0;) {
      rc = node_child(d, cur, fn_of[ids[i]], &cur);
      if (rc == 0) d->nodes[cur].total[k] = ember__sat_add(d->nodes[cur].total[k], v[vi]);
    }
    if (rc == 0) d->nodes[cur].self[k] = ember__sat_add(d->nodes[cur].self[k], v[vi]);
  }
  ember_free(fn_of);
  return rc;
}

static int64_t weight(const dnode_t *nd) {
  return nd->total[0] > nd->total[1] ? nd->total[0] : nd->total[1];
}

typedef struct rank {
  int64_t w;
  uint32_t depth, idx;
} rank_t;

/* Heaviest first (the larger of the two totals); ties by depth, then age.
 * A parent's totals are each at least its child's, and it is shallower and
 * older, so any prefix of this order is a tree hanging from the root. */
static int rank_cmp(const void *a, const void *b) {
  const rank_t *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

typedef struct sib {
  uint32_t parent, idx;
  int64_t w;
  const char *name, *module;
} sib_t;

static int sib_cmp(const void *a, const void *b) {
  const sib_t *x = a, *y = b;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  int c = strcmp(x->name, y->name);
  if (c == 0 && !same_str(x->module, y->module)) {
    if (x->module == NULL || y->module == NULL) return x->module == NULL ? -1 : 1;
    c = strcmp(x->module, y->module);
  }
  if (c == 0) c = x->idx < y->idx ? -1 : x->idx > y->idx;
  return c;
}

static const char *kind_name(ember_frame_kind_t k) {
  switch (k) {
  case EMBER_FRAME_NATIVE: return "native";
  case EMBER_FRAME_KERNEL: return "kernel";
  case EMBER_FRAME_JIT: return "jit";
  }
  return "native";
}

static json_t *node_json(const diff_t *d, size_t i) {
  const dnode_t *nd = &d->nodes[i];
  json_t *o = json_object();
  if (o == NULL) return NULL;
  int rc;
  if (i == 0) {
    rc = ember__json_set(o, "name", json_string("all"));
  } else {
    const dfn_t *f = &d->fns[nd->fn];
    rc = ember__json_set(o, "name", ember__json_str(f->name));
    if (rc == 0 && f->module != NULL) rc = ember__json_set(o, "module", ember__json_str(f->module));
    if (rc == 0) rc = ember__json_set(o, "kind", json_string(kind_name(f->kind)));
  }
  if (rc == 0) rc = ember__json_set(o, "base", json_integer(nd->total[0]));
  if (rc == 0) rc = ember__json_set(o, "vs", json_integer(nd->total[1]));
  if (rc == 0) rc = ember__json_set(o, "base_self", json_integer(nd->self[0]));
  if (rc == 0) rc = ember__json_set(o, "vs_self", json_integer(nd->self[1]));
  if (rc == 0) rc = ember__json_set(o, "children", json_array());
  if (rc != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int ember_export_tree_diff(const ember_profile_t *base, const ember_profile_t *vs,
                           const ember_tree_diff_opts_t *opts, ember_buf_t *out) {
  if (base == NULL || vs == NULL || opts == NULL || out == NULL ||
      opts->base_vi >= ember_profile_ntypes(base) || opts->vs_vi >= ember_profile_ntypes(vs))
    return -EINVAL;
  ember_value_type_t vt = ember_profile_type(base, opts->base_vi);
  if (vt != ember_profile_type(vs, opts->vs_vi)) return EMBER_EMISMATCH;

  int rc = 0;
  size_t start = out->len;
  ember__names_t names[2] = {{NULL, NULL, 0}, {NULL, NULL, 0}};
  diff_t d = {0};
  bool *keep = NULL;
  sib_t *sibs = NULL;
  uint32_t *child_start = NULL, *nchildren = NULL;
  json_t **objs = NULL;
  json_t *doc = NULL;
  ember__htab_init(&d.fn_index);
  ember__htab_init(&d.child_index);

  rc = ember__names_build(base, &names[0]);
  if (rc == 0) rc = ember__names_build(vs, &names[1]);
  if (rc != 0) goto cleanup;
  d.cap = 1024;
  d.nodes = ember_malloc(d.cap * sizeof *d.nodes);
  if (d.nodes == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  d.nodes[0] = (dnode_t){NO_PARENT, 0, 0, {0, 0}, {0, 0}, 0};
  d.n = 1;
  rc = diff_add(&d, base, &names[0], opts->base_vi, 0);
  if (rc == 0) rc = diff_add(&d, vs, &names[1], opts->vs_vi, 1);
  if (rc != 0) goto cleanup;
  ember__htab_free(&d.child_index);
  ember__htab_free(&d.fn_index);

  keep = ember_malloc(d.n * sizeof *keep);
  sibs = ember_malloc(d.n * sizeof *sibs);
  child_start = ember_calloc(d.n, sizeof *child_start);
  nchildren = ember_calloc(d.n, sizeof *nchildren);
  objs = ember_calloc(d.n, sizeof *objs);
  if (keep == NULL || sibs == NULL || child_start == NULL || nchildren == NULL || objs == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  bool truncated = opts->max_nodes != 0 && d.n > opts->max_nodes;
  for (size_t i = 0; i < d.n; i++) keep[i] = true;
  if (truncated) {
    /* Keep the heaviest max_nodes nodes and fold each dropped subtree into
     * its kept parent's self values, so every kept total stays exact. */
    rank_t *r = ember_malloc(d.n * sizeof *r);
    if (r == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    for (size_t i = 0; i < d.n; i++)
      r[i] = (rank_t){weight(&d.nodes[i]), d.nodes[i].depth, (uint32_t)i};
    qsort(r, d.n, sizeof *r, rank_cmp);
    for (size_t i = 0; i < d.n; i++) keep[r[i].idx] = i < opts->max_nodes;
    ember_free(r);
    for (size_t i = 1; i < d.n; i++) {
      dnode_t *parent = &d.nodes[d.nodes[i].parent];
      if (keep[i] || !keep[d.nodes[i].parent]) continue;
      for (int k = 0; k < 2; k++)
        parent->self[k] = ember__sat_add(parent->self[k], d.nodes[i].total[k]);
    }
  }

  size_t nsibs = 0;
  for (size_t i = 1; i < d.n; i++) {
    if (!keep[i]) continue;
    const dnode_t *nd = &d.nodes[i];
    sibs[nsibs++] =
        (sib_t){nd->parent, (uint32_t)i, weight(nd), d.fns[nd->fn].name, d.fns[nd->fn].module};
  }
  qsort(sibs, nsibs, sizeof *sibs, sib_cmp);
  for (size_t i = nsibs; i-- > 0;) {
    child_start[sibs[i].parent] = (uint32_t)i;
    nchildren[sibs[i].parent]++;
  }

  /* Bottom-up without recursion: children are always made after their
   * parent, so walking the node array backwards meets them first. */
  for (size_t i = d.n; i-- > 0;) {
    if (!keep[i]) continue;
    objs[i] = node_json(&d, i);
    if (objs[i] == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    json_t *children = json_object_get(objs[i], "children");
    for (size_t c = 0; c < nchildren[i] && rc == 0; c++) {
      uint32_t ci = sibs[child_start[i] + c].idx;
      json_t *co = objs[ci];
      objs[ci] = NULL; /* the array owns it now, even if appending fails */
      if (json_array_append_new(children, co) != 0) rc = -ENOMEM;
    }
    if (rc != 0) goto cleanup;
  }

  doc = json_object();
  if (doc == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  json_t *bt = json_object(), *vt_obj = json_object();
  rc = ember__json_set(doc, "version", json_integer(1));
  if (rc == 0) rc = ember__json_set(doc, "type", json_string(ember_value_type_name(vt)));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0 && bt != NULL) rc = ember__json_set(bt, "total", json_integer(d.nodes[0].total[0]));
  if (rc == 0 && vt_obj != NULL)
    rc = ember__json_set(vt_obj, "total", json_integer(d.nodes[0].total[1]));
  /* ember__json_set takes both references whatever happens. */
  int rc2 = ember__json_set(doc, "base", bt);
  int rc3 = ember__json_set(doc, "vs", vt_obj);
  if (rc == 0) rc = rc2 != 0 ? rc2 : rc3;
  if (rc == 0) rc = ember__json_set(doc, "nodes", json_integer((json_int_t)(nsibs + 1)));
  if (rc == 0) rc = ember__json_set(doc, "truncated", json_boolean(truncated));
  if (rc == 0) {
    rc = ember__json_set(doc, "root", objs[0]);
    objs[0] = NULL;
  }
  if (rc == 0) rc = ember__json_dump(doc, out);

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  if (objs != NULL) {
    for (size_t i = 0; i < d.n; i++) json_decref(objs[i]);
  }
  json_decref(doc);
  ember_free(objs);
  ember_free(nchildren);
  ember_free(child_start);
  ember_free(sibs);
  ember_free(keep);
  ember_free(d.nodes);
  ember_free(d.fns);
  ember__htab_free(&d.child_index);
  ember__htab_free(&d.fn_index);
  ember__names_free(&names[1]);
  ember__names_free(&names[0]);
  return rc;
}
