#!/usr/bin/env bash
# Command line and configuration checks: --check-config (good and bad files), --version,
# --help, refusing to listen beyond loopback without tokens, exit statuses, --listen,
# the "listening on" line. docs/API.md "Command line" and "Configuration".
. "$(dirname "$0")/lib/lib.sh"

# run_opsd SECONDS ARGS...: runs opsd in the foreground (bounded), sets RC and OUT (stdout+stderr).
run_opsd() {
  local secs=$1
  shift
  OUT=$(timeout -k 2 "$secs" "$OPSD" "$@" 2>&1)
  RC=$?
}

t_good() {
  local f="$WORK/good.yaml"
  write_config "$f" 18080 "$WORK/data-good"
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "message" "$OUT" "good\.yaml: ok \(113 points, 1 drivers?\)"
}
run_test "--check-config on a good file: exit 0, 'FILE: ok (113 points, 1 driver(s))'" t_good

t_doc_example() {
  # The configuration example of docs/API.md, as documented (less the tls line: no
  # certificate files here), must be a valid file.
  local f="$WORK/doc-example.yaml"
  awk '/^## Configuration/{c=1} c && /^```yaml/{y=1; next} y && /^```/{exit} y' "$IT_DIR/../../docs/API.md" |
    grep -v '^  tls:' >"$f"
  [ -s "$f" ] || { fail "no yaml example found under '## Configuration' in docs/API.md"; return 1; }
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "message" "$OUT" 'doc-example\.yaml: ok \(2100 points, 1 drivers?\)'
}
run_test "--check-config accepts the example configuration of docs/API.md (2100 points)" t_doc_example

t_shipped_config() {
  local f="$IT_DIR/../../etc/opsd.yaml"
  [ -f "$f" ] || { fail "etc/opsd.yaml is missing"; return 1; }
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "message" "$OUT" 'opsd\.yaml: ok \([0-9]+ points, [0-9]+ drivers?\)'
}
run_test "--check-config accepts the shipped etc/opsd.yaml" t_shipped_config

t_all_keys() {
  local f="$WORK/all-keys.yaml"
  cat >"$f" <<'EOF'
server:
  listen: 127.0.0.1:18080
  data_dir: ./var
  log_level: debug
  limits:
    max_clients: 10
    max_subscriptions: 5
    slow_client_timeout: 1500ms
drivers:
  - type: simulator
    name: plant
    points:
      - name: "t{1..2}-{00..04}"
        type: int
        pattern: step
        period: 1
        wave: 2m
        min: -5
        max: 5
        resolution: 1
        unit: "%"
        description: "multiplied braces"
      - {name: "rw-{0..2}", type: double, pattern: random_walk, period: 250ms, min: 0, max: 1}
      - {name: "b", type: bool, pattern: step, period: 1s}
      - {name: "r", type: double, pattern: ramp, period: 2h, wave: 30d}
points:
  - {name: "x-{000..099}", type: double, unit: bar, writable: true, description: "fed"}
  - {name: "a/b:c.d_e", type: string}
history:
  retention: 10m
EOF
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 0 || return 1
  expect_match "message" "$OUT" 'all-keys\.yaml: ok \(116 points, 1 drivers?\)'
}
run_test "--check-config accepts every documented key, multiplied braces, a module section (116 points)" t_all_keys

# bad_case NAME LINE REGEX YAML: the file must be refused with exit 1 and FILE:LINE: and REGEX.
bad_case() {
  local name=$1 line=$2 re=$3 f="$WORK/$1.yaml"
  printf '%s\n' "$4" >"$f"
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "message names the file and line" "$OUT" "$name\.yaml:$line:" || return 1
  expect_match "message gives the reason" "$OUT" "$re"
}

t_bad_pattern() {
  bad_case bad-pattern 8 "pattern.*saw" 'server:
  listen: 127.0.0.1:18080
drivers:
  - type: simulator
    name: plant
    points:
      - name: "tank1-{0000..0009}"
        pattern: saw
        type: double
        period: 1s'
}
run_test "--check-config unknown pattern: exit 1, 'FILE:8:' and the reason" t_bad_pattern

t_unknown_key() {
  bad_case bad-key 5 "perod" 'server:
  listen: 127.0.0.1:18080
points:
  - name: "ext-1"
    perod: 1s
    type: double'
}
run_test "--check-config unknown key (a typo): exit 1, 'FILE:5:' names the key" t_unknown_key

t_bad_type() {
  bad_case bad-type 4 "float|type" 'server:
  listen: 127.0.0.1:18080
points:
  - {name: "ext-1", type: float}'
}
run_test "--check-config unknown point type: exit 1, 'FILE:4:' and the reason" t_bad_type

t_bad_duration() {
  bad_case bad-duration 9 "period|duration|fast" 'server:
  listen: 127.0.0.1:18080
drivers:
  - type: simulator
    name: plant
    points:
      - name: "p-{0..3}"
        type: double
        period: fast'
}
run_test "--check-config bad duration: exit 1, 'FILE:9:' and the reason" t_bad_duration

t_yaml_syntax() {
  local f="$WORK/bad-syntax.yaml"
  printf 'server:\n  listen: 127.0.0.1:18080\npoints:\n  - {name: "a", type: double\n  - {name: "b", type: double}\n' >"$f"
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "message names the file and a line" "$OUT" 'bad-syntax\.yaml:[0-9]+:'
}
run_test "--check-config YAML syntax error: exit 1, 'FILE:LINE:'" t_yaml_syntax

t_bad_name() {
  bad_case bad-name 4 "name" 'server:
  listen: 127.0.0.1:18080
points:
  - {name: "has space", type: double}'
}
run_test "--check-config point name with a forbidden character: exit 1, 'FILE:4:'" t_bad_name

t_duplicate() {
  local f="$WORK/dup.yaml"
  printf 'server:\n  listen: 127.0.0.1:18080\npoints:\n  - {name: "ext-{0..9}", type: double}\n  - {name: "ext-5", type: int}\n' >"$f"
  run_opsd 15 --check-config "$f"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "message names the file and line" "$OUT" 'dup\.yaml:5:' || return 1
  expect_match "message names the point" "$OUT" 'ext-5'
}
run_test "--check-config duplicate point name: exit 1, 'FILE:5:' names the point" t_duplicate

t_missing_file() {
  run_opsd 15 --check-config "$WORK/no-such-file.yaml"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "message names the file" "$OUT" 'no-such-file\.yaml'
}
run_test "--check-config on a missing file: exit 1, names the file" t_missing_file

t_version_help() {
  run_opsd 10 --version
  expect "--version exit status" "$RC" 0 || return 1
  expect_match "--version output" "$OUT" '0\.1\.0' || return 1
  run_opsd 10 --help
  expect "--help exit status" "$RC" 0 || return 1
  expect_match "--help mentions --check-config" "$OUT" '--check-config' || return 1
  run_opsd 10 --no-such-option
  expect "unknown option exit status ($OUT)" "$RC" 1
}
run_test "--version and --help exit 0; an unknown option exits 1" t_version_help

t_start_bad_config() {
  local f="$WORK/bad-start.yaml"
  printf 'server:\n  listen: 127.0.0.1:18080\n  colour: blue\n' >"$f"
  run_opsd 15 --config "$f"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "message" "$OUT" 'bad-start\.yaml:3:.*colour'
}
run_test "opsd --config with an invalid file: exit 1 with FILE:LINE: reason" t_start_bad_config

t_no_tokens_public() {
  local port f="$WORK/public.yaml" code
  port=$(free_port)
  write_config "$f" "$port" "$WORK/data-public"
  run_opsd 15 --config "$f" --listen "0.0.0.0:$port"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "the error explains (tokens / loopback)" "$OUT" '[Tt]oken|[Ll]oopback|auth' || return 1
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/healthz" 2>/dev/null) || true
  expect "nothing listening afterwards" "$code" 000
}
run_test "opsd --listen 0.0.0.0:PORT without tokens refuses to start (exit 1, clear error)" t_no_tokens_public

t_no_tokens_public_config() {
  local port f="$WORK/public2.yaml"
  port=$(free_port)
  write_config "$f" "$port" "$WORK/data-public2"
  sed -i "s/listen: 127.0.0.1:$port/listen: 0.0.0.0:$port/" "$f"
  run_opsd 15 --config "$f"
  expect "exit status ($OUT)" "$RC" 1 || return 1
  expect_match "the error explains" "$OUT" '[Tt]oken|[Ll]oopback|auth'
}
run_test "server.listen 0.0.0.0 in the file without tokens also refuses (exit 1)" t_no_tokens_public_config

# A real start: the --listen override, the "listening on" line on stdout and in the log.
PORT=$(free_port)
OTHER=$(free_port)
write_config "$WORK/opsd.yaml" "$OTHER" "$WORK/data"
if start_opsd "$WORK/opsd.yaml" --listen "127.0.0.1:$PORT" --data "$WORK/data-override"; then
  ok "opsd starts with --listen and --data overriding the file"
  t_listening() {
    local i
    for ((i = 0; i < 20; i++)); do grep -q "http://127.0.0.1:$PORT/" "$OPSD_STDOUT" && break; sleep 0.1; done
    expect_match "stdout" "$(cat "$OPSD_STDOUT")" "http://127\.0\.0\.1:$PORT/" || return 1
    expect_match "log line" "$(cat "$OPSD_LOG")" \
      "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z +info +[a-z_]+: .*listening on http://127\.0\.0\.1:$PORT/" || return 1
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$OTHER/healthz" 2>/dev/null) || true
    expect "nothing on the port of the file" "$code" 000 || return 1
    [ -d "$WORK/data-override" ] || { fail "--data directory $WORK/data-override was not created"; return 1; }
  }
  run_test "'listening on http://ADDR:PORT/' on stdout and as a log line; --listen/--data used" t_listening

  t_port_in_use() {
    local f="$WORK/second.yaml"
    write_config "$f" "$PORT" "$WORK/data-second"
    run_opsd 20 --config "$f"
    expect "exit status of a second opsd on the same port ($(printf '%s' "$OUT" | tail -c 300))" "$RC" 2
  }
  run_test "port in use: exit status 2" t_port_in_use

  t_data_not_dir() {
    local f="$WORK/third.yaml" port
    port=$(free_port)
    : >"$WORK/a-file"
    write_config "$f" "$port" "$WORK/a-file/data"
    run_opsd 20 --config "$f"
    expect "exit status with a data dir that cannot be created ($(printf '%s' "$OUT" | tail -c 300))" "$RC" 2
  }
  run_test "data directory that cannot be created: exit status 2" t_data_not_dir

  t_sigint() {
    stop_opsd "$OPSD_PID" INT 5
    expect "exit status after SIGINT" "$STOP_STATUS" 0
  }
  run_test "SIGINT: exit status 0 within 5 s" t_sigint
else
  not_ok "opsd starts with --listen and --data overriding the file" "$(cat "$WORK/.reason")"
fi

t_json_log() {
  PORT=$(free_port)
  write_config "$WORK/json.yaml" "$PORT" "$WORK/data-json"
  start_opsd "$WORK/json.yaml" --log-format json || return 1
  local log=$OPSD_LOG
  stop_opsd "$OPSD_PID" TERM 5
  expect "exit status" "$STOP_STATUS" 0 || return 1
  node -e '
    const lines = require("fs").readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean);
    if (!lines.length) { console.log("no log lines"); process.exit(1); }
    let listening = false;
    for (const l of lines) {
      if (/^(==\d+==|SUMMARY|Direct leak|Indirect leak|\s+#\d)/.test(l)) continue; // sanitizer output
      let o;
      try { o = JSON.parse(l); } catch { console.log("not JSON: " + l); process.exit(1); }
      for (const k of ["ts", "level", "mod", "msg"]) if (!(k in o)) { console.log("no " + k + ": " + l); process.exit(1); }
      if (/listening on http:/.test(o.msg)) listening = true;
    }
    if (!listening) { console.log("no listening line"); process.exit(1); }
  ' "$log" >"$WORK/json-check.out" || { fail "$(cat "$WORK/json-check.out")"; return 1; }
}
run_test "--log-format json: every log line is a JSON object with ts, level, mod, msg" t_json_log

finish
