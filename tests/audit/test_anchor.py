"""The audit's trust anchor does not sit beside the log: the signing key and
the pinned verifier key live in the user's state folder, outside the
repository; ``audit verify`` checks against the pin and says so, and says
UNANCHORED when there is none. Judged with a forger who rewrites the whole
log folder with a key of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_sandbox.audit import AuditLog
from agent_sandbox.audit.repo import append_audit, pin_verifier
from agent_sandbox.state_paths import repo_key_path, repo_pin_path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(folder))
    return folder


def verify(repo: Path, state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["AGENT_SANDBOX_STATE_DIR"] = str(state)
    return subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "audit", "verify",
                           str(repo), *extra], capture_output=True, text=True, env=env,
                          timeout=60)


def genuine(repo: Path) -> None:
    (repo / ".sandbox" / "audit").mkdir(parents=True)
    pin_verifier(str(repo))
    for i in range(5):
        assert append_audit(str(repo), "decision", {"verdict": "allow", "summary": f"ls {i}"})
    log = AuditLog(repo / ".sandbox" / "audit", key_path=repo_key_path(str(repo)),
                   checkpoint_interval=None)
    assert log.checkpoint() is not None
    log.close()


def forge(repo: Path) -> None:
    """Replace the log folder whole: new records, signed with the forger's key."""
    shutil.rmtree(repo / ".sandbox" / "audit")
    log = AuditLog(repo / ".sandbox" / "audit", key_path=repo / ".sandbox" / "forged.ed25519",
                   checkpoint_interval=None)
    log.append("decision", verdict="allow", summary="nothing to see")
    log.checkpoint()
    log.close()


def test_keys_live_outside_the_repository(tmp_path: Path, state: Path) -> None:
    repo = tmp_path / "repo"
    genuine(repo)
    assert Path(repo_key_path(str(repo))).is_file()
    assert str(state) in repo_key_path(str(repo)) and str(state) in repo_pin_path(str(repo))
    for p in repo.rglob("*"):
        if p.is_file():
            assert b"PRIVATE KEY" not in p.read_bytes(), p


def test_verify_is_anchored_to_the_pin(tmp_path: Path, state: Path) -> None:
    repo = tmp_path / "repo"
    genuine(repo)
    ok = verify(repo, state)
    assert ok.returncode == 0 and "anchored to" in ok.stdout, ok.stdout + ok.stderr
    forge(repo)
    os.unlink(repo_key_path(str(repo)))       # the forger cannot reach it; the pin stays
    bad = verify(repo, state)
    assert bad.returncode == 1 and "FAIL" in bad.stdout, bad.stdout + bad.stderr


def test_without_a_pin_the_result_says_unanchored(tmp_path: Path, state: Path) -> None:
    repo = tmp_path / "repo"
    genuine(repo)
    forge(repo)
    os.unlink(repo_key_path(str(repo)))
    os.unlink(repo_pin_path(str(repo)))
    res = verify(repo, state)                  # the forgery passes: and says it is unanchored
    assert res.returncode == 0 and "UNANCHORED" in res.stdout and "UNANCHORED" in res.stderr


def test_a_pin_is_never_silently_replaced(tmp_path: Path, state: Path) -> None:
    from agent_sandbox.audit.storage import AuditError

    repo = tmp_path / "repo"
    genuine(repo)
    os.unlink(repo_key_path(str(repo)))        # a new key appears ...
    with pytest.raises(AuditError, match="pins another verifier key"):
        pin_verifier(str(repo))                # ... and the old pin stands


def _rewrite_and_drop_checkpoints(repo: Path) -> None:
    """An edit, the chain recomputed, every checkpoint removed: what a forger who can
    write the log folder (but not the state folder with the key and the pin) does."""
    from .conftest import read_lines, rechain, write_lines

    logdir = repo / ".sandbox" / "audit"
    lines = read_lines(logdir)
    lines[1] = lines[1].replace(b"ls 1", b"ls X")
    write_lines(logdir, rechain(lines))
    shutil.rmtree(logdir / "checkpoints")


def test_removed_checkpoints_fail_a_pinned_log(tmp_path: Path, state: Path) -> None:
    repo = tmp_path / "repo"
    genuine(repo)
    _rewrite_and_drop_checkpoints(repo)
    bad = verify(repo, state)
    assert bad.returncode == 1 and ("no signed checkpoint" in bad.stdout
                                    or "does not match" in bad.stdout), bad.stdout + bad.stderr
    # the same with the key pinned by hand (--key)
    pin = Path(repo_pin_path(str(repo))).read_text().strip()
    keyfile = tmp_path / "pinned.pub"
    keyfile.write_text(pin + "\n")
    bad = verify(repo, state, "--key", str(keyfile))
    assert bad.returncode == 1, bad.stdout + bad.stderr


def test_a_young_pinned_log_is_anchored_from_the_start(tmp_path: Path, state: Path) -> None:
    """Pinning signs a checkpoint of the log as it is (empty too): a pinned log with
    a handful of records and no later checkpoint verifies, and loses that
    protection to nobody who removes its checkpoints."""
    repo = tmp_path / "repo"
    (repo / ".sandbox" / "audit").mkdir(parents=True)
    pin_verifier(str(repo))
    for i in range(3):
        assert append_audit(str(repo), "decision", {"verdict": "allow", "summary": f"ls {i}"})
    ok = verify(repo, state)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    _rewrite_and_drop_checkpoints(repo)
    bad = verify(repo, state)
    assert bad.returncode == 1, bad.stdout + bad.stderr


def test_a_checkpoint_left_far_behind_fails(tmp_path: Path, state: Path) -> None:
    """The newest checkpoint must cover the log up to the writers' period: one that
    leaves more uncovered means the later ones were removed (and what they covered
    may have been rewritten)."""
    from agent_sandbox.audit.verifier import DEFAULT_EVERY, SLACK

    repo = tmp_path / "repo"
    genuine(repo)  # 5 records, a checkpoint at 5
    log = AuditLog(repo / ".sandbox" / "audit", sync="none", checkpoint_every=None,
                   checkpoint_interval=None)  # a writer that never signs
    log.append_many([("tool_result", {"i": i}) for i in range(DEFAULT_EVERY + SLACK)])
    log.close()
    ok = verify(repo, state)
    assert ok.returncode == 0, ok.stdout  # within the period and its slack: a warning only
    log = AuditLog(repo / ".sandbox" / "audit", sync="none", checkpoint_every=None,
                   checkpoint_interval=None)
    log.append("tool_result", i=-1)
    log.close()
    bad = verify(repo, state)
    assert bad.returncode == 1 and "checkpoints were removed" in bad.stdout, bad.stdout


def test_a_repository_connected_again_is_anchored_again(tmp_path: Path, state: Path) -> None:
    """Uninstall removes a log without records (and its checkpoint); the pin stays in
    the state folder. Connecting again signs a checkpoint of the new log, so it is
    anchored from its start like the first."""
    from agent_sandbox.audit.log import CHECKPOINT_DIR

    repo = tmp_path / "repo"
    (repo / ".sandbox" / "audit").mkdir(parents=True)
    pin_verifier(str(repo))
    shutil.rmtree(repo / ".sandbox")
    (repo / ".sandbox" / "audit").mkdir(parents=True)
    pin_verifier(str(repo))                     # the same pin: kept, and a checkpoint now
    assert list((repo / ".sandbox" / "audit" / CHECKPOINT_DIR).glob("*.note"))
    assert append_audit(str(repo), "decision", {"verdict": "allow", "summary": "ls"})
    ok = verify(repo, state)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_checkpoints_removed_and_the_chain_rewritten_below_them_fail(
        tmp_path: Path, state: Path) -> None:
    """The forger keeps the key and the old checkpoint, deletes the newer ones and
    rewrites the records after the old one (an approved run's taken out), chained
    anew: the log alone looks whole, with the pin too. The newest checkpoint's size
    and head, noted in the account's state folder as it was signed, say otherwise."""
    from .conftest import read_lines, rechain, write_lines

    repo = tmp_path / "repo"
    genuine(repo)  # 5 records, a checkpoint of them
    audit = repo / ".sandbox" / "audit"
    assert append_audit(str(repo), "sandbox_started", {"request_id": "r1", "command": "x"})
    log = AuditLog(audit, key_path=repo_key_path(str(repo)), checkpoint_interval=None)
    assert log.checkpoint() is not None  # a checkpoint of 6
    log.close()
    assert verify(repo, state).returncode == 0  # the control: untouched, it verifies
    notes = sorted((audit / "checkpoints").glob("*.note"))
    newest, older = notes[-1], notes[-2]
    newest.unlink()
    (audit / "checkpoints" / "latest").write_bytes(older.read_bytes())
    lines = read_lines(audit)
    assert b'"x"' in lines[-1]
    lines[-1] = lines[-1].replace(b'"x"', b'"harmless"')  # the approved run's command
    write_lines(audit, rechain(lines))
    r = verify(repo, state)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "does not match" in r.stdout, r.stdout  # the chain at the noted checkpoint
