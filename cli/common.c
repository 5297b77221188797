/* What the API client commands share (see common.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <zlib.h>

#include "ember/buf.h"
#include "ember/export.h"
#include "cli.h"
#include "common.h"

/* Returns 0, EXIT_USAGE after a message, or -1 for --help. */
int ember__parse_flags(const char *cmd, unsigned bit, const ember__flag_t *flags, size_t nflags,
                       int argc, char **argv, void *opts) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return -1;
    const ember__flag_t *f = NULL;
    const char *inline_value = NULL;
    for (size_t k = 0; k < nflags && f == NULL; k++) {
      size_t n = strlen(flags[k].name);
      if (strcmp(a, flags[k].name) == 0 || (flags[k].alias && strcmp(a, flags[k].alias) == 0)) {
        f = &flags[k];
      } else if (strncmp(a, flags[k].name, n) == 0 && a[n] == '=') {
        f = &flags[k];
        inline_value = a + n + 1;
      }
    }
    if (f == NULL) {
      if (a[0] == '-')
        fprintf(stderr, "ember %s: unknown option '%s' (see `ember help`)\n", cmd, a);
      else
        fprintf(stderr, "ember %s: unexpected argument '%s' (options take the form --name VALUE)\n",
                cmd, a);
      return EXIT_USAGE;
    }
    if ((f->cmds & bit) == 0) {
      fprintf(stderr, "ember %s: %s is not an option of this command (see `ember help`)\n", cmd,
              f->name);
      return EXIT_USAGE;
    }
    /* The caller's table gives the offsets of const char * fields. */
    const char **slot = (const char **)(void *)((char *)opts + f->off);
    if (*slot != NULL) {
      fprintf(stderr, "ember %s: %s given twice\n", cmd, f->name);
      return EXIT_USAGE;
    }
    if (f->is_bool) {
      if (inline_value != NULL) {
        fprintf(stderr, "ember %s: %s takes no value\n", cmd, f->name);
        return EXIT_USAGE;
      }
      *slot = "1";
    } else if (inline_value != NULL) {
      *slot = inline_value;
    } else if (i + 1 < argc) {
      *slot = argv[++i];
    } else {
      fprintf(stderr, "ember %s: %s needs a value\n", cmd, f->name);
      return EXIT_USAGE;
    }
  }
  return 0;
}

const char *ember__env_or(const char *flag, const char *env, const char *def) {
  if (flag != NULL) return flag;
  const char *v = getenv(env);
  return v != NULL && v[0] != '\0' ? v : def;
}

int ember__open_client(const char *cmd, const char *server, const char *token,
                       ember__client_t **out) {
  char err[1024] = "";
  server = ember__env_or(server, "EMBER_SERVER", EMBER_DEFAULT_SERVER);
  token = ember__env_or(token, "EMBER_TOKEN", NULL);
  int rc = ember__client_new(server, token, out, err, sizeof err);
  if (rc == 0) return 0;
  fprintf(stderr, "ember %s: %s\n", cmd, err);
  return rc == EMBER_ECONFIG ? EXIT_USAGE : EXIT_FAILED;
}

int ember__malformed(const char *cmd, const char *path, const char *why) {
  fprintf(stderr,
          "ember %s: the server's answer to %s is not what this ember expects (%s); is "
          "--server an Ember server of the same version?\n",
          cmd, path, why);
  return EXIT_FAILED;
}

static const char *const formats[] = {"top", "pprof", "folded", "speedscope", "tree"};

int ember__pick_format(const char *cmd, const char *format_flag, const char *out_flag,
                       const char **format, bool *to_stdout) {
  const char *f = format_flag;
  bool std = out_flag == NULL || strcmp(out_flag, "-") == 0;
  if (f == NULL && !std) {
    ember_format_t ef;
    if (ember_format_parse(out_flag, &ef) != 0) {
      fprintf(stderr,
              "ember %s: cannot tell the format from the name '%s'; add --format "
              "pprof|folded|speedscope|tree|top\n",
              cmd, out_flag);
      return EXIT_USAGE;
    }
    f = ember_format_name(ef);
  }
  if (f == NULL) f = "top";
  bool known = false;
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
    known |= strcmp(f, formats[i]) == 0;
  if (!known) {
    fprintf(stderr, "ember %s: --format '%s': expected top, pprof, folded, speedscope or tree\n",
            cmd, f);
    return EXIT_USAGE;
  }
  if (strcmp(f, "pprof") == 0 && std && isatty(STDOUT_FILENO)) {
    fprintf(stderr,
            "ember %s: pprof is binary (gzip); write it with -o FILE.pb.gz, or pipe "
            "stdout into a file or `go tool pprof`\n",
            cmd);
    return EXIT_USAGE;
  }
  *format = f;
  *to_stdout = std;
  return 0;
}

/* ---- text tables ---- */

/* Untrusted text (labels, function names) goes to the terminal without
 * control characters, so nothing in a profile can drive the terminal. */
int ember__table_add(ember__table_t *t, const char *s) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    char **nc = ember_realloc(t->cells, cap * sizeof *nc);
    if (nc == NULL) return -ENOMEM;
    t->cells = nc;
    t->cap = cap;
  }
  char *c = ember_strdup(s);
  if (c == NULL) return -ENOMEM;
  for (char *p = c; *p; p++) {
    unsigned char ch = (unsigned char)*p;
    if (ch < 0x20 || ch == 0x7f) *p = '?';
  }
  t->cells[t->n++] = c;
  return 0;
}

void ember__table_free(ember__table_t *t) {
  for (size_t i = 0; i < t->n; i++) ember_free(t->cells[i]);
  ember_free(t->cells);
}

/* Display width in code points: close enough for names in UTF-8. */
static size_t width(const char *s) {
  size_t w = 0;
  for (; *s; s++) w += ((unsigned char)*s & 0xC0) != 0x80;
  return w;
}

int ember__table_render(const ember__table_t *t, ember_buf_t *out) {
  size_t w[8] = {0};
  if (t->ncols == 0 || t->ncols > sizeof w / sizeof w[0]) return -EINVAL;
  for (size_t i = 0; i < t->n; i++) {
    size_t cw = width(t->cells[i]);
    if (cw > w[i % t->ncols]) w[i % t->ncols] = cw;
  }
  int rc = 0;
  for (size_t i = 0; i < t->n && rc == 0; i++) {
    size_t col = i % t->ncols;
    bool last = col + 1 == t->ncols;
    size_t pad = w[col] - width(t->cells[i]);
    if (t->right[col]) rc = ember_buf_printf(out, "%*s", (int)pad, "");
    if (rc == 0) rc = ember_buf_puts(out, t->cells[i]);
    if (rc == 0 && !t->right[col] && !last) rc = ember_buf_printf(out, "%*s", (int)pad, "");
    if (rc == 0) rc = ember_buf_puts(out, last ? "\n" : "  ");
  }
  return rc;
}

int ember__list_command(const char *cmd, const char *server, const char *token, const char *path,
                        const char *query, const char *key, bool json, ember__list_table_fn table,
                        const void *ctx, const char *empty) {
  ember_buf_t body, out;
  ember_buf_init(&body, EMBER__MAX_JSON_BODY);
  ember_buf_init(&out, EMBER__MAX_JSON_BODY);
  ember__client_t *c = NULL;
  json_t *doc = NULL;
  const json_t *list = NULL;
  int st = ember__open_client(cmd, server, token, &c);
  if (st == 0) st = ember__get_list(cmd, c, path, query, key, &body, &doc, &list);
  if (st == 0 && json) {
    st = ember__print_out(&body);
  } else if (st == 0 && json_array_size(list) > 0) {
    int rc = table(list, ctx, &out);
    st = rc == 0 ? ember__print_out(&out) : EXIT_FAILED;
    if (rc != 0) fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
  }
  if (st == 0 && json_array_size(list) == 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, empty);
    st = EXIT_EMPTY;
  }
  json_decref(doc);
  ember__client_free(c);
  ember_buf_free(&body);
  ember_buf_free(&out);
  return st;
}

int ember__read_input(const char *path, ember_buf_t *b, bool *opened) {
  bool std = path == NULL || strcmp(path, "-") == 0;
  int fd = std ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  if (opened != NULL) *opened = fd >= 0;
  if (fd < 0) return -errno;
  int rc = 0;
  char chunk[65536];
  for (;;) {
    ssize_t k = read(fd, chunk, sizeof chunk);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      rc = -errno;
      break;
    }
    if (k == 0) break;
    if ((rc = ember_buf_append(b, chunk, (size_t)k)) != 0) break;
  }
  if (!std) close(fd);
  return rc;
}

int ember__print_out(const ember_buf_t *b) {
  if (b->len > 0 && fwrite(b->data, 1, b->len, stdout) != b->len) return EXIT_FAILED;
  return fflush(stdout) == 0 ? 0 : EXIT_FAILED;
}

void ember__fmt_value(int64_t v, const char *unit, char *buf, size_t size) {
  double d = (double)v;
  if (unit != NULL && strcmp(unit, "nanoseconds") == 0) {
    if (v >= 1000000000)
      snprintf(buf, size, "%.2fs", d / 1e9);
    else if (v >= 1000000)
      snprintf(buf, size, "%.2fms", d / 1e6);
    else if (v >= 1000)
      snprintf(buf, size, "%.2fus", d / 1e3);
    else
      snprintf(buf, size, "%" PRId64 "ns", v);
  } else if (unit != NULL && strcmp(unit, "bytes") == 0) {
    if (v >= (int64_t)1 << 30)
      snprintf(buf, size, "%.2fGiB", d / (double)(1 << 30));
    else if (v >= 1 << 20)
      snprintf(buf, size, "%.2fMiB", d / (double)(1 << 20));
    else if (v >= 1 << 10)
      snprintf(buf, size, "%.2fKiB", d / (double)(1 << 10));
    else
      snprintf(buf, size, "%" PRId64 "B", v);
  } else {
    snprintf(buf, size, "%" PRId64, v);
  }
}

int64_t ember__json_i64(const json_t *v) {
  if (json_is_integer(v)) return (int64_t)json_integer_value(v);
  return json_is_real(v) ? (int64_t)json_real_value(v) : 0;
}

int ember__render_top(const char *cmd, const char *path, const ember_buf_t *body,
                      const char *context, ember_buf_t *out, bool *empty) {
  json_t *doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  const json_t *fns = json_object_get(doc, "functions");
  const json_t *total_j = json_object_get(doc, "total");
  int st = 0;
  static const bool right[5] = {true, true, true, true, false};
  ember__table_t t = {.ncols = 5, .right = right};
  if (!json_is_array(fns) || !json_is_number(total_j)) {
    st = ember__malformed(cmd, path, "format=top without \"functions\" and \"total\"");
    goto cleanup;
  }
  int64_t total = ember__json_i64(total_j);
  *empty = total == 0 || json_array_size(fns) == 0;
  if (*empty) goto cleanup;
  const char *unit = json_string_value(json_object_get(doc, "unit"));
  const char *type = json_string_value(json_object_get(doc, "type"));
  char tot[32];
  ember__fmt_value(total, unit, tot, sizeof tot);
  int rc = ember_buf_printf(out, "%s (%s), total %s, %s\n\n", type ? type : "?", unit ? unit : "",
                            tot, context);
  const char *hdr[] = {"self", "self%", "total", "total%", "function"};
  for (size_t i = 0; i < 5 && rc == 0; i++) rc = ember__table_add(&t, hdr[i]);
  for (size_t i = 0; i < json_array_size(fns) && rc == 0; i++) {
    const json_t *f = json_array_get(fns, i);
    const char *name = json_string_value(json_object_get(f, "name"));
    int64_t self = ember__json_i64(json_object_get(f, "self"));
    int64_t tv = ember__json_i64(json_object_get(f, "total"));
    char a[32], b[16], c[32], d[16];
    ember__fmt_value(self, unit, a, sizeof a);
    snprintf(b, sizeof b, "%.1f%%", 100.0 * (double)self / (double)total);
    ember__fmt_value(tv, unit, c, sizeof c);
    snprintf(d, sizeof d, "%.1f%%", 100.0 * (double)tv / (double)total);
    rc = ember__table_add(&t, a);
    if (rc == 0) rc = ember__table_add(&t, b);
    if (rc == 0) rc = ember__table_add(&t, c);
    if (rc == 0) rc = ember__table_add(&t, d);
    if (rc == 0) rc = ember__table_add(&t, name ? name : "?");
  }
  if (rc == 0) rc = ember__table_render(&t, out);
  if (rc != 0) {
    fprintf(stderr, "ember %s: %s\n", cmd, ember_strerror(rc));
    st = EXIT_FAILED;
  }
cleanup:
  ember__table_free(&t);
  json_decref(doc);
  return st;
}

/* Does a gzip'd pprof Profile hold a sample (field 2 of the message)?
 * 1 yes, 0 no, -1 cannot tell (then the caller assumes yes). */
static int pprof_has_samples(const ember_buf_t *body) {
  if (body->len == 0) return 0;
  ember_buf_t raw;
  ember_buf_init(&raw, (size_t)256 << 20);
  z_stream zs = {0};
  int result = -1;
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return -1;
  zs.next_in = (Bytef *)(uintptr_t)body->data;
  zs.avail_in = (uInt)body->len;
  for (;;) {
    char *at = NULL;
    int rc = ember_buf_extend(&raw, 65536, &at);
    if (rc == EMBER_ETOOBIG) result = 1; /* that much can only be samples */
    if (rc != 0) goto cleanup;
    zs.next_out = (Bytef *)at;
    zs.avail_out = 65536;
    int z = inflate(&zs, Z_NO_FLUSH);
    raw.len -= zs.avail_out;
    if (z == Z_STREAM_END) break;
    if (z != Z_OK) goto cleanup;
  }
  const unsigned char *p = (const unsigned char *)raw.data, *end = p + raw.len;
  result = 0;
  while (p < end) {
    uint64_t v[2] = {0, 0};
    size_t nv = 0;
    /* Key, then (for wire types 0 and 2) a second varint. */
    for (size_t k = 0; k < 2; k++) {
      unsigned shift = 0;
      while (p < end && shift < 64) {
        unsigned char byte = *p++;
        v[k] |= (uint64_t)(byte & 0x7f) << shift;
        shift += 7;
        if ((byte & 0x80) == 0) break;
      }
      nv++;
      if (k == 0 && (v[0] >> 3) == 2) {
        result = 1;
        goto cleanup;
      }
      unsigned wt = (unsigned)(v[0] & 7);
      if (k == 0 && wt != 0 && wt != 2) {
        size_t skip = wt == 1 ? 8 : wt == 5 ? 4 : SIZE_MAX;
        if (skip > (size_t)(end - p)) {
          result = -1;
          goto cleanup;
        }
        p += skip;
        break;
      }
    }
    if (nv == 2 && (v[0] & 7) == 2) {
      if (v[1] > (uint64_t)(end - p)) {
        result = -1;
        goto cleanup;
      }
      p += v[1];
    }
  }
cleanup:
  inflateEnd(&zs);
  ember_buf_free(&raw);
  return result;
}

bool ember__profile_empty(const char *format, const ember_buf_t *body) {
  if (strcmp(format, "pprof") == 0) return pprof_has_samples(body) == 0;
  if (strcmp(format, "folded") == 0) {
    for (size_t i = 0; i < body->len; i++) {
      if (body->data[i] != '\n' && body->data[i] != ' ' && body->data[i] != '\r') return false;
    }
    return true;
  }
  json_t *doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  bool empty = false;
  if (strcmp(format, "tree") == 0) {
    const json_t *total = json_object_get(doc, "total");
    empty = json_is_number(total) && json_number_value(total) == 0.0;
  } else if (strcmp(format, "speedscope") == 0) {
    const json_t *profs = json_object_get(doc, "profiles");
    empty = json_is_array(profs);
    for (size_t i = 0; empty && i < json_array_size(profs); i++)
      empty = json_array_size(json_object_get(json_array_get(profs, i), "samples")) == 0;
  }
  json_decref(doc);
  return empty;
}

/* Write to `path` through a temporary file in the same directory and a
 * rename, so a reader (or an interrupted run) never sees half a profile. */
static int write_atomic(const char *path, const char *data, size_t len) {
  ember_buf_t tmp;
  ember_buf_init(&tmp, 8192);
  int fd = -1, rc = ember_buf_printf(&tmp, "%s.tmp.XXXXXX", path);
  if (rc != 0) goto cleanup;
  fd = mkostemp(tmp.data, O_CLOEXEC);
  if (fd < 0) {
    rc = -errno;
    goto cleanup;
  }
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      goto cleanup;
    }
    data += n;
    len -= (size_t)n;
  }
  /* mkostemp makes the file 0600; give it the mode a plain create would. */
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd, 0666 & ~mask) != 0 || fsync(fd) != 0) {
    rc = -errno;
    goto cleanup;
  }
  rc = close(fd) == 0 ? 0 : -errno;
  fd = -1;
  if (rc == 0 && rename(tmp.data, path) != 0) rc = -errno;
cleanup:
  if (fd >= 0) close(fd);
  if (rc != 0 && tmp.data != NULL) unlink(tmp.data);
  ember_buf_free(&tmp);
  return rc;
}

int ember__write_result(const char *cmd, const ember_buf_t *result, const char *out,
                        bool to_stdout) {
  if (to_stdout) {
    if (ember__print_out(result) != 0) {
      fprintf(stderr, "ember %s: cannot write to stdout: %s\n", cmd, strerror(errno));
      return EXIT_FAILED;
    }
    return 0;
  }
  int rc = write_atomic(out, result->data ? result->data : "", result->len);
  if (rc != 0) {
    fprintf(stderr, "ember %s: cannot write %s: %s\n", cmd, out, ember_strerror(rc));
    return EXIT_FAILED;
  }
  fprintf(stderr, "wrote %zu bytes to %s\n", result->len, out);
  return 0;
}

int ember__parse_flags_pos(const char *cmd, unsigned bit, const ember__flag_t *flags, size_t nflags,
                           int argc, char **argv, void *opts, const char *what, const char **pos) {
  *pos = NULL;
  char **rest = ember_calloc((size_t)argc + 1, sizeof *rest);
  if (rest == NULL) {
    fprintf(stderr, "ember %s: out of memory\n", cmd);
    return EXIT_FAILED;
  }
  int n = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || a[1] == '\0') {
      if (*pos != NULL) {
        fprintf(stderr, "ember %s: unexpected argument '%s' (one %s only)\n", cmd, a, what);
        ember_free(rest);
        return EXIT_USAGE;
      }
      *pos = a;
      continue;
    }
    rest[n++] = argv[i];
    /* A flag that takes a value as the next argument keeps it. */
    for (size_t k = 0; k < nflags; k++) {
      bool named =
          strcmp(a, flags[k].name) == 0 || (flags[k].alias && strcmp(a, flags[k].alias) == 0);
      if (named && !flags[k].is_bool && i + 1 < argc) {
        rest[n++] = argv[++i];
        break;
      }
    }
  }
  int st = ember__parse_flags(cmd, bit, flags, nflags, n, rest, opts);
  ember_free(rest);
  if (st == 0 && *pos == NULL) {
    fprintf(stderr, "ember %s: which %s? (see `ember help`)\n", cmd, what);
    return EXIT_USAGE;
  }
  return st;
}

bool ember__name_ok(const char *s, size_t max) {
  size_t n = 0;
  for (; s[n] != '\0'; n++) {
    char ch = s[n];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.';
    if (!ok) return false;
  }
  /* "." and ".." would be dot segments of the URL path. */
  return n > 0 && n <= max && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

void ember__fmt_local_ms(int64_t ms, char *buf, size_t size) {
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  if (localtime_r(&t, &tm) == NULL || strftime(buf, size, "%Y-%m-%d %H:%M:%S", &tm) == 0)
    snprintf(buf, size, "%" PRId64, ms / 1000);
}

void ember__fmt_ago(int64_t now_ms, int64_t ms, char *buf, size_t size) {
  int64_t s = (now_ms - ms) / 1000;
  if (s < 0) s = 0;
  if (s < 120)
    snprintf(buf, size, "%" PRId64 "s ago", s);
  else if (s < 7200)
    snprintf(buf, size, "%" PRId64 "m ago", s / 60);
  else if (s < 172800)
    snprintf(buf, size, "%" PRId64 "h ago", s / 3600);
  else
    snprintf(buf, size, "%" PRId64 "d ago", s / 86400);
}

int ember__request(const char *cmd, ember__client_t *c, const char *method, const char *path,
                   const char *query, const char *json, ember_buf_t *body, long *status) {
  char err[1024] = "";
  int rc;
  if (strcmp(method, "POST") == 0)
    rc = ember__client_post(c, path, json, EMBER__MAX_JSON_BODY, status, body, err, sizeof err);
  else if (strcmp(method, "DELETE") == 0)
    rc = ember__client_delete(c, path, query, EMBER__MAX_JSON_BODY, status, body, err, sizeof err);
  else
    rc = ember__client_get(c, path, query, EMBER__MAX_JSON_BODY, status, body, err, sizeof err);
  if (rc == 0) return 0;
  fprintf(stderr, "ember %s: %s\n", cmd, err[0] ? err : ember_strerror(rc));
  return EXIT_FAILED;
}

int ember__status_exit(const char *cmd, ember__client_t *c, const char *path, long status,
                       const ember_buf_t *body) {
  char err[1024] = "";
  int st = ember__client_status_exit(c, path, status, body, err, sizeof err);
  if (st != 0) fprintf(stderr, "ember %s: %s\n", cmd, err);
  return st;
}

int ember__get_list(const char *cmd, ember__client_t *c, const char *path, const char *query,
                    const char *key, ember_buf_t *body, json_t **doc, const json_t **list) {
  long status = 0;
  *doc = NULL;
  *list = NULL;
  int st = ember__request(cmd, c, "GET", path, query, NULL, body, &status);
  if (st == 0) st = ember__status_exit(cmd, c, path, status, body);
  if (st != 0) return st;
  *doc = json_loadb(body->data ? body->data : "", body->len, 0, NULL);
  *list = json_object_get(*doc, key);
  if (!json_is_array(*list)) {
    char why[64];
    snprintf(why, sizeof why, "no \"%s\" list", key);
    return ember__malformed(cmd, path, why);
  }
  return 0;
}

bool ember__no_such_path(const ember_buf_t *body) {
  char msg[64];
  ember__client_message(body, msg, sizeof msg);
  return strncmp(msg, "no such path", 12) == 0;
}
