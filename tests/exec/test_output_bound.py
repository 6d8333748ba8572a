"""A sandboxed command's captured output costs the host a bounded amount of memory.

The command's output is hostile: a command printing hundreds of megabytes (or
``/dev/zero`` until the deadline) must not grow the process that runs it. Each
run happens in a fresh Python process that calls ``run_sandboxed`` and reports
its own peak resident memory (``VmHWM``), judged here, with what it kept."""

from __future__ import annotations

import json
import secrets
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import PY, SRT, needs_bwrap, wait_gone, write_settings

SIZE = 400_000_000  # bytes the command writes to each stream
PEAK_LIMIT_KIB = 200 * 1024
KEEP = 64 * 1024

# Runs ``run_sandboxed`` and prints its result and this process's peak memory.
HOST = textwrap.dedent("""
    import json, sys
    from agent_sandbox.runtime.run import run_sandboxed
    settings, cwd, backend, timeout, script = sys.argv[1:]
    r = run_sandboxed(["sh", "-c", script], settings, cwd, timeout=float(timeout),
                      backend=backend)
    print(json.dumps({
        # VmHWM: this process's own peak (ru_maxrss would carry the forking
        # parent's, which Linux keeps across exec)
        "peak_kib": int(next(l for l in open("/proc/self/status")
                             if l.startswith("VmHWM:")).split()[1]),
        "rc": r.returncode, "timed_out": r.timed_out,
        # what the host kept, as long as it is small enough to judge (never all of it)
        "stdout": r.stdout[:1 << 20].decode("latin-1"),
        "stderr": r.stderr[:1 << 20].decode("latin-1"),
        "kept": [len(r.stdout), len(r.stderr)],
        "dropped": [getattr(r, "stdout_dropped", None), getattr(r, "stderr_dropped", None)],
    }))
""")


def host_run(settings: Path, work: Path, script: str, *, backend: str = "bwrap",
             timeout: float = 60) -> dict[str, object]:
    p = subprocess.run([PY, "-c", HOST, str(settings), str(work), backend, str(timeout),
                        script], capture_output=True, timeout=timeout + 60, check=False)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    return dict(json.loads(p.stdout))


@pytest.fixture
def settings(tmp_path: Path, work: Path) -> Path:
    return write_settings(tmp_path / "s.json", {"filesystem": {"allowWrite": [str(work)]}})


def loud(size: int) -> str:
    """Marked head and tail around ``size`` zero bytes, on stdout then on stderr."""
    return (f"printf HEADOUT; head -c {size} /dev/zero; printf TAILOUT; "
            f"printf HEADERR >&2; head -c {size} /dev/zero >&2; printf TAILERR >&2; exit 3")


def expected(head: str, tail: str, size: int) -> str:
    total = len(head) + size + len(tail)
    half = KEEP // 2
    return (head + "\0" * (half - len(head)) + f"\n[... {total - KEEP} bytes trimmed ...]\n"
            + "\0" * (half - len(tail)) + tail)


@needs_bwrap
def test_hundreds_of_megabytes_of_output_keep_the_host_small(settings: Path,
                                                              work: Path) -> None:
    r = host_run(settings, work, loud(SIZE))
    assert r["peak_kib"] < PEAK_LIMIT_KIB, f"the host process peaked at {r['peak_kib']} KiB"
    assert (r["rc"], r["timed_out"]) == (3, False)
    assert r["kept"] == [len(expected("HEADOUT", "TAILOUT", SIZE))] * 2
    assert r["stdout"] == expected("HEADOUT", "TAILOUT", SIZE)
    assert r["stderr"] == expected("HEADERR", "TAILERR", SIZE)
    total = SIZE + 14
    assert r["dropped"] == [total - KEEP, total - KEEP]


@needs_bwrap
def test_small_output_is_kept_whole(settings: Path, work: Path) -> None:
    r = host_run(settings, work, f"printf A; head -c {KEEP - 2} /dev/zero; printf Z; "
                                 "echo err >&2")
    assert r["stdout"] == "A" + "\0" * (KEEP - 2) + "Z"
    assert r["stderr"] == "err\n" and r["dropped"] == [0, 0]


@needs_bwrap
def test_endless_output_until_the_deadline_keeps_the_host_small(settings: Path,
                                                                 work: Path) -> None:
    m = secrets.randbelow(9000) + 1000
    r = host_run(settings, work, f"cat /dev/zero & cat /dev/zero >&2; sleep 7{m}",
                 timeout=3)
    assert r["timed_out"] and r["rc"] == 124
    assert r["peak_kib"] < PEAK_LIMIT_KIB, f"the host process peaked at {r['peak_kib']} KiB"
    out = str(r["stdout"])
    assert len(out) < KEEP + 100 and "bytes trimmed" in out and set(out[:KEEP // 2]) == {"\0"}
    wait_gone(f"sleep 7{m}", "the command outlived the deadline")


@pytest.mark.slow
@pytest.mark.skipif(not SRT.exists(), reason="srt is not installed (make setup)")
def test_srt_backend_output_is_bounded_too(settings: Path, work: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SANDBOX_SRT", str(SRT))  # the host process inherits it
    r = host_run(settings, work, loud(SIZE // 2), backend="srt")
    assert r["peak_kib"] < PEAK_LIMIT_KIB, f"the host process peaked at {r['peak_kib']} KiB"
    assert r["rc"] == 3
    assert r["stdout"] == expected("HEADOUT", "TAILOUT", SIZE // 2)


def test_bounded_output_keeps_head_and_tail_and_counts_the_rest() -> None:
    from agent_sandbox.runtime.output import BoundedOutput, output_digest

    out = BoundedOutput(3, 4)
    for chunk in (b"ab", b"cdefg", b"h", b"ijklmnop", b"q"):
        out.feed(0, chunk)
    out.feed(1, b"xyz")
    assert out.stdout == b"abc" + b"nopq" and out.stderr == b"xyz"
    assert out.dropped == (10, 0) and out.produced == (17, 3) and out.truncated
    assert out.cut(0) == b"abc\n[... 10 bytes trimmed ...]\nnopq" and out.cut(1) == b"xyz"
    assert out.digest() == output_digest(b"abcdefghijklmnopq", b"xyz")
    for chunks in ([b"abcdefg"], [b"abcd", b"ef", b"g"], [b"a", b"b", b"cdefg"]):
        whole = BoundedOutput(3, 4)
        for chunk in chunks:
            whole.feed(0, chunk)
        assert whole.cut(0) == b"abcdefg" and not whole.truncated, chunks


def test_the_runtimes_own_notes_are_bounded_too() -> None:
    """What the sandbox itself says after a captured run (refusals, limits) is kept
    to its first and last bytes, however much the command made it say."""
    from agent_sandbox.runtime.result import NOTES_LIMIT, bounded, completed

    notes = b"".join(b"sandbox: refused: /w/.envrc%d is protected\n" % i
                     for i in range(100_000))
    run = completed(bounded(1024), 0, 0.1, False, "bwrap", notes=notes)
    assert len(run.stderr) <= NOTES_LIMIT + 200
    assert run.stderr.startswith(b"sandbox: refused: /w/.envrc0 ")
    assert run.stderr.endswith(b"/w/.envrc99999 is protected\n")
    assert b"bytes of the sandbox's notes cut" in run.stderr
