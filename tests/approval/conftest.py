"""Helpers for the approval-loop tests: a connected repository made directly
(fast) or through ``sandbox init``, the hook as a real subprocess, Claude Code
hook JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable

# The registry of connected repositories lives in the user's state folder: each
# worker of the run has its own (tests/conftest.py sets it when pytest configures,
# before any test module is collected and copies the environment for the hooks it
# starts as subprocesses, and removes it at the end).

BASE_POLICY: dict[str, Any] = {
    "filesystem": {"allow_write": ["."], "deny_read": ["~/.ssh", "**/.env"], "deny_write": [],
                   "allow_read": []},
    "network": {"allowed_domains": ["github.com", "*.pythonhosted.org", "pypi.org"],
                "denied_domains": ["evil.example"]},
    "commands": {
        "default": "escalate",
        "rules": [
            {"verdict": "allow", "tool": "bash", "pattern": "ls *"},
            {"verdict": "allow", "tool": "bash", "pattern": "echo *"},
            {"verdict": "allow", "tool": "bash", "pattern": "cat *"},
            {"verdict": "allow", "tool": "bash", "pattern": "grep *"},
            {"verdict": "allow", "tool": "bash", "pattern": "git status *"},
            {"verdict": "allow", "tool": "bash", "pattern": "curl *"},
            {"verdict": "observe", "tool": "bash", "pattern": "pytest *"},
            {"verdict": "escalate", "tool": "bash", "pattern": "git push *"},
            {"verdict": "allow", "tool": "bash", "pattern": "git *"},
            {"verdict": "deny", "tool": "bash", "pattern": "rm -rf *", "reason": "no rm -rf"},
            {"verdict": "allow", "tool": "read", "pattern": "*"},
            {"verdict": "escalate", "tool": "mcp", "pattern": "mcp__github__create_issue"},
            {"verdict": "allow", "tool": "mcp", "pattern": "mcp__github"},
        ],
    },
    "approvals": {"ttl": 1800, "wait": 20, "remember_ttl": 3600},
}


def make_repo(root: Path, policy: dict[str, Any] | None = None) -> Path:
    """A connected repository without going through init (init has its own tests)."""
    sb = root / ".sandbox"
    for d in ("escalations/pending", "escalations/decided", "escalations/claimed",
              "escalations/done", "audit", "state", "originals"):
        (sb / d).mkdir(parents=True, exist_ok=True)
    (sb / "policy.json").write_text(json.dumps(policy or BASE_POLICY))
    settings = {
        "network": {"allowedDomains": [], "deniedDomains": [], "allowLocalBinding": False},
        "filesystem": {"denyRead": [], "allowWrite": [str(root)], "denyWrite": []},
    }
    (sb / "srt-settings.json").write_text(json.dumps(settings))
    from agent_sandbox.policy.registry import register

    register(str(root), os.path.expanduser("~"))  # as `sandbox init` does
    return root



@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


def claude_pre(command: str, cwd: Path | str, tool: str = "Bash",
               tool_input: dict[str, Any] | None = None) -> dict[str, Any]:
    """Claude Code PreToolUse input, as the client sends it."""
    return {
        "session_id": "3f1c2a9e-5b7d-4e21-9c1a-7d0e6f5a4b3c",
        "transcript_path": "/root/.claude/projects/x/3f1c2a9e.jsonl",
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input if tool_input is not None else
        {"command": command, "description": "run it"},
        "tool_use_id": "toolu_01" + os.urandom(8).hex(),  # unique per call, as sent
    }


def run_hook(agent: str, event: str, payload: bytes | str | dict[str, Any],
             timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    data = payload if isinstance(payload, bytes) else (
        payload if isinstance(payload, str) else json.dumps(payload)).encode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run([PY, "-I", "-m", "agent_sandbox", "hook", agent, event], input=data,
                          capture_output=True, timeout=timeout, cwd=cwd, env=env)


def decision_of(proc: subprocess.CompletedProcess[Any]) -> tuple[str, str]:
    out = json.loads(proc.stdout)
    h = out["hookSpecificOutput"]
    return h["permissionDecision"], h.get("permissionDecisionReason", "")
