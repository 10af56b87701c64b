#!/usr/bin/env bash
# bench/history/cpu.sh - CPU per million recorded samples, per thread, of opsd recording the
# simulator (the scale step of bench/history/run.sh, one step, figures per thread).
#
# Starts OPSD with N simulated doubles at period 1 s (sine, 0.01), every change recorded,
# retention 2m in partitions of 1m, WAL on (as run.sh's scale step); waits WARM seconds, then
# over WIN seconds reads utime+stime of every thread from /proc/PID/task/*/stat and the
# counters from /metrics, and prints one line per thread: CPU seconds per million samples made
# durable, and the share of one core. The machine may be shared: CPU seconds per sample move
# much less with other load than wall-clock rates do; the load average is printed with them.
#
# Usage: bench/history/cpu.sh OPSD N [WARM [WIN]] [--perf SECONDS] [--keep]
#   --perf S   also `perf record -g` the process for S seconds in the window (perf.data kept in
#              the working directory, a flat report printed)
set -euo pipefail
OPSD=${1:?usage: cpu.sh OPSD N [WARM [WIN]] [--perf S] [--keep]}
N=${2:?points}
shift 2
WARM=150
WIN=60
PERF=0
KEEP=0
[ $# -gt 0 ] && [[ $1 != --* ]] && { WARM=$1; shift; }
[ $# -gt 0 ] && [[ $1 != --* ]] && { WIN=$1; shift; }
while [ $# -gt 0 ]; do
  case "$1" in
    --perf) shift; PERF=${1:?--perf needs seconds} ;;
    --keep) KEEP=1 ;;
    *) echo "cpu.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
TCK=$(getconf CLK_TCK)
DIR=$(mktemp -d /var/tmp/opsd-hist-cpu.XXXXXX)
PID=
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  if [ $KEEP = 1 ]; then echo "cpu.sh: kept $DIR" >&2; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$((20000 + RANDOM % 20000))
last=$((N - 1)); digits=${#last}; [ "$digits" -lt 5 ] && digits=5
lo=$(printf "%0${digits}d" 0); hi=$(printf "%0${digits}d" "$last")
bufmax=$((20 * N)); [ "$bufmax" -lt 4194304 ] && bufmax=4194304
mkdir -p "$DIR/data"
cat >"$DIR/opsd.yaml" <<EOF
server:
  listen: 127.0.0.1:$PORT
  data_dir: $DIR/data
  log_level: info
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "p-{$lo..$hi}", type: double, pattern: sine, period: 1s, resolution: 0.01}
history:
  retention: 2m
  partition: 1m
  buffer_max: $bufmax
  record:
    - {match: "p-*", mode: on_change}
EOF
"$OPSD" --config "$DIR/opsd.yaml" >"$DIR/stdout" 2>"$DIR/stderr" &
PID=$!
for ((i = 0; i < 6000; i++)); do
  grep -q "listening on" "$DIR/stdout" 2>/dev/null && break
  kill -0 "$PID" 2>/dev/null || { echo "cpu.sh: opsd exited" >&2; tail "$DIR/stderr" >&2; exit 1; }
  sleep 0.1
done
sleep "$WARM"

metrics() {
  curl -s -m 10 "http://127.0.0.1:$PORT/metrics" | awk '
    /^opsd_history_durable_total /{d=$2} /^opsd_history_dropped_total /{x=$2}
    /^opsd_history_buffer_samples /{b=$2} /^opsd_point_updates_total /{u=$2}
    END {printf "%.0f %.0f %.0f %.0f\n", d, x, b, u}'
}
threads() { # name ticks runqueue_ns, one line per thread name
  local t
  for t in /proc/$PID/task/*; do
    awk -v n="$(cat "$t/comm")" -v w="$(cut -d' ' -f2 "$t/schedstat" 2>/dev/null)" \
      '{sub(/.*\) /, ""); print n, $12 + $13, w + 0}' "$t/stat" 2>/dev/null
  done | awk '{c[$1] += $2; w[$1] += $3} END {for (k in c) print k, c[k], w[k]}' | sort
}
read -r d0 x0 b0 u0 <<<"$(metrics)"
threads >"$DIR/t0"
t0=$(date +%s.%N)
if [ "$PERF" != 0 ]; then
  perf record -g -p "$PID" -o "$DIR/perf.data" -- sleep "$PERF" >/dev/null 2>&1 || true
fi
bmax=0
while :; do
  now=$(date +%s.%N)
  awk -v a="$now" -v b="$t0" -v w="$WIN" 'BEGIN { exit !(a - b >= w) }' && break
  read -r _ _ b _ <<<"$(metrics)"
  [ "${b:-0}" -gt "$bmax" ] && bmax=$b
  sleep 2
done
read -r d1 x1 b1 u1 <<<"$(metrics)"
threads >"$DIR/t1"
t1=$(date +%s.%N)
rss=$(awk '/^VmRSS/ {print $2}' "/proc/$PID/status")
dt=$(awk -v a="$t1" -v b="$t0" 'BEGIN {print a - b}')
echo "points $N, window ${dt} s, load average $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v d0="$d0" -v d1="$d1" -v u0="$u0" -v u1="$u1" -v x0="$x0" -v x1="$x1" -v dt="$dt" -v b="$b1" -v bm="$bmax" -v r="$rss" 'BEGIN {
  printf "durable %.0f samples/s (point updates %.0f/s), dropped %.0f in the window (%.0f since start), buffer %s at the end (max %s), RSS %.0f MB\n",
    (d1 - d0) / dt, (u1 - u0) / dt, x1 - x0, x1, b, bm, r / 1024 }'
# waiting to run: time runnable but not on a CPU (schedstat), the share of the machine's CPUs
# that other processes took from the thread
echo "thread            CPU s per M samples   % of a core   % of the window waiting to run"
join -a 2 -e 0 -o 0,1.2,1.3,2.2,2.3 "$DIR/t0" "$DIR/t1" | awk -v tck="$TCK" -v s="$(awk -v a="$d0" -v b="$d1" 'BEGIN{print (b - a) / 1e6}')" -v dt="$dt" '
  { c = ($4 - $2) / tck; tot += c; printf "%-17s %10.3f %17.1f %17.1f\n", $1, (s > 0 ? c / s : 0), 100 * c / dt, 100 * ($5 - $3) / 1e9 / dt }
  END { printf "%-17s %10.3f %17.1f\n", "total", (s > 0 ? tot / s : 0), 100 * tot / dt }'
if [ "$PERF" != 0 ] && [ -s "$DIR/perf.data" ]; then
  perf report -i "$DIR/perf.data" --no-children --sort comm,symbol -g none --percent-limit 1 --stdio 2>/dev/null |
    grep -E '^ +[0-9]' | head -40
fi
