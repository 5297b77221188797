# libFuzzer targets, built only with -DEMBER_FUZZ=ON under clang. CI runs
# each for a fixed time (scripts/test.sh); the seed corpus is committed.
if(EMBER_FUZZ)
  add_executable(fuzz_codec ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_codec.c)
  target_link_libraries(fuzz_codec PRIVATE ember)
  target_link_options(fuzz_codec PRIVATE -fsanitize=fuzzer)
  ember_warnings(fuzz_codec)
endif()
