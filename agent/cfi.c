/* Unwind tables from .eh_frame / .debug_frame (see cfi.h). */
#include "cfi.h"

#include <errno.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ember/ember.h"

/* The packed row. pc is an offset from the table's base so 32 bits do for
 * any binary whose covered text spans less than 4 GiB (FDEs beyond are
 * dropped as limited). */
typedef struct row {
  uint32_t pc;
  int32_t cfa_off;
  int16_t rbp_off;
  int8_t ra_off;
  uint8_t flags;
} row_t;
_Static_assert(sizeof(row_t) == 12, "a row is 12 bytes");

/* flags: the CFA kind in the low 3 bits (0 = no info), then these. */
#define F_KIND     0x07u
#define F_SIGNAL   0x08u
#define F_RA_UNDEF 0x10u
#define F_RBP_SAVE 0x20u
#define F_RBP_LOST 0x40u

struct ember__cfi_table {
  uint64_t base; /* vaddr of pc 0 */
  uint64_t end;  /* vaddr past the last covered pc */
  size_t n;
  row_t rows[];
};

/* DWARF register numbers of x86-64 (psABI figure 3.36). */
enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

#define STATE_STACK 16 /* remember_state depth: GCC and clang use 1-2 */

/* ---- bounded reading ---------------------------------------------------- */

typedef struct rd {
  const uint8_t *p;
  size_t len, at;
  bool bad;
} rd_t;

static bool rd_has(rd_t *r, size_t n) {
  if (r->bad || n > r->len - r->at) {
    r->bad = true;
    return false;
  }
  return true;
}

static uint64_t rd_le(rd_t *r, size_t n) {
  if (!rd_has(r, n)) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= (uint64_t)r->p[r->at + i] << (8 * i);
  r->at += n;
  return v;
}

static uint8_t rd_u8(rd_t *r) { return (uint8_t)rd_le(r, 1); }

static uint64_t rd_uleb(rd_t *r) {
  uint64_t v = 0;
  for (unsigned shift = 0;; shift += 7) {
    if (!rd_has(r, 1)) return 0;
    uint8_t b = r->p[r->at++];
    if (shift < 64)
      v |= (uint64_t)(b & 0x7f) << shift;
    else if ((b & 0x7f) != 0)
      r->bad = true;
    if ((b & 0x80) == 0) return v;
    if (shift > 70) {
      r->bad = true;
      return 0;
    }
  }
}

static int64_t rd_sleb(rd_t *r) {
  uint64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    if (!rd_has(r, 1)) return 0;
    b = r->p[r->at++];
    if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
    if (shift > 77) {
      r->bad = true;
      return 0;
    }
  } while (b & 0x80);
  if (shift < 64 && (b & 0x40)) v |= ~(uint64_t)0 << shift;
  return (int64_t)v;
}

static void rd_skip(rd_t *r, uint64_t n) {
  if (n > r->len - r->at || r->bad) {
    r->bad = true;
    return;
  }
  r->at += (size_t)n;
}

/* DW_EH_PE_* */
#define PE_OMIT    0xffu
#define PE_FORMAT  0x0fu
#define PE_APPLY   0x70u
#define PE_PCREL   0x10u
#define PE_ALIGNED 0x50u
#define PE_INDIR   0x80u

/* Size in bytes of an encoded value's format, 0 for the LEB128 forms, -1
 * for a format that does not exist. */
static int pe_size(uint8_t enc, int addr_size) {
  switch (enc & PE_FORMAT) {
  case 0x00: return addr_size; /* absptr */
  case 0x01: return 0;         /* uleb128 */
  case 0x02: return 2;         /* udata2 */
  case 0x03: return 4;         /* udata4 */
  case 0x04: return 8;         /* udata8 */
  case 0x09: return 0;         /* sleb128 */
  case 0x0a: return 2;         /* sdata2 */
  case 0x0b: return 4;         /* sdata4 */
  case 0x0c: return 8;         /* sdata8 */
  default: return -1;
  }
}

/* Read a value in format `enc` (no application). */
static bool rd_fmt(rd_t *r, uint8_t enc, int addr_size, uint64_t *out) {
  int sz = pe_size(enc, addr_size);
  if (sz < 0) return false;
  switch (enc & PE_FORMAT) {
  case 0x01: *out = rd_uleb(r); break;
  case 0x09: *out = (uint64_t)rd_sleb(r); break;
  case 0x0a: *out = (uint64_t)(int64_t)(int16_t)rd_le(r, 2); break;
  case 0x0b: *out = (uint64_t)(int64_t)(int32_t)rd_le(r, 4); break;
  default: *out = rd_le(r, (size_t)sz); break;
  }
  return !r->bad;
}

/* ---- CIEs --------------------------------------------------------------- */

typedef struct sect {
  rd_t r;
  uint64_t vaddr;
  bool debug; /* .debug_frame rules: CIE ids and pointers differ */
} sect_t;

typedef struct cie {
  size_t off; /* of the CIE in its section */
  bool debug;
  uint64_t code_align;
  int64_t data_align;
  uint8_t fde_enc;
  int addr_size;
  bool has_z, signal;
  size_t insn, insn_end; /* initial instructions in the section */
} cie_t;

#define CIE_CACHE 8

typedef struct build {
  ember__cfi_limits_t lim;
  ember__cfi_stats_t *st;
  size_t insn_bytes;
  cie_t cies[CIE_CACHE];
  size_t ncies, cie_next;
  /* FDEs and their rows before sorting and merging. */
  struct fde {
    uint64_t begin, end;
    size_t first, n;
    bool debug;
  } * fdes;
  size_t nfdes, cap_fdes;
  struct trow {
    uint64_t pc;
    row_t r;
  } * rows;
  size_t nrows, cap_rows;
  bool stop; /* a limit was hit: read no more */
} build_t;

/* Entry header: length (32-bit, or 0xffffffff then 64-bit) and the id or
 * CIE pointer that follows. On return r->at is at the field after the id;
 * *end is the entry's end. Returns false when the entry does not fit. */
static bool entry_head(rd_t *r, bool debug, size_t *end, uint64_t *id, size_t *id_at, bool *is64) {
  uint64_t len = rd_le(r, 4);
  *is64 = false;
  if (r->bad) return false;
  if (len == 0xffffffffu) {
    len = rd_le(r, 8);
    *is64 = true;
    if (r->bad) return false;
  }
  if (len > r->len - r->at) return false;
  *end = r->at + (size_t)len;
  *id_at = r->at;
  /* .eh_frame has a 4-byte CIE pointer even in the 64-bit format. */
  size_t idsz = (debug && *is64) ? 8 : 4;
  if (len < idsz) return false;
  *id = rd_le(r, idsz);
  return !r->bad;
}

/* Parse the CIE at `off` of section `s` (cached). NULL and a counted
 * reason when it cannot be used. */
static const cie_t *get_cie(build_t *b, const sect_t *s, size_t off) {
  for (size_t i = 0; i < b->ncies; i++)
    if (b->cies[i].off == off && b->cies[i].debug == s->debug) return &b->cies[i];
  rd_t r = s->r;
  r.bad = false;
  if (off >= r.len) {
    b->st->bad_entry++;
    return NULL;
  }
  r.at = off;
  size_t end, id_at;
  uint64_t id;
  bool is64;
  if (!entry_head(&r, s->debug, &end, &id, &id_at, &is64)) {
    b->st->bad_entry++;
    return NULL;
  }
  uint64_t want = s->debug ? (is64 ? UINT64_MAX : 0xffffffffu) : 0;
  if (id != want) {
    b->st->bad_entry++;
    return NULL;
  }
  r.len = end; /* reads stop at the entry's end */
  cie_t c = {.off = off, .debug = s->debug, .addr_size = 8};
  uint8_t version = rd_u8(&r);
  bool ok =
      s->debug ? (version == 1 || version == 3 || version == 4) : (version == 1 || version == 3);
  if (!ok) {
    b->st->bad_cie++;
    return NULL;
  }
  const char *aug = (const char *)r.p + r.at;
  const void *nul = r.at < r.len ? memchr(aug, 0, r.len - r.at) : NULL;
  if (nul == NULL) {
    b->st->bad_entry++;
    return NULL;
  }
  size_t aug_len = (size_t)((const char *)nul - aug);
  r.at += aug_len + 1;
  if (version == 4) {
    uint8_t asz = rd_u8(&r), segsz = rd_u8(&r);
    if ((asz != 4 && asz != 8) || segsz != 0) {
      b->st->bad_cie++;
      return NULL;
    }
    c.addr_size = asz;
  }
  c.code_align = rd_uleb(&r);
  c.data_align = rd_sleb(&r);
  uint64_t ra = version == 1 ? rd_u8(&r) : rd_uleb(&r);
  if (r.bad) {
    b->st->bad_entry++;
    return NULL;
  }
  if (ra != REG_RA || c.code_align == 0 || c.code_align > 0xffff || c.data_align < -0xffff ||
      c.data_align > 0xffff) {
    b->st->bad_cie++;
    return NULL;
  }
  c.fde_enc = 0; /* absptr */
  size_t aug_end = r.len;
  size_t i = 0;
  if (aug_len > 0 && aug[0] == 'z') {
    c.has_z = true;
    uint64_t zlen = rd_uleb(&r);
    if (r.bad || zlen > r.len - r.at) {
      b->st->bad_entry++;
      return NULL;
    }
    aug_end = r.at + (size_t)zlen;
    i = 1;
  }
  for (; i < aug_len; i++) {
    char ch = aug[i];
    if (ch == 'R') {
      c.fde_enc = rd_u8(&r);
    } else if (ch == 'L') {
      (void)rd_u8(&r); /* the LSDA's encoding: FDEs skip it by 'z' length */
    } else if (ch == 'S') {
      c.signal = true;
    } else if (ch == 'P') {
      uint8_t penc = rd_u8(&r);
      int sz = pe_size(penc, 8);
      if (sz < 0 || (penc & PE_APPLY) == PE_ALIGNED) {
        b->st->bad_cie++;
        return NULL;
      }
      uint64_t skipped;
      if (!rd_fmt(&r, penc, 8, &skipped)) break;
    } else if (c.has_z) {
      /* An augmentation unknown here (e.g. 'B', 'G' of other machines):
       * its data is inside the 'z' length, which gets us past it. */
      break;
    } else {
      b->st->bad_cie++;
      return NULL;
    }
  }
  if (r.bad || r.at > aug_end) {
    b->st->bad_entry++;
    return NULL;
  }
  if (c.has_z) r.at = aug_end;
  if (c.has_z == false && aug_len > 0) {
    b->st->bad_cie++;
    return NULL;
  }
  c.insn = r.at;
  c.insn_end = r.len;
  if (pe_size(c.fde_enc, c.addr_size) < 0 || (c.fde_enc & PE_INDIR) ||
      ((c.fde_enc & PE_APPLY) != 0 && (c.fde_enc & PE_APPLY) != PE_PCREL)) {
    b->st->bad_encoding++;
    return NULL;
  }
  b->st->cies++;
  size_t slot = b->ncies < CIE_CACHE ? b->ncies++ : (b->cie_next++ % CIE_CACHE);
  b->cies[slot] = c;
  return &b->cies[slot];
}

/* ---- CFA programs ------------------------------------------------------- */

enum { RBP_SAME, RBP_AT, RBP_LOST };
enum { RA_AT, RA_UNDEF, RA_LOST };

typedef struct state {
  uint8_t kind; /* EMBER__CFA_* */
  uint8_t cfa_reg;
  int64_t cfa_off;
  uint8_t rbp, ra;
  int64_t rbp_off, ra_off;
} state_t;

/* The expression binutils emits for .plt: rsp + 8 + ((rip & 15) >= N) << 3. */
static bool plt_expr(const uint8_t *e, uint64_t n, int32_t *threshold) {
  static const uint8_t head[] = {0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a};
  static const uint8_t tail[] = {0x2a, 0x33, 0x24, 0x22};
  if (n != sizeof head + 1 + sizeof tail) return false;
  if (memcmp(e, head, sizeof head) != 0 || memcmp(e + sizeof head + 1, tail, sizeof tail) != 0)
    return false;
  uint8_t lit = e[sizeof head];
  if (lit < 0x30 || lit > 0x4f) return false; /* DW_OP_lit0..lit31 */
  *threshold = lit - 0x30;
  return true;
}

static row_t pack(const state_t *s, bool signal) {
  row_t r = {0};
  uint8_t kind = s->kind;
  if ((kind == EMBER__CFA_RSP || kind == EMBER__CFA_RBP) &&
      (s->cfa_off < INT32_MIN || s->cfa_off > INT32_MAX))
    kind = EMBER__CFA_UNKNOWN;
  if (kind != EMBER__CFA_UNKNOWN) r.cfa_off = (int32_t)s->cfa_off;
  if (s->ra == RA_UNDEF) {
    r.flags |= F_RA_UNDEF;
  } else if (s->ra == RA_AT && s->ra_off >= INT8_MIN && s->ra_off <= INT8_MAX) {
    r.ra_off = (int8_t)s->ra_off;
  } else {
    kind = EMBER__CFA_UNKNOWN;
  }
  if (s->rbp == RBP_AT && s->rbp_off >= INT16_MIN && s->rbp_off <= INT16_MAX) {
    r.flags |= F_RBP_SAVE;
    r.rbp_off = (int16_t)s->rbp_off;
  } else if (s->rbp != RBP_SAME) {
    r.flags |= F_RBP_LOST;
  }
  if (kind == EMBER__CFA_UNKNOWN) {
    r.cfa_off = 0;
    r.ra_off = 0;
    r.rbp_off = 0;
    r.flags &= (uint8_t) ~(F_RBP_SAVE | F_RBP_LOST);
  }
  r.flags |= kind;
  if (signal) r.flags |= F_SIGNAL;
  return r;
}

static bool row_eq(const row_t *a, const row_t *b) {
  return a->cfa_off == b->cfa_off && a->rbp_off == b->rbp_off && a->ra_off == b->ra_off &&
         a->flags == b->flags;
}
/* A factored offset times the data alignment (|align| <= 0xffff: get_cie).
 * A factor beyond 2^31 gives an offset no row field holds, so the row
 * becomes unknown instead of the multiplication overflowing. */
#define OFF_HUGE ((int64_t)1 << 60)
static int64_t scale_s(int64_t v, int64_t align) {
  if (v > INT32_MAX || v < INT32_MIN) return OFF_HUGE;
  return v * align;
}
static int64_t scale_u(uint64_t v, int64_t align) {
  return v > INT32_MAX ? OFF_HUGE : (int64_t)v * align;
}

typedef enum { RUN_OK, RUN_BAD, RUN_LIMIT, RUN_NOMEM } run_t;

static run_t emit(build_t *b, size_t first, uint64_t pc, const state_t *s, bool signal);

/* Run CFA instructions [at, end) of section `s`. With `rows` false (the
 * CIE's initial instructions) no row is emitted and a location change is an
 * error. Rows go to b->rows from index `first` on; *loc is the current pc. */
static run_t run(build_t *b, const sect_t *s, const cie_t *c, size_t at, size_t end, state_t *st,
                 const state_t *init, uint64_t *loc, uint64_t pc_end, size_t first, bool rows) {
  if (end - at > b->lim.max_insn_bytes - b->insn_bytes) return RUN_LIMIT;
  b->insn_bytes += end - at;
  rd_t r = s->r;
  r.bad = false;
  r.at = at;
  r.len = end;
  state_t stack[STATE_STACK];
  size_t depth = 0;
  while (r.at < r.len) {
    uint8_t op = rd_u8(&r);
    uint64_t reg = 0, delta = 0, next = 0;
    int64_t off = 0;
    bool advance = false, absolute = false;
    switch (op >> 6) {
    case 1: /* DW_CFA_advance_loc */
      delta = (uint64_t)(op & 0x3f);
      advance = true;
      break;
    case 2: /* DW_CFA_offset */
      reg = op & 0x3f;
      off = scale_u(rd_uleb(&r), c->data_align);
      goto set_offset;
    case 3: /* DW_CFA_restore */ reg = op & 0x3f; goto restore;
    default:
      switch (op) {
      case 0x00: break; /* nop */
      case 0x01: {      /* set_loc: an address in the FDE's encoding */
        size_t field = r.at;
        if (!rd_fmt(&r, c->fde_enc, c->addr_size, &next)) return RUN_BAD;
        if ((c->fde_enc & PE_APPLY) == PE_PCREL) next += s->vaddr + field;
        advance = absolute = true;
        break;
      }
      case 0x02: delta = rd_le(&r, 1), advance = true; break;
      case 0x03: delta = rd_le(&r, 2), advance = true; break;
      case 0x04: delta = rd_le(&r, 4), advance = true; break;
      case 0x05: /* offset_extended */
        reg = rd_uleb(&r);
        off = scale_u(rd_uleb(&r), c->data_align);
        goto set_offset;
      case 0x06: reg = rd_uleb(&r); goto restore;
      case 0x07: /* undefined */
        reg = rd_uleb(&r);
        if (reg == REG_RBP) st->rbp = RBP_LOST;
        if (reg == REG_RA) st->ra = RA_UNDEF;
        break;
      case 0x08: /* same_value */
        reg = rd_uleb(&r);
        if (reg == REG_RBP) st->rbp = RBP_SAME;
        if (reg == REG_RA) st->ra = RA_LOST;
        break;
      case 0x09: /* register */
        reg = rd_uleb(&r);
        (void)rd_uleb(&r);
        if (reg == REG_RBP) st->rbp = RBP_LOST;
        if (reg == REG_RA) st->ra = RA_LOST;
        break;
      case 0x0a: /* remember_state: the CFA rule is part of it (as GCC expects) */
        if (depth == STATE_STACK) return RUN_BAD;
        stack[depth++] = *st;
        break;
      case 0x0b: /* restore_state */
        if (depth == 0) return RUN_BAD;
        *st = stack[--depth];
        break;
      case 0x0c: /* def_cfa */
        st->cfa_reg = (uint8_t)(rd_uleb(&r) & 0xff);
        st->cfa_off = (int64_t)(rd_uleb(&r) & INT64_MAX);
        goto set_kind;
      case 0x12: /* def_cfa_sf */
        st->cfa_reg = (uint8_t)(rd_uleb(&r) & 0xff);
        st->cfa_off = scale_s(rd_sleb(&r), c->data_align);
        goto set_kind;
      case 0x0d: /* def_cfa_register */ st->cfa_reg = (uint8_t)(rd_uleb(&r) & 0xff); goto set_kind;
      case 0x0e: st->cfa_off = (int64_t)(rd_uleb(&r) & INT64_MAX); break;  /* def_cfa_offset */
      case 0x13: st->cfa_off = scale_s(rd_sleb(&r), c->data_align); break; /* def_cfa_offset_sf */
      case 0x0f: {                                                         /* def_cfa_expression */
        uint64_t n = rd_uleb(&r);
        if (!rd_has(&r, n)) return RUN_BAD;
        int32_t thr;
        if (plt_expr(r.p + r.at, n, &thr)) {
          st->kind = EMBER__CFA_PLT;
          st->cfa_off = thr;
        } else {
          st->kind = EMBER__CFA_UNKNOWN;
        }
        st->cfa_reg = 0xff;
        r.at += (size_t)n;
        break;
      }
      case 0x10: /* expression */
      case 0x16: /* val_expression */
        reg = rd_uleb(&r);
        rd_skip(&r, rd_uleb(&r));
        if (reg == REG_RBP) st->rbp = RBP_LOST;
        if (reg == REG_RA) st->ra = RA_LOST;
        break;
      case 0x11: /* offset_extended_sf */
        reg = rd_uleb(&r);
        off = scale_s(rd_sleb(&r), c->data_align);
        goto set_offset;
      case 0x14: /* val_offset: the register's value is CFA + n, not saved */
      case 0x15: /* val_offset_sf */
        reg = rd_uleb(&r);
        if (op == 0x14)
          (void)rd_uleb(&r);
        else
          (void)rd_sleb(&r);
        if (reg == REG_RBP) st->rbp = RBP_LOST;
        if (reg == REG_RA) st->ra = RA_LOST;
        break;
      case 0x2e: (void)rd_uleb(&r); break; /* GNU_args_size */
      case 0x2f:                           /* GNU_negative_offset_extended */
        reg = rd_uleb(&r);
        off = -scale_u(rd_uleb(&r), c->data_align);
        goto set_offset;
      default: return RUN_BAD;
      }
      break;
    }
    if (r.bad) return RUN_BAD;
    if (advance) {
      if (!rows) return RUN_BAD;
      if (!absolute) {
        if (delta > (UINT64_MAX - *loc) / c->code_align) return RUN_BAD;
        next = *loc + delta * c->code_align;
      }
      if (next < *loc) return RUN_BAD;
      if (next >= pc_end) return RUN_OK; /* the rest would be past the FDE */
      if (next != *loc) {
        run_t rc = emit(b, first, *loc, st, c->signal);
        if (rc != RUN_OK) return rc;
      }
      *loc = next;
    }
    continue;
  set_offset:
    if (r.bad) return RUN_BAD;
    if (reg == REG_RBP) st->rbp = RBP_AT, st->rbp_off = off;
    if (reg == REG_RA) st->ra = RA_AT, st->ra_off = off;
    continue;
  restore:
    if (r.bad || init == NULL) return RUN_BAD;
    if (reg == REG_RBP) st->rbp = init->rbp, st->rbp_off = init->rbp_off;
    if (reg == REG_RA) st->ra = init->ra, st->ra_off = init->ra_off;
    continue;
  set_kind:
    if (r.bad) return RUN_BAD;
    st->kind = st->cfa_reg == REG_RSP   ? EMBER__CFA_RSP
               : st->cfa_reg == REG_RBP ? EMBER__CFA_RBP
                                        : EMBER__CFA_UNKNOWN;
    continue;
  }
  return r.bad ? RUN_BAD : RUN_OK;
}

/* Append a row of the current FDE (rows from `first` on). Rows at the same
 * pc replace each other; a row equal to the one before is not kept. */
static run_t emit(build_t *b, size_t first, uint64_t pc, const state_t *s, bool signal) {
  row_t r = pack(s, signal);
  if (b->nrows > first) {
    struct trow *last = &b->rows[b->nrows - 1];
    if (last->pc == pc) {
      last->r = r;
      if (b->nrows - 1 > first && row_eq(&b->rows[b->nrows - 2].r, &r)) b->nrows--;
      return RUN_OK;
    }
    if (row_eq(&last->r, &r)) return RUN_OK;
  }
  if (b->nrows >= b->lim.max_rows) return RUN_LIMIT;
  if (b->nrows == b->cap_rows) {
    size_t cap = b->cap_rows ? b->cap_rows * 2 : 1024;
    if (cap > b->lim.max_rows) cap = b->lim.max_rows;
    void *p = ember_realloc(b->rows, cap * sizeof *b->rows);
    if (p == NULL) return RUN_NOMEM;
    b->rows = p;
    b->cap_rows = cap;
  }
  b->rows[b->nrows++] = (struct trow){.pc = pc, .r = r};
  return RUN_OK;
}

/* ---- FDEs --------------------------------------------------------------- */

static bool add_fde(build_t *b, uint64_t begin, uint64_t end, size_t first, bool debug) {
  if (b->nfdes == b->cap_fdes) {
    size_t cap = b->cap_fdes ? b->cap_fdes * 2 : 256;
    if (cap > b->lim.max_fdes) cap = b->lim.max_fdes;
    void *p = ember_realloc(b->fdes, cap * sizeof *b->fdes);
    if (p == NULL) return false;
    b->fdes = p;
    b->cap_fdes = cap;
  }
  b->fdes[b->nfdes++] = (struct fde){
      .begin = begin, .end = end, .first = first, .n = b->nrows - first, .debug = debug};
  return true;
}

/* One FDE: `id` is its CIE pointer, read at id_at; its fields start at
 * `at` and it ends at `end`. Returns 0 or -ENOMEM; a bad FDE is counted and
 * skipped (its rows dropped), a limit stops the build. */
static int do_fde(build_t *b, const sect_t *s, size_t id_at, size_t at, uint64_t id, size_t end) {
  size_t cie_off;
  if (s->debug) {
    if (id >= s->r.len) {
      b->st->bad_entry++;
      return 0;
    }
    cie_off = (size_t)id;
  } else {
    if (id > id_at) {
      b->st->bad_entry++;
      return 0;
    }
    cie_off = id_at - (size_t)id;
  }
  const cie_t *cp = get_cie(b, s, cie_off);
  if (cp == NULL) return 0;
  cie_t c = *cp; /* the cache slot may be reused by a later CIE */
  rd_t r = s->r;
  r.bad = false;
  r.at = at;
  r.len = end;
  uint64_t begin, range;
  size_t field = r.at;
  if (!rd_fmt(&r, c.fde_enc, c.addr_size, &begin) ||
      !rd_fmt(&r, c.fde_enc & PE_FORMAT, c.addr_size, &range)) {
    b->st->bad_entry++;
    return 0;
  }
  if ((c.fde_enc & PE_APPLY) == PE_PCREL) begin += s->vaddr + field;
  if (c.addr_size == 4 && (c.fde_enc & PE_FORMAT) == 0) begin &= 0xffffffffu;
  /* Empty FDEs, and .debug_frame's of functions the linker discarded
   * (address 0 or a tombstone that overflows), cover nothing. */
  if (range == 0 || (s->debug && begin == 0)) return 0;
  if (begin > UINT64_MAX - range) {
    b->st->bad_entry++;
    return 0;
  }
  if (c.has_z) rd_skip(&r, rd_uleb(&r));
  if (r.bad) {
    b->st->bad_entry++;
    return 0;
  }
  size_t first = b->nrows;
  state_t init = {.kind = EMBER__CFA_UNKNOWN, .cfa_reg = 0xff, .rbp = RBP_SAME, .ra = RA_LOST};
  uint64_t loc = begin, pc_end = begin + range;
  run_t rc = run(b, s, &c, c.insn, c.insn_end, &init, NULL, &loc, pc_end, first, false);
  if (rc == RUN_OK) {
    state_t st = init;
    rc = run(b, s, &c, r.at, end, &st, &init, &loc, pc_end, first, true);
    if (rc == RUN_OK) rc = emit(b, first, loc, &st, c.signal);
  }
  if (rc == RUN_OK) {
    for (size_t i = first; i < b->nrows; i++)
      if ((b->rows[i].r.flags & F_KIND) == EMBER__CFA_UNKNOWN) b->st->unknown_rows++;
    return add_fde(b, begin, pc_end, first, s->debug) ? 0 : -ENOMEM;
  }
  b->nrows = first;
  if (rc == RUN_NOMEM) return -ENOMEM;
  if (rc == RUN_LIMIT) {
    b->st->limited++;
    b->stop = true;
  } else {
    b->st->bad_insn++;
  }
  return 0;
}

/* Walk the entries of one section. Returns 0 or -ENOMEM. */
static int walk(build_t *b, const sect_t *s) {
  rd_t r = s->r;
  r.at = 0;
  r.bad = false;
  while (r.at < r.len && !b->stop) {
    /* A zero length ends .eh_frame (crtend's terminator). */
    if (!s->debug && r.len - r.at >= 4 && memcmp(r.p + r.at, "\0\0\0\0", 4) == 0) break;
    size_t end, id_at;
    uint64_t id;
    bool is64;
    if (!entry_head(&r, s->debug, &end, &id, &id_at, &is64)) {
      b->st->bad_entry++;
      break;
    }
    bool is_cie = s->debug ? id == (is64 ? UINT64_MAX : 0xffffffffu) : id == 0;
    if (!is_cie) {
      if (b->nfdes >= b->lim.max_fdes) {
        b->st->limited++;
        b->stop = true;
        break;
      }
      int rc = do_fde(b, s, id_at, r.at, id, end);
      if (rc != 0) return rc;
    }
    r.at = end;
  }
  return 0;
}

static int fde_cmp(const void *pa, const void *pb) {
  const struct fde *a = pa, *b = pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->debug != b->debug) return a->debug ? 1 : -1; /* .eh_frame first */
  return 0;
}

/* Sort the FDEs, drop overlaps and merge their rows into the table. */
static int finish(build_t *b, ember__cfi_table_t **out) {
  if (b->nfdes == 0) {
    /* An empty section (stub libraries have just the terminator) is no
     * CFI; one whose every entry was refused is corrupt. */
    const ember__cfi_stats_t *st = b->st;
    bool refused = st->bad_entry || st->bad_cie || st->bad_encoding || st->bad_insn || st->limited;
    return refused ? EMBER_ECORRUPT : EMBER_ENOTFOUND;
  }
  qsort(b->fdes, b->nfdes, sizeof *b->fdes, fde_cmp);
  uint64_t base = b->fdes[0].begin;
  size_t cap = 0;
  for (size_t i = 0; i < b->nfdes; i++) cap += b->fdes[i].n + 1;
  ember__cfi_table_t *t = ember_malloc(sizeof *t + cap * sizeof(row_t));
  if (t == NULL) return -ENOMEM;
  size_t n = 0, kept = 0, debug = 0;
  uint64_t covered = base;
  for (size_t i = 0; i < b->nfdes; i++) {
    const struct fde *f = &b->fdes[i];
    if (f->begin < covered && n > 0) {
      b->st->overlaps++;
      continue;
    }
    if (f->end - base > UINT32_MAX) {
      b->st->limited++;
      continue;
    }
    if (n > 0 && f->begin > covered)
      t->rows[n++] = (row_t){.pc = (uint32_t)(covered - base)}; /* no info */
    for (size_t j = f->first; j < f->first + f->n; j++) {
      const struct trow *tr = &b->rows[j];
      uint32_t pc = (uint32_t)(tr->pc - base);
      if (n > 0 && t->rows[n - 1].pc == pc) n--;
      if (n > 0 && row_eq(&t->rows[n - 1], &tr->r)) continue;
      t->rows[n] = tr->r;
      t->rows[n].pc = pc;
      n++;
    }
    covered = f->end;
    kept++;
    debug += f->debug;
  }
  if (kept == 0) {
    /* Every FDE overlapped or spanned too far: nothing to look up. */
    ember_free(t);
    return EMBER_ECORRUPT;
  }
  t->base = base;
  t->end = covered;
  t->n = n;
  /* Give back what merging saved; a failed shrink keeps the larger block. */
  ember__cfi_table_t *small = ember_realloc(t, sizeof *t + (n ? n : 1) * sizeof(row_t));
  if (small != NULL) t = small;
  b->st->fdes = kept;
  b->st->debug_fdes = debug;
  b->st->rows = n;
  b->st->bytes = sizeof *t + n * sizeof(row_t);
  *out = t;
  return 0;
}

static ember__cfi_limits_t limits(const ember__cfi_limits_t *lim) {
  ember__cfi_limits_t l = lim ? *lim : (ember__cfi_limits_t){0};
  if (l.max_fdes == 0) l.max_fdes = EMBER__CFI_MAX_FDES;
  if (l.max_rows == 0) l.max_rows = EMBER__CFI_MAX_ROWS;
  if (l.max_insn_bytes == 0) l.max_insn_bytes = EMBER__CFI_MAX_INSN_BYTES;
  if (l.max_section_bytes == 0) l.max_section_bytes = EMBER__CFI_MAX_SECTION_BYTES;
  return l;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int build(const uint8_t *eh, size_t eh_len, uint64_t eh_vaddr, const uint8_t *dbg,
                 size_t dbg_len, const ember__cfi_limits_t *l, ember__cfi_stats_t *st,
                 ember__cfi_table_t **out) {
  build_t b = {.lim = *l, .st = st};
  int rc = 0;
  if (eh != NULL && eh_len > 0) {
    if (eh_len > l->max_section_bytes) {
      st->limited++;
    } else {
      sect_t s = {.r = {.p = eh, .len = eh_len}, .vaddr = eh_vaddr};
      rc = walk(&b, &s);
    }
  }
  if (rc == 0 && dbg != NULL && dbg_len > 0 && !b.stop) {
    if (dbg_len > l->max_section_bytes) {
      st->limited++;
    } else {
      sect_t s = {.r = {.p = dbg, .len = dbg_len}, .debug = true};
      b.ncies = 0; /* cached CIEs belong to .eh_frame */
      rc = walk(&b, &s);
    }
  }
  if (rc == 0) rc = finish(&b, out);
  ember_free(b.fdes);
  ember_free(b.rows);
  return rc;
}

int ember__cfi_build_sections(const uint8_t *eh, size_t eh_len, uint64_t eh_vaddr,
                              const uint8_t *dbg, size_t dbg_len, const ember__cfi_limits_t *lim,
                              ember__cfi_stats_t *stats, ember__cfi_table_t **out) {
  ember__cfi_stats_t st = {0};
  if (out == NULL || (eh == NULL && eh_len > 0) || (dbg == NULL && dbg_len > 0)) return -EINVAL;
  uint64_t t0 = now_ns();
  ember__cfi_limits_t l = limits(lim);
  int rc = (eh_len == 0 && dbg_len == 0) ? EMBER_ENOTFOUND
                                         : build(eh, eh_len, eh_vaddr, dbg, dbg_len, &l, &st, out);
  st.build_ns = now_ns() - t0;
  if (stats != NULL) *stats = st;
  return rc;
}

/* The bytes of section `scn`, decompressed when SHF_COMPRESSED and small
 * enough. NULL when absent, empty, NOBITS or refused (counted). */
static const Elf_Data *section_data(Elf_Scn *scn, const GElf_Shdr *sh, const ember__cfi_limits_t *l,
                                    ember__cfi_stats_t *st) {
  if (sh->sh_type == SHT_NOBITS || sh->sh_size == 0) return NULL;
  if (sh->sh_size > l->max_section_bytes) {
    st->limited++;
    return NULL;
  }
  if (sh->sh_flags & SHF_COMPRESSED) {
    GElf_Chdr ch;
    if (gelf_getchdr(scn, &ch) == NULL) {
      st->bad_entry++;
      return NULL;
    }
    if (ch.ch_size > l->max_section_bytes) {
      st->limited++;
      return NULL;
    }
    if (elf_compress(scn, 0, 0) < 0) {
      st->bad_entry++;
      return NULL;
    }
  }
  Elf_Data *d = elf_getdata(scn, NULL);
  if (d == NULL || d->d_buf == NULL || d->d_size == 0) return NULL;
  return d;
}

int ember__cfi_build(Elf *elf, const ember__cfi_limits_t *lim, ember__cfi_stats_t *stats,
                     ember__cfi_table_t **out) {
  ember__cfi_stats_t st = {0};
  if (elf == NULL || out == NULL) return -EINVAL;
  uint64_t t0 = now_ns();
  ember__cfi_limits_t l = limits(lim);
  int rc;
  GElf_Ehdr eh;
  size_t shstrndx;
  if (elf_kind(elf) != ELF_K_ELF || gelf_getehdr(elf, &eh) == NULL) {
    rc = EMBER_ECORRUPT;
  } else if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
    rc = -ENOEXEC;
  } else if (elf_getshdrstrndx(elf, &shstrndx) != 0) {
    rc = EMBER_ECORRUPT;
  } else {
    const Elf_Data *ehd = NULL, *dbgd = NULL;
    uint64_t eh_vaddr = 0;
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == NULL) continue;
      const char *name = elf_strptr(elf, shstrndx, sh.sh_name);
      if (name == NULL) continue;
      if (ehd == NULL && strcmp(name, ".eh_frame") == 0) {
        ehd = section_data(scn, &sh, &l, &st);
        eh_vaddr = sh.sh_addr;
      } else if (dbgd == NULL && strcmp(name, ".debug_frame") == 0) {
        dbgd = section_data(scn, &sh, &l, &st);
      }
    }
    if (ehd == NULL && dbgd == NULL) {
      rc = st.limited || st.bad_entry ? EMBER_ECORRUPT : EMBER_ENOTFOUND;
    } else {
      rc = build(ehd ? ehd->d_buf : NULL, ehd ? ehd->d_size : 0, eh_vaddr,
                 dbgd ? dbgd->d_buf : NULL, dbgd ? dbgd->d_size : 0, &l, &st, out);
    }
  }
  st.build_ns = now_ns() - t0;
  if (stats != NULL) *stats = st;
  return rc;
}

void ember__cfi_free(ember__cfi_table_t *t) { ember_free(t); }

static void decode(const ember__cfi_table_t *t, size_t i, ember__cfi_rule_t *out) {
  const row_t *r = &t->rows[i];
  *out = (ember__cfi_rule_t){
      .start = t->base + r->pc,
      .end = i + 1 < t->n ? t->base + t->rows[i + 1].pc : t->end,
      .cfa = (ember__cfa_kind_t)(r->flags & F_KIND),
      .cfa_off = r->cfa_off,
      .ra_off = r->ra_off,
      .rbp_off = r->rbp_off,
      .rbp_saved = (r->flags & F_RBP_SAVE) != 0,
      .rbp_lost = (r->flags & F_RBP_LOST) != 0,
      .ra_undefined = (r->flags & F_RA_UNDEF) != 0,
      .signal = (r->flags & F_SIGNAL) != 0,
  };
}

int ember__cfi_find(const ember__cfi_table_t *t, uint64_t vaddr, ember__cfi_rule_t *out) {
  if (t == NULL || out == NULL || t->n == 0 || vaddr < t->base || vaddr >= t->end)
    return EMBER_ENOTFOUND;
  uint32_t pc = (uint32_t)(vaddr - t->base); /* end - base fits: finish() */
  size_t lo = 0, hi = t->n;                  /* the answer is in [lo, hi) */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (t->rows[mid].pc <= pc)
      lo = mid;
    else
      hi = mid;
  }
  if ((t->rows[lo].flags & F_KIND) == 0) return EMBER_ENOTFOUND;
  decode(t, lo, out);
  return 0;
}

size_t ember__cfi_count(const ember__cfi_table_t *t) { return t ? t->n : 0; }

int ember__cfi_row(const ember__cfi_table_t *t, size_t i, ember__cfi_rule_t *out) {
  if (t == NULL || out == NULL || i >= t->n) return EMBER_ENOTFOUND;
  decode(t, i, out);
  return 0;
}

size_t ember__cfi_bytes(const ember__cfi_table_t *t) {
  return t ? sizeof *t + t->n * sizeof(row_t) : 0;
}
