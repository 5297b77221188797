/* Wire v2 from a profile: the columns (ember_wire_from_profile) and their
 * encoding (ember_codec_encode_v2), include/ember/wire.h.
 *
 * Only frames that a stack uses become locations, so every location of a
 * message is used (the decoder insists). Strings, modules and functions
 * are tables keyed by the profile's interned pointers. Hashes are computed
 * here, once per string and per location, for the view; none travel (a
 * reader computes them from the content, docs/internals/codec.md).
 *
 * Order: a view for the store keeps first use. A message is laid out for
 * zstd (codec.md, "Sizes"): strings in byte order, front-coded; functions
 * in the order of their names; locations in the order of their functions,
 * then addresses. Each table's index column then grows by small steps, and
 * what is left to say (which location each stack names) is said once, in
 * the stacks. Thread-safe: no shared state. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codec_internal.h"
#include "ember/wire.h"
#include "ember_v2.pb-c.h"
#include "ptrtab.h"

typedef struct built {
  ember__wire_mem_t mem;
  ember_wire_t w;
  char *blob;
  uint32_t *str_off, *str_len, *mod_name, *mod_build_id, *fn_name, *fn_file, *fn_generated;
  uint32_t *loc_function, *loc_module, *loc_line, *loc_kind;
  uint64_t *loc_address, *loc_key;
  uint32_t *depth, *stack_off, *locs;
  int64_t *values;
  uint64_t *stack_key;
} built_t;

static void built_release(ember__wire_mem_t *m) {
  built_t *b = (built_t *)m;
  void *arrays[] = {b->blob,      b->str_off,  b->str_len,      b->mod_name,     b->mod_build_id,
                    b->fn_name,   b->fn_file,  b->fn_generated, b->loc_function, b->loc_module,
                    b->loc_line,  b->loc_kind, b->loc_address,  b->loc_key,      b->depth,
                    b->stack_off, b->locs,     b->values,       b->stack_key};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) ember_free(arrays[i]);
  ember_free(b);
}

/* ember_malloc of n elements of `size` (at least one, so that an empty
 * table is still a valid pointer). */
static void *alloc_n(size_t n, size_t size) {
  if (n > SIZE_MAX / size) return NULL;
  return ember_malloc((n ? n : 1) * size);
}

static int str_idx(ember__ptrtab_t *t, const char *s, uint32_t *idx) {
  if (s == NULL || s[0] == '\0') {
    *idx = 0;
    return 0;
  }
  return ember__ptrtab_get(t, s, NULL, NULL, idx);
}

/* One string of the table, for sorting it. */
typedef struct sorted_str {
  const char *s;
  uint32_t n, idx;
} sorted_str_t;

static int str_cmp(const void *x, const void *y) {
  const sorted_str_t *a = x, *b = y;
  int c = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
  return c ? c : (a->n > b->n) - (a->n < b->n);
}

/* A function or a location, for putting a message's tables in order. */
typedef struct sort_key {
  uint64_t k[4]; /* compared in turn */
  uint32_t idx;  /* where it was: last, so the order is total */
} sort_key_t;

static int key_cmp(const void *x, const void *y) {
  const sort_key_t *a = x, *b = y;
  for (int i = 0; i < 4; i++)
    if (a->k[i] != b->k[i]) return a->k[i] < b->k[i] ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* a[i] = old[keys[i].idx] for n entries, through `tmp`. */
static void permute32(uint32_t *a, const sort_key_t *keys, size_t n, uint32_t *tmp) {
  for (size_t i = 0; i < n; i++) tmp[i] = a[keys[i].idx];
  memcpy(a, tmp, n * sizeof *a);
}

/* Functions in the order of their names (then files, generated names),
 * locations in the order of their functions (then modules, addresses,
 * lines, kinds); loc_of follows the locations. The strings are sorted
 * already, so a string index orders as its text. */
static int order_tables(built_t *b, size_t nf, size_t nl, uint32_t *loc_of, size_t nframes) {
  size_t n = nf > nl ? nf : nl;
  sort_key_t *keys = alloc_n(n, sizeof *keys);
  uint32_t *rank = alloc_n(n, sizeof *rank), *tmp = alloc_n(n, sizeof *tmp);
  uint64_t *addr = alloc_n(nl, sizeof *addr);
  int rc = -ENOMEM;
  if (keys == NULL || rank == NULL || tmp == NULL || addr == NULL) goto cleanup;
  for (uint32_t i = 0; i < nf; i++)
    keys[i] = (sort_key_t){
        {b->fn_name[i], b->fn_file[i], b->fn_generated ? b->fn_generated[i] : 0, 0}, i};
  qsort(keys, nf, sizeof *keys, key_cmp);
  for (uint32_t i = 0; i < nf; i++) rank[keys[i].idx] = i;
  permute32(b->fn_name, keys, nf, tmp);
  permute32(b->fn_file, keys, nf, tmp);
  if (b->fn_generated) permute32(b->fn_generated, keys, nf, tmp);
  for (size_t i = 0; i < nl; i++)
    if (b->loc_function[i]) b->loc_function[i] = rank[b->loc_function[i] - 1] + 1;

  for (uint32_t i = 0; i < nl; i++)
    keys[i] = (sort_key_t){{b->loc_function[i], b->loc_module[i], b->loc_address[i],
                            (uint64_t)b->loc_line[i] << 32 | b->loc_kind[i]},
                           i};
  qsort(keys, nl, sizeof *keys, key_cmp);
  for (uint32_t i = 0; i < nl; i++) rank[keys[i].idx] = i;
  permute32(b->loc_function, keys, nl, tmp);
  permute32(b->loc_module, keys, nl, tmp);
  permute32(b->loc_line, keys, nl, tmp);
  permute32(b->loc_kind, keys, nl, tmp);
  for (size_t i = 0; i < nl; i++) addr[i] = b->loc_address[keys[i].idx];
  memcpy(b->loc_address, addr, nl * sizeof *addr);
  for (size_t f = 0; f < nframes; f++)
    if (loc_of[f] != UINT32_MAX) loc_of[f] = rank[loc_of[f]];
  rc = 0;
cleanup:
  ember_free(keys);
  ember_free(rank);
  ember_free(tmp);
  ember_free(addr);
  return rc;
}

/* Columns of `p` into `b`. With `for_wire`, in the order a message wants
 * (the header); else in order of first use. */
static int build(const ember_profile_t *p, built_t *b, bool for_wire) {
  ember_wire_t *w = &b->w;
  int rc = -ENOMEM;
  ember__ptrtab_t strings = {0}, modules = {0}, functions = {0};
  uint32_t *loc_of = NULL;    /* profile frame id -> location index (UINT32_MAX: unused) */
  uint32_t *frame_of = NULL;  /* location index -> profile frame id */
  sorted_str_t *order = NULL; /* new index -> string */
  uint32_t *rank = NULL;      /* table index -> new index */
  size_t nframes = ember_profile_nframes(p), nstacks = ember_profile_nstacks(p);
  size_t ntypes = ember_profile_ntypes(p), nlocs = 0, nused = 0;

  w->ntypes = ntypes;
  for (size_t i = 0; i < ntypes; i++) w->types[i] = ember_profile_type(p, i);

  loc_of = alloc_n(nframes, sizeof *loc_of);
  frame_of = alloc_n(nframes, sizeof *frame_of);
  if (loc_of == NULL || frame_of == NULL) goto cleanup;
  if (nframes) memset(loc_of, 0xff, nframes * sizeof *loc_of);
  for (uint32_t s = 0; s < nstacks; s++) {
    const uint32_t *ids;
    size_t depth;
    ember_profile_stack(p, s, &ids, &depth, NULL);
    nlocs += depth;
    for (size_t d = 0; d < depth; d++) {
      if (loc_of[ids[d]] != UINT32_MAX) continue;
      loc_of[ids[d]] = (uint32_t)nused;
      frame_of[nused++] = ids[d];
    }
  }

  /* Tables: strings (entry 0 is ""), modules, functions. */
  if (ember__ptrtab_get(&strings, "", NULL, NULL, &(uint32_t){0}) != 0) goto cleanup;
  b->loc_function = alloc_n(nused, sizeof *b->loc_function);
  b->loc_module = alloc_n(nused, sizeof *b->loc_module);
  b->loc_line = alloc_n(nused, sizeof *b->loc_line);
  b->loc_kind = alloc_n(nused, sizeof *b->loc_kind);
  b->loc_address = alloc_n(nused, sizeof *b->loc_address);
  if (!b->loc_function || !b->loc_module || !b->loc_line || !b->loc_kind || !b->loc_address)
    goto cleanup;
  bool generated = false; /* whether any function has a generated name */
  for (size_t i = 0; i < nused; i++) {
    const ember_frame_t *f = ember_profile_frame(p, frame_of[i]);
    uint32_t x, y, z, idx;
    b->loc_module[i] = 0;
    b->loc_function[i] = 0;
    if ((f->module && f->module[0]) || (f->build_id && f->build_id[0])) {
      if (str_idx(&strings, f->module, &x) || str_idx(&strings, f->build_id, &y) ||
          ember__ptrtab_get(&modules, f->module, f->build_id, NULL, &idx))
        goto cleanup;
      b->loc_module[i] = idx + 1;
    }
    if ((f->function && f->function[0]) || (f->file && f->file[0]) ||
        (f->generated && f->generated[0])) {
      if (str_idx(&strings, f->function, &x) || str_idx(&strings, f->file, &y) ||
          str_idx(&strings, f->generated, &z))
        goto cleanup;
      const char *g = z != 0 ? f->generated : NULL;
      generated |= g != NULL;
      if (ember__ptrtab_get(&functions, f->function, f->file, g, &idx)) goto cleanup;
      b->loc_function[i] = idx + 1;
    }
    b->loc_address[i] = f->address;
    b->loc_line[i] = f->line;
    b->loc_kind[i] = (uint32_t)f->kind;
  }
  size_t ns = strings.n, nm = modules.n, nf = functions.n;
  b->str_off = alloc_n(ns, sizeof *b->str_off);
  b->str_len = alloc_n(ns, sizeof *b->str_len);
  b->mod_name = alloc_n(nm, sizeof *b->mod_name);
  b->mod_build_id = alloc_n(nm, sizeof *b->mod_build_id);
  b->fn_name = alloc_n(nf, sizeof *b->fn_name);
  b->fn_file = alloc_n(nf, sizeof *b->fn_file);
  if (generated) b->fn_generated = alloc_n(nf, sizeof *b->fn_generated);
  if (!b->str_off || !b->str_len || !b->mod_name || !b->mod_build_id || !b->fn_name ||
      !b->fn_file || (generated && !b->fn_generated))
    goto cleanup;
  order = alloc_n(ns, sizeof *order);
  rank = alloc_n(ns, sizeof *rank);
  if (order == NULL || rank == NULL) goto cleanup;
  for (size_t i = 0; i < ns; i++) {
    const char *s = ember__ptrtab_key(&strings, i, 0);
    /* profile strings are at most EMBER_MAX_STRING */
    order[i] = (sorted_str_t){s, i == 0 ? 0 : (uint32_t)ember_profile_string_len(s), (uint32_t)i};
  }
  if (for_wire && ns > 2) qsort(order + 1, ns - 1, sizeof *order, str_cmp); /* "" stays first */
  size_t blen = 0;
  for (size_t i = 0; i < ns; i++) {
    rank[order[i].idx] = (uint32_t)i;
    b->str_off[i] = (uint32_t)blen;
    b->str_len[i] = order[i].n;
    blen += order[i].n;
    if (blen > UINT32_MAX) {
      rc = EMBER_ETOOBIG;
      goto cleanup;
    }
  }
  b->blob = alloc_n(blen, 1);
  if (b->blob == NULL) goto cleanup;
  for (size_t i = 0; i < ns; i++)
    if (b->str_len[i]) memcpy(b->blob + b->str_off[i], order[i].s, b->str_len[i]);
  /* Already in the string table, so these lookups cannot allocate. */
  for (size_t i = 0; i < nm; i++)
    if (str_idx(&strings, ember__ptrtab_key(&modules, i, 0), &b->mod_name[i]) ||
        str_idx(&strings, ember__ptrtab_key(&modules, i, 1), &b->mod_build_id[i]))
      goto cleanup;
  for (size_t i = 0; i < nf; i++)
    if (str_idx(&strings, ember__ptrtab_key(&functions, i, 0), &b->fn_name[i]) ||
        str_idx(&strings, ember__ptrtab_key(&functions, i, 1), &b->fn_file[i]) ||
        (generated && str_idx(&strings, ember__ptrtab_key(&functions, i, 2), &b->fn_generated[i])))
      goto cleanup;
  for (size_t i = 0; i < nm; i++) {
    b->mod_name[i] = rank[b->mod_name[i]];
    b->mod_build_id[i] = rank[b->mod_build_id[i]];
  }
  for (size_t i = 0; i < nf; i++) {
    b->fn_name[i] = rank[b->fn_name[i]];
    b->fn_file[i] = rank[b->fn_file[i]];
    if (generated) b->fn_generated[i] = rank[b->fn_generated[i]];
  }
  if (for_wire && (rc = order_tables(b, nf, nused, loc_of, nframes)) != 0) goto cleanup;
  rc = -ENOMEM;

  w->blob = b->blob;
  w->str_off = b->str_off;
  w->str_len = b->str_len;
  w->nstrings = ns;
  w->mod_name = b->mod_name;
  w->mod_build_id = b->mod_build_id;
  w->nmodules = nm;
  w->fn_name = b->fn_name;
  w->fn_file = b->fn_file;
  w->fn_generated = b->fn_generated;
  w->nfunctions = nf;
  w->loc_function = b->loc_function;
  w->loc_module = b->loc_module;
  w->loc_line = b->loc_line;
  w->loc_kind = b->loc_kind;
  w->loc_address = b->loc_address;
  w->nlocations = nused;

  b->depth = alloc_n(nstacks, sizeof *b->depth);
  b->stack_off = alloc_n(nstacks, sizeof *b->stack_off);
  b->locs = alloc_n(nlocs, sizeof *b->locs);
  b->values = nstacks > SIZE_MAX / EMBER_MAX_VALUE_TYPES
                  ? NULL
                  : alloc_n(nstacks * ntypes, sizeof *b->values);
  if (!b->depth || !b->stack_off || !b->locs || !b->values) goto cleanup;
  size_t at = 0;
  for (uint32_t s = 0; s < nstacks; s++) {
    const uint32_t *ids;
    size_t depth;
    const int64_t *values;
    ember_profile_stack(p, s, &ids, &depth, &values);
    b->depth[s] = (uint32_t)depth; /* at most EMBER_MAX_STACK_DEPTH */
    b->stack_off[s] = (uint32_t)at;
    for (size_t d = 0; d < depth; d++) b->locs[at + d] = loc_of[ids[d]];
    at += depth;
    memcpy(&b->values[(size_t)s * ntypes], values, ntypes * sizeof *values);
  }
  w->depth = b->depth;
  w->stack_off = b->stack_off;
  w->locs = b->locs;
  w->values = b->values;
  w->nsamples = nstacks;
  w->nlocs = nlocs;
  /* Keys for the store; a message carries none. */
  if (!for_wire) {
    b->loc_key = alloc_n(nused, sizeof *b->loc_key);
    b->stack_key = alloc_n(nstacks, sizeof *b->stack_key);
    if (!b->loc_key || !b->stack_key || ember__wire_key_locations(w, b->loc_key) != 0) goto cleanup;
    for (size_t s = 0; s < nstacks; s++)
      b->stack_key[s] = ember__wire_stack_key_of(w, b->loc_key, s);
    w->loc_key = b->loc_key;
    w->stack_key = b->stack_key;
  }
  rc = 0;
cleanup:
  ember_free(loc_of);
  ember_free(frame_of);
  ember_free(order);
  ember_free(rank);
  ember__ptrtab_free(&strings);
  ember__ptrtab_free(&modules);
  ember__ptrtab_free(&functions);
  return rc;
}

static int from_profile(const ember_profile_t *p, bool for_wire, ember_wire_t **out) {
  built_t *b = ember_calloc(1, sizeof *b);
  if (b == NULL) return -ENOMEM;
  b->mem.release = built_release;
  ember_wire_t *w = &b->w;
  w->priv = &b->mem;
  w->version = 1;
  w->hashes_checked = true; /* no hashes sent */
  w->agent_id = ember_profile_agent_id(p);
  w->session_id = ember_profile_session_id(p);
  w->seq = ember_profile_seq(p);
  w->labels = *ember_profile_labels(p);
  ember_profile_window(p, &w->start_ns, &w->end_ns);
  w->period_ns = ember_profile_period(p);
  int rc = build(p, b, for_wire);
  if (rc != 0) {
    built_release(&b->mem);
    return rc;
  }
  *out = w;
  return 0;
}

int ember_wire_from_profile(const ember_profile_t *p, ember_wire_t **out) {
  if (p == NULL || out == NULL) return -EINVAL;
  return from_profile(p, false, out);
}

/* d[i] = a[i] - a[i - 1] (a[-1] = 0). Indices are below 2^31: the
 * limits bound every table far below that. */
static void delta32(const uint32_t *a, size_t n, int32_t *d) {
  for (size_t i = 0; i < n; i++) d[i] = (int32_t)((int64_t)a[i] - (i ? (int64_t)a[i - 1] : 0));
}

static char *wire_text(const char *s) { return (char *)(uintptr_t)(s ? s : ""); }

/* Field 30 (fixed32) = EMBER__WIRE_END_MARK: its key (30 << 3 | 5, as a
 * varint) and the value, little-endian. */
static const char end_mark[6] = {(char)0xf5, 0x01, 0x52, 0x42, 0x4d, 0x45};
_Static_assert(EMBER__WIRE_END_MARK == 0x454d4252u, "end_mark's bytes");

int ember_codec_encode_v2(const ember_profile_t *p, ember_buf_t *out) {
  if (p == NULL || out == NULL) return -EINVAL;
  ember_wire_t *w = NULL;
  int rc = from_profile(p, true, &w);
  if (rc != 0) return rc;
  Ember__Wire__V2__Profile m;
  ember__wire__v2__profile__init(&m);
  uint32_t types[EMBER_MAX_VALUE_TYPES];
  for (size_t i = 0; i < w->ntypes; i++) types[i] = (uint32_t)w->types[i];
  m.version = EMBER_WIRE_V2;
  m.agent_id = wire_text(w->agent_id);
  m.seq = w->seq;
  m.session_id = wire_text(w->session_id);
  m.worker = wire_text(w->labels.worker);
  m.worker_version = wire_text(w->labels.version);
  m.host = wire_text(w->labels.host);
  m.actor = wire_text(w->labels.actor);
  m.pid = w->labels.pid;
  m.window_start_ns = w->start_ns;
  m.window_end_ns = w->end_ns;
  m.period_ns = w->period_ns;
  m.n_value_types = w->ntypes;
  m.value_types = types;
  /* protobuf-c does not write through these pointers when packing. */
  /* Front coding: each string without what it shares with the one before
   * (sorted, so ~40% of the strings' bytes; docs/internals/codec.md). */
  uint32_t *pre = alloc_n(w->nstrings, sizeof *pre), *suf = alloc_n(w->nstrings, sizeof *suf);
  char *blob =
      alloc_n(w->nstrings ? w->str_off[w->nstrings - 1] + w->str_len[w->nstrings - 1] : 0, 1);
  m.n_module_name = m.n_module_build_id = w->nmodules;
  m.module_name = (uint32_t *)(uintptr_t)w->mod_name;
  m.module_build_id = (uint32_t *)(uintptr_t)w->mod_build_id;
  m.n_function_name = m.n_function_file = w->nfunctions;
  m.function_file = (uint32_t *)(uintptr_t)w->fn_file;
  if (w->fn_generated != NULL) {
    m.n_function_generated = w->nfunctions;
    m.function_generated = (uint32_t *)(uintptr_t)w->fn_generated;
  }
  /* No hashes: a reader computes them from the content anyway (codec.md,
   * "Hashes"). */
  m.n_location_function = m.n_location_module = m.n_location_address = m.n_location_line =
      m.n_location_kind = w->nlocations;
  m.location_module = (uint32_t *)(uintptr_t)w->loc_module;
  m.location_line = (uint32_t *)(uintptr_t)w->loc_line;
  m.location_kind = (uint32_t *)(uintptr_t)w->loc_kind;
  m.n_sample_depth = w->nsamples;
  m.sample_depth = (uint32_t *)(uintptr_t)w->depth;
  m.n_sample_locations = w->nlocs;
  m.n_sample_values = w->nsamples * w->ntypes;
  m.sample_values = (int64_t *)(uintptr_t)w->values;
  /* end_mark stays 0, so protobuf-c leaves it out: it goes after field 31,
   * below. */
  /* The delta columns. */
  int32_t *dfn = alloc_n(w->nfunctions, sizeof *dfn), *dlf = alloc_n(w->nlocations, sizeof *dlf);
  int32_t *dlocs = alloc_n(w->nlocs, sizeof *dlocs);
  int64_t *daddr = alloc_n(w->nlocations, sizeof *daddr);
  if (dfn == NULL || dlf == NULL || dlocs == NULL || daddr == NULL || pre == NULL || suf == NULL ||
      blob == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  size_t blen = 0;
  for (size_t i = 0; i < w->nstrings; i++) {
    const char *s = w->blob + w->str_off[i];
    uint32_t n = w->str_len[i], k = 0;
    if (i > 0) {
      const char *q = w->blob + w->str_off[i - 1];
      uint32_t qn = w->str_len[i - 1];
      while (k < n && k < qn && s[k] == q[k]) k++;
    }
    pre[i] = k;
    suf[i] = n - k;
    memcpy(blob + blen, s + k, n - k);
    blen += n - k;
  }
  m.strings.len = blen;
  m.strings.data = (uint8_t *)blob;
  m.n_string_lengths = m.n_string_prefix = w->nstrings;
  m.string_lengths = suf;
  m.string_prefix = pre;
  delta32(w->fn_name, w->nfunctions, dfn);
  delta32(w->loc_function, w->nlocations, dlf);
  delta32(w->locs, w->nlocs, dlocs);
  for (size_t i = 0; i < w->nlocations; i++)
    daddr[i] = (int64_t)(w->loc_address[i] - (i ? w->loc_address[i - 1] : 0));
  m.function_name = dfn;
  m.location_function = dlf;
  m.sample_locations = dlocs;
  m.location_address = daddr;
  char *at;
  size_t n = ember__wire__v2__profile__get_packed_size(&m);
  rc = ember_buf_extend(out, n + sizeof end_mark, &at);
  if (rc == 0) {
    ember__wire__v2__profile__pack(&m, (uint8_t *)at);
    memcpy(at + n, end_mark, sizeof end_mark);
  }
cleanup:
  ember_free(dfn);
  ember_free(dlf);
  ember_free(dlocs);
  ember_free(daddr);
  ember_free(pre);
  ember_free(suf);
  ember_free(blob);
  ember_wire_free(w);
  return rc;
}
