"""The hook relay's wire format (``sandbox agent``): one length-prefixed JSON
frame each way over a loopback TCP connection inside the sandbox's network
namespace. Shared by the inner side (``hook_relay``) and the host side
(``run``).

Stdlib only and cheap to import (the hook's fast path). Every frame read is
bounded; it never trusts a length it was sent beyond the caller's limit.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

RELAY_PORT = 3129  # in the sandbox's loopback only, never a host port
RELAY_ENV = "AGENT_SANDBOX_HOOK_RELAY"
MAX_REQUEST = 8 * 1024 * 1024 + 1024  # the hook's own input limit, and the framing
MAX_ANSWER = 64 * 1024 * 1024


def recv_exact(conn: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(1 << 16, n - got))
        if not chunk:
            raise ConnectionError("the peer closed the connection early")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_frame(conn: socket.socket, doc: dict[str, Any]) -> None:
    data = json.dumps(doc).encode()
    conn.sendall(len(data).to_bytes(4, "big") + data)


def recv_frame(conn: socket.socket, limit: int) -> Any:
    size = int.from_bytes(recv_exact(conn, 4), "big")
    if size > limit:
        raise ValueError(f"a frame of {size} bytes is larger than {limit}")
    return json.loads(recv_exact(conn, size))
