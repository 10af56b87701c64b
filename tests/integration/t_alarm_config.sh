#!/usr/bin/env bash
# Alarm configuration against the real daemon: a bad alarms: section refused by
# --check-config with FILE:LINE, the expression position and the reason (syntax, operator,
# limit, unknown point), and an invalid reload that keeps the running alarms. The alarm
# behaviour itself (REST, stream, events, restart) is t_alarm.mjs. docs/API.md "Alarms".
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
CONF="$WORK/opsd.yaml"
ALARMS='deployment:
  state: Normal
  states:
    Normal:  {loadMax: 380, loadMin: 250}
    Startup: {loadMax: 420, loadMin: 100}
alarms:
  - area: Intake
    each: {i: "000..002"}
    group: "intake"
    name: "load-$i"
    expression: "{ext-$i} + {ext-009}"
    thresholds:
      - {name: HH, op: ">=", limit: loadMax, deadband: 5, priority: 1,
         message: "Total intake tank load too high: {value:#,##0.00}, exceeds {limit:#,##0.00}"}
      - {name: LL, op: "<=", limit: loadMin, priority: 2, message: "load low: {value:0.0}"}
  - area: Store
    each: {k: "0..29"}
    group: "burst"
    name: "b-$k"
    expression: "count - $k"
    thresholds:
      - {name: H, op: ">", limit: 0, priority: 3}'
write_config "$CONF" "$PORT" "$WORK/data" '  auth:
    tokens:
      - {name: viewer1, token: v-tok, role: viewer}
      - {name: ops, token: o-tok, role: operator}
      - {name: boss, token: a-tok, role: admin}' "$ALARMS"
if ! start_opsd "$CONF"; then
  not_ok "alarm config: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "alarm config: opsd starts"

t_bad_config() {
  local bad="$WORK/bad.yaml" out
  write_config "$bad" "$PORT" "$WORK/data2" "" 'alarms:
  - name: a
    expression: "{ext-000} + "
    thresholds: [{name: H, op: ">", limit: 1}]
  - name: b
    expression: "{no-such-point} * 2"
    thresholds: [{name: H, op: "=>", limit: nope}]'
  out=$("$OPSD" --check-config "$bad" 2>&1)
  expect "exit status" "$?" 1 || return 1
  expect_match "syntax error with line and position" "$out" "bad.yaml:18: alarms\[0\]: alarm 'a': expression at position 13: unexpected end" || return 1
  expect_match "op" "$out" "bad.yaml:22: alarms\[1\]\.thresholds\[0\]: op '=>'" || return 1
  expect_match "limit" "$out" "neither a number nor a deployment variable" || return 1
  write_config "$bad" "$PORT" "$WORK/data2" "" 'alarms:
  - name: b
    expression: "{no-such-point} * 2"
    thresholds: [{name: H, op: ">", limit: 1}]'
  out=$("$OPSD" --check-config "$bad" 2>&1)
  expect_match "unknown point" "$out" "bad.yaml:17: alarms: alarm 'b': expression names 'no-such-point', which is neither a point nor a deployment variable"
}
run_test "alarm: bad alarm configuration refused with FILE:LINE, position and reason" t_bad_config

t_example() {
  local out
  out=$("$OPSD" --check-config "$IT_DIR/../../etc/examples/alarm-a1.yaml" 2>&1)
  expect "exit status" "$?" 0 || return 1
  expect_match "ok" "$out" "alarm-a1.yaml: ok \(12000 points, 1 drivers\)"
}
run_test "alarm: the shipped example etc/examples/alarm-a1.yaml is valid" t_example

t_bad_reload() {
  sleep 1
  local before
  before=$(grep -c 'is invalid' "$OPSD_LOG")
  write_config "$CONF" "$PORT" "$WORK/data" '  auth:
    tokens:
      - {name: ops, token: o-tok, role: operator}' 'alarms:
  - {name: x, expression: "(", thresholds: [{name: H, op: ">", limit: 1}]}'
  for _ in $(seq 40); do
    [ "$(grep -c 'is invalid' "$OPSD_LOG")" -gt "$before" ] && break
    sleep 0.2
  done
  expect_match "refused" "$(cat "$OPSD_LOG")" "alarm 'x': expression at position 2" || return 1
  AUTH=(-H "Authorization: Bearer o-tok")
  req GET '/api/v1/alarms?state=all&limit=1'
  expect "running alarms kept" "$(jv d.total)" 36
}
run_test "alarm: an invalid reload keeps the running alarms" t_bad_reload

t_reload() {
  AUTH=(-H "Authorization: Bearer o-tok")
  req PUT /api/v1/points/ext-000 '{"value": 200}' && expect_status "PUT" 200 || return 1
  req PUT /api/v1/points/ext-009 '{"value": 100}' && expect_status "PUT" 200 || return 1
  req POST /api/v1/alarms/shelve '{"alarms":["load-001/LL"],"duration":"1h"}' && expect_status "shelve" 200 || return 1
  sleep 1
  # loadMax 380 -> 290: load-000 (300) raises HH at once; the shelving survives the reload
  write_config "$CONF" "$PORT" "$WORK/data" '  auth:
    tokens:
      - {name: ops, token: o-tok, role: operator}' "${ALARMS/Normal:  \{loadMax: 380/Normal:  {loadMax: 290}"
  local i
  for i in $(seq 40); do
    req GET '/api/v1/alarms?state=active'
    [ "$(jv 'd.alarms.map(a=>a.id).join()')" = "load-000/HH" ] && break
    sleep 0.25
  done
  expect "raised by the new limit" "$(jv 'd.alarms.map(a=>a.id+":"+a.limit).join()')" "load-000/HH:290" || return 1
  req GET '/api/v1/alarms?state=shelved'
  expect "shelving kept" "$(jv 'd.alarms.map(a=>a.id).join()')" "load-001/LL"
}
run_test "alarm: a valid reload re-evaluates with the new limits and keeps each condition's state" t_reload

finish
