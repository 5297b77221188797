/* The producer half of bench/bench_ingest.sh: bench_store's stream
 * (bench/stream.h) written to a real broker's ember.profiles exactly as
 * agents write it, so collectors can be timed reading it.
 *
 *   ingest_produce BROKERS [--workers N] [--minutes M] [--partitions P] [--wire V]
 *
 * Creates Ember's topics where missing (ember_kafka_ensure_topics, with
 * ember.profiles at P partitions, default 12, so 1, 2 and 3 consumers get
 * even shares), then produces M minutes (default 10) of 10 s windows of N
 * workers (default 200) in wire format, keyed by worker as the agent keys
 * them, in wire version V (default 2, the agent's default; 1 as agents
 * before issue 14 send), through a producer with the agent's settings
 * (ember_kafka_producer_conf: zstd, idempotent, acks=all). Waits for every
 * delivery report and prints one line: profiles, samples, wire bytes
 * before compression. Exit 1 when any message was not delivered. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "ember/codec.h"
#include "ember/config.h"
#include "ember/ember.h"
#include "ember/kafka.h"
#include "ember/parse.h"
#include "ember/wire.h"
#include "stream.h"

static size_t delivered, failed;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  (void)opaque;
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
    delivered++;
  else if (failed++ == 0)
    fprintf(stderr, "ingest_produce: not delivered: %s\n", rd_kafka_err2str(m->err));
}

static void usage(void) {
  fprintf(stderr, "usage: ingest_produce BROKERS [--workers N] [--minutes M] [--partitions P] "
                  "[--wire 1|2]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  uint64_t nworkers = 200, minutes = 10, parts = 12, wire = 2;
  for (int i = 2; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--workers") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100000, &nworkers)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--minutes") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100000, &minutes)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--partitions") == 0) {
      if (ember_parse_u64(argv[++i], 1, 1024, &parts)) usage();
    } else if (i + 1 < argc && strcmp(argv[i], "--wire") == 0) {
      if (ember_parse_u64(argv[++i], 1, 2, &wire)) usage();
    } else {
      usage();
    }
  }
  char err[512], num[24];
  snprintf(num, sizeof num, "%" PRIu64, parts);
  ember_config_t *cfg = NULL;
  ember_kafka_t *k = NULL;
  rd_kafka_conf_t *conf = NULL;
  rd_kafka_t *rk = NULL;
  int rc = ember_config_new(&cfg);
  if (rc == 0) rc = ember_config_set(cfg, "brokers", argv[1]);
  if (rc == 0) rc = ember_config_set(cfg, "topic_partitions", num);
  if (rc == 0) rc = ember_kafka_new(cfg, &k, err, sizeof err);
  if (rc == 0) rc = ember_kafka_ensure_topics(k, 30000, err, sizeof err);
  if (rc == 0) rc = ember_kafka_producer_conf(k, &conf, err, sizeof err);
  if (rc == 0) {
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rc = ember_kafka_producer_new(k, conf, &rk, err, sizeof err);
  }
  if (rc != 0) {
    fprintf(stderr, "ingest_produce: %s (%s)\n", err, ember_strerror(rc));
    return 1;
  }

  stream_init();
  stream_worker_t *ws = calloc(nworkers, sizeof *ws);
  if (ws == NULL) return 1;
  for (size_t i = 0; i < nworkers; i++) stream_make_worker(&ws[i], i);
  size_t total = (size_t)(minutes * 6) * nworkers;
  uint64_t samples = 0, bytes = 0;
  ember_buf_t msg;
  ember_buf_init(&msg, 1u << 26);
  for (size_t kk = 0; kk < total; kk++) {
    size_t widx = kk % nworkers;
    uint64_t ns = 0;
    ember_profile_t *p =
        stream_window(&ws[widx], widx, STREAM_T0 + (int64_t)(kk / nworkers) * STREAM_WIN, &ns);
    ember_buf_reset(&msg);
    rc = wire == 1 ? ember_codec_encode(p, &msg) : ember_codec_encode_v2(p, &msg);
    ember_profile_free(p);
    if (rc != 0) {
      fprintf(stderr, "ingest_produce: encode: %s\n", ember_strerror(rc));
      return 1;
    }
    samples += ns;
    bytes += msg.len;
    const char *key = ws[widx].name;
    rd_kafka_resp_err_t e;
    while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(EMBER_TOPIC_PROFILES),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                  RD_KAFKA_V_KEY(key, strlen(key)),
                                  RD_KAFKA_V_VALUE(msg.data, msg.len), RD_KAFKA_V_END)) ==
           RD_KAFKA_RESP_ERR__QUEUE_FULL)
      rd_kafka_poll(rk, 100);
    if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
      fprintf(stderr, "ingest_produce: produce: %s\n", rd_kafka_err2str(e));
      return 1;
    }
    rd_kafka_poll(rk, 0);
  }
  rd_kafka_flush(rk, 120000);
  printf("produced %zu profiles, %" PRIu64 " samples, %" PRIu64
         " wire bytes before compression, %" PRIu64 " partitions\n",
         delivered, samples, bytes, parts);
  ember_buf_free(&msg);
  rd_kafka_destroy(rk);
  ember_kafka_free(k);
  ember_config_free(cfg);
  free(ws);
  return delivered == total && failed == 0 ? 0 : 1;
}
