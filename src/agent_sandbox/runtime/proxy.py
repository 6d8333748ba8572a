"""The domain-filtering egress proxy: HTTP (absolute-URI and CONNECT) and SOCKS5.

The sandbox has no network but its own loopback; the proxy is its only way out.
``Proxy.start_in_thread`` accepts on listening sockets (in the runtime these
live in the sandbox's network namespace), decides each request with pure
functions, and relays allowed connections (one buffer per direction, grown
for bulk transfers; see ``_pump``).

Decisions, in order (all must pass):

1. the host is canonicalised (case, trailing dot, IDNA, NUL, numeric IP forms)
   and matched: denied patterns win, then allowed patterns; anything else is
   ``blocked-by-allowlist`` (an entry with ``:PORT`` counts for that port only);
2. the name is resolved once, here, and no address it resolves to may be
   loopback, link-local, unspecified, multicast, a cloud metadata endpoint or
   one of this host's own addresses (``blocked-by-address``; so DNS rebinding to
   loopback fails; private networks stay reachable for company mirrors), nor
   in the settings' ``deniedResolvedAddresses`` or an IP literal of
   ``deniedDomains`` (unless ``allowedDomains`` names that address itself); the
   connection goes to a checked address, never to a second lookup.

An allowed connection goes to the checked address, or on through an upstream
proxy when the settings (or the proxy's own environment) name one
(``upstream.py``: srt's ``parentProxy`` and ``mitmProxy``).

Names can be pinned to addresses by the operator with a hosts(5)-format file
named in ``$AGENT_SANDBOX_HOSTS`` (read outside the sandbox; the address checks
still apply). ``python -m agent_sandbox.runtime.proxy`` runs the proxy as a
service (the rendered systemd unit).

A denial is ``403`` with ``X-Proxy-Error: <reason>``, and the settings'
``deniedDomainReasons`` text in the body (SOCKS5: reply 0x02, "connection not
allowed by ruleset"). Every decision is recorded through
``record`` (the audit log). The proxy must never relay a byte for a request it
has not allowed, and any error while deciding is a denial.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import threading
import time

from agent_sandbox.spec import domains

from .settings import _Record

TYPE_CHECKING = False  # the typing module costs the first connection's time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from .settings import NetworkSettings
    from .upstream import Routes, Upstream

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
if TYPE_CHECKING:
    Recorder = Callable[[dict[str, Any]], None]

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200",
              "168.63.129.16", "192.0.0.192")
)
_THIS_NET = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
HEAD_LIMIT = 64 * 1024
HANDSHAKE_TIMEOUT = 30.0
BUF = 64 * 1024  # relay buffer per direction to start with
BULK = 1024 * 1024  # ... and once a transfer fills it


class Decision(_Record):
    """One decision (immutable; a plain class: dataclasses cost a first connection 11 ms)."""

    __slots__ = ("address", "addresses", "allowed", "detail", "host", "port", "reason",
                 "upstream")
    allowed: bool
    reason: str
    host: str  # canonical host (or the raw text when it could not be canonicalised)
    port: int
    address: str | None
    # every checked address, tried in order when connecting (never a new lookup)
    addresses: tuple[str, ...]
    detail: str  # the settings' reason for a denial (deniedDomainReasons), or ""
    upstream: Upstream | None  # the proxy an allowed connection goes on through, if any

    def __init__(self, allowed: bool, reason: str, host: str, port: int,
                 address: str | None = None, addresses: tuple[str, ...] = (),
                 detail: str = "", upstream: Upstream | None = None) -> None:
        super().__init__(allowed=allowed, reason=reason, host=host, port=port,
                         address=address, addresses=addresses, detail=detail,
                         upstream=upstream)

    @property
    def via(self) -> str:
        """The upstream proxy as the audit names it (no credentials), or ""."""
        return self.upstream.label if self.upstream is not None else ""


def _plain(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped or NAT64 IPv6 address reaches (else ``ip``)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_refusal(ip: IPAddress, own: frozenset[IPAddress]) -> str | None:
    """Why a resolved address may not be reached, or None (pure)."""
    ip = _plain(ip)
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


def decide_name(host: str, port: int, allowed: Sequence[str], denied: Sequence[str],
                reasons: dict[str, str] | None = None) -> Decision:
    """The policy decision for a requested host name and port (pure). ``reasons``:
    the text to give with a denial, by canonical ``denied`` entry."""
    if not 1 <= port <= 65535:
        return Decision(False, "invalid-port", host, port)
    ok, reason = domains.host_allowed(host, list(allowed), list(denied), port)
    try:
        canon = domains.canonical_host(host)
    except domains.DomainError:
        canon = host
    detail = ""
    if reasons and reason == "blocked-by-denylist":
        detail = next((reasons[p] for p in denied
                       if p in reasons and domains.pattern_matches_port(p, canon, port)), "")
    return Decision(ok, reason, canon, port, detail=detail)


def range_refusal(ip: IPAddress, port: int, config: ProxyConfig) -> str | None:
    """Why the settings refuse a resolved address (``deniedResolvedAddresses``, IP
    literals of ``deniedDomains``), or None; an address ``allowedDomains`` names
    itself (for this port) may be reached (pure)."""
    ip = _plain(ip)
    for net, want in config.denied_ranges:
        if ip in net and want in (None, port):
            if any(ip == lit and p in (None, port) for lit, p in config.allowed_literals):
                return None
            return f"denied-range {net}"
    return None


def own_addresses() -> frozenset[IPAddress]:
    """Every address configured on this host's interfaces (plus loopback).

    Read from the kernel's own tables (``/proc/net/fib_trie`` for IPv4, the
    ``LOCAL`` host routes; ``/proc/net/if_inet6`` for IPv6): no import costs the
    first connection's time. Elsewhere, ``psutil``.
    """
    found: set[IPAddress] = set()
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as fh:
            last = ""
            for line in fh:
                text = line.strip()
                if text.startswith(("|--", "+--")):
                    last = text[3:].split()[0]
                elif text == "/32 host LOCAL" and last:
                    with contextlib.suppress(ValueError):
                        found.add(ipaddress.ip_address(last))
        with contextlib.suppress(FileNotFoundError), open("/proc/net/if_inet6",
                                                          encoding="ascii") as fh:
            for line in fh:
                with contextlib.suppress(ValueError, IndexError):
                    found.add(ipaddress.IPv6Address(bytes.fromhex(line.split()[0])))
        if found:
            return frozenset(found)
    except OSError:
        pass
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


# A caller's proxy variables: a parent proxy falls back to the first four (and to
# NO_PROXY, see upstream.routes); what must not depend on the caller's proxy
# (``sandbox verify``'s checks, the tests, the bench) drops all of them.
PARENT_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")
PROXY_VARIABLES = frozenset({*PARENT_VARIABLES, "NO_PROXY", "no_proxy", "ALL_PROXY",
                             "all_proxy"})


def _literals(patterns: Sequence[str]) -> list[tuple[IPAddress, int | None]]:
    """The IP-literal entries of a canonical pattern list, with their ports."""
    out = []
    for p in patterns:
        bare, port = domains.split_port(p)
        ip = domains.parse_ip_literal(bare) if bare != "*" else None
        if ip is not None:
            out.append((_plain(ip), port))
    return out


HOSTS_ENV = "AGENT_SANDBOX_HOSTS"


def hosts_from_env() -> dict[str, list[str]]:
    """The operator's pinned names (``$AGENT_SANDBOX_HOSTS``); none when unset or
    unreadable."""
    path = os.environ.get(HOSTS_ENV)
    if path:
        with contextlib.suppress(OSError):
            return load_hosts(path)
    return {}


def refusing(reason: str) -> Recorder:
    """The recorder of a proxy without its audit log: recording fails, so every
    allow becomes a denial (no audit, no egress)."""
    def record(event: dict[str, Any]) -> None:
        raise RuntimeError(reason)

    return record


class ProxyConfig:
    """What one proxy enforces (a plain class: dataclasses cost start-up time)."""

    __slots__ = ("allowed", "allowed_literals", "connect_timeout", "denied", "denied_ranges",
                 "exempt", "hosts", "own", "reasons", "routes", "session")

    def __init__(self, allowed: tuple[str, ...], denied: tuple[str, ...] = (),
                 hosts: dict[str, list[str]] | None = None,
                 own: frozenset[IPAddress] = frozenset(), connect_timeout: float = 10.0,
                 session: str = "", exempt: frozenset[IPAddress] = frozenset(),
                 denied_addresses: tuple[str, ...] = (),
                 reasons: tuple[tuple[str, str], ...] = (), routes: Routes | None = None) -> None:
        self.allowed = allowed
        self.routes = routes if routes else None  # upstream proxies (runtime/upstream.py)
        self.denied = denied
        # resolved addresses refused: the settings' ranges (any port) and the IP
        # literals of the deny list (their port, if any) ...
        ranges: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, int | None]] = [
            (ipaddress.ip_network(a, strict=False), None) for a in denied_addresses]
        ranges += [(ipaddress.ip_network(ip), p) for ip, p in _literals(denied)]
        self.denied_ranges = tuple(ranges)
        # ... unless the allow list names the address itself
        self.allowed_literals = tuple(_literals(allowed))
        self.reasons = dict(reasons)
        self.hosts: dict[str, list[str]] = {} if hosts is None else hosts
        self.own = own
        self.connect_timeout = connect_timeout
        self.session = session
        # Addresses the operator exempts from the address checks, programmatically or
        # with --allow-address on the standalone proxy; never read from settings files.
        self.exempt = exempt

    @classmethod
    def from_settings(cls, network: NetworkSettings, env: Mapping[str, str] | None = None,
                      **kw: Any) -> ProxyConfig:
        """The configuration for parsed settings' network section; ``env``: the
        environment a parent proxy falls back to (the proxy's own)."""
        routes = None
        env = env or {}
        if network.parent_proxy or network.mitm_proxy or any(env.get(k) for k in PARENT_VARIABLES):
            from .upstream import routes as make_routes

            routes = make_routes(network.parent_proxy, network.mitm_proxy, env)
        return cls(allowed=network.allowed_domains, denied=network.denied_domains,
                   denied_addresses=network.denied_addresses,
                   reasons=network.denied_reasons, routes=routes, **kw)


class _Conn:
    """A blocking client socket with the bytes read past what was parsed."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def read_until(self, marker: bytes, limit: int = HEAD_LIMIT) -> bytes | None:
        while marker not in self.buf:
            if len(self.buf) > limit:
                return None
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        head, _, self.buf = self.buf.partition(marker)
        return head + marker

    def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("client closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until EOF, then pass the EOF on.

    One buffer per direction: small, and grown to ``BULK`` once a read fills
    it (a bulk transfer), so idle and chatty connections hold little memory.
    A plain copy. The zero-copy ways were measured on a 2-core machine (200 MB
    from a loopback server, as ``bench/bench_proxy.py`` does) and both moved
    fewer bytes per second: a ``splice`` relay halves the relay's own CPU, but
    the client's reads of the spliced pages cost nearly twice as much; an
    in-kernel sockmap redirect (root only) hands each segment to a kernel
    work queue and was slower still. Reads average about 900 KiB once the
    buffer has grown, so the interpreter's share of the relay is negligible.
    """
    try:
        buf = bytearray(BUF)
        view = memoryview(buf)
        while True:
            n = src.recv_into(buf)
            if not n:
                return
            dst.sendall(view[:n])
            if n == len(buf) < BULK:
                buf = bytearray(BULK)
                view = memoryview(buf)
    except OSError:
        with contextlib.suppress(OSError):
            src.shutdown(socket.SHUT_RD)
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class _Workers:
    """Reusable threads: a connection costs no thread start once the proxy is warm.

    Unbounded on purpose (a relay holds its thread for the connection's life):
    a job is handed to an idle thread, or to a new one when none is idle.
    """

    def __init__(self) -> None:
        import queue

        self.jobs: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]]] = (
            queue.SimpleQueue())
        self.idle = 0
        self.lock = threading.Lock()

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        with self.lock:
            spawn = self.idle == 0
            if not spawn:
                self.idle -= 1
        self.jobs.put((fn, args))
        if spawn:
            threading.Thread(target=self._run, name="agent-sandbox-proxy", daemon=True).start()

    def _run(self) -> None:
        while True:
            fn, args = self.jobs.get()
            try:
                fn(*args)
            except Exception:  # noqa: S110 - a job reports its own failures
                pass
            with self.lock:
                self.idle += 1


_WORKERS = _Workers()


def relay(a: socket.socket, b: socket.socket) -> None:
    """Relay both directions until both ends have finished; then close both."""
    a.settimeout(None)  # the handshake deadline no longer applies
    b.settimeout(None)
    done = threading.Event()

    def back() -> None:
        try:
            _pump(b, a)
        finally:
            done.set()

    _WORKERS.submit(back)
    _pump(a, b)
    done.wait()
    a.close()
    b.close()


class Proxy:
    """One proxy instance: policy + relay, a thread per connection.

    Decisions are made before a byte is relayed; after that the bytes are
    copied between the two sockets unread (``relay``).
    """

    def __init__(self, config: ProxyConfig, record: Recorder | None = None) -> None:
        self.config = config
        self.record = record or (lambda event: None)
        self._listeners: list[socket.socket] = []
        self._stopping = False
        self.decisions: list[Decision] = []

    # -- decisions -------------------------------------------------------

    def _log(self, d: Decision, protocol: str, started: float) -> Decision:
        """Record a decision; an allow that cannot be recorded becomes a denial."""
        event = {
            "protocol": protocol, "host": d.host, "port": d.port, "allowed": d.allowed,
            "reason": d.reason, "address": d.address, "session": self.config.session,
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
        ip = domains.parse_ip_literal(host)
        if ip is not None:
            return [ip]
        if host in self.config.hosts:
            return [ipaddress.ip_address(a) for a in self.config.hosts[host]]
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(ipaddress.ip_address(str(i[4][0]).split("%", 1)[0])
                                  for i in infos))

    def decide(self, host: str, port: int, tunnel: bool = True) -> Decision:
        """The full decision: names, then every resolved address (fails closed).

        ``tunnel``: a CONNECT or SOCKS5 connection (else a plain HTTP request),
        which picks the upstream proxy when there is one (``upstream.Routes``).
        Through an upstream the name is resolved here only when the upstream
        runs on this host; an IP literal is always checked.
        """
        try:
            d = decide_name(host, port, self.config.allowed, self.config.denied,
                            self.config.reasons)
            if not d.allowed:
                return d
            via = self.config.routes.route(d.host, tunnel) if self.config.routes else None
            if via is not None and domains.parse_ip_literal(d.host) is None and not (
                    via.local(self.config.own)):
                return Decision(True, "allowed", d.host, port, upstream=via)
            try:
                addrs = self._resolve(d.host, port)
            except (OSError, ValueError, UnicodeError):
                addrs = []
            if not addrs:
                if via is not None:  # the upstream resolves what this host cannot
                    return Decision(True, "allowed", d.host, port, upstream=via)
                return Decision(False, "resolve-failed", d.host, port)
            for a in addrs:
                if a in self.config.exempt:
                    continue
                why = address_refusal(a, self.config.own) or range_refusal(a, port, self.config)
                if why is not None:
                    return Decision(False, f"blocked-by-address: {why}", d.host, port, str(a))
            if via is not None:
                return Decision(True, "allowed", d.host, port, upstream=via)
            return Decision(True, "allowed", d.host, port, str(addrs[0]),
                            tuple(str(a) for a in addrs))
        except Exception as exc:  # fail closed
            return Decision(False, f"internal-error: {type(exc).__name__}", host, port)

    def _open(self, d: Decision, tunnel: bool = True) -> tuple[socket.socket, bytes]:
        """A socket to the destination (direct: the first reachable checked address;
        through an upstream: its tunnel, or for a plain HTTP request the upstream
        itself) and the bytes the upstream sent past its answer."""
        up = d.upstream
        if up is not None:
            from .upstream import open_tunnel

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

    # -- HTTP ------------------------------------------------------------

    @staticmethod
    def _forbidden(reason: str, detail: str = "") -> bytes:
        body = f"Blocked by agent-sandbox: {reason}{': ' + detail if detail else ''}\n".encode()
        return (
            b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: " + reason.encode("ascii", "replace")
            + b"\r\nContent-Type: text/plain\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body
        )

    _BAD_GATEWAY = (b"HTTP/1.1 502 Bad Gateway\r\nX-Proxy-Error: connect-failed\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    _BAD_GATEWAY_UPSTREAM = (b"HTTP/1.1 502 Bad Gateway\r\nX-Proxy-Error: upstream-failed\r\n"
                             b"Content-Length: 0\r\nConnection: close\r\n\r\n")

    def _admit_http(self, sock: socket.socket, host: str, port: int, protocol: str,
                    started: float) -> tuple[socket.socket, bytes, Decision] | None:
        """Decide and record; on a denial answer 403, on a failed connect 502 (and
        return None); otherwise the connected upstream socket, the bytes it sent
        ahead (see ``_open``) and the decision."""
        tunnel = protocol != "http"
        d = self._log(self.decide(host, port, tunnel), protocol, started)
        if not d.allowed:
            sock.sendall(self._forbidden(d.reason, d.detail))
            return None
        try:
            up, ahead = self._open(d, tunnel)
        except OSError:
            sock.sendall(self._BAD_GATEWAY_UPSTREAM if d.via else self._BAD_GATEWAY)
            return None
        return up, ahead, d

    def handle_http(self, sock: socket.socket) -> None:
        started = time.monotonic()
        c = _Conn(sock)
        head = c.read_until(b"\r\n\r\n")
        if head is None:
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = lines[0].decode("latin-1").split(" ")
        except ValueError:
            sock.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
            return
        # a lone CR or LF, or a control character in the request line, is read
        # differently by different parsers: nothing so ambiguous is passed on
        if (head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\r\n")
                or any(ord(ch) < 0x21 or ord(ch) == 0x7F for ch in method + target + version)):
            d = self._log(Decision(False, "malformed-request", "", 0), "http", started)
            sock.sendall(self._forbidden(d.reason))
            return
        if method.upper() == "CONNECT":
            host, port = _split_hostport(target, 443)
            admitted = self._admit_http(sock, host, port, "http-connect", started)
            if admitted is None:
                return
            up, ahead, _ = admitted
            sock.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n" + ahead)
            if c.buf:
                up.sendall(c.buf)
            relay(sock, up)
            return
        if not target.lower().startswith("http://"):
            d = Decision(False, "not-a-proxy-request", target[:200], 0)
            d = self._log(d, "http", started)
            sock.sendall(self._forbidden(d.reason))
            return
        authority, _, path = target[7:].partition("/")
        authority = authority.rsplit("@", 1)[-1]
        host, port = _split_hostport(authority, 80)
        admitted = self._admit_http(sock, host, port, "http", started)
        if admitted is None:
            return
        up, _, d = admitted
        # to the server in origin form; to an upstream proxy in absolute form,
        # with its own credentials (never the client's)
        request = f"http://{authority}/{path}" if d.via else f"/{path}"
        out = [f"{method} {request} {version}".encode("latin-1")]
        for line in lines[1:]:
            name = line.split(b":", 1)[0].strip().lower()
            if name in (b"host", b"connection", b"proxy-connection", b"keep-alive",
                        b"proxy-authorization"):
                continue
            out.append(line)
        out.append(b"Host: " + authority.encode("latin-1"))
        out.append(b"Connection: close")
        auth = d.upstream.header() if d.upstream is not None else b""
        up.sendall(b"\r\n".join(out) + b"\r\n" + auth + b"\r\n" + c.buf)
        relay(sock, up)

    # -- SOCKS5 ----------------------------------------------------------

    def handle_socks(self, sock: socket.socket) -> None:
        started = time.monotonic()
        c = _Conn(sock)
        ver, n = c.read_exactly(2)
        methods = c.read_exactly(n)
        if ver != 5 or 0 not in methods:
            sock.sendall(b"\x05\xff")
            return
        sock.sendall(b"\x05\x00")
        ver, cmd, _, atyp = c.read_exactly(4)
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
        if ver != 5 or cmd != 1:  # no BIND, no UDP ASSOCIATE
            d = Decision(False, "command-not-supported", host, port)
            d = self._log(d, "socks5", started)
            sock.sendall(b"\x05\x07\x00\x01" + b"\x00" * 6)
            return
        d = self.decide(host, port)
        d = self._log(d, "socks5", started)
        if not d.allowed:
            sock.sendall(b"\x05\x02\x00\x01" + b"\x00" * 6)  # not allowed by ruleset
            return
        try:
            up, ahead = self._open(d)
        except OSError:
            sock.sendall(b"\x05\x05\x00\x01" + b"\x00" * 6)
            return
        sock.sendall(b"\x05\x00\x00\x01" + b"\x00" * 6 + ahead)
        if c.buf:
            up.sendall(c.buf)
        relay(sock, up)

    # -- lifecycle -------------------------------------------------------

    def _serve_one(self, handler: Callable[[socket.socket], None], sock: socket.socket) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass  # unix sockets
        sock.settimeout(HANDSHAKE_TIMEOUT)  # a client that stalls mid-request is dropped
        try:
            handler(sock)
        except Exception:  # noqa: S110 - any failure closes the connection
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept_loop(self, listener: socket.socket,
                     handler: Callable[[socket.socket], None]) -> None:
        try:
            listener.setblocking(True)
        except OSError:
            return  # stopped (and closed) before this thread got going
        while not self._stopping:
            try:
                conn, _ = listener.accept()
            except OSError:
                if self._stopping:
                    return
                time.sleep(0.01)
                continue
            conn.setblocking(True)
            _WORKERS.submit(self._serve_one, handler, conn)

    def start_in_thread(self, http: Sequence[socket.socket], socks: Sequence[socket.socket]
                        ) -> None:
        """Serve the listening sockets from daemon threads (returns at once)."""
        for group, handler in ((http, self.handle_http), (socks, self.handle_socks)):
            for lst in group:
                self._listeners.append(lst)
                threading.Thread(target=self._accept_loop, args=(lst, handler),
                                 name="agent-sandbox-proxy", daemon=True).start()

    def stop(self) -> None:
        self._stopping = True
        for lst in self._listeners:
            with contextlib.suppress(OSError):
                lst.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                lst.close()
        self._listeners = []


def serve(network: NetworkSettings, http: Any, socks: Any, record: Recorder | None,
          session: str) -> Proxy:
    """A proxy for settings' network section, serving two listening sockets (HTTP
    and SOCKS5; made in a sandbox's network namespace) from threads of this
    process: the hosts file named in ``$AGENT_SANDBOX_HOSTS``, this host's own
    addresses, and the upstream proxies of the settings or this environment."""
    cfg = ProxyConfig.from_settings(network, os.environ, hosts=hosts_from_env(),
                                    own=own_addresses(), session=session)
    proxy = Proxy(cfg, record)
    listening = [socket.socket(fileno=s.detach()) for s in (http, socks)]
    for s in listening:
        s.setblocking(False)
    proxy.start_in_thread([listening[0]], [listening[1]])
    return proxy


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
    import queue

    from agent_sandbox.audit import AuditLog

    log = AuditLog(directory or default_audit_dir(), sync="batch", checkpoint_every=None,
                   checkpoint_interval=None, origin="sandbox-exec-proxy")
    pending: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    failed: list[BaseException] = []

    def writer() -> None:  # off the connection's path; close() waits for the last record
        while (event := pending.get()) is not None:
            try:
                log.append("proxy.decision", **event)
            except Exception as exc:  # from now on every allow becomes a denial
                failed.append(exc)

    thread = threading.Thread(target=writer, name="agent-sandbox-audit", daemon=True)
    thread.start()

    def record(event: dict[str, Any]) -> None:
        if failed:
            raise RuntimeError(f"the audit log cannot be written: {failed[0]}")
        pending.put(event)

    def close() -> None:
        pending.put(None)
        thread.join(timeout=10)
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


def _listen(spec: str) -> socket.socket:
    """A listening socket for ``HOST:PORT``, ``unix:PATH`` or ``fd:N`` (one inherited)."""
    if spec.startswith("fd:"):
        s = socket.socket(fileno=int(spec[3:]))
        s.setblocking(False)
        return s
    if spec.startswith("unix:"):
        path = spec[5:]
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o666)  # noqa: S103 - every local user's sandbox may connect
    else:
        host, port = _split_hostport(spec, -1)
        if port < 0:
            raise ValueError(f"{spec!r}: expected HOST:PORT or unix:PATH")
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    s.listen(512)
    s.setblocking(False)
    return s


def main(argv: list[str] | None = None) -> int:
    """The standalone proxy (the systemd unit, srt's external proxy ports, benchmarks)."""
    import argparse
    import signal
    import sys

    from .settings import SettingsError, load

    ap = argparse.ArgumentParser(prog="python -m agent_sandbox.runtime.proxy",
                                 description="Domain-filtering HTTP/SOCKS5 egress proxy.")
    ap.add_argument("--settings", required=True, help="srt-format settings (network section)")
    ap.add_argument("--http", action="append", default=[], help="HOST:PORT or unix:PATH")
    ap.add_argument("--socks", action="append", default=[], help="HOST:PORT or unix:PATH")
    ap.add_argument("--allow-address", action="append", default=[],
                    help="exempt this address from the address checks (testing, benchmarks)")
    ap.add_argument("--audit-dir", default=None)
    ap.add_argument("--no-audit", action="store_true", help="do not record decisions")
    ap.add_argument("--session", default="proxy-service", help="the session named in the audit")
    args = ap.parse_args(argv)
    try:
        settings = load(args.settings)
        exempt = frozenset(ipaddress.ip_address(a) for a in args.allow_address)
        http = [_listen(x) for x in args.http]
        socks = [_listen(x) for x in args.socks]
    except (SettingsError, ValueError, OSError) as exc:
        sys.stderr.write(f"proxy: {exc}\n")
        return 2
    if not http and not socks:
        sys.stderr.write("proxy: give at least one --http or --socks address\n")
        return 2
    close: Callable[[], None] = lambda: None  # noqa: E731
    record: Recorder | None = None
    if not args.no_audit:
        try:
            record, close = audit_recorder(args.audit_dir)
        except Exception as exc:  # no audit, no egress: every request is refused
            reason = f"the audit log is unavailable ({type(exc).__name__}: {exc})"
            sys.stderr.write(f"proxy: {reason}; all requests are refused\n")
            record = refusing(reason)
    proxy = Proxy(ProxyConfig.from_settings(settings.network, os.environ, hosts=hosts_from_env(),
                                            own=own_addresses(), exempt=exempt,
                                            session=args.session), record)
    proxy.start_in_thread(http, socks)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    stop.wait()
    proxy.stop()
    close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
