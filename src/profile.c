/* The profile model. See include/ember/profile.h for the contract and
 * docs/internals/profile.md for the layout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "ember/profile.h"
#include "htab.h"

/* Interned strings live in an arena of blocks that never move, so frames
 * can hold plain `const char *` into it and equal strings are equal
 * pointers. */
typedef struct arena_block {
  struct arena_block *next;
  size_t used;
  size_t size;
  _Alignas(8) char data[];
} arena_block_t;

/* Every interned string is stored behind this header, so that a frame's
 * string pointer leads to its length and content hash in O(1) (the frame
 * hash and ember_profile_string_len need both). */
typedef struct str_hdr {
  uint64_t hash;
  size_t len;
} str_hdr_t;

static const str_hdr_t *str_hdr_of(const char *s) {
  return (const str_hdr_t *)(const void *)(s - sizeof(str_hdr_t));
}

typedef struct str_entry {
  const char *s;
  size_t len;
  uint64_t hash;
} str_entry_t;

typedef struct stack_entry {
  size_t off; /* into ids */
  uint32_t depth;
  uint64_t hash;
} stack_entry_t;

struct ember_profile {
  ember_value_type_t types[EMBER_MAX_VALUE_TYPES];
  size_t ntypes;

  char *label_strs[4]; /* owned copies behind `labels` */
  ember_labels_t labels;
  int64_t start_ns, end_ns, period_ns;
  char *agent_id, *session_id;
  uint64_t seq;

  arena_block_t *arena;
  str_entry_t *strs;
  size_t nstrs, capstrs;
  ember__htab_t str_index;

  ember_frame_t *frames;
  uint64_t *frame_hashes;
  size_t nframes, capframes;
  ember__htab_t frame_index;

  stack_entry_t *stacks;
  int64_t *values; /* nstacks * ntypes */
  size_t nstacks, capstacks;
  uint32_t *ids; /* frame ids of all stacks, back to back */
  size_t nids, capids;
  ember__htab_t stack_index;
};

const char *ember_value_type_name(ember_value_type_t vt) {
  switch (vt) {
  case EMBER_VT_CPU_SAMPLES: return "samples";
  case EMBER_VT_CPU_NS: return "cpu";
  case EMBER_VT_ALLOC_OBJECTS: return "alloc_objects";
  case EMBER_VT_ALLOC_BYTES: return "alloc_space";
  case EMBER_VT_INUSE_OBJECTS: return "inuse_objects";
  case EMBER_VT_INUSE_BYTES: return "inuse_space";
  }
  return NULL;
}

const char *ember_value_type_unit(ember_value_type_t vt) {
  switch (vt) {
  case EMBER_VT_CPU_SAMPLES: return "count";
  case EMBER_VT_CPU_NS: return "nanoseconds";
  case EMBER_VT_ALLOC_OBJECTS: return "count";
  case EMBER_VT_ALLOC_BYTES: return "bytes";
  case EMBER_VT_INUSE_OBJECTS: return "count";
  case EMBER_VT_INUSE_BYTES: return "bytes";
  }
  return NULL;
}

bool ember_value_type_is_gauge(ember_value_type_t vt) {
  return vt == EMBER_VT_INUSE_OBJECTS || vt == EMBER_VT_INUSE_BYTES;
}

size_t ember_frame_name(const ember_frame_t *f, char *buf, size_t size) {
  int n;
  if (f->function != NULL && f->function[0] != '\0') {
    n = snprintf(buf, size, "%s", f->function);
  } else if (f->module != NULL && f->module[0] != '\0') {
    /* Only the file name: the full path makes flamegraphs unreadable and
     * the frame's module field still has it. */
    const char *base = strrchr(f->module, '/');
    base = base && base[1] ? base + 1 : f->module;
    n = snprintf(buf, size, "%s+0x%llx", base, (unsigned long long)f->address);
  } else {
    n = snprintf(buf, size, "[unknown]");
  }
  return n < 0 ? 0 : (size_t)n;
}

int ember_profile_new(const ember_value_type_t *types, size_t ntypes, ember_profile_t **out) {
  if (types == NULL || out == NULL || ntypes == 0 || ntypes > EMBER_MAX_VALUE_TYPES) return -EINVAL;
  for (size_t i = 0; i < ntypes; i++) {
    if (ember_value_type_name(types[i]) == NULL) return -EINVAL;
    for (size_t j = 0; j < i; j++) {
      if (types[j] == types[i]) return -EINVAL;
    }
  }
  ember_profile_t *p = ember_calloc(1, sizeof *p);
  if (p == NULL) return -ENOMEM;
  memcpy(p->types, types, ntypes * sizeof *types);
  p->ntypes = ntypes;
  ember__htab_init(&p->str_index);
  ember__htab_init(&p->frame_index);
  ember__htab_init(&p->stack_index);
  *out = p;
  return 0;
}

void ember_profile_free(ember_profile_t *p) {
  if (p == NULL) return;
  for (size_t i = 0; i < 4; i++) ember_free(p->label_strs[i]);
  ember_free(p->agent_id);
  ember_free(p->session_id);
  while (p->arena != NULL) {
    arena_block_t *next = p->arena->next;
    ember_free(p->arena);
    p->arena = next;
  }
  ember_free(p->strs);
  ember__htab_free(&p->str_index);
  ember_free(p->frames);
  ember_free(p->frame_hashes);
  ember__htab_free(&p->frame_index);
  ember_free(p->stacks);
  ember_free(p->values);
  ember_free(p->ids);
  ember__htab_free(&p->stack_index);
  ember_free(p);
}

size_t ember_profile_ntypes(const ember_profile_t *p) { return p->ntypes; }

ember_value_type_t ember_profile_type(const ember_profile_t *p, size_t i) {
  return i < p->ntypes ? p->types[i] : (ember_value_type_t)0;
}

int ember_profile_type_index(const ember_profile_t *p, ember_value_type_t vt) {
  for (size_t i = 0; i < p->ntypes; i++) {
    if (p->types[i] == vt) return (int)i;
  }
  return -1;
}

/* Replace an owned string with a copy of `s` (NULL clears). */
static int set_str(char **dst, const char *s) {
  char *c = NULL;
  if (s != NULL) {
    c = ember_strdup(s);
    if (c == NULL) return -ENOMEM;
  }
  ember_free(*dst);
  *dst = c;
  return 0;
}

int ember_profile_set_labels(ember_profile_t *p, const ember_labels_t *l) {
  if (p == NULL || l == NULL) return -EINVAL;
  const char *src[4] = {l->worker, l->version, l->host, l->actor};
  char *copy[4] = {NULL, NULL, NULL, NULL};
  for (size_t i = 0; i < 4; i++) {
    if (src[i] == NULL) continue;
    copy[i] = ember_strdup(src[i]);
    if (copy[i] == NULL) {
      for (size_t j = 0; j < i; j++) ember_free(copy[j]);
      return -ENOMEM;
    }
  }
  for (size_t i = 0; i < 4; i++) {
    ember_free(p->label_strs[i]);
    p->label_strs[i] = copy[i];
  }
  p->labels = (ember_labels_t){copy[0], copy[1], copy[2], copy[3], l->pid};
  return 0;
}

const ember_labels_t *ember_profile_labels(const ember_profile_t *p) { return &p->labels; }

int ember_profile_set_window(ember_profile_t *p, int64_t start_ns, int64_t end_ns) {
  if (p == NULL || end_ns < start_ns) return -EINVAL;
  p->start_ns = start_ns;
  p->end_ns = end_ns;
  return 0;
}

void ember_profile_window(const ember_profile_t *p, int64_t *start_ns, int64_t *end_ns) {
  if (start_ns) *start_ns = p->start_ns;
  if (end_ns) *end_ns = p->end_ns;
}

void ember_profile_set_period(ember_profile_t *p, int64_t period_ns) {
  p->period_ns = period_ns < 0 ? 0 : period_ns;
}

int64_t ember_profile_period(const ember_profile_t *p) { return p->period_ns; }

int ember_profile_set_origin(ember_profile_t *p, const char *agent_id, uint64_t seq,
                             const char *session_id) {
  if (p == NULL) return -EINVAL;
  char *a = NULL, *s = NULL;
  if (set_str(&a, agent_id) != 0 || set_str(&s, session_id) != 0) {
    ember_free(a);
    ember_free(s);
    return -ENOMEM;
  }
  ember_free(p->agent_id);
  ember_free(p->session_id);
  p->agent_id = a;
  p->session_id = s;
  p->seq = seq;
  return 0;
}

const char *ember_profile_agent_id(const ember_profile_t *p) { return p->agent_id; }
uint64_t ember_profile_seq(const ember_profile_t *p) { return p->seq; }
const char *ember_profile_session_id(const ember_profile_t *p) { return p->session_id; }

/* --- strings --- */

typedef struct str_key {
  const ember_profile_t *p;
  const char *s;
  size_t len;
} str_key_t;

static bool str_eq(const void *ctx, uint32_t idx) {
  const str_key_t *k = ctx;
  const str_entry_t *e = &k->p->strs[idx];
  return e->len == k->len && memcmp(e->s, k->s, k->len) == 0;
}

static uint64_t str_hash(const void *ctx, uint32_t idx) {
  const str_key_t *k = ctx;
  return k->p->strs[idx].hash;
}

static char *arena_alloc(ember_profile_t *p, size_t n) {
  arena_block_t *b = p->arena;
  if (b == NULL || b->size - b->used < n) {
    size_t size = n > 16384 ? n : 16384;
    b = ember_malloc(sizeof *b + size);
    if (b == NULL) return NULL;
    b->used = 0;
    b->size = size;
    /* A block made for one large string goes behind the current one so the
     * current block's free space is not abandoned. */
    if (p->arena != NULL && n > 16384) {
      b->next = p->arena->next;
      p->arena->next = b;
    } else {
      b->next = p->arena;
      p->arena = b;
    }
  }
  char *s = b->data + b->used;
  b->used += n;
  return s;
}

static uint64_t str_content_hash(const char *s, size_t len) {
  return ember__hash_bytes(s, len, 0x5eed);
}

/* Intern the `len` bytes at `s` (no NUL among them, len <= EMBER_MAX_STRING). */
static int intern_len(ember_profile_t *p, const char *s, size_t len, const char **out) {
  str_key_t key = {p, s, len};
  uint64_t h = str_content_hash(s, len);
  int64_t found = ember__htab_find(&p->str_index, h, str_eq, &key);
  if (found >= 0) {
    *out = p->strs[found].s;
    return 0;
  }
  if (ember__grow(&p->strs, &p->capstrs, p->nstrs + 1, sizeof *p->strs) != 0) return -ENOMEM;
  /* Header, bytes and NUL, rounded up so the next header is aligned. */
  size_t need = (sizeof(str_hdr_t) + len + 1 + 7) & ~(size_t)7;
  char *c = arena_alloc(p, need);
  if (c == NULL) return -ENOMEM;
  memcpy(c, &(str_hdr_t){h, len}, sizeof(str_hdr_t));
  c += sizeof(str_hdr_t);
  memcpy(c, s, len);
  c[len] = '\0';
  p->strs[p->nstrs] = (str_entry_t){c, len, h};
  /* The arena bytes are not returned on failure; they are freed with the
   * profile, and only an allocation failure can leave them unused. */
  if (ember__htab_insert(&p->str_index, h, (uint32_t)p->nstrs, str_hash, &key) != 0) return -ENOMEM;
  p->nstrs++;
  *out = c;
  return 0;
}

/* Intern `s` (NULL stays NULL). Strings over EMBER_MAX_STRING are cut, at a
 * byte boundary: names that long are garbage anyway and must not let one
 * frame hold megabytes. */
static int intern_str(ember_profile_t *p, const char *s, const char **out) {
  if (s == NULL) {
    *out = NULL;
    return 0;
  }
  return intern_len(p, s, strnlen(s, EMBER_MAX_STRING), out);
}

int ember_profile_intern_string(ember_profile_t *p, const char *s, size_t len, const char **out) {
  if (p == NULL || s == NULL || out == NULL) return -EINVAL;
  return intern_len(p, s, strnlen(s, len < EMBER_MAX_STRING ? len : EMBER_MAX_STRING), out);
}

size_t ember_profile_string_len(const char *s) { return s == NULL ? 0 : str_hdr_of(s)->len; }

/* --- frames --- */

typedef struct frame_key {
  const ember_profile_t *p;
  const ember_frame_t *f; /* with interned strings */
} frame_key_t;

static uint64_t str_hash_or_0(const char *s) { return s == NULL ? 0 : str_hdr_of(s)->hash; }

/* Hashes the content, not the pointers (the strings' content hashes are in
 * their headers), so equal frames of different profiles hash the same and
 * ember_profile_frame_hash can hand this value out. */
static uint64_t frame_hash_of(const ember_frame_t *f) {
  uint64_t h = 0xf4a3e;
  h = ember__hash_mix(h, str_hash_or_0(f->function));
  h = ember__hash_mix(h, str_hash_or_0(f->file));
  h = ember__hash_mix(h, str_hash_or_0(f->module));
  h = ember__hash_mix(h, str_hash_or_0(f->build_id));
  if (f->generated != NULL) h = ember__hash_mix(h, str_hash_or_0(f->generated));
  h = ember__hash_mix(h, f->address);
  h = ember__hash_mix(h, ((uint64_t)f->line << 8) | (uint64_t)f->kind);
  return h;
}

static bool frame_eq(const void *ctx, uint32_t idx) {
  const frame_key_t *k = ctx;
  const ember_frame_t *a = &k->p->frames[idx], *b = k->f;
  /* Interned strings compare by pointer. */
  return a->function == b->function && a->file == b->file && a->module == b->module &&
         a->build_id == b->build_id && a->generated == b->generated && a->address == b->address &&
         a->line == b->line && a->kind == b->kind;
}

static uint64_t frame_rehash(const void *ctx, uint32_t idx) {
  const frame_key_t *k = ctx;
  return k->p->frame_hashes[idx];
}

/* Intern `c`, whose strings are already interned in p. */
static int intern_frame(ember_profile_t *p, const ember_frame_t *c, uint32_t *id) {
  frame_key_t key = {p, c};
  uint64_t h = frame_hash_of(c);
  int64_t found = ember__htab_find(&p->frame_index, h, frame_eq, &key);
  if (found >= 0) {
    *id = (uint32_t)found;
    return 0;
  }
  if (p->nframes >= UINT32_MAX - 1) return -ENOMEM;
  size_t cap = p->capframes;
  if (ember__grow(&p->frames, &cap, p->nframes + 1, sizeof *p->frames) != 0) return -ENOMEM;
  cap = p->capframes;
  if (ember__grow(&p->frame_hashes, &cap, p->nframes + 1, sizeof *p->frame_hashes) != 0)
    return -ENOMEM;
  p->capframes = cap;
  p->frames[p->nframes] = *c;
  p->frame_hashes[p->nframes] = h;
  if (ember__htab_insert(&p->frame_index, h, (uint32_t)p->nframes, frame_rehash, &key) != 0)
    return -ENOMEM;
  *id = (uint32_t)p->nframes++;
  return 0;
}

int ember_profile_intern_frame(ember_profile_t *p, const ember_frame_t *f, uint32_t *id) {
  if (p == NULL || f == NULL || id == NULL || (unsigned)f->kind > EMBER_FRAME_KIND_MAX)
    return -EINVAL;
  ember_frame_t c = *f;
  if (intern_str(p, f->function, &c.function) != 0 || intern_str(p, f->file, &c.file) != 0 ||
      intern_str(p, f->module, &c.module) != 0 || intern_str(p, f->build_id, &c.build_id) != 0 ||
      intern_str(p, f->generated, &c.generated) != 0)
    return -ENOMEM;
  return intern_frame(p, &c, id);
}

int ember_profile_intern_frame_interned(ember_profile_t *p, const ember_frame_t *f, uint32_t *id) {
  if (p == NULL || f == NULL || id == NULL || (unsigned)f->kind > EMBER_FRAME_KIND_MAX)
    return -EINVAL;
  return intern_frame(p, f, id);
}

uint64_t ember_profile_frame_hash(const ember_profile_t *p, uint32_t id) {
  return id < p->nframes ? p->frame_hashes[id] : 0;
}

size_t ember_profile_nframes(const ember_profile_t *p) { return p->nframes; }

const ember_frame_t *ember_profile_frame(const ember_profile_t *p, uint32_t id) {
  return id < p->nframes ? &p->frames[id] : NULL;
}

/* --- stacks --- */

typedef struct stack_key {
  const ember_profile_t *p;
  const uint32_t *ids;
  size_t depth;
} stack_key_t;

static bool stack_eq(const void *ctx, uint32_t idx) {
  const stack_key_t *k = ctx;
  const stack_entry_t *s = &k->p->stacks[idx];
  return s->depth == k->depth && memcmp(k->p->ids + s->off, k->ids, k->depth * sizeof *k->ids) == 0;
}

static uint64_t stack_rehash(const void *ctx, uint32_t idx) {
  const stack_key_t *k = ctx;
  return k->p->stacks[idx].hash;
}

int ember_profile_add_ids(ember_profile_t *p, const uint32_t *frame_ids, size_t depth,
                          const int64_t *values, uint32_t *stack_id) {
  if (p == NULL || frame_ids == NULL || values == NULL || depth == 0 ||
      depth > EMBER_MAX_STACK_DEPTH)
    return -EINVAL;
  uint64_t h = 0x57ac;
  for (size_t i = 0; i < depth; i++) {
    if (frame_ids[i] >= p->nframes) return -EINVAL;
    h = ember__hash_mix(h, frame_ids[i]);
  }
  for (size_t v = 0; v < p->ntypes; v++) {
    if (values[v] < 0) return -EINVAL;
  }
  stack_key_t key = {p, frame_ids, depth};
  int64_t found = ember__htab_find(&p->stack_index, h, stack_eq, &key);
  if (found >= 0) {
    int64_t *dst = &p->values[(size_t)found * p->ntypes];
    for (size_t v = 0; v < p->ntypes; v++) {
      if (dst[v] > INT64_MAX - values[v]) return -ERANGE;
    }
    for (size_t v = 0; v < p->ntypes; v++) dst[v] += values[v];
    if (stack_id) *stack_id = (uint32_t)found;
    return 0;
  }
  if (p->nstacks >= UINT32_MAX - 1) return -ENOMEM;
  size_t cap = p->capstacks;
  if (ember__grow(&p->stacks, &cap, p->nstacks + 1, sizeof *p->stacks) != 0) return -ENOMEM;
  cap = p->capstacks;
  if (ember__grow(&p->values, &cap, p->nstacks + 1, p->ntypes * sizeof *p->values) != 0)
    return -ENOMEM;
  p->capstacks = cap;
  if (ember__grow(&p->ids, &p->capids, p->nids + depth, sizeof *p->ids) != 0) return -ENOMEM;
  memcpy(p->ids + p->nids, frame_ids, depth * sizeof *frame_ids);
  p->stacks[p->nstacks] = (stack_entry_t){p->nids, (uint32_t)depth, h};
  memcpy(&p->values[p->nstacks * p->ntypes], values, p->ntypes * sizeof *values);
  if (ember__htab_insert(&p->stack_index, h, (uint32_t)p->nstacks, stack_rehash, &key) != 0)
    return -ENOMEM;
  p->nids += depth;
  if (stack_id) *stack_id = (uint32_t)p->nstacks;
  p->nstacks++;
  return 0;
}

int ember_profile_add(ember_profile_t *p, const ember_frame_t *frames, size_t depth,
                      const int64_t *values) {
  if (p == NULL || frames == NULL || depth == 0 || depth > EMBER_MAX_STACK_DEPTH) return -EINVAL;
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  for (size_t i = 0; i < depth; i++) {
    int rc = ember_profile_intern_frame(p, &frames[i], &ids[i]);
    if (rc != 0) return rc;
  }
  return ember_profile_add_ids(p, ids, depth, values, NULL);
}

int ember_profile_reserve(ember_profile_t *p, size_t nstrings, size_t nframes, size_t nstacks,
                          size_t nids) {
  if (p == NULL) return -EINVAL;
  /* Only hints: capped so that a hostile count cannot ask for gigabytes
   * before any of it is used. */
  const size_t cap = (size_t)1 << 20;
  nstrings = nstrings < cap ? nstrings : cap;
  nframes = nframes < cap ? nframes : cap;
  nstacks = nstacks < cap ? nstacks : cap;
  nids = nids < cap * 4 ? nids : cap * 4;
  str_key_t sk = {p, NULL, 0};
  frame_key_t fk = {p, NULL};
  stack_key_t kk = {p, NULL, 0};
  size_t cap2;
  if (ember__grow(&p->strs, &p->capstrs, p->nstrs + nstrings, sizeof *p->strs) != 0 ||
      ember__htab_reserve(&p->str_index, p->nstrs + nstrings, str_hash, &sk) != 0)
    return -ENOMEM;
  cap2 = p->capframes;
  if (ember__grow(&p->frames, &cap2, p->nframes + nframes, sizeof *p->frames) != 0) return -ENOMEM;
  cap2 = p->capframes;
  if (ember__grow(&p->frame_hashes, &cap2, p->nframes + nframes, sizeof *p->frame_hashes) != 0)
    return -ENOMEM;
  p->capframes = cap2;
  if (ember__htab_reserve(&p->frame_index, p->nframes + nframes, frame_rehash, &fk) != 0)
    return -ENOMEM;
  cap2 = p->capstacks;
  if (ember__grow(&p->stacks, &cap2, p->nstacks + nstacks, sizeof *p->stacks) != 0) return -ENOMEM;
  cap2 = p->capstacks;
  if (ember__grow(&p->values, &cap2, p->nstacks + nstacks, p->ntypes * sizeof *p->values) != 0)
    return -ENOMEM;
  p->capstacks = cap2;
  if (ember__grow(&p->ids, &p->capids, p->nids + nids, sizeof *p->ids) != 0 ||
      ember__htab_reserve(&p->stack_index, p->nstacks + nstacks, stack_rehash, &kk) != 0)
    return -ENOMEM;
  return 0;
}

size_t ember_profile_nstacks(const ember_profile_t *p) { return p->nstacks; }

int ember_profile_stack(const ember_profile_t *p, uint32_t id, const uint32_t **frame_ids,
                        size_t *depth, const int64_t **values) {
  if (p == NULL || id >= p->nstacks) return -EINVAL;
  const stack_entry_t *s = &p->stacks[id];
  if (frame_ids) *frame_ids = p->ids + s->off;
  if (depth) *depth = s->depth;
  if (values) *values = &p->values[(size_t)id * p->ntypes];
  return 0;
}

int64_t ember_profile_total(const ember_profile_t *p, size_t vi) {
  if (vi >= p->ntypes) return 0;
  int64_t t = 0;
  for (size_t i = 0; i < p->nstacks; i++) {
    int64_t v = p->values[i * p->ntypes + vi];
    t = t > INT64_MAX - v ? INT64_MAX : t + v;
  }
  return t;
}

int ember_profile_merge(ember_profile_t *dst, const ember_profile_t *src) {
  if (dst == NULL || src == NULL) return -EINVAL;
  if (dst->ntypes != src->ntypes ||
      memcmp(dst->types, src->types, dst->ntypes * sizeof *dst->types) != 0)
    return EMBER_EMISMATCH;
  int rc = 0;
  uint32_t *map = NULL;
  bool was_empty = dst->nstacks == 0;
  if (src->nframes > 0) {
    map = ember_malloc(src->nframes * sizeof *map);
    if (map == NULL) return -ENOMEM;
  }
  for (size_t i = 0; i < src->nframes; i++) {
    rc = ember_profile_intern_frame(dst, &src->frames[i], &map[i]);
    if (rc != 0) goto cleanup;
  }
  uint32_t ids[EMBER_MAX_STACK_DEPTH];
  for (size_t s = 0; s < src->nstacks; s++) {
    const stack_entry_t *st = &src->stacks[s];
    for (size_t i = 0; i < st->depth; i++) ids[i] = map[src->ids[st->off + i]];
    rc = ember_profile_add_ids(dst, ids, st->depth, &src->values[s * src->ntypes], NULL);
    if (rc != 0) goto cleanup;
  }
  /* A window of [0, 0) means "not set": it neither narrows nor widens. */
  if (src->start_ns != 0 || src->end_ns != 0) {
    bool unset = dst->start_ns == 0 && dst->end_ns == 0;
    if (unset || src->start_ns < dst->start_ns) dst->start_ns = src->start_ns;
    if (unset || src->end_ns > dst->end_ns) dst->end_ns = src->end_ns;
  }
  /* An empty dst takes src's period; differing periods make it unknown. */
  if (was_empty && dst->period_ns == 0) {
    dst->period_ns = src->period_ns;
  } else if (dst->period_ns != src->period_ns) {
    dst->period_ns = 0;
  }
cleanup:
  ember_free(map);
  return rc;
}

/* --- top functions --- */

typedef struct fn_acc {
  const char *name; /* points into names buffer */
  const char *module;
  uint64_t hash;
  int64_t self, total;
  uint32_t last_stack; /* stack id + 1 that last added to total */
} fn_acc_t;

typedef struct fn_key {
  const fn_acc_t *fns;
  const char *name;
  const char *module;
} fn_key_t;

static bool fn_eq(const void *ctx, uint32_t idx) {
  const fn_key_t *k = ctx;
  return k->fns[idx].module == k->module && strcmp(k->fns[idx].name, k->name) == 0;
}

static uint64_t fn_rehash(const void *ctx, uint32_t idx) {
  const fn_key_t *k = ctx;
  return k->fns[idx].hash;
}

/* Largest first by (k1, k2), then by name so the order is deterministic. */
static int top_cmp_keys(const ember_top_entry_t *x, const ember_top_entry_t *y, int64_t kx,
                        int64_t ky, int64_t ox, int64_t oy) {
  if (kx != ky) return kx > ky ? -1 : 1;
  if (ox != oy) return ox > oy ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int top_cmp_self(const void *a, const void *b) {
  const ember_top_entry_t *x = a, *y = b;
  return top_cmp_keys(x, y, x->self, y->self, x->total, y->total);
}

static int top_cmp_total(const void *a, const void *b) {
  const ember_top_entry_t *x = a, *y = b;
  return top_cmp_keys(x, y, x->total, y->total, x->self, y->self);
}

void ember_top_free(ember_top_entry_t *entries, size_t count) {
  if (entries == NULL) return;
  for (size_t i = 0; i < count; i++) ember_free(entries[i].name);
  ember_free(entries);
}

int ember_profile_top(const ember_profile_t *p, size_t vi, ember_top_order_t order, size_t limit,
                      ember_top_entry_t **out, size_t *count) {
  if (p == NULL || out == NULL || count == NULL || vi >= p->ntypes) return -EINVAL;
  int rc = -ENOMEM;
  uint32_t *fn_of_frame = NULL;
  fn_acc_t *fns = NULL;
  char **names = NULL;
  ember_top_entry_t *res = NULL;
  size_t nfns = 0;
  ember__htab_t index;
  ember__htab_init(&index);

  if (p->nframes > 0) {
    fn_of_frame = ember_malloc(p->nframes * sizeof *fn_of_frame);
    fns = ember_calloc(p->nframes, sizeof *fns);
    names = ember_calloc(p->nframes, sizeof *names);
    if (fn_of_frame == NULL || fns == NULL || names == NULL) goto cleanup;
  }
  /* Frames that differ only in address, line or file are one function. */
  for (size_t i = 0; i < p->nframes; i++) {
    char tmp[256];
    size_t n = ember_frame_name(&p->frames[i], tmp, sizeof tmp);
    char *name = ember_malloc(n + 1);
    if (name == NULL) goto cleanup;
    if (n < sizeof tmp) {
      memcpy(name, tmp, n + 1);
    } else {
      ember_frame_name(&p->frames[i], name, n + 1);
    }
    fn_key_t key = {fns, name, p->frames[i].module};
    uint64_t h = ember__hash_bytes(name, n, (uint64_t)(uintptr_t)p->frames[i].module);
    int64_t found = ember__htab_find(&index, h, fn_eq, &key);
    if (found >= 0) {
      ember_free(name);
      fn_of_frame[i] = (uint32_t)found;
      continue;
    }
    names[nfns] = name;
    fns[nfns] = (fn_acc_t){name, p->frames[i].module, h, 0, 0, 0};
    if (ember__htab_insert(&index, h, (uint32_t)nfns, fn_rehash, &key) != 0) {
      nfns++;
      goto cleanup;
    }
    fn_of_frame[i] = (uint32_t)nfns++;
  }
  for (size_t s = 0; s < p->nstacks; s++) {
    const stack_entry_t *st = &p->stacks[s];
    int64_t v = p->values[s * p->ntypes + vi];
    const uint32_t *ids = p->ids + st->off;
    fns[fn_of_frame[ids[0]]].self += v;
    for (size_t i = 0; i < st->depth; i++) {
      fn_acc_t *f = &fns[fn_of_frame[ids[i]]];
      if (f->last_stack == s + 1) continue; /* recursion: count once */
      f->last_stack = (uint32_t)(s + 1);
      f->total += v;
    }
  }
  res = ember_calloc(nfns, sizeof *res);
  if (res == NULL) goto cleanup;
  for (size_t i = 0; i < nfns; i++) {
    res[i] = (ember_top_entry_t){names[i], fns[i].module, fns[i].self, fns[i].total};
    names[i] = NULL;
  }
  qsort(res, nfns, sizeof *res, order == EMBER_TOP_BY_TOTAL ? top_cmp_total : top_cmp_self);
  size_t keep = limit && limit < nfns ? limit : nfns;
  for (size_t i = keep; i < nfns; i++) ember_free(res[i].name);
  *out = res;
  *count = keep;
  res = NULL;
  rc = 0;
cleanup:
  if (names != NULL) {
    for (size_t i = 0; i < nfns; i++) ember_free(names[i]);
  }
  ember_free(names);
  ember_free(res);
  ember_free(fns);
  ember_free(fn_of_frame);
  ember__htab_free(&index);
  return rc;
}
