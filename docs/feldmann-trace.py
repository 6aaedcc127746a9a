#!/usr/bin/env python3
"""A synthetic Squid access log shaped like seed 003's traces (Feldmann et al., INFOCOM '99).

The paper's packet traces are not public; what it says about them is:

  modem (AT&T WorldNet, 12 days): 17,964 users, 154,260 dial-up sessions, at most 421 at
  once, ~10.7 M requests (~69 a session); completed responses 6.1 KB on average
  (33,731 MB / 5.49 M), median data transfer 0.42 s at 21 kbit/s (~1.1 KB); 35.2 % hit
  ratio with cookies uncachable; 18 % of requests on persistent connections.
  research (AT&T Labs, 11 days): >3,000 client machines, >23,000 servers, ~1.04 M requests;
  27.0 % hit ratio with cookies uncachable; 12 % of requests on persistent connections.

This script draws users who browse in sessions of pages; a page is an HTML document and a
few embedded objects fetched right after it, mostly from the same server (so a proxy's
server connection can be reused, as in a real trace and unlike `synthetic:polymix-2`);
sites are Zipf-popular, pages and images within a site too; sizes are log-normal with a
heavy (Pareto) tail of downloads. About 10 % of URLs carry a '?' (dynamic, uncachable by
the replay's default); cookies are added by `trove sim --cookie-fraction`.

    python3 docs/feldmann-trace.py modem    > modem.log
    python3 docs/feldmann-trace.py research > research.log

Deterministic for a given --seed. Prints a summary on standard error.
"""
import argparse
import bisect
import math
import random
import sys

POP = {
    # users, hours, sessions per user-day, pages per session (mean), think time median s,
    # embedded objects per page (mean), first embedded delay median s, gap mean s
    "modem": dict(users=1500, hours=24.0, sessions=1.0, pages=17.0, think=25.0,
                  embedded=3.0, delay=1.5, gap=0.8, servers=20000),
    "research": dict(users=600, hours=24.0, sessions=1.5, pages=12.0, think=40.0,
                     embedded=3.0, delay=0.3, gap=0.1, servers=23000),
}


def zipf_table(n, s):
    acc, out = 0.0, []
    for i in range(1, n + 1):
        acc += 1.0 / i ** s
        out.append(acc)
    return out


def zipf(rng, table):
    return bisect.bisect_left(table, rng.random() * table[-1])


def size(rng, median, sigma, tail_p, tail_min, alpha):
    if rng.random() < tail_p:
        return int(tail_min / (1.0 - rng.random()) ** (1.0 / alpha))
    return max(100, int(median * math.exp(rng.gauss(0.0, sigma))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("population", choices=sorted(POP))
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--users", type=int)
    ap.add_argument("--hours", type=float)
    a = ap.parse_args()
    p = dict(POP[a.population])
    if a.users:
        p["users"] = a.users
    if a.hours:
        p["hours"] = a.hours
    rng = random.Random(a.seed)
    span = p["hours"] * 3600.0
    sites = zipf_table(p["servers"], 0.9)
    pages_of = zipf_table(400, 1.0)
    images_of = zipf_table(60, 1.0)
    obj_size = {}

    def object_size(url, kind):
        s = obj_size.get(url)
        if s is None:
            if kind == "html":
                s = size(rng, 3000, 1.0, 0.0, 0, 1.0)
            else:
                s = size(rng, 1100, 1.1, 0.012, 60000, 1.2)
            s = min(s, 50_000_000)
            obj_size[url] = s
        return s

    out = []
    for u in range(p["users"]):
        client = f"10.{u // 65536 % 256}.{u // 256 % 256}.{u % 256}"
        n_sessions = max(1, int(rng.expovariate(1.0 / (p["sessions"] * p["hours"] / 24.0)) + 0.5))
        for _ in range(n_sessions):
            t = rng.random() * span
            pages = 1 + int(rng.expovariate(1.0 / (p["pages"] - 1)))
            site = zipf(rng, sites)
            for _ in range(pages):
                if rng.random() < 0.35:  # follow a link to another site
                    site = zipf(rng, sites)
                host = f"s{site}.example"
                page = zipf(rng, pages_of)
                q = "?q=%d" % rng.randrange(1 << 30) if rng.random() < 0.10 else ""
                url = f"http://{host}/p{page}.html{q}"
                out.append((t, client, url, object_size(url, "html"), "text/html"))
                te = t + p["delay"] * math.exp(rng.gauss(0.0, 0.5))
                for _ in range(int(rng.expovariate(1.0 / p["embedded"]) + 0.5)):
                    if rng.random() < 0.15:  # an ad or counter elsewhere
                        h = f"s{zipf(rng, sites)}.example"
                    else:
                        h = host
                    img = zipf(rng, images_of)
                    q = "?r=%d" % rng.randrange(1 << 30) if rng.random() < 0.05 else ""
                    url = f"http://{h}/i{img}.gif{q}"
                    out.append((te, client, url, object_size(url, "img"), "image/gif"))
                    te += rng.expovariate(1.0 / p["gap"])
                t += p["think"] * math.exp(rng.gauss(0.0, 1.2))
    out.sort()
    w = sys.stdout.write
    total = 0
    for t, client, url, b, ty in out:
        total += b
        host = url.split("/")[2]
        w(f"{t:.3f} 0 {client} TCP_MISS/200 {b} GET {url} - DIRECT/{host} {ty}\n")
    sizes = sorted(b for *_, b, _ in out)
    print(f"{len(out)} requests from {p['users']} users over {p['hours']} h, "
          f"{len({o[2].split('/')[2] for o in out})} servers; mean size {total / len(out):.0f} B, "
          f"median {sizes[len(sizes) // 2]} B", file=sys.stderr)


if __name__ == "__main__":
    main()
