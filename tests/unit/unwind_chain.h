/* A call chain built -O2 -fomit-frame-pointer without sanitizers
 * (unwind_chain.c), whose innermost function captures its own registers
 * and a copy of its stack, as a perf sample would: test_unwind.c unwinds
 * that copy with CFI. */
#ifndef EMBER_TEST_UNWIND_CHAIN_H
#define EMBER_TEST_UNWIND_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#define CHAIN_STACK_MAX (64u * 1024u)

typedef struct chain_capture {
  uint64_t ip, sp, bp;
  size_t len;
  uint8_t stack[CHAIN_STACK_MAX];
} chain_capture_t;

/* Filled by the capturing functions below. */
extern chain_capture_t chain_cap;
/* The top of the stack mapping (set by the test before a chain runs): the
 * copy stops there. */
extern uint64_t chain_stack_top;

/* chain_main -> chain_a -> chain_b -> chain_leaf; the leaf captures. */
int chain_main(int x);
int chain_a(int x);
int chain_b(int x);
int chain_leaf(int x);
/* chain_qsort -> qsort (libc) -> chain_cmp; the comparator captures. */
int chain_qsort(void);
int chain_cmp(const void *a, const void *b);
/* chain_signal -> raise -> (kernel) -> chain_on_signal; the handler
 * captures. The test installs chain_on_signal for SIGALRM. */
int chain_signal(void);
void chain_on_signal(int sig);

#endif
