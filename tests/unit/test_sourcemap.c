/* Source map decoding (include/ember/sourcemap.h): segments and tables as
 * the format means them (checked against an encoder written here from the
 * spec, over random maps), sourceRoot, index maps, the function-name rule
 * on the layouts minifiers write, and every refusal with its reason. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ember/buf.h"
#include "ember/sourcemap.h"

/* --- an encoder, from the spec --- */

static void vlq_put(ember_buf_t *b, int64_t v) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint64_t u = v < 0 ? ((uint64_t)(-v) << 1) | 1 : (uint64_t)v << 1;
  do {
    unsigned d = u & 31;
    u >>= 5;
    if (u) d |= 32;
    assert_int_equal(ember_buf_append(b, &digits[d], 1), 0);
  } while (u);
}

typedef struct tseg {
  uint32_t line, col;
  int src, oline, ocol, name; /* src -1: a 1-field segment; name -1: none */
} tseg_t;

/* `mappings` of segments sorted by (line, col). */
static void encode(const tseg_t *s, size_t n, ember_buf_t *out) {
  int64_t col = 0, src = 0, ol = 0, oc = 0, nm = 0;
  uint32_t line = 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && s[i].line == line) assert_int_equal(ember_buf_append(out, ",", 1), 0);
    while (line < s[i].line) {
      assert_int_equal(ember_buf_append(out, ";", 1), 0);
      line++, col = 0;
    }
    vlq_put(out, (int64_t)s[i].col - col);
    col = s[i].col;
    if (s[i].src < 0) continue;
    vlq_put(out, s[i].src - src), src = s[i].src;
    vlq_put(out, s[i].oline - ol), ol = s[i].oline;
    vlq_put(out, s[i].ocol - oc), oc = s[i].ocol;
    if (s[i].name >= 0) vlq_put(out, s[i].name - nm), nm = s[i].name;
  }
}

static ember_sourcemap_t *parse_ok(const char *json) {
  ember_sourcemap_t *sm = NULL;
  ember_sourcemap_error_t err;
  int rc = ember_sourcemap_parse(json, strlen(json), NULL, &sm, &err);
  if (rc != 0)
    fail_msg("refused (%s): %s\n%s", ember_sourcemap_reason_name(err.reason), err.text, json);
  return sm;
}

/* Refused with `reason`, and a sentence. */
static void refused(const char *json, const ember_sourcemap_limits_t *lim,
                    ember_sourcemap_reason_t reason) {
  ember_sourcemap_t *sm = (ember_sourcemap_t *)1;
  ember_sourcemap_error_t err;
  int rc = ember_sourcemap_parse(json, strlen(json), lim, &sm, &err);
  if (rc != -EINVAL || err.reason != reason)
    fail_msg("%s: rc %d reason %s (%s), want %s", json, rc, ember_sourcemap_reason_name(err.reason),
             err.text, ember_sourcemap_reason_name(reason));
  assert_null(sm);
  assert_true(strlen(err.text) > 8);
}

static void test_segments_and_tables(void **state) {
  (void)state;
  /* Line 0: col 0 -> a.ts 0:0; col 9 -> a.ts 0:9 "hotLoop"; col 10 (a
   * 1-field segment: no source). Line 2: col 4 -> b.ts 4:2 "n". */
  const tseg_t s[] = {
      {0, 0, 0, 0, 0, -1}, {0, 9, 0, 0, 9, 0}, {0, 10, -1, 0, 0, -1}, {2, 4, 1, 4, 2, 1}};
  ember_buf_t m;
  ember_buf_init(&m, 1 << 20);
  encode(s, 4, &m);
  char json[512];
  snprintf(json, sizeof json,
           "{\"version\":3,\"file\":\"x.js\",\"sources\":[\"a.ts\",\"b.ts\"],\"sourcesContent\":"
           "[\"x\",null],\"names\":[\"hotLoop\",\"n\"],\"mappings\":\"%s\",\"x_extra\":[1]}",
           m.data);
  ember_buf_free(&m);
  ember_sourcemap_t *sm = parse_ok(json);
  assert_int_equal(ember_sourcemap_segments(sm), 4);
  assert_true(ember_sourcemap_memory(sm) >= 4 * 24);
  ember_sourcemap_pos_t p;
  assert_true(ember_sourcemap_find(sm, 0, 0, &p));
  assert_string_equal(p.source, "a.ts");
  assert_null(p.name);
  assert_int_equal(p.line, 1);
  assert_int_equal(p.column, 1);
  assert_true(ember_sourcemap_find(sm, 0, 9, &p));
  assert_string_equal(p.name, "hotLoop");
  assert_int_equal(p.column, 10);
  assert_false(ember_sourcemap_find(sm, 0, 10, &p)); /* a segment of no source */
  assert_false(ember_sourcemap_find(sm, 0, 99, &p)); /* still covered by it */
  assert_false(ember_sourcemap_find(sm, 1, 0, &p));  /* a line of none */
  assert_false(ember_sourcemap_find(sm, 2, 3, &p));  /* before the line's first */
  assert_true(ember_sourcemap_find(sm, 2, 1000, &p));
  assert_string_equal(p.source, "b.ts");
  assert_string_equal(p.name, "n");
  assert_int_equal(p.line, 5);
  assert_int_equal(p.column, 3);
  assert_false(ember_sourcemap_find(sm, 7, 0, &p));
  ember_sourcemap_free(sm);
}

static void test_source_root(void **state) {
  (void)state;
  ember_sourcemap_t *sm =
      parse_ok("{\"version\":3,\"sourceRoot\":\"src\",\"sources\":[\"a.ts\",\"/abs/b.ts\","
               "\"webpack://app/c.ts\",null],\"names\":[],\"mappings\":\"AAAA,CCAA,CCAA,CCAA\"}");
  ember_sourcemap_pos_t p;
  const char *want[] = {"src/a.ts", "/abs/b.ts", "webpack://app/c.ts"};
  for (uint32_t c = 0; c < 3; c++) {
    assert_true(ember_sourcemap_find(sm, 0, c, &p));
    assert_string_equal(p.source, want[c]);
  }
  assert_true(ember_sourcemap_find(sm, 0, 3, &p)); /* a null source maps, to nothing named */
  assert_null(p.source);
  ember_sourcemap_free(sm);
  sm = parse_ok(
      "{\"version\":3,\"sourceRoot\":\"/r/\",\"sources\":[\"a.ts\"],\"mappings\":\"AAAA\"}");
  assert_true(ember_sourcemap_find(sm, 0, 0, &p));
  assert_string_equal(p.source, "/r/a.ts");
  ember_sourcemap_free(sm);
}

/* A map whose place is known: relative sources from its directory. */
static void test_sources_from_the_maps_directory(void **state) {
  (void)state;
  const char *json =
      "{\"version\":3,\"sourceRoot\":\"../lib\",\"sources\":[\"./a.ts\",\"/abs/b.ts\","
      "\"webpack://app/c.ts\",\"../../../../d.ts\"],\"mappings\":\"AAAA,CCAA,CCAA,CCAA\"}";
  ember_sourcemap_t *sm = NULL;
  assert_int_equal(ember_sourcemap_parse_at(json, strlen(json), NULL, "/srv/app/dist", &sm, NULL),
                   0);
  const char *want[] = {"/srv/app/lib/a.ts", "/abs/b.ts", "webpack://app/c.ts", "/d.ts"};
  for (uint32_t c = 0; c < 4; c++) {
    ember_sourcemap_pos_t p;
    assert_true(ember_sourcemap_find(sm, 0, c, &p));
    assert_string_equal(p.source, want[c]);
  }
  ember_sourcemap_free(sm);
  assert_int_equal(ember_sourcemap_parse_at(json, strlen(json), NULL, "dist", &sm, NULL), -EINVAL);
  assert_true(ember_sourcemap_source_is_relative("../a.ts"));
  assert_false(ember_sourcemap_source_is_relative("/a.ts"));
  assert_false(ember_sourcemap_source_is_relative("webpack://a.ts"));
}

static void test_index_map(void **state) {
  (void)state;
  /* Two sections: the second starts at line 1 column 10, so its first
   * line's columns move by 10 and its other lines do not. */
  ember_sourcemap_t *sm = parse_ok(
      "{\"version\":3,\"sections\":["
      "{\"offset\":{\"line\":0,\"column\":0},\"map\":{\"version\":3,\"sources\":[\"one.ts\"],"
      "\"names\":[\"f\"],\"mappings\":\"AAAAA\"}},"
      "{\"offset\":{\"line\":1,\"column\":10},\"map\":{\"version\":3,\"sources\":[\"two.ts\"],"
      "\"names\":[\"g\"],\"mappings\":\"EAAAA;EACA\"}}]}");
  ember_sourcemap_pos_t p;
  assert_true(ember_sourcemap_find(sm, 0, 0, &p));
  assert_string_equal(p.source, "one.ts");
  assert_string_equal(p.name, "f");
  assert_false(ember_sourcemap_find(sm, 1, 11, &p));
  assert_true(ember_sourcemap_find(sm, 1, 12, &p));
  assert_string_equal(p.source, "two.ts");
  assert_string_equal(p.name, "g");
  assert_true(ember_sourcemap_find(sm, 2, 2, &p));
  assert_string_equal(p.source, "two.ts");
  assert_int_equal(p.line, 2);
  ember_sourcemap_free(sm);
}

/* The rule for V8's function positions, on what esbuild writes for
 *   function hotLoop(n) {...}   ->  function a(b){...}
 *   const arrow = (count) => .. ->  const c=d=>...
 *   class K { meth(n) {...} }   ->  class K{meth(e){...}}
 * with the name segments minifiers emit for renamed identifiers. */
static void test_function_names(void **state) {
  (void)state;
  /* line 0: "function a(b){}const c=d=>1;class K{meth(e){}}"
   *          0        9 11   16    22 24     33 37 42       */
  const tseg_t s[] = {
      {0, 0, 0, 0, 0, -1},   /* function */
      {0, 9, 0, 0, 9, 0},    /* a -> hotLoop */
      {0, 11, 0, 0, 17, 1},  /* b -> n */
      {0, 16, 0, 2, 0, -1},  /* const */
      {0, 22, 0, 2, 6, 2},   /* c -> arrow */
      {0, 24, 0, 2, 15, 3},  /* d -> count */
      {0, 33, 0, 4, 0, -1},  /* class */
      {0, 37, 0, 4, 10, -1}, /* meth (a property: not renamed, no name) */
      {0, 42, 0, 4, 15, 1},  /* e -> n */
  };
  ember_buf_t m;
  ember_buf_init(&m, 1 << 20);
  encode(s, sizeof s / sizeof *s, &m);
  char json[512];
  snprintf(json, sizeof json,
           "{\"version\":3,\"sources\":[\"src/hot.ts\"],\"names\":[\"hotLoop\",\"n\",\"arrow\","
           "\"count\"],\"mappings\":\"%s\"}",
           m.data);
  ember_buf_free(&m);
  ember_sourcemap_t *sm = parse_ok(json);
  ember_sourcemap_pos_t p;
  /* V8: "JS:*a x.js:1:11" (the '(' at column 10, 1-based 11). */
  assert_true(ember_sourcemap_function(sm, 1, 11, 1, &p));
  assert_string_equal(p.name, "hotLoop");
  assert_string_equal(p.source, "src/hot.ts");
  assert_int_equal(p.line, 1);
  /* "JS:*c x.js:1:25": at the parameter d itself, whose segment names
   * "count"; the function is the c before it. */
  assert_true(ember_sourcemap_function(sm, 1, 25, 1, &p));
  assert_string_equal(p.name, "arrow");
  assert_int_equal(p.line, 3);
  /* "JS:*meth x.js:1:42": meth kept its name; the nearest named segment
   * before it is too far back to be its name. */
  assert_true(ember_sourcemap_function(sm, 1, 42, 4, &p));
  assert_null(p.name);
  assert_int_equal(p.line, 5);
  /* An anonymous function takes no neighbour's name. */
  assert_true(ember_sourcemap_function(sm, 1, 11, 0, &p));
  assert_null(p.name);
  assert_false(ember_sourcemap_function(sm, 2, 1, 1, &p));
  assert_false(ember_sourcemap_function(sm, 0, 1, 1, &p));
  ember_sourcemap_free(sm);
}

/* Random maps through the encoder: every segment found where it is, and
 * every column between two segments covered by the first. */
static void test_random_maps_round_trip(void **state) {
  (void)state;
  srand(7);
  for (int round = 0; round < 50; round++) {
    size_t n = 1 + (size_t)(rand() % 400), nsrc = 1 + (size_t)(rand() % 5),
           nnames = 1 + (size_t)(rand() % 9);
    tseg_t *s = calloc(n, sizeof *s);
    assert_non_null(s);
    uint32_t line = 0, col = 0;
    for (size_t i = 0; i < n; i++) {
      if (rand() % 4 == 0) line += 1 + (uint32_t)(rand() % 3), col = 0;
      col +=
          (i == 0 || s[i - 1].line != line) ? (uint32_t)(rand() % 5) : 1 + (uint32_t)(rand() % 40);
      s[i] = (tseg_t){line,          col,          rand() % 5 ? rand() % (int)nsrc : -1,
                      rand() % 3000, rand() % 200, rand() % 2 ? rand() % (int)nnames : -1};
    }
    ember_buf_t m, j;
    ember_buf_init(&m, 1 << 24);
    ember_buf_init(&j, 1 << 24);
    encode(s, n, &m);
    assert_int_equal(ember_buf_puts(&j, "{\"version\":3,\"sources\":["), 0);
    for (size_t i = 0; i < nsrc; i++)
      assert_int_equal(ember_buf_printf(&j, "%s\"s%zu.ts\"", i ? "," : "", i), 0);
    assert_int_equal(ember_buf_puts(&j, "],\"names\":["), 0);
    for (size_t i = 0; i < nnames; i++)
      assert_int_equal(ember_buf_printf(&j, "%s\"n%zu\"", i ? "," : "", i), 0);
    assert_int_equal(ember_buf_printf(&j, "],\"mappings\":\"%s\"}", m.data), 0);
    ember_sourcemap_t *sm = parse_ok(j.data);
    assert_int_equal(ember_sourcemap_segments(sm), n);
    for (size_t i = 0; i < n; i++) {
      uint32_t end = i + 1 < n && s[i + 1].line == s[i].line ? s[i + 1].col : s[i].col + 50;
      for (uint32_t c = s[i].col; c < end; c += 1 + (end - s[i].col) / 4) {
        ember_sourcemap_pos_t p;
        bool found = ember_sourcemap_find(sm, s[i].line, c, &p);
        assert_int_equal(found, s[i].src >= 0);
        if (!found) continue;
        char want[32];
        snprintf(want, sizeof want, "s%d.ts", s[i].src);
        assert_string_equal(p.source, want);
        assert_int_equal(p.line, (uint32_t)s[i].oline + 1);
        assert_int_equal(p.column, (uint32_t)s[i].ocol + 1);
        if (s[i].name < 0) {
          assert_null(p.name);
        } else {
          snprintf(want, sizeof want, "n%d", s[i].name);
          assert_string_equal(p.name, want);
        }
      }
    }
    ember_sourcemap_free(sm);
    ember_buf_free(&m);
    ember_buf_free(&j);
    free(s);
  }
}

/* Segments out of order on a line (a negative column delta) are sorted. */
static void test_unsorted_segments(void **state) {
  (void)state;
  /* col 10 -> line 1, then col 2 (delta -8 = "R") -> line 0 */
  ember_sourcemap_t *sm =
      parse_ok("{\"version\":3,\"sources\":[\"a.ts\"],\"mappings\":\"UAAA,RAAE\"}");
  ember_sourcemap_pos_t p;
  assert_true(ember_sourcemap_find(sm, 0, 5, &p));
  assert_int_equal(p.column, 3);
  assert_true(ember_sourcemap_find(sm, 0, 12, &p));
  assert_int_equal(p.column, 1);
  ember_sourcemap_free(sm);
}

static void test_refusals(void **state) {
  (void)state;
#define MAP(m) "{\"version\":3,\"sources\":[\"a.ts\"],\"names\":[\"x\"],\"mappings\":\"" m "\"}"
  refused("", NULL, EMBER_SOURCEMAP_NOT_JSON);
  refused("{\"version\":3,", NULL, EMBER_SOURCEMAP_NOT_JSON);
  refused("[1,2]", NULL, EMBER_SOURCEMAP_NOT_JSON);
  refused("{\"version\":2,\"sources\":[],\"mappings\":\"\"}", NULL, EMBER_SOURCEMAP_NOT_V3);
  refused("{\"version\":\"3\",\"sources\":[],\"mappings\":\"\"}", NULL, EMBER_SOURCEMAP_NOT_V3);
  refused("{\"version\":3,\"mappings\":\"AAAA\"}", NULL, EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sources\":[],\"mappings\":7}", NULL, EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sources\":[3],\"mappings\":\"\"}", NULL, EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sources\":[],\"names\":[null],\"mappings\":\"\"}", NULL,
          EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sources\":[],\"names\":{},\"mappings\":\"\"}", NULL,
          EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sources\":[],\"sourceRoot\":1,\"mappings\":\"\"}", NULL,
          EMBER_SOURCEMAP_BAD_FIELD);
  refused(MAP("AA!A"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);
  refused(MAP("AAAg"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);        /* ends inside a VLQ */
  refused(MAP("AAAAAAAAAAA"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS); /* 11 fields */
  refused(MAP("AA"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);          /* 2 fields */
  refused(MAP("AAA"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);         /* 3 fields */
  refused(MAP("AAAAAA"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);      /* 6 fields */
  refused(MAP("gggggggA"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);    /* over 32 bits */
  refused(MAP("+/////H"), NULL, EMBER_SOURCEMAP_BAD_MAPPINGS);     /* 2^31 */
  refused(MAP("ACAA"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);        /* source 1 of 1 */
  refused(MAP("ADAA"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);        /* source -1 */
  refused(MAP("AAAAC"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);       /* name 1 of 1 */
  refused(MAP("AAAAD"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);       /* name -1 */
  refused(MAP("D"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);           /* column -1 */
  refused(MAP("AADA"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);        /* original line -1 */
  refused(MAP("AAAD"), NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);        /* original column -1 */
  refused("{\"version\":3,\"sections\":[{\"offset\":{\"line\":0,\"column\":0},\"url\":\"x.map\"}]}",
          NULL, EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sections\":[{\"offset\":{\"line\":0,\"column\":0},\"map\":{\"version\":"
          "3,\"sections\":[]}}]}",
          NULL, EMBER_SOURCEMAP_BAD_FIELD);
  refused(
      "{\"version\":3,\"sections\":[{\"offset\":{\"line\":-1,\"column\":0},\"map\":{\"version\":"
      "3,\"sources\":[],\"mappings\":\"\"}}]}",
      NULL, EMBER_SOURCEMAP_OUT_OF_RANGE);
  refused("{\"version\":3,\"sections\":[{\"map\":{}}]}", NULL, EMBER_SOURCEMAP_BAD_FIELD);
  refused("{\"version\":3,\"sections\":[{\"offset\":{\"line\":0,\"column\":0},\"map\":{\"version\":"
          "4,\"sources\":[],\"mappings\":\"\"}}]}",
          NULL, EMBER_SOURCEMAP_NOT_V3);
  /* The bounds. */
  ember_sourcemap_limits_t lim = {.max_bytes = 40};
  refused(MAP("AAAA,CAAA"), &lim, EMBER_SOURCEMAP_TOO_BIG);
  lim = (ember_sourcemap_limits_t){.max_segments = 2};
  refused(MAP("AAAA,CAAA,CAAA"), &lim, EMBER_SOURCEMAP_TOO_MANY);
  lim = (ember_sourcemap_limits_t){.max_strings = 1};
  refused("{\"version\":3,\"sources\":[\"a\",\"b\"],\"mappings\":\"\"}", &lim,
          EMBER_SOURCEMAP_TOO_MANY);
  lim = (ember_sourcemap_limits_t){.max_string = 4};
  refused("{\"version\":3,\"sources\":[\"a\"],\"names\":[\"hotLoop\"],\"mappings\":\"\"}", &lim,
          EMBER_SOURCEMAP_TOO_MANY);
  refused("{\"version\":3,\"sourceRoot\":\"/root\",\"sources\":[\"a\"],\"mappings\":\"\"}", &lim,
          EMBER_SOURCEMAP_TOO_MANY);
  lim = (ember_sourcemap_limits_t){.max_sections = 1};
  refused("{\"version\":3,\"sections\":[{},{}]}", &lim, EMBER_SOURCEMAP_TOO_MANY);
#undef MAP
  assert_string_equal(ember_sourcemap_reason_name(EMBER_SOURCEMAP_OUT_OF_RANGE), "out_of_range");
  assert_string_equal(ember_sourcemap_reason_name(EMBER_SOURCEMAP_REASONS), "unknown");
  assert_int_equal(ember_sourcemap_parse(NULL, 1, NULL, &(ember_sourcemap_t *){NULL}, NULL),
                   -EINVAL);
}

/* Every prefix of a good map is refused or decoded, never more. */
static void test_every_cut(void **state) {
  (void)state;
  const char *json =
      "{\"version\":3,\"sourceRoot\":\"r\",\"sources\":[\"a.ts\",null],\"names\":[\"f\",\"g\"],"
      "\"mappings\":\"AAAAA,SAASC;;ACAA\",\"sections\":null}";
  for (size_t cut = 0; cut <= strlen(json); cut++) {
    ember_sourcemap_t *sm = NULL;
    ember_sourcemap_error_t err;
    int rc = ember_sourcemap_parse(json, cut, NULL, &sm, &err);
    assert_true(rc == 0 || rc == -EINVAL);
    if (rc == 0) {
      assert_int_equal(cut, strlen(json));
    } else {
      assert_null(sm);
      assert_true(err.reason != EMBER_SOURCEMAP_OK);
    }
    ember_sourcemap_free(sm);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_segments_and_tables),
      cmocka_unit_test(test_source_root),
      cmocka_unit_test(test_sources_from_the_maps_directory),
      cmocka_unit_test(test_index_map),
      cmocka_unit_test(test_function_names),
      cmocka_unit_test(test_random_maps_round_trip),
      cmocka_unit_test(test_unsorted_segments),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_every_cut),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
