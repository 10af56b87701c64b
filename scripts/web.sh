#!/usr/bin/env bash
# Builds the web UI (web/, Vite + TypeScript) into web/dist, which opsd serves at / (see
# docs/API.md "Web UI"). Runs `npm ci` when web/node_modules is missing or older than
# package-lock.json, and builds only when a source is newer than web/dist/index.html.
# Usage: scripts/web.sh [--if-npm]   (--if-npm: without npm, say so and exit 0; opsd then
#                                     shows its plain API index at /)
set -euo pipefail
cd "$(dirname "$0")/../web"
if ! command -v npm >/dev/null; then
  if [ "${1:-}" = "--if-npm" ]; then
    echo "web: npm is not installed: the web UI is not built (opsd shows its API index at /)" >&2
    exit 0
  fi
  echo "web: npm is needed to build the web UI (scripts/deps.sh test installs it)" >&2
  exit 1
fi
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "web: installing npm packages (npm ci)" >&2
  npm ci --no-audit --no-fund --loglevel=error >/dev/null
fi
if [ -f dist/index.html ] &&
   [ -z "$(find index.html src vite.config.ts tsconfig.json package-lock.json -newer dist/index.html -print -quit)" ]; then
  exit 0
fi
echo "web: building web/dist" >&2
npm run --silent build >/dev/null
test -f dist/index.html
