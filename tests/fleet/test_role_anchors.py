"""The roles as the anchors keep them, and the one host contract they read.

- Each role's README "Role variables" section is what ``scripts/role_docs.py``
  generates from ``meta/argument_specs.yml`` (checked in, kept current);
- ``defaults/main.yml`` and the argument specs name the same variables with the
  same defaults;
- every artifact kind a role names (its ``*_artifact_kinds`` default, an
  ``agent_sandbox_select(include=[...])`` or a ``selectattr('kind', 'equalto', ...)``)
  is in ``contract.ARTIFACT_KINDS``, every kind there is one a renderer names,
  and the renderer and the ``agent_sandbox_select`` filter refuse any other kind.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from agent_sandbox.contract import ARTIFACT_KINDS

from .conftest import REPO

ROLES = sorted(p.parent.parent for p in (REPO / "roles").glob("*/meta/argument_specs.yml"))


def _load(name: str, path: Path):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


role_docs = _load("role_docs", REPO / "scripts" / "role_docs.py")
filters = _load("agent_sandbox_filters_anchor", REPO / "plugins" / "filter" / "agent_sandbox.py")


def test_every_role_has_argument_specs() -> None:
    assert {r.name for r in ROLES} == {p.name for p in (REPO / "roles").iterdir() if p.is_dir()}


def test_role_readmes_are_generated_from_the_argument_specs() -> None:
    assert role_docs.stale(REPO) == [], "run scripts/role_docs.py"


def test_control_a_hand_edited_readme_is_stale(tmp_path: Path) -> None:
    shutil.copytree(REPO / "roles", tmp_path / "roles")
    readme = tmp_path / "roles" / "sandbox_linux" / "README.md"
    readme.write_text(readme.read_text().replace("| bool | `true` |", "| bool | `false` |", 1))
    assert role_docs.stale(tmp_path) == [readme]


@pytest.mark.parametrize("role", ROLES, ids=[r.name for r in ROLES])
def test_defaults_match_the_argument_specs(role: Path) -> None:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    assert sorted(options) == sorted(defaults)
    differ = {k: (options[k].get("default"), defaults[k]) for k in options
              if options[k].get("default") != defaults[k]}
    assert differ == {}


def role_kinds(role: Path) -> set[str]:
    """Every artifact kind the role's defaults and tasks name."""
    kinds: set[str] = set()
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {}
    for key, value in defaults.items():
        if key.endswith("_artifact_kinds"):
            kinds.update(value or [])
    for task in (role / "tasks").glob("*.yml"):
        text = task.read_text()
        for group in re.findall(r"include=\[([^\]]*)\]", text):
            kinds.update(re.findall(r"'([^']+)'", group))
        kinds.update(re.findall(r"selectattr\('kind',\s*'equalto',\s*'([^']+)'\)", text))
    return kinds


def test_roles_name_only_contract_kinds() -> None:
    named = {r.name: role_kinds(r) for r in ROLES}
    assert sum(len(k) for k in named.values()) >= 20, named  # the scan found them
    unknown = {r: sorted(k - set(ARTIFACT_KINDS)) for r, k in named.items()
               if k - set(ARTIFACT_KINDS)}
    assert unknown == {}


def test_control_a_role_naming_an_unproduced_kind_is_caught(tmp_path: Path) -> None:
    role = tmp_path / "sandbox_linux"
    shutil.copytree(REPO / "roles" / "sandbox_linux", role)
    defaults = role / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text().replace("verify-waivers]",
                                                     "verify-waivers, seccomp-profile]"))
    assert role_kinds(role) - set(ARTIFACT_KINDS) == {"seccomp-profile"}


def test_every_contract_kind_is_named_by_a_renderer() -> None:
    render = REPO / "src" / "agent_sandbox" / "render"
    source = "".join(p.read_text() for p in render.glob("*.py"))
    assert sorted(k for k in ARTIFACT_KINDS if f'"{k}"' not in source) == []


def test_the_renderer_refuses_a_kind_outside_the_contract() -> None:
    from agent_sandbox.render import Artifact, RenderError

    Artifact("/etc/x", b"", 0o644, "policy")
    with pytest.raises(RenderError, match="seccomp-profile"):
        Artifact("/etc/x", b"", 0o644, "seccomp-profile")


def test_the_select_filter_refuses_a_kind_outside_the_contract() -> None:
    from ansible.errors import AnsibleFilterError

    rendered = {"/etc/agent-sandbox/policy.json": {"kind": "policy", "mode": "0644"}}
    assert len(filters.agent_sandbox_select(rendered, include=["policy"])) == 1
    with pytest.raises(AnsibleFilterError, match="seccomp-profile"):
        filters.agent_sandbox_select(rendered, include=["policy", "seccomp-profile"])
    with pytest.raises(AnsibleFilterError, match="nope"):
        filters.agent_sandbox_select(rendered, exclude=["nope"])
