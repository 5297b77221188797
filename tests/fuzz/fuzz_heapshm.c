/* libFuzzer target for the agent's reader of libember_alloc.so's control
 * file (agent/heapshm.c), which a profiled process writes as it likes.
 *
 * The bytes are a control file: the first 24 bytes give the ring's head,
 * tail and dropped counter (lies included), the rest fills the ring from
 * its first cell and, mirrored, the live table. The header's identity
 * (magic, version, sizes, pid) is made right so the reader gets past its
 * open and into the records. It is drained twice (the second time after
 * the head moved on by the input's last byte) and its live table read.
 * Whatever the bytes: no crash, leak or undefined behaviour, every record
 * handed out has the counts its head says within its cells, and every
 * live entry handed out has a size and a mean. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "heapshm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RING  EMBER_ALLOC_SHM_RING_MIN
#define FSIZE EMBER_ALLOC_SHM_SIZE(RING)

static void on_record(void *ctx, const ember__heapshm_rec_t *rec) {
  (void)ctx;
  const ember_alloc_rec_t *h = rec->head;
  if (h->nips < 2 || h->nips > EMBER_ALLOC_SHM_FRAMES || h->size == 0 || h->mean == 0) abort();
  if (sizeof *h + h->nips * sizeof(uint64_t) + h->stack_len > (size_t)h->ncells * 64) abort();
  /* Every byte handed out is readable. */
  volatile uint64_t x = rec->ips[h->nips - 1];
  if (h->stack_len > 0) x ^= rec->stack[h->stack_len - 1];
  (void)x;
}

static void on_live(void *ctx, const ember_alloc_live_t *e) {
  (void)ctx;
  if (e->size == 0 || e->mean == 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 24) return 0;
  static uint8_t *file;
  if (file == NULL && (file = malloc(FSIZE)) == NULL) return 0;
  memset(file, 0, FSIZE);
  ember_alloc_shm_t *h = (ember_alloc_shm_t *)(void *)file;
  h->magic = EMBER_ALLOC_SHM_MAGIC;
  h->version = EMBER_ALLOC_SHM_VERSION;
  h->hdr_size = EMBER_ALLOC_SHM_HDR;
  h->nlive = EMBER_ALLOC_SHM_LIVE;
  h->ring_bytes = RING;
  h->stack_max = EMBER_ALLOC_SHM_STACK_DEFAULT;
  h->pid = (int32_t)getpid();
  memcpy(&h->head, data, 8);
  memcpy(&h->tail, data + 8, 8);
  memcpy(&h->dropped, data + 16, 8);
  const uint8_t *body = data + 24;
  size_t blen = size - 24;
  memcpy(file + EMBER_ALLOC_SHM_RING_OFF, body, blen < RING ? blen : RING);
  size_t live = EMBER_ALLOC_SHM_RING_OFF - EMBER_ALLOC_SHM_LIVE_OFF;
  memcpy(file + EMBER_ALLOC_SHM_LIVE_OFF, body, blen < live ? blen : live);

  int fd = memfd_create("fuzz-heapshm", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, file, FSIZE) != (ssize_t)FSIZE) {
    close(fd);
    return 0;
  }
  ember__heapshm_t *r = NULL;
  char err[256];
  if (ember__heapshm_open_fd(fd, getpid(), getpid(), (off_t)FSIZE, &r, err, sizeof err) != 0)
    return 0;
  (void)ember__heapshm_drain(r, on_record, NULL);
  /* The library went on writing: the head moves by the last byte. */
  uint64_t head = h->head + data[size - 1];
  (void)pwrite(fd, &head, sizeof head, offsetof(ember_alloc_shm_t, head));
  (void)ember__heapshm_drain(r, on_record, NULL);
  (void)ember__heapshm_live(r, on_live, NULL);
  ember__heapshm_close(r);
  return 0;
}
