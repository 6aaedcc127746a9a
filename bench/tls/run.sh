#!/usr/bin/env bash
# bench/tls/run.sh: trove and nginx as TLS-terminating reverse-proxy caches, side by side, with the
# same certificate (ECDSA P-256, made here with openssl, never kept) in front of the same origin
# (bench/hits's nginx origin, cleartext), following MEASURING.md: load on CPU 0, every server on
# CPU 1, one core each (nginx one worker, trove one runtime thread), interleaved rounds, a warm-up
# before every window, origin requests counted during every window (must be 0).
#
#   ROUNDS=3 DURATION=10s IDLE_CONNS=10000 bash bench/tls/run.sh
#   PROTO=h2 ROUNDS=3 DURATION=10s IDLE_CONNS=10000 bash bench/tls/run.sh    # HTTP/2 (issue 23)
#
# PROTO=h2 turns HTTP/2 on in both (nginx `listen … ssl http2`, trove `http2 = true`), loads
# with `h2load -c CONNS -m STREAMS` instead of wrk, holds idle HTTP/2 connections
# (idle_tls.py --h2) and skips the handshake rates (the same as HTTP/1's).
#
# Measures, per target:
#   hits      wrk -t1 -c50 --latency over TLS keep-alive, /1k.bin and /100k.bin (cached hits)
#   full      new TLS connections per second, full handshakes: `openssl s_time -new` (one client
#             process, a handshake then close, for S_TIME seconds), on CPU 0
#   resumed   the same with `-reuse` (every connection after the first resumes the session)
#   idle      RSS of the server with IDLE_CONNS idle TLS keep-alive connections (idle_tls.py)
#             minus its RSS before, per connection
# Requires (Debian 12): nginx wrk openssl curl python3. Writes raw outputs and report.md to
# bench/tls/results/<UTC time>/ (git-ignored).

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
S_TIME=${S_TIME:-10}
IDLE_CONNS=${IDLE_CONNS:-10000}
LOAD_CPU=${LOAD_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
TARGETS=${TARGETS:-"nginx trove"}
PROTO=${PROTO:-http1}
STREAMS=${STREAMS:-10}
RESULTS=${RESULTS:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}
CARGO_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TROVE_BIN=${TROVE_BIN:-$CARGO_TARGET/release/trove}
declare -A PORT=([nginx]=18443 [trove]=18444)
declare -A PGID=()

log() { printf '[tls %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

RUN=$(mktemp -d /dev/shm/trove-tls-bench.XXXXXX)
mkdir -p "$RESULTS"
chmod 755 "$RUN"

stop_all() {
    local name
    for name in "${!PGID[@]}"; do
        kill -TERM -- "-${PGID[$name]}" 2>/dev/null || true
    done
    sleep 0.5
    for name in "${!PGID[@]}"; do
        kill -KILL -- "-${PGID[$name]}" 2>/dev/null || true
    done
    rm -rf "$RUN"
}
trap stop_all EXIT

ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# The certificate both servers present: a CA and a leaf for site.test, made for this run only.
mkdir -p "$RUN/certs" "$RUN/www"
(
    cd "$RUN/certs"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem \
        -days 2 -subj "/CN=bench CA" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout site.key -out site.csr \
        -subj "/CN=site.test" 2>/dev/null
    printf 'subjectAltName=DNS:site.test\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >ext.cnf
    openssl x509 -req -in site.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out site.pem -days 2 \
        -extfile ext.cnf 2>/dev/null
    chmod 644 site.key
)
head -c 1024 /dev/urandom >"$RUN/www/1k.bin"
head -c 102400 /dev/urandom >"$RUN/www/100k.bin"

render() { sed "s|@RUN@|$RUN|g" "$1" >"$2"; }

start() { # name, command...
    local name=$1
    shift
    setsid taskset -c "$SERVER_CPU" "$@" >"$RUN/$name.out" 2>&1 &
    PGID[$name]=$!
}

for d in origin nginx; do mkdir -p "$RUN/$d/tmp" "$RUN/$d/cache"; done
mkdir -p "$RUN/trove"
chown -R nobody:nogroup "$RUN/origin" "$RUN/nginx" "$RUN/www" 2>/dev/null || true
render "$ROOT/bench/hits/peers/origin.conf" "$RUN/origin/nginx.conf"
render "$HERE/nginx-tls.conf" "$RUN/nginx/nginx.conf"
render "$HERE/trove-tls.toml" "$RUN/trove/trove.toml"
if [ "$PROTO" = h2 ]; then
    sed -i 's|listen 127.0.0.1:18443 ssl;|listen 127.0.0.1:18443 ssl http2;|' "$RUN/nginx/nginx.conf"
    sed -i 's|^\(tls = .*\)$|\1\nhttp2 = true|' "$RUN/trove/trove.toml"
    grep -q 'ssl http2;' "$RUN/nginx/nginx.conf" && grep -q '^http2 = true' "$RUN/trove/trove.toml" \
        || { log "could not turn HTTP/2 on in the configs"; exit 1; }
fi
start origin nginx -p "$RUN/origin/" -c "$RUN/origin/nginx.conf" -e "$RUN/origin/error.log"
start nginx nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e "$RUN/nginx/error.log"
start trove "$TROVE_BIN" serve --config "$RUN/trove/trove.toml"

CURL=(curl -sS --cacert "$RUN/certs/ca.pem")
url() { echo "https://site.test:${PORT[$1]}$2"; }
resolve() { echo "site.test:${PORT[$1]}:127.0.0.1"; }
for t in $TARGETS; do
    for i in $(seq 1 100); do
        "${CURL[@]}" --resolve "$(resolve "$t")" -o /dev/null "$(url "$t" /1k.bin)" 2>/dev/null && break
        sleep 0.1
        [ "$i" = 100 ] && { log "$t did not come up"; cat "$RUN/$t.out" >&2; exit 1; }
    done
done
log "servers up; trove $("$TROVE_BIN" --version 2>/dev/null || echo '?'), $(nginx -v 2>&1)"

# wrk connects to the address in its URL and sends that as SNI: 127.0.0.1 is no DNS name, so both
# servers present their only (default) certificate; wrk does not verify it.
origin_lines() { wc -l <"$RUN/origin/access.log"; }

for round in $(seq 1 "$ROUNDS"); do
    for t in $TARGETS; do
        for size in 1k 100k; do
            for _ in 1 2 3; do
                "${CURL[@]}" --resolve "$(resolve "$t")" -o /dev/null "$(url "$t" "/$size.bin")"
                # h2load names the host as it is in its URL (:authority 127.0.0.1:PORT), and
                # trove's key has the host: warm that key too (nginx's key has no host).
                if [ "$PROTO" = h2 ]; then
                    "${CURL[@]}" -k -o /dev/null "https://127.0.0.1:${PORT[$t]}/$size.bin"
                fi
            done
            # The origin logs a request after its last byte is sent, which can be after a proxy
            # that streams (trove) has answered the warm-up: let that line land first.
            sleep 0.5
            before=$(origin_lines)
            out="$RESULTS/wrk-$t-$size-r$round.txt"
            if [ "$PROTO" = h2 ]; then
                taskset -c "$LOAD_CPU" h2load -t1 -c"$CONNS" -m"$STREAMS" -D "${DURATION%s}" \
                    "https://127.0.0.1:${PORT[$t]}/$size.bin" >"$out"
                # In wrk's words, for report.py.
                awk '/^finished in/ { gsub(",", "", $4); print "Requests/sec: " $4 }' "$out" >>"$out"
            else
                taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"$DURATION" --latency \
                    -H "Host: site.test:${PORT[$t]}" "https://127.0.0.1:${PORT[$t]}/$size.bin" >"$out"
            fi
            echo "origin_requests_during_window $(($(origin_lines) - before))" >>"$out"
            log "round $round $t $size: $(grep Requests/sec "$out")"
        done
    done
    for t in $TARGETS; do
        [ "$PROTO" = h2 ] && continue
        for mode in new reuse; do
            out="$RESULTS/stime-$t-$mode-r$round.txt"
            taskset -c "$LOAD_CPU" openssl s_time -connect "127.0.0.1:${PORT[$t]}" -"$mode" \
                -time "$S_TIME" >"$out" 2>&1 || true
            log "round $round $t s_time -$mode: $(grep 'connections in' "$out" | head -1)"
        done
    done
done

rss_of() { # summed RSS in KiB of every process in a process group
    ps -o rss= -g "$1" | awk '{s += $1} END {print s + 0}'
}

if [ "$IDLE_CONNS" -gt 0 ]; then
    for t in $TARGETS; do
        before=$(rss_of "${PGID[$t]}")
        ready="$RUN/idle-$t.ready"
        h2=()
        if [ "$PROTO" = h2 ]; then h2=(--h2); fi
        setsid taskset -c "$LOAD_CPU" python3 "$HERE/idle_tls.py" "${h2[@]}" --port "${PORT[$t]}" \
            --cafile "$RUN/certs/ca.pem" --count "$IDLE_CONNS" --ready "$ready" \
            >"$RESULTS/idle-$t.txt" 2>&1 &
        holder=$!
        for _ in $(seq 1 1200); do [ -s "$ready" ] && break; sleep 0.5; done
        sleep 2
        after=$(rss_of "${PGID[$t]}")
        kill -TERM -- "-$holder" 2>/dev/null || true
        wait "$holder" 2>/dev/null || true
        {
            echo "rss_before_kib $before"
            echo "rss_with_idle_kib $after"
            echo "held $(cat "$ready")"
        } >>"$RESULTS/idle-$t.txt"
        log "idle $t: $(cat "$RESULTS/idle-$t.txt" | tr '\n' ' ')"
        sleep 1
    done
fi

python3 "$HERE/report.py" "$RESULTS" | tee "$RESULTS/report.md"
