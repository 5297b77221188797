/* The CLI's HTTP client (see client.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>
#include <jansson.h>

#include "ember/ember.h"
#include "cli.h"
#include "client.h"

#define CONNECT_TIMEOUT_S 5L
#define TOTAL_TIMEOUT_S   60L

struct ember__client {
  CURL *curl;
  char *server;                    /* without a trailing '/' */
  struct curl_slist *headers;      /* Authorization, when there is a token */
  struct curl_slist *post_headers; /* the same plus the body's type */
  char curl_err[CURL_ERROR_SIZE];
};

/* A token goes into a header line: anything below a space (CR, LF) would
 * let it add headers of its own. */
static bool token_ok(const char *t) {
  for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
    if (*p < 0x20 || *p == 0x7f) return false;
  }
  return true;
}

int ember__client_new(const char *server, const char *token, ember__client_t **out, char *errbuf,
                      size_t errbuf_size) {
  if (server == NULL || out == NULL) return -EINVAL;
  ember__client_t *c = NULL;
  ember_buf_t url;
  ember_buf_init(&url, 4096);
  struct curl_slist *h = NULL;
  int rc = EMBER_ECONFIG;
  if (server[0] == '\0') {
    snprintf(errbuf, errbuf_size, "--server is empty; expected a URL like %s",
             EMBER_DEFAULT_SERVER);
    goto cleanup;
  }
  if (strstr(server, "://") == NULL) {
    rc = ember_buf_puts(&url, "http://");
    if (rc != 0) goto cleanup;
  } else if (strncmp(server, "http://", 7) != 0 && strncmp(server, "https://", 8) != 0) {
    snprintf(errbuf, errbuf_size, "--server '%s': expected an http:// or https:// URL", server);
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  rc = ember_buf_puts(&url, server);
  if (rc != 0) {
    snprintf(errbuf, errbuf_size, "--server: the URL is too long");
    goto cleanup;
  }
  while (url.len > 0 && url.data[url.len - 1] == '/') url.data[--url.len] = '\0';
  if (token != NULL && token[0] != '\0') {
    if (!token_ok(token)) {
      snprintf(errbuf, errbuf_size, "the token contains control characters (a stray newline?)");
      rc = EMBER_ECONFIG;
      goto cleanup;
    }
    ember_buf_t line;
    ember_buf_init(&line, 8192);
    rc = ember_buf_printf(&line, "Authorization: Bearer %s", token);
    if (rc == 0) {
      h = curl_slist_append(NULL, line.data);
      if (h == NULL) rc = -ENOMEM;
    }
    ember_buf_free(&line);
    if (rc != 0) {
      snprintf(errbuf, errbuf_size, "the token: %s", ember_strerror(rc));
      goto cleanup;
    }
  }
  rc = -ENOMEM;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) goto cleanup;
  c = ember_calloc(1, sizeof *c);
  if (c == NULL) {
    curl_global_cleanup();
    goto cleanup;
  }
  c->server = ember_buf_take(&url, NULL);
  c->curl = curl_easy_init();
  if (c->curl == NULL) goto cleanup;
  c->headers = h;
  h = NULL;
  /* "Expect:" stops curl from waiting for a 100 Continue before a larger
   * body; the API answers at once. */
  const char *extra[] = {"Content-Type: application/json", "Expect:"};
  for (const struct curl_slist *l = c->headers; l != NULL; l = l->next) {
    struct curl_slist *n = curl_slist_append(c->post_headers, l->data);
    if (n == NULL) goto cleanup;
    c->post_headers = n;
  }
  for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
    struct curl_slist *n = curl_slist_append(c->post_headers, extra[i]);
    if (n == NULL) goto cleanup;
    c->post_headers = n;
  }
  CURL *e = c->curl;
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S);
  curl_easy_setopt(e, CURLOPT_TIMEOUT, TOTAL_TIMEOUT_S);
  /* A redirect would carry the token to wherever it points. */
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_USERAGENT, "ember/" EMBER_VERSION_STRING);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->curl_err);
  *out = c;
  c = NULL;
  rc = 0;
cleanup:
  if (rc == -ENOMEM) snprintf(errbuf, errbuf_size, "out of memory");
  ember__client_free(c);
  curl_slist_free_all(h);
  ember_buf_free(&url);
  return rc;
}

void ember__client_free(ember__client_t *c) {
  if (c == NULL) return;
  if (c->curl != NULL) curl_easy_cleanup(c->curl);
  curl_slist_free_all(c->headers);
  curl_slist_free_all(c->post_headers);
  ember_free(c->server);
  ember_free(c);
  curl_global_cleanup();
}

const char *ember__client_server(const ember__client_t *c) { return c->server; }

typedef struct sink {
  ember_buf_t *body;
  int rc;
} sink_t;

static size_t on_body(char *data, size_t size, size_t n, void *ctx) {
  sink_t *s = ctx;
  s->rc = ember_buf_append(s->body, data, size * n);
  /* A short count makes curl stop with CURLE_WRITE_ERROR. */
  return s->rc == 0 ? size * n : 0;
}

/* One request: GET when `post` is NULL, else POST with `post_len` bytes of
 * JSON; `method` (non-NULL only for DELETE) replaces GET's name. */
static int perform(ember__client_t *c, const char *method, const char *path, const char *query,
                   const char *post, size_t post_len, size_t max_body, long *status,
                   ember_buf_t *body, char *errbuf, size_t errbuf_size) {
  ember_buf_t url;
  ember_buf_init(&url, 16384);
  int rc = ember_buf_printf(&url, "%s%s%s%s", c->server, path, query && query[0] ? "?" : "",
                            query ? query : "");
  if (rc != 0) {
    snprintf(errbuf, errbuf_size, "the request URL is too long (%s)", ember_strerror(rc));
    ember_buf_free(&url);
    return rc;
  }
  /* The body's own limit applies to this answer alone. */
  size_t saved_max = body->max;
  body->max = body->len + max_body < body->max ? body->len + max_body : body->max;
  sink_t sink = {body, 0};
  c->curl_err[0] = '\0';
  curl_easy_setopt(c->curl, CURLOPT_URL, url.data);
  if (post != NULL) {
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)post_len);
    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, post);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->post_headers);
  } else {
    /* The handle is reused: undo a previous POST. */
    curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, c->headers);
  }
  /* NULL undoes a previous DELETE on the reused handle. */
  curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &sink);
  CURLcode cc = curl_easy_perform(c->curl);
  body->max = saved_max;
  ember_buf_free(&url);
  if (cc == CURLE_OK) {
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, status);
    return 0;
  }
  long os_errno = 0;
  curl_easy_getinfo(c->curl, CURLINFO_OS_ERRNO, &os_errno);
  const char *detail = c->curl_err[0] ? c->curl_err : curl_easy_strerror(cc);
  switch (cc) {
  case CURLE_COULDNT_CONNECT:
    snprintf(errbuf, errbuf_size,
             "cannot reach the Ember server at %s (%s); start one with `ember up`, or set "
             "--server / EMBER_SERVER",
             c->server, os_errno ? strerror((int)os_errno) : detail);
    if (os_errno == ECONNREFUSED) {
      /* strerror says "Connection refused"; the sentence reads better in
       * lower case, as the issue and docs write it. */
      snprintf(errbuf, errbuf_size,
               "cannot reach the Ember server at %s (connection refused); start one with `ember "
               "up`, or set --server / EMBER_SERVER",
               c->server);
    }
    return os_errno ? -(int)os_errno : -ECONNREFUSED;
  case CURLE_COULDNT_RESOLVE_HOST:
    snprintf(errbuf, errbuf_size,
             "cannot reach the Ember server at %s (%s); check --server / EMBER_SERVER", c->server,
             detail);
    return -EHOSTUNREACH;
  case CURLE_OPERATION_TIMEDOUT: {
    curl_off_t connect_us = 0;
    curl_easy_getinfo(c->curl, CURLINFO_CONNECT_TIME_T, &connect_us);
    if (connect_us == 0)
      snprintf(errbuf, errbuf_size,
               "cannot reach the Ember server at %s (no connection within %ld s); is it running, "
               "and is --server right?",
               c->server, CONNECT_TIMEOUT_S);
    else
      snprintf(errbuf, errbuf_size,
               "the Ember server at %s did not answer within %ld s; try a shorter --from/--to "
               "range",
               c->server, TOTAL_TIMEOUT_S);
    return EMBER_ETIMEDOUT;
  }
  case CURLE_WRITE_ERROR:
    if (sink.rc == EMBER_ETOOBIG) {
      snprintf(errbuf, errbuf_size,
               "the answer from %s%s is larger than %zu MiB; narrow the query (--from/--to, "
               "--worker, ...)",
               c->server, path, max_body >> 20);
      return EMBER_ETOOBIG;
    }
    snprintf(errbuf, errbuf_size, "reading the answer from %s: %s", c->server,
             ember_strerror(sink.rc));
    return sink.rc ? sink.rc : -EIO;
  default:
    snprintf(errbuf, errbuf_size, "request to the Ember server at %s failed: %s", c->server,
             detail);
    return -EIO;
  }
}

int ember__client_get(ember__client_t *c, const char *path, const char *query, size_t max_body,
                      long *status, ember_buf_t *body, char *errbuf, size_t errbuf_size) {
  if (c == NULL || path == NULL || status == NULL || body == NULL) return -EINVAL;
  return perform(c, NULL, path, query, NULL, 0, max_body, status, body, errbuf, errbuf_size);
}

int ember__client_delete(ember__client_t *c, const char *path, const char *query, size_t max_body,
                         long *status, ember_buf_t *body, char *errbuf, size_t errbuf_size) {
  if (c == NULL || path == NULL || status == NULL || body == NULL) return -EINVAL;
  return perform(c, "DELETE", path, query, NULL, 0, max_body, status, body, errbuf, errbuf_size);
}

int ember__client_post_data(ember__client_t *c, const char *path, const char *query,
                            const char *data, size_t len, size_t max_body, long *status,
                            ember_buf_t *body, char *errbuf, size_t errbuf_size) {
  if (c == NULL || path == NULL || data == NULL || status == NULL || body == NULL) return -EINVAL;
  return perform(c, NULL, path, query, data, len, max_body, status, body, errbuf, errbuf_size);
}

int ember__client_post(ember__client_t *c, const char *path, const char *json, size_t max_body,
                       long *status, ember_buf_t *body, char *errbuf, size_t errbuf_size) {
  if (c == NULL || path == NULL || status == NULL || body == NULL) return -EINVAL;
  const char *data = json != NULL ? json : "";
  return perform(c, NULL, path, NULL, data, strlen(data), max_body, status, body, errbuf,
                 errbuf_size);
}

/* Copy at most `size - 1` bytes of untrusted text for a message, dropping
 * control characters so a server cannot write escape sequences to the
 * user's terminal. */
static void clean_copy(char *dst, size_t size, const char *src, size_t len) {
  size_t j = 0;
  for (size_t i = 0; i < len && j + 1 < size; i++) {
    unsigned char ch = (unsigned char)src[i];
    if (ch == '\n' || ch == '\r') {
      if (j > 0 && dst[j - 1] != ' ') dst[j++] = ' ';
      continue;
    }
    dst[j++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
  }
  while (j > 0 && dst[j - 1] == ' ') j--;
  dst[j] = '\0';
}

void ember__client_message(const ember_buf_t *body, char *msg, size_t size) {
  msg[0] = '\0';
  if (body->data == NULL) return;
  json_t *doc = json_loadb(body->data, body->len, 0, NULL);
  const char *e = json_string_value(json_object_get(doc, "error"));
  if (e != NULL)
    clean_copy(msg, size, e, strlen(e));
  else
    clean_copy(msg, size < 201 ? size : 201, body->data, body->len);
  json_decref(doc);
}

int ember__client_status_exit(const ember__client_t *c, const char *path, long status,
                              const ember_buf_t *body, char *errbuf, size_t errbuf_size) {
  if (status == 200 || status == 201 || status == 204) return 0;
  char msg[1024];
  ember__client_message(body, msg, sizeof msg);
  const char *sep = msg[0] ? ": " : "";
  switch (status) {
  case 400:
    snprintf(errbuf, errbuf_size, "the server rejected the query: %s",
             msg[0] ? msg : "(no reason given)");
    return EXIT_USAGE;
  case 401:
    snprintf(errbuf, errbuf_size, "the server needs a token: --token or EMBER_TOKEN (%s)",
             msg[0] ? msg : "the one given was refused, or none was given");
    return EXIT_USAGE;
  case 404:
    snprintf(errbuf, errbuf_size,
             "the server at %s has no %s (HTTP 404); is --server an Ember server of this "
             "version?",
             c->server, path);
    return EXIT_FAILED;
  case 405:
    /* A server from before on-demand sessions takes GET only. */
    snprintf(errbuf, errbuf_size,
             "the server at %s does not take this request (HTTP 405%s%s); is it an Ember server "
             "of this version?",
             c->server, sep, msg);
    return EXIT_FAILED;
  case 413:
    snprintf(errbuf, errbuf_size, "the answer would be too large%s%s; narrow --from/--to", sep,
             msg);
    return EXIT_USAGE;
  case 503:
    snprintf(errbuf, errbuf_size, "the server is unavailable (HTTP 503%s%s); try again", sep, msg);
    return EXIT_FAILED;
  default: break;
  }
  if (status >= 300 && status < 400) {
    char *where = NULL;
    curl_easy_getinfo(c->curl, CURLINFO_REDIRECT_URL, &where);
    char loc[512];
    clean_copy(loc, sizeof loc, where ? where : "?", where ? strlen(where) : 1);
    snprintf(errbuf, errbuf_size,
             "the server at %s redirects (HTTP %ld to %s); ember does not follow redirects, "
             "so point --server at the Ember API itself",
             c->server, status, loc);
  } else if (status >= 500) {
    snprintf(errbuf, errbuf_size, "the server failed (HTTP %ld)%s%s", status, sep, msg);
  } else {
    snprintf(errbuf, errbuf_size, "the server answered HTTP %ld%s%s", status, sep, msg);
  }
  return EXIT_FAILED;
}

static bool unreserved(unsigned char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
         ch == '-' || ch == '.' || ch == '_' || ch == '~';
}

static int encode(ember_buf_t *q, const char *s) {
  static const char hex[] = "0123456789ABCDEF";
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    char e[3] = {(char)*p, 0, 0};
    size_t n = 1;
    if (!unreserved(*p)) {
      e[0] = '%';
      e[1] = hex[*p >> 4];
      e[2] = hex[*p & 15];
      n = 3;
    }
    int rc = ember_buf_append(q, e, n);
    if (rc != 0) return rc;
  }
  return 0;
}

int ember__query_add(ember_buf_t *q, const char *key, const char *value) {
  if (q == NULL || key == NULL || value == NULL) return -EINVAL;
  int rc = q->len > 0 ? ember_buf_append(q, "&", 1) : 0;
  if (rc == 0) rc = encode(q, key);
  if (rc == 0) rc = ember_buf_append(q, "=", 1);
  if (rc == 0) rc = encode(q, value);
  return rc;
}
