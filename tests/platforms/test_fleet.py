"""The example fleet renders for every host, macOS and Windows included, through
the same code path as ``sandbox render``; the cluster layer, when enabled, adds
the cluster artifacts; the CLI writes them under DIR mirroring their targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent_sandbox.fleet import FleetRenderer

from .conftest import EXAMPLE_FLEET

PLATFORM_KINDS = {
    "macos": {"seatbelt", "launchd", "mobileconfig"},
    "windows": {"windows-plan", "powershell"},
    "linux": set(),
}
ALL_MINE = {"seatbelt", "launchd", "mobileconfig", "windows-plan", "powershell"}


def test_every_host_renders_with_its_platform_artifacts(fleet):
    seen = set()
    for host in fleet.inventory:
        facts = fleet.facts(host)
        arts = fleet.render_host(host)
        kinds = {a.kind for a in arts.values()}
        assert PLATFORM_KINDS[facts.os] <= kinds, host
        assert not (kinds & ALL_MINE) - PLATFORM_KINDS[facts.os], host
        seen.add(facts.os)
        again = fleet.render_host(host)
        assert {t: a.content for t, a in arts.items()} == \
            {t: a.content for t, a in again.items()}, f"{host} is not deterministic"
    assert seen == {"linux", "macos", "windows"}


def test_cluster_layer_adds_cluster_artifacts(tmp_path):
    layer = tmp_path / "cluster.yml"
    layer.write_text(json.dumps({"cluster": {
        "enabled": True, "api_server": ["10.96.0.1/32"],
        "vault": {"roles": [{"name": "deploy", "namespaces": ["staging"],
                             "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                                        "verbs": ["get"]}]}]}}}))
    fr = FleetRenderer(FleetRenderer.from_path(str(EXAMPLE_FLEET)).inventory,
                       extra_layers=(str(layer),))
    for host in fr.inventory:
        facts = fr.facts(host)
        kinds = {a.kind for a in fr.render_host(host).values()}
        assert {"k8s", "calico", "k8s-job-template", "vault-policy", "vault-roles"} <= kinds
        assert any(t.startswith(f"{facts.prefix}/cluster/") for t in fr.render_host(host))


def test_sandbox_render_cli_for_macos_and_windows_hosts(tmp_path):
    sandbox = Path(sys.executable).with_name("sandbox")
    for host in ("dev-mac-01", "dev-win-01"):
        out = tmp_path / host
        proc = subprocess.run([str(sandbox), "render", str(EXAMPLE_FLEET), "--host", host,
                               "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        kinds = {a["kind"] for a in manifest["artifacts"]}
        assert PLATFORM_KINDS["macos" if "mac" in host else "windows"] <= kinds
    assert (tmp_path / "dev-mac-01" / "opt/agent-sandbox/seatbelt/erin.sb").is_file()
    assert (tmp_path / "dev-win-01" / "c/Program Files/agent-sandbox/provision/provision.ps1"
            ).is_file()
