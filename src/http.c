/* The HTTP server layer (http.h): everything between the socket and a
 * handler. Handlers never see libmicrohttpd; they get a request and fill
 * an answer, and this file turns the answer into a response.
 *
 * Error bodies are built in a fixed stack buffer, so an error can be
 * reported even when allocation fails. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ember/log.h"
#include "ember/parse.h"
#include "http.h"
#include "json.h"

#define DEFAULT_BODY    ((size_t)64 << 10)
#define STOP_WAIT_NS    (10LL * 1000000000LL)
#define MS_NS           1000000LL
#define DEFAULT_CONNS   256u
#define DEFAULT_PER_IP  32u
#define DEFAULT_TIMEOUT 10000u
#define DEFAULT_ANSWER  60000u
/* A connection sending its answer may be closed to make room once it has
 * been sending this long: a slow reader, not one about to finish. */
#define MIN_SEND_NS (1000LL * MS_NS)
/* libmicrohttpd's own connection limit is ours plus this much, so that
 * connections we have closed but libmicrohttpd has not yet cleaned up do
 * not make it refuse the connection that closed them. */
#define SLACK 32u
/* One log line per reason per this long; the rest are counted. */
#define LOG_EVERY_NS (10LL * 1000000000LL)
/* Our limits on a request's head, below libmicrohttpd's memory for it
 * (MEMORY), so that requests past them get our JSON 414/431 rather than
 * libmicrohttpd's own HTML answer. */
#define MAX_URL    8192u
#define MAX_HEADER ((size_t)16 << 10)
#define MEMORY     ((size_t)64 << 10)

/* A connection's phase, for the deadline and for choosing which to close
 * to make room: PH_RECV (its request is arriving, or it is idle between
 * requests), PH_ANSWER (the handler is at work), PH_SEND (the answer is
 * queued and going out, as fast as the client reads it). */
enum { PH_FREE, PH_RECV, PH_ANSWER, PH_SEND };

typedef struct slot {
  struct MHD_Connection *c;
  MHD_socket fd;
  unsigned char addr[16]; /* IPv4 (mapped) or IPv6 address: the per-client key */
  int phase;
  bool closing;        /* shut down by us; libmicrohttpd will clean it up */
  int64_t since_ns;    /* when the current phase began */
  int64_t deadline_ns; /* when the current phase must be over */
} slot_t;

/* Why a connection or request was refused or cut, for metrics and logs. */
enum {
  R_PER_IP,    /* the client address already holds max_per_ip connections */
  R_FULL,      /* max_connections are open and every one is being answered */
  R_EVICTED,   /* closed to make room: the oldest still sending its request, or a slow reader */
  R_DEADLINE,  /* the request did not arrive within request_timeout */
  R_ANSWER,    /* the answer was not taken within answer_timeout */
  R_MALFORMED, /* libmicrohttpd answered the request itself (malformed, too large) */
  R_HOST,      /* a Host this server does not answer to (DNS rebinding) */
  R_ORIGIN,    /* a state-changing request from another origin (CSRF) */
  R_TOO_LARGE, /* headers, URL or body past our limits (414, 431, 413) */
  R_BAD,       /* a request we refused as malformed (400) */
  R_NREASONS
};

static const char *const reason_names[R_NREASONS] = {
    "refused_per_ip",    "refused_full", "closed_slow",    "closed_deadline",   "closed_answer",
    "refused_malformed", "refused_host", "refused_origin", "refused_too_large", "refused_bad"};
static const char *const reason_help[R_NREASONS] = {
    "Connections refused because their client address held max_per_ip already.",
    "Connections refused because every connection was busy being answered.",
    "Connections closed to make room: the oldest still sending a request, or reading an answer.",
    "Connections closed because their request did not arrive within the request timeout.",
    "Connections closed because their answer was not taken within the answer timeout.",
    "Requests libmicrohttpd refused itself: malformed, or headers larger than it holds.",
    "Requests refused because their Host is not one this server answers to.",
    "State-changing requests refused because they came from another origin.",
    "Requests refused because their URL, headers or body were too large.",
    "Requests refused as malformed."};

struct ember__http {
  struct MHD_Daemon *d;
  ember__http_handler_fn handler;
  void *ctx;
  const char *log;
  char post_oom; /* its address marks a POST whose body buffer could not be made */
  size_t max_body, max_response;
  size_t (*big_body)(void *ctx, const char *method, const char *url);
  atomic_bool big_busy; /* a request holds a body over max_body */
  uint16_t port;
  atomic_bool stopping;
  atomic_long inflight; /* requests seen whose response is not yet done */
  ember_metric_t *m_requests, *m_2xx, *m_4xx, *m_5xx, *m_seconds, *m_conns;
  ember_metric_t *m_reason[R_NREASONS];
  ember_log_limit_t logs[R_NREASONS]; /* one line per LOG_EVERY_NS per reason */

  /* Connections: a fixed table (nslots = libmicrohttpd's limit), guarded
   * by mu. A slot is freed in libmicrohttpd's "closed" notification, which
   * runs before it closes the socket: so while mu is held, the fd of a
   * used slot is still that connection's, and shutting it down is safe
   * from any thread. */
  pthread_mutex_t mu;
  pthread_cond_t cv; /* wakes the reaper */
  slot_t *slots;
  unsigned nslots, max_conns, max_per_ip;
  int64_t timeout_ns, answer_ns;
  bool reaper_started, reaper_stop;
  /* Host checks: any_host, or these names (lower case, no port) besides
   * localhost and IP addresses. */
  bool any_host;
  char **hosts;
  size_t nhosts;
  const char *hosts_key;
  pthread_t reaper;
};

struct ember__http_req {
  struct MHD_Connection *c;
  const char *url, *method;
  const char *in; /* the request body, NUL-terminated; NULL = none */
  size_t in_len;
  bool in_too_big;
  int64_t now_ns;
};

/* ---------------------------------------------------------------- log -- */

/* Bad input is logged through the shared limiter (log.h), one line per
 * LOG_EVERY_NS per reason, with how many lines were left out since. */
static void ratelog(ember__http_t *h, int reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void ratelog(ember__http_t *h, int reason, const char *fmt, ...) {
  char line[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  ember_log_limited(&h->logs[reason], EMBER_LOG_WARN, h->log, "%s", line);
}

static void refused(ember__http_t *h, int reason) { ember_metric_add(h->m_reason[reason], 1); }

/* libmicrohttpd's messages. Most are about one connection and are noise
 * at the default level; the ones that say it answered a request itself
 * (a malformed request, headers past its memory) are bad input: counted
 * and logged rate-limited. The match is on libmicrohttpd's wording: if a
 * version words it otherwise, those requests are still answered, only not
 * counted. */
/* libmicrohttpd's own format strings: the attribute tells clang so. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
  ember__http_t *h = cls;
  char line[300];
  vsnprintf(line, sizeof line, fmt, ap);
  line[strcspn(line, "\n")] = '\0';
  static const char answered[] = "Error processing request (HTTP response code is ";
  if (strncmp(line, answered, sizeof answered - 1) == 0) {
    refused(h, R_MALFORMED);
    ratelog(h, R_MALFORMED, "libmicrohttpd refused a request itself: %s", line);
    return;
  }
  EMBER_DEBUG(h->log, "libmicrohttpd: %s", line);
}

/* -------------------------------------------------------- connections -- */

/* The per-client key: IPv4 as an IPv4-mapped IPv6 address, so that a
 * dual-stack listener counts one client once; other IPv6 addresses by
 * their /64, the least a site is given, so that one client cannot be
 * 2^64 clients. */
static void addr_key(const struct sockaddr *sa, unsigned char key[16]) {
  memset(key, 0, 16);
  if (sa == NULL) return;
  if (sa->sa_family == AF_INET) {
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)(const void *)sa;
    key[10] = key[11] = 0xff;
    memcpy(key + 12, &v4->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    memcpy(key, a6, IN6_IS_ADDR_V4MAPPED(a6) ? 16 : 8);
  }
}

static void addr_text(const struct sockaddr *sa, char *out, size_t size) {
  snprintf(out, size, "?");
  if (sa == NULL) return;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, out,
              (socklen_t)size);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out,
              (socklen_t)size);
}

/* Close a connection from outside libmicrohttpd: shutting the socket down
 * makes its thread see the end of the stream and clean up. mu held. */
static void cut(ember__http_t *h, slot_t *s) {
  s->closing = true;
  shutdown(s->fd, SHUT_RDWR);
  ember_metric_add(h->m_conns, -1);
}

/* Of two candidates to close to make room, the better: one still sending
 * its request (or idle) before one reading its answer; the oldest of a
 * kind first. A reader only once it has been at it MIN_SEND_NS. NULL:
 * neither may be closed. */
static slot_t *pick_victim(slot_t *best, slot_t *s, int64_t now) {
  if (s->phase == PH_SEND && now - s->since_ns < MIN_SEND_NS) return best;
  if (s->phase != PH_RECV && s->phase != PH_SEND) return best;
  if (best == NULL) return s;
  if (s->phase != best->phase) return s->phase == PH_RECV ? s : best;
  return s->since_ns < best->since_ns ? s : best;
}

/* Accept policy, before libmicrohttpd takes a connection. Limits make
 * room rather than refuse, so that slow clients cannot lock others out:
 * when a client address holds max_per_ip, its own oldest connection
 * still sending its request (or else its slowest reader) is closed; when
 * max_conns are open, the same of any address. Only when every one of
 * those connections is being answered is the new one refused. */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
  (void)addrlen;
  ember__http_t *h = cls;
  unsigned char key[16];
  addr_key(addr, key);
  int reason = -1;
  int64_t now = ember_time_mono_ns();
  pthread_mutex_lock(&h->mu);
  unsigned live = 0, same = 0;
  slot_t *victim = NULL, *victim_same = NULL;
  for (unsigned i = 0; i < h->nslots; i++) {
    slot_t *s = &h->slots[i];
    if (s->phase == PH_FREE || s->closing) continue;
    live++;
    victim = pick_victim(victim, s, now);
    if (memcmp(s->addr, key, 16) == 0) {
      same++;
      victim_same = pick_victim(victim_same, s, now);
    }
  }
  slot_t *cut_one = NULL;
  bool per_ip = h->max_per_ip != 0 && same >= h->max_per_ip;
  if (per_ip) {
    if (victim_same != NULL)
      cut_one = victim_same;
    else
      reason = R_PER_IP;
  } else if (live >= h->max_conns) {
    if (victim != NULL)
      cut_one = victim;
    else
      reason = R_FULL;
  }
  int64_t age_ms = 0;
  bool reader = false;
  if (cut_one != NULL) {
    age_ms = (now - cut_one->since_ns) / MS_NS;
    reader = cut_one->phase == PH_SEND;
    cut(h, cut_one);
  }
  pthread_mutex_unlock(&h->mu);
  char who[INET6_ADDRSTRLEN];
  addr_text(addr, who, sizeof who);
  if (cut_one != NULL) {
    refused(h, R_EVICTED);
    if (per_ip)
      ratelog(h, R_EVICTED,
              "%s holds %u connections (the most per client): closed its oldest %s (for %lld ms) "
              "to make room for a new one",
              who, h->max_per_ip, reader ? "reading its answer" : "still sending its request",
              (long long)age_ms);
    else
      ratelog(h, R_EVICTED,
              "all %u connections open: closed the oldest %s (for %lld ms) to make room",
              h->max_conns, reader ? "reading its answer" : "still sending its request",
              (long long)age_ms);
  }
  if (reason < 0) return MHD_YES;
  refused(h, reason);
  if (reason == R_PER_IP)
    ratelog(h, reason,
            "refused a connection from %s: it holds %u already (the most per client), all being "
            "answered",
            who, h->max_per_ip);
  else
    ratelog(h, reason, "refused a connection from %s: all %u connections are being answered", who,
            h->max_conns);
  return MHD_NO;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  ember__http_t *h = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    int64_t now = ember_time_mono_ns();
    pthread_mutex_lock(&h->mu);
    slot_t *s = NULL;
    for (unsigned i = 0; i < h->nslots && s == NULL; i++) {
      if (h->slots[i].phase == PH_FREE) s = &h->slots[i];
    }
    if (s != NULL) {
      *s = (slot_t){.c = c,
                    .fd = fd ? fd->connect_fd : MHD_INVALID_SOCKET,
                    .phase = PH_RECV,
                    .since_ns = now,
                    .deadline_ns = now + h->timeout_ns};
      addr_key(ad ? ad->client_addr : NULL, s->addr);
      ember_metric_add(h->m_conns, 1);
      /* The reaper may be asleep with nothing to watch. */
      pthread_cond_signal(&h->cv);
    } else if (fd != NULL) {
      /* Cannot happen: there are as many slots as libmicrohttpd takes
       * connections. Without a slot there is no deadline, so close. */
      shutdown(fd->connect_fd, SHUT_RDWR);
    }
    *socket_context = s;
    pthread_mutex_unlock(&h->mu);
  } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    slot_t *s = *socket_context;
    if (s == NULL) return;
    pthread_mutex_lock(&h->mu);
    if (!s->closing) ember_metric_add(h->m_conns, -1);
    s->phase = PH_FREE;
    s->closing = false;
    pthread_mutex_unlock(&h->mu);
    *socket_context = NULL;
  }
}

static slot_t *slot_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *i =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return i ? i->socket_context : NULL;
}

/* Start a connection's next phase: PH_ANSWER when its request is in,
 * PH_SEND when its answer is queued (the answer's deadline still holds),
 * PH_RECV when a request is done and the next may come. */
static void set_phase(ember__http_t *h, struct MHD_Connection *c, int phase) {
  slot_t *s = slot_of(c);
  if (s == NULL) return;
  int64_t now = ember_time_mono_ns();
  pthread_mutex_lock(&h->mu);
  s->phase = phase;
  s->since_ns = now;
  if (phase != PH_SEND) s->deadline_ns = now + (phase == PH_ANSWER ? h->answer_ns : h->timeout_ns);
  pthread_mutex_unlock(&h->mu);
}

/* The reaper: closes every connection past its deadline. Trickling bytes
 * cannot move a deadline; only the phases do. It logs with mu released:
 * a log write that blocks (a full stderr pipe) must not hold up every
 * libmicrohttpd thread waiting for mu. */
static void *reaper_main(void *arg) {
  ember__http_t *h = arg;
  pthread_mutex_lock(&h->mu);
  while (!h->reaper_stop) {
    int64_t now = ember_time_mono_ns(), next = now + 1000 * MS_NS;
    /* Per reason (R_DEADLINE, R_ANSWER): how many were cut, the oldest. */
    long ncut[2] = {0, 0};
    int64_t age_ms[2] = {0, 0};
    for (unsigned i = 0; i < h->nslots; i++) {
      slot_t *s = &h->slots[i];
      if (s->phase == PH_FREE || s->closing) continue;
      if (s->deadline_ns > now) {
        if (s->deadline_ns < next) next = s->deadline_ns;
        continue;
      }
      int k = s->phase == PH_RECV ? 0 : 1;
      int64_t age = (now - s->since_ns) / MS_NS;
      if (age > age_ms[k]) age_ms[k] = age;
      ncut[k]++;
      cut(h, s);
    }
    if (ncut[0] + ncut[1] > 0) {
      pthread_mutex_unlock(&h->mu);
      for (int k = 0; k < 2; k++) {
        if (ncut[k] == 0) continue;
        int reason = k == 0 ? R_DEADLINE : R_ANSWER;
        ember_metric_add(h->m_reason[reason], (double)ncut[k]);
        ratelog(h, reason, "closed %ld connection(s), the oldest after %lld ms: %s", ncut[k],
                (long long)age_ms[k],
                k == 0 ? "the request did not arrive in time (a slow or idle client)"
                       : "the answer was not taken in time (a slow reader)");
      }
      pthread_mutex_lock(&h->mu);
      if (h->reaper_stop) break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t wait = next - now + 5 * MS_NS;
    ts.tv_sec += (time_t)(wait / 1000000000LL);
    ts.tv_nsec += (long)(wait % 1000000000LL);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

/* -------------------------------------------------- Host and Origin -- */

/* Split "name", "name:port", "[v6]" or "[v6]:port" into the host (without
 * brackets, lower case, no trailing dot) and the port (0 = none). False
 * when it is not of that form. */
static bool split_authority(const char *in, size_t len, char *host, size_t size, unsigned *port) {
  const char *end = in + len, *colon = NULL;
  const char *hs = in, *he;
  if (len > 0 && in[0] == '[') {
    const char *rb = memchr(in, ']', len);
    if (rb == NULL) return false;
    hs = in + 1;
    he = rb;
    if (rb + 1 < end) {
      if (rb[1] != ':') return false;
      colon = rb + 1;
    }
  } else {
    colon = memchr(in, ':', len);
    he = colon ? colon : end;
    if (colon != NULL && memchr(colon + 1, ':', (size_t)(end - colon - 1)) != NULL) return false;
  }
  *port = 0;
  if (colon != NULL) {
    char digits[8];
    size_t dl = (size_t)(end - colon - 1);
    uint64_t p;
    if (dl == 0 || dl >= sizeof digits) return false;
    memcpy(digits, colon + 1, dl);
    digits[dl] = '\0';
    if (ember_parse_u64(digits, 1, 65535, &p) != 0) return false;
    *port = (unsigned)p;
  }
  size_t hl = (size_t)(he - hs);
  if (hl > 0 && hs[hl - 1] == '.') hl--;
  if (hl == 0 || hl >= size) return false;
  for (size_t i = 0; i < hl; i++) {
    char ch = hs[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '.' || ch == '_' || (hs != in && ch == ':');
    if (!ok) return false;
    host[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch - 'A' + 'a') : ch;
  }
  host[hl] = '\0';
  /* In brackets only an IPv6 address. */
  unsigned char a6[16];
  return hs == in || inet_pton(AF_INET6, host, a6) == 1;
}

static bool is_ip(const char *host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static bool listed(const ember__http_t *h, const char *host) {
  for (size_t i = 0; i < h->nhosts; i++) {
    if (strcmp(h->hosts[i], host) == 0) return true;
  }
  return false;
}

/* A Host this server answers to. IP addresses always: a page can only
 * have an address as its origin if the browser went to that address, so
 * an address cannot be rebound to us. localhost (and *.localhost, which
 * browsers resolve to the loopback themselves) always. Names otherwise
 * only when listed: a page of evil.example whose name the attacker has
 * pointed at 127.0.0.1 sends Host: evil.example. */
static bool host_ok(const ember__http_t *h, const char *host) {
  size_t n = strlen(host);
  if (strcmp(host, "localhost") == 0 || (n > 10 && strcmp(host + n - 10, ".localhost") == 0))
    return true;
  return is_ip(host) || listed(h, host);
}

/* Methods that change something: these must come from our own origin. */
static bool changes_state(const char *method) {
  return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
         strcmp(method, "OPTIONS") != 0;
}

/* 0, or the status of a refusal written into `a`. Browsers send Origin
 * with every POST and Sec-Fetch-Site with every request: a form or fetch
 * from another site's page carries that site's origin. Clients that send
 * neither (curl, the CLI) are not browsers and cannot be forged into
 * sending a request. */
static unsigned check_origin(ember__http_t *h, struct MHD_Connection *c, const char *method,
                             const char *host, unsigned port, ember__http_answer_t *a) {
  if (!changes_state(method)) return 0;
  const char *site = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Site");
  const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
  if (site != NULL && strcasecmp(site, "cross-site") == 0 && origin == NULL)
    return ember__http_fail(a, 403,
                            "cross-site %.16s refused: this request came from another site's page "
                            "(Sec-Fetch-Site: cross-site), a guard against request forgery",
                            method);
  if (origin == NULL) return 0;
  char ohost[256];
  unsigned oport = 0, dflt = 0;
  const char *rest = NULL;
  if (strncasecmp(origin, "http://", 7) == 0) {
    rest = origin + 7;
    dflt = 80;
  } else if (strncasecmp(origin, "https://", 8) == 0) {
    rest = origin + 8;
    dflt = 443;
  }
  bool parsed = rest != NULL && split_authority(rest, strlen(rest), ohost, sizeof ohost, &oport);
  if (parsed) {
    if (oport == 0) oport = dflt;
    /* Same origin: our own page (the dashboard). A Host without a port
     * is on the default port of the origin's scheme (behind a proxy). */
    if (host != NULL && strcmp(ohost, host) == 0 && (port != 0 ? port : dflt) == oport) return 0;
    /* A name listed in allowed_hosts is trusted as an origin too, for a
     * proxy that passes the backend's address as Host. */
    if (listed(h, ohost)) return 0;
  }
  return ember__http_fail(a, 403,
                          "cross-origin %.16s refused: Origin %.128s is not this server (a guard "
                          "against request forgery); list a trusted origin's host in %s",
                          method, origin, h->hosts_key);
}

/* The length of the query string, near enough (libmicrohttpd hands the
 * path without it). */
static enum MHD_Result add_arg_len(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  (void)kind;
  *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 2;
  return MHD_YES;
}

/* Checks made as soon as a request's head is in, before its body is
 * read: sizes, Host, Origin. 0, or the status of a refusal in `a`.
 * *body_max gets the request's bound; *big says it took h->big_busy. */
static unsigned check_head(ember__http_t *h, struct MHD_Connection *c, const char *url,
                           const char *method, const char *version, ember__http_answer_t *a,
                           int *reason, size_t *body_max, bool *big) {
  *reason = R_TOO_LARGE;
  size_t url_len = strlen(url);
  MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_arg_len, &url_len);
  if (url_len > MAX_URL)
    return ember__http_fail(a, 414, "the URL is longer than %u bytes", MAX_URL);
  const union MHD_ConnectionInfo *hs =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  if (hs != NULL && hs->header_size > MAX_HEADER)
    return ember__http_fail(a, 431, "the request's headers are larger than %zu bytes", MAX_HEADER);
  const char *clen = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  uint64_t n = 0;
  bool has_len = clen != NULL && ember_parse_u64(clen, 0, UINT64_MAX, &n) == 0;
  size_t limit = h->max_body;
  size_t want =
      h->big_body != NULL && strcmp(method, "POST") == 0 ? h->big_body(h->ctx, method, url) : 0;
  if (want > limit) {
    if (!has_len)
      return ember__http_fail(a, 411, "a body of more than %zu bytes needs a Content-Length",
                              h->max_body);
    limit = want;
  }
  if (has_len && n > limit)
    return ember__http_fail(a, 413, "the request body is larger than %zu bytes", limit);
  *body_max = limit;
  *reason = R_BAD;
  const char *hosthdr = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
  char host[256];
  unsigned port = 0;
  /* libmicrohttpd 0.9.75 takes HTTP/1.2 to 1.9 as 1.1: all but 1.0 need
   * Host. */
  if (hosthdr == NULL && strcmp(version, MHD_HTTP_VERSION_1_0) != 0)
    return ember__http_fail(a, 400, "an HTTP/1.1 request needs a Host header");
  if (hosthdr != NULL && !split_authority(hosthdr, strlen(hosthdr), host, sizeof host, &port))
    return ember__http_fail(a, 400, "the Host header \"%.128s\" is not HOST or HOST:PORT", hosthdr);
  *reason = R_HOST;
  if (hosthdr != NULL && !h->any_host && !host_ok(h, host))
    return ember__http_fail(a, 421,
                            "this server does not answer to the host \"%.128s\" (a guard against "
                            "DNS rebinding): use its address or localhost, or add the name to %s",
                            host, h->hosts_key);
  *reason = R_ORIGIN;
  unsigned st = check_origin(h, c, method, hosthdr != NULL ? host : NULL, port, a);
  if (st != 0 || n <= h->max_body) return st;
  *reason = R_TOO_LARGE;
  bool idle = false;
  if (!atomic_compare_exchange_strong(&h->big_busy, &idle, true))
    return ember__http_fail(a, 503,
                            "another request of more than %zu bytes is being read: send this one "
                            "again when it is done",
                            h->max_body);
  *big = true;
  return 0;
}

/* "a.example, b.example:80" into h->hosts (lower case, ports dropped:
 * a name is allowed on any port, as addresses are). */
static int parse_hosts(ember__http_t *h, const char *list, char *errbuf, size_t errbuf_size) {
  if (list == NULL) return 0;
  size_t cap = 1;
  /* Names are split on commas and spaces both: count both. */
  for (const char *p = list; *p; p++) cap += *p == ',' || *p == ' ';
  h->hosts = ember_calloc(cap, sizeof *h->hosts);
  if (h->hosts == NULL) return -ENOMEM;
  const char *p = list;
  while (*p != '\0') {
    while (*p == ' ' || *p == ',') p++;
    size_t n = strcspn(p, ", ");
    if (n == 0) break;
    if (n == 1 && p[0] == '*') {
      h->any_host = true;
    } else {
      char host[256];
      unsigned port;
      if (!split_authority(p, n, host, sizeof host, &port)) {
        snprintf(errbuf, errbuf_size,
                 "%s: '%.*s' is not a host name or address (list them with commas: "
                 "ember.example.com,10.0.0.5; * for any)",
                 h->hosts_key, (int)(n > 64 ? 64 : n), p);
        return EMBER_ECONFIG;
      }
      h->hosts[h->nhosts] = ember_strdup(host);
      if (h->hosts[h->nhosts] == NULL) return -ENOMEM;
      h->nhosts++;
    }
    p += n;
  }
  return 0;
}

static void free_hosts(ember__http_t *h) {
  for (size_t i = 0; i < h->nhosts; i++) ember_free(h->hosts[i]);
  ember_free(h->hosts);
}

/* ------------------------------------------------------------ request -- */

const char *ember__http_method(const ember__http_req_t *q) { return q->method; }
const char *ember__http_url(const ember__http_req_t *q) { return q->url; }
int64_t ember__http_now_ns(const ember__http_req_t *q) { return q->now_ns; }

const char *ember__http_header(const ember__http_req_t *q, const char *name) {
  return MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, name);
}

typedef struct args_walk {
  bool (*fn)(void *cls, const char *key, const char *value);
  void *cls;
} args_walk_t;

static enum MHD_Result each_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
  (void)kind;
  args_walk_t *w = cls;
  return w->fn(w->cls, key, value) ? MHD_YES : MHD_NO;
}

void ember__http_args(const ember__http_req_t *q,
                      bool (*fn)(void *cls, const char *key, const char *value), void *cls) {
  args_walk_t w = {fn, cls};
  MHD_get_connection_values(q->c, MHD_GET_ARGUMENT_KIND, each_arg, &w);
}

const char *ember__http_body(const ember__http_req_t *q, size_t *len, bool *too_big) {
  if (len != NULL) *len = q->in_len;
  if (too_big != NULL) *too_big = q->in_too_big;
  return q->in;
}

/* ------------------------------------------------------------- answer -- */

int ember__http_answer_header(ember__http_answer_t *a, const char *name, const char *value) {
  size_t vl = strlen(value);
  if (a->nheaders == EMBER__HTTP_MAX_HEADERS || vl >= sizeof a->hbuf - a->hbuf_len) return -ENOSPC;
  memcpy(a->hbuf + a->hbuf_len, value, vl + 1);
  a->hname[a->nheaders] = name;
  a->hval[a->nheaders++] = a->hbuf_len;
  a->hbuf_len += vl + 1;
  return 0;
}

unsigned ember__http_fail(ember__http_answer_t *a, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->err, sizeof a->err, fmt, ap);
  va_end(ap);
  a->status = status;
  return status;
}

static bool has_header(const ember__http_answer_t *a, const char *name) {
  for (size_t i = 0; i < a->nheaders; i++) {
    if (strcasecmp(a->hname[i], name) == 0) return true;
  }
  return false;
}

/* A 304 (a file the browser has) counts as a success. */
static void count_status(ember__http_t *h, unsigned status) {
  if (status < 400) {
    ember_metric_add(h->m_2xx, 1);
  } else if (status < 500) {
    ember_metric_add(h->m_4xx, 1);
  } else {
    ember_metric_add(h->m_5xx, 1);
  }
}

/* {"error": "..."} in `out` (at least 64 bytes), newline-terminated;
 * returns its length. Built without Ember's allocator, so errors are
 * reported even when it fails: jansson allocates with malloc. */
static size_t error_body(const char *sentence, char *out, size_t size) {
  json_t *j = json_object();
  size_t len = 0;
  if (j != NULL && ember__json_set(j, "error", ember__json_str(sentence)) == 0)
    len = json_dumpb(j, out, size - 2, JSON_COMPACT);
  json_decref(j);
  if (len == 0 || len > size - 2)
    len = (size_t)snprintf(out, size, "{\"error\":\"internal error\"}");
  out[len++] = '\n';
  return len;
}

static enum MHD_Result send_answer(ember__http_t *h, struct MHD_Connection *c,
                                   ember__http_answer_t *a) {
  struct MHD_Response *resp = NULL;
  char errbody[1024];
  if (a->status == 0) ember__http_fail(a, 500, "internal error: the request was not answered");
  bool ok = a->status < 300 || a->status == 304;
  if (ok && a->fixed != NULL) {
    size_t len = a->status == 304 ? 0 : a->fixed_len;
    resp =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)a->fixed, MHD_RESPMEM_PERSISTENT);
  } else if (ok) {
    size_t len = 0;
    char *data = ember_buf_take(&a->body, &len);
    if (data != NULL) {
      resp = MHD_create_response_from_buffer_with_free_callback(len, data, ember_free);
      if (resp == NULL) ember_free(data);
    } else {
      resp = MHD_create_response_from_buffer(0, (void *)(uintptr_t) "", MHD_RESPMEM_PERSISTENT);
    }
  } else {
    size_t len = error_body(a->err, errbody, sizeof errbody);
    resp = MHD_create_response_from_buffer(len, errbody, MHD_RESPMEM_MUST_COPY);
  }
  if (resp == NULL) return MHD_NO;
  if (!ok) {
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (a->status == 405) MHD_add_response_header(resp, "Allow", a->allow ? a->allow : "GET, HEAD");
    if (a->status == 503) MHD_add_response_header(resp, "Connection", "close");
  } else if (a->status != 304) {
    MHD_add_response_header(resp, "Content-Type", a->ctype ? a->ctype : "text/plain");
  }
  for (size_t i = 0; i < a->nheaders; i++)
    MHD_add_response_header(resp, a->hname[i], a->hbuf + a->hval[i]);
  if (!has_header(a, "Cache-Control")) MHD_add_response_header(resp, "Cache-Control", "no-store");
  count_status(h, a->status);
  /* Set before queueing, so that on_completed, however soon it runs,
   * comes after: from here the connection waits only for its reader. */
  set_phase(h, c, PH_SEND);
  enum MHD_Result ret = MHD_queue_response(c, a->status, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* ------------------------------------------------------------- server -- */

/* The state of a POST while its body arrives. */
typedef struct post_body {
  ember_buf_t buf;
  bool too_big;
  bool big; /* holds h->big_busy */
} post_body_t;

static bool is_post_body(const ember__http_t *h, void *con_cls) {
  return con_cls != NULL && con_cls != h && con_cls != &h->post_oom;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  ember__http_t *h = cls;
  if (*con_cls == NULL) {
    /* Counted until on_completed, so stop can wait for the answer to go
     * out, not only for it to be made. */
    atomic_fetch_add(&h->inflight, 1);
    *con_cls = h;
    ember__http_answer_t a = {0};
    int reason;
    size_t body_max = h->max_body;
    bool big = false;
    if (check_head(h, c, url, method, version, &a, &reason, &body_max, &big) != 0) {
      /* Answered before any body is read; libmicrohttpd closes the
       * connection after, so the body never needs to be. */
      ember_metric_add(h->m_requests, 1);
      refused(h, reason);
      char who[INET6_ADDRSTRLEN];
      const union MHD_ConnectionInfo *ad =
          MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      addr_text(ad ? ad->client_addr : NULL, who, sizeof who);
      ratelog(h, reason, "refused %.16s %.128s from %s with %u: %s", method, url, who, a.status,
              a.err);
      set_phase(h, c, PH_ANSWER);
      return send_answer(h, c, &a);
    }
    if (strcmp(method, "POST") == 0) {
      /* Answered once the whole body is in (bounded by max_body); a POST
       * whose buffer cannot be made is answered 500 then. */
      post_body_t *pb = ember_calloc(1, sizeof *pb);
      if (pb != NULL) {
        ember_buf_init(&pb->buf, body_max);
        pb->big = big;
      } else if (big) {
        atomic_store(&h->big_busy, false);
      }
      *con_cls = pb != NULL ? (void *)pb : (void *)&h->post_oom;
      return MHD_YES;
    }
  }
  if (*upload_size != 0) {
    if (is_post_body(h, *con_cls)) {
      post_body_t *pb = *con_cls;
      if (!pb->too_big && ember_buf_append(&pb->buf, upload, *upload_size) != 0) pb->too_big = true;
    }
    *upload_size = 0; /* GET bodies are ignored */
    return MHD_YES;
  }
  int64_t t0 = ember_time_mono_ns();
  ember_metric_add(h->m_requests, 1);
  ember__http_req_t q = {.c = c, .url = url, .method = method, .now_ns = ember_time_now_ns()};
  if (is_post_body(h, *con_cls)) {
    post_body_t *pb = *con_cls;
    q.in = pb->buf.data;
    q.in_len = pb->buf.len;
    q.in_too_big = pb->too_big;
  }
  /* The request is in: from here the answer's deadline holds, for the
   * handler's work and the sending both, and the connection is no longer
   * one that may be closed to make room. */
  set_phase(h, c, PH_ANSWER);
  /* On the stack (about 1.5 KiB), so that even a failing allocator gets
   * an answer. */
  ember__http_answer_t a = {0};
  ember_buf_init(&a.body, h->max_response);
  if (atomic_load(&h->stopping)) {
    ember__http_fail(&a, 503, "the server is shutting down");
  } else if (q.in_too_big) {
    /* A chunked body (no Content-Length to refuse it by) that outgrew
     * max_body: read to its end (within the deadline), kept no further. */
    refused(h, R_TOO_LARGE);
    ember__http_fail(&a, 413, "the request body is larger than %zu bytes", h->max_body);
  } else if (*con_cls == &h->post_oom) {
    ember__http_fail(&a, 500, "internal error: out of memory reading the request body");
  } else {
    h->handler(h->ctx, &q, &a);
  }
  enum MHD_Result ret = send_answer(h, c, &a);
  ember_buf_free(&a.body);
  ember_metric_add(h->m_seconds, (double)(ember_time_mono_ns() - t0) / 1e9);
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  ember__http_t *h = cls;
  /* The next request on a kept-alive connection has request_timeout from
   * now, idle time included. */
  if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) set_phase(h, c, PH_RECV);
  if (*con_cls != NULL) {
    if (is_post_body(h, *con_cls)) {
      post_body_t *pb = *con_cls;
      if (pb->big) atomic_store(&h->big_busy, false);
      ember_buf_free(&pb->buf);
      ember_free(pb);
    }
    atomic_fetch_sub(&h->inflight, 1);
    *con_cls = NULL;
  }
}

/* An address to listen on: IPv4 "HOST:PORT" (HOST an address or
 * localhost; empty = every IPv4 address) or IPv6 "[ADDR]:PORT" ("[::]" =
 * every address, IPv4 too where the system allows dual stack). */
typedef struct listen_addr {
  union {
    struct sockaddr sa;
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
  } u;
  uint16_t port;
  bool any6; /* [::]: dual stack */
} listen_addr_t;

static int parse_listen(const char *key, const char *listen, listen_addr_t *la, char *errbuf,
                        size_t errbuf_size) {
  const char *colon = strrchr(listen, ':');
  uint64_t port;
  if (colon == NULL || ember_parse_u64(colon + 1, 0, 65535, &port) != 0) {
    snprintf(errbuf, errbuf_size, "%s '%s': expected HOST:PORT (127.0.0.1:7272, :7272, [::1]:7272)",
             key, listen);
    return EMBER_ECONFIG;
  }
  memset(la, 0, sizeof *la);
  la->port = (uint16_t)port;
  char host[64];
  size_t hl = (size_t)(colon - listen);
  if (hl >= sizeof host) {
    snprintf(errbuf, errbuf_size, "%s '%s': host too long", key, listen);
    return EMBER_ECONFIG;
  }
  memcpy(host, listen, hl);
  host[hl] = '\0';
  if (hl > 0 && host[0] == '[') {
    if (hl < 3 || host[hl - 1] != ']') {
      snprintf(errbuf, errbuf_size, "%s '%s': an IPv6 address goes in [brackets]", key, listen);
      return EMBER_ECONFIG;
    }
    host[hl - 1] = '\0';
    la->u.v6 = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_port = htons(la->port)};
    if (inet_pton(AF_INET6, host + 1, &la->u.v6.sin6_addr) != 1) {
      snprintf(errbuf, errbuf_size, "%s '%s': '%s' is not an IPv6 address", key, listen, host + 1);
      return EMBER_ECONFIG;
    }
    la->any6 = memcmp(&la->u.v6.sin6_addr, &in6addr_any, sizeof in6addr_any) == 0;
    return 0;
  }
  la->u.v4 = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(la->port)};
  if (hl == 0) {
    la->u.v4.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (strcmp(host, "localhost") == 0) {
    la->u.v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (inet_pton(AF_INET, host, &la->u.v4.sin_addr) != 1) {
    snprintf(errbuf, errbuf_size, "%s '%s': '%s' is not an IPv4 address (write IPv6 as [::1]:PORT)",
             key, listen, host);
    return EMBER_ECONFIG;
  }
  return 0;
}

static ember_metric_t *counter(ember_metrics_t *m, const char *prefix, const char *name,
                               const char *help) {
  char full[192];
  snprintf(full, sizeof full, "%.96s_%.64s", prefix, name);
  return ember_metrics_counter(m, full, help);
}

static void register_metrics(ember__http_t *h, ember_metrics_t *m, const char *prefix) {
  if (m == NULL || prefix == NULL) return;
  h->m_requests = counter(m, prefix, "requests_total", "HTTP requests.");
  h->m_2xx = counter(m, prefix, "responses_2xx_total", "HTTP responses with a 2xx status.");
  h->m_4xx = counter(m, prefix, "responses_4xx_total", "HTTP responses with a 4xx status.");
  h->m_5xx = counter(m, prefix, "responses_5xx_total", "HTTP responses with a 5xx status.");
  h->m_seconds = counter(m, prefix, "request_seconds_total",
                         "Time spent answering HTTP requests, in seconds.");
  char full[128];
  snprintf(full, sizeof full, "%.96s_connections", prefix);
  h->m_conns = ember_metrics_gauge(m, full, "Open HTTP connections.");
  for (int i = 0; i < R_NREASONS; i++) {
    snprintf(full, sizeof full, "%.32s_total", reason_names[i]);
    h->m_reason[i] = counter(m, prefix, full, reason_help[i]);
  }
}

int ember__http_start(const ember__http_opts_t *opts, ember__http_t **out, char *errbuf,
                      size_t errbuf_size) {
  char dummy[8];
  if (errbuf == NULL || errbuf_size == 0) {
    errbuf = dummy;
    errbuf_size = sizeof dummy;
  }
  errbuf[0] = '\0';
  if (opts == NULL || out == NULL || opts->listen == NULL || opts->handler == NULL ||
      opts->threads > EMBER__HTTP_MAX_THREADS)
    return -EINVAL;
  const char *key = opts->listen_key ? opts->listen_key : "listen address";
  listen_addr_t la;
  int rc = parse_listen(key, opts->listen, &la, errbuf, errbuf_size);
  if (rc != 0) return rc;

  ember__http_t *h = ember_calloc(1, sizeof *h);
  if (h == NULL) return -ENOMEM;
  h->handler = opts->handler;
  h->ctx = opts->ctx;
  h->log = opts->log ? opts->log : "http";
  h->max_body = opts->max_body ? opts->max_body : DEFAULT_BODY;
  h->big_body = opts->big_body;
  atomic_init(&h->big_busy, false);
  h->max_response = opts->max_response ? opts->max_response : EMBER__HTTP_DEFAULT_RESPONSE;
  h->max_conns = opts->max_connections ? opts->max_connections : DEFAULT_CONNS;
  h->max_per_ip = opts->max_per_ip ? opts->max_per_ip : DEFAULT_PER_IP;
  h->timeout_ns =
      (int64_t)(opts->request_timeout_ms ? opts->request_timeout_ms : DEFAULT_TIMEOUT) * MS_NS;
  h->answer_ns =
      (int64_t)(opts->answer_timeout_ms ? opts->answer_timeout_ms : DEFAULT_ANSWER) * MS_NS;
  h->nslots = h->max_conns + SLACK;
  h->hosts_key = opts->hosts_key ? opts->hosts_key : "the allowed hosts";
  rc = parse_hosts(h, opts->allowed_hosts, errbuf, errbuf_size);
  if (rc != 0) {
    free_hosts(h);
    ember_free(h);
    return rc;
  }
  atomic_init(&h->stopping, false);
  atomic_init(&h->inflight, 0);
  for (int i = 0; i < R_NREASONS; i++)
    h->logs[i] = (ember_log_limit_t)EMBER_LOG_LIMIT_INIT_EVERY(1, LOG_EVERY_NS);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, &ca);
  pthread_condattr_destroy(&ca);
  h->slots = ember_calloc(h->nslots, sizeof *h->slots);
  if (h->slots == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  register_metrics(h, opts->metrics, opts->metric_prefix);
  unsigned threads = opts->threads ? opts->threads : 1;
  /* libmicrohttpd's idle timeout (whole seconds) is only a backstop: the
   * reaper enforces request_timeout whatever the client sends. */
  unsigned idle_s = (unsigned)((h->timeout_ns + 1000 * MS_NS - 1) / (1000 * MS_NS));
  /* poll(), not epoll (which MHD_USE_AUTO picks): libmicrohttpd 0.9.75's
   * MHD_quiesce_daemon removes the listening socket from each pool
   * thread's epoll set and aborts the process when a thread took it out
   * itself meanwhile (it does at the connection limit): "Failed to remove
   * listen FD from epoll set", seen once in test_api_stop_while_busy. With
   * poll quiescing only flags the threads. At api.max_connections (256)
   * per daemon poll's cost per round is small. */
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (la.u.sa.sa_family == AF_INET6) flags |= la.any6 ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  /* The logger first, so that it gets every message; a pool only of two
   * or more threads (libmicrohttpd warns about a pool of one). */
  struct MHD_OptionItem ops[] = {
      {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, h},
      {MHD_OPTION_SOCK_ADDR, 0, &la.u.sa},
      {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)h->nslots, NULL},
      {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)idle_s, NULL},
      {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)MEMORY, NULL},
      {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, h},
      {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, h},
      {threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t)threads, NULL},
      {MHD_OPTION_END, 0, NULL}};
  h->d = MHD_start_daemon(flags, la.port, on_accept, h, on_request, h, MHD_OPTION_ARRAY, ops,
                          MHD_OPTION_END);
  if (h->d == NULL) {
    snprintf(errbuf, errbuf_size, "cannot serve HTTP on %s (port in use?)", opts->listen);
    rc = -EADDRINUSE;
    goto cleanup;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : la.port;
  if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
    snprintf(errbuf, errbuf_size, "cannot start the HTTP server's deadline thread");
    rc = -EAGAIN;
    goto cleanup;
  }
  h->reaper_started = true;
  *out = h;
  return 0;
cleanup:
  if (h->d != NULL) MHD_stop_daemon(h->d);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  ember_free(h->slots);
  free_hosts(h);
  ember_free(h);
  return rc;
}

uint16_t ember__http_port(const ember__http_t *h) { return h ? h->port : 0; }

/* At stop: connections still sending a request (a trickled POST body
 * among them, which counts in inflight) or idle are not waited for. */
static void cut_receiving(ember__http_t *h) {
  pthread_mutex_lock(&h->mu);
  for (unsigned i = 0; i < h->nslots; i++) {
    slot_t *s = &h->slots[i];
    if (s->phase == PH_RECV && !s->closing) cut(h, s);
  }
  pthread_mutex_unlock(&h->mu);
}

void ember__http_stop(ember__http_t *h) {
  if (h == NULL) return;
  atomic_store(&h->stopping, true);
  MHD_socket lsock = MHD_quiesce_daemon(h->d);
  cut_receiving(h);
  /* Requests already being answered run to the end and their answers go
   * out; idle keep-alive connections are not waited for. */
  int64_t deadline = ember_time_mono_ns() + STOP_WAIT_NS;
  while (atomic_load(&h->inflight) > 0 && ember_time_mono_ns() < deadline) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
    cut_receiving(h);
  }
  if (atomic_load(&h->inflight) > 0)
    EMBER_WARN(h->log, "stopping with %ld requests unfinished after 10 s",
               atomic_load(&h->inflight));
  MHD_stop_daemon(h->d);
  if (lsock != MHD_INVALID_SOCKET) close(lsock);
  /* After the daemon: every connection is closed and its slot free. */
  pthread_mutex_lock(&h->mu);
  h->reaper_stop = true;
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
  if (h->reaper_started) pthread_join(h->reaper, NULL);
  pthread_mutex_destroy(&h->mu);
  pthread_cond_destroy(&h->cv);
  ember_free(h->slots);
  free_hosts(h);
  ember_free(h);
}
