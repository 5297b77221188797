/* The publisher (agent/publish.c) through a real broker outage.
 *
 * Windows are published at about 4 per second against the real Kafka
 * broker of the kafka_broker fixture. After a few seconds the broker is
 * halted (tests/kafka/broker.sh halt: SIGTERM, data and ports kept) for
 * 30 s while publishing goes on, then resumed on the same address; a few
 * more windows follow. Then every window must be in ember.profiles: read
 * in a fresh consumer group and deduped by (agent_id, seq), the set of
 * seqs is exactly the one published. The output records how many windows
 * were spooled and replayed and how long each phase took.
 *
 * This test stops the shared broker, so CTest runs it alone (RUN_SERIAL),
 * and the teardown resumes the broker if a failure left it halted. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/profile.h"
#include "publish.h"

#define TEST_NWORKERS    4u
#define TEST_MAX_WINDOWS 1024u
#define TEST_PERIOD_MS   250  /* 4 windows per second */
#define TEST_BEFORE_MS   5000 /* publishing before the halt */
#define TEST_OUTAGE_MS   30000
#define TEST_AFTER_MS    5000 /* publishing after the broker is back */
#define TEST_DELIVERY_MS 5000 /* delivery timeout: failures surface in the outage */
#define TEST_DRAIN_MS    90000
#define TEST_CONSUME_MS  90000

static char bootstrap[256];
static char run_id[96];
static const char *broker_sh, *broker_dir;
static bool halted;

static int64_t ms_since(int64_t t0) { return (ember_time_mono_ns() - t0) / 1000000; }

static void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------------ broker control -- */

/* broker.sh halt/resume, run on a thread of its own so that publishing
 * goes on while the broker stops (about a second) and starts (about six). */
typedef struct broker_cmd {
  const char *verb;
  pthread_t thread;
  bool running; /* started and not yet joined */
  int status;
  int64_t took_ms;
} broker_cmd_t;

/* Static so that the teardown can wait for a command a failure left
 * running. */
static broker_cmd_t halt_cmd, resume_cmd;

static int broker_run(const char *verb) {
  char cmd[2048];
  /* Both paths come from CMake; quoted for the shell. */
  int n = snprintf(cmd, sizeof cmd, "'%s' %s '%s' >/dev/null", broker_sh, verb, broker_dir);
  if (n < 0 || (size_t)n >= sizeof cmd) return -1;
  return system(cmd);
}

static void *broker_cmd_main(void *arg) {
  broker_cmd_t *c = arg;
  int64_t t0 = ember_time_mono_ns();
  c->status = broker_run(c->verb);
  c->took_ms = ms_since(t0);
  return NULL;
}

static void broker_cmd_start(broker_cmd_t *c, const char *verb) {
  c->verb = verb;
  c->status = -1;
  assert_int_equal(pthread_create(&c->thread, NULL, broker_cmd_main, c), 0);
  c->running = true;
}

/* Whether the command finished (then joined); waits for it if `wait`. */
static bool broker_cmd_done(broker_cmd_t *c, bool wait) {
  if (!c->running) return true;
  if (wait) {
    pthread_join(c->thread, NULL);
  } else if (pthread_tryjoin_np(c->thread, NULL) != 0) {
    return false;
  }
  c->running = false;
  return true;
}

static void broker_cmd_join(broker_cmd_t *c) {
  broker_cmd_done(c, true);
  if (c->status != 0)
    fail_msg("broker.sh %s %s failed (status %d)", c->verb, broker_dir, c->status);
  print_message("broker.sh %s took %lld ms\n", c->verb, (long long)c->took_ms);
}

/* ------------------------------------------------------------ windows -- */

static void encode_window(uint64_t seq, ember_buf_t *out, char *key, size_t key_size) {
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  snprintf(key, key_size, "w%u", (unsigned)(seq % TEST_NWORKERS));
  ember_labels_t labels = {.worker = key, .host = "host-o", .pid = 3000u + (uint32_t)seq};
  assert_int_equal(ember_profile_set_labels(p, &labels), 0);
  assert_int_equal(ember_profile_set_origin(p, run_id, seq, NULL), 0);
  int64_t start = ember_time_now_ns();
  assert_int_equal(ember_profile_set_window(p, start - 10000000000, start), 0);
  const ember_frame_t frames[3] = {
      {.function = "leaf", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
      {.function = "handle", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
      {.function = "main", .module = "/usr/bin/app", .kind = EMBER_FRAME_NATIVE},
  };
  const int64_t v[2] = {(int64_t)seq + 1, ((int64_t)seq + 1) * 10000000};
  assert_int_equal(ember_profile_add(p, frames, 3, v), 0);
  ember_buf_reset(out);
  assert_int_equal(ember_codec_encode(p, out), 0);
  ember_profile_free(p);
}

static ember__publisher_stats_t stats_of(ember__publisher_t *p) {
  ember__publisher_stats_t s;
  ember__publisher_stats(p, &s);
  return s;
}

static void print_stats(const char *when, const ember__publisher_stats_t *s) {
  print_message("%s: published %llu failed %llu spooled %llu respooled %llu dropped %llu "
                "queue %llu B spool %llu files / %llu B\n",
                when, (unsigned long long)s->published, (unsigned long long)s->failed,
                (unsigned long long)s->spooled, (unsigned long long)s->respooled,
                (unsigned long long)s->dropped, (unsigned long long)s->queue_bytes,
                (unsigned long long)s->spool_files, (unsigned long long)s->spool_bytes);
}

/* -------------------------------------------------------------- tests -- */

static void test_publish_outage_real_broker(void **state) {
  (void)state;
  ember_config_t *cfg = NULL;
  assert_int_equal(ember_config_new(&cfg), 0);
  assert_int_equal(ember_config_set(cfg, "brokers", bootstrap), 0);
  assert_int_equal(ember_config_set(cfg, "client_id", "ember-it-outage"), 0);
  ember_kafka_t *k = NULL;
  char err[512] = "";
  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  ember_config_free(cfg);
  if (rc != 0) fail_msg("ember_kafka_new: %s (%s)", ember_strerror(rc), err);
  rc = ember_kafka_ensure_topics(k, 30000, err, sizeof err);
  if (rc != 0) fail_msg("ensure_topics: %s (%s)", ember_strerror(rc), err);

  char spool[512];
  snprintf(spool, sizeof spool, "%s/%s-spool", EMBER_TEST_TMP, run_id);
  ember__publisher_opts_t o = {
      .kafka = k, .spool_dir = spool, .delivery_timeout_ms = TEST_DELIVERY_MS};
  ember__publisher_t *p = NULL;
  rc = ember__publisher_new(&o, &p, err, sizeof err);
  if (rc != 0) fail_msg("ember__publisher_new: %s (%s)", ember_strerror(rc), err);

  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  char key[16];
  uint64_t n = 0;
  int64_t t0 = ember_time_mono_ns();
  int phase = 0; /* 0 before, 1 halted, 2 resuming, 3 after */
  int64_t halt_at = -1, back_at = -1;
  ember__publisher_stats_t at_resume = {0};
  while (phase < 4) {
    int64_t now = ms_since(t0);
    if (phase == 0 && now >= TEST_BEFORE_MS) {
      ember__publisher_stats_t s = stats_of(p);
      print_stats("before the halt", &s);
      broker_cmd_start(&halt_cmd, "halt");
      halted = true;
      halt_at = now;
      phase = 1;
    } else if (phase == 1 && now >= halt_at + TEST_OUTAGE_MS) {
      broker_cmd_join(&halt_cmd);
      at_resume = stats_of(p);
      print_stats("after 30 s of outage", &at_resume);
      broker_cmd_start(&resume_cmd, "resume");
      phase = 2;
    } else if (phase == 2) {
      /* Publishing goes on while broker.sh starts the broker again (a few
       * seconds), as the command runs on a thread of its own. */
      if (broker_cmd_done(&resume_cmd, false)) {
        if (resume_cmd.status != 0)
          fail_msg("broker.sh resume %s failed (status %d)", broker_dir, resume_cmd.status);
        print_message("broker.sh resume took %lld ms\n", (long long)resume_cmd.took_ms);
        halted = false;
        back_at = now;
        phase = 3;
      }
    } else if (phase == 3 && now >= back_at + TEST_AFTER_MS) {
      phase = 4;
      continue;
    }
    assert_true(n < TEST_MAX_WINDOWS);
    encode_window(n, &b, key, sizeof key);
    int64_t c0 = ember_time_mono_ns();
    rc = ember__publisher_publish(p, key, b.data, b.len);
    /* Never blocks on Kafka: a spool write (fsync) is the slowest path. */
    if (ms_since(c0) > 200)
      print_error("publish %llu took %lld ms\n", (unsigned long long)n, (long long)ms_since(c0));
    assert_int_equal(rc, 0);
    n++;
    sleep_ms(TEST_PERIOD_MS);
  }
  ember_buf_free(&b);
  int64_t published_ms = ms_since(t0);

  /* Everything spooled is replayed once deliveries succeed again. */
  ember__publisher_stats_t s = stats_of(p);
  print_stats("publishing done", &s);
  int64_t d0 = ember_time_mono_ns();
  while (ms_since(d0) < TEST_DRAIN_MS) {
    s = stats_of(p);
    if (s.spool_files == 0 && s.queue_bytes == 0 && s.published >= n) break;
    sleep_ms(100);
  }
  print_stats("drained", &s);
  print_message("%llu windows in %lld ms; outage %d ms; spooled %llu, replayed %llu; spool "
                "drained %lld ms after publishing stopped (%lld ms after the broker was back)\n",
                (unsigned long long)n, (long long)published_ms, TEST_OUTAGE_MS,
                (unsigned long long)s.spooled, (unsigned long long)s.respooled,
                (long long)ms_since(d0), (long long)(ms_since(t0) - back_at));
  assert_int_equal(s.spool_files, 0);
  assert_int_equal(s.dropped, 0);
  assert_true(at_resume.spooled > 0); /* the outage really sent windows to the spool */
  assert_true(s.published >= n);
  ember__publisher_close(p, 10000);
  /* Nothing is left behind: the directory is empty. */
  assert_int_equal(rmdir(spool), 0);

  /* Read everything back in a group of our own. */
  char group[160];
  snprintf(group, sizeof group, "%s-group", run_id);
  static const char *const topics[] = {EMBER_TOPIC_PROFILES};
  rd_kafka_t *c = NULL;
  rc = ember_kafka_consumer_new(k, group, NULL, topics, 1, &c, err, sizeof err);
  if (rc != 0) fail_msg("consumer: %s", err);
  unsigned *seen = calloc(TEST_MAX_WINDOWS, sizeof *seen);
  assert_non_null(seen);
  size_t unique = 0, dupes = 0, bad = 0, foreign = 0;
  int64_t c0 = ember_time_mono_ns(), done_at = -1;
  while (ms_since(c0) < TEST_CONSUME_MS) {
    if (unique == n && done_at < 0) done_at = ms_since(c0);
    if (done_at >= 0 && ms_since(c0) - done_at > 2000) break;
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      ember_profile_t *prof = NULL;
      char derr[256];
      if (ember_codec_decode(m->payload, m->len, NULL, &prof, derr, sizeof derr) != 0) {
        foreign++; /* the collector's DLQ tests publish malformed messages */
      } else {
        const char *agent = ember_profile_agent_id(prof);
        uint64_t seq = ember_profile_seq(prof);
        if (agent == NULL || strcmp(agent, run_id) != 0) {
          foreign++;
        } else if (seq >= n || ember_profile_total(prof, 0) != (int64_t)seq + 1) {
          bad++;
        } else if (seen[seq]++ == 0) {
          unique++;
        } else {
          dupes++;
        }
        ember_profile_free(prof);
      }
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  for (uint64_t i = 0; i < n; i++) {
    if (seen[i] == 0) print_error("seq %llu never arrived\n", (unsigned long long)i);
  }
  print_message("consumed %zu of %llu windows (+%zu duplicates deduped, %zu of other runs) in "
                "%lld ms\n",
                unique, (unsigned long long)n, dupes, foreign, (long long)ms_since(c0));
  free(seen);
  assert_int_equal(bad, 0);
  assert_int_equal(unique, n);
  ember_kafka_free(k);
}

/* ------------------------------------------------------------- set-up -- */

static int group_setup(void **state) {
  (void)state;
  ember_log_set_level(EMBER_LOG_WARN);
  const char *path = getenv("EMBER_TEST_BOOTSTRAP_FILE");
  broker_sh = getenv("EMBER_TEST_BROKER_SH");
  broker_dir = getenv("EMBER_TEST_BROKER_DIR");
  if (path == NULL || broker_sh == NULL || broker_dir == NULL) {
    print_error("EMBER_TEST_BOOTSTRAP_FILE, EMBER_TEST_BROKER_SH and EMBER_TEST_BROKER_DIR must "
                "be set: run this test through ctest (fixture kafka_broker)\n");
    return -1;
  }
  if (strchr(broker_sh, '\'') != NULL || strchr(broker_dir, '\'') != NULL) {
    print_error("broker paths must not contain a single quote\n");
    return -1;
  }
  FILE *f = fopen(path, "re");
  if (f == NULL) {
    print_error("cannot open %s (%s): did broker_start succeed?\n", path, strerror(errno));
    return -1;
  }
  char *line = fgets(bootstrap, sizeof bootstrap, f);
  fclose(f);
  if (line == NULL) {
    print_error("%s is empty\n", path);
    return -1;
  }
  bootstrap[strcspn(bootstrap, " \t\r\n")] = '\0';
  snprintf(run_id, sizeof run_id, "ember-it-outage-%ld-%lld", (long)getpid(),
           (long long)ember_time_now_ns());
  print_message("broker %s (%s), run %s\n", bootstrap, broker_dir, run_id);
  return 0;
}

/* A failure in the middle of the outage must not leave the shared broker
 * down for the tests that run after this one. */
static int group_teardown(void **state) {
  (void)state;
  broker_cmd_done(&halt_cmd, true);
  broker_cmd_done(&resume_cmd, true);
  if (halted) {
    print_error("resuming the broker a failed test left halted\n");
    if (broker_run("resume") != 0) print_error("broker.sh resume failed\n");
    halted = false;
  }
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_publish_outage_real_broker),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
