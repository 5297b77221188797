#!/bin/sh
# In-use heap (issue 15): how much the always-on heap sampling of
# libember_alloc.so slows a malloc-heavy target, side by side in one run
# with jemalloc's own heap profiler at the same rate and with the uprobe
# method.
#
#   bench/bench_heap.sh [BUILD_DIR] [SECONDS] [REPEATS]
#
# The target (bench/heap_workload, 2 threads of malloc 16..512 bytes + free
# in a tight loop, 8 blocks live per thread) reports nanoseconds of process
# CPU time per malloc+free pair over SECONDS, after 0.5 s in which readers
# attach. Configurations:
#   a  glibc malloc, no library
#   b  the library dormant (EMBER_HEAP_SAMPLE_BYTES=0)
#   c  the library sampling at 512 KiB (its default) with in-use tracking,
#      read by bench/heap_reader as the agent reads it (poll every 100 ms,
#      CFI unwinding, a snapshot every 10 s and at the end)
#   d  jemalloc's heap profiler at the same rate: LD_PRELOAD=libjemalloc.so.2
#      MALLOC_CONF=prof:true,lg_prof_sample:19 (Debian's libjemalloc2)
#   e  jemalloc without profiling, (d)'s baseline
#   f  an allocation session of the uprobe method (bench/alloc_session)
#   n  a null interposer (bench/null_interpose.c): malloc, calloc, realloc
#      and free that only jump to glibc's own. The floor under any
#      LD_PRELOAD library over glibc: what (b) and (c) cost beyond it is
#      the library's own work
#   g  (c) with a 32 MiB ring (EMBER_HEAP_RING_BYTES): this target takes
#      ~60,000 samples/s of ~4.8 KB (the stack copy), far more than the
#      default 2 MiB ring holds between two polls, so (c) drops most
#      records, which is cheaper than writing them; (g) shows the cost of
#      writing (nearly) all of them
# Each repeat runs every configuration once, in turn (round-robin), so
# load on the machine falls on all of them alike; the median of the
# REPEATS is printed, and the percentages are medians of the ratios within
# each repeat (a configuration against (a) or (d) of the same round), which
# cancels most of the drift of a shared machine. Needs root for (f) (uprobes); without it (f) fails
# and is shown as such. Goals: (c) at most 3% slower than (a), and no
# slower than (d).
set -eu
BUILD=${1:-build}
SECS=${2:-3}
REPEATS=${3:-5}
WORKLOAD=$BUILD/bench/heap_workload
READER=$BUILD/bench/heap_reader
SESSION=$BUILD/bench/alloc_session
LIB=$(cd "$BUILD/preload" && pwd)/libember_alloc.so
NULLLIB=$(cd "$BUILD/bench" && pwd)/libnull_interpose.so
JEMALLOC=${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
THREADS=2
WARMUP_MS=500
for f in "$WORKLOAD" "$READER" "$SESSION" "$LIB" "$NULLLIB" "$JEMALLOC"; do
  [ -e "$f" ] || {
    echo "bench_heap: $f is missing (build first; jemalloc: scripts/deps.sh)" >&2
    exit 1
  }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
CONFIGS="a n b c d e f g"

# run CONFIG: one run of the workload; appends its ns/pair to $TMP/CONFIG
# and the helper's line (reader or session) to $TMP/CONFIG.helper.
run() {
  cfg=$1
  out=$TMP/out helper=$TMP/helper
  : >"$helper"
  case $cfg in
    a) "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" ;;
    n) LD_PRELOAD=$NULLLIB "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" ;;
    b) EMBER_HEAP_SAMPLE_BYTES=0 LD_PRELOAD=$LIB "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" ;;
    c | g)
      ring=2097152
      [ "$cfg" = g ] && ring=33554432
      EMBER_HEAP_SAMPLE_BYTES=524288 EMBER_HEAP_RING_BYTES=$ring LD_PRELOAD=$LIB \
        "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" &
      pid=$!
      # Until just before the workload ends: the reader's last snapshot
      # reads the live table of a running process.
      "$READER" "$pid" $((WARMUP_MS + SECS * 1000 - 100)) >"$helper" 2>&1 || true
      wait "$pid"
      ;;
    d) LD_PRELOAD=$JEMALLOC MALLOC_CONF=prof:true,lg_prof_sample:19 \
      "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" ;;
    e) LD_PRELOAD=$JEMALLOC "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" ;;
    f)
      "$WORKLOAD" $THREADS "$SECS" $WARMUP_MS >"$out" &
      pid=$!
      sleep 0.1
      # Lasts until the workload exits.
      "$SESSION" "$pid" uprobe $((SECS + 5)) >"$helper" 2>&1 || true
      wait "$pid"
      ;;
  esac
  sed -n 's/.*ns_per_pair \([0-9.]*\).*/\1/p' "$out" >>"$TMP/$cfg"
  cat "$helper" >>"$TMP/$cfg.helper"
}

# ratio CFG BASE: the median over repeats of CFG's ns/pair over BASE's in
# the same repeat (only repeats where both ran).
ratio() { paste "$TMP/$1" "$TMP/$2" | awk 'NF == 2 && $2 > 0 {print $1 / $2}' | median; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print ""}'; }
# field NAME FILE: the median of "NAME value" over the helper's lines.
field() { sed -n "s/.*$1 \\([0-9.]*\\).*/\\1/p" "$2" | median; }

echo "bench_heap: $(date -u +%Y-%m-%dT%H:%MZ) $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  $THREADS threads x ${SECS} s x $REPEATS repeats, round-robin over: $CONFIGS"
i=0
while [ "$i" -lt "$REPEATS" ]; do
  for cfg in $CONFIGS; do run "$cfg"; done
  i=$((i + 1))
done

for cfg in $CONFIGS; do
  eval "m_$cfg=\$(median <\"\$TMP/$cfg\")"
done

name() {
  case $1 in
    a) echo "(a) glibc, no library" ;;
    n) echo "(n) null interposer (the floor)" ;;
    b) echo "(b) library dormant" ;;
    c) echo "(c) library 512 KiB + in-use + reader" ;;
    d) echo "(d) jemalloc prof, lg_prof_sample:19" ;;
    e) echo "(e) jemalloc, no prof" ;;
    f) echo "(f) uprobe session" ;;
    g) echo "(g) as (c), 32 MiB ring" ;;
  esac
}

printf '%-40s %9s %9s %9s %9s %9s  %s\n' configuration ns/pair "vs (a)" "vs (d)" helper-cpu lost "runs (ns/pair)"
for cfg in $CONFIGS; do
  eval "m=\$m_$cfg"
  cpu=- lost=-
  if [ -s "$TMP/$cfg.helper" ]; then
    case $cfg in
      c | g)
        cpu=$(field cpu_s "$TMP/$cfg.helper")s
        lost=$(field lost "$TMP/$cfg.helper")/$(field records "$TMP/$cfg.helper")
        ;;
      f) lost=$(field lost "$TMP/$cfg.helper")/$(field samples "$TMP/$cfg.helper") ;;
    esac
  fi
  if [ -z "$m" ]; then
    printf '%-40s %9s (failed: %s)\n' "$(name "$cfg")" - "$(head -1 "$TMP/$cfg.helper" 2>/dev/null)"
    continue
  fi
  va=$(ratio "$cfg" a) vd=$(ratio "$cfg" d)
  eval "r_${cfg}_a=\$va r_${cfg}_d=\$vd"
  awk -v n="$(name "$cfg")" -v m="$m" -v va="$va" -v vd="$vd" -v cpu="$cpu" -v lost="$lost" \
    -v runs="$(tr '\n' ' ' <"$TMP/$cfg")" \
    'BEGIN {printf "%-40s %9.2f %+8.1f%% %+8.1f%% %9s %9s  %s\n", n, m, 100*(va-1), 100*(vd-1), cpu, lost, runs}'
done
echo "  helper-cpu: heap_reader's own CPU over the run; lost: records lost / read (c, g),"
echo "  samples lost / taken (f)"
awk -v ca="$r_c_a" -v cd="$r_c_d" -v na="$r_n_a" -v cn="$(ratio c n)" -v de="$(ratio d e)" 'BEGIN {
  printf "goal (c) <= (a) + 3%%: %s (%+.1f%%)\n", (ca <= 1.03) ? "met" : "NOT met", 100*(ca-1)
  printf "goal (c) <= (d):      %s (%+.1f%%)\n", (cd <= 1) ? "met" : "NOT met", 100*(cd-1)
  printf "the floor: (n) over (a) %+.1f%%; (c) over (n) %+.1f%%\n", 100*(na-1), 100*(cn-1)
  printf "each profiler over its own allocator: (c)/(a) %+.1f%%, (d)/(e) %+.1f%%\n", 100*(ca-1), 100*(de-1)
}'
