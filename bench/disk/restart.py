#!/usr/bin/env python3
"""bench/disk/restart.py: what a proxy serves right after a `kill -9`, timed from the restart.

Starts the proxy (the command after `--`, in a process group of its own), waits until it is
steady (every probe is a hit and `--ready-cmd`, if given, succeeds), kills the group with
SIGKILL, starts the same command again at once, and times, from that restart:

  listening   the first TCP connection accepted by the proxy
  miss        the first 200 for a URL never requested before (`--miss`, `{n}` replaced by a
              counter): the proxy forwards to the origin (users can browse again)
  hit:NAME    the first 200 for a probe URL (`--probe NAME=URL`) whose origin answers 404 or
              does not exist: only the proxy's cache can answer it with a 200
  ready       `--ready-cmd` first succeeded (trove: the whole index is back; nginx: its cache
              loader has finished)

Every poll is a new connection and a new request; a failed one is retried after 2 ms. Rounds
are repeated (`--rounds`); each restarted proxy is the next round's victim once steady. One
line of JSON per round on stdout; progress on stderr. Bounded: `--max-wait` per restart.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def get(addr, url, timeout=2.0):
    """GET `url` (absolute for a forward proxy, a path for a reverse one) through `addr`;
    the status, or None when the exchange failed."""
    host, port = addr.rsplit(":", 1)
    try:
        c = http.client.HTTPConnection(host, int(port), timeout=timeout)
        hdrs = {"Connection": "close"}
        if not url.startswith("http"):
            hdrs["Host"] = addr
        c.request("GET", url, headers=hdrs)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status
    except (OSError, http.client.HTTPException):
        return None


def accepts(addr):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
        return True
    except OSError:
        return False


def start(cmd, log):
    return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)


def kill9(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--proxy", required=True, help="host:port the proxy listens on")
    ap.add_argument("--miss", required=True, help="URL template with {n}, never cached before")
    ap.add_argument("--probe", action="append", default=[], help="NAME=URL served only from cache")
    ap.add_argument("--ready-cmd", help="shell command that succeeds once the proxy is fully loaded")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--steady-wait", type=float, default=900.0)
    ap.add_argument("--settle", type=float, default=2.0, help="seconds steady before each kill")
    ap.add_argument("--log", default="/dev/null")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    probes = [p.split("=", 1) for p in a.probe]
    log = open(a.log, "ab")
    counter = [0]
    lock = threading.Lock()

    def miss_url():
        with lock:
            counter[0] += 1
            return a.miss.replace("{n}", f"{os.getpid()}-{time.time_ns()}-{counter[0]}")

    def ready_ok():
        return a.ready_cmd is None or subprocess.call(a.ready_cmd, shell=True) == 0

    def steady(deadline):
        while time.monotonic() < deadline:
            if all(get(a.proxy, u) == 200 for _, u in probes) and ready_ok():
                return True
            time.sleep(0.2)
        return False

    p = start(cmd, log)
    try:
        t = time.monotonic()
        if not steady(t + a.steady_wait):
            sys.exit(f"{a.name}: not steady within {a.steady_wait} s")
        print(f"{a.name}: steady after {time.monotonic() - t:.1f} s", file=sys.stderr)
        for rnd in range(1, a.rounds + 1):
            time.sleep(a.settle)
            kill9(p)
            t0 = time.monotonic()
            p = start(cmd, log)
            times = {}
            end = t0 + a.max_wait

            def until(name, ok):
                while time.monotonic() < end:
                    if ok():
                        times[name] = round(time.monotonic() - t0, 3)
                        return
                    time.sleep(0.002)

            jobs = [("listening", lambda: accepts(a.proxy)),
                    ("miss", lambda: get(a.proxy, miss_url()) == 200)]
            jobs += [(f"hit:{n}", (lambda u=u: get(a.proxy, u) == 200)) for n, u in probes]
            if a.ready_cmd:
                jobs.append(("ready", ready_ok))
            threads = [threading.Thread(target=until, args=j) for j in jobs]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            row = {"target": a.name, "round": rnd, **times}
            print(json.dumps(row), flush=True)
            print(f"{a.name} round {rnd}: {times}", file=sys.stderr)
            if not steady(time.monotonic() + a.steady_wait):
                sys.exit(f"{a.name}: not steady again within {a.steady_wait} s")
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            kill9(p)


if __name__ == "__main__":
    main()
