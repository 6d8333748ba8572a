"""The Linux runtime artifacts: the bwrap profile, the proxy unit, the AppArmor profile."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from agent_sandbox.inventory import HostFacts, User
from agent_sandbox.render import render
from agent_sandbox.render.linux import APPARMOR_PROFILE, EXEC_PROFILE, PROXY_UNIT
from agent_sandbox.runtime.settings import parse
from agent_sandbox.spec.models import Spec
from agent_sandbox.spec.paths import MANDATORY_DENY_WRITE


def spec(**kw: object) -> Spec:
    base: dict = {"version": 1, "network": {"allowed_domains": ["github.com"]},
                  "filesystem": {"allow_write": ["~/src"]}}
    base.update(kw)
    return Spec.model_validate(base)


FACTS = HostFacts(name="dev-1", os="linux", users=(User("dev", "/home/dev"),))


def test_linux_host_gets_the_three_runtime_artifacts() -> None:
    arts = render(spec(), FACTS)
    assert {EXEC_PROFILE, PROXY_UNIT, APPARMOR_PROFILE} <= set(arts)
    assert arts[EXEC_PROFILE].kind == "bwrap-profile"
    assert arts[PROXY_UNIT].kind == "systemd-unit"
    assert arts[APPARMOR_PROFILE].kind == "apparmor-profile"


def test_other_os_gets_none() -> None:
    arts = render(spec(), HostFacts(name="mac", os="macos"))
    assert not {EXEC_PROFILE, PROXY_UNIT, APPARMOR_PROFILE} & set(arts)


def test_exec_profile_carries_backend_audit_and_protected_set() -> None:
    s = spec(platforms={"linux": {"backend": "gvisor", "seccomp": True}},
             audit={"host_path": "/var/log/agents"})
    doc = json.loads(render(s, FACTS)[EXEC_PROFILE].content)
    assert doc["backend"] == "gvisor"
    assert doc["auditDir"] == "/var/log/agents"
    assert doc["mandatoryDenyWrite"] == list(MANDATORY_DENY_WRITE)
    assert doc["settings"] == "/etc/agent-sandbox/srt-settings.json"


def test_proxy_unit_runs_the_proxy_hardened() -> None:
    s = spec(network={"allowed_domains": ["github.com"], "http_proxy_port": 8888,
                      "socks_proxy_port": 8889})
    unit = render(s, FACTS)[PROXY_UNIT].content.decode()
    exec_line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
    # an absolute interpreter, isolated, from a fixed directory: nothing is
    # imported from a path a sandbox can write
    assert exec_line.startswith(f"ExecStart={FACTS.python} -I -m agent_sandbox.runtime.proxy ")
    assert FACTS.python.startswith("/")
    assert "WorkingDirectory=/" in unit.splitlines()
    assert "--http 127.0.0.1:8888" in exec_line and "--socks 127.0.0.1:8889" in exec_line
    assert "--http unix:/run/agent-sandbox/proxy.sock" in exec_line
    for line in ("DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict",
                 "CapabilityBoundingSet=", "LogsDirectory=agent-sandbox-proxy",
                 "RuntimeDirectory=agent-sandbox"):
        assert line in unit.splitlines()


def test_proxy_service_keeps_its_audit_beside_the_hosts() -> None:
    # systemd gives a LogsDirectory= to the service's dynamic user: it must not
    # be the host audit folder, which root's writers keep at 0700
    for host_path, logs in (("/var/log/agents", "agents-proxy"),
                            ("/srv/audit", "agent-sandbox-proxy")):
        unit = render(spec(audit={"host_path": host_path}), FACTS)[PROXY_UNIT].content.decode()
        assert f"LogsDirectory={logs}" in unit.splitlines()
        assert f" --audit-dir /var/log/{logs} " in unit
        assert f" --audit-dir {host_path} " not in unit


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze missing")
def test_proxy_unit_passes_systemd_analyze(tmp_path) -> None:
    unit = tmp_path / "agent-sandbox-proxy.service"
    unit.write_bytes(render(spec(), FACTS)[PROXY_UNIT].content)
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    bad = [x for x in r.stderr.splitlines() if "agent-sandbox-proxy.service" in x
           and "Command" not in x and "not executable" not in x]
    assert not bad, r.stderr


def test_apparmor_profile_grants_userns_to_bwrap_only() -> None:
    text = render(spec(), FACTS)[APPARMOR_PROFILE].content.decode()
    assert "profile agent-sandbox-bwrap /usr/bin/bwrap flags=(unconfined) {" in text
    assert "  userns," in text
    assert "abi <abi/4.0>," in text


def test_apparmor_profile_can_be_turned_off() -> None:
    s = spec(platforms={"linux": {"apparmor_userns_profile": False}})
    assert APPARMOR_PROFILE not in render(s, FACTS)


def test_rendered_srt_settings_are_what_exec_accepts() -> None:
    arts = render(spec(), FACTS)
    doc = json.loads(arts["/home/dev/.srt-settings.json"].content)
    s = parse(doc)
    assert s.filesystem.allow_write == ("/home/dev/src",)
    assert s.network.allowed_domains == ("github.com",)


def test_rendering_is_deterministic() -> None:
    a, b = render(spec(), FACTS), render(spec(), FACTS)
    assert {k: v.content for k, v in a.items()} == {k: v.content for k, v in b.items()}
