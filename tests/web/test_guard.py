"""What every request meets before the application, on a real ``sandbox serve``: no
credentials, no body read (a 401 before the body even arrives, and before the query is
looked at); every body bounded (413); and bad input, even text that is not Unicode, a
precise 4xx that never echoes it."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import requests

from agent_sandbox.web.guard import MAX_BODY

from .conftest import Server, audit_records, start_hook, wait_pending

RID = "20260101T000000-aaaaaaaaaaaa"


def raw(server: Server, head: str, body: bytes = b"", wait: float = 10) -> tuple[int, bytes]:
    """Send ``head`` (and ``body``) on a raw connection; the status and body answered
    within ``wait`` seconds (0: no answer)."""
    host, port = server.url.split("//")[1].rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(head.encode() + body)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            head_part, _, rest = got.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head_part.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(rest) < length:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
        except TimeoutError:
            return 0, b""
    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/") else 0
    return status, rest


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_no_body_is_read_without_credentials(server: Server) -> None:
    before = rss_kib(server.proc.pid)
    # 400 MB announced and never sent: the answer comes at once, without waiting for it
    t0 = time.monotonic()
    status, body = raw(server, f"POST /api/requests/{RID}/approve HTTP/1.1\r\nHost: x\r\n"
                               "Content-Type: application/json\r\n"
                               "Content-Length: 400000000\r\n\r\n", b"{", wait=5)
    assert status == 401 and time.monotonic() - t0 < 5, (status, body)
    assert "credentials" in json.loads(body)["detail"]
    # streamed (chunked), several at once, tens of MB each: refused, memory unmoved
    chunk = b"a" * 65536
    for _ in range(4):
        def stream() -> object:
            for _ in range(200):
                yield chunk
        r = requests.post(server.url + f"api/requests/{RID}/approve", data=stream(),
                          headers={"Content-Type": "application/json"}, timeout=30)
        assert r.status_code == 401
    assert rss_kib(server.proc.pid) - before < 20_000
    # the query is not looked at before the credentials either
    assert requests.get(server.url + "api/requests?stat=done", timeout=10).status_code == 401
    # control: with the token, the same query is a precise 422
    assert requests.get(server.url + "api/requests?stat=done", headers=server.headers,
                        timeout=10).status_code == 422


def test_every_body_is_bounded(server: Server) -> None:
    auth = f"Authorization: Bearer {server.token}\r\n"
    status, body = raw(server, f"POST /api/requests/{RID}/approve HTTP/1.1\r\nHost: x\r\n"
                               f"{auth}Content-Type: application/json\r\n"
                               f"Content-Length: {MAX_BODY + 1}\r\n\r\n", wait=5)
    assert status == 413, (status, body)

    def stream() -> object:
        for _ in range(MAX_BODY // 4096 + 2):
            yield b" " * 4096

    r = requests.post(server.url + f"api/requests/{RID}/approve", data=stream(), timeout=30,
                      headers={**server.headers, "Content-Type": "application/json"})
    assert r.status_code == 413 and "larger than" in r.json()["detail"]
    # the login's public steps are bounded alike
    r = requests.post(server.url + "api/login/challenge", data=b" " * (MAX_BODY + 1),
                      headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 413
    # control: a body under the bound reaches the route (an unknown request: 404)
    r = requests.post(server.url + f"api/requests/{RID}/approve", json={"hash": "0" * 64},
                      headers=server.headers, timeout=30)
    assert r.status_code == 404
    for answer in (r, requests.get(server.url + "api/status", timeout=10)):
        assert answer.headers["x-frame-options"] == "DENY"  # on refusals too


def test_text_that_is_not_unicode_is_a_precise_422(server: Server, repo: Path) -> None:
    hook = start_hook("make surrogates", repo)
    try:
        rid = wait_pending(repo)[0]
        good = requests.get(server.url + f"api/requests/{rid}", headers=server.headers,
                            timeout=10).json()["hash"]
        headers = {**server.headers, "Content-Type": "application/json"}
        cases = [(f"api/requests/{rid}/deny", '"\\ud800"'),
                 (f"api/requests/{rid}/deny", '{"hash": "\\ud800"}'),
                 (f"api/requests/{rid}/approve", '{"h\\ud800": 1}'),
                 (f"api/requests/{rid}/deny", '{"hash": "' + good + '", "reason": "\\udfff"}'),
                 ("api/login/challenge", '{"origin": "\\ud800", "client_nonce": "\\ud800"}')]
        for path, body in cases:
            r = requests.post(server.url + path, data=body.encode(), headers=headers,
                              timeout=10)
            assert r.status_code == 422, (path, body, r.status_code, r.text)
            detail = r.json()["detail"]
            assert detail and all(p["loc"] and p["msg"] for p in detail), detail
            assert "input" not in json.dumps(detail)
        r = requests.post(server.url + f"api/requests/{rid}/approve", data=b'{"hash": 1',
                          headers=headers, timeout=10)
        assert r.status_code == 422  # not JSON at all
        assert not [a for a in audit_records(repo, rid) if a["event"] in ("approval", "denial")]
        assert not os.listdir(repo / ".sandbox/escalations/decided")
    finally:
        hook.kill()
        hook.wait()
