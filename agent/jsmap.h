/* Source maps of the JavaScript a process runs (issue 16): the agent's
 * side. A JIT frame that V8 names "JS:*a /app/dist/app.min.js:1:4711" is
 * given the original function name, source file and line through the
 * script's source map, found as the script says:
 *
 *  - a `//# sourceMappingURL=` comment on the script's last line naming a
 *    file (relative to the script, or absolute), or a `data:` URL with the
 *    map inline in base64;
 *  - else SCRIPT.map beside the script.
 *
 * Scripts and maps are read through the process's own root
 * (/proc/PID/root) with ember__safe_openat: no symbolic link, no FIFO,
 * only a regular file of the process's user, or root's if anyone may read
 * it (a root-only file never reaches a profile). Sizes are bounded: a map
 * over the limit, or one the decoder refuses, is counted by reason and the
 * frames of its script keep their generated names.
 *
 * Cache: by script identity (device, inode, size, mtime), so every process
 * of a service shares one decoded map and an edited script is read again.
 * A process's script names are checked against the file once per batch
 * (ember__jsmaps_forget starts one), not per frame. Decoded maps are
 * bounded in memory (max_bytes), least recently used first out; an
 * evicted map is freed at the next forget (frames of this batch may point
 * into it) and decoded again when its script is seen next.
 *
 * Thread-safety: one thread at a time (the agent's window closer). */
#ifndef EMBER_AGENT_JSMAP_H
#define EMBER_AGENT_JSMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ember/metrics.h"
#include "ember/sourcemap.h"

typedef struct ember__jsmaps ember__jsmaps_t;

/* Scripts followed at once, and (pid, script) names remembered. */
#define EMBER__JSMAPS_MAX_SCRIPTS 4096u
#define EMBER__JSMAPS_MAX_REFS    65536u
/* Memory of decoded maps: default bound. */
#define EMBER__JSMAPS_MAX_BYTES (256ull << 20)

typedef struct ember__jsmaps_opts {
  const char *proc_root;           /* NULL = "/proc" */
  uint64_t max_bytes;              /* decoded maps held; 0 = the default */
  ember_sourcemap_limits_t limits; /* of one map (zeros: the decoder's) */
} ember__jsmaps_opts_t;

/* What a frame maps to. Strings are valid until the next forget. */
typedef struct ember__jsframe {
  const char *function; /* the original name, else the generated one */
  const char *file;     /* the original source; a relative one resolved
                           against the map's directory */
  uint32_t line;        /* in it, 1-based */
  const char *script;   /* the generated script's path (the frame's module) */
  /* V8's name of it without the tag and tier marker, "a /app/dist/app.js:
   * 1:4711" (an anonymous function's is its position alone): ember_frame_t's
   * `generated`. Points into the name passed in. */
  const char *generated;
} ember__jsframe_t;

typedef struct ember__jsmaps_stats {
  uint64_t scripts;     /* scripts looked at (distinct identities) */
  uint64_t maps;        /* maps decoded (again after an eviction too) */
  uint64_t no_map;      /* scripts without a map */
  uint64_t unsafe;      /* a script or map file refused by the safe-open rules */
  uint64_t unsupported; /* a map URL not read (http:, a data: URL not base64 JSON) */
  uint64_t refused[EMBER_SOURCEMAP_REASONS]; /* maps the decoder refused, by reason */
  uint64_t mapped;                           /* frames given their original */
  uint64_t unmapped;  /* JS frames of a script with a map that maps no source there */
  uint64_t evictions; /* decoded maps dropped for the memory bound */
  uint64_t capped;    /* scripts or names not followed: over the counts above */
  uint64_t bytes;     /* memory of the decoded maps held now */
  uint64_t held;      /* decoded maps held now */
} ember__jsmaps_stats_t;

/* Returns 0, -EINVAL or -ENOMEM. */
int ember__jsmaps_new(const ember__jsmaps_opts_t *opts, ember__jsmaps_t **out);
void ember__jsmaps_free(ember__jsmaps_t *m);

/* Map the perf map name `name` of a frame of `pid`. Returns 1 (*out set),
 * 0 when it does not map (not a V8 script name, no map, refused, no
 * source there: the frame keeps its name), or -ENOMEM. */
int ember__jsmaps_frame(ember__jsmaps_t *m, pid_t pid, const char *name, ember__jsframe_t *out);

/* A new batch: strings handed out before become invalid, evicted maps
 * are freed, and the names of `pid` (0: none) are forgotten (it exited). */
void ember__jsmaps_forget(ember__jsmaps_t *m, pid_t pid);

void ember__jsmaps_stats(const ember__jsmaps_t *m, ember__jsmaps_stats_t *out);

/* The agent's metrics of source maps: ember_agent_sourcemap_frames_total,
 * _decoded_total, _evictions_total, _bytes, and _refused_total by reason
 * (the decoder's, "unsafe" and "unsupported"). */
typedef struct ember__jsmaps_metrics {
  ember_metric_t *frames, *decoded, *evictions, *bytes, *unsafe, *unsupported;
  ember_metric_t *refused[EMBER_SOURCEMAP_REASONS];
} ember__jsmaps_metrics_t;
/* Register them (at start, before any update). */
void ember__jsmaps_register_metrics(ember_metrics_t *m, ember__jsmaps_metrics_t *out);
/* Copy counts into them (any thread). */
void ember__jsmaps_update_metrics(const ember__jsmaps_metrics_t *mt,
                                  const ember__jsmaps_stats_t *st);

#endif
