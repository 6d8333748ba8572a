"""Upstream proxies the egress proxy chains through: srt's ``parentProxy`` and
``mitmProxy``.

Some networks reach the internet only through a proxy of their own (a
corporate proxy; a TLS-inspecting one for some domains). The egress proxy
still decides every request itself; an allowed connection then goes on
through the upstream instead of straight to the destination:

- ``parentProxy`` ``{http, https, noProxy}`` from the settings, each field
  falling back to the proxy's own ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``
  (lower case too), as srt does; ``https`` falls back to ``http``. Plain HTTP
  requests go to the ``http`` proxy in absolute form (a proxy that inspects
  HTTP sees the request); CONNECT tunnels and SOCKS5 connections go to the
  ``https`` one as ``CONNECT host:port``. ``noProxy`` entries (``*``, host
  suffixes as Go's ``httpproxy`` reads them, IP literals and CIDR ranges) go
  direct. An ``https://`` proxy is reached over TLS, checked against the
  system's roots.
- ``mitmProxy`` ``{socketPath, domains}``: connections to those domains go
  through the proxy on that unix socket (before any parent).

The upstream resolves the name. The egress proxy resolves it too, and applies
its address checks, when the upstream is on this host (a unix socket, or a
loopback or local address): a proxy next door must not become a way to reach
this host's own services by a name that resolves to loopback.

Pure parsing here (``parse_upstream`` also checks the settings' URLs);
``Upstream.dial`` and ``open_tunnel`` do the I/O.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import socket
import urllib.parse

from agent_sandbox.errors import SandboxError
from agent_sandbox.spec import domains

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

HEAD_LIMIT = 16 * 1024

# A caller's proxy variables: a parent proxy falls back to the first four (and to
# NO_PROXY, see ``routes``); what must not depend on the caller's proxy
# (``sandbox verify``'s checks, the tests, the bench) drops all of them.
PARENT_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy")
PROXY_VARIABLES = frozenset({*PARENT_VARIABLES, "NO_PROXY", "no_proxy", "ALL_PROXY",
                             "all_proxy"})


class UpstreamError(SandboxError, OSError):
    """The upstream proxy could not be reached or refused the tunnel."""


class Upstream:
    """One upstream proxy: ``http``/``https`` (host, port) or ``unix`` (path)."""

    __slots__ = ("_local", "auth", "host", "label", "path", "port", "scheme", "url")

    def __init__(self, scheme: str, host: str = "", port: int = 0, path: str = "",
                 auth: str = "", url: str = "") -> None:
        self.scheme, self.host, self.port, self.path, self.auth = scheme, host, port, path, auth
        self.url = url  # as given, normalised (credentials included: never shown)
        self._local: bool | None = None
        # what the audit names (never the credentials)
        self.label = f"unix:{path}" if scheme == "unix" else (
            f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}")

    def __repr__(self) -> str:
        return f"Upstream({self.label})"

    def dial(self, timeout: float) -> socket.socket:
        """A connected socket to the proxy (TLS-wrapped for ``https``)."""
        try:
            if self.scheme == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.settimeout(timeout)
                    s.connect(self.path)
                except OSError:
                    s.close()
                    raise
                return s
            s = socket.create_connection((self.host, self.port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                import ssl

                ctx = ssl.create_default_context()
                try:
                    named = domains.parse_ip_literal(self.host) is None
                    return ctx.wrap_socket(s, server_hostname=self.host if named else None)
                except (OSError, ssl.SSLError):
                    s.close()
                    raise
            return s
        except OSError as exc:
            raise UpstreamError(f"upstream proxy {self.label}: {exc}") from None

    def header(self) -> bytes:
        """The ``Proxy-Authorization`` line for this proxy (empty without credentials)."""
        return f"Proxy-Authorization: {self.auth}\r\n".encode("latin-1") if self.auth else b""

    def local(self, own: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> bool:
        """Whether the proxy runs on this host (see the module doc; the answer is
        kept: a proxy does not move while this one runs). A name that does not
        resolve counts as local: the stricter reading."""
        if self._local is None:
            self._local = self._is_local(own)
        return self._local

    def _is_local(self, own: frozenset[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> bool:
        if self.scheme == "unix" or self.host.lower() == "localhost":
            return True
        ip = domains.parse_ip_literal(self.host)
        if ip is not None:
            addrs = [ip]
        else:
            try:
                addrs = [ipaddress.ip_address(str(i[4][0]).split("%", 1)[0]) for i in
                         socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)]
            except (OSError, ValueError, UnicodeError):
                return True
        return any(a.is_loopback or a.is_unspecified or a in own for a in addrs)


def parse_upstream(text: str) -> Upstream:
    """An upstream proxy from its URL: ``http://`` or ``https://`` (a bare
    ``host:port`` is taken as ``http://``, as curl does), a host, an optional
    port and credentials, nothing else; ValueError saying what is wrong."""
    url = text.strip() if "://" in text else "http://" + text.strip()
    try:
        u = urllib.parse.urlsplit(url)
        port = u.port  # a port that is not a number 0-65535 raises here
    except ValueError:
        raise ValueError("the port must be a number 1-65535") from None
    if port == 0:
        raise ValueError("the port must be a number 1-65535")
    scheme = u.scheme.lower()
    if (scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/")
            or u.query or u.fragment or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url)):
        raise ValueError("expected http://HOST[:PORT] or https://HOST[:PORT] "
                         "(USER:PASSWORD@ allowed)")
    auth = ""
    if u.username is not None or u.password is not None:
        creds = (f"{urllib.parse.unquote(u.username or '')}:"
                 f"{urllib.parse.unquote(u.password or '')}")
        auth = "Basic " + base64.b64encode(creds.encode()).decode("ascii")
    return Upstream(scheme, u.hostname, port or (443 if scheme == "https" else 80), auth=auth,
                    url=f"{scheme}://{u.netloc}")


def redact(url: str) -> str:
    """A proxy URL without its credentials (for messages)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    return f"{scheme}{sep}{authority}{slash}{tail}"


class NoProxy:
    """A ``NO_PROXY`` list: ``*``, host suffixes, IP literals and CIDR ranges."""

    __slots__ = ("all", "networks", "suffixes")

    def __init__(self, raw: str) -> None:
        self.all = False
        suffixes: list[str] = []
        networks: list[IPNetwork] = []
        for entry in raw.split(","):
            v = entry.strip().lower()
            if not v:
                continue
            if v == "*":
                self.all = True
                continue
            if "/" in v:  # a CIDR range; a malformed one is no rule at all
                with contextlib.suppress(ValueError):
                    networks.append(ipaddress.ip_network(v, strict=False))
                continue
            if v.startswith("[") and "]" in v:
                v = v[1:v.index("]")]
            elif v.count(":") == 1 and v.rsplit(":", 1)[1].isdigit():
                v = v.rsplit(":", 1)[0]  # the port is not consulted (as in srt)
            with contextlib.suppress(ValueError):
                networks.append(ipaddress.ip_network(v))
                continue
            suffixes.append(v[1:] if v.startswith("*.") else v)
        self.suffixes, self.networks = tuple(suffixes), tuple(networks)

    def bypass(self, host: str) -> bool:
        """Whether a canonical host goes direct."""
        if self.all:
            return True
        ip = domains.parse_ip_literal(host)
        if ip is not None:
            return any(ip in n for n in self.networks)
        for v in self.suffixes:
            if v.startswith("."):
                if host == v[1:] or host.endswith(v):
                    return True
            elif host == v or host.endswith("." + v):
                return True
        return False


class Routes:
    """Which upstream, if any, an allowed connection goes through."""

    __slots__ = ("http", "https", "mitm", "mitm_domains", "no_proxy")

    def __init__(self, http: Upstream | None = None, https: Upstream | None = None,
                 no_proxy: str = "", mitm: Upstream | None = None,
                 mitm_domains: tuple[str, ...] = ()) -> None:
        self.http, self.https, self.mitm = http, https, mitm
        self.mitm_domains = mitm_domains
        self.no_proxy = NoProxy(no_proxy)

    def __bool__(self) -> bool:
        return bool(self.http or self.https or self.mitm)

    def route(self, host: str, tunnel: bool) -> Upstream | None:
        """The upstream for a canonical host (``tunnel``: CONNECT or SOCKS5, else a
        plain HTTP request), or None to connect directly."""
        if self.mitm is not None and domains.any_match(self.mitm_domains, host):
            return self.mitm
        ip = domains.parse_ip_literal(host)
        if host == "localhost" or (ip is not None and ip.is_loopback):
            return None
        if self.no_proxy.bypass(host):
            return None
        return self.https if tunnel else self.http


def routes(parent: tuple[str, str, str] | None, mitm: tuple[str, tuple[str, ...]] | None,
           env: Mapping[str, str]) -> Routes:
    """The routes for settings' ``parentProxy`` and ``mitmProxy``, the parent's
    fields falling back to ``env`` (see the module doc). An unusable URL from
    the environment is ignored, as srt ignores it; the settings' own were
    checked when they were read."""

    def pick(value: str, *names: str) -> Upstream | None:
        if value:
            return parse_upstream(value)
        for n in names:
            if env.get(n):
                try:
                    return parse_upstream(env[n])
                except ValueError:
                    return None
        return None

    http_url, https_url, no_proxy = parent or ("", "", "")
    http = pick(http_url, "HTTP_PROXY", "http_proxy")
    https = pick(https_url, "HTTPS_PROXY", "https_proxy") or http
    if not no_proxy:
        no_proxy = env.get("NO_PROXY") or env.get("no_proxy") or ""
    return Routes(http=http, https=https, no_proxy=no_proxy,
                  mitm=Upstream("unix", path=mitm[0]) if mitm else None,
                  mitm_domains=mitm[1] if mitm else ())


def open_tunnel(up: Upstream, host: str, port: int,
                timeout: float) -> tuple[socket.socket, bytes]:
    """A socket tunnelled through ``up`` to host:port (``CONNECT``; a 2xx answer or
    UpstreamError), and the bytes that came after the answer (a server that
    speaks first, such as SSH's banner, may already have sent some)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    s = up.dial(timeout)
    try:
        s.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode("ascii")
                  + up.header() + b"\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                raise UpstreamError(f"upstream proxy {up.label} closed the connection")
            head += chunk
            if len(head) > HEAD_LIMIT:
                raise UpstreamError(f"upstream proxy {up.label}: answer too long")
        head, rest = head.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].startswith("2"):
            raise UpstreamError(f"upstream proxy {up.label} refused: {status[:120]}")
        s.settimeout(None)
        return s, rest
    except UpstreamError:
        s.close()
        raise
    except OSError as exc:  # a timeout among them
        s.close()
        raise UpstreamError(f"upstream proxy {up.label}: {exc or type(exc).__name__}") from None
