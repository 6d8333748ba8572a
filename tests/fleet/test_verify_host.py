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


def verify(path: Path, *checks: str, env: dict[str, str] | None = None,
           waivers: Path | None = None) -> tuple[int, dict]:
    args = [a for c in checks for a in ("--check", c)]
    args += ["--waivers", str(waivers)] if waivers else []
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


def test_a_waiver_reports_the_failing_check_as_waived_until_it_expires(tmp_path: Path) -> None:
    import datetime as dt
    import xml.etree.ElementTree as ET

    import xmlschema

    leaking = settings(tmp_path, allowed=["*.verify.agent-sandbox.test"], denied=[])
    today = dt.datetime.now(dt.UTC).date()
    waivers = tmp_path / "verify.json"

    def waive(expires: dt.date) -> None:
        waivers.write_text(json.dumps({"version": 1, "waivers": [
            {"check": "denied_domain", "justification": "proxy swap", "layer": "hosts/h.yml",
             "expires": expires.isoformat()}]}))

    waive(today)  # the last day it holds: the check still runs, fails, and is waived
    code, doc = verify(leaking, "denied_domain", waivers=waivers)
    assert code == 0, json.dumps(doc, indent=2)
    (check,) = doc["checks"]
    assert (check["status"], check["passed"]) == ("waived", False)
    assert "reached the upstream server" in check["detail"]
    assert check["waiver"]["layer"] == "hosts/h.yml"
    waive(today - dt.timedelta(days=1))  # expired: it waives nothing, and the run fails
    proc = subprocess.run([sys.executable, "-m", "agent_sandbox", "verify", "--format", "junit",
                           "--settings", str(leaking), "--check", "denied_domain",
                           "--waivers", str(waivers)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    xmlschema.XMLSchema(str(Path(__file__).parent / "schemas" / "junit-10.xsd")).validate(
        proc.stdout)
    failure = ET.fromstring(proc.stdout).find("testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "waiver-expired"
    assert "the check failed: " in failure.get("message", "")


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
