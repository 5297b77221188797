/* The benchmarks' synthetic fleet stream (stream.h): one generator for
 * every benchmark that needs a fleet's windows (first bench_store's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "stream.h"

static void die(const char *what, int rc) {
  fprintf(stderr, "bench stream: %s: %s\n", what, ember_strerror(rc));
  exit(1);
}

/* xorshift64: the next value of the generator whose state is *s. */
static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t next_rand(void) { return xorshift(&rng); }

/* The shared part: a runtime and libc that every worker's stacks pass
 * through near the root (what a fleet of services on one stack shares). */
enum { NSHARED = STREAM_NSHARED };
static ember_frame_t shared_frames[NSHARED];

/* Addresses as a linker lays functions out: each function starts where the
 * one before ended (sizes from 16 bytes to 4 KiB, 16-aligned) and a frame's
 * address (a return address) falls inside its function. A generator of its
 * own, so the rest of the stream is the same whatever it draws. */
static uint64_t address_rng = 0x2545f4914f6cdd1dULL;
static uint64_t next_address(uint64_t *end) {
  uint64_t r = xorshift(&address_rng);
  uint64_t size = 16 * (1 + (r >> 8) % ((r & 3) == 0 ? 256 : 32));
  uint64_t start = *end;
  *end += size;
  return start + 1 + (r >> 32) % (size - 1);
}

static const char *const shared_modules[][2] = {
    {"/usr/lib/x86_64-linux-gnu/libc.so.6", "c289da5071a3399de893d2af81d6a30c62646e1e"},
    {"/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30", "e3a1cf4bd3d5a31b2f6f9e3e7a77d3f0b96a1a2c"},
    {"/usr/lib/x86_64-linux-gnu/libssl.so.3", "9a1b7c5e5b0c0e2a4d7c3a51d9e2f0b4c1a8d6e3"},
    {"[kernel]", NULL},
};
static const char *const verbs[] = {"handle", "parse",  "encode", "decode", "write",  "read",
                                    "flush",  "lookup", "insert", "update", "commit", "poll"};
static const char *const nouns[] = {"request", "response", "header",  "buffer",  "session",
                                    "record",  "batch",    "message", "context", "frame",
                                    "index",   "cache",    "column",  "row"};

static void make_shared(void) {
  uint64_t end[4] = {0x1000, 0x1000, 0x1000, 0xffffffff81000000ULL};
  for (size_t i = 0; i < NSHARED; i++) {
    char buf[96];
    size_t m = i % 4;
    if (m == 3)
      snprintf(buf, sizeof buf, "__x64_sys_%s_%s_%zu", verbs[i % 12], nouns[i % 14], i);
    else if (m == 1)
      snprintf(buf, sizeof buf, "std::__detail::_%s_%s<char>::operator()_%zu", verbs[i % 12],
               nouns[(i / 3) % 14], i);
    else
      snprintf(buf, sizeof buf, "__%s_%s_internal_%zu", verbs[(i / 5) % 12], nouns[i % 14], i);
    shared_frames[i] = (ember_frame_t){.function = strdup(buf),
                                       .module = shared_modules[m][0],
                                       .build_id = shared_modules[m][1],
                                       .address = next_address(&end[m]),
                                       .kind = m == 3 ? EMBER_FRAME_KERNEL : EMBER_FRAME_NATIVE};
  }
}

void stream_make_worker(stream_worker_t *w, size_t idx) {
  static const char *const kinds[] = {"api", "ingest", "billing", "search", "auth", "render"};
  snprintf(w->name, sizeof w->name, "%s-%03zu", kinds[idx % 6], idx);
  snprintf(w->version, sizeof w->version, "v2.%zu.%zu", (idx / 7) % 3, idx % 5);
  snprintf(w->host, sizeof w->host, "host-%02zu", idx % STREAM_NHOSTS);
  snprintf(w->agent, sizeof w->agent, "agent-host-%02zu", idx % STREAM_NHOSTS);
  w->cpus = 1 + (unsigned)(idx % 4);
  char module[64], build_id[48];
  snprintf(module, sizeof module, "/srv/%s/bin/%s", w->name, kinds[idx % 6]);
  snprintf(build_id, sizeof build_id, "%016llx%08llx", (unsigned long long)next_rand(),
           (unsigned long long)(next_rand() & 0xffffffff));
  char *mod = strdup(module), *bid = strdup(build_id);
  uint64_t end = 0x401000;
  for (size_t i = 0; i < STREAM_NOWN; i++) {
    char fn[128], file[96];
    snprintf(fn, sizeof fn, "%s::%s::%s_%s_%zu", kinds[idx % 6], nouns[(i / 14) % 14],
             verbs[i % 12], nouns[i % 14], i);
    snprintf(file, sizeof file, "src/%s/%s_%s.cc", kinds[idx % 6], nouns[(i / 14) % 14],
             verbs[(i / 3) % 12]);
    w->own_names[i] = strdup(fn);
    w->own[i] = (ember_frame_t){.function = w->own_names[i],
                                .file = strdup(file),
                                .module = mod,
                                .build_id = bid,
                                .line = (uint32_t)(10 + (i * 37) % 2000),
                                .address = next_address(&end),
                                .kind = EMBER_FRAME_NATIVE};
  }
  /* Stacks: a root chain in the shared runtime (3-8 frames from a few
   * entry points), then the worker's frames, sometimes a libc/kernel leaf. */
  for (size_t s = 0; s < STREAM_NSTACKS; s++) {
    size_t depth = 5 + (size_t)(next_rand() % 26);
    size_t nroot = 3 + (size_t)(next_rand() % 6);
    if (nroot > depth - 1) nroot = depth - 1;
    size_t leaf_shared = next_rand() % 3 == 0 ? 1 + (size_t)(next_rand() % 3) : 0;
    if (leaf_shared + nroot >= depth) leaf_shared = 0;
    uint32_t *f = w->frames[s];
    /* Leaf first. */
    size_t d = 0;
    for (; d < leaf_shared; d++) f[d] = (uint32_t)(next_rand() % NSHARED);
    for (; d < depth - nroot; d++) f[d] = (uint32_t)(NSHARED + next_rand() % STREAM_NOWN);
    uint32_t entry = (uint32_t)(s % 4);
    for (size_t r = 0; d < depth; d++, r++)
      f[d] = (uint32_t)((entry * 8 + r * 3 + (r > 2 ? s % 3 : 0)) % NSHARED);
    w->depth[s] = (uint8_t)depth;
  }
}

/* Zipf-like rank: P(rank k) ~ 1/(k+1). */
static double zipf_cdf[STREAM_NSTACKS];
static void make_zipf(void) {
  double sum = 0;
  for (size_t k = 0; k < STREAM_NSTACKS; k++) sum += 1.0 / (double)(k + 1);
  double acc = 0;
  for (size_t k = 0; k < STREAM_NSTACKS; k++) {
    acc += 1.0 / (double)(k + 1) / sum;
    zipf_cdf[k] = acc;
  }
}
static size_t zipf(void) {
  double u = (double)(next_rand() >> 11) / 9007199254740992.0;
  size_t lo = 0, hi = STREAM_NSTACKS - 1;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (zipf_cdf[mid] < u)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static uint64_t agent_seq[STREAM_NHOSTS];

uint64_t stream_util_pct;

uint64_t stream_rand(void) { return next_rand(); }

const ember_frame_t *stream_frame(const stream_worker_t *w, uint32_t f) {
  return f < NSHARED ? &shared_frames[f] : &w->own[f - NSHARED];
}

ember_profile_t *stream_window(const stream_worker_t *w, size_t widx, int64_t start,
                               uint64_t *samples) {
  return stream_window_shaped(w, widx, start, NULL, samples, NULL);
}

ember_profile_t *stream_window_shaped(const stream_worker_t *w, size_t widx, int64_t start,
                                      const stream_shape_t *shape, uint64_t *samples,
                                      size_t *distinct) {
  static const stream_shape_t plain;
  if (shape == NULL) shape = &plain;
  static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};
  ember_profile_t *p = NULL;
  int rc = ember_profile_new(types, 2, &p);
  if (rc) die("profile_new", rc);
  ember_labels_t l = {w->name, w->version, shape->host ? shape->host : w->host, NULL,
                      (uint32_t)(1000 + widx)};
  ember_profile_set_labels(p, &l);
  ember_profile_set_window(p, start, start + STREAM_WIN);
  ember_profile_set_period(p, STREAM_PERIOD);
  uint64_t *seq = shape->seq ? shape->seq : &agent_seq[widx % STREAM_NHOSTS];
  ember_profile_set_origin(p, shape->agent ? shape->agent : w->agent, ++*seq, NULL);
  /* 19 Hz x cpus x 10 s at 25-55% utilisation: about 50-400 samples
   * (--util P: P% each, for lighter workers). */
  uint64_t pct = shape->util_pct   ? shape->util_pct
                 : stream_util_pct ? stream_util_pct
                                   : 25 + next_rand() % 31;
  uint64_t n = 190u * w->cpus * pct / 100;
  if (n == 0) n = 1;
  *samples = n;
  int64_t count[STREAM_NSTACKS] = {0}, cpu_ns[STREAM_NSTACKS] = {0};
  for (uint64_t i = 0; i < n; i++) {
    /* Rank k maps to a per-worker permutation so hot stacks differ. */
    size_t s = shape->spike_pct > 0 && next_rand() % 100 < shape->spike_pct
                   ? shape->spike_stack
                   : (zipf() * 7 + widx) % STREAM_NSTACKS;
    count[s]++;
    cpu_ns[s] += STREAM_PERIOD - STREAM_PERIOD / 10 + (int64_t)(next_rand() % (STREAM_PERIOD / 5));
  }
  ember_frame_t fr[STREAM_MAXDEPTH];
  size_t nd = 0;
  for (size_t s = 0; s < STREAM_NSTACKS; s++) {
    if (!count[s]) continue;
    for (size_t d = 0; d < w->depth[s]; d++) fr[d] = *stream_frame(w, w->frames[s][d]);
    int64_t v[2] = {count[s], cpu_ns[s]};
    rc = ember_profile_add(p, fr, w->depth[s], v);
    if (rc) die("profile_add", rc);
    nd++;
  }
  if (distinct != NULL) *distinct = nd;
  return p;
}

void stream_init(void) {
  make_shared();
  make_zipf();
}
