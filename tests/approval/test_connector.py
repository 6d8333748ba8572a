"""sandbox init / uninstall: what is written, idempotence, byte-for-byte restore."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest


def sandbox(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def connected(p: subprocess.CompletedProcess[str]) -> bool:
    """Installed: enforcing (0), or installed but for a client that skips the hooks
    until it is trusted (3, naming the one command that completes it)."""
    return p.returncode == 0 or (p.returncode == 3 and "--trust" in p.stderr
                                 and "not enforcing" in p.stderr)


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() or p.is_symlink():
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(),
                                             p.stat().st_mode)
        else:
            out[str(p.relative_to(root)) + "/"] = ("dir", p.stat().st_mode)
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".claude").mkdir(parents=True)
    (root / ".claude/settings.json").write_text(
        '{\n "model": "opus",\n "permissions": {"allow": ["Bash(make *)"]}\n}')
    os.chmod(root / ".claude/settings.json", 0o600)
    (root / ".cursor").mkdir()
    (root / ".cursor/mcp.json").write_text('{"mcpServers": {"mine": {"command": "x"}}}')
    (root / "src").mkdir()
    (root / "src/main.py").write_text("print('hi')\n")
    return root


def test_init_installs_hooks_with_an_absolute_interpreter(project: Path) -> None:
    p = sandbox("init", str(project), "--claude", "--codex", "--cursor", "--gemini", "--mcp")
    assert connected(p), p.stderr
    sb = project / ".sandbox"
    for d in ("escalations/pending", "escalations/claimed", "escalations/done", "audit",
              "originals", "state"):
        assert (sb / d).is_dir()
    policy = json.loads((sb / "policy.json").read_text())
    assert policy["commands"]["default"] == "escalate"
    settings = json.loads((project / ".claude/settings.json").read_text())
    assert settings["model"] == "opus"                         # theirs kept
    assert "Bash(make *)" in settings["permissions"]["allow"]
    cmds = [h["command"] for groups in settings["hooks"].values() for g in groups
            for h in g["hooks"]]
    assert cmds and all(c.startswith(f'"{sys.executable}" -I -c "from agent_sandbox.cli.entry '
                                     'import hook; hook()" claude ') for c in cmds)
    assert os.path.isabs(sys.executable)
    from third_party import schema as third_party

    schema = third_party("claude-code", "claude-code-settings.schema.json")
    jsonschema.validate(settings, schema)
    codex_hooks = json.loads((project / ".codex/hooks.json").read_text())
    jsonschema.validate(codex_hooks, json.loads(
        json.dumps(third_party("codex", "codex-hooks.schema.json"))))
    codex_mcp = tomllib.loads((project / ".codex/config.toml").read_text())["mcp_servers"][
        "agent-sandbox"]
    assert "mcp" in codex_mcp["args"]
    # required, with more than Codex's default 10 s to answer on a busy host
    assert codex_mcp["required"] is True and codex_mcp["startup_timeout_sec"] == 30
    cursor_mcp = json.loads((project / ".cursor/mcp.json").read_text())
    assert set(cursor_mcp["mcpServers"]) == {"mine", "agent-sandbox"}
    mcp = json.loads((project / ".mcp.json").read_text())["mcpServers"]["agent-sandbox"]
    assert mcp["command"] == sys.executable and mcp["args"][-1] == str(project)
    assert (sb / "originals/.claude/settings.json").read_text().startswith('{\n "model"')
    gem = json.loads((project / ".gemini/settings.json").read_text())
    assert gem["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"] >= 1000  # milliseconds


def test_second_init_changes_nothing(project: Path) -> None:
    assert sandbox("init", str(project), "--claude", "--cursor", "--mcp").returncode == 0
    before = snapshot(project)
    p = sandbox("init", str(project), "--claude", "--cursor", "--mcp")
    assert p.returncode == 0 and "nothing to change" in p.stdout
    assert snapshot(project) == before


def test_uninstall_restores_byte_for_byte(project: Path) -> None:
    before = snapshot(project)
    assert connected(sandbox("init", str(project), "--claude", "--codex", "--cursor",
                             "--gemini", "--mcp"))
    assert snapshot(project) != before
    p = sandbox("uninstall", str(project))
    assert p.returncode == 0, p.stderr
    assert snapshot(project) == before


def test_bad_input_is_one_clear_line(tmp_path: Path, project: Path) -> None:
    p = sandbox("init", str(tmp_path / "missing"))
    assert p.returncode == 1 and "not a directory" in p.stderr and "Traceback" not in p.stderr
    (project / ".cursor/mcp.json").write_text("{ not json")
    before = snapshot(project)
    p = sandbox("init", str(project), "--cursor")
    assert p.returncode == 1 and "not valid JSON" in p.stderr
    assert snapshot(project) == before
    p = sandbox("uninstall", str(tmp_path))
    assert p.returncode == 1 and "no connector" in p.stderr


def test_init_imports_codex_and_claude_rules(project: Path) -> None:
    (project / ".claude/settings.json").write_text(json.dumps(
        {"permissions": {"deny": ["Bash(terraform destroy *)", "Read(./secrets/**)"],
                         "ask": ["Bash(kubectl *)"], "allow": ["Bash(*)"]}}))
    (project / "team.rules").write_text(
        'prefix_rule(pattern=["git", ["push", "reset"]], decision="prompt",\n'
        '            justification="history changes need a human")\n'
        'prefix_rule(pattern=["shutdown"], decision="forbidden")\n')
    (project / ".sandbox").mkdir()
    (project / ".sandbox/policy.yml").write_text(
        "version: 1\nfilesystem:\n  allow_write: ['.']\ncommands:\n"
        "  codex_rules_files: ['team.rules']\n  rules:\n"
        "    - claude: 'Bash(ls *)'\n      verdict: allow\n")
    assert sandbox("init", str(project), "--claude").returncode == 0
    from agent_sandbox.policy.decision import Call
    from agent_sandbox.policy.engine import Policy

    doc = json.loads((project / ".sandbox/policy.json").read_text())
    p = Policy(doc, repo=str(project), home=str(project))

    def v(cmd: str) -> str:
        return p.classify(Call("bash", "Bash", {}, str(project), command=cmd)).verdict.value

    assert v("ls -la") == "allow"
    assert v("git push origin") == "escalate"
    assert v("shutdown -h now") == "deny"
    assert v("terraform destroy -auto-approve") == "deny"
    assert v("kubectl get pods") == "escalate"
    assert v("echo hi") == "escalate"           # Bash(*) allow was not imported
    assert p.classify(Call("read", "Read", {}, str(project),
                           paths=("secrets/key.pem",))).verdict.value == "deny"


def test_trust_is_recorded_and_taken_back_byte_for_byte(tmp_path: Path) -> None:
    """``--trust`` writes Codex project and hook trust and Gemini folder trust into
    the user's own files; uninstall restores those files exactly (a comment and
    the user's own keys included) and removes the file init created."""
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    original = b'# my settings\nmodel = "o3"\n\n[projects."/elsewhere"]\ntrust_level = "trusted"\n'
    (home / ".codex" / "config.toml").write_bytes(original)
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(HOME=str(home))
    env.pop("CODEX_HOME", None)

    def run(*args: str) -> None:
        r = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", *args],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr

    run("init", str(repo), "--codex", "--gemini", "--trust")
    cfg = tomllib.loads((home / ".codex" / "config.toml").read_text())
    real = os.path.realpath(repo)
    assert cfg["model"] == "o3" and cfg["projects"]["/elsewhere"]["trust_level"] == "trusted"
    assert cfg["projects"][real]["trust_level"] == "trusted"
    states = cfg["hooks"]["state"]
    assert {k.rsplit(":", 3)[1] for k in states} == {"pre_tool_use", "post_tool_use",
                                                      "session_start"}
    assert all(v["trusted_hash"].startswith("sha256:") for v in states.values())
    assert json.loads((home / ".gemini" / "trustedFolders.json").read_text()) == {
        real: "TRUST_FOLDER"}
    state = json.loads((repo / ".sandbox/state/installed.json").read_text())
    assert {r["path"] for r in state["trust"]} == {
        str(home / ".codex" / "config.toml"), str(home / ".gemini" / "trustedFolders.json")}
    run("init", str(repo), "--codex", "--gemini", "--trust")  # twice: the first original wins
    run("uninstall", str(repo))
    assert (home / ".codex" / "config.toml").read_bytes() == original
    assert not (home / ".gemini").exists()  # init created the folder: gone again


def test_without_trust_nothing_is_written_outside_the_repository(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(HOME=str(home))
    r = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "init", str(repo),
                        "--codex", "--gemini"], capture_output=True, text=True, env=env)
    # installed, and init says which clients skip the hooks until trusted
    assert r.returncode == 3, r.stderr
    assert f"run `sandbox init --codex --gemini --trust {os.path.realpath(repo)}`" in \
        r.stderr.replace("\n", " "), r.stderr
    # the sandbox settings live in the repository's .sandbox/, nothing in the home
    assert (repo / ".sandbox" / "srt-settings.json").is_file()
    assert [p.name for p in home.rglob("*") if p.is_file()] == []
    r = subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", "uninstall", str(repo)],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert [p for p in home.rglob("*") if p.is_file()] == []
