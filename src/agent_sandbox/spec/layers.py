"""Monotonic merge of spec layers: fleet -> group -> host -> repository.

The first layer is the managed baseline: every value in it counts as set, its
defaults included (what the security team did not allow is not allowed). Each
later layer may tighten any value. It may loosen a value only when *every*
layer above it that set that value lists the key under ``delegate:``.
An attempt to loosen is a problem that names both places.

How each key merges (the ``RULES`` table):

- ``union``: deny-style lists; lower layers add entries.
- ``narrow``: allow-style lists; a lower list replaces the list above, and each
  of its entries must be covered by that list unless the key is delegated.
  (Replacing, never joining: a group that narrows a delegated list really
  narrows it, and the hosts below it are held to the narrower list.)
- ``true_is_looser`` / ``false_is_looser``: booleans with a safe direction.
- ``min``: numbers where smaller is stricter (TTLs, checkpoint intervals).
- ``verdict``: commands.default; a lower layer may only pick a stricter one.
- ``rules``: command rules are joined (the strictest match wins at run time);
  allow and observe rules from a lower layer need ``commands.allow``.
- ``servers``: MCP servers; a lower layer adding or changing one needs
  ``mcp_servers``.
- ``agents``: a lower layer may add a client or switch protections on; turning
  ``enabled``, ``hooks``, ``managed_settings`` or ``allow_managed_hooks_only``
  off for a client set above, or changing its ``extra`` keys, needs ``agents``.
- ``actions``: a lower layer may switch an action off, lower its limits, narrow its
  egress, connect and approvers; adding an action or changing anything else of one (image,
  argv, parameters, plan, credential, tier) needs ``actions``.
- ``waivers``: ``sandbox verify``'s waivers; a lower layer adds its own (one for a
  check waived above replaces it), never for a check a layer above lists under
  ``verify.unwaivable``.
- ``unwaivable``: a union; a check a lower layer adds drops the waivers of it from above.
- ``fixed``: where audit goes, which proxy ports and sockets, which accounts,
  images and Vault server: a lower layer may repeat the value, never change it.
- ``backend``: the Linux isolation backend; a lower layer may only move to gvisor.
- ``free``: no bearing on what an agent may do (the spec version, how long a hook
  waits before it denies, whether the AppArmor profile that lets bwrap start is
  installed, whether and for whom the web approvals unit runs: it listens on loopback
  only, behind its own token); the lower value replaces the upper one.

Every key of the spec has exactly one of these (a test walks the model and fails
on a key without one). Paths are compared after ``~`` and ``..`` are resolved.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from ..errors import Problem
from . import domains, paths
from .actions import DECLARING, Action, ActionOverride
from .layer import Layer, Path_, dotted, validate_layer
from .models import DELEGABLE, Spec
from .rules import Verdict

RULES: dict[str, str] = {
    "version": "free",
    "filesystem.deny_read": "union",
    "filesystem.deny_write": "union",
    "filesystem.triggers": "union",
    "filesystem.allow_read": "narrow",
    "filesystem.allow_write": "narrow",
    "network.denied_domains": "union",
    "network.denied_resolved_addresses": "union",
    "network.allowed_domains": "narrow",
    "network.allow_unix_sockets": "narrow",
    "network.allow_local_binding": "true_is_looser",
    "network.allow_all_unix_sockets": "true_is_looser",
    "network.http_proxy_port": "fixed",
    "network.socks_proxy_port": "fixed",
    "commands.default": "verdict",
    "commands.rules": "rules",
    "commands.codex_rules_files": "union",
    "approvals.ttl": "min",
    "approvals.remember_ttl": "min",
    "approvals.single_use": "false_is_looser",
    "approvals.approvers": "narrow",
    "approvals.wait": "free",
    "audit.enabled": "false_is_looser",
    "audit.checkpoint_every": "min",
    "audit.checkpoint_interval": "min",
    "audit.max_file_size": "min",
    "audit.path": "fixed",
    "audit.host_path": "fixed",
    "audit.export.format": "fixed",
    "audit.export.path": "fixed",
    "platforms.linux.seccomp": "false_is_looser",
    "platforms.linux.backend": "backend",
    "platforms.linux.limits.processes": "min",
    "platforms.linux.limits.memory": "min",
    "platforms.linux.limits.file_size": "min",
    "platforms.linux.apparmor_userns_profile": "free",
    "platforms.linux.proxy_socket": "fixed",
    "platforms.linux.web.enabled": "free",
    "platforms.linux.web.user": "free",
    "platforms.linux.web.port": "free",
    "platforms.linux.web.repos": "free",
    "platforms.macos.proxy_port": "fixed",
    "platforms.macos.mdm_profile": "false_is_looser",
    "platforms.macos.allow_pty": "true_is_looser",
    "platforms.windows.account": "fixed",
    "platforms.windows.group": "fixed",
    "platforms.windows.proxy_port_range": "fixed",
    **{f"platforms.{os_}.{key}": rule for os_ in ("linux", "macos", "windows")
       for key, rule in (("drift_check.enabled", "false_is_looser"), ("drift_check.every", "min"),
                         *((f"pull.{k}", "free") for k in (
                             "repository", "branch", "every", "inventory", "directory")))},
    "mcp_servers": "servers",
    "agents": "agents",
    "platforms.macos.allow_mach_lookup": "narrow",
    "cluster.gvisor": "false_is_looser",
    "cluster.calico": "false_is_looser",
    "cluster.allowed_cidrs": "narrow",
    "cluster.api_server": "narrow",
    "cluster.enabled": "false_is_looser",
    "cluster.namespace": "fixed",
    "cluster.egress_proxy": "fixed",
    "cluster.runner_image": "fixed",
    "cluster.vault.address": "fixed",
    "cluster.vault.kubernetes_mount": "fixed",
    "cluster.vault.roles": "fixed",
    "actions": "actions",
    "verify.waivers": "waivers",
    "verify.unwaivable": "unwaivable",
    "delegate": "replace_delegate",
}

# AgentOptions switches that a lower layer may turn on but not off.
AGENT_SWITCHES = ("enabled", "hooks", "managed_settings", "allow_managed_hooks_only")

# Which delegate key unlocks loosening of a merge key.
# ("cluster": the cluster side's own settings, which a cluster group configures:
# namespace, egress proxy, runner image, Vault server and roles; never its egress
# CIDRs, gVisor or Calico)
DELEGATE_KEY = {"commands.rules": "commands.allow",
                **{f"cluster.{k}": "cluster" for k in (
                    "namespace", "egress_proxy", "runner_image", "vault.address",
                    "vault.kubernetes_mount", "vault.roles")}}

# srt and bwrap are peers; gVisor (a user-space kernel) is the stronger boundary
_BACKEND_RANK = {"srt": 0, "bwrap": 0, "gvisor": 1}

# Relative path rules in fleet, group and host layers are relative to the
# repository at run time: compared under a stand-in folder no real rule names.
_RELATIVE_BASE = "/\x00repository"

_MISSING = object()


def _get(data: Any, path: tuple[str, ...]) -> Any:
    cur = data
    for part in path:
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _set(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    cur = data
    for part in path[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[path[-1]] = value


def _deep_merge(base: dict[str, Any], over: dict[str, Any], skip: set[tuple[str, ...]],
                prefix: tuple[str, ...] = ()) -> None:
    for key, value in over.items():
        here = (*prefix, key)
        if here in skip:
            continue
        if isinstance(value, dict) and isinstance(base.get(key), dict) and here != ("mcp_servers",):
            _deep_merge(base[key], value, skip, here)
        else:
            base[key] = copy.deepcopy(value)


def _canonical(spec: Spec, path: tuple[str, ...]) -> Any:
    cur: Any = spec
    for part in path:
        cur = cur[part] if isinstance(cur, dict) else getattr(cur, part)
    return cur


def _path_covered(upper: list[str], entry: str) -> bool:
    return any(paths.rule_covers_rule(u, entry) for u in upper)


def _domain_covered(upper: list[str], entry: str) -> bool:
    return any(domains.pattern_covers(u, entry) for u in upper)


def _plain_covered(upper: list[str], entry: str) -> bool:
    return entry in upper


def _cidr_covered(upper: list[str], entry: str) -> bool:
    import ipaddress

    try:
        net = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    for u in upper:
        try:
            up = ipaddress.ip_network(u, strict=False)
        except ValueError:
            continue
        if up.version == net.version and net.subnet_of(up):  # type: ignore[arg-type]
            return True
    return False


_COVER: dict[str, Callable[[list[str], str], bool]] = {
    "filesystem.allow_read": _path_covered,
    "filesystem.allow_write": _path_covered,
    "network.allowed_domains": _domain_covered,
    "network.allow_unix_sockets": _path_covered,
    "approvals.approvers": _plain_covered,
    "platforms.macos.allow_mach_lookup": _plain_covered,
    "cluster.allowed_cidrs": _cidr_covered,
    "cluster.api_server": _cidr_covered,
}


class _State:
    """What the layers above have set: value, where, and who set it."""

    def __init__(self) -> None:
        self.value: dict[str, Any] = {}
        self.where: dict[str, tuple[Layer, Path_]] = {}
        self.setters: dict[str, list[tuple[Layer, list[str]]]] = {}
        self.history: dict[str, list[tuple[Layer, Any]]] = {}

    def delegated(self, key: str) -> bool:
        need = DELEGATE_KEY.get(key, key)
        return all(need in deleg for _, deleg in self.setters.get(key, []))

    def place(self, key: str) -> str:
        layer, path = self.where[key]
        line, col = layer.where(path)
        default = "" if path and layer.positions.get(path) else " (its default)"
        return f"{layer.source}:{line}:{col}{default}"

    def record(self, key: str, value: Any, layer: Layer, path: Path_, deleg: list[str]) -> None:
        self.value[key] = value
        self.where[key] = (layer, path)
        self.setters.setdefault(key, []).append((layer, deleg))
        self.history.setdefault(key, []).append((layer, value))


def merge(layers: list[Layer], specs: list[Spec] | None = None
          ) -> tuple[dict[str, Any], list[Problem]]:
    """Merge layers (validated already when ``specs`` is given).

    Returns the merged raw mapping and any problems.
    """
    problems: list[Problem] = []
    merged: dict[str, Any] = {}
    state = _State()
    skip = {tuple(k.split(".")) for k in RULES}
    for index, layer in enumerate(layers):
        if specs is not None:
            spec: Spec | None = specs[index]
        else:
            spec, found = validate_layer(layer)
            problems.extend(found)
        if spec is None:
            continue
        deleg = list(spec.delegate)
        for key, kind in RULES.items():
            path = tuple(key.split("."))
            explicitly = _get(layer.data, path) is not _MISSING
            if index > 0 and not explicitly:
                continue
            value = _canonical(spec, path)
            if kind == "replace_delegate":
                state.value[key] = value
                continue
            if index == 0:
                if kind == "actions":
                    _declared_only(value, layer, path, problems)
                state.record(key, value, layer, path if explicitly else (), deleg)
                continue
            _apply(kind, key, path, value, layer, state, deleg, problems)
        _deep_merge(merged, layer.data, skip)
    for key in RULES:
        if key in state.value:
            _set(merged, tuple(key.split(".")), _dump(state.value[key]))
    return merged, problems


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Verdict):
        return value.value
    return value


def _apply(kind: str, key: str, path: tuple[str, ...], value: Any, layer: Layer,
           state: _State, deleg: list[str], problems: list[Problem]) -> None:
    upper = state.value.get(key)
    ok_to_loosen = state.delegated(key)
    need = DELEGATE_KEY.get(key, key)

    def loosen(sub: Path_, what: str) -> None:
        hint = (f" (unless that layer lists {need!r} under delegate)" if need in DELEGABLE
                else "")
        problems.append(layer.problem(
            sub,
            f"{what} loosens {need} set at {state.place(key)}; a lower layer may only "
            f"tighten it{hint}",
        ))

    if kind == "union":
        new = list(upper or [])
        new += [v for v in value if v not in new]
        state.record(key, new, layer, path, deleg)
    elif kind == "narrow":
        if ok_to_loosen:
            state.record(key, list(value), layer, path, deleg)
            return
        if _narrowed(key, path, value, layer, state, upper, loosen):
            state.record(key, list(value), layer, path, deleg)
    elif kind in ("true_is_looser", "false_is_looser"):
        looser = value is (kind == "true_is_looser")
        if looser and upper is not value and not ok_to_loosen:
            loosen(path, f"setting {value!r}")
        else:
            state.record(key, value, layer, path, deleg)
    elif kind == "min":
        if upper is not None and value > upper and not ok_to_loosen:
            loosen(path, f"{value!r} is larger than {upper!r} and")
        else:
            state.record(key, value, layer, path, deleg)
    elif kind == "fixed":
        if key in state.value and _dump(value) != _dump(upper) and not ok_to_loosen:
            loosen(path, f"changing it to {_dump(value)!r}")
        else:
            state.record(key, value, layer, path, deleg)
    elif kind == "backend":
        if (upper is not None and value != upper and not ok_to_loosen
                and _BACKEND_RANK.get(value, -1) <= _BACKEND_RANK.get(upper, 0)):
            loosen(path, f"switching the backend from {upper!r} to {value!r}")
        else:
            state.record(key, value, layer, path, deleg)
    elif kind == "free":
        state.record(key, value, layer, path, deleg)
    elif kind == "verdict":
        if upper is not None and value.rank < upper.rank and not ok_to_loosen:
            loosen(path, f"{value.value!r} is looser than {upper.value!r} and")
        else:
            state.record(key, value, layer, path, deleg)
    elif kind == "rules":
        if _rules_tighten(path, value, layer, state, ok_to_loosen, loosen, problems):
            state.record(key, list(upper or []) + list(value), layer, path, deleg)
    elif kind == "agents":
        merged_agents = _merged_agents(path, value, layer, upper, ok_to_loosen, loosen)
        if merged_agents is not None:
            state.record(key, merged_agents, layer, path, deleg)
    elif kind == "servers":
        upper_servers = dict(upper or {})
        bad = False
        for name, server in value.items():
            if (name not in upper_servers or upper_servers[name] != server) and not ok_to_loosen:
                loosen((*path, name), f"MCP server {name!r}")
                bad = True
        if not bad:
            upper_servers.update(value)
            state.record(key, upper_servers, layer, path, deleg)
    elif kind == "actions":
        merged_actions, problems_here = _merge_actions(
            dict(upper or {}), value, _get(layer.data, path), path, ok_to_loosen, loosen)
        if not problems_here:
            state.record(key, merged_actions, layer, path, deleg)
    elif kind == "waivers":
        if _waivable(path, value, layer, state, problems):
            kept = [w for w in upper or [] if w.check not in {v.check for v in value}]
            state.record(key, kept + list(value), layer, path, deleg)
    elif kind == "unwaivable":
        forbidden = list(upper or []) + [c for c in value if c not in (upper or [])]
        state.record(key, forbidden, layer, path, deleg)
        if state.value.get("verify.waivers"):  # tightening: waivers of these go
            state.value["verify.waivers"] = [w for w in state.value["verify.waivers"]
                                             if w.check not in forbidden]


def _waivable(path: Path_, value: Any, layer: Layer, state: _State,
              problems: list[Problem]) -> bool:
    """Whether none of a layer's waivers names a check a layer above made unwaivable
    (each one that does is a problem naming both places)."""
    ok = True
    for i, waiver in enumerate(value):
        above = next((setter for setter, forbidden in state.history.get("verify.unwaivable", [])
                      if setter is not layer and waiver.check in forbidden), None)
        if above is None:
            continue
        raw = _get(above.data, ("verify", "unwaivable"))
        at = (raw.index(waiver.check) if isinstance(raw, list) and waiver.check in raw
              else None)
        line, col = above.where(("verify", "unwaivable") + ((at,) if at is not None else ()))
        problems.append(layer.problem(
            (*path, i, "check"),
            f"waiving {waiver.check!r} is refused: {above.source}:{line}:{col} lists it under "
            "verify.unwaivable, and a lower layer may not waive it"))
        ok = False
    return ok


def _narrowed(key: str, path: Path_, value: Any, layer: Layer, state: _State, upper: Any,
              loosen: Callable[[Path_, str], None]) -> bool:
    """Whether every entry of an allow-style list is covered by the list above
    (``loosen`` is told of each one that is not)."""
    ok = True
    covering: list[str] = list(upper or [])
    entries: list[str] = list(value)
    if _COVER[key] is _path_covered:
        # compare where the paths really point: ~ expanded, .. resolved (a
        # repository layer's relative paths against the repository)
        home = os.path.expanduser("~")
        upper_base = state.where[key][0].base or layer.base or _RELATIVE_BASE
        covering = [paths.expand(u, home=home, cwd=upper_base) for u in covering]
        entries = [paths.expand(e, home=home, cwd=layer.base or _RELATIVE_BASE)
                   for e in entries]
    for i, entry in enumerate(entries):
        if not _COVER[key](covering, entry):
            loosen((*path, i), f"{value[i]!r} is not covered by the list above and")
            ok = False
    return ok


def _rules_tighten(path: Path_, value: Any, layer: Layer, state: _State, ok_to_loosen: bool,
                   loosen: Callable[[Path_, str], None], problems: list[Problem]) -> bool:
    """Whether a layer's command rules only tighten: no allow or observe rule unless
    delegated, and none below a ``commands.default`` of deny unless that is too."""
    ok = True
    # a commands.default of deny above is a deny too: an allow rule below may not
    # turn it into anything looser unless commands.default is delegated as well
    denying = [setter for setter, v in state.history.get("commands.default", [])
               if v is Verdict.DENY and setter is not layer]
    default_denies = bool(denying) and not state.delegated("commands.default")
    for i, rule in enumerate(value):
        if rule.verdict in (Verdict.ALLOW, Verdict.OBSERVE) and not ok_to_loosen:
            loosen((*path, i), f"an {rule.verdict.value} rule")
            ok = False
        elif rule.verdict in (Verdict.ALLOW, Verdict.OBSERVE) and default_denies:
            line, col = denying[0].where(("commands", "default"))
            problems.append(layer.problem(
                (*path, i), f"an {rule.verdict.value} rule would loosen commands.default: "
                f"deny set at {denying[0].source}:{line}:{col}; a lower layer may only "
                "tighten it (unless that layer lists 'commands.default' under delegate)"))
            ok = False
    return ok


def _merged_agents(path: tuple[str, ...], value: Any, layer: Layer, upper: Any, ok_to_loosen: bool,
                   loosen: Callable[[Path_, str], None]) -> dict[str, Any] | None:
    """The clients above with a layer's changes, or None when one loosens: a
    protection switched off, or a client's extra keys changed, undelegated."""
    merged_agents = dict(upper or {})
    raw = _get(layer.data, path)
    bad = False
    for name, opts in value.items():
        above = merged_agents.get(name)
        given = raw.get(name) if isinstance(raw, dict) else None
        if above is None or not isinstance(given, dict):
            merged_agents[name] = opts
            continue
        new = above.model_copy(deep=True)
        for field in given:
            lower_value = getattr(opts, field)
            if field in AGENT_SWITCHES:
                if getattr(above, field) and not lower_value and not ok_to_loosen:
                    loosen((*path, name, field), f"turning {field} off for {name}")
                    bad = True
                    continue
            elif field == "extra" and lower_value != above.extra and not ok_to_loosen:
                loosen((*path, name, field), f"changing {name}'s extra settings")
                bad = True
                continue
            setattr(new, field, lower_value)
        merged_agents[name] = new
    return None if bad else merged_agents


def _declared_only(value: dict[str, Any], layer: Layer, path: Path_,
                   problems: list[Problem]) -> None:
    for name, action in value.items():
        if isinstance(action, ActionOverride):
            problems.append(layer.problem((*path, name), (
                f"action {name!r} is not declared: a declaration gives "
                f"{', '.join(DECLARING)}")))


# fields of an action a lower layer may only make stricter, and how
_ACTION_LIMITS = ("cpus", "memory_mb", "pids", "timeout", "output_bytes")


def _merge_actions(upper: dict[str, Any], value: dict[str, Any], raw: Any, path: Path_,
                   ok_to_loosen: bool, loosen: Callable[[Path_, str], None]
                   ) -> tuple[dict[str, Any], bool]:
    bad = False
    for name, action in value.items():
        above = upper.get(name)
        given = raw.get(name) if isinstance(raw, dict) else None
        if above is None:
            if not ok_to_loosen:
                loosen((*path, name), f"adding action {name!r}")
                bad = True
            elif isinstance(action, ActionOverride):
                loosen((*path, name), f"action {name!r} is not declared above "
                       f"(a declaration gives {', '.join(DECLARING)}), and adjusting it")
                bad = True
            else:
                upper[name] = action
            continue
        if ok_to_loosen and isinstance(action, Action):
            upper[name] = action
            continue
        new = above.model_copy(deep=True)
        for field in (given or {}):
            here = (*path, name, field)
            lower = getattr(action, field, None)
            if lower is None:
                continue
            if field == "enabled":
                if lower and not above.enabled:
                    loosen(here, f"switching action {name!r} back on")
                    bad = True
                    continue
                new.enabled = lower
            elif field == "limits":
                raw_limits = given.get("limits") if isinstance(given, dict) else None
                for lim in (raw_limits or {}):
                    if lim not in _ACTION_LIMITS:
                        continue
                    if getattr(action.limits, lim) > getattr(above.limits, lim):
                        loosen((*here, lim), f"raising {name!r}'s {lim} and")
                        bad = True
                    else:
                        setattr(new.limits, lim, getattr(action.limits, lim))
            elif field in ("egress", "approvers", "connect"):
                cover = _domain_covered if field == "egress" else _plain_covered
                outside = [e for e in lower if not cover(getattr(above, field), e)]
                if outside:
                    loosen(here, f"{outside[0]!r} is not in {name!r}'s {field} above and")
                    bad = True
                else:
                    setattr(new, field, list(lower))
            elif lower != getattr(above, field):
                loosen(here, f"changing action {name!r}'s {field}")
                bad = True
        upper[name] = new
    return upper, bad


def describe(path: Path_) -> str:
    return dotted(path)
