/* Helpers shared by the exporters (export_*.c); not part of the API.
 *
 * Every exporter needs each frame's display name and some grouping of
 * frames into "functions" (pprof by name and file, the tree by name and
 * module, speedscope by name, module and file). They are computed here once
 * per export. See docs/internals/export.md. */
#ifndef EMBER_SRC_EXPORT_H
#define EMBER_SRC_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "ember/buf.h"
#include "ember/profile.h"

/* The display name (ember_frame_name) of every frame of a profile. */
typedef struct ember__names {
  char **name; /* name[i] for frame i; points into block */
  char *block; /* all names back to back, each NUL-terminated */
  size_t n;    /* number of frames */
} ember__names_t;

/* Fill `out` for profile `p`. Returns 0 or -ENOMEM (then `out` is empty). */
int ember__names_build(const ember_profile_t *p, ember__names_t *out);
/* Release the names; a zeroed or already freed value is fine. */
void ember__names_free(ember__names_t *names);

/* Which frame fields make two frames one group in ember__group_frames. */
#define EMBER__BY_NAME      0x1u  /* display name */
#define EMBER__BY_MODULE    0x2u  /* frame->module */
#define EMBER__BY_FILE      0x4u  /* frame->file */
#define EMBER__BY_BUILD_ID  0x8u  /* frame->build_id */
#define EMBER__BY_GENERATED 0x10u /* frame->generated */

/* Group the frames of `p` by the fields in `by` (EMBER__BY_*; names is
 * needed only with EMBER__BY_NAME). Groups are numbered 0, 1, ... in order
 * of their first frame, so the numbering is deterministic. group_of[i] gets
 * frame i's group and first_of[g] the first frame of group g; both arrays
 * have room for every frame. *ngroups gets the number of groups. Returns 0
 * or -ENOMEM. */
int ember__group_frames(const ember_profile_t *p, const ember__names_t *names, unsigned by,
                        uint32_t *group_of, uint32_t *first_of, size_t *ngroups);

/* What every frame of a group has in common: its file, generated name
 * and line where they all agree, else NULL and 0. Sampled frames carry the
 * line of the sampled instruction, so a function's line is given only
 * when it is the same everywhere (a mapped JavaScript function's, which
 * is where it starts); splitting a group by it would split its flamegraph
 * box. *out has ngroups entries (ember_free). Returns 0 or -ENOMEM. */
typedef struct ember__group_common {
  const char *file, *generated;
  uint32_t line;
} ember__group_common_t;
int ember__group_common(const ember_profile_t *p, const uint32_t *group_of,
                        const uint32_t *first_of, size_t ngroups, ember__group_common_t **out);

/* Adds that stick at INT64_MAX. Stack values are each >= 0 and fit, but a
 * sum over many stacks may not. */
static inline int64_t ember__sat_add(int64_t a, int64_t b) {
  return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Drop whatever an exporter appended after `len`: a failed export leaves
 * the caller's buffer as it was. */
static inline void ember__buf_truncate(ember_buf_t *b, size_t len) {
  if (b->data == NULL || b->len < len) return;
  b->len = len;
  b->data[len] = '\0';
}

#endif
