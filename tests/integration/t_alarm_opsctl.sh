#!/usr/bin/env bash
# opsctl alarms against the real daemon: summary (table, filters, --json), ack with a
# comment, events, shelve/unshelve, deployment show and switch, and the errors (a viewer's
# ack, an unknown alarm, a missing duration) with exit status 1 and nothing changed.
# docs/API.md "opsctl".
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
CONF="$WORK/opsd.yaml"
write_config "$CONF" "$PORT" "$WORK/data" '  auth:
    tokens:
      - {name: viewer1, token: v-tok, role: viewer}
      - {name: ops, token: o-tok, role: operator}
      - {name: boss, token: a-tok, role: admin}' 'deployment:
  state: Normal
  states:
    Normal:  {hi: 50}
    Startup: {hi: 80}
alarms:
  - {name: hot, area: Plant, group: g1, expression: "{ext-000} * 2",
     thresholds: [{name: H, op: ">", limit: hi, priority: 1, message: "hot: {value:#,##0.0} over {limit}"}]}
  - {name: cold, area: Plant, group: g2, expression: "{ext-001}",
     thresholds: [{name: L, op: "<", limit: 0, priority: 2}]}'
if ! start_opsd "$CONF"; then
  not_ok "alarm opsctl: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "alarm opsctl: opsd starts"

# ctl ARGS...: runs opsctl with the operator token; OUT, ERR, RC.
ctl() {
  OUT=$(timeout -k 2 30 "$OPSCTL" --url "$BASE" --token "${TOK:-o-tok}" "$@" 2>"$WORK/ctl.err" </dev/null)
  RC=$?
  ERR=$(cat "$WORK/ctl.err")
}

t_summary() {
  ctl points set ext-000 30 && ctl points set ext-001 -5
  expect "set" "$RC" 0 || return 1
  ctl alarms summary
  expect "rc" "$RC" 0 || return 1
  expect_match "header" "$OUT" '^ *PRIO +STATE +ALARM +GROUP +VALUE +SINCE +MESSAGE' || return 1
  expect_match "hot row" "$OUT" ' 1 +active_unack +hot/H +g1 +60 .*hot: 60\.0 over 50' || return 1
  expect_match "cold row" "$OUT" ' 2 +active_unack +cold/L +g2 ' || return 1
  expect_match "count" "$OUT" '2 of 2 alarms \(deployment Normal\)' || return 1
  ctl alarms summary group=g2 --json
  expect_match "json filter" "$OUT" '"id": "cold/L"' || return 1
  if printf '%s' "$OUT" | grep -q 'hot/H'; then fail "group filter let hot/H through"; return 1; fi
  ctl alarms summary HOT
  expect_match "text words" "$OUT" '1 of 1 alarm ' || return 1
  ctl alarms summary colour=red
  expect "unknown filter" "$RC" 1 || return 1
  expect_match "unknown filter message" "$ERR" "unknown filter 'colour'"
}
run_test "alarm opsctl: summary as a table, with filters and as JSON" t_summary

t_ack() {
  TOK=v-tok ctl alarms ack hot comment=no
  expect "viewer refused" "$RC" 1 || return 1
  expect_match "viewer message" "$ERR" 'forbidden' || return 1
  ctl alarms ack hot nope
  expect "unknown" "$RC" 1 || return 1
  expect_match "unknown message" "$ERR" "unknown_alarm: .*'nope'" || return 1
  ctl alarms summary state=acked
  expect_match "nothing acknowledged" "$OUT" '0 of 0 alarms' || return 1
  ctl alarms ack hot "comment=pump 2 restarted"
  expect "ack" "$RC" 0 || return 1
  expect_match "ack output" "$OUT" 'ack: 1 condition, 0 unchanged' || return 1
  ctl alarms events alarm=hot
  expect_match "events" "$OUT" 'ack +hot/H +active_ack +60 +ops +pump 2 restarted' || return 1
  expect_match "active event" "$OUT" 'active +hot/H +active_unack +60 +- +hot: 60\.0 over 50' || return 1
  ctl alarms events kind=ack --from -1h --to now --json
  expect_match "events json" "$OUT" '"comment": "pump 2 restarted"'
}
run_test "alarm opsctl: ack with a comment, then the events; a viewer and an unknown name change nothing" t_ack

t_shelve_deployment() {
  ctl alarms shelve cold
  expect "no duration" "$RC" 1 || return 1
  ctl alarms shelve cold duration=30m comment=calibration
  expect "shelve" "$RC" 0 || return 1
  ctl alarms summary state=shelved
  expect_match "shelved" "$OUT" 'active_unack,shelved +cold/L' || return 1
  ctl alarms unshelve group=g2
  expect_match "unshelve" "$OUT" 'unshelve: 1 condition' || return 1
  ctl alarms deployment
  expect_match "show" "$OUT" 'deployment state: Normal' || return 1
  expect_match "vars" "$OUT" 'Startup: hi=80' || return 1
  ctl alarms deployment Startup
  expect "operator refused" "$RC" 1 || return 1
  TOK=a-tok ctl alarms deployment Startup
  expect "admin" "$RC" 0 || return 1
  expect_match "switched" "$OUT" 'deployment state: Startup' || return 1
  ctl alarms summary state=active
  expect_match "hot cleared (60 < 80)" "$OUT" '1 of 1 alarm .*Startup' || return 1
  ctl alarms
  expect "no command" "$RC" 1
}
run_test "alarm opsctl: shelve needs a duration, unshelve by group, deployment show and switch (admin)" t_shelve_deployment

finish
