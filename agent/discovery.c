/* Discovery: which processes exist and who they are. The contract is in
 * discovery.h; docs/internals/discovery.md has the invariants and costs. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <linux/cn_proc.h>
#include <linux/connector.h>
#include <linux/netlink.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "discovery.h"
#include "ember/ember.h"
#include "ember/log.h"
#include "ember/parse.h"
#include "procfs.h"
#include "safefile.h"

/* Limits on what is read from a process: /proc files are untrusted input. */
#define ENVIRON_MAX (256 * 1024) /* bytes of /proc/PID/environ looked at */
#define LABEL_MAX   256          /* worker, version, actor: bytes with the NUL */
#define EXE_MAX     4096         /* exe path: bytes with the NUL */
#define STAT_MAX    1024         /* /proc/PID/stat; comm is at most 64 bytes */
#define TERM_MAX    512          /* one selector pattern, with the NUL */
/* Direct-mapped build-id cache: a collision costs one extra ELF parse. */
#define BUILDID_SLOTS 1024
#define MAP_MIN_SLOTS 64
#define NL_BATCH_MAX  4096 /* datagrams handled per read_events call */
/* include/linux/sched.h; not in the UAPI headers. */
#define PF_KTHREAD_FLAG      0x00200000u
#define VERSION_FROM_BUILDID 12

typedef struct disc_entry {
  ember__target_t t;       /* first, so a target is its entry */
  uint64_t seen;           /* the scan generation that last listed the pid */
  bool is_target;          /* false: a remembered kernel thread, never shown */
  struct disc_entry *next; /* in the retired list */
} disc_entry_t;

typedef struct disc_slot {
  pid_t pid;
  disc_entry_t *e; /* NULL = empty slot */
} disc_slot_t;

typedef struct buildid_slot {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime;
  bool used;
  char hex[41];
} buildid_slot_t;

struct ember__discovery {
  int rootfd; /* O_PATH directory fd of the proc root */
  int nlfd;   /* proc connector socket, or -1 */
  pid_t self;
  char *selector; /* NULL = every process */
  /* pid -> entry: open addressing, linear probing, load <= 1/2, deletion by
   * backward shift so there are no tombstones. */
  disc_slot_t *slots;
  size_t mask, count;
  /* Targets displaced from the map while still possibly referenced (pid
   * reuse, exec): exited, freed by reap. */
  disc_entry_t *retired;
  char *envbuf; /* ENVIRON_MAX bytes, reused for every read */
  buildid_slot_t *bids;
  uint64_t scan_gen;
  uint32_t nl_cookie; /* ack field of our LISTEN, to know its answer */
  bool elf_ok, nl_logged;
  ember__discovery_stats_t stats;
};

/* ---- UTF-8 and text ---------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlongs, no
 * surrogates, nothing past U+10FFFF), or 0 if p does not start one. */
static size_t utf8_seq(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
  }
  return len;
}

/* Copy s[0..n) into out[cap] as valid UTF-8: each byte that does not start a
 * well-formed sequence becomes '?', and the copy stops before a character
 * that would not fit, so truncation never splits one. Labels go on the
 * wire, which rejects invalid UTF-8. Returns the length; out is
 * NUL-terminated. */
static size_t utf8_copy(char *out, size_t cap, const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, o = 0;
  while (i < n) {
    size_t len = p[i] == 0 ? 0 : utf8_seq(p + i, n - i);
    size_t w = len ? len : 1;
    if (o + w >= cap) break;
    if (len)
      memcpy(out + o, s + i, len);
    else
      out[o] = '?';
    o += w;
    i += w;
  }
  out[o] = '\0';
  return o;
}

static char *label_dup(const char *s, size_t n, size_t cap) {
  char buf[EXE_MAX];
  size_t len = utf8_copy(buf, cap < sizeof buf ? cap : sizeof buf, s, n);
  return ember_strndup(buf, len);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Percent-decode s[0..n) into out[cap) (the OTel spec encodes resource
 * attribute values like W3C baggage). A '%' not followed by two hex digits,
 * or encoding NUL, is kept as it is. Returns the length written. */
static size_t pct_decode(char *out, size_t cap, const char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n && o < cap; i++) {
    if (s[i] == '%' && i + 2 < n) {
      int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
      if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
        out[o++] = (char)(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out[o++] = s[i];
  }
  return o;
}

static void trim(const char **s, size_t *n) {
  while (*n > 0 && (**s == ' ' || **s == '\t')) {
    (*s)++;
    (*n)--;
  }
  while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t')) (*n)--;
}

/* ---- the pid map ------------------------------------------------------- */

static size_t pid_home(pid_t pid, size_t mask) {
  uint64_t h = (uint64_t)(uint32_t)pid * 0x9e3779b97f4a7c15ULL;
  return (size_t)(h >> 32) & mask;
}

/* The slot holding pid, or the empty slot where it would go. The table is
 * never full (load <= 1/2), so the probe ends. */
static size_t map_slot(const ember__discovery_t *d, pid_t pid) {
  size_t i = pid_home(pid, d->mask);
  while (d->slots[i].e != NULL && d->slots[i].pid != pid) i = (i + 1) & d->mask;
  return i;
}

static disc_entry_t *map_find(const ember__discovery_t *d, pid_t pid) {
  return d->slots[map_slot(d, pid)].e;
}

/* Make room for one more entry. */
static int map_reserve(ember__discovery_t *d) {
  size_t cap = d->mask + 1;
  if ((d->count + 1) * 2 <= cap) return 0;
  size_t ncap = cap * 2;
  disc_slot_t *ns = ember_calloc(ncap, sizeof *ns);
  if (ns == NULL) return -ENOMEM;
  disc_slot_t *old = d->slots;
  d->slots = ns;
  d->mask = ncap - 1;
  for (size_t i = 0; i < cap; i++) {
    if (old[i].e != NULL) d->slots[map_slot(d, old[i].pid)] = old[i];
  }
  ember_free(old);
  return 0;
}

/* Empty slot i, shifting later members of its cluster back so that every
 * entry stays reachable from its home slot without tombstones. */
static void map_remove_at(ember__discovery_t *d, size_t i) {
  size_t j = i;
  for (;;) {
    j = (j + 1) & d->mask;
    if (d->slots[j].e == NULL) break;
    size_t home = pid_home(d->slots[j].pid, d->mask);
    /* The entry at j may fill the hole at i unless its home lies
     * cyclically in (i, j]. */
    bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      d->slots[i] = d->slots[j];
      i = j;
    }
  }
  d->slots[i].e = NULL;
  d->slots[i].pid = 0;
  d->count--;
}

static void entry_free(ember__discovery_t *d, disc_entry_t *e) {
  if (e == NULL) return;
  if (e->is_target) {
    d->stats.targets--;
    if (e->t.selected) d->stats.selected--;
  }
  ember_free(e->t.worker);
  ember_free(e->t.version);
  ember_free(e->t.actor);
  ember_free(e->t.exe);
  ember_free(e);
}

/* The entry in slot i leaves the map, exited, but a caller may still hold
 * its target: keep it on the retired list until reap. Kernel-thread
 * entries are nobody's and go at once. */
static void retire_slot(ember__discovery_t *d, size_t i) {
  disc_entry_t *e = d->slots[i].e;
  map_remove_at(d, i);
  if (!e->is_target) {
    entry_free(d, e);
    return;
  }
  e->t.exited = true;
  e->next = d->retired;
  d->retired = e;
}

/* Put a new entry in the map, retiring whatever had its pid. */
static int map_put(ember__discovery_t *d, disc_entry_t *e) {
  size_t i = map_slot(d, e->t.pid);
  if (d->slots[i].e != NULL) retire_slot(d, i);
  int rc = map_reserve(d);
  if (rc != 0) return rc;
  i = map_slot(d, e->t.pid);
  d->slots[i].pid = e->t.pid;
  d->slots[i].e = e;
  d->count++;
  return 0;
}

/* ---- reading one process ----------------------------------------------- */

typedef struct proc_stat {
  char state;
  uint64_t flags;
  uint64_t start_ticks;
  char comm[16];
} proc_stat_t;

/* Parse /proc/PID/stat. comm (field 2) may hold spaces and parentheses, so
 * it runs from the first '(' to the LAST ')', and the numbered fields are
 * counted from there. */
static int parse_stat(char *buf, size_t len, proc_stat_t *out) {
  char *open = memchr(buf, '(', len);
  char *close_p = memrchr(buf, ')', len);
  if (open == NULL || close_p == NULL || close_p < open) return EMBER_ECORRUPT;
  proc_stat_t st = {0};
  utf8_copy(st.comm, sizeof st.comm, open + 1, (size_t)(close_p - open - 1));
  buf[len] = '\0';
  char *p = close_p + 1;
  int field = 2;
  bool have_flags = false, have_start = false;
  while (*p != '\0' && !have_start) {
    while (*p == ' ') p++;
    if (*p == '\0') break;
    char *tok = p;
    while (*p != ' ' && *p != '\0') p++;
    char saved = *p;
    *p = '\0';
    field++;
    int rc = 0;
    if (field == 3) st.state = tok[0];
    if (field == 9) {
      rc = ember_parse_u64(tok, 0, UINT64_MAX, &st.flags);
      have_flags = true;
    }
    if (field == 22) {
      rc = ember_parse_u64(tok, 0, UINT64_MAX, &st.start_ticks);
      have_start = true;
    }
    *p = saved;
    if (rc != 0) return EMBER_ECORRUPT;
  }
  if (!have_flags || !have_start) return EMBER_ECORRUPT;
  *out = st;
  return 0;
}

static int read_stat(int dirfd, const char *name, proc_stat_t *out) {
  char buf[STAT_MAX + 1];
  size_t len = 0;
  int rc = ember__proc_read_at(dirfd, name, buf, STAT_MAX, &len);
  if (rc != 0) return rc;
  return parse_stat(buf, len, out);
}

static int open_pid(const ember__discovery_t *d, pid_t pid, int *out) {
  char name[16];
  snprintf(name, sizeof name, "%d", (int)pid);
  int fd;
  do {
    fd = openat(d->rootfd, name, O_PATH | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -errno;
  *out = fd;
  return 0;
}

/* A zombie or dying process has no identity left to read. */
static bool stat_gone(const proc_stat_t *st) { return st->state == 'Z' || st->state == 'X'; }

static bool note_build_id(Elf_Data *data, char hex[41]) {
  size_t off = 0;
  for (;;) {
    GElf_Nhdr nh;
    size_t name_off, desc_off;
    size_t next = gelf_getnote(data, off, &nh, &name_off, &desc_off);
    if (next == 0) return false;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && nh.n_descsz > 0 &&
        memcmp((const char *)data->d_buf + name_off, "GNU", 4) == 0) {
      static const char digits[] = "0123456789abcdef";
      const unsigned char *b = (const unsigned char *)data->d_buf + desc_off;
      size_t n = nh.n_descsz < 20 ? nh.n_descsz : 20;
      for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[b[i] >> 4];
        hex[2 * i + 1] = digits[b[i] & 15];
      }
      hex[2 * n] = '\0';
      return true;
    }
    off = next;
  }
}

/* The GNU build-id of the ELF file open on fd, from PT_NOTE segments (they
 * survive strip) or else SHT_NOTE sections; "" when there is none. */
static void elf_build_id(int fd, char hex[41]) {
  hex[0] = '\0';
  /* pread, not a mapping: a file its owner cuts while it is mapped would
   * raise SIGBUS here (only the notes are read, so this costs little). */
  Elf *e = elf_begin(fd, ELF_C_READ, NULL);
  if (e == NULL) return;
  if (elf_kind(e) != ELF_K_ELF) goto cleanup;
  size_t nph = 0;
  if (elf_getphdrnum(e, &nph) == 0) {
    for (size_t i = 0; i < nph; i++) {
      GElf_Phdr ph;
      if (gelf_getphdr(e, (int)i, &ph) == NULL || ph.p_type != PT_NOTE) continue;
      if (ph.p_filesz == 0 || ph.p_filesz > (1u << 20)) continue;
      Elf_Data *data = elf_getdata_rawchunk(e, (int64_t)ph.p_offset, (size_t)ph.p_filesz,
                                            ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
      if (data != NULL && note_build_id(data, hex)) goto cleanup;
    }
  }
  for (Elf_Scn *scn = elf_nextscn(e, NULL); scn != NULL; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_NOTE) continue;
    /* elf_getdata reads the whole section into memory: a target's file may
     * claim any size. */
    if (sh.sh_size == 0 || sh.sh_size > (1u << 20)) continue;
    Elf_Data *data = elf_getdata(scn, NULL);
    if (data != NULL && note_build_id(data, hex)) goto cleanup;
  }
cleanup:
  elf_end(e);
}

/* Build-id of the process's exe, cached by the file's identity: 50
 * processes of one binary parse it once. Size and mtime join (dev, ino) so
 * a file rewritten in place is read again. Opening through the pid's exe
 * link reaches the very file the process runs, even deleted or in another
 * mount namespace. */
static void exe_build_id(ember__discovery_t *d, int piddir, char hex[41]) {
  hex[0] = '\0';
  if (!d->elf_ok) return;
  struct stat sb;
  if (fstatat(piddir, "exe", &sb, 0) != 0 || !S_ISREG(sb.st_mode)) return;
  uint64_t h = ((uint64_t)sb.st_dev * 0x9e3779b97f4a7c15ULL) ^ (uint64_t)sb.st_ino;
  h *= 0xbf58476d1ce4e5b9ULL;
  buildid_slot_t *s = &d->bids[(h >> 40) & (BUILDID_SLOTS - 1)];
  if (s->used && s->dev == sb.st_dev && s->ino == sb.st_ino && s->size == sb.st_size &&
      s->mtime.tv_sec == sb.st_mtim.tv_sec && s->mtime.tv_nsec == sb.st_mtim.tv_nsec) {
    memcpy(hex, s->hex, sizeof s->hex);
    return;
  }
  /* The kernel's link to the very file the process runs. */
  ember__safe_opts_t o = {.follow = true, .owner = EMBER__SAFE_ANY_OWNER, .max_size = 2ull << 30};
  int fd = ember__safe_openat(piddir, "exe", &o, NULL);
  if (fd < 0) return;
  elf_build_id(fd, hex);
  close(fd);
  d->stats.elf_reads++;
  s->used = true;
  s->dev = sb.st_dev;
  s->ino = sb.st_ino;
  s->size = sb.st_size;
  s->mtime = sb.st_mtim;
  memcpy(s->hex, hex, sizeof s->hex);
}

enum { ENV_WORKER, ENV_VERSION, ENV_ACTOR, ENV_OTEL_NAME, ENV_OTEL_ATTRS, ENV_N };

/* The only variables ever looked at. Everything else in an environment is
 * skipped without being copied. */
static const struct {
  const char *prefix;
  size_t len;
} env_keys[ENV_N] = {
    [ENV_WORKER] = {"EMBER_WORKER=", 13},
    [ENV_VERSION] = {"EMBER_VERSION=", 14},
    [ENV_ACTOR] = {"EMBER_ACTOR=", 12},
    [ENV_OTEL_NAME] = {"OTEL_SERVICE_NAME=", 18},
    [ENV_OTEL_ATTRS] = {"OTEL_RESOURCE_ATTRIBUTES=", 25},
};

typedef struct env_view {
  const char *v[ENV_N]; /* into the environ buffer; NULL = unset */
  size_t n[ENV_N];
} env_view_t;

/* Pick the five variables out of a NUL-separated environ image. The first
 * occurrence wins, as for getenv(3). When the read hit the size limit, the
 * cut last entry is dropped rather than taken as a shorter value. */
static void env_scan(const char *buf, size_t len, bool truncated, env_view_t *out) {
  memset(out, 0, sizeof *out);
  size_t i = 0;
  while (i < len) {
    const char *s = buf + i;
    const char *nul = memchr(s, '\0', len - i);
    if (nul == NULL && truncated) break;
    size_t n = nul ? (size_t)(nul - s) : len - i;
    if (n > 0 && (s[0] == 'E' || s[0] == 'O')) {
      for (int k = 0; k < ENV_N; k++) {
        if (out->v[k] == NULL && n >= env_keys[k].len &&
            memcmp(s, env_keys[k].prefix, env_keys[k].len) == 0) {
          out->v[k] = s + env_keys[k].len;
          out->n[k] = n - env_keys[k].len;
        }
      }
    }
    i += n + 1;
  }
}

typedef struct otel_view {
  char name[2 * LABEL_MAX], version[2 * LABEL_MAX];
  size_t name_len, version_len;
  bool has_name, has_version;
} otel_view_t;

/* OTEL_RESOURCE_ATTRIBUTES: `key=value,key=value`, blanks around members
 * allowed, values percent-encoded. Only service.name and service.version
 * are decoded; the first of each wins. */
static void otel_scan(const char *s, size_t n, otel_view_t *out) {
  memset(out, 0, sizeof *out);
  size_t i = 0;
  while (i < n) {
    const char *m = s + i;
    const char *comma = memchr(m, ',', n - i);
    size_t mlen = comma ? (size_t)(comma - m) : n - i;
    i += mlen + 1;
    const char *eq = memchr(m, '=', mlen);
    if (eq == NULL) continue;
    const char *k = m, *v = eq + 1;
    size_t klen = (size_t)(eq - m), vlen = mlen - klen - 1;
    trim(&k, &klen);
    trim(&v, &vlen);
    if (vlen == 0) continue;
    if (klen == 12 && memcmp(k, "service.name", 12) == 0 && !out->has_name) {
      out->name_len = pct_decode(out->name, sizeof out->name, v, vlen);
      out->has_name = true;
    } else if (klen == 15 && memcmp(k, "service.version", 15) == 0 && !out->has_version) {
      out->version_len = pct_decode(out->version, sizeof out->version, v, vlen);
      out->has_version = true;
    }
  }
}

static bool same_str(const char *a, const char *b) {
  if (a == NULL || b == NULL) return a == b;
  return strcmp(a, b) == 0;
}

static bool same_labels(const ember__target_t *a, const ember__target_t *b) {
  return same_str(a->worker, b->worker) && same_str(a->version, b->version) &&
         same_str(a->actor, b->actor) && same_str(a->exe, b->exe) &&
         strcmp(a->comm, b->comm) == 0 && strcmp(a->build_id, b->build_id) == 0;
}

/* Read who process `pid` is, from its /proc directory (already open, so
 * every file read belongs to the same process even if the pid is reused
 * meanwhile). *out is a target, or an entry with is_target false for a
 * kernel thread. Returns 0, -ENOMEM, or -errno / EMBER_ECORRUPT when the
 * process vanished or cannot be read. */
static int entry_read(ember__discovery_t *d, pid_t pid, int piddir, const proc_stat_t *st,
                      disc_entry_t **out) {
  disc_entry_t *e = NULL;
  int rc = 0;
  char exe[EXE_MAX];
  e = ember_calloc(1, sizeof *e);
  if (e == NULL) return -ENOMEM;
  e->t.pid = pid;
  e->t.start_ticks = st->start_ticks;
  memcpy(e->t.comm, st->comm, sizeof e->t.comm);
  if (st->flags & PF_KTHREAD_FLAG) goto done;

  ssize_t n = readlinkat(piddir, "exe", exe, sizeof exe - 1);
  if (n < 0) {
    /* Kernel threads have no exe; neither has a process past exit_mm. */
    rc = -errno;
    goto cleanup;
  }
  if (n == 0) goto done;

  size_t envlen = 0;
  rc = ember__proc_read_at(piddir, "environ", d->envbuf, ENVIRON_MAX, &envlen);
  if (rc != 0) goto cleanup;
  env_view_t env;
  env_scan(d->envbuf, envlen, envlen == ENVIRON_MAX, &env);
  otel_view_t otel;
  otel_scan(env.v[ENV_OTEL_ATTRS], env.n[ENV_OTEL_ATTRS], &otel);
  exe_build_id(d, piddir, e->t.build_id);

  ember__target_t *t = &e->t;
  t->exe = label_dup(exe, (size_t)n, EXE_MAX);
  if (env.n[ENV_WORKER] > 0)
    t->worker = label_dup(env.v[ENV_WORKER], env.n[ENV_WORKER], LABEL_MAX);
  else if (env.n[ENV_OTEL_NAME] > 0)
    t->worker = label_dup(env.v[ENV_OTEL_NAME], env.n[ENV_OTEL_NAME], LABEL_MAX);
  else if (otel.has_name)
    t->worker = label_dup(otel.name, otel.name_len, LABEL_MAX);
  else
    t->worker = label_dup(t->comm, strlen(t->comm), LABEL_MAX);
  if (env.n[ENV_VERSION] > 0)
    t->version = label_dup(env.v[ENV_VERSION], env.n[ENV_VERSION], LABEL_MAX);
  else if (otel.has_version)
    t->version = label_dup(otel.version, otel.version_len, LABEL_MAX);
  else
    t->version = label_dup(t->build_id, strnlen(t->build_id, VERSION_FROM_BUILDID), LABEL_MAX);
  if (env.n[ENV_ACTOR] > 0) t->actor = label_dup(env.v[ENV_ACTOR], env.n[ENV_ACTOR], LABEL_MAX);
  if (t->exe == NULL || t->worker == NULL || t->version == NULL ||
      (env.n[ENV_ACTOR] > 0 && t->actor == NULL)) {
    rc = -ENOMEM;
    goto cleanup;
  }
  t->selected = ember__selector_match(d->selector, t);
  e->is_target = true;
  d->stats.targets++;
  if (t->selected) d->stats.selected++;
done:
  *out = e;
  return 0;
cleanup:
  entry_free(d, e);
  return rc;
}

/* Read process `pid` afresh and make it the map's entry for that pid,
 * retiring an older entry unless the labels came out unchanged. Returns
 * the entry (which may be a kernel thread), or NULL with *rc set. */
static disc_entry_t *refresh(ember__discovery_t *d, pid_t pid, int piddir, const proc_stat_t *st,
                             int *rc) {
  disc_entry_t *e = NULL;
  *rc = entry_read(d, pid, piddir, st, &e);
  if (*rc != 0) return NULL;
  disc_entry_t *old = map_find(d, pid);
  if (old != NULL && !old->t.exited && old->is_target == e->is_target &&
      old->t.start_ticks == e->t.start_ticks && (!e->is_target || same_labels(&old->t, &e->t))) {
    entry_free(d, e);
    return old;
  }
  *rc = map_put(d, e);
  if (*rc != 0) {
    entry_free(d, e);
    return NULL;
  }
  return e;
}

static void mark_exited(disc_entry_t *e) {
  if (e != NULL) e->t.exited = true;
}

/* A vanished or unreadable process is normal; only -ENOMEM is worth more
 * than a count. */
static void count_unreadable(ember__discovery_t *d, int rc) {
  if (rc != -ENOMEM) d->stats.unreadable++;
}

/* ---- the netlink process connector -------------------------------------- */

static int nl_send_op(int fd, uint32_t op, uint32_t cookie) {
  _Alignas(struct nlmsghdr) char buf[sizeof(struct nlmsghdr) + sizeof(struct cn_msg) + 4];
  struct nlmsghdr h = {.nlmsg_len = (uint32_t)sizeof buf, .nlmsg_type = NLMSG_DONE};
  struct cn_msg cn = {.id = {.idx = CN_IDX_PROC, .val = CN_VAL_PROC}, .ack = cookie, .len = 4};
  memcpy(buf, &h, sizeof h);
  memcpy(buf + sizeof h, &cn, sizeof cn);
  memcpy(buf + sizeof h + sizeof cn, &op, sizeof op);
  struct sockaddr_nl to = {.nl_family = AF_NETLINK};
  ssize_t n;
  do {
    n = sendto(fd, buf, sizeof buf, 0, (const struct sockaddr *)&to, sizeof to);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : 0;
}

/* Subscribe to the proc connector. It needs CAP_NET_ADMIN in the initial
 * user and network namespaces; elsewhere it fails and scans take over. The
 * old 4-byte LISTEN message is used (not the 6.6+ filtered form, which
 * older kernels ignore silently), so fork events come too and are dropped
 * here. */
static int nl_open(int *out, uint32_t cookie) {
  int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_CONNECTOR);
  if (fd < 0) return -errno;
  int rc = 0;
  /* A larger buffer rides out bursts of exec/exit (a build, a fork storm);
   * FORCE works as root, the plain option is capped by rmem_max. */
  int rcvbuf = 4 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) != 0)
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = CN_IDX_PROC};
  if (bind(fd, (const struct sockaddr *)&sa, sizeof sa) != 0) {
    rc = -errno;
    goto cleanup;
  }
  rc = nl_send_op(fd, PROC_CN_MCAST_LISTEN, cookie);
  if (rc != 0) goto cleanup;
  *out = fd;
  fd = -1;
cleanup:
  if (fd >= 0) close(fd);
  return rc;
}

/* The connector reports pids as the initial pid namespace numbers them.
 * An agent in a child pid namespace whose /proc is its own would see other
 * processes under those numbers, so it must not listen. The initial
 * namespace has a fixed inode (PROC_PID_INIT_INO, include/linux/proc_ns.h);
 * elsewhere, NSpid in <proc_root>/self/status lists one pid per level from
 * that proc mount's namespace down, so more than one means the mount
 * belongs to an ancestor (say, the host's /proc mounted into a container),
 * whose numbers are the connector's. */
#define PROC_PID_INIT_INO 0xEFFFFFFCu

static bool pidns_mismatch(int rootfd) {
  struct stat sb;
  if (stat("/proc/self/ns/pid", &sb) != 0 || sb.st_ino == PROC_PID_INIT_INO) return false;
  char buf[8192];
  size_t len = 0;
  if (ember__proc_read_at(rootfd, "self/status", buf, sizeof buf - 1, &len) != 0) return false;
  buf[len] = '\0';
  if (strstr(buf, "\nNSpid:") == NULL) return false; /* a kernel without pid namespaces */
  uint64_t last = 0;
  unsigned levels = 0;
  return ember__proc_nspid_parse(buf, &last, &levels) != 0 || levels <= 1;
}

static void nl_failed(ember__discovery_t *d, const char *what, int err) {
  d->stats.netlink_errors++;
  if (d->nl_logged) return;
  d->nl_logged = true;
  EMBER_WARN("discovery", "process connector %s: %s; relying on /proc scans", what,
             ember_strerror(err));
}

static void on_exec(ember__discovery_t *d, pid_t tgid) {
  d->stats.exec_events++;
  if (tgid <= 0 || tgid == d->self) return;
  int piddir = -1;
  proc_stat_t st;
  int rc = open_pid(d, tgid, &piddir);
  if (rc == 0) rc = read_stat(piddir, "stat", &st);
  if (rc == 0 && stat_gone(&st)) rc = -ESRCH;
  if (rc == 0) refresh(d, tgid, piddir, &st, &rc);
  if (rc != 0) {
    /* Gone already (a short-lived process) or unreadable: whatever the pid
     * was before the exec, it is not that any more. */
    mark_exited(map_find(d, tgid));
    count_unreadable(d, rc);
  }
  if (piddir >= 0) close(piddir);
}

static void on_event(ember__discovery_t *d, const char *p, size_t len) {
  struct cn_msg cn;
  if (len < sizeof cn) return;
  memcpy(&cn, p, sizeof cn);
  if (cn.id.idx != CN_IDX_PROC || cn.id.val != CN_VAL_PROC) return;
  size_t plen = len - sizeof cn;
  if (cn.len < plen) plen = cn.len;
  /* The payload sits at offset 36 of the datagram, unaligned for the
   * event's u64 timestamp: copy it out. */
  struct proc_event ev;
  memset(&ev, 0, sizeof ev);
  if (plen < offsetof(struct proc_event, event_data) + 8) return;
  memcpy(&ev, p + sizeof cn, plen < sizeof ev ? plen : sizeof ev);
  uint32_t what = (uint32_t)ev.what;
  if (what == (uint32_t)PROC_EVENT_EXEC) {
    on_exec(d, ev.event_data.exec.process_tgid);
  } else if (what == (uint32_t)PROC_EVENT_EXIT) {
    /* Threads exit too; only the leader's exit ends the process. */
    if (ev.event_data.exit.process_pid != ev.event_data.exit.process_tgid) return;
    d->stats.exit_events++;
    mark_exited(map_find(d, ev.event_data.exit.process_tgid));
  } else if (what == (uint32_t)PROC_EVENT_NONE && cn.ack == d->nl_cookie + 1 &&
             ev.event_data.ack.err != 0) {
    /* The kernel refused LISTEN (e.g. not in the initial user namespace):
     * the socket stays quiet and only scans will see processes. */
    nl_failed(d, "refused to listen", -(int)ev.event_data.ack.err);
  }
}

/* ---- public API ---------------------------------------------------------- */

typedef enum { LABEL_WORKER, LABEL_VERSION, LABEL_ACTOR, LABEL_COMM, LABEL_EXE } label_t;

static const char *const label_names[] = {"worker", "version", "actor", "comm", "exe"};

typedef struct sel_term {
  const char *term; /* the whole term, for messages */
  size_t term_len;
  int label; /* label_t, or -1 unknown */
  bool has_eq;
  char pattern[TERM_MAX];
  bool too_long;
} sel_term_t;

/* Split the next comma-separated term off *p. Returns false at the end. */
static bool sel_next(const char **p, sel_term_t *out) {
  if (**p == '\0') return false;
  const char *s = *p;
  const char *comma = strchr(s, ',');
  size_t n = comma ? (size_t)(comma - s) : strlen(s);
  *p = comma ? comma + 1 : s + n;
  trim(&s, &n);
  memset(out, 0, sizeof *out);
  out->term = s;
  out->term_len = n;
  out->label = -1;
  const char *eq = memchr(s, '=', n);
  if (eq == NULL) return true;
  out->has_eq = true;
  const char *k = s, *v = eq + 1;
  size_t klen = (size_t)(eq - s), vlen = n - klen - 1;
  trim(&k, &klen);
  trim(&v, &vlen);
  for (int i = 0; i < (int)(sizeof label_names / sizeof label_names[0]); i++) {
    if (strlen(label_names[i]) == klen && memcmp(label_names[i], k, klen) == 0) out->label = i;
  }
  if (vlen >= sizeof out->pattern) {
    out->too_long = true;
    return true;
  }
  memcpy(out->pattern, v, vlen);
  out->pattern[vlen] = '\0';
  return true;
}

static bool sel_empty(const char *sel) { return sel == NULL || sel[strspn(sel, " \t")] == '\0'; }

static int sel_check(const char *sel, char *errbuf, size_t errbuf_size) {
  if (sel_empty(sel)) return 0;
  const char *p = sel;
  sel_term_t t;
  while (sel_next(&p, &t)) {
    const char *why = NULL;
    if (!t.has_eq)
      why = "expected label=glob";
    else if (t.label < 0)
      why = "unknown label (use worker, version, actor, comm or exe)";
    else if (t.too_long)
      why = "pattern too long";
    if (why != NULL) {
      if (errbuf != NULL && errbuf_size > 0)
        snprintf(errbuf, errbuf_size, "selector term '%.*s': %s",
                 (int)(t.term_len < 128 ? t.term_len : 128), t.term, why);
      return EMBER_ECONFIG;
    }
  }
  return 0;
}

bool ember__selector_match(const char *selector, const ember__target_t *t) {
  if (t == NULL) return false;
  if (sel_empty(selector)) return true;
  const char *p = selector;
  sel_term_t term;
  while (sel_next(&p, &term)) {
    if (!term.has_eq || term.label < 0 || term.too_long) return false;
    const char *v = NULL;
    switch ((label_t)term.label) {
    case LABEL_WORKER: v = t->worker; break;
    case LABEL_VERSION: v = t->version; break;
    case LABEL_ACTOR: v = t->actor; break;
    case LABEL_COMM: v = t->comm; break;
    case LABEL_EXE: v = t->exe; break;
    }
    if (fnmatch(term.pattern, v ? v : "", 0) != 0) return false;
  }
  return true;
}

/* Our pid as the proc root numbers it: /proc may belong to another pid
 * namespace than ours (the host's /proc mounted into a container). */
static pid_t self_pid(int rootfd) {
  char buf[32];
  ssize_t n = readlinkat(rootfd, "self", buf, sizeof buf - 1);
  uint64_t v;
  if (n > 0) {
    buf[n] = '\0';
    if (ember_parse_u64(buf, 1, INT_MAX, &v) == 0) return (pid_t)v;
  }
  return getpid();
}

int ember__discovery_new(const ember__discovery_opts_t *opts, ember__discovery_t **out,
                         char *errbuf, size_t errbuf_size) {
  if (opts == NULL || out == NULL) return -EINVAL;
  int rc = sel_check(opts->selector, errbuf, errbuf_size);
  if (rc != 0) return rc;
  ember__discovery_t *d = ember_calloc(1, sizeof *d);
  if (d == NULL) return -ENOMEM;
  d->rootfd = -1;
  d->nlfd = -1;
  rc = -ENOMEM;
  if (!sel_empty(opts->selector)) {
    d->selector = ember_strdup(opts->selector);
    if (d->selector == NULL) goto cleanup;
  }
  d->envbuf = ember_malloc(ENVIRON_MAX);
  d->bids = ember_calloc(BUILDID_SLOTS, sizeof *d->bids);
  d->slots = ember_calloc(MAP_MIN_SLOTS, sizeof *d->slots);
  if (d->envbuf == NULL || d->bids == NULL || d->slots == NULL) goto cleanup;
  d->mask = MAP_MIN_SLOTS - 1;
  const char *root = opts->proc_root && opts->proc_root[0] ? opts->proc_root : "/proc";
  do {
    d->rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  } while (d->rootfd < 0 && errno == EINTR);
  if (d->rootfd < 0) {
    rc = -errno;
    if (errbuf != NULL && errbuf_size > 0)
      snprintf(errbuf, errbuf_size, "discovery: cannot open %s: %s", root, ember_strerror(rc));
    goto cleanup;
  }
  d->self = opts->self > 0 ? opts->self : self_pid(d->rootfd);
  d->elf_ok = elf_version(EV_CURRENT) != EV_NONE;
  if (!d->elf_ok) EMBER_WARN("discovery", "libelf unusable: versions fall back to \"\"");
  if (opts->netlink && pidns_mismatch(d->rootfd)) {
    d->stats.netlink_errors++;
    d->nl_logged = true;
    EMBER_WARN("discovery", "in a child pid namespace: process connector pids would not match "
                            "/proc; relying on /proc scans");
  } else if (opts->netlink) {
    /* Acks go to every listener; the kernel answers with our ack field
     * plus one, which tells ours apart. */
    d->nl_cookie = ((uint32_t)getpid() ^ (uint32_t)ember_time_mono_ns()) & 0x7fffffffu;
    int nrc = nl_open(&d->nlfd, d->nl_cookie);
    if (nrc != 0) nl_failed(d, "unavailable", nrc);
  }
  *out = d;
  return 0;
cleanup:
  ember__discovery_free(d);
  return rc;
}

void ember__discovery_free(ember__discovery_t *d) {
  if (d == NULL) return;
  if (d->nlfd >= 0) {
    /* Listeners are counted kernel-wide; say goodbye so the kernel stops
     * building events once nobody listens. */
    (void)nl_send_op(d->nlfd, PROC_CN_MCAST_IGNORE, d->nl_cookie);
    close(d->nlfd);
  }
  if (d->rootfd >= 0) close(d->rootfd);
  if (d->slots != NULL) {
    for (size_t i = 0; i <= d->mask; i++) entry_free(d, d->slots[i].e);
  }
  while (d->retired != NULL) {
    disc_entry_t *e = d->retired;
    d->retired = e->next;
    entry_free(d, e);
  }
  ember_free(d->slots);
  ember_free(d->bids);
  ember_free(d->envbuf);
  ember_free(d->selector);
  ember_free(d);
}

int ember__discovery_fd(const ember__discovery_t *d) { return d ? d->nlfd : -1; }

int ember__discovery_read_events(ember__discovery_t *d) {
  if (d == NULL) return -EINVAL;
  if (d->nlfd < 0) return -EBADF;
  _Alignas(struct nlmsghdr) char buf[8192];
  bool overrun = false;
  /* A bounded batch keeps the loop responsive during an exec storm; the
   * socket stays readable, so the caller's poll comes straight back. */
  for (int batch = 0; batch < NL_BATCH_MAX; batch++) {
    struct sockaddr_nl from;
    socklen_t fromlen = sizeof from;
    ssize_t n = recvfrom(d->nlfd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fromlen);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == ENOBUFS) {
        overrun = true;
        continue;
      }
      int rc = -errno;
      nl_failed(d, "failed", rc);
      return rc;
    }
    /* Only the kernel (port 0) speaks for the proc connector. */
    if (from.nl_pid != 0) continue;
    size_t len = (size_t)n, off = 0;
    while (off + sizeof(struct nlmsghdr) <= len) {
      struct nlmsghdr h;
      memcpy(&h, buf + off, sizeof h);
      if (h.nlmsg_len < sizeof h || h.nlmsg_len > len - off) break;
      if (h.nlmsg_type != NLMSG_ERROR && h.nlmsg_type != NLMSG_NOOP)
        on_event(d, buf + off + sizeof h, h.nlmsg_len - sizeof h);
      off += ((size_t)h.nlmsg_len + 3u) & ~(size_t)3u;
    }
  }
  if (overrun) {
    /* Events were lost, among them perhaps exits: only a scan can tell
     * which known pids are gone. */
    d->stats.overruns++;
    int rc = ember__discovery_scan(d);
    if (rc != 0)
      EMBER_WARN("discovery", "scan after netlink overrun failed: %s", ember_strerror(rc));
  }
  return 0;
}

/* One pid listed by a scan. Returns 0 or -ENOMEM (other failures are the
 * process's and only counted). */
static int scan_one(ember__discovery_t *d, pid_t pid, uint64_t gen) {
  int piddir = -1;
  proc_stat_t st;
  disc_entry_t *known = map_find(d, pid);
  if (known != NULL && !known->t.exited) {
    /* The common case, a known process still there, costs one open and
     * read: this halves the time of a repeated scan. */
    char name[32];
    snprintf(name, sizeof name, "%d/stat", (int)pid);
    if (read_stat(d->rootfd, name, &st) == 0 && !stat_gone(&st) &&
        st.start_ticks == known->t.start_ticks) {
      known->seen = gen;
      return 0;
    }
  }
  int rc = open_pid(d, pid, &piddir);
  if (rc == 0) rc = read_stat(piddir, "stat", &st);
  /* Not marking it seen lets the sweep retire a zombie's entry. */
  if (rc == 0 && stat_gone(&st)) goto cleanup;
  if (rc == 0) {
    disc_entry_t *e = map_find(d, pid);
    if (e != NULL && !e->t.exited && e->t.start_ticks == st.start_ticks) {
      e->seen = gen;
      goto cleanup;
    }
    /* New, or the pid now belongs to another process (its start time
     * differs): read it. */
    e = refresh(d, pid, piddir, &st, &rc);
    if (e != NULL) e->seen = gen;
  }
  if (rc != 0) count_unreadable(d, rc);
cleanup:
  if (piddir >= 0) close(piddir);
  return rc == -ENOMEM ? rc : 0;
}

int ember__discovery_scan(ember__discovery_t *d) {
  if (d == NULL) return -EINVAL;
  int rc = 0;
  DIR *dir = NULL;
  int fd;
  do {
    fd = openat(d->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -errno;
  dir = fdopendir(fd);
  if (dir == NULL) {
    rc = -errno;
    close(fd);
    return rc;
  }
  uint64_t gen = ++d->scan_gen;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(dir);
    if (de == NULL) {
      rc = errno ? -errno : 0;
      break;
    }
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    uint64_t v;
    if (ember_parse_u64(de->d_name, 1, INT_MAX, &v) != 0) continue;
    pid_t pid = (pid_t)v;
    if (pid == d->self) continue;
    rc = scan_one(d, pid, gen);
    if (rc != 0) break;
  }
  if (rc != 0) goto cleanup;
  /* The listing was complete: whatever it did not show has exited. */
  for (size_t i = 0; i <= d->mask; i++) {
    disc_entry_t *e = d->slots[i].e;
    if (e != NULL && e->seen != gen) e->t.exited = true;
  }
  d->stats.scans++;
cleanup:
  closedir(dir);
  return rc;
}

const ember__target_t *ember__discovery_get(ember__discovery_t *d, pid_t pid) {
  if (d == NULL || pid <= 0 || pid == d->self) return NULL;
  disc_entry_t *e = map_find(d, pid);
  if (e != NULL) return e->is_target ? &e->t : NULL;
  int piddir = -1;
  proc_stat_t st;
  int rc = open_pid(d, pid, &piddir);
  if (rc == 0) rc = read_stat(piddir, "stat", &st);
  if (rc == 0 && stat_gone(&st)) rc = -ESRCH;
  if (rc == 0) e = refresh(d, pid, piddir, &st, &rc);
  if (rc != 0) count_unreadable(d, rc);
  if (piddir >= 0) close(piddir);
  if (e != NULL) e->seen = d->scan_gen;
  return e != NULL && e->is_target ? &e->t : NULL;
}

void ember__discovery_each(ember__discovery_t *d, void (*fn)(void *ctx, const ember__target_t *t),
                           void *ctx) {
  if (d == NULL || fn == NULL) return;
  for (size_t i = 0; i <= d->mask; i++) {
    disc_entry_t *e = d->slots[i].e;
    if (e != NULL && e->is_target) fn(ctx, &e->t);
  }
  for (disc_entry_t *e = d->retired; e != NULL; e = e->next) fn(ctx, &e->t);
}

void ember__discovery_reap(ember__discovery_t *d, void (*fn)(void *ctx, const ember__target_t *t),
                           void *ctx) {
  if (d == NULL) return;
  while (d->retired != NULL) {
    disc_entry_t *e = d->retired;
    d->retired = e->next;
    if (fn != NULL) fn(ctx, &e->t);
    entry_free(d, e);
  }
  /* Removing at i shifts later cluster members into i, so i is looked at
   * again; an entry shifted from an already visited slot (wrap-around) is
   * live and only looked at twice. */
  size_t i = 0;
  while (i <= d->mask) {
    disc_entry_t *e = d->slots[i].e;
    if (e == NULL || !e->t.exited) {
      i++;
      continue;
    }
    if (fn != NULL && e->is_target) fn(ctx, &e->t);
    map_remove_at(d, i);
    entry_free(d, e);
  }
}

void ember__discovery_stats(const ember__discovery_t *d, ember__discovery_stats_t *out) {
  if (d == NULL || out == NULL) return;
  *out = d->stats;
}
