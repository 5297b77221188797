#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "ember/metrics.h"
#include "ember/parse.h"
#include "http.h"

struct ember_metric {
  char *name, *help;
  bool counter;
  ember_metrics_render_fn fn; /* a family rendered by its owner (ember_metrics_family) */
  void *ctx;
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

ember_metric_t *ember_metrics_counter_of(ember_metrics_t *m, const char *family, const char *label,
                                         const char *value, const char *help) {
  if (family == NULL || label == NULL || value == NULL) return NULL;
  char name[256];
  int n = snprintf(name, sizeof name, "%s{%s=\"%s\"}", family, label, value);
  if (n < 0 || (size_t)n >= sizeof name) return NULL;
  return add(m, name, help, true);
}

int ember_metrics_family(ember_metrics_t *m, const char *family, const char *help, bool counter,
                         ember_metrics_render_fn fn, void *ctx) {
  if (fn == NULL || family == NULL || family[family_len(family)] != '\0') return -EINVAL;
  ember_metric_t *mt = add(m, family, help, counter);
  if (mt == NULL) return m == NULL || !name_ok(family) || help == NULL ? -EINVAL : -ENOMEM;
  mt->fn = fn;
  mt->ctx = ctx;
  return 0;
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
    if (rc == 0 && mt->fn != NULL) {
      rc = mt->fn(mt->ctx, out);
    } else if (rc == 0) {
      rc = ember_buf_printf(out, "%s %.17g\n", mt->name, ember_metric_get(mt));
    }
  }
  return rc;
}

/* The daemons' /metrics and /healthz, served through the HTTP layer
 * (http.h) with its limits and JSON errors. */
struct ember_http_metrics {
  ember__http_t *http;
  ember_metrics_t *m;
};

static void serve(void *ctx, ember__http_req_t *q, ember__http_answer_t *a) {
  ember_http_metrics_t *h = ctx;
  const char *method = ember__http_method(q), *url = ember__http_url(q);
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    ember__http_fail(a, 405, "method %.16s not allowed: use GET", method);
    return;
  }
  if (strcmp(url, "/healthz") == 0) {
    a->status = 200;
    a->fixed = "ok\n";
    a->fixed_len = 3;
    return;
  }
  if (strcmp(url, "/metrics") != 0) {
    ember__http_fail(a, 404, "no such path: %.128s (try /metrics or /healthz)", url);
    return;
  }
  int rc = ember_metrics_render(h->m, &a->body);
  if (rc != 0) {
    ember__http_fail(a, 500, "rendering the metrics failed: %s", ember_strerror(rc));
    return;
  }
  a->status = 200;
  a->ctype = "text/plain; version=0.0.4";
}

int ember_http_metrics_start(ember_metrics_t *m, const char *listen, ember_http_metrics_t **out,
                             char *errbuf, size_t errbuf_size) {
  if (m == NULL || listen == NULL || out == NULL) return -EINVAL;
  ember_http_metrics_t *h = ember_calloc(1, sizeof *h);
  if (h == NULL) return -ENOMEM;
  h->m = m;
  ember__http_opts_t ho = {.listen = listen,
                           .listen_key = "listen address",
                           .log = "metrics",
                           .threads = 1,
                           /* Scraped by whatever name the host has; it serves
                            * counters and no page, and changes nothing. */
                           .allowed_hosts = "*",
                           .max_response = (size_t)16 << 20,
                           .handler = serve,
                           .ctx = h};
  int rc = ember__http_start(&ho, &h->http, errbuf, errbuf_size);
  if (rc != 0) {
    ember_free(h);
    return rc;
  }
  *out = h;
  return 0;
}

uint16_t ember_http_metrics_port(const ember_http_metrics_t *h) {
  return h ? ember__http_port(h->http) : 0;
}

void ember_http_metrics_stop(ember_http_metrics_t *h) {
  if (h == NULL) return;
  ember__http_stop(h->http);
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
