/* The peer table (peers.h): a sorted array of records under a read-write
 * lock. A fleet is a handful of collectors, so a binary search and a
 * memmove per new key are all the indexing it needs. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "peers.h"

typedef struct entry {
  ember_collector_info_t rec; /* rec.id is the key */
  int64_t received_ns;
} entry_t;

struct ember__peers {
  pthread_rwlock_t lock;
  entry_t *v;
  size_t n, cap;
  char *self;
};

int ember__peers_new(ember__peers_t **out) {
  if (out == NULL) return -EINVAL;
  ember__peers_t *p = ember_calloc(1, sizeof *p);
  if (p == NULL) return -ENOMEM;
  if (pthread_rwlock_init(&p->lock, NULL) != 0) {
    ember_free(p);
    return -ENOMEM;
  }
  *out = p;
  return 0;
}

void ember__peers_free(ember__peers_t *p) {
  if (p == NULL) return;
  for (size_t i = 0; i < p->n; i++) ember_collector_info_clear(&p->v[i].rec);
  ember_free(p->v);
  ember_free(p->self);
  pthread_rwlock_destroy(&p->lock);
  ember_free(p);
}

int ember__peers_set_self(ember__peers_t *p, const char *id) {
  if (p == NULL || id == NULL) return -EINVAL;
  char *d = ember_strdup(id);
  if (d == NULL) return -ENOMEM;
  pthread_rwlock_wrlock(&p->lock);
  ember_free(p->self);
  p->self = d;
  pthread_rwlock_unlock(&p->lock);
  return 0;
}

/* Index of `key` or where it would go; *found says which. */
static size_t find(const ember__peers_t *p, const char *key, size_t keylen, bool *found) {
  size_t lo = 0, hi = p->n;
  *found = false;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const char *k = p->v[mid].rec.id;
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

static int64_t heard(const ember_collector_info_t *rec, int64_t received_ns) {
  return rec->announced_ns < received_ns ? rec->announced_ns : received_ns;
}

bool ember__peers_live(const ember_collector_info_t *rec, int64_t heard_ns, int64_t now_ns) {
  if (rec == NULL || rec->stopping) return false;
  int64_t window = (int64_t)EMBER__PEERS_LIVE_INTERVALS * (int64_t)rec->interval_ms * 1000000;
  return now_ns - heard_ns <= window;
}

/* Does `rec` lose to the held entry `e`? (peers.h: later seq of one
 * incarnation; an earlier incarnation only while the held one is live.) */
static bool is_stale(const entry_t *e, const ember_collector_info_t *rec, int64_t now_ns) {
  const ember_collector_info_t *h = &e->rec;
  if (rec->started_ns == h->started_ns) return rec->seq <= h->seq;
  if (rec->started_ns > h->started_ns) return false;
  return ember__peers_live(h, heard(h, e->received_ns), now_ns);
}

/* Put the record `*rec` (taken over: zeroed on success) under its id. The
 * caller holds the write lock. 0 or -ENOMEM (nothing changed, rec kept). */
static int put_locked(ember__peers_t *p, ember_collector_info_t *rec, int64_t now_ns, bool *stale) {
  bool found;
  size_t at = find(p, rec->id, strlen(rec->id), &found);
  if (found) {
    if (is_stale(&p->v[at], rec, now_ns)) {
      if (stale) *stale = true;
      return 0;
    }
    ember_collector_info_clear(&p->v[at].rec);
    p->v[at] = (entry_t){.rec = *rec, .received_ns = now_ns};
    *rec = (ember_collector_info_t){0};
    return 0;
  }
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 16;
    entry_t *v = ember_realloc(p->v, cap * sizeof *v);
    if (v == NULL) return -ENOMEM;
    p->v = v;
    p->cap = cap;
  }
  memmove(&p->v[at + 1], &p->v[at], (p->n - at) * sizeof p->v[0]);
  p->v[at] = (entry_t){.rec = *rec, .received_ns = now_ns};
  p->n++;
  *rec = (ember_collector_info_t){0};
  return 0;
}

int ember__peers_apply(ember__peers_t *p, const void *key, size_t keylen, const void *value,
                       size_t len, int64_t now_ns, bool *stale, char *errbuf, size_t errbuf_size) {
  if (stale) *stale = false;
  if (p == NULL || key == NULL || keylen == 0 || memchr(key, '\0', keylen) != NULL) {
    if (errbuf_size) snprintf(errbuf, errbuf_size, "a collector record needs a non-empty text key");
    return -EINVAL;
  }
  if (value == NULL || len == 0) {
    pthread_rwlock_wrlock(&p->lock);
    bool found;
    size_t at = find(p, key, keylen, &found);
    if (found) {
      ember_collector_info_clear(&p->v[at].rec);
      memmove(&p->v[at], &p->v[at + 1], (p->n - at - 1) * sizeof p->v[0]);
      p->n--;
    }
    pthread_rwlock_unlock(&p->lock);
    return 0;
  }
  ember_collector_info_t rec = {0};
  int rc = ember_codec_decode_collector(value, len, &rec, errbuf, errbuf_size);
  if (rc != 0) return rc;
  if (strlen(rec.id) != keylen || memcmp(rec.id, key, keylen) != 0) {
    if (errbuf_size)
      snprintf(errbuf, errbuf_size, "collector record of \"%.64s\" under the key \"%.*s\"", rec.id,
               (int)(keylen > 64 ? 64 : keylen), (const char *)key);
    ember_collector_info_clear(&rec);
    return EMBER_ECORRUPT;
  }
  pthread_rwlock_wrlock(&p->lock);
  rc = put_locked(p, &rec, now_ns, stale);
  pthread_rwlock_unlock(&p->lock);
  ember_collector_info_clear(&rec);
  if (rc == -ENOMEM && errbuf_size) snprintf(errbuf, errbuf_size, "out of memory");
  return rc;
}

int ember__peers_put(ember__peers_t *p, const ember_collector_info_t *rec, int64_t now_ns) {
  if (p == NULL || rec == NULL) return -EINVAL;
  if (ember_codec_check_collector(rec, NULL, 0) != 0) return EMBER_ECORRUPT;
  ember_collector_info_t copy;
  int rc = ember_collector_info_copy(rec, &copy);
  if (rc != 0) return rc;
  pthread_rwlock_wrlock(&p->lock);
  rc = put_locked(p, &copy, now_ns, NULL);
  pthread_rwlock_unlock(&p->lock);
  ember_collector_info_clear(&copy);
  return rc;
}

int ember__peers_list(ember__peers_t *p, int64_t now_ns, ember__peer_t **out, size_t *count) {
  if (p == NULL || out == NULL || count == NULL) return -EINVAL;
  int rc = 0;
  ember__peer_t *list = NULL;
  size_t n = 0;
  pthread_rwlock_rdlock(&p->lock);
  if (p->n > 0) {
    list = ember_calloc(p->n, sizeof *list);
    if (list == NULL) rc = -ENOMEM;
  }
  for (size_t i = 0; i < p->n && rc == 0; i++) {
    const entry_t *e = &p->v[i];
    rc = ember_collector_info_copy(&e->rec, &list[i].info);
    if (rc != 0) break;
    n++;
    list[i].received_ns = e->received_ns;
    list[i].heard_ns = heard(&e->rec, e->received_ns);
    list[i].live = ember__peers_live(&e->rec, list[i].heard_ns, now_ns);
    list[i].self = p->self != NULL && strcmp(p->self, e->rec.id) == 0;
  }
  pthread_rwlock_unlock(&p->lock);
  if (rc != 0) {
    ember__peers_list_free(list, n);
    return rc;
  }
  *out = list;
  *count = n;
  return 0;
}

void ember__peers_list_free(ember__peer_t *list, size_t count) {
  for (size_t i = 0; i < count; i++) ember_collector_info_clear(&list[i].info);
  ember_free(list);
}

void ember__peers_count(ember__peers_t *p, int64_t now_ns, size_t *all, size_t *live) {
  size_t n = 0, l = 0;
  if (p != NULL) {
    pthread_rwlock_rdlock(&p->lock);
    n = p->n;
    for (size_t i = 0; i < p->n; i++)
      if (ember__peers_live(&p->v[i].rec, heard(&p->v[i].rec, p->v[i].received_ns), now_ns)) l++;
    pthread_rwlock_unlock(&p->lock);
  }
  if (all) *all = n;
  if (live) *live = l;
}
