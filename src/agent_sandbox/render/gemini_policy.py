"""Gemini CLI policy rules (its policy engine's TOML): allow the tools the
BeforeTool hook judges, so the hook and not a prompt decides; and admin-tier
deny rules that still hold when a user or repository switches the hooks off.

Pure: spec -> TOML bytes. The backstop only denies; it never allows a call the
hook would judge.
"""

from __future__ import annotations

from typing import Any

import tomli_w

from ..spec.models import Spec
from .agent_mcp import servers_for

# Gemini CLI tools whose calls our BeforeTool hook judges; without an allow
# rule a headless run rejects them before the hook is asked.
GEMINI_HOOKED_TOOLS = ("run_shell_command", "write_file", "replace", "web_fetch")
GEMINI_POLICY = {
    "linux": "/etc/gemini-cli/policies/agent-sandbox.toml",
    "macos": "/Library/Application Support/GeminiCli/policies/agent-sandbox.toml",
    "windows": "C:/ProgramData/gemini-cli/policies/agent-sandbox.toml",
}


# Gemini CLI tools whose arguments name files or hosts.
GEMINI_PATH_TOOLS = ("run_shell_command", "read_file", "read_many_files", "list_directory",
                     "glob", "grep_search", "write_file", "replace", "web_fetch")


def _tail_regex(path: str) -> str | None:
    """A regular expression for where a ``deny_read`` path shows up in a tool's
    arguments: its tail below ``~`` or ``**`` (the home folder differs per user),
    or the whole absolute path."""
    import re

    rule = path.rstrip("/")
    if rule.startswith("~/"):
        tail = rule[2:]
    elif rule.startswith("**/"):
        tail = rule[3:]
    elif rule.startswith("/"):
        return re.escape(rule) + r"(/|\b|$)"
    else:
        return None
    if not tail or any(c in tail for c in "[]{}?"):
        return None
    body = re.escape(tail).replace(r"\*", r"[^/\s\"']*")
    return r"(^|[/~\s\"'=])" + body + r"(/|\b|$)"


def gemini_backstop(spec: Spec) -> list[dict[str, Any]]:
    """Admin-tier deny rules that hold when the hooks do not run (a user's or a
    repository's ``hooksConfig`` can switch Gemini CLI's hooks off, and nothing
    in Gemini CLI prevents it): any tool whose arguments name a ``deny_read``
    path or a denied domain is refused. A backstop for the plain forms only; the
    hook, which parses commands, is the real judge."""
    import re

    rules: list[dict[str, Any]] = []
    for path in spec.filesystem.deny_read:
        rx = _tail_regex(path)
        if rx is not None:
            rules.append({"toolName": list(GEMINI_PATH_TOOLS), "argsPattern": rx,
                          "decision": "deny", "priority": 999,
                          "denyMessage": f"agent-sandbox: {path} is in filesystem.deny_read"})
    for domain in spec.network.denied_domains:
        d = str(domain)
        if d == "*":
            continue
        body = re.escape(d.removeprefix("*."))
        rx = (r"\." if d.startswith("*.") else r"(^|[/@\s\"'.])") + body + r"($|[:/\s\"'])"
        rules.append({"toolName": ["run_shell_command", "web_fetch"], "argsPattern": rx,
                      "decision": "deny", "priority": 999,
                      "denyMessage": f"agent-sandbox: {d} is in network.denied_domains"})
    return rules


def gemini_policy(spec: Spec) -> bytes:
    """Gemini CLI policy rules (admin tier in the system policies folder, or a
    workspace policy): the tools our hook judges are allowed here so the hook,
    not a prompt a headless run cannot answer, decides; so are the tools of the
    MCP servers the spec declares, whose calls the hook judges too."""
    rules: list[dict[str, Any]] = [{
        # the hook judges redirections itself: no downgrade to a prompt here
        "toolName": list(GEMINI_HOOKED_TOOLS), "decision": "allow", "priority": 900,
        "allowRedirection": True}]
    for name, _srv in servers_for(spec, "gemini"):
        rules.append({"toolName": "*", "mcpName": name, "decision": "allow",
                      "priority": 900})
    rules += gemini_backstop(spec)
    head = ("# Managed by agent-sandbox: rendered from the spec, do not edit by hand.\n"
            "# The agent-sandbox BeforeTool hook judges every call these rules let through.\n")
    return (head + tomli_w.dumps({"rule": rules})).encode()
