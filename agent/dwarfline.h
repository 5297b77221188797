/* DWARF line info and inline frames of one ELF module: an index of the
 * compilation units' address ranges (built on the first lookup), per CU an
 * index of its functions and inlined calls (built on the first lookup in
 * that CU), and a lookup that turns a file-relative address into frames,
 * innermost inlined call first, with file and line from the line table.
 *
 * The ELF handle is kept in memory: mapped when the file is root's and
 * nobody else may write it (elfsym.c decides), otherwise its debug
 * sections are read into memory, bounded per file and process-wide (a file
 * the profiled process may cut would raise SIGBUS in a mapping). What a
 * handle holds is reported (ember__dwarfline_bytes) for the symbolizer's
 * budget.
 *
 * Thread-safety: one handle is used by one thread at a time (the
 * symbolizer's); the process-wide budget of debug-section copies is
 * atomic.
 * Errors: 0 or a negative errno; a file without usable DWARF is not an
 * error, its lookups just find nothing. */
#ifndef EMBER_AGENT_DWARFLINE_H
#define EMBER_AGENT_DWARFLINE_H

#include <libelf.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ember__dwarfline ember__dwarfline_t;

/* Keep the DWARF of the open ELF file (`fd`, its handle *elf, whether
 * libelf maps it) for later lookups. A mapped file's handle is taken (*elf
 * set to NULL: libelf lets go of the fd); of a read one, a handle of our
 * own reads the debug sections (libdw then holds them in memory) if they
 * are at most `max_bytes` (0: 256 MiB) and the process-wide budget has
 * room, and *elf stays the caller's. With `demangle`, functions and
 * inlined calls that have a C++ or Rust linkage name are named by it,
 * demangled (once per CU, as it is indexed). Returns 0 with *out set, 0
 * with *out NULL when the DWARF is not kept (over a bound, unreadable), or
 * -ENOMEM. */
int ember__dwarfline_open(int fd, Elf **elf, bool mapped, uint64_t max_bytes, bool demangle,
                          ember__dwarfline_t **out);

/* The memory the handle holds, in bytes: debug sections read or
 * decompressed into memory, our indexes and names, and an estimate of
 * libdw's own (its CUs and decoded line tables), which grows with the
 * lookups. Not the pages of a mapped file (clean, reclaimable). */
uint64_t ember__dwarfline_bytes(const ember__dwarfline_t *d);

/* Drop the indexes (what only lookups need) but keep the DWARF handle,
 * which the strings of earlier frames point into. */
void ember__dwarfline_strip(ember__dwarfline_t *d);
/* Free everything (NULL is fine); earlier frames' strings become invalid. */
void ember__dwarfline_free(ember__dwarfline_t *d);

/* Called per frame, innermost first; `function` and `file` are borrowed
 * from the handle (valid until ember__dwarfline_free, also after a strip),
 * either may be NULL.
 * Return false to stop (the caller's frame buffer is full). */
typedef bool (*ember__dwarfline_emit_fn)(void *ctx, const char *function, const char *file,
                                         uint32_t line);

/* Frames for the file-relative address `a`: inlined calls innermost first,
 * then the function itself, named `sym_name` (the ELF symbol's name, so
 * frames agree with DWARF-less agents) when not NULL. Sets *done when at
 * least one frame was emitted. Returns 0 or -ENOMEM. */
int ember__dwarfline_frames(ember__dwarfline_t *d, uint64_t a, const char *sym_name,
                            ember__dwarfline_emit_fn emit, void *ctx, bool *done);

#endif
