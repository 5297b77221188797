#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ember/buf.h"
#include "ember/config.h"
#include "ember/log.h"
#include "ember/parse.h"

typedef struct config_entry {
  char *key;
  char *value;
  char *origin; /* "file line N" or "flag"; for messages */
} config_entry_t;

struct ember_config {
  config_entry_t *entries;
  size_t n;
  size_t cap;
};

int ember_config_new(ember_config_t **out) {
  if (out == NULL) return -EINVAL;
  ember_config_t *cfg = ember_calloc(1, sizeof *cfg);
  if (cfg == NULL) return -ENOMEM;
  *out = cfg;
  return 0;
}

void ember_config_free(ember_config_t *cfg) {
  if (cfg == NULL) return;
  for (size_t i = 0; i < cfg->n; i++) {
    ember_free(cfg->entries[i].key);
    ember_free(cfg->entries[i].value);
    ember_free(cfg->entries[i].origin);
  }
  ember_free(cfg->entries);
  ember_free(cfg);
}

static bool key_valid(const char *k, size_t n) {
  if (n == 0 || n > 128) return false;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)k[i];
    if (!isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

static config_entry_t *config_find(const ember_config_t *cfg, const char *key) {
  for (size_t i = 0; i < cfg->n; i++) {
    if (strcmp(cfg->entries[i].key, key) == 0) return &cfg->entries[i];
  }
  return NULL;
}

static int config_set(ember_config_t *cfg, const char *key, size_t klen, const char *value,
                      size_t vlen, const char *origin) {
  if (!key_valid(key, klen)) return -EINVAL;
  char *k = ember_strndup(key, klen);
  char *v = ember_strndup(value, vlen);
  char *o = ember_strdup(origin);
  int rc = -ENOMEM;
  if (k == NULL || v == NULL || o == NULL) goto cleanup;
  config_entry_t *e = config_find(cfg, k);
  if (e != NULL) {
    ember_free(e->value);
    ember_free(e->origin);
    e->value = v;
    e->origin = o;
    v = o = NULL;
    rc = 0;
    goto cleanup;
  }
  if (cfg->n == cfg->cap) {
    size_t cap = cfg->cap ? cfg->cap * 2 : 16;
    config_entry_t *ne = ember_realloc(cfg->entries, cap * sizeof *ne);
    if (ne == NULL) goto cleanup;
    cfg->entries = ne;
    cfg->cap = cap;
  }
  cfg->entries[cfg->n++] = (config_entry_t){k, v, o};
  k = v = o = NULL;
  rc = 0;
cleanup:
  ember_free(k);
  ember_free(v);
  ember_free(o);
  return rc;
}

int ember_config_set(ember_config_t *cfg, const char *key, const char *value) {
  if (cfg == NULL || key == NULL || value == NULL) return -EINVAL;
  return config_set(cfg, key, strlen(key), value, strlen(value), "flag");
}

int ember_config_set_arg(ember_config_t *cfg, const char *arg, char *errbuf, size_t errbuf_size) {
  if (cfg == NULL || arg == NULL) return -EINVAL;
  const char *eq = strchr(arg, '=');
  if (eq == NULL || eq == arg) {
    snprintf(errbuf, errbuf_size, "expected key=value, got '%s'", arg);
    return EMBER_ECONFIG;
  }
  int rc = config_set(cfg, arg, (size_t)(eq - arg), eq + 1, strlen(eq + 1), "flag");
  if (rc == -EINVAL) {
    snprintf(errbuf, errbuf_size, "invalid key in '%s'", arg);
    return EMBER_ECONFIG;
  }
  return rc;
}

int ember_config_apply_args(ember_config_t *cfg, int argc, char *const *argv, char *errbuf,
                            size_t errbuf_size) {
  if (cfg == NULL || argc < 0 || (argc > 0 && argv == NULL)) return -EINVAL;
  static const char opt[] = "--config";
  if (errbuf_size > 0) errbuf[0] = '\0';
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int rc;
    if (strcmp(a, opt) == 0) {
      if (i + 1 == argc) {
        snprintf(errbuf, errbuf_size, "--config needs a FILE");
        return EMBER_ECONFIG;
      }
      rc = ember_config_load(cfg, argv[++i], errbuf, errbuf_size);
    } else if (strncmp(a, opt, sizeof opt - 1) == 0 && a[sizeof opt - 1] == '=') {
      rc = ember_config_load(cfg, a + sizeof opt, errbuf, errbuf_size);
    } else if (a[0] != '-' && strchr(a, '=') != NULL) {
      rc = ember_config_set_arg(cfg, a, errbuf, errbuf_size);
    } else {
      snprintf(errbuf, errbuf_size, "unknown argument '%s' (expected --config FILE or key=value)",
               a);
      return i;
    }
    if (rc != 0) {
      /* Loading and setting leave errbuf empty only when out of memory. */
      if (errbuf_size > 0 && errbuf[0] == '\0')
        snprintf(errbuf, errbuf_size, "%s", ember_strerror(rc));
      return rc;
    }
  }
  return argc;
}

int ember_config_daemon_args(const char *prog, const char *usage, int argc, char *const *argv,
                             const char *const *known, ember_config_t **out) {
  *out = NULL;
  ember_config_t *cfg = NULL;
  char err[512] = "";
  if (ember_config_new(&cfg) != 0) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  int n = ember_config_apply_args(cfg, argc, argv, err, sizeof err);
  int status = -1;
  if (n >= 0 && n < argc && (strcmp(argv[n], "--help") == 0 || strcmp(argv[n], "-h") == 0)) {
    fputs(usage, stdout);
    status = 0;
  } else if (n != argc || ember_config_check(cfg, known, err, sizeof err) != 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    status = 2;
  } else {
    ember_log_level_t level;
    const char *lv = ember_config_get_str(cfg, "log_level", "info");
    if (ember_log_parse_level(lv, &level) != 0) {
      fprintf(stderr, "%s: log_level '%s': expected debug, info, warn or error\n", prog, lv);
      status = 2;
    } else {
      ember_log_set_level(level);
    }
  }
  if (status != -1) {
    ember_config_free(cfg);
    return status;
  }
  *out = cfg;
  return -1;
}

static const char *trim(const char *s, const char *end, size_t *len) {
  while (s < end && isspace((unsigned char)*s)) s++;
  while (end > s && isspace((unsigned char)end[-1])) end--;
  *len = (size_t)(end - s);
  return s;
}

static int read_file(const char *path, ember_buf_t *b, char *errbuf, size_t errbuf_size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    snprintf(errbuf, errbuf_size, "cannot open config %s: %s", path, strerror(e));
    return -e;
  }
  int rc = 0;
  char chunk[4096];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      snprintf(errbuf, errbuf_size, "cannot read config %s: %s", path, strerror(-rc));
      break;
    }
    if (n == 0) break;
    rc = ember_buf_append(b, chunk, (size_t)n);
    if (rc != 0) {
      snprintf(errbuf, errbuf_size, "config %s: %s (limit %u bytes)", path, ember_strerror(rc),
               EMBER_CONFIG_MAX_FILE);
      break;
    }
  }
  close(fd);
  return rc;
}

int ember_config_load(ember_config_t *cfg, const char *path, char *errbuf, size_t errbuf_size) {
  if (cfg == NULL || path == NULL) return -EINVAL;
  ember_buf_t b;
  ember_buf_init(&b, EMBER_CONFIG_MAX_FILE);
  int rc = read_file(path, &b, errbuf, errbuf_size);
  if (rc != 0 || b.data == NULL) goto cleanup;
  const char *p = b.data;
  const char *end = b.data + b.len;
  for (unsigned lineno = 1; p < end; lineno++) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eol = nl ? nl : end;
    size_t len;
    const char *line = trim(p, eol, &len);
    p = nl ? nl + 1 : end;
    if (len == 0 || line[0] == '#') continue;
    if (len > EMBER_CONFIG_MAX_LINE) {
      snprintf(errbuf, errbuf_size, "%s line %u: line longer than %u bytes", path, lineno,
               EMBER_CONFIG_MAX_LINE);
      rc = EMBER_ECONFIG;
      goto cleanup;
    }
    const char *eq = memchr(line, '=', len);
    size_t klen, vlen;
    const char *key = eq ? trim(line, eq, &klen) : NULL;
    const char *val = eq ? trim(eq + 1, line + len, &vlen) : NULL;
    if (key == NULL || !key_valid(key, klen)) {
      snprintf(errbuf, errbuf_size, "%s line %u: expected 'key = value'", path, lineno);
      rc = EMBER_ECONFIG;
      goto cleanup;
    }
    if (memchr(val, '\0', vlen) != NULL) {
      snprintf(errbuf, errbuf_size, "%s line %u: NUL byte in value", path, lineno);
      rc = EMBER_ECONFIG;
      goto cleanup;
    }
    char origin[64];
    snprintf(origin, sizeof origin, "line %u", lineno);
    rc = config_set(cfg, key, klen, val, vlen, origin);
    if (rc != 0) goto cleanup;
  }
cleanup:
  ember_buf_free(&b);
  return rc;
}

static bool key_known(const char *key, const char *const *known) {
  for (size_t i = 0; known[i] != NULL; i++) {
    size_t n = strlen(known[i]);
    if (n > 0 && known[i][n - 1] == '.') {
      if (strncmp(key, known[i], n) == 0 && key[n] != '\0') return true;
    } else if (strcmp(key, known[i]) == 0) {
      return true;
    }
  }
  return false;
}

int ember_config_check(const ember_config_t *cfg, const char *const *known, char *errbuf,
                       size_t errbuf_size) {
  if (cfg == NULL || known == NULL) return -EINVAL;
  for (size_t i = 0; i < cfg->n; i++) {
    if (!key_known(cfg->entries[i].key, known)) {
      snprintf(errbuf, errbuf_size, "config %s: unknown key '%s'", cfg->entries[i].origin,
               cfg->entries[i].key);
      return EMBER_ECONFIG;
    }
  }
  return 0;
}

const char *ember_config_get(const ember_config_t *cfg, const char *key) {
  if (cfg == NULL || key == NULL) return NULL;
  const config_entry_t *e = config_find(cfg, key);
  return e ? e->value : NULL;
}

const char *ember_config_get_str(const ember_config_t *cfg, const char *key, const char *def) {
  const char *v = ember_config_get(cfg, key);
  return v ? v : def;
}

static int bad_value(const ember_config_t *cfg, const char *key, const char *what, char *errbuf,
                     size_t errbuf_size) {
  const config_entry_t *e = config_find(cfg, key);
  if (e == NULL) return EMBER_ECONFIG; /* callers pass a key they just read */
  snprintf(errbuf, errbuf_size, "config %s: key '%s': expected %s, got '%s'", e->origin, key, what,
           e->value);
  return EMBER_ECONFIG;
}

int ember_config_get_u64(const ember_config_t *cfg, const char *key, uint64_t def, uint64_t min,
                         uint64_t max, uint64_t *out, char *errbuf, size_t errbuf_size) {
  if (out == NULL) return -EINVAL;
  const char *v = ember_config_get(cfg, key);
  if (v == NULL) {
    *out = def;
    return 0;
  }
  if (ember_parse_u64(v, min, max, out) != 0) {
    char what[96];
    snprintf(what, sizeof what, "a whole number from %llu to %llu", (unsigned long long)min,
             (unsigned long long)max);
    return bad_value(cfg, key, what, errbuf, errbuf_size);
  }
  return 0;
}

int ember_config_get_bool(const ember_config_t *cfg, const char *key, bool def, bool *out,
                          char *errbuf, size_t errbuf_size) {
  if (out == NULL) return -EINVAL;
  const char *v = ember_config_get(cfg, key);
  if (v == NULL) {
    *out = def;
    return 0;
  }
  if (ember_parse_bool(v, out) != 0)
    return bad_value(cfg, key, "true or false", errbuf, errbuf_size);
  return 0;
}

int ember_config_get_duration_ns(const ember_config_t *cfg, const char *key, int64_t def,
                                 int64_t min, int64_t max, int64_t *out, char *errbuf,
                                 size_t errbuf_size) {
  if (out == NULL) return -EINVAL;
  const char *v = ember_config_get(cfg, key);
  if (v == NULL) {
    *out = def;
    return 0;
  }
  int64_t ns;
  if (ember_parse_duration_ns(v, 1000000000, &ns) != 0 || ns < min || ns > max) {
    char what[128];
    snprintf(what, sizeof what, "a duration from %lldms to %lldms (e.g. 10s, 250ms)",
             (long long)(min / 1000000), (long long)(max / 1000000));
    return bad_value(cfg, key, what, errbuf, errbuf_size);
  }
  *out = ns;
  return 0;
}

int ember_config_each(const ember_config_t *cfg, const char *prefix,
                      int (*fn)(void *ctx, const char *key, const char *value), void *ctx) {
  if (cfg == NULL || prefix == NULL || fn == NULL) return -EINVAL;
  size_t plen = strlen(prefix);
  for (size_t i = 0; i < cfg->n; i++) {
    const config_entry_t *e = &cfg->entries[i];
    if (strncmp(e->key, prefix, plen) != 0) continue;
    int rc = fn(ctx, e->key + plen, e->value);
    if (rc != 0) return rc;
  }
  return 0;
}
