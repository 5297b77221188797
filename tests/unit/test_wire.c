/* Wire v2 (include/ember/wire.h): the hashes against the reference
 * implementation's vectors, round trips through the view and the profile,
 * version 1 read through the same entry point, and bad input of every kind
 * refused with a sentence (truncated, lengths out of range, a blob shorter
 * than its lengths, hashes that do not match their content). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/testutil.h"

#include "ember_v2.pb-c.h"
#include "ember/codec.h"
#include "ember/wire.h"

static const ember_value_type_t types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

/* testutil's sample window with its two more frames: a file-only frame
 * and one no stack uses (not sent). */
static ember_profile_t *sample_profile(void) { return tu_sample_profile(true); }

/* The bytes of an unpacked message, as a writer would send them (malloc'd;
 * *n their length). */
static uint8_t *repack(const Ember__Wire__V2__Profile *m, size_t *n) {
  *n = ember__wire__v2__profile__get_packed_size(m);
  uint8_t *out = malloc(*n ? *n : 1);
  assert_non_null(out);
  ember__wire__v2__profile__pack(m, out);
  return out;
}

static void encode_v2(const ember_profile_t *p, ember_buf_t *b) {
  ember_buf_init(b, 1u << 24);
  assert_int_equal(ember_codec_encode_v2(p, b), 0);
  assert_true(b->len > 0);
}

/* The message in `b`, unpacked with `alloc` (NULL: free it with
 * free_unpacked). */
static Ember__Wire__V2__Profile *unpack_msg(const ember_buf_t *b, ProtobufCAllocator *alloc) {
  Ember__Wire__V2__Profile *m =
      ember__wire__v2__profile__unpack(alloc, b->len, (const uint8_t *)b->data);
  assert_non_null(m);
  return m;
}

/* The hashes are on the wire: pinned to values of the reference XXH64
 * (libxxhash 0.8.1, through its XXH64()) over the inputs the header
 * defines. */
static void test_wire_hashes_are_xxh64(void **state) {
  (void)state;
  assert_true(ember_wire_string_hash("", 0) == 0xef46db3751d8e999ULL);
  assert_true(ember_wire_string_hash("a", 1) == 0xd24ec4f1a98c6e5bULL);
  assert_true(ember_wire_string_hash("abc", 3) == 0x44bc2cf5ad770999ULL);
  const char *s42 = "0123456789abcdef0123456789abcdef0123456789";
  assert_true(ember_wire_string_hash(s42, strlen(s42)) == 0xa76190c3acf08a1cULL);
  char x[100];
  memset(x, 'x', sizeof x);
  assert_true(ember_wire_string_hash(x, sizeof x) == 0x92f0de5a88a3c094ULL);

  /* The generated name's slot is ignored without `generated`. */
  uint64_t ha[EMBER_WIRE_LOC_STRINGS] = {
      ember_wire_string_hash("main", 4), ember_wire_string_hash("prog.c", 6),
      ember_wire_string_hash("/usr/bin/prog", 13), ember_wire_string_hash("0123456789ab", 12), 7};
  const char *libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
  uint64_t hb[EMBER_WIRE_LOC_STRINGS] = {
      ember_wire_string_hash("", 0), ember_wire_string_hash("", 0),
      ember_wire_string_hash(libc, strlen(libc)), ember_wire_string_hash("", 0), 0};
  uint64_t la = ember_wire_location_hash(0x401000, 42, 0, ha, false);
  uint64_t lb = ember_wire_location_hash(0x29d90, 0, 0, hb, false);
  assert_true(la == 0x3fbd74029b59cb20ULL);
  assert_true(lb == 0x2d7c2067bfdebd56ULL);
  uint64_t stack[2] = {la, lb};
  assert_true(ember_wire_stack_hash(stack, 2) == 0xec901e95e4b479a7ULL);

  /* With a generated name: 56 bytes, the generated name's hash last. */
  const char *s[EMBER_WIRE_LOC_STRINGS] = {"hotLoop", "/srv/app/src/alpha.ts",
                                           "/srv/app/dist/app.js", "",
                                           "a /srv/app/dist/app.js:1:4711"};
  uint64_t hc[EMBER_WIRE_LOC_STRINGS];
  for (int i = 0; i < EMBER_WIRE_LOC_STRINGS; i++)
    hc[i] = ember_wire_string_hash(s[i], strlen(s[i]));
  assert_true(hc[EMBER_WIRE_LOC_GENERATED] == 0xfb29483a63b31071ULL);
  assert_true(ember_wire_location_hash(0, 12, 2, hc, true) == 0x581b92a0b99bee0aULL);
  assert_true(ember_wire_location_hash(0, 12, 2, hc, false) == 0x1b984527e175bb81ULL);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* How many of v[0..n) repeat one before (sorts v). */
static size_t repeats(uint64_t *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_u64);
  size_t r = 0;
  for (size_t i = 1; i < n; i++) r += v[i] == v[i - 1];
  return r;
}

/* The store's keys (wire_key.c) tell contents apart: function names of 1
 * to 40 bytes, each also with any one byte changed (every byte of a
 * string counts, whichever of its words it falls in), names that differ
 * only in length, each field of a location changed alone, and stacks of
 * the same locations in another order. */
static void test_wire_keys_tell_contents_apart(void **state) {
  (void)state;
  ember_profile_t *p = NULL;
  const ember_value_type_t vt[] = {EMBER_VT_CPU_SAMPLES};
  assert_int_equal(ember_profile_new(vt, 1, &p), 0);
  int64_t one = 1;
  size_t nframes = 0;
  char name[48];
  for (size_t len = 1; len <= 40; len++) {
    for (size_t j = 0; j <= len; j++) {
      memset(name, 'a', len);
      name[len] = '\0';
      if (j < len) name[j] = 'b';
      ember_frame_t f = {.function = name, .module = "/bin/x"};
      assert_int_equal(ember_profile_add(p, &f, 1, &one), 0);
      nframes++;
    }
  }
  const ember_frame_t base = {.function = "f",
                              .file = "f.c",
                              .module = "/bin/x",
                              .build_id = "ab",
                              .generated = "g",
                              .line = 7,
                              .address = 0x40,
                              .kind = EMBER_FRAME_NATIVE};
  ember_frame_t fields[] = {base, base, base, base, base, base, base, base, base, base};
  fields[1].file = "g.c";
  fields[2].module = "/bin/y";
  fields[3].build_id = "ac";
  fields[4].generated = "h";
  fields[5].generated = NULL;
  fields[6].line = 8;
  fields[7].address = 0x41;
  fields[8].kind = EMBER_FRAME_KERNEL;
  fields[9].file = NULL;
  for (size_t i = 0; i < 10; i++) assert_int_equal(ember_profile_add(p, &fields[i], 1, &one), 0);
  nframes += 10;
  ember_frame_t ab[2] = {fields[1], fields[2]}, ba[2] = {fields[2], fields[1]};
  assert_int_equal(ember_profile_add(p, ab, 2, &one), 0);
  assert_int_equal(ember_profile_add(p, ba, 2, &one), 0);
  ember_wire_t *w = NULL;
  assert_int_equal(ember_wire_from_profile(p, &w), 0);
  assert_int_equal(w->nlocations, nframes);
  assert_int_equal(w->nsamples, nframes + 2);
  uint64_t *keys = malloc((nframes + 2) * sizeof *keys);
  assert_non_null(keys);
  memcpy(keys, w->loc_key, nframes * sizeof *keys);
  assert_int_equal(repeats(keys, nframes), 0);
  memcpy(keys, w->stack_key, (nframes + 2) * sizeof *keys);
  assert_int_equal(repeats(keys, nframes + 2), 0);
  free(keys);
  ember_wire_free(w);
  ember_profile_free(p);
}

static void test_wire_round_trip(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode_v2(p, &b);
  assert_int_equal(ember_wire_peek_version(b.data, b.len), 2);

  /* The view: only used frames are locations; keys as from_profile's. */
  ember_wire_t *w = NULL, *f = NULL;
  char err[256] = "";
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &w, err, sizeof err), 0);
  assert_int_equal(w->version, 2);
  assert_int_equal(w->nsamples, 5);
  assert_int_equal(w->nlocations, ember_profile_nframes(p) - 1);
  assert_string_equal(w->agent_id, "agent-7");
  assert_null(w->session_id);
  assert_string_equal(w->labels.actor, "room-7");
  /* Front-coded strings, no hashes sent: nothing to verify. */
  assert_null(w->loc_hash);
  assert_null(w->stack_hash);
  assert_true(w->hashes_checked);
  Ember__Wire__V2__Profile *m = unpack_msg(&b, NULL);
  assert_int_equal(m->n_location_hash, 0);
  assert_int_equal(m->n_stack_hash, 0);
  /* Laid out for zstd: functions in name order, locations in function
   * order. */
  for (size_t i = 1; i < m->n_function_name; i++) assert_true(m->function_name[i] > 0);
  for (size_t i = 1; i < m->n_location_function; i++) assert_true(m->location_function[i] >= 0);
  assert_int_equal(m->n_string_prefix, m->n_string_lengths);
  size_t shared = 0;
  for (size_t i = 0; i < m->n_string_prefix; i++) shared += m->string_prefix[i];
  assert_true(shared > 0);
  ember__wire__v2__profile__free_unpacked(m, NULL);
  assert_int_equal(ember_wire_from_profile(p, &f), 0);
  /* The same locations (in another order: a view keeps first use) and
   * the same stacks. */
  assert_int_equal(f->nlocations, w->nlocations);
  for (size_t i = 0; i < w->nlocations; i++) {
    size_t same = 0;
    for (size_t j = 0; j < f->nlocations; j++) same += f->loc_key[j] == w->loc_key[i];
    assert_int_equal(same, 1);
    assert_int_equal(ember_wire_check_location(w, i, err, sizeof err), 0);
  }
  for (size_t i = 0; i < w->nsamples; i++) assert_true(f->stack_key[i] == w->stack_key[i]);
  assert_true(f->hashes_checked);
  ember_wire_free(f);
  ember_wire_free(w);

  /* The profile, through ember_codec_decode as through the view. */
  ember_profile_t *q = NULL;
  assert_int_equal(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err), 0);
  tu_assert_profiles_equal(p, q);
  const ember_labels_t *l = ember_profile_labels(q);
  assert_string_equal(l->worker, "api");
  assert_string_equal(l->version, "1.4.2");
  assert_string_equal(l->host, "host-a");
  assert_int_equal(l->pid, 4242);
  int64_t s, e;
  ember_profile_window(q, &s, &e);
  assert_int_equal(s, 1700000000000000000);
  assert_int_equal(e, 1700000010000000000);
  assert_int_equal(ember_profile_period(q), 52631578);
  assert_int_equal(ember_profile_seq(q), 99);
  assert_int_equal(ember_profile_total(q, 0), 47);

  /* Re-encoding the decoded profile gives the same bytes. */
  ember_buf_t b2;
  encode_v2(q, &b2);
  assert_int_equal(b.len, b2.len);
  assert_memory_equal(b.data, b2.data, b.len);

  /* Version 1 reads through ember_wire_decode too, with the same keys. */
  ember_buf_t v1;
  ember_buf_init(&v1, 1u << 24);
  assert_int_equal(ember_codec_encode(p, &v1), 0);
  assert_int_equal(ember_wire_peek_version(v1.data, v1.len), 1);
  assert_int_equal(ember_wire_decode(v1.data, v1.len, NULL, &w, err, sizeof err), 0);
  assert_int_equal(w->version, 1);
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &f, err, sizeof err), 0);
  assert_int_equal(w->nsamples, f->nsamples);
  for (size_t i = 0; i < w->nsamples; i++) assert_true(w->stack_key[i] == f->stack_key[i]);
  ember_wire_free(w);
  ember_wire_free(f);
  ember_buf_free(&v1);
  ember_buf_free(&b2);
  ember_buf_free(&b);
  ember_profile_free(q);
  ember_profile_free(p);
}

/* Every value type at once (six, in-use gauges among them), in a shuffled
 * order, through both wire versions and into a store's write path view. */
static void test_wire_six_value_types(void **state) {
  (void)state;
  const ember_value_type_t six[] = {EMBER_VT_INUSE_BYTES,   EMBER_VT_CPU_SAMPLES,
                                    EMBER_VT_ALLOC_OBJECTS, EMBER_VT_INUSE_OBJECTS,
                                    EMBER_VT_CPU_NS,        EMBER_VT_ALLOC_BYTES};
  assert_int_equal(EMBER_MAX_VALUE_TYPES, 6);
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(six, 6, &p), 0);
  assert_int_equal(ember_profile_set_window(p, 1700000000000000000, 1700000010000000000), 0);
  ember_frame_t f[] = {{.function = "leak_step", .module = "/usr/bin/app"},
                       {.function = "main", .module = "/usr/bin/app"}};
  int64_t v[] = {6LL << 20, 1, 2, 3, 4, 5};
  assert_int_equal(ember_profile_add(p, f, 2, v), 0);
  ember_buf_t b1, b2;
  ember_buf_init(&b1, 1u << 24);
  assert_int_equal(ember_codec_encode(p, &b1), 0);
  encode_v2(p, &b2);
  char err[256] = "";
  ember_buf_t *bufs[] = {&b1, &b2};
  for (size_t i = 0; i < 2; i++) {
    ember_profile_t *q = NULL;
    assert_int_equal(ember_codec_decode(bufs[i]->data, bufs[i]->len, NULL, &q, err, sizeof err), 0);
    tu_assert_profiles_equal(p, q);
    assert_int_equal(ember_profile_ntypes(q), 6);
    assert_int_equal(ember_profile_type(q, 0), EMBER_VT_INUSE_BYTES);
    assert_int_equal(ember_profile_total(q, 3), 3);
    ember_profile_free(q);
    ember_wire_t *w = NULL;
    assert_int_equal(ember_wire_decode(bufs[i]->data, bufs[i]->len, NULL, &w, err, sizeof err), 0);
    assert_int_equal(w->ntypes, 6);
    assert_int_equal(w->types[3], EMBER_VT_INUSE_OBJECTS);
    ember_wire_free(w);
  }
  /* A seventh type, or an unknown number, is refused. */
  const ember_value_type_t bad[] = {(ember_value_type_t)7};
  ember_profile_t *x = NULL;
  assert_int_equal(ember_profile_new(bad, 1, &x), -EINVAL);
  ember_buf_free(&b1);
  ember_buf_free(&b2);
  ember_profile_free(p);
}

static void test_wire_empty_window(void **state) {
  (void)state;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 1, &p), 0);
  assert_int_equal(ember_profile_set_window(p, 10, 20), 0);
  assert_int_equal(ember_profile_set_origin(p, NULL, 0, "sess-1"), 0);
  ember_buf_t b;
  encode_v2(p, &b);
  ember_profile_t *q = NULL;
  char err[256] = "";
  assert_int_equal(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err), 0);
  assert_int_equal(ember_profile_nstacks(q), 0);
  assert_string_equal(ember_profile_session_id(q), "sess-1");
  assert_null(ember_profile_agent_id(q));
  ember_buf_free(&b);
  ember_profile_free(q);
  ember_profile_free(p);
}

static void test_wire_every_truncation_is_an_error(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode_v2(p, &b);
  for (size_t n = 0; n < b.len; n++) {
    ember_wire_t *w = NULL;
    char err[256] = "";
    int rc = ember_wire_decode(b.data, n, NULL, &w, err, sizeof err);
    if (rc != EMBER_ECORRUPT && rc != EMBER_EVERSION)
      fail_msg("cut at %zu of %zu: rc %d (%s)", n, b.len, rc, err);
    assert_null(w);
    assert_true(strlen(err) > 10);
  }
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_wire_limits(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode_v2(p, &b);
  ember_codec_limits_t lim;
  ember_wire_t *w = NULL;
  char err[256];
  struct {
    size_t *field, value;
    const char *msg;
  } cases[] = {
      {&lim.max_message, b.len - 1, "at most"},
      {&lim.max_samples, 4, "5 samples (at most 4)"},
      {&lim.max_strings, 2, "strings (at most 2)"},
      {&lim.max_locations, 2, "locations (at most 2)"},
      {&lim.max_depth, 2, "stack of 3 frames"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    ember_codec_limits_default(&lim);
    *cases[i].field = cases[i].value;
    assert_int_equal(ember_wire_decode(b.data, b.len, &lim, &w, err, sizeof err), EMBER_ETOOBIG);
    if (strstr(err, cases[i].msg) == NULL) fail_msg("case %zu: '%s'", i, err);
    assert_null(w);
  }
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* Decode a valid message, let `mutate` break it, re-encode it with
 * protobuf-c, and check both readers: the view (structure only) and the
 * profile (everything). Mutations swap pointers, so the message is
 * unpacked into blocks freed together. */
typedef void (*mutate_fn)(Ember__Wire__V2__Profile *m);

/* The allocator of the message being mutated, for mutations that add
 * arrays (tu_v2_add_hashes). */
static ProtobufCAllocator *mutating;

/* view_ok: the view's structural checks pass and only the profile's
 * content checks (hashes, text) refuse it. */
static void expect_error_of(ember_profile_t *(*make)(void), mutate_fn mutate, bool view_ok,
                            int want_rc, const char *want_msg) {
  ember_profile_t *p = make();
  ember_buf_t b;
  encode_v2(p, &b);
  tu_blocks_t blocks;
  ProtobufCAllocator alloc = tu_blocks_allocator(&blocks);
  Ember__Wire__V2__Profile *m = unpack_msg(&b, &alloc);
  mutating = &alloc;
  mutate(m);
  size_t n;
  uint8_t *out = repack(m, &n);
  ember_wire_t *w = NULL;
  char err[256] = "";
  int rc = ember_wire_decode(out, n, NULL, &w, err, sizeof err);
  if (view_ok && (m->n_location_hash || m->n_stack_hash)) {
    if (rc != 0) fail_msg("the view refused it: rc %d '%s'", rc, err);
    /* Content that disagrees with the hashes sent: verifying says what,
     * and the view is not marked checked (the store would check it
     * again). */
    assert_false(w->hashes_checked);
    err[0] = '\0';
    rc = ember_wire_verify_hashes(w, err, sizeof err);
    if (rc != want_rc || strstr(err, want_msg) == NULL)
      fail_msg("verify: want rc %d and '%s', got rc %d and '%s'", want_rc, want_msg, rc, err);
    assert_false(w->hashes_checked);
    ember_wire_free(w);
  } else if (view_ok) {
    if (rc != 0) fail_msg("the view refused it: rc %d '%s'", rc, err);
    /* No hashes sent: they are the content's, and a reader that takes a
     * location's content finds what is wrong with it. */
    assert_true(w->hashes_checked);
    assert_int_equal(ember_wire_verify_hashes(w, err, sizeof err), 0);
    rc = 0;
    for (size_t i = 0; i < w->nlocations && rc == 0; i++)
      rc = ember_wire_check_location(w, i, err, sizeof err);
    if (rc != want_rc || strstr(err, want_msg) == NULL)
      fail_msg("check: want rc %d and '%s', got rc %d and '%s'", want_rc, want_msg, rc, err);
    ember_wire_free(w);
  } else if (rc != want_rc || strstr(err, want_msg) == NULL) {
    fail_msg("view: want rc %d and '%s', got rc %d and '%s'", want_rc, want_msg, rc, err);
  }
  ember_profile_t *q = NULL;
  err[0] = '\0';
  rc = ember_codec_decode(out, n, NULL, &q, err, sizeof err);
  if (rc != want_rc || strstr(err, want_msg) == NULL)
    fail_msg("profile: want rc %d and '%s', got rc %d and '%s'", want_rc, want_msg, rc, err);
  assert_null(q);
  free(out);
  tu_blocks_free(&blocks);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void expect_error(mutate_fn mutate, bool view_ok, int want_rc, const char *want_msg) {
  expect_error_of(sample_profile, mutate, view_ok, want_rc, want_msg);
}

static void bad_version(Ember__Wire__V2__Profile *m) { m->version = 3; }
static void no_end_mark(Ember__Wire__V2__Profile *m) { m->end_mark = 0; }
static void reversed_window(Ember__Wire__V2__Profile *m) { m->window_end_ns = 1; }
static void negative_period(Ember__Wire__V2__Profile *m) { m->period_ns = -1; }
static void bad_value_type(Ember__Wire__V2__Profile *m) { m->value_types[1] = 42; }
static void dup_value_type(Ember__Wire__V2__Profile *m) { m->value_types[1] = m->value_types[0]; }
static void blob_short(Ember__Wire__V2__Profile *m) { m->strings.len -= 3; }
static void blob_long(Ember__Wire__V2__Profile *m) { m->string_lengths[1] -= 1; }
static void huge_length(Ember__Wire__V2__Profile *m) { m->string_lengths[1] = 5000; }
static void string0(Ember__Wire__V2__Profile *m) {
  m->string_lengths[0] = 1;
  m->string_lengths[1] -= 1;
}
static void bad_string_index(Ember__Wire__V2__Profile *m) { m->function_name[0] = 5000; }
static void bad_module_string(Ember__Wire__V2__Profile *m) { m->module_build_id[0] = 5000; }
static void modules_uneven(Ember__Wire__V2__Profile *m) { m->n_module_build_id--; }
static void bad_function(Ember__Wire__V2__Profile *m) { m->location_function[0] = 99; }
static void bad_module(Ember__Wire__V2__Profile *m) { m->location_module[0] = 77; }
static void bad_kind(Ember__Wire__V2__Profile *m) { m->location_kind[0] = 9; }
static void columns_uneven(Ember__Wire__V2__Profile *m) { m->n_location_kind--; }
static void hashes_short(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_LOCATION_HASHES, mutating);
  m->n_location_hash--;
}
static void prefixes_uneven(Ember__Wire__V2__Profile *m) { m->n_string_prefix--; }
static void prefix_of_empty(Ember__Wire__V2__Profile *m) { m->string_prefix[1] = 1; }
static void prefix_too_long(Ember__Wire__V2__Profile *m) {
  m->string_prefix[3] = m->string_prefix[2] + m->string_lengths[2] + 1;
}
static void depth_zero(Ember__Wire__V2__Profile *m) { m->sample_depth[3] = 0; }
static void depths_past_end(Ember__Wire__V2__Profile *m) { m->sample_depth[4] += 5; }
static void depths_short(Ember__Wire__V2__Profile *m) { m->sample_depth[4] -= 1; }
static void bad_location(Ember__Wire__V2__Profile *m) { m->sample_locations[2] += 1000; }
static void negative_location(Ember__Wire__V2__Profile *m) { m->sample_locations[0] = -1; }
static void negative_function(Ember__Wire__V2__Profile *m) { m->function_name[0] = -3; }
static void negative_value(Ember__Wire__V2__Profile *m) { m->sample_values[5] = -5; }
static void missing_value(Ember__Wire__V2__Profile *m) { m->n_sample_values--; }
static void hashes_uneven(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_STACK_HASHES, mutating);
  m->n_stack_hash--;
}
static void unused_location(Ember__Wire__V2__Profile *m) {
  /* Sample 0 (hot, main) becomes (main, main): hot, which no other sample
   * uses, is left over. Delta-coded: hot, main - hot becomes main, 0 (the
   * next entry's delta is still from main). */
  m->sample_locations[0] += m->sample_locations[1];
  m->sample_locations[1] = 0;
}
static char bad_label[] = "\xed\xa0\x80";
static void bad_utf8_label(Ember__Wire__V2__Profile *m) { m->worker = bad_label; }
/* Content checks: the view takes these, the profile refuses them. */
static void wrong_location_hash(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_LOCATION_HASHES, mutating);
  m->location_hash[1] ^= 1;
}
static void wrong_stack_hash(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_STACK_HASHES, mutating);
  m->stack_hash[2] += 1;
}
static void bad_utf8(Ember__Wire__V2__Profile *m) { m->strings.data[1] = 0xff; }
static void nul_in_string(Ember__Wire__V2__Profile *m) { m->strings.data[1] = 0; }
/* The same from writers that sent stack hashes: the stack that names the
 * bad text says why it does not hash as sent. */
static void bad_utf8_hashed(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_STACK_HASHES, mutating);
  bad_utf8(m);
}
static void nul_in_string_hashed(Ember__Wire__V2__Profile *m) {
  tu_v2_add_hashes(m, TU_STACK_HASHES, mutating);
  nul_in_string(m);
}

static void test_wire_rejects_bad_input(void **state) {
  (void)state;
  expect_error(bad_version, false, EMBER_EVERSION, "schema version 3 is not supported");
  expect_error(no_end_mark, false, EMBER_ECORRUPT, "truncated");
  expect_error(reversed_window, false, EMBER_ECORRUPT, "window ends");
  expect_error(negative_period, false, EMBER_ECORRUPT, "negative sampling period");
  expect_error(bad_value_type, false, EMBER_ECORRUPT, "value type 1: unknown type 42");
  expect_error(dup_value_type, false, EMBER_ECORRUPT, "value type 1 repeats");
  expect_error(blob_short, false, EMBER_ECORRUPT, "string lengths add up to more than");
  expect_error(blob_long, false, EMBER_ECORRUPT, "the blob has");
  expect_error(huge_length, false, EMBER_ETOOBIG, "string 1: 5000 bytes");
  expect_error(string0, false, EMBER_ECORRUPT, "string 0 must be empty");
  expect_error(bad_string_index, false, EMBER_ECORRUPT, "function 0: string index 5000");
  expect_error(bad_module_string, false, EMBER_ECORRUPT, "module 0: string index 5000");
  expect_error(modules_uneven, false, EMBER_ECORRUPT, "module names for");
  expect_error(bad_function, false, EMBER_ECORRUPT, "location 0: function 99 out of range");
  expect_error(bad_module, false, EMBER_ECORRUPT, "location 0: module 77 out of range");
  expect_error(bad_kind, false, EMBER_ECORRUPT, "location 0: unknown frame kind 9");
  expect_error(columns_uneven, false, EMBER_ECORRUPT, "location columns of different lengths");
  expect_error(hashes_short, false, EMBER_ECORRUPT, "7 hashes)");
  expect_error(prefixes_uneven, false, EMBER_ECORRUPT, "string prefixes for");
  expect_error(prefix_of_empty, false, EMBER_ECORRUPT,
               "string 1: a prefix of 1 bytes of a string of 0");
  expect_error(prefix_too_long, false, EMBER_ECORRUPT, "string 3: a prefix of");
  expect_error(depth_zero, false, EMBER_ECORRUPT, "sample 3: stack of 0 frames");
  expect_error(depths_past_end, false, EMBER_ECORRUPT, "sample 4: its 7 frames run past");
  expect_error(depths_short, false, EMBER_ECORRUPT, "the depths add up to");
  expect_error(bad_location, false, EMBER_ECORRUPT, "out of range (have 8 locations)");
  expect_error(negative_location, false, EMBER_ECORRUPT, "sample location 0: index out of range");
  expect_error(negative_function, false, EMBER_ECORRUPT, "function 0: name index out of range");
  expect_error(negative_value, false, EMBER_ECORRUPT, "sample 2: negative value -5");
  expect_error(missing_value, false, EMBER_ECORRUPT, "values for 5 samples");
  expect_error(hashes_uneven, false, EMBER_ECORRUPT, "stack hashes for 5 samples");
  expect_error(unused_location, false, EMBER_ECORRUPT, "is used by no sample");
  expect_error(bad_utf8_label, false, EMBER_ECORRUPT, "label 0: not valid UTF-8");
  expect_error(wrong_location_hash, true, EMBER_ECORRUPT, "location 1: hash");
  expect_error(wrong_stack_hash, true, EMBER_ECORRUPT, "sample 2: stack hash");
  expect_error(bad_utf8, true, EMBER_ECORRUPT, "not valid UTF-8");
  expect_error(nul_in_string, true, EMBER_ECORRUPT, "holds a NUL byte");
  expect_error(bad_utf8_hashed, true, EMBER_ECORRUPT, "not valid UTF-8");
  expect_error(nul_in_string_hashed, true, EMBER_ECORRUPT, "holds a NUL byte");
}

/* A window of a JavaScript service whose frames the agent named through a
 * source map: hotLoop keeps its generated name; its twin (the same frame
 * where no map was found) has none; a native frame calls both. */
static ember_profile_t *generated_profile(void) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  ember_labels_t l = {"web", "2.0", "host-b", NULL, 77};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, 1700000000000000000, 1700000010000000000), 0);
  assert_int_equal(ember_profile_set_origin(p, "agent-9", 5, NULL), 0);
  ember_frame_t mapped = {.function = "hotLoop",
                          .file = "/srv/app/src/alpha.ts",
                          .line = 12,
                          .module = "/srv/app/dist/app.js",
                          .generated = "a /srv/app/dist/app.js:1:4711",
                          .kind = EMBER_FRAME_JIT};
  ember_frame_t twin = mapped;
  twin.generated = NULL;
  ember_frame_t anon = mapped;
  anon.function = NULL;
  anon.file = NULL;
  anon.generated = "/srv/app/dist/app.js:1:90";
  ember_frame_t node = {.function = "node::Start", .module = "/usr/bin/node"};
  ember_frame_t s1[] = {mapped, node}, s2[] = {twin, node}, s3[] = {anon, mapped, node};
  int64_t v1[] = {30, 300}, v2[] = {10, 100}, v3[] = {1, 10};
  assert_int_equal(ember_profile_add(p, s1, 2, v1), 0);
  assert_int_equal(ember_profile_add(p, s2, 2, v2), 0);
  assert_int_equal(ember_profile_add(p, s3, 3, v3), 0);
  return p;
}

/* Generated names travel in both versions, take part in the location
 * hash only when present (older hashes stay as they were), and the v2
 * end mark still comes last. */
static void test_wire_generated_names(void **state) {
  (void)state;
  ember_profile_t *p = generated_profile();
  ember_buf_t b;
  encode_v2(p, &b);
  static const unsigned char mark[6] = {0xf5, 0x01, 0x52, 0x42, 0x4d, 0x45};
  assert_true(b.len > sizeof mark);
  assert_memory_equal(b.data + b.len - sizeof mark, mark, sizeof mark);
  ember_wire_t *w = NULL, *v1w = NULL;
  char err[256] = "";
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &w, err, sizeof err), 0);
  assert_non_null(w->fn_generated);
  assert_int_equal(w->nlocations, 4);
  /* Locations in the order of their functions, which are in the order of
   * their names (none first), files, generated names (none first): anon,
   * twin, mapped, node. */
  const char *str[EMBER_WIRE_LOC_STRINGS];
  size_t len[EMBER_WIRE_LOC_STRINGS];
  ember_wire_location_strings(w, 2, str, len);
  assert_int_equal(len[EMBER_WIRE_LOC_GENERATED], strlen("a /srv/app/dist/app.js:1:4711"));
  assert_memory_equal(str[EMBER_WIRE_LOC_GENERATED], "a /srv/app/dist/app.js:1:4711",
                      len[EMBER_WIRE_LOC_GENERATED]);
  ember_wire_location_strings(w, 1, str, len);
  assert_memory_equal(str[EMBER_WIRE_LOC_FUNCTION], "hotLoop", len[EMBER_WIRE_LOC_FUNCTION]);
  assert_null(str[EMBER_WIRE_LOC_GENERATED]);
  assert_true(w->loc_key[1] != w->loc_key[2]);
  for (size_t i = 0; i < w->nlocations; i++)
    assert_int_equal(ember_wire_check_location(w, i, err, sizeof err), 0);
  ember_profile_t *q = NULL;
  assert_int_equal(ember_wire_to_profile(w, &q, err, sizeof err), 0);
  tu_assert_profiles_equal(p, q);
  ember_profile_free(q);
  q = NULL;

  /* Version 1: the same profile back, and the same keys as v2's. */
  ember_buf_t b1;
  ember_buf_init(&b1, 1u << 24);
  assert_int_equal(ember_codec_encode(p, &b1), 0);
  assert_int_equal(ember_codec_decode(b1.data, b1.len, NULL, &q, err, sizeof err), 0);
  tu_assert_profiles_equal(p, q);
  ember_profile_free(q);
  assert_int_equal(ember_wire_decode(b1.data, b1.len, NULL, &v1w, err, sizeof err), 0);
  assert_non_null(v1w->fn_generated);
  for (size_t i = 0; i < w->nlocations; i++) {
    bool found = false;
    for (size_t k = 0; k < v1w->nlocations; k++) found |= v1w->loc_key[k] == w->loc_key[i];
    if (!found) fail_msg("v2 location %zu's key is not among v1's", i);
  }
  ember_wire_free(v1w);

  /* Every cut is refused, also inside and after the generated column. */
  for (size_t n = 0; n < b.len; n++) {
    ember_wire_t *cut = NULL;
    int rc = ember_wire_decode(b.data, n, NULL, &cut, err, sizeof err);
    if (rc != EMBER_ECORRUPT && rc != EMBER_EVERSION) fail_msg("cut at %zu: rc %d", n, rc);
  }
  ember_wire_free(w);
  ember_buf_free(&b1);
  ember_buf_free(&b);
  ember_profile_free(p);

  /* A window without generated names has no column (older readers see
   * nothing new) and hashes as before. */
  p = sample_profile();
  encode_v2(p, &b);
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &w, err, sizeof err), 0);
  assert_null(w->fn_generated);
  ember_wire_free(w);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void generated_uneven(Ember__Wire__V2__Profile *m) { m->n_function_generated--; }
static void generated_index(Ember__Wire__V2__Profile *m) { m->function_generated[0] = 4000; }
static void generated_renamed(Ember__Wire__V2__Profile *m) {
  /* The generated name of function 0 becomes another string after the
   * writer hashed the stacks: its locations' no longer hash as it said. */
  tu_v2_add_hashes(m, TU_STACK_HASHES, mutating);
  m->function_generated[0] = m->function_file[0];
}
static void generated_renamed_hashed(Ember__Wire__V2__Profile *m) {
  /* The same, from a writer that sent location hashes too: they disagree
   * first. */
  tu_v2_add_hashes(m, TU_HASHES, mutating);
  m->function_generated[0] = m->function_file[0];
}

static void test_wire_rejects_bad_generated_names(void **state) {
  (void)state;
  expect_error_of(generated_profile, generated_uneven, false, EMBER_ECORRUPT,
                  "4 function names for 3 generated names");
  expect_error_of(generated_profile, generated_index, false, EMBER_ECORRUPT,
                  "function 0: string index 4000");
  expect_error_of(generated_profile, generated_renamed, true, EMBER_ECORRUPT, "stack hash");
  expect_error_of(generated_profile, generated_renamed_hashed, true, EMBER_ECORRUPT,
                  "does not match its content");
}

/* Two samples with the same stack are one stack in the profile. */
static void test_wire_same_stack_twice_adds(void **state) {
  (void)state;
  static const ember_value_type_t one_type[] = {EMBER_VT_CPU_SAMPLES};
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(one_type, 1, &p), 0);
  assert_int_equal(ember_profile_set_window(p, 1700000000000000000, 1700000010000000000), 0);
  ember_frame_t stack[] = {{.function = "hot", .line = 20}, {.function = "main", .line = 10}};
  assert_int_equal(ember_profile_add(p, stack, 2, (int64_t[]){30}), 0);
  ember_buf_t b;
  encode_v2(p, &b);
  tu_blocks_t blocks;
  ProtobufCAllocator alloc = tu_blocks_allocator(&blocks);
  Ember__Wire__V2__Profile *u = unpack_msg(&b, &alloc);
  /* Its one sample twice, [s0, s0] with values [30, 30]: the second
   * stack's first entry is a delta from the first stack's last. */
  assert_int_equal(u->n_sample_depth, 1);
  assert_int_equal(u->sample_depth[0], 2);
  int32_t l0 = u->sample_locations[0], l1 = l0 + u->sample_locations[1];
  uint32_t depth[2] = {2, 2};
  int32_t locs[4] = {l0, l1 - l0, l0 - l1, l1 - l0};
  int64_t vals[2] = {30, 30};
  u->n_sample_depth = 2;
  u->sample_depth = depth;
  u->n_sample_locations = 4;
  u->sample_locations = locs;
  u->n_sample_values = 2;
  u->sample_values = vals;
  size_t n;
  uint8_t *out = repack(u, &n);
  ember_profile_t *q = NULL;
  char err[256] = "";
  assert_int_equal(ember_codec_decode(out, n, NULL, &q, err, sizeof err), 0);
  assert_int_equal(ember_profile_nstacks(q), 1);
  assert_int_equal(ember_profile_total(q, 0), 60);
  free(out);
  tu_blocks_free(&blocks);
  ember_profile_free(q);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* What writers before 2026-12-03 sent: every string whole (no field 32)
 * and every location's and stack's hash (fields 25, 29). Still read, to
 * the same profile and hashes, verified once; a wrong hash among them is
 * still refused (above). */
static void test_wire_reads_older_writers(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode_v2(p, &b);
  ember_wire_t *w = NULL, *old = NULL;
  char err[256] = "";
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &w, err, sizeof err), 0);
  Ember__Wire__V2__Profile *m = unpack_msg(&b, NULL);
  tu_v2_add_hashes(m, TU_HASHES, NULL);
  /* The strings whole, from the view. */
  uint8_t *saved_blob = m->strings.data;
  uint32_t *saved_lengths = m->string_lengths;
  size_t saved_n = m->n_string_prefix;
  m->strings.data = (uint8_t *)(uintptr_t)w->blob;
  m->strings.len = w->str_off[w->nstrings - 1] + w->str_len[w->nstrings - 1];
  m->string_lengths = (uint32_t *)(uintptr_t)w->str_len;
  m->n_string_prefix = 0;
  size_t n;
  uint8_t *out = repack(m, &n);
  m->strings.data = saved_blob;
  m->string_lengths = saved_lengths;
  m->n_string_prefix = saved_n;
  ember__wire__v2__profile__free_unpacked(m, NULL);
  assert_true(n > b.len); /* what front coding and no hashes save */

  assert_int_equal(ember_wire_decode(out, n, NULL, &old, err, sizeof err), 0);
  assert_non_null(old->loc_hash);
  assert_non_null(old->stack_hash);
  assert_int_equal(old->nlocations, w->nlocations);
  /* The same content: the same keys, whatever was sent. */
  for (size_t i = 0; i < w->nlocations; i++) assert_true(old->loc_key[i] == w->loc_key[i]);
  for (size_t i = 0; i < w->nsamples; i++) assert_true(old->stack_key[i] == w->stack_key[i]);
  assert_false(old->hashes_checked);
  assert_int_equal(ember_wire_verify_hashes(old, err, sizeof err), 0);
  assert_true(old->hashes_checked);
  ember_profile_t *q = NULL;
  assert_int_equal(ember_codec_decode(out, n, NULL, &q, err, sizeof err), 0);
  tu_assert_profiles_equal(p, q);
  ember_profile_free(q);
  ember_wire_free(old);
  ember_wire_free(w);
  free(out);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* Every string empty, so no blob at all (protobuf-c then leaves its
 * pointer NULL), whole or front-coded: "none" everywhere, read without
 * arithmetic on a null pointer (UBSan in the sanitizer build; found by
 * fuzz_codec). */
static void test_wire_empty_blob(void **state) {
  (void)state;
  for (int coded = 0; coded < 2; coded++) {
    ember_profile_t *p = sample_profile();
    ember_buf_t b;
    encode_v2(p, &b);
    Ember__Wire__V2__Profile *m = unpack_msg(&b, NULL);
    for (size_t i = 0; i < m->n_string_lengths; i++) m->string_lengths[i] = 0;
    for (size_t i = 0; i < m->n_string_prefix; i++) m->string_prefix[i] = 0;
    if (!coded) m->n_string_prefix = 0;
    uint8_t *saved = m->strings.data;
    m->strings.data = NULL;
    m->strings.len = 0;
    size_t n;
    uint8_t *out = repack(m, &n);
    m->strings.data = saved;
    ember__wire__v2__profile__free_unpacked(m, NULL);
    ember_wire_t *w = NULL;
    char err[256] = "";
    int rc = ember_wire_decode(out, n, NULL, &w, err, sizeof err);
    if (rc != 0) fail_msg("rc %d '%s'", rc, err);
    assert_non_null(w->blob);
    for (size_t i = 0; i < w->nlocations; i++) {
      const char *str[EMBER_WIRE_LOC_STRINGS];
      size_t len[EMBER_WIRE_LOC_STRINGS];
      ember_wire_location_strings(w, i, str, len);
      for (int k = 0; k < EMBER_WIRE_LOC_STRINGS; k++) assert_null(str[k]);
      assert_int_equal(ember_wire_check_location(w, i, err, sizeof err), 0);
    }
    ember_wire_free(w);
    ember_profile_t *q = NULL;
    assert_int_equal(ember_codec_decode(out, n, NULL, &q, err, sizeof err), 0);
    ember_profile_free(q);
    free(out);
    ember_buf_free(&b);
    ember_profile_free(p);
  }
}

/* Prefixes can make strings far longer than the message that carries
 * them: they may take no more than a message may. */
static void test_wire_prefixes_are_bounded(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode_v2(p, &b);
  Ember__Wire__V2__Profile *m = unpack_msg(&b, NULL);
  /* Each string takes all of the one before as its prefix. */
  uint64_t full = 0, prev = 0;
  for (size_t i = 1; i < m->n_string_prefix; i++) {
    m->string_prefix[i] = (uint32_t)prev;
    prev += m->string_lengths[i];
    full += prev;
  }
  size_t n;
  uint8_t *out = repack(m, &n);
  ember__wire__v2__profile__free_unpacked(m, NULL);
  assert_true(full > n);
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  lim.max_message = n;
  ember_wire_t *w = NULL;
  char err[256] = "";
  assert_int_equal(ember_wire_decode(out, n, &lim, &w, err, sizeof err), EMBER_ETOOBIG);
  if (strstr(err, "once their prefixes are restored") == NULL) fail_msg("'%s'", err);
  assert_null(w);
  /* Within the default limit it decodes, to other strings than sent. */
  assert_int_equal(ember_wire_decode(out, n, NULL, &w, err, sizeof err), 0);
  ember_wire_t *sent = NULL;
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &sent, err, sizeof err), 0);
  size_t last = w->nstrings - 1;
  assert_true(w->str_len[last] > sent->str_len[last]);
  ember_wire_free(sent);
  ember_wire_free(w);
  free(out);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* Front-coded strings are rebuilt in blocks that may run past each piece
 * (wire_decode.c): strings of every length from 0 to past two blocks,
 * sharing prefixes of every length, the longest last (its piece ends the
 * message's blob), must come back byte for byte. */
static void test_wire_strings_rebuilt_exactly(void **state) {
  (void)state;
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(types, 2, &p), 0);
  assert_int_equal(ember_profile_set_window(p, 1700000000000000000, 1700000010000000000), 0);
  char name[128], file[128];
  for (int k = 0; k < 300; k++) {
    int shared = (k * 7) % 53, own = (k * 13) % 47;
    memset(name, 'n', (size_t)shared);
    int len = shared + snprintf(name + shared, 16, "%03d", k);
    for (int j = 0; j < own; j++) name[len++] = (char)('a' + (k + j) % 26);
    name[len] = '\0';
    snprintf(file, sizeof file, "src/%.*s.c", k % 40, "deep/deeper/deepest/and/deeper/still/xyz");
    ember_frame_t f[] = {{.function = name, .file = file, .module = "/usr/bin/prog"}};
    int64_t v[] = {k + 1, 1000};
    assert_int_equal(ember_profile_add(p, f, 1, v), 0);
  }
  memset(name, 'z', 100);
  name[100] = '\0';
  ember_frame_t last[] = {{.function = name}};
  int64_t v[] = {1, 1};
  assert_int_equal(ember_profile_add(p, last, 1, v), 0);
  ember_buf_t b;
  encode_v2(p, &b);
  Ember__Wire__V2__Profile *m = unpack_msg(&b, NULL);
  assert_int_equal(m->n_string_prefix, m->n_string_lengths);
  assert_int_equal(m->string_lengths[m->n_string_lengths - 1], 100); /* zzz..., no prefix */
  ember__wire__v2__profile__free_unpacked(m, NULL);
  ember_wire_t *w = NULL;
  ember_profile_t *back = NULL;
  char err[256] = "";
  assert_int_equal(ember_wire_decode(b.data, b.len, NULL, &w, err, sizeof err), 0);
  assert_int_equal(ember_wire_to_profile(w, &back, err, sizeof err), 0);
  tu_assert_profiles_equal(p, back);
  ember_profile_free(back);
  ember_wire_free(w);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_wire_survives_allocation_failures(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  for (long n = 0;; n++) {
    ember_buf_t b;
    ember_buf_init(&b, 1u << 20);
    ember_profile_t *q = NULL;
    char err[256];
    ember_alloc_fail_after(n);
    int rc = ember_codec_encode_v2(p, &b);
    if (rc == 0) rc = ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err);
    ember_alloc_fail_reset();
    ember_buf_free(&b);
    if (rc == 0) {
      tu_assert_profiles_equal(p, q);
      ember_profile_free(q);
      assert_true(n > 10);
      break;
    }
    /* protobuf-c reports a failed allocation as a failed unpack. */
    assert_true(rc == -ENOMEM || rc == EMBER_ECORRUPT);
    assert_null(q);
  }
  ember_profile_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wire_hashes_are_xxh64),
      cmocka_unit_test(test_wire_keys_tell_contents_apart),
      cmocka_unit_test(test_wire_round_trip),
      cmocka_unit_test(test_wire_six_value_types),
      cmocka_unit_test(test_wire_empty_window),
      cmocka_unit_test(test_wire_every_truncation_is_an_error),
      cmocka_unit_test(test_wire_limits),
      cmocka_unit_test(test_wire_rejects_bad_input),
      cmocka_unit_test(test_wire_same_stack_twice_adds),
      cmocka_unit_test(test_wire_generated_names),
      cmocka_unit_test(test_wire_rejects_bad_generated_names),
      cmocka_unit_test(test_wire_reads_older_writers),
      cmocka_unit_test(test_wire_prefixes_are_bounded),
      cmocka_unit_test(test_wire_empty_blob),
      cmocka_unit_test(test_wire_strings_rebuilt_exactly),
      cmocka_unit_test(test_wire_survives_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
