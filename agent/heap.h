/* The in-use heap of the processes that run with libember_alloc.so, always
 * on: the tracker that reads their control files (agent/heapshm.h) and
 * turns them into the agent's two heap profiles of every window, the
 * allocations made during it and what is live at its end. See
 * docs/internals/heap.md.
 *
 * Per followed process the tracker drains the ring (each record: the
 * caller's registers and the top of its stack, unwound through the
 * `unwind` callback with the binaries' CFI, or the library's
 * frame-pointer walk when that gives more), keeps the stack of every
 * record whose allocation may still be live (by record id), and adds the
 * record to the allocation window set with ember__heap_set_window. A
 * snapshot reads the process's live table and adds each live sampled
 * allocation, weighed 1/p, under its stack; an entry whose record was
 * never read (the ring was full before any agent read it, or an earlier
 * agent read it) goes under the one-frame stack EMBER__HEAP_UNKNOWN_IP.
 * Then it forgets stacks no live entry holds, so memory is bounded by the
 * live table (16384 entries a process) and not by the process's age.
 *
 * Stacks start at the allocating function: ips[0] is an address inside
 * its call to the allocator (exact, as a leaf), then return addresses
 * (symbolize them as ip - 1, as ember__symbolize does). The library's own
 * frame is not in them.
 *
 * Allocation sessions of a followed process watch its records too
 * (ember__heap_watch): the session's rate is in force while it runs, and
 * every live entry remembers the rate it was sampled at, so in-use stays
 * exact across rate changes.
 *
 * Thread-safety: one thread (the agent's loop). Errors: 0 or -errno. */
#ifndef EMBER_AGENT_HEAP_H
#define EMBER_AGENT_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "unwind.h"
#include "window.h"

/* The one frame of an in-use allocation whose stack is unknown. */
#define EMBER__HEAP_UNKNOWN_IP 1u
/* Most frames kept of a heap stack. */
#define EMBER__HEAP_MAX_FRAMES 128

typedef struct ember__heap ember__heap_t;

/* Unwind one record: `regs` (ip is the return address - 1, so the row
 * found is the call's) over `stack` (len bytes from regs->sp up). Writes
 * at most cap ips, leaf first, and returns how many (0: no unwinder). */
typedef size_t (*ember__heap_unwind_fn)(void *ctx, uint32_t pid, const ember__unwind_regs_t *regs,
                                        const uint8_t *stack, size_t len, uint64_t *ips,
                                        size_t cap);

typedef struct ember__heap_opts {
  ember__heap_unwind_fn unwind; /* NULL: the frame-pointer walks only */
  void *ctx;
} ember__heap_opts_t;

int ember__heap_new(const ember__heap_opts_t *opts, ember__heap_t **out);
void ember__heap_free(ember__heap_t *h);

/* Follow `pid` (its control file: ember__heapshm_open's errors, with a
 * sentence in err; -EEXIST when already followed). */
int ember__heap_attach(ember__heap_t *h, pid_t pid, char *err, size_t n);
bool ember__heap_follows(const ember__heap_t *h, pid_t pid);
/* Stop following `pid` (no-op when not followed). */
void ember__heap_detach(ember__heap_t *h, pid_t pid);

/* Where the records go from now on, weighed 1/p: objects in the window's
 * `samples` slot, bytes in its `cpu_ns` slot, under each record's pid.
 * Borrowed; NULL = nowhere. */
void ember__heap_set_window(ember__heap_t *h, ember__window_t *w);

/* Drain every followed process (pid 0) or one. Processes that ended, or
 * whose file faulted, are no longer followed afterwards. */
void ember__heap_poll(ember__heap_t *h, pid_t pid);

/* Drain, then add what is live now in every followed process into `w`
 * (objects and bytes as above). `pids` (cap entries, may be NULL) gets the
 * pids followed, *npids their number (all of them, even past cap). */
int ember__heap_snapshot(ember__heap_t *h, ember__window_t *w, uint32_t *pids, size_t cap,
                         size_t *npids);

/* A session's view of a followed process's records (attached first if
 * needed). `sample_bytes` (0 = the process's own rate) is in force until
 * ember__heap_unwatch. One watcher per process: -EBUSY. */
typedef void (*ember__heap_add_fn)(void *ctx, const uint64_t *ips, size_t n, double objects,
                                   double bytes);
int ember__heap_watch(ember__heap_t *h, pid_t pid, uint64_t sample_bytes, ember__heap_add_fn fn,
                      void *ctx, char *err, size_t n);
/* Drain the last records to the watcher, restore the process's rate and
 * forget the watcher. A process the tracker followed only for the
 * watcher is detached. */
void ember__heap_unwatch(ember__heap_t *h, pid_t pid);
/* Is `pid` still readable (followed, not faulted, not ended)? 0, -EPROTO
 * (its file faulted), -ESRCH (it ended). */
int ember__heap_state(const ember__heap_t *h, pid_t pid);

typedef struct ember__heap_stats {
  uint64_t processes;    /* followed now */
  uint64_t records;      /* records read */
  uint64_t bad;          /* records and entries refused */
  uint64_t lost;         /* records lost (ring full, stuck slots) */
  uint64_t live_dropped; /* sampled allocations the libraries could not track */
  uint64_t unknown;      /* live entries whose record was never read, last snapshot */
  uint64_t in_flight;    /* live entries whose record was still being written */
  uint64_t stacks;       /* stacks held */
  uint64_t cfi;          /* records whose stack came from the CFI unwinder */
} ember__heap_stats_t;
void ember__heap_stats(const ember__heap_t *h, ember__heap_stats_t *out);

#endif
