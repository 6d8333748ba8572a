"""The proxy over real sockets on loopback (no sandbox): protocol details and relay."""

from __future__ import annotations

import hashlib
import ipaddress
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sandbox.runtime.proxy import Proxy, ProxyConfig

PAYLOAD = bytes(range(256)) * (80 * 1024)  # 20 MB, not compressible into a false pass


class Upstream:
    """A loopback server: sends PAYLOAD after reading a line, or echoes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.requests: list[bytes] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(c,), daemon=True).start()

    def _handle(self, c: socket.socket) -> None:
        with c:
            data = b""
            while b"\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
            self.requests.append(data)
            if data.startswith(b"PAYLOAD"):
                c.sendall(PAYLOAD)
            elif data.startswith(b"GET "):
                while b"\r\n\r\n" not in data:
                    data += c.recv(4096)
                self.requests[-1] = data
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            else:
                c.sendall(b"echo:" + data)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    u = Upstream()
    yield u
    u.sock.close()


@pytest.fixture
def proxy() -> Iterator[tuple[Proxy, int, int, list[dict[str, Any]]]]:
    events: list[dict[str, Any]] = []
    cfg = ProxyConfig(allowed=("allowed.test", "127.0.0.1"), denied=("denied.allowed.test",),
                      hosts={"allowed.test": ["127.0.0.1"], "rebind.test": ["127.0.0.1"],
                             "multi.test": ["127.0.0.1"]},
                      exempt=frozenset({ipaddress.ip_address("127.0.0.1")}))
    p = Proxy(cfg, events.append)
    http, socks = socket.socket(), socket.socket()
    for s in (http, socks):
        s.bind(("127.0.0.1", 0))
        s.listen(16)
    p.start_in_thread([http], [socks])
    yield p, http.getsockname()[1], socks.getsockname()[1], events
    p.stop()


def _recv_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(1 << 20):
        out += chunk
    return out


def test_connect_tunnel_relays_bytes_intact(proxy: Any, upstream: Upstream) -> None:
    _, hport, _, events = proxy
    s = socket.create_connection(("127.0.0.1", hport))
    s.sendall(f"CONNECT allowed.test:{upstream.port} HTTP/1.1\r\n\r\nPAYLOAD\n".encode())
    data = _recv_all(s)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert hashlib.sha256(body).digest() == hashlib.sha256(PAYLOAD).digest()
    assert events[-1]["allowed"] and events[-1]["protocol"] == "http-connect"


def test_absolute_uri_is_rewritten_to_origin_form(proxy: Any, upstream: Upstream) -> None:
    _, hport, _, _ = proxy
    s = socket.create_connection(("127.0.0.1", hport))
    s.sendall(f"GET http://allowed.test:{upstream.port}/x?y=1 HTTP/1.1\r\nHost: evil.test\r\n"
              f"Proxy-Authorization: Basic abc\r\nUser-Agent: t\r\n\r\n".encode())
    assert _recv_all(s).endswith(b"ok")
    req = upstream.requests[-1]
    assert req.startswith(b"GET /x?y=1 HTTP/1.1\r\n")
    assert f"Host: allowed.test:{upstream.port}".encode() in req
    assert b"evil.test" not in req and b"Proxy-Authorization" not in req
    assert b"Connection: close" in req


@pytest.mark.parametrize("target,reason", [
    ("denied.allowed.test", "blocked-by-denylist"),
    ("other.test", "blocked-by-allowlist"),
    ("rebind.test", "blocked-by-allowlist"),
    ("ALLOWED.test.evil.test", "blocked-by-allowlist"),
])
def test_denials_are_403_with_a_reason_header(proxy: Any, upstream: Upstream, target: str,
                                              reason: str) -> None:
    _, hport, _, events = proxy
    s = socket.create_connection(("127.0.0.1", hport))
    s.sendall(f"CONNECT {target}:{upstream.port} HTTP/1.1\r\n\r\n".encode())
    data = _recv_all(s)
    assert data.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert f"X-Proxy-Error: {reason}".encode() in data
    assert upstream.requests == []
    assert events[-1]["allowed"] is False and events[-1]["reason"] == reason


def test_non_proxy_requests_are_refused(proxy: Any) -> None:
    _, hport, _, events = proxy
    s = socket.create_connection(("127.0.0.1", hport))
    s.sendall(b"GET /local HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
    assert b"X-Proxy-Error: not-a-proxy-request" in _recv_all(s)
    assert events[-1]["reason"] == "not-a-proxy-request"


def test_oversized_head_is_refused(proxy: Any, upstream: Upstream) -> None:
    _, hport, _, events = proxy
    s = socket.create_connection(("127.0.0.1", hport))
    try:
        s.sendall(f"CONNECT allowed.test:{upstream.port} HTTP/1.1\r\nX: ".encode()
                  + b"a" * 200_000)
        reply = _recv_all(s)
    except OSError:  # the proxy may reset a connection it stopped reading
        reply = b""
    assert reply == b"" or reply.startswith(b"HTTP/1.1 400")
    assert upstream.requests == [] and events == []


def _socks(port: int, atyp: int, addr: bytes, dport: int,
           cmd: int = 1) -> tuple[int, socket.socket]:
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(bytes([5, cmd, 0, atyp]) + addr + struct.pack(">H", dport))
    reply = s.recv(10)
    return reply[1], s


def test_socks5_connect_allowed_and_relays(proxy: Any, upstream: Upstream) -> None:
    _, _, sport, events = proxy
    name = b"allowed.test"
    code, s = _socks(sport, 3, bytes([len(name)]) + name, upstream.port)
    assert code == 0
    s.sendall(b"hello\n")
    assert _recv_all(s) == b"echo:hello\n"
    assert events[-1]["protocol"] == "socks5" and events[-1]["allowed"]


@pytest.mark.parametrize("atyp,addr,code", [
    (3, bytes([10]) + b"other.test", 2),
    (3, bytes([22]) + b"allowed.test\x00.evil.test", 2),
    (1, socket.inet_aton("10.9.9.9"), 2),
    (4, socket.inet_pton(socket.AF_INET6, "::1"), 2),
])
def test_socks5_denials_are_not_allowed_by_ruleset(proxy: Any, atyp: int, addr: bytes,
                                                   code: int) -> None:
    _, _, sport, _ = proxy
    got, _ = _socks(sport, atyp, addr, 80)
    assert got == code


@pytest.mark.parametrize("cmd", [2, 3])  # BIND, UDP ASSOCIATE
def test_socks5_bind_and_udp_are_refused(proxy: Any, cmd: int) -> None:
    _, _, sport, events = proxy
    name = b"allowed.test"
    got, _ = _socks(sport, 3, bytes([len(name)]) + name, 53, cmd=cmd)
    assert got == 7
    assert events[-1]["reason"] == "command-not-supported"


def test_address_checks_apply_without_an_exemption(upstream: Upstream) -> None:
    p = Proxy(ProxyConfig(allowed=("allowed.test",), hosts={"allowed.test": ["127.0.0.1"]}))
    d = p.decide("allowed.test", upstream.port)
    assert not d.allowed and d.reason == "blocked-by-address: loopback"


def test_connect_tries_each_checked_address(proxy: Any, upstream: Upstream) -> None:
    p, hport, _, _ = proxy
    p.config.hosts["multi.test"] = ["192.0.2.1", "127.0.0.1"]  # TEST-NET-1 never answers
    p.config.exempt = frozenset({ipaddress.ip_address("127.0.0.1")})
    p.config.connect_timeout = 0.5
    p.config.allowed = (*p.config.allowed, "multi.test")
    s = socket.create_connection(("127.0.0.1", hport))
    s.sendall(f"CONNECT multi.test:{upstream.port} HTTP/1.1\r\n\r\nhi\n".encode())
    assert _recv_all(s).endswith(b"echo:hi\n")


def test_recording_failure_still_denies(upstream: Upstream) -> None:
    def broken(_: dict[str, Any]) -> None:
        raise OSError("disk full")

    reply = _connect_once(Proxy(ProxyConfig(allowed=("x.test",)), broken),
                          f"other.test:{upstream.port}")
    assert reply.startswith(b"HTTP/1.1 403")


def _connect_once(p: Proxy, target: str) -> bytes:
    """One CONNECT through a proxy served on a fresh loopback port; the whole reply."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(4)
    p.start_in_thread([lst], [])
    try:
        s = socket.create_connection(lst.getsockname())
        s.sendall(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        return _recv_all(s)
    finally:
        p.stop()


def test_stalled_handshake_is_dropped(proxy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent_sandbox.runtime.proxy import server as mod

    monkeypatch.setattr(mod, "HANDSHAKE_TIMEOUT", 0.3)
    _, _, sport, _ = proxy
    s = socket.create_connection(("127.0.0.1", sport))
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x03\x10short")  # declares 16 bytes of name, sends 5
    s.settimeout(5)
    assert s.recv(10) == b""  # closed by the proxy, not left hanging


def test_an_allow_that_cannot_be_recorded_is_denied(upstream: Upstream) -> None:
    def broken(_: dict[str, Any]) -> None:
        raise OSError("audit disk full")

    p = Proxy(ProxyConfig(allowed=("allowed.test",), hosts={"allowed.test": ["127.0.0.1"]},
                          exempt=frozenset({ipaddress.ip_address("127.0.0.1")})), broken)
    reply = _connect_once(p, f"allowed.test:{upstream.port}")
    assert reply.startswith(b"HTTP/1.1 403") and b"audit-unavailable" in reply
    assert upstream.requests == []


def test_audit_writer_failure_turns_later_allows_into_denials(tmp_path) -> None:
    import time

    from agent_sandbox.runtime.proxy import audit_recorder

    record, close = audit_recorder(str(tmp_path / "audit"))
    try:
        record({"host": "a", "allowed": True})
        record({"host": "b", "allowed": True, "x": float("nan")})  # cannot be canonical JSON
        deadline = time.monotonic() + 5
        while True:  # the writer notices on that append; later records refuse
            try:
                record({"host": "c", "allowed": True})
            except RuntimeError as exc:
                assert "cannot be written" in str(exc)
                break
            assert time.monotonic() < deadline, "a failing audit log went unnoticed"
            time.sleep(0.05)
    finally:
        close()


def test_own_addresses_are_every_interface_address() -> None:
    """Read from the kernel's tables, they match what psutil lists for every interface."""
    import ipaddress
    import socket

    import psutil

    from agent_sandbox.runtime.proxy import own_addresses

    up = {name for name, st in psutil.net_if_stats().items() if st.isup}
    listed = {name: {ipaddress.ip_address(a.address.split("%", 1)[0]) for a in addrs
                     if a.family in (socket.AF_INET, socket.AF_INET6)}
              for name, addrs in psutil.net_if_addrs().items()}
    mine = own_addresses()
    # every address of an interface that is up (a down one's addresses are not local)
    assert set().union(*(v for k, v in listed.items() if k in up)) <= mine
    assert mine <= set().union(*listed.values())
    assert ipaddress.ip_address("127.0.0.1") in mine
