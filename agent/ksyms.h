/* Kernel symbols: /proc/kallsyms read once into a sorted table of text
 * symbols (t/T/w/W), each ending at the next one, but never more than
 * 64 KiB into the gap before another module's text; lookups by address.
 * kallsyms hidden by kptr_restrict (all addresses zero) gives an empty
 * table.
 *
 * Thread-safety: a table is immutable once loaded; any thread may look up
 * in it, one thread frees it. Errors: 0 or -ENOMEM. */
#ifndef EMBER_AGENT_KSYMS_H
#define EMBER_AGENT_KSYMS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ember__ksyms ember__ksyms_t;

typedef struct ember__ksym {
  uint64_t start, end;
  const char *name;   /* in the table */
  const char *module; /* "[kernel]" or "[module_name]", in the table */
  unsigned rank;      /* among aliases of one address: lower is better */
} ember__ksym_t;

/* Read the kallsyms file at `path`. Returns 0 with *out set (an empty table
 * when the file is unreadable or hidden: kernel frames then stay
 * unresolved), or -ENOMEM (*out untouched; a later call may try again). */
int ember__ksyms_load(const char *path, ember__ksyms_t **out);
void ember__ksyms_free(ember__ksyms_t *k);
/* The symbol holding `addr`, or NULL (also for k NULL). Borrowed from k. */
const ember__ksym_t *ember__ksyms_find(const ember__ksyms_t *k, uint64_t addr);
/* Number of symbols (tests). */
size_t ember__ksyms_count(const ember__ksyms_t *k);

#endif
