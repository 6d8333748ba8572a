"""The connector proven with the real Claude Code, Codex CLI and Gemini CLI.

Each client runs in a repository prepared only by the README's own quick start
(its ``sandbox init`` line, read from the README), against the scripted model
server. Every outcome is judged from the host: marker files, a loopback
listener that counts connections, the bytes of protected files, the approval
queue, the audit log and what the next request to the model contained.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from .harness import CLIENTS, SECRET, World
from .model_server import Mcp, ModelServer, Shell, WriteFile

HOOK_CONFIG = {"claude": ".claude/settings.json", "codex": ".codex/hooks.json",
               "gemini": ".gemini/settings.json"}


class Listener:
    """A loopback TCP listener that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.hits = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.stop = True
        self.thread.join(2)
        self.sock.close()


def readme_init() -> list[str]:
    """The README's quick-start ``sandbox init`` line, as a newcomer types it."""
    readme = Path(__file__).resolve().parents[2] / "README.md"
    line = next(ln for ln in readme.read_text().splitlines()
                if ln.startswith("sandbox init . "))
    words = line.split("#", 1)[0].split()
    assert words[:2] == ["sandbox", "init"] and "--trust" in words, line
    return words[1:]


def init(world: World, client: str) -> None:
    """Exactly the README's command, in the repository (its ``.``): every client
    it names is connected, this one among them, and init exits 0 only when
    each of them will run the hooks."""
    args = [str(world.repo) if w == "." else w for w in readme_init()]
    assert f"--{client}" in args
    world.sandbox(*args)


def refused(result: str) -> bool:
    """The model was told the call was refused (by our hook, or by the client's
    own rendered deny rules, which fire first in Claude Code)."""
    text = result.lower()
    return "agent-sandbox" in text or "denied" in text or "protected" in text


def audit_events(world: World) -> list[dict[str, object]]:
    log = world.repo / ".sandbox" / "audit" / "audit.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("client", CLIENTS)
def test_allow_deny_self_protection_mcp_and_uninstall(world: World, client: str) -> None:
    listener = Listener()
    hook_config = HOOK_CONFIG[client]
    tamper = (WriteFile(str(world.repo / hook_config), "{}") if client != "codex"
              else Shell(f"echo '{{}}' > {hook_config}"))
    steps = [
        Shell("echo allowed > marker-allowed.txt"),
        Shell("cat ~/.ssh/id_ed25519 > leaked.txt"),
        Shell(f"curl -s http://localhost:{listener.port}/ -o curl-out.txt"),
        tamper,
        Shell("echo '{}' > .sandbox/policy.json"),
        Mcp("sandbox_status"),
        Mcp("check_request", {"request_id": "20260101T000000-000000000000"}),
    ]
    try:
        with ModelServer(steps) as model:
            world.configure(client, model.url)
            home_before = world.snapshot_home()
            init(world, client)
            protected = {p: (world.repo / p).read_bytes()
                         for p in (hook_config, ".sandbox/policy.json")}
            run = world.run(client, model.url)
            results = model.results()
    finally:
        listener.close()
    detail = f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n{model.errors}"
    assert not model.errors, detail
    assert len(results) == len(steps), detail
    # allowed: it ran
    assert (world.repo / "marker-allowed.txt").read_text() == "allowed\n", detail
    # denied read: nothing leaked, and the model was told why
    leaked = world.repo / "leaked.txt"
    assert not leaked.exists() or SECRET not in leaked.read_text()
    assert "deny_read" in results[1] and "agent-sandbox" in results[1], results[1]
    # denied host: no connection reached the listener, and the model was told why
    assert listener.hits == 0
    assert "denied_domains" in results[2], results[2]
    # self-protection: hook configuration and .sandbox/ unchanged
    for path, data in protected.items():
        assert (world.repo / path).read_bytes() == data, path
    assert refused(results[3]), results[3]
    assert refused(results[4]), results[4]
    # our MCP server: listed, and its two read-only tools answer
    assert any(name.endswith("sandbox_status") for name in model.tool_names())
    assert "default_verdict" in results[5], results[5]
    assert "no request 20260101T000000-000000000000" in results[6], results[6]
    # the audit holds the denials
    denials = [e for e in audit_events(world) if e.get("event") == "denial"]
    assert len(denials) >= 3, denials  # Claude Code refuses the settings write itself
    # uninstall: every file init touched, inside and outside the repository, restored
    world.sandbox("uninstall", str(world.repo))
    for rel in (".claude", ".codex", ".gemini", ".mcp.json"):
        assert not (world.repo / rel).exists(), rel
    home_after = world.snapshot_home()
    for rel in (".codex/config.toml", ".gemini/settings.json",
                ".gemini/trustedFolders.json"):
        assert home_after.get(rel) == home_before.get(rel), rel


class Approver:
    """Answers pending requests in order with the given decisions, through the
    CLI a human would use (``sandbox approve`` / ``sandbox deny``)."""

    def __init__(self, world: World, decisions: list[str], *, host_site: bool = False) -> None:
        """``host_site``: the requests wait in the user's host-level queue (a fleet
        host, no ``sandbox init``) instead of the repository's."""
        self.world, self.decisions = world, list(decisions)
        self.pending = ((world.state if host_site
                         else world.repo / ".sandbox") / "escalations" / "pending")
        self.answered: list[tuple[str, str]] = []
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        pending = self.pending
        while not self.stop and self.decisions:
            files = sorted(pending.glob("*.json")) if pending.is_dir() else []
            for f in files:
                rid = f.stem
                if any(rid == a for a, _ in self.answered):
                    continue
                decision = self.decisions.pop(0)
                if decision == "approve":
                    self.world.sandbox("approve", str(self.world.repo), rid)
                else:
                    self.world.sandbox("deny", str(self.world.repo), rid, "--reason",
                                       "not this branch")
                self.answered.append((rid, decision))
                break
            time.sleep(0.2)

    def close(self) -> None:
        self.stop = True
        self.thread.join(10)


@pytest.mark.parametrize("client", CLIENTS)
def test_escalation_waits_runs_once_after_approve_and_never_after_deny(
        world: World, client: str) -> None:
    remote = world.repo / "remote.git"
    steps = [Shell(f"git push {remote} HEAD:refs/heads/approved"),
             Shell(f"git push {remote} HEAD:refs/heads/denied")]
    with ModelServer(steps) as model:
        world.configure(client, model.url)
        init(world, client)
        import subprocess

        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        approver = Approver(world, ["approve", "deny"])
        try:
            run = world.run(client, model.url)
        finally:
            approver.close()
        results = model.results()
    detail = f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n{model.errors}"
    assert [d for _, d in approver.answered] == ["approve", "deny"], detail
    refs = subprocess.run(["git", "--git-dir", str(remote), "for-each-ref",
                           "--format=%(refname)"], capture_output=True, text=True).stdout
    assert "refs/heads/approved" in refs, (refs, results, detail)
    assert "refs/heads/denied" not in refs, refs
    # the approved run's result reached the model; the denial's reason too
    assert len(results) == 2, detail
    assert "exit status: 0" in results[0], results[0]
    assert "not this branch" in results[1] or "denied" in results[1], results[1]
    done = sorted((world.repo / ".sandbox/escalations/done").glob("*.json"))
    statuses = sorted(json.loads(p.read_text()).get("status") for p in done)
    assert statuses == ["completed", "denied"], statuses



# Started in the client's own mount namespace (``World.wrap``): a resident serves
# only peers confined exactly as itself.
RESIDENT_FIRST = (
    "import os, subprocess, sys, time\n"
    "from agent_sandbox.mcp_launch import resident_dir, resident_file\n"
    "os.makedirs(resident_dir(), mode=0o700, exist_ok=True)\n"
    "subprocess.Popen([sys.executable, '-I', '-m', 'agent_sandbox', 'mcp', '--resident'],\n"
    "                 cwd='/', start_new_session=True, stdin=subprocess.DEVNULL,\n"
    "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "log = resident_file('.log')\n"
    "end = time.monotonic() + 60\n"
    "while time.monotonic() < end and not (os.path.exists(log)\n"
    "                                      and 'listening on' in open(log).read()):\n"
    "    time.sleep(0.05)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n")


def resident_log(world: World) -> Path:
    """The resident's log in this world's state folder (one per installation)."""
    from agent_sandbox.mcp_launch import resident_file

    name = Path(resident_file(".log")).name
    return world.state / "mcp" / name


@pytest.mark.parametrize("client", CLIENTS)
def test_mcp_session_through_the_resident_server(world: World, client: str) -> None:
    """The real client's MCP session handed to this user's resident server: it
    lists and calls our tools exactly as from a cold start."""
    if client == "codex":
        pytest.skip("Codex passes its MCP servers a fixed set of variables, so their "
                    "launcher looks in the account's own state folder, never used here")
    import subprocess
    import sys

    steps = [Mcp("sandbox_status"),
             Mcp("check_request", {"request_id": "20260101T000000-000000000000"})]
    with ModelServer(steps) as model:
        world.configure(client, model.url)
        init(world, client)
        try:
            run = subprocess.run(world.wrap([sys.executable, "-I", "-c", RESIDENT_FIRST,
                                             *world.argv(client)]),
                                 cwd=world.repo, env=world.env(client, model.url),
                                 stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=240)
        except subprocess.TimeoutExpired as exc:
            log = resident_log(world)
            raise AssertionError(f"{exc.stdout!r} {exc.stderr!r} "
                                 f"{log.read_text() if log.exists() else ''}") from None
        results = model.results()
    log = resident_log(world).read_text()
    detail = (f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}\n"
              f"{model.errors}\n{log}")
    assert not model.errors, detail
    assert "session " in log and str(world.repo) in log, detail  # served warm
    assert "refused" not in log, detail
    assert len(results) == 2, detail
    assert "default_verdict" in results[0], results[0]
    assert "no request 20260101T000000-000000000000" in results[1], results[1]
