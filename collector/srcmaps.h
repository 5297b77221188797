/* Source maps uploaded to the collector (issue 16, item 2;
 * docs/internals/sourcemaps.md, "Uploaded maps"). Deploy pipelines often
 * keep maps off the servers, so the agent cannot find them: a pipeline
 * uploads the map of a script for a worker and version, and the frames of
 * that worker and version that the agent could not map are mapped when a
 * profile is read, in every export format.
 *
 *  - Upload (ember__srcmaps_upload, POST /api/v1/sourcemaps): the map is
 *    decoded as the agent decodes maps (src/sourcemap.c; a refusal says
 *    why), compressed (zstd), and shared on the compacted topic
 *    ember.sourcemaps (shared.h), key "WORKER\0VERSION\0SCRIPT"; the answer
 *    waits for the broker. A deletion is an empty record.
 *  - Every collector follows the topic and keeps each map, compressed, in
 *    its store's "sourcemaps" documents (so a restart, or `ember up`'s
 *    in-process broker, keeps them), with an index in memory; decoded maps
 *    are cached, least recently used out, within `memory` bytes.
 *  - Reads: ember__srcmaps_frame_map is the store's frame map
 *    (ember_store_set_frame_map): for a worker and version with maps, a
 *    JIT frame the agent left as V8 named it ("JS:*a /srv/app/dist/app.js:
 *    1:4711") whose script matches an uploaded script (the same path, or
 *    the upload names a tail of it at a '/': "app.js", "dist/app.js"; the
 *    longest match wins) gets the original name, file and line, the
 *    script as its module and V8's name as its generated name, as the
 *    agent maps it (sourcemaps.md, "Naming a function"). Relative sources
 *    are resolved against the script's directory.
 *
 * A map uploaded without a version (version "") is for every version of
 * its worker that has no map of its own for that script: a pipeline that
 * does not know the version label the agents give (by default the
 * executable's build id) still gets its frames named.
 *
 * Thread-safety: every call may run on any thread at once (one mutex
 * guards the index and the cache; a map is decoded under it). */
#ifndef EMBER_COLLECTOR_SRCMAPS_H
#define EMBER_COLLECTOR_SRCMAPS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "ember/config.h"
#include "ember/kafka.h"
#include "ember/metrics.h"
#include "ember/sourcemap.h"
#include "ember/store.h"

typedef struct ember__srcmaps ember__srcmaps_t;

/* The config keys (collector.c's list). */
#define EMBER__SRCMAPS_CONFIG_KEYS "sourcemaps.max_bytes", "sourcemaps.memory"
/* The largest map, as JSON, an upload may carry by default (the agent's
 * bound too), and what a compressed one may come to on the topic. */
#define EMBER__SRCMAPS_MAX_BYTES  EMBER_SOURCEMAP_MAX_BYTES
#define EMBER__SRCMAPS_MAX_STORED (EMBER_STORE_DOC_SOURCEMAP_MAX - 64u * 1024u)
/* Script names: bytes at most. */
#define EMBER__SRCMAPS_MAX_SCRIPT 1024u

typedef struct ember__srcmaps_opts {
  ember_store_t *store;     /* borrowed: the maps' documents, and whose reads it maps */
  ember_metrics_t *metrics; /* NULL = no metrics */
  uint64_t max_bytes;       /* an uploaded map's JSON at most; 0 = EMBER__SRCMAPS_MAX_BYTES */
  uint64_t memory;          /* decoded maps held; 0 = 256 MiB */
  int timeout_ms;           /* how long an upload waits for the broker; 0 = 10 s */
} ember__srcmaps_opts_t;

/* Read sourcemaps.max_bytes and sourcemaps.memory into `o`. */
int ember__srcmaps_read_config(const ember_config_t *cfg, ember__srcmaps_opts_t *o, char *err,
                               size_t err_size);

/* Make the index from the store's documents (a damaged one is skipped,
 * logged and counted). 0, -ENOMEM, or the store's error with a sentence. */
int ember__srcmaps_new(const ember__srcmaps_opts_t *o, ember__srcmaps_t **out, char *err,
                       size_t err_size);
/* Share through, and follow, ember.sourcemaps. 0, EMBER_EKAFKA, -EAGAIN,
 * -ENOMEM with a sentence. */
int ember__srcmaps_start(ember__srcmaps_t *m, ember_kafka_t *kafka, char *err, size_t err_size);
/* Stop following (NULL is a no-op); ember__srcmaps_free after the store's
 * readers are gone (the store's frame map points here). */
void ember__srcmaps_stop(ember__srcmaps_t *m);
void ember__srcmaps_free(ember__srcmaps_t *m);

/* The store's frame map, for ember_store_set_frame_map. */
void ember__srcmaps_frame_map(ember__srcmaps_t *m, ember_store_frame_map_t *out);

/* The largest upload (for the HTTP layer's body bound). */
uint64_t ember__srcmaps_max_bytes(const ember__srcmaps_t *m);

/* What an upload or a deletion came to. */
typedef enum ember__srcmaps_status {
  EMBER__SRCMAPS_OK = 0,
  EMBER__SRCMAPS_BAD,       /* bad names, or a map the decoder refused (400) */
  EMBER__SRCMAPS_TOO_BIG,   /* over max_bytes, or too large compressed (413) */
  EMBER__SRCMAPS_NOT_FOUND, /* a deletion of no map (404) */
  EMBER__SRCMAPS_UNSHARED,  /* the broker did not take it (503) */
  EMBER__SRCMAPS_FAILED     /* out of memory (500) */
} ember__srcmaps_status_t;

/* Upload `len` bytes of map JSON for (worker, version, script): decoded,
 * compressed, shared, and in this collector's index when it returns OK
 * (its own record is applied before the answer, not only when the follower
 * reads it back). *info (may be NULL) gets {"worker", "version", "script",
 * "bytes", "stored_bytes", "segments"}. The sentence
 * in err says what was wrong. */
ember__srcmaps_status_t ember__srcmaps_upload(ember__srcmaps_t *m, const char *worker,
                                              const char *version, const char *script,
                                              const char *json, size_t len, json_t **info,
                                              char *err, size_t err_size);
/* Delete the map of (worker, version, script) fleet-wide. */
ember__srcmaps_status_t ember__srcmaps_delete(ember__srcmaps_t *m, const char *worker,
                                              const char *version, const char *script, char *err,
                                              size_t err_size);
/* The maps held, of `worker` (NULL = all), as an array of {"worker",
 * "version", "script", "bytes", "stored_bytes", "uploaded_ms"} in key
 * order. NULL when out of memory. */
json_t *ember__srcmaps_list(ember__srcmaps_t *m, const char *worker);

#endif
