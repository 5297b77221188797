/* The agent's wiring. See agent.h and docs/internals/agent.md. */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "agent.h"
#include "discovery.h"
#include "ember/codec.h"
#include "ember/wire.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/metrics.h"
#include "htab.h"
#include "publish.h"
#include "safefile.h"
#include "sampler.h"
#include "alloc.h"
#include "session.h"
#include "symbolize.h"
#include "unwtab.h"
#include "array.h"
#include "heap.h"
#include "heapshm.h"
#include "window.h"

const char *const ember__agent_config_keys[] = {EMBER_KAFKA_CONFIG_KEYS,
                                                "host_id",
                                                "continuous_hz",
                                                "window",
                                                "selector",
                                                "kernel_stacks",
                                                "ring_pages",
                                                "spool_dir",
                                                "spool_max_bytes",
                                                "queue_max_bytes",
                                                "metrics_listen",
                                                "targets_refresh",
                                                "scan_interval",
                                                "log_level",
                                                "dwarf",
                                                "unwind",
                                                "unwind_stack_bytes",
                                                "unwind_table_memory",
                                                "symbol_cache_memory",
                                                "dwarf_debug_files",
                                                "sourcemaps",
                                                "sourcemap_memory",
                                                "debug_dirs",
                                                "max_stacks_per_window",
                                                "wire_version",
                                                "netlink",
                                                "session.max_concurrent",
                                                "session.max_duration",
                                                "session.max_hz",
                                                "session.alloc_sample_bytes",
                                                EMBER__SESSION_CONFIG_KEYS,
                                                NULL};

#define MAX_PENDING_WINDOWS 4
#define MAPS_REFRESH_NS     1000000000LL /* first re-read after a miss */
#define MAPS_REFRESH_MAX_NS 8000000000LL /* backed off to, while nothing changes */
#define MAPS_PC_REFRESH_NS  20000000LL   /* when the sampled pc itself is not covered */

/* An immutable maps snapshot shared by the loop and the close thread. */
typedef struct maps_ref {
  atomic_int refs;
  ember__procmaps_t *maps;
} maps_ref_t;

static maps_ref_t *maps_ref_get(maps_ref_t *r) {
  if (r) atomic_fetch_add(&r->refs, 1);
  return r;
}

static void maps_ref_put(maps_ref_t *r) {
  if (r && atomic_fetch_sub(&r->refs, 1) == 1) {
    ember__procmaps_free(r->maps);
    ember_free(r);
  }
}

/* What the loop knows of a pid it has seen in samples. */
typedef struct pidinfo {
  uint32_t pid;
  bool selected;
  bool announced;
  char *worker, *version, *actor;
  maps_ref_t *maps;
  int64_t maps_read_ns;     /* monotonic */
  int64_t maps_every_ns;    /* re-read no sooner than this after the last */
  int64_t maps_pc_every_ns; /* the same, for a sampled pc outside the maps */
  int64_t heap_tried_ns;    /* monotonic: last try to follow its heap */
  bool heap;                /* its heap is followed */
} pidinfo_t;

/* One pid's share of a closed window, as handed to the close thread. */
typedef struct job_pid {
  uint32_t pid;
  char *worker, *version, *actor;
  maps_ref_t *maps;
} job_pid_t;

typedef struct job {
  ember__window_t *window;
  /* An on-demand session's result (session_id != NULL): published with
   * the session id and its own rate, then DONE or FAILED is reported. */
  char *session_id;
  bool memory; /* an allocation session: values are objects and bytes */
  /* A continuous window's heap profiles (NULL without heap data): the
   * allocations made during it, and what was live at its end. */
  ember__window_t *heap_alloc, *heap_inuse;
  uint32_t hz, ntargets;
  uint64_t samples;
  job_pid_t *pids;
  size_t npids;
  uint32_t *forget; /* pids that exited: drop their symbolizer state after */
  size_t nforget;
  struct job *next;
} job_t;

typedef struct agent {
  /* configuration */
  char host_id[256];
  char agent_id[320];
  uint32_t hz;
  uint32_t wire_version; /* of the profiles it publishes: 1 or 2 */
  uint32_t ring_pages;
  ember__unwind_mode_t unwind;
  uint32_t stack_bytes; /* user stack copied a sample; 0 with unwind = fp */
  uint64_t unwind_table_bytes;
  int64_t window_ns;
  int64_t targets_refresh_ns;
  uint64_t max_stacks;
  uint32_t session_max_concurrent, session_max_hz;
  uint64_t session_alloc_sample_bytes;
  bool heap_on; /* config heap: follow the in-use heap of preloaded processes */
  int64_t session_max_duration_ns;
  pid_t self;

  uv_loop_t loop;
  uv_timer_t window_timer, scan_timer, targets_timer, metrics_timer, sweep_timer;
  uv_signal_t sigterm, sigint;
  uv_poll_t netlink_poll;
  bool netlink_polling;
  bool stopping;

  ember_kafka_t *kafka;
  bool own_kafka;
  ember__publisher_t *pub;
  ember__discovery_t *disc;
  ember__sampler_t *sampler;
  ember__symbolizer_t *sym; /* close thread only */
  ember__sessions_t *sessions;
  ember__session_metrics_t sm;
  ember__safe_metrics_t sf;    /* hostile files (agent/safefile.h) */
  ember__jsmaps_metrics_t jsm; /* source maps (agent/jsmap.h) */
  ember__unwtab_t *unw;        /* loop thread: unwind tables (unwind != fp) */
  ember__heap_t *heap;         /* loop thread: the in-use heap (config heap) */
  ember__window_t *heap_open;  /* its allocations of the open window */
  uv_timer_t heap_timer;
  uint64_t stack_ips[EMBER__PERF_MAX_CHAIN + EMBER__UNWIND_MAX_DEPTH];

  ember__window_t *open;
  ember__window_clock_t wclock; /* when to cut `open`, and its label */
  ember__htab_t pid_index;
  pidinfo_t *pids;
  size_t npids, cappids;

  /* close thread */
  uv_thread_t closer;
  uv_mutex_t mu;
  uv_cond_t cv;
  job_t *head, *tail;
  size_t pending;
  bool closer_exit;
  uint64_t seq;

  /* metrics */
  ember_metrics_t *metrics;
  ember_http_metrics_t *http;
  struct {
    ember_metric_t *samples, *lost, *throttles, *windows, *windows_dropped, *profiles,
        *profile_errors, *queue_bytes, *spool_bytes, *spool_files, *spooled, *dropped, *events_sent,
        *events_failed, *sym_hits, *sym_loads, *unresolved, *targets, *cpu, *rss, *stacks_dropped,
        *idle, *unreadable, *unw_results[EMBER__UNWIND_NRESULTS], *unw_fp_steps, *unw_sig_steps,
        *unw_tables, *unw_bytes, *unw_builds, *unw_build_s, *unw_no_cfi, *unw_evictions, *unw_cfi,
        *debug_files, *minidebug, *debug_refused, *sym_bytes, *debug_bytes, *sym_evictions,
        *heap_procs, *heap_records, *heap_lost, *heap_bad, *heap_untracked, *heap_unknown,
        *heap_in_flight, *heap_stacks, *heap_cfi;
  } m;
  atomic_uint_fast64_t profiles_sent, profile_errors, windows_dropped, unresolved, sym_hits,
      sym_loads, debug_files, minidebug, debug_refused, sym_bytes, debug_bytes, sym_evictions;
} agent_t;

/* --- pid table (loop thread) --- */

typedef struct pid_key {
  const agent_t *a;
  uint32_t pid;
} pid_key_t;

static bool pid_eq(const void *ctx, uint32_t idx) {
  const pid_key_t *k = ctx;
  return k->a->pids[idx].pid == k->pid;
}

static uint64_t pid_hash_of(uint32_t pid) { return ember__hash_mix(0x9a1d, pid); }

static uint64_t pid_rehash(const void *ctx, uint32_t idx) {
  const pid_key_t *k = ctx;
  return pid_hash_of(k->a->pids[idx].pid);
}

static void pidinfo_clear(pidinfo_t *p) {
  ember_free(p->worker);
  ember_free(p->version);
  ember_free(p->actor);
  maps_ref_put(p->maps);
  memset(p, 0, sizeof *p);
}

static int set_copy(char **dst, const char *src) {
  char *c = NULL;
  if (src != NULL && (c = ember_strdup(src)) == NULL) return -ENOMEM;
  ember_free(*dst);
  *dst = c;
  return 0;
}

/* Copy the current labels of pid from discovery. */
static void pidinfo_refresh(agent_t *a, pidinfo_t *p) {
  const ember__target_t *t = ember__discovery_get(a->disc, (pid_t)p->pid);
  if (t == NULL || t->exited) {
    if (t == NULL) p->selected = false;
    return;
  }
  bool changed = p->worker == NULL || strcmp(p->worker, t->worker) != 0 ||
                 (p->version == NULL) != (t->version == NULL) ||
                 (p->version && strcmp(p->version, t->version) != 0) ||
                 (p->actor == NULL) != (t->actor == NULL) ||
                 (p->actor && strcmp(p->actor, t->actor) != 0);
  p->selected = t->selected;
  if (!changed) return;
  if (set_copy(&p->worker, t->worker) != 0 || set_copy(&p->version, t->version) != 0 ||
      set_copy(&p->actor, t->actor) != 0)
    p->selected = false; /* without labels it cannot be published */
  p->announced = false;
}

static pidinfo_t *pidinfo_get(agent_t *a, uint32_t pid) {
  pid_key_t key = {a, pid};
  uint64_t h = pid_hash_of(pid);
  int64_t found = ember__htab_find(&a->pid_index, h, pid_eq, &key);
  if (found >= 0) return &a->pids[found];
  if (a->npids == a->cappids) {
    size_t cap = a->cappids ? a->cappids * 2 : 256;
    pidinfo_t *np = ember_realloc(a->pids, cap * sizeof *np);
    if (np == NULL) return NULL;
    a->pids = np;
    a->cappids = cap;
  }
  pidinfo_t *p = &a->pids[a->npids];
  memset(p, 0, sizeof *p);
  p->pid = pid;
  if (ember__htab_insert(&a->pid_index, h, (uint32_t)a->npids, pid_rehash, &key) != 0) return NULL;
  a->npids++;
  pidinfo_refresh(a, p);
  return p;
}

/* Rebuild the pid index after entries were removed. */
static void pid_index_rebuild(agent_t *a) {
  ember__htab_free(&a->pid_index);
  ember__htab_init(&a->pid_index);
  for (size_t i = 0; i < a->npids; i++) {
    pid_key_t key = {a, a->pids[i].pid};
    if (ember__htab_insert(&a->pid_index, pid_hash_of(a->pids[i].pid), (uint32_t)i, pid_rehash,
                           &key) != 0)
      EMBER_ERROR("agent", "out of memory rebuilding the pid index");
  }
}

/* Re-read p's maps if the last read is older than its back-off; with
 * `pc_miss`, than the shorter back-off for a pc the process is executing
 * outside every mapping: then the snapshot is out of date (typically taken
 * while ld.so was still mapping libraries) and unwinding needs the right
 * one now, not in a second. */
static void refresh_maps_within(pidinfo_t *p, bool pc_miss) {
  int64_t now = ember_time_mono_ns();
  if (p->maps_every_ns == 0) p->maps_every_ns = MAPS_REFRESH_NS;
  if (p->maps_pc_every_ns == 0) p->maps_pc_every_ns = MAPS_PC_REFRESH_NS;
  int64_t every =
      pc_miss && p->maps_pc_every_ns < p->maps_every_ns ? p->maps_pc_every_ns : p->maps_every_ns;
  if (p->maps != NULL && now - p->maps_read_ns < every) return;
  p->maps_read_ns = now;
  ember__procmaps_t *m = NULL;
  if (ember__procmaps_read(NULL, (pid_t)p->pid, &m) != 0) return; /* gone: keep the old one */
  /* Misses that a re-read does not cure (garbage return addresses of a
   * frame-pointer walk through code without frame pointers) would re-read
   * the maps every second for ever: while the mappings stay the same, wait
   * twice as long each time, up to 8 s; any change starts over at 1 s.
   * (At 1000 Hz these re-reads were 30% of the agent's CPU.) */
  bool same = p->maps != NULL && ember__procmaps_count(m) == ember__procmaps_count(p->maps->maps);
  p->maps_every_ns = same && p->maps_every_ns < MAPS_REFRESH_MAX_NS ? p->maps_every_ns * 2
                     : same                                         ? MAPS_REFRESH_MAX_NS
                                                                    : MAPS_REFRESH_NS;
  /* Pc misses back off the same way, from 20 ms up to 1 s. */
  if (pc_miss)
    p->maps_pc_every_ns = !same                                   ? MAPS_PC_REFRESH_NS
                          : p->maps_pc_every_ns < MAPS_REFRESH_NS ? p->maps_pc_every_ns * 2
                                                                  : MAPS_REFRESH_NS;
  maps_ref_t *r = ember_malloc(sizeof *r);
  if (r == NULL) {
    ember__procmaps_free(m);
    return;
  }
  atomic_init(&r->refs, 1);
  r->maps = m;
  maps_ref_put(p->maps);
  p->maps = r;
}

static void refresh_maps(pidinfo_t *p) { refresh_maps_within(p, false); }

/* --- sampling (loop thread) --- */

/* A new stack: make sure we hold mappings that cover its user frames while
 * the process is alive to be read. */
static void ensure_maps(pidinfo_t *p, const ember__raw_sample_t *s) {
  bool covered = p->maps != NULL;
  for (uint32_t i = 0; covered && i < s->nips; i++) {
    if (s->ips[i] < EMBER__KERNEL_MIN && !ember__procmaps_covers(p->maps->maps, s->ips[i]))
      covered = false;
  }
  if (!covered) refresh_maps(p);
}

/* The whole stack of a sample taken with a user stack copy: the kernel's
 * chain (kernel frames only: the user part is not asked of the kernel),
 * then the user frames unwound from the registers and the copy with the
 * process's maps, which are refreshed first if they miss the sampled pc
 * (a library loaded since). Into a->stack_ips; returns the length. */
/* Unwind user frames of p from regs over a stack copy with its maps,
 * refreshed first if they miss the pc (a library loaded since): CPU
 * samples and heap records alike. a->unw must be set. */
static size_t unwind_user(agent_t *a, pidinfo_t *p, const ember__unwind_regs_t *regs,
                          const uint8_t *stack, size_t len, uint64_t *ips, size_t cap) {
  if (p->maps == NULL || !ember__procmaps_covers(p->maps->maps, regs->ip))
    refresh_maps_within(p, true);
  return ember__unwtab_unwind(a->unw, p->maps ? p->maps->maps : NULL, regs, stack, len, ips, cap);
}

static uint32_t whole_stack(agent_t *a, pidinfo_t *p, const ember__raw_sample_t *s,
                            const uint64_t **ips) {
  *ips = s->ips;
  ember__unwind_regs_t regs;
  if (a->unw == NULL || !ember__perf_user_regs(s, &regs.ip, &regs.sp, &regs.bp)) return s->nips;
  uint32_t nk = s->nips < EMBER__PERF_MAX_CHAIN ? s->nips : EMBER__PERF_MAX_CHAIN;
  memcpy(a->stack_ips, s->ips, nk * sizeof *s->ips);
  size_t nu = unwind_user(a, p, &regs, s->stack, (size_t)s->stack_size, a->stack_ips + nk,
                          EMBER__UNWIND_MAX_DEPTH);
  *ips = a->stack_ips;
  return nk + (uint32_t)nu;
}

static void on_sample(void *ctx, const ember__raw_sample_t *s) {
  agent_t *a = ctx;
  if (s->pid == 0) {
    ember_metric_add(a->m.idle, 1);
    return;
  }
  if (s->pid == (uint32_t)a->self) return;
  pidinfo_t *p = pidinfo_get(a, s->pid);
  if (p == NULL || !p->selected) return;
  ember__raw_sample_t whole = *s;
  whole.nips = whole_stack(a, p, s, &whole.ips);
  if (whole.nips == 0) return;
  bool is_new = false;
  if (ember__window_add(a->open, whole.pid, whole.ips, whole.nips, whole.period_ns, &is_new) != 0)
    return;
  if (is_new) ensure_maps(p, &whole);
}

/* A session's sample: the same unwinding (sessions read their rings on the
 * loop thread too). */
static uint32_t on_session_sample(void *ctx, const ember__raw_sample_t *s, const uint64_t **ips) {
  agent_t *a = ctx;
  pidinfo_t *p = pidinfo_get(a, s->pid);
  if (p == NULL) {
    *ips = s->ips;
    return s->nips;
  }
  return whole_stack(a, p, s, ips);
}

/* A session's new stack: the same capture of mappings as for windows. */
static void on_session_stack(void *ctx, const ember__raw_sample_t *s) {
  agent_t *a = ctx;
  pidinfo_t *p = pidinfo_get(a, s->pid);
  if (p != NULL) ensure_maps(p, s);
}

/* --- the in-use heap (loop thread) --- */

static void send_target(agent_t *a, const pidinfo_t *p, const ember__target_t *t);

typedef struct {
  uint32_t *pids;
  size_t n, cap;
} pid_list_t;

/* The tracker's unwinder: the same tables and maps as CPU samples. */
static size_t heap_unwind(void *ctx, uint32_t pid, const ember__unwind_regs_t *regs,
                          const uint8_t *stack, size_t len, uint64_t *ips, size_t cap) {
  agent_t *a = ctx;
  if (a->unw == NULL) return 0;
  pidinfo_t *p = pidinfo_get(a, pid);
  return p != NULL ? unwind_user(a, p, regs, stack, len, ips, cap) : 0;
}

/* How often a selected process without a followed heap is looked at
 * again (a library it has, a file another agent held). */
#define HEAP_RETRY_NS (60LL * 1000000000LL)
/* How often the rings of followed processes are read (the library's ring
 * holds 128 records: 1.28 GB/s of allocation at 512 KiB). */
#define HEAP_POLL_MS 100

/* Add a target's pid to the list; out of memory, it is left out (the
 * next scan tries again). */
static void pid_list_push(pid_list_t *l, const ember__target_t *t) {
  uint32_t *np = ember__grow_array(l->pids, &l->cap, l->n + 1, sizeof *np);
  if (np == NULL) return;
  l->pids = np;
  l->pids[l->n++] = (uint32_t)t->pid;
}

static void collect_selected(void *ctx, const ember__target_t *t) {
  if (t->selected && !t->exited) pid_list_push(ctx, t);
}

/* Follow the heap of every selected process that runs with the library. */
static void heap_scan(agent_t *a) {
  if (a->heap == NULL) return;
  pid_list_t l = {0};
  ember__discovery_each(a->disc, collect_selected, &l);
  int64_t now = ember_time_mono_ns();
  for (size_t i = 0; i < l.n; i++) {
    pidinfo_t *p = pidinfo_get(a, l.pids[i]);
    if (p == NULL || !p->selected) continue;
    if (p->heap && ember__heap_follows(a->heap, (pid_t)p->pid)) continue;
    if (p->heap_tried_ns != 0 && now - p->heap_tried_ns < HEAP_RETRY_NS) continue;
    p->heap_tried_ns = now;
    p->heap = false;
    if (!ember__heapshm_present((pid_t)p->pid)) continue;
    char err[512];
    int rc = ember__heap_attach(a->heap, (pid_t)p->pid, err, sizeof err);
    if (rc == 0 || rc == -EEXIST) {
      p->heap = true;
      if (p->maps == NULL) refresh_maps(p);
      if (rc == 0)
        EMBER_INFO("agent", "heap of pid %u (%s): followed", p->pid, p->worker ? p->worker : "?");
      if (p->announced)
        send_target(a, p, ember__discovery_get(a->disc, (pid_t)p->pid)); /* now with heap */
    } else {
      EMBER_WARN_LIMITED("agent", "heap of pid %u: %s", p->pid, err);
    }
  }
  ember_free(l.pids);
}

static void on_heap_timer(uv_timer_t *t) {
  agent_t *a = t->data;
  ember__heap_poll(a->heap, 0);
}

/* --- the close thread --- */

static const ember_value_type_t vt_cpu[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
static const ember_value_type_t vt_alloc[] = {EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES};
static const ember_value_type_t vt_inuse[] = {EMBER_VT_INUSE_OBJECTS, EMBER_VT_INUSE_BYTES};

static int publish_pid(agent_t *a, const job_t *j, const job_pid_t *jp,
                       const ember_value_type_t *vt, const ember__window_stack_t *stacks, size_t n,
                       ember_frame_t *frames, size_t cap, ember_buf_t *buf) {
  ember_profile_t *p = NULL;
  int rc = ember_profile_new(vt, 2, &p);
  if (rc != 0) return rc;
  ember_labels_t l = {jp->worker, jp->version, a->host_id, jp->actor, jp->pid};
  int64_t start, end;
  ember__window_bounds(j->window, &start, &end);
  rc = ember_profile_set_labels(p, &l);
  if (rc == 0) rc = ember_profile_set_window(p, start, end);
  uint32_t hz = j->session_id ? j->hz : a->hz;
  ember_profile_set_period(p, hz ? 1000000000LL / hz : 0);
  if (rc == 0) rc = ember_profile_set_origin(p, a->agent_id, a->seq, j->session_id);
  for (size_t i = 0; rc == 0 && i < n; i++) {
    size_t nf = 0;
    if (stacks[i].nips == 1 && stacks[i].ips[0] == EMBER__HEAP_UNKNOWN_IP) {
      /* Live heap whose allocating stack was never read. */
      frames[0] = (ember_frame_t){.function = "[unknown]"};
      nf = 1;
    } else {
      rc = ember__symbolize(a->sym, (pid_t)jp->pid, jp->maps ? jp->maps->maps : NULL, stacks[i].ips,
                            stacks[i].nips, frames, cap, &nf);
    }
    if (rc != 0 || nf == 0) continue;
    int64_t v[2] = {stacks[i].samples, stacks[i].cpu_ns};
    rc = ember_profile_add(p, frames, nf, v);
  }
  if (rc == 0) {
    ember_buf_reset(buf);
    rc = a->wire_version == 1 ? ember_codec_encode(p, buf) : ember_codec_encode_v2(p, buf);
  }
  if (rc == 0) {
    /* The seq is spent only on an encoded message, so a consumer that sees a
     * gap knows a window was lost, not skipped. */
    a->seq++;
    rc = ember__publisher_publish(a->pub, jp->worker, buf->data, buf->len);
  }
  ember_profile_free(p);
  return rc;
}

/* Publish window `w` of job j, one profile of types `vt` per pid. The
 * first failure is kept in *session_rc and `why`. */
static void publish_window(agent_t *a, job_t *j, ember__window_t *w, const ember_value_type_t *vt,
                           ember_frame_t *frames, ember_buf_t *buf, int *session_rc, char *why,
                           size_t whysz) {
  size_t n = 0;
  const ember__window_stack_t *stacks = ember__window_sorted(w, &n);
  if (n > 0 && stacks == NULL) {
    if (*session_rc == 0) {
      *session_rc = -ENOMEM;
      snprintf(why, whysz, "out of memory symbolizing the result");
    }
    return;
  }
  size_t i = 0;
  while (i < n) {
    size_t e = i;
    while (e < n && stacks[e].pid == stacks[i].pid) e++;
    const job_pid_t *jp = NULL;
    for (size_t k = 0; k < j->npids; k++) {
      if (j->pids[k].pid == stacks[i].pid) jp = &j->pids[k];
    }
    if (jp != NULL && jp->worker != NULL) {
      int rc = publish_pid(a, j, jp, vt, stacks + i, e - i, frames, EMBER_MAX_STACK_DEPTH, buf);
      /* The profile copied the frames' strings: modules evicted while
       * symbolizing this pid can go now, not at the end of the window
       * (a window of many processes could otherwise hold every module it
       * evicted, far past symbol_cache_memory). */
      ember__symbolizer_forget(a->sym, 0);
      if (rc == 0) {
        atomic_fetch_add(&a->profiles_sent, 1);
      } else {
        atomic_fetch_add(&a->profile_errors, 1);
        EMBER_WARN("agent", "%s of pid %u (%s) not published: %s",
                   j->session_id ? "session result" : "window", jp->pid, jp->worker,
                   ember_strerror(rc));
        if (*session_rc == 0) {
          *session_rc = rc;
          snprintf(why, whysz, "the profile of pid %u could not be published: %s", jp->pid,
                   ember_strerror(rc));
        }
      }
    }
    i = e;
  }
}

static void process_job(agent_t *a, job_t *j) {
  ember_frame_t *frames = ember_malloc(EMBER_MAX_STACK_DEPTH * sizeof *frames);
  ember_buf_t buf;
  ember_buf_init(&buf, 64u << 20);
  int session_rc = 0;
  char why[256] = "";
  if (frames == NULL) {
    session_rc = -ENOMEM;
    snprintf(why, sizeof why, "out of memory symbolizing the result");
  } else {
    publish_window(a, j, j->window, j->memory ? vt_alloc : vt_cpu, frames, &buf, &session_rc, why,
                   sizeof why);
    if (j->heap_alloc != NULL)
      publish_window(a, j, j->heap_alloc, vt_alloc, frames, &buf, &session_rc, why, sizeof why);
    if (j->heap_inuse != NULL)
      publish_window(a, j, j->heap_inuse, vt_inuse, frames, &buf, &session_rc, why, sizeof why);
  }
  for (size_t k = 0; k < j->nforget; k++) ember__symbolizer_forget(a->sym, (pid_t)j->forget[k]);
  /* Pid 0 has no state: this only releases modules evicted from the cache
   * during this window (their strings were kept alive until now). */
  ember__symbolizer_forget(a->sym, 0);
  ember__symbolizer_stats_t st;
  ember__symbolizer_stats(a->sym, &st);
  atomic_store(&a->sym_hits, st.module_hits);
  atomic_store(&a->sym_loads, st.module_loads);
  atomic_store(&a->unresolved, st.unresolved);
  atomic_store(&a->debug_files, st.debug_files);
  atomic_store(&a->minidebug, st.minidebug);
  atomic_store(&a->debug_refused, st.debug_refused);
  atomic_store(&a->sym_bytes, st.bytes);
  atomic_store(&a->debug_bytes, st.debug_bytes);
  atomic_store(&a->sym_evictions, st.evictions);
  ember__jsmaps_stats_t js;
  ember__symbolizer_jsmaps_stats(a->sym, &js);
  ember__jsmaps_update_metrics(&a->jsm, &js);
  /* What the window's symbolization freed (evicted modules, libdw's line
   * tables, the frames) sits in malloc's free lists, in this thread's
   * arena: give whole free pages back to the kernel. A few ms per
   * window; see docs/internals/agent.md, "Memory". */
  malloc_trim(0);
  ember_buf_free(&buf);
  ember_free(frames);
  /* The profiles are with the publisher (queued or spooled): only now is
   * the session done. */
  if (j->session_id != NULL)
    ember__sessions_published(a->sessions, j->session_id, j->ntargets, j->hz, j->samples,
                              session_rc, why);
}

static void job_free(job_t *j) {
  if (j == NULL) return;
  for (size_t k = 0; k < j->npids; k++) {
    ember_free(j->pids[k].worker);
    ember_free(j->pids[k].version);
    ember_free(j->pids[k].actor);
    maps_ref_put(j->pids[k].maps);
  }
  ember_free(j->pids);
  ember_free(j->forget);
  ember_free(j->session_id);
  ember__window_free(j->window);
  ember__window_free(j->heap_alloc);
  ember__window_free(j->heap_inuse);
  ember_free(j);
}

static void closer_main(void *arg) {
  agent_t *a = arg;
  for (;;) {
    uv_mutex_lock(&a->mu);
    while (a->head == NULL && !a->closer_exit) uv_cond_wait(&a->cv, &a->mu);
    job_t *j = a->head;
    if (j == NULL) {
      uv_mutex_unlock(&a->mu);
      return;
    }
    a->head = j->next;
    if (a->head == NULL) a->tail = NULL;
    uv_mutex_unlock(&a->mu);
    process_job(a, j);
    job_free(j);
    uv_mutex_lock(&a->mu);
    a->pending--;
    uv_cond_broadcast(&a->cv);
    uv_mutex_unlock(&a->mu);
  }
}

/* --- closing a window (loop thread) --- */

/* One instant on both clocks: the monotonic one perf stamps samples with
 * and the Unix one labels are in. The monotonic reads bracket the Unix
 * one, so the pair is off by half a clock read at most. */
static void read_clocks(int64_t *mono_ns, int64_t *real_ns) {
  int64_t m0 = ember_time_mono_ns();
  *real_ns = ember_time_now_ns();
  int64_t m1 = ember_time_mono_ns();
  *mono_ns = m0 + (m1 - m0) / 2;
}

static void send_target(agent_t *a, const pidinfo_t *p, const ember__target_t *t) {
  char key[300];
  snprintf(key, sizeof key, "%s/%u", a->host_id, p->pid);
  ember_target_record_t r = {.agent_id = a->agent_id,
                             .host = a->host_id,
                             .worker = p->worker,
                             .version = p->version,
                             .actor = p->actor,
                             .pid = p->pid,
                             .seen_ns = ember_time_now_ns(),
                             .heap = p->heap};
  char comm[sizeof t->comm + 1] = "";
  if (t != NULL) {
    memcpy(comm, t->comm, sizeof t->comm);
    r.comm = comm;
    r.exe = t->exe;
    r.build_id = (char *)(uintptr_t)t->build_id;
    r.start_ticks = t->start_ticks;
  }
  ember_buf_t b;
  ember_buf_init(&b, 1u << 16);
  if (ember_codec_encode_target(&r, &b) == 0) ember__publisher_target(a->pub, key, b.data, b.len);
  ember_buf_free(&b);
}

static void send_tombstone(agent_t *a, uint32_t pid) {
  char key[300];
  snprintf(key, sizeof key, "%s/%u", a->host_id, pid);
  ember__publisher_target(a->pub, key, NULL, 0);
}

static void enqueue_locked(agent_t *a, job_t *j) {
  if (a->tail)
    a->tail->next = j;
  else
    a->head = j;
  a->tail = j;
  a->pending++;
  uv_cond_signal(&a->cv);
}

/* Distinct pids of a window (0 for NULL). */
static size_t window_pids(ember__window_t *w) {
  size_t n = 0, distinct = 0;
  const ember__window_stack_t *stacks = w != NULL ? ember__window_sorted(w, &n) : NULL;
  for (size_t i = 0; stacks != NULL && i < n; i++) {
    if (i == 0 || stacks[i].pid != stacks[i - 1].pid) distinct++;
  }
  return distinct;
}

/* Snapshot into j the labels and maps of every pid of window w that j
 * does not hold yet (room was made by the caller). */
static void job_add_pids(agent_t *a, job_t *j, ember__window_t *w) {
  size_t n = 0;
  const ember__window_stack_t *stacks = w != NULL ? ember__window_sorted(w, &n) : NULL;
  for (size_t i = 0; stacks != NULL && i < n; i++) {
    if (i > 0 && stacks[i].pid == stacks[i - 1].pid) continue;
    bool held = false;
    for (size_t k = 0; k < j->npids && !held; k++) held = j->pids[k].pid == stacks[i].pid;
    if (held) continue;
    pidinfo_t *p = pidinfo_get(a, stacks[i].pid);
    if (p == NULL) continue;
    pidinfo_refresh(a, p);
    if (p->maps == NULL) refresh_maps(p);
    job_pid_t *jp = &j->pids[j->npids++];
    jp->pid = p->pid;
    jp->maps = maps_ref_get(p->maps);
    if (set_copy(&jp->worker, p->worker) != 0 || set_copy(&jp->version, p->version) != 0 ||
        set_copy(&jp->actor, p->actor) != 0) {
      ember_free(jp->worker);
      jp->worker = NULL; /* skipped by the close thread */
    }
    if (!p->announced && p->selected) {
      send_target(a, p, ember__discovery_get(a->disc, (pid_t)p->pid));
      p->announced = true;
    }
  }
}

/* The heap's part of a cut: the allocations of the window that ends, and
 * a snapshot of what is live now, both labelled with the CPU window's
 * bounds. Out of memory, the heap profiles of this window are lost (the
 * allocations keep going to the old window, published next time). */
static void heap_cut(agent_t *a, job_t *j, int64_t start, int64_t end) {
  if (a->heap == NULL) return;
  ember__window_t *fresh = NULL, *inuse = NULL;
  if (ember__window_new(&fresh) != 0 || ember__window_new(&inuse) != 0) {
    ember__window_free(fresh);
    EMBER_ERROR_LIMITED("agent", "out of memory: no heap profiles for this window");
    return;
  }
  ember__window_set_max_stacks(fresh, a->max_stacks);
  ember__window_set_max_stacks(inuse, a->max_stacks);
  /* The snapshot drains the rings first, into the window that ends. */
  if (ember__heap_snapshot(a->heap, inuse, NULL, 0, NULL) != 0)
    EMBER_WARN_LIMITED("agent", "out of memory: part of the in-use heap missing from a window");
  j->heap_alloc = a->heap_open;
  j->heap_inuse = inuse;
  a->heap_open = fresh;
  ember__heap_set_window(a->heap, fresh);
  ember__window_set_bounds(j->heap_alloc, start, end);
  ember__window_set_bounds(inuse, start, end);
}

/* Cut the open window now and hand it to the close thread. `deadline`:
 * the window timer's cut, which happens only once the planned deadline is
 * reached; otherwise (SIGTERM) the window is cut wherever it is. The rings
 * are drained first and the cut time read after, so every sample in the
 * window was taken before its end. Its label is [the previous cut, this
 * cut] (window.h), never empty nor reversed, so the store accepts even the
 * short last window of a stop. A window that holds no sample publishes
 * nothing: the close thread only forgets the pids that exited in it. */
static bool close_window(agent_t *a, bool deadline) {
  ember__window_t *fresh = NULL;
  if (ember__window_new(&fresh) != 0) {
    /* The clock is not cut either: the window stays open, with its start. */
    EMBER_ERROR_LIMITED("agent", "out of memory: window kept open");
    return false;
  }
  ember__sampler_drain(a->sampler);
  int64_t mono, real, start, end;
  read_clocks(&mono, &real);
  if (deadline) {
    int64_t wait;
    bool cut = ember__window_clock_tick(&a->wclock, mono, real, &start, &end, &wait);
    assert(cut); /* the caller saw the deadline pass before the drain */
    (void)cut;
  } else {
    ember__window_clock_cut(&a->wclock, mono, real, &start, &end);
  }
  ember__window_t *w = a->open;
  ember__window_set_max_stacks(fresh, a->max_stacks);
  ember__window_set_bounds(w, start, end);
  a->open = fresh;
  ember_metric_add(a->m.stacks_dropped, (double)ember__window_dropped(w));

  job_t *j = ember_calloc(1, sizeof *j);
  if (j == NULL) {
    ember__window_free(w);
    atomic_fetch_add(&a->windows_dropped, 1);
    return true; /* cut, and the window dropped (counted) */
  }
  j->window = w;
  heap_cut(a, j, start, end);
  /* Snapshot the labels and maps of every pid in the windows. */
  ember__window_t *ws[3] = {w, j->heap_alloc, j->heap_inuse};
  size_t distinct = 0;
  for (int k = 0; k < 3; k++) distinct += window_pids(ws[k]);
  j->pids = ember_calloc(distinct ? distinct : 1, sizeof *j->pids);
  j->forget = ember_calloc(a->npids ? a->npids : 1, sizeof *j->forget);
  if (j->pids == NULL || j->forget == NULL) {
    job_free(j);
    atomic_fetch_add(&a->windows_dropped, 1);
    return true; /* cut, and the window dropped (counted) */
  }
  for (int k = 0; k < 3; k++) job_add_pids(a, j, ws[k]);
  /* Pids that have exited: their last window is in this job; forget them. */
  size_t keep = 0;
  bool removed = false;
  for (size_t i = 0; i < a->npids; i++) {
    pidinfo_t *p = &a->pids[i];
    const ember__target_t *t = ember__discovery_get(a->disc, (pid_t)p->pid);
    if (t == NULL || t->exited) {
      if (p->announced) send_tombstone(a, p->pid);
      if (p->heap) ember__heap_detach(a->heap, (pid_t)p->pid);
      j->forget[j->nforget++] = p->pid;
      pidinfo_clear(p);
      removed = true;
      continue;
    }
    if (keep != i) a->pids[keep] = *p;
    keep++;
  }
  a->npids = keep;
  if (removed) pid_index_rebuild(a);
  ember__discovery_reap(a->disc, NULL, NULL);

  uv_mutex_lock(&a->mu);
  /* The stop's cut is the last window and always queued: the sessions
   * stopped just before it may fill the queue, and the close thread
   * drains all of it before exiting. */
  if (deadline && a->pending >= MAX_PENDING_WINDOWS) {
    uv_mutex_unlock(&a->mu);
    EMBER_WARN("agent", "close thread is %zu windows behind: dropping the window at %" PRId64,
               a->pending, start);
    atomic_fetch_add(&a->windows_dropped, 1);
    job_free(j);
    return true; /* cut, and the window dropped (counted) */
  }
  enqueue_locked(a, j);
  uv_mutex_unlock(&a->mu);
  ember_metric_add(a->m.windows, 1);
  return true;
}

/* Hand an ended session to the close thread, to be symbolized and
 * published like a window. Its labels were copied when it started (a
 * target may have exited since); its maps are what the loop captured. */
static int on_session_finish(void *ctx, ember__session_result_t *r) {
  agent_t *a = ctx;
  job_t *j = ember_calloc(1, sizeof *j);
  if (j == NULL) return -ENOMEM;
  j->pids = ember_calloc(r->ntargets ? r->ntargets : 1, sizeof *j->pids);
  if (j->pids == NULL) {
    ember_free(j);
    return -ENOMEM;
  }
  for (size_t i = 0; i < r->ntargets; i++) {
    ember__session_target_t *t = &r->targets[i];
    job_pid_t *jp = &j->pids[j->npids++];
    jp->pid = t->pid;
    jp->worker = t->worker; /* moved */
    jp->version = t->version;
    jp->actor = t->actor;
    t->worker = t->version = t->actor = NULL;
    pidinfo_t *p = pidinfo_get(a, t->pid);
    if (p != NULL) {
      if (p->maps == NULL) refresh_maps(p);
      jp->maps = maps_ref_get(p->maps);
    }
  }
  j->window = r->window;
  j->session_id = r->session_id;
  j->hz = r->hz;
  j->samples = r->samples;
  j->memory = r->memory;
  j->ntargets = (uint32_t)r->ntargets;
  r->window = NULL;
  r->session_id = NULL;
  ember__session_result_clear(r);
  /* Not bound by MAX_PENDING_WINDOWS: sessions are few (session.max_concurrent)
   * and someone is waiting for this one. */
  uv_mutex_lock(&a->mu);
  enqueue_locked(a, j);
  uv_mutex_unlock(&a->mu);
  return 0;
}

/* Re-arm the window timer for the open window's deadline. libuv counts a
 * timeout in whole milliseconds from its cached loop time (a coarse clock
 * that may lag the precise one by a tick), so the timer can still fire a
 * little early: on_window_timer then waits out the rest. */
static void on_window_timer(uv_timer_t *t);

static void arm_window_timer(agent_t *a) {
  uv_update_time(&a->loop);
  int64_t wait = a->wclock.deadline_mono - ember_time_mono_ns();
  uint64_t ms = wait > 0 ? (uint64_t)((wait + 999999) / 1000000) : 0;
  uv_timer_start(&a->window_timer, on_window_timer, ms, 0);
}

static void on_window_timer(uv_timer_t *t) {
  agent_t *a = t->data;
  if (ember_time_mono_ns() >= a->wclock.deadline_mono && !close_window(a, true)) {
    /* Out of memory: the deadline stands, so try again shortly rather
     * than at once (the timer would spin). */
    uv_timer_start(&a->window_timer, on_window_timer, 100, 0);
    return;
  }
  arm_window_timer(a);
}

static void collect_actor(void *ctx, const ember__target_t *t) {
  if (t->selected && !t->exited && t->actor != NULL) pid_list_push(ctx, t);
}

/* Actors are announced on ember.targets as soon as they are found, not when
 * they are first sampled as other targets are: a named actor is what a
 * session asks for by name, and an idle one (no sample at 19 Hz for a
 * while) must still be reachable for the traffic it is about to get.
 * Plain workers stay sample-driven, so a broad selector does not put every
 * sleeping process of a host into the registry. */
static void announce_actors(agent_t *a) {
  pid_list_t l = {0};
  /* Collected first: pidinfo_get may read /proc through discovery, which
   * must not change under ember__discovery_each. */
  ember__discovery_each(a->disc, collect_actor, &l);
  for (size_t i = 0; i < l.n; i++) {
    pidinfo_t *p = pidinfo_get(a, l.pids[i]);
    if (p == NULL || p->announced || !p->selected) continue;
    send_target(a, p, ember__discovery_get(a->disc, (pid_t)p->pid));
    p->announced = true;
  }
  ember_free(l.pids);
}

static void on_scan_timer(uv_timer_t *t) {
  agent_t *a = t->data;
  ember__discovery_scan(a->disc);
  /* Labels and selection follow discovery: a process first sampled
   * before its exec (a shell's child, while it was still the shell) was
   * not selected then and has no samples to be refreshed by later. */
  for (size_t i = 0; i < a->npids; i++) pidinfo_refresh(a, &a->pids[i]);
  announce_actors(a);
  heap_scan(a);
}

static void on_netlink(uv_poll_t *h, int status, int events) {
  agent_t *a = h->data;
  (void)events;
  if (status < 0 || ember__discovery_read_events(a->disc) < 0) {
    /* A broken socket leaves the periodic scan in charge. */
    uv_poll_stop(h);
    EMBER_WARN("agent", "process connector failed: relying on /proc scans");
  }
}

static void on_targets_timer(uv_timer_t *t) {
  agent_t *a = t->data;
  for (size_t i = 0; i < a->npids; i++) {
    if (a->pids[i].announced)
      send_target(a, &a->pids[i], ember__discovery_get(a->disc, (pid_t)a->pids[i].pid));
  }
}

/* Control files of preloaded processes that died without their exit
 * handlers (SIGKILL, _exit) stay in /dev/shm (4 KiB each): removed at
 * start and hourly. */
#define SWEEP_INTERVAL_MS (3600u * 1000u)
static void on_sweep_timer(uv_timer_t *t) {
  (void)t;
  int n = ember__alloc_preload_sweep();
  if (n > 0) EMBER_INFO("agent", "removed %d allocation-sampler file(s) of ended processes", n);
  if (n < 0 && n != -ENOENT)
    EMBER_WARN("agent", "cannot sweep /dev/shm for allocation-sampler files: %s",
               ember_strerror(n));
}

static void on_metrics_timer(uv_timer_t *t) {
  agent_t *a = t->data;
  ember__sampler_stats_t ss;
  ember__sampler_stats(a->sampler, &ss);
  ember_metric_set(a->m.samples, (double)ss.samples);
  ember_metric_set(a->m.lost, (double)ss.lost);
  ember_metric_set(a->m.throttles, (double)ss.throttles);
  ember__publisher_stats_t ps;
  ember__publisher_stats(a->pub, &ps);
  ember_metric_set(a->m.profiles, (double)ps.published);
  ember_metric_set(a->m.queue_bytes, (double)ps.queue_bytes);
  ember_metric_set(a->m.spool_bytes, (double)ps.spool_bytes);
  ember_metric_set(a->m.spool_files, (double)ps.spool_files);
  ember_metric_set(a->m.spooled, (double)ps.spooled);
  ember_metric_set(a->m.dropped, (double)ps.dropped);
  ember_metric_set(a->m.events_sent, (double)ps.events_sent);
  ember_metric_set(a->m.events_failed, (double)ps.events_failed);
  ember_metric_set(a->m.profile_errors, (double)atomic_load(&a->profile_errors));
  ember_metric_set(a->m.windows_dropped, (double)atomic_load(&a->windows_dropped));
  ember_metric_set(a->m.sym_hits, (double)atomic_load(&a->sym_hits));
  ember_metric_set(a->m.sym_loads, (double)atomic_load(&a->sym_loads));
  ember_metric_set(a->m.unresolved, (double)atomic_load(&a->unresolved));
  ember_metric_set(a->m.debug_files, (double)atomic_load(&a->debug_files));
  ember_metric_set(a->m.minidebug, (double)atomic_load(&a->minidebug));
  ember_metric_set(a->m.debug_refused, (double)atomic_load(&a->debug_refused));
  ember_metric_set(a->m.sym_bytes, (double)atomic_load(&a->sym_bytes));
  ember_metric_set(a->m.debug_bytes, (double)atomic_load(&a->debug_bytes));
  ember_metric_set(a->m.sym_evictions, (double)atomic_load(&a->sym_evictions));
  ember__discovery_stats_t ds;
  ember__discovery_stats(a->disc, &ds);
  ember_metric_set(a->m.targets, (double)ds.selected);
  ember_metric_set(a->m.unreadable, (double)ds.unreadable);
  ember_metric_set(a->m.cpu, ember_self_cpu_seconds());
  ember_metric_set(a->m.rss, ember_self_rss_bytes());
  ember__safe_update_metrics(&a->sf, ember__alloc_preload_faults());
  if (a->heap != NULL) {
    ember__heap_stats_t hs;
    ember__heap_stats(a->heap, &hs);
    ember_metric_set(a->m.heap_procs, (double)hs.processes);
    ember_metric_set(a->m.heap_records, (double)hs.records);
    ember_metric_set(a->m.heap_lost, (double)hs.lost);
    ember_metric_set(a->m.heap_bad, (double)hs.bad);
    ember_metric_set(a->m.heap_untracked, (double)hs.live_dropped);
    ember_metric_set(a->m.heap_unknown, (double)hs.unknown);
    ember_metric_set(a->m.heap_in_flight, (double)hs.in_flight);
    ember_metric_set(a->m.heap_stacks, (double)hs.stacks);
    ember_metric_set(a->m.heap_cfi, (double)hs.cfi);
  }
  if (a->unw != NULL) {
    ember__unwtab_stats_t us;
    ember__unwtab_stats(a->unw, &us);
    uint64_t all = 0;
    for (int r = 0; r < EMBER__UNWIND_NRESULTS; r++) {
      ember_metric_set(a->m.unw_results[r], (double)us.results[r]);
      all += us.results[r];
    }
    ember_metric_set(a->m.unw_cfi, (double)all);
    ember_metric_set(a->m.unw_fp_steps, (double)us.fp_steps);
    ember_metric_set(a->m.unw_sig_steps, (double)us.sig_steps);
    ember_metric_set(a->m.unw_tables, (double)us.tables);
    ember_metric_set(a->m.unw_bytes, (double)us.bytes);
    ember_metric_set(a->m.unw_builds, (double)us.builds);
    ember_metric_set(a->m.unw_build_s, (double)us.build_ns / 1e9);
    ember_metric_set(a->m.unw_no_cfi, (double)us.no_cfi);
    ember_metric_set(a->m.unw_evictions, (double)us.evictions);
  }
}

static void on_signal(uv_signal_t *h, int signum) {
  agent_t *a = h->data;
  if (a->stopping) return;
  a->stopping = true;
  EMBER_INFO("agent", "%s: closing the open window and stopping",
             signum == SIGTERM ? "SIGTERM" : "SIGINT");
  ember__sessions_stop_all(a->sessions);
  close_window(a, false);
  uv_stop(&a->loop);
}

/* --- set-up and tear-down --- */

static void register_metrics(agent_t *a) {
  ember_metrics_t *m = a->metrics;
  a->m.samples =
      ember_metrics_counter(m, "ember_agent_samples_total", "Samples read from perf rings");
  a->m.lost = ember_metrics_counter(m, "ember_agent_lost_samples_total",
                                    "Samples the kernel dropped (PERF_RECORD_LOST)");
  a->m.throttles = ember_metrics_counter(m, "ember_agent_throttles_total",
                                         "Times the kernel throttled sampling");
  a->m.idle = ember_metrics_counter(m, "ember_agent_idle_samples_total", "Samples of idle CPUs");
  a->m.windows = ember_metrics_counter(m, "ember_agent_windows_closed_total", "Windows closed");
  a->m.windows_dropped = ember_metrics_counter(m, "ember_agent_windows_dropped_total",
                                               "Windows dropped because the close thread lagged");
  a->m.profiles = ember_metrics_counter(m, "ember_agent_profiles_published_total",
                                        "Per-target window profiles acknowledged by Kafka");
  a->m.profile_errors = ember_metrics_counter(m, "ember_agent_profile_errors_total",
                                              "Per-target profiles that could not be built");
  a->m.queue_bytes =
      ember_metrics_gauge(m, "ember_agent_queue_bytes", "Bytes waiting in memory for Kafka");
  a->m.spool_bytes =
      ember_metrics_gauge(m, "ember_agent_spool_bytes", "Bytes waiting in the disk spool");
  a->m.spool_files =
      ember_metrics_gauge(m, "ember_agent_spool_files", "Messages waiting in the disk spool");
  a->m.spooled =
      ember_metrics_counter(m, "ember_agent_spooled_total", "Messages written to the spool");
  a->m.dropped = ember_metrics_counter(m, "ember_agent_dropped_total",
                                       "Messages lost past the queue and spool bounds");
  a->m.events_sent = ember_metrics_counter(m, "ember_agent_session_events_sent_total",
                                           "Session events (ember.events) Kafka acknowledged");
  a->m.events_failed =
      ember_metrics_counter(m, "ember_agent_session_events_failed_total",
                            "Session events Kafka refused or never acknowledged (not spooled)");
  a->m.sym_hits = ember_metrics_counter(m, "ember_agent_symbol_cache_hits_total",
                                        "Addresses resolved from a cached module");
  a->m.sym_loads = ember_metrics_counter(m, "ember_agent_symbol_modules_loaded_total",
                                         "ELF modules parsed into the symbol cache");
  a->m.unresolved = ember_metrics_counter(m, "ember_agent_unresolved_frames_total",
                                          "Frames left as module+offset");
  a->m.debug_files = ember_metrics_counter(m, "ember_agent_debug_files_total",
                                           "Separate debug files found (build-id, debuglink)");
  a->m.minidebug = ember_metrics_counter(m, "ember_agent_minidebug_total",
                                         "MiniDebugInfo (.gnu_debugdata) images read");
  a->m.debug_refused = ember_metrics_counter(
      m, "ember_agent_debug_refused_total",
      "Debug file candidates refused: wrong build-id or CRC, unsafe, corrupt");
  a->m.sym_bytes = ember_metrics_gauge(
      m, "ember_agent_symbol_cache_bytes",
      "Memory of the symbol cache's modules (symbols, DWARF; bounded by symbol_cache_memory)");
  a->m.debug_bytes = ember_metrics_gauge(m, "ember_agent_debug_bytes",
                                         "Of the symbol cache, the DWARF kept for lines (estimated "
                                         "for libdw's own allocations)");
  a->m.sym_evictions =
      ember_metrics_counter(m, "ember_agent_symbol_cache_evictions_total",
                            "Modules evicted from the symbol cache (symbol_cache_memory)");
  a->m.targets = ember_metrics_gauge(m, "ember_agent_targets", "Processes selected as targets");
  a->m.unreadable = ember_metrics_counter(m, "ember_agent_proc_unreadable_total",
                                          "Processes whose /proc entries could not be read");
  a->m.stacks_dropped = ember_metrics_counter(m, "ember_agent_window_stacks_dropped_total",
                                              "Samples dropped past max_stacks_per_window");
  a->m.heap_procs = ember_metrics_gauge(m, "ember_agent_heap_processes",
                                        "Processes whose in-use heap is followed");
  a->m.heap_records = ember_metrics_counter(m, "ember_agent_heap_records_total",
                                            "Sampled allocations read from the libraries' rings");
  a->m.heap_lost =
      ember_metrics_counter(m, "ember_agent_heap_records_lost_total",
                            "Sampled allocations whose record was lost (ring full, writer stuck)");
  a->m.heap_bad = ember_metrics_counter(m, "ember_agent_heap_records_refused_total",
                                        "Records and live entries refused as malformed");
  a->m.heap_untracked = ember_metrics_counter(
      m, "ember_agent_heap_untracked_total",
      "Sampled allocations the libraries could not track as live (table full)");
  a->m.heap_unknown =
      ember_metrics_gauge(m, "ember_agent_heap_unknown_stacks",
                          "Live sampled allocations of unknown stack at the last snapshot");
  a->m.heap_in_flight = ember_metrics_gauge(
      m, "ember_agent_heap_in_flight",
      "Live sampled allocations whose record was still being written at the last snapshot");
  a->m.heap_stacks = ember_metrics_gauge(m, "ember_agent_heap_stacks",
                                         "Distinct allocation stacks held for live allocations");
  a->m.heap_cfi = ember_metrics_counter(m, "ember_agent_heap_cfi_stacks_total",
                                        "Allocation stacks unwound from CFI");
  a->m.cpu = ember_metrics_gauge(m, "ember_agent_cpu_seconds", "The agent's own CPU seconds");
  a->m.rss = ember_metrics_gauge(m, "ember_agent_rss_bytes", "The agent's resident memory");
  /* One family, registered in a row (metrics.h). */
  for (int r = 0; r < EMBER__UNWIND_NRESULTS; r++) {
    char name[128];
    snprintf(name, sizeof name, "ember_agent_unwind_stacks_total{result=\"%s\"}",
             ember__unwind_result_name((ember__unwind_result_t)r));
    a->m.unw_results[r] = ember_metrics_counter(
        m, name, "User stacks unwound from CFI, by how the walk ended (complete, truncated...)");
  }
  a->m.unw_cfi = ember_metrics_counter(m, "ember_agent_unwind_cfi_total",
                                       "User stacks unwound from CFI (all results)");
  a->m.unw_fp_steps =
      ember_metrics_counter(m, "ember_agent_unwind_fp_steps_total",
                            "Frames found by the frame-pointer fallback (JIT code)");
  a->m.unw_sig_steps = ember_metrics_counter(m, "ember_agent_unwind_signal_frames_total",
                                             "Signal frames unwound through");
  a->m.unw_tables = ember_metrics_gauge(m, "ember_agent_unwind_tables", "Unwind tables held");
  a->m.unw_bytes =
      ember_metrics_gauge(m, "ember_agent_unwind_table_bytes", "Memory of the unwind tables held");
  a->m.unw_builds = ember_metrics_counter(m, "ember_agent_unwind_tables_built_total",
                                          "Unwind tables built from .eh_frame/.debug_frame");
  a->m.unw_build_s = ember_metrics_counter(m, "ember_agent_unwind_table_build_seconds_total",
                                           "Time spent building unwind tables");
  a->m.unw_no_cfi = ember_metrics_counter(m, "ember_agent_unwind_files_without_cfi_total",
                                          "Mapped files with no usable CFI, or unreadable");
  a->m.unw_evictions = ember_metrics_counter(m, "ember_agent_unwind_table_evictions_total",
                                             "Unwind tables dropped for unwind_table_memory");
  ember__sessions_register_metrics(m, &a->sm);
  ember__safe_register_metrics(m, &a->sf);
  ember__jsmaps_register_metrics(m, &a->jsm);
}

static int read_config(agent_t *a, const ember_config_t *cfg, char *err, size_t errsz) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  snprintf(a->host_id, sizeof a->host_id, "%s", ember_config_get_str(cfg, "host_id", host));
  /* A per-run agent id keeps (agent_id, seq) unique across restarts
   * without persisting the sequence. */
  snprintf(a->agent_id, sizeof a->agent_id, "%s:%lld", a->host_id,
           (long long)(ember_time_now_ns() / 1000000));
  uint64_t hz = 19, pages = 0, max_stacks = 200000;
  int64_t win = 10000000000LL, refresh = 30000000000LL;
  int rc = ember_config_get_u64(cfg, "continuous_hz", 19, 1, 100000, &hz, err, errsz);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "window", 10000000000LL, 1000000000LL, 3600000000000LL,
                                      &win, err, errsz);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "targets_refresh", 30000000000LL, 1000000000LL,
                                      86400000000000LL, &refresh, err, errsz);
  /* 0: sized by the sampler (8 pages, more with stack copies). */
  if (rc == 0) rc = ember_config_get_u64(cfg, "ring_pages", 0, 0, 4096, &pages, err, errsz);
  const char *uw = ember_config_get_str(cfg, "unwind", "auto");
  if (rc == 0 && ember__unwind_mode_parse(uw, &a->unwind) != 0) {
    snprintf(err, errsz, "unwind: '%s' is not auto, fp or dwarf", uw);
    rc = EMBER_ECONFIG;
  }
  uint64_t stack_bytes = EMBER__DEFAULT_STACK_BYTES, table_mem = 64u << 20;
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "unwind_stack_bytes", EMBER__DEFAULT_STACK_BYTES, 512,
                              EMBER__PERF_STACK_MAX, &stack_bytes, err, errsz);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "unwind_table_memory", 64u << 20, 1u << 20, 1ull << 34,
                              &table_mem, err, errsz);
  a->stack_bytes = a->unwind == EMBER__UNWIND_FP ? 0 : (uint32_t)stack_bytes & ~7u;
  a->unwind_table_bytes = table_mem;
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "max_stacks_per_window", 200000, 1, 50000000, &max_stacks, err,
                              errsz);
  /* Version 2 unless told otherwise: version 1 is for collectors older
   * than it (agents upgrade one host at a time, collectors first). */
  uint64_t wire = 2;
  if (rc == 0) rc = ember_config_get_u64(cfg, "wire_version", 2, 1, 2, &wire, err, errsz);
  a->wire_version = (uint32_t)wire;
  uint64_t sk = 2, shz = 1000, sab = EMBER__ALLOC_DEFAULT_SAMPLE_BYTES;
  int64_t sdur = 60000000000LL;
  if (rc == 0) rc = ember_config_get_u64(cfg, "session.max_concurrent", 2, 0, 64, &sk, err, errsz);
  if (rc == 0)
    rc = ember_config_get_duration_ns(cfg, "session.max_duration", 60000000000LL, 100000000LL,
                                      3600000000000LL, &sdur, err, errsz);
  if (rc == 0) rc = ember_config_get_u64(cfg, "session.max_hz", 1000, 1, 1000000, &shz, err, errsz);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "session.alloc_sample_bytes", EMBER__ALLOC_DEFAULT_SAMPLE_BYTES,
                              1, (uint64_t)1 << 40, &sab, err, errsz);
  a->session_alloc_sample_bytes = sab;
  if (rc == 0) rc = ember_config_get_bool(cfg, "heap", true, &a->heap_on, err, errsz);
  a->session_max_concurrent = (uint32_t)sk;
  a->session_max_duration_ns = sdur;
  a->session_max_hz = (uint32_t)shz;
  a->hz = (uint32_t)hz;
  a->ring_pages = (uint32_t)pages;
  a->window_ns = win;
  a->targets_refresh_ns = refresh;
  a->max_stacks = max_stacks;
  return rc;
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

int ember__agent_run(const ember_config_t *cfg, ember_kafka_t *kafka) {
  agent_t *a = ember_calloc(1, sizeof *a);
  if (a == NULL) return -ENOMEM;
  char err[512] = "";
  int rc = read_config(a, cfg, err, sizeof err);
  bool loop_ok = false, closer_ok = false;
  if (rc != 0) goto cleanup;
  a->self = getpid();
  ember__htab_init(&a->pid_index);
  if ((rc = uv_loop_init(&a->loop)) != 0) goto cleanup;
  loop_ok = true;
  uv_mutex_init(&a->mu);
  uv_cond_init(&a->cv);

  rc = ember_metrics_new(&a->metrics);
  if (rc != 0) goto cleanup;
  register_metrics(a);
  const char *listen = ember_config_get_str(cfg, "metrics_listen", "127.0.0.1:7273");
  if (listen[0] != '\0') {
    rc = ember_http_metrics_start(a->metrics, listen, &a->http, err, sizeof err);
    if (rc != 0) goto cleanup;
    EMBER_INFO("agent", "metrics on http://%s/metrics (port %u)", listen,
               ember_http_metrics_port(a->http));
  }

  a->kafka = kafka;
  if (a->kafka == NULL) {
    rc = ember_kafka_new(cfg, &a->kafka, err, sizeof err);
    a->own_kafka = rc == 0;
  }
  if (rc == 0 && ember_kafka_is_embedded(a->kafka))
    EMBER_INFO("agent", "embedded Kafka at %s", ember_kafka_brokers(a->kafka));
  if (rc != 0) goto cleanup;
  /* Create Ember's topics (ember.targets must be compacted) before anything
   * is produced: a broker that auto-creates topics would otherwise make
   * them with its defaults. A broker that cannot be reached now is not
   * fatal: windows wait in the spool until it can. */
  if (ember_kafka_ensure_topics(a->kafka, 10000, err, sizeof err) != 0)
    EMBER_WARN("agent", "cannot check Ember's topics now (%s); continuing", err);
  uint64_t spool_max, queue_max;
  rc = ember_config_get_u64(cfg, "spool_max_bytes", 1ull << 30, 0, UINT64_MAX, &spool_max, err,
                            sizeof err);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "queue_max_bytes", 64ull << 20, 1ull << 20, UINT64_MAX,
                              &queue_max, err, sizeof err);
  if (rc != 0) goto cleanup;
  const char *spool = ember_config_get_str(cfg, "spool_dir", "/var/lib/ember/spool");
  ember__publisher_opts_t po = {.kafka = a->kafka,
                                .spool_dir = spool[0] ? spool : NULL,
                                .mem_max_bytes = (size_t)queue_max,
                                .spool_max_bytes = (size_t)spool_max};
  rc = ember__publisher_new(&po, &a->pub, err, sizeof err);
  if (rc != 0) goto cleanup;

  bool netlink = true, kernel = true, dwarf = true;
  rc = ember_config_get_bool(cfg, "netlink", true, &netlink, err, sizeof err);
  if (rc == 0) rc = ember_config_get_bool(cfg, "kernel_stacks", true, &kernel, err, sizeof err);
  bool dwarf_files = false;
  uint64_t sym_mem = 24u << 20;
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "symbol_cache_memory", 24u << 20, 1u << 20, 1ull << 34, &sym_mem,
                              err, sizeof err);
  if (rc == 0) rc = ember_config_get_bool(cfg, "dwarf", true, &dwarf, err, sizeof err);
  if (rc == 0)
    rc = ember_config_get_bool(cfg, "dwarf_debug_files", false, &dwarf_files, err, sizeof err);
  bool sourcemaps = true;
  uint64_t sm_mem = 256u << 20;
  if (rc == 0) rc = ember_config_get_bool(cfg, "sourcemaps", true, &sourcemaps, err, sizeof err);
  if (rc == 0)
    rc = ember_config_get_u64(cfg, "sourcemap_memory", 256u << 20, 1u << 20, 1ull << 36, &sm_mem,
                              err, sizeof err);
  if (rc != 0) goto cleanup;
  ember__discovery_opts_t dopt = {
      .selector = ember_config_get(cfg, "selector"), .self = a->self, .netlink = netlink};
  rc = ember__discovery_new(&dopt, &a->disc, err, sizeof err);
  if (rc != 0) goto cleanup;
  ember__discovery_scan(a->disc);
  ember__symbolizer_opts_t sopt = {.dwarf = dwarf,
                                   .max_bytes = sym_mem,
                                   .no_detached_dwarf = !dwarf_files,
                                   .debug_dirs = ember_config_get(cfg, "debug_dirs"),
                                   .sourcemaps = sourcemaps,
                                   .sourcemap_bytes = sm_mem};
  rc = ember__symbolizer_new(&sopt, &a->sym);
  if (rc == -EINVAL) {
    snprintf(err, sizeof err,
             "debug_dirs: every entry must be an absolute directory without '.' or '..' "
             "(':'-separated, at most 16)");
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  if (rc != 0) {
    snprintf(err, sizeof err, "cannot start the symbolizer: %s", ember_strerror(rc));
    goto cleanup;
  }

  rc = ember__window_new(&a->open);
  if (rc != 0) goto cleanup;
  ember__window_set_max_stacks(a->open, a->max_stacks);
  int64_t mono, real;
  read_clocks(&mono, &real);
  ember__window_clock_init(&a->wclock, a->window_ns, mono, real);

  rc = uv_thread_create(&a->closer, closer_main, a);
  if (rc != 0) goto cleanup;
  closer_ok = true;

  if (a->stack_bytes > 0) {
    ember__unwtab_opts_t uo = {.max_bytes = (size_t)a->unwind_table_bytes,
                               .no_fp = a->unwind == EMBER__UNWIND_DWARF};
    rc = ember__unwtab_new(&uo, &a->unw);
    if (rc != 0) goto cleanup;
  }
  if (a->heap_on) {
    ember__heap_opts_t ho = {.unwind = heap_unwind, .ctx = a};
    rc = ember__heap_new(&ho, &a->heap);
    if (rc == 0) rc = ember__window_new(&a->heap_open);
    if (rc != 0) goto cleanup;
    ember__window_set_max_stacks(a->heap_open, a->max_stacks);
    ember__heap_set_window(a->heap, a->heap_open);
    /* Preload sessions read through it: one reader per file. */
    ember__alloc_preload_use(a->heap);
  }
  ember__sampler_opts_t so = {.hz = a->hz,
                              .ring_pages = a->ring_pages,
                              .kernel = kernel,
                              .hotplug_ms = 5000,
                              .stack_bytes = a->stack_bytes};
  rc = ember__sampler_start(&a->loop, &so, on_sample, a, &a->sampler, err, sizeof err);
  if (rc != 0) goto cleanup;

  if (a->session_max_concurrent > 0) {
    ember__sessions_opts_t sess = {.loop = &a->loop,
                                   .kafka = a->kafka,
                                   .publisher = a->pub,
                                   .disc = a->disc,
                                   .host_id = a->host_id,
                                   .agent_id = a->agent_id,
                                   .max_concurrent = a->session_max_concurrent,
                                   .max_duration_ns = a->session_max_duration_ns,
                                   .max_hz = a->session_max_hz,
                                   .kernel = kernel,
                                   .stack_bytes = a->stack_bytes,
                                   .max_stacks = (size_t)a->max_stacks,
                                   .alloc_sample_bytes = a->session_alloc_sample_bytes,
                                   .m = a->sm,
                                   .cfg = cfg,
                                   .hooks = {.ctx = a,
                                             .new_stack = on_session_stack,
                                             .stack = a->unw ? on_session_sample : NULL,
                                             .finish = on_session_finish}};
    rc = ember__sessions_start(&sess, &a->sessions, err, sizeof err);
    if (rc != 0) goto cleanup;
  } else {
    EMBER_INFO("agent", "session.max_concurrent = 0: on-demand sessions are off");
  }

  int64_t scan_ns;
  rc = ember_config_get_duration_ns(cfg, "scan_interval", 10000000000LL, 100000000LL,
                                    3600000000000LL, &scan_ns, err, sizeof err);
  if (rc != 0) goto cleanup;
  uv_timer_init(&a->loop, &a->window_timer);
  a->window_timer.data = a;
  arm_window_timer(a);
  uv_timer_init(&a->loop, &a->scan_timer);
  a->scan_timer.data = a;
  uv_timer_start(&a->scan_timer, on_scan_timer, (uint64_t)(scan_ns / 1000000),
                 (uint64_t)(scan_ns / 1000000));
  uv_timer_init(&a->loop, &a->targets_timer);
  a->targets_timer.data = a;
  uv_timer_start(&a->targets_timer, on_targets_timer, (uint64_t)(a->targets_refresh_ns / 1000000),
                 (uint64_t)(a->targets_refresh_ns / 1000000));
  uv_timer_init(&a->loop, &a->metrics_timer);
  a->metrics_timer.data = a;
  uv_timer_start(&a->metrics_timer, on_metrics_timer, 0, 1000);
  uv_timer_init(&a->loop, &a->sweep_timer);
  a->sweep_timer.data = a;
  uv_timer_start(&a->sweep_timer, on_sweep_timer, 0, SWEEP_INTERVAL_MS);
  if (a->heap != NULL) {
    heap_scan(a);
    uv_timer_init(&a->loop, &a->heap_timer);
    a->heap_timer.data = a;
    uv_timer_start(&a->heap_timer, on_heap_timer, HEAP_POLL_MS, HEAP_POLL_MS);
  }
  int nfd = ember__discovery_fd(a->disc);
  if (nfd >= 0 && uv_poll_init(&a->loop, &a->netlink_poll, nfd) == 0) {
    a->netlink_poll.data = a;
    a->netlink_polling = uv_poll_start(&a->netlink_poll, UV_READABLE, on_netlink) == 0;
  }
  uv_signal_init(&a->loop, &a->sigterm);
  a->sigterm.data = a;
  uv_signal_start(&a->sigterm, on_signal, SIGTERM);
  uv_signal_init(&a->loop, &a->sigint);
  a->sigint.data = a;
  uv_signal_start(&a->sigint, on_signal, SIGINT);
  EMBER_INFO("agent", "agent %s on host %s: %u Hz, %lld s windows, brokers %s", a->agent_id,
             a->host_id, a->hz, (long long)(a->window_ns / 1000000000),
             ember_kafka_brokers(a->kafka));

  uv_run(&a->loop, UV_RUN_DEFAULT);
  rc = 0;

cleanup:
  if (rc != 0) EMBER_ERROR("agent", "%s", err[0] ? err : ember_strerror(rc));
  /* Sessions still running (an error path; SIGTERM already ended them)
   * are handed over before the close thread drains its queue. */
  ember__sessions_stop_all(a->sessions);
  if (closer_ok) {
    uv_mutex_lock(&a->mu);
    a->closer_exit = true;
    uv_cond_broadcast(&a->cv);
    uv_mutex_unlock(&a->mu);
    uv_thread_join(&a->closer); /* finishes every queued window first */
  }
  if (a->sampler) ember__sampler_stop(a->sampler);
  if (loop_ok) {
    uv_walk(&a->loop, close_walk, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    uv_loop_close(&a->loop);
    /* After the close thread (it reports DONE through it) and the loop
     * (its timer handle) are done with it. */
    ember__sessions_free(a->sessions);
    a->sessions = NULL;
    uv_mutex_destroy(&a->mu);
    uv_cond_destroy(&a->cv);
  }
  if (a->pub) {
    ember__publisher_stats_t ps;
    ember__publisher_stats(a->pub, &ps);
    ember__publisher_close(a->pub, 10000);
    EMBER_INFO("agent",
               "stopped: %" PRIu64 " profiles published, %" PRIu64 " spooled, %" PRIu64 " dropped",
               ps.published, ps.spooled, ps.dropped);
  }
  ember__symbolizer_free(a->sym);
  ember__alloc_preload_use(NULL);
  ember__heap_free(a->heap);
  ember__window_free(a->heap_open);
  ember__unwtab_free(a->unw);
  ember__discovery_free(a->disc);
  if (a->own_kafka) ember_kafka_free(a->kafka);
  ember_http_metrics_stop(a->http);
  ember_metrics_free(a->metrics);
  ember__window_free(a->open);
  for (size_t i = 0; i < a->npids; i++) pidinfo_clear(&a->pids[i]);
  ember_free(a->pids);
  ember__htab_free(&a->pid_index);
  ember_free(a);
  return rc;
}
