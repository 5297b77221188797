/* The collector's decode threads' work on wire v2, alone: decode a batch
 * of windows (ember_wire_decode), check their hashes
 * (ember_wire_verify_hashes), free them, as a batch is decoded and freed
 * once written; best of R rounds, thread CPU time per window. Also the
 * part of decoding that is protobuf-c's: the same messages unpacked by
 * protobuf-c alone into decode's own arena (codec_internal.h), released
 * after each, which is what any decode of these messages with protobuf-c
 * costs at least; and the agent's side: encoding the same windows
 * (ember_codec_encode_v2).
 *
 *   wire_decode [--windows N] [--rounds R] [--glibc-defaults]
 *
 * Defaults: 2,000 windows of bench_store's stream (200 workers), 5 rounds,
 * the collector's malloc policy (ember__ingest_malloc_policy);
 * --glibc-defaults leaves glibc's thresholds as they are, to see what the
 * policy saves. Figures and the command: bench/RESULTS.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codec_internal.h"
#include "ember/parse.h"
#include "ember_v2.pb-c.h"
#include "ember/wire.h"
#include "ingest.h"
#include "stream.h"

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
  fprintf(stderr, "wire_decode: %s\n", what);
  exit(1);
}

int main(int argc, char **argv) {
  uint64_t n = 2000, rounds = 5;
  bool policy = true;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--glibc-defaults") == 0) {
      policy = false;
    } else if (i + 1 < argc && strcmp(argv[i], "--windows") == 0) {
      if (ember_parse_u64(argv[++i], 1, 100000, &n)) die("--windows: 1 to 100000");
    } else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0) {
      if (ember_parse_u64(argv[++i], 1, 1000, &rounds)) die("--rounds: 1 to 1000");
    } else {
      die("usage: wire_decode [--windows N] [--rounds R] [--glibc-defaults]");
    }
  }
  if (policy) ember__ingest_malloc_policy();
  enum { NWORKERS = 200 };
  stream_init();
  stream_worker_t *ws = calloc(NWORKERS, sizeof *ws);
  ember_profile_t **ps = calloc(n, sizeof *ps);
  ember_buf_t *msgs = calloc(n, sizeof *msgs);
  ember_wire_t **views = calloc(n, sizeof *views);
  if (ws == NULL || ps == NULL || msgs == NULL || views == NULL) die("out of memory");
  for (size_t i = 0; i < NWORKERS; i++) stream_make_worker(&ws[i], i);
  uint64_t bytes = 0;
  for (size_t k = 0; k < n; k++) {
    size_t w = k % NWORKERS;
    uint64_t ns;
    ps[k] = stream_window(&ws[w], w, STREAM_T0 + (int64_t)(k / NWORKERS) * STREAM_WIN, &ns);
    ember_buf_init(&msgs[k], 1u << 26);
  }
  for (size_t k = 0; k < n; k++)
    if (ember_codec_encode_v2(ps[k], &msgs[k]) != 0) die("encode");
  /* The collector's part first, on messages made once: encoding allocates
   * too, and would warm glibc's thresholds between its rounds. */
  double enc = 1e30, dec = 1e30, ver = 1e30, fre = 1e30;
  char err[256];
  for (uint64_t r = 0; r < rounds; r++) {
    double t0 = cpu_s();
    for (size_t k = 0; k < n; k++)
      if (ember_wire_decode(msgs[k].data, msgs[k].len, NULL, &views[k], err, sizeof err) != 0)
        die(err);
    double t1 = cpu_s();
    for (size_t k = 0; k < n; k++)
      if (ember_wire_verify_hashes(views[k], err, sizeof err) != 0) die(err);
    double t2 = cpu_s();
    for (size_t k = 0; k < n; k++) ember_wire_free(views[k]);
    double t3 = cpu_s();
    dec = t1 - t0 < dec ? t1 - t0 : dec;
    ver = t2 - t1 < ver ? t2 - t1 : ver;
    fre = t3 - t2 < fre ? t3 - t2 : fre;
  }
  double unp = 1e30;
  for (uint64_t r = 0; r < rounds; r++) {
    double t0 = cpu_s();
    for (size_t k = 0; k < n; k++) {
      /* Decode's own arena, sized as ember_wire_decode sizes it. */
      ember__arena_t arena = {.next_size = msgs[k].len * 3 + 4096};
      ProtobufCAllocator alloc = {ember__arena_alloc, ember__arena_free, &arena};
      if (ember__wire__v2__profile__unpack(&alloc, msgs[k].len, (const uint8_t *)msgs[k].data) ==
          NULL)
        die("protobuf-c cannot unpack a window");
      ember__arena_release(&arena);
    }
    double t1 = cpu_s();
    unp = t1 - t0 < unp ? t1 - t0 : unp;
  }
  for (uint64_t r = 0; r < rounds; r++) {
    double t0 = cpu_s();
    for (size_t k = 0; k < n; k++) {
      ember_buf_reset(&msgs[k]);
      if (ember_codec_encode_v2(ps[k], &msgs[k]) != 0) die("encode");
    }
    double t1 = cpu_s();
    enc = t1 - t0 < enc ? t1 - t0 : enc;
  }
  for (size_t k = 0; k < n; k++) bytes += msgs[k].len;
  double per = 1e6 / (double)n;
  printf("wire_decode: %llu windows of %.0f bytes, best of %llu rounds, %s malloc\n",
         (unsigned long long)n, (double)bytes / (double)n, (unsigned long long)rounds,
         policy ? "the collector's" : "glibc's default");
  printf("  collector: decode %.1f us, hash check %.1f us, free %.1f us: %.1f us a window\n",
         dec * per, ver * per, fre * per, (dec + ver + fre) * per);
  printf("  of which protobuf-c's: unpack alone %.1f us a window\n", unp * per);
  printf("  agent: encode %.1f us a window\n", enc * per);
  for (size_t k = 0; k < n; k++) {
    ember_buf_free(&msgs[k]);
    ember_profile_free(ps[k]);
  }
  free(msgs);
  free(views);
  free(ps);
  free(ws); /* its strings live until exit (stream.h) */
  return 0;
}
