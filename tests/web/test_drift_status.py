"""``sandbox serve`` shows the host's last drift check: ``/api/status``'s
``last_drift_check`` (the record ``sandbox verify --drift`` keeps, root's), and the
dashboard's line saying plainly that drift was found and which files, in a real
headless Chromium."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from agent_sandbox import last_verify

from .conftest import Server, start_server
from .test_browser import CHROMIUM, browser, open_dashboard

__all__ = ["browser"]

DRIFTED = {"at": 1_800_000_000.0, "clean": False,
           "drifted": [{"target": "/etc/agent-sandbox/srt-settings.json",
                        "problem": "modified", "detail": "sha256 0123 != 4567"}],
           "failed_checks": [{"name": "denied_domain", "detail": "reached evil.test"}],
           "checks": 6, "error": None}


@pytest.fixture
def host_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "host-state"
    monkeypatch.setenv("AGENT_SANDBOX_HOST_STATE_DIR", str(state))  # the server inherits it
    return state


@pytest.fixture
def served(repo: Path, host_state: Path) -> Iterator[Server]:
    s = start_server(repo)
    try:
        yield s
    finally:
        s.stop()


def status(server: Server) -> dict[str, Any]:
    r = requests.get(server.url + "api/status", headers=server.headers, timeout=30)
    assert r.status_code == 200, r.text
    doc: dict[str, Any] = r.json()
    return doc


@pytest.mark.skipif(os.geteuid() != 0, reason="the record is root's")
def test_status_reports_the_last_drift_check(served: Server) -> None:
    assert status(served)["last_drift_check"] is None  # never ran
    last_verify.record_drift(DRIFTED)
    assert status(served)["last_drift_check"] == DRIFTED
    Path(last_verify.drift_path()).chmod(0o666)  # anyone could have written it
    shown = status(served)["last_drift_check"]
    assert shown["at"] is None and shown["clean"] is False and "not trusted" in shown["error"]


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(CHROMIUM, os.X_OK),
                    reason="the record is root's; Debian's chromium is not installed")
def test_the_dashboard_says_drift_was_found(served: Server, browser: Any) -> None:
    last_verify.record_drift(DRIFTED)
    page = open_dashboard(browser, served)
    page.wait_for_selector("#hostdrift.bad", timeout=10_000)
    line = page.text_content("#hostdrift")
    assert line is not None and "DRIFT FOUND" in line and "1 file(s) drifted" in line
    items = page.locator("#drifted li").all_text_contents()
    assert items == ["modified: /etc/agent-sandbox/srt-settings.json",
                     "check denied_domain: reached evil.test"]
