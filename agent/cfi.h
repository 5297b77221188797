/* Unwind tables for x86-64 from an ELF file's call frame information.
 *
 * A binary's .eh_frame (and its .debug_frame, for ranges .eh_frame does not
 * cover) is parsed once into a compact table sorted by pc: each row says,
 * for the pcs from its start to the next row's, how an x86-64 unwinder gets
 * the caller's registers. Interpreting DWARF CFA programs happens here, at
 * build time only; a step of the unwinder (agent/unwind.h) is a binary
 * search over the rows.
 *
 * What a row holds, and why that is enough: the caller's rip, rsp and rbp.
 * The caller's rsp is the CFA (by the x86-64 psABI), its rip is the return
 * address saved at CFA + ra_off, and rbp is the only other register a later
 * CFA rule can depend on (functions that keep a frame pointer use CFA =
 * rbp + n). So a row is: the CFA rule (rsp + n, rbp + n, the PLT stubs'
 * well-known expression, or "unknown"), where rbp is saved (unchanged, at
 * CFA + n, or lost), where the return address is (CFA + n, or undefined:
 * the outermost frame such as _start), and whether the function is a signal
 * trampoline (CIE augmentation 'S', glibc's __restore_rt). Rules for other
 * registers are parsed and dropped.
 *
 * Memory: 12 bytes a row (pc as a 32-bit offset from the table's lowest pc,
 * a 32-bit CFA offset, a 16-bit rbp offset, an 8-bit return-address offset
 * and a flag byte), plus a fixed header. Consecutive rows that say the same
 * are merged; the space between two FDEs gets one "no info" row. Rows whose
 * offsets do not fit the fields become "unknown" (counted), never wrapped.
 * Measured (Debian 12, one core of a loaded 2-core machine, CPU time):
 * libc.so.6: 3713 FDEs, 28273 rows, 331 KiB, ~0.8 ms; python3.11: 10221
 * FDEs, 64574 rows, 757 KiB, ~4 ms; xz: 119 FDEs, 1211 rows, 14 KiB,
 * 0.03 ms. Over all 1817 ELF files of /usr/bin and /usr/lib/x86_64-linux-gnu:
 * 21.8M rows, 2151 of them unknown (longjmp-like code that keeps rsp and
 * rip in other registers), no entry dropped. ember__cfi_stats_t reports
 * bytes and build_ns per build.
 *
 * Hostile input: the ELF file belongs to the profiled process. Every read
 * is bounds-checked against its section; CIE/FDE counts, rows, CFA
 * instruction bytes and section sizes are bounded by ember__cfi_limits_t;
 * the remember/restore stack has a fixed depth. A corrupt entry is dropped
 * (its pcs get no info) and counted in the stats by reason; the build ends
 * early, keeping what it has, when a limit is reached. Nothing here loops
 * more than the section's length or allocates beyond the limits.
 *
 * Supported: .eh_frame CIE versions 1 and 3; augmentations z, R, P
 * (personality skipped), L, S; pointer encodings absptr, udata2/4/8,
 * sdata2/4/8, uleb128, sleb128 with pcrel application (absolute too).
 * datarel, textrel, funcrel, aligned and indirect are refused for FDE
 * addresses (counted as bad_encoding); a personality pointer of any
 * encoding but aligned is skipped. .debug_frame CIE id 0xffffffff (and the
 * 64-bit form), versions 1, 3 and 4, address size 4 or 8. .eh_frame_hdr is
 * not used: the table is its own index.
 *
 * Thread-safety: building touches only the caller's Elf handle (libelf
 * handles are not thread-safe: one thread at a time per Elf) and the new
 * table. A built table is immutable: any number of threads may call
 * ember__cfi_find and the other readers on it concurrently, so one table
 * can be shared by every process that maps the binary (cache it by
 * build-id). Free it once, when no reader is left.
 *
 * Errors: 0 on success, -EINVAL for bad arguments, -ENOMEM, -ENOEXEC for an
 * ELF that is not x86-64 64-bit, EMBER_ENOTFOUND when the binary has no
 * CFI (no section, or sections without any FDE), EMBER_ECORRUPT when it
 * has FDEs but none usable (the stats say why). */
#ifndef EMBER_AGENT_CFI_H
#define EMBER_AGENT_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libelf.h>

typedef struct ember__cfi_table ember__cfi_table_t;

/* Defaults of the bounds (0 in ember__cfi_limits_t picks these). The row
 * bound holds every binary of a Debian system with room (libc: ~30k rows,
 * a large C++ program: a few million); the section bound is the size read
 * into memory for one section. */
#define EMBER__CFI_MAX_FDES          (1u << 20)
#define EMBER__CFI_MAX_ROWS          (1u << 23)
#define EMBER__CFI_MAX_INSN_BYTES    (256u << 20)
#define EMBER__CFI_MAX_SECTION_BYTES (256u << 20)

typedef struct ember__cfi_limits {
  size_t max_fdes;          /* FDEs read (both sections) */
  size_t max_rows;          /* rows kept, before merging */
  size_t max_insn_bytes;    /* CFA instruction bytes interpreted (CIE initial
                               instructions count again for each FDE) */
  size_t max_section_bytes; /* a larger .eh_frame/.debug_frame is not read */
} ember__cfi_limits_t;

/* How a build went; filled even when the build fails. */
typedef struct ember__cfi_stats {
  uint64_t build_ns; /* wall time of the build */
  size_t bytes;      /* memory of the table (header + rows) */
  size_t rows;       /* rows in the table, after merging, gaps included */
  size_t fdes;       /* FDEs in the table */
  size_t debug_fdes; /* of which from .debug_frame */
  size_t cies;       /* CIEs parsed (cached ones not counted again) */
  /* Entries dropped, by reason. */
  size_t bad_entry;    /* a length, CIE pointer or field outside its entry */
  size_t bad_cie;      /* unsupported CIE version, augmentation, RA column */
  size_t bad_encoding; /* an FDE address encoding that is refused */
  size_t bad_insn;     /* unknown or malformed CFA instruction, state stack
                          over/underflow, a location going backwards */
  size_t overlaps;     /* FDEs overlapping an earlier (or .eh_frame) one */
  size_t limited;      /* not read: a limit of ember__cfi_limits_t hit */
  size_t unknown_rows; /* rows kept as "unknown": an expression other than
                          the PLT one, a CFA on another register, a field
                          overflow (the unwinder stops there) */
} ember__cfi_stats_t;

/* Build the table of an ELF image: a file opened by the caller (through
 * agent/safefile.h and elf_begin) or an image in memory (elf_memory, e.g.
 * the vdso). Reads .eh_frame, then .debug_frame for the pcs .eh_frame does
 * not cover (a compressed .debug_frame is decompressed in the Elf handle,
 * within max_section_bytes). `elf` is borrowed for the call only; nothing
 * in the table points into it. `lim` may be NULL (defaults). `stats` may be
 * NULL; when given it is filled whatever the result. On success *out is a
 * new table the caller owns (ember__cfi_free); on failure *out is untouched.
 * Returns 0, -EINVAL, -ENOMEM, -ENOEXEC, EMBER_ENOTFOUND, EMBER_ECORRUPT. */
int ember__cfi_build(Elf *elf, const ember__cfi_limits_t *lim, ember__cfi_stats_t *stats,
                     ember__cfi_table_t **out);

/* The same from raw section images: `eh` (len bytes of .eh_frame, loaded at
 * file vaddr `eh_vaddr`, which pcrel encodings are relative to) and/or
 * `dbg` (.debug_frame); either may be NULL with length 0. For tests and the
 * fuzzer; the buffers are borrowed for the call only. */
int ember__cfi_build_sections(const uint8_t *eh, size_t eh_len, uint64_t eh_vaddr,
                              const uint8_t *dbg, size_t dbg_len, const ember__cfi_limits_t *lim,
                              ember__cfi_stats_t *stats, ember__cfi_table_t **out);

/* Free a table (NULL: no-op). No reader may use it any more. */
void ember__cfi_free(ember__cfi_table_t *t);

typedef enum ember__cfa_kind {
  EMBER__CFA_RSP = 1, /* CFA = rsp + cfa_off */
  EMBER__CFA_RBP,     /* CFA = rbp + cfa_off */
  /* A PLT stub's expression: CFA = rsp + 8, plus 8 more when
   * (rip & 15) >= cfa_off (11 for the classic lazy PLT: the push has run). */
  EMBER__CFA_PLT,
  EMBER__CFA_UNKNOWN /* a rule an x86-64 unwinder here cannot follow */
} ember__cfa_kind_t;

/* One row, decoded (the table stores it packed in 12 bytes). */
typedef struct ember__cfi_rule {
  uint64_t start, end; /* the file vaddrs [start, end) it covers */
  ember__cfa_kind_t cfa;
  int32_t cfa_off;   /* see ember__cfa_kind_t */
  int32_t ra_off;    /* return address at CFA + ra_off (normally -8) */
  int32_t rbp_off;   /* when rbp_saved: the caller's rbp at CFA + rbp_off */
  bool rbp_saved;    /* else rbp is unchanged in the caller ... */
  bool rbp_lost;     /* ... unless its rule is one not kept (expression,
                        another register, undefined): then unknown */
  bool ra_undefined; /* outermost frame: stop here, the stack is complete */
  bool signal;       /* signal trampoline (CIE 'S'): the caller's registers
                        are in the signal frame, not in CFA rules */
} ember__cfi_rule_t;

/* The row covering file vaddr `vaddr` (a pc minus the module's load bias):
 * a binary search. Returns 0 and fills *out, or EMBER_ENOTFOUND when no FDE
 * covers it (outside the table or in a gap). Thread-safe on a built table;
 * no allocation. */
int ember__cfi_find(const ember__cfi_table_t *t, uint64_t vaddr, ember__cfi_rule_t *out);

/* Rows in the table, and row `i` decoded (0 or EMBER_ENOTFOUND past the
 * end; a gap row decodes with cfa 0). For tests and diagnostics. */
size_t ember__cfi_count(const ember__cfi_table_t *t);
int ember__cfi_row(const ember__cfi_table_t *t, size_t i, ember__cfi_rule_t *out);

/* Memory held by the table, in bytes. */
size_t ember__cfi_bytes(const ember__cfi_table_t *t);

#endif
