/* Burns CPU in anonymous executable memory, as JIT-compiled code does, so
 * the agent looks its addresses up in the process's perf map, and plants a
 * hostile perf map for it to find: argv[1] seconds to run, argv[2] "fifo"
 * (a FIFO at /tmp/perf-PID.map, which used to block the agent's close
 * thread in open() for good) or "sparse" (a 2 GB sparse file there, which
 * used to be read from the start for every stack). The map is removed at
 * exit. x86-64 only, as the agent. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char map_path[64];

static void cleanup(int sig) {
  unlink(map_path);
  if (sig != 0) _exit(0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  double seconds = strtod(argv[1], NULL);
  snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", (int)getpid());
  unlink(map_path);
  if (strcmp(argv[2], "fifo") == 0) {
    if (mkfifo(map_path, 0644) != 0) return 3;
  } else {
    FILE *f = fopen(map_path, "w");
    if (f == NULL || ftruncate(fileno(f), (off_t)2 << 30) != 0) return 3;
    fclose(f);
  }
  signal(SIGTERM, cleanup);
  /* mov rax, rdi; 1: dec rax; jnz 1b; ret */
  static const unsigned char code[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};
  void *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 4;
  memcpy(mem, code, sizeof code);
  if (mprotect(mem, 4096, PROT_READ | PROT_EXEC) != 0) return 4;
  uint64_t (*spin)(uint64_t) = (uint64_t(*)(uint64_t))mem;
  puts("ready");
  fflush(stdout);
  double end = now_s() + seconds;
  while (now_s() < end) spin(10000000);
  cleanup(0);
  return 0;
}
