"""What the renderer needs to know about a host, and the inventory it comes from.

``HostFacts`` is plain data: the renderer is a pure function of (spec, facts).
``Inventory`` reads an Ansible YAML inventory (``hosts.yml``) plus the spec
layers kept beside it (``sandbox/fleet.yml``, ``sandbox/groups/<group>.yml``,
``sandbox/hosts/<host>.yml``) without importing Ansible, so a 10,000-host fleet
streams quickly. Host variables used: ``sandbox_os``, ``sandbox_users``
(name/home pairs), ``sandbox_repositories``, ``sandbox_python``,
``sandbox_prefix``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from .errors import Problem, SpecError

OS = Literal["linux", "macos", "windows"]

DEFAULT_PREFIX = {"linux": "/opt/agent-sandbox", "macos": "/opt/agent-sandbox",
                  "windows": "C:/Program Files/agent-sandbox"}


@dataclass(frozen=True)
class User:
    name: str
    home: str


@dataclass(frozen=True)
class HostFacts:
    """Facts about one host. Everything the renderer may depend on is here."""

    name: str
    os: OS = "linux"
    users: tuple[User, ...] = ()
    repositories: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    prefix: str = ""
    python: str = ""

    def __post_init__(self) -> None:
        if not self.prefix:
            object.__setattr__(self, "prefix", DEFAULT_PREFIX[self.os])
        if not self.python:
            py = (f"{self.prefix}/venv/Scripts/python.exe" if self.os == "windows"
                  else f"{self.prefix}/venv/bin/python3")
            object.__setattr__(self, "python", py)

    @staticmethod
    def from_vars(name: str, hostvars: dict[str, Any], groups: tuple[str, ...] = ()) -> HostFacts:
        os_name = str(hostvars.get("sandbox_os", "linux"))
        if os_name not in ("linux", "macos", "windows"):
            raise SpecError([Problem("<inventory>", 1, 1, f"{name}.sandbox_os",
                                     f"unknown OS {os_name!r} (linux, macos or windows)")])
        users = tuple(
            User(str(u["name"]), str(u.get("home") or _default_home(os_name, str(u["name"]))))
            for u in hostvars.get("sandbox_users", []) or []
        )
        return HostFacts(
            name=name,
            os=os_name,  # type: ignore[arg-type]
            users=users,
            repositories=tuple(str(r) for r in hostvars.get("sandbox_repositories", []) or []),
            groups=groups,
            prefix=str(hostvars.get("sandbox_prefix", "")),
            python=str(hostvars.get("sandbox_python", "")),
        )


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _spec_files(root: str) -> frozenset[str]:
    """Every spec layer file under ``root/sandbox`` (fleet.yml, groups/, hosts/)."""
    base = os.path.join(root, "sandbox")
    found = set()
    if os.path.isfile(os.path.join(base, "fleet.yml")):
        found.add(os.path.join(base, "fleet.yml"))
    for sub in ("groups", "hosts"):
        folder = os.path.join(base, sub)
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found.update(os.path.join(folder, n) for n in names if n.endswith(".yml"))
    return frozenset(found)


def _default_home(os_name: str, user: str) -> str:
    if os_name == "macos":
        return f"/Users/{user}"
    if os_name == "windows":
        return f"C:/Users/{user}"
    return "/root" if user == "root" else f"/home/{user}"


@dataclass
class Inventory:
    """An inventory directory: hosts.yml and the spec layers beside it."""

    root: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    host_groups: dict[str, list[str]] = field(default_factory=dict)
    group_order: list[str] = field(default_factory=list)
    _layer_files: frozenset[str] | None = field(default=None, repr=False)

    @classmethod
    def load(cls, root: str) -> Inventory:
        path = os.path.join(root, "hosts.yml")
        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.load(fh, Loader=_YAML_LOADER) or {}  # noqa: S506 - a safe loader
        except FileNotFoundError:
            raise SpecError([Problem(path, 1, 1, "", "inventory has no hosts.yml")]) from None
        except yaml.YAMLError as exc:
            raise SpecError([Problem(path, 1, 1, "", f"invalid YAML: {exc}")]) from None
        except UnicodeDecodeError as exc:
            raise SpecError([Problem(path, 1, 1, "", f"not UTF-8 text: {exc.reason}")]) from None
        if not isinstance(data, dict):
            raise SpecError([Problem(path, 1, 1, "", "an inventory must be a mapping (all: ...)")])
        inv = cls(root)
        inv._layer_files = _spec_files(root)
        inv._walk("all", data.get("all", data), {}, [])
        return inv

    def _walk(self, group: str, node: Any, inherited: dict[str, Any], chain: list[str]) -> None:
        if not isinstance(node, dict):
            return
        if group not in self.group_order:
            self.group_order.append(group)
        gvars = {**inherited, **(node.get("vars") or {})}
        here = chain + ([group] if group != "all" else [])
        for host, hvars in (node.get("hosts") or {}).items():
            merged = {**gvars, **self.hosts.get(host, {}), **(hvars or {})}
            self.hosts[host] = merged
            groups = self.host_groups.setdefault(host, [])
            groups.extend(g for g in here if g not in groups)
        for child, sub in (node.get("children") or {}).items():
            self._walk(child, sub or {}, gvars, here)

    def facts(self, host: str) -> HostFacts:
        if host not in self.hosts:
            raise SpecError([Problem(os.path.join(self.root, "hosts.yml"), 1, 1, "",
                                     f"host {host!r} is not in the inventory")])
        return HostFacts.from_vars(host, self.hosts[host], tuple(self.host_groups.get(host, [])))

    def layer_paths(self, host: str) -> list[str]:
        """Spec files for a host, most managed first; missing files are skipped.

        The folder is listed once when the inventory loads (not stat'ed per host).
        """
        base = os.path.join(self.root, "sandbox")
        out = [os.path.join(base, "fleet.yml")]
        out += [os.path.join(base, "groups", f"{g}.yml") for g in self.host_groups.get(host, [])]
        out.append(os.path.join(base, "hosts", f"{host}.yml"))
        files = self._layer_files if self._layer_files is not None else _spec_files(self.root)
        return [p for p in out if p in files]

    def __iter__(self) -> Iterator[str]:
        return iter(self.hosts)
