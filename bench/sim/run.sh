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
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
TROVE=${TROVE:-trove}
N=${N:-10000000}
ROUNDS=${ROUNDS:-1}
POLICIES=${POLICIES:-s3-fifo lru}
MODES=${MODES:-"plain modem"}
TRACES=${TRACES:-"hot zipf"}
dir=${1:-/tmp/trove-sim-bench}
mkdir -p "$dir"
for kind in $TRACES; do
    csv="$dir/$kind-$N.csv"
    [ -s "$csv" ] || python3 "$here/gen.py" "$kind" "$N" "$csv"
    bin="$dir/$kind-$N.oracleGeneral"
    [ -s "$bin" ] || "$TROVE" sim convert "$csv" "$bin"
done
printf '%-34s %-8s %-6s %10s %9s %8s %14s %7s\n' trace policy mode "wall s" "user s" "RSS MB" "records/s/core" "hit %"
for round in $(seq "$ROUNDS"); do
  for kind in $TRACES; do
    for file in "$dir/$kind-$N.csv" "$dir/$kind-$N.oracleGeneral"; do
      for policy in $POLICIES; do
        for mode in $MODES; do
          net=()
          [ "$mode" = plain ] || net=(--network "$mode")
          out=$(mktemp)
          /usr/bin/time -f "%e %U %M" -o "$out.time" \
              "$TROVE" sim "$file" --sizes 1GiB --policies "$policy" --quiet "${net[@]}" \
              --json "$out.json" >/dev/null
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
  done
done
