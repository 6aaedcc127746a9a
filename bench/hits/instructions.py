#!/usr/bin/env python3
"""Reads the callgrind files bench/hits/instructions.sh keeps.

    python3 bench/hits/instructions.py diff A B N   functions whose self cost per request changed
                                                    most from dump A to dump B (N requests each)
    python3 bench/hits/instructions.py callers F NAME N
                                                    who calls functions matching NAME, and what
                                                    those calls cost per request (e.g. memcpy)
    python3 bench/hits/instructions.py top F N      the functions that cost most per request in
                                                    dump F (self cost)

callgrind_annotate (valgrind 3.19) attributes every cost of these dumps to
`__libc_start_main`, so this reads the format itself: `fn=`/`cfn=` name a function (by number
once named), cost lines follow the function they belong to, and the line after `calls=` is the
inclusive cost of that call, which is not the caller's own.
"""

import collections
import re
import sys

NAMED = re.compile(r"(c?)fn=\((\d+)\)(?: (.*))?")


def read(path):
    """Self cost per function, and the cost of calls per (caller, callee)."""
    names = {}
    own = collections.Counter()
    calls = collections.Counter()
    count = collections.Counter()
    fn = callee = None
    call_line = False
    calls_n = 0
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = NAMED.match(line)
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                name = names.get(m.group(2), m.group(2))
                if m.group(1):
                    callee = name
                else:
                    fn = name
                continue
            if line.startswith("calls="):
                call_line = True
                calls_n = int(line.split("=")[1].split()[0])
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            parts = line.split()
            if len(parts) < 2 or fn is None:
                continue
            if call_line:
                call_line = False
                calls[(fn, callee)] += int(parts[1])
                count[(fn, callee)] += calls_n
            else:
                own[fn] += int(parts[1])
    return own, calls, count


def diff(a, b, n):
    own_a, _, _ = read(a)
    own_b, _, _ = read(b)
    print(f"per request: A {sum(own_a.values()) / n:.0f}, B {sum(own_b.values()) / n:.0f}")
    print(f"{'A':>8} {'B':>8} {'B-A':>8}  function (self cost)")
    keys = sorted(set(own_a) | set(own_b), key=lambda k: -abs(own_b[k] - own_a[k]))
    for k in keys[:40]:
        print(f"{own_a[k] / n:8.0f} {own_b[k] / n:8.0f} {(own_b[k] - own_a[k]) / n:+8.0f}  {k[:140]}")


def callers(path, name, n):
    _, calls, count = read(path)
    rows = collections.Counter()
    times = collections.Counter()
    for (caller, callee), cost in calls.items():
        if callee and name in callee:
            rows[caller] += cost
            times[caller] += count[(caller, callee)]
    print(f"{'cost':>8} {'calls':>6}  caller of {name} (per request)")
    for caller, cost in rows.most_common(20):
        print(f"{cost / n:8.0f} {times[caller] / n:6.2f}  {caller[:140]}")


def top(path, n):
    own, _, _ = read(path)
    print(f"per request: {sum(own.values()) / n:.0f}")
    for k, cost in own.most_common(50):
        print(f"{cost / n:8.0f}  {k[:140]}")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "callers":
        callers(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 4 and sys.argv[1] == "top":
        top(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
