"""Shared helpers for the audit tests: building logs and tampering with them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agent_sandbox.audit import AuditLog
from agent_sandbox.audit.canonical import GENESIS, canonical

REPO = Path(__file__).resolve().parents[2]


def make_log(directory: Path, n: int, *, checkpoint_every: int | None = None) -> AuditLog:
    log = AuditLog(
        directory,
        sync="none",
        checkpoint_every=checkpoint_every,
        checkpoint_interval=None,
    )
    for i in range(1, n + 1):
        log.append("request", request_id=f"req-{i}", tool="Bash", command=f"echo {i}")
    log.close()
    return log


def read_lines(directory: Path) -> list[bytes]:
    return (directory / "audit.jsonl").read_bytes().splitlines(keepends=True)


def write_lines(directory: Path, lines: list[bytes]) -> None:
    (directory / "audit.jsonl").write_bytes(b"".join(lines))


def rechain(lines: list[bytes]) -> list[bytes]:
    """Recompute every link as a forger with full write access would."""
    prev = GENESIS
    out = []
    for seq, line in enumerate(lines, start=1):
        rec = json.loads(line)
        rec.pop("hash")
        rec["seq"] = seq
        rec["prev"] = prev.hex()
        body = canonical(rec)
        prev = hashlib.sha256(prev + body).digest()
        out.append(body[:-1] + b',"hash":"' + prev.hex().encode() + b'"}\n')
    return out


@pytest.fixture(autouse=True)
def user_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own user state folder (signing keys, pins), never the real one."""
    folder = tmp_path / "user-state"
    monkeypatch.setenv("AGENT_SANDBOX_STATE_DIR", str(folder))
    return folder


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    return tmp_path / "repo" / ".sandbox" / "audit"
