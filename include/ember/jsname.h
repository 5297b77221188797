/* The names V8 gives JavaScript code in a perf map (node --perf-basic-prof):
 *
 *   JS:*hotLoop /app/dist/app.min.js:1:4711
 *   LazyCompile:~a file:///app/dist/app.mjs:3:17
 *
 * a tag ("JS", older "LazyCompile", "Function", "Script"), a tier marker
 * ('*' optimized, '~' interpreted, '^' baseline, '+' maglev; or none), the
 * function's name (empty when anonymous; may hold spaces: "get size"), then
 * the script and V8's 1-based line and column of the function's start (its
 * parameters). Agents map them through the script's source map; the
 * collector through uploaded maps. One parser serves both.
 *
 * Thread-safety: pure functions. */
#ifndef EMBER_JSNAME_H
#define EMBER_JSNAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Spans of the name parsed: pointers into it, not NUL-terminated. */
typedef struct ember_jsname {
  const char *function; /* without tag and marker; function_len 0 = anonymous */
  size_t function_len;
  const char *script; /* as V8 wrote it: a path, or a file:// URL */
  size_t script_len;
  uint32_t line, column; /* 1-based */
} ember_jsname_t;

/* Parse a perf map name. False when it is not a V8 name of script code
 * (a builtin, a stub, a regexp, a script V8 names without a position, or
 * numbers that are not a 1-based line and column). */
EMBER_API bool ember_jsname_parse(const char *name, ember_jsname_t *out);

/* The file a script names: `script` itself for an absolute path, the path
 * of a file:// URL (percent-decoded; "file://localhost/..." too), written
 * NUL-terminated into buf. False for anything else ("node:internal/...",
 * "evalmachine.<anonymous>", http: URLs, relative names), a path with a NUL
 * or a ".." component, or one that does not fit. */
EMBER_API bool ember_jsname_script_path(const char *script, size_t script_len, char *buf,
                                        size_t size);

/* Make an absolute path lexical, in place: no ".", ".." or repeated '/';
 * ".." stops at the root. Where a path is opened without following any
 * link (as every file of a profiled process is), this is where it lands. */
EMBER_API void ember_jsname_path_lexical(char *path);

#ifdef __cplusplus
}
#endif

#endif /* EMBER_JSNAME_H */
