/* Small readers of /proc (and /sys) files the agent needs in more than one
 * module: bounded reads of kernel files, sysctls, the task list of a
 * process, the NSpid line, and the line reader and field scanners the
 * parsers of /proc text share. The files are read through the safe-open
 * helper (safefile.h), bounded;
 * their contents come from the kernel but describe processes a hostile
 * user controls, so every parser is total over any text.
 *
 * Thread-safety: no shared state; any thread may call any function.
 * Errors: 0 or a negative errno, outputs untouched on failure. */
#ifndef EMBER_AGENT_PROCFS_H
#define EMBER_AGENT_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The NSpid line of a /proc/PID/status text (NUL-terminated): *levels is
 * how many pids it lists (one per pid namespace, from the proc mount's
 * down to the process's own) and *last the last of them, the pid as the
 * process's own namespace numbers it. Returns 0, or -ENOENT when there is
 * no NSpid line, it lists no pid, or a pid is past INT32_MAX (outputs
 * untouched). */
int ember__proc_nspid_parse(const char *status, uint64_t *last, unsigned *levels);

/* The pid `pid` has in its own namespace, from <proc_root>/<pid>/status.
 * Returns 0, -ENAMETOOLONG, -ENOENT (see above), or a code of
 * ember__safe_read; *out is untouched on failure. */
int ember__proc_ns_pid(const char *proc_root, pid_t pid, uint64_t *out);

/* Read at most `cap` bytes of dirfd/name (dirfd AT_FDCWD or a directory
 * of /proc or /sys; name a file of the kernel's, so links are followed,
 * as /proc/self or sysfs's device links) into buf, not NUL-terminated, and
 * set *len. Only a regular file is read (never a FIFO or a device, which
 * could block or act on open). Returns 0 or a code of ember__safe_read. */
int ember__proc_read_at(int dirfd, const char *name, char *buf, size_t cap, size_t *len);
/* The same for a path, read as a string: at most size - 1 bytes, then a
 * NUL (size > 0). Returns 0 or a code of ember__safe_read. */
int ember__proc_read_str(const char *path, char *buf, size_t size);

/* A numeric sysctl such as /proc/sys/kernel/perf_event_max_sample_rate (a
 * decimal in the int32 range), or -1 when unreadable or not a number. */
long ember__read_sysctl(const char *path);

/* The thread ids of `pid`, from <proc_root>/PID/task (proc_root NULL =
 * "/proc"), at most EMBER__PROC_MAX_TIDS, in directory order. *out is
 * allocated with ember_malloc (the caller frees it with ember_free; NULL
 * when *count is 0). Returns 0, -ESRCH when the process is gone, -ENOMEM,
 * -ENAMETOOLONG, or the -errno of opendir. */
#define EMBER__PROC_MAX_TIDS (1u << 22) /* the kernel's largest pid_max */
int ember__proc_tids(const char *proc_root, pid_t pid, pid_t **out, size_t *count);

/* The longest line ember__read_lines passes on (longer ones are skipped):
 * the bound on one line of a /proc file (STYLE.md rule 12). */
#define EMBER__LINE_MAX (64u * 1024u)

typedef int (*ember__line_fn)(void *ctx, char *line, size_t len);

/* Call fn for every line read from fd's current position (newline replaced
 * by NUL). A last line without newline is passed only if `tail` (a file
 * being written, such as a perf map, leaves a partial line for the next
 * read). Lines longer than EMBER__LINE_MAX are skipped. *consumed (may be
 * NULL) gets the bytes up to and including the last newline handled.
 * Returns 0, -ENOMEM, -errno of read, or the first nonzero value fn
 * returns. */
int ember__read_lines(int fd, bool tail, ember__line_fn fn, void *ctx, uint64_t *consumed);

/* Fields inside /proc lines are hex without "0x" (and decimal inodes)
 * followed by more text: ember_parse_u64 wants a whole token, so these scan
 * in place with the same overflow checks. On success advance *p past the
 * digits and set *out; on no digits or overflow return false, both
 * untouched. */
bool ember__scan_hex(const char **p, uint64_t *out);
bool ember__scan_dec(const char **p, uint64_t *out);
/* Past spaces and tabs. */
const char *ember__skip_blanks(const char *p);

#endif
