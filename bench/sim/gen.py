#!/usr/bin/env python3
"""Traces for `trove sim`'s replay-speed benchmark (see run.sh and BENCHMARKS.md).

  gen.py hot  N OUT   N requests over 1,000 objects of 5,000 bytes, 1,000 a second:
                      all but the first 1,000 are hits in any cache of 5 MB or more.
  gen.py zipf N OUT [ALPHA]
                      N requests, 1,000 a second: 80% Zipf(ALPHA, default 0.9) over a
                      catalogue of 1,000,000 objects, 20% one-hit wonders (ids asked
                      for once); sizes log-normal (median 8 KB, sigma 1.5, 100 B to
                      16 MiB), fixed per object. A CDN-like mix: most misses are cold.

`time,id,size` lines with a header, the plain CSV both trove sim and libCacheSim read.
Seeded: the same file every time.
"""
import bisect
import itertools
import random
import sys


def hot(n, out):
    with open(out, "w") as f:
        f.write("time,id,size\n")
        for start in range(0, n, 100_000):
            f.write("".join(f"{t // 1000},{t % 1000},5000\n"
                            for t in range(start, min(n, start + 100_000))))


def zipf(n, out, catalogue=1_000_000, alpha=0.9, wonders=0.2):
    rng = random.Random(42)
    weights = [1.0 / (k ** alpha) for k in range(1, catalogue + 1)]
    cdf = list(itertools.accumulate(weights))
    total = cdf[-1]

    def size():
        return int(min(16 << 20, max(100, rng.lognormvariate(9.0, 1.5))))

    sizes = [size() for _ in range(catalogue)]
    next_wonder = catalogue
    with open(out, "w") as f:
        f.write("time,id,size\n")
        buf = []
        for t in range(n):
            if rng.random() < wonders:
                oid, sz = next_wonder, size()
                next_wonder += 1
            else:
                oid = bisect.bisect_left(cdf, rng.random() * total)
                sz = sizes[oid]
            buf.append(f"{t // 1000},{oid},{sz}\n")
            if len(buf) >= 100_000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


if __name__ == "__main__":
    kind, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind == "zipf" and len(sys.argv) > 4:
        zipf(n, out, alpha=float(sys.argv[4]))
    else:
        {"hot": hot, "zipf": zipf}[kind](n, out)
