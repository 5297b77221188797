/* ember-agent: always-on profiling of every process on this host.
 *
 *   ember-agent [--config FILE] [key=value ...]
 *
 * Flags after the file override it. See docs/internals/agent.md for the
 * keys. */
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "ember/log.h"

int main(int argc, char **argv) {
  ember_config_t *cfg = NULL;
  char err[512] = "";
  if (ember_config_new(&cfg) != 0) return 1;
  for (int i = 1; i < argc; i++) {
    int rc;
    if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
      rc = ember_config_load(cfg, argv[++i], err, sizeof err);
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: ember-agent [--config FILE] [key=value ...]\n");
      ember_config_free(cfg);
      return 0;
    } else if (argv[i][0] != '-' && strchr(argv[i], '=') != NULL) {
      rc = ember_config_set_arg(cfg, argv[i], err, sizeof err);
    } else {
      snprintf(err, sizeof err, "unknown argument '%s' (expected --config FILE or key=value)",
               argv[i]);
      rc = EMBER_ECONFIG;
    }
    if (rc != 0) {
      fprintf(stderr, "ember-agent: %s\n", err);
      ember_config_free(cfg);
      return 2;
    }
  }
  if (ember_config_check(cfg, ember__agent_config_keys, err, sizeof err) != 0) {
    fprintf(stderr, "ember-agent: %s\n", err);
    ember_config_free(cfg);
    return 2;
  }
  ember_log_level_t level;
  const char *lv = ember_config_get_str(cfg, "log_level", "info");
  if (ember_log_parse_level(lv, &level) != 0) {
    fprintf(stderr, "ember-agent: log_level '%s': expected debug, info, warn or error\n", lv);
    ember_config_free(cfg);
    return 2;
  }
  ember_log_set_level(level);
  int rc = ember__agent_run(cfg, NULL);
  ember_config_free(cfg);
  return rc == 0 ? 0 : 1;
}
