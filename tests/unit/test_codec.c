/* The wire codec: round trips, and bad input of every kind gets a clear
 * error (truncated, oversized, out-of-range, wrong version, bad text). */
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

#include "ember.pb-c.h"
#include "ember/codec.h"
#include "ember/wire.h"

static ember_profile_t *sample_profile(void) { return tu_sample_profile(false); }

static void encode(const ember_profile_t *p, ember_buf_t *b) {
  ember_buf_init(b, 1u << 24);
  assert_int_equal(ember_codec_encode(p, b), 0);
  assert_true(b->len > 0);
}

static void test_codec_round_trip(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode(p, &b);
  ember_profile_t *q = NULL;
  char err[256] = "";
  assert_int_equal(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err), 0);
  tu_assert_profiles_equal(p, q);
  const ember_labels_t *l = ember_profile_labels(q);
  assert_string_equal(l->worker, "api");
  assert_string_equal(l->version, "1.4.2");
  assert_string_equal(l->host, "host-a");
  assert_string_equal(l->actor, "room-7");
  assert_int_equal(l->pid, 4242);
  int64_t s, e;
  ember_profile_window(q, &s, &e);
  assert_int_equal(s, 1700000000000000000);
  assert_int_equal(e, 1700000010000000000);
  assert_int_equal(ember_profile_period(q), 52631578);
  assert_string_equal(ember_profile_agent_id(q), "agent-7");
  assert_int_equal(ember_profile_seq(q), 99);
  assert_null(ember_profile_session_id(q));
  assert_int_equal(ember_profile_total(q, 0), 43);

  /* Re-encoding the decoded profile gives the same bytes. */
  ember_buf_t b2;
  encode(q, &b2);
  assert_int_equal(b.len, b2.len);
  assert_memory_equal(b.data, b2.data, b.len);
  ember_buf_free(&b2);
  ember_buf_free(&b);
  ember_profile_free(q);
  ember_profile_free(p);
}

static void test_codec_round_trip_empty_and_session(void **state) {
  (void)state;
  ember_value_type_t mem[] = {EMBER_VT_ALLOC_OBJECTS, EMBER_VT_ALLOC_BYTES};
  ember_profile_t *p = NULL, *q = NULL;
  assert_int_equal(ember_profile_new(mem, 2, &p), 0);
  assert_int_equal(ember_profile_set_origin(p, "a", 1, "sess-123"), 0);
  ember_buf_t b;
  encode(p, &b);
  char err[256];
  assert_int_equal(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err), 0);
  assert_int_equal(ember_profile_nstacks(q), 0);
  assert_int_equal(ember_profile_type(q, 1), EMBER_VT_ALLOC_BYTES);
  assert_string_equal(ember_profile_session_id(q), "sess-123");
  assert_null(ember_profile_labels(q)->worker);
  ember_buf_free(&b);
  ember_profile_free(p);
  ember_profile_free(q);
}

/* A frame with a file and no function name (a wire function entry whose
 * name is "") is a frame of its own: re-encoding must keep the file, or two
 * stacks of a decoded profile would merge into one (found by fuzz_codec). */
static void test_codec_file_without_function_round_trips(void **state) {
  (void)state;
  ember_value_type_t vt[] = {EMBER_VT_CPU_SAMPLES};
  ember_profile_t *p = NULL, *q = NULL;
  assert_int_equal(ember_profile_new(vt, 1, &p), 0);
  ember_frame_t with_file = {.file = "gen.c", .module = "/bin/x", .address = 0x10};
  ember_frame_t without = {.module = "/bin/x", .address = 0x10};
  int64_t v[] = {1};
  assert_int_equal(ember_profile_add(p, &with_file, 1, v), 0);
  assert_int_equal(ember_profile_add(p, &without, 1, v), 0);
  assert_int_equal(ember_profile_nstacks(p), 2);
  ember_buf_t b;
  encode(p, &b);
  char err[256] = "";
  assert_int_equal(ember_codec_decode(b.data, b.len, NULL, &q, err, sizeof err), 0);
  tu_assert_profiles_equal(p, q);
  ember_buf_free(&b);
  ember_profile_free(p);
  ember_profile_free(q);
}

static void test_codec_encode_respects_buffer_limit(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  ember_buf_init(&b, 32);
  assert_int_equal(ember_codec_encode(p, &b), EMBER_ETOOBIG);
  assert_int_equal(b.len, 0);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_codec_every_truncation_is_an_error(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode(p, &b);
  for (size_t n = 0; n < b.len; n++) {
    ember_profile_t *q = NULL;
    char err[256] = "";
    int rc = ember_codec_decode(b.data, n, NULL, &q, err, sizeof err);
    if (rc != EMBER_ECORRUPT) fail_msg("cut at %zu of %zu: rc %d (%s)", n, b.len, rc, err);
    assert_null(q);
    assert_true(strlen(err) > 10);
  }
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void test_codec_oversized_input(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode(p, &b);
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  ember_profile_t *q = NULL;
  char err[256];

  lim.max_message = b.len - 1;
  assert_int_equal(ember_codec_decode(b.data, b.len, &lim, &q, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "at most"));
  ember_codec_limits_default(&lim);
  lim.max_samples = 3;
  assert_int_equal(ember_codec_decode(b.data, b.len, &lim, &q, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "4 samples (at most 3)"));
  ember_codec_limits_default(&lim);
  lim.max_strings = 2;
  assert_int_equal(ember_codec_decode(b.data, b.len, &lim, &q, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "strings"));
  ember_codec_limits_default(&lim);
  lim.max_locations = 2;
  assert_int_equal(ember_codec_decode(b.data, b.len, &lim, &q, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "locations"));
  ember_codec_limits_default(&lim);
  lim.max_depth = 2;
  assert_int_equal(ember_codec_decode(b.data, b.len, &lim, &q, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "stack of 3 frames"));
  assert_null(q);

  /* Garbage and empty input. */
  assert_int_equal(ember_codec_decode("", 0, NULL, &q, err, sizeof err), EMBER_ECORRUPT);
  unsigned char junk[64];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 37 + 11);
  assert_int_equal(ember_codec_decode(junk, sizeof junk, NULL, &q, err, sizeof err),
                   EMBER_ECORRUPT);
  assert_null(q);
  ember_buf_free(&b);
  ember_profile_free(p);
}

/* Decode a valid message, let `mutate` break it, re-encode it with
 * protobuf-c, and check the decoder's error. */
typedef void (*mutate_fn)(Ember__Wire__V1__Profile *m);

/* Mutations swap pointers inside the message, so it is unpacked into an
 * arena that is dropped whole instead of through free_unpacked. */
static void expect_error(mutate_fn mutate, int want_rc, const char *want_msg) {
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode(p, &b);
  tu_blocks_t arena;
  ProtobufCAllocator alloc = tu_blocks_allocator(&arena);
  Ember__Wire__V1__Profile *m =
      ember__wire__v1__profile__unpack(&alloc, b.len, (const uint8_t *)b.data);
  assert_non_null(m);
  mutate(m);
  size_t n = ember__wire__v1__profile__get_packed_size(m);
  uint8_t *out = malloc(n ? n : 1);
  ember__wire__v1__profile__pack(m, out);
  ember_profile_t *q = NULL;
  char err[256] = "";
  int rc = ember_codec_decode(out, n, NULL, &q, err, sizeof err);
  if (rc != want_rc || strstr(err, want_msg) == NULL)
    fail_msg("want rc %d and '%s', got rc %d and '%s'", want_rc, want_msg, rc, err);
  assert_null(q);
  free(out);
  tu_blocks_free(&arena);
  ember_buf_free(&b);
  ember_profile_free(p);
}

static void bad_version(Ember__Wire__V1__Profile *m) { m->version = EMBER_WIRE_V2 + 1; }
static void zero_version(Ember__Wire__V1__Profile *m) { m->version = 0; }
static void bad_location_index(Ember__Wire__V1__Profile *m) { m->samples[1]->locations[0] = 1000; }
static void bad_function_index(Ember__Wire__V1__Profile *m) {
  m->locations[0]->function = (uint32_t)m->n_functions + 1;
}
static void bad_module_index(Ember__Wire__V1__Profile *m) { m->locations[0]->module = 77; }
static void bad_string_index(Ember__Wire__V1__Profile *m) { m->functions[0]->name = 5000; }
static void bad_module_string(Ember__Wire__V1__Profile *m) { m->modules[0]->build_id = 5000; }
static void bad_kind(Ember__Wire__V1__Profile *m) {
  m->locations[0]->kind = (Ember__Wire__V1__FrameKind)9;
}
static void bad_value_type(Ember__Wire__V1__Profile *m) {
  m->value_types[1] = (Ember__Wire__V1__ValueType)42;
}
static void dup_value_type(Ember__Wire__V1__Profile *m) { m->value_types[1] = m->value_types[0]; }
static void no_value_types(Ember__Wire__V1__Profile *m) { m->n_value_types = 0; }
static void negative_value(Ember__Wire__V1__Profile *m) { m->samples[2]->values[1] = -5; }
static void missing_value(Ember__Wire__V1__Profile *m) { m->samples[0]->n_values = 1; }
static void empty_stack(Ember__Wire__V1__Profile *m) { m->samples[3]->n_locations = 0; }
static void reversed_window(Ember__Wire__V1__Profile *m) {
  m->window_end_ns = m->window_start_ns - 1;
}
static void negative_period(Ember__Wire__V1__Profile *m) { m->period_ns = -1; }
/* Writable copies: the message's strings are char *. */
static char text_x[] = "x", text_bad_utf8[] = "ok\xc3\x28", text_surrogate[] = "\xed\xa0\x80";
static void nonempty_string0(Ember__Wire__V1__Profile *m) { m->strings[0] = text_x; }
static void bad_utf8(Ember__Wire__V1__Profile *m) { m->strings[1] = text_bad_utf8; }
static void bad_utf8_label(Ember__Wire__V1__Profile *m) { m->labels->worker = text_surrogate; }
static void no_end_mark(Ember__Wire__V1__Profile *m) { m->end_mark = 0; }
static void overflow(Ember__Wire__V1__Profile *m) {
  /* Two samples with the same stack whose values sum past INT64_MAX. */
  m->samples[1]->n_locations = m->samples[0]->n_locations;
  m->samples[1]->locations = m->samples[0]->locations;
  m->samples[0]->values[0] = INT64_MAX;
}

static void test_codec_rejects_out_of_range(void **state) {
  (void)state;
  expect_error(bad_version, EMBER_EVERSION, "schema version 3 is not supported");
  expect_error(zero_version, EMBER_EVERSION, "schema version 0");
  expect_error(bad_location_index, EMBER_ECORRUPT, "sample 1: location index 1000 out of range");
  expect_error(bad_function_index, EMBER_ECORRUPT, "location 0: function");
  expect_error(bad_module_index, EMBER_ECORRUPT, "location 0: module 77 out of range");
  expect_error(bad_string_index, EMBER_ECORRUPT, "function 0: string index 5000 out of range");
  expect_error(bad_module_string, EMBER_ECORRUPT, "module 0: string index 5000");
  expect_error(bad_kind, EMBER_ECORRUPT, "unknown frame kind 9");
  expect_error(bad_value_type, EMBER_ECORRUPT, "value type 1: unknown type 42");
  expect_error(dup_value_type, EMBER_ECORRUPT, "value type 1 repeats");
  expect_error(no_value_types, EMBER_ECORRUPT, "0 value types");
  expect_error(negative_value, EMBER_ECORRUPT, "sample 2: negative value -5");
  expect_error(missing_value, EMBER_ECORRUPT, "sample 0: 1 values for 2 value types");
  expect_error(empty_stack, EMBER_ECORRUPT, "sample 3: stack of 0 frames");
  expect_error(reversed_window, EMBER_ECORRUPT, "window ends");
  expect_error(negative_period, EMBER_ECORRUPT, "negative sampling period");
  expect_error(nonempty_string0, EMBER_ECORRUPT, "string 0 must be empty");
  expect_error(bad_utf8, EMBER_ECORRUPT, "string 1: not valid UTF-8");
  expect_error(bad_utf8_label, EMBER_ECORRUPT, "label 0: not valid UTF-8");
  expect_error(no_end_mark, EMBER_ECORRUPT, "truncated");
  expect_error(overflow, EMBER_ECORRUPT, "overflow");
}

/* An empty string at a non-zero index (or one that starts with a NUL) means
 * "none", as index 0 does: otherwise a frame naming it and one naming
 * nothing would be two frames that re-encode as one (found by the fuzzer). */
static char text_empty[] = "";
static void test_codec_empty_string_is_none(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t b;
  encode(p, &b);
  tu_blocks_t arena;
  ProtobufCAllocator alloc = tu_blocks_allocator(&arena);
  Ember__Wire__V1__Profile *m =
      ember__wire__v1__profile__unpack(&alloc, b.len, (const uint8_t *)b.data);
  assert_non_null(m);
  assert_true(m->n_functions > 0);
  m->strings[m->functions[0]->name] = text_empty;
  size_t n = ember__wire__v1__profile__get_packed_size(m);
  uint8_t *out = malloc(n);
  ember__wire__v1__profile__pack(m, out);
  ember_profile_t *q = NULL, *r = NULL;
  char err[256] = "";
  assert_int_equal(ember_codec_decode(out, n, NULL, &q, err, sizeof err), 0);
  for (uint32_t i = 0; i < ember_profile_nframes(q); i++) {
    const char *fn = ember_profile_frame(q, i)->function;
    assert_true(fn == NULL || fn[0] != '\0');
  }
  ember_buf_t c;
  encode(q, &c);
  assert_int_equal(ember_codec_decode(c.data, c.len, NULL, &r, err, sizeof err), 0);
  assert_int_equal(ember_profile_nframes(r), ember_profile_nframes(q));
  assert_int_equal(ember_profile_nstacks(r), ember_profile_nstacks(q));
  free(out);
  tu_blocks_free(&arena);
  ember_buf_free(&b);
  ember_buf_free(&c);
  ember_profile_free(p);
  ember_profile_free(q);
  ember_profile_free(r);
}

static void test_codec_survives_allocation_failures(void **state) {
  (void)state;
  ember_profile_t *p = sample_profile();
  ember_buf_t ok;
  encode(p, &ok);
  for (long n = 0;; n++) {
    ember_buf_t b;
    ember_buf_init(&b, 1u << 20);
    ember_profile_t *q = NULL;
    char err[256];
    ember_alloc_fail_after(n);
    int rc = ember_codec_encode(p, &b);
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
  ember_buf_free(&ok);
  ember_profile_free(p);
}

static void test_codec_target_round_trip(void **state) {
  (void)state;
  char worker[] = "api", host[] = "host-a", comm[] = "api-server", bid[] = "abcdef";
  ember_target_record_t t = {.worker = worker,
                             .host = host,
                             .comm = comm,
                             .build_id = bid,
                             .pid = 42,
                             .start_ticks = 777,
                             .seen_ns = 123456789};
  ember_buf_t b;
  ember_buf_init(&b, 4096);
  assert_int_equal(ember_codec_encode_target(&t, &b), 0);
  ember_target_record_t got;
  char err[256];
  assert_int_equal(ember_codec_decode_target(b.data, b.len, &got, err, sizeof err), 0);
  assert_string_equal(got.worker, "api");
  assert_string_equal(got.host, "host-a");
  assert_string_equal(got.comm, "api-server");
  assert_string_equal(got.build_id, "abcdef");
  assert_null(got.actor);
  assert_null(got.version);
  assert_int_equal(got.pid, 42);
  assert_int_equal(got.start_ticks, 777);
  assert_int_equal(got.seen_ns, 123456789);
  ember_target_record_clear(&got);
  /* Truncated and garbage input. */
  assert_int_equal(ember_codec_decode_target(b.data, b.len - 3, &got, err, sizeof err),
                   EMBER_ECORRUPT);
  assert_int_equal(ember_codec_decode_target("\x08\x09", 2, &got, err, sizeof err), EMBER_EVERSION);
  ember_buf_free(&b);
}

/* Records carry char *; literals are never written through. */
#define SC(lit) ((char *)(uintptr_t)(lit))

static void test_codec_command_round_trip_and_refusals(void **state) {
  (void)state;
  uint32_t pids[] = {10, 20, 30};
  ember_command_t c = {.kind = EMBER_CMD_START,
                       .session_id = SC("s-1"),
                       .host = SC("h1"),
                       .worker = SC("api"),
                       .actor = SC("room-7"),
                       .pids = pids,
                       .npids = 3,
                       .type = EMBER_SESSION_CPU,
                       .duration_ms = 5000,
                       .hz = 1000,
                       .issued_ns = 123456789,
                       .ttl_ms = 30000};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_command(&c, &b), 0);
  ember_command_t d;
  char err[256] = "";
  assert_int_equal(ember_codec_decode_command(b.data, b.len, &d, err, sizeof err), 0);
  assert_string_equal(d.session_id, "s-1");
  assert_string_equal(d.host, "h1");
  assert_string_equal(d.worker, "api");
  assert_null(d.version);
  assert_string_equal(d.actor, "room-7");
  assert_int_equal(d.npids, 3);
  assert_int_equal(d.pids[2], 30);
  assert_int_equal(d.kind, EMBER_CMD_START);
  assert_int_equal(d.type, EMBER_SESSION_CPU);
  assert_int_equal(d.duration_ms, 5000);
  assert_int_equal(d.hz, 1000);
  assert_true(d.issued_ns == 123456789);
  assert_int_equal(d.ttl_ms, 30000);
  ember_command_clear(&d);
  /* Every cut of the message is refused or decodes to something valid;
   * none crashes (the fuzz target covers more). */
  for (size_t cut = 0; cut < b.len; cut++) {
    ember_command_t x;
    if (ember_codec_decode_command(b.data, cut, &x, err, sizeof err) == 0) ember_command_clear(&x);
  }
  ember_buf_free(&b);
  /* No host, unknown type, garbage. */
  ember_command_t bad = c;
  bad.host = NULL;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_command(&bad, &b), 0);
  assert_int_equal(ember_codec_decode_command(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "host"));
  ember_buf_free(&b);
  bad = c;
  bad.type = (ember_session_type_t)9;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_command(&bad, &b), 0);
  assert_int_equal(ember_codec_decode_command(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "type"));
  ember_buf_free(&b);
  assert_int_not_equal(ember_codec_decode_command("\xff\xff", 2, &d, err, sizeof err), 0);
}

/* A collector's CREATED event carries what the session is; STORED a
 * result's count; CANCEL_REQUESTED needs no host. Malformed definitions
 * are refused. */
static void test_codec_event_collector_states(void **state) {
  (void)state;
  char *hosts[] = {SC("h1"), SC("h2")};
  ember_event_t e = {.state = EMBER_EV_CREATED,
                     .session_id = SC("0123456789abcdef0123456789abcdef"),
                     .worker = SC("w"),
                     .version = SC("1.2"),
                     .actor = SC("A"),
                     .select_host = SC("h2"),
                     .type = EMBER_SESSION_MEMORY,
                     .duration_ms = 3000,
                     .hz = 99,
                     .instances = 2,
                     .hosts = hosts,
                     .nhosts = 2,
                     .created_ns = 1234567,
                     .at_ns = 1234567};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&e, &b), 0);
  ember_event_t d;
  char err[256] = "";
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), 0);
  assert_int_equal(d.state, EMBER_EV_CREATED);
  assert_null(d.host);
  assert_string_equal(d.worker, "w");
  assert_string_equal(d.version, "1.2");
  assert_string_equal(d.actor, "A");
  assert_string_equal(d.select_host, "h2");
  assert_int_equal(d.type, EMBER_SESSION_MEMORY);
  assert_int_equal(d.duration_ms, 3000);
  assert_int_equal(d.hz, 99);
  assert_int_equal(d.instances, 2);
  assert_int_equal(d.nhosts, 2);
  assert_string_equal(d.hosts[0], "h1");
  assert_string_equal(d.hosts[1], "h2");
  assert_int_equal(d.created_ns, 1234567);
  assert_string_equal(ember_event_state_name(d.state), "created");
  ember_event_clear(&d);
  /* Allocation failures leave nothing behind. */
  for (long n = 0; n < 30; n++) {
    ember_alloc_fail_after(n);
    int rc = ember_codec_decode_event(b.data, b.len, &d, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) ember_event_clear(&d);
  }
  ember_buf_free(&b);

  /* Refused: no hosts, an empty host, an unknown type. */
  ember_event_t bad = e;
  bad.nhosts = 0;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&bad, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "hosts"));
  ember_buf_free(&b);
  char *empty[] = {SC("h1"), SC("")};
  bad = e;
  bad.hosts = empty;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&bad, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  ember_buf_free(&b);
  bad = e;
  bad.type = (ember_session_type_t)7;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&bad, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  ember_buf_free(&b);
  /* A NULL host in the list is the caller's mistake. */
  char *nul[] = {SC("h1"), NULL};
  bad = e;
  bad.hosts = nul;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&bad, &b), -EINVAL);
  ember_buf_free(&b);

  /* CANCEL_REQUESTED: a session id is enough. */
  ember_event_t c = {.state = EMBER_EV_CANCEL_REQUESTED, .session_id = SC("s-1"), .at_ns = 5};
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&c, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), 0);
  assert_int_equal(d.state, EMBER_EV_CANCEL_REQUESTED);
  assert_null(d.host);
  assert_int_equal(d.nhosts, 0);
  ember_event_clear(&d);
  ember_buf_free(&b);

  /* STORED: host, agent, samples and the result's seq; a host is needed. */
  ember_event_t st = {.state = EMBER_EV_STORED,
                      .session_id = SC("s-1"),
                      .host = SC("h1"),
                      .agent_id = SC("h1:1"),
                      .samples = 77,
                      .result_seq = 9,
                      .at_ns = 6};
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&st, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), 0);
  assert_int_equal(d.state, EMBER_EV_STORED);
  assert_string_equal(d.host, "h1");
  assert_string_equal(d.agent_id, "h1:1");
  assert_int_equal(d.samples, 77);
  assert_int_equal(d.result_seq, 9);
  assert_string_equal(ember_event_state_name(d.state), "stored");
  ember_event_clear(&d);
  ember_buf_free(&b);
  st.host = NULL;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&st, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  ember_buf_free(&b);
  /* A state past the last known one is refused. */
  st.host = SC("h1");
  st.state = (ember_event_state_t)9;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&st, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  ember_buf_free(&b);
}

static void test_codec_event_round_trip_and_refusals(void **state) {
  (void)state;
  ember_event_t e = {.state = EMBER_EV_RUNNING,
                     .session_id = SC("s-1"),
                     .host = SC("h1"),
                     .agent_id = SC("h1:1"),
                     .message = SC("sampling 2 processes"),
                     .targets = 2,
                     .samples = 1500,
                     .hz = 997,
                     .at_ns = 42};
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&e, &b), 0);
  ember_event_t d;
  char err[256] = "";
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), 0);
  assert_int_equal(d.state, EMBER_EV_RUNNING);
  assert_string_equal(d.message, "sampling 2 processes");
  assert_int_equal(d.samples, 1500);
  assert_int_equal(d.hz, 997);
  assert_string_equal(ember_event_state_name(d.state), "running");
  ember_event_clear(&d);
  ember_buf_free(&b);
  ember_event_t bad = e;
  bad.state = (ember_event_state_t)0;
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&bad, &b), 0);
  assert_int_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), EMBER_ECORRUPT);
  ember_buf_free(&b);
  bad = e;
  bad.session_id = SC("bad\xff");
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&bad, &b), 0);
  assert_int_not_equal(ember_codec_decode_event(b.data, b.len, &d, err, sizeof err), 0);
  ember_buf_free(&b);
  /* Allocation failures leave nothing behind. */
  ember_buf_init(&b, 1 << 16);
  assert_int_equal(ember_codec_encode_event(&e, &b), 0);
  for (long n = 0; n < 20; n++) {
    ember_alloc_fail_after(n);
    int rc = ember_codec_decode_event(b.data, b.len, &d, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) ember_event_clear(&d);
  }
  ember_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codec_round_trip),
      cmocka_unit_test(test_codec_round_trip_empty_and_session),
      cmocka_unit_test(test_codec_file_without_function_round_trips),
      cmocka_unit_test(test_codec_encode_respects_buffer_limit),
      cmocka_unit_test(test_codec_every_truncation_is_an_error),
      cmocka_unit_test(test_codec_oversized_input),
      cmocka_unit_test(test_codec_rejects_out_of_range),
      cmocka_unit_test(test_codec_empty_string_is_none),
      cmocka_unit_test(test_codec_survives_allocation_failures),
      cmocka_unit_test(test_codec_target_round_trip),
      cmocka_unit_test(test_codec_command_round_trip_and_refusals),
      cmocka_unit_test(test_codec_event_round_trip_and_refusals),
      cmocka_unit_test(test_codec_event_collector_states),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
