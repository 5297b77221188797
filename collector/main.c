/* ember-collector: Kafka ingest into the store, target registry, HTTP API.
 *
 *   ember-collector [--config FILE] [key=value ...]
 *
 * Flags after the file override it. See docs/internals/collector.md for the
 * keys. */
#include "collector.h"
#include "ember/log.h"
#include "ingest.h"

int main(int argc, char **argv) {
  ember__ingest_malloc_policy();
  ember_config_t *cfg = NULL;
  int status = ember_config_daemon_args("ember-collector",
                                        "usage: ember-collector [--config FILE] [key=value ...]\n",
                                        argc - 1, argv + 1, ember__collector_config_keys, &cfg);
  if (status >= 0) return status;
  /* A refused login is a configuration error to fix, not an outage to
   * ride out: say so once and stop, before anything else starts. */
  char err[1024] = "";
  if (ember_kafka_check_startup(cfg, EMBER_KAFKA_STARTUP_CHECK_MS, err, sizeof err) != 0) {
    EMBER_ERROR("kafka", "%s", err);
    ember_config_free(cfg);
    return 1;
  }
  int rc = ember__collector_run(cfg);
  ember_config_free(cfg);
  return rc == 0 ? 0 : 1;
}
