#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/<target>.c) with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, against opsd's sources, into fuzz/build/ (or $FUZZ_BUILD).
# Usage: fuzz/build.sh [TARGET...]     (default: every fuzz/*.c)
# Needs clang with its libFuzzer runtime (Debian: clang libclang-rt-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${FUZZ_BUILD:-fuzz/build}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found: apt-get install clang libclang-rt-dev" >&2
  exit 2
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*.c; do targets+=("$(basename "$f" .c)"); done
fi

# The sources the targets may need: everything but main.c and the command-line client.
mapfile -t srcs < <(ls src/*/*.c src/config.c | grep -v '^src/cli/')
pkgs=(libuv libwebsockets yaml-0.1 jansson sqlite3 libcurl libzstd librabbitmq libmodbus
      libmosquitto libprotobuf-c libcrypto libnats)
# shellcheck disable=SC2207
pc_cflags=($(pkg-config --cflags "${pkgs[@]}"))
# shellcheck disable=SC2207
pc_libs=($(pkg-config --libs "${pkgs[@]}"))
cflags=(-g -O1 -std=c11 -D_GNU_SOURCE '-DOPSD_VERSION="fuzz"' -Isrc "${pc_cflags[@]}"
        -fno-omit-frame-pointer -fno-sanitize-recover=undefined -Wall -Wno-unused-parameter)

mkdir -p "$out/obj"
# Library objects: instrumented for coverage, without libFuzzer's main.
objs=()
for s in "${srcs[@]}"; do
  o="$out/obj/$(echo "${s#src/}" | tr / _ | sed 's/\.c$/.o/')"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find src -name '*.h' -newer "$o" -print -quit)" ]; then
    "$cc" "${cflags[@]}" -fsanitize=fuzzer-no-link,address,undefined -c "$s" -o "$o"
  fi
  objs+=("$o")
done

for t in "${targets[@]}"; do
  [ -f "fuzz/$t.c" ] || { echo "fuzz: no target fuzz/$t.c" >&2; exit 2; }
  "$cc" "${cflags[@]}" -fsanitize=fuzzer,address,undefined "fuzz/$t.c" "${objs[@]}" \
    "${pc_libs[@]}" -lm -lpthread -o "$out/$t"
  echo "fuzz: built $out/$t"
done
