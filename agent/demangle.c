/* C++ and Rust demangling through libiberty; see demangle.h. */
#include "demangle.h"

#include <string.h>

#include <libiberty/demangle.h>

/* libiberty's options: parameter lists and cv-qualifiers, as binutils'
 * c++filt and perf print them. */
#define DEMANGLE_OPTS (DMGL_PARAMS | DMGL_ANSI)

typedef struct out_buf {
  char *p;
  size_t cap, len;
  bool overflow;
} out_buf_t;

/* libiberty hands the result over in pieces. */
static void collect(const char *s, size_t n, void *opaque) {
  out_buf_t *b = opaque;
  if (b->overflow || n == 0) return; /* n 0 may come with s NULL */
  if (n >= b->cap - b->len) {
    b->overflow = true;
    return;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

bool ember__demangle_candidate(const char *name) {
  return name != NULL && name[0] == '_' && (name[1] == 'Z' || name[1] == 'R');
}

/* Run one of libiberty's callback demanglers into `out`; true when it
 * demangled the whole name into the buffer. */
static bool run(int (*fn)(const char *, int, demangle_callbackref, void *), const char *name,
                char *out, size_t cap, size_t *len) {
  out_buf_t b = {out, cap, 0, false};
  int ok = fn(name, DEMANGLE_OPTS, collect, &b);
  if (!ok || b.overflow || b.len == 0) return false;
  out[b.len] = '\0';
  *len = b.len;
  return true;
}

size_t ember__demangle(const char *name, char *out, size_t cap) {
  if (out == NULL || cap == 0) return 0;
  out[0] = '\0';
  if (!ember__demangle_candidate(name)) return 0;
  if (strnlen(name, EMBER__DEMANGLE_MAX_IN + 1) > EMBER__DEMANGLE_MAX_IN) return 0;
  size_t len = 0;
  /* Rust first: a legacy Rust name ("_ZN...17h<hash>E") is also a valid
   * C++ name, which would keep the hash as a last component. */
  if (run(rust_demangle_callback, name, out, cap, &len)) return len;
  if (run(cplus_demangle_v3_callback, name, out, cap, &len)) return len;
  out[0] = '\0';
  return 0;
}
