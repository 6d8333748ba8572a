"""HTTP/1.x proxy requests: absolute-form (``GET http://host/...``) and CONNECT.

Every request is decided on its own, and no byte is relayed that was not part
of an allowed request:

- one request per client connection. Its head is parsed strictly (a lone CR or
  LF, a control character, an obsolete folded line, a malformed header name,
  an unknown version are refused as ``malformed-request``), and its body is
  framed by this proxy: ``Content-Length`` (one, digits only) or
  ``Transfer-Encoding: chunked`` (alone, re-chunked canonically), never both,
  any other coding refused. The server gets exactly that body and
  ``Connection: close``; whatever the client sent after it (a pipelined
  request, smuggled bytes) is never forwarded, and the client connection is
  closed once the response has been relayed, so a kept-alive client opens a
  new connection, decided afresh, for its next request;
- the destination is the request target's; a ``Host`` header is replaced by
  the canonical authority (a disagreeing one cannot steer the request), and
  a parent proxy gets the canonical name too, never the client's spelling;
- CONNECT carries no body (``Content-Length``/``Transfer-Encoding`` on it are
  refused); bytes after its head are the tunnel's own data and go to the
  allowed destination only, after the decision.

A denial is ``403`` with ``X-Proxy-Error: <reason>`` and the settings'
``deniedDomainReasons`` text in the body; a destination that does not resolve
or cannot be reached is ``502`` with ``X-Proxy-Error`` saying which.
"""

from __future__ import annotations

import contextlib
import socket
import time

from agent_sandbox.errors import SandboxError

from .decide import Decision, authority, split_hostport
from .relay import Reader, in_background, pump, relay

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .egress_gate import Gate

_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789"
                   b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
# headers this proxy owns: hop-by-hop, framing, and the ones it rewrites
_DROPPED = frozenset({b"host", b"connection", b"proxy-connection", b"keep-alive",
                      b"proxy-authorization", b"proxy-authenticate", b"te", b"trailer",
                      b"upgrade", b"transfer-encoding", b"content-length"})
_CHUNK_LINE = 4096
DRAIN_TIMEOUT = 2.0  # after the response: read what the client still sends, then close
DRAIN_LIMIT = 1024 * 1024


class Malformed(SandboxError, ValueError):
    """A request this proxy will not pass on; the message is the audit's reason."""


class Request:
    """One parsed request head."""

    __slots__ = ("body", "headers", "length", "method", "target", "version")

    def __init__(self, method: str, target: str, version: str,
                 headers: list[tuple[bytes, bytes]], body: str, length: int) -> None:
        self.method, self.target, self.version = method, target, version
        self.headers = headers  # (lower-case name, the whole line)
        self.body = body  # "none", "length" or "chunked"
        self.length = length


def parse_head(head: bytes) -> Request:
    """A request head (up to and including the blank line), or Malformed."""
    if head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\r\n"):
        raise Malformed("malformed-request")
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not all(parts):
        raise Malformed("malformed-request")
    method, target, version = (p.decode("latin-1") for p in parts)
    if (not set(parts[0]) <= _TCHAR or version not in ("HTTP/1.1", "HTTP/1.0")
            or any(ord(ch) < 0x21 or ord(ch) >= 0x7F for ch in target)):
        raise Malformed("malformed-request")
    headers: list[tuple[bytes, bytes]] = []
    lengths: list[bytes] = []
    codings: list[bytes] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        # no folded lines, no space before the colon, no control characters
        if (not colon or not name or not set(name) <= _TCHAR
                or any((b < 0x20 and b != 0x09) or b == 0x7F for b in value)):
            raise Malformed("malformed-request")
        key = name.lower()
        if key == b"content-length":
            lengths += [v.strip() for v in value.split(b",")]
        elif key == b"transfer-encoding":
            codings += [v.strip().lower() for v in value.split(b",")]
        headers.append((key, line))
    if codings and lengths:
        raise Malformed("ambiguous-length")
    if codings:
        if codings != [b"chunked"] or version == "HTTP/1.0":
            raise Malformed("unsupported-transfer-encoding")
        return Request(method, target, version, headers, "chunked", 0)
    if lengths:
        if len(lengths) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 18:
            raise Malformed("ambiguous-length")
        return Request(method, target, version, headers, "length", int(lengths[0]))
    return Request(method, target, version, headers, "none", 0)


def absolute_target(target: str) -> tuple[str, str]:
    """(authority, origin-form path) of an ``http://`` target, or Malformed."""
    if not target[:7].lower() == "http://":
        raise Malformed("not-a-proxy-request")
    rest = target[7:]
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0),
              default=len(rest))
    auth, path = rest[:end], rest[end:]
    auth = auth.rsplit("@", 1)[-1]  # user information never chooses the host
    path = path.split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    if not auth:
        raise Malformed("malformed-request")
    return auth, path


def _forbidden(reason: str, detail: str = "") -> bytes:
    body = f"Blocked by agent-sandbox: {reason}{': ' + detail if detail else ''}\n".encode()
    return (
        b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: " + reason.encode("ascii", "replace")
        + b"\r\nContent-Type: text/plain\r\nContent-Length: " + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n" + body
    )


def _bad_gateway(reason: str) -> bytes:
    body = f"agent-sandbox: {reason}\n".encode()
    return (b"HTTP/1.1 502 Bad Gateway\r\nX-Proxy-Error: " + reason.encode("ascii", "replace")
            + b"\r\nContent-Type: text/plain\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n" + body)


def _refusal(d: Decision) -> bytes:
    return _bad_gateway(d.reason) if d.failed else _forbidden(d.reason, d.detail)


def _admit(gate: Gate, sock: socket.socket, host: str, port: int, protocol: str,
           started: float) -> tuple[socket.socket, bytes, Decision] | None:
    """Decide and record; on a denial answer 403, on a failure 502 (and return
    None); otherwise the connected socket, the bytes it sent ahead, the decision."""
    tunnel = protocol != "http"
    d = gate.admit(host, port, protocol, tunnel, started)
    if not d.allowed:
        sock.sendall(_refusal(d))
        return None
    try:
        up, ahead = gate.open(d, tunnel)
    except OSError:
        sock.sendall(_bad_gateway(gate.failed(d, protocol, started).reason))
        return None
    return up, ahead, d


def handle_http(gate: Gate, sock: socket.socket) -> None:
    """Serve one client connection: one request, decided, then closed."""
    started = time.monotonic()
    c = Reader(sock)
    head = c.read_until(b"\r\n\r\n")
    if head is None:
        sock.sendall(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
        return
    try:
        req = parse_head(head)
        if req.method == "CONNECT":
            if req.body != "none":  # a CONNECT has no body: where would it end?
                raise Malformed("ambiguous-length")
            _connect(gate, sock, c, req, started)
            return
        auth, path = absolute_target(req.target)
    except Malformed as exc:
        target = head.split(b" ", 2)[1][:200].decode("latin-1") if b" " in head else ""
        host = target if str(exc) == "not-a-proxy-request" else ""
        d = gate.log(Decision(False, str(exc), host, 0), "http", started)
        sock.sendall(_forbidden(d.reason))
        return
    host, port = split_hostport(auth, 80)
    admitted = _admit(gate, sock, host, port, "http", started)
    if admitted is None:
        return
    up, _, d = admitted
    _forward(gate, sock, c, up, req, d, path)


def _connect(gate: Gate, sock: socket.socket, c: Reader, req: Request, started: float) -> None:
    host, port = split_hostport(req.target, 443)
    admitted = _admit(gate, sock, host, port, "http-connect", started)
    if admitted is None:
        return
    up, ahead, _ = admitted
    sock.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n" + ahead)
    if c.buf:  # the tunnel's own first bytes (a TLS hello sent without waiting)
        up.sendall(c.buf)
        c.buf = b""
    relay(sock, up)


def _forward(gate: Gate, sock: socket.socket, c: Reader, up: socket.socket, req: Request,
             d: Decision, path: str) -> None:
    """Send the one allowed request (head and exactly its body), relay the
    response, then close the client connection."""
    canon = authority(d.host, d.port)
    if d.port == 80:
        canon = canon.rsplit(":", 1)[0]
    # to the server in origin form; to an upstream proxy in absolute form with
    # the canonical name and its own credentials (never the client's)
    target = f"http://{canon}{path}" if d.via else path
    named = {t.strip().lower() for k, line in req.headers if k == b"connection"
             for t in line.partition(b":")[2].split(b",")}
    out = [f"{req.method} {target} {req.version}".encode("latin-1")]
    out += [line for k, line in req.headers if k not in _DROPPED and k not in named]
    out.append(b"Host: " + canon.encode("ascii"))
    out.append(b"Connection: close")
    if req.body == "length":
        out.append(b"Content-Length: " + str(req.length).encode())
    elif req.body == "chunked":
        out.append(b"Transfer-Encoding: chunked")
    auth = d.upstream.header() if d.upstream is not None else b""
    sock.settimeout(None)
    up.settimeout(None)
    # the response may start before the body ends (100-continue, an early error)
    back = in_background(lambda: pump(up, sock))
    try:
        up.sendall(b"\r\n".join(out) + b"\r\n" + auth + b"\r\n")
        if req.body == "length":
            c.copy_exactly(req.length, up)
        elif req.body == "chunked":
            _copy_chunked(c, up)
    except (OSError, Malformed):
        # a body cut short or malformed: the server gets nothing more
        with contextlib.suppress(OSError):
            up.shutdown(socket.SHUT_RDWR)
    back.wait()
    up.close()
    _drain_and_close(sock)


def _copy_chunked(c: Reader, dst: socket.socket) -> None:
    """Re-send a chunked body canonically (sizes in plain hex, no extensions, no
    trailers); Malformed on anything a parser could read two ways."""
    while True:
        line = c.read_until(b"\r\n", _CHUNK_LINE)
        if line is None:
            raise Malformed("malformed-chunk")
        size_text = line[:-2].split(b";", 1)[0]
        if (not size_text or len(size_text) > 15 or b"\r" in line[:-2] or b"\n" in line[:-2]
                or not all(ch in b"0123456789abcdefABCDEF" for ch in size_text)):
            raise Malformed("malformed-chunk")
        size = int(size_text, 16)
        if size == 0:
            while True:  # trailer fields, dropped, up to the blank line
                trailer = c.read_until(b"\r\n", _CHUNK_LINE)
                if trailer is None or b"\n" in trailer[:-2] or b"\r" in trailer[:-2]:
                    raise Malformed("malformed-chunk")
                if trailer == b"\r\n":
                    dst.sendall(b"0\r\n\r\n")
                    return
        dst.sendall(b"%x\r\n" % size)
        c.copy_exactly(size, dst)
        if c.read_exactly(2) != b"\r\n":
            raise Malformed("malformed-chunk")
        dst.sendall(b"\r\n")


def _drain_and_close(sock: socket.socket) -> None:
    """Close without a reset that would discard the response: the response is
    finished (pump passed its EOF on), so read and drop what the client still
    sends (never forwarded) until it closes, briefly."""
    try:
        sock.settimeout(DRAIN_TIMEOUT)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        seen = 0
        while seen < DRAIN_LIMIT and time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            seen += len(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sock.close()
