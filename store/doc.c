/* Documents: values kept whole by key in the "rules" and "alerts" tables,
 * for the collector's alerting state, and in "sourcemaps", for the source
 * maps uploaded to it.
 *
 *   key:   the key's bytes (1..EMBER_STORE_DOC_KEY_MAX, no NUL)
 *   value: format u8 (1) | the document's bytes, sealed like every value
 *
 * The store never reads inside a document: retention asks the caller,
 * document by document, which ones go (see ember_store_doc_retain), so
 * the key can be the id the API looks an alert up by. */
#include <errno.h>
#include <string.h>

#include "store_int.h"

#define DOC_FORMAT 1

/* One walk batch: at most this many documents or bytes per snapshot, so a
 * long walk neither holds a read transaction open nor copies the table. */
#define BATCH_DOCS  64u
#define BATCH_BYTES ((size_t)4 << 20)

static int table_db(ember_store_doc_table_t t, ember__db_t *db) {
  switch (t) {
  case EMBER_STORE_DOC_RULES: *db = EMBER__DB_RULES; return 0;
  case EMBER_STORE_DOC_ALERTS: *db = EMBER__DB_ALERTS; return 0;
  case EMBER_STORE_DOC_SOURCEMAPS: *db = EMBER__DB_SOURCEMAPS; return 0;
  }
  return -EINVAL;
}

/* The largest document of a table. */
static size_t doc_max(ember__db_t db) {
  return db == EMBER__DB_SOURCEMAPS ? EMBER_STORE_DOC_SOURCEMAP_MAX : EMBER_STORE_DOC_MAX;
}

/* A table a read-only open of an older store did not find: read as empty. */
static bool missing(const ember_store_t *s, ember__db_t db) {
  return db == EMBER__DB_SOURCEMAPS ? s->no_sourcemaps : s->no_docs;
}

static int check_key(const char *key, MDB_val *k) {
  if (!key) return -EINVAL;
  size_t n = strnlen(key, EMBER_STORE_DOC_KEY_MAX + 1);
  if (n == 0 || n > EMBER_STORE_DOC_KEY_MAX) return -EINVAL;
  *k = (MDB_val){.mv_size = n, .mv_data = (void *)(uintptr_t)key};
  return 0;
}

/* The document of a sealed value, or false when it is not one. */
static bool doc_of(const MDB_val *k, MDB_val *v) {
  if (k->mv_size == 0 || k->mv_size > EMBER_STORE_DOC_KEY_MAX || !ember__unseal(k, v) ||
      v->mv_size < 1 || ((const uint8_t *)v->mv_data)[0] != DOC_FORMAT)
    return false;
  v->mv_data = (uint8_t *)v->mv_data + 1;
  v->mv_size -= 1;
  return true;
}

/* ---- put / get / del ----------------------------------------------------- */

static int put_locked(ember_store_t *s, ember__db_t db, MDB_val *k, const void *doc, size_t len) {
  if (s->read_only) return -EACCES;
  uint8_t *buf = ember_malloc(len + 1);
  if (!buf) return -ENOMEM;
  buf[0] = DOC_FORMAT;
  if (len) memcpy(buf + 1, doc, len);
  MDB_val v = {.mv_size = len + 1, .mv_data = buf};
  MDB_txn *txn = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &txn));
  if (rc == 0) rc = ember__store_err(ember__put(s, txn, db, k, &v, 0));
  if (rc == 0) {
    rc = ember__store_commit(s, txn);
    txn = NULL;
  }
  if (txn) mdb_txn_abort(txn);
  ember_free(buf);
  return rc;
}

int ember_store_doc_put(ember_store_t *s, ember_store_doc_table_t table, const char *key,
                        const void *doc, size_t len) {
  ember__db_t db;
  MDB_val k;
  if (!s || table_db(table, &db) != 0 || check_key(key, &k) != 0 || (len && !doc)) return -EINVAL;
  if (len > doc_max(db)) return EMBER_ETOOBIG;
  int rc;
  do {
    ember__store_enter(s);
    rc = put_locked(s, db, &k, doc, len);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int get_locked(ember_store_t *s, ember__db_t db, MDB_val *k, void **doc, size_t *len) {
  if (missing(s, db)) return EMBER_ENOTFOUND;
  MDB_txn *txn = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) return rc;
  MDB_val v;
  int mrc = mdb_get(txn, s->dbi[db], k, &v);
  if (mrc == MDB_SUCCESS && !doc_of(k, &v)) mrc = MDB_CORRUPTED;
  rc = ember__store_err(mrc);
  if (rc == 0) {
    uint8_t *copy = ember_malloc(v.mv_size + 1);
    if (!copy) {
      rc = -ENOMEM;
    } else {
      if (v.mv_size) memcpy(copy, v.mv_data, v.mv_size);
      copy[v.mv_size] = 0;
      *doc = copy;
      *len = v.mv_size;
    }
  }
  mdb_txn_abort(txn);
  return rc;
}

int ember_store_doc_get(ember_store_t *s, ember_store_doc_table_t table, const char *key,
                        void **doc, size_t *len) {
  ember__db_t db;
  MDB_val k;
  if (!s || !doc || !len || table_db(table, &db) != 0 || check_key(key, &k) != 0) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = get_locked(s, db, &k, doc, len);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int del_locked(ember_store_t *s, ember__db_t db, MDB_val *k) {
  if (s->read_only) return -EACCES;
  MDB_txn *txn = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &txn));
  if (rc == 0) rc = ember__store_err(mdb_del(txn, s->dbi[db], k, NULL));
  if (rc == 0) {
    rc = ember__store_commit(s, txn);
    txn = NULL;
  }
  if (txn) mdb_txn_abort(txn);
  return rc;
}

int ember_store_doc_del(ember_store_t *s, ember_store_doc_table_t table, const char *key) {
  ember__db_t db;
  MDB_val k;
  if (!s || table_db(table, &db) != 0 || check_key(key, &k) != 0) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = del_locked(s, db, &k);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

/* ---- walking ------------------------------------------------------------- */

typedef struct batch {
  size_t n;
  char *keys[BATCH_DOCS];
  uint8_t *docs[BATCH_DOCS];
  size_t lens[BATCH_DOCS];
  bool more;   /* the table goes on past the batch */
  int damaged; /* EMBER_ECORRUPT when the batch stopped at a damaged value */
} batch_t;

static void batch_clear(batch_t *b) {
  for (size_t i = 0; i < b->n; i++) {
    ember_free(b->keys[i]);
    ember_free(b->docs[i]);
  }
  b->n = 0;
  b->more = false;
  b->damaged = 0;
}

/* A NUL-terminated copy of `len` bytes. */
static void *copy_z(const void *p, size_t len) {
  uint8_t *c = ember_malloc(len + 1);
  if (c) {
    if (len) memcpy(c, p, len);
    c[len] = 0;
  }
  return c;
}

/* Read the documents after `after` (the whole table when after_len is 0). */
static int read_batch(ember_store_t *s, ember__db_t db, const char *after, size_t after_len,
                      batch_t *b) {
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc == 0) rc = ember__store_err(mdb_cursor_open(txn, s->dbi[db], &cur));
  if (rc < 0) goto cleanup;
  MDB_val k = {.mv_size = after_len, .mv_data = (void *)(uintptr_t)after}, v;
  int mrc = mdb_cursor_get(cur, &k, &v, after_len ? MDB_SET_RANGE : MDB_FIRST);
  if (mrc == MDB_SUCCESS && after_len && k.mv_size == after_len &&
      memcmp(k.mv_data, after, after_len) == 0)
    mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  size_t bytes = 0;
  for (; mrc == MDB_SUCCESS; mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    if (b->n == BATCH_DOCS || bytes >= BATCH_BYTES) {
      b->more = true;
      break;
    }
    if (!doc_of(&k, &v)) {
      b->damaged = EMBER_ECORRUPT;
      break;
    }
    char *key = copy_z(k.mv_data, k.mv_size);
    uint8_t *doc = key ? copy_z(v.mv_data, v.mv_size) : NULL;
    if (!doc) {
      ember_free(key);
      rc = -ENOMEM;
      goto cleanup;
    }
    b->keys[b->n] = key;
    b->docs[b->n] = doc;
    b->lens[b->n] = v.mv_size;
    b->n++;
    bytes += v.mv_size;
  }
  if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND) rc = ember__store_err(mrc);
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  return rc;
}

int ember_store_doc_each(ember_store_t *s, ember_store_doc_table_t table, ember_store_doc_fn fn,
                         void *ctx) {
  ember__db_t db;
  if (!s || !fn || table_db(table, &db) != 0) return -EINVAL;
  if (missing(s, db)) return 0;
  batch_t b = {0};
  char after[EMBER_STORE_DOC_KEY_MAX + 1];
  size_t after_len = 0;
  int rc = 0;
  for (;;) {
    do {
      batch_clear(&b);
      ember__store_enter(s);
      rc = read_batch(s, db, after, after_len, &b);
      ember__store_leave(s);
    } while (rc < 0 && ember__store_retry(s, &rc));
    if (rc < 0) break;
    /* No lock or transaction is held here: fn may call the store. */
    for (size_t i = 0; i < b.n && rc == 0; i++) rc = fn(b.keys[i], b.docs[i], b.lens[i], ctx);
    if (rc == 0) rc = b.damaged;
    if (rc != 0 || !b.more || b.n == 0) break;
    after_len = strlen(b.keys[b.n - 1]);
    memcpy(after, b.keys[b.n - 1], after_len);
  }
  batch_clear(&b);
  return rc;
}

/* ---- retention ------------------------------------------------------------ */

typedef struct retain {
  ember_store_doc_expired_fn expired;
  void *ctx;
  size_t max_per_txn;
  uint64_t deleted; /* committed deletions */
  uint8_t *scratch; /* the document, NUL-terminated, for `expired` */
  size_t scratch_cap;
} retain_t;

static int retain_locked(ember_store_t *s, ember__db_t db, retain_t *r) {
  if (s->read_only) return -EACCES;
  if (missing(s, db)) return 0;
  char key[EMBER_STORE_DOC_KEY_MAX + 1];
  size_t klen = 0;
  size_t in_txn = 0;
  MDB_txn *txn = NULL;
  MDB_cursor *cur = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &txn));
  if (rc == 0) rc = ember__store_err(mdb_cursor_open(txn, s->dbi[db], &cur));
  if (rc < 0) goto cleanup;
  MDB_val k, v;
  int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
  while (mrc == MDB_SUCCESS) {
    if (!doc_of(&k, &v)) {
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    if (v.mv_size + 1 > r->scratch_cap) {
      uint8_t *p = ember_realloc(r->scratch, v.mv_size + 1);
      if (!p) {
        rc = -ENOMEM;
        goto cleanup;
      }
      r->scratch = p;
      r->scratch_cap = v.mv_size + 1;
    }
    if (v.mv_size) memcpy(r->scratch, v.mv_data, v.mv_size);
    r->scratch[v.mv_size] = 0;
    klen = k.mv_size;
    memcpy(key, k.mv_data, klen);
    key[klen] = '\0';
    if (!r->expired(key, r->scratch, v.mv_size, r->ctx)) {
      mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
      continue;
    }
    rc = ember__store_err(mdb_cursor_del(cur, 0));
    if (rc < 0) goto cleanup;
    if (++in_txn >= r->max_per_txn) {
      /* Commit and go on from the key after the last one deleted, so that
       * writers wait for one short transaction at a time. */
      mdb_cursor_close(cur);
      cur = NULL;
      rc = ember__store_commit(s, txn);
      txn = NULL;
      if (rc == 0) r->deleted += in_txn;
      if (rc == 0) rc = ember__store_err(mdb_txn_begin(s->env, NULL, 0, &txn));
      if (rc == 0) rc = ember__store_err(mdb_cursor_open(txn, s->dbi[db], &cur));
      if (rc < 0) goto cleanup;
      in_txn = 0;
    }
    k = (MDB_val){.mv_size = klen, .mv_data = key};
    mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
  }
  if (mrc != MDB_NOTFOUND) {
    rc = ember__store_err(mrc);
    goto cleanup;
  }
  mdb_cursor_close(cur);
  cur = NULL;
  rc = ember__store_commit(s, txn);
  txn = NULL;
  if (rc == 0) r->deleted += in_txn;
cleanup:
  if (cur) mdb_cursor_close(cur);
  if (txn) mdb_txn_abort(txn);
  return rc;
}

int ember_store_doc_retain(ember_store_t *s, ember_store_doc_table_t table,
                           ember_store_doc_expired_fn expired, void *ctx, size_t max_per_txn,
                           uint64_t *deleted) {
  ember__db_t db;
  if (!s || !expired || table_db(table, &db) != 0) return -EINVAL;
  retain_t r = {.expired = expired, .ctx = ctx, .max_per_txn = max_per_txn ? max_per_txn : 1000};
  int rc;
  do {
    ember__store_enter(s);
    rc = retain_locked(s, db, &r);
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  ember_free(r.scratch);
  if (deleted) *deleted = r.deleted;
  return rc;
}
