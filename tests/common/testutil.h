/* Helpers for tests that run real processes and a real broker. */
#ifndef EMBER_TESTS_TESTUTIL_H
#define EMBER_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <librdkafka/rdkafka.h>
#include <protobuf-c/protobuf-c.h>

#include "ember/profile.h"
#include "ember/store.h"

/* The real broker's address from EMBER_TEST_BOOTSTRAP_FILE (fails the test
 * with a message when missing). Static storage. */
const char *tu_bootstrap(void);

/* Start argv[0] (a path) with a minimal environment (PATH, HOME) plus
 * `env` (NULL-terminated "K=V" list, may be NULL); stdout and stderr go to
 * `log_path` (appended) or /dev/null when NULL. Returns the pid. */
pid_t tu_spawn(const char *const *argv, const char *const *env, const char *log_path);
/* Wait up to timeout_ms for pid; returns its exit status (as waitpid) or
 * -1 on timeout. */
int tu_wait(pid_t pid, int timeout_ms);
/* tu_wait, also giving the CPU time (user + system, seconds) the process
 * used, from wait4's rusage. */
int tu_wait_cpu(pid_t pid, int timeout_ms, double *cpu_seconds);
/* SIGKILL and reap (for teardown); ignores a pid <= 0. */
void tu_kill(pid_t pid);
/* pid's state letter and parent from /proc/PID/stat; false when gone. */
bool tu_proc_state(pid_t pid, char *state, int *ppid);

/* Consume every message of ember.profiles (from the start, in a fresh
 * group) whose profile has labels.host == host, until `idle_ms` pass with
 * nothing new (after at least one match) or `max_ms` pass. Decoded
 * profiles are returned (caller frees each and the array). Messages that
 * do not decode are skipped (other tests put some there on purpose). */
size_t tu_consume_profiles(const char *brokers, const char *host, int idle_ms, int max_ms,
                           ember_profile_t ***out);
/* The codec tests' sample window (labels, window, period, origin; main,
 * hot, cold, an unresolved, a kernel and a JIT frame, a frame of nothing).
 * `more` adds a file-only frame's stack and a frame no stack uses. */
ember_profile_t *tu_sample_profile(bool more);
/* One CPU profile (samples, CPU ns) of every profile of `worker` among
 * ps[0..n) merged; *labels (may be NULL) gets the labels of the last one
 * (valid as ps). Caller frees. */
ember_profile_t *tu_merged_worker(ember_profile_t *const *ps, size_t n, const char *worker,
                                  const ember_labels_t **labels);
/* The same, also giving each profile's Kafka message timestamp (ms since
 * the epoch, the producer's create time) in *ts_ms (caller frees). */
size_t tu_consume_profiles_ts(const char *brokers, const char *host, int idle_ms, int max_ms,
                              ember_profile_t ***out, int64_t **ts_ms);

/* The same, also giving each message's wire version (1 or 2) in
 * *versions (caller frees). */
size_t tu_consume_profiles_v(const char *brokers, const char *host, int idle_ms, int max_ms,
                             ember_profile_t ***out, uint32_t **versions);

/* Fails the test unless a and b hold the same stacks (by frame content)
 * with the same values, in the same order. */
void tu_assert_profiles_equal(const ember_profile_t *a, const ember_profile_t *b);

/* Blocks handed out by a protobuf-c allocator and freed together
 * (tu_blocks_free), for tests that swap arrays of their own into an
 * unpacked message and so cannot use free_unpacked. */
typedef struct tu_blocks {
  void *b[4096];
  size_t n;
} tu_blocks_t;
ProtobufCAllocator tu_blocks_allocator(tu_blocks_t *blocks);
void tu_blocks_free(tu_blocks_t *blocks);

/* Give `m`, an unpacked wire v2 message, the hashes that writers before
 * 2026-12-03 sent and readers still check: the locations' (field 25) and
 * the stacks' (field 29), as `which` says, computed from its content as it
 * is now (so mutate the content after, or the hashes after to test a
 * mismatch). The arrays come from `alloc` (NULL: malloc, as free_unpacked
 * expects). */
enum { TU_LOCATION_HASHES = 1, TU_STACK_HASHES = 2, TU_HASHES = 3 };
struct Ember__Wire__V2__Profile;
void tu_v2_add_hashes(struct Ember__Wire__V2__Profile *m, int which, ProtobufCAllocator *alloc);

/* Sum of value `vi` over stacks whose leaf frame's function is `fn`, and
 * over stacks containing a frame whose function contains `substr`. */
int64_t tu_self(const ember_profile_t *p, size_t vi, const char *fn);
int64_t tu_total_matching(const ember_profile_t *p, size_t vi, const char *substr);
/* Does any frame's function contain `substr`? Returns its kind or -1. */
int tu_find_frame(const ember_profile_t *p, const char *substr);

/* Store files of this test process: EMBER_TEST_TMP/store_<what>_<name>_
 * <pid>.lmdb; removing one removes its lock file too; opening one (no
 * fsync, a map of `map_size` bytes) fails the test with LMDB's sentence. */
void tu_store_path(char *buf, size_t size, const char *what, const char *name);
void tu_store_remove(const char *path);
ember_store_t *tu_store_open(const char *path, size_t map_size);

/* One HTTP/1.0 request to 127.0.0.1:port (Host: 127.0.0.1, then
 * `headers`, each line ending in \r\n, may be NULL; `body` may be NULL);
 * the response body into out (NUL-terminated, cut to size; out may be
 * NULL). Returns the HTTP status or -1. */
int tu_http(unsigned port, const char *method, const char *path, const char *headers,
            const char *body, char *out, size_t size);
/* tu_http for a body that may hold NULs: *out_len (may be NULL) gets how
 * many bytes of it are in out (cut to size - 1). */
int tu_http_n(unsigned port, const char *method, const char *path, const char *headers,
              const char *body, char *out, size_t size, size_t *out_len);
/* tu_http GET without headers: the body into buf. */
int tu_http_get(unsigned port, const char *path, char *buf, size_t size);

/* Records of ember.targets (from the start, fresh group) whose key starts
 * with `prefix`, until idle_ms without news or max_ms. Calls fn for each
 * (value NULL for a tombstone). */
void tu_consume_targets(const char *brokers, const char *prefix, int idle_ms, int max_ms,
                        void (*fn)(void *ctx, const char *key, const void *value, size_t len),
                        void *ctx);

/* Delivery reports of a producer, tallied: set tu_on_delivery as the
 * conf's dr_msg_cb and a tu_dr_tally_t as its opaque. */
typedef struct tu_dr_tally {
  size_t ok;
  size_t failed;
  rd_kafka_resp_err_t first_err; /* of the first failure */
} tu_dr_tally_t;
void tu_on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);

/* A small deterministic profile window of `worker` on `host` from
 * (agent, seq): labels worker/version "1.0"/host, window [start_ns, start_ns
 * + 10 s), period 10 ms, two stacks main;work_a (tu_profile_samples(seq)
 * samples) and main;work_b (1 sample), values CPU_SAMPLES and CPU_NS
 * (samples x 10 ms). */
ember_profile_t *tu_profile(const char *agent, uint64_t seq, const char *worker, const char *host,
                            int64_t start_ns);
int64_t tu_profile_samples(uint64_t seq); /* work_a's samples; the window has one more */

/* Produce `n` messages to `topic` on `brokers` (values[i] of lens[i] bytes,
 * keyed by `key`, may be NULL) and wait for every delivery report (at most
 * 60 s). Returns the tally. */
tu_dr_tally_t tu_produce(const char *brokers, const char *topic, const char *key,
                         const void *const *values, const size_t *lens, size_t n);

/* V8's names (--perf-basic-prof) of the functions a and b of the bundle
 * /srv/app/dist/app.js, whose one line is
 * "function a(){for(;;);}function b(){}": a at column 11, b at 33. */
#define TU_V8_A "JS:*a /srv/app/dist/app.js:1:11"
#define TU_V8_B "JS:*b /srv/app/dist/app.js:1:33"

/* Produce to ember.profiles (keyed by `worker`) one wire v2 window of 10 s
 * from `start_ns`, as an agent without source maps sends it: `na` samples
 * of TU_V8_A and `nb` of TU_V8_B, each under main, from (agent, seq). */
void tu_produce_js(const char *brokers, const char *worker, const char *version, const char *host,
                   const char *agent, uint64_t seq, int64_t start_ns, int64_t na, int64_t nb);

/* Produce one message to ember.commands keyed by `host`, with the headers
 * of a signed command (include/ember/sign.h) when key_id / mac are not
 * NULL, and wait for its delivery report. */
tu_dr_tally_t tu_produce_command(const char *brokers, const char *host, const void *value,
                                 size_t len, const char *key_id, const char *mac);

/* The session command key of this test process: a file in EMBER_TEST_TMP
 * (mode 0600, made on the first call), and "command_key_file=PATH" for a
 * daemon's argv. Give it to every agent and collector that run sessions. */
const char *tu_command_key_file(void);
const char *tu_command_key_arg(void);

/* Encode tu_profile(agent, first_seq + i, worker, host, base_ns + i * 10 s)
 * for i < n and produce them to ember.profiles (keyed by worker); fails the
 * test unless all are delivered. Returns the CPU samples produced. */
int64_t tu_produce_profiles(const char *brokers, const char *agent, uint64_t first_seq, size_t n,
                            const char *worker, const char *host, int64_t base_ns);

/* A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read,
 * close): for daemons started as separate processes. */
unsigned tu_free_port(void);

/* Give this process a mount namespace of its own, with no propagation to
 * the host's, so the tmpfs mounts a test makes vanish when it exits, even
 * when an assertion ends it early. Call first in main(), before any
 * thread starts: threads created before it stay in the host's namespace.
 * Returns 0, or -errno (not root: the tests that mount then skip). */
int tu_private_mounts(void);

/* The port a daemon logged it listens on (its line "... (port N)") in
 * log_path, waiting up to timeout_ms for the line; fails the test when
 * none appears. */
unsigned tu_logged_port(const char *log_path, int timeout_ms);

/* The value of metric `name` (a line "name value") on
 * http://127.0.0.1:port/metrics, or -1 when unreachable or absent. */
double tu_metric(unsigned port, const char *name);

/* Run `go tool pprof -top -symbolize=none -sample_index=IDX path`
 * (EMBER_GO_BIN), failing the test unless it succeeds; returns its output
 * (free with ember_free). Sets GOTOOLCHAIN=local, and GOCACHE under
 * EMBER_TEST_TMP when there is no HOME: never a download. */
char *tu_go_pprof_top(const char *path, const char *sample_index);
/* The `flat` column of that output's row for function `name`, as printed
 * ("1.20s", "350ms", "42"), into flat; NULL when there is no such row. */
const char *tu_pprof_flat(const char *out, const char *name, char *flat, size_t size);
/* A pprof duration as printed ("1.20s", "350ms", "12us", "40ns") in ns;
 * -1 when unreadable. */
int64_t tu_pprof_ns(const char *flat);

/* Run a shell command; its stdout (up to size-1 bytes) into out. Returns
 * the exit status (0..255) or -1 when it did not exit normally. */
int tu_sh(const char *cmd, char *out, size_t size);

/* ember-collector as a process: brokers, data_dir, group_id and
 * api.listen=127.0.0.1:port, retention=0 (tests use old timestamps), then
 * the NULL-terminated `extra` key=value arguments (may be NULL). Waits
 * until it serves /metrics (fails the test after 30 s). */
pid_t tu_start_collector(const char *brokers, const char *data_dir, const char *group,
                         unsigned port, const char *const *extra, const char *log_path);
/* tu_start_collector with NULL-terminated NAME=VALUE environment entries
 * (may be NULL) added to its environment. */
pid_t tu_start_collector_env(const char *brokers, const char *data_dir, const char *group,
                             unsigned port, const char *const *extra, const char *const *env,
                             const char *log_path);
/* SIGTERM `pid` and require a clean exit 0 within 30 s. */
void tu_stop_daemon(pid_t pid, const char *what, const char *log_path);

/* CPU samples of `worker` in the store at <data_dir>/store.lmdb over
 * [from_ns, to_ns) (read-only, so while the collector runs); *work_b (may
 * be NULL) gets the self samples of function work_b. -1 when the store
 * cannot be read yet. */
int64_t tu_stored_samples(const char *data_dir, const char *worker, int64_t from_ns, int64_t to_ns,
                          int64_t *work_b);

/* broker.sh VERB on the test broker (EMBER_TEST_BROKER_SH/_DIR): "halt" or
 * "resume". tu_broker_teardown resumes a halted broker (cmocka teardown). */
void tu_broker(const char *verb);
int tu_broker_teardown(void **state);

/* Is an executable on PATH? Writes its path to buf. */
bool tu_which(const char *name, char *buf, size_t size);

#endif
