/* The maps of a process: a snapshot of the executable mappings listed in
 * /proc/PID/maps (address range, file offset, device and inode, path or
 * special name), lookups by address, and opening the file behind a
 * mapping the way the symbolizer needs it (the kernel's map_files link,
 * the path if it is still the mapped inode, or the path inside the
 * process's root).
 *
 * The text comes from the kernel but the paths in it are whatever names a
 * process gave its files: the parser is total over any bytes, bounded in
 * line length (EMBER__LINE_MAX) and mapping count.
 *
 * Thread-safety: a snapshot is immutable once made; any thread may read or
 * look up in it, one thread frees it. Errors: 0 or a negative errno,
 * outputs untouched on failure. */
#ifndef EMBER_AGENT_PROCMAPS_H
#define EMBER_AGENT_PROCMAPS_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

typedef struct ember__procmaps ember__procmaps_t;

typedef enum ember__map_kind {
  EMBER__MAP_FILE = 0,
  EMBER__MAP_ANON = 1,   /* anonymous executable memory: JIT code */
  EMBER__MAP_VDSO = 2,   /* [vdso] */
  EMBER__MAP_SPECIAL = 3 /* [vsyscall] and other bracketed names */
} ember__map_kind_t;

/* One executable mapping; strings borrowed from the snapshot. */
typedef struct ember__mapping {
  uint64_t start, end, offset;
  uint64_t dev; /* major << 32 | minor, as /proc shows it */
  uint64_t ino;
  const char *path; /* file path or special name; NULL when anonymous */
  ember__map_kind_t kind;
  bool deleted; /* the file was unlinked: only map_files can open it */
} ember__mapping_t;

/* Snapshot the executable mappings of `pid` from <proc_root>/PID/maps
 * (proc_root NULL = "/proc"). Returns 0, -ENOENT/-ESRCH when the process is
 * gone, -EACCES, -ENOMEM. */
int ember__procmaps_read(const char *proc_root, pid_t pid, ember__procmaps_t **out);
/* The same from the text of a maps file in memory (for tests and the
 * fuzzer; the snapshot has no pid, so its files are never opened by pid).
 * Returns 0, -EINVAL or -ENOMEM. */
int ember__procmaps_parse(const char *buf, size_t len, ember__procmaps_t **out);
void ember__procmaps_free(ember__procmaps_t *m);
/* Does some executable mapping cover `addr`? */
bool ember__procmaps_covers(const ember__procmaps_t *m, uint64_t addr);
/* Number of executable mappings (for tests and metrics). */
size_t ember__procmaps_count(const ember__procmaps_t *m);
/* The mapping covering `addr`, or NULL (also for m NULL). Borrowed from m. */
const ember__mapping_t *ember__procmaps_find(const ember__procmaps_t *m, uint64_t addr);
/* The i-th executable mapping in address order, or NULL past the end (for
 * readers that walk them all). Borrowed from m. */
const ember__mapping_t *ember__procmaps_get(const ember__procmaps_t *m, size_t i);
/* The first mapping, in address order, for which match(mp, ctx) is true;
 * NULL when none (or m NULL). E.g. the libc a process maps: a file
 * mapping whose path's last component starts with "libc.so". */
const ember__mapping_t *
ember__procmaps_find_if(const ember__procmaps_t *m,
                        bool (*match)(const ember__mapping_t *mp, void *ctx), void *ctx);
/* The last component of a file mapping's path ("" for none). */
const char *ember__mapping_basename(const ember__mapping_t *mp);

/* The uid that owned the process when the snapshot was read; -1 unknown. */
int64_t ember__procmaps_uid(const ember__procmaps_t *m);

/* Open the file behind mapping `mp` of snapshot `m` (a regular file no
 * larger than max_size, read-only, CLOEXEC), best effort: the kernel's
 * link to the mapped file itself (works for deleted files and other mount
 * namespaces while the process lives), else the plain path if it is still
 * the mapped inode, else the path inside the process's root. Fills *st.
 * Returns an fd, a transient error (ember__procmaps_transient), or another
 * negative errno (-ESTALE: no file that is the mapped one). */
int ember__procmaps_open(const ember__procmaps_t *m, const ember__mapping_t *mp, uint64_t max_size,
                         struct stat *st);
/* An O_PATH directory fd of the process's root (<proc_root>/PID/root), for
 * finding files beside a mapped one as the process sees them (debuglinks).
 * The caller closes it. Returns the fd; AT_FDCWD for a snapshot without a
 * pid (ember__procmaps_parse: its paths are the agent's own, as
 * ember__procmaps_open takes them); -ENOENT when the process is gone, or
 * another -errno. */
int ember__procmaps_open_root(const ember__procmaps_t *m);
/* An error that says nothing of the file (out of fds or memory): retry
 * later rather than remember the file as unreadable. */
static inline bool ember__procmaps_transient(int err) {
  return err == -EMFILE || err == -ENFILE || err == -ENOMEM;
}

#endif
