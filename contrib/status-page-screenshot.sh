#!/usr/bin/env bash
# Renders trove's status page in a real browser (headless Chromium) after a minute of traffic,
# checks what the browser saw, and saves a screenshot (docs/status-page.png by default).
#
#   apt-get install chromium          # once
#   bash contrib/status-page-screenshot.sh [out.png]
#
# Starts, on loopback only: a small origin (python3), trove as a reverse proxy with one route
# to it and one to a port nothing listens on (so the page shows a failing origin), and a
# bounded curl loop (SECONDS_OF_TRAFFIC, default 60) of hits and misses. Every process started
# is stopped by its PID on exit.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/docs/status-page.png}
SECONDS_OF_TRAFFIC=${SECONDS_OF_TRAFFIC:-60}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[[ -n $CHROMIUM ]] || { echo "no chromium: apt-get install chromium" >&2; exit 1; }
TROVE=${TROVE:-$ROOT/target/release/trove}
[[ -x $TROVE ]] || (cd "$ROOT" && cargo build --release -p trove)

RUN=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$RUN"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ORIGIN=$(free_port); PROXY=$(free_port); ADMIN=$(free_port); DEAD=$(free_port)

python3 - "$ORIGIN" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = (self.path * 200).encode()[:20000]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Cache-Control", "max-age=30")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
PIDS+=($!)

cat >"$RUN/trove.toml" <<TOML
[[listener]]
listen = "127.0.0.1:$PROXY"
mode = "reverse"
[[origin]]
host = "*"
path_prefix = "/dead/"
upstreams = ["http://127.0.0.1:$DEAD"]
[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN"]
[admin]
listen = "127.0.0.1:$ADMIN"
[log]
access = ""
TOML
"$TROVE" serve --config "$RUN/trove.toml" 2>"$RUN/trove.err" &
PIDS+=($!)
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$ADMIN/healthz" && break; sleep 0.1; done

echo "traffic for $SECONDS_OF_TRAFFIC s ..." >&2
end=$((SECONDS + SECONDS_OF_TRAFFIC))
while ((SECONDS < end)); do
    # 40 paths, mostly hits once fetched; now and then a path never seen, and a dead route.
    curl -s -o /dev/null "http://127.0.0.1:$PROXY/page$((RANDOM % 40))" || true
    ((RANDOM % 10 == 0)) && curl -s -o /dev/null "http://127.0.0.1:$PROXY/new$RANDOM$RANDOM" || true
    ((RANDOM % 50 == 0)) && curl -s -o /dev/null "http://127.0.0.1:$PROXY/dead/x" || true
done

URL="http://127.0.0.1:$ADMIN/"
DOM=$("$CHROMIUM" --headless --no-sandbox --disable-gpu --dump-dom "$URL" 2>/dev/null)
for want in "Requests per second" "Response time" "failing" "TCP_MEM_HIT" "127.0.0.1:$DEAD" "<svg"; do
    grep -q -- "$want" <<<"$DOM" || { echo "the browser's page lacks: $want" >&2; exit 1; }
done
mkdir -p "$(dirname "$OUT")"
"$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1500 \
    --screenshot="$OUT" "$URL" >/dev/null 2>&1
[[ -s $OUT ]] || { echo "no screenshot written" >&2; exit 1; }
echo "status page checked in $("$CHROMIUM" --version 2>/dev/null); screenshot: $OUT" >&2
