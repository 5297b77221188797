# On-demand sessions on ember-agent (issue 5): two real agents, real burn
# programs, commands and events through the real broker.
ember_test(integration test_session_agent integration)
add_dependencies(test_session_agent ember_agent prog_burn)
set_tests_properties(test_session_agent PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 180)
set_property(TEST test_session_agent APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)
