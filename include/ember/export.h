/* Exporters: write a profile in the formats other tools read.
 *
 *  - pprof: gzip-compressed protobuf of the published profile.proto schema
 *    (src/proto/pprof.proto), readable by `go tool pprof`. All value types.
 *  - folded: one line per stack, "root;...;leaf VALUE", the text format of
 *    FlameGraph and inferno. One value type.
 *  - speedscope: the speedscope JSON file format, one "sampled" profile per
 *    value type.
 *  - tree: the flamegraph tree JSON the dashboard draws, one value type.
 *
 * Each appends to an ember_buf_t, so the caller bounds the output size.
 * Returns 0, -EINVAL, -ENOMEM or EMBER_ETOOBIG. Thread-safe for distinct
 * buffers on a profile nobody writes. */
#ifndef EMBER_EXPORT_H
#define EMBER_EXPORT_H

#include <stddef.h>

#include "ember/buf.h"
#include "ember/ember.h"
#include "ember/profile.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_format {
  EMBER_FORMAT_PPROF = 0,
  EMBER_FORMAT_FOLDED = 1,
  EMBER_FORMAT_SPEEDSCOPE = 2,
  EMBER_FORMAT_TREE = 3
} ember_format_t;

/* "pprof", "folded", "speedscope", "tree" <-> enum. Parse also accepts
 * file extensions (".pb.gz", ".folded", ".txt", ".speedscope.json",
 * ".json"). Returns 0 or -EINVAL. */
EMBER_API int ember_format_parse(const char *name, ember_format_t *out);
EMBER_API const char *ember_format_name(ember_format_t fmt);
/* The HTTP Content-Type of a format. */
EMBER_API const char *ember_format_content_type(ember_format_t fmt);

EMBER_API int ember_export_pprof(const ember_profile_t *p, ember_buf_t *out);
EMBER_API int ember_export_folded(const ember_profile_t *p, size_t vi, ember_buf_t *out);
EMBER_API int ember_export_speedscope(const ember_profile_t *p, ember_buf_t *out);

typedef struct ember_tree_opts {
  size_t vi;        /* value type index */
  size_t max_nodes; /* 0 = no cap; else the smallest subtrees are folded
                       into their parent until at most this many remain */
} ember_tree_opts_t;
EMBER_API int ember_export_tree(const ember_profile_t *p, const ember_tree_opts_t *opts,
                                ember_buf_t *out);

/* The diff tree: `base` and `vs` merged into one call tree (functions
 * matched by display name and module) whose nodes carry both totals:
 * {"version":1,"type","unit","base":{"total"},"vs":{"total"},"nodes",
 *  "truncated","root":{"name","module","kind","base","vs","base_self",
 *  "vs_self","children":[..]}}. The two value types must be the same type
 * (else EMBER_EMISMATCH). max_nodes caps the tree as in ember_export_tree,
 * ranking nodes by the larger of their two totals; folded subtrees go into
 * their parent's base_self/vs_self, so every total stays exact. Both
 * profiles are borrowed for the call. */
typedef struct ember_tree_diff_opts {
  size_t base_vi;   /* value type index in base */
  size_t vs_vi;     /* value type index in vs */
  size_t max_nodes; /* 0 = no cap */
} ember_tree_diff_opts_t;
EMBER_API int ember_export_tree_diff(const ember_profile_t *base, const ember_profile_t *vs,
                                     const ember_tree_diff_opts_t *opts, ember_buf_t *out);

/* Dispatch on fmt; vi is ignored by formats that carry every value type. */
EMBER_API int ember_export(const ember_profile_t *p, ember_format_t fmt, size_t vi,
                           ember_buf_t *out);

#ifdef __cplusplus
}
#endif
#endif
