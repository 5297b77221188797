#!/usr/bin/env bash
# Install what Ember needs to build, test and run, from Debian 12 packages.
# Idempotent and quiet when everything is already there (no apt-get update).
#   scripts/deps.sh           everything: build, tests, benchmarks
#   scripts/deps.sh --build   only what building the binaries needs (the
#                             image of deploy/docker/Dockerfile is built so)
set -euo pipefail

mode=all
case "${1:-}" in
  "") ;;
  --build) mode=build ;;
  *)
    echo "usage: scripts/deps.sh [--build]" >&2
    exit 2
    ;;
esac

build_packages=(
  # build
  build-essential g++ cmake ninja-build pkg-config git
  # libraries Ember links
  librdkafka-dev libzstd-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev zlib1g-dev
  libuv1-dev libelf-dev libdw-dev libmicrohttpd-dev liblmdb-dev libcurl4-openssl-dev
  libssl-dev liblzma-dev libiberty-dev
)
test_packages=(
  # tests: cmocka, the fuzzer toolchain, the formatter, Kafka tooling, ss
  libcmocka-dev clang libclang-rt-14-dev clang-format kcat iproute2 procps
  # unwinding tests and benchmarks: perf is the peer, Debian's own python3
  # and xz (built without frame pointers) the subjects
  linux-perf python3
  # tests: the C++ fixture program (g++ above), and the tools that make the
  # stripped, debuglink and MiniDebugInfo fixtures (objcopy, strip, nm, xz)
  binutils xz-utils
  # the dashboard's browser test drives Debian's chromium (/usr/bin/chromium)
  # with playwright-core (scripts/npm-deps.sh)
  chromium
  # test_deploy runs systemd-analyze verify on the units in deploy/systemd
  systemd
  # bench/bench_heap.sh: jemalloc's own heap profiler is the peer of the
  # preload library (Debian's build has --enable-prof)
  libjemalloc2
)
packages=("${build_packages[@]}")
[ "$mode" = all ] && packages+=("${test_packages[@]}")

# The real Kafka broker runs on Java 17 and is fetched with Maven; pprof
# output is checked with `go tool pprof`. Use the machine's own when present
# (a newer Go in /usr/local/go, say), Debian's otherwise.
# (test_deploy's validator needs Go 1.26 or newer: tests/deploy/validate.)
if [ "$mode" = all ]; then
  command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null 2>&1 || packages+=(maven)
  # Node.js runs the JIT-symbolization tests (--perf-basic-prof).
  command -v node >/dev/null 2>&1 || packages+=(nodejs)
  if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
    packages+=(golang-go)
  fi
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#packages[@]} packages present" >&2
  exit 0
fi

echo "deps: installing ${missing[*]}" >&2
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
