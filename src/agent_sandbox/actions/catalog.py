"""The actions a repository declares: ``actions`` of its effective policy
(``.sandbox/policy.json``, written by ``sandbox init`` from the merged spec
layers), each checked again against the spec model when it is read."""

from __future__ import annotations

import json
from typing import Any

from ..errors import SandboxError
from ..repo_layout import POLICY, under
from ..spec.actions import Action


class ActionCatalogError(SandboxError):
    """The repository's actions cannot be read, or the action is not there."""


def policy_path(repo: str) -> str:
    return under(repo, POLICY)


def load(repo: str) -> dict[str, Action]:
    """Every declared action, enabled or not, by name."""
    from pydantic import TypeAdapter, ValidationError

    path = policy_path(repo)
    try:
        with open(path, "rb") as fh:
            doc: Any = json.loads(fh.read())
    except FileNotFoundError:
        raise ActionCatalogError(f"{path} is missing: run `sandbox init` in {repo}") from None
    except (OSError, ValueError) as exc:
        raise ActionCatalogError(f"cannot read {path}: {exc}") from None
    raw = doc.get("actions", {}) if isinstance(doc, dict) else None
    try:
        return TypeAdapter(dict[str, Action]).validate_python(raw or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ActionCatalogError(f"{path}: actions.{where}: {first['msg']}") from None


def get(repo: str, name: str) -> Action:
    """The enabled action ``name``; a clear error for an unknown or disabled one."""
    actions = load(repo)
    action = actions.get(name) if isinstance(name, str) else None
    if action is None:
        known = ", ".join(sorted(n for n, a in actions.items() if a.enabled)) or "none"
        raise ActionCatalogError(f"no action {name!r} in {repo} (declared: {known})")
    if not action.enabled:
        raise ActionCatalogError(f"action {name!r} is switched off in {repo}")
    return action


def listing(repo: str) -> list[dict[str, Any]]:
    """What an agent may see of the enabled actions: name, description, tier, the
    parameter schema and whether a human approves it; never the credential."""
    out = []
    for name, action in sorted(load(repo).items()):
        if not action.enabled:
            continue
        out.append({
            "name": name, "description": action.description, "tier": action.tier.value,
            "params": action.params,
            "approval": {"read": "never", "write": "when the plan is destructive",
                         "destructive": "always"}[action.tier.value],
            "credential": action.credential.engine if action.credential else None,
        })
    return out
