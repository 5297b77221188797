# On-demand sessions on ember-agent (issue 5): two real agents, real burn
# programs, commands and events through the real broker.
ember_test(integration test_session_agent integration)
add_dependencies(test_session_agent ember_agent prog_burn)
set_tests_properties(test_session_agent PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 180)
set_property(TEST test_session_agent APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)

# Sessions fleet-wide (issue 13): two collectors in one group as processes
# and one agent; a session started on one is watched and downloaded from
# the other, and both keep it across a restart of the first.
ember_test(integration test_session_fleet integration)
add_dependencies(test_session_fleet ember-collector ember_agent prog_burn)
set_tests_properties(test_session_fleet PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_session_fleet APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)
