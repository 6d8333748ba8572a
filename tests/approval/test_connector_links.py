"""sandbox init / uninstall never go through a link inside the repository.

A sandboxed command can leave a link where init or uninstall expects a folder
(``.codex`` pointing at the user's own ``~/.codex``). Judged from the host: the
folder the link points at is byte- and mode-identical afterwards, nothing of it
was copied into the repository, init or uninstall said why they refused, and
the repository itself was left as it was."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

SECRET = b"SECRET-7f3a9c"
AGENTS = ("--claude", "--codex", "--cursor", "--gemini", "--mcp", "--trust")
LINKED = (".gemini", ".codex", ".claude", ".cursor", ".vscode", ".sandbox",
          ".sandbox/originals")


def sandbox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(HOME=str(home))
    env.pop("CODEX_HOME", None)
    return subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Everything under ``root`` as lstat sees it, links never followed."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            p = os.path.join(folder, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", st.st_mode, os.readlink(p).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, b"")
            else:
                out[rel] = ("file", st.st_mode, Path(p).read_bytes())
    return out


def secret_copies(root: Path) -> list[str]:
    return [rel for rel, (kind, _, data) in tree(root).items()
            if kind == "file" and SECRET in data]


def victim_folder(tmp_path: Path) -> Path:
    """The user's own folder (``~/.codex`` and the like): what init would read,
    merge into and copy if it went through a link to it."""
    v = tmp_path / "victim"
    (v / ".claude").mkdir(parents=True)
    token = SECRET.decode()
    (v / "secret").write_bytes(SECRET + b"\n")
    (v / "settings.json").write_text(json.dumps({"apiKey": token}))
    (v / "mcp.json").write_text(json.dumps({"mcpServers": {}, "token": token}))
    (v / "hooks.json").write_text(json.dumps({"token": token}))
    (v / "config.toml").write_text(f'model = "o3"\ntoken = "{token}"\n')
    (v / ".claude" / "settings.json").write_text(json.dumps({"model": token}))
    for p in v.rglob("*"):
        os.chmod(p, 0o700 if p.is_dir() else 0o600)
    os.chmod(v / "secret", 0o400)
    return v


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".claude").mkdir(parents=True)
    (root / ".claude/settings.json").write_text('{"model": "opus"}')
    (root / ".cursor").mkdir()
    (root / ".cursor/mcp.json").write_text('{"mcpServers": {"mine": {"command": "x"}}}')
    (root / "main.py").write_text("print('hi')\n")
    (tmp_path / "home").mkdir()
    return root


def plant(project: Path, linked: str, victim: Path) -> None:
    """What a sandboxed command can do in a repository it may write."""
    path = project / linked
    if path.is_dir() and not path.is_symlink():
        os.rename(path, project / f"moved-{linked.replace('/', '-')}")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(victim, path)


@pytest.mark.parametrize("linked", LINKED)
def test_init_refuses_a_link_in_the_repository(tmp_path: Path, project: Path,
                                               linked: str) -> None:
    victim = victim_folder(tmp_path)
    plant(project, linked, victim)
    victim_before, repo_before = tree(victim), tree(project)
    p = sandbox(tmp_path / "home", "init", str(project), *AGENTS)
    assert tree(victim) == victim_before
    assert secret_copies(project) == []
    assert tree(project) == repo_before  # nothing changed
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{os.path.realpath(project)}/{linked} is a link" in p.stderr, p.stderr
    assert "move it away" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("linked", LINKED)
def test_uninstall_refuses_a_link_planted_after_init(tmp_path: Path, project: Path,
                                                     linked: str) -> None:
    home = tmp_path / "home"
    p = sandbox(home, "init", str(project), *AGENTS)
    assert p.returncode == 0, p.stderr
    victim = victim_folder(tmp_path)
    plant(project, linked, victim)
    victim_before, repo_before = tree(victim), tree(project)
    p = sandbox(home, "uninstall", str(project))
    assert tree(victim) == victim_before
    assert secret_copies(project) == []
    assert tree(project) == repo_before  # nothing changed
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"{os.path.realpath(project)}/{linked} is a link" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_uninstall_refuses_a_state_naming_files_outside(tmp_path: Path,
                                                        project: Path) -> None:
    """The state file lives in the repository: a command may list paths outside it."""
    home = tmp_path / "home"
    assert sandbox(home, "init", str(project), "--claude").returncode == 0
    victim = victim_folder(tmp_path)
    state_file = project / ".sandbox/state/installed.json"
    state = json.loads(state_file.read_text())
    state["files"].append({"path": "../victim/secret", "created": True})
    state["dirs"].append("../victim/.claude")
    state_file.write_text(json.dumps(state))
    victim_before = tree(victim)
    p = sandbox(home, "uninstall", str(project))
    assert tree(victim) == victim_before
    assert p.returncode == 1 and "'..' component" in p.stderr, p.stderr
