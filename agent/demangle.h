/* Demangling of C++ (Itanium ABI) and Rust (legacy and v0) symbol names
 * with libiberty's demangler, the one GNU binutils and gdb use.
 *
 * The names come from ELF files a profiled process controls, so input and
 * output are bounded: names longer than EMBER__DEMANGLE_MAX_IN are not
 * demangled (libiberty's parser takes stack in proportion to the name), and
 * a result that does not fit the caller's buffer is dropped rather than cut
 * (a cut name would be a wrong name). libiberty's callback interface is
 * used, so the demangler allocates nothing on the heap and never reaches
 * libiberty's xmalloc, which exits the process when memory runs out.
 *
 * Thread-safety: every function may be called from any thread (libiberty's
 * demangler keeps no state between calls).
 *
 * Errors: a name that is not mangled, malformed, too long, or whose result
 * does not fit is not an error: the function says "not demangled" and the
 * caller keeps the name as it is. */
#ifndef EMBER_AGENT_DEMANGLE_H
#define EMBER_AGENT_DEMANGLE_H

#include <stdbool.h>
#include <stddef.h>

/* Longest mangled name handed to libiberty (its parser keeps two arrays
 * sized by the name's length on the stack: about 300 KiB at this bound). */
#define EMBER__DEMANGLE_MAX_IN 8192u

/* Could `name` be a mangled C++ or Rust name ("_Z...", "_R...")? Cheap: a
 * prefix check, for skipping the plain C names that make most of a libc. */
bool ember__demangle_candidate(const char *name);

/* Demangle `name` (NUL-terminated) into out[0..cap) as a NUL-terminated
 * string: function parameters and cv-qualifiers included
 * ("ns::Klass::method(int)"), a Rust legacy name without its hash
 * ("core::fmt::write"). Rust is tried first, as libiberty's cplus_demangle
 * does (legacy Rust names are valid C++ names too). Returns the length of
 * the result, or 0 when `name` is left as it is (not mangled, malformed,
 * longer than EMBER__DEMANGLE_MAX_IN, or a result of cap bytes or more);
 * out is then an empty string when cap > 0. */
size_t ember__demangle(const char *name, char *out, size_t cap);

#endif
