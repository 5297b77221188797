/* Collector announcements on the wire (src/codec_collector.c): a round
 * trip keeps every field; every refusal of the check is made by the
 * encoder (-EINVAL) and by the decoder (with its code and a sentence) for
 * bytes a hostile or buggy peer could send; cuts, oversized input, unknown
 * versions and failing allocations are refused cleanly. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember.pb-c.h"
#include "ember/buf.h"
#include "ember/codec.h"

#define S(lit) ((char *)(uintptr_t)(lit))

static ember_collector_run_t runs[3];
static int32_t assigned[3];

/* A valid record: two runs of partition 0, one of partition 2, assigned 0, 1, 3. */
static ember_collector_info_t sample(void) {
  runs[0] = (ember_collector_run_t){.partition = 0,
                                    .start = 0,
                                    .stored_end = 100,
                                    .committed = 100,
                                    .started_ns = 1000,
                                    .tmin_ns = 5000,
                                    .tmax_ns = 9000,
                                    .windows = 90,
                                    .pending = 0};
  runs[1] = (ember_collector_run_t){.partition = 0,
                                    .start = 100,
                                    .stored_end = 150,
                                    .committed = 120,
                                    .started_ns = 2000,
                                    .tmin_ns = 9000,
                                    .tmax_ns = 9500,
                                    .windows = 50,
                                    .pending = 30};
  runs[2] = (ember_collector_run_t){.partition = 2, .start = 7, .stored_end = 7, .committed = 7};
  assigned[0] = 0;
  assigned[1] = 1;
  assigned[2] = 3;
  return (ember_collector_info_t){.id = S("host-a:7272"),
                                  .group_id = S("ember-collector"),
                                  .api_url = S("http://host-a:7272"),
                                  .started_ns = 1764460800000000000LL,
                                  .announced_ns = 1764460805000000000LL,
                                  .seq = 2,
                                  .interval_ms = 5000,
                                  .stopping = false,
                                  .runs = runs,
                                  .nruns = 3,
                                  .assigned = assigned,
                                  .nassigned = 3};
}

/* Encode without the check, the way a buggy or hostile peer might, with
 * schema `version`. */
static void encode_raw(const ember_collector_info_t *c, uint32_t version, ember_buf_t *out) {
  Ember__Wire__V1__CollectorInfo m;
  ember__wire__v1__collector_info__init(&m);
  m.version = version;
  m.id = c->id ? c->id : S("");
  m.group_id = c->group_id ? c->group_id : S("");
  m.api_url = c->api_url ? c->api_url : S("");
  m.started_ns = c->started_ns;
  m.announced_ns = c->announced_ns;
  m.stopping = c->stopping;
  m.seq = c->seq;
  m.interval_ms = c->interval_ms;
  m.n_assigned = c->nassigned;
  m.assigned = c->assigned;
  Ember__Wire__V1__CollectorInfo__Run *w = calloc(c->nruns + 1, sizeof *w);
  Ember__Wire__V1__CollectorInfo__Run **p = calloc(c->nruns + 1, sizeof *p);
  assert_non_null(w);
  assert_non_null(p);
  for (size_t i = 0; i < c->nruns; i++) {
    ember__wire__v1__collector_info__run__init(&w[i]);
    w[i].partition = c->runs[i].partition;
    w[i].start = c->runs[i].start;
    w[i].stored_end = c->runs[i].stored_end;
    w[i].committed = c->runs[i].committed;
    w[i].started_ns = c->runs[i].started_ns;
    w[i].tmin_ns = c->runs[i].tmin_ns;
    w[i].tmax_ns = c->runs[i].tmax_ns;
    w[i].windows = c->runs[i].windows;
    w[i].pending = c->runs[i].pending;
    p[i] = &w[i];
  }
  m.n_runs = c->nruns;
  m.runs = p;
  char *at;
  assert_int_equal(ember_buf_extend(out, ember__wire__v1__collector_info__get_packed_size(&m), &at),
                   0);
  ember__wire__v1__collector_info__pack(&m, (uint8_t *)at);
  free(p);
  free(w);
}

static void assert_same(const ember_collector_info_t *a, const ember_collector_info_t *b) {
  assert_string_equal(a->id, b->id);
  assert_string_equal(a->group_id, b->group_id);
  assert_string_equal(a->api_url, b->api_url);
  assert_true(a->started_ns == b->started_ns);
  assert_true(a->announced_ns == b->announced_ns);
  assert_true(a->seq == b->seq);
  assert_int_equal(a->interval_ms, b->interval_ms);
  assert_int_equal(a->stopping, b->stopping);
  assert_int_equal(a->nruns, b->nruns);
  for (size_t i = 0; i < a->nruns; i++) {
    const ember_collector_run_t *x = &a->runs[i], *y = &b->runs[i];
    assert_int_equal(x->partition, y->partition);
    assert_true(x->start == y->start && x->stored_end == y->stored_end &&
                x->committed == y->committed && x->started_ns == y->started_ns);
    assert_true(x->tmin_ns == y->tmin_ns && x->tmax_ns == y->tmax_ns);
    assert_true(x->windows == y->windows && x->pending == y->pending);
  }
  assert_int_equal(a->nassigned, b->nassigned);
  if (a->nassigned > 0)
    assert_memory_equal(a->assigned, b->assigned, a->nassigned * sizeof a->assigned[0]);
}

static void test_codec_collector_round_trip(void **state) {
  (void)state;
  ember_collector_info_t c = sample();
  char err[256] = "";
  assert_int_equal(ember_codec_check_collector(&c, err, sizeof err), 0);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  assert_int_equal(ember_codec_encode_collector(&c, &b), 0);
  ember_collector_info_t d;
  assert_int_equal(ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err), 0);
  assert_same(&c, &d);
  ember_collector_info_t e;
  assert_int_equal(ember_collector_info_copy(&d, &e), 0);
  assert_same(&d, &e);
  ember_collector_info_clear(&d);
  ember_collector_info_clear(&e);
  assert_null(e.id);
  ember_collector_info_clear(NULL);

  /* No runs, no partitions, stopping, https. */
  c.nruns = 0;
  c.runs = NULL;
  c.nassigned = 0;
  c.assigned = NULL;
  c.stopping = true;
  c.api_url = S("https://[::1]:7272");
  ember_buf_reset(&b);
  assert_int_equal(ember_codec_encode_collector(&c, &b), 0);
  assert_int_equal(ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err), 0);
  assert_same(&c, &d);
  assert_null(d.runs);
  assert_null(d.assigned);
  ember_collector_info_clear(&d);

  /* The encoder's buffer limit is kept. */
  ember_buf_t small;
  ember_buf_init(&small, 16);
  assert_int_equal(ember_codec_encode_collector(&c, &small), EMBER_ETOOBIG);
  ember_buf_free(&small);
  ember_buf_free(&b);
}

/* Mutation i of a valid record, with the code the decoder must answer and
 * a word its sentence must contain; false past the last one. */
typedef struct refusal {
  int rc;
  const char *word;
} refusal_t;

static char long_id[EMBER_COLLECTOR_MAX_ID + 2];
static char long_url[EMBER_COLLECTOR_MAX_URL + 2];

static bool mutate(int i, ember_collector_info_t *c, refusal_t *want) {
  *c = sample();
  *want = (refusal_t){EMBER_ECORRUPT, NULL};
  switch (i) {
  case 0: c->id = NULL, want->word = "id"; break;
  case 1: c->id = long_id, *want = (refusal_t){EMBER_ETOOBIG, "id of 256 bytes"}; break;
  case 2: c->id = S("host\x01"), want->word = "control"; break;
  case 3: c->id = S("host\xff"), want->word = "UTF-8"; break;
  case 4: c->group_id = S(""), want->word = "group_id"; break;
  case 5: c->api_url = S("ftp://host"), want->word = "http"; break;
  case 6: c->api_url = S("http://"), want->word = "http"; break;
  case 7: c->api_url = S("http://a b"), want->word = "space"; break;
  case 8: c->api_url = long_url, *want = (refusal_t){EMBER_ETOOBIG, "api_url"}; break;
  case 9: c->started_ns = 0, want->word = "started_ns"; break;
  case 10: c->announced_ns = -1, want->word = "announced_ns"; break;
  case 11: c->seq = 0, want->word = "seq"; break;
  case 12: c->interval_ms = 99, want->word = "interval"; break;
  case 13: c->interval_ms = EMBER_COLLECTOR_MAX_INTERVAL_MS + 1, want->word = "interval"; break;
  case 14: runs[1].partition = -1, want->word = "negative"; break;
  case 15: runs[1].start = -1, want->word = "range"; break;
  case 16: runs[1].stored_end = 99, want->word = "range"; break;
  case 17: runs[1].committed = 99, want->word = "committed"; break;
  case 18: runs[1].started_ns = -5, want->word = "started_ns"; break;
  case 19: runs[1].tmin_ns = 9600, want->word = "tmin"; break;
  case 20: runs[1].pending = 51, want->word = "pending"; break;
  case 21: runs[1].windows = 51, runs[1].pending = 0, want->word = "windows in 50 offsets"; break;
  case 22:
    runs[1].start = 0, runs[1].committed = 0, runs[1].windows = 0, runs[1].pending = 0,
    want->word = "ascend";
    break;
  case 23: runs[2].partition = 0, runs[2].start = 0, want->word = "ascend"; break;
  case 24: assigned[0] = -1, want->word = "negative"; break;
  case 25: assigned[1] = 0, want->word = "ascend"; break;
  case 26: assigned[2] = 1, want->word = "ascend"; break;
  default: return false;
  }
  return true;
}

static void test_codec_collector_every_refusal(void **state) {
  (void)state;
  memset(long_id, 'a', sizeof long_id - 1);
  memcpy(long_url, "http://", 7);
  memset(long_url + 7, 'u', sizeof long_url - 8);
  ember_collector_info_t c;
  refusal_t want;
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  int n = 0;
  for (int i = 0; mutate(i, &c, &want); i++, n++) {
    char err[256] = "";
    int rc = ember_codec_check_collector(&c, err, sizeof err);
    if (rc != want.rc || strstr(err, want.word) == NULL)
      fail_msg("mutation %d: check gave %d \"%s\", want %d with \"%s\"", i, rc, err, want.rc,
               want.word);
    ember_buf_reset(&b);
    assert_int_equal(ember_codec_encode_collector(&c, &b), -EINVAL);
    assert_int_equal(b.len, 0);
    /* The same record as a peer would send it. */
    encode_raw(&c, EMBER_WIRE_VERSION, &b);
    ember_collector_info_t d = {0};
    err[0] = '\0';
    rc = ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err);
    if (rc != want.rc || strstr(err, want.word) == NULL)
      fail_msg("mutation %d: decode gave %d \"%s\", want %d with \"%s\"", i, rc, err, want.rc,
               want.word);
    assert_null(d.id); /* untouched */
  }
  assert_int_equal(n, 27);
  ember_buf_free(&b);
}

static void test_codec_collector_bounds_and_versions(void **state) {
  (void)state;
  char err[256] = "";
  ember_collector_info_t d = {0};
  ember_buf_t b;
  ember_buf_init(&b, 8 << 20);
  /* Too many runs or partitions: refused by the check, and by the decoder
   * from their count alone. */
  size_t many = EMBER_COLLECTOR_MAX_RUNS + 1;
  ember_collector_run_t *rs = calloc(many, sizeof *rs);
  int32_t *ps = calloc(many, sizeof *ps);
  assert_non_null(rs);
  assert_non_null(ps);
  for (size_t i = 0; i < many; i++) {
    rs[i].partition = (int32_t)i;
    ps[i] = (int32_t)i;
  }
  ember_collector_info_t c = sample();
  c.runs = rs;
  c.nruns = many;
  assert_int_equal(ember_codec_check_collector(&c, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "runs"));
  encode_raw(&c, EMBER_WIRE_VERSION, &b);
  assert_int_equal(ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err), EMBER_ETOOBIG);
  c = sample();
  c.assigned = ps;
  c.nassigned = many;
  assert_int_equal(ember_codec_check_collector(&c, err, sizeof err), EMBER_ETOOBIG);
  assert_non_null(strstr(err, "assigned"));
  ember_buf_reset(&b);
  encode_raw(&c, EMBER_WIRE_VERSION, &b);
  assert_int_equal(ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err), EMBER_ETOOBIG);
  /* The most that is allowed goes through. */
  c.nassigned = EMBER_COLLECTOR_MAX_ASSIGNED;
  c.runs = rs;
  c.nruns = EMBER_COLLECTOR_MAX_RUNS;
  ember_buf_reset(&b);
  assert_int_equal(ember_codec_encode_collector(&c, &b), 0);
  assert_int_equal(ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err), 0);
  assert_int_equal(d.nruns, EMBER_COLLECTOR_MAX_RUNS);
  ember_collector_info_clear(&d);
  free(rs);
  free(ps);

  /* Larger than a record may be, whatever it holds. */
  assert_int_equal(
      ember_codec_decode_collector(b.data, EMBER_COLLECTOR_MAX_RECORD + 1, &d, err, sizeof err),
      EMBER_ETOOBIG);
  /* Versions 0 and 2. */
  c = sample();
  for (uint32_t v = 0; v <= 2; v += 2) {
    ember_buf_reset(&b);
    encode_raw(&c, v, &b);
    assert_int_equal(ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err),
                     EMBER_EVERSION);
    assert_non_null(strstr(err, "version"));
  }
  /* Garbage, nothing, and every cut of a valid record: refused or valid,
   * never a crash (the fuzz target covers more). */
  assert_int_equal(ember_codec_decode_collector("\xff\xff\xff", 3, &d, err, sizeof err),
                   EMBER_ECORRUPT);
  assert_int_equal(ember_codec_decode_collector(NULL, 0, &d, err, sizeof err), EMBER_EVERSION);
  assert_int_equal(ember_codec_decode_collector(NULL, 1, &d, err, sizeof err), -EINVAL);
  ember_buf_reset(&b);
  assert_int_equal(ember_codec_encode_collector(&c, &b), 0);
  for (size_t cut = 0; cut < b.len; cut++) {
    if (ember_codec_decode_collector(b.data, cut, &d, err, sizeof err) == 0)
      ember_collector_info_clear(&d);
  }
  ember_buf_free(&b);
}

static void test_codec_collector_survives_allocation_failures(void **state) {
  (void)state;
  ember_collector_info_t c = sample();
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  assert_int_equal(ember_codec_encode_collector(&c, &b), 0);
  char err[256];
  /* Fail the Nth allocation of a decode, of a copy and of an encode, for
   * every N until each succeeds: an error, nothing leaked, or the record. */
  bool decoded = false, copied = false, encoded = false;
  for (long n = 0; n < 200 && !(decoded && copied && encoded); n++) {
    ember_collector_info_t d = {0};
    ember_alloc_fail_after(n);
    int rc = ember_codec_decode_collector(b.data, b.len, &d, err, sizeof err);
    ember_alloc_fail_reset();
    if (rc == 0) {
      decoded = true;
      assert_same(&c, &d);
      ember_collector_info_clear(&d);
    } else {
      /* protobuf-c reports a failed allocation as a failed unpack. */
      assert_true(rc == -ENOMEM || rc == EMBER_ECORRUPT);
      assert_null(d.id);
    }
    ember_collector_info_t e = {0};
    ember_alloc_fail_after(n);
    rc = ember_collector_info_copy(&c, &e);
    ember_alloc_fail_reset();
    if (rc == 0) {
      copied = true;
      assert_same(&c, &e);
      ember_collector_info_clear(&e);
    } else {
      assert_int_equal(rc, -ENOMEM);
      assert_null(e.id);
    }
    ember_buf_t out;
    ember_buf_init(&out, 1 << 20);
    ember_alloc_fail_after(n);
    rc = ember_codec_encode_collector(&c, &out);
    ember_alloc_fail_reset();
    if (rc == 0) {
      encoded = true;
      assert_int_equal(out.len, b.len);
      assert_memory_equal(out.data, b.data, b.len);
    } else {
      assert_int_equal(rc, -ENOMEM);
    }
    ember_buf_free(&out);
  }
  assert_true(decoded && copied && encoded);
  ember_buf_free(&b);
}

/* The fuzz target's seed (tests/fuzz/corpus/collector.bin, written by
 * hand from the field numbers) is a valid record: it starts the fuzzer
 * inside the decoder's accepting paths. */
static void test_codec_collector_fuzz_seed_decodes(void **state) {
  (void)state;
  FILE *f = fopen(EMBER_SOURCE_DIR "/tests/fuzz/corpus/collector.bin", "rb");
  assert_non_null(f);
  unsigned char data[4096];
  size_t n = fread(data, 1, sizeof data, f);
  fclose(f);
  ember_collector_info_t d;
  char err[256] = "";
  int rc = ember_codec_decode_collector(data, n, &d, err, sizeof err);
  if (rc != 0) fail_msg("the seed does not decode: %s", err);
  assert_string_equal(d.id, "host-a:7272");
  assert_int_equal(d.nruns, 3);
  assert_int_equal(d.nassigned, 3);
  assert_int_equal(d.interval_ms, 5000);
  ember_collector_info_clear(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codec_collector_round_trip),
      cmocka_unit_test(test_codec_collector_every_refusal),
      cmocka_unit_test(test_codec_collector_bounds_and_versions),
      cmocka_unit_test(test_codec_collector_survives_allocation_failures),
      cmocka_unit_test(test_codec_collector_fuzz_seed_decodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
