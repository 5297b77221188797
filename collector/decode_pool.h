/* Decode threads for the ingest thread (issue 14, "use the cores").
 *
 * The ingest thread polls Kafka and keeps the one LMDB writer; decoding a
 * window is independent of every other, so it hands each message to this
 * pool as it arrives and, before storing the batch, waits until all of
 * them are done (ember__dpool_wait). The batch is then stored whole, in
 * order, before its offsets are committed: the pool changes who decodes,
 * never the order of commit-then-offset.
 *
 * With 0 threads (or a NULL pool) ember__dpool_submit runs the job on the
 * caller's thread and ember__dpool_wait returns at once.
 * Thread-safety: submit and wait are called by one thread (the ingest
 * thread); jobs run on the pool's threads and must touch only their own
 * argument. Errors: creation returns -ENOMEM or -errno (pthread). */
#ifndef EMBER_COLLECTOR_DECODE_POOL_H
#define EMBER_COLLECTOR_DECODE_POOL_H

#include <stddef.h>

typedef struct ember__dpool ember__dpool_t;
typedef void (*ember__dpool_fn)(void *arg);

/* A pool of `threads` threads (0: run jobs inline) taking at most
 * `queue` jobs between two waits. */
int ember__dpool_new(size_t threads, size_t queue, ember__dpool_t **out);
/* Run fn(arg) on a pool thread. When `queue` jobs are pending, waits for
 * them first. */
void ember__dpool_submit(ember__dpool_t *p, ember__dpool_fn fn, void *arg);
/* Return once every submitted job has finished. */
void ember__dpool_wait(ember__dpool_t *p);
size_t ember__dpool_threads(const ember__dpool_t *p);
/* Wait for the jobs, stop the threads, free. NULL is a no-op. */
void ember__dpool_free(ember__dpool_t *p);

#endif
