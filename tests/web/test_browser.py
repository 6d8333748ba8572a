"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by
Playwright through its executable path; no browser is downloaded): a real hook
escalates, the request appears on the open page within a second without a reload, a
click on Approve lets the hook finish with the command's output, and the page shows
the completion and the request's audit timeline. Screenshots are kept under the
test's temporary folder (``screenshots/``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Server, hook_result, start_hook, wait_pending

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


def test_approve_from_the_dashboard(server: Server, repo: Path, browser: Any,
                                    tmp_path: Path) -> None:
    shots = tmp_path / "screenshots"
    shots.mkdir()
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server.url + "#token=" + server.token)
    page.wait_for_selector("#live.on", timeout=10_000)
    assert "token" not in page.url  # taken from the fragment, then dropped from the URL
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
    page = browser.new_page()
    page.goto(server.url + "#token=" + server.token)
    page.wait_for_selector("#live.on", timeout=10_000)
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
    page.goto(server.url + "#token=" + "w" * 43)
    page.wait_for_selector("#login:not([hidden])", timeout=10_000)
    assert "refused" in page.inner_text("#login-error")
    page.fill("#token", server.token)
    page.click("#login button")
    page.wait_for_selector("#live.on", timeout=10_000)
