#!/usr/bin/env bash
# BENCHMARKS.md ("Invalidation journal"): what journaling adds to acknowledging an
# invalidation through the API. Two troves side by side (one runtime thread each, on CPU 1):
# memory only, and with a disk tier (its journal fdatasyncs before every acknowledgement);
# one client on CPU 0 making N sequential URL purges over one kept-alive connection;
# interleaved rounds.
#
# Usage: bench/api/ack.sh [ROUNDS] [N] [DIR]   (binaries from $CARGO_TARGET_DIR/release;
# DIR holds the disk tier: on the disk to measure, not a tmpfs)
set -euo pipefail
ROUNDS=${1:-3}
N=${2:-2000}
HERE=$(cd "$(dirname "$0")" && pwd)
TARGET=${CARGO_TARGET_DIR:-$HERE/../../target}/release
TROVE=$TARGET/trove
BENCH=$TARGET/examples/api_bench
RUN=$(mktemp -d "${3:-/var/tmp}/trove-ack-bench.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$RUN"; }
trap cleanup EXIT
conf() { # port admin [disk]
    printf '[[listener]]\naddr = "127.0.0.1:%s"\nmode = "forward"\n[log]\naccess = ""\n[admin]\nlisten = "127.0.0.1:%s"\ntoken = "bench-token"\nsocket = ""\n[runtime]\nthreads = 1\n' "$1" "$2"
    if [[ -n ${3:-} ]]; then printf '[cache.disk]\npath = "%s"\nsize = "256MiB"\n' "$3"; fi
}
conf 18290 18291 > "$RUN/mem.toml"
conf 18292 18293 "$RUN/disk" > "$RUN/disk.toml"
for t in mem disk; do
    taskset -c 1 "$TROVE" serve --config "$RUN/$t.toml" > "$RUN/$t.log" 2>&1 &
    PIDS+=($!)
done
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened"; exit 1; }
wait_port 18291; wait_port 18293
for r in $(seq "$ROUNDS"); do
    for t in mem:18291 disk:18293; do
        printf 'round %s %-5s ' "$r" "${t%%:*}"
        taskset -c 0 "$BENCH" "127.0.0.1:${t#*:}" bench-token acks "$N"
    done
done
curl -s http://127.0.0.1:18293/metrics | grep -E '^trove_disk_journal_(syncs_total|sync_seconds_total|bytes) '
