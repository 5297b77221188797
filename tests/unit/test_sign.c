/* Signed session commands (include/ember/sign.h): key files, MACs, and the
 * command check an agent runs on every message of ember.commands: forged,
 * replayed, unsigned, expired, ttl 0 and over-long commands are refused
 * with their reason; two keys at once for rotation. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/sign.h"

#define MS    1000000LL
#define NOW   1764590000000000000LL /* a fixed "agent clock" */
#define HOST  "h1"
#define SKEW  (30000 * MS)
#define MAXTT (600000 * MS)

static ember_sign_key_t key_a, key_b, key_c;

static int setup(void **state) {
  (void)state;
  uint8_t raw[EMBER_SIGN_KEY_BYTES];
  for (int k = 0; k < 3; k++) {
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)(i * 7 + (size_t)k * 101 + 1);
    ember_sign_key_from_bytes(raw, k == 0 ? &key_a : k == 1 ? &key_b : &key_c);
  }
  return 0;
}

/* A signed message: the encoded command and its two headers. */
typedef struct msg {
  ember_buf_t value;
  char key_id[EMBER_SIGN_KEY_ID_HEX + 1];
  char mac[EMBER_SIGN_MAC_HEX + 1];
  ember_sign_envelope_t env;
} msg_t;

static ember_command_t command(const char *id, ember_command_kind_t kind) {
  return (ember_command_t){.kind = kind,
                           .session_id = (char *)(uintptr_t)id,
                           .host = (char *)(uintptr_t)HOST,
                           .actor = (char *)(uintptr_t) "B",
                           .type = EMBER_SESSION_CPU,
                           .duration_ms = 2000,
                           .hz = 100,
                           .issued_ns = NOW,
                           .ttl_ms = 30000};
}

/* Encode `c`, sign it with `k` (NULL: unsigned), and claim key id `claim`
 * (NULL: k's own). */
static void make(msg_t *m, const ember_command_t *c, const ember_sign_key_t *k, const char *claim) {
  memset(m, 0, sizeof *m);
  ember_buf_init(&m->value, 1 << 16);
  assert_int_equal(ember_codec_encode_command(c, &m->value), 0);
  m->env.value = m->value.data;
  m->env.len = m->value.len;
  if (k == NULL) return;
  assert_int_equal(ember_sign_mac_hex(k, m->value.data, m->value.len, m->mac), 0);
  snprintf(m->key_id, sizeof m->key_id, "%s", claim ? claim : k->id);
  m->env.key_id = m->key_id;
  m->env.key_id_len = strlen(m->key_id);
  m->env.mac = m->mac;
  m->env.mac_len = strlen(m->mac);
}

static void drop(msg_t *m) { ember_buf_free(&m->value); }

static ember_sign_policy_t policy(const ember_sign_key_t *keys, size_t n) {
  return (ember_sign_policy_t){.keys = keys, .nkeys = n, .max_ttl_ns = MAXTT, .skew_ns = SKEW};
}

/* Check `m` at `now` and return the verdict; the sentence into why. */
static ember_sign_verdict_t check_at(const ember_sign_policy_t *p, ember_sign_replay_t *r,
                                     const msg_t *m, int64_t now, char *why, size_t why_size) {
  ember_command_t out = {0};
  ember_sign_verdict_t v = ember_sign_check_command(p, r, &m->env, HOST, now, &out, why, why_size);
  if (v != EMBER_SIGN_MALFORMED) assert_non_null(out.session_id);
  ember_command_clear(&out);
  return v;
}

static ember_sign_verdict_t check(const ember_sign_policy_t *p, ember_sign_replay_t *r,
                                  const msg_t *m) {
  char why[512];
  return check_at(p, r, m, NOW, why, sizeof why);
}

static void test_sign_accepts_a_signed_command(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  ember_command_t c = command("s1", EMBER_CMD_START);
  msg_t m;
  make(&m, &c, &key_a, NULL);
  ember_command_t out = {0};
  char why[256];
  assert_int_equal(ember_sign_check_command(&p, NULL, &m.env, HOST, NOW, &out, why, sizeof why),
                   EMBER_SIGN_OK);
  assert_string_equal(out.session_id, "s1");
  assert_int_equal(out.duration_ms, 2000);
  ember_command_clear(&out);
  assert_int_equal(strlen(key_a.id), EMBER_SIGN_KEY_ID_HEX);
  assert_string_not_equal(key_a.id, key_b.id);
  /* Another host's command is not checked further (nor refused). */
  ember_command_t other = c;
  other.host = (char *)(uintptr_t) "h2";
  msg_t o;
  make(&o, &other, NULL, NULL);
  assert_int_equal(check(&p, NULL, &o), EMBER_SIGN_OTHER_HOST);
  drop(&o);
  drop(&m);
}

static void test_sign_refuses_forged(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  ember_command_t c = command("s1", EMBER_CMD_START);
  char why[512];
  msg_t m;
  /* Signed with a key the agent does not have, claiming the agent's key. */
  make(&m, &c, &key_c, key_a.id);
  assert_int_equal(check_at(&p, NULL, &m, NOW, why, sizeof why), EMBER_SIGN_BAD_MAC);
  assert_non_null(strstr(why, "forged"));
  drop(&m);
  /* ... or naming its own id. */
  make(&m, &c, &key_c, NULL);
  assert_int_equal(check_at(&p, NULL, &m, NOW, why, sizeof why), EMBER_SIGN_UNKNOWN_KEY);
  assert_non_null(strstr(why, key_c.id));
  drop(&m);
  /* A validly signed command altered afterwards (a longer session). */
  make(&m, &c, &key_a, NULL);
  ember_command_t longer = c;
  longer.duration_ms = 60000;
  msg_t l;
  make(&l, &longer, NULL, NULL);
  l.env.key_id = m.key_id;
  l.env.key_id_len = strlen(m.key_id);
  l.env.mac = m.mac;
  l.env.mac_len = strlen(m.mac);
  assert_int_equal(check(&p, NULL, &l), EMBER_SIGN_BAD_MAC);
  /* A MAC that is not hex, or cut short. */
  m.env.mac_len = 63;
  assert_int_equal(check(&p, NULL, &m), EMBER_SIGN_BAD_MAC);
  m.env.mac_len = 64;
  m.mac[0] = 'z';
  assert_int_equal(check(&p, NULL, &m), EMBER_SIGN_BAD_MAC);
  drop(&l);
  drop(&m);
}

static void test_sign_refuses_replayed(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  ember_sign_replay_t *r = NULL;
  assert_int_equal(ember_sign_replay_new(64, &r), 0);
  ember_command_t c = command("s1", EMBER_CMD_START);
  msg_t m, stop;
  make(&m, &c, &key_a, NULL);
  c.kind = EMBER_CMD_STOP;
  make(&stop, &c, &key_a, NULL);
  char why[512];
  assert_int_equal(check(&p, r, &m), EMBER_SIGN_OK);
  /* The same message delivered again, a second later. */
  assert_int_equal(check_at(&p, r, &m, NOW + 1000 * MS, why, sizeof why), EMBER_SIGN_REPLAYED);
  assert_non_null(strstr(why, "came before"));
  /* The STOP of that session is another message. */
  assert_int_equal(check(&p, r, &stop), EMBER_SIGN_OK);
  assert_int_equal(check(&p, r, &stop), EMBER_SIGN_REPLAYED);
  /* Past its expiry it is refused as expired, whatever the cache holds. */
  assert_int_equal(check_at(&p, r, &m, NOW + 30000 * MS + SKEW + 1, why, sizeof why),
                   EMBER_SIGN_EXPIRED);
  drop(&m);
  drop(&stop);
  ember_sign_replay_free(r);
}

/* A cache of two: the third command pushes out the first, whose replay is
 * then refused by the floor, not let through. */
static void test_sign_replay_cache_bounded(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  ember_sign_replay_t *r = NULL;
  assert_int_equal(ember_sign_replay_new(2, &r), 0);
  msg_t m[4];
  const char *ids[] = {"s1", "s2", "s3", "s4"};
  for (int i = 0; i < 4; i++) {
    ember_command_t c = command(ids[i], EMBER_CMD_START);
    c.issued_ns = NOW + i * MS;
    make(&m[i], &c, &key_a, NULL);
  }
  assert_int_equal(check(&p, r, &m[0]), EMBER_SIGN_OK);
  assert_int_equal(check(&p, r, &m[1]), EMBER_SIGN_OK);
  assert_int_equal(check(&p, r, &m[2]), EMBER_SIGN_OK);
  assert_int_equal(check(&p, r, &m[0]), EMBER_SIGN_REPLAYED);
  assert_int_equal(check(&p, r, &m[2]), EMBER_SIGN_REPLAYED);
  assert_int_equal(check(&p, r, &m[3]), EMBER_SIGN_OK);
  for (int i = 0; i < 4; i++) drop(&m[i]);
  ember_sign_replay_free(r);
}

static void test_sign_refuses_unsigned(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  char why[512];
  msg_t m;
  ember_command_t c = command("s1", EMBER_CMD_START);
  make(&m, &c, NULL, NULL);
  assert_int_equal(check_at(&p, NULL, &m, NOW, why, sizeof why), EMBER_SIGN_UNSIGNED);
  assert_non_null(strstr(why, "not signed"));
  drop(&m);
  /* A STOP must be signed too. */
  c.kind = EMBER_CMD_STOP;
  make(&m, &c, NULL, NULL);
  assert_int_equal(check(&p, NULL, &m), EMBER_SIGN_UNSIGNED);
  drop(&m);
  /* Only the MAC, no key id. */
  make(&m, &c, &key_a, NULL);
  m.env.key_id = NULL;
  assert_int_equal(check(&p, NULL, &m), EMBER_SIGN_UNSIGNED);
  /* An agent with no key refuses even a good one. */
  m.env.key_id = m.key_id;
  ember_sign_policy_t none = policy(NULL, 0);
  assert_int_equal(check_at(&none, NULL, &m, NOW, why, sizeof why), EMBER_SIGN_NO_KEY);
  assert_non_null(strstr(why, "command_key_file"));
  drop(&m);
  /* Not a command at all. */
  msg_t junk = {.env = {.value = "\xff\xfe junk", .len = 7}};
  assert_int_equal(check(&p, NULL, &junk), EMBER_SIGN_MALFORMED);
}

static void test_sign_refuses_bad_times_and_ttls(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  char why[512];
  struct {
    uint32_t ttl_ms, duration_ms;
    int64_t issued;
    ember_sign_verdict_t want;
  } cases[] = {
      {0, 2000, NOW, EMBER_SIGN_NO_TTL},
      {600001, 2000, NOW, EMBER_SIGN_TTL_TOO_LONG},
      {600000, 2000, NOW, EMBER_SIGN_OK},
      {30000, 3600001, NOW, EMBER_SIGN_DURATION_TOO_LONG},
      {30000, 2000, NOW - 3600000 * MS, EMBER_SIGN_EXPIRED},
      {30000, 2000, NOW - 30000 * MS - SKEW - 1, EMBER_SIGN_EXPIRED},
      {30000, 2000, NOW - 30000 * MS - SKEW + MS, EMBER_SIGN_OK}, /* within the skew */
      {30000, 2000, NOW + SKEW + MS, EMBER_SIGN_FUTURE},
      {30000, 2000, NOW + SKEW - MS, EMBER_SIGN_OK},
      {30000, 2000, INT64_MAX, EMBER_SIGN_FUTURE},
      {30000, 2000, INT64_MIN, EMBER_SIGN_EXPIRED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char id[16];
    snprintf(id, sizeof id, "t%zu", i);
    ember_command_t c = command(id, EMBER_CMD_START);
    c.ttl_ms = cases[i].ttl_ms;
    c.duration_ms = cases[i].duration_ms;
    c.issued_ns = cases[i].issued;
    msg_t m;
    make(&m, &c, &key_a, NULL);
    ember_sign_verdict_t v = check_at(&p, NULL, &m, NOW, why, sizeof why);
    if (v != cases[i].want)
      fail_msg("case %zu: %s, want %s (%s)", i, ember_sign_verdict_name(v),
               ember_sign_verdict_name(cases[i].want), why);
    drop(&m);
  }
  /* A STOP's duration does not matter. */
  ember_command_t c = command("stop", EMBER_CMD_STOP);
  c.duration_ms = UINT32_MAX;
  msg_t m;
  make(&m, &c, &key_a, NULL);
  assert_int_equal(check(&p, NULL, &m), EMBER_SIGN_OK);
  drop(&m);
  assert_string_equal(ember_sign_verdict_name(EMBER_SIGN_TTL_TOO_LONG), "ttl_too_long");
  assert_string_equal(ember_sign_verdict_name(EMBER_SIGN_NVERDICTS), "unknown");
}

static void test_sign_rotation_two_keys(void **state) {
  (void)state;
  ember_sign_key_t both[2] = {key_b, key_a}; /* current B, previous A */
  ember_sign_policy_t p = policy(both, 2);
  ember_command_t c = command("s1", EMBER_CMD_START);
  msg_t a, b, x;
  make(&a, &c, &key_a, NULL);
  c.session_id = (char *)(uintptr_t) "s2";
  make(&b, &c, &key_b, NULL);
  c.session_id = (char *)(uintptr_t) "s3";
  make(&x, &c, &key_c, NULL);
  assert_int_equal(check(&p, NULL, &a), EMBER_SIGN_OK);
  assert_int_equal(check(&p, NULL, &b), EMBER_SIGN_OK);
  assert_int_equal(check(&p, NULL, &x), EMBER_SIGN_UNKNOWN_KEY);
  /* After the rotation ends (B only), A's commands are refused. */
  ember_sign_policy_t only_b = policy(&key_b, 1);
  assert_int_equal(check(&only_b, NULL, &a), EMBER_SIGN_UNKNOWN_KEY);
  drop(&a);
  drop(&b);
  drop(&x);
}

/* Fail the Nth allocation, for every N: the check refuses (a decode out
 * of memory reads as malformed) or accepts, never crashes or leaks, and a
 * refused command does not enter the replay cache. */
static void test_sign_check_allocation_failures(void **state) {
  (void)state;
  ember_sign_policy_t p = policy(&key_a, 1);
  ember_command_t c = command("s1", EMBER_CMD_START);
  uint32_t pids[] = {1, 2, 3};
  c.pids = pids;
  c.npids = 3;
  c.worker = (char *)(uintptr_t) "w";
  msg_t m;
  make(&m, &c, &key_a, NULL);
  bool ok = false;
  for (long n = 0; n < 100 && !ok; n++) {
    ember_sign_replay_t *r = NULL;
    assert_int_equal(ember_sign_replay_new(8, &r), 0);
    ember_command_t out = {0};
    char why[256];
    ember_alloc_fail_after(n);
    ember_sign_verdict_t v =
        ember_sign_check_command(&p, r, &m.env, HOST, NOW, &out, why, sizeof why);
    ember_alloc_fail_reset();
    assert_true(v == EMBER_SIGN_OK || v == EMBER_SIGN_MALFORMED);
    ok = v == EMBER_SIGN_OK;
    ember_command_clear(&out);
    /* What was refused for want of memory is taken when it comes again. */
    if (!ok) assert_int_equal(check(&p, r, &m), EMBER_SIGN_OK);
    ember_sign_replay_free(r);
  }
  assert_true(ok);
  drop(&m);
}

/* The replay cache dies with the agent. A START captured before a restart
 * and published again just after it is refused by the start time, not let
 * in for up to ttl + skew. */
static void test_sign_refuses_replay_across_restart(void **state) {
  (void)state;
  ember_command_t c = command("s9", EMBER_CMD_START);
  msg_t m;
  make(&m, &c, &key_a, NULL);
  char why[512];
  /* The first agent accepts it. */
  ember_sign_policy_t p = policy(&key_a, 1);
  p.started_ns = NOW - 3600000 * MS;
  ember_sign_replay_t *r = NULL;
  assert_int_equal(ember_sign_replay_new(64, &r), 0);
  assert_int_equal(check_at(&p, r, &m, NOW, why, sizeof why), EMBER_SIGN_OK);
  ember_sign_replay_free(r);
  /* It restarts 10 s later with an empty cache; the replay comes 1 s after. */
  r = NULL;
  assert_int_equal(ember_sign_replay_new(64, &r), 0);
  p.started_ns = NOW + SKEW + 10000 * MS;
  assert_int_equal(check_at(&p, r, &m, p.started_ns + 1000 * MS, why, sizeof why),
                   EMBER_SIGN_REPLAYED);
  assert_non_null(strstr(why, "before this agent started"));
  /* Within the skew of its start a command is taken (clocks differ). */
  p.started_ns = NOW + SKEW;
  assert_int_equal(check_at(&p, r, &m, p.started_ns, why, sizeof why), EMBER_SIGN_OK);
  /* 0: not checked (the cache alone decides, as before). */
  ember_sign_replay_free(r);
  r = NULL;
  assert_int_equal(ember_sign_replay_new(64, &r), 0);
  p.started_ns = 0;
  assert_int_equal(check_at(&p, r, &m, NOW + 20000 * MS, why, sizeof why), EMBER_SIGN_OK);
  ember_sign_replay_free(r);
  drop(&m);
}

static void write_file(const char *path, const char *text, mode_t mode) {
  unlink(path);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  assert_int_equal(chmod(path, mode), 0);
}

static void test_sign_key_files(void **state) {
  (void)state;
  char path[512], err[512];
  snprintf(path, sizeof path, "%s/sign-%d.key", EMBER_TEST_TMP, (int)getpid());
  ember_sign_key_t k;
  char hex[65];
  for (size_t i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key_a.key[i]);
  char text[80];
  snprintf(text, sizeof text, "  %s\n", hex);
  write_file(path, text, 0600);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), 0);
  assert_string_equal(k.id, key_a.id);
  assert_memory_equal(k.key, key_a.key, 32);
  /* Group-readable is the operator's call; world-readable is refused. */
  assert_int_equal(chmod(path, 0640), 0);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), 0);
  assert_int_equal(chmod(path, 0644), 0);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "chmod 600"));
  /* Group-writable: any member could swap the key (0620, 0660). */
  assert_int_equal(chmod(path, 0620), 0);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "writable by its group"));
  assert_non_null(strstr(err, "chmod g-w"));
  assert_int_equal(chmod(path, 0660), 0);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), EMBER_ECONFIG);
  assert_int_equal(chmod(path, 0600), 0);
  /* A root process takes only a root-owned key (as root only: the test
   * cannot give a file away otherwise). */
  if (geteuid() == 0) {
    assert_int_equal(chown(path, 4321, 4321), 0);
    assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), EMBER_ECONFIG);
    assert_non_null(strstr(err, "owned by uid 4321, not root"));
    assert_non_null(strstr(err, "chown root"));
    assert_int_equal(chown(path, 0, 0), 0);
    assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), 0);
  }
  write_file(path, "0123", 0600);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), EMBER_ECONFIG);
  assert_non_null(strstr(err, "64 hex digits"));
  unlink(path);
  assert_int_equal(ember_sign_key_load(path, &k, err, sizeof err), -ENOENT);
  /* create: a new 0600 key, kept as it is by a second call. */
  assert_int_equal(ember_sign_key_create(path, err, sizeof err), 0);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  ember_sign_key_t k1, k2;
  assert_int_equal(ember_sign_key_load(path, &k1, err, sizeof err), 0);
  assert_int_equal(ember_sign_key_create(path, err, sizeof err), 0);
  assert_int_equal(ember_sign_key_load(path, &k2, err, sizeof err), 0);
  assert_string_equal(k1.id, k2.id);
  assert_string_not_equal(k1.id, key_a.id);
  unlink(path);
  /* The random hex behind keys and session ids. */
  char h1[33], h2[33];
  assert_int_equal(ember_sign_random_hex(h1, 16), 0);
  assert_int_equal(ember_sign_random_hex(h2, 16), 0);
  assert_int_equal(strlen(h1), 32);
  assert_int_equal(strspn(h1, "0123456789abcdef"), 32);
  assert_string_not_equal(h1, h2);
  assert_int_equal(ember_sign_random_hex(h1, EMBER_SIGN_RANDOM_MAX + 1), -EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sign_accepts_a_signed_command),
      cmocka_unit_test(test_sign_refuses_forged),
      cmocka_unit_test(test_sign_refuses_replayed),
      cmocka_unit_test(test_sign_refuses_replay_across_restart),
      cmocka_unit_test(test_sign_replay_cache_bounded),
      cmocka_unit_test(test_sign_refuses_unsigned),
      cmocka_unit_test(test_sign_refuses_bad_times_and_ttls),
      cmocka_unit_test(test_sign_rotation_two_keys),
      cmocka_unit_test(test_sign_check_allocation_failures),
      cmocka_unit_test(test_sign_key_files),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
