#!/usr/bin/env bash
# bench/disk/restart.sh: after a `kill -9`, how soon each proxy serves a miss and a hit, with
# OBJECTS objects of BODY bytes in its cache (restart.py does the kill, restart and timing).
#
#   trove   forward proxy, disk tier filled by the library (`disk_bench write`: keys
#           http://origin.example/objects/<i>, a name that does not resolve, so only the cache
#           can answer them); probes: the newest, a middle and the oldest object; ready = the
#           whole index is back (trove_disk_ready 1).
#   nginx   reverse proxy_cache filled through HTTP (wrk, bench/disk/seq.lua) from the origin,
#           which then answers /objects/ with 404, so a 200 is a hit; ready = no cache loader
#           process (nginx starts it 60 s after the start, so right after a restart this passes
#           before loading began: read nginx's `ready` as meaningless; steady waits it out).
#   ats     Traffic Server, raw cache file, filled the same way; killed only after its
#           directory sync (every 60 s by default, waited out).
#
#   TARGETS="trove nginx ats" OBJECTS=1000000 BODY=500 ROUNDS=3 bash bench/disk/restart.sh
#
# Every server on CPU 1 (one worker / one runtime thread; trove's recovery threads share that
# core), wrk and the probes on CPU 0. Caches live under RUN (on disk, not tmpfs) and are removed
# at the end. Everything started runs in its own process group and is stopped by that id.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TARGETS=${TARGETS:-"trove nginx"}
OBJECTS=${OBJECTS:-1000000}
BODY=${BODY:-500}
ROUNDS=${ROUNDS:-3}
ATS_SYNC_WAIT=${ATS_SYNC_WAIT:-70}              # s before each kill: its directory syncs every 60 s
ATS_BYTES_PER_OBJECT=${ATS_BYTES_PER_OBJECT:-2048}  # its cache file's size per object
TROVE_BIN=${TROVE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/trove}
DISK_BENCH=${DISK_BENCH:-${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/disk_bench}
RUN=${RUN:-/var/tmp/trove-restart.$$}
RESULTS=${RESULTS:-$HERE/results/restart-$(date -u +%Y%m%dT%H%M%SZ)}
ORIGIN_PORT=28280
declare -A PORT=([trove]=28290 [nginx]=28292 [ats]=28294)
ADMIN_PORT=28291
LOG_TAG=restart
# shellcheck source=../lib.sh
source "$HERE/../lib.sh"   # log, cleanup at exit, start, wait_port
mkdir -p "$RUN/www" "$RUN/origin/tmp" "$RESULTS"
chmod 755 "$RUN"
head -c "$BODY" /dev/urandom >"$RUN/www/obj.bin"
# The origin: /objects/<i> and /miss/<n> all answer obj.bin, cacheable, while FILL=1; afterwards
# /objects/ answers 404, so only a cache can answer it with a 200.
origin_conf() { # fill: 1 or 0
    local objects='try_files /obj.bin =404;'
    [ "$1" = 1 ] || objects='return 404;'
    cat >"$RUN/origin.conf" <<CONF
daemon off;                       # run.sh owns the process
worker_processes 1;
user nobody nogroup;
pid $RUN/origin/nginx.pid;        # never /run/nginx.pid
error_log $RUN/origin/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;               # 10 M requests would fill the disk with lines
    client_body_temp_path $RUN/origin/tmp/body;
    proxy_temp_path       $RUN/origin/tmp/proxy;
    fastcgi_temp_path     $RUN/origin/tmp/fastcgi;
    uwsgi_temp_path       $RUN/origin/tmp/uwsgi;
    scgi_temp_path        $RUN/origin/tmp/scgi;
    keepalive_requests 100000000;
    server {
        listen 127.0.0.1:$ORIGIN_PORT;
        root $RUN/www;
        add_header Cache-Control "public, max-age=86400";   # cacheable by every peer
        location /objects/ { $objects }
        location /miss/ { try_files /obj.bin =404; }
        location /hot/ { try_files /obj.bin =404; }
    }
}
CONF
}
ORIGIN_PGID=
start_origin() {
    [ -z "$ORIGIN_PGID" ] || { kill -TERM -- "-$ORIGIN_PGID" 2>/dev/null || true; sleep 0.5; }
    origin_conf "$1"
    start origin nginx -c "$RUN/origin.conf"
    ORIGIN_PGID=${PGIDS[-1]}
    wait_port "$ORIGIN_PORT"
}
fill_http() { # port: OBJECTS requests for /objects/0..OBJECTS-1 through the proxy
    log "filling $1 with $OBJECTS objects through HTTP"
    local t=$SECONDS
    PREFIX=/objects/ FROM=0 TO=$OBJECTS taskset -c 0 wrk -t1 -c50 -d3600s -s "$HERE/seq.lua" \
        "http://127.0.0.1:$1/" >"$RUN/fill-$1.txt"
    log "filled in $((SECONDS - t)) s: $(grep -E 'requests in|Non-2xx' "$RUN/fill-$1.txt" | tr '\n' ' ')"
}
probe_args() { # prefix [margin]: the newest, a middle and the oldest object, `margin` in from
    # each end (a fill through HTTP ends with wrk's last requests in flight, never stored, and
    # a run on 2026-11-23 found nginx without /objects/0 too)
    local m=${2:-0}
    echo "--probe newest=$1$((OBJECTS - 1 - m)) --probe middle=$1$((OBJECTS / 2)) --probe oldest=$1$m"
}

run_trove() {
    local dir=$RUN/trove cache size
    mkdir -p "$dir"
    if [ -n "${TROVE_CACHE:-}" ]; then
        # A directory disk_bench wrote earlier for these OBJECTS and BODY (kept afterwards).
        cache=$TROVE_CACHE
        size=$(( ((OBJECTS * (BODY + 256) * 11 / 10 > 64 << 20 ? OBJECTS * (BODY + 256) * 11 / 10 : 64 << 20) + (1 << 20) - 1) >> 20 ))MiB
    else
        cache=$dir/cache
        log "trove: disk_bench write $OBJECTS x $BODY B"
        taskset -c 1 "$DISK_BENCH" write "$cache" "$OBJECTS" "$BODY" | tee "$RESULTS/trove-write.txt" >&2
        size=$(grep -o 'size = "[0-9]*MiB"' "$RESULTS/trove-write.txt" | grep -o '[0-9]*MiB')
    fi
    du -sh "$cache" | tee "$RESULTS/trove-du.txt" >&2
    cat >"$dir/trove.toml" <<CONF
[[listener]]
addr = "127.0.0.1:${PORT[trove]}"
mode = "forward"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[cache]
memory = "64MiB"
[cache.disk]
path = "$cache"               # filled by disk_bench write
size = "$((${size%MiB} + 512))MiB"   # disk_bench's size (the same regions) and 32 regions more, so no restart's new writes reclaim the oldest region (the oldest probe)
[runtime]
threads = 1                   # one core, as every peer
[log]
access = ""                   # no access log
CONF
    python3 "$HERE/restart.py" --name "trove-$OBJECTS" --proxy "127.0.0.1:${PORT[trove]}" \
        --miss "http://127.0.0.1:$ORIGIN_PORT/miss/{n}" $(probe_args http://origin.example/objects/) \
        --ready-cmd "curl -s http://127.0.0.1:$ADMIN_PORT/metrics | grep -q '^trove_disk_ready 1'" \
        --rounds "$ROUNDS" --log "$dir/trove.log" -- taskset -c 1 "$TROVE_BIN" serve --config "$dir/trove.toml" \
        | tee -a "$RESULTS/rounds.jsonl"
    curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" >/dev/null 2>&1 || true
    rm -rf "$dir"
}

run_nginx() {
    local dir=$RUN/nginx
    mkdir -p "$dir/cache" "$dir/tmp"
    chown -R nobody:nogroup "$dir"
    cat >"$dir/nginx.conf" <<CONF
daemon off;                       # restart.py owns the process group
worker_processes 1;               # one core, as every peer
user nobody nogroup;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path       $dir/tmp/proxy;
    fastcgi_temp_path     $dir/tmp/fastcgi;
    uwsgi_temp_path       $dir/tmp/uwsgi;
    scgi_temp_path        $dir/tmp/scgi;
    # keys_zone: ~8,000 keys per MB, so 256 MB for a million and more; max_size far above what
    # is stored; inactive=1d keeps every object; the loader's defaults (100 files per 50 ms
    # pass, then a 50 ms pause) are left as they are: they are what an operator gets.
    proxy_cache_path $dir/cache levels=1:2 keys_zone=z:256m max_size=16g inactive=1d use_temp_path=off;
    upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 16; }
    server {
        listen 127.0.0.1:${PORT[nginx]};
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache z;
            proxy_cache_valid 200 1d;
        }
    }
}
CONF
    start nginx-fill nginx -c "$dir/nginx.conf"
    local g=${PGIDS[-1]}
    wait_port "${PORT[nginx]}"
    start_origin 1
    fill_http "${PORT[nginx]}"
    kill -TERM -- "-$g"; sleep 2
    du -sh "$dir/cache" | tee "$RESULTS/nginx-du.txt" >&2
    start_origin 0
    python3 "$HERE/restart.py" --name "nginx-$OBJECTS" --proxy "127.0.0.1:${PORT[nginx]}" \
        --miss "/miss/{n}" $(probe_args /objects/ 200) \
        --ready-cmd "! pgrep -P \$(cat $dir/nginx.pid 2>/dev/null || echo 1) -f 'cache loader' >/dev/null" \
        --rounds "$ROUNDS" --log "$dir/restart.log" -- taskset -c 1 nginx -c "$dir/nginx.conf" \
        | tee -a "$RESULTS/rounds.jsonl"
    rm -rf "$dir"
}

run_ats() {
    local dir=$RUN/ats file
    mkdir -p "$dir/etc" "$dir/cache" "$dir/log" "$dir/run" "$dir/var"
    # Sized for the objects: the directory has cache size / min_average_object_size entries.
    local gib=$(( (OBJECTS * ATS_BYTES_PER_OBJECT + (1 << 30) - 1) / (1 << 30) ))
    cat >"$dir/etc/records.config" <<CONF
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT 1
CONFIG proxy.config.accept_threads INT 0
CONFIG proxy.config.task_threads INT 1
CONFIG proxy.config.http.server_ports STRING ${PORT[ats]}:ipv4:ip-in=127.0.0.1
CONFIG proxy.config.reverse_proxy.enabled INT 1
CONFIG proxy.config.url_remap.remap_required INT 1
CONFIG proxy.config.http.cache.http INT 1
CONFIG proxy.config.cache.min_average_object_size INT 1024
CONFIG proxy.config.cache.ram_cache.size INT 67108864
CONFIG proxy.config.admin.user_id STRING trafficserver
CONFIG proxy.config.body_factory.template_sets_dir STRING /etc/trafficserver/body_factory
CONFIG proxy.config.crash_log_helper STRING NULL
CONF
    # A directory: Traffic Server makes its cache file (cache.db) in it, of this size (a file
    # path it does not find disables the cache: "unable to open cache disk(s)").
    echo "$dir/cache ${gib}G" >"$dir/etc/storage.config"
    echo "map http://127.0.0.1:${PORT[ats]}/ http://127.0.0.1:$ORIGIN_PORT/" >"$dir/etc/remap.config"
    cp "$ROOT/bench/hits/peers/trafficserver/ip_allow.yaml" "$ROOT/bench/hits/peers/trafficserver/logging.yaml" "$dir/etc/"
    for file in plugin.config cache.config hosting.config parent.config volume.config \
        sni.yaml ssl_multicert.config strategies.yaml splitdns.config socks.config; do
        [[ -e $dir/etc/$file ]] || : >"$dir/etc/$file"
    done
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
    start ats-fill traffic_server --run-root="$dir/runroot.yaml"
    local g=${PGIDS[-1]}
    wait_port "${PORT[ats]}"
    if grep -q "Cache Disabled" "$dir/log/diags.log" 2>/dev/null; then
        log "Traffic Server started with its cache disabled: $(grep -m1 WARNING "$dir/log/diags.log")"
        exit 1
    fi
    start_origin 1
    fill_http "${PORT[ats]}"
    log "waiting $ATS_SYNC_WAIT s for Traffic Server's directory sync (every 60 s)"
    sleep "$ATS_SYNC_WAIT"
    kill -KILL -- "-$g" || true; sleep 1
    du -sh "$dir/cache" | tee "$RESULTS/ats-du.txt" >&2
    start_origin 0
    # Each round: steady, then 70 s more so the directory was synced after the last restart.
    python3 "$HERE/restart.py" --name "ats-$OBJECTS" --proxy "127.0.0.1:${PORT[ats]}" \
        --miss "/miss/{n}" $(probe_args /objects/ 200) --settle "$ATS_SYNC_WAIT" \
        --rounds "$ROUNDS" --log "$dir/restart.log" -- taskset -c 1 traffic_server --run-root="$dir/runroot.yaml" \
        | tee -a "$RESULTS/rounds.jsonl"
    rm -rf "$dir"
}

# Sustained disk writes while serving hits (TARGETS=writes): trove as a reverse proxy, a hot
# set of HOT objects warmed into memory and hit at random by one wrk (-c20), while a second wrk
# (-c16) asks for new URLs only, each a miss whose object is stored and written to disk.
# DURATION per round; the disk counters are read before and after each round.
run_writes() {
    local dir=$RUN/writes port=28296 admin=28297 hot=${HOT:-1000}
    mkdir -p "$dir"
    cat >"$dir/trove.toml" <<CONF
[[listener]]
addr = "127.0.0.1:$port"
mode = "reverse"
[[origin]]
host = "*"
upstreams = ["http://127.0.0.1:$ORIGIN_PORT"]
[admin]
listen = "127.0.0.1:$admin"
[cache]
memory = "256MiB"             # the hot set fits; the stream of new objects passes through
[cache.disk]
path = "$dir/cache"
size = "${WRITES_DISK:-6GiB}"
[runtime]
threads = 1                   # one core, as every peer
[log]
access = ""
CONF
    start_origin 1
    start trove-writes "$TROVE_BIN" serve --config "$dir/trove.toml"
    wait_port "$port"
    PREFIX=/hot/ FROM=0 TO=$hot taskset -c 0 wrk -t1 -c10 -d60s -s "$HERE/seq.lua" "http://127.0.0.1:$port/" >/dev/null
    metric() { curl -s "http://127.0.0.1:$admin/metrics" | awk -v m="$1" '$1==m {print $2}'; }
    local from=0
    for r in $(seq 1 "$ROUNDS"); do
        local w0 b0 s0 t0
        w0=$(metric trove_disk_writes_total); b0=$(metric trove_disk_write_bytes_total); s0=$(metric trove_disk_writes_shed_total)
        t0=$(date +%s.%N)
        HOT=$hot taskset -c 0 wrk -t1 -c20 -d"${DURATION:-20}s" --latency -s "$HERE/hot.lua" "http://127.0.0.1:$port/" >"$RESULTS/writes-hits.$r.txt" &
        local hits=$!
        PREFIX=/objects/r$r- FROM=0 taskset -c 0 wrk -t1 -c16 -d"${DURATION:-20}s" -s "$HERE/seq.lua" "http://127.0.0.1:$port/" >"$RESULTS/writes-misses.$r.txt"
        wait $hits
        local t1 w1 b1 s1
        t1=$(date +%s.%N)
        w1=$(metric trove_disk_writes_total); b1=$(metric trove_disk_write_bytes_total); s1=$(metric trove_disk_writes_shed_total)
        python3 - "$r" "$t0" "$t1" "$w0" "$w1" "$b0" "$b1" "$s0" "$s1" "$(metric trove_disk_writes_late_total)" \
            "$(metric trove_disk_write_delay_max_seconds)" "$(metric trove_disk_queue_limit_bytes)" \
            "$(awk '/Requests\/sec/ {print $2}' "$RESULTS/writes-hits.$r.txt")" \
            "$(awk '/Requests\/sec/ {print $2}' "$RESULTS/writes-misses.$r.txt")" "$BODY" <<'PY' | tee -a "$RESULTS/writes.jsonl"
import json, sys
r, t0, t1, w0, w1, b0, b1, s0, s1, late, delay, limit, hits, misses, body = sys.argv[1:]
secs = float(t1) - float(t0)
print(json.dumps({"round": int(r), "body": int(body), "secs": round(secs, 2),
    "disk_objects_per_s": round((float(w1) - float(w0)) / secs),
    "disk_MB_per_s": round((float(b1) - float(b0)) / secs / 1e6, 1),
    "shed": int(float(s1) - float(s0)), "late_total": int(float(late)),
    "write_delay_max_s": float(delay), "queue_limit_bytes": int(float(limit)),
    "hit_req_per_s": float(hits), "miss_req_per_s": float(misses)}))
PY
    done
    du -sh "$dir/cache" | tee "$RESULTS/writes-du.txt" >&2
    kill -TERM -- "-${PGIDS[-1]}" 2>/dev/null || true
    sleep 1
    rm -rf "$dir"
}

start_origin 0
for t in $TARGETS; do "run_$t"; done
log "rounds: $RESULTS/rounds.jsonl"
