#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "testutil.h"

const char *tu_bootstrap(void) {
  static char addr[256];
  const char *path = getenv("EMBER_TEST_BOOTSTRAP_FILE");
  if (path == NULL) fail_msg("EMBER_TEST_BOOTSTRAP_FILE is not set: run through ctest");
  FILE *f = fopen(path, "r");
  if (f == NULL) fail_msg("cannot read %s: did broker_start run?", path);
  if (fgets(addr, sizeof addr, f) == NULL) addr[0] = '\0';
  fclose(f);
  addr[strcspn(addr, "\r\n")] = '\0';
  if (addr[0] == '\0') fail_msg("%s is empty", path);
  return addr;
}

pid_t tu_spawn(const char *const *argv, const char *const *env, const char *log_path) {
  char *envp[64];
  size_t n = 0;
  static char path_env[4096], home_env[1024];
  snprintf(path_env, sizeof path_env, "PATH=%s",
           getenv("PATH") ? getenv("PATH") : "/usr/local/bin:/usr/bin:/bin");
  snprintf(home_env, sizeof home_env, "HOME=%s", getenv("HOME") ? getenv("HOME") : "/tmp");
  envp[n++] = path_env;
  envp[n++] = home_env;
  for (size_t i = 0; env && env[i] && n < 62; i++) envp[n++] = (char *)(uintptr_t)env[i];
  envp[n] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  const char *out = log_path ? log_path : "/dev/null";
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)(uintptr_t)argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) fail_msg("cannot start %s: %s", argv[0], strerror(rc));
  return pid;
}

int tu_wait(pid_t pid, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    int status;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (waited >= timeout_ms) return -1;
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
}

void tu_kill(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* Read `topic` from the start in a fresh group; fn says whether a message
 * was one the caller wanted. Stops `idle_ms` after the last wanted message
 * (once there was one) or after `max_ms`. */
static void consume(const char *brokers, const char *topic, int idle_ms, int max_ms,
                    bool (*fn)(void *ctx, const rd_kafka_message_t *m), void *ctx) {
  ember_config_t *cfg = NULL;
  ember_kafka_t *k = NULL;
  rd_kafka_t *c = NULL;
  char err[512], group[128];
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", brokers), 0);
  assert_int_equal(ember_kafka_new(cfg, &k, err, sizeof err), 0);
  snprintf(group, sizeof group, "tu-%d-%lld", (int)getpid(), (long long)ember_time_now_ns());
  const char *topics[] = {topic};
  if (ember_kafka_consumer_new(k, group, NULL, topics, 1, &c, err, sizeof err) != 0)
    fail_msg("consumer: %s", err);
  int64_t start = ember_time_mono_ns(), last = 0;
  for (;;) {
    int64_t now = ember_time_mono_ns();
    if ((now - start) / 1000000 > max_ms) break;
    if (last != 0 && (now - last) / 1000000 > idle_ms) break;
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && fn(ctx, m)) last = ember_time_mono_ns();
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  ember_kafka_free(k);
  ember_config_free(cfg);
}

typedef struct profiles_acc {
  const char *host;
  ember_profile_t **res;
  size_t n, cap;
} profiles_acc_t;

static bool on_profile_message(void *ctx, const rd_kafka_message_t *m) {
  profiles_acc_t *acc = ctx;
  ember_profile_t *p = NULL;
  char err[512];
  if (ember_codec_decode(m->payload, m->len, NULL, &p, err, sizeof err) != 0)
    fail_msg("a message on %s does not decode: %s", EMBER_TOPIC_PROFILES, err);
  const char *h = ember_profile_labels(p)->host;
  if (h == NULL || strcmp(h, acc->host) != 0) {
    ember_profile_free(p);
    return false;
  }
  if (acc->n == acc->cap) {
    acc->cap = acc->cap ? acc->cap * 2 : 64;
    acc->res = realloc(acc->res, acc->cap * sizeof *acc->res);
    assert_non_null(acc->res);
  }
  acc->res[acc->n++] = p;
  return true;
}

size_t tu_consume_profiles(const char *brokers, const char *host, int idle_ms, int max_ms,
                           ember_profile_t ***out) {
  profiles_acc_t acc = {.host = host};
  consume(brokers, EMBER_TOPIC_PROFILES, idle_ms, max_ms, on_profile_message, &acc);
  *out = acc.res;
  return acc.n;
}

int64_t tu_self(const ember_profile_t *p, size_t vi, const char *fn) {
  int64_t sum = 0;
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *v;
    ember_profile_stack(p, s, &ids, &depth, &v);
    const ember_frame_t *f = ember_profile_frame(p, ids[0]);
    if (f->function && strcmp(f->function, fn) == 0) sum += v[vi];
  }
  return sum;
}

int64_t tu_total_matching(const ember_profile_t *p, size_t vi, const char *substr) {
  int64_t sum = 0;
  for (uint32_t s = 0; s < ember_profile_nstacks(p); s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *v;
    ember_profile_stack(p, s, &ids, &depth, &v);
    for (size_t i = 0; i < depth; i++) {
      const ember_frame_t *f = ember_profile_frame(p, ids[i]);
      if (f->function && strstr(f->function, substr)) {
        sum += v[vi];
        break;
      }
    }
  }
  return sum;
}

int tu_find_frame(const ember_profile_t *p, const char *substr) {
  for (uint32_t i = 0; i < ember_profile_nframes(p); i++) {
    const ember_frame_t *f = ember_profile_frame(p, i);
    if (f->function && strstr(f->function, substr)) return (int)f->kind;
  }
  return -1;
}

bool tu_which(const char *name, char *buf, size_t size) {
  const char *path = getenv("PATH");
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (char *save = NULL, *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(buf, size, "%s/%s", d, name);
    if (access(buf, X_OK) == 0) return true;
  }
  return false;
}

int tu_http_get(unsigned port, const char *path, char *buf, size_t size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  char req[512];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || write(fd, req, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  static char resp[1 << 20];
  size_t got = 0;
  ssize_t r;
  while (got < sizeof resp - 1 && (r = read(fd, resp + got, sizeof resp - 1 - got)) > 0)
    got += (size_t)r;
  close(fd);
  resp[got] = '\0';
  int status = -1;
  if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) return -1;
  const char *body = strstr(resp, "\r\n\r\n");
  snprintf(buf, size, "%s", body ? body + 4 : "");
  return status;
}

typedef struct targets_cb {
  const char *prefix;
  void (*fn)(void *ctx, const char *key, const void *value, size_t len);
  void *ctx;
} targets_cb_t;

static bool on_target_message(void *ctx, const rd_kafka_message_t *m) {
  targets_cb_t *t = ctx;
  size_t plen = strlen(t->prefix);
  if (m->key_len < plen || memcmp(m->key, t->prefix, plen) != 0) return false;
  char key[512];
  snprintf(key, sizeof key, "%.*s", (int)m->key_len, (const char *)m->key);
  t->fn(t->ctx, key, m->payload, m->len);
  return true;
}

void tu_consume_targets(const char *brokers, const char *prefix, int idle_ms, int max_ms,
                        void (*fn)(void *ctx, const char *key, const void *value, size_t len),
                        void *ctx) {
  targets_cb_t t = {prefix, fn, ctx};
  consume(brokers, EMBER_TOPIC_TARGETS, idle_ms, max_ms, on_target_message, &t);
}

void tu_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  tu_dr_tally_t *t = opaque;
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    t->ok++;
  } else if (t->failed++ == 0) {
    t->first_err = m->err;
  }
}
