/* The decoders' bump arena (codec_internal.h). */
#include <stdint.h>

#include "codec_internal.h"
#include "ember/ember.h"

struct ember__arena_chunk {
  struct ember__arena_chunk *next;
  size_t used, size;
  _Alignas(16) unsigned char data[];
};

void *ember__arena_alloc(void *arena, size_t size) {
  ember__arena_t *a = arena;
  if (size > SIZE_MAX - 15) return NULL;
  size = (size + 15) & ~(size_t)15;
  ember__arena_chunk_t *c = a->head;
  if (c == NULL || c->size - c->used < size) {
    size_t want = a->next_size > size ? a->next_size : size;
    if (want > SIZE_MAX - sizeof *c) return NULL;
    c = ember_malloc(sizeof *c + want);
    if (c == NULL) return NULL;
    c->next = a->head;
    c->used = 0;
    c->size = want;
    a->head = c;
    if (a->next_size < ((size_t)1 << 24)) a->next_size *= 2;
  }
  void *p = c->data + c->used;
  c->used += size;
  return p;
}

void ember__arena_free(void *arena, void *p) {
  /* Everything goes at once in ember__arena_release(). */
  (void)arena;
  (void)p;
}

void ember__arena_release(ember__arena_t *a) {
  while (a->head != NULL) {
    ember__arena_chunk_t *next = a->head->next;
    ember_free(a->head);
    a->head = next;
  }
}
