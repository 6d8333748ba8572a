"""Audit log benchmarks: durable append rate and verification time.

Goals: >= 20,000 durable events/s with batched fsync; verifying 1,000,000
records in <= 5 s. Prints a table of measured numbers; exit status 1 if a goal
is missed. Usage: .venv/bin/python bench/bench_audit.py [--records N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_sandbox.audit import AuditLog, verify

FIELDS = {
    "request_id": "req-5f0c2b1e2f6a4c1b9d3e1a2b",
    "actor": "alice",
    "agent": "claude",
    "session": "7f0c2b1e-2f6a-4c1b-9d3e-1a2b3c4d5e6f",
    "cwd": "/home/alice/src/project",
    "tool": "Bash",
    "command": "git status --short && pytest -q tests/unit",
    "verdict": "allow",
}


def bench_append(root: Path, n: int, sync: str, batch: int | None = None) -> float:
    d = root / f"append-{sync}-{batch}"
    log = AuditLog(d, sync=sync, batch_size=256, batch_interval=0.05,  # type: ignore[arg-type]
                   checkpoint_every=1000, checkpoint_interval=60.0)
    log.append("session_start")  # create files and keys outside the timed loop
    log.checkpoint()
    t0 = time.perf_counter()
    if batch:
        for i in range(0, n, batch):
            log.append_many([("decision", {**FIELDS, "i": j}) for j in range(i, i + batch)])
    else:
        for i in range(n):
            log.append("decision", **FIELDS, i=i)
    log.flush()  # durable: every record is on disk before the clock stops
    dt = time.perf_counter() - t0
    log.close()
    r = verify(d)
    assert r.ok and r.records == n + 1, r
    shutil.rmtree(d)
    return n / dt


def build_log(d: Path, n: int) -> None:
    log = AuditLog(d, sync="none", checkpoint_every=1000, checkpoint_interval=None)
    step = 10_000
    for i in range(0, n, step):
        log.append_many([("decision", {**FIELDS, "i": j}) for j in range(i, min(n, i + step))])
    log.close()


def import_cost_ms() -> tuple[float, float]:
    def run(code: str) -> float:
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            best = min(best, time.perf_counter() - t0)
        return best * 1000

    return run("pass"), run("import agent_sandbox.audit")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--appends", type=int, default=100_000)
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    ok = True
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        root = Path(tmp)
        rate = bench_append(root, args.appends, "batch")
        good = rate >= 20_000
        ok &= good
        rows.append(("durable append, batched fsync (256 / 50 ms), one append per event",
                     f"{rate:,.0f} events/s", ">= 20,000 events/s", "ok" if good else "MISS"))
        rate = bench_append(root, args.appends, "batch", batch=100)
        rows.append(("durable append_many, 100 events per call (one write, one fsync)",
                     f"{rate:,.0f} events/s", "-", ""))
        rate = bench_append(root, 2_000, "always")
        rows.append(("append with fsync after every event (reference)",
                     f"{rate:,.0f} events/s", "-", ""))

        d = root / "verify"
        t0 = time.perf_counter()
        build_log(d, args.records)
        build = time.perf_counter() - t0
        size = (d / "audit.jsonl").stat().st_size
        t0 = time.perf_counter()
        r = verify(d)
        dt = time.perf_counter() - t0
        assert r.ok and r.records == args.records, r
        good = dt <= 5.0 * args.records / 1_000_000
        ok &= good
        rows.append((f"verify {args.records:,} records ({size / 1e6:,.0f} MB, "
                     f"{r.checkpoints} signed checkpoints)",
                     f"{dt:.2f} s ({args.records / dt:,.0f} records/s)",
                     "<= 5 s per 1,000,000", "ok" if good else "MISS"))
        rows.append((f"write the {args.records:,}-record log (no fsync)", f"{build:.1f} s", "-", ""))
    base, audit = import_cost_ms()
    rows.append(("python start + import agent_sandbox.audit (hook path)",
                 f"{audit:.1f} ms (bare start {base:.1f} ms)", "-", ""))
    w = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{w}}  {'result':<36}  {'goal':<22}  status")
    for name, result, goal, status in rows:
        print(f"{name:<{w}}  {result:<36}  {goal:<22}  {status}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
