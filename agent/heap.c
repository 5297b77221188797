/* The always-on heap tracker: agent/heap.h. See docs/internals/heap.md. */
#include "heap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "array.h"
#include "ember/ember.h"
#include "heapshm.h"
#include "htab.h"

typedef struct hstack {
  uint32_t off, n; /* in ips */
  uint64_t hash;
} hstack_t;

/* A record whose allocation may still be live: its id and stack. */
typedef struct href {
  uint64_t id;
  uint32_t stack;
} href_t;

/* The stacks and record references of one process, rebuilt at each
 * snapshot from what the live table still holds. */
typedef struct hset {
  uint64_t *ips;
  size_t nips, capips;
  hstack_t *stacks;
  size_t nstacks, capstacks;
  ember__htab_t sidx;
  href_t *refs;
  size_t nrefs, caprefs;
  ember__htab_t ridx;
} hset_t;

typedef struct proc {
  pid_t pid;
  ember__heapshm_t *shm;
  int state;     /* 0, -EPROTO (faulted), -ESRCH (ended) */
  bool followed; /* by ember__heap_attach, not only for a watcher */
  hset_t set;
  ember__heap_add_fn watch;
  void *watch_ctx;
  ember__heapshm_counts_t seen; /* counts already added to the tracker's */
} proc_t;

struct ember__heap {
  ember__heap_opts_t o;
  ember__window_t *win;
  proc_t **procs;
  size_t nprocs, capprocs;
  ember__heap_stats_t st;
  uint64_t ips[EMBER__HEAP_MAX_FRAMES];
};

static const uint64_t unknown_stack[1] = {EMBER__HEAP_UNKNOWN_IP};

/* --- one process's stacks and references --- */

typedef struct skey {
  const hset_t *s;
  const uint64_t *ips;
  uint32_t n;
} skey_t;

static bool stack_eq(const void *ctx, uint32_t idx) {
  const skey_t *k = ctx;
  const hstack_t *st = &k->s->stacks[idx];
  return st->n == k->n && memcmp(k->s->ips + st->off, k->ips, k->n * sizeof *k->ips) == 0;
}

static uint64_t stack_rehash(const void *ctx, uint32_t idx) {
  const skey_t *k = ctx;
  return k->s->stacks[idx].hash;
}

typedef struct rkey {
  const hset_t *s;
  uint64_t id;
} rkey_t;

static bool ref_eq(const void *ctx, uint32_t idx) {
  const rkey_t *k = ctx;
  return k->s->refs[idx].id == k->id;
}

static uint64_t ref_hash(uint64_t id) { return ember__hash_mix(0x4ea9, id); }

static uint64_t ref_rehash(const void *ctx, uint32_t idx) {
  const rkey_t *k = ctx;
  return ref_hash(k->s->refs[idx].id);
}

static void set_free(hset_t *s) {
  ember_free(s->ips);
  ember_free(s->stacks);
  ember_free(s->refs);
  ember__htab_free(&s->sidx);
  ember__htab_free(&s->ridx);
  memset(s, 0, sizeof *s);
}

/* The index of stack ips[0..n) in s, added if new; -1 out of memory. */
static int64_t set_stack(hset_t *s, const uint64_t *ips, uint32_t n) {
  uint64_t h = ember__hash_bytes(ips, n * sizeof *ips, 0x57ac);
  skey_t k = {s, ips, n};
  int64_t at = ember__htab_find(&s->sidx, h, stack_eq, &k);
  if (at >= 0) return at;
  if (ember__grow(&s->ips, &s->capips, s->nips + n, sizeof *s->ips) != 0 ||
      ember__grow(&s->stacks, &s->capstacks, s->nstacks + 1, sizeof *s->stacks) != 0)
    return -1;
  memcpy(s->ips + s->nips, ips, n * sizeof *ips);
  s->stacks[s->nstacks] = (hstack_t){(uint32_t)s->nips, n, h};
  if (ember__htab_insert(&s->sidx, h, (uint32_t)s->nstacks, stack_rehash, &k) != 0) return -1;
  s->nips += n;
  return (int64_t)s->nstacks++;
}

static int set_ref(hset_t *s, uint64_t id, uint32_t stack) {
  rkey_t k = {s, id};
  if (ember__htab_find(&s->ridx, ref_hash(id), ref_eq, &k) >= 0) return 0;
  if (ember__grow(&s->refs, &s->caprefs, s->nrefs + 1, sizeof *s->refs) != 0) return -ENOMEM;
  s->refs[s->nrefs] = (href_t){id, stack};
  if (ember__htab_insert(&s->ridx, ref_hash(id), (uint32_t)s->nrefs, ref_rehash, &k) != 0)
    return -ENOMEM;
  s->nrefs++;
  return 0;
}

static const href_t *set_find_ref(const hset_t *s, uint64_t id) {
  rkey_t k = {s, id};
  int64_t at = ember__htab_find(&s->ridx, ref_hash(id), ref_eq, &k);
  return at >= 0 ? &s->refs[at] : NULL;
}

/* --- processes --- */

static proc_t *find(const ember__heap_t *h, pid_t pid) {
  for (size_t i = 0; i < h->nprocs; i++) {
    if (h->procs[i]->pid == pid) return h->procs[i];
  }
  return NULL;
}

static void proc_free(proc_t *p) {
  if (p == NULL) return;
  ember__heapshm_close(p->shm);
  set_free(&p->set);
  ember_free(p);
}

static void drop(ember__heap_t *h, proc_t *p) {
  for (size_t i = 0; i < h->nprocs; i++) {
    if (h->procs[i] == p) {
      h->procs[i] = h->procs[--h->nprocs];
      break;
    }
  }
  proc_free(p);
}

static int open_proc(ember__heap_t *h, pid_t pid, proc_t **out, char *err, size_t n) {
  if (ember__grow(&h->procs, &h->capprocs, h->nprocs + 1, sizeof *h->procs) != 0) return -ENOMEM;
  proc_t *p = ember_calloc(1, sizeof *p);
  if (p == NULL) return -ENOMEM;
  int rc = ember__heapshm_open(pid, &p->shm, err, n);
  if (rc != 0) {
    ember_free(p);
    return rc;
  }
  p->pid = pid;
  h->procs[h->nprocs++] = p;
  *out = p;
  return 0;
}

int ember__heap_new(const ember__heap_opts_t *opts, ember__heap_t **out) {
  ember__heap_t *h = ember_calloc(1, sizeof *h);
  if (h == NULL) return -ENOMEM;
  if (opts != NULL) h->o = *opts;
  *out = h;
  return 0;
}

void ember__heap_free(ember__heap_t *h) {
  if (h == NULL) return;
  for (size_t i = 0; i < h->nprocs; i++) proc_free(h->procs[i]);
  ember_free(h->procs);
  ember_free(h);
}

int ember__heap_attach(ember__heap_t *h, pid_t pid, char *err, size_t n) {
  proc_t *p = find(h, pid);
  if (p != NULL) {
    if (p->followed) return -EEXIST;
    p->followed = true;
    return 0;
  }
  int rc = open_proc(h, pid, &p, err, n);
  if (rc == 0) p->followed = true;
  return rc;
}

bool ember__heap_follows(const ember__heap_t *h, pid_t pid) {
  const proc_t *p = find(h, pid);
  return p != NULL && p->followed && p->state == 0;
}

void ember__heap_detach(ember__heap_t *h, pid_t pid) {
  proc_t *p = find(h, pid);
  if (p == NULL) return;
  p->followed = false;
  if (p->watch == NULL) drop(h, p);
}

void ember__heap_set_window(ember__heap_t *h, ember__window_t *w) { h->win = w; }

/* --- reading --- */

typedef struct rctx {
  ember__heap_t *h;
  proc_t *p;
} rctx_t;

/* The stack of a record into h->ips, from the allocating function up:
 * the CFI walk when it finds more than the frame-pointer walk. The leaf is
 * the return address - 1, an address inside the call, so it symbolizes
 * as the allocating line (and is looked up as exact, as a leaf is); the
 * library's own frame is left out. Returns its length. */
static uint32_t record_stack(ember__heap_t *h, proc_t *p, const ember__heapshm_rec_t *rec) {
  const ember_alloc_rec_t *s = rec->head;
  uint32_t n = 0;
  if (h->o.unwind != NULL) {
    ember__unwind_regs_t regs = {s->ip - 1, s->sp, s->bp};
    size_t k = h->o.unwind(h->o.ctx, (uint32_t)p->pid, &regs, rec->stack, s->stack_len, h->ips,
                           EMBER__HEAP_MAX_FRAMES);
    /* ips[0] of the library's walk is its own frame. */
    if (k >= 1 && k + 1 > s->nips) {
      h->ips[0] = s->ip - 1;
      h->st.cfi++;
      return (uint32_t)k;
    }
  }
  h->ips[n++] = s->ip - 1;
  for (uint32_t i = 2; i < s->nips && n < EMBER__HEAP_MAX_FRAMES; i++) h->ips[n++] = rec->ips[i];
  return n;
}

static void on_record(void *ctx, const ember__heapshm_rec_t *rec) {
  rctx_t *c = ctx;
  ember__heap_t *h = c->h;
  proc_t *p = c->p;
  const ember_alloc_rec_t *s = rec->head;
  uint32_t n = record_stack(h, p, rec);
  if (ember__heapshm_heap_rate(p->shm) != 0) {
    int64_t at = set_stack(&p->set, h->ips, n);
    if (at >= 0) set_ref(&p->set, rec->id, (uint32_t)at);
  }
  /* An allocation of `size` bytes holds at least one sample point of a
   * Poisson process of rate 1/mean with probability 1 - exp(-size/mean);
   * dividing by it makes the estimates unbiased. */
  double prob = ember__heapshm_one_minus_exp_neg((double)s->size / (double)s->mean);
  double w = prob > 0 ? 1.0 / prob : 1.0;
  if (h->win != NULL)
    ember__window_add_weighted(h->win, (uint32_t)p->pid, h->ips, n, w, w * (double)s->size, NULL);
  if (p->watch != NULL) p->watch(p->watch_ctx, h->ips, n, w, w * (double)s->size);
}

static void add_counts(ember__heap_t *h, proc_t *p) {
  ember__heapshm_counts_t now;
  ember__heapshm_counts(p->shm, &now);
  h->st.records += now.records - p->seen.records;
  h->st.bad += now.bad - p->seen.bad;
  h->st.lost += now.lost - p->seen.lost;
  if (now.live_dropped >= p->seen.live_dropped)
    h->st.live_dropped += now.live_dropped - p->seen.live_dropped;
  p->seen = now;
}

static void poll_one(ember__heap_t *h, proc_t *p) {
  if (p->state != 0) return;
  rctx_t c = {h, p};
  int rc = ember__heapshm_drain(p->shm, on_record, &c);
  add_counts(h, p);
  if (rc != 0) p->state = rc == -ESRCH ? -ESRCH : -EPROTO;
}

void ember__heap_poll(ember__heap_t *h, pid_t pid) {
  for (size_t i = 0; i < h->nprocs; i++) {
    proc_t *p = h->procs[i];
    if (pid == 0 || p->pid == pid) poll_one(h, p);
  }
  /* Ended or faulted: what they had is no longer anyone's (a watcher
   * learns it through ember__heap_state). */
  for (size_t i = 0; i < h->nprocs;) {
    proc_t *p = h->procs[i];
    if (p->state != 0 && p->watch == NULL) {
      drop(h, p);
      continue;
    }
    i++;
  }
}

/* A live entry whose record was not read when the table was: its record
 * is still being written (the entry is taken first), or was published
 * after the drain. */
typedef struct pending {
  uint64_t id, size, mean;
} pending_t;

typedef struct lctx {
  ember__heap_t *h;
  proc_t *p;
  ember__window_t *w;
  hset_t keep;
  uint64_t tail; /* the reader's, when the table was read */
  pending_t *pend;
  size_t npend, cappend;
  int rc;
} lctx_t;

static void add_live(lctx_t *c, const uint64_t *ips, uint32_t n, uint64_t size, uint64_t mean) {
  double prob = ember__heapshm_one_minus_exp_neg((double)size / (double)mean);
  double w = prob > 0 ? 1.0 / prob : 1.0;
  if (c->w != NULL)
    ember__window_add_weighted(c->w, (uint32_t)c->p->pid, ips, n, w, w * (double)size, NULL);
}

static void on_live(void *ctx, const ember_alloc_live_t *e) {
  lctx_t *c = ctx;
  const hset_t *old = &c->p->set;
  const href_t *r = e->id != 0 ? set_find_ref(old, e->id) : NULL;
  if (r == NULL && e->id > c->tail &&
      ember__grow(&c->pend, &c->cappend, c->npend + 1, sizeof *c->pend) == 0) {
    c->pend[c->npend++] = (pending_t){e->id, e->size, e->mean};
    return;
  }
  const uint64_t *ips = unknown_stack;
  uint32_t n = 1;
  if (r != NULL) {
    const hstack_t *st = &old->stacks[r->stack];
    ips = old->ips + st->off;
    n = st->n;
    int64_t at = set_stack(&c->keep, ips, n);
    if (at < 0 || set_ref(&c->keep, e->id, (uint32_t)at) != 0) c->rc = -ENOMEM;
  } else {
    c->h->st.unknown++;
  }
  add_live(c, ips, n, e->size, e->mean);
}

/* The entries read before their records: drain once more (a record being
 * written when the table was read is almost always published by now)
 * and add each under its stack, or under [unknown] when its record is
 * still not there. The drain's records land in the process's new set. */
static void add_pending(lctx_t *c) {
  ember__heap_t *h = c->h;
  proc_t *p = c->p;
  poll_one(h, p);
  uint64_t tail = ember__heapshm_tail(p->shm);
  for (size_t i = 0; i < c->npend; i++) {
    const pending_t *e = &c->pend[i];
    const href_t *r = set_find_ref(&p->set, e->id);
    if (r != NULL) {
      const hstack_t *st = &p->set.stacks[r->stack];
      add_live(c, p->set.ips + st->off, st->n, e->size, e->mean);
      continue;
    }
    if (e->id > tail)
      h->st.in_flight++;
    else
      h->st.unknown++;
    add_live(c, unknown_stack, 1, e->size, e->mean);
  }
}

int ember__heap_snapshot(ember__heap_t *h, ember__window_t *w, uint32_t *pids, size_t cap,
                         size_t *npids) {
  ember__heap_poll(h, 0);
  size_t k = 0;
  int rc = 0;
  h->st.unknown = 0;
  h->st.in_flight = 0;
  for (size_t i = 0; i < h->nprocs; i++) {
    proc_t *p = h->procs[i];
    if (p->state != 0 || !p->followed) continue;
    lctx_t c = {h, p, w, {0}, ember__heapshm_tail(p->shm), NULL, 0, 0, 0};
    int lr = ember__heapshm_live(p->shm, on_live, &c);
    add_counts(h, p);
    if (lr != 0 || c.rc != 0) {
      set_free(&c.keep);
      ember_free(c.pend);
      if (lr != 0) p->state = -EPROTO;
      if (c.rc != 0) rc = c.rc;
      continue;
    }
    /* What no live entry holds is forgotten. */
    set_free(&p->set);
    p->set = c.keep;
    if (c.npend > 0) add_pending(&c);
    ember_free(c.pend);
    if (pids != NULL && k < cap) pids[k] = (uint32_t)p->pid;
    k++;
  }
  if (npids != NULL) *npids = k;
  return rc;
}

/* --- sessions --- */

int ember__heap_watch(ember__heap_t *h, pid_t pid, uint64_t sample_bytes, ember__heap_add_fn fn,
                      void *ctx, char *err, size_t n) {
  proc_t *p = find(h, pid);
  if (p != NULL && p->watch != NULL) {
    snprintf(err, n, "process %d already has an allocation session", (int)pid);
    return -EBUSY;
  }
  if (p == NULL) {
    int rc = open_proc(h, pid, &p, err, n);
    if (rc != 0) return rc;
  }
  /* Records already in the ring were sampled before the session: they
   * belong to the heap's windows, not to it. */
  poll_one(h, p);
  p->watch = fn;
  p->watch_ctx = ctx;
  ember__heapshm_set_rate(p->shm, sample_bytes);
  return 0;
}

void ember__heap_unwatch(ember__heap_t *h, pid_t pid) {
  proc_t *p = find(h, pid);
  if (p == NULL || p->watch == NULL) return;
  if (p->state == 0) {
    ember__heapshm_set_rate(p->shm, 0);
    poll_one(h, p);
  }
  p->watch = NULL;
  p->watch_ctx = NULL;
  if (!p->followed || p->state != 0) drop(h, p);
}

int ember__heap_state(const ember__heap_t *h, pid_t pid) {
  const proc_t *p = find(h, pid);
  return p == NULL ? -ESRCH : p->state;
}

void ember__heap_stats(const ember__heap_t *h, ember__heap_stats_t *out) {
  *out = h->st;
  out->processes = 0;
  out->stacks = 0;
  for (size_t i = 0; i < h->nprocs; i++) {
    if (h->procs[i]->followed) out->processes++;
    out->stacks += h->procs[i]->set.nstacks;
  }
}
