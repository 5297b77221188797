/* Symbolization on the agent: turn instruction addresses of a process into
 * frames (function, file, line, module, build-id), with inline frames where
 * DWARF has them.
 *
 * Sources, per address:
 *  - kernel addresses (>= EMBER__KERNEL_MIN): /proc/kallsyms, read once and
 *    kept sorted; module "[kernel]" (or "[module_name]" for modules).
 *  - addresses in a file-backed executable mapping of the process: that
 *    ELF file's .symtab, else its separate debug file's (by build-id or
 *    .gnu_debuglink, under debug_dirs), else .dynsym and MiniDebugInfo
 *    (STT_FUNC, C++ and Rust names demangled, sorted table built once per
 *    build-id and shared by every process that maps the file) and DWARF
 *    line info / inline frames through elfutils; address translated to the
 *    file's own virtual address via the mapping's file offset and the ELF
 *    PT_LOAD headers.
 *  - addresses in an anonymous executable mapping: /tmp/perf-PID.map (the
 *    perf map Node.js writes with --perf-basic-prof), re-read when an
 *    address misses (the file is append-only); a JavaScript function
 *    whose script has a source map is named, filed and lined as its
 *    author wrote it (jsmap.h), its module the generated script.
 *  - anything else, or a lookup that fails: a frame with module and
 *    module-relative address and no function, never an error.
 *
 * The sources are modules of their own: procmaps.h (maps of a process),
 * elfsym.h (ELF symbol tables), dwarfline.h (DWARF lines), ksyms.h
 * (kallsyms), perfmap.h (perf maps); this one keeps the module cache (LRU
 * by build-id, aliases by device and inode), the vdso and the resolver.
 *
 * A process's mappings are captured in an ember__procmaps_t while it lives
 * (the agent takes the snapshot when it first sees the pid, and again when
 * an address falls outside every mapping), so a process that exits during
 * a window is still symbolized at the window's end.
 *
 * Thread-safety: a symbolizer is used by one thread at a time (the agent's
 * window-closing thread). ember__procmaps_read may run on any thread. */
#ifndef EMBER_AGENT_SYMBOLIZE_H
#define EMBER_AGENT_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "debuginfo.h"
#include "ember/profile.h"
#include "jsmap.h"
#include "perfmap.h"
#include "procmaps.h"

/* x86-64: the kernel half of the address space. */
#define EMBER__KERNEL_MIN 0xffff800000000000ULL

typedef struct ember__symbolizer_opts {
  const char *proc_root;    /* NULL = "/proc" */
  const char *perf_map_dir; /* NULL = "/tmp" */
  const char *kallsyms;     /* NULL = "/proc/kallsyms" */
  size_t max_modules;       /* cached ELF modules; 0 = 512 */
  /* Memory of the cached modules (symbol tables, names, kept DWARF and
   * what libdw decoded of it), least recently used evicted past it; a
   * module's DWARF over a quarter of it is not kept. 0 = 24 MiB. */
  uint64_t max_bytes;
  bool dwarf; /* file/line and inline frames from DWARF */
  /* Do not read DWARF from detached debug files (/usr/lib/debug, e.g.
   * libc6-dbg): they still give symbol tables, but their DWARF costs tens
   * of MiB of memory per library once decompressed. */
  bool no_detached_dwarf;
  /* Where separate debug files are looked for by build-id and debuglink,
   * ':'-separated (debuginfo.h); NULL = "/usr/lib/debug", "" = nowhere
   * but beside each file. */
  const char *debug_dirs;
  /* Keep C++ and Rust names mangled (they are demangled once per module,
   * as its symbol table is built). */
  bool no_demangle;
  /* Bounds of each pid's perf map (zeros: perfmap.h's defaults). */
  ember__perfmap_limits_t perf_map;
  /* Map JIT frames of JavaScript through their scripts' source maps
   * (jsmap.h), holding at most sourcemap_bytes of decoded maps (0 = its
   * default). */
  bool sourcemaps;
  uint64_t sourcemap_bytes;
} ember__symbolizer_opts_t;

typedef struct ember__symbolizer ember__symbolizer_t;

typedef struct ember__symbolizer_stats {
  uint64_t module_hits;    /* address resolved through a cached module */
  uint64_t module_loads;   /* ELF files parsed */
  uint64_t perf_map_loads; /* perf map refreshes that found the file */
  uint64_t unresolved;     /* frames left as module+offset or unknown */
  uint64_t files_mapped;   /* ELF files mapped rather than read with pread */
  uint64_t debug_files;    /* separate debug files found (build-id, debuglink) */
  uint64_t minidebug;      /* MiniDebugInfo images read */
  uint64_t debug_refused;  /* debug candidates refused (ember__debuginfo_stats_t) */
  uint64_t bytes;          /* memory of the cached modules now (max_bytes) */
  uint64_t debug_bytes;    /* ... of which their DWARF */
  uint64_t evictions;      /* modules evicted (max_modules, max_bytes) */
} ember__symbolizer_stats_t;

/* Returns 0, -ENOMEM, or -EINVAL for a debug_dirs entry that is not an
 * absolute path without "." or ".." components. */
int ember__symbolizer_new(const ember__symbolizer_opts_t *opts, ember__symbolizer_t **out);
void ember__symbolizer_free(ember__symbolizer_t *s);

/* Symbolize one stack of `pid`: `ips` leaf first (the leaf is an exact
 * address; every other one is a return address, looked up as ip - 1).
 * `maps` is the process's snapshot (may be NULL: then only kernel and perf
 * map addresses resolve). Writes frames leaf first into out[0..cap) — an
 * address may give several frames (inlined calls, innermost first) — and
 * sets *n. The frames' strings are borrowed from the symbolizer, valid
 * until the next call to ember__symbolizer_forget or _free. Returns 0 or
 * -ENOMEM; when cap is too small the stack is cut at cap frames (root
 * side dropped). */
int ember__symbolize(ember__symbolizer_t *s, pid_t pid, const ember__procmaps_t *maps,
                     const uint64_t *ips, size_t nips, ember_frame_t *out, size_t cap, size_t *n);

/* Drop per-process state (perf map) of a pid that has exited; the shared
 * ELF module cache stays. Strings from earlier calls become invalid. Any
 * call also releases modules evicted from the cache since the last one, so
 * callers call it (pid 0 is fine) once per batch of work, e.g. per window.
 * A call also starts a new batch for perf maps: each pid's map is
 * refreshed (on a miss) at most once between two calls. */
void ember__symbolizer_forget(ember__symbolizer_t *s, pid_t pid);
void ember__symbolizer_stats(const ember__symbolizer_t *s, ember__symbolizer_stats_t *out);
/* The source maps' counts (all zero when they are off). */
void ember__symbolizer_jsmaps_stats(const ember__symbolizer_t *s, ember__jsmaps_stats_t *out);
/* The separate-debug-info counts, each refusal by its reason. */
void ember__symbolizer_debuginfo_stats(const ember__symbolizer_t *s, ember__debuginfo_stats_t *out);

#endif
