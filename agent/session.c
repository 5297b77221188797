/* On-demand sessions. See session.h and docs/internals/agent.md. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "ember/sign.h"
#include "alloc.h"
#include "procfs.h"
#include "session.h"

#define TICK_MS             50   /* while a session runs: drain its rings */
#define IDLE_TICK_MS        1000 /* else: assignment retries and delivery reports */
#define RESCAN_NS           250000000LL
#define RUNNING_EVERY_NS    500000000LL
#define ASSIGN_RETRY_NS     5000000000LL
#define KAFKA_QUERY_MS      2000
#define RING_PAGES          16   /* 64 KiB: 50 ms at 1000 Hz is ~10 KiB */
#define STACK_RING_PAGES    256  /* at most, with stack copies: 1 MiB a thread */
#define MAX_THREADS         1024 /* per session: fds and 68 KiB of ring each */
#define MAX_COMMANDS_A_TICK 256
#define DEFAULT_HZ          100
#define REPLAY_ENTRIES      4096 /* accepted commands remembered (sign.h) */

typedef struct thread_ev {
  uint32_t tid;
  int fd;
  ember__perf_ring_t ring;
  bool seen; /* in the latest task scan */
} thread_ev_t;

typedef struct session {
  ember__sessions_t *owner;
  char *id;
  uint32_t hz;
  ember__perf_format_t fmt; /* what open_ev asks for */
  int64_t start_ns;         /* Unix */
  int64_t deadline_mono;    /* monotonic */
  int64_t next_running, next_rescan;
  uint64_t samples, samples_reported;
  ember__session_target_t *targets;
  size_t ntargets;
  thread_ev_t *evs;
  size_t nevs, capevs;
  uint64_t threads_skipped;
  ember__window_t *w;
  ember__perf_counts_t stats;
  /* Memory sessions: one allocation session per target (alloc.h). */
  bool memory;
  ember__alloc_session_t **allocs; /* each adds to w under its target's pid */
  size_t nallocs;
} session_t;

struct ember__sessions {
  ember__sessions_opts_t o;
  char *host_id, *agent_id;
  uv_timer_t tick;
  /* librdkafka writes to wake_fd[1] when a command arrives (queue io
   * events), so an idle agent needs no 50 ms polling for commands. */
  uv_poll_t wake;
  int wake_fd[2];
  bool wake_on; /* else: commands are polled at every TICK_MS */
  rd_kafka_t *consumer;
  bool assigned;
  int64_t next_assign;
  session_t **running;
  size_t nrunning;
  ember_sign_key_t keys[2]; /* command_key_file, command_key_file_previous */
  ember_sign_policy_t policy;
  ember_sign_replay_t *replay;
  uint64_t scratch[EMBER__PERF_SCRATCH / 8];
  uint64_t ips[EMBER__PERF_MAX_CHAIN];
};

/* The layout open_ev asks for. */
#define SAMPLE_TYPE                                                                                \
  (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |    \
   PERF_SAMPLE_CALLCHAIN)

static int64_t mono_ns(void) { return ember_time_mono_ns(); }

static void set_tick(ember__sessions_t *s);

static char *dup_or_null(const char *s) { return s ? ember_strdup(s) : NULL; }

void ember__sessions_register_metrics(ember_metrics_t *m, ember__session_metrics_t *out) {
  out->started = ember_metrics_counter(m, "ember_agent_sessions_started_total",
                                       "On-demand sessions accepted and sampling");
  out->rejected = ember_metrics_counter(m, "ember_agent_sessions_rejected_total",
                                        "On-demand sessions refused (limit, no target, type)");
  out->failed = ember_metrics_counter(m, "ember_agent_sessions_failed_total",
                                      "On-demand sessions that failed after being accepted");
  out->done = ember_metrics_counter(m, "ember_agent_sessions_done_total",
                                    "On-demand sessions whose result went to the publisher");
  out->samples = ember_metrics_counter(m, "ember_agent_session_samples_total",
                                       "Samples taken by on-demand sessions");
  out->other_host = ember_metrics_counter(m, "ember_agent_commands_other_host_total",
                                          "Commands ignored because they were for another host");
  out->expired = ember_metrics_counter(m, "ember_agent_commands_expired_total",
                                       "Commands ignored because their ttl had passed");
  out->malformed = ember_metrics_counter(m, "ember_agent_commands_malformed_total",
                                         "Messages on ember.commands that did not decode");
  /* One family, registered in a row (metrics.h). */
  for (int v = 0; v < EMBER_SIGN_NVERDICTS; v++) {
    out->refused[v] = NULL;
    if (v == EMBER_SIGN_OK || v == EMBER_SIGN_MALFORMED || v == EMBER_SIGN_OTHER_HOST) continue;
    out->refused[v] = ember_metrics_counter_of(
        m, "ember_agent_commands_refused_total", "reason",
        ember_sign_verdict_name((ember_sign_verdict_t)v),
        "Commands for this host refused: unsigned, forged, replayed, stale or over-long");
  }
}

void ember__session_result_clear(ember__session_result_t *r) {
  if (r == NULL) return;
  for (size_t i = 0; i < r->ntargets; i++) {
    ember_free(r->targets[i].worker);
    ember_free(r->targets[i].version);
    ember_free(r->targets[i].actor);
  }
  ember_free(r->targets);
  ember_free(r->session_id);
  ember__window_free(r->window);
  memset(r, 0, sizeof *r);
}

/* --- events --- */

static void send_event(ember__sessions_t *s, const char *id, ember_event_state_t state,
                       uint32_t targets, uint32_t hz, uint64_t samples, const char *msg) {
  ember_event_t e = {.state = state,
                     .session_id = (char *)(uintptr_t)id,
                     .host = s->host_id,
                     .agent_id = s->agent_id,
                     .message = (char *)(uintptr_t)msg,
                     .targets = targets,
                     .hz = hz,
                     .samples = samples,
                     .at_ns = ember_time_now_ns()};
  ember_buf_t b;
  ember_buf_init(&b, 1u << 16);
  int rc = ember_codec_encode_event(&e, &b);
  if (rc == 0 && s->o.publisher != NULL) {
    rc = ember__publisher_event(s->o.publisher, EMBER_TOPIC_EVENTS, id, strlen(id), b.data, b.len);
    if (rc != 0)
      EMBER_WARN("session", "session %s: %s event not sent: %s", id, ember_event_state_name(state),
                 ember_strerror(rc));
  } else if (rc != 0) {
    EMBER_WARN("session", "session %s: cannot encode the %s event: %s", id,
               ember_event_state_name(state), ember_strerror(rc));
  }
  ember_buf_free(&b);
  if (state == EMBER_EV_REJECTED || state == EMBER_EV_FAILED)
    EMBER_INFO("session", "session %s %s: %s", id, ember_event_state_name(state), msg ? msg : "");
}

static void reject(ember__sessions_t *s, const char *id, const char *msg) {
  ember_metric_add(s->o.m.rejected, 1);
  send_event(s, id, EMBER_EV_REJECTED, 0, 0, 0, msg);
}

void ember__sessions_published(ember__sessions_t *s, const char *session_id, uint32_t targets,
                               uint32_t hz, uint64_t samples, int rc, const char *why) {
  if (rc == 0) {
    ember_metric_add(s->o.m.done, 1);
    char msg[128];
    snprintf(msg, sizeof msg, "%" PRIu64 " samples of %u process%s published", samples, targets,
             targets == 1 ? "" : "es");
    send_event(s, session_id, EMBER_EV_DONE, targets, hz, samples, msg);
    EMBER_INFO("session", "session %s done: %s", session_id, msg);
  } else {
    ember_metric_add(s->o.m.failed, 1);
    send_event(s, session_id, EMBER_EV_FAILED, targets, hz, samples, why);
  }
}

/* --- per-thread perf events --- */

static void on_sample(void *ctx, const ember__raw_sample_t *rs) {
  session_t *se = ctx;
  const ember__session_hooks_t *h = &se->owner->o.hooks;
  ember__raw_sample_t whole = *rs;
  /* With stack copies, the agent unwinds the user part (hooks.stack). */
  if (h->stack) whole.nips = h->stack(h->ctx, rs, &whole.ips);
  if (whole.nips == 0) return;
  bool is_new = false;
  if (ember__window_add(se->w, whole.pid, whole.ips, whole.nips, whole.period_ns, &is_new) != 0)
    return;
  se->samples++;
  if (is_new && h->new_stack) h->new_stack(h->ctx, &whole);
}

static void drain_ev(session_t *se, thread_ev_t *ev) {
  ember__sessions_t *s = se->owner;
  ember__perf_reader_t rd = {se->fmt, on_sample, se, &se->stats, s->scratch, s->ips};
  uint64_t before = se->samples;
  ember__perf_ring_drain(&rd, &ev->ring);
  ember_metric_add(s->o.m.samples, (double)(se->samples - before));
}

static void close_ev(session_t *se, thread_ev_t *ev) {
  if (ev->fd < 0) return;
  drain_ev(se, ev);
  ember__perf_ring_unmap(&ev->ring);
  close(ev->fd);
  ev->fd = -1;
}

/* Open a cpu-clock event on one thread. Returns 0, or -errno (-ESRCH when
 * the thread is already gone). */
static int open_ev(session_t *se, uint32_t tid) {
  ember__sessions_t *s = se->owner;
  if (se->nevs == se->capevs) {
    size_t cap = se->capevs ? se->capevs * 2 : 16;
    thread_ev_t *n = ember_realloc(se->evs, cap * sizeof *n);
    if (n == NULL) return -ENOMEM;
    se->evs = n;
    se->capevs = cap;
  }
  struct perf_event_attr a = {
      .type = PERF_TYPE_SOFTWARE,
      .config = PERF_COUNT_SW_CPU_CLOCK,
      /* A period of CPU time, not a frequency: cpu-clock counts ns of the
       * thread's CPU time, so a busy thread gives exactly hz samples a
       * second and a waiting one none; freq mode would re-estimate the
       * period from a count that stops whenever the thread is off CPU. */
      .sample_period = 1000000000ull / se->hz,
      .sample_type = SAMPLE_TYPE,
      .exclude_callchain_kernel = s->o.kernel ? 0 : 1,
      .use_clockid = 1,
      .clockid = CLOCK_MONOTONIC,
  };
  ember__perf_want_stack(&a, s->o.stack_bytes);
  se->fmt = (ember__perf_format_t){a.sample_type, a.sample_regs_user};
  /* Stack copies: room for 200 ms of samples (four ticks), bounded. */
  uint32_t pages = RING_PAGES;
  if (s->o.stack_bytes) {
    pages = ember__perf_ring_pages_for(se->hz / 5 + 1, s->o.stack_bytes,
                                       (size_t)sysconf(_SC_PAGESIZE), RING_PAGES);
    if (pages > STACK_RING_PAGES) pages = STACK_RING_PAGES;
  }
  int fd = ember__perf_open(&a, (pid_t)tid, -1, -1, 0);
  if (fd < 0) return fd;
  ember__perf_ring_t ring;
  int rc = ember__perf_ring_map(&ring, fd, pages);
  if (rc != 0) {
    close(fd);
    return rc;
  }
  se->evs[se->nevs++] = (thread_ev_t){.tid = tid, .fd = fd, .ring = ring, .seen = true};
  return 0;
}

/* Open events on threads of `pid` not yet followed, and close those whose
 * thread is gone. Returns the first open error (0 when none), so the first
 * scan can tell "no permission" from "fine". */
static int scan_tasks(session_t *se, uint32_t pid) {
  pid_t *tids = NULL;
  size_t ntids = 0;
  int first_err = 0;
  /* A process gone (or its task list unreadable) has no threads to add. */
  if (pid > INT32_MAX || ember__proc_tids(NULL, (pid_t)pid, &tids, &ntids) != 0) return 0;
  for (size_t t = 0; t < ntids; t++) {
    uint32_t tid = (uint32_t)tids[t];
    bool known = false;
    for (size_t i = 0; i < se->nevs && !known; i++) {
      if (se->evs[i].tid == tid && se->evs[i].fd >= 0) {
        se->evs[i].seen = true;
        known = true;
      }
    }
    if (known) continue;
    if (se->nevs >= MAX_THREADS) {
      se->threads_skipped++;
      continue;
    }
    int rc = open_ev(se, tid);
    if (rc != 0 && rc != -ESRCH && first_err == 0) first_err = rc;
  }
  ember_free(tids);
  return first_err;
}

static void rescan(session_t *se) {
  for (size_t i = 0; i < se->nevs; i++) se->evs[i].seen = false;
  for (size_t t = 0; t < se->ntargets; t++) scan_tasks(se, se->targets[t].pid);
  /* Threads that left /proc: drain what they sampled and let them go. */
  size_t keep = 0;
  for (size_t i = 0; i < se->nevs; i++) {
    if (!se->evs[i].seen) close_ev(se, &se->evs[i]);
    if (se->evs[i].fd >= 0) se->evs[keep++] = se->evs[i];
  }
  se->nevs = keep;
}

static void session_free(session_t *se) {
  if (se == NULL) return;
  for (size_t i = 0; i < se->nevs; i++) {
    if (se->evs[i].fd >= 0) {
      ember__perf_ring_unmap(&se->evs[i].ring);
      close(se->evs[i].fd);
    }
  }
  ember_free(se->evs);
  for (size_t i = 0; i < se->nallocs; i++) ember__alloc_stop(se->allocs[i]);
  ember_free(se->allocs);
  for (size_t i = 0; i < se->ntargets; i++) {
    ember_free(se->targets[i].worker);
    ember_free(se->targets[i].version);
    ember_free(se->targets[i].actor);
  }
  ember_free(se->targets);
  ember__window_free(se->w);
  ember_free(se->id);
  ember_free(se);
}

/* --- memory sessions --- */

/* A (pid, stack) an allocation session made new in the session's window:
 * its mappings are captured like a CPU stack's. */
static void on_alloc_stack(void *ctx, uint32_t pid, const uint64_t *ips, uint32_t n) {
  session_t *se = ctx;
  const ember__session_hooks_t *h = &se->owner->o.hooks;
  ember__raw_sample_t rs = {.pid = pid, .tid = pid, .ips = ips, .nips = n};
  if (h->new_stack) h->new_stack(h->ctx, &rs);
}

static uint64_t alloc_samples(const session_t *se) {
  uint64_t n = 0;
  for (size_t i = 0; i < se->nallocs; i++) {
    ember__alloc_stats_t st;
    ember__alloc_stats(se->allocs[i], &st);
    n += st.samples;
  }
  return n;
}

/* Stop every allocation session of `se`: their last samples go into the
 * window, which holds every target's stacks already. */
static void collect_allocs(session_t *se) {
  for (size_t i = 0; i < se->nallocs; i++) ember__alloc_poll(se->allocs[i]);
  se->samples = alloc_samples(se);
  for (size_t i = 0; i < se->nallocs; i++) {
    ember__alloc_stats_t st;
    ember__alloc_stats(se->allocs[i], &st);
    if (st.lost > 0)
      EMBER_WARN("session", "session %s: %" PRIu64 " allocation samples were lost (ring full)",
                 se->id, st.lost);
    ember__alloc_stop(se->allocs[i]);
  }
  se->nallocs = 0;
}

/* Start an allocation session on every target of `se`: the preload
 * library's sampler where the process runs with it, else uprobes on its
 * libc. Notes which method each got into `notes`. Returns how many
 * started; `err` gets the first failure. */
static size_t start_allocs(ember__sessions_t *s, session_t *se, char *notes, size_t notes_size,
                           char *err, size_t err_size) {
  se->allocs = ember_calloc(se->ntargets, sizeof *se->allocs);
  if (se->allocs == NULL) {
    snprintf(err, err_size, "out of memory");
    return 0;
  }
  size_t npre = 0, nup = 0;
  for (size_t t = 0; t < se->ntargets; t++) {
    pid_t pid = (pid_t)se->targets[t].pid;
    ember__alloc_method_t m =
        ember__alloc_preload_present(pid) ? EMBER__ALLOC_PRELOAD : EMBER__ALLOC_UPROBE;
    char why[256] = "";
    ember__alloc_session_t *a = NULL;
    ember__alloc_sink_t sink = {se->w, on_alloc_stack, se};
    if (ember__alloc_start(pid, m, s->o.alloc_sample_bytes, &sink, &a, why, sizeof why) != 0) {
      if (err[0] == '\0') snprintf(err, err_size, "pid %d: %s", (int)pid, why);
      continue;
    }
    se->allocs[se->nallocs++] = a;
    if (m == EMBER__ALLOC_PRELOAD)
      npre++;
    else
      nup++;
  }
  size_t l = strlen(notes);
  snprintf(notes + l, notes_size - l, "; %zu by the preload sampler, %zu by uprobes on malloc",
           npre, nup);
  return se->nallocs;
}

/* Stop sampling `se`, remove it from the running set and hand its result
 * over; DONE/FAILED follows from ember__sessions_published. */
static void session_end(ember__sessions_t *s, session_t *se, const char *why) {
  for (size_t i = 0; i < se->nevs; i++) close_ev(se, &se->evs[i]);
  se->nevs = 0;
  for (size_t i = 0; i < s->nrunning; i++) {
    if (s->running[i] == se) {
      s->running[i] = s->running[--s->nrunning];
      break;
    }
  }
  if (se->memory) collect_allocs(se);
  int64_t end = ember_time_now_ns();
  ember__window_set_bounds(se->w, se->start_ns, end < se->start_ns ? se->start_ns : end);
  if (se->stats.lost > 0)
    EMBER_WARN("session", "session %s: the kernel dropped %" PRIu64 " samples (rings full)", se->id,
               se->stats.lost);
  EMBER_INFO("session", "session %s ended (%s): %" PRIu64 " samples", se->id, why, se->samples);
  ember__session_result_t r = {.session_id = se->id,
                               .hz = se->hz,
                               .start_ns = se->start_ns,
                               .end_ns = end,
                               .samples = se->samples,
                               .targets = se->targets,
                               .ntargets = se->ntargets,
                               .window = se->w,
                               .memory = se->memory};
  int rc = s->o.hooks.finish(s->o.hooks.ctx, &r);
  if (rc == 0) {
    se->id = NULL; /* now the result's */
    se->targets = NULL;
    se->ntargets = 0;
    se->w = NULL;
  } else {
    char msg[256];
    snprintf(msg, sizeof msg, "the result could not be queued for publishing: %s",
             ember_strerror(rc));
    ember_metric_add(s->o.m.failed, 1);
    send_event(s, se->id, EMBER_EV_FAILED, (uint32_t)se->ntargets, se->hz, se->samples, msg);
  }
  session_free(se);
}

/* --- commands --- */

static bool label_ok(const char *want, const char *have) {
  if (want == NULL || want[0] == '\0') return true;
  return have != NULL && strcmp(want, have) == 0;
}

static bool target_matches(const ember_command_t *c, const ember__target_t *t) {
  return t != NULL && !t->exited && t->selected && label_ok(c->worker, t->worker) &&
         label_ok(c->version, t->version) && label_ok(c->actor, t->actor);
}

typedef struct resolve {
  const ember_command_t *c;
  uint32_t *pids;
  size_t n, cap;
  int err;
} resolve_t;

static void resolve_add(resolve_t *r, uint32_t pid) {
  for (size_t i = 0; i < r->n; i++) {
    if (r->pids[i] == pid) return;
  }
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 8;
    uint32_t *n = ember_realloc(r->pids, cap * sizeof *n);
    if (n == NULL) {
      r->err = -ENOMEM;
      return;
    }
    r->pids = n;
    r->cap = cap;
  }
  r->pids[r->n++] = pid;
}

static void resolve_each(void *ctx, const ember__target_t *t) {
  resolve_t *r = ctx;
  if (target_matches(r->c, t) && kill(t->pid, 0) == 0) resolve_add(r, (uint32_t)t->pid);
}

/* The command's pids are the registry's view, which lags: a process that
 * restarted since has a new pid. When none of them is a live match, every
 * live process here with the command's labels is taken instead (the
 * collector sent the command to this host because the worker, version or
 * actor runs here). */
static void resolve_targets(ember__sessions_t *s, const ember_command_t *c, resolve_t *r) {
  r->c = c;
  for (size_t i = 0; i < c->npids; i++) {
    const ember__target_t *t = ember__discovery_get(s->o.disc, (pid_t)c->pids[i]);
    if (target_matches(c, t) && kill((pid_t)c->pids[i], 0) == 0) resolve_add(r, c->pids[i]);
  }
  if (r->n == 0 && r->err == 0) ember__discovery_each(s->o.disc, resolve_each, r);
}

static session_t *find_session(ember__sessions_t *s, const char *id) {
  for (size_t i = 0; i < s->nrunning; i++) {
    if (strcmp(s->running[i]->id, id) == 0) return s->running[i];
  }
  return NULL;
}

static const char *str_or(const char *s, const char *def) {
  return s != NULL && s[0] != '\0' ? s : def;
}

static void start_session(ember__sessions_t *s, const ember_command_t *c) {
  char msg[512];
  if (find_session(s, c->session_id) != NULL) {
    reject(s, c->session_id, "a session with this id is already running on this host");
    return;
  }
  if (s->nrunning >= s->o.max_concurrent) {
    snprintf(msg, sizeof msg,
             "%zu sessions are already running on this host (session.max_concurrent = %u)",
             s->nrunning, s->o.max_concurrent);
    reject(s, c->session_id, msg);
    return;
  }
  if (c->duration_ms == 0) {
    reject(s, c->session_id, "duration_ms must be above 0");
    return;
  }
  resolve_t r = {0};
  resolve_targets(s, c, &r);
  if (r.n == 0 && r.err == 0) {
    /* A process started a moment ago may not have been scanned yet. */
    ember__discovery_scan(s->o.disc);
    resolve_targets(s, c, &r);
  }
  session_t *se = NULL;
  if (r.err != 0) {
    reject(s, c->session_id, "out of memory resolving the targets");
    goto cleanup;
  }
  if (r.n == 0) {
    snprintf(msg, sizeof msg,
             "no target on host %s matches worker=%s version=%s actor=%s (live, selected "
             "processes only)",
             s->host_id, str_or(c->worker, "*"), str_or(c->version, "*"), str_or(c->actor, "*"));
    reject(s, c->session_id, msg);
    goto cleanup;
  }
  for (size_t i = 0; i < r.n; i++) {
    for (size_t k = 0; k < s->nrunning; k++) {
      const session_t *o = s->running[k];
      for (size_t t = 0; t < o->ntargets; t++) {
        if (o->targets[t].pid != r.pids[i]) continue;
        snprintf(msg, sizeof msg, "pid %u is already being sampled by session %s", r.pids[i],
                 o->id);
        reject(s, c->session_id, msg);
        goto cleanup;
      }
    }
  }

  /* The rate: the asked one, within session.max_hz and the kernel's cap.
   * Memory sessions have none: every call (uprobe) or by bytes (preload). */
  char notes[256] = "";
  bool memory = c->type == EMBER_SESSION_MEMORY;
  uint32_t hz = memory ? 0 : c->hz ? c->hz : DEFAULT_HZ;
  if (!memory && c->hz == 0) snprintf(notes, sizeof notes, "; no hz given: %u Hz", hz);
  if (hz > s->o.max_hz) {
    size_t l = strlen(notes);
    snprintf(notes + l, sizeof notes - l, "; %u Hz capped to session.max_hz %u", hz, s->o.max_hz);
    hz = s->o.max_hz;
  }
  long kmax = ember__read_sysctl("/proc/sys/kernel/perf_event_max_sample_rate");
  if (kmax > 0 && hz > (uint64_t)kmax) {
    size_t l = strlen(notes);
    snprintf(notes + l, sizeof notes - l, "; %u Hz capped to kernel.perf_event_max_sample_rate %ld",
             hz, kmax);
    hz = (uint32_t)kmax;
  }
  int64_t dur = (int64_t)c->duration_ms * 1000000;
  if (dur > s->o.max_duration_ns) {
    size_t l = strlen(notes);
    snprintf(notes + l, sizeof notes - l, "; %u ms cut to session.max_duration %lld ms",
             c->duration_ms, (long long)(s->o.max_duration_ns / 1000000));
    dur = s->o.max_duration_ns;
  }

  se = ember_calloc(1, sizeof *se);
  if (se == NULL || (se->id = ember_strdup(c->session_id)) == NULL ||
      (se->targets = ember_calloc(r.n, sizeof *se->targets)) == NULL ||
      ember__window_new(&se->w) != 0) {
    if (se) se->owner = s;
    reject(s, c->session_id, "out of memory starting the session");
    goto cleanup;
  }
  se->owner = s;
  se->hz = hz;
  ember__window_set_max_stacks(se->w, s->o.max_stacks);
  for (size_t i = 0; i < r.n; i++) {
    const ember__target_t *t = ember__discovery_get(s->o.disc, (pid_t)r.pids[i]);
    ember__session_target_t *st = &se->targets[se->ntargets++];
    st->pid = r.pids[i];
    st->worker = dup_or_null(t->worker);
    st->version = dup_or_null(t->version);
    st->actor = dup_or_null(t->actor);
  }
  se->start_ns = ember_time_now_ns();
  int64_t now = mono_ns();
  se->deadline_mono = now + dur;
  se->next_running = now + RUNNING_EVERY_NS;
  se->next_rescan = now + RESCAN_NS;
  se->memory = memory;
  if (memory) {
    char why[300] = "";
    if (start_allocs(s, se, notes, sizeof notes, why, sizeof why) == 0) {
      snprintf(msg, sizeof msg, "cannot profile allocations: %s", why);
      ember_metric_add(s->o.m.failed, 1);
      send_event(s, se->id, EMBER_EV_FAILED, (uint32_t)se->ntargets, 0, 0, msg);
      goto cleanup;
    }
  }
  int err = 0;
  for (size_t t = 0; t < se->ntargets && !memory; t++) {
    int rc = scan_tasks(se, se->targets[t].pid);
    if (rc != 0 && err == 0) err = rc;
  }
  if (!memory && se->nevs == 0) {
    snprintf(msg, sizeof msg, "cannot open perf events on the targets' threads: %s",
             err ? strerror(-err) : "no thread left");
    ember_metric_add(s->o.m.failed, 1);
    send_event(s, se->id, EMBER_EV_FAILED, (uint32_t)se->ntargets, hz, 0, msg);
    goto cleanup;
  }
  session_t **nr = ember_realloc(s->running, (s->nrunning + 1) * sizeof *nr);
  if (nr == NULL) {
    ember_metric_add(s->o.m.failed, 1);
    send_event(s, se->id, EMBER_EV_FAILED, (uint32_t)se->ntargets, hz, 0, "out of memory");
    goto cleanup;
  }
  s->running = nr;
  s->running[s->nrunning++] = se;
  set_tick(s);
  if (memory)
    snprintf(msg, sizeof msg, "profiling the allocations of %zu process%s for %lld ms%s",
             se->nallocs, se->nallocs == 1 ? "" : "es", (long long)(dur / 1000000), notes);
  else
    snprintf(msg, sizeof msg, "sampling %zu process%s (%zu threads) at %u Hz for %lld ms%s",
             se->ntargets, se->ntargets == 1 ? "" : "es", se->nevs, hz, (long long)(dur / 1000000),
             notes);
  ember_metric_add(s->o.m.started, 1);
  send_event(s, se->id, EMBER_EV_ACCEPTED, (uint32_t)se->ntargets, hz, 0, msg);
  EMBER_INFO("session", "session %s accepted: %s", se->id, msg);
  se = NULL; /* running now */

cleanup:
  session_free(se);
  ember_free(r.pids);
}

static void handle_command(ember__sessions_t *s, const rd_kafka_message_t *m) {
  ember_sign_envelope_t env = {.value = m->payload, .len = m->len};
  rd_kafka_headers_t *hdrs = NULL;
  if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const void *v = NULL;
    size_t n = 0;
    if (rd_kafka_header_get_last(hdrs, EMBER_SIGN_HEADER_KEY, &v, &n) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        v != NULL) {
      env.key_id = v;
      env.key_id_len = n;
    }
    v = NULL;
    if (rd_kafka_header_get_last(hdrs, EMBER_SIGN_HEADER_MAC, &v, &n) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        v != NULL) {
      env.mac = v;
      env.mac_len = n;
    }
  }
  ember_command_t c = {0};
  char why[512] = "";
  ember_sign_verdict_t verdict = ember_sign_check_command(&s->policy, s->replay, &env, s->host_id,
                                                          ember_time_now_ns(), &c, why, sizeof why);
  if (verdict == EMBER_SIGN_MALFORMED) {
    ember_metric_add(s->o.m.malformed, 1);
    EMBER_WARN_LIMITED("session", "ember.commands [%d] offset %lld: %s: ignored", (int)m->partition,
                       (long long)m->offset, why);
    return;
  }
  if (verdict == EMBER_SIGN_OTHER_HOST) {
    ember_metric_add(s->o.m.other_host, 1);
    goto cleanup;
  }
  if (verdict != EMBER_SIGN_OK) {
    ember_metric_add(s->o.m.refused[verdict], 1);
    if (verdict == EMBER_SIGN_EXPIRED) ember_metric_add(s->o.m.expired, 1);
    /* Rate-limited: a flood of forged commands must not fill the disk. */
    EMBER_WARN_LIMITED("session", "ember.commands [%d] offset %lld: %s", (int)m->partition,
                       (long long)m->offset, why);
    goto cleanup;
  }
  if (c.kind == EMBER_CMD_STOP) {
    session_t *se = find_session(s, c.session_id);
    if (se != NULL)
      session_end(s, se, "stopped by command");
    else
      EMBER_DEBUG("session", "STOP for session %s, which is not running here", c.session_id);
  } else if (c.type != EMBER_SESSION_CPU && c.type != EMBER_SESSION_MEMORY) {
    reject(s, c.session_id, "unknown session type");
  } else {
    start_session(s, &c);
  }
cleanup:
  ember_command_clear(&c);
}

/* --- Kafka --- */

/* Assign every partition of ember.commands at its current end, so only
 * commands sent from now on are read. Blocking (bounded by KAFKA_QUERY_MS
 * per request) but done once, at start or until the broker answers. */
static int assign_latest(ember__sessions_t *s) {
  rd_kafka_topic_t *rkt = rd_kafka_topic_new(s->consumer, EMBER_TOPIC_COMMANDS, NULL);
  if (rkt == NULL) return -ENOMEM;
  const struct rd_kafka_metadata *md = NULL;
  rd_kafka_resp_err_t err = rd_kafka_metadata(s->consumer, 0, rkt, &md, KAFKA_QUERY_MS);
  rd_kafka_topic_destroy(rkt);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    EMBER_DEBUG("session", "no metadata for %s yet: %s", EMBER_TOPIC_COMMANDS,
                rd_kafka_err2str(err));
    return EMBER_EKAFKA;
  }
  int rc = 0;
  rd_kafka_topic_partition_list_t *list = NULL;
  if (md->topic_cnt != 1 || md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
      md->topics[0].partition_cnt <= 0) {
    rc = EMBER_EKAFKA;
    goto cleanup;
  }
  list = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
  for (int i = 0; i < md->topics[0].partition_cnt; i++) {
    int32_t part = md->topics[0].partitions[i].id;
    int64_t lo = 0, hi = 0;
    err = rd_kafka_query_watermark_offsets(s->consumer, EMBER_TOPIC_COMMANDS, part, &lo, &hi,
                                           KAFKA_QUERY_MS);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rc = EMBER_EKAFKA;
      goto cleanup;
    }
    rd_kafka_topic_partition_list_add(list, EMBER_TOPIC_COMMANDS, part)->offset = hi;
  }
  err = rd_kafka_assign(s->consumer, list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rc = EMBER_EKAFKA;
    goto cleanup;
  }
  EMBER_INFO("session", "reading %s from its latest offsets (%d partitions)", EMBER_TOPIC_COMMANDS,
             list->cnt);
cleanup:
  if (list) rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_metadata_destroy(md);
  return rc;
}

static void read_commands(ember__sessions_t *s) {
  if (!s->assigned) return;
  for (int i = 0; i < MAX_COMMANDS_A_TICK; i++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(s->consumer, 0);
    if (m == NULL) break;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
      handle_command(s, m);
    else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
      EMBER_WARN_LIMITED("session", "reading %s: %s", EMBER_TOPIC_COMMANDS,
                         rd_kafka_message_errstr(m));
    rd_kafka_message_destroy(m);
  }
}

/* The tick runs every TICK_MS while a session runs (its rings), every
 * IDLE_TICK_MS otherwise: that idle wakeup, 20 times a second, was most of
 * an idle agent's CPU at 19 Hz. */
static void set_tick(ember__sessions_t *s) {
  uint64_t want = s->nrunning > 0 || !s->wake_on ? TICK_MS : IDLE_TICK_MS;
  if (uv_timer_get_repeat(&s->tick) == want) return;
  uv_timer_set_repeat(&s->tick, want);
  uv_timer_again(&s->tick);
}

static void on_wake(uv_poll_t *h, int status, int events) {
  ember__sessions_t *s = h->data;
  (void)events;
  char buf[64];
  while (read(s->wake_fd[0], buf, sizeof buf) > 0) {
  }
  if (status < 0) return;
  read_commands(s);
  set_tick(s);
}

static void on_tick(uv_timer_t *t) {
  ember__sessions_t *s = t->data;
  int64_t now = mono_ns();
  if (!s->assigned && now >= s->next_assign) {
    s->assigned = assign_latest(s) == 0;
    s->next_assign = mono_ns() + ASSIGN_RETRY_NS;
  }
  read_commands(s);
  now = mono_ns();
  /* Walk backwards: session_end removes by swapping in the last one. */
  for (size_t i = s->nrunning; i-- > 0;) {
    session_t *se = s->running[i];
    for (size_t k = 0; k < se->nevs; k++) drain_ev(se, &se->evs[k]);
    if (se->memory) {
      for (size_t k = 0; k < se->nallocs; k++) ember__alloc_poll(se->allocs[k]);
      se->samples = alloc_samples(se);
    }
    if (now >= se->deadline_mono) {
      session_end(s, se, "duration reached");
      continue;
    }
    if (!se->memory && now >= se->next_rescan) {
      rescan(se);
      se->next_rescan = now + RESCAN_NS;
    }
    if (now >= se->next_running) {
      char msg[96];
      snprintf(msg, sizeof msg, "%" PRIu64 " samples so far", se->samples);
      send_event(s, se->id, EMBER_EV_RUNNING, (uint32_t)se->ntargets, se->hz, se->samples, msg);
      se->next_running = now + RUNNING_EVERY_NS;
    }
  }
  set_tick(s);
}

void ember__sessions_stop_all(ember__sessions_t *s) {
  if (s == NULL) return;
  while (s->nrunning > 0) {
    session_t *se = s->running[s->nrunning - 1];
    for (size_t k = 0; k < se->nevs; k++) drain_ev(se, &se->evs[k]);
    session_end(s, se, "agent stopping");
  }
}

/* The command keys and the freshness policy (sign.h). No key at all is
 * allowed and means every command is refused: a host is never steerable
 * by default. */
static int read_keys(ember__sessions_t *s, const ember_config_t *cfg, char *errbuf,
                     size_t errbuf_size) {
  static const char *const files[] = {"command_key_file", "command_key_file_previous"};
  int64_t max_ttl = 600000000000LL, skew = 30000000000LL;
  int rc = 0;
  size_t n = 0;
  if (cfg != NULL) {
    rc = ember_config_get_duration_ns(cfg, "session.max_ttl", max_ttl, 1000000LL, 3600000000000LL,
                                      &max_ttl, errbuf, errbuf_size);
    if (rc == 0)
      rc = ember_config_get_duration_ns(cfg, "session.clock_skew", skew, 0, 600000000000LL, &skew,
                                        errbuf, errbuf_size);
    for (size_t i = 0; i < 2 && rc == 0; i++) {
      const char *path = ember_config_get(cfg, files[i]);
      if (path == NULL || path[0] == '\0') continue;
      rc = ember_sign_key_load(path, &s->keys[n], errbuf, errbuf_size);
      if (rc == 0) n++;
    }
  }
  if (rc == 0) rc = ember_sign_replay_new(REPLAY_ENTRIES, &s->replay);
  if (rc != 0) return rc;
  /* started_ns: the replay cache is empty from here on, and commands are
   * read from the latest offsets only after this (sign.h). */
  s->policy = (ember_sign_policy_t){.keys = s->keys,
                                    .nkeys = n,
                                    .max_ttl_ns = max_ttl,
                                    .skew_ns = skew,
                                    .started_ns = ember_time_now_ns()};
  if (n == 0)
    EMBER_WARN("session", "no command_key_file: every session command will be refused (the "
                          "collector's key file must be given to the agent too)");
  else
    EMBER_INFO("session", "session commands must be signed with key %s%s%s", s->keys[0].id,
               n > 1 ? " or " : "", n > 1 ? s->keys[1].id : "");
  return 0;
}

int ember__sessions_start(const ember__sessions_opts_t *opts, ember__sessions_t **out, char *errbuf,
                          size_t errbuf_size) {
  if (opts == NULL || out == NULL || opts->loop == NULL || opts->kafka == NULL ||
      opts->disc == NULL || opts->hooks.finish == NULL)
    return -EINVAL;
  ember__sessions_t *s = ember_calloc(1, sizeof *s);
  rd_kafka_conf_t *conf = NULL;
  int rc = -ENOMEM;
  if (s == NULL) return -ENOMEM;
  s->wake_fd[0] = s->wake_fd[1] = -1;
  s->o = *opts;
  s->host_id = ember_strdup(opts->host_id);
  s->agent_id = ember_strdup(opts->agent_id);
  if (s->host_id == NULL || s->agent_id == NULL) goto cleanup;
  if (s->o.max_concurrent == 0) s->o.max_concurrent = 1;
  rc = read_keys(s, opts->cfg, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  /* A group of its own, never committed: the group only names the client;
   * partitions are assigned by hand at their latest offsets. */
  char group[400];
  snprintf(group, sizeof group, "ember-agent.%s.%d", s->host_id, (int)getpid());
  rc = ember_kafka_consumer_conf(opts->kafka, group, &conf, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  if (rd_kafka_conf_set(conf, "auto.offset.reset", "latest", errbuf, errbuf_size) !=
          RD_KAFKA_CONF_OK ||
      rd_kafka_conf_set(conf, "enable.auto.commit", "false", errbuf, errbuf_size) !=
          RD_KAFKA_CONF_OK ||
      rd_kafka_conf_set(conf, "enable.auto.offset.store", "false", errbuf, errbuf_size) !=
          RD_KAFKA_CONF_OK) {
    rc = EMBER_EKAFKA;
    goto cleanup;
  }
  char kerr[256];
  s->consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, kerr, sizeof kerr);
  if (s->consumer == NULL) {
    snprintf(errbuf, errbuf_size, "cannot make the ember.commands consumer: %s", kerr);
    rc = EMBER_EKAFKA;
    goto cleanup;
  }
  conf = NULL; /* the consumer's now */
  rd_kafka_poll_set_consumer(s->consumer);
  rd_kafka_queue_t *cq = rd_kafka_queue_get_consumer(s->consumer);
  if (cq != NULL && pipe2(s->wake_fd, O_NONBLOCK | O_CLOEXEC) == 0 &&
      uv_poll_init(opts->loop, &s->wake, s->wake_fd[0]) == 0) {
    s->wake.data = s;
    rd_kafka_queue_io_event_enable(cq, s->wake_fd[1], "1", 1);
    s->wake_on = uv_poll_start(&s->wake, UV_READABLE, on_wake) == 0;
  }
  if (cq != NULL) rd_kafka_queue_destroy(cq);
  s->assigned = assign_latest(s) == 0;
  if (!s->assigned)
    EMBER_WARN("session", "cannot read %s's partitions yet; retrying every %d s",
               EMBER_TOPIC_COMMANDS, (int)(ASSIGN_RETRY_NS / 1000000000));
  s->next_assign = mono_ns() + ASSIGN_RETRY_NS;
  uv_timer_init(opts->loop, &s->tick);
  s->tick.data = s;
  uv_timer_start(&s->tick, on_tick, TICK_MS, s->wake_on ? IDLE_TICK_MS : TICK_MS);
  *out = s;
  return 0;

cleanup:
  if (conf) rd_kafka_conf_destroy(conf);
  ember__sessions_free(s);
  return rc;
}

void ember__sessions_free(ember__sessions_t *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->nrunning; i++) session_free(s->running[i]);
  ember_free(s->running);
  if (s->consumer) {
    rd_kafka_queue_t *cq = rd_kafka_queue_get_consumer(s->consumer);
    if (cq != NULL) {
      rd_kafka_queue_io_event_enable(cq, -1, NULL, 0);
      rd_kafka_queue_destroy(cq);
    }
    rd_kafka_consumer_close(s->consumer);
    rd_kafka_destroy(s->consumer);
  }
  for (int i = 0; i < 2; i++)
    if (s->wake_fd[i] >= 0) close(s->wake_fd[i]);
  ember_sign_replay_free(s->replay);
  explicit_bzero(s->keys, sizeof s->keys);
  ember_free(s->host_id);
  ember_free(s->agent_id);
  ember_free(s);
}
