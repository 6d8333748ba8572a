"""Every program of ours the host starts runs isolated (``contract.self_argv``,
``contract.hook_argv``): a package planted in its working folder, which a
sandbox can write, is never imported on the host.

Judged by a marker file the planted package would write; the control runs the
same planted package the way the hook relay once did (``python -m``, no
``-I``) and sees the marker appear.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_sandbox import contract

SRC = Path(__file__).resolve().parents[2] / "src" / "agent_sandbox"


def plant(folder: Path, marker: Path) -> None:
    """``agent_sandbox`` as a package in ``folder`` that writes ``marker`` on import."""
    pkg = folder / "agent_sandbox"
    (pkg / "cli").mkdir(parents=True)
    code = f"open({str(marker)!r}, 'w').write('ran on the host')\n"
    for f in ("__init__.py", "__main__.py", "cli/__init__.py", "cli/entry.py"):
        (pkg / f).write_text(code)


def test_control_a_planted_package_runs_without_isolation(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    plant(tmp_path, marker)
    subprocess.run([sys.executable, "-m", "agent_sandbox", "hook", "claude", "pre-tool-use"],
                   cwd=tmp_path, input=b"{}", capture_output=True, check=False)
    assert marker.exists()


@pytest.mark.parametrize("argv", [
    contract.hook_argv(sys.executable, "claude", "pre-tool-use"),
    contract.self_argv(sys.executable, "hook", "gemini", "before-tool"),
    contract.self_argv(sys.executable, "--help"),
], ids=["hook", "module", "cli"])
def test_our_programs_do_not_import_from_their_folder(tmp_path: Path, argv: list[str]) -> None:
    marker = tmp_path / "marker"
    plant(tmp_path, marker)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONSTARTUP": str(tmp_path / "x")}
    subprocess.run(argv, cwd=tmp_path, input=b"{}", capture_output=True, env=env,
                   check=False, timeout=60)
    assert not marker.exists()


def test_the_hook_relay_runs_the_hook_isolated(tmp_path: Path) -> None:
    """Under ``sandbox agent`` the relay runs each hook on the host, in the run's
    folder, which the sandboxed client can write."""
    from agent_sandbox.agent.run import HookRelay

    repo = tmp_path / "repo"
    repo.mkdir()
    marker = tmp_path / "marker"
    plant(repo, marker)
    relay = HookRelay(str(repo), dict(os.environ))
    out = relay.answer({"argv": ["claude", "pre-tool-use"], "stdin": json.dumps({
        "session_id": "s", "cwd": str(repo), "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "ls"}})})
    assert not marker.exists(), out
    assert out["rc"] in (0, 2), out  # answered by the real hook (no .sandbox here: a deny)


INTERPRETERS = {"sys.executable", "ctx.python", "facts.python", "python", "PY"}


def _starts_our_interpreter(node: ast.List) -> bool:
    if not node.elts:
        return False
    first = ast.unparse(node.elts[0])
    return first in INTERPRETERS


def test_no_program_of_ours_starts_an_interpreter_unisolated() -> None:
    """The structural half: every argv in ``src`` that starts an interpreter passes
    ``-I`` next (``contract.self_argv`` / ``hook_argv``), but pip's own run."""
    found = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.List) and _starts_our_interpreter(node):
                second = ast.unparse(node.elts[1]) if len(node.elts) > 1 else ""
                if second != "'-I'" and "'pip'" not in ast.unparse(node):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
