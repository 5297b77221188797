/* The publisher (agent/publish.c) on the embedded (mock) Kafka cluster:
 * normal delivery, an outage that fills the spool and its replay, the
 * spool bound, a spool handed from one run to the next, damaged spool
 * files, and ember.targets records with tombstones.
 *
 * Every window is an encoded profile carrying (agent_id, seq). The 2.0.2
 * mock can store a retried batch twice even with idempotence, so the
 * readers here dedupe by seq, as real consumers do, and check that the set
 * of seqs is exactly the one published. Readers use assign(), not a group,
 * to skip the mock's fixed 3 s group join. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/profile.h"
#include "publish.h"

#define TEST_NWORKERS 3u
#define TEST_MAX_SEQ  256u

/* ------------------------------------------------------------ helpers -- */

static int64_t ms_since(int64_t t0) { return (ember_time_mono_ns() - t0) / 1000000; }

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* An embedded cluster of our own. Reconnects are capped at 500 ms so a
 * broker brought back up is found quickly. */
static ember_kafka_t *kafka_embedded(void) {
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "client_id", "ember-test-publish"), 0);
  assert_int_equal(ember_config_set(cfg, "kafka.linger.ms", "5"), 0);
  assert_int_equal(ember_config_set(cfg, "kafka.reconnect.backoff.max.ms", "500"), 0);
  ember_kafka_t *k = NULL;
  char err[512] = "";
  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  ember_config_free(cfg);
  if (rc != 0) fail_msg("ember_kafka_new: %s (%s)", ember_strerror(rc), err);
  assert_non_null(ember_kafka_mock(k));
  return k;
}

/* Remove a directory holding only files and (one level of) directories. */
static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (unlink(path) != 0 && errno == EISDIR) rm_rf(path);
  }
  closedir(d);
  rmdir(dir);
}

static void spool_dir_for(const char *test, char *out, size_t size) {
  snprintf(out, size, "%s/publish-%ld-%s", EMBER_TEST_TMP, (long)getpid(), test);
  rm_rf(out);
}

/* Names of the *.msg files in `dir`, sorted; returns how many. */
static size_t spool_files(const char *dir, char names[][64], size_t max) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len < 4 || strcmp(de->d_name + len - 4, ".msg") != 0) continue;
    if (n < max) snprintf(names[n], 64, "%.63s", de->d_name);
    n++;
  }
  closedir(d);
  size_t m = n < max ? n : max;
  for (size_t i = 1; i < m; i++) {
    for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
      char t[64];
      memcpy(t, names[j], 64);
      memcpy(names[j], names[j - 1], 64);
      memcpy(names[j - 1], t, 64);
    }
  }
  return n;
}

static bool file_exists(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Window `seq` of `agent`, encoded: key w<seq % 3>. */
static void encode_window(const char *agent, uint64_t seq, ember_buf_t *out, char *key,
                          size_t key_size) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 1, &p), 0);
  snprintf(key, key_size, "w%u", (unsigned)(seq % TEST_NWORKERS));
  ember_labels_t labels = {.worker = key, .host = "host-u", .pid = 1000u + (uint32_t)seq};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  assert_int_equal(ember_profile_set_origin(p, agent, seq, NULL), 0);
  int64_t start = INT64_C(1700000000000000000) + (int64_t)seq * 10000000000;
  assert_int_equal(ember_profile_set_window(p, start, start + 10000000000), 0);
  const ember_frame_t frames[2] = {
      {.function = "work", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
      {.function = "main", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
  };
  const int64_t v[1] = {(int64_t)seq + 1};
  assert_int_equal(ember_profile_add(p, frames, 2, v), 0);
  ember_buf_reset(out);
  assert_int_equal(ember_codec_encode(p, out), 0);
  ember_profile_free(p);
}

static void publish_window(ember__publisher_t *p, const char *agent, uint64_t seq) {
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  char key[16];
  encode_window(agent, seq, &b, key, sizeof key);
  assert_int_equal(ember__publisher_publish(p, key, b.data, b.len), 0);
  ember_buf_free(&b);
}

static ember__publisher_t *publisher_new(const ember_kafka_t *k, const char *dir, size_t mem_max,
                                         size_t spool_max, int timeout_ms) {
  ember__publisher_opts_t o = {.kafka = k,
                               .spool_dir = dir,
                               .mem_max_bytes = mem_max,
                               .spool_max_bytes = spool_max,
                               .delivery_timeout_ms = timeout_ms};
  ember__publisher_t *p = NULL;
  char err[512] = "";
  int rc = ember__publisher_new(&o, &p, err, sizeof err);
  if (rc != 0) fail_msg("ember__publisher_new: %s (%s)", ember_strerror(rc), err);
  return p;
}

static ember__publisher_stats_t stats_of(ember__publisher_t *p) {
  ember__publisher_stats_t s;
  ember__publisher_stats(p, &s);
  return s;
}

/* Poll the stats of p until COND (an expression over `s`) holds, or fail
 * after TIMEOUT_MS. */
#define WAIT_FOR(p, s, cond, timeout_ms)                                                           \
  do {                                                                                             \
    int64_t t0_ = ember_time_mono_ns();                                                            \
    for (;;) {                                                                                     \
      (s) = stats_of(p);                                                                           \
      if (cond) break;                                                                             \
      if (ms_since(t0_) > (timeout_ms))                                                            \
        fail_msg("timed out after %d ms waiting for %s (published %llu failed %llu spooled "       \
                 "%llu respooled %llu dropped %llu spool_files %llu)",                             \
                 (int)(timeout_ms), #cond, (unsigned long long)(s).published,                      \
                 (unsigned long long)(s).failed, (unsigned long long)(s).spooled,                  \
                 (unsigned long long)(s).respooled, (unsigned long long)(s).dropped,               \
                 (unsigned long long)(s).spool_files);                                             \
      sleep_ms(20);                                                                                \
    }                                                                                              \
  } while (0)

/* A reader of every partition of `topic` from the beginning, no group. */
static rd_kafka_t *reader_for(const ember_kafka_t *k, const char *topic) {
  rd_kafka_conf_t *conf = NULL;
  char err[512] = "";
  assert_int_equal(ember_kafka_consumer_conf(k, "ember-test-reader", &conf, err, sizeof err), 0);
  rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (c == NULL) fail_msg("consumer: %s", err);
  rd_kafka_poll_set_consumer(c);
  rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
  for (int32_t i = 0; i < 4; i++)
    rd_kafka_topic_partition_list_add(l, topic, i)->offset = RD_KAFKA_OFFSET_BEGINNING;
  assert_int_equal(rd_kafka_assign(c, l), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_destroy(l);
  return c;
}

static void reader_close(rd_kafka_t *c) {
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
}

/* What a reader saw of one agent's windows. */
typedef struct tally {
  unsigned seen[TEST_MAX_SEQ];
  size_t unique, dupes, foreign, bad;
} tally_t;

static void tally_message(tally_t *t, const char *agent, const rd_kafka_message_t *m) {
  ember_profile_t *p = NULL;
  char err[256];
  if (ember_codec_decode(m->payload, m->len, NULL, &p, err, sizeof err) != 0) {
    print_error("cannot decode: %s\n", err);
    t->bad++;
    return;
  }
  const char *a = ember_profile_agent_id(p);
  uint64_t seq = ember_profile_seq(p);
  char key[16];
  snprintf(key, sizeof key, "w%u", (unsigned)(seq % TEST_NWORKERS));
  if (a == NULL || strcmp(a, agent) != 0) {
    t->foreign++;
  } else if (seq >= TEST_MAX_SEQ || m->key_len != strlen(key) ||
             memcmp(m->key, key, m->key_len) != 0 ||
             ember_profile_total(p, 0) != (int64_t)seq + 1) {
    t->bad++;
  } else if (t->seen[seq]++ == 0) {
    t->unique++;
  } else {
    t->dupes++;
  }
  ember_profile_free(p);
}

/* Read `topic` until seqs 0..n-1 of `agent` all arrived (then 300 ms more)
 * or timeout_ms passes; checks the deduped set is exactly 0..n-1. */
static void expect_windows(const ember_kafka_t *k, const char *agent, size_t n, int timeout_ms) {
  tally_t *t = calloc(1, sizeof *t);
  assert_non_null(t);
  rd_kafka_t *c = reader_for(k, EMBER_TOPIC_PROFILES);
  int64_t t0 = ember_time_mono_ns(), done = -1;
  while (ms_since(t0) < timeout_ms) {
    if (t->unique == n && done < 0) done = ms_since(t0);
    if (done >= 0 && ms_since(t0) - done > 300) break;
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) tally_message(t, agent, m);
    rd_kafka_message_destroy(m);
  }
  reader_close(c);
  for (size_t i = 0; i < n; i++) {
    if (t->seen[i] == 0) print_error("%s: seq %zu never arrived\n", agent, i);
  }
  if (t->dupes > 0) print_message("%s: %zu duplicate deliveries (deduped)\n", agent, t->dupes);
  assert_int_equal(t->bad, 0);
  assert_int_equal(t->unique, n);
  for (size_t i = n; i < TEST_MAX_SEQ; i++) assert_int_equal(t->seen[i], 0);
  free(t);
}

/* The documented spool file layout (docs/internals/publish.md): a 20-byte
 * little-endian header (magic "EMSP", u16 version 1, u16 flags 0, u32 key
 * length, u32 value length, u32 crc32 of key then value), key, value. */
static void write_spool_file(const char *dir, const char *name, const void *key, size_t klen,
                             const void *val, size_t vlen, uint32_t crc_xor, size_t cut) {
  unsigned char h[20];
  memcpy(h, "EMSP", 4);
  uint16_t v16 = htole16(1);
  memcpy(h + 4, &v16, 2);
  v16 = 0;
  memcpy(h + 6, &v16, 2);
  uint32_t v32 = htole32((uint32_t)klen);
  memcpy(h + 8, &v32, 4);
  v32 = htole32((uint32_t)vlen);
  memcpy(h + 12, &v32, 4);
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, key, (uInt)klen);
  crc = crc32(crc, val, (uInt)vlen);
  v32 = htole32((uint32_t)crc ^ crc_xor);
  memcpy(h + 16, &v32, 4);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "we");
  assert_non_null(f);
  assert_int_equal(fwrite(h, 1, sizeof h, f), sizeof h);
  assert_int_equal(fwrite(key, 1, klen, f), klen);
  assert_int_equal(fwrite(val, 1, vlen - cut, f), vlen - cut);
  assert_int_equal(fclose(f), 0);
}

/* Read a spool file back with the documented layout; returns the seq of
 * the window in it. */
static uint64_t read_spool_file(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "re");
  assert_non_null(f);
  unsigned char buf[65536];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_true(n >= 20);
  assert_memory_equal(buf, "EMSP", 4);
  uint16_t ver;
  uint32_t klen, vlen, crc;
  memcpy(&ver, buf + 4, 2);
  memcpy(&klen, buf + 8, 4);
  memcpy(&vlen, buf + 12, 4);
  memcpy(&crc, buf + 16, 4);
  assert_int_equal(le16toh(ver), 1);
  klen = le32toh(klen);
  vlen = le32toh(vlen);
  assert_int_equal(n, 20u + klen + vlen);
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, buf + 20, klen + vlen);
  assert_int_equal((uint32_t)c, le32toh(crc));
  ember_profile_t *p = NULL;
  char err[256];
  assert_int_equal(ember_codec_decode(buf + 20 + klen, vlen, NULL, &p, err, sizeof err), 0);
  uint64_t seq = ember_profile_seq(p);
  ember_profile_free(p);
  return seq;
}

/* -------------------------------------------------------------- tests -- */

static void test_publish_rejects_bad_arguments(void **state) {
  (void)state;
  ember__publisher_t *p = NULL;
  char err[256] = "";
  assert_int_equal(ember__publisher_new(NULL, &p, err, sizeof err), -EINVAL);
  ember__publisher_opts_t o = {0};
  assert_int_equal(ember__publisher_new(&o, &p, err, sizeof err), -EINVAL);
  assert_null(p);
  assert_int_equal(ember__publisher_publish(NULL, "k", "v", 1), -EINVAL);
  assert_int_equal(ember__publisher_target(NULL, "k", NULL, 0), -EINVAL);
  ember__publisher_close(NULL, 0);
}

/* Every allocation of ember__publisher_new may fail: -ENOMEM, no leak. */
static void test_publish_new_alloc_failures(void **state) {
  (void)state;
  ember_kafka_t *k = kafka_embedded();
  char dir[512];
  spool_dir_for("alloc", dir, sizeof dir);
  /* A spool to scan, so its allocations are covered too. */
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  char key[16];
  encode_window("pub-alloc", 0, &b, key, sizeof key);
  assert_int_equal(mkdir(dir, 0700), 0);
  write_spool_file(dir, "00000000000000000001.msg", key, strlen(key), b.data, b.len, 0, 0);
  ember_buf_free(&b);
  /* The broker is down so the publisher thread does not replay (and
   * allocate) while the injection is still armed. */
  assert_int_equal(rd_kafka_mock_broker_set_down(ember_kafka_mock(k), 1), 0);
  ember__publisher_opts_t o = {.kafka = k, .spool_dir = dir};
  int rc = -ENOMEM;
  long n;
  for (n = 0; n < 100 && rc != 0; n++) {
    ember__publisher_t *p = NULL;
    char err[256] = "";
    ember_alloc_fail_after(n);
    rc = ember__publisher_new(&o, &p, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) {
      ember__publisher_close(p, 0);
    } else {
      assert_int_equal(rc, -ENOMEM);
      assert_null(p);
      assert_true(err[0] != '\0');
    }
  }
  assert_int_equal(rc, 0);
  print_message("ember__publisher_new needs %ld allocations\n", n - 1);
  assert_int_equal(rd_kafka_mock_broker_set_up(ember_kafka_mock(k), 1), 0);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* (a) 100 windows with a healthy broker: all delivered, nothing spooled. */
static void test_publish_normal(void **state) {
  (void)state;
  enum { N = 100 };
  ember_kafka_t *k = kafka_embedded();
  char dir[512];
  spool_dir_for("normal", dir, sizeof dir);
  ember__publisher_t *p = publisher_new(k, dir, 0, 0, 5000);
  int64_t t0 = ember_time_mono_ns();
  for (uint64_t i = 0; i < N; i++) publish_window(p, "pub-normal", i);
  ember__publisher_stats_t s;
  WAIT_FOR(p, s, s.published == N, 20000);
  print_message("normal: %d windows acknowledged in %lld ms\n", N, (long long)ms_since(t0));
  assert_int_equal(s.failed, 0);
  assert_int_equal(s.spooled, 0);
  assert_int_equal(s.dropped, 0);
  assert_int_equal(s.spool_files, 0);
  assert_int_equal(s.spool_bytes, 0);
  assert_int_equal(s.queue_bytes, 0);
  ember__publisher_close(p, 5000);
  char names[4][64];
  assert_int_equal(spool_files(dir, names, 4), 0);
  expect_windows(k, "pub-normal", N, 20000);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* (b) The broker goes down while windows are published: deliveries time
 * out, the windows are spooled; when it comes back they are replayed and
 * every one arrives, and the spool empties. */
static void test_publish_outage(void **state) {
  (void)state;
  enum { N = 30 };
  ember_kafka_t *k = kafka_embedded();
  rd_kafka_mock_cluster_t *mock = ember_kafka_mock(k);
  char dir[512];
  spool_dir_for("outage", dir, sizeof dir);
  ember__publisher_t *p = publisher_new(k, dir, 0, 0, 1500);
  ember__publisher_stats_t s;
  /* seq 0 before the outage, so the producer is connected and has its
   * producer id when the broker goes away. */
  publish_window(p, "pub-outage", 0);
  WAIT_FOR(p, s, s.published == 1, 10000);

  assert_int_equal(rd_kafka_mock_broker_set_down(mock, 1), 0);
  int64_t t0 = ember_time_mono_ns();
  for (uint64_t i = 1; i < N; i++) {
    publish_window(p, "pub-outage", i);
    sleep_ms(100);
  }
  /* Nothing is lost in memory: each window fails its delivery after
   * 1.5 s and is spooled. */
  WAIT_FOR(p, s, s.spooled >= N - 1 && s.spool_files >= 1, 15000);
  int64_t spool_ms = ms_since(t0);
  char names[64][64];
  size_t nfiles = spool_files(dir, names, 64);
  print_message("outage: %llu windows spooled (%zu files, %llu bytes) %lld ms after the broker "
                "went down\n",
                (unsigned long long)s.spooled, nfiles, (unsigned long long)s.spool_bytes,
                (long long)spool_ms);
  assert_true(nfiles >= 1);
  assert_true(s.failed >= N - 1);
  assert_int_equal(s.dropped, 0);

  assert_int_equal(rd_kafka_mock_broker_set_up(mock, 1), 0);
  t0 = ember_time_mono_ns();
  WAIT_FOR(p, s, s.spool_files == 0 && s.published >= N, 30000);
  print_message("outage: spool drained %lld ms after the broker came back (published %llu, "
                "respooled %llu)\n",
                (long long)ms_since(t0), (unsigned long long)s.published,
                (unsigned long long)s.respooled);
  assert_int_equal(s.spool_bytes, 0);
  assert_int_equal(s.dropped, 0);
  assert_true(s.respooled >= s.spooled);
  assert_int_equal(spool_files(dir, names, 64), 0);
  ember__publisher_close(p, 5000);
  expect_windows(k, "pub-outage", N, 20000);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* (c) A spool bound of about three windows: older windows are dropped and
 * counted, the newest kept. mem_max = 1 sends every window to the spool. */
static void test_publish_spool_bound(void **state) {
  (void)state;
  enum { N = 10 };
  ember_kafka_t *k = kafka_embedded();
  char dir[512];
  spool_dir_for("bound", dir, sizeof dir);
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  char key[16];
  size_t biggest = 0;
  for (uint64_t i = 0; i < N; i++) {
    encode_window("pub-bound", i, &b, key, sizeof key);
    if (20 + strlen(key) + b.len > biggest) biggest = 20 + strlen(key) + b.len;
  }
  ember_buf_free(&b);
  size_t limit = 3 * biggest + biggest / 2;
  /* Broker down: the probe of the oldest file fails, so the spool stays. */
  assert_int_equal(rd_kafka_mock_broker_set_down(ember_kafka_mock(k), 1), 0);
  ember__publisher_t *p = publisher_new(k, dir, 1, limit, 1500);
  for (uint64_t i = 0; i < N; i++) publish_window(p, "pub-bound", i);
  ember__publisher_stats_t s = stats_of(p);
  print_message("bound: limit %zu bytes: spooled %llu, dropped %llu, %llu files kept\n", limit,
                (unsigned long long)s.spooled, (unsigned long long)s.dropped,
                (unsigned long long)s.spool_files);
  assert_int_equal(s.spooled, N);
  assert_true(s.spool_bytes <= limit);
  assert_true(s.spool_files >= 2 && s.spool_files <= 3);
  assert_int_equal(s.dropped + s.spool_files, N);
  char names[16][64];
  size_t n = spool_files(dir, names, 16);
  assert_int_equal(n, s.spool_files);
  /* File names sort in arrival order, and the newest windows are kept. */
  uint64_t prev = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t seq = read_spool_file(dir, names[i]);
    if (i > 0) assert_true(seq > prev);
    prev = seq;
  }
  assert_int_equal(prev, N - 1);
  assert_int_equal(read_spool_file(dir, names[n - 2]), N - 2);

  /* A window larger than the whole spool cannot be kept: -ENOMEM, counted. */
  char *big = calloc(1, limit + 1);
  assert_non_null(big);
  assert_int_equal(ember__publisher_publish(p, "w0", big, limit + 1), -ENOMEM);
  free(big);
  assert_int_equal(stats_of(p).dropped, s.dropped + 1);
  ember__publisher_close(p, 0);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* With a memory bound of one byte every window goes through the spool
 * (written by publish itself) and is replayed from it: all arrive. 150
 * files also take the spool index through growth and compaction. */
static void test_publish_memory_bound(void **state) {
  (void)state;
  enum { N = 150 };
  ember_kafka_t *k = kafka_embedded();
  char dir[512];
  spool_dir_for("membound", dir, sizeof dir);
  ember__publisher_t *p = publisher_new(k, dir, 1, 0, 5000);
  int64_t t0 = ember_time_mono_ns();
  for (uint64_t i = 0; i < N; i++) publish_window(p, "pub-membound", i);
  print_message("membound: %d windows spooled by publish() in %lld ms\n", N,
                (long long)ms_since(t0));
  ember__publisher_stats_t s;
  WAIT_FOR(p, s, s.spool_files == 0 && s.published == N, 30000);
  print_message("membound: all replayed %lld ms after the first publish\n",
                (long long)ms_since(t0));
  assert_int_equal(s.spooled, N);
  assert_int_equal(s.dropped, 0);
  assert_int_equal(s.spool_bytes, 0);
  ember__publisher_close(p, 5000);
  expect_windows(k, "pub-membound", N, 20000);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* (d) Windows still unacknowledged at close (the broker is down) are
 * spooled, and the next publisher on that spool sends them. */
static void test_publish_restart(void **state) {
  (void)state;
  enum { N = 5 };
  ember_kafka_t *k = kafka_embedded();
  rd_kafka_mock_cluster_t *mock = ember_kafka_mock(k);
  char dir[512];
  spool_dir_for("restart", dir, sizeof dir);
  assert_int_equal(rd_kafka_mock_broker_set_down(mock, 1), 0);
  /* The default 10 s delivery timeout: at close the windows are still in
   * librdkafka's queue, not yet failed. */
  ember__publisher_t *p = publisher_new(k, dir, 0, 0, 0);
  for (uint64_t i = 0; i < N; i++) publish_window(p, "pub-restart", i);
  ember__publisher_stats_t s = stats_of(p);
  assert_int_equal(s.spooled, 0);
  int64_t t0 = ember_time_mono_ns();
  ember__publisher_close(p, 500);
  print_message("restart: close with the broker down took %lld ms\n", (long long)ms_since(t0));
  char names[16][64];
  assert_int_equal(spool_files(dir, names, 16), N);

  assert_int_equal(rd_kafka_mock_broker_set_up(mock, 1), 0);
  t0 = ember_time_mono_ns();
  p = publisher_new(k, dir, 0, 0, 5000);
  s = stats_of(p);
  assert_true(s.spool_files <= N);
  WAIT_FOR(p, s, s.spool_files == 0 && s.published == N, 20000);
  print_message("restart: the earlier run's %d windows sent %lld ms after start\n", N,
                (long long)ms_since(t0));
  assert_true(s.respooled >= N);
  assert_int_equal(s.spool_corrupt, 0);
  assert_int_equal(s.dropped, 0);
  ember__publisher_close(p, 5000);
  assert_int_equal(spool_files(dir, names, 16), 0);
  expect_windows(k, "pub-restart", N, 20000);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* (e) A spool with a good file, one with a bad CRC, a truncated one, a
 * half-written .tmp and a stranger: the bad ones are deleted and counted,
 * the good one sent, the stranger left alone. */
static void test_publish_corrupt_spool(void **state) {
  (void)state;
  ember_kafka_t *k = kafka_embedded();
  char dir[512];
  spool_dir_for("corrupt", dir, sizeof dir);
  assert_int_equal(mkdir(dir, 0700), 0);
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  char key[16];
  encode_window("pub-corrupt", 0, &b, key, sizeof key);
  size_t kl = strlen(key);
  write_spool_file(dir, "00000000000000000005.msg", key, kl, b.data, b.len, 0, 0);
  write_spool_file(dir, "00000000000000000006.msg", key, kl, b.data, b.len, 0x1, 0);
  write_spool_file(dir, "00000000000000000007.msg", key, kl, b.data, b.len, 0, 7);
  write_spool_file(dir, "00000000000000000008.tmp", key, kl, b.data, b.len, 0, 3);
  write_spool_file(dir, "00000000000000000009.msg", key, kl, b.data, 0, 0, 0); /* empty value */
  write_spool_file(dir, "README", key, kl, b.data, b.len, 0, 0);
  char path[1024];
  snprintf(path, sizeof path, "%s/00000000000000000010.msg", dir);
  FILE *f = fopen(path, "we"); /* empty: shorter than a header */
  assert_non_null(f);
  fclose(f);

  ember__publisher_t *p = publisher_new(k, dir, 0, 0, 5000);
  ember__publisher_stats_t s = stats_of(p);
  assert_int_equal(s.spool_corrupt, 3);
  assert_false(file_exists(dir, "00000000000000000006.msg"));
  assert_false(file_exists(dir, "00000000000000000007.msg"));
  assert_false(file_exists(dir, "00000000000000000008.tmp"));
  assert_false(file_exists(dir, "00000000000000000010.msg"));
  assert_true(file_exists(dir, "README"));
  /* Two good files: seq 0's window, and one with an empty value (valid as
   * far as the spool is concerned). */
  assert_int_equal(s.spool_files, 2);
  WAIT_FOR(p, s, s.spool_files == 0 && s.published == 2, 20000);
  assert_int_equal(s.spool_corrupt, 3);
  ember__publisher_close(p, 5000);
  assert_true(file_exists(dir, "README"));

  /* Read back: seq 0 arrived; the empty-valued message too. */
  rd_kafka_t *c = reader_for(k, EMBER_TOPIC_PROFILES);
  int64_t t0 = ember_time_mono_ns();
  size_t good = 0, empty = 0;
  while (ms_since(t0) < 15000 && (good == 0 || empty == 0)) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (m->len == 0) {
        empty++;
      } else {
        tally_t t = {0};
        tally_message(&t, "pub-corrupt", m);
        if (t.unique == 1 && t.seen[0] == 1) good++;
      }
    }
    rd_kafka_message_destroy(m);
  }
  reader_close(c);
  assert_true(good >= 1);
  assert_true(empty >= 1);
  ember_buf_free(&b);
  rm_rf(dir);
  ember_kafka_free(k);
}

/* (f) Target records and tombstones go to ember.targets, unspooled. */
static void test_publish_targets(void **state) {
  (void)state;
  ember_kafka_t *k = kafka_embedded();
  ember__publisher_t *p = publisher_new(k, NULL, 0, 0, 5000);
  static const char value[] = "target-record-bytes";
  assert_int_equal(ember__publisher_target(p, "host-u/42", value, sizeof value - 1), 0);
  assert_int_equal(ember__publisher_target(p, "host-u/42", NULL, 0), 0);
  assert_int_equal(ember__publisher_target(p, "host-u/43", value, 3), 0);
  ember__publisher_stats_t s;
  WAIT_FOR(p, s, s.targets_sent == 3, 10000);
  assert_int_equal(s.targets_failed, 0);
  assert_int_equal(s.published, 0);
  assert_int_equal(s.spooled, 0);
  assert_int_equal(ember__publisher_target(p, NULL, NULL, 0), -EINVAL);
  assert_int_equal(ember__publisher_target(p, "k", NULL, 5), -EINVAL);
  ember__publisher_close(p, 5000);

  rd_kafka_t *c = reader_for(k, EMBER_TOPIC_TARGETS);
  int64_t t0 = ember_time_mono_ns();
  int order = 0; /* 1 after the record for /42, 2 after its tombstone */
  bool other = false;
  while (ms_since(t0) < 15000 && (order < 2 || !other)) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (m->key_len == 9 && memcmp(m->key, "host-u/42", 9) == 0) {
        if (order == 0) {
          assert_int_equal(m->len, sizeof value - 1);
          assert_memory_equal(m->payload, value, m->len);
          order = 1;
        } else if (order == 1) {
          /* A tombstone is a NULL value, not an empty one. */
          assert_null(m->payload);
          assert_int_equal(m->len, 0);
          order = 2;
        }
      } else if (m->key_len == 9 && memcmp(m->key, "host-u/43", 9) == 0) {
        assert_int_equal(m->len, 3);
        other = true;
      }
    }
    rd_kafka_message_destroy(m);
  }
  reader_close(c);
  assert_int_equal(order, 2);
  assert_true(other);
  ember_kafka_free(k);
}

/* Without a spool, an outage drops windows: counted, never a crash, and
 * publish still returns at once. */
static void test_publish_no_spool_outage(void **state) {
  (void)state;
  enum { N = 5 };
  ember_kafka_t *k = kafka_embedded();
  assert_int_equal(rd_kafka_mock_broker_set_down(ember_kafka_mock(k), 1), 0);
  ember__publisher_t *p = publisher_new(k, NULL, 0, 0, 1000);
  int64_t t0 = ember_time_mono_ns();
  for (uint64_t i = 0; i < N; i++) publish_window(p, "pub-nospool", i);
  assert_true(ms_since(t0) < 1000);
  ember__publisher_stats_t s;
  WAIT_FOR(p, s, s.failed == N, 10000);
  assert_int_equal(s.dropped, N);
  assert_int_equal(s.spooled, 0);
  assert_int_equal(s.queue_bytes, 0);
  /* A memory bound of one byte and no spool: -ENOMEM at once. */
  ember__publisher_close(p, 0);
  p = publisher_new(k, NULL, 1, 0, 1000);
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  char key[16];
  encode_window("pub-nospool", 0, &b, key, sizeof key);
  assert_int_equal(ember__publisher_publish(p, key, b.data, b.len), -ENOMEM);
  ember_buf_free(&b);
  assert_int_equal(stats_of(p).dropped, 1);
  ember__publisher_close(p, 0);
  ember_kafka_free(k);
}

static int group_setup(void **state) {
  (void)state;
  /* Show the publisher's own lines (outage, replay, drops) but not
   * librdkafka's INFO chatter. */
  ember_log_set_level(EMBER_LOG_WARN);
  mkdir(EMBER_TEST_TMP, 0700);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_publish_rejects_bad_arguments),
      cmocka_unit_test(test_publish_new_alloc_failures),
      cmocka_unit_test(test_publish_normal),
      cmocka_unit_test(test_publish_outage),
      cmocka_unit_test(test_publish_spool_bound),
      cmocka_unit_test(test_publish_memory_bound),
      cmocka_unit_test(test_publish_restart),
      cmocka_unit_test(test_publish_corrupt_spool),
      cmocka_unit_test(test_publish_targets),
      cmocka_unit_test(test_publish_no_spool_outage),
  };
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
