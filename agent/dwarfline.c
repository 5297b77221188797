/* DWARF lines and inline frames (dwarfline.h). */
#include "dwarfline.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <gelf.h>

#include "array.h"
#include "demangle.h"
#include "ember/ember.h"
#include "strarena.h"

/* A file the profiled process may rewrite is read with pread instead of a
 * mapping (a mapping of a file truncated meanwhile raises SIGBUS); its
 * debug sections, which libdw then holds in memory, are kept only up to
 * this per file (the caller may ask for less: the symbolizer's budget)... */
#define MAX_READ_DWARF_SIZE (256ull << 20)
/* ... and all such copies together, process-wide, up to this (512
 * modules of 256 MB each would be 128 GB): past it, later modules get
 * function names but no DWARF lines until earlier ones are evicted. */
#define MAX_READ_DWARF_TOTAL (256ull << 20)

/* What libdw allocates for us, estimated for the memory accounting
 * (ember__dwarfline_bytes): per compilation unit it has read the header
 * and abbreviations of, and per row and per file of a line table it has
 * decoded (dwarf_getsrclines: one Dwarf_Line of ~40 bytes per row, a
 * sorted copy, the file table). Measured with mallinfo2 on libdw 0.188
 * over this project's RelWithDebInfo and ASan binaries
 * (docs/internals/symbolize.md, "Memory"). */
#define LIBDW_HANDLE_BYTES (40u * 1024u) /* libelf's and libdw's handles */
#define LIBDW_CU_BYTES     512u
#define LIBDW_LINE_BYTES   56u
#define LIBDW_FILE_BYTES   64u

static atomic_uint_fast64_t dwarf_read_bytes;

/* Room for one demangled name; a longer one keeps DWARF's short name. */
#define DEMANGLED_MAX (16u * 1024u)

/* A function or inlined call with code at [lo, hi): one per address range
 * of its DIE. */
typedef struct dnode {
  uint64_t lo, hi;
  const char *name;      /* borrowed from the Dwarf handle or the names arena */
  const char *call_file; /* inlined: where the call is in the caller */
  uint32_t call_line;
  uint32_t parent; /* index + 1 of the node that holds this one; 0 = none */
  uint32_t depth;
  uint32_t id; /* position before sorting, while building */
  bool inlined;
} dnode_t;

/* One compilation unit; its nodes are indexed on the first lookup in it.
 * dwarf_getscopes would walk the CU's whole DIE tree on every lookup (28 us
 * for a 2 KB CU, measured), the index walks it once. */
typedef struct cu_info {
  Dwarf_Die die;
  dnode_t *nodes; /* sorted by lo; a node before the nodes it holds */
  size_t n;
  bool indexed;
  bool lines_counted; /* its line table's estimate is in libdw_bytes */
} cu_info_t;

typedef struct cu_range {
  uint64_t lo, hi;
  size_t cu; /* index in module.cu_list */
} cu_range_t;

/* dw_elf is kept (mapped, or read with its fd let go) while the module
 * lives; the Dwarf handle of a mapped file and the CU table are made on the
 * first lookup that needs them. */
struct ember__dwarfline {
  Elf *dw_elf;
  uint64_t dw_bytes;    /* of dwarf_read_bytes: debug sections read into memory */
  uint64_t heap_bytes;  /* sections libdw decompressed, of a mapped file */
  uint64_t libdw_bytes; /* estimated: CUs and line tables libdw holds */
  uint64_t node_bytes;  /* our CU indexes */
  Dwarf *dw;
  bool dw_tried;
  cu_range_t *cus; /* sorted by lo */
  size_t ncus, cus_cap;
  cu_info_t *cu_list;
  size_t ncu_list, cu_list_cap;
  bool demangle;
  /* Demangled linkage names of C++/Rust functions, kept (like the Dwarf
   * handle) while frames may point into them: freed with the handle. */
  ember__strarena_t names;
};

/* The debug sections' sizes in memory: `all` of them, and those libdw
 * must decompress (held in the heap even when the file is mapped); a
 * compressed section counts for its inflated size only. .zdebug
 * (GNU's old format) does not say its size in the header: 3x, a guess. */
static void debug_bytes(Elf *elf, uint64_t *all, uint64_t *decompressed) {
  *all = *decompressed = 0;
  size_t shstrndx;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return;
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn != NULL; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type == SHT_NOBITS) continue;
    const char *n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (n == NULL) continue;
    uint64_t inflated = 0;
    if (strncmp(n, ".zdebug", 7) == 0) {
      inflated = sh.sh_size > UINT64_MAX / 3 ? UINT64_MAX / 3 : 3 * sh.sh_size;
    } else if (strncmp(n, ".debug", 6) != 0) {
      continue;
    } else if ((sh.sh_flags & SHF_COMPRESSED) != 0) {
      GElf_Chdr ch;
      if (gelf_getchdr(scn, &ch) != NULL) inflated = ch.ch_size;
    }
    /* libelf lets go of the compressed bytes once it has inflated them. */
    uint64_t add = inflated != 0 ? inflated : sh.sh_size;
    /* Saturating: section sizes come from the file. */
    *all = *all + add < *all ? UINT64_MAX : *all + add;
    *decompressed =
        *decompressed + inflated < *decompressed ? UINT64_MAX : *decompressed + inflated;
  }
}

int ember__dwarfline_open(int fd, Elf **elf, bool mapped, uint64_t max_bytes, bool demangle,
                          ember__dwarfline_t **out) {
  *out = NULL;
  if (max_bytes == 0 || max_bytes > MAX_READ_DWARF_SIZE) max_bytes = MAX_READ_DWARF_SIZE;
  uint64_t want = 0, inflated = 0;
  debug_bytes(*elf, &want, &inflated);
  /* Over the bound, the module keeps its symbols and goes without lines. */
  if (mapped ? inflated > max_bytes : want > max_bytes) return 0;
  ember__dwarfline_t *d = ember_calloc(1, sizeof *d);
  if (d == NULL) return -ENOMEM;
  d->demangle = demangle;
  if (!mapped) {
    /* A file read, not mapped: a fresh handle of our own reads only what
     * libdw asks for (the debug sections, as dwarf_begin_elf starts) with
     * pread; then libelf lets go of the descriptor (FDDONE: holding one per
     * module could exhaust the agent's fd limit), the sections it read
     * staying in the handle. The caller's handle is left alone: libelf
     * (0.188) loses section data already read into a handle on FDREAD.
     * Reserved from the process-wide budget first. */
    uint64_t cur = atomic_load(&dwarf_read_bytes);
    bool reserved = false;
    while (cur <= MAX_READ_DWARF_TOTAL && want <= MAX_READ_DWARF_TOTAL - cur) {
      if (atomic_compare_exchange_weak(&dwarf_read_bytes, &cur, cur + want)) {
        reserved = true;
        break;
      }
    }
    Elf *own = reserved ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
    Dwarf *dw = own != NULL ? dwarf_begin_elf(own, DWARF_C_READ, NULL) : NULL;
    if (dw != NULL && elf_cntl(own, ELF_C_FDDONE) == 0) {
      d->dw_elf = own;
      d->dw = dw;
      d->dw_bytes = want;
    } else {
      if (dw != NULL) dwarf_end(dw);
      if (own != NULL) elf_end(own);
      if (reserved) atomic_fetch_sub(&dwarf_read_bytes, want);
    }
  } else {
    /* The file is mapped (FDREAD reads it only if it is not) and libelf
     * then lets go of the descriptor, as FDDONE would: holding one per
     * module could exhaust the agent's fd limit. */
    if (elf_cntl(*elf, ELF_C_FDREAD) == 0) {
      d->dw_elf = *elf;
      d->heap_bytes = inflated;
      *elf = NULL;
    }
  }
  if (d->dw_elf == NULL) {
    ember_free(d);
    return 0;
  }
  *out = d;
  return 0;
}

uint64_t ember__dwarfline_bytes(const ember__dwarfline_t *d) {
  if (d == NULL) return 0;
  return sizeof *d + LIBDW_HANDLE_BYTES + d->dw_bytes + d->heap_bytes + d->libdw_bytes +
         d->node_bytes + d->cus_cap * sizeof *d->cus + d->cu_list_cap * sizeof *d->cu_list +
         d->names.bytes;
}

void ember__dwarfline_strip(ember__dwarfline_t *d) {
  if (d == NULL) return;
  ember_free(d->cus);
  for (size_t i = 0; i < d->ncu_list; i++) ember_free(d->cu_list[i].nodes);
  ember_free(d->cu_list);
  d->cus = NULL;
  d->cu_list = NULL;
  d->ncus = d->cus_cap = d->ncu_list = d->cu_list_cap = 0;
  d->node_bytes = 0;
}

void ember__dwarfline_free(ember__dwarfline_t *d) {
  if (d == NULL) return;
  ember__dwarfline_strip(d);
  if (d->dw != NULL) dwarf_end(d->dw);
  if (d->dw_elf != NULL) elf_end(d->dw_elf);
  if (d->dw_bytes != 0) atomic_fetch_sub(&dwarf_read_bytes, d->dw_bytes);
  ember__strarena_free(&d->names);
  ember_free(d);
}

static int cu_cmp(const void *a, const void *b) {
  const cu_range_t *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Open DWARF on first use and index the CUs' address ranges. Our own table
 * rather than dwarf_addrdie: it does not depend on .debug_aranges, which
 * some toolchains leave out. Returns 0 (even when there is no usable
 * DWARF) or -ENOMEM. */
static int dwarf_cus(ember__dwarfline_t *d) {
  if (d->dw_tried || d->dw_elf == NULL) return 0;
  if (d->dw == NULL) d->dw = dwarf_begin_elf(d->dw_elf, DWARF_C_READ, NULL);
  if (d->dw == NULL) {
    d->dw_tried = true;
    return 0;
  }
  Dwarf_Off off = 0, next = 0;
  size_t hsize = 0;
  uint64_t ncu = 0;
  while (dwarf_nextcu(d->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
    ncu++;
    Dwarf_Die cu;
    if (dwarf_offdie(d->dw, off + hsize, &cu) != NULL) {
      bool listed = false;
      Dwarf_Addr base, lo, hi;
      for (ptrdiff_t it = 0; (it = dwarf_ranges(&cu, it, &base, &lo, &hi)) > 0;) {
        if (hi <= lo) continue;
        if (!listed) {
          cu_info_t *nl =
              ember__grow_array(d->cu_list, &d->cu_list_cap, d->ncu_list + 1, sizeof *nl);
          if (nl == NULL) goto nomem;
          d->cu_list = nl;
          d->cu_list[d->ncu_list++] = (cu_info_t){.die = cu};
          listed = true;
        }
        cu_range_t *nv = ember__grow_array(d->cus, &d->cus_cap, d->ncus + 1, sizeof *d->cus);
        if (nv == NULL) goto nomem;
        d->cus = nv;
        d->cus[d->ncus++] = (cu_range_t){lo, hi, d->ncu_list - 1};
      }
    }
    off = next;
  }
  ember__sort_array(d->cus, d->ncus, sizeof *d->cus, cu_cmp);
  d->libdw_bytes += ncu * LIBDW_CU_BYTES;
  d->dw_tried = true;
  return 0;
nomem:
  /* Leave no half-built table: the next lookup starts over. */
  ember_free(d->cus);
  ember_free(d->cu_list);
  d->cus = NULL;
  d->cu_list = NULL;
  d->ncus = d->cus_cap = d->ncu_list = d->cu_list_cap = 0;
  dwarf_end(d->dw);
  d->dw = NULL;
  return -ENOMEM;
}

static const cu_range_t *find_cu(const ember__dwarfline_t *d, uint64_t a) {
  size_t lo = 0, hi = d->ncus;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (d->cus[mid].lo <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const cu_range_t *c = &d->cus[lo - 1];
  return a < c->hi ? c : NULL;
}

#define DWARF_MAX_DEPTH 64

typedef struct ibuild {
  dnode_t *v;
  size_t n, cap;
  Dwarf_Die *cudie;
  Dwarf_Files *files;
  size_t nfiles;
  int have_files;           /* 0 not tried, 1 yes, -1 none */
  ember__strarena_t *names; /* NULL: names are not demangled */
  char *dm;                 /* scratch for one demangled name, made on first use */
} ibuild_t;

/* A function's name for its frames: the demangled linkage name when it has
 * one (C++ and Rust: "ns::Klass::step()", where DW_AT_name is "step"),
 * else DW_AT_name. The linkage name is often on the declaration or the
 * abstract instance, which dwarf_attr_integrate follows. Returns 0 with
 * *out set (maybe NULL), or -ENOMEM. */
static int node_name(ibuild_t *b, Dwarf_Die *die, const char **out) {
  *out = dwarf_diename(die);
  if (b->names == NULL) return 0;
  Dwarf_Attribute at;
  const char *ln = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &at));
  if (ln == NULL) ln = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &at));
  if (ln == NULL || !ember__demangle_candidate(ln)) return 0;
  if (b->dm == NULL) b->dm = ember_malloc(DEMANGLED_MAX);
  if (b->dm == NULL) return -ENOMEM;
  size_t n = ember__demangle(ln, b->dm, DEMANGLED_MAX);
  if (n == 0) return 0;
  const char *copy = ember__strarena_dup(b->names, b->dm, n);
  if (copy == NULL) return -ENOMEM;
  *out = copy;
  return 0;
}

static const char *call_file(ibuild_t *b, Dwarf_Die *die) {
  Dwarf_Attribute at;
  Dwarf_Word w;
  if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &at), &w) != 0) return NULL;
  if (b->have_files == 0)
    b->have_files = dwarf_getsrcfiles(b->cudie, &b->files, &b->nfiles) == 0 ? 1 : -1;
  return b->have_files > 0 && w < b->nfiles ? dwarf_filesrc(b->files, w, NULL, NULL) : NULL;
}

/* Add nodes for the functions and inlined calls under `parent`; their
 * enclosing node is one of b->v[pfirst .. pfirst + pcount). Lexical blocks
 * and namespaces are looked through. */
static int index_children(ibuild_t *b, Dwarf_Die *parent, size_t pfirst, size_t pcount,
                          uint32_t depth) {
  Dwarf_Die child, next;
  if (depth > DWARF_MAX_DEPTH || dwarf_child(parent, &child) != 0) return 0;
  for (;;) {
    int rc = 0;
    int tag = dwarf_tag(&child);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_entry_point) {
      size_t first = b->n;
      bool inl = tag == DW_TAG_inlined_subroutine;
      const char *name = NULL;
      rc = node_name(b, &child, &name);
      if (rc != 0) return rc;
      const char *cfile = NULL;
      uint32_t cline = 0;
      if (inl) {
        Dwarf_Attribute at;
        Dwarf_Word w;
        cfile = call_file(b, &child);
        if (dwarf_formudata(dwarf_attr(&child, DW_AT_call_line, &at), &w) == 0 && w <= UINT32_MAX)
          cline = (uint32_t)w;
      }
      Dwarf_Addr base, lo, hi;
      for (ptrdiff_t it = 0; (it = dwarf_ranges(&child, it, &base, &lo, &hi)) > 0;) {
        if (hi <= lo || b->n >= UINT32_MAX - 1) continue;
        uint32_t up = pcount ? (uint32_t)pfirst + 1 : 0;
        for (size_t p = pfirst; p < pfirst + pcount; p++) {
          if (b->v[p].lo <= lo && lo < b->v[p].hi) {
            up = (uint32_t)p + 1;
            break;
          }
        }
        dnode_t *nv = ember__grow_array(b->v, &b->cap, b->n + 1, sizeof *b->v);
        if (nv == NULL) return -ENOMEM;
        b->v = nv;
        b->v[b->n] = (dnode_t){lo, hi, name, cfile, cline, up, depth, (uint32_t)b->n, inl};
        b->n++;
      }
      /* A DIE without code (an abstract inline definition) holds none. */
      if (b->n > first) rc = index_children(b, &child, first, b->n - first, depth + 1);
    } else if (tag == DW_TAG_lexical_block || tag == DW_TAG_namespace) {
      rc = index_children(b, &child, pfirst, pcount, depth + 1);
    }
    if (rc != 0) return rc;
    if (dwarf_siblingof(&child, &next) != 0) break;
    child = next;
  }
  return 0;
}

static int dnode_cmp(const void *a, const void *b) {
  const dnode_t *x = a, *y = b;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return x->depth < y->depth ? -1 : x->depth > y->depth;
}

static int cu_index(ember__dwarfline_t *d, cu_info_t *cu) {
  ibuild_t b = {.cudie = &cu->die, .names = d->demangle ? &d->names : NULL};
  uint32_t *remap = NULL;
  int rc = index_children(&b, &cu->die, 0, 0, 0);
  if (rc != 0) goto cleanup;
  if (b.n > 0) {
    ember__sort_array(b.v, b.n, sizeof *b.v, dnode_cmp);
    remap = ember_malloc(b.n * sizeof *remap);
    if (remap == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    for (size_t i = 0; i < b.n; i++) remap[b.v[i].id] = (uint32_t)i;
    for (size_t i = 0; i < b.n; i++) {
      if (b.v[i].parent) b.v[i].parent = remap[b.v[i].parent - 1] + 1;
    }
  }
  cu->nodes = b.v;
  cu->n = b.n;
  cu->indexed = true;
  d->node_bytes += b.cap * sizeof *b.v;
  b.v = NULL;
cleanup:
  ember_free(remap);
  ember_free(b.v);
  ember_free(b.dm);
  return rc;
}

/* The innermost node holding `a`. Nodes nest, so the last node starting at
 * or before `a` is either it or inside it: walk out from there. */
static const dnode_t *cu_innermost(const cu_info_t *cu, uint64_t a) {
  size_t lo = 0, hi = cu->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (cu->nodes[mid].lo <= a) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return NULL;
  const dnode_t *d = &cu->nodes[lo - 1];
  for (unsigned guard = 0; d != NULL && guard <= DWARF_MAX_DEPTH; guard++) {
    if (d->lo <= a && a < d->hi) return d;
    d = d->parent ? &cu->nodes[d->parent - 1] : NULL;
  }
  return NULL;
}

int ember__dwarfline_frames(ember__dwarfline_t *d, uint64_t a, const char *sym_name,
                            ember__dwarfline_emit_fn emit, void *ctx, bool *done) {
  *done = false;
  int rc = dwarf_cus(d);
  if (rc != 0 || d->dw == NULL) return rc;
  const cu_range_t *r = find_cu(d, a);
  if (r == NULL) return 0;
  cu_info_t *cu = &d->cu_list[r->cu];
  if (!cu->indexed) {
    rc = cu_index(d, cu);
    if (rc != 0) return rc;
  }
  const char *file = NULL;
  uint32_t line = 0;
  Dwarf_Line *ln = dwarf_getsrc_die(&cu->die, a);
  if (ln != NULL) {
    int l = 0;
    file = dwarf_linesrc(ln, NULL, NULL);
    if (dwarf_lineno(ln, &l) == 0 && l > 0) line = (uint32_t)l;
  }
  if (!cu->lines_counted) {
    /* The CU's line table is decoded now (by the lookup above, or the
     * index's call files) and held by libdw until the handle ends. */
    Dwarf_Lines *lines;
    Dwarf_Files *files;
    size_t nl = 0, nf = 0;
    if (dwarf_getsrclines(&cu->die, &lines, &nl) != 0) nl = 0;
    if (dwarf_getsrcfiles(&cu->die, &files, &nf) != 0) nf = 0;
    d->libdw_bytes += (uint64_t)nl * LIBDW_LINE_BYTES + (uint64_t)nf * LIBDW_FILE_BYTES;
    cu->lines_counted = true;
  }
  bool outer = false;
  for (const dnode_t *n = cu_innermost(cu, a); n != NULL && !outer;
       n = n->parent ? &cu->nodes[n->parent - 1] : NULL) {
    const char *function;
    const char *ffile = file;
    uint32_t fline = line;
    if (n->inlined) {
      function = n->name;
      file = n->call_file;
      line = n->call_line;
    } else {
      /* The ELF name, so frames agree with DWARF-less agents. */
      function = sym_name ? sym_name : n->name;
      outer = true;
    }
    if (!emit(ctx, function, ffile, fline)) return 0;
    *done = true;
  }
  if (!outer && (sym_name != NULL || (!*done && file != NULL))) {
    /* No DIE for the function itself (assembly, say). */
    emit(ctx, sym_name, file, line);
    *done = true;
  }
  return 0;
}
