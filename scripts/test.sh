#!/usr/bin/env bash
# Builds opsd with AddressSanitizer and UndefinedBehaviorSanitizer (warnings are errors) and
# runs every test: cmocka unit tests, integration tests against the real daemon with real
# clients, the short form of the fault harness (bench/fault), and a short run of each fuzz
# target. Installs what it needs (Debian packages, npm packages for the test clients). Ends
# with one line: "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test || { echo "test: installing dependencies failed"; exit 1; }

build=build-asan
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DOPSD_SANITIZE=ON -DOPSD_WERROR=ON >/dev/null &&
  cmake --build "$build" -j"$(nproc)" || { echo "test: build failed"; exit 1; }
scripts/web.sh || { echo "test: building the web UI (web/) failed"; exit 1; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
passed=0
failed=0

echo "== lint"
if scripts/lint.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); fi

echo "== unit tests"
out=$(cd "$build" && ctest --output-on-failure -j2 2>&1)
echo "$out"
if summary=$(echo "$out" | grep -E '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+'); then
  total=$(echo "$summary" | sed -E 's/.* out of ([0-9]+).*/\1/')
  bad=$(echo "$summary" | sed -E 's/.*passed, ([0-9]+) tests failed.*/\1/')
  passed=$((passed + total - bad)); failed=$((failed + bad))
else
  failed=$((failed + 1))
fi

# Adds the closing "N passed, N failed" of a runner's output ($1, its exit status $2) to the
# totals; a failing runner without a failure in that line counts as one failure.
add_counts() {
  local line
  if line=$(echo "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -1); then
    passed=$((passed + $(echo "$line" | cut -d' ' -f1))); failed=$((failed + $(echo "$line" | cut -d' ' -f3)))
  fi
  [ "$2" -ne 0 ] && ! echo "$1" | grep -qE '^[0-9]+ passed, [1-9][0-9]* failed' && failed=$((failed + 1))
}

echo "== integration tests"
if [ -x tests/integration/run.sh ]; then
  out=$(tests/integration/run.sh "$build" 2>&1); rc=$?
  echo "$out"
  add_counts "$out" "$rc"
fi

echo "== fault harness, short form (bench/fault)"
if [ -x bench/fault/run.sh ]; then
  out=$(bench/fault/run.sh --short "$build" 2>&1); rc=$?
  echo "$out"
  add_counts "$out" "$rc"
fi

echo "== fuzz targets (short run)"
if [ -x fuzz/run.sh ]; then
  if fuzz/run.sh "${FUZZ_SECONDS:-10}"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
