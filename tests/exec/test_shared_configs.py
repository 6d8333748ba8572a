"""The code-loading sections of shared configurations (``broker/shared_configs.py``):
what a run changes there is put back once it ends, the rest of its change kept.
Driven through real sandboxed runs, judged from the host by the files' bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs_bwrap

from agent_sandbox.runtime.broker.shared_configs import loading_sections
from agent_sandbox.runtime.run import run_sandboxed

pytestmark = [needs_bwrap]


def _run(root: Path, script: str) -> str:
    settings = {"network": {"allowedDomains": [], "deniedDomains": []},
                "filesystem": {"denyRead": [], "allowWrite": [str(root)], "denyWrite": []}}
    r = run_sandboxed(["sh", "-c", script], json.loads(json.dumps(settings)), root)
    assert r.returncode == 0, r.stderr
    return r.stderr.decode()


@pytest.mark.parametrize(("name", "before", "added"), [
    ("setup.cfg", "[metadata]\nname = p\n", "[mypy]\nplugins = plug.py\n"),
    ("tox.ini", "[tox]\nenvlist = py\n", "[pylint.MASTER]\ninit-hook = import os\n"),
    ("setup.cfg", "[metadata]\nname = p\n", "[flake8:local-plugins]\npaths = ./x\n"),
    ("pyproject.toml", "[project]\nname = \"p\"\n", "[tool.pylint.main]\nload-plugins = [\"x\"]\n"),
])
def test_a_code_loading_section_a_run_adds_is_put_back(tmp_path: Path, name: str, before: str,
                                                      added: str) -> None:
    root = tmp_path / "w"
    root.mkdir()
    (root / name).write_text(before)
    said = _run(root, f"printf '%s' '{before}{added}' > {name}")
    assert (root / name).read_text() == before
    kept = list(root.glob(f"{name}.sandbox-quarantine-*"))
    assert kept and added in kept[0].read_text() and "put back" in said


def test_the_rest_of_a_shared_configuration_is_the_runs(tmp_path: Path) -> None:
    """A dependency added, or a replaced file whose code-loading sections are as they
    were, stays as the run wrote it; a new file with such a section goes."""
    root = tmp_path / "w"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = \"p\"\n\n[tool.mypy]\nstrict = true\n")
    _run(root, "printf '[project]\\nname = \"p\"\\ndependencies = [\"x\"]\\n\\n[tool.mypy]\\n"
               "strict = true\\n' > new && mv new pyproject.toml && printf '[mypy]\\n"
               "plugins = p.py\\n' > sub.cfg && mkdir s && printf '[mypy]\\nplugins = p.py\\n' "
               "> s/setup.cfg")
    assert "dependencies" in (root / "pyproject.toml").read_text()
    assert (root / "sub.cfg").exists() and not (root / "s/setup.cfg").exists()


def test_sections_read_as_the_linters_read_them() -> None:
    text = ("[metadata]\nname = p\n[mypy]\nplugins = a\n[mypy-x.*]\nignore = 1\n"
            "[tool.pylint.\"messages control\"]\ndisable = x\n[tool.black]\nline = 1\n")
    got = sorted(loading_sections(text))
    assert got[:2] == ["mypy", "mypy-x.*"] and got[2].startswith("tool.pylint.") and len(got) == 3


@pytest.mark.parametrize("script", [
    # dotted keys, a spaced header: TOML's reading, not the header's text
    "printf '[project]\\nname = \"p\"\\n[tool]\\nmypy.plugins = [\"x.py\"]\\n' > pyproject.toml",
    "printf '[project]\\nname = \"p\"\\n[tool . mypy]\\nplugins = [\"x.py\"]\\n' > pyproject.toml",
    # a folder holding one moved into place after it was written
    "mkdir s && printf '[tool.mypy]\\nplugins = [\"x.py\"]\\n' > s/pyproject.toml && mv s sub",
])
def test_a_code_loading_table_in_any_spelling_is_put_back(tmp_path: Path, script: str) -> None:
    root = tmp_path / "w"
    (root / "sub").mkdir(parents=True) if "mv s sub" not in script else root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = \"p\"\n")
    said = _run(root, script)
    for f in (root / "pyproject.toml", root / "sub" / "pyproject.toml"):
        assert "mypy" not in (f.read_text() if f.exists() else ""), said


def test_a_shared_configuration_is_never_hard_linked(tmp_path: Path) -> None:
    """A write through a second name of the same file would never be noted."""
    root = tmp_path / "w"
    root.mkdir()
    (root / "setup.cfg").write_text("[metadata]\nname = p\n")
    settings = {"network": {"allowedDomains": [], "deniedDomains": []},
                "filesystem": {"denyRead": [], "allowWrite": [str(root)], "denyWrite": []}}
    r = run_sandboxed(["sh", "-c", "ln setup.cfg x.tmp && printf '[mypy]\\nplugins = p\\n' "
                       ">> x.tmp"], json.loads(json.dumps(settings)), root)
    assert b"never hard-linked" in r.stderr and "mypy" not in (root / "setup.cfg").read_text()
