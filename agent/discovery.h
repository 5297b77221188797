/* Discovery: which processes exist, and who they are (their labels).
 *
 * Labels come from /proc/PID/environ and /proc/PID/exe, read once per
 * process (ARCHITECTURE.md, "Identity of a target"):
 *   worker  EMBER_WORKER, OTEL_SERVICE_NAME, service.name in
 *           OTEL_RESOURCE_ATTRIBUTES, else the process comm
 *   version EMBER_VERSION, service.version in OTEL_RESOURCE_ATTRIBUTES,
 *           else the first 12 hex digits of the exe's GNU build-id
 *   actor   EMBER_ACTOR
 * Only these variables are kept; nothing else from an environment is
 * stored or leaves the host.
 *
 * Events come from the netlink process connector (exec, exit) when the
 * agent may open it (root/CAP_NET_ADMIN), with a periodic /proc scan as the
 * fallback and safety net. Unreadable or vanished /proc entries are normal:
 * the process is skipped (counted), never an error.
 *
 * Kernel threads (no exe) are not targets. The agent's own pid is not a
 * target. A selector limits targets by label: comma-separated terms
 * `label=glob` (fnmatch), all of which must match, e.g.
 * "worker=api*,version=2.*"; empty = every process.
 *
 * Thread-safety: one thread (the agent's loop) calls everything. */
#ifndef EMBER_AGENT_DISCOVERY_H
#define EMBER_AGENT_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ember__target {
  pid_t pid;
  char *worker;  /* never NULL */
  char *version; /* never NULL; "" when nothing gives one */
  char *actor;   /* NULL when unset */
  char comm[16];
  char *exe;            /* path of /proc/PID/exe, NULL for none */
  char build_id[41];    /* hex GNU build-id of exe, "" if none */
  uint64_t start_ticks; /* field 22 of /proc/PID/stat: tells pid reuse apart */
  bool selected;        /* matches the selector */
  bool exited;          /* seen to exit; kept until ember__discovery_reap */
} ember__target_t;

typedef struct ember__discovery_opts {
  const char *proc_root; /* NULL = "/proc" */
  const char *selector;  /* NULL or "" = all */
  pid_t self;            /* excluded; 0 = us, as <proc_root>/self says */
  bool netlink;          /* try the proc connector */
} ember__discovery_opts_t;

typedef struct ember__discovery_stats {
  uint64_t scans, exec_events, exit_events, unreadable, netlink_errors;
  uint64_t targets, selected;
  uint64_t overruns;  /* netlink ENOBUFS: events lost, a scan was run */
  uint64_t elf_reads; /* exe files parsed for a build-id (cache misses) */
} ember__discovery_stats_t;

typedef struct ember__discovery ember__discovery_t;

/* Returns 0, EMBER_ECONFIG for a bad selector (sentence in errbuf), -ENOMEM,
 * or -errno when proc_root cannot be opened. A refused netlink socket (or
 * one whose pids would not match proc_root's) is not an error: fd() is then -1 and scans do
 * the work. */
int ember__discovery_new(const ember__discovery_opts_t *opts, ember__discovery_t **out,
                         char *errbuf, size_t errbuf_size);
void ember__discovery_free(ember__discovery_t *d);

/* The netlink socket to poll for readability, or -1. */
int ember__discovery_fd(const ember__discovery_t *d);
/* Read pending netlink events (non-blocking; at most 4096 datagrams per
 * call, so poll again while the fd is readable): exec re-reads the labels
 * of the pid, exit marks it exited. Returns 0 or a negative errno if the
 * socket failed (then call _scan periodically instead); -EBADF without one.
 * An overrun (ENOBUFS: the kernel dropped events) is not a failure: it is
 * counted in stats.overruns and a full _scan runs before this returns 0. */
int ember__discovery_read_events(ember__discovery_t *d);
/* Walk /proc: add new processes, mark vanished ones exited. */
int ember__discovery_scan(ember__discovery_t *d);

/* The target for `pid` (a process id, i.e. a tgid), reading its labels now
 * if it is unknown (a pid seen in a sample before any event). NULL when the
 * process is gone or unreadable, is a kernel thread, or is the agent
 * itself; a pid already marked exited returns its exited target until it is
 * reaped. Borrowed until the pid is reaped. A target's fields never change
 * except `exited`: an exec that changes the labels marks the old target
 * exited and a new one takes the pid. */
const ember__target_t *ember__discovery_get(ember__discovery_t *d, pid_t pid);

/* Visit every known target (selected or not, exited or not). */
void ember__discovery_each(ember__discovery_t *d, void (*fn)(void *ctx, const ember__target_t *t),
                           void *ctx);
/* Forget targets marked exited; call after their last window is closed.
 * fn (may be NULL) sees each one before it goes. */
void ember__discovery_reap(ember__discovery_t *d, void (*fn)(void *ctx, const ember__target_t *t),
                           void *ctx);
void ember__discovery_stats(const ember__discovery_t *d, ember__discovery_stats_t *out);

/* Parse a selector; exposed for tests. Returns true when `t` matches. */
bool ember__selector_match(const char *selector, const ember__target_t *t);

#endif
