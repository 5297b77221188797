#!/usr/bin/env bash
# How much a 1000 Hz on-demand CPU session slows its target, side by side
# with `perf record -F 1000 -g -p PID` on the same workload in the same run.
#
#   bench/bench_session.sh [BUILD_DIR]     (default: build)
#
# `ember up` (agent at 19 Hz, collector, API, embedded Kafka) runs
# throughout. A one-thread CPU-bound workload (bench/workload) runs for
# EMBER_BENCH_SECONDS + 8 s and reports its throughput over the last
# EMBER_BENCH_SECONDS only; a session (or perf record) is started in the
# first seconds and covers that whole window. Rows: the workload alone
# (ember up at 19 Hz only), under a 1000 Hz session, under perf record.
# Each is run 3 times (this VM's speed drifts); the median is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${EMBER_BENCH_SECONDS:-10}
tmp=$(mktemp -d /tmp/ember-bench-session.XXXXXX)
up=""
cleanup() {
  [ -n "$up" ] && kill -INT "$up" 2>/dev/null && wait "$up" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

cmake --build "$build" --target ember_cli bench_workload >/dev/null
port=17399
"$build/cli/ember" up --data "$tmp/data" "api.listen=127.0.0.1:$port" targets_refresh=2s \
  log_level=warn >"$tmp/up.log" 2>&1 &
up=$!
sleep 3
server="http://127.0.0.1:$port"
total=$((secs + 8))

# One run: MODE is none, session or perf; prints the workload's ops/s.
run() {
  EMBER_WORKER=bench-session "$build/bench/workload" 1 "$total" 8 >"$tmp/w.out" &
  local w=$!
  case "$1" in
  session)
    # Retry while the registry has not seen the new process (exit 2).
    for _ in $(seq 20); do
      if "$build/cli/ember" profile --server "$server" --worker bench-session \
        --duration "$((total - 2))s" --hz 1000 -o "$tmp/s.pb.gz" >"$tmp/p.out" 2>&1; then
        break
      fi
      grep -q "was seen in the last minute" "$tmp/p.out" || { cat "$tmp/p.out" >&2; break; }
      sleep 0.5
    done &
    ;;
  perf)
    sleep 1
    perf record -q -F 1000 -g -p "$w" -o "$tmp/perf.data" -- sleep "$((total - 2))" \
      >/dev/null 2>&1 &
    ;;
  esac
  wait "$w"
  wait 2>/dev/null || true
  if [ "$1" = session ] && ! grep -q ": done," "$tmp/p.out"; then
    echo "bench_session: the session did not complete:" >&2
    cat "$tmp/p.out" >&2
    exit 1
  fi
  awk '{print $2}' "$tmp/w.out"
}

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

printf '%-34s %12s %9s\n' "target (1 thread, CPU-bound)" "ops/s" "slowdown"
base=""
for mode in none session perf; do
  r=$(for _ in 1 2 3; do run "$mode"; done | median)
  [ -z "$base" ] && base=$r
  case "$mode" in
  none) name="alone (ember up at 19 Hz)" ;;
  session) name="ember session, 1000 Hz" ;;
  perf) name="perf record -F 1000 -g -p PID" ;;
  esac
  awk -v n="$name" -v r="$r" -v b="$base" 'BEGIN { printf "%-34s %12.1f %8.2f%%\n", n, r, 100 * (1 - r / b) }'
done
# The session's own figures, from its last run.
grep -h "done" "$tmp/p.out" | tail -1 || true
