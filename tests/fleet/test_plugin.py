"""The controller-side filters produce exactly what `sandbox render` writes, and
every rendered kind is installed by exactly one role."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import DEMO, EXAMPLE_FLEET, REPO

spec = importlib.util.spec_from_file_location(
    "agent_sandbox_filters", REPO / "plugins" / "filter" / "agent_sandbox.py")
assert spec is not None and spec.loader is not None
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)

LINUX_ROLES = {
    "sandbox_runtime": "sandbox_runtime_artifact_kinds",
    "sandbox_linux": "sandbox_linux_artifact_kinds",
    "sandbox_agents": "sandbox_agents_artifact_kinds",
}


def cli_render(inventory: Path, host: str, out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "agent_sandbox", "render", str(inventory), "--host",
                    host, "--out", str(out)], check=True, capture_output=True)
    return out


def under(out: Path, target: str) -> Path:
    return out / target.lstrip("/")


@pytest.mark.parametrize("host", ["sandbox-demo-1", "sandbox-demo-2", "sandbox-demo-3"])
def test_filter_bytes_equal_cli_render(host: str, tmp_path: Path) -> None:
    out = cli_render(DEMO, host, tmp_path / "cli")
    rendered = filters.agent_sandbox_render(str(DEMO), host)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "manifest.json")
    assert len(files) == len(rendered) > 0
    for target, art in rendered.items():
        content = base64.b64decode(art["content_b64"])
        assert content == under(out, target).read_bytes(), target
        assert art["sha256"] == hashlib.sha256(content).hexdigest()
        assert int(art["mode"], 8) == under(out, target).stat().st_mode & 0o7777
    assert filters.agent_sandbox_manifest(str(DEMO), host).encode() == \
        (out / "manifest.json").read_bytes()


def test_owner_is_the_user_whose_home_holds_the_file() -> None:
    rendered = filters.agent_sandbox_render(str(DEMO), "sandbox-demo-2")
    owners = {t: a["owner"] for t, a in rendered.items()}
    assert all(o == "bob" for t, o in owners.items() if t.startswith("/home/bob/"))
    assert all(o == "carol" for t, o in owners.items() if t.startswith("/home/carol/"))
    assert all(o is None for t, o in owners.items() if t.startswith("/etc/"))


def role_kinds(role: str) -> set[str]:
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    return set(defaults[LINUX_ROLES[role]])


def cluster_kinds() -> set[str]:
    """The kinds the cluster role (playbooks/cluster.yml) installs on its admin hosts."""
    tasks = REPO / "roles" / "sandbox_cluster" / "tasks" / "cluster.yml"
    if not tasks.is_file():
        return set()
    found = re.findall(r"agent_sandbox_select\(include=\[([^\]]*)\]", tasks.read_text())
    return {k.strip().strip("'\"") for group in found for k in group.split(",") if k.strip()}


@pytest.mark.parametrize("inventory", [DEMO, EXAMPLE_FLEET])
def test_every_linux_artifact_is_installed_by_exactly_one_role(inventory: Path) -> None:
    kinds = {role: role_kinds(role) for role in LINUX_ROLES}
    kinds["sandbox_cluster"] = cluster_kinds()
    inv = yaml.safe_load((inventory / "hosts.yml").read_text())
    hosts = [h for h, v in _hosts(inv) if (v.get("sandbox_os") or "linux") == "linux"]
    assert hosts
    for host in hosts:
        for target, art in filters.agent_sandbox_render(str(inventory), host).items():
            claimed = [r for r, k in kinds.items() if art["kind"] in k]
            assert len(claimed) == 1, f"{host}: {target} ({art['kind']}) claimed by {claimed}"


def test_the_agents_role_installs_the_agent_kinds_after_init() -> None:
    """The kinds the pyinfra deploy installs after `sandbox install repo` are the
    agents role's (installed after it too)."""
    from agent_sandbox.contract import AGENT_ARTIFACT_KINDS

    assert role_kinds("sandbox_agents") == set(AGENT_ARTIFACT_KINDS)


def _hosts(node: dict, inherited: dict | None = None) -> list[tuple[str, dict]]:
    node = node.get("all", node)
    gvars = {**(inherited or {}), **(node.get("vars") or {})}
    out = [(h, {**gvars, **(v or {})}) for h, v in (node.get("hosts") or {}).items()]
    for child in (node.get("children") or {}).values():
        out += _hosts(child or {}, gvars)
    return out


def test_select_and_dirs() -> None:
    rendered = filters.agent_sandbox_render(str(DEMO), "sandbox-demo-1")
    srt = filters.agent_sandbox_select(rendered, include=["srt-settings"])
    assert [a["target"] for a in srt] == sorted(
        ["/etc/agent-sandbox/srt-settings.json", "/home/alice/.srt-settings.json"])
    rest = filters.agent_sandbox_select(rendered, exclude=["srt-settings"])
    assert len(rest) + len(srt) == len(rendered)
    dirs = filters.agent_sandbox_dirs(srt)
    assert dirs == [{"path": "/etc/agent-sandbox", "owner": None},
                    {"path": "/home/alice", "owner": "alice"}]
    with pytest.raises(filters.AnsibleFilterError):
        filters.agent_sandbox_select(["not", "a", "rendering"])


def test_bad_spec_fails_the_task_with_the_renderer_message(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    (inv / "sandbox").mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    h1: {}\n")
    (inv / "sandbox" / "fleet.yml").write_text(
        "version: 1\nnetwork:\n  allowed_domains: ['exa mple.com']\n")
    with pytest.raises(filters.AnsibleFilterError) as err:
        filters.agent_sandbox_render(str(inv), "h1")
    assert "fleet.yml:3" in str(err.value)
    with pytest.raises(filters.AnsibleFilterError, match="not in the inventory"):
        filters.agent_sandbox_render(str(DEMO), "no-such-host")


def test_init_flags_follow_the_enabled_agents() -> None:
    assert filters.agent_sandbox_init_flags(str(DEMO), "sandbox-demo-1") == [
        "--claude", "--codex", "--cursor", "--gemini", "--mcp"]
