/* The bounded key set (see kset.h). */
#include "kset.h"

#include "ember/ember.h"
#include "htab.h"

static size_t slot_of(const ember__kset_t *s, uint64_t key) {
  return (size_t)ember__hash_mix(0, key) & s->mask;
}

bool ember__kset_has(const ember__kset_t *s, uint64_t key) {
  if (!s->slots) return false;
  for (size_t i = slot_of(s, key);; i = (i + 1) & s->mask) {
    if (s->slots[i] == key) return true;
    if (s->slots[i] == 0) return false;
  }
}

static void put(ember__kset_t *s, uint64_t key) {
  size_t i = slot_of(s, key);
  while (s->slots[i] != 0 && s->slots[i] != key) i = (i + 1) & s->mask;
  if (s->slots[i] == 0) s->count++;
  s->slots[i] = key;
}

void ember__kset_add(ember__kset_t *s, uint64_t key) {
  if (key == 0) return;
  if (s->count >= EMBER__KSET_MAX) ember__kset_clear(s);
  if (!s->slots || (s->count + 1) * 2 > s->mask + 1) {
    size_t size = s->slots ? (s->mask + 1) * 2 : 256;
    uint64_t *slots = ember_calloc(size, sizeof *slots);
    if (!slots) return;
    ember__kset_t grown = {.slots = slots, .mask = size - 1};
    for (size_t i = 0; s->slots && i <= s->mask; i++)
      if (s->slots[i]) put(&grown, s->slots[i]);
    ember_free(s->slots);
    *s = grown;
  }
  put(s, key);
}

void ember__kset_clear(ember__kset_t *s) {
  ember_free(s->slots);
  *s = (ember__kset_t){0};
}
