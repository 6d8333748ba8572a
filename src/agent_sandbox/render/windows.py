"""Windows artifacts: PowerShell provisioning for the engine and a dedicated sandbox account.

``windows_plan(spec, facts)`` is the pure decision: which engine, account and
group, which firewall rules, which ACEs, which registry policy. Two things
consume it: the rendered ``provision.ps1`` (idempotent, ``-CheckMode`` aware,
for hosts managed without Ansible) and the ``sandbox_windows`` role (which
reads the rendered ``plan.json`` and runs the script's steps, and applies the
rest with ``ansible.windows`` modules).

What it sets up:

- the engine, srt-win (srt's own Windows backend, from the pinned npm package):
  its install creates the sandbox account, keeps its credential, hides it from
  the logon screen and installs WFP filters keyed on the account's SID that let
  it reach only the proxy's port range, loopback included (Windows Firewall
  exempts loopback; WFP does not); its ``exec`` runs agents' commands as the
  account (``windows_host.exec_argv``);
- the state folder owned by Administrators with a fixed ACL; an account of the
  same name that this provisioning did not create is refused, never adopted;
  the account is denied network, batch, service and remote-desktop logon;
- outbound firewall rules scoped to the group with ``-LocalUser`` as defence
  in depth, repaired when any property drifted (compared case-sensitively); the
  provisioning fails when a profile is disabled, Group Policy ignores local
  rules, or the account reaches a loopback port outside the range directly;
- ACEs for the group: Modify on writable roots (and delete-child denied there),
  Deny Read on denied reads, Deny Write/Delete on denied writes and on the
  protected names (``agent_sandbox.protected``) wherever they exist below a
  writable root; ACEs an earlier run added that the plan no longer lists are
  removed. Glob rules and POSIX-only paths (``/tmp``) have no ACL equivalent
  and are listed as skipped (the agents' hooks and managed settings still
  enforce them);
- Claude Code managed settings under Program Files and the registry policy
  value ``HKLM\\SOFTWARE\\Policies\\ClaudeCode\\Settings``.

Pure: (spec, facts) -> artifacts. Never writes files or starts processes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import posixpath
import re
from collections.abc import Iterable
from typing import Any

from .. import contract
from ..inventory import HostFacts, User
from ..spec import paths
from ..spec.models import Spec
from . import Artifact, RenderError, json_bytes, memo
from .templating import render_template

STATE_DIR = contract.WINDOWS_STATE_DIR
OWNERSHIP_KEY = "HKLM:\\SOFTWARE\\agent-sandbox"
OWNERSHIP_VALUE = "AccountSid"
USERLIST_KEY = ("HKLM:\\SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion\\Winlogon"
                "\\SpecialAccounts\\UserList")
# Logon rights the sandbox account is denied: network, batch, service, remote desktop.
DENY_LOGON_RIGHTS = ("SeDenyNetworkLogonRight", "SeDenyBatchLogonRight",
                     "SeDenyServiceLogonRight", "SeDenyRemoteInteractiveLogonRight")
# The engine: srt's own Windows backend, from the pinned npm package.
ENGINE_VERSION = "0.0.78"
ENGINE_SUBLAYER = "5f0b3c1e-8a47-4c2f-9d6e-2b7a41c0e9d3"
REGISTRY_KEY = "HKLM:\\SOFTWARE\\Policies\\ClaudeCode"
REGISTRY_VALUE = "Settings"
FIREWALL_GROUP = "agent-sandbox"

# Everything but 127.0.0.0/8 and ::1.
NON_LOOPBACK_V4 = ("0.0.0.0-126.255.255.255", "128.0.0.0-255.255.255.255")
NON_LOOPBACK_V6 = ("::", "::2-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
LOOPBACK = ("127.0.0.0/8", "::1")

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_ANY_DEPTH = re.compile(r"^(?:\*\*/)+([^*?\[\]]+?)(?:/\*\*)?$")


def plan_target(facts: HostFacts) -> str:
    return f"{facts.prefix}/provision/plan.json"


def script_target(facts: HostFacts) -> str:
    return f"{facts.prefix}/provision/provision.ps1"


def win_path(path: str) -> str:
    return path.replace("/", "\\")


def _expand(rule: str, user: User) -> tuple[str | None, str]:
    """A spec path rule as a Windows path for one user, or (None, why not)."""
    if paths.is_glob(rule):
        return None, "glob rules have no ACL equivalent"
    home = user.home.replace("\\", "/")
    if rule == "~":
        return posixpath.normpath(home), ""
    if rule.startswith("~/"):
        return posixpath.normpath(posixpath.join(home, rule[2:])), ""
    if _DRIVE.match(rule):
        return rule.replace("\\", "/").rstrip("/"), ""
    if rule.startswith("/"):
        return None, "POSIX path with no drive letter"
    return None, "relative path (depends on the working directory)"


def _any_depth_name(rule: str) -> str | None:
    """``**/NAME`` or ``**/NAME/**`` with a literal NAME, else None."""
    m = _ANY_DEPTH.match(rule)
    return m.group(1) if m else None


def firewall_rules(spec: Spec) -> list[dict[str, Any]]:
    lo, hi = spec.platforms.windows.proxy_port_range
    outside: list[str] = []
    if lo > 1:
        outside.append(f"1-{lo - 1}" if lo > 2 else "1")
    if hi < 65535:
        outside.append(f"{hi + 1}-65535" if hi < 65534 else "65535")
    rules: list[dict[str, Any]] = [
        {"name": "agent-sandbox-block-remote", "display_name": "agent-sandbox: block outbound",
         "action": "Block", "protocol": "Any",
         "remote_address": [*NON_LOOPBACK_V4, *NON_LOOPBACK_V6], "remote_port": []},
    ]
    if outside:
        rules.append({"name": "agent-sandbox-block-loopback-tcp",
                      "display_name": "agent-sandbox: block loopback outside the proxy ports",
                      "action": "Block", "protocol": "TCP", "remote_address": list(LOOPBACK),
                      "remote_port": outside})
    rules.append({"name": "agent-sandbox-block-loopback-udp",
                  "display_name": "agent-sandbox: block loopback UDP",
                  "action": "Block", "protocol": "UDP", "remote_address": list(LOOPBACK),
                  "remote_port": []})
    rules.append({"name": "agent-sandbox-allow-proxy",
                  "display_name": "agent-sandbox: allow the proxy on loopback",
                  "action": "Allow", "protocol": "TCP", "remote_address": list(LOOPBACK),
                  "remote_port": [f"{lo}-{hi}" if hi > lo else str(lo)]})
    for r in rules:
        r["fingerprint"] = hashlib.sha256(
            json.dumps(r, sort_keys=True).encode()).hexdigest()[:16]
    return rules


_HOME = "@@home@@"  # stands for a user's home while the per-spec ACL template is built


def _user_acl(spec: Spec, home: str) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """ACEs for one user's home, and the rules that had no ACL form."""
    fs = spec.filesystem
    user = User("", home)
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    skipped: list[dict[str, str]] = []

    def add(path: str, rights: str, kind: str, why: str, *, if_exists: bool) -> None:
        key = (path.lower(), rights, kind)
        if key not in entries:
            entries[key] = {"path": win_path(path), "rights": rights, "type": kind,
                            "reason": why, "if_exists": if_exists}

    def skip(section: str, rule: str, why: str) -> None:
        item = {"rule": rule, "section": section, "why": why}
        if item not in skipped:
            skipped.append(item)

    roots: list[str] = []
    for rule in fs.allow_write:
        path, why = _expand(rule, user)
        if path is None:
            skip("allow_write", rule, why)
            continue
        roots.append(path)
        add(path, "Modify", "allow", "writable root", if_exists=False)
        # a child may be deleted through its parent's delete-child right: never
        # granted, and denied outright so no later grant can add it
        add(path, "DeleteSubdirectoriesAndFiles", "deny", "parent delete-child", if_exists=False)
    for rule in fs.allow_read:
        path, why = _expand(rule, user)
        if path is None:
            skip("allow_read", rule, why)
            continue
        add(path, "ReadAndExecute", "allow", "read carve-out", if_exists=True)
    deny_sets = (("deny_read", fs.deny_read, "Read"),
                 ("deny_write", fs.deny_write, "Write, Delete"),
                 ("mandatory", _protected_rules(), "Write, Delete"))
    for section, rules, rights in deny_sets:
        for rule in rules:
            name = _any_depth_name(rule)
            if name is not None:
                # Covered wherever it appears: place it at the top of each root.
                for root in roots:
                    add(posixpath.join(root, name), rights, "deny",
                        f"{section} {rule}", if_exists=True)
                continue
            path, why = _expand(rule, user)
            if path is None:
                if section != "mandatory":
                    skip(section, rule, why)
                continue
            add(path, rights, "deny", f"{section} {rule}", if_exists=True)
    return list(entries.values()), skipped


def protected_names() -> dict[str, list[str]]:
    """The protected set as names: any-depth entries (``names``; a folder name
    with a trailing backslash) and what is protected inside every git folder."""
    from .. import protected

    names = [win_path(p) + ("\\" if kind == "d" else "") for p, kind, _ in protected.ANY_DEPTH]
    git = [win_path(p) + ("\\" if kind == "d" else "") for p, kind, _ in
           protected.GIT_EXECUTABLE]
    # Python's start-up: wildcard patterns (PowerShell -like) on the relative path's tail
    patterns = [win_path(p) for p, _, _ in protected.PYTHON_STARTUP]
    return {"names": names, "git_dir": [protected.GIT_DIR], "git": git,
            "patterns": patterns}


def _protected_rules() -> list[str]:
    """The project's protected set (``agent_sandbox.protected``), any-depth names."""
    from .. import protected

    return list(protected.any_depth_rules())


def _templatable(spec: Spec) -> bool:
    """Whether ``~`` expands by plain substitution (no ``..`` to fold, no clash)."""
    fs = spec.filesystem
    rules = [*fs.allow_write, *fs.allow_read, *fs.deny_read, *fs.deny_write]
    return not any(".." in r or _HOME in r for r in rules)


def acl_entries(spec: Spec, facts: HostFacts) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """ACEs to add for the sandbox group (all users), and the rules with no ACL form.

    The per-user list is built once per spec with a stand-in home and the real
    home substituted per user, which keeps a large fleet fast.
    """
    template = _templatable(spec)
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    skipped: list[dict[str, str]] = []
    for user in facts.users:
        if template:
            base: tuple[list[dict[str, Any]], list[dict[str, str]]] = memo(
                spec, "windows-acl-template", lambda: _user_acl(spec, _HOME))
            home = win_path(posixpath.normpath(user.home.replace("\\", "/")))
            mine = [e if _HOME not in e["path"] else {**e, "path": e["path"].replace(_HOME, home)}
                    for e in base[0]]
            gaps = base[1]
        else:
            mine, gaps = _user_acl(spec, user.home)
        for e in mine:
            entries.setdefault((e["path"].lower(), e["rights"], e["type"]), e)
        skipped += [g for g in gaps if g not in skipped]
    return list(entries.values()), skipped


def _plan_shared(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    win = spec.platforms.windows
    for label, value in (("account", win.account), ("group", win.group)):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]*", value) or value.endswith("."):
            raise RenderError(f"platforms.windows.{label}: {value!r} is not a valid local "
                              "account or group name (letters, digits, space, . _ -)")
    settings_file = None
    registry = None
    claude = spec.agents.get("claude")
    if claude is not None and claude.enabled and claude.managed_settings:
        from . import agents

        settings = agents.claude_settings(spec, facts, managed=True)
        settings_file = agents.CLAUDE_MANAGED["windows"]
        registry = {"path": REGISTRY_KEY, "name": REGISTRY_VALUE, "type": "string",
                    "data": json.dumps(settings, sort_keys=True, separators=(",", ":"))}
    lo, hi = win.proxy_port_range
    return {
        "account": win.account,
        "group": win.group,
        "engine": engine(spec, facts),
        "protected": protected_names(),
        "ownership": {"path": OWNERSHIP_KEY, "name": OWNERSHIP_VALUE},
        "hidden_key": USERLIST_KEY,
        "deny_logon_rights": list(DENY_LOGON_RIGHTS),
        "state_dir": win_path(STATE_DIR),
        "proxy_ports": [lo, hi],
        "firewall_group": FIREWALL_GROUP,
        "firewall": firewall_rules(spec),
        "managed_settings_file": win_path(settings_file) if settings_file else None,
        "registry": registry,
    }


def engine(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    """How srt-win is installed and called: the spec's account and port range.

    ``srt-win install`` creates the account (its credential stays with the
    engine), hides it from the logon screen and installs the WFP filters keyed
    on its SID; ``srt-win exec`` runs commands as that account
    (``windows_host.exec_argv``).
    """
    win = spec.platforms.windows
    lo, hi = win.proxy_port_range
    exe = win_path(f"{facts.prefix}/srt-win/srt-win.exe")
    return {
        "kind": "srt-win",
        "version": ENGINE_VERSION,
        "exe": exe,
        "sandbox_user": win.account,
        "proxy_port_range": [lo, hi],
        "sublayer_guid": ENGINE_SUBLAYER,
        "install_args": ["install", "--sublayer-guid", ENGINE_SUBLAYER,
                         "--proxy-port-range", f"{lo}-{hi}", "--sandbox-user", win.account],
        "uninstall_args": ["uninstall", "--sublayer-guid", ENGINE_SUBLAYER],
    }


def windows_plan(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    """Everything the provisioning applies, as plain data."""
    acl, skipped = acl_entries(spec, facts)
    shared = _shared(spec, facts)
    plan = {k: v for k, v in shared.items() if k not in ("managed_settings_file", "registry")}
    roots = sorted({a["path"] for a in acl if a["reason"] == "writable root"})
    plan.update(acl=acl, skipped=skipped, managed_settings_file=shared["managed_settings_file"],
                registry=shared["registry"], roots=roots)
    return plan


# ------------------------------------------------------------------ PowerShell


_PS_QUOTES = re.compile("['\u2018\u2019\u201a\u201b]")


def ps_quote(text: str) -> str:
    """A single-quoted PowerShell string literal (no expansion)."""
    if "\x00" in text:
        raise RenderError("a NUL byte cannot be written into a PowerShell script")
    # PowerShell also treats the typographic single quotes as quote characters.
    if _PS_QUOTES.search(text) is None:
        return "'" + text + "'"
    return "'" + _PS_QUOTES.sub(lambda m: m.group(0) * 2, text) + "'"


def ps_list(items: Iterable[str]) -> str:
    return "@(" + ", ".join(ps_quote(i) for i in items) + ")"


def here_string(text: str) -> str:
    if re.search(r"(^|\n)'@", text) or "\r" in text:
        raise RenderError("managed settings cannot be embedded in a PowerShell here-string")
    return "@'\n" + text + "\n'@"


_ACL_SLOT = "@@acl-block@@"


def _acl_block(plan: dict[str, Any]) -> str:
    group = ps_quote(plan["group"])
    fixed = functools.lru_cache(maxsize=256)(ps_quote)  # rights and types repeat
    out: list[str] = []
    for ace in plan["acl"]:
        out.append(f"    # {ace['reason']}\n    Add-SandboxAce -Path {ps_quote(ace['path'])} "
                   f"-Identity {group} -Rights {fixed(ace['rights'])} "
                   f"-Type {fixed(ace['type'].capitalize())}"
                   + (" -IfExists\n" if ace["if_exists"] else "\n"))
    for root in plan["roots"]:
        out.append(f"    # protected names that exist anywhere below {root}\n"
                   f"    Protect-ExistingNames -Root {ps_quote(root)} -Identity {group}\n")
    for item in plan["skipped"]:
        out.append(f"    # skipped {item['section']} {item['rule']}: {item['why']}\n")
    return "".join(out).replace("\r", " ")


def _script_frame(spec: Spec, facts: HostFacts, plan: dict[str, Any]) -> tuple[str, str]:
    """The script around the ACL block: the same for every host sharing spec and paths."""
    settings_text = None
    if plan["managed_settings_file"]:
        from . import agents

        settings_text = json_bytes(
            agents.claude_settings(spec, facts, managed=True)).decode().rstrip("\n")
    text = render_template(
        "windows/provision.ps1.j2",
        plan=plan,
        q=ps_quote,
        ql=ps_list,
        here=here_string,
        settings_text=settings_text,
        acl_block=_ACL_SLOT,
    ).decode()
    head, _, tail = text.partition(_ACL_SLOT)
    return head, tail


def provision_script(spec: Spec, facts: HostFacts, plan: dict[str, Any] | None = None) -> bytes:
    plan = plan if plan is not None else windows_plan(spec, facts)
    frame: tuple[str, str] = memo(spec, ("windows-frame", facts.python, facts.prefix),
                                  lambda: _script_frame(spec, facts, plan))
    return (frame[0] + _acl_block(plan) + frame[1]).encode()


def _shared(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    """The parts of the plan that do not depend on the host's users."""
    shared: dict[str, Any] = memo(spec, ("windows-shared", facts.python),
                                  lambda: _plan_shared(spec, facts))
    return shared


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    if facts.os != "windows":
        return
    plan = windows_plan(spec, facts)
    yield Artifact(plan_target(facts), _plan_json(spec, facts, plan), 0o644, "windows-plan")
    yield Artifact(script_target(facts), provision_script(spec, facts, plan), 0o644,
                   "powershell")


def _plan_json(spec: Spec, facts: HostFacts, plan: dict[str, Any]) -> bytes:
    """``json.dumps(plan, sort_keys=True)``, with the shared part encoded once per spec.

    Single-line JSON: machine-read, and the C encoder keeps a large fleet fast.
    """
    def frame() -> str:
        doc = {**plan, "acl": "@@acl@@", "skipped": "@@skipped@@", "roots": "@@roots@@"}
        return json.dumps(doc, sort_keys=True, ensure_ascii=False)

    text: str = memo(spec, ("windows-plan-json", facts.python), frame)
    text = text.replace('"@@acl@@"', json.dumps(plan["acl"], sort_keys=True, ensure_ascii=False))
    text = text.replace('"@@roots@@"', json.dumps(plan["roots"], ensure_ascii=False))
    text = text.replace('"@@skipped@@"',
                        json.dumps(plan["skipped"], sort_keys=True, ensure_ascii=False))
    return (text + "\n").encode()


