/* The CLI's client of the HTTP API (docs/api.md): one libcurl handle, GET,
 * DELETE and POST with a JSON body, and the mapping of what went wrong to a sentence and an exit
 * status a user can act on. Internal to the ember command.
 *
 * Policy: connect timeout 5 s, whole request 60 s, no redirects followed,
 * http and https only, bodies bounded by the caller. Not thread-safe: the
 * command makes its requests one after another. */
#ifndef EMBER_CLI_CLIENT_H
#define EMBER_CLI_CLIENT_H

#include <stddef.h>

#include "ember/buf.h"

#define EMBER_DEFAULT_SERVER "http://127.0.0.1:7272"

typedef struct ember__client ember__client_t;

/* A client of the server at `server` ("http://host:port", optionally with a
 * path prefix; "host:port" means http). `token` NULL or "" sends no
 * Authorization header. Both are copied. Returns 0, EMBER_ECONFIG (errbuf
 * says what is wrong with the URL or token), -ENOMEM. */
int ember__client_new(const char *server, const char *token, ember__client_t **out, char *errbuf,
                      size_t errbuf_size);
void ember__client_free(ember__client_t *c);
/* The normalised server URL, for messages. Borrowed from c. */
const char *ember__client_server(const ember__client_t *c);

/* GET server + path + "?" + query (query may be NULL or ""). On any HTTP
 * answer returns 0 with the status in *status and at most `max_body` bytes
 * of body in `body` (appended; the caller inits and frees it). When no
 * answer came, returns EXIT_FAILED-worthy EMBER_* / -errno codes with a
 * sentence in errbuf ("cannot reach the Ember server at ... (connection
 * refused); ..."). */
int ember__client_get(ember__client_t *c, const char *path, const char *query, size_t max_body,
                      long *status, ember_buf_t *body, char *errbuf, size_t errbuf_size);

/* POST `json` (a NUL-terminated JSON text, borrowed; NULL sends an empty
 * body) to server + path with Content-Type: application/json. The answer
 * and the returns are as for ember__client_get. */
int ember__client_post(ember__client_t *c, const char *path, const char *json, size_t max_body,
                       long *status, ember_buf_t *body, char *errbuf, size_t errbuf_size);

/* DELETE server + path + "?" + query (query may be NULL; no body). The
 * answer and the returns are as for ember__client_get. */
int ember__client_delete(ember__client_t *c, const char *path, const char *query, size_t max_body,
                         long *status, ember_buf_t *body, char *errbuf, size_t errbuf_size);

/* POST `len` bytes of `data` (JSON: a file's contents, borrowed) to server
 * + path + "?" + query, with Content-Type: application/json. The answer
 * and the returns are as for ember__client_get. */
int ember__client_post_data(ember__client_t *c, const char *path, const char *query,
                            const char *data, size_t len, size_t max_body, long *status,
                            ember_buf_t *body, char *errbuf, size_t errbuf_size);

/* What an HTTP status other than 200, 201 or 204 means for the user: a sentence in
 * errbuf (the server's {"error"} message when there is one) and the exit
 * status (EXIT_USAGE for 400/401/413, EXIT_FAILED otherwise). Returns 0 for
 * 200, 201 and 204. `body` is the answer's body, borrowed. */
int ember__client_status_exit(const ember__client_t *c, const char *path, long status,
                              const ember_buf_t *body, char *errbuf, size_t errbuf_size);

/* The server's {"error": "..."} sentence in `body` (borrowed), else the
 * start of a body that is not such JSON, with control characters replaced
 * by '?' and newlines by spaces; "" for no body. */
void ember__client_message(const ember_buf_t *body, char *msg, size_t size);

/* Append "key=value" to a query string, percent-encoding both and adding
 * '&' when q is not empty. Returns 0, -ENOMEM or EMBER_ETOOBIG. */
int ember__query_add(ember_buf_t *q, const char *key, const char *value);

#endif
