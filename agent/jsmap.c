/* Source maps of the scripts a process runs (jsmap.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "array.h"
#include "ember/jsname.h"
#include "ember/log.h"
#include "htab.h"
#include "jsmap.h"
#include "safefile.h"
#include "strarena.h"

#define NONE UINT32_MAX
/* The last line of a script is looked for in its last TAIL bytes first,
 * then in 8 times as many, up to what an inline map may take. */
#define TAIL 4096u

/* One script file, by identity. */
typedef struct script {
  uint64_t dev, ino, size;
  int64_t mtime_ns;
  char *path;             /* the path V8 named it by, first seen */
  char *base;             /* where the map's relative sources start: its directory */
  ember_sourcemap_t *map; /* NULL: none, refused, or evicted */
  size_t bytes;           /* memory of map */
  uint64_t used;          /* epoch of the last frame mapped through it */
  uint64_t seen;          /* epoch of the last check that found it */
  bool evicted;           /* had a map, dropped for the bound: decode again */
  uint32_t gen;           /* bumped when the slot is reused for another script */
} script_t;

/* A script as one process names it, checked against the file once per
 * epoch. */
typedef struct ref {
  pid_t pid;
  char *name; /* V8's script string */
  size_t len;
  uint64_t hash;
  uint32_t script; /* NONE: no file, refused, or no map */
  uint32_t gen;    /* the script slot's gen when found */
  uint64_t epoch;  /* of the last check; 0 = never */
} ref_t;

/* A process's filesystem view: its root (O_PATH; -1 when it is gone) and
 * its owner (-1 unknown), opened once per pid per epoch, not once per
 * script it names. */
typedef struct view {
  int rootfd; /* <proc>/PID/root */
  int64_t uid;
  pid_t pid;
  uint64_t epoch; /* 0: empty */
} view_t;

/* Views held open: a direct-mapped cache by pid, emptied at every epoch. */
#define VIEWS 16u

struct ember__jsmaps {
  char *proc_root;
  uint64_t max_bytes;
  ember_sourcemap_limits_t lim;
  script_t *scripts;
  size_t nscripts, capscripts;
  ref_t *refs;
  size_t nrefs, caprefs;
  ember__htab_t reftab;
  ember_sourcemap_t **grave;
  size_t ngrave, capgrave;
  ember__strarena_t names; /* generated names handed out in this epoch */
  uint64_t epoch;
  view_t views[VIEWS];
  ember__jsmaps_stats_t st;
};

static void views_close(ember__jsmaps_t *m) {
  for (unsigned i = 0; i < VIEWS; i++) {
    if (m->views[i].epoch != 0 && m->views[i].rootfd >= 0) close(m->views[i].rootfd);
    m->views[i] = (view_t){.rootfd = -1, .uid = -1};
  }
}

int ember__jsmaps_new(const ember__jsmaps_opts_t *opts, ember__jsmaps_t **out) {
  if (out == NULL) return -EINVAL;
  *out = NULL;
  ember__jsmaps_t *m = ember_calloc(1, sizeof *m);
  if (m == NULL) return -ENOMEM;
  m->proc_root = ember_strdup(opts && opts->proc_root ? opts->proc_root : "/proc");
  if (m->proc_root == NULL) {
    ember_free(m);
    return -ENOMEM;
  }
  m->max_bytes = opts && opts->max_bytes ? opts->max_bytes : EMBER__JSMAPS_MAX_BYTES;
  if (opts != NULL) m->lim = opts->limits;
  if (m->lim.max_bytes == 0) m->lim.max_bytes = EMBER_SOURCEMAP_MAX_BYTES;
  ember__htab_init(&m->reftab);
  views_close(m);
  m->epoch = 1;
  *out = m;
  return 0;
}

static void grave_flush(ember__jsmaps_t *m) {
  for (size_t i = 0; i < m->ngrave; i++) ember_sourcemap_free(m->grave[i]);
  m->ngrave = 0;
}

void ember__jsmaps_free(ember__jsmaps_t *m) {
  if (m == NULL) return;
  views_close(m);
  grave_flush(m);
  ember_free(m->grave);
  for (size_t i = 0; i < m->nscripts; i++) {
    ember_sourcemap_free(m->scripts[i].map);
    ember_free(m->scripts[i].path);
    ember_free(m->scripts[i].base);
  }
  ember_free(m->scripts);
  for (size_t i = 0; i < m->nrefs; i++) ember_free(m->refs[i].name);
  ember_free(m->refs);
  ember__htab_free(&m->reftab);
  ember__strarena_free(&m->names);
  ember_free(m->proc_root);
  ember_free(m);
}

/* --- refs: (pid, V8's script string) --- */

typedef struct ref_key {
  const ember__jsmaps_t *m;
  pid_t pid;
  const char *name;
  size_t len;
} ref_key_t;

static uint64_t ref_hash(pid_t pid, const char *name, size_t len) {
  return ember__hash_bytes(name, len, (uint64_t)(uint32_t)pid);
}

static bool ref_eq(const void *ctx, uint32_t idx) {
  const ref_key_t *k = ctx;
  const ref_t *r = &k->m->refs[idx];
  return r->pid == k->pid && r->len == k->len && memcmp(r->name, k->name, k->len) == 0;
}

static uint64_t ref_rehash(const void *ctx, uint32_t idx) {
  const ember__jsmaps_t *m = ctx;
  return m->refs[idx].hash;
}

static ref_t *ref_get(ember__jsmaps_t *m, pid_t pid, const char *name, size_t len) {
  uint64_t h = ref_hash(pid, name, len);
  ref_key_t k = {m, pid, name, len};
  int64_t i = ember__htab_find(&m->reftab, h, ref_eq, &k);
  if (i >= 0) return &m->refs[i];
  if (m->nrefs >= EMBER__JSMAPS_MAX_REFS) {
    m->st.capped++;
    return NULL;
  }
  ref_t *v = ember__grow_array(m->refs, &m->caprefs, m->nrefs + 1, sizeof *v);
  if (v == NULL) return NULL;
  m->refs = v;
  char *copy = ember_strndup(name, len);
  if (copy == NULL) return NULL;
  if (ember__htab_insert(&m->reftab, h, (uint32_t)m->nrefs, ref_rehash, m) != 0) {
    ember_free(copy);
    return NULL;
  }
  m->refs[m->nrefs] =
      (ref_t){.pid = pid, .name = copy, .len = len, .hash = h, .script = NONE, .epoch = 0};
  return &m->refs[m->nrefs++];
}

/* --- reading files of the process --- */

/* May a process of `uid` (-1: gone) read a file with this stat? Its own
 * files, and root's that anyone may read: never a root-only file. */
static bool readable_by(const struct stat *st, int64_t uid) {
  if (uid >= 0 && (int64_t)st->st_uid == uid) return true;
  return st->st_uid == 0 && (st->st_mode & S_IROTH);
}

static bool refused_open(int rc) {
  return rc == -ELOOP || rc == -ENODEV || rc == -EPERM || rc == -EFBIG;
}

/* Open absolute `path` inside the process's root under the rules. */
static int view_open(const view_t *v, const char *path, uint64_t max_size, struct stat *st) {
  while (*path == '/') path++;
  if (*path == '\0') return -ENOENT;
  ember__safe_opts_t o = {.owner = EMBER__SAFE_ANY_OWNER, .max_size = max_size};
  int fd = ember__safe_openat(v->rootfd, path, &o, st);
  if (fd >= 0 && !readable_by(st, v->uid)) {
    close(fd);
    return -EPERM;
  }
  return fd;
}

/* The last non-blank line of the script (fd, `size` bytes), read from its
 * end: *line (owned by the caller) and *len; *line NULL if longer than
 * `cap` bytes. */
static int last_line(int fd, uint64_t size, uint64_t cap, char **line, size_t *len) {
  *line = NULL;
  *len = 0;
  for (uint64_t w = size < TAIL ? size : TAIL;; w = w * 8 > size ? size : w * 8) {
    if (w > cap) return 0;
    char *buf = ember_malloc((size_t)w + 1);
    if (buf == NULL) return -ENOMEM;
    ssize_t got = ember__safe_pread(fd, buf, (size_t)w, size - w);
    if (got != (ssize_t)w) {
      ember_free(buf);
      return got < 0 ? (int)got : 0; /* cut meanwhile: no map this time */
    }
    size_t end = (size_t)w;
    while (end > 0 && (buf[end - 1] == '\n' || buf[end - 1] == '\r' || buf[end - 1] == ' ' ||
                       buf[end - 1] == '\t'))
      end--;
    const char *nl = memrchr(buf, '\n', end);
    if (nl != NULL || w == size) {
      size_t start = nl ? (size_t)(nl - buf) + 1 : 0;
      memmove(buf, buf + start, end - start);
      buf[end - start] = '\0';
      *line = buf;
      *len = end - start;
      return 0;
    }
    ember_free(buf);
    if (w == size) return 0;
  }
}

/* A base64 `data:` URL's JSON: decoded into *out (owned by the caller). */
static int data_url(const char *url, size_t len, char **out, size_t *outlen, bool *supported) {
  *out = NULL;
  *supported = false;
  const char *comma = memchr(url, ',', len);
  static const char json[] = "data:application/json", b64[] = ";base64";
  if (comma == NULL || (size_t)(comma - url) < sizeof json - 1 + sizeof b64 - 1 ||
      memcmp(url, json, sizeof json - 1) != 0 ||
      memcmp(comma - (sizeof b64 - 1), b64, sizeof b64 - 1) != 0)
    return 0;
  const char *d = comma + 1;
  size_t n = len - (size_t)(d - url);
  if (n % 4 != 0 || n > INT_MAX) return 0;
  *supported = true;
  unsigned char *buf = ember_malloc(n / 4 * 3 + 1);
  if (buf == NULL) return -ENOMEM;
  int k = EVP_DecodeBlock(buf, (const unsigned char *)d, (int)n);
  if (k < 0) {
    ember_free(buf);
    *supported = false;
    return 0;
  }
  size_t pad = n >= 2 && d[n - 1] == '=' ? (d[n - 2] == '=' ? 2 : 1) : 0;
  *out = (char *)buf;
  *outlen = (size_t)k - pad;
  return 0;
}

/* Read a whole map file (already bounded by the open). */
static int read_file(int fd, const struct stat *st, char **out, size_t *len) {
  *out = ember_malloc((size_t)st->st_size + 1);
  if (*out == NULL) return -ENOMEM;
  ssize_t got = ember__safe_pread(fd, *out, (size_t)st->st_size, 0);
  if (got < 0) {
    ember_free(*out);
    *out = NULL;
    return (int)got;
  }
  *len = (size_t)got;
  return 0;
}

/* Find, read and decode the map of the script `path` (open as fd). Sets
 * s->map (NULL: none or refused: counted). */
static int load_map(ember__jsmaps_t *m, const view_t *v, const char *path, int fd,
                    const struct stat *sst, script_t *s) {
  char *line = NULL, *json = NULL;
  size_t linelen = 0, jsonlen = 0;
  uint64_t cap = m->lim.max_bytes / 3 * 4 + TAIL;
  int rc = last_line(fd, (uint64_t)sst->st_size, cap, &line, &linelen);
  if (rc != 0) return rc == -ENOMEM ? rc : 0;
  char mpath[PATH_MAX];
  const char *url = NULL;
  size_t ulen = 0;
  static const char c1[] = "//# sourceMappingURL=", c2[] = "//@ sourceMappingURL=";
  if (line != NULL && linelen >= sizeof c1 - 1 &&
      (memcmp(line, c1, sizeof c1 - 1) == 0 || memcmp(line, c2, sizeof c2 - 1) == 0)) {
    url = line + sizeof c1 - 1;
    ulen = linelen - (sizeof c1 - 1);
  }
  bool have_file = false;
  if (url != NULL && ulen > 5 && memcmp(url, "data:", 5) == 0) {
    bool supported;
    rc = data_url(url, ulen, &json, &jsonlen, &supported);
    if (rc != 0) goto done;
    if (!supported) {
      m->st.unsupported++;
      EMBER_WARN_LIMITED("jsmap", "%s: its inline source map is not base64 JSON: not read", path);
      goto done;
    }
  } else if (url != NULL && ulen >= 7 && memcmp(url, "file://", 7) == 0) {
    if (!ember_jsname_script_path(url, ulen, mpath, sizeof mpath)) goto unsupported;
    have_file = true;
  } else if (url != NULL) {
    /* A path: absolute, or relative to the script's directory; any other
     * scheme (http:, https:) is not fetched. */
    const char *colon = memchr(url, ':', ulen), *slash = memchr(url, '/', ulen);
    if (colon != NULL && (slash == NULL || colon < slash)) goto unsupported;
    const char *dir_end = strrchr(path, '/');
    int n = url[0] == '/' ? snprintf(mpath, sizeof mpath, "%.*s", (int)ulen, url)
                          : snprintf(mpath, sizeof mpath, "%.*s/%.*s", (int)(dir_end - path), path,
                                     (int)ulen, url);
    if (n < 0 || (size_t)n >= sizeof mpath || memchr(url, '\0', ulen) != NULL) goto unsupported;
    have_file = true;
  } else {
    int n = snprintf(mpath, sizeof mpath, "%s.map", path);
    if (n < 0 || (size_t)n >= sizeof mpath) goto done;
    have_file = true;
  }
  if (have_file) {
    ember_jsname_path_lexical(mpath);
    struct stat mst;
    int mfd = view_open(v, mpath, m->lim.max_bytes, &mst);
    if (mfd == -EFBIG) {
      m->st.refused[EMBER_SOURCEMAP_TOO_BIG]++;
      EMBER_WARN_LIMITED("jsmap", "%s: source map %s is over %llu bytes: not read", path, mpath,
                         (unsigned long long)m->lim.max_bytes);
      goto done;
    }
    if (refused_open(mfd)) {
      m->st.unsafe++;
      EMBER_WARN_LIMITED("jsmap", "%s: source map %s refused: %s", path, mpath,
                         ember_strerror(mfd));
      goto done;
    }
    if (mfd < 0) { /* none there */
      m->st.no_map++;
      goto done;
    }
    rc = read_file(mfd, &mst, &json, &jsonlen);
    close(mfd);
    if (rc != 0) {
      rc = rc == -ENOMEM ? rc : 0;
      goto done;
    }
  }
  /* Relative sources start at the map's directory (the script's for an
   * inline map). */
  const char *at = have_file ? mpath : path;
  const char *slash = strrchr(at, '/');
  ember_free(s->base);
  s->base = ember_strndup(at, slash > at ? (size_t)(slash - at) : 1);
  if (s->base == NULL) {
    rc = -ENOMEM;
    goto done;
  }
  ember_sourcemap_error_t err;
  rc = ember_sourcemap_parse_at(json, jsonlen, &m->lim, s->base, &s->map, &err);
  if (rc == -EINVAL) {
    m->st.refused[err.reason]++;
    EMBER_WARN_LIMITED("jsmap", "%s: source map refused (%s): %s", path,
                       ember_sourcemap_reason_name(err.reason), err.text);
    rc = 0;
  } else if (rc == 0) {
    m->st.maps++;
    s->bytes = ember_sourcemap_memory(s->map);
    m->st.bytes += s->bytes;
    m->st.held++;
  }
  goto done;
unsupported:
  m->st.unsupported++;
  EMBER_WARN_LIMITED("jsmap", "%s: source map URL %.*s not read (only files and base64 data)", path,
                     (int)(ulen > 120 ? 120 : ulen), url);
done:
  ember_free(line);
  ember_free(json);
  return rc;
}

/* Drop least recently used maps (none used in this epoch) while over the
 * bound; freed at the next forget. */
static int trim(ember__jsmaps_t *m) {
  while (m->st.bytes > m->max_bytes) {
    script_t *lru = NULL;
    for (size_t i = 0; i < m->nscripts; i++) {
      script_t *s = &m->scripts[i];
      if (s->map != NULL && s->used != m->epoch && (lru == NULL || s->used < lru->used)) lru = s;
    }
    if (lru == NULL) return 0;
    ember_sourcemap_t **g = ember__grow_array(m->grave, &m->capgrave, m->ngrave + 1, sizeof *g);
    if (g == NULL) return -ENOMEM;
    m->grave = g;
    m->grave[m->ngrave++] = lru->map;
    lru->map = NULL;
    lru->evicted = true;
    m->st.bytes -= lru->bytes;
    m->st.held--;
    m->st.evictions++;
    lru->bytes = 0;
  }
  return 0;
}

/* A slot for a new script: a new one, or under the count bound the one
 * found least recently of those no check found in this epoch (an edited
 * or removed script's; refs to it are checked again before use). *idx
 * NONE when every slot is in use now. */
static int new_script(ember__jsmaps_t *m, uint32_t *idx) {
  *idx = NONE;
  if (m->nscripts < EMBER__JSMAPS_MAX_SCRIPTS) {
    script_t *sv = ember__grow_array(m->scripts, &m->capscripts, m->nscripts + 1, sizeof *sv);
    if (sv == NULL) return -ENOMEM;
    m->scripts = sv;
    *idx = (uint32_t)m->nscripts++;
    return 0;
  }
  script_t *old = NULL;
  for (size_t i = 0; i < m->nscripts; i++) {
    script_t *s = &m->scripts[i];
    if (s->seen != m->epoch && (old == NULL || s->seen < old->seen)) old = s;
  }
  if (old == NULL) {
    m->st.capped++;
    return 0;
  }
  if (old->map != NULL) {
    ember_sourcemap_t **g = ember__grow_array(m->grave, &m->capgrave, m->ngrave + 1, sizeof *g);
    if (g == NULL) return -ENOMEM;
    m->grave = g;
    m->grave[m->ngrave++] = old->map;
    m->st.bytes -= old->bytes;
    m->st.held--;
  }
  ember_free(old->path); /* frames of this epoch name no script unseen in it */
  ember_free(old->base);
  *old = (script_t){.gen = old->gen + 1};
  *idx = (uint32_t)(old - m->scripts);
  return 0;
}

/* The view of `pid` in this epoch, opened if it is not held. */
static const view_t *view_of(ember__jsmaps_t *m, pid_t pid) {
  view_t *v = &m->views[(uint32_t)pid % VIEWS];
  if (v->epoch == m->epoch && v->pid == pid) return v;
  if (v->epoch != 0 && v->rootfd >= 0) close(v->rootfd);
  *v = (view_t){.rootfd = -1, .uid = -1, .pid = pid, .epoch = m->epoch};
  char tmp[PATH_MAX];
  struct stat pst;
  int n = snprintf(tmp, sizeof tmp, "%s/%d", m->proc_root, (int)pid);
  if (n < 0 || (size_t)n >= sizeof tmp) return v;
  if (stat(tmp, &pst) == 0) v->uid = (int64_t)pst.st_uid;
  n = snprintf(tmp, sizeof tmp, "%s/%d/root", m->proc_root, (int)pid);
  if (n < 0 || (size_t)n >= sizeof tmp) return v;
  /* The root link is the kernel's; below it, everything is the process's. */
  v->rootfd = open(tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
  return v;
}

/* Check `r` against the file it names: find or make its script, and
 * decode the script's map if it has none in memory. */
static int check(ember__jsmaps_t *m, ref_t *r) {
  r->epoch = m->epoch;
  uint32_t before = r->script;
  r->script = NONE;
  char path[PATH_MAX];
  if (!ember_jsname_script_path(r->name, r->len, path, sizeof path)) return 0;
  ember_jsname_path_lexical(path);
  const view_t v = *view_of(m, r->pid);
  struct stat st;
  if (v.rootfd < 0) {
    /* The process is gone (its last window closes after it exits): the
     * script it ran is what the last check found, if it found one, and
     * the slot still holds it unless reused (then the identity is gone). */
    if (before != NONE && m->scripts[before].gen == r->gen) {
      r->script = before;
      m->scripts[before].seen = m->epoch;
    }
    return 0;
  }
  int rc = 0, fd = view_open(&v, path, 0, &st);
  if (fd < 0) {
    if (refused_open(fd)) {
      m->st.unsafe++;
      EMBER_WARN_LIMITED("jsmap", "pid %d: script %s refused: %s", (int)r->pid, path,
                         ember_strerror(fd));
    }
    goto done;
  }
  int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  uint32_t idx = NONE;
  for (size_t i = 0; i < m->nscripts && idx == NONE; i++) {
    const script_t *s = &m->scripts[i];
    if (s->dev == (uint64_t)st.st_dev && s->ino == (uint64_t)st.st_ino &&
        s->size == (uint64_t)st.st_size && s->mtime_ns == mtime)
      idx = (uint32_t)i;
  }
  if (idx == NONE) {
    char *copy = ember_strdup(path);
    if (copy == NULL) {
      rc = -ENOMEM;
      goto done;
    }
    rc = new_script(m, &idx);
    if (rc != 0 || idx == NONE) {
      ember_free(copy);
      goto done;
    }
    m->scripts[idx] = (script_t){.dev = (uint64_t)st.st_dev,
                                 .ino = (uint64_t)st.st_ino,
                                 .size = (uint64_t)st.st_size,
                                 .mtime_ns = mtime,
                                 .path = copy,
                                 .evicted = true};
    m->st.scripts++;
  }
  script_t *s = &m->scripts[idx];
  s->seen = m->epoch;
  if (s->map == NULL && s->evicted) {
    s->evicted = false;
    s->used = m->epoch;
    rc = load_map(m, &v, path, fd, &st, s);
    if (rc == 0) rc = trim(m);
  }
  r->script = idx;
  r->gen = s->gen;
done:
  if (fd >= 0) close(fd);
  return rc;
}

int ember__jsmaps_frame(ember__jsmaps_t *m, pid_t pid, const char *name, ember__jsframe_t *out) {
  ember_jsname_t j;
  if (m == NULL || out == NULL || !ember_jsname_parse(name, &j)) return 0;
  ref_t *r = ref_get(m, pid, j.script, j.script_len);
  if (r == NULL) return m->nrefs >= EMBER__JSMAPS_MAX_REFS ? 0 : -ENOMEM;
  if (r->epoch != m->epoch) {
    int rc = check(m, r);
    if (rc != 0) return rc;
  }
  if (r->script == NONE) return 0;
  script_t *s = &m->scripts[r->script];
  if (s->map == NULL) return 0;
  s->used = m->epoch;
  ember_sourcemap_pos_t pos;
  if (!ember_sourcemap_function(s->map, j.line, j.column, j.function_len, &pos) ||
      pos.source == NULL) {
    m->st.unmapped++;
    return 0;
  }
  const char *file = pos.source;
  const char *fn = pos.name;
  if (fn == NULL)
    fn =
        j.function_len ? ember__strarena_dup(&m->names, j.function, j.function_len) : "(anonymous)";
  if (fn == NULL) return -ENOMEM;
  *out = (ember__jsframe_t){.function = fn,
                            .file = file,
                            .line = pos.line,
                            .script = s->path,
                            .generated = j.function + (j.function_len == 0)};
  m->st.mapped++;
  return 1;
}

void ember__jsmaps_forget(ember__jsmaps_t *m, pid_t pid) {
  if (m == NULL) return;
  m->epoch++;
  views_close(m);
  grave_flush(m);
  ember__strarena_free(&m->names);
  if (pid == 0) return;
  size_t k = 0;
  for (size_t i = 0; i < m->nrefs; i++) {
    if (m->refs[i].pid == pid) {
      ember_free(m->refs[i].name);
    } else {
      m->refs[k++] = m->refs[i];
    }
  }
  if (k == m->nrefs) return;
  m->nrefs = k;
  /* The index holds positions: build it again (a process exits rarely). */
  ember__htab_free(&m->reftab);
  ember__htab_init(&m->reftab);
  for (size_t i = 0; i < m->nrefs; i++)
    if (ember__htab_insert(&m->reftab, m->refs[i].hash, (uint32_t)i, ref_rehash, m) != 0) {
      /* Out of memory: forget every name; they are found again. */
      for (size_t x = 0; x < m->nrefs; x++) ember_free(m->refs[x].name);
      m->nrefs = 0;
      ember__htab_free(&m->reftab);
      ember__htab_init(&m->reftab);
      break;
    }
}

void ember__jsmaps_stats(const ember__jsmaps_t *m, ember__jsmaps_stats_t *out) {
  if (m == NULL || out == NULL) return;
  *out = m->st;
}

void ember__jsmaps_register_metrics(ember_metrics_t *m, ember__jsmaps_metrics_t *out) {
  *out = (ember__jsmaps_metrics_t){0};
  out->frames = ember_metrics_counter(m, "ember_agent_sourcemap_frames_total",
                                      "JavaScript frames named through their script's source map");
  out->decoded = ember_metrics_counter(m, "ember_agent_sourcemap_decoded_total",
                                       "Source maps read and decoded (again after an eviction)");
  out->evictions =
      ember_metrics_counter(m, "ember_agent_sourcemap_evictions_total",
                            "Decoded source maps dropped for the memory bound (sourcemap_memory)");
  out->bytes = ember_metrics_gauge(m, "ember_agent_sourcemap_bytes",
                                   "Memory of the decoded source maps held");
  static const char help[] = "Source maps not used, by reason (the map's frames keep their names)";
  static const char family[] = "ember_agent_sourcemap_refused_total";
  for (int r = 1; r < EMBER_SOURCEMAP_REASONS; r++)
    out->refused[r] = ember_metrics_counter_of(
        m, family, "reason", ember_sourcemap_reason_name((ember_sourcemap_reason_t)r), help);
  out->unsafe = ember_metrics_counter_of(m, family, "reason", "unsafe", help);
  out->unsupported = ember_metrics_counter_of(m, family, "reason", "unsupported", help);
}

void ember__jsmaps_update_metrics(const ember__jsmaps_metrics_t *mt,
                                  const ember__jsmaps_stats_t *st) {
  ember_metric_set(mt->frames, (double)st->mapped);
  ember_metric_set(mt->decoded, (double)st->maps);
  ember_metric_set(mt->evictions, (double)st->evictions);
  ember_metric_set(mt->bytes, (double)st->bytes);
  for (int r = 1; r < EMBER_SOURCEMAP_REASONS; r++)
    ember_metric_set(mt->refused[r], (double)st->refused[r]);
  ember_metric_set(mt->unsafe, (double)st->unsafe);
  ember_metric_set(mt->unsupported, (double)st->unsupported);
}
