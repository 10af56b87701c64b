#!/usr/bin/env bash
# POST /api/v1/samples: accepted batches are visible; a bad batch changes nothing.
# docs/API.md "POST /api/v1/samples" and "Conventions" (batches, 16 MiB body limit).
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data"
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "samples: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "samples: opsd starts"

# value_of NAME: prints the point's value (JSON), or <status> on an error.
value_of() {
  req GET "/api/v1/points/$1"
  if [ "$STATUS" = 200 ]; then jv 'JSON.stringify(d.value)'; else echo "<$STATUS>"; fi
}

t_accept() {
  req POST /api/v1/samples '{"samples":[{"point":"ext-001","ts":1764460800000,"value":1.5},
                                          {"point":"ext-002","value":2,"quality":"uncertain"}]}'
  expect_status "POST two samples" 200 || return 1
  expect "accepted" "$(jv 'd.accepted')" 2 || return 1
  req GET /api/v1/points/ext-001
  expect "ext-001 value" "$(jv 'd.value')" 1.5 || return 1
  expect "ext-001 ts" "$(jv 'd.ts')" 1764460800000 || return 1
  expect "ext-001 quality" "$(jv 'd.quality')" good || return 1
  req GET /api/v1/points/ext-002
  expect "ext-002 value" "$(jv 'd.value')" 2 || return 1
  expect "ext-002 quality" "$(jv 'd.quality')" uncertain || return 1
  expect "ext-002 ts defaults to now" "$(jv 'Math.abs(Date.now()-d.ts) < 10000')" true
}
run_test "POST samples: 200 {accepted:2}, values, ts and quality visible via GET" t_accept

t_types() {
  req POST /api/v1/samples '{"samples":[{"point":"flag","value":true},{"point":"count","value":7},
                                          {"point":"label","value":"abc"},{"point":"ext-003","value":-12},
                                          {"point":"ext-004","value":1.25,"ts":"2025-11-30T00:00:00.500Z"}]}'
  expect_status "POST typed samples" 200 || return 1
  expect "accepted" "$(jv 'd.accepted')" 5 || return 1
  expect "flag" "$(value_of flag)" true || return 1
  expect "count" "$(value_of count)" 7 || return 1
  expect "label" "$(value_of label)" '"abc"' || return 1
  expect "ext-003 (an integer into a double point)" "$(value_of ext-003)" -12 || return 1
  req GET /api/v1/points/ext-004
  expect "ext-004 ts from RFC 3339" "$(jv 'd.ts')" 1764460800500
}
run_test "POST samples of every type, ts as RFC 3339" t_types

t_not_writable_ok() {
  req POST /api/v1/samples '{"samples":[{"point":"tank1-0042","value":55.5,"ts":1764460800000}]}'
  expect_status "POST to a simulator point" 200 || return 1
  expect "accepted" "$(jv 'd.accepted')" 1
}
run_test "POST samples may feed any point, writable or not" t_not_writable_ok

# The state the failing batches below must leave alone.
baseline() {
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":5},{"point":"ext-006","value":6},
                                          {"point":"count","value":1}]}'
  [ "$STATUS" = 200 ] || { fail "baseline POST: $STATUS $BODY"; return 1; }
}
unchanged() {
  expect "ext-005 unchanged" "$(value_of ext-005)" 5 || return 1
  expect "ext-006 unchanged" "$(value_of ext-006)" 6 || return 1
  expect "count unchanged" "$(value_of count)" 1
}

t_invalid_json() {
  baseline || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},'
  expect_error "malformed JSON" 400 invalid_json || return 1
  req POST /api/v1/samples ''
  expect_error "empty body" 400 invalid_json || return 1
  unchanged
}
run_test "POST malformed JSON or an empty body: 400 invalid_json, nothing changed" t_invalid_json

t_unknown_in_batch() {
  baseline || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"point":"nope-1","value":1},
                                          {"point":"ext-006","value":60}]}'
  expect_error "unknown point at index 1" 404 unknown_point || return 1
  expect "error.index" "$(jv 'd.error.index')" 1 || return 1
  unchanged
}
run_test "POST batch with an unknown point: 404 unknown_point, index 1, no sample applied" t_unknown_in_batch

t_wrong_type_in_batch() {
  baseline || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"point":"ext-006","value":60},
                                          {"point":"count","value":"many"}]}'
  expect_error "string into int at index 2" 400 wrong_type || return 1
  expect "error.index" "$(jv 'd.error.index')" 2 || return 1
  unchanged || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"point":"count","value":2.5}]}'
  expect_error "2.5 into int at index 1" 400 wrong_type || return 1
  unchanged || return 1
  req POST /api/v1/samples '{"samples":[{"point":"flag","value":"yes"}]}'
  expect_error "string into bool" 400 wrong_type || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"point":"label","value":false}]}'
  expect_error "bool into string" 400 wrong_type || return 1
  unchanged
}
run_test "POST batch with a wrong type: 400 wrong_type with index, nothing changed" t_wrong_type_in_batch

t_bad_shape() {
  baseline || return 1
  req POST /api/v1/samples '{"points":[{"point":"ext-005","value":50}]}'
  expect_error "no samples key" 400 bad_request || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"value":1}]}'
  expect_error "sample without point" 400 bad_request || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"point":"ext-006","value":1,"quality":"excellent"}]}'
  expect_error "unknown quality" 400 bad_request || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-005","value":50},{"point":"ext-006","value":1,"ts":"yesterday"}]}'
  expect_error "bad ts" 400 bad_request || return 1
  unchanged
}
run_test "POST badly shaped batch (no samples, no point, bad quality, bad ts): 400 bad_request, nothing changed" t_bad_shape

t_long_string() {
  baseline || return 1
  local s
  s=$(head -c 4097 /dev/zero | tr '\0' 'x')
  req POST /api/v1/samples "{\"samples\":[{\"point\":\"ext-005\",\"value\":50},{\"point\":\"label\",\"value\":\"$s\"}]}"
  case "$STATUS" in 4??) ;; *) fail "a 4097-byte string: expected a 4xx, got $STATUS $BODY"; return 1 ;; esac
  unchanged || return 1
  s=$(head -c 4096 /dev/zero | tr '\0' 'y')
  req POST /api/v1/samples "{\"samples\":[{\"point\":\"label\",\"value\":\"$s\"}]}"
  expect_status "a 4096-byte string" 200 || return 1
  expect "label length" "$(value_of label | wc -c)" 4099   # 4096 + 2 quotes + newline
}
run_test "POST string values: 4096 bytes accepted, 4097 refused (4xx), nothing changed" t_long_string

t_too_large() {
  baseline || return 1
  local f="$WORK/big.json"
  { printf '{"samples":[{"point":"ext-005","value":50}]'; head -c $((17 * 1024 * 1024)) /dev/zero | tr '\0' ' '; printf '}'; } >"$f"
  req POST /api/v1/samples "@$f"
  expect_error "17 MiB body" 413 too_large || return 1
  unchanged || return 1
  req GET /healthz
  expect_status "healthz after 413" 200 || return 1
  { printf '{"samples":[{"point":"ext-005","value":51}]'; head -c $((15 * 1024 * 1024)) /dev/zero | tr '\0' ' '; printf '}'; } >"$f"
  req POST /api/v1/samples "@$f"
  expect_status "15 MiB body (under the limit)" 200 || return 1
  expect "ext-005 after the 15 MiB body" "$(value_of ext-005)" 51
}
run_test "POST body over 16 MiB: 413 too_large, nothing changed (15 MiB accepted)" t_too_large

t_many() {
  baseline || return 1
  local f="$WORK/many.json"
  node -e '
    const n = +process.argv[1], s = [];
    for (let i = 0; i < n; i++) s.push({point: "ext-00" + (5 + (i % 2)), value: i});
    process.stdout.write(JSON.stringify({samples: s}));' 100001 >"$f"
  req POST /api/v1/samples "@$f"
  case "$STATUS" in 400 | 413) ;; *) fail "100,001 samples: expected 400 or 413, got $STATUS $BODY"; return 1 ;; esac
  unchanged || return 1
  node -e '
    const n = +process.argv[1], s = [];
    for (let i = 0; i < n; i++) s.push({point: "ext-00" + (5 + (i % 2)), value: i});
    process.stdout.write(JSON.stringify({samples: s}));' 100000 >"$f"
  req POST /api/v1/samples "@$f"
  expect_status "100,000 samples" 200 || return 1
  expect "accepted" "$(jv 'd.accepted')" 100000 || return 1
  expect "ext-005 is the last of its samples" "$(value_of ext-005)" 99998 || return 1
  expect "ext-006 is the last of its samples" "$(value_of ext-006)" 99999
}
run_test "POST 100,000 samples accepted, 100,001 refused with nothing changed" t_many

t_metric() {
  req GET /metrics
  expect_status "GET /metrics" 200 || return 1
  local v
  v=$(grep -E '^opsd_samples_ingested_total(\{[^}]*\})? ' "$WORK/body" | head -1 | awk '{print $2}')
  [ -n "$v" ] || { fail "no opsd_samples_ingested_total line"; return 1; }
  expect "opsd_samples_ingested_total >= 100000" "$(node -e 'console.log(+process.argv[1] >= 100000)' "$v")" true
}
run_test "/metrics counts ingested samples" t_metric

finish
