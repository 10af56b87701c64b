#!/usr/bin/env bash
# bench/history/run.sh - the history benchmark: opsd's history recorder side by side with
# the naive design of the seed (one SQLite row per sample, row deletes for retention) and
# with VictoriaMetrics (Debian package victoria-metrics), in the same run, on 127.0.0.1.
#
#   h1     SEEDS.md H1: 2,000 simulated points changing every second, 10-minute retention,
#          25 minutes (past two retention periods); opsd, the naive recorder (real time) and
#          VictoriaMetrics (fed the same values every second) run at the same time.
#   scale  opsd's simulator with more and more points at period 1 s (HB_SCALE, default
#          100k, 500k, 1M, 2M, 5M), retention 2m in partitions of 1m, buffer_max 20 s of
#          data (HB_BUFFER_S; at least opsd's default), each step run past the first
#          partition drop; a step is sustained when opsd_history_dropped_total is still 0 at
#          the end, opsd_history_durable_total grows at 97 % of the points' rate or more in
#          the window after that drop, and opsd_history_buffer_samples stays bounded: it
#          drains below one second of data in the window's second half (it peaks while a
#          checkpoint runs; the peak is printed). Stops after the first step not sustained.
#   post   POST /api/v1/samples in row form, batches of 10,000 samples of 100,000 points,
#          4 keep-alive connections (bench_hist_load), as fast as opsd acknowledges (200 =
#          durable); then the columnar form, 10 samples per series (as the vm phase's ten
#          per line).
#   naive  the naive recorder flat out with 100,000 points (data time runs ahead of the
#          clock), retention and its deletes running.
#   vm     VictoriaMetrics fed the same 100,000 series through /api/v1/import (JSON lines)
#          as fast as it answers: one sample per line (the shape of opsd's row form), then
#          ten samples per line; disk bytes per sample from its data directory after a flush
#          and a merge.
#   query  10 points backfilled over 30 days through POST (at 1 s; --quick: at 10 s), store
#          partitions of 1 day; p50/p99 of a 1-hour raw query of one point and of a 30-day
#          query of the 10 points in 1,000 buckets.
#   t1     SEEDS.md T1: 25 trend clients on a recording server (2,000 points): each a
#          WebSocket subscription to 10 points plus its 10-minute history window of those
#          points re-queried every 5 s; bytes/s to the clients and opsd's CPU.
#
# Figures: samples/s recorded (opsd: opsd_history_durable_total over the steady window;
# naive: rows committed; VictoriaMetrics: samples acknowledged with 204), bytes per sample
# on disk (opsd: the partition files over the samples they hold, from
# /api/v1/history/partitions; naive: SQLite pages in use over rows kept; VictoriaMetrics:
# data + indexdb directories over samples stored), server CPU (utime+stime from
# /proc/PID/stat, 100 % = one core) and RSS (VmRSS at the window's edges, VmHWM peak).
# It prints Markdown tables, the ratios (opsd over naive, opsd over VictoriaMetrics), the
# issue's targets checked (PASS/FAIL) and notes.
#
# Usage: bench/history/run.sh [--quick] [--no-build] [--only LIST] [--perf] [--keep]
#   --quick     scaled time: H1 with retention 2m in partitions of 1m for 5 minutes, scale
#               steps 100k and 1M, shorter windows (about 20 minutes in all instead of ~65)
#   --no-build  use the binaries already in build-bench/
#   --only LIST comma-separated phases among h1,scale,post,naive,vm,query,t1
#   --perf      perf record -e cpu-clock of opsd for 10 s in the post phase and in each
#               scale step; the top functions go to the notes
#   --keep      keep the working directory (logs, configs, timelines) and print its path
# Environment: OPSD_BIN (another opsd binary), HB_LOG_LEVEL (opsd's log_level, default info), HB_SCALE (e.g. 100000,1000000),
# HB_CONNS (POST connections, default 4), HB_BATCH (samples per request, default 10000),
# HB_BUFFER_S (scale: buffer_max in seconds of data, default 20), HB_SC_RETENTION and
# HB_SC_PARTITION (scale: default 2m and 1m), HB_SC_DUR and HB_SC_WIN (scale: seconds per
# step and of its window at the end; the window should start after the first partition drop,
# i.e. after retention + partition).
# HB_H1_RET_S, HB_H1_PART_S, HB_H1_DUR: H1's retention, partition length and duration in
# seconds (defaults: --quick 120, 60, 300; full 600, 120, 1500).
# Traffic stays on 127.0.0.1. Every process started here is stopped on exit.
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD=$ROOT/build-bench
QUICK=0
DO_BUILD=1
PERF=0
KEEP=0
ONLY="h1,scale,post,naive,vm,query,t1"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --no-build) DO_BUILD=0 ;;
    --perf) PERF=1 ;;
    --keep) KEEP=1 ;;
    --only) shift; ONLY=${1:?--only needs a list} ;;
    *) echo "usage: $0 [--quick] [--no-build] [--only h1,scale,post,naive,vm,query,t1] [--perf] [--keep]" >&2
       exit 2 ;;
  esac
  shift
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }

if [ $QUICK = 1 ]; then
  H1_RET=2m; H1_RET_S=120; H1_PART=1m; H1_PART_S=60; H1_DUR=300; MON=5
  SC_DUR=240; SC_WIN=60; SC_DEFAULT="100000,1000000"
  POST_WARM=5; POST_WIN=20
  NV_RET=60; NV_WARM=45; NV_WIN=45
  VM_WARM=5; VM_WIN=20
  Q_STEP=10000; Q_REPEAT=20
  T1_WARM=5; T1_WIN=30
else
  H1_RET=10m; H1_RET_S=600; H1_PART=2m; H1_PART_S=120; H1_DUR=1500; MON=10
  SC_DUR=270; SC_WIN=80; SC_DEFAULT="100000,500000,1000000,2000000,5000000"
  POST_WARM=5; POST_WIN=60
  NV_RET=120; NV_WARM=120; NV_WIN=120
  VM_WARM=5; VM_WIN=60
  Q_STEP=1000; Q_REPEAT=50
  T1_WARM=10; T1_WIN=60
fi
# H1's retention, partition length and duration, in seconds (e.g. HB_H1_PART_S=120
# HB_H1_RET_S=240 HB_H1_DUR=420 for partitions of 2 minutes with --quick)
if [ -n "${HB_H1_RET_S:-}" ]; then H1_RET_S=$HB_H1_RET_S; H1_RET=${HB_H1_RET_S}s; fi
if [ -n "${HB_H1_PART_S:-}" ]; then H1_PART_S=$HB_H1_PART_S; H1_PART=${HB_H1_PART_S}s; fi
H1_DUR=${HB_H1_DUR:-$H1_DUR}
SCALE=${HB_SCALE:-$SC_DEFAULT}
SC_RET=${HB_SC_RETENTION:-2m}; SC_PART=${HB_SC_PARTITION:-1m}   # the scale steps' history settings
SC_DUR=${HB_SC_DUR:-$SC_DUR}; SC_WIN=${HB_SC_WIN:-$SC_WIN}
CONNS=${HB_CONNS:-4}
BUF_S=${HB_BUFFER_S:-20}
BATCH=${HB_BATCH:-10000}
NPOST=100000   # points of the post, naive and vm phases

if [ $DO_BUILD = 1 ]; then
  scripts/deps.sh bench
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DOPSD_BENCH=ON -DOPSD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j2 >/dev/null
fi
if ! command -v victoria-metrics >/dev/null && { want h1 || want vm; }; then
  echo "run.sh: installing victoria-metrics (Debian)" >&2
  if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq victoria-metrics >/dev/null
fi
OPSD=${OPSD_BIN:-$BUILD/opsd}
LOAD=$BUILD/bench/bench_hist_load
NAIVE=$BUILD/bench/bench_hist_naive
WS=$BUILD/bench/bench_ws_client
VM=$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)
for f in "$OPSD" "$LOAD" "$NAIVE" "$WS" "$VM"; do
  [ -x "$f" ] || { echo "run.sh: missing $f" >&2; exit 1; }
done
for c in curl jq sqlite3; do command -v $c >/dev/null || { echo "run.sh: needs $c" >&2; exit 1; }; done
if [ $PERF = 1 ] && ! command -v perf >/dev/null; then echo "run.sh: --perf needs perf (linux-perf)" >&2; exit 1; fi

TMP=$(mktemp -d /var/tmp/opsd-bench-history.XXXXXX)   # on disk, not tmpfs: fsync means something
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; fi
  done
  for p in "${PIDS[@]:-}"; do
    if [ -n "$p" ]; then wait "$p" 2>/dev/null || true; fi
  done
  if [ $KEEP = 1 ]; then echo "run.sh: working directory kept: $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "run.sh: $(date -u +%H:%M:%S) $*" >&2; }
TCK=$(getconf CLK_TCK)

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 20000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
wait_for() { # FILE TEXT SECONDS
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "run.sh: '$2' did not appear in $1 within $3 s" >&2
  tail -20 "$1" >&2 || true
  return 1
}
wait_port() { # PORT SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "run.sh: nothing listens on port $1 after $2 s" >&2
  return 1
}
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}'; }
proc_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
fmt() { awk -v v="$1" -v d="${2:-0}" 'BEGIN { if (v == "" || v == "-") print "-"; else printf "%.*f", d, v }'; }

ROWS=()    # run|system|samples/s|expected/s|bytes/sample|disk MB|CPU %|RSS MB|notes
QROWS=()   # query|answer|p50|p99|max|bytes/answer|opsd CPU
NOTES=()
PERFS=()
declare -A R   # figures for ratios and verdicts

# ---- opsd ----
# start_opsd NAME: writes $TMP/NAME/opsd.yaml from stdin (after a server: section) and
# starts opsd; sets OPORT, OPID, ODIR.
start_opsd() {
  local name=$1 wait_s=${2:-120}
  ODIR=$TMP/$name
  mkdir -p "$ODIR/data"
  OPORT=$(free_port)
  { printf 'server:\n  listen: 127.0.0.1:%s\n  data_dir: %s\n  log_level: %s\n' "$OPORT" "$ODIR/data" "${HB_LOG_LEVEL:-info}"
    cat; } >"$ODIR/opsd.yaml"
  "$OPSD" --config "$ODIR/opsd.yaml" >"$ODIR/stdout" 2>"$ODIR/stderr" &
  OPID=$!
  PIDS+=("$OPID")
  if ! wait_for "$ODIR/stdout" "listening on" "$wait_s"; then
    tail -20 "$ODIR/stderr" >&2
    stop_pid "$OPID"
    return 1
  fi
}

# mon_opsd PORT PID DIR OUT INTERVAL: a timeline line per INTERVAL while PID lives:
# t cpu_ticks rss_kb hwm_kb durable dropped buffer store_bytes partitions pdropped wal_bytes
# updates du_bytes recorded last_checkpoint_s
mon_opsd() {
  set +e +o pipefail
  local port=$1 pid=$2 dir=$3 out=$4 iv=$5 t0 m
  t0=$(date +%s.%N)
  while kill -0 "$pid" 2>/dev/null; do
    m=$(curl -s -m 5 "http://127.0.0.1:$port/metrics" | awk '
      /^opsd_history_durable_total /{d=$2} /^opsd_history_dropped_total /{x=$2}
      /^opsd_history_buffer_samples /{b=$2} /^opsd_history_store_bytes /{s=$2}
      /^opsd_history_partitions /{p=$2} /^opsd_history_partitions_dropped_total /{pd=$2}
      /^opsd_history_wal_bytes /{w=$2} /^opsd_point_updates_total /{u=$2}
      /^opsd_history_recorded_total /{r=$2} /^opsd_history_checkpoint_seconds /{c=$2}
      END { if (d == "") { print "- - - - - - - - - -"; exit }
            printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f", d, x, b, s, p, pd, w, u; printf " %.0f %.2f", r, c}')
    [ -n "$m" ] || m="- - - - - - - - - -"
    echo "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}') $(cpu_ticks "$pid") $(proc_kb "$pid" VmRSS) $(proc_kb "$pid" VmHWM) $(cut -d' ' -f1-8 <<<"$m") $(du -sb "$dir" 2>/dev/null | cut -f1) $(cut -d' ' -f9-10 <<<"$m")" >>"$out"
    sleep "$iv"
  done
}

# mon_proc PID DIR OUT INTERVAL [VMPORT]: t cpu_ticks rss_kb hwm_kb du_bytes [vm rows]
mon_proc() {
  set +e +o pipefail
  local pid=$1 dir=$2 out=$3 iv=$4 vmport=${5:-} t0 rows
  t0=$(date +%s.%N)
  while kill -0 "$pid" 2>/dev/null; do
    rows=-
    [ -n "$vmport" ] && rows=$(curl -s -m 5 "http://127.0.0.1:$vmport/metrics" |
      awk '/^vm_rows_added_to_storage_total /{printf "%.0f", $2}')
    echo "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{printf "%.1f", a-b}') $(cpu_ticks "$pid") $(proc_kb "$pid" VmRSS) $(proc_kb "$pid" VmHWM) $(du -sb "$dir" 2>/dev/null | cut -f1) ${rows:--}" >>"$out"
    sleep "$iv"
  done
}

# window OUT FROM TO COLS...: over timeline lines with FROM <= t <= TO prints
# "dt cpu_pct rss_first rss_last rss_max hwm" then for each named column (1-based index)
# "first last min max" (the first half's max and the second half's max for flatness too).
win_stats() {
  local out=$1 from=$2 to=$3 col=$4
  awk -v f="$from" -v t="$to" -v c="$col" -v tck="$TCK" '
    $1 >= f && $1 <= t && $2 != "" && $c != "-" {
      n++; T[n] = $1; C[n] = $2; RZ[n] = $3; H = $4; V[n] = $c }
    END {
      if (n < 2) { print "- - - - - - - - - - - -"; exit }
      dt = T[n] - T[1]; mx = 0; mn = V[1]; rmax = 0; h1 = 0; h2 = 0; r1 = 0; r2 = 0
      for (i = 1; i <= n; i++) {
        if (V[i] > mx) mx = V[i]; if (V[i] < mn) mn = V[i]; if (RZ[i] > rmax) rmax = RZ[i]
        if (T[i] - T[1] <= dt / 2) { if (V[i] > h1) h1 = V[i]; if (RZ[i] > r1) r1 = RZ[i] }
        else { if (V[i] > h2) h2 = V[i]; if (RZ[i] > r2) r2 = RZ[i] } }
      printf "%.1f %.1f %.1f %.1f %.1f %.1f %s %s %s %s %s %s %.1f %.1f\n", dt,
        100 * (C[n] - C[1]) / tck / dt, RZ[1] / 1024, RZ[n] / 1024, rmax / 1024, H / 1024,
        V[1], V[n], mn, mx, h1, h2, r1 / 1024, r2 / 1024 }' "$out"
}

# partitions PORT: "bytes samples bytes_per_sample count" over partitions holding samples
opsd_partitions() {
  curl -s -m 60 "http://127.0.0.1:$1/api/v1/history/partitions" |
    jq -r '[.partitions[] | select(.samples > 0)] |
           "\(map(.bytes) | add // 0) \(map(.samples) | add // 0) \(length) \(map(.chunks) | add // 0)"' 2>/dev/null ||
    echo "0 0 0 0"
}

# store_at_rest DIR: "bytes samples files chunks" of the partition files (p-*.db) under DIR/history
# once opsd has stopped (a clean stop leaves no SQLite -wal behind; one left is counted).
# A fifth field: the bytes of the encoded chunks alone (what the codec makes of the data; for
# a sealed partition, the raw size of its blocks: chunks plus their directories). Then the
# sealed partitions (format 3) alone: "bytes samples files".
store_at_rest() {
  local f b=0 s=0 n=0 c=0 d=0 sb=0 ss=0 sn=0 cs x y z fb fmt
  for f in $(find "$1/history" -name 'p-*.db' 2>/dev/null | sort); do
    fb=$(($(stat -c %s "$f") + $( [ -e "$f-wal" ] && stat -c %s "$f-wal" || echo 0)))
    b=$((b + fb))
    fmt=$(sqlite3 -readonly "$f" 'SELECT format FROM meta' 2>/dev/null || echo 0)
    if [ "$fmt" = 3 ]; then
      cs=$(sqlite3 -readonly "$f" 'SELECT samples, chunks, (SELECT coalesce(sum(length(data)), 0) FROM chunks) + (SELECT coalesce(sum(raw), 0) FROM blocks) FROM meta' 2>/dev/null || echo "0|0|0")
    else
      cs=$(sqlite3 -readonly "$f" 'SELECT coalesce(sum(count), 0), count(*), coalesce(sum(length(data)), 0) FROM chunks' 2>/dev/null || echo "0|0|0")
    fi
    IFS='|' read -r x y z <<<"$cs"
    s=$((s + x)); c=$((c + y)); d=$((d + z)); n=$((n + 1))
    if [ "$fmt" = 3 ]; then sb=$((sb + fb)); ss=$((ss + x)); sn=$((sn + 1)); fi
  done
  echo "$b $s $n $c $d $sb $ss $sn"
}
bps_of() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.2f", b / s; else print "-" }'; }

perf_top() { # PID SECONDS LABEL
  [ $PERF = 1 ] || return 0
  local f=$TMP/perf-$3.data
  perf record -e cpu-clock -g -p "$1" -o "$f" -- sleep "$2" >/dev/null 2>&1 || return 0
  PERFS+=("$3: $(perf report -i "$f" --no-children --percent-limit 1.5 --stdio --sort dso,symbol -g none 2>/dev/null |
    awk '/^ +[0-9.]+%/ {printf "%s %s %s; ", $1, $2, $4}' | head -c 900)")
}

# flat A_MAX B_MAX: is the second half's max within 10 % (+ 8 MB) of the first half's?
flat() { awk -v a="$1" -v b="$2" 'BEGIN { print (a != "-" && b != "-" && b <= a * 1.10 + 8) ? "flat" : "grows" }'; }

log "machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo)"
NOTES+=("load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)")

# ================================ H1 ================================
if want h1; then
  log "H1: 2,000 points, retention $H1_RET (partitions of $H1_PART), $H1_DUR s; opsd, naive and VictoriaMetrics side by side"
  start_opsd h1 <<EOF
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{0000..1999}", type: double, pattern: sine, period: 1s, resolution: 0.01}
history:
  retention: $H1_RET
  partition: $H1_PART
  record:
    - {match: "tank1-*", mode: on_change}
EOF
  h1_port=$OPORT h1_pid=$OPID h1_dir=$ODIR
  mon_opsd "$h1_port" "$h1_pid" "$h1_dir/data" "$h1_dir/timeline" "$MON" &
  PIDS+=("$!"); h1_mon=$!
  # naive, real time
  mkdir -p "$TMP/h1-naive"
  "$NAIVE" --db "$TMP/h1-naive/h.db" --points 2000 --retention-s "$H1_RET_S" --realtime \
    --duration "$H1_DUR" --report-s "$MON" >"$TMP/h1-naive/out" 2>"$TMP/h1-naive/err" &
  h1_naive=$!; PIDS+=("$h1_naive")
  # VictoriaMetrics, fed the same values every second
  mkdir -p "$TMP/h1-vm/data"
  vm_port=$(free_port)
  "$VM" -storageDataPath="$TMP/h1-vm/data" -httpListenAddr="127.0.0.1:$vm_port" -retentionPeriod=1d \
    -loggerLevel=ERROR >"$TMP/h1-vm/log" 2>&1 &
  h1_vm=$!; PIDS+=("$h1_vm")
  wait_port "$vm_port" 30
  mon_proc "$h1_vm" "$TMP/h1-vm/data" "$TMP/h1-vm/timeline" "$MON" "$vm_port" &
  PIDS+=("$!"); h1_vmmon=$!
  "$LOAD" post --port "$vm_port" --format vm --points 2000 --prefix tank1- --digits 4 --first 0 \
    --batch 2000 --conns 1 --realtime --duration "$H1_DUR" --server-pid "$h1_vm" --label h1-vm \
    >"$TMP/h1-vm/load.out" 2>"$TMP/h1-vm/load.err" &
  h1_vmload=$!; PIDS+=("$h1_vmload")
  wait "$h1_naive" || true
  wait "$h1_vmload" || true
  sleep 1
  # opsd figures over the steady window (after the first partition drop)
  ws=$((H1_RET_S + H1_PART_S + 30))
  read -r dt cpu rs0 rs1 rsmax hwm d0 d1 _ _ _ _ r1 r2 <<<"$(win_stats "$h1_dir/timeline" "$ws" 1e9 5)"
  read -r _ _ _ _ _ _ s0 s1 smin smax sh1 sh2 _ _ <<<"$(win_stats "$h1_dir/timeline" "$ws" 1e9 8)"
  read -r _ _ _ _ _ _ x0 x1 _ _ _ _ _ _ <<<"$(win_stats "$h1_dir/timeline" "$ws" 1e9 6)"
  read -r _ _ _ _ _ _ _ _ _ bmax _ _ _ _ <<<"$(win_stats "$h1_dir/timeline" "$ws" 1e9 7)"
  read -r _ _ _ _ _ _ _ pdrop _ _ _ _ _ _ <<<"$(win_stats "$h1_dir/timeline" "$ws" 1e9 10)"
  read -r pb ps pn pc <<<"$(opsd_partitions "$h1_port")"
  rate=$(awk -v a="$d0" -v b="$d1" -v t="$dt" 'BEGIN { if (t > 0 && a != "-") printf "%.0f", (b - a) / t; else print "-" }')
  stop_pid "$h1_pid"; wait "$h1_mon" 2>/dev/null || true
  read -r ab as an ac adata asb ass asn <<<"$(store_at_rest "$h1_dir/data")"
  bps=$(bps_of "$ab" "$as")
  R[h1_opsd_bps]=$bps; R[h1_opsd_rate]=$rate
  R[h1_rss_flat]=$(flat "$r1" "$r2"); R[h1_db_flat]=$(flat "$(awk -v v="$sh1" 'BEGIN{print v/1048576}')" "$(awk -v v="$sh2" 'BEGIN{print v/1048576}')")
  ROWS+=("H1|opsd|$rate|2000|$bps|$(fmt "$(awk -v a="$smin" 'BEGIN{print a/1e6}')" 1)-$(fmt "$(awk -v a="$smax" 'BEGIN{print a/1e6}')" 1)|$(fmt "$cpu" 1)|$(fmt "$rs0" 1) -> $(fmt "$rs1" 1) (peak $(fmt "$hwm" 1))|dropped $(awk -v a="$x0" -v b="$x1" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.0f", b - a }'), buffer max $bmax, $pdrop partitions dropped; RSS ${R[h1_rss_flat]}, store ${R[h1_db_flat]}")
  NOTES+=("H1/opsd: steady window from ${ws} s to the end (${dt} s); store while running (/api/v1/history/partitions): $pn partitions, $pc chunks, $ps samples, $pb bytes ($(bps_of "$pb" "$ps") bytes/sample); at rest after the stop: $an files, $ac chunks, $as samples, $ab bytes, of which encoded chunks $adata ($(bps_of "$adata" "$as") bytes/sample); sealed partitions $asn: $asb bytes, $ass samples ($(bps_of "$asb" "$ass") bytes/sample); RSS max first half $r1 MB, second half $r2 MB; store max first half $sh1 B, second half $sh2 B")
  NOTES+=("H1/opsd timeline (t s, durable, buffer, store MB, RSS MB): $(awk -v iv=60 '$1 >= nx { printf "%s %s %s %.1f %.1f; ", int($1), $5, $7, $8/1e6, $3/1024; nx = $1 + iv }' "$h1_dir/timeline")")
  # naive
  nres=$(grep '^RESULT' "$TMP/h1-naive/out" || true)
  if [ -n "$nres" ]; then
    # db size over the steady window from the STAT lines
    nstat=$(awk -v ws="$ws" '$1 == "STAT" { split($2, a, "="); t = a[2]; if (t >= ws) { for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
             n++; if (n == 1) { d0 = v["db_bytes"]; r0 = v["rss_kb"] } d1 = v["db_bytes"]; r1 = v["rss_kb"] } }
             END { printf "%.1f %.1f %.1f %.1f", d0/1e6, d1/1e6, r0/1024, r1/1024 }' "$TMP/h1-naive/out")
    read -r nd0 nd1 nr0 nr1 <<<"$nstat"
    R[h1_naive_bps]=$(field bytes_per_sample "$nres")
    ROWS+=("H1|naive SQLite|$(field samples_per_s "$nres")|2000|$(field bytes_per_sample "$nres")|$nd0 -> $nd1|$(field cpu_pct "$nres")|$nr0 -> $nr1 (peak $(field hwm_mb "$nres"))|late seconds $(field late "$nres"), worst delete pass $(field delete_max_s "$nres") s, rows kept $(field kept "$nres")")
  else
    ROWS+=("H1|naive SQLite|failed|2000|-|-|-|-|$(tail -1 "$TMP/h1-naive/err")")
  fi
  # VictoriaMetrics
  vres=$(grep '^RESULT' "$TMP/h1-vm/load.out" || true)
  curl -s -m 60 "http://127.0.0.1:$vm_port/internal/force_flush" >/dev/null || true
  sleep 2
  vrows=$(curl -s -m 10 "http://127.0.0.1:$vm_port/metrics" | awk '/^vm_rows_added_to_storage_total /{printf "%.0f", $2}')
  read -r vdt vcpu vrs0 vrs1 _ vhwm vd0 vd1 _ _ _ _ _ _ <<<"$(win_stats "$TMP/h1-vm/timeline" "$ws" 1e9 5)"
  stop_pid "$h1_vm"; wait "$h1_vmmon" 2>/dev/null || true
  vbytes=$(du -sb "$TMP/h1-vm/data/data" "$TMP/h1-vm/data/indexdb" 2>/dev/null | awk '{s += $1} END {print s + 0}')
  vbps=$(awk -v b="$vbytes" -v s="$vrows" 'BEGIN { if (s > 0) printf "%.2f", b / s; else print "-" }')
  R[h1_vm_bps]=$vbps
  ROWS+=("H1|VictoriaMetrics|$(fmt "$(field acked_per_s "$vres")")|2000|$vbps|$(fmt "$(awk -v a="$vd0" 'BEGIN{print a/1e6}')" 1) -> $(fmt "$(awk -v a="$vd1" 'BEGIN{print a/1e6}')" 1)|$(fmt "$vcpu" 1)|$(fmt "$vrs0" 1) -> $(fmt "$vrs1" 1) (peak $(fmt "$vhwm" 1))|retention 1 day (its minimum): keeps everything of the run; $vrows samples stored, $vbytes bytes after a flush; late rounds: behind $(field behind_ms "$vres") ms")
fi

# ================================ scale ================================
if want scale; then
  for np in ${SCALE//,/ }; do
    last=$((np - 1)); digits=${#last}; [ "$digits" -lt 5 ] && digits=5
    lo=$(printf "%0${digits}d" 0); hi=$(printf "%0${digits}d" "$last")
    bufmax=$((BUF_S * np)); [ "$bufmax" -lt 4194304 ] && bufmax=4194304   # room for BUF_S s of data
    log "scale: $np simulated points at 1 s, retention $SC_RET (partitions of $SC_PART), $SC_DUR s"
    if ! start_opsd "scale-$np" 600 <<EOF
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "p-{$lo..$hi}", type: double, pattern: sine, period: 1s, resolution: 0.01}
history:
  retention: $SC_RET
  partition: $SC_PART
  buffer_max: $bufmax
  record:
    - {match: "p-*", mode: on_change}
EOF
    then
      ROWS+=("scale $np|opsd simulator|failed to start|$np|-|-|-|-|-"); break
    fi
    sdir=$ODIR spid=$OPID sport=$OPORT
    mon_opsd "$sport" "$spid" "$sdir/data" "$sdir/timeline" 5 &
    smon=$!; PIDS+=("$smon")
    ws=$((SC_DUR - SC_WIN))
    if [ $PERF = 1 ]; then
      sleep $((ws + 5)); perf_top "$spid" 10 "scale-$np"; sleep $((SC_DUR - ws - 15))
    else
      sleep "$SC_DUR"
    fi
    alive=yes; kill -0 "$spid" 2>/dev/null || alive=no
    read -r pb ps pn pc <<<"$(opsd_partitions "$sport")"
    stop_pid "$spid"; wait "$smon" 2>/dev/null || true
    read -r ab as an ac adata asb ass asn <<<"$(store_at_rest "$sdir/data")"
    read -r dt cpu rs0 rs1 rsmax hwm d0 d1 _ _ _ _ r1 r2 <<<"$(win_stats "$sdir/timeline" "$ws" "$SC_DUR" 5)"
    read -r _ _ _ _ _ _ x0 x1 _ _ _ _ _ _ <<<"$(win_stats "$sdir/timeline" 0 "$SC_DUR" 6)"
    read -r _ _ _ _ _ _ _ _ _ bmax _ _ _ _ <<<"$(win_stats "$sdir/timeline" "$ws" "$SC_DUR" 7)"
    read -r _ _ _ _ _ _ _ _ smin smax _ _ _ _ <<<"$(win_stats "$sdir/timeline" "$ws" "$SC_DUR" 8)"
    read -r _ _ _ _ _ _ _ pdrop _ _ _ _ _ _ <<<"$(win_stats "$sdir/timeline" "$ws" "$SC_DUR" 10)"
    read -r _ _ _ _ _ _ u0 u1 _ _ _ _ _ _ <<<"$(win_stats "$sdir/timeline" "$ws" "$SC_DUR" 12)"
    read -r _ _ _ _ _ _ _ _ _ ckmax _ _ _ _ <<<"$(win_stats "$sdir/timeline" 0 "$SC_DUR" 15)"
    rate=$(awk -v a="$d0" -v b="$d1" -v t="$dt" 'BEGIN { if (t > 0 && a != "-") printf "%.0f", (b - a) / t; else print "-" }')
    urate=$(awk -v a="$u0" -v b="$u1" -v t="$dt" 'BEGIN { if (t > 0 && a != "-") printf "%.0f", (b - a) / t; else print "-" }')
    bps=$(bps_of "$ab" "$as")
    dropped=$(awk -v a="$x0" -v b="$x1" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.0f", b }')
    rflat=$(flat "$r1" "$r2")
    read -r _ _ _ _ _ _ _ _ bmin2 _ _ _ _ _ <<<"$(win_stats "$sdir/timeline" $((ws + SC_WIN / 2)) "$SC_DUR" 7)"
    read -r _ _ _ _ _ _ _ _ _ bmaxall _ _ _ _ <<<"$(win_stats "$sdir/timeline" 0 "$SC_DUR" 7)"
    ok=$(awk -v r="$rate" -v n="$np" -v d="$dropped" -v b="$bmin2" -v a="$alive" -v p="$pdrop" 'BEGIN {
      print (a == "yes" && r != "-" && r >= 0.97 * n && d == 0 && b != "-" && b < n && p + 0 > 0) ? "yes" : "no" }')
    bsec=$(awk -v b="$bmaxall" -v n="$np" 'BEGIN { if (b == "-") print "-"; else printf "%.1f", b / n }')
    ROWS+=("scale $np|opsd simulator|$rate|$np|$bps|$(fmt "$(awk -v a="$smin" 'BEGIN{print a/1e6}')" 1)-$(fmt "$(awk -v a="$smax" 'BEGIN{print a/1e6}')" 1)|$(fmt "$cpu" 1)|$(fmt "$rs0" 1) -> $(fmt "$rs1" 1) (peak $(fmt "$hwm" 1))|sustained: $ok (dropped $dropped; buffer max $bmaxall = $bsec s of data, drained to $bmin2 late in the window; point updates $urate/s; $pdrop partitions dropped; RSS $rflat)")
    NOTES+=("scale $np: window $ws-$SC_DUR s ($dt s); store at the end while running: $pn partitions, $pc chunks, $ps samples, $pb bytes ($(bps_of "$pb" "$ps") bytes/sample); at rest after the stop: $an files, $ac chunks, $as samples, $ab bytes, of which encoded chunks $adata ($(bps_of "$adata" "$as") bytes/sample); sealed partitions $asn: $asb bytes, $ass samples ($(bps_of "$asb" "$ass") bytes/sample); opsd alive at the end: $alive")
    NOTES+=("scale $np: buffer_max $bufmax; longest checkpoint seen (opsd_history_checkpoint_seconds, sampled every 5 s) $ckmax s")
    NOTES+=("scale $np timeline (t s, durable, dropped, buffer, store MB, RSS MB, CPU % since previous, last checkpoint s): $(awk -v tck="$TCK" '$1 >= nx { printf "%s %s %s %s %.1f %.1f %.0f %s; ", int($1), $5, $6, $7, $8/1e6, $3/1024, (pt != "" && $1 > pt) ? 100 * ($2 - pc) / tck / ($1 - pt) : 0, $15; pt = $1; pc = $2; nx = $1 + 30 }' "$sdir/timeline")")
    if [ "$alive" = no ]; then NOTES+=("scale $np: opsd exited during the run: $(tail -3 "$sdir/stderr" | tr '\n' ' ')"); fi
    if [ "$ok" = yes ]; then
      R[scale_max]=$np; R[scale_max_rate]=$rate; R[scale_max_flat]=$rflat; R[scale_bps]=$bps
    else
      R[scale_fail]=$np
      grep -E 'warn|error' "$sdir/stderr" | head -3 | sed "s/^/  scale $np opsd: /" >&2 || true
      break
    fi
  done
fi

# ================================ POST ================================
if want post; then
  log "post: row form, $NPOST points, batches of $BATCH, $CONNS connections"
  start_opsd post <<EOF
points:
  - {name: "h-{000000..099999}", type: double}
history:
  retention: 1h
  partition: 10m
  record:
    - {match: "h-*", mode: on_change}
EOF
  pport=$OPORT ppid=$OPID pdir=$ODIR
  if [ $PERF = 1 ]; then (sleep $((POST_WARM + 5)); perf_top "$ppid" 10 post; printf '%s\n' "${PERFS[@]:-}" >"$TMP/perf-post.txt") & PIDS+=("$!"); fi
  pres=$("$LOAD" post --port "$pport" --format opsd --points "$NPOST" --prefix h- --digits 6 \
    --batch "$BATCH" --conns "$CONNS" --start-ts $(( ($(now_ms) / 1000 - 2400) * 1000 )) \
    --warmup "$POST_WARM" --duration "$POST_WIN" --server-pid "$ppid" --label post \
    2>"$pdir/load.err" | grep '^RESULT' || true)
  # the columnar form on the same server, ten samples per series as VictoriaMetrics' ten per
  # line (its data starts after what the row form sent)
  cres=$("$LOAD" post --port "$pport" --format col --points "$NPOST" --prefix h- --digits 6 \
    --batch "$BATCH" --per-series 10 --conns "$CONNS" --start-ts $(( ($(now_ms) / 1000 - 1200) * 1000 )) \
    --warmup "$POST_WARM" --duration "$POST_WIN" --server-pid "$ppid" --label post-col \
    2>"$pdir/load-col.err" | grep '^RESULT' || true)
  sleep 12   # a checkpoint commits the chunks
  read -r pb ps pn pc <<<"$(opsd_partitions "$pport")"
  metrics=$(curl -s "http://127.0.0.1:$pport/metrics" | grep -E '^opsd_history_(buffer_samples|durable_total|write_errors_total)' | tr '\n' ' ')
  stop_pid "$ppid"
  read -r ab as an ac adata asb ass asn <<<"$(store_at_rest "$pdir/data")"
  if [ $PERF = 1 ] && [ -s "$TMP/perf-post.txt" ]; then PERFS+=("$(tail -1 "$TMP/perf-post.txt")"); fi
  bps=$(bps_of "$ab" "$as")
  R[post_rate]=$(field acked_per_s "$pres"); R[post_bps]=$bps
  ROWS+=("POST row form|opsd|$(field acked_per_s "$pres")|-|$bps|$(fmt "$(awk -v a="$ab" 'BEGIN{print a/1e6}')" 1)|$(field server_cpu_pct "$pres")|$(field server_rss_mb "$pres") (peak $(field server_hwm_mb "$pres"))|request p50 $(field p50_ms "$pres") ms, p99 $(field p99_ms "$pres") ms; 503s $(field busy "$pres"), errors $(field errors "$pres"); load tool CPU $(field client_cpu_pct "$pres") %")
  NOTES+=("post: $pres")
  R[post_col_rate]=$(field acked_per_s "$cres")
  ROWS+=("POST columnar, 10 per series|opsd|$(field acked_per_s "$cres")|-|(above)|-|$(field server_cpu_pct "$cres")|$(field server_rss_mb "$cres") (peak $(field server_hwm_mb "$cres"))|request p50 $(field p50_ms "$cres") ms, p99 $(field p99_ms "$cres") ms; 503s $(field busy "$cres"), errors $(field errors "$cres"); load tool CPU $(field client_cpu_pct "$cres") %")
  NOTES+=("post columnar: $cres")
  NOTES+=("post: store after the run while running: $pn partitions, $pc chunks, $ps samples, $pb bytes ($(bps_of "$pb" "$ps") bytes/sample); at rest after the stop: $an files, $ac chunks, $as samples, $ab bytes, of which encoded chunks $adata ($(bps_of "$adata" "$as") bytes/sample); sealed partitions $asn: $asb bytes, $ass samples ($(bps_of "$asb" "$ass") bytes/sample); metrics: $metrics")
  [ -s "$pdir/load.err" ] && NOTES+=("post load tool said: $(head -3 "$pdir/load.err" | tr '\n' ' ')")
fi

# ================================ naive flat out ================================
if want naive; then
  log "naive: $NPOST points flat out, retention $NV_RET s of data, deletes every 30 s of data"
  mkdir -p "$TMP/naive"
  nres=$("$NAIVE" --db "$TMP/naive/n.db" --points "$NPOST" --retention-s "$NV_RET" --warmup "$NV_WARM" \
    --duration "$NV_WIN" --report-s 10 2>"$TMP/naive/err" | tee "$TMP/naive/out" | grep '^RESULT' || true)
  R[naive_rate]=$(field samples_per_s "$nres"); R[naive_bps]=$(field bytes_per_sample "$nres")
  ROWS+=("max rate $NPOST points|naive SQLite|$(field samples_per_s "$nres")|-|$(field bytes_per_sample "$nres")|$(fmt "$(awk -v a="$(field db_bytes "$nres")" 'BEGIN{print a/1e6}')" 1) (+ WAL $(fmt "$(awk -v a="$(field wal_bytes "$nres")" 'BEGIN{print a/1e6}')" 1))|$(field cpu_pct "$nres")|$(field rss_mb "$nres") (peak $(field hwm_mb "$nres"))|delete passes $(field delete_passes "$nres"), worst $(field delete_max_s "$nres") s, mean $(field delete_mean_s "$nres") s; worst second's work $(field worst_second_s "$nres") s; rows kept $(field kept "$nres")")
  NOTES+=("naive: $nres")
fi

# ================================ VictoriaMetrics flat out ================================
if want vm; then
  log "vm: $NPOST series through /api/v1/import, as fast as it answers"
  mkdir -p "$TMP/vm/data"
  vm_port=$(free_port)
  "$VM" -storageDataPath="$TMP/vm/data" -httpListenAddr="127.0.0.1:$vm_port" -retentionPeriod=1d \
    -loggerLevel=ERROR >"$TMP/vm/log" 2>&1 &
  vpid=$!; PIDS+=("$vpid")
  wait_port "$vm_port" 30
  vstart=$(( ($(now_ms) / 1000 - 6 * 3600) * 1000 ))
  for k in 1 10; do
    vres=$("$LOAD" post --port "$vm_port" --format vm --points "$NPOST" --prefix h- --digits 6 \
      --batch "$BATCH" --per-series "$k" --conns "$CONNS" --start-ts "$vstart" \
      --warmup "$VM_WARM" --duration "$VM_WIN" --server-pid "$vpid" --label "vm-$k" \
      2>"$TMP/vm/load-$k.err" | grep '^RESULT' || true)
    R[vm_rate_$k]=$(field acked_per_s "$vres")
    ROWS+=("import, $k sample(s) per line|VictoriaMetrics|$(field acked_per_s "$vres")|-|(below)|-|$(field server_cpu_pct "$vres")|$(field server_rss_mb "$vres") (peak $(field server_hwm_mb "$vres"))|request p50 $(field p50_ms "$vres") ms, p99 $(field p99_ms "$vres") ms; errors $(field errors "$vres"); load tool CPU $(field client_cpu_pct "$vres") %")
    NOTES+=("vm $k per line: $vres")
    vstart=$(( ($(now_ms) / 1000 - 3 * 3600) * 1000 ))
  done
  curl -s -m 120 "http://127.0.0.1:$vm_port/internal/force_flush" >/dev/null || true
  sleep 3
  vrows=$(curl -s -m 10 "http://127.0.0.1:$vm_port/metrics" | awk '/^vm_rows_added_to_storage_total /{printf "%.0f", $2}')
  vb1=$(du -sb "$TMP/vm/data/data" "$TMP/vm/data/indexdb" | awk '{s += $1} END {print s + 0}')
  curl -s -m 300 "http://127.0.0.1:$vm_port/internal/force_merge" >/dev/null || true
  # the merge runs in the background: wait until the size holds still
  prev=0
  for i in $(seq 1 60); do
    sleep 2
    cur=$(du -sb "$TMP/vm/data/data" "$TMP/vm/data/indexdb" | awk '{s += $1} END {print s + 0}')
    [ "$cur" = "$prev" ] && break
    prev=$cur
  done
  stop_pid "$vpid"
  vb2=$(du -sb "$TMP/vm/data/data" "$TMP/vm/data/indexdb" | awk '{s += $1} END {print s + 0}')
  R[vm_bps_flush]=$(awk -v b="$vb1" -v s="$vrows" 'BEGIN { if (s > 0) printf "%.2f", b / s; else print "-" }')
  R[vm_bps]=$(awk -v b="$vb2" -v s="$vrows" 'BEGIN { if (s > 0) printf "%.2f", b / s; else print "-" }')
  ROWS+=("both imports, on disk|VictoriaMetrics|-|-|${R[vm_bps]}|$(fmt "$(awk -v a="$vb2" 'BEGIN{print a/1e6}')" 1)|-|-|$vrows samples; ${R[vm_bps_flush]} bytes/sample after the flush, ${R[vm_bps]} after the merge (data + indexdb)")
fi

# ================================ queries ================================
if want query; then
  log "query: backfill 10 points over 30 days at $((Q_STEP / 1000)) s through POST"
  start_opsd query <<EOF
points:
  - {name: "q-{00..09}", type: double}
history:
  retention: 40d
  partition: 1d
  record:
    - {match: "q-*", mode: on_change}
EOF
  qport=$OPORT qpid=$OPID qdir=$ODIR
  qend=$(( ($(now_ms) / 60000 - 1) * 60000 ))
  qstart=$((qend - 30 * 86400000))
  bres=$("$LOAD" post --port "$qport" --format opsd --points 10 --prefix q- --digits 2 \
    --batch 10000 --per-series 1000 --conns "$CONNS" --step-ms "$Q_STEP" --start-ts "$qstart" \
    --end-ts "$qend" --duration 0 --server-pid "$qpid" --label backfill 2>"$qdir/load.err" | grep '^RESULT' || true)
  NOTES+=("query backfill: $(field total_acked "$bres") samples in $(field window_s "$bres") s ($(field acked_per_s "$bres") samples/s, 10 points x 1,000 consecutive samples per request, $CONNS connections, opsd CPU $(field server_cpu_pct "$bres") %)")
  sleep 12   # a checkpoint commits the chunks
  read -r pb ps pn pc <<<"$(opsd_partitions "$qport")"
  NOTES+=("query store while running: $pn partitions, $pc chunks, $ps samples, $pb bytes ($(bps_of "$pb" "$ps") bytes/sample)")
  pts=$(printf 'q-%02d,' $(seq 0 9)); pts=${pts%,}
  q1="/api/v1/history?points=q-00&from=$((qend - 3600000))&to=$qend"
  q2="/api/v1/history?points=$pts&from=$qstart&to=$qend&buckets=1000"
  n1=$(curl -s "http://127.0.0.1:$qport$q1&limit=1000000" | jq '[.series[].samples | length] | add' 2>/dev/null || echo "?")
  n2=$(curl -s "http://127.0.0.1:$qport$q2" | jq '[.series[].buckets | length] | add' 2>/dev/null || echo "?")
  c2=$(curl -s "http://127.0.0.1:$qport$q2&agg=count" | jq '[.series[].buckets[][1].count] | add' 2>/dev/null || echo "?")
  e1=$((3600000 / Q_STEP + 1))
  for q in 1 2; do
    if [ $q = 1 ]; then path=$q1; what="1 h raw, 1 point"; ans="$n1 samples (expected $e1)"
    else path=$q2; what="30 days, 10 points, 1,000 buckets (avg,min,max)"; ans="$n2 buckets over $c2 samples"; fi
    qres=$("$LOAD" get --port "$qport" --path "$path" --repeat "$Q_REPEAT" --server-pid "$qpid" --label "q$q" \
      2>"$qdir/q$q.err" | grep '^RESULT' || true)
    QROWS+=("$what|$ans|$(field p50_ms "$qres")|$(field p99_ms "$qres")|$(field max_ms "$qres")|$(field bytes_per_answer "$qres")|$(field server_cpu_pct "$qres")")
    R[q${q}_p50]=$(field p50_ms "$qres"); R[q${q}_p99]=$(field p99_ms "$qres")
  done
  R[q_ok]=$(awk -v a="$n1" -v e="$e1" -v b="$n2" -v c="$c2" -v s="$(field total_acked "$bres")" 'BEGIN { print (a == e && b + 0 >= 9990 && c == s) ? "yes" : "no" }')
  NOTES+=("query answers: 1 h raw $n1 samples (expected $e1); 30 d $n2 buckets, counting $c2 samples (backfilled $(field total_acked "$bres"))")
  # The same queries once the store has sealed the partitions that have ended (the sealer
  # waits for the commit interval + 5 s after a partition's last commit): the answers must be
  # the same, the latencies show what reading compressed blocks costs.
  a1=$(curl -s "http://127.0.0.1:$qport$q1&limit=1000000" | md5sum)
  a2=$(curl -s "http://127.0.0.1:$qport$q2" | md5sum)
  for _ in $(seq 1 120); do
    ns=$(curl -s -m 10 "http://127.0.0.1:$qport/api/v1/history/partitions" | jq '[.partitions[] | select(.sealed)] | length' 2>/dev/null || echo 0)
    [ "${ns:-0}" -ge $((pn - 1)) ] && break
    sleep 1
  done
  b1=$(curl -s "http://127.0.0.1:$qport$q1&limit=1000000" | md5sum)
  b2=$(curl -s "http://127.0.0.1:$qport$q2" | md5sum)
  same=$([ "$a1" = "$b1" ] && [ "$a2" = "$b2" ] && echo yes || echo no)
  NOTES+=("query after sealing: $ns of $pn partitions sealed; answers identical to before: $same")
  R[q_sealed_same]=$same
  for q in 1 2; do
    if [ $q = 1 ]; then path=$q1; what="1 h raw, 1 point, sealed"; else path=$q2; what="30 days, 10 points, 1,000 buckets, sealed"; fi
    qres=$("$LOAD" get --port "$qport" --path "$path" --repeat "$Q_REPEAT" --server-pid "$qpid" --label "q${q}s" \
      2>"$qdir/q${q}s.err" | grep '^RESULT' || true)
    QROWS+=("$what|same answer: $same|$(field p50_ms "$qres")|$(field p99_ms "$qres")|$(field max_ms "$qres")|$(field bytes_per_answer "$qres")|$(field server_cpu_pct "$qres")")
  done
  stop_pid "$qpid"
  read -r ab as an ac adata asb ass asn <<<"$(store_at_rest "$qdir/data")"
  NOTES+=("query store at rest after the stop: $an files, $ac chunks, $as samples, $ab bytes ($(bps_of "$ab" "$as") bytes/sample), of which encoded chunks $adata ($(bps_of "$adata" "$as") bytes/sample); sealed partitions $asn: $asb bytes, $ass samples ($(bps_of "$asb" "$ass") bytes/sample)")
fi

# ================================ T1 ================================
if want t1; then
  log "t1: 25 trend clients (stream + 10-minute window re-queried every 5 s) on a recording server"
  start_opsd t1 <<EOF
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{0000..1999}", type: double, pattern: sine, period: 1s, resolution: 0.01}
history:
  retention: 1h
  partition: 10m
  record:
    - {match: "tank1-*", mode: on_change}
EOF
  tport=$OPORT tpid=$OPID tdir=$ODIR
  # ten minutes of history for every point, so each window is full
  tend=$(( ($(now_ms) / 1000 - 1) * 1000 ))
  "$LOAD" post --port "$tport" --format opsd --points 2000 --prefix tank1- --digits 4 --batch 10000 \
    --per-series 60 --conns 2 --start-ts $((tend - 600000)) --end-ts "$tend" --duration 0 --label t1-fill \
    >"$tdir/fill.out" 2>"$tdir/fill.err" || true
  tpts=$(printf 'tank1-%04d,' $(seq 0 9)); tpts=${tpts%,}
  b0=$(curl -s "http://127.0.0.1:$tport/metrics" | awk '/^opsd_stream_bytes_sent_total /{printf "%.0f", $2}')
  c0=$(cpu_ticks "$tpid"); t0=$(date +%s.%N)
  "$WS" --port "$tport" --clients 25 --prefix tank1-000 --interval 1s --warmup "$T1_WARM" --duration "$T1_WIN" \
    --server-pid "$tpid" --label t1 >"$tdir/ws.out" 2>"$tdir/ws.err" &
  twpid=$!; PIDS+=("$twpid")
  hres=$("$LOAD" get --port "$tport" --conns 25 --interval-ms 5000 --warmup "$T1_WARM" --duration "$T1_WIN" \
    --path "/api/v1/history?points=$tpts&from={now-600000}&to={now}" --server-pid "$tpid" --label t1-history \
    2>"$tdir/h.err" | grep '^RESULT' || true)
  wait "$twpid" || true
  c1=$(cpu_ticks "$tpid"); t1=$(date +%s.%N)
  b1=$(curl -s "http://127.0.0.1:$tport/metrics" | awk '/^opsd_stream_bytes_sent_total /{printf "%.0f", $2}')
  wres=$(grep '^RESULT' "$tdir/ws.out" || true)
  tcpu=$(awk -v a="$c0" -v b="$c1" -v x="$t0" -v y="$t1" -v k="$TCK" 'BEGIN { printf "%.1f", 100 * (b - a) / k / (y - x) }')
  R[t1_cpu]=$tcpu
  R[t1_bytes]=$(awk -v w="$(field bytes_per_s "$wres")" -v h="$(field bytes_per_s "$hres")" 'BEGIN { printf "%.0f", w + h }')
  NOTES+=("t1: stream $(field bytes_per_s "$wres") B/s to 25 clients ($(field values_per_s "$wres") values/s, p99 latency $(field p99_ms "$wres") ms); history $(field bytes_per_s "$hres") B/s ($(field requests_per_s "$hres") windows/s, $(field bytes_per_answer "$hres") B each, p50 $(field p50_ms "$hres") ms, p99 $(field p99_ms "$hres") ms); opsd CPU $tcpu % over the whole T1 run (recording 2,000 points/s as well); peak RSS $(field server_hwm_mb "$hres") MB; stream bytes counted by opsd: $((${b1:-0} - ${b0:-0}))")
  stop_pid "$tpid"
fi

# ================================ report ================================
echo
echo "| run | system | samples/s recorded | expected/s | bytes/sample on disk | disk MB | CPU % | RSS MB | notes |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"
for r in "${ROWS[@]:-}"; do
  [ -n "$r" ] || continue
  IFS='|' read -r a b c d e f g h i <<<"$r"
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i"
done
if [ ${#QROWS[@]} -gt 0 ]; then
  echo
  echo "| query | answer | p50 ms | p99 ms | max ms | bytes/answer | opsd CPU % |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
  for r in "${QROWS[@]}"; do
    IFS='|' read -r a b c d e f g <<<"$r"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g"
  done
fi
echo
ratio() { awk -v a="$2" -v b="$3" -v w="$1" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%s: %.2f\n", w, a / b; else printf "%s: not available (%s / %s)\n", w, a, b }'; }
vm_best=$(awk -v a="${R[vm_rate_1]:-}" -v b="${R[vm_rate_10]:-}" 'BEGIN { m = a + 0; if (b + 0 > m) m = b + 0; print m ? m : "-" }')
ratio "opsd simulator max sustained rate / naive max rate" "${R[scale_max_rate]:-}" "${R[naive_rate]:-}"
ratio "opsd POST rate / naive max rate" "${R[post_rate]:-}" "${R[naive_rate]:-}"
ratio "naive bytes/sample / opsd bytes/sample (H1)" "${R[h1_naive_bps]:-}" "${R[h1_opsd_bps]:-}"
ratio "opsd simulator max sustained rate / VictoriaMetrics best import rate" "${R[scale_max_rate]:-}" "$vm_best"
ratio "opsd POST rate / VictoriaMetrics import rate, 1 sample per line" "${R[post_rate]:-}" "${R[vm_rate_1]:-}"
ratio "opsd POST rate / VictoriaMetrics import rate, 10 samples per line" "${R[post_rate]:-}" "${R[vm_rate_10]:-}"
ratio "opsd POST columnar (10 per series) / VictoriaMetrics import rate, 10 samples per line" "${R[post_col_rate]:-}" "${R[vm_rate_10]:-}"
ratio "VictoriaMetrics bytes/sample / opsd bytes/sample (same 100,000 series, POST phase)" "${R[vm_bps]:-}" "${R[post_bps]:-}"
ratio "VictoriaMetrics bytes/sample / opsd bytes/sample (H1)" "${R[h1_vm_bps]:-}" "${R[h1_opsd_bps]:-}"
echo
verdict() { printf '%-80s %s\n' "$1" "$2"; }
pf() { awk "BEGIN { print ($1) ? \"PASS\" : \"FAIL\" }"; }
if want scale; then
  verdict "simulator >= 5,000,000 samples/s sustained, WAL on, RSS flat (max sustained ${R[scale_max_rate]:--}/s, RSS ${R[scale_max_flat]:--})" \
    "$(pf "\"${R[scale_max_rate]:-0}\" + 0 >= 5000000 && \"${R[scale_max_flat]:-}\" == \"flat\"")"
fi
if want post; then
  verdict "POST row form >= 2,000,000 samples/s (${R[post_rate]:--}/s)" "$(pf "\"${R[post_rate]:-0}\" + 0 >= 2000000")"
fi
if want h1; then
  verdict "<= 3 bytes/sample, simulator's sine at 0.01 (H1, partitions of $H1_PART: ${R[h1_opsd_bps]:--}; scale, 1m: ${R[scale_bps]:--})" \
    "$(pf "\"${R[h1_opsd_bps]:-99}\" + 0 <= 3 && \"${R[h1_opsd_bps]:-}\" != \"-\"")"
  verdict "H1: rate sustained, RSS and database flat once retention runs (${R[h1_opsd_rate]:--}/s, RSS ${R[h1_rss_flat]:--}, store ${R[h1_db_flat]:--})" \
    "$(pf "\"${R[h1_opsd_rate]:-0}\" + 0 >= 1990 && \"${R[h1_rss_flat]:-}\" == \"flat\" && \"${R[h1_db_flat]:-}\" == \"flat\"")"
fi
if want vm; then
  verdict "opsd rate >= VictoriaMetrics: simulator (${R[scale_max_rate]:--}/s vs $vm_best/s)" "$(pf "\"${R[scale_max_rate]:-0}\" + 0 >= \"$vm_best\" + 0 && \"$vm_best\" + 0 > 0")"
  verdict "opsd rate >= VictoriaMetrics: POST vs import, like for like (${R[post_rate]:--}/s vs $vm_best/s)" "$(pf "\"${R[post_rate]:-0}\" + 0 >= \"$vm_best\" + 0 && \"$vm_best\" + 0 > 0")"
  verdict "opsd columnar >= VictoriaMetrics, 10 samples per series/line (${R[post_col_rate]:--}/s vs ${R[vm_rate_10]:--}/s)" "$(pf "\"${R[post_col_rate]:-0}\" + 0 >= \"${R[vm_rate_10]:-0}\" + 0 && \"${R[vm_rate_10]:-0}\" + 0 > 0")"
  verdict "opsd fewer bytes/sample than VictoriaMetrics (opsd ${R[post_bps]:--}, VM ${R[vm_bps]:--})" \
    "$(pf "\"${R[post_bps]:-99}\" + 0 < \"${R[vm_bps]:-0}\" + 0 && \"${R[post_bps]:-}\" != \"-\"")"
fi
if want query; then
  verdict "queries answer what was stored (1 h raw: all samples; 30 d: ~1,000 buckets per point)" \
    "$(pf "\"${R[q_ok]:-no}\" == \"yes\"")"
  verdict "queries answer the same after the partitions are sealed" \
    "$(pf "\"${R[q_sealed_same]:-no}\" == \"yes\"")"
fi
NOTES+=("load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)")
echo
for n in "${NOTES[@]}"; do echo "- $n"; done
for p in "${PERFS[@]:-}"; do [ -n "$p" ] && echo "- perf (cpu-clock, self time) $p"; done
exit 0
