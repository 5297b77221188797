/* Small readers of /proc files the agent needs in more than one module.
 * The files are read through the safe-open helper (safefile.h), bounded;
 * their contents come from the kernel but describe processes a hostile
 * user controls, so every parser is total over any text. */
#ifndef EMBER_AGENT_PROCFS_H
#define EMBER_AGENT_PROCFS_H

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

#endif
