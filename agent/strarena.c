/* The string arena (strarena.h). */
#include "strarena.h"

#include <string.h>

#include "ember/ember.h"

#define CHUNK (64u * 1024u)

struct ember__strarena_chunk {
  ember__strarena_chunk_t *next;
  size_t used, size;
  char data[];
};

char *ember__strarena_dup(ember__strarena_t *a, const char *str, size_t len) {
  ember__strarena_chunk_t *c = a->head;
  if (c == NULL || c->size - c->used < len + 1) {
    size_t size = len + 1 > CHUNK / 4 ? len + 1 : CHUNK;
    ember__strarena_chunk_t *n = ember_malloc(sizeof *n + size);
    if (n == NULL) return NULL;
    n->size = size;
    n->used = 0;
    a->bytes += sizeof *n + size;
    if (c != NULL && size != CHUNK) {
      /* A large string gets a chunk of its own behind the head, so the
       * head's free space is not abandoned. */
      n->next = c->next;
      c->next = n;
    } else {
      n->next = c;
      a->head = n;
    }
    c = n;
  }
  char *p = c->data + c->used;
  memcpy(p, str, len);
  p[len] = '\0';
  c->used += len + 1;
  return p;
}

void ember__strarena_free(ember__strarena_t *a) {
  ember__strarena_chunk_t *c = a->head;
  while (c != NULL) {
    ember__strarena_chunk_t *next = c->next;
    ember_free(c);
    c = next;
  }
  a->head = NULL;
  a->bytes = 0;
}
