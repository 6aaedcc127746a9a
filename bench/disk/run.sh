#!/usr/bin/env bash
# bench/disk/run.sh: hits served from disk, trove's disk tier against nginx proxy_cache (files),
# side by side on this machine, after MEASURING.md: wrk on CPU 0, every server on CPU 1, one
# core each, interleaved rounds, origin requests counted in every window (must be 0).
#
# The working set (OBJECTS objects of SIZE bytes, uniformly random, bench/disk/random.lua) is
# larger than trove's memory tier (MEMORY), so most trove hits are disk hits: read from its
# region file (the page cache), verified, promoted. nginx serves every hit from its cache files
# (sendfile on, tcp_nopush off). `ats` is Apache Traffic Server (Debian's package) with its
# cache in one raw cache file (storage.config) and a RAM cache as small as trove's memory tier,
# so its hits too are read from the file. `trove-mem` is trove with the whole set in memory.
# trove's disk hits of at least `[cache.disk] sendfile_min` (64 KiB) go out by sendfile.
#
#   ROUNDS=3 DURATION=10s OBJECTS=2000 SIZE=100k bash bench/disk/run.sh
#   ROUNDS=3 DURATION=10s OBJECTS=300 SIZE=1M TARGETS="trove-disk nginx ats" bash bench/disk/run.sh
#
# `trove-base` is trove-disk's setup run by another binary (TROVE_BASE_BIN), to compare two
# builds in the same run: TARGETS="trove-base trove-disk nginx ats" TROVE_BASE_BIN=... .
#
# Everything it starts runs in its own process group and is stopped by that id on exit.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
OBJECTS=${OBJECTS:-2000}
SIZE=${SIZE:-100k}
MEMORY=${MEMORY:-16MiB}
CONNS=${CONNS:-50}
TARGETS=${TARGETS:-"trove-disk nginx ats trove-mem"}
TROVE_BIN=${TROVE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/trove}
RUN=${RUN:-/tmp/trove-bench-disk.$$}
RESULTS=${RESULTS:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}
TROVE_BASE_BIN=${TROVE_BASE_BIN:-$TROVE_BIN}
declare -A PORT=([trove-disk]=28190 [nginx]=28191 [trove-mem]=28192 [ats]=28193 [trove-base]=28194)
ORIGIN_PORT=${ORIGIN_PORT:-28080}   # not bench/hits' 18080: other work on this machine may hold it
LOG_TAG=disk
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"   # log, cleanup at exit, start, wait_port
mkdir -p "$RUN/www/o" "$RESULTS"
log "writing $OBJECTS objects of $SIZE"
for i in $(seq 0 $((OBJECTS - 1))); do head -c "$SIZE" /dev/urandom >"$RUN/www/o/$i.bin"; done
for d in origin nginx; do mkdir -p "$RUN/$d/tmp" "$RUN/$d/cache"; done
chown -R nobody:nogroup "$RUN/origin" "$RUN/nginx" "$RUN/www" 2>/dev/null || true
chmod 755 "$RUN"
sed -e "s#@RUN@#$RUN#g; s#127.0.0.1:18080#127.0.0.1:$ORIGIN_PORT#" "$ROOT/bench/hits/peers/origin.conf" >"$RUN/origin.conf"
sed -e "s#@RUN@#$RUN#g; s#@NAME@#nginx#g; s#@PORT@#${PORT[nginx]}#g; s#@SENDFILE@#on#g; s#@NOPUSH@#off#g; s#max_size=256m#max_size=2g#; s#127.0.0.1:18080#127.0.0.1:$ORIGIN_PORT#" \
    "$ROOT/bench/hits/peers/nginx-proxy.conf" >"$RUN/nginx.conf"
for t in trove-disk trove-mem trove-base; do
    mem=$MEMORY; disk="[cache.disk]
path = \"$RUN/$t/cache\"     # the disk tier's directory
size = \"2GiB\"               # room for the whole working set"
    if [ "$t" = trove-mem ]; then mem=1GiB; disk=""; fi
    # DISK_EXTRA: more [cache.disk] lines for trove-disk only (trove-base keeps the defaults),
    # e.g. DISK_EXTRA='sendfile_min = "1GiB"' to compare disk hits without sendfile.
    if [ "$t" = trove-disk ] && [ -n "${DISK_EXTRA:-}" ]; then disk="$disk
$DISK_EXTRA"; fi
    mkdir -p "$RUN/$t"
    cat >"$RUN/$t.toml" <<CONF
[[listener]]
addr = "127.0.0.1:${PORT[$t]}"
mode = "reverse"
[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN_PORT"]
[cache]
memory = "$mem"               # trove-disk: far less than the working set, so hits come from disk
$disk
[log]
access = "$RUN/$t/access.log"
[runtime]
threads = 1                   # one core, as every peer
[admin]
listen = ""
CONF
done
# Traffic Server: bench/hits' configs, on this script's ports, with a 16 MB RAM cache (as small as
# trove's memory tier: hits come from the cache file) and a 2 GB cache file.
start_ats() {
    local dir=$RUN/ats file
    mkdir -p "$dir/etc" "$dir/cache" "$dir/log" "$dir/run" "$dir/var"
    for file in "$ROOT"/bench/hits/peers/trafficserver/*; do
        sed -e "s#@RUN@#$RUN#g; s#18084#${PORT[ats]}#g; s#127.0.0.1:18080#127.0.0.1:$ORIGIN_PORT#g" \
            -e "s#^CONFIG proxy.config.cache.ram_cache.size INT .*#CONFIG proxy.config.cache.ram_cache.size INT 16777216#" \
            -e "s#/ats/cache 256M#/ats/cache 2G#" \
            "$file" >"$dir/etc/$(basename "$file")"
    done
    for file in plugin.config cache.config hosting.config parent.config volume.config \
        sni.yaml ssl_multicert.config strategies.yaml splitdns.config socks.config; do
        [[ -e $dir/etc/$file ]] || : >"$dir/etc/$file"
    done
    printf '%s\n' "prefix: $dir" "exec_prefix: /usr" "bindir: /usr/bin" "sbindir: /usr/sbin" \
        "sysconfdir: $dir/etc" "datadir: $dir/var" "includedir: /usr/include" \
        "libdir: /usr/lib/trafficserver" "libexecdir: /usr/lib/trafficserver/modules" \
        "localstatedir: $dir/var" "runtimedir: $dir/run" "logdir: $dir/log" \
        "cachedir: $dir/cache" >"$dir/runroot.yaml"
    chown -R trafficserver:trafficserver "$dir"
    start ats traffic_server --run-root="$dir/runroot.yaml"
}
start origin nginx -c "$RUN/origin.conf"
wait_port "$ORIGIN_PORT"
start nginx nginx -c "$RUN/nginx.conf"
start trove-disk "$TROVE_BIN" serve --config "$RUN/trove-disk.toml"
start trove-mem "$TROVE_BIN" serve --config "$RUN/trove-mem.toml"
case " $TARGETS " in *" trove-base "*) start trove-base "$TROVE_BASE_BIN" serve --config "$RUN/trove-base.toml" ;; esac
case " $TARGETS " in *" ats "*) start_ats ;; esac
for t in $TARGETS; do wait_port "${PORT[$t]}"; done
for t in $TARGETS; do
    log "warming $t"
    curl -s -o /dev/null "http://127.0.0.1:${PORT[$t]}/o/[0-$((OBJECTS - 1))].bin"
    # Again until a whole pass is served from the cache (a disk writer behind a fast warm-up
    # drops what its queue can't hold; those are fetched and written again), at most 6 times.
    for _ in 1 2 3 4 5 6; do
        sleep 2   # let the disk writer finish
        before=$(wc -l <"$RUN/origin/access.log")
        curl -s -o /dev/null "http://127.0.0.1:${PORT[$t]}/o/[0-$((OBJECTS - 1))].bin"
        after=$(wc -l <"$RUN/origin/access.log")
        log "$t: $((after - before)) origin requests in that pass"
        [ "$after" = "$before" ] && break
    done
done
sleep 2   # let the disk writer finish
# BEFORE_ROUNDS: a command run once here (RUN is exported), e.g. to change the page cache's state.
if [ -n "${BEFORE_ROUNDS:-}" ]; then RUN=$RUN bash -c "$BEFORE_ROUNDS"; fi
echo "| round | target | req/s | MB/s | p50 | p99 | origin requests |" >"$RESULTS/report.md"
echo "|---|---|---|---|---|---|---|" >>"$RESULTS/report.md"
for r in $(seq 1 "$ROUNDS"); do
    for t in $TARGETS; do
        before=$(wc -l <"$RUN/origin/access.log")
        OBJECTS=$OBJECTS taskset -c 0 wrk -t1 -c"$CONNS" -d"$DURATION" --latency -s "$HERE/random.lua" \
            "http://127.0.0.1:${PORT[$t]}/" >"$RESULTS/$t.$r.txt"
        after=$(wc -l <"$RUN/origin/access.log")
        if grep -q "Non-2xx" "$RESULTS/$t.$r.txt"; then log "$t round $r: non-2xx responses"; exit 1; fi
        rps=$(awk '/Requests\/sec/ {print $2}' "$RESULTS/$t.$r.txt")
        mbs=$(awk '/Transfer\/sec/ {print $2}' "$RESULTS/$t.$r.txt")
        p50=$(awk '$1=="50%" {print $2}' "$RESULTS/$t.$r.txt")
        p99=$(awk '$1=="99%" {print $2}' "$RESULTS/$t.$r.txt")
        echo "| $r | $t | $rps | $mbs | $p50 | $p99 | $((after - before)) |" | tee -a "$RESULTS/report.md"
    done
done
log "report: $RESULTS/report.md"
