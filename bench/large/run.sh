#!/usr/bin/env bash
# bench/large/run.sh: large objects and the disk tier (issue 8), two measurements.
#
# 1. `evicted`: 300 objects of SIZE (1 MiB) through trove with a 16 MiB memory tier (16 shards of
#    1 MiB: each object is evicted from memory while it arrives) and a disk tier, one at a time,
#    then a second pass: how many reached the disk (trove_disk_writes_total, and origin requests
#    in the second pass, which must be 0).
# 2. `rss`: one BIG (200 MB) body through trove to two clients at once, one reading at full
#    speed, one at SLOW (20 MB/s); trove's RSS sampled every 100 ms (VmRSS, /proc), the peak
#    and the value before reported; then a third request (a hit from disk, no origin request).
#    trove with a 16 MiB memory tier and a disk tier: the body is written to disk as it
#    arrives ([cache.disk] max_object, default 1GiB), memory holding a stream_buffer window.
#    The same two clients then go through nginx proxy_cache (bench/slow-readers/nginx.conf)
#    for a fresh copy of the body (big2.bin), its RSS summed over its processes.
# 3. `rss-stored`: the same with a MID (60 MB) body, under the default [cache] (memory 256MiB,
#    max_object 64MiB) with a disk tier: over a 16 MiB region, so spooled too.
#
#   bash bench/large/run.sh
#
# After MEASURING.md: clients on CPU 0, trove and the origin (nginx, bench/hits' origin.conf) on
# CPU 1. Everything it starts runs in its own process group and is stopped by that id on exit;
# its files are in RUN, removed on exit.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SIZE=${SIZE:-1M}
OBJECTS=${OBJECTS:-300}
BIG=${BIG:-200M}
MID=${MID:-60M}
SLOW=${SLOW:-20M}
TROVE_BIN=${TROVE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/trove}
RUN=${RUN:-/tmp/trove-bench-large.$$}
PORT=${PORT:-38290}
ADMIN=${ADMIN:-38291}
PORT2=${PORT2:-38292}
ADMIN2=${ADMIN2:-38293}
ORIGIN_PORT=${ORIGIN_PORT:-38280}
NGINX_PORT=${NGINX_PORT:-38294}
LOG_TAG=large
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"   # log, cleanup at exit, start, wait_port
metric() { curl -s "http://127.0.0.1:$ADMIN/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
mkdir -p "$RUN/www/o" "$RUN/origin/tmp" "$RUN/trove"
for i in $(seq 0 $((OBJECTS - 1))); do head -c "$SIZE" /dev/urandom >"$RUN/www/o/$i.bin"; done
head -c "$BIG" /dev/urandom >"$RUN/www/big.bin"
cp "$RUN/www/big.bin" "$RUN/www/big2.bin"
head -c "$MID" /dev/urandom >"$RUN/www/mid.bin"
chown -R nobody:nogroup "$RUN/origin" "$RUN/www" 2>/dev/null || true
chmod 755 "$RUN"
sed -e "s#@RUN@#$RUN#g; s#127.0.0.1:18080#127.0.0.1:$ORIGIN_PORT#" "$ROOT/bench/hits/peers/origin.conf" >"$RUN/origin.conf"
cat >"$RUN/trove.toml" <<CONF
[[listener]]
addr = "127.0.0.1:$PORT"
mode = "reverse"
[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN_PORT"]
[cache]
memory = "16MiB"              # 16 shards of 1 MiB: a 1 MiB object is evicted while it arrives
max_object = "4MiB"           # above the 1 MiB objects (the default, 64MiB, is capped at memory / 2)
[cache.disk]
path = "$RUN/trove/cache"
size = "1GiB"                 # room for the 300 objects
[runtime]
threads = 1                   # one core
[admin]
listen = "127.0.0.1:$ADMIN"
CONF
cat >"$RUN/trove2.toml" <<CONF
[[listener]]
addr = "127.0.0.1:$PORT2"
mode = "reverse"
[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN_PORT"]
[cache.disk]                  # [cache] at its defaults: memory 256MiB, max_object 64MiB
path = "$RUN/trove2/cache"
size = "1GiB"
[runtime]
threads = 1
[admin]
listen = "127.0.0.1:$ADMIN2"
CONF
mkdir -p "$RUN/trove2"
start origin nginx -c "$RUN/origin.conf"
wait_port "$ORIGIN_PORT"
start trove "$TROVE_BIN" serve --config "$RUN/trove.toml"
wait_port "$PORT"
TROVE_PID=$(pgrep -g "${PGIDS[1]}" | head -1)

log "evicted: $OBJECTS objects of $SIZE, one at a time"
for i in $(seq 0 $((OBJECTS - 1))); do
    taskset -c 0 curl -s -o /dev/null "http://127.0.0.1:$PORT/o/$i.bin"
done
sleep 2   # the disk writer: sync_interval is 1 s
before=$(wc -l <"$RUN/origin/access.log")
taskset -c 0 curl -s -o /dev/null "http://127.0.0.1:$PORT/o/[0-$((OBJECTS - 1))].bin"
after=$(wc -l <"$RUN/origin/access.log")
echo "evicted: writes_total=$(metric trove_disk_writes_total) queued=$(metric trove_disk_writes_queued_total) shed=$(metric trove_disk_writes_shed_total) store_evictions=$(metric trove_store_evictions_total) second-pass origin requests=$((after - before)) of $OBJECTS"

log "rss: $BIG to two clients, one at $SLOW/s"
rss() { # pid, or g<pgid> for the sum over a process group
    if [[ $1 == g* ]]; then
        ps -e -o pgid=,rss= | awk -v g="${1#g}" '$1 == g { s += $2 } END { print s + 0 }'
    else
        awk '/^VmRSS/ { print $2 }' "/proc/$1/status"
    fi
}
two_clients() { # pid port file: the two clients, trove's RSS sampled meanwhile
    local pid=$1 port=$2 file=$3 base peak r fast slow
    base=$(rss "$pid")
    peak=$base
    taskset -c 0 curl -s -o /dev/null -w 'fast: %{size_download} bytes in %{time_total} s\n' "http://127.0.0.1:$port/$file" &
    fast=$!
    taskset -c 0 curl -s -o /dev/null --limit-rate "$SLOW" -w 'slow: %{size_download} bytes in %{time_total} s\n' "http://127.0.0.1:$port/$file" &
    slow=$!
    while kill -0 "$slow" 2>/dev/null || kill -0 "$fast" 2>/dev/null; do
        r=$(rss "$pid")
        [ "$r" -gt "$peak" ] && peak=$r
        sleep 0.1
    done
    wait "$fast" "$slow"
    echo "VmRSS before ${base} KiB, peak ${peak} KiB, after $(rss "$pid") KiB; origin requests for $file: $(grep -c "$file" "$RUN/origin/access.log")"
}
echo "rss: $(two_clients "$TROVE_PID" "$PORT" big.bin); buffered gauge after: $(metric trove_body_buffered_bytes)"
sleep 2   # the disk writer
hit=$(for _ in 1 2 3; do taskset -c 0 curl -s -o /dev/null -D "$RUN/third.head" -w '%{time_total} ' "http://127.0.0.1:$PORT/big.bin"; done)
echo "rss: three more requests: $(grep -i '^cache-status' "$RUN/third.head" | tr -d '\r'), in $hit s; origin requests for big.bin: $(grep -c big.bin "$RUN/origin/access.log"); trove_disk_writes_total=$(metric trove_disk_writes_total) write_bytes=$(metric trove_disk_write_bytes_total)"

log "rss: nginx proxy_cache, the same two clients (big2.bin)"
mkdir -p "$RUN/nginx/tmp" "$RUN/nginx/cache"
chown nobody:nogroup "$RUN/nginx/tmp" "$RUN/nginx/cache" 2>/dev/null || true
sed -e "s|@RUN@|$RUN|g; s|@ORIGIN@|$ORIGIN_PORT|g; s|@PORT@|$NGINX_PORT|g" "$ROOT/bench/slow-readers/nginx.conf" >"$RUN/nginx/nginx.conf"
start nginx nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e "$RUN/nginx/error.log"
wait_port "$NGINX_PORT"
echo "rss nginx: $(two_clients "g${PGIDS[2]}" "$NGINX_PORT" big2.bin)"
hit=$(for _ in 1 2 3; do taskset -c 0 curl -s -o /dev/null -D "$RUN/nginx.head" -w '%{time_total} ' "http://127.0.0.1:$NGINX_PORT/big2.bin"; done)
echo "rss nginx: three more requests: $(grep -i '^x-cache-status' "$RUN/nginx.head" | tr -d '\r'), in $hit s; origin requests for big2.bin: $(grep -c big2.bin "$RUN/origin/access.log")"

log "rss-stored: $MID to two clients, one at $SLOW/s, [cache] defaults"
start trove2 "$TROVE_BIN" serve --config "$RUN/trove2.toml"
wait_port "$PORT2"
TROVE2_PID=$(pgrep -g "${PGIDS[3]}" | head -1)
echo "rss-stored: $(two_clients "$TROVE2_PID" "$PORT2" mid.bin)"
sleep 2   # the disk writer
echo "rss-stored: on disk: writes_total=$(curl -s "http://127.0.0.1:$ADMIN2/metrics" | awk '$1 == "trove_disk_writes_total" { print $2 }') dropped=$(curl -s "http://127.0.0.1:$ADMIN2/metrics" | awk '$1 == "trove_disk_writes_dropped_total" { print $2 }')"
