"""`sandbox verify`'s decisions without containers: drift comparison, the names
and settings the network checks use, and fail-closed handling of checks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from agent_sandbox.hostcheck import checks as v
from agent_sandbox.hostcheck.drift import compare_manifest


def _manifest(*entries: tuple[str, bytes, str]) -> dict:
    return {"version": 1, "artifacts": [
        {"target": t, "kind": "x", "mode": m, "sha256": hashlib.sha256(c).hexdigest()}
        for t, c, m in entries]}


def test_compare_manifest_reports_missing_modified_and_mode() -> None:
    files = {"/a": (b"A", 0o644), "/b": (b"changed", 0o644), "/c": (b"C", 0o600)}
    m = _manifest(("/a", b"A", "0644"), ("/b", b"B", "0644"), ("/c", b"C", "0644"),
                  ("/d", b"D", "0644"))
    items = compare_manifest(m, files.get)
    assert [(i.target, i.problem) for i in items] == [("/b", "modified"), ("/c", "mode"),
                                                      ("/d", "missing")]
    assert compare_manifest(_manifest(("/a", b"A", "0644")), files.get) == []


def _cli(*args: str, record: Path) -> subprocess.CompletedProcess[str]:
    """``sandbox verify`` with its drift record (audit, host state) kept below ``record``."""
    env = {**os.environ, "AGENT_SANDBOX_AUDIT_DIR": str(record / "audit"),
           "AGENT_SANDBOX_HOST_STATE_DIR": str(record / "state")}
    return subprocess.run([sys.executable, "-m", "agent_sandbox", "verify", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_drift_cli_lists_a_hand_edited_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_bytes(b"{}\n")
    bad.write_bytes(b"{}\n")
    os.chmod(good, 0o644)
    os.chmod(bad, 0o644)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(_manifest((str(good), b"{}\n", "0644"),
                                             (str(bad), b"{}\n", "0644"))))
    ok = _cli("--drift", "--files-only", "--manifest", str(manifest), record=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "no drift" in ok.stdout
    bad.write_bytes(b'{"hand": "edited"}\n')
    drift = _cli("--drift", "--files-only", "--manifest", str(manifest), record=tmp_path)
    assert drift.returncode == 1
    assert f"DRIFT modified {bad}" in drift.stdout
    assert str(good) not in drift.stdout


def test_drift_without_a_manifest_is_an_error_not_a_pass(tmp_path: Path) -> None:
    proc = _cli("--drift", "--files-only", "--manifest", str(tmp_path / "none.json"),
                record=tmp_path)
    assert proc.returncode == 1
    assert "no render manifest" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_denied_name_and_allowed_copy() -> None:
    assert v.denied_name(["*.internal.example.com", "x.test"]) == "verify.internal.example.com"
    assert v.denied_name(["metadata.google.internal"]) == "metadata.google.internal"
    assert v.denied_name([]) == v.UNLISTED_NAME
    base = {"network": {"allowedDomains": ["a.test"], "deniedDomains": [v.VERIFY_ALLOWED_NAME]},
            "filesystem": {"denyRead": ["~/.ssh"]}}
    out = v.with_allowed(base, v.VERIFY_ALLOWED_NAME)
    assert out["network"]["allowedDomains"] == ["a.test", v.VERIFY_ALLOWED_NAME]
    assert out["network"]["deniedDomains"] == []
    assert base["network"]["allowedDomains"] == ["a.test"]  # the original is untouched
    assert out["filesystem"] == base["filesystem"]


def test_concrete_paths_expand_home_and_skip_globs() -> None:
    assert v.concrete_paths(["~/.ssh", "**/.env", "/srv/x/", "rel", "/a/*.pem"], "/home/u") == [
        "/home/u/.ssh", "/srv/x"]


def _ctx(tmp_path: Path) -> v.Context:
    settings = tmp_path / "s.json"
    settings.write_text("{}")
    return v.Context(str(settings), sys.executable, str(tmp_path), scratch=str(tmp_path))


def test_a_check_that_cannot_run_fails(tmp_path: Path) -> None:
    def missing(ctx: v.Context) -> str:
        v.require("agent_sandbox.no_such_feature", "a feature still being built")
        return "unreachable"

    def boom(ctx: v.Context) -> str:
        raise KeyError("internal")

    r1 = v.run_check(_ctx(tmp_path), "missing", missing)
    assert not r1.passed and r1.detail.startswith("not available")
    r2 = v.run_check(_ctx(tmp_path), "boom", boom)
    assert not r2.passed and "internal error" in r2.detail


def test_denied_read_without_a_concrete_path_fails(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    Path(ctx.settings_path).write_text(json.dumps({"filesystem": {"denyRead": ["**/.env"]}}))
    r = v.run_check(ctx, "denied_read", v.check_denied_read)
    assert not r.passed and "no concrete folder" in r.detail


def test_unknown_check_name_is_refused(tmp_path: Path) -> None:
    proc = _cli("--check", "no_such_check", "--settings", "/dev/null", record=tmp_path)
    assert proc.returncode == 1
    assert "unknown check" in proc.stderr


def test_service_address_from_the_rendered_unit() -> None:
    unit = ("[Service]\nExecStart=/opt/agent-sandbox/venv/bin/python3 -m "
            "agent_sandbox.runtime.proxy --settings /etc/x.json --http unix:/run/p.sock "
            "--http 127.0.0.1:3128 --socks "
            "127.0.0.1:1080\n")
    assert v.service_http_address(unit) == ("127.0.0.1", 3128)
    assert v.service_http_address("[Service]\nExecStart=/bin/true\n") is None
    assert v.service_audit_dir(unit) is None
    assert v.service_audit_dir(unit.replace(" --socks", " --audit-dir /var/log/p --socks")) \
        == "/var/log/p"
