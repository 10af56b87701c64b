#!/usr/bin/env bash
# opsctl messages against a running opsd with the journal on: import (a JSON batch, durable
# on exit; a bad file refused), search (words, key=value filters, --limit, --json), show,
# body (standard output and -o FILE, byte for byte), conversation, endpoints, failed and
# reimport (errors), and the exit statuses. docs/API.md "Journal" and "opsctl".
. "$(dirname "$0")/lib/lib.sh"

JOURNAL='journal:
  retention: 1h
  partition: 10m
  inline_max: 100
  disk_floor: 0'

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" "" "$JOURNAL"
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "opsctl messages: opsd starts" "$(cat "$WORK/.reason")"
  finish
fi
ok "opsctl messages: opsd starts"

ctl() {
  OUT=$(timeout -k 2 30 "$OPSCTL" --url "$BASE" "$@" 2>"$WORK/ctl.err" </dev/null)
  RC=$?
  ERR=$(cat "$WORK/ctl.err")
}
rows() { printf '%s\n' "$1" | grep -cE -- "$2"; }

# 30 messages: ids o-00..o-29, conversation conv-(i%3), receiving Sales or Billing (i%2),
# a 300-byte body for o-07 (over inline_max: compressed), times sent a minute ago.
node -e '
const wire = (ms) => new Date(ms).toISOString().replace("T", " ").replace(/\.(\d+)Z$/, ":$1000 Z");
const base = Date.now() - 60000, m = [];
for (let i = 0; i < 30; i++) m.push({headers: {
  "NServiceBus.MessageId": "o-" + String(i).padStart(2, "0"),
  "NServiceBus.ConversationId": "conv-" + (i % 3),
  "NServiceBus.EnclosedMessageTypes": "Shop.PlaceOrder, Shop",
  "NServiceBus.OriginatingEndpoint": "Web",
  "NServiceBus.ProcessingEndpoint": i % 2 ? "Sales" : "Billing",
  "NServiceBus.TimeSent": wire(base + i * 100),
  "NServiceBus.ProcessingStarted": wire(base + i * 100 + 10),
  "NServiceBus.ProcessingEnded": wire(base + i * 100 + 40)},
  body: i === 7 ? "z".repeat(299) + "!" : "order " + i});
require("fs").writeFileSync(process.argv[1], JSON.stringify({messages: m}));
' "$WORK/batch.json"

t_import() {
  ctl messages import "$WORK/batch.json"
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "summary" "$OUT" '^30 stored, 0 duplicates, 0 failed' || return 1
  ctl messages import "$WORK/batch.json" --json
  expect "again: exit status" "$RC" 0 || return 1
  expect_match "again: copies recognised" "$OUT" '"duplicates": 30' || return 1
  printf '{"messages":[{"headers":{"a":1}}]}' >"$WORK/bad.json"
  ctl messages import "$WORK/bad.json"
  expect "bad file: exit status" "$RC" 1 || return 1
  expect_match "bad file: the server's reason" "$ERR" "bad_message.*header 'a' must be a string" || return 1
  ctl messages import "$WORK/missing.json"
  expect "missing file: exit status" "$RC" 1
}
run_test "messages import: a durable batch, copies, a bad batch refused" t_import

t_search() {
  ctl messages search
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "header" "$OUT" 'TIME SENT +ID +TYPE +FROM +TO' || return 1
  expect "all rows" "$(rows "$OUT" ' o-[0-9]{2} ')" 30 || return 1
  expect_match "footer" "$OUT" '30 of 30 messages' || return 1
  ctl messages search endpoint=Sales conversation=conv-1
  expect "filters: rows" "$(rows "$OUT" ' o-[0-9]{2} ')" 5 || return 1
  ctl messages search order 13
  expect "words: rows" "$(rows "$OUT" ' o-13 ')" 1 || return 1
  expect "words: only that one" "$(rows "$OUT" ' o-[0-9]{2} ')" 1 || return 1
  ctl messages search --limit 4 sort=time_sent direction=asc
  expect "limit: rows" "$(rows "$OUT" ' o-[0-9]{2} ')" 4 || return 1
  expect_match "limit: oldest first" "$(printf '%s\n' "$OUT" | grep -m1 ' o-')" ' o-00 ' || return 1
  expect_match "limit: more" "$OUT" '4 of 30 messages \(more' || return 1
  ctl messages search --json endpoint=Billing
  expect_match "json" "$OUT" '"total": 15' || return 1
  ctl messages search sort=size
  expect "bad sort: exit status" "$RC" 1 || return 1
  expect_match "bad sort: reason" "$ERR" "sort" || return 1
  ctl messages search --from yesterday
  expect "bad time: exit status" "$RC" 1
}
run_test "messages search: words, filters, limit, json, errors" t_search

t_show_body() {
  ctl messages show o-03
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect_match "type" "$OUT" 'type +Shop.PlaceOrder' || return 1
  expect_match "receiving" "$OUT" 'receiving_endpoint +Sales' || return 1
  expect_match "processing time" "$OUT" 'processing_ms +30' || return 1
  expect_match "critical time" "$OUT" 'critical_ms +40' || return 1
  expect_match "headers" "$OUT" 'NServiceBus.ConversationId: conv-0' || return 1
  expect_match "body" "$OUT" 'order 3' || return 1
  ctl messages body o-07 -o "$WORK/b7"
  expect "body -o: exit status ($ERR)" "$RC" 0 || return 1
  expect "body -o: bytes" "$(cat "$WORK/b7")" "$(printf 'z%.0s' $(seq 299))!" || return 1
  ctl messages body o-05
  expect "body: standard output" "$OUT" "order 5" || return 1
  ctl messages show nope
  expect "unknown: exit status" "$RC" 1 || return 1
  expect_match "unknown: reason" "$ERR" "not_found" || return 1
  ctl messages body nope
  expect "unknown body: exit status" "$RC" 1
}
run_test "messages show and body: fields, headers, bytes, unknown ids" t_show_body

t_views() {
  ctl messages conversation conv-2
  expect "exit status ($ERR)" "$RC" 0 || return 1
  expect "conversation rows" "$(rows "$OUT" ' o-[0-9]{2} ')" 10 || return 1
  ctl messages endpoints
  expect "endpoints: exit status ($ERR)" "$RC" 0 || return 1
  expect_match "Sales row" "$OUT" 'Sales +- +0 +15 +30\.0 +40\.0' || return 1
  expect_match "Web row" "$OUT" 'Web +- +30 +0' || return 1
  ctl messages failed
  expect "failed: exit status ($ERR)" "$RC" 0 || return 1
  expect_match "failed: none" "$OUT" '0 failed imports' || return 1
  ctl messages reimport 42
  expect "reimport unknown: exit status" "$RC" 1 || return 1
  expect_match "reimport unknown: reason" "$ERR" 'no failed import 42' || return 1
  ctl messages reimport x
  expect "reimport bad id: exit status" "$RC" 1
}
run_test "messages conversation, endpoints, failed, reimport" t_views

t_unreachable() {
  OUT=$(timeout -k 2 30 "$OPSCTL" --url "http://127.0.0.1:1" messages search 2>/dev/null </dev/null)
  expect "exit status" "$?" 2
}
run_test "messages: a server that is not there exits 2" t_unreachable

finish
