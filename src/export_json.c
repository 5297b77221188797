/* The JSON exporters: the speedscope file format and the flamegraph tree
 * the dashboard draws. Both are built as jansson values and dumped into
 * the caller's ember_buf_t. See docs/internals/export.md. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ember/export.h"
#include "export.h"
#include "htab.h"
#include "json.h"

/* --- JSON helpers --- */

/* --- speedscope --- */

static const char *speedscope_unit(ember_value_type_t vt) {
  const char *u = ember_value_type_unit(vt);
  if (u != NULL && strcmp(u, "nanoseconds") == 0) return "nanoseconds";
  if (u != NULL && strcmp(u, "bytes") == 0) return "bytes";
  return "none";
}

/* shared.frames: one per distinct (name, module, file). The line is given
 * only when every frame of the group has the same one: sampled frames
 * carry the line of the sampled instruction, and splitting a function into
 * one speedscope frame per line would split its flamegraph box too. */
static int speedscope_frames(const ember_profile_t *p, const ember__names_t *names,
                             const uint32_t *group_of, const uint32_t *first_of, size_t ngroups,
                             json_t *frames) {
  int rc = 0;
  uint32_t *line = ember_malloc(ngroups * sizeof *line);
  if (line == NULL) return -ENOMEM;
  for (size_t g = 0; g < ngroups; g++) line[g] = ember_profile_frame(p, first_of[g])->line;
  for (size_t i = 0; i < names->n; i++) {
    uint32_t g = group_of[i];
    if (line[g] != ember_profile_frame(p, (uint32_t)i)->line) line[g] = 0;
  }
  for (size_t g = 0; g < ngroups && rc == 0; g++) {
    const ember_frame_t *f = ember_profile_frame(p, first_of[g]);
    json_t *fr = json_object();
    rc = ember__json_push(frames, fr);
    if (rc == 0) rc = ember__json_set(fr, "name", ember__json_str(names->name[first_of[g]]));
    if (rc == 0 && f->file != NULL) rc = ember__json_set(fr, "file", ember__json_str(f->file));
    if (rc == 0 && line[g] != 0) rc = ember__json_set(fr, "line", json_integer(line[g]));
  }
  ember_free(line);
  return rc;
}

int ember_export_speedscope(const ember_profile_t *p, ember_buf_t *out) {
  if (p == NULL || out == NULL) return -EINVAL;
  int rc = 0;
  size_t start = out->len;
  size_t nframes = ember_profile_nframes(p), nstacks = ember_profile_nstacks(p);
  ember__names_t names = {NULL, NULL, 0};
  uint32_t *group_of = NULL, *first_of = NULL;
  json_t **stack_json = NULL; /* per stack, made on first use, shared by profiles */
  json_t *root = NULL, *frames = NULL, *profiles = NULL;

  rc = ember__names_build(p, &names);
  if (rc != 0) goto cleanup;
  group_of = ember_malloc(nframes * sizeof *group_of);
  first_of = ember_malloc(nframes * sizeof *first_of);
  stack_json = ember_calloc(nstacks, sizeof *stack_json);
  if (group_of == NULL || first_of == NULL || stack_json == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  size_t ngroups = 0;
  rc = ember__group_frames(p, &names, EMBER__BY_NAME | EMBER__BY_MODULE | EMBER__BY_FILE, group_of,
                           first_of, &ngroups);
  if (rc != 0) goto cleanup;

  const ember_labels_t *labels = ember_profile_labels(p);
  root = json_object();
  if (root == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__json_set(root, "$schema",
                       json_string("https://www.speedscope.app/file-format-schema.json"));
  if (rc == 0) rc = ember__json_set(root, "exporter", json_string("ember " EMBER_VERSION_STRING));
  if (rc == 0)
    rc = ember__json_set(root, "name", ember__json_str(labels->worker ? labels->worker : "ember"));
  if (rc == 0) rc = ember__json_set(root, "activeProfileIndex", json_integer(0));
  /* Each container is made only once its parent can take it, so a failure
   * never strands one; the locals are borrowed views into `root`. */
  json_t *shared = NULL;
  if (rc == 0) {
    shared = json_object();
    rc = ember__json_set(root, "shared", shared);
  }
  if (rc == 0) {
    frames = json_array();
    rc = ember__json_set(shared, "frames", frames);
  }
  if (rc == 0) {
    profiles = json_array();
    rc = ember__json_set(root, "profiles", profiles);
  }
  if (rc != 0) goto cleanup;
  rc = speedscope_frames(p, &names, group_of, first_of, ngroups, frames);
  if (rc != 0) goto cleanup;

  for (size_t t = 0; t < ember_profile_ntypes(p); t++) {
    ember_value_type_t vt = ember_profile_type(p, t);
    json_t *prof = json_object(), *samples = NULL, *weights = NULL;
    rc = ember__json_push(profiles, prof);
    if (rc == 0) rc = ember__json_set(prof, "type", json_string("sampled"));
    if (rc == 0) rc = ember__json_set(prof, "name", json_string(ember_value_type_name(vt)));
    if (rc == 0) rc = ember__json_set(prof, "unit", json_string(speedscope_unit(vt)));
    if (rc == 0) rc = ember__json_set(prof, "startValue", json_integer(0));
    if (rc == 0) rc = ember__json_set(prof, "endValue", json_integer(ember_profile_total(p, t)));
    if (rc == 0) {
      samples = json_array();
      rc = ember__json_set(prof, "samples", samples);
    }
    if (rc == 0) {
      weights = json_array();
      rc = ember__json_set(prof, "weights", weights);
    }
    if (rc != 0) goto cleanup;
    for (size_t s = 0; s < nstacks; s++) {
      const uint32_t *ids;
      const int64_t *v;
      size_t depth;
      rc = ember_profile_stack(p, (uint32_t)s, &ids, &depth, &v);
      if (rc != 0) goto cleanup;
      if (v[t] == 0) continue;
      if (stack_json[s] == NULL) {
        stack_json[s] = json_array();
        if (stack_json[s] == NULL) {
          rc = -ENOMEM;
          goto cleanup;
        }
        /* Root first, as speedscope wants; Ember stores leaf first. */
        for (size_t d = depth; d-- > 0 && rc == 0;)
          rc = ember__json_push(stack_json[s], json_integer(group_of[ids[d]]));
        if (rc != 0) goto cleanup;
      }
      /* json_array_append adds a reference: every profile shares the one
       * array per stack. */
      if (json_array_append(samples, stack_json[s]) != 0) rc = -ENOMEM;
      if (rc == 0) rc = ember__json_push(weights, json_integer(v[t]));
      if (rc != 0) goto cleanup;
    }
  }
  rc = ember__json_dump(root, out);

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  if (stack_json != NULL) {
    for (size_t s = 0; s < nstacks; s++) json_decref(stack_json[s]);
  }
  json_decref(root);
  ember_free(stack_json);
  ember_free(first_of);
  ember_free(group_of);
  ember__names_free(&names);
  return rc;
}

/* --- tree --- */

#define NO_PARENT UINT32_MAX

typedef struct tnode {
  uint32_t parent; /* NO_PARENT for the root */
  uint32_t fn;     /* frame group (display name + module) */
  uint32_t depth;  /* root = 0 */
  int64_t self, total;
  uint64_t hash; /* of (parent, fn), to rehash the child index */
} tnode_t;

typedef struct child_key {
  const tnode_t *nodes;
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

/* For the cap: nodes in the order they are kept. */
typedef struct rank {
  int64_t total;
  uint32_t depth, idx;
} rank_t;

/* Largest total first; on ties the shallower node, then the older one. A
 * parent's total is at least its child's and a parent is both shallower
 * and older, so every parent comes before its children and any prefix of
 * this order is a tree hanging from the root. */
static int rank_cmp(const void *a, const void *b) {
  const rank_t *x = a, *y = b;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* For sorting siblings: grouped by parent, then largest total, then name. */
typedef struct sib {
  uint32_t parent, idx;
  int64_t total;
  const char *name, *module;
} sib_t;

static int str_cmp_null(const char *a, const char *b) {
  if (a == NULL || b == NULL) return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

static int sib_cmp(const void *a, const void *b) {
  const sib_t *x = a, *y = b;
  if (x->parent != y->parent) return x->parent < y->parent ? -1 : 1;
  if (x->total != y->total) return x->total > y->total ? -1 : 1;
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

typedef struct tree {
  tnode_t *nodes;
  size_t n, cap;
  ember__htab_t index;
} tree_t;

/* The child of `parent` for frame group `fn`, made if new. */
static int tree_child(tree_t *t, uint32_t parent, uint32_t fn, uint32_t *out) {
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
    tnode_t *nn = ember_realloc(t->nodes, ncap * sizeof *nn);
    if (nn == NULL) return -ENOMEM;
    t->nodes = nn;
    t->cap = ncap;
  }
  t->nodes[t->n] = (tnode_t){parent, fn, t->nodes[parent].depth + 1, 0, 0, h};
  key.nodes = t->nodes;
  int rc = ember__htab_insert(&t->index, h, (uint32_t)t->n, child_rehash, &key);
  if (rc != 0) return rc;
  *out = (uint32_t)t->n++;
  return 0;
}

/* Merge every stack with a nonzero value `vi` into the tree, root first. */
static int tree_build(const ember_profile_t *p, size_t vi, const uint32_t *group_of, tree_t *t) {
  t->cap = 1024;
  t->nodes = ember_malloc(t->cap * sizeof *t->nodes);
  if (t->nodes == NULL) return -ENOMEM;
  t->nodes[0] = (tnode_t){NO_PARENT, 0, 0, 0, 0, 0};
  t->n = 1;
  for (size_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    const int64_t *v;
    size_t depth;
    int rc = ember_profile_stack(p, (uint32_t)s, &ids, &depth, &v);
    if (rc != 0) return rc;
    if (v[vi] == 0) continue;
    uint32_t cur = 0;
    t->nodes[0].total = ember__sat_add(t->nodes[0].total, v[vi]);
    for (size_t d = depth; d-- > 0;) {
      rc = tree_child(t, cur, group_of[ids[d]], &cur);
      if (rc != 0) return rc;
      t->nodes[cur].total = ember__sat_add(t->nodes[cur].total, v[vi]);
    }
    t->nodes[cur].self = ember__sat_add(t->nodes[cur].self, v[vi]);
  }
  return 0;
}

/* Keep the max_nodes nodes that come first in rank order and fold each
 * dropped subtree's total into the self value of its kept parent, so every
 * kept node's total (and the root's) is unchanged. */
static int tree_cap(tree_t *t, size_t max_nodes, bool *keep) {
  rank_t *r = ember_malloc(t->n * sizeof *r);
  if (r == NULL) return -ENOMEM;
  for (size_t i = 0; i < t->n; i++)
    r[i] = (rank_t){t->nodes[i].total, t->nodes[i].depth, (uint32_t)i};
  qsort(r, t->n, sizeof *r, rank_cmp);
  for (size_t i = 0; i < t->n; i++) keep[r[i].idx] = i < max_nodes;
  ember_free(r);
  for (size_t i = 1; i < t->n; i++) {
    uint32_t parent = t->nodes[i].parent;
    if (!keep[i] && keep[parent])
      t->nodes[parent].self = ember__sat_add(t->nodes[parent].self, t->nodes[i].total);
  }
  return 0;
}

int ember_export_tree(const ember_profile_t *p, const ember_tree_opts_t *opts, ember_buf_t *out) {
  if (p == NULL || opts == NULL || out == NULL || opts->vi >= ember_profile_ntypes(p))
    return -EINVAL;
  int rc = 0;
  size_t start = out->len;
  size_t nframes = ember_profile_nframes(p);
  ember__names_t names = {NULL, NULL, 0};
  uint32_t *group_of = NULL, *first_of = NULL, *child_start = NULL, *nchildren = NULL;
  bool *keep = NULL;
  sib_t *sibs = NULL;
  json_t **objs = NULL;
  json_t *doc = NULL;
  tree_t t = {NULL, 0, 0, {NULL, 0, 0}};
  ember__htab_init(&t.index);

  rc = ember__names_build(p, &names);
  if (rc != 0) goto cleanup;
  group_of = ember_malloc(nframes * sizeof *group_of);
  first_of = ember_malloc(nframes * sizeof *first_of);
  if (group_of == NULL || first_of == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  size_t ngroups = 0;
  rc = ember__group_frames(p, &names, EMBER__BY_NAME | EMBER__BY_MODULE, group_of, first_of,
                           &ngroups);
  if (rc != 0) goto cleanup;
  rc = tree_build(p, opts->vi, group_of, &t);
  if (rc != 0) goto cleanup;
  /* The child index is only needed while building. */
  ember__htab_free(&t.index);

  keep = ember_malloc(t.n * sizeof *keep);
  child_start = ember_calloc(t.n, sizeof *child_start);
  nchildren = ember_calloc(t.n, sizeof *nchildren);
  sibs = ember_malloc(t.n * sizeof *sibs);
  objs = ember_calloc(t.n, sizeof *objs);
  if (keep == NULL || child_start == NULL || nchildren == NULL || sibs == NULL || objs == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  bool truncated = opts->max_nodes != 0 && t.n > opts->max_nodes;
  if (truncated) {
    rc = tree_cap(&t, opts->max_nodes, keep);
    if (rc != 0) goto cleanup;
  } else {
    for (size_t i = 0; i < t.n; i++) keep[i] = true;
  }

  /* Sort the kept children of every node; afterwards each node's children
   * are sibs[child_start .. child_start + nchildren). */
  size_t nsibs = 0, nkept = 1;
  for (size_t i = 1; i < t.n; i++) {
    if (!keep[i]) continue;
    const tnode_t *nd = &t.nodes[i];
    uint32_t f = first_of[nd->fn];
    sibs[nsibs++] = (sib_t){nd->parent, (uint32_t)i, nd->total, names.name[f],
                            ember_profile_frame(p, f)->module};
  }
  nkept += nsibs;
  qsort(sibs, nsibs, sizeof *sibs, sib_cmp);
  for (size_t i = nsibs; i-- > 0;) {
    child_start[sibs[i].parent] = (uint32_t)i;
    nchildren[sibs[i].parent]++;
  }

  /* Build the JSON bottom-up without recursion: a child is always made
   * after its parent, so going down the node array meets every child
   * before its parent. */
  for (size_t i = t.n; i-- > 0;) {
    if (!keep[i]) continue;
    const tnode_t *nd = &t.nodes[i];
    json_t *o = json_object(), *children = NULL;
    objs[i] = o;
    if (o == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    if (i == 0) {
      rc = ember__json_set(o, "name", json_string("all"));
    } else {
      const ember_frame_t *f = ember_profile_frame(p, first_of[nd->fn]);
      rc = ember__json_set(o, "name", ember__json_str(names.name[first_of[nd->fn]]));
      if (rc == 0 && f->module != NULL)
        rc = ember__json_set(o, "module", ember__json_str(f->module));
      if (rc == 0) rc = ember__json_set(o, "kind", json_string(kind_name(f->kind)));
    }
    if (rc == 0) rc = ember__json_set(o, "self", json_integer(nd->self));
    if (rc == 0) rc = ember__json_set(o, "total", json_integer(nd->total));
    if (rc == 0) {
      children = json_array();
      rc = ember__json_set(o, "children", children);
    }
    for (size_t c = 0; c < nchildren[i] && rc == 0; c++) {
      uint32_t ci = sibs[child_start[i] + c].idx;
      json_t *co = objs[ci];
      objs[ci] = NULL; /* the array owns it now, even if appending fails */
      rc = ember__json_push(children, co);
    }
    if (rc != 0) goto cleanup;
  }

  ember_value_type_t vt = ember_profile_type(p, opts->vi);
  doc = json_object();
  if (doc == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__json_set(doc, "version", json_integer(1));
  if (rc == 0) rc = ember__json_set(doc, "type", json_string(ember_value_type_name(vt)));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0) rc = ember__json_set(doc, "total", json_integer(t.nodes[0].total));
  if (rc == 0) rc = ember__json_set(doc, "nodes", json_integer((json_int_t)nkept));
  if (rc == 0) rc = ember__json_set(doc, "truncated", json_boolean(truncated));
  if (rc == 0) {
    rc = ember__json_set(doc, "root", objs[0]);
    objs[0] = NULL;
  }
  if (rc == 0) rc = ember__json_dump(doc, out);

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  if (objs != NULL) {
    for (size_t i = 0; i < t.n; i++) json_decref(objs[i]);
  }
  json_decref(doc);
  ember_free(objs);
  ember_free(sibs);
  ember_free(nchildren);
  ember_free(child_start);
  ember_free(keep);
  ember_free(t.nodes);
  ember__htab_free(&t.index);
  ember_free(first_of);
  ember_free(group_of);
  ember__names_free(&names);
  return rc;
}
