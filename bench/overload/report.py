#!/usr/bin/env python3
"""bench/overload/report.py RESULTS_DIR: the markdown tables of a bench/overload/run.sh run.

Reads raw.jsonl (one `trove bench rate` result per line, labelled "<target> <stream> <rate>
<round>") and windows.tsv (origin requests and trove's shed count per window). Per scenario,
target and offered rate: the median over rounds (min-max) of the served rate (2xx per second),
its ratio to the target's best served rate in the scenario (its peak), p50 and p99 of the 2xx
response times (from when each request was due), the failures (with p50 / p99 of the time the
refusals took), the server's CPU use (CPU
seconds over the window, of its one core), and for the miss scenario the hits offered
alongside.
"""

import json
import statistics
import sys
from collections import defaultdict


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs, fmt="{:,.0f}"):
    if not xs:
        return "-"
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(med(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def main(results):
    rows = defaultdict(list)  # (target, stream, rate) -> [result]
    for line in open(f"{results}/raw.jsonl"):
        r = json.loads(line)
        target, stream, rate, _round = r["label"].split()
        rows[(target, stream, int(rate))].append(r)
    windows = defaultdict(list)  # (scenario, target, rate) -> [(origin_requests, shed, cpu_s)]
    with open(f"{results}/windows.tsv") as f:
        next(f)
        for line in f:
            scenario, rate, _round, target, origin, shed, cpu, overflows, cookies = line.rstrip(
                "\n"
            ).split("\t")
            windows[(scenario, target, int(rate))].append(
                (float(origin), float(shed), float(cpu), int(overflows), int(cookies))
            )

    targets = sorted({k[0] for k in rows}, key=lambda t: (t != "trove", t))
    burst = sorted({k[2] for k in rows if k[1] == "burst"})
    for n in burst:
        print(f"\n### burst: {n:,} clients connect within 50 ms, one hit each (Connection: close)\n")
        print("| target | served | failed | p50 ms | p99 ms | max ms | listen overflows | SYN cookies |")
        print("|---|---|---|---|---|---|---|---|")
        for t in targets:
            rs = rows.get((t, "burst", n), [])
            ws = windows.get(("burst", t, n), [])
            if not rs:
                continue
            def each(f):
                return " · ".join(f(r) for r in rs)

            served = each(lambda r: f"{r['ok']:,}")
            failed = each(lambda r: f"{r['sent'] - r['ok']:,}")
            p50 = each(lambda r: f"{r['ok_p50_ms']:,.0f}")
            p99 = each(lambda r: f"{r['ok_p99_ms']:,.0f}")
            top = each(lambda r: f"{r['ok_max_ms']:,.0f}")
            overflows = " · ".join(f"{w[3]:,}" for w in ws)
            cookies = " · ".join(f"{w[4]:,}" for w in ws)
            print(f"| {t} | {served} | {failed} | {p50} | {p99} | {top} | {overflows} | {cookies} |")
        print("\n(one figure per round, in round order; overflows and cookies are machine-wide counters)")
    for scenario, stream in (("miss", "miss"), ("hit", "hit")):
        rates = sorted({k[2] for k in rows if k[1] == stream})
        if not rates:
            continue
        print(f"\n### {scenario} path\n")
        head = "| offered req/s |"
        rule = "|---|"
        for t in targets:
            head += f" {t} served req/s (× peak) | {t} p50 / p99 ms | {t} failed | {t} CPU |"
            rule += "---|---|---|---|"
            if scenario == "miss":
                head += f" {t} hits alongside p50 / p99 ms |"
                rule += "---|"
        print(head)
        print(rule)
        peak = {
            t: max(med([r["served_rate"] for r in rows[(t, stream, rate)]]) for rate in rates)
            for t in targets
        }
        for rate in rates:
            line = f"| {rate:,} |"
            for t in targets:
                rs = rows[(t, stream, rate)]
                served = [r["served_rate"] for r in rs]
                ratio = med(served) / peak[t] if peak[t] else float("nan")
                p50 = med([r["ok_p50_ms"] for r in rs])
                p99 = med([r["ok_p99_ms"] for r in rs])
                fails = []
                for key, name in (
                    ("status_503", "503"),
                    ("status_other", "other"),
                    ("errors_connect", "connect"),
                    ("errors_closed", "reset"),
                    ("timeouts", "timeout"),
                ):
                    v = med([r[key] for r in rs])
                    if v:
                        fails.append(f"{v:,.0f} {name}")
                refused = [r for r in rs if r.get("status_503", 0) + r.get("status_other", 0)]
                if refused:
                    r50 = med([r["refused_p50_ms"] for r in refused])
                    r99 = med([r["refused_p99_ms"] for r in refused])
                    fails.append(f"in {r50:,.0f} / {r99:,.0f} ms")
                cpu = med([w[2] for w in windows[(scenario, t, rate)]])
                elapsed = med([r["elapsed_s"] for r in rs])
                busy = f"{100 * cpu / elapsed:.0f} %" if elapsed else "-"
                line += f" {spread(served)} ({ratio:.2f}) | {p50:,.1f} / {p99:,.1f} | {', '.join(fails) or '0'} | {busy} |"
                if scenario == "miss":
                    side = rows[(t, "hit-side", rate)]
                    s50 = med([r["ok_p50_ms"] for r in side])
                    s99 = med([r["ok_p99_ms"] for r in side])
                    bad = med([r["sent"] - r["ok"] for r in side])
                    note = f" ({bad:,.0f} failed)" if bad else ""
                    line += f" {s50:,.2f} / {s99:,.2f}{note} |"
            print(line)
        print()
        for t in targets:
            ws = [w for k, v in windows.items() if k[0] == scenario and k[1] == t for w in v]
            origin = sum(w[0] for w in ws)
            shed = sum(w[1] for w in ws)
            extra = f", trove_shed_requests_total +{shed:,.0f}" if t == "trove" else ""
            print(f"- {t}: {origin:,.0f} requests went to the origin in the measured windows{extra}")


if __name__ == "__main__":
    main(sys.argv[1])
