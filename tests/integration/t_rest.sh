#!/usr/bin/env bash
# REST points API: list (prefix, paging), get one, write (PUT), errors. docs/API.md "Points".
. "$(dirname "$0")/lib/lib.sh"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" "" \
  '  - {name: "area/unit:1.temp_a", type: double, writable: true}'
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "rest: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "rest: opsd starts with the standard config"
sleep 0.6   # let the simulator produce its first values (period 200ms)

t_healthz() {
  req GET /healthz
  expect_status "GET /healthz" 200 || return 1
  expect "status" "$(jv 'd.status')" ok
}
run_test "GET /healthz answers 200 {\"status\":\"ok\"}" t_healthz

t_list_all() {
  req GET /api/v1/points
  expect_status "GET /api/v1/points" 200 || return 1
  expect "total" "$(jv 'd.total')" 114 || return 1
  expect "count (default limit 1000)" "$(jv 'd.points.length')" 114 || return 1
  expect "next on the last page" "$(jv 'd.next')" null || return 1
  expect "name order" "$(jv 'JSON.stringify(d.points.map(p=>p.name))===JSON.stringify(d.points.map(p=>p.name).slice().sort((a,b)=>a<b?-1:a>b?1:0))')" true
}
run_test "list: all points, in name order, total and next null" t_list_all

t_list_prefix() {
  req GET '/api/v1/points?prefix=ext-'
  expect_status "GET ?prefix=ext-" 200 || return 1
  expect "total" "$(jv 'd.total')" 10 || return 1
  expect "names" "$(jv 'd.points.map(p=>p.name).join(",")')" \
    "ext-000,ext-001,ext-002,ext-003,ext-004,ext-005,ext-006,ext-007,ext-008,ext-009" || return 1
  expect "next" "$(jv 'd.next')" null
}
run_test "list: prefix filter" t_list_prefix

t_list_no_value() {
  req GET '/api/v1/points?prefix=ext-00&limit=1'
  expect_status "GET" 200 || return 1
  local p='d.points[0]'
  expect "name" "$(jv "$p.name")" ext-000 || return 1
  expect "type" "$(jv "$p.type")" double || return 1
  expect "unit" "$(jv "$p.unit")" bar || return 1
  expect "writable" "$(jv "$p.writable")" true || return 1
  expect "value" "$(jv "$p.value")" null || return 1
  expect "quality" "$(jv "$p.quality")" bad || return 1
  expect "reason" "$(jv "$p.reason")" "no value yet" || return 1
  expect "total" "$(jv 'd.total')" 10
}
run_test "list: point object fields; a point never written is null/bad/'no value yet'" t_list_no_value

t_list_empty() {
  req GET '/api/v1/points?prefix=zzz'
  expect_status "GET ?prefix=zzz" 200 || return 1
  expect "points" "$(jv 'd.points')" "[]" || return 1
  expect "total" "$(jv 'd.total')" 0 || return 1
  expect "next" "$(jv 'd.next')" null
}
run_test "list: prefix without a match gives [] total 0 next null" t_list_empty

t_paging() {
  local cursor="" names="" page=0 n next total
  while :; do
    page=$((page + 1))
    [ "$page" -le 10 ] || { fail "more than 10 pages of 30 for 100 points"; return 1; }
    if [ -z "$cursor" ]; then
      req GET '/api/v1/points?prefix=tank1-&limit=30'
    else
      req GET "/api/v1/points?prefix=tank1-&limit=30&cursor=$(node -e 'process.stdout.write(encodeURIComponent(process.argv[1]))' "$cursor")"
    fi
    expect_status "page $page" 200 || return 1
    total=$(jv 'd.total')
    expect "page $page total" "$total" 100 || return 1
    n=$(jv 'd.points.length')
    names+=$(jv 'd.points.map(p=>p.name).join("\n")')$'\n'
    next=$(jv 'd.next')
    if [ "$page" -lt 4 ]; then
      expect "page $page size" "$n" 30 || return 1
      [ "$next" != null ] || { fail "page $page: next is null before the last page"; return 1; }
    else
      expect "page 4 size" "$n" 10 || return 1
      expect "page 4 next" "$next" null || return 1
      break
    fi
    cursor=$next
  done
  local got want
  got=$(printf '%s' "$names" | grep -c .)
  expect "names over all pages" "$got" 100 || return 1
  want=$(for i in $(seq 0 99); do printf 'tank1-%04d\n' "$i"; done)
  [ "$(printf '%s' "$names" | grep .)" = "$want" ] || { fail "pages are not tank1-0000..0099 in order without repeats"; return 1; }
}
run_test "list: paging with limit/cursor/next covers every point once, in order" t_paging

t_limit_bounds() {
  req GET '/api/v1/points?limit=10000'
  expect_status "limit=10000" 200 || return 1
  expect "points with limit=10000" "$(jv 'd.points.length')" 114 || return 1
  req GET '/api/v1/points?limit=0'
  expect_error "limit=0" 400 bad_request || return 1
  req GET '/api/v1/points?limit=10001'
  expect_error "limit=10001" 400 bad_request || return 1
  req GET '/api/v1/points?limit=ten'
  expect_error "limit=ten" 400 bad_request
}
run_test "list: limit 1-10000 (10000 accepted; 0, 10001, 'ten' are 400 bad_request)" t_limit_bounds

t_get_one() {
  req GET /api/v1/points/tank1-0005
  expect_status "GET tank1-0005" 200 || return 1
  expect "name" "$(jv 'd.name')" tank1-0005 || return 1
  expect "type" "$(jv 'd.type')" double || return 1
  expect "writable" "$(jv 'd.writable')" false || return 1
  expect "quality" "$(jv 'd.quality')" good || return 1
  expect "value is a number in [0,100]" "$(jv 'typeof d.value==="number" && d.value>=0 && d.value<=100')" true || return 1
  expect "ts is recent ms" "$(jv 'Number.isInteger(d.ts) && Math.abs(Date.now()-d.ts) < 10000')" true
}
run_test "GET /api/v1/points/{name}: simulator point has a good recent value" t_get_one

t_get_unknown() {
  req GET /api/v1/points/no-such-point
  expect_error "GET unknown" 404 unknown_point
}
run_test "GET unknown point: 404 unknown_point" t_get_unknown

t_get_encoded() {
  req GET '/api/v1/points/area%2Funit%3A1.temp_a'
  expect_status "GET area%2Funit%3A1.temp_a" 200 || return 1
  expect "name" "$(jv 'd.name')" "area/unit:1.temp_a"
}
run_test "GET a point whose name has / and : (percent-encoded in the path)" t_get_encoded

t_put_double() {
  req PUT /api/v1/points/ext-001 '{"value": 3.5}'
  expect_status "PUT ext-001" 200 || return 1
  expect "answer is the point: name" "$(jv 'd.name')" ext-001 || return 1
  expect "answer value" "$(jv 'd.value')" 3.5 || return 1
  expect "answer quality" "$(jv 'd.quality')" good || return 1
  req GET /api/v1/points/ext-001
  expect "GET value after PUT" "$(jv 'd.value')" 3.5 || return 1
  expect "GET ts recent" "$(jv 'Math.abs(Date.now()-d.ts) < 10000')" true
}
run_test "PUT writable double point: 200, answers the point, visible in GET" t_put_double

t_put_types() {
  req PUT /api/v1/points/flag '{"value": true}'
  expect_status "PUT flag true" 200 || return 1
  expect "flag" "$(jv 'd.value')" true || return 1
  req PUT /api/v1/points/count '{"value": 42}'
  expect_status "PUT count 42" 200 || return 1
  expect "count" "$(jv 'd.value')" 42 || return 1
  req PUT /api/v1/points/label '{"value": "hello world"}'
  expect_status "PUT label" 200 || return 1
  expect "label" "$(jv 'd.value')" "hello world" || return 1
  req GET /api/v1/points/count
  expect "GET count" "$(jv 'd.value')" 42
}
run_test "PUT bool, int and string points" t_put_types

t_put_quality_ts() {
  req PUT /api/v1/points/ext-002 '{"value": 4, "quality": "uncertain", "ts": 1764460800000}'
  expect_status "PUT with quality and ts" 200 || return 1
  expect "value" "$(jv 'd.value')" 4 || return 1
  expect "quality" "$(jv 'd.quality')" uncertain || return 1
  expect "ts" "$(jv 'd.ts')" 1764460800000 || return 1
  req PUT /api/v1/points/ext-002 '{"value": 5, "ts": "2025-11-30T00:00:01Z"}'
  expect_status "PUT with an RFC 3339 ts" 200 || return 1
  expect "ts from RFC 3339" "$(jv 'd.ts')" 1764460801000 || return 1
  expect "quality defaults to good" "$(jv 'd.quality')" good
}
run_test "PUT with optional quality and ts (ms and RFC 3339)" t_put_quality_ts

t_put_not_writable() {
  req PUT /api/v1/points/tank1-0001 '{"value": 1}'
  expect_error "PUT simulator point" 409 not_writable
}
run_test "PUT simulator point: 409 not_writable" t_put_not_writable

t_put_unknown() {
  req PUT /api/v1/points/no-such-point '{"value": 1}'
  expect_error "PUT unknown" 404 unknown_point
}
run_test "PUT unknown point: 404 unknown_point" t_put_unknown

t_put_wrong_type() {
  req PUT /api/v1/points/ext-001 '{"value": "abc"}'
  expect_error "string to double" 400 wrong_type || return 1
  req PUT /api/v1/points/count '{"value": 1.5}'
  expect_error "1.5 to int" 400 wrong_type || return 1
  req PUT /api/v1/points/flag '{"value": 1}'
  expect_error "1 to bool" 400 wrong_type || return 1
  req PUT /api/v1/points/label '{"value": 7}'
  expect_error "7 to string" 400 wrong_type || return 1
  req GET /api/v1/points/ext-001
  expect "ext-001 unchanged" "$(jv 'd.value')" 3.5 || return 1
  req GET /api/v1/points/count
  expect "count unchanged" "$(jv 'd.value')" 42
}
run_test "PUT wrong type: 400 wrong_type and the value is unchanged" t_put_wrong_type

t_put_invalid_json() {
  req PUT /api/v1/points/ext-001 '{"value": '
  expect_error "PUT malformed" 400 invalid_json || return 1
  req GET /api/v1/points/ext-001
  expect "ext-001 unchanged" "$(jv 'd.value')" 3.5
}
run_test "PUT malformed JSON: 400 invalid_json" t_put_invalid_json

t_not_found() {
  req GET /api/v1/no-such-thing
  expect_error "GET /api/v1/no-such-thing" 404 not_found
}
run_test "unknown API path: 404 not_found" t_not_found

t_method() {
  req DELETE /api/v1/points/ext-001
  expect_error "DELETE a point" 405 method_not_allowed
}
run_test "unsupported method: 405 method_not_allowed" t_method

finish
