"""Concurrent writers, stale locks, and crashes during writes (real processes, real signals)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from agent_sandbox.audit import AuditError, AuditLog, verify

from .conftest import read_lines

WRITER = textwrap.dedent(
    """
    import os, sys
    from agent_sandbox.audit import AuditLog
    log = AuditLog(sys.argv[1], sync="batch", batch_size=16, checkpoint_every=100)
    for i in range(int(sys.argv[2])):
        log.append("proxy_decision", writer=os.getpid(), i=i, host="example.com")
    log.close()
    """
)


def _check_per_writer_order(directory: Path, writers: int, each: int) -> None:
    seen: dict[object, list[int]] = {}
    for line in read_lines(directory):
        rec = json.loads(line)
        seen.setdefault(rec["writer"], []).append(rec["i"])
    assert len(seen) == writers
    for seq in seen.values():
        assert seq == list(range(each))


def test_several_processes_append_without_forking_the_chain(logdir: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(logdir), "300"]) for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    r = verify(logdir)
    assert r.ok, r.problem
    assert r.records == 1200 and r.lines == 1200
    assert r.checkpoint_size >= 1100  # checkpoints were signed by whichever writer was due
    _check_per_writer_order(logdir, 4, 300)


def test_threads_share_one_log(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)

    def work(n: int) -> None:
        for i in range(200):
            log.append("tool_result", writer=n, i=i)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    r = verify(logdir)
    assert r.ok and r.records == 800
    _check_per_writer_order(logdir, 4, 200)


_FORK_LOG: AuditLog | None = None


def _forked_writer(n: int) -> None:
    assert _FORK_LOG is not None
    for i in range(100):
        _FORK_LOG.append("tool_result", writer=n, i=i)


def test_a_log_inherited_across_fork_still_locks(logdir: Path) -> None:
    global _FORK_LOG
    _FORK_LOG = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    _FORK_LOG.append("session_start")  # open the files before forking
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_forked_writer, args=(n,)) for n in range(3)]
    for p in procs:
        p.start()
    _forked_writer(99)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    r = verify(logdir)
    assert r.ok and r.records == 401


HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(os.path.join(sys.argv[1], ".audit.lock"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_live_lock_holder_blocks_and_a_dead_one_does_not(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None,
                   lock_timeout=0.5)
    log.append("session_start")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(logdir)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        with pytest.raises(AuditError, match="stayed locked"):
            log.append("request", request_id="blocked")  # fails closed, writes nothing
        assert len(read_lines(logdir)) == 1
        holder.send_signal(signal.SIGKILL)  # the writer dies holding the lock
        holder.wait(10)
        log.lock_timeout = 5.0
        t0 = time.monotonic()
        log.append("request", request_id="after")
        assert time.monotonic() - t0 < 2.0  # the dead holder's lock is gone at once
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (logdir / ".audit.lock").exists()  # the rendezvous file may stay; it is harmless
    assert verify(logdir).ok


def _torn_write(directory: Path, nbytes: int) -> bytes:
    """Append the first ``nbytes`` of a would-be record, as a writer killed mid-write leaves."""
    partial = b'{"event":"request","prev":"' + b"a" * 64 + b'","request_id":"lost","seq":'
    partial = partial[:nbytes]
    fd = os.open(directory / "audit.jsonl", os.O_WRONLY | os.O_APPEND)
    os.write(fd, partial)
    os.close(fd)
    return partial


def test_torn_final_line_is_reported_and_repair_seals_it(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    for i in range(5):
        log.append("request", i=i)
    log.close()
    before = (logdir / "audit.jsonl").read_bytes()
    torn = _torn_write(logdir, 40)
    r = verify(logdir)
    assert not r.ok and r.problem is not None
    assert (r.problem.kind, r.problem.line) == ("torn", 6)
    assert "repair" in r.problem.reason
    sealed = AuditLog(logdir).seal_torn_tail()
    assert sealed is not None and sealed["event"] == "audit_sealed"
    assert sealed["torn_offset"] == len(before) and sealed["torn_length"] == len(torn)
    after = (logdir / "audit.jsonl").read_bytes()
    assert after.startswith(before + torn + b"\n")  # nothing written is lost or rewritten
    r = verify(logdir)
    assert r.ok and r.sealed == 1 and r.records == 6
    assert AuditLog(logdir).seal_torn_tail() is None  # idempotent


def test_next_append_seals_a_torn_tail_itself(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    log.append("request", i=0)
    _torn_write(logdir, 25)
    log2 = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    rec = log2.append("decision", verdict="deny")
    assert rec["seq"] == 3
    lines = read_lines(logdir)
    assert len(lines) == 4 and len(lines[1]) == 26  # the 25 torn bytes, now ended
    assert json.loads(lines[2])["event"] == "audit_sealed"
    assert json.loads(lines[2])["sealed_by"] == "append"
    assert json.loads(lines[3])["event"] == "decision"
    assert verify(logdir).ok


def test_a_sealed_region_cannot_hide_an_edit(logdir: Path) -> None:
    log = AuditLog(logdir, sync="none", checkpoint_every=None, checkpoint_interval=None)
    log.append("request", i=0)
    _torn_write(logdir, 30)
    log.seal_torn_tail()
    log.append("request", i=1)
    data = (logdir / "audit.jsonl").read_bytes()
    (logdir / "audit.jsonl").write_bytes(data.replace(b'"prev":"aaa', b'"prev":"bbb', 1))
    r = verify(logdir)
    assert not r.ok and r.problem is not None and r.problem.line == 2


FSIZE_CRASHER = textwrap.dedent(
    """
    import os, resource, signal, sys
    from agent_sandbox.audit import AuditLog
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it by default
    path = os.path.join(sys.argv[1], "audit.jsonl")
    size = os.path.getsize(path) if os.path.exists(path) else 0
    limit = size + int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    log = AuditLog(sys.argv[1], sync="always", checkpoint_every=None, checkpoint_interval=None)
    i = 0
    while True:  # the kernel cuts the write that crosses the limit, then kills us (SIGXFSZ)
        log.append("tool_result", i=i, output="y" * 300)
        i += 1
    """
)


@pytest.mark.parametrize("cut", [1, 777, 4099])
def test_writer_killed_mid_write_leaves_one_torn_line_that_repair_seals(
    logdir: Path, cut: int
) -> None:
    """A real crash inside write(2): the file size limit makes the kernel write only part of
    a record and then kill the writer with SIGXFSZ."""
    AuditLog(logdir, checkpoint_every=None, checkpoint_interval=None).append("session_start")
    size0 = (logdir / "audit.jsonl").stat().st_size
    p = subprocess.run([sys.executable, "-c", FSIZE_CRASHER, str(logdir), str(cut)],
                       capture_output=True, timeout=60)
    assert p.returncode == -signal.SIGXFSZ
    data = (logdir / "audit.jsonl").read_bytes()
    assert len(data) == size0 + cut and not data.endswith(b"\n")
    r = verify(logdir)
    assert not r.ok and r.problem is not None and r.problem.kind == "torn"
    assert r.problem.line == data.count(b"\n") + 1  # exactly the partial last line
    out = subprocess.run(
        [sys.executable, "-m", "agent_sandbox", "audit", "repair", str(logdir)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (logdir / "audit.jsonl").read_bytes().startswith(data)  # nothing lost or rewritten
    r = verify(logdir)
    assert r.ok and r.sealed == 1


FULL_DISK = textwrap.dedent(
    """
    import os, resource, sys
    from agent_sandbox.audit import AuditError, AuditLog
    path = os.path.join(sys.argv[1], "audit.jsonl")
    limit = os.path.getsize(path) + 1000
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    log = AuditLog(sys.argv[1], sync="always", checkpoint_every=None, checkpoint_interval=None)
    try:
        for i in range(100):
            log.append("tool_result", i=i, output="z" * 300)
    except AuditError as exc:
        print(exc)
        sys.exit(3)
    """
)


def test_a_failed_write_raises_and_the_next_writer_seals_the_remains(logdir: Path) -> None:
    AuditLog(logdir, checkpoint_every=None, checkpoint_interval=None).append("session_start")
    p = subprocess.run([sys.executable, "-c", FULL_DISK, str(logdir)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 3 and "File too large" in p.stdout  # the caller learns it failed
    rec = AuditLog(logdir, checkpoint_every=None, checkpoint_interval=None).append("request")
    lines = read_lines(logdir)
    assert json.loads(lines[-2])["event"] == "audit_sealed" and rec["seq"] == len(lines) - 1
    assert verify(logdir).ok


CRASHER = textwrap.dedent(
    """
    import sys
    from agent_sandbox.audit import AuditLog
    log = AuditLog(sys.argv[1], sync="none", checkpoint_every=200, redact=False)
    blob = "x" * 200000  # ~10 MB per write(2), so kills often land inside one
    log.append("session_start")
    if sys.argv[2:] == ["torn"]:  # a SIGKILL that lands after half of one write(2), every time
        import os, signal
        real_write = os.write
        def half_then_kill(fd, data):
            real_write(fd, bytes(data[: len(data) // 2]))
            os.kill(os.getpid(), signal.SIGKILL)
        os.write = half_then_kill
    print("ready", flush=True)
    while True:
        log.append_many([("tool_result", {"blob": blob, "i": i}) for i in range(50)])
    """
)


def test_sigkill_during_writes_then_verify_and_repair(logdir: Path) -> None:
    import random

    rng = random.Random(5)
    torn_rounds = rounds = 0
    # random kills first (where they land depends on the machine's load), then one that
    # always lands inside a write, so the torn-line path is exercised on every run
    while rounds < 6:
        rounds += 1
        torn = rounds == 6
        p = subprocess.Popen(
            [sys.executable, "-c", CRASHER, str(logdir)] + (["torn"] if torn else []),
            stdout=subprocess.PIPE,
        )
        assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        if not torn:
            time.sleep(rng.uniform(0.05, 0.4))
            p.send_signal(signal.SIGKILL)
        assert p.wait(10) == -signal.SIGKILL
        data = (logdir / "audit.jsonl").read_bytes()
        r = verify(logdir)
        if data.endswith(b"\n"):
            assert r.ok, r.problem
        else:
            torn_rounds += 1
            assert not r.ok and r.problem is not None
            assert r.problem.kind == "torn"
            assert r.problem.line == data.count(b"\n") + 1  # exactly the last, partial line
            out = subprocess.run(
                [sys.executable, "-m", "agent_sandbox", "audit", "repair", str(logdir)],
                capture_output=True, text=True, timeout=60,
            )
            assert out.returncode == 0, out.stderr
            assert verify(logdir).ok
    final = verify(logdir)
    assert final.ok and final.records > 0 and final.sealed == torn_rounds
    assert torn_rounds >= 1
    print(f"rounds with a torn final line: {torn_rounds}/{rounds}")


BIG_WRITER = textwrap.dedent(
    """
    import sys
    from agent_sandbox.audit import AuditLog
    log = AuditLog(sys.argv[1], sync="none", checkpoint_every=None, checkpoint_interval=None,
                   redact=False)
    for i in range(int(sys.argv[2])):
        log.append_many([("tool_result", {"i": i, "output": "o" * 100_000})] * 8)
    """
)


def test_verify_while_writers_append(logdir: Path) -> None:
    """A record being written during verification is never reported as torn."""
    procs = [subprocess.Popen([sys.executable, "-c", BIG_WRITER, str(logdir), "60"])
             for _ in range(2)]
    try:
        while all(p.poll() is None for p in procs):
            if (logdir / "audit.jsonl").exists():
                r = verify(logdir)
                assert r.ok, r.problem
    finally:
        for p in procs:
            p.wait(120)
    assert verify(logdir).records == 960
