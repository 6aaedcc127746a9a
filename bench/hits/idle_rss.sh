#!/usr/bin/env bash
# bench/hits/idle_rss.sh: what one idle keep-alive connection costs trove, in RSS.
#
#   bash bench/hits/idle_rss.sh TROVE_BIN N      (e.g. target/release/trove 19000)
#
# Starts trove-ceiling (the origin, 1 KiB) and trove (one runtime thread, client_idle 600 s, access
# log to /dev/null) on CPU 1, caches /1k.bin, then holds N idle keep-alive connections with
# idle_conns.py (each has served one GET), waits SETTLE seconds (default 6: past the 2 s first
# idle wait), and prints trove's RSS before and with them held, and the difference over N.
# N is bounded by the open-files limit (ulimit -n); CEILING_BIN defaults to target/release.
set -euo pipefail
BIN=$1
N=$2
PORT=${PORT:-18190}
ORIGIN_PORT=${ORIGIN_PORT:-18191}
HERE=$(cd "$(dirname "$0")" && pwd)
CEILING_BIN=${CEILING_BIN:-$HERE/../../target/release/trove-ceiling}
D=$(mktemp -d)
ulimit -n "$(ulimit -Hn)"
taskset -c 1 "$CEILING_BIN" --addr 127.0.0.1:$ORIGIN_PORT --size 1k >/dev/null 2>&1 &
OP=$!
cat >"$D/t.toml" <<T
[[listener]]
listen = "127.0.0.1:$PORT"
mode = "reverse"
[cache]
memory = "256MiB"
[timeouts]
client_idle = "600s"
[log]
access = "/dev/null"
[admin]
listen = ""
[runtime]
threads = 1
[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN_PORT"]
T
taskset -c 1 "$BIN" serve --config "$D/t.toml" >/dev/null 2>"$D/err" &
TP=$!
trap 'kill $TP $OP 2>/dev/null; rm -rf "$D"' EXIT
sleep 1
curl -s -o /dev/null http://127.0.0.1:$PORT/1k.bin
curl -s -o /dev/null http://127.0.0.1:$PORT/1k.bin
R0=$(awk '/VmRSS/{print $2}' /proc/$TP/status)
python3 "$HERE/idle_conns.py" --port "$PORT" --path /1k.bin --count "$N" --ready "$D/ready" >"$D/holder.txt" 2>&1 &
HP=$!
for _ in $(seq 1 120); do [ -s "$D/ready" ] && break; sleep 1; done
sleep "${SETTLE:-6}"
R1=$(awk '/VmRSS/{print $2}' /proc/$TP/status)
echo "$(basename "$BIN") n=$N holder: $(cat "$D/ready") rss_before=${R0}KiB rss_idle=${R1}KiB per_conn=$(((R1 - R0) * 1024 / N))B"
kill $HP
wait $HP 2>/dev/null || true
