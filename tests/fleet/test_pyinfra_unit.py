"""The pyinfra deploy's pure helpers: which inventory host to render, which
files belong to whom, and the service command taken from the rendered unit."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agent_sandbox.deploy import pyinfra as deploy
from agent_sandbox.facts import HostFacts, User

from .conftest import DEMO


def test_render_host_name() -> None:
    assert deploy.render_host_name("@podman/sandbox-demo-1", SimpleNamespace()) == \
        "sandbox-demo-1"
    assert deploy.render_host_name("dev-01.example.com", SimpleNamespace()) == \
        "dev-01.example.com"
    assert deploy.render_host_name("@podman/x", SimpleNamespace(sandbox_render_host="h")) == "h"


def test_owner_of() -> None:
    facts = HostFacts("h", users=(User("alice", "/home/alice"),))
    assert deploy.owner_of(facts, "/home/alice/.codex/config.toml") == "alice"
    assert deploy.owner_of(facts, "/home/alicex/f") is None
    assert deploy.owner_of(facts, "/etc/agent-sandbox/policy.json") is None


def test_exec_start_comes_from_the_rendered_unit() -> None:
    _, artifacts = deploy.rendered(str(DEMO), "sandbox-demo-1")
    (unit,) = [a for a in artifacts.values() if a.kind == "systemd-unit"]
    command = deploy.exec_start(unit.content.decode())
    assert command.startswith("/opt/agent-sandbox/venv/bin/python3 -m agent_sandbox")
    assert "--settings /etc/agent-sandbox/srt-settings.json" in command
    with pytest.raises(ValueError):
        deploy.exec_start("[Service]\nType=simple\n")
