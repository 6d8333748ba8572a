"""The pyinfra deploy: the same artifacts as the Ansible roles, from the same renderer.

Usage (see deploy/pyinfra/ for an example inventory and deploy file)::

    from agent_sandbox.deploy.pyinfra import agent_sandbox
    agent_sandbox(inventory_dir="inventories/demo")

``agent_sandbox`` renders the current host with ``FleetRenderer`` (the code
``sandbox render`` and the Ansible filter use), installs every artifact with the
installer the Ansible roles' module runs (``agent_sandbox.install.rendered_files``,
uploaded and run by the host's ``python3``: root-owned files with the rendered
mode, written only where they differ, never through a link a user made), the
render manifest that
``sandbox verify --drift`` reads, and optionally the runtime from the
controller-built wheelhouse, as the ``sandbox_runtime`` role does: the system
packages, the virtualenv, the host
audit folder (root, 0700), the AppArmor profile loaded where AppArmor restricts
user namespaces, and the proxy service. The proxy service and ``sandbox init``
in each repository are ``sandbox install proxy-service`` and ``sandbox install
repo`` on the host, the steps the roles run. Host data: ``sandbox_render_host`` names the host
in the inventory folder (default: the pyinfra host name without its connector
prefix).

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
from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.install import rendered_files
from agent_sandbox.install.repository import init_flags
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
    """Install this host's rendered artifacts (and, if asked, the runtime)."""
    name = render_host_name(host.name, host.data)
    facts, artifacts = rendered(inventory_dir, name)
    spec = _FLEETS[os.path.realpath(inventory_dir)].spec_for(name)
    if install_runtime:
        _runtime(wheelhouse, prefix, audit_dir)
    files.directory(name=f"Folder {STAGE}", path=STAGE, present=True, user="root",
                    group="root", mode="0700")
    files.put(name="Stage the file installer", src=io.BytesIO(installer_source()),
              dest=INSTALLER, user="root", group="root", mode="0600")

    def in_repo(target: str) -> bool:
        return any(target.startswith(r.rstrip("/") + "/") for r in facts.repositories)

    # host files first (the managed policy `sandbox init` layers under), then
    # `sandbox init`, then the repository files replacing what init wrote and the
    # manifest: the order the Ansible roles use. Each batch is one run of the
    # installer the roles' module runs (agent_sandbox.install.rendered_files).
    entries = install_entries(artifacts, facts)
    _install_files("host", [e for t, e in entries.items() if not in_repo(t)])
    if install_runtime:
        flags = init_flags(spec)
        for repo in facts.repositories:
            _init(repo, flags, prefix)
    repo_files = [e for t, e in entries.items() if in_repo(t)]
    listed = json_bytes(manifest(artifacts))
    repo_files.append({"target": manifest_path, "mode": "0644",
                       "content_b64": base64.b64encode(listed).decode("ascii")})
    _install_files("repositories", repo_files)
    if install_runtime:
        for art in artifacts.values():
            if art.kind == "apparmor-profile":
                _apparmor(art, prefix)
        for art in artifacts.values():
            if art.kind == "systemd-unit":
                _service(art, prefix, audit_dir)
        for art in artifacts.values():
            if art.kind == "web-unit" or (art.kind in SCHEDULE_KINDS
                                          and art.target.endswith(".timer")):
                server.shell(name=f"Run {os.path.basename(art.target)}",
                             commands=[web_service_command(art)])


def installer_source() -> bytes:
    """The installer's own file, uploaded to each host and run by its Python."""
    return Path(rendered_files.__file__).read_bytes()


def _install_files(batch: str, entries: list[dict[str, Any]]) -> None:
    spec = f"{STAGE}/{batch}.json"
    files.put(name=f"Stage the {batch} files", src=io.BytesIO(json_bytes({"files": entries})),
              dest=spec, user="root", group="root", mode="0600")
    server.shell(name=f"Install the {batch} files",
                 commands=[f"python3 -I {shlex.quote(INSTALLER)} {shlex.quote(spec)}"])


def service_command(unit: Artifact, prefix: str = PREFIX, log_dir: str = AUDIT_DIR) -> str:
    """``sandbox install proxy-service`` for a rendered unit: the step the Ansible
    role runs too (systemd when it is the init system, a detached process otherwise,
    restarted when the settings it enforces changed)."""
    q = shlex.quote
    return (f"{q(prefix)}/venv/bin/sandbox install proxy-service --unit {q(unit.target)} "
            f"--log-dir {q(log_dir)}")


SCHEDULE_KINDS = ("drift-schedule", "pull-schedule")  # render.schedules: their timers run


def web_service_command(unit: Artifact) -> str:
    """Enable and start the web approvals unit, or a scheduled job's timer, under
    systemd (what the Ansible role's ``systemd_service`` tasks do); a host without
    systemd keeps the file only."""
    name = shlex.quote(os.path.basename(unit.target))
    return (f"if [ -d /run/systemd/system ]; then systemctl daemon-reload && "
            f"systemctl enable {name} && systemctl restart {name}; fi")


def _service(unit: Artifact, prefix: str, log_dir: str) -> None:
    server.shell(name=f"Run {os.path.basename(unit.target)}",
                 commands=[service_command(unit, prefix, log_dir)])


def init_command(repo: str, flags: list[str], prefix: str = PREFIX) -> str:
    """``sandbox install repo`` for one repository: ``sandbox init`` as the folder's
    owner, once, with the spec's agents (the step the Ansible role runs too)."""
    q = shlex.quote
    return " ".join([f"{q(prefix)}/venv/bin/sandbox", "install", "repo", q(repo),
                     *map(q, flags)])


def _init(repo: str, flags: list[str], prefix: str) -> None:
    server.shell(name=f"sandbox install repo {repo}", commands=[init_command(repo, flags, prefix)])


def apparmor_command(profile: Artifact, prefix: str = PREFIX) -> str:
    """``sandbox install apparmor-profile``: load the profile where AppArmor restricts
    unprivileged user namespaces, again when it changed (the step the role runs)."""
    q = shlex.quote
    return (f"{q(prefix)}/venv/bin/sandbox install apparmor-profile --profile "
            f"{q(profile.target)}")


def _apparmor(profile: Artifact, prefix: str) -> None:
    server.shell(name=f"Load {profile.target} where AppArmor restricts user namespaces",
                 commands=[apparmor_command(profile, prefix)])


def _runtime(wheelhouse: str | None, prefix: str, audit_dir: str = AUDIT_DIR) -> None:
    """The runtime from the controller's wheelhouse (see deploy.wheelhouse)."""
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
    files.directory(name=f"Host audit folder {audit_dir}", path=audit_dir, present=True,
                    user="root", group="root", mode="0700")
    put = files.put(name="Copy the wheelhouse", src=str(out / wh.ARCHIVE),
                    dest=f"{prefix}/wheelhouse.tar", mode="0644")
    server.shell(
        name="Install agent-sandbox offline from the wheelhouse",
        commands=[
            f"test -x {prefix}/venv/bin/python3 || python3 -m venv {prefix}/venv",
            f"cd {prefix} && rm -rf wheelhouse && mkdir -m 0755 wheelhouse "
            "&& tar -xf wheelhouse.tar -C wheelhouse",
            f"{prefix}/venv/bin/python3 -m pip install -q --no-index --find-links "
            f"{prefix}/wheelhouse agent-sandbox",
            f"{prefix}/venv/bin/python3 -m pip install -q --no-index --no-deps "
            f"--force-reinstall {prefix}/wheelhouse/agent_sandbox-*.whl",
        ],
        _if=put.did_change,
    )
    files.link(name="Link the sandbox command", path="/usr/local/bin/sandbox",
               target=f"{prefix}/venv/bin/sandbox")
