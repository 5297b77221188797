# Every dependency is a Debian package (see scripts/deps.sh); pkg-config
# finds them, so nothing here downloads anything.
find_package(PkgConfig REQUIRED)
pkg_check_modules(RDKAFKA REQUIRED IMPORTED_TARGET rdkafka)
pkg_check_modules(PROTOBUFC REQUIRED IMPORTED_TARGET libprotobuf-c)
pkg_check_modules(JANSSON REQUIRED IMPORTED_TARGET jansson)
pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET libuv)
pkg_check_modules(LIBDW REQUIRED IMPORTED_TARGET libdw)
pkg_check_modules(LIBELF REQUIRED IMPORTED_TARGET libelf)
pkg_check_modules(LZMA REQUIRED IMPORTED_TARGET liblzma)
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
pkg_check_modules(CURL REQUIRED IMPORTED_TARGET libcurl)
pkg_check_modules(LIBCRYPTO REQUIRED IMPORTED_TARGET libcrypto)
find_program(PROTOC_C NAMES protoc-c REQUIRED)

# Compile NAME.proto from DIR into C in the build tree; sets OUT_SRCS.
function(ember_protoc_c out_srcs dir)
  set(srcs)
  foreach(name ${ARGN})
    set(c ${CMAKE_CURRENT_BINARY_DIR}/${name}.pb-c.c)
    set(h ${CMAKE_CURRENT_BINARY_DIR}/${name}.pb-c.h)
    add_custom_command(
      OUTPUT ${c} ${h}
      COMMAND ${PROTOC_C} --proto_path=${dir} --c_out=${CMAKE_CURRENT_BINARY_DIR}
              ${dir}/${name}.proto
      DEPENDS ${dir}/${name}.proto
      COMMENT "protoc-c ${name}.proto")
    list(APPEND srcs ${c})
  endforeach()
  set(${out_srcs} ${srcs} PARENT_SCOPE)
endfunction()
