#!/usr/bin/env bash
# The admin API benchmarks of BENCHMARKS.md ("Admin API"), MEASURING.md's way: load on CPU 0,
# every server on CPU 1, interleaved rounds, medians.
#
#   1. put and get calls per second from one client, over one kept-alive connection against a
#      new connection per call, over TCP and the Unix socket (seed 002, Figure 5's shape);
#   2. hit throughput (wrk -t1 -c50 -d10s, 1 KB) of trove with no bans against trove with
#      10,000 pending bans, and Varnish likewise (`ban req.url ~ …` through varnishadm);
#   3. the round trip of a tag invalidation covering 1,000,000 objects put through the API.
#
# Usage: bench/api/run.sh [ROUNDS]   (binaries from $CARGO_TARGET_DIR/release)
set -euo pipefail
ROUNDS=${1:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
TARGET=${CARGO_TARGET_DIR:-$HERE/../../target}/release
TROVE=$TARGET/trove
BENCH=$TARGET/examples/api_bench
RUN=$(mktemp -d /tmp/trove-api-bench.XXXXXX)
chmod 755 "$RUN"            # the origin (nginx, as nobody) reads its docroot in here
SECTIONS=${SECTIONS:-123}   # which of 1, 2, 3 to run
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
ulimit -n 20000 || true

mkdir -p "$RUN/origin/tmp" "$RUN/www"
head -c 1024 /dev/urandom > "$RUN/www/1k.bin"
chown -R nobody:nogroup "$RUN/origin" "$RUN/www" 2>/dev/null || true
sed "s#@RUN@#$RUN#g" "$HERE/origin.conf" > "$RUN/origin/nginx.conf"
taskset -c 1 nginx -p "$RUN/origin/" -c "$RUN/origin/nginx.conf" -e "$RUN/origin/error.log" &
PIDS+=($!)

start_trove() { # name port admin
    sed -e "s#@RUN@#$RUN#g" -e "s#@PORT@#$2#" -e "s#@ADMIN@#$3#" -e "s#@NAME@#$1#" \
        "$HERE/trove.toml" > "$RUN/$1.toml"
    taskset -c 1 "$TROVE" serve --config "$RUN/$1.toml" > "$RUN/$1.log" 2>&1 &
    PIDS+=($!)
}
start_trove a 18190 18191
start_trove b 18192 18193
start_varnish() { # name port mgmt
    mkdir -p "$RUN/$1"
    echo secret > "$RUN/$1/secret"
    taskset -c 1 varnishd -F -j none -n "$RUN/$1" -a "127.0.0.1:$2" -T "127.0.0.1:$3" \
        -S "$RUN/$1/secret" -f "$HERE/varnish.vcl" -s malloc,256m -p thread_pools=1 \
        > "$RUN/$1.log" 2>&1 &
    PIDS+=($!)
}
start_varnish va 18194 18195
start_varnish vb 18196 18197

wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
for p in 18180 18190 18191 18192 18193 18194 18196; do wait_port $p; done
for p in 18190 18192 18194 18196; do curl -s -o /dev/null "http://127.0.0.1:$p/1k.bin"; curl -s -o /dev/null "http://127.0.0.1:$p/1k.bin"; done

echo "== 1. API calls per second (one client, sequential calls, 3 s each)"
[[ $SECTIONS == *1* ]] && for r in $(seq "$ROUNDS"); do
    for ep in 127.0.0.1:18191 "unix:$RUN/a.sock"; do
        for op in put get; do
            for reuse in keep new; do
                printf '%s round %s %s ' "$([[ $ep == unix:* ]] && echo unix || echo tcp)" "$r" ""
                taskset -c 0 "$BENCH" "$ep" bench-token "$op" "$reuse" 3
            done
        done
    done
done

if [[ $SECTIONS == *2* ]]; then
echo "== 2. hits with and without 10,000 pending bans"
taskset -c 0 "$BENCH" 127.0.0.1:18193 bench-token bans 10000
{ for i in $(seq 0 9999); do echo "ban req.url ~ ^/nomatch/$i/"; done; } \
    | varnishadm -T 127.0.0.1:18197 -S "$RUN/vb/secret" > /dev/null
echo "varnish vb bans: $(varnishadm -T 127.0.0.1:18197 -S "$RUN/vb/secret" ban.list | wc -l) lines in ban.list"
for r in $(seq "$ROUNDS"); do
    for t in trove:18190 trove-10k-bans:18192 varnish:18194 varnish-10k-bans:18196; do
        port=${t#*:}
        curl -s -o /dev/null "http://127.0.0.1:$port/1k.bin"
        before=$(wc -l < "$RUN/origin/access.log")
        rps=$(taskset -c 0 wrk -t1 -c50 -d10s --latency "http://127.0.0.1:$port/1k.bin" | awk '/Requests\/sec/ {print $2}')
        after=$(wc -l < "$RUN/origin/access.log")
        echo "round $r ${t%%:*} $rps req/s (origin requests during the window: $((after - before)))"
    done
done
echo "trove b pending bans: $(taskset -c 0 "$TROVE" stats --api 127.0.0.1:18193 --token bench-token | grep pending_bans)"
fi

[[ $SECTIONS == *3* ]] || exit 0
echo "== 3. a tag invalidation covering 1,000,000 objects"
taskset -c 0 "$BENCH" 127.0.0.1:18191 bench-token fill 1000000 4
"$TROVE" stats --api 127.0.0.1:18191 --token bench-token | grep -E '"objects"|memberships'
ps -o rss= -p "$(pgrep -f "serve --config $RUN/a.toml")" | awk '{print "trove a RSS after the fill: " $1 " KiB"}'
taskset -c 0 "$BENCH" 127.0.0.1:18191 bench-token ack g7
taskset -c 0 "$BENCH" 127.0.0.1:18191 bench-token ack all
for _ in $(seq 50); do
    n=$("$TROVE" stats --api 127.0.0.1:18191 --token bench-token | awk -F': ' '/"objects"/ {gsub(",","",$2); print $2}')
    [[ $n -lt 1000 ]] && break; sleep 0.2
done
echo "objects left after the background sweep: $n"
