/* Export formats: names, content types, dispatch, and the frame naming and
 * grouping the exporters share. See include/ember/export.h and
 * docs/internals/export.md. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "ember/export.h"
#include "export.h"
#include "htab.h"

typedef struct format_name {
  const char *name;
  ember_format_t fmt;
} format_name_t;

static const format_name_t format_names[] = {
    {"pprof", EMBER_FORMAT_PPROF},
    {"folded", EMBER_FORMAT_FOLDED},
    {"speedscope", EMBER_FORMAT_SPEEDSCOPE},
    {"tree", EMBER_FORMAT_TREE},
};

/* Tried in order, so ".speedscope.json" must come before ".json". */
static const format_name_t format_exts[] = {
    {".pb.gz", EMBER_FORMAT_PPROF}, {".folded", EMBER_FORMAT_FOLDED},
    {".txt", EMBER_FORMAT_FOLDED},  {".speedscope.json", EMBER_FORMAT_SPEEDSCOPE},
    {".json", EMBER_FORMAT_TREE},
};

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

int ember_format_parse(const char *name, ember_format_t *out) {
  if (name == NULL || out == NULL) return -EINVAL;
  for (size_t i = 0; i < COUNT_OF(format_names); i++) {
    if (strcasecmp(name, format_names[i].name) == 0) {
      *out = format_names[i].fmt;
      return 0;
    }
  }
  /* A bare extension or a whole file name ("cpu.pb.gz") both work, so a
   * command line can take the format from the output path. */
  size_t len = strlen(name);
  for (size_t i = 0; i < COUNT_OF(format_exts); i++) {
    size_t elen = strlen(format_exts[i].name);
    if (len >= elen && strcasecmp(name + len - elen, format_exts[i].name) == 0) {
      *out = format_exts[i].fmt;
      return 0;
    }
  }
  return -EINVAL;
}

const char *ember_format_name(ember_format_t fmt) {
  for (size_t i = 0; i < COUNT_OF(format_names); i++) {
    if (format_names[i].fmt == fmt) return format_names[i].name;
  }
  return NULL;
}

const char *ember_format_content_type(ember_format_t fmt) {
  switch (fmt) {
  /* What net/http/pprof serves, so pprof clients accept it. */
  case EMBER_FORMAT_PPROF: return "application/octet-stream";
  case EMBER_FORMAT_FOLDED: return "text/plain; charset=utf-8";
  case EMBER_FORMAT_SPEEDSCOPE: return "application/json";
  case EMBER_FORMAT_TREE: return "application/json";
  }
  return NULL;
}

int ember_export(const ember_profile_t *p, ember_format_t fmt, size_t vi, ember_buf_t *out) {
  switch (fmt) {
  case EMBER_FORMAT_PPROF: return ember_export_pprof(p, out);
  case EMBER_FORMAT_FOLDED: return ember_export_folded(p, vi, out);
  case EMBER_FORMAT_SPEEDSCOPE: return ember_export_speedscope(p, out);
  case EMBER_FORMAT_TREE: {
    ember_tree_opts_t opts = {.vi = vi, .max_nodes = 0};
    return ember_export_tree(p, &opts, out);
  }
  }
  return -EINVAL;
}

/* --- frame names --- */

int ember__names_build(const ember_profile_t *p, ember__names_t *out) {
  size_t n = ember_profile_nframes(p);
  size_t total = 0;
  *out = (ember__names_t){NULL, NULL, 0};
  /* Two passes, measuring then writing, so all names share one block. */
  for (size_t i = 0; i < n; i++) {
    size_t len = ember_frame_name(ember_profile_frame(p, (uint32_t)i), NULL, 0);
    if (len >= SIZE_MAX - total) return -ENOMEM;
    total += len + 1;
  }
  char **name = ember_malloc(n * sizeof *name);
  char *block = ember_malloc(total);
  if (name == NULL || block == NULL) {
    ember_free(name);
    ember_free(block);
    return -ENOMEM;
  }
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    name[i] = block + off;
    off += ember_frame_name(ember_profile_frame(p, (uint32_t)i), block + off, total - off) + 1;
  }
  *out = (ember__names_t){name, block, n};
  return 0;
}

void ember__names_free(ember__names_t *names) {
  ember_free(names->name);
  ember_free(names->block);
  *names = (ember__names_t){NULL, NULL, 0};
}

/* --- frame grouping --- */

typedef struct group_ctx {
  const ember_profile_t *p;
  const ember__names_t *names;
  unsigned by;
  const uint32_t *first_of;
  const uint64_t *hashes; /* per group */
  uint32_t frame;         /* the frame being looked up */
} group_ctx_t;

static uint64_t group_hash(const group_ctx_t *c, uint32_t frame) {
  const ember_frame_t *f = ember_profile_frame(c->p, frame);
  uint64_t h = 0x6a09e667f3bcc908ULL;
  if (c->by & EMBER__BY_NAME) {
    const char *s = c->names->name[frame];
    h = ember__hash_bytes(s, strlen(s), h);
  }
  /* The profile interns strings, so equal strings are equal pointers and
   * the pointer can stand for the string. */
  if (c->by & EMBER__BY_MODULE) h = ember__hash_mix(h, (uint64_t)(uintptr_t)f->module);
  if (c->by & EMBER__BY_FILE) h = ember__hash_mix(h, (uint64_t)(uintptr_t)f->file);
  if (c->by & EMBER__BY_BUILD_ID) h = ember__hash_mix(h, (uint64_t)(uintptr_t)f->build_id);
  if (c->by & EMBER__BY_GENERATED) h = ember__hash_mix(h, (uint64_t)(uintptr_t)f->generated);
  return h;
}

static bool group_eq(const void *ctx, uint32_t g) {
  const group_ctx_t *c = ctx;
  uint32_t a = c->first_of[g], b = c->frame;
  const ember_frame_t *fa = ember_profile_frame(c->p, a), *fb = ember_profile_frame(c->p, b);
  if ((c->by & EMBER__BY_MODULE) && fa->module != fb->module) return false;
  if ((c->by & EMBER__BY_FILE) && fa->file != fb->file) return false;
  if ((c->by & EMBER__BY_BUILD_ID) && fa->build_id != fb->build_id) return false;
  if ((c->by & EMBER__BY_GENERATED) && fa->generated != fb->generated) return false;
  if ((c->by & EMBER__BY_NAME) && strcmp(c->names->name[a], c->names->name[b]) != 0) return false;
  return true;
}

static uint64_t group_rehash(const void *ctx, uint32_t g) {
  const group_ctx_t *c = ctx;
  return c->hashes[g];
}

int ember__group_frames(const ember_profile_t *p, const ember__names_t *names, unsigned by,
                        uint32_t *group_of, uint32_t *first_of, size_t *ngroups) {
  int rc = 0;
  size_t n = ember_profile_nframes(p);
  size_t ng = 0;
  uint64_t *hashes = NULL;
  ember__htab_t index;
  ember__htab_init(&index);
  group_ctx_t ctx = {p, names, by, first_of, NULL, 0};

  hashes = ember_malloc(n * sizeof *hashes);
  if (hashes == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  ctx.hashes = hashes;
  for (size_t i = 0; i < n; i++) {
    ctx.frame = (uint32_t)i;
    uint64_t h = group_hash(&ctx, (uint32_t)i);
    int64_t found = ember__htab_find(&index, h, group_eq, &ctx);
    if (found >= 0) {
      group_of[i] = (uint32_t)found;
      continue;
    }
    first_of[ng] = (uint32_t)i;
    hashes[ng] = h;
    rc = ember__htab_insert(&index, h, (uint32_t)ng, group_rehash, &ctx);
    if (rc != 0) goto cleanup;
    group_of[i] = (uint32_t)ng++;
  }
  *ngroups = ng;
cleanup:
  ember_free(hashes);
  ember__htab_free(&index);
  return rc;
}

int ember__group_common(const ember_profile_t *p, const uint32_t *group_of,
                        const uint32_t *first_of, size_t ngroups, ember__group_common_t **out) {
  ember__group_common_t *c = ember_malloc((ngroups ? ngroups : 1) * sizeof *c);
  if (c == NULL) return -ENOMEM;
  for (size_t g = 0; g < ngroups; g++) {
    const ember_frame_t *f = ember_profile_frame(p, first_of[g]);
    c[g] = (ember__group_common_t){f->file, f->generated, f->line};
  }
  /* Interned strings: equal ones are one pointer. */
  size_t n = ember_profile_nframes(p);
  for (size_t i = 0; i < n; i++) {
    const ember_frame_t *f = ember_profile_frame(p, (uint32_t)i);
    ember__group_common_t *g = &c[group_of[i]];
    if (g->file != f->file) g->file = NULL;
    if (g->generated != f->generated) g->generated = NULL;
    if (g->line != f->line) g->line = 0;
  }
  *out = c;
  return 0;
}
