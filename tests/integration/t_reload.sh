#!/usr/bin/env bash
# Config reload while running: points added, updated, removed; simulator restarted; an invalid
# file refused with the old points kept; edits in place and by rename both seen.
# docs/API.md "Configuration" (the file is watched).
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
CONF="$WORK/opsd.yaml"
write_config "$CONF" "$PORT" "$WORK/data"
if ! start_opsd "$CONF"; then
  not_ok "reload: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "reload: opsd starts"

# total_of PREFIX: the total of GET /api/v1/points?prefix=PREFIX&limit=1 (or <status>).
total_of() {
  req GET "/api/v1/points?prefix=$1&limit=1"
  if [ "$STATUS" = 200 ]; then jv 'd.total'; else echo "<$STATUS>"; fi
}

# wait_for SECONDS DESC CMD...: polls CMD every 0.2 s until it succeeds; on a timeout fails
# with DESC, in which "@" is replaced by the output of $SHOW (the state seen last), if set.
wait_for() {
  local secs=$1 desc=$2 i
  shift 2
  for ((i = 0; i < secs * 5; i++)); do
    "$@" && return 0
    sleep 0.2
  done
  [ -n "${SHOW:-}" ] && desc=${desc//@/$(eval "$SHOW")}
  fail "$desc (not within $secs s)"
  return 1
}
total_is() { [ "$(total_of "$1")" = "$2" ]; }
log_has() { grep -Eq -- "$1" "$OPSD_LOG"; }

# The edits must change the file's mtime visibly even on coarse clocks.
sleep 1

t_add_in_place() {
  write_config "$CONF" "$PORT" "$WORK/data" "" '  - {name: "new-{0..4}", type: int, writable: true, unit: "pcs"}'
  SHOW="total_of new-" wait_for 8 "new-0..4 appear after an in-place edit; total is @" total_is new- 5 || return 1
  req GET /api/v1/points/new-3
  expect_status "GET new-3" 200 || return 1
  expect "new-3 type" "$(jv 'd.type')" int || return 1
  expect "new-3 unit" "$(jv 'd.unit')" pcs || return 1
  expect "tank1- still 100" "$(total_of tank1-)" 100
}
run_test "reload: points added by an in-place edit appear within a few seconds" t_add_in_place

t_refused() {
  req PUT /api/v1/points/ext-000 '{"value": 1.5}'
  expect_status "PUT ext-000" 200 || return 1
  local before
  before=$(grep -c -i 'refused' "$OPSD_LOG")
  cat >"$CONF" <<EOF
server:
  listen: 127.0.0.1:$PORT
  data_dir: $WORK/data
points:
  - {name: "ext-{000..009}", type: double, unit: bar, writable: true}
  - {name: "broken", type: complex}
EOF
  refused_logged() { [ "$(grep -c -i 'refused' "$OPSD_LOG")" -gt "$before" ]; }
  wait_for 8 "the log says the file was refused" refused_logged || return 1
  grep -Eq 'opsd\.yaml:6:' "$OPSD_LOG" || { fail "the log does not name opsd.yaml:6: (the bad line): $(grep -i -m3 'refused' "$OPSD_LOG")"; return 1; }
  sleep 0.5
  expect "new- points kept" "$(total_of new-)" 5 || return 1
  expect "tank1- points kept" "$(total_of tank1-)" 100 || return 1
  req GET /api/v1/points/ext-000
  expect "ext-000 value kept" "$(jv 'd.value')" 1.5 || return 1
  req GET /healthz
  expect_status "healthz" 200
}
run_test "reload: an invalid file is refused (log says so, names file:line), old points stay" t_refused

t_rename_and_remove() {
  # Atomic replace (write a new file, rename it over the old one), as editors do.
  write_config "$CONF.tmp" "$PORT" "$WORK/data" "" '  - {name: "more-{0..2}", type: bool, writable: true}'
  mv -f "$CONF.tmp" "$CONF"
  SHOW="total_of more-" wait_for 8 "more-0..2 appear after a rename; total is @" total_is more- 3 || return 1
  SHOW="total_of new-" wait_for 5 "new- points removed; total is @" total_is new- 0 || return 1
  req GET /api/v1/points/new-1
  expect_error "GET a removed point" 404 unknown_point
}
run_test "reload: a file replaced by rename is applied (points added and removed)" t_rename_and_remove

t_metadata_after_rename() {
  req PUT /api/v1/points/ext-004 '{"value": 4.5}'
  expect_status "PUT ext-004" 200 || return 1
  write_config "$CONF" "$PORT" "$WORK/data" "" '  - {name: "more-{0..2}", type: bool, writable: true}'
  sed -i 's/unit: bar/unit: psi, description: "line pressure"/' "$CONF"
  unit_is_psi() { req GET /api/v1/points/ext-004; [ "$(jv 'd.unit')" = psi ]; }
  wait_for 8 "ext-004 unit becomes psi after an edit following a rename" unit_is_psi || return 1
  expect "description" "$(jv 'd.description')" "line pressure" || return 1
  expect "value kept across a metadata update" "$(jv 'd.value')" 4.5
}
run_test "reload: metadata updated (still watched after a rename), values kept" t_metadata_after_rename

t_sim_restart() {
  write_config "$CONF" "$PORT" "$WORK/data" "" '  - {name: "more-{0..2}", type: bool, writable: true}'
  sed -i 's/tank1-{0000..0099}/tank1-{0000..0049}/; s/pattern: sine, period: 200ms, min: 0, max: 100/pattern: constant, period: 200ms, min: 42, max: 42/' "$CONF"
  SHOW="total_of tank1-" wait_for 8 "tank1- shrinks to 50; total is @" total_is tank1- 50 || return 1
  const_42() { req GET /api/v1/points/tank1-0007; [ "$(jv 'd.value')" = 42 ]; }
  SHOW="jv d.value" wait_for 5 "tank1-0007 becomes the constant 42 (got @)" const_42 || return 1
  req GET /api/v1/status
  expect "status driver points" "$(jv 'd.drivers.map(x=>x.name+":"+x.points).join(",")')" plant:50
}
run_test "reload: simulator driver restarted with its new settings (fewer points, new pattern)" t_sim_restart

t_server_change() {
  local before
  before=$(grep -c -i 'restart' "$OPSD_LOG")
  write_config "$CONF" "$PORT" "$WORK/data" "" '  - {name: "more-{0..2}", type: bool, writable: true}'
  sed -i 's/slow_client_timeout: 2s/slow_client_timeout: 3s/' "$CONF"
  restart_logged() { [ "$(grep -c -i 'restart' "$OPSD_LOG")" -gt "$before" ]; }
  wait_for 8 "the log says a server: change needs a restart" restart_logged || return 1
  SHOW="total_of tank1-" wait_for 5 "tank1- back to 100 (got @)" total_is tank1- 100
}
run_test "reload: changing server: logs that a restart is needed, points still applied" t_server_change

t_metrics() {
  req GET /metrics
  expect_status "GET /metrics" 200 || return 1
  grep -Eq '^opsd_config_reloads_total\{[^}]*result="[^"]+"[^}]*\} [0-9]' "$WORK/body" ||
    { fail "no opsd_config_reloads_total{result=...} sample"; return 1; }
  local n
  n=$(grep -E '^opsd_config_reloads_total\{' "$WORK/body" | awk '{s+=$2} END {print s+0}')
  [ "$n" -ge 5 ] || { fail "opsd_config_reloads_total sums to $n after 6 reloads"; return 1; }
}
run_test "reload: /metrics has opsd_config_reloads_total{result} counting the reloads" t_metrics

t_sigterm() {
  stop_opsd "$OPSD_PID" TERM 5
  expect "exit status after SIGTERM" "$STOP_STATUS" 0
}
run_test "reload: SIGTERM exits 0 within 5 s" t_sigterm

finish
