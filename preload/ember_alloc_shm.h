/* The control file shared by libember_alloc.so (the writer of samples) and
 * the agent (agent/heapshm.c, the reader): /dev/shm/ember-alloc.PID,
 * created by the library at start: one header page, the live table, then
 * a ring of sample records. See docs/internals/heap.md.
 *
 * The library maps it MAP_SHARED and reads the agent's words with __atomic
 * loads. The agent never maps it (the process may truncate it, and a
 * mapping of a cut file raises SIGBUS in the reader): it copies what it
 * needs out with pread, writes its own words with one aligned 8-byte
 * pwrite each, and treats all of it as untrusted input.
 *
 * Two modes, chosen by the process's environment at start:
 *  - heap (EMBER_HEAP_SAMPLE_BYTES > 0, the default 512 KiB): sampling is
 *    on from the first allocation; the library reserves the whole file at
 *    start (so no write can fault) and tracks every sampled allocation
 *    that is still live in the live table.
 *  - dormant (EMBER_HEAP_SAMPLE_BYTES=0): nothing is sampled until an
 *    agent session turns `on` (it reserves the file's pages first).
 *
 * Who writes what:
 *  - library: everything at creation (magic last), then `head`, the records,
 *    the live table, `dropped`, `live_dropped`, `self_off`, and, when the
 *    agent goes silent, `on` = 0 (dormant mode) or `sample_bytes` back to
 *    `heap_sample_bytes` (heap mode).
 *  - agent: `owner` (informative: one reader at a time is an flock on the
 *    file), `sample_bytes`, `generation`, `on`, `heartbeat`, `tail`.
 *
 * Ring protocol (many producer threads, one consumer), in cells of 64
 * bytes with tickets counting cells: a producer reserves the cells of its
 * record (and, if it would cross the ring's end, a pad record filling the
 * end first) by one compare-and-swap of head, only while they fit beside
 * what the reader has not read (head - tail), else it counts a drop. It
 * fills them, then stores each record's seq = its first ticket + 1 with
 * release. The consumer reads the record at tail once its seq == tail + 1,
 * copies it, checks seq again, and advances tail by its cells. Records
 * are as long as what they hold (a shallow stack is a few cells), so the
 * ring holds the process's first allocations until an agent comes.
 *
 * Live table: open addressing, EMBER_ALLOC_SHM_LIVE entries, linear probes
 * of at most EMBER_ALLOC_SHM_PROBES from hash(ptr). An entry's key is 0
 * (empty), 1 (removed), 2 (being written) or the allocation's address. A
 * sampled allocation takes an entry before its record is published (its
 * `id` is the record's seq, or 0 when the ring was full), so a reader
 * that drained the ring and then reads the table sees every record it
 * read either live or freed. */
#ifndef EMBER_PRELOAD_ALLOC_SHM_H
#define EMBER_PRELOAD_ALLOC_SHM_H

#include <stddef.h>
#include <stdint.h>

#define EMBER_ALLOC_SHM_MAGIC   0x32434f4c4c414d45ULL /* "EMALLOC2" little-endian */
#define EMBER_ALLOC_SHM_VERSION 2u
#define EMBER_ALLOC_SHM_HDR     4096u
#define EMBER_ALLOC_SHM_FRAMES  32u    /* most frames of a frame-pointer walk */
#define EMBER_ALLOC_SHM_CELL    64u    /* the ring's unit: records are whole cells */
#define EMBER_ALLOC_SHM_LIVE    16384u /* live-table entries */
#define EMBER_ALLOC_SHM_PROBES  64u
/* The ring's size (EMBER_HEAP_RING_BYTES): a power of two in these bounds. */
#define EMBER_ALLOC_SHM_RING_MIN     (256u * 1024u)
#define EMBER_ALLOC_SHM_RING_MAX     (256u * 1024u * 1024u)
#define EMBER_ALLOC_SHM_RING_DEFAULT (2u * 1024u * 1024u)
/* The most stack bytes a record copies (EMBER_HEAP_STACK_BYTES, at most
 * this; default 16 KiB). */
#define EMBER_ALLOC_SHM_STACK_MAX     65536u
#define EMBER_ALLOC_SHM_STACK_DEFAULT 16384u
#define EMBER_ALLOC_SHM_PREFIX        "/dev/shm/ember-alloc."

/* Live-table keys below this are markers, not addresses. */
#define EMBER_ALLOC_LIVE_EMPTY   0u
#define EMBER_ALLOC_LIVE_REMOVED 1u
#define EMBER_ALLOC_LIVE_BUSY    2u

/* Record kinds. */
#define EMBER_ALLOC_REC_SAMPLE 1u
#define EMBER_ALLOC_REC_PAD    2u /* fills the ring's end: skip ncells */

/* A record: this head, then nips frame-pointer ips, then stack_len stack
 * bytes, in ncells whole cells. A record never wraps around the ring's
 * end: a writer that would pads the end first. */
typedef struct ember_alloc_rec {
  uint64_t seq;    /* the record's first cell ticket + 1, once complete */
  uint32_t ncells; /* cells it takes, >= 1 */
  uint32_t kind;   /* EMBER_ALLOC_REC_* */
  uint64_t size;   /* requested bytes of the sampled allocation */
  uint64_t mean;   /* the mean byte interval it was sampled at */
  uint64_t ptr;    /* its address (informative) */
  uint32_t tid;
  uint32_t nips;      /* 2..EMBER_ALLOC_SHM_FRAMES */
  uint32_t stack_len; /* bytes of stack after the ips */
  uint32_t reserved;
  /* The caller's registers at its call into the allocator: ip is the
   * return address, sp the caller's stack pointer after the return, bp
   * its frame pointer register; the stack bytes are from sp up. The ips
   * are a frame-pointer walk, leaf first: the library's allocator
   * function, then ip, then what the frame pointers give (nothing for
   * code built without them). */
  uint64_t ip, sp, bp;
} ember_alloc_rec_t;

typedef struct ember_alloc_live {
  uint64_t ptr;  /* key: see EMBER_ALLOC_LIVE_* */
  uint64_t size; /* requested bytes */
  uint64_t mean; /* the mean byte interval it was sampled at */
  uint64_t id;   /* its record's seq; 0 = no record (ring full) */
} ember_alloc_live_t;

typedef struct ember_alloc_shm {
  uint64_t magic;
  uint32_t version;
  uint32_t hdr_size; /* offset of the live table */
  uint32_t nlive;
  uint32_t ring_bytes;        /* the ring's size, after the live table */
  int32_t pid;                /* getpid() of the library's process (its pid namespace) */
  uint32_t stack_max;         /* most stack bytes a record copies */
  uint64_t on;                /* agent (and library in heap mode): nonzero = sample */
  uint64_t owner;             /* agent: reader token, 0 = none */
  uint64_t sample_bytes;      /* mean byte interval in force */
  uint64_t generation;        /* bumped per rate change; threads redraw */
  uint64_t heartbeat;         /* agent: bumped per poll */
  uint64_t self_off;          /* library: times it fell back (agent silent) */
  uint64_t dropped;           /* library: samples without a record, ring full */
  uint64_t heap_sample_bytes; /* library: heap mode's rate, 0 = dormant */
  uint64_t live_dropped;      /* library: sampled allocations not tracked, table full */
  uint64_t reserved1[3];
  uint64_t head; /* library: next cell ticket */
  uint64_t reserved2[7];
  uint64_t tail; /* agent: next cell ticket to read */
} ember_alloc_shm_t;

_Static_assert(sizeof(ember_alloc_rec_t) == 80, "record layout");
_Static_assert(sizeof(ember_alloc_live_t) == 32, "live entry layout");
_Static_assert(offsetof(ember_alloc_shm_t, on) == 32, "header layout");
_Static_assert(offsetof(ember_alloc_shm_t, head) == 128, "header layout");
_Static_assert(offsetof(ember_alloc_shm_t, tail) == 192, "header layout");
_Static_assert(sizeof(ember_alloc_shm_t) <= EMBER_ALLOC_SHM_HDR, "header fits its page");
_Static_assert((EMBER_ALLOC_SHM_LIVE & (EMBER_ALLOC_SHM_LIVE - 1)) == 0, "live table size");

#define EMBER_ALLOC_SHM_LIVE_OFF ((size_t)EMBER_ALLOC_SHM_HDR)
#define EMBER_ALLOC_SHM_RING_OFF                                                                   \
  (EMBER_ALLOC_SHM_LIVE_OFF + (size_t)EMBER_ALLOC_SHM_LIVE * sizeof(ember_alloc_live_t))
/* The file's size for a ring of `ring_bytes`. */
#define EMBER_ALLOC_SHM_SIZE(ring_bytes) (EMBER_ALLOC_SHM_RING_OFF + (size_t)(ring_bytes))

/* The live table's home entry of an address. */
static inline uint32_t ember_alloc_live_home(uint64_t ptr) {
  return (uint32_t)(((ptr >> 4) * 0x9e3779b97f4a7c15ULL) >> 50) & (EMBER_ALLOC_SHM_LIVE - 1);
}

#endif
