#!/usr/bin/env bash
# A full disk, for every store at once (history, alarms, registry, journal) on a small tmpfs:
# while it is full every acknowledgement comes within its deadline (an error, never a hang);
# once space is back every writer recovers by itself, without a restart; and after a restart
# everything acknowledged is there and nothing refused is. docs/API.md "A full disk".
# Needs root (mounts a tmpfs); skipped with the reason otherwise.
. "$(dirname "$0")/lib/lib.sh"

if [ "$(id -u)" != 0 ]; then
  ok "disk full: skipped # SKIP needs root to mount a tmpfs"
  finish
fi
MNT="$WORK/small"
mkdir -p "$MNT"
if ! out=$(mount -t tmpfs -o size=64m tmpfs "$MNT" 2>&1); then
  ok "disk full: skipped # SKIP cannot mount a tmpfs here: $out"
  finish
fi
FILLER=
trap 'touch "$WORK/fill.stop"; [ -n "$FILLER" ] && wait "$FILLER"; stop_all; umount -l "$MNT" 2>/dev/null; cleanup' EXIT

PORT=$(free_port)
DATA="$MNT/data"
write_config "$WORK/opsd.yaml" "$PORT" "$DATA" "" '
deployment:
  state: Normal
  states:
    Normal: {lim: 50}
alarms:
  retention: 1d
  partition: 1h
  definitions:
    - {area: A, each: {i: "000..009"}, group: g, name: "al-$i", expression: "{ext-$i}",
       thresholds: [{name: HH, op: ">=", limit: lim, priority: 1, message: "high"}]}
history:
  retention: 1d
  partition: 1h
  commit_interval: 2s
  record:
    - {match: "ext-*", mode: on_change}
registry:
  plugin_timeout: 1s
journal:
  retention: 1d
  disk_floor: 1MB'
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "disk full: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "disk full: opsd starts on a 64 MB tmpfs"

T0=$(($(date +%s) * 1000 - 1800000))
ACKED="$WORK/acked"    # "point ts" of every sample acknowledged with 200
: >"$ACKED"

# samples_body K POINT N: N samples of POINT at T0 + K*1000 + j, values below the alarm limit.
samples_body() {
  node -e 'const [k,p,n,t0]=process.argv.slice(1).map((x,i)=>i==1?x:Number(x));
    const ts=[],v=[];for(let j=0;j<n;j++){ts.push(t0+k*1000+j);v.push(j%40)}
    console.log(JSON.stringify({series:[{point:p,ts:ts,values:v}]}))' "$1" "$2" "$3" "$T0"
}
# post_samples K POINT N: POSTs them; on 200 notes them as acknowledged.
post_samples() {
  samples_body "$1" "$2" "$3" >"$WORK/s.json"
  req POST /api/v1/samples "@$WORK/s.json"
  if [ "$STATUS" = 200 ]; then
    node -e 'const d=require(process.argv[1]);for(const t of d.series[0].ts)console.log(d.series[0].point+" "+t)' \
      "$WORK/s.json" >>"$ACKED"
  fi
}
# timed METHOD PATH BODY OUT: a request in the background; OUT gets "status seconds" then the body.
timed() {
  curl -s -o "$4.body" -w '%{http_code} %{time_total}' --max-time 40 -X "$1" \
    -H 'Content-Type: application/json' --data-binary "$3" "$BASE$2" >"$4" 2>/dev/null
}
# fill_disk: fills the tmpfs, then keeps taking whatever a store frees (a rolled-back SQLite
# transaction, a deleted WAL segment) until $WORK/fill.stop exists.
fill_disk() {
  dd if=/dev/zero of="$MNT/filler" bs=1M status=none 2>/dev/null
  (while [ ! -e "$WORK/fill.stop" ]; do
     cat /dev/zero >>"$MNT/filler2" 2>/dev/null
     sleep 0.02
   done) &
  FILLER=$!
  sleep 0.2
}
status_of() { req GET /api/v1/status; jv "$1"; }

# registry_and_journal WHEN: registers ch-WHEN and posts the message m-WHEN, both answered 200.
registry_and_journal() {
  req POST /ncmpInventory/v1/ch "{\"dmiPlugin\":\"http://127.0.0.1:9\",\"createdCmHandles\":[{\"cmHandle\":\"ch-$1\"}]}"
  expect_status "registry $1" 200 || return 1
  req POST /api/v1/messages "{\"messages\":[{\"headers\":{\"NServiceBus.MessageId\":\"m-$1\"},\"body\":\"x\"}]}"
  expect_status "journal $1" 200
}

t_before() {
  for k in 0 1 2; do
    post_samples "$k" ext-000 500
    expect_status "samples before the disk is full" 200 || return 1
  done
  registry_and_journal before
}
run_test "disk full: every store takes writes before" t_before

# While the disk is full: all four at once, each answered within its deadline.
fill_disk
samples_body 100 ext-001 2500 >"$WORK/full.json"
timed POST /api/v1/samples "@$WORK/full.json" "$WORK/r.samples" &
p1=$!
timed POST /api/v1/samples '{"samples":[{"point":"ext-009","value":99}]}' "$WORK/r.trigger" &
p2=$!
sleep 1
timed POST /api/v1/alarms/ack '{"alarms":["al-009"],"comment":"on a full disk"}' "$WORK/r.ack" &
p3=$!
timed POST /ncmpInventory/v1/ch '{"dmiPlugin":"http://127.0.0.1:9","createdCmHandles":[{"cmHandle":"ch-full"}]}' "$WORK/r.reg" &
p4=$!
timed POST /api/v1/messages '{"messages":[{"headers":{"NServiceBus.MessageId":"m-full"},"body":"y"}]}' "$WORK/r.jnl" &
p5=$!
sleep 4
FAULTS=$(status_of '[d.history.wal_fault, d.alarms.write_fault, d.registry.write_fault].join("|")')
HEALTH=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$BASE/healthz")
wait $p1 $p2 $p3 $p4 $p5

# answered FILE STATUS MAX_SECONDS CODE
answered() {
  local st secs code
  read -r st secs <"$1"
  # opsd's {"error":{"code"}}; NCMP's {"status":"500 INTERNAL_SERVER_ERROR",...} on its paths
  code=$(jv 'd.error ? d.error.code : String(d.status).replace(/^\d+ /, "")' "$1.body")
  expect "$(basename "$1") status" "$st" "$2" || return 1
  expect "$(basename "$1") error code" "$code" "$4" || return 1
  node -e "process.exit(Number(process.argv[1]) <= $3 ? 0 : 1)" "$secs" ||
    fail "$(basename "$1"): answered after $secs s, more than $3 s"
}
t_full_samples() { answered "$WORK/r.samples" 500 12 not_durable; }
run_test "disk full: POST /api/v1/samples answers 500 not_durable within 12 s" t_full_samples
t_full_ack() { answered "$WORK/r.ack" 500 12 not_durable; }
run_test "disk full: POST /api/v1/alarms/ack answers 500 not_durable within 12 s" t_full_ack
t_full_reg() { answered "$WORK/r.reg" 500 13 INTERNAL_SERVER_ERROR; }
run_test "disk full: a registration answers 500 (NCMP's error) within 13 s" t_full_reg
t_full_jnl() {
  local st secs
  read -r st secs <"$WORK/r.jnl"
  expect_match "journal status" "$st" '^(503|507)$' || return 1
  node -e "process.exit(Number(process.argv[1]) <= 12 ? 0 : 1)" "$secs" ||
    fail "journal: answered after $secs s"
}
run_test "disk full: POST /api/v1/messages is refused (503/507) within 12 s" t_full_jnl
t_full_visible() {
  expect "healthz while full" "$HEALTH" 200 || return 1
  expect "status shows the faults" "$FAULTS" 'No space left on device|No space left on device|No space left on device'
}
run_test "disk full: /healthz answers; status shows history.wal_fault, alarms.write_fault, registry.write_fault" t_full_visible

# Space back: every writer recovers by itself.
touch "$WORK/fill.stop"
wait "$FILLER"
rm -f "$MNT/filler" "$MNT/filler2"
t_recovers() {
  local i f
  for ((i = 0; i < 100; i++)); do
    f=$(status_of '[d.history.wal_fault, d.alarms.write_fault, d.registry.write_fault].join("|")')
    [ "$f" = "||" ] && break
    sleep 0.1
  done
  expect "faults cleared within 10 s" "$f" "||" || return 1
  req GET /metrics
  expect_match "opsd_history_wal_recoveries_total" "$(grep '^opsd_history_wal_recoveries_total' "$WORK/body")" ' [1-9]' || return 1
  expect_match "opsd_history_wal_fault" "$(grep '^opsd_history_wal_fault' "$WORK/body")" ' 0$' || return 1
  for k in 200 201; do
    post_samples "$k" ext-002 500
    expect_status "samples after" 200 || return 1
  done
  req GET /api/v1/alarms/al-009
  expect "al-009 acknowledged (the ack of the full disk)" "$(jv 'd.alarms[0].acked')" true || return 1
  req POST /api/v1/alarms/shelve '{"alarms":["al-009"],"duration":"1h","comment":"after"}'
  expect_status "shelve after" 200 || return 1
  registry_and_journal after
}
run_test "disk full: space back, every store takes writes again without a restart" t_recovers

# A restart: everything acknowledged is there, nothing refused is.
stop_opsd
t_restart() {
  start_opsd "$WORK/opsd.yaml" || return 1
  local p want got
  for p in ext-000 ext-001 ext-002; do
    req GET "/api/v1/history?points=$p&from=$T0&to=$((T0 + 3600000))&limit=100000"
    expect_status "history $p" 200 || return 1
    want=$(grep -c "^$p " "$ACKED")
    got=$(jv 'd.series[0].samples.length')
    expect "$p: samples after the restart (acknowledged ones)" "$got" "$want" || return 1
  done
  req GET /api/v1/alarms/al-009
  expect "al-009 acked after the restart" "$(jv 'd.alarms[0].acked')" true || return 1
  expect "al-009 shelved after the restart" "$(jv 'd.alarms[0].shelved')" true || return 1
  for h in ch-before ch-full ch-after; do
    req GET "/ncmp/v1/ch/$h"
    expect_status "registry $h after the restart" 200 || return 1
  done
  req GET /api/v1/messages/m-after
  expect_status "journal m-after after the restart" 200
}
run_test "disk full: after a restart every acknowledged write is there (history: exactly those)" t_restart

finish
