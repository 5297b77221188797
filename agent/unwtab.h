/* User stacks from CFI for the agent's samples: the cache of unwind tables
 * (agent/cfi.h) of the binaries its processes map, and the unwinding of one
 * sample (registers and stack copy) over a process's maps snapshot.
 *
 * A table is built the first time a pc of a sampled process falls in a
 * file mapping, from that file opened the way the symbolizer opens it
 * (agent/procmaps.h: the kernel's map_files link, safe-open rules), and
 * kept by (device, inode) and, for files only root can write, by build-id,
 * so every process that maps a system binary, in any container, shares one
 * table (a user's file claiming that build-id gets a table of its own). The vdso's table is built
 * from the agent's own vdso image (the same on every process of this
 * kernel). Anonymous executable memory (JIT code) has no table: the
 * unwinder takes frame-pointer steps there (agent/unwind.h).
 *
 * Bounds: tables are evicted least recently used when their bytes pass
 * max_bytes; a file that has no CFI or cannot be read is remembered as
 * such (a small entry), so it is not re-read on every sample; a transient
 * failure (out of fds or memory) is not remembered.
 *
 * Thread-safety: one thread (the agent's loop, which reads the rings of
 * both continuous sampling and sessions). Errors: 0 or a negative errno. */
#ifndef EMBER_AGENT_UNWTAB_H
#define EMBER_AGENT_UNWTAB_H

#include <stddef.h>
#include <stdint.h>

#include "procmaps.h"
#include "unwind.h"

/* `unwind` in the agent's config. */
typedef enum ember__unwind_mode {
  EMBER__UNWIND_AUTO = 0, /* CFI, frame pointers where a pc has none */
  EMBER__UNWIND_FP,       /* the kernel's frame-pointer callchains only */
  EMBER__UNWIND_DWARF     /* CFI only: no frame-pointer step */
} ember__unwind_mode_t;

/* "auto" | "fp" | "dwarf" -> mode; -EINVAL otherwise. */
int ember__unwind_mode_parse(const char *s, ember__unwind_mode_t *out);

/* User frames unwound a sample, at most (kernel frames come on top). */
#define EMBER__UNWIND_MAX_DEPTH 256
/* unwind_stack_bytes' default: see docs (chosen by measurement). */
#define EMBER__DEFAULT_STACK_BYTES 16384

typedef struct ember__unwtab_opts {
  size_t max_bytes; /* tables kept; 0 = 64 MiB */
  bool no_fp;       /* no frame-pointer steps (unwind = dwarf) */
} ember__unwtab_opts_t;

typedef struct ember__unwtab_stats {
  uint64_t tables;                          /* tables held now */
  uint64_t bytes;                           /* their memory */
  uint64_t builds;                          /* tables built */
  uint64_t build_ns;                        /* wall time spent building them */
  uint64_t no_cfi;                          /* files without usable CFI (or unreadable) */
  uint64_t evictions;                       /* tables dropped for max_bytes */
  uint64_t fp_steps;                        /* frames found by the frame-pointer fallback */
  uint64_t sig_steps;                       /* signal frames crossed */
  uint64_t results[EMBER__UNWIND_NRESULTS]; /* stacks by how the walk ended */
} ember__unwtab_stats_t;

typedef struct ember__unwtab ember__unwtab_t;

int ember__unwtab_new(const ember__unwtab_opts_t *opts, ember__unwtab_t **out);
void ember__unwtab_free(ember__unwtab_t *t);

/* Unwind the user stack of one sample of a process whose executable
 * mappings are `maps` (may be NULL: then only frame-pointer steps): writes
 * at most cap ips, leaf first, and returns how many. `stack` is the copy
 * of len bytes from regs->sp up. Counts the result in the stats. */
size_t ember__unwtab_unwind(ember__unwtab_t *t, const ember__procmaps_t *maps,
                            const ember__unwind_regs_t *regs, const uint8_t *stack, size_t len,
                            uint64_t *ips, size_t cap);

void ember__unwtab_stats(const ember__unwtab_t *t, ember__unwtab_stats_t *out);

#endif
