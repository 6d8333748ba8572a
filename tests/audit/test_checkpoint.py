"""Signed checkpoints: C2SP note format, keys kept apart, remote sink, tampered notes."""

from __future__ import annotations

import base64
import hashlib
import http.server
import stat
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agent_sandbox.audit import AuditLog, verify
from agent_sandbox.audit.checkpoint import (
    CheckpointError,
    load_or_create_signer,
    open_note,
    parse_verifier,
)

from .conftest import make_log, read_lines


def test_checkpoint_is_a_signed_note_in_tlog_checkpoint_form(logdir: Path) -> None:
    make_log(logdir, 10, checkpoint_every=4)  # signed at 4 and 8
    note = (logdir / "checkpoints" / "latest").read_bytes()
    text, sigs = note.split(b"\n\n")
    origin, size, head = text.decode().split("\n")
    assert size == "8"
    last8 = read_lines(logdir)[7]
    assert base64.b64decode(head).hex().encode() in last8  # the chain head after record 8
    # signature line: em dash, space, key name, space, base64(key id || Ed25519 signature)
    assert sigs.startswith("\u2014 ".encode()) and sigs.endswith(b"\n")
    name, b64 = sigs[:-1].decode()[2:].split(" ")
    assert name == origin
    blob = base64.b64decode(b64)
    verifier = parse_verifier((logdir / "checkpoints" / "verifier.key").read_text())
    pub = verifier.public_key
    assert blob[:4] == hashlib.sha256(name.encode() + b"\n\x01" + pub).digest()[:4]
    Ed25519PublicKey.from_public_bytes(pub).verify(blob[4:], text + b"\n")
    assert sorted(p.name for p in (logdir / "checkpoints").glob("*.note")) == [
        "00000000000000000004.note", "00000000000000000008.note"]


def test_private_key_is_kept_apart_and_private(logdir: Path, user_state: Path) -> None:
    from agent_sandbox.state_paths import repo_key_path

    make_log(logdir, 3, checkpoint_every=2)
    repo = logdir.parent.parent
    key = Path(repo_key_path(str(repo)))               # the user's state folder
    assert key.is_file() and user_state in key.parents
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not any(p.suffix == ".ed25519" for p in repo.rglob("*"))      # nothing in the repo
    assert b"PRIVATE" not in b"".join(p.read_bytes() for p in repo.rglob("*") if p.is_file())
    other = logdir.parent.parent.parent / "plain-log"   # a log outside any repository
    make_log(other, 3, checkpoint_every=2)
    assert (other.parent / "audit-keys" / "plain-log.ed25519").is_file()


def test_a_configured_key_path_is_used(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "host.ed25519"
    log = AuditLog(tmp_path / "log", key_path=key, checkpoint_every=1, sync="none")
    log.append("session_start")
    assert key.is_file()
    assert verify(tmp_path / "log", key_path=key).checkpoints == 1


def test_checkpoints_every_t_seconds(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=0.05)
    log.append("request")
    import time

    time.sleep(0.1)
    log.append("request")
    assert verify(logdir).checkpoint_size == 2


def test_a_tampered_checkpoint_fails_verification(logdir: Path) -> None:
    make_log(logdir, 6, checkpoint_every=5)
    p = logdir / "checkpoints" / "00000000000000000005.note"
    p.write_bytes(p.read_bytes().replace(b"\n5\n", b"\n6\n"))
    r = verify(logdir)
    assert not r.ok and r.problem is not None and "signature does not verify" in r.problem.reason


def test_checkpoints_forged_with_another_key_are_rejected_by_the_pinned_key(
    logdir: Path, tmp_path: Path
) -> None:
    """An attacker who rewrites the log and re-signs with a key of their own is caught,
    because verification uses the key kept apart, not the one beside the checkpoints."""
    make_log(logdir, 6, checkpoint_every=5)
    pinned = (logdir / "checkpoints" / "verifier.key").read_text()
    evil = load_or_create_signer(tmp_path / "evil.key", origin=pinned.split("+", 1)[0])
    for note in (logdir / "checkpoints").glob("*.note"):
        note.write_bytes(evil.sign_checkpoint(1, b"\x11" * 32))
    (logdir / "checkpoints" / "verifier.key").write_text(str(evil.verifier) + "\n")
    r = verify(logdir, verifier=pinned)
    assert not r.ok and r.problem is not None
    assert "not signed by the trusted key" in r.problem.reason


def test_open_note_rejects_unknown_keys_and_garbage(tmp_path: Path) -> None:
    a = load_or_create_signer(tmp_path / "a.key", origin="example.test/a")
    b = load_or_create_signer(tmp_path / "b.key", origin="example.test/a")
    note = a.sign_checkpoint(3, b"\x01" * 32)
    assert open_note(note, a.verifier).size == 3
    with pytest.raises(CheckpointError, match="not signed by the trusted key"):
        open_note(note, b.verifier)  # same name, different key: ignored, so unsigned
    with pytest.raises(CheckpointError):
        open_note(b"garbage", a.verifier)
    with pytest.raises(CheckpointError):
        parse_verifier("example.test/a+00000000+AAAA")


def test_checkpoints_go_to_a_remote_sink_over_http(logdir: Path) -> None:
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/checkpoints"
        log = AuditLog(logdir, sync="none", checkpoint_every=3, checkpoint_interval=None,
                       sink=url)
        for i in range(7):
            log.append("request", i=i)
    finally:
        server.shutdown()
    assert len(received) == 2 and log.sink_error is None
    assert received[-1] == (logdir / "checkpoints" / "latest").read_bytes()
    # The sink's copy still proves truncation after local checkpoints are deleted.
    for p in (logdir / "checkpoints").glob("*.note"):
        p.unlink()
    (logdir / "audit.jsonl").write_bytes(b"".join(read_lines(logdir)[:4]))
    r = verify(logdir)  # locally the cut is invisible, but the missing checkpoints are not
    assert not r.ok and r.problem is not None and "no checkpoints" in r.problem.reason
    r = verify(logdir, extra_checkpoints=[("sink", received[-1])])
    assert not r.ok and r.problem is not None and r.problem.kind == "truncated"


def test_an_unreachable_sink_never_loses_records(logdir: Path) -> None:
    calls: list[bytes] = []

    def sink(note: bytes) -> None:
        calls.append(note)
        raise OSError("sink down")

    log = AuditLog(logdir, sync="none", checkpoint_every=2, checkpoint_interval=None, sink=sink)
    for i in range(4):
        log.append("request", i=i)
    assert len(calls) == 2 and log.sink_error and "sink down" in log.sink_error
    assert verify(logdir).ok and verify(logdir).checkpoint_size == 4


def test_an_unusable_key_never_fails_an_append(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    log = AuditLog(tmp_path / "log", key_path=blocker / "k.ed25519", sync="none",
                   checkpoint_every=1)
    rec = log.append("request", i=1)
    log.append("request", i=2)
    assert rec["seq"] == 1 and log.checkpoint_error and "cannot sign" in log.checkpoint_error
    r = verify(tmp_path / "log")
    assert r.ok and r.records == 2 and any("no signed checkpoint" in w for w in r.warnings)


def test_time_based_checkpoints_are_shared_by_short_lived_writers(logdir: Path) -> None:
    """Each hook call is a new process with a new AuditLog: the interval still holds."""
    import os
    import time

    for i in range(3):
        AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=3600).append(
            "request", i=i)
    assert verify(logdir).checkpoint_size == 1  # the first record ever is signed at once
    latest = logdir / "checkpoints" / "latest"
    old = time.time() - 7200
    os.utime(latest, (old, old))  # as if the last checkpoint were two hours old
    AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=3600).append("x")
    assert verify(logdir).checkpoint_size == 4


def test_a_custom_origin_verifies_with_the_kept_key(tmp_path: Path) -> None:
    key = tmp_path / "keys" / "proxy.ed25519"
    log = AuditLog(tmp_path / "log", key_path=key, origin="example.test/proxy", sync="none",
                   checkpoint_interval=None,
                   checkpoint_every=2)
    for i in range(3):
        log.append("proxy.decision", i=i)
    note = (tmp_path / "log" / "checkpoints" / "latest").read_bytes()
    assert note.startswith(b"example.test/proxy\n2\n")
    (tmp_path / "log" / "checkpoints" / "verifier.key").unlink()  # only the kept key remains
    r = verify(tmp_path / "log", key_path=key)
    assert r.ok and r.checkpoint_size == 2 and r.warnings[-1].startswith("records 3..3")
    assert (key.parent / ".gitignore").read_text() == "*\n"
    r = verify(tmp_path / "log", verifier=str(key))  # --key may name the signing key file
    assert r.ok and r.checkpoints == 1


def test_removing_all_checkpoints_is_itself_detected(logdir: Path) -> None:
    import shutil

    make_log(logdir, 12, checkpoint_every=5)
    shutil.rmtree(logdir / "checkpoints")
    (logdir / "audit.jsonl").write_bytes(b"".join(read_lines(logdir)[:3]))
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert "holds no checkpoints: they were removed" in r.problem.reason


def test_a_checkpoint_timer_signs_an_idle_log(logdir: Path) -> None:
    import time

    log = AuditLog(logdir, sync="batch", checkpoint_every=None, checkpoint_interval=3600)
    for i in range(3):
        log.append("proxy_decision", i=i)  # the first is signed at once, 2..3 wait
    assert verify(logdir).checkpoint_size == 1
    log.checkpoint_interval = 0.3  # as if an hour had passed: now due, with no append
    log.start_checkpoint_timer()
    deadline = time.monotonic() + 10
    while verify(logdir).checkpoint_size != 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert verify(logdir).checkpoint_size == 3
    log.close()
