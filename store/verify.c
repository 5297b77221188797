/* ember_store_verify: walk a whole store in a child process.
 *
 * LMDB trusts its pages: a page overwritten with garbage can send it to an
 * address past the end of the file (SIGBUS) or of the map (SIGSEGV), or
 * round in circles. No check in the caller can catch that, so the walk runs
 * in a forked child that reports over a pipe; the parent turns a signal, a
 * stall or a report of damage into a sentence. The child only reads (a
 * read-only environment, no lock-file writes beyond its reader slot). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runs.h"
#include "store_int.h"

static bool check_run(const MDB_val *k, const MDB_val *v) {
  int32_t partition;
  int64_t start;
  ember__run_t r;
  return ember__run_decode(k, v, &partition, &start, &r);
}

/* A pending window must decode whole: undo subtracts it entry by entry. */
static bool check_pending(const MDB_val *k, const MDB_val *v) {
  ember__pending_t p;
  return ember__pending_decode(k, v, &p);
}

static bool check_part(const MDB_val *k, const MDB_val *v) {
  return k->mv_size == EMBER__PART_KEY_LEN && v->mv_size == 0 && ember__get_be32(k->mv_data) != 0;
}

/* The tables, by name, in the order walked; the main and free tables of
 * LMDB itself come first (dbi 1 and 0). */
static const struct {
  const char *name;
  ember__db_t db;
  bool optional; /* added within the schema: a store made before has none */
  /* What an unsealed entry must be, for tables whose every entry has a
   * fixed shape to check (NULL: the checksum only). */
  bool (*check)(const MDB_val *k, const MDB_val *v);
} tables[] = {
    {"meta", EMBER__DB_META, false, NULL},
    {"series", EMBER__DB_SERIES, false, NULL},
    {"series_by_hash", EMBER__DB_SERIES_IDX, false, NULL},
    {"postings", EMBER__DB_POSTINGS, false, NULL},
    {"frames", EMBER__DB_FRAMES, false, NULL},
    {"frames_by_hash", EMBER__DB_FRAMES_IDX, false, NULL},
    {"stacks", EMBER__DB_STACKS, false, NULL},
    {"stacks_by_hash", EMBER__DB_STACKS_IDX, false, NULL},
    {"profiles", EMBER__DB_PROFILES, false, NULL},
    {"cpu", EMBER__DB_CPU, false, NULL},
    {"idem", EMBER__DB_IDEM, false, NULL},
    {"rollup_1h", EMBER__DB_ROLLUP_1H, false, NULL},
    {"rollup_1m", EMBER__DB_ROLLUP_1M, false, NULL},
    {"sessions", EMBER__DB_SESSIONS, false, NULL},
    {"rules", EMBER__DB_RULES, true, NULL},
    {"alerts", EMBER__DB_ALERTS, true, NULL},
    {"runs", EMBER__DB_RUNS, true, check_run},
    {"pending", EMBER__DB_PENDING, true, check_pending},
    {"series_part", EMBER__DB_PARTS, true, check_part},
    {"sourcemaps", EMBER__DB_SOURCEMAPS, true, NULL},
};

_Static_assert(sizeof tables / sizeof tables[0] == EMBER__DB_COUNT, "verify walks every table");

/* A child with no progress for this long is taken to be looping. */
#define STALL_MS   60000
#define PROGRESS_N 4096u

/* Child -> parent messages, one line each:
 *   "T <table>"  about to walk <table>
 *   "."          PROGRESS_N more entries read
 *   "N <count>"  done, <count> entries
 *   "E <rc> <sentence>"  stopped on an error */
static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
  const char *p = line;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    len -= (size_t)w;
  }
}

/* Read every key and value of `dbi` (every duplicate too), checking the
 * seals of a sealed table and each entry's shape with `check` (may be
 * NULL). Returns 0 or an LMDB code (MDB_CORRUPTED for a bad checksum, with
 * *bad_at; MDB_INVALID for an entry `check` refuses, with *bad_at). */
static int walk(int fd, MDB_txn *txn, MDB_dbi dbi, bool sealed,
                bool (*check)(const MDB_val *k, const MDB_val *v), uint64_t *entries,
                uint64_t *bad_at) {
  MDB_cursor *cur = NULL;
  int mrc = mdb_cursor_open(txn, dbi, &cur);
  if (mrc != MDB_SUCCESS) return mrc;
  MDB_val k, v;
  volatile uint8_t sink = 0;
  uint64_t i = 0;
  for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
       mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
    /* Touch the bytes: a page that is not there faults here, in the child. */
    const uint8_t *kp = k.mv_data, *vp = v.mv_data;
    for (size_t j = 0; j < k.mv_size; j++) sink ^= kp[j];
    if (sealed) {
      if (!ember__unseal(&k, &v)) {
        *bad_at = i;
        mrc = MDB_CORRUPTED;
        break;
      }
      if (check && !check(&k, &v)) {
        *bad_at = i;
        mrc = MDB_INVALID;
        break;
      }
    } else {
      for (size_t j = 0; j < v.mv_size; j++) sink ^= vp[j];
    }
    if (++*entries % PROGRESS_N == 0) say(fd, ".\n");
  }
  (void)sink;
  mdb_cursor_close(cur);
  return mrc == MDB_NOTFOUND ? MDB_SUCCESS : mrc;
}

static int child_main(const char *path, int fd) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  uint64_t entries = 0, bad_at = UINT64_MAX;
  int mrc = mdb_env_create(&env);
  if (mrc == MDB_SUCCESS) mrc = mdb_env_set_maxdbs(env, EMBER__DB_COUNT + 4);
  if (mrc == MDB_SUCCESS) mrc = mdb_env_open(env, path, MDB_NOSUBDIR | MDB_RDONLY | MDB_NOTLS, 0);
  if (mrc != MDB_SUCCESS) {
    say(fd, "E %d cannot open it: %s\n", ember__store_err(mrc), mdb_strerror(mrc));
    return 1;
  }
  mrc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
  if (mrc == MDB_SUCCESS) {
    /* LMDB's own tables: the free list (dbi 0) and the table of names. */
    say(fd, "T (free pages)\n");
    mrc = walk(fd, txn, 0, false, NULL, &entries, &bad_at);
  }
  if (mrc == MDB_SUCCESS) {
    say(fd, "T (table names)\n");
    mrc = walk(fd, txn, 1, false, NULL, &entries, &bad_at);
  }
  for (size_t t = 0; mrc == MDB_SUCCESS && t < sizeof tables / sizeof tables[0]; t++) {
    MDB_dbi dbi;
    say(fd, "T %s\n", tables[t].name);
    mrc = mdb_dbi_open(txn, tables[t].name, 0, &dbi);
    if (mrc == MDB_NOTFOUND && tables[t].optional) {
      mrc = MDB_SUCCESS;
      continue;
    }
    if (mrc == MDB_NOTFOUND) {
      say(fd, "E %d no \"%s\" table: not an Ember store of this version\n", EMBER_ECORRUPT,
          tables[t].name);
      return 1;
    }
    if (mrc == MDB_SUCCESS && tables[t].db == EMBER__DB_META) {
      MDB_val k = {.mv_size = 6, .mv_data = (void *)(uintptr_t) "schema"}, v;
      int grc = mdb_get(txn, dbi, &k, &v);
      /* Schema 1 and 2 wrote it unsealed; from 3 on it is sealed (and a
       * sealed value failing its checksum is reported by the walk). */
      if (grc == MDB_SUCCESS && v.mv_size != 4 && !ember__unseal(&k, &v)) grc = MDB_CORRUPTED;
      /* A schema 3 store is whole too: the next read-write open upgrades it. */
      if (grc == MDB_SUCCESS && v.mv_size == 4 &&
          ember__get_be32(v.mv_data) != EMBER_STORE_SCHEMA_VERSION &&
          ember__get_be32(v.mv_data) != EMBER__SCHEMA_UPGRADABLE) {
        say(fd, "E %d it has schema version %u, not the %u this Ember reads\n", EMBER_EVERSION,
            ember__get_be32(v.mv_data), EMBER_STORE_SCHEMA_VERSION);
        return 1;
      }
    }
    if (mrc == MDB_SUCCESS)
      mrc = walk(fd, txn, dbi, ember__sealed(tables[t].db), tables[t].check, &entries, &bad_at);
    if (mrc == MDB_CORRUPTED && bad_at != UINT64_MAX) {
      say(fd, "E %d entry %llu of table \"%s\" fails its checksum\n", EMBER_ECORRUPT,
          (unsigned long long)bad_at, tables[t].name);
      return 1;
    }
    if (mrc == MDB_INVALID && bad_at != UINT64_MAX) {
      say(fd, "E %d entry %llu of table \"%s\" is malformed\n", EMBER_ECORRUPT,
          (unsigned long long)bad_at, tables[t].name);
      return 1;
    }
  }
  if (mrc != MDB_SUCCESS) {
    say(fd, "E %d LMDB: %s\n", ember__store_err(mrc), mdb_strerror(mrc));
    return 1;
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  say(fd, "N %llu\n", (unsigned long long)entries);
  return 0;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ember_store_verify(const char *path, uint64_t *entries, char *errbuf, size_t errbuf_size) {
  if (!path || !*path) return -EINVAL;
  if (errbuf && errbuf_size) errbuf[0] = '\0';
  struct stat st;
  if (stat(path, &st) != 0) return -errno;

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -errno;
  pid_t pid = fork();
  if (pid < 0) {
    int rc = -errno;
    close(fds[0]);
    close(fds[1]);
    return rc;
  }
  if (pid == 0) {
    close(fds[0]);
    /* A fault here must end the child with its signal, whatever handlers
     * and mask the parent had (the collector starts with every signal
     * blocked). */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGBUS, SIG_DFL);
    signal(SIGSEGV, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
    _exit(child_main(path, fds[1]));
  }
  close(fds[1]);

  /* Keep the last table named and the last line, the report. */
  char table[128] = "(opening)", last[512] = "", line[512];
  size_t llen = 0;
  bool stalled = false;
  int64_t last_progress = mono_ms();
  for (;;) {
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    int pr = poll(&pfd, 1, 1000);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      if (mono_ms() - last_progress > STALL_MS) {
        stalled = true;
        kill(pid, SIGKILL);
        break;
      }
      continue;
    }
    char buf[1024];
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    last_progress = mono_ms();
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] != '\n') {
        if (llen < sizeof line - 1) line[llen++] = buf[i];
        continue;
      }
      line[llen] = '\0';
      llen = 0;
      if (line[0] == 'T' && line[1] == ' ')
        snprintf(table, sizeof table, "%.120s", line + 2);
      else if (line[0] != '.')
        snprintf(last, sizeof last, "%.500s", line);
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }

  int rc = 0;
  if (stalled) {
    rc = EMBER_ECORRUPT;
    snprintf(errbuf ? errbuf : line, errbuf ? errbuf_size : sizeof line,
             "store %s is damaged: its verification made no progress for %d s in table %s "
             "(LMDB is going round in circles); %s",
             path, STALL_MS / 1000, table, EMBER_STORE_RECOVERY);
  } else if (WIFSIGNALED(status) && WTERMSIG(status) != SIGBUS && WTERMSIG(status) != SIGSEGV &&
             WTERMSIG(status) != SIGABRT && WTERMSIG(status) != SIGFPE &&
             WTERMSIG(status) != SIGILL) {
    /* Not a fault: someone stopped it (a ^C reaches the whole group). */
    rc = -EINTR;
    snprintf(errbuf ? errbuf : line, errbuf ? errbuf_size : sizeof line,
             "store %s: its verification was stopped by %s before it finished", path,
             strsignal(WTERMSIG(status)));
  } else if (WIFSIGNALED(status)) {
    rc = EMBER_ECORRUPT;
    snprintf(errbuf ? errbuf : line, errbuf ? errbuf_size : sizeof line,
             "store %s is damaged: its verification was killed by %s while reading table %s "
             "(a page points outside the file); %s",
             path, strsignal(WTERMSIG(status)), table, EMBER_STORE_RECOVERY);
  } else if (last[0] == 'N') {
    unsigned long long n = 0;
    if (sscanf(last, "N %llu", &n) == 1 && entries) *entries = n;
  } else {
    int code = EMBER_ECORRUPT, off = 0;
    if (sscanf(last, "E %d %n", &code, &off) < 1 || off == 0) off = (int)strlen(last);
    rc = code < 0 ? code : EMBER_ECORRUPT;
    if (rc == EMBER_EVERSION)
      snprintf(errbuf ? errbuf : line, errbuf ? errbuf_size : sizeof line, "store %s: %s", path,
               last + off);
    else if (rc != EMBER_ECORRUPT)
      /* Not damage (a lock file it may not open, no memory to map it): the
       * advice to move the data aside and rebuild would be wrong. */
      snprintf(errbuf ? errbuf : line, errbuf ? errbuf_size : sizeof line,
               "store %s could not be verified: %s (table %s)", path,
               last[0] ? last + off : "no report", table);
    else
      snprintf(errbuf ? errbuf : line, errbuf ? errbuf_size : sizeof line,
               "store %s is damaged: %s (table %s); %s", path,
               last[0] ? last + off : "its verification ended without a report", table,
               EMBER_STORE_RECOVERY);
  }
  return rc;
}
