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
#include "ember/ember.h"
#include "safefile.h"
#include "strarena.h"

#define DEBUG_DIR "/usr/lib/debug/.build-id"
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

int ember__elf_open_fd(int fd, const struct stat *st, bool root_safe,
                       ember__elf_file_t *out) {
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

/* The detached debug file Debian and Fedora install for a build-id
 * (libc6-dbg, *-dbgsym), if present and really the same build. */
static int open_debug_file(const char *build_id, ember__elf_file_t *out) {
  char path[PATH_MAX];
  if (build_id == NULL || strlen(build_id) < 3) return -ENOENT;
  int pn = snprintf(path, sizeof path, "%s/%.2s/%s.debug", DEBUG_DIR, build_id, build_id + 2);
  if (pn < 0 || (size_t)pn >= sizeof path) return -ENAMETOOLONG;
  struct stat st;
  int fd = ember__safe_open_trusted(path, EMBER__ELF_MAX_SIZE, &st);
  if (fd < 0) return fd;
  /* The host's own debug directory, no process's: root's files there. */
  int rc = ember__elf_open_fd(fd, &st, true, out);
  if (rc != 0) return rc;
  char hex[EMBER__BUILD_ID_HEX];
  if (!ember__elf_build_id(out->elf, hex, sizeof hex) || strcmp(hex, build_id) != 0) {
    ember__elf_close(out);
    return -ENOENT;
  }
  return 0;
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

/* Build mod->syms from the STT_FUNC symbols of `elf`'s section of `type`. */
static int load_symbols(ember__elfmod_t *mod, Elf *elf, Elf_Scn *symscn) {
  int rc = 0;
  raw_sym_t *raw = NULL;
  size_t nraw = 0;
  GElf_Shdr sh;
  Elf_Data *data = NULL;
  if (gelf_getshdr(symscn, &sh) == NULL) return 0;
  /* elf_getdata copies a read (not mapped) file's section into memory. */
  if (sh.sh_size > MAX_SYMTAB_SIZE) return -EFBIG;
  data = elf_getdata(symscn, NULL);
  if (data == NULL) return 0;
  /* The count from what libelf really holds, not from sh_entsize, which
   * the file may set to 1 (a raw array 40 times the section). */
  size_t symsz = gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT);
  if (symsz == 0) return 0;
  size_t count = data->d_size / symsz;
  if (count == 0) return 0;
  raw = ember_malloc(count * sizeof *raw);
  if (raw == NULL) return -ENOMEM;
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
    raw[nraw++] = (raw_sym_t){sym.st_value, sym.st_size, secend, name, sym_rank(&sym, name)};
  }
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
  if (nraw == 0) goto cleanup;
  mod->syms = ember_malloc(nraw * sizeof *mod->syms);
  if (mod->syms == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
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
    const char *name = ember__strarena_dup(&mod->arena, raw[i].name, strlen(raw[i].name));
    if (name == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    mod->syms[mod->nsyms++] = (ember__elfsym_t){raw[i].start, end, name};
  }
cleanup:
  ember_free(raw);
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

int ember__elfmod_build(ember__elf_file_t *f, const char *build_id, bool dwarf, bool dwarf_detached,
                        ember__elfmod_t **out) {
  int rc = 0;
  ember__elf_file_t dbg = {-1, NULL, false, 0};
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
  if (symtab == NULL || (dwarf && !main_debug)) {
    if (open_debug_file(build_id, &dbg) != 0) dbg = EMBER__ELF_FILE_NONE;
  }
  if (symtab != NULL) {
    rc = load_symbols(mod, f->elf, symtab);
  } else if (dbg.elf != NULL && (symtab = find_section(dbg.elf, SHT_SYMTAB, NULL)) != NULL) {
    rc = load_symbols(mod, dbg.elf, symtab);
  } else if ((symtab = find_section(f->elf, SHT_DYNSYM, NULL)) != NULL) {
    rc = load_symbols(mod, f->elf, symtab);
  }
  if (rc != 0) goto cleanup;
  ember__elf_file_t *keep = NULL;
  if (main_debug) {
    keep = f;
  } else if (dwarf && dwarf_detached && dbg.elf != NULL && has_debug_info(dbg.elf)) {
    keep = &dbg;
  }
  if (keep != NULL) {
    rc = ember__dwarfline_open(keep->fd, &keep->elf, keep->mapped, keep->size, &mod->dwarf);
    if (rc != 0) goto cleanup;
  }
  *out = mod;
  mod = NULL;
cleanup:
  ember__elf_close(&dbg);
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
