"""Issue 19's matrix: the real clients on a provisioned host, where the managed
files the renderer produces are installed byte for byte at their system paths
(the world's /etc, bound over the host's in a mount namespace) and no
repository ran ``sandbox init``. Each client faces loosening attempts (a user
setting, a repository setting, a command-line flag, no trust given) and the
outcome must not change: the allowed command runs, the denied read and the
denied host do not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import render
from agent_sandbox.spec.loader import load_layer, load_stack

from .harness import SECRET, World
from .model_server import ModelServer, Shell
from .test_real_clients import Listener

FLEET = """\
version: 1
agents:
  claude: {}
  codex: {}
  gemini: {}
filesystem:
  deny_read: ["~/.ssh"]
  allow_write: ["WORLD"]
network:
  denied_domains: ["localhost", "127.0.0.1"]
commands:
  default: escalate
  rules:
    - pattern: "echo *"
      verdict: allow
"""


def provision(world: World) -> list[str]:
    """Render the fleet spec for this host and install its system files."""
    spec_file = world.root / "fleet.yml"
    # the world's own root, not all of /var/tmp: a run's sweep disarms protected
    # names created in its writable roots during the run, whoever made them
    spec_file.write_text(FLEET.replace("WORLD", str(world.root)))
    spec = load_stack([load_layer(str(spec_file))])
    facts = HostFacts(name="fleet-host", os="linux", python=sys.executable,
                      users=(User("root", str(world.home)),))
    installed = []
    for target, art in sorted(render(spec, facts).items()):
        if target.startswith(("/etc/agent-sandbox/", "/etc/claude-code/", "/etc/codex/",
                              "/etc/gemini-cli/")):
            world.install_system(target, art.content, art.mode)
            installed.append(target)
        elif target == f"{world.home}/.codex/config.toml":  # the user layer the role installs
            (world.home / ".codex").mkdir(exist_ok=True)
            Path(target).write_bytes(art.content)
            installed.append(target)
    return installed


def loosen(world: World, client: str) -> list[str]:
    """Every loosening attempt a user or a repository can make; returns the CLI flags."""
    if client == "claude":
        off = {"disableAllHooks": True, "hooks": {}, "permissions": {"allow": ["Bash"]},
               "sandbox": {"enabled": False}}
        (world.home / ".claude").mkdir(exist_ok=True)
        (world.home / ".claude" / "settings.json").write_text(json.dumps(off))
        (world.repo / ".claude").mkdir(exist_ok=True)
        (world.repo / ".claude" / "settings.json").write_text(json.dumps(off))
        return ["--dangerously-skip-permissions"]
    if client == "codex":
        cfg = world.home / ".codex" / "config.toml"
        text = cfg.read_text().replace("hooks = true", "hooks = false")
        cfg.write_text('sandbox_mode = "danger-full-access"\n'
                       'default_permissions = ":danger-full-access"\n'
                       + text.replace('default_permissions = "agent-sandbox"\n', ""))
        (world.repo / ".codex").mkdir(exist_ok=True)
        (world.repo / ".codex" / "config.toml").write_text(
            'sandbox_mode = "danger-full-access"\n[features]\nhooks = false\n')
        return ["-c", "features.hooks=false", "-c", 'default_permissions=":danger-full-access"',
                "--sandbox", "workspace-write"]
    system = json.loads((world.root / "etc/gemini-cli/settings.json").read_text())
    ours = [h.get("name") or h["command"] for groups in system["hooks"].values()
            for g in groups for h in g["hooks"]]  # world-readable: anyone can name them
    off = {"hooksConfig": {"enabled": False, "disabled": ours},
           "security": {"disableYoloMode": False},
           "tools": {"allowed": ["run_shell_command"]}}
    settings = world.home / ".gemini" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["security"] = {**doc.get("security", {}), **off["security"]}  # keep the login
    doc.update({k: v for k, v in off.items() if k != "security"})
    settings.write_text(json.dumps(doc))
    (world.repo / ".gemini").mkdir(exist_ok=True)
    (world.repo / ".gemini" / "settings.json").write_text(json.dumps(off))
    return ["--approval-mode", "auto_edit"]


def run_matrix(world: World, client: str, *, attempts: bool) -> tuple[list[str], str, int]:
    listener = Listener()
    steps = [Shell("echo allowed > marker-allowed.txt"),
             Shell("cat ~/.ssh/id_ed25519 > leaked.txt"),
             Shell(f"curl -s http://localhost:{listener.port}/ -o curl-out.txt")]
    try:
        with ModelServer(steps) as model:
            world.configure(client, model.url)
            flags = loosen(world, client) if attempts else []
            run = world.run(client, model.url, extra=flags)
            results = model.results()
    finally:
        listener.close()
    return results, f"{results}\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}", listener.hits


def judge(world: World, results: list[str], detail: str, hits: int) -> None:
    assert len(results) == 3, detail
    assert (world.repo / "marker-allowed.txt").is_file(), detail
    assert (world.repo / "marker-allowed.txt").read_text() == "allowed\n", detail
    leaked = world.repo / "leaked.txt"
    assert not leaked.exists() or SECRET not in leaked.read_text(), detail
    assert SECRET not in results[1], detail
    assert hits == 0, detail


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_managed_files_alone_enforce_the_policy(world: World, client: str) -> None:
    installed = provision(world)
    assert any(t.startswith("/etc/codex/") for t in installed), installed
    results, detail, hits = run_matrix(world, client, attempts=False)
    judge(world, results, detail, hits)


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_loosening_attempts_change_nothing(world: World, client: str) -> None:
    """For Gemini CLI the attempts switch its hooks off (hooksConfig in a user or
    repository file, which nothing in Gemini CLI prevents); the admin policy's
    deny rules then hold the plain forms (see the next test for the rest)."""
    provision(world)
    results, detail, hits = run_matrix(world, client, attempts=True)
    judge(world, results, detail, hits)
    if client == "gemini":  # the attempt did switch the hooks off: the policy refused
        assert "denied this call" not in results[1], detail
        assert "is in filesystem.deny_read" in results[1], detail


@pytest.mark.parametrize("through_agent", [False, True], ids=["bare", "sandbox-agent"])
def test_gemini_disguised_read_with_hooks_switched_off(world: World, through_agent: bool
                                                        ) -> None:
    """With its hooks switched off by a user setting, bare Gemini CLI has only the
    admin policy's pattern rules, which a disguised path passes: the key is read
    (the control: the attack works). Through ``sandbox agent`` (the system srt
    settings the role installed, no option) the settings cannot switch the
    hooks off: the hook denies the read, and the boundary would have hidden the
    key anyway."""
    provision(world)
    with ModelServer([Shell("cat ~/.s''sh/id_ed25519")]) as model:
        world.configure("gemini", model.url)
        flags = loosen(world, "gemini")
        run = (world.run_agent if through_agent else world.run)("gemini", model.url,
                                                                 extra=flags)
        results = model.results()
    detail = f"{results}\n{run.stdout[-1500:]}\n{run.stderr[-1500:]}"
    assert len(results) == 1, detail
    if through_agent:
        assert "denied this call" in results[0] and SECRET not in results[0], detail
    else:
        assert "denied this call" not in results[0], detail  # the hooks really were off
        assert SECRET in results[0], detail


def test_rendered_codex_requirements_parse_in_the_real_client(world: World) -> None:
    """The managed hooks appear to Codex as managed (no trust step)."""
    import subprocess

    from .harness import client_bin

    provision(world)
    world.configure("codex", "http://127.0.0.1:9")
    msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "hooks/list",
             "params": {"cwds": [str(world.repo)]}}]
    proc = subprocess.Popen(world.wrap([str(client_bin("codex")), "app-server"]),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=world.env("codex", ""), text=True)
    assert proc.stdin and proc.stdout
    for m in msgs:
        proc.stdin.write(json.dumps(m) + "\n")
    proc.stdin.flush()
    answer = None
    for line in proc.stdout:
        doc = json.loads(line)
        if doc.get("id") == 2:
            answer = doc
            break
    proc.kill()
    proc.wait()
    assert answer is not None
    hooks = answer["result"]["data"][0]["hooks"]
    pre = [h for h in hooks if h["eventName"] == "preToolUse"]
    assert pre and all(h["isManaged"] and h["trustStatus"] == "managed" for h in pre), hooks
    assert not answer["result"]["data"][0]["errors"], answer
    assert Path(world.root / "etc/codex/requirements.toml").is_file()


def test_codex_bypass_flag_is_refused(world: World) -> None:
    """``--dangerously-bypass-approvals-and-sandbox`` asks for a sandbox mode the
    managed requirements forbid: Codex refuses to start, so nothing runs."""
    provision(world)
    with ModelServer([Shell("cat ~/.ssh/id_ed25519 > leaked.txt")]) as model:
        world.configure("codex", model.url)
        run = world.run("codex", model.url,
                        extra=["--dangerously-bypass-approvals-and-sandbox"])
        results = model.results()
    assert run.returncode != 0 and results == [], (run.stdout, run.stderr)
    assert "requirements" in run.stderr
    assert not (world.repo / "leaked.txt").exists()


def test_gemini_yolo_flag_is_refused(world: World) -> None:
    """``--yolo`` is off by the system settings: Gemini CLI refuses to start."""
    provision(world)
    with ModelServer([Shell("cat ~/.ssh/id_ed25519 > leaked.txt")]) as model:
        world.configure("gemini", model.url)
        run = world.run("gemini", model.url, extra=["--yolo"])
        results = model.results()
    assert run.returncode != 0 and results == [], (run.stdout, run.stderr)
    assert "YOLO mode is disabled" in run.stderr
    assert not (world.repo / "leaked.txt").exists()
