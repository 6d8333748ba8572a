"""A web approval runs the code the human saw (``queue/content.py``): the
dashboard's API shows the script a command names, an approval of a request
whose script the agent rewrote afterwards runs nothing and queues it anew
with what changed, and the new request shows the new text. Judged from the
host by the script's marker."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .conftest import Server, hook_result, start_hook, wait_pending
from .test_api import call


def test_a_web_approval_of_a_swapped_script_runs_nothing(server: Server, repo: Path) -> None:
    (repo / "deploy.sh").write_text("echo approved > ran.txt\n")
    hook = start_hook("bash ./deploy.sh", repo)
    rid = wait_pending(repo)[0]
    view = call(server, "GET", f"api/requests/{rid}").json()
    shown = json.dumps(view["fields"])
    assert "echo approved > ran.txt" in shown and "deploy.sh" in shown, shown
    (repo / "deploy.sh").write_text("echo EVIL > ran.txt\n")  # the agent, after the request
    r = call(server, "POST", f"api/requests/{rid}/approve", {"hash": view["hash"]})
    assert r.status_code == 200, r.text
    end = time.monotonic() + 60
    again = None
    while again is None:
        assert time.monotonic() < end, "the approved request was not queued anew"
        again = next((p for p in wait_pending(repo) if p != rid), None)
        time.sleep(0.05)
    second = call(server, "GET", f"api/requests/{again}").json()
    assert "echo EVIL > ran.txt" in json.dumps(second["fields"])
    r = call(server, "POST", f"api/requests/{again}/deny", {"hash": second["hash"],
                                                            "reason": "not what I saw"})
    assert r.status_code == 200, r.text
    verdict, reason = hook_result(hook, timeout=120)
    assert verdict == "deny" and "changed after the request" in reason, reason
    assert not (repo / "ran.txt").exists()
