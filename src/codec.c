/* Wire codec: ember_profile_t <-> ember.wire.v1.Profile (src/proto/ember.proto).
 *
 * Encoding builds the message tables from the profile's interned strings and
 * frames (one location per frame), then packs once into the caller's buffer.
 * Decoding unpacks with protobuf-c through Ember's allocator (so allocation
 * failures are testable), validates the whole message, and only then
 * builds a profile: a message is accepted whole or not at all. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codec_internal.h"
#include "ember.pb-c.h"
#include "ember/codec.h"
#include "ember/wire.h"
#include "htab.h"
#include "ptrtab.h"
#include "utf8.h"

typedef Ember__Wire__V1__Profile wire_profile_t;
typedef Ember__Wire__V1__Location wire_location_t;

_Static_assert((int)EMBER_VT_CPU_SAMPLES == (int)EMBER__WIRE__V1__VALUE_TYPE__CPU_SAMPLES,
               "wire enum");
_Static_assert((int)EMBER_VT_CPU_NS == (int)EMBER__WIRE__V1__VALUE_TYPE__CPU_NS, "wire enum");
_Static_assert((int)EMBER_VT_ALLOC_OBJECTS == (int)EMBER__WIRE__V1__VALUE_TYPE__ALLOC_OBJECTS,
               "wire enum");
_Static_assert((int)EMBER_VT_ALLOC_BYTES == (int)EMBER__WIRE__V1__VALUE_TYPE__ALLOC_BYTES,
               "wire enum");
_Static_assert((int)EMBER_VT_INUSE_OBJECTS == (int)EMBER__WIRE__V1__VALUE_TYPE__INUSE_OBJECTS,
               "wire enum");
_Static_assert((int)EMBER_VT_INUSE_BYTES == (int)EMBER__WIRE__V1__VALUE_TYPE__INUSE_BYTES,
               "wire enum");
_Static_assert((int)EMBER_FRAME_NATIVE == (int)EMBER__WIRE__V1__FRAME_KIND__NATIVE, "wire enum");
_Static_assert((int)EMBER_FRAME_KERNEL == (int)EMBER__WIRE__V1__FRAME_KIND__KERNEL, "wire enum");
_Static_assert((int)EMBER_FRAME_JIT == (int)EMBER__WIRE__V1__FRAME_KIND__JIT, "wire enum");

void ember_codec_limits_default(ember_codec_limits_t *lim) {
  lim->max_message = 16u << 20;
  lim->max_strings = 1u << 20;
  lim->max_locations = 1u << 20;
  lim->max_samples = 1u << 20;
  lim->max_depth = EMBER_MAX_STACK_DEPTH;
}

/* --- encoding --- */

typedef struct encoder {
  ember__ptrtab_t strings, modules, functions;
} encoder_t;

/* String index of `s`; NULL and "" are index 0. */
static int enc_str(encoder_t *e, const char *s, uint32_t *idx) {
  if (s == NULL || s[0] == '\0') {
    *idx = 0;
    return 0;
  }
  return ember__ptrtab_get(&e->strings, s, NULL, NULL, idx);
}

int ember_codec_encode(const ember_profile_t *p, ember_buf_t *out) {
  if (p == NULL || out == NULL) return -EINVAL;
  int rc = -ENOMEM;
  encoder_t e;
  memset(&e, 0, sizeof e);
  size_t nframes = ember_profile_nframes(p), nstacks = ember_profile_nstacks(p);
  size_t ntypes = ember_profile_ntypes(p);
  wire_profile_t msg;
  Ember__Wire__V1__Labels labels;
  Ember__Wire__V1__ValueType types[EMBER_MAX_VALUE_TYPES];
  wire_location_t *locs = NULL;
  wire_location_t **loc_ptrs = NULL;
  Ember__Wire__V1__Module *mods = NULL;
  Ember__Wire__V1__Module **mod_ptrs = NULL;
  Ember__Wire__V1__Function *fns = NULL;
  Ember__Wire__V1__Function **fn_ptrs = NULL;
  Ember__Wire__V1__Sample *samples = NULL;
  Ember__Wire__V1__Sample **sample_ptrs = NULL;
  char **strings = NULL;

  /* The generated __init functions, not the INIT macros: the macros cast
   * const away from protobuf_c_empty_string, which -Wcast-qual rejects. */
  ember__wire__v1__profile__init(&msg);
  ember__wire__v1__labels__init(&labels);

  /* Entry 0 of the string table is "". */
  if (ember__ptrtab_get(&e.strings, "", NULL, NULL, &(uint32_t){0}) != 0) goto cleanup;

  if (nframes > 0) {
    locs = ember_calloc(nframes, sizeof *locs);
    loc_ptrs = ember_calloc(nframes, sizeof *loc_ptrs);
    if (locs == NULL || loc_ptrs == NULL) goto cleanup;
  }
  for (uint32_t i = 0; i < nframes; i++) {
    const ember_frame_t *f = ember_profile_frame(p, i);
    ember__wire__v1__location__init(&locs[i]);
    loc_ptrs[i] = &locs[i];
    uint32_t a, b, c, idx;
    if (f->module != NULL || f->build_id != NULL) {
      if (enc_str(&e, f->module, &a) != 0 || enc_str(&e, f->build_id, &b) != 0 ||
          ember__ptrtab_get(&e.modules, f->module, f->build_id, NULL, &idx) != 0)
        goto cleanup;
      locs[i].module = idx + 1;
    }
    /* A frame may have a file and no function name (the wire allows a
     * function entry whose name is ""), so any one makes an entry. */
    if (f->function != NULL || f->file != NULL || f->generated != NULL) {
      if (enc_str(&e, f->function, &a) != 0 || enc_str(&e, f->file, &b) != 0 ||
          enc_str(&e, f->generated, &c) != 0 ||
          ember__ptrtab_get(&e.functions, f->function, f->file, f->generated, &idx) != 0)
        goto cleanup;
      locs[i].function = idx + 1;
    }
    locs[i].address = f->address;
    locs[i].line = f->line;
    locs[i].kind = (Ember__Wire__V1__FrameKind)f->kind;
  }

  mods = ember_calloc(e.modules.n, sizeof *mods);
  mod_ptrs = ember_calloc(e.modules.n, sizeof *mod_ptrs);
  fns = ember_calloc(e.functions.n, sizeof *fns);
  fn_ptrs = ember_calloc(e.functions.n, sizeof *fn_ptrs);
  if (mods == NULL || mod_ptrs == NULL || fns == NULL || fn_ptrs == NULL) goto cleanup;
  for (size_t i = 0; i < e.modules.n; i++) {
    ember__wire__v1__module__init(&mods[i]);
    /* Already in the string table, so these lookups cannot allocate. */
    if (enc_str(&e, ember__ptrtab_key(&e.modules, i, 0), &mods[i].name) != 0 ||
        enc_str(&e, ember__ptrtab_key(&e.modules, i, 1), &mods[i].build_id) != 0)
      goto cleanup;
    mod_ptrs[i] = &mods[i];
  }
  for (size_t i = 0; i < e.functions.n; i++) {
    ember__wire__v1__function__init(&fns[i]);
    if (enc_str(&e, ember__ptrtab_key(&e.functions, i, 0), &fns[i].name) != 0 ||
        enc_str(&e, ember__ptrtab_key(&e.functions, i, 1), &fns[i].file) != 0 ||
        enc_str(&e, ember__ptrtab_key(&e.functions, i, 2), &fns[i].generated) != 0)
      goto cleanup;
    fn_ptrs[i] = &fns[i];
  }

  if (nstacks > 0) {
    samples = ember_calloc(nstacks, sizeof *samples);
    sample_ptrs = ember_calloc(nstacks, sizeof *sample_ptrs);
    if (samples == NULL || sample_ptrs == NULL) goto cleanup;
  }
  for (uint32_t s = 0; s < nstacks; s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *values;
    ember_profile_stack(p, s, &ids, &depth, &values);
    ember__wire__v1__sample__init(&samples[s]);
    /* protobuf-c does not write through these pointers when packing. */
    samples[s].n_locations = depth;
    samples[s].locations = (uint32_t *)(uintptr_t)ids;
    samples[s].n_values = ntypes;
    samples[s].values = (int64_t *)(uintptr_t)values;
    sample_ptrs[s] = &samples[s];
  }

  strings = ember_calloc(e.strings.n, sizeof *strings);
  if (strings == NULL) goto cleanup;
  for (size_t i = 0; i < e.strings.n; i++)
    strings[i] = (char *)(uintptr_t)ember__ptrtab_key(&e.strings, i, 0);

  const ember_labels_t *l = ember_profile_labels(p);
  labels.worker = (char *)(uintptr_t)(l->worker ? l->worker : "");
  labels.version = (char *)(uintptr_t)(l->version ? l->version : "");
  labels.host = (char *)(uintptr_t)(l->host ? l->host : "");
  labels.actor = (char *)(uintptr_t)(l->actor ? l->actor : "");
  labels.pid = l->pid;

  for (size_t i = 0; i < ntypes; i++)
    types[i] = (Ember__Wire__V1__ValueType)ember_profile_type(p, i);
  const char *agent = ember_profile_agent_id(p), *session = ember_profile_session_id(p);
  msg.version = EMBER_WIRE_VERSION;
  msg.agent_id = (char *)(uintptr_t)(agent ? agent : "");
  msg.seq = ember_profile_seq(p);
  msg.session_id = (char *)(uintptr_t)(session ? session : "");
  msg.labels = &labels;
  ember_profile_window(p, &msg.window_start_ns, &msg.window_end_ns);
  msg.period_ns = ember_profile_period(p);
  msg.n_value_types = ntypes;
  msg.value_types = types;
  msg.n_strings = e.strings.n;
  msg.strings = strings;
  msg.n_modules = e.modules.n;
  msg.modules = mod_ptrs;
  msg.n_functions = e.functions.n;
  msg.functions = fn_ptrs;
  msg.n_locations = nframes;
  msg.locations = loc_ptrs;
  msg.n_samples = nstacks;
  msg.samples = sample_ptrs;
  msg.end_mark = EMBER__WIRE__V1__CONSTANTS__END_MARK;

  size_t size = ember__wire__v1__profile__get_packed_size(&msg);
  char *at;
  rc = ember_buf_extend(out, size, &at);
  if (rc != 0) goto cleanup;
  ember__wire__v1__profile__pack(&msg, (uint8_t *)at);
  rc = 0;
cleanup:
  ember_free(strings);
  ember_free(samples);
  ember_free(sample_ptrs);
  ember_free(fns);
  ember_free(fn_ptrs);
  ember_free(mods);
  ember_free(mod_ptrs);
  ember_free(locs);
  ember_free(loc_ptrs);
  ember__ptrtab_free(&e.strings);
  ember__ptrtab_free(&e.modules);
  ember__ptrtab_free(&e.functions);
  return rc;
}

/* --- decoding --- */

/* Every decoder's allocator (codec_internal.h). */
static void *pb_alloc(void *data, size_t size) {
  (void)data;
  return ember_malloc(size);
}

static void pb_free(void *data, void *p) {
  (void)data;
  ember_free(p);
}

ProtobufCAllocator ember__codec_pb_allocator = {pb_alloc, pb_free, NULL};

int ember__codec_fail(int rc, char *errbuf, size_t errbuf_size, const char *fmt, ...) {
  if (errbuf != NULL && errbuf_size > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errbuf_size, fmt, ap);
    va_end(ap);
  }
  return rc;
}

static int check_text_len(const char *s, const char *what, size_t idx, size_t *len, char *errbuf,
                          size_t errbuf_size) {
  size_t n = strlen(s);
  if (n > EMBER_MAX_STRING)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "%s %zu: %zu bytes (at most %u)",
                             what, idx, n, EMBER_MAX_STRING);
  if (!ember__utf8_valid(s, n))
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "%s %zu: not valid UTF-8", what,
                             idx);
  *len = n;
  return 0;
}

int ember__codec_check_text(const char *s, const char *what, size_t idx, char *errbuf,
                            size_t errbuf_size) {
  size_t n;
  return check_text_len(s, what, idx, &n, errbuf, errbuf_size);
}

static int check_str_index(uint32_t idx, size_t nstrings, const char *what, size_t i, char *errbuf,
                           size_t errbuf_size) {
  if (idx < nstrings || idx == 0) return 0;
  return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                           "%s %zu: string index %u out of range (have %zu strings)", what, i, idx,
                           nstrings);
}

/* Validate everything in `m` that building a profile relies on. The
 * strings' lengths go to lens[] (n_strings entries), so building does not
 * measure them again. */
static int validate(const wire_profile_t *m, const ember_codec_limits_t *lim, uint32_t *lens,
                    char *errbuf, size_t errbuf_size) {
  int rc;
  if (m->version == 0 || m->version > EMBER_WIRE_VERSION)
    return ember__codec_fail(EMBER_EVERSION, errbuf, errbuf_size,
                             "schema version %u is not supported (this build reads 1 to %u)",
                             m->version, EMBER_WIRE_VERSION);
  if (m->end_mark != EMBER__WIRE__V1__CONSTANTS__END_MARK)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "message is truncated or not an Ember profile (no end mark)");
  if (m->window_end_ns < m->window_start_ns)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "window ends (%lld) before it starts (%lld)",
                             (long long)m->window_end_ns, (long long)m->window_start_ns);
  if (m->period_ns < 0)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "negative sampling period %lld",
                             (long long)m->period_ns);
  if (m->n_value_types == 0 || m->n_value_types > EMBER_MAX_VALUE_TYPES)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "%zu value types (need 1 to %d)",
                             m->n_value_types, EMBER_MAX_VALUE_TYPES);
  for (size_t i = 0; i < m->n_value_types; i++) {
    if (ember_value_type_name((ember_value_type_t)m->value_types[i]) == NULL)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "value type %zu: unknown type %d", i, (int)m->value_types[i]);
    for (size_t j = 0; j < i; j++) {
      if (m->value_types[j] == m->value_types[i])
        return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                                 "value type %zu repeats type %d", i, (int)m->value_types[i]);
    }
  }
  const char *texts[] = {m->agent_id, m->session_id};
  for (size_t i = 0; i < 2; i++) {
    if ((rc = ember__codec_check_text(texts[i], i == 0 ? "agent id" : "session id", 0, errbuf,
                                      errbuf_size)) != 0)
      return rc;
  }
  if (m->labels != NULL) {
    const char *ls[] = {m->labels->worker, m->labels->version, m->labels->host, m->labels->actor};
    for (size_t i = 0; i < 4; i++) {
      if ((rc = ember__codec_check_text(ls[i], "label", i, errbuf, errbuf_size)) != 0) return rc;
    }
  }

  if (m->n_strings > lim->max_strings)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "%zu strings (at most %zu)",
                             m->n_strings, lim->max_strings);
  if (m->n_strings > 0 && m->strings[0][0] != '\0')
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "string 0 must be empty");
  for (size_t i = 0; i < m->n_strings; i++) {
    size_t n;
    if ((rc = check_text_len(m->strings[i], "string", i, &n, errbuf, errbuf_size)) != 0) return rc;
    lens[i] = (uint32_t)n; /* at most EMBER_MAX_STRING */
  }
  for (size_t i = 0; i < m->n_modules; i++) {
    if ((rc = check_str_index(m->modules[i]->name, m->n_strings, "module", i, errbuf,
                              errbuf_size)) ||
        (rc = check_str_index(m->modules[i]->build_id, m->n_strings, "module", i, errbuf,
                              errbuf_size)))
      return rc;
  }
  for (size_t i = 0; i < m->n_functions; i++) {
    if ((rc = check_str_index(m->functions[i]->name, m->n_strings, "function", i, errbuf,
                              errbuf_size)) ||
        (rc = check_str_index(m->functions[i]->file, m->n_strings, "function", i, errbuf,
                              errbuf_size)) ||
        (rc = check_str_index(m->functions[i]->generated, m->n_strings, "function", i, errbuf,
                              errbuf_size)))
      return rc;
  }
  if (m->n_locations > lim->max_locations)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "%zu locations (at most %zu)",
                             m->n_locations, lim->max_locations);
  for (size_t i = 0; i < m->n_locations; i++) {
    const wire_location_t *l = m->locations[i];
    if (l->function > m->n_functions)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "location %zu: function %u out of range (have %zu functions)", i,
                               l->function, m->n_functions);
    if (l->module > m->n_modules)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "location %zu: module %u out of range (have %zu modules)", i,
                               l->module, m->n_modules);
    if ((unsigned)l->kind > EMBER_FRAME_KIND_MAX)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "location %zu: unknown frame kind %d", i, (int)l->kind);
  }
  if (m->n_samples > lim->max_samples)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "%zu samples (at most %zu)",
                             m->n_samples, lim->max_samples);
  size_t max_depth =
      lim->max_depth < EMBER_MAX_STACK_DEPTH ? lim->max_depth : EMBER_MAX_STACK_DEPTH;
  for (size_t i = 0; i < m->n_samples; i++) {
    const Ember__Wire__V1__Sample *s = m->samples[i];
    if (s->n_locations == 0 || s->n_locations > max_depth)
      return ember__codec_fail(s->n_locations ? EMBER_ETOOBIG : EMBER_ECORRUPT, errbuf, errbuf_size,
                               "sample %zu: stack of %zu frames (need 1 to %zu)", i, s->n_locations,
                               max_depth);
    for (size_t j = 0; j < s->n_locations; j++) {
      if (s->locations[j] >= m->n_locations)
        return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                                 "sample %zu: location index %u out of range (have %zu locations)",
                                 i, s->locations[j], m->n_locations);
    }
    if (s->n_values != m->n_value_types)
      return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "sample %zu: %zu values for %zu value types", i, s->n_values,
                               m->n_value_types);
    for (size_t j = 0; j < s->n_values; j++) {
      if (s->values[j] < 0)
        return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                                 "sample %zu: negative value %lld", i, (long long)s->values[j]);
    }
  }
  return 0;
}

static const char *text_or_null(const char *s) { return s == NULL || s[0] == '\0' ? NULL : s; }

/* Building interns each string of the table once, on its first use, and
 * then builds frames from the interned pointers: a window's ~600 locations
 * name ~1,000 strings ~2,400 times. */
typedef struct builder {
  const wire_profile_t *m;
  ember_profile_t *p;
  const uint32_t *lens;
  const char **str_of; /* interned string of each table index, NULL until used */
} builder_t;

/* The interned string of table index `idx`; 0 and "" are NULL. An empty
 * string at another index is "none" too: the encoder writes NULL and "" as
 * index 0, so anything else would not survive a round trip (two frames
 * differing only in "" against none would become one). */
static int str_at(builder_t *b, uint32_t idx, const char **out) {
  *out = NULL;
  if (idx == 0 || idx >= b->m->n_strings || b->lens[idx] == 0) return 0;
  if (b->str_of[idx] == NULL) {
    int rc = ember_profile_intern_string(b->p, b->m->strings[idx], b->lens[idx], &b->str_of[idx]);
    if (rc != 0) return rc;
  }
  *out = b->str_of[idx];
  return 0;
}

/* Build a profile from a validated message. `scratch` is the decode arena. */
static int build(const wire_profile_t *m, const uint32_t *lens, ember__arena_t *scratch,
                 ember_profile_t **out, char *errbuf, size_t errbuf_size) {
  ember_value_type_t types[EMBER_MAX_VALUE_TYPES];
  for (size_t i = 0; i < m->n_value_types; i++) types[i] = (ember_value_type_t)m->value_types[i];
  ember_profile_t *p = NULL;
  uint32_t *frame_of = NULL;
  builder_t b = {m, NULL, lens, NULL};
  int rc = ember_profile_new(types, m->n_value_types, &p);
  if (rc != 0) goto cleanup;
  b.p = p;
  if (m->labels != NULL) {
    ember_labels_t l = {text_or_null(m->labels->worker), text_or_null(m->labels->version),
                        text_or_null(m->labels->host), text_or_null(m->labels->actor),
                        m->labels->pid};
    if ((rc = ember_profile_set_labels(p, &l)) != 0) goto cleanup;
  }
  if ((rc = ember_profile_set_window(p, m->window_start_ns, m->window_end_ns)) != 0) goto cleanup;
  ember_profile_set_period(p, m->period_ns);
  rc = ember_profile_set_origin(p, text_or_null(m->agent_id), m->seq, text_or_null(m->session_id));
  if (rc != 0) goto cleanup;
  size_t nids = 0;
  for (size_t i = 0; i < m->n_samples; i++) nids += m->samples[i]->n_locations;
  /* The message's own counts size the tables (the limits bound them). */
  rc = ember_profile_reserve(p, m->n_strings, m->n_locations, m->n_samples, nids);
  if (rc != 0) goto cleanup;
  rc = -ENOMEM;
  if (m->n_strings > 0) {
    b.str_of = ember__arena_alloc(scratch, m->n_strings * sizeof *b.str_of);
    if (b.str_of == NULL) goto cleanup;
    memset(b.str_of, 0, m->n_strings * sizeof *b.str_of);
  }
  if (m->n_locations > 0) {
    frame_of = ember__arena_alloc(scratch, m->n_locations * sizeof *frame_of);
    if (frame_of == NULL) goto cleanup;
  }
  rc = 0;
  for (size_t i = 0; i < m->n_locations; i++) {
    const wire_location_t *l = m->locations[i];
    ember_frame_t f = {0};
    if (l->function > 0) {
      const Ember__Wire__V1__Function *fn = m->functions[l->function - 1];
      if ((rc = str_at(&b, fn->name, &f.function)) != 0 ||
          (rc = str_at(&b, fn->file, &f.file)) != 0 ||
          (rc = str_at(&b, fn->generated, &f.generated)) != 0)
        goto cleanup;
    }
    if (l->module > 0) {
      const Ember__Wire__V1__Module *mod = m->modules[l->module - 1];
      if ((rc = str_at(&b, mod->name, &f.module)) != 0 ||
          (rc = str_at(&b, mod->build_id, &f.build_id)) != 0)
        goto cleanup;
    }
    f.address = l->address;
    f.line = l->line;
    f.kind = (ember_frame_kind_t)l->kind;
    if ((rc = ember_profile_intern_frame_interned(p, &f, &frame_of[i])) != 0) goto cleanup;
  }
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  for (size_t i = 0; i < m->n_samples; i++) {
    const Ember__Wire__V1__Sample *s = m->samples[i];
    for (size_t j = 0; j < s->n_locations; j++) ids[j] = frame_of[s->locations[j]];
    rc = ember_profile_add_ids(p, ids, s->n_locations, s->values, NULL);
    if (rc == -ERANGE) {
      rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "sample %zu: values overflow 64 bits", i);
      goto cleanup;
    }
    if (rc != 0) goto cleanup;
  }
  *out = p;
  p = NULL;
cleanup:
  if (rc == -ENOMEM) ember__codec_fail(rc, errbuf, errbuf_size, "out of memory while decoding");
  ember_profile_free(p);
  return rc;
}

int ember_codec_decode(const void *data, size_t len, const ember_codec_limits_t *lim,
                       ember_profile_t **out, char *errbuf, size_t errbuf_size) {
  uint32_t version = ember_wire_peek_version(data, len);
  if (version > EMBER_WIRE_V2)
    return ember__codec_fail(EMBER_EVERSION, errbuf, errbuf_size,
                             "schema version %u is not supported (this build reads 1 and 2)",
                             version);
  if (version == EMBER_WIRE_V2) {
    ember_wire_t *w = NULL;
    int rc = ember_wire_decode(data, len, lim, &w, errbuf, errbuf_size);
    if (rc == 0) rc = ember_wire_to_profile(w, out, errbuf, errbuf_size);
    ember_wire_free(w);
    return rc;
  }
  return ember__codec_decode_v1(data, len, lim, out, errbuf, errbuf_size);
}

/* Take a v1 message in: the size checks, protobuf-c's unpack into
 * `arena` (its first chunk `first` bytes) and validate(). Sets *m and
 * *lens (the strings' lengths) on success; both readers call it. */
static int unpack_v1(const void *data, size_t len, const ember_codec_limits_t *lim,
                     ember__arena_t *arena, size_t first, wire_profile_t **m, uint32_t **lens,
                     char *errbuf, size_t errbuf_size) {
  if (len > lim->max_message)
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size,
                             "message of %zu bytes (at most %zu)", len, lim->max_message);
  if (len == 0) return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "empty message");
  arena->next_size = first;
  ProtobufCAllocator alloc = {ember__arena_alloc, ember__arena_free, arena};
  *m = ember__wire__v1__profile__unpack(&alloc, len, data);
  if (*m == NULL)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "not a valid ember.wire.v1.Profile message (%zu bytes)", len);
  /* A table over the limit is refused by validate() before lens is used. */
  bool want = (*m)->n_strings > 0 && (*m)->n_strings <= lim->max_strings;
  *lens = want ? ember__arena_alloc(arena, (*m)->n_strings * sizeof **lens) : NULL;
  if (want && *lens == NULL)
    return ember__codec_fail(-ENOMEM, errbuf, errbuf_size, "out of memory while decoding");
  return validate(*m, lim, *lens, errbuf, errbuf_size);
}

int ember__codec_decode_v1(const void *data, size_t len, const ember_codec_limits_t *lim,
                           ember_profile_t **out, char *errbuf, size_t errbuf_size) {
  if ((data == NULL && len > 0) || out == NULL) return -EINVAL;
  ember_codec_limits_t dflt;
  if (lim == NULL) {
    ember_codec_limits_default(&dflt);
    lim = &dflt;
  }
  /* The decoded message takes about as much memory as its encoding, plus
   * the structs; start there so most windows need one or two chunks. */
  ember__arena_t arena = {.head = NULL};
  wire_profile_t *m = NULL;
  uint32_t *lens = NULL;
  int rc = unpack_v1(data, len, lim, &arena, len * 2 + 4096, &m, &lens, errbuf, errbuf_size);
  if (rc == 0) rc = build(m, lens, &arena, out, errbuf, errbuf_size);
  /* No free_unpacked: the arena holds the whole message. */
  ember__arena_release(&arena);
  return rc;
}

/* A version 1 message as a wire view (ember_wire_decode): the tables
 * copied into columns, the keys computed here (a v1 writer sends no hashes),
 * without building a profile. */
typedef struct v1_view {
  ember__wire_mem_t mem;
  ember_wire_t w;
  ember__arena_t arena; /* the unpacked message and the columns */
} v1_view_t;

static void v1_view_release(ember__wire_mem_t *mem) {
  v1_view_t *v = (v1_view_t *)mem;
  ember__arena_release(&v->arena);
  ember_free(v);
}

static void *cols(ember__arena_t *a, size_t n, size_t size) {
  return ember__arena_alloc(a, (n ? n : 1) * size); /* n is bounded by the limits */
}

static int v1_columns(const wire_profile_t *m, const uint32_t *lens, ember__arena_t *a,
                      ember_wire_t *w) {
  size_t ns = m->n_strings, nm = m->n_modules, nf = m->n_functions, nl = m->n_locations;
  size_t nsamp = m->n_samples, nt = m->n_value_types, nlocs = 0, blen = 0;
  for (size_t i = 0; i < nsamp; i++) nlocs += m->samples[i]->n_locations;
  for (size_t i = 0; i < ns; i++) blen += lens[i];
  char *blob = cols(a, blen, 1);
  uint32_t *off = cols(a, ns, 4), *len = cols(a, ns, 4), *mn = cols(a, nm, 4), *mb = cols(a, nm, 4),
           *fnn = cols(a, nf, 4), *fnf = cols(a, nf, 4), *lf = cols(a, nl, 4), *lm = cols(a, nl, 4),
           *ll = cols(a, nl, 4), *lk = cols(a, nl, 4), *depth = cols(a, nsamp, 4),
           *soff = cols(a, nsamp, 4), *locs = cols(a, nlocs, 4);
  uint64_t *la = cols(a, nl, 8), *lh = cols(a, nl, 8), *sh = cols(a, nsamp, 8);
  int64_t *vals = cols(a, nsamp * nt, 8);
  if (!blob || !off || !len || !mn || !mb || !fnn || !fnf || !lf || !lm || !ll || !lk || !depth ||
      !soff || !locs || !la || !lh || !sh || !vals)
    return -ENOMEM;
  size_t at = 0;
  for (size_t i = 0; i < ns; i++) {
    off[i] = (uint32_t)at; /* the message size bounds it */
    len[i] = lens[i];
    memcpy(blob + at, m->strings[i], lens[i]);
    at += lens[i];
  }
  for (size_t i = 0; i < nm; i++) {
    mn[i] = m->modules[i]->name;
    mb[i] = m->modules[i]->build_id;
  }
  /* Generated names are rare: a column only when some function has one. */
  uint32_t *fng = NULL;
  for (size_t i = 0; i < nf; i++) {
    fnn[i] = m->functions[i]->name;
    fnf[i] = m->functions[i]->file;
    if (m->functions[i]->generated != 0 && fng == NULL) {
      if ((fng = cols(a, nf, 4)) == NULL) return -ENOMEM;
      memset(fng, 0, nf * sizeof *fng);
    }
    if (fng != NULL) fng[i] = m->functions[i]->generated;
  }
  for (size_t i = 0; i < nl; i++) {
    const wire_location_t *l = m->locations[i];
    lf[i] = l->function;
    lm[i] = l->module;
    la[i] = l->address;
    ll[i] = l->line;
    lk[i] = (uint32_t)l->kind;
  }
  at = 0;
  for (size_t i = 0; i < nsamp; i++) {
    const Ember__Wire__V1__Sample *smp = m->samples[i];
    depth[i] = (uint32_t)smp->n_locations; /* validated: 1..EMBER_MAX_STACK_DEPTH */
    soff[i] = (uint32_t)at;
    for (size_t j = 0; j < smp->n_locations; j++) locs[at + j] = smp->locations[j];
    memcpy(vals + i * nt, smp->values, nt * sizeof *vals);
    at += smp->n_locations;
  }
  w->version = 1;
  w->hashes_checked = true; /* none sent */
  w->agent_id = text_or_null(m->agent_id);
  w->session_id = text_or_null(m->session_id);
  w->seq = m->seq;
  if (m->labels != NULL)
    w->labels = (ember_labels_t){text_or_null(m->labels->worker), text_or_null(m->labels->version),
                                 text_or_null(m->labels->host), text_or_null(m->labels->actor),
                                 m->labels->pid};
  w->start_ns = m->window_start_ns;
  w->end_ns = m->window_end_ns;
  w->period_ns = m->period_ns;
  w->ntypes = nt;
  for (size_t i = 0; i < nt; i++) w->types[i] = (ember_value_type_t)m->value_types[i];
  w->blob = blob;
  w->str_off = off;
  w->str_len = len;
  w->nstrings = ns;
  w->mod_name = mn;
  w->mod_build_id = mb;
  w->nmodules = nm;
  w->fn_name = fnn;
  w->fn_file = fnf;
  w->fn_generated = fng;
  w->nfunctions = nf;
  w->loc_function = lf;
  w->loc_module = lm;
  w->loc_address = la;
  w->loc_line = ll;
  w->loc_kind = lk;
  w->loc_key = lh;
  w->nlocations = nl;
  w->depth = depth;
  w->stack_off = soff;
  w->locs = locs;
  w->values = vals;
  w->stack_key = sh;
  w->nsamples = nsamp;
  w->nlocs = nlocs;
  /* The keys, from the finished columns, as a v2 view's. */
  if (ember__wire_key_locations(w, lh) != 0) return -ENOMEM;
  for (size_t i = 0; i < nsamp; i++) sh[i] = ember__wire_stack_key_of(w, lh, i);
  return 0;
}

int ember__codec_decode_v1_view(const void *data, size_t len, const ember_codec_limits_t *lim,
                                ember_wire_t **out, char *errbuf, size_t errbuf_size) {
  v1_view_t *v = ember_calloc(1, sizeof *v);
  if (v == NULL) return ember__codec_fail(-ENOMEM, errbuf, errbuf_size, "out of memory");
  v->mem.release = v1_view_release;
  v->w.priv = &v->mem;
  /* The columns come on top of the message: a larger first chunk. */
  wire_profile_t *m = NULL;
  uint32_t *lens = NULL;
  int rc = unpack_v1(data, len, lim, &v->arena, len * 3 + 4096, &m, &lens, errbuf, errbuf_size);
  if (rc == 0 && (rc = v1_columns(m, lens, &v->arena, &v->w)) != 0)
    ember__codec_fail(rc, errbuf, errbuf_size, "out of memory while decoding");
  if (rc != 0) {
    v1_view_release(&v->mem);
    return rc;
  }
  *out = &v->w;
  return 0;
}

/* --- targets --- */

static char *wire_str(const char *s) { return (char *)(uintptr_t)(s ? s : ""); }

int ember_codec_encode_target(const ember_target_record_t *t, ember_buf_t *out) {
  if (t == NULL || out == NULL) return -EINVAL;
  Ember__Wire__V1__Target m;
  ember__wire__v1__target__init(&m);
  m.version = EMBER_WIRE_VERSION;
  m.agent_id = wire_str(t->agent_id);
  m.host = wire_str(t->host);
  m.pid = t->pid;
  m.worker = wire_str(t->worker);
  m.worker_version = wire_str(t->version);
  m.actor = wire_str(t->actor);
  m.comm = wire_str(t->comm);
  m.exe = wire_str(t->exe);
  m.build_id = wire_str(t->build_id);
  m.start_ticks = t->start_ticks;
  m.seen_ns = t->seen_ns;
  m.heap = t->heap;
  char *at;
  int rc = ember_buf_extend(out, ember__wire__v1__target__get_packed_size(&m), &at);
  if (rc != 0) return rc;
  ember__wire__v1__target__pack(&m, (uint8_t *)at);
  return 0;
}

void ember_target_record_clear(ember_target_record_t *t) {
  if (t == NULL) return;
  char **fields[] = {&t->agent_id, &t->host, &t->worker, &t->version,
                     &t->actor,    &t->comm, &t->exe,    &t->build_id};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    ember_free(*fields[i]);
    *fields[i] = NULL;
  }
}

int ember_codec_decode_target(const void *data, size_t len, ember_target_record_t *out,
                              char *errbuf, size_t errbuf_size) {
  if ((data == NULL && len > 0) || out == NULL) return -EINVAL;
  if (len > (1u << 20))
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "target record of %zu bytes", len);
  Ember__Wire__V1__Target *m =
      ember__wire__v1__target__unpack(&ember__codec_pb_allocator, len, data);
  if (m == NULL)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "not a valid ember.wire.v1.Target message");
  int rc = 0;
  ember_target_record_t t = {0};
  const char *src[] = {m->agent_id, m->host, m->worker, m->worker_version,
                       m->actor,    m->comm, m->exe,    m->build_id};
  char **dst[] = {&t.agent_id, &t.host, &t.worker, &t.version,
                  &t.actor,    &t.comm, &t.exe,    &t.build_id};
  if (m->version == 0 || m->version > EMBER_WIRE_VERSION) {
    rc = ember__codec_fail(EMBER_EVERSION, errbuf, errbuf_size,
                           "target schema version %u is not supported", m->version);
    goto cleanup;
  }
  for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
    if ((rc = ember__codec_check_text(src[i], "target field", i, errbuf, errbuf_size)) != 0)
      goto cleanup;
    if (src[i][0] == '\0') continue;
    *dst[i] = ember_strdup(src[i]);
    if (*dst[i] == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
  }
  t.pid = m->pid;
  t.start_ticks = m->start_ticks;
  t.seen_ns = m->seen_ns;
  t.heap = m->heap != 0;
  *out = t;
  t = (ember_target_record_t){0};
cleanup:
  ember_target_record_clear(&t);
  ember__wire__v1__target__free_unpacked(m, &ember__codec_pb_allocator);
  return rc;
}

/* ---- sessions: Command and Event ---------------------------------------- */

/* Copy the wire strings src[i] into *dst[i] (empty = NULL) after checking
 * them; `what` names the message for errors. */
static int copy_texts(const char *const *src, char **const *dst, size_t n, const char *what,
                      char *errbuf, size_t errbuf_size) {
  for (size_t i = 0; i < n; i++) {
    int rc = ember__codec_check_text(src[i], what, i, errbuf, errbuf_size);
    if (rc != 0) return rc;
    if (src[i][0] == '\0') continue;
    *dst[i] = ember_strdup(src[i]);
    if (*dst[i] == NULL) return -ENOMEM;
  }
  return 0;
}

int ember_codec_encode_command(const ember_command_t *c, ember_buf_t *out) {
  if (c == NULL || out == NULL || (c->npids > 0 && c->pids == NULL)) return -EINVAL;
  Ember__Wire__V1__Command m;
  ember__wire__v1__command__init(&m);
  m.version = EMBER_WIRE_VERSION;
  m.session_id = wire_str(c->session_id);
  m.kind = (Ember__Wire__V1__Command__Kind)c->kind;
  m.host = wire_str(c->host);
  m.worker = wire_str(c->worker);
  m.worker_version = wire_str(c->version);
  m.actor = wire_str(c->actor);
  m.n_pids = c->npids;
  m.pids = c->pids;
  m.type = (Ember__Wire__V1__Command__ProfileType)c->type;
  m.duration_ms = c->duration_ms;
  m.hz = c->hz;
  m.issued_ns = c->issued_ns;
  m.ttl_ms = c->ttl_ms;
  char *at;
  int rc = ember_buf_extend(out, ember__wire__v1__command__get_packed_size(&m), &at);
  if (rc != 0) return rc;
  ember__wire__v1__command__pack(&m, (uint8_t *)at);
  return 0;
}

void ember_command_clear(ember_command_t *c) {
  if (c == NULL) return;
  ember_free(c->session_id);
  ember_free(c->host);
  ember_free(c->worker);
  ember_free(c->version);
  ember_free(c->actor);
  ember_free(c->pids);
  *c = (ember_command_t){0};
}

int ember_codec_decode_command(const void *data, size_t len, ember_command_t *out, char *errbuf,
                               size_t errbuf_size) {
  if ((data == NULL && len > 0) || out == NULL) return -EINVAL;
  if (len > (1u << 20))
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "command of %zu bytes", len);
  Ember__Wire__V1__Command *m =
      ember__wire__v1__command__unpack(&ember__codec_pb_allocator, len, data);
  if (m == NULL)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "not a valid ember.wire.v1.Command message");
  int rc = 0;
  ember_command_t c = {0};
  if (m->version == 0 || m->version > EMBER_WIRE_VERSION) {
    rc = ember__codec_fail(EMBER_EVERSION, errbuf, errbuf_size,
                           "command schema version %u is not supported", m->version);
    goto cleanup;
  }
  if (m->kind != EMBER__WIRE__V1__COMMAND__KIND__START &&
      m->kind != EMBER__WIRE__V1__COMMAND__KIND__STOP) {
    rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "command kind %d is unknown",
                           (int)m->kind);
    goto cleanup;
  }
  if (m->kind == EMBER__WIRE__V1__COMMAND__KIND__START &&
      m->type != EMBER__WIRE__V1__COMMAND__PROFILE_TYPE__CPU &&
      m->type != EMBER__WIRE__V1__COMMAND__PROFILE_TYPE__MEMORY) {
    rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                           "command profile type %d is unknown", (int)m->type);
    goto cleanup;
  }
  if (m->n_pids > EMBER_SESSION_MAX_PIDS) {
    rc = ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "command with %zu pids (at most %u)",
                           m->n_pids, EMBER_SESSION_MAX_PIDS);
    goto cleanup;
  }
  const char *src[] = {m->session_id, m->host, m->worker, m->worker_version, m->actor};
  char **dst[] = {&c.session_id, &c.host, &c.worker, &c.version, &c.actor};
  if ((rc = copy_texts(src, dst, 5, "command field", errbuf, errbuf_size)) != 0) goto cleanup;
  if (c.session_id == NULL || c.host == NULL) {
    rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                           "a command needs a session id and a host");
    goto cleanup;
  }
  if (m->n_pids > 0) {
    c.pids = ember_malloc(m->n_pids * sizeof *c.pids);
    if (c.pids == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    memcpy(c.pids, m->pids, m->n_pids * sizeof *c.pids);
    c.npids = m->n_pids;
  }
  c.kind = (ember_command_kind_t)m->kind;
  c.type = (ember_session_type_t)m->type;
  c.duration_ms = m->duration_ms;
  c.hz = m->hz;
  c.issued_ns = m->issued_ns;
  c.ttl_ms = m->ttl_ms;
  *out = c;
  c = (ember_command_t){0};
cleanup:
  ember_command_clear(&c);
  ember__wire__v1__command__free_unpacked(m, &ember__codec_pb_allocator);
  return rc;
}

const char *ember_event_state_name(ember_event_state_t s) {
  switch (s) {
  case EMBER_EV_ACCEPTED: return "accepted";
  case EMBER_EV_RUNNING: return "running";
  case EMBER_EV_DONE: return "done";
  case EMBER_EV_FAILED: return "failed";
  case EMBER_EV_REJECTED: return "rejected";
  case EMBER_EV_CREATED: return "created";
  case EMBER_EV_CANCEL_REQUESTED: return "cancel_requested";
  case EMBER_EV_STORED: return "stored";
  }
  return "unknown";
}

int ember_codec_encode_event(const ember_event_t *e, ember_buf_t *out) {
  if (e == NULL || out == NULL || (e->nhosts > 0 && e->hosts == NULL)) return -EINVAL;
  Ember__Wire__V1__Event m;
  ember__wire__v1__event__init(&m);
  m.version = EMBER_WIRE_VERSION;
  m.session_id = wire_str(e->session_id);
  m.host = wire_str(e->host);
  m.agent_id = wire_str(e->agent_id);
  m.state = (Ember__Wire__V1__Event__State)e->state;
  m.message = wire_str(e->message);
  m.targets = e->targets;
  m.samples = e->samples;
  m.hz = e->hz;
  m.at_ns = e->at_ns;
  m.worker = wire_str(e->worker);
  m.worker_version = wire_str(e->version);
  m.actor = wire_str(e->actor);
  m.type = (Ember__Wire__V1__Command__ProfileType)e->type;
  m.duration_ms = e->duration_ms;
  m.n_hosts = e->nhosts;
  m.hosts = e->hosts;
  m.created_ns = e->created_ns;
  m.select_host = wire_str(e->select_host);
  m.instances = e->instances;
  m.result_seq = e->result_seq;
  for (size_t i = 0; i < e->nhosts; i++)
    if (e->hosts[i] == NULL) return -EINVAL;
  char *at;
  int rc = ember_buf_extend(out, ember__wire__v1__event__get_packed_size(&m), &at);
  if (rc != 0) return rc;
  ember__wire__v1__event__pack(&m, (uint8_t *)at);
  return 0;
}

void ember_event_clear(ember_event_t *e) {
  if (e == NULL) return;
  ember_free(e->session_id);
  ember_free(e->host);
  ember_free(e->agent_id);
  ember_free(e->message);
  ember_free(e->worker);
  ember_free(e->version);
  ember_free(e->actor);
  ember_free(e->select_host);
  for (size_t i = 0; i < e->nhosts && e->hosts != NULL; i++) ember_free(e->hosts[i]);
  ember_free(e->hosts);
  *e = (ember_event_t){0};
}

int ember_codec_decode_event(const void *data, size_t len, ember_event_t *out, char *errbuf,
                             size_t errbuf_size) {
  if ((data == NULL && len > 0) || out == NULL) return -EINVAL;
  if (len > (1u << 20))
    return ember__codec_fail(EMBER_ETOOBIG, errbuf, errbuf_size, "event of %zu bytes", len);
  Ember__Wire__V1__Event *m = ember__wire__v1__event__unpack(&ember__codec_pb_allocator, len, data);
  if (m == NULL)
    return ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "not a valid ember.wire.v1.Event message");
  int rc = 0;
  ember_event_t e = {0};
  if (m->version == 0 || m->version > EMBER_WIRE_VERSION) {
    rc = ember__codec_fail(EMBER_EVERSION, errbuf, errbuf_size,
                           "event schema version %u is not supported", m->version);
    goto cleanup;
  }
  if (m->state < EMBER__WIRE__V1__EVENT__STATE__ACCEPTED ||
      m->state > EMBER__WIRE__V1__EVENT__STATE__STORED) {
    rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size, "event state %d is unknown",
                           (int)m->state);
    goto cleanup;
  }
  const char *src[] = {m->session_id, m->host,           m->agent_id, m->message,
                       m->worker,     m->worker_version, m->actor,    m->select_host};
  char **dst[] = {&e.session_id, &e.host,    &e.agent_id, &e.message,
                  &e.worker,     &e.version, &e.actor,    &e.select_host};
  if ((rc = copy_texts(src, dst, 8, "event field", errbuf, errbuf_size)) != 0) goto cleanup;
  bool from_collector = m->state == EMBER__WIRE__V1__EVENT__STATE__CREATED ||
                        m->state == EMBER__WIRE__V1__EVENT__STATE__CANCEL_REQUESTED;
  if (e.session_id == NULL || (e.host == NULL && !from_collector)) {
    rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                           "an event needs a session id and a host");
    goto cleanup;
  }
  if (m->state == EMBER__WIRE__V1__EVENT__STATE__CREATED) {
    if (m->n_hosts == 0 || m->n_hosts > EMBER_SESSION_MAX_HOSTS) {
      rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "a CREATED event with %zu hosts (1 to %u)", m->n_hosts,
                             EMBER_SESSION_MAX_HOSTS);
      goto cleanup;
    }
    if (m->type != EMBER__WIRE__V1__COMMAND__PROFILE_TYPE__CPU &&
        m->type != EMBER__WIRE__V1__COMMAND__PROFILE_TYPE__MEMORY) {
      rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                             "a CREATED event with profile type %d", (int)m->type);
      goto cleanup;
    }
    e.hosts = ember_calloc(m->n_hosts, sizeof *e.hosts);
    if (e.hosts == NULL) {
      rc = -ENOMEM;
      goto cleanup;
    }
    e.nhosts = m->n_hosts;
    for (size_t i = 0; i < m->n_hosts; i++) {
      if ((rc = ember__codec_check_text(m->hosts[i], "event host", i, errbuf, errbuf_size)) != 0)
        goto cleanup;
      if (m->hosts[i][0] == '\0') {
        rc = ember__codec_fail(EMBER_ECORRUPT, errbuf, errbuf_size,
                               "a CREATED event with an empty host");
        goto cleanup;
      }
      e.hosts[i] = ember_strdup(m->hosts[i]);
      if (e.hosts[i] == NULL) {
        rc = -ENOMEM;
        goto cleanup;
      }
    }
    e.type = (ember_session_type_t)m->type;
  }
  e.duration_ms = m->duration_ms;
  e.created_ns = m->created_ns;
  e.instances = m->instances;
  e.result_seq = m->result_seq;
  e.state = (ember_event_state_t)m->state;
  e.targets = m->targets;
  e.samples = m->samples;
  e.hz = m->hz;
  e.at_ns = m->at_ns;
  *out = e;
  e = (ember_event_t){0};
cleanup:
  ember_event_clear(&e);
  ember__wire__v1__event__free_unpacked(m, &ember__codec_pb_allocator);
  return rc;
}
