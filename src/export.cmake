# The exporters (pprof, folded, speedscope, tree), included by
# src/CMakeLists.txt after the `ember` target is defined.

ember_protoc_c(EMBER_PPROF_PROTO_SRCS ${CMAKE_CURRENT_SOURCE_DIR}/proto pprof)

# Generated code is compiled apart, without Ember's picky warnings.
add_library(ember_pprof_proto STATIC ${EMBER_PPROF_PROTO_SRCS})
target_include_directories(ember_pprof_proto PUBLIC ${CMAKE_CURRENT_BINARY_DIR})
target_link_libraries(ember_pprof_proto PUBLIC PkgConfig::PROTOBUFC)
set_target_properties(ember_pprof_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)

target_sources(ember PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/export.c
  ${CMAKE_CURRENT_SOURCE_DIR}/export_pprof.c
  ${CMAKE_CURRENT_SOURCE_DIR}/export_folded.c
  ${CMAKE_CURRENT_SOURCE_DIR}/export_json.c
  ${CMAKE_CURRENT_SOURCE_DIR}/export_diff.c
  ${CMAKE_CURRENT_SOURCE_DIR}/calltree.c)
target_link_libraries(ember PRIVATE ember_pprof_proto)

# Tests read exports back with the generated pprof.pb-c.h. The private link
# above does not hand them its include directory, so name it here; linking
# needs nothing more, as a static library passes its private libraries on.
target_include_directories(ember INTERFACE ${CMAKE_CURRENT_BINARY_DIR})
