/* Wire v2 to a view (ember_wire_decode) and a view to a profile
 * (ember_wire_to_profile), include/ember/wire.h.
 *
 * protobuf-c unpacks the message into a per-message arena (about twenty
 * arrays and the string blob); the view points into it, with the string
 * offsets and the stack offsets computed once, front-coded strings
 * rebuilt and every location and stack keyed (wire_key.c). Checks follow
 * the header: everything but the strings' text, which the readers check
 * (the store only for content it has not seen), and the hashes sent, which
 * ember_wire_check_hashes checks. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "codec_internal.h"
#include "ember/wire.h"
#include "ember_v2.pb-c.h"

typedef Ember__Wire__V2__Profile v2_t;

typedef struct decoded {
  ember__wire_mem_t mem;
  ember_wire_t w;
  ember__arena_t arena; /* the unpacked message, and the offsets */
} decoded_t;

static void decoded_release(ember__wire_mem_t *m) {
  decoded_t *d = (decoded_t *)m;
  ember__arena_release(&d->arena);
  ember_free(d);
}

void ember_wire_free(ember_wire_t *w) {
  if (w == NULL) return;
  ember__wire_mem_t *m = w->priv;
  m->release(m);
}

uint32_t ember_wire_peek_version(const void *data, size_t len) {
  const unsigned char *p = data;
  if (p == NULL || len < 2 || p[0] != 0x08) return 0; /* field 1, varint */
  uint64_t v = 0;
  for (size_t i = 1; i < len && i < 11; i++) {
    v |= (uint64_t)(p[i] & 0x7f) << (7 * (i - 1));
    if (!(p[i] & 0x80)) return v > UINT32_MAX ? 0 : (uint32_t)v;
  }
  return 0;
}

/* out[i] = d[0] + ... + d[i]; the index of the first sum outside
 * [0, UINT32_MAX], or SIZE_MAX when there is none. */
static size_t undelta32(const int32_t *d, size_t n, uint32_t *out) {
  int64_t v = 0; /* n is bounded by the message size: no overflow */
  for (size_t i = 0; i < n; i++) {
    v += d[i];
    if (v < 0 || v > (int64_t)UINT32_MAX) return i;
    out[i] = (uint32_t)v;
  }
  return SIZE_MAX;
}

static const char *text_or_null(const char *s) { return s == NULL || s[0] == '\0' ? NULL : s; }

#define FAIL(rc, ...) ember__codec_fail((rc), errbuf, errbuf_size, __VA_ARGS__)

static int index_fail(uint32_t idx, size_t n, const char *what, size_t i, char *errbuf,
                      size_t errbuf_size) {
  return FAIL(EMBER_ECORRUPT, "%s %zu: string index %u out of range (have %zu strings)", what, i,
              idx, n);
}

static int check_index(uint32_t idx, size_t n, const char *what, size_t i, char *errbuf,
                       size_t errbuf_size) {
  if (idx == 0 || idx < n) return 0;
  return index_fail(idx, n, what, i, errbuf, errbuf_size);
}

/* The largest of v[0..n), 0 for none. Columns are checked by their
 * largest entry, in four independent lanes without branches (a few
 * thousand entries a window); the loops that name the first bad entry run
 * only when one is out of range. */
static uint32_t max32(const uint32_t *v, size_t n) {
  uint32_t m[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t k = 0; k < 4; k++) m[k] = v[i + k] > m[k] ? v[i + k] : m[k];
  for (; i < n; i++) m[0] = v[i] > m[0] ? v[i] : m[0];
  uint32_t a = m[0] > m[1] ? m[0] : m[1], b = m[2] > m[3] ? m[2] : m[3];
  return a > b ? a : b;
}

/* Is every string index of the columns below `ns` (or 0, "none")? */
static bool indices_ok(size_t ns, const uint32_t *const *cols, const size_t *n, size_t ncols) {
  uint32_t top = 0;
  for (size_t c = 0; c < ncols; c++) {
    uint32_t x = max32(cols[c], n[c]);
    top = x > top ? x : top;
  }
  return top == 0 || top < ns;
}

/* Copies of the front-coded strings' pieces, most shorter than a line:
 * in blocks of RUN bytes rather than a call to memcpy each (two per
 * string, ~1,400 a window). A block may write up to RUN - 1 bytes past
 * the piece, so the rebuilt blob has RUN bytes to spare; pieces are
 * written in order, so what a block writes past its piece is written over
 * by the pieces after it. Each block is loaded whole before it is stored,
 * so a prefix may be read from the string just before, whose end the
 * block's store may overlap. Reads past the piece stay inside the rebuilt
 * blob, or inside the message's blob (`end`; NULL for the rebuilt one),
 * which near its end is copied by memcpy instead. */
enum { RUN = 16 };

static inline void copy_run(char *dst, const char *src, size_t n, const char *end) {
  if (end != NULL && (size_t)(end - src) < n + RUN) {
    if (n) memcpy(dst, src, n);
    return;
  }
  for (size_t k = 0; k < n; k += RUN) {
    unsigned char b[RUN];
    memcpy(b, src + k, RUN);
    memcpy(dst + k, b, RUN);
  }
}

/* Everything of `m` but the blob's bytes and the hashes; fills the view. */
static int check(const v2_t *m, const ember_codec_limits_t *lim, ember__arena_t *a, ember_wire_t *w,
                 char *errbuf, size_t errbuf_size) {
  int rc;
  if (m->version != EMBER_WIRE_V2)
    return FAIL(EMBER_EVERSION, "schema version %u is not 2", m->version);
  if (m->end_mark != EMBER__WIRE_END_MARK)
    return FAIL(EMBER_ECORRUPT, "message is truncated or not an Ember profile (no end mark)");
  if (m->window_end_ns < m->window_start_ns)
    return FAIL(EMBER_ECORRUPT, "window ends (%lld) before it starts (%lld)",
                (long long)m->window_end_ns, (long long)m->window_start_ns);
  if (m->period_ns < 0)
    return FAIL(EMBER_ECORRUPT, "negative sampling period %lld", (long long)m->period_ns);
  if (m->n_value_types == 0 || m->n_value_types > EMBER_MAX_VALUE_TYPES)
    return FAIL(EMBER_ECORRUPT, "%zu value types (need 1 to %d)", m->n_value_types,
                EMBER_MAX_VALUE_TYPES);
  for (size_t i = 0; i < m->n_value_types; i++) {
    uint32_t vt = m->value_types[i];
    if (vt > EMBER_MAX_VALUE_TYPES || ember_value_type_name((ember_value_type_t)vt) == NULL)
      return FAIL(EMBER_ECORRUPT, "value type %zu: unknown type %u", i, vt);
    for (size_t j = 0; j < i; j++)
      if (m->value_types[j] == vt)
        return FAIL(EMBER_ECORRUPT, "value type %zu repeats type %u", i, vt);
    w->types[i] = (ember_value_type_t)vt;
  }
  w->ntypes = m->n_value_types;
  const char *texts[] = {m->agent_id,       m->session_id, m->worker,
                         m->worker_version, m->host,       m->actor};
  static const char *const names[] = {"agent id", "session id", "label", "label", "label", "label"};
  for (size_t i = 0; i < 6; i++)
    if ((rc = ember__codec_check_text(texts[i], names[i], i < 2 ? 0 : i - 2, errbuf,
                                      errbuf_size)) != 0)
      return rc;

  /* Strings: lengths within the limits and adding up to the blob. */
  size_t ns = m->n_string_lengths;
  if (ns > lim->max_strings)
    return FAIL(EMBER_ETOOBIG, "%zu strings (at most %zu)", ns, lim->max_strings);
  if (ns > 0 && m->string_lengths[0] != 0) return FAIL(EMBER_ECORRUPT, "string 0 must be empty");
  const uint32_t *pre = m->n_string_prefix != 0 ? m->string_prefix : NULL;
  if (pre != NULL && m->n_string_prefix != ns)
    return FAIL(EMBER_ECORRUPT, "%zu string prefixes for %zu strings", m->n_string_prefix, ns);
  uint32_t *off = ember__arena_alloc(a, (ns ? ns : 1) * sizeof *off);
  uint32_t *len = pre == NULL ? NULL : ember__arena_alloc(a, (ns ? ns : 1) * sizeof *len);
  if (off == NULL || (pre != NULL && len == NULL))
    return FAIL(-ENOMEM, "out of memory while decoding");
  uint64_t total = 0, full = 0; /* the blob's bytes; the strings' */
  for (size_t i = 0; i < ns; i++) {
    uint64_t n = m->string_lengths[i];
    if (pre != NULL) {
      if (pre[i] > (i ? len[i - 1] : 0))
        return FAIL(EMBER_ECORRUPT, "string %zu: a prefix of %u bytes of a string of %u", i, pre[i],
                    i ? len[i - 1] : 0);
      n += pre[i];
    }
    if (n > EMBER_MAX_STRING)
      return FAIL(EMBER_ETOOBIG, "string %zu: %llu bytes (at most %u)", i, (unsigned long long)n,
                  EMBER_MAX_STRING);
    if (pre != NULL) len[i] = (uint32_t)n;
    off[i] = (uint32_t)full;
    full += n;
    total += m->string_lengths[i];
    if (total > m->strings.len) break;
  }
  if (total != m->strings.len)
    return FAIL(EMBER_ECORRUPT, "string lengths add up to %s%llu bytes, the blob has %zu",
                total > m->strings.len ? "more than " : "", (unsigned long long)total,
                m->strings.len);
  /* An empty blob may come as no pointer at all: readers add offsets to
   * it, which NULL does not allow even for 0. */
  const char *data = m->strings.data ? (const char *)m->strings.data : "";
  if (pre == NULL) {
    w->blob = data;
    w->str_len = m->string_lengths;
  } else {
    /* Front-coded: each string is rebuilt after the one before, from
     * which it takes its prefix. Prefixes can make the strings far longer
     * than the message; they may take as much as a message may. */
    if (full > lim->max_message)
      return FAIL(EMBER_ETOOBIG,
                  "strings of %llu bytes once their prefixes are restored (at most %zu)",
                  (unsigned long long)full, lim->max_message);
    char *blob = ember__arena_alloc(a, full + RUN);
    if (blob == NULL) return FAIL(-ENOMEM, "out of memory while decoding");
    const char *src = data, *src_end = data + m->strings.len;
    for (size_t i = 1; i < ns; i++) {
      char *dst = blob + off[i];
      copy_run(dst, blob + off[i - 1], pre[i], NULL);
      size_t n = m->string_lengths[i];
      copy_run(dst + pre[i], src, n, src_end);
      src += n;
    }
    w->blob = blob;
    w->str_len = len;
  }
  w->str_off = off;
  w->nstrings = ns;

  /* Modules and functions. */
  if (m->n_module_name != m->n_module_build_id)
    return FAIL(EMBER_ECORRUPT, "%zu module names for %zu build ids", m->n_module_name,
                m->n_module_build_id);
  if (m->n_function_name != m->n_function_file)
    return FAIL(EMBER_ECORRUPT, "%zu function names for %zu files", m->n_function_name,
                m->n_function_file);
  if (m->n_function_generated != 0 && m->n_function_generated != m->n_function_name)
    return FAIL(EMBER_ECORRUPT, "%zu function names for %zu generated names", m->n_function_name,
                m->n_function_generated);
  uint32_t *fnn = ember__arena_alloc(a, (m->n_function_name ? m->n_function_name : 1) * 4);
  if (fnn == NULL) return FAIL(-ENOMEM, "out of memory while decoding");
  size_t bad = undelta32(m->function_name, m->n_function_name, fnn);
  if (bad != SIZE_MAX) return FAIL(EMBER_ECORRUPT, "function %zu: name index out of range", bad);
  const uint32_t *idx_cols[] = {m->module_name, m->module_build_id, fnn, m->function_file,
                                m->function_generated};
  const size_t idx_n[] = {m->n_module_name, m->n_module_name, m->n_function_name,
                          m->n_function_name, m->n_function_generated};
  if (!indices_ok(ns, idx_cols, idx_n, 5)) {
    for (size_t i = 0; i < m->n_module_name; i++)
      if ((rc = check_index(m->module_name[i], ns, "module", i, errbuf, errbuf_size)) ||
          (rc = check_index(m->module_build_id[i], ns, "module", i, errbuf, errbuf_size)))
        return rc;
    for (size_t i = 0; i < m->n_function_name; i++)
      if ((rc = check_index(fnn[i], ns, "function", i, errbuf, errbuf_size)) ||
          (rc = check_index(m->function_file[i], ns, "function", i, errbuf, errbuf_size)) ||
          (m->n_function_generated != 0 &&
           (rc = check_index(m->function_generated[i], ns, "function", i, errbuf, errbuf_size))))
        return rc;
  }
  w->mod_name = m->module_name;
  w->mod_build_id = m->module_build_id;
  w->nmodules = m->n_module_name;
  w->fn_name = fnn;
  w->fn_file = m->function_file;
  w->fn_generated = m->n_function_generated != 0 ? m->function_generated : NULL;
  w->nfunctions = m->n_function_name;

  /* Locations. */
  size_t nl = m->n_location_function;
  if (nl > lim->max_locations)
    return FAIL(EMBER_ETOOBIG, "%zu locations (at most %zu)", nl, lim->max_locations);
  if (m->n_location_module != nl || m->n_location_address != nl || m->n_location_line != nl ||
      m->n_location_kind != nl || (m->n_location_hash != nl && m->n_location_hash != 0))
    return FAIL(EMBER_ECORRUPT,
                "location columns of different lengths (%zu functions, %zu modules, %zu "
                "addresses, %zu lines, %zu kinds, %zu hashes)",
                nl, m->n_location_module, m->n_location_address, m->n_location_line,
                m->n_location_kind, m->n_location_hash);
  uint32_t *lf = ember__arena_alloc(a, (nl ? nl : 1) * sizeof *lf);
  uint64_t *la = ember__arena_alloc(a, (nl ? nl : 1) * sizeof *la);
  if (lf == NULL || la == NULL) return FAIL(-ENOMEM, "out of memory while decoding");
  if ((bad = undelta32(m->location_function, nl, lf)) != SIZE_MAX)
    return FAIL(EMBER_ECORRUPT, "location %zu: function index out of range", bad);
  uint64_t addr = 0;
  for (size_t i = 0; i < nl; i++) la[i] = addr += (uint64_t)m->location_address[i];
  if (max32(lf, nl) > w->nfunctions || max32(m->location_module, nl) > w->nmodules ||
      max32(m->location_kind, nl) > EMBER_FRAME_KIND_MAX) {
    for (size_t i = 0; i < nl; i++) {
      if (lf[i] > w->nfunctions)
        return FAIL(EMBER_ECORRUPT, "location %zu: function %u out of range (have %zu functions)",
                    i, lf[i], w->nfunctions);
      if (m->location_module[i] > w->nmodules)
        return FAIL(EMBER_ECORRUPT, "location %zu: module %u out of range (have %zu modules)", i,
                    m->location_module[i], w->nmodules);
      if (m->location_kind[i] > EMBER_FRAME_KIND_MAX)
        return FAIL(EMBER_ECORRUPT, "location %zu: unknown frame kind %u", i, m->location_kind[i]);
    }
  }
  w->loc_function = lf;
  w->loc_module = m->location_module;
  w->loc_address = la;
  w->loc_line = m->location_line;
  w->loc_kind = m->location_kind;
  w->nlocations = nl;

  /* Samples: depths within the limit and adding up to the locations. */
  size_t nsamp = m->n_sample_depth;
  if (nsamp > lim->max_samples)
    return FAIL(EMBER_ETOOBIG, "%zu samples (at most %zu)", nsamp, lim->max_samples);
  if (m->n_stack_hash != nsamp && m->n_stack_hash != 0)
    return FAIL(EMBER_ECORRUPT, "%zu stack hashes for %zu samples", m->n_stack_hash, nsamp);
  if (m->n_sample_values / w->ntypes != nsamp || m->n_sample_values % w->ntypes != 0)
    return FAIL(EMBER_ECORRUPT, "%zu values for %zu samples of %zu value types", m->n_sample_values,
                nsamp, w->ntypes);
  size_t max_depth =
      lim->max_depth < EMBER_MAX_STACK_DEPTH ? lim->max_depth : EMBER_MAX_STACK_DEPTH;
  uint32_t *soff = ember__arena_alloc(a, (nsamp ? nsamp : 1) * sizeof *soff);
  unsigned char *used = ember__arena_alloc(a, nl ? nl : 1);
  size_t nsl = m->n_sample_locations;
  uint32_t *sl = ember__arena_alloc(a, (nsl ? nsl : 1) * sizeof *sl);
  if (soff == NULL || used == NULL || sl == NULL)
    return FAIL(-ENOMEM, "out of memory while decoding");
  if ((bad = undelta32(m->sample_locations, nsl, sl)) != SIZE_MAX)
    return FAIL(EMBER_ECORRUPT, "sample location %zu: index out of range", bad);
  memset(used, 0, nl);
  bool sl_bad = nsl != 0 && max32(sl, nsl) >= nl;
  size_t at = 0;
  for (size_t i = 0; i < nsamp; i++) {
    uint32_t d = m->sample_depth[i];
    if (d == 0 || d > max_depth)
      return FAIL(d ? EMBER_ETOOBIG : EMBER_ECORRUPT,
                  "sample %zu: stack of %u frames (need 1 to %zu)", i, d, max_depth);
    if (d > m->n_sample_locations - at)
      return FAIL(EMBER_ECORRUPT, "sample %zu: its %u frames run past the %zu locations sent", i, d,
                  m->n_sample_locations);
    soff[i] = (uint32_t)at; /* n_sample_locations fits: it is below the message size */
    for (size_t j = at; sl_bad && j < at + d; j++)
      if (sl[j] >= nl)
        return FAIL(EMBER_ECORRUPT,
                    "sample %zu: location index %u out of range (have %zu locations)", i, sl[j],
                    nl);
    for (size_t j = at; j < at + d; j++) used[sl[j]] = 1;
    at += d;
  }
  if (at != m->n_sample_locations)
    return FAIL(EMBER_ECORRUPT, "%zu sample locations sent, the depths add up to %zu",
                m->n_sample_locations, at);
  int64_t any = 0; /* negative when one is */
  for (size_t i = 0; i < m->n_sample_values; i++) any |= m->sample_values[i];
  for (size_t i = 0; any < 0 && i < m->n_sample_values; i++)
    if (m->sample_values[i] < 0)
      return FAIL(EMBER_ECORRUPT, "sample %zu: negative value %lld", i / w->ntypes,
                  (long long)m->sample_values[i]);
  for (size_t i = 0; i < nl; i++)
    if (!used[i]) return FAIL(EMBER_ECORRUPT, "location %zu is used by no sample", i);
  w->depth = m->sample_depth;
  w->stack_off = soff;
  w->locs = sl;
  w->values = m->sample_values;
  w->nsamples = nsamp;
  w->nlocs = at;

  /* Every location's and stack's key, once. The hashes an older writer
   * sent are kept as they came, for ember_wire_check_hashes. */
  uint64_t *lk = ember__arena_alloc(a, (nl ? nl : 1) * sizeof *lk);
  uint64_t *sk = ember__arena_alloc(a, (nsamp ? nsamp : 1) * sizeof *sk);
  if (lk == NULL || sk == NULL) return FAIL(-ENOMEM, "out of memory while decoding");
  if (ember__wire_key_locations(w, lk) != 0) return FAIL(-ENOMEM, "out of memory while decoding");
  for (size_t i = 0; i < nsamp; i++) sk[i] = ember__wire_stack_key_of(w, lk, i);
  w->loc_key = lk;
  w->stack_key = sk;
  w->loc_hash = m->n_location_hash != 0 ? m->location_hash : NULL;
  w->stack_hash = m->n_stack_hash != 0 ? m->stack_hash : NULL;
  w->hashes_checked = w->loc_hash == NULL && w->stack_hash == NULL;

  w->version = m->version;
  w->agent_id = text_or_null(m->agent_id);
  w->session_id = text_or_null(m->session_id);
  w->seq = m->seq;
  w->labels = (ember_labels_t){.worker = text_or_null(m->worker),
                               .version = text_or_null(m->worker_version),
                               .host = text_or_null(m->host),
                               .actor = text_or_null(m->actor),
                               .pid = m->pid};
  w->start_ns = m->window_start_ns;
  w->end_ns = m->window_end_ns;
  w->period_ns = m->period_ns;
  return 0;
}

int ember_wire_decode(const void *data, size_t len, const ember_codec_limits_t *lim,
                      ember_wire_t **out, char *errbuf, size_t errbuf_size) {
  if ((data == NULL && len > 0) || out == NULL) return -EINVAL;
  ember_codec_limits_t dflt;
  if (lim == NULL) {
    ember_codec_limits_default(&dflt);
    lim = &dflt;
  }
  uint32_t version = ember_wire_peek_version(data, len);
  if (version > EMBER_WIRE_V2)
    return FAIL(EMBER_EVERSION, "schema version %u is not supported (this build reads 1 and 2)",
                version);
  if (version != EMBER_WIRE_V2)
    return ember__codec_decode_v1_view(data, len, lim, out, errbuf, errbuf_size);
  if (len > lim->max_message)
    return FAIL(EMBER_ETOOBIG, "message of %zu bytes (at most %zu)", len, lim->max_message);
  decoded_t *d = ember_calloc(1, sizeof *d);
  if (d == NULL) return FAIL(-ENOMEM, "out of memory while decoding");
  d->mem.release = decoded_release;
  d->w.priv = &d->mem;
  /* The arrays take about what their encoding takes, varints widened. */
  d->arena.next_size = len * 3 + 4096;
  ProtobufCAllocator alloc = {ember__arena_alloc, ember__arena_free, &d->arena};
  v2_t *m = ember__wire__v2__profile__unpack(&alloc, len, data);
  int rc;
  if (m == NULL)
    rc = FAIL(EMBER_ECORRUPT, "not a valid ember.wire.v2.Profile message (%zu bytes)", len);
  else
    rc = check(m, lim, &d->arena, &d->w, errbuf, errbuf_size);
  if (rc != 0) {
    decoded_release(&d->mem);
    return rc;
  }
  *out = &d->w;
  return 0;
}

/* ---- to a profile ------------------------------------------------------ */

/* Not the ingest path (that is the store's): each location is checked on
 * its own, so a string that many locations share is checked and hashed
 * again for each. Profiles intern strings, so they are kept once. */
int ember_wire_to_profile(const ember_wire_t *w, ember_profile_t **out, char *errbuf,
                          size_t errbuf_size) {
  if (w == NULL || out == NULL) return -EINVAL;
  ember_profile_t *p = NULL;
  uint32_t *frame_of = NULL; /* profile frame id of each location */
  int rc = ember_profile_new(w->types, w->ntypes, &p);
  if (rc != 0) return FAIL(rc, "cannot make a profile");
  frame_of = ember_calloc(w->nlocations ? w->nlocations : 1, sizeof *frame_of);
  if (frame_of == NULL) {
    rc = FAIL(-ENOMEM, "out of memory while decoding");
    goto cleanup;
  }
  if ((rc = ember_profile_set_labels(p, &w->labels)) != 0 ||
      (rc = ember_profile_set_window(p, w->start_ns, w->end_ns)) != 0 ||
      (rc = ember_profile_set_origin(p, w->agent_id, w->seq, w->session_id)) != 0 ||
      (rc = ember_profile_reserve(p, w->nstrings, w->nlocations, w->nsamples, w->nlocs)) != 0) {
    rc = FAIL(rc, "cannot fill the profile");
    goto cleanup;
  }
  ember_profile_set_period(p, w->period_ns);
  if (!w->hashes_checked && (rc = ember_wire_check_hashes(w, errbuf, errbuf_size)) != 0)
    goto cleanup;
  for (size_t i = 0; i < w->nlocations; i++) {
    if ((rc = ember_wire_check_location(w, i, errbuf, errbuf_size)) != 0) goto cleanup;
    const char *s[EMBER_WIRE_LOC_STRINGS];
    size_t n[EMBER_WIRE_LOC_STRINGS];
    ember_wire_location_strings(w, i, s, n);
    const char *in[EMBER_WIRE_LOC_STRINGS];
    for (int k = 0; k < EMBER_WIRE_LOC_STRINGS; k++) {
      in[k] = NULL;
      if (s[k] == NULL) continue;
      rc = ember_profile_intern_string(p, s[k], n[k], &in[k]);
      if (rc != 0) {
        rc = FAIL(rc, "out of memory while decoding");
        goto cleanup;
      }
    }
    ember_frame_t f = {.function = in[EMBER_WIRE_LOC_FUNCTION],
                       .file = in[EMBER_WIRE_LOC_FILE],
                       .module = in[EMBER_WIRE_LOC_MODULE],
                       .build_id = in[EMBER_WIRE_LOC_BUILD_ID],
                       .generated = in[EMBER_WIRE_LOC_GENERATED],
                       .address = w->loc_address[i],
                       .line = w->loc_line[i],
                       .kind = (ember_frame_kind_t)w->loc_kind[i]};
    if ((rc = ember_profile_intern_frame_interned(p, &f, &frame_of[i])) != 0) {
      rc = FAIL(rc, "out of memory while decoding");
      goto cleanup;
    }
  }
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  for (size_t i = 0; i < w->nsamples; i++) {
    const uint32_t *locs = w->locs + w->stack_off[i];
    for (size_t d = 0; d < w->depth[i]; d++) ids[d] = frame_of[locs[d]];
    rc = ember_profile_add_ids(p, ids, w->depth[i], w->values + i * w->ntypes, NULL);
    if (rc != 0) {
      rc = rc == -ERANGE ? FAIL(EMBER_ECORRUPT, "sample %zu: a value sum would overflow", i)
                         : FAIL(rc, "cannot add sample %zu", i);
      goto cleanup;
    }
  }
  *out = p;
  p = NULL;
  rc = 0;
cleanup:
  ember_free(frame_of);
  ember_profile_free(p);
  return rc;
}
