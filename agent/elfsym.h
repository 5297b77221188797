/* ELF modules: opening an ELF file safely (mapped only when no one but
 * root can write it, otherwise read with pread), its build-id, and the
 * per-build-id "module" the symbolizer caches: the PT_LOAD headers that
 * translate a file offset to the file's own virtual address, the sorted
 * STT_FUNC symbol table (.symtab, else the separate debug file's that
 * debuginfo.h finds by build-id or .gnu_debuglink, else .dynsym with the
 * functions MiniDebugInfo adds), names demangled once as the table is
 * built (demangle.h), and the DWARF kept for lines and inline frames
 * (dwarfline.h).
 *
 * ELF files are hostile input (any user can map a crafted one): every
 * size is bounded, a file that is not ELF or over a bound fails cleanly.
 *
 * Thread-safety: a module is used by one thread at a time (the
 * symbolizer's); building modules on several threads is safe. Errors: 0,
 * a negative errno, or EMBER_ECORRUPT for a file that is not ELF. */
#ifndef EMBER_AGENT_ELFSYM_H
#define EMBER_AGENT_ELFSYM_H

#include <libelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "debuginfo.h"
#include "dwarfline.h"

/* ELF and debug files larger than this are not read. */
#define EMBER__ELF_MAX_SIZE (2ull << 30)
/* Room for a build-id in hex and its NUL (ids longer than 64 bytes are cut). */
#define EMBER__BUILD_ID_HEX (2 * 64 + 1)

/* An open ELF file. */
typedef struct ember__elf_file {
  int fd;
  Elf *elf;
  bool mapped;   /* ELF_C_READ_MMAP: only for files nobody but root can write */
  uint64_t size; /* st_size at open */
} ember__elf_file_t;

/* A closed file, for initialisation. */
#define EMBER__ELF_FILE_NONE ((ember__elf_file_t){-1, NULL, false, 0})

/* Open the ELF file behind `fd` (takes ownership: closed on failure; `st`
 * is its fstat). A mapping is cheaper than reads, but a file that someone
 * truncates while the agent has it mapped raises SIGBUS in the agent: only
 * files that root owns and no one else may write are mapped, and only when
 * `root_safe` (the process that maps it is not root itself: a root process,
 * say in a rootful container, may cut root's files); every other one is
 * read with pread. Returns 0 or EMBER_ECORRUPT (not ELF). */
int ember__elf_open_fd(int fd, const struct stat *st, bool root_safe, ember__elf_file_t *out);
/* Close (idempotent; EMBER__ELF_FILE_NONE is fine). */
void ember__elf_close(ember__elf_file_t *f);
/* The GNU build-id in hex into `hex` (EMBER__BUILD_ID_HEX bytes hold any;
 * a smaller buffer cuts it). Returns false when the file has none. */
bool ember__elf_build_id(Elf *elf, char *hex, size_t size);

/* A function: [start, end) in the file's virtual addresses. */
typedef struct ember__elfsym {
  uint64_t start, end;
  const char *name; /* in the module, valid until ember__elfmod_free */
} ember__elfsym_t;

typedef struct ember__elfmod ember__elfmod_t;

/* How a module is built. Zeros: no DWARF, no separate debug info, names
 * demangled. */
typedef struct ember__elfmod_opts {
  bool dwarf;          /* keep the file's DWARF for lines and inline frames */
  bool dwarf_detached; /* ... or that of its separate debug file */
  bool no_demangle;    /* keep C++ and Rust names mangled */
  /* Separate debug files and MiniDebugInfo (borrowed; NULL: neither). */
  ember__debuginfo_t *debuginfo;
  /* Where the file is, for its .gnu_debuglink: its path as the process
   * sees it (NULL: unknown, e.g. deleted), the process's root (an O_PATH
   * fd, AT_FDCWD, or -1: none), and whether the process is not root (see
   * ember__debug_target_t). */
  const char *path;
  int root_fd;
  bool root_safe;
  /* DWARF whose debug sections would take more memory than this is not
   * kept (symbols only); 0 = dwarfline.h's own bound. */
  uint64_t dwarf_max_bytes;
} ember__elfmod_opts_t;

/* Parse the open file `f` (stays the caller's; a mapped file's handle may
 * be taken for DWARF, leaving f->elf NULL) into a new module. `build_id`
 * (may be NULL) is copied; `o` may be NULL (all zeros, root_fd -1 then
 * being irrelevant). Returns 0, -ENOMEM, -EFBIG (symbol table over its
 * bound). */
int ember__elfmod_build(ember__elf_file_t *f, const char *build_id, const ember__elfmod_opts_t *o,
                        ember__elfmod_t **out);
/* Drop what only lookups need (symbols, segments, DWARF indexes); keep
 * what frames point into (names, build-id, the DWARF handle). A stripped
 * module resolves nothing. */
void ember__elfmod_strip(ember__elfmod_t *m);
/* Free (NULL is fine); strings from the module become invalid. */
void ember__elfmod_free(ember__elfmod_t *m);

/* The build-id in hex, NULL when the file has none. */
const char *ember__elfmod_build_id(const ember__elfmod_t *m);
/* File offset -> the file's virtual address through the PT_LOAD headers.
 * Returns false when no segment holds the offset. */
bool ember__elfmod_translate(const ember__elfmod_t *m, uint64_t file_off, uint64_t *vaddr);
/* The function holding virtual address `a`, or NULL. */
const ember__elfsym_t *ember__elfmod_sym(const ember__elfmod_t *m, uint64_t a);
/* The module's DWARF, NULL when none was kept. Borrowed from the module. */
ember__dwarfline_t *ember__elfmod_dwarf(const ember__elfmod_t *m);
/* The memory the module holds (symbols, names, segments, its DWARF: see
 * ember__dwarfline_bytes), and of that its DWARF's. NULL is 0. Grows with
 * DWARF lookups. */
uint64_t ember__elfmod_bytes(const ember__elfmod_t *m);
uint64_t ember__elfmod_debug_bytes(const ember__elfmod_t *m);

#endif
