/* Configuration: a file of `key = value` lines, then flags on top.
 *
 * The file format is deliberately small: one `key = value` per line, `#`
 * starts a comment line, blank lines are ignored, values run to the end of
 * the line with surrounding blanks removed. Keys are dotted names
 * (`continuous_hz`, `kafka.security.protocol`). A later setting of a key
 * replaces an earlier one, so flags applied after the file win.
 *
 * Each binary lists the keys it knows; ember_config_check() rejects any
 * other, naming the file line, so a typo never silently does nothing.
 *
 * Not thread-safe; build the configuration before starting threads, then
 * only read it. */
#ifndef EMBER_CONFIG_H
#define EMBER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/ember.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_config ember_config_t;

/* Largest config file accepted, and longest line. */
#define EMBER_CONFIG_MAX_FILE (1u << 20)
#define EMBER_CONFIG_MAX_LINE 4096u

EMBER_API int ember_config_new(ember_config_t **out);
EMBER_API void ember_config_free(ember_config_t *cfg);

/* Read a file. On a syntax error returns EMBER_ECONFIG and writes e.g.
 * "ember.conf line 12: expected 'key = value'" to errbuf; a file that cannot
 * be read returns -errno with the path in errbuf. Keys already set by the
 * file are kept on error. */
EMBER_API int ember_config_load(ember_config_t *cfg, const char *path, char *errbuf,
                                size_t errbuf_size);
/* Set one key (copies both). Returns 0, -EINVAL for an empty or malformed
 * key, -ENOMEM. */
EMBER_API int ember_config_set(ember_config_t *cfg, const char *key, const char *value);
/* Set from a flag argument "key=value". */
EMBER_API int ember_config_set_arg(ember_config_t *cfg, const char *arg, char *errbuf,
                                   size_t errbuf_size);

/* Apply command-line arguments in order: `--config FILE` (or
 * `--config=FILE`) loads FILE, `key=value` sets a key, so later arguments
 * override earlier ones and the file. Stops at the first argument that is
 * neither and returns its index (argc when all were used), so a command can
 * handle its own flags there and call again with the rest:
 *
 *   for (int i = 0; i < argc;) {
 *     int n = ember_config_apply_args(cfg, argc - i, argv + i, err, sizeof err);
 *     if (n < 0) fail(err);
 *     if ((i += n) == argc) break;
 *     if (strcmp(argv[i], "--data") == 0 && i + 1 < argc) { data = argv[i + 1]; i += 2; }
 *     else fail(err);
 *   }
 *
 * When it stops early, errbuf already says "unknown argument 'X' (expected
 * --config FILE or key=value)" for callers that have no flags of their own.
 * Returns the index, or a negative code with a sentence in errbuf:
 * EMBER_ECONFIG (--config without FILE, a malformed key, a syntax error in
 * the file), -errno (the file cannot be read), -ENOMEM. argv is borrowed. */
EMBER_API int ember_config_apply_args(ember_config_t *cfg, int argc, char *const *argv,
                                      char *errbuf, size_t errbuf_size);

/* A daemon's whole command line: `prog [--config FILE] [key=value ...]`.
 * Applies the arguments, answers --help/-h with `usage` on stdout, checks
 * every key against `known` (see ember_config_check), and sets the log
 * level from `log_level`. Errors go to stderr as "prog: sentence".
 * Returns -1 with *out set (the caller frees it) to go on, or the exit
 * status to return at once (0 after --help, 2 for bad arguments or
 * config, 1 out of memory) with *out NULL. */
EMBER_API int ember_config_daemon_args(const char *prog, const char *usage, int argc,
                                       char *const *argv, const char *const *known,
                                       ember_config_t **out);

/* Fail with EMBER_ECONFIG on the first key not in `known` (a NULL-terminated
 * list; an entry ending in '.' accepts every key with that prefix). */
EMBER_API int ember_config_check(const ember_config_t *cfg, const char *const *known, char *errbuf,
                                 size_t errbuf_size);

/* The value of `key`, or NULL when unset. Borrowed: valid until the key is
 * set again or the config is freed. */
EMBER_API const char *ember_config_get(const ember_config_t *cfg, const char *key);
/* Value or `def` when unset. */
EMBER_API const char *ember_config_get_str(const ember_config_t *cfg, const char *key,
                                           const char *def);
/* Typed getters: `def` when unset; EMBER_ECONFIG with a sentence in errbuf
 * when the value is malformed or outside [min, max]. */
EMBER_API int ember_config_get_u64(const ember_config_t *cfg, const char *key, uint64_t def,
                                   uint64_t min, uint64_t max, uint64_t *out, char *errbuf,
                                   size_t errbuf_size);
EMBER_API int ember_config_get_bool(const ember_config_t *cfg, const char *key, bool def, bool *out,
                                    char *errbuf, size_t errbuf_size);
EMBER_API int ember_config_get_duration_ns(const ember_config_t *cfg, const char *key, int64_t def,
                                           int64_t min, int64_t max, int64_t *out, char *errbuf,
                                           size_t errbuf_size);

/* Visit every key with `prefix` in the order first set: fn gets the key
 * without the prefix. A non-zero return from fn stops and is returned. */
EMBER_API int ember_config_each(const ember_config_t *cfg, const char *prefix,
                                int (*fn)(void *ctx, const char *key, const char *value),
                                void *ctx);

#ifdef __cplusplus
}
#endif
#endif
