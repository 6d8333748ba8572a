"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by
Playwright through its executable path; no browser is downloaded): a real hook
escalates, the request appears on the open page within a second without a reload, a
click on Approve lets the hook finish with the command's output, and the page shows
the completion and the request's audit timeline. Screenshots are kept under the
test's temporary folder (``screenshots/``).

The page logs in by pasting the token into its form, and never sends it: a listener
that takes the port while the server is down gets nothing it can use, a token in the
address is never used, and a click meant for a card that went away never decides the
one that slid under the pointer."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from .conftest import Server, hook_result, start_hook, start_server, wait_pending

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]

pytestmark = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                reason="Debian's chromium is not installed (make setup)")


@pytest.fixture
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def open_dashboard(browser: Any, server: Server, **kw: Any) -> Any:
    """A page logged in the one way there is: the token pasted into the form."""
    page = browser.new_page(**kw)
    page.goto(server.url)
    page.fill("#token", server.token)
    page.click("#login button")
    page.wait_for_selector("#live.on", timeout=10_000)
    assert page.input_value("#token") == ""  # not left in the page
    return page


def settle(page: Any) -> None:
    """Wait for the cards to have been at their places long enough to be decided."""
    page.wait_for_timeout(800)


def test_approve_from_the_dashboard(server: Server, repo: Path, browser: Any,
                                    tmp_path: Path) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page = open_dashboard(browser, server, viewport={"width": 1200, "height": 900})
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.evaluate("window.sameDocument = true")
    page.screenshot(path=str(shots / "1-empty.png"))

    hook = start_hook("echo from-the-browser-$((6*7)); exit 0", repo)
    rid = wait_pending(repo)[0]
    started = time.monotonic()
    card = page.wait_for_selector(f"#pending #req-{rid}", timeout=1_000)
    shown_after = time.monotonic() - started
    assert card is not None
    assert shown_after < 1.0
    text = card.inner_text()
    assert "echo from-the-browser-$((6*7)); exit 0" in text  # the exact command
    assert "why:" in text and rid in text
    assert card.query_selector(".risk").inner_text().strip()
    page.screenshot(path=str(shots / "2-pending.png"), full_page=True)

    settle(page)
    page.locator(f"#pending #req-{rid} button.approve").click()
    verdict, reason = hook_result(hook)
    assert verdict == "deny" and "from-the-browser-42" in reason  # the command's output
    done = page.wait_for_selector(f"#done #req-{rid} .status-completed", timeout=10_000)
    assert done is not None and "completed (exit 0)" in done.inner_text()
    finished = page.query_selector(f"#done #req-{rid}")
    assert "from-the-browser-42" in finished.inner_text()
    assert page.query_selector(f"#pending #req-{rid}") is None
    page.screenshot(path=str(shots / "3-completed.png"), full_page=True)

    finished.query_selector("button.timeline-toggle").click()
    page.wait_for_selector(f"#req-{rid} .timeline li >> text=approval", timeout=10_000)
    timeline = page.query_selector(f"#req-{rid} .timeline").inner_text()
    for event in ("request", "escalation", "approval", "completed"):
        assert event in timeline
    assert "via=web" in timeline
    page.wait_for_selector("#chain.ok", timeout=10_000)
    page.screenshot(path=str(shots / "4-timeline.png"), full_page=True)

    assert page.evaluate("window.sameDocument") is True  # never reloaded
    assert not errors, errors
    origin = server.url.rstrip("/")
    assert all(u.startswith(origin) for u in asked), asked  # no asset from elsewhere
    print(f"screenshots: {shots}")


def test_a_hostile_command_is_shown_escaped_not_rendered(server: Server, repo: Path,
                                                         browser: Any) -> None:
    page = open_dashboard(browser, server)
    command = "make x <img src=x onerror=window.pwned=1> \u202egnp.exe"
    hook = start_hook(command, repo)
    try:
        rid = wait_pending(repo)[0]
        card = page.wait_for_selector(f"#pending #req-{rid}", timeout=5_000)
        text = card.inner_text()
        assert "<img src=x onerror=window.pwned=1>" in text  # as text, never as markup
        assert "\\u202e" in text and "\u202e" not in text  # the bidi override, escaped
        assert card.query_selector("img") is None
        assert page.evaluate("window.pwned === undefined")
    finally:
        hook.kill()
        hook.wait()


def test_a_wrong_token_gets_the_login_form(server: Server, browser: Any) -> None:
    page = browser.new_page()
    page.goto(server.url)
    page.fill("#token", "w" * 43)
    page.click("#login button")
    # a server that holds another token cannot prove this one: nothing is answered
    page.wait_for_selector("#notice >> text=did not prove", timeout=10_000)
    assert page.query_selector("#live.on") is None
    page.goto(server.url)
    page.fill("#token", server.token)
    page.click("#login button")
    page.wait_for_selector("#live.on", timeout=10_000)


class Recorder:
    """What a page sends: every request (URL, headers, body) and WebSocket frame."""

    def __init__(self, page: Any) -> None:
        self.sent: list[str] = []
        page.on("request", lambda r: self.sent.append(
            f"{r.method} {r.url} {json.dumps(r.headers)} {r.post_data or ''}"))
        page.on("websocket", lambda ws: ws.on(
            "framesent", lambda payload: self.sent.append(f"WS {payload!r}")))

    def text(self) -> str:
        return "\n".join(self.sent)


def test_a_token_in_the_address_is_never_used(server: Server, browser: Any) -> None:
    page = browser.new_page()
    seen = Recorder(page)
    page.goto(server.url + "#token=" + server.token)
    page.wait_for_selector("#login:not([hidden])", timeout=10_000)
    assert "never used" in page.inner_text("#login-error")
    assert "--rotate-token" in page.inner_text("#login-error")
    page.wait_for_timeout(1500)
    assert page.query_selector("#live.on") is None
    assert server.token not in page.url
    assert "api/" not in seen.text()  # it did not even try
    # control: the form logs in, and the token is never sent then either
    page.fill("#token", server.token)
    page.click("#login button")
    page.wait_for_selector("#live.on", timeout=10_000)
    assert "api/login" in seen.text() and server.token not in seen.text()


class Squatter:
    """Another account's listener on the freed port: records every byte a page sends
    and answers as a server would (a login challenge with a made-up proof, a session,
    an accepted WebSocket), to draw out whatever the page would give."""

    GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

    def __init__(self, port: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        end = time.monotonic() + 10
        while True:
            try:
                self.sock.bind(("127.0.0.1", port))
                break
            except OSError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.captured: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.sock.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self._serve(conn)
                except OSError:
                    pass

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in
                   (line.decode("latin-1").partition(":") for line in head.split(b"\r\n")[1:])}
        while len(body) < int(headers.get("content-length", "0") or 0):
            body += conn.recv(65536)
        self.captured.append(head + b"\r\n\r\n" + body)
        if "sec-websocket-key" in headers:
            accept = base64.b64encode(hashlib.sha1(
                (headers["sec-websocket-key"] + self.GUID).encode()).digest()).decode()
            conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                          ).encode())
            frame = conn.recv(2)
            size = frame[1] & 0x7F
            if size == 126:
                size = int.from_bytes(conn.recv(2), "big")
            mask = conn.recv(4)
            payload = b""
            while len(payload) < size:
                payload += conn.recv(size - len(payload))
            self.captured.append(bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
            return
        reply = json.dumps({"server_nonce": "A" * 43, "server_proof": "0" * 64,
                            "session": "B" * 43, "expires_in": 3600, "user": "x"}).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(reply)).encode() + b"\r\n\r\n" + reply)


def test_a_listener_on_the_freed_port_gets_nothing_it_can_use(repo: Path, browser: Any,
                                                              tmp_path: Path) -> None:
    server = start_server(repo)
    port = int(server.url.rstrip("/").rsplit(":", 1)[1])
    page = open_dashboard(browser, server)
    server.stop()  # a restart, an upgrade, a crash
    squatter = Squatter(port)
    try:
        page.wait_for_selector("#live.off", timeout=10_000)
        page.wait_for_timeout(4_000)  # the page tries to come back, several times
    finally:
        squatter.close()
    server = start_server(repo, port=port)  # the real server is back
    try:
        page.wait_for_selector("#live.on", timeout=15_000)  # logged in again, by itself
        hook = start_hook("make after-the-restart", repo)
        try:
            rid = wait_pending(repo)[0]
            page.wait_for_selector(f"#pending #req-{rid}", timeout=5_000)
        finally:
            hook.kill()
            hook.wait()
        got = b"\n".join(squatter.captured).decode("latin-1")
        assert squatter.captured, "the page never came to the listener"  # the control
        assert server.token not in got, got
        assert '"proof"' not in got  # the page never answered a server without the proof
        # nothing it caught opens the real server: no token, no session, no proof
        for candidate in set(re.findall(r"[A-Za-z0-9_\-]{20,}", got)):
            for scheme in ("Bearer", "Session"):
                r = requests.get(server.url + "api/status", timeout=10,
                                 headers={"Authorization": f"{scheme} {candidate}"})
                assert r.status_code == 401, (scheme, candidate)
        for body in re.findall(r"\{[^{}]*\}", got):
            r = requests.post(server.url + "api/login", data=body, timeout=10,
                              headers={"Content-Type": "application/json"})
            assert r.status_code in (401, 422), (body, r.status_code)
        (tmp_path / "captured.txt").write_text(got)
    finally:
        server.stop()


def test_a_double_click_never_approves_the_card_that_slid_under_the_pointer(
        server: Server, repo: Path, browser: Any) -> None:
    hooks = [start_hook(f"touch card-{n}.txt", repo) for n in "xy"]  # same card height
    try:
        wait_pending(repo, 2)
        page = open_dashboard(browser, server, viewport={"width": 1100, "height": 900})
        page.wait_for_function("() => document.querySelectorAll('#pending .card').length == 2",
                               timeout=5_000)
        cards = page.query_selector_all("#pending .card")
        rid_a, rid_b = (c.get_attribute("data-id") for c in cards)  # A above B
        file_a, file_b = (repo / re.findall(r"card-[xy]\.txt", c.inner_text())[0]
                          for c in cards)
        first, second = (hooks["xy".index(f.name[5])] for f in (file_a, file_b))
        settle(page)
        box = page.locator(f"#req-{rid_a} button.approve").bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.click(x, y)  # approves A, as meant
        page.wait_for_selector(f"#pending #req-{rid_a}", state="detached", timeout=5_000)
        under = page.evaluate(f"document.elementFromPoint({x}, {y})"
                              f".closest('.card')?.id")
        assert under == f"req-{rid_b}"  # B slid under the pointer
        page.mouse.click(x, y)  # the second click of a double click, a moment late
        page.wait_for_timeout(800)
        assert (repo / ".sandbox/escalations/decided" / f"{rid_b}.json").exists() is False
        assert "too early" in page.inner_text(f"#req-{rid_b} .settle")
        assert page.query_selector(f"#pending #req-{rid_b}") is not None
        hook_result(first)
        assert file_a.exists() and not file_b.exists()
        # control: once B has been at its place a moment, the same click decides it
        page.mouse.click(x, y)
        hook_result(second)
        assert file_b.exists()
    finally:
        for hook in hooks:
            hook.kill()
            hook.wait()
