"""The pyinfra deploy: the same artifacts as the Ansible roles, from the same renderer.

Usage (see deploy/pyinfra/ for an example inventory and deploy file)::

    from agent_sandbox.deploy.pyinfra import agent_sandbox
    agent_sandbox(inventory_dir="inventories/demo")

``agent_sandbox`` renders the current host with ``FleetRenderer`` (the code
``sandbox render`` and the Ansible filter use) and installs the host's whole
bundle with one run of the installer the Ansible roles' module runs
(``agent_sandbox.install.rendered_files``, uploaded and run by the host's
``python3``): the rendered files (root-owned, the rendered mode, written only
where they differ, never through a link a user made) and the render manifest
``sandbox verify --drift`` reads, split as the roles split them, and optionally
the runtime from the controller-built wheelhouse, as the ``sandbox_runtime``
role does: the system packages, the virtualenv (made again only when the
archive differs from the one installed), the host audit folder (root, 0700),
the command link and the host steps ``agent_sandbox.deploy.host_steps`` lists
(``sandbox install repo|apparmor-profile|proxy-service``). Host data:
``sandbox_render_host`` names the host in the inventory folder (default: the
pyinfra host name without its connector prefix).

It never renders on the host and never installs a partial rendering: spec
problems stop the deploy before any operation is queued.
"""

from __future__ import annotations

import base64
import io
import os
import shlex
from pathlib import Path
from typing import Any

from pyinfra import host  # type: ignore[attr-defined]
from pyinfra.api import deploy  # type: ignore[attr-defined]
from pyinfra.operations import files, server

from agent_sandbox import contract
from agent_sandbox.deploy import host_steps
from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.install import rendered_files
from agent_sandbox.install.repository import STARTER_POLICY, init_flags
from agent_sandbox.render import Artifact, install_entries, json_bytes, manifest

MANIFEST = contract.MANIFEST_FILE
PREFIX = "/opt/agent-sandbox"
AUDIT_DIR = contract.HOST_AUDIT_DIR
PACKAGES = ("bubblewrap", "socat", "python3-venv")
STAGE = f"{contract.HOST_STATE_DIR}/pyinfra"  # root's: the installer and what it installs
INSTALLER = f"{STAGE}/rendered_files.py"
_FLEETS: dict[str, FleetRenderer] = {}


def render_host_name(name: str, data: Any) -> str:
    """The inventory name to render: ``sandbox_render_host`` or the pyinfra name
    without its connector (``@podman/demo-1`` -> ``demo-1``)."""
    explicit = getattr(data, "sandbox_render_host", None)
    if explicit:
        return str(explicit)
    return name.rsplit("/", 1)[-1] if name.startswith("@") else name


def rendered(inventory_dir: str, name: str) -> tuple[Any, dict[str, Artifact]]:
    root = os.path.realpath(inventory_dir)
    fleet = _FLEETS.get(root)
    if fleet is None:
        fleet = _FLEETS[root] = FleetRenderer.from_path(root)
    return fleet.facts(name), fleet.render_host(name)


@deploy("agent-sandbox")
def agent_sandbox(inventory_dir: str, install_runtime: bool = False,
                  wheelhouse: str | None = None, prefix: str = PREFIX,
                  manifest_path: str = MANIFEST, audit_dir: str = AUDIT_DIR) -> None:
    """Install this host's rendered artifacts (and, if asked, the runtime) as one
    bundle, with the installer the roles' module runs: one run on the host."""
    name = render_host_name(host.name, host.data)
    facts, artifacts = rendered(inventory_dir, name)
    spec = _FLEETS[os.path.realpath(inventory_dir)].spec_for(name)
    files.directory(name=f"Folder {STAGE}", path=STAGE, present=True, user="root",
                    group="root", mode="0700")
    files.put(name="Stage the bundle installer", src=io.BytesIO(installer_source()),
              dest=INSTALLER, user="root", group="root", mode="0600")
    bundle = host_bundle(artifacts, facts, spec, install_runtime=install_runtime,
                         prefix=prefix, manifest_path=manifest_path, audit_dir=audit_dir)
    if install_runtime:
        bundle["runtime"] = _runtime(wheelhouse, prefix)
    listed = f"{STAGE}/bundle.json"
    files.put(name="Stage the host's bundle", src=io.BytesIO(json_bytes(bundle)),
              dest=listed, user="root", group="root", mode="0600")
    server.shell(name="Install the host's bundle",
                 commands=[f"python3 -I {shlex.quote(INSTALLER)} {shlex.quote(listed)}"])


def host_bundle(artifacts: dict[str, Artifact], facts: Any, spec: Any, *,
                install_runtime: bool, prefix: str = PREFIX, manifest_path: str = MANIFEST,
                audit_dir: str = AUDIT_DIR) -> dict[str, Any]:
    """The installer's parameters for this host, split as the roles split them:
    the host's files and the manifest, ``sandbox install repo`` in each repository,
    the agents' files, the command link, the AppArmor and proxy steps."""
    entries = install_entries(artifacts, facts)
    listed = json_bytes(manifest(artifacts))
    early = [e for e in entries.values() if e["kind"] not in contract.AGENT_ARTIFACT_KINDS]
    early.append({"target": manifest_path, "mode": "0644", "kind": "manifest",
                  "content_b64": base64.b64encode(listed).decode("ascii")})
    bundle: dict[str, Any] = {
        "files": early,
        "late_files": [e for e in entries.values()
                       if e["kind"] in contract.AGENT_ARTIFACT_KINDS],
    }
    if install_runtime:
        bundle["folders"] = [{"path": prefix, "mode": "0755"},
                             {"path": audit_dir, "mode": "0700"}]
        bundle["early_steps"] = host_steps.repo_steps(facts.repositories, init_flags(spec),
                                                      prefix=prefix, policy=STARTER_POLICY)
        bundle["links"] = [{"path": "/usr/local/bin/sandbox",
                            "target": host_steps.sandbox_command(prefix)}]
        bundle["late_steps"] = host_steps.service_steps(
            [{"target": a.target, "kind": a.kind} for a in artifacts.values()],
            prefix=prefix, log_dir=audit_dir)
    return bundle


def installer_source() -> bytes:
    """The installer's own file, uploaded to each host and run by its Python."""
    return Path(rendered_files.__file__).read_bytes()


def _runtime(wheelhouse: str | None, prefix: str) -> dict[str, Any]:
    """The system packages and the controller's wheelhouse on the host (see
    deploy.wheelhouse); the installer makes the virtualenv from it when the one
    installed differs."""
    from pyinfra.facts.server import Which
    from pyinfra.operations import apt

    from agent_sandbox.deploy import wheelhouse as wh

    if host.get_fact(Which, command="apt-get"):
        apt.packages(name="Install bubblewrap, socat and the venv module",
                     packages=list(PACKAGES), present=True)
    project = Path(__file__).resolve().parents[3]
    out = Path(wheelhouse or project / "build" / "wheelhouse")
    wh.build(project, out)
    files.directory(name=f"Folder {prefix}", path=prefix, present=True, mode="0755")
    files.put(name="Copy the wheelhouse", src=str(out / wh.ARCHIVE),
              dest=f"{prefix}/wheelhouse.tar", mode="0644")
    return {"prefix": prefix, "python": "python3", "sha256": wh.archive_sha256(out)}
