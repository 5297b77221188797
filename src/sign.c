/* Signed session commands. See include/ember/sign.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "ember/sign.h"

#define KEY_FILE_MAX 512 /* 64 hex digits and some whitespace */
#define MAC_BYTES    32
#define MS_NS        ((int64_t)1000000)

static const char mac_context[] = "ember.commands.v1"; /* and its NUL */
static const char id_context[] = "ember command key id";
static const char hexd[] = "0123456789abcdef";

static void to_hex(const uint8_t *raw, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hexd[raw[i] >> 4];
    out[2 * i + 1] = hexd[raw[i] & 15];
  }
  out[2 * n] = '\0';
}

static int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Exactly 2n hex digits into n bytes; false on anything else. */
static bool from_hex(const char *s, size_t len, uint8_t *out, size_t n) {
  if (len != 2 * n) return false;
  for (size_t i = 0; i < n; i++) {
    int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

void ember_sign_key_from_bytes(const uint8_t raw[EMBER_SIGN_KEY_BYTES], ember_sign_key_t *out) {
  uint8_t d[32];
  unsigned dl = 0;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  memset(d, 0, sizeof d);
  /* Only a libcrypto out of memory fails here; the id is then all zeros,
   * which matches no real key's id, so commands are refused, not
   * misattributed. */
  if (c != NULL && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
      EVP_DigestUpdate(c, id_context, sizeof id_context - 1) == 1 &&
      EVP_DigestUpdate(c, raw, EMBER_SIGN_KEY_BYTES) == 1)
    EVP_DigestFinal_ex(c, d, &dl);
  EVP_MD_CTX_free(c);
  memcpy(out->key, raw, EMBER_SIGN_KEY_BYTES);
  to_hex(d, EMBER_SIGN_KEY_ID_HEX / 2, out->id);
  OPENSSL_cleanse(d, sizeof d);
}

int ember_sign_key_load(const char *path, ember_sign_key_t *out, char *errbuf, size_t errbuf_size) {
  if (path == NULL || out == NULL) return -EINVAL;
  char buf[KEY_FILE_MAX + 1];
  uint8_t raw[EMBER_SIGN_KEY_BYTES];
  int rc = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    rc = -errno;
    snprintf(errbuf, errbuf_size, "cannot open the command key file %s: %s", path, strerror(errno));
    return rc;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    rc = -errno;
    snprintf(errbuf, errbuf_size, "cannot stat the command key file %s: %s", path, strerror(errno));
    goto cleanup;
  }
  if (!S_ISREG(st.st_mode)) {
    snprintf(errbuf, errbuf_size, "the command key file %s is not a regular file", path);
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  if ((st.st_mode & 0007) != 0) {
    snprintf(errbuf, errbuf_size,
             "the command key file %s is open to every user (mode %04o): whoever reads it can "
             "start sessions on every host; run chmod 600 %s",
             path, (unsigned)(st.st_mode & 07777), path);
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  if ((st.st_mode & 0020) != 0) {
    snprintf(errbuf, errbuf_size,
             "the command key file %s is writable by its group (mode %04o): any member can "
             "replace the key and steer every agent that loads it; run chmod g-w %s",
             path, (unsigned)(st.st_mode & 07777), path);
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  /* A root agent must not trust a key that a lesser user can rewrite. */
  if (geteuid() == 0 && st.st_uid != 0) {
    snprintf(errbuf, errbuf_size,
             "the command key file %s is owned by uid %u, not root, and this process runs as "
             "root: its owner could replace the key; run chown root %s",
             path, (unsigned)st.st_uid, path);
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  size_t len = 0;
  while (len < sizeof buf) {
    ssize_t r = read(fd, buf + len, sizeof buf - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = -errno;
      snprintf(errbuf, errbuf_size, "cannot read the command key file %s: %s", path,
               strerror(errno));
      goto cleanup;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  size_t a = 0, b = len;
  while (a < b && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\n' || buf[a] == '\r')) a++;
  while (b > a &&
         (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\n' || buf[b - 1] == '\r'))
    b--;
  if (len > KEY_FILE_MAX || !from_hex(buf + a, b - a, raw, sizeof raw)) {
    snprintf(errbuf, errbuf_size,
             "the command key file %s does not hold a key: want 64 hex digits (32 random bytes, "
             "e.g. from `openssl rand -hex 32`)",
             path);
    rc = EMBER_ECONFIG;
    goto cleanup;
  }
  ember_sign_key_from_bytes(raw, out);
cleanup:
  OPENSSL_cleanse(buf, sizeof buf);
  OPENSSL_cleanse(raw, sizeof raw);
  close(fd);
  return rc;
}

int ember_sign_random_hex(char *out, size_t nbytes) {
  uint8_t raw[EMBER_SIGN_RANDOM_MAX];
  if (out == NULL || nbytes > sizeof raw) return -EINVAL;
  int rc = 0;
  size_t got = 0;
  while (got < nbytes) {
    ssize_t r = getrandom(raw + got, nbytes - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = -errno;
      break;
    }
    got += (size_t)r;
  }
  if (rc == 0) to_hex(raw, nbytes, out);
  /* A key's raw bytes live on only as the hex the caller asked for. */
  OPENSSL_cleanse(raw, sizeof raw);
  return rc;
}

int ember_sign_key_create(const char *path, char *errbuf, size_t errbuf_size) {
  if (path == NULL) return -EINVAL;
  char hex[2 * EMBER_SIGN_KEY_BYTES + 2];
  int rc = 0, fd = -1;
  rc = ember_sign_random_hex(hex, EMBER_SIGN_KEY_BYTES);
  if (rc != 0) {
    snprintf(errbuf, errbuf_size, "cannot draw a random command key: %s", strerror(-rc));
    goto cleanup;
  }
  hex[2 * EMBER_SIGN_KEY_BYTES] = '\n';
  fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno == EEXIST) goto cleanup; /* kept: load checks it */
  if (fd < 0) {
    rc = -errno;
    snprintf(errbuf, errbuf_size, "cannot create the command key file %s: %s", path,
             strerror(errno));
    goto cleanup;
  }
  size_t off = 0, want = 2 * EMBER_SIGN_KEY_BYTES + 1;
  while (off < want) {
    ssize_t w = write(fd, hex + off, want - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      rc = -errno;
      break;
    }
    off += (size_t)w;
  }
  /* A key half on disk would be refused at the next start rather than
   * silently differ from the one in use: sync it now. */
  if (rc == 0 && fsync(fd) != 0) rc = -errno;
  if (rc != 0) {
    snprintf(errbuf, errbuf_size, "cannot write the command key file %s: %s", path, strerror(-rc));
    unlink(path);
  }
cleanup:
  if (fd >= 0) close(fd);
  OPENSSL_cleanse(hex, sizeof hex);
  return rc;
}

/* HMAC-SHA256(key, context || value) into out. */
static int mac_raw(const ember_sign_key_t *k, const void *value, size_t len,
                   uint8_t out[MAC_BYTES]) {
  int rc = -ENOMEM;
  EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
  EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  size_t outl = 0;
  if (ctx != NULL && EVP_MAC_init(ctx, k->key, sizeof k->key, params) == 1 &&
      EVP_MAC_update(ctx, (const unsigned char *)mac_context, sizeof mac_context) == 1 &&
      (len == 0 || EVP_MAC_update(ctx, value, len) == 1) &&
      EVP_MAC_final(ctx, out, &outl, MAC_BYTES) == 1 && outl == MAC_BYTES)
    rc = 0;
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  return rc;
}

int ember_sign_mac_hex(const ember_sign_key_t *k, const void *value, size_t len,
                       char out[EMBER_SIGN_MAC_HEX + 1]) {
  if (k == NULL || out == NULL || (value == NULL && len > 0)) return -EINVAL;
  uint8_t m[MAC_BYTES];
  int rc = mac_raw(k, value, len, m);
  if (rc == 0) to_hex(m, sizeof m, out);
  return rc;
}

const char *ember_sign_verdict_name(ember_sign_verdict_t v) {
  static const char *const names[EMBER_SIGN_NVERDICTS] = {
      [EMBER_SIGN_OK] = "ok",
      [EMBER_SIGN_MALFORMED] = "malformed",
      [EMBER_SIGN_OTHER_HOST] = "other_host",
      [EMBER_SIGN_NO_KEY] = "no_key",
      [EMBER_SIGN_UNSIGNED] = "unsigned",
      [EMBER_SIGN_UNKNOWN_KEY] = "unknown_key",
      [EMBER_SIGN_BAD_MAC] = "bad_mac",
      [EMBER_SIGN_NO_TTL] = "no_ttl",
      [EMBER_SIGN_TTL_TOO_LONG] = "ttl_too_long",
      [EMBER_SIGN_DURATION_TOO_LONG] = "duration_too_long",
      [EMBER_SIGN_FUTURE] = "future",
      [EMBER_SIGN_EXPIRED] = "expired",
      [EMBER_SIGN_REPLAYED] = "replayed"};
  return (unsigned)v < EMBER_SIGN_NVERDICTS ? names[v] : "unknown";
}

/* ---- replay cache -------------------------------------------------------- */

typedef struct replay_entry {
  uint8_t mac[MAC_BYTES];
  int64_t expires_ns;
} replay_entry_t;

struct ember_sign_replay {
  replay_entry_t *v;
  size_t n, cap;
  int64_t floor_ns; /* the latest expiry dropped to make room */
  bool have_floor;
};

int ember_sign_replay_new(size_t capacity, ember_sign_replay_t **out) {
  if (out == NULL || capacity == 0) return -EINVAL;
  ember_sign_replay_t *r = ember_calloc(1, sizeof *r);
  if (r == NULL) return -ENOMEM;
  r->v = ember_calloc(capacity, sizeof *r->v);
  if (r->v == NULL) {
    ember_free(r);
    return -ENOMEM;
  }
  r->cap = capacity;
  *out = r;
  return 0;
}

void ember_sign_replay_free(ember_sign_replay_t *r) {
  if (r == NULL) return;
  ember_free(r->v);
  ember_free(r);
}

/* True when `mac` was seen (or cannot be proved new); else remembered. */
static bool replay_check(ember_sign_replay_t *r, const uint8_t mac[MAC_BYTES], int64_t expires_ns,
                         int64_t now_ns) {
  size_t k = 0;
  bool seen = false;
  for (size_t i = 0; i < r->n; i++) {
    if (r->v[i].expires_ns < now_ns) continue; /* expired: EXPIRED refuses it now */
    /* Plain memcmp: these MACs were public on the topic already. */
    if (!seen && memcmp(r->v[i].mac, mac, MAC_BYTES) == 0) seen = true;
    r->v[k++] = r->v[i];
  }
  r->n = k;
  if (seen || (r->have_floor && expires_ns <= r->floor_ns)) return true;
  if (r->n == r->cap) {
    size_t first = 0;
    for (size_t i = 1; i < r->n; i++)
      if (r->v[i].expires_ns < r->v[first].expires_ns) first = i;
    if (!r->have_floor || r->v[first].expires_ns > r->floor_ns)
      r->floor_ns = r->v[first].expires_ns;
    r->have_floor = true;
    r->v[first] = r->v[--r->n];
    if (expires_ns <= r->floor_ns) return true;
  }
  memcpy(r->v[r->n].mac, mac, MAC_BYTES);
  r->v[r->n++].expires_ns = expires_ns;
  return false;
}

/* ---- checking a command ------------------------------------------------ */

static const char *kind_name(const ember_command_t *c) {
  return c->kind == EMBER_CMD_STOP ? "STOP" : "START";
}

ember_sign_verdict_t ember_sign_check_command(const ember_sign_policy_t *p,
                                              ember_sign_replay_t *replay,
                                              const ember_sign_envelope_t *env, const char *host,
                                              int64_t now_ns, ember_command_t *out, char *errbuf,
                                              size_t errbuf_size) {
  char derr[256] = "";
  ember_command_t c;
  if (p == NULL || env == NULL || out == NULL || env->value == NULL) {
    snprintf(errbuf, errbuf_size, "no message");
    return EMBER_SIGN_MALFORMED;
  }
  int rc = ember_codec_decode_command(env->value, env->len, &c, derr, sizeof derr);
  if (rc != 0) {
    snprintf(errbuf, errbuf_size, "not a command (%s)", derr[0] ? derr : ember_strerror(rc));
    return EMBER_SIGN_MALFORMED;
  }
  *out = c;
  if (host != NULL && strcmp(c.host, host) != 0) {
    snprintf(errbuf, errbuf_size, "for host %.128s", c.host);
    return EMBER_SIGN_OTHER_HOST;
  }
  const char *sid = c.session_id;
  if (p->nkeys == 0) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: this agent has no command_key_file, so it takes no "
             "command",
             kind_name(&c), sid);
    return EMBER_SIGN_NO_KEY;
  }
  if (env->key_id == NULL || env->mac == NULL) {
    snprintf(errbuf, errbuf_size, "%s of session %.64s refused: it is not signed (no %s header)",
             kind_name(&c), sid,
             env->key_id == NULL ? EMBER_SIGN_HEADER_KEY : EMBER_SIGN_HEADER_MAC);
    return EMBER_SIGN_UNSIGNED;
  }
  const ember_sign_key_t *k = NULL;
  for (size_t i = 0; i < p->nkeys && k == NULL; i++) {
    if (env->key_id_len == EMBER_SIGN_KEY_ID_HEX &&
        memcmp(env->key_id, p->keys[i].id, EMBER_SIGN_KEY_ID_HEX) == 0)
      k = &p->keys[i];
  }
  if (k == NULL) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: signed with key %.*s, which is not one of this "
             "agent's keys",
             kind_name(&c), sid, (int)(env->key_id_len < 32 ? env->key_id_len : 32), env->key_id);
    return EMBER_SIGN_UNKNOWN_KEY;
  }
  uint8_t want[MAC_BYTES], got[MAC_BYTES];
  if (mac_raw(k, env->value, env->len, want) != 0) {
    snprintf(errbuf, errbuf_size, "%s of session %.64s refused: cannot compute its MAC",
             kind_name(&c), sid);
    return EMBER_SIGN_BAD_MAC;
  }
  if (!from_hex(env->mac, env->mac_len, got, sizeof got) ||
      CRYPTO_memcmp(want, got, MAC_BYTES) != 0) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: its MAC does not match key %s (forged or altered)",
             kind_name(&c), sid, k->id);
    return EMBER_SIGN_BAD_MAC;
  }
  if (c.ttl_ms == 0) {
    snprintf(errbuf, errbuf_size, "%s of session %.64s refused: ttl_ms 0 would never expire",
             kind_name(&c), sid);
    return EMBER_SIGN_NO_TTL;
  }
  int64_t ttl = (int64_t)c.ttl_ms * MS_NS;
  if (ttl > p->max_ttl_ns) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: ttl %" PRIu32 " ms is over session.max_ttl (%" PRId64
             " ms)",
             kind_name(&c), sid, c.ttl_ms, p->max_ttl_ns / MS_NS);
    return EMBER_SIGN_TTL_TOO_LONG;
  }
  uint32_t max_dur = p->max_duration_ms ? p->max_duration_ms : EMBER_SIGN_MAX_DURATION_MS;
  if (c.kind == EMBER_CMD_START && c.duration_ms > max_dur) {
    snprintf(errbuf, errbuf_size,
             "START of session %.64s refused: duration %" PRIu32 " ms is over %" PRIu32 " ms", sid,
             c.duration_ms, max_dur);
    return EMBER_SIGN_DURATION_TOO_LONG;
  }
  /* issued_ns is the sender's; bound it before adding to it. */
  int64_t lim = INT64_MAX / 4;
  int64_t issued = c.issued_ns < -lim ? -lim : c.issued_ns > lim ? lim : c.issued_ns;
  if (issued > now_ns + p->skew_ns) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: issued %" PRId64
             " ms in the future (session.clock_skew is %" PRId64 " ms)",
             kind_name(&c), sid, (issued - now_ns) / MS_NS, p->skew_ns / MS_NS);
    return EMBER_SIGN_FUTURE;
  }
  int64_t expires = issued + ttl + p->skew_ns;
  if (now_ns > expires) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: expired (issued %" PRId64 " ms ago, ttl %" PRIu32 " ms)",
             kind_name(&c), sid, (now_ns - issued) / MS_NS, c.ttl_ms);
    return EMBER_SIGN_EXPIRED;
  }
  /* The replay cache started empty with this process: anything issued
   * before that (beyond the skew) may have been accepted by the process
   * before it, and no genuine command is older, since the agent reads
   * ember.commands from its latest offsets at start. */
  if (p->started_ns != 0 && issued + p->skew_ns < p->started_ns) {
    snprintf(errbuf, errbuf_size,
             "%s of session %.64s refused: issued %" PRId64
             " ms before this agent started reading commands, so possibly a replay of one "
             "accepted before a restart",
             kind_name(&c), sid, (p->started_ns - issued) / MS_NS);
    return EMBER_SIGN_REPLAYED;
  }
  if (replay != NULL && replay_check(replay, want, expires, now_ns)) {
    snprintf(errbuf, errbuf_size, "%s of session %.64s refused: this very message came before",
             kind_name(&c), sid);
    return EMBER_SIGN_REPLAYED;
  }
  if (errbuf_size > 0) errbuf[0] = '\0';
  return EMBER_SIGN_OK;
}
