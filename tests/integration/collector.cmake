# ember-collector against the real broker (the kafka_broker fixture): a
# SIGKILL in the middle of ingest, and malformed messages from kcat.
ember_test(integration test_collector_broker integration)
add_dependencies(test_collector_broker ember-collector)
set_tests_properties(test_collector_broker PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 400)
set_property(TEST test_collector_broker APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Shards: a collector killed between its store's commit and its offset
# commit reads nothing twice (collector/shards.h).
ember_test(integration test_collector_shards integration)
add_dependencies(test_collector_shards ember-collector)
set_tests_properties(test_collector_shards PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 400)
set_property(TEST test_collector_shards APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Several collectors as one fleet: fan-out queries, a replica group, two
# real agents, a crash between the store's commit and Kafka's
# (docs/internals/fleet.md). zlib's crc32 picks worker names that land on
# every partition (librdkafka's default partitioner).
ember_test(integration test_fleet_query integration)
target_link_libraries(test_fleet_query PRIVATE PkgConfig::ZLIB)
add_dependencies(test_fleet_query ember-collector ember_agent prog_burn)
set_tests_properties(test_fleet_query PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 500)
set_property(TEST test_fleet_query APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Agent + collector + `ember query` + go tool pprof, all real processes.
ember_test(integration test_e2e integration)
add_dependencies(test_e2e ember-collector ember_agent ember_cli)
set_tests_properties(test_e2e PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 400)
set_property(TEST test_e2e APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Agents on wire v1 and v2 feeding one collector: exactly what each
# published is stored (issue 14).
ember_test(integration test_wire_mixed integration)
add_dependencies(test_wire_mixed ember-collector ember_agent prog_burn)
set_tests_properties(test_wire_mixed PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_wire_mixed APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# The collector through a 15 s broker outage (the outage broker).
ember_test(integration test_collector_outage integration)
add_dependencies(test_collector_outage ember-collector)
ember_outage_test(test_collector_outage)

# On-demand sessions: collector + two agents + `ember profile`, CPU and
# memory (uprobe and preload), against the real broker. It keeps a CPU
# burner and two allocating programs busy for a minute, which would starve
# the timing-sensitive tests beside it, so it runs alone.
ember_test(integration test_session_e2e integration)
add_dependencies(test_session_e2e ember-collector ember_agent ember_cli ember_alloc_preload)
set_tests_properties(test_session_e2e PROPERTIES FIXTURES_REQUIRED kafka_broker RUN_SERIAL TRUE
  TIMEOUT 300)
set_property(TEST test_session_e2e APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Alerting end to end: agent, collector with rules, webhook receivers in
# the test, captures and a SIGKILL. It keeps programs burning two threads
# for minutes and asserts on their CPU, so it runs alone.
ember_test(integration test_alerts integration)
add_dependencies(test_alerts ember-collector ember_agent prog_spike)
target_link_libraries(test_alerts PRIVATE PkgConfig::MHD)
set_tests_properties(test_alerts PROPERTIES FIXTURES_REQUIRED kafka_broker RUN_SERIAL TRUE
  TIMEOUT 500)
set_property(TEST test_alerts APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Two collectors in one group know each other through ember.collectors:
# each lists both with their partitions; a SIGTERM'd one is seen stopping.
ember_test(integration test_fleet integration)
add_dependencies(test_fleet ember-collector)
set_tests_properties(test_fleet PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_fleet APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# The in-use heap: agent, collector, CLI, API and go tool pprof on programs
# built without frame pointers that run with libember_alloc.so (issue 15).
ember_test(integration test_heap_e2e integration)
add_dependencies(test_heap_e2e ember-collector ember_agent ember_cli ember_alloc_preload
  prog_heapgrow_nofp)
set_tests_properties(test_heap_e2e PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 900)
set_property(TEST test_heap_e2e APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)
