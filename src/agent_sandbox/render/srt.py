"""srt-format settings: the Linux runtime's (and srt's) input.

``/etc/agent-sandbox/srt-settings.json`` keeps ``~`` for the runtime to expand
per user; each user also gets ``~/.srt-settings.json`` with their home filled in.
Every OS also gets the effective policy (``policy.json``) that the hooks read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_sandbox import contract as _contract

from ..inventory import HostFacts
from ..spec.models import Spec
from . import Artifact, json_bytes, memo

SYSTEM_SETTINGS = _contract.SYSTEM_SRT_SETTINGS

POLICY = _contract.POLICY_FILE
POLICY_TARGET = _contract.POLICY_FILES


def srt_network(spec: Spec) -> dict[str, Any]:
    """The ``network`` block in srt's shape (Claude Code's sandbox block uses the
    same keys)."""
    net = spec.network
    network: dict[str, Any] = {
        "allowedDomains": list(net.allowed_domains),
        "deniedDomains": list(net.denied_domains),
        "allowLocalBinding": net.allow_local_binding,
    }
    if net.allow_unix_sockets:
        network["allowUnixSockets"] = list(net.allow_unix_sockets)
    if net.allow_all_unix_sockets:
        network["allowAllUnixSockets"] = True
    if net.http_proxy_port:
        network["httpProxyPort"] = net.http_proxy_port
    if net.socks_proxy_port:
        network["socksProxyPort"] = net.socks_proxy_port
    return network


def srt_settings(spec: Spec, home: str | None = None) -> dict[str, Any]:
    """The srt settings document for a spec (``home`` expands ``~``)."""

    def exp(items: list[str]) -> list[str]:
        if home is None:
            return list(items)
        return [home + p[1:] if p == "~" or p.startswith("~/") else p for p in items]

    fs = spec.filesystem
    network = srt_network(spec)
    if spec.network.denied_resolved_addresses:  # srt's key; not in Claude Code's sandbox block
        network["deniedResolvedAddresses"] = list(spec.network.denied_resolved_addresses)
    filesystem: dict[str, Any] = {
        "denyRead": exp(fs.deny_read),
        "allowWrite": exp(fs.allow_write),
        "denyWrite": exp(fs.deny_write),
    }
    if fs.allow_read:
        filesystem["allowRead"] = exp(fs.allow_read)
    return {"network": network, "filesystem": filesystem}


def policy_document(spec: Spec) -> dict[str, Any]:
    """The effective spec as plain JSON: what the hook and policy engine read
    (stdlib json only, no pydantic on the hot path). ``verify`` is not policy: its
    waivers reach the host in their own file (``render.verify_waivers``)."""
    return spec.model_dump(mode="json", exclude={"verify"})


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    # every OS runs the hooks, and the hooks read the effective policy
    yield Artifact(POLICY_TARGET[facts.os],
                   memo(spec, "policy.json", lambda: json_bytes(policy_document(spec))),
                   0o644, "policy")
    if facts.os != "linux":
        return
    yield Artifact(SYSTEM_SETTINGS,
                   memo(spec, "srt-settings",
                        lambda: json_bytes(srt_settings(spec), sort_keys=False)),
                   0o644, "srt-settings")
    for user in facts.users:
        yield Artifact(f"{user.home}/.srt-settings.json", _user_settings(spec, user.home), 0o644,
                       "srt-settings")


def _user_settings(spec: Spec, home: str) -> bytes:
    data: bytes = memo(spec, ("srt-settings", home),
                       lambda: json_bytes(srt_settings(spec, home), sort_keys=False))
    return data
