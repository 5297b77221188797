/* Alert notifications: webhook delivery and the ember.alerts record. See
 * notify.h for the contract and docs/internals/alerts.md for the design.
 *
 * One mutex guards the receivers and their queues. Senders only append;
 * the delivery thread is the only one that removes items and receivers,
 * so it may use the receiver and the item at the head of its queue without
 * the lock while a request is in flight. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "ember/buf.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "json.h"
#include "notify.h"

#define LOG "notify"

#define MS_NS               1000000LL
#define DEFAULT_QUEUE       1000u
#define DEFAULT_TIMEOUT_MS  5000u
#define DEFAULT_INITIAL_MS  1000u
#define DEFAULT_RETRY_MAX   60000u
#define DEFAULT_GIVE_UP_MS  3600000u
#define MAX_URL             2048u
#define MAX_BODY            ((size_t)1 << 20)
#define MAX_TEXT            ((size_t)8 << 10)
#define MAX_NAME            160u /* bytes of a function name in a description */
#define TOP_SHOWN           5u
#define DOWN_AFTER_ATTEMPTS 3u /* failed attempts in a row before "receiver down" */

/* ---- bodies ------------------------------------------------------------ */

static bool status_ok(const char *s) {
  return s != NULL && (strcmp(s, "firing") == 0 || strcmp(s, "resolved") == 0);
}

static const char *str_of(const json_t *doc, const char *key) {
  return json_string_value(json_object_get(doc, key));
}

/* The fields every body needs. */
static bool doc_ok(const json_t *doc) {
  if (!json_is_object(doc)) return false;
  const char *id = str_of(doc, "id"), *rule = str_of(doc, "rule");
  const json_t *started = json_object_get(doc, "started");
  return id != NULL && id[0] != '\0' && rule != NULL && rule[0] != '\0' &&
         json_is_integer(started) && json_integer_value(started) >= 0;
}

int ember__notify_format_parse(const char *s, ember__notify_format_t *out) {
  if (s == NULL || out == NULL) return -EINVAL;
  if (strcmp(s, "alertmanager") == 0) {
    *out = EMBER__NOTIFY_ALERTMANAGER;
  } else if (strcmp(s, "json") == 0) {
    *out = EMBER__NOTIFY_JSON;
  } else {
    return -EINVAL;
  }
  return 0;
}

const char *ember__notify_format_name(ember__notify_format_t f) {
  return f == EMBER__NOTIFY_JSON ? "json" : "alertmanager";
}

int ember__notify_rfc3339(int64_t ms, char *out, size_t size) {
  if (out == NULL || ms < 0) return -EINVAL;
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  if (gmtime_r(&secs, &tm) == NULL) return -EINVAL;
  char day[32];
  if (strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm) == 0) return -EINVAL;
  int w = snprintf(out, size, "%s.%03dZ", day, (int)(ms % 1000));
  return w > 0 && (size_t)w < size ? 0 : -EINVAL;
}

static json_t *wrap(const char *status, const json_t *doc, bool version) {
  if (!status_ok(status) || !doc_ok(doc)) return NULL;
  json_t *o = json_object();
  if (o == NULL) return NULL;
  int rc = version ? ember__json_set(o, "version", json_integer(1)) : 0;
  if (rc == 0) rc = ember__json_set(o, "status", json_string(status));
  if (rc == 0) rc = ember__json_set(o, "alert", json_deep_copy(doc));
  if (rc != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

json_t *ember__notify_body_json(const char *status, const json_t *doc) {
  return wrap(status, doc, true);
}

json_t *ember__notify_record(const char *status, const json_t *doc) {
  return wrap(status, doc, false);
}

/* Append at most `max` bytes of s, cut before a UTF-8 continuation byte
 * (ember__json_str cleans anything else). */
static int put_cut(ember_buf_t *b, const char *s, size_t max) {
  size_t len = strlen(s);
  if (len <= max) return ember_buf_append(b, s, len);
  size_t cut = max;
  while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
  int rc = ember_buf_append(b, s, cut);
  return rc == 0 ? ember_buf_puts(b, "...") : rc;
}

/* "api{host=h1,version=2}": the worker and the other labels of the doc. */
static int put_selection(ember_buf_t *b, json_t *labels) {
  const char *worker = str_of(labels, "worker");
  int rc = put_cut(b, worker ? worker : "(any worker)", MAX_NAME);
  bool first = true;
  const char *k;
  const json_t *v;
  json_object_foreach(labels, k, v) {
    if (rc != 0) break;
    if (strcmp(k, "worker") == 0 || !json_is_string(v)) continue;
    rc = ember_buf_puts(b, first ? "{" : ",");
    if (rc == 0) rc = put_cut(b, k, MAX_NAME);
    if (rc == 0) rc = ember_buf_puts(b, "=");
    if (rc == 0) rc = put_cut(b, json_string_value(v), MAX_NAME);
    first = false;
  }
  if (rc == 0 && !first) rc = ember_buf_puts(b, "}");
  return rc;
}

static int put_summary(ember_buf_t *b, const char *status, const json_t *doc) {
  const char *kind = str_of(doc, "kind");
  const json_t *jv = json_object_get(doc, "value"), *jt = json_object_get(doc, "threshold");
  bool firing = strcmp(status, "firing") == 0;
  int rc = put_cut(b, str_of(doc, "rule"), MAX_NAME);
  if (rc == 0) rc = ember_buf_puts(b, firing ? " firing: " : " resolved: ");
  if (rc == 0) rc = put_selection(b, json_object_get(doc, "labels"));
  if (rc != 0 || !json_is_number(jv) || !json_is_number(jt)) return rc;
  double v = json_number_value(jv), t = json_number_value(jt);
  if (kind != NULL && strcmp(kind, "function") == 0) {
    /* A function rule's value and threshold are the function's self share
     * in percent, as the rule states it. */
    return ember_buf_printf(b, ": a function's self share %s %.1f%% (threshold %.1f%%)",
                            firing ? "is" : "is back to", v, t);
  }
  const char *what =
      kind != NULL && strcmp(kind, "baseline") == 0 ? "baseline threshold" : "threshold";
  return ember_buf_printf(b, " %s %.2f cores (%s %.2f cores)", firing ? "uses" : "is back to", v,
                          what, t);
}

static int put_description(ember_buf_t *b, const json_t *doc) {
  const json_t *top = json_object_get(doc, "top");
  int rc = 0;
  if (!json_is_array(top) || json_array_size(top) == 0) {
    rc = ember_buf_puts(b, "No profile diff was computed for this alert.");
  } else {
    rc = ember_buf_puts(b, "Top functions by rise in self share (baseline -> spike):");
    size_t i;
    const json_t *f;
    json_array_foreach(top, i, f) {
      if (rc != 0 || i >= TOP_SHOWN) break;
      const char *fn = str_of(f, "function"), *file = str_of(f, "file");
      rc = ember_buf_puts(b, i == 0 ? " " : "; ");
      if (rc == 0) rc = put_cut(b, fn ? fn : "?", MAX_NAME);
      if (rc == 0 && file != NULL && file[0] != '\0') {
        rc = ember_buf_puts(b, " (");
        if (rc == 0) rc = put_cut(b, file, MAX_NAME);
        if (rc == 0) rc = ember_buf_puts(b, ")");
      }
      const json_t *base = json_object_get(f, "baseline"), *spike = json_object_get(f, "spike");
      if (rc == 0 && json_is_number(base) && json_is_number(spike)) {
        double x = json_number_value(base) * 100, y = json_number_value(spike) * 100;
        rc = ember_buf_printf(b, " %.1f%% -> %.1f%% (%+.1f pts)", x, y, y - x);
      }
    }
    if (rc == 0) rc = ember_buf_puts(b, ".");
  }
  const json_t *cap = json_object_get(doc, "capture");
  const char *session = str_of(cap, "session");
  if (rc == 0 && session != NULL) {
    const char *st = str_of(cap, "state");
    rc = ember_buf_puts(b, " Capture session ");
    if (rc == 0) rc = put_cut(b, session, MAX_NAME);
    if (rc == 0 && st != NULL) rc = ember_buf_printf(b, " (%.32s)", st);
    if (rc == 0) rc = ember_buf_puts(b, ".");
  }
  return rc;
}

/* Alertmanager accepts [A-Za-z_][A-Za-z0-9_]* as label names. */
static void label_name(const char *k, char *out, size_t size) {
  size_t o = 0;
  if (!((k[0] >= 'A' && k[0] <= 'Z') || (k[0] >= 'a' && k[0] <= 'z') || k[0] == '_'))
    out[o++] = '_';
  for (size_t i = 0; k[i] != '\0' && o + 1 < size; i++) {
    char c = k[i];
    bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    out[o++] = ok ? c : '_';
  }
  out[o] = '\0';
}

static int set_time(json_t *o, const char *key, int64_t ms) {
  char t[40];
  int rc = ember__notify_rfc3339(ms, t, sizeof t);
  return rc == 0 ? ember__json_set(o, key, json_string(t)) : rc;
}

static int set_text(json_t *o, const char *key, ember_buf_t *b) {
  return ember__json_set(o, key, ember__json_str(b->data ? b->data : ""));
}

json_t *ember__notify_body_alertmanager(const char *status, const json_t *doc,
                                        const char *dashboard_url) {
  if (!status_ok(status) || !doc_ok(doc)) return NULL;
  const char *id = str_of(doc, "id");
  int64_t started = (int64_t)json_integer_value(json_object_get(doc, "started"));
  json_t *arr = json_array(), *alert = json_object(), *labels = json_object(), *ann = json_object();
  ember_buf_t text;
  ember_buf_init(&text, MAX_TEXT);
  int rc = arr && alert && labels && ann ? 0 : -ENOMEM;

  const char *k;
  const json_t *v;
  json_object_foreach(json_object_get(doc, "labels"), k, v) {
    if (rc != 0) break;
    const char *s = json_string_value(v);
    if (s == NULL || s[0] == '\0' || k[0] == '\0') continue;
    char name[128];
    label_name(k, name, sizeof name);
    if (strcmp(name, "alertname") == 0) continue;
    rc = ember__json_set(labels, name, json_string(s));
  }
  if (rc == 0) rc = ember__json_set(labels, "alertname", json_string(str_of(doc, "rule")));
  if (rc == 0 && json_object_get(labels, "severity") == NULL)
    rc = ember__json_set(labels, "severity", json_string("warning"));

  if (rc == 0) rc = put_summary(&text, status, doc);
  if (rc == 0) rc = set_text(ann, "summary", &text);
  ember_buf_reset(&text);
  if (rc == 0) rc = put_description(&text, doc);
  if (rc == 0) rc = set_text(ann, "description", &text);
  if (rc == 0) rc = ember__json_set(ann, "ember_alert_id", json_string(id));

  if (rc == 0) rc = set_time(alert, "startsAt", started);
  if (rc == 0 && strcmp(status, "resolved") == 0) {
    const json_t *r = json_object_get(doc, "resolved");
    if (!json_is_integer(r)) r = json_object_get(doc, "updated");
    int64_t ends = json_is_integer(r) ? (int64_t)json_integer_value(r) : started;
    /* Alertmanager refuses an alert that ends before it starts. */
    rc = set_time(alert, "endsAt", ends < started ? started : ends);
  }
  if (rc == 0 && dashboard_url != NULL && dashboard_url[0] != '\0') {
    size_t blen = strlen(dashboard_url);
    while (blen > 0 && dashboard_url[blen - 1] == '/') blen--;
    ember_buf_reset(&text);
    rc = ember_buf_append(&text, dashboard_url, blen);
    if (rc == 0) rc = ember_buf_puts(&text, "/#/alerts/");
    /* Alert ids are hex; anything else is escaped so the link stays one URL. */
    for (const char *p = id; rc == 0 && *p != '\0'; p++) {
      unsigned char c = (unsigned char)*p;
      bool plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                   c == '-' || c == '_' || c == '.';
      rc = plain ? ember_buf_append(&text, p, 1) : ember_buf_printf(&text, "%%%02X", (unsigned)c);
    }
    if (rc == 0) rc = set_text(alert, "generatorURL", &text);
  }
  ember_buf_free(&text);

  if (rc == 0) {
    rc = ember__json_set(alert, "labels", labels);
    labels = NULL;
  }
  if (rc == 0) {
    rc = ember__json_set(alert, "annotations", ann);
    ann = NULL;
  }
  if (rc == 0) {
    rc = ember__json_push(arr, alert);
    alert = NULL;
  }
  json_decref(labels);
  json_decref(ann);
  json_decref(alert);
  if (rc != 0) {
    json_decref(arr);
    return NULL;
  }
  return arr;
}

/* ---- the notifier -------------------------------------------------------- */

typedef struct item {
  struct item *next;
  char *body; /* ember_malloc'ed */
  size_t len;
  ember__notify_done_cb done;
  void *ctx;
  int64_t queued_ns; /* monotonic */
  uint32_t attempts;
  bool firing;
  char id[40]; /* the alert's id, for log lines */
} item_t;

/* A receiver: one URL, its FIFO and its retry clock. */
typedef struct target {
  struct target *next;
  char *url;
  char shown[160]; /* the URL as logs show it: scheme://host:port only */
  item_t *head, *tail;
  size_t n;
  int64_t next_ns;     /* monotonic: no attempt before */
  uint32_t backoff_ms; /* the last backoff; 0 after a success */
  uint32_t fails;      /* failed attempts in a row */
  bool down_logged;
} target_t;

struct ember__notify {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  bool thread_started;
  bool curl_inited;

  /* Fixed at _new. */
  size_t queue_max;
  uint32_t timeout_ms, initial_ms, retry_max_ms, give_up_ms;
  char *dashboard_url, *topic;
  rd_kafka_t *producer;
  CURL *curl;
  struct curl_slist *headers;
  char curl_err[CURL_ERROR_SIZE];
  uint64_t rand;

  /* Guarded by mu. */
  target_t *targets, *cursor; /* cursor: where the round-robin resumes */
  size_t queued;
  bool stopping;
  int64_t deadline_ns; /* when stopping: flush until then */
  bool full_logged;
  uint64_t full_dropped; /* in the current burst */

  /* An attempt in flight is cut once the monotonic clock passes this. */
  _Atomic int64_t abort_ns;

  _Atomic uint64_t sent, failed, dropped, publish_errors;
  ember_metric_t *m_sent, *m_failed, *m_dropped, *m_queue, *m_publish_errors;
};

static void count(_Atomic uint64_t *c, ember_metric_t *m) {
  atomic_fetch_add(c, 1);
  ember_metric_add(m, 1);
}

static void set_queued(ember__notify_t *n, size_t q) {
  n->queued = q;
  ember_metric_set(n->m_queue, (double)q);
}

/* Logs show scheme://host[:port] and hide the path, the query and any user
 * info: webhook URLs often carry a secret there (Slack- and Teams-style
 * hooks put it in the path). */
static void shown_url(const char *url, char *out, size_t size) {
  snprintf(out, size, "(unparseable URL)");
  CURLU *u = curl_url();
  if (u == NULL) return;
  char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL;
  if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
    curl_url_get(u, CURLUPART_PORT, &port, 0);
    curl_url_get(u, CURLUPART_PATH, &path, 0);
    bool more = path != NULL && strcmp(path, "/") != 0 && path[0] != '\0';
    snprintf(out, size, "%s://%.100s%s%s%s", scheme, host, port ? ":" : "", port ? port : "",
             more ? "/..." : "");
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_free(path);
  curl_url_cleanup(u);
}

static bool url_ok(const char *url) {
  if (url == NULL || url[0] == '\0' || strlen(url) > MAX_URL) return false;
  CURLU *u = curl_url();
  if (u == NULL) return false;
  char *scheme = NULL, *host = NULL;
  bool ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
            curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
            (strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0) && host[0] != '\0';
  curl_free(scheme);
  curl_free(host);
  curl_url_cleanup(u);
  return ok;
}

static uint64_t next_rand(ember__notify_t *n) {
  /* xorshift64: jitter needs spread, not secrecy. */
  uint64_t x = n->rand;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  n->rand = x;
  return x;
}

static void item_free(item_t *it) {
  if (it == NULL) return;
  ember_free(it->body);
  ember_free(it);
}

static item_t *pop_head(target_t *t) {
  item_t *it = t->head;
  t->head = it->next;
  if (t->head == NULL) t->tail = NULL;
  t->n--;
  it->next = NULL;
  return it;
}

/* Unlink an empty receiver (under mu). */
static void drop_target(ember__notify_t *n, target_t *t) {
  target_t **pp = &n->targets;
  while (*pp != t) pp = &(*pp)->next;
  *pp = t->next;
  if (n->cursor == t) n->cursor = t->next;
  ember_free(t->url);
  ember_free(t);
}

/* ---- one attempt ---------------------------------------------------------- */

typedef enum outcome { DELIVERED, FAILED, REFUSED } outcome_t;

static size_t discard(char *p, size_t size, size_t nmemb, void *ctx) {
  (void)p;
  (void)ctx;
  return size * nmemb;
}

static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
  (void)dt;
  (void)dn;
  (void)ut;
  (void)un;
  ember__notify_t *n = ctx;
  return ember_time_mono_ns() >= atomic_load(&n->abort_ns) ? 1 : 0;
}

/* POST the item's body to t->url. `why` gets a short reason on failure;
 * *retry_after_ms the receiver's Retry-After (0 = none). Called without mu. */
static outcome_t attempt(ember__notify_t *n, const target_t *t, const item_t *it, char *why,
                         size_t why_size, uint32_t *retry_after_ms) {
  CURL *e = n->curl;
  *retry_after_ms = 0;
  int64_t timeout_ms = n->timeout_ms;
  int64_t left_ns = atomic_load(&n->abort_ns) - ember_time_mono_ns();
  if (left_ns / MS_NS < timeout_ms) timeout_ms = left_ns / MS_NS > 1 ? left_ns / MS_NS : 1;
  n->curl_err[0] = '\0';
  curl_easy_setopt(e, CURLOPT_URL, t->url);
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)it->len);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, it->body);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
  CURLcode cc = curl_easy_perform(e);
  if (cc != CURLE_OK) {
    snprintf(why, why_size, "%s", n->curl_err[0] ? n->curl_err : curl_easy_strerror(cc));
    /* A URL curl cannot use will not get better by retrying. */
    return cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL ? REFUSED : FAILED;
  }
  long code = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  if (code >= 200 && code < 300) return DELIVERED;
  snprintf(why, why_size, "HTTP %ld", code);
  if (code == 408 || code == 429 || code >= 500 || code < 200) {
    curl_off_t ra = 0;
    if (curl_easy_getinfo(e, CURLINFO_RETRY_AFTER, &ra) == CURLE_OK && ra > 0)
      *retry_after_ms = ra > UINT32_MAX / 1000 ? UINT32_MAX : (uint32_t)ra * 1000u;
    return FAILED;
  }
  return REFUSED;
}

/* Book a failed attempt on t and schedule the next one (under mu). */
static void backoff(ember__notify_t *n, target_t *t, int64_t now, uint32_t retry_after_ms,
                    const char *why) {
  t->fails++;
  if (t->backoff_ms == 0) {
    t->backoff_ms = n->initial_ms;
  } else {
    t->backoff_ms = t->backoff_ms > n->retry_max_ms / 2 ? n->retry_max_ms : t->backoff_ms * 2;
  }
  /* Equal jitter: half the backoff fixed, half random, so receivers that
   * failed together do not all come back in step. */
  uint64_t half = t->backoff_ms / 2;
  uint64_t delay = half + next_rand(n) % (t->backoff_ms - half + 1);
  if (retry_after_ms > delay)
    delay = retry_after_ms < n->retry_max_ms ? retry_after_ms : n->retry_max_ms;
  t->next_ns = now + (int64_t)delay * MS_NS;
  if (t->fails == DOWN_AFTER_ATTEMPTS) {
    t->down_logged = true;
    EMBER_WARN(LOG,
               "webhook %s: receiver down after %u attempts (last: %s); %zu notifications wait "
               "for it, retried with backoff up to %u ms",
               t->shown, t->fails, why, t->n, n->retry_max_ms);
  } else {
    EMBER_DEBUG(LOG, "webhook %s: attempt failed (%s); next in %llu ms", t->shown, why,
                (unsigned long long)delay);
  }
}

/* Call back and free a list of finished items (without mu). */
static void finish(item_t *list, bool delivered) {
  while (list != NULL) {
    item_t *next = list->next;
    if (list->done != NULL) list->done(list->ctx, delivered);
    item_free(list);
    list = next;
  }
}

/* The next receiver due at `now`, round-robin from the cursor (under mu). */
static target_t *pick(ember__notify_t *n, int64_t now) {
  target_t *start = n->cursor ? n->cursor : n->targets;
  for (int pass = 0; pass < 2; pass++) {
    target_t *from = pass == 0 ? start : n->targets, *to = pass == 0 ? NULL : start;
    for (target_t *t = from; t != to; t = t->next)
      if (t->head != NULL && t->next_ns <= now) return t;
  }
  return NULL;
}

/* Take the notifications past give_up_ms off their queues (under mu). */
static item_t *expire(ember__notify_t *n, int64_t now) {
  item_t *out = NULL;
  int64_t give_up_ns = (int64_t)n->give_up_ms * MS_NS;
  for (target_t *t = n->targets, *next = NULL; t != NULL; t = next) {
    next = t->next;
    while (t->head != NULL && now - t->head->queued_ns >= give_up_ns) {
      item_t *it = pop_head(t);
      EMBER_WARN(LOG,
                 "webhook %s: gave up the %s notification of alert %s after %u attempts in %u ms",
                 t->shown, it->firing ? "firing" : "resolved", it->id, it->attempts, n->give_up_ms);
      count(&n->dropped, n->m_dropped);
      set_queued(n, n->queued - 1);
      it->next = out;
      out = it;
    }
    if (t->head == NULL) drop_target(n, t);
  }
  return out;
}

static void *deliver_main(void *arg) {
  ember__notify_t *n = arg;
  char why[CURL_ERROR_SIZE + 32];
  pthread_mutex_lock(&n->mu);
  for (;;) {
    int64_t now = ember_time_mono_ns();
    if (n->stopping && (n->queued == 0 || now >= n->deadline_ns)) break;
    item_t *dead = expire(n, now);
    if (dead != NULL) {
      pthread_mutex_unlock(&n->mu);
      finish(dead, false);
      pthread_mutex_lock(&n->mu);
      continue;
    }
    target_t *t = pick(n, now);
    if (t != NULL) {
      item_t *it = t->head;
      it->attempts++;
      pthread_mutex_unlock(&n->mu);
      uint32_t retry_after_ms = 0;
      why[0] = '\0';
      outcome_t o = attempt(n, t, it, why, sizeof why, &retry_after_ms);
      pthread_mutex_lock(&n->mu);
      now = ember_time_mono_ns();
      item_t *done = NULL;
      if (o == DELIVERED) {
        if (t->down_logged)
          EMBER_INFO(LOG, "webhook %s: receiver back after %u failed attempts", t->shown, t->fails);
        t->fails = 0;
        t->backoff_ms = 0;
        t->down_logged = false;
        t->next_ns = now;
        done = pop_head(t);
        count(&n->sent, n->m_sent);
        EMBER_INFO(LOG, "webhook %s: the %s notification of alert %s delivered", t->shown,
                   done->firing ? "firing" : "resolved", done->id);
      } else if (o == REFUSED) {
        EMBER_WARN_LIMITED(LOG,
                           "webhook %s: the %s notification of alert %s was refused (%s): "
                           "not retried",
                           t->shown, it->firing ? "firing" : "resolved", it->id, why);
        done = pop_head(t);
        count(&n->failed, n->m_failed);
        count(&n->dropped, n->m_dropped);
      } else {
        count(&n->failed, n->m_failed);
        backoff(n, t, now, retry_after_ms, why);
      }
      n->cursor = t->next;
      if (done != NULL) set_queued(n, n->queued - 1);
      if (t->head == NULL) drop_target(n, t);
      if (done != NULL) {
        pthread_mutex_unlock(&n->mu);
        finish(done, o == DELIVERED);
        pthread_mutex_lock(&n->mu);
      }
      continue;
    }
    /* Nothing due: sleep until the first receiver is due or a notification
     * expires, a send arrives, or the flush deadline. */
    int64_t wake = INT64_MAX, give_up_ns = (int64_t)n->give_up_ms * MS_NS;
    for (const target_t *x = n->targets; x != NULL; x = x->next) {
      if (x->head == NULL) continue;
      if (x->next_ns < wake) wake = x->next_ns;
      if (x->head->queued_ns + give_up_ns < wake) wake = x->head->queued_ns + give_up_ns;
    }
    if (n->stopping) {
      if (wake > n->deadline_ns) break; /* nothing can be tried before the deadline */
      wake = n->deadline_ns;
    }
    if (wake == INT64_MAX) {
      pthread_cond_wait(&n->cv, &n->mu);
    } else {
      struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000LL),
                            .tv_nsec = (long)(wake % 1000000000LL)};
      pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    }
  }
  /* Shutdown: what is left is dropped, and each sender hears of it. */
  item_t *left = NULL;
  size_t nleft = 0;
  while (n->targets != NULL) {
    target_t *t = n->targets;
    while (t->head != NULL) {
      item_t *it = pop_head(t);
      it->next = left;
      left = it;
      nleft++;
      count(&n->dropped, n->m_dropped);
    }
    drop_target(n, t);
  }
  set_queued(n, 0);
  pthread_mutex_unlock(&n->mu);
  if (nleft > 0)
    EMBER_WARN(LOG, "dropped %zu undelivered webhook notifications at shutdown", nleft);
  finish(left, false);
  return NULL;
}

/* ---- life cycle ------------------------------------------------------------ */

static int dup_opt(const char *s, const char *dflt, char **out) {
  *out = NULL;
  if (s == NULL) s = dflt;
  if (s == NULL) return 0;
  *out = ember_strdup(s);
  return *out ? 0 : -ENOMEM;
}

static void release(ember__notify_t *n) {
  if (n->curl != NULL) curl_easy_cleanup(n->curl);
  curl_slist_free_all(n->headers);
  if (n->curl_inited) curl_global_cleanup();
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  ember_free(n->dashboard_url);
  ember_free(n->topic);
  ember_free(n);
}

int ember__notify_new(const ember__notify_opts_t *opts, ember__notify_t **out, char *errbuf,
                      size_t errbuf_size) {
  if (opts == NULL || out == NULL || (errbuf == NULL && errbuf_size > 0)) return -EINVAL;
  if (errbuf_size > 0) errbuf[0] = '\0';
  ember__notify_t *n = ember_calloc(1, sizeof *n);
  if (n == NULL) return -ENOMEM;
  pthread_mutex_init(&n->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* ember_time_mono_ns's clock */
  pthread_cond_init(&n->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&n->abort_ns, INT64_MAX);
  n->queue_max = opts->queue_max ? opts->queue_max : DEFAULT_QUEUE;
  n->timeout_ms = opts->timeout_ms ? opts->timeout_ms : DEFAULT_TIMEOUT_MS;
  n->retry_max_ms = opts->retry_max_ms ? opts->retry_max_ms : DEFAULT_RETRY_MAX;
  n->initial_ms = opts->retry_initial_ms ? opts->retry_initial_ms : DEFAULT_INITIAL_MS;
  if (n->initial_ms > n->retry_max_ms) n->initial_ms = n->retry_max_ms;
  n->give_up_ms = opts->give_up_ms ? opts->give_up_ms : DEFAULT_GIVE_UP_MS;
  n->producer = opts->producer;
  n->rand = (uint64_t)ember_time_mono_ns() ^ (uint64_t)(uintptr_t)n ^ 0x9e3779b97f4a7c15ull;
  if (n->rand == 0) n->rand = 1;

  int rc = dup_opt(opts->dashboard_url, NULL, &n->dashboard_url);
  if (rc == 0) rc = dup_opt(opts->topic, EMBER_TOPIC_ALERTS, &n->topic);
  if (rc != 0) goto cleanup;

  /* Thread-safe in the libcurl versions Ember builds against (>= 7.84). */
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(errbuf, errbuf_size, "webhooks: libcurl failed to initialise");
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  n->curl_inited = true;
  n->curl = curl_easy_init();
  struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
  if (h != NULL) n->headers = h;
  /* "Expect:" keeps curl from waiting for a 100 Continue on larger bodies. */
  h = h ? curl_slist_append(h, "Expect:") : NULL;
  if (n->curl == NULL || h == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  n->headers = h;
  CURL *e = n->curl;
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, n->headers);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_USERAGENT, "ember/" EMBER_VERSION_STRING);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, n->curl_err);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
  curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(e, CURLOPT_XFERINFODATA, n);
  curl_easy_setopt(e, CURLOPT_POST, 1L);

  ember_metrics_t *m = opts->metrics;
  if (m != NULL) {
    n->m_sent = ember_metrics_counter(m, "ember_collector_notify_sent_total",
                                      "Webhook notifications delivered (2xx).");
    n->m_failed = ember_metrics_counter(m, "ember_collector_notify_failed_total",
                                        "Webhook delivery attempts that failed or were refused.");
    n->m_dropped = ember_metrics_counter(
        m, "ember_collector_notify_dropped_total",
        "Webhook notifications never delivered: queue full, refused, given up or shutdown.");
    n->m_queue = ember_metrics_gauge(m, "ember_collector_notify_queue",
                                     "Webhook notifications queued or in flight.");
    n->m_publish_errors =
        ember_metrics_counter(m, "ember_collector_notify_publish_errors_total",
                              "Alert transitions that could not be queued for ember.alerts.");
  }

  /* Every thread the collector starts has all signals blocked, so only the
   * thread that waits for them sees SIGTERM. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int prc = pthread_create(&n->thread, NULL, deliver_main, n);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (prc != 0) {
    snprintf(errbuf, errbuf_size, "webhooks: cannot start the delivery thread: %s", strerror(prc));
    rc = -prc;
    goto cleanup;
  }
  n->thread_started = true;
  *out = n;
  return 0;
cleanup:
  release(n);
  return rc;
}

void ember__notify_free(ember__notify_t *n, uint32_t flush_ms) {
  if (n == NULL) return;
  if (n->thread_started) {
    pthread_mutex_lock(&n->mu);
    n->stopping = true;
    n->deadline_ns = ember_time_mono_ns() + (int64_t)flush_ms * MS_NS;
    atomic_store(&n->abort_ns, n->deadline_ns);
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->thread, NULL);
  }
  release(n);
}

/* ---- sending ----------------------------------------------------------------- */

int ember__notify_send(ember__notify_t *n, const ember__notify_target_t *target, const char *status,
                       const json_t *alert_doc, ember__notify_done_cb done_cb, void *ctx) {
  if (n == NULL || target == NULL || !url_ok(target->url) || !status_ok(status) ||
      !doc_ok(alert_doc))
    return -EINVAL;
  json_t *body = target->format == EMBER__NOTIFY_JSON
                     ? ember__notify_body_json(status, alert_doc)
                     : ember__notify_body_alertmanager(status, alert_doc, n->dashboard_url);
  if (body == NULL) return -ENOMEM; /* the arguments were checked above */
  ember_buf_t b;
  ember_buf_init(&b, MAX_BODY);
  int rc = ember__json_dump(body, &b);
  json_decref(body);
  item_t *it = rc == 0 ? ember_calloc(1, sizeof *it) : NULL;
  if (it == NULL) {
    ember_buf_free(&b);
    return rc != 0 ? rc : -ENOMEM;
  }
  it->body = ember_buf_take(&b, &it->len);
  it->done = done_cb;
  it->ctx = ctx;
  it->firing = strcmp(status, "firing") == 0;
  snprintf(it->id, sizeof it->id, "%s", str_of(alert_doc, "id"));
  if (it->body == NULL) {
    item_free(it);
    return -ENOMEM;
  }

  pthread_mutex_lock(&n->mu);
  if (n->queued >= n->queue_max) {
    count(&n->dropped, n->m_dropped);
    n->full_dropped++;
    if (!n->full_logged) {
      n->full_logged = true;
      EMBER_WARN(LOG,
                 "webhook queue full (%zu notifications): new ones are dropped until it drains",
                 n->queued);
    }
    pthread_mutex_unlock(&n->mu);
    item_free(it);
    return -ENOBUFS;
  }
  target_t *t = n->targets;
  while (t != NULL && strcmp(t->url, target->url) != 0) t = t->next;
  if (t == NULL) {
    t = ember_calloc(1, sizeof *t);
    char *url = t ? ember_strdup(target->url) : NULL;
    if (url == NULL) {
      pthread_mutex_unlock(&n->mu);
      ember_free(t);
      item_free(it);
      return -ENOMEM;
    }
    t->url = url;
    shown_url(url, t->shown, sizeof t->shown);
    t->next_ns = ember_time_mono_ns();
    /* Appended, so that the round-robin order is the order receivers came. */
    target_t **pp = &n->targets;
    while (*pp != NULL) pp = &(*pp)->next;
    *pp = t;
  }
  it->queued_ns = ember_time_mono_ns();
  if (t->tail != NULL) {
    t->tail->next = it;
  } else {
    t->head = it;
  }
  t->tail = it;
  t->n++;
  set_queued(n, n->queued + 1);
  if (n->full_logged) {
    EMBER_INFO(LOG, "webhook queue accepts notifications again (%llu dropped while it was full)",
               (unsigned long long)n->full_dropped);
    n->full_logged = false;
    n->full_dropped = 0;
  }
  pthread_cond_signal(&n->cv);
  pthread_mutex_unlock(&n->mu);
  return 0;
}

int ember__notify_publish(ember__notify_t *n, const char *key, const char *status,
                          const json_t *alert_doc) {
  if (n == NULL || !status_ok(status) || !doc_ok(alert_doc)) return -EINVAL;
  if (n->producer == NULL) return 0;
  json_t *rec = ember__notify_record(status, alert_doc);
  if (rec == NULL) return -ENOMEM;
  ember_buf_t b;
  ember_buf_init(&b, MAX_BODY);
  int rc = ember__json_dump(rec, &b);
  json_decref(rec);
  if (rc == 0) {
    rd_kafka_resp_err_t err = rd_kafka_producev(n->producer, RD_KAFKA_V_TOPIC(n->topic),
                                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                                RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                                                RD_KAFKA_V_VALUE(b.data, b.len), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      count(&n->publish_errors, n->m_publish_errors);
      EMBER_WARN_LIMITED(LOG, "%s: cannot queue the %s transition of alert %s: %s", n->topic,
                         status, str_of(alert_doc, "id"), rd_kafka_err2str(err));
      rc = EMBER_EKAFKA;
    }
  }
  ember_buf_free(&b);
  return rc;
}

void ember__notify_stats(ember__notify_t *n, ember__notify_stats_t *out) {
  if (n == NULL || out == NULL) return;
  out->sent = atomic_load(&n->sent);
  out->failed = atomic_load(&n->failed);
  out->dropped = atomic_load(&n->dropped);
  out->publish_errors = atomic_load(&n->publish_errors);
  pthread_mutex_lock(&n->mu);
  out->queued = n->queued;
  pthread_mutex_unlock(&n->mu);
}
