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
import re
from collections.abc import Callable, Iterator
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
    def from_vars(name: str, hostvars: dict[str, Any], groups: tuple[str, ...] = (),
                  source: str = "<inventory>",
                  place: Callable[[str], tuple[int, int]] | None = None) -> HostFacts:
        def bad(key: str, message: str) -> SpecError:
            var = key.split("[", 1)[0].split(".", 1)[0]
            line, col = place(var) if place else (1, 1)
            return SpecError([Problem(source, line, col, f"{name}.{key}", message)])

        os_name = hostvars.get("sandbox_os", "linux")
        if os_name not in ("linux", "macos", "windows"):
            raise bad("sandbox_os", f"unknown OS {os_name!r} (linux, macos or windows)")
        users = []
        raw_users = hostvars.get("sandbox_users") or []
        if not isinstance(raw_users, list):
            raise bad("sandbox_users", "expected a list of {name: ..., home: ...}")
        for i, u in enumerate(raw_users):
            if not isinstance(u, dict) or not isinstance(u.get("name"), str) or not u["name"]:
                raise bad(f"sandbox_users[{i}]", "expected {name: USER, home: PATH}")
            home = u.get("home") or _default_home(os_name, u["name"])
            if not isinstance(home, str):
                raise bad(f"sandbox_users[{i}].home", "expected a path")
            users.append(User(u["name"], home))
        repos = hostvars.get("sandbox_repositories") or []
        if not isinstance(repos, list) or not all(isinstance(r, str) and r for r in repos):
            raise bad("sandbox_repositories", "expected a list of repository paths")
        for key in ("sandbox_prefix", "sandbox_python"):
            value = hostvars.get(key, "")
            if not isinstance(value, str):
                raise bad(key, "expected a path")
            if value and not _safe_interpreter_path(value):
                raise bad(key, f"{value!r} must be an absolute path with forward slashes and "
                               "no quotes, '$', backquotes or control characters (hooks run "
                               "it through a shell)")
        return HostFacts(
            name=name,
            os=os_name,
            users=tuple(users),
            repositories=tuple(repos),
            groups=groups,
            prefix=hostvars.get("sandbox_prefix", ""),
            python=hostvars.get("sandbox_python", ""),
        )


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_SCALARS = yaml.constructor.SafeConstructor()


def lean_yaml(stream: Any, positions: dict[tuple[Any, ...], tuple[int, int]] | None = None,
              want: Callable[[tuple[Any, ...]], bool] | None = None) -> Any:
    """Load a YAML document straight from parser events (safe types only).

    ``yaml.safe_load`` first builds a node graph with source marks for every
    scalar; for a 10,000-host inventory that graph is five times the size of
    the data. Building the data from the events keeps the peak close to the
    data itself. Same results as ``safe_load`` for inventories (anchors and
    aliases included; merge keys are not supported). With ``positions``, the
    (line, column) of mapping keys is recorded under their key path (only the
    paths ``want`` accepts, when given).
    """
    anchors: dict[str, Any] = {}
    stack: list[Any] = []  # containers being filled; dicts carry a pending key
    keys: list[Any] = []
    paths: list[tuple[Any, ...]] = []
    root: Any = None
    done = False

    def put(value: Any, anchor: str | None, mark: Any) -> tuple[Any, ...]:
        nonlocal root, done
        if anchor:
            anchors[anchor] = value
        if not stack:
            root, done = value, True
            return ()
        top = stack[-1]
        if isinstance(top, list):
            top.append(value)
            return (*paths[-1], len(top) - 1)
        if keys[-1] is _NO_KEY:
            if isinstance(value, (dict, list)):
                raise yaml.YAMLError("mapping keys must be plain scalars")
            keys[-1] = value
            if positions is not None:
                path = (*paths[-1], value)
                if want is None or want(path):
                    positions[path] = (mark.line + 1, mark.column + 1)
            return ()
        top[keys[-1]] = value
        here = (*paths[-1], keys[-1])
        keys[-1] = _NO_KEY
        return here

    for event in yaml.parse(stream, Loader=_YAML_LOADER):
        mark = event.start_mark
        if isinstance(event, yaml.ScalarEvent):
            put(_scalar(event), event.anchor, mark)
        elif isinstance(event, yaml.MappingStartEvent):
            value: Any = {}
            paths.append(put(value, event.anchor, mark))
            stack.append(value)
            keys.append(_NO_KEY)
        elif isinstance(event, yaml.SequenceStartEvent):
            value = []
            paths.append(put(value, event.anchor, mark))
            stack.append(value)
            keys.append(None)
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            stack.pop()
            keys.pop()
            paths.pop()
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:
                raise yaml.YAMLError(f"unknown alias *{event.anchor}")
            put(anchors[event.anchor], None, mark)
        elif isinstance(event, yaml.DocumentStartEvent) and done:
            raise yaml.YAMLError("an inventory holds one YAML document")
    return root


_NO_KEY = object()


def _inventory_key(path: tuple[Any, ...]) -> bool:
    """The key paths whose places an inventory keeps: groups, their sections,
    hosts, and the variables set on a host itself."""
    n = len(path)
    return ((n >= 1 and path[-1] in ("hosts", "vars", "children"))
            or (n >= 2 and path[-2] in ("hosts", "children"))
            or (n >= 3 and path[-3] == "hosts"))


def _scalar(event: Any) -> Any:
    tag = event.tag
    if tag is None or tag == "!":
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, event.implicit)
    if tag == "tag:yaml.org,2002:str":
        return event.value
    node = yaml.ScalarNode(tag, event.value, style=event.style)
    if tag in _SCALARS.yaml_constructors and not tag.endswith((":binary", ":timestamp")):
        return _SCALARS.yaml_constructors[tag](_SCALARS, node)
    return event.value


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


_ABSOLUTE = re.compile(r"^(/|[A-Za-z]:/)")


def _safe_interpreter_path(path: str) -> bool:
    return bool(_ABSOLUTE.match(path)) and not any(
        c in '"$`\\' or ord(c) < 0x20 or ord(c) == 0x7F for c in path
    )


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
    _positions: dict[tuple[Any, ...], tuple[int, int]] = field(default_factory=dict, repr=False)
    # where each host (and each variable set on the host itself) was written
    host_places: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    var_places: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, root: str) -> Inventory:
        path = os.path.join(root, "hosts.yml")
        try:
            positions: dict[tuple[Any, ...], tuple[int, int]] = {}
            with open(path, encoding="utf-8") as fh:
                data = lean_yaml(fh, positions, _inventory_key)
        except FileNotFoundError:
            raise SpecError([Problem(path, 1, 1, "", "inventory has no hosts.yml")]) from None
        except yaml.YAMLError as exc:
            raise SpecError([Problem(path, 1, 1, "", f"invalid YAML: {exc}")]) from None
        except UnicodeDecodeError as exc:
            raise SpecError([Problem(path, 1, 1, "", f"not UTF-8 text: {exc.reason}")]) from None
        except (ValueError, TypeError, RecursionError) as exc:
            raise SpecError([Problem(path, 1, 1, "", f"invalid YAML value: {exc}")]) from None
        except OSError as exc:
            raise SpecError([Problem(path, 1, 1, "", f"cannot read: {exc.strerror}")]) from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SpecError([Problem(path, 1, 1, "", "an inventory must be a mapping (all: ...)")])
        inv = cls(root)
        inv._layer_files = _spec_files(root)
        inv._positions = positions
        top = ("all",) if "all" in data else ()
        inv._walk("all", data.get("all", data), {}, [], top)
        inv._positions = {}
        return inv

    def _problem(self, raw: tuple[Any, ...], key: str, message: str) -> SpecError:
        line, col = self._positions.get(raw, (1, 1))
        return SpecError([Problem(os.path.join(self.root, "hosts.yml"), line, col, key, message)])

    def _walk(self, group: str, node: Any, inherited: dict[str, Any], chain: list[str],
              raw: tuple[Any, ...]) -> None:
        if node is None:
            node = {}
        if len(chain) > 32:
            raise self._problem(raw, group, "groups nested more than 32 deep "
                                            "(a cycle through aliases?)")
        if not isinstance(node, dict):
            raise self._problem(raw, group, "a group must be a mapping (hosts:, vars:, children:)")
        if group not in self.group_order:
            self.group_order.append(group)
        parts = {k: node.get(k) or {} for k in ("vars", "hosts", "children")}
        for key, value in parts.items():
            if not isinstance(value, dict):
                raise self._problem((*raw, key), f"{group}.{key}", "expected a mapping")
        gvars = {**inherited, **parts["vars"]}
        here = chain + ([group] if group != "all" else [])
        for host, hvars in parts["hosts"].items():
            where = (*raw, "hosts", host)
            if hvars is not None and not isinstance(hvars, dict):
                raise self._problem(where, f"{group}.hosts.{host}",
                                    "host variables must be a mapping")
            name = str(host)
            self.hosts[name] = {**gvars, **self.hosts.get(name, {}), **(hvars or {})}
            if name not in self.host_places and where in self._positions:
                self.host_places[name] = self._positions[where]
            for var in hvars or {}:
                if (*where, var) in self._positions:
                    self.var_places[(name, var)] = self._positions[(*where, var)]
            groups = self.host_groups.setdefault(name, [])
            groups.extend(g for g in here if g not in groups)
        for child, sub in parts["children"].items():
            self._walk(str(child), sub, gvars, here, (*raw, "children", child))

    def facts(self, host: str) -> HostFacts:
        if host not in self.hosts:
            raise SpecError([Problem(os.path.join(self.root, "hosts.yml"), 1, 1, "",
                                     f"host {host!r} is not in the inventory")])
        def place(var: str) -> tuple[int, int]:
            return self.var_places.get((host, var)) or self.host_places.get(host, (1, 1))

        return HostFacts.from_vars(host, self.hosts[host], tuple(self.host_groups.get(host, [])),
                                   os.path.join(self.root, "hosts.yml"), place)

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
