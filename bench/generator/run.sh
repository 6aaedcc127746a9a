#!/usr/bin/env bash
# bench/generator/run.sh: how fast is `trove bench` as a load generator, beside wrk on the same
# core and object, and does it say when it fell behind? (issue 25, "trove bench saturates what
# it measures").
#
# The object: trove-ceiling's 1 KiB from memory (the bare-hyper ceiling, one current-thread
# runtime), on CPU 1. Every generator on CPU 0, 50 keep-alive connections, interleaved per
# round (MEASURING.md: the host is shared and noisy, read the ratios):
#   wrk       wrk -t1 -c50 -d${DURATION}s --latency (closed loop: its rate is what one core of
#             wrk and the server together reach; the yardstick)
#   new-over  trove bench rate --rate $OVER --connections 50 (open loop, beyond what either can
#             do: its served rate is the generator's throughput; its report must say it fell
#             behind and whose limit it was)
#   base-over the same with the baseline binary (TROVE_BASE_BIN), if given
#   new-at    trove bench rate --rate $AT (a rate both should keep: p50 and the verdict)
#   base-at   the same with the baseline binary
# Then, if ROBOTS=1, the PolyMix robots (`trove bench run`, the `bench` example binaries,
# workload raw-1k, no proxy: robots on CPU 0, `trove bench origin` on CPU 1) at ROBOT_RATES.
#
# Usage: TROVE_BIN=... [TROVE_BASE_BIN=...] CEILING_BIN=... [ROUNDS=3] [DURATION=10]
#        [OVER=150000] [AT=20000] [ROBOTS=1 BENCH_BIN=... BENCH_BASE_BIN=... ROBOT_RATES="25000 100000"]
#        bash bench/generator/run.sh    → results in $OUT (default bench/generator/out), one
#        line per run in results.tsv, the JSON of every trove run in rate.jsonl / robots-*.json.
#        cpu_us_per_req: the generator's CPU time (perf stat task-clock) per request it handled,
#        the figure least moved by other work on the host.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=generator
RUN=$(mktemp -d)
source bench/lib.sh

TROVE_BIN=${TROVE_BIN:?set TROVE_BIN to the trove binary under test}
TROVE_BASE_BIN=${TROVE_BASE_BIN:-}
CEILING_BIN=${CEILING_BIN:?set CEILING_BIN to trove-ceiling}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
OVER=${OVER:-150000}
AT=${AT:-20000}
PORT=${PORT:-18491}
OUT=${OUT:-bench/generator/out}
ROBOTS=${ROBOTS:-0}
ROBOT_RATES=${ROBOT_RATES:-"25000 100000"}
mkdir -p "$OUT"
RES="$OUT/results.tsv"
printf 'round\tgenerator\toffered\tserved_per_s\tp50_ms\tp99_ms\tsent_per_s\tnever_sent\tbusy\tlimit\tcpu_us_per_req\n' >"$RES"
# CPU time of a generator (user + system, from perf stat's task-clock), in ms, into $RUN/cpu.
cpu() {
    if command -v perf >/dev/null; then
        perf stat -x, -e task-clock -o "$RUN/perf.out" "$@"
        awk -F, '$3 == "task-clock" { print $1 }' "$RUN/perf.out" >"$RUN/cpu"
    else
        "$@"
        echo - >"$RUN/cpu"
    fi
}
per_req() { # requests: CPU µs per request
    awk -v ms="$(cat "$RUN/cpu")" -v n="$1" 'BEGIN { if (ms == "-" || n == 0) print "-"; else printf "%.2f", ms * 1000 / n }'
}

start ceiling "$CEILING_BIN" --addr "127.0.0.1:$PORT" --size 1024
wait_port "$PORT"
URL="http://127.0.0.1:$PORT/"

wrk_run() { # round
    local out
    cpu taskset -c 0 wrk -t1 -c50 -d"${DURATION}s" --latency "$URL" >"$RUN/wrk.out"
    out=$(cat "$RUN/wrk.out")
    local rps p50 p99
    rps=$(awk '/Requests\/sec/ { print $2 }' <<<"$out")
    p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
    p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
    local n
    n=$(awk '/requests in/ { print $1 }' <<<"$out")
    printf '%s\twrk\tclosed\t%s\t%s\t%s\t-\t-\t-\t-\t%s\n' "$1" "$rps" "$p50" "$p99" "$(per_req "$n")" >>"$RES"
    log "round $1 wrk $rps req/s p50 $p50 p99 $p99"
}

rate_run() { # round label bin rate
    local round=$1 label=$2 bin=$3 rate=$4 json="$RUN/one.json"
    rm -f "$json"
    cpu taskset -c 0 "$bin" bench rate --target "127.0.0.1:$PORT" --path / --rate "$rate" \
        --connections 50 --duration "$DURATION" --label "$label" --json "$json" >"$RUN/rate.out" 2>&1 || true
    cat "$json" >>"$OUT/rate.jsonl"
    python3 - "$json" "$round" "$label" "$(cat "$RUN/cpu")" >>"$RES" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
g = r.get("generator", {})
busy = g.get("busy")
# Requests the generator handled: answered, refused or failed (sent ones, for the new binary).
n = r["ok"] + r["status_503"] + r["status_other"] + r["errors_closed"] + r["timeouts"]
cpu = sys.argv[4]
per = f"{float(cpu) * 1000 / n:.2f}" if cpu not in ("", "-") and n else "-"
print("\t".join(str(x) for x in [sys.argv[2], sys.argv[3], int(r["offered_rate"]), round(r["served_rate"]),
      r["ok_p50_ms"], r["ok_p99_ms"], round(g["issued_rate"]) if g else "-", g.get("expired", "-"),
      f"{busy:.2f}" if busy is not None else "-", g.get("limit", "(not reported)"), per]))
EOF
    log "round $round $(tail -n 1 "$RES" | cut -f2-)"
}

for round in $(seq 1 "$ROUNDS"); do
    wrk_run "$round"
    rate_run "$round" new-over "$TROVE_BIN" "$OVER"
    if [ -n "$TROVE_BASE_BIN" ]; then rate_run "$round" base-over "$TROVE_BASE_BIN" "$OVER"; fi
    rate_run "$round" new-at "$TROVE_BIN" "$AT"
    if [ -n "$TROVE_BASE_BIN" ]; then rate_run "$round" base-at "$TROVE_BASE_BIN" "$AT"; fi
done
kill -TERM -- "-${PGIDS[0]}" 2>/dev/null || true

if [ "$ROBOTS" = 1 ]; then
    : "${BENCH_BIN:?set BENCH_BIN (target/release/examples/bench)}"
    W=crates/trove-bench/workloads/raw-1k.toml
    robots() { # round label bin rate
        local round=$1 label=$2 bin=$3 rate=$4
        setsid taskset -c 1 "$bin" origin --workload "$W" --servers 4 --duration $((DURATION + 12)) \
            >"$RUN/origin.out" 2>&1 &
        local opg=$!
        PGIDS+=("$opg")
        for _ in $(seq 1 100); do grep -q '^use: --origins' "$RUN/origin.out" 2>/dev/null && break; sleep 0.05; done
        local origins
        origins=$(awk '/^use: --origins/ { print $3 }' "$RUN/origin.out")
        local json="$OUT/robots-$label-$rate-$round.json"
        # A 20 s phase in the workload; --scale shortens it to DURATION.
        cpu taskset -c 0 "$bin" run --workload "$W" --origins "$origins" --rate "$rate" --robots 100 \
            --scale "$(awk -v d="$DURATION" 'BEGIN { print d / 20 }')" --timeout 5 --quiet \
            --json "$json" >"$RUN/robots.out" 2>&1 || true
        kill -TERM -- "-$opg" 2>/dev/null || true
        wait "$opg" 2>/dev/null || true
        python3 - "$json" "$round" "robots-$label" "$rate" "$(cat "$RUN/cpu")" >>"$RES" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["total"]
g = r.get("generator") or {}
busy = g.get("busy")
n = t["hits"] + t["misses"] + t["errors"]
cpu = sys.argv[5]
per = f"{float(cpu) * 1000 / n:.2f}" if cpu not in ("", "-") and n else "-"
print("\t".join(str(x) for x in [sys.argv[2], sys.argv[3], sys.argv[4], round(t["achieved_rate"]),
      t["rt_all"]["median_ms"], t["rt_all"]["p99_ms"], round(g["issued_rate"]) if g else "-", g.get("expired", "-"),
      f"{busy:.2f}" if busy is not None else "-", g.get("limit", "(not reported)"), per]))
EOF
        log "round $round $(tail -n 1 "$RES" | cut -f2-)"
    }
    for round in $(seq 1 "$ROUNDS"); do
        for rate in $ROBOT_RATES; do
            robots "$round" new "$BENCH_BIN" "$rate"
            if [ -n "${BENCH_BASE_BIN:-}" ]; then robots "$round" base "$BENCH_BASE_BIN" "$rate"; fi
        done
    done
fi
column -t -s $'\t' "$RES"
