#!/usr/bin/env bash
# A local opsd cluster in one command: three NATS servers with JetStream, clustered on
# loopback, and three opsd nodes (a, b, c) sharing the demo plant (etc/demo.yaml). Prints the
# URL of each node; Ctrl-C stops everything it started. State under ./var/cluster (kept, so a
# second run resumes; remove it for a fresh start). See docs/cluster.md.
#
# Usage: scripts/cluster.sh [--no-build]
# Environment: first ports of the three NATS servers NATS_PORT (clients, default 4222),
# NATS_ROUTE_PORT (6222), NATS_HTTP_PORT (monitoring, 8222); OPSD_PORT (first node, 8081);
# BUILD (the build folder, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD:-build}
nats_port=${NATS_PORT:-4222}
route_port=${NATS_ROUTE_PORT:-6222}
http_port=${NATS_HTTP_PORT:-8222}
opsd_port=${OPSD_PORT:-8081}
dir="$root/var/cluster"

if [ "${1:-}" != "--no-build" ]; then
  scripts/deps.sh build
  command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || scripts/deps.sh test
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPSD_TESTS=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi
nats_bin=$(command -v nats-server || echo /usr/sbin/nats-server)
[ -x "$nats_bin" ] || { echo "cluster: nats-server not found (scripts/deps.sh test installs it)" >&2; exit 1; }

mkdir -p "$dir"
pids=()
stop_all() {
  trap - INT TERM EXIT
  echo "cluster: stopping" >&2
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  exit 0
}
trap stop_all INT TERM EXIT

routes=""
for i in 0 1 2; do routes+="${routes:+, }nats://127.0.0.1:$((route_port + i))"; done
urls=""
for i in 0 1 2; do
  p=$((nats_port + i))
  urls+="${urls:+, }nats://127.0.0.1:$p"
  mkdir -p "$dir/nats$i"
  cat >"$dir/nats$i/nats.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:$p
http: 127.0.0.1:$((http_port + i))
jetstream { store_dir: "$dir/nats$i/js" }
cluster { name: opsd-local, listen: 127.0.0.1:$((route_port + i)), routes: [$routes] }
EOF
  "$nats_bin" -c "$dir/nats$i/nats.conf" >"$dir/nats$i/nats.log" 2>&1 &
  pids+=($!)
done
for i in 0 1 2; do
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$((http_port + i))/healthz?js-enabled-only=true" >/dev/null && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$((http_port + i))/healthz?js-enabled-only=true" >/dev/null ||
    { echo "cluster: NATS server $i did not start, see $dir/nats$i/nats.log" >&2; exit 1; }
done
echo "cluster: NATS with JetStream at $urls" >&2

k=0
for n in a b c; do
  port=$((opsd_port + k))
  # The demo plant, this node's address and data, and the cluster: section.
  sed -e "s|^  listen: .*|  listen: 127.0.0.1:$port|" -e "s|^  data_dir: .*|  data_dir: $dir/data-$n|" \
    etc/demo.yaml >"$dir/$n.yaml"
  cat >>"$dir/$n.yaml" <<EOF

cluster:
  name: local
  node: $n
  servers: [$urls]
  lease: 5s
EOF
  "$build/opsd" --config "$dir/$n.yaml" >"$dir/$n.out" 2>"$dir/$n.log" &
  pids+=($!)
  k=$((k + 1))
done
k=0
for n in a b c; do
  port=$((opsd_port + k))
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
    sleep 0.2
  done
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null ||
    { echo "cluster: node $n did not start, see $dir/$n.log" >&2; exit 1; }
  echo "node $n: http://127.0.0.1:$port/   (log: $dir/$n.log)"
  k=$((k + 1))
done
echo "cluster: try  $build/opsctl --url http://127.0.0.1:$opsd_port cluster status ; Ctrl-C stops everything" >&2
wait -n "${pids[@]}" || true
echo "cluster: a process exited; see the logs under $dir" >&2
