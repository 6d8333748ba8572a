"""Tamper tests: each class of change to the log is detected and named."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from agent_sandbox.audit import AuditLog, verify
from agent_sandbox.audit.canonical import GENESIS, canonical

from .conftest import make_log, read_lines, rechain, write_lines


def test_records_form_a_chain_over_the_previous_hash(logdir: Path) -> None:
    make_log(logdir, 5)
    prev = GENESIS
    for seq, line in enumerate(read_lines(logdir), start=1):
        rec = json.loads(line)
        stored = rec.pop("hash")
        assert rec["seq"] == seq
        assert rec["prev"] == prev.hex()
        assert {"ts", "event", "request_id"} <= rec.keys()
        assert rec["ts"].endswith("Z") and "T" in rec["ts"]
        # h_i = SHA-256(h_{i-1} || canonical(record_i)), canonical = sorted, compact, UTF-8
        body = json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        assert body == canonical(rec)
        prev = hashlib.sha256(prev + body).digest()
        assert stored == prev.hex()
    result = verify(logdir)
    assert result.ok and result.records == 5 and result.head == prev.hex()


def test_append_returns_the_written_record(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    rec = log.append("decision", request_id="r-1", verdict="escalate", unicode="žluťoučký")
    line = read_lines(logdir)[-1]
    assert json.loads(line) == rec
    assert "žluťoučký".encode() in line  # UTF-8, not \u escapes


def test_reserved_fields_and_bad_event_names_are_refused(logdir: Path) -> None:
    import pytest

    from agent_sandbox.audit import AuditError

    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    with pytest.raises(AuditError, match="reserved"):
        log.append("request", seq=7)
    with pytest.raises(AuditError, match="event name"):
        log.append("Bad Event")
    with pytest.raises(AuditError, match="JSON"):
        log.append("request", value=float("nan"))
    assert not (logdir / "audit.jsonl").read_bytes()  # nothing written by refused appends


def test_edited_record_is_named(logdir: Path) -> None:
    make_log(logdir, 8)
    lines = read_lines(logdir)
    lines[4] = lines[4].replace(b"echo 5", b"echo X")
    write_lines(logdir, lines)
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.line, r.problem.seq) == ("edited", 5, 5)


def test_edited_record_with_its_own_hash_recomputed_is_named(logdir: Path) -> None:
    """Re-hashing only the edited record breaks the next link: the verifier names the edit."""
    make_log(logdir, 8)
    lines = read_lines(logdir)
    rec = json.loads(lines[4])
    rec.pop("hash")
    rec["command"] = "rm -rf /"
    body = canonical(rec)
    digest = hashlib.sha256(bytes.fromhex(rec["prev"]) + body).hexdigest()
    lines[4] = body[:-1] + b',"hash":"' + digest.encode() + b'"}\n'
    write_lines(logdir, lines)
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.line, r.problem.seq) == ("relinked", 5, 5)


def test_hash_over_record_alone_would_not_be_a_chain(logdir: Path) -> None:
    """The flaw named in the issue: with h = H(record) a rewrite needs only the next link patched.
    Here the same rewrite plus patching the next record's prev still fails."""
    make_log(logdir, 6)
    lines = read_lines(logdir)
    rec = json.loads(lines[2])
    rec.pop("hash")
    rec["command"] = "curl evil"
    body = canonical(rec)
    new_hash = hashlib.sha256(bytes.fromhex(rec["prev"]) + body).hexdigest()
    lines[2] = body[:-1] + b',"hash":"' + new_hash.encode() + b'"}\n'
    nxt = json.loads(lines[3])
    nxt["prev"] = new_hash
    lines[3] = json.dumps(nxt, sort_keys=False, separators=(",", ":")).encode() + b"\n"
    write_lines(logdir, lines)
    r = verify(logdir)
    assert not r.ok and r.problem is not None and r.problem.line == 4


def test_reordered_records_are_named(logdir: Path) -> None:
    make_log(logdir, 8)
    lines = read_lines(logdir)
    lines[3], lines[4] = lines[4], lines[3]
    write_lines(logdir, lines)
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.line, r.problem.seq) == ("reordered", 4, 5)


def test_record_deleted_in_the_middle_is_named(logdir: Path) -> None:
    make_log(logdir, 8)
    lines = read_lines(logdir)
    del lines[4]
    write_lines(logdir, lines)
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.line, r.problem.seq) == ("deleted", 5, 6)
    assert "5..5" in r.problem.reason


def test_forged_recomputation_is_caught_by_a_checkpoint(logdir: Path) -> None:
    make_log(logdir, 12, checkpoint_every=5)  # checkpoints at 5 and 10
    lines = read_lines(logdir)
    lines[6] = lines[6].replace(b"echo 7", b"echo 0")
    write_lines(logdir, rechain(lines))
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.seq, r.problem.line) == ("forged", 10, 10)
    assert "records 6..10" in r.problem.reason


def test_forged_recomputation_without_a_checkpoint_is_undetectable_and_said_so(
    logdir: Path,
) -> None:
    make_log(logdir, 12, checkpoint_every=5)
    lines = read_lines(logdir)
    lines[11] = lines[11].replace(b"echo 12", b"echo 0")  # past the last checkpoint (10)
    write_lines(logdir, rechain(lines))
    r = verify(logdir)
    assert r.ok
    assert any("11..12 are not yet covered" in w for w in r.warnings)


def test_tail_truncation_past_a_checkpoint_is_detected(logdir: Path) -> None:
    make_log(logdir, 12, checkpoint_every=5)
    write_lines(logdir, read_lines(logdir)[:8])
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert r.problem.kind == "truncated"
    assert "records 9..10 were removed" in r.problem.reason


def test_tail_truncation_without_a_checkpoint_cannot_be_detected(logdir: Path) -> None:
    make_log(logdir, 12)  # no checkpoints
    write_lines(logdir, read_lines(logdir)[:8])
    r = verify(logdir)
    assert r.ok and r.records == 8
    assert any("cannot detect truncation" in w for w in r.warnings)


def test_deleting_the_whole_log_is_detected_by_checkpoints(logdir: Path) -> None:
    make_log(logdir, 6, checkpoint_every=5)
    (logdir / "audit.jsonl").unlink()
    r = verify(logdir)
    assert not r.ok and r.problem is not None and r.problem.kind == "truncated"


def test_a_long_log_survives_many_appends_and_reopens(logdir: Path) -> None:
    for _ in range(3):
        with AuditLog(
            logdir, sync="none", checkpoint_every=50, checkpoint_interval=None
        ) as log:
            log.append_many([("tool_result", {"i": i}) for i in range(40)])
    r = verify(logdir)
    assert r.ok and r.records == 120 and r.checkpoint_size == 80  # signed at 80 (>= 50 behind)


def test_repo_and_host_logs_follow_the_spec(tmp_path: Path) -> None:
    from agent_sandbox.audit import host_log, repo_log
    from agent_sandbox.spec.models import Audit

    cfg = Audit(path=".sandbox/trail", host_path=str(tmp_path / "host"), checkpoint_every=2,
                checkpoint_interval="1h")
    repo = repo_log(tmp_path / "repo", cfg, sync="none")
    assert repo.directory == tmp_path / "repo" / ".sandbox" / "trail"
    assert (repo.checkpoint_every, repo.checkpoint_interval) == (2, 3600)
    host = host_log(cfg, key_path=tmp_path / "keys" / "host.ed25519", sync="none")
    assert host.directory == tmp_path / "host"
    for log in (repo, host):
        log.append("session_start")  # the first record is signed at once (no checkpoint yet)
        log.append("proxy_decision", host="pypi.org", verdict="allow")
        assert verify(log.directory).checkpoint_size == 1
        log.append("proxy_decision", host="pypi.org", verdict="allow")
        assert verify(log.directory).checkpoint_size == 3  # then every 2 records


def test_a_record_inserted_in_the_middle_is_named(logdir: Path) -> None:
    make_log(logdir, 8)
    lines = read_lines(logdir)
    prev = json.loads(lines[3])["hash"]
    fake = {"event": "approval", "prev": prev, "seq": 5, "ts": "2025-01-01T00:00:00.000000Z"}
    body = canonical(fake)
    digest = hashlib.sha256(bytes.fromhex(prev) + body).hexdigest()
    lines.insert(4, body[:-1] + b',"hash":"' + digest.encode() + b'"}\n')
    write_lines(logdir, lines)
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.line) == ("inserted", 5)


def test_undecodable_text_is_logged_not_refused(logdir: Path) -> None:
    weird = b"caf\xe9 \xff".decode("utf-8", "surrogateescape")
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    rec = log.append("tool_result", output=weird)
    assert json.loads(read_lines(logdir)[0])["output"] == weird == rec["output"]
    assert verify(logdir).ok


def test_a_writer_follows_a_replaced_log_and_verify_flags_it(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=2, checkpoint_interval=None)
    for i in range(4):
        log.append("request", i=i)
    (logdir / "audit.jsonl").rename(logdir.parent / "moved.jsonl")
    import time

    time.sleep(0.3)  # the writer rechecks the path at most every 0.25 s
    rec = log.append("request", i=99)
    assert rec["seq"] == 1  # a new file: the writer never writes into the moved one
    assert len((logdir.parent / "moved.jsonl").read_bytes().splitlines()) == 4
    r = verify(logdir)
    assert not r.ok and r.problem is not None and r.problem.kind == "truncated"


def test_strict_mode_checks_form_and_fields(logdir: Path) -> None:
    make_log(logdir, 4)
    assert verify(logdir, strict=True).ok
    lines = read_lines(logdir)
    # A writer bug (not an attack): a well-chained record with a wrong seq field.
    rec = json.loads(lines[2])
    rec.pop("hash")
    rec["seq"] = 30
    body = canonical(rec)
    prev = bytes.fromhex(json.loads(lines[1])["hash"])
    digest = hashlib.sha256(prev + body).hexdigest()
    write_lines(logdir, [*lines[:2], body[:-1] + b',"hash":"' + digest.encode() + b'"}\n'])
    assert verify(logdir).ok  # every byte is chained ...
    r = verify(logdir, strict=True)  # ... but strict mode reads the fields
    assert not r.ok and r.problem is not None and (r.problem.kind, r.problem.line) == ("invalid", 3)


def test_importing_and_appending_stays_light() -> None:
    """The hook imports this on its allow path: no cryptography, pydantic or typer."""
    import subprocess
    import sys
    import tempfile

    code = (
        "import sys; from agent_sandbox.audit import AuditLog; "
        f"AuditLog({tempfile.mkdtemp()!r}, checkpoint_interval=None).append('decision'); "
        "print(sorted(m for m in ('cryptography', 'pydantic', 'typer', 'urllib.request', "
        "'typing', 'pathlib', 'datetime', 'threading', 'random') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_package_verify_stays_the_function(tmp_path: Path) -> None:
    # the checker lives in a submodule of another name: importing it must not
    # replace the package's `verify` with a module (a second call would fail)
    import importlib

    import agent_sandbox.audit as audit

    importlib.import_module("agent_sandbox.audit.verifier")
    with AuditLog(tmp_path) as log:
        log.append("decision", verdict="allow")
    assert callable(audit.verify)
    assert audit.verify(tmp_path).ok and audit.verify(tmp_path).ok
