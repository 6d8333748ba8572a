"""Verification of an audit log: chain, torn and sealed writes, signed checkpoints.

The chain walk hashes the stored bytes of each line without parsing JSON (the
hashed body is sliced out of the line's fixed tail), so a million records verify
in about a second; a line is parsed only to explain a failure.

What is detected, and how:
- an edited record: its hash no longer matches (or the next record's link breaks);
- records deleted in the middle or reordered: the chain link breaks, and the
  ``seq`` numbers tell which;
- a forged recomputation of the chain: the head after record N differs from a
  signed checkpoint of size N;
- truncation of the tail: a signed checkpoint covers more records than remain.
  Without a checkpoint past the cut, a local chain cannot detect truncation;
  the result says so plainly.

This module only reads; it never repairs or rewrites anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from agent_sandbox.audit.bad_lines import Problem, forged, try_sealed
from agent_sandbox.audit.canonical import GENESIS, HASH_SUFFIX_LEN
from agent_sandbox.audit.log import CHECKPOINT_DIR, LOG_NAME
from agent_sandbox.audit.storage import AuditError

_HASH_OPEN = b',"hash":"'


@dataclass
class VerifyResult:
    """Outcome of :func:`verify`. ``ok`` is False exactly when ``problem`` is set."""

    ok: bool
    records: int = 0
    lines: int = 0
    head: str = GENESIS.hex()
    checkpoints: int = 0
    checkpoint_size: int = 0
    sealed: int = 0
    problem: Problem | None = None
    warnings: list[str] = field(default_factory=list)
    verifier: str | None = None
    # True only when the checkpoints were checked against a key the caller
    # pinned (passed in): a key found beside the log proves nothing against
    # whoever can rewrite the log and its folder.
    anchored: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "records": self.records,
            "lines": self.lines,
            "head": self.head,
            "checkpoints": self.checkpoints,
            "checkpoint_size": self.checkpoint_size,
            "sealed": self.sealed,
            "problem": None
            if self.problem is None
            else {
                "kind": self.problem.kind,
                "line": self.problem.line,
                "seq": self.problem.seq,
                "reason": self.problem.reason,
            },
            "warnings": list(self.warnings),
            "verifier": self.verifier,
            "anchored": self.anchored,
        }


def _load_verifier(
    directory: Path, verifier: Any, key_path: Path | None, warnings: list[str], kept: list[Path]
) -> Any:
    from agent_sandbox.audit import checkpoint as ck

    if verifier is not None:
        if isinstance(verifier, ck.Verifier):
            return verifier
        text = str(verifier)
        p = Path(text)
        if "+" not in text or p.is_file():
            try:
                text = p.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise AuditError(f"cannot read verifier key {p}: {exc}") from exc
            if "PRIVATE KEY" in text:  # the signing key itself: use its public half
                try:
                    return _named(directory, ck.load_or_create_signer(p).public_key)
                except ck.CheckpointError as exc:
                    raise AuditError(str(exc)) from exc
        try:
            return ck.parse_verifier(text)
        except ck.CheckpointError as exc:
            raise AuditError(f"bad verifier key: {exc}") from exc
    candidates = [key_path] if key_path else default_key_paths(directory)
    for kp in candidates:
        if kp is not None and kp.is_file():
            try:
                ver = _named(directory, ck.load_or_create_signer(kp).public_key)
                kept.append(kp)
                return ver
            except (ck.CheckpointError, OSError) as exc:
                warnings.append(f"cannot read the signing key {kp} ({exc}); trying the next")
    pub = directory / CHECKPOINT_DIR / ck.VERIFIER_FILE
    if pub.is_file():
        warnings.append(
            "checkpoint key taken from beside the checkpoints (not pinned): pass --key "
            "with the key kept elsewhere to rule out replaced checkpoints"
        )
        try:
            return ck.parse_verifier(pub.read_text())
        except ck.CheckpointError as exc:
            raise AuditError(f"published verifier key {pub} is malformed: {exc}") from exc
    return None


def _named(directory: Path, public_key: bytes) -> Any:
    """The verifier for ``public_key`` under the key name the log signs with.

    Trust comes from the public key; the name (the log's origin) is read from the
    published verifier or the newest checkpoint, else the default origin.
    """
    from agent_sandbox.audit import checkpoint as ck

    name = ck.default_origin(public_key)
    try:
        published = ck.parse_verifier((directory / CHECKPOINT_DIR / ck.VERIFIER_FILE).read_text())
        if published.public_key == public_key:
            name = published.name
    except (OSError, ck.CheckpointError):
        try:
            latest = (directory / CHECKPOINT_DIR / ck.LATEST_FILE).read_bytes()
            name = latest.split(b"\n", 1)[0].decode()
        except (OSError, UnicodeDecodeError):
            pass
    return ck.Verifier(name, ck.key_id(name, public_key), public_key)


def default_key_paths(directory: Path) -> list[Path]:
    """Where the signing key of the log in ``directory`` is kept by default."""
    from agent_sandbox.contract import HOST_AUDIT_DIR as HOST_LOG_DIR
    from agent_sandbox.contract import HOST_AUDIT_KEY as HOST_KEY
    from agent_sandbox.repo_layout import repo_of_log

    paths = [directory.parent / "audit-keys" / f"{directory.name}.ed25519"]
    repo = repo_of_log(str(directory))
    if repo is not None:  # where a repository's key lives now (state_paths)
        from agent_sandbox.state_paths import repo_key_path

        paths.insert(0, Path(repo_key_path(repo)))
    if directory.resolve() == Path(HOST_LOG_DIR):
        paths.insert(0, Path(HOST_KEY))
    return paths


def _checkpoints(
    directory: Path,
    verifier: Any,
    extra: list[tuple[str, bytes]],
    result: VerifyResult,
) -> dict[int, bytes] | Problem:
    from agent_sandbox.audit import checkpoint as ck

    notes = ck.stored_notes(directory / CHECKPOINT_DIR) + list(extra)
    if not notes:
        return {}
    if verifier is None:
        return Problem(
            "invalid", 0, None, "checkpoints exist but no verifier key was found or given"
        )
    heads: dict[int, bytes] = {}
    for source, note in notes:
        try:
            cp = ck.open_note(note, verifier, source)
        except ck.CheckpointError as exc:
            return Problem("invalid", 0, None, f"checkpoint {exc}")
        if cp.origin != verifier.name:
            return Problem("invalid", 0, None, f"checkpoint {source} is for log {cp.origin!r}")
        if cp.size in heads and heads[cp.size] != cp.head:
            return Problem(
                "forged", 0, cp.size, f"two signed checkpoints disagree about record {cp.size}"
            )
        heads[cp.size] = cp.head
    result.checkpoints = len(heads)
    return heads


DEFAULT_EVERY = 1000  # ``AuditLog``'s default checkpoint period, in records
SLACK = 64  # records concurrent writers may append before one of them signs


def verify(
    directory: str | os.PathLike[str],
    *,
    verifier: Any = None,
    key_path: str | os.PathLike[str] | None = None,
    extra_checkpoints: list[tuple[str, bytes]] | None = None,
    strict: bool = False,
    every: int | None = DEFAULT_EVERY,
) -> VerifyResult:
    """Verify the audit log in ``directory``.

    ``strict`` also parses every record and checks that it is in canonical form
    and that its ``seq`` and ``prev`` fields agree with its place in the chain
    (slower; the chain check alone already covers every stored byte).

    ``verifier``: a pinned note verifier key (string, file path or Verifier);
    otherwise the signing key's public half, else the key published beside the
    checkpoints (with a warning). ``extra_checkpoints``: (source, note) pairs,
    e.g. copies kept by a remote sink. ``every``: the writers' checkpoint period in
    records. A log verified against a pinned key that has no checkpoint at all
    (pinning signs one), or whose newest checkpoint leaves more than ``every``
    records uncovered (pinned or not), fails: its checkpoints were removed and
    its tail may have been rewritten with a recomputed chain.
    """
    directory = Path(directory)
    path = directory / LOG_NAME
    result = VerifyResult(ok=True)
    if not directory.is_dir():
        raise AuditError(f"{directory} is not a directory")
    heads = _anchor(result, directory, verifier, key_path, extra_checkpoints)
    if isinstance(heads, Problem):
        return _fail(result, heads)
    max_ck = max(heads, default=0)
    from agent_sandbox.audit import anchors

    # the newest checkpoint its writers signed, noted outside the log: the chain must
    # reach it with that head, whatever checkpoints the log folder still holds
    noted = anchors.read(str(directory))
    if noted is not None and heads.get(noted[0], bytes.fromhex(noted[1])).hex() != noted[1]:
        return _fail(result, Problem("invalid", 0, noted[0], (
            f"the checkpoint of {noted[0]} records noted outside the log signs another "
            "head than the one the log holds")))
    if noted is not None and noted[0] not in heads and noted[0] and (heads or not result.anchored):
        heads[noted[0]] = bytes.fromhex(noted[1])
        max_ck = max(max_ck, noted[0])
    from agent_sandbox.audit.segments import segment_files

    if not path.exists() and not segment_files(str(directory)):
        if max_ck:
            return _fail(
                result,
                Problem("truncated", 0, None, f"log file is missing; checkpoints cover {max_ck}"),
            )
        raise AuditError(f"no audit log in {directory} ({LOG_NAME} not found)")
    walked = _walk(result, directory, path, heads, strict)
    if walked is not None:
        return walked
    return _judge_coverage(result, heads, every)


def _anchor(result: VerifyResult, directory: Path, verifier: Any,
            key_path: str | os.PathLike[str] | None,
            extra_checkpoints: list[tuple[str, bytes]] | None) -> dict[int, bytes] | Problem:
    """The key the checkpoints are checked with (noted in ``result``) and the heads
    they sign, by record count; a Problem when they cannot be trusted."""
    kept: list[Path] = []
    ver = _load_verifier(
        directory, verifier, Path(key_path) if key_path else None, result.warnings, kept
    )
    if ver is not None:
        result.verifier = str(ver)
    result.anchored = verifier is not None and ver is not None
    heads = _checkpoints(directory, ver, extra_checkpoints or [], result)
    if isinstance(heads, Problem):
        return heads
    if not heads and kept:
        # The key is created when the first checkpoint is signed: a key without
        # checkpoints means they were removed.
        return Problem(
            "invalid",
            0,
            None,
            f"the log's signing key {kept[0]} exists but {directory / CHECKPOINT_DIR} holds "
            "no checkpoints: they were removed, so truncation of the tail cannot be ruled "
            "out (verify with --checkpoint copies from the remote sink)",
        )
    return heads


def _walk(result: VerifyResult, directory: Path, path: Path, heads: dict[int, bytes],
          strict: bool) -> VerifyResult | None:
    """The chain, record by record through the segments and the active file up to
    the snapshot's sizes, each checkpoint's head compared where it falls; the
    figures go into ``result``. Returns the failed result at the first bad record,
    else None."""
    prev = GENESIS
    seq = 0
    lineno = 0
    last_ok_ck = 0
    sha256 = hashlib.sha256
    tail = HASH_SUFFIX_LEN
    files = _snapshot(directory, path)
    try:
        for f, size, name in files:
            offset = 0
            lines = iter(f)
            for line in lines:
                if offset + len(line) > size:  # bytes a writer appended after the snapshot
                    if offset >= size:
                        break
                    line = line[: size - offset]
                lineno += 1
                if line[-tail : 9 - tail] == _HASH_OPEN and line[-3:] == b'"}\n':
                    digest = sha256(prev + line[:-tail] + b"}").digest()
                    if digest.hex().encode() == line[9 - tail : -3]:
                        if strict:
                            bad = _strict_problem(line[:-tail] + b"}", seq + 1, prev, lineno)
                            if bad is not None:
                                return _fail(result, bad, seq, lineno)
                        seq += 1
                        prev = digest
                        offset += len(line)
                        if seq in heads:
                            if heads[seq] != digest:
                                return _fail(result, forged(seq, last_ok_ck, lineno), seq,
                                             lineno)
                            last_ok_ck = seq
                        continue
                # Slow path: a sealed torn region, or the first bad record.
                sealed = try_sealed(name, offset, lineno, line, prev, seq)
                if isinstance(sealed, Problem):
                    return _fail(result, sealed, seq, lineno)
                n_lines, n_bytes, digest = sealed
                for _ in range(n_lines - 1):
                    next(lines)
                lineno += n_lines - 1
                offset += n_bytes
                seq += 1
                prev = digest
                result.sealed += 1
                if seq in heads:
                    if heads[seq] != digest:
                        return _fail(result, forged(seq, last_ok_ck, lineno), seq, lineno)
                    last_ok_ck = seq
    finally:
        for f, _, _ in files:
            f.close()
    result.records, result.lines, result.head = seq, lineno, prev.hex()
    return None


def _judge_coverage(result: VerifyResult, heads: dict[int, bytes], every: int | None
                    ) -> VerifyResult:
    """A whole chain judged against its checkpoints: none may cover more than the
    log holds, and none may be missing where its writers sign one."""
    seq, lineno = result.records, result.lines
    max_ck = max(heads, default=0)
    result.checkpoint_size = min(max_ck, seq) if heads else 0
    if max_ck > seq:
        return _fail(
            result,
            Problem(
                "truncated",
                lineno,
                seq,
                f"the log ends at record {seq} but a signed checkpoint covers {max_ck} records: "
                f"records {seq + 1}..{max_ck} were removed from the tail",
            ),
            seq,
            lineno,
        )
    gap = (result.anchored or bool(heads)) and every is not None and seq - max_ck > every + SLACK
    if (result.anchored and not heads) or gap:
        covered = (f"its newest signed checkpoint covers {max_ck}, though its writers sign "
                   f"one every {every} records" if heads else
                   "it has no signed checkpoint, though it is pinned (`sandbox init` signs "
                   "one when it pins the key)")
        return _fail(
            result,
            Problem(
                "invalid",
                lineno,
                max_ck,
                f"the log holds {seq} records and {covered}: checkpoints were removed, and "
                f"records {max_ck + 1}..{seq} may have been rewritten with a recomputed chain "
                "(a log that truly never had one: `sandbox audit checkpoint`)",
            ),
            seq,
            lineno,
        )
    if not heads:
        result.warnings.append(
            "no signed checkpoint: a local hash chain cannot detect truncation of the tail "
            "(removing the last records leaves a valid chain)"
        )
    elif seq > max_ck:
        result.warnings.append(
            f"records {max_ck + 1}..{seq} are not yet covered by a signed checkpoint: "
            "removing them from the tail, or rewriting them with a recomputed chain, "
            "cannot be detected until one is signed"
        )
    return result


def _strict_problem(body: bytes, seq: int, prev: bytes, lineno: int) -> Problem | None:
    from agent_sandbox.audit.canonical import canonical

    try:
        rec = json.loads(body)
    except ValueError:
        return Problem("invalid", lineno, None, "record is not JSON")
    if not isinstance(rec, dict):
        return Problem("invalid", lineno, None, "record is not a JSON object")
    if rec.get("seq") != seq:
        return Problem(
            "invalid", lineno, seq, f"record says seq {rec.get('seq')!r}, expected {seq}"
        )
    if rec.get("prev") != prev.hex():
        return Problem("invalid", lineno, seq, "record's prev field is not the previous hash")
    try:
        if canonical(rec) != body:
            return Problem("invalid", lineno, seq, "record is not in canonical JSON form")
    except (TypeError, ValueError):
        return Problem("invalid", lineno, seq, "record cannot be canonicalised")
    return None


def _snapshot(directory: Path, path: Path) -> list[tuple[BinaryIO, int, Path]]:
    """The log's files, open, each with its size at a moment when no writer is
    mid-append or mid-rotation: the sealed segments oldest first, then the
    active file (``segments``).

    Taken under the writers' lock (held only to open and stat), so a record being
    written while we verify is neither read half-way nor reported as torn, and a
    rotation meanwhile changes nothing we read. Without permission to take the
    lock, the files as they are.
    """
    from agent_sandbox.audit.log import LOCK_NAME
    from agent_sandbox.audit.segments import chain_files
    from agent_sandbox.audit.storage import try_lock, unlock

    def take() -> list[tuple[BinaryIO, int, Path]]:
        out: list[tuple[BinaryIO, int, Path]] = []
        for name in chain_files(str(directory), str(path)):
            f = open(name, "rb")
            out.append((f, os.fstat(f.fileno()).st_size, Path(name)))
        return out

    try:
        fd = os.open(directory / LOCK_NAME, os.O_RDWR)
    except OSError:
        return take()
    try:
        deadline = time.monotonic() + 2.0
        while not try_lock(fd):
            if time.monotonic() > deadline:
                return take()
            time.sleep(0.005)
        try:
            return take()
        finally:
            unlock(fd)
    finally:
        os.close(fd)


def _fail(result: VerifyResult, problem: Problem, seq: int = 0, lineno: int = 0) -> VerifyResult:
    result.ok = False
    result.problem = problem
    result.records = max(result.records, seq)
    result.lines = max(result.lines, lineno)
    return result
