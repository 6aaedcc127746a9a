#!/usr/bin/env python3
"""Traces for the hit-ratio benchmark (see run.sh and README.md).

  gen.py zipf10 OUT [N]   N requests (default 1,000,000), Zipf(1.0) over 100,000 objects
  gen.py zipf08 OUT [N]   N requests (default 1,000,000), Zipf(0.8) over 200,000 objects

Object sizes (drawn once per object, so an object keeps its size in every request):
  70% log-normal, median 4 KiB,  sigma 1.0, clamped to [100 B, 1 MiB]
  25% log-normal, median 64 KiB, sigma 1.0, clamped to [100 B, 1 MiB]
   5% uniform over [1 MiB, 8 MiB]
Object ids are popularity ranks (0 is the most popular); sizes are independent of rank.
1,000 requests a second. Written as `time,id,size` lines after a header, the CSV that
`trove sim` reads and `trove sim convert` turns into libCacheSim's oracleGeneral format.
Seeded: the same bytes every time.
"""
import bisect
import itertools
import math
import random
import sys

KiB, MiB = 1024, 1024 * 1024
TRACES = {  # name: (Zipf exponent, objects, seed)
    "zipf10": (1.0, 100_000, 10),
    "zipf08": (0.8, 200_000, 8),
}


def object_size(rng):
    u = rng.random()
    if u < 0.70:
        s = rng.lognormvariate(math.log(4 * KiB), 1.0)
    elif u < 0.95:
        s = rng.lognormvariate(math.log(64 * KiB), 1.0)
    else:
        return rng.randint(1 * MiB, 8 * MiB)
    return int(min(1 * MiB, max(100, s)))


def generate(out, alpha, objects, seed, n):
    rng = random.Random(seed)
    sizes = [object_size(rng) for _ in range(objects)]
    cdf = list(itertools.accumulate(1.0 / (k ** alpha) for k in range(1, objects + 1)))
    total = cdf[-1]
    with open(out, "w") as f:
        f.write("time,id,size\n")
        buf = []
        for t in range(n):
            oid = min(objects - 1, bisect.bisect_left(cdf, rng.random() * total))
            buf.append(f"{t // 1000},{oid},{sizes[oid]}\n")
            if len(buf) >= 100_000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in TRACES:
        sys.exit(f"usage: gen.py {{{'|'.join(TRACES)}}} OUT [N]")
    alpha, objects, seed = TRACES[sys.argv[1]]
    n = int(sys.argv[3]) if len(sys.argv) == 4 else 1_000_000
    generate(sys.argv[2], alpha, objects, seed, n)
