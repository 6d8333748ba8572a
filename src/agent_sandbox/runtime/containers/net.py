"""The network of a gVisor container that may reach anything at all: its own
network namespace, holding nothing but loopback and the listening sockets
opened in it from the host (``bwrap.netns.open_listeners``), served from this
process.

- the egress proxy: 127.0.0.1:3128 (HTTP) and :1080 (SOCKS5), deciding each
  request against a network policy (``serve_proxy``);
- relayed endpoints: 127.0.0.1:PORT for each ``host:port`` an infrastructure
  action may reach directly (its database), each connection relayed unread to
  that one destination from the host's network (``Relays``).

gVisor uses that namespace as its host network (``runsc --network=host``, see
``podman.PodmanService``), so the container reaches what is listening there
and nothing else. This module must never listen anywhere but in the
container's namespace, nor connect anywhere but the endpoint a listener was
opened for.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ... import contract
from ..failures import SandboxStartError

PROXY_PORTS = (contract.PROXY_HTTP_PORT, contract.PROXY_SOCKS_PORT)
CONNECT_TIMEOUT = 10.0


def endpoint_ports(endpoints: Sequence[str], proxy: bool) -> list[tuple[int, str, int]]:
    """``(loopback port, host, port)`` for each ``host:port`` (pure): the same
    port on the container's loopback. Raises ``ValueError`` for a malformed
    endpoint, two endpoints on one port, or one on a port the proxy uses."""
    from ..proxy.decide import split_hostport

    taken = {p: "the egress proxy" for p in PROXY_PORTS} if proxy else {}
    out = []
    for ep in endpoints:
        host, port = split_hostport(ep, -1)
        if not host or not 1 <= port <= 65535:
            raise ValueError(f"{ep!r} is not host:port")
        if port in taken:
            raise ValueError(f"{ep!r}: port {port} on the container's loopback is already "
                             f"{taken[port]}'s")
        taken[port] = repr(ep)
        out.append((port, host, port))
    return out


def open_ports(pid: int, ports: Sequence[int]) -> list[socket.socket]:
    """Listening sockets on 127.0.0.1:<ports> in the network namespace of ``pid``
    (its loopback brought up first). Raises ``SandboxStartError``."""
    from ..bwrap.netns import open_listeners

    try:
        raw = open_listeners(pid, ports, loopback_up=True)
    except OSError as exc:
        raise SandboxStartError(f"gVisor container: {exc}") from None
    return [socket.socket(fileno=s.detach()) for s in raw]


def serve_proxy(http: socket.socket, socks: socket.socket, network: Any,
                session: str) -> tuple[Any, Callable[[], None]]:
    """The egress proxy for ``network`` (parsed settings' network section) on
    two listeners made in a container's namespace, recording to the audit
    (no audit, no egress: every request is then refused). Returns the proxy
    and the audit's close."""
    from ..proxy import audit_recorder, refusing, serve

    close: Callable[[], None] = lambda: None  # noqa: E731
    try:
        record, close = audit_recorder(None)
    except Exception as exc:  # no audit, no egress: every request is refused
        record = refusing(f"the audit log is unavailable ({type(exc).__name__}: {exc})")
    return serve(network, http, socks, record, session), close


class Relays:
    """Each listener's connections relayed, unread, to its one destination,
    connected from this process's (the host's) network."""

    def __init__(self, listeners: Sequence[tuple[socket.socket, str, int]]) -> None:
        self._listeners = [s for s, _, _ in listeners]
        self._stopping = False
        self.connections = 0
        self.failures: list[str] = []
        from ..proxy.relay import accept_loop

        for lst, host, port in listeners:
            threading.Thread(target=accept_loop,
                             args=(lst, lambda: self._stopping,
                                   functools.partial(self._serve_one, host=host, port=port)),
                             name="agent-sandbox-relay", daemon=True).start()

    def _serve_one(self, conn: socket.socket, host: str, port: int) -> None:
        from ..proxy.relay import relay

        self.connections += 1
        try:
            up = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            self.failures.append(f"{host}:{port}: {exc}")
            with contextlib.suppress(OSError):
                conn.close()
            return
        relay(conn, up)

    def stop(self) -> None:
        from ..proxy.relay import close_listeners

        self._stopping = True
        close_listeners(self._listeners)
