"""`sandbox verify` on this machine against settings written here: the real
sandbox, proxy, hook, queue and audit. A policy that leaks makes the matching
check fail (the checks can fail, and say why)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None or shutil.which("ip") is None,
    reason="needs root, bubblewrap and iproute2 (the network checks make a namespace)"),
    # each check picks a random /24 of 10.232 for its namespace: one worker runs them all,
    # so two never pick the same one at once
    pytest.mark.xdist_group("verify-network")]


def settings(tmp_path: Path, *, allowed: list[str], denied: list[str]) -> Path:
    (tmp_path / "secret").mkdir(exist_ok=True)
    (tmp_path / "work").mkdir(exist_ok=True)
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({
        "network": {"allowedDomains": allowed, "deniedDomains": denied,
                    "allowLocalBinding": False},
        "filesystem": {"denyRead": [str(tmp_path / "secret")],
                       "allowWrite": [str(tmp_path / "work")], "denyWrite": []}}))
    return path


def verify(path: Path, *checks: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    args = [a for c in checks for a in ("--check", c)]
    proc = subprocess.run([sys.executable, "-m", "agent_sandbox", "verify", "--json",
                           "--settings", str(path), *args],
                          capture_output=True, text=True, timeout=240,
                          env={**os.environ, **(env or {})})
    return proc.returncode, json.loads(proc.stdout)


def test_every_check_passes_with_a_sound_policy(tmp_path: Path) -> None:
    code, doc = verify(settings(tmp_path, allowed=["github.com"],
                                denied=["*.internal.example.com"]))
    assert code == 0, json.dumps(doc, indent=2)
    assert doc["passed"] == doc["total"] == 6
    assert not list((tmp_path / "work").iterdir())  # scratch space cleaned up
    assert not list((tmp_path / "secret").iterdir())


def test_checks_ignore_the_callers_proxy_variables(tmp_path: Path) -> None:
    """The sandbox's proxy goes on through the caller's HTTPS_PROXY (srt's
    parentProxy fallback); verify proves this host's own enforcement, so a proxy in
    the caller's environment (here one that does not exist) changes nothing."""
    dead = "http://127.0.0.1:9"
    policy = settings(tmp_path, allowed=["github.com"], denied=["*.internal.example.com"])
    code, doc = verify(policy, "allowed_domain", "denied_domain",
                       env={"HTTP_PROXY": dead, "HTTPS_PROXY": dead, "https_proxy": dead})
    assert code == 0, json.dumps(doc, indent=2)
    assert doc["passed"] == doc["total"] == 2


def test_a_leaking_allowlist_fails_the_denied_domain_check(tmp_path: Path) -> None:
    # nothing is denied explicitly and the allowlist covers the name the check uses
    code, doc = verify(settings(tmp_path, allowed=["*.verify.agent-sandbox.test"], denied=[]),
                       "denied_domain")
    assert code == 1
    (check,) = doc["checks"]
    assert not check["passed"]
    assert "reached the upstream server" in check["detail"]


def test_a_blocked_name_fails_the_allowed_domain_check(tmp_path: Path) -> None:
    code, doc = verify(settings(tmp_path, allowed=["github.com"],
                                denied=["*.agent-sandbox.test"]), "allowed_domain")
    assert code == 1
    assert "did not pass the proxy" in doc["checks"][0]["detail"]


def test_host_only_leaves_out_the_repository_checks(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "agent_sandbox", "verify", "--json",
                           "--host-only", "--settings",
                           str(settings(tmp_path, allowed=[], denied=[]))],
                          capture_output=True, text=True, timeout=240)
    names = [c["name"] for c in json.loads(proc.stdout)["checks"]]
    assert names == ["denied_read", "protected_write", "denied_domain", "allowed_domain"]
    assert proc.returncode == 0
