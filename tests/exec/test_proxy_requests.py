"""Attacks on the proxy's request handling, judged by what the far side received.

Each case sends raw bytes to the proxy on loopback and reads every byte that
reached a recording server (the destination, or a parent proxy): a request
the proxy did not decide, or a byte after the decided request, shows up
there. ``test_recorder_sees_what_an_undecided_relay_would_pass`` is the
control: written straight to the recorder, the same bytes do show.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sandbox.runtime.proxy import Proxy, ProxyConfig
from agent_sandbox.runtime.upstream import routes

LOOP = ipaddress.ip_address("127.0.0.1")


class Recorder:
    """A loopback server that records every byte of every connection.

    It answers the first request head of a connection with a short response
    and half-closes; it keeps reading (and recording) until the other side
    closes.
    """

    def __init__(self, answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.answer = answer
        self.connections: list[bytearray] = []
        self.open = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            data = bytearray()
            with self.lock:
                self.connections.append(data)
                self.open += 1
            threading.Thread(target=self._handle, args=(c, data), daemon=True).start()

    def _handle(self, c: socket.socket, data: bytearray) -> None:
        c.settimeout(10)
        answered = False
        try:
            while chunk := c.recv(65536):
                data += chunk
                if not answered and b"\r\n\r\n" in data:
                    answered = True
                    c.sendall(self.answer)
                    c.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            c.close()
            with self.lock:
                self.open -= 1

    def received(self, timeout: float = 10) -> list[bytes]:
        """Every connection's bytes, once all of them have ended."""
        deadline = time.monotonic() + timeout
        while self.open and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not self.open, "a relayed connection was left open"
        return [bytes(d) for d in self.connections]


@pytest.fixture
def origin() -> Iterator[Recorder]:
    r = Recorder()
    yield r
    r.sock.close()


def _proxy(**kw: Any) -> tuple[Proxy, int, int, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    cfg = ProxyConfig(allowed=("allowed.test", "nowhere.invalid"),
                      hosts={"allowed.test": ["127.0.0.1"], "evil.test": ["127.0.0.1"]},
                      exempt=frozenset({LOOP}), **kw)
    p = Proxy(cfg, events.append)
    http, socks = socket.socket(), socket.socket()
    for s in (http, socks):
        s.bind(("127.0.0.1", 0))
        s.listen(16)
    p.start_in_thread([http], [socks])
    return p, http.getsockname()[1], socks.getsockname()[1], events


@pytest.fixture
def proxy() -> Iterator[tuple[Proxy, int, int, list[dict[str, Any]]]]:
    p = _proxy()
    yield p
    p[0].stop()


def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` at once, then read until the proxy closes."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(15)
    s.sendall(data)
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    s.close()
    return out


def _get(port: int, host: str = "allowed.test", path: str = "/", extra: str = "") -> bytes:
    return f"GET http://{host}:{port}{path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def test_recorder_sees_what_an_undecided_relay_would_pass(origin: Recorder) -> None:
    """The control: the judge fires on a second request that reaches the server."""
    two = _get(origin.port) + _get(origin.port, "evil.test", "/second")
    _exchange(origin.port, two)
    (got,) = origin.received()
    assert b"evil.test" in got and b"/second" in got


# --- keep-alive and pipelining --------------------------------------------------


@pytest.mark.parametrize("second", ["evil.test", "allowed.test"])
def test_pipelined_request_behind_an_allowed_one_is_never_relayed(
        proxy: Any, origin: Recorder, second: str) -> None:
    _, hport, _, events = proxy
    reply = _exchange(hport, _get(origin.port, extra="Connection: keep-alive\r\n")
                      + _get(origin.port, second, "/second"))
    assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"ok")
    assert reply.count(b"HTTP/1.1") == 1  # one response, then the proxy closed
    (got,) = origin.received()
    assert got.count(b"GET ") == 1 and b"/second" not in got and b"evil.test" not in got
    assert b"Connection: close\r\n" in got and b"keep-alive" not in got
    assert len(events) == 1  # one request, one decision


def test_next_request_on_a_new_connection_is_decided_afresh(proxy: Any,
                                                            origin: Recorder) -> None:
    _, hport, _, events = proxy
    assert _exchange(hport, _get(origin.port)).endswith(b"ok")
    denied = _exchange(hport, _get(origin.port, "evil.test"))
    assert denied.startswith(b"HTTP/1.1 403") and b"blocked-by-allowlist" in denied
    assert [e["allowed"] for e in events] == [True, False]
    assert len(origin.received()) == 1


# --- request smuggling: the body's length ------------------------------------------


SMUGGLED = b"GET http://evil.test/smuggled HTTP/1.1\r\nHost: evil.test\r\n\r\n"


@pytest.mark.parametrize("headers,reason", [
    ("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "ambiguous-length"),
    ("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", "ambiguous-length"),
    ("Content-Length: 4\r\nContent-Length: 60\r\n", "ambiguous-length"),
    ("Content-Length: 4, 60\r\n", "ambiguous-length"),
    ("Content-Length: +4\r\n", "ambiguous-length"),
    ("Content-Length: 0x4\r\n", "ambiguous-length"),
    ("Transfer-Encoding: chunked, identity\r\n", "unsupported-transfer-encoding"),
    ("Transfer-Encoding: xchunked\r\n", "unsupported-transfer-encoding"),
    ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
     "unsupported-transfer-encoding"),
    ("Transfer-Encoding : chunked\r\n", "malformed-request"),
    ("Content-Length : 4\r\n", "malformed-request"),
    ("X-Pad: a\r\n Transfer-Encoding: chunked\r\n", "malformed-request"),  # folded
    ("X-Pad: a\r\n\tContent-Length: 4\r\n", "malformed-request"),
    ("Transfer-Encoding:\x0bchunked\r\n", "malformed-request"),
    ("X-Pad: a\nTransfer-Encoding: chunked\r\n", "malformed-request"),  # bare LF
    ("X-Pad: a\rTransfer-Encoding: chunked\r\n", "malformed-request"),  # bare CR
])
def test_ambiguous_framing_is_refused_and_nothing_is_sent(
        proxy: Any, origin: Recorder, headers: str, reason: str) -> None:
    _, hport, _, events = proxy
    head = (f"POST http://allowed.test:{origin.port}/ HTTP/1.1\r\nHost: allowed.test\r\n"
            f"{headers}\r\n").encode()
    reply = _exchange(hport, head + b"0\r\n\r\n" + SMUGGLED)
    assert reply.startswith(b"HTTP/1.1 403") and f"X-Proxy-Error: {reason}".encode() in reply
    assert origin.received() == []
    assert events[-1]["allowed"] is False and events[-1]["reason"] == reason


def test_transfer_encoding_on_http10_is_refused(proxy: Any, origin: Recorder) -> None:
    _, hport, _, _ = proxy
    reply = _exchange(hport, f"POST http://allowed.test:{origin.port}/ HTTP/1.0\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode())
    assert b"unsupported-transfer-encoding" in reply
    assert origin.received() == []


def test_content_length_body_is_cut_at_its_length(proxy: Any, origin: Recorder) -> None:
    _, hport, _, _ = proxy
    head = (f"POST http://allowed.test:{origin.port}/up HTTP/1.1\r\nHost: x\r\n"
            "Content-Length: 5\r\n\r\n").encode()
    assert _exchange(hport, head + b"hello" + SMUGGLED).endswith(b"ok")
    (got,) = origin.received()
    assert got.endswith(b"\r\n\r\nhello")
    assert b"smuggled" not in got and got.count(b"Content-Length") == 1


def test_chunked_body_is_recoded_and_cut_at_its_end(proxy: Any, origin: Recorder) -> None:
    _, hport, _, _ = proxy
    head = (f"POST http://allowed.test:{origin.port}/up HTTP/1.1\r\nHost: x\r\n"
            "Transfer-Encoding: Chunked\r\n\r\n").encode()
    body = b"5;ext=1\r\nhello\r\n0006\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"
    assert _exchange(hport, head + body + SMUGGLED).endswith(b"ok")
    (got,) = origin.received()
    assert got.endswith(b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    assert b"smuggled" not in got and b"X-Trailer" not in got and b"ext=" not in got


@pytest.mark.parametrize("body", [
    b"5\r\nhello!!\r\n0\r\n\r\n",  # more data than the size says
    b"5\nhello\r\n0\r\n\r\n",  # a bare LF after the size
    b"-5\r\nhello\r\n0\r\n\r\n",
    b"0x5\r\nhello\r\n0\r\n\r\n",
    b"5 \r\nhello\r\n0\r\n\r\n",
    b"fffffffffffffffff\r\nhello\r\n0\r\n\r\n",
])
def test_malformed_chunks_stop_the_body(proxy: Any, origin: Recorder, body: bytes) -> None:
    """The head was allowed and sent; a bad chunk sends nothing more, nothing after it."""
    _, hport, _, _ = proxy
    head = (f"POST http://allowed.test:{origin.port}/up HTTP/1.1\r\nHost: x\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    _exchange(hport, head + body + SMUGGLED)
    for got in origin.received():
        assert b"smuggled" not in got and not got.endswith(b"0\r\n\r\n")


def test_expect_continue_upload_still_works(proxy: Any) -> None:
    """Functional control: a client that waits for 100 Continue is not deadlocked."""
    srv = Recorder(answer=b"HTTP/1.1 100 Continue\r\n\r\n")  # then EOF: the response
    _, hport, _, _ = proxy
    s = socket.create_connection(("127.0.0.1", hport))
    s.settimeout(10)
    s.sendall(f"PUT http://allowed.test:{srv.port}/ HTTP/1.1\r\nHost: x\r\n"
              "Expect: 100-continue\r\nContent-Length: 3\r\n\r\n".encode())
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
    s.sendall(b"abc")
    s.shutdown(socket.SHUT_WR)
    while s.recv(100):
        pass
    (got,) = srv.received()
    assert got.endswith(b"\r\n\r\nabc")
    srv.sock.close()


# --- where the request goes: target, Host, userinfo, origin-form -------------------


def test_host_header_cannot_steer_an_absolute_request(proxy: Any, origin: Recorder) -> None:
    _, hport, _, events = proxy
    req = (f"GET http://allowed.test:{origin.port}/ HTTP/1.1\r\nHost: evil.test\r\n"
           "host: evil.test\r\n\r\n").encode()
    assert _exchange(hport, req).endswith(b"ok")
    (got,) = origin.received()
    assert b"evil" not in got and got.count(b"Host: ") == 1
    assert f"Host: allowed.test:{origin.port}\r\n".encode() in got
    assert events[0]["host"] == "allowed.test"


@pytest.mark.parametrize("target", [
    "http://allowed.test@evil.test:{port}/",
    "http://allowed.test:{port}@evil.test:{port}/",
    "http://evil.test:{port}?@allowed.test/",
    "http://evil.test:{port}#@allowed.test/",
])
def test_userinfo_and_delimiters_never_pick_the_allowed_name(proxy: Any, origin: Recorder,
                                                             target: str) -> None:
    _, hport, _, _ = proxy
    req = f"GET {target.format(port=origin.port)} HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
    reply = _exchange(hport, req.encode())
    assert reply.startswith(b"HTTP/1.1 403")
    assert origin.received() == []


@pytest.mark.parametrize("line", [
    "GET / HTTP/1.1",  # origin form with a Host header: no proxy request
    "GET https://allowed.test:{port}/ HTTP/1.1",
    "GET http://allowed.test:{port}/  HTTP/1.1",  # two spaces
    "GET http://allowed.test:{port}/ HTTP/2.0",
    "G(T http://allowed.test:{port}/ HTTP/1.1",
])
def test_requests_that_are_not_plain_proxy_requests_are_refused(
        proxy: Any, origin: Recorder, line: str) -> None:
    _, hport, _, _ = proxy
    req = f"{line.format(port=origin.port)}\r\nHost: allowed.test:{origin.port}\r\n\r\n"
    assert _exchange(hport, req.encode()).startswith(b"HTTP/1.1 403")
    assert origin.received() == []


# --- CONNECT and SOCKS5 with bytes after the request -------------------------------


def test_connect_trailing_bytes_go_only_into_the_allowed_tunnel(proxy: Any,
                                                                origin: Recorder) -> None:
    _, hport, _, _ = proxy
    early = b"EARLY-TUNNEL-DATA\r\n\r\n"
    reply = _exchange(hport, f"CONNECT allowed.test:{origin.port} HTTP/1.1\r\n\r\n".encode()
                      + early)
    assert reply.startswith(b"HTTP/1.1 200 Connection Established")
    assert origin.received() == [early]  # the control: such bytes do arrive when allowed
    denied = _exchange(hport, f"CONNECT evil.test:{origin.port} HTTP/1.1\r\n\r\n".encode()
                       + early)
    assert denied.startswith(b"HTTP/1.1 403")
    assert origin.received() == [early]  # no second connection, no bytes


def test_connect_with_a_body_is_refused(proxy: Any, origin: Recorder) -> None:
    _, hport, _, _ = proxy
    reply = _exchange(hport, f"CONNECT allowed.test:{origin.port} HTTP/1.1\r\n"
                             "Content-Length: 5\r\n\r\nhello".encode())
    assert b"X-Proxy-Error: ambiguous-length" in reply
    assert origin.received() == []


def _socks_request(host: str, port: int) -> bytes:
    name = host.encode()
    return (b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name
            + port.to_bytes(2, "big"))


def test_socks_trailing_bytes_go_only_into_the_allowed_connection(proxy: Any,
                                                                  origin: Recorder) -> None:
    _, _, sport, events = proxy
    early = b"SOCKS-EARLY-DATA\r\n\r\n"
    reply = _exchange(sport, _socks_request("allowed.test", origin.port) + early)
    assert reply[:2] == b"\x05\x00" and reply[2:4] == b"\x05\x00"
    assert origin.received() == [early]
    reply = _exchange(sport, _socks_request("evil.test", origin.port) + early)
    assert reply[2:4] == b"\x05\x02"
    assert origin.received() == [early]
    assert [e["allowed"] for e in events] == [True, False]


def test_socks_nonzero_reserved_byte_is_refused(proxy: Any, origin: Recorder) -> None:
    _, _, sport, _ = proxy
    req = bytearray(_socks_request("allowed.test", origin.port))
    req[5] = 1  # RSV
    reply = _exchange(sport, bytes(req) + b"data")
    assert reply[2:4] == b"\x05\x07"
    assert origin.received() == []


# --- a parent proxy gets canonical names ------------------------------------------


@pytest.fixture
def parent() -> Iterator[Recorder]:
    r = Recorder(answer=b"HTTP/1.1 200 Connection established\r\n\r\n")
    yield r
    r.sock.close()


@pytest.mark.parametrize("spelling", ["ALLOWED.Test.", "allowed.test.", "AlLoWeD.TeSt"])
def test_parent_proxy_gets_the_canonical_name(parent: Recorder, spelling: str) -> None:
    p, hport, sport, _ = _proxy(routes=routes((f"http://127.0.0.1:{parent.port}", "", ""),
                                              None, {}))
    try:
        _exchange(hport, f"GET http://{spelling}:8080/x HTTP/1.1\r\nHost: {spelling}\r\n"
                         "Content-Length: 0\r\n\r\n".encode() + SMUGGLED)
        _exchange(hport, f"CONNECT {spelling}:443 HTTP/1.1\r\n\r\n".encode())
        _exchange(sport, _socks_request(spelling, 22))
        got = parent.received()
    finally:
        p.stop()
    assert got[0].startswith(b"GET http://allowed.test:8080/x HTTP/1.1\r\n")
    assert b"Host: allowed.test:8080\r\n" in got[0]
    assert spelling.encode() not in got[0] or spelling == "allowed.test."
    assert b"smuggled" not in got[0] and got[0].count(b"GET ") == 1
    assert got[1].startswith(b"CONNECT allowed.test:443 HTTP/1.1\r\n")
    assert got[2].startswith(b"CONNECT allowed.test:22 HTTP/1.1\r\n")
    assert all(b"ALLOWED" not in g and b"test.:" not in g for g in got)


# --- a name that does not resolve is a gateway failure -------------------------------


def test_unresolvable_name_is_a_502_and_audited_as_a_failure(proxy: Any) -> None:
    _, hport, sport, events = proxy
    reply = _exchange(hport, _get(80, "nowhere.invalid"))
    assert reply.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert b"X-Proxy-Error: resolve-failed\r\n" in reply
    assert events[-1]["outcome"] == "failed" and events[-1]["reason"] == "resolve-failed"
    reply = _exchange(hport, b"CONNECT nowhere.invalid:443 HTTP/1.1\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 502") and b"resolve-failed" in reply
    reply = _exchange(sport, _socks_request("nowhere.invalid", 443))
    assert reply[2:4] == b"\x05\x04"  # host unreachable, not "not allowed by ruleset"
    # an allowed name whose connection fails: the allow, then the failure
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    reply = _exchange(hport, _get(port))
    assert reply.startswith(b"HTTP/1.1 502") and b"X-Proxy-Error: connect-failed" in reply
    assert [(e["outcome"], e["reason"]) for e in events[-2:]] == [
        ("allowed", "allowed"), ("failed", "connect-failed")]
    # the control: a policy denial stays a 403, audited as denied
    reply = _exchange(hport, _get(80, "evil.test"))
    assert reply.startswith(b"HTTP/1.1 403")
    assert events[-1]["outcome"] == "denied"


# --- srt's httpProxyPort / socksProxyPort: an external proxy on the host ------------


def test_proxy_ports_pass_that_protocol_to_the_external_proxy(origin: Recorder) -> None:
    """``httpProxyPort`` names a proxy already on the host's loopback: the sandbox's
    HTTP connections go to it unread (it decides); SOCKS5, with no port given,
    is still decided here."""
    from agent_sandbox.runtime.proxy import serve
    from agent_sandbox.runtime.settings import parse

    external = Recorder(answer=b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: external\r\n\r\n")
    settings = parse({"network": {"allowedDomains": ["allowed.test"], "deniedDomains": [],
                                  "httpProxyPort": external.port}})
    http, socks = socket.socket(), socket.socket()
    for s in (http, socks):
        s.bind(("127.0.0.1", 0))
        s.listen(4)
    hport, sport = http.getsockname()[1], socks.getsockname()[1]
    events: list[dict[str, Any]] = []
    p = serve(settings.network, http, socks, events.append, "t")
    try:
        request = _get(origin.port, "evil.test")
        reply = _exchange(hport, request)
        assert b"X-Proxy-Error: external" in reply  # the external proxy's answer
        assert external.received() == [request]  # all of it, unread and undecided here
        assert events == []
        reply = _exchange(sport, _socks_request("evil.test", origin.port))
        assert reply[2:4] == b"\x05\x02"  # decided here: not allowed
        assert [e["reason"] for e in events] == ["blocked-by-allowlist"]
        assert origin.received() == []
    finally:
        p.stop()
        external.sock.close()


def test_headers_named_in_connection_are_hop_by_hop(proxy: Any, origin: Recorder) -> None:
    _, hport, _, _ = proxy
    req = _get(origin.port, extra="Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\n"
                                  "Keep-Alive: 300\r\nProxy-Connection: keep-alive\r\n"
                                  "TE: trailers\r\nUpgrade: websocket\r\nX-End: kept\r\n")
    assert _exchange(hport, req).endswith(b"ok")
    (got,) = origin.received()
    assert b"X-End: kept\r\n" in got  # the control: an end-to-end header passes
    for gone in (b"X-Hop", b"Keep-Alive", b"Proxy-Connection", b"TE:", b"Upgrade",
                 b"keep-alive"):
        assert gone not in got
