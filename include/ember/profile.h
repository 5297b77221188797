/* The profile model: frames, interned stacks, and profiles of one or more
 * value types (CPU samples, CPU nanoseconds, allocated objects and bytes,
 * in-use objects and bytes).
 *
 * A profile owns everything in it: strings are interned in the profile,
 * frames are interned to dense ids (0, 1, 2, ...), and each distinct stack
 * (a sequence of frame ids, leaf first) is stored once with one value per
 * sample type. Adding a stack that is already present adds to its values,
 * so a profile is at once a stack dictionary and an aggregate.
 *
 * Merging is exact: values are 64-bit integers and merge adds them, so
 * merge(a, merge(b, c)) holds the same stacks and values as
 * merge(merge(a, b), c), in any order. Stack and frame ids are local to one
 * profile; the stack *contents* are what merge and comparison use.
 *
 * Thread-safety: a profile is not locked. Any number of threads may read a
 * profile nobody writes; writes need the caller's exclusion. */
#ifndef EMBER_PROFILE_H
#define EMBER_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one value of a sample counts. The numbers are on the wire: never
 * reuse one. */
typedef enum ember_value_type {
  EMBER_VT_CPU_SAMPLES = 1,   /* samples taken, count */
  EMBER_VT_CPU_NS = 2,        /* CPU time, nanoseconds */
  EMBER_VT_ALLOC_OBJECTS = 3, /* allocations, count */
  EMBER_VT_ALLOC_BYTES = 4,   /* allocated, bytes */
  EMBER_VT_INUSE_OBJECTS = 5, /* live at the window's end, count (a gauge) */
  EMBER_VT_INUSE_BYTES = 6    /* live at the window's end, bytes (a gauge) */
} ember_value_type_t;

#define EMBER_MAX_VALUE_TYPES 6

/* The pprof-style (type, unit) names of a value type, e.g. "cpu" and
 * "nanoseconds", "inuse_space" and "bytes" (the names `go tool pprof
 * -sample_index=` takes); NULL for an unknown value. */
EMBER_API const char *ember_value_type_name(ember_value_type_t vt);
EMBER_API const char *ember_value_type_unit(ember_value_type_t vt);

/* Whether values of `vt` are a gauge: a snapshot at the window's end
 * (EMBER_VT_INUSE_OBJECTS, EMBER_VT_INUSE_BYTES), not a count of what
 * happened during the window. Gauges of one source are never summed over
 * windows: a range reads the latest (ember_store_merge says how); gauges of
 * distinct sources at one instant add up. Within one profile the merge
 * below still adds values, which for gauges is the sum of two sources. False
 * for unknown values. */
EMBER_API bool ember_value_type_is_gauge(ember_value_type_t vt);

typedef enum ember_frame_kind {
  EMBER_FRAME_NATIVE = 0, /* user-space machine code from an ELF file */
  EMBER_FRAME_KERNEL = 1, /* kernel code */
  EMBER_FRAME_JIT = 2,    /* JIT code named by a perf map (Node.js) */
  EMBER_FRAME_KIND_MAX = 2
} ember_frame_kind_t;

/* One frame. A plain value type: every string may be NULL (unknown).
 * Frames returned by a profile point into it and stay valid until the
 * profile is freed. */
typedef struct ember_frame {
  const char *function; /* symbol, demangled where possible */
  const char *file;     /* source file */
  const char *module;   /* the mapped object: ELF path, "[kernel]", perf map */
  const char *build_id; /* hex GNU build-id of the module */
  /* The name the code has where it runs, when `function` is what its
   * author called it: a minified JavaScript function given its original
   * name through a source map keeps V8's name here ("a /app/dist/app.js:
   * 1:4711": the function, script, line and column, without V8's tag and
   * tier marker). NULL (the usual case) = the same as `function`. Part of
   * the frame's identity; pprof's Function.system_name. */
  const char *generated;
  uint64_t address; /* module-relative address (for unresolved frames) */
  uint32_t line;    /* source line, 0 when unknown */
  ember_frame_kind_t kind;
} ember_frame_t;

/* The name to show for a frame: the function, else "module+0xADDR", else
 * "[unknown]". Writes a NUL-terminated string (truncated to fit) and returns
 * its untruncated length, like snprintf. */
EMBER_API size_t ember_frame_name(const ember_frame_t *f, char *buf, size_t size);

/* Who a profile is about. Any string may be NULL. pid 0 = not one process. */
typedef struct ember_labels {
  const char *worker;
  const char *version;
  const char *host;
  const char *actor;
  uint32_t pid;
} ember_labels_t;

typedef struct ember_profile ember_profile_t;

/* Limits on what one profile may hold; the codec enforces them on input. */
#define EMBER_MAX_STACK_DEPTH 1024u
#define EMBER_MAX_STRING      4096u

/* Create an empty profile with `ntypes` (1..EMBER_MAX_VALUE_TYPES) distinct
 * value types, in that order. Returns 0, -EINVAL or -ENOMEM. */
EMBER_API int ember_profile_new(const ember_value_type_t *types, size_t ntypes,
                                ember_profile_t **out);
EMBER_API void ember_profile_free(ember_profile_t *p);

EMBER_API size_t ember_profile_ntypes(const ember_profile_t *p);
EMBER_API ember_value_type_t ember_profile_type(const ember_profile_t *p, size_t i);
/* The index of value type `vt` in this profile, or -1. */
EMBER_API int ember_profile_type_index(const ember_profile_t *p, ember_value_type_t vt);

/* Labels: set copies the strings; get returns a view borrowed until the
 * labels are set again or the profile is freed. */
EMBER_API int ember_profile_set_labels(ember_profile_t *p, const ember_labels_t *labels);
EMBER_API const ember_labels_t *ember_profile_labels(const ember_profile_t *p);

/* The time window [start_ns, end_ns) in Unix nanoseconds, and the sampling
 * period in nanoseconds (0 = unknown or mixed). Merge widens the window to
 * cover both and keeps the period only when both agree. */
EMBER_API int ember_profile_set_window(ember_profile_t *p, int64_t start_ns, int64_t end_ns);
EMBER_API void ember_profile_window(const ember_profile_t *p, int64_t *start_ns, int64_t *end_ns);
EMBER_API void ember_profile_set_period(ember_profile_t *p, int64_t period_ns);
EMBER_API int64_t ember_profile_period(const ember_profile_t *p);

/* Where a profile came from: the agent, its per-agent sequence number (so a
 * consumer can drop duplicates) and, for on-demand results, the session id.
 * Strings are copied; NULL clears. Merge does not carry these over. */
EMBER_API int ember_profile_set_origin(ember_profile_t *p, const char *agent_id, uint64_t seq,
                                       const char *session_id);
EMBER_API const char *ember_profile_agent_id(const ember_profile_t *p);
EMBER_API uint64_t ember_profile_seq(const ember_profile_t *p);
EMBER_API const char *ember_profile_session_id(const ember_profile_t *p);

/* Intern a frame (its strings are copied) and return its id. Equal frames
 * (all fields equal) get the same id. */
EMBER_API int ember_profile_intern_frame(ember_profile_t *p, const ember_frame_t *f, uint32_t *id);
EMBER_API size_t ember_profile_nframes(const ember_profile_t *p);
/* Borrowed until the profile is freed; NULL if id is out of range. */
EMBER_API const ember_frame_t *ember_profile_frame(const ember_profile_t *p, uint32_t id);

/* Intern the string of at most `len` bytes at `s` (it ends at a NUL
 * before that; cut at EMBER_MAX_STRING) and return the profile's copy, valid
 * until the profile is freed. Equal strings get the same pointer, so the
 * result can go into a frame for ember_profile_intern_frame_interned.
 * Returns 0, -EINVAL or -ENOMEM. */
EMBER_API int ember_profile_intern_string(ember_profile_t *p, const char *s, size_t len,
                                          const char **out);
/* As ember_profile_intern_frame, without copying the strings: each must be
 * NULL or a pointer that ember_profile_intern_string (or a frame) of this
 * same profile returned. For decoders that intern a string table once. */
EMBER_API int ember_profile_intern_frame_interned(ember_profile_t *p, const ember_frame_t *f,
                                                  uint32_t *id);
/* A 64-bit hash of frame `id`'s content (every field; string bytes, not
 * pointers): equal frames of any two profiles have equal hashes within one
 * build of Ember. Not stable across versions, so never store it; never
 * proof of equality. 0 if id is out of range. */
EMBER_API uint64_t ember_profile_frame_hash(const ember_profile_t *p, uint32_t id);
/* strlen of a string held by a profile (a frame's field or a result of
 * ember_profile_intern_string), in O(1); 0 for NULL. Only for such strings. */
EMBER_API size_t ember_profile_string_len(const char *s);
/* Make room for that many more strings, frames, distinct stacks and stack
 * frame ids, so that filling a profile of known size does not regrow its
 * tables. Only a hint (large counts are capped). Returns 0, -EINVAL or
 * -ENOMEM. */
EMBER_API int ember_profile_reserve(ember_profile_t *p, size_t nstrings, size_t nframes,
                                    size_t nstacks, size_t nids);

/* Add `values` (one per value type, each >= 0) to the stack `frame_ids`
 * (leaf first, 1..EMBER_MAX_STACK_DEPTH ids from this profile). Returns 0,
 * -EINVAL (bad id, depth, or negative value), -ERANGE (a sum would
 * overflow; nothing is added) or -ENOMEM. If stack_id is not NULL it gets
 * the stack's id. */
EMBER_API int ember_profile_add_ids(ember_profile_t *p, const uint32_t *frame_ids, size_t depth,
                                    const int64_t *values, uint32_t *stack_id);
/* As ember_profile_add_ids, interning `frames` first. */
EMBER_API int ember_profile_add(ember_profile_t *p, const ember_frame_t *frames, size_t depth,
                                const int64_t *values);

/* Distinct stacks, ids 0..n-1 in order of first appearance. */
EMBER_API size_t ember_profile_nstacks(const ember_profile_t *p);
/* The frames (leaf first) and values of stack `id`. Borrowed until the next
 * write to the profile. Returns 0 or -EINVAL. */
EMBER_API int ember_profile_stack(const ember_profile_t *p, uint32_t id, const uint32_t **frame_ids,
                                  size_t *depth, const int64_t **values);
/* The sum of value `vi` over all stacks. */
EMBER_API int64_t ember_profile_total(const ember_profile_t *p, size_t vi);

/* Add every stack of `src` into `dst`. Both must have the same value types
 * in the same order, else EMBER_EMISMATCH. Exact and associative. On error
 * dst may hold part of src (-ENOMEM, -ERANGE); callers that need
 * all-or-nothing merge into a copy. dst's labels are kept. */
EMBER_API int ember_profile_merge(ember_profile_t *dst, const ember_profile_t *src);

/* A function's share of a profile. */
typedef struct ember_top_entry {
  char *name;         /* display name (ember_frame_name); owned by the array */
  const char *module; /* borrowed from the profile; may be NULL */
  int64_t self;       /* value where this function is the leaf */
  int64_t total;      /* value of stacks that contain it (once per stack) */
} ember_top_entry_t;

typedef enum ember_top_order { EMBER_TOP_BY_SELF = 0, EMBER_TOP_BY_TOTAL = 1 } ember_top_order_t;

/* The `limit` functions (0 = all) with the largest self or total value of
 * value type index `vi`, largest first, ties by name. Functions are keyed by
 * display name and module. *out is an array of *count entries; free it with
 * ember_top_free(*out, *count). */
EMBER_API int ember_profile_top(const ember_profile_t *p, size_t vi, ember_top_order_t order,
                                size_t limit, ember_top_entry_t **out, size_t *count);
EMBER_API void ember_top_free(ember_top_entry_t *entries, size_t count);

#ifdef __cplusplus
}
#endif
#endif
