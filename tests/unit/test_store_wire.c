/* The store's write path from wire views (ember_store_write_wire): it
 * stores what the profile path stores, checks content it has not seen
 * (a wrong hash is refused whether or not the hash is already cached),
 * names the refused window, and a refused batch leaves nothing behind,
 * in the file or in the caches. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/testutil.h"

#include "ember/codec.h"
#include "ember/store.h"
#include "ember/wire.h"
#include "ember_v2.pb-c.h"

#define SEC 1000000000LL
#define T0  (1764460800LL * SEC) /* 2025-11-30T00:00:00Z */

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

static ember_store_t *open_store(const char *path) {
  tu_store_remove(path);
  return tu_store_open(path, (size_t)256 << 20);
}

/* A window of worker w: stacks fn<prefix><k> ... main, k < nstacks. */
static ember_profile_t *window(const char *w, int64_t start, uint64_t seq, const char *prefix,
                               size_t nstacks) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  ember_labels_t l = {.worker = w, .host = "h1"};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, 10000000);
  assert_int_equal(ember_profile_set_origin(p, "agent-1", seq, NULL), 0);
  for (size_t k = 0; k < nstacks; k++) {
    char name[64];
    snprintf(name, sizeof name, "fn%s%zu", prefix, k);
    ember_frame_t f[3] = {{.function = name, .file = "a.c", .module = "/bin/app", .line = 7},
                          {.function = "run", .module = "/bin/app", .address = 0x40},
                          {.function = "main", .module = "/bin/app", .build_id = "beef"}};
    int64_t v[2] = {(int64_t)k + 1, ((int64_t)k + 1) * 10000000};
    assert_int_equal(ember_profile_add(p, f, 3, v), 0);
  }
  return p;
}

/* The v2 view of `p`, after `mutate` (may be NULL) changed its message.
 * The message bytes are kept in *keep (free after the view). */
typedef void (*mutate_fn)(Ember__Wire__V2__Profile *m);

/* The allocator of the message being mutated, for mutations that add
 * arrays (tu_v2_add_hashes). */
static ProtobufCAllocator *mutating;

static ember_wire_t *view_of(const ember_profile_t *p, mutate_fn mutate, uint8_t **keep) {
  ember_buf_t b;
  ember_buf_init(&b, 1u << 24);
  assert_int_equal(ember_codec_encode_v2(p, &b), 0);
  uint8_t *bytes = (uint8_t *)b.data;
  size_t n = b.len;
  if (mutate) {
    /* Mutations may swap in arrays of their own: the message's blocks are
     * freed together, not through free_unpacked. */
    tu_blocks_t blocks;
    ProtobufCAllocator alloc = tu_blocks_allocator(&blocks);
    Ember__Wire__V2__Profile *m = ember__wire__v2__profile__unpack(&alloc, b.len, bytes);
    assert_non_null(m);
    mutating = &alloc;
    mutate(m);
    n = ember__wire__v2__profile__get_packed_size(m);
    bytes = malloc(n);
    ember__wire__v2__profile__pack(m, bytes);
    tu_blocks_free(&blocks);
    ember_buf_free(&b);
  } else {
    b.data = NULL;
    ember_buf_free(&b);
  }
  ember_wire_t *w = NULL;
  char err[256];
  if (ember_wire_decode(bytes, n, NULL, &w, err, sizeof err) != 0) fail_msg("decode: %s", err);
  *keep = bytes;
  return w;
}

static int64_t merged_total(ember_store_t *s, const char *worker, size_t *nstacks) {
  ember_store_selector_t sel = {.worker = worker};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, &sel, T0 - SEC, T0 + 3600 * SEC, EMBER_VT_CPU_SAMPLES, &p),
                   0);
  int64_t t = ember_profile_total(p, 0);
  if (nstacks) *nstacks = ember_profile_nstacks(p);
  ember_profile_free(p);
  return t;
}

static void test_store_wire_stores_what_profiles_store(void **state) {
  (void)state;
  char pa[512], pb[512];
  tu_store_path(pa, sizeof pa, "wire", "prof");
  tu_store_path(pb, sizeof pb, "wire", "view");
  ember_store_t *a = open_store(pa), *b = open_store(pb);
  ember_profile_t *ps[3];
  ember_wire_t *ws[3];
  uint8_t *keep[3];
  for (int i = 0; i < 3; i++) {
    ps[i] = window("api", T0 + i * 10 * SEC, (uint64_t)i + 1, i == 2 ? "x" : "", 20);
    ws[i] = view_of(ps[i], NULL, &keep[i]);
  }
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write(a, ps, 3, &r), 0);
  assert_int_equal(r.written, 3);
  assert_int_equal(ember_store_write_wire(b, ws, NULL, 3, &r), 0);
  assert_int_equal(r.written, 3);
  assert_true(r.bad == SIZE_MAX);
  size_t na, nb;
  assert_int_equal(merged_total(a, "api", &na), merged_total(b, "api", &nb));
  assert_int_equal(na, nb);
  assert_int_equal(na, 40); /* 20 stacks twice the same, 20 others */
  /* A replay is a duplicate on the view path too. */
  assert_int_equal(ember_store_write_wire(b, ws, NULL, 3, &r), 0);
  assert_int_equal(r.duplicates, 3);
  for (int i = 0; i < 3; i++) {
    ember_wire_free(ws[i]);
    free(keep[i]);
    ember_profile_free(ps[i]);
  }
  ember_store_close(a);
  ember_store_close(b);
  tu_store_remove(pa);
  tu_store_remove(pb);
}

/* Generated names are stored with their frames and read back: a mapped
 * frame, its twin without one and a third with another are three frames,
 * in the store's caches and after a reopen (read from the file). */
static void test_store_wire_keeps_generated_names(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "wire", "gen");
  ember_store_t *s = open_store(path);
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  ember_labels_t l = {.worker = "web", .host = "h1"};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, T0, T0 + 10 * SEC), 0);
  ember_profile_set_period(p, 10000000);
  assert_int_equal(ember_profile_set_origin(p, "agent-1", 1, NULL), 0);
  ember_frame_t mapped = {.function = "hotLoop",
                          .file = "/srv/src/alpha.ts",
                          .line = 3,
                          .module = "/srv/dist/app.js",
                          .generated = "a /srv/dist/app.js:1:40",
                          .kind = EMBER_FRAME_JIT};
  ember_frame_t twin = mapped, other = mapped;
  twin.generated = NULL;
  other.generated = "b /srv/dist/app.js:1:40";
  ember_frame_t main_f = {.function = "main", .module = "/usr/bin/node"};
  ember_frame_t s1[] = {mapped, main_f}, s2[] = {twin, main_f}, s3[] = {other, main_f};
  int64_t v1[] = {3, 30000000}, v2[] = {2, 20000000}, v3[] = {1, 10000000};
  assert_int_equal(ember_profile_add(p, s1, 2, v1), 0);
  assert_int_equal(ember_profile_add(p, s2, 2, v2), 0);
  assert_int_equal(ember_profile_add(p, s3, 2, v3), 0);
  uint8_t *keep;
  ember_wire_t *w = view_of(p, NULL, &keep);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write_wire(s, &w, NULL, 1, &r), 0);
  assert_int_equal(r.written, 1);
  for (int round = 0; round < 2; round++) {
    ember_store_selector_t sel = {.worker = "web"};
    ember_profile_t *q = NULL;
    assert_int_equal(
        ember_store_merge(s, &sel, T0 - SEC, T0 + 3600 * SEC, EMBER_VT_CPU_SAMPLES, &q), 0);
    assert_int_equal(ember_profile_nstacks(q), 3);
    int64_t by[3] = {0};
    for (uint32_t k = 0; k < ember_profile_nstacks(q); k++) {
      const uint32_t *ids;
      size_t depth;
      const int64_t *vals;
      ember_profile_stack(q, k, &ids, &depth, &vals);
      const ember_frame_t *f = ember_profile_frame(q, ids[0]);
      assert_string_equal(f->function, "hotLoop");
      assert_string_equal(f->file, "/srv/src/alpha.ts");
      int which = f->generated == NULL                                   ? 1
                  : strcmp(f->generated, "a /srv/dist/app.js:1:40") == 0 ? 0
                  : strcmp(f->generated, "b /srv/dist/app.js:1:40") == 0 ? 2
                                                                         : -1;
      assert_true(which >= 0);
      by[which] += vals[0];
    }
    assert_int_equal(by[0], 3);
    assert_int_equal(by[1], 2);
    assert_int_equal(by[2], 1);
    ember_profile_free(q);
    /* Again from the file, with cold caches. */
    ember_store_close(s);
    ember_store_opts_t o = {.map_size = (size_t)256 << 20, .no_sync = true};
    char err[256];
    if (ember_store_open(path, &o, &s, err, sizeof err) != 0) fail_msg("reopen: %s", err);
  }
  /* The same window again is a duplicate. */
  assert_int_equal(ember_store_write_wire(s, &w, NULL, 1, &r), 0);
  assert_int_equal(r.duplicates, 1);
  ember_wire_free(w);
  free(keep);
  ember_profile_free(p);
  ember_store_close(s);
  tu_store_remove(path);
}

/* Hashes as writers before 2026-12-03 sent them (readers check them);
 * today's writers leave them out. */
static void wrong_location_hash(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_LOCATION_HASHES, mutating);
  m->location_hash[0] ^= 0x10;
}
static void wrong_stack_hash(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_STACK_HASHES, mutating);
  m->stack_hash[1] ^= 0x10;
}
/* Location 0 (fn0, a new frame) claims the hash of location 1 (run, a
 * frame the store has cached by then). */
static void borrowed_hash(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_LOCATION_HASHES, mutating);
  m->location_hash[0] = m->location_hash[1];
}
static void bad_utf8(Ember__Wire__V2__Profile *m) {
  /* String 1 is the first location's module, "/bin/app": make it invalid
   * and keep the lengths right. */
  m->strings.data[1] = 0xff;
}

static void expect_refused(ember_store_t *s, mutate_fn mutate, const char *want) {
  ember_profile_t *good = window("api", T0 + 100 * SEC, 50, "", 5);
  ember_profile_t *bad = window("api", T0 + 110 * SEC, 51, "new", 5);
  uint8_t *k1, *k2;
  ember_wire_t *ws[2] = {view_of(good, NULL, &k1), view_of(bad, mutate, &k2)};
  ember_store_stats_t before, after;
  assert_int_equal(ember_store_stats(s, &before), 0);
  ember_store_write_result_t r;
  int rc = ember_store_write_wire(s, ws, NULL, 2, &r);
  if (rc != EMBER_ECORRUPT || r.bad != 1 || strstr(r.why, want) == NULL)
    fail_msg("want EMBER_ECORRUPT for window 1 with '%s', got rc %d, bad %zu, '%s'", want, rc,
             r.bad, r.why);
  /* Nothing of the batch was written, the good window included. */
  assert_int_equal(ember_store_stats(s, &after), 0);
  assert_int_equal(after.profile_rows, before.profile_rows);
  assert_int_equal(after.frames, before.frames);
  /* Alone, the good window goes in. */
  assert_int_equal(ember_store_write_wire(s, ws, NULL, 1, &r), 0);
  assert_int_equal(r.written, 1);
  ember_wire_free(ws[0]);
  ember_wire_free(ws[1]);
  free(k1);
  free(k2);
  ember_profile_free(good);
  ember_profile_free(bad);
}

static void test_store_wire_refuses_content_that_does_not_match(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "wire", "refuse");
  ember_store_t *s = open_store(path);
  /* Warm the caches with the frames "run" and "main". */
  ember_profile_t *p = window("api", T0, 1, "", 5);
  assert_int_equal(ember_store_write(s, &p, 1, NULL), 0);
  ember_profile_free(p);
  static const struct {
    mutate_fn fn;
    const char *want;
  } cases[] = {{wrong_location_hash, "location 0: hash"},
               {wrong_stack_hash, "sample 1: stack hash"},
               {borrowed_hash, "location 0: hash"},
               {bad_utf8, "not valid UTF-8"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* Each case on a store of its own, so that the good window is new. */
    ember_store_close(s);
    s = open_store(path);
    p = window("api", T0, 1, "", 5);
    assert_int_equal(ember_store_write(s, &p, 1, NULL), 0);
    ember_profile_free(p);
    expect_refused(s, cases[i].fn, cases[i].want);
  }
  ember_store_close(s);
  tu_store_remove(path);
}

/* A refused batch created frames and stacks in its transaction; the caches
 * must forget them. Were they kept, the next window naming those frames
 * would store ids that were never committed, and the merge would fail. */
static void test_store_wire_refused_batch_leaves_no_ids(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "wire", "ids");
  ember_store_t *s = open_store(path);
  ember_profile_t *warm = window("api", T0, 1, "", 3);
  assert_int_equal(ember_store_write(s, &warm, 1, NULL), 0);
  ember_profile_free(warm);
  /* Window 0 brings new frames fresh0.. and new stacks; window 1 is bad. */
  ember_profile_t *fresh = window("api", T0 + 10 * SEC, 2, "fresh", 8);
  ember_profile_t *bad = window("api", T0 + 20 * SEC, 3, "x", 2);
  uint8_t *k1, *k2;
  ember_wire_t *ws[2] = {view_of(fresh, NULL, &k1), view_of(bad, wrong_stack_hash, &k2)};
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write_wire(s, ws, NULL, 2, &r), EMBER_ECORRUPT);
  assert_int_equal(r.bad, 1);
  /* The fresh window again, now alone: its frames get ids that exist. */
  assert_int_equal(ember_store_write_wire(s, ws, NULL, 1, &r), 0);
  size_t n;
  assert_int_equal(merged_total(s, "api", &n), 6 + 36);
  assert_int_equal(n, 3 + 8);
  ember_wire_free(ws[0]);
  ember_wire_free(ws[1]);
  free(k1);
  free(k2);
  ember_profile_free(fresh);
  ember_profile_free(bad);
  ember_store_close(s);
  tu_store_remove(path);
}

/* v2 may send one stack twice: the store adds them into one entry. */
static int32_t twice_locs[6];
static uint32_t twice_depth[2];
static int64_t twice_vals[4];
static void same_stack_twice(Ember__Wire__V2__Profile *m) {
  /* A window of one sample s0 (3 locations) becomes [s0, s0]: the second
   * copy's first entry is a delta from the first copy's last. */
  assert_int_equal(m->n_sample_depth, 1);
  assert_int_equal(m->n_sample_locations, 3);
  int32_t abs[3], at = 0;
  for (int i = 0; i < 3; i++) abs[i] = at += m->sample_locations[i];
  for (int i = 0; i < 6; i++) twice_locs[i] = m->sample_locations[i % 3];
  twice_locs[3] = abs[0] - abs[2];
  twice_depth[0] = twice_depth[1] = m->sample_depth[0];
  for (int i = 0; i < 4; i++) twice_vals[i] = m->sample_values[i % 2];
  m->n_sample_depth = 2;
  m->sample_depth = twice_depth;
  m->n_sample_locations = 6;
  m->sample_locations = twice_locs;
  m->n_sample_values = 4;
  m->sample_values = twice_vals;
}

static void test_store_wire_same_stack_twice(void **state) {
  (void)state;
  char path[512];
  tu_store_path(path, sizeof path, "wire", "twice");
  ember_store_t *s = open_store(path);
  ember_profile_t *p = window("api", T0, 1, "", 1);
  uint8_t *k;
  ember_wire_t *w = view_of(p, same_stack_twice, &k);
  assert_int_equal(w->nsamples, 2);
  ember_store_write_result_t r;
  assert_int_equal(ember_store_write_wire(s, &w, NULL, 1, &r), 0);
  size_t n;
  assert_int_equal(merged_total(s, "api", &n), 2);
  assert_int_equal(n, 1);
  ember_wire_free(w);
  free(k);
  ember_profile_free(p);
  ember_store_close(s);
  tu_store_remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_wire_stores_what_profiles_store),
      cmocka_unit_test(test_store_wire_refuses_content_that_does_not_match),
      cmocka_unit_test(test_store_wire_refused_batch_leaves_no_ids),
      cmocka_unit_test(test_store_wire_same_stack_twice),
      cmocka_unit_test(test_store_wire_keeps_generated_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
