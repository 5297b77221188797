# ember-agent end-to-end tests: the real agent binary, real programs, the
# real broker (the kafka_broker fixture from integration.cmake).
ember_test(integration test_agent integration)
add_dependencies(test_agent ember_agent)
set_tests_properties(test_agent PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_agent APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Windows on the real clock: 1 s windows for 60 s (EMBER_TEST_WINDOW_SECONDS
# makes it longer: 600 for the issue's ten minutes, outside CI; the timeout
# leaves room for that run).
ember_test(integration test_agent_windows integration)
add_dependencies(test_agent_windows ember_agent)
set_tests_properties(test_agent_windows PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 900)
set_property(TEST test_agent_windows APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# The agent through a 30 s broker outage (the outage broker).
ember_test(integration test_agent_outage integration)
add_dependencies(test_agent_outage ember_agent)
ember_outage_test(test_agent_outage)

# `ember up` end to end: the embedded Kafka, no broker needed.
ember_test(integration test_up integration)
add_dependencies(test_up ember_cli)
set_tests_properties(test_up PROPERTIES TIMEOUT 120)

# The agent beside a FIFO and a 2 GB sparse perf map (hostile files).
ember_test(integration test_agent_files integration)
add_dependencies(test_agent_files ember_agent prog_jitburn)
set_tests_properties(test_agent_files PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_agent_files APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Unwinding without frame pointers: a -O2 -fomit-frame-pointer program,
# Debian's python3 and xz beside `perf record --call-graph dwarf`, Node.js.
ember_test(integration test_agent_unwind integration)
add_dependencies(test_agent_unwind ember_agent prog_nofp)
set_tests_properties(test_agent_unwind PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_agent_unwind APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Source maps of a TypeScript service bundled by esbuild (issue 16): the
# map linked, beside the bundle and inline, and three hostile maps. Needs
# tests/jsbundle/node_modules (scripts/npm-deps.sh) and Node.js.
ember_test(integration test_sourcemaps integration)
add_dependencies(test_sourcemaps ember_agent)
set_tests_properties(test_sourcemaps PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_sourcemaps APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)
