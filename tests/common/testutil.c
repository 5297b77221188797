#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/codec.h"
#include "ember/wire.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/sign.h"
#include "ember/store.h"
#include "ember_v2.pb-c.h"
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

/* Children still running when the test program ends (a failed assertion
 * jumps past the test's own cleanup) are killed at exit, so a failed test
 * never leaves daemons behind to load the machine for the tests after it. */
#define TU_MAX_SPAWNED 512
static pid_t spawned[TU_MAX_SPAWNED];
static size_t nspawned;

static void forget(pid_t pid) {
  for (size_t i = 0; i < nspawned; i++)
    if (spawned[i] == pid) spawned[i] = spawned[--nspawned];
}

bool tu_proc_state(pid_t pid, char *state, int *ppid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *rp = strrchr(buf, ')');
  return rp != NULL && sscanf(rp + 1, " %c %d", state, ppid) == 2;
}

/* Is pid still our child? (It may have been reaped by a plain waitpid and
 * its number reused.) */
static bool our_child(pid_t pid) {
  char st;
  int ppid = -1;
  return tu_proc_state(pid, &st, &ppid) && ppid == (int)getpid();
}

static void kill_leftovers(void) {
  for (size_t i = 0; i < nspawned; i++) {
    if (!our_child(spawned[i])) continue;
    kill(spawned[i], SIGKILL);
    waitpid(spawned[i], NULL, 0);
  }
  nspawned = 0;
}

pid_t tu_spawn(const char *const *argv, const char *const *env, const char *log_path) {
  static bool registered;
  if (!registered) registered = atexit(kill_leftovers) == 0;
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
  if (nspawned < TU_MAX_SPAWNED) spawned[nspawned++] = pid;
  return pid;
}

int tu_wait_cpu(pid_t pid, int timeout_ms, double *cpu_seconds) {
  for (int waited = 0;; waited += 20) {
    int status;
    struct rusage ru;
    pid_t r = wait4(pid, &status, WNOHANG, &ru);
    if (r == pid) {
      forget(pid);
      if (cpu_seconds != NULL)
        *cpu_seconds = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
      return status;
    }
    if (waited >= timeout_ms) return -1;
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL);
  }
}

int tu_wait(pid_t pid, int timeout_ms) { return tu_wait_cpu(pid, timeout_ms, NULL); }

void tu_kill(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  forget(pid);
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
  int64_t *ts; /* NULL unless timestamps were asked for */
  bool want_ts;
  uint32_t *ver; /* NULL unless versions were asked for */
  bool want_ver;
  size_t n, cap;
} profiles_acc_t;

static bool on_profile_message(void *ctx, const rd_kafka_message_t *m) {
  profiles_acc_t *acc = ctx;
  ember_profile_t *p = NULL;
  char err[512];
  /* A message that does not decode cannot be attributed to a host: the
   * collector's DLQ tests put such messages on the shared topic on
   * purpose. A broken agent still fails its test, by the windows missing. */
  if (ember_codec_decode(m->payload, m->len, NULL, &p, err, sizeof err) != 0) {
    print_message("skipped a message on %s that does not decode: %s\n", EMBER_TOPIC_PROFILES, err);
    return false;
  }
  const char *h = ember_profile_labels(p)->host;
  if (h == NULL || strcmp(h, acc->host) != 0) {
    ember_profile_free(p);
    return false;
  }
  if (acc->n == acc->cap) {
    acc->cap = acc->cap ? acc->cap * 2 : 64;
    acc->res = realloc(acc->res, acc->cap * sizeof *acc->res);
    assert_non_null(acc->res);
    if (acc->want_ts) {
      acc->ts = realloc(acc->ts, acc->cap * sizeof *acc->ts);
      assert_non_null(acc->ts);
    }
    if (acc->want_ver) {
      acc->ver = realloc(acc->ver, acc->cap * sizeof *acc->ver);
      assert_non_null(acc->ver);
    }
  }
  if (acc->want_ver) acc->ver[acc->n] = ember_wire_peek_version(m->payload, m->len);
  if (acc->want_ts) {
    rd_kafka_timestamp_type_t tstype;
    acc->ts[acc->n] = rd_kafka_message_timestamp(m, &tstype);
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

size_t tu_consume_profiles_ts(const char *brokers, const char *host, int idle_ms, int max_ms,
                              ember_profile_t ***out, int64_t **ts_ms) {
  profiles_acc_t acc = {.host = host, .want_ts = true};
  consume(brokers, EMBER_TOPIC_PROFILES, idle_ms, max_ms, on_profile_message, &acc);
  *out = acc.res;
  *ts_ms = acc.ts;
  return acc.n;
}

size_t tu_consume_profiles_v(const char *brokers, const char *host, int idle_ms, int max_ms,
                             ember_profile_t ***out, uint32_t **versions) {
  profiles_acc_t acc = {.host = host, .want_ver = true};
  consume(brokers, EMBER_TOPIC_PROFILES, idle_ms, max_ms, on_profile_message, &acc);
  *out = acc.res;
  *versions = acc.ver;
  return acc.n;
}

static bool str_eq_null(const char *a, const char *b) {
  if (a == NULL || b == NULL) return a == b;
  return strcmp(a, b) == 0;
}

static bool frames_equal(const ember_frame_t *a, const ember_frame_t *b) {
  return str_eq_null(a->function, b->function) && str_eq_null(a->file, b->file) &&
         str_eq_null(a->module, b->module) && str_eq_null(a->build_id, b->build_id) &&
         str_eq_null(a->generated, b->generated) && a->address == b->address &&
         a->line == b->line && a->kind == b->kind;
}

void tu_assert_profiles_equal(const ember_profile_t *a, const ember_profile_t *b) {
  assert_int_equal(ember_profile_ntypes(a), ember_profile_ntypes(b));
  assert_int_equal(ember_profile_nstacks(a), ember_profile_nstacks(b));
  for (uint32_t s = 0; s < ember_profile_nstacks(a); s++) {
    const uint32_t *ia, *ib;
    size_t da, db;
    const int64_t *va, *vb;
    ember_profile_stack(a, s, &ia, &da, &va);
    ember_profile_stack(b, s, &ib, &db, &vb);
    assert_int_equal(da, db);
    for (size_t i = 0; i < da; i++)
      assert_true(frames_equal(ember_profile_frame(a, ia[i]), ember_profile_frame(b, ib[i])));
    for (size_t v = 0; v < ember_profile_ntypes(a); v++) assert_int_equal(va[v], vb[v]);
  }
}

static void *blocks_alloc(void *data, size_t size) {
  tu_blocks_t *a = data;
  assert_true(a->n < sizeof a->b / sizeof a->b[0]);
  return a->b[a->n++] = malloc(size);
}

static void blocks_nofree(void *data, void *ptr) {
  (void)data;
  (void)ptr;
}

ProtobufCAllocator tu_blocks_allocator(tu_blocks_t *blocks) {
  blocks->n = 0;
  return (ProtobufCAllocator){blocks_alloc, blocks_nofree, blocks};
}

void tu_blocks_free(tu_blocks_t *blocks) {
  for (size_t i = 0; i < blocks->n; i++) free(blocks->b[i]);
  blocks->n = 0;
}

/* n u64s from `alloc` (NULL: malloc), a copy of `src`. */
static uint64_t *copy_u64(const uint64_t *src, size_t n, ProtobufCAllocator *alloc) {
  size_t bytes = (n ? n : 1) * sizeof *src;
  uint64_t *h = alloc ? alloc->alloc(alloc->allocator_data, bytes) : malloc(bytes);
  assert_non_null(h);
  if (n) memcpy(h, src, n * sizeof *src);
  return h;
}

void tu_v2_add_hashes(Ember__Wire__V2__Profile *m, int which, ProtobufCAllocator *alloc) {
  size_t n = ember__wire__v2__profile__get_packed_size(m);
  uint8_t *buf = malloc(n + 6);
  assert_non_null(buf);
  ember__wire__v2__profile__pack(m, buf);
  /* The end mark (field 30, fixed32) if the message has none: packing
   * leaves a nonzero one in. */
  if (m->end_mark == 0) {
    static const uint8_t mark[6] = {0xf5, 0x01, 0x52, 0x42, 0x4d, 0x45};
    memcpy(buf + n, mark, sizeof mark);
    n += sizeof mark;
  }
  ember_wire_t *w = NULL;
  char err[256] = "";
  if (ember_wire_decode(buf, n, NULL, &w, err, sizeof err) != 0)
    fail_msg("tu_v2_add_hashes: %s", err);
  /* The wire's hashes of the content. */
  uint64_t *lh = calloc(w->nlocations + 1, sizeof *lh), *sh = calloc(w->nsamples + 1, sizeof *sh);
  assert_true(lh != NULL && sh != NULL);
  for (size_t i = 0; i < w->nlocations; i++) lh[i] = ember_wire_location_hash_at(w, i);
  for (size_t i = 0; i < w->nsamples; i++) {
    uint64_t stack[EMBER_MAX_STACK_DEPTH];
    for (size_t d = 0; d < w->depth[i]; d++) stack[d] = lh[w->locs[w->stack_off[i] + d]];
    sh[i] = ember_wire_stack_hash(stack, w->depth[i]);
  }
  if (which & TU_LOCATION_HASHES) {
    m->location_hash = copy_u64(lh, w->nlocations, alloc);
    m->n_location_hash = w->nlocations;
  }
  if (which & TU_STACK_HASHES) {
    m->stack_hash = copy_u64(sh, w->nsamples, alloc);
    m->n_stack_hash = w->nsamples;
  }
  free(lh);
  free(sh);
  ember_wire_free(w);
  free(buf);
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

void tu_store_path(char *buf, size_t size, const char *what, const char *name) {
  snprintf(buf, size, "%s/store_%s_%s_%ld.lmdb", EMBER_TEST_TMP, what, name, (long)getpid());
}

void tu_store_remove(const char *path) {
  char lock[PATH_MAX];
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(path);
  unlink(lock);
}

ember_store_t *tu_store_open(const char *path, size_t map_size) {
  ember_store_opts_t o = {.map_size = map_size, .no_sync = true};
  ember_store_t *s = NULL;
  char err[256];
  if (ember_store_open(path, &o, &s, err, sizeof err) != 0) fail_msg("open %s: %s", path, err);
  return s;
}

int tu_http(unsigned port, const char *method, const char *path, const char *headers,
            const char *body, char *out, size_t size) {
  return tu_http_n(port, method, path, headers, body, out, size, NULL);
}

int tu_http_n(unsigned port, const char *method, const char *path, const char *headers,
              const char *body, char *out, size_t size, size_t *out_len) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t blen = body ? strlen(body) : 0;
  char *req = NULL;
  int n = asprintf(&req, "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%sContent-Length: %zu\r\n\r\n%s",
                   method, path, headers ? headers : "", blen, body ? body : "");
  if (n < 0) {
    close(fd);
    return -1;
  }
  bool sent = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && write(fd, req, (size_t)n) == n;
  free(req);
  size_t got = 0, cap = 1 << 16;
  char *resp = sent ? malloc(cap + 1) : NULL;
  ssize_t r = 0;
  while (resp != NULL && (r = read(fd, resp + got, cap - got)) > 0) {
    got += (size_t)r;
    if (got == cap) {
      char *bigger = realloc(resp, 2 * cap + 1);
      if (bigger == NULL) break;
      resp = bigger;
      cap *= 2;
    }
  }
  close(fd);
  if (resp == NULL) return -1;
  resp[got] = '\0';
  int status = -1;
  const char *b = strstr(resp, "\r\n\r\n");
  if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1) status = -1;
  size_t blen2 = status != -1 && b ? got - (size_t)(b + 4 - resp) : 0;
  if (out != NULL && size > 0) {
    size_t k = blen2 < size - 1 ? blen2 : size - 1;
    if (k) memcpy(out, b + 4, k);
    out[k] = '\0';
    if (out_len != NULL) *out_len = k;
  }
  free(resp);
  return status;
}

int tu_http_get(unsigned port, const char *path, char *buf, size_t size) {
  return tu_http(port, "GET", path, NULL, NULL, buf, size);
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

int64_t tu_profile_samples(uint64_t seq) { return (int64_t)(seq % 7) + 1; }

ember_profile_t *tu_profile(const char *agent, uint64_t seq, const char *worker, const char *host,
                            int64_t start_ns) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  ember_labels_t labels = {.worker = worker, .version = "1.0", .host = host, .pid = 4242};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  assert_int_equal(ember_profile_set_window(p, start_ns, start_ns + 10000000000LL), 0);
  ember_profile_set_period(p, 10000000);
  const ember_frame_t a[2] = {
      {.function = "work_a",
       .module = "/usr/bin/tu",
       .address = 0x1200,
       .kind = EMBER_FRAME_NATIVE},
      {.function = "main", .module = "/usr/bin/tu", .address = 0x1000, .kind = EMBER_FRAME_NATIVE}};
  const ember_frame_t b[2] = {{.function = "work_b",
                               .module = "/usr/bin/tu",
                               .address = 0x1400,
                               .kind = EMBER_FRAME_NATIVE},
                              a[1]};
  int64_t n = tu_profile_samples(seq);
  const int64_t va[2] = {n, n * 10000000};
  const int64_t vb[2] = {1, 10000000};
  assert_int_equal(ember_profile_add(p, a, 2, va), 0);
  assert_int_equal(ember_profile_add(p, b, 2, vb), 0);
  return p;
}

tu_dr_tally_t tu_produce(const char *brokers, const char *topic, const char *key,
                         const void *const *values, const size_t *lens, size_t n) {
  tu_dr_tally_t tally = {0};
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err) != RD_KAFKA_CONF_OK ||
      rd_kafka_conf_set(conf, "linger.ms", "5", err, sizeof err) != RD_KAFKA_CONF_OK)
    fail_msg("producer conf: %s", err);
  rd_kafka_conf_set_dr_msg_cb(conf, tu_on_delivery);
  rd_kafka_conf_set_opaque(conf, &tally);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == NULL) fail_msg("producer: %s", err);
  for (size_t i = 0; i < n; i++) {
    rd_kafka_resp_err_t e;
    while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_KEY(key, key ? strlen(key) : 0),
                                  RD_KAFKA_V_VALUE((void *)(uintptr_t)values[i], lens[i]),
                                  RD_KAFKA_V_END)) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
      rd_kafka_poll(rk, 100);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) fail_msg("produce: %s", rd_kafka_err2str(e));
    rd_kafka_poll(rk, 0);
  }
  rd_kafka_flush(rk, 60000);
  rd_kafka_destroy(rk);
  return tally;
}

void tu_produce_js(const char *brokers, const char *worker, const char *version, const char *host,
                   const char *agent, uint64_t seq, int64_t start_ns, int64_t na, int64_t nb) {
  static const ember_value_type_t vt[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(vt, 2, &p), 0);
  ember_labels_t l = {.worker = worker, .version = version, .host = host, .pid = 7};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start_ns, start_ns + 10000000000LL), 0);
  ember_profile_set_period(p, 10000000);
  assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  ember_frame_t fa = {.function = TU_V8_A, .module = "/tmp/perf-7.map", .kind = EMBER_FRAME_JIT};
  ember_frame_t fb = {.function = TU_V8_B, .module = "/tmp/perf-7.map", .kind = EMBER_FRAME_JIT};
  ember_frame_t main_f = {.function = "main", .module = "/usr/bin/node"};
  ember_frame_t sa[] = {fa, main_f}, sb[] = {fb, main_f};
  int64_t va[] = {na, na * 10000000}, vb[] = {nb, nb * 10000000};
  assert_int_equal(ember_profile_add(p, sa, 2, va), 0);
  assert_int_equal(ember_profile_add(p, sb, 2, vb), 0);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  assert_int_equal(ember_codec_encode_v2(p, &b), 0);
  const void *v[] = {b.data};
  size_t len[] = {b.len};
  assert_int_equal(tu_produce(brokers, EMBER_TOPIC_PROFILES, worker, v, len, 1).ok, 1);
  ember_buf_free(&b);
  ember_profile_free(p);
}

tu_dr_tally_t tu_produce_command(const char *brokers, const char *host, const void *value,
                                 size_t len, const char *key_id, const char *mac) {
  tu_dr_tally_t tally = {0};
  char err[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof err) != RD_KAFKA_CONF_OK)
    fail_msg("producer conf: %s", err);
  rd_kafka_conf_set_dr_msg_cb(conf, tu_on_delivery);
  rd_kafka_conf_set_opaque(conf, &tally);
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (rk == NULL) fail_msg("producer: %s", err);
  rd_kafka_headers_t *h = rd_kafka_headers_new(2);
  if (key_id != NULL) rd_kafka_header_add(h, EMBER_SIGN_HEADER_KEY, -1, key_id, -1);
  if (mac != NULL) rd_kafka_header_add(h, EMBER_SIGN_HEADER_MAC, -1, mac, -1);
  rd_kafka_resp_err_t e = rd_kafka_producev(
      rk, RD_KAFKA_V_TOPIC(EMBER_TOPIC_COMMANDS), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_KEY(host, strlen(host)), RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
      RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(h); /* not taken over on failure */
    fail_msg("produce: %s", rd_kafka_err2str(e));
  }
  rd_kafka_flush(rk, 60000);
  rd_kafka_destroy(rk);
  return tally;
}

static char command_key_path[600];

const char *tu_command_key_file(void) {
  if (command_key_path[0] == '\0') {
    char err[512];
    snprintf(command_key_path, sizeof command_key_path, "%s/command-%d.key", EMBER_TEST_TMP,
             (int)getpid());
    unlink(command_key_path); /* a pid reused from an earlier run */
    if (ember_sign_key_create(command_key_path, err, sizeof err) != 0)
      fail_msg("command key: %s", err);
  }
  return command_key_path;
}

const char *tu_command_key_arg(void) {
  static char arg[700];
  snprintf(arg, sizeof arg, "command_key_file=%s", tu_command_key_file());
  return arg;
}

int64_t tu_produce_profiles(const char *brokers, const char *agent, uint64_t first_seq, size_t n,
                            const char *worker, const char *host, int64_t base_ns) {
  const void **values = calloc(n ? n : 1, sizeof *values);
  size_t *lens = calloc(n ? n : 1, sizeof *lens);
  ember_buf_t *bufs = calloc(n ? n : 1, sizeof *bufs);
  assert_non_null(values);
  assert_non_null(lens);
  assert_non_null(bufs);
  int64_t samples = 0;
  for (size_t i = 0; i < n; i++) {
    ember_profile_t *p =
        tu_profile(agent, first_seq + i, worker, host, base_ns + (int64_t)i * 10000000000LL);
    ember_buf_init(&bufs[i], 1 << 20);
    assert_int_equal(ember_codec_encode(p, &bufs[i]), 0);
    samples += ember_profile_total(p, 0);
    ember_profile_free(p);
    values[i] = bufs[i].data;
    lens[i] = bufs[i].len;
  }
  tu_dr_tally_t t = tu_produce(brokers, EMBER_TOPIC_PROFILES, worker, values, lens, n);
  if (t.ok != n)
    fail_msg("delivered %zu of %zu profiles (%s)", t.ok, n, rd_kafka_err2str(t.first_err));
  for (size_t i = 0; i < n; i++) ember_buf_free(&bufs[i]);
  free(bufs);
  free(lens);
  free(values);
  return samples;
}

unsigned tu_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  close(fd);
  return ntohs(sa.sin_port);
}

int tu_private_mounts(void) {
  if (unshare(CLONE_NEWNS) != 0) return -errno;
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -errno;
  return 0;
}

unsigned tu_logged_port(const char *log_path, int timeout_ms) {
  for (int waited = 0;; waited += 100) {
    FILE *f = fopen(log_path, "r");
    char line[2048];
    unsigned port = 0;
    while (f && fgets(line, sizeof line, f)) {
      const char *p = strstr(line, "(port ");
      if (p && sscanf(p, "(port %u)", &port) == 1) break;
    }
    if (f) fclose(f);
    if (port) return port;
    if (waited >= timeout_ms) break;
    usleep(100000);
  }
  fail_msg("no listening port logged in %s after %d ms", log_path, timeout_ms);
  return 0;
}

double tu_metric(unsigned port, const char *name) {
  static char body[1 << 18];
  if (tu_http_get(port, "/metrics", body, sizeof body) != 200) return -1;
  size_t len = strlen(name);
  for (const char *l = body; l != NULL && *l != '\0';) {
    double v;
    if (strncmp(l, name, len) == 0 && l[len] == ' ' && sscanf(l + len + 1, "%lf", &v) == 1)
      return v;
    l = strchr(l, '\n');
    if (l != NULL) l++;
  }
  return -1;
}

/* The `flat` column of pprof -top's row for function `name`, as printed. */
const char *tu_pprof_flat(const char *out, const char *name, char *flat, size_t size) {
  for (const char *line = out; line != NULL && *line != '\0';) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    size_t nlen = strlen(name);
    if (len > nlen && line[len - nlen - 1] == ' ' && memcmp(line + len - nlen, name, nlen) == 0) {
      const char *s = line;
      while (*s == ' ') s++;
      size_t n = strcspn(s, " ");
      if (n >= size) return NULL;
      memcpy(flat, s, n);
      flat[n] = '\0';
      return flat;
    }
    line = end ? end + 1 : NULL;
  }
  return NULL;
}

/* Run `go tool pprof -top` on `path`; returns malloc'd output. */
char *tu_go_pprof_top(const char *path, const char *sample_index) {
  /* go needs a build cache: its default under $HOME is shared by every
   * build tree and run (the first build of the pprof tool takes ~45 s), so
   * only a HOME-less environment gets one of its own. Never a download. */
  if (getenv("GOCACHE") == NULL && getenv("HOME") == NULL) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/gocache", EMBER_TEST_TMP);
    mkdir(dir, 0755);
    setenv("GOCACHE", dir, 1);
  }
  setenv("GOTOOLCHAIN", "local", 1);
  setenv("GOFLAGS", "", 1);
  char cmd[2048];
  int n =
      snprintf(cmd, sizeof cmd, "'%s' tool pprof -top -symbolize=none -sample_index=%s '%s' 2>&1",
               EMBER_GO_BIN, sample_index, path);
  assert_true(n > 0 && (size_t)n < sizeof cmd);
  FILE *f = popen(cmd, "r");
  assert_non_null(f);
  ember_buf_t out;
  ember_buf_init(&out, 1 << 20);
  char chunk[4096];
  size_t got;
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
    assert_int_equal(ember_buf_append(&out, chunk, got), 0);
  int status = pclose(f);
  char *text = ember_buf_take(&out, NULL);
  if (text == NULL) text = ember_strdup("");
  print_message("$ %s\n%s", cmd, text);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("go tool pprof failed (status %d)", status);
  return text;
}

int64_t tu_pprof_ns(const char *flat) {
  static const struct {
    const char *unit;
    double ns;
  } units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"min", 60e9}, {"hrs", 3600e9}};
  double v;
  char end[8] = "";
  if (sscanf(flat, "%lf%7s", &v, end) < 1) return -1;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcmp(end, units[i].unit) == 0) return (int64_t)(v * units[i].ns + 0.5);
  return -1;
}

int tu_sh(const char *cmd, char *out, size_t size) {
  FILE *f = popen(cmd, "r");
  if (f == NULL) return -1;
  size_t got = 0, n;
  char chunk[4096];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    size_t take = got + n < size ? n : size - 1 - got;
    memcpy(out + got, chunk, take);
    got += take;
  }
  if (size > 0) out[got] = '\0';
  int status = pclose(f);
  return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

pid_t tu_start_collector(const char *brokers, const char *data_dir, const char *group,
                         unsigned port, const char *const *extra, const char *log_path) {
  return tu_start_collector_env(brokers, data_dir, group, port, extra, NULL, log_path);
}

pid_t tu_start_collector_env(const char *brokers, const char *data_dir, const char *group,
                             unsigned port, const char *const *extra, const char *const *env,
                             const char *log_path) {
  char a_brokers[512], a_dir[700], a_group[200], a_listen[64];
  snprintf(a_brokers, sizeof a_brokers, "brokers=%s", brokers);
  snprintf(a_dir, sizeof a_dir, "data_dir=%s", data_dir);
  snprintf(a_group, sizeof a_group, "group_id=%s", group);
  snprintf(a_listen, sizeof a_listen, "api.listen=127.0.0.1:%u", port);
  const char *argv[32] = {EMBER_BINARY_DIR "/collector/ember-collector",
                          a_brokers,
                          a_dir,
                          a_group,
                          a_listen,
                          "retention=0"};
  size_t n = 6;
  for (size_t i = 0; extra != NULL && extra[i] != NULL && n < 31; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t pid = tu_spawn(argv, env, log_path);
  for (int t = 0; t < 300; t++) {
    if (tu_metric(port, "ember_collector_messages_total") >= 0) return pid;
    usleep(100000);
  }
  tu_kill(pid);
  fail_msg("the collector did not serve /metrics within 30 s (log: %s)", log_path);
  return -1;
}

void tu_stop_daemon(pid_t pid, const char *what, const char *log_path) {
  kill(pid, SIGTERM);
  int status = tu_wait(pid, 30000);
  if (status == -1) {
    tu_kill(pid);
    fail_msg("%s did not stop within 30 s of SIGTERM (log: %s)", what, log_path);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("%s exited with status %d (log: %s)", what, status, log_path);
}

int64_t tu_stored_samples(const char *data_dir, const char *worker, int64_t from_ns, int64_t to_ns,
                          int64_t *work_b) {
  char path[800], err[256];
  snprintf(path, sizeof path, "%s/store.lmdb", data_dir);
  ember_store_t *s = NULL;
  ember_store_opts_t so = {.read_only = true};
  if (ember_store_open(path, &so, &s, err, sizeof err) != 0) return -1;
  ember_store_selector_t sel = {.worker = worker};
  ember_profile_t *m = NULL;
  int64_t total = -1;
  if (ember_store_merge(s, &sel, from_ns, to_ns, EMBER_VT_CPU_SAMPLES, &m) == 0) {
    total = ember_profile_total(m, 0);
    if (work_b != NULL) *work_b = tu_self(m, 0, "work_b");
    ember_profile_free(m);
  }
  ember_store_close(s);
  return total;
}

static bool broker_halted;

void tu_broker(const char *verb) {
  const char *sh = getenv("EMBER_TEST_BROKER_SH"), *dir = getenv("EMBER_TEST_BROKER_DIR");
  if (sh == NULL || dir == NULL) fail_msg("run through ctest (EMBER_TEST_BROKER_SH/_DIR unset)");
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' %s '%s' >/dev/null", sh, verb, dir);
  if (system(cmd) != 0) fail_msg("broker.sh %s failed", verb);
  broker_halted = strcmp(verb, "halt") == 0;
}

int tu_broker_teardown(void **state) {
  (void)state;
  /* Leave a running broker for the tests after this one, whatever happened. */
  if (broker_halted) tu_broker("resume");
  return 0;
}

ember_profile_t *tu_merged_worker(ember_profile_t *const *ps, size_t n, const char *worker,
                                  const ember_labels_t **labels) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *m = NULL;
  assert_int_equal(ember_profile_new(types, 2, &m), 0);
  for (size_t i = 0; i < n; i++) {
    const ember_labels_t *l = ember_profile_labels(ps[i]);
    if (l->worker == NULL || strcmp(l->worker, worker) != 0) continue;
    if (labels) *labels = l;
    assert_int_equal(ember_profile_merge(m, ps[i]), 0);
  }
  return m;
}

ember_profile_t *tu_sample_profile(bool more) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  ember_labels_t l = {"api", "1.4.2", "host-a", "room-7", 4242};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, 1700000000000000000, 1700000010000000000), 0);
  ember_profile_set_period(p, 52631578);
  assert_int_equal(ember_profile_set_origin(p, "agent-7", 99, NULL), 0);
  ember_frame_t main_f = {.function = "main",
                          .file = "prog.c",
                          .line = 10,
                          .module = "/usr/bin/prog",
                          .build_id = "0123456789ab"};
  ember_frame_t hot = {.function = "hot",
                       .file = "prog.c",
                       .line = 20,
                       .module = "/usr/bin/prog",
                       .build_id = "0123456789ab"};
  ember_frame_t cold = {.function = "cold", .module = "/usr/bin/prog", .build_id = "0123456789ab"};
  ember_frame_t unresolved = {.module = "/usr/lib/x86_64-linux-gnu/libc.so.6", .address = 0x29d90};
  ember_frame_t kernel = {
      .function = "do_syscall_64", .module = "[kernel]", .kind = EMBER_FRAME_KERNEL};
  ember_frame_t jit = {
      .function = "JS:*fib file.js:1:13", .module = "/tmp/perf-1.map", .kind = EMBER_FRAME_JIT};
  ember_frame_t nothing = {0};
  ember_frame_t s1[] = {hot, main_f};
  ember_frame_t s2[] = {cold, main_f};
  ember_frame_t s3[] = {kernel, unresolved, main_f};
  ember_frame_t s4[] = {jit, jit, nothing};
  int64_t v1[] = {30, 30 * 52631578LL}, v2[] = {10, 10 * 52631578LL}, v3[] = {2, 2}, v4[] = {1, 0};
  assert_int_equal(ember_profile_add(p, s1, 2, v1), 0);
  assert_int_equal(ember_profile_add(p, s2, 2, v2), 0);
  assert_int_equal(ember_profile_add(p, s3, 3, v3), 0);
  assert_int_equal(ember_profile_add(p, s4, 3, v4), 0);
  if (!more) return p;
  ember_frame_t file_only = {.file = "gen.c", .line = 3};
  ember_frame_t s5[] = {file_only, main_f};
  int64_t v5[] = {4, 7};
  assert_int_equal(ember_profile_add(p, s5, 2, v5), 0);
  /* A frame no stack uses: not sent. */
  ember_frame_t unused = {.function = "unused"};
  uint32_t id;
  assert_int_equal(ember_profile_intern_frame(p, &unused, &id), 0);
  return p;
}
