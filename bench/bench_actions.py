"""Start to exit of an infrastructure action's container against ``runsc do
true`` and the bwrap backend (``sandbox exec -- true``), side by side.

Each round runs every row once, in turn, so load on the machine falls on all
of them alike; the table shows the median, the spread (25th-75th and 90th
percentile) of wall time, and the ratio the goal is stated in: an action at
most 1.5x ``runsc do true``.

- ``action true``: ``run_action_container(image, ["true"])`` called in this
  process, this user's warm podman service already up (as in the MCP server
  or ``sandbox serve``, which run many actions): the service judged, a new
  container created, checked to be runsc, attached to, started, waited for,
  and removed, with the default limits and no network;
- ``action true, connect``: the same with one ``connect`` endpoint (the
  container's network namespace is furnished from the host first);
- ``action true, new process``: a fresh interpreter that imports the runner
  and runs one action through the same warm service (what each ``sandbox
  action run`` pays but for the first in ``IDLE_SECONDS``, which also starts
  the service, about a second);
- ``runsc do true``: gVisor alone (``runsc --network=none do true``, root);
- ``sandbox exec -- true``: the bwrap backend (the installed
  ``.venv/bin/sandbox``).

With ``BENCH_ACTIONS_AGAINST=DIR`` (another checkout with its own
``.venv``, e.g. the previous release) two more rows run that tree's runner in
the same rounds: ``action true`` in a long-lived process of its own (asked
through a pipe) and ``action true, new process``.

    .venv/bin/python bench/bench_actions.py [ROUNDS]      # default 20
    BENCH_ACTIONS_AGAINST=../main .venv/bin/python bench/bench_actions.py 10
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / ".venv" / "bin" / "sandbox"
RUNSC = shutil.which("runsc")
IMAGE = os.environ.get("AGENT_SANDBOX_GVISOR_IMAGE", "localhost/agent-sandbox-base:bookworm")
ACTION = "action true"
ACTION_CONNECT = "action true, connect"
ACTION_COLD = "action true, new process"
RUNSC_ROW = "runsc do true"
EXEC_ROW = "sandbox exec -- true (bwrap)"

COLD = """
import sys
from agent_sandbox.actions.runner import run_action_container
from agent_sandbox.spec.actions import ActionLimits
r = run_action_container(sys.argv[1], ["true"], limits=ActionLimits(), files=None, env=None,
                         egress=[], connect=[], labels={"agent-sandbox.bench": "actions"})
sys.exit(r.exit_code or 0)
"""


SERVE = """
import sys
from agent_sandbox.actions.runner import run_action_container
from agent_sandbox.spec.actions import ActionLimits
for line in sys.stdin:
    r = run_action_container(sys.argv[1], ["true"], limits=ActionLimits(), files=None,
                             env=None, egress=[], connect=[],
                             labels={"agent-sandbox.bench": "actions"})
    print(r.exit_code, r.runtime, flush=True)
"""


def served(python: str, cwd: str) -> Callable[[], None]:
    """One action per call, run by a long-lived process of ``python``."""
    proc = subprocess.Popen([python, "-c", SERVE, IMAGE], cwd=cwd, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def run() -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        if proc.stdout.readline().split() != ["0", "runsc"]:
            raise SystemExit(f"{python}: the action failed")
    return run


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def command(argv: list[str], cwd: str) -> Callable[[], None]:
    def run() -> None:
        r = subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode != 0:
            raise SystemExit(f"{argv[0]} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return run


def action(connect: list[str]) -> Callable[[], None]:
    from agent_sandbox.actions.runner import run_action_container
    from agent_sandbox.spec.actions import ActionLimits

    def run() -> None:
        r = run_action_container(IMAGE, ["true"], limits=ActionLimits(), files=None, env=None,
                                 egress=[], connect=connect,
                                 labels={"agent-sandbox.bench": "actions"})
        if r.exit_code != 0 or r.runtime != "runsc":
            raise SystemExit(f"the action failed: {r}")
    return run


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    os.environ.setdefault("CONTAINERS_CONF", str(REPO / "containers.conf"))
    work = tempfile.mkdtemp(prefix="bench-actions-")
    settings_dir = tempfile.mkdtemp(prefix="bench-actions-settings-")
    settings = Path(settings_dir) / "srt-settings.json"
    settings.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": [work], "denyWrite": []}}))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    endpoint = f"127.0.0.1:{listener.getsockname()[1]}"
    rows: dict[str, Callable[[], None]] = {
        ACTION: action([]),
        ACTION_CONNECT: action([endpoint]),
        ACTION_COLD: command([sys.executable, "-c", COLD, IMAGE], work),
        EXEC_ROW: command([str(SANDBOX), "exec", "--settings", str(settings), "--", "true"],
                          work),
    }
    against = os.environ.get("BENCH_ACTIONS_AGAINST")
    if against:
        other = str(Path(against).resolve() / ".venv" / "bin" / "python")
        rows[f"{ACTION} ({Path(against).name})"] = served(other, work)
        rows[f"{ACTION_COLD} ({Path(against).name})"] = command([other, "-c", COLD, IMAGE],
                                                                work)
    notes = []
    if RUNSC is None or os.geteuid() != 0:
        notes.append("runsc do true: not run (needs runsc and root)")
    else:
        rows[RUNSC_ROW] = command([RUNSC, "--network=none", "do", "true"], work)
    for run in rows.values():  # warm: the page cache, the runner's podman services
        run()
    times: dict[str, list[float]] = {k: [] for k in rows}
    load = os.getloadavg()[0]
    for _ in range(rounds):
        for name, run in rows.items():
            t = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - t) * 1000)
    listener.close()
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(settings_dir, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"start to exit, {rounds} rounds, {os.cpu_count()} CPUs, "
          f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'row':36} {'median ms':>10} {'p90 ms':>8} {'p25-p75 ms':>14}")
    for k, v in times.items():
        spread = f"{percentile(v, 0.25):.1f}-{percentile(v, 0.75):.1f}"
        print(f"{k:36} {med[k]:10.1f} {percentile(v, 0.9):8.1f} {spread:>14}")
    for n in notes:
        print(f"  {n}")
    print()
    if RUNSC_ROW in med:
        ratio = med[ACTION] / med[RUNSC_ROW]
        verdict = "met" if ratio <= 1.5 else "NOT met"
        print(f"action / runsc do true          : {ratio:5.2f}x   (goal <= 1.5x: {verdict})")
        print(f"  with a connect endpoint       : {med[ACTION_CONNECT] / med[RUNSC_ROW]:5.2f}x")
        print(f"  in a new process              : {med[ACTION_COLD] / med[RUNSC_ROW]:5.2f}x")
    print(f"action / sandbox exec (bwrap)   : {med[ACTION] / med[EXEC_ROW]:5.2f}x")
    if against:
        name = Path(against).name
        print(f"action / the same of {name:10}: {med[ACTION] / med[f'{ACTION} ({name})']:5.2f}x")
        print(f"  in a new process              : "
              f"{med[ACTION_COLD] / med[f'{ACTION_COLD} ({name})']:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
