#!/usr/bin/env bash
# Ember's whole test suite, from a fresh Debian 12 machine:
#   install packages -> style checks -> browser test packages (npm) ->
#   fetch the Kafka broker jars ->
#   build and ctest the normal tree, then the ASan+UBSan tree (unit and
#   integration; the integration tests start and stop real Kafka 4.x
#   brokers through CTest fixtures), with the libFuzzer targets (the wire
#   decoder and every parser of files a local user controls) built and run
#   at nice 19 beside the second tree's tests -> summary.
# Environment: EMBER_FUZZ_SECONDS (wire decoder, default 60),
# EMBER_FUZZ_PARSER_SECONDS (each parser, default 20), EMBER_JOBS (default
# nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${EMBER_JOBS:-$(nproc)}
fuzz_seconds=${EMBER_FUZZ_SECONDS:-60}
parser_fuzz_seconds=${EMBER_FUZZ_PARSER_SECONDS:-20}
start=$(date +%s)
step() { printf '\n=== %s (%ds)\n' "$*" "$(($(date +%s) - start))"; }

step "dependencies"
./scripts/deps.sh

step "style: banned functions, clang-format"
./scripts/check-banned.sh
mapfile -t sources < <(git ls-files --cached --others --exclude-standard -- '*.c' '*.h')
clang-format --dry-run --Werror "${sources[@]}"
echo "clang-format: ${#sources[@]} files formatted"
# The dashboard's modules are compiled into the collector as they are: a
# syntax error would only show in a browser, so Node parses them here.
# (As .mjs: an older Node would read .js as CommonJS.)
jsdir=$(mktemp -d)
for f in web/*.js; do
  cp "$f" "$jsdir/$(basename "$f" .js).mjs"
  node --check "$jsdir/$(basename "$f" .js).mjs"
done
rm -rf "$jsdir"
echo "node --check: web/*.js parse"

step "the tests' npm packages (tests/browser, tests/jsbundle: npm ci)"
./scripts/npm-deps.sh

step "Kafka broker jars"
./tests/kafka/broker.sh fetch

declare -A summary
build_tree() {
  local dir=$1
  shift
  step "build $dir ($*)"
  cmake -S . -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 || {
    cat "$dir.configure.log"
    return 1
  }
  cmake --build "$dir" -j "$jobs"
}
test_tree() {
  local dir=$1 rc=0
  step "ctest $dir"
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 600 | tee "$dir.ctest.log" || rc=$?
  summary[$dir]=$(grep -E 'tests passed|tests failed' "$dir.ctest.log" | tail -1 || true)
  return $rc
}

# The fuzzers: build, then each target for its seconds from its seed corpus.
# Writes its one-line summary to build-fuzz/summary; exits non-zero on the
# first crash, leak or UB.
fuzz_all() {
  CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_FUZZ=ON \
    >build-fuzz.configure.log 2>&1 || { cat build-fuzz.configure.log; return 1; }
  cmake --build build-fuzz -j "$jobs" --target fuzz_codec fuzz_perfmap fuzz_procmaps fuzz_heapshm \
    fuzz_cfi fuzz_debuginfo fuzz_rules fuzz_sourcemap || return 1
  local line=""
  # One fuzzer run: target, seed corpus folder, seconds. -jobs=1 keeps one
  # process; -rss_limit_mb bounds a pathological input.
  fuzz_one() {
    local name=$1 seeds=$2 seconds=$3 corpus=build-fuzz/corpus-$1 log=build-fuzz/$1.log
    rm -rf "$corpus" && mkdir -p "$corpus" && cp "$seeds"/* "$corpus"/
    nice -n 19 ./build-fuzz/tests/"$name" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -print_final_stats=1 "$corpus" 2>&1 | tee "$log" | grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|==|SUMMARY)' || true
    if grep -qE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error|SUMMARY:' "$log"; then
      echo "fuzz: $name failed, see $log and crash-* files" >&2
      return 1
    fi
    local runs
    runs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
    line="${line:+$line; }$name: $runs inputs in ${seconds}s"
  }
  fuzz_one fuzz_codec tests/fuzz/corpus "$fuzz_seconds" &&
    fuzz_one fuzz_perfmap tests/fuzz/corpus_perfmap "$parser_fuzz_seconds" &&
    fuzz_one fuzz_procmaps tests/fuzz/corpus_procmaps "$parser_fuzz_seconds" &&
    fuzz_one fuzz_heapshm tests/fuzz/corpus_heapshm "$parser_fuzz_seconds" &&
    fuzz_one fuzz_cfi tests/fuzz/corpus_cfi "$parser_fuzz_seconds" &&
    fuzz_one fuzz_debuginfo tests/fuzz/corpus_debuginfo "$parser_fuzz_seconds" &&
    fuzz_one fuzz_rules tests/fuzz/corpus_rules "$parser_fuzz_seconds" &&
    fuzz_one fuzz_sourcemap tests/fuzz/corpus_sourcemap "$parser_fuzz_seconds" || return 1
  echo "$line; no crash, leak or UB" >build-fuzz/summary
}

mkdir -p build
build_tree build -DCMAKE_BUILD_TYPE=RelWithDebInfo
test_tree build
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
build_tree build-asan -DCMAKE_BUILD_TYPE=Debug -DEMBER_SANITIZE=ON

# The fuzzers run beside the sanitizer tree's tests, at nice 19: most of
# those tests wait on windows, brokers and timers, and the fuzzers take the
# idle CPU (weight 15 against a test's 1024, so ~1.5% of a core when they
# compete). That saves their ~3.5 minutes of wall time; the tests are built
# to hold on a loaded machine anyway. Their build is not niced: at nice 19
# beside a loaded machine's tests it waited for them all (seen beside two
# CPU hogs). Their sanitizer environment is their own.
step "fuzz the wire decoder for ${fuzz_seconds}s, the perf map, maps, heap control file, CFI, debug-info, rules and source map parsers for ${parser_fuzz_seconds}s each, at nice 19 beside the next step (output at its end)"
rm -f build-fuzz/summary
(
  unset ASAN_OPTIONS UBSAN_OPTIONS
  exec bash -c "$(declare -f fuzz_all); jobs=$jobs fuzz_seconds=$fuzz_seconds parser_fuzz_seconds=$parser_fuzz_seconds fuzz_all"
) >build-fuzz.run.log 2>&1 &
fuzz_pid=$!

asan_rc=0
test_tree build-asan || asan_rc=$?
step "fuzzers' output"
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
cat build-fuzz.run.log
if [ "$fuzz_rc" -ne 0 ] || [ ! -s build-fuzz/summary ]; then
  echo "fuzz: failed (exit $fuzz_rc), see build-fuzz.run.log" >&2
  exit 1
fi
summary[fuzz]=$(cat build-fuzz/summary)
[ "$asan_rc" -eq 0 ] || exit "$asan_rc"

step "summary"
for k in build build-asan fuzz; do printf '%-11s %s\n' "$k:" "${summary[$k]}"; done
echo "total time: $(($(date +%s) - start))s"
