#!/usr/bin/env bash
# bench/overload/run.sh: overload curves of trove and nginx, side by side, on this machine:
# offered rate -> served rate, p50, p99, on a miss path to a slow origin and on a hit path, up to
# twice what each path sustains (issue 7: throughput >= 95 % of peak, hit p99 flat).
#
# Implements the project's MEASURING.md: the load generator (`trove bench rate`: open loop at a
# constant rate, wrk2-style, response times from the instant each request was due) on CPU 0; the
# origin (`trove bench slow-origin`) and every server under test on CPU 1, one core per proxy
# (trove `threads = 1`, nginx one worker); the targets interleaved at every rate, for ROUNDS
# rounds; loopback only; every window bounded in time and count; origin requests counted.
#
#   ROUNDS=2 DURATION=10 bash bench/overload/run.sh
#
# Scenarios (SCENARIOS, default "miss hit"):
#   miss  Every request a new URL (/miss/<n>, no-store) to an origin that answers after DELAY
#         seconds with no limit of its own. Both proxies hold at most 256 origin connections
#         (trove's default origin_pool.max_per_origin; nginx `max_conns=256`), so the path
#         sustains 256 / DELAY req/s (512 at 0.5 s). MISS_RATES offers up to twice that. A second
#         generator offers HIT_SIDE_RATE req/s of hits (keep-alive) in the same window: their
#         p50/p99 tell whether hits stay fast while misses queue.
#   hit   One cached URL (/hit), a new connection for every request (Connection: close): the
#         connection-storm case, which also goes through accept. HIT_RATES. (Keep-alive hits run
#         at over 100,000 req/s per core here, more than one load core can offer twice over.)
#   burst BURST clients connect within 50 ms, each for one hit (Connection: close): every
#         request's time, and the kernel's listen-queue overflows and SYN cookies during the
#         window (/proc/net/netstat: machine-wide counters).
#
# Settings (environment):
#   TARGETS        servers to measure, in round order (default "trove nginx"); `trove-base` is
#                  TROVE_BASE_BIN (an older build, for before/after) with the same config
#   ROUNDS         interleaved rounds (default 2)        DURATION   seconds per window (default 10)
#   DELAY          the origin's answer time, s (0.5)     TIMEOUT    generator timeout, s (5)
#   MISS_RATES     default "256 384 512 640 768 1024"    HIT_SIDE_RATE  default 1000
#   HIT_RATES      default "4000 8000 12000 16000 20000 24000"
#   CONNECTIONS    the generator's connection cap (default 4000)
#   BURST          clients in the burst scenario (default 5000)
#   LOAD_CPU (0)  SERVER_CPU (1)
#   RESULTS        where raw outputs and report.md go (default bench/overload/results/<UTC time>)
#   RUN_BASE       where the temp run dir goes (default /dev/shm)
#   BUILD          1 (default) builds trove with cargo first; 0 uses TROVE_BIN as it is
#   TROVE_BIN      default <cargo target dir>/release/trove
#   KEEP_RUN       1 keeps the temp run dir (configs, logs)
#
# Everything this script starts runs in its own process group and is stopped by that id on exit.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

TARGETS=${TARGETS:-"trove nginx"}
SCENARIOS=${SCENARIOS:-"miss hit burst"}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10}
DELAY=${DELAY:-0.5}
TIMEOUT=${TIMEOUT:-5}
MISS_RATES=${MISS_RATES:-"256 384 512 640 768 1024"}
HIT_SIDE_RATE=${HIT_SIDE_RATE:-1000}
HIT_RATES=${HIT_RATES:-"4000 8000 12000 16000 20000 24000"}
CONNECTIONS=${CONNECTIONS:-4000}
BURST=${BURST:-5000}
TROVE_BASE_BIN=${TROVE_BASE_BIN:-}
LOAD_CPU=${LOAD_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
RESULTS=${RESULTS:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}
RUN_BASE=${RUN_BASE:-/dev/shm}
BUILD=${BUILD:-1}
KEEP_RUN=${KEEP_RUN:-0}
CARGO_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TROVE_BIN=${TROVE_BIN:-$CARGO_TARGET/release/trove}

ORIGIN_PORT=18180
TROVE_PORT=18190
TROVE_ADMIN=18199
BASE_PORT=18192
BASE_ADMIN=18198
NGINX_PORT=18181

declare -A PGIDS=()
RUN=""

log() { printf '[overload %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

stop_group() {
    local pgid=$1 i
    kill -TERM -- "-$pgid" 2>/dev/null || return 0
    for i in $(seq 1 50); do
        kill -0 -- "-$pgid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "process group $pgid ignored SIGTERM for 5 s; sending SIGKILL"
    kill -KILL -- "-$pgid" 2>/dev/null || true
}

cleanup() {
    local status=$? name
    trap - EXIT INT TERM
    for name in "${!PGIDS[@]}"; do stop_group "${PGIDS[$name]}"; done
    if [[ -n $RUN && -d $RUN ]]; then
        if [[ $KEEP_RUN == 1 ]]; then log "kept the run dir $RUN"; else rm -rf "$RUN"; fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start "$@" in its own process group pinned to SERVER_CPU; remember its id under $1.
launch() {
    local name=$1 out=$2
    shift 2
    setsid taskset -c "$SERVER_CPU" "$@" >"$out" 2>&1 </dev/null &
    PGIDS[$name]=$!
}

render() { # template port output [admin-port] [name]
    sed -e "s|@RUN@|$RUN|g" -e "s|@ORIGIN_PORT@|$ORIGIN_PORT|g" -e "s|@ADMIN_PORT@|${4:-$TROVE_ADMIN}|g" \
        -e "s|@PORT@|$2|g" -e "s|/trove/access.log|/${5:-trove}/access.log|g" "$1" >"$3"
}

wait_port() { # port
    local i
    for i in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    die "nothing listens on 127.0.0.1:$1 after 10 s"
}

port_of() { case $1 in trove) echo $TROVE_PORT ;; trove-base) echo $BASE_PORT ;; nginx) echo $NGINX_PORT ;; *) die "unknown target $1" ;; esac; }
admin_of() { case $1 in trove) echo $TROVE_ADMIN ;; trove-base) echo $BASE_ADMIN ;; esac; }

# A TcpExt counter of /proc/net/netstat (machine-wide).
tcpext() {
    awk -v k="$1" '/^TcpExt:/ { if (!h) { for (i = 2; i <= NF; i++) n[i] = $i; h = 1 } else { for (i = 2; i <= NF; i++) if (n[i] == k) print $i } }' /proc/net/netstat
}

# Origin requests a target has sent so far: trove's counter, nginx's log lines that went upstream.
origin_requests() {
    case $1 in
        trove | trove-base) curl -s "http://127.0.0.1:$(admin_of "$1")/metrics" | awk '$1 == "trove_origin_requests_total" { print $2 }' ;;
        nginx) sleep 0.3; awk '$2 != "HIT" && $2 != "-" { n++ } END { print n + 0 }' "$RUN/nginx/access.log" ;;
    esac
}
# CPU seconds (user + system) used so far by every process of a launched group.
group_cpu() {
    local pgid=${PGIDS[$1]} pid total=0 tick
    tick=$(getconf CLK_TCK)
    for pid in $(ps -e -o pid=,pgid= | awk -v g="$pgid" '$2 == g { print $1 }'); do
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    awk -v t="$total" -v k="$tick" 'BEGIN { printf "%.2f", t / k }'
}
trove_shed() { curl -s "http://127.0.0.1:$TROVE_ADMIN/metrics" | awk '$1 == "trove_shed_requests_total" { print $2 }'; }

gen() { # label json rate path extra-args...
    local label=$1 json=$2 rate=$3 path=$4 target=$5
    shift 5
    taskset -c "$LOAD_CPU" "$TROVE_BIN" bench rate --target "127.0.0.1:$(port_of "$target")" \
        --path "$path" --rate "$rate" --duration "$DURATION" --timeout "$TIMEOUT" \
        --connections "$CONNECTIONS" --label "$label" --json "$json" "$@"
}

# ---------------------------------------------------------------------------------------------

for tool in nginx curl taskset setsid; do command -v "$tool" >/dev/null || die "$tool is not installed"; done
if [[ $BUILD == 1 ]]; then
    log "building trove (release)"
    (cd "$ROOT" && cargo build --release -j 2 -p trove >&2)
fi
[[ -x $TROVE_BIN ]] || die "no trove binary at $TROVE_BIN"
ulimit -n "$(ulimit -Hn)"   # thousands of connections on each side

mkdir -p "$RESULTS"
RUN=$(mktemp -d "$RUN_BASE/trove-overload.XXXXXX")
chmod 755 "$RUN"
log "results in $RESULTS; run dir $RUN"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "nginx: $(nginx -v 2>&1 | sed 's/.*: //')"
    echo "kernel: $(uname -r); somaxconn $(cat /proc/sys/net/core/somaxconn); loadavg before: $(cat /proc/loadavg)"
    echo "settings: TARGETS='$TARGETS' SCENARIOS='$SCENARIOS' ROUNDS=$ROUNDS DURATION=$DURATION DELAY=$DELAY MISS_RATES='$MISS_RATES' HIT_SIDE_RATE=$HIT_SIDE_RATE HIT_RATES='$HIT_RATES' CONNECTIONS=$CONNECTIONS"
} >"$RESULTS/env.txt"

mkdir -p "$RUN/origin" "$RUN/trove" "$RUN/nginx/tmp" "$RUN/nginx/cache"
chown -R nobody:nogroup "$RUN/nginx" 2>/dev/null || true
launch origin "$RUN/origin/stderr" "$TROVE_BIN" bench slow-origin --listen "127.0.0.1:$ORIGIN_PORT" \
    --delay "$DELAY" --size 1024 --cacheable-prefix /hit --max-time 7200
wait_port $ORIGIN_PORT
for target in $TARGETS; do
    case $target in
        trove)
            render "$HERE/trove.toml" $TROVE_PORT "$RUN/trove/trove.toml"
            launch trove "$RUN/trove/stderr" "$TROVE_BIN" serve --config "$RUN/trove/trove.toml"
            ;;
        trove-base)
            [[ -x $TROVE_BASE_BIN ]] || die "trove-base needs TROVE_BASE_BIN"
            mkdir -p "$RUN/trove-base"
            render "$HERE/trove.toml" $BASE_PORT "$RUN/trove-base/trove.toml" $BASE_ADMIN trove-base
            launch trove-base "$RUN/trove-base/stderr" "$TROVE_BASE_BIN" serve --config "$RUN/trove-base/trove.toml"
            ;;
        nginx)
            render "$HERE/nginx.conf" $NGINX_PORT "$RUN/nginx/nginx.conf"
            launch nginx "$RUN/nginx/stderr" nginx -p "$RUN/nginx/" -c "$RUN/nginx/nginx.conf" -e "$RUN/nginx/error.log"
            ;;
        *) die "unknown target $target" ;;
    esac
    wait_port "$(port_of "$target")"
    # Fill the cache: the hit path's object, one slow miss, under the Host the generator sends
    # (trove keys by it; nginx by the upstream's name).
    curl -s -o /dev/null -H "Host: localhost" "http://127.0.0.1:$(port_of "$target")/hit"
    curl -s -o /dev/null -H "Host: localhost" "http://127.0.0.1:$(port_of "$target")/hit"
done

RAW=$RESULTS/raw.jsonl
WINDOWS=$RESULTS/windows.tsv
printf 'scenario\trate\tround\ttarget\torigin_requests\ttrove_shed\tserver_cpu_s\tlisten_overflows\tsyncookies\n' >"$WINDOWS"

window() { # scenario rate round target
    local scenario=$1 rate=$2 round=$3 target=$4 o0 o1 s0 s1 c0 c1 v0 v1 k0 k1 side_pid=""
    o0=$(origin_requests "$target")
    c0=$(group_cpu "$target")
    v0=$(tcpext ListenOverflows)
    k0=$(tcpext SyncookiesSent)
    s0=$([[ $target == trove ]] && trove_shed || echo 0)
    case $scenario in
        miss)
            gen "$target hit-side $rate $round" "$RAW" "$HIT_SIDE_RATE" /hit "$target" >>"$RESULTS/gen.txt" &
            side_pid=$!
            gen "$target miss $rate $round" "$RAW" "$rate" "/miss/$round-$rate-{n}" "$target" >>"$RESULTS/gen.txt"
            wait "$side_pid"
            ;;
        hit)
            gen "$target hit $rate $round" "$RAW" "$rate" /hit "$target" --close >>"$RESULTS/gen.txt"
            ;;
        burst)
            # `rate` clients due within 50 ms, as many connections, 10 s to be served.
            taskset -c "$LOAD_CPU" "$TROVE_BIN" bench rate --target "127.0.0.1:$(port_of "$target")" \
                --path /hit --rate $((rate * 20)) --duration 0.05 --timeout 10 --connections "$rate" \
                --close --label "$target burst $rate $round" --json "$RAW" >>"$RESULTS/gen.txt"
            ;;
    esac
    v1=$(tcpext ListenOverflows)
    k1=$(tcpext SyncookiesSent)
    c1=$(group_cpu "$target")
    o1=$(origin_requests "$target")
    s1=$([[ $target == trove ]] && trove_shed || echo 0)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scenario" "$rate" "$round" "$target" \
        "$(awk -v a="$o0" -v b="$o1" 'BEGIN { print b - a }')" "$(awk -v a="$s0" -v b="$s1" 'BEGIN { print b - a }')" \
        "$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" $((v1 - v0)) $((k1 - k0)) >>"$WINDOWS"
    tail -n 1 "$RESULTS/gen.txt" >&2
    sleep 1 # let the server's queues and the origin drain before the next window
}

for scenario in $SCENARIOS; do
    case $scenario in miss) rates=$MISS_RATES ;; hit) rates=$HIT_RATES ;; burst) rates=$BURST ;; *) die "unknown scenario $scenario" ;; esac
    for rate in $rates; do
        for round in $(seq 1 "$ROUNDS"); do
            for target in $TARGETS; do
                log "$scenario $rate/s round $round: $target"
                window "$scenario" "$rate" "$round" "$target"
            done
        done
    done
done

echo "loadavg after: $(cat /proc/loadavg)" >>"$RESULTS/env.txt"
for name in origin; do stop_group "${PGIDS[$name]}"; unset "PGIDS[$name]"; done
cp "$RUN/origin/stderr" "$RESULTS/origin.txt" 2>/dev/null || true
python3 "$HERE/report.py" "$RESULTS" >"$RESULTS/report.md"
cat "$RESULTS/report.md"
