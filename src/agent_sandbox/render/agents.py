"""Agent client configuration: managed settings, hooks and MCP entries.

For each enabled client in ``spec.agents`` and for the host's OS this renders:

- system-wide: Claude Code ``managed-settings.json`` (sandbox block, permissions,
  hooks, ``allowManagedHooksOnly``), Gemini CLI system settings, Codex
  ``requirements.toml``;
- per user: Claude Desktop config, Cursor and Windsurf MCP configs, Codex
  ``config.toml`` (``[mcp_servers.NAME]``) and ``hooks.json``;
- per repository (``project_artifacts``): Claude Code ``.claude/settings.json``
  and ``.mcp.json``, VS Code ``.vscode/mcp.json``, Cursor ``.cursor/hooks.json``
  and ``.cursor/mcp.json``, Gemini ``.gemini/settings.json``.

Every hook calls ``"<python>" -I -m agent_sandbox hook <agent> <event>`` through
the host's absolute interpreter (no PATH lookup, no user site-packages).

Pure: (spec, facts) -> artifacts. It must never write files, start processes
or read the environment; same input, same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tomli_w

from .. import contract
from ..inventory import HostFacts
from ..spec.models import AgentOptions, Spec
from ..spec.paths import MANDATORY_DENY_WRITE
from ..spec.rules import ToolKind, Verdict
from . import Artifact, json_bytes, memo
from .agent_mcp import (
    mcp_claude,
    mcp_claude_desktop,
    mcp_codex,
    mcp_cursor,
    mcp_gemini,
    mcp_vscode,
    mcp_windsurf,
    servers_for,
)
from .gemini_policy import GEMINI_HOOKED_TOOLS, GEMINI_POLICY, gemini_policy
from .srt import srt_network
from .templating import render_template

# ---------------------------------------------------------------------------
# Where each client reads its configuration, per OS.

CLAUDE_MANAGED = {
    "linux": "/etc/claude-code/managed-settings.json",
    "macos": "/Library/Application Support/ClaudeCode/managed-settings.json",
    "windows": "C:/Program Files/ClaudeCode/managed-settings.json",
}
# Claude Code's managed MCP file (beside managed-settings.json): with it, only
# these servers start.
CLAUDE_MANAGED_MCP = {os_: path.rsplit("/", 1)[0] + "/managed-mcp.json"
                      for os_, path in CLAUDE_MANAGED.items()}
GEMINI_SYSTEM = {
    "linux": contract.GEMINI_SYSTEM_SETTINGS,
    "macos": "/Library/Application Support/GeminiCli/settings.json",
    "windows": "C:/ProgramData/gemini-cli/settings.json",
}
CODEX_REQUIREMENTS = {
    "linux": "/etc/codex/requirements.toml",
    "macos": "/etc/codex/requirements.toml",
    "windows": "C:/ProgramData/OpenAI/Codex/requirements.toml",
}
CLAUDE_DESKTOP = {
    "linux": ".config/Claude/claude_desktop_config.json",
    "macos": "Library/Application Support/Claude/claude_desktop_config.json",
    "windows": "AppData/Roaming/Claude/claude_desktop_config.json",
}

# Hook events each client gets, as (client event name, our event name, matcher).
CLAUDE_EVENTS = (
    ("PreToolUse", "pre-tool-use", "*"),
    ("PostToolUse", "post-tool-use", "*"),
    ("SessionStart", "session-start", None),
)
CODEX_EVENTS = CLAUDE_EVENTS
# Gemini matchers are regular expressions ("*" alone is not one): no matcher
# means every tool.
GEMINI_EVENTS = (
    ("BeforeTool", "before-tool", None),
    ("AfterTool", "after-tool", None),
    ("SessionStart", "session-start", None),
)
CURSOR_EVENTS = (
    ("beforeShellExecution", "before-shell-execution"),
    ("beforeMCPExecution", "before-mcp-execution"),
    ("beforeReadFile", "before-read-file"),
)

def hook_command(facts: HostFacts, agent: str, event: str) -> str:
    """The shell command a client runs for one hook event."""
    return contract.hook_command(facts.python, agent, event, posix=facts.os != "windows")


def _hook_timeout(spec: Spec) -> int:
    """The timeout rendered for every hook: longer than the hook's own deadline
    (``contract.agent_timeout``), so a client never times the hook out and runs the tool."""
    return int(contract.agent_timeout(spec.approvals.wait))


CLAUDE_ON_FAILURE = (2, 1, 295)  # the first Claude Code that reads onFailure


def reads_on_failure(opts: AgentOptions | None) -> bool:
    """Whether the hosts' Claude Code (its oldest, ``version``) reads a hook entry's
    ``onFailure``: block a call when the hook cannot start, crashes, exits with an
    unexpected code or times out. An older one may reject the unknown key and skip
    every hook of the file, so it is written only when the version says so."""
    if opts is None or not opts.version:
        return False
    return tuple(int(x) for x in opts.version.split(".")) >= CLAUDE_ON_FAILURE


def _enabled(spec: Spec, agent: str) -> AgentOptions | None:
    opts = spec.agents.get(agent)  # type: ignore[call-overload]
    return opts if opts is not None and opts.enabled else None


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------
# Claude Code settings.


def _claude_path(rule: str) -> str:
    """Our path rule -> Claude Code permission path (``//`` marks absolute)."""
    if rule.startswith("/"):
        return "/" + rule
    return rule  # ~/..., **/..., ./... and relative names read the same


def _claude_path_specs(rule: str) -> list[str]:
    base = _claude_path(rule)
    if any(c in rule for c in "*?[") or rule.endswith("/**"):
        return [base]
    return [base, base.rstrip("/") + "/**"]


def _valid_claude_arg(arg: str) -> bool:
    return bool(arg) and ")" not in arg and "\n" not in arg


def claude_permissions(spec: Spec) -> dict[str, list[str]]:
    """Claude Code allow/ask/deny lists from the spec's rules and paths.

    Only rules with an exact Claude Code equivalent are emitted; everything
    else is still enforced by the hooks.
    """
    allow: list[str] = []
    ask: list[str] = []
    deny: list[str] = []
    buckets = {Verdict.ALLOW: allow, Verdict.OBSERVE: allow, Verdict.ESCALATE: ask,
               Verdict.DENY: deny}

    def add(bucket: list[str], rule: str) -> None:
        if rule not in bucket:
            bucket.append(rule)

    for rule in spec.commands.rules:
        bucket = buckets[rule.verdict]
        pattern = rule.pattern or "*"
        if rule.prefix is not None:
            if any(isinstance(t, list) for t in rule.prefix):
                continue  # alternatives have no single Claude form; the hook enforces it
            words = " ".join(str(t) for t in rule.prefix)
            if _valid_claude_arg(words):
                add(bucket, f"Bash({words} *)")
            continue
        if rule.tool is ToolKind.BASH:
            if pattern == "*":
                add(bucket, "Bash")
            elif _valid_claude_arg(pattern):
                add(bucket, f"Bash({pattern})")
        elif rule.tool in (ToolKind.READ, ToolKind.WRITE):
            tools = ("Read",) if rule.tool is ToolKind.READ else ("Edit", "Write")
            for tool in tools:
                if pattern == "*":
                    add(bucket, tool)
                elif _valid_claude_arg(pattern):
                    add(bucket, f"{tool}({_claude_path(pattern)})")
        elif rule.tool is ToolKind.FETCH:
            if pattern == "*":
                add(bucket, "WebFetch")
            elif _valid_claude_arg(pattern):
                add(bucket, f"WebFetch(domain:{pattern})")
        elif rule.tool is ToolKind.MCP and pattern.startswith("mcp__") and "*" not in pattern:
            add(bucket, pattern)
    for path in spec.filesystem.deny_read:
        for p in _claude_path_specs(path):
            if _valid_claude_arg(p):
                add(deny, f"Read({p})")
    for path in (*spec.filesystem.deny_write, *MANDATORY_DENY_WRITE):
        for p in _claude_path_specs(path):
            if _valid_claude_arg(p):
                add(deny, f"Edit({p})")
                add(deny, f"Write({p})")
    # the strictest list wins in Claude Code too; keep each rule in one list only
    ask[:] = [r for r in ask if r not in deny]
    allow[:] = [r for r in allow if r not in deny and r not in ask]
    return {"allow": allow, "ask": ask, "deny": deny}


def claude_sandbox(spec: Spec) -> dict[str, Any]:
    """The ``sandbox`` block: Claude Code runs Bash under its own srt with our policy."""
    fs = spec.filesystem
    network = srt_network(spec)
    filesystem: dict[str, Any] = {
        "allowWrite": [_claude_path(p) for p in fs.allow_write],
        "denyWrite": [_claude_path(p) for p in fs.deny_write],
        "denyRead": [_claude_path(p) for p in fs.deny_read],
    }
    if fs.allow_read:
        filesystem["allowRead"] = [_claude_path(p) for p in fs.allow_read]
    return {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "autoAllowBashIfSandboxed": False,
        "network": network,
        "filesystem": filesystem,
    }


def _hook_groups(spec: Spec, facts: HostFacts, agent: str,
                 events: Iterable[tuple[str, str, str | None]]) -> dict[str, Any]:
    """Hook groups in the shape Claude Code and Codex share: per client event, one
    group (with its matcher) running our hook for that event."""
    timeout = _hook_timeout(spec)
    blocks = agent == "claude" and reads_on_failure(_enabled(spec, agent))
    hooks: dict[str, Any] = {}
    for client_event, event, matcher in events:
        group: dict[str, Any] = {}
        if matcher is not None:
            group["matcher"] = matcher
        group["hooks"] = [{"type": "command", "command": hook_command(facts, agent, event),
                           "timeout": timeout, **({"onFailure": "block"} if blocks else {})}]
        hooks[client_event] = [group]
    return hooks


def claude_hooks(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    return _hook_groups(spec, facts, "claude", CLAUDE_EVENTS)


def claude_settings(spec: Spec, facts: HostFacts, *, managed: bool) -> dict[str, Any]:
    """Claude Code settings: managed (system-wide) or project ``.claude/settings.json``."""
    opts = _enabled(spec, "claude") or AgentOptions()
    doc: dict[str, Any] = {
        "sandbox": claude_sandbox(spec),
        "permissions": {**claude_permissions(spec),
                        "disableBypassPermissionsMode": "disable"},
    }
    if opts.hooks:
        doc["hooks"] = claude_hooks(spec, facts)
    servers = [name for name, _ in servers_for(spec, "claude")]
    if managed:
        doc["allowManagedHooksOnly"] = opts.allow_managed_hooks_only
        doc["allowedMcpServers"] = [{"serverName": n} for n in servers]
        # only the managed layer's permission rules, domains, read paths and MCP
        # servers count: a user or repository settings file cannot widen them
        # (a spec that wants otherwise says so in agents.claude.extra)
        doc["allowManagedPermissionRulesOnly"] = True
        doc["allowManagedMcpServersOnly"] = True
        doc["sandbox"]["network"] = {**doc["sandbox"]["network"],
                                     "allowManagedDomainsOnly": True}
        doc["sandbox"]["filesystem"]["allowManagedReadPathsOnly"] = True
    else:
        doc["enableAllProjectMcpServers"] = False
        if servers:
            doc["enabledMcpjsonServers"] = servers
    return _deep_merge(doc, opts.extra)


# ---------------------------------------------------------------------------
# Other clients' hooks.


def cursor_hooks(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    """Cursor's ``hooks.json``: each entry with ``failClosed`` (Cursor lets a call
    through when a hook crashes, times out or answers no JSON, unless the entry
    says so) and a timeout longer than the hook's own deadline."""
    timeout = _hook_timeout(spec)
    return {
        "version": 1,
        "hooks": {
            client_event: [{"command": hook_command(facts, "cursor", event),
                            "timeout": timeout, "failClosed": True}]
            for client_event, event in CURSOR_EVENTS
        },
    }


def gemini_settings(spec: Spec, facts: HostFacts, *, system: bool) -> dict[str, Any]:
    opts = _enabled(spec, "gemini") or AgentOptions()
    doc: dict[str, Any] = {}
    servers = mcp_gemini(spec)
    if servers:
        doc["mcpServers"] = servers
    if opts.hooks:
        timeout_ms = _hook_timeout(spec) * 1000
        hooks: dict[str, Any] = {}
        for client_event, event, matcher in GEMINI_EVENTS:
            group: dict[str, Any] = {}
            if matcher is not None:
                group["matcher"] = matcher
            group["hooks"] = [{"type": "command", "name": f"agent-sandbox-{event}",
                               "command": hook_command(facts, "gemini", event),
                               "timeout": timeout_ms}]
            hooks[client_event] = [group]
        doc["hooks"] = hooks
    if opts.hooks and not system:
        # workspace policies are off in Gemini CLI, so a repository lets the
        # tools our hook judges through here (the system tier uses an admin
        # policy, gemini_policy); the hook still sees every call
        doc["tools"] = {"allowed": list(GEMINI_HOOKED_TOOLS)}
        # "auto_edit": a shell redirection is not turned back into a prompt
        # (the hook judges redirections itself); never "yolo"
        doc["general"] = {"defaultApprovalMode": "auto_edit"}
        for entry in doc.get("mcpServers", {}).values():
            entry["trust"] = True
    if system:
        # system settings override user and project ones: keep hooks on, and
        # only the listed MCP servers
        doc["mcp"] = {"allowed": sorted(servers)}
        # yolo skips confirmations the admin policy asks for; never offered
        doc["security"] = {"disableYoloMode": True}
        if opts.hooks:
            doc["hooksConfig"] = {"enabled": True}
            # Gemini CLI runs system hooks only in trusted folders: folder trust
            # off makes every folder run them (``extra`` may turn it back on)
            doc["security"]["folderTrust"] = {"enabled": False}
    return _deep_merge(doc, opts.extra)


def codex_hooks(spec: Spec, facts: HostFacts) -> dict[str, Any]:
    return {"hooks": _hook_groups(spec, facts, "codex", CODEX_EVENTS)}


CODEX_PROFILE = "agent-sandbox"


def codex_permissions(spec: Spec) -> dict[str, Any]:
    """A Codex permission profile from the spec: the project roots writable, no
    network, and every ``deny_read`` path unreadable (``"none"``) for each
    command Codex's own sandbox runs. Globs below the repository go under
    ``:project_roots``."""
    roots: dict[str, str] = {".": "write"}
    fs: dict[str, Any] = {"/": "read"}  # reads as Codex's workspace sandbox allows them
    for path in spec.filesystem.deny_read:
        rule = path.rstrip("/")
        if rule.startswith(("/", "~")):
            fs[rule] = "none"
        else:
            roots[rule] = "none"
    fs[":project_roots"] = roots
    fs["glob_scan_max_depth"] = 4
    return {CODEX_PROFILE: {"filesystem": fs, "network": {"enabled": False}}}


def codex_config(spec: Spec) -> dict[str, Any]:
    opts = _enabled(spec, "codex") or AgentOptions()
    doc: dict[str, Any] = {"default_permissions": CODEX_PROFILE,
                           "permissions": codex_permissions(spec)}
    if opts.hooks:
        doc["features"] = {"hooks": True}  # on by default in current Codex; never off
    servers = mcp_codex(spec)
    if servers:
        doc["mcp_servers"] = servers
    return _deep_merge(doc, opts.extra)


def codex_requirements(spec: Spec, facts: HostFacts) -> bytes:
    """Managed requirements (``requirements.toml``): what users may not change.

    Our hooks live here, under ``[hooks]`` with ``allow_managed_hooks_only``:
    Codex runs managed hooks without a trust step, and no user or project hook
    can be added beside them. Because the hook sees every call and sends what
    needs a human to the approval queue, ``never`` is among the allowed approval
    policies (the one ``codex exec`` asks for); without hooks it is left out.
    The spec's ``deny_read`` becomes ``[permissions.filesystem] deny_read``,
    which Codex's own sandbox enforces for every command it runs."""
    servers = mcp_codex(spec)
    identities = [
        (name, [("url", e["url"])] if "url" in e else [("command", e["command"])])
        for name, e in servers.items()
    ]
    hooks = (_enabled(spec, "codex") or AgentOptions()).hooks
    extra: dict[str, Any] = {}
    if hooks:
        extra["hooks"] = codex_hooks(spec, facts)["hooks"]
    if spec.filesystem.deny_read:
        extra["permissions"] = {"filesystem": {"deny_read": [
            p.rstrip("/") for p in spec.filesystem.deny_read]}}
    return render_template(
        "agents/codex/requirements.toml.j2",
        approval_policies=["untrusted", "on-request", "never"] if hooks
        else ["untrusted", "on-request"],
        sandbox_modes=["read-only", "workspace-write"],
        web_search_modes=[],
        pin_hooks=hooks,
        mcp_servers=identities,
    ) + (b"\n" + tomli_w.dumps(extra).encode() if extra else b"")


def toml_bytes(data: dict[str, Any]) -> bytes:
    return tomli_w.dumps(data).encode()


# ---------------------------------------------------------------------------
# Artifacts.


Entry = tuple[str, bytes, int, str]  # (path, content, mode, kind)


# Linux: a folder of wrappers put first on every login shell's PATH, where a
# client's name runs that client through ``sandbox agent`` (the client itself
# inside the sandbox). Running the real program by its full path bypasses it.
WRAPPER_DIR = "/usr/libexec/agent-sandbox/bin"
WRAPPER_PROFILE = "/etc/profile.d/agent-sandbox-agents.sh"
WRAPPED_CLIENTS = ("gemini",)  # the client with no OS sandbox of its own here


def agent_wrapper(facts: HostFacts, client: str) -> bytes:
    """The wrapper script for ``client``; its second line is the mark
    ``sandbox agent`` and ``sandbox verify`` recognise (``contract.WRAPPER_MARK``)."""
    return (f"#!/bin/sh\n{contract.WRAPPER_MARK.decode()}\n"
            "# Rendered by agent-sandbox. Running the client's own program by its full\n"
            "# path bypasses this wrapper (`sandbox verify` reports what PATH resolves).\n"
            f'exec "{facts.python}" -I -m agent_sandbox agent {client} -- "$@"\n').encode()


def wrapper_profile() -> bytes:
    return (f"# Rendered by agent-sandbox: agent clients run through `sandbox agent`.\n"
            f'case ":$PATH:" in *":{WRAPPER_DIR}:"*) ;; '
            f'*) PATH="{WRAPPER_DIR}:$PATH"; export PATH ;; esac\n').encode()


def _wrapper_plan(spec: Spec, facts: HostFacts) -> list[Entry]:
    if facts.os != "linux":
        return []
    out: list[Entry] = [(f"{WRAPPER_DIR}/{c}", agent_wrapper(facts, c), 0o755, "agent-wrapper")
                        for c in WRAPPED_CLIENTS
                        if (o := _enabled(spec, c)) is not None and o.managed_settings]
    if out:
        out.append((WRAPPER_PROFILE, wrapper_profile(), 0o644, "agent-wrapper"))
    return out


def _system_plan(spec: Spec, facts: HostFacts) -> list[Entry]:
    out: list[Entry] = _wrapper_plan(spec, facts)
    claude = _enabled(spec, "claude")
    if claude and claude.managed_settings:
        out.append((CLAUDE_MANAGED[facts.os],
                    json_bytes(claude_settings(spec, facts, managed=True)), 0o644,
                    "claude-managed-settings"))
        if servers_for(spec, "claude"):
            out.append((CLAUDE_MANAGED_MCP[facts.os], json_bytes(mcp_claude(spec)), 0o644,
                        "claude-managed-settings"))
    gemini = _enabled(spec, "gemini")
    if gemini and gemini.managed_settings:
        out.append((GEMINI_SYSTEM[facts.os],
                    json_bytes(gemini_settings(spec, facts, system=True)), 0o644,
                    "gemini-settings"))
        if gemini.hooks:
            out.append((GEMINI_POLICY[facts.os], gemini_policy(spec), 0o644, "gemini-policy"))
    codex = _enabled(spec, "codex")
    if codex and codex.managed_settings:
        out.append((CODEX_REQUIREMENTS[facts.os], codex_requirements(spec, facts), 0o644,
                    "codex-requirements"))
    return out


def _user_plan(spec: Spec, facts: HostFacts) -> list[Entry]:
    """Paths relative to the user's home."""
    out: list[Entry] = []
    if _enabled(spec, "claude_desktop"):
        out.append((CLAUDE_DESKTOP[facts.os], json_bytes(mcp_claude_desktop(spec)), 0o644,
                    "mcp-config"))
    if _enabled(spec, "cursor"):
        out.append((".cursor/mcp.json", json_bytes(mcp_cursor(spec)), 0o644, "mcp-config"))
    if _enabled(spec, "windsurf"):
        out.append((".codeium/windsurf/mcp_config.json", json_bytes(mcp_windsurf(spec)), 0o644,
                    "mcp-config"))
    codex = _enabled(spec, "codex")
    if codex:
        out.append((".codex/config.toml", toml_bytes(codex_config(spec)), 0o644,
                    "codex-config"))
        if codex.hooks and not codex.managed_settings:
            # only where no managed requirements.toml carries them: a user's
            # hooks.json runs only once that user has trusted it
            out.append((".codex/hooks.json", json_bytes(codex_hooks(spec, facts)), 0o644,
                        "codex-hooks"))
    return out


def _project_plan(spec: Spec, facts: HostFacts) -> list[Entry]:
    """Paths relative to the repository root."""
    out: list[Entry] = []
    if _enabled(spec, "claude"):
        out.append((".claude/settings.json",
                    json_bytes(claude_settings(spec, facts, managed=False)), 0o644,
                    "claude-settings"))
        out.append((".mcp.json", json_bytes(mcp_claude(spec)), 0o644, "mcp-config"))
    if _enabled(spec, "vscode"):
        out.append((".vscode/mcp.json", json_bytes(mcp_vscode(spec)), 0o644, "mcp-config"))
    cursor = _enabled(spec, "cursor")
    if cursor:
        if cursor.hooks:
            out.append((".cursor/hooks.json", json_bytes(cursor_hooks(spec, facts)), 0o644,
                        "cursor-hooks"))
        out.append((".cursor/mcp.json", json_bytes(mcp_cursor(spec)), 0o644, "mcp-config"))
    gemini = _enabled(spec, "gemini")
    if gemini:
        out.append((".gemini/settings.json",
                    json_bytes(gemini_settings(spec, facts, system=False)), 0o644,
                    "gemini-settings"))
    return out


def _plans(spec: Spec, facts: HostFacts) -> tuple[list[Entry], list[Entry], list[Entry]]:
    """Everything but the base folders depends only on the spec, the OS and the
    interpreter path, so a fleet renders each document once per spec."""
    plans: tuple[list[Entry], list[Entry], list[Entry]] = memo(
        spec, ("agents", facts.os, facts.python),
        lambda: (_system_plan(spec, facts), _user_plan(spec, facts),
                 _project_plan(spec, facts)))
    return plans


def _under(base: str, rel: str) -> str:
    return base.replace("\\", "/").rstrip("/") + "/" + rel


def project_artifacts(spec: Spec, facts: HostFacts, repo: str) -> list[Artifact]:
    """The repository-level files for one repository (what ``sandbox init`` installs)."""
    return [Artifact(_under(repo, rel), content, mode, kind)
            for rel, content, mode, kind in _plans(spec, facts)[2]]


def render(spec: Spec, facts: HostFacts) -> Iterable[Artifact]:
    system, per_user, per_repo = _plans(spec, facts)
    out = [Artifact(*entry) for entry in system]
    for user in facts.users:
        home = user.home
        out += [Artifact(_under(home, rel), c, m, k) for rel, c, m, k in per_user]
    for repo in facts.repositories:
        out += [Artifact(_under(repo, rel), c, m, k) for rel, c, m, k in per_repo]
    return out
