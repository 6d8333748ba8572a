"""The egress gate both protocols pass through: decide, record, connect.

``Gate.admit`` is the one way to a destination: the decision
(``decide.decide`` over this proxy's settings and resolver), recorded before
anything is relayed (an allow that cannot be recorded becomes a denial), then
a socket to a checked address or through the routed upstream proxy
(``upstream.py``). Must never connect to an address the decision did not
check, nor look a name up a second time.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque

from .decide import Decision, decide
from .name_lookup import resolve

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .decide import IPAddress, ProxyConfig

    Recorder = Callable[[dict[str, Any]], None]


class Gate:
    """One proxy's policy and audit: decisions are made and recorded here."""

    def __init__(self, config: ProxyConfig, record: Recorder | None = None) -> None:
        self.config = config
        self.record = record or (lambda event: None)
        # the latest decisions (a bounded memory of them, for the caller's report)
        self.decisions: deque[Decision] = deque(maxlen=1000)

    def log(self, d: Decision, protocol: str, started: float) -> Decision:
        """Record a decision; an allow that cannot be recorded becomes a denial."""
        event = {
            "protocol": protocol, "host": d.host, "port": d.port, "allowed": d.allowed,
            "outcome": d.outcome, "reason": d.reason, "address": d.address,
            "session": self.config.session,
            **({"detail": d.detail} if d.detail else {}),
            **({"via": d.via} if d.via else {}),
            "request_id": os.urandom(16).hex(), "ms": round((time.monotonic() - started) * 1000, 3),
        }
        try:
            self.record(event)
        except Exception:
            if d.allowed:
                d = Decision(False, "audit-unavailable", d.host, d.port)
        self.decisions.append(d)
        return d

    def _resolve(self, host: str, port: int) -> list[IPAddress]:
        return resolve(self.config.hosts, host, port)

    def decide(self, host: str, port: int, tunnel: bool = True) -> Decision:
        """The decision for host and port (see ``decide.decide``), unrecorded."""
        return decide(self.config, host, port, tunnel, self._resolve)

    def admit(self, host: str, port: int, protocol: str, tunnel: bool,
              started: float) -> Decision:
        """The recorded decision for one request or connection."""
        return self.log(self.decide(host, port, tunnel), protocol, started)

    def failed(self, d: Decision, protocol: str, started: float) -> Decision:
        """Record that an allowed destination could not be reached (a gateway
        failure, outcome ``failed``), after the allow itself."""
        reason = "upstream-failed" if d.via else "connect-failed"
        return self.log(Decision(False, reason, d.host, d.port, upstream=d.upstream),
                        protocol, started)

    def open(self, d: Decision, tunnel: bool = True) -> tuple[socket.socket, bytes]:
        """A socket to an allowed destination (direct: the first reachable checked
        address; through an upstream: its tunnel, or for a plain HTTP request the
        upstream itself) and the bytes the upstream sent past its answer."""
        if not d.allowed:  # never reached: the callers answer a denial themselves
            raise PermissionError(d.reason)
        up = d.upstream
        if up is not None:
            from ..upstream import open_tunnel

            if tunnel:
                return open_tunnel(up, d.host, d.port, self.config.connect_timeout)
            s = up.dial(self.config.connect_timeout)
            s.settimeout(None)
            return s, b""
        error: OSError = OSError("no address")
        for address in d.addresses or ((d.address,) if d.address else ()):
            try:
                s = socket.create_connection((address, d.port),
                                             timeout=self.config.connect_timeout)
            except OSError as exc:
                error = exc
                continue
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s, b""
        raise error
