/* Kernel symbols from kallsyms (ksyms.h). */
#include "ksyms.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "ember/ember.h"
#include "procfs.h"
#include "safefile.h"
#include "strarena.h"

/* The most symbols kept (STYLE.md rule 12): a kernel has ~200k. */
#define MAX_KSYMS (1u << 22)
/* kallsyms has no sizes: a symbol ends at the next one, but never reaches
 * more than this far into the gap before another module's text. */
#define KSYM_GAP_MAX (64u * 1024u)

struct ember__ksyms {
  ember__ksym_t *v;
  size_t n;
  ember__strarena_t arena;
};

/* Leading underscores, for choosing among aliases of one address. */
static unsigned underscores(const char *s) {
  unsigned n = 0;
  while (s[n] == '_') n++;
  return n;
}

typedef struct kctx {
  ember__ksym_t *v;
  size_t n, cap;
  ember__strarena_t *arena;
  const char *last_module;
} kctx_t;

static int ksym_line(void *vctx, char *line, size_t len) {
  kctx_t *k = vctx;
  (void)len;
  const char *p = line;
  uint64_t addr;
  if (!ember__scan_hex(&p, &addr) || *p++ != ' ') return 0;
  char type = *p++;
  if (*p++ != ' ') return 0;
  if (type != 't' && type != 'T' && type != 'w' && type != 'W') return 0;
  if (addr == 0 || k->n >= MAX_KSYMS) return 0; /* kptr_restrict hides them */
  const char *name = p;
  while (*p && *p != ' ' && *p != '\t') p++;
  size_t nlen = (size_t)(p - name);
  if (nlen == 0) return 0;
  const char *mod = "[kernel]";
  size_t mlen = 8;
  p = ember__skip_blanks(p);
  if (*p == '[') {
    const char *e = strchr(p, ']');
    if (e != NULL) {
      mod = p;
      mlen = (size_t)(e - p) + 1;
    }
  }
  const char *modstr = k->last_module;
  if (modstr == NULL || strlen(modstr) != mlen || memcmp(modstr, mod, mlen) != 0) {
    modstr = ember__strarena_dup(k->arena, mod, mlen);
    if (modstr == NULL) return -ENOMEM;
    k->last_module = modstr;
  }
  const char *nm = ember__strarena_dup(k->arena, name, nlen);
  if (nm == NULL) return -ENOMEM;
  ember__ksym_t *nv = ember__grow_array(k->v, &k->cap, k->n + 1, sizeof *k->v);
  if (nv == NULL) return -ENOMEM;
  k->v = nv;
  unsigned u = underscores(nm);
  unsigned rank = (u > 15 ? 15u : u) << 1 | (type == 'w' || type == 'W');
  k->v[k->n++] = (ember__ksym_t){addr, 0, nm, modstr, rank};
  return 0;
}

static int ksym_cmp(const void *a, const void *b) {
  const ember__ksym_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return strcmp(x->name, y->name);
}

int ember__ksyms_load(const char *path, ember__ksyms_t **out) {
  ember__ksyms_t *t = ember_calloc(1, sizeof *t);
  if (t == NULL) return -ENOMEM;
  kctx_t k = {.arena = &t->arena};
  int fd = ember__safe_open_trusted(path, 0, NULL);
  if (fd < 0) {
    if (fd == -ENOMEM) {
      ember_free(t);
      return fd;
    }
    *out = t;
    return 0;
  }
  int rc = ember__read_lines(fd, true, ksym_line, &k, NULL);
  close(fd);
  if (rc != 0) {
    ember_free(k.v);
    ember__strarena_free(&t->arena);
    if (rc == -ENOMEM) {
      ember_free(t);
      return rc;
    }
    *out = t;
    return 0;
  }
  ember__sort_array(k.v, k.n, sizeof *k.v, ksym_cmp);
  size_t n = 0;
  for (size_t i = 0; i < k.n; i++) {
    if (n > 0 && k.v[n - 1].start == k.v[i].start) continue;
    k.v[n++] = k.v[i];
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t limit = k.v[i].start + KSYM_GAP_MAX;
    if (i + 1 < n) {
      uint64_t next = k.v[i + 1].start;
      k.v[i].end = k.v[i + 1].module == k.v[i].module || next < limit ? next : limit;
    } else {
      k.v[i].end = limit;
    }
  }
  t->v = k.v;
  t->n = n;
  *out = t;
  return 0;
}

void ember__ksyms_free(ember__ksyms_t *k) {
  if (k == NULL) return;
  ember_free(k->v);
  ember__strarena_free(&k->arena);
  ember_free(k);
}

const ember__ksym_t *ember__ksyms_find(const ember__ksyms_t *k, uint64_t a) {
  if (k == NULL) return NULL;
  size_t lo = 0, hi = k->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (k->v[mid].start <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const ember__ksym_t *s = &k->v[lo - 1];
  return a < s->end ? s : NULL;
}

size_t ember__ksyms_count(const ember__ksyms_t *k) { return k ? k->n : 0; }
