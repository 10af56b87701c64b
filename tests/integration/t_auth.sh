#!/usr/bin/env bash
# Authentication with tokens: 401 without or with a wrong token, roles (viewer, operator),
# /healthz open, WebSocket with ?token=. With tokens opsd may listen beyond loopback.
# docs/API.md "Authentication".
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" '  auth:
    tokens:
      - {name: watcher, token: "view-tok-1", role: viewer}
      - {name: ops, token: "op-tok-2", role: operator}
      - {name: root, token: "adm-tok-3", role: admin}'
if ! start_opsd "$WORK/opsd.yaml" --listen "0.0.0.0:$PORT"; then
  not_ok "auth: opsd with tokens starts on 0.0.0.0 (--listen)" "$(cat "$WORK/.reason")"
  finish
fi
ok "auth: opsd with tokens starts on 0.0.0.0 (--listen)"

VIEW=(-H "Authorization: Bearer view-tok-1")
OPER=(-H "Authorization: Bearer op-tok-2")
ADMIN=(-H "Authorization: Bearer adm-tok-3")
WRONG=(-H "Authorization: Bearer nope")

t_healthz_open() {
  AUTH=()
  req GET /healthz
  expect_status "GET /healthz without a token" 200
}
run_test "auth: /healthz needs no token" t_healthz_open

t_missing() {
  AUTH=()
  req GET /api/v1/points
  expect_error "GET points without a token" 401 unauthorized || return 1
  req GET /api/v1/points/ext-000
  expect_error "GET one point without a token" 401 unauthorized || return 1
  req GET /api/v1/status
  expect_error "GET status without a token" 401 unauthorized || return 1
  req GET /metrics
  expect_status "GET /metrics without a token" 401 || return 1
  req PUT /api/v1/points/ext-000 '{"value":1}'
  expect_error "PUT without a token" 401 unauthorized || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-000","value":1}]}'
  expect_error "POST samples without a token" 401 unauthorized
}
run_test "auth: missing token gives 401 unauthorized (REST, /metrics, writes)" t_missing

t_wrong() {
  AUTH=("${WRONG[@]}")
  req GET /api/v1/points
  expect_error "GET points, wrong token" 401 unauthorized || return 1
  AUTH=(-H "Authorization: Bearer view-tok-1x")
  req GET /api/v1/points
  expect_error "GET points, token with an extra byte" 401 unauthorized || return 1
  AUTH=(-H "Authorization: Bearer view-tok-")
  req GET /api/v1/points
  expect_error "GET points, token prefix" 401 unauthorized || return 1
  AUTH=(-H "Authorization: Basic dmlldy10b2stMQ==")
  req GET /api/v1/points
  expect_error "GET points, Basic scheme" 401 unauthorized
}
run_test "auth: wrong token (or a prefix of one, or Basic) gives 401 unauthorized" t_wrong

t_viewer() {
  AUTH=("${VIEW[@]}")
  req GET /api/v1/points?prefix=ext-
  expect_status "viewer GET points" 200 || return 1
  expect "total" "$(jv 'd.total')" 10 || return 1
  req GET /api/v1/status
  expect_status "viewer GET status" 200 || return 1
  req GET /metrics
  expect_status "viewer GET /metrics" 200 || return 1
  req PUT /api/v1/points/ext-000 '{"value":1}'
  expect_error "viewer PUT" 403 forbidden || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-000","value":1}]}'
  expect_error "viewer POST samples" 403 forbidden || return 1
  req GET /api/v1/points/ext-000
  expect "ext-000 unchanged after refused writes" "$(jv 'd.value')" null
}
run_test "auth: viewer reads (200), viewer PUT and POST samples get 403 forbidden" t_viewer

t_operator() {
  AUTH=("${OPER[@]}")
  req PUT /api/v1/points/ext-000 '{"value":2.5}'
  expect_status "operator PUT" 200 || return 1
  expect "value" "$(jv 'd.value')" 2.5 || return 1
  req POST /api/v1/samples '{"samples":[{"point":"ext-001","value":3.5}]}'
  expect_status "operator POST samples" 200 || return 1
  AUTH=("${ADMIN[@]}")
  req PUT /api/v1/points/ext-002 '{"value":4.5}'
  expect_status "admin PUT" 200 || return 1
  AUTH=("${VIEW[@]}")
  req GET /api/v1/points/ext-001
  expect "ext-001 seen by viewer" "$(jv 'd.value')" 3.5
}
run_test "auth: operator (and admin) PUT and POST samples get 200" t_operator

t_ws_query_token() {
  local r
  r=$(node "$IT_DIR/lib/wsprobe.mjs" "ws://127.0.0.1:$PORT/api/v1/stream?token=view-tok-1")
  expect "WS with ?token=view-tok-1 (viewer)" "$r" update
}
run_test "auth: WebSocket with ?token= (viewer) subscribes and gets updates" t_ws_query_token

t_ws_header() {
  local r
  r=$(node "$IT_DIR/lib/wsprobe.mjs" "ws://127.0.0.1:$PORT/api/v1/stream" op-tok-2)
  expect "WS with an Authorization header" "$r" update
}
run_test "auth: WebSocket with an Authorization: Bearer header works" t_ws_header

t_ws_refused() {
  local r
  r=$(node "$IT_DIR/lib/wsprobe.mjs" "ws://127.0.0.1:$PORT/api/v1/stream")
  expect "WS without a token" "$r" "refused 401" || return 1
  r=$(node "$IT_DIR/lib/wsprobe.mjs" "ws://127.0.0.1:$PORT/api/v1/stream?token=nope")
  expect "WS with ?token=nope" "$r" "refused 401"
}
run_test "auth: WebSocket upgrade without or with a wrong token is refused with HTTP 401" t_ws_refused

t_query_token_rest() {
  AUTH=()
  req GET '/api/v1/points?prefix=ext-&token=nope'
  expect_error "REST with ?token=nope" 401 unauthorized
}
run_test "auth: a wrong ?token= on REST is 401" t_query_token_rest

t_opsctl_token() {
  local out rc
  out=$(timeout 15 "$OPSCTL" --url "$BASE" --token view-tok-1 points get ext-000 2>&1); rc=$?
  expect "opsctl points get with a viewer token: exit status" "$rc" 0 || return 1
  expect_match "opsctl points get output" "$out" '2\.5' || return 1
  out=$(OPSD_TOKEN=view-tok-1 timeout 15 "$OPSCTL" --url "$BASE" points set ext-000 9 2>&1); rc=$?
  [ "$rc" -ne 0 ] || { fail "opsctl points set as viewer exited 0: $out"; return 1; }
  expect_match "opsctl points set as viewer says forbidden" "$out" '[Ff]orbidden|403' || return 1
  out=$(timeout 15 "$OPSCTL" --url "$BASE" status 2>&1); rc=$?
  [ "$rc" -ne 0 ] || { fail "opsctl status without a token exited 0: $out"; return 1; }
  expect_match "opsctl status without a token says unauthorized" "$out" '[Uu]nauthori[sz]ed|401' || return 1
  out=$(OPSD_TOKEN=op-tok-2 timeout 15 "$OPSCTL" --url "$BASE" points set ext-003 9 2>&1); rc=$?
  expect "opsctl points set with \$OPSD_TOKEN (operator): exit status ($out)" "$rc" 0 || return 1
  AUTH=("${VIEW[@]}")
  req GET /api/v1/points/ext-003
  expect "ext-003 after opsctl set" "$(jv 'd.value')" 9
}
run_test "auth: opsctl --token / \$OPSD_TOKEN (viewer reads, viewer set refused, operator sets)" t_opsctl_token

finish
