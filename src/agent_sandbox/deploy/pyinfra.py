"""The pyinfra deploy: the same artifacts as the Ansible roles, from the same renderer.

Usage (see deploy/pyinfra/ for an example inventory and deploy file)::

    from agent_sandbox.deploy.pyinfra import agent_sandbox
    agent_sandbox(inventory_dir="inventories/demo")

``agent_sandbox`` renders the current host with ``FleetRenderer`` (the code
``sandbox render`` and the Ansible filter use), installs every artifact with
``files.put`` (root-owned, the rendered mode), the render manifest that
``sandbox verify --drift`` reads, and optionally the runtime from the
controller-built wheelhouse, as the ``sandbox_runtime`` role does: the system
packages, the virtualenv, the host
audit folder (root, 0700), the AppArmor profile loaded where AppArmor restricts
user namespaces, and the proxy service. Host data: ``sandbox_render_host`` names the host
in the inventory folder (default: the pyinfra host name without its connector
prefix).

It never renders on the host and never installs a partial rendering: spec
problems stop the deploy before any operation is queued.
"""

from __future__ import annotations

import io
import os
import shlex
from pathlib import Path
from typing import Any

from pyinfra import host  # type: ignore[attr-defined]
from pyinfra.api import deploy  # type: ignore[attr-defined]
from pyinfra.operations import files, server

from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.render import Artifact, json_bytes, manifest

MANIFEST = "/etc/agent-sandbox/manifest.json"
PREFIX = "/opt/agent-sandbox"
AUDIT_DIR = "/var/log/agent-sandbox"
PACKAGES = ("bubblewrap", "socat", "python3-venv")
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


def owner_of(facts: Any, path: str) -> str | None:
    for user in facts.users:
        home = user.home.rstrip("/")
        if path == home or path.startswith(home + "/"):
            return str(user.name)
    return None


@deploy("agent-sandbox")
def agent_sandbox(inventory_dir: str, install_runtime: bool = False,
                  wheelhouse: str | None = None, prefix: str = PREFIX,
                  manifest_path: str = MANIFEST, audit_dir: str = AUDIT_DIR) -> None:
    """Install this host's rendered artifacts (and, if asked, the runtime)."""
    name = render_host_name(host.name, host.data)
    facts, artifacts = rendered(inventory_dir, name)
    if install_runtime:
        _runtime(wheelhouse, prefix, audit_dir)
    parents: dict[str, str | None] = {}
    for target in artifacts:
        parent = os.path.dirname(target)
        parents.setdefault(parent, owner_of(facts, target))
    for parent, owner in sorted(parents.items()):
        files.directory(name=f"Folder {parent}", path=parent, present=True,
                        user=owner, _no_check_owner_mode=owner is None)

    def in_repo(target: str) -> bool:
        return any(target.startswith(r.rstrip("/") + "/") for r in facts.repositories)

    def put(art: Artifact) -> None:
        files.put(name=f"Install {art.target}", src=io.BytesIO(art.content), dest=art.target,
                  user="root", group="root", mode=f"{art.mode:04o}")

    # host files first (the managed policy `sandbox init` layers under), then
    # `sandbox init`, then the repository files replacing what init wrote: the
    # order the Ansible roles use
    for target, art in artifacts.items():
        if not in_repo(target):
            put(art)
    if install_runtime:
        for repo in facts.repositories:
            _init(repo, owner_of(facts, repo) or "root", prefix)
    for target, art in artifacts.items():
        if in_repo(target):
            put(art)
    files.directory(name=f"Folder {os.path.dirname(manifest_path)}",
                    path=os.path.dirname(manifest_path), present=True,
                    _no_check_owner_mode=True)
    files.put(name=f"Install {manifest_path}", src=io.BytesIO(json_bytes(manifest(artifacts))),
              dest=manifest_path, user="root", group="root", mode="0644")
    if install_runtime:
        for art in artifacts.values():
            if art.kind == "apparmor-profile":
                _apparmor(art)
        for art in artifacts.values():
            if art.kind == "systemd-unit":
                _service(art)


def exec_start(unit: str) -> str:
    """The ExecStart command line of a rendered unit."""
    for line in unit.splitlines():
        if line.startswith("ExecStart="):
            return line[len("ExecStart="):].strip()
    raise ValueError("the unit has no ExecStart line")


def _service(unit: Artifact) -> None:
    server.shell(name=f"Run {os.path.basename(unit.target)}", commands=[service_command(unit)])


def service_command(unit: Artifact) -> str:
    """The shell command that runs a rendered unit: under systemd when it is the init
    system (restarted when the unit file or the settings it was started for changed),
    otherwise its ExecStart in its own session with a pid file. The Ansible role
    does the same, with the same records."""
    q = shlex.quote
    base = os.path.basename(unit.target)
    name = base.removesuffix(".service")
    command = exec_start(unit.content.decode())
    words = command.split()
    settings = words[words.index("--settings") + 1] if "--settings" in words else "/dev/null"
    detached = (
        f"pidfile=/run/{name}.pid; "
        'alive() { [ -s "$pidfile" ] && '
        '[ -n "$(tr -d "\\0" < "/proc/$(cat "$pidfile")/cmdline" 2>/dev/null)" ]; }; '
        f'if alive && [ "$(cat /run/{name}.settings 2>/dev/null)" = "$want" ]; then exit 0; fi; '
        'if alive; then kill "$(cat "$pidfile")"; sleep 0.5; fi; '
        f"mkdir -p /run/agent-sandbox; rm -f \"$pidfile\"; "
        f"setsid /bin/sh -c 'echo $$ > \"$1\"; shift; exec \"$@\"' sh \"$pidfile\" {command} "
        f">>/var/log/agent-sandbox/{name}.log 2>&1 </dev/null & "
        f'echo "$want" > /run/{name}.settings; sleep 1; alive'
    )
    record = f"/var/lib/agent-sandbox/{base}.settings"
    systemd = (
        f"stale=$(systemctl show --property=NeedDaemonReload --value {q(base)}); "
        f"systemctl daemon-reload && systemctl enable --now {q(base)} && "
        f'if [ "$stale" = yes ] || [ "$(cat {record} 2>/dev/null)" != "$want" ]; then '
        f"systemctl restart {q(base)} && mkdir -p /var/lib/agent-sandbox && "
        f'echo "$want" > {record}; fi'
    )
    want = f'want=$(sha256sum < {q(settings)} | cut -d" " -f1); '  # both keep this record
    return f"{want}if [ -d /run/systemd/system ]; then {systemd}; else {detached}; fi"


REPOSITORY_POLICY = b"""# Repository policy layer (see `sandbox schema`). The fleet's managed layers
# above it may only be tightened here.
version: 1
"""


def _init(repo: str, owner: str, prefix: str) -> None:
    """``sandbox init`` in a repository, as its owner, once (like the Ansible role)."""
    q = shlex.quote
    files.directory(name=f"Folder {repo}/.sandbox", path=f"{repo}/.sandbox", present=True,
                    user=owner, mode="0755")
    server.shell(
        name=f"sandbox init {repo}",
        commands=[
            f"test -e {q(repo)}/.sandbox/policy.yml || "
            f"printf %s {q(REPOSITORY_POLICY.decode())} > {q(repo)}/.sandbox/policy.yml",
            f"chown {q(owner)} {q(repo)}/.sandbox/policy.yml",
            f"test -e {q(repo)}/.sandbox/policy.json || runuser -u {q(owner)} -- env "
            f"HOME=$(getent passwd {q(owner)} | cut -d: -f6) {q(prefix)}/venv/bin/sandbox init "
            f"{q(repo)} --claude --codex --cursor --gemini --mcp",
        ],
    )


USERNS_RESTRICTED = "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"


def apparmor_command(profile: str, flag: str = USERNS_RESTRICTED) -> str:
    """Load an AppArmor profile only where AppArmor restricts unprivileged user
    namespaces (Ubuntu 24.04 and later), as the role does; nothing elsewhere."""
    return (f'if [ "$(cat {shlex.quote(flag)} 2>/dev/null)" = 1 ]; then '
            f"apparmor_parser -r {shlex.quote(profile)}; fi")


def _apparmor(profile: Artifact) -> None:
    server.shell(name=f"Load {profile.target} where AppArmor restricts user namespaces",
                 commands=[apparmor_command(profile.target)])


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
