#!/usr/bin/env bash
# Builds the fuzz targets and runs each for a bounded time, starting from its seed corpus
# (fuzz/corpus/<target>/, never modified: new inputs go to fuzz/build/corpus/<target>/).
# Usage: fuzz/run.sh [SECONDS] [TARGET...]    (default 20 seconds each, every target)
# Exits 1 when a target crashed, leaked, timed out or broke a checked contract; the input
# that did it is saved as fuzz/build/artifacts/<target>/crash-* (replay: fuzz/build/<target> FILE).
# OPSD_KNOWN_BUGS=1 also enables the checks that known, still open bugs fail.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
out=${FUZZ_BUILD:-fuzz/build}

fuzz/build.sh "$@" || { echo "fuzz: build failed"; exit 1; }

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*.c; do targets+=("$(basename "$f" .c)"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
failed=()
for t in "${targets[@]}"; do
  work="$out/corpus/$t"
  arts="$out/artifacts/$t"
  mkdir -p "$work" "$arts"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  echo "== fuzz $t (${secs}s)"
  log="$out/$t.log"
  "$out/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
    -print_final_stats=1 -artifact_prefix="$arts/" "${dict[@]}" "$work" "fuzz/corpus/$t" \
    >"$log" 2>&1
  rc=$?
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' "$log" | sed 's/^/   /'
  if [ $rc -ne 0 ]; then
    echo "fuzz: $t FAILED (exit $rc); the end of $log:"
    grep -vE '^#[0-9]+ +(NEW|REDUCE|pulse|INITED)' "$log" | tail -40
    ls "$arts" | sed "s|^|   artifact: $arts/|"
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets ran ${secs}s each without a crash"
