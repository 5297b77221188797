/* Allocation profiles of one native process for a session window: which
 * stacks allocated how many objects and bytes while the session ran.
 * See docs/internals/alloc.md for the design and measured costs.
 *
 * Two methods behind one interface:
 *  - EMBER__ALLOC_UPROBE works on any process that maps glibc's libc.so:
 *    a uprobe perf event on malloc, calloc and realloc in that libc, every
 *    call sampled with its user stack and size argument. Exact counts, but
 *    every call traps into the kernel (~2 us): for short windows on light
 *    allocator users.
 *  - EMBER__ALLOC_PRELOAD needs a process started with
 *    LD_PRELOAD=libember_alloc.so (preload/). The library is dormant (one
 *    predictable branch per call) until a session turns it on; then it
 *    samples about one allocation per `sample_bytes` bytes (Poisson) and
 *    writes stacks into a shared-memory ring this module drains. Estimates
 *    are scaled back to all allocations.
 *
 * A session aggregates nothing itself: every sample goes straight into
 * the caller's window (agent/window.h), the one aggregation CPU windows and
 * CPU sessions use, under the session's pid, objects in the window's
 * `samples` slot and bytes in its `cpu_ns` slot. The uprobe method adds
 * exact integers; the preload method adds its 1/p weights as fractions,
 * which the window keeps in Q32 fixed point and rounds once when read
 * (window.h says why not doubles). The window bounds the distinct stacks
 * (max_stacks: past it samples are dropped and counted here) and grows
 * only for a new stack; nothing is allocated per sample.
 *
 * Stacks are user addresses, leaf first: the leaf is an address inside
 * the allocation function for the uprobe method (libc's malloc), and
 * inside the allocating function's call for the preload method (the
 * library's own frame is left out, agent/heap.h); every other entry is a return
 * address (symbolize it as ip - 1, as ember__symbolize does).
 *
 * Thread-safety: a session is used by one thread at a time, the thread
 * that owns its window. Sessions on different processes are independent
 * and may share one window (different pids). */
#ifndef EMBER_AGENT_ALLOC_H
#define EMBER_AGENT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "window.h"

typedef enum { EMBER__ALLOC_UPROBE = 1, EMBER__ALLOC_PRELOAD = 2 } ember__alloc_method_t;

typedef struct ember__alloc_session ember__alloc_session_t;

/* Default byte interval of the preload method (sample_bytes = 0). */
#define EMBER__ALLOC_DEFAULT_SAMPLE_BYTES (512u * 1024u)
/* Most frames kept per stack (leaf side kept). */
#define EMBER__ALLOC_MAX_FRAMES 64

/* Where a session's samples go. `w` is borrowed and must outlive the
 * session; it is written by poll and stop. `new_stack` (may be NULL) is
 * called from them when a (pid, stack) is new to `w`, with the stack
 * (borrowed, valid during the call; 1..EMBER__ALLOC_MAX_FRAMES entries):
 * the agent captures the process's mappings there, as for CPU stacks. */
typedef struct ember__alloc_sink {
  ember__window_t *w;
  void (*new_stack)(void *ctx, uint32_t pid, const uint64_t *ips, uint32_t n);
  void *ctx;
} ember__alloc_sink_t;

/* Start a session on process `pid` with method `m`, adding into `sink`
 * (copied; see above). `sample_bytes` is the mean byte interval between
 * samples of the preload method (0 = default); the uprobe method samples
 * every call and ignores it. On success *out owns the session (end it with
 * ember__alloc_stop); on failure *out is untouched and `err` (n bytes, may
 * be NULL) holds a sentence for the user.
 * Returns 0, -EINVAL (bad argument, no sink or window), -ESRCH (no such
 * process), -ENOENT (uprobe: no libc mapped or no malloc symbol; preload:
 * the process does not run with libember_alloc.so), -EBUSY (preload:
 * another session owns the process), -EPROTO (preload: control file of
 * another version or corrupt), -E2BIG (uprobe: too many threads x CPUs for
 * perf events), -EACCES/-EPERM, -ENOMEM, or another -errno from
 * perf_event_open. */
int ember__alloc_start(pid_t pid, ember__alloc_method_t m, uint64_t sample_bytes,
                       const ember__alloc_sink_t *sink, ember__alloc_session_t **out, char *err,
                       size_t n);

/* Drain what arrived since the last call into the sink's window.
 * Call it often (every 50 ms or so): the uprobe rings hold ~1 MiB per CPU
 * and the preload ring 2048 samples; what overflows is counted as lost.
 * For the preload method it is also the agent's heartbeat: a library that
 * sees no poll for 10 s turns itself off. Returns 0, or -ESRCH once the
 * process is gone (what was added stays in the window). */
int ember__alloc_poll(ember__alloc_session_t *s);

/* Counters of a session so far. */
typedef struct ember__alloc_stats {
  uint64_t samples; /* samples added to the window */
  uint64_t lost;    /* samples lost (ring full, stuck or bad records) */
  uint64_t stacks;  /* stacks this session made new in the window */
  uint64_t dropped; /* samples not added: the window was full (max_stacks) */
} ember__alloc_stats_t;
void ember__alloc_stats(const ember__alloc_session_t *s, ember__alloc_stats_t *out);

/* Stop sampling (preload: turn the library off again) and drain the last
 * samples into the sink's window, where the session's stacks now are, each
 * with the objects and bytes it allocated during the session: exact counts
 * for the uprobe method, estimates scaled for sampling for the preload
 * method. Frees the session in all cases; s == NULL is a no-op. Returns
 * 0. */
int ember__alloc_stop(ember__alloc_session_t *s);

/* Does `pid` run with the preload library (its control file exists, is
 * valid, and the process maps libember_alloc)? */
bool ember__alloc_preload_present(pid_t pid);

/* Remove control files in the agent's /dev/shm left by processes that
 * ended without running exit handlers (_exit, signals). Call it now and
 * then (e.g. hourly). Returns the number removed or -errno. */
int ember__alloc_preload_sweep(void);
/* Control files found cut or resized during a session since start (each
 * ends its session; what was sampled until then is kept). */
uint64_t ember__alloc_preload_faults(void);

/* The agent's heap tracker (agent/heap.h), which then reads the records
 * of preload sessions; NULL (the default): each session has its own. */
struct ember__heap;
void ember__alloc_preload_use(struct ember__heap *h);

/* --- Between alloc_*.c only: the method-independent session part lives in
 * alloc_uprobe.c, the preload method in alloc_preload.c. --- */
typedef struct ember__alloc_preload ember__alloc_preload_t;
int ember__alloc_preload_open(pid_t pid, uint64_t sample_bytes, ember__alloc_preload_t **out,
                              char *err, size_t n);
/* Calls `add` for every sample that arrived; counts lost samples. Returns 0
 * or -ESRCH when the process is gone. */
int ember__alloc_preload_drain(ember__alloc_preload_t *p,
                               void (*add)(void *ctx, const uint64_t *ips, size_t n, double objects,
                                           double bytes),
                               void *ctx, uint64_t *lost);
/* Turn the library off (the last samples can still be drained). */
void ember__alloc_preload_disable(ember__alloc_preload_t *p);
void ember__alloc_preload_close(ember__alloc_preload_t *p);

#endif
