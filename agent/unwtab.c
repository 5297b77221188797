/* User stacks from CFI: see unwtab.h. */
#include "unwtab.h"

#include <errno.h>
#include <gelf.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "array.h"
#include "elfsym.h"
#include "ember/ember.h"
#include "htab.h"

#define DEFAULT_MAX_BYTES (64u << 20)
#define MAX_SEGS          16

/* A built table, shared by every file entry with its build-id. */
typedef struct table_ref {
  ember__cfi_table_t *table; /* NULL: no usable CFI */
  size_t bytes;
  unsigned refs;
  bool shared; /* from a file only root can write: others of its build-id may use it */
  char build_id[EMBER__BUILD_ID_HEX]; /* "" when none */
} table_ref_t;

/* One file (device, inode) some process maps, and how its file offsets
 * become the file's virtual addresses. */
typedef struct entry {
  uint64_t dev, ino;
  table_ref_t *ref;
  uint64_t last_used;
  unsigned nsegs;
  struct {
    uint64_t off, vaddr, filesz;
  } segs[MAX_SEGS];
} entry_t;

struct ember__unwtab {
  ember__unwtab_opts_t o;
  entry_t **ents;
  size_t nents, capents;
  ember__htab_t index; /* (dev, ino) -> ents[] */
  uint64_t clock;      /* use counter, for LRU */
  entry_t *vdso;       /* the agent's own vdso image's table */
  bool vdso_tried;
  table_ref_t **grave; /* evicted, freed at the next unwind */
  size_t ngrave, capgrave;
  ember__unwtab_stats_t st;
};

int ember__unwind_mode_parse(const char *s, ember__unwind_mode_t *out) {
  if (s == NULL) return -EINVAL;
  if (strcmp(s, "auto") == 0) {
    *out = EMBER__UNWIND_AUTO;
  } else if (strcmp(s, "fp") == 0) {
    *out = EMBER__UNWIND_FP;
  } else if (strcmp(s, "dwarf") == 0) {
    *out = EMBER__UNWIND_DWARF;
  } else {
    return -EINVAL;
  }
  return 0;
}

int ember__unwtab_new(const ember__unwtab_opts_t *opts, ember__unwtab_t **out) {
  ember__unwtab_t *t = ember_calloc(1, sizeof *t);
  if (t == NULL) return -ENOMEM;
  if (opts) t->o = *opts;
  if (t->o.max_bytes == 0) t->o.max_bytes = DEFAULT_MAX_BYTES;
  ember__htab_init(&t->index);
  *out = t;
  return 0;
}

static void ref_put(ember__unwtab_t *t, table_ref_t *r, bool now) {
  if (r == NULL || --r->refs > 0) return;
  t->st.bytes -= r->bytes;
  t->st.tables--;
  if (now) {
    ember__cfi_free(r->table);
    ember_free(r);
    return;
  }
  /* The walk in progress may still hold the table: free it after. */
  table_ref_t **g = ember__grow_array(t->grave, &t->capgrave, t->ngrave + 1, sizeof *g);
  if (g == NULL) {
    /* No room to defer: leak nothing, keep it alive as an orphan until
     * the next grave flush finds room (rare: out of memory). */
    r->refs = 1;
    t->st.bytes += r->bytes;
    t->st.tables++;
    return;
  }
  t->grave = g;
  t->grave[t->ngrave++] = r;
}

static void grave_flush(ember__unwtab_t *t) {
  for (size_t i = 0; i < t->ngrave; i++) {
    ember__cfi_free(t->grave[i]->table);
    ember_free(t->grave[i]);
  }
  t->ngrave = 0;
}

void ember__unwtab_free(ember__unwtab_t *t) {
  if (t == NULL) return;
  grave_flush(t);
  for (size_t i = 0; i < t->nents; i++) {
    ref_put(t, t->ents[i]->ref, true);
    ember_free(t->ents[i]);
  }
  if (t->vdso) {
    ref_put(t, t->vdso->ref, true);
    ember_free(t->vdso);
  }
  ember_free(t->ents);
  ember_free(t->grave);
  ember__htab_free(&t->index);
  ember_free(t);
}

void ember__unwtab_stats(const ember__unwtab_t *t, ember__unwtab_stats_t *out) { *out = t->st; }

/* --- the index by (device, inode) --- */

typedef struct key {
  const ember__unwtab_t *t;
  uint64_t dev, ino;
} ukey_t;

static uint64_t key_hash(uint64_t dev, uint64_t ino) {
  return ember__hash_mix(ember__hash_mix(0x7ab1e, dev), ino);
}

static bool key_eq(const void *ctx, uint32_t idx) {
  const ukey_t *k = ctx;
  return k->t->ents[idx]->dev == k->dev && k->t->ents[idx]->ino == k->ino;
}

static uint64_t ent_rehash(const void *ctx, uint32_t idx) {
  const ukey_t *k = ctx;
  return key_hash(k->t->ents[idx]->dev, k->t->ents[idx]->ino);
}

static int index_rebuild(ember__unwtab_t *t) {
  ember__htab_free(&t->index);
  ember__htab_init(&t->index);
  ukey_t k = {t, 0, 0};
  for (size_t i = 0; i < t->nents; i++) {
    if (ember__htab_insert(&t->index, key_hash(t->ents[i]->dev, t->ents[i]->ino), (uint32_t)i,
                           ent_rehash, &k) != 0)
      return -ENOMEM;
  }
  return 0;
}

static entry_t *entry_find(const ember__unwtab_t *t, uint64_t dev, uint64_t ino) {
  ukey_t k = {t, dev, ino};
  int64_t i = ember__htab_find(&t->index, key_hash(dev, ino), key_eq, &k);
  return i >= 0 ? t->ents[i] : NULL;
}

static table_ref_t *ref_by_build_id(const ember__unwtab_t *t, const char *id) {
  if (id[0] == '\0') return NULL;
  for (size_t i = 0; i < t->nents; i++) {
    if (t->ents[i]->ref->shared && strcmp(t->ents[i]->ref->build_id, id) == 0)
      return t->ents[i]->ref;
  }
  return NULL;
}

/* Drop the least recently used entries until the tables fit. */
static void evict(ember__unwtab_t *t) {
  bool dropped = false;
  while (t->st.bytes > t->o.max_bytes && t->nents > 0) {
    size_t lru = 0;
    for (size_t i = 1; i < t->nents; i++) {
      if (t->ents[i]->last_used < t->ents[lru]->last_used) lru = i;
    }
    entry_t *e = t->ents[lru];
    ref_put(t, e->ref, false);
    ember_free(e);
    t->ents[lru] = t->ents[--t->nents];
    t->st.evictions++;
    dropped = true;
  }
  if (dropped && index_rebuild(t) != 0) {
    /* Without an index nothing is found: start over empty. */
    for (size_t i = 0; i < t->nents; i++) {
      ref_put(t, t->ents[i]->ref, false);
      ember_free(t->ents[i]);
    }
    t->nents = 0;
    ember__htab_free(&t->index);
    ember__htab_init(&t->index);
  }
}

/* --- building --- */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void read_segments(Elf *elf, entry_t *e) {
  size_t n = 0;
  if (elf_getphdrnum(elf, &n) != 0) return;
  for (size_t i = 0; i < n && e->nsegs < MAX_SEGS; i++) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, (int)i, &ph) == NULL || ph.p_type != PT_LOAD) continue;
    e->segs[e->nsegs].off = ph.p_offset;
    e->segs[e->nsegs].vaddr = ph.p_vaddr;
    e->segs[e->nsegs].filesz = ph.p_filesz;
    e->nsegs++;
  }
}

/* The table of `elf` (a new ref, or an existing one of the same build).
 * Sharing by build-id is for files only root can write: anyone can give a
 * file of their own the build-id of a system library, and its table must
 * not become the library's (or the other way round). */
static table_ref_t *ref_for(ember__unwtab_t *t, Elf *elf, bool have_id, const char *id,
                            bool trusted) {
  table_ref_t *same = have_id && trusted ? ref_by_build_id(t, id) : NULL;
  if (same != NULL) {
    same->refs++;
    return same;
  }
  table_ref_t *r = ember_calloc(1, sizeof *r);
  if (r == NULL) return NULL;
  r->refs = 1;
  r->shared = trusted;
  if (have_id) snprintf(r->build_id, sizeof r->build_id, "%s", id);
  uint64_t t0 = mono_ns();
  ember__cfi_stats_t cs;
  if (ember__cfi_build(elf, NULL, &cs, &r->table) == 0) {
    r->bytes = ember__cfi_bytes(r->table);
    t->st.builds++;
  } else {
    r->table = NULL;
    r->bytes = sizeof *r;
    t->st.no_cfi++;
  }
  t->st.build_ns += mono_ns() - t0;
  t->st.bytes += r->bytes;
  t->st.tables++;
  return r;
}

static int entry_add(ember__unwtab_t *t, entry_t *e) {
  entry_t **ne = ember__grow_array(t->ents, &t->capents, t->nents + 1, sizeof *ne);
  if (ne == NULL) return -ENOMEM;
  t->ents = ne;
  ukey_t k = {t, e->dev, e->ino};
  t->ents[t->nents] = e;
  if (ember__htab_insert(&t->index, key_hash(e->dev, e->ino), (uint32_t)t->nents, ent_rehash, &k) !=
      0)
    return -ENOMEM;
  t->nents++;
  return 0;
}

/* The entry of a file mapping, built on first use. NULL: none now (a
 * transient failure, out of memory). */
static entry_t *entry_for(ember__unwtab_t *t, const ember__procmaps_t *maps,
                          const ember__mapping_t *mp) {
  entry_t *e = entry_find(t, mp->dev, mp->ino);
  if (e != NULL) return e;
  struct stat st;
  int fd = ember__procmaps_open(maps, mp, EMBER__ELF_MAX_SIZE, &st);
  if (ember__procmaps_transient(fd)) return NULL;
  e = ember_calloc(1, sizeof *e);
  if (e == NULL) {
    if (fd >= 0) close(fd);
    return NULL;
  }
  e->dev = mp->dev;
  e->ino = mp->ino;
  ember__elf_file_t f = EMBER__ELF_FILE_NONE;
  char id[EMBER__BUILD_ID_HEX] = "";
  bool have_id = false;
  if (fd >= 0 && ember__elf_open_fd(fd, &st, ember__procmaps_uid(maps) > 0, &f) == 0) {
    have_id = ember__elf_build_id(f.elf, id, sizeof id);
    read_segments(f.elf, e);
    bool trusted = st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
    e->ref = ref_for(t, f.elf, have_id, id, trusted);
  } else {
    /* Unreadable or not ELF: remembered without a table. */
    table_ref_t *r = ember_calloc(1, sizeof *r);
    if (r != NULL) {
      r->refs = 1;
      r->bytes = sizeof *r;
      t->st.bytes += r->bytes;
      t->st.tables++;
      t->st.no_cfi++;
    }
    e->ref = r;
  }
  ember__elf_close(&f);
  if (e->ref == NULL || entry_add(t, e) != 0) {
    ref_put(t, e->ref, true);
    ember_free(e);
    return NULL;
  }
  evict(t);
  return entry_find(t, mp->dev, mp->ino);
}

/* The agent's own vdso: the same image as every process's [vdso]. */
static entry_t *vdso_entry(ember__unwtab_t *t) {
  if (t->vdso_tried) return t->vdso;
  t->vdso_tried = true;
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return NULL;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  /* The image's size: the end of its section headers (the kernel maps it
   * whole, headers included), bounded by what a vdso can be. */
  size_t size = (size_t)eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
  if (eh->e_shoff == 0 || size > (1u << 20)) return NULL;
  Elf *elf = elf_memory((char *)base, size);
  if (elf == NULL) return NULL;
  entry_t *e = ember_calloc(1, sizeof *e);
  if (e != NULL) {
    read_segments(elf, e);
    e->ref = ref_for(t, elf, false, "", false);
    if (e->ref == NULL) {
      ember_free(e);
      e = NULL;
    }
  }
  elf_end(elf);
  t->vdso = e;
  return e;
}

/* --- unwinding --- */

typedef struct walk {
  ember__unwtab_t *t;
  const ember__procmaps_t *maps;
} walk_t;

static int lookup(void *ctx, uint64_t pc, const ember__cfi_table_t **table, uint64_t *bias) {
  walk_t *w = ctx;
  int miss = w->t->o.no_fp ? -1 : 1;
  const ember__mapping_t *mp = ember__procmaps_find(w->maps, pc);
  if (mp == NULL) return miss;
  entry_t *e = NULL;
  if (mp->kind == EMBER__MAP_FILE) {
    e = entry_for(w->t, w->maps, mp);
  } else if (mp->kind == EMBER__MAP_VDSO) {
    e = vdso_entry(w->t);
  }
  if (e == NULL || e->ref == NULL || e->ref->table == NULL) return miss;
  e->last_used = ++w->t->clock;
  /* pc -> file offset -> the file's own vaddr, through its PT_LOADs. */
  uint64_t off = pc - mp->start + mp->offset;
  for (unsigned i = 0; i < e->nsegs; i++) {
    if (off >= e->segs[i].off && off - e->segs[i].off < e->segs[i].filesz) {
      *table = e->ref->table;
      *bias = pc - (off - e->segs[i].off + e->segs[i].vaddr);
      return 0;
    }
  }
  return miss;
}

size_t ember__unwtab_unwind(ember__unwtab_t *t, const ember__procmaps_t *maps,
                            const ember__unwind_regs_t *regs, const uint8_t *stack, size_t len,
                            uint64_t *ips, size_t cap) {
  grave_flush(t);
  walk_t w = {t, maps};
  ember__unwind_out_t out = {0};
  ember__unwind_result_t r = ember__unwind(regs, stack, len, lookup, &w, ips, cap, &out);
  t->st.results[r]++;
  t->st.fp_steps += out.fp_steps;
  t->st.sig_steps += out.sig_steps;
  return out.n;
}
