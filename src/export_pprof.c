/* pprof: the profile as a perftools.profiles.Profile message
 * (src/proto/pprof.proto), packed with protobuf-c and gzip-compressed, the
 * form `go tool pprof` reads.
 *
 * The mapping from Ember's model:
 *  - one Location per frame (id = frame id + 1) with one Line;
 *  - one Function per distinct (display name, file), so an unresolved frame
 *    still shows as "module+0xADDR" instead of a bare address;
 *  - one Mapping per distinct (module, build id); frames without a module
 *    have mapping id 0. Addresses are module-relative, so memory_start and
 *    memory_limit are left 0 (unknown);
 *  - one Sample per stack with any nonzero value, leaf first like Ember;
 *  - the labels become `comment` strings ("worker=api"), which pprof shows
 *    with the profile. */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define ZLIB_CONST
#include <zlib.h>

#include "ember/export.h"
#include "export.h"
#include "htab.h"
#include "pprof.pb-c.h"

typedef Perftools__Profiles__Profile pb_profile_t;
typedef Perftools__Profiles__ValueType pb_value_type_t;
typedef Perftools__Profiles__Sample pb_sample_t;
typedef Perftools__Profiles__Mapping pb_mapping_t;
typedef Perftools__Profiles__Location pb_location_t;
typedef Perftools__Profiles__Line pb_line_t;
typedef Perftools__Profiles__Function pb_function_t;

/* --- the string table --- */

typedef struct strtab {
  char **s; /* borrowed strings; never NULL entries */
  uint64_t *hashes;
  size_t n, cap;
  ember__htab_t index;
} strtab_t;

typedef struct str_key {
  const strtab_t *t;
  const char *s;
} str_key_t;

static bool str_eq(const void *ctx, uint32_t idx) {
  const str_key_t *k = ctx;
  return strcmp(k->t->s[idx], k->s) == 0;
}

static uint64_t str_rehash(const void *ctx, uint32_t idx) {
  const str_key_t *k = ctx;
  return k->t->hashes[idx];
}

static void strtab_free(strtab_t *t) {
  ember_free(t->s);
  ember_free(t->hashes);
  ember__htab_free(&t->index);
}

/* The index of `s` in the table, adding it if new. NULL and "" are index 0,
 * which the format reserves for "". The string is borrowed: it must outlive
 * the table. */
static int strtab_intern(strtab_t *t, const char *s, int64_t *out) {
  if (s == NULL) s = "";
  size_t len = strlen(s);
  uint64_t h = ember__hash_bytes(s, len, 0x9b05688c2b3e6c1fULL);
  str_key_t key = {t, s};
  int64_t found = ember__htab_find(&t->index, h, str_eq, &key);
  if (found >= 0) {
    *out = found;
    return 0;
  }
  if (t->n == t->cap) {
    size_t ncap = t->cap ? t->cap * 2 : 64;
    char **ns = ember_realloc(t->s, ncap * sizeof *ns);
    if (ns == NULL) return -ENOMEM;
    t->s = ns;
    uint64_t *nh = ember_realloc(t->hashes, ncap * sizeof *nh);
    if (nh == NULL) return -ENOMEM;
    t->hashes = nh;
    t->cap = ncap;
  }
  /* protobuf-c's message type has `char *` strings but packing only reads
   * them, so borrowing a const string is safe. */
  t->s[t->n] = (char *)(uintptr_t)s;
  t->hashes[t->n] = h;
  int rc = ember__htab_insert(&t->index, h, (uint32_t)t->n, str_rehash, &key);
  if (rc != 0) return rc;
  *out = (int64_t)t->n++;
  return 0;
}

/* --- gzip --- */

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
  (void)opaque;
  return ember_calloc(items, size);
}

static void z_free(voidpf opaque, voidpf p) {
  (void)opaque;
  ember_free(p);
}

/* Append `in` gzip-compressed to `out`. */
static int gzip_append(const uint8_t *in, size_t len, ember_buf_t *out) {
  int rc = 0;
  bool started = false;
  unsigned char chunk[16384];
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  zs.zalloc = z_alloc;
  zs.zfree = z_free;

  /* windowBits 15 + 16: a gzip header and trailer around the deflate
   * stream, which is what pprof readers expect. */
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    rc = -ENOMEM;
    goto cleanup;
  }
  started = true;
  int flush;
  do {
    /* avail_in is 32 bits: feed large inputs in slices. */
    uInt n = len > (1u << 30) ? (1u << 30) : (uInt)len;
    zs.next_in = in;
    zs.avail_in = n;
    in += n;
    len -= n;
    flush = len == 0 ? Z_FINISH : Z_NO_FLUSH;
    do {
      zs.next_out = chunk;
      zs.avail_out = sizeof chunk;
      int zrc = deflate(&zs, flush);
      /* The stream is ours and well-formed, so only a bug gets here. */
      if (zrc == Z_STREAM_ERROR) {
        rc = -EINVAL;
        goto cleanup;
      }
      rc = ember_buf_append(out, chunk, sizeof chunk - zs.avail_out);
      if (rc != 0) goto cleanup;
    } while (zs.avail_out == 0);
  } while (flush != Z_FINISH);

cleanup:
  if (started) deflateEnd(&zs);
  return rc;
}

/* --- the profile --- */

/* The labels as "key=value" comment strings, NUL-separated in `notes`
 * (which must not move afterwards: the string table borrows them). */
static int label_notes(const ember_labels_t *l, ember_buf_t *notes, size_t *count) {
  const char *keys[4] = {"worker", "version", "host", "actor"};
  const char *vals[4] = {l->worker, l->version, l->host, l->actor};
  int rc = 0;
  *count = 0;
  for (size_t i = 0; i < 4 && rc == 0; i++) {
    if (vals[i] == NULL) continue;
    rc = ember_buf_printf(notes, "%s=%s", keys[i], vals[i]);
    if (rc == 0) rc = ember_buf_append(notes, "", 1);
    if (rc == 0) (*count)++;
  }
  if (rc == 0 && l->pid != 0) {
    rc = ember_buf_printf(notes, "pid=%" PRIu32, l->pid);
    if (rc == 0) rc = ember_buf_append(notes, "", 1);
    if (rc == 0) (*count)++;
  }
  return rc;
}

int ember_export_pprof(const ember_profile_t *p, ember_buf_t *out) {
  if (p == NULL || out == NULL) return -EINVAL;
  int rc = 0;
  size_t start = out->len;
  size_t nframes = ember_profile_nframes(p);
  size_t nstacks = ember_profile_nstacks(p);
  size_t ntypes = ember_profile_ntypes(p);
  ember__names_t names = {NULL, NULL, 0};
  strtab_t strs = {NULL, NULL, 0, 0, {NULL, 0, 0}};
  ember_buf_t notes;
  uint32_t *fn_of = NULL, *fn_first = NULL, *map_of = NULL, *map_first = NULL;
  uint64_t *map_id = NULL;
  pb_function_t *fns = NULL, **fn_ptrs = NULL;
  pb_mapping_t *maps = NULL, **map_ptrs = NULL;
  pb_location_t *locs = NULL, **loc_ptrs = NULL;
  pb_line_t *lines = NULL, **line_ptrs = NULL;
  pb_sample_t *samples = NULL, **sample_ptrs = NULL;
  uint64_t *loc_ids = NULL;
  int64_t *values = NULL;
  uint8_t *packed = NULL;
  pb_value_type_t types[EMBER_MAX_VALUE_TYPES], *type_ptrs[EMBER_MAX_VALUE_TYPES];
  pb_value_type_t period_type;
  int64_t comments[5];
  pb_profile_t prof;
  ember_buf_init(&notes, SIZE_MAX - 1);
  ember__htab_init(&strs.index);
  perftools__profiles__profile__init(&prof);

  /* "" must be string 0. */
  int64_t idx;
  rc = strtab_intern(&strs, "", &idx);
  if (rc != 0) goto cleanup;

  rc = ember__names_build(p, &names);
  if (rc != 0) goto cleanup;
  fn_of = ember_malloc(nframes * sizeof *fn_of);
  fn_first = ember_malloc(nframes * sizeof *fn_first);
  map_of = ember_malloc(nframes * sizeof *map_of);
  map_first = ember_malloc(nframes * sizeof *map_first);
  map_id = ember_malloc(nframes * sizeof *map_id);
  if (fn_of == NULL || fn_first == NULL || map_of == NULL || map_first == NULL || map_id == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }

  /* Value types first, so "samples"/"cpu" come early in the table. */
  for (size_t i = 0; i < ntypes; i++) {
    ember_value_type_t vt = ember_profile_type(p, i);
    perftools__profiles__value_type__init(&types[i]);
    rc = strtab_intern(&strs, ember_value_type_name(vt), &types[i].type);
    if (rc == 0) rc = strtab_intern(&strs, ember_value_type_unit(vt), &types[i].unit);
    if (rc != 0) goto cleanup;
    type_ptrs[i] = &types[i];
  }
  prof.n_sample_type = ntypes;
  prof.sample_type = type_ptrs;

  /* Functions. */
  size_t nfns = 0;
  rc = ember__group_frames(p, &names, EMBER__BY_NAME | EMBER__BY_FILE | EMBER__BY_GENERATED, fn_of,
                           fn_first, &nfns);
  if (rc != 0) goto cleanup;
  fns = ember_malloc(nfns * sizeof *fns);
  fn_ptrs = ember_malloc(nfns * sizeof *fn_ptrs);
  if (fns == NULL || fn_ptrs == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  for (size_t g = 0; g < nfns; g++) {
    const ember_frame_t *f = ember_profile_frame(p, fn_first[g]);
    perftools__profiles__function__init(&fns[g]);
    fns[g].id = g + 1;
    rc = strtab_intern(&strs, names.name[fn_first[g]], &fns[g].name);
    if (rc == 0) rc = strtab_intern(&strs, f->file, &fns[g].filename);
    /* The name where the code runs: a mapped frame's generated one. */
    fns[g].system_name = fns[g].name;
    if (rc == 0 && f->generated != NULL)
      rc = strtab_intern(&strs, f->generated, &fns[g].system_name);
    if (rc != 0) goto cleanup;
    fn_ptrs[g] = &fns[g];
  }
  prof.n_function = nfns;
  prof.function = fn_ptrs;

  /* Mappings. */
  size_t ngroups = 0, nmaps = 0;
  rc = ember__group_frames(p, NULL, EMBER__BY_MODULE | EMBER__BY_BUILD_ID, map_of, map_first,
                           &ngroups);
  if (rc != 0) goto cleanup;
  maps = ember_malloc(ngroups * sizeof *maps);
  map_ptrs = ember_malloc(ngroups * sizeof *map_ptrs);
  if (maps == NULL || map_ptrs == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  for (size_t g = 0; g < ngroups; g++) {
    const ember_frame_t *f = ember_profile_frame(p, map_first[g]);
    if (f->module == NULL && f->build_id == NULL) {
      map_id[g] = 0;
      continue;
    }
    pb_mapping_t *m = &maps[nmaps];
    perftools__profiles__mapping__init(m);
    m->id = nmaps + 1;
    rc = strtab_intern(&strs, f->module, &m->filename);
    if (rc == 0) rc = strtab_intern(&strs, f->build_id, &m->build_id);
    if (rc != 0) goto cleanup;
    map_id[g] = m->id;
    map_ptrs[nmaps++] = m;
  }
  for (size_t i = 0; i < nframes; i++) {
    const ember_frame_t *f = ember_profile_frame(p, (uint32_t)i);
    uint64_t id = map_id[map_of[i]];
    if (id == 0) continue;
    pb_mapping_t *m = &maps[id - 1];
    if (f->function != NULL && f->function[0] != '\0') m->has_functions = true;
    if (f->file != NULL && f->file[0] != '\0') m->has_filenames = true;
    if (f->line != 0) m->has_line_numbers = true;
  }
  prof.n_mapping = nmaps;
  prof.mapping = map_ptrs;

  /* Locations, one per frame. */
  locs = ember_malloc(nframes * sizeof *locs);
  loc_ptrs = ember_malloc(nframes * sizeof *loc_ptrs);
  lines = ember_malloc(nframes * sizeof *lines);
  line_ptrs = ember_malloc(nframes * sizeof *line_ptrs);
  if (locs == NULL || loc_ptrs == NULL || lines == NULL || line_ptrs == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  for (size_t i = 0; i < nframes; i++) {
    const ember_frame_t *f = ember_profile_frame(p, (uint32_t)i);
    perftools__profiles__line__init(&lines[i]);
    lines[i].function_id = (uint64_t)fn_of[i] + 1;
    lines[i].line = (int64_t)f->line;
    line_ptrs[i] = &lines[i];
    perftools__profiles__location__init(&locs[i]);
    locs[i].id = (uint64_t)i + 1;
    locs[i].mapping_id = map_id[map_of[i]];
    locs[i].address = f->address;
    locs[i].n_line = 1;
    locs[i].line = &line_ptrs[i];
    loc_ptrs[i] = &locs[i];
  }
  prof.n_location = nframes;
  prof.location = loc_ptrs;

  /* Samples. A stack with no value anywhere says nothing, so it is left
   * out. */
  size_t nsamples = 0, nids = 0;
  for (size_t s = 0; s < nstacks; s++) {
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(p, (uint32_t)s, NULL, &depth, &v);
    if (rc != 0) goto cleanup;
    bool any = false;
    for (size_t t = 0; t < ntypes; t++) any = any || v[t] != 0;
    if (!any) continue;
    nsamples++;
    nids += depth;
  }
  samples = ember_malloc(nsamples * sizeof *samples);
  sample_ptrs = ember_malloc(nsamples * sizeof *sample_ptrs);
  loc_ids = ember_malloc(nids * sizeof *loc_ids);
  values = ember_malloc(nsamples * ntypes * sizeof *values);
  if (samples == NULL || sample_ptrs == NULL || loc_ids == NULL || values == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  size_t si = 0, ii = 0;
  for (size_t s = 0; s < nstacks; s++) {
    const uint32_t *ids;
    const int64_t *v;
    size_t depth;
    rc = ember_profile_stack(p, (uint32_t)s, &ids, &depth, &v);
    if (rc != 0) goto cleanup;
    bool any = false;
    for (size_t t = 0; t < ntypes; t++) any = any || v[t] != 0;
    if (!any) continue;
    pb_sample_t *smp = &samples[si];
    perftools__profiles__sample__init(smp);
    /* Both pprof and Ember list a stack leaf first. */
    for (size_t d = 0; d < depth; d++) loc_ids[ii + d] = (uint64_t)ids[d] + 1;
    smp->n_location_id = depth;
    smp->location_id = &loc_ids[ii];
    memcpy(&values[si * ntypes], v, ntypes * sizeof *v);
    smp->n_value = ntypes;
    smp->value = &values[si * ntypes];
    sample_ptrs[si++] = smp;
    ii += depth;
  }
  prof.n_sample = nsamples;
  prof.sample = sample_ptrs;

  /* Time, period and the default type. */
  int64_t start_ns, end_ns;
  ember_profile_window(p, &start_ns, &end_ns);
  prof.time_nanos = start_ns;
  /* end >= start holds (set_window checks it), but the difference of two
   * arbitrary int64 values can still exceed INT64_MAX. */
  uint64_t duration = (uint64_t)end_ns - (uint64_t)start_ns;
  prof.duration_nanos = duration > INT64_MAX ? INT64_MAX : (int64_t)duration;
  if (ember_profile_period(p) > 0) {
    /* A heap profile's period is the mean bytes between samples, which
     * pprof calls "space" (as Go's heap profiles do); anything else
     * samples CPU time. */
    bool heap = true;
    for (size_t i = 0; i < ntypes && heap; i++) {
      ember_value_type_t vt = ember_profile_type(p, i);
      heap = vt == EMBER_VT_ALLOC_OBJECTS || vt == EMBER_VT_ALLOC_BYTES ||
             vt == EMBER_VT_INUSE_OBJECTS || vt == EMBER_VT_INUSE_BYTES;
    }
    perftools__profiles__value_type__init(&period_type);
    if (heap) {
      rc = strtab_intern(&strs, "space", &period_type.type);
      if (rc == 0) rc = strtab_intern(&strs, "bytes", &period_type.unit);
    } else {
      rc = strtab_intern(&strs, ember_value_type_name(EMBER_VT_CPU_NS), &period_type.type);
      if (rc == 0)
        rc = strtab_intern(&strs, ember_value_type_unit(EMBER_VT_CPU_NS), &period_type.unit);
    }
    if (rc != 0) goto cleanup;
    prof.period_type = &period_type;
    prof.period = ember_profile_period(p);
  }
  /* What pprof shows without -sample_index: in-use space (what a heap
   * profile is read for, as Go's default), else CPU time. */
  int dflt = ember_profile_type_index(p, EMBER_VT_INUSE_BYTES);
  if (dflt < 0) dflt = ember_profile_type_index(p, EMBER_VT_CPU_NS);
  if (dflt >= 0) prof.default_sample_type = types[dflt].type;

  /* Labels as comments. */
  size_t ncomments = 0;
  rc = label_notes(ember_profile_labels(p), &notes, &ncomments);
  if (rc != 0) goto cleanup;
  const char *note = notes.data;
  for (size_t i = 0; i < ncomments; i++) {
    rc = strtab_intern(&strs, note, &comments[i]);
    if (rc != 0) goto cleanup;
    note += strlen(note) + 1;
  }
  prof.n_comment = ncomments;
  prof.comment = comments;

  prof.n_string_table = strs.n;
  prof.string_table = strs.s;

  size_t size = perftools__profiles__profile__get_packed_size(&prof);
  packed = ember_malloc(size);
  if (packed == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  perftools__profiles__profile__pack(&prof, packed);
  rc = gzip_append(packed, size, out);

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  ember_free(packed);
  ember_free(values);
  ember_free(loc_ids);
  ember_free(sample_ptrs);
  ember_free(samples);
  ember_free(line_ptrs);
  ember_free(lines);
  ember_free(loc_ptrs);
  ember_free(locs);
  ember_free(map_ptrs);
  ember_free(maps);
  ember_free(fn_ptrs);
  ember_free(fns);
  ember_free(map_id);
  ember_free(map_first);
  ember_free(map_of);
  ember_free(fn_first);
  ember_free(fn_of);
  ember_buf_free(&notes);
  strtab_free(&strs);
  ember__names_free(&names);
  return rc;
}
