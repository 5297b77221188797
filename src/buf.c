#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ember/buf.h"

void ember_buf_init(ember_buf_t *b, size_t max) {
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  b->max = max;
}

void ember_buf_free(ember_buf_t *b) {
  ember_free(b->data);
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
}

void ember_buf_reset(ember_buf_t *b) {
  b->len = 0;
  if (b->data != NULL) b->data[0] = '\0';
}

/* Make room for `n` more bytes plus the NUL, doubling so appends are
 * amortised O(1). */
static int buf_reserve(ember_buf_t *b, size_t n) {
  if (n > b->max - b->len) return EMBER_ETOOBIG;
  size_t need = b->len + n + 1;
  if (need <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (cap > b->max + 1) cap = b->max + 1;
  char *p = ember_realloc(b->data, cap);
  if (p == NULL) return -ENOMEM;
  b->data = p;
  b->cap = cap;
  return 0;
}

int ember_buf_append(ember_buf_t *b, const void *p, size_t n) {
  int rc = buf_reserve(b, n);
  if (rc != 0) return rc;
  if (n > 0) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int ember_buf_extend(ember_buf_t *b, size_t n, char **at) {
  int rc = buf_reserve(b, n);
  if (rc != 0) return rc;
  *at = b->data + b->len;
  b->len += n;
  b->data[b->len] = '\0';
  return 0;
}

int ember_buf_puts(ember_buf_t *b, const char *s) { return ember_buf_append(b, s, strlen(s)); }

int ember_buf_vprintf(ember_buf_t *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  char small[256];
  int n = vsnprintf(small, sizeof small, fmt, ap2);
  va_end(ap2);
  if (n < 0) return -EINVAL;
  if ((size_t)n < sizeof small) return ember_buf_append(b, small, (size_t)n);
  int rc = buf_reserve(b, (size_t)n);
  if (rc != 0) return rc;
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
  return 0;
}

int ember_buf_printf(ember_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = ember_buf_vprintf(b, fmt, ap);
  va_end(ap);
  return rc;
}

char *ember_buf_take(ember_buf_t *b, size_t *len) {
  char *p = b->data;
  if (len != NULL) *len = b->len;
  b->data = NULL;
  b->len = 0;
  b->cap = 0;
  return p;
}
