/* A growable byte buffer with a fixed maximum size (after curl's dynbuf).
 *
 * Every buffer that may hold untrusted or unbounded data (an export, a wire
 * message, an HTTP body) is an ember_buf_t with a maximum fixed at init, so
 * no input can make Ember grow without bound. The buffer is always kept
 * NUL-terminated (the NUL is not counted in len). */
#ifndef EMBER_BUF_H
#define EMBER_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_buf {
  char *data; /* owned; NULL until the first append */
  size_t len; /* bytes used, not counting the trailing NUL */
  size_t cap; /* bytes allocated */
  size_t max; /* most bytes len may reach */
} ember_buf_t;

/* Prepare an empty buffer that may hold at most `max` bytes. */
EMBER_API void ember_buf_init(ember_buf_t *b, size_t max);
/* Release the memory; the buffer is empty and may be reused. */
EMBER_API void ember_buf_free(ember_buf_t *b);
/* Forget the contents but keep the memory. */
EMBER_API void ember_buf_reset(ember_buf_t *b);
/* Append bytes. Returns 0, -ENOMEM, or EMBER_ETOOBIG past max (then the
 * buffer is unchanged). */
EMBER_API int ember_buf_append(ember_buf_t *b, const void *p, size_t n);
/* Append `n` bytes to be written by the caller: *at gets where they start,
 * valid until the next change to the buffer. Same returns as append. */
EMBER_API int ember_buf_extend(ember_buf_t *b, size_t n, char **at);
EMBER_API int ember_buf_puts(ember_buf_t *b, const char *s);
EMBER_API int ember_buf_printf(ember_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
EMBER_API int ember_buf_vprintf(ember_buf_t *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Hand the data to the caller (free with ember_free) and empty the buffer.
 * Returns NULL for a buffer that never held anything. */
EMBER_API char *ember_buf_take(ember_buf_t *b, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
