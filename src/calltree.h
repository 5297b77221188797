/* The call tree behind the tree export (export_json.c) and the diff export
 * (export_diff.c); internal to the exporters, not part of the API.
 *
 * Both exports merge stacks root first into one tree, keep its max_nodes
 * heaviest nodes, order siblings and turn the tree into nested JSON. They
 * differ only in what a "function" is (the tree groups one profile's frames
 * by name and module; the diff matches two profiles' functions by name and
 * module), in how many value columns a node carries (one, or one per
 * profile) and in the names of a node's value fields. So the caller brings
 * function ids and per-function labels and writes the value fields; this
 * module owns the rest, so the rank order that makes any capped prefix a
 * tree, the folding of dropped subtrees and the sibling order cannot drift
 * apart between the two. Not thread-safe; one tree per export call. */
#ifndef EMBER_SRC_CALLTREE_H
#define EMBER_SRC_CALLTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ember/profile.h"
#include "htab.h"

#define EMBER__CT_MAXCOLS 2u

typedef struct ember__ctnode {
  uint32_t parent; /* UINT32_MAX for the root */
  uint32_t fn;     /* the caller's function id; 0 for the root */
  uint32_t depth;  /* root = 0 */
  int64_t self[EMBER__CT_MAXCOLS], total[EMBER__CT_MAXCOLS];
  uint64_t hash; /* of (parent, fn), to rehash the child index */
} ember__ctnode_t;

typedef struct ember__calltree {
  ember__ctnode_t *nodes; /* nodes[0] is the root; children come after parents */
  size_t n, cap;
  size_t ncols;        /* value columns in use, 1..EMBER__CT_MAXCOLS */
  ember__htab_t index; /* (parent, fn) -> child; freed by ember__calltree_cap */
  bool *keep;          /* per node, set by ember__calltree_cap */
  size_t nkept;        /* nodes kept by ember__calltree_cap */
  bool truncated;      /* whether ember__calltree_cap dropped any */
} ember__calltree_t;

/* An empty tree (just the root) with `ncols` value columns. Returns 0 or
 * -ENOMEM; `t` is safe to ember__calltree_free either way. */
int ember__calltree_init(ember__calltree_t *t, size_t ncols);
/* Release everything the tree holds; a zeroed or freed tree is fine. */
void ember__calltree_free(ember__calltree_t *t);

/* Add every stack of `p` whose value `vi` is nonzero into column `col`:
 * each node on its path (and the root) gains the value in `total`, the leaf
 * in `self`. fn_of[frame id] is the caller's function id of each frame
 * (borrowed for the call). Returns 0, -ENOMEM, EMBER_ETOOBIG (too many
 * nodes) or ember_profile_stack's error. Only before ember__calltree_cap. */
int ember__calltree_add(ember__calltree_t *t, size_t col, const ember_profile_t *p, size_t vi,
                        const uint32_t *fn_of);

/* Keep the max_nodes nodes (0 = all) that come first in rank order: largest
 * weight (the largest of a node's column totals), then shallower, then
 * older. Every dropped subtree's totals go into its kept parent's self, so
 * every kept total (the root's too) is unchanged. Sets t->truncated and
 * t->nkept. Returns 0 or -ENOMEM. */
int ember__calltree_cap(ember__calltree_t *t, size_t max_nodes);

/* What the caller knows about one of its function ids. */
typedef struct ember__ctfn {
  const char *name;   /* never NULL; must outlive ember__calltree_json */
  const char *module; /* may be NULL */
  ember_frame_kind_t kind;
  const char *file;      /* the source file; NULL = none or not one */
  uint32_t line;         /* where it starts; 0 = unknown or not one */
  const char *generated; /* ember_frame_t's; NULL = none or not one */
} ember__ctfn_t;

typedef struct ember__ctops {
  /* Describe function `fn`. */
  void (*fn_info)(const void *ctx, uint32_t fn, ember__ctfn_t *out);
  /* Set a node's value fields on `o`, which already has name, module and
   * kind (or name "all" for the root); "children" comes after them.
   * Returns 0 or -ENOMEM. */
  int (*values)(const void *ctx, const ember__ctnode_t *nd, json_t *o);
} ember__ctops_t;

/* Append "nodes" (how many were kept), "truncated" and "root" to `doc`
 * (borrowed), the root being the kept tree as nested JSON objects built
 * bottom-up without recursion: {"name", ["module",] "kind", ["file",]
 * ["line",] ["generated",] <values>, "children": [...]}, siblings by largest weight, then name,
 * module and age. Returns 0 or -ENOMEM (then `doc` may hold some of the fields). Only after
 * ember__calltree_cap. */
int ember__calltree_json(const ember__calltree_t *t, const ember__ctops_t *ops, const void *ctx,
                         json_t *doc);

#endif
