/* perf events: opening them (always PERF_FLAG_FD_CLOEXEC), mapping and
 * unmapping their rings, walking a ring's records with a callback, and
 * parsing PERF_RECORD_SAMPLE records by the event's sample_type.
 *
 * Used by the continuous sampler (sampler.c), on-demand CPU sessions
 * (session.c) and the uprobe allocation method (alloc_uprobe.c).
 *
 * The sample parser reads the fields the kernel writes for these
 * sample_type bits, in the kernel's order (perf_event_open(2),
 * "PERF_RECORD_SAMPLE"): IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID,
 * CPU, PERIOD, CALLCHAIN, RAW, REGS_USER, STACK_USER. Bits after
 * STACK_USER are ignored (they come after every field read); READ and
 * BRANCH_STACK, which would come before some, make every sample a bad
 * record. Every length is checked against the record's size: a record
 * that does not hold what its format says is counted in bad_records and
 * never read past.
 *
 * Thread-safety: a ring and a reader are used by one thread at a time;
 * the functions keep no state of their own. Errors: 0 or a negative
 * errno. */
#ifndef EMBER_AGENT_PERF_H
#define EMBER_AGENT_PERF_H

#include <linux/perf_event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Callchain entries kept per sample (perf_event_max_stack is 127 by
 * default); markers (PERF_CONTEXT_*) are not counted. */
#define EMBER__PERF_MAX_CHAIN 512
/* A record's size is a u16, so this holds any record read whole, also a
 * sample with the largest user stack copy the kernel allows (it shrinks
 * the copy so that the record's size still fits). */
#define EMBER__PERF_SCRATCH 65536

/* One sample. The pointers point into the record or the reader's buffers
 * and are valid during the callback only. Fields whose sample_type bit is
 * not set are 0 / NULL. */
typedef struct ember__raw_sample {
  uint32_t pid, tid, cpu;
  uint64_t time_ns;    /* perf clock (CLOCK_MONOTONIC where the attr asks) */
  uint64_t period_ns;  /* PERIOD: CPU time (ns for cpu-clock) this sample stands for */
  const uint64_t *ips; /* CALLCHAIN, leaf first, context markers removed */
  uint32_t nips;
  uint64_t ip;                /* IP */
  uint64_t addr;              /* ADDR */
  uint64_t id;                /* ID, or IDENTIFIER when set */
  uint64_t stream_id;         /* STREAM_ID */
  const void *raw;            /* RAW: the data after its u32 size */
  uint32_t raw_size;          /* RAW: bytes at raw */
  uint64_t regs_abi;          /* REGS_USER: PERF_SAMPLE_REGS_ABI_* (NONE: no regs) */
  const uint64_t *regs;       /* REGS_USER: one per bit of regs_mask, lowest bit first */
  uint32_t nregs;             /* REGS_USER: entries at regs (0 when abi is NONE) */
  uint64_t regs_mask;         /* the attr's sample_regs_user */
  const unsigned char *stack; /* STACK_USER: the copy, from the user sp up */
  uint64_t stack_size;        /* STACK_USER: dyn_size, the valid bytes at stack */
} ember__raw_sample_t;

typedef void (*ember__sample_fn)(void *ctx, const ember__raw_sample_t *s);

/* The layout of an event's samples: from its attr. */
typedef struct ember__perf_format {
  uint64_t sample_type;      /* attr.sample_type */
  uint64_t sample_regs_user; /* attr.sample_regs_user */
} ember__perf_format_t;

/* Parse one PERF_RECORD_SAMPLE record of `size` bytes (header included,
 * 8-byte aligned) laid out as `fmt` says. The callchain goes, filtered,
 * into ips[0..ips_cap) (deeper entries are dropped). Returns 0 with *out
 * set, or -EINVAL for a record that does not hold its fields (*out then
 * undefined). */
int ember__perf_parse_sample(const ember__perf_format_t *fmt, const void *rec, size_t size,
                             uint64_t *ips, uint32_t ips_cap, ember__raw_sample_t *out);

/* Open an event (perf_event_open(2) with PERF_FLAG_FD_CLOEXEC added to
 * `flags`). attr->size is set. Returns the fd or -errno. */
int ember__perf_open(struct perf_event_attr *attr, pid_t pid, int cpu, int group_fd,
                     unsigned long flags);

/* A mapped ring: the metadata page, then data_size bytes of data. The fd
 * stays the caller's (several events may write into one ring). */
typedef struct ember__perf_ring {
  void *base; /* NULL when not mapped */
  size_t page_size, data_size;
} ember__perf_ring_t;

/* Map the ring of event `fd` with `data_pages` data pages (a power of
 * two). Returns 0 or -errno (r untouched). */
int ember__perf_ring_map(ember__perf_ring_t *r, int fd, size_t data_pages);
/* Unmap (a ring never mapped or already unmapped is fine). */
void ember__perf_ring_unmap(ember__perf_ring_t *r);

/* What a drain counted; the caller's, added to. */
typedef struct ember__perf_counts {
  uint64_t samples; /* samples handed to the callback */
  uint64_t lost;    /* PERF_RECORD_LOST: records the kernel dropped */
  uint64_t throttles, unthrottles;
  uint64_t bad_records; /* samples that did not parse, corrupt sizes */
} ember__perf_counts_t;

typedef struct ember__perf_reader {
  ember__perf_format_t fmt;
  ember__sample_fn fn;
  void *ctx;
  ember__perf_counts_t *counts;
  uint64_t *scratch; /* EMBER__PERF_SCRATCH bytes, for records that wrap */
  uint64_t *ips;     /* EMBER__PERF_MAX_CHAIN entries */
} ember__perf_reader_t;

/* Walk the records between data_tail and data_head of ring `ring`, call
 * r->fn for each sample that parses (in the ring, or copied to r->scratch
 * when it straddles the ring's end), count the others, and release them
 * to the kernel. A corrupt record size drops the rest of the ring (one
 * bad record). */
void ember__perf_ring_drain(const ember__perf_reader_t *r, ember__perf_ring_t *ring);

/* --- user stacks, for unwinding from CFI (agent/unwtab.h) ---
 *
 * With a stack size, an event samples the three user registers an x86-64
 * unwinder starts from (bp, sp, ip: PERF_SAMPLE_REGS_USER) and that many
 * bytes of the user stack from sp up (PERF_SAMPLE_STACK_USER), and asks the
 * kernel for kernel callchains only: the agent unwinds the user part. */
#define EMBER__PERF_STACK_MAX 65528u /* the kernel's bound: under 64 KiB, 8-byte aligned */

/* Add the user registers and a stack copy of stack_bytes (rounded down to
 * 8, at most EMBER__PERF_STACK_MAX) to attr; 0 changes nothing. */
void ember__perf_want_stack(struct perf_event_attr *attr, uint32_t stack_bytes);
/* The ip, sp and bp of a sample taken that way; false when it carries none
 * (a kernel thread, an event without them). */
bool ember__perf_user_regs(const ember__raw_sample_t *s, uint64_t *ip, uint64_t *sp, uint64_t *bp);
/* Data pages for the ring of an event sampling at hz with stack copies:
 * a quarter second of samples four times over (the drain period, with a
 * wakeup at a quarter full), a power of two from min_pages to 1024. */
uint32_t ember__perf_ring_pages_for(uint32_t hz, uint32_t stack_bytes, size_t page_size,
                                    uint32_t min_pages);

#endif
