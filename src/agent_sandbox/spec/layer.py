"""One spec layer: a parsed file's mapping with where each key came from, and
its validation on its own (``validate_layer``). The loader makes layers, the
merge (``layers``) stacks them; both read this.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..errors import Problem
from .models import Spec

Path_ = tuple[str | int, ...]


@dataclass
class Layer:
    """One parsed spec file."""

    source: str
    data: dict[str, Any]
    positions: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    name: str = ""
    # For a repository layer: the repository, which its relative paths start
    # from. The merge expands them (and ``~``) before comparing with the layers
    # above, so ``allow_write: ["."]`` in ~/src/app is covered by ``~/src``.
    base: str = ""

    def where(self, path: Path_) -> tuple[int, int]:
        """The position of the longest known prefix of ``path``."""
        p = tuple(path)
        while p:
            if p in self.positions:
                return self.positions[p]
            p = p[:-1]
        return self.positions.get((), (1, 1))

    def problem(self, path: Path_, message: str) -> Problem:
        line, col = self.where(path)
        return Problem(self.source, line, col, dotted(path), message)


def dotted(path: Path_) -> str:
    """``network.allowed_domains[2]``; keys that are empty or not printable are
    quoted and escaped, so a key can never forge a line of the report."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = str(part)
            if not text or not text.isprintable() or text != text.strip():
                text = json.dumps(text)
            out += ("." if out else "") + text
    return out


def message(err: Any) -> str:
    msg = str(err.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if err.get("type") == "extra_forbidden":
        msg = "unknown key"
    return msg


def clean_loc(loc: tuple[Any, ...]) -> Path_:
    # Pydantic adds union/function tags to locations; keep only real keys.
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, int):
            out.append(part)
        elif isinstance(part, str) and not (
            part.startswith("function-") or part in ("str", "list[str]", "[key]")
            or part.startswith("list[") or part.startswith("tuple[")
        ):
            out.append(part)
    return tuple(out)


def label(layer: Layer) -> str:
    """How reports name a layer: ``fleet.yml``, ``groups/<group>.yml``,
    ``hosts/<host>.yml`` (an inventory's), else the file's name."""
    folder, name = os.path.split(layer.source)
    parent = os.path.basename(folder)
    return f"{parent}/{name}" if parent in ("groups", "hosts") else name


def _verify_problems(layer: Layer) -> list[Problem]:
    """What a layer may not say under ``verify``: a repository layer nothing at all
    (the host's checks are the inventory's to waive), no layer a waiver's ``layer``."""
    verify = layer.data.get("verify")
    if verify is None:
        return []
    if layer.base:
        return [layer.problem(("verify",), "a repository layer cannot waive the host's "
                              "checks: set verify in the fleet, group or host layer")]
    waivers = verify.get("waivers") if isinstance(verify, dict) else None
    return [layer.problem(("verify", "waivers", i, "layer"),
                          "set by the loader (the layer a waiver comes from), not in a spec")
            for i, w in enumerate(waivers if isinstance(waivers, list) else [])
            if isinstance(w, dict) and "layer" in w]


def validate_layer(layer: Layer) -> tuple[Spec | None, list[Problem]]:
    """Validate one layer on its own; its waivers are marked with where they come from."""
    refused = _verify_problems(layer)
    try:
        spec = Spec.model_validate(layer.data)
    except ValidationError as exc:
        problems = list(refused)
        for err in exc.errors(include_url=False):
            problems.append(layer.problem(clean_loc(err["loc"]), message(err)))
        return None, problems
    except (ValueError, TypeError, RecursionError) as exc:
        return None, [*refused, layer.problem((), f"invalid spec: {exc}")]
    if refused:
        return None, refused
    for waiver in spec.verify.waivers:
        waiver.layer = label(layer)
    return spec, []
