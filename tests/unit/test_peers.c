/* The peer table (collector/peers.c): records of ember.collectors applied
 * by key, replaced by later ones, stale ones ignored, tombstones deleting,
 * bad records refused with the table unchanged, and liveness judged on a
 * driven clock (3 intervals, the sender's stamp unless it is in the
 * receiver's future, stopping never live). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "peers.h"

#define S(lit)   ((char *)(uintptr_t)(lit))
#define SEC      1000000000LL
#define T0       (1764460800LL * SEC)
#define INTERVAL 5000u /* ms */

static ember_collector_info_t rec(const char *id, int64_t started, uint64_t seq, int64_t at) {
  return (ember_collector_info_t){.id = (char *)(uintptr_t)id,
                                  .group_id = S("g"),
                                  .api_url = S("http://h:7272"),
                                  .started_ns = started,
                                  .announced_ns = at,
                                  .seq = seq,
                                  .interval_ms = INTERVAL};
}

/* Encode `c` and apply it under its id, received at `now`. */
static int apply_at(ember__peers_t *p, const ember_collector_info_t *c, int64_t now, bool *stale) {
  ember_buf_t b;
  ember_buf_init(&b, 1 << 20);
  assert_int_equal(ember_codec_encode_collector(c, &b), 0);
  char err[256] = "";
  int rc = ember__peers_apply(p, c->id, strlen(c->id), b.data, b.len, now, stale, err, sizeof err);
  ember_buf_free(&b);
  return rc;
}

/* The listed peer `id` (failing the test when it is not listed). */
static const ember__peer_t *find(const ember__peer_t *l, size_t n, const char *id) {
  static const ember__peer_t none;
  for (size_t i = 0; i < n; i++)
    if (strcmp(l[i].info.id, id) == 0) return &l[i];
  fail_msg("%s is not listed", id);
  return &none;
}

static void test_peers_apply_replace_and_tombstone(void **state) {
  (void)state;
  ember__peers_t *p = NULL;
  assert_int_equal(ember__peers_new(&p), 0);
  assert_int_equal(ember__peers_set_self(p, "b:7272"), 0);
  int32_t parts[] = {0, 2};
  ember_collector_info_t a = rec("a:7272", T0, 1, T0);
  a.assigned = parts;
  a.nassigned = 2;
  ember_collector_info_t b = rec("b:7272", T0, 1, T0);
  bool stale = true;
  assert_int_equal(apply_at(p, &b, T0, &stale), 0);
  assert_false(stale);
  assert_int_equal(apply_at(p, &a, T0, NULL), 0);

  ember__peer_t *l = NULL;
  size_t n = 0;
  assert_int_equal(ember__peers_list(p, T0, &l, &n), 0);
  assert_int_equal(n, 2);
  assert_string_equal(l[0].info.id, "a:7272"); /* sorted by id */
  assert_string_equal(l[1].info.id, "b:7272");
  assert_false(l[0].self);
  assert_true(l[1].self);
  assert_true(l[0].live && l[1].live);
  assert_int_equal(l[0].info.nassigned, 2);
  assert_int_equal(l[0].info.assigned[1], 2);
  ember__peers_list_free(l, n);

  /* A later record of the same incarnation replaces; the same seq again,
   * or an earlier one, is stale. */
  a.seq = 2;
  a.nassigned = 1;
  assert_int_equal(apply_at(p, &a, T0 + SEC, &stale), 0);
  assert_false(stale);
  a.seq = 2;
  a.nassigned = 0;
  assert_int_equal(apply_at(p, &a, T0 + 2 * SEC, &stale), 0);
  assert_true(stale);
  a.seq = 1;
  assert_int_equal(apply_at(p, &a, T0 + 2 * SEC, &stale), 0);
  assert_true(stale);
  assert_int_equal(ember__peers_list(p, T0, &l, &n), 0);
  assert_int_equal(find(l, n, "a:7272")->info.nassigned, 1);
  assert_true(find(l, n, "a:7272")->info.seq == 2);
  assert_true(find(l, n, "a:7272")->received_ns == T0 + SEC);
  ember__peers_list_free(l, n);

  /* A new incarnation replaces whatever seq it starts at. */
  ember_collector_info_t a2 = rec("a:7272", T0 + 10 * SEC, 1, T0 + 10 * SEC);
  assert_int_equal(apply_at(p, &a2, T0 + 10 * SEC, &stale), 0);
  assert_false(stale);
  /* The previous incarnation's records, replayed, are ignored while the
   * new one is live... */
  ember_collector_info_t old = rec("a:7272", T0, 9, T0 + 9 * SEC);
  old.stopping = true;
  assert_int_equal(apply_at(p, &old, T0 + 11 * SEC, &stale), 0);
  assert_true(stale);
  /* ...and replace it once it is not (a clock that went back). */
  int64_t late = T0 + 10 * SEC + 3 * INTERVAL * 1000000LL + 1;
  assert_int_equal(apply_at(p, &old, late, &stale), 0);
  assert_false(stale);
  assert_int_equal(ember__peers_list(p, late, &l, &n), 0);
  assert_true(find(l, n, "a:7272")->info.started_ns == T0);
  assert_true(find(l, n, "a:7272")->info.stopping);
  assert_false(find(l, n, "a:7272")->live);
  ember__peers_list_free(l, n);

  /* Tombstones delete (NULL or empty), also of keys never seen. */
  char err[256] = "";
  assert_int_equal(ember__peers_apply(p, "a:7272", 6, "", 0, T0, NULL, err, sizeof err), 0);
  assert_int_equal(ember__peers_apply(p, "zz", 2, NULL, 0, T0, NULL, err, sizeof err), 0);
  size_t all = 9, live = 9;
  ember__peers_count(p, T0, &all, &live);
  assert_int_equal(all, 1);
  assert_int_equal(live, 1);
  assert_int_equal(ember__peers_apply(p, "b:7272", 6, NULL, 0, T0, NULL, err, sizeof err), 0);
  assert_int_equal(ember__peers_list(p, T0, &l, &n), 0);
  assert_int_equal(n, 0);
  assert_null(l);
  ember__peers_free(p);
  ember__peers_free(NULL);
}

static void test_peers_refuses_bad_records(void **state) {
  (void)state;
  ember__peers_t *p = NULL;
  assert_int_equal(ember__peers_new(&p), 0);
  ember_collector_info_t a = rec("a:1", T0, 1, T0);
  assert_int_equal(apply_at(p, &a, T0, NULL), 0);
  char err[256] = "";
  /* Garbage, a valid record under another key, no key. */
  assert_int_equal(ember__peers_apply(p, "a:1", 3, "\xff\xff", 2, T0, NULL, err, sizeof err),
                   EMBER_ECORRUPT);
  ember_buf_t b;
  ember_buf_init(&b, 1 << 16);
  ember_collector_info_t other = rec("b:1", T0, 5, T0);
  assert_int_equal(ember_codec_encode_collector(&other, &b), 0);
  assert_int_equal(ember__peers_apply(p, "a:1", 3, b.data, b.len, T0, NULL, err, sizeof err),
                   EMBER_ECORRUPT);
  assert_non_null(strstr(err, "under the key"));
  /* A key that is a prefix of the id is not the id. */
  assert_int_equal(ember__peers_apply(p, "b:", 2, b.data, b.len, T0, NULL, err, sizeof err),
                   EMBER_ECORRUPT);
  assert_int_equal(ember__peers_apply(p, NULL, 0, b.data, b.len, T0, NULL, err, sizeof err),
                   -EINVAL);
  assert_int_equal(ember__peers_apply(p, "a\0b", 3, b.data, b.len, T0, NULL, err, sizeof err),
                   -EINVAL);
  ember_buf_free(&b);
  /* A record the check refuses is not put either. */
  ember_collector_info_t bad = rec("c:1", T0, 0, T0);
  assert_int_equal(ember__peers_put(p, &bad, T0), EMBER_ECORRUPT);
  /* The table is as it was. */
  ember__peer_t *l = NULL;
  size_t n = 0;
  assert_int_equal(ember__peers_list(p, T0, &l, &n), 0);
  assert_int_equal(n, 1);
  assert_string_equal(l[0].info.id, "a:1");
  assert_true(l[0].info.seq == 1);
  ember__peers_list_free(l, n);
  ember__peers_free(p);
}

static void test_peers_liveness_on_a_driven_clock(void **state) {
  (void)state;
  ember__peers_t *p = NULL;
  assert_int_equal(ember__peers_new(&p), 0);
  const int64_t window = 3 * (int64_t)INTERVAL * 1000000;
  /* Heard at T0: live through T0 + 3 intervals, not a nanosecond after. */
  ember_collector_info_t a = rec("a", T0, 1, T0);
  assert_int_equal(apply_at(p, &a, T0, NULL), 0);
  size_t all, live;
  ember__peers_count(p, T0 + window, &all, &live);
  assert_int_equal(live, 1);
  ember__peers_count(p, T0 + window + 1, &all, &live);
  assert_int_equal(all, 1);
  assert_int_equal(live, 0);
  /* A new record brings it back. */
  a.seq = 2;
  a.announced_ns = T0 + window + 5;
  assert_int_equal(apply_at(p, &a, T0 + window + 5, NULL), 0);
  ember__peers_count(p, T0 + window + 6, &all, &live);
  assert_int_equal(live, 1);

  /* An old record read late (the topic replayed at start) is judged by
   * when it was announced, not when it arrived. */
  ember_collector_info_t b = rec("b", T0 - 3600 * SEC, 7, T0 - 60 * SEC);
  assert_int_equal(apply_at(p, &b, T0, NULL), 0);
  ember__peer_t *l = NULL;
  size_t n = 0;
  assert_int_equal(ember__peers_list(p, T0, &l, &n), 0);
  const ember__peer_t *pb = find(l, n, "b");
  assert_false(pb->live);
  assert_true(pb->heard_ns == T0 - 60 * SEC);
  assert_true(pb->received_ns == T0);
  ember__peers_list_free(l, n);

  /* A sender whose clock runs ahead is judged by when its record arrived. */
  ember_collector_info_t c = rec("c", T0, 1, T0 + 3600 * SEC);
  assert_int_equal(apply_at(p, &c, T0, NULL), 0);
  assert_int_equal(ember__peers_list(p, T0 + window + 1, &l, &n), 0);
  assert_true(find(l, n, "c")->heard_ns == T0);
  assert_false(find(l, n, "c")->live);
  ember__peers_list_free(l, n);

  /* Stopping is never live, however fresh; the interval is the sender's. */
  ember_collector_info_t d = rec("d", T0, 1, T0);
  d.stopping = true;
  assert_false(ember__peers_live(&d, T0, T0));
  d.stopping = false;
  d.interval_ms = 60000;
  assert_true(ember__peers_live(&d, T0, T0 + 180 * SEC));
  assert_false(ember__peers_live(&d, T0, T0 + 180 * SEC + 1));
  assert_false(ember__peers_live(NULL, T0, T0));
  ember__peers_free(p);
}

/* Fail the Nth allocation of an apply, a put and a list for every N: an
 * error with the table unchanged, or success; nothing leaks. */
static void test_peers_survives_allocation_failures(void **state) {
  (void)state;
  int32_t parts[] = {1, 3};
  ember_collector_run_t runs[] = {{.partition = 1, .start = 0, .stored_end = 5, .committed = 5}};
  ember_collector_info_t a = rec("a", T0, 1, T0);
  a.assigned = parts;
  a.nassigned = 2;
  a.runs = runs;
  a.nruns = 1;
  ember_buf_t enc;
  ember_buf_init(&enc, 1 << 20);
  assert_int_equal(ember_codec_encode_collector(&a, &enc), 0);
  char err[256];
  bool applied = false, put = false, listed = false;
  for (long k = 0; k < 100 && !(applied && put && listed); k++) {
    ember__peers_t *p = NULL;
    assert_int_equal(ember__peers_new(&p), 0);
    ember_alloc_fail_after(k);
    int rc = ember__peers_apply(p, "a", 1, enc.data, enc.len, T0, NULL, err, sizeof err);
    ember_alloc_fail_reset();
    size_t all = 0, live = 0;
    ember__peers_count(p, T0, &all, &live);
    if (rc == 0) {
      applied = true;
      assert_int_equal(all, 1);
    } else {
      assert_true(rc == -ENOMEM || rc == EMBER_ECORRUPT);
      assert_int_equal(all, 0);
    }
    ember_collector_info_t b = rec("b", T0, 1, T0);
    ember_alloc_fail_after(k);
    rc = ember__peers_put(p, &b, T0);
    ember_alloc_fail_reset();
    if (rc == 0)
      put = true;
    else
      assert_int_equal(rc, -ENOMEM);
    ember__peer_t *l = NULL;
    size_t n = 99;
    ember_alloc_fail_after(k);
    rc = ember__peers_list(p, T0, &l, &n);
    ember_alloc_fail_reset();
    if (rc == 0) {
      listed = true;
      ember__peers_list_free(l, n);
    } else {
      assert_int_equal(rc, -ENOMEM);
      assert_int_equal(n, 99); /* untouched */
    }
    ember__peers_free(p);
  }
  assert_true(applied && put && listed);
  ember_buf_free(&enc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_peers_apply_replace_and_tombstone),
      cmocka_unit_test(test_peers_refuses_bad_records),
      cmocka_unit_test(test_peers_liveness_on_a_driven_clock),
      cmocka_unit_test(test_peers_survives_allocation_failures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
