#!/usr/bin/env bash
# bench/slow-readers/run.sh: memory of trove and nginx (a reverse-proxy cache) while slow clients
# read a large chunked response, side by side on this machine (issue 7).
#
# For each target in turn: start the origin (origin.py: a chunked 1 GiB body with a strong ETag,
# Range answered), start the proxy in front of it, measure its RSS idle, then run CLIENTS slow
# clients (slow_clients.py: client i starts at i*STAGGER s and reads at RATE bytes/s for DURATION s
# through a 64 KiB receive buffer, checking every byte), sampling the proxy's RSS (summed over its
# processes) and, for trove, its trove_body_buffered_bytes and trove_store_bytes every 0.5 s; then
# RSS 5 s after the clients left. nginx's cache and temp files live on disk (RUN_BASE, not tmpfs),
# and their size is reported beside its RSS. Prints a markdown table; keeps the raw samples.
#
#   bash bench/slow-readers/run.sh
#   TARGETS="trove trove-base nginx" TROVE_BASE_BIN=/path/to/older/trove bash bench/slow-readers/run.sh
#
# Settings (environment):
#   TARGETS        in order (default "trove nginx"; "trove-base" runs TROVE_BASE_BIN, an older build;
#                  "trove-disk" runs trove with a disk tier (trove-disk.toml): the body is written
#                  to disk as it arrives and clients behind the window read it back from there)
#   CLIENTS        slow clients (default 16)
#   RATE           bytes/s each client reads (default 2097152: 2 MiB/s, so the first reader passes
#                  trove's max_object of 64 MiB half way through)
#   DURATION       seconds each client reads (default 60)
#   STAGGER        seconds between client starts (default 0.5)
#   SIZE           body bytes (default 1073741824: 1 GiB)
#   DISTINCT       1: client i asks for /big/i (a fetch each); default 0: all ask for /big
#   ETAG           1 (default): the origin sends a strong ETag and answers Range; 0: neither
#   LOAD_CPU       CPU for the origin and the clients (default 0)
#   SERVER_CPU     CPU for the proxy under test (default 1)
#   RESULTS        where samples and report.md go (default bench/slow-readers/results/<UTC time>)
#   RUN_BASE       where the temp run dir goes (default /tmp: on disk)
#   BUILD          1 (default) builds trove (release) with cargo first; 0 uses TROVE_BIN as is
#   TROVE_BIN      trove binary (default: <cargo target dir>/release/trove)
#   TROVE_BASE_BIN the binary for target trove-base
#
# Loopback only (ports 18280 origin, 18281 nginx, 18290/18291 trove), bounded in time (every client
# stops after STAGGER*CLIENTS + DURATION + 10 s), and everything it starts runs in its own process
# group, stopped by that id on exit.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

TARGETS=${TARGETS:-"trove nginx"}
CLIENTS=${CLIENTS:-16}
RATE=${RATE:-2097152}
DURATION=${DURATION:-60}
STAGGER=${STAGGER:-0.5}
SIZE=${SIZE:-1073741824}
DISTINCT=${DISTINCT:-0}
ETAG=${ETAG:-1}
LOAD_CPU=${LOAD_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
RESULTS=${RESULTS:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}
RUN_BASE=${RUN_BASE:-/tmp}
BUILD=${BUILD:-1}
CARGO_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TROVE_BIN=${TROVE_BIN:-$CARGO_TARGET/release/trove}
TROVE_BASE_BIN=${TROVE_BASE_BIN:-}

ORIGIN_PORT=18280
NGINX_PORT=18281
TROVE_PORT=18290
TROVE_ADMIN=18291

declare -A PGIDS=() # name -> process-group id
RUN=""
PORT=""

log() { printf '[slow-readers %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
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

stop() { # name
    if [[ -n ${PGIDS[$1]:-} ]]; then
        stop_group "${PGIDS[$1]}"
        unset "PGIDS[$1]"
    fi
}

cleanup() {
    local status=$? name
    trap - EXIT INT TERM
    for name in "${!PGIDS[@]}"; do stop_group "${PGIDS[$name]}"; done
    if [[ -n $RUN && -d $RUN ]]; then rm -rf "$RUN"; fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start "$@" in its own process group pinned to CPU $2; remember it as $1.
launch() {
    local name=$1 cpu=$2 out=$3
    shift 3
    setsid taskset -c "$cpu" "$@" >"$out" 2>&1 </dev/null &
    PGIDS[$name]=$!
}

group_pids() { ps -e -o pid=,pgid= | awk -v g="$1" '$2 == g { print $1 }'; }

# RSS in KiB summed over the processes of a group.
group_rss() {
    local pid rss=0 r
    for pid in $(group_pids "$1"); do
        r=$(awk '/^VmRSS:/ { print $2 }' /proc/"$pid"/status 2>/dev/null || true)
        rss=$((rss + ${r:-0}))
    done
    echo "$rss"
}

port_in_use() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

wait_listening() { # port seconds
    local deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        port_in_use "$1" && return 0
        sleep 0.2
    done
    return 1
}

metric() { # name (with its labels, if any): trove's value, or - if it has no such metric
    curl -s --max-time 2 "http://127.0.0.1:$TROVE_ADMIN/metrics" 2>/dev/null |
        awk -v n="$1" '$1 == n { print $2; found = 1 } END { if (!found) print "-" }'
}

mib() { awk -v k="$1" 'BEGIN { if (k == "-") print "-"; else printf "%.1f", k / 1024 }'; }

start_origin() {
    local flags=()
    [[ $ETAG == 1 ]] && flags+=(--etag)
    launch origin "$LOAD_CPU" "$RUN/origin.out" python3 "$HERE/origin.py" --port "$ORIGIN_PORT" \
        --size "$SIZE" "${flags[@]}"
    wait_listening "$ORIGIN_PORT" 10 || die "the origin did not start ($(cat "$RUN/origin.out"))"
}

render() { # template out
    sed -e "s|@RUN@|$RUN|g" -e "s|@ORIGIN@|$ORIGIN_PORT|g" -e "s|@PORT@|$2|g" \
        -e "s|@ADMIN@|$TROVE_ADMIN|g" "$1" >"$3"
}

start_target() { # target; sets PORT (not run in a subshell: launch must record the group)
    local t=$1 bin
    case $t in
        trove | trove-base | trove-disk)
            bin=$TROVE_BIN
            [[ $t == trove-base ]] && bin=$TROVE_BASE_BIN
            [[ -x $bin ]] || die "no binary for $t ($bin)"
            mkdir -p "$RUN/trove"
            local conf=$HERE/trove.toml
            [[ $t == trove-disk ]] && conf=$HERE/trove-disk.toml
            render "$conf" "$TROVE_PORT" "$RUN/trove/trove.toml"
            "$bin" serve --check --config "$RUN/trove/trove.toml" >/dev/null 2>&1 ||
                die "$t refused its config"
            launch "$t" "$SERVER_CPU" "$RUN/trove/stdout" "$bin" serve --config "$RUN/trove/trove.toml"
            wait_listening "$TROVE_PORT" 20 || die "$t did not start"
            wait_listening "$TROVE_ADMIN" 20 || die "$t's admin listener did not start"
            PORT=$TROVE_PORT
            ;;
        nginx)
            mkdir -p "$RUN/nginx/tmp" "$RUN/nginx/cache"
            chown nobody:nogroup "$RUN/nginx/tmp" "$RUN/nginx/cache"
            render "$HERE/nginx.conf" "$NGINX_PORT" "$RUN/nginx/nginx.conf"
            launch nginx "$SERVER_CPU" "$RUN/nginx/stdout" nginx -p "$RUN/nginx/" \
                -c "$RUN/nginx/nginx.conf" -e "$RUN/nginx/error.log"
            wait_listening "$NGINX_PORT" 20 || die "nginx did not start ($(cat "$RUN/nginx/error.log"))"
            PORT=$NGINX_PORT
            ;;
        *) die "unknown target $t" ;;
    esac
}

# ---------------------------------------------------------------------------------------------

command -v python3 >/dev/null || die "python3 is needed"
for p in $ORIGIN_PORT $NGINX_PORT $TROVE_PORT $TROVE_ADMIN; do
    port_in_use "$p" && die "port $p is in use by another process"
done
if [[ $BUILD == 1 ]]; then
    log "building trove (release)"
    (cd "$ROOT" && cargo build --release -p trove -q)
fi
mkdir -p "$RESULTS"
RUN=$(mktemp -d "$RUN_BASE/trove-slow-readers.XXXXXX")
chmod 755 "$RUN"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && echo "+dirty" || true)
client_flags=(--clients "$CLIENTS" --rate "$RATE" --duration "$DURATION" --stagger "$STAGGER")
[[ $DISTINCT == 1 ]] && client_flags+=(--distinct)

rows=()
for t in $TARGETS; do
    log "$t: starting"
    start_origin
    start_target "$t"
    port=$PORT
    sleep 1
    pgid=${PGIDS[$t]}
    idle=$(group_rss "$pgid")
    samples=$RESULTS/$t.samples
    echo "# t_s rss_kib body_buffered_bytes store_bytes" >"$samples"
    launch clients "$LOAD_CPU" "$RESULTS/$t.clients.json" python3 "$HERE/slow_clients.py" \
        --port "$port" "${client_flags[@]}"
    cpgid=${PGIDS[clients]}
    peak=0
    peak_buffered=-
    t0=$SECONDS
    # The client driver's PID (its group may not exist yet the moment it was forked).
    while kill -0 "$cpgid" 2>/dev/null; do
        rss=$(group_rss "$pgid")
        ((rss > peak)) && peak=$rss
        buffered=-
        store=-
        if [[ $t == trove* ]]; then
            buffered=$(metric trove_body_buffered_bytes)
            store=$(metric trove_store_bytes)
            if [[ $buffered != - ]]; then
                if [[ $peak_buffered == - ]] || ((buffered > peak_buffered)); then
                    peak_buffered=$buffered
                fi
            fi
        fi
        echo "$((SECONDS - t0)) $rss $buffered $store" >>"$samples"
        sleep 0.5
    done
    unset "PGIDS[clients]"
    end=$(group_rss "$pgid")
    disk=-
    if [[ $t == nginx ]]; then disk=$(du -sk "$RUN/nginx/cache" "$RUN/nginx/tmp" | awk '{ s += $1 } END { print s }'); fi
    if [[ $t == trove-disk ]]; then disk=$(metric trove_disk_write_bytes_total | awk '{ printf "%d", $1 / 1024 }'); fi
    detached=-
    if [[ $t == trove* ]]; then
        resumed=$(metric 'trove_body_readers_detached_total{outcome="resumed"}')
        cutoff=$(metric 'trove_body_readers_detached_total{outcome="cut-off"}')
        [[ $resumed == - ]] || detached="$resumed / $cutoff"
    fi
    origin_requests=$(grep -c '^request' "$RUN/origin.out" || true)
    sleep 5
    after=$(group_rss "$pgid")
    read -r got cut bad < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["total_bytes"], d["cut"], d["bad"])' "$RESULTS/$t.clients.json")
    rows+=("| $t | $(mib "$idle") | $(mib "$peak") | $(mib "$end") | $(mib "$after") | $([[ $disk == - ]] && echo - || mib "$disk") | $([[ $peak_buffered == - ]] && echo - || mib $((peak_buffered / 1024))) | $(mib $((got / 1024))) | $cut | $bad | $detached | $origin_requests |")
    log "$t: idle $(mib "$idle") MiB, peak $(mib "$peak") MiB, after $(mib "$after") MiB"
    stop "$t"
    stop origin
    rm -rf "${RUN:?}"/*
done

{
    echo "$(date -u +%Y-%m-%d) commit $COMMIT$DIRTY: $CLIENTS clients, $RATE B/s each for ${DURATION} s, started ${STAGGER} s apart, one ${SIZE}-byte chunked object (DISTINCT=$DISTINCT ETAG=$ETAG)"
    echo
    echo "| target | RSS idle MiB | RSS peak MiB | RSS at end MiB | RSS 5 s after MiB | on disk MiB (nginx: cache+temp files; trove-disk: bytes written) | peak trove_body_buffered MiB | read by clients MiB | clients cut off | bad bytes | trove detached: resumed / cut off | origin requests |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
} | tee "$RESULTS/report.md"
