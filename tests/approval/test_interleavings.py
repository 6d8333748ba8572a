"""Exactly once, for every interleaving: processes racing on one approved
request, driven step by step through the queue's ``Seam``.

Each actor runs in a thread whose queue pauses before every rename, unlink,
link and exclusive create. A controller lets exactly one actor take its next
step at a time, so a schedule (the list of choices) replays identically. The
explorer enumerates every schedule with up to ``BOUND`` preemptions (an actor
stopped at a step while it could go on), which is where every known race of
this queue lives (each needs one or two), and checks on every schedule:

- no command runs twice (the executor's run function counts calls);
- once every actor stopped and one final recovery ran, the request has exactly
  one terminal record, and the approved command ran exactly once.

The control (``test_the_judge_fires``) runs the same explorer against a queue
whose permanent guard is switched off and must find duplicate runs.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_sandbox.queue import FolderQueue, Seam

BOUND = 2
DEAD = {"pid": 999999, "start": "1"}


class Stuck(Exception):
    pass


class Controller(Seam):
    """Pauses every actor before each step; runs one actor at a time."""

    def __init__(self, n: int, forced: dict[int, int]) -> None:
        self.n = n
        self.forced = forced
        self.cv = threading.Condition()
        self.waiting: dict[int, str] = {}
        self.finished: set[int] = set()
        self.turn: int | None = None
        self.trace: list[tuple[tuple[int, ...], int]] = []
        self.local = threading.local()
        self.infeasible = False

    # -- the seam --------------------------------------------------------
    def pause(self, op: str, path: str) -> None:
        idx = getattr(self.local, "idx", None)
        if idx is None:  # the setup and the final check run freely
            return
        with self.cv:
            self.waiting[idx] = f"{op} {Path(path).parent.name}/{Path(path).name}"
            self.turn = None
            self.cv.notify_all()
            if not self.cv.wait_for(lambda: self.turn == idx, timeout=10):
                raise Stuck(f"actor {idx} never got its turn")
            del self.waiting[idx]

    def me(self) -> dict[str, Any]:
        idx = getattr(self.local, "idx", None)
        return {"pid": 100000 + (idx or 0), "start": "t"}

    def alive(self, pid: Any, start: Any) -> bool:
        if isinstance(pid, int) and 100000 <= pid < 100000 + self.n:
            return pid - 100000 not in self.finished
        return False

    # -- scheduling ------------------------------------------------------
    def run(self, actors: list[Any]) -> list[BaseException]:
        errors: list[BaseException] = []

        def body(idx: int, fn: Any) -> None:
            self.local.idx = idx
            try:
                self.pause("start", "-/-")
                fn()
            except BaseException as exc:  # reported to the test
                errors.append(exc)
            finally:
                with self.cv:
                    self.finished.add(idx)
                    self.turn = None
                    self.cv.notify_all()

        threads = [threading.Thread(target=body, args=(i, fn), daemon=True)
                   for i, fn in enumerate(actors)]
        for t in threads:
            t.start()
        last = -1
        while True:
            with self.cv:
                settled = self.cv.wait_for(
                    lambda: self.turn is None
                    and len(self.waiting) + len(self.finished) == len(actors), timeout=10)
                if not settled:
                    raise Stuck(f"actors did not settle: {self.waiting}")
                runnable = tuple(sorted(self.waiting))
                if not runnable:
                    break
                i = len(self.trace)
                if i in self.forced:
                    choice = self.forced[i]
                    if choice not in runnable:
                        self.infeasible = True
                        choice = runnable[0]
                else:
                    choice = last if last in runnable else runnable[0]
                self.trace.append((runnable, choice))
                last = choice
                self.turn = choice
                self.cv.notify_all()
        for t in threads:
            t.join(10)
        return errors


def preemptions(trace: list[tuple[tuple[int, ...], int]], upto: int) -> int:
    count = 0
    for i in range(1, upto + 1):
        runnable, chosen = trace[i]
        prev = trace[i - 1][1]
        if chosen != prev and prev in runnable:
            count += 1
    return count


def crashed_executor(root: Path) -> tuple[str, FolderQueue]:
    """An approved request whose executor was killed after claiming it and
    whose hook is gone too: what two recoveries then race to finish."""
    q = FolderQueue(str(root))
    q.ensure()
    req = q.submit({"tool": "Bash", "params": {"command": "make deploy"}, "cwd": "/repo",
                    "kind": "bash", "summary": "make deploy", "mode": "run"})
    rid = req["id"]
    q.decide(rid, "approve", by="alice")
    # then the hook died (its record names a dead process) and so did the executor
    Path(q.path("claimed", rid)).write_text(json.dumps({**req, "requester": DEAD}))
    Path(q.path("pending", rid)).unlink()
    Path(q.dir("claimed"), f"{rid}.owner.999999").write_text("1")
    return rid, q


def counting(runs: list[str]) -> Any:
    def run(req: dict[str, Any]) -> dict[str, Any]:
        runs.append(req["id"])
        return {"status": "completed"}
    return run


def recover_then_run(q: FolderQueue, runs: list[str]) -> Any:
    def actor() -> None:
        for rid in q.recover(grace=0.0):
            q.execute(rid, counting(runs))
    return actor


def run_and_execute(q: FolderQueue, rid: str, runs: list[str]) -> Any:
    def actor() -> None:
        q.execute(rid, counting(runs))
    return actor


def explore(tmp_path: Path, scenario: str, queue_class: type[FolderQueue] = FolderQueue
            ) -> dict[str, Any]:
    """Every schedule with up to BOUND preemptions; returns the figures."""
    stack: list[dict[int, int]] = [{}]
    schedules = duplicates = bad_terminal = steps = 0
    failures: list[str] = []
    while stack:
        forced = stack.pop()
        root = tmp_path / f"s{schedules}"
        rid, setup = crashed_executor(root)
        ctl = Controller(2 if scenario == "two-recoveries" else 3, forced)
        runs: list[str] = []
        qs = [queue_class(setup.root, seam=ctl) for _ in range(ctl.n)]
        actors = [recover_then_run(qs[0], runs), recover_then_run(qs[1], runs)]
        if scenario == "recoveries-and-runner":
            actors.append(run_and_execute(qs[2], rid, runs))
        errors = ctl.run(actors)
        schedules += 1
        steps += len(ctl.trace)
        assert not errors, errors
        if ctl.infeasible:
            continue
        # everyone stopped: one last recovery, as the next approver start does
        final = queue_class(setup.root)
        for _ in range(3):
            for r in final.recover(grace=0.0):
                final.execute(r, counting(runs))
        rec = final.result(rid)
        if len(runs) > 1:
            duplicates += 1
            failures.append(" / ".join(f"{c}" for _, c in ctl.trace))
        if rec is None or rec.get("status") != "completed" or len(runs) != 1 or (
                final.ids("pending") or final.ids("claimed")):
            bad_terminal += 1
        start = max(forced) + 1 if forced else 0
        for i in range(start, len(ctl.trace)):
            runnable, chosen = ctl.trace[i]
            for alt in runnable:
                if alt == chosen:
                    continue
                new = {j: ctl.trace[j][1] for j in range(i)}
                new[i] = alt
                probe = [*ctl.trace[:i], (runnable, alt)]
                if preemptions(probe, i) <= BOUND:
                    stack.append(new)
    return {"schedules": schedules, "steps": steps, "duplicates": duplicates,
            "bad_terminal": bad_terminal, "example": failures[:1]}


@pytest.mark.parametrize("scenario", ["two-recoveries", "recoveries-and-runner"])
def test_no_interleaving_runs_an_approval_twice(tmp_path: Path, scenario: str) -> None:
    figures = explore(tmp_path, scenario)
    print(f"\n{scenario}: {figures}")
    assert figures["schedules"] > 50                     # the explorer really branched
    assert figures["duplicates"] == 0, figures
    assert figures["bad_terminal"] == 0, figures


class Unguarded(FolderQueue):
    """The queue with its permanent guard switched off (every use wins)."""

    def spent(self, rid: str) -> dict[str, Any] | None:
        return None

    def _spend(self, rid: str, use: str, **why: Any) -> bool:
        return True


def test_the_judge_fires(tmp_path: Path) -> None:
    figures = explore(tmp_path, "two-recoveries", Unguarded)
    print(f"\nwithout the guard: {figures}")
    assert figures["duplicates"] > 0, figures
