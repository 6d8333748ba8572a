"""Fault test: at least 500 escalations while hooks and approvers are killed
with SIGKILL at random points. Afterwards every request is in exactly one
terminal state, and every approved command ran exactly once (and nothing else
ran at all).

Approved commands run in the real sandbox through detached runners; runners are
the one process class the storm does not kill: killing one mid-command can only
end in ``interrupted``, never in a second run (the last test here)."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_sandbox.queue import TERMINAL, FolderQueue
from agent_sandbox.queue.runner import recover_and_run

from .conftest import BASE_POLICY, claude_pre, make_repo

pytestmark = pytest.mark.slow

N_REQUESTS = int(os.environ.get("AGENT_SANDBOX_FAULT_REQUESTS", "500"))
HOOKS_AT_ONCE = 24
ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}

APPROVER = r"""
import random, sys, time
from agent_sandbox.approver import Approver, ApprovalError
repo, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
ap = Approver(repo, user="fault-approver")
while True:
    for req in ap.pending():
        try:
            if rng.random() < 0.8:
                ap.approve(req["id"])
            else:
                ap.deny(req["id"], "random denial")
        except ApprovalError:
            pass
    time.sleep(rng.uniform(0.0, 0.05))
"""


def test_sigkill_storm_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    doc = json.loads(json.dumps(BASE_POLICY))
    doc["approvals"]["wait"] = 3
    repo = make_repo(tmp_path / "repo", doc)
    log = repo / "ran.log"
    q = FolderQueue(str(repo / ".sandbox/escalations"))

    approvers: list[subprocess.Popen[bytes]] = []
    hooks: list[tuple[subprocess.Popen[bytes], float]] = []
    launched = killed_hooks = killed_approvers = 0

    def new_approver() -> None:
        approvers.append(subprocess.Popen([sys.executable, "-I", "-c", APPROVER, str(repo),
                                           str(rng.randrange(1 << 30))], env=ENV,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def requests() -> int:
        return len({n for s in ("pending", "claimed", "done") for n in q.ids(s)})

    new_approver()
    new_approver()
    started = time.monotonic()
    try:
        while requests() < N_REQUESTS:
            assert time.monotonic() - started < 600, "the storm took too long"
            hooks = [(h, t) for h, t in hooks if h.poll() is None]
            while len(hooks) < HOOKS_AT_ONCE:
                launched += 1
                token = f"tok-{launched:05d}"
                cmd = f"printf '%s\\n' {token} >> {log}"  # printf: no rule, escalates
                h = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox", "hook",
                                      "claude", "pre-tool-use"], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     env=ENV)
                assert h.stdin
                h.stdin.write(json.dumps(claude_pre(cmd, repo)).encode())
                h.stdin.close()
                hooks.append((h, time.monotonic() + rng.uniform(0.0, 2.5)))
            # SIGKILL at random points: hooks (a third of them) and approvers
            now = time.monotonic()
            for h, when in hooks:
                if now >= when and h.poll() is None and rng.random() < 0.012:
                    h.kill()
                    killed_hooks += 1
            if rng.random() < 0.03:
                victim = approvers.pop(rng.randrange(len(approvers)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                killed_approvers += 1
                new_approver()
            time.sleep(0.01)
        for h, _ in hooks:
            h.wait(30)
    finally:
        for a in approvers:
            a.kill()
            a.wait()
        for h, _ in hooks:
            if h.poll() is None:
                h.kill()
    assert killed_hooks >= N_REQUESTS // 25 and killed_approvers >= 3, (killed_hooks,
                                                                           killed_approvers)

    # Recovery: what an approver (or the MCP server) does whenever it starts.
    end = time.monotonic() + 120
    while time.monotonic() < end:
        recover_and_run(str(repo))
        if not q.ids("pending") and not q.ids("claimed"):
            break
        time.sleep(0.25)
    time.sleep(0.5)  # a runner that just finished may still be writing nothing more

    ids = {n for s in ("pending", "claimed", "done") for n in q.ids(s)} | set(q.ids("decided"))
    assert len(ids) >= N_REQUESTS
    assert q.ids("pending") == [] and q.ids("claimed") == []
    assert set(q.ids("done")) == ids                         # exactly one terminal record each
    ran = log.read_text().split() if log.exists() else []
    counts: dict[str, int] = {}
    for tok in ran:
        counts[tok] = counts.get(tok, 0) + 1
    statuses: dict[str, int] = {}
    seen_tokens = set()
    for rid in ids:
        rec = q.result(rid)
        assert rec is not None and rec["status"] in TERMINAL
        statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
        token = re.search(r"tok-\d+", rec["request"]["params"]["command"]).group(0)
        seen_tokens.add(token)
        dec = rec.get("decision") or {}
        if rec["status"] == "completed":
            assert dec.get("decision") == "approve"
            assert counts.get(token) == 1, (rid, token, counts.get(token))
            assert rec["exit_code"] == 0
        else:
            assert counts.get(token, 0) == 0, (rid, rec["status"])
            if dec.get("decision") == "approve":
                pytest.fail(f"approved request {rid} ended {rec['status']}")
    assert set(counts) <= seen_tokens                        # nothing ran without a request
    assert statuses.get("completed", 0) > N_REQUESTS // 5, statuses
    assert statuses.get("denied", 0) > N_REQUESTS // 25, statuses
    assert "interrupted" not in statuses and "failed" not in statuses, statuses
    print(f"\n{time.monotonic() - started:.0f}s: {len(ids)} requests, {launched} hooks "
          f"launched, {killed_hooks} hooks and "
          f"{killed_approvers} approvers killed; {statuses}")


def test_killed_runner_ends_interrupted_and_is_never_rerun(tmp_path: Path) -> None:
    from agent_sandbox.queue.runner import spawn_runner

    repo = make_repo(tmp_path / "repo")
    log = repo / "steps.log"
    q = FolderQueue(str(repo / ".sandbox/escalations"))
    req = q.submit({"tool": "Bash", "params": {"command": f"echo start >> {log}; sleep 20; "
                                                          f"echo end >> {log}"},
                    "cwd": str(repo), "kind": "bash", "summary": "x", "mode": "run"})
    rid = req["id"]
    q.decide(rid, "approve", by="test")
    pending = Path(q.path("pending", rid))          # then its hook died
    pending.write_text(json.dumps({**req, "requester": {"pid": 999999, "start": "1"}}))
    spawn_runner(str(repo), rid)
    end = time.monotonic() + 30
    while not (log.exists() and "start" in log.read_text()):
        assert time.monotonic() < end, "the command never started"
        time.sleep(0.02)
    owners = [p for p in Path(q.dir("claimed")).iterdir() if ".owner." in p.name]
    assert len(owners) == 1
    os.kill(int(owners[0].name.rsplit(".", 1)[1]), signal.SIGKILL)
    time.sleep(0.5)
    for _ in range(3):
        assert recover_and_run(str(repo)) == []
    assert q.result(rid)["status"] == "interrupted"
    time.sleep(0.5)
    assert log.read_text().split() == ["start"]      # started once, stopped, never rerun
