"""The keys that sign audit checkpoints are out of every sandbox's sight.

A sandboxed command that reads a repository's signing key (kept in the user's
state, which is otherwise readable, read-only) could sign a forged checkpoint
for whoever can write the log. Judged by what the command could print.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agent_sandbox import contract
from agent_sandbox.runtime.run import run_sandboxed
from agent_sandbox.state_paths import repo_key_path

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

SECRET = "-----BEGIN PRIVATE KEY-----\nTHE-SIGNING-KEY\n"


@pytest.mark.parametrize("where", ["repository", "beside-log"])
def test_signing_keys_are_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 where: str) -> None:
    state, log = tmp_path / "state", tmp_path / "logs" / "audit"
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(state))
    monkeypatch.setenv(contract.AUDIT_DIR_ENV, str(log))
    work = tmp_path / "w"
    work.mkdir()
    log.mkdir(parents=True)
    key = Path(repo_key_path(str(work))) if where == "repository" else \
        log.parent / contract.AUDIT_KEYS / "audit.ed25519"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(SECRET)
    key.chmod(0o600)
    settings = {"network": {"allowedDomains": [], "deniedDomains": []},
                "filesystem": {"denyRead": [], "allowWrite": [str(work)], "denyWrite": []}}
    r = run_sandboxed(["cat", str(key)], settings, cwd=str(work), timeout=60)
    assert b"THE-SIGNING-KEY" not in r.stdout, "the sandbox read a signing key"
    assert key.read_text() == SECRET and os.access(key, os.R_OK)  # control: it is there
