"""macOS artifacts: Seatbelt profiles, the proxy LaunchDaemon and the MDM profile.

For every user on a macOS host this renders a Seatbelt (SBPL) profile for
``sandbox-exec`` with srt's semantics:

- deny by default;
- reads allowed except ``deny_read`` (with ``allow_read`` carve-outs): rules are
  emitted in increasing specificity, and since SBPL lets the *last* matching rule
  win, the most specific rule decides, exactly like ``paths.read_allowed``
  (a tie goes to the allow, emitted after the deny);
- writes only under ``allow_write``, then every ``deny_write`` entry and the
  mandatory protected set (``paths.MANDATORY_DENY_WRITE``) emitted after the
  allows, so a deny always beats an allow (``paths.write_allowed``);
- ``file-write-unlink`` (which also governs rename) denied on every denied path
  and on each of its ancestors, so a denied file cannot be moved out from under
  its rule by renaming a parent;
- network only to the proxy port(s) on localhost;
- a mach-lookup allowlist sufficient for common tools. ``com.apple.trustd.agent``
  is on it by default (``platforms.macos.allow_mach_lookup``) because Go, and
  anything else verifying TLS through Security.framework, fails without it. The
  trade-off: trustd runs outside the sandbox and may fetch OCSP/CRL data on the
  sandboxed program's behalf, a narrow channel that bypasses the proxy. Remove it
  from the list where that matters more than Go tooling.

Seatbelt matches resolved paths, so ``/tmp``, ``/var`` and ``/etc`` become
``/private/...``. Globs become SBPL regexes. A relative rule is relative to the
working directory, given to ``sandbox-exec`` as ``-D CWD=...``; a relative *glob*
cannot be anchored there, so a relative deny glob matches at any depth (denies
more) and a relative allow glob is dropped (allows less): both fail closed.

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

import base64
import functools
import plistlib
import posixpath
import re
import uuid
from collections.abc import Iterable
from typing import Any

from ..facts import HostFacts, User
from ..spec import paths
from ..spec.models import Spec
from . import Artifact, RenderError, json_bytes, memo, srt
from .templating import environment

LAUNCHD_LABEL = "com.agent-sandbox.proxy"
LAUNCHD_PLIST = f"/Library/LaunchDaemons/{LAUNCHD_LABEL}.plist"
MOBILECONFIG_IDENTIFIER = "com.agent-sandbox.managed"
CLAUDE_DOMAIN = "com.anthropic.claudecode"
CODEX_DOMAIN = "com.openai.codex"
# Fixed namespace so payload UUIDs are stable for the same host and payload
# (an MDM replaces a profile with the same identifier and UUID in place).
_UUID_NS = uuid.UUID("7d8f4c52-2f6e-4b0c-9a55-3f1b9a3c6e01")

# Mach services that common command-line tools need. trustd is not here: it is
# in the spec's allow_mach_lookup default so it can be removed (see above).
BASE_MACH_LOOKUP: tuple[str, ...] = (
    "com.apple.bsd.dirhelper",
    "com.apple.coreservices.launchservicesd",
    "com.apple.lsd.mapdb",
    "com.apple.logd",
    "com.apple.system.logger",
    "com.apple.system.notification_center",
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.SecurityServer",
    "com.apple.securityd.xpc",
    "com.apple.diagnosticd",
    "com.apple.analyticsd",
    "com.apple.cfprefsd.daemon",
    "com.apple.cfprefsd.agent",
)

# Seatbelt sees the resolved path: these top-level links point into /private.
_PRIVATE_LINKS = ("/tmp", "/var", "/etc")


def seatbelt_target(facts: HostFacts, user: User) -> str:
    return f"{facts.prefix}/seatbelt/{user.name}.sb"


def proxy_settings_target(facts: HostFacts) -> str:
    return f"{facts.prefix}/etc/proxy-settings.json"


# --------------------------------------------------------------------------- SBPL


def _private(path: str) -> str:
    for link in _PRIVATE_LINKS:
        if path == link or path.startswith(link + "/"):
            return "/private" + path
    return path


def _quote(text: str) -> str:
    if '"' in text or "\n" in text or "\x00" in text:
        raise RenderError(f"path {text!r} cannot be written into a Seatbelt profile "
                          "(it contains a double quote, newline or NUL)")
    return '"' + text.replace("\\", "\\\\") + '"'


_ERE_SPECIAL = set(".^$+?()[]{}|\\*")
_ERE_TOKENS = {"dirs": "(.*/)?", "any": ".*", "star": "[^/]*", "one": "[^/]"}


@functools.lru_cache(maxsize=4096)
def glob_to_ere(pattern: str) -> str:
    """A path glob (``paths`` semantics) as a POSIX extended regex for SBPL.

    Covers what ``paths.covers`` covers: the match itself and everything below.
    A pattern not anchored at ``/`` matches at any depth.
    """
    out: list[str] = []
    for kind, text in paths.glob_tokens(pattern):
        if kind == "class":
            out.append("[" + text + "]")
        elif kind == "lit":
            out.append("\\" + text if text in _ERE_SPECIAL else text)
        else:
            out.append(_ERE_TOKENS[kind])
    head = "^" if pattern.startswith(("/", "**")) else "^(.*/)?"
    return head + "".join(out) + "(/.*)?$"


def _regex(pattern: str) -> str:
    ere = glob_to_ere(pattern)
    if '"' in ere or "\n" in ere:
        raise RenderError(f"glob {pattern!r} cannot be written into a Seatbelt profile")
    return f'(regex #"{ere}")'


def _expand(rule: str, home: str) -> str:
    """``~`` expanded; absolute and ``**/`` rules as they are; relative kept relative."""
    if rule == "~":
        return posixpath.normpath(home)
    if rule.startswith("~/"):
        return posixpath.normpath(posixpath.join(home, rule[2:]))
    if rule.startswith("/"):
        return posixpath.normpath(rule)
    return rule


def _filters(rule: str, home: str, *, deny: bool) -> tuple[str, ...]:
    """SBPL filters covering an (unexpanded) rule; ``()`` when it must be dropped."""
    return _filters_for(rule, home if rule.startswith("~") else "", deny)


@functools.lru_cache(maxsize=16384)
def _filters_for(rule: str, home: str, deny: bool) -> tuple[str, ...]:
    exp = _expand(rule, home)
    glob = paths.is_glob(exp)
    if exp.startswith("/"):
        real = _private(exp)
        if glob:
            return (_regex(real),)
        return (f"(subpath {_quote(real)})",)
    if exp.startswith("**"):
        return (_regex(exp),)
    # relative to the working directory
    rel = posixpath.normpath(exp)
    if glob:
        return (_regex(rel),) if deny else ()
    if rel == ".":
        return ('(subpath (param "CWD"))',)
    return (f'(subpath (string-append (param "CWD") {_quote("/" + rel)}))',)


def _ancestors(rule: str, home: str) -> tuple[str, ...]:
    return _ancestors_for(rule, home if rule.startswith("~") else "")


@functools.lru_cache(maxsize=16384)
def _ancestors_for(rule: str, home: str) -> tuple[str, ...]:
    """SBPL filters for the directories above a denied path, root excluded.

    An anchored rule yields its literal ancestors (for a glob: the fixed
    directory before the first glob and everything above it). A rule that
    matches at any depth (``**/.git/hooks/**``) yields exact regexes for each
    directory on the way (``.git``), wherever it is.
    """
    exp = _expand(rule, home)
    if exp.startswith("/"):
        if paths.is_glob(exp):
            cut = min(exp.index(c) for c in paths.GLOB_CHARS if c in exp)
            cur = exp[:cut].rsplit("/", 1)[0]
        else:
            cur = posixpath.dirname(exp)
        chain: list[str] = []
        while cur and cur != "/":
            chain.append(_private(cur))
            cur = posixpath.dirname(cur)
        return tuple(f"(literal {_quote(p)})" for p in chain)
    body = exp
    while body.startswith("**/"):
        body = body[3:]
    parts = [p for p in body.split("/") if p]
    out: list[str] = []
    for i in range(1, len(parts)):
        prefix = parts[:i]
        if any(paths.is_glob(p) for p in prefix):
            break
        ere = glob_to_ere("/".join(prefix))[: -len("(/.*)?$")] + "$"
        out.append(f'(regex #"{ere}")')
    return tuple(out)


def _proxy_ports(spec: Spec) -> list[int]:
    ports = {spec.platforms.macos.proxy_port}
    if spec.network.socks_proxy_port:
        ports.add(spec.network.socks_proxy_port)
    if spec.network.http_proxy_port:
        ports.add(spec.network.http_proxy_port)
    return sorted(ports)


def seatbelt_profile(spec: Spec, home: str) -> str:
    """The SBPL profile text for one user's home."""
    fs, net, mac = spec.filesystem, spec.network, spec.platforms.macos
    for name in mac.allow_mach_lookup:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise RenderError(f"platforms.macos.allow_mach_lookup: {name!r} is not a mach "
                              "service name")

    # Reads: (specificity, order, action, filter); deny before allow at a tie.
    read_rules: list[tuple[int, int, str, str]] = []
    for rule in fs.deny_read:
        spec_n = paths.specificity(_expand(rule, home))
        read_rules += [(spec_n, 0, "deny", f) for f in _filters(rule, home, deny=True)]
    for rule in fs.allow_read:
        spec_n = paths.specificity(_expand(rule, home))
        read_rules += [(spec_n, 1, "allow", f) for f in _filters(rule, home, deny=False)]
    read_rules.sort(key=lambda r: (r[0], r[1], r[3]))

    write_allow = [f for r in fs.allow_write for f in _filters(r, home, deny=False)]
    write_deny = [f for r in fs.deny_write for f in _filters(r, home, deny=True)]
    mandatory = [f for r in paths.MANDATORY_DENY_WRITE for f in _filters(r, home, deny=True)]

    guarded = [*fs.deny_read, *fs.deny_write, *paths.MANDATORY_DENY_WRITE]
    move_guard = [f for r in guarded for f in _filters(r, home, deny=True)]
    ancestors = [a for r in guarded for a in _ancestors(r, home)]

    def lines(fmt: str, items: Iterable[str]) -> str:
        return "".join(fmt.format(x) + "\n" for x in items)

    services = sorted(set(BASE_MACH_LOOKUP) | set(mac.allow_mach_lookup))
    text: str = _template().render(
        home=home,
        mach_services=lines('  (global-name "{}")', services),
        read_rules="".join(f"({action} file-read* {f})\n" for _, _, action, f in read_rules),
        write_allow=lines("(allow file-write* {})", _dedupe(write_allow)),
        write_deny=lines("(deny file-write* {})", _dedupe(write_deny)),
        mandatory=lines("(deny file-write* {})", _dedupe(mandatory)),
        move_guard=lines("(deny file-write-unlink {})", _dedupe(move_guard + ancestors)),
        proxy_ports=lines('(allow network-outbound (remote ip "localhost:{}"))',
                          map(str, _proxy_ports(spec))),
        allow_local_binding=net.allow_local_binding,
        unix_sockets=lines("(allow network-outbound (remote unix-socket (path-literal {})))",
                           [_quote(_private(p)) for p in net.allow_unix_sockets]),
        allow_all_unix_sockets=net.allow_all_unix_sockets,
    )
    return text


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    return environment().get_template("macos/sandbox.sb.j2")


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in items if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]


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
        "StandardOutPath": "/var/log/agent-sandbox/proxy.log",
        "StandardErrorPath": "/var/log/agent-sandbox/proxy.log",
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
    settings: bytes = memo(spec, "macos-proxy-settings",
                           lambda: json_bytes(srt.srt_settings(spec), sort_keys=False))
    yield Artifact(proxy_settings_target(facts), settings, 0o644, "srt-settings")
    yield Artifact(LAUNCHD_PLIST, memo(spec, ("launchd", facts.python, facts.prefix),
                                       lambda: launch_daemon(spec, facts)), 0o644, "launchd")
    if spec.platforms.macos.mdm_profile:
        yield Artifact(mobileconfig_target(facts), mobileconfig(spec, facts), 0o600,
                       "mobileconfig")
