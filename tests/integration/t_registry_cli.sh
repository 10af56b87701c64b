#!/usr/bin/env bash
# opsctl devices against a running opsd with the registry on and the test DMI plugin
# (lib/registry_dmi.mjs run standalone): register from CSV and from an NCMP JSON file,
# partial failures (exit 1, each failed handle printed with its code), list, show, search by
# module / property / state, remove; bad command lines. docs/API.md "opsctl".
. "$(dirname "$0")/lib/lib.sh"

node "$IT_DIR/lib/registry_dmi.mjs" >"$WORK/dmi.url" 2>"$WORK/dmi.log" &
DMI_PID=$!
for _ in $(seq 50); do [ -s "$WORK/dmi.url" ] && break; sleep 0.1; done
DMI=$(head -1 "$WORK/dmi.url")
stop_dmi() { kill "$DMI_PID" 2>/dev/null; wait "$DMI_PID" 2>/dev/null; }

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" "" 'registry:
  sync_batch: 50
  retry_initial: 200ms'
if [ -z "$DMI" ] || ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "opsctl devices: opsd and the DMI plugin start" "$(cat "$WORK/.reason" 2>/dev/null) $DMI"
  stop_dmi
  finish
fi
ok "opsctl devices: opsd and the DMI plugin start"

ctl() {
  OUT=$(timeout -k 2 30 "$OPSCTL" --url "$BASE" "$@" 2>"$WORK/ctl.err" </dev/null)
  RC=$?
  ERR=$(cat "$WORK/ctl.err")
}

# wait_ready N: until N handles are READY (10 s)
wait_ready() {
  for _ in $(seq 100); do
    ctl devices search state=READY --json
    [ "$(printf '%s' "$OUT" | grep -o '"cmHandle"' | wc -l)" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "fewer than $1 handles READY: $OUT"
}

t_register_csv() {
  {
    echo "cmHandle,dmiPlugin,moduleSetTag,alternateId,site"
    for i in $(seq -w 1 30); do echo "csv-$i,$DMI,tagA,alt-$i,north"; done
    for i in $(seq -w 31 40); do echo "csv-$i,$DMI,tagB,,\"south, east\""; done
  } >"$WORK/devices.csv"
  ctl devices register "$WORK/devices.csv"
  expect "exit status" "$RC" 0 || return 1
  expect_match "summary" "$OUT" "^40 cm handles applied, 0 failed" || return 1
  wait_ready 40
}
run_test "devices register: a CSV file, 40 handles, 2 tags, all READY" t_register_csv

t_register_partial() {
  cat >"$WORK/reg.json" <<JSON
{"dmiPlugin":"$DMI","createdCmHandles":[{"cmHandle":"json-1","moduleSetTag":"tagA"},{"cmHandle":"bad id"},{"cmHandle":"csv-01"}],
 "removedCmHandles":["ghost"]}
JSON
  ctl devices register "$WORK/reg.json"
  expect "exit status" "$RC" 1 || return 1
  expect_match "invalid id" "$ERR" "bad id: 110 " || return 1
  expect_match "exists" "$ERR" "csv-01: 109 " || return 1
  expect_match "not found" "$ERR" "ghost: 100 " || return 1
  expect_match "summary" "$OUT" "^1 cm handle applied, 3 failed" || return 1
}
run_test "devices register: JSON with bad handles: exit 1, each failure with its code" t_register_partial

t_list_show() {
  wait_ready 41 || return 1
  ctl devices list
  expect "exit status" "$RC" 0 || return 1
  expect_match "header" "$OUT" "CM HANDLE +STATE +MODULE SET TAG" || return 1
  expect_match "a row" "$OUT" "csv-05 +READY +tagA +alt-05" || return 1
  expect_match "count" "$OUT" "41 cm handles" || return 1
  ctl devices show csv-35
  expect "exit status" "$RC" 0 || return 1
  expect_match "state" "$OUT" "state +READY" || return 1
  expect_match "property with a comma" "$OUT" "property +site=south, east" || return 1
  expect_match "modules" "$OUT" "tagB-module-1@2024-01-01" || return 1
  ctl devices show nope
  expect "unknown handle: exit status" "$RC" 1 || return 1
}
run_test "devices list and show" t_list_show

t_search() {
  ctl devices search module=tagB-module-2
  expect_match "by module" "$OUT" "^10 cm handles" || return 1
  ctl devices search module=ietf-yang-types prop:site=north
  expect_match "module and property" "$OUT" "^30 cm handles" || return 1
  ctl devices search state=LOCKED
  expect_match "by state" "$OUT" "^0 cm handles" || return 1
  ctl devices search bogus
  expect "bad condition: exit status" "$RC" 1 || return 1
  ctl devices search state=SLEEPY
  expect "bad state: exit status" "$RC" 1 || return 1
}
run_test "devices search: module, public property, state; bad conditions" t_search

t_remove() {
  ctl devices remove csv-31 csv-32 ghost
  expect "exit status" "$RC" 1 || return 1
  expect_match "summary" "$OUT" "2 removed, 1 failed" || return 1
  ctl devices search module=tagB-module-2
  expect_match "after removal" "$OUT" "^8 cm handles" || return 1
  ctl devices
  expect "no subcommand: exit status" "$RC" 1 || return 1
}
run_test "devices remove" t_remove

stop_dmi
finish
