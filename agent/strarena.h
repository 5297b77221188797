/* A bump allocator for strings that must live as long as their owner (a
 * module's symbol names, a pid's perf map, the kernel's symbol table):
 * strings are copied into 64 KiB chunks and freed all at once, never
 * singly. Used by the symbolizer and the perf map reader.
 *
 * Not thread-safe: an arena belongs to one owner, which serialises its
 * calls. */
#ifndef EMBER_AGENT_STRARENA_H
#define EMBER_AGENT_STRARENA_H

#include <stddef.h>

typedef struct ember__strarena_chunk ember__strarena_chunk_t;

/* Zero-initialised ({0} or calloc) is an empty arena. */
typedef struct ember__strarena {
  ember__strarena_chunk_t *head;
  size_t bytes; /* allocated for the chunks, for memory accounting */
} ember__strarena_t;

/* Copy len bytes of str (which need not be NUL-terminated) and a NUL into
 * the arena. Returns the copy, valid until ember__strarena_free, or NULL
 * when out of memory (the arena is unchanged). */
char *ember__strarena_dup(ember__strarena_t *a, const char *str, size_t len);

/* Free every string of the arena; it is empty (and usable) again. */
void ember__strarena_free(ember__strarena_t *a);

#endif
