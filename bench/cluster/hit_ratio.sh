#!/usr/bin/env bash
# bench/cluster/hit_ratio.sh: hit ratio of a trove cluster (issue 24) under `trove bench`'s
# PolyMix-2, three ways, on the same load (same --world, rate, scale and think time):
#
#   shard        three troves, [cluster] mode = "shard", NODE_MEM each: a node that misses asks
#                the key's owner, so the fleet holds one copy of each object
#   independent  three troves with no [cluster] at all, NODE_MEM each
#   big          one trove with BIG_MEM (default 3 x NODE_MEM)
#
# The bench's robots are dealt out to the three forward proxies round-robin (`--proxy a,b,c`), as
# an outside balancer spreads clients; for `big` they all go to the one. Every trove is started
# fresh (empty cache) for its setup. Prints the document and byte hit ratio of each, the origin
# requests, the cluster's owner asks and failures, and the commands; raw reports go to RESULTS.
#
#   bash bench/cluster/hit_ratio.sh
#   NODE_MEM=16MiB RATE=600 SCALE=0.004 bash bench/cluster/hit_ratio.sh
#
# Settings (environment):
#   NODE_MEM   [cache] memory of each of the three nodes (default 8MiB)
#   BIG_MEM    [cache] memory of the single big node (default: 3 x NODE_MEM, in MiB)
#   EVICTION   [cache] eviction of every node (default lru, as `trove sim --policies lru`)
#   SCALE      trove bench --scale (default 0.003: PolyMix-2's phases in 151 s)
#   RATE       trove bench --rate, peak req/s (default 300)
#   THINK      trove bench --think, origin think time in s (default 0.05)
#   WORLD      trove bench --world (hex; default 24c1: the same objects in every setup)
#   SETUPS     which setups, in order (default "shard independent big")
#   SIM        1 (default) also prints `trove sim`'s prediction for the same three setups: the
#              built-in PolyMix-2 scaled as the bench scales it (a workload file made here),
#              through the same cache sizes and eviction, whole phases
#   LOAD_CPU   CPU of the bench (robots and origin servers) (default 0)
#   SERVER_CPU CPU of every trove (default 1)
#   BUILD      1 (default) builds trove with cargo (release) first; 0 uses TROVE_BIN as it is
#   TROVE_BIN  trove binary (default: <cargo target dir>/release/trove)
#   RESULTS    where the reports go (default bench/cluster/results/<UTC time>)
#   KEEP       1 keeps the run dir (configs, trove logs) for debugging
#
# Ports (loopback only): forward listeners 18131-18133, admin listeners 18141-18143. Every
# process this script starts is its own process group, stopped by that id when the setup ends
# and on any exit; each bench run is bounded by `timeout`.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NODE_MEM=${NODE_MEM:-8MiB}
EVICTION=${EVICTION:-lru}
SCALE=${SCALE:-0.003}
RATE=${RATE:-300}
THINK=${THINK:-0.05}
WORLD=${WORLD:-24c1}
SETUPS=${SETUPS:-"shard independent big"}
SIM=${SIM:-1}
LOAD_CPU=${LOAD_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
BUILD=${BUILD:-1}
KEEP=${KEEP:-0}
CARGO_TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TROVE_BIN=${TROVE_BIN:-$CARGO_TARGET/release/trove}
RESULTS=${RESULTS:-$HERE/results/$(date -u +%Y%m%dT%H%M%SZ)}
PORTS=(18131 18132 18133)
ADMIN_PORTS=(18141 18142 18143)
IDS=(n1 n2 n3)

mib() { # 8MiB -> 8 (the sizes this script takes are whole MiB)
    local v=${1%MiB}
    [[ $v =~ ^[0-9]+$ ]] || { echo "sizes must be whole MiB (e.g. 16MiB), not $1" >&2; exit 2; }
    echo "$v"
}
BIG_MEM=${BIG_MEM:-$(( $(mib "$NODE_MEM") * 3 ))MiB}
mib "$BIG_MEM" >/dev/null

PGIDS=()
log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
stop_troves() {
    local g
    for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
    for _ in $(seq 1 50); do
        local alive=0
        for g in "${PGIDS[@]}"; do kill -0 -- "-$g" 2>/dev/null && alive=1; done
        [[ $alive == 0 ]] && break
        sleep 0.1
    done
    for g in "${PGIDS[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
    PGIDS=()
}
RUN=""
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    stop_troves
    if [[ -n $RUN && -d $RUN ]]; then
        if [[ $KEEP == 1 ]]; then log "kept $RUN"; else rm -rf "$RUN"; fi
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ $BUILD == 1 ]]; then
    log "building trove (release)"
    (cd "$ROOT" && nice -n 10 cargo build --release -p trove)
fi
[[ -x $TROVE_BIN ]] || { log "no trove binary at $TROVE_BIN"; exit 1; }
for p in "${PORTS[@]}" "${ADMIN_PORTS[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
        log "port $p is in use"
        exit 1
    fi
done
RUN=$(mktemp -d /dev/shm/trove-cluster-bench.XXXXXX)
mkdir -p "$RESULTS"

# config NAME INDEX MEM CLUSTER(0|1): one node's trove.toml
config() {
    local name=$1 i=$2 mem=$3 cluster=$4 f="$RUN/$1.toml"
    cat >"$f" <<EOF
[[listener]]
listen = "127.0.0.1:${PORTS[$i]}"
mode = "forward"

[cache]
memory = "$mem"          # smaller than the run's working set: the hit ratio is the cache's
eviction = "$EVICTION"

[log]
access = ""               # off: no log I/O competing with the load

[admin]
listen = "127.0.0.1:${ADMIN_PORTS[$i]}"   # /metrics, read after the run
socket = ""

[runtime]
threads = 1               # one runtime thread per node, all on SERVER_CPU
EOF
    if [[ $cluster == 1 ]]; then
        cat >>"$f" <<EOF

[cluster]
node = "${IDS[$i]}"
mode = "shard"
nodes = [ { id = "${IDS[0]}", addr = "127.0.0.1:${PORTS[0]}" },
          { id = "${IDS[1]}", addr = "127.0.0.1:${PORTS[1]}" },
          { id = "${IDS[2]}", addr = "127.0.0.1:${PORTS[2]}" } ]
EOF
    fi
    echo "$f"
}

start_trove() { # name config
    setsid taskset -c "$SERVER_CPU" "$TROVE_BIN" serve --config "$2" >"$RUN/$1.out" 2>&1 </dev/null &
    PGIDS+=($!)
}

wait_port() {
    for _ in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    log "port $1 never opened"
    tail -n 20 "$RUN"/*.out >&2 || true
    exit 1
}

metric() { # admin-port name: the metric's value (sum over its label sets), 0 when absent
    curl -fsS "http://127.0.0.1:$1/metrics" 2>/dev/null |
        awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%d\n", s }'
}

BENCH_ARGS=(--workload polymix-2 --scale "$SCALE" --rate "$RATE" --think "$THINK" --world "$WORLD" --quiet)
# The bench's whole run, with a margin: PolyMix-2 is 50,400 s at scale 1.
LIMIT=$(awk -v s="$SCALE" 'BEGIN { printf "%d\n", 50400 * s + 120 }')

declare -A LINE=()
for setup in $SETUPS; do
    case $setup in
        shard | independent)
            n=3
            mem=$NODE_MEM
            cluster=$([[ $setup == shard ]] && echo 1 || echo 0)
            ;;
        big)
            n=1
            mem=$BIG_MEM
            cluster=0
            ;;
        *) log "unknown setup $setup"; exit 2 ;;
    esac
    proxies=()
    for i in $(seq 0 $((n - 1))); do
        start_trove "$setup-$i" "$(config "$setup-$i" "$i" "$mem" "$cluster")"
        proxies+=("127.0.0.1:${PORTS[$i]}")
    done
    for i in $(seq 0 $((n - 1))); do wait_port "${PORTS[$i]}"; wait_port "${ADMIN_PORTS[$i]}"; done
    # Shard mode: wait until every node takes all three as up (probes every second).
    if [[ $cluster == 1 ]]; then
        for _ in $(seq 1 100); do
            up=0
            for i in 0 1 2; do [[ $(metric "${ADMIN_PORTS[$i]}" trove_cluster_nodes_up) == 3 ]] && up=$((up + 1)); done
            [[ $up == 3 ]] && break
            sleep 0.1
        done
    fi
    list=$(IFS=,; echo "${proxies[*]}")
    cmd=(taskset -c "$LOAD_CPU" "$TROVE_BIN" bench run "${BENCH_ARGS[@]}" --proxy "$list"
        --label "$setup" --json "$RESULTS/$setup.json")
    log "$setup: ${n} x $mem; ${cmd[*]}"
    echo "${cmd[*]}" >"$RESULTS/$setup.cmd"
    set +e
    timeout --kill-after=10 "$LIMIT" "${cmd[@]}" >"$RESULTS/$setup.txt" 2>"$RESULTS/$setup.err"
    rc=$?
    set -e
    [[ $rc == 0 ]] || log "$setup: the bench exited with $rc (see $RESULTS/$setup.err)"
    # Per node: requests, hits, origin requests (owner asks included), owner asks and their
    # failures, nodes it takes as up, objects and bytes stored.
    for i in $(seq 0 $((n - 1))); do
        a=${ADMIN_PORTS[$i]}
        printf '%s node %d: requests %s hits %s origin_requests %s owner_asks %s owner_failures %s nodes_up %s objects %s bytes %s\n' \
            "$setup" "$((i + 1))" "$(metric "$a" trove_requests_total)" "$(metric "$a" trove_hits_total)" \
            "$(metric "$a" trove_origin_requests_total)" "$(metric "$a" trove_cluster_owner_requests_total)" \
            "$(metric "$a" trove_cluster_owner_failures_total)" "$(metric "$a" trove_cluster_nodes_up)" \
            "$(metric "$a" trove_store_objects)" "$(metric "$a" trove_store_bytes)" >>"$RESULTS/$setup.nodes"
    done
    cat "$RESULTS/$setup.nodes" >&2
    stop_troves
    if [[ -s $RESULTS/$setup.json ]]; then
        LINE[$setup]=$(python3 - "$RESULTS/$setup.json" "$n" "$mem" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["total"]
pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
server = (r.get("server") or {}).get("replies", "-")
# Measured over offered: the requests differ a little from setup to setup (revisits depend on
# which responses came back first), the byte ratio most (a few hundred 300 KB downloads).
of = lambda a, b: "-" if a is None or not b else f"{a / b:.3f}"
print(f"| {r['label']} | {sys.argv[2]} x {sys.argv[3]} | {pct(t['dhr'])} | {pct(t['bhr'])} | "
      f"{pct(t['offered_dhr'])} | {pct(t['offered_bhr'])} | {of(t['dhr'], t['offered_dhr'])} | "
      f"{of(t['bhr'], t['offered_bhr'])} | {t['requests']} | {t['errors']} | {server} |")
EOF
)
    else
        LINE[$setup]="| $setup | $n x $mem | (no report: exit $rc) | | | | | | | | |"
    fi
done

# The simulator's prediction: the same workload, scaled as `trove bench --scale` scales it
# (phases and the working-set freeze times SCALE, peak rate RATE), its synthetic trace through
# the same cache sizes.
if [[ $SIM == 1 ]]; then
    "$TROVE_BIN" bench workloads polymix-2 | python3 -c '
import re, sys
scale, rate = float(sys.argv[1]), float(sys.argv[2])
s = sys.stdin.read()
s = re.sub(r"(?m)^(duration_s|freeze_after_s) = ([0-9.]+)", lambda m: f"{m.group(1)} = {float(m.group(2)) * scale}", s)
s = re.sub(r"(?m)^peak_rate = [0-9.]+", f"peak_rate = {rate}", s)
print(s)' "$SCALE" "$RATE" >"$RUN/polymix-2-scaled.toml"
    sim=("$TROVE_BIN" sim "synthetic:$RUN/polymix-2-scaled.toml" --requests 100000000 --policies "$EVICTION")
    {
        echo "simulator (${sim[*]} ...), whole phases:"
        "${sim[@]}" --sizes "$NODE_MEM" --nodes 3 --mode shard 2>&1 | grep -E "^ +${NODE_MEM%MiB} MiB|records, " | sed 's/^/  shard:       /'
        "${sim[@]}" --sizes "$NODE_MEM" --nodes 3 --mode independent 2>&1 | grep -E "^ +${NODE_MEM%MiB} MiB" | sed 's/^/  independent: /'
        "${sim[@]}" --sizes "$BIG_MEM,unbounded" 2>&1 | grep -E "^ +(${BIG_MEM%MiB} MiB|unbounded)" | sed 's/^/  one node:    /'
    } >"$RESULTS/sim.txt" 2>&1 || log "the simulator failed (see $RESULTS/sim.txt)"
fi

{
    echo "PolyMix-2 via \`trove bench run ${BENCH_ARGS[*]}\`, eviction $EVICTION, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo
    echo "| setup | memory | doc hit % | byte hit % | offered doc % | offered byte % | doc / offered | byte / offered | requests | errors | origin replies |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for setup in $SETUPS; do echo "${LINE[$setup]}"; done
    echo
    for setup in $SETUPS; do echo "$setup: $(cat "$RESULTS/$setup.cmd")"; done
    echo
    cat "$RESULTS"/*.nodes
    [[ ! -s $RESULTS/sim.txt ]] || { echo; cat "$RESULTS/sim.txt"; }
} | tee "$RESULTS/report.md"
