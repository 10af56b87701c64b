#!/usr/bin/env bash
# Builds opsd and runs it on the bundled demo configuration (a simulated plant of 2,000+
# points with alarms, a device registry and a message journal, data under ./var, listening on
# http://127.0.0.1:8080/). Once opsd listens it starts scripts/demo-feed.mjs (with node): the
# outside world that feeds the ext-* pressures, the registry (a DMI plugin simulator) and the
# journal (NServiceBus-shaped messages). Ctrl-C stops both.
# Extra arguments go to opsd, e.g. scripts/demo.sh --listen 127.0.0.1:9090
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPSD_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
scripts/web.sh --if-npm || echo "demo: the web UI was not built; / shows the API index" >&2
# The hint comes once opsd listens, with the address it listens on (--listen may change it).
build/opsd --config etc/demo.yaml --data ./var "$@" | {
  feed=
  trap '[ -n "$feed" ] && kill "$feed" 2>/dev/null' EXIT
  while IFS= read -r line; do
    printf '%s\n' "$line"
    case "$line" in
      *" listening on "*)
        url=${line##* listening on }
        if command -v node >/dev/null; then
          node scripts/demo-feed.mjs "$url" &
          feed=$!
        else
          echo "demo: node is not installed: no ext-* values, devices or messages (scripts/deps.sh test installs it)" >&2
        fi
        echo "demo: open ${url}#/display?name=plant (the plant display; the web UI at $url), or try  curl ${url}api/v1/status  or  build/opsctl --url ${url%/} watch 'tank1-000*'" >&2
        ;;
    esac
  done
}
exit "${PIPESTATUS[0]}"
