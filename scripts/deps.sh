#!/usr/bin/env bash
# Installs the Debian packages opsd needs to build, test and benchmark, when missing.
# Usage: scripts/deps.sh [build|test|bench]   (each set includes the previous one)
set -euo pipefail
want=${1:-build}

build_pkgs=(build-essential cmake pkg-config libuv1-dev libwebsockets-dev libyaml-dev
            libjansson-dev libsqlite3-dev libcurl4-openssl-dev libssl-dev libzstd-dev
            librabbitmq-dev libmodbus-dev libmosquitto-dev libprotobuf-c-dev protobuf-c-compiler
            libnats-dev)
test_pkgs=(libcmocka-dev curl nodejs npm openssl clang libclang-rt-14-dev mosquitto rabbitmq-server chromium
           nats-server python3-pymodbus python3-serial socat)
bench_pkgs=()

pkgs=("${build_pkgs[@]}")
case "$want" in
  build) ;;
  test) pkgs+=("${test_pkgs[@]}") ;;
  bench) pkgs+=("${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|bench]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  # nodejs/npm may come from outside Debian on some machines: accept the commands.
  case "$p" in
    nodejs) command -v node >/dev/null && continue ;;
    npm) command -v npm >/dev/null && continue ;;
  esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
