#!/usr/bin/env bash
# opsctl against a running opsd: status, points list/get/set, watch, errors.
# docs/API.md "opsctl". Output formats are not fixed by the contract: the checks look for the
# names and values in the output and at exit statuses.
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data"
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "opsctl: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "opsctl: opsd starts"
sleep 0.5

# ctl ARGS...: runs opsctl (bounded, 15 s) against this opsd; sets RC and OUT.
ctl() {
  OUT=$(timeout -k 2 15 "$OPSCTL" --url "$BASE" "$@" 2>&1 </dev/null)
  RC=$?
}

t_status() {
  ctl status
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "status shows the point count" "$OUT" '\b113\b' || return 1
  expect_match "status shows the driver" "$OUT" 'plant'
}
run_test "opsctl status" t_status

t_env_url() {
  local out rc
  out=$(OPSD_URL="$BASE" timeout -k 2 15 "$OPSCTL" status 2>&1 </dev/null); rc=$?
  expect "exit status with \$OPSD_URL ($out)" "$rc" 0 || return 1
  expect_match "status output" "$out" '\b113\b'
}
run_test "opsctl uses \$OPSD_URL when --url is not given" t_env_url

t_list() {
  ctl points list --prefix ext- --limit 3
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "ext-000" "$OUT" 'ext-000' || return 1
  expect_match "ext-002" "$OUT" 'ext-002' || return 1
  if printf '%s' "$OUT" | grep -q 'ext-003'; then fail "--limit 3 listed ext-003: $OUT"; return 1; fi
  ctl points list --prefix tank1-
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect "tank1- points listed" "$(printf '%s' "$OUT" | grep -oE 'tank1-[0-9]{4}' | sort -u | wc -l)" 100
}
run_test "opsctl points list --prefix --limit" t_list

t_get() {
  ctl points get tank1-0001
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "name" "$OUT" 'tank1-0001' || return 1
  expect_match "a value" "$OUT" '[0-9]+(\.[0-9]+)?' || return 1
  ctl points get no-such-point
  [ "$RC" -ne 0 ] || { fail "points get of an unknown point exited 0: $OUT"; return 1; }
  expect_match "unknown point message" "$OUT" 'unknown_point|no point|[Uu]nknown'
}
run_test "opsctl points get (and an unknown point exits non-zero)" t_get

t_set() {
  ctl points set ext-002 4.25
  expect "set ext-002: exit status ($OUT)" "$RC" 0 || return 1
  req GET /api/v1/points/ext-002
  expect "ext-002 via REST" "$(jv 'd.value')" 4.25 || return 1
  ctl points get ext-002
  expect_match "points get shows 4.25" "$OUT" '4\.25' || return 1
  ctl points set flag true
  expect "set flag: exit status ($OUT)" "$RC" 0 || return 1
  ctl points set count 3
  expect "set count: exit status ($OUT)" "$RC" 0 || return 1
  ctl points set label "hello there"
  expect "set label: exit status ($OUT)" "$RC" 0 || return 1
  req GET /api/v1/points/flag
  expect "flag is the JSON true" "$(jv 'JSON.stringify(d.value)')" true || return 1
  req GET /api/v1/points/count
  expect "count is the JSON 3" "$(jv 'JSON.stringify(d.value)')" 3 || return 1
  req GET /api/v1/points/label
  expect "label" "$(jv 'JSON.stringify(d.value)')" '"hello there"'
}
run_test "opsctl points set (double, bool, int, string) is visible via REST" t_set

t_set_errors() {
  ctl points set tank1-0001 5
  [ "$RC" -ne 0 ] || { fail "points set on a simulator point exited 0: $OUT"; return 1; }
  expect_match "not writable message" "$OUT" 'not_writable|not writable' || return 1
  ctl points set count many
  [ "$RC" -ne 0 ] || { fail "points set count many exited 0: $OUT"; return 1; }
  req GET /api/v1/points/count
  expect "count unchanged" "$(jv 'd.value')" 3 || return 1
  ctl points set no-such-point 1
  [ "$RC" -ne 0 ] || { fail "points set on an unknown point exited 0: $OUT"; return 1; }
}
run_test "opsctl points set errors (not writable, wrong type, unknown) exit non-zero" t_set_errors

t_watch() {
  local out
  out=$(timeout -k 2 3 "$OPSCTL" --url "$BASE" watch --interval 200ms tank1-0001 'ext-00*' 2>&1 </dev/null)
  local n
  n=$(printf '%s\n' "$out" | grep -c 'tank1-0001')
  [ "$n" -ge 3 ] || { fail "watch printed tank1-0001 $n times in 3 s (period 200ms): $(printf '%s' "$out" | head -c 300)"; return 1; }
  expect_match "watch shows the prefix's points" "$out" 'ext-002'
}
run_test "opsctl watch NAME PREFIX* prints updates" t_watch

t_unreachable() {
  local out rc port
  port=$(free_port)
  out=$(timeout -k 2 15 "$OPSCTL" --url "http://127.0.0.1:$port" status 2>&1 </dev/null); rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { fail "opsctl against nothing: exit status $rc: $out"; return 1; }
  [ -n "$out" ] || { fail "opsctl against nothing printed no error"; return 1; }
}
run_test "opsctl against a port where nothing listens fails with a message" t_unreachable

finish
