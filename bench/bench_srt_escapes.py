"""srt against the project's escape suites: which attacks the reference sandbox
blocks and which escape, recorded and never asserted (srt is what the project is
compared with, not the code under test; the test suite asserts the project's own
results, tests/exec/test_escape.py and test_escape_two_step.py).

Runs every case of both suites against the real srt (installed by ``make setup``
under .tools/), judged from the host exactly as the tests judge ``sandbox exec``,
and writes the table to build/escape-srt.md. Needs root (the escape suite's
network namespace) and bubblewrap. Several minutes.
Usage: .venv/bin/python bench/bench_srt_escapes.py [pytest options, such as -k CASE]
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "exec"), str(REPO / "tests")]

import conftest as exec_fixtures  # noqa: E402  (the escape suite's network and listeners)
import test_escape as one_step  # noqa: E402
import test_escape_two_step as two_step  # noqa: E402
from conftest import SRT, HostListeners, Net  # noqa: E402

RESULTS: dict[str, tuple[str, str, str]] = {}  # case: (suite, class, srt's result)


@pytest.fixture(scope="session", autouse=True)
def table() -> Iterator[None]:
    yield
    lines = ["# The escape suites against srt", "",
             "Recorded, not asserted: each case judged from the host as the tests judge",
             "sandbox exec (tests/exec/test_escape.py, test_escape_two_step.py).", "",
             "| case | suite | class | srt |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | {suite} | {cls} | {got} |"
              for name, (suite, cls, got) in RESULTS.items()]
    counts = [got for _, _, got in RESULTS.values()]
    lines += ["", f"srt: {counts.count('blocked')}/{len(counts)} blocked", ""]
    out = REPO / "build" / "escape-srt.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n" + "\n".join(lines))


@pytest.fixture(autouse=True)
def srt_installed() -> None:
    if not SRT.exists():
        pytest.skip("srt is not installed (make setup installs it)")


@pytest.mark.parametrize("case", one_step.CASES, ids=[c.name for c in one_step.CASES])
def test_one_step(case: one_step.Case, tmp_path: Path, net: Net, host_listeners: HostListeners,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        escaped = one_step.run_case("srt", case, tmp_path, net, host_listeners, monkeypatch)
        got = "ESCAPED" if escaped else "blocked"
    except subprocess.TimeoutExpired:
        got = "timeout"
    RESULTS[case.name] = ("one step", case.category, got)


@pytest.mark.parametrize("case", two_step.CASES, ids=two_step.IDS)
def test_two_step(case: two_step.Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        escaped = two_step.attack("srt", case, tmp_path, monkeypatch)
        got = "ESCAPED" if escaped else "blocked"
    except (subprocess.SubprocessError, OSError) as exc:
        got = f"error: {type(exc).__name__}"
    RESULTS[case.name] = ("two step", case.cls, got)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(REPO), "-o", "addopts=", "-s", *sys.argv[1:]],
                         plugins=[exec_fixtures]))
