# Shell helpers for the opsd integration tests. Sourced by tests/integration/t_*.sh.
#
# Every test file gets its own work directory (config, data dir, logs) and its own opsd on a
# free loopback port; the EXIT trap stops every opsd the file started (by pid) and removes the
# work directory. Each check prints one line: "ok - NAME" or "not ok - NAME: REASON".
#
# Environment (set by run.sh): OPSD, OPSCTL (absolute paths), IT_DIR (this folder),
# IT_OUT (folder for logs of failed files), IT_PIDS (folder where each started opsd leaves
# its pid, so run.sh can stop leftovers of a file that was killed).

set -u

IT_DIR=${IT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
: "${OPSD:?OPSD must point to the opsd binary}"
: "${OPSCTL:?OPSCTL must point to the opsctl binary}"
IT_OUT=${IT_OUT:-$IT_DIR/out}
IT_NAME=${IT_NAME:-$(basename "$0" .sh)}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/opsd-it-$IT_NAME.XXXXXX")
# Tell run.sh where it is, so it can keep the logs and remove it if this file gets killed.
[ -n "${IT_PIDS:-}" ] && echo "$WORK" >"$IT_PIDS/work.$IT_NAME"
NPASS=0
NFAIL=0
OPSD_PIDS=()          # every opsd started by this file
OPSD_PID=             # the current one
OPSD_LOG=             # its standard error
OPSD_STDOUT=          # its standard output
PORT=
BASE=
AUTH=()               # extra curl arguments, e.g. (-H "Authorization: Bearer x")

# --- results -------------------------------------------------------------------------------
ok() { echo "ok - $1"; NPASS=$((NPASS + 1)); }
not_ok() { echo "not ok - $1: $(printf '%s' "$2" | tr '\n' ' ' | cut -c1-600)"; NFAIL=$((NFAIL + 1)); }
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

# Fail the current check with a reason (used inside a test function).
fail() { printf '%s' "$*" >"$WORK/.reason"; return 1; }

# expect DESC ACTUAL EXPECTED: equality check inside a test function.
expect() {
  if [ "$2" != "$3" ]; then
    fail "$1: expected '$3', got '$2'"
    return 1
  fi
}

# expect_match DESC ACTUAL REGEX (extended regular expression)
expect_match() {
  if ! printf '%s' "$2" | grep -Eq -- "$3"; then
    fail "$1: expected to match /$3/, got '$(printf '%s' "$2" | head -c 400)'"
    return 1
  fi
}

# run_test NAME FUNCTION [ARGS...]: runs the function in a subshell, prints the result line.
run_test() {
  local name=$1
  shift
  rm -f "$WORK/.reason"
  if ("$@"); then
    ok "$name"
  else
    local reason="failed"
    [ -s "$WORK/.reason" ] && reason=$(cat "$WORK/.reason")
    not_ok "$name" "$reason"
  fi
}

# --- JSON ----------------------------------------------------------------------------------
# jv EXPR [FILE]: evaluates the JavaScript expression EXPR with `d` bound to the parsed JSON
# of FILE (default: the last response body). Strings print raw, everything else as JSON;
# a body that is not JSON prints "<not json>".
jv() {
  node "$IT_DIR/lib/jv.mjs" "$1" "${2:-$WORK/body}"
}

# --- HTTP ----------------------------------------------------------------------------------
# req METHOD PATH [BODY]: sets STATUS; the body is in $WORK/body (and BODY).
# BODY starting with @ names a file. Bounded by --max-time.
req() {
  local method=$1 path=$2
  local args=(-s -S -o "$WORK/body" -w '%{http_code}' --max-time "${REQ_TIMEOUT:-20}" -X "$method")
  if [ $# -ge 3 ]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$3")
  fi
  STATUS=$(curl "${args[@]}" ${AUTH[@]+"${AUTH[@]}"} "$BASE$path" 2>"$WORK/curl.err") || true
  [ -n "$STATUS" ] || STATUS=000
  BODY=$(head -c 2000 "$WORK/body" 2>/dev/null || true)
}

# expect_status DESC WANT: checks STATUS after req.
expect_status() {
  if [ "$STATUS" != "$2" ]; then
    fail "$1: expected HTTP $2, got $STATUS $(head -c 300 "$WORK/body" 2>/dev/null) $(head -c 200 "$WORK/curl.err" 2>/dev/null)"
    return 1
  fi
}

# expect_error DESC STATUS CODE: checks an error answer {"error":{"code":CODE,"message":...}}.
expect_error() {
  expect_status "$1" "$2" || return 1
  local code msg
  code=$(jv 'd.error && d.error.code')
  expect "$1: error.code" "$code" "$3" || return 1
  msg=$(jv 'typeof (d.error && d.error.message)')
  expect "$1: error.message is a string" "$msg" "string" || return 1
}

# --- ports, config, daemon ----------------------------------------------------------------
free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{const p=s.address().port;s.close(()=>console.log(p))})'
}

# write_config FILE PORT DATADIR [EXTRA_SERVER_YAML] [EXTRA_YAML]
# EXTRA_SERVER_YAML goes inside server: (indent 2); EXTRA_YAML is appended after the points list
# (so '  - {name: ...}' adds points, and a top-level key adds a section).
# The standard test configuration: 100 simulated tanks, 10 external doubles and one writable
# point of each other type (113 points).
write_config() {
  local file=$1 port=$2 data=$3 server_extra=${4:-} extra=${5:-}
  cat >"$file" <<EOF
server:
  listen: 127.0.0.1:$port
  data_dir: $data
  limits: {slow_client_timeout: 2s, max_subscriptions: 64}
$server_extra
drivers:
  - type: simulator
    name: plant
    points:
      - {name: "tank1-{0000..0099}", type: double, pattern: sine, period: 200ms, min: 0, max: 100, resolution: 0.01}
points:
  - {name: "ext-{000..009}", type: double, unit: bar, writable: true}
  - {name: "flag", type: bool, writable: true}
  - {name: "count", type: int, writable: true}
  - {name: "label", type: string, writable: true}
$extra
EOF
}

# wait_healthy URL SECONDS PID: polls URL/healthz until 200; fails when PID exits.
wait_healthy() {
  local url=$1 secs=$2 pid=$3 i code
  for ((i = 0; i < secs * 10; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$url/healthz" 2>/dev/null) || true
    [ "$code" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# start_opsd CONFIG [ARGS...]: starts opsd in the background on $PORT, waits for /healthz.
# Sets OPSD_PID, OPSD_LOG, OPSD_STDOUT, BASE. Returns 1 (with the log tail in the reason)
# when it does not become healthy within 30 s. A small waiter records opsd's exit status in
# $WORK/opsd.N.rc, so stop_opsd can read it from any subshell.
start_opsd() {
  local config=$1
  shift
  local n=${#OPSD_PIDS[@]} i
  while [ -e "$WORK/opsd.$n.pid" ]; do n=$((n + 1)); done
  OPSD_LOG="$WORK/opsd.$n.log"
  OPSD_STDOUT="$WORK/opsd.$n.out"
  (
    trap - EXIT TERM INT
    "$OPSD" --config "$config" "$@" >"$OPSD_STDOUT" 2>"$OPSD_LOG" &
    echo $! >"$WORK/opsd.$n.pid"
    wait $!
    echo $? >"$WORK/opsd.$n.rc"
  ) &
  for ((i = 0; i < 50; i++)); do [ -s "$WORK/opsd.$n.pid" ] && break; sleep 0.05; done
  OPSD_PID=$(cat "$WORK/opsd.$n.pid")
  OPSD_PIDS+=("$OPSD_PID")
  [ -n "${IT_PIDS:-}" ] && echo "$OPSD_PID" >"$IT_PIDS/$OPSD_PID"
  BASE="http://127.0.0.1:$PORT"
  if ! wait_healthy "$BASE" 30 "$OPSD_PID"; then
    fail "opsd did not become healthy on $BASE: $(tail -c 600 "$OPSD_LOG")"
    return 1
  fi
}

# rc_file PID: the file where the waiter of that opsd writes its exit status.
rc_file() {
  local f
  for f in "$WORK"/opsd.*.pid; do
    [ "$(cat "$f" 2>/dev/null)" = "$1" ] && { echo "${f%.pid}.rc"; return; }
  done
  echo "$WORK/none.rc"
}

# stop_opsd [PID] [SIGNAL] [SECONDS]: sends SIGNAL (TERM), waits; sets STOP_STATUS
# (the exit status, or "timeout" when it had to be killed).
stop_opsd() {
  local pid=${1:-$OPSD_PID} sig=${2:-TERM} secs=${3:-10} i rcf
  STOP_STATUS=
  [ -n "$pid" ] || return 0
  rcf=$(rc_file "$pid")
  kill -0 "$pid" 2>/dev/null && kill "-$sig" "$pid" 2>/dev/null
  for ((i = 0; i < secs * 10; i++)); do
    [ -s "$rcf" ] && break
    sleep 0.1
  done
  if [ -s "$rcf" ]; then
    STOP_STATUS=$(cat "$rcf")
  else
    kill -KILL "$pid" 2>/dev/null
    for ((i = 0; i < 20; i++)); do [ -s "$rcf" ] && break; sleep 0.1; done
    STOP_STATUS=timeout
  fi
  rm -f "${IT_PIDS:-/nonexistent}/$pid"
}

# sanitizer_report FILE: prints the first sanitizer report line in FILE, if any.
sanitizer_report() {
  grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer' "$1" 2>/dev/null
}

# check_logs: one result line per file: no sanitizer report in any opsd log of this file.
check_logs() {
  local f rep=
  for f in "$WORK"/opsd.*.log; do
    [ -e "$f" ] || continue
    rep=$(sanitizer_report "$f") && break
  done
  if [ -n "$rep" ]; then
    not_ok "$IT_NAME: no sanitizer report in the opsd logs" "$rep (see $IT_OUT/$IT_NAME/)"
  else
    ok "$IT_NAME: no sanitizer report in the opsd logs"
  fi
}

# all_pids: every opsd this file started (also those started inside a test's subshell).
all_pids() {
  local f
  for f in "$WORK"/opsd.*.pid; do
    [ -s "$f" ] && cat "$f"
  done
}

stop_all() {
  local pid
  for pid in $(all_pids); do
    [ -s "$(rc_file "$pid")" ] || stop_opsd "$pid" TERM 5
    rm -f "${IT_PIDS:-/nonexistent}/$pid"
  done
}

cleanup() {
  stop_all
  if [ "$NFAIL" -gt 0 ] || [ -n "${IT_KEEP:-}" ]; then
    mkdir -p "$IT_OUT/$IT_NAME"
    cp -r "$WORK"/. "$IT_OUT/$IT_NAME/" 2>/dev/null
    rm -rf "$IT_OUT/$IT_NAME"/data* 2>/dev/null
  fi
  rm -rf "$WORK"
  rm -f "${IT_PIDS:-/nonexistent}/work.$IT_NAME"
}

# finish: the last line of every test file.
finish() {
  stop_all
  check_logs
  [ "$NFAIL" -eq 0 ]
  exit $?
}

trap cleanup EXIT
trap 'exit 143' TERM INT
