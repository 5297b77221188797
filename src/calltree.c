/* The call tree shared by the tree and diff exports. See calltree.h. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "calltree.h"
#include "ember/ember.h"
#include "export.h"
#include "json.h"

#define NO_PARENT UINT32_MAX

int ember__calltree_init(ember__calltree_t *t, size_t ncols) {
  /* Both callers pass a constant: 1 for a profile, 2 for a diff. */
  assert(ncols >= 1 && ncols <= EMBER__CT_MAXCOLS);
  *t = (ember__calltree_t){NULL, 0, 0, ncols, {NULL, 0, 0}, NULL, 0, false};
  ember__htab_init(&t->index);
  t->cap = 1024;
  t->nodes = ember_malloc(t->cap * sizeof *t->nodes);
  if (t->nodes == NULL) return -ENOMEM;
  t->nodes[0] = (ember__ctnode_t){NO_PARENT, 0, 0, {0, 0}, {0, 0}, 0};
  t->n = 1;
  return 0;
}

void ember__calltree_free(ember__calltree_t *t) {
  ember_free(t->keep);
  ember_free(t->nodes);
  ember__htab_free(&t->index);
  t->keep = NULL;
  t->nodes = NULL;
  t->n = t->cap = 0;
}

typedef struct child_key {
  const ember__ctnode_t *nodes;
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

/* The child of `parent` for function `fn`, made if new. */
static int tree_child(ember__calltree_t *t, uint32_t parent, uint32_t fn, uint32_t *out) {
  uint64_t h = ember__hash_mix(ember__hash_mix(0x74ee, parent), fn);
  child_key_t key = {t->nodes, parent, fn};
  int64_t found = ember__htab_find(&t->index, h, child_eq, &key);
  if (found >= 0) {
    *out = (uint32_t)found;
    return 0;
  }
  if (t->n >= NO_PARENT - 1) return EMBER_ETOOBIG;
  if (t->n == t->cap) {
    size_t ncap = t->cap * 2;
    ember__ctnode_t *nn = ember_realloc(t->nodes, ncap * sizeof *nn);
    if (nn == NULL) return -ENOMEM;
    t->nodes = nn;
    t->cap = ncap;
  }
  t->nodes[t->n] = (ember__ctnode_t){parent, fn, t->nodes[parent].depth + 1, {0, 0}, {0, 0}, h};
  key.nodes = t->nodes;
  int rc = ember__htab_insert(&t->index, h, (uint32_t)t->n, child_rehash, &key);
  if (rc != 0) return rc;
  *out = (uint32_t)t->n++;
  return 0;
}

int ember__calltree_add(ember__calltree_t *t, size_t col, const ember_profile_t *p, size_t vi,
                        const uint32_t *fn_of) {
  /* Callers add their own columns, which init sized. */
  assert(col < t->ncols && t->keep == NULL);
  for (size_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    const int64_t *v;
    size_t depth;
    int rc = ember_profile_stack(p, (uint32_t)s, &ids, &depth, &v);
    if (rc != 0) return rc;
    if (v[vi] == 0) continue;
    uint32_t cur = 0;
    t->nodes[0].total[col] = ember__sat_add(t->nodes[0].total[col], v[vi]);
    for (size_t d = depth; d-- > 0;) {
      rc = tree_child(t, cur, fn_of[ids[d]], &cur);
      if (rc != 0) return rc;
      t->nodes[cur].total[col] = ember__sat_add(t->nodes[cur].total[col], v[vi]);
    }
    t->nodes[cur].self[col] = ember__sat_add(t->nodes[cur].self[col], v[vi]);
  }
  return 0;
}

static int64_t weight(const ember__calltree_t *t, const ember__ctnode_t *nd) {
  int64_t w = nd->total[0];
  for (size_t k = 1; k < t->ncols; k++)
    if (nd->total[k] > w) w = nd->total[k];
  return w;
}

/* For the cap: nodes in the order they are kept. */
typedef struct rank {
  int64_t w;
  uint32_t depth, idx;
} rank_t;

/* Heaviest first; on ties the shallower node, then the older one. Each of a
 * parent's totals is at least its child's (so is its weight) and a parent
 * is both shallower and older, so every parent comes before its children
 * and any prefix of this order is a tree hanging from the root. */
static int rank_cmp(const void *a, const void *b) {
  const rank_t *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int ember__calltree_cap(ember__calltree_t *t, size_t max_nodes) {
  /* Capping twice would fold dropped subtrees twice. */
  assert(t->keep == NULL);
  /* The child index is only needed while adding. */
  ember__htab_free(&t->index);
  bool *keep = ember_malloc(t->n * sizeof *keep);
  if (keep == NULL) return -ENOMEM;
  bool trunc = max_nodes != 0 && t->n > max_nodes;
  if (!trunc) {
    for (size_t i = 0; i < t->n; i++) keep[i] = true;
  } else {
    rank_t *r = ember_malloc(t->n * sizeof *r);
    if (r == NULL) {
      ember_free(keep);
      return -ENOMEM;
    }
    for (size_t i = 0; i < t->n; i++)
      r[i] = (rank_t){weight(t, &t->nodes[i]), t->nodes[i].depth, (uint32_t)i};
    qsort(r, t->n, sizeof *r, rank_cmp);
    for (size_t i = 0; i < t->n; i++) keep[r[i].idx] = i < max_nodes;
    ember_free(r);
    for (size_t i = 1; i < t->n; i++) {
      ember__ctnode_t *parent = &t->nodes[t->nodes[i].parent];
      if (keep[i] || !keep[t->nodes[i].parent]) continue;
      for (size_t k = 0; k < t->ncols; k++)
        parent->self[k] = ember__sat_add(parent->self[k], t->nodes[i].total[k]);
    }
  }
  t->keep = keep;
  t->truncated = trunc;
  t->nkept = trunc ? max_nodes : t->n;
  return 0;
}

/* For sorting siblings: grouped by parent, then heaviest, then name. */
typedef struct sib {
  uint32_t parent, idx;
  int64_t w;
  const char *name, *module;
} sib_t;

/* NULL (no module) sorts first. */
static int str_cmp_null(const char *a, const char *b) {
  if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

static int sib_cmp(const void *a, const void *b) {
  const sib_t *x = a, *y = b;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  int c = strcmp(x->name, y->name);
  if (c == 0) c = str_cmp_null(x->module, y->module);
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

/* One node's object with everything but its children. */
static json_t *node_json(const ember__calltree_t *t, size_t i, const ember__ctops_t *ops,
                         const void *ctx) {
  const ember__ctnode_t *nd = &t->nodes[i];
  json_t *o = json_object();
  if (o == NULL) return NULL;
  int rc;
  if (i == 0) {
    rc = ember__json_set(o, "name", json_string("all"));
  } else {
    ember__ctfn_t f;
    ops->fn_info(ctx, nd->fn, &f);
    rc = ember__json_set(o, "name", ember__json_str(f.name));
    if (rc == 0 && f.module != NULL) rc = ember__json_set(o, "module", ember__json_str(f.module));
    if (rc == 0) rc = ember__json_set(o, "kind", json_string(kind_name(f.kind)));
    if (rc == 0 && f.file != NULL) rc = ember__json_set(o, "file", ember__json_str(f.file));
    if (rc == 0 && f.line != 0) rc = ember__json_set(o, "line", json_integer(f.line));
    if (rc == 0 && f.generated != NULL)
      rc = ember__json_set(o, "generated", ember__json_str(f.generated));
  }
  if (rc == 0) rc = ops->values(ctx, nd, o);
  if (rc != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int ember__calltree_json(const ember__calltree_t *t, const ember__ctops_t *ops, const void *ctx,
                         json_t *doc) {
  /* The cap decides which nodes there are. */
  assert(t->keep != NULL);
  int rc = 0;
  uint32_t *child_start = ember_calloc(t->n, sizeof *child_start);
  uint32_t *nchildren = ember_calloc(t->n, sizeof *nchildren);
  sib_t *sibs = ember_malloc(t->n * sizeof *sibs);
  json_t **objs = ember_calloc(t->n, sizeof *objs);
  if (child_start == NULL || nchildren == NULL || sibs == NULL || objs == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }

  /* Sort the kept children of every node; afterwards each node's children
   * are sibs[child_start .. child_start + nchildren). */
  size_t nsibs = 0;
  for (size_t i = 1; i < t->n; i++) {
    if (!t->keep[i]) continue;
    const ember__ctnode_t *nd = &t->nodes[i];
    ember__ctfn_t f;
    ops->fn_info(ctx, nd->fn, &f);
    sibs[nsibs++] = (sib_t){nd->parent, (uint32_t)i, weight(t, nd), f.name, f.module};
  }
  qsort(sibs, nsibs, sizeof *sibs, sib_cmp);
  for (size_t i = nsibs; i-- > 0;) {
    child_start[sibs[i].parent] = (uint32_t)i;
    nchildren[sibs[i].parent]++;
  }

  /* Build the JSON bottom-up without recursion: a child is always made
   * after its parent, so going down the node array meets every child
   * before its parent. */
  for (size_t i = t->n; i-- > 0;) {
    if (!t->keep[i]) continue;
    objs[i] = node_json(t, i, ops, ctx);
    if (objs[i] == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    json_t *children = json_array();
    rc = ember__json_set(objs[i], "children", children);
    for (size_t c = 0; c < nchildren[i] && rc == 0; c++) {
      uint32_t ci = sibs[child_start[i] + c].idx;
      json_t *co = objs[ci];
      objs[ci] = NULL; /* the array owns it now, even if appending fails */
      rc = ember__json_push(children, co);
    }
    if (rc != 0) goto cleanup;
  }
  rc = ember__json_set(doc, "nodes", json_integer((json_int_t)t->nkept));
  if (rc == 0) rc = ember__json_set(doc, "truncated", json_boolean(t->truncated));
  if (rc == 0) {
    rc = ember__json_set(doc, "root", objs[0]);
    objs[0] = NULL; /* doc owns it now, even if setting failed */
  }

cleanup:
  if (objs != NULL) {
    for (size_t i = 0; i < t->n; i++) json_decref(objs[i]);
  }
  ember_free(objs);
  ember_free(sibs);
  ember_free(nchildren);
  ember_free(child_start);
  return rc;
}
