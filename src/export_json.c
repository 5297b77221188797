/* The JSON exporters: the speedscope file format and the flamegraph tree
 * the dashboard draws. Both are built as jansson values and dumped into
 * the caller's ember_buf_t. See docs/internals/export.md. */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "calltree.h"
#include "ember/export.h"
#include "export.h"
#include "json.h"

/* --- JSON helpers --- */

/* --- speedscope --- */

static const char *speedscope_unit(ember_value_type_t vt) {
  const char *u = ember_value_type_unit(vt);
  if (u != NULL && strcmp(u, "nanoseconds") == 0) return "nanoseconds";
  if (u != NULL && strcmp(u, "bytes") == 0) return "bytes";
  return "none";
}

/* shared.frames: one per distinct (name, module, file), with the line
 * where the group's frames agree on one (ember__group_common). */
static int speedscope_frames(const ember_profile_t *p, const ember__names_t *names,
                             const uint32_t *group_of, const uint32_t *first_of, size_t ngroups,
                             json_t *frames) {
  ember__group_common_t *common = NULL;
  int rc = ember__group_common(p, group_of, first_of, ngroups, &common);
  for (size_t g = 0; g < ngroups && rc == 0; g++) {
    const ember_frame_t *f = ember_profile_frame(p, first_of[g]);
    json_t *fr = json_object();
    rc = ember__json_push(frames, fr);
    if (rc == 0) rc = ember__json_set(fr, "name", ember__json_str(names->name[first_of[g]]));
    if (rc == 0 && f->file != NULL) rc = ember__json_set(fr, "file", ember__json_str(f->file));
    if (rc == 0 && common[g].line != 0)
      rc = ember__json_set(fr, "line", json_integer(common[g].line));
  }
  ember_free(common);
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

/* Functions are frame groups (display name + module); a group is described
 * by its first frame, and by the file, line and generated name its frames
 * agree on. */
typedef struct tree_ctx {
  const ember_profile_t *p;
  const ember__names_t *names;
  const uint32_t *first_of;
  const ember__group_common_t *common;
} tree_ctx_t;

static void tree_fn_info(const void *ctx, uint32_t fn, ember__ctfn_t *out) {
  const tree_ctx_t *c = ctx;
  uint32_t f = c->first_of[fn];
  const ember_frame_t *fr = ember_profile_frame(c->p, f);
  const ember__group_common_t *g = &c->common[fn];
  *out = (ember__ctfn_t){c->names->name[f], fr->module, fr->kind, g->file, g->line, g->generated};
}

static int tree_values(const void *ctx, const ember__ctnode_t *nd, json_t *o) {
  (void)ctx;
  int rc = ember__json_set(o, "self", json_integer(nd->self[0]));
  if (rc == 0) rc = ember__json_set(o, "total", json_integer(nd->total[0]));
  return rc;
}

int ember_export_tree(const ember_profile_t *p, const ember_tree_opts_t *opts, ember_buf_t *out) {
  if (p == NULL || opts == NULL || out == NULL || opts->vi >= ember_profile_ntypes(p))
    return -EINVAL;
  int rc = 0;
  size_t start = out->len;
  size_t nframes = ember_profile_nframes(p);
  ember__names_t names = {NULL, NULL, 0};
  uint32_t *group_of = NULL, *first_of = NULL;
  ember__group_common_t *common = NULL;
  json_t *doc = NULL;
  ember__calltree_t t;

  rc = ember__calltree_init(&t, 1);
  if (rc != 0) goto cleanup;
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
  rc = ember__group_common(p, group_of, first_of, ngroups, &common);
  if (rc != 0) goto cleanup;
  rc = ember__calltree_add(&t, 0, p, opts->vi, group_of);
  if (rc != 0) goto cleanup;
  rc = ember__calltree_cap(&t, opts->max_nodes);
  if (rc != 0) goto cleanup;

  ember_value_type_t vt = ember_profile_type(p, opts->vi);
  doc = json_object();
  if (doc == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = ember__json_set(doc, "version", json_integer(1));
  if (rc == 0) rc = ember__json_set(doc, "type", json_string(ember_value_type_name(vt)));
  if (rc == 0) rc = ember__json_set(doc, "unit", json_string(ember_value_type_unit(vt)));
  if (rc == 0) rc = ember__json_set(doc, "total", json_integer(t.nodes[0].total[0]));
  tree_ctx_t ctx = {p, &names, first_of, common};
  const ember__ctops_t ops = {tree_fn_info, tree_values};
  if (rc == 0) rc = ember__calltree_json(&t, &ops, &ctx, doc);
  if (rc == 0) rc = ember__json_dump(doc, out);

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  json_decref(doc);
  ember__calltree_free(&t);
  ember_free(common);
  ember_free(first_of);
  ember_free(group_of);
  ember__names_free(&names);
  return rc;
}
