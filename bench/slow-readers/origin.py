#!/usr/bin/env python3
"""bench/slow-readers/origin.py: the origin for the slow-reader benchmark (run.sh starts it).

Serves GET /<anything> as a chunked (no Content-Length) 200 of SIZE bytes, cacheable
(`Cache-Control: public, max-age=3600`), written as fast as the socket takes it. With
--etag it also sends a strong ETag and answers `Range: bytes=N-` (when If-Range, if sent,
matches) with a 206 of the rest, as a static file server would: what lets a proxy resume a
client it detached. Loopback only; one request per connection (Connection: close).

    python3 origin.py --port 18280 --size 1073741824 --etag
"""

import argparse
import asyncio

PIECE = 64 * 1024
ETAG = '"slow-readers-v1"'


def pattern(offset: int, n: int, block: bytes) -> bytes:
    start = offset % 251
    return block[start:start + n]


async def handle(reader, writer, size, etag, block):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip().lower()] = v.strip()
    start = 0
    status = "200 OK"
    rng = fields.get("range", "")
    if etag and rng.startswith("bytes=") and rng.endswith("-") and fields.get("if-range", ETAG) == ETAG:
        try:
            start = int(rng[len("bytes="):-1])
            status = "206 Partial Content"
        except ValueError:
            start = 0
    out = [f"HTTP/1.1 {status}", "Cache-Control: public, max-age=3600", "Connection: close"]
    if etag:
        out.append(f"ETag: {ETAG}")
    if start:
        out.append(f"Content-Range: bytes {start}-{size - 1}/{size}")
        out.append(f"Content-Length: {size - start}")
    else:
        out.append("Transfer-Encoding: chunked")
    print(f"request {lines[0]} range={rng or '-'} -> {status}", flush=True)
    writer.write(("\r\n".join(out) + "\r\n\r\n").encode())
    chunked = not start
    sent = start
    try:
        while sent < size:
            n = min(PIECE, size - sent)
            data = pattern(sent, n, block)
            if chunked:
                writer.write(b"%x\r\n" % n + data + b"\r\n")
            else:
                writer.write(data)
            await writer.drain()
            sent += n
        if chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--size", type=int, default=1 << 30)
    p.add_argument("--etag", action="store_true")
    a = p.parse_args()
    block = bytes(i % 251 for i in range(PIECE + 251))
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, a.size, a.etag, block), "127.0.0.1", a.port, limit=65536
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
