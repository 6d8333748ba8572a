"""Apply Vault/OpenBao policies and Kubernetes secrets engine roles, idempotently.

The plan comes from ``agent_sandbox.render.cluster.vault_plan`` (the rendered
``vault/roles.json``): a mount path, policies by name (HCL) and roles by name.
``apply_plan`` reads what is there, compares, and writes only what differs, so
a second run changes nothing and reports no change. With ``check=True`` it only
reads and reports what it would change.

Fails closed: any error from the server (permission denied, a mount of another
type in the way, an unreachable server) stops the run with a ``VaultApplyError``
that says what failed and where; nothing is retried blindly or skipped. It
never logs or returns a token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import hvac
import hvac.exceptions
import requests

from .errors import SandboxError

ROLE_FIELDS = ("allowed_kubernetes_namespaces", "generated_role_rules", "kubernetes_role_type",
               "token_default_ttl", "token_max_ttl")
CONFIG_FIELDS = ("kubernetes_host", "kubernetes_ca_cert", "disable_local_ca_jwt")


class VaultApplyError(SandboxError):
    """Applying the plan failed; the message names the object and the cause."""


@dataclass(frozen=True)
class Change:
    kind: str  # mount | config | policy | role
    name: str
    action: str  # create | update

    def __str__(self) -> str:
        return f"{self.action} {self.kind} {self.name}"


def client(address: str, token: str, *, timeout: float = 10.0) -> hvac.Client:
    return hvac.Client(url=address, token=token, timeout=timeout)


def _call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except hvac.exceptions.Forbidden:
        raise VaultApplyError(f"{what}: permission denied (check the token's policy)") from None
    except hvac.exceptions.VaultError as exc:
        raise VaultApplyError(f"{what}: {exc}".strip()) from None
    except requests.RequestException as exc:
        raise VaultApplyError(f"{what}: cannot reach the server ({type(exc).__name__})") from None


def _data(resp: Any) -> dict[str, Any] | None:
    if resp is None:
        return None
    if isinstance(resp, requests.Response):
        if resp.status_code == 204 or not resp.content:
            return {}
        resp = resp.json()
    if isinstance(resp, dict):
        inner = resp.get("data", resp)
        return inner if isinstance(inner, dict) else {}
    return {}


def _read_optional(c: hvac.Client, path: str) -> dict[str, Any] | None:
    try:
        resp = c.adapter.get(f"/v1/{path}")
    except hvac.exceptions.InvalidPath:
        return None
    except hvac.exceptions.Forbidden:
        raise VaultApplyError(f"read {path}: permission denied (check the token's policy)") \
            from None
    except hvac.exceptions.VaultError as exc:
        raise VaultApplyError(f"read {path}: {exc}".strip()) from None
    except requests.RequestException as exc:
        raise VaultApplyError(f"read {path}: cannot reach the server "
                              f"({type(exc).__name__})") from None
    return _data(resp)


def normalise_role(data: dict[str, Any]) -> dict[str, Any]:
    """A role as comparable data: sorted namespaces, parsed rules, integer TTLs."""
    rules = data.get("generated_role_rules") or ""
    try:
        parsed: Any = json.loads(rules) if rules else None
    except ValueError:
        parsed = rules
    return {
        "allowed_kubernetes_namespaces": sorted(data.get("allowed_kubernetes_namespaces") or []),
        "generated_role_rules": parsed,
        "kubernetes_role_type": str(data.get("kubernetes_role_type") or "Role").lower(),
        "token_default_ttl": int(data.get("token_default_ttl") or 0),
        "token_max_ttl": int(data.get("token_max_ttl") or 0),
    }


def _mount_type(c: hvac.Client, mount: str) -> str | None:
    resp = _call("list secrets engines", c.sys.list_mounted_secrets_engines)
    mounts = resp.get("data", resp) if isinstance(resp, dict) else {}
    entry = mounts.get(mount.rstrip("/") + "/")
    return str(entry.get("type")) if isinstance(entry, dict) else None


def apply_plan(
    c: hvac.Client,
    plan: dict[str, Any],
    *,
    engine_config: dict[str, Any] | None = None,
    check: bool = False,
) -> list[Change]:
    """Make the server match ``plan``; return what changed (or would, with ``check``)."""
    mount = str(plan["kubernetes_mount"]).strip("/")
    changes: list[Change] = []

    kind = _mount_type(c, mount)
    if kind is None:
        changes.append(Change("mount", mount, "create"))
        if not check:
            _call(f"enable the kubernetes secrets engine at {mount}",
                  c.sys.enable_secrets_engine, "kubernetes", path=mount)
    elif kind != "kubernetes":
        raise VaultApplyError(f"mount {mount}/ is a {kind!r} engine, not kubernetes: "
                              "choose another cluster.vault.kubernetes_mount")

    if engine_config is not None:
        current = None if kind is None else _read_optional(c, f"{mount}/config")
        want = {k: engine_config[k] for k in CONFIG_FIELDS if k in engine_config}
        have = {k: (current or {}).get(k) for k in want}
        if current is None or have != want:
            changes.append(Change("config", mount, "create" if current is None else "update"))
            if not check:
                _call(f"configure {mount}", c.adapter.post, f"/v1/{mount}/config",
                      json=engine_config)

    for name, hcl in sorted(plan.get("policies", {}).items()):
        current_policy = _read_optional(c, f"sys/policies/acl/{name}")
        have_text = (current_policy or {}).get("policy")
        if have_text != hcl:
            changes.append(Change("policy", name,
                                  "create" if current_policy is None else "update"))
            if not check:
                _call(f"write policy {name}", c.sys.create_or_update_acl_policy,
                      name=name, policy=hcl)

    for name, role in sorted(plan.get("roles", {}).items()):
        current_role = None if kind is None else _read_optional(c, f"{mount}/roles/{name}")
        if current_role is None or normalise_role(current_role) != normalise_role(role):
            changes.append(Change("role", name, "create" if current_role is None else "update"))
            if not check:
                _call(f"write role {mount}/roles/{name}", c.adapter.post,
                      f"/v1/{mount}/roles/{name}", json=role)
    return changes


def read_back(c: hvac.Client, plan: dict[str, Any]) -> dict[str, Any]:
    """What the server holds for the plan's policies and roles (for checks)."""
    mount = str(plan["kubernetes_mount"]).strip("/")
    policies = {name: (_read_optional(c, f"sys/policies/acl/{name}") or {}).get("policy")
                for name in plan.get("policies", {})}
    roles = {name: _read_optional(c, f"{mount}/roles/{name}") for name in plan.get("roles", {})}
    return {"policies": policies, "roles": roles}
