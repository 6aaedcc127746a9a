#!/usr/bin/env python3
"""Hold N idle TLS keep-alive connections open to one server (bench/tls's idle test).

Each connection completes a full TLS handshake (no resumption: every connection's session is
new, as with N different clients), sends one GET and reads the whole response, so the server
holds it as an idle keep-alive TLS connection. Then it waits for SIGTERM/SIGINT and reports
how many connections are still open.

    python3 idle_tls.py --port 18444 --cafile ca.pem --count 10000 --ready FILE [--h2]

With --h2 each connection negotiates h2 by ALPN instead, sends the HTTP/2 preface and an
empty SETTINGS frame, acknowledges the server's SETTINGS and reads one GET on stream 1 to its
end, so the server holds an idle HTTP/2 connection that has served a request (no HPACK
library: the request uses static-table indexes and literals without Huffman coding).

It writes "opened N failed M" to FILE once all are up and prints "opened N failed M alive K"
on exit.
"""

import argparse
import signal
import socket
import ssl
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, GOAWAY = 0x0, 0x1, 0x4, 0x7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(index, value):
    """A literal header field without indexing, name from the static table (RFC 7541 6.2.2)."""
    v = value.encode()
    assert index < 15 and len(v) < 127
    return bytes([index]) + bytes([len(v)]) + v


def request(authority, path):
    # :method GET (2), :scheme https (7), then :authority (1) and :path (4) as literals.
    block = bytes([0x82, 0x87]) + literal(1, authority) + literal(4, path)
    return frame(HEADERS, END_STREAM | END_HEADERS, 1, block)


def read_frame(s, buf):
    while len(buf) < 9:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    length = struct.unpack(">I", b"\0" + buf[:3])[0]
    while len(buf) < 9 + length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    kind, flags = buf[3], buf[4]
    stream = struct.unpack(">I", buf[5:9])[0] & 0x7FFFFFFF
    return kind, flags, stream, buf[9 + length:]


def h2_get(s, a):
    """One GET over HTTP/2 on a fresh connection, read to the end of its stream."""
    if s.selected_alpn_protocol() != "h2":
        raise ConnectionError("no h2")
    s.sendall(PREFACE + frame(SETTINGS, 0, 0) + request(f"{a.name}:{a.port}", a.path))
    buf, acked = b"", False
    while True:
        kind, flags, stream, buf = read_frame(s, buf)
        if kind == SETTINGS and not flags & ACK and not acked:
            s.sendall(frame(SETTINGS, ACK, 0))
            acked = True
        elif kind == GOAWAY:
            raise ConnectionError("goaway")
        elif stream == 1 and kind in (HEADERS, DATA) and flags & END_STREAM:
            return


def read_response(s):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = s.recv(min(65536, length - len(body)))
        if not chunk:
            raise ConnectionError("closed mid-body")
        body += chunk


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--name", default="site.test")
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--path", default="/1k.bin")
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--h2", action="store_true")
    a = ap.parse_args()
    ctx = ssl.create_default_context(cafile=a.cafile)
    ctx.set_alpn_protocols(["h2"] if a.h2 else ["http/1.1"])
    req = f"GET {a.path} HTTP/1.1\r\nHost: {a.name}\r\n\r\n".encode()
    conns, failed = [], 0
    for _ in range(a.count):
        try:
            raw = socket.create_connection((a.host, a.port), timeout=10)
            s = ctx.wrap_socket(raw, server_hostname=a.name)  # a new session each time
            if a.h2:
                h2_get(s, a)
            else:
                s.sendall(req)
                read_response(s)
            conns.append(s)
        except Exception as e:  # noqa: BLE001 - counted, the run goes on
            failed += 1
            if failed <= 3:
                print(f"connection failed: {e}", file=sys.stderr)
    with open(a.ready, "w") as f:
        f.write(f"opened {len(conns)} failed {failed}\n")
    done = []
    signal.signal(signal.SIGTERM, lambda *_: done.append(1))
    signal.signal(signal.SIGINT, lambda *_: done.append(1))
    while not done:
        signal.pause()
    alive = 0
    for s in conns:
        try:
            s.setblocking(False)
            try:
                alive += 0 if s.recv(1) == b"" else 1
            except (ssl.SSLWantReadError, BlockingIOError):
                alive += 1
        except Exception:  # noqa: BLE001
            pass
    print(f"opened {len(conns)} failed {failed} alive {alive}")


if __name__ == "__main__":
    main()
