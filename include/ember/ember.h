/* Ember: error codes, allocation and version shared by every part.
 *
 * Every function in Ember that can fail returns int: 0 on success, a negative
 * errno for operating-system errors (-ENOMEM, -EINVAL, ...) or one of the
 * EMBER_E* codes below. ember_strerror() names all of them. */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMBER_API __attribute__((visibility("default")))

#define EMBER_VERSION_STRING "0.1.0"

/* Ember's own error codes live below -4000, far from any errno value. */
#define EMBER_ERRNO_BASE (-4000)
#define EMBER_ECORRUPT   (EMBER_ERRNO_BASE - 1) /* malformed input */
#define EMBER_ENOTFOUND  (EMBER_ERRNO_BASE - 2) /* no such key or item */
#define EMBER_ETOOBIG    (EMBER_ERRNO_BASE - 3) /* a limit was exceeded */
#define EMBER_EMISMATCH  (EMBER_ERRNO_BASE - 4) /* incompatible operands */
#define EMBER_EVERSION   (EMBER_ERRNO_BASE - 5) /* unsupported version */
#define EMBER_EKAFKA     (EMBER_ERRNO_BASE - 6) /* Kafka client error */
#define EMBER_ECONFIG    (EMBER_ERRNO_BASE - 7) /* invalid configuration */
#define EMBER_ETIMEDOUT  (EMBER_ERRNO_BASE - 8) /* operation timed out */
#define EMBER_EMAPFULL   (EMBER_ERRNO_BASE - 9) /* the store's map is full (not the disk) */

/* A static English sentence for any code returned by Ember. Thread-safe. */
EMBER_API const char *ember_strerror(int err);

/* All of Ember allocates through these wrappers so that tests can make the
 * Nth allocation fail and prove every error path frees what it took. They
 * behave as malloc/calloc/realloc/strdup/free; ember_free(NULL) is a no-op. */
EMBER_API void *ember_malloc(size_t size);
EMBER_API void *ember_calloc(size_t n, size_t size);
EMBER_API void *ember_realloc(void *p, size_t size);
EMBER_API char *ember_strdup(const char *s);
EMBER_API char *ember_strndup(const char *s, size_t n);
EMBER_API void ember_free(void *p);

/* Test hook: after `n` more successful allocations, every further one fails
 * until ember_alloc_fail_reset(). n < 0 disables. The hook is atomic, so a
 * test may arm it while a server's threads allocate (which allocation fails
 * then depends on their timing). Returns the number of allocations made
 * since the last reset, so a test can find how many a scenario needs. */
EMBER_API void ember_alloc_fail_after(long n);
EMBER_API long ember_alloc_fail_reset(void);

/* Wall-clock and monotonic time in nanoseconds. */
EMBER_API int64_t ember_time_now_ns(void);
EMBER_API int64_t ember_time_mono_ns(void);

#ifdef __cplusplus
}
#endif
#endif
