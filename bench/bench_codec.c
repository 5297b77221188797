/* Wire codec benchmark: encode/decode speed and message size of one
 * realistic window, against the field's common format, pprof (gzip), made
 * from the same profile in the same run; plus the size Kafka actually
 * carries with zstd batch compression.
 *
 *   bench_codec [stacks] [depth] [iterations]
 *
 * The profile: `stacks` distinct stacks of `depth` frames drawn from 2,000
 * functions in 6 modules (with build-ids, files, lines), two value types
 * (CPU samples and ns), as one busy target yields in a 10 s window. */
#include <stdio.h>
#include <stdlib.h>
#include <zstd.h>

#include "ember/codec.h"
#include "ember/export.h"
#include "ember/parse.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (uint32_t)(rng >> 16);
}

static ember_profile_t *make_profile(size_t nstacks, size_t depth) {
  static const char *modules[] = {"/usr/bin/api-server",
                                  "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                  "/usr/lib/x86_64-linux-gnu/libssl.so.3",
                                  "[kernel]",
                                  "/usr/lib/x86_64-linux-gnu/libz.so.1",
                                  "/tmp/perf-4242.map"};
  enum { NFUNCS = 2000 };
  static char names[NFUNCS][48], files[64][32];
  for (size_t i = 0; i < 64; i++) snprintf(files[i], sizeof files[i], "src/module_%zu.c", i);
  ember_frame_t funcs[NFUNCS];
  for (size_t i = 0; i < NFUNCS; i++) {
    snprintf(names[i], sizeof names[i], "service_handler_function_%zu", i);
    size_t m = i % 6;
    funcs[i] = (ember_frame_t){.function = names[i],
                               .file = m == 0 ? files[i % 64] : NULL,
                               .module = modules[m],
                               .build_id = m < 3 ? "4f1c2a9be07d33a1" : NULL,
                               .line = m == 0 ? (uint32_t)(i * 7 % 900) : 0,
                               .kind = m == 3   ? EMBER_FRAME_KERNEL
                                       : m == 5 ? EMBER_FRAME_JIT
                                                : EMBER_FRAME_NATIVE};
  }
  ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  if (ember_profile_new(types, 2, &p) != 0) abort();
  ember_labels_t l = {"api", "2.14.1", "host-17", NULL, 4242};
  ember_profile_set_labels(p, &l);
  ember_profile_set_window(p, 1700000000000000000, 1700000010000000000);
  ember_profile_set_period(p, 52631578);
  ember_profile_set_origin(p, "agent-host-17", 12345, NULL);
  ember_frame_t stack[EMBER_MAX_STACK_DEPTH];
  /* Stacks share their roots, as real ones do: main -> a few dispatchers. */
  for (size_t s = 0; ember_profile_nstacks(p) < nstacks; s++) {
    for (size_t d = 0; d < depth; d++) {
      size_t from_root = depth - 1 - d;
      size_t f = from_root < 3 ? from_root * 7 + s % (from_root + 1) : next_rand() % NFUNCS;
      stack[d] = funcs[f];
    }
    int64_t n = 1 + next_rand() % 20;
    int64_t v[] = {n, n * 52631578};
    if (ember_profile_add(p, stack, depth, v) != 0) abort();
  }
  return p;
}

static double now_s(void) { return (double)ember_time_mono_ns() / 1e9; }

int main(int argc, char **argv) {
  uint64_t nstacks = 500, depth = 30, iters = 2000;
  if ((argc > 1 && ember_parse_u64(argv[1], 1, 1000000, &nstacks) != 0) ||
      (argc > 2 && ember_parse_u64(argv[2], 1, EMBER_MAX_STACK_DEPTH, &depth) != 0) ||
      (argc > 3 && ember_parse_u64(argv[3], 1, 10000000, &iters) != 0)) {
    fprintf(stderr, "usage: bench_codec [stacks] [depth] [iterations]\n");
    return 2;
  }
  ember_profile_t *p = make_profile(nstacks, depth);
  ember_buf_t wire, pprof;
  ember_buf_init(&wire, 1u << 30);
  ember_buf_init(&pprof, 1u << 30);

  double t0 = now_s();
  for (uint64_t i = 0; i < iters; i++) {
    ember_buf_reset(&wire);
    if (ember_codec_encode(p, &wire) != 0) abort();
  }
  double enc = (now_s() - t0) / (double)iters;

  t0 = now_s();
  char err[256];
  for (uint64_t i = 0; i < iters; i++) {
    ember_profile_t *q = NULL;
    if (ember_codec_decode(wire.data, wire.len, NULL, &q, err, sizeof err) != 0) abort();
    ember_profile_free(q);
  }
  double dec = (now_s() - t0) / (double)iters;

  t0 = now_s();
  for (uint64_t i = 0; i < iters; i++) {
    ember_buf_reset(&pprof);
    if (ember_export_pprof(p, &pprof) != 0) abort();
  }
  double pp = (now_s() - t0) / (double)iters;

  size_t zcap = ZSTD_compressBound(wire.len);
  void *z = malloc(zcap);
  size_t zlen = ZSTD_compress(z, zcap, wire.data, wire.len, 3);
  if (ZSTD_isError(zlen)) abort();
  free(z);

  printf("bench_codec: one window, %llu stacks x depth %llu, %zu frames, %llu iterations\n",
         (unsigned long long)nstacks, (unsigned long long)depth, ember_profile_nframes(p),
         (unsigned long long)iters);
  printf("%-28s %12s %14s\n", "", "bytes", "time/op (us)");
  printf("%-28s %12zu %14.1f\n", "ember wire encode", wire.len, enc * 1e6);
  printf("%-28s %12s %14.1f\n", "ember wire decode+validate", "", dec * 1e6);
  printf("%-28s %12zu %14s\n", "ember wire, zstd -3 (Kafka)", zlen, "");
  printf("%-28s %12zu %14.1f\n", "peer: pprof.gz export", pprof.len, pp * 1e6);
  printf("ratio wire/pprof.gz %.2f, wire+zstd/pprof.gz %.2f; encode %.0f windows/s, decode %.0f "
         "windows/s\n",
         (double)wire.len / (double)pprof.len, (double)zlen / (double)pprof.len, 1 / enc, 1 / dec);
  ember_buf_free(&wire);
  ember_buf_free(&pprof);
  ember_profile_free(p);
  return 0;
}
