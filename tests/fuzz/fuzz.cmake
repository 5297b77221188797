# libFuzzer targets, built only with -DEMBER_FUZZ=ON under clang. CI runs
# each for a fixed time (scripts/test.sh); the seed corpora are committed:
# corpus/ for fuzz_codec, corpus_perfmap/, corpus_procmaps/, corpus_cfi/ and
# corpus_debuginfo/ and corpus_heapshm/ for the parsers of files a
# profiled process controls,
# corpus_rules/ for alert rules (API bodies and rules files),
# corpus_sourcemap/ for source maps.
if(EMBER_FUZZ)
  add_executable(fuzz_codec ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_codec.c)
  target_link_libraries(fuzz_codec PRIVATE ember)
  target_link_options(fuzz_codec PRIVATE -fsanitize=fuzzer)
  ember_warnings(fuzz_codec)
  # The parsers' own sources, not all of ember_agent_lib: the fuzzer needs
  # only these, and builds them in seconds.
  set(agent ${PROJECT_SOURCE_DIR}/agent)
  add_executable(fuzz_perfmap ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_perfmap.c
                 ${agent}/perfmap.c ${agent}/procfs.c ${agent}/safefile.c ${agent}/strarena.c)
  add_executable(fuzz_procmaps ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_procmaps.c
                 ${agent}/procmaps.c ${agent}/procfs.c ${agent}/safefile.c ${agent}/strarena.c)
  # libember_alloc.so's control file as a hostile process writes it.
  add_executable(fuzz_heapshm ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_heapshm.c ${agent}/heapshm.c
                 ${agent}/procfs.c ${agent}/procmaps.c ${agent}/safefile.c ${agent}/strarena.c)
  add_executable(fuzz_cfi ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_cfi.c ${agent}/cfi.c ${agent}/unwind.c)
  target_link_libraries(fuzz_cfi PRIVATE PkgConfig::LIBELF)
  # The debug-info readers and the demangler: what a hostile binary's
  # .gnu_debuglink and .gnu_debugdata sections and symbol names give them.
  add_executable(fuzz_debuginfo ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_debuginfo.c
                 ${agent}/debuginfo.c ${agent}/demangle.c ${agent}/safefile.c)
  target_include_directories(fuzz_debuginfo PRIVATE ${LIBIBERTY_INCLUDE_DIR})
  target_link_libraries(fuzz_debuginfo PRIVATE PkgConfig::LIBDW PkgConfig::LIBELF PkgConfig::LZMA
                        PkgConfig::ZLIB ${LIBIBERTY_LIBRARY})
  # Alert rules: the API's JSON bodies (any client) and rules files.
  set(collector ${PROJECT_SOURCE_DIR}/collector)
  add_executable(fuzz_rules ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_rules.c ${collector}/alert_rule.c)
  target_include_directories(fuzz_rules PRIVATE ${collector} ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(fuzz_rules PRIVATE ember PkgConfig::JANSSON)
  target_link_options(fuzz_rules PRIVATE -fsanitize=fuzzer)
  ember_warnings(fuzz_rules)
  # Source maps: what a script's deployer wrote (src/sourcemap.c is in ember).
  add_executable(fuzz_sourcemap ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_sourcemap.c)
  target_link_libraries(fuzz_sourcemap PRIVATE ember)
  target_link_options(fuzz_sourcemap PRIVATE -fsanitize=fuzzer)
  ember_warnings(fuzz_sourcemap)
  foreach(name fuzz_perfmap fuzz_procmaps fuzz_heapshm fuzz_cfi fuzz_debuginfo)
    # src/ too: agent sources share its private headers (array.h).
    target_include_directories(${name} PRIVATE ${agent} ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(${name} PRIVATE ember)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    ember_warnings(${name})
  endforeach()
endif()
