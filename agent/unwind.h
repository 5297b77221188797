/* The x86-64 user-stack unwinder: from the registers and the copy of the
 * user stack a sample carries (PERF_SAMPLE_REGS_USER with ip, sp and bp;
 * PERF_SAMPLE_STACK_USER), walk the frames with the unwind tables of
 * agent/cfi.h, one binary search a frame.
 *
 * Each step: find the row for the pc (pc - 1 for every frame but the leaf
 * and the frame a signal interrupted, so a call at the end of a function
 * finds its own row), CFA = rsp + n | rbp + n | the PLT rule, the return
 * address at CFA + ra_off, rbp from CFA + rbp_off when saved, sp = CFA.
 * A signal trampoline (a row of a CIE with 'S', glibc's __restore_rt) takes
 * rip, rsp and rbp from the ucontext the kernel put at its sp. A pc with no
 * table, or in no FDE of its table (JIT code named by a perf map, a module
 * without CFI), gets one frame-pointer step (ra = [rbp + 8], rbp = [rbp],
 * sp = rbp + 16, with rbp inside the copy and above sp), and the next pc is
 * looked up in the tables again: a Node.js stack goes through JS frames and
 * back into native code.
 *
 * Every read of the stack is bounds-checked against the copy
 * [sp at capture, sp at capture + len); nothing outside it is ever read,
 * and the walk is bounded by max_depth and by sp strictly increasing
 * (signal frames excepted, depth still bounds them). The ips written are
 * the leaf's pc and then the return addresses as found (not minus one),
 * as a kernel callchain gives them.
 *
 * Thread-safety: no state of its own; safe on any thread as long as the
 * lookup callback is and the tables it returns stay alive for the call.
 * No allocation. */
#ifndef EMBER_AGENT_UNWIND_H
#define EMBER_AGENT_UNWIND_H

#include <stddef.h>
#include <stdint.h>

#include "cfi.h"

/* The registers of the sampled thread. */
typedef struct ember__unwind_regs {
  uint64_t ip, sp, bp;
} ember__unwind_regs_t;

/* Map a pc to the unwind table of the module that holds it and the
 * module's load bias (pc - bias = the file vaddr the table is in). Return 0
 * and set both; a positive value when no table covers the pc (an unknown or
 * JIT-only region): the unwinder then takes a frame-pointer step; or a
 * negative value to stop there (NO_TABLE) without one (unwind = dwarf). The
 * table is borrowed for the duration of ember__unwind. */
typedef int (*ember__unwind_lookup_fn)(void *ctx, uint64_t pc, const ember__cfi_table_t **table,
                                       uint64_t *bias);

/* Why the walk stopped (a metric each). */
typedef enum ember__unwind_result {
  EMBER__UNWIND_COMPLETE = 0, /* the outermost frame (return address undefined,
                                 a zero return address, or rbp 0 under the
                                 frame-pointer rule) */
  EMBER__UNWIND_TRUNCATED,    /* a needed word lies outside the stack copy */
  EMBER__UNWIND_NO_TABLE,     /* no CFI for a pc and no usable frame pointer */
  EMBER__UNWIND_BAD_CFA,      /* a row this unwinder cannot follow ("unknown",
                                 or an rbp rule with rbp already lost) */
  EMBER__UNWIND_DEPTH,        /* max_depth ips written */
  EMBER__UNWIND_LOOP,         /* sp did not increase */
  EMBER__UNWIND_NRESULTS
} ember__unwind_result_t;

/* How a walk went, besides the ips. */
typedef struct ember__unwind_out {
  size_t n;           /* ips written */
  uint32_t fp_steps;  /* frames found by the frame-pointer fallback */
  uint32_t sig_steps; /* signal frames crossed */
} ember__unwind_out_t;

/* Unwind from `regs` over `stack` (len bytes copied from address regs->sp
 * upwards; borrowed for the call). Writes at most max_depth ips, leaf
 * first, to `ips` and fills *out. `lookup`/`ctx` as above. With max_depth 0
 * or NULL arguments nothing is written and DEPTH (max_depth 0) or NO_TABLE
 * is returned with out->n 0. Names of results: ember__unwind_result_name. */
ember__unwind_result_t ember__unwind(const ember__unwind_regs_t *regs, const uint8_t *stack,
                                     size_t len, ember__unwind_lookup_fn lookup, void *ctx,
                                     uint64_t *ips, size_t max_depth, ember__unwind_out_t *out);

/* "complete", "truncated", "no_table", "bad_cfa", "depth", "loop". */
const char *ember__unwind_result_name(ember__unwind_result_t r);

/* Offsets in the x86-64 rt_sigframe, from the trampoline's sp: struct
 * ucontext is first (the return address into __restore_rt was popped by
 * the handler's ret), uc_mcontext.gregs at 40, 8 bytes a register
 * (REG_RBP 10, REG_RSP 15, REG_RIP 16 of <sys/ucontext.h>). */
#define EMBER__UNWIND_UC_GREGS 40u
#define EMBER__UNWIND_UC_RBP   (EMBER__UNWIND_UC_GREGS + 8u * 10u)
#define EMBER__UNWIND_UC_RSP   (EMBER__UNWIND_UC_GREGS + 8u * 15u)
#define EMBER__UNWIND_UC_RIP   (EMBER__UNWIND_UC_GREGS + 8u * 16u)

#endif
