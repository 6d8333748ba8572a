"""A tool call the agent sends again after its hook died (same client
tool-use id) is recognised: it never runs a second time, and the first request
never stays approvable with nobody waiting for it. Judged from marker files."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from agent_sandbox.approval.approver import ApprovalError, Approver
from agent_sandbox.queue import FolderQueue

from .conftest import PY, claude_pre, decision_of, run_hook

ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}


def start(payload: dict[str, object]) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([PY, "-I", "-m", "agent_sandbox", "hook", "claude", "pre-tool-use"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=ENV)
    assert p.stdin
    p.stdin.write(json.dumps(payload).encode())
    p.stdin.close()
    p.stdin = None
    return p


def first_pending(q: FolderQueue, timeout: float = 20) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ids = q.ids("pending")
        if ids:
            return ids[0]
        time.sleep(0.02)
    raise AssertionError("no request appeared")


def test_retry_after_the_hook_died_cancels_the_orphan(repo: Path) -> None:
    marker = repo / "ran.txt"
    call = claude_pre(f"printf x >> {marker}", repo)
    q = FolderQueue(str(repo / ".sandbox/escalations"))
    first = start(call)
    rid = first_pending(q)
    first.kill()
    first.wait()
    p = run_hook("claude", "pre-tool-use", call)                # the agent retries
    verdict, reason = decision_of(p)
    assert verdict == "deny" and "cancelled" in reason, reason
    assert q.ids("pending") == []                               # no second request
    assert q.result(rid)["status"] == "cancelled"
    with pytest.raises(ApprovalError):
        Approver(str(repo)).approve(rid)
    assert not marker.exists()


def test_retry_after_an_approved_run_returns_its_result_without_running_again(repo: Path
                                                                              ) -> None:
    marker = repo / "ran.txt"
    call = claude_pre(f"printf x >> {marker}", repo)
    q = FolderQueue(str(repo / ".sandbox/escalations"))
    first = start(call)
    rid = first_pending(q)
    Approver(str(repo)).approve(rid)
    out, _ = first.communicate(timeout=60)
    assert "exit status: 0" in out.decode()
    assert marker.read_text() == "x"
    again = run_hook("claude", "pre-tool-use", call)            # the same tool-use id
    verdict, reason = decision_of(again)
    assert verdict == "deny" and rid in reason and "exit status: 0" in reason
    assert marker.read_text() == "x"                            # ran once
    fresh = start(claude_pre(f"printf x >> {marker}", repo))    # control: a new call asks
    assert first_pending(q) != rid
    fresh.kill()
    fresh.wait()
