/* ember: the command-line front end.
 *
 *   ember up [--config FILE] [key=value ...]   run Ember on this machine
 *   ember decode [--format F] [-o OUT] [FILE]  read one wire message (e.g. a
 *                                              Kafka value saved by kcat),
 *                                              validate it and export it
 *   ember version
 *
 * `ember up` today starts the parts that exist: the embedded Kafka with
 * Ember's topics, and a self-check that one profile travels through it. The
 * agent, collector and API join it as they are built (see README). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/export.h"
#include "ember/kafka.h"
#include "ember/log.h"

#define EXIT_USAGE 2

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void usage(FILE *f) {
  fputs("usage: ember up [--config FILE] [key=value ...]\n"
        "       ember decode [--format pprof|folded|speedscope|tree|top] [-o OUT] [FILE]\n"
        "       ember version\n",
        f);
}

static int read_all(const char *path, ember_buf_t *b) {
  int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
  if (fd < 0) return -errno;
  int rc = 0;
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      break;
    }
    if (n == 0) break;
    if ((rc = ember_buf_append(b, chunk, (size_t)n)) != 0) break;
  }
  if (path) close(fd);
  return rc;
}

static int write_all(const char *path, const char *data, size_t len) {
  int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : STDOUT_FILENO;
  if (fd < 0) return -errno;
  int rc = 0;
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      break;
    }
    data += n;
    len -= (size_t)n;
  }
  if (path && close(fd) != 0 && rc == 0) rc = -errno;
  return rc;
}

static int print_top(const ember_profile_t *p, ember_buf_t *out) {
  int vi = ember_profile_type_index(p, EMBER_VT_CPU_NS);
  if (vi < 0) vi = 0;
  ember_top_entry_t *top = NULL;
  size_t n = 0;
  int rc = ember_profile_top(p, (size_t)vi, EMBER_TOP_BY_SELF, 20, &top, &n);
  if (rc != 0) return rc;
  int64_t total = ember_profile_total(p, (size_t)vi);
  ember_buf_printf(out, "%12s %6s %12s %6s  %s\n", "self", "self%", "total", "total%", "function");
  for (size_t i = 0; i < n && rc == 0; i++) {
    double s = total ? 100.0 * (double)top[i].self / (double)total : 0.0;
    double t = total ? 100.0 * (double)top[i].total / (double)total : 0.0;
    rc = ember_buf_printf(out, "%12lld %5.1f%% %12lld %5.1f%%  %s\n", (long long)top[i].self, s,
                          (long long)top[i].total, t, top[i].name);
  }
  ember_top_free(top, n);
  return rc;
}

static int cmd_decode(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *fmt_name = "folded";
  for (int i = 0; i < argc; i++) {
    if ((strcmp(argv[i], "--format") == 0 || strcmp(argv[i], "-f") == 0) && i + 1 < argc) {
      fmt_name = argv[++i];
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "ember decode: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return EXIT_USAGE;
    } else {
      in = argv[i];
    }
  }
  ember_format_t fmt = EMBER_FORMAT_FOLDED;
  bool top = strcmp(fmt_name, "top") == 0;
  if (!top && ember_format_parse(fmt_name, &fmt) != 0) {
    fprintf(stderr, "ember decode: unknown format '%s' (pprof, folded, speedscope, tree, top)\n",
            fmt_name);
    return EXIT_USAGE;
  }
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  ember_buf_t raw, res;
  ember_buf_init(&raw, lim.max_message + 1);
  ember_buf_init(&res, (size_t)1 << 30);
  ember_profile_t *p = NULL;
  char err[256] = "";
  int status = 1;
  int rc = read_all(in, &raw);
  if (rc != 0) {
    fprintf(stderr, "ember decode: cannot read %s: %s\n", in ? in : "stdin", ember_strerror(rc));
    goto cleanup;
  }
  rc = ember_codec_decode(raw.data, raw.len, &lim, &p, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ember decode: %s: %s\n", in ? in : "stdin", err);
    goto cleanup;
  }
  rc = top ? print_top(p, &res) : ember_export(p, fmt, 0, &res);
  if (rc == 0) rc = write_all(out, res.data ? res.data : "", res.len);
  if (rc != 0) {
    fprintf(stderr, "ember decode: cannot write %s: %s\n", out ? out : "stdout",
            ember_strerror(rc));
    goto cleanup;
  }
  status = 0;
cleanup:
  ember_profile_free(p);
  ember_buf_free(&raw);
  ember_buf_free(&res);
  return status;
}

static const char *const up_keys[] = {EMBER_KAFKA_CONFIG_KEYS, "log_level", NULL};

/* Publish one profile and read it back through a consumer group: proves
 * the embedded Kafka, the codec and the client settings work together. */
static int self_check(const ember_kafka_t *k, char *err, size_t errsz) {
  ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES};
  ember_profile_t *p = NULL, *q = NULL;
  rd_kafka_t *prod = NULL, *cons = NULL;
  ember_buf_t b;
  ember_buf_init(&b, 1u << 20);
  int rc = ember_profile_new(types, 1, &p);
  ember_frame_t f = {.function = "ember_self_check"};
  int64_t v[] = {1};
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  ember_labels_t l = {"ember", EMBER_VERSION_STRING, host, NULL, (uint32_t)getpid()};
  if (rc == 0) rc = ember_profile_add(p, &f, 1, v);
  if (rc == 0) rc = ember_profile_set_labels(p, &l);
  if (rc == 0) rc = ember_codec_encode(p, &b);
  if (rc == 0) rc = ember_kafka_producer_new(k, NULL, &prod, err, errsz);
  if (rc != 0) goto cleanup;
  /* RD_KAFKA_V_KEY casts to void *: a writable key keeps -Wcast-qual quiet. */
  char key[] = "ember";
  rd_kafka_resp_err_t e = rd_kafka_producev(
      prod, RD_KAFKA_V_TOPIC(EMBER_TOPIC_PROFILES), RD_KAFKA_V_KEY(key, sizeof key - 1),
      RD_KAFKA_V_VALUE(b.data, b.len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
  if (e == RD_KAFKA_RESP_ERR_NO_ERROR) e = rd_kafka_flush(prod, 10000);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    snprintf(err, errsz, "produce: %s", rd_kafka_err2str(e));
    rc = EMBER_EKAFKA;
    goto cleanup;
  }
  const char *topics[] = {EMBER_TOPIC_PROFILES};
  rc = ember_kafka_consumer_new(k, "ember-up-selfcheck", NULL, topics, 1, &cons, err, errsz);
  if (rc != 0) goto cleanup;
  rc = EMBER_ETIMEDOUT;
  snprintf(err, errsz, "self-check message did not come back within 30 s");
  for (int i = 0; i < 300 && !stop_requested; i++) {
    rd_kafka_message_t *m = rd_kafka_consumer_poll(cons, 100);
    if (m == NULL) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rc = ember_codec_decode(m->payload, m->len, NULL, &q, err, errsz);
      rd_kafka_message_destroy(m);
      break;
    }
    rd_kafka_message_destroy(m);
  }
  if (rc == 0 && ember_profile_total(q, 0) != 1) {
    snprintf(err, errsz, "self-check message came back changed");
    rc = EMBER_ECORRUPT;
  }
cleanup:
  if (cons) {
    rd_kafka_consumer_close(cons);
    rd_kafka_destroy(cons);
  }
  if (prod) rd_kafka_destroy(prod);
  ember_buf_free(&b);
  ember_profile_free(p);
  ember_profile_free(q);
  return rc;
}

static int cmd_up(int argc, char **argv) {
  ember_config_t *cfg = NULL;
  ember_kafka_t *k = NULL;
  char err[512] = "";
  int status = 1;
  if (ember_config_new(&cfg) != 0) return 1;
  for (int i = 0; i < argc; i++) {
    int rc;
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      rc = ember_config_load(cfg, argv[++i], err, sizeof err);
    } else if (strchr(argv[i], '=') != NULL && argv[i][0] != '-') {
      rc = ember_config_set_arg(cfg, argv[i], err, sizeof err);
    } else {
      snprintf(err, sizeof err, "unknown argument '%s'", argv[i]);
      rc = EMBER_ECONFIG;
    }
    if (rc != 0) {
      fprintf(stderr, "ember up: %s\n", err);
      ember_config_free(cfg);
      return EXIT_USAGE;
    }
  }
  if (ember_config_check(cfg, up_keys, err, sizeof err) != 0) {
    fprintf(stderr, "ember up: %s\n", err);
    ember_config_free(cfg);
    return EXIT_USAGE;
  }
  ember_log_level_t level;
  if (ember_log_parse_level(ember_config_get_str(cfg, "log_level", "info"), &level) == 0)
    ember_log_set_level(level);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int rc = ember_kafka_new(cfg, &k, err, sizeof err);
  if (rc == 0) rc = ember_kafka_ensure_topics(k, 10000, err, sizeof err);
  if (rc != 0) {
    EMBER_ERROR("up", "%s", err);
    goto cleanup;
  }
  EMBER_INFO("up", "Kafka (%s) at %s with Ember's topics",
             ember_kafka_is_embedded(k) ? "embedded" : "external", ember_kafka_brokers(k));
  rc = self_check(k, err, sizeof err);
  if (rc != 0) {
    EMBER_ERROR("up", "self-check failed: %s", err);
    goto cleanup;
  }
  EMBER_INFO("up", "self-check passed: a profile went through Kafka and decoded intact");
  EMBER_INFO("up", "the agent, collector and dashboard are not built yet; "
                   "Kafka keeps running for them until Ctrl-C");
  while (!stop_requested) pause();
  EMBER_INFO("up", "stopping");
  status = 0;
cleanup:
  ember_kafka_free(k);
  ember_config_free(cfg);
  return status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "up") == 0) return cmd_up(argc - 2, argv + 2);
  if (strcmp(argv[1], "decode") == 0) return cmd_decode(argc - 2, argv + 2);
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("ember %s\n", EMBER_VERSION_STRING);
    return 0;
  }
  if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "ember: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return EXIT_USAGE;
}
