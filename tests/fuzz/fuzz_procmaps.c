/* libFuzzer target for the /proc/PID/maps parser (agent/procmaps.c,
 * ember__procmaps_parse). The text of a maps file is the kernel's, but the
 * paths in it are whatever names a process gave its files (spaces, "
 * (deleted)", brackets, very long names). Whatever the bytes: no crash,
 * leak or undefined behaviour, and the snapshot answers lookups. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ember__procmaps_t *m = NULL;
  if (ember__procmaps_parse((const char *)data, size, &m) != 0) return 0;
  size_t n = ember__procmaps_count(m);
  if (n > size) abort(); /* a mapping needs a line of its own */
  for (size_t at = 0; at + 8 <= size && at < 512; at += 8) {
    uint64_t a;
    memcpy(&a, data + at, sizeof a);
    (void)ember__procmaps_covers(m, a);
    (void)ember__procmaps_covers(m, a - 1);
  }
  ember__procmaps_free(m);
  return 0;
}
