"""The web approvals unit: rendered only where the spec enables it, the same bytes from
`sandbox render`, the Ansible filter and the pyinfra deploy, installed by exactly one
role; and `sandbox verify`'s check of the running service."""

from __future__ import annotations

import base64
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent_sandbox import contract
from agent_sandbox.errors import SandboxError

from .conftest import Server

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example-fleet"
HOST = "dev-linux-01"
WEB_LAYER = {"platforms": {"linux": {"web": {"enabled": True, "user": "alice",
                                             "repos": ["/home/alice/src/app"]}}}}


def filters() -> object:
    spec = importlib.util.spec_from_file_location(
        "agent_sandbox_filters_web", REPO / "plugins" / "filter" / "agent_sandbox.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def inventory(tmp_path: Path, layer: dict[str, object] | None) -> Path:
    inv = tmp_path / "inventory"
    shutil.copytree(EXAMPLE, inv)
    if layer is not None:
        host = inv / "sandbox" / "hosts" / f"{HOST}.yml"
        doc = yaml.safe_load(host.read_text()) or {}
        doc.update(layer)
        host.write_text(yaml.safe_dump(doc))
    return inv


def test_off_by_default(tmp_path: Path) -> None:
    from agent_sandbox.deploy.pyinfra import rendered

    _, artifacts = rendered(str(inventory(tmp_path, None)), HOST)
    assert contract.WEB_UNIT not in artifacts
    assert not [a for a in artifacts.values() if a.kind == "web-unit"]


def test_the_three_front_ends_render_the_same_unit(tmp_path: Path) -> None:
    from agent_sandbox.deploy.pyinfra import rendered

    inv = inventory(tmp_path, WEB_LAYER)
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "agent_sandbox", "render", str(inv), "--host", HOST,
                    "--out", str(out)], check=True, capture_output=True, timeout=120)
    cli = (out / contract.WEB_UNIT.lstrip("/")).read_bytes()
    ansible = base64.b64decode(
        filters().agent_sandbox_render(str(inv), HOST)[contract.WEB_UNIT]["content_b64"])
    _, artifacts = rendered(str(inv), HOST)
    assert cli == ansible == artifacts[contract.WEB_UNIT].content
    text = cli.decode()
    assert "User=alice\n" in text
    assert ("-I -m agent_sandbox serve --host 127.0.0.1 --port 8765 \"/home/alice/src/app\"\n"
            in text)
    # installed by exactly one role: sandbox_runtime, which runs it under systemd
    kinds = {role: set(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml")
                                      .read_text())[f"{role}_artifact_kinds"])
             for role in ("sandbox_runtime", "sandbox_linux", "sandbox_agents")}
    assert [r for r, k in kinds.items() if "web-unit" in k] == ["sandbox_runtime"]
    # started under systemd by the bundle's step, the same for both front ends
    from agent_sandbox.deploy.host_steps import unit_steps

    (step,) = unit_steps([{"target": contract.WEB_UNIT, "kind": "web-unit"}])
    assert step["argv"][-1] == contract.WEB_UNIT.rsplit("/", 1)[-1]
    assert step["after_change"] == {"targets": [contract.WEB_UNIT], "args": ["restart"]}


@pytest.mark.parametrize("web", [
    {"enabled": True, "repos": ["/home/alice/src/app"]},
    {"enabled": True, "user": "alice"},
    {"enabled": True, "user": "alice", "repos": ["/home/alice/100%"]},
    {"enabled": True, "user": "alice", "repos": ["/home/alice/a\" --host 0.0.0.0"]},
    {"enabled": True, "user": "alice; rm", "repos": ["/home/alice/src/app"]},
    {"enabled": True, "user": "alice", "repos": ["relative/path"]},
])
def test_an_incomplete_or_unsafe_unit_is_refused(web: dict[str, object]) -> None:
    from agent_sandbox.spec.models import Spec

    with pytest.raises(ValueError):
        Spec.model_validate({"platforms": {"linux": {"web": web}}})


def test_verify_checks_the_running_service(server: Server, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    from agent_sandbox.hostcheck import checks
    from agent_sandbox.hostcheck.web import check_web_service

    port = server.url.rstrip("/").rsplit(":", 1)[1]
    unit = tmp_path / "agent-sandbox-web.service"
    unit.write_text(f"[Service]\nUser={getpass.getuser()}\nExecStart={sys.executable} -I -m "
                    f"agent_sandbox serve --host 127.0.0.1 --port {port} /x\n")
    assert "refuses calls without its token" in check_web_service(str(unit))
    # `sandbox verify` runs it where the unit is installed, and only there
    monkeypatch.setattr(contract, "WEB_UNIT", str(unit))
    settings = tmp_path / "settings.json"
    settings.write_text('{"network": {"allowedDomains": [], "deniedDomains": []}, '
                        '"filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}')
    results = checks.run(str(settings), only=["web_service"])
    assert [(r.name, r.passed) for r in results] == [("web_service", True)], results
    monkeypatch.setattr(contract, "WEB_UNIT", str(tmp_path / "absent.service"))
    with pytest.raises(SandboxError):
        checks.run(str(settings), only=["web_service"])
    # a token file others can read fails the check
    server.token_file.chmod(0o644)
    try:
        with pytest.raises(SandboxError, match="alone"):
            check_web_service(str(unit))
    finally:
        server.token_file.chmod(0o600)
    # a unit listening elsewhere than loopback fails it too
    unit.write_text(unit.read_text().replace("127.0.0.1", "0.0.0.0"))
    with pytest.raises(SandboxError, match="not on loopback"):
        check_web_service(str(unit))
