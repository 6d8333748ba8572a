"""Fleet hosts without ``sandbox init``: an escalation waits in this user's
host-level queue (in the user's state folder, outside every repository) for
``sandbox approve``/``watch``, instead of becoming a denial; the approved
command runs once, in the sandbox, and its result reaches the hook. Judged from
a marker file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_sandbox import contract

from .conftest import BASE_POLICY, claude_pre, decision_of

pytestmark = [pytest.mark.host_global]

MANAGED = Path(contract.POLICY_FILE)
SYSTEM_SETTINGS = Path(contract.SYSTEM_SRT_SETTINGS)


@pytest.fixture
def fleet_host(tmp_path: Path) -> dict[str, str]:
    """A managed policy and system srt settings at their system paths (what the
    roles install), put back as they were afterwards."""
    saved = {p: p.read_bytes() if p.exists() else None for p in (MANAGED, SYSTEM_SETTINGS)}
    MANAGED.parent.mkdir(parents=True, exist_ok=True)
    MANAGED.write_text(json.dumps(BASE_POLICY))
    SYSTEM_SETTINGS.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": False},
        "filesystem": {"denyRead": [], "allowWrite": [str(tmp_path / "work")],
                       "denyWrite": []}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["AGENT_SANDBOX_STATE_DIR"] = str(tmp_path / "state")
    try:
        yield env
    finally:
        for p, body in saved.items():
            if body is None:
                p.unlink(missing_ok=True)
            else:
                p.write_bytes(body)


def test_an_escalation_without_init_waits_for_a_human(tmp_path: Path,
                                                       fleet_host: dict[str, str]) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "pushed.txt"
    hook = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox", "hook", "claude",
                             "pre-tool-use"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=fleet_host)
    assert hook.stdin
    hook.stdin.write(json.dumps(claude_pre(f"printf once >> {marker}", work)).encode())
    hook.stdin.close()
    hook.stdin = None
    queue = tmp_path / "state" / "escalations" / "pending"
    end = time.monotonic() + 20
    while not (queue.is_dir() and list(queue.glob("*.json"))):
        assert hook.poll() is None, hook.communicate()
        assert time.monotonic() < end, "no request in the host-level queue"
        time.sleep(0.05)
    assert not (work / ".sandbox").exists()                  # nothing in the repository
    rid = next(queue.glob("*.json")).stem
    p = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "approve", str(work), rid],
                       capture_output=True, text=True, env=fleet_host, timeout=60)
    assert p.returncode == 0, p.stderr
    out, err = hook.communicate(timeout=60)
    verdict, reason = decision_of(subprocess.CompletedProcess([], 0, out, err))
    assert verdict == "deny" and "exit status: 0" in reason, reason
    assert marker.read_text() == "once"
    log = (tmp_path / "state" / "audit" / "audit.jsonl").read_text()
    assert rid in log
