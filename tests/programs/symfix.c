/* A fixture for the symbolizer tests: functions with known names, real
 * return addresses that the program captures itself, and the source lines
 * of its calls (each recorded on the line of the call, in one expression
 * so formatting cannot split them), so a test can check names, DWARF lines and inline frames
 * exactly.
 *
 *   symfix          print "key value" lines (pid, addresses, lines), then
 *                   "ready", then sleep until killed
 *   symfix spin     the same, then call gamma_root -> beta_middle ->
 *                   alpha_leaf forever (for samplers)
 *
 * Addresses are printed with %p; return addresses come from
 * __builtin_return_address(0), so a stack walk would give the same. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void *ret_alpha;  /* alpha_leaf's return address: inside beta_middle */
static void *ret_beta;   /* beta_middle's: inside gamma_root */
static void *ret_gamma;  /* gamma_root's: inside main */
static void *ret_inline; /* probe's: inside inl_a, inlined into inl_b, into inl_outer */
static int line_beta_call, line_gamma_call, line_main_call;
static int line_probe_call, line_inl_a_call, line_inl_b_call;
static volatile unsigned long sink;

enum { LINE_ALPHA = __LINE__ + 1 };
__attribute__((noinline)) int alpha_leaf(int x) {
  ret_alpha = __builtin_return_address(0);
  unsigned long v = 0;
  for (int i = 0; i < x; i++) v += (unsigned long)i * 7u + sink;
  sink = v;
  return (int)(v & 0xff);
}

__attribute__((noinline)) int beta_middle(int x) {
  ret_beta = __builtin_return_address(0);
  int r = (line_beta_call = __LINE__, alpha_leaf(x + 1));
  return r + 1;
}

__attribute__((noinline)) int gamma_root(int x) {
  ret_gamma = __builtin_return_address(0);
  int r = (line_gamma_call = __LINE__, beta_middle(x * 2));
  return r + 2;
}

__attribute__((noinline)) void probe(void) {
  ret_inline = __builtin_return_address(0);
  sink++;
}

/* -fno-inline does not stop always_inline: these two become inline frames
 * of inl_outer. */
static inline __attribute__((always_inline)) void inl_a(void) {
  (line_probe_call = __LINE__, probe());
  sink += 3;
}

static inline __attribute__((always_inline)) void inl_b(void) {
  (line_inl_a_call = __LINE__, inl_a());
  sink += 5;
}

__attribute__((noinline)) void inl_outer(void) {
  (line_inl_b_call = __LINE__, inl_b());
  sink += 7;
}

int main(int argc, char **argv) {
  int spin = argc > 1 && strcmp(argv[1], "spin") == 0;
  (line_main_call = __LINE__, gamma_root(10));
  inl_outer();
  /* Anonymous executable memory, as a JIT would have: tests name code in it
   * through a perf map. */
  void *jit = mmap(NULL, 65536, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (jit == MAP_FAILED) jit = NULL;
  printf("pid %d\n", (int)getpid());
  printf("alpha %p\nbeta %p\ngamma %p\ninl_outer %p\n", (void *)alpha_leaf, (void *)beta_middle,
         (void *)gamma_root, (void *)inl_outer);
  printf("ret_alpha %p\nret_beta %p\nret_gamma %p\nret_inline %p\n", ret_alpha, ret_beta, ret_gamma,
         ret_inline);
  printf("line_alpha %d\nline_beta_call %d\nline_gamma_call %d\nline_main_call %d\n",
         (int)LINE_ALPHA, line_beta_call, line_gamma_call, line_main_call);
  printf("line_probe_call %d\nline_inl_a_call %d\nline_inl_b_call %d\n", line_probe_call,
         line_inl_a_call, line_inl_b_call);
  printf("getpid %p\n", dlsym(RTLD_DEFAULT, "getpid"));
  printf("jit %p\n", jit);
  printf("ready\n");
  fflush(stdout);
  if (spin) {
    for (;;) gamma_root(1000);
  }
  for (;;) pause();
}
