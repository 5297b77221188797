/* The store against its disk: a disk that fills during commits and is
 * then freed, a map that fills, damaged pages. Real LMDB files on a small
 * tmpfs mounted for the test (the tests that need a mount skip when the
 * process may not mount). */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/store.h"
#include "common/testutil.h"

/* From store/store_int.h: how an LMDB code becomes an Ember error. */
int ember__store_err(int rc);

#define SEC 1000000000LL
#define T0  (1764460800LL * SEC) /* 2025-11-30T00:00:00Z */

static const ember_value_type_t cpu_types[] = {EMBER_VT_CPU_SAMPLES, EMBER_VT_CPU_NS};

static uint64_t rng_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* A CPU window of `nstacks` stacks over functions drawn from a large pool,
 * so that nearly every window brings new frames and stacks into the
 * dictionary (ids a failed commit may have handed out). *samples gets the
 * window's CPU samples. */
static ember_profile_t *make_window(const char *worker, int64_t start, uint64_t seq, size_t nstacks,
                                    uint64_t seed, int64_t *samples) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_profile_new(cpu_types, 2, &p), 0);
  ember_labels_t l = {.worker = worker, .version = "v1", .host = "h"};
  assert_int_equal(ember_profile_set_labels(p, &l), 0);
  assert_int_equal(ember_profile_set_window(p, start, start + 10 * SEC), 0);
  ember_profile_set_period(p, 10000000);
  assert_int_equal(ember_profile_set_origin(p, "agent-disk", seq, NULL), 0);
  uint64_t x = seed * 2654435761u + 1;
  char names[16][48];
  *samples = 0;
  for (size_t i = 0; i < nstacks; i++) {
    ember_frame_t frames[16];
    size_t depth = 1 + (size_t)(rng_next(&x) % 12);
    for (size_t d = 0; d < depth; d++) {
      snprintf(names[d], sizeof names[d], "function_with_a_long_name_%u",
               (unsigned)(rng_next(&x) % 1000000));
      frames[d] = (ember_frame_t){.function = names[d],
                                  .file = "src/app.c",
                                  .module = "/usr/bin/app",
                                  .line = (uint32_t)d,
                                  .kind = EMBER_FRAME_NATIVE};
    }
    int64_t n = 1 + (int64_t)(rng_next(&x) % 50);
    int64_t values[2] = {n, n * 10000000};
    assert_int_equal(ember_profile_add(p, frames, depth, values), 0);
    *samples += n;
  }
  return p;
}

/* A tmpfs of `size` bytes at a directory of its own, or NULL (and the test
 * skips) when this process may not mount. */
static const char *mount_tmpfs(char *dir, size_t dsize, const char *name, size_t size) {
  snprintf(dir, dsize, "%s/disk_%s_%ld", EMBER_TEST_TMP, name, (long)getpid());
  mkdir(dir, 0755);
  char opts[64];
  snprintf(opts, sizeof opts, "size=%zu", size);
  if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0) {
    print_message("cannot mount a tmpfs (%s): skipped\n", strerror(errno));
    rmdir(dir);
    return NULL;
  }
  return dir;
}

static void unmount_tmpfs(const char *dir) {
  assert_int_equal(umount2(dir, MNT_DETACH), 0);
  rmdir(dir);
}

/* Write `len` bytes of filler to `path`; returns how many were written
 * before the file system was full. */
static size_t fill(const char *path, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(fd >= 0);
  static char block[65536];
  memset(block, 0x5a, sizeof block);
  size_t done = 0;
  while (done < len) {
    size_t n = len - done < sizeof block ? len - done : sizeof block;
    ssize_t w = write(fd, block, n);
    if (w <= 0) break;
    done += (size_t)w;
  }
  close(fd);
  return done;
}

typedef struct expect {
  int64_t total; /* CPU samples of every window stored */
  int64_t per_worker[4];
  size_t windows;
} expect_t;

static const char *const workers[4] = {"api", "billing", "search", "auth"};

/* Every query over [T0, T0 + span) answers 0 and its totals equal `e`. */
static void assert_queries_exact(ember_store_t *s, const expect_t *e, int64_t span) {
  ember_profile_t *p = NULL;
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + span, EMBER_VT_CPU_SAMPLES, &p), 0);
  assert_int_equal(ember_profile_total(p, 0), e->total);
  ember_profile_free(p);
  /* Ragged ranges read windows and minute rows, not just hours. */
  int64_t sum = 0;
  for (int64_t from = T0; from < T0 + span; from += 7 * 60 * SEC) {
    int64_t to = from + 7 * 60 * SEC;
    assert_int_equal(ember_store_merge(s, NULL, from, to, EMBER_VT_CPU_SAMPLES, &p), 0);
    sum += ember_profile_total(p, 0);
    ember_profile_free(p);
  }
  assert_int_equal(sum, e->total);
  for (int w = 0; w < 4; w++) {
    ember_store_selector_t sel = {.worker = workers[w]};
    assert_int_equal(ember_store_merge(s, &sel, T0, T0 + span, EMBER_VT_CPU_SAMPLES, &p), 0);
    assert_int_equal(ember_profile_total(p, 0), e->per_worker[w]);
    ember_profile_free(p);
  }
  ember_store_series_t *series = NULL;
  size_t n = 0;
  assert_int_equal(ember_store_series(s, NULL, T0, T0 + span, &series, &n), 0);
  ember_store_series_free(series, n);
  int64_t *tl = NULL;
  assert_int_equal(ember_store_cpu_timeline(s, NULL, T0, T0 + span, 60 * SEC, &tl, &n), 0);
  int64_t cpu = 0;
  for (size_t i = 0; i < n; i++) cpu += tl[i];
  free(tl);
  assert_int_equal(cpu, e->total * 10000000);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, e->windows);
}

/* Batches of windows until the disk is full during a commit, then the
 * space comes back and the same batch is retried (as the collector does):
 * every query answers and its totals are exact, before and after a
 * reopen. Before the fix the retry trusted dictionary ids handed out by
 * the failed commit, and every query over those windows failed. */
static void test_store_disk_full_mid_commit_then_freed(void **state) {
  (void)state;
  char dir[512], path[600], filler[600];
  if (!mount_tmpfs(dir, sizeof dir, "full", (size_t)6 << 20)) skip();
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  snprintf(filler, sizeof filler, "%s/filler", dir);
  /* Space kept back, to give back once the store has hit the wall. */
  assert_int_equal(fill(filler, (size_t)2 << 20), (size_t)2 << 20);

  ember_store_opts_t o = {.map_size = (size_t)64 << 20};
  ember_store_t *s = NULL;
  char err[256];
  assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);

  expect_t e = {0};
  enum { BATCH = 8, MAX_BATCHES = 400 };
  int full_at = -1, fails = 0;
  uint64_t seq = 0;
  int64_t start = T0;
  for (int b = 0; b < MAX_BATCHES && fails < 3; b++) {
    ember_profile_t *ps[BATCH];
    int64_t samples[BATCH];
    for (int i = 0; i < BATCH; i++) {
      ps[i] = make_window(workers[i % 4], start + (i / 4) * 10 * SEC, seq + (uint64_t)i, 40,
                          seq + (uint64_t)i, &samples[i]);
    }
    int rc = ember_store_write(s, ps, BATCH, NULL);
    if (rc == -ENOSPC && full_at < 0) {
      full_at = b;
      /* Still full: the retry fails the same way, and must not be
       * half-done either. */
      assert_int_equal(ember_store_write(s, ps, BATCH, NULL), -ENOSPC);
      assert_int_equal(unlink(filler), 0);
      rc = ember_store_write(s, ps, BATCH, NULL);
    }
    if (rc == -ENOSPC) {
      fails++; /* full for good now: this batch is not counted */
    } else {
      assert_int_equal(rc, 0);
      for (int i = 0; i < BATCH; i++) {
        e.total += samples[i];
        e.per_worker[i % 4] += samples[i];
      }
      e.windows += BATCH;
    }
    for (int i = 0; i < BATCH; i++) ember_profile_free(ps[i]);
    seq += BATCH;
    start += 20 * SEC;
  }
  assert_true(full_at > 0);
  print_message("disk full at batch %d, %zu windows stored\n", full_at, e.windows);
  int64_t span = start - T0 + 3600 * SEC;
  assert_queries_exact(s, &e, span);
  ember_store_close(s);
  s = NULL;

  /* After a restart (with the disk still full) the same holds. */
  assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);
  assert_queries_exact(s, &e, span);
  ember_store_close(s);
  unmount_tmpfs(dir);
}

/* The failure sweep of the full disk: for free space from 0 to 252 pages
 * in steps of 4, a batch that brings new dictionary entries meets the full
 * disk wherever in its commit that space runs out (or fits); freed, the
 * retry stores it and every total is exact. A failure at any point of the
 * commit must leave nothing a retry could trust. */
static void test_store_disk_full_sweep(void **state) {
  (void)state;
  char dir[512], path[600], filler[600];
  if (!mount_tmpfs(dir, sizeof dir, "sweep", (size_t)8 << 20)) skip();
  snprintf(path, sizeof path, "%s/store.lmdb", dir);
  snprintf(filler, sizeof filler, "%s/filler", dir);
  int failed = 0;
  for (int level = 0; level < 64; level++) {
    int free_pages = level * 4;
    char lock[700];
    snprintf(lock, sizeof lock, "%s-lock", path);
    unlink(path);
    unlink(lock);
    ember_store_opts_t o = {.map_size = (size_t)16 << 20};
    ember_store_t *s = NULL;
    char err[256];
    assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);
    expect_t e = {0};
    ember_profile_t *ps[8];
    int64_t samples[8];
    for (int round = 0; round < 2; round++) {
      for (int i = 0; i < 8; i++)
        ps[i] = make_window(workers[i % 4], T0 + (int64_t)(round * 2 + i / 4) * 10 * SEC,
                            (uint64_t)(round * 8 + i), 30,
                            (uint64_t)(free_pages * 100 + round * 8 + i), &samples[i]);
      if (round == 1) {
        /* The disk full but for free_pages pages. */
        fill(filler, (size_t)64 << 20);
        struct stat st;
        assert_int_equal(stat(filler, &st), 0);
        off_t keep = st.st_size - (off_t)free_pages * 4096;
        assert_int_equal(truncate(filler, keep > 0 ? keep : 0), 0);
      }
      int rc = ember_store_write(s, ps, 8, NULL);
      if (rc != 0) {
        assert_int_equal(rc, -ENOSPC);
        failed++;
        assert_int_equal(unlink(filler), 0);
        assert_int_equal(ember_store_write(s, ps, 8, NULL), 0);
      }
      for (int i = 0; i < 8; i++) {
        e.total += samples[i];
        e.per_worker[i % 4] += samples[i];
        ember_profile_free(ps[i]);
      }
      e.windows += 8;
    }
    unlink(filler);
    assert_queries_exact(s, &e, 3600 * SEC);
    ember_store_close(s);
    s = NULL;
    assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);
    assert_queries_exact(s, &e, 3600 * SEC);
    ember_store_close(s);
  }
  print_message("64 free-space levels: %d met the full disk\n", failed);
  assert_true(failed >= 8 && failed < 64); /* both sides of the edge */
  unmount_tmpfs(dir);
}

/* Queries running while the writer grows the map under them. */
typedef struct reader {
  ember_store_t *s;
  volatile bool stop;
  int failures;
  unsigned runs;
} reader_t;

static void *reader_main(void *arg) {
  reader_t *r = arg;
  while (!r->stop) {
    ember_profile_t *p = NULL;
    if (ember_store_merge(r->s, NULL, T0, T0 + 7200 * SEC, EMBER_VT_CPU_SAMPLES, &p) != 0)
      r->failures++;
    ember_profile_free(p);
    r->runs++;
  }
  return NULL;
}

/* A store whose map fills grows it, doubling, up to max_size, while
 * queries run; at max_size a batch fails with EMBER_EMAPFULL (not ENOSPC:
 * the disk has room) and leaves nothing behind, and smaller batches still
 * fit in what is left. Totals stay exact throughout and after a reopen. */
static void test_store_map_full_grows_then_reports_map_full(void **state) {
  (void)state;
  char path[600];
  tu_store_path(path, sizeof path, "disk", "mapfull");
  tu_store_remove(path);
  ember_store_opts_t o = {
      .map_size = (size_t)256 << 10, .max_size = (size_t)4 << 20, .no_sync = true};
  ember_store_t *s = NULL;
  char err[256];
  assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);
  reader_t rd = {.s = s};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);

  expect_t e = {0};
  enum { BATCH = 16 };
  uint64_t seq = 0;
  int64_t start = T0;
  int rc = 0;
  size_t batches = 0;
  while (rc == 0) {
    ember_profile_t *ps[BATCH];
    int64_t samples[BATCH];
    for (int i = 0; i < BATCH; i++)
      ps[i] = make_window(workers[i % 4], start + (i / 4) * 10 * SEC, seq + (uint64_t)i, 40,
                          seq + (uint64_t)i, &samples[i]);
    rc = ember_store_write(s, ps, BATCH, NULL);
    if (rc == 0) {
      for (int i = 0; i < BATCH; i++) {
        e.total += samples[i];
        e.per_worker[i % 4] += samples[i];
      }
      e.windows += BATCH;
      batches++;
    } else {
      assert_int_equal(rc, EMBER_EMAPFULL);
      assert_non_null(strstr(ember_strerror(rc), "map is full"));
      assert_non_null(strstr(ember_store_strerror(rc), "store.max_size"));
      /* Written again one window at a time, what still fits goes in. */
      for (int i = 0; i < BATCH; i++) {
        int r1 = ember_store_write(s, &ps[i], 1, NULL);
        if (r1 != 0) {
          assert_int_equal(r1, EMBER_EMAPFULL);
          break;
        }
        e.total += samples[i];
        e.per_worker[i % 4] += samples[i];
        e.windows++;
      }
    }
    for (int i = 0; i < BATCH; i++) ember_profile_free(ps[i]);
    seq += BATCH;
    start += (BATCH / 4) * 10 * SEC;
    assert_true(batches < 10000);
  }
  rd.stop = true;
  pthread_join(th, NULL);
  assert_int_equal(rd.failures, 0);
  assert_true(rd.runs > 0);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  print_message("%zu batches; map grew %llu times to %llu bytes; %u queries meanwhile\n", batches,
                (unsigned long long)st.map_grows, (unsigned long long)st.map_bytes, rd.runs);
  assert_true(st.map_grows >= 4); /* 256 KiB -> 4 MiB */
  assert_int_equal(st.map_bytes, (uint64_t)4 << 20);
  int64_t span = start - T0 + 3600 * SEC;
  assert_queries_exact(s, &e, span);
  ember_store_close(s);
  s = NULL;
  /* Reopened with a larger max_size, it grows again and takes the rest. */
  o.max_size = (size_t)16 << 20;
  assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);
  assert_queries_exact(s, &e, span);
  ember_profile_t *p;
  int64_t samples;
  p = make_window("api", start, seq, 40, seq, &samples);
  assert_int_equal(ember_store_write(s, &p, 1, NULL), 0);
  ember_profile_free(p);
  e.total += samples;
  e.per_worker[0] += samples;
  e.windows++;
  assert_queries_exact(s, &e, span);
  ember_store_close(s);
  tu_store_remove(path);
}

/* A store of a few MiB with `windows` windows; *e gets its totals. */
static void build_store(const char *path, size_t windows, expect_t *e) {
  tu_store_remove(path);
  ember_store_opts_t o = {.map_size = (size_t)64 << 20, .no_sync = true};
  ember_store_t *s = NULL;
  char err[256];
  assert_int_equal(ember_store_open(path, &o, &s, err, sizeof err), 0);
  *e = (expect_t){0};
  for (size_t i = 0; i < windows; i++) {
    int64_t samples;
    ember_profile_t *p =
        make_window(workers[i % 4], T0 + (int64_t)(i / 4) * 10 * SEC, i, 40, i, &samples);
    assert_int_equal(ember_store_write(s, &p, 1, NULL), 0);
    ember_profile_free(p);
    e->total += samples;
    e->per_worker[i % 4] += samples;
    e->windows++;
  }
  ember_store_close(s);
}

static void copy_file(const char *from, const char *to) {
  int in = open(from, O_RDONLY | O_CLOEXEC),
      out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  assert_true(in >= 0 && out >= 0);
  char buf[65536];
  ssize_t n;
  while ((n = read(in, buf, sizeof buf)) > 0) assert_int_equal(write(out, buf, (size_t)n), n);
  close(in);
  close(out);
}

/* Overwrite `npages` pages from page `first` with pseudo-random bytes. */
static void damage(const char *path, size_t first, size_t npages, uint64_t seed) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  assert_true(fd >= 0);
  uint8_t page[4096];
  uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t p = 0; p < npages; p++) {
    for (size_t i = 0; i < sizeof page; i += 8) {
      uint64_t r = rng_next(&x);
      memcpy(page + i, &r, 8);
    }
    assert_int_equal(pwrite(fd, page, sizeof page, (off_t)((first + p) * sizeof page)),
                     (ssize_t)sizeof page);
  }
  close(fd);
}

/* What the collector does at start, in a child so that the test survives
 * whatever the damage does: verify, and only then open and query. Exits 0
 * when verification refused the store with the recovery sentence, 1 when
 * it passed and every query then answered (or refused with
 * EMBER_ECORRUPT), 2 on a wrong message. A crash is a signal. */
static int start_on(const char *path, char *msg, size_t msize) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    char err[1024] = "";
    int rc = ember_store_verify(path, NULL, err, sizeof err);
    if (write(fds[1], err, strlen(err)) < 0) _exit(3);
    if (rc != 0)
      _exit(rc == EMBER_ECORRUPT && strstr(err, "is damaged") && strstr(err, "mdb_copy") &&
                    strstr(err, "rebuild it from Kafka")
                ? 0
                : 2);
    ember_store_t *s = NULL;
    ember_store_opts_t o = {.map_size = (size_t)64 << 20, .no_sync = true};
    rc = ember_store_open(path, &o, &s, err, sizeof err);
    if (rc != 0) _exit(rc == EMBER_ECORRUPT ? 1 : 2);
    uint64_t deleted;
    rc = ember_store_retain(s, T0 - 3600 * SEC, 0, &deleted);
    if (rc != 0 && rc != EMBER_ECORRUPT) _exit(2);
    ember_profile_t *p = NULL;
    rc = ember_store_merge(s, NULL, T0, T0 + 86400 * SEC, EMBER_VT_CPU_SAMPLES, &p);
    ember_profile_free(p);
    ember_store_close(s);
    _exit(rc == 0 || rc == EMBER_ECORRUPT ? 1 : 2);
  }
  close(fds[1]);
  ssize_t n = read(fds[0], msg, msize - 1);
  msg[n > 0 ? n : 0] = '\0';
  close(fds[0]);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

/* Pages of data.mdb overwritten with garbage, 1 to 3 of every 8 and at
 * many places: the verification refuses the store with a sentence that
 * says how to recover, and never lets the damage crash its caller; when it
 * passes (the damage hit free pages), opening, retention and queries work
 * or refuse with EMBER_ECORRUPT. */
static void test_store_damaged_pages_refused_never_crash(void **state) {
  (void)state;
  char path[600], copy[600], msg[1024];
  tu_store_path(path, sizeof path, "disk", "damage");
  tu_store_path(copy, sizeof copy, "disk", "damage_copy");
  expect_t e;
  build_store(path, 400, &e);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  size_t npages = (size_t)st.st_size / 4096;
  assert_true(npages > 64);
  int refused = 0, passed = 0;
  for (int trial = 0; trial < 24; trial++) {
    tu_store_remove(copy);
    copy_file(path, copy);
    size_t nbad = 1 + (size_t)trial % 3;
    /* Pages 0 and 1 are LMDB's meta pages; damage after them, spread over
     * the file. */
    size_t first = 2 + (size_t)trial * (npages - 5) / 24;
    damage(copy, first, nbad, (uint64_t)trial);
    int r = start_on(copy, msg, sizeof msg);
    if (r != 0 && r != 1)
      fail_msg("trial %d (pages %zu+%zu): exit %d: %s", trial, first, nbad, r, msg);
    if (r == 0)
      refused++;
    else
      passed++;
  }
  print_message("24 damaged copies: %d refused by verification, %d harmless\n", refused, passed);
  assert_true(refused >= 12);

  /* The meta pages themselves: LMDB falls back to the other one or refuses. */
  tu_store_remove(copy);
  copy_file(path, copy);
  damage(copy, 0, 2, 99);
  int r = start_on(copy, msg, sizeof msg);
  if (r != 0 && r != 1 && r != 2) fail_msg("meta pages: exit %d: %s", r, msg);
  tu_store_remove(copy);
  tu_store_remove(path);
}

/* A value changed on disk in a way LMDB cannot see (same size, valid
 * pages) fails its checksum: reads refuse it with EMBER_ECORRUPT and the
 * store's advice, and the verification names the table. */
static void test_store_checksum_refuses_a_changed_value(void **state) {
  (void)state;
  char path[600], err[1024];
  tu_store_path(path, sizeof path, "disk", "crc");
  expect_t e;
  build_store(path, 8, &e);
  {
    ember_store_t *s0 = NULL;
    assert_int_equal(ember_store_open(path, NULL, &s0, err, sizeof err), 0);
    ember_profile_t *p0 = NULL;
    assert_int_equal(
        ember_store_merge(s0, NULL, T0 - 3600 * SEC, T0 + 3600 * SEC, EMBER_VT_CPU_SAMPLES, &p0),
        0);
    ember_profile_free(p0);
    ember_store_close(s0);
  }
  {
    /* Flip one byte of the first window row, behind the store's back. */
    MDB_env *env = NULL;
    MDB_txn *txn = NULL;
    MDB_dbi dbi;
    MDB_cursor *cur = NULL;
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
    assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
    assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
    assert_int_equal(mdb_dbi_open(txn, "profiles", 0, &dbi), 0);
    assert_int_equal(mdb_cursor_open(txn, dbi, &cur), 0);
    MDB_val k, v;
    assert_int_equal(mdb_cursor_get(cur, &k, &v, MDB_FIRST), 0);
    uint8_t buf[65536];
    assert_true(v.mv_size <= sizeof buf);
    memcpy(buf, v.mv_data, v.mv_size);
    buf[v.mv_size / 2] ^= 0x40;
    uint8_t kbuf[64];
    assert_true(k.mv_size <= sizeof kbuf);
    memcpy(kbuf, k.mv_data, k.mv_size);
    MDB_val nk = {.mv_size = k.mv_size, .mv_data = kbuf},
            nv = {.mv_size = v.mv_size, .mv_data = buf};
    mdb_cursor_close(cur);
    assert_int_equal(mdb_put(txn, dbi, &nk, &nv, 0), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
  }
  ember_store_t *s = NULL;
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), 0);
  ember_profile_t *p = NULL;
  /* Less than a minute: read from the windows themselves. */
  assert_int_equal(ember_store_merge(s, NULL, T0, T0 + 30 * SEC, EMBER_VT_CPU_SAMPLES, &p),
                   EMBER_ECORRUPT);
  assert_null(p);
  assert_non_null(strstr(ember_store_strerror(EMBER_ECORRUPT), "rebuild it from Kafka"));
  /* Other windows (from the hour rollup, untouched) still answer. */
  assert_int_equal(
      ember_store_merge(s, NULL, T0 - 3600 * SEC, T0 + 3600 * SEC, EMBER_VT_CPU_SAMPLES, &p), 0);
  assert_int_equal(ember_profile_total(p, 0), e.total);
  ember_profile_free(p);
  ember_store_close(s);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"profiles\" fails its checksum"));
  assert_non_null(strstr(err, "mdb_copy"));
  tu_store_remove(path);

  /* An intact store verifies, counting its entries; a missing one is -ENOENT. */
  build_store(path, 8, &e);
  uint64_t entries = 0;
  assert_int_equal(ember_store_verify(path, &entries, err, sizeof err), 0);
  assert_true(entries > 8);
  tu_store_remove(path);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), -ENOENT);
}

/* Flip one byte of the meta value `name`, behind the store's back. */
static void flip_meta(const char *path, const char *name, size_t at, uint8_t mask) {
  MDB_env *env = NULL;
  MDB_txn *txn = NULL;
  MDB_dbi dbi;
  assert_int_equal(mdb_env_create(&env), 0);
  assert_int_equal(mdb_env_set_maxdbs(env, 32), 0);
  assert_int_equal(mdb_env_open(env, path, MDB_NOSUBDIR, 0640), 0);
  assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
  assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
  MDB_val k = {.mv_size = strlen(name), .mv_data = (void *)(uintptr_t)name}, v;
  assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
  uint8_t buf[64];
  assert_true(v.mv_size <= sizeof buf && at < v.mv_size);
  memcpy(buf, v.mv_data, v.mv_size);
  buf[at] ^= mask;
  MDB_val nv = {.mv_size = v.mv_size, .mv_data = buf};
  assert_int_equal(mdb_put(txn, dbi, &k, &nv, 0), 0);
  assert_int_equal(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

/* One flipped bit in the retention cutoff used to make it a far-future
 * time: the next retention run deleted every window and every later write
 * was dropped as expired, with no error. The meta table is sealed now. */
static void test_store_checksum_guards_the_meta_table(void **state) {
  (void)state;
  char path[512], err[512];
  expect_t e;
  tu_store_path(path, sizeof path, "disk", "meta");
  build_store(path, 8, &e);
  ember_store_t *s = NULL;
  uint64_t deleted = 0;
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), 0);
  assert_int_equal(ember_store_retain(s, T0 - 7200 * SEC, 0, &deleted), 0);
  assert_int_equal(deleted, 0);
  ember_store_close(s);
  s = NULL;

  /* The top byte of the time (sign bit flipped on disk): year 2^62 ns. */
  flip_meta(path, "retained_before", 0, 0x40);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), 0);
  assert_int_equal(ember_store_retain(s, T0 - 3600 * SEC, 0, &deleted), EMBER_ECORRUPT);
  int64_t samples;
  ember_profile_t *p = make_window("api", T0 + 3600 * SEC, 1000, 4, 7, &samples);
  ember_store_write_result_t r = {0};
  assert_int_equal(ember_store_write(s, &p, 1, &r), EMBER_ECORRUPT);
  assert_int_equal(r.expired, 0);
  ember_profile_free(p);
  ember_store_stats_t st;
  assert_int_equal(ember_store_stats(s, &st), 0);
  assert_int_equal(st.profile_rows, e.windows);
  ember_store_close(s);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), EMBER_ECORRUPT);
  assert_non_null(strstr(err, "\"meta\" fails its checksum"));

  /* A damaged id counter, and a damaged schema version, are refused too. */
  build_store(path, 8, &e);
  flip_meta(path, "next_series", 3, 0x01);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), 0);
  p = make_window("newworker", T0, 1001, 4, 7, &samples);
  assert_int_equal(ember_store_write(s, &p, 1, NULL), EMBER_ECORRUPT);
  ember_profile_free(p);
  ember_store_close(s);
  s = NULL;
  build_store(path, 1, &e);
  flip_meta(path, "schema", 3, 0x01);
  assert_int_equal(ember_store_open(path, NULL, &s, err, sizeof err), EMBER_ECORRUPT);
  assert_null(s);
  assert_non_null(strstr(err, "schema version fails its checksum"));
  tu_store_remove(path);
}

/* An error that is not damage (here the lock file is a directory: EISDIR,
 * as EACCES or ENOMEM would be) is reported as itself, without the advice
 * to move the data aside; a failed meta write (MDB_PANIC) is an I/O error
 * with a sentence saying to restart, not damage. */
static void test_store_verify_tells_errors_from_damage(void **state) {
  (void)state;
  char path[512], lock[600], err[512];
  expect_t e;
  tu_store_path(path, sizeof path, "disk", "notdamage");
  build_store(path, 1, &e);
  snprintf(lock, sizeof lock, "%s-lock", path);
  unlink(lock);
  assert_int_equal(mkdir(lock, 0700), 0);
  assert_int_equal(ember_store_verify(path, NULL, err, sizeof err), -EISDIR);
  assert_non_null(strstr(err, "could not be verified"));
  assert_null(strstr(err, "damaged"));
  assert_null(strstr(err, "Kafka"));
  rmdir(lock);
  tu_store_remove(path);

  assert_int_equal(ember__store_err(MDB_PANIC), -EIO);
  assert_int_equal(ember__store_err(MDB_CORRUPTED), EMBER_ECORRUPT);
  assert_non_null(strstr(ember_store_strerror(-EIO), "restart the collector"));
  assert_null(strstr(ember_store_strerror(-EIO), "damaged"));
  assert_non_null(strstr(ember_store_strerror(EMBER_ECORRUPT), "recovers nothing"));
}

int main(void) {
  /* The tests' tmpfs mounts must not outlive a failed run. */
  (void)tu_private_mounts();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_disk_full_mid_commit_then_freed),
      cmocka_unit_test(test_store_disk_full_sweep),
      cmocka_unit_test(test_store_map_full_grows_then_reports_map_full),
      cmocka_unit_test(test_store_damaged_pages_refused_never_crash),
      cmocka_unit_test(test_store_checksum_refuses_a_changed_value),
      cmocka_unit_test(test_store_checksum_guards_the_meta_table),
      cmocka_unit_test(test_store_verify_tells_errors_from_damage),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
