#!/usr/bin/env python3
"""bench/slow-readers/slow_clients.py: N slow clients of one proxy (run.sh starts it).

Client i connects at i*STAGGER seconds, sends `GET <path>` (the same path for all, or
/big/<i> with --distinct), and reads the response at RATE bytes/s through a 64 KiB receive
buffer, for DURATION seconds, then hangs up. Body bytes are checked against the origin's
pattern (chunked framing is decoded). Prints one JSON line: per-client bytes, whether the
body was cut off (the connection ended before the reader was done), and totals. Loopback
only; everything ends after STAGGER*N + DURATION + 10 s at the latest.

    python3 slow_clients.py --port 18290 --clients 16 --rate 2097152 --duration 60 --stagger 0.5
"""

import argparse
import asyncio
import json
import socket
import time


class Body:
    """Incremental decoder of a chunked or length-delimited body, checking the pattern."""

    def __init__(self, chunked, length, block):
        self.chunked = chunked
        self.left = length if not chunked else 0
        self.buf = b""
        self.body = 0
        self.done = False
        self.bad = False
        self.block = block

    def feed(self, data):
        self.buf += data
        while self.buf and not self.done:
            if self.left:
                n = min(self.left, len(self.buf))
                piece, self.buf = self.buf[:n], self.buf[n:]
                start = self.body % 251
                if piece != self.block[start:start + n] and len(piece) <= 65536:
                    self.bad = True
                self.body += n
                self.left -= n
                if not self.chunked and self.left == 0:
                    self.done = True
                continue
            if not self.chunked:
                self.done = True
                break
            i = self.buf.find(b"\r\n")
            if i < 0:
                return
            line, self.buf = self.buf[:i], self.buf[i + 2:]
            if not line:
                continue
            size = int(line.split(b";")[0], 16)
            if size == 0:
                self.done = True
            self.left = size


async def client(i, a, block, results):
    await asyncio.sleep(i * a.stagger)
    path = f"/big/{i}" if a.distinct else "/big"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.setblocking(False)
    r = {"client": i, "status": None, "bytes": 0, "cut": False, "bad": False}
    results.append(r)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", a.port))
        await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nHost: bench.local\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            d = await loop.sock_recv(sock, 65536)
            if not d:
                r["cut"] = True
                return
            head += d
        h, rest = head.split(b"\r\n\r\n", 1)
        text = h.decode("latin-1").lower()
        r["status"] = int(text.split(" ")[1])
        chunked = "transfer-encoding: chunked" in text
        length = 0
        for line in text.split("\r\n"):
            if line.startswith("content-length:"):
                length = int(line.split(":")[1])
        body = Body(chunked, length, block)
        body.feed(rest)
        start = time.monotonic()
        end = start + a.duration
        while time.monotonic() < end and not body.done:
            # Read at most what RATE allows so far, then wait a little.
            allowed = int((time.monotonic() - start) * a.rate) - body.body
            if allowed <= 0:
                await asyncio.sleep(0.02)
                continue
            try:
                d = await asyncio.wait_for(loop.sock_recv(sock, min(allowed, 65536)), 5)
            except asyncio.TimeoutError:
                continue
            if not d:
                r["cut"] = not body.done
                break
            body.feed(d)
        r["bytes"] = body.body
        r["bad"] = body.bad
    except OSError:
        r["cut"] = True
    finally:
        sock.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--rate", type=int, default=2 << 20, help="bytes per second per client")
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--stagger", type=float, default=0.5)
    p.add_argument("--distinct", action="store_true")
    a = p.parse_args()
    block = bytes(i % 251 for i in range(65536 + 251))
    results = []
    limit = a.stagger * a.clients + a.duration + 10
    tasks = [asyncio.create_task(client(i, a, block, results)) for i in range(a.clients)]
    done, pending = await asyncio.wait(tasks, timeout=limit)
    for t in pending:
        t.cancel()
    total = sum(r["bytes"] for r in results)
    print(json.dumps({
        "clients": sorted(results, key=lambda r: r["client"]),
        "total_bytes": total,
        "cut": sum(1 for r in results if r["cut"]),
        "bad": sum(1 for r in results if r["bad"]),
    }))


if __name__ == "__main__":
    asyncio.run(main())
