"""A log past its size cap rotates into sealed segments of one chain.

Judged from the files: every record appended is in exactly one file, in order;
each segment ends where a signed checkpoint does; ``verify`` (and ``sandbox audit
verify``) reads the segments and the active file as one chain; a segment that is
changed, removed or reordered fails it; writers in other processes that hold the
old file open follow the rotation instead of writing into a sealed segment.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

from agent_sandbox.audit import AuditLog, verify
from agent_sandbox.audit.checkpoint import LATEST_FILE
from agent_sandbox.audit.query import follow, iter_records
from agent_sandbox.audit.segments import SEGMENT_DIR, segment_files

CAP = 4096


def _fill(directory: Path, n: int, *, cap: int | None = CAP, tag: str = "w") -> None:
    log = AuditLog(directory, max_bytes=cap, checkpoint_every=None, checkpoint_interval=None)
    try:
        for i in range(n):
            log.append("tool_call", who=tag, i=i, pad="x" * 100)
    finally:
        log.close()


def _lines(path: str | Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_bytes().splitlines()]


def test_the_file_rotates_at_its_cap_and_the_chain_runs_on(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    _fill(d, 200)
    segments = segment_files(str(d))
    assert len(segments) >= 5
    seqs: list[int] = []
    prev_hash = None
    for name in [*segments, d / "audit.jsonl"]:
        recs = _lines(name)
        if not recs:  # the active file just after a rotation
            assert name == d / "audit.jsonl"
            continue
        # each file continues the chain of the one before it
        if prev_hash is not None:
            assert recs[0]["prev"] == prev_hash
        prev_hash = recs[-1]["hash"]
        seqs += [r["seq"] for r in recs]
    assert seqs == list(range(1, 201))  # nothing lost, nothing twice
    for name in segments:
        assert os.path.getsize(name) >= CAP  # rotated once full, not before
        assert os.stat(name).st_mode & 0o777 == 0o440  # sealed: read-only
        # each segment ends at a signed checkpoint of its last record
        last = _lines(name)[-1]["seq"]
        assert (d / "checkpoints" / f"{last:020d}.note").is_file()
    result = verify(d)
    assert result.ok, result.problem
    assert result.records == 200
    assert result.checkpoints >= len(segments)
    # the readers see the whole chain
    assert [r["seq"] for r in iter_records(d / "audit.jsonl")] == list(range(1, 201))


def test_a_log_without_a_cap_never_rotates(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    _fill(d, 100, cap=None)
    assert segment_files(str(d)) == []
    assert len(_lines(d / "audit.jsonl")) == 100


def test_a_changed_removed_or_reordered_segment_fails_verify(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    _fill(d, 120)
    segments = segment_files(str(d))
    assert len(segments) >= 3
    assert verify(d).ok
    # a byte changed in a sealed segment
    victim = Path(segments[1])
    os.chmod(victim, 0o640)
    original = victim.read_bytes()
    victim.write_bytes(original.replace(b'"pad":"x', b'"pad":"y', 1))
    assert not verify(d).ok
    victim.write_bytes(original)
    assert verify(d).ok
    # a segment removed: the next file's first record no longer follows on
    hidden = victim.with_name("hidden")
    victim.rename(hidden)
    bad = verify(d)
    assert not bad.ok
    hidden.rename(victim)
    # two segments swapped under each other's names
    a, b = Path(segments[0]), Path(segments[2])
    os.chmod(a, 0o640)
    os.chmod(b, 0o640)
    ta, tb = a.read_bytes(), b.read_bytes()
    a.write_bytes(tb)
    b.write_bytes(ta)
    assert not verify(d).ok
    a.write_bytes(ta)
    b.write_bytes(tb)
    assert verify(d).ok


def test_dropping_the_newest_records_with_the_active_file_is_caught(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    _fill(d, 120)
    log = AuditLog(d, max_bytes=CAP)
    log.checkpoint()  # the head signed, as every writer's schedule does
    log.close()
    (d / "audit.jsonl").unlink()  # the records after the last segment, gone
    r = verify(d)
    assert not r.ok and r.problem is not None and r.problem.kind == "truncated"


def _writer(directory: str, tag: str, n: int) -> None:
    _fill(Path(directory), n, tag=tag)


def test_writers_in_other_processes_follow_a_rotation(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    d.mkdir()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(d), f"p{k}", 150)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    segments = segment_files(str(d))
    assert len(segments) >= 10
    # one chain: every record once, seqs in order across the files, no fork
    recs = [r for name in [*segments, d / "audit.jsonl"] for r in _lines(name)]
    assert [r["seq"] for r in recs] == list(range(1, 601))
    for k in range(4):
        assert sorted(r["i"] for r in recs if r["who"] == f"p{k}") == list(range(150))
    result = verify(d)
    assert result.ok, result.problem
    # no segment grew after it was sealed: each ends with the record its name says
    for name in segments:
        assert _lines(name)[-1]["seq"] == int(Path(name).stem)


def test_the_command_line_verifies_and_shows_across_segments(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    _fill(d, 80)
    log = AuditLog(d, max_bytes=CAP)
    log.checkpoint()
    log.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    r = subprocess.run([sys.executable, "-m", "agent_sandbox", "audit", "verify", str(d)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "80" in r.stdout
    assert (d / SEGMENT_DIR).is_dir() and (d / "checkpoints" / LATEST_FILE).is_file()


def test_following_the_log_goes_on_into_the_next_file(tmp_path: Path) -> None:
    d = tmp_path / "audit"
    _fill(d, 5)
    seen: list[bytes] = []
    log = AuditLog(d, max_bytes=CAP, checkpoint_every=None, checkpoint_interval=None)

    def stop() -> bool:
        # each time the follower waits, the log grows (and rotates) a little more
        if len(seen) < 60:
            log.append("tool_call", who="late", i=len(seen), pad="x" * 100)
            return False
        return True

    for line in follow(d / "audit.jsonl", last=5, poll=0.0, stop=stop):
        seen.append(line)
    log.close()
    seqs = [json.loads(x)["seq"] for x in seen]
    assert len(segment_files(str(d))) >= 2  # it rotated while being followed
    assert seqs == list(range(1, len(seqs) + 1))  # nothing skipped across the rotations
