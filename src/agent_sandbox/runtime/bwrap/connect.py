"""``ProxyCommand`` helper for ssh inside the sandbox: HOST PORT over HTTP CONNECT.

Run as ``python -I -S connect.py HOST PORT``; it connects to the sandbox's
loopback proxy, asks for HOST:PORT, and relays stdin/stdout. Stdlib only and
standalone (no package imports). It never connects anywhere but the proxy.
"""

from __future__ import annotations

import os
import selectors
import socket
import sys


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: connect.py HOST PORT\n")
        return 2
    host, port = argv
    proxy = os.environ.get("SANDBOX_PROXY_PORT", "3128")
    s = socket.create_connection(("127.0.0.1", int(proxy)))
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            sys.stderr.write("proxy closed the connection\n")
            return 1
        head += chunk
    status, _, rest = head.partition(b"\r\n\r\n")
    if b" 200 " not in status.split(b"\r\n", 1)[0] + b" ":
        sys.stderr.write(status.decode("latin-1") + "\n")
        return 1
    out = sys.stdout.buffer
    if rest:
        out.write(rest)
        out.flush()
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(s, selectors.EVENT_READ)
    open_in = True
    while True:
        for key, _ in sel.select():
            if key.fd == 0:
                data = os.read(0, 65536)
                if not data:
                    sel.unregister(0)
                    s.shutdown(socket.SHUT_WR)
                    open_in = False
                else:
                    s.sendall(data)
            else:
                data = s.recv(65536)
                if not data:
                    return 0
                out.write(data)
                out.flush()
        _ = open_in


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
