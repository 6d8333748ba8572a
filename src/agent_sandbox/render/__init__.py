"""The renderer: a pure function from (spec, host facts) to artifacts.

``render(spec, facts)`` returns ``{target path: Artifact}`` for one host. Each
area (srt settings, agents, macOS, Windows, cluster, ...) is a module listed in
``RENDERERS`` with a ``render(spec, facts) -> Iterable[Artifact]`` function.
Same input, same bytes: no clocks, no randomness, no environment lookups, sorted
keys where order is not meaningful.

It must never write files or start processes; ``write_tree`` (used by the
CLI) is the only effect here, kept apart.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from ..contract import ARTIFACT_KINDS
from ..errors import SandboxError
from ..inventory import HostFacts
from ..spec.models import Spec

RENDERERS: tuple[str, ...] = (
    "agent_sandbox.render.srt",
    "agent_sandbox.render.agents",
    "agent_sandbox.render.linux",
    "agent_sandbox.render.macos",
    "agent_sandbox.render.windows",
    "agent_sandbox.render.schedules",
    "agent_sandbox.render.cluster",
    "agent_sandbox.render.verify_waivers",
)


@dataclass(frozen=True)
class Artifact:
    """One file to install: where, what, with which mode, and what kind it is."""

    target: str
    content: bytes
    mode: int
    kind: str

    def __post_init__(self) -> None:
        if self.kind not in ARTIFACT_KINDS:
            raise RenderError(f"{self.target}: artifact kind {self.kind!r} is not in "
                              "contract.ARTIFACT_KINDS")

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content).hexdigest()


class RenderError(SandboxError):
    """Two renderers produced the same target, or a renderer failed."""


_loaded: list[Callable[[Spec, HostFacts], Iterable[Artifact]]] | None = None


def _renderers() -> list[Callable[[Spec, HostFacts], Iterable[Artifact]]]:
    global _loaded
    if _loaded is None:
        _loaded = [importlib.import_module(m).render for m in RENDERERS]
    return _loaded


def render(spec: Spec, facts: HostFacts) -> dict[str, Artifact]:
    """Every artifact for one host, keyed by target path (sorted)."""
    out: dict[str, Artifact] = {}
    for fn in _renderers():
        for art in fn(spec, facts):
            if art.target in out:
                raise RenderError(f"two renderers produce {art.target}")
            out[art.target] = art
    return dict(sorted(out.items()))


_MEMO: dict[int, tuple[Spec, dict[Any, Any]]] = {}
_MEMO_SPECS = 64
_MEMO_ENTRIES = 256


def memo(spec: Spec, key: Any, make: Callable[[], Any]) -> Any:
    """Cache ``make()`` for this spec object under ``key``.

    A fleet shares a handful of merged specs across thousands of hosts, so most
    documents (and their bytes) are the same from host to host. The cache is
    keyed on the spec *object*: a spec must not be mutated once rendering has
    started (the loader hands out fresh objects). Both levels are small LRUs, so
    memory stays flat however many hosts (and homes) go through.
    """
    entry = _MEMO.get(id(spec))
    if entry is None or entry[0] is not spec:
        if len(_MEMO) >= _MEMO_SPECS:
            _MEMO.pop(next(iter(_MEMO)))
        entry = (spec, {})
        _MEMO[id(spec)] = entry
    cache = entry[1]
    try:
        value = cache.pop(key)
    except KeyError:
        value = make()
        if len(cache) >= _MEMO_ENTRIES:
            cache.pop(next(iter(cache)))
    cache[key] = value  # most recently used last
    return value


def json_bytes(data: Any, *, sort_keys: bool = True) -> bytes:
    """Stable, readable JSON (2-space indent, trailing newline).

    orjson writes the same bytes as ``json.dumps(indent=2, ensure_ascii=False)``
    about fifty times faster; what orjson cannot encode (integers beyond 64
    bits, non-string keys) goes through the standard library instead, so the
    bytes still depend only on the data.
    """
    option = _OPT | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(data, option=option)
    except (orjson.JSONEncodeError, TypeError):
        text = json.dumps(data, indent=2, sort_keys=sort_keys, ensure_ascii=False,
                          allow_nan=False)
        return (text + "\n").encode()


_OPT = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE


def manifest(artifacts: dict[str, Artifact]) -> dict[str, Any]:
    return {
        "version": 1,
        "artifacts": [
            {"target": a.target, "kind": a.kind, "mode": f"{a.mode:04o}", "sha256": a.sha256}
            for a in artifacts.values()
        ],
    }


def home_owner(facts: HostFacts, path: str) -> str | None:
    """The user whose home holds ``path``, if any."""
    for user in facts.users:
        home = user.home.rstrip("/")
        if path == home or path.startswith(home + "/"):
            return str(user.name)
    return None


def install_entries(artifacts: dict[str, Artifact],
                    facts: HostFacts) -> dict[str, dict[str, Any]]:
    """Each artifact as the host's file installer takes it
    (``agent_sandbox.install.rendered_files``, which both the roles' module and the
    pyinfra deploy run): bytes in base64, octal mode, kind, SHA-256, and the user
    whose home holds it."""
    return {
        target: {
            "target": target,
            "content_b64": base64.b64encode(art.content).decode("ascii"),
            "mode": f"{art.mode:04o}",
            "kind": art.kind,
            "sha256": art.sha256,
            "owner": home_owner(facts, target),
        }
        for target, art in artifacts.items()
    }


def _under(out_dir: str, target: str) -> str:
    rel = target.replace("\\", "/")
    if len(rel) > 1 and rel[1] == ":":  # C:/... on Windows targets
        rel = rel[0].lower() + rel[2:]
    rel = rel.lstrip("/")
    path = os.path.normpath(os.path.join(out_dir, rel))
    if not (path + os.sep).startswith(os.path.normpath(out_dir) + os.sep):
        raise RenderError(f"target {target!r} escapes the output directory")
    return path


def write_tree(artifacts: dict[str, Artifact], out_dir: str) -> str:
    """Write artifacts under ``out_dir`` mirroring their targets, plus manifest.json.

    Refuses to follow a symbolic link out of ``out_dir`` (a link planted at
    ``OUT/etc`` must not turn a render into a write to ``/etc``).
    """
    os.makedirs(out_dir, exist_ok=True)
    root = os.path.realpath(out_dir)
    for art in artifacts.values():
        rel = os.path.relpath(_under(out_dir, art.target), out_dir)
        parts = rel.split(os.sep)
        parent = root
        for part in parts[:-1]:  # one level at a time, never through a link
            parent = os.path.join(parent, part)
            if os.path.islink(parent):
                raise RenderError(f"{parent} is a symbolic link; a render never writes "
                                  "through one (it could lead outside the output folder)")
            if not os.path.isdir(parent):
                os.mkdir(parent)
        _write_new(os.path.join(parent, parts[-1]), art.content, art.mode)
    _write_new(os.path.join(root, "manifest.json"), json_bytes(manifest(artifacts)), 0o644)
    return os.path.join(out_dir, "manifest.json")


def _write_new(path: str, content: bytes, mode: int) -> None:
    """Atomic replace through a fresh temporary file (never through a link)."""
    from agent_sandbox.atomic_file import replace_file

    replace_file(path, content, mode)
