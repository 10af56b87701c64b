#!/usr/bin/env bash
# The rules every ingest path shares (docs/API.md "Ingest rules"): a string value is UTF-8
# without NUL or the whole request is refused (line protocol, POST /api/v1/samples in both
# forms, PUT /api/v1/points), every answer is valid UTF-8 JSON, one limit of 100,000 samples
# per request (413), and times outside the years 0000-9999 get a 400 instead of overflowing
# in the history, alarm-events and journal queries (run under the sanitizer build, an
# overflow is a report in the log, which fails this file).
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" '' 'history:
  retention: 1d
  partition: 1h
  record:
    - {match: "ext-*", mode: on_change}
    - {match: "label", mode: on_change}
alarms:
  - {name: hot, area: Plant, group: g1, expression: "{ext-009}",
     thresholds: [{name: H, op: ">", limit: 50, priority: 1}]}
journal:
  retention: 1h
  partition: 10m
  disk_floor: 0'
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "ingest rules: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "ingest rules: opsd starts"

# value_of NAME: prints the point's value (JSON), or <status> on an error.
value_of() {
  req GET "/api/v1/points/$1"
  if [ "$STATUS" = 200 ]; then jv 'JSON.stringify(d.value)'; else echo "<$STATUS>"; fi
}

# body_is_utf8 FILE: exit 0 when FILE is valid UTF-8 (a strict decoder, as browsers use).
body_is_utf8() {
  node -e 'new TextDecoder("utf-8", {fatal: true}).decode(require("fs").readFileSync(process.argv[1]))' "$1" 2>/dev/null
}

# post_file PATH FILE: POST the bytes of FILE as they are.
post_file() { req POST "$1" "@$2"; }

baseline() {
  req POST /api/v1/samples '{"samples":[{"point":"label","value":"before"},{"point":"ext-005","value":5}]}'
  [ "$STATUS" = 200 ] || { fail "baseline POST: $STATUS $BODY"; return 1; }
}
unchanged() {
  expect "label unchanged" "$(value_of label)" '"before"' || return 1
  expect "ext-005 unchanged" "$(value_of ext-005)" 5
}

# The defect this file was written for: /write stored 0xFF 0xFE, and every client reading
# the point list failed to parse it.
t_lineproto_utf8() {
  baseline || return 1
  local f="$WORK/lp"
  printf 'label value="\xff\xfe"\n' >"$f"
  post_file /write "$f"
  expect_status "/write with invalid UTF-8" 400 || return 1
  expect_match "says why" "$BODY" 'line 1: a string value is not UTF-8' || return 1
  printf 'label value="a\x00b"\n' >"$f"
  post_file /write "$f"
  expect_status "/write with a NUL in a string" 400 || return 1
  printf 'ext-005 value=50\nlabel value="ok"\nlabel value="\xed\xa0\x80"\n' >"$f"
  post_file /api/v2/write "$f"
  expect_status "a good line then a bad one" 400 || return 1
  expect_match "names line 3" "$BODY" 'line 3' || return 1
  unchanged || return 1
  req GET "/api/v1/points?prefix=label"
  body_is_utf8 "$WORK/body" || { fail "GET /api/v1/points is not valid UTF-8"; return 1; }
  printf 'label value="caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"\n' >"$f"
  post_file /write "$f"
  expect_status "/write with valid UTF-8" 204 || return 1
  req GET "/api/v1/points?prefix=label"
  body_is_utf8 "$WORK/body" || { fail "GET /api/v1/points is not valid UTF-8"; return 1; }
  expect "label" "$(value_of label)" '"café € 😀"'
}
run_test "line protocol: invalid UTF-8 or NUL refused whole (400, line named), UTF-8 stored and served" t_lineproto_utf8

t_samples_utf8() {
  baseline || return 1
  local f="$WORK/s.json"
  printf '{"samples":[{"point":"ext-005","value":50},{"point":"label","value":"\xff"}]}' >"$f"
  post_file /api/v1/samples "$f"
  expect_status "row form, raw 0xFF" 400 || return 1
  printf '{"samples":[{"point":"ext-005","value":50},{"point":"label","value":"a\\u0000b"}]}' >"$f"
  post_file /api/v1/samples "$f"
  expect_status "row form, an escaped NUL" 400 || return 1
  printf '{"series":[{"point":"ext-005","ts":[1764460800000],"values":[50]},{"point":"label","ts":[1764460800000],"values":["\xc0\x80"]}]}' >"$f"
  post_file /api/v1/samples "$f"
  expect_status "columnar form, an overlong NUL" 400 || return 1
  printf '{"value":"x\xf4\x90\x80\x80"}' >"$f"
  req PUT /api/v1/points/label "@$f"
  expect_status "PUT, past U+10FFFF" 400 || return 1
  req PUT /api/v1/points/label '{"value":"a\u0000"}'
  expect_status "PUT, an escaped NUL" 400 || return 1
  unchanged
}
run_test "POST /api/v1/samples (both forms) and PUT: invalid UTF-8 or NUL refused (400), nothing changed" t_samples_utf8

# lines FILE N: N line-protocol lines over ext-005/ext-006, the last value N-1.
lines() {
  node -e '
    const n = +process.argv[1], out = [];
    for (let i = 0; i < n; i++) out.push("ext-00" + (5 + (i % 2)) + " value=" + i);
    process.stdout.write(out.join("\n") + "\n");' "$2" >"$1"
}

t_one_limit() {
  baseline || return 1
  local f="$WORK/many"
  lines "$f" 100001
  post_file /write "$f"
  expect_status "/write with 100,001 values" 413 || return 1
  expect_match "says the limit" "$BODY" '100000' || return 1
  unchanged || return 1
  node -e '
    const v = [], t = [];
    for (let i = 0; i < 100001; i++) { v.push(i); t.push(1764460800000 + i); }
    process.stdout.write(JSON.stringify({series: [{point: "ext-005", ts: t, values: v}]}));' >"$f"
  post_file /api/v1/samples "$f"
  expect_error "columnar form with 100,001 samples" 413 too_large || return 1
  unchanged || return 1
  lines "$f" 100000
  post_file /write "$f"
  expect_status "/write with 100,000 values" 204 || return 1
  expect "ext-006 is the last of its values" "$(value_of ext-006)" 99999
}
run_test "one limit: 100,001 samples refused (413) by /write and the columnar form, 100,000 taken" t_one_limit

t_time_ranges() {
  local q
  for q in "from=-9223372036854775807&to=9223372036854775807&buckets=1000" \
           "from=-9223372036854775808&buckets=10" "from=-9223372036854775807&interval=1m" \
           "to=-9223372036854775807" "to=253402300800000" "from=0000-01-01T00:00:00%2B00:01"; do
    req GET "/api/v1/history?points=ext-005&$q"
    expect_error "history $q" 400 bad_request || return 1
  done
  req GET "/api/v1/history?points=ext-005&from=-62167219200000&to=253402300799999&buckets=1000"
  expect_status "history over the years 0000-9999" 200 || return 1
  req GET "/api/v1/history?points=ext-005&from=-62167219200000&to=253402300799999"
  expect_status "raw history over the years 0000-9999" 200 || return 1
  for q in "from=-9223372036854775808" "to=9223372036854775807"; do
    req GET "/api/v1/alarm-events?$q"
    expect_error "alarm-events $q" 400 bad_request || return 1
    req GET "/api/v1/messages?$q"
    expect_error "messages $q" 400 bad_request || return 1
  done
  req GET "/api/v1/alarm-events?from=-62167219200000&to=253402300799999"
  expect_status "alarm-events over the years 0000-9999" 200 || return 1
  req GET /healthz
  expect_status "alive" 200
}
run_test "times outside the years 0000-9999: 400 for history, alarm-events, messages; the edges answer" t_time_ranges

finish
