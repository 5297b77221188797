/* Alert notifications (collector/notify.c): the Alertmanager and plain JSON
 * bodies, and webhook delivery to a real HTTP receiver on 127.0.0.1
 * (libmicrohttpd, one thread per connection so that a handler may hang on
 * purpose): delivery, retries while the receiver is down or answers 503,
 * refusals, timeouts, the bounded queue, fairness between receivers,
 * shutdown; and the ember.alerts record through the embedded (mock) Kafka.
 *
 * Waits poll a condition with a generous limit that only bounds a failing
 * test; nothing asserts that something took less than some wall time,
 * except where a lower bound is the point (a timeout cannot fire early). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "ember/buf.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/metrics.h"
#include "notify.h"

#define ALERT_ID    "a1b2c3d4e5f60708"
#define STARTED_MS  INT64_C(1764410400123)
#define RESOLVED_MS INT64_C(1764410460456)
#define DASHBOARD   "http://127.0.0.1:7070/"
#define WAIT_MS     20000 /* limit of every wait: only a failing test reaches it */
#define MAX_BODIES  32

/* ------------------------------------------------------------ helpers -- */

#define EVENTUALLY(cond)                                                                           \
  do {                                                                                             \
    int64_t end_ = ember_time_mono_ns() + (int64_t)WAIT_MS * 1000000;                              \
    while (!(cond)) {                                                                              \
      if (ember_time_mono_ns() > end_) fail_msg("timed out waiting for: %s", #cond);               \
      usleep(2000);                                                                                \
    }                                                                                              \
  } while (0)

static json_t *alert_doc(const char *state) {
  bool resolved = strcmp(state, "resolved") == 0;
  json_t *d = json_pack("{s:s, s:s, s:s, s:{s:s, s:s}, s:f, s:f, s:s, s:I, s:o, s:I,"
                        " s:[{s:s, s:s, s:f, s:f, s:f}, {s:s, s:s, s:f, s:f, s:f}], s:{s:s, s:s}}",
                        "id", ALERT_ID, "rule", "cpu-hot", "state", state, "labels", "worker",
                        "api", "host", "h1", "value", resolved ? 0.1 : 0.98, "threshold", 0.5,
                        "kind", "above", "started", (json_int_t)STARTED_MS, "resolved",
                        resolved ? json_integer((json_int_t)RESOLVED_MS) : json_null(), "updated",
                        (json_int_t)(resolved ? RESOLVED_MS : STARTED_MS), "top", "function",
                        "burn_hot", "file", "burn.c", "baseline", 0.02, "spike", 0.91, "delta",
                        0.89, "function", "idle_loop", "file", "main.c", "baseline", 0.5, "spike",
                        0.05, "delta", -0.45, "capture", "session", "s-1", "state", "running");
  assert_non_null(d);
  return d;
}

/* obj[key] as a string, never NULL (cmocka's string asserts take none). */
static const char *jstr(const json_t *obj, const char *key) {
  const char *s = json_string_value(json_object_get(obj, key));
  return s ? s : "(missing)";
}

/* Delivery outcomes reported through done_cb. */
typedef struct tally {
  pthread_mutex_t mu;
  unsigned ok, bad;
} tally_t;
#define TALLY_INIT                                                                                 \
  { PTHREAD_MUTEX_INITIALIZER, 0, 0 }

static void on_done(void *ctx, bool delivered) {
  tally_t *t = ctx;
  pthread_mutex_lock(&t->mu);
  if (delivered) {
    t->ok++;
  } else {
    t->bad++;
  }
  pthread_mutex_unlock(&t->mu);
}

static unsigned tally_ok(tally_t *t) {
  pthread_mutex_lock(&t->mu);
  unsigned v = t->ok;
  pthread_mutex_unlock(&t->mu);
  return v;
}

static unsigned tally_bad(tally_t *t) {
  pthread_mutex_lock(&t->mu);
  unsigned v = t->bad;
  pthread_mutex_unlock(&t->mu);
  return v;
}

static ember__notify_stats_t stats(ember__notify_t *n) {
  ember__notify_stats_t s;
  ember__notify_stats(n, &s);
  return s;
}

/* ------------------------------------------------------ the receiver -- */

typedef enum rmode { RECV_OK, RECV_FAIL, RECV_REFUSE, RECV_HANG } rmode_t;

typedef struct receiver {
  struct MHD_Daemon *d;
  uint16_t port;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rmode_t mode;
  unsigned fail_left;       /* RECV_FAIL: answer 503 this many times, then 200 */
  unsigned requests;        /* complete requests seen */
  unsigned hanging;         /* RECV_HANG: handlers waiting now */
  bool release;             /* RECV_HANG: let them (and every later request) answer 200 */
  char *bodies[MAX_BODIES]; /* of the requests answered 200 */
  size_t nbodies;
  char method[16], path[128], content_type[64];
} receiver_t;

typedef struct rconn {
  ember_buf_t body;
} rconn_t;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  (void)version;
  receiver_t *r = cls;
  rconn_t *x = *con_cls;
  if (x == NULL) {
    x = calloc(1, sizeof *x);
    if (x == NULL) return MHD_NO;
    ember_buf_init(&x->body, 1 << 20);
    *con_cls = x;
    return MHD_YES;
  }
  if (*upload_size > 0) {
    if (ember_buf_append(&x->body, upload, *upload_size) != 0) return MHD_NO;
    *upload_size = 0;
    return MHD_YES;
  }
  unsigned status = 200;
  pthread_mutex_lock(&r->mu);
  r->requests++;
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
  snprintf(r->method, sizeof r->method, "%s", method);
  snprintf(r->path, sizeof r->path, "%s", url);
  snprintf(r->content_type, sizeof r->content_type, "%s", ct ? ct : "");
  if (r->mode == RECV_HANG) {
    r->hanging++;
    pthread_cond_broadcast(&r->cv);
    while (!r->release) pthread_cond_wait(&r->cv, &r->mu);
    r->hanging--;
  } else if (r->mode == RECV_FAIL && r->fail_left > 0) {
    r->fail_left--;
    status = 503;
  } else if (r->mode == RECV_REFUSE) {
    status = 400;
  }
  if (status == 200 && r->nbodies < MAX_BODIES)
    r->bodies[r->nbodies++] = strdup(x->body.data ? x->body.data : "");
  pthread_mutex_unlock(&r->mu);
  static char ok[] = "ok";
  struct MHD_Response *resp = MHD_create_response_from_buffer(2, ok, MHD_RESPMEM_PERSISTENT);
  if (resp == NULL) return MHD_NO;
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  rconn_t *x = *con_cls;
  if (x == NULL) return;
  ember_buf_free(&x->body);
  free(x);
  *con_cls = NULL;
}

/* Listen on 127.0.0.1:port (0 = any free port). */
static void receiver_start(receiver_t *r, uint16_t port) {
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  r->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                              MHD_USE_ERROR_LOG,
                          port, NULL, NULL, on_request, r, MHD_OPTION_SOCK_ADDR, &sa,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, r, MHD_OPTION_END);
  assert_non_null(r->d);
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT);
  assert_non_null(info);
  r->port = info->port;
}

static void receiver_stop(receiver_t *r) {
  if (r->d == NULL) return;
  pthread_mutex_lock(&r->mu);
  r->release = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  MHD_stop_daemon(r->d);
  r->d = NULL;
}

static receiver_t *receiver_new(rmode_t mode) {
  receiver_t *r = calloc(1, sizeof *r);
  assert_non_null(r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->mode = mode;
  receiver_start(r, 0);
  return r;
}

static void receiver_free(receiver_t *r) {
  receiver_stop(r);
  for (size_t i = 0; i < r->nbodies; i++) free(r->bodies[i]);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static unsigned receiver_requests(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  unsigned v = r->requests;
  pthread_mutex_unlock(&r->mu);
  return v;
}

static unsigned receiver_hanging(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  unsigned v = r->hanging;
  pthread_mutex_unlock(&r->mu);
  return v;
}

static void receiver_release(receiver_t *r) {
  pthread_mutex_lock(&r->mu);
  r->release = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* A port that nothing listens on (a moment ago something did). */
static uint16_t dead_port(void) {
  receiver_t *r = receiver_new(RECV_OK);
  uint16_t port = r->port;
  receiver_free(r);
  return port;
}

typedef struct url {
  char s[96];
} url_t;

static url_t url_of(uint16_t port) {
  url_t u;
  snprintf(u.s, sizeof u.s, "http://127.0.0.1:%u/api/v2/alerts", (unsigned)port);
  return u;
}

static ember__notify_t *notifier(const ember__notify_opts_t *o) {
  ember__notify_t *n = NULL;
  char err[256] = "";
  int rc = ember__notify_new(o, &n, err, sizeof err);
  if (rc != 0) fail_msg("ember__notify_new: %s (%s)", ember_strerror(rc), err);
  return n;
}

static int send_doc(ember__notify_t *n, const char *url, ember__notify_format_t f,
                    const char *status, tally_t *t) {
  json_t *doc = alert_doc(status);
  ember__notify_target_t target = {.url = url, .format = f};
  int rc = ember__notify_send(n, &target, status, doc, on_done, t);
  json_decref(doc);
  return rc;
}

/* An Alertmanager postableAlerts body, checked field by field and type by
 * type against what POST /api/v2/alerts takes. */
static void check_alertmanager(const char *text, const char *status) {
  json_error_t jerr;
  json_t *body = json_loads(text, 0, &jerr);
  if (body == NULL) fail_msg("not JSON (%s): %s", jerr.text, text);
  assert_true(json_is_array(body));
  assert_int_equal(json_array_size(body), 1);
  json_t *a = json_array_get(body, 0);
  assert_true(json_is_object(a));
  static const char *const allowed[] = {"labels", "annotations", "startsAt", "endsAt",
                                        "generatorURL"};
  const char *k;
  json_t *v;
  json_object_foreach(a, k, v) {
    bool ok = false;
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
      ok |= strcmp(k, allowed[i]) == 0;
    if (!ok) fail_msg("postableAlert has no field %s", k);
  }
  json_t *labels = json_object_get(a, "labels");
  assert_true(json_is_object(labels));
  json_object_foreach(labels, k, v) assert_true(json_is_string(v));
  assert_string_equal(jstr(labels, "alertname"), "cpu-hot");
  assert_string_equal(jstr(labels, "worker"), "api");
  assert_string_equal(jstr(labels, "host"), "h1");
  assert_string_equal(jstr(labels, "severity"), "warning");
  json_t *ann = json_object_get(a, "annotations");
  assert_true(json_is_object(ann));
  json_object_foreach(ann, k, v) assert_true(json_is_string(v));
  const char *summary = jstr(ann, "summary");
  const char *desc = jstr(ann, "description");
  assert_non_null(summary);
  assert_non_null(desc);
  assert_non_null(strstr(summary, "cpu-hot"));
  assert_non_null(strstr(summary, status));
  assert_non_null(strstr(summary, "api"));
  /* The functions that grew, the first first. */
  const char *hot = strstr(desc, "burn_hot"), *idle = strstr(desc, "idle_loop");
  assert_non_null(hot);
  assert_non_null(idle);
  assert_true(hot < idle);
  assert_non_null(strstr(desc, "s-1"));
  assert_string_equal(jstr(ann, "ember_alert_id"), ALERT_ID);
  assert_string_equal(jstr(a, "startsAt"), "2025-11-29T10:00:00.123Z");
  if (strcmp(status, "firing") == 0) {
    assert_null(json_object_get(a, "endsAt"));
  } else {
    assert_string_equal(jstr(a, "endsAt"), "2025-11-29T10:01:00.456Z");
  }
  assert_string_equal(jstr(a, "generatorURL"), "http://127.0.0.1:7070/#/alerts/" ALERT_ID);
  json_decref(body);
}

/* --------------------------------------------------------------- bodies -- */

static void test_notify_rfc3339(void **state) {
  (void)state;
  char t[40];
  assert_int_equal(ember__notify_rfc3339(0, t, sizeof t), 0);
  assert_string_equal(t, "1970-01-01T00:00:00.000Z");
  assert_int_equal(ember__notify_rfc3339(STARTED_MS, t, sizeof t), 0);
  assert_string_equal(t, "2025-11-29T10:00:00.123Z");
  assert_int_equal(ember__notify_rfc3339(-1, t, sizeof t), -EINVAL);
  assert_int_equal(ember__notify_rfc3339(STARTED_MS, t, 10), -EINVAL);
}

static void test_notify_body_alertmanager(void **state) {
  (void)state;
  const char *statuses[] = {"firing", "resolved"};
  for (size_t i = 0; i < 2; i++) {
    json_t *doc = alert_doc(statuses[i]);
    json_t *body = ember__notify_body_alertmanager(statuses[i], doc, DASHBOARD);
    assert_non_null(body);
    char *text = json_dumps(body, JSON_COMPACT);
    check_alertmanager(text, statuses[i]);
    free(text);
    json_decref(body);
    /* Without a dashboard there is no link. */
    body = ember__notify_body_alertmanager(statuses[i], doc, NULL);
    assert_null(json_object_get(json_array_get(body, 0), "generatorURL"));
    json_decref(body);
    json_decref(doc);
  }
}

static void test_notify_body_label_names(void **state) {
  (void)state;
  json_t *doc = alert_doc("firing");
  json_t *labels = json_object_get(doc, "labels");
  json_object_set_new(labels, "k8s.pod-name", json_string("p1"));
  json_object_set_new(labels, "9lives", json_string("x"));
  json_object_set_new(labels, "alertname", json_string("spoofed"));
  json_object_set_new(labels, "empty", json_string(""));
  json_object_set_new(labels, "number", json_integer(3));
  json_t *body = ember__notify_body_alertmanager("firing", doc, NULL);
  json_t *l = json_object_get(json_array_get(body, 0), "labels");
  assert_string_equal(jstr(l, "k8s_pod_name"), "p1");
  assert_string_equal(jstr(l, "_9lives"), "x");
  assert_string_equal(jstr(l, "alertname"), "cpu-hot");
  assert_null(json_object_get(l, "empty"));
  assert_null(json_object_get(l, "number"));
  json_decref(body);
  json_decref(doc);
}

static void test_notify_body_json(void **state) {
  (void)state;
  json_t *doc = alert_doc("resolved");
  json_t *body = ember__notify_body_json("resolved", doc);
  assert_non_null(body);
  assert_int_equal(json_object_size(body), 3);
  assert_int_equal(json_integer_value(json_object_get(body, "version")), 1);
  assert_string_equal(jstr(body, "status"), "resolved");
  assert_true(json_equal(json_object_get(body, "alert"), doc));
  json_decref(body);
  json_t *rec = ember__notify_record("firing", doc);
  assert_int_equal(json_object_size(rec), 2);
  assert_string_equal(jstr(rec, "status"), "firing");
  assert_true(json_equal(json_object_get(rec, "alert"), doc));
  json_decref(rec);
  json_decref(doc);
}

static void test_notify_rejects_bad_input(void **state) {
  (void)state;
  json_t *doc = alert_doc("firing");
  assert_null(ember__notify_body_alertmanager("pending", doc, NULL));
  assert_null(ember__notify_body_json(NULL, doc));
  json_t *bad = json_deep_copy(doc);
  json_object_del(bad, "id");
  assert_null(ember__notify_body_alertmanager("firing", bad, NULL));
  json_object_set_new(bad, "id", json_string(ALERT_ID));
  json_object_set_new(bad, "started", json_string("yesterday"));
  assert_null(ember__notify_body_json("firing", bad));

  ember__notify_format_t f = EMBER__NOTIFY_JSON;
  assert_int_equal(ember__notify_format_parse("alertmanager", &f), 0);
  assert_int_equal(f, EMBER__NOTIFY_ALERTMANAGER);
  assert_int_equal(ember__notify_format_parse("json", &f), 0);
  assert_int_equal(f, EMBER__NOTIFY_JSON);
  assert_int_equal(ember__notify_format_parse("slack", &f), -EINVAL);
  assert_string_equal(ember__notify_format_name(EMBER__NOTIFY_JSON), "json");

  ember__notify_opts_t o = {0};
  ember__notify_t *n = notifier(&o);
  tally_t t = TALLY_INIT;
  ember__notify_target_t target = {.url = "ftp://127.0.0.1/x"};
  assert_int_equal(ember__notify_send(n, &target, "firing", doc, on_done, &t), -EINVAL);
  target.url = "not a url";
  assert_int_equal(ember__notify_send(n, &target, "firing", doc, on_done, &t), -EINVAL);
  target.url = "http://127.0.0.1:9/hook";
  assert_int_equal(ember__notify_send(n, &target, "pending", doc, on_done, &t), -EINVAL);
  assert_int_equal(ember__notify_send(n, &target, "firing", bad, on_done, &t), -EINVAL);
  assert_int_equal(ember__notify_send(NULL, &target, "firing", doc, on_done, &t), -EINVAL);
  assert_int_equal(ember__notify_publish(n, "api", "pending", doc), -EINVAL);
  /* No producer: publishing is a no-op. */
  assert_int_equal(ember__notify_publish(n, "api", "firing", doc), 0);
  assert_int_equal(stats(n).queued, 0);
  ember__notify_free(n, 0);
  assert_int_equal(tally_ok(&t) + tally_bad(&t), 0);
  json_decref(bad);
  json_decref(doc);
}

/* ------------------------------------------------------------- delivery -- */

static void test_notify_delivers_firing_and_resolved(void **state) {
  (void)state;
  receiver_t *r = receiver_new(RECV_OK);
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  ember__notify_opts_t o = {.metrics = m, .dashboard_url = DASHBOARD};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(r->port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  EVENTUALLY(tally_ok(&t) == 1);
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "resolved", &t), 0);
  EVENTUALLY(tally_ok(&t) == 2);
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_JSON, "resolved", &t), 0);
  EVENTUALLY(tally_ok(&t) == 3);
  assert_int_equal(tally_bad(&t), 0);

  pthread_mutex_lock(&r->mu);
  assert_int_equal(r->requests, 3);
  assert_int_equal(r->nbodies, 3);
  assert_string_equal(r->method, "POST");
  assert_string_equal(r->path, "/api/v2/alerts");
  assert_string_equal(r->content_type, "application/json");
  check_alertmanager(r->bodies[0], "firing");
  check_alertmanager(r->bodies[1], "resolved");
  json_t *plain = json_loads(r->bodies[2], 0, NULL);
  pthread_mutex_unlock(&r->mu);
  assert_non_null(plain);
  assert_int_equal(json_integer_value(json_object_get(plain, "version")), 1);
  assert_string_equal(jstr(plain, "status"), "resolved");
  json_t *doc = alert_doc("resolved");
  assert_true(json_equal(json_object_get(plain, "alert"), doc));
  json_decref(doc);
  json_decref(plain);

  ember__notify_stats_t s = stats(n);
  assert_int_equal(s.sent, 3);
  assert_int_equal(s.failed, 0);
  assert_int_equal(s.dropped, 0);
  assert_int_equal(s.queued, 0);
  ember_buf_t text;
  ember_buf_init(&text, 1 << 20);
  assert_int_equal(ember_metrics_render(m, &text), 0);
  assert_non_null(strstr(text.data, "ember_collector_notify_sent_total 3\n"));
  assert_non_null(strstr(text.data, "ember_collector_notify_failed_total 0\n"));
  assert_non_null(strstr(text.data, "ember_collector_notify_dropped_total 0\n"));
  assert_non_null(strstr(text.data, "ember_collector_notify_queue 0\n"));
  ember_buf_free(&text);
  ember__notify_free(n, 1000);
  ember_metrics_free(m);
  receiver_free(r);
}

/* Nothing listens at first; the receiver comes up on the same port after
 * a few failed attempts and gets the notification exactly once. */
static void test_notify_receiver_down_then_up(void **state) {
  (void)state;
  uint16_t port = dead_port();
  ember__notify_opts_t o = {.retry_initial_ms = 20, .retry_max_ms = 100};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  EVENTUALLY(stats(n).failed >= 4);
  assert_int_equal(tally_ok(&t) + tally_bad(&t), 0);
  assert_int_equal(stats(n).queued, 1);

  receiver_t *r = calloc(1, sizeof *r);
  assert_non_null(r);
  pthread_mutex_init(&r->mu, NULL);
  pthread_cond_init(&r->cv, NULL);
  r->mode = RECV_OK;
  receiver_start(r, port);
  EVENTUALLY(tally_ok(&t) == 1);
  /* Longer than the longest backoff: a second delivery would have come. */
  usleep(300 * 1000);
  assert_int_equal(receiver_requests(r), 1);
  assert_int_equal(tally_ok(&t), 1);
  assert_int_equal(tally_bad(&t), 0);
  ember__notify_stats_t s = stats(n);
  assert_int_equal(s.sent, 1);
  assert_int_equal(s.dropped, 0);
  assert_int_equal(s.queued, 0);
  ember__notify_free(n, 0);
  receiver_free(r);
}

static void test_notify_retries_5xx(void **state) {
  (void)state;
  receiver_t *r = receiver_new(RECV_FAIL);
  r->fail_left = 3;
  ember__notify_opts_t o = {.retry_initial_ms = 10, .retry_max_ms = 40};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(r->port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_JSON, "firing", &t), 0);
  EVENTUALLY(tally_ok(&t) == 1);
  assert_int_equal(receiver_requests(r), 4);
  ember__notify_stats_t s = stats(n);
  assert_int_equal(s.failed, 3);
  assert_int_equal(s.sent, 1);
  ember__notify_free(n, 0);
  receiver_free(r);
}

static void test_notify_refused_not_retried(void **state) {
  (void)state;
  receiver_t *r = receiver_new(RECV_REFUSE);
  ember__notify_opts_t o = {.retry_initial_ms = 10, .retry_max_ms = 20};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(r->port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  EVENTUALLY(tally_bad(&t) == 1);
  /* Many backoffs long: a retry would have come. */
  usleep(200 * 1000);
  assert_int_equal(receiver_requests(r), 1);
  ember__notify_stats_t s = stats(n);
  assert_int_equal(s.sent, 0);
  assert_int_equal(s.failed, 1);
  assert_int_equal(s.dropped, 1);
  assert_int_equal(s.queued, 0);
  ember__notify_free(n, 0);
  assert_int_equal(tally_ok(&t), 0);
  assert_int_equal(tally_bad(&t), 1);
  receiver_free(r);
}

/* The receiver takes the first notification and never answers until the
 * test says so: a second send returns while it still hangs. */
static void test_notify_send_does_not_wait_for_receiver(void **state) {
  (void)state;
  receiver_t *r = receiver_new(RECV_HANG);
  ember__notify_opts_t o = {.timeout_ms = 60000, .dashboard_url = DASHBOARD};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(r->port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  EVENTUALLY(receiver_hanging(r) == 1);
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "resolved", &t), 0);
  /* Only this thread releases the receiver: it has not answered yet. */
  assert_int_equal(receiver_hanging(r), 1);
  assert_int_equal(tally_ok(&t) + tally_bad(&t), 0);
  assert_int_equal(stats(n).queued, 2);
  receiver_release(r);
  EVENTUALLY(tally_ok(&t) == 2);
  pthread_mutex_lock(&r->mu);
  assert_int_equal(r->nbodies, 2);
  check_alertmanager(r->bodies[1], "resolved");
  pthread_mutex_unlock(&r->mu);
  ember__notify_free(n, 0);
  receiver_free(r);
}

/* A receiver that never answers: each attempt ends at timeout_ms (not
 * before) and is retried. */
static void test_notify_timeout_retried(void **state) {
  (void)state;
  receiver_t *r = receiver_new(RECV_HANG);
  enum { TIMEOUT_MS = 200 };
  ember__notify_opts_t o = {.timeout_ms = TIMEOUT_MS, .retry_initial_ms = 10, .retry_max_ms = 20};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(r->port);
  tally_t t = TALLY_INIT;
  int64_t start = ember_time_mono_ns();
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_JSON, "firing", &t), 0);
  EVENTUALLY(receiver_requests(r) >= 1);
  EVENTUALLY(stats(n).failed >= 1);
  /* The attempt started after the send: its failure cannot come sooner. */
  assert_true((ember_time_mono_ns() - start) / 1000000 >= TIMEOUT_MS);
  EVENTUALLY(receiver_requests(r) >= 2);
  assert_int_equal(tally_ok(&t) + tally_bad(&t), 0);
  ember__notify_free(n, 0);
  assert_int_equal(tally_bad(&t), 1);
  receiver_free(r);
}

static void test_notify_queue_full(void **state) {
  (void)state;
  uint16_t port = dead_port();
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  /* Backoffs far longer than the test: the queue only fills. */
  ember__notify_opts_t o = {
      .metrics = m, .queue_max = 2, .retry_initial_ms = 600000, .retry_max_ms = 600000};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "resolved", &t), 0);
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_JSON, "firing", &t), -ENOBUFS);
  assert_int_equal(send_doc(n, "http://127.0.0.1:9/other", EMBER__NOTIFY_JSON, "firing", &t),
                   -ENOBUFS);
  ember__notify_stats_t s = stats(n);
  assert_int_equal(s.dropped, 2);
  assert_int_equal(s.queued, 2);
  ember_buf_t text;
  ember_buf_init(&text, 1 << 20);
  assert_int_equal(ember_metrics_render(m, &text), 0);
  assert_non_null(strstr(text.data, "ember_collector_notify_dropped_total 2\n"));
  assert_non_null(strstr(text.data, "ember_collector_notify_queue 2\n"));
  ember_buf_free(&text);
  ember__notify_free(n, 0);
  /* The two accepted sends hear that they were dropped; the refused
   * ones never had a callback. */
  assert_int_equal(tally_ok(&t), 0);
  assert_int_equal(tally_bad(&t), 2);
  ember_metrics_free(m);
}

static void test_notify_gives_up(void **state) {
  (void)state;
  uint16_t port = dead_port();
  ember__notify_opts_t o = {.retry_initial_ms = 10, .retry_max_ms = 20, .give_up_ms = 300};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(port);
  tally_t t = TALLY_INIT;
  int64_t start = ember_time_mono_ns();
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  EVENTUALLY(tally_bad(&t) == 1);
  assert_true(ember_time_mono_ns() - start >= 300 * 1000000LL);
  ember__notify_stats_t s = stats(n);
  assert_true(s.failed >= 2);
  assert_int_equal(s.dropped, 1);
  assert_int_equal(s.queued, 0);
  ember__notify_free(n, 0);
  assert_int_equal(tally_bad(&t), 1);
}

/* A receiver that hangs until timeout does not hold back another one. */
static void test_notify_dead_receiver_does_not_starve_others(void **state) {
  (void)state;
  receiver_t *dead = receiver_new(RECV_HANG);
  receiver_t *live = receiver_new(RECV_OK);
  ember__notify_opts_t o = {.timeout_ms = 300, .retry_initial_ms = 1000, .retry_max_ms = 1000};
  ember__notify_t *n = notifier(&o);
  url_t ud = url_of(dead->port), ul = url_of(live->port);
  tally_t td = TALLY_INIT, tl = TALLY_INIT;
  for (int i = 0; i < 5; i++)
    assert_int_equal(send_doc(n, ud.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &td), 0);
  EVENTUALLY(receiver_hanging(dead) == 1);
  assert_int_equal(send_doc(n, ul.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &tl), 0);
  assert_int_equal(send_doc(n, ul.s, EMBER__NOTIFY_ALERTMANAGER, "resolved", &tl), 0);
  EVENTUALLY(tally_ok(&tl) == 2);
  assert_int_equal(tally_ok(&td) + tally_bad(&td), 0);
  assert_int_equal(stats(n).queued, 5);
  ember__notify_free(n, 0);
  assert_int_equal(tally_bad(&td), 5);
  receiver_free(dead);
  receiver_free(live);
}

/* Free with a notification queued: delivered within the flush when the
 * receiver answers; dropped (with its callback) when it cannot. */
static void test_notify_free_with_pending(void **state) {
  (void)state;
  receiver_t *r = receiver_new(RECV_OK);
  ember__notify_opts_t o = {0};
  ember__notify_t *n = notifier(&o);
  url_t u = url_of(r->port);
  tally_t t = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_ALERTMANAGER, "firing", &t), 0);
  ember__notify_free(n, WAIT_MS);
  assert_int_equal(tally_ok(&t), 1);
  assert_int_equal(receiver_requests(r), 1);
  receiver_free(r);

  /* Down, next attempt far away: dropped at once. */
  uint16_t port = dead_port();
  ember__notify_opts_t o2 = {.retry_initial_ms = 600000, .retry_max_ms = 600000};
  n = notifier(&o2);
  u = url_of(port);
  tally_t t2 = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_JSON, "firing", &t2), 0);
  EVENTUALLY(stats(n).failed == 1);
  ember__notify_free(n, 100);
  assert_int_equal(tally_bad(&t2), 1);

  /* Hanging receiver and a long timeout: the request in flight is cut at
   * the flush deadline, not at the timeout. */
  r = receiver_new(RECV_HANG);
  ember__notify_opts_t o3 = {.timeout_ms = 120000};
  n = notifier(&o3);
  u = url_of(r->port);
  tally_t t3 = TALLY_INIT;
  assert_int_equal(send_doc(n, u.s, EMBER__NOTIFY_JSON, "firing", &t3), 0);
  EVENTUALLY(receiver_hanging(r) == 1);
  int64_t start = ember_time_mono_ns();
  ember__notify_free(n, 100);
  assert_true(ember_time_mono_ns() - start < 60000 * 1000000LL);
  assert_int_equal(receiver_hanging(r), 1);
  assert_int_equal(tally_bad(&t3), 1);
  receiver_free(r);
}

/* Fail the Nth allocation of new + send + free, for every N: no crash, no
 * leak (the ASan tree checks), and a send that fails has no callback. */
static void test_notify_alloc_failures(void **state) {
  (void)state;
  uint16_t port = dead_port();
  url_t u = url_of(port);
  json_t *doc = alert_doc("firing");
  ember__notify_target_t target = {.url = u.s, .format = EMBER__NOTIFY_ALERTMANAGER};
  for (long fail = 0;; fail++) {
    tally_t t = TALLY_INIT;
    ember__notify_opts_t o = {.dashboard_url = DASHBOARD, .retry_initial_ms = 600000};
    ember__notify_t *n = NULL;
    char err[256];
    ember_alloc_fail_after(fail);
    int rc = ember__notify_new(&o, &n, err, sizeof err);
    int src = -1;
    if (rc == 0) src = ember__notify_send(n, &target, "firing", doc, on_done, &t);
    long used = ember_alloc_fail_reset();
    if (rc == 0) {
      ember__notify_free(n, 0);
      assert_int_equal(tally_ok(&t) + tally_bad(&t), src == 0 ? 1 : 0);
    } else {
      assert_null(n);
    }
    if (rc == 0 && src == 0 && used < fail) break;
  }
  json_decref(doc);
}

/* ---------------------------------------------------------------- Kafka -- */

static void test_notify_publish_to_kafka(void **state) {
  (void)state;
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "kafka.linger.ms", "5"), 0);
  ember_kafka_t *k = NULL;
  char err[512] = "";
  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  if (rc != 0) fail_msg("ember_kafka_new: %s (%s)", ember_strerror(rc), err);
  rd_kafka_t *p = NULL;
  assert_int_equal(ember_kafka_producer_new(k, NULL, &p, err, sizeof err), 0);
  ember__notify_opts_t o = {.producer = p};
  ember__notify_t *n = notifier(&o);
  json_t *fire = alert_doc("firing"), *res = alert_doc("resolved");
  assert_int_equal(ember__notify_publish(n, "api", "firing", fire), 0);
  assert_int_equal(ember__notify_publish(n, "api", "resolved", res), 0);
  assert_int_equal(rd_kafka_flush(p, 30000), RD_KAFKA_RESP_ERR_NO_ERROR);
  assert_int_equal(stats(n).publish_errors, 0);

  /* Read the topic back by assignment (no group join to wait for). */
  rd_kafka_conf_t *cc = NULL;
  assert_int_equal(ember_kafka_consumer_conf(k, "ember-test-notify", &cc, err, sizeof err), 0);
  rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, cc, err, sizeof err);
  assert_non_null(c);
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(4);
  for (int32_t i = 0; i < 4; i++)
    rd_kafka_topic_partition_list_add(parts, EMBER_TOPIC_ALERTS, i)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  assert_int_equal(rd_kafka_assign(c, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_destroy(parts);
  json_t *got[2] = {NULL, NULL};
  size_t ngot = 0;
  int64_t end = ember_time_mono_ns() + (int64_t)WAIT_MS * 1000000;
  while (ngot < 2 && ember_time_mono_ns() < end) {
    rd_kafka_message_t *msg = rd_kafka_consumer_poll(c, 100);
    if (msg == NULL) continue;
    if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      assert_int_equal(msg->key_len, 3);
      assert_memory_equal(msg->key, "api", 3);
      got[ngot] = json_loadb(msg->payload, msg->len, 0, NULL);
      assert_non_null(got[ngot]);
      ngot++;
    }
    rd_kafka_message_destroy(msg);
  }
  assert_int_equal(ngot, 2);
  /* One key, one partition: in order. */
  assert_int_equal(json_object_size(got[0]), 2);
  assert_string_equal(jstr(got[0], "status"), "firing");
  assert_true(json_equal(json_object_get(got[0], "alert"), fire));
  assert_string_equal(jstr(got[1], "status"), "resolved");
  assert_true(json_equal(json_object_get(got[1], "alert"), res));
  json_decref(got[0]);
  json_decref(got[1]);
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  ember__notify_free(n, 0);
  json_decref(fire);
  json_decref(res);
  rd_kafka_destroy(p);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

int main(void) {
  /* librdkafka's INFO lines would bury cmocka's report. */
  ember_log_set_level(EMBER_LOG_WARN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_notify_rfc3339),
      cmocka_unit_test(test_notify_body_alertmanager),
      cmocka_unit_test(test_notify_body_label_names),
      cmocka_unit_test(test_notify_body_json),
      cmocka_unit_test(test_notify_rejects_bad_input),
      cmocka_unit_test(test_notify_delivers_firing_and_resolved),
      cmocka_unit_test(test_notify_receiver_down_then_up),
      cmocka_unit_test(test_notify_retries_5xx),
      cmocka_unit_test(test_notify_refused_not_retried),
      cmocka_unit_test(test_notify_send_does_not_wait_for_receiver),
      cmocka_unit_test(test_notify_timeout_retried),
      cmocka_unit_test(test_notify_queue_full),
      cmocka_unit_test(test_notify_gives_up),
      cmocka_unit_test(test_notify_dead_receiver_does_not_starve_others),
      cmocka_unit_test(test_notify_free_with_pending),
      cmocka_unit_test(test_notify_alloc_failures),
      cmocka_unit_test(test_notify_publish_to_kafka),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
