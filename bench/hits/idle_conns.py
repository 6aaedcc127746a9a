#!/usr/bin/env python3
"""Hold N idle HTTP/1.1 keep-alive connections open to one server.

Part of bench/hits (the idle-connection test in MEASURING.md). Each connection sends one GET and
reads the whole response, so the server has served a request on it and now holds it as an idle
keep-alive connection, the state a real cache sits in for most of its clients. Then the script
waits. On SIGTERM or SIGINT it reports how many connections the server still has open (a server
that quietly drops idle connections has not held them) and exits.

    python3 idle_conns.py --port 18081 --path /1k.bin --count 10000 --ready FILE

It writes "opened N failed M" to FILE once all connections are up, and prints
"opened N failed M alive K" on exit.
"""

import argparse
import signal
import socket
import sys


def read_response(sock):
    """Read one HTTP/1.1 response with a Content-Length body; return the status code."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(min(65536, length - len(body)))
        if not chunk:
            raise ConnectionError("closed in the middle of the body")
        body += chunk
    return status


def still_open(sock):
    """True if the server has not closed the connection (nothing to read, no EOF, no error)."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/1k.bin")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--ready", required=True, help="file to write once all connections are up")
    args = parser.parse_args()

    # Block the stop signals now and collect them with sigwait later: no handler can interrupt a
    # half-done request, and the final check always runs.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})

    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n"
        "User-Agent: trove-bench-idle\r\n\r\n"
    ).encode()
    held, failed = [], 0
    for _ in range(args.count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(10)
        try:
            sock.connect((args.host, args.port))
            sock.sendall(request)
            if read_response(sock) != 200:
                raise ConnectionError("non-200 response")
            held.append(sock)
        except (OSError, ValueError, IndexError):
            failed += 1
            sock.close()

    summary = f"opened {len(held)} failed {failed}"
    with open(args.ready, "w") as ready:
        ready.write(summary + "\n")

    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    alive = sum(1 for sock in held if still_open(sock))
    print(f"{summary} alive {alive}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
