"""The egress proxy's decision: may this host and port be reached, and how.

Pure: parsed settings (``ProxyConfig``) and a resolver go in, a ``Decision``
comes out; nothing here opens a socket. In order, all must pass:

1. the host is canonicalised (case, trailing dot, IDNA, NUL, numeric IP forms)
   and matched: denied patterns win, then allowed patterns; anything else is
   ``blocked-by-allowlist`` (an entry with ``:PORT`` counts for that port only);
2. the name is resolved once (the resolver given), and no address it resolves
   to may be loopback, link-local, unspecified, multicast, a cloud metadata
   endpoint or one of this host's own addresses (``blocked-by-address``; so DNS
   rebinding to loopback fails; private networks stay reachable for company
   mirrors), nor in the settings' ``deniedResolvedAddresses`` or an IP literal
   of ``deniedDomains`` (unless ``allowedDomains`` names that address itself);
   the connection goes to a checked address, never to a second lookup.

A name that does not resolve is no policy denial but a gateway failure
(``Decision.failed``: the proxy answers 502, the audit says ``failed``).

Must never return an allow on an error: any exception is a denial.
"""

from __future__ import annotations

import ipaddress

from agent_sandbox.spec import domains

from ..settings import _Record
from ..upstream import PARENT_VARIABLES

TYPE_CHECKING = False  # the typing module costs the first connection's time
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from ..settings import NetworkSettings
    from ..upstream import Routes, Upstream

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200",
              "168.63.129.16", "192.0.0.192")
)
_THIS_NET = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Reasons that are a failure to reach an allowed destination, not a policy denial.
GATEWAY_FAILURES = frozenset({"resolve-failed", "connect-failed", "upstream-failed"})


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

    @property
    def failed(self) -> bool:
        """Not refused by policy: the destination could not be reached (a 502)."""
        return not self.allowed and self.reason in GATEWAY_FAILURES

    @property
    def outcome(self) -> str:
        """``allowed``, ``denied`` (policy) or ``failed`` (gateway), as audited."""
        return "allowed" if self.allowed else "failed" if self.failed else "denied"


def plain(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped or NAT64 IPv6 address reaches (else ``ip``)."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip in _NAT64:
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def address_refusal(ip: IPAddress, own: frozenset[IPAddress]) -> str | None:
    """Why a resolved address may not be reached, or None."""
    ip = plain(ip)
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
    """The policy decision for a requested host name and port. ``reasons``: the
    text to give with a denial, by canonical ``denied`` entry."""
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
    itself (for this port) may be reached."""
    ip = plain(ip)
    for net, want in config.denied_ranges:
        if ip in net and want in (None, port):
            if any(ip == lit and p in (None, port) for lit, p in config.allowed_literals):
                return None
            return f"denied-range {net}"
    return None


def _literals(patterns: Sequence[str]) -> list[tuple[IPAddress, int | None]]:
    """The IP-literal entries of a canonical pattern list, with their ports."""
    out = []
    for p in patterns:
        bare, port = domains.split_port(p)
        ip = domains.parse_ip_literal(bare) if bare != "*" else None
        if ip is not None:
            out.append((plain(ip), port))
    return out


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
            from ..upstream import routes as make_routes

            routes = make_routes(network.parent_proxy, network.mitm_proxy, env)
        return cls(allowed=network.allowed_domains, denied=network.denied_domains,
                   denied_addresses=network.denied_addresses,
                   reasons=network.denied_reasons, routes=routes, **kw)


def decide(config: ProxyConfig, host: str, port: int, tunnel: bool,
           resolve: Callable[[str, int], list[IPAddress]]) -> Decision:
    """The full decision: names, then every resolved address (fails closed).

    ``tunnel``: a CONNECT or SOCKS5 connection (else a plain HTTP request), which
    picks the upstream proxy when there is one (``upstream.Routes``). Through an
    upstream the name is resolved here only when the upstream runs on this host;
    an IP literal is always checked. ``resolve`` raises OSError (or returns
    nothing) for a name that does not resolve.
    """
    try:
        d = decide_name(host, port, config.allowed, config.denied, config.reasons)
        if not d.allowed:
            return d
        via = config.routes.route(d.host, tunnel) if config.routes else None
        if via is not None and domains.parse_ip_literal(d.host) is None and not (
                via.local(config.own)):
            return Decision(True, "allowed", d.host, port, upstream=via)
        try:
            addrs = resolve(d.host, port)
        except (OSError, ValueError, UnicodeError):
            addrs = []
        if not addrs:
            if via is not None:  # the upstream resolves what this host cannot
                return Decision(True, "allowed", d.host, port, upstream=via)
            return Decision(False, "resolve-failed", d.host, port)
        for a in addrs:
            if a in config.exempt:
                continue
            why = address_refusal(a, config.own) or range_refusal(a, port, config)
            if why is not None:
                return Decision(False, f"blocked-by-address: {why}", d.host, port, str(a))
        if via is not None:
            return Decision(True, "allowed", d.host, port, upstream=via)
        return Decision(True, "allowed", d.host, port, str(addrs[0]),
                        tuple(str(a) for a in addrs))
    except Exception as exc:  # fail closed
        return Decision(False, f"internal-error: {type(exc).__name__}", host, port)


def split_hostport(text: str, default: int) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or a bare host (``default`` port); port -1 when
    it is not a number 0-99999 (the decision refuses it)."""
    t = text.strip()
    if t.startswith("["):
        end = t.find("]")
        if end == -1:
            return t, -1
        host, rest = t[1:end], t[end + 1:]
        if rest.startswith(":"):
            return host, _port(rest[1:])
        return host, default if not rest else -1
    if t.count(":") == 1:
        host, p = t.rsplit(":", 1)
        return host, _port(p)
    return t, default


def authority(host: str, port: int) -> str:
    """``host:port`` for a canonical host (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _port(text: str) -> int:
    return int(text) if text.isdigit() and len(text) <= 5 else -1
