/* ember-collector: Kafka ingest into the store, target registry, HTTP API.
 *
 *   ember-collector [--config FILE] [key=value ...]
 *
 * Flags after the file override it. See docs/internals/collector.md for the
 * keys. */
#include <stdio.h>
#include <string.h>

#include "collector.h"
#include "ember/log.h"

int main(int argc, char **argv) {
  ember_config_t *cfg = NULL;
  char err[512] = "";
  if (ember_config_new(&cfg) != 0) return 1;
  int n = ember_config_apply_args(cfg, argc - 1, argv + 1, err, sizeof err);
  if (n >= 0 && n < argc - 1 &&
      (strcmp(argv[n + 1], "--help") == 0 || strcmp(argv[n + 1], "-h") == 0)) {
    printf("usage: ember-collector [--config FILE] [key=value ...]\n");
    ember_config_free(cfg);
    return 0;
  }
  if (n != argc - 1) {
    fprintf(stderr, "ember-collector: %s\n", err);
    ember_config_free(cfg);
    return 2;
  }
  if (ember_config_check(cfg, ember__collector_config_keys, err, sizeof err) != 0) {
    fprintf(stderr, "ember-collector: %s\n", err);
    ember_config_free(cfg);
    return 2;
  }
  ember_log_level_t level;
  const char *lv = ember_config_get_str(cfg, "log_level", "info");
  if (ember_log_parse_level(lv, &level) != 0) {
    fprintf(stderr, "ember-collector: log_level '%s': expected debug, info, warn or error\n", lv);
    ember_config_free(cfg);
    return 2;
  }
  ember_log_set_level(level);
  int rc = ember__collector_run(cfg);
  ember_config_free(cfg);
  return rc == 0 ? 0 : 1;
}
