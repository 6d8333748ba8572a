"""Helpers for the web approvals tests: a connected repository, ``sandbox serve`` as a
real subprocess on a free loopback port with its real token file, and the hook as a
real subprocess that escalates (Claude Code PreToolUse JSON)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from agent_sandbox import contract

# the approval tests' helpers; importing them also gives this session its own state
# folder (the registry of connected repositories, the token file)
from approval.conftest import claude_pre, decision_of, make_repo

__all__ = ["Server", "claude_pre", "decision_of", "make_repo", "start_hook", "wait_pending"]

PY = sys.executable


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}


@dataclass
class Server:
    url: str
    token: str
    token_file: Path
    proc: subprocess.Popen[str]
    errors: IO[str]  # the server's standard error (a file: a pipe never read could fill)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def ws_url(self) -> str:
        return "ws" + self.url[len("http"):] + "api/events"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.errors.seek(0)
        said = self.errors.read()
        self.errors.close()
        if said:  # shown with a failing test's report (an exception behind a 500)
            print(f"sandbox serve said:\n{said[-20000:]}", file=sys.stderr)


def start_server(*repos: Path, extra: tuple[str, ...] = (), port: int = 0) -> Server:
    proc = subprocess.Popen([PY, "-I", "-m", "agent_sandbox", "serve", "--port", str(port),
                             *extra, *map(str, repos)], stdout=subprocess.PIPE,
                            stderr=(errors := tempfile.TemporaryFile("w+")), text=True,
                            env=env())
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "token file" in line:
            break
    text = "".join(lines)
    url = re.search(r"(https?://\S+/) ", text)
    path = re.search(r"token file (\S+) ", text)
    if not (url and path):
        proc.kill()
        proc.wait(5)
        errors.seek(0)
        raise AssertionError(f"sandbox serve did not start: {text}{errors.read()}")
    token_file = Path(path.group(1))
    server = Server(url.group(1), token_file.read_text().strip(), token_file, proc, errors)
    import requests

    while time.monotonic() < deadline:  # bound before the banner: answers at once
        try:
            requests.get(server.url + "api/status", headers=server.headers, timeout=2)
            return server
        except requests.ConnectionError:
            time.sleep(0.05)
    server.stop()
    raise AssertionError("sandbox serve never answered")


def mac(token: str, label: str, *parts: str) -> str:
    """The login's proofs, computed as the dashboard computes them."""
    import hashlib
    import hmac

    return hmac.new(token.encode(), "|".join((label, *parts)).encode(),
                    hashlib.sha256).hexdigest()


def login(server: Server, token: str | None = None) -> str:
    """A dashboard session, by challenge and answer, checking the server's proof first."""
    import secrets

    import requests

    from agent_sandbox.web.login import CLIENT, SERVER

    token = server.token if token is None else token
    origin = server.url.rstrip("/")
    nonce = secrets.token_urlsafe(32)
    r = requests.post(server.url + "api/login/challenge", timeout=10,
                      json={"origin": origin, "client_nonce": nonce})
    assert r.status_code == 200, r.text
    sn, proof = r.json()["server_nonce"], r.json()["server_proof"]
    assert proof == mac(token, SERVER, origin, sn, nonce)  # the server holds the token
    r = requests.post(server.url + "api/login", timeout=10, json={
        "server_nonce": sn, "proof": mac(token, CLIENT, origin, sn, nonce)})
    assert r.status_code == 200, r.text
    return str(r.json()["session"])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def server(repo: Path) -> Iterator[Server]:
    s = start_server(repo)
    try:
        yield s
    finally:
        s.stop()


def start_hook(command: str, repo: Path) -> subprocess.Popen[bytes]:
    """The hook as Claude Code runs it, fed one Bash call that escalates."""
    p = subprocess.Popen(contract.hook_argv(PY, "claude", "pre-tool-use"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env())
    assert p.stdin
    p.stdin.write(json.dumps(claude_pre(command, repo)).encode())
    p.stdin.close()
    p.stdin = None
    return p


def wait_pending(repo: Path, n: int = 1, timeout: float = 20) -> list[str]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ids = sorted(p.stem for p in (repo / ".sandbox/escalations/pending").glob("*.json"))
        if len(ids) >= n:
            return ids
        time.sleep(0.01)
    raise AssertionError("no pending request appeared")


def hook_result(hook: subprocess.Popen[bytes], timeout: float = 60) -> tuple[str, str]:
    out, err = hook.communicate(timeout=timeout)
    assert hook.returncode == 0, err
    return decision_of(subprocess.CompletedProcess([], 0, out, err))


def audit_records(repo: Path, rid: str) -> list[dict[str, Any]]:
    lines = (repo / ".sandbox/audit/audit.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("request_id") == rid]
