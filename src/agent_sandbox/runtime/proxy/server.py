"""Serving listening sockets: accept, hand each connection to its protocol.

``Proxy.start_in_thread`` accepts on listening sockets (in the runtime these
live in the sandbox's network namespace) from daemon threads and runs each
connection on a worker (``relay.WORKERS``). ``serve`` is what ``sandbox exec``
calls: a proxy for parsed settings' network section, in this process.

srt's ``httpProxyPort`` / ``socksProxyPort`` name an external proxy already
running on that port of this host's loopback, which then does the domain
filtering (srt starts none of its own for that protocol). ``serve`` honours
them the same way: that listener's connections are passed, unread, to
``127.0.0.1:PORT`` in this process's (the host's) network namespace, and the
other protocol is still served here. Must never decide in a thread that
lets a connection through undecided otherwise.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading

from .decide import ProxyConfig
from .egress_gate import Gate
from .http import handle_http
from .name_lookup import hosts_from_env, own_addresses
from .relay import accept_loop, close_listeners, relay
from .socks import handle_socks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from ..settings import NetworkSettings
    from .egress_gate import Recorder

HANDSHAKE_TIMEOUT = 30.0  # a client that stalls mid-request is dropped


class Proxy(Gate):
    """One proxy instance: policy + relay, a worker per connection.

    Decisions are made before a byte is relayed; after that the bytes are
    copied between the two sockets unread (``relay``).
    """

    def __init__(self, config: ProxyConfig, record: Recorder | None = None) -> None:
        super().__init__(config, record)
        self._listeners: list[socket.socket] = []
        self._stopping = False

    def handle_http(self, sock: socket.socket) -> None:
        handle_http(self, sock)

    def handle_socks(self, sock: socket.socket) -> None:
        handle_socks(self, sock)

    def _serve_one(self, handler: Callable[[socket.socket], None], sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # unix sockets
        sock.settimeout(HANDSHAKE_TIMEOUT)
        try:
            handler(sock)
        except Exception:  # noqa: S110 - any failure closes the connection
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def start_in_thread(self, http: Sequence[socket.socket], socks: Sequence[socket.socket],
                        external: Sequence[tuple[socket.socket, int]] = ()) -> None:
        """Serve the listening sockets from daemon threads (returns at once);
        ``external``: listeners passed on to an external proxy's loopback port."""
        handlers: list[tuple[socket.socket, Callable[[socket.socket], None]]] = [
            *((s, self.handle_http) for s in http), *((s, self.handle_socks) for s in socks),
            *((s, _passed_to(port)) for s, port in external)]
        for lst, handler in handlers:
            self._listeners.append(lst)
            def serve(conn: socket.socket,
                      handler: Callable[[socket.socket], None] = handler) -> None:
                self._serve_one(handler, conn)

            threading.Thread(target=accept_loop, args=(lst, lambda: self._stopping, serve),
                             name="agent-sandbox-proxy", daemon=True).start()

    def stop(self) -> None:
        self._stopping = True
        close_listeners(self._listeners)


def _passed_to(port: int) -> Callable[[socket.socket], None]:
    """A handler relaying a connection, unread, to the external proxy on this
    host's loopback ``port`` (srt's ``httpProxyPort``/``socksProxyPort``); a
    connection it cannot reach is closed."""
    def handler(sock: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", port), timeout=HANDSHAKE_TIMEOUT)
        relay(sock, up)

    return handler


def serve(network: NetworkSettings, http: Any, socks: Any, record: Recorder | None,
          session: str) -> Proxy:
    """A proxy for settings' network section, serving two listening sockets (HTTP
    and SOCKS5; made in a sandbox's network namespace) from threads of this
    process: the hosts file named in ``$AGENT_SANDBOX_HOSTS``, this host's own
    addresses, and the upstream proxies of the settings or this environment. A
    protocol whose port the settings give (``httpProxyPort``/``socksProxyPort``)
    goes to the external proxy there instead (see the module doc)."""
    cfg = ProxyConfig.from_settings(network, os.environ, hosts=hosts_from_env(),
                                    own=own_addresses(), session=session)
    proxy = Proxy(cfg, record)
    listening = [socket.socket(fileno=s.detach()) for s in (http, socks)]
    for s in listening:
        s.setblocking(False)
    groups: tuple[list[socket.socket], list[socket.socket]] = ([], [])
    external: list[tuple[socket.socket, int]] = []
    for s, port, group in ((listening[0], network.http_proxy_port, groups[0]),
                           (listening[1], network.socks_proxy_port, groups[1])):
        if port is not None:
            external.append((s, port))
        else:
            group.append(s)
    proxy.start_in_thread(groups[0], groups[1], external)
    return proxy
