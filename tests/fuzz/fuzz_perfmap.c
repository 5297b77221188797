/* libFuzzer target for the perf map parser (agent/perfmap.c).
 *
 * The bytes are a perf map as a hostile process could write it. The first
 * byte picks how the rest is cut into feeds (the file is read in pieces as
 * it grows, so a line may straddle any two reads); small bounds make the
 * over-long line, entry and byte caps fire on short inputs. Whatever the
 * bytes: no crash, leak or undefined behaviour, the bounds hold, and every
 * name a lookup returns is a NUL-terminated string of at most max_line
 * bytes without a newline. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "perfmap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *name, size_t max_line) {
  if (name == NULL) return;
  size_t n = strlen(name);
  if (n == 0 || n > max_line || memchr(name, '\n', n) != NULL) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  size_t piece = (size_t)(data[0] % 97) + 1;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  ember__perfmap_limits_t lim = {.max_line = 64, .max_entries = 32, .max_bytes = 8192};
  ember__perfmap_t *pm = NULL;
  if (ember__perfmap_new(1, &lim, &pm) != 0) return 0;
  for (size_t at = 0; at < len; at += piece) {
    size_t n = len - at < piece ? len - at : piece;
    if (ember__perfmap_feed(pm, text + at, n) != 0) break;
    /* Commit now and then, as refreshes do between reads. */
    if ((at / piece) % 3 == 0 && ember__perfmap_commit(pm) != 0) break;
  }
  (void)ember__perfmap_commit(pm);
  if (ember__perfmap_count(pm) > lim.max_entries) abort();
  ember__perfmap_stats_t st;
  ember__perfmap_stats(pm, &st);
  if (st.bytes > lim.max_bytes) abort();
  /* Look up addresses taken from the input (8 bytes at a time) and the
   * edges of the address space. */
  for (size_t at = 0; at + 8 <= len && at < 512; at += 8) {
    uint64_t a;
    memcpy(&a, text + at, sizeof a);
    check_name(ember__perfmap_lookup(pm, a), lim.max_line);
  }
  check_name(ember__perfmap_lookup(pm, 0), lim.max_line);
  check_name(ember__perfmap_lookup(pm, UINT64_MAX), lim.max_line);
  ember__perfmap_free(pm);
  return 0;
}
