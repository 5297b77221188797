#!/bin/sh
# Allocation sessions: slowdown of a malloc-bound target (allocations per
# per CPU second of tests/programs/alloc, run flat out) with nothing attached, with
# the dormant preload library, with the preload library sampling, with a
# uprobe session, and with perf as the peer: `perf record -e
# probe_libc:malloc` (a uprobe like ours) and `perf record -F 1000 -g`.
#
#   bench/bench_alloc.sh [BUILD_DIR] [SECONDS] [REPEATS]
#
# Needs root (uprobes, perf probe). Each configuration runs REPEATS times;
# the median rate is printed. A session starts ~0.1 s after the target and
# lasts until it exits, so it covers ~97% of a 4 s run.
set -eu
BUILD=${1:-build}
SECS=${2:-4}
REPEATS=${3:-3}
ALLOC=$BUILD/tests/programs/alloc
LIB=$(cd "$BUILD/preload" && pwd)/libember_alloc.so
SESSION=$BUILD/bench/alloc_session
LIBC=$(ldd "$ALLOC" | awk '/libc.so/ {print $3}')
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; perf probe -q -d "probe_libc:*" >/dev/null 2>&1 || true' EXIT

# Allocations per CPU second of the target: robust to other load on the
# machine; probe costs are kernel time charged to the target.
rate() { sed -n 's/.*allocs_per_cpu_sec \([0-9]*\).*/\1/p' "$1"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# run NAME PRELOAD(0|1) ATTACH-COMMAND...   (ATTACH gets the pid as $PID)
run() {
  name=$1 pre=$2
  shift 2
  : >"$TMP/rates"
  i=0
  while [ "$i" -lt "$REPEATS" ]; do
    if [ "$pre" = 1 ]; then
      LD_PRELOAD=$LIB "$ALLOC" "$SECS" >"$TMP/out" &
    else
      "$ALLOC" "$SECS" >"$TMP/out" &
    fi
    PID=$!
    if [ $# -gt 0 ]; then
      sleep 0.1
      PID=$PID sh -c "$*" >"$TMP/attach" 2>&1 || { echo "attach failed:"; cat "$TMP/attach"; }
    fi
    wait "$PID"
    rate "$TMP/out" >>"$TMP/rates"
    i=$((i + 1))
  done
  r=$(median <"$TMP/rates")
  [ -z "${BASE:-}" ] && BASE=$r
  awk -v n="$name" -v r="$r" -v b="$BASE" -v all="$(tr '\n' ' ' <"$TMP/rates")" \
    'BEGIN {printf "%-40s %10.0f allocs/cpu-s %7.1f ns/alloc %6.1f%% of plain %6.2fx slower (runs: %s)\n", n, r, 1e9/r, 100*r/b, b/r, all}'
  if [ -s "$TMP/attach" ]; then sed 's/^/    /' "$TMP/attach" | head -3; fi
}

echo "bench_alloc: $(date -u +%Y-%m-%d) $(uname -r) $(nproc) CPUs, target $ALLOC $SECS s x $REPEATS"
run "plain" 0
run "preload, dormant" 1
run "preload, sampling 512 KiB (default)" 1 "$SESSION \$PID preload $SECS"
run "preload, sampling 64 KiB" 1 "$SESSION \$PID preload $SECS 65536"
run "uprobe session" 0 "$SESSION \$PID uprobe $SECS"
# The peer probes what our uprobe session probes in this target: malloc and
# calloc (alloc_small uses calloc).
perf probe -q -x "$LIBC" malloc >/dev/null 2>&1 || true
perf probe -q -x "$LIBC" calloc >/dev/null 2>&1 || true
run "perf record -e probe_libc:{malloc,calloc} -g" 0 \
  "perf record -q -e probe_libc:malloc -e probe_libc:calloc --call-graph fp -p \$PID -o $TMP/perf1.data 2>&1 | tail -2"
run "perf record -F 1000 -g" 0 \
  "perf record -q -F 1000 -g -p \$PID -o $TMP/perf2.data 2>&1 | tail -2"
