"""SOCKS5 (RFC 1928): CONNECT only, no authentication methods but "none".

The request is read whole and decided before anything is relayed; a denial is
reply 0x02 ("connection not allowed by ruleset"), a destination that cannot
be resolved or reached 0x04/0x05. Bytes the client sent after its request
(optimistic data) belong to that one connection: they go to the allowed
destination only, after the decision, and are dropped on a refusal.
"""

from __future__ import annotations

import ipaddress
import time

from .relay import Reader, relay

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket

    from .egress_gate import Gate

_REFUSED = b"\x05\x02\x00\x01" + b"\x00" * 6
_HOST_UNREACHABLE = b"\x05\x04\x00\x01" + b"\x00" * 6
_CONNECTION_REFUSED = b"\x05\x05\x00\x01" + b"\x00" * 6


def handle_socks(gate: Gate, sock: socket.socket) -> None:
    """Serve one SOCKS5 client connection."""
    started = time.monotonic()
    c = Reader(sock)
    ver, n = c.read_exactly(2)
    methods = c.read_exactly(n)
    if ver != 5 or 0 not in methods:
        sock.sendall(b"\x05\xff")
        return
    sock.sendall(b"\x05\x00")
    ver, cmd, rsv, atyp = c.read_exactly(4)
    if atyp == 1:
        host = str(ipaddress.IPv4Address(c.read_exactly(4)))
    elif atyp == 4:
        host = str(ipaddress.IPv6Address(c.read_exactly(16)))
    elif atyp == 3:
        (ln,) = c.read_exactly(1)
        host = c.read_exactly(ln).decode("latin-1")
    else:
        sock.sendall(b"\x05\x08\x00\x01" + b"\x00" * 6)
        return
    port = int.from_bytes(c.read_exactly(2), "big")
    if ver != 5 or cmd != 1 or rsv != 0:  # no BIND, no UDP ASSOCIATE
        from .decide import Decision

        gate.log(Decision(False, "command-not-supported", host, port), "socks5", started)
        sock.sendall(b"\x05\x07\x00\x01" + b"\x00" * 6)
        return
    d = gate.admit(host, port, "socks5", True, started)
    if not d.allowed:
        sock.sendall(_HOST_UNREACHABLE if d.failed else _REFUSED)
        return
    try:
        up, ahead = gate.open(d)
    except OSError:
        gate.failed(d, "socks5", started)
        sock.sendall(_CONNECTION_REFUSED)
        return
    sock.sendall(b"\x05\x00\x00\x01" + b"\x00" * 6 + ahead)
    if c.buf:
        up.sendall(c.buf)
    relay(sock, up)
