/* The perf map of one process (/tmp/perf-PID.map, as Node.js writes it with
 * --perf-basic-prof): `START SIZE name` lines, hex without 0x, appended as
 * code is compiled. docs/internals/perfmap.md has the limits and costs.
 *
 * The file belongs to the profiled process, so it is hostile input: it is
 * opened through ember__safe_openat (no symbolic links, no FIFOs, only a
 * regular file of the process's user or root with one link), read
 * incrementally (only the bytes appended since the last read, never from
 * the start again unless the file was replaced or shrank), and bounded in
 * line length, entries and total bytes read over the state's life.
 *
 * Thread-safety: one thread at a time per ember__perfmap_t. */
#ifndef EMBER_AGENT_PERFMAP_H
#define EMBER_AGENT_PERFMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ember__perfmap ember__perfmap_t;

/* Defaults of the bounds (0 in ember__perfmap_limits_t picks these). */
#define EMBER__PERFMAP_MAX_LINE    4096u
#define EMBER__PERFMAP_MAX_ENTRIES (1u << 19)
#define EMBER__PERFMAP_MAX_BYTES   (32ull << 20)

typedef struct ember__perfmap_limits {
  size_t max_line;    /* longer lines are skipped, never kept whole */
  size_t max_entries; /* entries kept; later lines are ignored */
  uint64_t max_bytes; /* bytes read over the state's life (reloads count) */
} ember__perfmap_limits_t;

/* Where the file is. */
typedef struct ember__perfmap_src {
  const char *proc_root; /* "/proc" */
  const char *dir;       /* "/tmp" */
  /* dir was chosen by the caller: do not also look in the process's own
   * /tmp through <proc_root>/PID/root. */
  bool dir_set;
} ember__perfmap_src_t;

typedef struct ember__perfmap_stats {
  uint64_t reads;      /* refreshes that found the file (read or unchanged) */
  uint64_t bytes;      /* bytes read */
  uint64_t long_lines; /* lines skipped for being over max_line */
  uint64_t bad_lines;  /* lines that do not parse */
  uint64_t refused;    /* opens refused: link, not regular, owner, links */
  uint64_t capped;     /* refreshes that stopped at max_bytes or max_entries */
  uint64_t reloads;    /* read again from the start: replaced or shrunk */
} ember__perfmap_stats_t;

/* New, empty state for `pid` (limits NULL = defaults). Returns 0, -EINVAL
 * or -ENOMEM. */
int ember__perfmap_new(pid_t pid, const ember__perfmap_limits_t *limits, ember__perfmap_t **out);
/* Frees every name it handed out. NULL is a no-op. */
void ember__perfmap_free(ember__perfmap_t *pm);

/* Read what was appended to the file since the last refresh. Returns 0
 * (also when there is no file, or it was refused: both are counted or
 * harmless) or -ENOMEM. Never blocks on a FIFO; costs an open and an fstat
 * when nothing was appended. */
int ember__perfmap_refresh(ember__perfmap_t *pm, const ember__perfmap_src_t *src);

/* The parser alone (for tests and the fuzzer): feed the bytes that follow
 * those fed before, then commit to make the new entries visible. Feeding
 * counts against max_bytes like reading. Return 0 or -ENOMEM. */
int ember__perfmap_feed(ember__perfmap_t *pm, const char *data, size_t len);
int ember__perfmap_commit(ember__perfmap_t *pm);

/* The name of the code at `addr`, or NULL. Borrowed: valid until
 * ember__perfmap_free (a reload keeps old names). */
const char *ember__perfmap_lookup(const ember__perfmap_t *pm, uint64_t addr);
/* The path the map was last read from ("" before), valid as the names. */
const char *ember__perfmap_path(const ember__perfmap_t *pm);
/* Has the file been found at least once? */
bool ember__perfmap_found(const ember__perfmap_t *pm);
/* Entries held. */
size_t ember__perfmap_count(const ember__perfmap_t *pm);
void ember__perfmap_stats(const ember__perfmap_t *pm, ember__perfmap_stats_t *out);

#endif
