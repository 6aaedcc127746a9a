#!/usr/bin/env python3
"""Prints bench/tls's markdown report from a results directory (run.sh writes one)."""

import glob
import os
import re
import statistics
import sys


def med(xs):
    return f"{statistics.median(xs):,.0f} ({min(xs):,.0f}–{max(xs):,.0f})" if xs else "-"


def wrk(path):
    t = open(path).read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
    origin = int(re.search(r"origin_requests_during_window (\d+)", t).group(1))
    return rps, origin


def stime(path):
    t = open(path).read()
    m = re.search(r"(\d+) connections in (\d+) real seconds", t)
    return int(m.group(1)) / int(m.group(2)) if m else None


def main(d):
    targets = sorted({os.path.basename(p).split("-")[1] for p in glob.glob(f"{d}/wrk-*")})
    rows = []
    figures = {}
    for kind, label in [("1k", "cached 1 KB hits, TLS keep-alive (req/s)"),
                        ("100k", "cached 100 KB hits, TLS keep-alive (req/s)")]:
        cells = []
        for t in targets:
            runs = [wrk(p) for p in sorted(glob.glob(f"{d}/wrk-{t}-{kind}-r*.txt"))]
            xs = [r for r, _ in runs]
            figures[(kind, t)] = statistics.median(xs) if xs else None
            origin = sum(o for _, o in runs)
            cells.append(med(xs) + ("" if origin == 0 else f" **{origin} origin requests!**"))
        rows.append((label, cells, kind))
    for mode, label in [("new", "new TLS connections/s, full handshake"),
                        ("reuse", "new TLS connections/s, resumed")]:
        cells = []
        for t in targets:
            xs = [x for x in (stime(p) for p in sorted(glob.glob(f"{d}/stime-{t}-{mode}-r*.txt"))) if x]
            figures[(mode, t)] = statistics.median(xs) if xs else None
            cells.append(med(xs))
        rows.append((label, cells, mode))
    cells = []
    for t in targets:
        p = f"{d}/idle-{t}.txt"
        if not os.path.exists(p):
            cells.append("-")
            continue
        txt = open(p).read()
        before = int(re.search(r"rss_before_kib (\d+)", txt).group(1))
        after = int(re.search(r"rss_with_idle_kib (\d+)", txt).group(1))
        held = re.search(r"held opened (\d+) failed (\d+)", txt)
        n = int(held.group(1)) if held else 0
        per = (after - before) * 1024 / n if n else None
        figures[("idle", t)] = per
        cells.append(f"{per:,.0f} B ({n} held; RSS {before // 1024} → {after // 1024} MiB)" if per else "-")
    rows.append(("memory per idle TLS connection", cells, "idle"))
    print("| measure | " + " | ".join(targets) + " | trove / nginx |")
    print("|---|" + "---|" * (len(targets) + 1))
    for label, cells, key in rows:
        a, b = figures.get((key, "trove")), figures.get((key, "nginx"))
        ratio = f"{a / b:.2f}" if a and b else "-"
        print(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1])
