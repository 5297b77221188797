# The dashboard (issues 6 and 12) in a real browser: ember-collector
# serving web/ and fed by a real ember-agent profiling real programs
# through the real broker (one of them a spike that fires an alert),
# driven by tests/browser/dashboard.test.mjs (playwright-core and Debian's
# chromium: scripts/deps.sh and scripts/npm-deps.sh install them).
# Screenshots of each view go to tmp/screenshots-<tag>/ in the build tree.
# It keeps two burners, two versions of a program and a browser busy, so it
# runs alone.
ember_test(integration test_dashboard integration)
add_dependencies(test_dashboard ember-collector ember_agent prog_burn prog_versioned prog_spike
  prog_heapgrow ember_alloc_preload)
set_tests_properties(test_dashboard PROPERTIES FIXTURES_REQUIRED kafka_broker RUN_SERIAL TRUE
  TIMEOUT 420)
set_property(TEST test_dashboard APPEND PROPERTY
  ENVIRONMENT EMBER_TEST_BOOTSTRAP_FILE=${CMAKE_CURRENT_BINARY_DIR}/broker/bootstrap)
