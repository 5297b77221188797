/* Opening and closing a store, its schema check, the series index and
 * selector resolution shared by the read and write paths. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <zlib.h>

#include "store_int.h"

_Static_assert(EMBER__PROFILE_KEY_LEN == sizeof(uint32_t) + sizeof(int64_t) + 1,
               "profile key: series id, window start, type mask");
_Static_assert(EMBER__CPU_KEY_LEN == sizeof(uint32_t) + sizeof(int64_t),
               "cpu key: series id, window start");
_Static_assert(EMBER__IDEM_KEY_LEN == 2 * sizeof(uint64_t), "idem key: agent hash, seq");
_Static_assert(EMBER__POSTING_KEY_LEN == 1 + sizeof(uint64_t), "posting key: label, value hash");
_Static_assert(EMBER__RUN_KEY_LEN == sizeof(uint32_t) + sizeof(int64_t),
               "run key: partition, run start");
_Static_assert(EMBER__PENDING_KEY_LEN == sizeof(uint32_t) + sizeof(int64_t),
               "pending key: partition, offset");
_Static_assert(EMBER__PART_KEY_LEN == 2 * sizeof(uint32_t), "series_part key: series, partition");
_Static_assert(EMBER_MAX_VALUE_TYPES <= 8, "a type mask is one byte");
_Static_assert(EMBER_VT_ALLOC_BYTES == 4, "type mask bits follow the value type numbers");
_Static_assert(EMBER_VT_INUSE_BYTES == 6 && EMBER__GAUGE_MASK == 0x30,
               "gauge mask bits follow the value type numbers");

static const struct {
  const char *name;
  unsigned flags;
} db_defs[EMBER__DB_COUNT] = {
    [EMBER__DB_META] = {"meta", 0},
    [EMBER__DB_SERIES] = {"series", 0},
    [EMBER__DB_SERIES_IDX] = {"series_by_hash", MDB_DUPSORT | MDB_DUPFIXED},
    [EMBER__DB_POSTINGS] = {"postings", MDB_DUPSORT | MDB_DUPFIXED},
    [EMBER__DB_FRAMES] = {"frames", 0},
    [EMBER__DB_FRAMES_IDX] = {"frames_by_hash", MDB_DUPSORT | MDB_DUPFIXED},
    [EMBER__DB_STACKS] = {"stacks", 0},
    [EMBER__DB_STACKS_IDX] = {"stacks_by_hash", MDB_DUPSORT | MDB_DUPFIXED},
    [EMBER__DB_PROFILES] = {"profiles", 0},
    [EMBER__DB_CPU] = {"cpu", 0},
    [EMBER__DB_IDEM] = {"idem", 0},
    [EMBER__DB_ROLLUP_1H] = {"rollup_1h", 0},
    [EMBER__DB_ROLLUP_1M] = {"rollup_1m", 0},
    [EMBER__DB_SESSIONS] = {"sessions", 0},
    [EMBER__DB_RULES] = {"rules", 0},
    [EMBER__DB_ALERTS] = {"alerts", 0},
    [EMBER__DB_RUNS] = {"runs", 0},
    [EMBER__DB_PENDING] = {"pending", 0},
    [EMBER__DB_PARTS] = {"series_part", 0},
    [EMBER__DB_SOURCEMAPS] = {"sourcemaps", 0},
};

#define DEFAULT_MAP_SIZE ((size_t)1 << 30)

int ember__store_err(int rc) {
  switch (rc) {
  case MDB_SUCCESS: return 0;
  case MDB_NOTFOUND: return EMBER_ENOTFOUND;
  case MDB_MAP_FULL: return EMBER_EMAPFULL;
  case MDB_TXN_FULL:
  case MDB_CURSOR_FULL:
  case MDB_PAGE_FULL: return -ENOSPC;
  case MDB_READERS_FULL: return -EAGAIN;
  case MDB_MAP_RESIZED: return EMBER__ERESIZED;
  case MDB_VERSION_MISMATCH: return EMBER_EVERSION;
  case MDB_BAD_VALSIZE: return -EINVAL;
  /* A failed meta-page write or sync made LMDB refuse this handle from then
   * on: an I/O failure, not damage (the file still holds the last commit). */
  case MDB_PANIC: return -EIO;
  default: break;
  }
  /* LMDB passes operating-system errors through as positive errno values;
   * its own codes are in [MDB_KEYEXIST, MDB_LAST_ERRCODE] and all mean the
   * file or the handle is not what it should be. */
  if (rc > 0) return -rc;
  return EMBER_ECORRUPT;
}

const char *ember_store_strerror(int err) {
  switch (err) {
  case EMBER_ECORRUPT:
    return "the store is damaged (a value failed its checksum or LMDB found a bad "
           "page): " EMBER_STORE_RECOVERY;
  case EMBER_EMAPFULL:
    return "the store's map is full at store.max_size: raise store.max_size, or shorten "
           "retention so old hours are deleted";
  case -ENOSPC: return "the disk of the store is full: free space on it (ingest resumes by itself)";
  case -EIO:
    return "writing or syncing the store's file failed (an I/O error; LMDB then refuses every "
           "later write on it): check the disk (dmesg), then restart the collector, which "
           "reopens the store at its last commit";
  default: return ember_strerror(err);
  }
}

/* ---- locking and map growth ------------------------------------------ */

void ember__store_enter(ember_store_t *s) { pthread_rwlock_rdlock(&s->lock); }
void ember__store_leave(ember_store_t *s) { pthread_rwlock_unlock(&s->lock); }

bool ember__store_retry(ember_store_t *s, int *rc) {
  if (*rc != EMBER_EMAPFULL && *rc != EMBER__ERESIZED) return false;
  bool again = false;
  pthread_rwlock_wrlock(&s->lock);
  /* No transaction of this handle is open now: LMDB may remap. */
  MDB_envinfo info;
  if (mdb_env_info(s->env, &info) == MDB_SUCCESS) s->map_size = info.me_mapsize;
  if (*rc == EMBER__ERESIZED) {
    /* Another process grew the map: 0 adopts the size it wrote. */
    again = mdb_env_set_mapsize(s->env, 0) == MDB_SUCCESS;
    if (!again) *rc = -EAGAIN;
  } else if (s->map_size < s->max_size) {
    size_t want = s->map_size > s->max_size / 2 ? s->max_size : s->map_size * 2;
    int mrc = mdb_env_set_mapsize(s->env, want);
    if (mrc == MDB_SUCCESS) {
      s->map_size = want;
      s->grows++;
      again = true;
    } else {
      *rc = ember__store_err(mrc);
    }
  }
  if (again && mdb_env_info(s->env, &info) == MDB_SUCCESS) s->map_size = info.me_mapsize;
  pthread_rwlock_unlock(&s->lock);
  return again;
}

int ember__grow(void *arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  if (c > SIZE_MAX / elem) return -ENOMEM;
  void *p = ember_realloc(*(void **)arr, c * elem);
  if (!p) return -ENOMEM;
  *(void **)arr = p;
  *cap = c;
  return 0;
}

void ember__store_caches_clear(ember_store_t *s) {
  for (size_t i = 0; i < sizeof s->cache / sizeof s->cache[0]; i++)
    ember__dcache_clear(&s->cache[i]);
  ember__kset_clear(&s->parts);
}

/* Below this much free space a failed commit is a full disk. */
#define FULL_DISK_SLACK ((uint64_t)1 << 20)

int ember__store_commit(ember_store_t *s, MDB_txn *txn) {
  int mrc = mdb_txn_commit(txn);
  if (mrc == EIO || mrc == ENOSPC) {
    /* LMDB reports a short pwrite (what a full disk gives once part of the
     * pages went out) as EIO. Tell a full disk apart by asking it. */
    mdb_filehandle_t fd;
    struct statvfs vfs;
    if (mdb_env_get_fd(s->env, &fd) == MDB_SUCCESS && fstatvfs(fd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < FULL_DISK_SLACK)
      return -ENOSPC;
  }
  return ember__store_err(mrc);
}

/* ---- checksums ------------------------------------------------------- */

bool ember__sealed(ember__db_t db) {
  switch (db) {
  /* The meta table too: one flipped bit in "retained_before" would
   * otherwise delete every window and drop every later write unseen. */
  case EMBER__DB_META:
  case EMBER__DB_SERIES:
  case EMBER__DB_FRAMES:
  case EMBER__DB_STACKS:
  case EMBER__DB_PROFILES:
  case EMBER__DB_CPU:
  case EMBER__DB_IDEM:
  case EMBER__DB_ROLLUP_1H:
  case EMBER__DB_ROLLUP_1M:
  case EMBER__DB_SESSIONS:
  case EMBER__DB_RULES:
  case EMBER__DB_ALERTS:
  case EMBER__DB_RUNS:
  case EMBER__DB_PENDING:
  case EMBER__DB_PARTS:
  case EMBER__DB_SOURCEMAPS: return true;
  default: return false;
  }
}

static uint32_t seal_crc(const MDB_val *k, const void *v, size_t vlen) {
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32_z(c, k->mv_data, k->mv_size);
  c = crc32_z(c, v, vlen);
  return (uint32_t)c;
}

bool ember__unseal(const MDB_val *k, MDB_val *v) {
  if (v->mv_size < EMBER__SEAL_LEN) return false;
  size_t n = v->mv_size - EMBER__SEAL_LEN;
  const uint8_t *p = v->mv_data;
  if (ember__get_be32(p + n) != seal_crc(k, p, n)) return false;
  v->mv_size = n;
  return true;
}

int ember__get(ember_store_t *s, MDB_txn *txn, ember__db_t db, MDB_val *k, MDB_val *v) {
  int mrc = mdb_get(txn, s->dbi[db], k, v);
  if (mrc == MDB_SUCCESS && ember__sealed(db) && !ember__unseal(k, v)) return MDB_CORRUPTED;
  return mrc;
}

int ember__put(ember_store_t *s, MDB_txn *txn, ember__db_t db, MDB_val *k, const MDB_val *v,
               unsigned flags) {
  if (!ember__sealed(db)) return mdb_put(txn, s->dbi[db], k, (MDB_val *)(uintptr_t)v, flags);
  if (v->mv_size > SIZE_MAX - EMBER__SEAL_LEN) return MDB_BAD_VALSIZE;
  /* Reserve the sealed size and fill it in place: no copy of the value. */
  MDB_val r = {.mv_size = v->mv_size + EMBER__SEAL_LEN};
  int mrc = mdb_put(txn, s->dbi[db], k, &r, flags | MDB_RESERVE);
  if (mrc != MDB_SUCCESS) return mrc;
  uint8_t *p = r.mv_data;
  if (v->mv_size) memcpy(p, v->mv_data, v->mv_size);
  ember__put_be32(p + v->mv_size, seal_crc(k, v->mv_data, v->mv_size));
  return MDB_SUCCESS;
}

__attribute__((format(printf, 3, 4))) static void set_err(char *errbuf, size_t size,
                                                          const char *fmt, ...) {
  if (!errbuf || !size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(errbuf, size, fmt, ap);
  va_end(ap);
}

int ember_store_open(const char *path, const ember_store_opts_t *opts, ember_store_t **out,
                     char *errbuf, size_t errbuf_size) {
  if (!path || !*path || !out) return -EINVAL;
  ember_store_opts_t o = opts ? *opts : (ember_store_opts_t){0};
  if (!o.map_size) o.map_size = DEFAULT_MAP_SIZE;
  if (o.max_size < o.map_size) o.max_size = o.map_size;
  if (errbuf && errbuf_size) errbuf[0] = '\0';

  ember_store_t *s = NULL;
  MDB_txn *txn = NULL;
  int rc;

  s = ember_calloc(1, sizeof *s);
  if (!s) {
    rc = -ENOMEM;
    goto cleanup;
  }
  s->read_only = o.read_only;
  s->map_size = o.map_size;
  s->max_size = o.max_size;
  {
    /* Writer-preferring, so that a map growth is not starved by a stream
     * of queries (no call takes the lock twice, so this cannot deadlock). */
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = -pthread_rwlock_init(&s->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc < 0) goto cleanup;
    s->lock_ready = true;
  }
  rc = ember__store_err(mdb_env_create(&s->env));
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_env_set_maxdbs(s->env, EMBER__DB_COUNT + 4));
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_env_set_mapsize(s->env, o.map_size));
  if (rc < 0) goto cleanup;
  /* MDB_NOTLS: readers are tied to transactions, not threads, so callers
   * may run reads from any thread pool. */
  unsigned flags = MDB_NOSUBDIR | MDB_NOTLS;
  if (o.read_only) flags |= MDB_RDONLY;
  if (o.no_sync) flags |= MDB_NOSYNC;
  rc = mdb_env_open(s->env, path, flags, 0640);
  if (rc != MDB_SUCCESS) {
    if (errbuf && errbuf_size)
      snprintf(errbuf, errbuf_size, "store %s: cannot open: %s", path, mdb_strerror(rc));
    rc = ember__store_err(rc);
    goto cleanup;
  }

  rc = ember__store_err(mdb_txn_begin(s->env, NULL, o.read_only ? MDB_RDONLY : 0, &txn));
  if (rc < 0) goto cleanup;
  for (int i = 0; i < EMBER__DB_COUNT; i++) {
    unsigned f = db_defs[i].flags | (o.read_only ? 0 : MDB_CREATE);
    int mrc = mdb_dbi_open(txn, db_defs[i].name, f, &s->dbi[i]);
    /* The session table came within schema 2 (an added table old readers
     * ignore); a read-only open of an older file reads it as empty. */
    if (mrc == MDB_NOTFOUND && i == EMBER__DB_SESSIONS && o.read_only) {
      s->no_sessions = true;
      continue;
    }
    /* The document tables came within schema 3 the same way. */
    if (mrc == MDB_NOTFOUND && (i == EMBER__DB_RULES || i == EMBER__DB_ALERTS) && o.read_only) {
      s->no_docs = true;
      continue;
    }
    /* And the tables of where windows came from, later within schema 3. */
    if (mrc == MDB_NOTFOUND && o.read_only &&
        (i == EMBER__DB_RUNS || i == EMBER__DB_PENDING || i == EMBER__DB_PARTS)) {
      s->no_runs = true;
      continue;
    }
    /* And uploaded source maps, within schema 4. */
    if (mrc == MDB_NOTFOUND && o.read_only && i == EMBER__DB_SOURCEMAPS) {
      s->no_sourcemaps = true;
      continue;
    }
    if (mrc == MDB_NOTFOUND) {
      set_err(errbuf, errbuf_size, "store %s: not an Ember store (no \"%s\" database)", path,
              db_defs[i].name);
      rc = EMBER_ENOTFOUND;
      goto cleanup;
    }
    rc = ember__store_err(mrc);
    if (rc < 0) goto cleanup;
  }

  MDB_val k = {.mv_size = 6, .mv_data = (void *)(uintptr_t) "schema"};
  MDB_val v;
  /* Read raw: schema 1 and 2 wrote the version unsealed (4 bytes), and
   * must still be told apart as older; from schema 3 it is sealed. */
  int mrc = mdb_get(txn, s->dbi[EMBER__DB_META], &k, &v);
  bool legacy = mrc == MDB_SUCCESS && v.mv_size == 4;
  if (mrc == MDB_SUCCESS && !legacy && !ember__unseal(&k, &v)) mrc = MDB_CORRUPTED;
  if (mrc == MDB_NOTFOUND && !o.read_only) {
    uint8_t ver[4];
    ember__put_be32(ver, EMBER_STORE_SCHEMA_VERSION);
    v = (MDB_val){.mv_size = sizeof ver, .mv_data = ver};
    rc = ember__store_err(ember__put(s, txn, EMBER__DB_META, &k, &v, 0));
    if (rc < 0) goto cleanup;
  } else if (mrc == MDB_NOTFOUND) {
    set_err(errbuf, errbuf_size, "store %s: no schema version: not an Ember store", path);
    rc = EMBER_ENOTFOUND;
    goto cleanup;
  } else if (mrc != MDB_SUCCESS) {
    set_err(errbuf, errbuf_size, "store %s: its schema version %s: %s", path,
            mrc == MDB_CORRUPTED ? "fails its checksum" : "cannot be read",
            ember_store_strerror(ember__store_err(mrc)));
    rc = ember__store_err(mrc);
    goto cleanup;
  } else if (v.mv_size != 4) {
    set_err(errbuf, errbuf_size, "store %s: malformed schema version", path);
    rc = EMBER_ECORRUPT;
    goto cleanup;
  } else {
    uint32_t ver = ember__get_be32(v.mv_data);
    if (ver > EMBER_STORE_SCHEMA_VERSION) {
      set_err(errbuf, errbuf_size,
              "store %s has schema version %ld, newer than the %ld this Ember reads: "
              "upgrade Ember or point it at another store",
              path, (long)ver, (long)EMBER_STORE_SCHEMA_VERSION);
      rc = EMBER_EVERSION;
      goto cleanup;
    }
    if (ver == 0 || (legacy && ver >= EMBER__SCHEMA_UPGRADABLE)) {
      set_err(errbuf, errbuf_size, "store %s: invalid schema version %ld%s", path, (long)ver,
              ver ? " (without its checksum)" : "");
      rc = EMBER_ECORRUPT;
      goto cleanup;
    }
    /* Schema 3 is schema 4 without gauge windows: a read-write open
     * rewrites the version (in this transaction, so a failed open leaves
     * it at 3), a read-only one reads it as it is. Older schemas need
     * more than that (below). */
    if (!legacy && ver == EMBER__SCHEMA_UPGRADABLE && !o.read_only) {
      uint8_t nv[4];
      ember__put_be32(nv, EMBER_STORE_SCHEMA_VERSION);
      MDB_val uv = {.mv_size = sizeof nv, .mv_data = nv};
      rc = ember__store_err(ember__put(s, txn, EMBER__DB_META, &k, &uv, 0));
      if (rc < 0) {
        set_err(errbuf, errbuf_size, "store %s: cannot upgrade schema 3 to %ld: %s", path,
                (long)EMBER_STORE_SCHEMA_VERSION, ember_store_strerror(rc));
        goto cleanup;
      }
      ver = EMBER_STORE_SCHEMA_VERSION;
    }
    if (!legacy && ver == EMBER__SCHEMA_UPGRADABLE) ver = EMBER_STORE_SCHEMA_VERSION;
    /* Version 1 had no minute rollups, version 2 no checksums; an older
     * store is refused rather than half-read (or read unchecked). */
    if (ver < EMBER_STORE_SCHEMA_VERSION) {
      set_err(errbuf, errbuf_size,
              "store %s has schema version %ld, older than the %ld this Ember reads and "
              "not migrated (%s): move it aside and start a new store, rebuilt from Kafka "
              "by resetting the consumer group's offsets to the earliest "
              "(docs/internals/store.md, \"Schema\")",
              path, (long)ver, (long)EMBER_STORE_SCHEMA_VERSION,
              ver == 1 ? "no minute rollups" : "its values carry no checksums");
      rc = EMBER_EVERSION;
      goto cleanup;
    }
  }
  rc = o.read_only ? ember__store_err(mdb_txn_commit(txn)) : ember__store_commit(s, txn);
  txn = NULL;
  if (rc < 0) goto cleanup;
  {
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info) == MDB_SUCCESS) s->map_size = info.me_mapsize;
    if (s->max_size < s->map_size) s->max_size = s->map_size;
  }

  *out = s;
  s = NULL;
cleanup:
  if (txn) mdb_txn_abort(txn);
  if (rc < 0 && errbuf && errbuf_size && !errbuf[0])
    snprintf(errbuf, errbuf_size, "store %s: %s", path, ember_strerror(rc));
  ember_store_close(s);
  return rc;
}

void ember_store_close(ember_store_t *s) {
  if (!s) return;
  if (s->env) mdb_env_close(s->env);
  ember__store_caches_clear(s);
  if (s->lock_ready) pthread_rwlock_destroy(&s->lock);
  ember_free(s);
}

int ember__labels_encode(ember__out_t *o, const char *const labels[EMBER__NLABELS]) {
  for (int i = 0; i < EMBER__NLABELS; i++) {
    int rc = ember__out_str(o, labels[i]);
    if (rc < 0) return rc;
  }
  return 0;
}

bool ember__labels_decode(const MDB_val *v, const char *labels[EMBER__NLABELS]) {
  ember__in_t in = ember__in(v->mv_data, v->mv_size);
  for (int i = 0; i < EMBER__NLABELS; i++) ember__in_str(&in, &labels[i]);
  return in.ok && in.p == in.end;
}

uint64_t ember__label_hash(const char *s) {
  /* NULL and "" must differ: hash the presence byte as well. */
  uint8_t flag = s ? 1 : 0;
  uint64_t h = ember__store_hash(EMBER_STORE_HASH_SEED, &flag, 1);
  if (s) h = ember__store_hash(h, s, strlen(s));
  return ember__store_hash_final(h);
}

static bool label_eq(const char *want, const char *have) {
  return !want || (have && strcmp(want, have) == 0);
}

static int push_id(uint32_t **ids, size_t *n, size_t *cap, uint32_t id) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 16;
    uint32_t *p = ember_realloc(*ids, c * sizeof *p);
    if (!p) return -ENOMEM;
    *ids = p;
    *cap = c;
  }
  (*ids)[(*n)++] = id;
  return 0;
}

int ember__select(ember_store_t *s, MDB_txn *txn, const ember_store_selector_t *sel, uint32_t **out,
                  size_t *nout) {
  const char *want[EMBER__NLABELS] = {0};
  if (sel) {
    want[0] = sel->worker;
    want[1] = sel->version;
    want[2] = sel->host;
    want[3] = sel->actor;
  }
  MDB_cursor *cur = NULL;
  uint32_t *ids = NULL;
  size_t n = 0, cap = 0;
  int rc;

  /* Candidates come from the shortest posting list of a given label (or
   * all series when none is given); each is then checked against every
   * label, which both intersects the lists and weeds out hash collisions. */
  int best = -1;
  size_t best_count = SIZE_MAX;
  uint8_t best_key[EMBER__POSTING_KEY_LEN];
  rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_POSTINGS], &cur));
  if (rc < 0) goto cleanup;
  for (int i = 0; i < EMBER__NLABELS; i++) {
    if (!want[i]) continue;
    uint8_t key[EMBER__POSTING_KEY_LEN];
    key[0] = (uint8_t)i;
    ember__put_be64(key + 1, ember__label_hash(want[i]));
    MDB_val k = {.mv_size = sizeof key, .mv_data = key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET);
    size_t count = 0;
    if (mrc == MDB_SUCCESS) {
      rc = ember__store_err(mdb_cursor_count(cur, &count));
      if (rc < 0) goto cleanup;
    } else if (mrc != MDB_NOTFOUND) {
      rc = ember__store_err(mrc);
      goto cleanup;
    }
    if (count < best_count) {
      best = i;
      best_count = count;
      memcpy(best_key, key, sizeof key);
    }
  }

  if (best >= 0 && best_count == 0) goto done;
  if (best >= 0) {
    MDB_val k = {.mv_size = sizeof best_key, .mv_data = best_key}, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY);
    while (mrc == MDB_SUCCESS) {
      if (v.mv_size != 4) {
        rc = EMBER_ECORRUPT;
        goto cleanup;
      }
      rc = push_id(&ids, &n, &cap, ember__get_be32(v.mv_data));
      if (rc < 0) goto cleanup;
      mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT_DUP);
    }
    if (mrc != MDB_NOTFOUND) {
      rc = ember__store_err(mrc);
      goto cleanup;
    }
  }
  mdb_cursor_close(cur);
  cur = NULL;

  if (best >= 0) {
    /* Keep the candidates whose labels all match, in place. */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
      uint8_t key[4];
      ember__put_be32(key, ids[i]);
      MDB_val k = {.mv_size = 4, .mv_data = key}, v;
      const char *have[EMBER__NLABELS];
      rc = ember__store_err(ember__get(s, txn, EMBER__DB_SERIES, &k, &v));
      if (rc == EMBER_ENOTFOUND) rc = EMBER_ECORRUPT; /* a posting names it */
      if (rc < 0) goto cleanup;
      if (!ember__labels_decode(&v, have)) {
        rc = EMBER_ECORRUPT;
        goto cleanup;
      }
      bool ok = true;
      for (int j = 0; j < EMBER__NLABELS; j++) ok = ok && label_eq(want[j], have[j]);
      if (ok) ids[kept++] = ids[i];
    }
    n = kept;
  } else {
    rc = ember__store_err(mdb_cursor_open(txn, s->dbi[EMBER__DB_SERIES], &cur));
    if (rc < 0) goto cleanup;
    MDB_val k, v;
    int mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    while (mrc == MDB_SUCCESS) {
      if (k.mv_size != 4) {
        rc = EMBER_ECORRUPT;
        goto cleanup;
      }
      rc = push_id(&ids, &n, &cap, ember__get_be32(k.mv_data));
      if (rc < 0) goto cleanup;
      mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (mrc != MDB_NOTFOUND) {
      rc = ember__store_err(mrc);
      goto cleanup;
    }
  }
done:
  if (n == 0) {
    ember_free(ids);
    ids = NULL;
  }
  *out = ids;
  *nout = n;
  ids = NULL;
  rc = 0;
cleanup:
  if (cur) mdb_cursor_close(cur);
  ember_free(ids);
  return rc;
}

static int stats_locked(ember_store_t *s, ember_store_stats_t *stats);

int ember_store_stats(ember_store_t *s, ember_store_stats_t *stats) {
  if (!s || !stats) return -EINVAL;
  int rc;
  do {
    ember__store_enter(s);
    rc = stats_locked(s, stats);
    if (rc == 0) {
      stats->map_bytes = s->map_size;
      stats->map_grows = s->grows;
    }
    ember__store_leave(s);
  } while (rc < 0 && ember__store_retry(s, &rc));
  return rc;
}

static int stats_locked(ember_store_t *s, ember_store_stats_t *stats) {
  static const struct {
    ember__db_t db;
    size_t off;
  } map[] = {
      {EMBER__DB_SERIES, offsetof(ember_store_stats_t, series)},
      {EMBER__DB_FRAMES, offsetof(ember_store_stats_t, frames)},
      {EMBER__DB_STACKS, offsetof(ember_store_stats_t, stacks)},
      {EMBER__DB_PROFILES, offsetof(ember_store_stats_t, profile_rows)},
      {EMBER__DB_CPU, offsetof(ember_store_stats_t, cpu_rows)},
      {EMBER__DB_IDEM, offsetof(ember_store_stats_t, idem_keys)},
      {EMBER__DB_ROLLUP_1H, offsetof(ember_store_stats_t, rollup_rows)},
      {EMBER__DB_ROLLUP_1M, offsetof(ember_store_stats_t, rollup_1m_rows)},
      {EMBER__DB_SESSIONS, offsetof(ember_store_stats_t, session_rows)},
      {EMBER__DB_RULES, offsetof(ember_store_stats_t, rule_docs)},
      {EMBER__DB_ALERTS, offsetof(ember_store_stats_t, alert_docs)},
      {EMBER__DB_RUNS, offsetof(ember_store_stats_t, run_rows)},
      {EMBER__DB_PENDING, offsetof(ember_store_stats_t, pending_rows)},
      {EMBER__DB_PARTS, offsetof(ember_store_stats_t, series_parts)},
      {EMBER__DB_SOURCEMAPS, offsetof(ember_store_stats_t, sourcemap_docs)},
  };
  ember_store_stats_t st = {0};
  MDB_txn *txn = NULL;
  int rc = ember__store_err(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn));
  if (rc < 0) goto cleanup;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
    if (map[i].db == EMBER__DB_SESSIONS && s->no_sessions) continue;
    if ((map[i].db == EMBER__DB_RULES || map[i].db == EMBER__DB_ALERTS) && s->no_docs) continue;
    if ((map[i].db == EMBER__DB_RUNS || map[i].db == EMBER__DB_PENDING ||
         map[i].db == EMBER__DB_PARTS) &&
        s->no_runs)
      continue;
    if (map[i].db == EMBER__DB_SOURCEMAPS && s->no_sourcemaps) continue;
    MDB_stat ms;
    rc = ember__store_err(mdb_stat(txn, s->dbi[map[i].db], &ms));
    if (rc < 0) goto cleanup;
    uint64_t entries = ms.ms_entries;
    memcpy((char *)&st + map[i].off, &entries, sizeof entries);
  }
  MDB_envinfo info;
  MDB_stat es;
  rc = ember__store_err(mdb_env_info(s->env, &info));
  if (rc < 0) goto cleanup;
  rc = ember__store_err(mdb_env_stat(s->env, &es));
  if (rc < 0) goto cleanup;
  st.file_bytes = (uint64_t)(info.me_last_pgno + 1) * es.ms_psize;
  *stats = st;
cleanup:
  if (txn) mdb_txn_abort(txn);
  return rc;
}
