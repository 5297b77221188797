/* Metrics registry, its exposition text, and the /metrics HTTP server. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/metrics.h"

static void test_metrics_render(void **state) {
  (void)state;
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  ember_metric_t *c = ember_metrics_counter(m, "ember_test_events_total", "Events seen");
  ember_metric_t *g = ember_metrics_gauge(m, "ember_test_depth", "Queue depth");
  assert_non_null(c);
  assert_non_null(g);
  assert_null(ember_metrics_counter(m, "9bad", "x"));
  assert_null(ember_metrics_counter(m, "bad-name", "x"));
  ember_metric_add(c, 2);
  ember_metric_add(c, 3);
  ember_metric_set(g, 1.5);
  ember_metric_add(NULL, 1); /* ignored */
  assert_true(ember_metric_get(c) == 5.0);
  ember_buf_t b;
  ember_buf_init(&b, 4096);
  assert_int_equal(ember_metrics_render(m, &b), 0);
  assert_string_equal(b.data, "# HELP ember_test_events_total Events seen\n"
                              "# TYPE ember_test_events_total counter\n"
                              "ember_test_events_total 5\n"
                              "# HELP ember_test_depth Queue depth\n"
                              "# TYPE ember_test_depth gauge\n"
                              "ember_test_depth 1.5\n");
  ember_buf_free(&b);
  ember_metrics_free(m);
  assert_true(ember_self_cpu_seconds() > 0.0);
  assert_true(ember_self_rss_bytes() > 1024.0 * 1024.0);
}

/* A family of counters with a label: HELP and TYPE once, one line each. */
static void test_metrics_labelled_family(void **state) {
  (void)state;
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  ember_metric_t *a = ember_metrics_counter(m, "ember_test_refused_total{reason=\"bad_mac\"}", "R");
  ember_metric_t *b =
      ember_metrics_counter_of(m, "ember_test_refused_total", "reason", "no_ttl", "R");
  assert_non_null(a);
  assert_non_null(b);
  assert_null(ember_metrics_counter_of(m, "ember_test_x", "reason", "a b", "x"));
  assert_null(ember_metrics_counter_of(m, "ember_test_x", "reason", NULL, "x"));
  assert_null(ember_metrics_counter(m, "ember_test_x{reason=\"a b\"}", "x"));
  assert_null(ember_metrics_counter(m, "ember_test_x{reason=\"a\"", "x"));
  assert_null(ember_metrics_counter(m, "ember_test_x{=\"a\"}", "x"));
  assert_null(ember_metrics_counter(m, "ember_test_x{reason=\"a\"}z", "x"));
  ember_metric_add(b, 2);
  ember_buf_t out;
  ember_buf_init(&out, 4096);
  assert_int_equal(ember_metrics_render(m, &out), 0);
  assert_string_equal(out.data, "# HELP ember_test_refused_total R\n"
                                "# TYPE ember_test_refused_total counter\n"
                                "ember_test_refused_total{reason=\"bad_mac\"} 0\n"
                                "ember_test_refused_total{reason=\"no_ttl\"} 2\n");
  ember_buf_free(&out);
  ember_metrics_free(m);
}

static int render_rules(void *ctx, ember_buf_t *out) {
  const int *n = ctx;
  int rc = 0;
  for (int i = 0; i < *n && rc == 0; i++)
    rc = ember_buf_printf(out, "ember_test_firing{rule=\"r%d\"} %d\n", i, i + 1);
  return rc;
}

/* A family rendered by its owner: members that come and go between
 * renders, HELP and TYPE once, in registration order among the others. */
static void test_metrics_dynamic_family(void **state) {
  (void)state;
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  int n = 0;
  assert_non_null(ember_metrics_counter(m, "ember_test_a_total", "A"));
  assert_int_equal(ember_metrics_family(m, "ember_test_firing", "F", false, render_rules, &n), 0);
  assert_non_null(ember_metrics_gauge(m, "ember_test_b", "B"));
  assert_int_equal(ember_metrics_family(m, "ember_test_x{a=\"b\"}", "x", false, render_rules, &n),
                   -EINVAL);
  assert_int_equal(ember_metrics_family(m, "ember_test_y", "y", false, NULL, &n), -EINVAL);
  ember_buf_t out;
  ember_buf_init(&out, 4096);
  assert_int_equal(ember_metrics_render(m, &out), 0);
  assert_string_equal(out.data, "# HELP ember_test_a_total A\n# TYPE ember_test_a_total counter\n"
                                "ember_test_a_total 0\n"
                                "# HELP ember_test_firing F\n# TYPE ember_test_firing gauge\n"
                                "# HELP ember_test_b B\n# TYPE ember_test_b gauge\n"
                                "ember_test_b 0\n");
  n = 2;
  ember_buf_reset(&out);
  assert_int_equal(ember_metrics_render(m, &out), 0);
  assert_non_null(strstr(out.data, "# TYPE ember_test_firing gauge\n"
                                   "ember_test_firing{rule=\"r0\"} 1\n"
                                   "ember_test_firing{rule=\"r1\"} 2\n# HELP ember_test_b"));
  ember_buf_free(&out);
  ember_metrics_free(m);
}

/* One HTTP/1.0 exchange on loopback; returns the whole response. */
static void http(uint16_t port, const char *request, char *resp, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(write(fd, request, strlen(request)), (ssize_t)strlen(request));
  size_t n = 0;
  ssize_t r;
  while (n < size - 1 && (r = read(fd, resp + n, size - 1 - n)) > 0) n += (size_t)r;
  resp[n] = '\0';
  close(fd);
}

static void test_metrics_http_server(void **state) {
  (void)state;
  ember_metrics_t *m = NULL;
  assert_int_equal(ember_metrics_new(&m), 0);
  ember_metric_add(ember_metrics_counter(m, "ember_test_total", "t"), 7);
  ember_http_metrics_t *h = NULL;
  char err[256];
  assert_int_equal(ember_http_metrics_start(m, "127.0.0.1:0", &h, err, sizeof err), 0);
  uint16_t port = ember_http_metrics_port(h);
  assert_true(port > 0);
  char resp[8192];
  http(port, "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp);
  assert_non_null(strstr(resp, "200 OK"));
  assert_non_null(strstr(resp, "ember_test_total 7\n"));
  http(port, "GET /healthz HTTP/1.0\r\n\r\n", resp, sizeof resp);
  assert_non_null(strstr(resp, "200 OK"));
  http(port, "GET /nope HTTP/1.0\r\n\r\n", resp, sizeof resp);
  assert_non_null(strstr(resp, "404"));
  http(port, "DELETE /metrics HTTP/1.0\r\n\r\n", resp, sizeof resp);
  assert_non_null(strstr(resp, "405"));
  http(port, "garbage\r\n\r\n", resp, sizeof resp);
  assert_null(strstr(resp, "200 OK"));
  /* Still serving after bad requests. */
  http(port, "GET /healthz HTTP/1.0\r\n\r\n", resp, sizeof resp);
  assert_non_null(strstr(resp, "200 OK"));

  ember_http_metrics_t *h2 = NULL;
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", port);
  assert_int_equal(ember_http_metrics_start(m, addr, &h2, err, sizeof err), -EADDRINUSE);
  assert_non_null(strstr(err, addr));
  assert_int_equal(ember_http_metrics_start(m, "nonsense", &h2, err, sizeof err), EMBER_ECONFIG);
  assert_int_equal(ember_http_metrics_start(m, "example:80", &h2, err, sizeof err), EMBER_ECONFIG);
  ember_http_metrics_stop(h);
  ember_metrics_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_metrics_render),
      cmocka_unit_test(test_metrics_labelled_family),
      cmocka_unit_test(test_metrics_dynamic_family),
      cmocka_unit_test(test_metrics_http_server),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
