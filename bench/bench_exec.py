"""Cold start of ``sandbox exec -- true`` against ``srt -c true`` and bare bwrap.

Each round runs the commands once, in turn, so load on the machine falls on
all of them alike; the table shows the median and 90th percentile wall time and
the ratios the goals are stated in (at most 1/5 of srt, at most 3x bwrap).

``sandbox exec`` is the installed command: the native launcher, which replays
the plan the first run wrote while its inputs hold (every run here starts a
new sandbox: namespaces, mounts, seccomp, proxy ports). The row "planned
afresh" is the same command with the plan cache off
(``AGENT_SANDBOX_NO_PLAN_CACHE=1``): what a run costs after the settings or
the filesystem it depends on changed.

    .venv/bin/python bench/bench_exec.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / ".venv" / "bin" / "sandbox"
SRT = REPO / ".tools" / "node_modules" / ".bin" / "srt"
BWRAP = shutil.which("bwrap") or "bwrap"


def timed(argv: list[str], cwd: str) -> tuple[float, float]:
    """(wall ms, CPU ms of the whole process tree: user + system)."""
    env = None
    if argv[0] == "env":
        env = dict(os.environ, **dict(a.split("=", 1) for a in argv[1:2]))
        argv = argv[2:]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed * 1000, cpu * 1000


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 25
    work = tempfile.mkdtemp(prefix="bench-exec-")
    settings = Path(work) / "srt-settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": ["github.com", "*.github.com", "pypi.org",
                                       "files.pythonhosted.org"], "deniedDomains": []},
        "filesystem": {"denyRead": ["~/.ssh", "~/.aws", "**/.env"], "allowWrite": [work],
                       "denyWrite": []},
    }))
    cmds: dict[str, list[str]] = {
        "sandbox exec -- true": [str(SANDBOX), "exec", "--settings", str(settings), "--", "true"],
        "  planned afresh": ["env", "AGENT_SANDBOX_NO_PLAN_CACHE=1", str(SANDBOX), "exec",
                             "--settings", str(settings), "--", "true"],
        "bwrap --unshare-net ... true": [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc",
                                         "/proc", "--unshare-net", "--unshare-pid",
                                         "--die-with-parent", "true"],
    }
    if SRT.exists():
        cmds["srt -c true"] = [str(SRT), "-s", str(settings), "-c", "true"]
    else:
        print(f"note: {SRT} missing (make setup installs it); srt column skipped")
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    for argv in cmds.values():  # warm the page cache once
        timed(argv, work)
    trace = subprocess.run(cmds["sandbox exec -- true"], cwd=work, capture_output=True,
                           env=dict(os.environ, AGENT_SANDBOX_TRACE="1"))
    if b"plan replayed" not in trace.stderr:
        print("note: sandbox exec did not replay its plan (is the native launcher installed? "
              "make setup builds it): " + trace.stderr.decode(errors="replace").strip())
    load = os.getloadavg()[0]
    for _ in range(rounds):
        for name, argv in cmds.items():
            wall, used = timed(argv, work)
            times[name].append(wall)
            cpu[name].append(used)
    shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    p90 = {k: sorted(v)[int(0.9 * (len(v) - 1))] for k, v in times.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    ours, bare = med["sandbox exec -- true"], med["bwrap --unshare-net ... true"]
    print(f"cold start, {rounds} rounds, {os.cpu_count()} CPUs, "
          f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'command':32} {'median ms':>10} {'p90 ms':>8} {'CPU ms':>8}")
    for k in cmds:
        print(f"{k:32} {med[k]:10.1f} {p90[k]:8.1f} {cmed[k]:8.1f}")
    print()
    print(f"sandbox exec / bare bwrap : {ours / bare:5.2f}x   (goal <= 3x)")
    fresh = med["  planned afresh"]
    print(f"  planned afresh / bwrap  : {fresh / bare:5.2f}x")
    if "srt -c true" in med:
        srt = med["srt -c true"]
        print(f"sandbox exec / srt        : {ours / srt:5.3f}    (goal <= 0.200, i.e. 1/5)")
        print(f"srt / sandbox exec        : {srt / ours:5.1f}x faster")
        ratio = cmed["sandbox exec -- true"] / cmed["srt -c true"]
        print(f"CPU time, sandbox exec / srt: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
