#!/usr/bin/env bash
# Collector ingest with 1, 2 and 3 collectors in one consumer group on one
# real broker (issue 13): is there a coordination tax per collector core?
#
#   bench/bench_ingest.sh [BUILD_DIR] [WORKERS] [MINUTES] [WIRE]   (default: build 200 30 2)
#
# bench/ingest_produce writes bench_store's stream (WORKERS workers, MINUTES
# minutes of 10 s windows: 36,000 profiles by default; wire version WIRE,
# 2 as agents send by default, 1 as older agents) to ember.profiles at
# 12 partitions on a broker of tests/kafka/broker.sh, once. Then for K = 1,
# 2, 3: K real ember-collector processes (own data dirs, own API ports, a
# new group per K so each starts from the earliest offset) read all of it;
# we poll their ember_collector_profiles_stored_total until the sum is the
# number produced, and read each collector's CPU time (/proc/PID/stat:
# every thread, startup and fleet announcements included, which is the
# point).
#
# Per collector: profiles stored, CPU seconds, profiles per CPU second.
# Per K: wall seconds from the first stored profile to the last, profiles
# per wall second, and profiles per collector CPU second against K = 1's
# (the goal: within 15%). The broker runs on the same machine: on a 2-core
# machine wall throughput cannot grow with K; CPU per profile is the figure
# that shows a tax.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
workers=${2:-200}
minutes=${3:-30}
wire=${4:-2}
tmp=$(mktemp -d /tmp/ember-bench-ingest.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  tests/kafka/broker.sh stop "$tmp/broker" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Every thread's CPU, living or gone (utime + stime of /proc/PID/stat, in
# clock ticks; /proc/PID/schedstat is the main thread's alone).
tck=$(getconf CLK_TCK)
cpu_ns() { awk -v t="$tck" '{ sub(/^.*\) /, ""); printf "%.0f", ($12 + $13) * 1e9 / t }' "/proc/$1/stat"; }
metric() { { curl -s "http://127.0.0.1:$2/metrics" || true; } | awk -v m="$1" '$1 == m {printf "%d", $2}'; }

cmake --build "$build" --target ember-collector bench_ingest_produce >/dev/null
brokers=$(tests/kafka/broker.sh start "$tmp/broker")
produced=$("$build/bench/ingest_produce" "$brokers" --workers "$workers" --minutes "$minutes" \
  --wire "$wire")
echo "$produced"
total=$(echo "$produced" | awk '{print $2}')

printf '%-3s %-10s %9s %9s %14s\n' K collector profiles "CPU s" "profiles/CPU-s"
base=
for k in 1 2 3; do
  cpids=() ports=()
  for i in $(seq "$k"); do
    port=$((17400 + 10 * k + i))
    "$build/collector/ember-collector" brokers="$brokers" data_dir="$tmp/c$k.$i" \
      group_id="bench-ingest-$k" api.listen="127.0.0.1:$port" collector_id="c$k.$i" \
      retention=0 log_level=warn 2>"$tmp/c$k.$i.log" &
    cpids+=($!) ports+=("$port")
    pids+=($!)
  done
  first= last= sum=0
  deadline=$(($(date +%s) + 600))
  while :; do
    sum=0
    for port in "${ports[@]}"; do
      n=$(metric ember_collector_profiles_stored_total "$port")
      sum=$((sum + ${n:-0}))
    done
    now=$(date +%s.%N)
    [ -z "$first" ] && [ "$sum" -gt 0 ] && first=$now
    # Done at the number produced; a partition that moved during the joins
    # may be read again by its new owner (its windows then count once at
    # query time, docs/internals/fleet.md), so the sum can pass it.
    if [ "$sum" -ge "$total" ]; then last=$now; break; fi
    if [ "$(date +%s)" -gt "$deadline" ]; then
      echo "K=$k: stored $sum of $total within 600 s; logs:" >&2
      cat "$tmp"/c"$k".*.log >&2
      exit 1
    fi
    sleep 0.1
  done
  cpu_sum=0
  for i in $(seq "$k"); do
    c=$(cpu_ns "${cpids[$((i - 1))]}")
    n=$(metric ember_collector_profiles_stored_total "${ports[$((i - 1))]}")
    cpu_sum=$((cpu_sum + c))
    awk -v k="$k" -v i="c$k.$i" -v n="$n" -v c="$c" 'BEGIN {
      printf "%-3s %-10s %9d %9.2f %14.0f\n", k, i, n, c / 1e9, n / (c / 1e9) }'
  done
  per_core=$(awk -v n="$sum" -v c="$cpu_sum" 'BEGIN { printf "%.0f", n / (c / 1e9) }')
  [ -z "$base" ] && base=$per_core
  awk -v k="$k" -v n="$sum" -v c="$cpu_sum" -v w="$(awk -v a="$first" -v b="$last" 'BEGIN {print b - a}')" \
    -v p="$per_core" -v b="$base" 'BEGIN {
      printf "%-3s %-10s %9d %9.2f %14d   wall %.1f s, %.0f profiles/s, per core %+.1f%% vs K=1\n",
        k, "all", n, c / 1e9, p, w, n / (w > 0 ? w : 1), 100 * (p / b - 1) }'
  for p in "${cpids[@]}"; do kill -TERM "$p"; done
  for p in "${cpids[@]}"; do wait "$p" || true; done
done
echo "stream: $workers workers, $minutes min of 10 s windows, wire v$wire, 12 partitions; broker on this machine"
echo "date: $(date -u +%Y-%m-%d), host: $(nproc) CPUs, kernel $(uname -r)"
