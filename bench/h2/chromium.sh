#!/usr/bin/env bash
# bench/h2/chromium.sh: headless Chromium loads a page with 50 sub-resources from trove over its
# TLS listener with `http2 = true` (issue 23), twice, each time with a fresh browser profile (so
# the browser's own cache is empty and every resource is asked of trove). Prints the access log
# and checks: every request came by HTTP/2, the first load fetched each resource once from the
# origin, and the second load was all hits.
#
#   bash bench/h2/chromium.sh                 # TROVE_BIN=… to choose the binary
#
# Requires (Debian 12): chromium openssl python3 curl. Everything listens on 127.0.0.1 and stops
# by itself; the run's files are in a temp dir removed at the end.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TROVE_BIN=${TROVE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/trove}
N=${N:-50}
ORIGIN_PORT=${ORIGIN_PORT:-18581}
PORT=${PORT:-18543}
RUN=$(mktemp -d /tmp/trove-h2-chromium.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -- "-$p" 2>/dev/null || true; done
    rm -rf "$RUN"
}
trap cleanup EXIT

mkdir -p "$RUN/www/r" "$RUN/certs"
(
    cd "$RUN/certs"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout site.key \
        -out site.pem -days 2 -subj "/CN=site.test" -addext "subjectAltName=DNS:site.test" 2>/dev/null
)
# The page and its resources: images (1x1 GIFs with distinct bytes) and one style sheet.
{
    echo '<!doctype html><html><head><link rel="stylesheet" href="/r/style.css"></head><body>'
    for i in $(seq 1 $((N - 1))); do echo "<img src=\"/r/$i.gif\" width=1 height=1>"; done
    echo '</body></html>'
} >"$RUN/www/index.html"
echo 'body { margin: 0 }' >"$RUN/www/r/style.css"
for i in $(seq 1 $((N - 1))); do
    printf 'GIF89a\001\000\001\000\000\000\000,\000\000\000\000\001\000\001\000\000\002\002D\001\000;%08d' "$i" \
        >"$RUN/www/r/$i.gif"
done
# Old modification times: the origin (python's http.server) sends Last-Modified and no
# Cache-Control, so trove's heuristic freshness keeps them for the run.
find "$RUN/www" -type f -exec touch -d '2020-01-01' {} +

cat >"$RUN/trove.toml" <<TOML
[[listener]]
listen = "127.0.0.1:$PORT"
mode = "reverse"
tls = { cert = "$RUN/certs/site.pem", key = "$RUN/certs/site.key" }
http2 = true

[log]
access = "$RUN/access.log"

[admin]
listen = ""

[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN_PORT"]
TOML

(cd "$RUN/www" && exec setsid python3 -m http.server "$ORIGIN_PORT" --bind 127.0.0.1 \
    >"$RUN/origin.log" 2>&1) &
PIDS+=($!)
setsid "$TROVE_BIN" serve --config "$RUN/trove.toml" >"$RUN/trove.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
    curl -sk --resolve "site.test:$PORT:127.0.0.1" -o /dev/null "https://site.test:$PORT/r/style.css" \
        && break
    sleep 0.1
done
: >"$RUN/access.log.before"
load() { # a fresh profile each time: the browser's own cache starts empty
    local profile
    profile=$(mktemp -d "$RUN/profile.XXXXXX")
    timeout 60 chromium --headless=new --no-sandbox --disable-gpu --ignore-certificate-errors \
        --user-data-dir="$profile" --host-resolver-rules="MAP site.test:$PORT 127.0.0.1:$PORT" \
        --dump-dom "https://site.test:$PORT/" >"$RUN/dom-$1.html" 2>"$RUN/chromium-$1.log" || true
}
sleep 0.3
start=$(wc -l <"$RUN/access.log" 2>/dev/null || echo 0)
load 1
sleep 0.5 # the access log is written every 100 ms
mid=$(wc -l <"$RUN/access.log")
load 2
sleep 0.5
lines=$(wc -l <"$RUN/access.log")
first=$(sed -n "$((start + 1)),${mid}p" "$RUN/access.log")
second=$(sed -n "$((mid + 1)),${lines}p" "$RUN/access.log")
echo "first load:"
echo "$first" | awk '{print $4, $7, $NF}' | sort | uniq -c | sort -rn | head -5
echo "second load:"
echo "$second" | awk '{print $4, $NF}' | sort | uniq -c
page_requests() { grep -cE ' https://site.test:[0-9]+/(r/[^ ]*)? ' <<<"$1" || true; }
h2_1=$(grep -c ' HTTP/2$' <<<"$first" || true)
h2_2=$(grep -c ' HTTP/2$' <<<"$second" || true)
hits_2=$(grep -E ' https://site.test:[0-9]+/(r/[^ ]*)? ' <<<"$second" | grep -c 'HIT/200' || true)
echo "resources on the page: $N (and the page); first load: $(page_requests "$first") page requests," \
    "$h2_1 of $(wc -l <<<"$first") lines HTTP/2; second load: $hits_2 hits of" \
    "$(page_requests "$second") page requests, $h2_2 of $(wc -l <<<"$second") lines HTTP/2"
ok=1
[ "$(page_requests "$first")" -ge $((N + 1)) ] || ok=0
[ "$h2_1" = "$(wc -l <<<"$first")" ] && [ "$h2_2" = "$(wc -l <<<"$second")" ] || ok=0
[ "$hits_2" -ge $((N + 1)) ] || ok=0
if [ $ok = 1 ]; then echo "OK"; else echo "FAILED"; cat "$RUN/access.log"; exit 1; fi
