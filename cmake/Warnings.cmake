# Picky warnings, as errors. -Wconversion is on: sign and width changes are
# where wire and store code goes wrong, so they must be spelled out.
set(EMBER_WARNINGS
  -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wconversion -Wsign-conversion
  -Wmissing-prototypes -Wstrict-prototypes -Wvla -Wpointer-arith
  -Wcast-qual -Wundef -Wwrite-strings -Wold-style-definition
  -Wnull-dereference -Wdouble-promotion -Wimplicit-fallthrough)

# Warnings for Ember's own code only; generated protobuf-c sources get less.
function(ember_warnings target)
  target_compile_options(${target} PRIVATE ${EMBER_WARNINGS})
endfunction()
