"""Ansible filters that call the agent-sandbox renderer on the controller.

``agent_sandbox_render(inventory_dir, host)`` renders one host with
``agent_sandbox.fleet.FleetRenderer`` (the same code path as ``sandbox render``
and the pyinfra deploy) and returns ``{target: {target, content_b64, mode,
kind, sha256, owner}}``; the Linux and macOS roles install those bytes with the project's module
``agent_sandbox_files`` (``plugins/modules``): one call for every file, with
check mode and ``--diff``.

Helpers: ``agent_sandbox_manifest`` (the manifest.json bytes ``sandbox render``
writes), ``agent_sandbox_select`` (artifacts of some kinds, as a sorted list; a kind
not in ``agent_sandbox.contract.ARTIFACT_KINDS`` fails the task),
``agent_sandbox_dirs`` (the parent folders to create, with owners),
``agent_sandbox_init_flags`` (``sandbox init`` flags for the enabled agents),
``agent_sandbox_repo_steps`` and ``agent_sandbox_service_steps`` (the host steps the
bundle runs: ``agent_sandbox.deploy.host_steps``, as the pyinfra deploy lists them),
``agent_sandbox_bundle_parts`` (the roles' parts of a host's bundle, rendered in one
task) and ``agent_sandbox_wheelhouse`` (the wheelhouse, built where its source
changed, with its archive's SHA-256).

These filters never touch a host and never fall back to partial output: any
spec or inventory problem fails the task with the renderer's own message.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ansible.errors import AnsibleFilterError

_PROJECT_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")


def import_project(name: str) -> Any:
    """A module of the agent-sandbox package: installed in the Python that runs
    Ansible, or else from this checkout's ``src/``."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        if os.path.isdir(_PROJECT_SRC) and _PROJECT_SRC not in sys.path:
            sys.path.insert(0, os.path.abspath(_PROJECT_SRC))
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            raise AnsibleFilterError(
                "agent-sandbox is not importable on the controller: install it into the "
                f"Python that runs Ansible ({sys.executable}): {exc}") from None


def _import_renderer() -> Any:
    return import_project("agent_sandbox.fleet")


_FLEETS: dict[str, Any] = {}
_RENDERED: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}


def _fleet(inventory_dir: str) -> Any:
    fleet = _import_renderer()
    root = os.path.realpath(str(inventory_dir))
    if root not in _FLEETS:
        _FLEETS[root] = fleet.FleetRenderer.from_path(root)
    return _FLEETS[root]


def _render(inventory_dir: str, host: str) -> tuple[Any, dict[str, Any]]:
    from agent_sandbox.errors import SpecError

    key = (os.path.realpath(str(inventory_dir)), str(host))
    if key in _RENDERED:  # a task's worker renders a host once, however many filters ask
        return _RENDERED[key]
    try:
        fr = _fleet(inventory_dir)
        _RENDERED[key] = fr.facts(str(host)), fr.render_host(str(host))
        return _RENDERED[key]
    except SpecError as exc:
        problems = "\n".join(str(p) for p in exc.problems)
        raise AnsibleFilterError(f"agent-sandbox spec problems for {host}:\n{problems}") from None
    except Exception as exc:  # fail the task, never install a partial rendering
        raise AnsibleFilterError(f"agent-sandbox could not render {host}: {exc}") from None


def agent_sandbox_render(inventory_dir: str, host: str) -> dict[str, dict[str, Any]]:
    """Every artifact for ``host``: ``{target: {target, content_b64, mode, kind, sha256,
    owner}}`` (``agent_sandbox.render.install_entries``, as the pyinfra deploy lists them)."""
    from agent_sandbox.render import install_entries

    facts, artifacts = _render(inventory_dir, host)
    return install_entries(artifacts, facts)


def agent_sandbox_manifest(inventory_dir: str, host: str) -> str:
    """The manifest.json text ``sandbox render`` writes for ``host`` (same bytes)."""
    from agent_sandbox.render import json_bytes, manifest

    _, artifacts = _render(inventory_dir, host)
    return json_bytes(manifest(artifacts)).decode("utf-8")


def agent_sandbox_init_flags(inventory_dir: str, host: str) -> list[str]:
    """``sandbox install repo`` flags for the agents the host's spec enables (and
    ``--mcp``): ``agent_sandbox.install.repository.init_flags``, as pyinfra uses."""
    try:
        spec = _fleet(inventory_dir).spec_for(str(host))
    except Exception as exc:
        raise AnsibleFilterError(
            f"agent-sandbox could not load the spec of {host}: {exc}") from None
    from agent_sandbox.install.repository import init_flags

    return init_flags(spec)


def agent_sandbox_select(rendered: dict[str, dict[str, Any]], include: list[str] | None = None,
                         exclude: list[str] | None = None) -> list[dict[str, Any]]:
    """Artifacts whose kind is in ``include`` (all when None) and not in ``exclude``,
    as a list sorted by target, each with its ``target``."""
    if not isinstance(rendered, dict):
        raise AnsibleFilterError("agent_sandbox_select expects the output of agent_sandbox_render")
    _import_renderer()
    from agent_sandbox.contract import ARTIFACT_KINDS

    inc = None if include is None else set(include)
    exc = set(exclude or ())
    unknown = sorted(((inc or set()) | exc) - set(ARTIFACT_KINDS))
    if unknown:
        raise AnsibleFilterError(
            f"agent_sandbox_select: no renderer produces the artifact kinds {unknown} "
            f"(the kinds are agent_sandbox.contract.ARTIFACT_KINDS: {sorted(ARTIFACT_KINDS)})")
    return [
        {"target": target, **art}
        for target, art in sorted(rendered.items())
        if (inc is None or art["kind"] in inc) and art["kind"] not in exc
    ]


def agent_sandbox_dirs(selected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Parent folders of the selected artifacts (sorted, unique), each with the owner
    of the files in it (None for system folders)."""
    out: dict[str, str | None] = {}
    for art in selected:
        parent = os.path.dirname(art["target"])
        if parent and parent not in out:
            out[parent] = art.get("owner")
    return [{"path": p, "owner": o} for p, o in sorted(out.items())]


def agent_sandbox_repo_steps(repositories: list[str], flags: list[str], prefix: str,
                             policy: str | None = None) -> list[dict[str, Any]]:
    """``sandbox install repo`` steps for the repositories (the bundle's early steps)."""
    _import_renderer()
    from agent_sandbox.deploy.host_steps import repo_steps

    return repo_steps(repositories, flags, prefix=prefix, policy=policy)


def agent_sandbox_service_steps(selected: list[dict[str, Any]], prefix: str, log_dir: str,
                                supervisor: str = "auto", apparmor: str = "auto",
                                proxy: bool = True) -> list[dict[str, Any]]:
    """The AppArmor and proxy steps for the selected artifacts (the late steps)."""
    _import_renderer()
    from agent_sandbox.deploy.host_steps import service_steps

    return service_steps(selected, prefix=prefix, log_dir=log_dir, supervisor=supervisor,
                         apparmor=apparmor, proxy=bool(proxy))


def agent_sandbox_bundle_parts(parts: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Roles' parts of a host's bundle, each a description (no bytes yet), rendered
    in one task: ``{inventory, host, kinds, into}`` (the rendered artifacts of those
    kinds go to ``files`` or ``late_files``), ``manifest`` (a path: the render
    manifest joins ``files``), ``repositories`` with ``init_flags`` (empty: the
    spec's), ``prefix`` and ``policy`` (``sandbox install repo`` early steps)."""
    out: dict[str, list[Any]] = {"files": [], "early_steps": [], "late_files": []}
    for part in parts or []:
        if not part:
            continue
        inventory, host = str(part["inventory"]), str(part["host"])
        if part.get("kinds"):
            into = part.get("into", "files")
            if into not in ("files", "late_files"):
                raise AnsibleFilterError(f"agent_sandbox_bundle_parts: 'into' is {into!r}")
            out[into] += agent_sandbox_select(agent_sandbox_render(inventory, host),
                                              include=list(part["kinds"]))
        if part.get("manifest"):
            import base64

            text = agent_sandbox_manifest(inventory, host).encode()
            out["files"].append({"target": str(part["manifest"]), "mode": "0644",
                                 "kind": "manifest",
                                 "content_b64": base64.b64encode(text).decode("ascii")})
        if part.get("repositories"):
            flags = part.get("init_flags") or agent_sandbox_init_flags(inventory, host)
            out["early_steps"] += agent_sandbox_repo_steps(
                list(part["repositories"]), list(flags), str(part["prefix"]),
                part.get("policy"))
    return out


def agent_sandbox_wheelhouse(project_dir: str, out_dir: str, build: bool = True) -> dict[str, Any]:
    """The wheelhouse a host installs from, built first where its source changed
    (``agent_sandbox.deploy.wheelhouse``, in this process): its archive and SHA-256."""
    _import_renderer()
    from pathlib import Path

    from agent_sandbox.deploy import wheelhouse

    out = Path(str(out_dir))
    try:
        changed = wheelhouse.build(Path(str(project_dir)), out) if build else False
        digest = wheelhouse.archive_sha256(out)
    except (OSError, RuntimeError) as exc:
        raise AnsibleFilterError(f"agent-sandbox could not build the wheelhouse: {exc}") from None
    return {"changed": changed, "archive": str(out / wheelhouse.ARCHIVE), "sha256": digest}


class FilterModule:
    """agent-sandbox renderer filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "agent_sandbox_render": agent_sandbox_render,
            "agent_sandbox_manifest": agent_sandbox_manifest,
            "agent_sandbox_select": agent_sandbox_select,
            "agent_sandbox_init_flags": agent_sandbox_init_flags,
            "agent_sandbox_dirs": agent_sandbox_dirs,
            "agent_sandbox_repo_steps": agent_sandbox_repo_steps,
            "agent_sandbox_service_steps": agent_sandbox_service_steps,
            "agent_sandbox_wheelhouse": agent_sandbox_wheelhouse,
            "agent_sandbox_bundle_parts": agent_sandbox_bundle_parts,
        }
