#!/usr/bin/env bash
# /healthz, /api/v1/status, /metrics, and a clean stop on SIGTERM.
# docs/API.md "Status, health and metrics" and "Command line".
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data"
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "lifecycle: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "lifecycle: opsd starts"
sleep 1.2

t_healthz() {
  req GET /healthz
  expect_status "GET /healthz" 200 || return 1
  expect "body" "$(jv 'JSON.stringify(d)')" '{"status":"ok"}'
}
run_test "GET /healthz: 200 {\"status\":\"ok\"}" t_healthz

t_status() {
  req GET /api/v1/status
  expect_status "GET /api/v1/status" 200 || return 1
  expect "version" "$(jv 'd.version')" 0.1.0 || return 1
  expect "points" "$(jv 'd.points')" 113 || return 1
  expect "clients" "$(jv 'd.clients')" 0 || return 1
  expect "subscriptions" "$(jv 'd.subscriptions')" 0 || return 1
  expect "uptime_s is a number >= 1" "$(jv 'typeof d.uptime_s==="number" && d.uptime_s>=1')" true || return 1
  # Shapes are extended, not changed: compare the documented fields only.
  expect "drivers" "$(jv 'JSON.stringify((d.drivers||[]).map(x=>({name:x.name,type:x.type,points:x.points})))')" \
    '[{"name":"plant","type":"simulator","points":100}]'
}
run_test "GET /api/v1/status: version, uptime_s, points, clients, subscriptions, drivers" t_status

t_metrics() {
  req GET /api/v1/points/no-such
  req PUT /api/v1/points/ext-000 '{"value": 1}'
  req POST /api/v1/samples '{"samples":[{"point":"ext-001","value":2}]}'
  req GET /metrics
  expect_status "GET /metrics" 200 || return 1
  local ct missing="" m
  ct=$(curl -s -o /dev/null -w '%{content_type}' --max-time 5 "$BASE/metrics")
  expect_match "Content-Type" "$ct" '^text/plain' || return 1
  for m in opsd_points opsd_point_updates_total opsd_stream_clients opsd_stream_subscriptions \
    opsd_stream_values_sent_total opsd_stream_frames_sent_total opsd_stream_bytes_sent_total \
    opsd_stream_slow_disconnects_total opsd_stream_pending_values opsd_http_requests_total \
    opsd_samples_ingested_total opsd_loop_lag_seconds opsd_config_reloads_total; do
    grep -Eq "^$m(\{[^}]*\})? [-+0-9.eEinfNa]+$" "$WORK/body" || missing+=" $m"
  done
  [ -z "$missing" ] || { fail "metrics without a sample line:$missing"; return 1; }
  expect "opsd_points" "$(grep -E '^opsd_points ' "$WORK/body" | awk '{print $2}')" 113 || return 1
  # The contract names the label, not its values: accept the status ("200") or its class ("2xx").
  grep -Eq '^opsd_http_requests_total\{[^}]*code="(200|2xx)"[^}]*\} [1-9]' "$WORK/body" ||
    { fail "no opsd_http_requests_total{code=\"200\" or \"2xx\"} > 0 after 2xx answers: $(grep -E '^opsd_http_requests_total' "$WORK/body" | tr '\n' ' ')"; return 1; }
  grep -Eq '^opsd_http_requests_total\{[^}]*code="(404|4xx)"[^}]*\} [1-9]' "$WORK/body" ||
    { fail "no opsd_http_requests_total{code=\"404\" or \"4xx\"} > 0 after a 404"; return 1; }
  local up
  up=$(grep -E '^opsd_point_updates_total(\{[^}]*\})? ' "$WORK/body" | awk '{s+=$2} END {print s+0}')
  node -e 'process.exit(+process.argv[1] >= 100 ? 0 : 1)' "$up" || { fail "opsd_point_updates_total is $up after 1 s of 100 points every 200ms"; return 1; }
  grep -Eq '^# TYPE opsd_points gauge' "$WORK/body" || { fail "no '# TYPE opsd_points gauge'"; return 1; }
  grep -Eq '^# TYPE opsd_http_requests_total counter' "$WORK/body" || { fail "no '# TYPE opsd_http_requests_total counter'"; return 1; }
}
run_test "/metrics: Prometheus text with every documented metric, opsd_points 113" t_metrics

t_concurrent_http() {
  # 200 requests, 20 at a time, over keep-alive connections: every one answered 200.
  local i j bad args=()
  for ((j = 0; j < 10; j++)); do args+=(-o /dev/null "$BASE/api/v1/points?prefix=tank1-00&limit=50"); done
  for ((i = 0; i < 20; i++)); do
    curl -s -w '%{http_code}\n' --max-time 20 "${args[@]}" &
  done >"$WORK/codes"
  wait
  bad=$(grep -vc '^200$' "$WORK/codes")
  expect "requests not answered 200 (of $(grep -c . "$WORK/codes"))" "$bad" 0 || return 1
  expect "answers" "$(grep -c '^200$' "$WORK/codes")" 200
}
run_test "200 concurrent REST requests (keep-alive) all answered 200" t_concurrent_http

t_bad_http() {
  # Garbage, a truncated body, a huge header and an unknown method on the HTTP port:
  # each is answered or closed, and opsd keeps serving.
  local i
  for payload in 'GARBAGE\r\n\r\n' \
    'POST /api/v1/samples HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"samples":[' \
    'BREW /api/v1/points HTTP/1.1\r\nHost: x\r\n\r\n' \
    "GET /api/v1/points HTTP/1.1\\r\\nHost: x\\r\\nX-Big: $(head -c 100000 /dev/zero | tr '\0' a)\\r\\n\\r\\n"; do
    # shellcheck disable=SC2016 # $1 and $2 expand in the inner shell
    timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 0; printf "$2" >&3 2>/dev/null; timeout 2 cat <&3 >/dev/null 2>&1; exec 3>&-' _ "$PORT" "$payload"
  done
  for ((i = 0; i < 3; i++)); do
    req GET /healthz
    expect_status "healthz after malformed requests" 200 || return 1
  done
  req GET /api/v1/points/ext-001
  expect_status "GET a point after malformed requests" 200
}
run_test "malformed HTTP (garbage, truncated body, 100 KB header, unknown method) does not hurt opsd" t_bad_http

t_sigterm() {
  local t0 t1
  t0=$(date +%s%N)
  stop_opsd "$OPSD_PID" TERM 5
  t1=$(date +%s%N)
  expect "exit status after SIGTERM ($(( (t1 - t0) / 1000000 )) ms)" "$STOP_STATUS" 0 || return 1
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$BASE/healthz" 2>/dev/null) || true
  expect "nothing listening after exit" "$code" 000
}
run_test "SIGTERM: exit status 0 within 5 s, port released" t_sigterm

t_restart_same_data() {
  if ! start_opsd "$WORK/opsd.yaml"; then return 1; fi
  req GET /healthz
  expect_status "healthz after restart on the same port and data dir" 200 || return 1
  stop_opsd "$OPSD_PID" TERM 5
  expect "exit status" "$STOP_STATUS" 0
}
run_test "restart on the same port and data dir works" t_restart_same_data

finish
