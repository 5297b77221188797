/* Separate debug information for an ELF file, found the way gdb and perf
 * find it (docs/internals/debuginfo.md):
 *
 *  - by build-id: <debug_dir>/.build-id/xx/rest.debug for each debug
 *    directory (Debian's *-dbgsym and libc6-dbg, Fedora's -debuginfo);
 *    the candidate's own build-id must be the same;
 *  - by .gnu_debuglink (a file name and the CRC32 of that file):
 *    <dir>/<name> and <dir>/.debug/<name> in the process's own filesystem,
 *    then <debug_dir>/<dir>/<name>; the candidate's CRC32 must be the one
 *    the link records;
 *  - MiniDebugInfo: a .gnu_debugdata section holding an xz-compressed ELF
 *    whose .symtab lists the functions a stripped file's .dynsym lacks
 *    (Fedora, CentOS), decompressed into memory.
 *
 * Every candidate is hostile input: files in the process's directories are
 * opened through safefile.h with no symbolic link followed (the process
 * owns them); files under a debug directory (the host's, root's) may be
 * reached through links, as Fedora's .build-id links are, but are never a
 * FIFO or device; every file is bounded in size, and the decompressed image
 * and the decoder's memory are bounded. A refused candidate is skipped and
 * counted (ember__debuginfo_stats), never an error.
 *
 * Thread-safety: a handle is used by one thread at a time (the
 * symbolizer's); distinct handles are independent.
 *
 * Errors: 0, -ENOENT when nothing usable was found, -ENOMEM, -EMFILE or
 * -ENFILE (transient: the caller may try again later), EMBER_ECORRUPT and
 * -EFBIG for MiniDebugInfo that is malformed or over a bound. Out-parameters
 * are untouched on failure. */
#ifndef EMBER_AGENT_DEBUGINFO_H
#define EMBER_AGENT_DEBUGINFO_H

#include <libelf.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The default debug directory. */
#define EMBER__DEBUG_DIR_DEFAULT "/usr/lib/debug"

typedef struct ember__debuginfo_opts {
  /* Debug directories, ':'-separated, searched in order. NULL means
   * EMBER__DEBUG_DIR_DEFAULT; "" means none (only the process's own
   * directories are searched for a debuglink). */
  const char *debug_dirs;
  uint64_t max_file_size; /* debug files larger are refused; 0 = 2 GiB */
  size_t minidebug_max;   /* decompressed MiniDebugInfo bound; 0 = 64 MiB */
} ember__debuginfo_opts_t;

typedef struct ember__debuginfo ember__debuginfo_t;

/* Copies what it needs of `opts` (may be NULL). Returns 0, -EINVAL (a debug
 * directory that is not absolute, or longer than PATH_MAX) or -ENOMEM. */
int ember__debuginfo_new(const ember__debuginfo_opts_t *opts, ember__debuginfo_t **out);
void ember__debuginfo_free(ember__debuginfo_t *d);

/* The file whose debug information is wanted. */
typedef struct ember__debug_target {
  Elf *elf;             /* borrowed: the file as the process maps it */
  const char *build_id; /* lower-case hex, or NULL when the file has none */
  /* An O_PATH fd of the process's root directory (/proc/PID/root),
   * AT_FDCWD for the agent's own root, or -1 when the process's root cannot
   * be opened (then only the debug directories are searched). Borrowed. */
  int root_fd;
  /* The file's directory as the process sees it (absolute: "/usr/bin"), or
   * NULL when unknown (a deleted file): no debuglink search then. */
  const char *dir;
  /* The process is not root: a candidate in its directories that root
   * owns and no one else may write may be mapped rather than read. */
  bool root_safe;
} ember__debug_target_t;

typedef enum ember__debug_source {
  EMBER__DEBUG_NONE = 0,
  EMBER__DEBUG_BUILD_ID, /* <debug_dir>/.build-id/xx/rest.debug */
  EMBER__DEBUG_LINK,     /* .gnu_debuglink, CRC verified */
} ember__debug_source_t;

/* An open debug file. A mapped file (ELF_C_READ_MMAP) is one only root may
 * write; any other is read with pread (a mapped file cut by its owner would
 * raise SIGBUS in the agent). */
typedef struct ember__debug_file {
  int fd;
  Elf *elf;
  bool mapped;
  uint64_t size; /* st_size at open */
  ember__debug_source_t source;
} ember__debug_file_t;

#define EMBER__DEBUG_FILE_INIT ((ember__debug_file_t){-1, NULL, false, 0, EMBER__DEBUG_NONE})

/* End the ELF handle and close the fd; the file is EMBER__DEBUG_FILE_INIT
 * again. NULL or an empty file is a no-op. */
void ember__debug_file_close(ember__debug_file_t *f);

/* Find and open the separate debug file of `t`: by build-id first, then by
 * debuglink. On success *out owns the file. Returns 0, -ENOENT, -ENOMEM,
 * -EMFILE/-ENFILE. */
int ember__debuginfo_find(ember__debuginfo_t *d, const ember__debug_target_t *t,
                          ember__debug_file_t *out);

/* The .gnu_debuglink of `elf`: the file name (borrowed from the ELF
 * handle, valid while it lives) and the CRC32 it records. Returns 0,
 * -ENOENT (no such section), or EMBER_ECORRUPT (malformed, or a name that
 * is empty, ".", "..", has a '/', or is longer than NAME_MAX; counted as
 * bad_link). */
int ember__debuginfo_link(ember__debuginfo_t *d, Elf *elf, const char **name, uint32_t *crc);

/* The CRC32 (zlib's, the one .gnu_debuglink records) of the first `size`
 * bytes of fd. Returns 0, -EIO when the file is shorter, or -errno. */
int ember__debuginfo_crc32(int fd, uint64_t size, uint32_t *out);

/* A decompressed MiniDebugInfo image and the ELF handle over it. */
typedef struct ember__minidebug {
  Elf *elf;
  char *image; /* ember_malloc'ed; elf points into it */
  size_t size;
} ember__minidebug_t;

/* Decompress `elf`'s .gnu_debugdata into an ELF image in memory (at most
 * minidebug_max bytes; the xz decoder is held to a memory limit too) and
 * open it with elf_memory. The image must be ELF with a .symtab. On success
 * *out owns both (ember__minidebug_free). Returns 0, -ENOENT (no section),
 * EMBER_ECORRUPT (not xz, truncated, not ELF, no .symtab), -EFBIG (over a
 * bound) or -ENOMEM. */
int ember__debuginfo_minidebug(ember__debuginfo_t *d, Elf *elf, ember__minidebug_t *out);
/* NULL or an empty one is a no-op; *m is empty after. */
void ember__minidebug_free(ember__minidebug_t *m);

typedef struct ember__debuginfo_stats {
  uint64_t by_build_id;       /* debug files found by build-id */
  uint64_t by_link;           /* debug files found by .gnu_debuglink */
  uint64_t minidebug;         /* MiniDebugInfo images decompressed */
  uint64_t build_id_mismatch; /* a .build-id file of another build */
  uint64_t crc_mismatch;      /* a debuglink candidate with another CRC32 */
  uint64_t bad_link;          /* a malformed .gnu_debuglink or unsafe name */
  uint64_t unsafe;            /* a candidate refused on open: link, FIFO, size */
  uint64_t not_elf;           /* a candidate that is not ELF */
  uint64_t minidebug_bad;     /* .gnu_debugdata not xz, truncated, not ELF */
  uint64_t minidebug_too_big; /* .gnu_debugdata over a size or memory bound */
} ember__debuginfo_stats_t;

void ember__debuginfo_stats(const ember__debuginfo_t *d, ember__debuginfo_stats_t *out);

#endif
