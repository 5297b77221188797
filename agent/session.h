/* On-demand sessions (issue 5): commands from ember.commands, per-thread
 * perf sampling of the targets for a while, events on ember.events.
 *
 * The module reads every partition of ember.commands from the offsets that
 * were the latest when it started (manual assignment in a consumer group of
 * its own, "ember-agent.<host_id>.<pid>", never committed: a restarted
 * agent must not replay old commands). A command for another host is
 * ignored and counted; one that does not decode is logged and counted.
 * Every command for this host must be signed (include/ember/sign.h) with
 * command_key_file or command_key_file_previous, fresh (issued_ns within
 * session.clock_skew of now, not past issued_ns + ttl_ms), with a ttl from
 * 1 ms to session.max_ttl, and new (a replay cache of accepted MACs):
 * otherwise it is refused, counted by reason and logged (at most a line a
 * second). STOP too.
 *
 * A CPU START resolves its targets through discovery (selected processes
 * whose labels match the command's worker/version/actor, restricted to the
 * command's pids when it lists some), checks the limits (max_concurrent
 * sessions per host, one session per process, max_duration, max_hz and
 * kernel.perf_event_max_sample_rate) and opens one cpu-clock event per
 * thread of each target (/proc/PID/task, re-scanned every 250 ms for new
 * threads; a thread gone from it is drained and closed). Continuous
 * sampling is untouched: these are separate events with their own rings.
 *
 * Everything runs on the agent's loop thread from one 50 ms timer, which
 * polls the consumer, drains the session rings (a timer rather than
 * uv_poll: an event of an exited thread is POLLHUP forever), sends RUNNING
 * events every 500 ms and ends sessions at their deadline. An ended session
 * is handed to the agent (hooks.finish) with its raw stacks, to be
 * symbolized and published by the window-closing thread like a window; the
 * agent then reports the outcome with ember__sessions_published (DONE or
 * FAILED), from that thread. No lock is taken anywhere in this module:
 * events are produced through librdkafka, which is thread-safe, and the
 * metrics are atomic.
 *
 * Thread-safety: everything on the loop thread except
 * ember__sessions_published (any thread). */
#ifndef EMBER_AGENT_SESSION_H
#define EMBER_AGENT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "discovery.h"
#include "publish.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/metrics.h"
#include "ember/sign.h"
#include "sampler.h"
#include "window.h"

typedef struct ember__sessions ember__sessions_t;

typedef struct ember__session_metrics {
  ember_metric_t *started, *rejected, *failed, *done, *samples, *other_host, *expired, *malformed;
  /* ember_agent_commands_refused_total{reason=...}, by ember_sign_verdict_t
   * (NULL for the verdicts that are not refusals). */
  ember_metric_t *refused[EMBER_SIGN_NVERDICTS];
} ember__session_metrics_t;

/* The module's config keys (read by ember__sessions_start from opts.cfg). */
#define EMBER__SESSION_CONFIG_KEYS                                                                 \
  "command_key_file", "command_key_file_previous", "session.max_ttl", "session.clock_skew"

/* Register the module's counters (before the metrics server starts). */
void ember__sessions_register_metrics(ember_metrics_t *m, ember__session_metrics_t *out);

typedef struct ember__session_target {
  uint32_t pid;
  char *worker, *version, *actor; /* owned; actor may be NULL */
} ember__session_target_t;

/* An ended session. Handed to hooks.finish, which takes ownership of every
 * pointer in it when it returns 0 (release with ember__session_result_clear
 * when done); on failure the module frees them. */
typedef struct ember__session_result {
  char *session_id;
  uint32_t hz;
  int64_t start_ns, end_ns; /* Unix ns */
  uint64_t samples;
  ember__session_target_t *targets;
  size_t ntargets;
  ember__window_t *window; /* raw stacks of every target, bounds set */
  bool memory;             /* allocation session: the window's samples/cpu_ns slots hold
                              objects/bytes (EMBER_VT_ALLOC_OBJECTS/_BYTES) */
} ember__session_result_t;

void ember__session_result_clear(ember__session_result_t *r);

typedef struct ember__session_hooks {
  void *ctx;
  /* Loop thread: a (pid, stack) new to a session; the agent keeps mappings
   * that cover it, as it does for windows. */
  void (*new_stack)(void *ctx, const ember__raw_sample_t *s);
  /* Loop thread, optional: the whole stack of a sample taken with a stack
   * copy (stack_bytes): the kernel's chain and the user part the agent
   * unwinds, leaf first, into a buffer of the hook's (valid until the next
   * call); returns its length (0: drop the sample). */
  uint32_t (*stack)(void *ctx, const ember__raw_sample_t *s, const uint64_t **ips);
  /* Loop thread: queue the result for symbolizing and publishing; 0 or an
   * error code (the session is then FAILED). */
  int (*finish)(void *ctx, ember__session_result_t *r);
} ember__session_hooks_t;

typedef struct ember__sessions_opts {
  uv_loop_t *loop;
  const ember_kafka_t *kafka;    /* borrowed; outlives the module */
  ember__publisher_t *publisher; /* borrowed, outlives the module: events go out through its
                                    producer (NULL = events are not sent) */
  ember__discovery_t *disc;      /* borrowed; loop thread */
  const char *host_id;           /* copied */
  const char *agent_id;          /* copied */
  uint32_t max_concurrent;       /* sessions per host */
  int64_t max_duration_ns;       /* longer ones are cut to this */
  uint32_t max_hz;               /* faster ones are slowed to this */
  bool kernel;                   /* kernel callchains too */
  uint32_t stack_bytes;          /* user stack copied a sample (perf.h); 0 = frame pointers */
  size_t max_stacks;             /* distinct stacks per session */
  uint64_t alloc_sample_bytes;   /* preload method: mean bytes between samples */
  ember__session_metrics_t m;    /* from ember__sessions_register_metrics */
  const ember_config_t *cfg;     /* borrowed for _start: EMBER__SESSION_CONFIG_KEYS */
  ember__session_hooks_t hooks;
} ember__sessions_opts_t;

/* Read the command keys, make the command consumer and
 * start the timer. Reaching the broker is not required: the consumer is
 * assigned once the topic's partitions can be read, retried every 5 s. No
 * key configured is not an error: every command is then refused (said
 * once here). Returns 0, EMBER_EKAFKA, EMBER_ECONFIG (a bad key file or
 * setting), -errno or -ENOMEM with a sentence in errbuf. */
int ember__sessions_start(const ember__sessions_opts_t *opts, ember__sessions_t **out, char *errbuf,
                          size_t errbuf_size);
/* End every running session now (shutdown): each result goes to
 * hooks.finish as at its deadline. */
void ember__sessions_stop_all(ember__sessions_t *s);
/* Any thread: the result of `session_id` was handed to the publisher
 * (rc == 0: DONE with `samples`) or could not be (FAILED, `why`). */
void ember__sessions_published(ember__sessions_t *s, const char *session_id, uint32_t targets,
                               uint32_t hz, uint64_t samples, int rc, const char *why);
/* Free after the loop closed the timer handle (uv_walk + uv_run) and after
 * the last ember__sessions_published (and before the publisher's close,
 * which flushes the events). */
void ember__sessions_free(ember__sessions_t *s);

#endif
