/* ELF files and their symbol tables (elfsym.h). */
#include "elfsym.h"

#include <elfutils/libdwelf.h>
#include <errno.h>
#include <gelf.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "debuginfo.h"
#include "demangle.h"
#include "ember/ember.h"
#include "strarena.h"

/* Room for one demangled name; a longer one keeps its mangled form. */
#define DEMANGLED_MAX (16u * 1024u)
/* A symbol table larger than this is not loaded (the module is kept as a
 * broken one): libc's is ~100 KB, the largest C++ binaries' tens of MB. */
#define MAX_SYMTAB_SIZE (64ull << 20)

typedef struct load {
  uint64_t offset, vaddr, filesz;
} load_t;

struct ember__elfmod {
  const char *build_id; /* hex, in arena; NULL when the file has none */
  ember__elfsym_t *syms;
  size_t nsyms;
  load_t *loads;
  size_t nloads;
  ember__dwarfline_t *dwarf; /* NULL unless DWARF was asked for and kept */
  ember__strarena_t arena;   /* symbol names, build-id */
};

/* Leading underscores, for choosing among aliases of one address. */
static unsigned underscores(const char *s) {
  unsigned n = 0;
  while (s[n] == '_') n++;
  return n;
}

void ember__elf_close(ember__elf_file_t *f) {
  if (f->elf != NULL) elf_end(f->elf);
  if (f->fd >= 0) close(f->fd);
  f->elf = NULL;
  f->fd = -1;
}

int ember__elf_open_fd(int fd, const struct stat *st, bool root_safe, ember__elf_file_t *out) {
  bool map = root_safe && st->st_uid == 0 && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
  Elf *elf = elf_begin(fd, map ? ELF_C_READ_MMAP : ELF_C_READ, NULL);
  if (elf == NULL || elf_kind(elf) != ELF_K_ELF) {
    if (elf != NULL) elf_end(elf);
    close(fd);
    return EMBER_ECORRUPT;
  }
  out->fd = fd;
  out->elf = elf;
  out->mapped = map;
  out->size = (uint64_t)st->st_size;
  return 0;
}

static Elf_Scn *find_section(Elf *elf, Elf64_Word type, const char *name) {
  size_t shstrndx;
  if (name != NULL && elf_getshdrstrndx(elf, &shstrndx) != 0) return NULL;
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn != NULL; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != type) continue;
    if (name == NULL) return scn;
    const char *n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (n != NULL && strcmp(n, name) == 0) return scn;
  }
  return NULL;
}

static bool has_debug_info(Elf *elf) {
  return find_section(elf, SHT_PROGBITS, ".debug_info") != NULL ||
         find_section(elf, SHT_PROGBITS, ".zdebug_info") != NULL;
}

bool ember__elf_build_id(Elf *elf, char *hex, size_t size) {
  const void *id = NULL;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
  if (n <= 0 || id == NULL) return false;
  static const char digits[] = "0123456789abcdef";
  const unsigned char *b = id;
  size_t k = 0;
  for (ssize_t i = 0; i < n && k + 2 < size; i++) {
    hex[k++] = digits[b[i] >> 4];
    hex[k++] = digits[b[i] & 15];
  }
  hex[k] = '\0';
  return k > 0;
}

typedef struct raw_sym {
  uint64_t start, size, secend;
  const char *name; /* borrowed from the ELF while loading */
  unsigned rank;    /* lower is better among aliases of one address */
} raw_sym_t;

static int raw_sym_cmp(const void *a, const void *b) {
  const raw_sym_t *x = a, *y = b;
  if (x->start != y->start) return x->start < y->start ? -1 : 1;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Rank aliases of one address the way perf does: a global or weak name over
 * a local one, then fewer leading underscores ("getpid" over "__getpid"),
 * then global over weak. */
static unsigned sym_rank(const GElf_Sym *sym, const char *name) {
  unsigned bind = GELF_ST_BIND(sym->st_info);
  unsigned local = bind == STB_LOCAL ? 1u : 0u;
  unsigned u = underscores(name);
  if (u > 15) u = 15;
  return local << 8 | u << 1 | (bind == STB_WEAK ? 1u : 0u);
}

/* The function symbols of one or more symbol tables, while a module is
 * built; names are borrowed from the ELF handles, which outlive it. */
typedef struct raw_syms {
  raw_sym_t *v;
  size_t n, cap;
} raw_syms_t;

/* Add the STT_FUNC symbols of `elf`'s symbol table `symscn` to r. */
static int collect_symbols(raw_syms_t *r, Elf *elf, Elf_Scn *symscn) {
  GElf_Shdr sh;
  if (gelf_getshdr(symscn, &sh) == NULL) return 0;
  /* elf_getdata copies a read (not mapped) file's section into memory. */
  if (sh.sh_size > MAX_SYMTAB_SIZE) return -EFBIG;
  Elf_Data *data = elf_getdata(symscn, NULL);
  if (data == NULL) return 0;
  /* The count from what libelf really holds, not from sh_entsize, which
   * the file may set to 1 (a raw array 40 times the section). */
  size_t symsz = gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT);
  if (symsz == 0) return 0;
  size_t count = data->d_size / symsz;
  if (count == 0) return 0;
  raw_sym_t *nv = ember__grow_array(r->v, &r->cap, r->n + count, sizeof *r->v);
  if (nv == NULL) return -ENOMEM;
  r->v = nv;
  size_t nsec = 0;
  if (elf_getshdrnum(elf, &nsec) != 0) nsec = 0;
  for (size_t i = 0; i < count; i++) {
    GElf_Sym sym;
    if (gelf_getsym(data, (int)i, &sym) == NULL) continue;
    unsigned type = GELF_ST_TYPE(sym.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC) continue;
    if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE || sym.st_value == 0) continue;
    const char *name = elf_strptr(elf, sh.sh_link, sym.st_name);
    if (name == NULL || name[0] == '\0') continue;
    uint64_t secend = 0;
    GElf_Shdr ssh;
    Elf_Scn *sec = sym.st_shndx < nsec ? elf_getscn(elf, sym.st_shndx) : NULL;
    if (sec != NULL && gelf_getshdr(sec, &ssh) != NULL) secend = ssh.sh_addr + ssh.sh_size;
    r->v[r->n++] = (raw_sym_t){sym.st_value, sym.st_size, secend, name, sym_rank(&sym, name)};
  }
  return 0;
}

/* Copy a symbol's name into the module, demangled when it is a C++ or
 * Rust name (once here, so lookups cost nothing more). `*dm` is a scratch
 * buffer made on the first mangled name. NULL when out of memory. */
static const char *keep_name(ember__elfmod_t *mod, const char *name, bool demangle, char **dm) {
  if (demangle && ember__demangle_candidate(name)) {
    if (*dm == NULL) *dm = ember_malloc(DEMANGLED_MAX);
    if (*dm == NULL) return NULL;
    size_t n = ember__demangle(name, *dm, DEMANGLED_MAX);
    if (n > 0) return ember__strarena_dup(&mod->arena, *dm, n);
  }
  return ember__strarena_dup(&mod->arena, name, strlen(name));
}

/* Build mod->syms from the collected symbols: sorted, one per address. */
static int finish_symbols(ember__elfmod_t *mod, raw_syms_t *r, bool demangle) {
  int rc = 0;
  char *dm = NULL;
  raw_sym_t *raw = r->v;
  size_t nraw = r->n;
  ember__sort_array(raw, nraw, sizeof *raw, raw_sym_cmp);
  /* Keep the best name per address; the size is the largest of its
   * aliases (a size-0 alias must not hide a sized one). */
  size_t k = 0;
  for (size_t i = 0; i < nraw; i++) {
    if (k > 0 && raw[k - 1].start == raw[i].start) {
      if (raw[i].size > raw[k - 1].size) raw[k - 1].size = raw[i].size;
      continue;
    }
    raw[k++] = raw[i];
  }
  nraw = k;
  if (nraw == 0) return 0;
  mod->syms = ember_malloc(nraw * sizeof *mod->syms);
  if (mod->syms == NULL) return -ENOMEM;
  for (size_t i = 0; i < nraw; i++) {
    uint64_t end;
    if (raw[i].size > 0) {
      end = raw[i].start + raw[i].size;
    } else {
      /* Size-0 symbols (hand-written assembly, the end of .text) reach the
       * next symbol, but not past their section. */
      end = i + 1 < nraw ? raw[i + 1].start : raw[i].secend;
      if (raw[i].secend > raw[i].start && end > raw[i].secend) end = raw[i].secend;
      if (end <= raw[i].start) end = raw[i].start + 1;
    }
    const char *name = keep_name(mod, raw[i].name, demangle, &dm);
    if (name == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    mod->syms[mod->nsyms++] = (ember__elfsym_t){raw[i].start, end, name};
  }
cleanup:
  ember_free(dm);
  return rc;
}

static int load_segments(ember__elfmod_t *mod, Elf *elf) {
  size_t n = 0;
  if (elf_getphdrnum(elf, &n) != 0 || n == 0) return 0;
  mod->loads = ember_malloc(n * sizeof *mod->loads);
  if (mod->loads == NULL) return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    GElf_Phdr ph;
    if (gelf_getphdr(elf, (int)i, &ph) == NULL || ph.p_type != PT_LOAD) continue;
    mod->loads[mod->nloads++] = (load_t){ph.p_offset, ph.p_vaddr, ph.p_filesz};
  }
  return 0;
}

/* Drop what only lookups need; keep what frames point into (the arena
 * and the DWARF handle) until the next forget. */
void ember__elfmod_strip(ember__elfmod_t *mod) {
  if (mod == NULL) return;
  ember_free(mod->syms);
  ember_free(mod->loads);
  ember__dwarfline_strip(mod->dwarf);
  mod->syms = NULL;
  mod->loads = NULL;
  mod->nsyms = mod->nloads = 0;
}

void ember__elfmod_free(ember__elfmod_t *mod) {
  if (mod == NULL) return;
  ember__elfmod_strip(mod);
  ember__dwarfline_free(mod->dwarf);
  ember__strarena_free(&mod->arena);
  ember_free(mod);
}

/* The directory part of an absolute path ("/usr/bin/x" -> "/usr/bin"),
 * into buf; false when there is none. */
static bool dir_of(const char *path, char *buf, size_t size) {
  if (path == NULL || path[0] != '/') return false;
  const char *slash = strrchr(path, '/');
  size_t n = slash == path ? 1 : (size_t)(slash - path);
  if (n >= size) return false;
  memcpy(buf, path, n);
  buf[n] = '\0';
  return true;
}

int ember__elfmod_build(ember__elf_file_t *f, const char *build_id, const ember__elfmod_opts_t *o,
                        ember__elfmod_t **out) {
  int rc = 0;
  ember__debug_file_t dbg = EMBER__DEBUG_FILE_INIT;
  ember__minidebug_t mini = {0};
  raw_syms_t raw = {0};
  ember__elfmod_opts_t opts = {0};
  if (o != NULL) opts = *o;
  bool dwarf = opts.dwarf;
  ember__elfmod_t *mod = ember_calloc(1, sizeof *mod);
  if (mod == NULL) return -ENOMEM;
  if (build_id != NULL) {
    mod->build_id = ember__strarena_dup(&mod->arena, build_id, strlen(build_id));
    if (mod->build_id == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
  }
  rc = load_segments(mod, f->elf);
  if (rc != 0) goto cleanup;
  Elf_Scn *symtab = find_section(f->elf, SHT_SYMTAB, NULL);
  bool main_debug = dwarf && has_debug_info(f->elf);
  if (opts.debuginfo != NULL && (symtab == NULL || (dwarf && !main_debug))) {
    /* The separate debug file, by build-id, then by .gnu_debuglink. */
    char dir[PATH_MAX];
    ember__debug_target_t t = {.elf = f->elf,
                               .build_id = build_id,
                               .root_fd = opts.root_fd,
                               .dir = dir_of(opts.path, dir, sizeof dir) ? dir : NULL,
                               .root_safe = opts.root_safe};
    rc = ember__debuginfo_find(opts.debuginfo, &t, &dbg);
    if (rc == -ENOMEM) goto cleanup;
    rc = 0;
  }
  Elf_Scn *dsym = NULL;
  if (symtab != NULL) {
    rc = collect_symbols(&raw, f->elf, symtab);
  } else if (dbg.elf != NULL && (dsym = find_section(dbg.elf, SHT_SYMTAB, NULL)) != NULL) {
    rc = collect_symbols(&raw, dbg.elf, dsym);
  } else {
    /* A stripped file: its dynamic symbols, and the local functions its
     * MiniDebugInfo adds (Fedora). */
    Elf_Scn *dyn = find_section(f->elf, SHT_DYNSYM, NULL);
    if (dyn != NULL) rc = collect_symbols(&raw, f->elf, dyn);
    if (rc == 0 && opts.debuginfo != NULL) {
      rc = ember__debuginfo_minidebug(opts.debuginfo, f->elf, &mini);
      if (rc == 0) {
        Elf_Scn *msym = find_section(mini.elf, SHT_SYMTAB, NULL);
        rc = msym != NULL ? collect_symbols(&raw, mini.elf, msym) : 0;
      } else if (rc != -ENOMEM) {
        rc = 0; /* none, or refused and counted: .dynsym alone */
      }
    }
  }
  if (rc == 0) rc = finish_symbols(mod, &raw, !opts.no_demangle);
  if (rc != 0) goto cleanup;
  if (main_debug) {
    rc = ember__dwarfline_open(f->fd, &f->elf, f->mapped, opts.dwarf_max_bytes, !opts.no_demangle,
                               &mod->dwarf);
  } else if (dwarf && opts.dwarf_detached && dbg.elf != NULL && has_debug_info(dbg.elf)) {
    rc = ember__dwarfline_open(dbg.fd, &dbg.elf, dbg.mapped, opts.dwarf_max_bytes,
                               !opts.no_demangle, &mod->dwarf);
  }
  if (rc != 0) goto cleanup;
  *out = mod;
  mod = NULL;
cleanup:
  ember_free(raw.v);
  ember__minidebug_free(&mini);
  ember__debug_file_close(&dbg);
  ember__elfmod_free(mod);
  return rc;
}

bool ember__elfmod_translate(const ember__elfmod_t *mod, uint64_t file_off, uint64_t *vaddr) {
  for (size_t i = 0; i < mod->nloads; i++) {
    const load_t *l = &mod->loads[i];
    if (file_off >= l->offset && file_off - l->offset < l->filesz) {
      *vaddr = file_off - l->offset + l->vaddr;
      return true;
    }
  }
  return false;
}

const ember__elfsym_t *ember__elfmod_sym(const ember__elfmod_t *mod, uint64_t a) {
  size_t lo = 0, hi = mod->nsyms;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (mod->syms[mid].start <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const ember__elfsym_t *s = &mod->syms[lo - 1];
  return a < s->end ? s : NULL;
}

const char *ember__elfmod_build_id(const ember__elfmod_t *m) { return m->build_id; }

ember__dwarfline_t *ember__elfmod_dwarf(const ember__elfmod_t *m) { return m->dwarf; }

uint64_t ember__elfmod_bytes(const ember__elfmod_t *m) {
  if (m == NULL) return 0;
  return sizeof *m + m->nsyms * sizeof *m->syms + m->nloads * sizeof *m->loads + m->arena.bytes +
         ember__dwarfline_bytes(m->dwarf);
}

uint64_t ember__elfmod_debug_bytes(const ember__elfmod_t *m) {
  return m == NULL ? 0 : ember__dwarfline_bytes(m->dwarf);
}
