"""The pyinfra deploy's pure helpers: which inventory host to render, which
files belong to whom, the unit the service step reads."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from agent_sandbox.deploy import pyinfra as deploy
from agent_sandbox.inventory import HostFacts, User

from .conftest import DEMO


def test_render_host_name() -> None:
    assert deploy.render_host_name("@podman/sandbox-demo-1", SimpleNamespace()) == \
        "sandbox-demo-1"
    assert deploy.render_host_name("dev-01.example.com", SimpleNamespace()) == \
        "dev-01.example.com"
    assert deploy.render_host_name("@podman/x", SimpleNamespace(sandbox_render_host="h")) == "h"


def test_home_owner() -> None:
    from agent_sandbox.render import home_owner

    facts = HostFacts("h", users=(User("alice", "/home/alice"),))
    assert home_owner(facts, "/home/alice/.codex/config.toml") == "alice"
    assert home_owner(facts, "/home/alicex/f") is None
    assert home_owner(facts, "/etc/agent-sandbox/policy.json") is None


def test_the_service_step_reads_the_rendered_unit(tmp_path: Path) -> None:
    from agent_sandbox.install.proxy_service import read_unit

    _, artifacts = deploy.rendered(str(DEMO), "sandbox-demo-1")
    (unit,) = [a for a in artifacts.values() if a.kind == "systemd-unit"]
    path = tmp_path / "agent-sandbox-proxy.service"
    path.write_bytes(unit.content)
    parsed = read_unit(str(path))
    assert parsed.argv[:4] == ("/opt/agent-sandbox/venv/bin/python3", "-I", "-m",
                               "agent_sandbox.runtime.proxy")
    assert parsed.settings == "/etc/agent-sandbox/srt-settings.json"
    assert parsed.name == "agent-sandbox-proxy.service"
