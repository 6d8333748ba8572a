"""``sandbox mcp DIR`` spoken to in raw JSON-RPC over stdio, as a client does.

The server imports the SDK with pydantic's ``defer_build`` on (its protocol
models are built on first use): these cases prove that deferral changes when a
model is built, never what it accepts, that it stays confined to the SDK's
import, and that a broken policy still fails every call closed.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import make_repo

ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
PROTOCOL = "2025-06-18"


class Session:
    """One ``sandbox mcp`` process, spoken to line by line."""

    def __init__(self, repo: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox", "mcp",
                                      str(repo)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
        self.buf = b""
        self.next_id = 0

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin
        self.proc.stdin.write(json.dumps(obj).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout
        fd = self.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                msg: dict[str, Any] = json.loads(line)
                if msg.get("id") == self.next_id:
                    return msg
            assert select.select([fd], [], [], 60)[0], f"no answer to {method}"
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the server exited: its stderr says why
                err = self.proc.stderr.read() if self.proc.stderr else b""
                raise AssertionError(f"the server exited: {err!r}")
            self.buf += chunk

    def start(self) -> dict[str, Any]:
        init = self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                           "clientInfo": {"name": "test", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return init

    def call(self, tool: str, args: Any) -> tuple[bool, str]:
        """(is an error, text) of a tools/call; a protocol error counts as an error."""
        msg = self.request("tools/call", {"name": tool, "arguments": args})
        if "error" in msg:
            return True, str(msg["error"])
        res = msg["result"]
        return bool(res.get("isError")), "".join(c.get("text", "") for c in res["content"])

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def test_deferred_models_reject_what_they_always_rejected(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    s = Session(repo)
    try:
        bad = s.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": "none",
                                       "clientInfo": {"name": "test"}})
        assert "error" in bad and "result" not in bad, bad
        good = s.start()  # control: the same request, well formed, is answered
        assert good["result"]["serverInfo"]["name"] == "agent-sandbox", good
        tools = s.request("tools/list", {})["result"]["tools"]
        schema = {t["name"]: t["inputSchema"] for t in tools}["run_privileged"]
        assert schema["properties"]["command"]["type"] == "string"
        for args in ({"command": ["ls", "-a"]}, {"command": "ls -a", "wait_seconds": "soon"},
                     {}):
            failed, text = s.call("run_privileged", args)
            assert failed and ".sandbox" not in text, (args, text)
        failed, text = s.call("run_privileged", {"command": "ls -a"})  # control
        assert not failed and ".sandbox" in text and "exit status: 0" in text, text
        failed, text = s.call("no_such_tool", {})
        assert failed, text
    finally:
        s.close()


def test_a_broken_policy_fails_every_call_closed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    policy = repo / ".sandbox" / "policy.json"
    marker = repo / "ran.txt"
    command = f"ls -a > {marker}"
    s = Session(repo)
    try:
        s.start()
        failed, text = s.call("run_privileged", {"command": command})  # control: it runs
        assert not failed and marker.exists(), text
        marker.unlink()
        os.chmod(policy, 0o600)
        policy.write_text('{"rules": [')
        for tool, args in (("run_privileged", {"command": command}),
                           ("run_privileged", {"command": command, "wait_seconds": 0}),
                           ("sandbox_status", {})):
            failed, text = s.call(tool, args)
            assert failed and "cannot load" in text, (tool, text)
        assert not marker.exists()
        assert not list((repo / ".sandbox" / "escalations" / "pending").iterdir())
    finally:
        s.close()


def test_deferral_is_confined_to_the_sdk_import() -> None:
    code = (
        "from agent_sandbox.mcp_server import _sdk_server_class\n"
        "_sdk_server_class()\n"
        "import mcp_types\n"
        "from pydantic import BaseModel\n"
        "class Later(BaseModel):\n"
        "    x: int\n"
        "print(mcp_types.InitializeResult.__pydantic_complete__, Later.__pydantic_complete__,"
        " 'defer_build' in BaseModel.model_config)\n"
        "mcp_types.InitializeResult.model_validate({'protocolVersion': '1', 'capabilities': {},"
        " 'serverInfo': {'name': 'a', 'version': '1'}})\n"
        "print(mcp_types.InitializeResult.__pydantic_complete__)\n")
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                         env=ENV, check=True).stdout.split()
    # deferred at import, built on first use; a model defined afterwards is built at once
    assert out == ["False", "True", "False", "True"], out
