"""``make demo-infra`` as a newcomer runs it (its script, in a state folder of the
test's own): the three actions end completed in gVisor, each credential revoked,
and the servers themselves count no live credential; ``down`` removes it all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_demo_infra_plays_the_story_and_leaves_no_credential(gvisor_image: str) -> None:
    # outside pytest's root-only tree: PostgreSQL runs as an unprivileged account
    parent = Path(tempfile.mkdtemp(prefix="agent-sandbox-demo-infra-test-", dir="/var/tmp"))
    parent.chmod(0o755)
    state = parent / "demo-infra"
    env = {**os.environ, "AGENT_SANDBOX_DEMO_INFRA_DIR": str(state)}
    up = subprocess.run([sys.executable, "scripts/demo_infra.py"], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=600, check=False)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        rows = {line.split()[0]: line.split() for line in up.stdout.splitlines()
                if line.split()[:1] and line.split()[0] in
                ("orders-report", "add-notes-table", "drop-archive")}
        assert set(rows) == {"orders-report", "add-notes-table", "drop-archive"}, up.stdout
        for row in rows.values():
            assert "completed" in row and "runsc" in row and "yes" in row, row
        assert rows["drop-archive"][2:4] == ["approved", "by"]
        assert "tables now: order_notes,orders" in up.stdout
        assert "live credentials: 0 " in up.stdout
        # the lab's secrets (root token, passwords) stay out of the repository's sandbox
        repo = state / "repo"
        secret = state / "lab" / "state.json"
        assert "root_token" in secret.read_text()           # the control: it is there
        peek = subprocess.run(
            [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings",
             str(repo / ".sandbox" / "srt-settings.json"), "--", "sh", "-c",
             f"cat {secret} {state}/lab/bao/.vault-token; cat {repo}/.sandbox/policy.yml"],
            cwd=repo, env={**env, "HOME": str(state / "home")}, capture_output=True,
            text=True, timeout=120, check=False)
        assert "root_token" not in peek.stdout and "root-" not in peek.stdout, peek.stdout
        assert "drop-archive" in peek.stdout, peek.stdout + peek.stderr   # it did run
    finally:
        down = subprocess.run([sys.executable, "scripts/demo_infra.py", "down"], cwd=REPO,
                              env=env, capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    shutil.rmtree(parent, ignore_errors=True)
