/* Opening files a target process controls (docs/internals/safefile.md).
 *
 * The agent runs as root and reads files that any local user can plant or
 * replace: perf maps in /tmp, a container's /tmp seen through
 * /proc/PID/root, the ELF files a process maps, the shared control file of
 * the allocation sampler. Every such open goes through this helper, which:
 *
 *  - never follows a symbolic link in the untrusted part of the path
 *    (openat2 with RESOLVE_NO_SYMLINKS, or a walk of O_NOFOLLOW opens on
 *    kernels without openat2), unless the caller names a link the kernel
 *    itself provides (/proc/PID/exe, /proc/PID/map_files/...);
 *  - never opens what it refuses: the path is resolved with O_PATH (which
 *    runs no driver's open: a device such as /dev/watchdog acts on open
 *    alone), that file is checked, and only then reopened through
 *    /proc/self/fd/N with the real flags and confirmed the same inode;
 *  - accepts only a regular file, optionally owned by exactly a given user,
 *    with one link, no larger than a bound, optionally a given inode;
 *  - opens with O_CLOEXEC | O_NOCTTY.
 *
 * Thread-safety: every function may be called from any thread; the
 * counters are atomic. */
#ifndef EMBER_AGENT_SAFEFILE_H
#define EMBER_AGENT_SAFEFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "ember/metrics.h"

/* No owner check. */
#define EMBER__SAFE_ANY_OWNER ((int64_t)-1)

typedef struct ember__safe_opts {
  int flags;         /* O_RDONLY (0, the default) or O_RDWR; other bits ignored */
  bool follow;       /* the path is trusted (ours or the kernel's): follow links */
  int64_t owner;     /* EMBER__SAFE_ANY_OWNER, or the uid the file must have
                        (exactly: pass 0 for a root target only) */
  bool one_link;     /* refuse a file with another hard link (st_nlink != 1) */
  uint64_t max_size; /* refuse a larger st_size; 0 = no bound */
  uint64_t ino;      /* 0, or the st_ino the file must have (-ESTALE if not) */
} ember__safe_opts_t;

/* Open `path` relative to `dirfd` (a directory the caller trusts, or
 * AT_FDCWD) under the rules above. `o` NULL means: read-only, no links
 * followed, any owner, any size. On success returns the fd and fills *st
 * (may be NULL) with its fstat. Returns -ELOOP for a symbolic link (also
 * one in a directory part of `path`), -ENODEV for a file that is not
 * regular (FIFO, device, directory, socket), -EPERM for the wrong owner or
 * a second link, -EFBIG for a file over max_size, -ESTALE for another
 * inode than `ino`, -EINVAL for bad
 * arguments, or the -errno of the open. Refusals (not a missing file) are
 * counted in ember__safe_stats. */
int ember__safe_openat(int dirfd, const char *path, const ember__safe_opts_t *o, struct stat *st);

/* A file of the kernel or of the host's root (kallsyms, /usr/lib/debug):
 * links followed, any owner, but never a FIFO or a device, and no larger
 * than max_size (0 = no bound). Returns as ember__safe_openat. */
int ember__safe_open_trusted(const char *path, uint64_t max_size, struct stat *st);

/* Open as above and read at most `cap` bytes from the start into buf (not
 * NUL-terminated; /proc files have no size, so this is their bound). Sets
 * *len. Returns 0 or a code of ember__safe_openat or of read. */
int ember__safe_read(int dirfd, const char *path, const ember__safe_opts_t *o, char *buf,
                     size_t cap, size_t *len);

/* pread that retries EINTR and short reads until `len` bytes or the end of
 * the file. Returns the bytes read (may be < len at the end) or -errno. */
ssize_t ember__safe_pread(int fd, void *buf, size_t len, uint64_t off);

/* Tests only: use (false) or stop using (true) openat2, so the walk that
 * stands in for it on older kernels is tested on this one. */
void ember__safe_use_openat2(bool use);

typedef struct ember__safe_stats {
  uint64_t symlinks;    /* a symbolic link where none may be */
  uint64_t not_regular; /* FIFO, device, directory, socket */
  uint64_t bad_owner;   /* wrong owner or more than one link */
  uint64_t too_big;     /* over the size bound */
} ember__safe_stats_t;

/* Process-wide counts of refused opens since start. */
void ember__safe_stats(ember__safe_stats_t *out);

/* The agent's metrics of hostile files: the refusals above and the
 * allocation control files found cut (ember__alloc_preload_faults). */
typedef struct ember__safe_metrics {
  ember_metric_t *symlinks, *not_regular, *bad_owner, *too_big, *shm_faults;
} ember__safe_metrics_t;
/* Register them in `m` (the loop thread, at start). */
void ember__safe_register_metrics(ember_metrics_t *m, ember__safe_metrics_t *out);
/* Copy the counts into them (any thread); shm_faults is
 * ember__alloc_preload_faults(), passed in so this module needs no other. */
void ember__safe_update_metrics(const ember__safe_metrics_t *sm, uint64_t shm_faults);

#endif
