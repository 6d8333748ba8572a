"""The domain-filtering egress proxy: HTTP (absolute-URI and CONNECT) and SOCKS5.

The sandbox has no network but its own loopback; the proxy is its only way out.
``Proxy.serve_sockets`` accepts on listening sockets (in the runtime these live in
the sandbox's network namespace and were handed over a unix socket), decides
each request with pure functions, and relays allowed connections.

Decisions, in order (all must pass):

1. the host is canonicalised (case, trailing dot, IDNA, NUL, numeric IP forms)
   and matched: denied patterns win, then allowed patterns; anything else is
   ``blocked-by-allowlist``;
2. the name is resolved once, here, and every address it resolves to must be a
   public one: loopback, link-local, unspecified, multicast, cloud metadata
   endpoints and this host's own addresses are ``blocked-by-address`` (so DNS
   rebinding to loopback fails); the connection goes to the checked address,
   never to a second lookup.

A denial is ``403`` with ``X-Proxy-Error: <reason>`` (SOCKS5: reply 0x02,
"connection not allowed by ruleset"). Every decision is recorded through
``record`` (the audit log). The proxy must never relay a byte for a request it
has not allowed, and any error while deciding is a denial.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_sandbox.spec import domains

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Recorder = Callable[[dict[str, Any]], None]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200",
              "168.63.129.16", "192.0.0.192")
)
_THIS_NET = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
HEAD_LIMIT = 64 * 1024
BUF = 256 * 1024


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    host: str  # canonical host (or the raw text when it could not be canonicalised)
    port: int
    address: str | None = None


def address_refusal(ip: IPAddress, own: frozenset[IPAddress]) -> str | None:
    """Why a resolved address may not be reached, or None (pure)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in METADATA_ADDRESSES:
        return "metadata"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NET):
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip == ipaddress.IPv4Address("255.255.255.255"):
        return "broadcast"
    if ip in own:
        return "host-address"
    return None


def decide_name(host: str, port: int, allowed: Sequence[str], denied: Sequence[str]) -> Decision:
    """The policy decision for a requested host name and port (pure)."""
    if not 1 <= port <= 65535:
        return Decision(False, "invalid-port", host, port)
    ok, reason = domains.host_allowed(host, list(allowed), list(denied))
    try:
        canon = domains.canonical_host(host)
    except domains.DomainError:
        canon = host
    return Decision(ok, reason, canon, port)


def own_addresses() -> frozenset[IPAddress]:
    """Every address configured on this host's interfaces (plus loopback)."""
    found: set[IPAddress] = set()
    try:
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    with contextlib.suppress(ValueError):
                        found.add(ipaddress.ip_address(a.address.split("%", 1)[0]))
    except Exception:  # noqa: S110 - loopback and metadata checks still apply
        pass
    return frozenset(found)


def load_hosts(path: str) -> dict[str, list[str]]:
    """A hosts(5)-format file as {canonical name: [addresses]}."""
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split("#", 1)[0].split()
            if len(parts) < 2:
                continue
            for name in parts[1:]:
                with contextlib.suppress(domains.DomainError):
                    out.setdefault(domains.canonical_host(name), []).append(parts[0])
    return out


@dataclass
class ProxyConfig:
    allowed: tuple[str, ...]
    denied: tuple[str, ...] = ()
    hosts: dict[str, list[str]] = field(default_factory=dict)
    own: frozenset[IPAddress] = field(default_factory=frozenset)
    connect_timeout: float = 10.0
    session: str = ""


class Proxy:
    """One proxy instance: policy + relay. Thread-safe start/stop."""

    def __init__(self, config: ProxyConfig, record: Recorder | None = None) -> None:
        self.config = config
        self.record = record or (lambda event: None)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[asyncio.base_events.Server] = []
        self.decisions: list[Decision] = []

    # -- decisions -------------------------------------------------------

    def _log(self, d: Decision, protocol: str, started: float) -> None:
        self.decisions.append(d)
        event = {
            "protocol": protocol, "host": d.host, "port": d.port, "allowed": d.allowed,
            "reason": d.reason, "address": d.address, "session": self.config.session,
            "request_id": uuid.uuid4().hex, "ms": round((time.monotonic() - started) * 1000, 3),
        }
        try:
            self.record(event)
        except Exception:  # noqa: S110 - recording failures must not stop the relay of a denial
            pass

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        ip = domains.parse_ip_literal(host)
        if ip is not None:
            return [ip]
        if host in self.config.hosts:
            return [ipaddress.ip_address(a) for a in self.config.hosts[host]]
        assert self.loop is not None
        infos = await self.loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(ipaddress.ip_address(i[4][0].split("%", 1)[0]) for i in infos))

    async def decide(self, host: str, port: int) -> Decision:
        d = decide_name(host, port, self.config.allowed, self.config.denied)
        if not d.allowed:
            return d
        try:
            addrs = await self._resolve(d.host, port)
        except (OSError, ValueError, UnicodeError):
            return Decision(False, "resolve-failed", d.host, port)
        if not addrs:
            return Decision(False, "resolve-failed", d.host, port)
        for a in addrs:
            why = address_refusal(a, self.config.own)
            if why is not None:
                return Decision(False, f"blocked-by-address: {why}", d.host, port, str(a))
        return Decision(True, "allowed", d.host, port, str(addrs[0]))

    async def _open(self, d: Decision) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert d.address is not None
        return await asyncio.wait_for(
            asyncio.open_connection(d.address, d.port, limit=BUF),
            self.config.connect_timeout,
        )

    # -- relay -----------------------------------------------------------

    @staticmethod
    async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await r.read(BUF)
                if not data:
                    break
                w.write(data)
                if w.transport.get_write_buffer_size() > BUF:
                    await w.drain()
            with contextlib.suppress(OSError, RuntimeError):
                if w.can_write_eof():
                    w.write_eof()
        except (OSError, asyncio.IncompleteReadError, RuntimeError):
            with contextlib.suppress(Exception):
                w.close()

    async def _relay(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter,
                     ur: asyncio.StreamReader, uw: asyncio.StreamWriter) -> None:
        try:
            await asyncio.gather(self._pipe(cr, uw), self._pipe(ur, cw))
        finally:
            for w in (uw, cw):
                with contextlib.suppress(Exception):
                    w.close()

    # -- HTTP ------------------------------------------------------------

    @staticmethod
    def _forbidden(reason: str) -> bytes:
        body = f"Blocked by agent-sandbox: {reason}\n".encode()
        return (
            b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: " + reason.encode("ascii", "replace")
            + b"\r\nContent-Type: text/plain\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body
        )

    async def handle_http(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        try:
            try:
                head = await cr.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                cw.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                return
            lines = head.split(b"\r\n")
            try:
                method, target, version = lines[0].decode("latin-1").split(" ")
            except ValueError:
                cw.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                return
            if method.upper() == "CONNECT":
                host, port = _split_hostport(target, 443)
                d = await self._check(host, port)
                self._log(d, "http-connect", started)
                if not d.allowed:
                    cw.write(self._forbidden(d.reason))
                    return
                try:
                    ur, uw = await self._open(d)
                except (TimeoutError, OSError):
                    cw.write(b"HTTP/1.1 502 Bad Gateway\r\nX-Proxy-Error: connect-failed\r\n"
                             b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                    return
                cw.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await self._relay(cr, cw, ur, uw)
                return
            if not target.lower().startswith("http://"):
                d = Decision(False, "not-a-proxy-request", target[:200], 0)
                self._log(d, "http", started)
                cw.write(self._forbidden(d.reason))
                return
            rest = target[7:]
            authority, _, path = rest.partition("/")
            authority = authority.rsplit("@", 1)[-1]
            host, port = _split_hostport(authority, 80)
            d = await self._check(host, port)
            self._log(d, "http", started)
            if not d.allowed:
                cw.write(self._forbidden(d.reason))
                return
            try:
                ur, uw = await self._open(d)
            except (TimeoutError, OSError):
                cw.write(b"HTTP/1.1 502 Bad Gateway\r\nX-Proxy-Error: connect-failed\r\n"
                         b"Content-Length: 0\r\nConnection: close\r\n\r\n")
                return
            out = [f"{method} /{path} {version}".encode("latin-1")]
            for line in lines[1:]:
                if not line:
                    continue
                name = line.split(b":", 1)[0].strip().lower()
                if name in (b"host", b"connection", b"proxy-connection", b"keep-alive",
                            b"proxy-authorization"):
                    continue
                out.append(line)
            out.append(b"Host: " + authority.encode("latin-1"))
            out.append(b"Connection: close")
            uw.write(b"\r\n".join(out) + b"\r\n\r\n")
            await self._relay(cr, cw, ur, uw)
        except Exception:  # noqa: S110 - any failure closes the connection
            pass
        finally:
            with contextlib.suppress(Exception):
                await cw.drain()
            with contextlib.suppress(Exception):
                cw.close()

    async def _check(self, host: str, port: int) -> Decision:
        try:
            return await self.decide(host, port)
        except Exception as exc:
            return Decision(False, f"internal-error: {type(exc).__name__}", host, port)

    # -- SOCKS5 ----------------------------------------------------------

    async def handle_socks(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        try:
            ver, n = await cr.readexactly(2)
            methods = await cr.readexactly(n)
            if ver != 5 or 0 not in methods:
                cw.write(b"\x05\xff")
                return
            cw.write(b"\x05\x00")
            ver, cmd, _, atyp = await cr.readexactly(4)
            if atyp == 1:
                host = str(ipaddress.IPv4Address(await cr.readexactly(4)))
            elif atyp == 4:
                host = str(ipaddress.IPv6Address(await cr.readexactly(16)))
            elif atyp == 3:
                (ln,) = await cr.readexactly(1)
                raw = await cr.readexactly(ln)
                host = raw.decode("utf-8", "replace") if b"\x00" not in raw else raw.decode(
                    "latin-1")
            else:
                cw.write(b"\x05\x08\x00\x01" + b"\x00" * 6)
                return
            port = int.from_bytes(await cr.readexactly(2), "big")
            if ver != 5 or cmd != 1:
                d = Decision(False, "command-not-supported", host, port)
                self._log(d, "socks5", started)
                cw.write(b"\x05\x07\x00\x01" + b"\x00" * 6)
                return
            d = await self._check(host, port)
            self._log(d, "socks5", started)
            if not d.allowed:
                cw.write(b"\x05\x02\x00\x01" + b"\x00" * 6)  # not allowed by ruleset
                return
            try:
                ur, uw = await self._open(d)
            except (TimeoutError, OSError):
                cw.write(b"\x05\x05\x00\x01" + b"\x00" * 6)
                return
            cw.write(b"\x05\x00\x00\x01" + b"\x00" * 6)
            await self._relay(cr, cw, ur, uw)
        except Exception:  # noqa: S110 - any failure closes the connection
            pass
        finally:
            with contextlib.suppress(Exception):
                await cw.drain()
            with contextlib.suppress(Exception):
                cw.close()

    # -- lifecycle -------------------------------------------------------

    async def _start(self, http: Iterable[socket.socket], socks: Iterable[socket.socket]) -> None:
        for s in http:
            self._servers.append(await asyncio.start_server(self.handle_http, sock=s, limit=BUF))
        for s in socks:
            self._servers.append(await asyncio.start_server(self.handle_socks, sock=s, limit=BUF))

    def start_in_thread(self, http: Sequence[socket.socket], socks: Sequence[socket.socket]
                        ) -> None:
        """Serve the listening sockets from a daemon thread (returns once serving)."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            try:
                loop.run_until_complete(self._start(http, socks))
            except BaseException as exc:
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="agent-sandbox-proxy", daemon=True)
        self._thread.start()
        ready.wait()
        if errors:
            raise errors[0]

    def stop(self) -> None:
        loop = self.loop
        if loop is None or not loop.is_running():
            return

        def _close() -> None:
            for s in self._servers:
                s.close()
            loop.stop()

        loop.call_soon_threadsafe(_close)
        if self._thread is not None:
            self._thread.join(timeout=2)


def _split_hostport(text: str, default: int) -> tuple[str, int]:
    t = text.strip()
    if t.startswith("["):
        end = t.find("]")
        if end == -1:
            return t, -1
        host, rest = t[1:end], t[end + 1:]
        if rest.startswith(":"):
            return host, _port(rest[1:])
        return host, default
    if t.count(":") == 1:
        host, p = t.rsplit(":", 1)
        return host, _port(p)
    return t, default


def _port(text: str) -> int:
    return int(text) if text.isdigit() and len(text) <= 5 else -1


def audit_recorder(directory: str | None) -> tuple[Recorder, Callable[[], None]]:
    """A recorder writing ``proxy.decision`` events to the chained audit log."""
    from agent_sandbox.audit import AuditLog

    log = AuditLog(directory or default_audit_dir(), sync="batch", checkpoint_every=None,
                   checkpoint_interval=None, origin="sandbox-exec-proxy")

    def record(event: dict[str, Any]) -> None:
        log.append("proxy.decision", **event)

    def close() -> None:
        with contextlib.suppress(Exception):
            log.close()

    return record, close


def default_audit_dir() -> str:
    """Where decisions go when nothing else is configured."""
    env = os.environ.get("AGENT_SANDBOX_AUDIT_DIR")
    if env:
        return env
    system = "/var/log/agent-sandbox"
    if os.access(system, os.W_OK) or (not os.path.exists(system) and os.geteuid() == 0):
        return system
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(state, "agent-sandbox", "audit")
