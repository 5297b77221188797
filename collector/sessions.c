/* On-demand sessions (sessions.h): routing, commands, events, states.
 *
 * Every session keeps one entry per routed host with what its agent last
 * said. The state of the session is derived from those entries each time
 * one changes and on every tick, so the rules of sessions.h live in one
 * function (settle). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/sign.h"
#include "json.h"
#include "sessions.h"

#define LOG "sessions"

#define MS_NS            1000000LL
#define ACTIVE_NS        (60LL * 1000 * MS_NS) /* a target seen this recently is active */
#define COMMAND_TTL_MS   30000u
#define EXPIRE_AFTER_NS  (30LL * 1000 * MS_NS) /* past ends_ms, unless configured */
#define MAX_SEEN         64                    /* result (agent, seq) kept per host */
#define ID_HEX           32
#define LIVE_FALLBACK_NS (60LL * 1000 * MS_NS) /* no end of ember.events seen: live anyway */

typedef enum sess_state {
  S_PENDING,
  S_RUNNING,
  S_DONE,
  S_FAILED,
  S_EXPIRED,
  S_CANCELLED
} sess_state_t;
static const char *const state_names[] = {"pending", "running", "done",
                                          "failed",  "expired", "cancelled"};

/* A host's state: H_SENT until its agent answers, then the last event. */
enum { H_SENT = 0 };

typedef struct host_entry {
  char *host;
  uint32_t *pids;
  size_t npids;
  int state; /* H_SENT or an ember_event_state_t */
  uint32_t targets, hz;
  uint64_t samples; /* as the agent reported */
  char *message;
  uint64_t result_samples; /* in results stored by this instance */
  size_t nseen;
  struct {
    char agent[64];
    uint64_t seq;
  } seen[MAX_SEEN];
} host_entry_t;

typedef struct session {
  char id[ID_HEX + 1];
  char *worker, *version, *actor, *host;
  uint32_t instances, duration_ms, hz;
  ember_session_type_t type;
  sess_state_t state;
  bool cancel_requested;
  int64_t created_ns, started_ns, finished_ns, answered_ns;
  host_entry_t *hosts;
  size_t nhosts;
} session_t;

struct ember__csessions {
  pthread_mutex_t mu;
  ember__registry_t *registry;
  rd_kafka_t *producer;
  uint32_t max_duration_ms, max_hz;
  size_t max_active;
  int64_t keep_ns, answer_timeout_ns;
  session_t **v; /* oldest first */
  size_t n, cap;
  bool has_key;
  ember_sign_key_t key; /* signs every command */
  bool live;            /* ember.events is read up to where it was at start */
  int64_t born_ns;      /* when _new ran: live anyway after LIVE_FALLBACK_NS */
  ember_metric_t *m_created, *m_done, *m_failed, *m_expired, *m_cancelled, *m_commands,
      *m_command_errors, *m_events, *m_malformed, *m_active;
};

static void count(ember_metric_t *m, double v) {
  if (m != NULL) ember_metric_add(m, v);
}

static bool finished(const session_t *x) { return x->state >= S_DONE; }

static bool host_answered(const host_entry_t *h) {
  return h->state == EMBER_EV_DONE || h->state == EMBER_EV_FAILED || h->state == EMBER_EV_REJECTED;
}

static void session_free(session_t *x) {
  if (x == NULL) return;
  for (size_t i = 0; i < x->nhosts; i++) {
    ember_free(x->hosts[i].host);
    ember_free(x->hosts[i].pids);
    ember_free(x->hosts[i].message);
  }
  ember_free(x->hosts);
  ember_free(x->worker);
  ember_free(x->version);
  ember_free(x->actor);
  ember_free(x->host);
  ember_free(x);
}

int ember__csessions_new(const ember__csessions_opts_t *o, ember__csessions_t **out, char *errbuf,
                         size_t errbuf_size) {
  if (o == NULL || out == NULL || o->registry == NULL || o->producer == NULL) return -EINVAL;
  ember__csessions_t *s = ember_calloc(1, sizeof *s);
  if (s == NULL) return -ENOMEM;
  if (o->command_key_file != NULL && o->command_key_file[0] != '\0') {
    int rc = ember_sign_key_load(o->command_key_file, &s->key, errbuf, errbuf_size);
    if (rc != 0) {
      ember_free(s);
      return rc;
    }
    s->has_key = true;
    EMBER_INFO(LOG, "session commands are signed with key %s (%s)", s->key.id, o->command_key_file);
  } else {
    EMBER_WARN(LOG, "no command_key_file: on-demand sessions are refused (agents take signed "
                    "commands only; see docs/internals/collector.md, \"Signed commands\")");
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    ember_free(s);
    return -ENOMEM;
  }
  s->registry = o->registry;
  s->producer = o->producer;
  s->max_duration_ms = o->max_duration_ms ? o->max_duration_ms : 60000;
  s->max_hz = o->max_hz ? o->max_hz : 1000;
  s->max_active = o->max_active ? o->max_active : 100;
  s->keep_ns = o->keep_ns ? o->keep_ns : 86400LL * 1000 * MS_NS;
  s->answer_timeout_ns = o->answer_timeout_ns ? o->answer_timeout_ns : EXPIRE_AFTER_NS;
  s->born_ns = ember_time_now_ns();
  s->live = !o->replay;
  ember_metrics_t *m = o->metrics;
  if (m != NULL) {
    s->m_created =
        ember_metrics_counter(m, "ember_sessions_created_total", "On-demand sessions started.");
    s->m_done = ember_metrics_counter(m, "ember_sessions_done_total", "Sessions that finished.");
    s->m_failed = ember_metrics_counter(m, "ember_sessions_failed_total",
                                        "Sessions every host failed or rejected.");
    s->m_expired = ember_metrics_counter(m, "ember_sessions_expired_total",
                                         "Sessions whose hosts did not all answer in time.");
    s->m_cancelled =
        ember_metrics_counter(m, "ember_sessions_cancelled_total", "Sessions cancelled.");
    s->m_commands = ember_metrics_counter(m, "ember_sessions_commands_total",
                                          "Commands queued for ember.commands.");
    s->m_command_errors = ember_metrics_counter(m, "ember_sessions_command_errors_total",
                                                "Commands the producer refused to queue.");
    s->m_events = ember_metrics_counter(m, "ember_sessions_events_total",
                                        "Messages consumed from ember.events.");
    s->m_malformed = ember_metrics_counter(m, "ember_sessions_malformed_events_total",
                                           "ember.events messages that failed to decode.");
    s->m_active = ember_metrics_gauge(m, "ember_sessions_active", "Sessions pending or running.");
  }
  *out = s;
  return 0;
}

void ember__csessions_free(ember__csessions_t *s) {
  if (s == NULL) return;
  for (size_t i = 0; i < s->n; i++) session_free(s->v[i]);
  ember_free(s->v);
  pthread_mutex_destroy(&s->mu);
  explicit_bzero(&s->key, sizeof s->key);
  ember_free(s);
}

/* ---- commands -------------------------------------------------------- */

static int send_command(ember__csessions_t *s, const session_t *x, const host_entry_t *h,
                        ember_command_kind_t kind, int64_t now_ns) {
  ember_command_t cmd = {.kind = kind,
                         .session_id = (char *)(uintptr_t)x->id,
                         .host = h->host,
                         .worker = x->worker,
                         .version = x->version,
                         .actor = x->actor,
                         .pids = h->pids,
                         .npids = h->npids,
                         .type = x->type,
                         .duration_ms = x->duration_ms,
                         .hz = x->hz,
                         .ttl_ms = COMMAND_TTL_MS,
                         .issued_ns = now_ns};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  char mac[EMBER_SIGN_MAC_HEX + 1];
  int rc = ember_codec_encode_command(&cmd, &b);
  /* The MAC covers the value exactly as produced (sign.h). */
  if (rc == 0) rc = ember_sign_mac_hex(&s->key, b.data, b.len, mac);
  if (rc == 0) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        s->producer, RD_KAFKA_V_TOPIC(EMBER_TOPIC_COMMANDS),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(h->host, strlen(h->host)),
        RD_KAFKA_V_VALUE(b.data, b.len),
        RD_KAFKA_V_HEADER(EMBER_SIGN_HEADER_KEY, s->key.id, (ssize_t)strlen(s->key.id)),
        RD_KAFKA_V_HEADER(EMBER_SIGN_HEADER_MAC, mac, (ssize_t)EMBER_SIGN_MAC_HEX), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      EMBER_WARN(LOG, "session %s: cannot queue %s for host %s: %s", x->id,
                 kind == EMBER_CMD_START ? "START" : "STOP", h->host, rd_kafka_err2str(err));
      count(s->m_command_errors, 1);
      rc = EMBER_EKAFKA;
    } else {
      count(s->m_commands, 1);
    }
  }
  ember_buf_free(&b);
  return rc;
}

/* A collector's Event on ember.events (key = session id): what every
 * collector builds its sessions from (sessions.h). */
static int send_event(ember__csessions_t *s, const ember_event_t *e) {
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  int rc = ember_codec_encode_event(e, &b);
  if (rc == 0) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        s->producer, RD_KAFKA_V_TOPIC(EMBER_TOPIC_EVENTS), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(e->session_id, strlen(e->session_id)), RD_KAFKA_V_VALUE(b.data, b.len),
        RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      EMBER_WARN(LOG, "session %s: cannot queue its %s event: %s", e->session_id,
                 ember_event_state_name(e->state), rd_kafka_err2str(err));
      count(s->m_command_errors, 1);
      rc = EMBER_EKAFKA;
    }
  }
  ember_buf_free(&b);
  return rc;
}

static int send_created(ember__csessions_t *s, const session_t *x) {
  char **hosts = ember_calloc(x->nhosts ? x->nhosts : 1, sizeof *hosts);
  if (hosts == NULL) return -ENOMEM;
  for (size_t i = 0; i < x->nhosts; i++) hosts[i] = x->hosts[i].host;
  ember_event_t e = {.state = EMBER_EV_CREATED,
                     .session_id = (char *)(uintptr_t)x->id,
                     .worker = x->worker,
                     .version = x->version,
                     .actor = x->actor,
                     .select_host = x->host,
                     .type = x->type,
                     .duration_ms = x->duration_ms,
                     .hz = x->hz,
                     .instances = x->instances,
                     .hosts = hosts,
                     .nhosts = x->nhosts,
                     .created_ns = x->created_ns,
                     .at_ns = x->created_ns};
  int rc = send_event(s, &e);
  ember_free(hosts);
  return rc;
}

static int send_cancel(ember__csessions_t *s, const session_t *x, int64_t now_ns) {
  ember_event_t e = {
      .state = EMBER_EV_CANCEL_REQUESTED, .session_id = (char *)(uintptr_t)x->id, .at_ns = now_ns};
  return send_event(s, &e);
}

/* ---- routing ---------------------------------------------------------- */

static int new_id(char out[ID_HEX + 1]) { return ember_sign_random_hex(out, ID_HEX / 2); }

static int dup_opt(const char *src, char **dst) {
  *dst = NULL;
  if (src == NULL) return 0;
  *dst = ember_strdup(src);
  return *dst ? 0 : -ENOMEM;
}

static int by_host(const void *a, const void *b) {
  const ember_target_record_t *x = a, *y = b;
  int c = strcmp(x->host ? x->host : "", y->host ? y->host : "");
  if (c != 0) return c;
  return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* One host entry per distinct host of the targets (sorted by host), at
 * most `limit` (0 = all). */
static int group_hosts(session_t *x, ember_target_record_t *t, size_t n, uint32_t limit) {
  if (n > 1) qsort(t, n, sizeof *t, by_host);
  x->hosts = ember_calloc(n ? n : 1, sizeof *x->hosts);
  if (x->hosts == NULL) return -ENOMEM;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && strcmp(t[j].host ? t[j].host : "", t[i].host ? t[i].host : "") == 0) j++;
    if (t[i].host != NULL && t[i].host[0] != '\0' && (limit == 0 || x->nhosts < limit)) {
      host_entry_t *h = &x->hosts[x->nhosts++];
      h->host = ember_strdup(t[i].host);
      size_t np = j - i < EMBER_SESSION_MAX_PIDS ? j - i : EMBER_SESSION_MAX_PIDS;
      h->pids = ember_malloc(np * sizeof *h->pids);
      if (h->host == NULL || h->pids == NULL) return -ENOMEM;
      for (size_t k = 0; k < np; k++) h->pids[k] = t[i + k].pid;
      h->npids = np;
    }
    i = j;
  }
  return 0;
}

static size_t active_count(const ember__csessions_t *s) {
  size_t a = 0;
  for (size_t i = 0; i < s->n; i++) a += !finished(s->v[i]);
  return a;
}

static json_t *session_json(const session_t *x, int64_t now_ns);

int ember__csessions_create(ember__csessions_t *s, const ember__csession_req_t *req, int64_t now_ns,
                            json_t **out, char *errbuf, size_t errbuf_size) {
  if (s == NULL || req == NULL || out == NULL) return -EINVAL;
  if (req->worker == NULL && req->actor == NULL) {
    snprintf(errbuf, errbuf_size, "field \"worker\" or \"actor\" is required");
    return -EINVAL;
  }
  if (!s->has_key) {
    snprintf(errbuf, errbuf_size,
             "sessions are off on this server: it has no command_key_file to sign commands with, "
             "and agents refuse unsigned ones");
    return -ENOKEY;
  }
  ember__csession_req_t q = *req;
  req = &q;
  if (q.duration_ms == 0) q.duration_ms = s->max_duration_ms < 5000 ? s->max_duration_ms : 5000;
  if (q.hz == 0) q.hz = s->max_hz < 1000 ? s->max_hz : 1000;
  if (req->duration_ms > s->max_duration_ms) {
    snprintf(errbuf, errbuf_size,
             "field \"duration_ms\": %" PRIu32 " is not from 1 to %" PRIu32
             " (session.max_duration)",
             req->duration_ms, s->max_duration_ms);
    return -EINVAL;
  }
  if (req->hz > s->max_hz) {
    snprintf(errbuf, errbuf_size,
             "field \"hz\": %" PRIu32 " is not from 1 to %" PRIu32 " (session.max_hz)", req->hz,
             s->max_hz);
    return -EINVAL;
  }
  ember_store_selector_t sel = {req->worker, req->version, req->host, req->actor};
  ember_target_record_t *t = NULL;
  size_t nt = 0;
  session_t *x = NULL;
  int rc = ember__registry_list(s->registry, &sel, now_ns - ACTIVE_NS, &t, &nt);
  if (rc != 0) goto cleanup;
  rc = -ENOMEM;
  x = ember_calloc(1, sizeof *x);
  if (x == NULL) goto cleanup;
  rc = new_id(x->id);
  if (rc == 0) rc = dup_opt(req->worker, &x->worker);
  if (rc == 0) rc = dup_opt(req->version, &x->version);
  if (rc == 0) rc = dup_opt(req->actor, &x->actor);
  if (rc == 0) rc = dup_opt(req->host, &x->host);
  if (rc == 0) rc = group_hosts(x, t, nt, req->instances);
  if (rc != 0) goto cleanup;
  if (x->nhosts == 0) {
    const char *what = req->actor ? "actor" : "worker";
    const char *name = req->actor ? req->actor : req->worker;
    snprintf(errbuf, errbuf_size,
             "no isolate of %s %.128s%s%.64s%s%.64s was seen in the last minute", what, name,
             req->version ? " version " : "", req->version ? req->version : "",
             req->host ? " on host " : "", req->host ? req->host : "");
    rc = EMBER_ENOTFOUND;
    goto cleanup;
  }
  x->instances = req->instances;
  x->type = req->type;
  x->duration_ms = req->duration_ms;
  x->hz = req->hz;
  x->created_ns = now_ns;
  x->state = S_PENDING;

  pthread_mutex_lock(&s->mu);
  if (active_count(s) >= s->max_active) {
    pthread_mutex_unlock(&s->mu);
    snprintf(errbuf, errbuf_size,
             "%zu sessions are already active (session.max_active): wait for one to finish",
             s->max_active);
    rc = -EAGAIN;
    goto cleanup;
  }
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    session_t **v = ember_realloc(s->v, cap * sizeof *v);
    if (v == NULL) {
      pthread_mutex_unlock(&s->mu);
      rc = -ENOMEM;
      goto cleanup;
    }
    s->v = v;
    s->cap = cap;
  }
  /* The definition goes first, through the same producer (so the same
   * partition and order as the later events of this key): every collector
   * knows the session before any answer to it. */
  rc = send_created(s, x);
  for (size_t i = 0; i < x->nhosts && rc == 0; i++)
    rc = send_command(s, x, &x->hosts[i], EMBER_CMD_START, now_ns);
  if (rc != 0) {
    /* Hosts already sent a START stop at once; the session is not kept
     * here, and the others see it cancelled. */
    for (size_t i = 0; i < x->nhosts; i++) send_command(s, x, &x->hosts[i], EMBER_CMD_STOP, now_ns);
    send_cancel(s, x, now_ns);
    pthread_mutex_unlock(&s->mu);
    snprintf(errbuf, errbuf_size, "cannot queue the session's commands for Kafka; try again");
    goto cleanup;
  }
  s->v[s->n++] = x;
  count(s->m_created, 1);
  if (s->m_active != NULL) ember_metric_set(s->m_active, (double)active_count(s));
  EMBER_INFO(LOG, "session %s: %s %s for %" PRIu32 " ms at %" PRIu32 " Hz on %zu hosts", x->id,
             req->actor ? "actor" : "worker", req->actor ? req->actor : req->worker, x->duration_ms,
             x->hz, x->nhosts);
  *out = session_json(x, now_ns);
  x = NULL;
  pthread_mutex_unlock(&s->mu);
  if (*out == NULL) rc = -ENOMEM;
cleanup:
  session_free(x);
  ember__registry_list_free(t, nt);
  return rc;
}

/* ---- state ------------------------------------------------------------ */

static int64_t ends_ns(const session_t *x) {
  return (x->started_ns ? x->started_ns : x->created_ns) + (int64_t)x->duration_ms * MS_NS;
}

/* `at` is when the rule was met: a deadline that passed before `now_ns`
 * (a session rebuilt from old events) finishes it at the deadline. */
static void finish(ember__csessions_t *s, session_t *x, sess_state_t st, int64_t now_ns,
                   int64_t at) {
  x->state = st;
  x->finished_ns = at > 0 && at < now_ns ? at : now_ns;
  ember_metric_t *m[] = {[S_DONE] = s->m_done,
                         [S_FAILED] = s->m_failed,
                         [S_EXPIRED] = s->m_expired,
                         [S_CANCELLED] = s->m_cancelled};
  count(m[st], 1);
  if (s->m_active != NULL) ember_metric_set(s->m_active, (double)active_count(s));
  EMBER_INFO(LOG, "session %s: %s", x->id, state_names[st]);
}

/* Apply the rules of sessions.h. */
static void settle(ember__csessions_t *s, session_t *x, int64_t now_ns) {
  if (finished(x)) return;
  size_t answered = 0, done = 0, complete = 0;
  bool started = false;
  for (size_t i = 0; i < x->nhosts; i++) {
    const host_entry_t *h = &x->hosts[i];
    started |= h->state != H_SENT;
    if (!host_answered(h)) continue;
    answered++;
    if (h->state == EMBER_EV_DONE) {
      done++;
      complete += h->result_samples >= h->samples;
    }
  }
  if (answered == x->nhosts) {
    if (x->answered_ns == 0) x->answered_ns = now_ns;
    if (x->cancel_requested) {
      finish(s, x, S_CANCELLED, now_ns, now_ns);
    } else if (done == 0) {
      finish(s, x, S_FAILED, now_ns, now_ns);
    } else if (complete == done) {
      finish(s, x, S_DONE, now_ns, now_ns);
    } else if (s->live && now_ns - x->answered_ns >= s->answer_timeout_ns) {
      /* Waiting as long as hosts may take to answer: a loaded collector
       * stores a result well after its host's DONE (13 s once, in an ASan
       * build beside CPU hogs, when a 10 s grace served an empty profile);
       * until issue 13's fleet view, results ingested by another instance
       * only cost this wait. Not while ember.events is replayed: the
       * results may be further on. */
      finish(s, x, S_DONE, now_ns, x->answered_ns + s->answer_timeout_ns);
    }
    return;
  }
  if (x->cancel_requested && !started) {
    finish(s, x, S_CANCELLED, now_ns, now_ns);
    return;
  }
  /* Deadlines wait for the end of the replay: the answers may follow. */
  if (s->live && now_ns > ends_ns(x) + s->answer_timeout_ns) {
    finish(s, x, x->cancel_requested ? S_CANCELLED : S_EXPIRED, now_ns,
           ends_ns(x) + s->answer_timeout_ns);
    return;
  }
  if (started && x->state == S_PENDING) x->state = S_RUNNING;
}

static session_t *find(const ember__csessions_t *s, const char *id) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->v[i]->id, id) == 0) return s->v[i];
  return NULL;
}

static host_entry_t *find_host(session_t *x, const char *host) {
  for (size_t i = 0; i < x->nhosts; i++)
    if (host != NULL && strcmp(x->hosts[i].host, host) == 0) return &x->hosts[i];
  return NULL;
}

/* A session another collector (or this one before a restart) started,
 * from its CREATED event: the same state machine as our own, without the
 * pids (only STOP is ever sent for it, and STOP needs none). */
static int adopt(ember__csessions_t *s, const ember_event_t *e, int64_t t) {
  if (strlen(e->session_id) != ID_HEX) return 0; /* not an id a collector makes */
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    session_t **v = ember_realloc(s->v, cap * sizeof *v);
    if (v == NULL) return -ENOMEM;
    s->v = v;
    s->cap = cap;
  }
  session_t *x = ember_calloc(1, sizeof *x);
  if (x == NULL) return -ENOMEM;
  memcpy(x->id, e->session_id, ID_HEX + 1);
  int rc = dup_opt(e->worker, &x->worker);
  if (rc == 0) rc = dup_opt(e->version, &x->version);
  if (rc == 0) rc = dup_opt(e->actor, &x->actor);
  if (rc == 0) rc = dup_opt(e->select_host, &x->host);
  if (rc == 0) {
    x->hosts = ember_calloc(e->nhosts, sizeof *x->hosts);
    if (x->hosts == NULL) rc = -ENOMEM;
  }
  for (size_t i = 0; i < e->nhosts && rc == 0; i++) {
    if (find_host(x, e->hosts[i]) != NULL) continue;
    host_entry_t *h = &x->hosts[x->nhosts];
    h->host = ember_strdup(e->hosts[i]);
    if (h->host == NULL)
      rc = -ENOMEM;
    else
      x->nhosts++;
  }
  if (rc != 0) {
    session_free(x);
    return rc;
  }
  x->instances = e->instances;
  x->type = e->type;
  x->duration_ms = e->duration_ms;
  x->hz = e->hz;
  x->created_ns = e->created_ns ? e->created_ns : t;
  x->state = S_PENDING;
  s->v[s->n++] = x;
  if (s->m_active != NULL) ember_metric_set(s->m_active, (double)active_count(s));
  return 0;
}

/* A result of the session stored (by this instance or, through STORED,
 * by any): counted once per (agent, seq). */
static void add_result(ember__csessions_t *s, session_t *x, const char *host, const char *agent,
                       uint64_t seq, uint64_t samples, int64_t t) {
  host_entry_t *h = find_host(x, host);
  if (h == NULL || finished(x)) return;
  for (size_t i = 0; i < h->nseen; i++)
    if (h->seen[i].seq == seq && strcmp(h->seen[i].agent, agent ? agent : "") == 0) return;
  if (h->nseen < MAX_SEEN) {
    snprintf(h->seen[h->nseen].agent, sizeof h->seen[0].agent, "%s", agent ? agent : "");
    h->seen[h->nseen++].seq = seq;
  }
  h->result_samples += samples;
  settle(s, x, t);
}

int ember__csessions_event(ember__csessions_t *s, const void *data, size_t len, char *errbuf,
                           size_t errbuf_size) {
  if (s == NULL) return -EINVAL;
  count(s->m_events, 1);
  ember_event_t e;
  int rc = ember_codec_decode_event(data, len, &e, errbuf, errbuf_size);
  if (rc != 0) {
    count(s->m_malformed, 1);
    return rc;
  }
  int64_t now = ember_time_now_ns();
  /* The event's own time (bounded by now): replayed after a restart, a
   * session gets the times it had. */
  int64_t t = e.at_ns > 0 && e.at_ns < now ? e.at_ns : now;
  pthread_mutex_lock(&s->mu);
  session_t *x = find(s, e.session_id);
  switch (e.state) {
  case EMBER_EV_CREATED:
    /* Our own comes back too: already known. */
    if (x == NULL) rc = adopt(s, &e, t);
    break;
  case EMBER_EV_CANCEL_REQUESTED:
    /* The collector that was asked sent the STOPs; nothing goes out here. */
    if (x != NULL && !finished(x)) {
      x->cancel_requested = true;
      settle(s, x, t);
    }
    break;
  case EMBER_EV_STORED:
    if (x != NULL) add_result(s, x, e.host, e.agent_id, e.result_seq, e.samples, t);
    break;
  case EMBER_EV_ACCEPTED:
  case EMBER_EV_RUNNING:
  case EMBER_EV_DONE:
  case EMBER_EV_FAILED:
  case EMBER_EV_REJECTED: {
    host_entry_t *h = x ? find_host(x, e.host) : NULL;
    /* An unknown session, or a host it was not routed to: not ours to
     * follow. Answers after a host's last word do not reopen it. */
    if (h == NULL || finished(x) || host_answered(h)) break;
    h->state = (int)e.state;
    if (e.targets) h->targets = e.targets;
    if (e.hz) h->hz = e.hz;
    /* Progress only grows; DONE gives the final count of the result. */
    if (e.samples > h->samples || e.state == EMBER_EV_DONE) h->samples = e.samples;
    if (e.message != NULL) {
      char *m = ember_strdup(e.message);
      if (m != NULL) {
        ember_free(h->message);
        h->message = m;
      }
    }
    if (x->started_ns == 0 && (e.state == EMBER_EV_ACCEPTED || e.state == EMBER_EV_RUNNING))
      x->started_ns = t;
    settle(s, x, t);
    break;
  }
  }
  pthread_mutex_unlock(&s->mu);
  ember_event_clear(&e);
  return rc == -ENOMEM ? rc : 0;
}

/* The sample count of a result, comparable with what its agent reported:
 * CPU samples when it has them, else its first value. */
static uint64_t result_samples(const ember_profile_t *p) {
  int vi = ember_profile_type_index(p, EMBER_VT_CPU_SAMPLES);
  int64_t t = ember_profile_total(p, vi >= 0 ? (size_t)vi : 0);
  return t > 0 ? (uint64_t)t : 0;
}

void ember__csessions_result(ember__csessions_t *s, const ember_profile_t *p) {
  const char *sid = ember_profile_session_id(p);
  if (s == NULL || sid == NULL) return;
  const char *agent = ember_profile_agent_id(p);
  const char *host = ember_profile_labels(p)->host;
  uint64_t seq = ember_profile_seq(p), samples = result_samples(p);
  int64_t now = ember_time_now_ns();
  pthread_mutex_lock(&s->mu);
  session_t *x = find(s, sid);
  if (x != NULL) add_result(s, x, host, agent, seq, samples, now);
  pthread_mutex_unlock(&s->mu);
  /* Every collector counts it (whether this one knows the session yet or
   * not); a result stored twice is counted once by (agent, seq). */
  if (host != NULL && host[0] != '\0') {
    ember_event_t e = {.state = EMBER_EV_STORED,
                       .session_id = (char *)(uintptr_t)sid,
                       .host = (char *)(uintptr_t)host,
                       .agent_id = (char *)(uintptr_t)agent,
                       .samples = samples,
                       .result_seq = seq,
                       .at_ns = now};
    send_event(s, &e);
  }
}

void ember__csessions_caught_up(ember__csessions_t *s) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  if (!s->live) EMBER_INFO(LOG, "ember.events read to its end: %zu sessions known", s->n);
  s->live = true;
  pthread_mutex_unlock(&s->mu);
}

void ember__csessions_tick(ember__csessions_t *s, int64_t now_ns) {
  if (s == NULL) return;
  pthread_mutex_lock(&s->mu);
  if (!s->live && now_ns - s->born_ns > LIVE_FALLBACK_NS) {
    EMBER_WARN(LOG, "the end of ember.events was not seen in %lld s: deadlines apply from now",
               (long long)(LIVE_FALLBACK_NS / 1000 / MS_NS));
    s->live = true;
  }
  size_t k = 0;
  for (size_t i = 0; i < s->n; i++) {
    session_t *x = s->v[i];
    settle(s, x, now_ns);
    if (finished(x) && now_ns - x->finished_ns > s->keep_ns) {
      session_free(x);
      continue;
    }
    s->v[k++] = x;
  }
  s->n = k;
  pthread_mutex_unlock(&s->mu);
}

int ember__csessions_result_ready(ember__csessions_t *s, const char *id, ember_session_type_t *type,
                                  char *errbuf, size_t errbuf_size) {
  if (s == NULL || id == NULL) return -EINVAL;
  pthread_mutex_lock(&s->mu);
  session_t *x = find(s, id);
  int rc = EMBER_ENOTFOUND;
  if (x != NULL) {
    *type = x->type;
    rc = 0;
    if (x->state != S_DONE && x->state != S_CANCELLED) {
      snprintf(errbuf, errbuf_size, "session %s is %s: its profile is ready once it is done", id,
               state_names[x->state]);
      rc = -EAGAIN;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int ember__csessions_cancel(ember__csessions_t *s, const char *id, int64_t now_ns, json_t **out,
                            char *errbuf, size_t errbuf_size) {
  if (s == NULL || id == NULL || out == NULL) return -EINVAL;
  pthread_mutex_lock(&s->mu);
  session_t *x = find(s, id);
  int rc = EMBER_ENOTFOUND;
  if (x != NULL && finished(x)) {
    snprintf(errbuf, errbuf_size, "session %s is already %s", id, state_names[x->state]);
    rc = -EALREADY;
  } else if (x != NULL) {
    x->cancel_requested = true;
    send_cancel(s, x, now_ns);
    /* A host that got START may still act on it within its TTL, so every
     * host that has not answered gets STOP, started or not. */
    for (size_t i = 0; i < x->nhosts; i++)
      if (!host_answered(&x->hosts[i])) send_command(s, x, &x->hosts[i], EMBER_CMD_STOP, now_ns);
    settle(s, x, now_ns);
    *out = session_json(x, now_ns);
    rc = *out ? 0 : -ENOMEM;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

/* ---- JSON -------------------------------------------------------------- */

static int64_t to_ms(int64_t ns) { return ns / MS_NS - (ns % MS_NS < 0); }

static json_t *ms_or_null(int64_t ns) { return ns ? json_integer(to_ms(ns)) : json_null(); }

static const char *host_state_name(int st) {
  return st == H_SENT ? "sent" : ember_event_state_name((ember_event_state_t)st);
}

static json_t *session_json(const session_t *x, int64_t now_ns) {
  json_t *o = json_object(), *hosts = json_array(), *result = NULL;
  int rc = o && hosts ? 0 : -ENOMEM;
  if (rc != 0) {
    json_decref(o);
    json_decref(hosts);
    return NULL;
  }
  rc = ember__json_set(o, "id", json_string(x->id));
  if (rc == 0) rc = ember__json_set(o, "state", json_string(state_names[x->state]));
  if (rc == 0) rc = ember__json_set(o, "worker", ember__json_str(x->worker));
  if (rc == 0) rc = ember__json_set(o, "version", ember__json_str(x->version));
  if (rc == 0) rc = ember__json_set(o, "actor", ember__json_str(x->actor));
  if (rc == 0) rc = ember__json_set(o, "host", ember__json_str(x->host));
  if (rc == 0)
    rc = ember__json_set(o, "instances", x->instances ? json_integer(x->instances) : json_null());
  if (rc == 0)
    rc =
        ember__json_set(o, "type", json_string(x->type == EMBER_SESSION_MEMORY ? "memory" : "cpu"));
  if (rc == 0) rc = ember__json_set(o, "duration_ms", json_integer(x->duration_ms));
  if (rc == 0) rc = ember__json_set(o, "hz", json_integer(x->hz));
  if (rc == 0) rc = ember__json_set(o, "created_ms", json_integer(to_ms(x->created_ns)));
  if (rc == 0) rc = ember__json_set(o, "started_ms", ms_or_null(x->started_ns));
  if (rc == 0) rc = ember__json_set(o, "ends_ms", json_integer(to_ms(ends_ns(x))));
  if (rc == 0) rc = ember__json_set(o, "finished_ms", ms_or_null(x->finished_ns));
  if (rc == 0) rc = ember__json_set(o, "cancel_requested", json_boolean(x->cancel_requested));
  uint64_t targets = 0, samples = 0;
  for (size_t i = 0; i < x->nhosts && rc == 0; i++) {
    const host_entry_t *h = &x->hosts[i];
    json_t *ho = json_object(), *pids = json_array();
    rc = ember__json_push(hosts, ho);
    if (rc == 0) rc = ember__json_set(ho, "host", ember__json_str(h->host));
    if (rc == 0) rc = ember__json_set(ho, "state", json_string(host_state_name(h->state)));
    if (rc == 0)
      rc = ember__json_set(ho, "pids", pids);
    else
      json_decref(pids);
    for (size_t k = 0; k < h->npids && rc == 0; k++)
      rc = ember__json_push(pids, json_integer(h->pids[k]));
    if (rc == 0) rc = ember__json_set(ho, "targets", json_integer(h->targets));
    if (rc == 0) rc = ember__json_set(ho, "samples", json_integer((json_int_t)h->samples));
    if (rc == 0) rc = ember__json_set(ho, "hz", json_integer(h->hz));
    if (rc == 0) rc = ember__json_set(ho, "message", ember__json_str(h->message));
    targets += h->targets;
    samples += h->samples;
  }
  if (rc == 0)
    rc = ember__json_set(o, "hosts", hosts);
  else
    json_decref(hosts);
  if (rc == 0) rc = ember__json_set(o, "targets", json_integer((json_int_t)targets));
  if (rc == 0) rc = ember__json_set(o, "samples", json_integer((json_int_t)samples));
  double progress = 0;
  if (finished(x)) {
    progress = 1;
  } else if (x->started_ns != 0 && x->duration_ms > 0) {
    progress = (double)(now_ns - x->started_ns) / ((double)x->duration_ms * 1e6);
    progress = progress < 0 ? 0 : progress > 1 ? 1 : progress;
  }
  if (rc == 0) rc = ember__json_set(o, "progress", json_real(progress));
  if (rc == 0 && (x->state == S_DONE || x->state == S_CANCELLED)) {
    result = json_object();
    static const char *const fmts[] = {"tree", "pprof", "folded", "speedscope", "top"};
    for (size_t i = 0; i < 5 && result != NULL && rc == 0; i++) {
      char url[128];
      snprintf(url, sizeof url, "/api/v1/sessions/%s/profile?format=%s", x->id, fmts[i]);
      rc = ember__json_set(result, fmts[i], json_string(url));
    }
    if (rc == 0)
      rc = ember__json_set(o, "result", result);
    else
      json_decref(result);
  } else if (rc == 0) {
    rc = ember__json_set(o, "result", json_null());
  }
  if (rc != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

int ember__csessions_get(ember__csessions_t *s, const char *id, int64_t now_ns, json_t **out) {
  if (s == NULL || id == NULL || out == NULL) return -EINVAL;
  pthread_mutex_lock(&s->mu);
  session_t *x = find(s, id);
  int rc = EMBER_ENOTFOUND;
  if (x != NULL) {
    settle(s, x, now_ns);
    *out = session_json(x, now_ns);
    rc = *out ? 0 : -ENOMEM;
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

int ember__csessions_list(ember__csessions_t *s, int64_t now_ns, json_t **out) {
  if (s == NULL || out == NULL) return -EINVAL;
  json_t *doc = json_object(), *arr = json_array();
  int rc = ember__json_set(doc, "sessions", arr);
  pthread_mutex_lock(&s->mu);
  for (size_t i = s->n; i > 0 && rc == 0; i--) {
    settle(s, s->v[i - 1], now_ns);
    rc = ember__json_push(arr, session_json(s->v[i - 1], now_ns));
  }
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) {
    json_decref(doc);
    return rc;
  }
  *out = doc;
  return 0;
}
