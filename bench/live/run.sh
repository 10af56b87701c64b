#!/usr/bin/env bash
# bench/live/run.sh - the live-data benchmark: opsd's WebSocket fan-out against Debian's
# mosquitto broker on the same machine, in the same run.
#
#   L1     5,000 simulated points changing every second, 4 WebSocket clients each
#          subscribed to all of them (prefix), interval 1 s: 20,000 updates/s to deliver.
#   scale  100,000 points changing every second, 100 clients each subscribed to 20,000 of
#          them (two prefixes of 10,000, round robin): 2,000,000 updates/s to deliver.
#   The same two shapes on mosquitto: one topic per point (p/<digit>/<nnnn>), QoS 0, a
#   publisher at one message per point per second (slowed by the broker when it cannot
#   take more), the same number of subscribers with the same share of topics.
#
# The load tools (bench/*.c) measure, over a window after a warm-up: values delivered per
# second, latency from the source timestamp to receipt (p50, p99), updates missed (a gap
# in a point's source times on opsd, in a topic's sequence numbers on mosquitto), and the
# server's CPU (utime+stime from /proc/PID/stat) and peak RSS (VmHWM). The script prints
# one table, the ratio of updates per server CPU-second (opsd over mosquitto), the issue's
# targets checked, and notes. The load tools share the machine with the server.
#
# Usage: bench/live/run.sh [--quick] [--no-build] [--only L1|scale] [--opsd-only]
#   --quick      short windows (about 2 minutes in all instead of about 7)
#   --no-build   use the binaries already in build-bench/
#   --only S     run scenario S only (L1 or scale)
#   --opsd-only  leave mosquitto out
# OPSD_BIN=/path/to/opsd runs another opsd binary against the same load.
# BENCH_PORTS=FIRST-LAST takes the servers' ports from that range (default: 20000-39999).
# Traffic stays on 127.0.0.1. Every process started here is stopped on exit.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=$ROOT/build-bench
QUICK=0
DO_BUILD=1
ONLY=
MOSQ=1
usage() { echo "usage: $0 [--quick] [--no-build] [--only L1|scale] [--opsd-only]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --no-build) DO_BUILD=0 ;;
    --only) [ $# -ge 2 ] && { [ "$2" = L1 ] || [ "$2" = scale ]; } || usage; ONLY=$2; shift ;;
    --opsd-only) MOSQ=0 ;;
    *) usage ;;
  esac
  shift
done
PORT_LO=${BENCH_PORTS%-*}
PORT_HI=${BENCH_PORTS#*-}
[ -n "${BENCH_PORTS:-}" ] || { PORT_LO=20000; PORT_HI=39999; }

if [ $QUICK = 1 ]; then
  L1_WARM=3; L1_WIN=10; SC_WARM=8; SC_WIN=15
else
  L1_WARM=10; L1_WIN=60; SC_WARM=15; SC_WIN=60
fi

if [ $DO_BUILD = 1 ]; then
  scripts/deps.sh bench
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOPSD_BENCH=ON -DOPSD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j2 >/dev/null
fi
OPSD=${OPSD_BIN:-$BUILD/opsd}
WS=$BUILD/bench/bench_ws_client
MSUB=$BUILD/bench/bench_mqtt_sub
MPUB=$BUILD/bench/bench_mqtt_pub
MOSQUITTO=/usr/sbin/mosquitto
for f in "$OPSD" "$WS" "$MSUB" "$MPUB" "$MOSQUITTO"; do
  [ -x "$f" ] || { echo "run.sh: missing $f" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/opsd-bench-live.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi
  done
  for p in "${PIDS[@]:-}"; do
    if [ -n "$p" ]; then wait "$p" 2>/dev/null || true; fi
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "run.sh: $*" >&2; }

# A TCP port on 127.0.0.1 that nothing listens on.
free_port() {
  local p
  while :; do
    p=$((PORT_LO + RANDOM % (PORT_HI - PORT_LO + 1)))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

# wait_for FILE TEXT SECONDS: waits until FILE contains TEXT.
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "run.sh: '$2' did not appear in $1 within $3 s" >&2
  tail -20 "$1" >&2 || true
  return 1
}

# wait_port PORT SECONDS: waits until something listens on 127.0.0.1:PORT.
wait_port() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "run.sh: nothing listens on port $1 after $2 s" >&2
  return 1
}

# field NAME LINE: the value of NAME=... in a RESULT line.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

stop_pid() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

ROWS=()     # scenario|server|delivered|expected|p50|p99|cpu%|per_cpu_s|rss
NOTES=()

# run_opsd NAME POINTS_PATTERN EXPECTED WARM WIN CLIENT_ARGS...
run_opsd() {
  local name=$1 pattern=$2 expected=$3 warm=$4 win=$5
  shift 5
  local port dir pid res metrics
  port=$(free_port)
  dir=$TMP/opsd-$name
  mkdir -p "$dir/data"
  cat >"$dir/opsd.yaml" <<EOF
server:
  listen: 127.0.0.1:$port
  data_dir: $dir/data
  log_level: warn
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "$pattern", type: double, pattern: sine, period: 1s, min: 0, max: 100, resolution: 0.01}
EOF
  "$OPSD" --config "$dir/opsd.yaml" --data "$dir/data" --listen "127.0.0.1:$port" \
    >"$dir/stdout" 2>"$dir/stderr" &
  pid=$!
  PIDS+=("$pid")
  if ! wait_for "$dir/stdout" "listening on" 60; then
    tail -20 "$dir/stderr" >&2
    stop_pid "$pid"
    ROWS+=("$name|opsd|failed to start|$expected|-|-|-|-|-")
    return
  fi
  sleep 1
  log "$name on opsd: $*"
  res=$("$WS" --port "$port" --server-pid "$pid" --warmup "$warm" --duration "$win" \
          --label "$name" "$@" 2>"$dir/client.err" | grep '^RESULT' || true)
  if command -v curl >/dev/null; then
    metrics=$(curl -s "http://127.0.0.1:$port/metrics" || true)
    NOTES+=("$name/opsd server metrics at the end: $(grep -E \
      '^opsd_stream_(pending_values|slow_disconnects_total|clients)|^opsd_loop_lag_seconds' \
      <<<"$metrics" | tr '\n' ' ')")
  fi
  if ! kill -0 "$pid" 2>/dev/null; then
    log "opsd exited during $name; its log:"
    tail -20 "$dir/stderr" >&2
  fi
  stop_pid "$pid"
  if [ -z "$res" ]; then
    log "$name on opsd: no result; client log:"
    tail -20 "$dir/client.err" >&2
    ROWS+=("$name|opsd|failed|$expected|-|-|-|-|-")
    return
  fi
  if [ -s "$dir/client.err" ]; then
    { grep -v 'clients open after' "$dir/client.err" || true; } | head -5 |
      sed "s/^/  $name client: /" >&2
  fi
  add_row "$name" opsd "$expected" "$res"
}

# run_mosquitto NAME POINTS GROUPS PREFIX FANOUT EXPECTED WARM WIN SUB_ARGS...
# FANOUT: subscribers that receive each published message.
run_mosquitto() {
  local name=$1 points=$2 groups=$3 prefix=$4 fanout=$5 expected=$6 warm=$7 win=$8
  shift 8
  local port dir pid spid ppid res pres
  port=$(free_port)
  dir=$TMP/mosq-$name
  mkdir -p "$dir"
  cat >"$dir/mosquitto.conf" <<EOF
listener $port 127.0.0.1
allow_anonymous true
persistence false
log_dest stderr
log_type error
log_type warning
log_type notice
EOF
  "$MOSQUITTO" -c "$dir/mosquitto.conf" >"$dir/stdout" 2>"$dir/stderr" &
  pid=$!
  PIDS+=("$pid")
  if ! wait_port "$port" 10; then
    stop_pid "$pid"
    ROWS+=("$name|mosquitto|failed to start|$expected|-|-|-|-|-")
    return
  fi
  log "$name on mosquitto: $*"
  "$MSUB" --port "$port" --server-pid "$pid" --warmup "$warm" --duration "$win" \
    --label "$name" "$@" >"$dir/sub.out" 2>"$dir/sub.err" &
  spid=$!
  PIDS+=("$spid")
  if ! wait_for "$dir/sub.out" READY 30; then
    stop_pid "$spid"
    stop_pid "$pid"
    ROWS+=("$name|mosquitto|subscribers failed|$expected|-|-|-|-|-")
    return
  fi
  "$MPUB" --port "$port" --points "$points" --groups "$groups" --prefix "$prefix" \
    --rate "$points" --duration $((warm + win + 3)) >"$dir/pub.out" 2>"$dir/pub.err" &
  ppid=$!
  PIDS+=("$ppid")
  wait "$spid" || true
  wait "$ppid" || true
  res=$(grep '^RESULT' "$dir/sub.out" || true)
  pres=$(grep '^RESULT' "$dir/pub.out" || true)
  NOTES+=("$name/mosquitto publisher: averaged $(field published_per_s "$pres") msg/s over its run (target $points; it waits whenever the broker does not read, and skipped $(field skipped "$pres") messages to stay on schedule); each message is owed to $fanout subscribers; publisher CPU $(field client_cpu_pct "$pres") %; broker log lines about dropping: $(grep -c 'dropped' "$dir/stderr" || true)")
  stop_pid "$pid"
  if [ -z "$res" ]; then
    log "$name on mosquitto: no result; subscriber log:"
    tail -20 "$dir/sub.err" >&2
    ROWS+=("$name|mosquitto|failed|$expected|-|-|-|-|-")
    return
  fi
  add_row "$name" mosquitto "$expected" "$res"
}

# add_row NAME SERVER EXPECTED RESULT_LINE
add_row() {
  local v cpu_s cpu_pct per
  v=$(field values_per_s "$4")
  cpu_s=$(field server_cpu_s "$4")
  cpu_pct=$(field server_cpu_pct "$4")
  per=$(awk -v v="$(field values "$4")" -v c="$cpu_s" 'BEGIN { if (c > 0) printf "%.0f", v / c; else print "inf" }')
  ROWS+=("$1|$2|$v|$3|$(field p50_ms "$4")|$(field p99_ms "$4")|$cpu_pct|$per|$(field server_hwm_mb "$4")")
  NOTES+=("$1/$2 client: $(field open "$4")/$(field clients "$4") connections open at the end, $(field closed "$4") closed by the server, window $(field window_s "$4") s, $(field values "$4") updates received and $(field lost "$4") missed (gaps in a point's updates), max latency $(field max_ms "$4") ms, load tool CPU $(field client_cpu_pct "$4") %")
}

log "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
NOTES+=("load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)")
want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
if want L1; then
  run_opsd L1 "tank1-{0000..4999}" 20000 "$L1_WARM" "$L1_WIN" \
    --clients 4 --prefix tank1- --interval 1s
fi
if want scale; then
  run_opsd scale "p-{00000..99999}" 2000000 "$SC_WARM" "$SC_WIN" \
    --clients 100 --spread 10:2 --group 'p-{}' --interval 1s --connect-timeout 60
fi
if [ $MOSQ = 1 ] && want L1; then
  run_mosquitto L1 5000 1 t 4 20000 "$L1_WARM" "$L1_WIN" --clients 4 --topic 't/#'
fi
if [ $MOSQ = 1 ] && want scale; then
  run_mosquitto scale 100000 10 p 20 2000000 "$SC_WARM" "$SC_WIN" \
    --clients 100 --spread 10:2 --group 'p/{}/#'
fi

echo
echo "| scenario | server | updates/s delivered | expected/s | p50 ms | p99 ms | server CPU % | updates per server CPU-second | peak RSS MB |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for r in "${ROWS[@]}"; do
  IFS='|' read -r s srv v e p50 p99 cpu per rss <<<"$r"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$s" "$srv" "$v" "$e" "$p50" "$p99" "$cpu" "$per" "$rss"
done
echo
per_of() {
  local r s srv v e p50 p99 cpu per rss
  for r in "${ROWS[@]}"; do
    IFS='|' read -r s srv v e p50 p99 cpu per rss <<<"$r"
    [ "$s" = "$1" ] && [ "$srv" = "$2" ] && { echo "$per"; return; }
  done
  echo "-"
}
for s in L1 scale; do
  { [ $MOSQ = 1 ] && want "$s"; } || continue
  o=$(per_of "$s" opsd)
  m=$(per_of "$s" mosquitto)
  awk -v s="$s" -v o="$o" -v m="$m" 'BEGIN {
    if (o + 0 > 0 && m + 0 > 0) printf "%s: opsd/mosquitto updates per server CPU-second = %.1f\n", s, o / m;
    else printf "%s: ratio not available (opsd %s, mosquitto %s)\n", s, o, m }'
done
echo
# The targets of the issue, checked.
verdict() { printf '%-62s %s\n' "$1" "$2"; }
row_of() {
  local r s srv rest
  for r in "${ROWS[@]}"; do
    IFS='|' read -r s srv rest <<<"$r"
    [ "$s" = "$1" ] && [ "$srv" = "$2" ] && { echo "$r"; return; }
  done
}
if want L1; then
  IFS='|' read -r _ _ _ _ l1p50 _ l1cpu _ _ <<<"$(row_of L1 opsd)"
  verdict "L1 on opsd under 5% of one core ($l1cpu %)" \
    "$(awk -v c="$l1cpu" 'BEGIN { print (c != "" && c + 0 < 5 && c != "-") ? "PASS" : "FAIL" }')"
  verdict "L1 on opsd p50 under 50 ms ($l1p50 ms)" \
    "$(awk -v p="$l1p50" 'BEGIN { print (p != "-" && p != "" && p + 0 < 50) ? "PASS" : "FAIL" }')"
fi
if want scale; then
  IFS='|' read -r _ _ scv sce _ scp99 _ _ _ <<<"$(row_of scale opsd)"
  verdict "scale on opsd delivers every update ($scv of $sce /s)" \
    "$(awk -v v="$scv" -v e="$sce" 'BEGIN { print (v + 0 >= 0.995 * e) ? "PASS" : "FAIL" }')"
  verdict "scale on opsd p99 under 250 ms ($scp99 ms)" \
    "$(awk -v p="$scp99" 'BEGIN { print (p != "-" && p != "" && p + 0 < 250) ? "PASS" : "FAIL" }')"
  if [ $MOSQ = 1 ]; then
    verdict "scale: opsd delivers more updates per CPU-second than mosquitto" \
      "$(awk -v o="$(per_of scale opsd)" -v m="$(per_of scale mosquitto)" 'BEGIN { print (o + 0 > m + 0 && m + 0 > 0) ? "PASS" : "FAIL" }')"
  fi
fi
NOTES+=("load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)")
echo
for n in "${NOTES[@]}"; do echo "- $n"; done
