#!/usr/bin/env bash
# trove sim replay speed: records replayed per second on one core (records / user CPU time,
# which is what one core delivers however loaded the machine is), for each trace, format
# and mode. See BENCHMARKS.md ("`trove sim` replay speed").
#
#   TROVE=/path/to/trove N=10000000 bash bench/sim/run.sh [WORKDIR]
#
# Makes (once) hot and Zipf CSV traces of N requests with gen.py and their oracleGeneral
# conversions, then replays each through one configuration (1 GiB, s3-fifo and lru), with
# hit ratios only and with the network model (modem preset). ROUNDS=n repeats each.
#
# TRACES also takes `zipf08` (the Zipf trace with exponent 0.8) and `polymix2` (synthetic
# PolyMix-2 replayed from `synthetic:polymix-2`, and converted to oracleGeneral for
# libCacheSim). FRESHNESS=s passes `--freshness` (libCacheSim's objects never expire: give
# a trace's objects a lifetime longer than it lasts to compare hit ratios). With
# CACHESIM=/path/to/libCacheSim/_build/bin/cachesim, libCacheSim replays each oracleGeneral
# trace too, at the same size with LRU and S3FIFO, and the same columns are printed for it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
TROVE=${TROVE:-trove}
N=${N:-10000000}
ROUNDS=${ROUNDS:-1}
POLICIES=${POLICIES:-s3-fifo lru}
MODES=${MODES:-"plain modem"}
TRACES=${TRACES:-"hot zipf"}
FRESHNESS=${FRESHNESS:-}
CACHESIM=${CACHESIM:-}
dir=${1:-/tmp/trove-sim-bench}
mkdir -p "$dir"
for kind in $TRACES; do
    bin="$dir/$kind-$N.oracleGeneral"
    if [ "$kind" = polymix2 ]; then
        [ -s "$bin" ] || "$TROVE" sim convert synthetic:polymix-2 --requests "$N" "$bin"
        continue
    fi
    csv="$dir/$kind-$N.csv"
    case $kind in
        zipf08) [ -s "$csv" ] || python3 "$here/gen.py" zipf "$N" "$csv" 0.8 ;;
        *) [ -s "$csv" ] || python3 "$here/gen.py" "$kind" "$N" "$csv" ;;
    esac
    [ -s "$bin" ] || "$TROVE" sim convert "$csv" "$bin"
done
fresh=()
[ -z "$FRESHNESS" ] || fresh=(--freshness "$FRESHNESS")
printf '%-34s %-8s %-6s %10s %9s %8s %14s %7s\n' trace policy mode "wall s" "user s" "RSS MB" "records/s/core" "hit %"
for round in $(seq "$ROUNDS"); do
  for kind in $TRACES; do
    files=("$dir/$kind-$N.csv" "$dir/$kind-$N.oracleGeneral")
    # PolyMix-2 is replayed from the workload model itself (URLs, types, uncachable objects).
    [ "$kind" != polymix2 ] || files=("synthetic:polymix-2")
    for file in "${files[@]}"; do
      for policy in $POLICIES; do
        for mode in $MODES; do
          net=()
          [ "$mode" = plain ] || net=(--network "$mode")
          [ "$kind" != polymix2 ] || net+=(--requests "$N")
          out=$(mktemp)
          /usr/bin/time -f "%e %U %M" -o "$out.time" \
              "$TROVE" sim "$file" --sizes 1GiB --policies "$policy" --quiet "${net[@]}" \
              "${fresh[@]}" --json "$out.json" >/dev/null
          read -r wall user rss <"$out.time"
          python3 - "$out.json" "$wall" "$user" "$rss" "$(basename "$file")" "$policy" "$mode" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
wall, user, rss = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
recs = r["trace"]["records"]
hit = r["results"][0]["hit_ratio"] * 100
print(f"{sys.argv[5]:<34} {sys.argv[6]:<8} {sys.argv[7]:<6} {wall:10.2f} {user:9.2f} "
      f"{rss / 1024:8.0f} {recs / user:14,.0f} {hit:7.2f}")
PY
          rm -f "$out" "$out.time" "$out.json"
        done
      done
    done
    if [ -n "$CACHESIM" ] && [ -s "$dir/$kind-$N.oracleGeneral" ]; then
      for algo in LRU S3FIFO; do
        out=$(mktemp)
        /usr/bin/time -f "%e %U %M" -o "$out.time" \
            "$CACHESIM" "$dir/$kind-$N.oracleGeneral" oracleGeneralBin "$algo" 1073741824 >"$out" 2>&1
        read -r wall user rss <"$out.time"
        # "... 10000000 req, miss ratio 0.6625, throughput ..."
        line=$(grep 'miss ratio' "$out" | tail -1)
        python3 - "$line" "$wall" "$user" "$rss" "$kind-$N.oracleGeneral" "$algo" <<'PY'
import re, sys
line = sys.argv[1]
reqs = int(re.search(r"(\d+) req,", line).group(1))
miss = float(re.search(r"miss ratio ([0-9.]+)", line).group(1))
wall, user, rss = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
print(f"{sys.argv[5]:<34} {'lcs-' + sys.argv[6]:<8} {'plain':<6} {wall:10.2f} {user:9.2f} "
      f"{rss / 1024:8.0f} {reqs / user:14,.0f} {(1 - miss) * 100:7.2f}")
PY
        rm -f "$out" "$out.time"
      done
    fi
  done
done
