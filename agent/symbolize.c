/* Symbolization on the agent: the module cache and the resolver. The
 * contract is in symbolize.h; the data structures, string lifetimes and
 * measured costs are described in docs/internals/symbolize.md. The parts
 * live in their own modules: procmaps.c (maps of a process), elfsym.c (ELF
 * files and symbol tables), dwarfline.c (DWARF lines and inline frames),
 * ksyms.c (kallsyms) and perfmap.c (perf maps). */
#include "symbolize.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include "array.h"
#include "debuginfo.h"
#include "dwarfline.h"
#include "elfsym.h"
#include "ember/ember.h"
#include "ksyms.h"
#include "jsmap.h"
#include "perfmap.h"
#include "strarena.h"

#define DEFAULT_MAX_MODULES 512u
#define DEFAULT_MAX_BYTES   (24u << 20)
#define PID_BUCKETS         256u
/* perf callchains carry PERF_CONTEXT_* markers at the top of the address
 * space (-4095 and up); they are not code. */
#define PERF_CONTEXT_MIN ((uint64_t)-4095)

/* A cached file: its module (NULL when the file is unreadable or not ELF:
 * kept "broken" so it is not read again on every window) and the paths of
 * its aliases, which frames point into. */
typedef struct module {
  struct module *lru_prev, *lru_next; /* most recently used at the head */
  struct module *grave_next;
  ember__elfmod_t *elf;
  ember__strarena_t arena; /* alias paths */
  bool shared;             /* from a file only root can write: shared by build-id */
  uint64_t bytes, debug;   /* charged to the cache's budget (module_charge) */
} module_t;

/* A file as one process maps it: (dev, inode, path) -> module. Several
 * aliases share a module when their files have the same build-id. */
typedef struct alias {
  uint64_t dev, ino;
  const char *path; /* in the module's arena */
  module_t *mod;
} alias_t;

static void module_strip(module_t *mod) { ember__elfmod_strip(mod->elf); }

static void module_free(module_t *mod) {
  if (mod == NULL) return;
  ember__elfmod_free(mod->elf);
  ember__strarena_free(&mod->arena);
  ember_free(mod);
}

/* ------------------------------------------------------------------ */
/* Perf maps (agent/perfmap.c reads them; here, one per pid)           */

typedef struct pidmap {
  struct pidmap *next; /* hash chain */
  pid_t pid;
  ember__perfmap_t *pm;
  uint64_t reads; /* pm's stats.reads already counted in perf_map_loads */
  uint64_t epoch; /* the symbolizer's epoch of the last refresh */
} pidmap_t;

/* ------------------------------------------------------------------ */
/* The symbolizer                                                      */

struct ember__symbolizer {
  char *proc_root, *perf_map_dir, *kallsyms;
  bool perf_map_dir_set;
  uint64_t epoch; /* bumped by each forget: perf maps refresh once per epoch */
  size_t max_modules;
  uint64_t max_bytes; /* budget of the modules' memory, LRU-evicted past it */
  uint64_t bytes;     /* charged by the modules in the LRU list */
  uint64_t debug_bytes;
  bool dwarf;
  bool dwarf_detached;
  bool no_demangle;
  ember__debuginfo_t *debuginfo; /* separate debug files, MiniDebugInfo */

  module_t *lru_head, *lru_tail;
  size_t nmodules;
  module_t *grave;  /* evicted, freed at the next forget */
  alias_t *aliases; /* sorted by (dev, ino) */
  size_t naliases, aliases_cap;
  uint64_t evictions;

  ember__elfmod_t *vdso;
  bool vdso_tried;

  ember__ksyms_t *ksyms;
  bool k_tried;

  pidmap_t *pids[PID_BUCKETS];
  ember__perfmap_limits_t perf_limits;

  ember__jsmaps_t *jsmaps; /* source maps of JIT frames' scripts; NULL = off */

  ember__strarena_t names; /* special mapping names ("[vsyscall]"), interned */
  const char **name_list;
  size_t nnames, names_cap;

  ember__symbolizer_stats_t stats;
};

static char *dup_opt(const char *s, const char *dflt) { return ember_strdup(s ? s : dflt); }

int ember__symbolizer_new(const ember__symbolizer_opts_t *opts, ember__symbolizer_t **out) {
  if (out == NULL) return -EINVAL;
  ember__symbolizer_opts_t o = {0};
  if (opts != NULL) o = *opts;
  ember__symbolizer_t *s = ember_calloc(1, sizeof *s);
  if (s == NULL) return -ENOMEM;
  s->proc_root = dup_opt(o.proc_root, "/proc");
  s->perf_map_dir = dup_opt(o.perf_map_dir, "/tmp");
  s->kallsyms = dup_opt(o.kallsyms, "/proc/kallsyms");
  if (s->proc_root == NULL || s->perf_map_dir == NULL || s->kallsyms == NULL) {
    ember__symbolizer_free(s);
    return -ENOMEM;
  }
  s->perf_map_dir_set = o.perf_map_dir != NULL;
  s->max_modules = o.max_modules ? o.max_modules : DEFAULT_MAX_MODULES;
  s->max_bytes = o.max_bytes ? o.max_bytes : DEFAULT_MAX_BYTES;
  s->dwarf = o.dwarf;
  s->dwarf_detached = !o.no_detached_dwarf;
  s->no_demangle = o.no_demangle;
  s->perf_limits = o.perf_map;
  ember__debuginfo_opts_t dopt = {.debug_dirs = o.debug_dirs};
  int rc = ember__debuginfo_new(&dopt, &s->debuginfo);
  if (rc == 0 && o.sourcemaps) {
    ember__jsmaps_opts_t jo = {.proc_root = s->proc_root, .max_bytes = o.sourcemap_bytes};
    rc = ember__jsmaps_new(&jo, &s->jsmaps);
  }
  if (rc != 0) {
    ember__symbolizer_free(s);
    return rc;
  }
  /* libelf's version handshake; idempotent and needed before elf_begin. */
  elf_version(EV_CURRENT);
  *out = s;
  return 0;
}

static void pidmap_free(pidmap_t *pm) {
  if (pm == NULL) return;
  ember__perfmap_free(pm->pm);
  ember_free(pm);
}

static void trim_to_budget(ember__symbolizer_t *s, const struct module *keep);

static void grave_flush(ember__symbolizer_t *s) {
  while (s->grave != NULL) {
    module_t *m = s->grave;
    s->grave = m->grave_next;
    module_free(m);
  }
}

void ember__symbolizer_free(ember__symbolizer_t *s) {
  if (s == NULL) return;
  while (s->lru_head != NULL) {
    module_t *m = s->lru_head;
    s->lru_head = m->lru_next;
    module_free(m);
  }
  grave_flush(s);
  ember__elfmod_free(s->vdso);
  ember__debuginfo_free(s->debuginfo);
  ember__jsmaps_free(s->jsmaps);
  ember_free(s->aliases);
  ember__ksyms_free(s->ksyms);
  for (size_t b = 0; b < PID_BUCKETS; b++) {
    while (s->pids[b] != NULL) {
      pidmap_t *pm = s->pids[b];
      s->pids[b] = pm->next;
      pidmap_free(pm);
    }
  }
  ember__strarena_free(&s->names);
  ember_free(s->name_list);
  ember_free(s->proc_root);
  ember_free(s->perf_map_dir);
  ember_free(s->kallsyms);
  ember_free(s);
}

void ember__symbolizer_forget(ember__symbolizer_t *s, pid_t pid) {
  if (s == NULL) return;
  s->epoch++;
  pidmap_t **pp = &s->pids[(uint32_t)pid % PID_BUCKETS];
  while (*pp != NULL) {
    if ((*pp)->pid == pid) {
      pidmap_t *pm = *pp;
      *pp = pm->next;
      pidmap_free(pm);
      break;
    }
    pp = &(*pp)->next;
  }
  trim_to_budget(s, NULL);
  grave_flush(s);
  ember__jsmaps_forget(s->jsmaps, pid);
}

void ember__symbolizer_stats(const ember__symbolizer_t *s, ember__symbolizer_stats_t *out) {
  if (s == NULL || out == NULL) return;
  *out = s->stats;
  out->bytes = s->bytes;
  out->debug_bytes = s->debug_bytes;
  out->evictions = s->evictions;
  ember__debuginfo_stats_t d;
  ember__debuginfo_stats(s->debuginfo, &d);
  out->debug_files = d.by_build_id + d.by_link;
  out->minidebug = d.minidebug;
  out->debug_refused = d.build_id_mismatch + d.crc_mismatch + d.bad_link + d.unsafe + d.not_elf +
                       d.minidebug_bad + d.minidebug_too_big;
}

void ember__symbolizer_jsmaps_stats(const ember__symbolizer_t *s, ember__jsmaps_stats_t *out) {
  if (out == NULL) return;
  *out = (ember__jsmaps_stats_t){0};
  if (s != NULL) ember__jsmaps_stats(s->jsmaps, out);
}

void ember__symbolizer_debuginfo_stats(const ember__symbolizer_t *s,
                                       ember__debuginfo_stats_t *out) {
  if (s == NULL || out == NULL) return;
  ember__debuginfo_stats(s->debuginfo, out);
}

static const char *intern_name(ember__symbolizer_t *s, const char *name) {
  for (size_t i = 0; i < s->nnames; i++) {
    if (strcmp(s->name_list[i], name) == 0) return s->name_list[i];
  }
  const char **nv = ember__grow_array(s->name_list, &s->names_cap, s->nnames + 1, sizeof *nv);
  if (nv == NULL) return NULL;
  s->name_list = nv;
  const char *copy = ember__strarena_dup(&s->names, name, strlen(name));
  if (copy == NULL) return NULL;
  s->name_list[s->nnames++] = copy;
  return copy;
}

/* --- module cache --- */

static void lru_unlink(ember__symbolizer_t *s, module_t *m) {
  if (m->lru_prev) {
    m->lru_prev->lru_next = m->lru_next;
  } else {
    s->lru_head = m->lru_next;
  }
  if (m->lru_next) {
    m->lru_next->lru_prev = m->lru_prev;
  } else {
    s->lru_tail = m->lru_prev;
  }
  m->lru_prev = m->lru_next = NULL;
}

static void lru_push(ember__symbolizer_t *s, module_t *m) {
  m->lru_prev = NULL;
  m->lru_next = s->lru_head;
  if (s->lru_head) s->lru_head->lru_prev = m;
  s->lru_head = m;
  if (s->lru_tail == NULL) s->lru_tail = m;
}

static void lru_touch(ember__symbolizer_t *s, module_t *m) {
  if (s->lru_head == m) return;
  lru_unlink(s, m);
  lru_push(s, m);
}

static void evict_one(ember__symbolizer_t *s) {
  module_t *m = s->lru_tail;
  if (m == NULL) return;
  lru_unlink(s, m);
  s->nmodules--;
  s->bytes -= m->bytes;
  s->debug_bytes -= m->debug;
  size_t k = 0;
  for (size_t i = 0; i < s->naliases; i++) {
    if (s->aliases[i].mod != m) s->aliases[k++] = s->aliases[i];
  }
  s->naliases = k;
  module_strip(m);
  m->grave_next = s->grave;
  s->grave = m;
  s->evictions++;
}

/* Bring the module's charge up to date: its DWARF grows with lookups (CUs
 * indexed, line tables decoded). */
static void module_charge(ember__symbolizer_t *s, module_t *m) {
  uint64_t bytes = sizeof *m + m->arena.bytes + ember__elfmod_bytes(m->elf);
  uint64_t debug = ember__elfmod_debug_bytes(m->elf);
  s->bytes = s->bytes - m->bytes + bytes;
  s->debug_bytes = s->debug_bytes - m->debug + debug;
  m->bytes = bytes;
  m->debug = debug;
}

/* Evict least recently used modules, but not `keep`, while the cache is
 * over its budget. Their memory is released at the next forget (frames of
 * this batch may point into it). */
static void trim_to_budget(ember__symbolizer_t *s, const module_t *keep) {
  while (s->bytes > s->max_bytes && s->lru_tail != NULL && s->lru_tail != keep) evict_one(s);
}

/* The first alias index with key >= (dev, ino). */
static size_t alias_lower(const ember__symbolizer_t *s, uint64_t dev, uint64_t ino) {
  size_t lo = 0, hi = s->naliases;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const alias_t *a = &s->aliases[mid];
    if (a->dev < dev || (a->dev == dev && a->ino < ino)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static alias_t *alias_find(ember__symbolizer_t *s, const ember__mapping_t *mp) {
  for (size_t i = alias_lower(s, mp->dev, mp->ino); i < s->naliases; i++) {
    alias_t *a = &s->aliases[i];
    if (a->dev != mp->dev || a->ino != mp->ino) break;
    if (strcmp(a->path, mp->path) == 0) return a;
  }
  return NULL;
}

/* Add an alias for `mp` to `mod`; mod must already be in the LRU list. */
static int alias_add(ember__symbolizer_t *s, const ember__mapping_t *mp, module_t *mod,
                     alias_t **out) {
  alias_t *nv = ember__grow_array(s->aliases, &s->aliases_cap, s->naliases + 1, sizeof *nv);
  if (nv == NULL) return -ENOMEM;
  s->aliases = nv;
  const char *path = ember__strarena_dup(&mod->arena, mp->path, strlen(mp->path));
  if (path == NULL) return -ENOMEM;
  size_t at = alias_lower(s, mp->dev, mp->ino);
  memmove(&s->aliases[at + 1], &s->aliases[at], (s->naliases - at) * sizeof *s->aliases);
  s->aliases[at] = (alias_t){mp->dev, mp->ino, path, mod};
  s->naliases++;
  *out = &s->aliases[at];
  return 0;
}

static module_t *module_by_build_id(ember__symbolizer_t *s, const char *build_id) {
  for (module_t *m = s->lru_head; m != NULL; m = m->lru_next) {
    const char *id = m->elf ? ember__elfmod_build_id(m->elf) : NULL;
    if (m->shared && id != NULL && strcmp(id, build_id) == 0) return m;
  }
  return NULL;
}

/* Find or load the module of a file mapping. Returns 0 with *out set, or
 * -ENOMEM. A file that cannot be read becomes a "broken" module so it is
 * not retried on every address; a transient failure (out of fds) leaves
 * *out NULL and caches nothing. */
static int module_for(ember__symbolizer_t *s, const ember__procmaps_t *pm,
                      const ember__mapping_t *mp, alias_t **out) {
  int rc = 0;
  ember__elf_file_t f = EMBER__ELF_FILE_NONE;
  ember__elfmod_t *elf = NULL;
  module_t *mod = NULL;
  char hex[EMBER__BUILD_ID_HEX];
  bool have_id = false, trusted = false;
  *out = NULL;
  alias_t *a = alias_find(s, mp);
  if (a != NULL) {
    lru_touch(s, a->mod);
    s->stats.module_hits++;
    *out = a;
    return 0;
  }
  struct stat st;
  int fd = ember__procmaps_open(pm, mp, EMBER__ELF_MAX_SIZE, &st);
  if (ember__procmaps_transient(fd)) return 0;
  if (fd >= 0 && ember__elf_open_fd(fd, &st, ember__procmaps_uid(pm) > 0, &f) == 0) {
    if (f.mapped) s->stats.files_mapped++;
    have_id = ember__elf_build_id(f.elf, hex, sizeof hex);
    /* Only files only root can write are shared by build-id: anyone can
     * give a file of their own a system library's build-id, and its
     * symbols must not become the library's (or the other way round). */
    trusted = st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
    module_t *same = have_id && trusted ? module_by_build_id(s, hex) : NULL;
    if (same != NULL) {
      /* The same build under another path or in another container. */
      rc = alias_add(s, mp, same, out);
      if (rc == 0) {
        lru_touch(s, same);
        s->stats.module_hits++;
      }
      goto cleanup;
    }
    /* The process's root, for a .gnu_debuglink beside the file: none
     * (-1) when it is gone, debug directories are still searched. */
    int root = ember__procmaps_open_root(pm);
    if (ember__procmaps_transient(root)) {
      rc = 0;
      goto cleanup;
    }
    ember__elfmod_opts_t eo = {.dwarf = s->dwarf,
                               .dwarf_detached = s->dwarf_detached,
                               .no_demangle = s->no_demangle,
                               .debuginfo = s->debuginfo,
                               .path = mp->deleted ? NULL : mp->path,
                               .root_fd = root >= 0 || root == AT_FDCWD ? root : -1,
                               .root_safe = ember__procmaps_uid(pm) > 0,
                               /* One module's DWARF may not take over the
                                * cache: a quarter of it at most. */
                               .dwarf_max_bytes = s->max_bytes >= 4 ? s->max_bytes / 4 : 1};
    rc = ember__elfmod_build(&f, have_id ? hex : NULL, &eo, &elf);
    if (root >= 0) close(root);
    if (rc == 0) s->stats.module_loads++;
  }
  /* Unreadable, not ELF, over a bound or out of memory while parsing it:
   * cached as broken (no ELF module), so it is not read again on every
   * window. */
  rc = 0;
  mod = ember_calloc(1, sizeof *mod);
  if (mod == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  mod->elf = elf;
  mod->shared = trusted;
  elf = NULL;
  if (s->nmodules >= s->max_modules) evict_one(s);
  /* Charged before it joins the list, so making room cannot evict it (nor
   * move an alias a caller holds: aliases are added after). */
  module_charge(s, mod);
  trim_to_budget(s, NULL);
  lru_push(s, mod);
  s->nmodules++;
  rc = alias_add(s, mp, mod, out);
  if (rc != 0) {
    lru_unlink(s, mod);
    s->nmodules--;
    s->bytes -= mod->bytes;
    s->debug_bytes -= mod->debug;
    goto cleanup;
  }
  mod = NULL;
cleanup:
  module_free(mod);
  ember__elfmod_free(elf);
  ember__elf_close(&f);
  return rc;
}

/* The vdso is the same image in every process on this kernel (for one ABI):
 * read the agent's own copy from memory. */
static int vdso_module(ember__symbolizer_t *s, ember__elfmod_t **out) {
  *out = NULL;
  if (s->vdso_tried) {
    *out = s->vdso;
    return 0;
  }
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) {
    s->vdso_tried = true;
    return 0;
  }
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) {
    s->vdso_tried = true;
    return 0;
  }
  size_t size = (size_t)(eh->e_shoff + (uint64_t)eh->e_shnum * eh->e_shentsize);
  size_t ph_end = (size_t)(eh->e_phoff + (uint64_t)eh->e_phnum * eh->e_phentsize);
  if (ph_end > size) size = ph_end;
  /* elf_memory wants a mutable pointer but only reads the image. */
  Elf *elf = elf_memory((char *)base, size);
  if (elf == NULL) {
    s->vdso_tried = true;
    return 0;
  }
  ember__elf_file_t f = {-1, elf, true, 0};
  char hex[EMBER__BUILD_ID_HEX];
  bool have_id = ember__elf_build_id(elf, hex, sizeof hex);
  ember__elfmod_t *mod = NULL;
  /* Its debug file, if any, by build-id (linux-image-*-dbg ships one). */
  ember__elfmod_opts_t eo = {
      .no_demangle = s->no_demangle, .debuginfo = s->debuginfo, .root_fd = -1};
  int rc = ember__elfmod_build(&f, have_id ? hex : NULL, &eo, &mod);
  elf_end(elf);
  if (rc != 0) return rc;
  s->vdso = mod;
  s->vdso_tried = true;
  s->stats.module_loads++;
  *out = mod;
  return 0;
}

/* --- perf maps --- */

static pidmap_t *perfmap_get(ember__symbolizer_t *s, pid_t pid) {
  for (pidmap_t *pm = s->pids[(uint32_t)pid % PID_BUCKETS]; pm != NULL; pm = pm->next) {
    if (pm->pid == pid) return pm;
  }
  return NULL;
}

/* Read what was appended to pid's perf map, creating its state when the
 * file is first found. Returns 0 (also when there is no map) or -ENOMEM. */
static int perfmap_refresh(ember__symbolizer_t *s, pid_t pid, pidmap_t **io) {
  int rc = 0;
  pidmap_t *pm = *io, *created = NULL;
  if (pm == NULL) {
    pm = created = ember_calloc(1, sizeof *pm);
    if (pm == NULL) return -ENOMEM;
    pm->pid = pid;
    rc = ember__perfmap_new(pid, &s->perf_limits, &pm->pm);
    if (rc != 0) goto cleanup;
  }
  ember__perfmap_src_t src = {
      .proc_root = s->proc_root, .dir = s->perf_map_dir, .dir_set = s->perf_map_dir_set};
  pm->epoch = s->epoch;
  rc = ember__perfmap_refresh(pm->pm, &src);
  ember__perfmap_stats_t ps;
  ember__perfmap_stats(pm->pm, &ps);
  s->stats.perf_map_loads += ps.reads - pm->reads;
  pm->reads = ps.reads;
  ember__perfmap_stats_t after;
  ember__perfmap_stats(pm->pm, &after);
  /* A refused map keeps its state too, so it is logged once per pid, not
   * once per stack. */
  if (created != NULL && (ember__perfmap_found(pm->pm) || after.refused > 0)) {
    uint32_t b = (uint32_t)pid % PID_BUCKETS;
    created->next = s->pids[b];
    s->pids[b] = created;
    created = NULL;
  }
  if (created == NULL) *io = pm;
cleanup:
  pidmap_free(created);
  return rc;
}

/* --- one call --- */

typedef struct call {
  ember__symbolizer_t *s;
  pid_t pid;
  const ember__procmaps_t *maps;
  ember_frame_t *out;
  size_t cap, k;
  pidmap_t *pm;
  bool pm_read; /* the perf map was (re)read in this call */
} call_t;

static bool emit(call_t *c, const ember_frame_t *f) {
  if (c->k >= c->cap) return false;
  c->out[c->k++] = *f;
  if (f->function == NULL) c->s->stats.unresolved++;
  return true;
}

/* Look `a` up in the pid's perf map. A miss may be code compiled since the
 * last read: the map is append-only, so read what was added, at most once
 * per call. Returns 0 (*out NULL on a miss) or -ENOMEM. */
static int jit_lookup(call_t *c, uint64_t a, const char **out) {
  if (c->pm == NULL) c->pm = perfmap_get(c->s, c->pid);
  *out = c->pm ? ember__perfmap_lookup(c->pm->pm, a) : NULL;
  if (*out != NULL || c->pm_read) return 0;
  c->pm_read = true;
  /* Once per pid between two forgets (the agent forgets after each close
   * job): a refresh with new bytes re-merges the whole table, and a map
   * growing by a line between samples would otherwise cost a copy of it
   * per distinct stack. The stacks of one job were all sampled before it
   * ran, so one read at its first miss already holds their code. */
  if (c->pm != NULL && c->pm->epoch == c->s->epoch) return 0;
  int rc = perfmap_refresh(c->s, c->pid, &c->pm);
  if (rc == 0 && c->pm != NULL) *out = ember__perfmap_lookup(c->pm->pm, a);
  return rc;
}

/* Frames for `a` from DWARF go to the call's buffer with the module's
 * fields of `base`. */
typedef struct dwarf_emit {
  call_t *c;
  const ember_frame_t *base;
} dwarf_emit_t;

static bool emit_dwarf(void *ctx, const char *function, const char *file, uint32_t line) {
  dwarf_emit_t *e = ctx;
  ember_frame_t f = *e->base;
  f.function = function;
  f.file = file;
  f.line = line;
  return emit(e->c, &f);
}

/* `cached` is mod's entry in the cache (NULL for the vdso), charged for
 * what the DWARF lookup made. */
static int resolve_module(call_t *c, const ember__elfmod_t *mod, module_t *cached,
                          const char *module_name, const ember__mapping_t *mp, uint64_t ip,
                          uint64_t a) {
  ember_frame_t f = {.module = module_name, .kind = EMBER_FRAME_NATIVE};
  f.address = ip - mp->start + mp->offset;
  if (mod == NULL) {
    emit(c, &f);
    return 0;
  }
  f.build_id = ember__elfmod_build_id(mod);
  uint64_t vaddr;
  if (!ember__elfmod_translate(mod, a - mp->start + mp->offset, &vaddr)) {
    emit(c, &f);
    return 0;
  }
  const ember__elfsym_t *sym = ember__elfmod_sym(mod, vaddr);
  ember__dwarfline_t *dw = ember__elfmod_dwarf(mod);
  if (c->s->dwarf && dw != NULL) {
    ember_frame_t base = f;
    base.address = 0;
    bool done = false;
    dwarf_emit_t e = {c, &base};
    int rc = ember__dwarfline_frames(dw, vaddr, sym ? sym->name : NULL, emit_dwarf, &e, &done);
    if (cached != NULL) module_charge(c->s, cached);
    if (rc != 0 || done) return rc;
  }
  if (sym != NULL) {
    f.function = sym->name;
    f.address = 0;
  }
  emit(c, &f);
  return 0;
}

static int resolve_kernel(call_t *c, uint64_t ip, uint64_t a) {
  ember__symbolizer_t *s = c->s;
  if (!s->k_tried) {
    /* Once (also when unreadable); after -ENOMEM the next frame retries. */
    int rc = ember__ksyms_load(s->kallsyms, &s->ksyms);
    if (rc != 0) return rc;
    s->k_tried = true;
  }
  const ember__ksym_t *k = ember__ksyms_find(s->ksyms, a);
  ember_frame_t f = {.kind = EMBER_FRAME_KERNEL, .module = "[kernel]"};
  if (k != NULL) {
    f.function = k->name;
    f.module = k->module;
  } else {
    f.address = ip;
  }
  emit(c, &f);
  return 0;
}

/* One address: `ip` as sampled, `a` the address to look up (ip - 1 for
 * return addresses). */
static int resolve(call_t *c, uint64_t ip, uint64_t a) {
  ember__symbolizer_t *s = c->s;
  const char *j = NULL;
  int rc = 0;
  const ember__mapping_t *mp = ember__procmaps_find(c->maps, a);
  if (mp == NULL && a >= EMBER__KERNEL_MIN) return resolve_kernel(c, ip, a);
  if (mp == NULL || mp->kind == EMBER__MAP_ANON) {
    /* Anonymous executable memory is JIT code; so may be an address outside
     * every mapping of the snapshot (mapped since), and without a snapshot
     * the perf map is the only user-space source. */
    rc = jit_lookup(c, a, &j);
    if (rc != 0) return rc;
    ember_frame_t f = {.kind = mp || j ? EMBER_FRAME_JIT : EMBER_FRAME_NATIVE, .address = ip};
    if (j != NULL) {
      f.function = j;
      f.module = ember__perfmap_path(c->pm->pm);
      f.address = 0;
      /* A script with a source map: its author's name, file and line, the
       * generated script as the module. */
      ember__jsframe_t js;
      rc = ember__jsmaps_frame(s->jsmaps, c->pid, j, &js);
      if (rc < 0) return rc;
      if (rc == 1) {
        f.function = js.function;
        f.file = js.file;
        f.line = js.line;
        f.module = js.script;
        f.generated = js.generated;
      }
    }
    emit(c, &f);
    return 0;
  }
  if (mp->kind == EMBER__MAP_VDSO) {
    ember__elfmod_t *mod = NULL;
    rc = vdso_module(s, &mod);
    if (rc != 0) return rc;
    return resolve_module(c, mod, NULL, "[vdso]", mp, ip, a);
  }
  if (mp->kind == EMBER__MAP_SPECIAL) {
    const char *name = intern_name(s, mp->path);
    if (name == NULL) return -ENOMEM;
    ember_frame_t f = {.kind = EMBER_FRAME_NATIVE, .module = name, .address = ip - mp->start};
    emit(c, &f);
    return 0;
  }
  alias_t *al = NULL;
  rc = module_for(s, c->maps, mp, &al);
  if (rc != 0) return rc;
  if (al == NULL) {
    /* Could not even open it right now (out of fds): there is no module
     * string of ours to point at, so the frame names no module. */
    ember_frame_t f = {.kind = EMBER_FRAME_NATIVE, .address = ip};
    emit(c, &f);
    return 0;
  }
  return resolve_module(c, al->mod->elf, al->mod, al->path, mp, ip, a);
}

int ember__symbolize(ember__symbolizer_t *s, pid_t pid, const ember__procmaps_t *maps,
                     const uint64_t *ips, size_t nips, ember_frame_t *out, size_t cap, size_t *n) {
  if (s == NULL || n == NULL || (ips == NULL && nips > 0) || (out == NULL && cap > 0))
    return -EINVAL;
  call_t c = {.s = s, .pid = pid, .maps = maps, .out = out, .cap = cap};
  bool leaf = true;
  for (size_t i = 0; i < nips && c.k < cap; i++) {
    uint64_t ip = ips[i];
    if (ip >= PERF_CONTEXT_MIN) continue; /* PERF_CONTEXT_* marker */
    uint64_t a = leaf || ip == 0 ? ip : ip - 1;
    leaf = false;
    int rc = resolve(&c, ip, a);
    if (rc != 0) return rc;
  }
  *n = c.k;
  return 0;
}
