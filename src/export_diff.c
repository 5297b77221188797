/* The diff tree: two profiles merged into one call tree whose nodes carry
 * both totals, for the dashboard's comparison view and /api/v1/diff. See
 * include/ember/export.h and docs/internals/export.md. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include <jansson.h>

#include "calltree.h"
#include "ember/export.h"
#include "export.h"
#include "htab.h"
#include "json.h"

/* A function of either profile, keyed by (display name, module) so that the
 * same function lines up across the two, whose frame ids are unrelated.
 * Its file, line and generated name are those its frames agree on (two
 * builds of a bundle name one function alike from different places): set
 * by the first frame, cleared for good by the first that differs. */
typedef struct dfn {
  const char *name;   /* borrowed from one profile's names block */
  const char *module; /* borrowed from that profile; may be NULL */
  ember_frame_kind_t kind;
  uint64_t hash;
  const char *file, *generated; /* borrowed; NULL = none, or not agreed */
  uint32_t line;
  bool file_mixed, generated_mixed, line_mixed;
} dfn_t;

typedef struct fns {
  dfn_t *fns;
  size_t n, cap;
  ember__htab_t index;
} fns_t;

typedef struct fn_key {
  const fns_t *d;
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
static int fn_intern(fns_t *d, const char *name, const ember_frame_t *f, uint32_t *out) {
  uint64_t h = ember__hash_bytes(name, strlen(name), 0x64f1);
  h = ember__hash_mix(h, f->module ? ember__hash_bytes(f->module, strlen(f->module), 7) : 0);
  fn_key_t key = {d, name, f->module};
  int64_t found = ember__htab_find(&d->index, h, fn_eq, &key);
  if (found >= 0) {
    dfn_t *fn = &d->fns[found];
    if (!fn->file_mixed && !same_str(fn->file, f->file)) {
      fn->file = NULL;
      fn->file_mixed = true;
    }
    if (!fn->generated_mixed && !same_str(fn->generated, f->generated)) {
      fn->generated = NULL;
      fn->generated_mixed = true;
    }
    if (!fn->line_mixed && fn->line != f->line) {
      fn->line = 0;
      fn->line_mixed = true;
    }
    *out = (uint32_t)found;
    return 0;
  }
  if (d->n >= UINT32_MAX - 1) return EMBER_ETOOBIG;
  if (d->n == d->cap) {
    size_t ncap = d->cap ? d->cap * 2 : 256;
    dfn_t *nf = ember_realloc(d->fns, ncap * sizeof *nf);
    if (nf == NULL) return -ENOMEM;
    d->fns = nf;
    d->cap = ncap;
  }
  d->fns[d->n] = (dfn_t){.name = name,
                         .module = f->module,
                         .kind = f->kind,
                         .hash = h,
                         .file = f->file,
                         .generated = f->generated,
                         .line = f->line};
  int rc = ember__htab_insert(&d->index, h, (uint32_t)d->n, fn_rehash, &key);
  if (rc != 0) return rc;
  *out = (uint32_t)d->n++;
  return 0;
}

/* Add every stack of `p` with a nonzero value `vi` into column `k`. */
static int diff_add(ember__calltree_t *t, fns_t *d, const ember_profile_t *p,
                    const ember__names_t *names, size_t vi, size_t k) {
  size_t nframes = ember_profile_nframes(p);
  uint32_t *fn_of = ember_malloc((nframes ? nframes : 1) * sizeof *fn_of);
  if (fn_of == NULL) return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < nframes && rc == 0; i++)
    rc = fn_intern(d, names->name[i], ember_profile_frame(p, (uint32_t)i), &fn_of[i]);
  if (rc == 0) rc = ember__calltree_add(t, k, p, vi, fn_of);
  ember_free(fn_of);
  return rc;
}

static void diff_fn_info(const void *ctx, uint32_t fn, ember__ctfn_t *out) {
  const fns_t *d = ctx;
  const dfn_t *f = &d->fns[fn];
  *out = (ember__ctfn_t){.name = f->name,
                         .module = f->module,
                         .kind = f->kind,
                         .file = f->file,
                         .line = f->line,
                         .generated = f->generated};
}

static int diff_values(const void *ctx, const ember__ctnode_t *nd, json_t *o) {
  (void)ctx;
  int rc = ember__json_set(o, "base", json_integer(nd->total[0]));
  if (rc == 0) rc = ember__json_set(o, "vs", json_integer(nd->total[1]));
  if (rc == 0) rc = ember__json_set(o, "base_self", json_integer(nd->self[0]));
  if (rc == 0) rc = ember__json_set(o, "vs_self", json_integer(nd->self[1]));
  return rc;
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
  fns_t d = {NULL, 0, 0, {NULL, 0, 0}};
  json_t *doc = NULL;
  ember__calltree_t t;
  ember__htab_init(&d.index);

  rc = ember__calltree_init(&t, 2);
  if (rc != 0) goto cleanup;
  rc = ember__names_build(base, &names[0]);
  if (rc == 0) rc = ember__names_build(vs, &names[1]);
  if (rc != 0) goto cleanup;
  rc = diff_add(&t, &d, base, &names[0], opts->base_vi, 0);
  if (rc == 0) rc = diff_add(&t, &d, vs, &names[1], opts->vs_vi, 1);
  if (rc != 0) goto cleanup;
  ember__htab_free(&d.index);
  rc = ember__calltree_cap(&t, opts->max_nodes);
  if (rc != 0) goto cleanup;

  doc = json_object();
  if (doc == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  json_t *bt = json_object(), *vt_obj = json_object();
  rc = ember__json_set(doc, "version", json_integer(1));
  if (rc == 0) rc = ember__json_set(doc, "type", json_string(ember_value_type_name(vt)));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0 && bt != NULL) rc = ember__json_set(bt, "total", json_integer(t.nodes[0].total[0]));
  if (rc == 0 && vt_obj != NULL)
    rc = ember__json_set(vt_obj, "total", json_integer(t.nodes[0].total[1]));
  /* ember__json_set takes both references whatever happens. */
  int rc2 = ember__json_set(doc, "base", bt);
  int rc3 = ember__json_set(doc, "vs", vt_obj);
  if (rc == 0) rc = rc2 != 0 ? rc2 : rc3;
  const ember__ctops_t ops = {diff_fn_info, diff_values};
  if (rc == 0) rc = ember__calltree_json(&t, &ops, &d, doc);
  if (rc == 0) rc = ember__json_dump(doc, out);

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  json_decref(doc);
  ember__calltree_free(&t);
  ember_free(d.fns);
  ember__htab_free(&d.index);
  ember__names_free(&names[1]);
  ember__names_free(&names[0]);
  return rc;
}
