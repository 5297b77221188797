# Integration tests against a real single-node Apache Kafka broker.
#
# The broker is a CTest fixture: broker_start runs tests/kafka/broker.sh
# (which needs java, mvn on the first run, kcat and ss) and writes the
# broker's address to broker/bootstrap in the build tree; every test that
# requires the kafka_broker fixture reads it from EMBER_TEST_BOOTSTRAP_FILE;
# broker_stop stops the broker whatever the tests did. Each build tree runs
# its own broker, so two trees can test at once.
#
#   ctest -L integration            everything here
#   ctest -R test_kafka_broker      one test; CTest adds start and stop

set(EMBER_BROKER_DIR ${CMAKE_CURRENT_BINARY_DIR}/broker)
set(EMBER_BROKER_SH ${PROJECT_SOURCE_DIR}/tests/kafka/broker.sh)

add_test(NAME broker_start COMMAND ${EMBER_BROKER_SH} start ${EMBER_BROKER_DIR})
# The first start downloads the Kafka jars with Maven.
set_tests_properties(broker_start PROPERTIES
  FIXTURES_SETUP kafka_broker TIMEOUT 300 LABELS integration)

add_test(NAME broker_stop COMMAND ${EMBER_BROKER_SH} stop ${EMBER_BROKER_DIR})
# broker.sh waits 30 s for SIGTERM, then kills.
set_tests_properties(broker_stop PROPERTIES
  FIXTURES_CLEANUP kafka_broker TIMEOUT 120 LABELS integration)

ember_test(integration test_kafka_broker integration)
set_tests_properties(test_kafka_broker PROPERTIES FIXTURES_REQUIRED kafka_broker)
# ember_test already sets ENVIRONMENT (CMOCKA_MESSAGE_OUTPUT); add to it.
set_property(TEST test_kafka_broker APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${EMBER_BROKER_DIR}/bootstrap)

# A second broker for the outage tests, which halt theirs (broker.sh
# halt/resume: same address and data) for 15-30 s. With a broker of their
# own they no longer stop every other test: the lock below keeps them from
# halting it under one another, and the rest of the suite runs beside them
# on the shared broker (they used to be RUN_SERIAL, ~3 minutes of one idle
# core per tree).
set(EMBER_OUTAGE_BROKER_DIR ${CMAKE_CURRENT_BINARY_DIR}/broker-outage)
add_test(NAME outage_broker_start COMMAND ${EMBER_BROKER_SH} start ${EMBER_OUTAGE_BROKER_DIR})
set_tests_properties(outage_broker_start PROPERTIES
  FIXTURES_SETUP kafka_outage_broker TIMEOUT 300 LABELS integration)
add_test(NAME outage_broker_stop COMMAND ${EMBER_BROKER_SH} stop ${EMBER_OUTAGE_BROKER_DIR})
set_tests_properties(outage_broker_stop PROPERTIES
  FIXTURES_CLEANUP kafka_outage_broker TIMEOUT 120 LABELS integration)

# ember_outage_test(NAME): NAME runs against the outage broker, alone on it.
function(ember_outage_test name)
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED kafka_outage_broker
    RESOURCE_LOCK kafka_outage_broker TIMEOUT 400)
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT
    EMBER_TEST_BOOTSTRAP_FILE=${EMBER_OUTAGE_BROKER_DIR}/bootstrap
    EMBER_TEST_BROKER_DIR=${EMBER_OUTAGE_BROKER_DIR}
    EMBER_TEST_BROKER_SH=${EMBER_BROKER_SH})
endfunction()

# The publisher through a real outage: the broker is halted for 30 s while
# it publishes.
ember_test(integration test_publish_outage integration)
ember_outage_test(test_publish_outage)

# Agent and collector through the broker's SASL_SSL listener (TLS with the
# throw-away CA broker.sh makes, SASL/SCRAM or PLAIN): a window end to end,
# and a wrong password that must stop both at start.
ember_test(integration test_kafka_tls integration)
add_dependencies(test_kafka_tls ember-collector ember_agent)
set_tests_properties(test_kafka_tls PROPERTIES FIXTURES_REQUIRED kafka_broker TIMEOUT 300)
set_property(TEST test_kafka_tls APPEND PROPERTY ENVIRONMENT
  EMBER_TEST_BOOTSTRAP_FILE=${EMBER_BROKER_DIR}/bootstrap
  EMBER_TEST_BROKER_DIR=${EMBER_BROKER_DIR})
