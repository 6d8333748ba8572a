"""One host contract: ``agent_sandbox.contract`` is stdlib only, and no other module
spells an installed agent-sandbox path itself (they take it from the contract).
Docstrings and comments may name the paths; code may not."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import agent_sandbox

SRC = Path(agent_sandbox.__file__).parent
INSTALLED = ("/etc/agent-sandbox", "C:/ProgramData/agent-sandbox", "/var/lib/agent-sandbox",
             "/var/log/agent-sandbox", "/etc/systemd/system/agent-sandbox",
             "/etc/apparmor.d/agent-sandbox")
# Outstanding: files under the split of issue 15 item 1 (another change moves them);
# each entry stops matching once its file is renamed, and then this test fails.
OUTSTANDING: set[str] = set()


def docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def path_literals(source: str) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skip and node.value.startswith(INSTALLED)):
            found.append((node.lineno, node.value))
    return found


def test_no_module_spells_an_installed_path() -> None:
    offenders = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel == "contract.py" or rel in OUTSTANDING:
            continue
        found = path_literals(path.read_text())
        if found:
            offenders[rel] = found
    assert offenders == {}


def test_outstanding_files_still_exist() -> None:
    assert sorted(p for p in OUTSTANDING if not (SRC / p).exists()) == [], \
        "drop them from OUTSTANDING"


def test_control_a_path_in_code_is_found_and_a_docstring_is_not() -> None:
    source = '"""Reads /etc/agent-sandbox/policy.json."""\nX = "/etc/agent-sandbox/exec.json"\n'
    assert path_literals(source) == [(2, "/etc/agent-sandbox/exec.json")]


def test_the_contract_imports_only_the_standard_library() -> None:
    tree = ast.parse((SRC / "contract.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports in the contract"
            names.add((node.module or "").split(".")[0])
    assert names and names <= set(sys.stdlib_module_names) | {"__future__"}, names
