"""Every way the hook's surroundings can be broken blocks the call (exit 2 or
a deny) within the hook's budget: never an allow, never a hang. Each case has
a control that shows the same call is allowed when nothing is broken, so the
judge can fire."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from agent_sandbox.contract import START_BUDGET, agent_timeout, hook_deadline

from .conftest import BASE_POLICY, PY, claude_pre, make_repo

ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
HOOK = [PY, "-I", "-m", "agent_sandbox", "hook", "claude", "pre-tool-use"]


def hook(payload: dict[str, Any], *, env: dict[str, str] | None = None, stdout: Any = None,
         timeout: float = 30) -> tuple[int, str, str]:
    p = subprocess.run(HOOK, input=json.dumps(payload).encode(), env=env or ENV,
                       stdout=stdout if stdout is not None else subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, (p.stdout or b"").decode(), p.stderr.decode()


def verdict(out: str) -> str:
    if not out.strip():
        return ""
    return str(json.loads(out)["hookSpecificOutput"]["permissionDecision"])


def test_control_the_same_call_is_allowed(repo: Path) -> None:
    code, out, _ = hook(claude_pre("ls -la", repo))
    assert (code, verdict(out)) == (0, "allow")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_policy_that_is_not_a_regular_file_blocks_at_once(repo: Path, kind: str) -> None:
    policy = repo / ".sandbox/policy.json"
    policy.unlink()
    if kind == "fifo":
        os.mkfifo(policy)        # nobody will ever write: open() would block forever
    elif kind == "dev-zero":
        policy.symlink_to("/dev/zero")  # reads never end
    else:
        policy.mkdir()
    started = time.monotonic()
    code, out, err = hook(claude_pre("ls -la", repo))
    assert code == 2 and verdict(out) == "deny", (code, out, err)
    assert "policy" in err
    assert time.monotonic() - started < START_BUDGET


def test_stdout_that_cannot_take_the_answer_blocks(repo: Path) -> None:
    with open("/dev/full", "wb") as full:                      # every write: ENOSPC
        code, _, err = hook(claude_pre("ls -la", repo), stdout=full)
    assert code == 2, err
    p = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *HOOK],   # stdout closed
                       input=json.dumps(claude_pre("ls -la", repo)).encode(), env=ENV,
                       stderr=subprocess.PIPE, timeout=30)
    assert p.returncode == 2, p.stderr
    r, w = os.pipe()                                            # reader gone: EPIPE
    os.close(r)
    with os.fdopen(w, "wb") as broken:
        code, _, err = hook(claude_pre("ls -la", repo), stdout=broken)
    assert code == 2, err


@pytest.mark.parametrize("home", [None, "", "/", "//", "relative/home"])
def test_a_home_that_cannot_be_judged_blocks(repo: Path, home: str | None) -> None:
    env = {k: v for k, v in ENV.items() if k != "HOME"}
    if home is not None:
        env["HOME"] = home
    code, out, err = hook(claude_pre("ls -la", repo), env=env)
    assert code == 2 and verdict(out) == "deny", (code, out, err)
    assert "HOME" in err


def test_tilde_in_the_policy_is_the_accounts_home_not_HOME(repo: Path, tmp_path: Path) -> None:
    """``~/.ssh`` in the policy is the account's ``.ssh`` whatever ``$HOME`` says;
    ``~`` in a command is what the shell makes of ``$HOME``, and denials hold
    under both."""
    account = pwd.getpwuid(os.geteuid()).pw_dir
    elsewhere = tmp_path / "fake-home"
    elsewhere.mkdir()
    env = {**ENV, "HOME": str(elsewhere)}
    for command in (f"cat {account}/.ssh/id_ed25519", "cat ~/.ssh/id_ed25519"):
        _, out, _ = hook(claude_pre(command, repo), env=env)
        assert verdict(out) == "deny", (command, out)
    _, out, _ = hook(claude_pre(f"cat {elsewhere}/notes.txt", repo), env=env)
    assert verdict(out) == "allow", out                        # control


@pytest.mark.parametrize("rule", [
    {"verdict": "deny", "tool": "bash", "pattern": 123},
    {"verdict": "deny", "tool": "bash", "pattern": ["rm"]},
    {"verdict": "deny", "tool": "bash", "pattern": {"a": 1}},
    {"verdict": "deny", "tool": "bash", "pattern": ""},
    {"verdict": "deny", "tool": "bash", "prefix": "rm"},
    {"verdict": "deny", "tool": "bash", "prefix": [1, 2]},
    {"verdict": "deny", "tool": 5, "pattern": "rm *"},
    {"verdict": "deny", "tool": "shell", "pattern": "rm *"},
    {"verdict": "deny", "tool": "bash", "pattern": "rm *", "reason": ["x"]},
])
def test_a_rule_of_the_wrong_shape_is_refused_when_the_policy_loads(tmp_path: Path,
                                                                     rule: dict[str, Any]
                                                                     ) -> None:
    doc = json.loads(json.dumps(BASE_POLICY))
    doc["commands"]["rules"].append(rule)
    repo = make_repo(tmp_path / "r", doc)
    code, out, err = hook(claude_pre("ls -la", repo))          # a call the rule is not about
    assert code == 2 and verdict(out) == "deny", (code, out, err)
    assert "invalid" in err and "commands.rules[" in err


def test_input_that_never_ends_blocks_within_the_start_budget(repo: Path) -> None:
    started = time.monotonic()
    p = subprocess.Popen(HOOK, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV)
    assert p.stdin
    p.stdin.write(b'{"tool_name": "Bash", ')                     # and never closes it
    p.stdin.flush()
    code = p.wait(timeout=START_BUDGET + 20)
    elapsed = time.monotonic() - started
    assert p.stdout
    out = p.stdout.read().decode()
    p.stdin.close()
    assert code == 2 and verdict(out) == "deny", (code, out)
    assert START_BUDGET - 1 < elapsed < START_BUDGET + 10


@pytest.mark.parametrize("wait", [0, 0.5, 20, 120, 600, 3600])
def test_the_rendered_timeout_exceeds_the_hooks_own_deadline(wait: float) -> None:
    assert agent_timeout(wait) > hook_deadline(wait) >= wait
