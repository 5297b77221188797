/* Publishing windows to Kafka through broker outages: one idempotent
 * producer, a bounded memory queue, an on-disk spool and its replay. The
 * design, the spool file format and the failure cases are in
 * docs/internals/publish.md. */
#include <assert.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ember/log.h"
#include "ember/parse.h"
#include "publish.h"

#define PUB_LOG "publish"

#define PUB_DEFAULT_MEM_MAX    ((size_t)64 << 20)
#define PUB_DEFAULT_SPOOL_MAX  ((size_t)1 << 30)
#define PUB_DEFAULT_TIMEOUT_MS 10000
/* Replays in flight at once while the broker is healthy; with the memory
 * bound below, a spool of any size is sent in steady slices. */
#define PUB_REPLAY_MAX_FILES 100u
/* While deliveries fail, one spooled message at a time probes the broker,
 * at most this often (and never two at once). */
#define PUB_PROBE_INTERVAL_NS (INT64_C(1000) * 1000000)
/* A spool full during a long outage drops a window per publish; the line
 * saying so is written at most this often, with the counts since the last. */
#define PUB_DROP_LOG_INTERVAL_NS (INT64_C(10000) * 1000000)
/* How long close() waits for the delivery reports of purged messages. */
#define PUB_PURGE_WAIT_NS (INT64_C(5000) * 1000000)

/* ------------------------------------------------------------- spool -- */

/* One file per message, named %020llu.msg after a counter, so that
 * lexicographic order is arrival order. All integers little-endian. */
#define SPOOL_MAGIC      "EMSP"
#define SPOOL_VERSION    1u
#define SPOOL_SUFFIX     ".msg"
#define SPOOL_TMP_SUFFIX ".tmp"
#define SPOOL_DIGITS     20u
#define SPOOL_NAME_MAX   32u
/* Spool files are read back from disk, so their sizes are checked against
 * fixed bounds before anything is allocated (STYLE.md rule 12). */
#define SPOOL_MAX_KEY   ((uint32_t)64 << 10)
#define SPOOL_MAX_VALUE ((uint32_t)64 << 20)

typedef struct spool_hdr {
  char magic[4];      /* "EMSP" */
  uint16_t version;   /* SPOOL_VERSION */
  uint16_t flags;     /* 0 */
  uint32_t key_len;   /* bytes of key after the header */
  uint32_t value_len; /* bytes of value after the key */
  uint32_t crc;       /* zlib crc32 of key then value */
} spool_hdr_t;
_Static_assert(sizeof(spool_hdr_t) == 20, "the spool header is 20 bytes on disk");
_Static_assert(offsetof(spool_hdr_t, version) == 4 && offsetof(spool_hdr_t, flags) == 6 &&
                   offsetof(spool_hdr_t, key_len) == 8 && offsetof(spool_hdr_t, value_len) == 12 &&
                   offsetof(spool_hdr_t, crc) == 16,
               "spool header fields are packed in this order");
#define SPOOL_HDR_SIZE ((uint64_t)sizeof(spool_hdr_t))

/* A delivery report must know where its message came from. The tag rides
 * in librdkafka's per-message opaque as an integer (kind in the low two
 * bits, spool sequence above), so producing allocates nothing of ours. */
_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "message tags need 64-bit pointers");
enum { MSG_EVENT = 0, MSG_FRESH = 1, MSG_TARGET = 2, MSG_SPOOL = 3 };
#define SPOOL_SEQ_MAX (UINT64_MAX >> 2)

typedef enum ent_state {
  ENT_WRITING,  /* being written; not yet replayable nor droppable */
  ENT_SPOOLED,  /* on disk, waiting for replay */
  ENT_INFLIGHT, /* on disk and produced again; waiting for its report */
  ENT_GONE      /* deleted; skipped until compaction */
} ent_state_t;

typedef struct spool_ent {
  uint64_t seq;
  uint64_t size; /* file bytes, header included */
  ent_state_t state;
} spool_ent_t;

struct ember__publisher {
  rd_kafka_t *rk;
  char *topic;
  char *spool_dir; /* for log lines; NULL = no spool */
  int dirfd;       /* the spool directory, or -1 */
  uint64_t mem_max, spool_max, msg_max;
  pthread_t thread;
  bool thread_started;
  bool mu_ready;
  atomic_bool stop;

  pthread_mutex_t mu; /* everything below */
  /* The spool index, sorted by seq (new files get the next seq under the
   * lock and are appended). Entries before `head` are gone; gone entries
   * after it are compacted away once they are half the array. */
  spool_ent_t *ents;
  size_t head, len, cap;
  uint64_t next_seq;
  uint64_t replay_inflight, replay_bytes;
  bool healthy;        /* the last delivery report that counts succeeded */
  bool outage;         /* deliveries fail since outage_began_ns */
  bool draining;       /* replaying a spool; log when it empties */
  bool spool_err_seen; /* a spool write failed; logged, until one succeeds */
  bool drop_logged;    /* a "no room" drop was logged; the next after a kept window is */
  int64_t outage_began_ns, last_probe_ns, last_drop_log_ns;
  uint64_t drops_unlogged, drop_bytes_unlogged; /* oldest-first drops not yet logged */
  uint64_t outage_spooled0, outage_dropped0, drain_replayed0;
  uint64_t replayed; /* spooled messages acknowledged */
  uint64_t purged;   /* unacknowledged messages purged at close */
  ember__publisher_stats_t st;
};

static void *msg_tag(unsigned kind, uint64_t seq) { return (void *)(uintptr_t)((seq << 2) | kind); }

static void spool_name(char *buf, uint64_t seq, const char *suffix) {
  snprintf(buf, SPOOL_NAME_MAX, "%020" PRIu64 "%s", seq, suffix);
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *b = buf;
  while (len > 0) {
    ssize_t w = write(fd, b, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    b += w;
    len -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, void *buf, size_t len) {
  char *b = buf;
  while (len > 0) {
    ssize_t r = read(fd, b, len);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) return EMBER_ECORRUPT; /* shorter than fstat said: changed under us */
    b += r;
    len -= (size_t)r;
  }
  return 0;
}

static uint32_t spool_crc(const void *key, size_t klen, const void *val, size_t vlen) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  if (klen > 0) crc = crc32_z(crc, key, klen);
  if (vlen > 0) crc = crc32_z(crc, val, vlen);
  return (uint32_t)crc;
}

/* Write one message as file `seq`: to a temporary name, fsync'd, renamed,
 * and the directory fsync'd, so after a crash the file is whole or absent. */
static int spool_write_file(int dirfd, uint64_t seq, const void *key, size_t klen, const void *val,
                            size_t vlen) {
  char tmp[SPOOL_NAME_MAX], name[SPOOL_NAME_MAX];
  spool_name(tmp, seq, SPOOL_TMP_SUFFIX);
  spool_name(name, seq, SPOOL_SUFFIX);
  spool_hdr_t h = {.version = htole16(SPOOL_VERSION),
                   .flags = 0,
                   .key_len = htole32((uint32_t)klen),
                   .value_len = htole32((uint32_t)vlen),
                   .crc = htole32(spool_crc(key, klen, val, vlen))};
  memcpy(h.magic, SPOOL_MAGIC, sizeof h.magic);
  int rc = 0;
  int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    rc = -errno;
    goto cleanup;
  }
  rc = write_all(fd, &h, sizeof h);
  if (rc == 0 && klen > 0) rc = write_all(fd, key, klen);
  if (rc == 0 && vlen > 0) rc = write_all(fd, val, vlen);
  if (rc != 0) goto cleanup;
  if (fsync(fd) != 0) {
    rc = -errno;
    goto cleanup;
  }
  /* close() of a regular file is not retried on EINTR: the fd is gone. */
  int cr = close(fd);
  fd = -1;
  if (cr != 0 && errno != EINTR) {
    rc = -errno;
    goto cleanup;
  }
  if (renameat(dirfd, tmp, dirfd, name) != 0) {
    rc = -errno;
    goto cleanup;
  }
  /* The rename is durable only once the directory is. */
  if (fsync(dirfd) != 0) rc = -errno;
cleanup:
  if (fd >= 0) close(fd);
  if (rc != 0) unlinkat(dirfd, tmp, 0);
  return rc;
}

/* A spooled message read back: key at buf + header, value after it. */
typedef struct spool_msg {
  char *buf;
  size_t klen, vlen, size;
} spool_msg_t;

/* Read and verify file `name`. Returns 0, EMBER_ECORRUPT (with the reason
 * in why), -errno or -ENOMEM. */
static int spool_read_file(int dirfd, const char *name, spool_msg_t *out, const char **why) {
  *why = NULL;
  char *buf = NULL;
  int rc = 0;
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    rc = -errno;
    goto cleanup;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    rc = -errno;
    goto cleanup;
  }
  rc = EMBER_ECORRUPT;
  if (!S_ISREG(sb.st_mode)) {
    *why = "not a regular file";
    goto cleanup;
  }
  uint64_t size = (uint64_t)sb.st_size;
  if (size < SPOOL_HDR_SIZE) {
    *why = "shorter than its header";
    goto cleanup;
  }
  if (size > SPOOL_HDR_SIZE + SPOOL_MAX_KEY + SPOOL_MAX_VALUE) {
    *why = "larger than any message";
    goto cleanup;
  }
  buf = ember_malloc((size_t)size);
  if (buf == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  rc = read_all(fd, buf, (size_t)size);
  if (rc == EMBER_ECORRUPT) *why = "changed while read";
  if (rc != 0) goto cleanup;
  rc = EMBER_ECORRUPT;
  spool_hdr_t h;
  memcpy(&h, buf, sizeof h);
  uint64_t klen = le32toh(h.key_len), vlen = le32toh(h.value_len);
  if (memcmp(h.magic, SPOOL_MAGIC, sizeof h.magic) != 0) {
    *why = "bad magic";
  } else if (le16toh(h.version) != SPOOL_VERSION) {
    *why = "unknown version";
  } else if (klen > SPOOL_MAX_KEY || vlen > SPOOL_MAX_VALUE ||
             SPOOL_HDR_SIZE + klen + vlen != size) {
    *why = "lengths do not match the file size (truncated?)";
  } else if (spool_crc(buf + SPOOL_HDR_SIZE, (size_t)klen, buf + SPOOL_HDR_SIZE + klen,
                       (size_t)vlen) != le32toh(h.crc)) {
    *why = "CRC mismatch";
  } else {
    out->buf = buf;
    out->klen = (size_t)klen;
    out->vlen = (size_t)vlen;
    out->size = (size_t)size;
    buf = NULL;
    rc = 0;
  }
cleanup:
  if (fd >= 0) close(fd);
  ember_free(buf);
  return rc;
}

/* The index position of `seq` among the live part, or p->len. */
static size_t ent_find(const ember__publisher_t *p, uint64_t seq) {
  size_t lo = p->head, hi = p->len;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (p->ents[mid].seq < seq) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < p->len && p->ents[lo].seq == seq ? lo : p->len;
}

static int ent_append(ember__publisher_t *p, uint64_t seq, uint64_t size, ent_state_t state) {
  if (p->len == p->cap) {
    /* Reclaim every gone entry before growing, not just the prefix: an
     * old file that keeps failing would otherwise pin all the acknowledged
     * ones behind it. Order is kept, so the index stays sorted. */
    size_t w = 0;
    for (size_t r = p->head; r < p->len; r++) {
      if (p->ents[r].state != ENT_GONE) p->ents[w++] = p->ents[r];
    }
    p->head = 0;
    p->len = w;
    /* Grow when compaction won little, so it is not redone every append. */
    if (p->len >= p->cap - p->cap / 4) {
      size_t cap = p->cap ? p->cap * 2 : 64;
      spool_ent_t *e = ember_realloc(p->ents, cap * sizeof *e);
      if (e == NULL && p->len == p->cap) return -ENOMEM;
      if (e != NULL) {
        p->ents = e;
        p->cap = cap;
      }
    }
  }
  p->ents[p->len++] = (spool_ent_t){.seq = seq, .size = size, .state = state};
  return 0;
}

/* Forget entry i (its file is already gone) and advance head past the gone
 * prefix. */
static void ent_remove(ember__publisher_t *p, size_t i) {
  assert(i < p->len && p->ents[i].state != ENT_GONE);
  p->ents[i].state = ENT_GONE;
  p->st.spool_bytes -= p->ents[i].size;
  p->st.spool_files--;
  while (p->head < p->len && p->ents[p->head].state == ENT_GONE) p->head++;
  if (p->head == p->len) p->head = p->len = 0;
}

/* Delete spooled file i. Called with the lock held. */
static void spool_unlink(ember__publisher_t *p, size_t i) {
  char name[SPOOL_NAME_MAX];
  spool_name(name, p->ents[i].seq, SPOOL_SUFFIX);
  if (unlinkat(p->dirfd, name, 0) != 0 && errno != ENOENT)
    EMBER_WARN(PUB_LOG, "cannot delete spool file %s/%s: %s", p->spool_dir, name, strerror(errno));
  ent_remove(p, i);
}

/* Spool one message, deleting the oldest spooled files when it would pass
 * spool_max. Returns 0, -ENOMEM (no room: counted as dropped) or -EIO (the
 * write failed: counted as dropped). */
static int spool_put(ember__publisher_t *p, const void *key, size_t klen, const void *val,
                     size_t vlen) {
  uint64_t size = SPOOL_HDR_SIZE + klen + vlen;
  uint64_t freed = 0, freed_bytes = 0, seq = 0;
  int rc = 0;
  pthread_mutex_lock(&p->mu);
  if (p->dirfd < 0 || size > p->spool_max || klen > SPOOL_MAX_KEY || vlen > SPOOL_MAX_VALUE ||
      p->next_seq > SPOOL_SEQ_MAX) {
    rc = -ENOMEM;
  } else {
    /* Oldest first. Files being written or replayed are skipped: the
     * former are newer, the latter few (PUB_REPLAY_MAX_FILES) and may be
     * acknowledged in a moment. */
    for (size_t i = p->head; i < p->len && p->st.spool_bytes + size > p->spool_max; i++) {
      if (p->ents[i].state != ENT_SPOOLED) continue;
      freed++;
      freed_bytes += p->ents[i].size;
      spool_unlink(p, i);
    }
    p->st.dropped += freed;
    p->drops_unlogged += freed;
    p->drop_bytes_unlogged += freed_bytes;
    if (p->st.spool_bytes + size > p->spool_max) {
      rc = -ENOMEM;
    } else {
      seq = p->next_seq++;
      rc = ent_append(p, seq, size, ENT_WRITING);
    }
  }
  bool log_noroom = false;
  if (rc != 0) {
    p->st.dropped++;
    log_noroom = !p->drop_logged;
    p->drop_logged = true;
  } else {
    p->st.spool_bytes += size;
    p->st.spool_files++;
  }
  uint64_t dropped = p->st.dropped;
  freed = 0;
  if (p->drops_unlogged > 0 &&
      ember_time_mono_ns() - p->last_drop_log_ns >= PUB_DROP_LOG_INTERVAL_NS) {
    freed = p->drops_unlogged;
    freed_bytes = p->drop_bytes_unlogged;
    p->drops_unlogged = p->drop_bytes_unlogged = 0;
    p->last_drop_log_ns = ember_time_mono_ns();
  }
  pthread_mutex_unlock(&p->mu);
  if (freed > 0)
    EMBER_WARN(PUB_LOG,
               "spool full (limit %" PRIu64 " bytes): dropped the %" PRIu64
               " oldest windows (%" PRIu64 " bytes) to make room; %" PRIu64
               " dropped in total (the next such line comes 10 s later at the earliest)",
               p->spool_max, freed, freed_bytes, dropped);
  if (rc != 0) {
    /* One line per streak: a full spool during an outage would otherwise
     * log every window. */
    if (log_noroom && p->dirfd >= 0)
      EMBER_WARN(PUB_LOG,
                 "dropping windows: no room in the spool %s (limit %" PRIu64
                 " bytes, this one %" PRIu64 "); %" PRIu64 " dropped in total",
                 p->spool_dir, p->spool_max, size, dropped);
    else if (log_noroom)
      EMBER_WARN(PUB_LOG,
                 "dropping windows: no spool to keep what Kafka has not taken (memory queue "
                 "full or delivery failed); %" PRIu64 " dropped in total",
                 dropped);
    return rc;
  }

  /* The file is written outside the lock: fsync takes milliseconds, and the
   * caller of publish() must not wait for a delivery report's write. */
  int wrc = spool_write_file(p->dirfd, seq, key, klen, val, vlen);

  pthread_mutex_lock(&p->mu);
  size_t i = ent_find(p, seq);
  bool log_err = false;
  if (i == p->len || p->ents[i].state != ENT_WRITING) {
    assert(!"only spool_put removes WRITING entries");
  } else if (wrc == 0) {
    p->ents[i].state = ENT_SPOOLED;
    p->st.spooled++;
    p->spool_err_seen = false;
    p->drop_logged = false;
  } else {
    ent_remove(p, i);
    p->st.dropped++;
    log_err = !p->spool_err_seen;
    p->spool_err_seen = true;
  }
  dropped = p->st.dropped;
  pthread_mutex_unlock(&p->mu);
  if (log_err)
    EMBER_ERROR(PUB_LOG,
                "cannot write to the spool %s: %s; windows are dropped until a write succeeds "
                "(%" PRIu64 " dropped in total)",
                p->spool_dir, strerror(-wrc), dropped);
  return wrc == 0 ? 0 : -EIO;
}

static bool name_is_spool_file(const char *name, size_t n) {
  if (n != SPOOL_DIGITS + strlen(SPOOL_SUFFIX)) return false;
  if (strcmp(name + SPOOL_DIGITS, SPOOL_SUFFIX) != 0) return false;
  for (size_t i = 0; i < SPOOL_DIGITS; i++) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

static bool has_suffix(const char *name, size_t n, const char *suffix) {
  size_t s = strlen(suffix);
  return n >= s && strcmp(name + n - s, suffix) == 0;
}

static int ent_cmp(const void *a, const void *b) {
  const spool_ent_t *x = a, *y = b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Read what an earlier run left in the spool: delete half-written .tmp
 * files, verify every message (a bad one is deleted and counted), and index
 * the rest. Runs before the producer and the thread exist. */
static int spool_scan(ember__publisher_t *p, char *errbuf, size_t errbuf_size) {
  uint64_t tmps = 0, corrupt = 0;
  int64_t t0 = ember_time_mono_ns();
  int fd = fcntl(p->dirfd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(errbuf, errbuf_size, "spool %s: %s", p->spool_dir, strerror(errno));
    return -errno;
  }
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    int e = errno;
    close(fd);
    snprintf(errbuf, errbuf_size, "spool %s: %s", p->spool_dir, strerror(e));
    return -e;
  }
  int rc = 0;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (de == NULL) {
      if (errno != 0) {
        rc = -errno;
        snprintf(errbuf, errbuf_size, "cannot list the spool %s: %s", p->spool_dir,
                 strerror(errno));
      }
      break;
    }
    const char *name = de->d_name;
    size_t n = strlen(name);
    if (has_suffix(name, n, SPOOL_TMP_SUFFIX) && n == SPOOL_DIGITS + strlen(SPOOL_TMP_SUFFIX)) {
      /* A write that a crash interrupted: the message was never
       * acknowledged as spooled, and its sender counted it elsewhere. */
      if (unlinkat(p->dirfd, name, 0) == 0) tmps++;
      continue;
    }
    if (!name_is_spool_file(name, n)) continue; /* ".", "..", anything not ours */
    char digits[SPOOL_DIGITS + 1];
    memcpy(digits, name, SPOOL_DIGITS);
    digits[SPOOL_DIGITS] = '\0';
    uint64_t seq = 0;
    if (ember_parse_u64(digits, 0, SPOOL_SEQ_MAX, &seq) != 0) continue;
    /* Past every name present, readable or not, so no new file replaces one. */
    if (seq >= p->next_seq) p->next_seq = seq + 1;
    spool_msg_t m = {0};
    const char *why = NULL;
    int r = spool_read_file(p->dirfd, name, &m, &why);
    if (r == EMBER_ECORRUPT) {
      EMBER_WARN(PUB_LOG, "spool file %s/%s is corrupt (%s): deleted", p->spool_dir, name, why);
      unlinkat(p->dirfd, name, 0);
      corrupt++;
      continue;
    }
    if (r == -ENOMEM) {
      rc = r;
      snprintf(errbuf, errbuf_size, "out of memory reading the spool %s", p->spool_dir);
      break;
    }
    if (r != 0) {
      /* Unreadable (permissions, I/O error): left alone and not indexed,
       * so the spool bound cannot count it; a later start may read it. */
      EMBER_WARN(PUB_LOG, "cannot read spool file %s/%s: %s; skipped", p->spool_dir, name,
                 strerror(-r));
      continue;
    }
    ember_free(m.buf);
    rc = ent_append(p, seq, m.size, ENT_SPOOLED);
    if (rc != 0) {
      snprintf(errbuf, errbuf_size, "out of memory indexing the spool %s", p->spool_dir);
      break;
    }
    p->st.spool_bytes += m.size;
    p->st.spool_files++;
  }
  closedir(d);
  if (rc != 0) return rc;
  if (p->len > 1) qsort(p->ents, p->len, sizeof *p->ents, ent_cmp);
  p->st.spool_corrupt = corrupt;
  /* The bound may have shrunk since the spool was written. */
  uint64_t over = 0;
  while (p->len > p->head && p->st.spool_bytes > p->spool_max) {
    spool_unlink(p, p->head);
    over++;
  }
  p->st.dropped += over;
  if (p->st.spool_files > 0 || corrupt > 0 || tmps > 0 || over > 0)
    EMBER_INFO(PUB_LOG,
               "spool %s: %" PRIu64 " windows (%" PRIu64
               " bytes) from an earlier run to send; %" PRIu64 " corrupt and %" PRIu64
               " half-written files deleted, %" PRIu64
               " dropped over the limit; scanned in %" PRId64 " ms",
               p->spool_dir, p->st.spool_files, p->st.spool_bytes, corrupt, tmps, over,
               (ember_time_mono_ns() - t0) / 1000000);
  p->draining = p->st.spool_files > 0;
  p->drain_replayed0 = 0;
  return 0;
}

/* mkdir -p, mode 0700: the spool holds profiles. */
static int mkdir_p(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf) return -ENAMETOOLONG;
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -errno;
    buf[i] = c;
  }
  return 0;
}

/* --------------------------------------------------------- delivery -- */

/* Errors that a retry will not cure: the message is dropped, not spooled,
 * or it would be replayed for ever. */
static bool err_permanent(rd_kafka_resp_err_t e) {
  return e == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
         e == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE || e == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
         e == RD_KAFKA_RESP_ERR_INVALID_MSG;
}

static bool err_purged(rd_kafka_resp_err_t e) {
  return e == RD_KAFKA_RESP_ERR__PURGE_QUEUE || e == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
}

/* Called with the lock held; sets *over if an "outage over" line is due
 * and fills its numbers. */
static void note_success(ember__publisher_t *p, bool *over, double *secs, uint64_t *spooled,
                         uint64_t *dropped) {
  p->healthy = true;
  p->drop_logged = false;
  if (!p->outage) return;
  p->outage = false;
  *over = true;
  *secs = (double)(ember_time_mono_ns() - p->outage_began_ns) / 1e9;
  *spooled = p->st.spooled - p->outage_spooled0;
  *dropped = p->st.dropped - p->outage_dropped0;
  if (p->st.spool_files > 0 && !p->draining) {
    p->draining = true;
    p->drain_replayed0 = p->replayed;
  }
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
  (void)rk;
  ember__publisher_t *p = opaque;
  uintptr_t tag = (uintptr_t)m->_private;
  unsigned kind = (unsigned)(tag & 3u);
  uint64_t seq = (uint64_t)(tag >> 2);
  uint64_t bytes = (uint64_t)m->len + m->key_len;
  rd_kafka_resp_err_t err = m->err;
  bool ok = err == RD_KAFKA_RESP_ERR_NO_ERROR;
  bool purged = err_purged(err), permanent = err_permanent(err);
  bool began = false, over = false, drained = false, respool = false;
  double secs = 0;
  uint64_t n_spooled = 0, n_dropped = 0, n_replayed = 0, n_files = 0;

  pthread_mutex_lock(&p->mu);
  assert(p->st.queue_bytes >= bytes); /* added when produced */
  p->st.queue_bytes -= bytes;
  if (ok) {
    note_success(p, &over, &secs, &n_spooled, &n_dropped);
  } else if (!purged && !permanent) {
    p->healthy = false;
    if (!p->outage) {
      p->outage = true;
      began = true;
      p->outage_began_ns = ember_time_mono_ns();
      p->outage_spooled0 = p->st.spooled;
      p->outage_dropped0 = p->st.dropped;
    }
  }
  n_files = p->st.spool_files;

  switch (kind) {
  case MSG_EVENT:
    if (ok) {
      p->st.events_sent++;
    } else {
      p->st.events_failed++;
    }
    break;
  case MSG_TARGET:
    if (ok) {
      p->st.targets_sent++;
    } else {
      p->st.targets_failed++;
    }
    break;
  case MSG_FRESH:
    if (ok) {
      p->st.published++;
    } else {
      p->st.failed++;
      if (permanent) {
        p->st.dropped++;
      } else {
        respool = true;
      }
    }
    break;
  case MSG_SPOOL: {
    size_t i = ent_find(p, seq);
    /* Only this report ends INFLIGHT (drops skip it); the check keeps a
     * broken invariant in a release build from writing out of bounds. */
    if (i == p->len || p->ents[i].state != ENT_INFLIGHT) {
      assert(!"delivery report for a spool file not in flight");
      break;
    }
    assert(p->replay_inflight > 0 && p->replay_bytes >= p->ents[i].size);
    p->replay_inflight--;
    p->replay_bytes -= p->ents[i].size;
    if (ok) {
      p->st.published++;
      p->replayed++;
      spool_unlink(p, i);
      if (p->draining && p->st.spool_files == 0) {
        p->draining = false;
        drained = true;
        n_replayed = p->replayed - p->drain_replayed0;
      }
    } else if (permanent) {
      p->st.failed++;
      p->st.dropped++;
      spool_unlink(p, i);
    } else {
      /* It stays on disk for the next replay. */
      p->st.failed++;
      p->ents[i].state = ENT_SPOOLED;
    }
    break;
  }
  default: assert(!"unknown message tag");
  }
  if (purged) p->purged++;
  pthread_mutex_unlock(&p->mu);

  if (began)
    EMBER_WARN(PUB_LOG, "Kafka outage began: a delivery to %s failed (%s); spooling to %s",
               m->rkt ? rd_kafka_topic_name(m->rkt) : "?", rd_kafka_err2str(err),
               p->spool_dir ? p->spool_dir : "nowhere (no spool: windows are dropped)");
  if (over)
    EMBER_INFO(PUB_LOG,
               "Kafka outage over after %.1f s: %" PRIu64 " windows spooled, %" PRIu64
               " dropped during it; %" PRIu64 " in the spool to replay",
               secs, n_spooled, n_dropped, n_files);
  if (drained) EMBER_INFO(PUB_LOG, "spool drained: %" PRIu64 " windows replayed", n_replayed);
  if (permanent)
    EMBER_WARN(PUB_LOG, "Kafka refused a %s of %" PRIu64 " bytes for good (%s): dropped",
               kind == MSG_TARGET  ? "target record"
               : kind == MSG_EVENT ? "session event"
                                   : "window",
               bytes, rd_kafka_err2str(err));
  if (respool) spool_put(p, m->key, m->key_len, m->payload, m->len);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
  (void)opaque;
  if (err == RD_KAFKA_RESP_ERR__FATAL) {
    char why[512];
    rd_kafka_fatal_error(rk, why, sizeof why);
    EMBER_ERROR(PUB_LOG,
                "the Kafka producer failed for good (%s): windows are spooled until restart", why);
    return;
  }
  /* Transport errors repeat every reconnect during an outage; the outage
   * lines above say what matters once. */
  EMBER_DEBUG(PUB_LOG, "kafka: %s", reason);
}

/* ----------------------------------------------------------- replay -- */

/* Produce spooled messages again, oldest first: while deliveries succeed,
 * up to PUB_REPLAY_MAX_FILES and half the memory bound at once; while they
 * fail, a single probe every PUB_PROBE_INTERVAL_NS. Files are deleted by
 * the delivery report, never here. */
static void replay_step(ember__publisher_t *p) {
  for (;;) {
    if (atomic_load(&p->stop)) return;
    pthread_mutex_lock(&p->mu);
    size_t i = p->head;
    while (i < p->len && p->ents[i].state != ENT_SPOOLED) i++;
    bool go = false;
    bool probe = !p->healthy;
    if (i < p->len) {
      if (probe) {
        int64_t now = ember_time_mono_ns();
        go = p->replay_inflight == 0 && now - p->last_probe_ns >= PUB_PROBE_INTERVAL_NS;
        if (go) p->last_probe_ns = now;
      } else {
        go = p->replay_inflight == 0 || (p->replay_inflight < PUB_REPLAY_MAX_FILES &&
                                         p->replay_bytes + p->ents[i].size <= p->mem_max / 2);
      }
    }
    if (!go) {
      pthread_mutex_unlock(&p->mu);
      return;
    }
    uint64_t seq = p->ents[i].seq, size = p->ents[i].size;
    p->ents[i].state = ENT_INFLIGHT;
    p->replay_inflight++;
    p->replay_bytes += size;
    pthread_mutex_unlock(&p->mu);

    char name[SPOOL_NAME_MAX];
    spool_name(name, seq, SPOOL_SUFFIX);
    spool_msg_t m = {0};
    const char *why = NULL;
    int rc = spool_read_file(p->dirfd, name, &m, &why);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    if (rc == 0) {
      pthread_mutex_lock(&p->mu);
      p->st.queue_bytes += m.klen + m.vlen;
      pthread_mutex_unlock(&p->mu);
      /* librdkafka's V_ macros cast their argument unparenthesised. */
      char *key = m.buf + SPOOL_HDR_SIZE, *value = key + m.klen;
      err = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(p->topic), RD_KAFKA_V_KEY(key, m.klen),
                              RD_KAFKA_V_VALUE(value, m.vlen),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_OPAQUE(msg_tag(MSG_SPOOL, seq)), RD_KAFKA_V_END);
    }
    ember_free(m.buf);

    /* Delivery reports run on this thread (rd_kafka_poll in
     * publisher_thread), so none for this message has come yet: the entry
     * is still INFLIGHT. */
    pthread_mutex_lock(&p->mu);
    i = ent_find(p, seq);
    if (i == p->len || p->ents[i].state != ENT_INFLIGHT) {
      assert(!"replayed spool file vanished from the index");
      pthread_mutex_unlock(&p->mu);
      return;
    }
    bool produced = rc == 0 && err == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (produced) {
      p->st.respooled++;
    } else {
      p->replay_inflight--;
      p->replay_bytes -= size;
      if (rc == 0) p->st.queue_bytes -= m.klen + m.vlen;
      if (rc == EMBER_ECORRUPT) {
        /* Damaged since start-up (or since it was written). */
        p->st.spool_corrupt++;
        spool_unlink(p, i);
      } else if (rc == 0 && err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
        p->st.dropped++;
        spool_unlink(p, i);
      } else if (rc != 0 && rc != -ENOMEM) {
        /* Unreadable: forget it rather than retry it for ever. */
        ent_remove(p, i);
        p->st.dropped++;
      } else {
        p->ents[i].state = ENT_SPOOLED; /* queue full or out of memory: later */
      }
    }
    pthread_mutex_unlock(&p->mu);
    if (rc == EMBER_ECORRUPT)
      EMBER_WARN(PUB_LOG, "spool file %s/%s is corrupt (%s): deleted", p->spool_dir, name, why);
    else if (rc != 0 && rc != -ENOMEM)
      EMBER_WARN(PUB_LOG, "cannot read spool file %s/%s: %s; dropped", p->spool_dir, name,
                 strerror(-rc));
    else if (rc == 0 && err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
      EMBER_WARN(PUB_LOG, "spool file %s/%s is larger than Kafka accepts: dropped", p->spool_dir,
                 name);
    if (!produced && (rc == 0 || rc == -ENOMEM)) return;
    if (probe) return;
  }
}

static void *publisher_thread(void *arg) {
  ember__publisher_t *p = arg;
  while (!atomic_load(&p->stop)) {
    /* Serves delivery reports (on_delivery runs here) and sleeps up to
     * 100 ms when there are none. */
    rd_kafka_poll(p->rk, 100);
    if (p->dirfd >= 0) replay_step(p);
  }
  return NULL;
}

/* -------------------------------------------------------------- API -- */

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, char *errbuf,
                    size_t errbuf_size) {
  char err[256];
  if (rd_kafka_conf_set(conf, key, value, err, sizeof err) == RD_KAFKA_CONF_OK) return 0;
  snprintf(errbuf, errbuf_size, "Kafka property %s=%s: %s", key, value, err);
  return EMBER_ECONFIG;
}

int ember__publisher_new(const ember__publisher_opts_t *opts, ember__publisher_t **out,
                         char *errbuf, size_t errbuf_size) {
  if (errbuf != NULL && errbuf_size > 0) errbuf[0] = '\0';
  if (opts == NULL || opts->kafka == NULL || out == NULL || opts->delivery_timeout_ms < 0) {
    if (errbuf_size > 0) snprintf(errbuf, errbuf_size, "invalid publisher options");
    return -EINVAL;
  }
  rd_kafka_conf_t *conf = NULL;
  int rc = -ENOMEM;
  ember__publisher_t *p = ember_calloc(1, sizeof *p);
  if (p == NULL) goto cleanup;
  p->dirfd = -1;
  atomic_init(&p->stop, false);
  p->mem_max = opts->mem_max_bytes ? opts->mem_max_bytes : PUB_DEFAULT_MEM_MAX;
  p->spool_max = opts->spool_max_bytes ? opts->spool_max_bytes : PUB_DEFAULT_SPOOL_MAX;
  int timeout_ms = opts->delivery_timeout_ms ? opts->delivery_timeout_ms : PUB_DEFAULT_TIMEOUT_MS;
  if (pthread_mutex_init(&p->mu, NULL) != 0) goto cleanup;
  p->mu_ready = true;
  p->topic = ember_strdup(opts->topic ? opts->topic : EMBER_TOPIC_PROFILES);
  if (p->topic == NULL) goto cleanup;

  if (opts->spool_dir != NULL) {
    p->spool_dir = ember_strdup(opts->spool_dir);
    if (p->spool_dir == NULL) goto cleanup;
    rc = mkdir_p(p->spool_dir);
    if (rc == 0) {
      p->dirfd = open(p->spool_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (p->dirfd < 0) rc = -errno;
    }
    if (rc != 0) {
      snprintf(errbuf, errbuf_size, "cannot use spool directory %s: %s", p->spool_dir,
               strerror(-rc));
      goto cleanup;
    }
    rc = spool_scan(p, errbuf, errbuf_size);
    if (rc != 0) goto cleanup;
  }

  rc = ember_kafka_producer_conf(opts->kafka, &conf, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  /* An outage must surface as failed deliveries (which are spooled), not
   * as messages waiting in memory for librdkafka's 5-minute default. */
  char num[32];
  snprintf(num, sizeof num, "%d", timeout_ms);
  rc = conf_set(conf, "message.timeout.ms", num, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  /* Our own accounting (queue_bytes against mem_max) decides what is
   * queued; librdkafka's limit sits one largest message above it, so it
   * never refuses what we admitted, and still bounds what we cannot see. */
  char val[64];
  size_t vlen = sizeof val;
  uint64_t msg_max = 1000000;
  if (rd_kafka_conf_get(conf, "message.max.bytes", val, &vlen) == RD_KAFKA_CONF_OK)
    (void)ember_parse_u64(val, 1, UINT32_MAX, &msg_max);
  p->msg_max = msg_max;
  uint64_t kbytes = (p->mem_max + msg_max) / 1024 + 1;
  if (kbytes > INT32_MAX) kbytes = INT32_MAX;
  snprintf(num, sizeof num, "%" PRIu64, kbytes);
  rc = conf_set(conf, "queue.buffering.max.kbytes", num, errbuf, errbuf_size);
  if (rc != 0) goto cleanup;
  rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
  rd_kafka_conf_set_error_cb(conf, on_error);
  rd_kafka_conf_set_opaque(conf, p);
  rc = ember_kafka_producer_new(opts->kafka, conf, &p->rk, errbuf, errbuf_size);
  conf = NULL; /* taken whatever the result */
  if (rc != 0) goto cleanup;

  /* A spool left by an earlier run is probed before it is replayed in
   * bulk: the broker's health is unknown until a delivery succeeds. */
  p->last_probe_ns = ember_time_mono_ns() - PUB_PROBE_INTERVAL_NS;
  p->last_drop_log_ns = ember_time_mono_ns() - PUB_DROP_LOG_INTERVAL_NS;
  int e = pthread_create(&p->thread, NULL, publisher_thread, p);
  if (e != 0) {
    rc = -e;
    snprintf(errbuf, errbuf_size, "cannot start the publisher thread: %s", strerror(e));
    goto cleanup;
  }
  p->thread_started = true;
  *out = p;
  p = NULL;
  rc = 0;
cleanup:
  if (rc == -ENOMEM && errbuf != NULL && errbuf_size > 0 && errbuf[0] == '\0')
    snprintf(errbuf, errbuf_size, "out of memory");
  if (conf != NULL) rd_kafka_conf_destroy(conf);
  ember__publisher_close(p, 0);
  return rc;
}

void ember__publisher_close(ember__publisher_t *p, int timeout_ms) {
  if (p == NULL) return;
  if (p->thread_started) {
    atomic_store(&p->stop, true);
    pthread_join(p->thread, NULL);
  }
  if (p->rk != NULL) {
    /* From here on the caller's thread serves delivery reports. */
    int64_t t0 = ember_time_mono_ns();
    rd_kafka_flush(p->rk, timeout_ms > 0 ? timeout_ms : 0);
    int left = rd_kafka_outq_len(p->rk);
    if (left > 0) {
      /* Whatever is unacknowledged now gets a purge error report and is
       * spooled like any failed delivery, so the next start sends it (a
       * purged in-flight message may also have reached Kafka: consumers
       * dedupe). Replays purged are simply left on disk. */
      rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
      int64_t deadline = ember_time_mono_ns() + PUB_PURGE_WAIT_NS;
      while (rd_kafka_outq_len(p->rk) > 0 && ember_time_mono_ns() < deadline)
        rd_kafka_poll(p->rk, 50);
      pthread_mutex_lock(&p->mu);
      uint64_t purged = p->purged, files = p->st.spool_files;
      pthread_mutex_unlock(&p->mu);
      EMBER_INFO(PUB_LOG,
                 "closing: %" PRIu64 " messages unacknowledged after %" PRId64 " ms; %" PRIu64
                 " windows in the spool for the next start",
                 purged, (ember_time_mono_ns() - t0) / 1000000, files);
    }
    if (p->drops_unlogged > 0)
      EMBER_WARN(PUB_LOG,
                 "spool full (limit %" PRIu64 " bytes): dropped the %" PRIu64
                 " oldest windows (%" PRIu64 " bytes) since the last report; %" PRIu64
                 " dropped in total",
                 p->spool_max, p->drops_unlogged, p->drop_bytes_unlogged, p->st.dropped);
    rd_kafka_destroy(p->rk);
  }
  if (p->dirfd >= 0) close(p->dirfd);
  if (p->mu_ready) pthread_mutex_destroy(&p->mu);
  ember_free(p->ents);
  ember_free(p->spool_dir);
  ember_free(p->topic);
  ember_free(p);
}

int ember__publisher_publish(ember__publisher_t *p, const char *key, const void *data, size_t len) {
  if (p == NULL || key == NULL || (data == NULL && len > 0)) return -EINVAL;
  size_t klen = strlen(key);
  uint64_t bytes = (uint64_t)klen + len;
  if (bytes > p->msg_max) {
    pthread_mutex_lock(&p->mu);
    uint64_t dropped = ++p->st.dropped;
    pthread_mutex_unlock(&p->mu);
    EMBER_WARN(PUB_LOG,
               "dropped a window of %" PRIu64 " bytes: Kafka accepts at most %" PRIu64
               " (message.max.bytes); %" PRIu64 " dropped in total",
               bytes, p->msg_max, dropped);
    return EMBER_ETOOBIG;
  }
  pthread_mutex_lock(&p->mu);
  bool fits = p->st.queue_bytes + bytes <= p->mem_max;
  if (fits) p->st.queue_bytes += bytes;
  pthread_mutex_unlock(&p->mu);
  if (fits) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        p->rk, RD_KAFKA_V_TOPIC(p->topic), RD_KAFKA_V_KEY((void *)(uintptr_t)key, klen),
        RD_KAFKA_V_VALUE((void *)(uintptr_t)data, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_OPAQUE(msg_tag(MSG_FRESH, 0)), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return 0;
    pthread_mutex_lock(&p->mu);
    p->st.queue_bytes -= bytes;
    pthread_mutex_unlock(&p->mu);
    if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE) {
      pthread_mutex_lock(&p->mu);
      p->st.dropped++;
      pthread_mutex_unlock(&p->mu);
      EMBER_WARN(PUB_LOG, "dropped a window of %" PRIu64 " bytes: %s", bytes,
                 rd_kafka_err2str(err));
      return EMBER_ETOOBIG;
    }
    /* Queue full (librdkafka's own bound), or the producer failed for
     * good: the spool keeps the window for a later delivery. */
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
      EMBER_DEBUG(PUB_LOG, "produce: %s; spooling", rd_kafka_err2str(err));
  }
  return spool_put(p, key, klen, data, len);
}

int ember__publisher_target(ember__publisher_t *p, const char *key, const void *value, size_t len) {
  if (p == NULL || key == NULL || (value == NULL && len > 0)) return -EINVAL;
  size_t klen = strlen(key);
  pthread_mutex_lock(&p->mu);
  p->st.queue_bytes += (uint64_t)klen + len;
  pthread_mutex_unlock(&p->mu);
  rd_kafka_resp_err_t err = rd_kafka_producev(
      p->rk, RD_KAFKA_V_TOPIC(EMBER_TOPIC_TARGETS), RD_KAFKA_V_KEY((void *)(uintptr_t)key, klen),
      RD_KAFKA_V_VALUE((void *)(uintptr_t)value, value ? len : 0),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_OPAQUE(msg_tag(MSG_TARGET, 0)),
      RD_KAFKA_V_END);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return 0;
  pthread_mutex_lock(&p->mu);
  p->st.queue_bytes -= (uint64_t)klen + len;
  p->st.targets_failed++;
  pthread_mutex_unlock(&p->mu);
  EMBER_DEBUG(PUB_LOG, "target %s: %s", key, rd_kafka_err2str(err));
  return err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? -ENOBUFS : EMBER_EKAFKA;
}

int ember__publisher_event(ember__publisher_t *p, const char *topic, const void *key, size_t klen,
                           const void *value, size_t len) {
  if (p == NULL || topic == NULL || (key == NULL && klen > 0) || (value == NULL && len > 0))
    return -EINVAL;
  pthread_mutex_lock(&p->mu);
  p->st.queue_bytes += (uint64_t)klen + len;
  pthread_mutex_unlock(&p->mu);
  rd_kafka_resp_err_t err = rd_kafka_producev(
      p->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY((void *)(uintptr_t)key, klen),
      RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_OPAQUE(msg_tag(MSG_EVENT, 0)), RD_KAFKA_V_END);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return 0;
  pthread_mutex_lock(&p->mu);
  p->st.queue_bytes -= (uint64_t)klen + len;
  p->st.events_failed++;
  pthread_mutex_unlock(&p->mu);
  EMBER_DEBUG(PUB_LOG, "event to %s: %s", topic, rd_kafka_err2str(err));
  return err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? -ENOBUFS : EMBER_EKAFKA;
}

void ember__publisher_stats(ember__publisher_t *p, ember__publisher_stats_t *out) {
  if (p == NULL || out == NULL) return;
  pthread_mutex_lock(&p->mu);
  *out = p->st;
  pthread_mutex_unlock(&p->mu);
}
