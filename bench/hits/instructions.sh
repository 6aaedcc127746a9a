#!/usr/bin/env bash
# bench/hits/instructions.sh: instructions trove spends per cached hit (1 KB unless SIZE says), under callgrind.
#
# Throughput on this shared 2-core host wanders by ±15 % from one round to the next, and the VM
# exposes no hardware counters (`perf stat -e instructions` says "not supported"). Counting the
# instructions a hit executes in user space is deterministic to within a few per mille, so it shows a
# change of 1 % in the request path that no paired wrk run can. It is not a speed: the kernel's share
# (most of a 1 KB hit's cost) is not counted, cache misses and stalls are not counted, and valgrind
# runs every thread on one core. Use it beside `run.sh`, never instead of it.
#
#   BINS="/tmp/trove-base /tmp/trove-new" bash bench/hits/instructions.sh
#
# For each binary: start an origin (nginx, as run.sh) and trove under callgrind with run.sh's trove
# config, warm up with WARMUP requests, zero the counters, send N requests with h2load over
# HTTP/1.1 keep-alive (CONNS connections), dump the counters, and print instructions per request. The
# callgrind files are kept in $OUT/<binary name>/; `python3 bench/hits/instructions.py diff A B N`
# lists the functions whose self cost per request changed most between two of them.
#
# Settings (environment): BINS (required), SIZE (object size in KiB, default 1), N (default 20000),
# WARMUP (2000), CONNS (10),
# OUT (default /tmp/trove-instructions). Needs valgrind, h2load (nghttp2-client), nginx, curl.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PEERS=$HERE/peers
N=${N:-20000}
WARMUP=${WARMUP:-2000}
CONNS=${CONNS:-10}
SIZE=${SIZE:-1}
OUT=${OUT:-/tmp/trove-instructions}
: "${BINS:?set BINS to the trove binaries to count}"

for tool in valgrind callgrind_control h2load nginx curl python3; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done

RUN=$(mktemp -d /tmp/trove-instructions-run.XXXXXX)
ORIGIN_PGID=
TROVE_PID=
cleanup() {
    [[ -n $TROVE_PID ]] && kill "$TROVE_PID" 2>/dev/null || true
    [[ -n $ORIGIN_PGID ]] && kill -- "-$ORIGIN_PGID" 2>/dev/null || true
    rm -rf "$RUN"
}
trap cleanup EXIT

mkdir -p "$RUN/origin/tmp" "$RUN/www" "$RUN/trove" "$OUT"
chown nobody:nogroup "$RUN/origin/tmp" 2>/dev/null || true
head -c $((SIZE * 1024)) /dev/urandom >"$RUN/www/${SIZE}k.bin"
chmod -R a+rX "$RUN"
sed -e "s|@RUN@|$RUN|g" "$PEERS/origin.conf" >"$RUN/origin/nginx.conf"
sed -e "s|@RUN@|$RUN|g" "$PEERS/trove.toml" >"$RUN/trove/trove.toml"
setsid nginx -p "$RUN/origin/" -c "$RUN/origin/nginx.conf" -e "$RUN/origin/error.log" \
    >/dev/null 2>&1 </dev/null &
ORIGIN_PGID=$!
sleep 0.5

url=http://127.0.0.1:18090/${SIZE}k.bin
for bin in $BINS; do
    name=$(basename "$bin")
    dir=$OUT/$name
    rm -rf "$dir"
    mkdir -p "$dir"
    valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.%p" \
        "$bin" serve --config "$RUN/trove/trove.toml" >"$dir/trove.out" 2>&1 </dev/null &
    TROVE_PID=$!
    for _ in $(seq 200); do curl -sf -o /dev/null "$url" && break; sleep 0.3; done
    h2load --h1 -n "$WARMUP" -c "$CONNS" "$url" >/dev/null 2>&1
    callgrind_control -z "$TROVE_PID" >/dev/null 2>&1
    h2load --h1 -n "$N" -c "$CONNS" "$url" >"$dir/h2load.txt" 2>&1
    callgrind_control -d "$TROVE_PID" >/dev/null 2>&1
    kill "$TROVE_PID"
    wait "$TROVE_PID" 2>/dev/null || true
    TROVE_PID=
    ok=$(sed -n 's/^requests: .* \([0-9]*\) succeeded.*/\1/p' "$dir/h2load.txt")
    # The dump taken after zeroing is the file with the `.1` part suffix.
    dump=$(ls "$dir"/callgrind.*.1)
    total=$(sed -n 's/^summary: //p' "$dump")
    echo "$name: $ok of $N requests succeeded; $((total / ok)) instructions per request ($dump)"
done
