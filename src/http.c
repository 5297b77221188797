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
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ember/log.h"
#include "ember/parse.h"
#include "http.h"
#include "json.h"

#define MAX_THREADS      64u
#define DEFAULT_BODY     ((size_t)64 << 10)
#define DEFAULT_RESPONSE ((size_t)64 << 20)
#define STOP_WAIT_NS     (10LL * 1000000000LL)

struct ember__http {
  struct MHD_Daemon *d;
  ember__http_handler_fn handler;
  void *ctx;
  const char *log;
  char post_oom; /* its address marks a POST whose body buffer could not be made */
  size_t max_body, max_response;
  uint16_t port;
  atomic_bool stopping;
  atomic_long inflight; /* requests seen whose response is not yet done */
  ember_metric_t *m_requests, *m_2xx, *m_4xx, *m_5xx, *m_seconds;
};

struct ember__http_req {
  struct MHD_Connection *c;
  const char *url, *method;
  const char *in; /* the request body, NUL-terminated; NULL = none */
  size_t in_len;
  bool in_too_big;
  int64_t now_ns;
};

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
  enum MHD_Result ret = MHD_queue_response(c, a->status, resp);
  MHD_destroy_response(resp);
  return ret;
}

/* ------------------------------------------------------------- server -- */

/* The state of a POST while its body arrives. */
typedef struct post_body {
  ember_buf_t buf;
  bool too_big;
} post_body_t;

static bool is_post_body(const ember__http_t *h, void *con_cls) {
  return con_cls != NULL && con_cls != h && con_cls != &h->post_oom;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  ember__http_t *h = cls;
  if (*con_cls == NULL) {
    /* Counted until on_completed, so stop can wait for the answer to go
     * out, not only for it to be made. */
    atomic_fetch_add(&h->inflight, 1);
    *con_cls = h;
    if (strcmp(method, "POST") == 0) {
      /* Answered once the whole body is in (bounded by max_body); a POST
       * whose buffer cannot be made is answered 500 then. */
      post_body_t *pb = ember_calloc(1, sizeof *pb);
      if (pb != NULL) ember_buf_init(&pb->buf, h->max_body);
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
  /* On the stack (about 1.5 KiB), so that even a failing allocator gets
   * an answer. */
  ember__http_answer_t a = {0};
  ember_buf_init(&a.body, h->max_response);
  if (atomic_load(&h->stopping)) {
    ember__http_fail(&a, 503, "the server is shutting down");
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
  (void)c;
  (void)toe;
  ember__http_t *h = cls;
  if (*con_cls != NULL) {
    if (is_post_body(h, *con_cls)) {
      post_body_t *pb = *con_cls;
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
  char full[128];
  snprintf(full, sizeof full, "%s_%s", prefix, name);
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
      opts->threads > MAX_THREADS)
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
  h->max_response = opts->max_response ? opts->max_response : DEFAULT_RESPONSE;
  atomic_init(&h->stopping, false);
  atomic_init(&h->inflight, 0);
  register_metrics(h, opts->metrics, opts->metric_prefix);
  unsigned threads = opts->threads ? opts->threads : 1;
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (la.u.sa.sa_family == AF_INET6) flags |= la.any6 ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
  h->d = MHD_start_daemon(flags, la.port, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, &la.u.sa,
                          MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, 256u,
                          MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_NOTIFY_COMPLETED,
                          on_completed, h, MHD_OPTION_END);
  if (h->d == NULL) {
    snprintf(errbuf, errbuf_size, "cannot serve HTTP on %s (port in use?)", opts->listen);
    ember_free(h);
    return -EADDRINUSE;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : la.port;
  *out = h;
  return 0;
}

uint16_t ember__http_port(const ember__http_t *h) { return h ? h->port : 0; }

void ember__http_stop(ember__http_t *h) {
  if (h == NULL) return;
  atomic_store(&h->stopping, true);
  MHD_socket lsock = MHD_quiesce_daemon(h->d);
  /* Requests already being answered run to the end and their answers go
   * out; idle keep-alive connections are not waited for. */
  int64_t deadline = ember_time_mono_ns() + STOP_WAIT_NS;
  while (atomic_load(&h->inflight) > 0 && ember_time_mono_ns() < deadline) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&h->inflight) > 0)
    EMBER_WARN(h->log, "stopping with %ld requests unfinished after 10 s",
               atomic_load(&h->inflight));
  MHD_stop_daemon(h->d);
  if (lsock != MHD_INVALID_SOCKET) close(lsock);
  ember_free(h);
}
