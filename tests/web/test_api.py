"""The REST API and the events WebSocket of a real ``sandbox serve`` subprocess, over a
real repository whose requests come from the real hook: the token on every endpoint,
decisions with the semantics of ``sandbox approve`` (bound to the hash the approver saw,
single use, audited with the approver), precise refusals that change nothing."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from agent_sandbox import contract

from .conftest import (
    Server,
    audit_records,
    env,
    hook_result,
    login,
    start_hook,
    start_server,
    wait_pending,
)

ENDPOINTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "api/requests", None),
    ("GET", "api/requests?state=done", None),
    ("GET", "api/requests/20260101T000000-aaaaaaaaaaaa", None),
    ("POST", "api/requests/20260101T000000-aaaaaaaaaaaa/approve", {"hash": "0" * 64}),
    ("POST", "api/requests/20260101T000000-aaaaaaaaaaaa/deny", {"hash": "0" * 64}),
    ("GET", "api/audit?request=20260101T000000-aaaaaaaaaaaa", None),
    ("GET", "api/audit/verify", None),
    ("GET", "api/status", None),
    ("GET", "openapi.json", None),
]


def call(server: Server, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> requests.Response:
    return requests.request(method, server.url + path, json=body, timeout=30,
                            headers=server.headers if headers is None else headers)


def decided(repo: Path) -> list[str]:
    return sorted(p.name for p in (repo / ".sandbox/escalations/decided").iterdir())


def test_every_endpoint_needs_the_token(server: Server) -> None:
    wrong = {"Authorization": "Bearer " + "x" * 43}
    for method, path, body in ENDPOINTS:
        for headers in ({}, wrong, {"Authorization": "Bearer"},
                        {"Authorization": f"Basic {server.token}"},
                        {"Authorization": f"Bearer {server.token[:-1]}"}):
            r = call(server, method, path, body, headers)
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert r.headers["www-authenticate"] == "Bearer"
        r = call(server, method, path, body)  # control: the token opens each of them
        assert r.status_code in (200, 404), (path, r.status_code, r.text)
    # the dashboard page carries no data; it is the one thing served without the token
    page = requests.get(server.url, timeout=10)
    assert page.status_code == 200 and "approvals" in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


def test_websocket_needs_the_token(server: Server) -> None:
    with connect(server.ws_url) as ws:  # a browser: the token as the first message
        ws.send(json.dumps({"token": "y" * 43}))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
    with connect(server.ws_url) as ws:
        ws.send("not json")
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=10)
    with pytest.raises(InvalidStatus):  # a page of another site may not even open it
        connect(server.ws_url, origin="http://evil.example",  # type: ignore[arg-type]
                additional_headers=server.headers).close()
    with connect(server.ws_url) as ws:  # control: a dashboard session is greeted
        ws.send(json.dumps({"session": login(server)}))
        assert json.loads(ws.recv(timeout=10))["hello"]["user"]
    with connect(server.ws_url, additional_headers=server.headers) as ws:
        assert "hello" in json.loads(ws.recv(timeout=10))


def test_approve_through_the_api_runs_the_hooks_command(server: Server, repo: Path) -> None:
    with connect(server.ws_url, additional_headers=server.headers) as ws:
        ws.recv(timeout=10)  # hello
        hook = start_hook("echo from-the-web; touch web-approved.txt; exit 3", repo)
        rid = wait_pending(repo)[0]
        events = json.loads(ws.recv(timeout=10))["events"]
        assert [(e["type"], e["id"]) for e in events] == [("request", rid)]
        pushed = events[0]["request"]
        listed = call(server, "GET", "api/requests?state=pending").json()
        assert [r["id"] for r in listed] == [rid]
        view = call(server, "GET", f"api/requests/{rid}").json()
        assert view == pushed | {"created": view["created"]}
        assert {"name": "command", "value": "echo from-the-web; touch web-approved.txt; exit 3",
                "shown": "echo from-the-web; touch web-approved.txt; exit 3"} in view["fields"]
        assert view["state"] == "pending" and view["repo"] == str(repo.resolve())
        assert view["risk"] and view["reasons"] and view["agent"] == "claude"

        # a hash other than the one of the request: refused, nothing decided
        r = call(server, "POST", f"api/requests/{rid}/approve", {"hash": "f" * 64})
        assert r.status_code == 409 and "changed since it was displayed" in r.json()["detail"]
        assert decided(repo) == []

        r = call(server, "POST", f"api/requests/{rid}/approve", {"hash": view["hash"]})
        assert r.status_code == 200, r.text
        assert r.json()["decision"] == "approve" and r.json()["by"]
        verdict, reason = hook_result(hook)
        assert verdict == "deny"  # the tool itself never runs with the agent's rights
        assert "from-the-web" in reason and "exit status: 3" in reason
        assert (repo / "web-approved.txt").exists()
        seen = []
        while not any(e["type"] == "done" for e in seen):
            seen += json.loads(ws.recv(timeout=20))["events"]
        kinds = [e["type"] for e in seen]
        assert kinds.index("decision") < kinds.index("done")
        done = next(e for e in seen if e["type"] == "done")
        assert done == {"type": "done", "repo": str(repo.resolve()), "id": rid,
                        "status": "completed", "exit_code": 3}

    # single use: a second approval of the same request is refused
    r = call(server, "POST", f"api/requests/{rid}/approve", {"hash": view["hash"]})
    assert r.status_code == 409 and "already finished (completed)" in r.json()["detail"]
    finished = call(server, "GET", "api/requests?state=done").json()
    assert [(f["id"], f["result"]["status"], f["result"]["exit_code"]) for f in finished] == \
        [(rid, "completed", 3)]
    assert "from-the-web" in finished[0]["result"]["stdout"]

    # audited once, with the approver's identity and the channel
    approvals = [r for r in audit_records(repo, rid) if r["event"] == "approval"]
    assert len(approvals) == 1
    assert approvals[0]["by"] and approvals[0]["via"] == "web"
    assert approvals[0]["request_hash"] == view["hash"]
    trail = call(server, "GET", f"api/audit?request={rid}").json()
    events_seen = [e["event"] for e in trail["entries"]]
    for ev in ("request", "escalation", "approval", "sandbox_started", "completed"):
        assert ev in events_seen, events_seen
    report = call(server, "GET", "api/audit/verify").json()
    assert report["ok"] and report["logs"][0]["records"] >= len(events_seen)
    status = call(server, "GET", "api/status").json()
    assert status["repositories"][0]["queue"]["done"] == 1


def test_deny_with_a_reason(server: Server, repo: Path) -> None:
    hook = start_hook("make deploy", repo)
    rid = wait_pending(repo)[0]
    view = call(server, "GET", f"api/requests/{rid}").json()
    r = call(server, "POST", f"api/requests/{rid}/deny",
             {"hash": view["hash"], "reason": "not on a Friday"})
    assert r.status_code == 200, r.text
    verdict, reason = hook_result(hook)
    assert verdict == "deny" and "not on a Friday" in reason
    denials = [r for r in audit_records(repo, rid) if r["event"] == "denial"]
    assert len(denials) == 1 and denials[0]["via"] == "web" and denials[0]["uid"] == os.geteuid()
    r = call(server, "POST", f"api/requests/{rid}/approve", {"hash": view["hash"]})
    assert r.status_code == 409 and "already finished (denied)" in r.json()["detail"]


def test_bad_input_is_a_precise_refusal_that_changes_nothing(server: Server,
                                                             repo: Path) -> None:
    hook = start_hook("make release", repo)
    try:
        rid = wait_pending(repo)[0]
        good = call(server, "GET", f"api/requests/{rid}").json()["hash"]
        cases: list[tuple[str, str, Any, int]] = [
            ("POST", "api/requests/20260101T000000-aaaaaaaaaaaa/approve", {"hash": good}, 404),
            ("POST", "api/requests/..%2F..%2Fetc%2Fpasswd/approve", {"hash": good}, 404),
            ("POST", "api/requests/short/approve", {"hash": good}, 422),
            ("POST", f"api/requests/{rid}/approve", None, 422),
            ("POST", f"api/requests/{rid}/approve", {}, 422),
            ("POST", f"api/requests/{rid}/approve", {"hash": good, "always": True}, 422),
            ("POST", f"api/requests/{rid}/approve", {"hash": good.upper()}, 422),
            ("POST", f"api/requests/{rid}/approve", {"hash": good[:-1]}, 422),
            ("POST", f"api/requests/{rid}/approve", {"hash": 7}, 422),
            ("POST", f"api/requests/{rid}/deny", {"hash": good, "reason": "x" * 2001}, 422),
            ("GET", "api/requests?state=everything", None, 422),
            ("GET", "api/requests?limit=0", None, 422),
            ("GET", "api/requests?stat=done", None, 422),
            ("GET", "api/audit", None, 422),
            ("GET", "api/audit?request=a%20b", None, 422),
            ("GET", "api/requests/20260101T000000-aaaaaaaaaaaa", None, 404),
        ]
        for method, path, body, code in cases:
            r = call(server, method, path, body)
            assert r.status_code == code, (path, body, r.status_code, r.text)
            assert r.json()["detail"]
        r = call(server, "POST", f"api/requests/{rid}/approve", {"hash": good},
                 headers={**server.headers, "Origin": "http://evil.example"})
        assert r.status_code == 403
        r = requests.post(server.url + f"api/requests/{rid}/approve", timeout=10,
                          data=json.dumps({"hash": good}),
                          headers={**server.headers, "Content-Type": "text/plain"})
        assert r.status_code == 422  # a form or a text body is no decision
        assert decided(repo) == []
        assert call(server, "GET", "api/requests?state=pending").json()[0]["id"] == rid
        assert not [r for r in audit_records(repo, rid) if r["event"] in ("approval", "denial")]
    finally:
        hook.kill()
        hook.wait()


def test_the_token_file_is_private_and_hidden_from_sandboxes(server: Server) -> None:
    path = server.token_file
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    home = os.path.expanduser("~")
    assert str(path.parent) == contract.web_dir(home)
    assert str(path.parent) in contract.private_paths(home)  # hidden in every sandbox
    assert len(server.token) >= 40


def test_a_token_file_others_can_read_is_refused(repo: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    token = state / "web" / "token"
    token.parent.mkdir(parents=True, mode=0o700)
    token.write_text("z" * 43 + "\n")
    token.chmod(0o640)
    e = {**env(), contract.STATE_DIR_ENV: str(state)}
    # the registry lives in the state folder too: the same repository, served from there
    subprocess.run([sys.executable, "-I", "-c", "import sys; from agent_sandbox.policy."
                    "registry import register; register(sys.argv[1], '/')", str(repo)],
                   env=e, check=True)
    p = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "serve", "--port", "0",
                        str(repo)], capture_output=True, text=True, env=e, timeout=60)
    assert p.returncode == 1 and "readable or writable by others" in p.stderr, p.stderr


def test_it_listens_on_loopback_only_unless_told(repo: Path) -> None:
    from agent_sandbox.web.server import Options, bind_refusal

    assert bind_refusal(Options([], host="127.0.0.1")) is None
    assert bind_refusal(Options([], host="::1")) is None
    assert "not a loopback address" in str(bind_refusal(Options([], host="0.0.0.0")))
    assert bind_refusal(Options([], host="0.0.0.0", insecure_bind=True)) is None
    assert bind_refusal(Options([], host="10.1.2.3", tls_cert="c.pem", tls_key="k.pem")) is None
    assert "go together" in str(bind_refusal(Options([], host="10.1.2.3", tls_cert="c.pem")))
    p = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "serve", "--host",
                        "0.0.0.0", "--port", "0", str(repo)], capture_output=True, text=True,
                       env=env(), timeout=60)
    assert p.returncode == 1 and "--insecure-bind" in p.stderr and "http" not in p.stdout


def test_nothing_of_the_web_stack_loads_for_the_hook_or_help() -> None:
    probe = ("import sys\n"
             "from agent_sandbox.cli.main import build_app\n"
             "import agent_sandbox.hooks.tool_call, agent_sandbox.web\n"
             "build_app()\n"
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
             "('fastapi', 'starlette', 'uvicorn', 'websockets'))\n"
             "print(bad)\n")
    p = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                       env=env(), timeout=60)
    assert p.stdout.strip() == "[]", p.stdout + p.stderr
    help_text = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "--help"],
                               capture_output=True, text=True, env=env(), timeout=60).stdout
    assert "serve" in help_text


def test_the_webhook_tells_of_an_escalation_without_its_command(repo: Path,
                                                                tmp_path: Path) -> None:
    import http.server
    import threading

    got: list[dict[str, Any]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    url_file = tmp_path / "webhook-url"
    url_file.write_text(f"http://127.0.0.1:{receiver.server_address[1]}/hook\n")
    url_file.chmod(0o600)
    server = start_server(repo, extra=("--webhook-file", str(url_file), "--public-url",
                                       "https://approvals.example.test/"))
    hook = start_hook("make deploy DEPLOY_TOKEN=hunter2-very-secret", repo)
    try:
        rid = wait_pending(repo)[0]
        import time

        end = time.monotonic() + 10
        while not got and time.monotonic() < end:
            time.sleep(0.02)
        assert len(got) == 1
        text = got[0]["text"]
        assert f"https://approvals.example.test/#request={rid}" in text
        assert "claude" in text and "bash" in text
        body = json.dumps(got[0])
        assert "hunter2" not in body and "make deploy" not in body and server.token not in body
    finally:
        hook.kill()
        hook.wait()
        server.stop()
        receiver.shutdown()
