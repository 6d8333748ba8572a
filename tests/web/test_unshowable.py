"""A request that cannot be shown whole never hides the others: a real hook's call
with parameters nested far deeper than any display goes, queued beside an ordinary one;
the list still answers, with the deep one as a stub that says why and cannot be
approved; and the server runs the queue's crash recovery itself, as ``sandbox
pending`` does, so a request whose hook died leaves the list without anyone asking."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import requests

from agent_sandbox import contract

from .conftest import PY, Server, claude_pre, env, start_hook, wait_pending


def deep_hook(repo: Path, depth: int) -> subprocess.Popen[bytes]:
    payload = claude_pre("touch deep", repo)
    payload["tool_input"]["x"] = json.loads("[" * depth + "]" * depth)
    p = subprocess.Popen(contract.hook_argv(PY, "claude", "pre-tool-use"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env())
    assert p.stdin
    p.stdin.write(json.dumps(payload).encode())
    p.stdin.close()
    p.stdin = None
    return p


def pending(server: Server) -> list[dict[str, object]]:
    r = requests.get(server.url + "api/requests?state=pending", headers=server.headers,
                     timeout=30)
    assert r.status_code == 200, r.text
    return list(r.json())


def test_a_request_nested_too_deep_is_a_stub_that_cannot_be_approved(server: Server,
                                                                     repo: Path) -> None:
    plain = start_hook("make plain", repo)
    rid_plain = wait_pending(repo)[0]
    deep = deep_hook(repo, 400)
    try:
        ids = wait_pending(repo, 2)
        rid_deep = next(i for i in ids if i != rid_plain)
        listed = {r["id"]: r for r in pending(server)}
        assert set(listed) == {rid_plain, rid_deep}
        assert listed[rid_plain]["cannot_show"] is None and listed[rid_plain]["fields"]
        stub = listed[rid_deep]
        assert "nest deeper than" in str(stub["cannot_show"]) and stub["fields"] == []
        assert stub["params"] is None and "cannot be approved here" in str(stub["refused"])
        one = requests.get(server.url + f"api/requests/{rid_deep}", headers=server.headers,
                           timeout=10)
        assert one.status_code == 200 and one.json()["cannot_show"]
        r = requests.post(server.url + f"api/requests/{rid_deep}/approve",
                          json={"hash": stub["hash"]}, headers=server.headers, timeout=10)
        assert r.status_code == 409 and "cannot be shown whole" in r.json()["detail"]
        assert not list((repo / ".sandbox/escalations/decided").iterdir())
        r = requests.get(server.url + f"api/audit?request={rid_deep}", headers=server.headers,
                         timeout=10)
        assert r.status_code == 200
        # deny stays open: refusing is always safe
        r = requests.post(server.url + f"api/requests/{rid_deep}/deny",
                          json={"hash": stub["hash"], "reason": "unreadable"},
                          headers=server.headers, timeout=10)
        assert r.status_code == 200, r.text
        deep.communicate(timeout=60)
        # the finished list shows it as a stub too, and the others still
        r = requests.get(server.url + "api/requests?state=done", headers=server.headers,
                         timeout=10)
        assert r.status_code == 200 and [d["id"] for d in r.json()] == [rid_deep]
    finally:
        for p in (plain, deep):
            p.kill()
            p.wait()


def test_the_server_recovers_the_queue_itself(server: Server, repo: Path) -> None:
    hook = start_hook("make abandoned", repo)
    rid = wait_pending(repo)[0]
    assert [r["id"] for r in pending(server)] == [rid]
    hook.kill()  # the agent's hook dies; nobody runs `sandbox pending`
    hook.wait()
    end = time.monotonic() + 20
    while time.monotonic() < end and pending(server):
        time.sleep(0.2)
    assert pending(server) == []
    done = requests.get(server.url + f"api/requests/{rid}", headers=server.headers,
                        timeout=10).json()
    assert done["state"] == "done" and done["result"]["status"] == "cancelled"


def test_depth_is_measured_without_recursion() -> None:
    from agent_sandbox.web.sites import MAX_DEPTH, too_deep

    assert not too_deep({"a": [1, {"b": 2}]}, 3)
    assert too_deep(json.loads("[" * 5 + "]" * 5), 4)
    deep: list[object] = []
    node = deep
    for _ in range(100_000):  # far past the interpreter's recursion limit
        node.append([])
        node = node[0]  # type: ignore[assignment]
    assert too_deep(deep, MAX_DEPTH)
