"""Web approvals: the time from a hook's request to its event on a connected WebSocket.

A real ``sandbox serve`` (a subprocess, as an approver runs it) serves a fresh
connected repository; one WebSocket client is connected. Each round starts the real
hook (``python -I -c "...hook()" claude pre-tool-use``, as the clients run it) with a
call that escalates, and measures, on this host's clock:

- queued to event: from the moment the request is in the queue (its ``created``
  time, stamped by the hook as it submits) to the event's arrival on the socket;
- hook start to event: from spawning the hook process (its interpreter start, the
  policy, the audit records) to the same arrival.

Then the round's request is denied through the API, so the hook ends. Goal: queued to
event at most 50 ms median. Exit status 1 when the median misses it.
Usage: .venv/bin/python bench/bench_web.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_MS = 50.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-web-"))
    state = root / "state"
    os.environ["AGENT_SANDBOX_STATE_DIR"] = str(state)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    repo = root / "repo"
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from approval.conftest import claude_pre, make_repo  # a connected repository

    os.environ["AGENT_SANDBOX_STATE_DIR"] = str(state)  # theirs is set on import
    env["AGENT_SANDBOX_STATE_DIR"] = str(state)
    make_repo(repo)
    import requests
    from websockets.sync.client import connect

    from agent_sandbox import contract

    server = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox", "serve", "--port",
                               "0", str(repo)], stdout=subprocess.PIPE, text=True, env=env)
    assert server.stdout is not None
    banner = server.stdout.readline() + server.stdout.readline()
    m = re.search(r"(http://\S+/) ", banner)
    t = re.search(r"token file (\S+) ", banner)
    assert m and t, banner
    url, token = m.group(1), Path(t.group(1)).read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    queued: list[float] = []
    spawned: list[float] = []
    load = os.getloadavg()[0]
    try:
        with connect(url.replace("http", "ws", 1) + "api/events", additional_headers=auth) as ws:
            ws.recv(timeout=10)  # hello
            for i in range(args.runs):
                payload = json.dumps(claude_pre(f"make bench-{i}", repo)).encode()
                t_spawn = time.time()
                hook = subprocess.Popen(contract.hook_argv(sys.executable, "claude",
                                                           "pre-tool-use"),
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env=env)
                assert hook.stdin is not None
                hook.stdin.write(payload)
                hook.stdin.close()
                while True:
                    msg = json.loads(ws.recv(timeout=30))
                    arrived = time.time()
                    ev = next((e for e in msg.get("events", []) if e["type"] == "request"),
                              None)
                    if ev is not None:
                        break
                queued.append((arrived - ev["request"]["created"]) * 1000)
                spawned.append((arrived - t_spawn) * 1000)
                r = requests.post(f"{url}api/requests/{ev['id']}/deny", headers=auth,
                                  json={"hash": ev["request"]["hash"], "reason": "bench"},
                                  timeout=30)
                assert r.status_code == 200, r.text
                hook.wait(30)
    finally:
        server.terminate()
        server.wait(10)
    med = statistics.median(queued)
    p90 = statistics.quantiles(queued, n=10)[-1]
    print(f"load average {load:.2f} at the start, {args.runs} runs")
    print(f"queued to event on the WebSocket: median {med:.1f} ms, p90 {p90:.1f} ms, "
          f"min {min(queued):.1f} ms (goal <= {GOAL_MS:.0f} ms median: "
          f"{'met' if med <= GOAL_MS else 'MISS'})")
    print(f"hook start to event: median {statistics.median(spawned):.1f} ms "
          f"(the hook's interpreter, policy and audit records included)")
    return 0 if med <= GOAL_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
