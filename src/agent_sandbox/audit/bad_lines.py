"""What is wrong with a chain, said precisely: the ``Problem`` a verification
stops at, a forged checkpoint, and the slow path of the walk: a torn region
followed by the record that seals it (accepted), or the first bad line
explained (edited, deleted, inserted, reordered, relinked, torn).

Pure apart from reading ahead in the log file; ``verifier`` walks the chain.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_sandbox.audit.canonical import chain_hash, split_line
from agent_sandbox.audit.log import SEAL_EVENT

_LOOKAHEAD_LINES = 10_000


@dataclass(frozen=True)
class Problem:
    """The first thing wrong with a log."""

    # edited | deleted | inserted | reordered | relinked | forged | truncated | torn | invalid
    kind: str
    line: int  # 1-based line number in audit.jsonl (0: not tied to a line)
    seq: int | None
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "log"
        if self.seq is not None:
            where += f" (seq {self.seq})"
        return f"{where}: {self.kind}: {self.reason}"


def forged(seq: int, last_ok: int, lineno: int) -> Problem:
    return Problem(
        "forged",
        lineno,
        seq,
        f"the chain head after record {seq} does not match its signed checkpoint: records "
        f"{last_ok + 1}..{seq} were rewritten and the chain recomputed",
    )


def _read_ahead(path: Path, offset: int, max_lines: int) -> list[bytes]:
    out: list[bytes] = []
    with open(path, "rb") as f:
        f.seek(offset)
        for line in f:
            out.append(line)
            if len(out) >= max_lines:
                break
    return out


def _parse(line: bytes) -> tuple[dict[str, Any], bytes, bytes] | None:
    parts = split_line(line)
    if parts is None:
        return None
    body, hexd = parts
    try:
        rec = json.loads(body)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    return rec, body, hexd


def _self_digest(rec: dict[str, Any], body: bytes, hexd: bytes) -> bytes | None:
    try:
        p = bytes.fromhex(rec["prev"])
    except (KeyError, TypeError, ValueError):
        return None
    d = chain_hash(p, body)
    return d if d.hex().encode() == hexd else None


def try_sealed(
    path: Path, offset: int, lineno: int, line: bytes, prev: bytes, seq: int
) -> tuple[int, int, bytes] | Problem:
    """Accept a torn region followed by its seal record, else explain the first bad line."""
    expected = seq + 1
    if not line.endswith(b"\n"):
        return Problem(
            "torn",
            lineno,
            None,
            f"incomplete final line at byte {offset} ({len(line)} bytes; an interrupted "
            "write): run `sandbox audit repair` to seal it",
        )
    ahead = _read_ahead(path, offset, _LOOKAHEAD_LINES)
    region = b""
    for i, cand in enumerate(ahead):
        parsed = _parse(cand) if i else None
        if parsed is not None:
            rec, body, hexd = parsed
            d = chain_hash(prev, body)
            if d.hex().encode() == hexd:
                if rec.get("event") == SEAL_EVENT and _seal_matches(rec, offset, region):
                    return i + 1, len(region) + len(cand), d
                break
        region += cand
        if i and not cand.endswith(b"\n"):
            break
    return _explain(ahead, lineno, prev, expected)


def _seal_matches(rec: dict[str, Any], offset: int, region: bytes) -> bool:
    if rec.get("torn_offset") != offset:
        return False
    length, want = rec.get("torn_length"), rec.get("torn_sha256")
    for candidate in (region, region[:-1]):
        if length == len(candidate) and hashlib.sha256(candidate).hexdigest() == want:
            return True
    return False


def _explain(ahead: list[bytes], lineno: int, prev: bytes, expected: int) -> Problem:
    line = ahead[0]
    parsed = _parse(line)
    if parsed is None:
        return Problem(
            "invalid",
            lineno,
            None,
            "not a valid audit record (edited, corrupted, or a torn write that was never sealed)",
        )
    rec, body, hexd = parsed
    rseq = rec.get("seq")
    rseq_i = rseq if isinstance(rseq, int) else None
    if rec.get("prev") == prev.hex():
        return Problem(
            "edited",
            lineno,
            rseq_i,
            "record content was changed after it was written (hash mismatch)",
        )
    intact = _self_digest(rec, body, hexd) is not None
    if not intact:
        return Problem(
            "edited",
            lineno,
            rseq_i,
            "record was changed and no longer matches its own hash or its predecessor",
        )
    if rseq_i is not None and rseq_i > expected:
        later = [_parse(x) for x in ahead[1:]]
        if any(p is not None and p[0].get("seq") == expected for p in later):
            return Problem(
                "reordered",
                lineno,
                rseq_i,
                f"records out of order: expected seq {expected} here, found seq {rseq_i}",
            )
        return Problem(
            "deleted",
            lineno,
            rseq_i,
            f"records {expected}..{rseq_i - 1} were removed before this record",
        )
    if rseq_i is not None and rseq_i == expected - 1:
        return Problem(
            "inserted",
            max(lineno - 1, 1),
            None,
            f"a record was inserted before line {lineno}: seq {rseq_i} appears twice and the "
            "original no longer links to its predecessor",
        )
    if rseq_i is not None and rseq_i < expected:
        return Problem(
            "reordered",
            lineno,
            rseq_i,
            f"records out of order: seq {rseq_i} appears after seq {expected - 1}",
        )
    return Problem(
        "relinked",
        max(lineno - 1, 1),
        expected - 1 if expected > 1 else None,
        f"the record before line {lineno} was changed and re-hashed: record seq {expected} "
        "still links to its original hash",
    )
