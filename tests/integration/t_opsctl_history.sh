#!/usr/bin/env bash
# opsctl history against a running opsd with history on: query (raw table, --json, paging and
# --limit, aggregates), export (CSV to standard output and to a file), partitions, verify
# (a sound store, one partition, a damaged file), and the errors: bad command lines and
# times, server refusals, history not enabled, a server that is not there.
# docs/API.md "History" and "opsctl". The samples are posted with known times and values,
# so the checks compare exact values; table layout is not part of the contract, so tables are
# checked for the values they show.
. "$(dirname "$0")/lib/lib.sh"

HISTORY='history:
  retention: 10m
  partition: 1m
  commit_interval: 1s
  record:
    - {match: "tank1-*", mode: on_change}
    - {match: "ext-*", mode: on_change}
    - {match: "label", mode: on_change}'

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" "" "$HISTORY"
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "opsctl history: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "opsctl history: opsd starts"

# ctl ARGS...: runs opsctl (bounded, 30 s) against this opsd; sets RC, OUT (standard output)
# and ERR (standard error).
ctl() {
  OUT=$(timeout -k 2 30 "$OPSCTL" --url "$BASE" "$@" 2>"$WORK/ctl.err" </dev/null)
  RC=$?
  ERR=$(cat "$WORK/ctl.err")
}

# rows TEXT REGEX: how many lines of TEXT match REGEX.
rows() { printf '%s\n' "$1" | grep -cE -- "$2"; }

# localtime MS: the local time opsctl prints for a whole second, "YYYY-MM-DD HH:MM:SS".
localtime() { date -d "@$(($1 / 1000))" '+%Y-%m-%d %H:%M:%S'; }

# The data: BASE_MS, a multiple of 10 s about 4 minutes ago (within the 10 min retention),
#   ext-001  25 samples, one per second from BASE_MS, value i (buckets of 10 s: 0-9, 10-19,
#            20-24)
#   ext-002  12,005 samples, one per 5 ms from BASE_MS, value i (more than one page of 10,000)
#   ext-003  3 samples: 1.5 at +500 ms, 9.5 (bad) at +1500 ms, 3.5 at +2500 ms
NOW_MS=$(date +%s%3N)
BASE_MS=$(((NOW_MS - 240000) / 10000 * 10000))
node -e '
const base = +process.argv[1], s = [];
for (let i = 0; i < 25; i++) s.push({point: "ext-001", ts: base + i * 1000, value: i});
for (let i = 0; i < 12005; i++) s.push({point: "ext-002", ts: base + i * 5, value: i});
s.push({point: "ext-003", ts: base + 500, value: 1.5});
s.push({point: "ext-003", ts: base + 1500, value: 9.5, quality: "bad"});
s.push({point: "ext-003", ts: base + 2500, value: 3.5});
require("fs").writeFileSync(process.argv[2], JSON.stringify({samples: s}));
' "$BASE_MS" "$WORK/samples.json"
REQ_TIMEOUT=60 req POST /api/v1/samples "@$WORK/samples.json"
if [ "$STATUS" != 200 ]; then
  not_ok "opsctl history: the samples are posted" "HTTP $STATUS $BODY"
  finish
fi
ok "opsctl history: the samples are posted"
END1=$((BASE_MS + 24000))

t_query_table() {
  ctl history query ext-001 --from "$BASE_MS" --to "$END1"
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect "rows of ext-001" "$(rows "$OUT" 'ext-001')" 25 || return 1
  expect_match "a header" "$OUT" 'TIME.*POINT.*VALUE.*QUALITY' || return 1
  local first
  first=$(printf '%s\n' "$OUT" | grep -m1 'ext-001')
  expect_match "the first row: local time, point, value, quality" "$first" \
    "^$(localtime "$BASE_MS")\\.000 +ext-001 +0 +good\$" || return 1
  expect_match "the last row" "$(printf '%s\n' "$OUT" | grep 'ext-001' | tail -1)" \
    "^$(localtime "$END1")\\.000 +ext-001 +24 +good\$"
}
run_test "history query: a table of the raw samples, local times" t_query_table

t_query_merge() {
  ctl history query ext-003 ext-001 --from "$BASE_MS" --to $((BASE_MS + 3000))
  expect "exit status ($ERR)" "$RC" 0 || return 1
  # In time order across the points: ext-001 at +0, ext-003 at +0.5 s, ext-001 at +1 s, ...
  local got
  got=$(printf '%s\n' "$OUT" | grep -E 'ext-00[13]' | awk '{print $3 "=" $4 "/" $5}' | tr '\n' ' ')
  expect "rows in time order" "$got" \
    "ext-001=0/good ext-003=1.5/good ext-001=1/good ext-003=9.5/bad ext-001=2/good ext-003=3.5/good ext-001=3/good "
}
run_test "history query: several points merged in time order, quality shown" t_query_merge

t_query_json() {
  ctl history query ext-001 ext-003 --from "$BASE_MS" --to "$END1" --json
  expect "exit status ($ERR)" "$RC" 0 || return 1
  printf '%s' "$OUT" >"$WORK/out.json"
  expect "points" "$(jv 'd.series.map(s => s.point).join()' "$WORK/out.json")" "ext-001,ext-003" || return 1
  expect "ext-001 samples" "$(jv 'd.series[0].samples.map(s => s[1]).join()' "$WORK/out.json")" \
    "$(seq -s, 0 24)" || return 1
  expect "a sample is [ts, value, quality]" "$(jv 'JSON.stringify(d.series[1].samples[1])' "$WORK/out.json")" \
    "[$((BASE_MS + 1500)),9.5,\"bad\"]" || return 1
  expect "next" "$(jv 'JSON.stringify([d.next, d.series[0].next, d.series[1].next])' "$WORK/out.json")" \
    "[null,null,null]"
}
run_test "history query --json: one document of the server's shape" t_query_json

t_query_pages() {
  ctl history query ext-002 --from "$BASE_MS" --to now --json
  expect "exit status ($ERR)" "$RC" 0 || return 1
  printf '%s' "$OUT" >"$WORK/out.json"
  expect "every sample, over two pages" "$(jv 'd.series[0].samples.length' "$WORK/out.json")" 12005 || return 1
  expect "in order, none twice" \
    "$(jv 'd.series[0].samples.every((s, i) => s[1] === i && s[0] === '"$BASE_MS"' + 5 * i)' "$WORK/out.json")" true || return 1
  ctl history query ext-002 --from "$BASE_MS" --to now
  expect "exit status of the table ($ERR)" "$RC" 0 || return 1
  expect "table rows" "$(rows "$OUT" 'ext-002')" 12005
}
run_test "history query follows the cursors to the end of the range" t_query_pages

t_query_limit() {
  ctl history query ext-002 --from "$BASE_MS" --to now --limit 10001 --json
  expect "exit status ($ERR)" "$RC" 0 || return 1
  printf '%s' "$OUT" >"$WORK/out.json"
  expect "samples" "$(jv 'd.series[0].samples.length' "$WORK/out.json")" 10001 || return 1
  local cur
  cur=$(jv 'd.series[0].next' "$WORK/out.json")
  expect "the top-level next is the series' (one point)" "$(jv 'd.next' "$WORK/out.json")" "$cur" || return 1
  # The cursor continues where --limit stopped.
  req GET "/api/v1/history?limit=4&cursor=$cur&from=$BASE_MS&to=$((BASE_MS + 60025))&points=ext-002"
  expect_status "the next page" 200 || return 1
  expect "the rest" "$(jv 'd.series[0].samples.map(s => s[1]).join()')" "10001,10002,10003,10004" || return 1
  ctl history query ext-002 ext-001 --from "$BASE_MS" --to now --limit 7
  expect "exit status of the table ($ERR)" "$RC" 0 || return 1
  expect "--limit is per point: ext-002" "$(rows "$OUT" 'ext-002')" 7 || return 1
  expect "--limit is per point: ext-001" "$(rows "$OUT" 'ext-001')" 7
}
run_test "history query --limit N: N samples per point, the cursor kept in --json" t_query_limit

t_query_agg() {
  ctl history query ext-001 --from "$BASE_MS" --to "$END1" --interval 10s --agg avg,min,max,count
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "a header" "$OUT" 'START.*POINT.*AVG.*MIN.*MAX.*COUNT' || return 1
  local got
  got=$(printf '%s\n' "$OUT" | grep 'ext-001' | awk '{print $2 "|" $4 "|" $5 "|" $6 "|" $7}' | tr '\n' ' ')
  local t0 t1 t2
  t0=$(localtime "$BASE_MS" | cut -c12-)
  t1=$(localtime $((BASE_MS + 10000)) | cut -c12-)
  t2=$(localtime $((BASE_MS + 20000)) | cut -c12-)
  expect "buckets of 10 s" "$got" "$t0.000|4.5|0|9|10 $t1.000|14.5|10|19|10 $t2.000|22|20|24|5 " || return 1
  ctl history query ext-001 ext-003 --from "$BASE_MS" --to $((BASE_MS + 29999)) --buckets 3 --json
  expect "exit status of --buckets ($ERR)" "$RC" 0 || return 1
  printf '%s' "$OUT" >"$WORK/out.json"
  expect "default aggregates, 3 buckets" "$(jv 'JSON.stringify(d.series[0].buckets.map(b => b[1]))' "$WORK/out.json")" \
    '[{"avg":4.5,"min":0,"max":9},{"avg":14.5,"min":10,"max":19},{"avg":22,"min":20,"max":24}]' || return 1
  expect "the bad sample left out of avg" "$(jv 'd.series[1].buckets[0][1].avg' "$WORK/out.json")" 2.5
}
run_test "history query --interval/--buckets --agg: aggregates per bucket" t_query_agg

t_export() {
  ctl history export ext-001 ext-003 --from "$BASE_MS" --to "$END1"
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect "the header" "$(printf '%s\n' "$OUT" | head -1)" "point,ts,value,quality" || return 1
  expect "rows" "$(printf '%s\n' "$OUT" | wc -l)" 29 || return 1
  expect "a row" "$(printf '%s\n' "$OUT" | grep -m1 "^ext-001,$((BASE_MS + 3000)),")" "ext-001,$((BASE_MS + 3000)),3,good" || return 1
  expect "a bad one" "$(printf '%s\n' "$OUT" | grep "^ext-003,$((BASE_MS + 1500)),")" "ext-003,$((BASE_MS + 1500)),9.5,bad" || return 1
  local stdout=$OUT
  ctl history export ext-001 ext-003 --from "$BASE_MS" --to "$END1" -o "$WORK/export.csv"
  expect "exit status with -o ($ERR)" "$RC" 0 || return 1
  expect "nothing on standard output with -o" "$OUT" "" || return 1
  expect "the file holds the same CSV" "$(cat "$WORK/export.csv")" "$stdout" || return 1
  ctl history export ext-002 --from "$BASE_MS" --to now --output "$WORK/export2.csv"
  expect "exit status of a large export ($ERR)" "$RC" 0 || return 1
  expect "every row of a large export" "$(($(wc -l <"$WORK/export2.csv") - 1))" 12005
}
run_test "history export: CSV to standard output and to a file (-o)" t_export

t_export_agg() {
  ctl history export ext-001 --from "$BASE_MS" --to "$END1" --interval 10s --agg min,max
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect "the header" "$(printf '%s\n' "$OUT" | head -1)" "point,start,aggregates" || return 1
  expect "a bucket" "$(printf '%s\n' "$OUT" | sed -n 2p)" "ext-001,$BASE_MS,\"{\"\"min\"\":0,\"\"max\"\":9}\""
}
run_test "history export --interval --agg: the aggregates as CSV" t_export_agg

t_export_errors() {
  echo "keep me" >"$WORK/keep.csv"
  ctl history export ext-001 --agg median --interval 10s -o "$WORK/keep.csv"
  [ "$RC" -eq 1 ] || { fail "a refused export exited $RC: $ERR"; return 1; }
  expect_match "the server's error" "$ERR" '^opsctl: bad_request: .*median' || return 1
  expect "the file is left as it was" "$(cat "$WORK/keep.csv")" "keep me" || return 1
  ctl history export ext-001 -o "$WORK/no/such/dir/x.csv"
  [ "$RC" -eq 1 ] || { fail "an export to a folder that does not exist exited $RC: $ERR"; return 1; }
  expect_match "says which file" "$ERR" 'x\.csv'
}
run_test "history export errors: the server's refusal, a file that cannot be written" t_export_errors

t_relative() {
  ctl history query ext-001 --from -10m
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect "--from -10m holds the samples" "$(rows "$OUT" 'ext-001')" 25 || return 1
  ctl history query ext-001 --from=-30s --to now
  expect "exit status of an empty range ($ERR)" "$RC" 0 || return 1
  expect "no rows" "$(rows "$OUT" 'ext-001')" 0 || return 1
  expect_match "says the range is empty" "$ERR" 'no samples' || return 1
  ctl history query ext-001 --from "$(localtime "$BASE_MS")" --to "$(date -u -d "@$((END1 / 1000))" '+%Y-%m-%dT%H:%M:%SZ')"
  expect "exit status with a local time and RFC 3339 ($ERR)" "$RC" 0 || return 1
  expect "rows" "$(rows "$OUT" 'ext-001')" 25 || return 1
  # HH:MM:SS is today's local time (unless the test runs across midnight).
  if [ "$(localtime "$BASE_MS" | cut -c1-10)" = "$(date '+%Y-%m-%d')" ]; then
    ctl history query ext-001 --from "$(localtime $((BASE_MS + 20000)) | cut -c12-)" --to now
    expect "exit status with HH:MM:SS ($ERR)" "$RC" 0 || return 1
    expect "rows from +20 s" "$(rows "$OUT" 'ext-001')" 5
  fi
}
run_test "history query --from/--to: relative, local, RFC 3339 times" t_relative

t_unknown_point() {
  ctl history query no-such-point --from -10m
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "a warning" "$ERR" "no point named 'no-such-point'"
}
run_test "history query of a point that does not exist warns" t_unknown_point

# Partitions appear once the writer has committed (commit_interval 1s): wait for them.
wait_partitions() {
  local i
  for ((i = 0; i < 100; i++)); do
    req GET /api/v1/history/partitions
    [ "$STATUS" = 200 ] && [ "$(jv 'd.partitions.filter(p => p.samples > 0).length')" -gt 0 ] 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

t_partitions() {
  wait_partitions || { fail "no partition with samples after 20 s: $BODY"; return 1; }
  ctl history partitions
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "a header" "$OUT" 'FILE.*START.*END.*SIZE.*SERIES.*CHUNKS.*SAMPLES.*BYTES/SAMPLE.*ERROR' || return 1
  local first file start
  first=$(printf '%s\n' "$OUT" | grep -m1 '^p-')
  file=$(printf '%s' "$first" | awk '{print $1}')
  start=${file#p-}
  start=${start%.db}
  expect_match "the start in local time" "$first" "^$file +$(localtime "$start") " || return 1
  ctl history partitions --json
  expect "exit status of --json ($ERR)" "$RC" 0 || return 1
  printf '%s' "$OUT" >"$WORK/out.json"
  req GET /api/v1/history/partitions
  expect "the same files as REST" "$(jv 'd.partitions.map(p => p.file).join()' "$WORK/out.json")" \
    "$(jv 'd.partitions.map(p => p.file).join()')" || return 1
  local files f
  files=$(jv 'd.partitions.map(p => p.file).join(" ")' "$WORK/out.json")
  ctl history partitions
  for f in $files; do
    expect "$f: one table row" "$(rows "$OUT" "^$f ")" 1 || return 1
  done
  expect_match "a total" "$OUT" '^[0-9]+ partitions?, .* samples'
}
run_test "history partitions: a table, and --json as the server's" t_partitions

t_verify() {
  ctl history verify
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "ok rows" "$OUT" '^ok +p-[0-9]+\.db' || return 1
  if printf '%s' "$OUT" | grep -q FAILED; then fail "a sound store FAILED: $OUT"; return 1; fi
  local file start
  file=$(printf '%s\n' "$OUT" | grep -m1 '^ok' | awk '{print $2}')
  start=${file#p-}
  start=${start%.db}
  ctl history verify --partition "$start" --json
  expect "exit status with --partition ($ERR)" "$RC" 0 || return 1
  printf '%s' "$OUT" >"$WORK/out.json"
  expect "one partition checked" "$(jv 'd.results.map(r => r.file + ":" + r.ok).join()' "$WORK/out.json")" "$file:true" || return 1
  ctl history verify --partition "$(localtime "$start")"
  expect "exit status with --partition as a local time ($ERR)" "$RC" 0 || return 1
  expect "one row" "$(rows "$OUT" '^ok ')" 1 || return 1
  ctl history verify --partition $((start + 1))
  expect "exit status when no partition starts there" "$RC" 1 || return 1
  expect_match "says so" "$ERR" 'no partition starts at'
}
run_test "history verify: every partition, or one by its start" t_verify

t_verify_damaged() {
  # A start a day ahead: out of reach of the retention, which might remove it meanwhile.
  local junk="$WORK/data/history/partitions/p-$((NOW_MS / 60000 * 60000 + 86400000)).db"
  head -c 8192 /dev/urandom >"$junk"
  ctl history verify
  local rc=$RC out=$OUT err=$ERR
  ctl history partitions
  rm -f "$junk"
  expect "exit status with a damaged partition ($err)" "$rc" 1 || return 1
  expect_match "FAILED row" "$out" "^FAILED +$(basename "$junk")" || return 1
  expect_match "the sound ones still ok" "$out" '^ok +p-' || return 1
  expect_match "a message" "$err" 'failed the check' || return 1
  expect "partitions exits 0 ($ERR)" "$RC" 0 || return 1
  expect_match "partitions shows the error" "$(printf '%s\n' "$OUT" | grep "$(basename "$junk")")" 'not .*partition|SQLite|invalid|corrupt'
}
run_test "history verify: a damaged partition is FAILED, exit status 1" t_verify_damaged

t_usage_errors() {
  local args
  set -f # the words are split but not globbed (tank1-*)
  for args in "history" "history nope" "history query" "history query ext-001 --bogus" \
    "history query ext-001 --from yesterday" "history query ext-001 --to 25:00" \
    "history query ext-001 --from -90" "history query ext-001 --from -1m --to -2m" \
    "history query ext-001 --interval 1m --buckets 3" "history query ext-001 --agg avg" \
    "history query ext-001 --limit 5 --interval 1m" "history query ext-001 --buckets 0" \
    "history query tank1-*" "history query a,b" "history partitions x" \
    "history partitions --from -1h" "history verify --partition later" "history export ext-001 --json"; do
    # shellcheck disable=SC2086
    ctl $args
    [ "$RC" -eq 1 ] || { fail "opsctl $args: exit status $RC (want 1): $OUT $ERR"; return 1; }
    expect_match "opsctl $args: a message" "$ERR" '^opsctl: ' || return 1
  done
  ctl history query ext-001 --from yesterday
  expect_match "says how to write a time" "$ERR" '-1h' || return 1
  ctl --help
  expect_match "--help lists history" "$OUT" 'history query' || return 1
  expect_match "--help lists export" "$OUT" 'history export'
}
run_test "history: bad command lines exit 1 with a message" t_usage_errors

t_server_errors() {
  ctl history query ext-001 --from -10m --buckets 5 --agg avg,median
  expect "exit status ($ERR)" "$RC" 1 || return 1
  expect_match "the server's error" "$ERR" "^opsctl: bad_request: .*'median'" || return 1
  ctl history query ext-001 --from -10m --interval 1ms
  expect "exit status of too many buckets" "$RC" 1 || return 1
  expect_match "the server's error" "$ERR" '^opsctl: bad_request: .*buckets'
}
run_test "history: refusals of the server as 'opsctl: CODE: MESSAGE', exit 1" t_server_errors

t_disabled() {
  local port base
  port=$(free_port)
  write_config "$WORK/nohist.yaml" "$port" "$WORK/data-nohist"
  PORT=$port
  start_opsd "$WORK/nohist.yaml" || return 1
  base=$BASE
  local cmd
  for cmd in "query ext-001" "export ext-001" "partitions" "verify"; do
    # shellcheck disable=SC2086
    OUT=$(timeout -k 2 15 "$OPSCTL" --url "$base" history $cmd 2>&1 </dev/null)
    RC=$?
    expect "history $cmd without history: exit status ($OUT)" "$RC" 1 || return 1
    expect_match "history $cmd: the server's message" "$OUT" '^opsctl: not_found: .*history' || return 1
  done
  stop_opsd "$OPSD_PID"
}
run_test "history commands against an opsd without history: not_found, exit 1" t_disabled

t_unreachable() {
  local port
  port=$(free_port)
  for cmd in "query ext-001" "export ext-001" "partitions" "verify"; do
    # shellcheck disable=SC2086
    OUT=$(timeout -k 2 15 "$OPSCTL" --url "http://127.0.0.1:$port" history $cmd 2>&1 </dev/null)
    RC=$?
    expect "history $cmd against nothing: exit status ($OUT)" "$RC" 2 || return 1
    expect_match "history $cmd: names the URL" "$OUT" "127\\.0\\.0\\.1:$port" || return 1
  done
}
run_test "history commands against a port where nothing listens exit 2" t_unreachable

finish
