#!/usr/bin/env python3
"""Hold N idle TLS keep-alive connections open to one server (bench/tls's idle test).

Each connection completes a full TLS handshake (no resumption: every connection's session is
new, as with N different clients), sends one GET and reads the whole response, so the server
holds it as an idle keep-alive TLS connection. Then it waits for SIGTERM/SIGINT and reports
how many connections are still open.

    python3 idle_tls.py --port 18444 --cafile ca.pem --count 10000 --ready FILE

It writes "opened N failed M" to FILE once all are up and prints "opened N failed M alive K"
on exit.
"""

import argparse
import signal
import socket
import ssl
import sys


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
    a = ap.parse_args()
    ctx = ssl.create_default_context(cafile=a.cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    req = f"GET {a.path} HTTP/1.1\r\nHost: {a.name}\r\n\r\n".encode()
    conns, failed = [], 0
    for _ in range(a.count):
        try:
            raw = socket.create_connection((a.host, a.port), timeout=10)
            s = ctx.wrap_socket(raw, server_hostname=a.name)  # a new session each time
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
