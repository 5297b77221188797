/* Decode threads (decode_pool.h): a fixed ring of jobs under one mutex. A
 * job is a whole message's decode (tens of microseconds), so one lock per
 * job costs nothing next to it. */
#include "decode_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>

#include "ember/ember.h"

typedef struct job {
  ember__dpool_fn fn;
  void *arg;
} job_t;

struct ember__dpool {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  job_t *ring;
  size_t cap, head, count; /* queued jobs: ring[head .. head + count) */
  size_t running;          /* taken off the ring, not finished */
  bool stop;
  pthread_t *threads;
  size_t nthreads;
};

static void *worker(void *arg) {
  ember__dpool_t *p = arg;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (p->count == 0 && !p->stop) pthread_cond_wait(&p->work, &p->mu);
    if (p->count == 0) break; /* stopping, nothing left */
    job_t j = p->ring[p->head];
    p->head = (p->head + 1) % p->cap;
    p->count--;
    p->running++;
    pthread_mutex_unlock(&p->mu);
    j.fn(j.arg);
    pthread_mutex_lock(&p->mu);
    p->running--;
    if (p->count == 0 && p->running == 0) pthread_cond_broadcast(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int ember__dpool_new(size_t threads, size_t queue, ember__dpool_t **out) {
  ember__dpool_t *p = ember_calloc(1, sizeof *p);
  if (p == NULL) return -ENOMEM;
  p->cap = queue ? queue : 1;
  p->ring = ember_calloc(p->cap, sizeof *p->ring);
  p->threads = ember_calloc(threads ? threads : 1, sizeof *p->threads);
  if (p->ring == NULL || p->threads == NULL) {
    ember_free(p->ring);
    ember_free(p->threads);
    ember_free(p);
    return -ENOMEM;
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  /* Signals stay with the daemon's signal thread. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = 0;
  for (; p->nthreads < threads; p->nthreads++) {
    rc = pthread_create(&p->threads[p->nthreads], NULL, worker, p);
    if (rc != 0) break;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    ember__dpool_free(p);
    return -rc;
  }
  *out = p;
  return 0;
}

size_t ember__dpool_threads(const ember__dpool_t *p) { return p ? p->nthreads : 0; }

void ember__dpool_submit(ember__dpool_t *p, ember__dpool_fn fn, void *arg) {
  if (p == NULL || p->nthreads == 0) {
    fn(arg);
    return;
  }
  pthread_mutex_lock(&p->mu);
  while (p->count == p->cap) pthread_cond_wait(&p->done, &p->mu);
  p->ring[(p->head + p->count) % p->cap] = (job_t){fn, arg};
  p->count++;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->mu);
}

void ember__dpool_wait(ember__dpool_t *p) {
  if (p == NULL || p->nthreads == 0) return;
  pthread_mutex_lock(&p->mu);
  while (p->count > 0 || p->running > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}

void ember__dpool_free(ember__dpool_t *p) {
  if (p == NULL) return;
  pthread_mutex_lock(&p->mu);
  p->stop = true;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (size_t i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->done);
  ember_free(p->ring);
  ember_free(p->threads);
  ember_free(p);
}
