/* /proc readers shared by the agent's modules (procfs.h). */
#include "procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "safefile.h"

/* /proc/PID/status is about 1.5 KiB; NSpid is in its first half. */
#define STATUS_MAX 4096u

int ember__proc_nspid_parse(const char *status, uint64_t *last, unsigned *levels) {
  const char *p = strstr(status, "\nNSpid:");
  if (p == NULL) return -ENOENT;
  p += strlen("\nNSpid:");
  uint64_t v = 0;
  unsigned n = 0;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    if (*p < '0' || *p > '9') break;
    uint64_t x = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
      if (x > (uint64_t)INT32_MAX) return -ENOENT;
      x = x * 10 + (uint64_t)(*p - '0');
    }
    if (x > (uint64_t)INT32_MAX) return -ENOENT;
    v = x;
    n++;
  }
  if (n == 0) return -ENOENT;
  *last = v;
  *levels = n;
  return 0;
}

int ember__proc_ns_pid(const char *proc_root, pid_t pid, uint64_t *out) {
  char path[PATH_MAX];
  char buf[STATUS_MAX + 1];
  size_t len = 0;
  int pn = snprintf(path, sizeof path, "%s/%d/status", proc_root, (int)pid);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  int rc = ember__safe_read(AT_FDCWD, path, NULL, buf, STATUS_MAX, &len);
  if (rc != 0) return rc;
  buf[len] = '\0';
  unsigned levels = 0;
  return ember__proc_nspid_parse(buf, out, &levels);
}
