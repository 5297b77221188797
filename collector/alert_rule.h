/* Alert rules: the model, parsed and checked from a JSON object (the API's
 * body) or from a rules file (alerts.rules=FILE), and written back as JSON
 * (docs/internals/alerts.md, "Rules"; the fields are in ALERTS-DESIGN).
 *
 * Both sources go through one field-setting path: a JSON member and a file
 * line `key = value` name the same field ("capture.hz" is the JSON member
 * "hz" of "capture"), and each field has one check, so a value is accepted
 * or refused, with the same sentence, whichever way it came.
 *
 * A rules file is INI blocks, one per rule:
 *
 *     # comment (a whole line; a value may itself hold '#', as a URL may)
 *     [rule cpu-hot]
 *     worker = api-*
 *     above = 0.5
 *     for = 20s
 *     capture.type = cpu
 *
 * Values are bare: the text after '=' with the blanks around it removed
 * (quotes are part of the value). A file with any bad line or rule is
 * refused whole.
 *
 * Errors: 0, -EINVAL (a bad field or file; errbuf gets a sentence naming the
 * field, and FILE:LINE for a file, and saying what is allowed), -ENOMEM,
 * -errno or EMBER_ETOOBIG when a file cannot be read. Out-parameters are
 * untouched on failure.
 *
 * Thread-safety: a rule and a rule set are plain values; any number of
 * threads may read one at a time as long as none changes it. */
#ifndef EMBER_COLLECTOR_ALERT_RULE_H
#define EMBER_COLLECTOR_ALERT_RULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ember/codec.h"

#define EMBER__RULE_NAME_MAX  64u
#define EMBER__RULE_LABEL_MAX 256u  /* worker pattern, version, host, actor */
#define EMBER__RULE_FUNC_MAX  1024u /* function name of a "function" rule */
#define EMBER__RULE_URL_MAX   2048u
#define EMBER__RULES_FILE_MAX (1u << 20) /* bytes in a rules file */
#define EMBER__RULES_LINE_MAX 4096u
#define EMBER__RULES_MAX      10000u /* rules in one set */

typedef enum ember__alert_kind {
  EMBER__ALERT_ABOVE = 1, /* above N cores */
  EMBER__ALERT_BASELINE,  /* above factor x the trailing median (and the floor) */
  EMBER__ALERT_FUNCTION   /* one function's self share of the worker's CPU above P% */
} ember__alert_kind_t;

typedef enum ember__alert_group {
  EMBER__GROUP_NONE = 0, /* one alert for the whole selection */
  EMBER__GROUP_VERSION,
  EMBER__GROUP_HOST,
  EMBER__GROUP_ACTOR
} ember__alert_group_t;

typedef enum ember__webhook_format {
  EMBER__WEBHOOK_ALERTMANAGER = 0, /* the default */
  EMBER__WEBHOOK_JSON
} ember__webhook_format_t;

/* Defaults of the optional fields. */
#define EMBER__RULE_DEFAULT_HYSTERESIS      0.1
#define EMBER__RULE_DEFAULT_BASELINE_PERIOD (3600LL * 1000000000LL)
#define EMBER__RULE_DEFAULT_BASELINE_FLOOR  0.1
#define EMBER__RULE_DEFAULT_CAPTURE_MS      5000u
#define EMBER__RULE_DEFAULT_CAPTURE_HZ      1000u
#define EMBER__RULE_DEFAULT_CAPTURE_INST    1u
#define EMBER__RULE_DEFAULT_COOLDOWN        (600LL * 1000000000LL)
#define EMBER__RULE_DEFAULT_MAX_PER_HOUR    4u

/* A checked rule. Strings are owned by the rule (freed by
 * ember__alert_rule_free); NULL = not set. Durations in nanoseconds. */
typedef struct ember__alert_rule {
  char name[EMBER__RULE_NAME_MAX + 1]; /* [A-Za-z0-9_.-]{1,64} */
  char *worker;                        /* literal or glob with '*' (ember__alert_glob_match) */
  char *version, *host, *actor;        /* exact matches; NULL = any */
  ember__alert_group_t group_by;
  ember__alert_kind_t kind;
  double above; /* cores, > 0 (kind ABOVE) */
  struct {
    double factor;     /* > 1 */
    int64_t period_ns; /* >= 1 min; default 1 h */
    double floor;      /* cores >= 0; default 0.1 */
  } baseline;          /* kind BASELINE */
  struct {
    char *name;           /* the function's name as symbolized */
    double percent;       /* 0 < percent <= 100 */
  } function;             /* kind FUNCTION */
  int64_t for_ns;         /* >= 0; 0 fires on the first breaching window */
  double hysteresis;      /* 0 <= h < 1; default 0.1 */
  int64_t resolve_for_ns; /* >= 0; default for_ns */
  bool has_capture;
  struct {
    ember_session_type_t type; /* "cpu" = EMBER_SESSION_CPU, "alloc" = EMBER_SESSION_MEMORY */
    uint32_t duration_ms;      /* 1..600000; default 5000 */
    uint32_t hz;               /* 1..10000; default 1000 */
    uint32_t instances;        /* 0 (every matching host) ..1000; default 1 */
    int64_t cooldown_ns;       /* 0..1 d; default 10 min */
    uint32_t max_per_hour;     /* 1..3600; default 4 */
  } capture;
  char *webhook_url; /* http:// or https://; NULL = the alerts.webhook default */
  ember__webhook_format_t webhook_format;
} ember__alert_rule_t;

/* Parse and check one rule from a JSON object (borrowed). Every member must
 * be a known field of the right type and range; "name", "worker", "for" and
 * exactly one of "above", "baseline", "function" are required. On success
 * *out is a new rule the caller frees with ember__alert_rule_free. Returns
 * 0, -EINVAL (sentence in errbuf, e.g. `field "for": "3x" is not a
 * duration (use 30s, 5m, 1h)`), -ENOMEM. */
int ember__alert_rule_from_json(const json_t *obj, ember__alert_rule_t **out, char *errbuf,
                                size_t errbuf_size);

/* The rule as a JSON object (new reference; NULL when out of memory) with
 * every field, defaults filled in, durations in their largest exact unit
 * ("90s", "1h"). Exact round trip: from_json(to_json(r)) equals r
 * (ember__alert_rule_equal) and to_json of that is the same text. */
json_t *ember__alert_rule_to_json(const ember__alert_rule_t *r);

/* A deep copy (NULL when out of memory). */
ember__alert_rule_t *ember__alert_rule_dup(const ember__alert_rule_t *r);
bool ember__alert_rule_equal(const ember__alert_rule_t *a, const ember__alert_rule_t *b);
void ember__alert_rule_free(ember__alert_rule_t *r); /* NULL is a no-op */

/* Does `s` match the worker pattern `pattern`? '*' matches any run of
 * characters (none too); every other character matches itself. */
bool ember__alert_glob_match(const char *pattern, const char *s);
/* Does the rule select a series with these labels (worker pattern and the
 * exact matches; NULL labels match only a rule that does not set them)? */
bool ember__alert_rule_selects(const ember__alert_rule_t *r, const char *worker,
                               const char *version, const char *host, const char *actor);

/* A set of rules with distinct names, in the order they were added (the
 * file's order). */
typedef struct ember__alert_rules ember__alert_rules_t;

int ember__alert_rules_new(ember__alert_rules_t **out);
void ember__alert_rules_free(ember__alert_rules_t *set); /* NULL is a no-op */

/* Parse a rules file's text (`len` bytes, need not be NUL-terminated;
 * `file` names it in errors). All or nothing: any bad line, field or rule,
 * or two rules of one name, refuses the whole text with
 * `FILE:LINE: field "above": "-1" must be a number of cores above 0`.
 * On success *out is a new set. Returns 0, -EINVAL, -ENOMEM. */
int ember__alert_rules_parse(const char *text, size_t len, const char *file,
                             ember__alert_rules_t **out, char *errbuf, size_t errbuf_size);
/* Read the file at `path` (at most EMBER__RULES_FILE_MAX bytes) and parse
 * it as above. Returns also -errno (cannot open or read) and EMBER_ETOOBIG. */
int ember__alert_rules_load(const char *path, ember__alert_rules_t **out, char *errbuf,
                            size_t errbuf_size);

size_t ember__alert_rules_count(const ember__alert_rules_t *set);
/* The i-th rule (borrowed, valid until the set changes), or NULL. */
const ember__alert_rule_t *ember__alert_rules_at(const ember__alert_rules_t *set, size_t i);
/* The rule named `name` (borrowed, valid until the set changes), or NULL. */
const ember__alert_rule_t *ember__alert_rules_find(const ember__alert_rules_t *set,
                                                   const char *name);
/* Add `rule`, taking ownership of it, even on failure. Returns 0, -EEXIST
 * (a rule of that name is in the set), EMBER_ETOOBIG (EMBER__RULES_MAX
 * rules), -ENOMEM. */
int ember__alert_rules_add(ember__alert_rules_t *set, ember__alert_rule_t *rule);
/* Remove and free the rule named `name`. Returns 0 or EMBER_ENOTFOUND. */
int ember__alert_rules_remove(ember__alert_rules_t *set, const char *name);

#endif
