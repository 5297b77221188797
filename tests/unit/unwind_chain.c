/* See unwind_chain.h. Built with -O2 -fomit-frame-pointer and no
 * sanitizers (tests/CMakeLists.txt): the frames look like a distribution's
 * binaries, and the stack copy reads redzones ASan would refuse. */
#include "unwind_chain.h"

#include <signal.h>
#include <stdlib.h>

chain_capture_t chain_cap;
uint64_t chain_stack_top;
static volatile int sink;
static volatile int captured;

/* Word by word through a volatile pointer, so no memcpy (which ASan's
 * interceptor would check against stack redzones). */
__attribute__((noinline)) static void copy_stack(uint64_t sp) {
  size_t len = CHAIN_STACK_MAX;
  if (chain_stack_top > sp && chain_stack_top - sp < len) len = (size_t)(chain_stack_top - sp);
  len &= ~(size_t)7;
  const volatile uint64_t *src = (const volatile uint64_t *)(uintptr_t)sp;
  uint64_t *dst = (uint64_t *)(void *)chain_cap.stack;
  for (size_t i = 0; i < len / 8; i++) dst[i] = src[i];
  chain_cap.len = len;
}

/* The registers at this point of the calling function, then its stack. */
#define CAPTURE()                                                                                  \
  do {                                                                                             \
    uint64_t ip_, sp_, bp_;                                                                        \
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"                          \
                     : "=r"(ip_), "=r"(sp_), "=r"(bp_));                                           \
    chain_cap.ip = ip_;                                                                            \
    chain_cap.sp = sp_;                                                                            \
    chain_cap.bp = bp_;                                                                            \
    copy_stack(sp_);                                                                               \
  } while (0)

__attribute__((noinline)) int chain_leaf(int x) {
  volatile int local[8];
  for (int i = 0; i < 8; i++) local[i] = x + i;
  CAPTURE();
  return local[3] + sink;
}

__attribute__((noinline)) int chain_b(int x) {
  int r = chain_leaf(x + 1);
  return r * 3 + sink;
}

__attribute__((noinline)) int chain_a(int x) {
  int r = chain_b(x * 2);
  return r + 7 + sink;
}

__attribute__((noinline)) int chain_main(int x) {
  int r = chain_a(x + 5);
  return r - 1 + sink;
}

__attribute__((noinline)) int chain_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  if (!captured) {
    captured = 1;
    CAPTURE();
  }
  return (x > y) - (x < y);
}

__attribute__((noinline)) int chain_qsort(void) {
  int v[64];
  for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
  captured = 0;
  qsort(v, 64, sizeof v[0], chain_cmp);
  return v[0] + sink;
}

void chain_on_signal(int sig) {
  (void)sig;
  CAPTURE();
}

__attribute__((noinline)) int chain_signal(void) {
  int r = raise(SIGALRM);
  return r + sink;
}
