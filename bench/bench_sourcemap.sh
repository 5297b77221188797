#!/bin/sh
# Source maps (issue 16): what mapping JavaScript frames costs the agent,
# per distinct frame and per window, and the memory of a cached map for a
# 5 MB bundle, beside Node.js's own source map support on the same map.
#
#   bench/bench_sourcemap.sh [BUILD_DIR] [FILES] [FUNCS]   (default: build 450 100)
#
# bench/sourcemap_gen.mjs writes FILES x FUNCS TypeScript functions and
# bundles them with esbuild (tests/jsbundle, scripts/npm-deps.sh): about a
# 5 MB minified bundle with a linked map at the defaults. The bundle runs
# under node --perf-basic-prof and calls each function once, so V8 names
# every one in its perf map; bench/sourcemap_bench maps those names through
# agent/jsmap.c against the live process (the agent's code path: the
# process's root, the safe-open rules, the cache); bench/sourcemap_peer.mjs
# decodes the same map with node:module's SourceMap and looks up the same
# positions.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
files=${2:-450}
funcs=${3:-100}
tmp=$(mktemp -d /tmp/ember-bench-sourcemap.XXXXXX)
node_pid=
cleanup() {
  [ -n "$node_pid" ] && kill "$node_pid" 2>/dev/null
  [ -n "$node_pid" ] && rm -f "/tmp/perf-$node_pid.map"
  rm -rf "$tmp"
}
trap cleanup EXIT

cmake --build "$build" --target bench_sourcemap >/dev/null
node bench/sourcemap_gen.mjs "$tmp" "$files" "$funcs"
node --perf-basic-prof "$tmp/dist/app.js" > "$tmp/out" &
node_pid=$!
for _ in $(seq 300); do grep -q ready "$tmp/out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$tmp/out" || { echo "the bundle did not start" >&2; exit 1; }
# V8's names of the bundle's functions (the tier markers make several
# names per function: each is a distinct frame to the agent).
awk -v s="$tmp/dist/app.js:" 'index($0, s) { sub(/^[^ ]+ [^ ]+ /, ""); print }' \
  "/tmp/perf-$node_pid.map" | sort -u > "$tmp/names"
echo "$(wc -l < "$tmp/names") V8 names of the bundle in the perf map"
"$build/bench/sourcemap_bench" "$node_pid" "$tmp/names" 500 "$tmp/positions"
node --expose-gc bench/sourcemap_peer.mjs "$tmp/dist/app.js.map" "$tmp/positions"
