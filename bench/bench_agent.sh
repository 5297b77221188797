#!/usr/bin/env bash
# Agent overhead, side by side with `perf record -a -g` at the same rate on
# the same workload in the same run.
#
#   bench/bench_agent.sh [BUILD_DIR] [fp|dwarf]     (default: build fp)
#
# fp: the workload has frame pointers; the agent runs with unwind=fp and
# perf with -g. dwarf: the workload is built without frame pointers
# (bench/workload-nofp); the agent unwinds from CFI (unwind=auto) and perf
# copies stacks (--call-graph dwarf), whose real cost is in perf report.
#
# For each rate (19 Hz, 1000 Hz): 50 light processes (bench/duty, 2% CPU
# each) stand in for a host's services, and a 2-thread CPU-bound workload
# (bench/workload) measures throughput. We run the workload alone, under
# ember-agent, and under perf record, and report: the profiler's CPU per
# sample and per host-second, its RSS, the samples it took, and the
# workload's slowdown. The agent publishes to a real Kafka broker
# (tests/kafka/broker.sh), as in production.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mode=${2:-fp}
case $mode in
fp) workload=workload unwind=fp perf_cg=(-g) report_cg=none ;;
# perf report only unwinds the copied stacks when it shows callchains.
dwarf) workload=workload-nofp unwind=auto perf_cg=(--call-graph dwarf) report_cg=folded ;;
*) echo "usage: bench/bench_agent.sh [BUILD_DIR] [fp|dwarf]" >&2; exit 2 ;;
esac
secs=${EMBER_BENCH_SECONDS:-20}
tmp=$(mktemp -d /tmp/ember-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  tests/kafka/broker.sh stop "$tmp/broker" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# CPU time in ns from schedstat, summed over every thread of the process
# (/proc/PID/schedstat alone is the main thread's: the agent's publisher,
# close and Kafka threads would be missed). Clock ticks are too coarse for
# perf record, which mostly sleeps. Threads that exited between two reads
# are missed; the agent's and perf's threads live as long as they do.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f", s }'; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
metric() { curl -s "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1 == m {printf "%d", $2}'; }

# One result row: name, Hz, samples, CPU ns, RSS KiB, workload ops/s.
row() {
  awk -v name="$1" -v hz="$2" -v n="$3" -v c="$4" -v s="$secs" -v r="$5" -v o="$6" -v b="$base" 'BEGIN {
    printf "%-22s %6d %9d %12.2f %11.3f%% %10.1f %8.2f%%\n", name, hz, n,
      c / 1000 / (n ? n : 1), 100 * (c / 1e9) / s, r / 1024, 100 * (1 - o / b) }'
}

cmake --build "$build" --target ember_agent bench_workload bench_workload_nofp bench_duty >/dev/null
brokers=$(tests/kafka/broker.sh start "$tmp/broker")
for _ in $(seq 50); do "$build/bench/duty" 2 & pids+=($!); done
sleep 1

printf '%-22s %6s %9s %12s %12s %10s %9s\n' profiler Hz samples "us/sample" "%core" "RSS MiB" slowdown

for rate in 19 1000; do
  # The baseline is taken next to each pair: this VM's speed drifts.
  base=$("$build/bench/$workload" 2 "$secs" | awk '{print $2}')
  printf '%-22s %6s %9s %12s %12s %10s %9s\n' "(workload alone)" - - - - - "$base"
  # ember-agent
  port=$((17300 + rate % 100))
  "$build/agent/ember-agent" brokers="$brokers" continuous_hz="$rate" unwind="$unwind" host_id=bench \
    spool_dir="$tmp/spool" metrics_listen="127.0.0.1:$port" log_level=warn &
  agent=$!
  pids+=("$agent")
  # Warm up past the first window close: kallsyms and every module's symbol
  # table are loaded once then, and are not a per-sample cost.
  sleep 13
  c0=$(cpu_ns "$agent")
  s0=$(metric ember_agent_samples_total "$port")
  ops=$("$build/bench/$workload" 2 "$secs" | awk '{print $2}')
  c1=$(cpu_ns "$agent")
  s1=$(metric ember_agent_samples_total "$port")
  rss=$(rss_kib "$agent")
  unw=$(curl -s "http://127.0.0.1:$port/metrics" | awk '
    $1 == "ember_agent_unwind_tables" { t = $2 } $1 == "ember_agent_unwind_table_bytes" { b = $2 }
    $1 == "ember_agent_unwind_table_build_seconds_total" { s = $2 }
    $1 ~ /^ember_agent_unwind_stacks_total/ { n += $2; if ($1 ~ /complete/) c += $2 }
    END { printf "%d tables, %.0f KiB, built in %.1f ms; %d stacks unwound, %.1f%% complete",
                 t, b / 1024, s * 1000, n, n ? 100 * c / n : 0 }')
  kill -TERM "$agent"
  wait "$agent" || true
  row "ember-agent" "$rate" $((s1 - s0)) $((c1 - c0)) "$rss" "$ops"
  [ "$unwind" = fp ] || echo "  (unwind tables: $unw)"

  # perf record at the same rate, same workload
  perf record -q -a "${perf_cg[@]}" -F "$rate" -o "$tmp/perf.data" -- sleep $((secs + 4)) 2>/dev/null &
  perfpid=$!
  pids+=("$perfpid")
  sleep 2
  pc0=$(cpu_ns "$perfpid")
  ops=$("$build/bench/$workload" 2 "$secs" | awk '{print $2}')
  pc1=$(cpu_ns "$perfpid")
  prss=$(rss_kib "$perfpid")
  wait "$perfpid" || true
  total=$(perf report -i "$tmp/perf.data" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}')
  # perf ran secs+4 s; scale its sample count to the measured interval.
  n=$(awk -v t="$total" -v s="$secs" 'BEGIN {printf "%d", t * s / (s + 4)}')
  row "perf record -a ${perf_cg[*]}" "$rate" "$n" $((pc1 - pc0)) "$prss" "$ops"
  # perf record only copies rings to a file; the stacks become a profile
  # in perf report. Its cost for the same samples, for a like-for-like sum.
  # `times` in the subshell prints its children's user and system time.
  rcpu=$( (perf report -i "$tmp/perf.data" --no-children --stdio -g "$report_cg" >/dev/null 2>&1; times) |
    awk 'NR == 2 { split($1, u, /[ms]/); split($2, y, /[ms]/);
                   printf "%d", ((u[1] * 60 + u[2]) + (y[1] * 60 + y[2])) * 1e9 }')
  row "  + perf report" "$rate" "$total" "$rcpu" 0 "$ops"
  rm -f "$tmp/perf.data"
done
echo "workload: 2 threads, ${secs}s; 50 duty processes (2% CPU each) running throughout"
echo "date: $(date -u +%Y-%m-%d), host: $(nproc) CPUs, kernel $(uname -r)"
