/* The target registry: which host runs which worker, version and actor, as
 * announced on the compacted topic ember.targets (key "host/pid", value an
 * ember.wire.v1.Target, an empty value = the process exited).
 *
 * Every collector keeps the whole registry in memory: it is small (one
 * record per profiled process in the fleet) and rebuilt from the topic at
 * start. Thread-safe: one writer (the registry thread), any readers. */
#ifndef EMBER_COLLECTOR_REGISTRY_H
#define EMBER_COLLECTOR_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "ember/codec.h"
#include "ember/store.h"

typedef struct ember__registry ember__registry_t;

int ember__registry_new(ember__registry_t **out);
void ember__registry_free(ember__registry_t *r);

/* Apply one ember.targets message: `value` NULL or empty deletes `key`;
 * otherwise the decoded record replaces what `key` held. Returns 0,
 * EMBER_ECORRUPT/EMBER_EVERSION (sentence in errbuf; registry unchanged),
 * -EINVAL (empty key), -ENOMEM. */
int ember__registry_apply(ember__registry_t *r, const void *key, size_t keylen, const void *value,
                          size_t len, char *errbuf, size_t errbuf_size);

/* A copy of the records whose worker/version/host/actor match `sel` (NULL =
 * all; NULL fields match anything) and were seen at or after `seen_after_ns`,
 * sorted by key. Free with ember__registry_list_free. */
int ember__registry_list(ember__registry_t *r, const ember_store_selector_t *sel,
                         int64_t seen_after_ns, ember_target_record_t **out, size_t *count);
void ember__registry_list_free(ember_target_record_t *list, size_t count);

size_t ember__registry_count(ember__registry_t *r);

#endif
