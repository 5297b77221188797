/* A process for discovery tests to label: it does nothing but exist.
 *
 * It prints "ready" once it runs (so the test knows exec has completed and
 * /proc shows the new image and environment), then sleeps until killed.
 * With the argument "thread" it first starts and joins a thread, so the
 * process connector reports a thread exit that is not the process's. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void *brief(void *arg) { return arg; }

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "thread") == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, brief, NULL) != 0) return 1;
    pthread_join(t, NULL);
  }
  fputs("ready\n", stdout);
  fflush(stdout);
  for (;;) pause();
}
