#!/usr/bin/env bash
# The web UI's static files (src/api/static.c) with curl, against a UI directory made here:
# / and /ui/ answer index.html, content types by extension, ETag and If-None-Match (304),
# Cache-Control (immutable assets/, no-cache for the rest), HEAD, 404 for missing files and
# directories, path traversal refused (.., encoded dots and slashes, backslashes, hidden
# files, a symlink out of the directory), the UI public while the API keeps its tokens, a
# rebuilt file picked up at once, a file over the size cap, and server.ui_dir off or wrong
# (the API index at /). docs/API.md "Web UI".
. "$(dirname "$0")/lib/lib.sh"

UI="$WORK/ui"
mkdir -p "$UI/assets" "$UI/sub"
printf '<!doctype html><title>opsd test ui</title><p>INDEX-MARKER</p>\n' >"$UI/index.html"
printf 'console.log("app");\n' >"$UI/assets/app-Ab12_x.js"
printf 'body{color:red}\n' >"$UI/assets/app-Cd34.css"
printf '<svg xmlns="http://www.w3.org/2000/svg"/>\n' >"$UI/favicon.svg"
printf 'plain\n' >"$UI/sub/notes.unknownext"
printf 'HIDDEN-MARKER\n' >"$UI/.hidden"
printf 'SECRET-MARKER\n' >"$WORK/secret.txt"
ln -s "$WORK/secret.txt" "$UI/assets/leak.txt"
truncate -s 33M "$UI/assets/huge.bin"

PORT=$(free_port)
write_config "$WORK/opsd.yaml" "$PORT" "$WORK/data" "  ui_dir: $UI
  auth:
    tokens:
      - {name: look, token: \"view-tok\", role: viewer}"
if ! start_opsd "$WORK/opsd.yaml"; then
  not_ok "web static: opsd starts with server.ui_dir" "$(cat "$WORK/.reason")"
  finish
fi
ok "web static: opsd starts with server.ui_dir"

# head_of PATH [curl args...]: the answer's headers (lower-case names) in $WORK/head, body in $WORK/body.
head_of() {
  local path=$1
  shift
  rm -f "$WORK/body"; : >"$WORK/body"
  STATUS=$(curl -s -S --max-time 10 --path-as-is -D "$WORK/head" -o "$WORK/body" -w '%{http_code}' "$@" "$BASE$path" 2>"$WORK/curl.err") || true
  tr -d '\r' <"$WORK/head" | tr 'A-Z' 'a-z' >"$WORK/head.l"
}
hdr() { sed -n "s/^$1: //p" "$WORK/head.l" | head -1; }

t_index() {
  local p
  for p in / /ui /ui/; do
    head_of "$p"
    expect "GET $p status" "$STATUS" 200 || return 1
    expect "GET $p content-type" "$(hdr content-type)" "text/html; charset=utf-8" || return 1
    expect_match "GET $p body" "$(cat "$WORK/body")" INDEX-MARKER || return 1
    expect "GET $p cache-control" "$(hdr cache-control)" "no-cache" || return 1
    expect_match "GET $p etag" "$(hdr etag)" '^"[0-9a-f]+-[0-9a-f]+"$' || return 1
  done
}
run_test "web static: / and /ui/ answer index.html (no-cache, ETag) without a token" t_index

t_types() {
  local spec path want
  for spec in "/ui/assets/app-Ab12_x.js|text/javascript; charset=utf-8" "/ui/assets/app-Cd34.css|text/css; charset=utf-8" \
              "/ui/favicon.svg|image/svg+xml" "/ui/sub/notes.unknownext|application/octet-stream" \
              "/ui/index.html|text/html; charset=utf-8"; do
    path=${spec%%|*}
    want=${spec#*|}
    head_of "$path"
    expect "GET $path status" "$STATUS" 200 || return 1
    expect "GET $path content-type" "$(hdr content-type)" "$want" || return 1
    cmp -s "$WORK/body" "$UI/${path#/ui/}" || { fail "GET $path: the body differs from the file"; return 1; }
  done
  head_of /ui/assets/app-Ab12_x.js
  expect "assets/ cache-control" "$(hdr cache-control)" "public, max-age=31536000, immutable" || return 1
  head_of /ui/favicon.svg
  expect "other files' cache-control" "$(hdr cache-control)" "no-cache"
}
run_test "web static: content types by extension, bodies as on disk, immutable assets/" t_types

t_etag() {
  head_of /ui/assets/app-Ab12_x.js
  local tag
  tag=$(sed -n 's/^etag: //Ip' "$WORK/head" | tr -d '\r' | head -1)
  head_of /ui/assets/app-Ab12_x.js -H "If-None-Match: $tag"
  expect "If-None-Match with the ETag" "$STATUS" 304 || return 1
  expect "304 body" "$(wc -c <"$WORK/body")" 0 || return 1
  head_of /ui/assets/app-Ab12_x.js -H 'If-None-Match: "0-0"'
  expect "If-None-Match with another ETag" "$STATUS" 200 || return 1
  # A rebuilt file: new content, new ETag, the old one no longer matches.
  sleep 0.01
  printf '<!doctype html><title>opsd test ui</title><p>REBUILT-MARKER</p>\n' >"$UI/index.html"
  head_of / -H "If-None-Match: $tag"
  expect "rebuilt index status" "$STATUS" 200 || return 1
  expect_match "rebuilt index body" "$(cat "$WORK/body")" REBUILT-MARKER
}
run_test "web static: ETag and If-None-Match (304), a rebuilt file is served at once" t_etag

t_head() {
  head_of /ui/assets/app-Ab12_x.js -I
  expect "HEAD status" "$STATUS" 200 || return 1
  expect "HEAD content-length" "$(hdr content-length)" "$(wc -c <"$UI/assets/app-Ab12_x.js" | tr -d ' ')" || return 1
  req POST / '{}'
  expect_error "POST /" 405 method_not_allowed
}
run_test "web static: HEAD gives the length without a body; POST is 405" t_head

t_missing() {
  local p
  for p in /ui/nope.js /ui/assets /ui/assets/ /ui/sub/ /ui/assets/nope/x.js; do
    head_of "$p"
    expect "GET $p" "$STATUS" 404 || return 1
    expect_match "GET $p error code" "$(cat "$WORK/body")" '"code":"not_found"' || return 1
  done
}
run_test "web static: missing files and directories are 404 not_found" t_missing

t_traversal() {
  local p
  for p in "/ui/../secret.txt" "/ui/../../../../etc/passwd" "/ui/%2e%2e/secret.txt" "/ui/%2E%2E%2Fsecret.txt" \
           "/ui/assets/..%2f..%2fsecret.txt" "/ui/..%5csecret.txt" "/ui/assets\\..\\..\\secret.txt" \
           "/ui/.hidden" "/ui/%2ehidden" "/ui/assets/leak.txt" "/ui/%2fetc%2fpasswd" "/ui//etc/passwd" \
           "/ui/./.hidden" "/ui/assets/%00.js" "/../secret.txt" "/ui/sub/..%2f..%2f..%2fsecret.txt"; do
    head_of "$p"
    case "$STATUS" in 200 | 304) fail "GET $p answered $STATUS"; return 1 ;; esac
    if grep -q -e SECRET-MARKER -e HIDDEN-MARKER -e 'root:' "$WORK/body"; then
      fail "GET $p leaked a file: $(head -c 100 "$WORK/body")"
      return 1
    fi
  done
}
run_test "web static: path traversal (.., encoded, backslashes, hidden files, symlink out) reads nothing" t_traversal

t_api_still_protected() {
  AUTH=()
  req GET /api/v1/status
  expect_error "status without a token" 401 unauthorized || return 1
  AUTH=(-H "Authorization: Bearer view-tok")
  req GET /api/v1/status
  expect_status "status with a token" 200 || return 1
  AUTH=()
  req GET /uix
  expect_error "a path that only starts like /ui needs a token" 401 unauthorized
}
run_test "web static: the UI is public, the API behind it still needs a token" t_api_still_protected

t_too_large() {
  head_of /ui/assets/huge.bin
  expect "a 33 MiB file" "$STATUS" 413 || return 1
  expect_match "error code" "$(cat "$WORK/body")" '"code":"too_large"'
}
run_test "web static: a file over 32 MiB is refused (413), not loaded" t_too_large

stop_opsd
# The UI off (empty ui_dir) and a directory without index.html: / is the API index.
for variant in off wrong; do
  PORT=$(free_port)
  if [ $variant = off ]; then dir='""'; else dir="$WORK/nowhere"; fi
  write_config "$WORK/opsd-$variant.yaml" "$PORT" "$WORK/data-$variant" "  ui_dir: $dir"
  t_index_fallback() {
    start_opsd "$WORK/opsd-$variant.yaml" || return 1
    req GET /
    expect_status "GET /" 200 || return 1
    expect_match "the API index" "$BODY" '/api/v1/status' || return 1
    req GET /ui/index.html
    expect_error "GET /ui/index.html" 404 not_found || return 1
    if [ $variant = off ]; then
      expect_match "log" "$(cat "$OPSD_LOG")" 'web UI off' || return 1
    else
      expect_match "log" "$(cat "$OPSD_LOG")" 'server.ui_dir: .*nowhere has no index.html' || return 1
    fi
    stop_opsd
  }
  run_test "web static: server.ui_dir $variant: / is the API index, /ui/ is 404" t_index_fallback
done

finish
