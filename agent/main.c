/* ember-agent: always-on profiling of every process on this host.
 *
 *   ember-agent [--config FILE] [key=value ...]
 *
 * Flags after the file override it. See docs/internals/agent.md for the
 * keys. */
#include <malloc.h>

#include "agent.h"
#include "ember/log.h"

int main(int argc, char **argv) {
  /* A fixed mmap threshold (setting it turns off glibc's dynamic one,
   * which rises to the largest block freed so far): the agent's large,
   * long-lived but evictable blocks (debug sections, symbol and unwind
   * tables) are then mappings of their own that go back to the kernel
   * when freed, not holes in an arena. ~10% less RSS under churn, no
   * CPU change measured (bench/RESULTS.md, 2026-12-01). */
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  ember_config_t *cfg = NULL;
  int status = ember_config_daemon_args("ember-agent",
                                        "usage: ember-agent [--config FILE] [key=value ...]\n",
                                        argc - 1, argv + 1, ember__agent_config_keys, &cfg);
  if (status >= 0) return status;
  /* A refused login is a configuration error to fix, not an outage to
   * ride out: say so once and stop, before anything else starts. */
  char err[1024] = "";
  if (ember_kafka_check_startup(cfg, EMBER_KAFKA_STARTUP_CHECK_MS, err, sizeof err) != 0) {
    EMBER_ERROR("kafka", "%s", err);
    ember_config_free(cfg);
    return 1;
  }
  int rc = ember__agent_run(cfg, NULL);
  ember_config_free(cfg);
  return rc == 0 ? 0 : 1;
}
