/* Fan-out GETs to peer collectors (fanout.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "fanout.h"
#include "ember/ember.h"

typedef struct xfer {
  ember__fetch_t *f;
  CURL *e;
  bool too_big;
  char curl_err[CURL_ERROR_SIZE];
} xfer_t;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ctx) {
  xfer_t *x = ctx;
  size_t n = size * nmemb;
  if (ember_buf_append(&x->f->body, p, n) != 0) {
    x->too_big = true;
    return 0; /* ends the transfer with CURLE_WRITE_ERROR */
  }
  return n;
}

int ember__fanout_get(ember__fetch_t *f, size_t n, const char *token, int timeout_ms,
                      size_t max_body) {
  if (n == 0) return 0;
  if (f == NULL || timeout_ms <= 0) return -EINVAL;
  xfer_t *x = ember_calloc(n, sizeof *x);
  CURLM *m = curl_multi_init();
  struct curl_slist *headers = NULL;
  int rc = x != NULL && m != NULL ? 0 : -ENOMEM;
  if (rc == 0 && token != NULL && *token != '\0') {
    char h[600];
    snprintf(h, sizeof h, "Authorization: Bearer %s", token);
    headers = curl_slist_append(NULL, h);
    if (headers == NULL) rc = -ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    f[i].status = 0;
    f[i].err[0] = '\0';
    ember_buf_init(&f[i].body, max_body);
  }
  for (size_t i = 0; i < n && rc == 0; i++) {
    x[i].f = &f[i];
    x[i].e = curl_easy_init();
    if (x[i].e == NULL) {
      rc = -ENOMEM;
      break;
    }
    CURL *e = x[i].e;
    curl_easy_setopt(e, CURLOPT_URL, f[i].url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &x[i]);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x[i].curl_err);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_PRIVATE, &x[i]);
    if (headers != NULL) curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    if (curl_multi_add_handle(m, e) != CURLM_OK) rc = -ENOMEM;
  }
  if (rc == 0) {
    int running = 1;
    while (running > 0) {
      if (curl_multi_perform(m, &running) != CURLM_OK) break;
      if (running > 0 && curl_multi_poll(m, NULL, 0, 100, NULL) != CURLM_OK) break;
    }
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE) continue;
      xfer_t *xx = NULL;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&xx);
      if (xx == NULL) continue;
      ember__fetch_t *ff = xx->f;
      if (msg->data.result == CURLE_OK) {
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &ff->status);
        if (ff->status != 200) snprintf(ff->err, sizeof ff->err, "HTTP %ld", ff->status);
      } else if (xx->too_big) {
        snprintf(ff->err, sizeof ff->err, "its answer is larger than %zu bytes", max_body);
      } else {
        snprintf(ff->err, sizeof ff->err, "%.150s",
                 xx->curl_err[0] ? xx->curl_err : curl_easy_strerror(msg->data.result));
      }
    }
    for (size_t i = 0; i < n; i++)
      if (f[i].status == 0 && f[i].err[0] == '\0')
        snprintf(f[i].err, sizeof f[i].err, "no answer within %d ms", timeout_ms);
  }
  for (size_t i = 0; x != NULL && i < n; i++) {
    if (x[i].e == NULL) continue;
    if (m != NULL) curl_multi_remove_handle(m, x[i].e);
    curl_easy_cleanup(x[i].e);
  }
  curl_slist_free_all(headers);
  if (m != NULL) curl_multi_cleanup(m);
  ember_free(x);
  return rc;
}

void ember__fanout_free(ember__fetch_t *f, size_t n) {
  for (size_t i = 0; f != NULL && i < n; i++) ember_buf_free(&f[i].body);
}
