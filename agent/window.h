/* One window of raw samples: (pid, callchain) -> samples and CPU ns.
 *
 * The ring reader adds to the open window on the loop thread; closing a
 * window hands the whole structure to the thread that symbolizes and
 * publishes it, and the reader continues into a fresh one, so the reader
 * never waits on that work. Stacks are raw addresses here: symbolizing
 * happens once per distinct stack at close, not per sample.
 *
 * Thread-safety: none; one owner at a time. */
#ifndef EMBER_AGENT_WINDOW_H
#define EMBER_AGENT_WINDOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ember__window ember__window_t;

typedef struct ember__window_stack {
  uint32_t pid;
  uint32_t nips;
  const uint64_t *ips; /* leaf first; borrowed from the window */
  int64_t samples;
  int64_t cpu_ns;
} ember__window_stack_t;

int ember__window_new(ember__window_t **out);
void ember__window_free(ember__window_t *w);
/* Forget every stack but keep the memory, for reuse. */
void ember__window_reset(ember__window_t *w);

/* Add one sample. *is_new (may be NULL) tells whether the (pid, stack) was
 * new in this window. Returns 0, -EINVAL (no ips), -ENOMEM, or
 * EMBER_ETOOBIG once max_stacks distinct stacks are held (the sample is
 * counted in dropped). */
int ember__window_add(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                      uint64_t period_ns, bool *is_new);
/* Add arbitrary non-negative values to a (pid, stack): `v0` to its
 * `samples` and `v1` to its `cpu_ns` slots (saturating). Allocation
 * sessions keep objects and bytes there. Same returns as _add. */
int ember__window_add_values(ember__window_t *w, uint32_t pid, const uint64_t *ips, uint32_t nips,
                             int64_t v0, int64_t v1, bool *is_new);
void ember__window_set_max_stacks(ember__window_t *w, size_t max_stacks);

void ember__window_set_bounds(ember__window_t *w, int64_t start_ns, int64_t end_ns);
void ember__window_bounds(const ember__window_t *w, int64_t *start_ns, int64_t *end_ns);

size_t ember__window_nstacks(const ember__window_t *w);
uint64_t ember__window_dropped(const ember__window_t *w);
/* Sort stacks by pid (then arrival) and return them; the array is borrowed
 * until the next add/reset/free. */
const ember__window_stack_t *ember__window_sorted(ember__window_t *w, size_t *n);

#endif
