/* Source map v3 decoding and lookups (ember/sourcemap.h).
 *
 * The JSON is parsed by jansson; only `mappings` is decoded here. Segments
 * are kept sorted by generated (line, column) in one array, so a lookup is
 * one binary search and a map of many empty lines costs nothing per line.
 * Strings (sources joined with sourceRoot, names) live in one blob and are
 * found by offset, so sections can append tables without moving pointers.
 * Index maps are flattened: each section's segments are shifted by its
 * offset and its tables appended after the earlier sections'. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "ember/buf.h"
#include "ember/jsname.h"
#include "ember/sourcemap.h"

#define NONE UINT32_MAX
/* Columns and lines as the format counts them fit an int32 (VLQs are
 * 32-bit); one more keeps NONE apart. */
#define MAX_POS ((int64_t)INT32_MAX)

typedef struct seg {
  uint32_t line, col;   /* generated, 0-based */
  uint32_t src, name;   /* table indices, NONE = none */
  uint32_t oline, ocol; /* original, 0-based */
} seg_t;

struct ember_sourcemap {
  seg_t *segs;
  size_t nsegs, capsegs;
  size_t *src_off, *name_off; /* into blob; SIZE_MAX = a null source */
  size_t nsrc, capsrc, nname, capname;
  ember_buf_t blob;
  bool sorted;
};

static const char *const reason_names[EMBER_SOURCEMAP_REASONS] = {
    "ok", "too_big", "not_json", "not_v3", "bad_field", "bad_mappings", "out_of_range", "too_many"};

const char *ember_sourcemap_reason_name(ember_sourcemap_reason_t reason) {
  return (unsigned)reason < EMBER_SOURCEMAP_REASONS ? reason_names[reason] : "unknown";
}

/* What a parse carries along. */
typedef struct parse {
  ember_sourcemap_t *sm;
  ember_sourcemap_limits_t lim;
  const char *base; /* relative sources start here; NULL: left relative */
  ember_sourcemap_error_t *err;
} parse_t;

__attribute__((format(printf, 3, 4))) static int refuse(parse_t *p, ember_sourcemap_reason_t r,
                                                        const char *fmt, ...) {
  if (p->err != NULL) {
    p->err->reason = r;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err->text, sizeof p->err->text, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

/* --- tables --- */

static bool has_scheme(const char *s) {
  /* "webpack://", "file:", "data:": a letter, then letters, digits, +-. */
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z'))) return false;
  for (const char *c = s + 1; *c; c++) {
    if (*c == ':') return true;
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '+' || *c == '-' || *c == '.'))
      return false;
  }
  return false;
}

/* Append `s` (with `root` before it, unless s is absolute) to the blob. */
static int add_string(parse_t *p, const char *what, size_t i, const char *root, const char *s,
                      size_t *off) {
  size_t rl = 0;
  bool slash = false;
  if (root != NULL && *root != '\0' && *s != '/' && !has_scheme(s)) {
    rl = strlen(root);
    slash = root[rl - 1] != '/';
  }
  size_t sl = strlen(s), total = rl + slash + sl;
  if (total > p->lim.max_string)
    return refuse(p, EMBER_SOURCEMAP_TOO_MANY, "%s %zu is %zu bytes long, over %zu", what, i, total,
                  p->lim.max_string);
  *off = p->sm->blob.len;
  int rc = 0;
  size_t start = p->sm->blob.len;
  if (rl > 0) rc = ember_buf_append(&p->sm->blob, root, rl);
  if (rc == 0 && slash) rc = ember_buf_append(&p->sm->blob, "/", 1);
  if (rc == 0) rc = ember_buf_append(&p->sm->blob, s, sl + 1); /* and its NUL */
  if (rc != 0) return -ENOMEM;
  const char *joined = p->sm->blob.data + start;
  if (p->base == NULL || root == NULL || !ember_sourcemap_source_is_relative(joined)) return 0;
  /* A source of a map whose place is known: from the map's directory. */
  size_t bl = strlen(p->base), n = bl + 1 + total + 1;
  char *abs = ember_malloc(n);
  if (abs == NULL) return -ENOMEM;
  snprintf(abs, n, "%s/%s", p->base, joined);
  ember_jsname_path_lexical(abs);
  p->sm->blob.len = start;
  rc = ember_buf_append(&p->sm->blob, abs, strlen(abs) + 1);
  ember_free(abs);
  return rc == 0 ? 0 : -ENOMEM;
}

/* Append the map's `sources` (joined with `sourceRoot`) and `names`. */
static int add_tables(parse_t *p, json_t *map) {
  ember_sourcemap_t *sm = p->sm;
  json_t *sources = json_object_get(map, "sources"), *names = json_object_get(map, "names");
  json_t *rootj = json_object_get(map, "sourceRoot");
  if (!json_is_array(sources))
    return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "sources is not an array");
  if (names != NULL && !json_is_array(names))
    return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "names is not an array");
  if (rootj != NULL && !json_is_string(rootj) && !json_is_null(rootj))
    return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "sourceRoot is not a string");
  const char *root = json_is_string(rootj) ? json_string_value(rootj) : NULL;
  size_t ns = json_array_size(sources), nn = json_array_size(names);
  if (ns > p->lim.max_strings - sm->nsrc || nn > p->lim.max_strings - sm->nname)
    return refuse(p, EMBER_SOURCEMAP_TOO_MANY, "%zu sources and %zu names, over %zu", sm->nsrc + ns,
                  sm->nname + nn, p->lim.max_strings);
  for (size_t i = 0; i < ns; i++) {
    json_t *s = json_array_get(sources, i);
    size_t off = SIZE_MAX;
    if (json_is_string(s)) {
      int rc = add_string(p, "source", i, root ? root : "", json_string_value(s), &off);
      if (rc != 0) return rc;
    } else if (!json_is_null(s)) {
      return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "source %zu is not a string", i);
    }
    if (ember__grow(&sm->src_off, &sm->capsrc, sm->nsrc + 1, sizeof *sm->src_off) != 0)
      return -ENOMEM;
    sm->src_off[sm->nsrc++] = off;
  }
  for (size_t i = 0; i < nn; i++) {
    json_t *s = json_array_get(names, i);
    if (!json_is_string(s))
      return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "name %zu is not a string", i);
    size_t off;
    int rc = add_string(p, "name", i, NULL, json_string_value(s), &off);
    if (rc != 0) return rc;
    if (ember__grow(&sm->name_off, &sm->capname, sm->nname + 1, sizeof *sm->name_off) != 0)
      return -ENOMEM;
    sm->name_off[sm->nname++] = off;
  }
  return 0;
}

/* --- mappings --- */

static int8_t b64(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return (int8_t)(c - 'A');
  if (c >= 'a' && c <= 'z') return (int8_t)(c - 'a' + 26);
  if (c >= '0' && c <= '9') return (int8_t)(c - '0' + 52);
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* One base64 VLQ at *at: 0 and *out, or -EINVAL refused. */
static int vlq(parse_t *p, const char *s, size_t len, size_t *at, int64_t *out) {
  uint64_t acc = 0;
  for (unsigned shift = 0;; shift += 5) {
    if (*at >= len)
      return refuse(p, EMBER_SOURCEMAP_BAD_MAPPINGS, "mappings end inside a VLQ (byte %zu)", *at);
    int d = b64((unsigned char)s[*at]);
    if (d < 0)
      return refuse(p, EMBER_SOURCEMAP_BAD_MAPPINGS, "mappings byte %zu (0x%02x) is not base64",
                    *at, (unsigned char)s[*at]);
    if (shift > 30)
      return refuse(p, EMBER_SOURCEMAP_BAD_MAPPINGS, "a VLQ at byte %zu is over 32 bits", *at);
    (*at)++;
    acc |= (uint64_t)(d & 31) << shift;
    if ((d & 32) == 0) break;
  }
  uint64_t v = acc >> 1;
  if (v > (uint64_t)MAX_POS)
    return refuse(p, EMBER_SOURCEMAP_BAD_MAPPINGS, "a VLQ before byte %zu is over 32 bits", *at);
  *out = (acc & 1) ? -(int64_t)v : (int64_t)v;
  return 0;
}

/* Decode one map's `mappings` at generated (line0, col0), its table
 * indices starting at src0 and name0. */
static int decode(parse_t *p, const char *s, size_t len, int64_t line0, int64_t col0, size_t src0,
                  size_t name0) {
  ember_sourcemap_t *sm = p->sm;
  int64_t line = 0, col = 0, src = 0, oline = 0, ocol = 0, name = 0;
  size_t nsrc = sm->nsrc - src0, nname = sm->nname - name0;
  for (size_t at = 0; at < len;) {
    if (s[at] == ';') {
      line++, col = 0, at++;
      continue;
    }
    if (s[at] == ',') { /* an empty segment: nothing to keep */
      at++;
      continue;
    }
    int64_t f[5];
    int nf = 0, rc = 0;
    while (rc == 0 && at < len && s[at] != ',' && s[at] != ';') {
      if (nf == 5)
        return refuse(p, EMBER_SOURCEMAP_BAD_MAPPINGS,
                      "a segment before byte %zu has over 5 fields", at);
      rc = vlq(p, s, len, &at, &f[nf++]);
    }
    if (rc != 0) return rc;
    if (nf != 1 && nf != 4 && nf != 5)
      return refuse(p, EMBER_SOURCEMAP_BAD_MAPPINGS, "a segment before byte %zu has %d fields", at,
                    nf);
    col += f[0];
    int64_t gl = line0 + line, gc = col + (line == 0 ? col0 : 0);
    if (col < 0 || gl > MAX_POS || gc > MAX_POS)
      return refuse(p, EMBER_SOURCEMAP_OUT_OF_RANGE,
                    "a segment before byte %zu is at generated line %" PRId64 " column %" PRId64,
                    at, gl, col);
    seg_t g = {.line = (uint32_t)gl, .col = (uint32_t)gc, .src = NONE, .name = NONE};
    if (nf >= 4) {
      src += f[1], oline += f[2], ocol += f[3];
      if (src < 0 || (uint64_t)src >= nsrc)
        return refuse(p, EMBER_SOURCEMAP_OUT_OF_RANGE,
                      "a segment before byte %zu names source %" PRId64 " of %zu", at, src, nsrc);
      if (oline < 0 || oline > MAX_POS || ocol < 0 || ocol > MAX_POS)
        return refuse(p, EMBER_SOURCEMAP_OUT_OF_RANGE,
                      "a segment before byte %zu maps to line %" PRId64 " column %" PRId64, at,
                      oline, ocol);
      g.src = (uint32_t)(src0 + (size_t)src), g.oline = (uint32_t)oline, g.ocol = (uint32_t)ocol;
    }
    if (nf == 5) {
      name += f[4];
      if (name < 0 || (uint64_t)name >= nname)
        return refuse(p, EMBER_SOURCEMAP_OUT_OF_RANGE,
                      "a segment before byte %zu names name %" PRId64 " of %zu", at, name, nname);
      g.name = (uint32_t)(name0 + (size_t)name);
    }
    if (sm->nsegs >= p->lim.max_segments)
      return refuse(p, EMBER_SOURCEMAP_TOO_MANY, "over %zu segments", p->lim.max_segments);
    if (ember__grow(&sm->segs, &sm->capsegs, sm->nsegs + 1, sizeof *sm->segs) != 0) return -ENOMEM;
    if (sm->nsegs > 0) {
      const seg_t *last = &sm->segs[sm->nsegs - 1];
      if (last->line > g.line || (last->line == g.line && last->col > g.col)) sm->sorted = false;
    }
    sm->segs[sm->nsegs++] = g;
  }
  return 0;
}

/* One map (not an index map) at generated (line0, col0). */
static int add_map(parse_t *p, json_t *map, int64_t line0, int64_t col0) {
  json_t *v = json_object_get(map, "version");
  if (!json_is_integer(v) || json_integer_value(v) != 3)
    return refuse(p, EMBER_SOURCEMAP_NOT_V3, "version is not 3");
  json_t *m = json_object_get(map, "mappings");
  if (!json_is_string(m)) return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "mappings is not a string");
  size_t src0 = p->sm->nsrc, name0 = p->sm->nname;
  int rc = add_tables(p, map);
  if (rc != 0) return rc;
  return decode(p, json_string_value(m), json_string_length(m), line0, col0, src0, name0);
}

static int add_sections(parse_t *p, json_t *sections) {
  if (!json_is_array(sections))
    return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "sections is not an array");
  size_t n = json_array_size(sections);
  if (n > p->lim.max_sections)
    return refuse(p, EMBER_SOURCEMAP_TOO_MANY, "%zu sections, over %zu", n, p->lim.max_sections);
  for (size_t i = 0; i < n; i++) {
    json_t *s = json_array_get(sections, i);
    json_t *off = json_object_get(s, "offset"), *map = json_object_get(s, "map");
    json_t *line = json_object_get(off, "line"), *col = json_object_get(off, "column");
    if (json_object_get(s, "url") != NULL)
      return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "section %zu points at a url (not read)", i);
    if (!json_is_integer(line) || !json_is_integer(col) || !json_is_object(map))
      return refuse(p, EMBER_SOURCEMAP_BAD_FIELD,
                    "section %zu has no offset {line, column} and map", i);
    json_int_t l = json_integer_value(line), c = json_integer_value(col);
    if (l < 0 || l > MAX_POS || c < 0 || c > MAX_POS)
      return refuse(p, EMBER_SOURCEMAP_OUT_OF_RANGE,
                    "section %zu is at line %" JSON_INTEGER_FORMAT " column %" JSON_INTEGER_FORMAT,
                    i, l, c);
    if (json_object_get(map, "sections") != NULL)
      return refuse(p, EMBER_SOURCEMAP_BAD_FIELD, "section %zu is an index map itself", i);
    int rc = add_map(p, map, (int64_t)l, (int64_t)c);
    if (rc != 0) return rc;
  }
  return 0;
}

static int seg_cmp(const void *a, const void *b) {
  const seg_t *x = a, *y = b;
  if (x->line != y->line) return x->line < y->line ? -1 : 1;
  return (x->col > y->col) - (x->col < y->col);
}

int ember_sourcemap_parse(const char *data, size_t len, const ember_sourcemap_limits_t *limits,
                          ember_sourcemap_t **out, ember_sourcemap_error_t *err) {
  return ember_sourcemap_parse_at(data, len, limits, NULL, out, err);
}

int ember_sourcemap_parse_at(const char *data, size_t len, const ember_sourcemap_limits_t *limits,
                             const char *base, ember_sourcemap_t **out,
                             ember_sourcemap_error_t *err) {
  if (out == NULL || (data == NULL && len > 0) || (base != NULL && base[0] != '/')) return -EINVAL;
  *out = NULL;
  if (err != NULL) *err = (ember_sourcemap_error_t){0};
  parse_t p = {.err = err, .base = base};
  if (limits != NULL) p.lim = *limits;
  if (p.lim.max_bytes == 0) p.lim.max_bytes = EMBER_SOURCEMAP_MAX_BYTES;
  if (p.lim.max_segments == 0) p.lim.max_segments = EMBER_SOURCEMAP_MAX_SEGMENTS;
  if (p.lim.max_strings == 0) p.lim.max_strings = EMBER_SOURCEMAP_MAX_STRINGS;
  if (p.lim.max_string == 0) p.lim.max_string = EMBER_SOURCEMAP_MAX_STRING;
  if (p.lim.max_sections == 0) p.lim.max_sections = EMBER_SOURCEMAP_MAX_SECTIONS;
  if (len > p.lim.max_bytes)
    return refuse(&p, EMBER_SOURCEMAP_TOO_BIG, "the map is %zu bytes, over %" PRIu64, len,
                  p.lim.max_bytes);
  json_error_t je;
  json_t *root = json_loadb(data ? data : "", len, 0, &je);
  if (root == NULL)
    return refuse(&p, EMBER_SOURCEMAP_NOT_JSON, "not JSON: %s at byte %d", je.text, je.position);
  int rc;
  if (!json_is_object(root)) {
    rc = refuse(&p, EMBER_SOURCEMAP_NOT_JSON, "not a JSON object");
    goto done;
  }
  p.sm = ember_calloc(1, sizeof *p.sm);
  if (p.sm == NULL) {
    rc = -ENOMEM;
    goto done;
  }
  p.sm->sorted = true;
  ember_buf_init(&p.sm->blob, SIZE_MAX - 1);
  json_t *sections = json_object_get(root, "sections");
  if (sections != NULL && !json_is_null(sections)) {
    json_t *v = json_object_get(root, "version");
    rc = !json_is_integer(v) || json_integer_value(v) != 3
             ? refuse(&p, EMBER_SOURCEMAP_NOT_V3, "version is not 3")
             : add_sections(&p, sections);
  } else {
    rc = add_map(&p, root, 0, 0);
  }
  if (rc != 0) goto done;
  if (!p.sm->sorted) qsort(p.sm->segs, p.sm->nsegs, sizeof *p.sm->segs, seg_cmp);
  if (p.sm->nsegs > 0 && p.sm->nsegs < p.sm->capsegs) { /* give back the doubling's slack */
    seg_t *s = ember_realloc(p.sm->segs, p.sm->nsegs * sizeof *s);
    if (s != NULL) p.sm->segs = s, p.sm->capsegs = p.sm->nsegs;
  }
  *out = p.sm;
  p.sm = NULL;
done:
  ember_sourcemap_free(p.sm);
  json_decref(root);
  if (rc == -ENOMEM && err != NULL) *err = (ember_sourcemap_error_t){0};
  return rc;
}

void ember_sourcemap_free(ember_sourcemap_t *sm) {
  if (sm == NULL) return;
  ember_free(sm->segs);
  ember_free(sm->src_off);
  ember_free(sm->name_off);
  ember_buf_free(&sm->blob);
  ember_free(sm);
}

/* --- lookups --- */

/* Index of the last segment at or before (line, col) on `line`, or SIZE_MAX. */
static size_t covering(const ember_sourcemap_t *sm, uint32_t line, uint32_t col) {
  size_t lo = 0, hi = sm->nsegs; /* first segment after (line, col) */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const seg_t *s = &sm->segs[mid];
    if (s->line < line || (s->line == line && s->col <= col))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0 || sm->segs[lo - 1].line != line) return SIZE_MAX;
  return lo - 1;
}

static const char *str_at(const ember_sourcemap_t *sm, size_t off) {
  return off == SIZE_MAX ? NULL : sm->blob.data + off;
}

static bool pos_of(const ember_sourcemap_t *sm, size_t i, ember_sourcemap_pos_t *out) {
  const seg_t *s = &sm->segs[i];
  if (s->src == NONE) return false;
  *out = (ember_sourcemap_pos_t){.source = str_at(sm, sm->src_off[s->src]),
                                 .name = s->name == NONE ? NULL : str_at(sm, sm->name_off[s->name]),
                                 .line = s->oline + 1,
                                 .column = s->ocol + 1};
  return true;
}

bool ember_sourcemap_find(const ember_sourcemap_t *sm, uint32_t line, uint32_t column,
                          ember_sourcemap_pos_t *out) {
  if (sm == NULL || out == NULL) return false;
  size_t i = covering(sm, line, column);
  return i != SIZE_MAX && pos_of(sm, i, out);
}

/* What may sit between a function's name and its parameters beyond the
 * name itself: " = async function* (" and the like. */
#define NAME_SLACK 24u

bool ember_sourcemap_function(const ember_sourcemap_t *sm, uint32_t line, uint32_t column,
                              size_t name_len, ember_sourcemap_pos_t *out) {
  if (sm == NULL || out == NULL || line == 0 || column == 0) return false;
  uint32_t l = line - 1, c = column - 1;
  size_t i = covering(sm, l, c);
  if (i == SIZE_MAX || !pos_of(sm, i, out)) return false;
  out->name = NULL;
  if (name_len == 0) return true; /* anonymous: no name to find */
  /* The name is the token right before the parameters, never at them
   * (`n=>`: the segment at the position is the parameter's); a token
   * there that names nothing (`meth(`, `function (`) kept its name. */
  size_t j = sm->segs[i].col < c ? i : i - 1;
  if (sm->segs[i].col >= c && i == 0) return true;
  const seg_t *s = &sm->segs[j];
  if (s->line == l && s->name != NONE && (uint64_t)s->col + name_len + NAME_SLACK >= c)
    out->name = str_at(sm, sm->name_off[s->name]);
  return true;
}

bool ember_sourcemap_source_is_relative(const char *source) {
  return source != NULL && source[0] != '/' && !has_scheme(source);
}

size_t ember_sourcemap_segments(const ember_sourcemap_t *sm) { return sm ? sm->nsegs : 0; }

size_t ember_sourcemap_memory(const ember_sourcemap_t *sm) {
  if (sm == NULL) return 0;
  return sizeof *sm + sm->capsegs * sizeof *sm->segs + sm->capsrc * sizeof *sm->src_off +
         sm->capname * sizeof *sm->name_off + sm->blob.cap;
}
