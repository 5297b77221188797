/* Separate debug files and MiniDebugInfo; the contract is in debuginfo.h,
 * the search order and costs in docs/internals/debuginfo.md. */
#include "debuginfo.h"

#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <lzma.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ember/ember.h"
#include "safefile.h"

#define DEFAULT_MAX_FILE_SIZE (2ull << 30)
#define DEFAULT_MINIDEBUG_MAX ((size_t)64 << 20)
/* The xz decoder's memory: the dictionary of `xz -9` (64 MiB) and its
 * state fit; Fedora compresses MiniDebugInfo with the default preset,
 * which needs 9 MiB. */
#define MINIDEBUG_MEMLIMIT ((uint64_t)72 << 20)
/* A .gnu_debuglink is a file name (NAME_MAX at most), its NUL, up to three
 * bytes of padding and the CRC: anything longer is not one. */
#define LINK_MAX_SECTION (NAME_MAX + 1 + 3 + 4)
#define MAX_DEBUG_DIRS   16
#define CRC_CHUNK        (256u * 1024u)

struct ember__debuginfo {
  char *dirs[MAX_DEBUG_DIRS];
  size_t ndirs;
  uint64_t max_file_size;
  size_t minidebug_max;
  ember__debuginfo_stats_t stats;
};

static bool transient(int err) { return err == -EMFILE || err == -ENFILE || err == -ENOMEM; }

/* An absolute path whose components are never "." or "..": joined under a
 * debug directory or the process's root, it cannot climb out of it. */
static bool clean_abs_path(const char *p) {
  if (p == NULL || p[0] != '/') return false;
  for (const char *c = p; *c != '\0';) {
    while (*c == '/') c++;
    const char *e = c;
    while (*e != '\0' && *e != '/') e++;
    size_t n = (size_t)(e - c);
    if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) return false;
    c = e;
  }
  return true;
}

int ember__debuginfo_new(const ember__debuginfo_opts_t *opts, ember__debuginfo_t **out) {
  if (out == NULL) return -EINVAL;
  ember__debuginfo_opts_t o = {0};
  if (opts != NULL) o = *opts;
  const char *list = o.debug_dirs != NULL ? o.debug_dirs : EMBER__DEBUG_DIR_DEFAULT;
  ember__debuginfo_t *d = ember_calloc(1, sizeof *d);
  if (d == NULL) return -ENOMEM;
  d->max_file_size = o.max_file_size ? o.max_file_size : DEFAULT_MAX_FILE_SIZE;
  d->minidebug_max = o.minidebug_max ? o.minidebug_max : DEFAULT_MINIDEBUG_MAX;
  int rc = 0;
  for (const char *p = list; *p != '\0';) {
    const char *e = strchr(p, ':');
    size_t n = e != NULL ? (size_t)(e - p) : strlen(p);
    /* Trailing slashes would double in the joined paths. */
    while (n > 1 && p[n - 1] == '/') n--;
    if (n > 0) {
      char *dir = ember_strndup(p, n);
      if (dir == NULL) {
        rc = -ENOMEM;
        goto fail;
      }
      if (n >= PATH_MAX || !clean_abs_path(dir) || d->ndirs == MAX_DEBUG_DIRS) {
        ember_free(dir);
        rc = -EINVAL;
        goto fail;
      }
      d->dirs[d->ndirs++] = dir;
    }
    p += n;
    while (*p == '/') p++; /* the slashes trimmed above */
    if (*p == ':') p++;
  }
  *out = d;
  return 0;
fail:
  ember__debuginfo_free(d);
  return rc;
}

void ember__debuginfo_free(ember__debuginfo_t *d) {
  if (d == NULL) return;
  for (size_t i = 0; i < d->ndirs; i++) ember_free(d->dirs[i]);
  ember_free(d);
}

void ember__debuginfo_stats(const ember__debuginfo_t *d, ember__debuginfo_stats_t *out) {
  if (d == NULL || out == NULL) return;
  *out = d->stats;
}

void ember__debug_file_close(ember__debug_file_t *f) {
  if (f == NULL) return;
  if (f->elf != NULL) elf_end(f->elf);
  if (f->fd >= 0) close(f->fd);
  *f = EMBER__DEBUG_FILE_INIT;
}

static Elf_Scn *section_named(Elf *elf, const char *name) {
  size_t shstrndx;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return NULL;
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn != NULL; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == NULL) continue;
    const char *n = elf_strptr(elf, shstrndx, sh.sh_name);
    if (n != NULL && strcmp(n, name) == 0) return scn;
  }
  return NULL;
}

static bool has_section_type(Elf *elf, Elf64_Word type) {
  for (Elf_Scn *scn = elf_nextscn(elf, NULL); scn != NULL; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) != NULL && sh.sh_type == type) return true;
  }
  return false;
}

/* Does `elf`'s GNU build-id spell `hex`? */
static bool build_id_is(Elf *elf, const char *hex) {
  static const char digits[] = "0123456789abcdef";
  const void *id = NULL;
  ssize_t n = dwelf_elf_gnu_build_id(elf, &id);
  if (n <= 0 || id == NULL || strlen(hex) != (size_t)n * 2) return false;
  const unsigned char *b = id;
  for (ssize_t i = 0; i < n; i++) {
    if (hex[2 * i] != digits[b[i] >> 4] || hex[2 * i + 1] != digits[b[i] & 15]) return false;
  }
  return true;
}

static bool has_build_id(Elf *elf) {
  const void *id = NULL;
  return dwelf_elf_gnu_build_id(elf, &id) > 0;
}

/* Open one candidate: -ENOENT-like codes are quiet misses, the refusals of
 * safefile are counted, transient ones go up. On success the file is ELF
 * and *out owns it. */
static int open_candidate(ember__debuginfo_t *d, int dirfd, const char *path, bool follow,
                          bool root_safe, ember__debug_file_t *out) {
  ember__safe_opts_t o = {
      .follow = follow, .owner = EMBER__SAFE_ANY_OWNER, .max_size = d->max_file_size};
  struct stat st;
  int fd = ember__safe_openat(dirfd, path, &o, &st);
  if (fd < 0) {
    if (transient(fd)) return fd;
    if (fd == -ELOOP || fd == -ENODEV || fd == -EFBIG || fd == -EPERM) d->stats.unsafe++;
    return -ENOENT;
  }
  /* See ember__debug_file_t: only a file nobody but root can write is
   * mapped, and only when the process is not root itself. */
  bool map = root_safe && st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
  Elf *elf = elf_begin(fd, map ? ELF_C_READ_MMAP : ELF_C_READ, NULL);
  if (elf == NULL || elf_kind(elf) != ELF_K_ELF) {
    if (elf != NULL) elf_end(elf);
    close(fd);
    d->stats.not_elf++;
    return -ENOENT;
  }
  *out = (ember__debug_file_t){fd, elf, map, (uint64_t)st.st_size, EMBER__DEBUG_NONE};
  return 0;
}

static bool hex_id(const char *s) {
  size_t n = 0;
  for (; s[n] != '\0'; n++) {
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
  }
  return n >= 4 && n <= 128 && n % 2 == 0;
}

static int find_by_build_id(ember__debuginfo_t *d, const char *build_id, ember__debug_file_t *out) {
  if (build_id == NULL || !hex_id(build_id)) return -ENOENT;
  for (size_t i = 0; i < d->ndirs; i++) {
    char path[PATH_MAX];
    int pn = snprintf(path, sizeof path, "%s/.build-id/%.2s/%s.debug", d->dirs[i], build_id,
                      build_id + 2);
    if (pn < 0 || (size_t)pn >= sizeof path) continue;
    ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
    /* The host's debug directory: root's, links followed (Fedora's
     * .build-id entries are links), files mapped when root's. */
    int rc = open_candidate(d, AT_FDCWD, path, true, true, &f);
    if (transient(rc)) return rc;
    if (rc != 0) continue;
    if (!build_id_is(f.elf, build_id)) {
      d->stats.build_id_mismatch++;
      ember__debug_file_close(&f);
      continue;
    }
    f.source = EMBER__DEBUG_BUILD_ID;
    d->stats.by_build_id++;
    *out = f;
    return 0;
  }
  return -ENOENT;
}

int ember__debuginfo_link(ember__debuginfo_t *d, Elf *elf, const char **name, uint32_t *crc) {
  if (d == NULL || elf == NULL || name == NULL || crc == NULL) return -EINVAL;
  Elf_Scn *scn = section_named(elf, ".gnu_debuglink");
  if (scn == NULL) return -ENOENT;
  GElf_Shdr sh;
  Elf_Data *data = NULL;
  if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type == SHT_NOBITS || sh.sh_size > LINK_MAX_SECTION) {
    goto bad;
  }
  data = elf_rawdata(scn, NULL);
  if (data == NULL || data->d_buf == NULL) goto bad;
  const unsigned char *p = data->d_buf;
  size_t n = data->d_size;
  size_t len = strnlen((const char *)p, n);
  if (len == 0 || len == n || len > NAME_MAX) goto bad;
  /* The CRC follows the name's NUL, aligned to 4 bytes. */
  size_t off = (len + 1 + 3) & ~(size_t)3;
  if (off > n || n - off < 4) goto bad;
  const char *s = (const char *)p;
  /* A name, not a path: nothing may lead out of the directories searched. */
  if (memchr(s, '/', len) != NULL || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) goto bad;
  const char *ident = elf_getident(elf, NULL);
  bool big = ident != NULL && ident[EI_DATA] == ELFDATA2MSB;
  const unsigned char *c = p + off;
  uint32_t v = big ? (uint32_t)c[0] << 24 | (uint32_t)c[1] << 16 | (uint32_t)c[2] << 8 | c[3]
                   : (uint32_t)c[3] << 24 | (uint32_t)c[2] << 16 | (uint32_t)c[1] << 8 | c[0];
  *name = s;
  *crc = v;
  return 0;
bad:
  d->stats.bad_link++;
  return EMBER_ECORRUPT;
}

int ember__debuginfo_crc32(int fd, uint64_t size, uint32_t *out) {
  if (fd < 0 || out == NULL) return -EINVAL;
  unsigned char *buf = ember_malloc(CRC_CHUNK);
  if (buf == NULL) return -ENOMEM;
  int rc = 0;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (uint64_t off = 0; off < size;) {
    size_t want = size - off < CRC_CHUNK ? (size_t)(size - off) : CRC_CHUNK;
    ssize_t r = ember__safe_pread(fd, buf, want, off);
    if (r < 0) {
      rc = (int)r;
      goto cleanup;
    }
    if ((size_t)r < want) {
      rc = -EIO;
      goto cleanup;
    }
    crc = crc32(crc, buf, (uInt)want);
    off += want;
  }
  *out = (uint32_t)crc;
cleanup:
  ember_free(buf);
  return rc;
}

/* Check a debuglink candidate: its CRC32 must be the link's, and when both
 * files have build-ids they must be the same (a CRC can collide). Takes f;
 * returns 0 with f kept, or -ENOENT (or a transient code) with f closed. */
static int link_verify(ember__debuginfo_t *d, const ember__debug_target_t *t, uint32_t want,
                       ember__debug_file_t *f) {
  uint32_t got = 0;
  int rc = ember__debuginfo_crc32(f->fd, f->size, &got);
  if (rc != 0) {
    ember__debug_file_close(f);
    return transient(rc) ? rc : -ENOENT;
  }
  if (got != want) {
    d->stats.crc_mismatch++;
    ember__debug_file_close(f);
    return -ENOENT;
  }
  if (t->build_id != NULL && has_build_id(f->elf) && !build_id_is(f->elf, t->build_id)) {
    d->stats.build_id_mismatch++;
    ember__debug_file_close(f);
    return -ENOENT;
  }
  return 0;
}

static int find_by_link(ember__debuginfo_t *d, const ember__debug_target_t *t,
                        ember__debug_file_t *out) {
  const char *name = NULL;
  uint32_t crc = 0;
  if (t->elf == NULL || t->dir == NULL) return -ENOENT;
  if (ember__debuginfo_link(d, t->elf, &name, &crc) != 0) return -ENOENT;
  if (!clean_abs_path(t->dir) || strlen(t->dir) >= PATH_MAX) {
    d->stats.bad_link++;
    return -ENOENT;
  }
  /* The directory below the process's root: "usr/bin", or "" for "/". */
  const char *rel = t->dir;
  while (*rel == '/') rel++;
  size_t rlen = strlen(rel);
  while (rlen > 0 && rel[rlen - 1] == '/') rlen--;
  const char *sep = rlen > 0 ? "/" : "";
  const char *lead = t->root_fd == AT_FDCWD ? "/" : "";
  char path[PATH_MAX];
  /* gdb's order: beside the file, in .debug/ beside it, then under each
   * debug directory. */
  bool own_dirs = t->root_fd >= 0 || t->root_fd == AT_FDCWD;
  for (size_t i = own_dirs ? 0 : 2; i < 2 + d->ndirs; i++) {
    int pn;
    int dirfd = AT_FDCWD;
    bool follow = false, root_safe = t->root_safe;
    if (i == 0) {
      pn = snprintf(path, sizeof path, "%s%.*s%s%s", lead, (int)rlen, rel, sep, name);
      dirfd = t->root_fd;
    } else if (i == 1) {
      pn = snprintf(path, sizeof path, "%s%.*s%s.debug/%s", lead, (int)rlen, rel, sep, name);
      dirfd = t->root_fd;
    } else {
      pn = snprintf(path, sizeof path, "%s/%.*s%s%s", d->dirs[i - 2], (int)rlen, rel, sep, name);
      follow = true;
      root_safe = true;
    }
    if (pn < 0 || (size_t)pn >= sizeof path) continue;
    ember__debug_file_t f = EMBER__DEBUG_FILE_INIT;
    int rc = open_candidate(d, dirfd, path, follow, root_safe, &f);
    if (transient(rc)) return rc;
    if (rc != 0) continue;
    rc = link_verify(d, t, crc, &f);
    if (transient(rc)) return rc;
    if (rc != 0) continue;
    f.source = EMBER__DEBUG_LINK;
    d->stats.by_link++;
    *out = f;
    return 0;
  }
  return -ENOENT;
}

int ember__debuginfo_find(ember__debuginfo_t *d, const ember__debug_target_t *t,
                          ember__debug_file_t *out) {
  if (d == NULL || t == NULL || out == NULL) return -EINVAL;
  int rc = find_by_build_id(d, t->build_id, out);
  if (rc != -ENOENT) return rc;
  return find_by_link(d, t, out);
}

/* ------------------------------------------------------------------ */
/* MiniDebugInfo                                                        */

/* liblzma allocates through Ember's wrapper, so allocation-failure tests
 * reach the decoder too. */
static void *lz_alloc(void *opaque, size_t nmemb, size_t size) {
  (void)opaque;
  if (size != 0 && nmemb > SIZE_MAX / size) return NULL;
  return ember_malloc(nmemb * size);
}

static void lz_free(void *opaque, void *ptr) {
  (void)opaque;
  ember_free(ptr);
}

/* Decompress one xz stream of in[0..n) into a new buffer of at most `max`
 * bytes. Returns 0, EMBER_ECORRUPT, -EFBIG or -ENOMEM. */
static int xz_decode(const uint8_t *in, size_t n, size_t max, char **out, size_t *out_len) {
  const lzma_allocator al = {lz_alloc, lz_free, NULL};
  lzma_stream strm = LZMA_STREAM_INIT;
  strm.allocator = &al;
  int rc = 0;
  char *buf = NULL;
  size_t cap = 0;
  lzma_ret r = lzma_stream_decoder(&strm, MINIDEBUG_MEMLIMIT, 0);
  if (r != LZMA_OK) return r == LZMA_MEM_ERROR ? -ENOMEM : EMBER_ECORRUPT;
  strm.next_in = in;
  strm.avail_in = n;
  /* One byte over the bound: output that fills it is too big. */
  size_t limit = max + 1;
  for (;;) {
    if (strm.avail_out == 0) {
      if (cap >= limit) {
        rc = -EFBIG;
        goto cleanup;
      }
      size_t nc = cap == 0 ? (n < limit / 4 ? 4 * n + 4096 : limit) : cap * 2;
      if (nc > limit || nc < cap) nc = limit;
      char *nb = ember_realloc(buf, nc);
      if (nb == NULL) {
        rc = -ENOMEM;
        goto cleanup;
      }
      buf = nb;
      strm.next_out = (uint8_t *)buf + strm.total_out;
      strm.avail_out = nc - (size_t)strm.total_out;
      cap = nc;
    }
    r = lzma_code(&strm, LZMA_FINISH);
    if (r == LZMA_STREAM_END) break;
    if (r == LZMA_OK) continue;
    rc = r == LZMA_MEM_ERROR ? -ENOMEM : r == LZMA_MEMLIMIT_ERROR ? -EFBIG : EMBER_ECORRUPT;
    goto cleanup;
  }
  size_t len = (size_t)strm.total_out;
  if (len > max) {
    rc = -EFBIG;
    goto cleanup;
  }
  if (len == 0) {
    rc = EMBER_ECORRUPT;
    goto cleanup;
  }
  /* Give back the doubling's slack: the image lives as long as its module. */
  char *fit = ember_realloc(buf, len);
  if (fit != NULL) buf = fit;
  *out = buf;
  *out_len = len;
  buf = NULL;
cleanup:
  lzma_end(&strm);
  ember_free(buf);
  return rc;
}

void ember__minidebug_free(ember__minidebug_t *m) {
  if (m == NULL) return;
  if (m->elf != NULL) elf_end(m->elf);
  ember_free(m->image);
  *m = (ember__minidebug_t){NULL, NULL, 0};
}

int ember__debuginfo_minidebug(ember__debuginfo_t *d, Elf *elf, ember__minidebug_t *out) {
  if (d == NULL || elf == NULL || out == NULL) return -EINVAL;
  Elf_Scn *scn = section_named(elf, ".gnu_debugdata");
  if (scn == NULL) return -ENOENT;
  int rc = 0;
  char *image = NULL;
  size_t size = 0;
  Elf *mini = NULL;
  GElf_Shdr sh;
  if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type == SHT_NOBITS) {
    rc = EMBER_ECORRUPT;
    goto cleanup;
  }
  /* Checked before libelf reads the section into memory: the compressed
   * form is never larger than the bound on what it expands to. */
  if (sh.sh_size > d->minidebug_max) {
    rc = -EFBIG;
    goto cleanup;
  }
  Elf_Data *data = elf_rawdata(scn, NULL);
  if (data == NULL || data->d_buf == NULL || data->d_size == 0) {
    rc = EMBER_ECORRUPT;
    goto cleanup;
  }
  rc = xz_decode(data->d_buf, data->d_size, d->minidebug_max, &image, &size);
  if (rc != 0) goto cleanup;
  mini = elf_memory(image, size);
  if (mini == NULL || elf_kind(mini) != ELF_K_ELF || !has_section_type(mini, SHT_SYMTAB)) {
    rc = EMBER_ECORRUPT;
    goto cleanup;
  }
  *out = (ember__minidebug_t){mini, image, size};
  mini = NULL;
  image = NULL;
  d->stats.minidebug++;
cleanup:
  if (rc == EMBER_ECORRUPT) d->stats.minidebug_bad++;
  if (rc == -EFBIG) d->stats.minidebug_too_big++;
  if (mini != NULL) elf_end(mini);
  ember_free(image);
  return rc;
}
