"""The drift check, recorded (``hostcheck.drift_check``): one ``drift_check`` event in
the host's audit chain per run, which ``sandbox audit verify`` accepts, and the last
run's record in the host's state, which ``sandbox status`` shows and which is trusted
only when root alone can write it. Runs the real CLI with the audit and the host
state in a temporary folder."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_sandbox import last_verify

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the record is root's")


def sandbox(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENT_SANDBOX_AUDIT_DIR": str(home / "audit"),
           "AGENT_SANDBOX_HOST_STATE_DIR": str(home / "state")}
    return subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", *args],
                          capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture
def managed(tmp_path: Path) -> tuple[Path, Path]:
    """A managed file and the manifest that lists it (as rendered)."""
    target = tmp_path / "srt-settings.json"
    target.write_bytes(b"{}\n")
    target.chmod(0o644)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "artifacts": [
        {"target": str(target), "kind": "srt-settings", "mode": "0644",
         "sha256": hashlib.sha256(b"{}\n").hexdigest()}]}))
    return target, manifest


def events(home: Path) -> list[dict]:
    lines = (home / "audit" / "audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == "drift_check"]


def test_each_check_is_one_audit_event_and_the_last_record(tmp_path: Path,
                                                             managed: tuple[Path, Path]) -> None:
    target, manifest = managed
    clean = sandbox("verify", "--drift", "--files-only", "--manifest", str(manifest),
                    home=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    target.write_bytes(b'{"edited": "by hand"}\n')
    target.chmod(0o600)
    drifted = sandbox("verify", "--drift", "--files-only", "--manifest", str(manifest),
                      home=tmp_path)
    assert drifted.returncode == 1
    assert f"DRIFT modified {target}" in drifted.stdout
    first, second = events(tmp_path)
    assert first["clean"] is True and first["drifted"] == []
    assert second["clean"] is False
    assert [(d["target"], d["problem"]) for d in second["drifted"]] == [
        (str(target), "modified"), (str(target), "mode")]
    assert second["manifest"] == str(manifest) and second["failed_checks"] == []
    chain = sandbox("audit", "verify", str(tmp_path / "audit"), home=tmp_path)
    assert chain.returncode == 0 and chain.stdout.startswith("OK: "), chain.stdout + chain.stderr
    record = tmp_path / "state" / "verify" / "drift.json"
    st = record.stat()
    assert st.st_uid == 0 and oct(st.st_mode & 0o777) == "0o644"
    os.environ["AGENT_SANDBOX_HOST_STATE_DIR"] = str(tmp_path / "state")
    try:
        doc = last_verify.read_drift()
    finally:
        del os.environ["AGENT_SANDBOX_HOST_STATE_DIR"]
    assert doc is not None and doc["clean"] is False and doc["at"] > 0
    assert {d["problem"] for d in doc["drifted"]} == {"modified", "mode"}
    assert set(doc) == set(last_verify.DRIFT_KEYS)


def test_sandbox_status_says_plainly_what_drifted(tmp_path: Path,
                                                  managed: tuple[Path, Path]) -> None:
    target, manifest = managed
    never = sandbox("status", str(tmp_path), home=tmp_path)
    assert "drift check: has not run on this host" in never.stdout, never.stdout + never.stderr
    sandbox("verify", "--drift", "--files-only", "--manifest", str(manifest), home=tmp_path)
    ok = sandbox("status", str(tmp_path), home=tmp_path)
    assert "drift check: clean at " in ok.stdout, ok.stdout
    target.write_bytes(b"edited\n")
    sandbox("verify", "--drift", "--files-only", "--manifest", str(manifest), home=tmp_path)
    found = sandbox("status", str(tmp_path), home=tmp_path)
    assert "drift check: DRIFT FOUND at " in found.stdout, found.stdout
    assert f"DRIFT modified {target}" in found.stdout
    doc = json.loads(sandbox("status", "--json", str(tmp_path), home=tmp_path).stdout)
    assert doc["drift_check"]["clean"] is False
    assert doc["drift_check"]["drifted"][0]["target"] == str(target)


def test_a_missing_manifest_is_recorded_as_a_problem_not_as_clean(tmp_path: Path) -> None:
    proc = sandbox("verify", "--drift", "--files-only", "--manifest",
                   str(tmp_path / "none.json"), home=tmp_path)
    assert proc.returncode == 1 and "no render manifest" in proc.stderr
    (event,) = events(tmp_path)
    assert event["clean"] is False and "no render manifest" in event["error"]
    status = sandbox("status", str(tmp_path), home=tmp_path).stdout
    assert "drift check: COULD NOT CHECK at " in status and "no render manifest" in status, status


def test_the_host_checks_run_unless_files_only(tmp_path: Path,
                                               managed: tuple[Path, Path]) -> None:
    _, manifest = managed
    # settings that do not exist: the host checks cannot run, and that is a finding
    proc = sandbox("verify", "--drift", "--manifest", str(manifest), "--settings",
                   str(tmp_path / "no-settings.json"), home=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (event,) = events(tmp_path)
    assert event["clean"] is False and event["drifted"] == []
    assert event["failed_checks"], event
    assert "FAIL" in proc.stdout


def test_a_check_that_cannot_be_recorded_fails(tmp_path: Path,
                                               managed: tuple[Path, Path]) -> None:
    _, manifest = managed
    (tmp_path / "audit").write_text("not a folder")
    proc = sandbox("verify", "--drift", "--files-only", "--manifest", str(manifest),
                   home=tmp_path)
    assert proc.returncode == 1
    assert "cannot record the drift check" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("spoil", ["others-write", "not-root", "link", "garbage"])
def test_a_record_root_alone_could_not_have_written_is_not_trusted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: str) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_HOST_STATE_DIR", str(tmp_path))
    clean = {"at": 1.0, "clean": True, "drifted": [], "failed_checks": [], "checks": 6,
             "error": None}
    last_verify.record_drift(clean)
    path = Path(last_verify.drift_path())
    assert last_verify.read_drift() == clean
    if spoil == "others-write":
        path.chmod(0o666)
    elif spoil == "not-root":
        os.chown(path, 65534, 65534)
    elif spoil == "link":
        other = tmp_path / "elsewhere.json"
        path.rename(other)
        path.symlink_to(other)
    else:
        path.write_text('{"clean": true}')
    doc = last_verify.read_drift()
    assert doc is not None and "error" in doc and doc.get("clean") is not True
    assert any("UNKNOWN" in line for line in last_verify.describe_drift(doc))
