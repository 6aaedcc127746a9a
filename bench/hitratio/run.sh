#!/usr/bin/env bash
# Hit-ratio benchmark: object and byte hit ratios of `trove sim`'s eviction policies beside
# libCacheSim's LRU, S3FIFO, SIEVE and W-TinyLFU on the same traces (issue 18). See README.md.
#
#   TROVE=/path/to/trove CACHESIM=/path/to/cachesim bash bench/hitratio/run.sh [WORKDIR]
#
# Makes (once, in WORKDIR, default /tmp/trove-hitratio) the traces of gen.py as CSV and their
# oracleGeneral conversions (`trove sim convert`), replays each oracleGeneral file through
# `trove sim` at every size of SIZES with every policy trove accepts (POLICIES, default: the
# names `trove sim` lists), objects never expiring (--freshness far beyond the trace's
# 1,000 s: libCacheSim never expires anything), and, when CACHESIM is set, through
# libCacheSim's cachesim at the same sizes in bytes. Prints one table.
#
# CACHESIM is libCacheSim's `cachesim` binary. This script does not fetch or build it: build
# it yourself from https://github.com/1a1a11a/libCacheSim (Debian: apt-get install cmake
# libglib2.0-dev libzstd-dev; then in a checkout outside this repository
# `mkdir _build && cd _build && cmake -DCMAKE_BUILD_TYPE=Release .. && make cachesim`, which
# leaves _build/bin/cachesim). Without CACHESIM only trove's columns are filled.
#
# Knobs: TRACES ("zipf10 zipf08"), N (requests per trace, 1000000), SIZES ("256MiB 1GiB
# 4GiB 16GiB"), POLICIES (trove's, space-separated), FRESHNESS (seconds, 315360000),
# THREADS (2: trove's --threads and cachesim's --num-thread; the two never run at once).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
TROVE=${TROVE:-trove}
CACHESIM=${CACHESIM:-}
N=${N:-1000000}
TRACES=${TRACES:-"zipf10 zipf08"}
SIZES=${SIZES:-"256MiB 1GiB 4GiB 16GiB"}
FRESHNESS=${FRESHNESS:-315360000}
THREADS=${THREADS:-2}
dir=${1:-/tmp/trove-hitratio}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# trove's policy names: those its help lists as possible values, else those its error for an
# unknown name lists ("unknown eviction policy "?" (lru, s3-fifo)"), else lru and s3-fifo.
if [ -z "${POLICIES:-}" ]; then
    POLICIES=$("$TROVE" sim --help | sed -n '/--policies/,/^ *--/p' |
        sed -n 's/.*possible values: \([^]]*\)].*/\1/p' | tr -d ',' | head -1)
    [ -n "$POLICIES" ] || POLICIES=$({ "$TROVE" sim /nonexistent --sizes 1MiB --policies '?' 2>&1 || true; } |
        sed -n 's/.*unknown eviction policy.*(\(.*\)).*/\1/p' | tr -d ',' | head -1)
    [ -n "$POLICIES" ] || POLICIES="lru s3-fifo"
fi
bytes() { # 256MiB -> 268435456
    local n=${1%[KMGT]iB} u=${1#"${1%[KMGT]iB}"}
    case $u in
        KiB) echo $((n << 10)) ;; MiB) echo $((n << 20)) ;; GiB) echo $((n << 30)) ;;
        TiB) echo $((n << 40)) ;; *) echo "$1" ;;
    esac
}
log() { printf '[hitratio %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

results="$dir/results.tsv" # trace size_bytes source policy obj_hit byte_hit (ratios 0..1)
overheads="$dir/overhead.tsv"
notes="$dir/notes.txt"
: >"$results"
: >"$overheads"
: >"$notes"
for trace in $TRACES; do
    csv="$dir/$trace-$N.csv"
    og="$dir/$trace-$N.oracleGeneral"
    [ -s "$csv" ] || { log "generating $csv"; python3 "$here/gen.py" "$trace" "$csv" "$N"; }
    [ -s "$og" ] || "$TROVE" sim convert "$csv" "$og" >&2

    sizes=$(echo "$SIZES" | tr ' ' ','),unbounded
    log "trove sim $trace: sizes $sizes, policies $POLICIES"
    "$TROVE" sim "$og" --sizes "$sizes" --policies "$(echo "$POLICIES" | tr ' ' ',')" \
        --freshness "$FRESHNESS" --threads "$THREADS" --quiet --json "$dir/$trace.trove.json" >/dev/null
    # Per-object overhead trove charges against the budget: what it stores when nothing is
    # evicted (unbounded) beyond the bodies of the trace's distinct objects.
    python3 - "$dir/$trace.trove.json" "$csv" "$trace" "$results" "$overheads" <<'PY'
import json, sys
rep, csv, trace, results, overheads = sys.argv[1:]
r = json.load(open(rep))
with open(results, "a") as out:
    for c in r["results"]:
        if c["cache_size"] is not None:
            out.write(f"{trace}\t{c['cache_size']}\ttrove\t{c['policy']}\t{c['hit_ratio']}\t{c['byte_hit_ratio']}\n")
sizes = {}
with open(csv) as f:
    next(f)
    for line in f:
        _, oid, size = line.split(",")
        sizes[oid] = int(size)
unb = next(c for c in r["results"] if c["cache_size"] is None)
with open(overheads, "a") as out:
    out.write(f"{trace}\t{unb['stored_objects']}\t{unb['stored_bytes']}\t{len(sizes)}\t{sum(sizes.values())}\n")
PY

    [ -n "$CACHESIM" ] || continue
    for size in $SIZES; do
        b=$(bytes "$size")
        log "cachesim $trace $size ($b bytes): LRU, S3FIFO, SIEVE, WTinyLFU"
        # Several caches in one run: the multi-cache path, the one that prints the byte miss
        # ratio. It writes result/<trace> in its working directory, hence the subshell.
        out="$dir/$trace.$size.cachesim.out"
        (cd "$dir" && "$CACHESIM" "$og" oracleGeneral lru,s3fifo,sieve,wtinylfu "$b" \
            --num-thread="$THREADS" >"$out" 2>&1)
        python3 - "$out" "$trace" "$b" "$results" <<'PY'
import re, sys
out, trace, size, results = sys.argv[1:]
names = {"LRU": "LRU", "S3FIFO": "S3FIFO", "Sieve": "SIEVE", "WTinyLFU": "WTinyLFU"}
rows = []
for line in open(out, errors="replace"):
    m = re.search(r"\s(\S+) cache size .*, (\d+) req, miss ratio ([0-9.]+), byte miss ratio ([0-9.]+)", line)
    if m:
        algo = names[m.group(1).split("-")[0]]
        rows.append(f"{trace}\t{size}\tcachesim\t{algo}\t{1 - float(m.group(3))}\t{1 - float(m.group(4))}\n")
if len(rows) != 4:
    sys.exit(f"cachesim printed {len(rows)} results, not 4: see {out}")
open(results, "a").writelines(rows)
PY
        # libCacheSim sizes W-TinyLFU's count-min sketch from the main cache's size in bytes,
        # passed as an int: where that wraps negative (4 GiB and 16 GiB among others) the
        # sketch is cut to 20 counters (WTinyLFU.c, minimalIncrementCBF.c). Say so.
        if grep -q "too few counters" "$out"; then
            echo "note: cachesim WTinyLFU at $trace $size ran with a 20-counter sketch (libCacheSim sizes it from the main cache's bytes as an int, which wrapped): its admission test there compares estimates that hardly tell objects apart." >>"$notes"
        fi
    done
done

python3 - "$results" "$overheads" "$POLICIES" <<'PY'
import collections, sys
results, overheads, policies = sys.argv[1], sys.argv[2], sys.argv[3].split()
r = collections.OrderedDict()
for line in open(results):
    trace, size, src, pol, obj, byte = line.rstrip("\n").split("\t")
    r.setdefault((trace, int(size)), {})[(src, pol)] = (float(obj) * 100, float(byte) * 100)
counterpart = {"lru": "LRU", "s3-fifo": "S3FIFO", "s3fifo": "S3FIFO", "sieve": "SIEVE",
               "w-tinylfu": "WTinyLFU", "wtinylfu": "WTinyLFU", "tinylfu": "WTinyLFU"}
algos = ["LRU", "S3FIFO", "SIEVE", "WTinyLFU"]

def human(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)

f = lambda x: "" if x is None else f"{x:6.2f}"
d = lambda x: "" if x is None else f"{x:+6.2f}"
print("Object / byte hit ratios, %. Δ = trove − cachesim (same policy); best = the best of cachesim's")
print("LRU, S3FIFO, SIEVE, WTinyLFU at that size (object and byte maxima taken separately).")
hdr = (f"{'trace':<8} {'size':>6} {'policy':<10} {'trove obj':>9} {'byte':>6} {'cachesim obj':>12} {'byte':>6}"
       f" {'Δ obj':>6} {'Δ byte':>6}  {'Δbest obj':>9} {'byte':>6}")
print(hdr)
print("-" * len(hdr))
for (trace, size), row in r.items():
    lcs = {a: row.get(("cachesim", a)) for a in algos}
    have = [v for v in lcs.values() if v]
    best = (max(v[0] for v in have), max(v[1] for v in have)) if have else None
    shown = set()
    for p in policies:
        t = row.get(("trove", p))
        c = lcs.get(counterpart.get(p, ""))
        if c:
            shown.add(counterpart[p])
        print(f"{trace:<8} {human(size):>6} {p:<10} {f(t and t[0]):>9} {f(t and t[1]):>6}"
              f" {f(c and c[0]):>12} {f(c and c[1]):>6}"
              f" {d(t and c and t[0] - c[0]):>6} {d(t and c and t[1] - c[1]):>6}"
              f"  {d(t and best and t[0] - best[0]):>9} {d(t and best and t[1] - best[1]):>6}")
    for a in algos:
        c = lcs[a]
        if c and a not in shown:
            print(f"{trace:<8} {human(size):>6} {a:<10} {'':>9} {'':>6} {f(c[0]):>12} {f(c[1]):>6}")
    if best:
        print(f"{trace:<8} {human(size):>6} {'best':<10} {'':>9} {'':>6} {f(best[0]):>12} {f(best[1]):>6}")
print()
for line in open(overheads):
    trace, objs, stored, distinct, body = line.split()
    objs, stored, distinct, body = int(objs), int(stored), int(distinct), int(body)
    per = (stored - body) / objs if objs == distinct and objs else float("nan")
    print(f"{trace}: trove, nothing evicted, holds {objs} objects in {stored} bytes; their bodies are "
          f"{body} bytes: {per:.1f} bytes of per-object overhead against the budget "
          f"(cachesim charges none: --consider-obj-metadata is off by default).")
PY
cat "$notes"
