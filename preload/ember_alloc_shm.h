/* The control file shared by libember_alloc.so (the writer of samples) and
 * the agent (agent/alloc_preload.c, the reader): /dev/shm/ember-alloc.PID,
 * created by the library at start, one header page then a ring of slots.
 * The library maps it MAP_SHARED and reads the agent's words with __atomic
 * loads. The agent never maps it (the process may truncate it, and a
 * mapping of a cut file raises SIGBUS in the reader): it copies the header
 * and slots out with pread and writes its words with one aligned 8-byte
 * pwrite each, and treats all of it as untrusted input.
 *
 * Who writes what:
 *  - library: everything at creation (magic last), then `head`, the slots,
 *    `dropped`, `self_off`, and `on` = 0 when it turns itself off.
 *  - agent: `owner` (its token, informative: one session at a time is an
 *    flock on the file), `sample_bytes`, `generation`, `on`, `heartbeat`,
 *    `tail`.
 *
 * Ring protocol (many producer threads, one consumer): a producer reserves
 * ticket t by compare-and-swap of head (only while head - tail < nslots,
 * else it counts a drop), fills slot t % nslots, then stores seq = t + 1
 * with release. The consumer reads slot tail % nslots once its seq ==
 * tail + 1 (acquire), copies it, and advances tail (release). */
#ifndef EMBER_PRELOAD_ALLOC_SHM_H
#define EMBER_PRELOAD_ALLOC_SHM_H

#include <stddef.h>
#include <stdint.h>

#define EMBER_ALLOC_SHM_MAGIC   0x31434f4c4c414d45ULL /* "EMALLOC1" little-endian */
#define EMBER_ALLOC_SHM_VERSION 1u
#define EMBER_ALLOC_SHM_HDR     4096u
#define EMBER_ALLOC_SHM_SLOTS   2048u
#define EMBER_ALLOC_SHM_FRAMES  61u
#define EMBER_ALLOC_SHM_PREFIX  "/dev/shm/ember-alloc."

typedef struct ember_alloc_slot {
  uint64_t seq;  /* ticket + 1 once the slot is complete */
  uint64_t size; /* requested bytes of the sampled allocation */
  uint32_t nips; /* entries of ips used, <= EMBER_ALLOC_SHM_FRAMES */
  uint32_t tid;
  uint64_t ips[EMBER_ALLOC_SHM_FRAMES]; /* leaf first */
} ember_alloc_slot_t;

typedef struct ember_alloc_shm {
  uint64_t magic;
  uint32_t version;
  uint32_t hdr_size;  /* offset of slot 0 */
  uint32_t slot_size; /* sizeof(ember_alloc_slot_t) */
  uint32_t nslots;
  int32_t pid; /* getpid() of the library's process (its pid namespace) */
  uint32_t reserved0;
  uint64_t on;           /* agent: nonzero = sample */
  uint64_t owner;        /* agent: session token, 0 = none */
  uint64_t sample_bytes; /* agent: mean byte interval */
  uint64_t generation;   /* agent: bumped per session; threads redraw */
  uint64_t heartbeat;    /* agent: bumped per poll */
  uint64_t self_off;     /* library: times it turned off (agent silent) */
  uint64_t dropped;      /* library: samples dropped, ring full */
  uint64_t reserved1[5];
  uint64_t head; /* library: next ticket */
  uint64_t reserved2[7];
  uint64_t tail; /* agent: next ticket to read */
} ember_alloc_shm_t;

_Static_assert(sizeof(ember_alloc_slot_t) == 512, "slot layout");
_Static_assert(offsetof(ember_alloc_shm_t, on) == 32, "header layout");
_Static_assert(offsetof(ember_alloc_shm_t, head) == 128, "header layout");
_Static_assert(offsetof(ember_alloc_shm_t, tail) == 192, "header layout");
_Static_assert(sizeof(ember_alloc_shm_t) <= EMBER_ALLOC_SHM_HDR, "header fits its page");

#define EMBER_ALLOC_SHM_SIZE                                                                       \
  ((size_t)EMBER_ALLOC_SHM_HDR + (size_t)EMBER_ALLOC_SHM_SLOTS * sizeof(ember_alloc_slot_t))

#endif
