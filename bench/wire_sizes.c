/* Where a wire v2 window's bytes go (issue 14's size goal): bench_store's
 * stream, every 20th window (a different set of workers at each step, as
 * bench_store samples), encoded as agents encode it, compressed alone with
 * zstd (as a Kafka batch of one), against the same window as pprof.gz. Then
 * each column is left out in turn and the message compressed again: what
 * it saves is that column's share of the compressed window.
 *
 *   wire_sizes [--workers N] [--minutes M] [--level L]
 *
 * Defaults: 200 workers, 30 minutes (1,800 windows sampled of 36,000),
 * zstd level 3 (librdkafka's default). A column's share depends on what
 * compresses with what, so the shares add up to about, not exactly, the
 * whole. Figures and the command: bench/RESULTS.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "ember/export.h"
#include "ember/parse.h"
#include "ember/wire.h"
#include "ember_v2.pb-c.h"
#include "stream.h"

typedef Ember__Wire__V2__Profile v2_t;

static void drop_strings(v2_t *m) {
  m->strings.len = 0;
  m->n_string_lengths = m->n_string_prefix = 0;
}
static void drop_prefixes(v2_t *m) { m->n_string_prefix = 0; }
static void drop_functions(v2_t *m) { m->n_function_name = m->n_function_file = 0; }
static void drop_location_columns(v2_t *m) {
  m->n_location_function = m->n_location_module = m->n_location_line = m->n_location_kind = 0;
}
static void drop_addresses(v2_t *m) { m->n_location_address = 0; }
static void drop_stacks(v2_t *m) { m->n_sample_depth = m->n_sample_locations = 0; }
static void drop_values(v2_t *m) { m->n_sample_values = 0; }

static const struct {
  const char *what;
  void (*drop)(v2_t *m);
} columns[] = {
    {"strings (blob, lengths, prefixes)", drop_strings},
    {"  of which the prefix lengths (field 32)", drop_prefixes},
    {"functions (name, file)", drop_functions},
    {"locations (function, module, line, kind)", drop_location_columns},
    {"locations' addresses", drop_addresses},
    {"stacks (depths, locations)", drop_stacks},
    {"values", drop_values},
};
enum { NCOLUMNS = sizeof columns / sizeof columns[0] };

static void die(const char *what) {
  fprintf(stderr, "wire_sizes: %s\n", what);
  exit(1);
}

int main(int argc, char **argv) {
  uint64_t nworkers = 200, minutes = 30, level = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    uint64_t *v = strcmp(argv[i], "--workers") == 0   ? &nworkers
                  : strcmp(argv[i], "--minutes") == 0 ? &minutes
                  : strcmp(argv[i], "--level") == 0   ? &level
                                                      : NULL;
    if (v == NULL || ember_parse_u64(argv[i + 1], 1, 100000, v) != 0)
      die("usage: wire_sizes [--workers N] [--minutes M] [--level L]");
  }
  stream_init();
  stream_worker_t *ws = calloc(nworkers, sizeof *ws);
  ZSTD_CCtx *zc = ZSTD_createCCtx();
  size_t zcap = ZSTD_compressBound(1u << 26);
  uint8_t *z = malloc(zcap), *packed = malloc(1u << 26);
  if (ws == NULL || zc == NULL || z == NULL || packed == NULL) die("out of memory");
  for (size_t i = 0; i < nworkers; i++) stream_make_worker(&ws[i], i);
  ember_buf_t msg, pp;
  ember_buf_init(&msg, 1u << 26);
  ember_buf_init(&pp, 1u << 26);
  uint64_t samples = 0, windows = 0, raw = 0, pp_bytes = 0, whole = 0, without[NCOLUMNS] = {0};
  size_t total = (size_t)(minutes * 6 * nworkers);
  for (size_t k = 0; k < total; k++) {
    size_t widx = k % nworkers;
    uint64_t ns = 0;
    ember_profile_t *p =
        stream_window(&ws[widx], widx, STREAM_T0 + (int64_t)(k / nworkers) * STREAM_WIN, &ns);
    if ((k + k / nworkers) % 20 != 0) {
      ember_profile_free(p);
      continue;
    }
    ember_buf_reset(&msg);
    ember_buf_reset(&pp);
    if (ember_codec_encode_v2(p, &msg) != 0 || ember_export_pprof(p, &pp) != 0) die("encode");
    ember_profile_free(p);
    samples += ns;
    windows++;
    raw += msg.len;
    pp_bytes += pp.len;
    size_t n = ZSTD_compressCCtx(zc, z, zcap, msg.data, msg.len, (int)level);
    if (ZSTD_isError(n)) die("zstd");
    whole += n;
    v2_t *m = ember__wire__v2__profile__unpack(NULL, msg.len, (const uint8_t *)msg.data);
    if (m == NULL) die("unpack");
    for (size_t c = 0; c < NCOLUMNS; c++) {
      v2_t copy = *m;
      columns[c].drop(&copy);
      size_t len = ember__wire__v2__profile__pack(&copy, packed);
      n = ZSTD_compressCCtx(zc, z, zcap, packed, len, (int)level);
      if (ZSTD_isError(n)) die("zstd");
      without[c] += n;
    }
    ember__wire__v2__profile__free_unpacked(m, NULL);
  }
  double per = (double)samples;
  printf("wire_sizes: %llu windows sampled of %zu, %llu samples; zstd level %llu\n",
         (unsigned long long)windows, total, (unsigned long long)samples,
         (unsigned long long)level);
  printf("peer pprof.gz: %.1f bytes/sample\n", (double)pp_bytes / per);
  printf("wire v2: %.1f bytes/sample raw, %.1f after zstd = %.3f of pprof.gz\n", (double)raw / per,
         (double)whole / per, (double)whole / (double)pp_bytes);
  printf("%-44s %14s %12s\n", "column", "bytes/sample", "of pprof.gz");
  for (size_t c = 0; c < NCOLUMNS; c++) {
    double saved = (double)whole - (double)without[c];
    printf("%-44s %14.1f %12.3f\n", columns[c].what, saved / per, saved / (double)pp_bytes);
  }
  ember_buf_free(&msg);
  ember_buf_free(&pp);
  free(ws); /* its strings live until exit (stream.h) */
  free(z);
  free(packed);
  ZSTD_freeCCtx(zc);
  return 0;
}
