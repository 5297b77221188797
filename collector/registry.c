/* The target registry (registry.h): a sorted array of (key, record) under a
 * read-write lock. Updates re-announce existing keys, which is a binary
 * search and an in-place swap; only new and exited processes move memory. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "registry.h"

typedef struct entry {
  char *key;
  ember_target_record_t rec;
} entry_t;

struct ember__registry {
  pthread_rwlock_t lock;
  entry_t *v;
  size_t n, cap;
};

int ember__registry_new(ember__registry_t **out) {
  ember__registry_t *r = ember_calloc(1, sizeof *r);
  if (r == NULL) return -ENOMEM;
  if (pthread_rwlock_init(&r->lock, NULL) != 0) {
    ember_free(r);
    return -ENOMEM;
  }
  *out = r;
  return 0;
}

void ember__registry_free(ember__registry_t *r) {
  if (r == NULL) return;
  for (size_t i = 0; i < r->n; i++) {
    ember_free(r->v[i].key);
    ember_target_record_clear(&r->v[i].rec);
  }
  ember_free(r->v);
  pthread_rwlock_destroy(&r->lock);
  ember_free(r);
}

/* Index of `key` or where it would go; *found says which. */
static size_t find(const ember__registry_t *r, const char *key, size_t keylen, bool *found) {
  size_t lo = 0, hi = r->n;
  *found = false;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const char *k = r->v[mid].key;
    size_t kl = strlen(k);
    int c = memcmp(k, key, kl < keylen ? kl : keylen);
    if (c == 0) c = kl < keylen ? -1 : kl > keylen ? 1 : 0;
    if (c == 0) {
      *found = true;
      return mid;
    }
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int ember__registry_apply(ember__registry_t *r, const void *key, size_t keylen, const void *value,
                          size_t len, char *errbuf, size_t errbuf_size) {
  if (r == NULL || key == NULL || keylen == 0 || memchr(key, '\0', keylen) != NULL) {
    if (errbuf_size) snprintf(errbuf, errbuf_size, "a target needs a non-empty text key");
    return -EINVAL;
  }
  ember_target_record_t rec = {0};
  if (value != NULL && len > 0) {
    int rc = ember_codec_decode_target(value, len, &rec, errbuf, errbuf_size);
    if (rc != 0) return rc;
  }
  char *k = NULL;
  int rc = 0;
  pthread_rwlock_wrlock(&r->lock);
  bool found;
  size_t at = find(r, key, keylen, &found);
  if (value == NULL || len == 0) {
    if (found) {
      ember_free(r->v[at].key);
      ember_target_record_clear(&r->v[at].rec);
      memmove(&r->v[at], &r->v[at + 1], (r->n - at - 1) * sizeof r->v[0]);
      r->n--;
    }
  } else if (found) {
    ember_target_record_clear(&r->v[at].rec);
    r->v[at].rec = rec;
    rec = (ember_target_record_t){0};
  } else {
    if (r->n == r->cap) {
      size_t cap = r->cap ? r->cap * 2 : 64;
      entry_t *v = ember_realloc(r->v, cap * sizeof *v);
      if (v == NULL) {
        rc = -ENOMEM;
        goto out;
      }
      r->v = v;
      r->cap = cap;
    }
    k = ember_malloc(keylen + 1);
    if (k == NULL) {
      rc = -ENOMEM;
      goto out;
    }
    memcpy(k, key, keylen);
    k[keylen] = '\0';
    memmove(&r->v[at + 1], &r->v[at], (r->n - at) * sizeof r->v[0]);
    r->v[at] = (entry_t){.key = k, .rec = rec};
    r->n++;
    rec = (ember_target_record_t){0};
  }
out:
  pthread_rwlock_unlock(&r->lock);
  ember_target_record_clear(&rec);
  if (rc == -ENOMEM && errbuf_size) snprintf(errbuf, errbuf_size, "out of memory");
  return rc;
}

static bool match(const char *want, const char *have) {
  return want == NULL || (have != NULL && strcmp(want, have) == 0);
}

static char *dup_or_null(const char *s, bool *fail) {
  if (s == NULL) return NULL;
  char *d = ember_strdup(s);
  if (d == NULL) *fail = true;
  return d;
}

int ember__registry_list(ember__registry_t *r, const ember_store_selector_t *sel,
                         int64_t seen_after_ns, ember_target_record_t **out, size_t *count) {
  if (r == NULL || out == NULL || count == NULL) return -EINVAL;
  pthread_rwlock_rdlock(&r->lock);
  ember_target_record_t *list = NULL;
  size_t n = 0;
  bool fail = false;
  if (r->n > 0) {
    list = ember_calloc(r->n, sizeof *list);
    fail = list == NULL;
  }
  for (size_t i = 0; i < r->n && !fail; i++) {
    const ember_target_record_t *t = &r->v[i].rec;
    if (t->seen_ns < seen_after_ns) continue;
    if (sel != NULL && !(match(sel->worker, t->worker) && match(sel->version, t->version) &&
                         match(sel->host, t->host) && match(sel->actor, t->actor)))
      continue;
    ember_target_record_t *d = &list[n++];
    d->agent_id = dup_or_null(t->agent_id, &fail);
    d->host = dup_or_null(t->host, &fail);
    d->worker = dup_or_null(t->worker, &fail);
    d->version = dup_or_null(t->version, &fail);
    d->actor = dup_or_null(t->actor, &fail);
    d->comm = dup_or_null(t->comm, &fail);
    d->exe = dup_or_null(t->exe, &fail);
    d->build_id = dup_or_null(t->build_id, &fail);
    d->pid = t->pid;
    d->start_ticks = t->start_ticks;
    d->seen_ns = t->seen_ns;
    d->heap = t->heap;
  }
  pthread_rwlock_unlock(&r->lock);
  if (fail) {
    ember__registry_list_free(list, n);
    return -ENOMEM;
  }
  if (n == 0) {
    ember_free(list);
    list = NULL;
  }
  *out = list;
  *count = n;
  return 0;
}

void ember__registry_list_free(ember_target_record_t *list, size_t count) {
  for (size_t i = 0; i < count; i++) ember_target_record_clear(&list[i]);
  ember_free(list);
}

size_t ember__registry_count(ember__registry_t *r) {
  pthread_rwlock_rdlock(&r->lock);
  size_t n = r->n;
  pthread_rwlock_unlock(&r->lock);
  return n;
}
