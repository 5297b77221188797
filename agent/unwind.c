/* The x86-64 user-stack unwinder (see unwind.h). */
#include "unwind.h"

#include <stdbool.h>
#include <string.h>

typedef struct copy {
  const uint8_t *p;
  uint64_t base;
  size_t len;
} copy_t;

/* The 8 bytes at address `a`, when all of them are in the copy. */
static bool word(const copy_t *c, uint64_t a, uint64_t *v) {
  if (a < c->base || a - c->base > c->len || c->len - (a - c->base) < 8) return false;
  memcpy(v, c->p + (a - c->base), 8);
  return true;
}

const char *ember__unwind_result_name(ember__unwind_result_t r) {
  switch (r) {
  case EMBER__UNWIND_COMPLETE: return "complete";
  case EMBER__UNWIND_TRUNCATED: return "truncated";
  case EMBER__UNWIND_NO_TABLE: return "no_table";
  case EMBER__UNWIND_BAD_CFA: return "bad_cfa";
  case EMBER__UNWIND_DEPTH: return "depth";
  case EMBER__UNWIND_LOOP: return "loop";
  default: return "unknown";
  }
}

ember__unwind_result_t ember__unwind(const ember__unwind_regs_t *regs, const uint8_t *stack,
                                     size_t len, ember__unwind_lookup_fn lookup, void *ctx,
                                     uint64_t *ips, size_t max_depth, ember__unwind_out_t *out) {
  ember__unwind_out_t o = {0};
  ember__unwind_result_t res;
  if (out == NULL) return EMBER__UNWIND_NO_TABLE;
  if (regs == NULL || lookup == NULL || ips == NULL || (stack == NULL && len > 0)) {
    *out = o;
    return EMBER__UNWIND_NO_TABLE;
  }
  if (max_depth == 0) {
    *out = o;
    return EMBER__UNWIND_DEPTH;
  }
  copy_t c = {.p = stack, .base = regs->sp, .len = len};
  uint64_t ip = regs->ip, sp = regs->sp, bp = regs->bp;
  bool bp_ok = true;   /* bp holds the frame's real rbp */
  bool bp_cut = false; /* ... it was lost because it lay outside the copy */
  bool exact = true;   /* ip is not a return address: look it up as is */
  ips[o.n++] = ip;
  for (;;) {
    if (o.n >= max_depth) {
      res = EMBER__UNWIND_DEPTH;
      break;
    }
    uint64_t pc = exact ? ip : ip - 1;
    const ember__cfi_table_t *t = NULL;
    uint64_t bias = 0;
    ember__cfi_rule_t rule;
    int found = lookup(ctx, pc, &t, &bias);
    if (found < 0) {
      res = EMBER__UNWIND_NO_TABLE; /* the caller allows no frame-pointer step */
      break;
    }
    bool have = found == 0 && t != NULL && ember__cfi_find(t, pc - bias, &rule) == 0;
    uint64_t ra, nsp, nbp = bp;
    bool nbp_ok = bp_ok, nbp_cut = bp_cut, signal = false;
    if (!have) {
      /* No CFI: trust rbp as a frame pointer if it looks like one. */
      if (!bp_ok) {
        res = bp_cut ? EMBER__UNWIND_TRUNCATED : EMBER__UNWIND_NO_TABLE;
        break;
      }
      if (bp == 0) {
        res = EMBER__UNWIND_COMPLETE; /* _start clears rbp */
        break;
      }
      if (bp < sp) {
        res = EMBER__UNWIND_NO_TABLE;
        break;
      }
      if (!word(&c, bp + 8, &ra) || !word(&c, bp, &nbp)) {
        /* Within a default stack size of the copy it is a frame the copy
         * is too short for; farther away rbp was no frame pointer. */
        res = bp - c.base < (8u << 20) ? EMBER__UNWIND_TRUNCATED : EMBER__UNWIND_NO_TABLE;
        break;
      }
      nsp = bp + 16;
      nbp_ok = true;
      nbp_cut = false;
      o.fp_steps++;
    } else if (rule.signal) {
      /* The trampoline's sp is the ucontext of the interrupted frame. */
      uint64_t nip;
      if (!word(&c, sp + EMBER__UNWIND_UC_RIP, &nip) ||
          !word(&c, sp + EMBER__UNWIND_UC_RSP, &nsp) ||
          !word(&c, sp + EMBER__UNWIND_UC_RBP, &nbp)) {
        res = EMBER__UNWIND_TRUNCATED;
        break;
      }
      ra = nip;
      nbp_ok = true;
      nbp_cut = false;
      signal = true;
      o.sig_steps++;
    } else {
      if (rule.ra_undefined) {
        res = EMBER__UNWIND_COMPLETE;
        break;
      }
      uint64_t cfa;
      switch (rule.cfa) {
      case EMBER__CFA_RSP: cfa = sp + (uint64_t)(int64_t)rule.cfa_off; break;
      case EMBER__CFA_RBP:
        if (!bp_ok) {
          res = bp_cut ? EMBER__UNWIND_TRUNCATED : EMBER__UNWIND_BAD_CFA;
          goto done;
        }
        cfa = bp + (uint64_t)(int64_t)rule.cfa_off;
        break;
      case EMBER__CFA_PLT: cfa = sp + 8 + ((ip & 15) >= (uint64_t)rule.cfa_off ? 8 : 0); break;
      default: res = EMBER__UNWIND_BAD_CFA; goto done;
      }
      if (!word(&c, cfa + (uint64_t)(int64_t)rule.ra_off, &ra)) {
        res = EMBER__UNWIND_TRUNCATED;
        break;
      }
      if (rule.rbp_saved) {
        nbp_ok = word(&c, cfa + (uint64_t)(int64_t)rule.rbp_off, &nbp);
        nbp_cut = !nbp_ok;
      } else if (rule.rbp_lost) {
        nbp_ok = false;
        nbp_cut = false;
      }
      nsp = cfa;
    }
    if (ra == 0) {
      res = EMBER__UNWIND_COMPLETE;
      break;
    }
    /* A signal may switch stacks (sigaltstack), so sp can go down there;
     * depth still bounds such walks. */
    if (!signal && nsp <= sp) {
      res = EMBER__UNWIND_LOOP;
      break;
    }
    ips[o.n++] = ra;
    ip = ra;
    sp = nsp;
    bp = nbp;
    bp_ok = nbp_ok;
    bp_cut = nbp_cut;
    exact = signal;
  }
done:
  *out = o;
  return res;
}
