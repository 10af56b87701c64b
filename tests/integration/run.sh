#!/usr/bin/env bash
# Black-box integration tests: each test file starts its own opsd (on a free loopback port,
# with its own config and data dir in a temp dir) and talks to it with curl, opsctl and the
# npm WebSocket client `ws`.
#
# Usage: tests/integration/run.sh BUILD_DIR [NAME...]
#   BUILD_DIR  the build folder holding opsd and opsctl (e.g. build-asan)
#   NAME       run only the test files whose name contains NAME (e.g. stream, t_rest)
# Environment: IT_FILE_TIMEOUT (seconds per file, default 90, or what a line
# "// it-timeout: N" or "# it-timeout: N" in the file asks for), IT_KEEP=1 keeps every
# file's logs under tests/integration/out/ (logs of files with failures are always kept).
#
# Prints one line per test ("ok - name" / "not ok - name: reason"), diagnostics as "# ...",
# and ends with one line "N passed, N failed". Exit status 1 when anything failed.

set -u
IT_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$IT_DIR/../.." && pwd)

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [NAME...]" >&2
  exit 2
fi
BUILD=$1
shift
if [ ! -d "$BUILD" ] && [ -d "$ROOT/$BUILD" ]; then BUILD="$ROOT/$BUILD"; fi
BUILD=$(cd "$BUILD" 2>/dev/null && pwd) || BUILD=$1

passed=0
failed=0
closing() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit $?
}
setup_fail() {
  echo "not ok - setup: $1"
  failed=$((failed + 1))
  closing
}

export OPSD="$BUILD/opsd" OPSCTL="$BUILD/opsctl"
[ -x "$OPSD" ] || setup_fail "no executable opsd in $BUILD"
[ -x "$OPSCTL" ] || setup_fail "no executable opsctl in $BUILD"
command -v node >/dev/null || setup_fail "node is not installed"
command -v curl >/dev/null || setup_fail "curl is not installed"

if [ ! -d "$IT_DIR/node_modules/ws" ]; then
  echo "# installing the npm packages of tests/integration (npm ci)"
  if ! (cd "$IT_DIR" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>"$IT_DIR/.npm-ci.err"); then
    setup_fail "npm ci failed: $(tail -c 400 "$IT_DIR/.npm-ci.err" | tr '\n' ' ')"
  fi
  rm -f "$IT_DIR/.npm-ci.err"
fi

export IT_DIR
export IT_OUT="$IT_DIR/out"
rm -rf "$IT_OUT"
mkdir -p "$IT_OUT"
IT_PIDS=$(mktemp -d "${TMPDIR:-/tmp}/opsd-it-pids.XXXXXX")
export IT_PIDS

# Stops any opsd a test file left running (a file killed by its timeout cannot clean up).
# Only the pids the test files recorded for the daemons they started are touched.
reap() {
  local f pid w
  for f in "$IT_PIDS"/*; do
    [ -e "$f" ] || continue
    pid=$(basename "$f")
    case "$pid" in
      work.*)
        # The work dir of a file that could not clean up: keep its logs, remove it.
        w=$(cat "$f")
        case "$w" in
          */opsd-it-*)
            mkdir -p "$IT_OUT/${pid#work.}"
            cp -r "$w"/. "$IT_OUT/${pid#work.}/" 2>/dev/null
            rm -rf "$IT_OUT/${pid#work.}"/data* "$w"
            ;;
        esac
        rm -f "$f"
        continue
        ;;
    esac
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$OPSD"; then
      kill -TERM "$pid" 2>/dev/null
      sleep 1
      kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$f"
  done
}
child=
on_signal() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null
  sleep 1
  reap
  rm -rf "$IT_PIDS"
  echo "not ok - interrupted"
  failed=$((failed + 1))
  closing
}
trap on_signal INT TERM

files=()
for f in "$IT_DIR"/t_*.sh "$IT_DIR"/t_*.mjs; do
  [ -e "$f" ] || continue
  if [ $# -gt 0 ]; then
    m=
    for want in "$@"; do case "$(basename "$f")" in *"$want"*) m=1 ;; esac; done
    [ -n "$m" ] || continue
  fi
  files+=("$f")
done
[ ${#files[@]} -gt 0 ] || setup_fail "no test file matches: $*"

start=$(date +%s)
for f in "${files[@]}"; do
  name=$(basename "$f")
  name=${name%.*}
  case "$f" in
    *.sh) cmd=(bash "$f") ;;
    *.mjs) cmd=(node "$f") ;;
  esac
  t0=$(date +%s)
  ftimeout=${IT_FILE_TIMEOUT:-$(sed -n -E 's@^(//|#) it-timeout: ([0-9]+)$@\2@p' "$f" | head -1)}
  ftimeout=${ftimeout:-90}
  echo "# $name"
  fpass=0
  ffail=0
  while IFS= read -r line; do
    case "$line" in
      "ok - "*) fpass=$((fpass + 1)); echo "$line" ;;
      "not ok - "*) ffail=$((ffail + 1)); echo "$line" ;;
      "#"*) echo "$line" ;;
      *) echo "# $line" ;;
    esac
  done < <(cd "$IT_DIR" && IT_NAME=$name exec timeout -k 5 "$ftimeout" "${cmd[@]}" 2>"$IT_OUT/$name.stderr")
  child=$!
  wait "$child"
  rc=$?
  child=
  if [ "$rc" -ne 0 ] && [ "$ffail" -eq 0 ]; then
    why="exited with status $rc"
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && why="killed after $ftimeout s (file timeout)"
    echo "not ok - $name: $why; stderr: $(tail -c 300 "$IT_OUT/$name.stderr" | tr '\n' ' ')"
    ffail=$((ffail + 1))
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "not ok - $name: killed after $ftimeout s (file timeout)"
    ffail=$((ffail + 1))
  fi
  [ -s "$IT_OUT/$name.stderr" ] || rm -f "$IT_OUT/$name.stderr"
  reap
  passed=$((passed + fpass))
  failed=$((failed + ffail))
  echo "# $name: $fpass ok, $ffail not ok ($(($(date +%s) - t0)) s)"
done
rm -rf "$IT_PIDS"
echo "# all files in $(($(date +%s) - start)) s; logs of failed files in $IT_OUT"
closing
