"""macOS artifacts: each user's Seatbelt profile (written by ``seatbelt``), the
proxy LaunchDaemon, and the MDM configuration profile that carries the agents'
managed settings.

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

import base64
import plistlib
import uuid
from collections.abc import Iterable
from typing import Any

from .. import contract
from ..inventory import HostFacts, User
from ..spec.models import Spec
from . import Artifact, RenderError, json_bytes, memo, srt
from .seatbelt import denied_paths, seatbelt_profile

LAUNCHD_LABEL = "com.agent-sandbox.proxy"
LAUNCHD_PLIST = f"/Library/LaunchDaemons/{LAUNCHD_LABEL}.plist"
MOBILECONFIG_IDENTIFIER = "com.agent-sandbox.managed"
CLAUDE_DOMAIN = "com.anthropic.claudecode"
CODEX_DOMAIN = "com.openai.codex"
# Fixed namespace so payload UUIDs are stable for the same host and payload
# (an MDM replaces a profile with the same identifier and UUID in place).
_UUID_NS = uuid.UUID("7d8f4c52-2f6e-4b0c-9a55-3f1b9a3c6e01")


def seatbelt_target(facts: HostFacts, user: User) -> str:
    return f"{facts.prefix}/seatbelt/{user.name}.sb"


def denies_target(facts: HostFacts, user: User) -> str:
    return f"{facts.prefix}/seatbelt/{user.name}.denies.json"


def proxy_settings_target(facts: HostFacts) -> str:
    return f"{facts.prefix}/etc/proxy-settings.json"

# ----------------------------------------------------------------- LaunchDaemon


def proxy_argv(spec: Spec, facts: HostFacts) -> list[str]:
    """How launchd starts the host's filtering proxy (loopback only)."""
    argv = [facts.python, "-I", "-m", "agent_sandbox.runtime.proxy",
            "--settings", proxy_settings_target(facts)]
    http = {spec.platforms.macos.proxy_port}
    if spec.network.http_proxy_port:
        http.add(spec.network.http_proxy_port)
    for port in sorted(http):
        argv += ["--http", f"127.0.0.1:{port}"]
    if spec.network.socks_proxy_port:
        argv += ["--socks", f"127.0.0.1:{spec.network.socks_proxy_port}"]
    if spec.audit.enabled:
        argv += ["--audit-dir", f"{spec.audit.host_path}/proxy"]
    else:
        argv.append("--no-audit")
    return argv


def launch_daemon(spec: Spec, facts: HostFacts) -> bytes:
    doc = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": proxy_argv(spec, facts),
        "RunAtLoad": True,
        "KeepAlive": True,
        "ProcessType": "Background",
        "UserName": "nobody",
        "GroupName": "nobody",
        "StandardOutPath": contract.MACOS_PROXY_LOG,
        "StandardErrorPath": contract.MACOS_PROXY_LOG,
        "WorkingDirectory": "/var/empty",
    }
    return plistlib.dumps(doc, fmt=plistlib.FMT_XML, sort_keys=True)


# ------------------------------------------------------------------ mobileconfig


def _plist_clean(value: Any, where: str = "") -> Any:
    """JSON-shaped data as plist-safe data: no None (dropped), no other odd types."""
    if isinstance(value, dict):
        return {str(k): _plist_clean(v, f"{where}.{k}") for k, v in value.items()
                if v is not None}
    if isinstance(value, (list, tuple)):
        return [_plist_clean(v, f"{where}[]") for v in value if v is not None]
    if isinstance(value, (str, bool, int, float, bytes)):
        return value
    raise RenderError(f"managed setting {where or '<root>'} has a value of type "
                      f"{type(value).__name__} that a property list cannot hold")


def claude_managed_settings(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    """Claude Code managed settings: the same document as the managed-settings.json file."""
    from . import agents

    return agents.claude_settings(spec, facts, managed=True)


def codex_requirements_toml(spec: Spec, facts: HostFacts) -> bytes:
    """Codex requirements.toml: the same bytes as the file-based requirements."""
    from . import agents

    return agents.codex_requirements(spec, facts)


def _payload_uuid(facts: HostFacts, name: str) -> str:
    return str(uuid.uuid5(_UUID_NS, f"{facts.name}/{name}")).upper()


_UUID_SLOTS = ("Configuration", CLAUDE_DOMAIN, CODEX_DOMAIN)


def _slot(name: str) -> str:
    """A placeholder for a payload UUID, replaced per host after the plist is built."""
    return f"@@uuid:{name}@@"


def mobileconfig(spec: Spec, facts: HostFacts) -> bytes:
    """The configuration profile for one host (see ``_mobileconfig_shared``)."""
    data: bytes = memo(spec, ("mobileconfig", facts.python, facts.os),
                       lambda: _mobileconfig_shared(spec, facts))
    for name in _UUID_SLOTS:
        data = data.replace(_slot(name).encode(), _payload_uuid(facts, name).encode())
    return data


def _mobileconfig_shared(spec: Spec, facts: HostFacts) -> bytes:
    """A configuration profile carrying Claude Code and Codex managed settings.

    Each payload's PayloadType is the application's preference domain (the form
    MDM vendors' custom-settings payloads produce); macOS writes its keys to
    ``/Library/Managed Preferences/<domain>.plist``, where the agents read them.
    """
    content: list[dict[str, Any]] = []
    enabled = spec.enabled_agents()
    if "claude" in enabled and spec.agents["claude"].managed_settings:
        claude = _plist_clean(claude_managed_settings(spec, facts))
        content.append({
            **claude,
            "PayloadType": CLAUDE_DOMAIN,
            "PayloadIdentifier": f"{MOBILECONFIG_IDENTIFIER}.claudecode",
            "PayloadUUID": _slot(CLAUDE_DOMAIN),
            "PayloadVersion": 1,
            "PayloadDisplayName": "Claude Code managed settings",
        })
    if "codex" in enabled and spec.agents["codex"].managed_settings:
        req = codex_requirements_toml(spec, facts)
        content.append({
            "requirements_toml_base64": base64.b64encode(req).decode(),
            "PayloadType": CODEX_DOMAIN,
            "PayloadIdentifier": f"{MOBILECONFIG_IDENTIFIER}.codex",
            "PayloadUUID": _slot(CODEX_DOMAIN),
            "PayloadVersion": 1,
            "PayloadDisplayName": "Codex requirements",
        })
    doc = {
        "PayloadType": "Configuration",
        "PayloadVersion": 1,
        "PayloadIdentifier": MOBILECONFIG_IDENTIFIER,
        "PayloadUUID": _slot("Configuration"),
        "PayloadDisplayName": "Agent sandbox managed settings",
        "PayloadDescription": "Managed settings for AI coding agents, rendered by agent-sandbox.",
        "PayloadOrganization": "agent-sandbox",
        "PayloadScope": "System",
        "PayloadRemovalDisallowed": True,
        "PayloadContent": content,
    }
    return plistlib.dumps(doc, fmt=plistlib.FMT_XML, sort_keys=True)


def mobileconfig_target(facts: HostFacts) -> str:
    return f"{facts.prefix}/mdm/agent-sandbox.mobileconfig"


# ------------------------------------------------------------------------ render

def _profile_bytes(spec: Spec, home: str) -> bytes:
    data: bytes = memo(spec, ("seatbelt", home), lambda: seatbelt_profile(spec, home).encode())
    return data


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    if facts.os != "macos":
        return
    for user in facts.users:
        yield Artifact(seatbelt_target(facts, user), _profile_bytes(spec, user.home), 0o644,
                       "seatbelt")
        yield Artifact(denies_target(facts, user),
                       json_bytes(denied_paths(spec, user.home)), 0o644, "seatbelt-denies")
    settings: bytes = memo(spec, "macos-proxy-settings",
                           lambda: json_bytes(srt.srt_settings(spec), sort_keys=False))
    yield Artifact(proxy_settings_target(facts), settings, 0o644, "srt-settings")
    yield Artifact(LAUNCHD_PLIST, memo(spec, ("launchd", facts.python, facts.prefix),
                                       lambda: launch_daemon(spec, facts)), 0o644, "launchd")
    if spec.platforms.macos.mdm_profile:
        yield Artifact(mobileconfig_target(facts), mobileconfig(spec, facts), 0o600,
                       "mobileconfig")
