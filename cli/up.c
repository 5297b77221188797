/* ember up: agent, collector and HTTP API in one process on the embedded
 * Kafka (see cli.h).
 *
 *   ember up [--data DIR] [--config FILE] [key=value ...]
 *
 * Keys are the agent's and the collector's (api.listen, retention...);
 * the store is DIR/store.lmdb, the agent's spool DIR/spool, and the key
 * that signs session commands DIR/command.key (made on the first run,
 * mode 0600) unless command_key_file is given. */
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ember/codec.h"
#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "ember/sign.h"
#include "agent.h"
#include "collector.h"
#include "cli.h"

/* `ember up`: the agent publishing into the embedded Kafka, and a reader
 * of ember.profiles that prints, per window, where this machine's CPU went
 * (a terminal view beside the API: the collector stores the same windows). */

typedef struct up_reader {
  const ember_kafka_t *kafka;
  int64_t window_ns;
  atomic_bool stop;
  pthread_t thread;
  bool started;
} up_reader_t;

typedef struct worker_share {
  char name[64];
  int64_t samples;
} worker_share_t;

static void print_window(ember_profile_t *all, worker_share_t *workers, size_t nworkers,
                         int64_t start_ns, int64_t end_ns) {
  int64_t total = ember_profile_total(all, 0);
  if (total == 0) return;
  time_t t = (time_t)(start_ns / 1000000000);
  struct tm tm;
  localtime_r(&t, &tm);
  char when[32];
  strftime(when, sizeof when, "%H:%M:%S", &tm);
  printf("\n== window %s +%llds: %lld samples\n", when,
         (long long)((end_ns - start_ns) / 1000000000), (long long)total);
  for (size_t i = 0; i < nworkers; i++) {
    for (size_t j = i + 1; j < nworkers; j++) {
      if (workers[j].samples > workers[i].samples) {
        worker_share_t w = workers[i];
        workers[i] = workers[j];
        workers[j] = w;
      }
    }
  }
  printf("   workers:");
  for (size_t i = 0; i < nworkers && i < 6; i++)
    printf(" %s %.1f%%", workers[i].name, 100.0 * (double)workers[i].samples / (double)total);
  printf("\n");
  ember_top_entry_t *top = NULL;
  size_t n = 0;
  if (ember_profile_top(all, 0, EMBER_TOP_BY_SELF, 10, &top, &n) == 0) {
    for (size_t i = 0; i < n; i++)
      printf("   %5.1f%% self %5.1f%% total  %s\n", 100.0 * (double)top[i].self / (double)total,
             100.0 * (double)top[i].total / (double)total, top[i].name);
    ember_top_free(top, n);
  }
  fflush(stdout);
}

static void *up_reader_main(void *arg) {
  up_reader_t *r = arg;
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  char err[512];
  rd_kafka_t *c = NULL;
  const char *topics[] = {EMBER_TOPIC_PROFILES};
  if (ember_kafka_consumer_new(r->kafka, "ember-up", NULL, topics, 1, &c, err, sizeof err) != 0) {
    EMBER_ERROR("up", "cannot read profiles: %s", err);
    return NULL;
  }
  ember_profile_t *all = NULL;
  worker_share_t workers[64];
  size_t nworkers = 0;
  int64_t cur_start = 0, cur_end = 0;
  /* On an idle machine no window has a profile (the agent skips its own
   * samples): say so once per window instead of staying silent. */
  int64_t last_news = ember_time_mono_ns();
  while (!atomic_load(&r->stop)) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
    if (m == NULL) {
      if (ember_time_mono_ns() - last_news > r->window_ns + 2000000000LL) {
        printf("\n== no process used the CPU in the last %lld s\n",
               (long long)(r->window_ns / 1000000000));
        fflush(stdout);
        last_news = ember_time_mono_ns();
      }
      continue;
    }
    last_news = ember_time_mono_ns();
    ember_profile_t *p = NULL;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR &&
        ember_codec_decode(m->payload, m->len, NULL, &p, err, sizeof err) == 0) {
      int64_t start, end;
      ember_profile_window(p, &start, &end);
      if (all == NULL || start > cur_start) {
        if (all != NULL) print_window(all, workers, nworkers, cur_start, cur_end);
        ember_profile_free(all);
        all = NULL;
        if (ember_profile_new(types, 2, &all) != 0) break;
        nworkers = 0;
        cur_start = start;
        cur_end = end;
      }
      if (start == cur_start && ember_profile_merge(all, p) == 0) {
        const char *w = ember_profile_labels(p)->worker;
        size_t i = 0;
        while (i < nworkers && strcmp(workers[i].name, w ? w : "?") != 0) i++;
        if (i == nworkers && nworkers < sizeof workers / sizeof workers[0]) {
          snprintf(workers[nworkers].name, sizeof workers[nworkers].name, "%s", w ? w : "?");
          workers[nworkers++].samples = 0;
        }
        if (i < nworkers) workers[i].samples += ember_profile_total(p, 0);
      }
    } else if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      EMBER_WARN("up", "skipped a malformed profile: %s", err);
    }
    ember_profile_free(p);
    rd_kafka_message_destroy(m);
  }
  if (all != NULL) print_window(all, workers, nworkers, cur_start, cur_end);
  ember_profile_free(all);
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  return NULL;
}

/* Where the API is and what to try first. */
static void print_banner(const ember_config_t *cfg, unsigned port) {
  const char *listen = ember_config_get_str(cfg, "api.listen", "127.0.0.1:7272");
  const char *colon = strrchr(listen, ':');
  int hostlen = colon != NULL ? (int)(colon - listen) : 0;
  char url[300];
  /* Every address: point the user at the loopback of that family. */
  if (hostlen == 0 || strncmp(listen, "0.0.0.0:", 8) == 0)
    snprintf(url, sizeof url, "http://127.0.0.1:%u", port);
  else if (strncmp(listen, "[::]:", 5) == 0)
    snprintf(url, sizeof url, "http://[::1]:%u", port);
  else
    snprintf(url, sizeof url, "http://%.*s:%u", hostlen, listen, port);
  char server[320] = "";
  if (strcmp(url, "http://127.0.0.1:7272") != 0)
    snprintf(server, sizeof server, " --server %s", url);
  printf("\nEmber is up: profiling this machine.\n"
         "  dashboard  %s/\n"
         "  API        %s/api/v1\n"
         "  ember workers%s\n"
         "  ember query --worker NAME --from -5m --format top%s\n"
         "Ctrl-C stops.\n",
         url, url, server, server);
  fflush(stdout);
}

/* agent keys + collector keys, without repeats, NULL-terminated. */
static const char **up_config_keys(void) {
  size_t na = 0, nc = 0;
  while (ember__agent_config_keys[na] != NULL) na++;
  while (ember__collector_config_keys[nc] != NULL) nc++;
  const char **keys = ember_calloc(na + nc + 1, sizeof *keys);
  if (keys == NULL) return NULL;
  size_t n = 0;
  for (size_t i = 0; i < na; i++) keys[n++] = ember__agent_config_keys[i];
  for (size_t i = 0; i < nc; i++) {
    bool dup = false;
    for (size_t j = 0; j < na && !dup; j++)
      dup = strcmp(ember__collector_config_keys[i], ember__agent_config_keys[j]) == 0;
    if (!dup) keys[n++] = ember__collector_config_keys[i];
  }
  return keys;
}

int ember__cmd_up(int argc, char **argv) {
  ember_config_t *cfg = NULL;
  ember_kafka_t *k = NULL;
  ember__collector_t *col = NULL;
  char err[512] = "";
  const char *data = "./ember-data";
  int status = EXIT_FAILED;
  if (ember_config_new(&cfg) != 0) return EXIT_FAILED;
  for (int i = 0; i < argc;) {
    int n = ember_config_apply_args(cfg, argc - i, argv + i, err, sizeof err);
    if (n >= 0 && (i += n) == argc) break;
    if (n >= 0 && strcmp(argv[i], "--data") == 0 && i + 1 < argc) {
      data = argv[i + 1];
      i += 2;
      continue;
    }
    fprintf(stderr, "ember up: %s\n", err);
    ember_config_free(cfg);
    return EXIT_USAGE;
  }
  const char **keys = up_config_keys();
  int crc = keys ? ember_config_check(cfg, keys, err, sizeof err) : -ENOMEM;
  ember_free(keys);
  if (crc != 0) {
    fprintf(stderr, "ember up: %s\n", crc == -ENOMEM ? "out of memory" : err);
    ember_config_free(cfg);
    return EXIT_USAGE;
  }
  ember_log_level_t level;
  if (ember_log_parse_level(ember_config_get_str(cfg, "log_level", "info"), &level) == 0)
    ember_log_set_level(level);
  if (mkdir(data, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "ember up: cannot create the data folder %s: %s\n", data, strerror(errno));
    ember_config_free(cfg);
    return EXIT_FAILED;
  }
  char spool[4096];
  snprintf(spool, sizeof spool, "%s/spool", data);
  if (ember_config_get(cfg, "spool_dir") == NULL) ember_config_set(cfg, "spool_dir", spool);
  if (ember_config_get(cfg, "data_dir") == NULL) ember_config_set(cfg, "data_dir", data);
  /* A newcomer sees an alert fire: any worker above 0.9 cores for 30 s. */
  if (ember_config_get(cfg, "alerts.default_rule") == NULL)
    ember_config_set(cfg, "alerts.default_rule", "true");
  /* The agent takes signed session commands only: one key of its own, made
   * on the first run and kept in the data folder, signs what the collector
   * sends and is the key the agent checks. */
  if (ember_config_get(cfg, "command_key_file") == NULL) {
    char key[4096];
    snprintf(key, sizeof key, "%s/command.key", data);
    if (ember_sign_key_create(key, err, sizeof err) != 0 ||
        ember_config_set(cfg, "command_key_file", key) != 0) {
      fprintf(stderr, "ember up: %s\n", err[0] ? err : "out of memory");
      ember_config_free(cfg);
      return EXIT_FAILED;
    }
  }

  up_reader_t reader = {0};
  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  if (rc == 0) rc = ember_kafka_ensure_topics(k, 10000, err, sizeof err);
  if (rc != 0) {
    EMBER_ERROR("up", "%s", err);
    goto cleanup;
  }
  EMBER_INFO("up", "Kafka (%s) at %s; data in %s",
             ember_kafka_is_embedded(k) ? "embedded" : "external", ember_kafka_brokers(k), data);
  rc = ember__collector_start(cfg, k, &col, err, sizeof err);
  if (rc != 0) {
    EMBER_ERROR("up", "cannot start the collector: %s", err);
    goto cleanup;
  }
  reader.kafka = k;
  reader.window_ns = 10000000000LL;
  if (ember_config_get_duration_ns(cfg, "window", 10000000000LL, 1000000000LL, 3600000000000LL,
                                   &reader.window_ns, err, sizeof err) != 0) {
    fprintf(stderr, "ember up: %s\n", err);
    goto cleanup;
  }
  print_banner(cfg, ember__collector_api_port(col));
  atomic_init(&reader.stop, false);
  reader.started = pthread_create(&reader.thread, NULL, up_reader_main, &reader) == 0;
  rc = ember__agent_run(cfg, k);
  status = rc == 0 ? 0 : EXIT_FAILED;
cleanup:
  /* The agent published its last window as it stopped: let the reader and
   * the collector take it before they stop. */
  if (reader.started || col != NULL) sleep(2);
  if (reader.started) {
    atomic_store(&reader.stop, true);
    pthread_join(reader.thread, NULL);
  }
  ember__collector_stop(col);
  ember_kafka_free(k);
  ember_config_free(cfg);
  return status;
}
