#!/usr/bin/env bash
# bench/hits/run.sh: cached-hit throughput of trove and its peers, side by side, on this machine.
#
# Implements the project's MEASURING.md (see README.md for how): wrk on CPU 0, every server on
# CPU 1, one core per proxy, interleaved rounds, a warm-up before every window, two ceilings measured
# in the same run, origin requests counted during every measured window, RSS after the run, and an
# optional idle-connection test. Prints a markdown table; keeps every raw wrk output.
#
#   TARGETS="nginx nginx-nopush varnish squid ats trove" ROUNDS=3 DURATION=10s bash bench/hits/run.sh
#
# Settings (environment):
#   TARGETS      proxies to measure, in round order (default: the six above; `nginx-nosendfile` is a
#                seventh, nginx's compiled-in defaults). The two ceilings,
#                `origin` (nginx serving the file straight) and `ceiling` (trove-ceiling), are always
#                measured first in every round.
#   SIZES        object sizes (default "1k 100k"; also 1m)
#   ROUNDS       interleaved rounds (default 3; MEASURING.md asks for at least 3)
#   DURATION     wrk -d per window (default 10s)
#   CONNS        wrk -c (default 50)            WRK_THREADS  wrk -t (default 1)
#   WARMUP       requests sent before each window to fill the cache (default 3)
#   IDLE_CONNS   if > 0, afterwards hold this many idle keep-alive connections to each proxy and
#                measure it again (default 0: skipped)
#   IDLE_TARGETS targets for the idle test (default: $TARGETS)
#   LOAD_CPU     CPU for wrk and the idle holder (default 0)
#   SERVER_CPU   CPU for the origin and every server under test (default 1)
#   RESULTS      where raw outputs and report.md go (default bench/hits/results/<UTC time>)
#   RUN_BASE     where the temp run dir goes (default /dev/shm: caches, logs and docroot in memory)
#   BUILD        1 (default) builds trove and trove-ceiling with cargo first; 0 uses existing binaries
#   TROVE_BIN    trove binary (default: <cargo target dir>/release/trove)
#   TROVE_BASE_BIN  a second trove binary, the target `trove-base` (same config, port 18095): an
#                earlier commit measured in the same run, for paired before/after ratios, e.g.
#                TARGETS="trove-base trove" TROVE_BASE_BIN=/tmp/base/release/trove
#   CEILING_BIN  trove-ceiling binary (default: <cargo target dir>/release/trove-ceiling)
#   KEEP_RUN     1 keeps the temp run dir (configs, logs) after the run, for debugging
#
# Everything this script starts runs in its own process group and is stopped by that id on exit.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PEERS=$HERE/peers

TARGETS=${TARGETS:-"nginx nginx-nopush varnish squid ats trove"}
SIZES=${SIZES:-"1k 100k"}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
WRK_THREADS=${WRK_THREADS:-1}
WARMUP=${WARMUP:-3}
IDLE_CONNS=${IDLE_CONNS:-0}
IDLE_TARGETS=${IDLE_TARGETS:-$TARGETS}
LOAD_CPU=${LOAD_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
RESULTS=${RESULTS:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}
RUN_BASE=${RUN_BASE:-/dev/shm}
BUILD=${BUILD:-1}
KEEP_RUN=${KEEP_RUN:-0}
CARGO_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TROVE_BIN=${TROVE_BIN:-$CARGO_TARGET/release/trove}
CEILING_BIN=${CEILING_BIN:-$CARGO_TARGET/release/trove-ceiling}

ORIGIN_PORT=18080
CEILING_PORT_1k=18091
CEILING_PORT_100k=18092
CEILING_PORT_1m=18093

declare -A PGIDS=()      # target -> space-separated process-group ids it runs as
declare -A SKIPPED=()    # target -> why it was not measured
declare -A CEILING_PID=() # size -> the trove-ceiling instance serving it
HOLDER_PID=""
RUN=""

log() { printf '[hits %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Process control: every server is started as `setsid taskset -c CPU cmd &`, so its PID is also
# its process-group id and the whole tree (nginx workers, varnish child) is stopped by that id.

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
    local status=$? target pgid
    trap - EXIT INT TERM
    if [[ -n $HOLDER_PID ]]; then kill -TERM "$HOLDER_PID" 2>/dev/null || true; fi
    for target in "${!PGIDS[@]}"; do
        for pgid in ${PGIDS[$target]}; do stop_group "$pgid"; done
    done
    if [[ -n $RUN && -d $RUN ]]; then
        if [[ $KEEP_RUN == 1 ]]; then log "kept the run dir $RUN"; else rm -rf "$RUN"; fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Start "$@" in its own process group pinned to SERVER_CPU; remember it under target $1.
launch() {
    local target=$1 out=$2
    shift 2
    setsid taskset -c "$SERVER_CPU" "$@" >"$out" 2>&1 </dev/null &
    PGIDS[$target]="${PGIDS[$target]:-} $!"
}

group_pids() { ps -e -o pid=,pgid= | awk -v g="$1" '$2 == g { print $1 }'; }

target_pids() {
    local pgid
    for pgid in ${PGIDS[$1]:-}; do group_pids "$pgid"; done
}

# Re-pin every thread of a target to SERVER_CPU. Some servers set their own affinity after start
# (Traffic Server binds its net thread to the whole machine even with exec_thread.affinity 0), which
# would silently let them use the load generator's core.
pin_target() {
    local pid
    for pid in $(target_pids "$1"); do taskset -a -p -c "$SERVER_CPU" "$pid" >/dev/null 2>&1 || true; done
}

# Threads of a target allowed anywhere but SERVER_CPU (printed as "comm:cpus"); empty when pinned.
unpinned_threads() {
    local pid task cpus
    for pid in $(target_pids "$1"); do
        for task in /proc/"$pid"/task/*; do
            cpus=$(awk '/^Cpus_allowed_list/ { print $2 }' "$task/status" 2>/dev/null) || continue
            [[ -z $cpus || $cpus == "$SERVER_CPU" ]] || printf '%s:%s ' "$(tr ' ' _ <"$task/comm")" "$cpus"
        done
    done
}

# Memory of a target after the run: RSS summed over its processes (what MEASURING.md asks), and
# PSS (shared pages divided among the processes that map them) for reference. In KiB.
target_memory() {
    local pid rss=0 pss=0 r p
    for pid in $(target_pids "$1"); do
        r=$(awk '/^VmRSS:/ { print $2 }' /proc/"$pid"/status 2>/dev/null || true)
        p=$(awk '/^Pss:/ { print $2 }' /proc/"$pid"/smaps_rollup 2>/dev/null || true)
        rss=$((rss + ${r:-0}))
        pss=$((pss + ${p:-0}))
    done
    echo "$rss $pss"
}

port_in_use() { ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# Poll (with a deadline) until the port answers HTTP (any status) for the given path.
wait_http() {
    local port=$1 path=$2 deadline=$((SECONDS + ${3:-30}))
    while ((SECONDS < deadline)); do
        if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port$path"; then return 0; fi
        sleep 0.2
    done
    return 1
}

render() { # template out [sed expressions...]
    local template=$1 out=$2
    shift 2
    sed -e "s|@RUN@|$RUN|g" "$@" "$template" >"$out"
}

# ---------------------------------------------------------------------------------------------
# Targets. port_of TARGET SIZE; start_TARGET starts it (and returns non-zero to skip it).

port_of() {
    case $1 in
        origin) echo $ORIGIN_PORT ;;
        ceiling) case $2 in 1k) echo $CEILING_PORT_1k ;; 1m) echo $CEILING_PORT_1m ;; *) echo $CEILING_PORT_100k ;; esac ;;
        nginx) echo 18081 ;;
        varnish) echo 18082 ;;
        squid) echo 18083 ;;
        ats) echo 18084 ;;
        nginx-nopush) echo 18085 ;;
        nginx-nosendfile) echo 18086 ;;
        trove) echo 18090 ;;
        trove-base) echo 18095 ;;
        *) die "unknown target $1" ;;
    esac
}

bytes_of() { case $1 in 1k) echo 1024 ;; 100k) echo 102400 ;; 1m) echo 1048576 ;; *) die "unknown size $1 (use 1k, 100k, 1m)" ;; esac; }

start_origin() {
    local dir=$RUN/origin
    mkdir -p "$dir/tmp"
    chown nobody:nogroup "$dir/tmp"
    render "$PEERS/origin.conf" "$dir/nginx.conf"
    launch origin "$dir/stdout" nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log"
}

start_ceiling() {
    local size
    [[ -x $CEILING_BIN ]] || { echo "no trove-ceiling binary at $CEILING_BIN"; return 1; }
    mkdir -p "$RUN/ceiling"
    for size in $SIZES; do
        launch ceiling "$RUN/ceiling/$size.log" "$CEILING_BIN" \
            --addr "127.0.0.1:$(port_of ceiling "$size")" --size "$(bytes_of "$size")"
        CEILING_PID[$size]=$!
    done
}

start_nginx_instance() { # name port sendfile nopush
    local name=$1 dir=$RUN/$1
    mkdir -p "$dir/tmp" "$dir/cache"
    chown nobody:nogroup "$dir/tmp" "$dir/cache"
    render "$PEERS/nginx-proxy.conf" "$dir/nginx.conf" \
        -e "s|@NAME@|$name|g" -e "s|@PORT@|$2|g" -e "s|@SENDFILE@|$3|g" -e "s|@NOPUSH@|$4|g"
    launch "$name" "$dir/stdout" nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log"
}
# The three sendfile/tcp_nopush settings: see the header of peers/nginx-proxy.conf.
start_nginx() { start_nginx_instance nginx 18081 on off; }
start_nginx-nopush() { start_nginx_instance nginx-nopush 18085 on on; }
start_nginx-nosendfile() { start_nginx_instance nginx-nosendfile 18086 off off; }

start_varnish() {
    local dir=$RUN/varnish
    mkdir -p "$dir"
    render "$PEERS/varnish.vcl" "$dir/varnish.vcl"
    # Flags: see the header of peers/varnish.vcl, which explains each one.
    launch varnish "$dir/stdout" varnishd -F -j none -n "$dir" -a 127.0.0.1:18082 -T none \
        -f "$dir/varnish.vcl" -s malloc,256m -p thread_pools=1 -p timeout_idle=600
}

start_squid() {
    local dir=$RUN/squid
    mkdir -p "$dir"
    render "$PEERS/squid.conf" "$dir/squid.conf"
    chown -R proxy:proxy "$dir"
    launch squid "$dir/stdout" squid -N -f "$dir/squid.conf"
}

start_ats() {
    local dir=$RUN/ats file
    mkdir -p "$dir/etc" "$dir/cache" "$dir/log" "$dir/run" "$dir/var"
    for file in "$PEERS"/trafficserver/*; do render "$file" "$dir/etc/$(basename "$file")"; done
    # Config files ATS reads but the benchmark does not need: present and empty, so the diags log
    # shows only what matters.
    for file in plugin.config cache.config hosting.config parent.config volume.config \
        sni.yaml ssl_multicert.config strategies.yaml splitdns.config socks.config; do
        [[ -e $dir/etc/$file ]] || : >"$dir/etc/$file"
    done
    # Point every ATS directory into the temp dir (the runroot mechanism of ATS 9).
    cat >"$dir/runroot.yaml" <<EOF
prefix: $dir
exec_prefix: /usr
bindir: /usr/bin
sbindir: /usr/sbin
sysconfdir: $dir/etc
datadir: $dir/var
includedir: /usr/include
libdir: /usr/lib/trafficserver
libexecdir: /usr/lib/trafficserver/modules
localstatedir: $dir/var
runtimedir: $dir/run
logdir: $dir/log
cachedir: $dir/cache
EOF
    chown -R trafficserver:trafficserver "$dir"
    launch ats "$dir/stdout" traffic_server --run-root="$dir/runroot.yaml"
}

start_trove() {
    local dir=$RUN/trove
    [[ -x $TROVE_BIN ]] || { echo "no trove binary at $TROVE_BIN (not built yet?)"; return 1; }
    mkdir -p "$dir"
    render "$PEERS/trove.toml" "$dir/trove.toml"
    if ! "$TROVE_BIN" serve --check --config "$dir/trove.toml" >"$dir/check.txt" 2>&1; then
        echo "trove serve --check refused peers/trove.toml: $(tr '\n' ' ' <"$dir/check.txt")"
        return 1
    fi
    launch trove "$dir/stdout" "$TROVE_BIN" serve --config "$dir/trove.toml"
}

# The same configuration on port 18095, run by $TROVE_BASE_BIN.
start_trove-base() {
    local dir=$RUN/trove-base
    [[ -x ${TROVE_BASE_BIN:-} ]] || { echo "no TROVE_BASE_BIN given (the binary to compare against)"; return 1; }
    mkdir -p "$dir"
    render "$PEERS/trove.toml" "$dir/trove.toml" -e "s|127.0.0.1:18090|127.0.0.1:18095|" -e "s|$RUN/trove/|$RUN/trove-base/|g"
    launch trove-base "$dir/stdout" "$TROVE_BASE_BIN" serve --config "$dir/trove.toml"
}

# Start a target and wait until it answers on every port it serves; on failure record why and stop it.
bring_up() {
    local target=$1 why size port
    for size in $SIZES; do
        port=$(port_of "$target" "$size")
        if port_in_use "$port"; then
            SKIPPED[$target]="port $port is already in use by another process"
            return 1
        fi
    done
    # Not in $(...): launch must record the PIDs in this shell.
    if ! "start_$target" >"$RUN/$target.start" 2>&1; then
        SKIPPED[$target]=$(cat "$RUN/$target.start")
        SKIPPED[$target]=${SKIPPED[$target]:-"could not be started"}
        return 1
    fi
    for size in $SIZES; do
        port=$(port_of "$target" "$size")
        if ! wait_http "$port" "/$size.bin" 30; then
            SKIPPED[$target]="did not answer HTTP on port $port within 30 s (see $RESULTS/logs/$target)"
            collect_logs "$target"
            for pgid in ${PGIDS[$target]:-}; do stop_group "$pgid"; done
            unset "PGIDS[$target]"
            return 1
        fi
    done
    pin_target "$target"
    log "$target is up (pids $(target_pids "$target" | tr '\n' ' '))"
}

collect_logs() {
    local src=$RUN/$1
    [[ -d $src ]] || return 0
    mkdir -p "$RESULTS/logs/$1"
    find "$src" -maxdepth 2 -type f \( -name '*.log' -o -name stdout -o -name 'error*' \) -size -5120k \
        ! -name 'access.log' ! -name 'squid.log' -exec cp {} "$RESULTS/logs/$1/" \; 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------
# Measuring.

origin_log_size() { stat -c %s "$RUN/origin/access.log"; }
origin_requests_since() { tail -c +"$(($1 + 1))" "$RUN/origin/access.log" | wc -l; }

# Fill the cache with WARMUP requests, checking status and length; then one more request must not
# reach the origin. Prints "ok", or what went wrong.
warm_up() {
    local target=$1 size=$2 url=$3 i got before
    for ((i = 0; i < WARMUP; i++)); do
        got=$(curl -s -o /dev/null --max-time 10 -w '%{http_code} %{size_download}' "$url" || true)
        if [[ $got != "200 $(bytes_of "$size")" ]]; then
            echo "warm-up got '$got' instead of '200 $(bytes_of "$size")'"
            return 0
        fi
    done
    [[ $target == origin || $target == ceiling ]] && { echo ok; return 0; }
    before=$(origin_log_size)
    curl -s -o /dev/null --max-time 10 "$url" || true
    if (($(origin_requests_since "$before") > 0)); then echo "not cached after $WARMUP requests"; else echo ok; fi
}

# Busy and total jiffies of the server CPU so far (from /proc/stat).
cpu_ticks() {
    awk -v c="cpu$SERVER_CPU" '$1 == c { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}

# Waits (30 s at most) until the server CPU is quiet: under 10% busy over half a second. A server
# that goes on working after its window (Traffic Server writing out its log, say) would otherwise
# do it during the next target's window, on the same CPU, and be counted against that target; it
# grows round by round as the logs grow, which is what once looked like trove slowing down.
settle_cpu() {
    local busy0 total0 busy1 total1 start=$SECONDS
    while ((SECONDS - start < 30)); do
        read -r busy0 total0 < <(cpu_ticks)
        sleep 0.5
        read -r busy1 total1 < <(cpu_ticks)
        if ((total1 > total0)) && (((busy1 - busy0) * 10 < (total1 - total0))); then
            ((SECONDS - start > 1)) && log "server CPU busy for $((SECONDS - start)) s after $1 $2"
            return 0
        fi
    done
    log "WARNING: server CPU still busy 30 s after $1 $2"
}

# A target's access log, if it writes one to a file.
access_log_of() {
    case $1 in
        origin | nginx | nginx-nopush | nginx-nosendfile | squid | trove | trove-base) echo "$RUN/$1/access.log" ;;
        ats) echo "$RUN/ats/log/squid.log" ;;
        *) echo "" ;;
    esac
}

# After a window (and once its CPU has settled, so buffered logs are out): count the cache statuses
# the target logged (count, status per line) into $RESULTS/status/<target>.txt, then truncate the log. Every
# server opens its log for appending (O_APPEND), so it goes on writing at the new end. Why: on this
# VM, writing into pages of memory not touched for a while costs several times what rewriting
# recently freed ones does (a 2 GB dd into /dev/shm took 0.6 s or 2.9 s, by which pages it got), so
# logs kept for the whole run made every logging server pay more round after round, and the one
# logging the most bytes per request (trove, Squid's native format) the most. Truncating after each
# window gives every round the same conditions. The origin's log is truncated too (its requests
# are counted by offset within one window).
drain_log() {
    local target=$1 file
    file=$(access_log_of "$target")
    [[ -n $file && -f $file ]] || return 0
    mkdir -p "$RESULTS/status"
    case $target in
        origin) ;;
        nginx | nginx-nopush | nginx-nosendfile) tr -d '\0' <"$file" | awk '{ c[$NF]++ } END { for (k in c) print c[k], k }' >>"$RESULTS/status/$target.txt" ;;
        *) tr -d '\0' <"$file" | awk '{ split($4, a, "/"); c[a[1]]++ } END { for (k in c) print c[k], k }' >>"$RESULTS/status/$target.txt" ;;
    esac
    : >"$file"
}

# One measured window: warm-up, origin count, wrk, origin count, then wait for the server CPU to
# settle and drain the target's log. Appends a line to samples.tsv.
measure() { # target size round label
    local target=$1 size=$2 round=$3 label=$4 port url raw before origin warm
    port=$(port_of "$target" "$size")
    url="http://127.0.0.1:$port/$size.bin"
    raw="$RESULTS/raw/$label-$target-$size.txt"
    warm=$(warm_up "$target" "$size" "$url")
    [[ $warm == ok ]] || log "WARNING: $target $size: $warm"
    before=$(origin_log_size)
    taskset -c "$LOAD_CPU" wrk -t"$WRK_THREADS" -c"$CONNS" -d"$DURATION" --latency "$url" >"$raw" 2>&1 || true
    origin=$(origin_requests_since "$before")
    if [[ $target != origin ]] && ((origin > 0)); then
        # Keep the offending requests: Via and the user agent say who sent them.
        tail -c +"$((before + 1))" "$RUN/origin/access.log" | head -1000 >"${raw%.txt}.origin-requests.txt"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$round" "$target" "$size" "$origin" "$warm" >>"$RESULTS/samples.tsv"
    log "$label $target $size: $(awk '/^Requests\/sec/ { print $2 }' "$raw") req/s, origin requests in window: $origin"
    settle_cpu "$target" "$size"
    drain_log "$target"
    [[ $target == origin ]] || drain_log origin
}

# ---------------------------------------------------------------------------------------------
# Setup.

# nginx is the origin whatever is measured; each peer's server only when it is a target.
tools="nginx wrk curl taskset setsid ss python3"
for t in $TARGETS; do
    case $t in
        varnish) tools+=" varnishd" ;;
        squid) tools+=" squid" ;;
        ats) tools+=" traffic_server" ;;
    esac
done
for tool in $tools; do
    command -v "$tool" >/dev/null || die "$tool is not installed (see bench/hits/README.md)"
done
(($(nproc) > LOAD_CPU && $(nproc) > SERVER_CPU)) || die "need CPUs $LOAD_CPU and $SERVER_CPU"
[[ $(id -u) == 0 ]] || die "run as root: the peers drop privileges to their own users"
ulimit -n "$(ulimit -Hn)" # for the idle-connection test: every server inherits it
((ROUNDS >= 1)) || die "ROUNDS must be at least 1"
for size in $SIZES; do bytes_of "$size" >/dev/null; done

mkdir -p "$RESULTS/raw" "$RESULTS/configs"
: >"$RESULTS/samples.tsv"
RUN=$(mktemp -d "$RUN_BASE/trove-hits.XXXXXX")
chmod 755 "$RUN"
log "results in $RESULTS, run dir $RUN"

if [[ $BUILD == 1 ]]; then
    log "building trove-ceiling"
    (cd "$ROOT" && cargo build --release -p trove-ceiling) >"$RESULTS/build-ceiling.log" 2>&1 ||
        log "building trove-ceiling failed (see $RESULTS/build-ceiling.log)"
    if [[ " $TARGETS " == *" trove "* ]]; then
        log "building trove"
        (cd "$ROOT" && cargo build --release -p trove) >"$RESULTS/build-trove.log" 2>&1 ||
            log "building trove failed; it will be skipped if there is no binary (see $RESULTS/build-trove.log)"
    fi
fi

mkdir -p "$RUN/www"
for size in $SIZES; do head -c "$(bytes_of "$size")" /dev/zero | tr '\0' x >"$RUN/www/$size.bin"; done

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty)')"
    echo "command: TARGETS=\"$TARGETS\" SIZES=\"$SIZES\" ROUNDS=$ROUNDS DURATION=$DURATION CONNS=$CONNS IDLE_CONNS=$IDLE_CONNS bash bench/hits/run.sh"
    echo "wrk: taskset -c $LOAD_CPU wrk -t$WRK_THREADS -c$CONNS -d$DURATION --latency URL"
    echo "machine: $(nproc) CPUs, $(uname -sr), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "servers on CPU $SERVER_CPU, load on CPU $LOAD_CPU"
    echo "nginx: $(nginx -v 2>&1 | sed 's/.*: //')"
    echo "varnish: $(varnishd -V 2>&1 | head -1)"
    echo "squid: $(squid -v | head -1)"
    echo "trafficserver: $(traffic_server -V 2>&1 | grep -m1 'Traffic Server')"
    echo "wrk: $(wrk -v 2>&1 | head -1)"
    echo "rustc: $(rustc -V 2>/dev/null || echo unknown)"
} >"$RESULTS/env.txt"

bring_up origin || die "the origin could not be started: ${SKIPPED[origin]}"
ALL=()
for target in ceiling $TARGETS; do
    if bring_up "$target"; then ALL+=("$target"); else log "SKIPPING $target: ${SKIPPED[$target]}"; fi
done
ALL=(origin "${ALL[@]}")
for target in "${!SKIPPED[@]}"; do printf '%s\t%s\n' "$target" "${SKIPPED[$target]}" >>"$RESULTS/skipped.tsv"; done
# Keep the configs exactly as rendered for this run (the files only: not caches or shared memory).
(cd "$RUN" && find "${ALL[@]}" -maxdepth 2 -type f -size -1024k \( -name '*.conf' -o -name '*.vcl' \
    -o -name '*.toml' -o -name '*.yaml' -o -name '*.config' \) -print0 2>/dev/null |
    xargs -0 -r cp --parents -t "$RESULTS/configs/") || true

# ---------------------------------------------------------------------------------------------
# The interleaved rounds: for each round, for each size, every target once, in the same order.

for ((round = 1; round <= ROUNDS; round++)); do
    for size in $SIZES; do
        for target in "${ALL[@]}"; do measure "$target" "$size" "$round" "r$round" || true; done
    done
done

# Memory, processes, threads and pinning after the run.
: >"$RESULTS/memory.tsv"
: >"$RESULTS/threads.tsv"
for target in "${ALL[@]}"; do
    if [[ $target == ceiling ]]; then
        # Two instances (one per size); report each one's own memory.
        for size in $SIZES; do
            pid=${CEILING_PID[$size]}
            r=$(awk '/^VmRSS:/ { print $2 }' /proc/"$pid"/status)
            p=$(awk '/^Pss:/ { print $2 }' /proc/"$pid"/smaps_rollup)
            printf '%s\t%s\t%s\t%s\t%s\n' after-run ceiling "$size" "$r" "$p" >>"$RESULTS/memory.tsv"
        done
    else
        read -r rss pss < <(target_memory "$target")
        printf '%s\t%s\t%s\t%s\t%s\n' after-run "$target" all "$rss" "$pss" >>"$RESULTS/memory.tsv"
    fi
    procs=0 threads=0
    for pid in $(target_pids "$target"); do
        procs=$((procs + 1))
        threads=$((threads + $(ls /proc/"$pid"/task 2>/dev/null | wc -l)))
    done
    printf '%s\t%s\t%s\n' "$target" "$procs" "$threads" >>"$RESULTS/threads.tsv"
    loose=$(unpinned_threads "$target")
    [[ -z $loose ]] || { log "WARNING: $target has threads off CPU $SERVER_CPU: $loose"; echo "$target $loose" >>"$RESULTS/unpinned.txt"; }
done

# ---------------------------------------------------------------------------------------------
# Idle connections: hold IDLE_CONNS idle keep-alive connections to one proxy at a time, then
# measure its hit rate and memory again.

if ((IDLE_CONNS > 0)); then
    : >"$RESULTS/idle.tsv"
    for target in $IDLE_TARGETS; do
        [[ -n ${PGIDS[$target]:-} ]] || continue
        port=$(port_of "$target" 1k)
        ready=$RUN/idle-$target.ready
        log "idle test: holding $IDLE_CONNS connections to $target"
        taskset -c "$LOAD_CPU" python3 "$HERE/idle_conns.py" --port "$port" --path /1k.bin \
            --count "$IDLE_CONNS" --ready "$ready" >"$RESULTS/raw/idle-$target-holder.txt" 2>&1 &
        HOLDER_PID=$!
        deadline=$((SECONDS + 300))
        while [[ ! -s $ready ]] && ((SECONDS < deadline)) && kill -0 "$HOLDER_PID" 2>/dev/null; do sleep 0.5; done
        if [[ ! -s $ready ]]; then
            log "WARNING: the idle holder for $target did not finish opening connections"
            kill -TERM "$HOLDER_PID" 2>/dev/null || true
            wait "$HOLDER_PID" 2>/dev/null || true
            HOLDER_PID=""
            continue
        fi
        sleep 2 # let the server settle into holding them
        read -r idle_rss idle_pss < <(target_memory "$target")
        for size in $SIZES; do measure "$target" "$size" idle "idle" || true; done
        read -r after_rss after_pss < <(target_memory "$target")
        kill -TERM "$HOLDER_PID" 2>/dev/null || true
        wait "$HOLDER_PID" 2>/dev/null || true
        HOLDER_PID=""
        held=$(tail -1 "$RESULTS/raw/idle-$target-holder.txt")
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$IDLE_CONNS" "$held" "$idle_rss" "$idle_pss" \
            "$after_rss" "$after_pss" >>"$RESULTS/idle.tsv"
        log "idle test $target: $held; RSS idle $idle_rss KiB, after hits $after_rss KiB"
        sleep 1
    done
fi

# ---------------------------------------------------------------------------------------------
# Audit: each proxy's own view of the run, from its access log (where it has one), and its logs.
# Traffic Server writes its log from a buffer every few seconds: give it time to catch up.

[[ -n ${PGIDS[ats]:-} ]] && sleep 6

{
    for target in "${ALL[@]}"; do
        [[ $target == origin || $target == ceiling ]] && continue
        drain_log "$target"
        [[ -f $RESULTS/status/$target.txt ]] || continue
        note=""
        [[ $target == ats ]] && note=" (buffered: the last seconds may be missing)"
        echo "$target: $(awk '{ c[$2] += $1 } END { for (k in c) print c[k], k }' "$RESULTS/status/$target.txt" | sort -k2 | tr '\n' ' ')$note"
    done
} >"$RESULTS/audit.txt" 2>/dev/null || true
for target in "${ALL[@]}"; do collect_logs "$target"; done

python3 "$HERE/report.py" "$RESULTS" | tee "$RESULTS/report.md"
log "raw wrk outputs in $RESULTS/raw, report in $RESULTS/report.md"
