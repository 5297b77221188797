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
 * Stacks handed out are user addresses, leaf first: the leaf is an address
 * inside the allocation function (libc's malloc for the uprobe method, the
 * library's malloc for the preload method); every other entry is a return
 * address (symbolize it as ip - 1, as ember__symbolize does).
 *
 * Thread-safety: a session is used by one thread at a time. Sessions on
 * different processes are independent. */
#ifndef EMBER_AGENT_ALLOC_H
#define EMBER_AGENT_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum { EMBER__ALLOC_UPROBE = 1, EMBER__ALLOC_PRELOAD = 2 } ember__alloc_method_t;

typedef struct ember__alloc_session ember__alloc_session_t;

/* Default byte interval of the preload method (sample_bytes = 0). */
#define EMBER__ALLOC_DEFAULT_SAMPLE_BYTES (512u * 1024u)
/* Most frames kept per stack (leaf side kept). */
#define EMBER__ALLOC_MAX_FRAMES 64

/* Start a session on process `pid` with method `m`. `sample_bytes` is the
 * mean byte interval between samples of the preload method (0 = default);
 * the uprobe method samples every call and ignores it. On success *out owns
 * the session (end it with ember__alloc_stop); on failure *out is untouched
 * and `err` (n bytes, may be NULL) holds a sentence for the user.
 * Returns 0, -EINVAL (bad argument), -ESRCH (no such process), -ENOENT
 * (uprobe: no libc mapped or no malloc symbol; preload: the process does
 * not run with libember_alloc.so), -EBUSY (preload: another session owns
 * the process), -EPROTO (preload: control file of another version or
 * corrupt), -E2BIG (uprobe: too many threads x CPUs for perf events),
 * -EACCES/-EPERM, -ENOMEM, or another -errno from perf_event_open. */
int ember__alloc_start(pid_t pid, ember__alloc_method_t m, uint64_t sample_bytes,
                       ember__alloc_session_t **out, char *err, size_t n);

/* Drain what arrived since the last call into the session's aggregate.
 * Call it often (every 50 ms or so): the uprobe rings hold ~1 MiB per CPU
 * and the preload ring 2048 samples; what overflows is counted as lost.
 * For the preload method it is also the agent's heartbeat: a library that
 * sees no poll for 10 s turns itself off. Returns 0, or -ESRCH once the
 * process is gone (the aggregate is kept; stop still hands it out). */
int ember__alloc_poll(ember__alloc_session_t *s);

/* Counters of a session so far. */
typedef struct ember__alloc_stats {
  uint64_t samples; /* samples aggregated */
  uint64_t lost;    /* samples lost (ring full, stuck or bad records) */
  uint64_t stacks;  /* distinct stacks */
  uint64_t dropped; /* samples not aggregated: the stack table was full */
} ember__alloc_stats_t;
void ember__alloc_stats(const ember__alloc_session_t *s, ember__alloc_stats_t *out);

/* Stop sampling (preload: turn the library off again), drain, and call
 * `each` once per aggregated stack: `ips` (borrowed, valid during the
 * call) leaf first, `n` of them (1..EMBER__ALLOC_MAX_FRAMES); `objects` and
 * `bytes` allocated by that stack during the session — exact counts for the
 * uprobe method, estimates scaled for sampling for the preload method.
 * `each` may be NULL (discard). Frees the session in all cases; s == NULL
 * is a no-op returning 0. Returns 0. */
int ember__alloc_stop(ember__alloc_session_t *s,
                      void (*each)(void *ctx, const uint64_t *ips, size_t n, int64_t objects,
                                   int64_t bytes),
                      void *ctx);

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
