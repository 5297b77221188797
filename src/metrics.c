#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ember/metrics.h"
#include "ember/parse.h"

struct ember_metric {
  char *name, *help;
  bool counter;
  _Atomic uint64_t bits; /* a double's bits: C11 has no atomic double add */
};

struct ember_metrics {
  ember_metric_t **items;
  size_t n, cap;
};

int ember_metrics_new(ember_metrics_t **out) {
  if (out == NULL) return -EINVAL;
  *out = ember_calloc(1, sizeof **out);
  return *out ? 0 : -ENOMEM;
}

void ember_metrics_free(ember_metrics_t *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < m->n; i++) {
    ember_free(m->items[i]->name);
    ember_free(m->items[i]->help);
    ember_free(m->items[i]);
  }
  ember_free(m->items);
  ember_free(m);
}

/* The family name's length: up to a `{` of labels, or the whole name. */
static size_t family_len(const char *s) { return strcspn(s, "{"); }

/* A Prometheus name, optionally with one label of plain text:
 * `name{label="value"}`. Counters of one family are registered one after
 * the other, so the exposition writes HELP and TYPE once for them. */
static bool name_ok(const char *s) {
  if (s == NULL || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':')) return false;
  size_t fl = family_len(s);
  for (size_t i = 0; i < fl; i++) {
    if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != ':') return false;
  }
  if (s[fl] == '\0') return true;
  const char *p = s + fl + 1;
  if (!isalpha((unsigned char)*p) && *p != '_') return false;
  while (isalnum((unsigned char)*p) || *p == '_') p++;
  if (p[0] != '=' || p[1] != '"') return false;
  for (p += 2; *p != '"'; p++) {
    if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') return false;
  }
  return p[1] == '}' && p[2] == '\0';
}

static ember_metric_t *add(ember_metrics_t *m, const char *name, const char *help, bool counter) {
  if (m == NULL || !name_ok(name) || help == NULL) return NULL;
  if (m->n == m->cap) {
    size_t cap = m->cap ? m->cap * 2 : 32;
    ember_metric_t **items = ember_realloc(m->items, cap * sizeof *items);
    if (items == NULL) return NULL;
    m->items = items;
    m->cap = cap;
  }
  ember_metric_t *mt = ember_calloc(1, sizeof *mt);
  if (mt == NULL) return NULL;
  mt->name = ember_strdup(name);
  mt->help = ember_strdup(help);
  mt->counter = counter;
  if (mt->name == NULL || mt->help == NULL) {
    ember_free(mt->name);
    ember_free(mt->help);
    ember_free(mt);
    return NULL;
  }
  m->items[m->n++] = mt;
  return mt;
}

ember_metric_t *ember_metrics_counter(ember_metrics_t *m, const char *name, const char *help) {
  return add(m, name, help, true);
}

ember_metric_t *ember_metrics_gauge(ember_metrics_t *m, const char *name, const char *help) {
  return add(m, name, help, false);
}

static uint64_t to_bits(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

static double from_bits(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

void ember_metric_add(ember_metric_t *mt, double v) {
  if (mt == NULL) return;
  uint64_t old = atomic_load(&mt->bits);
  while (!atomic_compare_exchange_weak(&mt->bits, &old, to_bits(from_bits(old) + v))) {
  }
}

void ember_metric_set(ember_metric_t *mt, double v) {
  if (mt != NULL) atomic_store(&mt->bits, to_bits(v));
}

double ember_metric_get(const ember_metric_t *mt) {
  return mt ? from_bits(atomic_load(&((ember_metric_t *)(uintptr_t)mt)->bits)) : 0.0;
}

int ember_metrics_render(const ember_metrics_t *m, ember_buf_t *out) {
  if (m == NULL || out == NULL) return -EINVAL;
  int rc = 0;
  for (size_t i = 0; i < m->n && rc == 0; i++) {
    const ember_metric_t *mt = m->items[i];
    int fl = (int)family_len(mt->name);
    const char *prev = i > 0 ? m->items[i - 1]->name : NULL;
    bool same =
        prev != NULL && (int)family_len(prev) == fl && memcmp(prev, mt->name, (size_t)fl) == 0;
    if (!same)
      rc = ember_buf_printf(out, "# HELP %.*s %s\n# TYPE %.*s %s\n", fl, mt->name, mt->help, fl,
                            mt->name, mt->counter ? "counter" : "gauge");
    if (rc == 0) rc = ember_buf_printf(out, "%s %.17g\n", mt->name, ember_metric_get(mt));
  }
  return rc;
}

struct ember_http_metrics {
  struct MHD_Daemon *d;
  ember_metrics_t *m;
  uint16_t port;
};

static enum MHD_Result respond(struct MHD_Connection *c, unsigned code, const char *type,
                               const char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
  if (r == NULL) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", type);
  enum MHD_Result ret = MHD_queue_response(c, code, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  (void)upload;
  (void)con_cls;
  ember_http_metrics_t *h = cls;
  if (*upload_size != 0) {
    *upload_size = 0; /* a body on these endpoints is ignored */
    return MHD_YES;
  }
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    static const char msg[] = "method not allowed: use GET\n";
    return respond(c, 405, "text/plain", msg, sizeof msg - 1);
  }
  if (strcmp(url, "/healthz") == 0) return respond(c, 200, "text/plain", "ok\n", 3);
  if (strcmp(url, "/metrics") != 0) {
    static const char msg[] = "not found: try /metrics or /healthz\n";
    return respond(c, 404, "text/plain", msg, sizeof msg - 1);
  }
  ember_buf_t b;
  ember_buf_init(&b, 16u << 20);
  int rc = ember_metrics_render(h->m, &b);
  enum MHD_Result ret =
      rc == 0 ? respond(c, 200, "text/plain; version=0.0.4", b.data ? b.data : "", b.len)
              : respond(c, 500, "text/plain", "render failed\n", 14);
  ember_buf_free(&b);
  return ret;
}

int ember_http_metrics_start(ember_metrics_t *m, const char *listen, ember_http_metrics_t **out,
                             char *errbuf, size_t errbuf_size) {
  if (m == NULL || listen == NULL || out == NULL) return -EINVAL;
  const char *colon = strrchr(listen, ':');
  uint64_t port;
  if (colon == NULL || ember_parse_u64(colon + 1, 0, 65535, &port) != 0) {
    snprintf(errbuf, errbuf_size, "listen address '%s': expected HOST:PORT", listen);
    return EMBER_ECONFIG;
  }
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  char host[64];
  size_t hl = (size_t)(colon - listen);
  if (hl >= sizeof host) hl = sizeof host - 1;
  memcpy(host, listen, hl);
  host[hl] = '\0';
  if (hl == 0) {
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (strcmp(host, "localhost") == 0) {
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
    snprintf(errbuf, errbuf_size, "listen address '%s': '%s' is not an IPv4 address", listen, host);
    return EMBER_ECONFIG;
  }
  ember_http_metrics_t *h = ember_calloc(1, sizeof *h);
  if (h == NULL) return -ENOMEM;
  h->m = m;
  h->d =
      MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL,
                       NULL, on_request, h, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_CONNECTION_LIMIT,
                       64u, MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
  if (h->d == NULL) {
    snprintf(errbuf, errbuf_size, "cannot serve metrics on %s (port in use?)", listen);
    ember_free(h);
    return -EADDRINUSE;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info ? info->port : (uint16_t)port;
  *out = h;
  return 0;
}

uint16_t ember_http_metrics_port(const ember_http_metrics_t *h) { return h ? h->port : 0; }

void ember_http_metrics_stop(ember_http_metrics_t *h) {
  if (h == NULL) return;
  MHD_stop_daemon(h->d);
  ember_free(h);
}

double ember_self_cpu_seconds(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

double ember_self_rss_bytes(void) {
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0.0;
  char buf[128];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0.0;
  buf[n] = '\0';
  char *sp = strchr(buf, ' ');
  if (sp == NULL) return 0.0;
  char *end = strchr(sp + 1, ' ');
  if (end) *end = '\0';
  uint64_t pages;
  if (ember_parse_u64(sp + 1, 0, UINT64_MAX, &pages) != 0) return 0.0;
  return (double)pages * (double)sysconf(_SC_PAGESIZE);
}
