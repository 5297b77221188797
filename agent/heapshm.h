/* The agent's side of one process's control file of libember_alloc.so
 * (preload/ember_alloc_shm.h): open it after checking what it is, read
 * the ring's records and the live table out of it, and write the agent's
 * words (rate, heartbeat, tail).
 *
 * Everything in the file is written by the profiled process, so all of it
 * is untrusted: records and entries are copied out with pread (never
 * mapped: a process may cut its file, and a mapping of a cut file raises
 * SIGBUS in the reader), every field is checked, and what fails a check
 * is counted and skipped. A file that changes size, or whose counters go
 * backwards, is a fault: no more reads (what was read stays). One reader
 * per file: an exclusive flock, which the kernel drops if the agent dies.
 *
 * Thread-safety: one thread per reader. Errors: 0 or a negative errno. */
#ifndef EMBER_AGENT_HEAPSHM_H
#define EMBER_AGENT_HEAPSHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../preload/ember_alloc_shm.h"

typedef struct ember__heapshm ember__heapshm_t;

/* Is there a control file for `pid` of this version that the process maps
 * the library for? A cheap test first (the file's lstat through
 * /proc/PID/root), then the maps. */
bool ember__heapshm_present(pid_t pid);

/* Open `pid`'s file: -ESRCH (no process), -ENOENT (no library or no file),
 * -EPROTO (another version, owner, size or a bad header), -EBUSY (another
 * reader holds it), -ENOSPC and the like (reserving a dormant file's pages
 * failed), -ENOMEM. `err` (n bytes) gets a sentence. The reader starts at
 * the ring's current tail: records still in the ring (the process's
 * first allocations, before any agent) are read. */
int ember__heapshm_open(pid_t pid, ember__heapshm_t **out, char *err, size_t n);
void ember__heapshm_close(ember__heapshm_t *r);

/* What ember__heapshm_open does once it has the file: a reader of the
 * control file `fd` (of `size` bytes; the caller checked what it is) of
 * process `pid`, whose pid in its own namespace is `nspid`. Takes `fd`
 * whatever it returns. For tests and the fuzzer, which hold a file of no
 * process. */
int ember__heapshm_open_fd(int fd, pid_t pid, pid_t nspid, off_t size, ember__heapshm_t **out,
                           char *err, size_t n);

/* The process's heap-mode rate (0 = dormant library). */
uint64_t ember__heapshm_heap_rate(const ember__heapshm_t *r);

/* Set the mean byte interval in force (0 = the library's own: its heap
 * rate, or off when dormant). Bumps the generation so threads redraw. */
void ember__heapshm_set_rate(ember__heapshm_t *r, uint64_t sample_bytes);

/* One record as read (a private copy; valid during the callback). */
typedef struct ember__heapshm_rec {
  uint64_t id; /* the record's seq (what live entries name it by) */
  const ember_alloc_rec_t *head;
  const uint64_t *ips;  /* head->nips, leaf first */
  const uint8_t *stack; /* head->stack_len bytes from head->sp up */
} ember__heapshm_rec_t;

typedef struct ember__heapshm_counts {
  uint64_t records;      /* records read and valid */
  uint64_t bad;          /* records refused (sizes, counts, torn) */
  uint64_t lost;         /* records lost: ring full in the library, stuck slots */
  uint64_t live_dropped; /* library: sampled allocations it could not track */
} ember__heapshm_counts_t;

/* Read what arrived in the ring, calling `fn` for each valid record, then
 * advance the tail and beat the heartbeat. Returns 0, -EPROTO (fault: the
 * file was cut or lies; it stays refused) or -ESRCH (the process is
 * gone). */
int ember__heapshm_drain(ember__heapshm_t *r,
                         void (*fn)(void *ctx, const ember__heapshm_rec_t *rec), void *ctx);

/* Read the live table and call `fn` for every live entry (a private copy,
 * checked: a size of 0 or a mean of 0 is refused and counted in bad).
 * Returns 0 or -EPROTO. */
int ember__heapshm_live(ember__heapshm_t *r, void (*fn)(void *ctx, const ember_alloc_live_t *e),
                        void *ctx);

void ember__heapshm_counts(const ember__heapshm_t *r, ember__heapshm_counts_t *out);

/* How far the reader got: every record of seq <= this was read or
 * skipped. A live entry naming a later seq belongs to a record not yet
 * published (or not yet drained). */
uint64_t ember__heapshm_tail(const ember__heapshm_t *r);

/* Files found cut, resized or lying, in this agent process, so far. */
uint64_t ember__heapshm_faults(void);

/* Remove control files in the agent's /dev/shm left by processes that
 * ended without running exit handlers. Returns the number removed or
 * -errno. */
int ember__heapshm_sweep(void);

/* 1 - exp(-x) for x >= 0 (the probability that an allocation of x mean
 * intervals holds a sample point), without libm. */
double ember__heapshm_one_minus_exp_neg(double x);

#endif
