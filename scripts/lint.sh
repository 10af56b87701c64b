#!/usr/bin/env bash
# Checks what the compiler and clang-format do not: banned functions, the layer rule for
# includes, and a comment at the top of every C file. Prints each problem; exit 1 if any.
set -uo pipefail
cd "$(dirname "$0")/.."
bad=0
report() { echo "lint: $*"; bad=1; }

# Banned: unbounded or unchecked string and number functions.
while IFS= read -r hit; do
  report "$hit: use snprintf/buf_printf, memcpy with a length, or parse_int64/parse_double"
done < <(grep -nE '\b(sprintf|vsprintf|strcpy|strcat|gets|atoi|atol|atoll|atof)\s*\(' \
           $(git ls-files 'src/*.c' 'src/*.h') 2>/dev/null)

# Layers: core <- live <- history, alarm, registry, journal, cluster <- drivers, api <- main. A layer
# includes only layers below it; the modules beside history do not include each other.
check_layer() { # folder, forbidden include prefixes...
  local dir=$1; shift
  for f in $(git ls-files "src/$dir/*.c" "src/$dir/*.h"); do
    for up in "$@"; do
      grep -nE "#include \"$up/" "$f" | while IFS= read -r l; do
        echo "lint: $f:${l%%:*}: src/$dir must not include $up/ (layers point down)"
      done
    done
  done
}
layer_out=$( check_layer core live history alarm registry journal cluster drivers api opcua cli
             check_layer live history alarm registry journal cluster drivers api opcua cli
             check_layer history alarm registry journal cluster drivers api opcua cli
             check_layer alarm history registry journal cluster drivers api opcua cli
             check_layer registry history alarm journal cluster drivers api opcua cli
             check_layer journal history alarm registry cluster drivers api opcua cli
             check_layer cluster history alarm registry journal drivers api opcua cli
             check_layer drivers history alarm registry journal cluster api opcua cli
             check_layer api drivers cluster opcua cli
             check_layer opcua api drivers cluster history alarm registry journal cli )
[ -n "$layer_out" ] && { echo "$layer_out"; bad=1; }

# Every C file starts with a comment saying what it does.
for f in $(git ls-files 'src/*.c' 'src/*.h' 'tests/unit/*.c' 'tests/unit/*/*.c' 'bench/*.c' 'fuzz/*.c'); do
  head -c 2 "$f" | grep -q '/\*' || report "$f: start with a comment that says what the file does"
done

[ $bad -eq 0 ] && echo "lint: ok"
exit $bad
