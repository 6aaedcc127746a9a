#!/usr/bin/env python3
"""Turn one bench/hits results directory into the markdown report.

    python3 bench/hits/report.py bench/hits/results/<run>

run.sh calls it at the end; it can be re-run on any results directory. It reads the raw wrk outputs
(raw/<label>-<target>-<size>.txt) and the small TSV files run.sh writes next to them, and prints
per target and object size: median req/s with min-max over rounds, the ratio of that median to each
ceiling's median, p50 and p99 latency (medians over rounds), RSS after the run, the origin requests
counted during the measured windows, and wrk's errors.
"""

import os
import re
import statistics
import sys

CEILINGS = ("origin", "ceiling")
UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def parse_wrk(path):
    """Requests/sec, p50 and p99 in ms, and error count from one wrk --latency output, or None."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return None
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    if not rps:
        return None
    latency = {}
    for pct, value, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M):
        latency[pct] = float(value) * UNITS[unit]
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses:\s+(\d+)", text))
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if socket:
        errors += sum(int(n) for n in socket.groups())
    return {"rps": float(rps.group(1)), "p50": latency.get("50"), "p99": latency.get("99"), "errors": errors}


def read_tsv(path):
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except OSError:
        return []


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def mib(kib):
    return "–" if kib in (None, "") else f"{int(kib) / 1024:.1f}"


def main(results):
    samples = read_tsv(os.path.join(results, "samples.tsv"))
    order, sizes = [], []
    runs = {}  # (target, size) -> list of parsed windows
    origin_hits = {}  # (target, size) -> origin requests summed over measured windows
    warm_notes = []
    idle_runs = {}
    for label, _round, target, size, origin, warm in samples:
        parsed = parse_wrk(os.path.join(results, "raw", f"{label}-{target}-{size}.txt"))
        if warm != "ok":
            warm_notes.append(f"{label} {target} {size}: {warm}")
        if label == "idle":
            idle_runs[(target, size)] = (parsed, int(origin))
            continue
        if target not in order:
            order.append(target)
        if size not in sizes:
            sizes.append(size)
        runs.setdefault((target, size), []).append(parsed)
        origin_hits[(target, size)] = origin_hits.get((target, size), 0) + int(origin)

    memory = {}
    for _phase, target, size, rss, _pss in read_tsv(os.path.join(results, "memory.tsv")):
        memory[(target, size)] = rss

    def rss_of(target, size):
        return memory.get((target, size), memory.get((target, "all")))

    def median_rps(target, size):
        return median([w["rps"] for w in runs.get((target, size), []) if w])

    out = []
    env = open(os.path.join(results, "env.txt"), encoding="utf-8").read().strip().splitlines() \
        if os.path.exists(os.path.join(results, "env.txt")) else []
    out.append("## Cached hits: trove and its peers")
    out.append("")
    out.extend(f"- {line}" for line in env)
    out.append("")
    out.append("Medians over rounds, min–max in brackets. Ratios are this target's median over the ceiling's "
               "median for the same size, from the same run. `origin` is nginx serving the file straight; "
               "`ceiling` is trove-ceiling (hyper 1, one current-thread tokio runtime, bytes from memory). "
               "RSS is summed over the target's processes after the run. \"origin reqs\" counts requests "
               "that reached the origin during the measured windows: it must be 0 for a hit test.")
    out.append("")
    out.append("| target | size | req/s | × origin | × ceiling | p50 ms | p99 ms | RSS MiB | origin reqs | errors | rounds |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for size in sizes:
        base = {c: median_rps(c, size) for c in CEILINGS}
        for target in order:
            windows = runs.get((target, size), [])
            good = [w for w in windows if w]
            rps = [w["rps"] for w in good]
            med = median(rps)
            spread = f" ({fmt(min(rps))}–{fmt(max(rps))})" if rps else ""
            ratios = [fmt(med / base[c], 2) if med and base[c] else "–" for c in CEILINGS]
            if target == "origin":
                origin_col = "(is the origin)"
            elif target == "ceiling":
                origin_col = "(no origin)"
            else:
                n = origin_hits.get((target, size), 0)
                origin_col = str(n) if n == 0 else f"**{n}: NOT ALL HITS**"
            errors = sum(w["errors"] for w in good)
            failed = len(windows) - len(good)
            rounds = f"{len(good)}" + (f" (+{failed} failed)" if failed else "")
            out.append(
                f"| {target} | {size} | {fmt(med)}{spread} | {ratios[0]} | {ratios[1]} | "
                f"{fmt(median([w['p50'] for w in good]), 2)} | {fmt(median([w['p99'] for w in good]), 2)} | "
                f"{mib(rss_of(target, size))} | {origin_col} | {errors} | {rounds} |"
            )

    idle = read_tsv(os.path.join(results, "idle.tsv"))
    if idle:
        out.append("")
        out.append("### With idle keep-alive connections held open")
        out.append("")
        head = "| target | idle conns | holder says | " + " | ".join(
            f"{s} req/s (× no-idle median)" for s in sizes) + " | RSS MiB before | RSS MiB idle | RSS MiB idle+hits | origin reqs |"
        out.append(head)
        out.append("|" + "---|" * (head.count("|") - 1))
        for target, count, held, idle_rss, _ipss, after_rss, _apss in idle:
            cells, origin_total = [], 0
            for size in sizes:
                parsed, origin = idle_runs.get((target, size), (None, 0))
                origin_total += origin
                base = median_rps(target, size)
                if parsed:
                    ratio = f" (× {parsed['rps'] / base:.2f})" if base else ""
                    cells.append(f"{fmt(parsed['rps'])}{ratio}")
                else:
                    cells.append("–")
            origin_col = str(origin_total) if origin_total == 0 else f"**{origin_total}: NOT ALL HITS**"
            out.append(f"| {target} | {count} | {held} | " + " | ".join(cells) +
                       f" | {mib(rss_of(target, 'all'))} | {mib(idle_rss)} | {mib(after_rss)} | {origin_col} |")

    notes = []
    threads = read_tsv(os.path.join(results, "threads.tsv"))
    if threads:
        notes.append("processes/threads after the run, all pinned to the server CPU unless noted below: " +
                     ", ".join(f"{t} {p}/{n}" for t, p, n in threads))
    for target, why in read_tsv(os.path.join(results, "skipped.tsv")):
        notes.append(f"skipped {target}: {why}")
    if os.path.exists(os.path.join(results, "unpinned.txt")):
        for line in open(os.path.join(results, "unpinned.txt"), encoding="utf-8"):
            notes.append(f"threads not pinned to the server CPU: {line.strip()}")
    notes.extend(f"warm-up: {n}" for n in warm_notes)
    if os.path.exists(os.path.join(results, "audit.txt")):
        for line in open(os.path.join(results, "audit.txt"), encoding="utf-8"):
            if line.strip():
                notes.append(f"cache status from the proxy's own log: {line.strip()}")
    if notes:
        out.append("")
        out.append("Notes:")
        out.extend(f"- {n}" for n in notes)
    print("\n".join(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: report.py RESULTS_DIR")
    main(sys.argv[1])
