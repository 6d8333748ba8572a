"""The broker's decisions on paths (``runtime.broker.judge``), without processes."""

from __future__ import annotations

import pytest

from agent_sandbox.runtime.broker.judge import Judge

ROOT, HOME = "/w/repo", "/home/u"
J = Judge([ROOT, "/home/u"], HOME, ["/w/repo/secrets/**", "**/*.key"])


@pytest.mark.parametrize("path", [
    "/w/repo/.bashrc", "/w/repo/a/b/.envrc", "/w/repo/x/.vscode", "/w/repo/x/.vscode/tasks.json",
    "/w/repo/x/.config/fish/config.fish", "/w/repo/.claude/settings.json",
    "/w/repo/deep/.gitmodules", "/home/u/.ssh/authorized_keys", "/home/u/.local/bin/git",
    "/home/u/bin", "/w/repo/secrets/a", "/w/repo/any/k.key", "/w/repo/.env",
    "/w/repo/node_modules/.envrc", "/w/repo/node_modules/any/k.key",
])
def test_protected(path: str) -> None:
    assert J.protected(path)


@pytest.mark.parametrize("path", [
    "/w/repo/src/main.py", "/w/repo/.config/other", "/w/repo/bashrc", "/w/repo/.bashrc.d/x",
    "/w/repo/.git/objects/ab/cd", "/w/repo/.venv/lib/python3.11/site-packages/a.pth",
    "/elsewhere/.bashrc", "/home/u/.cache/x",
    # a package's own files: no tool starts below node_modules (npm drops what it cannot
    # write, and a package's .env or .vscode would be lost)
    "/w/repo/node_modules/p/.env", "/w/repo/node_modules/@s/p/.vscode/settings.json",
])
def test_not_protected(path: str) -> None:
    assert J.protected(path) is None


@pytest.mark.parametrize(("path", "container"), [
    ("/w/repo/.git/config", "/w/repo/.git"),
    ("/w/repo/.git/hooks/pre-commit", "/w/repo/.git"),
    ("/w/repo/.git/hooks", "/w/repo/.git"),
    ("/w/repo/sub/.git/commondir", "/w/repo/sub/.git"),
    ("/w/repo/.git/modules/lib/config", "/w/repo/.git/modules/lib"),
    ("/w/repo/.git/modules/a/b/hooks/x", "/w/repo/.git/modules/a/b"),
    ("/w/repo/.git/worktrees/wt/config.worktree", "/w/repo/.git/worktrees/wt"),
    ("/w/repo/wt/.git", "/w/repo/wt"),
    ("/w/repo/.git/objects/ab/cd", None),
    ("/w/repo/.git/refs/heads/config", None),
    ("/w/repo/.git/HEAD", None),
    ("/w/repo/src/config", None),
    ("/elsewhere/.git/config", None),
])
def test_git_container(path: str, container: str | None) -> None:
    assert J.git_container(path) == container


@pytest.mark.parametrize(("path", "carries"), [
    ("/w/repo/x/.git", True), ("/w/repo/x/.config", True), ("/home/u/.local", True),
    ("/home/u/.config", True), ("/w/repo/x/build", False), ("/w/repo/x/config", False),
])
def test_carries(path: str, carries: bool) -> None:
    assert J.carries(path) == carries


@pytest.mark.parametrize(("path", "kind"), [
    ("/w/repo/.venv/lib/python3.11/site-packages/a.pth", "f"),
    ("/w/repo/.venv/lib/python3.11/site-packages", "f"),
    ("/w/repo/.venv/lib/python3.11", "f"),
    ("/w/repo/.venv/lib64/pypy3.10", "f"),
    ("/w/repo/.venv/lib", "v"), ("/w/repo/.venv/bin", "v"), ("/w/repo/.venv/Scripts", "v"),
    ("/w/repo/.venv/pyvenv.cfg", "f"), ("/w/repo/.venv/bin/python3", "f"),
    ("/w/repo/.venv/bin/activate.fish", "f"), ("/w/repo/x/sitecustomize.py", "f"),
    ("/w/repo/pkg/__pycache__", "f"), ("/w/repo/pkg/__pycache__/m.cpython-311.pyc", "c"),
    ("/w/repo/json.pyc", "f"), ("/w/repo/dist-packages", "f"),
    # modules Python imports from the working folder: named (readline, venv) or
    # named like the standard library's (start-up at the top of a project only)
    ("/w/repo/readline.py", "f"), ("/w/repo/venv/__init__.py", "m"), ("/w/repo/venv", None),
    ("/w/repo/logging.py", "t"), ("/w/repo/http/__init__.py", "u"),
    ("/w/repo/pip.conf", None), ("/w/repo/src/pkg/types.txt", None),
    ("/w/repo/test.py", None), ("/w/repo/os.py", None),  # a project's own; frozen
    ("/w/repo/src/main.py", None), ("/w/repo/x.pth", None), ("/w/repo/python3", None),
    ("/w/repo/tools/bin/run", None), ("/elsewhere/.venv/pyvenv.cfg", None),
])
def test_python_start(path: str, kind: str | None) -> None:
    assert J.python_start(path) == kind


def test_opened_folders_are_judged_from_inside() -> None:
    """An agent client's own state folder, opened under ``sandbox agent``: writable,
    with the protected names inside it still protected."""
    j = Judge([ROOT, "/home/u"], HOME, [],
              ["/home/u/.claude", "/home/u/.gemini"])
    assert j.protected("/home/u/.claude/settings.json") is None
    assert j.protected("/home/u/.gemini/x/y") is None
    assert j.protected("/home/u/.claude/proj/.bashrc")
    assert j.protected("/home/u/.codex/config.toml")
    assert j.protected("/w/repo/.claude/settings.json")
