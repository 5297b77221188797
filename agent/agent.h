/* The agent: discovery + sampling + windows + symbolization + publishing,
 * wired together on one libuv loop and one window-closing thread.
 *
 *   loop thread:  perf rings -> ember__window (raw stacks per pid)
 *                 netlink/scan -> discovery; timers: window close, targets,
 *                 metrics; signals
 *   close thread: closed window -> per pid: symbolize unique stacks ->
 *                 ember_profile_t -> encode -> publisher (Kafka / spool)
 *
 * The loop never waits on the close thread: closed windows are handed over
 * through a short bounded queue (a window that finds it full is dropped,
 * counted and logged).
 *
 * Config keys: see ember__agent_config_keys (and docs/internals/agent.md). */
#ifndef EMBER_AGENT_AGENT_H
#define EMBER_AGENT_AGENT_H

#include "ember/config.h"
#include "ember/kafka.h"

extern const char *const ember__agent_config_keys[];

/* Run until SIGTERM/SIGINT. `kafka` (borrowed, may be NULL) is the Kafka
 * context to publish through, e.g. `ember up`'s embedded cluster; NULL makes
 * one from cfg. Returns 0 after a clean shutdown (open window published or
 * spooled), or an error code with a sentence already logged. */
int ember__agent_run(const ember_config_t *cfg, ember_kafka_t *kafka);

#endif
