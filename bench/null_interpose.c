/* libnull_interpose.so: the least an LD_PRELOAD allocator hook over glibc
 * can be. malloc, calloc, realloc and free do nothing but jump to glibc's
 * own (__libc_*, exported by glibc for this), so bench_heap.sh can show
 * what interposing alone costs a malloc-heavy target: the floor under
 * libember_alloc.so's dormant and sampling costs (issue 15). Not a
 * profiler; bench only. */
#include <stddef.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t a, size_t b);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);

#define API __attribute__((visibility("default")))

API void *malloc(size_t n) { return __libc_malloc(n); }
API void *calloc(size_t a, size_t b) { return __libc_calloc(a, b); }
API void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
API void free(void *p) { __libc_free(p); }
