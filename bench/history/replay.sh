#!/usr/bin/env bash
# bench/history/replay.sh - startup time of opsd after kill -9 while recording many series:
# the history module replays its write-ahead log (every segment since the last committed
# checkpoint: the carry of open chunks and the samples logged after it) before opsd listens.
#
# opsd (the binary of BUILD, a Release build) records N simulated points changing every
# second (the simulator, all points recorded on change, default commit interval 10 s and
# 1 h partitions). After WARM seconds, and then every GAP seconds, it is killed with SIGKILL
# and started again on the same data directory, ROUNDS times. For each restart it prints:
# the WAL bytes on disk at the kill, the time from exec to "listening on" (wall), the history
# module's own "N series recovered in X ms" line (and the WAL replay's part of it), opsd's
# CPU seconds at that moment
# (utime + stime from /proc/PID/stat) and its RSS, and `uptime`'s load average.
#
# Usage: bench/history/replay.sh BUILD [N [ROUNDS [WARM [GAP]]]]
#        (defaults: 1000000 points, 3 rounds, 90 s, 45 s)
# Environment: HR_LOG (opsd log level, default info; debug shows the checkpoints), HR_DIR
# (working directory, default /tmp/opsd-replay.XXXXXX, removed at the
# end unless HR_KEEP=1). Traffic stays on 127.0.0.1; every process started here is stopped
# on exit.
set -euo pipefail

BUILD=${1:?usage: replay.sh BUILD [N [ROUNDS [WARM [GAP]]]]}
N=${2:-1000000}
ROUNDS=${3:-3}
WARM=${4:-90}
GAP=${5:-45}
OPSD=$(cd "$BUILD" && pwd)/opsd
[ -x "$OPSD" ] || { echo "replay.sh: no opsd in $BUILD" >&2; exit 2; }
DIR=${HR_DIR:-$(mktemp -d /tmp/opsd-replay.XXXXXX)}
mkdir -p "$DIR/data"
OPID=
cleanup() {
  if [ -n "$OPID" ] && kill -0 "$OPID" 2>/dev/null; then kill -9 "$OPID" 2>/dev/null || true; fi
  [ "${HR_KEEP:-0}" = 1 ] && echo "kept $DIR" >&2 || rm -rf "$DIR"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
last=$((N - 1)); digits=${#last}; [ "$digits" -lt 5 ] && digits=5
lo=$(printf "%0${digits}d" 0); hi=$(printf "%0${digits}d" "$last")
cat >"$DIR/opsd.yaml" <<EOF
server:
  listen: 127.0.0.1:$PORT
  data_dir: $DIR/data
  log_level: ${HR_LOG:-info}
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "p-{$lo..$hi}", type: double, pattern: sine, period: 1s, resolution: 0.01}
history:
  retention: 1h
  buffer_max: $((N * 20))
  record:
    - {match: "p-*", mode: on_change}
EOF

ticks=$(getconf CLK_TCK)
cpu_s() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$1/stat"; }
rss_mb() { awk '/^VmRSS/ {print $2 / 1024}' "/proc/$1/status"; }
load() { uptime | sed 's/.*load average: //'; }

# start LOG: starts opsd, waits for "listening on"; sets OPID and SECS (the seconds it took)
start() {
  local log=$1 t0 t1
  t0=$(date +%s.%N)
  "$OPSD" --config "$DIR/opsd.yaml" >"$log" 2>&1 &
  OPID=$!
  for _ in $(seq 1 6000); do
    if grep -q "listening on" "$log"; then
      t1=$(date +%s.%N)
      SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}')
      return 0
    fi
    kill -0 "$OPID" 2>/dev/null || { echo "replay.sh: opsd exited" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.05
  done
  echo "replay.sh: opsd did not listen within 300 s" >&2
  exit 1
}

echo "opsd: $N simulated points at 1 s, all recorded; kill -9 after ${WARM} s, then every ${GAP} s; $ROUNDS restarts"
echo
echo "| restart | WAL at kill (MB) | series recovered | history recovery (log): wall, CPU | of which WAL replay: wall, CPU | exec to listening | opsd CPU s then | RSS MB then | load average |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
start "$DIR/opsd-0.log"
echo "first start (empty store): ${SECS} s" >&2
sleep "$WARM"
for r in $(seq 1 "$ROUNDS"); do
  wal_mb=$(du -sm "$DIR/data/history/wal" | awk '{print $1}')
  kill -9 "$OPID"
  wait "$OPID" 2>/dev/null || true
  OPID=
  ld=$(load)
  start "$DIR/opsd-$r.log"
  secs=$SECS
  cpu=$(cpu_s "$OPID")
  rss=$(rss_mb "$OPID")
  rec=$(grep -o "[0-9]* series recovered in [0-9.]* ms, [0-9.]* s CPU" "$DIR/opsd-$r.log" | tail -1)
  nser=${rec%% series*}
  ms=${rec##* in }
  rep=$(grep -o "WAL replay: [0-9]* segments, [0-9.]* MB in [0-9.]* ms, [0-9.]* s CPU" "$DIR/opsd-$r.log" | tail -1 | sed 's/.* in //')
  printf "| %d | %s | %s | %s | %s | %s s | %.1f | %.0f | %s |\n" "$r" "$wal_mb" "$nser" "$ms" "${rep:--}" "$secs" "$cpu" "$rss" "$ld"
  [ "$r" -lt "$ROUNDS" ] && sleep "$GAP"
done
kill -TERM "$OPID" 2>/dev/null || true
wait "$OPID" 2>/dev/null || true
OPID=
