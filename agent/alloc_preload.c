/* The preload method of allocation sessions, over the heap tracker
 * (agent/heap.h), which is the one reader of every process's control file
 * (agent/heapshm.h): a session is a watcher of the process's records at
 * the session's rate. The agent names its tracker with
 * ember__alloc_preload_use; without one (a program that only runs
 * sessions, the tests), each session has a tracker of its own, which
 * walks frame pointers only. See docs/internals/alloc.md. */
#include <errno.h>
#include <stdio.h>

#include "alloc.h"
#include "ember/ember.h"
#include "heap.h"
#include "heapshm.h"

static ember__heap_t *g_heap; /* the agent's, loop thread */

struct ember__alloc_preload {
  ember__heap_t *h;   /* g_heap or own */
  ember__heap_t *own; /* a session's own tracker */
  pid_t pid;
  bool on;       /* watching */
  bool stopping; /* disabled: the next drain is the last */
  void (*add)(void *ctx, const uint64_t *ips, size_t n, double objects, double bytes);
  void *ctx;
};

void ember__alloc_preload_use(ember__heap_t *h) { g_heap = h; }

uint64_t ember__alloc_preload_faults(void) { return ember__heapshm_faults(); }

bool ember__alloc_preload_present(pid_t pid) { return ember__heapshm_present(pid); }

int ember__alloc_preload_sweep(void) { return ember__heapshm_sweep(); }

/* The watcher: forwards to the drain's callback, which the session
 * names at each drain (the same one every time). */
static void on_add(void *ctx, const uint64_t *ips, size_t n, double objects, double bytes) {
  ember__alloc_preload_t *p = ctx;
  if (p->add != NULL) p->add(p->ctx, ips, n, objects, bytes);
}

int ember__alloc_preload_open(pid_t pid, uint64_t sample_bytes, ember__alloc_preload_t **out,
                              char *err, size_t n) {
  ember__alloc_preload_t *p = ember_calloc(1, sizeof *p);
  if (p == NULL) {
    snprintf(err, n, "out of memory");
    return -ENOMEM;
  }
  p->pid = pid;
  p->h = g_heap;
  if (p->h == NULL) {
    int rc = ember__heap_new(NULL, &p->own);
    if (rc != 0) {
      ember_free(p);
      snprintf(err, n, "out of memory");
      return rc;
    }
    p->h = p->own;
  }
  int rc = ember__heap_watch(p->h, pid, sample_bytes, on_add, p, err, n);
  if (rc != 0) {
    ember__heap_free(p->own);
    ember_free(p);
    return rc;
  }
  p->on = true;
  *out = p;
  return 0;
}

int ember__alloc_preload_drain(ember__alloc_preload_t *p,
                               void (*add)(void *ctx, const uint64_t *ips, size_t n, double objects,
                                           double bytes),
                               void *ctx, uint64_t *lost) {
  ember__heap_stats_t before, after;
  p->add = add;
  p->ctx = ctx;
  ember__heap_stats(p->h, &before);
  int rc = p->on ? ember__heap_state(p->h, p->pid) : 0;
  if (p->on && p->stopping) {
    /* The last records go to the watcher, then the rate is restored. */
    ember__heap_unwatch(p->h, p->pid);
    p->on = false;
  } else if (p->on) {
    ember__heap_poll(p->h, p->pid);
    rc = ember__heap_state(p->h, p->pid);
  }
  ember__heap_stats(p->h, &after);
  /* The tracker's counts are of every process; with the agent's tracker
   * this is the share of the processes polled now, which is this one. */
  *lost += after.lost - before.lost;
  return rc;
}

void ember__alloc_preload_disable(ember__alloc_preload_t *p) {
  if (p != NULL) p->stopping = true;
}

void ember__alloc_preload_close(ember__alloc_preload_t *p) {
  if (p == NULL) return;
  if (p->on) ember__heap_unwatch(p->h, p->pid);
  ember__heap_free(p->own);
  ember_free(p);
}
